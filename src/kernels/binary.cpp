// Binary elementwise kernels: arithmetic (add, sub, rsub, mul, div with rounding modes, floor_divide, pow,
// fmod, remainder), maximum/minimum, atan2, bitwise and shift ops, and logical and/or/xor.
//
// dtype rules follow PyTorch: the common dtype is torch.result_type of the operands (a Scalar or a 0-d
// tensor only raises the category), arithmetic runs in it (float for half/bfloat16), and the result is cast
// to `out`, which must be able to hold it (no float into an integer tensor). Integer arithmetic wraps;
// integer division or modulo by zero fails the kernel instead of trapping.
#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <string>

#include "compute/vector_math.h"
#include "kernels/elementwise.h"
#include "kernels/kernel_util.h"
#include "kernels/register.h"

namespace etnp::kernels {
namespace {

using ew::apply;
using ew::dispatch_compute;
using ew::ScalarOperand;

/// Resizes `out` for `a op b` and returns their common dtype.
ScalarType prepare_tensors(const Tensor& a, const Tensor& b, Tensor& out, const char* op) {
  const std::array<const Tensor*, 2> operands{&a, &b};
  ew::resize_to_broadcast(out, operands, op);
  return ew::result_type_of(operands);
}

/// Resizes `out` for `a op scalar` and returns the common dtype.
ScalarType prepare_scalar(const Tensor& a, const Scalar& b, Tensor& out, const char* op) {
  resize_output(out, a.sizes(), op);
  return promote_with_scalar(a.dtype(), b);
}

/// out = f(a, b) in the compute type of `common`; make_f(C{}) returns f: (C, C) -> C.
template <unsigned Set, typename MakeF>
void run_tensors(KernelContext& ctx, const Tensor& a, const Tensor& b, Tensor& out, ScalarType common,
                 const char* op, MakeF make_f, int64_t grain = ew::kCheapGrain) {
  dispatch_compute<Set>(common, op, [&](auto tag) {
    using C = decltype(tag);
    apply<C, C, 2>(ctx, out, {&a, &b}, make_f(C{}), grain, op);
  });
}

/// out = f(a, s) (or f(s, a) when scalar_first) with the Scalar s converted to the compute type.
template <unsigned Set, typename MakeF>
void run_scalar(KernelContext& ctx, const Tensor& a, const Scalar& s, Tensor& out, ScalarType common,
                const char* op, MakeF make_f, bool scalar_first = false, int64_t grain = ew::kCheapGrain) {
  dispatch_compute<Set>(common, op, [&](auto tag) {
    using C = decltype(tag);
    ScalarOperand<C> scalar(ew::scalar_to<C>(s));
    if (scalar_first) {
      apply<C, C, 2>(ctx, out, {&scalar.tensor, &a}, make_f(C{}), grain, op);
    } else {
      apply<C, C, 2>(ctx, out, {&a, &scalar.tensor}, make_f(C{}), grain, op);
    }
  });
}

// ---------------------------------------------------------------------------------------------------------
// add / sub / rsub / mul

/// PyTorch's checks on `alpha`: no floating alpha for integral results, bool alpha only for bool results.
void check_alpha(const Scalar& alpha, ScalarType common, const char* op) {
  if (alpha.is_floating() && !is_floating_type(common)) {
    kernel_fail(std::string(op) + ": for integral input tensors, argument alpha must not be a floating point number");
  }
  if (alpha.is_bool() && common != ScalarType::Bool) {
    kernel_fail(std::string(op) + ": boolean alpha only supported for boolean results");
  }
}

/// f(a, b) = a + alpha * b; sign = -1 gives a - alpha * b.
template <typename C>
auto make_add(const Scalar& alpha_scalar, int sign) {
  const C alpha = ew::scalar_to<C>(alpha_scalar);
  return [alpha, sign](C a, C b) -> C {
    if constexpr (std::is_same_v<C, bool>) {
      (void)sign;  // only add reaches here (sub rejects bool)
      return a || (alpha && b);
    } else if constexpr (std::is_floating_point_v<C>) {
      return sign > 0 ? a + alpha * b : a - alpha * b;
    } else {
      const C scaled = ew::wrap_mul(alpha, b);
      return sign > 0 ? ew::wrap_add(a, scaled) : ew::wrap_sub(a, scaled);
    }
  };
}

/// Like make_add for alpha == 1 (the common case): a plain a + b / a - b the compiler vectorizes.
template <typename C, int Sign>
auto make_add_unit() {
  return [](C a, C b) -> C {
    if constexpr (std::is_same_v<C, bool>) {
      return a || b;
    } else if constexpr (std::is_floating_point_v<C>) {
      return Sign > 0 ? a + b : a - b;
    } else {
      return Sign > 0 ? ew::wrap_add(a, b) : ew::wrap_sub(a, b);
    }
  };
}

bool is_unit(const Scalar& s) { return s.is_floating() ? s.d == 1.0 : s.is_bool() ? s.b : s.i == 1; }

void fail_bool_sub(const char* op) {
  kernel_fail(std::string(op) +
              ": subtraction, the `-` operator, with a bool tensor is not supported; use logical_xor() or "
              "logical_not() instead");
}

template <int Sign>
void add_sub_tensor(KernelContext& ctx, KernelArgs args, const char* op) {
  check_num_args(args, 5, op);
  const Tensor& a = args[0]->to_tensor();
  const Tensor& b = args[1]->to_tensor();
  const Scalar alpha = args[2]->to_scalar();
  Tensor& out = args[3]->to_tensor();
  if (Sign < 0 && (a.dtype() == ScalarType::Bool || b.dtype() == ScalarType::Bool)) fail_bool_sub(op);
  const ScalarType common = prepare_tensors(a, b, out, op);
  check_alpha(alpha, common, op);
  ew::check_can_cast(common, out, op);
  if (is_unit(alpha)) {
    run_tensors<kRealTypes | kBool>(ctx, a, b, out, common, op, [](auto tag) { return make_add_unit<decltype(tag), Sign>(); });
  } else {
    run_tensors<kRealTypes | kBool>(ctx, a, b, out, common, op,
                                    [&](auto tag) { return make_add<decltype(tag)>(alpha, Sign); });
  }
}

void add_out(KernelContext& ctx, KernelArgs args) { add_sub_tensor<1>(ctx, args, "aten::add.out"); }
void sub_out(KernelContext& ctx, KernelArgs args) { add_sub_tensor<-1>(ctx, args, "aten::sub.out"); }

// add/sub/rsub with a Scalar `other`: (Tensor self, Scalar other, Scalar alpha, *, Tensor(a!) out).
// rsub computes other - alpha * self.
template <int Sign, bool Reverse>
void add_sub_scalar(KernelContext& ctx, KernelArgs args, const char* op) {
  check_num_args(args, 5, op);
  const Tensor& a = args[0]->to_tensor();
  const Scalar b = args[1]->to_scalar();
  const Scalar alpha = args[2]->to_scalar();
  Tensor& out = args[3]->to_tensor();
  if (Sign < 0 && (a.dtype() == ScalarType::Bool || b.is_bool())) fail_bool_sub(op);
  const ScalarType common = prepare_scalar(a, b, out, op);
  check_alpha(alpha, common, op);
  ew::check_can_cast(common, out, op);
  if (Reverse) {
    // other - alpha * self: f(s, x) with the scalar first.
    run_scalar<kRealTypes>(ctx, a, b, out, common, op,
                           [&](auto tag) { return make_add<decltype(tag)>(alpha, -1); }, /*scalar_first=*/true);
  } else if (is_unit(alpha)) {
    run_scalar<kRealTypes | kBool>(ctx, a, b, out, common, op, [](auto tag) { return make_add_unit<decltype(tag), Sign>(); });
  } else {
    run_scalar<kRealTypes | kBool>(ctx, a, b, out, common, op,
                                   [&](auto tag) { return make_add<decltype(tag)>(alpha, Sign); });
  }
}

void add_scalar_out(KernelContext& ctx, KernelArgs args) { add_sub_scalar<1, false>(ctx, args, "aten::add.Scalar_out"); }
void sub_scalar_out(KernelContext& ctx, KernelArgs args) { add_sub_scalar<-1, false>(ctx, args, "aten::sub.Scalar_out"); }
void rsub_scalar_out(KernelContext& ctx, KernelArgs args) { add_sub_scalar<-1, true>(ctx, args, "aten::rsub.Scalar_out"); }

auto make_mul = [](auto tag) {
  using C = decltype(tag);
  return [](C a, C b) -> C {
    if constexpr (std::is_same_v<C, bool>) {
      return a && b;
    } else if constexpr (std::is_floating_point_v<C>) {
      return a * b;
    } else {
      return ew::wrap_mul(a, b);
    }
  };
};

/// A float32 product of a static [N, C, H, W] tensor and one value per channel, [N, C, 1, 1], in either order (a
/// squeeze-and-excitation gate's scale), which the load may pair in NHWC order (KernelState::keeps_channels_last):
/// the image operand and the result then hold runs of channels per pixel; the scales are the same bytes in either
/// order. One multiplication per element, so the bits are those of the broadcast product.
struct ScaleChannels final : KernelState {
  size_t image = 0;  // the argument position of the [N, C, H, W] operand
  int64_t images = 0, channels = 0, pixels = 0;
  bool nhwc = false;
  ChannelsLastArgs keeps_channels_last() const override { return {{image}, {2}, {1 - image}}; }
  void use_channels_last(bool input, bool output) override { nhwc = input && output; }
};

std::unique_ptr<KernelState> prepare_mul(KernelArgs args) {
  if (args.size() != 4 || !args[0]->is_tensor() || !args[1]->is_tensor() || !args[2]->is_tensor()) return nullptr;
  const Tensor& out = args[2]->to_tensor();
  const auto fits = [](const Tensor& t) { return channels_last_candidate(t, ScalarType::Float); };
  if (!fits(out) || out.size(2) * out.size(3) < 2) return nullptr;
  for (size_t image : {size_t{0}, size_t{1}}) {
    const Tensor& x = args[image]->to_tensor();
    const Tensor& scale = args[1 - image]->to_tensor();
    if (!fits(x) || !fits(scale) || !std::ranges::equal(x.sizes(), out.sizes())) continue;
    if (scale.size(0) != x.size(0) || scale.size(1) != x.size(1) || scale.size(2) != 1 || scale.size(3) != 1) continue;
    auto state = std::make_unique<ScaleChannels>();
    state->image = image;
    state->images = x.size(0);
    state->channels = x.size(1);
    state->pixels = x.size(2) * x.size(3);
    return state;
  }
  return nullptr;
}

/// out[n][p][c] = x[n][p][c] * scale[n][c] (NHWC bytes), split across the pool by pixels.
void scale_channels_nhwc(KernelContext& ctx, const ScaleChannels& s, const float* x, const float* scale, float* out) {
  const int64_t rows = s.images * s.pixels;
  auto body = [&](size_t begin, size_t end) {
    for (auto r = static_cast<int64_t>(begin); r < static_cast<int64_t>(end); ++r) {
      const float* k = scale + (r / s.pixels) * s.channels;
      const float* src = x + r * s.channels;
      float* dst = out + r * s.channels;
      for (int64_t c = 0; c < s.channels; ++c) dst[c] = src[c] * k[c];
    }
  };
  const auto grain = static_cast<size_t>(std::max<int64_t>(1, ew::kCheapGrain / std::max<int64_t>(1, s.channels)));
  if (ctx.pool() == nullptr || rows * s.channels < 2 * ew::kCheapGrain) {
    body(0, static_cast<size_t>(rows));
  } else {
    ctx.pool()->parallel_for(static_cast<size_t>(rows), grain, body);
  }
}

void mul_out(KernelContext& ctx, KernelArgs args) {
  const char* op = "aten::mul.out";
  check_num_args(args, 4, op);
  const Tensor& a = args[0]->to_tensor();
  const Tensor& b = args[1]->to_tensor();
  Tensor& out = args[2]->to_tensor();
  if (const auto* state = static_cast<const ScaleChannels*>(ctx.state()); state != nullptr && state->nhwc) {
    // What the load paired holds NHWC bytes: only this product may read and write them.
    const Tensor& x = state->image == 0 ? a : b;
    const Tensor& scale = state->image == 0 ? b : a;
    ETNP_KERNEL_CHECK(x.dim() == 4 && x.size(0) == state->images && x.size(1) == state->channels &&
                          x.size(2) * x.size(3) == state->pixels && x.dtype() == ScalarType::Float &&
                          scale.numel() == state->images * state->channels && scale.dtype() == ScalarType::Float &&
                          scale.is_contiguous_order() && out.dtype() == ScalarType::Float,
                      op << ": a product paired with its neighbours in NHWC order no longer fits its operands (shapes "
                         << shape_str(a.sizes()) << " and " << shape_str(b.sizes()) << ")");
    resize_output(out, x.sizes(), op);
    scale_channels_nhwc(ctx, *state, x.data_as<const float>(), scale.data_as<const float>(), out.data_as<float>());
    return;
  }
  const ScalarType common = prepare_tensors(a, b, out, op);
  ew::check_can_cast(common, out, op);
  run_tensors<kRealTypes | kBool>(ctx, a, b, out, common, op, make_mul);
}

void mul_scalar_out(KernelContext& ctx, KernelArgs args) {
  const char* op = "aten::mul.Scalar_out";
  check_num_args(args, 4, op);
  const Tensor& a = args[0]->to_tensor();
  const Scalar b = args[1]->to_scalar();
  Tensor& out = args[2]->to_tensor();
  const ScalarType common = prepare_scalar(a, b, out, op);
  ew::check_can_cast(common, out, op);
  run_scalar<kRealTypes | kBool>(ctx, a, b, out, common, op, make_mul);
}

// ---------------------------------------------------------------------------------------------------------
// Division. True division always produces a floating result; "trunc" and "floor" keep the common dtype.

enum class Rounding { None, Trunc, Floor };

Rounding parse_rounding(const EValue& v, const char* op) {
  if (v.is_none()) return Rounding::None;
  const std::string_view mode = v.to_string();
  if (mode == "trunc") return Rounding::Trunc;
  if (mode == "floor") return Rounding::Floor;
  kernel_fail(std::string(op) + ": rounding_mode must be None, 'trunc' or 'floor', got '" + std::string(mode) + "'");
}

/// Python's floor division for floats, as ATen computes it: from fmod, so that a == b * (a // b) + a % b
/// holds as closely as rounding allows.
template <typename T>
T floor_divide_float(T a, T b) {
  if (b == T(0)) return a / b;
  const T mod = std::fmod(a, b);
  T div = (a - mod) / b;
  if (mod != T(0) && (b < T(0)) != (mod < T(0))) div -= T(1);
  if (div == T(0)) return std::copysign(T(0), a / b);
  T floordiv = std::floor(div);
  if (div - floordiv > T(0.5)) floordiv += T(1);
  return floordiv;
}

/// Integer a / b rounded toward zero or -inf; b != 0. b == -1 is negation (wrapping at the minimum).
template <typename T>
T integer_divide(T a, T b, bool floor) {
  if constexpr (std::is_signed_v<T>) {
    if (b == T(-1)) return ew::wrap_neg(a);
    const T quot = static_cast<T>(a / b);
    if (floor && (a < 0) != (b < 0) && static_cast<T>(a % b) != 0) return static_cast<T>(quot - 1);
    return quot;
  } else {
    (void)floor;
    return static_cast<T>(a / b);
  }
}

template <typename C>
auto make_rounding_div(Rounding mode, std::atomic<bool>* zero_division) {
  return [mode, zero_division](C a, C b) -> C {
    if constexpr (std::is_floating_point_v<C>) {
      (void)zero_division;  // a float division by zero is IEEE's infinity or NaN, not an error
      return mode == Rounding::Trunc ? std::trunc(a / b) : floor_divide_float(a, b);
    } else {
      if (b == C(0)) {
        zero_division->store(true, std::memory_order_relaxed);
        return C(0);
      }
      return integer_divide(a, b, mode == Rounding::Floor);
    }
  };
}

auto make_true_div = [](auto tag) {
  using C = decltype(tag);
  return [](C a, C b) -> C { return a / b; };
};

void div_tensor_impl(KernelContext& ctx, const Tensor& a, const Tensor& b, Rounding mode, Tensor& out, const char* op) {
  ScalarType common = prepare_tensors(a, b, out, op);
  if (mode == Rounding::None) {
    common = ew::float_common_type(common);
    ew::check_can_cast(common, out, op);
    run_tensors<kFloats | kHalfs>(ctx, a, b, out, common, op, make_true_div);
    return;
  }
  ew::check_can_cast(common, out, op);
  std::atomic<bool> zero_division{false};
  run_tensors<kRealTypes>(ctx, a, b, out, common, op,
                          [&](auto tag) { return make_rounding_div<decltype(tag)>(mode, &zero_division); });
  if (zero_division.load()) ew::fail_integer_division_by_zero(op);
}

void div_scalar_impl(KernelContext& ctx, const Tensor& a, const Scalar& b, Rounding mode, Tensor& out, const char* op) {
  ScalarType common = prepare_scalar(a, b, out, op);
  if (mode == Rounding::None) {
    common = ew::float_common_type(common);
    ew::check_can_cast(common, out, op);
    run_scalar<kFloats | kHalfs>(ctx, a, b, out, common, op, make_true_div);
    return;
  }
  ew::check_can_cast(common, out, op);
  if (!is_floating_type(common) && b.to_double() == 0.0) ew::fail_integer_division_by_zero(op);
  std::atomic<bool> zero_division{false};
  run_scalar<kRealTypes>(ctx, a, b, out, common, op,
                         [&](auto tag) { return make_rounding_div<decltype(tag)>(mode, &zero_division); });
  if (zero_division.load()) ew::fail_integer_division_by_zero(op);
}

void div_out(KernelContext& ctx, KernelArgs args) {
  check_num_args(args, 4, "aten::div.out");
  div_tensor_impl(ctx, args[0]->to_tensor(), args[1]->to_tensor(), Rounding::None, args[2]->to_tensor(),
                  "aten::div.out");
}

void div_out_mode(KernelContext& ctx, KernelArgs args) {
  const char* op = "aten::div.out_mode";
  check_num_args(args, 5, op);
  div_tensor_impl(ctx, args[0]->to_tensor(), args[1]->to_tensor(), parse_rounding(*args[2], op),
                  args[3]->to_tensor(), op);
}

void floor_divide_out(KernelContext& ctx, KernelArgs args) {
  const char* op = "aten::floor_divide.out";
  check_num_args(args, 4, op);
  div_tensor_impl(ctx, args[0]->to_tensor(), args[1]->to_tensor(), Rounding::Floor, args[2]->to_tensor(), op);
}

void div_scalar_out(KernelContext& ctx, KernelArgs args) {
  const char* op = "aten::div.Scalar_out";
  check_num_args(args, 4, op);
  div_scalar_impl(ctx, args[0]->to_tensor(), args[1]->to_scalar(), Rounding::None, args[2]->to_tensor(), op);
}

void div_scalar_mode_out(KernelContext& ctx, KernelArgs args) {
  const char* op = "aten::div.Scalar_mode_out";
  check_num_args(args, 5, op);
  div_scalar_impl(ctx, args[0]->to_tensor(), args[1]->to_scalar(), parse_rounding(*args[2], op),
                  args[3]->to_tensor(), op);
}

// ---------------------------------------------------------------------------------------------------------
// fmod (sign of the dividend) and remainder (sign of the divisor, Python's %).

template <typename C, bool Python>
auto make_modulo(std::atomic<bool>* zero_division) {
  return [zero_division](C a, C b) -> C {
    if constexpr (std::is_floating_point_v<C>) {
      (void)zero_division;  // a float modulo by zero is NaN, not an error
      C mod = std::fmod(a, b);
      if (Python && mod != C(0) && (b < C(0)) != (mod < C(0))) mod += b;
      return mod;
    } else {
      if (b == C(0)) {
        zero_division->store(true, std::memory_order_relaxed);
        return C(0);
      }
      if constexpr (std::is_signed_v<C>) {
        if (b == C(-1)) return C(0);  // also avoids the trap of INT_MIN % -1
        C mod = static_cast<C>(a % b);
        if (Python && mod != 0 && (b < 0) != (mod < 0)) mod = static_cast<C>(mod + b);
        return mod;
      } else {
        return static_cast<C>(a % b);
      }
    }
  };
}

template <bool Python>
void modulo_tensor(KernelContext& ctx, KernelArgs args, const char* op) {
  check_num_args(args, 4, op);
  const Tensor& a = args[0]->to_tensor();
  const Tensor& b = args[1]->to_tensor();
  Tensor& out = args[2]->to_tensor();
  const ScalarType common = prepare_tensors(a, b, out, op);
  ew::check_can_cast(common, out, op);
  std::atomic<bool> zero_division{false};
  run_tensors<kRealTypes>(ctx, a, b, out, common, op,
                          [&](auto tag) { return make_modulo<decltype(tag), Python>(&zero_division); });
  if (zero_division.load()) ew::fail_integer_division_by_zero(op);
}

template <bool Python>
void modulo_scalar(KernelContext& ctx, KernelArgs args, const char* op) {
  check_num_args(args, 4, op);
  const Tensor& a = args[0]->to_tensor();
  const Scalar b = args[1]->to_scalar();
  Tensor& out = args[2]->to_tensor();
  const ScalarType common = prepare_scalar(a, b, out, op);
  ew::check_can_cast(common, out, op);
  if (!is_floating_type(common) && b.to_double() == 0.0) ew::fail_integer_division_by_zero(op);
  std::atomic<bool> zero_division{false};
  run_scalar<kRealTypes>(ctx, a, b, out, common, op,
                         [&](auto tag) { return make_modulo<decltype(tag), Python>(&zero_division); });
  if (zero_division.load()) ew::fail_integer_division_by_zero(op);
}

void fmod_tensor_out(KernelContext& ctx, KernelArgs args) { modulo_tensor<false>(ctx, args, "aten::fmod.Tensor_out"); }
void fmod_scalar_out(KernelContext& ctx, KernelArgs args) { modulo_scalar<false>(ctx, args, "aten::fmod.Scalar_out"); }
void remainder_tensor_out(KernelContext& ctx, KernelArgs args) {
  modulo_tensor<true>(ctx, args, "aten::remainder.Tensor_out");
}
void remainder_scalar_out(KernelContext& ctx, KernelArgs args) {
  modulo_scalar<true>(ctx, args, "aten::remainder.Scalar_out");
}

// ---------------------------------------------------------------------------------------------------------
// pow. Integers use exact repeated squaring (wrapping); a negative integer exponent gives 0 except for bases
// 1 and -1, as ATen's integer pow.

template <typename T>
T integer_pow(T base, T exp) {
  if constexpr (std::is_signed_v<T>) {
    if (exp < 0) {
      if (base == 1) return 1;
      if (base == -1) return exp % 2 == 0 ? T(1) : T(-1);
      return 0;
    }
  }
  T result = 1;
  while (exp != 0) {
    if (exp & 1) result = ew::wrap_mul(result, base);
    exp = static_cast<T>(exp >> 1);
    if (exp != 0) base = ew::wrap_mul(base, base);
  }
  return result;
}

auto make_pow = [](auto tag) {
  using C = decltype(tag);
  return [](C a, C b) -> C {
    if constexpr (std::is_floating_point_v<C>) {
      return std::pow(a, b);
    } else {
      return integer_pow(a, b);
    }
  };
};

void fail_bool_pow(const char* op, ScalarType common) {
  if (common == ScalarType::Bool) unsupported_dtype(op, common);
}

void pow_tensor_tensor_out(KernelContext& ctx, KernelArgs args) {
  const char* op = "aten::pow.Tensor_Tensor_out";
  check_num_args(args, 4, op);
  const Tensor& a = args[0]->to_tensor();
  const Tensor& b = args[1]->to_tensor();
  Tensor& out = args[2]->to_tensor();
  const ScalarType common = prepare_tensors(a, b, out, op);
  fail_bool_pow(op, common);
  ew::check_can_cast(common, out, op);
  run_tensors<kRealTypes>(ctx, a, b, out, common, op, make_pow, ew::kCostlyGrain);
}

void pow_tensor_scalar_out(KernelContext& ctx, KernelArgs args) {
  const char* op = "aten::pow.Tensor_Scalar_out";
  check_num_args(args, 4, op);
  const Tensor& a = args[0]->to_tensor();
  const Scalar exponent = args[1]->to_scalar();
  Tensor& out = args[2]->to_tensor();
  const ScalarType common = prepare_scalar(a, exponent, out, op);
  if (common == ScalarType::Bool && (exponent.to_int() == 0 || exponent.to_int() == 1)) {
    // ATen answers x ** 0 (ones) and x ** 1 (a copy) before it dispatches on the dtype, so these two work on
    // booleans, where any other exponent is refused.
    ew::check_can_cast(common, out, op);
    const bool to_zero = exponent.to_int() == 0;
    apply<bool, bool, 1>(ctx, out, {&a}, [to_zero](bool x) { return to_zero || x; }, ew::kCheapGrain, op);
    return;
  }
  fail_bool_pow(op, common);
  ew::check_can_cast(common, out, op);
  if (!is_floating_type(common) && exponent.to_int() < 0) {
    kernel_fail(std::string(op) + ": integers to negative integer powers are not allowed");
  }
  dispatch_compute<kRealTypes>(common, op, [&](auto tag) {
    using C = decltype(tag);
    const C e = ew::scalar_to<C>(exponent);
    if constexpr (std::is_floating_point_v<C>) {
      if (e == C(2)) {  // x * x is what pow(x, 2) rounds to, without the libm call (RMS norms use it)
        apply<C, C, 1>(ctx, out, {&a}, [](C x) { return x * x; }, ew::kCheapGrain, op);
        return;
      }
      if constexpr (std::is_same_v<C, float>) {
        if (e == 3.0f) {  // GELU's tanh form cubes its input
          apply<C, C, 1>(ctx, out, {&a}, [](float x) { return compute::pow3_f32(x); }, ew::kCostlyGrain, op);
          return;
        }
      }
      apply<C, C, 1>(ctx, out, {&a}, [e](C x) { return std::pow(x, e); }, ew::kCostlyGrain, op);
    } else {
      apply<C, C, 1>(ctx, out, {&a}, [e](C x) { return integer_pow(x, e); }, ew::kCheapGrain, op);
    }
  });
}

void pow_scalar_out(KernelContext& ctx, KernelArgs args) {
  const char* op = "aten::pow.Scalar_out";
  check_num_args(args, 4, op);
  const Scalar base = args[0]->to_scalar();
  const Tensor& exponent = args[1]->to_tensor();
  Tensor& out = args[2]->to_tensor();
  const ScalarType common = prepare_scalar(exponent, base, out, op);
  fail_bool_pow(op, common);
  ew::check_can_cast(common, out, op);
  run_scalar<kRealTypes>(ctx, exponent, base, out, common, op, make_pow, /*scalar_first=*/true, ew::kCostlyGrain);
}

// ---------------------------------------------------------------------------------------------------------
// maximum / minimum (NaN wins), atan2

template <bool Max>
void min_max_out(KernelContext& ctx, KernelArgs args, const char* op) {
  check_num_args(args, 4, op);
  const Tensor& a = args[0]->to_tensor();
  const Tensor& b = args[1]->to_tensor();
  Tensor& out = args[2]->to_tensor();
  const ScalarType common = prepare_tensors(a, b, out, op);
  ew::check_can_cast(common, out, op);
  run_tensors<kRealTypes | kBool>(ctx, a, b, out, common, op, [](auto tag) {
    using C = decltype(tag);
    return [](C x, C y) -> C {
      if constexpr (std::is_floating_point_v<C>) {
        if (std::isnan(x)) return x;
        if (std::isnan(y)) return y;
      }
      if constexpr (Max) {
        return x < y ? y : x;
      } else {
        return y < x ? y : x;
      }
    };
  });
}

void maximum_out(KernelContext& ctx, KernelArgs args) { min_max_out<true>(ctx, args, "aten::maximum.out"); }
void minimum_out(KernelContext& ctx, KernelArgs args) { min_max_out<false>(ctx, args, "aten::minimum.out"); }

void atan2_out(KernelContext& ctx, KernelArgs args) {
  const char* op = "aten::atan2.out";
  check_num_args(args, 4, op);
  const Tensor& a = args[0]->to_tensor();
  const Tensor& b = args[1]->to_tensor();
  Tensor& out = args[2]->to_tensor();
  const ScalarType common = ew::float_common_type(prepare_tensors(a, b, out, op));
  ew::check_can_cast(common, out, op);
  run_tensors<kFloats | kHalfs>(
      ctx, a, b, out, common, op,
      [](auto tag) {
        using C = decltype(tag);
        return [](C y, C x) -> C { return std::atan2(y, x); };
      },
      ew::kCostlyGrain);
}

// ---------------------------------------------------------------------------------------------------------
// Bitwise ops (integers and bool) and shifts (integers). Shifts by a negative amount or by the width or more
// give 0 (left) or the sign fill (right), as ATen defines them, instead of C++'s undefined behaviour.

enum class BitOp { And, Or, Xor, LeftShift, RightShift };

template <BitOp Op, typename C>
C bit_op(C a, C b) {
  if constexpr (Op == BitOp::And) {
    return static_cast<C>(a & b);
  } else if constexpr (Op == BitOp::Or) {
    return static_cast<C>(a | b);
  } else if constexpr (Op == BitOp::Xor) {
    return static_cast<C>(a ^ b);
  } else {
    constexpr int kBits = static_cast<int>(sizeof(C) * CHAR_BIT);
    using U = ew::WideUnsigned<C>;
    bool out_of_range = b >= static_cast<C>(kBits);
    if constexpr (std::is_signed_v<C>) out_of_range = out_of_range || b < 0;
    if constexpr (Op == BitOp::LeftShift) {
      return out_of_range ? C(0) : static_cast<C>(static_cast<U>(a) << b);
    } else if constexpr (std::is_signed_v<C>) {
      return out_of_range ? static_cast<C>(a < 0 ? -1 : 0) : static_cast<C>(a >> b);
    } else {
      return out_of_range ? C(0) : static_cast<C>(a >> b);
    }
  }
}

template <BitOp Op>
constexpr unsigned kBitOpTypes = (Op == BitOp::LeftShift || Op == BitOp::RightShift) ? unsigned(kInts)
                                                                                      : unsigned(kInts | kBool);

template <BitOp Op>
auto make_bit_op() {
  return [](auto tag) {
    using C = decltype(tag);
    return [](C a, C b) -> C { return bit_op<Op, C>(a, b); };
  };
}

template <BitOp Op>
void bitwise_tensor(KernelContext& ctx, KernelArgs args, const char* op) {
  check_num_args(args, 4, op);
  const Tensor& a = args[0]->to_tensor();
  const Tensor& b = args[1]->to_tensor();
  Tensor& out = args[2]->to_tensor();
  const ScalarType common = prepare_tensors(a, b, out, op);
  ew::check_can_cast(common, out, op);
  run_tensors<kBitOpTypes<Op>>(ctx, a, b, out, common, op, make_bit_op<Op>());
}

template <BitOp Op>
void bitwise_scalar(KernelContext& ctx, KernelArgs args, const char* op) {
  check_num_args(args, 4, op);
  const Tensor& a = args[0]->to_tensor();
  const Scalar b = args[1]->to_scalar();
  Tensor& out = args[2]->to_tensor();
  const ScalarType common = prepare_scalar(a, b, out, op);
  ew::check_can_cast(common, out, op);
  run_scalar<kBitOpTypes<Op>>(ctx, a, b, out, common, op, make_bit_op<Op>());
}

#define ETNP_BITWISE_KERNELS(name, Op)                                                                   \
  void name##_tensor_out(KernelContext& ctx, KernelArgs args) {                                           \
    bitwise_tensor<Op>(ctx, args, "aten::" #name ".Tensor_out");                                          \
  }                                                                                                       \
  void name##_scalar_out(KernelContext& ctx, KernelArgs args) {                                           \
    bitwise_scalar<Op>(ctx, args, Op == BitOp::LeftShift || Op == BitOp::RightShift                       \
                                      ? "aten::" #name ".Tensor_Scalar_out"                               \
                                      : "aten::" #name ".Scalar_out");                                    \
  }

ETNP_BITWISE_KERNELS(bitwise_and, BitOp::And)
ETNP_BITWISE_KERNELS(bitwise_or, BitOp::Or)
ETNP_BITWISE_KERNELS(bitwise_xor, BitOp::Xor)
ETNP_BITWISE_KERNELS(bitwise_left_shift, BitOp::LeftShift)
ETNP_BITWISE_KERNELS(bitwise_right_shift, BitOp::RightShift)

#undef ETNP_BITWISE_KERNELS

// ---------------------------------------------------------------------------------------------------------
// logical_and / or / xor: any input dtypes (read as "!= 0"), any output dtype.

template <typename F>
void logical_binary(KernelContext& ctx, KernelArgs args, const char* op, F f) {
  check_num_args(args, 4, op);
  const Tensor& a = args[0]->to_tensor();
  const Tensor& b = args[1]->to_tensor();
  Tensor& out = args[2]->to_tensor();
  prepare_tensors(a, b, out, op);
  apply<bool, bool, 2>(ctx, out, {&a, &b}, f, ew::kCheapGrain, op);
}

void logical_and_out(KernelContext& ctx, KernelArgs args) {
  logical_binary(ctx, args, "aten::logical_and.out", [](bool a, bool b) { return a && b; });
}
void logical_or_out(KernelContext& ctx, KernelArgs args) {
  logical_binary(ctx, args, "aten::logical_or.out", [](bool a, bool b) { return a || b; });
}
void logical_xor_out(KernelContext& ctx, KernelArgs args) {
  logical_binary(ctx, args, "aten::logical_xor.out", [](bool a, bool b) { return a != b; });
}

}  // namespace

void register_binary_kernels(KernelRegistry& registry) {
  // (Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) + return slot
  registry.add("aten::add.out", 5, add_out);
  registry.add("aten::sub.out", 5, sub_out);
  // (Tensor self, Scalar other, Scalar alpha=1, *, Tensor(a!) out)
  registry.add("aten::add.Scalar_out", 5, add_scalar_out);
  registry.add("aten::sub.Scalar_out", 5, sub_scalar_out);
  registry.add("aten::rsub.Scalar_out", 5, rsub_scalar_out);
  // (Tensor self, Tensor|Scalar other, *, Tensor(a!) out)
  registry.add("aten::mul.out", 4, mul_out, prepare_mul);
  registry.add("aten::mul.Scalar_out", 4, mul_scalar_out);
  registry.add("aten::div.out", 4, div_out);
  registry.add("aten::div.Scalar_out", 4, div_scalar_out);
  registry.add("aten::floor_divide.out", 4, floor_divide_out);
  // (Tensor self, Tensor|Scalar other, *, str? rounding_mode, Tensor(a!) out)
  registry.add("aten::div.out_mode", 5, div_out_mode);
  registry.add("aten::div.Scalar_mode_out", 5, div_scalar_mode_out);
  registry.add("aten::fmod.Tensor_out", 4, fmod_tensor_out);
  registry.add("aten::fmod.Scalar_out", 4, fmod_scalar_out);
  registry.add("aten::remainder.Tensor_out", 4, remainder_tensor_out);
  registry.add("aten::remainder.Scalar_out", 4, remainder_scalar_out);
  registry.add("aten::pow.Tensor_Tensor_out", 4, pow_tensor_tensor_out);
  registry.add("aten::pow.Tensor_Scalar_out", 4, pow_tensor_scalar_out);
  // (Scalar self, Tensor exponent, *, Tensor(a!) out)
  registry.add("aten::pow.Scalar_out", 4, pow_scalar_out);
  registry.add("aten::maximum.out", 4, maximum_out);
  registry.add("aten::minimum.out", 4, minimum_out);
  registry.add("aten::atan2.out", 4, atan2_out);
  registry.add("aten::bitwise_and.Tensor_out", 4, bitwise_and_tensor_out);
  registry.add("aten::bitwise_and.Scalar_out", 4, bitwise_and_scalar_out);
  registry.add("aten::bitwise_or.Tensor_out", 4, bitwise_or_tensor_out);
  registry.add("aten::bitwise_or.Scalar_out", 4, bitwise_or_scalar_out);
  registry.add("aten::bitwise_xor.Tensor_out", 4, bitwise_xor_tensor_out);
  registry.add("aten::bitwise_xor.Scalar_out", 4, bitwise_xor_scalar_out);
  registry.add("aten::bitwise_left_shift.Tensor_out", 4, bitwise_left_shift_tensor_out);
  registry.add("aten::bitwise_left_shift.Tensor_Scalar_out", 4, bitwise_left_shift_scalar_out);
  registry.add("aten::bitwise_right_shift.Tensor_out", 4, bitwise_right_shift_tensor_out);
  registry.add("aten::bitwise_right_shift.Tensor_Scalar_out", 4, bitwise_right_shift_scalar_out);
  registry.add("aten::logical_and.out", 4, logical_and_out);
  registry.add("aten::logical_or.out", 4, logical_or_out);
  registry.add("aten::logical_xor.out", 4, logical_xor_out);
}

}  // namespace etnp::kernels
