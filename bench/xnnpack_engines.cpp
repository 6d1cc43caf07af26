// Times the nodes that both this build's XNNPACK and the XNNPACK delegate's own kernels can run, one engine
// against the other, on the same graph, inputs and threads, in interleaved rounds. Its table is where the
// delegate's measured choices (src/backends/xnnpack/xnn_rules.cpp, namespace measured) come from; the
// delegate's README ("What runs where") records the figures for each Debian release's XNNPACK.
//
//   build/bench/etnp_bench_xnnpack_engines [--rounds N] [--threads 1,2] [--filter SUBSTRING]
//
// Per case and thread count it prints the minimum time per run of each engine over the rounds (each round
// runs each engine's executor back to back, alternating which goes first), their ratio, the engine the
// delegate picks by default, and the largest difference between the two engines' outputs (a large or
// non-finite one is also reported on stderr, with where it is).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/xnnpack/xnn_executor.h"
#include "backends/xnnpack/xnn_graph.h"
#include "backends/xnnpack/xnn_ops.h"
#include "etnp/threadpool.h"
#include "kernel_test_util.h"
#include "xnnpack_graph_builder.h"

namespace {

using etnp::EValue;
using etnp::ScalarType;
using etnp::ThreadPool;
using etnp::testing::OwnedTensor;
using etnp::testing::random_floats;
using etnp::xnn::Engines;
using etnp::xnn::Executor;
using etnp::xnn::ExecutorOptions;
using etnp::xnn::testing::GraphBuilder;
using etnp::xnn::testing::XNodeUnion;
using DT = fb_xnnpack::XNNDatatype;

/// A single-node (or convert + node) graph and its fp32 input and output shapes.
struct Case {
  std::string name;
  std::vector<uint8_t> payload;
  std::vector<std::vector<int64_t>> inputs;
  std::vector<int64_t> output;
};

std::vector<uint32_t> u32(const std::vector<int64_t>& dims) { return {dims.begin(), dims.end()}; }

Case unary_case(const char* name, XNodeUnion kind, std::vector<int64_t> dims) {
  GraphBuilder g;
  const uint32_t x = g.input(u32(dims), 0), y = g.output(u32(dims), 1);
  g.unary(kind, x, y);
  return {name, g.payload(), {dims}, dims};
}

Case softmax_case(std::vector<int64_t> dims) {
  GraphBuilder g;
  const uint32_t x = g.input(u32(dims), 0), y = g.output(u32(dims), 1);
  g.unary(XNodeUnion::XNNSoftmax, x, y);
  std::string name = "softmax";
  for (int64_t d : dims) name += (name == "softmax" ? " " : "x") + std::to_string(d);
  return {name, g.payload(), {dims}, dims};
}

Case linear_f32_case(int64_t rows, int64_t k, int64_t n) {
  GraphBuilder g;
  const uint32_t x = g.input({uint32_t(rows), uint32_t(k)}, 0);
  const uint32_t w = g.f32_constant({uint32_t(n), uint32_t(k)}, random_floats(size_t(n * k), -0.1f, 0.1f, 7));
  const uint32_t b = g.f32_constant({uint32_t(n)}, random_floats(size_t(n), -1.0f, 1.0f, 8));
  const uint32_t y = g.output({uint32_t(rows), uint32_t(n)}, 1);
  g.fully_connected(x, w, b, y);
  return {"fully-connected f32 " + std::to_string(rows) + "x" + std::to_string(k) + "->" + std::to_string(n),
          g.payload(), {{rows, k}}, {rows, n}};
}

/// A dynamically quantized linear: convert (fp32 -> qd8, the delegate's kernel either way) then the layer.
/// `bits` 8 (qc8w), 4 (qc4w) or 4 with `group` > 0 (qb4w).
Case linear_qd8_case(int64_t rows, int64_t k, int64_t n, int bits, int group) {
  GraphBuilder g;
  const uint32_t x = g.input({uint32_t(rows), uint32_t(k)}, 0);
  const uint32_t xq = g.dynamic_quant({uint32_t(rows), uint32_t(k)}, 1);
  std::mt19937 rng(11);
  uint32_t w;
  if (bits == 8) {
    std::vector<int8_t> codes(size_t(n * k));
    for (int8_t& c : codes) c = static_cast<int8_t>(int(rng() % 255) - 127);
    w = g.per_channel(DT::xnn_datatype_qcint8, {uint32_t(n), uint32_t(k)}, random_floats(size_t(n), 1e-3f, 2e-3f, 3),
                      0, g.constant(codes.data(), codes.size()));
  } else {
    std::vector<uint8_t> packed(size_t(n * k / 2));
    for (uint8_t& c : packed) c = static_cast<uint8_t>(rng());
    const uint32_t wc = g.constant(packed.data(), packed.size());
    if (group == 0) {
      w = g.per_channel(DT::xnn_datatype_qcint4, {uint32_t(n), uint32_t(k)}, random_floats(size_t(n), 1e-2f, 2e-2f, 4),
                        0, wc);
    } else {
      std::vector<uint16_t> bf16(size_t(n * (k / group)));
      for (uint16_t& s : bf16) s = static_cast<uint16_t>(0x3C00 + rng() % 64);  // about 0.008 .. 0.016
      w = g.blockwise({uint32_t(n), uint32_t(k)}, bf16, group, wc);
    }
  }
  const uint32_t b = g.f32_constant({uint32_t(n)}, random_floats(size_t(n), -1.0f, 1.0f, 9));
  const uint32_t y = g.output({uint32_t(rows), uint32_t(n)}, 1);
  g.unary(XNodeUnion::XNNConvert, x, xq);
  g.fully_connected(xq, w, b, y);
  const std::string weights = bits == 8 ? "qc8w" : group == 0 ? "qc4w" : "qb4w g" + std::to_string(group);
  return {"fully-connected qd8 x " + weights + " " + std::to_string(rows) + "x" + std::to_string(k) + "->" +
              std::to_string(n),
          g.payload(), {{rows, k}}, {rows, n}};
}

Case batch_matmul_case(std::vector<int64_t> a, std::vector<int64_t> b) {
  GraphBuilder g;
  std::vector<int64_t> out = a;
  out.back() = b.back();
  const uint32_t x = g.input(u32(a), 0), y = g.input(u32(b), 1), z = g.output(u32(out), 2);
  g.binary(XNodeUnion::XNNBatchMatrixMultiply, x, y, z);
  auto dims = [](const std::vector<int64_t>& d) {
    std::string s;
    for (int64_t v : d) s += (s.empty() ? "" : "x") + std::to_string(v);
    return s;
  };
  return {"batch matmul " + dims(a) + " @ " + dims(b), g.payload(), {a, b}, out};
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  const std::pair<const char*, XNodeUnion> unary[] = {
      {"tanh", XNodeUnion::XNNTanh},   {"exp", XNodeUnion::XNNExp}, {"log", XNodeUnion::XNNLog},
      {"gelu", XNodeUnion::XNNGelu},   {"rsqrt", XNodeUnion::XNNReciprocalSquareRoot},
      {"sin", XNodeUnion::XNNSin},     {"cos", XNodeUnion::XNNCos}};
  for (const auto& [name, kind] : unary) {
    for (int64_t rows : {1, 64}) {
      cases.push_back(unary_case(name, kind, {rows, 3072}));
      cases.back().name += " " + std::to_string(rows) + "x3072";
    }
  }
  cases.push_back(softmax_case({12, 128, 128}));
  cases.push_back(softmax_case({12, 1, 129}));
  cases.push_back(softmax_case({12, 16, 16}));
  cases.push_back(softmax_case({1, 1000}));
  for (auto [rows, k, n] : {std::array<int64_t, 3>{1, 768, 3072}, {64, 768, 3072}, {3136, 144, 24}, {784, 192, 64}}) {
    cases.push_back(linear_f32_case(rows, k, n));
  }
  for (int64_t rows : {1, 64}) {
    cases.push_back(linear_qd8_case(rows, 2048, 2048, 8, 0));
    cases.push_back(linear_qd8_case(rows, 2048, 2048, 4, 0));
    for (int group : {32, 64, 128, 256}) cases.push_back(linear_qd8_case(rows, 2048, 2048, 4, group));
  }
  cases.push_back(batch_matmul_case({12, 128, 64}, {12, 64, 128}));
  cases.push_back(batch_matmul_case({12, 1, 64}, {12, 64, 129}));
  return cases;
}

/// One engine's executor with its own tensors (inputs filled with the same values for both engines).
struct Runner {
  std::unique_ptr<Executor> executor;
  std::vector<std::unique_ptr<OwnedTensor>> tensors;
  std::vector<EValue> args;
  std::vector<EValue*> ptrs;

  Runner(const Case& c, Engines engines) {
    executor = std::make_unique<Executor>(etnp::xnn::check_graph(etnp::xnn::parse_graph(c.payload, nullptr)),
                                          ExecutorOptions{false, engines, {}});
    uint32_t seed = 1;
    for (const auto& dims : c.inputs) {
      size_t n = 1;
      for (int64_t d : dims) n *= size_t(d);
      // Positive inputs keep log and rsqrt finite; rows of different ranges get different dynamic quantization.
      std::vector<float> values = random_floats(n, 0.05f, 3.0f, seed++);
      const size_t row = size_t(dims.back());
      for (size_t i = 0; i < n; ++i) values[i] *= 1.0f + float((i / row) % 7);
      tensors.push_back(OwnedTensor::make<float>(ScalarType::Float, dims, std::move(values)));
    }
    tensors.push_back(OwnedTensor::make<float>(ScalarType::Float, c.output, {}));
    for (auto& t : tensors) args.push_back(EValue::from_tensor(&t->tensor));
    for (auto& a : args) ptrs.push_back(&a);
  }
  void run(ThreadPool& pool) { executor->execute(ptrs, pool); }
  std::vector<float> output() const { return tensors.back()->values<float>(); }
  bool library_ran() const { return executor->stats().xnnpack_operators > 0; }
};

double seconds_per_run(Runner& r, ThreadPool& pool, int reps) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) r.run(pool);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / reps;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 15;
  std::vector<size_t> thread_counts = {1, 2};
  std::string filter;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--rounds" && i + 1 < argc) {
      rounds = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--threads" && i + 1 < argc) {
      thread_counts.clear();
      for (const char* p = argv[++i]; *p != '\0';) {
        thread_counts.push_back(std::strtoul(p, const_cast<char**>(&p), 10));
        if (*p == ',') ++p;
      }
    } else if (a == "--filter" && i + 1 < argc) {
      filter = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--rounds N] [--threads 1,2] [--filter SUBSTRING]\n", argv[0]);
      return 2;
    }
  }
  if (etnp::xnn::ops::initialize() != xnn_status_success) {
    std::fprintf(stderr, "XNNPACK cannot be initialized on this machine\n");
    return 1;
  }
  std::printf("XNNPACK API: %s; %d rounds; minimum microseconds per run\n\n",
              etnp::xnn::ops::reshape_api() ? "create/reshape/setup (2024)" : "create/setup (2022)", rounds);
  std::printf("| case | threads | own us | xnnpack us | xnnpack / own | default | max diff |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const Case& c : all_cases()) {
    if (!filter.empty() && c.name.find(filter) == std::string::npos) continue;
    Runner own(c, Engines::Own), library(c, Engines::Library), measured(c, Engines::Measured);
    const bool both = library.library_ran() && !own.library_ran();
    for (size_t threads : thread_counts) {
      ThreadPool pool(threads);
      // Repetitions per timing: enough for about 2 ms.
      own.run(pool);
      const double once = seconds_per_run(own, pool, 1);
      const int reps = std::clamp(static_cast<int>(2e-3 / std::max(once, 1e-7)), 1, 2000);
      double best_own = 1e9, best_library = 1e9;
      for (int r = 0; r < rounds; ++r) {
        if (r % 2 == 0) {
          best_own = std::min(best_own, seconds_per_run(own, pool, reps));
          if (both) best_library = std::min(best_library, seconds_per_run(library, pool, reps));
        } else {
          if (both) best_library = std::min(best_library, seconds_per_run(library, pool, reps));
          best_own = std::min(best_own, seconds_per_run(own, pool, reps));
        }
      }
      if (!both) {
        std::printf("| %s | %zu | %.1f | - | - | own | - |\n", c.name.c_str(), threads, best_own * 1e6);
        continue;
      }
      const std::vector<float> a = own.output(), b = library.output();
      double diff = 0;
      size_t bad_own = 0, bad_library = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        bad_own += std::isfinite(a[i]) ? 0 : 1;
        bad_library += std::isfinite(b[i]) ? 0 : 1;
        if (std::isfinite(b[i])) diff = std::max(diff, double(std::fabs(a[i] - b[i])));
      }
      // A large difference means one engine is wrong (as the 2024 library's qd8 kernels were on the last row
      // before the spare row parameters were filled): say where.
      for (size_t i = 0; i < a.size(); ++i) {
        if (std::fabs(a[i] - b[i]) > 1e-2 * (1.0 + std::fabs(a[i]))) {
          std::fprintf(stderr, "%s: first difference at %zu (row %zu): own %g, xnnpack %g\n", c.name.c_str(), i,
                       i / size_t(c.output.back()), a[i], b[i]);
          break;
        }
      }
      if (bad_own + bad_library > 0) {
        std::fprintf(stderr, "%s: %zu non-finite outputs of the own kernel, %zu of XNNPACK's (of %zu)\n",
                     c.name.c_str(), bad_own, bad_library, a.size());
      }
      std::printf("| %s | %zu | %.1f | %.1f | %.2f | %s | %.2g |\n", c.name.c_str(), threads, best_own * 1e6,
                  best_library * 1e6, best_library / best_own, measured.library_ran() ? "xnnpack" : "own", diff);
    }
    std::fflush(stdout);
  }
  return 0;
}
