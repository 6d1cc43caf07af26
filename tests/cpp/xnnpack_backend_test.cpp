// The XNNPACK delegate end to end on hand-built payloads: XNNPACK-run and own-kernel nodes, dynamic shapes,
// quantization, int64 outputs, options and argument checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "backends/xnnpack/conv_qs8.h"
#include "backends/xnnpack/xnn_executor.h"
#include "backends/xnnpack/xnn_graph.h"
#include "backends/xnnpack/xnn_kernels.h"
#include "compute/depthwise.h"
#include "etnp/backend.h"
#include "etnp/threadpool.h"
#include "kernel_test_util.h"
#include "xnnpack_graph_builder.h"

namespace etnp::xnn {
namespace {

using etnp::testing::OwnedTensor;
using testing::GraphBuilder;
using testing::XNodeUnion;
using DT = fb_xnnpack::XNNDatatype;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr uint32_t kNoExtForTest = testing::kNoExt;

std::vector<EValue*> arg_ptrs(std::vector<EValue>& args) {
  std::vector<EValue*> p;
  for (auto& a : args) p.push_back(&a);
  return p;
}

void run(Executor& ex, std::vector<std::unique_ptr<OwnedTensor>>& tensors) {
  std::vector<EValue> args;
  for (auto& t : tensors) args.push_back(EValue::from_tensor(&t->tensor));
  std::vector<EValue*> ptrs = arg_ptrs(args);
  ex.execute(ptrs);
}

std::vector<float> iota_f(size_t n, float start = 0.0f, float step = 1.0f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + step * static_cast<float>(i);
  return v;
}

TEST(XnnpackBackend, AddThroughRegistry) {
  std::shared_ptr<Backend> backend = find_backend("XnnpackBackend");
  ASSERT_NE(backend, nullptr);
  ASSERT_TRUE(backend->is_available());
  GraphBuilder g;
  const uint32_t a = g.input({3}, 0), b = g.input({3}, 1), out = g.output({3}, 2);
  g.binary(XNodeUnion::XNNAdd, a, b, out);
  const std::vector<uint8_t> payload = g.payload();
  BackendInitContext ctx;
  std::unique_ptr<DelegateHandle> handle = backend->init(ctx, payload, {});
  auto x = OwnedTensor::make<float>(ScalarType::Float, {3}, {1.5f, -2.0f, 3.0f});
  auto y = OwnedTensor::make<float>(ScalarType::Float, {3}, {0.25f, 2.0f, 1e30f});
  auto z = OwnedTensor::make<float>(ScalarType::Float, {3}, {});
  std::vector<EValue> args = {EValue::from_tensor(&x->tensor), EValue::from_tensor(&y->tensor),
                              EValue::from_tensor(&z->tensor)};
  backend->execute(*handle, arg_ptrs(args));
  EXPECT_EQ(z->values<float>(), (std::vector<float>{1.75f, 0.0f, 1e30f}));
}

// Old payloads: a bare flatbuffer (no XNNHeader) with constants inline in the legacy constant_buffer table.
TEST(XnnpackBackend, LegacyBareFlatbufferWithInlineConstants) {
  GraphBuilder g;
  const std::vector<float> weights = {1, 2, 3, 4, 5, 6};  // [3 units, 2 inputs]
  const std::vector<float> bias = {0.5f, -0.5f, 1.0f};
  const uint32_t x = g.input({1, 2}, 0);
  const uint32_t w = g.value(DT::xnn_datatype_fp32, {3, 2}, 0, testing::kNoExt,
                             g.legacy_constant(weights.data(), weights.size() * 4));
  const uint32_t b = g.value(DT::xnn_datatype_fp32, {3}, 0, testing::kNoExt, g.legacy_constant(bias.data(), 12));
  const uint32_t y = g.output({1, 3}, 1);
  g.fully_connected(x, w, b, y);
  const std::vector<uint8_t> fb = g.flatbuffer("XN00");
  Executor ex(parse_graph(fb, nullptr));
  std::vector<std::unique_ptr<OwnedTensor>> t;
  t.push_back(OwnedTensor::make<float>(ScalarType::Float, {1, 2}, {2.0f, -1.0f}));
  t.push_back(OwnedTensor::make<float>(ScalarType::Float, {1, 3}, {}));
  run(ex, t);
  EXPECT_EQ(t[1]->values<float>(), (std::vector<float>{0.5f, 1.5f, 5.0f}));  // [0, 2, 4] + bias
}

// NCHW input -> transpose -> 3x3 convolution (+ fused clamp) -> transpose back, against a direct loop.
TEST(XnnpackBackend, ConvolutionWithTransposesAndFusedClamp) {
  const uint32_t cin = 2, cout = 3, h = 5, w = 4;
  std::vector<float> filter(cout * 3 * 3 * cin), bias = {0.5f, -0.25f, 0.0f};
  for (size_t i = 0; i < filter.size(); ++i) filter[i] = static_cast<float>((i * 7) % 5) - 2.0f;
  GraphBuilder g;
  const uint32_t x = g.input({1, cin, h, w}, 0);
  const uint32_t x_nhwc = g.internal({1, h, w, cin});
  const uint32_t f = g.f32_constant({cout, 3, 3, cin}, filter);
  const uint32_t b = g.f32_constant({cout}, bias);
  const uint32_t conv = g.internal({1, h, w, cout});
  const uint32_t clamped = g.internal({1, h, w, cout});
  const uint32_t out = g.output({1, cout, h, w}, 1);
  g.transpose({0, 2, 3, 1}, x, x_nhwc);
  g.conv(XNodeUnion::XNNConv2d, 3, 1, 1, 1, cin, cout, x_nhwc, f, b, conv);
  g.unary(XNodeUnion::XNNClamp, conv, clamped, -3.0f, 6.0f);
  g.transpose({0, 3, 1, 2}, clamped, out);
  Executor ex(parse_graph(g.payload(), nullptr));
  EXPECT_EQ(ex.stats().fused_clamps, 1u);
  EXPECT_EQ(ex.stats().xnnpack_operators + ex.stats().own_kernels, 3u);  // transpose, convolution, transpose

  const std::vector<float> input = iota_f(cin * h * w, -4.0f, 0.25f);
  std::vector<std::unique_ptr<OwnedTensor>> t;
  t.push_back(OwnedTensor::make<float>(ScalarType::Float, {1, cin, h, w}, input));
  t.push_back(OwnedTensor::make<float>(ScalarType::Float, {1, cout, h, w}, {}));
  run(ex, t);
  const std::vector<float> got = t[1]->values<float>();
  for (uint32_t o = 0; o < cout; ++o) {
    for (uint32_t y = 0; y < h; ++y) {
      for (uint32_t xx = 0; xx < w; ++xx) {
        double acc = bias[o];
        for (int ky = 0; ky < 3; ++ky) {
          for (int kx = 0; kx < 3; ++kx) {
            const int iy = static_cast<int>(y) + ky - 1, ix = static_cast<int>(xx) + kx - 1;
            if (iy < 0 || ix < 0 || iy >= static_cast<int>(h) || ix >= static_cast<int>(w)) continue;
            for (uint32_t c = 0; c < cin; ++c) {
              acc += double(filter[((o * 3 + ky) * 3 + kx) * cin + c]) * input[(c * h + iy) * w + ix];
            }
          }
        }
        acc = std::min(std::max(acc, -3.0), 6.0);
        EXPECT_NEAR(got[(o * h + y) * w + xx], acc, 1e-5) << o << "," << y << "," << xx;
      }
    }
  }
}

// Strided, padded and dilated single-group convolutions (the im2col path), against a direct loop.
TEST(XnnpackBackend, StridedPaddedConvolutions) {
  struct Case {
    uint32_t k, s, p, cin, cout, h, w;
  };
  for (const Case cs : {Case{3, 2, 1, 3, 16, 9, 7}, Case{5, 1, 2, 4, 5, 6, 6}, Case{1, 2, 0, 8, 3, 5, 5},
                        Case{3, 1, 0, 2, 33, 4, 8}}) {
    std::vector<float> filter(cs.cout * cs.k * cs.k * cs.cin), bias(cs.cout);
    for (size_t i = 0; i < filter.size(); ++i) filter[i] = static_cast<float>((i * 7) % 9) * 0.25f - 1.0f;
    for (size_t i = 0; i < bias.size(); ++i) bias[i] = static_cast<float>(i) * 0.1f;
    const uint32_t oh = (cs.h + 2 * cs.p - cs.k) / cs.s + 1, ow = (cs.w + 2 * cs.p - cs.k) / cs.s + 1;
    GraphBuilder g;
    const uint32_t x = g.input({2, cs.h, cs.w, cs.cin}, 0);
    const uint32_t f = g.f32_constant({cs.cout, cs.k, cs.k, cs.cin}, filter);
    const uint32_t b = g.f32_constant({cs.cout}, bias);
    const uint32_t out = g.output({2, oh, ow, cs.cout}, 1);
    g.conv(XNodeUnion::XNNConv2d, cs.k, cs.s, cs.p, 1, cs.cin, cs.cout, x, f, b, out, -2.0f, kInf);
    Executor ex(parse_graph(g.payload(), nullptr));
    const std::vector<float> input = iota_f(2 * cs.h * cs.w * cs.cin, -1.0f, 0.03f);
    std::vector<std::unique_ptr<OwnedTensor>> t;
    t.push_back(OwnedTensor::make<float>(ScalarType::Float, {2, cs.h, cs.w, cs.cin}, input));
    t.push_back(OwnedTensor::make<float>(ScalarType::Float, {2, oh, ow, cs.cout}, {}));
    run(ex, t);
    const std::vector<float> got = t[1]->values<float>();
    for (uint32_t n = 0; n < 2; ++n) {
      for (uint32_t y = 0; y < oh; ++y) {
        for (uint32_t xx = 0; xx < ow; ++xx) {
          for (uint32_t o = 0; o < cs.cout; ++o) {
            double acc = bias[o];
            for (uint32_t ky = 0; ky < cs.k; ++ky) {
              for (uint32_t kx = 0; kx < cs.k; ++kx) {
                const int iy = static_cast<int>(y * cs.s + ky) - static_cast<int>(cs.p);
                const int ix = static_cast<int>(xx * cs.s + kx) - static_cast<int>(cs.p);
                if (iy < 0 || ix < 0 || iy >= static_cast<int>(cs.h) || ix >= static_cast<int>(cs.w)) continue;
                for (uint32_t c = 0; c < cs.cin; ++c) {
                  acc += double(filter[((o * cs.k + ky) * cs.k + kx) * cs.cin + c]) *
                         input[((n * cs.h + iy) * cs.w + ix) * cs.cin + c];
                }
              }
            }
            acc = std::max(acc, -2.0);
            ASSERT_NEAR(got[((n * oh + y) * ow + xx) * cs.cout + o], acc, 1e-4) << cs.k << "/" << cs.s;
          }
        }
      }
    }
  }
}

// Depthwise convolutions with few and many channels (the row-vectorized path and its channel periods), and
// channels a multiple of 8 (the pixel-block path) at strides 1 and 2 over widths that leave every remainder
// of its 8-pixel blocks.
TEST(XnnpackBackend, DepthwiseConvolutions) {
  struct Case {
    uint32_t k, s, p, c, h, w;
  };
  for (const Case cs : {Case{3, 1, 1, 3, 7, 9}, Case{3, 1, 1, 1, 5, 5}, Case{5, 1, 2, 5, 6, 11}, Case{3, 1, 0, 16, 4, 6},
                        Case{3, 1, 1, 24, 3, 3}, Case{1, 1, 0, 7, 2, 3}, Case{3, 1, 1, 8, 3, 15},
                        Case{3, 2, 1, 16, 9, 17}, Case{3, 2, 1, 32, 8, 8}, Case{3, 2, 0, 8, 7, 30},
                        Case{5, 2, 2, 24, 6, 13}, Case{3, 1, 1, 40, 4, 23},
                        // Edge outputs that read no image column (a padded 1x1), and a stride above the kernel.
                        Case{1, 1, 1, 8, 3, 5}, Case{3, 3, 1, 16, 7, 11}, Case{3, 1, 2, 8, 4, 2}}) {
    std::vector<float> filter(cs.k * cs.k * cs.c), bias(cs.c);
    for (size_t i = 0; i < filter.size(); ++i) filter[i] = static_cast<float>((i * 5) % 7) * 0.5f - 1.0f;
    for (size_t i = 0; i < bias.size(); ++i) bias[i] = 0.25f * static_cast<float>(i);
    const uint32_t oh = (cs.h + 2 * cs.p - cs.k) / cs.s + 1, ow = (cs.w + 2 * cs.p - cs.k) / cs.s + 1;
    GraphBuilder g;
    const uint32_t x = g.input({2, cs.h, cs.w, cs.c}, 0);
    const uint32_t f = g.f32_constant({1, cs.k, cs.k, cs.c}, filter);
    const uint32_t b = g.f32_constant({cs.c}, bias);
    const uint32_t out = g.output({2, oh, ow, cs.c}, 1);
    g.conv(XNodeUnion::XNNDepthwiseConv2d, cs.k, cs.s, cs.p, cs.c, 1, 1, x, f, b, out, -kInf, 4.0f);
    Executor ex(parse_graph(g.payload(), nullptr));
    EXPECT_EQ(ex.stats().own_kernels, 1u) << cs.c << " channels, stride " << cs.s;
    const std::vector<float> input = iota_f(2 * cs.h * cs.w * cs.c, -2.0f, 0.05f);
    std::vector<std::unique_ptr<OwnedTensor>> t;
    t.push_back(OwnedTensor::make<float>(ScalarType::Float, {2, cs.h, cs.w, cs.c}, input));
    t.push_back(OwnedTensor::make<float>(ScalarType::Float, {2, oh, ow, cs.c}, {}));
    run(ex, t);
    const std::vector<float> got = t[1]->values<float>();
    for (uint32_t n = 0; n < 2; ++n) {
      for (uint32_t y = 0; y < oh; ++y) {
        for (uint32_t xx = 0; xx < ow; ++xx) {
          for (uint32_t ch = 0; ch < cs.c; ++ch) {
            double acc = bias[ch];
            for (uint32_t ky = 0; ky < cs.k; ++ky) {
              for (uint32_t kx = 0; kx < cs.k; ++kx) {
                const int iy = static_cast<int>(y * cs.s + ky) - static_cast<int>(cs.p);
                const int ix = static_cast<int>(xx * cs.s + kx) - static_cast<int>(cs.p);
                if (iy < 0 || ix < 0 || iy >= static_cast<int>(cs.h) || ix >= static_cast<int>(cs.w)) continue;
                acc += double(filter[(ky * cs.k + kx) * cs.c + ch]) * input[((n * cs.h + iy) * cs.w + ix) * cs.c + ch];
              }
            }
            acc = std::min(acc, 4.0);
            ASSERT_NEAR(got[((n * oh + y) * ow + xx) * cs.c + ch], acc, 1e-4)
                << cs.c << " channels, k " << cs.k << ", stride " << cs.s << " at (" << n << ", " << y << ", " << xx
                << ", " << ch << ")";
          }
        }
      }
    }
  }
}

// An inverted residual's three convolutions (1x1 expand, 3x3 depthwise, 1x1 project) and one more 1x1: the depthwise
// and the project run as one step (compute::depthwise_then_pointwise) where the depthwise output is large, and the
// memory plan keeps the expand's output (the step's input) from sharing storage with the project's output, which
// the step writes while it still reads its input. Against the definition, at 1 and 2 threads, for a size that
// fuses and one that does not; strides 1 and 2.
TEST(XnnpackBackend, DepthwiseThenPointwiseRunsAsOneStep) {
  struct Case {
    uint32_t h, w, s;
    bool fused;
  };
  const uint32_t cin = 8, hidden = 48, cout = 16;
  for (const Case cs : {Case{56, 48, 1, true}, Case{112, 96, 2, true}, Case{8, 8, 1, false}}) {
    const uint32_t oh = (cs.h - 1) / cs.s + 1, ow = (cs.w - 1) / cs.s + 1;
    auto values = [](size_t n, int seed) {
      std::vector<float> v(n);
      for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>((i * 7 + size_t(seed) * 13) % 11) * 0.125f - 0.6f;
      return v;
    };
    const auto expand_w = values(hidden * cin, 1), dw_w = values(9 * hidden, 2), project_w = values(cout * hidden, 3);
    const auto last_w = values(cout * cout, 4), dw_b = values(hidden, 5), project_b = values(cout, 6);
    GraphBuilder g;
    const uint32_t x = g.input({1, cs.h, cs.w, cin}, 0);
    const uint32_t a = g.internal({1, cs.h, cs.w, hidden}), mid = g.internal({1, oh, ow, hidden});
    const uint32_t b = g.internal({1, oh, ow, cout}), out = g.output({1, oh, ow, cout}, 1);
    g.conv(XNodeUnion::XNNConv2d, 1, 1, 0, 1, cin, hidden, x, g.f32_constant({hidden, 1, 1, cin}, expand_w),
           kNoExtForTest, a, 0.0f, 6.0f);
    g.conv(XNodeUnion::XNNDepthwiseConv2d, 3, cs.s, 1, hidden, 1, 1, a, g.f32_constant({1, 3, 3, hidden}, dw_w),
           g.f32_constant({hidden}, dw_b), mid, 0.0f, 6.0f);
    g.conv(XNodeUnion::XNNConv2d, 1, 1, 0, 1, hidden, cout, mid, g.f32_constant({cout, 1, 1, hidden}, project_w),
           g.f32_constant({cout}, project_b), b);
    g.conv(XNodeUnion::XNNConv2d, 1, 1, 0, 1, cout, cout, b, g.f32_constant({cout, 1, 1, cout}, last_w),
           kNoExtForTest, out);
    const std::vector<float> input = values(cs.h * cs.w * cin, 7);
    // The definition, in double.
    std::vector<double> ea(size_t(cs.h) * cs.w * hidden), em(size_t(oh) * ow * hidden), eb(size_t(oh) * ow * cout);
    for (size_t p = 0; p < size_t(cs.h) * cs.w; ++p) {
      for (size_t j = 0; j < hidden; ++j) {
        double acc = 0;
        for (size_t i = 0; i < cin; ++i) acc += double(input[p * cin + i]) * expand_w[j * cin + i];
        ea[p * hidden + j] = std::clamp(acc, 0.0, 6.0);
      }
    }
    for (size_t y = 0; y < oh; ++y) {
      for (size_t xx = 0; xx < ow; ++xx) {
        for (size_t ch = 0; ch < hidden; ++ch) {
          double acc = dw_b[ch];
          for (size_t ky = 0; ky < 3; ++ky) {
            for (size_t kx = 0; kx < 3; ++kx) {
              const long iy = long(y * cs.s + ky) - 1, ix = long(xx * cs.s + kx) - 1;
              if (iy < 0 || ix < 0 || iy >= long(cs.h) || ix >= long(cs.w)) continue;
              acc += double(dw_w[(ky * 3 + kx) * hidden + ch]) * ea[(size_t(iy) * cs.w + size_t(ix)) * hidden + ch];
            }
          }
          em[(y * ow + xx) * hidden + ch] = std::clamp(acc, 0.0, 6.0);
        }
      }
    }
    std::vector<double> expected(size_t(oh) * ow * cout);
    for (size_t p = 0; p < size_t(oh) * ow; ++p) {
      for (size_t j = 0; j < cout; ++j) {
        double acc = project_b[j];
        for (size_t i = 0; i < hidden; ++i) acc += em[p * hidden + i] * project_w[j * hidden + i];
        eb[p * cout + j] = acc;
      }
      for (size_t j = 0; j < cout; ++j) {
        double acc = 0;
        for (size_t i = 0; i < cout; ++i) acc += eb[p * cout + i] * last_w[j * cout + i];
        expected[p * cout + j] = acc;
      }
    }
    for (size_t threads : {1, 2}) {
      ThreadPool pool(threads);
      const ThreadPool::Use use(pool);
      Executor ex(parse_graph(g.payload(), nullptr));
      EXPECT_EQ(ex.stats().fused_pairs, 1u);
      EXPECT_EQ(ex.stats().own_kernels, 4u);
      std::vector<std::unique_ptr<OwnedTensor>> t;
      t.push_back(OwnedTensor::make<float>(ScalarType::Float, {1, cs.h, cs.w, cin}, input));
      t.push_back(OwnedTensor::make<float>(ScalarType::Float, {1, oh, ow, cout}, {}));
      std::vector<EValue> args = {EValue::from_tensor(&t[0]->tensor), EValue::from_tensor(&t[1]->tensor)};
      ex.execute(arg_ptrs(args), pool);
      const std::vector<float> got = t[1]->values<float>();
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], expected[i], 1e-3 * (1 + std::abs(expected[i])))
            << cs.h << "x" << cs.w << " stride " << cs.s << ", " << threads << " threads, at " << i;
      }
    }
    EXPECT_EQ(compute::depthwise_then_pointwise_pays(oh, ow, hidden), cs.fused);
  }
}

// A bounded dynamic input: the output takes the input's runtime length; shapes can change between calls.
TEST(XnnpackBackend, DynamicShapes) {
  GraphBuilder g;
  const uint32_t x = g.input({8}, 0), s = g.f32_constant({1}, {2.0f}), out = g.output({8}, 1);
  g.binary(XNodeUnion::XNNMultiply, x, s, out);
  Executor ex(parse_graph(g.payload(), nullptr));
  for (int64_t n : {8, 4, 1, 8}) {
    std::vector<std::unique_ptr<OwnedTensor>> t;
    t.push_back(OwnedTensor::make<float>(ScalarType::Float, {n}, iota_f(static_cast<size_t>(n), 1.0f),
                                         ShapeDynamism::DynamicBound, 8));
    t.push_back(OwnedTensor::make<float>(ScalarType::Float, {8}, {}, ShapeDynamism::DynamicBound, 8));
    run(ex, t);
    ASSERT_EQ(t[1]->tensor.size(0), n);
    EXPECT_EQ(t[1]->values<float>(), iota_f(static_cast<size_t>(n), 2.0f, 2.0f));
  }
  // Beyond the output's bound: a clean execution error.
  std::vector<std::unique_ptr<OwnedTensor>> t;
  t.push_back(OwnedTensor::make<float>(ScalarType::Float, {9}, iota_f(9), ShapeDynamism::DynamicBound, 9));
  t.push_back(OwnedTensor::make<float>(ScalarType::Float, {8}, {}, ShapeDynamism::DynamicBound, 8));
  try {
    run(ex, t);
    FAIL() << "accepted an output beyond its bound";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::ExecutionError);
  }
}

// The executor hands each constant's bytes to ExecutorOptions::release_constant once, right after the last node
// that reads it is built (what the runtime turns into dropped file pages), and still runs right afterwards: what
// it keeps was copied or packed.
TEST(XnnpackBackend, ConstantsAreReleasedAfterTheirLastReaderIsBuilt) {
  GraphBuilder g;
  const std::vector<float> shared_data = {1, 2, 3, 4, 5, 6}, once_data = {10, 20, 30, 40, 50, 60};
  const uint32_t x = g.input({6}, 0), out = g.output({6}, 1);
  const uint32_t shared = g.f32_constant({6}, shared_data), once = g.f32_constant({6}, once_data);
  const uint32_t t1 = g.internal({6}), t2 = g.internal({6});
  g.binary(XNodeUnion::XNNAdd, x, once, t1);        // node 0: `once`'s only reader
  g.binary(XNodeUnion::XNNMultiply, t1, shared, t2);  // node 1
  g.binary(XNodeUnion::XNNAdd, t2, shared, out);      // node 2: `shared`'s last reader
  const std::vector<uint8_t> payload = g.payload();
  std::vector<std::vector<float>> released;  // the bytes of each call, in order
  ExecutorOptions options;
  options.release_constant = [&](std::span<const uint8_t> bytes) {
    ASSERT_EQ(bytes.size(), 6 * sizeof(float));
    std::vector<float> v(6);
    std::memcpy(v.data(), bytes.data(), bytes.size());
    released.push_back(v);
  };
  Executor ex(check_graph(parse_graph(payload, nullptr)), options);
  ASSERT_EQ(released.size(), 2u);
  EXPECT_EQ(released[0], once_data);
  EXPECT_EQ(released[1], shared_data);
  std::vector<std::unique_ptr<OwnedTensor>> t;
  t.push_back(OwnedTensor::make<float>(ScalarType::Float, {6}, iota_f(6)));
  t.push_back(OwnedTensor::make<float>(ScalarType::Float, {6}, {}));
  run(ex, t);
  std::vector<float> expected(6);
  for (size_t i = 0; i < 6; ++i) expected[i] = (float(i) + once_data[i]) * shared_data[i] + shared_data[i];
  EXPECT_EQ(t[1]->values<float>(), expected);
}

// An XNNPACK operator is set up again only when its buffers (or shapes, or pool) differ from its last call's:
// new input and output tensors are read and written, and new contents of the same buffers are read.
TEST(XnnpackBackend, OperatorsFollowTheirBuffersFromCallToCall) {
  GraphBuilder g;
  const uint32_t a = g.input({6}, 0), b = g.input({6}, 1), sum = g.internal({6}), out = g.output({6}, 2);
  g.binary(XNodeUnion::XNNAdd, a, b, sum);
  g.binary(XNodeUnion::XNNMultiply, sum, sum, out);
  // XNNPACK's operators (small unclamped arithmetic runs on the delegate's kernel under the measured choice).
  Executor ex(check_graph(parse_graph(g.payload(), nullptr)), ExecutorOptions{false, Engines::Library, {}});
  ASSERT_EQ(ex.stats().xnnpack_operators, 2u);
  auto tensors = [](float a0, float b0) {
    std::vector<std::unique_ptr<OwnedTensor>> t;
    t.push_back(OwnedTensor::make<float>(ScalarType::Float, {6}, iota_f(6, a0)));
    t.push_back(OwnedTensor::make<float>(ScalarType::Float, {6}, iota_f(6, b0)));
    t.push_back(OwnedTensor::make<float>(ScalarType::Float, {6}, {}));
    return t;
  };
  auto expected = [](float a0, float b0) {
    std::vector<float> v(6);
    for (size_t i = 0; i < 6; ++i) v[i] = (a0 + b0 + 2.0f * float(i)) * (a0 + b0 + 2.0f * float(i));
    return v;
  };
  auto first = tensors(1.0f, 2.0f), second = tensors(-4.0f, 0.5f);
  run(ex, first);
  EXPECT_EQ(first[2]->values<float>(), expected(1.0f, 2.0f));
  run(ex, second);  // other buffers
  EXPECT_EQ(second[2]->values<float>(), expected(-4.0f, 0.5f));
  std::fill_n(reinterpret_cast<float*>(second[2]->storage.data()), 6, -1.0f);
  run(ex, first);  // back to the first ones
  EXPECT_EQ(first[2]->values<float>(), expected(1.0f, 2.0f));
  EXPECT_EQ(second[2]->values<float>(), std::vector<float>(6, -1.0f));  // not written by the last call
  auto* a_data = reinterpret_cast<float*>(first[0]->storage.data());
  for (size_t i = 0; i < 6; ++i) a_data[i] = 10.0f + float(i);  // same buffer, new contents
  run(ex, first);
  EXPECT_EQ(first[2]->values<float>(), expected(10.0f, 2.0f));
}

// Dynamic spatial dims through transposes and a depthwise convolution (the xnnpack/simpleconv pattern).
TEST(XnnpackBackend, DynamicDepthwiseConvolution) {
  GraphBuilder g;
  const uint32_t x = g.input({1, 2, 16, 16}, 0);
  const uint32_t nhwc = g.internal({1, 16, 16, 2});
  std::vector<float> filter(9 * 2);
  for (size_t i = 0; i < filter.size(); ++i) filter[i] = (i % 2 == 0) ? 1.0f / 9.0f : static_cast<float>(i % 3);
  const uint32_t f = g.f32_constant({1, 3, 3, 2}, filter);
  const uint32_t conv = g.internal({1, 16, 16, 2});
  const uint32_t out = g.output({1, 2, 16, 16}, 1);
  g.transpose({0, 2, 3, 1}, x, nhwc);
  g.conv(XNodeUnion::XNNDepthwiseConv2d, 3, 1, 1, 2, 1, 1, nhwc, f, kInvalidId, conv);
  g.transpose({0, 3, 1, 2}, conv, out);
  Executor ex(parse_graph(g.payload(), nullptr));
  for (int64_t hw : {7, 16, 12}) {
    const size_t n = static_cast<size_t>(2 * hw * hw);
    const std::vector<float> input = iota_f(n, 0.0f, 0.5f);
    std::vector<std::unique_ptr<OwnedTensor>> t;
    t.push_back(OwnedTensor::make<float>(ScalarType::Float, {1, 2, hw, hw}, input, ShapeDynamism::DynamicBound, 512));
    t.push_back(OwnedTensor::make<float>(ScalarType::Float, {1, 2, 16, 16}, {}, ShapeDynamism::DynamicBound, 512));
    run(ex, t);
    ASSERT_EQ(t[1]->tensor.size(2), hw);
    const std::vector<float> got = t[1]->values<float>();
    for (int c = 0; c < 2; ++c) {
      for (int y = 0; y < hw; ++y) {
        for (int xx = 0; xx < hw; ++xx) {
          double acc = 0;
          for (int ky = 0; ky < 3; ++ky) {
            for (int kx = 0; kx < 3; ++kx) {
              const int iy = y + ky - 1, ix = xx + kx - 1;
              if (iy < 0 || ix < 0 || iy >= hw || ix >= hw) continue;
              acc += double(filter[(ky * 3 + kx) * 2 + c]) * input[(c * hw + iy) * hw + ix];
            }
          }
          ASSERT_NEAR(got[(c * hw + y) * hw + xx], acc, 1e-4) << hw << ":" << c << "," << y << "," << xx;
        }
      }
    }
  }
}

// Attention-style own kernels in one graph: batch matmul, softmax, reshape, concatenate, slice, tanh.
TEST(XnnpackBackend, OwnKernelChain) {
  GraphBuilder g;
  const uint32_t a = g.input({2, 2, 3}, 0), b = g.input({2, 3, 2}, 1);
  const uint32_t mm = g.internal({2, 2, 2});
  const uint32_t flat = g.internal({4, 2});
  const uint32_t sm = g.internal({4, 2});
  const uint32_t cat = g.internal({4, 4});
  const uint32_t th = g.internal({4, 4});
  const uint32_t out = g.output({4, 4}, 2);
  g.binary(XNodeUnion::XNNBatchMatrixMultiply, a, b, mm);
  g.reshape({0, 2}, mm, flat);  // 0 = inferred
  g.unary(XNodeUnion::XNNSoftmax, flat, sm);
  g.concat2(1, sm, flat, cat);
  g.unary(XNodeUnion::XNNTanh, cat, th);
  g.unary(XNodeUnion::XNNCopy, th, out);
  Executor ex(parse_graph(g.payload(), nullptr));
  const std::vector<float> av = iota_f(12, -1.0f, 0.2f), bv = iota_f(12, 0.5f, -0.1f);
  std::vector<std::unique_ptr<OwnedTensor>> t;
  t.push_back(OwnedTensor::make<float>(ScalarType::Float, {2, 2, 3}, av));
  t.push_back(OwnedTensor::make<float>(ScalarType::Float, {2, 3, 2}, bv));
  t.push_back(OwnedTensor::make<float>(ScalarType::Float, {4, 4}, {}));
  run(ex, t);
  const std::vector<float> got = t[2]->values<float>();
  for (int bi = 0; bi < 2; ++bi) {
    for (int i = 0; i < 2; ++i) {
      float row[2];
      for (int j = 0; j < 2; ++j) {
        double acc = 0;
        for (int k = 0; k < 3; ++k) acc += double(av[(bi * 2 + i) * 3 + k]) * bv[(bi * 3 + k) * 2 + j];
        row[j] = static_cast<float>(acc);
      }
      const double e0 = std::exp(row[0] - std::max(row[0], row[1])), e1 = std::exp(row[1] - std::max(row[0], row[1]));
      const int r = bi * 2 + i;
      EXPECT_NEAR(got[r * 4 + 0], std::tanh(e0 / (e0 + e1)), 1e-5);
      EXPECT_NEAR(got[r * 4 + 1], std::tanh(e1 / (e0 + e1)), 1e-5);
      EXPECT_NEAR(got[r * 4 + 2], std::tanh(row[0]), 1e-5);
      EXPECT_NEAR(got[r * 4 + 3], std::tanh(row[1]), 1e-5);
    }
  }
}

// fp32 -> qint8, per-channel int8 fully-connected (XNNPACK's 1x1 qc8 convolution), -> fp32.
TEST(XnnpackBackend, QuantizedFullyConnected) {
  const uint32_t k = 8, n = 4;
  std::vector<int8_t> weights(n * k);
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<int8_t>(static_cast<int>(i * 5 % 17) - 8);
  const std::vector<float> w_scales = {0.01f, 0.02f, 0.015f, 0.03f};
  const float in_scale = 0.05f, out_scale = 0.02f;
  const int32_t in_zp = 3, out_zp = -2;
  std::vector<int32_t> bias_q = {10, -20, 0, 5};
  GraphBuilder g;
  const uint32_t x = g.input({2, k}, 0);
  const uint32_t xq = g.per_tensor(DT::xnn_datatype_qint8, {2, k}, in_scale, in_zp);
  const uint32_t w = g.per_channel(DT::xnn_datatype_qcint8, {n, k}, w_scales, 0, g.constant(weights.data(), n * k));
  std::vector<float> bias_scales(n);
  for (uint32_t i = 0; i < n; ++i) bias_scales[i] = in_scale * w_scales[i];
  const uint32_t b = g.per_channel(DT::xnn_datatype_qcint32, {n}, bias_scales, 0, g.constant(bias_q.data(), n * 4));
  const uint32_t yq = g.per_tensor(DT::xnn_datatype_qint8, {2, n}, out_scale, out_zp);
  const uint32_t y = g.output({2, n}, 1);
  g.unary(XNodeUnion::XNNConvert, x, xq);
  g.fully_connected(xq, w, b, yq);
  g.unary(XNodeUnion::XNNConvert, yq, y);
  Executor ex(parse_graph(g.payload(), nullptr));
  // The int8 product runs as the delegate's own kernel where the CPU has AVX2 (ConvQS8), else as XNNPACK's.
  EXPECT_EQ(ex.stats().xnnpack_operators, ConvQS8::supported() ? 2u : 3u);
  EXPECT_EQ(ex.stats().own_kernels, ConvQS8::supported() ? 1u : 0u);
  const std::vector<float> input = iota_f(2 * k, -0.6f, 0.09f);
  std::vector<std::unique_ptr<OwnedTensor>> t;
  t.push_back(OwnedTensor::make<float>(ScalarType::Float, {2, k}, input));
  t.push_back(OwnedTensor::make<float>(ScalarType::Float, {2, n}, {}));
  run(ex, t);
  const std::vector<float> got = t[1]->values<float>();
  for (uint32_t r = 0; r < 2; ++r) {
    for (uint32_t j = 0; j < n; ++j) {
      int32_t acc = bias_q[j];
      for (uint32_t i = 0; i < k; ++i) {
        const int32_t q = std::clamp(static_cast<int32_t>(std::nearbyint(input[r * k + i] / in_scale)) + in_zp, -128, 127);
        acc += (q - in_zp) * weights[j * k + i];
      }
      const double real = acc * double(in_scale) * w_scales[j];
      const int32_t yq_ref = std::clamp(static_cast<int32_t>(std::nearbyint(real / out_scale)) + out_zp, -128, 127);
      EXPECT_NEAR(got[r * n + j], (yq_ref - out_zp) * out_scale, out_scale * 1.01) << r << "," << j;
    }
  }
}

// int8 transposed convolutions, per-tensor and per-channel weights (the 2022 library has only the first: the
// second runs there through fp32), against the integer arithmetic in int32 and one rounding at the end.
TEST(XnnpackBackend, QuantizedTransposedConvolutions) {
  const uint32_t cin = 3, cout = 4, k = 3, s = 2, p = 1, h = 3, w = 4;
  const uint32_t oh = (h - 1) * s + k - 2 * p, ow = (w - 1) * s + k - 2 * p;
  std::vector<int8_t> weights(cout * k * k * cin);  // [cout, kh, kw, cin]
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<int8_t>(static_cast<int>(i * 7 % 23) - 11);
  const float in_scale = 0.04f, out_scale = 0.03f;
  const int32_t in_zp = -5, out_zp = 7;
  const std::vector<int32_t> bias_q = {40, -25, 0, 13};
  for (bool per_channel : {false, true}) {
    const std::vector<float> w_scales =
        per_channel ? std::vector<float>{0.01f, 0.02f, 0.015f, 0.005f} : std::vector<float>(cout, 0.01f);
    GraphBuilder g;
    const uint32_t x = g.input({1, h, w, cin}, 0);
    const uint32_t xq = g.per_tensor(DT::xnn_datatype_qint8, {1, h, w, cin}, in_scale, in_zp);
    const uint32_t wc = g.constant(weights.data(), weights.size());
    const uint32_t wv = per_channel ? g.per_channel(DT::xnn_datatype_qcint8, {cout, k, k, cin}, w_scales, 0, wc)
                                    : g.per_tensor(DT::xnn_datatype_qint8, {cout, k, k, cin}, w_scales[0], 0, 0,
                                                   kNoExtForTest, wc);
    std::vector<float> bias_scales(cout);
    for (uint32_t c = 0; c < cout; ++c) bias_scales[c] = in_scale * w_scales[c];
    const uint32_t bc = g.constant(bias_q.data(), cout * 4);
    const uint32_t b = per_channel ? g.per_channel(DT::xnn_datatype_qcint32, {cout}, bias_scales, 0, bc)
                                   : g.per_tensor(DT::xnn_datatype_qint32, {cout}, bias_scales[0], 0, 0, kNoExtForTest, bc);
    const uint32_t yq = g.per_tensor(DT::xnn_datatype_qint8, {1, oh, ow, cout}, out_scale, out_zp);
    const uint32_t y = g.output({1, oh, ow, cout}, 1);
    g.unary(XNodeUnion::XNNConvert, x, xq);
    g.conv(XNodeUnion::XNNConvTranspose2d, k, s, p, 1, cin, cout, xq, wv, b, yq);
    g.unary(XNodeUnion::XNNConvert, yq, y);
    Executor ex(parse_graph(g.payload(), nullptr));
    const std::vector<float> input = iota_f(h * w * cin, -1.5f, 0.083f);
    std::vector<std::unique_ptr<OwnedTensor>> t;
    t.push_back(OwnedTensor::make<float>(ScalarType::Float, {1, h, w, cin}, input));
    t.push_back(OwnedTensor::make<float>(ScalarType::Float, {1, oh, ow, cout}, {}));
    run(ex, t);
    const std::vector<float> got = t[1]->values<float>();
    std::vector<int32_t> q(input.size());
    for (size_t i = 0; i < q.size(); ++i) {
      q[i] = std::clamp(static_cast<int32_t>(std::nearbyint(input[i] / in_scale)) + in_zp, -128, 127);
    }
    size_t mismatched = 0;
    for (uint32_t y0 = 0; y0 < oh; ++y0) {
      for (uint32_t x0 = 0; x0 < ow; ++x0) {
        for (uint32_t c = 0; c < cout; ++c) {
          int32_t acc = bias_q[c];
          for (uint32_t iy = 0; iy < h; ++iy) {
            for (uint32_t ix = 0; ix < w; ++ix) {
              const int ky = int(y0) + int(p) - int(iy * s), kx = int(x0) + int(p) - int(ix * s);
              if (ky < 0 || ky >= int(k) || kx < 0 || kx >= int(k)) continue;
              for (uint32_t ci = 0; ci < cin; ++ci) {
                acc += (q[(iy * w + ix) * cin + ci] - in_zp) * weights[((c * k + ky) * k + kx) * cin + ci];
              }
            }
          }
          const double real = acc * double(in_scale) * w_scales[c];
          const int32_t code = std::clamp(static_cast<int32_t>(std::nearbyint(real / out_scale)) + out_zp, -128, 127);
          const float want = float(code - out_zp) * out_scale;
          const float have = got[(y0 * ow + x0) * cout + c];
          // One step at most, at a rounding tie (XNNPACK requantizes in fp32).
          ASSERT_NEAR(have, want, out_scale * 1.01f) << (per_channel ? "per-channel " : "per-tensor ") << y0 << ","
                                                     << x0 << "," << c;
          mismatched += std::fabs(have - want) > out_scale * 0.5f;
        }
      }
    }
    EXPECT_LE(mismatched, 2u) << (per_channel ? "per-channel" : "per-tensor");
  }
}

// Dynamic per-row quantization + int8 weights with an fp32 output (the dynamically quantized linear).
TEST(XnnpackBackend, DynamicallyQuantizedFullyConnected) {
  const uint32_t k = 16, n = 3, rows = 3;
  std::vector<int8_t> weights(n * k);
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<int8_t>(static_cast<int>(i * 11 % 29) - 14);
  const std::vector<float> w_scales = {0.02f, 0.05f, 0.01f};
  const std::vector<float> bias = {0.1f, -0.2f, 0.3f};
  GraphBuilder g;
  const uint32_t x = g.input({rows, k}, 0);
  const uint32_t xq = g.dynamic_quant({rows, k}, 1);
  const uint32_t w = g.per_channel(DT::xnn_datatype_qcint8, {n, k}, w_scales, 0, g.constant(weights.data(), n * k));
  const uint32_t b = g.f32_constant({n}, bias);
  const uint32_t y = g.output({rows, n}, 1);
  g.unary(XNodeUnion::XNNConvert, x, xq);
  g.fully_connected(xq, w, b, y, 0.0f, kInf);  // fused ReLU
  Executor ex(parse_graph(g.payload(), nullptr));
  std::vector<float> input(rows * k);
  for (size_t i = 0; i < input.size(); ++i) input[i] = std::sin(static_cast<float>(i)) * 2.0f;
  std::vector<std::unique_ptr<OwnedTensor>> t;
  t.push_back(OwnedTensor::make<float>(ScalarType::Float, {rows, k}, input));
  t.push_back(OwnedTensor::make<float>(ScalarType::Float, {rows, n}, {}));
  run(ex, t);
  const std::vector<float> got = t[1]->values<float>();
  for (uint32_t r = 0; r < rows; ++r) {
    for (uint32_t j = 0; j < n; ++j) {
      double acc = bias[j];
      for (uint32_t i = 0; i < k; ++i) acc += double(input[r * k + i]) * weights[j * k + i] * w_scales[j];
      // The row's activations are rounded to 1/255 of their range (4 here): a small error per term.
      EXPECT_NEAR(got[r * n + j], std::max(acc, 0.0), 0.05) << r << "," << j;
    }
  }
}

// 8-bit quantized nodes the 2022 XNNPACK lacks: a table-driven unary (sigmoid), division through fp32,
// and uint8 conversions.
TEST(XnnpackBackend, QuantizedFallbacks) {
  GraphBuilder g;
  const uint32_t x = g.input({6}, 0), y = g.input({6}, 1);
  const uint32_t xq = g.per_tensor(DT::xnn_datatype_qint8, {6}, 0.05f, 2);
  const uint32_t sq = g.per_tensor(DT::xnn_datatype_qint8, {6}, 1.0f / 256.0f, -128);
  const uint32_t yq = g.per_tensor(DT::xnn_datatype_quint8, {6}, 0.02f, 128);
  const uint32_t dq = g.per_tensor(DT::xnn_datatype_qint8, {6}, 0.1f, 0);
  const uint32_t sig = g.output({6}, 2), div = g.output({6}, 3);
  g.unary(XNodeUnion::XNNConvert, x, xq);
  g.unary(XNodeUnion::XNNSigmoid, xq, sq);
  g.unary(XNodeUnion::XNNConvert, sq, sig);
  g.unary(XNodeUnion::XNNConvert, y, yq);
  g.binary(XNodeUnion::XNNDiv, xq, yq, dq);
  g.unary(XNodeUnion::XNNConvert, dq, div);
  Executor ex(parse_graph(g.payload(), nullptr));
  const std::vector<float> xv = {-3.0f, -1.0f, 0.0f, 0.5f, 2.0f, 6.0f};
  const std::vector<float> yv = {0.5f, -1.0f, 2.0f, 0.25f, -0.5f, 1.0f};
  std::vector<std::unique_ptr<OwnedTensor>> t;
  t.push_back(OwnedTensor::make<float>(ScalarType::Float, {6}, xv));
  t.push_back(OwnedTensor::make<float>(ScalarType::Float, {6}, yv));
  t.push_back(OwnedTensor::make<float>(ScalarType::Float, {6}, {}));
  t.push_back(OwnedTensor::make<float>(ScalarType::Float, {6}, {}));
  run(ex, t);
  const std::vector<float> s = t[2]->values<float>(), d = t[3]->values<float>();
  for (size_t i = 0; i < 6; ++i) {
    // Inputs land on the 0.05 grid (6.0 is on it: code 122).
    const float xr = (std::clamp(std::nearbyint(xv[i] / 0.05f) + 2.0f, -128.0f, 127.0f) - 2.0f) * 0.05f;
    const float sr = (std::clamp(std::nearbyint(1.0f / (1.0f + std::exp(-xr)) * 256.0f) - 128.0f, -128.0f, 127.0f) +
                      128.0f) / 256.0f;
    EXPECT_FLOAT_EQ(s[i], sr) << i;
    const float yr = (std::clamp(std::nearbyint(yv[i] / 0.02f) + 128.0f, 0.0f, 255.0f) - 128.0f) * 0.02f;
    const float dr = std::clamp(std::nearbyint(xr / yr / 0.1f), -128.0f, 127.0f) * 0.1f;
    EXPECT_NEAR(d[i], dr, 1e-6) << i;
  }
}

// qs8 global average pooling rounds after adding the output zero point, half to even, as the official runtime's
// XNNPACK does: with the odd zero point -7 a tie of +0.5 steps lands on code -6 (not -7), -0.5 on -8.
TEST(XnnpackBackend, QuantizedGlobalAveragePoolingRoundsTiesLikeTheOfficialRuntime) {
  GraphBuilder g;
  const uint32_t x = g.input({1, 2, 2, 4}, 0);
  const uint32_t xq = g.per_tensor(DT::xnn_datatype_qint8, {1, 2, 2, 4}, 0.5f, -7);
  const uint32_t pq = g.per_tensor(DT::xnn_datatype_qint8, {1, 1, 1, 4}, 0.5f, -7);
  const uint32_t y = g.output({1, 1, 1, 4}, 1);
  g.unary(XNodeUnion::XNNConvert, x, xq);
  g.unary(XNodeUnion::XNNGlobalAvgPooling2d, xq, pq);
  g.unary(XNodeUnion::XNNConvert, pq, y);
  Executor ex(parse_graph(g.payload(), nullptr));
  // Steps above the zero point, pixel by pixel (NHWC): channel sums 2, 3, -2 and 6 over 4 pixels.
  const std::vector<float> steps = {1, 3, -1, 5, 1, 0, -1, 1, 0, 0, 0, 0, 0, 0, 0, 0};
  std::vector<float> xv;
  for (float v : steps) xv.push_back(v * 0.5f);
  std::vector<std::unique_ptr<OwnedTensor>> t;
  t.push_back(OwnedTensor::make<float>(ScalarType::Float, {1, 2, 2, 4}, xv));
  t.push_back(OwnedTensor::make<float>(ScalarType::Float, {1, 1, 1, 4}, {}));
  run(ex, t);
  // 0.5 -> code -6.5 -> -6; 0.75 -> -6.25 -> -6; -0.5 -> -7.5 -> -8; 1.5 -> -5.5 -> -6 (relative rounding would
  // give 0, 1, 0, 2 steps).
  EXPECT_EQ(t[1]->values<float>(), (std::vector<float>{0.5f, 0.5f, -0.5f, 0.5f}));
}

// Dynamically quantized linears with 4-bit weights: per channel (qcint4) and blockwise (qbint4, bf16 scales
// per group of 4 inputs), against the same arithmetic in doubles on the quantized activations.
TEST(XnnpackBackend, DynamicallyQuantizedFullyConnected4Bit) {
  const uint32_t k = 8, n = 3, rows = 2, group = 4;
  std::vector<int8_t> weights(n * k);
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<int8_t>(static_cast<int>(i * 5 % 16) - 8);
  std::vector<uint8_t> packed(n * k / 2);
  for (size_t j = 0; j < n; ++j) {
    for (size_t i = 0; i < k; i += 2) {
      packed[(j * k + i) / 2] = static_cast<uint8_t>((weights[j * k + i] + 8) | ((weights[j * k + i + 1] + 8) << 4));
    }
  }
  // bf16 scales: 0.5, 0.25, 0.125, ... (exact in bf16).
  std::vector<uint16_t> bf16(n * (k / group));
  std::vector<float> block_scales(bf16.size());
  for (size_t i = 0; i < bf16.size(); ++i) {
    block_scales[i] = std::ldexp(1.0f, -static_cast<int>(i % 3) - 1);
    uint32_t bits;
    std::memcpy(&bits, &block_scales[i], 4);
    bf16[i] = static_cast<uint16_t>(bits >> 16);
  }
  const std::vector<float> channel_scales = {0.5f, 0.25f, 0.125f};
  std::vector<float> input(rows * k);
  for (size_t i = 0; i < input.size(); ++i) input[i] = std::cos(static_cast<float>(i)) * 1.5f;
  for (int blockwise = 0; blockwise < 2; ++blockwise) {
    GraphBuilder g;
    const uint32_t x = g.input({rows, k}, 0);
    const uint32_t xq = g.dynamic_quant({rows, k}, 1);
    const uint32_t wc = g.constant(packed.data(), packed.size());
    const uint32_t w = blockwise ? g.blockwise({n, k}, bf16, static_cast<int32_t>(group), wc)
                                 : g.per_channel(DT::xnn_datatype_qcint4, {n, k}, channel_scales, 0, wc);
    const uint32_t y = g.output({rows, n}, 1);
    g.unary(XNodeUnion::XNNConvert, x, xq);
    g.fully_connected(xq, w, kInvalidId, y);
    Executor ex(parse_graph(g.payload(), nullptr));
    std::vector<std::unique_ptr<OwnedTensor>> t;
    t.push_back(OwnedTensor::make<float>(ScalarType::Float, {rows, k}, input));
    t.push_back(OwnedTensor::make<float>(ScalarType::Float, {rows, n}, {}));
    run(ex, t);
    const std::vector<float> got = t[1]->values<float>();
    for (uint32_t r = 0; r < rows; ++r) {
      std::vector<int8_t> q(k);
      DynamicQuantParams p;
      quantize_dynamic_rows(input.data() + r * k, 1, k, q.data(), &p);
      for (uint32_t j = 0; j < n; ++j) {
        double acc = 0;
        for (uint32_t i = 0; i < k; ++i) {
          const double scale = blockwise ? block_scales[j * (k / group) + i / group] : channel_scales[j];
          acc += double(q[i] - p.zero_point) * weights[j * k + i] * scale;
        }
        EXPECT_NEAR(got[r * n + j], acc * p.scale, 1e-5) << (blockwise ? "blockwise " : "per-channel ") << r << "," << j;
      }
    }
  }
}

// Max pooling with indices: the int32 index output is widened in place into an int64 tensor.
TEST(XnnpackBackend, ArgMaxPoolingWidensIndices) {
  GraphBuilder g;
  const uint32_t x = g.input({1, 2, 2, 1}, 0);
  const uint32_t values = g.output({1, 1, 1, 1}, 1);
  const uint32_t indices = g.output({1, 1, 1, 1}, 2, DT::xnn_datatype_int32);
  g.node(XNodeUnion::XNNArgMaxPooling2d,
         fb_xnnpack::CreateXNNArgMaxPooling2d(g.fbb(), 0, 0, 0, 0, 2, 2, x, values, indices, 0).Union());
  Executor ex(parse_graph(g.payload(), nullptr));
  std::vector<std::unique_ptr<OwnedTensor>> t;
  t.push_back(OwnedTensor::make<float>(ScalarType::Float, {1, 2, 2, 1}, {1.0f, 7.0f, -3.0f, 2.0f}));
  t.push_back(OwnedTensor::make<float>(ScalarType::Float, {1, 1, 1, 1}, {}));
  t.push_back(OwnedTensor::make<int64_t>(ScalarType::Long, {1, 1, 1, 1}, {-1}));
  run(ex, t);
  EXPECT_EQ(t[1]->values<float>()[0], 7.0f);
  // XNNPACK numbers the window column by column: (y=0, x=1) is element 1 * pooling_height + 0 = 2.
  EXPECT_EQ(t[2]->values<int64_t>()[0], 2);
}

TEST(XnnpackBackend, RejectsBadArguments) {
  GraphBuilder g;
  const uint32_t a = g.input({3}, 0), out = g.output({3}, 1);
  g.unary(XNodeUnion::XNNAbs, a, out);
  Executor ex(parse_graph(g.payload(), nullptr));
  auto x = OwnedTensor::make<int64_t>(ScalarType::Long, {3}, {1, 2, 3});
  auto y = OwnedTensor::make<float>(ScalarType::Float, {3}, {});
  std::vector<EValue> wrong_dtype = {EValue::from_tensor(&x->tensor), EValue::from_tensor(&y->tensor)};
  EXPECT_THROW(ex.execute(arg_ptrs(wrong_dtype)), Error);
  std::vector<EValue> too_few = {EValue::from_tensor(&y->tensor)};
  EXPECT_THROW(ex.execute(arg_ptrs(too_few)), Error);
  std::vector<EValue> not_tensor = {EValue::from_int(3), EValue::from_tensor(&y->tensor)};
  try {
    ex.execute(arg_ptrs(not_tensor));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::ExecutionError);
    EXPECT_NE(std::string(e.what()).find("expected a tensor"), std::string::npos) << e.what();
  }
}

TEST(XnnpackBackend, Options) {
  std::shared_ptr<Backend> backend = find_backend("XnnpackBackend");
  ASSERT_NE(backend, nullptr);
  const size_t before = ThreadPool::global().num_threads();
  backend->set_option("num_threads", int64_t{1});
  EXPECT_EQ(std::get<int64_t>(backend->get_option("num_threads")), 1);
  EXPECT_EQ(ThreadPool::global().num_threads(), 1u);
  backend->set_option("num_threads", static_cast<int64_t>(before));
  EXPECT_EQ(ThreadPool::global().num_threads(), before);

  backend->set_option("workspace_sharing_mode", int64_t{0});
  EXPECT_EQ(std::get<int64_t>(backend->get_option("workspace_sharing_mode")), 0);
  backend->set_option("workspace_sharing_mode", int64_t{1});  // the default, which other tests expect
  EXPECT_EQ(std::get<int64_t>(backend->get_option("workspace_sharing_mode")), 1);
  auto expect_invalid = [&](std::string_view key, const BackendOptionValue& v) {
    try {
      backend->set_option(key, v);
      FAIL() << key;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    }
  };
  expect_invalid("workspace_sharing_mode", int64_t{2});  // global sharing (xnnpack_options_test.cpp)
  expect_invalid("workspace_sharing_mode", int64_t{3});
  expect_invalid("workspace_sharing_mode", std::string("global"));
  expect_invalid("num_threads", true);
  expect_invalid("no_such_option", int64_t{1});
  EXPECT_THROW(backend->get_option("no_such_option"), Error);
  EXPECT_EQ(backend->option_names(),
            (std::vector<std::string>{"num_threads", "workspace_sharing_mode", "weight_cache_enabled"}));
}

}  // namespace
}  // namespace etnp::xnn
