// The XNNPACK adapter (xnn_ops.h) on whichever operator API this build found (Debian 12's 2022 create/setup or
// Debian 13's 2024 create/reshape/setup): every operator family against values computed here, including what
// the 2024 API needs the adapter for (clamps after element-wise operators and the mean reduction, PReLU's kept
// slope, workspaces, a second setup with other shapes and one with the same shapes).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "backends/xnnpack/xnn_ops.h"
#include "etnp/threadpool.h"

namespace etnp::xnn::ops {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

class XnnpackOps : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(initialize(), xnn_status_success);
    RecordProperty("xnnpack_api", reshape_api() ? "create/reshape/setup (2024)" : "create/setup (2022)");
  }
};

/// start, start + step, ...; padded, as XNNPACK may read past the end of its inputs.
std::vector<float> ramp(size_t n, float start, float step) {
  std::vector<float> v(n + kExtraBytes);
  for (size_t i = 0; i < n; ++i) v[i] = start + step * static_cast<float>(i);
  return v;
}

TEST_F(XnnpackOps, BinaryF32BroadcastsAndClampsAcrossReshapes) {
  Operator op;
  ASSERT_EQ(create_binary_f32(BinaryOp::Add, -1.0f, 3.0f, op), xnn_status_success);
  ASSERT_TRUE(op.created());
  const std::vector<float> a = ramp(12, -3.0f, 0.5f), b = ramp(4, -1.0f, 0.75f);
  for (size_t rows : {2, 3, 3, 1}) {  // a new shape, the same shape again, a smaller one
    std::vector<float> out(rows * 4 + kExtraBytes, 99.0f);
    const size_t sa[2] = {rows, 4}, sb[1] = {4};
    ASSERT_EQ(setup_binary(op, 2, sa, 1, sb, a.data(), b.data(), out.data(), nullptr), xnn_status_success);
    ASSERT_EQ(op.run(nullptr), xnn_status_success);
    for (size_t i = 0; i < rows * 4; ++i) {
      EXPECT_FLOAT_EQ(out[i], std::clamp(a[i] + b[i % 4], -1.0f, 3.0f)) << rows << " rows, element " << i;
    }
    EXPECT_EQ(out[rows * 4], 99.0f) << "wrote past the output";
  }
  Operator mx;
  ASSERT_EQ(create_binary_f32(BinaryOp::Maximum, -kInf, kInf, mx), xnn_status_success);
  std::vector<float> out(8 + kExtraBytes);
  const size_t sa[2] = {2, 4}, sb[2] = {2, 1};
  ASSERT_EQ(setup_binary(mx, 2, sa, 2, sb, a.data(), b.data(), out.data(), nullptr), xnn_status_success);
  ASSERT_EQ(mx.run(nullptr), xnn_status_success);
  for (size_t i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(out[i], std::max(a[i], b[i / 4])) << i;
}

TEST_F(XnnpackOps, BinaryQS8ClampsTheCodes) {
  const QParams qa{0.1f, 3}, qb{0.05f, -2}, qo{0.2f, 1};
  Operator op;
  ASSERT_EQ(create_binary_qs8(BinaryOp::Add, qa, qb, qo, -20, 30, op), xnn_status_success);
  std::vector<int8_t> a(64 + kExtraBytes), b(64 + kExtraBytes), out(64 + kExtraBytes);
  for (int i = 0; i < 64; ++i) {
    a[i] = static_cast<int8_t>(i * 4 - 128);
    b[i] = static_cast<int8_t>(127 - i * 3);
  }
  const size_t s[1] = {64};
  ASSERT_EQ(setup_binary(op, 1, s, 1, s, a.data(), b.data(), out.data(), nullptr), xnn_status_success);
  ASSERT_EQ(op.run(nullptr), xnn_status_success);
  for (int i = 0; i < 64; ++i) {
    const double real = qa.scale * (a[i] - qa.zero_point) + qb.scale * (b[i] - qb.zero_point);
    const double code = std::clamp(std::nearbyint(real / qo.scale) + qo.zero_point, -20.0, 30.0);
    EXPECT_NEAR(out[i], code, 1.0) << i;
    EXPECT_GE(out[i], -20);
    EXPECT_LE(out[i], 30);
  }
  Operator div;
  EXPECT_NE(create_binary_qs8(BinaryOp::Divide, qa, qb, qo, -128, 127, div), xnn_status_success);
}

TEST_F(XnnpackOps, PReLUKeepsItsSlope) {
  std::vector<float> slope = {0.1f, 0.2f, 0.3f};
  Operator op;
  ASSERT_EQ(create_prelu_f32(3, slope.data(), op), xnn_status_success);
  slope.assign(3, 100.0f);  // the operator holds its own copy (or its packed form)
  const std::vector<float> x = ramp(12, -4.0f, 0.75f);
  std::vector<float> y(12 + kExtraBytes);
  for (size_t rows : {4, 2}) {
    ASSERT_EQ(setup_prelu_f32(op, rows, x.data(), y.data(), nullptr), xnn_status_success);
    ASSERT_EQ(op.run(nullptr), xnn_status_success);
    const float want_slope[3] = {0.1f, 0.2f, 0.3f};
    for (size_t i = 0; i < rows * 3; ++i) {
      EXPECT_FLOAT_EQ(y[i], x[i] < 0 ? x[i] * want_slope[i % 3] : x[i]) << i;
    }
  }
}

TEST_F(XnnpackOps, UnaryClampsConversionsAndFunctions) {
  const std::vector<float> x = ramp(40, -2.5f, 0.125f);
  std::vector<float> y(40 + kExtraBytes);
  auto run_f32 = [&](Operator& op) {
    ASSERT_TRUE(op.created());
    ASSERT_EQ(setup_unary(op, 40, x.data(), y.data(), nullptr), xnn_status_success);
    ASSERT_EQ(op.run(nullptr), xnn_status_success);
  };
  Operator clamp, elu, leaky, sigmoid, negate;
  ASSERT_EQ(create_clamp_f32(-1.0f, 0.5f, clamp), xnn_status_success);
  run_f32(clamp);
  for (size_t i = 0; i < 40; ++i) EXPECT_FLOAT_EQ(y[i], std::clamp(x[i], -1.0f, 0.5f)) << i;
  ASSERT_EQ(create_unary_f32(UnaryOp::ELU, 0.5f, elu), xnn_status_success);
  run_f32(elu);
  for (size_t i = 0; i < 40; ++i) EXPECT_NEAR(y[i], x[i] < 0 ? 0.5f * std::expm1(x[i]) : x[i], 1e-5f) << i;
  ASSERT_EQ(create_unary_f32(UnaryOp::LeakyReLU, 0.25f, leaky), xnn_status_success);
  run_f32(leaky);
  for (size_t i = 0; i < 40; ++i) EXPECT_FLOAT_EQ(y[i], x[i] < 0 ? 0.25f * x[i] : x[i]) << i;
  ASSERT_EQ(create_unary_f32(UnaryOp::Sigmoid, 0.0f, sigmoid), xnn_status_success);
  run_f32(sigmoid);
  for (size_t i = 0; i < 40; ++i) EXPECT_NEAR(y[i], 1.0f / (1.0f + std::exp(-x[i])), 1e-5f) << i;
  ASSERT_EQ(create_unary_f32(UnaryOp::Negate, 0.0f, negate), xnn_status_success);
  run_f32(negate);
  for (size_t i = 0; i < 40; ++i) EXPECT_EQ(y[i], -x[i]) << i;

  // f32 -> qs8 -> f32, then an int8 clamp on the codes.
  const QParams q{0.25f, 3};
  std::vector<int8_t> codes(40 + kExtraBytes), clamped(40 + kExtraBytes);
  Operator quantize, dequantize, clamp_s8;
  ASSERT_EQ(create_convert_f32_qs8(q, quantize), xnn_status_success);
  ASSERT_EQ(setup_unary(quantize, 40, x.data(), codes.data(), nullptr), xnn_status_success);
  ASSERT_EQ(quantize.run(nullptr), xnn_status_success);
  for (size_t i = 0; i < 40; ++i) EXPECT_EQ(codes[i], std::nearbyint(x[i] / q.scale) + q.zero_point) << i;
  ASSERT_EQ(create_convert_qs8_f32(q, dequantize), xnn_status_success);
  ASSERT_EQ(setup_unary(dequantize, 40, codes.data(), y.data(), nullptr), xnn_status_success);
  ASSERT_EQ(dequantize.run(nullptr), xnn_status_success);
  for (size_t i = 0; i < 40; ++i) EXPECT_FLOAT_EQ(y[i], q.scale * (codes[i] - q.zero_point)) << i;
  ASSERT_EQ(create_clamp_s8(-4, 6, clamp_s8), xnn_status_success);
  ASSERT_EQ(setup_unary(clamp_s8, 40, codes.data(), clamped.data(), nullptr), xnn_status_success);
  ASSERT_EQ(clamp_s8.run(nullptr), xnn_status_success);
  for (size_t i = 0; i < 40; ++i) EXPECT_EQ(clamped[i], std::clamp<int>(codes[i], -4, 6)) << i;
}

TEST_F(XnnpackOps, GlobalAveragePoolingWithOutputRange) {
  // [batch 2, 6 pixels, 5 channels]
  const std::vector<float> x = ramp(60, -3.0f, 0.2f);
  std::vector<float> y(10 + kExtraBytes);
  Operator op;
  ASSERT_EQ(create_global_average_pooling_f32(5, 0.0f, 2.0f, op), xnn_status_success);
  for (int round = 0; round < 2; ++round) {  // the second setup has nothing to reshape
    ASSERT_EQ(setup_global_average_pooling(op, 2, 6, x.data(), y.data(), ThreadPool::global().handle()),
              xnn_status_success);
    ASSERT_EQ(op.run(ThreadPool::global().handle()), xnn_status_success);
    for (size_t n = 0; n < 2; ++n) {
      for (size_t c = 0; c < 5; ++c) {
        float sum = 0;
        for (size_t p = 0; p < 6; ++p) sum += x[(n * 6 + p) * 5 + c];
        EXPECT_NEAR(y[n * 5 + c], std::clamp(sum / 6, 0.0f, 2.0f), 1e-5f) << n << "," << c;
      }
    }
  }
  const QParams qi{0.1f, -5}, qo{0.05f, 2};
  std::vector<int8_t> xq(60 + kExtraBytes), yq(10 + kExtraBytes);
  for (size_t i = 0; i < 60; ++i) xq[i] = static_cast<int8_t>(static_cast<int>(i * 7 % 200) - 100);
  Operator q;
  ASSERT_EQ(create_global_average_pooling_qs8(5, qi, qo, -128, 60, q), xnn_status_success);
  ASSERT_EQ(setup_global_average_pooling(q, 2, 6, xq.data(), yq.data(), nullptr), xnn_status_success);
  ASSERT_EQ(q.run(nullptr), xnn_status_success);
  for (size_t n = 0; n < 2; ++n) {
    for (size_t c = 0; c < 5; ++c) {
      double sum = 0;
      for (size_t p = 0; p < 6; ++p) sum += qi.scale * (xq[(n * 6 + p) * 5 + c] - qi.zero_point);
      const double code = std::clamp(std::nearbyint(sum / 6 / qo.scale) + qo.zero_point, -128.0, 60.0);
      EXPECT_NEAR(yq[n * 5 + c], code, 1.0) << n << "," << c;
      EXPECT_LE(yq[n * 5 + c], 60);
    }
  }
}

TEST_F(XnnpackOps, PoolingAndResize) {
  // [1, 4, 4, 2] NHWC
  const std::vector<float> x = ramp(32, -8.0f, 0.5f);
  auto at = [&](size_t h, size_t w, size_t c) { return x[(h * 4 + w) * 2 + c]; };
  PoolParams p;
  p.kernel_h = p.kernel_w = p.stride_h = p.stride_w = 2;
  Operator mx, avg, arg;
  std::vector<float> y(8 + kExtraBytes);
  ASSERT_EQ(create_max_pooling_f32(p, 2, -kInf, kInf, mx), xnn_status_success);
  ASSERT_EQ(setup_pooling(mx, 1, 4, 4, x.data(), y.data(), nullptr), xnn_status_success);
  ASSERT_EQ(mx.run(nullptr), xnn_status_success);
  for (size_t i = 0; i < 8; ++i) {
    const size_t oh = i / 4, ow = i / 2 % 2, c = i % 2;
    EXPECT_EQ(y[i], at(2 * oh + 1, 2 * ow + 1, c)) << i;  // the ramp grows along h and w
  }
  ASSERT_EQ(create_average_pooling_f32(p, 2, -1.0f, kInf, avg), xnn_status_success);
  ASSERT_EQ(setup_pooling(avg, 1, 4, 4, x.data(), y.data(), nullptr), xnn_status_success);
  ASSERT_EQ(avg.run(nullptr), xnn_status_success);
  for (size_t i = 0; i < 8; ++i) {
    const size_t oh = i / 4, ow = i / 2 % 2, c = i % 2;
    const float mean = (at(2 * oh, 2 * ow, c) + at(2 * oh, 2 * ow + 1, c) + at(2 * oh + 1, 2 * ow, c) +
                        at(2 * oh + 1, 2 * ow + 1, c)) / 4;
    EXPECT_FLOAT_EQ(y[i], std::max(mean, -1.0f)) << i;
  }
  std::vector<uint32_t> index(8 + kExtraBytes);
  ASSERT_EQ(create_argmax_pooling_f32(p, 2, arg), xnn_status_success);
  ASSERT_EQ(setup_argmax_pooling_f32(arg, 1, 4, 4, x.data(), y.data(), index.data(), nullptr), xnn_status_success);
  ASSERT_EQ(arg.run(nullptr), xnn_status_success);
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(y[i], at(2 * (i / 4) + 1, 2 * (i / 2 % 2) + 1, i % 2)) << i;
    EXPECT_EQ(index[i], 3u) << i;  // bottom right of each window
  }
  std::vector<int8_t> xq(32 + kExtraBytes), yq(8 + kExtraBytes);
  for (size_t i = 0; i < 32; ++i) xq[i] = static_cast<int8_t>(i * 3);
  Operator mq;
  ASSERT_EQ(create_max_pooling_s8(p, 2, -128, 50, mq), xnn_status_success);
  ASSERT_EQ(setup_pooling(mq, 1, 4, 4, xq.data(), yq.data(), nullptr), xnn_status_success);
  ASSERT_EQ(mq.run(nullptr), xnn_status_success);
  for (size_t i = 0; i < 8; ++i) {
    const size_t src = ((2 * (i / 4) + 1) * 4 + 2 * (i / 2 % 2) + 1) * 2 + i % 2;
    EXPECT_EQ(yq[i], std::min<int>(xq[src], 50)) << i;
  }
  // 2x2 -> 3x3 with aligned corners: the middle row and column are the means of their neighbours.
  const std::vector<float> img = {0, 10, 2, 20, 4, 30, 6, 40};  // [1, 2, 2, 2]
  std::vector<float> big(18 + kExtraBytes);
  Operator resize;
  ASSERT_EQ(create_resize_bilinear_f32(2, 3, 3, XNN_FLAG_ALIGN_CORNERS, resize), xnn_status_success);
  std::vector<float> img_padded(img);
  img_padded.resize(img.size() + kExtraBytes);
  ASSERT_EQ(setup_resize_bilinear_f32(resize, 1, 2, 2, img_padded.data(), big.data(), nullptr), xnn_status_success);
  ASSERT_EQ(resize.run(nullptr), xnn_status_success);
  EXPECT_FLOAT_EQ(big[0], 0.0f);
  EXPECT_FLOAT_EQ(big[(1 * 3 + 1) * 2 + 0], 3.0f);
  EXPECT_FLOAT_EQ(big[(1 * 3 + 1) * 2 + 1], 25.0f);
  EXPECT_FLOAT_EQ(big[(2 * 3 + 2) * 2 + 1], 40.0f);
}

TEST_F(XnnpackOps, ConvolutionsAndFullyConnected) {
  // A grouped 3x3 convolution, 2 groups of 2 -> 3 channels, padding 1, on [2, 5, 4, 4].
  ConvParams cp;
  cp.pad_top = cp.pad_right = cp.pad_bottom = cp.pad_left = 1;
  cp.kernel_h = cp.kernel_w = 3;
  cp.groups = 2;
  cp.group_input_channels = 2;
  cp.group_output_channels = 3;
  const std::vector<float> w = ramp(6 * 9 * 2, -1.0f, 0.02f), bias = ramp(6, 0.5f, -0.25f);
  const std::vector<float> x = ramp(2 * 5 * 4 * 4, 1.0f, -0.01f);
  std::vector<float> y(2 * 5 * 4 * 6 + kExtraBytes);
  Operator conv;
  ASSERT_EQ(create_convolution_f32(cp, w.data(), bias.data(), -kInf, 1.5f, conv), xnn_status_success);
  ASSERT_EQ(setup_convolution(conv, 2, 5, 4, x.data(), y.data(), nullptr), xnn_status_success);
  ASSERT_EQ(conv.run(nullptr), xnn_status_success);
  for (size_t n = 0; n < 2; ++n) {
    for (size_t oh = 0; oh < 5; ++oh) {
      for (size_t ow = 0; ow < 4; ++ow) {
        for (size_t oc = 0; oc < 6; ++oc) {
          const size_t g = oc / 3;
          float sum = bias[oc];
          for (size_t kh = 0; kh < 3; ++kh) {
            for (size_t kw = 0; kw < 3; ++kw) {
              const long ih = long(oh + kh) - 1, iw = long(ow + kw) - 1;
              if (ih < 0 || ih >= 5 || iw < 0 || iw >= 4) continue;
              for (size_t ic = 0; ic < 2; ++ic) {
                sum += w[((oc * 3 + kh) * 3 + kw) * 2 + ic] * x[((n * 5 + ih) * 4 + iw) * 4 + g * 2 + ic];
              }
            }
          }
          EXPECT_NEAR(y[((n * 5 + oh) * 4 + ow) * 6 + oc], std::min(sum, 1.5f), 1e-4f) << n << oh << ow << oc;
        }
      }
    }
  }
  // A 2x2 transposed convolution with stride 2 on [1, 2, 2, 1]: each input pixel paints a 2x2 block.
  ConvParams dp;
  dp.kernel_h = dp.kernel_w = dp.stride_h = dp.stride_w = 2;
  dp.group_input_channels = dp.group_output_channels = 1;
  const std::vector<float> dk = {1, 2, 3, 4}, dx = {1, -1, 2, 0.5f, 0, 0, 0, 0};
  std::vector<float> dy(16 + kExtraBytes);
  Operator deconv;
  ASSERT_EQ(create_deconvolution_f32(dp, dk.data(), nullptr, -kInf, kInf, deconv), xnn_status_success);
  std::vector<float> dx_padded(dx);
  dx_padded.resize(dx.size() + kExtraBytes);
  ASSERT_EQ(setup_deconvolution(deconv, 1, 2, 2, 0, 0, dx_padded.data(), dy.data(), nullptr), xnn_status_success);
  ASSERT_EQ(deconv.run(nullptr), xnn_status_success);
  for (size_t oh = 0; oh < 4; ++oh) {
    for (size_t ow = 0; ow < 4; ++ow) {
      EXPECT_FLOAT_EQ(dy[oh * 4 + ow], dx[(oh / 2) * 2 + ow / 2] * dk[(oh % 2) * 2 + ow % 2]) << oh << "," << ow;
    }
  }
  // int8 fully connected (per-tensor) and a per-channel 1x1 convolution as one: [3 rows, k 8] x [5 units, 8].
  const QParams qi{0.05f, -3}, qo{0.1f, 4};
  std::vector<int8_t> xq(24 + kExtraBytes), wq(40), yq(15 + kExtraBytes), yc(15 + kExtraBytes);
  for (size_t i = 0; i < 24; ++i) xq[i] = static_cast<int8_t>(int(i * 11 % 60) - 30);
  for (size_t i = 0; i < 40; ++i) wq[i] = static_cast<int8_t>(int(i * 7 % 50) - 25);
  const std::vector<int32_t> bq = {100, -50, 0, 7, 300};
  const float kscale = 0.02f;
  Operator fc, qc8;
  ASSERT_EQ(create_fully_connected_qs8(8, 5, qi, kscale, wq.data(), bq.data(), qo, -100, 100, false, fc),
            xnn_status_success);
  ASSERT_EQ(setup_fully_connected_qs8(fc, 3, xq.data(), yq.data(), nullptr), xnn_status_success);
  ASSERT_EQ(fc.run(nullptr), xnn_status_success);
  ConvParams pw;
  pw.group_input_channels = 8;
  pw.group_output_channels = 5;
  const std::vector<float> kscales(5, kscale);
  ASSERT_EQ(create_convolution_qc8(pw, qi, kscales.data(), wq.data(), bq.data(), qo, -100, 100, qc8),
            xnn_status_success);
  ASSERT_EQ(setup_convolution(qc8, 1, 3, 1, xq.data(), yc.data(), nullptr), xnn_status_success);
  ASSERT_EQ(qc8.run(nullptr), xnn_status_success);
  for (size_t r = 0; r < 3; ++r) {
    for (size_t u = 0; u < 5; ++u) {
      int32_t acc = bq[u];
      for (size_t k = 0; k < 8; ++k) acc += (xq[r * 8 + k] - qi.zero_point) * wq[u * 8 + k];
      const double code = std::clamp(std::nearbyint(acc * double(qi.scale) * kscale / qo.scale) + qo.zero_point,
                                     -100.0, 100.0);
      EXPECT_NEAR(yq[r * 5 + u], code, 1.0) << r << "," << u;
      EXPECT_NEAR(yc[r * 5 + u], code, 1.0) << r << "," << u;  // per-channel scales, all equal here
    }
  }
}

TEST_F(XnnpackOps, MovedOperatorsKeepWorking) {
  Operator a;
  ASSERT_EQ(create_clamp_f32(0.0f, 1.0f, a), xnn_status_success);
  Operator b(std::move(a));
  EXPECT_FALSE(a.created());
  const std::vector<float> x = ramp(8, -1.0f, 0.4f);
  std::vector<float> y(8 + kExtraBytes);
  ASSERT_EQ(setup_unary(b, 8, x.data(), y.data(), nullptr), xnn_status_success);
  ASSERT_EQ(b.run(nullptr), xnn_status_success);
  for (size_t i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(y[i], std::clamp(x[i], 0.0f, 1.0f));
  Operator c;
  EXPECT_EQ(setup_unary(c, 8, x.data(), y.data(), nullptr), xnn_status_invalid_state);  // never created
}

}  // namespace
}  // namespace etnp::xnn::ops
