// The nodes both XNNPACK and the delegate's own kernels can run: each engine against an independent reference
// in doubles, the engine each choice (measured, xnnpack, own) puts on the node for this build's library, the
// same operators across shape changes, and ETNP_XNNPACK_ENGINE through the backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/xnnpack/conv_qs8.h"
#include "backends/xnnpack/xnn_executor.h"
#include "backends/xnnpack/xnn_graph.h"
#include "backends/xnnpack/xnn_kernels.h"
#include "backends/xnnpack/xnn_ops.h"
#include "backends/xnnpack/xnnpack_backend.h"
#include "etnp/backend.h"
#include "kernel_test_util.h"
#include "xnnpack_graph_builder.h"

namespace etnp::xnn {
namespace {

using etnp::testing::OwnedTensor;
using etnp::testing::random_floats;
using testing::GraphBuilder;
using testing::XNodeUnion;
using DT = fb_xnnpack::XNNDatatype;

const bool kReshapeApi = ops::reshape_api();

struct Ran {
  std::vector<std::vector<float>> outputs;
  ExecutorStats stats;
};

/// Builds the payload's executor with `engines` and runs it once per input set (the shapes may change
/// between runs); `outputs` holds the last run's outputs of the given shapes.
Ran run_graph(const std::vector<uint8_t>& payload, Engines engines,
              const std::vector<std::vector<std::pair<std::vector<int64_t>, std::vector<float>>>>& runs,
              const std::vector<std::vector<int64_t>>& output_shapes, std::vector<std::vector<float>>* each = nullptr) {
  Executor ex(check_graph(parse_graph(payload, nullptr)), ExecutorOptions{false, engines, {}});
  Ran r;
  for (const auto& inputs : runs) {
    std::vector<std::unique_ptr<OwnedTensor>> t;
    for (const auto& [shape, values] : inputs) t.push_back(OwnedTensor::make<float>(ScalarType::Float, shape, values));
    for (const auto& shape : output_shapes) {
      // Outputs as large as the largest run needs; execute resizes them.
      t.push_back(OwnedTensor::make<float>(ScalarType::Float, shape, {}, ShapeDynamism::DynamicBound));
    }
    std::vector<EValue> args;
    for (auto& x : t) args.push_back(EValue::from_tensor(&x->tensor));
    std::vector<EValue*> ptrs;
    for (auto& a : args) ptrs.push_back(&a);
    ex.execute(ptrs);
    r.outputs.clear();
    for (size_t i = inputs.size(); i < t.size(); ++i) r.outputs.push_back(t[i]->values<float>());
    if (each != nullptr) each->push_back(r.outputs[0]);
  }
  r.stats = ex.stats();
  return r;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, double rel, double abs,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], abs + rel * std::fabs(want[i])) << what << " at " << i;
  }
}

const char* engine_name(Engines e) {
  return e == Engines::Own ? "own" : e == Engines::Library ? "xnnpack" : "measured";
}

// ---- unary functions ------------------------------------------------------------------------------------

struct UnaryCase {
  XNodeUnion kind;
  const char* name;
  std::function<double(double)> reference;
  float lo, hi;
};

TEST(XnnpackEngines, UnaryFunctionsOnBothEngines) {
  const UnaryCase cases[] = {
      {XNodeUnion::XNNTanh, "tanh", [](double x) { return std::tanh(x); }, -6.0f, 6.0f},
      {XNodeUnion::XNNExp, "exp", [](double x) { return std::exp(x); }, -20.0f, 20.0f},
      {XNodeUnion::XNNLog, "log", [](double x) { return std::log(x); }, 1e-3f, 1e3f},
      {XNodeUnion::XNNGelu, "gelu", [](double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }, -6.0f,
       6.0f},
      {XNodeUnion::XNNReciprocalSquareRoot, "rsqrt", [](double x) { return 1.0 / std::sqrt(x); }, 1e-3f, 1e3f},
      {XNodeUnion::XNNSin, "sin", [](double x) { return std::sin(x); }, -10.0f, 10.0f},
      {XNodeUnion::XNNCos, "cos", [](double x) { return std::cos(x); }, -10.0f, 10.0f},
  };
  for (const UnaryCase& c : cases) {
    GraphBuilder g;
    const uint32_t x = g.input({3, 37}, 0), y = g.output({3, 37}, 1);
    g.unary(c.kind, x, y);
    const std::vector<uint8_t> payload = g.payload();
    const std::vector<float> in = random_floats(111, c.lo, c.hi, 5);
    std::vector<double> want(in.size());
    for (size_t i = 0; i < in.size(); ++i) want[i] = c.reference(in[i]);
    for (Engines e : {Engines::Own, Engines::Library, Engines::Measured}) {
      const Ran r = run_graph(payload, e, {{{{3, 37}, in}}}, {{3, 37}});
      const std::string what = std::string(c.name) + " on " + engine_name(e);
      // XNNPACK's functions are a few ulp from the correctly rounded value (sin and cos of arguments up to 10
      // lose a little more in the range reduction).
      expect_close(r.outputs[0], want, 4e-6, 2e-6, what);
      // Only the 2024 library has these functions; where it is built, it runs them unless told otherwise.
      const bool library = kReshapeApi && e != Engines::Own;
      EXPECT_EQ(r.stats.xnnpack_operators, library ? 1u : 0u) << what;
    }
  }
}

// ---- small arithmetic -----------------------------------------------------------------------------------

// Small unclamped additions, subtractions, products and quotients run on the delegate's kernel under the
// measured choice: the IEEE single-precision result of each element, whole, with one operand of one element (either side) and
// broadcast along rows. That is XNNPACK's operator's bits but for NaN (the 2022 library clamps even an unbounded
// result, turning NaN into -inf; the 2024 one and the official runtime's keep NaN, as ours does) and subnormal
// numbers (XNNPACK runs its operators with denormals flushed to zero; the delegate's own kernels, as the portable
// ones, do not). A clamped one and a large one stay on XNNPACK.
TEST(XnnpackEngines, SmallArithmeticOnTheOwnKernelGivesXnnpacksBits) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const float specials[] = {0.0f, -0.0f, kInf, -kInf, std::numeric_limits<float>::quiet_NaN(), 1e-40f, -3e38f};
  auto operand = [&](size_t n, uint32_t seed) {
    std::vector<float> v = random_floats(n, -4.0f, 4.0f, seed);
    for (size_t i = 0; i < std::size(specials) && i * 5 < n; ++i) v[i * 5] = specials[(i + seed) % std::size(specials)];
    return v;
  };
  struct Case {
    std::vector<uint32_t> a, b, out;
    float lo = -kInf;
    bool own;  // under the measured choice
  };
  const Case cases[] = {
      {{4, 24}, {4, 24}, {4, 24}, -kInf, true},  {{4, 24}, {1}, {4, 24}, -kInf, true},
      {{1}, {4, 24}, {4, 24}, -kInf, true},      {{4, 24}, {24}, {4, 24}, -kInf, true},
      {{4, 24}, {4, 24}, {4, 24}, 0.0f, false},  {{64, 32}, {64, 32}, {64, 32}, -kInf, false},
  };
  const XNodeUnion kinds[] = {XNodeUnion::XNNAdd, XNodeUnion::XNNSubtract, XNodeUnion::XNNMultiply,
                              XNodeUnion::XNNDiv};
  for (const XNodeUnion kind : kinds) {
    for (const Case& c : cases) {
      GraphBuilder g;
      const uint32_t a = g.input(c.a, 0), b = g.input(c.b, 1), y = g.output(c.out, 2);
      g.binary(kind, a, b, y, 0, c.lo, kInf);
      const std::vector<uint8_t> payload = g.payload();
      auto numel = [](const std::vector<uint32_t>& d) {
        size_t n = 1;
        for (uint32_t x : d) n *= x;
        return n;
      };
      auto dims = [](const std::vector<uint32_t>& d) { return std::vector<int64_t>(d.begin(), d.end()); };
      const std::vector<float> va = operand(numel(c.a), 3), vb = operand(numel(c.b), 4);
      const std::vector<std::vector<std::pair<std::vector<int64_t>, std::vector<float>>>> runs = {
          {{dims(c.a), va}, {dims(c.b), vb}}};
      const Ran library = run_graph(payload, Engines::Library, runs, {dims(c.out)});
      const Ran measured = run_graph(payload, Engines::Measured, runs, {dims(c.out)});
      const std::string what = std::to_string(static_cast<int>(kind)) + " of " + std::to_string(numel(c.a)) + " and " +
                               std::to_string(numel(c.b)) + (c.lo == 0.0f ? ", clamped" : "");
      EXPECT_EQ(library.stats.xnnpack_operators, 1u) << what;
      EXPECT_EQ(measured.stats.xnnpack_operators, c.own ? 0u : 1u) << what;
      const std::vector<float>& got = measured.outputs[0];
      const std::vector<float>& xnnpack = library.outputs[0];
      ASSERT_EQ(got.size(), numel(c.out)) << what;
      ASSERT_EQ(xnnpack.size(), got.size()) << what;
      if (!c.own) {  // XNNPACK's operator on both
        EXPECT_EQ(std::memcmp(got.data(), xnnpack.data(), got.size() * sizeof(float)), 0) << what;
        continue;
      }
      for (size_t i = 0; i < got.size(); ++i) {
        const float x = va[i % va.size()], z = vb[i % vb.size()];  // whole, one element, or a row repeated
        const float want = kind == XNodeUnion::XNNAdd        ? x + z
                           : kind == XNodeUnion::XNNSubtract ? x - z
                           : kind == XNodeUnion::XNNMultiply ? x * z
                                                             : x / z;
        if (std::isnan(want)) {
          ASSERT_TRUE(std::isnan(got[i])) << what << " at " << i;
          continue;
        }
        ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want)) << what << " at " << i;
        const bool subnormal = std::fpclassify(x) == FP_SUBNORMAL || std::fpclassify(z) == FP_SUBNORMAL ||
                               std::fpclassify(want) == FP_SUBNORMAL;
        if (!subnormal) {
          ASSERT_EQ(std::bit_cast<uint32_t>(xnnpack[i]), std::bit_cast<uint32_t>(want)) << what << " at " << i;
        }
      }
    }
  }
}

// ---- transposed convolution -----------------------------------------------------------------------------

// fp32 transposed convolutions with one group on both engines against the definition in doubles: kernel 3 stride 2
// with an output padding (adjustment), kernel 4 stride 2, a dilated one, batches, a bias or none and a clamp. The
// delegate's GEMM runs them on the 2022 library under the measured choice; two groups stay on XNNPACK.
TEST(XnnpackEngines, TransposedConvolutionOnBothEngines) {
  struct Case {
    uint32_t batch, h, w, cin, cout, k, stride, pad, dilation, adjustment, groups;
    bool bias;
  };
  const Case cases[] = {
      {1, 5, 6, 16, 8, 3, 2, 1, 1, 1, 1, true}, {2, 4, 3, 8, 4, 4, 2, 1, 1, 0, 1, false},
      {1, 5, 5, 3, 5, 3, 1, 2, 2, 0, 1, true},  {1, 4, 4, 4, 6, 3, 2, 0, 1, 1, 2, true},
  };
  constexpr float kLo = -1.5f, kHi = 2.0f;
  for (const Case& c : cases) {
    const uint32_t gin = c.cin / c.groups, gout = c.cout / c.groups;
    const uint32_t span = c.dilation * (c.k - 1) + 1;
    const uint32_t oh = (c.h - 1) * c.stride + span - 2 * c.pad + c.adjustment;
    const uint32_t ow = (c.w - 1) * c.stride + span - 2 * c.pad + c.adjustment;
    const std::vector<float> w = random_floats(size_t(c.cout) * c.k * c.k * gin, -1.0f, 1.0f, 7);
    const std::vector<float> bias = random_floats(c.cout, -1.0f, 1.0f, 8);
    GraphBuilder g;
    const uint32_t x = g.input({c.batch, c.h, c.w, c.cin}, 0);
    const uint32_t wv = g.f32_constant({c.cout, c.k, c.k, gin}, w);
    const uint32_t bv = c.bias ? g.f32_constant({c.cout}, bias) : testing::kNoExt;
    const uint32_t y = g.output({c.batch, oh, ow, c.cout}, 1);
    g.node(XNodeUnion::XNNConvTranspose2d,
           fb_xnnpack::Create_XNNNodeConv(g.fbb(), c.pad, c.pad, c.pad, c.pad, c.k, c.k, c.stride, c.stride, c.dilation,
                                          c.dilation, gin, gout, c.groups, c.adjustment, c.adjustment, x, wv, bv, y, 0)
               .Union(),
           kLo, kHi);
    const std::vector<uint8_t> payload = g.payload();
    const std::vector<float> in = random_floats(size_t(c.batch) * c.h * c.w * c.cin, -1.0f, 1.0f, 9);
    // out[n, oy, ox, o] = bias[o] + sum of in[n, iy, ix, gi] * w[o, ky, kx, i] where oy = iy * s + ky * d - pad.
    std::vector<double> want(size_t(c.batch) * oh * ow * c.cout);
    for (uint32_t n = 0; n < c.batch; ++n) {
      for (uint32_t o = 0; o < c.cout; ++o) {
        for (uint32_t p = 0; p < oh * ow; ++p) want[(n * oh * ow + p) * c.cout + o] = c.bias ? bias[o] : 0.0;
      }
      for (uint32_t iy = 0; iy < c.h; ++iy) {
        for (uint32_t ix = 0; ix < c.w; ++ix) {
          for (uint32_t ky = 0; ky < c.k; ++ky) {
            for (uint32_t kx = 0; kx < c.k; ++kx) {
              const int64_t oy = int64_t(iy * c.stride + ky * c.dilation) - c.pad;
              const int64_t ox = int64_t(ix * c.stride + kx * c.dilation) - c.pad;
              if (oy < 0 || ox < 0 || oy >= int64_t(oh) || ox >= int64_t(ow)) continue;
              for (uint32_t o = 0; o < c.cout; ++o) {
                const uint32_t grp = o / gout;
                double acc = 0;
                for (uint32_t i = 0; i < gin; ++i) {
                  acc += double(in[((n * c.h + iy) * c.w + ix) * c.cin + grp * gin + i]) *
                         w[((o * c.k + ky) * c.k + kx) * gin + i];
                }
                want[((n * oh + oy) * ow + ox) * c.cout + o] += acc;
              }
            }
          }
        }
      }
    }
    for (double& v : want) v = std::clamp(v, double(kLo), double(kHi));
    const std::string what = "kernel " + std::to_string(c.k) + " stride " + std::to_string(c.stride) + " dilation " +
                             std::to_string(c.dilation) + " groups " + std::to_string(c.groups);
    for (Engines e : {Engines::Own, Engines::Library, Engines::Measured}) {
      const Ran r = run_graph(payload, e, {{{{c.batch, c.h, c.w, c.cin}, in}}}, {{c.batch, oh, ow, c.cout}});
      expect_close(r.outputs[0], want, 1e-5, 1e-5, what + " on " + engine_name(e));
      const bool own = c.groups == 1 && (e == Engines::Own || (e == Engines::Measured && !kReshapeApi));
      EXPECT_EQ(r.stats.xnnpack_operators, own ? 0u : 1u) << what << " on " << engine_name(e);
    }
  }
}

// ---- softmax --------------------------------------------------------------------------------------------

TEST(XnnpackEngines, SoftmaxOnBothEnginesAcrossChannelCounts) {
  GraphBuilder g;
  const uint32_t x = g.input({4, 129}, 0), y = g.output({4, 129}, 1);
  g.unary(XNodeUnion::XNNSoftmax, x, y);
  const std::vector<uint8_t> payload = g.payload();
  // The channel count changes between runs: the 2022 library recreates its operator for each.
  std::vector<std::vector<std::pair<std::vector<int64_t>, std::vector<float>>>> runs;
  std::vector<std::vector<double>> want;
  for (int64_t channels : {129, 1, 16, 129}) {
    const std::vector<float> in = random_floats(size_t(4 * channels), -30.0f, 30.0f, uint32_t(channels));
    runs.push_back({{{4, channels}, in}});
    std::vector<double> w(in.size());
    for (size_t r = 0; r < 4; ++r) {
      double mx = -1e300, sum = 0;
      for (int64_t c = 0; c < channels; ++c) mx = std::max(mx, double(in[r * channels + c]));
      for (int64_t c = 0; c < channels; ++c) sum += std::exp(in[r * channels + c] - mx);
      for (int64_t c = 0; c < channels; ++c) w[r * channels + c] = std::exp(in[r * channels + c] - mx) / sum;
    }
    want.push_back(w);
  }
  for (Engines e : {Engines::Own, Engines::Library, Engines::Measured}) {
    std::vector<std::vector<float>> each;
    const Ran r = run_graph(payload, e, runs, {{4, 129}}, &each);
    for (size_t i = 0; i < runs.size(); ++i) {
      expect_close(each[i], want[i], 1e-5, 1e-7, std::string("softmax run ") + std::to_string(i) + " on " + engine_name(e));
    }
    EXPECT_EQ(r.stats.xnnpack_operators, e == Engines::Own ? 0u : 1u) << engine_name(e);
  }
}

// ---- fully-connected fp32 -------------------------------------------------------------------------------

TEST(XnnpackEngines, FullyConnectedF32OnBothEngines) {
  const uint32_t k = 19, n = 23;
  const std::vector<float> w = random_floats(n * k, -1.0f, 1.0f, 1), bias = random_floats(n, -1.0f, 1.0f, 2);
  for (bool transposed : {false, true}) {
    GraphBuilder g;
    const uint32_t x = g.input({5, k}, 0);
    std::vector<float> stored = w;  // [n, k], or [k, n] when transposed
    if (transposed) {
      for (uint32_t j = 0; j < n; ++j) {
        for (uint32_t i = 0; i < k; ++i) stored[i * n + j] = w[j * k + i];
      }
    }
    const uint32_t wv = g.f32_constant(transposed ? std::vector<uint32_t>{k, n} : std::vector<uint32_t>{n, k}, stored);
    const uint32_t b = g.f32_constant({n}, bias);
    const uint32_t y = g.output({5, n}, 1);
    g.fully_connected(x, wv, b, y, -2.0f, 2.0f, transposed ? kFlagTransposeWeights : 0);
    const std::vector<uint8_t> payload = g.payload();
    std::vector<std::vector<std::pair<std::vector<int64_t>, std::vector<float>>>> runs;
    std::vector<std::vector<double>> want;
    for (int64_t rows : {5, 1, 3}) {
      const std::vector<float> in = random_floats(size_t(rows) * k, -1.0f, 1.0f, uint32_t(rows));
      runs.push_back({{{rows, k}, in}});
      std::vector<double> o(size_t(rows) * n);
      for (int64_t r = 0; r < rows; ++r) {
        for (uint32_t j = 0; j < n; ++j) {
          double acc = bias[j];
          for (uint32_t i = 0; i < k; ++i) acc += double(in[r * k + i]) * w[j * k + i];
          o[r * n + j] = std::clamp(acc, -2.0, 2.0);
        }
      }
      want.push_back(o);
    }
    for (Engines e : {Engines::Own, Engines::Library, Engines::Measured}) {
      std::vector<std::vector<float>> each;
      const Ran r = run_graph(payload, e, runs, {{5, n}}, &each);
      for (size_t i = 0; i < runs.size(); ++i) {
        expect_close(each[i], want[i], 1e-5, 1e-5,
                     std::string(transposed ? "transposed " : "") + "fully-connected on " + engine_name(e));
      }
      // The delegate's GEMM was measured faster on both releases.
      EXPECT_EQ(r.stats.xnnpack_operators, e == Engines::Library ? 1u : 0u) << engine_name(e);
    }
  }
}

// ---- int8 convolution and fully-connected layer ---------------------------------------------------------

// A per-channel int8 3x3 convolution and a per-tensor int8 fully-connected layer between fp32 conversions: both
// engines give the same bytes (the delegate's kernel is XNNPACK's requantization, byte for byte), and each choice
// puts the products where it says (the delegate's kernel only where the CPU has AVX-512 VNNI).
TEST(XnnpackEngines, Int8ConvolutionAndFullyConnectedOnBothEngines) {
  const uint32_t h = 6, w = 7, cin = 5, cout = 20, units = 9, k = h * w * cout;
  const float in_scale = 0.05f, mid_scale = 0.08f, out_scale = 0.3f;
  std::vector<int8_t> filter(cout * 9 * cin), fc(units * k);
  std::mt19937 rng(17);
  for (auto& v : filter) v = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
  for (auto& v : fc) v = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
  std::vector<float> filter_scales(cout);
  for (uint32_t c = 0; c < cout; ++c) filter_scales[c] = 0.002f + 0.0003f * float(c);
  std::vector<float> bias_scales(cout);
  for (uint32_t c = 0; c < cout; ++c) bias_scales[c] = in_scale * filter_scales[c];
  std::vector<int32_t> conv_bias(cout), fc_bias(units);
  for (auto& v : conv_bias) v = static_cast<int32_t>(rng() % 2001) - 1000;
  for (auto& v : fc_bias) v = static_cast<int32_t>(rng() % 20001) - 10000;
  GraphBuilder g;
  const uint32_t x = g.input({1, h, w, cin}, 0);
  const uint32_t xq = g.per_tensor(DT::xnn_datatype_qint8, {1, h, w, cin}, in_scale, -3);
  const uint32_t f = g.per_channel(DT::xnn_datatype_qcint8, {cout, 3, 3, cin}, filter_scales, 0,
                                   g.constant(filter.data(), filter.size()));
  const uint32_t fb = g.per_channel(DT::xnn_datatype_qcint32, {cout}, bias_scales, 0,
                                    g.constant(conv_bias.data(), conv_bias.size() * 4));
  const uint32_t yq = g.per_tensor(DT::xnn_datatype_qint8, {1, h, w, cout}, mid_scale, 4);
  const uint32_t flat = g.per_tensor(DT::xnn_datatype_qint8, {1, k}, mid_scale, 4);
  const uint32_t wq = g.per_tensor(DT::xnn_datatype_qint8, {units, k}, 0.001f, 0, 0, testing::kNoExt,
                                   g.constant(fc.data(), fc.size()));
  const uint32_t wb = g.per_tensor(DT::xnn_datatype_qint32, {units}, mid_scale * 0.001f, 0, 0, testing::kNoExt,
                                   g.constant(fc_bias.data(), fc_bias.size() * 4));
  const uint32_t zq = g.per_tensor(DT::xnn_datatype_qint8, {1, units}, out_scale, -2);
  const uint32_t z = g.output({1, units}, 1);
  g.unary(XNodeUnion::XNNConvert, x, xq);
  g.conv(XNodeUnion::XNNConv2d, 3, 1, 1, 1, cin, cout, xq, f, fb, yq, 0.0f);  // fused ReLU
  g.reshape({1, k}, yq, flat);
  g.fully_connected(flat, wq, wb, zq);
  g.unary(XNodeUnion::XNNConvert, zq, z);
  const std::vector<uint8_t> payload = g.payload();
  const std::vector<std::vector<std::pair<std::vector<int64_t>, std::vector<float>>>> runs = {
      {{{1, h, w, cin}, random_floats(h * w * cin, -4.0f, 4.0f, 3)}}};
  const Ran library = run_graph(payload, Engines::Library, runs, {{1, units}});
  size_t unclamped = 0;
  for (float v : library.outputs[0]) unclamped += std::fabs(v) < 0.99f * 127 * out_scale;
  EXPECT_GT(unclamped, units / 2) << "outputs mostly saturated test little";
  EXPECT_EQ(library.stats.own_kernels, 1u);  // the reshape
  const bool own_runs = ConvQS8::supported();
  for (Engines e : {Engines::Own, Engines::Measured}) {
    const Ran r = run_graph(payload, e, runs, {{1, units}});
    EXPECT_EQ(r.outputs, library.outputs) << engine_name(e);
    EXPECT_EQ(r.stats.own_kernels, own_runs ? 3u : 1u) << engine_name(e);
    EXPECT_EQ(r.stats.xnnpack_operators + r.stats.own_kernels, library.stats.xnnpack_operators + 1u) << engine_name(e);
  }
}

// ---- fully-connected on dynamically quantized activations ----------------------------------------------

struct QD8Case {
  const char* name;
  int bits;       ///< 8 (qcint8) or 4
  int group;      ///< 4-bit: 0 per channel (qcint4), else the blockwise group size
  bool measured_library;  ///< the 2024 library runs it by default
  bool library_takes_it;  ///< the 2024 library can run it at all
};

TEST(XnnpackEngines, DynamicallyQuantizedFullyConnectedOnBothEngines) {
  const uint32_t k = 256, n = 24;
  // (4-bit weights with k a multiple of 32 and groups of 32n run on the delegate's 4-bit kernel by default.)
  // Where the 2024 library's qc4w kernels are wrong (its AMX ones), the delegate's own kernel runs qcint4.
  const bool qc4w = ops::qc4w_fully_connected_is_sound();
  const QD8Case cases[] = {
      {"qcint8", 8, 0, true, true},          {"qcint4", 4, 0, false, qc4w},
      {"qbint4 g32", 4, 32, false, true},    {"qbint4 g128", 4, 128, false, true},
      {"qbint4 g16 (below the library's 32)", 4, 16, false, false},
  };
  std::mt19937 rng(3);
  std::vector<int8_t> codes(n * k);
  for (int8_t& c : codes) c = static_cast<int8_t>(int(rng() % 255) - 127);
  std::vector<int8_t> codes4(n * k);
  for (int8_t& c : codes4) c = static_cast<int8_t>(int(rng() % 16) - 8);
  std::vector<uint8_t> packed4(n * k / 2);
  for (size_t i = 0; i < packed4.size(); ++i) {
    packed4[i] = static_cast<uint8_t>((codes4[2 * i] + 8) | ((codes4[2 * i + 1] + 8) << 4));
  }
  const std::vector<float> channel_scales = random_floats(n, 0.01f, 0.02f, 4);
  const std::vector<float> bias = random_floats(n, -1.0f, 1.0f, 6);
  for (const QD8Case& c : cases) {
    GraphBuilder g;
    const uint32_t x = g.input({64, k}, 0);
    const uint32_t xq = g.dynamic_quant({64, k}, 1);
    std::vector<float> scales;  // [n, groups]
    uint32_t w;
    if (c.bits == 8) {
      w = g.per_channel(DT::xnn_datatype_qcint8, {n, k}, channel_scales, 0, g.constant(codes.data(), codes.size()));
      scales = channel_scales;
    } else if (c.group == 0) {
      w = g.per_channel(DT::xnn_datatype_qcint4, {n, k}, channel_scales, 0, g.constant(packed4.data(), packed4.size()));
      scales = channel_scales;
    } else {
      std::vector<uint16_t> bf16(n * (k / c.group));
      for (size_t i = 0; i < bf16.size(); ++i) {
        bf16[i] = static_cast<uint16_t>(0x3C00 + i % 61);  // 2^-7 .. 2^-6: exact in bf16
        const uint32_t bits = uint32_t(bf16[i]) << 16;
        float f;
        std::memcpy(&f, &bits, 4);
        scales.push_back(f);
      }
      w = g.blockwise({n, k}, bf16, c.group, g.constant(packed4.data(), packed4.size()));
    }
    const uint32_t b = g.f32_constant({n}, bias);
    const uint32_t y = g.output({64, n}, 1);
    g.unary(XNodeUnion::XNNConvert, x, xq);
    g.fully_connected(xq, w, b, y);
    const std::vector<uint8_t> payload = g.payload();
    const std::vector<int8_t>& wcodes = c.bits == 8 ? codes : codes4;
    const size_t groups = c.group == 0 ? 1 : k / c.group;
    std::vector<std::vector<std::pair<std::vector<int64_t>, std::vector<float>>>> runs;
    std::vector<std::vector<double>> want;
    // 64 rows then 1 (prefill, decode), rows of different ranges: each row has its own quantization.
    for (int64_t rows : {64, 1, 7}) {
      std::vector<float> in = random_floats(size_t(rows) * k, -1.0f, 1.0f, uint32_t(rows) + 10);
      for (size_t i = 0; i < in.size(); ++i) in[i] *= 1.0f + float((i / k) % 5);
      runs.push_back({{{rows, k}, in}});
      std::vector<double> o(size_t(rows) * n);
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<int8_t> q(k);
        DynamicQuantParams p;
        quantize_dynamic_rows(in.data() + r * k, 1, k, q.data(), &p);
        for (uint32_t j = 0; j < n; ++j) {
          double acc = 0;
          for (uint32_t i = 0; i < k; ++i) {
            acc += double(q[i] - p.zero_point) * wcodes[j * k + i] * scales[j * groups + i * groups / k];
          }
          o[r * n + j] = acc * p.scale + bias[j];
        }
      }
      want.push_back(o);
    }
    for (Engines e : {Engines::Own, Engines::Library, Engines::Measured}) {
      std::vector<std::vector<float>> each;
      const Ran r = run_graph(payload, e, runs, {{64, n}}, &each);
      for (size_t i = 0; i < runs.size(); ++i) {
        expect_close(each[i], want[i], 1e-5, 1e-4,
                     std::string(c.name) + " run " + std::to_string(i) + " on " + engine_name(e));
      }
      const bool library = kReshapeApi && c.library_takes_it &&
                           (e == Engines::Library || (e == Engines::Measured && c.measured_library));
      EXPECT_EQ(r.stats.xnnpack_operators, library ? 1u : 0u) << c.name << " on " << engine_name(e);
    }
  }
}

// ---- batch matrix multiplication ------------------------------------------------------------------------

TEST(XnnpackEngines, BatchMatmulOnBothEnginesWithBroadcastAndTransposedB) {
  for (bool transpose_b : {false, true}) {
    const int64_t m = 3, k = 5, n = 6;
    GraphBuilder g;
    const std::vector<int64_t> a_shape = {2, 3, m, k};
    const std::vector<int64_t> b_shape = transpose_b ? std::vector<int64_t>{3, n, k} : std::vector<int64_t>{3, k, n};
    const uint32_t a = g.input({2, 3, uint32_t(m), uint32_t(k)}, 0);
    const uint32_t bv = g.input(std::vector<uint32_t>(b_shape.begin(), b_shape.end()), 1);
    const uint32_t out = g.output({2, 3, uint32_t(m), uint32_t(n)}, 2);
    g.binary(XNodeUnion::XNNBatchMatrixMultiply, a, bv, out, transpose_b ? kFlagTransposeWeights : 0);
    const std::vector<uint8_t> payload = g.payload();
    const std::vector<float> av = random_floats(2 * 3 * m * k, -1.0f, 1.0f, 1);
    const std::vector<float> bw = random_floats(3 * k * n, -1.0f, 1.0f, 2);
    std::vector<double> want(2 * 3 * m * n);
    for (int64_t b0 = 0; b0 < 2; ++b0) {
      for (int64_t b1 = 0; b1 < 3; ++b1) {
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            double acc = 0;
            for (int64_t p = 0; p < k; ++p) {
              const float bval = transpose_b ? bw[(b1 * n + j) * k + p] : bw[(b1 * k + p) * n + j];
              acc += double(av[((b0 * 3 + b1) * m + i) * k + p]) * bval;
            }
            want[((b0 * 3 + b1) * m + i) * n + j] = acc;
          }
        }
      }
    }
    for (Engines e : {Engines::Own, Engines::Library, Engines::Measured}) {
      const Ran r = run_graph(payload, e, {{{a_shape, av}, {b_shape, bw}}}, {{2, 3, m, n}});
      expect_close(r.outputs[0], want, 1e-5, 1e-5,
                   std::string(transpose_b ? "B transposed" : "B") + " on " + engine_name(e));
      EXPECT_EQ(r.stats.xnnpack_operators, kReshapeApi && e == Engines::Library ? 1u : 0u) << engine_name(e);
    }
  }
}

// ---- ETNP_XNNPACK_ENGINE --------------------------------------------------------------------------------

class EngineVariable : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv("ETNP_XNNPACK_ENGINE"); }
};

TEST_F(EngineVariable, ChoosesTheEngineAtLoadAndRefusesOtherValues) {
  std::shared_ptr<Backend> backend = find_backend("XnnpackBackend");
  ASSERT_NE(backend, nullptr);
  // An fp32 fully-connected layer: the delegate's GEMM by default (its packed weights are reported), XNNPACK's
  // operator with "xnnpack" (XNNPACK packs them itself).
  GraphBuilder g;
  const uint32_t x = g.input({2, 8}, 0);
  const uint32_t w = g.f32_constant({4, 8}, random_floats(32, -1.0f, 1.0f, 1));
  const uint32_t y = g.output({2, 4}, 1);
  g.fully_connected(x, w, kInvalidId, y);
  const std::vector<uint8_t> payload = g.payload();
  BackendInitContext ctx;
  auto packings = [&](const char* value) {
    if (value == nullptr) {
      unsetenv("ETNP_XNNPACK_ENGINE");
    } else {
      setenv("ETNP_XNNPACK_ENGINE", value, 1);
    }
    return backends::xnnpack_delegate_packed_weights(*backend->init(ctx, payload, {})).size();
  };
  EXPECT_EQ(packings(nullptr), 1u);
  EXPECT_EQ(packings(""), 1u);
  EXPECT_EQ(packings("measured"), 1u);
  EXPECT_EQ(packings("own"), 1u);
  EXPECT_EQ(packings("xnnpack"), 0u);

  setenv("ETNP_XNNPACK_ENGINE", "fastest", 1);
  try {
    backend->init(ctx, payload, {});
    FAIL() << "an unknown ETNP_XNNPACK_ENGINE value loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("ETNP_XNNPACK_ENGINE='fastest' is not one of measured"), std::string::npos)
        << e.what();
  }
  const SupportVerdict verdict = backend->supports(ctx, payload, {});
  ASSERT_EQ(verdict.reasons.size(), 1u);
  EXPECT_NE(verdict.reasons[0].find("ETNP_XNNPACK_ENGINE"), std::string::npos) << verdict.reasons[0];
}

}  // namespace
}  // namespace etnp::xnn
