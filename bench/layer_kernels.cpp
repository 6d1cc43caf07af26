// Times the layers of a 224x224 MobileNetV2 one kernel at a time, at each CPU level this machine has (the level
// capped as the tests cap it), so that one run compares a kernel with the lower level's on the same machine: the
// fp32 depthwise convolutions (compute::DepthwiseConv, 3x3, and 5x5 as EfficientNet's), the int8 ones
// (xnn::DepthwiseConvQS8) and the 1x1 convolutions as the packed GEMM runs them (compute::PackedGemm). One
// thread, the input hot (the same buffers every repetition): what the kernel itself reaches, not the network's
// memory traffic. RESULTS.md's Section 1 notes quote it.
//
//   build/bench/etnp_bench_layer_kernels [--reps N] [--filter SUBSTRING]
//
// Per layer and level: the best time of N repetitions (default 200) and multiply-adds per second.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backends/xnnpack/xnn_kernels.h"
#include "compute/depthwise.h"
#include "compute/packed_gemm.h"
#include "core/cpu_features.h"
#include "etnp/threadpool.h"

namespace {

using Clock = std::chrono::steady_clock;

double best_us(int reps, const std::function<void()>& run) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    run();
    best = std::min(best, std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  return best;
}

struct Depthwise {
  size_t h, w, c, k, s;
};

// MobileNetV2's depthwise layers (3x3), and EfficientNet-B0's 5x5 ones, at 224x224.
const Depthwise kDepthwise[] = {{112, 112, 32, 3, 1}, {112, 112, 96, 3, 2}, {56, 56, 144, 3, 1}, {56, 56, 144, 3, 2},
                                {28, 28, 192, 3, 1},  {28, 28, 192, 3, 2},  {14, 14, 384, 3, 1}, {14, 14, 576, 3, 1},
                                {14, 14, 576, 3, 2},  {7, 7, 960, 3, 1},    {28, 28, 240, 5, 1}, {14, 14, 672, 5, 1},
                                {7, 7, 1152, 5, 1}};

struct Pointwise {
  size_t rows, k, n;
};

// MobileNetV2's 1x1 convolutions (pixels x input channels x output channels), one of each shape.
const Pointwise kPointwise[] = {{12544, 32, 16}, {12544, 16, 96}, {3136, 96, 24}, {3136, 24, 144}, {3136, 144, 24},
                                {784, 144, 32},  {784, 32, 192},  {784, 192, 32}, {196, 192, 64}, {196, 64, 384},
                                {196, 384, 64},  {196, 96, 576},  {196, 576, 96}, {49, 576, 160}, {49, 160, 960},
                                {49, 960, 160},  {49, 320, 1280}};

}  // namespace

int main(int argc, char** argv) {
  int reps = 200;
  std::string filter;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--filter" && i + 1 < argc) {
      filter = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--reps N] [--filter SUBSTRING]\n", argv[0]);
      return 2;
    }
  }
  etnp::ThreadPool pool(1);
  const etnp::ThreadPool::Use use(pool);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  auto floats = [&](size_t n) {
    std::vector<float> v(n);
    for (auto& x : v) x = unit(rng);
    return v;
  };
  const etnp::CpuLevel top = etnp::cpu_level();
  std::printf("%-32s %-12s %10s %10s\n", "layer", "level", "us", "GMAC/s");
  auto report = [&](const std::string& name, double macs, const std::function<void()>& run) {
    if (!filter.empty() && name.find(filter) == std::string::npos) return;
    for (etnp::CpuLevel level : etnp::cpu_levels()) {
      if (level == etnp::CpuLevel::portable || level > top) continue;
      etnp::cap_cpu_level(level);
      const double us = best_us(reps, run);
      std::printf("%-32s %-12s %10.1f %10.1f\n", name.c_str(), etnp::cpu_level_name(level), us, macs / us / 1e3);
    }
    etnp::lift_cpu_level_cap();
  };
  for (const Depthwise& d : kDepthwise) {
    const size_t pad = d.k / 2;
    const size_t oh = (d.h + 2 * pad - d.k) / d.s + 1, ow = (d.w + 2 * pad - d.k) / d.s + 1;
    const std::string shape = std::to_string(d.h) + "x" + std::to_string(d.w) + "x" + std::to_string(d.c) + " " +
                              std::to_string(d.k) + "x" + std::to_string(d.k) + " s" + std::to_string(d.s);
    const double macs = double(oh * ow * d.c * d.k * d.k);
    {
      const auto in = floats(d.h * d.w * d.c), f = floats(d.k * d.k * d.c), b = floats(d.c);
      std::vector<float> out(oh * ow * d.c), scratch;
      const etnp::compute::DepthwiseConv conv(f.data(), b.data(), d.c, d.k, d.k, d.s, d.s, pad, pad);
      report("dw f32 " + shape, macs,
             [&] { conv.run(in.data(), 1, d.h, d.w, oh, ow, 0.0f, 6.0f, out.data(), scratch); });
    }
    if (etnp::xnn::DepthwiseConvQS8::supported(d.c, d.k)) {
      std::vector<int8_t> in(d.h * d.w * d.c), f(d.k * d.k * d.c), out(oh * ow * d.c);
      for (auto& v : in) v = static_cast<int8_t>(rng());
      for (auto& v : f) v = static_cast<int8_t>(rng() % 255 - 127);
      std::vector<int32_t> b(d.c, 100);
      std::vector<float> scales(d.c, 1.0f / 4096);
      etnp::xnn::DepthwiseConvQS8::Params p;
      p.channels = d.c;
      p.kernel_h = p.kernel_w = d.k;
      p.stride_h = p.stride_w = d.s;
      p.pad_top = p.pad_left = pad;
      const etnp::xnn::DepthwiseConvQS8 conv(f.data(), b.data(), scales.data(), p);
      std::vector<uint8_t> scratch;
      report("dw int8 " + shape, macs, [&] { conv.run(in.data(), 1, d.h, d.w, oh, ow, out.data(), scratch); });
    }
  }
  for (const Pointwise& g : kPointwise) {
    const auto a = floats(g.rows * g.k), w = floats(g.n * g.k), b = floats(g.n);
    std::vector<float> out(g.rows * g.n);
    const etnp::compute::PackedGemm gemm(w.data(), true, g.k, g.n, b.data());
    const std::string name =
        "1x1 f32 " + std::to_string(g.rows) + "x" + std::to_string(g.k) + "x" + std::to_string(g.n);
    report(name, double(g.rows * g.k * g.n), [&] { gemm.run(a.data(), g.rows, g.k, 0.0f, 6.0f, out.data()); });
  }
  return 0;
}
