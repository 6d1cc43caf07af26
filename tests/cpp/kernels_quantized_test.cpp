// quantized_decomposed::* kernels called directly, against hand-computed values. Where rounding is subtle the
// expectation is the reference arithmetic (float inv_scale, round half to even, zero point added in float);
// the float-vs-double cases were cross-checked with torch.quantize_per_tensor / _choose_qparams_per_tensor.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernel_test_util.h"
#include "kernels/kernel_util.h"

namespace etnp::testing {
namespace {



EValue T(const std::unique_ptr<OwnedTensor>& t) { return EValue::from_tensor(&t->tensor); }
EValue I(int64_t v) { return EValue::from_int(v); }
EValue D(double v) { return EValue::from_double(v); }
EValue DT(ScalarType t) { return EValue::from_int(static_cast<int64_t>(t)); }
EValue None() { return EValue(); }

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// ---- registration -----------------------------------------------------------------------------------------

TEST(QuantizedKernels, AllRegisteredWithExactArgumentCounts) {
  const std::pair<const char*, int> expected[] = {
      {"quantize_per_tensor.out", 8},        {"quantize_per_tensor.Tensor_out", 8},
      {"quantize_per_channel.out", 9},       {"quantize_per_token.out", 8},
      {"dequantize_per_tensor.out", 9},      {"dequantize_per_tensor.Tensor_out", 9},
      {"dequantize_per_channel.out", 10},    {"dequantize_per_token.out", 9},
      {"choose_qparams.Tensor_out", 8},      {"choose_qparams_per_token_asymmetric.out", 5},
      {"embedding_byte.out", 8},             {"embedding_byte.dtype_out", 9},
      {"embedding_2bit.out", 8},             {"embedding_2bit.dtype_out", 9},
      {"embedding_4bit.out", 8},             {"embedding_4bit.dtype_out", 9},
      {"mixed_mm.out", 6},                   {"mixed_linear.out", 7},
      {"add.out", 16},
  };
  for (const auto& [name, count] : expected) {
    const KernelEntry* e = runtime::kernel_registry().find(std::string("quantized_decomposed::") + name);
    ASSERT_NE(e, nullptr) << name;
    EXPECT_EQ(e->num_args, count) << name;
  }
}

// ---- quantize ---------------------------------------------------------------------------------------------

TEST(QuantizedKernels, QuantizePerTensorRoundsHalfToEvenAndClamps) {
  auto x = OwnedTensor::make<float>(ScalarType::Float, {8}, {0.25f, 0.75f, -0.25f, 1.25f, 100.f, -100.f, 1.0f, -0.75f});
  auto out = OwnedTensor::make<uint8_t>(ScalarType::Byte, {8}, {});
  std::vector<EValue> args = {T(x), D(0.5), I(3), I(0), I(255), DT(ScalarType::Byte), T(out), T(out)};
  call_kernel("quantized_decomposed::quantize_per_tensor.out", args);
  // x / 0.5 = 0.5, 1.5, -0.5, 2.5, 200, -200, 2, -1.5 -> even rounding 0, 2, -0, 2, 200, -200, 2, -2; + 3; clamp.
  EXPECT_EQ(out->values<uint8_t>(), (std::vector<uint8_t>{3, 5, 3, 5, 203, 0, 5, 1}));
}

TEST(QuantizedKernels, LargeTensorsTakeTheParallelPathWithTheSameResults) {
  // 100000 elements: the contiguous per-tensor path splits the work across threads.
  const int64_t n = 100000;
  std::vector<float> xs(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) xs[static_cast<size_t>(i)] = static_cast<float>(i % 1001 - 500) * 0.01f;
  auto x = OwnedTensor::make<float>(ScalarType::Float, {n}, xs);
  auto q = OwnedTensor::make<int8_t>(ScalarType::Char, {n}, {});
  std::vector<EValue> args = {T(x), D(0.02), I(1), I(-128), I(127), DT(ScalarType::Char), T(q), T(q)};
  call_kernel("quantized_decomposed::quantize_per_tensor.out", args);
  auto back = OwnedTensor::make<float>(ScalarType::Float, {n}, {});
  std::vector<EValue> args2 = {T(q), D(0.02), I(1), I(-128), I(127), DT(ScalarType::Char), None(), T(back), T(back)};
  call_kernel("quantized_decomposed::dequantize_per_tensor.out", args2);
  const auto qv = q->values<int8_t>();
  const auto bv = back->values<float>();
  const float inv = 1.0f / 0.02f;
  for (int64_t i = 0; i < n; ++i) {
    const float v = xs[static_cast<size_t>(i)];
    const int64_t expect = std::clamp<int64_t>(static_cast<int64_t>(1.0f + std::nearbyint(inv * v)), -128, 127);
    ASSERT_EQ(qv[static_cast<size_t>(i)], expect) << "element " << i;
    ASSERT_EQ(bv[static_cast<size_t>(i)], static_cast<float>(expect - 1) * 0.02f) << "element " << i;
  }
}

TEST(QuantizedKernels, QuantizeUsesFloatInverseScale) {
  // 0.35f * (1.0f / 0.1f) = 3.5 exactly in float (-> 4), while 0.35f / 0.1 in double is 3.4999999 (-> 3).
  auto x = OwnedTensor::make<float>(ScalarType::Float, {1}, {0.35f});
  auto out = OwnedTensor::make<int8_t>(ScalarType::Char, {1}, {});
  std::vector<EValue> args = {T(x), D(0.1), I(0), I(-128), I(127), DT(ScalarType::Char), T(out), T(out)};
  call_kernel("quantized_decomposed::quantize_per_tensor.out", args);
  EXPECT_EQ(out->values<int8_t>()[0], 4);
}

TEST(QuantizedKernels, QuantizeNonFiniteGoesToQuantMinLikeReference) {
  auto x = OwnedTensor::make<float>(ScalarType::Float, {4}, {kNaN, kInf, -kInf, 1e30f});
  auto out = OwnedTensor::make<int8_t>(ScalarType::Char, {4}, {});
  std::vector<EValue> args = {T(x), D(1.0), I(0), I(-10), I(10), DT(ScalarType::Char), T(out), T(out)};
  call_kernel("quantized_decomposed::quantize_per_tensor.out", args);
  EXPECT_EQ(out->values<int8_t>(), (std::vector<int8_t>{-10, -10, -10, -10}));
}

TEST(QuantizedKernels, QuantizePerTensorTensorArgsAndDoubleAndHalfInputs) {
  auto scale = OwnedTensor::make<double>(ScalarType::Double, {1}, {0.25});
  auto zp = OwnedTensor::make<int64_t>(ScalarType::Long, {1}, {-2});
  auto xd = OwnedTensor::make<double>(ScalarType::Double, {3}, {0.125, -1.0, 40.0});
  auto out = OwnedTensor::make<int16_t>(ScalarType::Short, {3}, {});
  std::vector<EValue> args = {T(xd), T(scale), T(zp), I(-100), I(100), DT(ScalarType::Short), T(out), T(out)};
  call_kernel("quantized_decomposed::quantize_per_tensor.Tensor_out", args);
  EXPECT_EQ(out->values<int16_t>(), (std::vector<int16_t>{-2, -6, 100}));  // 0.5->0, -4, 160 -> clamp

  std::vector<Half> hv = {Half(0.375f), Half(-0.625f)};
  auto xh = OwnedTensor::make<Half>(ScalarType::Half, {2}, hv);
  auto out8 = OwnedTensor::make<uint8_t>(ScalarType::Byte, {2}, {});
  std::vector<EValue> args2 = {T(xh), T(scale), T(zp), I(0), I(255), DT(ScalarType::Byte), T(out8), T(out8)};
  call_kernel("quantized_decomposed::quantize_per_tensor.Tensor_out", args2);
  EXPECT_EQ(out8->values<uint8_t>(), (std::vector<uint8_t>{0, 0}));  // 1.5->2-2=0; -2.5->-2-2=-4 -> clamp 0

  auto bad_scale = OwnedTensor::make<float>(ScalarType::Float, {1}, {0.25f});
  std::vector<EValue> args3 = {T(xd), T(bad_scale), T(zp), I(-100), I(100), DT(ScalarType::Short), T(out), T(out)};
  EXPECT_THROW(call_kernel("quantized_decomposed::quantize_per_tensor.Tensor_out", args3), etnp::Error);
}

TEST(QuantizedKernels, QuantizeRejectsBadArguments) {
  auto x = OwnedTensor::make<float>(ScalarType::Float, {2}, {1.f, 2.f});
  auto out = OwnedTensor::make<uint8_t>(ScalarType::Byte, {2}, {});
  // dtype argument differs from out's dtype
  std::vector<EValue> a1 = {T(x), D(1.0), I(0), I(0), I(255), DT(ScalarType::Char), T(out), T(out)};
  EXPECT_THROW(call_kernel("quantized_decomposed::quantize_per_tensor.out", a1), etnp::Error);
  // quant_max above the uint8 range
  std::vector<EValue> a2 = {T(x), D(1.0), I(0), I(0), I(256), DT(ScalarType::Byte), T(out), T(out)};
  EXPECT_THROW(call_kernel("quantized_decomposed::quantize_per_tensor.out", a2), etnp::Error);
  // integer input
  auto xi = OwnedTensor::make<int32_t>(ScalarType::Int, {2}, {1, 2});
  std::vector<EValue> a3 = {T(xi), D(1.0), I(0), I(0), I(255), DT(ScalarType::Byte), T(out), T(out)};
  EXPECT_THROW(call_kernel("quantized_decomposed::quantize_per_tensor.out", a3), etnp::Error);
  // out of the wrong shape (static)
  auto out3 = OwnedTensor::make<uint8_t>(ScalarType::Byte, {3}, {});
  std::vector<EValue> a4 = {T(x), D(1.0), I(0), I(0), I(255), DT(ScalarType::Byte), T(out3), T(out3)};
  EXPECT_THROW(call_kernel("quantized_decomposed::quantize_per_tensor.out", a4), etnp::Error);
}

TEST(QuantizedKernels, QuantizePerChannelUsesTheAxisParameters) {
  auto x = OwnedTensor::make<float>(ScalarType::Float, {2, 3}, {1.f, 1.f, 1.f, -3.f, 5.f, 6.f});
  auto scales = OwnedTensor::make<double>(ScalarType::Double, {3}, {0.5, 1.0, 2.0});
  auto zps = OwnedTensor::make<int64_t>(ScalarType::Long, {3}, {0, 1, -1});
  auto out = OwnedTensor::make<int8_t>(ScalarType::Char, {2, 3}, {});
  std::vector<EValue> args = {T(x), T(scales), T(zps), I(-1), I(-128), I(127), DT(ScalarType::Char), T(out), T(out)};
  call_kernel("quantized_decomposed::quantize_per_channel.out", args);
  // channel 0: x*2; channel 1: x+1; channel 2: x/2 - 1 (0.5 -> 0, 3 -> 3)
  EXPECT_EQ(out->values<int8_t>(), (std::vector<int8_t>{2, 2, -1, -6, 6, 2}));

  // Same logical input stored column-major (dim order 1,0): results land at the out's logical positions.
  auto xt = OwnedTensor::make<float>(ScalarType::Float, {2, 3}, {1.f, -3.f, 1.f, 5.f, 1.f, 6.f},
                                     ShapeDynamism::Static, -1, {1, 0});
  auto out2 = OwnedTensor::make<int8_t>(ScalarType::Char, {2, 3}, {});
  std::vector<EValue> args2 = {T(xt), T(scales), T(zps), I(1), I(-128), I(127), DT(ScalarType::Char), T(out2), T(out2)};
  call_kernel("quantized_decomposed::quantize_per_channel.out", args2);
  EXPECT_EQ(out2->values<int8_t>(), (std::vector<int8_t>{2, 2, -1, -6, 6, 2}));

  auto short_scales = OwnedTensor::make<double>(ScalarType::Double, {2}, {0.5, 1.0});
  std::vector<EValue> bad = {T(x),   T(short_scales), T(zps), I(1), I(-128),
                             I(127), DT(ScalarType::Char), T(out), T(out)};
  EXPECT_THROW(call_kernel("quantized_decomposed::quantize_per_channel.out", bad), etnp::Error);
  std::vector<EValue> bad_axis = {T(x), T(scales), T(zps), I(2), I(-128), I(127), DT(ScalarType::Char), T(out), T(out)};
  EXPECT_THROW(call_kernel("quantized_decomposed::quantize_per_channel.out", bad_axis), etnp::Error);
}

TEST(QuantizedKernels, QuantizePerTokenUsesOneParameterPerRow) {
  auto x = OwnedTensor::make<float>(ScalarType::Float, {2, 1, 2}, {1.f, 2.f, 1.f, 2.f});
  auto scales = OwnedTensor::make<double>(ScalarType::Double, {2, 1, 1}, {0.5, 0.25});
  auto zps = OwnedTensor::make<int64_t>(ScalarType::Long, {2, 1, 1}, {1, -1});
  auto out = OwnedTensor::make<int8_t>(ScalarType::Char, {2, 1, 2}, {});
  std::vector<EValue> args = {T(x), T(scales), T(zps), I(-128), I(127), DT(ScalarType::Char), T(out), T(out)};
  call_kernel("quantized_decomposed::quantize_per_token.out", args);
  EXPECT_EQ(out->values<int8_t>(), (std::vector<int8_t>{3, 5, 3, 7}));
}

// ---- dequantize -------------------------------------------------------------------------------------------

TEST(QuantizedKernels, DequantizePerTensorToFloatAndHalf) {
  auto q = OwnedTensor::make<uint8_t>(ScalarType::Byte, {3}, {0, 3, 255});
  auto out = OwnedTensor::make<float>(ScalarType::Float, {3}, {});
  std::vector<EValue> args = {T(q), D(0.5), I(3), I(0), I(255), DT(ScalarType::Byte), None(), T(out), T(out)};
  call_kernel("quantized_decomposed::dequantize_per_tensor.out", args);
  EXPECT_EQ(out->values<float>(), (std::vector<float>{-1.5f, 0.f, 126.f}));

  auto outh = OwnedTensor::make<Half>(ScalarType::Half, {3}, {});
  std::vector<EValue> args2 = {T(q), D(0.5), I(3), I(0), I(255), DT(ScalarType::Byte), DT(ScalarType::Half), T(outh),
                               T(outh)};
  call_kernel("quantized_decomposed::dequantize_per_tensor.out", args2);
  const auto h = outh->values<Half>();
  EXPECT_EQ(float(h[0]), -1.5f);
  EXPECT_EQ(float(h[2]), 126.f);

  // The scale is used as float32: 0.1 (double) * 3 gives float(0.1f * 3) = 0.3f, not the double product.
  auto q8 = OwnedTensor::make<int8_t>(ScalarType::Char, {1}, {3});
  auto outd = OwnedTensor::make<double>(ScalarType::Double, {1}, {});
  std::vector<EValue> args3 = {T(q8), D(0.1), I(0), I(-128), I(127), DT(ScalarType::Char), None(), T(outd), T(outd)};
  call_kernel("quantized_decomposed::dequantize_per_tensor.out", args3);
  EXPECT_EQ(outd->values<double>()[0], static_cast<double>(3.0f * 0.1f));

  // out_dtype that disagrees with out, and input dtype that disagrees with dtype, are errors
  std::vector<EValue> bad1 = {T(q), D(0.5), I(3), I(0), I(255), DT(ScalarType::Byte), DT(ScalarType::Double), T(out),
                              T(out)};
  EXPECT_THROW(call_kernel("quantized_decomposed::dequantize_per_tensor.out", bad1), etnp::Error);
  std::vector<EValue> bad2 = {T(q), D(0.5), I(3), I(0), I(255), DT(ScalarType::Char), None(), T(out), T(out)};
  EXPECT_THROW(call_kernel("quantized_decomposed::dequantize_per_tensor.out", bad2), etnp::Error);
}

TEST(QuantizedKernels, DequantizePerTensorTensorArgs) {
  auto q = OwnedTensor::make<int32_t>(ScalarType::Int, {2}, {-100000, 7});
  auto scale = OwnedTensor::make<double>(ScalarType::Double, {1}, {0.5});
  auto zp = OwnedTensor::make<int64_t>(ScalarType::Long, {1}, {1});
  auto out = OwnedTensor::make<float>(ScalarType::Float, {2}, {});
  std::vector<EValue> args = {T(q), T(scale), T(zp), I(std::numeric_limits<int32_t>::min()),
                              I(std::numeric_limits<int32_t>::max()), DT(ScalarType::Int), None(), T(out), T(out)};
  call_kernel("quantized_decomposed::dequantize_per_tensor.Tensor_out", args);
  EXPECT_EQ(out->values<float>(), (std::vector<float>{-50000.5f, 3.f}));
}

TEST(QuantizedKernels, DequantizePerChannelWithAndWithoutZeroPoints) {
  auto q = OwnedTensor::make<int8_t>(ScalarType::Char, {2, 2}, {1, 2, 3, 4});
  auto scales = OwnedTensor::make<float>(ScalarType::Float, {2}, {0.5f, 2.f});
  auto zps = OwnedTensor::make<int32_t>(ScalarType::Int, {2}, {1, -1});
  auto out = OwnedTensor::make<float>(ScalarType::Float, {2, 2}, {});
  std::vector<EValue> args = {T(q), T(scales), T(zps), I(0), I(-128), I(127), DT(ScalarType::Char), None(), T(out),
                              T(out)};
  call_kernel("quantized_decomposed::dequantize_per_channel.out", args);
  EXPECT_EQ(out->values<float>(), (std::vector<float>{0.f, 0.5f, 8.f, 10.f}));

  std::vector<EValue> args2 = {T(q), T(scales), None(), I(1), I(-128), I(127), DT(ScalarType::Char), None(), T(out),
                               T(out)};
  call_kernel("quantized_decomposed::dequantize_per_channel.out", args2);
  EXPECT_EQ(out->values<float>(), (std::vector<float>{0.5f, 4.f, 1.5f, 8.f}));
}

TEST(QuantizedKernels, DequantizePerToken) {
  auto q = OwnedTensor::make<int8_t>(ScalarType::Char, {3, 2}, {0, 1, 2, 3, 4, 5});
  auto scales = OwnedTensor::make<float>(ScalarType::Float, {3, 1}, {1.f, 0.5f, 0.25f});
  auto zps = OwnedTensor::make<int64_t>(ScalarType::Long, {3, 1}, {0, 2, 4});
  auto out = OwnedTensor::make<float>(ScalarType::Float, {3, 2}, {});
  std::vector<EValue> args = {T(q), T(scales), T(zps), I(-128), I(127), DT(ScalarType::Char), DT(ScalarType::Float),
                              T(out), T(out)};
  call_kernel("quantized_decomposed::dequantize_per_token.out", args);
  EXPECT_EQ(out->values<float>(), (std::vector<float>{0.f, 1.f, 0.f, 0.5f, 0.f, 0.25f}));
}

// ---- choose_qparams ---------------------------------------------------------------------------------------

TEST(QuantizedKernels, ChooseQparamsPerTensor) {
  auto x = OwnedTensor::make<float>(ScalarType::Float, {3}, {-1.f, 0.5f, 2.f});
  auto scale = OwnedTensor::make<double>(ScalarType::Double, {1}, {});
  auto zp = OwnedTensor::make<int64_t>(ScalarType::Long, {1}, {});
  std::vector<EValue> args = {T(x), I(0), I(255), D(1e-7), DT(ScalarType::Byte), T(scale), T(zp), None()};
  call_kernel("quantized_decomposed::choose_qparams.Tensor_out", args);
  EXPECT_EQ(scale->values<double>()[0], 3.0 / 255);  // torch._choose_qparams_per_tensor: (0.011764705882352941, 85)
  EXPECT_EQ(zp->values<int64_t>()[0], 85);

  // all zeros: scale falls back to 0.1; the zero point comes from the side with the smaller error
  auto zeros = OwnedTensor::make<float>(ScalarType::Float, {2}, {0.f, 0.f});
  std::vector<EValue> args2 = {T(zeros), I(-128), I(127), D(1e-7), DT(ScalarType::Char), T(scale), T(zp), None()};
  call_kernel("quantized_decomposed::choose_qparams.Tensor_out", args2);
  EXPECT_EQ(scale->values<double>()[0], 0.1);
  EXPECT_EQ(zp->values<int64_t>()[0], 127);

  // tiny range: the scale is raised to the 6.1e-5 floor
  auto tiny = OwnedTensor::make<float>(ScalarType::Float, {2}, {0.f, 1e-3f});
  std::vector<EValue> args3 = {T(tiny), I(0), I(255), D(1e-7), DT(ScalarType::Byte), T(scale), T(zp), None()};
  call_kernel("quantized_decomposed::choose_qparams.Tensor_out", args3);
  EXPECT_EQ(scale->values<double>()[0], static_cast<double>(6.1e-5f));
  EXPECT_EQ(zp->values<int64_t>()[0], 0);

  std::vector<EValue> bad = {T(x), I(10), I(10), D(1e-7), DT(ScalarType::Byte), T(scale), T(zp), None()};
  EXPECT_THROW(call_kernel("quantized_decomposed::choose_qparams.Tensor_out", bad), etnp::Error);
}

TEST(QuantizedKernels, ChooseQparamsPerTokenAsymmetric) {
  auto x = OwnedTensor::make<float>(ScalarType::Float, {2, 3}, {-1.f, 0.5f, 2.f, 0.f, 0.f, 0.f});
  auto scale = OwnedTensor::make<double>(ScalarType::Double, {2, 1}, {});
  auto zp = OwnedTensor::make<int64_t>(ScalarType::Long, {2, 1}, {});
  std::vector<EValue> args = {T(x), DT(ScalarType::Float), T(scale), T(zp), None()};
  call_kernel("quantized_decomposed::choose_qparams_per_token_asymmetric.out", args);
  EXPECT_EQ(scale->values<double>(), (std::vector<double>{3.0 / 255, 0.1}));
  EXPECT_EQ(zp->values<int64_t>(), (std::vector<int64_t>{-43, 127}));
}

// ---- embeddings -------------------------------------------------------------------------------------------

TEST(QuantizedKernels, EmbeddingByte) {
  auto w = OwnedTensor::make<int8_t>(ScalarType::Char, {3, 4}, {1, 2, 3, 4, 5, 6, 7, 8, -1, -2, -3, -4});
  auto scales = OwnedTensor::make<float>(ScalarType::Float, {3}, {0.5f, 1.f, 2.f});
  auto zps = OwnedTensor::make<float>(ScalarType::Float, {3}, {1.f, 0.f, -1.f});
  auto idx = OwnedTensor::make<int64_t>(ScalarType::Long, {2}, {2, 0});
  auto out = OwnedTensor::make<float>(ScalarType::Float, {2, 4}, {});
  std::vector<EValue> args = {T(w), T(scales), T(zps), I(-128), I(127), T(idx), T(out), T(out)};
  call_kernel("quantized_decomposed::embedding_byte.out", args);
  EXPECT_EQ(out->values<float>(), (std::vector<float>{0.f, -2.f, -4.f, -6.f, 0.f, 0.5f, 1.f, 1.5f}));

  // grouped scales [3, 2] (groups of 2 columns), no zero points, 2-D indices, dtype overload
  auto gscales = OwnedTensor::make<float>(ScalarType::Float, {3, 2}, {1.f, 10.f, 1.f, 10.f, 1.f, 10.f});
  auto idx2 = OwnedTensor::make<int64_t>(ScalarType::Long, {1, 1}, {1});
  auto out2 = OwnedTensor::make<float>(ScalarType::Float, {1, 1, 4}, {});
  std::vector<EValue> args2 = {T(w), T(gscales), None(), I(-128), I(127), T(idx2), DT(ScalarType::Float), T(out2),
                               T(out2)};
  call_kernel("quantized_decomposed::embedding_byte.dtype_out", args2);
  EXPECT_EQ(out2->values<float>(), (std::vector<float>{5.f, 6.f, 70.f, 80.f}));

  auto bad_idx = OwnedTensor::make<int64_t>(ScalarType::Long, {1}, {3});
  auto out3 = OwnedTensor::make<float>(ScalarType::Float, {1, 4}, {});
  std::vector<EValue> args3 = {T(w), T(scales), T(zps), I(-128), I(127), T(bad_idx), T(out3), T(out3)};
  EXPECT_THROW(call_kernel("quantized_decomposed::embedding_byte.out", args3), etnp::Error);
  auto neg_idx = OwnedTensor::make<int64_t>(ScalarType::Long, {1}, {-1});
  std::vector<EValue> args4 = {T(w), T(scales), T(zps), I(-128), I(127), T(neg_idx), T(out3), T(out3)};
  EXPECT_THROW(call_kernel("quantized_decomposed::embedding_byte.out", args4), etnp::Error);
}

TEST(QuantizedKernels, Embedding4bitAnd2bitUnpacking) {
  // 4-bit: the high nibble comes first, values are nibble - 8.
  auto w4 = OwnedTensor::make<uint8_t>(ScalarType::Byte, {2, 2}, {0x1F, 0x80, 0x00, 0xFF});
  auto scales = OwnedTensor::make<float>(ScalarType::Float, {2}, {1.f, 0.5f});
  auto idx = OwnedTensor::make<int32_t>(ScalarType::Int, {2}, {0, 1});
  auto out = OwnedTensor::make<float>(ScalarType::Float, {2, 4}, {});
  std::vector<EValue> args = {T(w4), T(scales), None(), I(-8), I(7), T(idx), T(out), T(out)};
  call_kernel("quantized_decomposed::embedding_4bit.out", args);
  EXPECT_EQ(out->values<float>(), (std::vector<float>{-7.f, 7.f, 0.f, -8.f, -4.f, -4.f, 3.5f, 3.5f}));

  // 2-bit: four values per byte from the low bits up, values are bits - 2.
  auto w2 = OwnedTensor::make<uint8_t>(ScalarType::Byte, {1, 1}, {0xE4});  // 0b11'10'01'00
  auto s2 = OwnedTensor::make<float>(ScalarType::Float, {1}, {3.f});
  auto idx2 = OwnedTensor::make<int64_t>(ScalarType::Long, {1}, {0});
  auto out2 = OwnedTensor::make<float>(ScalarType::Float, {1, 4}, {});
  std::vector<EValue> args2 = {T(w2), T(s2), None(), I(-2), I(1), T(idx2), None(), T(out2), T(out2)};
  call_kernel("quantized_decomposed::embedding_2bit.dtype_out", args2);
  EXPECT_EQ(out2->values<float>(), (std::vector<float>{-6.f, -3.f, 0.f, 3.f}));
}

// ---- mixed matmuls ----------------------------------------------------------------------------------------

TEST(QuantizedKernels, MixedMm) {
  auto x = OwnedTensor::make<float>(ScalarType::Float, {1, 2}, {1.f, 2.f});
  auto w = OwnedTensor::make<int8_t>(ScalarType::Char, {2, 3}, {1, 2, 3, -1, 0, 4});
  auto s = OwnedTensor::make<float>(ScalarType::Float, {2}, {0.5f, 2.f});
  auto out = OwnedTensor::make<float>(ScalarType::Float, {1, 3}, {});
  std::vector<EValue> args = {T(x), T(w), T(s), None(), T(out), T(out)};
  call_kernel("quantized_decomposed::mixed_mm.out", args);
  // out[j] = 1*w[0][j]*0.5 + 2*w[1][j]*2
  EXPECT_EQ(out->values<float>(), (std::vector<float>{-3.5f, 1.f, 17.5f}));

  auto zp = OwnedTensor::make<float>(ScalarType::Float, {2}, {0.f, 0.f});
  std::vector<EValue> with_zp = {T(x), T(w), T(s), T(zp), T(out), T(out)};
  EXPECT_THROW(call_kernel("quantized_decomposed::mixed_mm.out", with_zp), etnp::Error);
}

TEST(QuantizedKernels, MixedLinearWithGroupedScales) {
  auto x = OwnedTensor::make<float>(ScalarType::Float, {1, 4}, {1.f, 2.f, 3.f, 4.f});
  auto w = OwnedTensor::make<int8_t>(ScalarType::Char, {2, 4}, {1, 1, 1, 1, 1, -1, 2, 0});
  auto s = OwnedTensor::make<float>(ScalarType::Float, {2, 2}, {1.f, 10.f, 0.5f, 2.f});
  auto out = OwnedTensor::make<float>(ScalarType::Float, {1, 2}, {});
  std::vector<EValue> args = {T(x), T(w), T(s), None(), None(), T(out), T(out)};
  call_kernel("quantized_decomposed::mixed_linear.out", args);
  // row 0: (1+2)*1 + (3+4)*10 = 73; row 1: (1-2)*0.5 + (6+0)*2 = 11.5
  EXPECT_EQ(out->values<float>(), (std::vector<float>{73.f, 11.5f}));

  auto s1 = OwnedTensor::make<float>(ScalarType::Float, {2}, {2.f, 1.f});
  std::vector<EValue> args2 = {T(x), T(w), T(s1), None(), DT(ScalarType::Float), T(out), T(out)};
  call_kernel("quantized_decomposed::mixed_linear.out", args2);
  EXPECT_EQ(out->values<float>(), (std::vector<float>{20.f, 5.f}));
}

// ---- quantized add ----------------------------------------------------------------------------------------

TEST(QuantizedKernels, QuantizedAdd) {
  auto a = OwnedTensor::make<uint8_t>(ScalarType::Byte, {3}, {10, 20, 11});
  auto b = OwnedTensor::make<uint8_t>(ScalarType::Byte, {3}, {4, 8, 1});
  auto out = OwnedTensor::make<uint8_t>(ScalarType::Byte, {3}, {});
  // dq(a) = (a-10)*0.5 = 0, 5, 0.5; dq(b) = b*0.25 = 1, 2, 0.25; sums 1, 7, 0.75
  // q = round(sum / 0.5) + 5 = 2+5, 14+5, round(1.5)=2 +5
  std::vector<EValue> args = {T(a), D(0.5), I(10), I(0), I(255), T(b), D(0.25), I(0), I(0), I(255),
                              D(0.5), I(5), I(0), I(255), T(out), T(out)};
  call_kernel("quantized_decomposed::add.out", args);
  EXPECT_EQ(out->values<uint8_t>(), (std::vector<uint8_t>{7, 19, 7}));

  auto b2 = OwnedTensor::make<uint8_t>(ScalarType::Byte, {2}, {4, 8});
  std::vector<EValue> bad = {T(a), D(0.5), I(10), I(0), I(255), T(b2), D(0.25), I(0), I(0), I(255),
                             D(0.5), I(5), I(0), I(255), T(out), T(out)};
  EXPECT_THROW(call_kernel("quantized_decomposed::add.out", bad), etnp::Error);
}

}  // namespace
}  // namespace etnp::testing
