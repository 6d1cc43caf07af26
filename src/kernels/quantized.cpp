// quantized_decomposed::* — the ExecuTorch quantized kernel library (quantized.yaml): quantize / dequantize
// (per tensor, per channel, per token), choose_qparams, quantized embeddings, mixed-precision matmuls and
// quantized add.
//
// Numerics follow the reference kernels bit for bit (on x86-64, where the official goldens come from):
// quantize computes inv_scale = 1.0f / float(scale), rounds float(inv_scale * x) half-to-even, adds the
// zero point in float, converts to int64 (values that do not fit, NaN included, become INT64_MIN as the x86
// conversion instruction yields, so they clamp to quant_min) and clamps to [quant_min, quant_max];
// dequantize computes float(q - zero_point) * float(scale).
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "etnp/threadpool.h"
#include "kernels/kernel_util.h"
#include "kernels/register.h"

namespace etnp::kernels {

namespace {

// ---------------------------------------------------------------------------------------------------------
// Argument helpers.

ScalarType dtype_arg(const EValue& v, const char* op) {
  const int64_t t = v.to_int();
  ETNP_KERNEL_CHECK(t >= 0 && t < kNumScalarTypes, op << ": invalid ScalarType argument " << t);
  return static_cast<ScalarType>(t);
}

std::optional<ScalarType> optional_dtype_arg(const EValue& v, const char* op) {
  if (v.is_none()) return std::nullopt;
  return dtype_arg(v, op);
}

/// Float -> integer conversion as x86-64's cvtt* instructions do it: truncation, and the "integer
/// indefinite" value (the type's minimum) for NaN and out-of-range inputs. The reference kernels rely on
/// this implicitly; doing it explicitly keeps our results identical without undefined behaviour.
template <typename I>
I truncate_like_x86(double v) {
  constexpr double lo = static_cast<double>(std::numeric_limits<I>::min());
  constexpr double hi = -lo;  // 2^(bits-1)
  if (!(v >= lo && v < hi)) return std::numeric_limits<I>::min();
  return static_cast<I>(v);
}

/// The reference quantize_val: see the file comment.
template <typename In>
inline int64_t quantize_one(float inv_scale, int32_t zero_point, In value, int64_t quant_min, int64_t quant_max) {
  float scaled;
  if constexpr (std::is_same_v<In, double>) {
    scaled = static_cast<float>(static_cast<double>(inv_scale) * value);
  } else {
    scaled = inv_scale * static_cast<float>(value);
  }
  const float shifted = static_cast<float>(zero_point) + std::nearbyint(scaled);
  const int64_t q = truncate_like_x86<int64_t>(shifted);
  return std::min(std::max(q, quant_min), quant_max);
}

/// Range of the quantized integer type, or fails for a type quantize does not produce.
void quant_bounds(ScalarType t, const char* op, int64_t& lo, int64_t& hi) {
  switch (t) {
    case ScalarType::Byte: lo = 0; hi = 255; return;
    case ScalarType::Char: lo = -128; hi = 127; return;
    case ScalarType::Short: lo = -32768; hi = 32767; return;
    case ScalarType::UInt16:
    case ScalarType::Bits16: lo = 0; hi = 65535; return;
    case ScalarType::Int: lo = std::numeric_limits<int32_t>::min(); hi = std::numeric_limits<int32_t>::max(); return;
    default: kernel_fail(std::string(op) + ": unsupported quantized dtype " + std::string(scalar_type_name(t)));
  }
}

/// Calls fn(T{}) with the C++ type of a quantized integer dtype (Bits16 stored as uint16).
template <typename F>
void dispatch_quantized(ScalarType t, const char* op, F&& fn) {
  switch (t) {
    case ScalarType::Byte: fn(uint8_t{}); return;
    case ScalarType::Char: fn(int8_t{}); return;
    case ScalarType::Short: fn(int16_t{}); return;
    case ScalarType::Int: fn(int32_t{}); return;
    case ScalarType::UInt16:
    case ScalarType::Bits16: fn(uint16_t{}); return;
    default: unsupported_dtype(op, t);
  }
}

/// Checks the common arguments of the quantize ops (reference: check_quantize_per_tensor_args).
void check_quantize_args(const Tensor& input, int64_t quant_min, int64_t quant_max, ScalarType dtype,
                         const Tensor& out, const char* op) {
  ETNP_KERNEL_CHECK(is_floating_type(input.dtype()),
                    op << ": input must be a floating type, got " << scalar_type_name(input.dtype()));
  ETNP_KERNEL_CHECK(out.dtype() == dtype, op << ": out dtype " << scalar_type_name(out.dtype())
                                             << " does not match the dtype argument " << scalar_type_name(dtype));
  int64_t lo = 0, hi = 0;
  quant_bounds(dtype, op, lo, hi);
  ETNP_KERNEL_CHECK(quant_min >= lo, op << ": quant_min " << quant_min << " is below the " << scalar_type_name(dtype)
                                        << " minimum " << lo);
  ETNP_KERNEL_CHECK(quant_max <= hi, op << ": quant_max " << quant_max << " is above the " << scalar_type_name(dtype)
                                        << " maximum " << hi);
}

/// Strides that make for_each_index produce a "group index" as an extra operand: the channel along
/// `axis` (per channel), or the flattened index of all dims but the last (per token).
std::array<int64_t, kMaxTensorRank> channel_index_strides(int64_t axis) {
  std::array<int64_t, kMaxTensorRank> s{};
  s[static_cast<size_t>(axis)] = 1;
  return s;
}
std::array<int64_t, kMaxTensorRank> token_index_strides(std::span<const int64_t> sizes) {
  std::array<int64_t, kMaxTensorRank> s{};
  int64_t stride = 1;
  for (int d = static_cast<int>(sizes.size()) - 2; d >= 0; --d) {
    s[static_cast<size_t>(d)] = stride;
    stride *= sizes[static_cast<size_t>(d)];
  }
  return s;
}

int64_t num_tokens(const Tensor& t) {
  int64_t n = 1;
  for (int d = 0; d + 1 < t.dim(); ++d) n *= t.size(d);
  return n;
}

/// Reads a per-group quantization parameter tensor as doubles (scale) or integers (zero point).
std::vector<double> read_doubles(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  size_t i = 0;
  for_each_index<1>(t.sizes(), {t.strides().data()},
                    [&](const std::array<int64_t, 1>& o) { v[i++] = load_as_double(t.dtype(), t.data(), o[0]); });
  return v;
}
std::vector<int64_t> read_ints(const Tensor& t) {
  std::vector<int64_t> v(static_cast<size_t>(t.numel()));
  size_t i = 0;
  for_each_index<1>(t.sizes(), {t.strides().data()},
                    [&](const std::array<int64_t, 1>& o) { v[i++] = load_as_int(t.dtype(), t.data(), o[0]); });
  return v;
}

// ---------------------------------------------------------------------------------------------------------
// quantize

/// Quantizes every element of `input` into `out` (same shape), with group g's parameters taken from
/// inv_scales[g] / zero_points[g] where g is the offset given by `group_strides` (all-zero: one group).
void quantize_groups(const Tensor& input, Tensor& out, const std::array<int64_t, kMaxTensorRank>& group_strides,
                     const std::vector<float>& inv_scales, const std::vector<int32_t>& zero_points,
                     int64_t quant_min, int64_t quant_max, const char* op) {
  dispatch<kFloats | kHalfs>(input.dtype(), op, [&](auto in_tag) {
    using In = decltype(in_tag);
    dispatch_quantized(out.dtype(), op, [&](auto out_tag) {
      using Out = decltype(out_tag);
      const In* in = input.data_as<In>();
      Out* o = out.data_as<Out>();
      const bool one_group = inv_scales.size() == 1 &&
                             std::all_of(group_strides.begin(), group_strides.end(), [](int64_t s) { return s == 0; });
      if (one_group && input.is_contiguous_order() && out.is_contiguous_order()) {
        const float inv = inv_scales[0];
        const int32_t zp = zero_points[0];
        ThreadPool::global().parallel_for(static_cast<size_t>(input.numel()), 1 << 14, [&](size_t b, size_t e) {
          for (size_t i = b; i < e; ++i)
            o[i] = static_cast<Out>(
                quantize_one<OpMath<In>>(inv, zp, static_cast<OpMath<In>>(in[i]), quant_min, quant_max));
        });
        return;
      }
      for_each_index<3>(input.sizes(), {input.strides().data(), out.strides().data(), group_strides.data()},
                        [&](const std::array<int64_t, 3>& off) {
                          const size_t g = static_cast<size_t>(off[2]);
                          const auto v = static_cast<OpMath<In>>(in[off[0]]);
                          o[off[1]] = static_cast<Out>(
                              quantize_one<OpMath<In>>(inv_scales[g], zero_points[g], v, quant_min, quant_max));
                        });
    });
  });
}

void quantize_per_tensor_impl(const Tensor& input, double scale, int64_t zero_point, int64_t quant_min,
                              int64_t quant_max, ScalarType dtype, Tensor& out, const char* op) {
  resize_output(out, input.sizes(), op);
  check_quantize_args(input, quant_min, quant_max, dtype, out, op);
  quantize_groups(input, out, {}, {1.0f / static_cast<float>(scale)}, {static_cast<int32_t>(zero_point)}, quant_min,
                  quant_max, op);
}

// quantize_per_tensor.out(Tensor input, float scale, int zero_point, int quant_min, int quant_max,
//                         ScalarType dtype, *, Tensor(a!) out)
void quantize_per_tensor_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "quantized_decomposed::quantize_per_tensor.out";
  quantize_per_tensor_impl(args[0]->to_tensor(), args[1]->to_double(), args[2]->to_int(), args[3]->to_int(),
                           args[4]->to_int(), dtype_arg(*args[5], op), args[6]->to_tensor(), op);
}

/// The 1-element Double scale and Long zero point of the .Tensor overloads.
void read_scalar_qparams(const Tensor& scale, const Tensor& zero_point, const char* op, double& s, int64_t& zp) {
  ETNP_KERNEL_CHECK(scale.dtype() == ScalarType::Double,
                    op << ": scale must be a float64 tensor, got " << scalar_type_name(scale.dtype()));
  ETNP_KERNEL_CHECK(zero_point.dtype() == ScalarType::Long,
                    op << ": zero_point must be an int64 tensor, got " << scalar_type_name(zero_point.dtype()));
  ETNP_KERNEL_CHECK(scale.numel() == 1, op << ": scale must have one element, has " << scale.numel());
  ETNP_KERNEL_CHECK(zero_point.numel() == 1, op << ": zero_point must have one element, has " << zero_point.numel());
  s = scale.data_as<double>()[0];
  zp = zero_point.data_as<int64_t>()[0];
}

// quantize_per_tensor.Tensor_out(Tensor input, Tensor scale, Tensor zero_point, int quant_min, int quant_max,
//                                ScalarType dtype, *, Tensor(a!) out)
void quantize_per_tensor_tensor_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "quantized_decomposed::quantize_per_tensor.Tensor_out";
  double scale;
  int64_t zp;
  read_scalar_qparams(args[1]->to_tensor(), args[2]->to_tensor(), op, scale, zp);
  quantize_per_tensor_impl(args[0]->to_tensor(), scale, zp, args[3]->to_int(), args[4]->to_int(),
                           dtype_arg(*args[5], op), args[6]->to_tensor(), op);
}

/// Per-group scales (float64) and zero points (int64) of quantize_per_channel / per_token.
void read_group_qparams(const Tensor& scales, const Tensor& zero_points, int64_t groups, const char* what,
                        const char* op, std::vector<float>& inv_scales, std::vector<int32_t>& zps) {
  ETNP_KERNEL_CHECK(scales.dtype() == ScalarType::Double,
                    op << ": scales must be float64, got " << scalar_type_name(scales.dtype()));
  ETNP_KERNEL_CHECK(zero_points.dtype() == ScalarType::Long,
                    op << ": zero_points must be int64, got " << scalar_type_name(zero_points.dtype()));
  ETNP_KERNEL_CHECK(scales.numel() == groups, op << ": scales has " << scales.numel() << " elements, expected "
                                                 << groups << " (" << what << ")");
  ETNP_KERNEL_CHECK(zero_points.numel() == groups, op << ": zero_points has " << zero_points.numel()
                                                      << " elements, expected " << groups << " (" << what << ")");
  for (double s : read_doubles(scales)) inv_scales.push_back(1.0f / static_cast<float>(s));
  for (int64_t z : read_ints(zero_points)) zps.push_back(static_cast<int32_t>(z));
}

// quantize_per_channel.out(Tensor input, Tensor scales, Tensor zero_points, int axis, int quant_min,
//                          int quant_max, ScalarType dtype, *, Tensor(a!) out)
void quantize_per_channel_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "quantized_decomposed::quantize_per_channel.out";
  const Tensor& input = args[0]->to_tensor();
  Tensor& out = args[7]->to_tensor();
  ETNP_KERNEL_CHECK(input.dim() >= 1, op << ": input must have at least one dimension");
  const int64_t axis = normalize_dim(args[3]->to_int(), input.dim(), op);
  const int64_t quant_min = args[4]->to_int(), quant_max = args[5]->to_int();
  resize_output(out, input.sizes(), op);
  check_quantize_args(input, quant_min, quant_max, dtype_arg(*args[6], op), out, op);
  std::vector<float> inv_scales;
  std::vector<int32_t> zps;
  read_group_qparams(args[1]->to_tensor(), args[2]->to_tensor(), input.size(static_cast<int>(axis)),
                     "input.size(axis)", op, inv_scales, zps);
  quantize_groups(input, out, channel_index_strides(axis), inv_scales, zps, quant_min, quant_max, op);
}

// quantize_per_token.out(Tensor input, Tensor scales, Tensor zero_points, int quant_min, int quant_max,
//                        ScalarType dtype, *, Tensor(a!) out)
void quantize_per_token_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "quantized_decomposed::quantize_per_token.out";
  const Tensor& input = args[0]->to_tensor();
  Tensor& out = args[6]->to_tensor();
  ETNP_KERNEL_CHECK(input.dim() >= 1, op << ": input must have at least one dimension");
  const int64_t quant_min = args[3]->to_int(), quant_max = args[4]->to_int();
  resize_output(out, input.sizes(), op);
  check_quantize_args(input, quant_min, quant_max, dtype_arg(*args[5], op), out, op);
  std::vector<float> inv_scales;
  std::vector<int32_t> zps;
  read_group_qparams(args[1]->to_tensor(), args[2]->to_tensor(), num_tokens(input), "one per token", op, inv_scales,
                     zps);
  quantize_groups(input, out, token_index_strides(input.sizes()), inv_scales, zps, quant_min, quant_max, op);
}

// ---------------------------------------------------------------------------------------------------------
// dequantize

void check_dequantize_args(const Tensor& input, int64_t quant_min, int64_t quant_max, ScalarType dtype,
                           std::optional<ScalarType> out_dtype, const Tensor& out, const char* op) {
  int64_t lo, hi;
  quant_bounds(input.dtype(), op, lo, hi);
  ETNP_KERNEL_CHECK(input.dtype() == dtype, op << ": input dtype " << scalar_type_name(input.dtype())
                                               << " does not match the dtype argument " << scalar_type_name(dtype));
  if (out_dtype) {
    ETNP_KERNEL_CHECK(out.dtype() == *out_dtype, op << ": out dtype " << scalar_type_name(out.dtype())
                                                    << " does not match out_dtype " << scalar_type_name(*out_dtype));
  }
  ETNP_KERNEL_CHECK(quant_min <= quant_max, op << ": quant_min " << quant_min << " > quant_max " << quant_max);
}

/// out = float(q - zero_point) * scale for every element, with per-group parameters as in quantize_groups.
void dequantize_groups(const Tensor& input, Tensor& out, const std::array<int64_t, kMaxTensorRank>& group_strides,
                       const std::vector<float>& scales, const std::vector<int32_t>& zero_points, const char* op) {
  dispatch_quantized(input.dtype(), op, [&](auto in_tag) {
    using In = decltype(in_tag);
    dispatch<kFloats | kHalfs>(out.dtype(), op, [&](auto out_tag) {
      using Out = decltype(out_tag);
      const In* in = input.data_as<In>();
      Out* o = out.data_as<Out>();
      auto dq = [](In q, int32_t zp, float scale) {
        return static_cast<float>(static_cast<int64_t>(q) - static_cast<int64_t>(zp)) * scale;
      };
      const bool one_group = scales.size() == 1 &&
                             std::all_of(group_strides.begin(), group_strides.end(), [](int64_t s) { return s == 0; });
      if (one_group && input.is_contiguous_order() && out.is_contiguous_order()) {
        const float scale = scales[0];
        const int32_t zp = zero_points[0];
        ThreadPool::global().parallel_for(static_cast<size_t>(input.numel()), 1 << 14, [&](size_t b, size_t e) {
          for (size_t i = b; i < e; ++i) o[i] = convert<Out>(dq(in[i], zp, scale));
        });
        return;
      }
      for_each_index<3>(input.sizes(), {input.strides().data(), out.strides().data(), group_strides.data()},
                        [&](const std::array<int64_t, 3>& off) {
                          const size_t g = static_cast<size_t>(off[2]);
                          o[off[1]] = convert<Out>(dq(in[off[0]], zero_points[g], scales[g]));
                        });
    });
  });
}

void dequantize_per_tensor_impl(const Tensor& input, double scale, int64_t zero_point, int64_t quant_min,
                                int64_t quant_max, ScalarType dtype, std::optional<ScalarType> out_dtype, Tensor& out,
                                const char* op) {
  resize_output(out, input.sizes(), op);
  check_dequantize_args(input, quant_min, quant_max, dtype, out_dtype, out, op);
  dequantize_groups(input, out, {}, {static_cast<float>(scale)}, {static_cast<int32_t>(zero_point)}, op);
}

// dequantize_per_tensor.out(Tensor input, float scale, int zero_point, int quant_min, int quant_max,
//                           ScalarType dtype, *, ScalarType? out_dtype=None, Tensor(a!) out)
void dequantize_per_tensor_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "quantized_decomposed::dequantize_per_tensor.out";
  dequantize_per_tensor_impl(args[0]->to_tensor(), args[1]->to_double(), args[2]->to_int(), args[3]->to_int(),
                             args[4]->to_int(), dtype_arg(*args[5], op), optional_dtype_arg(*args[6], op),
                             args[7]->to_tensor(), op);
}

// dequantize_per_tensor.Tensor_out(Tensor input, Tensor scale, Tensor zero_point, int quant_min, int quant_max,
//                                  ScalarType dtype, *, ScalarType? out_dtype=None, Tensor(a!) out)
void dequantize_per_tensor_tensor_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "quantized_decomposed::dequantize_per_tensor.Tensor_out";
  double scale;
  int64_t zp;
  read_scalar_qparams(args[1]->to_tensor(), args[2]->to_tensor(), op, scale, zp);
  dequantize_per_tensor_impl(args[0]->to_tensor(), scale, zp, args[3]->to_int(), args[4]->to_int(),
                             dtype_arg(*args[5], op), optional_dtype_arg(*args[6], op), args[7]->to_tensor(), op);
}

/// Per-group scales (float32 or float64, used as float32) and optional zero points (int32 or int64).
void read_dequant_group_params(const Tensor& scales, const Tensor* zero_points, int64_t groups, const char* op,
                               std::vector<float>& out_scales, std::vector<int32_t>& out_zps) {
  ETNP_KERNEL_CHECK(scales.dtype() == ScalarType::Double || scales.dtype() == ScalarType::Float,
                    op << ": scales must be float32 or float64, got " << scalar_type_name(scales.dtype()));
  ETNP_KERNEL_CHECK(scales.numel() == groups,
                    op << ": scales has " << scales.numel() << " elements, expected " << groups);
  for (double s : read_doubles(scales)) out_scales.push_back(static_cast<float>(s));
  if (zero_points) {
    ETNP_KERNEL_CHECK(zero_points->dtype() == ScalarType::Long || zero_points->dtype() == ScalarType::Int,
                      op << ": zero_points must be int32 or int64, got " << scalar_type_name(zero_points->dtype()));
    ETNP_KERNEL_CHECK(zero_points->numel() == groups,
                      op << ": zero_points has " << zero_points->numel() << " elements, expected " << groups);
    for (int64_t z : read_ints(*zero_points)) out_zps.push_back(static_cast<int32_t>(z));
  } else {
    out_zps.assign(static_cast<size_t>(groups), 0);
  }
}

// dequantize_per_channel.out(Tensor input, Tensor scales, Tensor? zero_points, int axis, int quant_min,
//                            int quant_max, ScalarType dtype, *, ScalarType? out_dtype=None, Tensor(a!) out)
void dequantize_per_channel_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "quantized_decomposed::dequantize_per_channel.out";
  const Tensor& input = args[0]->to_tensor();
  Tensor& out = args[8]->to_tensor();
  ETNP_KERNEL_CHECK(input.dim() >= 1, op << ": input must have at least one dimension");
  const int64_t axis = normalize_dim(args[3]->to_int(), input.dim(), op);
  resize_output(out, input.sizes(), op);
  check_dequantize_args(input, args[4]->to_int(), args[5]->to_int(), dtype_arg(*args[6], op),
                        optional_dtype_arg(*args[7], op), out, op);
  std::vector<float> scales;
  std::vector<int32_t> zps;
  read_dequant_group_params(args[1]->to_tensor(), args[2]->to_optional_tensor(), input.size(static_cast<int>(axis)),
                            op, scales, zps);
  dequantize_groups(input, out, channel_index_strides(axis), scales, zps, op);
}

// dequantize_per_token.out(Tensor input, Tensor scales, Tensor zero_points, int quant_min, int quant_max,
//                          ScalarType dtype, ScalarType output_dtype, *, Tensor(a!) out)
void dequantize_per_token_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "quantized_decomposed::dequantize_per_token.out";
  const Tensor& input = args[0]->to_tensor();
  Tensor& out = args[7]->to_tensor();
  ETNP_KERNEL_CHECK(input.dim() >= 1, op << ": input must have at least one dimension");
  resize_output(out, input.sizes(), op);
  check_dequantize_args(input, args[3]->to_int(), args[4]->to_int(), dtype_arg(*args[5], op),
                        dtype_arg(*args[6], op), out, op);
  std::vector<float> scales;
  std::vector<int32_t> zps;
  read_dequant_group_params(args[1]->to_tensor(), &args[2]->to_tensor(), num_tokens(input), op, scales, zps);
  dequantize_groups(input, out, token_index_strides(input.sizes()), scales, zps, op);
}

// ---------------------------------------------------------------------------------------------------------
// choose_qparams

constexpr float kSmallScaleThreshold = 6.1e-5f;

/// The reference calculate_scale_and_zero_point, with its mix of float and double arithmetic kept.
void calculate_scale_and_zero_point(float min, float max, int32_t qmin, int32_t qmax, double& scale,
                                    int32_t& zero_point) {
  min = std::min(min, 0.f);
  max = std::max(max, 0.f);
  scale = (static_cast<double>(max) - min) / (qmax - qmin);
  if (static_cast<float>(scale) == 0.0f || std::isinf(1.0f / static_cast<float>(scale))) scale = 0.1;

  if (scale < kSmallScaleThreshold) {
    const float org_scale = static_cast<float>(scale);
    scale = kSmallScaleThreshold;
    if (min == 0.0f) {
      max = kSmallScaleThreshold * static_cast<float>(qmax - qmin);
    } else if (max == 0.0f) {
      min = -kSmallScaleThreshold * static_cast<float>(qmax - qmin);
    } else {
      const float amplifier = kSmallScaleThreshold / org_scale;
      min *= amplifier;
      max *= amplifier;
    }
  }

  const double zero_point_from_min = qmin - min / scale;
  const double zero_point_from_max = qmax - max / scale;
  const double zero_point_from_min_error = std::abs(qmin) - std::abs(min / scale);
  const double zero_point_from_max_error = std::abs(qmax) - std::abs(max / scale);
  const double initial_zero_point =
      zero_point_from_min_error < zero_point_from_max_error ? zero_point_from_min : zero_point_from_max;
  if (initial_zero_point < qmin) {
    zero_point = qmin;
  } else if (initial_zero_point > qmax) {
    zero_point = qmax;
  } else {
    zero_point = truncate_like_x86<int32_t>(std::nearbyint(static_cast<float>(initial_zero_point)));
  }
}

/// The float32 values of `t` in logical order (a view when contiguous).
std::span<const float> float_values(const Tensor& t, std::vector<float>& storage) {
  if (t.is_contiguous_order()) return {t.data_as<float>(), static_cast<size_t>(t.numel())};
  storage.resize(static_cast<size_t>(t.numel()));
  size_t i = 0;
  const float* p = t.data_as<float>();
  for_each_index<1>(t.sizes(), {t.strides().data()}, [&](const std::array<int64_t, 1>& o) { storage[i++] = p[o[0]]; });
  return storage;
}

void check_choose_qparams_args(const Tensor& input, int64_t qmin, int64_t qmax, const Tensor& scale_out,
                               const Tensor& zero_point_out, const char* op) {
  ETNP_KERNEL_CHECK(qmin < qmax, op << ": quant_min " << qmin << " must be less than quant_max " << qmax);
  ETNP_KERNEL_CHECK(qmin >= std::numeric_limits<int32_t>::min() && qmax <= std::numeric_limits<int32_t>::max(),
                    op << ": quant_min/quant_max out of the int32 range");
  ETNP_KERNEL_CHECK(input.dtype() == ScalarType::Float,
                    op << ": input must be float32, got " << scalar_type_name(input.dtype()));
  ETNP_KERNEL_CHECK(scale_out.dtype() == ScalarType::Double,
                    op << ": scale_out must be float64, got " << scalar_type_name(scale_out.dtype()));
  ETNP_KERNEL_CHECK(zero_point_out.dtype() == ScalarType::Long,
                    op << ": zero_point_out must be int64, got " << scalar_type_name(zero_point_out.dtype()));
}

// choose_qparams.Tensor_out(Tensor input, int quant_min, int quant_max, float eps, ScalarType dtype, *,
//                           Tensor(a!) scale_out, Tensor(b!) zero_point_out)
void choose_qparams_tensor_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "quantized_decomposed::choose_qparams.Tensor_out";
  const Tensor& input = args[0]->to_tensor();
  const int64_t qmin = args[1]->to_int(), qmax = args[2]->to_int();
  (void)dtype_arg(*args[4], op);  // eps and dtype do not take part in the computation (as in the reference)
  Tensor& scale_out = args[5]->to_tensor();
  Tensor& zp_out = args[6]->to_tensor();
  check_choose_qparams_args(input, qmin, qmax, scale_out, zp_out, op);
  ETNP_KERNEL_CHECK(scale_out.numel() == 1, op << ": scale_out must have one element, has " << scale_out.numel());
  ETNP_KERNEL_CHECK(zp_out.numel() == 1, op << ": zero_point_out must have one element, has " << zp_out.numel());
  ETNP_KERNEL_CHECK(input.numel() > 0, op << ": input is empty");
  std::vector<float> storage;
  const auto x = float_values(input, storage);
  double scale;
  int32_t zp;
  calculate_scale_and_zero_point(*std::min_element(x.begin(), x.end()), *std::max_element(x.begin(), x.end()),
                                 static_cast<int32_t>(qmin), static_cast<int32_t>(qmax), scale, zp);
  scale_out.data_as<double>()[0] = scale;
  zp_out.data_as<int64_t>()[0] = zp;
}

// choose_qparams_per_token_asymmetric.out(Tensor input, ScalarType dtype, *, Tensor(a!) scale_out,
//                                         Tensor(b!) zero_point_out)
void choose_qparams_per_token_asymmetric_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "quantized_decomposed::choose_qparams_per_token_asymmetric.out";
  const Tensor& input = args[0]->to_tensor();
  (void)dtype_arg(*args[1], op);  // always int8 parameters, as in the reference
  Tensor& scale_out = args[2]->to_tensor();
  Tensor& zp_out = args[3]->to_tensor();
  constexpr int32_t qmin = -128, qmax = 127;
  ETNP_KERNEL_CHECK(input.dim() >= 1, op << ": input must have at least one dimension");
  check_choose_qparams_args(input, qmin, qmax, scale_out, zp_out, op);
  std::vector<int64_t> shape(input.sizes().begin(), input.sizes().end());
  shape.back() = 1;
  resize_output(scale_out, shape, op);
  resize_output(zp_out, shape, op);

  const int64_t tokens = num_tokens(input);
  const int64_t token_len = input.size(input.dim() - 1);
  ETNP_KERNEL_CHECK(tokens == 0 || token_len > 0, op << ": the last dimension is empty");
  std::vector<float> storage;
  const auto x = float_values(input, storage);
  // scale_out / zero_point_out have shape [..., 1]: token t is at logical index t; walk their strides.
  std::vector<int64_t> scale_off, zp_off;
  for_each_index<2>(scale_out.sizes(), {scale_out.strides().data(), zp_out.strides().data()},
                    [&](const std::array<int64_t, 2>& o) {
                      scale_off.push_back(o[0]);
                      zp_off.push_back(o[1]);
                    });
  double* scales = scale_out.data_as<double>();
  int64_t* zps = zp_out.data_as<int64_t>();
  ThreadPool::global().parallel_for(static_cast<size_t>(tokens), 16, [&](size_t b, size_t e) {
    for (size_t t = b; t < e; ++t) {
      const auto row = x.subspan(t * static_cast<size_t>(token_len), static_cast<size_t>(token_len));
      double scale;
      int32_t zp;
      calculate_scale_and_zero_point(*std::min_element(row.begin(), row.end()),
                                     *std::max_element(row.begin(), row.end()), qmin, qmax, scale, zp);
      scales[scale_off[t]] = scale;
      zps[zp_off[t]] = zp;
    }
  });
}

// ---------------------------------------------------------------------------------------------------------
// Quantized embeddings: rows of a quantized weight table, dequantized with per-row (or per-row-group)
// float parameters: out = (float(w) - float(zp)) * float(scale).

/// Unpacked value `j` of a packed row (2-bit: 4 per byte from the low bits; 4-bit: high nibble first).
inline int32_t packed_value(const uint8_t* row, int64_t stride, int64_t j, int nbit) {
  if (nbit == 2) {
    const uint8_t byte = row[(j >> 2) * stride];
    return static_cast<int32_t>((byte >> (2 * (j & 3))) & 3) - 2;
  }
  const uint8_t byte = row[(j >> 1) * stride];
  return static_cast<int32_t>((j & 1) ? (byte & 0x0F) : (byte >> 4)) - 8;
}

/// nbit = 8: weight is uint8/int8 with one value per element; 2 or 4: weight is uint8 with packed values.
void embedding_impl(KernelArgs args, int nbit, bool has_dtype_arg, const char* op) {
  const Tensor& weight = args[0]->to_tensor();
  const Tensor& scales = args[1]->to_tensor();
  const Tensor* zero_points = args[2]->to_optional_tensor();
  const int64_t quant_min = args[3]->to_int(), quant_max = args[4]->to_int();
  const Tensor& indices = args[5]->to_tensor();
  const std::optional<ScalarType> dtype = has_dtype_arg ? optional_dtype_arg(*args[6], op) : std::nullopt;
  Tensor& out = args[has_dtype_arg ? 7 : 6]->to_tensor();

  ETNP_KERNEL_CHECK(weight.dim() == 2, op << ": weight must be 2-D, got " << shape_str(weight.sizes()));
  if (nbit == 8) {
    ETNP_KERNEL_CHECK(weight.dtype() == ScalarType::Byte || weight.dtype() == ScalarType::Char,
                      op << ": weight must be uint8 or int8, got " << scalar_type_name(weight.dtype()));
  } else {
    ETNP_KERNEL_CHECK(weight.dtype() == ScalarType::Byte,
                      op << ": packed weight must be uint8, got " << scalar_type_name(weight.dtype()));
  }
  const int64_t num_rows = weight.size(0);
  const int64_t dim = weight.size(1) * (8 / nbit);
  ETNP_KERNEL_CHECK(scales.dim() == 1 || scales.dim() == 2,
                    op << ": weight_scales must be 1-D or 2-D, got " << shape_str(scales.sizes()));
  ETNP_KERNEL_CHECK(scales.size(0) == num_rows, op << ": weight_scales has " << scales.size(0) << " rows, weight has "
                                                   << num_rows);
  const int64_t groups = scales.dim() == 2 ? scales.size(1) : 1;
  ETNP_KERNEL_CHECK(groups > 0 && dim % groups == 0,
                    op << ": embedding dim " << dim << " is not divisible into " << groups << " groups");
  const int64_t group_size = dim / groups;
  auto is_param_type = [](ScalarType t) {
    return t == ScalarType::Float || t == ScalarType::Half || t == ScalarType::BFloat16;
  };
  ETNP_KERNEL_CHECK(is_param_type(out.dtype()),
                    op << ": out must be float32, float16 or bfloat16, got " << scalar_type_name(out.dtype()));
  ETNP_KERNEL_CHECK(is_param_type(scales.dtype()), op << ": weight_scales must be float32, float16 or bfloat16, got "
                                                      << scalar_type_name(scales.dtype()));
  if (zero_points) {
    ETNP_KERNEL_CHECK(zero_points->dim() == scales.dim(), op << ": weight_zero_points rank " << zero_points->dim()
                                                             << " differs from weight_scales rank " << scales.dim());
    ETNP_KERNEL_CHECK(zero_points->dtype() == out.dtype(), op << ": weight_zero_points dtype "
                                                              << scalar_type_name(zero_points->dtype())
                                                              << " differs from out dtype "
                                                              << scalar_type_name(out.dtype()));
    for (int d = 0; d < scales.dim(); ++d) {
      ETNP_KERNEL_CHECK(zero_points->size(d) == scales.size(d),
                        op << ": weight_zero_points shape " << shape_str(zero_points->sizes())
                           << " differs from weight_scales shape " << shape_str(scales.sizes()));
    }
  }
  if (nbit == 8) {
    ETNP_KERNEL_CHECK(indices.dtype() == ScalarType::Long,
                      op << ": indices must be int64, got " << scalar_type_name(indices.dtype()));
  } else {
    ETNP_KERNEL_CHECK(indices.dtype() == ScalarType::Long || indices.dtype() == ScalarType::Int,
                      op << ": indices must be int64 or int32, got " << scalar_type_name(indices.dtype()));
  }
  ETNP_KERNEL_CHECK(quant_min <= quant_max, op << ": quant_min " << quant_min << " > quant_max " << quant_max);
  if (dtype) {
    ETNP_KERNEL_CHECK(out.dtype() == *dtype, op << ": out dtype " << scalar_type_name(out.dtype())
                                                << " does not match dtype " << scalar_type_name(*dtype));
  }
  ETNP_KERNEL_CHECK(indices.dim() + 1 <= kMaxTensorRank, op << ": indices rank too large");

  std::vector<int64_t> out_shape(indices.sizes().begin(), indices.sizes().end());
  out_shape.push_back(dim);
  resize_output(out, out_shape, op);

  // Parameters are read per (row, group) through their strides.
  const int64_t s_row = scales.stride(0), s_grp = scales.dim() == 2 ? scales.stride(1) : 0;
  const int64_t z_row = zero_points ? zero_points->stride(0) : 0;
  const int64_t z_grp = zero_points && zero_points->dim() == 2 ? zero_points->stride(1) : 0;
  const int64_t w_row = weight.stride(0), w_col = weight.stride(1);
  const int64_t out_inner = out.stride(out.dim() - 1);
  std::vector<float> row_scale(static_cast<size_t>(groups)), row_zp(static_cast<size_t>(groups));

  dispatch<kFloats | kHalfs>(out.dtype(), op, [&](auto out_tag) {
    using Out = decltype(out_tag);
    Out* o = out.data_as<Out>();
    std::array<int64_t, kMaxTensorRank> out_outer{};
    for (int d = 0; d < indices.dim(); ++d) out_outer[static_cast<size_t>(d)] = out.stride(d);
    for_each_index<2>(indices.sizes(), {indices.strides().data(), out_outer.data()},
                      [&](const std::array<int64_t, 2>& off) {
      const int64_t index = load_as_int(indices.dtype(), indices.data(), off[0]);
      ETNP_KERNEL_CHECK(index >= 0 && index < num_rows,
                        op << ": index " << index << " is out of range for " << num_rows << " embeddings");
      for (int64_t g = 0; g < groups; ++g) {
        row_scale[static_cast<size_t>(g)] =
            static_cast<float>(load_as_double(scales.dtype(), scales.data(), index * s_row + g * s_grp));
        row_zp[static_cast<size_t>(g)] =
            zero_points ? static_cast<float>(load_as_double(zero_points->dtype(), zero_points->data(),
                                                            index * z_row + g * z_grp))
                        : 0.0f;
      }
      Out* dst = o + off[1];
      if (nbit == 8) {
        dispatch_quantized(weight.dtype(), op, [&](auto w_tag) {
          using W = decltype(w_tag);
          const W* w = weight.data_as<W>() + index * w_row;
          for (int64_t j = 0; j < dim; ++j) {
            const size_t g = static_cast<size_t>(j / group_size);
            dst[j * out_inner] = convert<Out>((static_cast<float>(w[j * w_col]) - row_zp[g]) * row_scale[g]);
          }
        });
      } else {
        // Group by group, the unpacking specialized per width (these rows are most of an LLM's embedding).
        const uint8_t* w = weight.data_as<uint8_t>() + index * w_row;
        auto unpack = [&](auto width) {
          for (int64_t g = 0; g < groups; ++g) {
            const float zp = row_zp[static_cast<size_t>(g)], sc = row_scale[static_cast<size_t>(g)];
            for (int64_t j = g * group_size; j < (g + 1) * group_size; ++j) {
              dst[j * out_inner] = convert<Out>((static_cast<float>(packed_value(w, w_col, j, width())) - zp) * sc);
            }
          }
        };
        if (nbit == 2) {
          unpack(std::integral_constant<int, 2>{});
        } else {
          unpack(std::integral_constant<int, 4>{});
        }
      }
    });
  });
}

// embedding_byte.out(Tensor weight, Tensor weight_scales, Tensor? weight_zero_points, int weight_quant_min,
//                    int weight_quant_max, Tensor indices, *, Tensor(a!) out); the .dtype_out overloads add
//                    ScalarType? dtype before out. 2bit/4bit take the same arguments.
void embedding_byte_out(KernelContext&, KernelArgs args) {
  embedding_impl(args, 8, false, "quantized_decomposed::embedding_byte.out");
}
void embedding_byte_dtype_out(KernelContext&, KernelArgs args) {
  embedding_impl(args, 8, true, "quantized_decomposed::embedding_byte.dtype_out");
}
void embedding_2bit_out(KernelContext&, KernelArgs args) {
  embedding_impl(args, 2, false, "quantized_decomposed::embedding_2bit.out");
}
void embedding_2bit_dtype_out(KernelContext&, KernelArgs args) {
  embedding_impl(args, 2, true, "quantized_decomposed::embedding_2bit.dtype_out");
}
void embedding_4bit_out(KernelContext&, KernelArgs args) {
  embedding_impl(args, 4, false, "quantized_decomposed::embedding_4bit.out");
}
void embedding_4bit_dtype_out(KernelContext&, KernelArgs args) {
  embedding_impl(args, 4, true, "quantized_decomposed::embedding_4bit.dtype_out");
}

// ---------------------------------------------------------------------------------------------------------
// Mixed-precision matmuls (float or half activations, int8 weights with float scales). The reference
// accumulates in the storage types with C++/c10 arithmetic (half op half -> half, rounded each time); the
// helpers below reproduce that so half results match too.

template <typename A, typename B>
using Promoted =
    std::conditional_t<std::is_same_v<A, double> || std::is_same_v<B, double>, double,
                       std::conditional_t<std::is_same_v<A, Half> && std::is_same_v<B, Half>, Half, float>>;

template <typename A, typename B>
inline Promoted<A, B> mul(A a, B b) {
  using P = Promoted<A, B>;
  using C = OpMath<P>;
  return P(static_cast<C>(static_cast<OpMath<A>>(a)) * static_cast<C>(static_cast<OpMath<B>>(b)));
}
template <typename A, typename B>
inline Promoted<A, B> add(A a, B b) {
  using P = Promoted<A, B>;
  using C = OpMath<P>;
  return P(static_cast<C>(static_cast<OpMath<A>>(a)) + static_cast<C>(static_cast<OpMath<B>>(b)));
}

// mixed_mm.out(Tensor input, Tensor weight, Tensor weight_scales, Tensor? weight_zero_points, *,
//              Tensor(a!) out): out[i][j] = sum_k x[i][k] * w[k][j] * s[k]
void mixed_mm_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "quantized_decomposed::mixed_mm.out";
  const Tensor& in = args[0]->to_tensor();
  const Tensor& weight = args[1]->to_tensor();
  const Tensor& scales = args[2]->to_tensor();
  Tensor& out = args[4]->to_tensor();
  ETNP_KERNEL_CHECK(in.dim() == 2 && weight.dim() == 2 && scales.dim() == 1 && out.dim() == 2,
                    op << ": expected 2-D input, weight and out and 1-D scales, got " << shape_str(in.sizes()) << ", "
                       << shape_str(weight.sizes()) << ", " << shape_str(out.sizes()) << ", "
                       << shape_str(scales.sizes()));
  ETNP_KERNEL_CHECK(in.size(1) == weight.size(0), op << ": input " << shape_str(in.sizes())
                                                     << " and weight " << shape_str(weight.sizes())
                                                     << " cannot be multiplied");
  ETNP_KERNEL_CHECK(scales.size(0) == weight.size(0),
                    op << ": weight_scales has " << scales.size(0) << " elements, weight has " << weight.size(0)
                       << " rows");
  ETNP_KERNEL_CHECK(in.dtype() == scales.dtype() && in.dtype() == out.dtype(),
                    op << ": input, weight_scales and out must have the same dtype");
  ETNP_KERNEL_CHECK(weight.dtype() == ScalarType::Char, op << ": weight must be int8");
  ETNP_KERNEL_CHECK(args[3]->is_none(), op << ": weight_zero_points are not supported");
  const int64_t m = in.size(0), n = in.size(1), p = weight.size(1);
  resize_output(out, {m, p}, op);
  if (in.dtype() == ScalarType::Float) {
    using T = float;
    const T* x = in.data_as<T>();
    const int8_t* w = weight.data_as<int8_t>();
    const T* s = scales.data_as<T>();
    T* z = out.data_as<T>();
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < p; ++j) {
        T sum = 0;
        for (int64_t k = 0; k < n; ++k)
          sum += x[i * in.stride(0) + k * in.stride(1)] *
                 static_cast<T>(w[k * weight.stride(0) + j * weight.stride(1)]) * s[k * scales.stride(0)];
        z[i * out.stride(0) + j * out.stride(1)] = sum;
      }
  } else if (in.dtype() == ScalarType::Half) {
    using T = Half;
    const T* x = in.data_as<T>();
    const int8_t* w = weight.data_as<int8_t>();
    const T* s = scales.data_as<T>();
    T* z = out.data_as<T>();
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < p; ++j) {
        T sum(0.0f);
        for (int64_t k = 0; k < n; ++k) {
          const T xw = mul(x[i * in.stride(0) + k * in.stride(1)],
                           T(static_cast<float>(w[k * weight.stride(0) + j * weight.stride(1)])));
          sum = add(sum, mul(xw, s[k * scales.stride(0)]));
        }
        z[i * out.stride(0) + j * out.stride(1)] = sum;
      }
  } else {
    unsupported_dtype(op, in.dtype());
  }
}

template <typename T, typename U>
void mixed_linear_typed(const Tensor& in, const Tensor& weight, const Tensor& scales, Tensor& out, int64_t g) {
  const int64_t m = in.size(0), n = in.size(1), p = weight.size(0);
  const int64_t n_over_g = (n + g - 1) / g;
  const U* x = in.data_as<U>();
  const int8_t* w = weight.data_as<int8_t>();
  const U* s = scales.data_as<U>();
  T* z = out.data_as<T>();
  // The reference indexes the scales flat (j * n_over_g + group); map that onto the tensor's layout.
  const int64_t s_cols = scales.dim() == 2 ? scales.size(1) : 1;
  auto scale_at = [&](int64_t flat) {
    return scales.dim() == 2 ? s[(flat / s_cols) * scales.stride(0) + (flat % s_cols) * scales.stride(1)]
                             : s[flat * scales.stride(0)];
  };
  ThreadPool::global().parallel_for(static_cast<size_t>(m * p), 64, [&](size_t b, size_t e) {
    for (size_t idx = b; idx < e; ++idx) {
      const int64_t i = static_cast<int64_t>(idx) / p, j = static_cast<int64_t>(idx) % p;
      T sum = T(0.0f);
      for (int64_t k = 0; k < n; k += g) {
        T psum = T(0.0f);
        for (int64_t k2 = k; k2 < std::min(k + g, n); ++k2) {
          const U wv = U(static_cast<float>(w[j * weight.stride(0) + k2 * weight.stride(1)]));
          psum = T(add(psum, mul(x[i * in.stride(0) + k2 * in.stride(1)], wv)));
        }
        sum = T(add(sum, mul(psum, scale_at(j * n_over_g + k / g))));
      }
      z[i * out.stride(0) + j * out.stride(1)] = sum;
    }
  });
}

// mixed_linear.out(Tensor input, Tensor weight, Tensor weight_scales, Tensor? weight_zero_points,
//                  ScalarType? dtype=None, *, Tensor(a!) out): out[i][j] = sum_k x[i][k] * w[j][k] * s[j][group(k)]
void mixed_linear_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "quantized_decomposed::mixed_linear.out";
  const Tensor& in = args[0]->to_tensor();
  const Tensor& weight = args[1]->to_tensor();
  const Tensor& scales = args[2]->to_tensor();
  const std::optional<ScalarType> dtype = optional_dtype_arg(*args[4], op);
  Tensor& out = args[5]->to_tensor();
  ETNP_KERNEL_CHECK(in.dim() == 2 && weight.dim() == 2 && (scales.dim() == 1 || scales.dim() == 2) && out.dim() == 2,
                    op << ": expected 2-D input, weight and out and 1-D or 2-D scales, got " << shape_str(in.sizes())
                       << ", " << shape_str(weight.sizes()) << ", " << shape_str(out.sizes()) << ", "
                       << shape_str(scales.sizes()));
  ETNP_KERNEL_CHECK(in.size(1) == weight.size(1), op << ": input " << shape_str(in.sizes()) << " and weight "
                                                     << shape_str(weight.sizes()) << " differ in the inner dim");
  ETNP_KERNEL_CHECK(scales.size(0) == weight.size(0),
                    op << ": weight_scales has " << scales.size(0) << " rows, weight has " << weight.size(0));
  ETNP_KERNEL_CHECK(in.dtype() == scales.dtype(), op << ": input and weight_scales must have the same dtype");
  if (dtype) {
    ETNP_KERNEL_CHECK(out.dtype() == *dtype, op << ": out dtype does not match dtype");
    ETNP_KERNEL_CHECK(*dtype == ScalarType::Float || *dtype == ScalarType::Half,
                      op << ": dtype must be float32 or float16");
  }
  ETNP_KERNEL_CHECK(weight.dtype() == ScalarType::Char, op << ": weight must be int8");
  ETNP_KERNEL_CHECK(args[3]->is_none(), op << ": weight_zero_points are not supported");
  const int64_t n = in.size(1);
  int64_t g = n;
  if (scales.dim() == 2) {
    ETNP_KERNEL_CHECK(scales.size(1) > 0, op << ": weight_scales has no groups");
    g = (n + scales.size(1) - 1) / scales.size(1);
  }
  if (g == 0) g = 1;  // n == 0: no groups to visit
  resize_output(out, {in.size(0), weight.size(0)}, op);
  auto run_in = [&](auto out_tag) {
    using T = decltype(out_tag);
    if (in.dtype() == ScalarType::Float) mixed_linear_typed<T, float>(in, weight, scales, out, g);
    else if (in.dtype() == ScalarType::Half) mixed_linear_typed<T, Half>(in, weight, scales, out, g);
    else unsupported_dtype(op, in.dtype());
  };
  switch (out.dtype()) {
    case ScalarType::Float: run_in(float{}); break;
    case ScalarType::Double: run_in(double{}); break;
    case ScalarType::Half: run_in(Half{}); break;
    default: unsupported_dtype(op, out.dtype());
  }
}

// ---------------------------------------------------------------------------------------------------------
// add.out(Tensor a, float a_scale, int a_zero_point, int a_quant_min, int a_quant_max, Tensor b, float b_scale,
//         int b_zero_point, int b_quant_min, int b_quant_max, float out_scale, int out_zero_point,
//         int out_quant_min, int out_quant_max, *, Tensor(a!) out)
// Dequantize both, add in float, quantize — the reference's exact arithmetic, same-shape operands only.
void quantized_add_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "quantized_decomposed::add.out";
  const Tensor& a = args[0]->to_tensor();
  const Tensor& b = args[5]->to_tensor();
  Tensor& out = args[14]->to_tensor();
  const float a_scale = static_cast<float>(args[1]->to_double());
  const float b_scale = static_cast<float>(args[6]->to_double());
  const float out_scale = static_cast<float>(args[10]->to_double());
  const int64_t a_zp = static_cast<int32_t>(args[2]->to_int());
  const int64_t b_zp = static_cast<int32_t>(args[7]->to_int());
  const int64_t out_zp = static_cast<int32_t>(args[11]->to_int());
  auto check_range = [&](int64_t lo, int64_t hi, const char* which) {
    ETNP_KERNEL_CHECK(lo >= 0 && hi <= 255 && lo <= hi,
                      op << ": " << which << " quant range [" << lo << ", " << hi << "] must lie in [0, 255]");
  };
  check_range(args[3]->to_int(), args[4]->to_int(), "a");
  check_range(args[8]->to_int(), args[9]->to_int(), "b");
  const int64_t out_qmin = args[12]->to_int(), out_qmax = args[13]->to_int();
  check_range(out_qmin, out_qmax, "out");
  ETNP_KERNEL_CHECK(a.dtype() == b.dtype() && a.dtype() == out.dtype(),
                    op << ": a, b and out must have the same dtype");
  ETNP_KERNEL_CHECK(std::equal(a.sizes().begin(), a.sizes().end(), b.sizes().begin(), b.sizes().end()),
                    op << ": a " << shape_str(a.sizes()) << " and b " << shape_str(b.sizes())
                       << " must have the same shape");
  resize_output(out, a.sizes(), op);
  const float inv_out_scale = 1.0f / out_scale;
  dispatch<kInts>(a.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* pa = a.data_as<T>();
    const T* pb = b.data_as<T>();
    T* po = out.data_as<T>();
    for_each_index<3>(a.sizes(), {a.strides().data(), b.strides().data(), out.strides().data()},
                      [&](const std::array<int64_t, 3>& off) {
                        const int64_t qa = static_cast<int64_t>(pa[off[0]]) - a_zp;
                        const int64_t qb = static_cast<int64_t>(pb[off[1]]) - b_zp;
                        const float dqa = static_cast<float>(static_cast<double>(qa) * static_cast<double>(a_scale));
                        const float dqb = static_cast<float>(static_cast<double>(qb) * static_cast<double>(b_scale));
                        const float sum = dqa + dqb;
                        const float shifted = static_cast<float>(out_zp) + std::nearbyint(inv_out_scale * sum);
                        const int64_t q = truncate_like_x86<int64_t>(shifted);
                        po[off[2]] = static_cast<T>(std::min(std::max(q, out_qmin), out_qmax));
                      });
  });
}

}  // namespace

void register_quantized_kernels(KernelRegistry& registry) {
  const std::string ns = "quantized_decomposed::";
  registry.add(ns + "quantize_per_tensor.out", 8, quantize_per_tensor_out);
  registry.add(ns + "quantize_per_tensor.Tensor_out", 8, quantize_per_tensor_tensor_out);
  registry.add(ns + "quantize_per_channel.out", 9, quantize_per_channel_out);
  registry.add(ns + "quantize_per_token.out", 8, quantize_per_token_out);
  registry.add(ns + "dequantize_per_tensor.out", 9, dequantize_per_tensor_out);
  registry.add(ns + "dequantize_per_tensor.Tensor_out", 9, dequantize_per_tensor_tensor_out);
  registry.add(ns + "dequantize_per_channel.out", 10, dequantize_per_channel_out);
  registry.add(ns + "dequantize_per_token.out", 9, dequantize_per_token_out);
  registry.add(ns + "choose_qparams.Tensor_out", 8, choose_qparams_tensor_out);
  registry.add(ns + "choose_qparams_per_token_asymmetric.out", 5, choose_qparams_per_token_asymmetric_out);
  registry.add(ns + "embedding_byte.out", 8, embedding_byte_out);
  registry.add(ns + "embedding_byte.dtype_out", 9, embedding_byte_dtype_out);
  registry.add(ns + "embedding_2bit.out", 8, embedding_2bit_out);
  registry.add(ns + "embedding_2bit.dtype_out", 9, embedding_2bit_dtype_out);
  registry.add(ns + "embedding_4bit.out", 8, embedding_4bit_out);
  registry.add(ns + "embedding_4bit.dtype_out", 9, embedding_4bit_dtype_out);
  registry.add(ns + "mixed_mm.out", 6, mixed_mm_out);
  registry.add(ns + "mixed_linear.out", 7, mixed_linear_out);
  registry.add(ns + "add.out", 16, quantized_add_out);
}

}  // namespace etnp::kernels
