// The same-machine reference for bench/run_benchmarks.py: times the current XNNPACK (the library the official
// ExecuTorch runtime hands XNNPACK-lowered programs to) on the networks of the fixture programs, as
// benchmarks.json timed the official runtime (5 warm-up and 30 timed runs; the median and the minimum, one
// JSON line). Networks: XNNPACK's own MobileNetV2 definitions from its source tree (fp32 and qs8, random
// weights, NHWC input: no layout changes), and the fixture set's small programs rebuilt node for node with
// random weights (smallcnn: three 3x3 convolutions with ReLU, mean, linear; mlp_dq8: two dynamically
// quantized linear layers). Built by build.sh against an XNNPACK checkout; see README.md.
#include <pthreadpool.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/subgraph/models.h"
#include "include/xnnpack.h"

namespace {
std::mt19937 rng(1);
// XNNPACK keeps pointers to constant data (weights, scales): they live until the process ends.
std::vector<std::vector<float>> constant_floats;
std::vector<std::vector<int8_t>> constant_bytes;

const float* random_floats(size_t n, float scale) {
  std::uniform_real_distribution<float> d(-scale, scale);
  constant_floats.emplace_back(n + 16);
  for (auto& v : constant_floats.back()) v = d(rng);
  return constant_floats.back().data();
}
const int8_t* random_bytes(size_t n) {
  std::uniform_int_distribution<int> d(-127, 127);
  constant_bytes.emplace_back(n + 16);
  for (auto& v : constant_bytes.back()) v = static_cast<int8_t>(d(rng));
  return constant_bytes.back().data();
}
// Any failure ends the process with the call that failed.
#define CHECK(x)                                \
  do {                                          \
    if ((x) != xnn_status_success) {            \
      std::fprintf(stderr, "failed: %s\n", #x); \
      std::exit(1);                             \
    }                                           \
  } while (0)
uint32_t tensor(xnn_subgraph_t sg, std::vector<size_t> dims, const void* data = nullptr,
                uint32_t ext = XNN_INVALID_VALUE_ID, uint32_t flags = 0) {
  uint32_t id;
  CHECK(xnn_define_tensor_value(sg, xnn_datatype_fp32, dims.size(), dims.data(), data, ext, flags, &id));
  return id;
}
// A 3x3 convolution, padding 1, with ReLU, over NHWC.
uint32_t conv3x3(xnn_subgraph_t sg, uint32_t in, size_t b, size_t h, size_t w, size_t cin, size_t cout, size_t s,
                 size_t& oh, size_t& ow) {
  oh = (h + 2 - 3) / s + 1;
  ow = (w + 2 - 3) / s + 1;
  uint32_t f = tensor(sg, {cout, 3, 3, cin}, random_floats(cout * 9 * cin, 0.2f));
  uint32_t bias = tensor(sg, {cout}, random_floats(cout, 0.1f));
  uint32_t out = tensor(sg, {b, oh, ow, cout});
  CHECK(xnn_define_convolution_2d(sg, 1, 1, 1, 1, 3, 3, s, s, 1, 1, 1, cin, cout, 0.0f, INFINITY, in, f, bias, out, 0));
  return out;
}
// with_classifier false: the multi-method program's `features` method (pooled features, no linear layer).
xnn_subgraph_t smallcnn(size_t b, bool with_classifier, size_t& in_numel, size_t& out_numel) {
  xnn_subgraph_t sg;
  CHECK(xnn_create_subgraph(2, 0, &sg));
  uint32_t x = tensor(sg, {b, 32, 32, 3}, nullptr, 0, XNN_VALUE_FLAG_EXTERNAL_INPUT);
  size_t h, w, h2, w2, h3, w3;
  uint32_t c1 = conv3x3(sg, x, b, 32, 32, 3, 16, 1, h, w);
  uint32_t c2 = conv3x3(sg, c1, b, h, w, 16, 32, 2, h2, w2);
  uint32_t c3 = conv3x3(sg, c2, b, h2, w2, 32, 64, 2, h3, w3);
  const size_t axes[2] = {1, 2};
  in_numel = b * 32 * 32 * 3;
  if (!with_classifier) {
    uint32_t pooled = tensor(sg, {b, 64}, nullptr, 1, XNN_VALUE_FLAG_EXTERNAL_OUTPUT);
    CHECK(xnn_define_static_reduce(sg, xnn_reduce_mean, 2, axes, c3, pooled, 0));
    out_numel = b * 64;
    return sg;
  }
  uint32_t pooled = tensor(sg, {b, 64});
  CHECK(xnn_define_static_reduce(sg, xnn_reduce_mean, 2, axes, c3, pooled, 0));
  uint32_t fw = tensor(sg, {10, 64}, random_floats(640, 0.2f)), fb = tensor(sg, {10}, random_floats(10, 0.1f));
  uint32_t y = tensor(sg, {b, 10}, nullptr, 1, XNN_VALUE_FLAG_EXTERNAL_OUTPUT);
  CHECK(xnn_define_fully_connected(sg, -INFINITY, INFINITY, pooled, fw, fb, y, 0));
  out_numel = b * 10;
  return sg;
}
uint32_t qd8_linear(xnn_subgraph_t sg, uint32_t in, size_t m, size_t k, size_t n, float lo, uint32_t out_ext,
                    uint32_t out_flags) {
  uint32_t q;
  const size_t qdims[2] = {m, k};
  CHECK(
      xnn_define_dynamically_quantized_tensor_value(sg, xnn_datatype_qdint8, 2, 1, qdims, XNN_INVALID_VALUE_ID, 0, &q));
  CHECK(xnn_define_unary(sg, xnn_unary_convert, nullptr, in, q, 0));
  uint32_t wid;
  const size_t wdims[2] = {n, k};
  const float* scale = random_floats(n, 0.01f);
  for (size_t i = 0; i < n; ++i) constant_floats.back()[i] = std::abs(constant_floats.back()[i]) + 1e-3f;
  CHECK(xnn_define_channelwise_quantized_tensor_value(sg, xnn_datatype_qcint8, scale, 2, 0, wdims, random_bytes(n * k),
                                                      XNN_INVALID_VALUE_ID, 0, &wid));
  uint32_t bias = tensor(sg, {n}, random_floats(n, 0.1f));
  uint32_t out = tensor(sg, {m, n}, nullptr, out_ext, out_flags);
  CHECK(xnn_define_fully_connected(sg, lo, INFINITY, q, wid, bias, out, 0));
  return out;
}
xnn_subgraph_t mlp_dq8(size_t& in_numel, size_t& out_numel) {
  xnn_subgraph_t sg;
  CHECK(xnn_create_subgraph(2, 0, &sg));
  uint32_t x = tensor(sg, {4, 512}, nullptr, 0, XNN_VALUE_FLAG_EXTERNAL_INPUT);
  uint32_t h = qd8_linear(sg, x, 4, 512, 1024, 0.0f, XNN_INVALID_VALUE_ID, 0);
  qd8_linear(sg, h, 4, 1024, 512, -INFINITY, 1, XNN_VALUE_FLAG_EXTERNAL_OUTPUT);
  in_numel = 4 * 512;
  out_numel = 4 * 512;
  return sg;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: xnnpack_reference "
                 "mobilenet_v2_fp32|mobilenet_v2_qs8|smallcnn_b<N>|smallcnn_features_b<N>|mlp_dq8 THREADS\n");
    return 2;
  }
  const std::string model = argv[1];
  const int threads = std::atoi(argv[2]);
  CHECK(xnn_initialize(nullptr));
  pthreadpool_t pool = pthreadpool_create(threads);
  size_t in_numel = 224 * 224 * 3, out_numel = 1001;
  xnn_subgraph_t sg = nullptr;
  if (model == "mobilenet_v2_fp32")
    sg = models::FP32MobileNetV2();
  else if (model == "mobilenet_v2_qs8")
    sg = models::QS8MobileNetV2();
  else if (model.rfind("smallcnn_b", 0) == 0)
    sg = smallcnn(std::stoul(model.substr(10)), true, in_numel, out_numel);
  else if (model.rfind("smallcnn_features_b", 0) == 0)
    sg = smallcnn(std::stoul(model.substr(19)), false, in_numel, out_numel);
  else if (model == "mlp_dq8")
    sg = mlp_dq8(in_numel, out_numel);
  if (sg == nullptr) {
    std::fprintf(stderr, "unknown model %s\n", model.c_str());
    return 2;
  }
  // XNNREF_PROFILE=1: also print each operator's time of the last run (XNNPACK's basic profiling).
  const bool profile = std::getenv("XNNREF_PROFILE") != nullptr;
  xnn_runtime_t rt = nullptr;
  CHECK(xnn_create_runtime_v2(sg, pool, profile ? XNN_FLAG_BASIC_PROFILING : 0, &rt));
  std::vector<float> in(in_numel + 64), out(out_numel + 64);
  for (size_t i = 0; i < in.size(); ++i) in[i] = float((i * 7919) % 255) / 255.f - 0.5f;
  xnn_external_value ext[2] = {{0, in.data()}, {1, out.data()}};
  CHECK(xnn_reshape_runtime(rt));
  CHECK(xnn_setup_runtime_v2(rt, 2, ext));
  for (int i = 0; i < 5; ++i) CHECK(xnn_invoke_runtime(rt));
  std::vector<double> ms;
  for (int i = 0; i < 30; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    xnn_invoke_runtime(rt);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  if (profile) {
    size_t count = 0, size = 0;
    CHECK(xnn_get_runtime_profiling_info(rt, xnn_profile_info_num_operators, sizeof(count), &count, &size));
    std::vector<char> names;
    xnn_get_runtime_profiling_info(rt, xnn_profile_info_operator_name, 0, nullptr, &size);
    names.resize(size);
    CHECK(xnn_get_runtime_profiling_info(rt, xnn_profile_info_operator_name, names.size(), names.data(), &size));
    std::vector<uint64_t> us(count);
    CHECK(xnn_get_runtime_profiling_info(rt, xnn_profile_info_operator_timing, us.size() * sizeof(uint64_t), us.data(),
                                         &size));
    const char* name = names.data();
    for (size_t i = 0; i < count; ++i, name += std::strlen(name) + 1) {
      std::fprintf(stderr, "%3zu %-40s %8llu us\n", i, name, static_cast<unsigned long long>(us[i]));
    }
  }
  std::printf("{\"model\": \"%s\", \"threads\": %d, \"median_ms\": %.4f, \"min_ms\": %.4f}\n", model.c_str(), threads,
              (ms[14] + ms[15]) / 2, ms[0]);
  xnn_delete_runtime(rt);
  xnn_delete_subgraph(sg);
  pthreadpool_destroy(pool);
  return 0;
}
