// Unary elementwise kernels: math functions (exp, sin, sqrt, ...), rounding, sign/abs/neg, activations
// (relu, sigmoid, gelu, elu, leaky_relu, hardtanh), clamp, logit, predicates (isnan, isinf) and the
// bitwise/logical not. Float math runs in float for float/half/bfloat16/integer/bool inputs and in double for
// double inputs, with the C library's functions, as ATen's CPU kernels do.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "etnp/threadpool.h"
#include "kernels/elementwise.h"
#include "kernels/kernel_util.h"
#include "kernels/register.h"
#include "compute/vector_math.h"

namespace etnp::kernels {
namespace {

using ew::apply;
using ew::dispatch_compute;

// ---------------------------------------------------------------------------------------------------------
// Floating math: any real or bool input, a floating output.

/// `vec` (may be null): the vector routine for contiguous float32 in and out.
template <typename Fn>
void float_unary(KernelContext& ctx, KernelArgs args, const char* op, Fn fn, VectorF32Fn vec = nullptr) {
  check_num_args(args, 3, op);
  const Tensor& self = args[0]->to_tensor();
  Tensor& out = args[1]->to_tensor();
  resize_output(out, self.sizes(), op);
  const ScalarType common = ew::float_common_type(self.dtype());
  ew::check_can_cast(common, out, op);
  if (vec != nullptr && self.dtype() == ScalarType::Float && out.dtype() == ScalarType::Float &&
      self.is_contiguous_order() && out.is_contiguous_order() && self.data() != nullptr && out.data() != nullptr) {
    const auto* in = self.data_as<const float>();
    auto* o = out.data_as<float>();
    const auto n = static_cast<size_t>(out.numel());
    ThreadPool* pool = ctx.pool();
    if (pool != nullptr && pool->num_threads() > 1 && n >= 2 * static_cast<size_t>(ew::kCostlyGrain)) {
      pool->parallel_for(n, static_cast<size_t>(ew::kCostlyGrain), [&](size_t b, size_t e) { vec(in + b, o + b, e - b); });
    } else {
      vec(in, o, n);
    }
    return;
  }
  dispatch_compute<kFloats | kHalfs>(common, op, [&](auto tag) {
    using C = decltype(tag);
    apply<C, C, 1>(ctx, out, {&self}, [fn](C x) { return static_cast<C>(fn(x)); }, ew::kCostlyGrain, op);
  });
}

#define ETNP_FLOAT_UNARY(Name, expr)                                          \
  struct Name {                                                               \
    template <typename T>                                                     \
    T operator()(T x) const {                                                 \
      return expr;                                                            \
    }                                                                         \
  };

/// clamp(x + 3, 0, 6) as ATen's hardswish and hardsigmoid compute it: NaN stays NaN.
template <typename T>
T relu6_of_x_plus_3(T x) {
  T t = x + T(3);
  t = t < T(0) ? T(0) : t;
  return t > T(6) ? T(6) : t;
}
// x * clamp(x + 3, 0, 6) / 6, in this order (ATen's, and what an exporter's decomposition of it computes step by
// step: the runtime fuses that chain into this kernel at load); hardsigmoid without the multiply.
ETNP_FLOAT_UNARY(Hardswish, x * relu6_of_x_plus_3(x) / T(6))
ETNP_FLOAT_UNARY(Hardsigmoid, relu6_of_x_plus_3(x) / T(6))
ETNP_FLOAT_UNARY(Acos, std::acos(x))
ETNP_FLOAT_UNARY(Acosh, std::acosh(x))
ETNP_FLOAT_UNARY(Asin, std::asin(x))
ETNP_FLOAT_UNARY(Asinh, std::asinh(x))
ETNP_FLOAT_UNARY(Atan, std::atan(x))
ETNP_FLOAT_UNARY(Atanh, std::atanh(x))
ETNP_FLOAT_UNARY(Cos, std::cos(x))
ETNP_FLOAT_UNARY(Cosh, std::cosh(x))
ETNP_FLOAT_UNARY(Erf, std::erf(x))
ETNP_FLOAT_UNARY(Exp, std::exp(x))
ETNP_FLOAT_UNARY(Expm1, std::expm1(x))
ETNP_FLOAT_UNARY(Log, std::log(x))
ETNP_FLOAT_UNARY(Log10, std::log10(x))
ETNP_FLOAT_UNARY(Log1p, std::log1p(x))
ETNP_FLOAT_UNARY(Log2, std::log2(x))
ETNP_FLOAT_UNARY(Reciprocal, T(1) / x)
ETNP_FLOAT_UNARY(Rsqrt, T(1) / std::sqrt(x))
ETNP_FLOAT_UNARY(Sigmoid, T(1) / (T(1) + std::exp(-x)))
ETNP_FLOAT_UNARY(Silu, x * (T(1) / (T(1) + std::exp(-x))))
ETNP_FLOAT_UNARY(Sin, std::sin(x))
ETNP_FLOAT_UNARY(Sinh, std::sinh(x))
ETNP_FLOAT_UNARY(Sqrt, std::sqrt(x))
ETNP_FLOAT_UNARY(Tan, std::tan(x))
ETNP_FLOAT_UNARY(Tanh, std::tanh(x))

#undef ETNP_FLOAT_UNARY

// ---------------------------------------------------------------------------------------------------------
// Ops whose result has the input's dtype (abs, neg, rounding, sign, relu, bitwise_not).

template <unsigned Set, typename Fn>
void same_type_unary(KernelContext& ctx, KernelArgs args, const char* op, Fn fn) {
  check_num_args(args, 3, op);
  const Tensor& self = args[0]->to_tensor();
  Tensor& out = args[1]->to_tensor();
  resize_output(out, self.sizes(), op);
  ew::check_can_cast(self.dtype(), out, op);
  dispatch_compute<Set>(self.dtype(), op, [&](auto tag) {
    using C = decltype(tag);
    apply<C, C, 1>(ctx, out, {&self}, [fn](C x) { return static_cast<C>(fn(x)); }, ew::kCheapGrain, op);
  });
}

void fail_bool(const char* op, const Tensor& t, const char* why) {
  if (t.dtype() == ScalarType::Bool) kernel_fail(std::string(op) + ": " + why);
}

void abs_out(KernelContext& ctx, KernelArgs args) {
  const char* op = "aten::abs.out";
  fail_bool(op, args[0]->to_tensor(), "not implemented for bool");
  same_type_unary<kRealTypes>(ctx, args, op, [](auto x) {
    using T = decltype(x);
    if constexpr (std::is_floating_point_v<T>) {
      return std::fabs(x);
    } else if constexpr (std::is_signed_v<T>) {
      return x < 0 ? ew::wrap_neg(x) : x;
    } else {
      return x;
    }
  });
}

void neg_out(KernelContext& ctx, KernelArgs args) {
  const char* op = "aten::neg.out";
  fail_bool(op, args[0]->to_tensor(),
            "negation, the `-` operator, on a bool tensor is not supported; use logical_not() to invert a mask");
  same_type_unary<kRealTypes>(ctx, args, op, [](auto x) {
    using T = decltype(x);
    if constexpr (std::is_floating_point_v<T>) {
      return -x;
    } else {
      return ew::wrap_neg(x);
    }
  });
}

template <typename RoundFn>
void rounding_unary(KernelContext& ctx, KernelArgs args, const char* op, RoundFn round) {
  fail_bool(op, args[0]->to_tensor(), "not implemented for bool");
  same_type_unary<kRealTypes>(ctx, args, op, [round](auto x) {
    using T = decltype(x);
    if constexpr (std::is_floating_point_v<T>) {
      return round(x);
    } else {
      return x;  // integers are already whole
    }
  });
}

void ceil_out(KernelContext& ctx, KernelArgs args) {
  rounding_unary(ctx, args, "aten::ceil.out", [](auto x) { return std::ceil(x); });
}
void floor_out(KernelContext& ctx, KernelArgs args) {
  rounding_unary(ctx, args, "aten::floor.out", [](auto x) { return std::floor(x); });
}
void trunc_out(KernelContext& ctx, KernelArgs args) {
  rounding_unary(ctx, args, "aten::trunc.out", [](auto x) { return std::trunc(x); });
}
// Halves go to the even neighbour: nearbyint in the default rounding mode.
void round_out(KernelContext& ctx, KernelArgs args) {
  rounding_unary(ctx, args, "aten::round.out", [](auto x) { return std::nearbyint(x); });
}

// sign(NaN) is 0 as in ATen's CPU kernel; bool stays as it is.
void sign_out(KernelContext& ctx, KernelArgs args) {
  same_type_unary<kRealTypes | kBool>(ctx, args, "aten::sign.out", [](auto x) {
    using T = decltype(x);
    if constexpr (std::is_same_v<T, bool> || std::is_unsigned_v<T>) {
      return static_cast<T>(x != T(0));
    } else {
      return static_cast<T>(static_cast<int>(T(0) < x) - static_cast<int>(x < T(0)));
    }
  });
}

// NaN passes through (relu is clamp_min(x, 0)).
void relu_out(KernelContext& ctx, KernelArgs args) {
  const char* op = "aten::relu.out";
  fail_bool(op, args[0]->to_tensor(), "boolean inputs not supported");
  same_type_unary<kRealTypes>(ctx, args, op, [](auto x) {
    using T = decltype(x);
    if constexpr (std::is_unsigned_v<T>) {
      return x;
    } else {
      return x < T(0) ? T(0) : x;
    }
  });
}

void bitwise_not_out(KernelContext& ctx, KernelArgs args) {
  same_type_unary<kInts | kBool>(ctx, args, "aten::bitwise_not.out", [](auto x) {
    using T = decltype(x);
    if constexpr (std::is_same_v<T, bool>) {
      return !x;
    } else {
      return static_cast<T>(~x);
    }
  });
}

// ---------------------------------------------------------------------------------------------------------
// Ops with a bool result (any output dtype takes it).

template <typename Fn>
void predicate_unary(KernelContext& ctx, KernelArgs args, const char* op, Fn fn) {
  check_num_args(args, 3, op);
  const Tensor& self = args[0]->to_tensor();
  Tensor& out = args[1]->to_tensor();
  resize_output(out, self.sizes(), op);
  dispatch_compute<kRealTypes | kBool>(self.dtype(), op, [&](auto tag) {
    using C = decltype(tag);
    apply<C, bool, 1>(ctx, out, {&self}, [fn](C x) { return static_cast<bool>(fn(x)); }, ew::kCheapGrain, op);
  });
}

void isnan_out(KernelContext& ctx, KernelArgs args) {
  predicate_unary(ctx, args, "aten::isnan.out", [](auto x) {
    if constexpr (std::is_floating_point_v<decltype(x)>) {
      return std::isnan(x);
    } else {
      return false;
    }
  });
}

void isinf_out(KernelContext& ctx, KernelArgs args) {
  predicate_unary(ctx, args, "aten::isinf.out", [](auto x) {
    if constexpr (std::is_floating_point_v<decltype(x)>) {
      return std::isinf(x);
    } else {
      return false;
    }
  });
}

void logical_not_out(KernelContext& ctx, KernelArgs args) {
  predicate_unary(ctx, args, "aten::logical_not.out", [](auto x) { return x == decltype(x)(0); });
}

// ---------------------------------------------------------------------------------------------------------
// Activations with parameters.

/// For activations defined on floating tensors only; the output takes the input's dtype (or wider).
template <typename MakeFn>
void float_activation(KernelContext& ctx, const Tensor& self, Tensor& out, const char* op, MakeFn make_fn) {
  resize_output(out, self.sizes(), op);
  if (!is_floating_type(self.dtype())) unsupported_dtype(op, self.dtype());
  ew::check_can_cast(self.dtype(), out, op);
  dispatch_compute<kFloats | kHalfs>(self.dtype(), op, [&](auto tag) {
    using C = decltype(tag);
    apply<C, C, 1>(ctx, out, {&self}, make_fn(C{}), ew::kCostlyGrain, op);
  });
}

/// Runs block(x, y, m, t) over n contiguous floats in blocks of m <= 256 (t: a 256-float stack buffer for the
/// steps between), split across the pool when large: a written-out activation's passes stay in L1. y may be x
/// itself (each element read before it is written), not a shifted view of it (the runtime checks).
template <typename Block>
void float_blocks(KernelContext& ctx, const float* x, float* y, int64_t n, Block block) {
  auto range = [&](int64_t begin, int64_t end) {
    constexpr int64_t kBlock = 256;
    float t[kBlock];
    for (int64_t i0 = begin; i0 < end; i0 += kBlock) block(x + i0, y + i0, std::min(kBlock, end - i0), t);
  };
  ThreadPool* pool = ctx.pool();
  if (pool != nullptr && pool->num_threads() > 1 && n >= 2 * ew::kCostlyGrain) {
    pool->parallel_for(static_cast<size_t>(n), static_cast<size_t>(ew::kCostlyGrain), [&](size_t b0, size_t e0) {
      range(static_cast<int64_t>(b0), static_cast<int64_t>(e0));
    });
  } else {
    range(0, n);
  }
}

void gelu_out(KernelContext& ctx, KernelArgs args) {
  const char* op = "aten::gelu.out";
  check_num_args(args, 4, op);
  const Tensor& self = args[0]->to_tensor();
  const std::string_view approximate = args[1]->to_string();
  Tensor& out = args[2]->to_tensor();
  const VectorF32Fn verf = vector_f32(VectorOp::Erf);
  if (approximate == "none" && verf != nullptr && self.dtype() == ScalarType::Float &&
      out.dtype() == ScalarType::Float && self.is_contiguous_order() && out.is_contiguous_order() &&
      self.data() != nullptr) {
    // Contiguous float32: the erf through the vector routine (Sleef's, 1 ulp, as aten::erf.out runs it), the
    // steps rounded as the scalar form rounds them.
    resize_output(out, self.sizes(), op);
    if (out.numel() == 0) return;
    ETNP_KERNEL_CHECK(out.data() != nullptr, op << ": the output has no data");
    const float kAlpha = static_cast<float>(M_SQRT1_2);
    float_blocks(ctx, self.data_as<const float>(), out.data_as<float>(), out.numel(),
                 [&](const float* x, float* y, int64_t m, float* t) {
                   for (int64_t i = 0; i < m; ++i) t[i] = x[i] * kAlpha;
                   verf(t, t, static_cast<size_t>(m));
                   for (int64_t i = 0; i < m; ++i) y[i] = x[i] * 0.5f * (1.0f + t[i]);
                 });
    return;
  }
  if (approximate == "none") {
    float_activation(ctx, self, out, op, [](auto tag) {
      using T = decltype(tag);
      return [](T x) {
        const T kAlpha = static_cast<T>(M_SQRT1_2);
        return x * T(0.5) * (T(1) + std::erf(x * kAlpha));
      };
    });
  } else if (approximate == "tanh") {
    float_activation(ctx, self, out, op, [](auto tag) {
      using T = decltype(tag);
      return [](T x) {
        const T kBeta = static_cast<T>(M_SQRT2 * M_2_SQRTPI * 0.5);
        const T kKappa = static_cast<T>(0.044715);
        const T inner = kBeta * (x + kKappa * x * x * x);
        return T(0.5) * x * (T(1) + std::tanh(inner));
      };
    });
  } else {
    kernel_fail(std::string(op) + ": approximate must be 'none' or 'tanh', got '" + std::string(approximate) + "'");
  }
}

void elu_out(KernelContext& ctx, KernelArgs args) {
  const char* op = "aten::elu.out";
  check_num_args(args, 6, op);
  const Tensor& self = args[0]->to_tensor();
  const Scalar alpha = args[1]->to_scalar(), scale = args[2]->to_scalar(), input_scale = args[3]->to_scalar();
  Tensor& out = args[4]->to_tensor();
  float_activation(ctx, self, out, op, [&](auto tag) {
    using T = decltype(tag);
    const T neg_coef = ew::scalar_to<T>(alpha) * ew::scalar_to<T>(scale);
    const T pos_coef = ew::scalar_to<T>(scale);
    const T neg_input_coef = ew::scalar_to<T>(input_scale);
    return [=](T x) { return x <= T(0) ? std::expm1(x * neg_input_coef) * neg_coef : x * pos_coef; };
  });
}

void leaky_relu_out(KernelContext& ctx, KernelArgs args) {
  const char* op = "aten::leaky_relu.out";
  check_num_args(args, 4, op);
  const Tensor& self = args[0]->to_tensor();
  const Scalar slope = args[1]->to_scalar();
  Tensor& out = args[2]->to_tensor();
  float_activation(ctx, self, out, op, [&](auto tag) {
    using T = decltype(tag);
    const T s = ew::scalar_to<T>(slope);
    return [s](T x) { return x > T(0) ? x : x * s; };
  });
}

// etnp::tanh_gelu.out(Tensor self, float a, float b, float c, float d, *, Tensor(a!) out)
// out = (x * a) * (tanh((x + pow(x, 3) * b) * c) + d), each step rounded to float32 as the separate calls round
// it: what the runtime makes at load of the tanh form of GELU written out in operators (GPT-2's
// 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x ** 3)))), eight passes over memory in one. The cube is
// pow's (libm's bits), the tanh the one aten::tanh.out runs (the vector routine where there is one). Float32,
// contiguous.
void tanh_gelu_out(KernelContext& ctx, KernelArgs args) {
  constexpr const char* op = "etnp::tanh_gelu.out";
  check_num_args(args, 7, op);
  const Tensor& self = args[0]->to_tensor();
  const float a = static_cast<float>(args[1]->to_double()), b = static_cast<float>(args[2]->to_double()),
              c = static_cast<float>(args[3]->to_double()), d = static_cast<float>(args[4]->to_double());
  Tensor& out = args[5]->to_tensor();
  resize_output(out, self.sizes(), op);
  ETNP_KERNEL_CHECK(self.dtype() == ScalarType::Float && out.dtype() == ScalarType::Float &&
                        self.is_contiguous_order() && out.is_contiguous_order(),
                    op << ": takes contiguous float32 tensors (got " << scalar_type_name(self.dtype()) << " in, "
                       << scalar_type_name(out.dtype()) << " out)");
  const int64_t n = out.numel();
  if (n == 0) return;
  ETNP_KERNEL_CHECK(self.data() != nullptr && out.data() != nullptr, op << ": a tensor has no data");
  const float* x = self.data_as<const float>();
  float* y = out.data_as<float>();
  const VectorF32Fn vtanh = vector_f32(VectorOp::Tanh);
  // The tanh's argument in the block's buffer, then the product.
  float_blocks(ctx, x, y, n, [&](const float* xb, float* yb, int64_t m, float* t) {
    // The product is stored before the add reads it: in one expression a compiler may fuse the two into a
    // multiply-add (GCC does on aarch64), which rounds once where the separate calls round twice.
    for (int64_t i = 0; i < m; ++i) t[i] = compute::pow3_f32(xb[i]) * b;
    for (int64_t i = 0; i < m; ++i) t[i] = (xb[i] + t[i]) * c;
    if (vtanh != nullptr) {
      vtanh(t, t, static_cast<size_t>(m));
    } else {
      for (int64_t i = 0; i < m; ++i) t[i] = std::tanh(t[i]);
    }
    for (int64_t i = 0; i < m; ++i) yb[i] = (xb[i] * a) * (t[i] + d);
  });
}

// ---------------------------------------------------------------------------------------------------------
// clamp / hardtanh. NaN inputs stay NaN, and a NaN bound gives NaN; min is applied before max, so
// min > max gives max everywhere (as torch.clamp).

template <typename T>
inline T clamp_min_value(T x, T lo) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(x)) return x;
    if (std::isnan(lo)) return lo;
  }
  return x < lo ? lo : x;
}

template <typename T>
inline T clamp_max_value(T x, T hi) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(x)) return x;
    if (std::isnan(hi)) return hi;
  }
  return x > hi ? hi : x;
}

void clamp_scalar_impl(KernelContext& ctx, const Tensor& self, const std::optional<Scalar>& min,
                       const std::optional<Scalar>& max, Tensor& out, const char* op) {
  if (!min && !max) kernel_fail(std::string(op) + ": at least one of 'min' or 'max' must not be None");
  resize_output(out, self.sizes(), op);
  ScalarType common = self.dtype();
  if (min) common = promote_with_scalar(common, *min);
  if (max) common = promote_with_scalar(common, *max);
  ew::check_can_cast(common, out, op);
  dispatch_compute<kRealTypes | kBool>(common, op, [&](auto tag) {
    using C = decltype(tag);
    const C lo = min ? ew::scalar_to<C>(*min) : C(0);
    const C hi = max ? ew::scalar_to<C>(*max) : C(0);
    if constexpr (std::is_floating_point_v<C>) {
      if ((min && std::isnan(lo)) || (max && std::isnan(hi))) {
        const C nan = std::numeric_limits<C>::quiet_NaN();
        apply<C, C, 1>(ctx, out, {&self}, [nan](C) { return nan; }, ew::kCheapGrain, op);
        return;
      }
      // Bounds are numbers from here on: plain compares keep NaN inputs (x < lo is false for NaN) and
      // let the compiler vectorize the loop.
      if (min && max) {
        apply<C, C, 1>(ctx, out, {&self}, [lo, hi](C x) {
                         const C y = x < lo ? lo : x;
                         return y > hi ? hi : y;
                       },
                       ew::kCheapGrain, op);
      } else if (min) {
        apply<C, C, 1>(ctx, out, {&self}, [lo](C x) { return x < lo ? lo : x; }, ew::kCheapGrain, op);
      } else {
        apply<C, C, 1>(ctx, out, {&self}, [hi](C x) { return x > hi ? hi : x; }, ew::kCheapGrain, op);
      }
      return;
    }
    if (min && max) {
      apply<C, C, 1>(ctx, out, {&self}, [lo, hi](C x) { return clamp_max_value(clamp_min_value(x, lo), hi); },
                     ew::kCheapGrain, op);
    } else if (min) {
      apply<C, C, 1>(ctx, out, {&self}, [lo](C x) { return clamp_min_value(x, lo); }, ew::kCheapGrain, op);
    } else {
      apply<C, C, 1>(ctx, out, {&self}, [hi](C x) { return clamp_max_value(x, hi); }, ew::kCheapGrain, op);
    }
  });
}

std::optional<Scalar> optional_scalar(const EValue& v) {
  if (v.is_none()) return std::nullopt;
  return v.to_scalar();
}

void clamp_out(KernelContext& ctx, KernelArgs args) {
  const char* op = "aten::clamp.out";
  check_num_args(args, 5, op);
  clamp_scalar_impl(ctx, args[0]->to_tensor(), optional_scalar(*args[1]), optional_scalar(*args[2]),
                    args[3]->to_tensor(), op);
}

void hardtanh_out(KernelContext& ctx, KernelArgs args) {
  const char* op = "aten::hardtanh.out";
  check_num_args(args, 5, op);
  const Tensor& self = args[0]->to_tensor();
  const Scalar min = args[1]->to_scalar(), max = args[2]->to_scalar();
  if (self.dtype() == ScalarType::Bool) unsupported_dtype(op, self.dtype());
  if (self.dtype() == ScalarType::Byte && (min.to_double() < 0 || max.to_double() < 0)) {
    kernel_fail(std::string(op) + ": cannot do hardtanh on an unsigned type with negative limits");
  }
  clamp_scalar_impl(ctx, self, min, max, args[3]->to_tensor(), op);
}

void clamp_tensor_out(KernelContext& ctx, KernelArgs args) {
  const char* op = "aten::clamp.Tensor_out";
  check_num_args(args, 5, op);
  const Tensor& self = args[0]->to_tensor();
  const Tensor* min = args[1]->to_optional_tensor();
  const Tensor* max = args[2]->to_optional_tensor();
  Tensor& out = args[3]->to_tensor();
  if (!min && !max) kernel_fail(std::string(op) + ": at least one of 'min' or 'max' must not be None");
  std::vector<const Tensor*> operands{&self};
  if (min) operands.push_back(min);
  if (max) operands.push_back(max);
  ew::resize_to_broadcast(out, operands, op);
  const ScalarType common = ew::result_type_of(operands);
  ew::check_can_cast(common, out, op);
  dispatch_compute<kRealTypes | kBool>(common, op, [&](auto tag) {
    using C = decltype(tag);
    if (min && max) {
      apply<C, C, 3>(ctx, out, {&self, min, max},
                     [](C x, C lo, C hi) { return clamp_max_value(clamp_min_value(x, lo), hi); }, ew::kCheapGrain,
                     op);
    } else if (min) {
      apply<C, C, 2>(ctx, out, {&self, min}, [](C x, C lo) { return clamp_min_value(x, lo); }, ew::kCheapGrain, op);
    } else {
      apply<C, C, 2>(ctx, out, {&self, max}, [](C x, C hi) { return clamp_max_value(x, hi); }, ew::kCheapGrain, op);
    }
  });
}

// logit(x) = log(x / (1 - x)), with x first clamped to [eps, 1 - eps] when eps is given (and not negative).
void logit_out(KernelContext& ctx, KernelArgs args) {
  const char* op = "aten::logit.out";
  check_num_args(args, 4, op);
  const Tensor& self = args[0]->to_tensor();
  // A negative eps means no clamping, as in ATen.
  const double eps = args[1]->is_none() ? -1.0 : args[1]->to_double();
  Tensor& out = args[2]->to_tensor();
  resize_output(out, self.sizes(), op);
  const ScalarType common = ew::float_common_type(self.dtype());
  ew::check_can_cast(common, out, op);
  dispatch_compute<kFloats | kHalfs>(common, op, [&](auto tag) {
    using C = decltype(tag);
    auto logit = [](C x) { return x == C(1) ? std::numeric_limits<C>::infinity() : std::log(x / (C(1) - x)); };
    if (eps >= 0) {
      const C lo = static_cast<C>(eps);
      const C hi = C(1) - lo;
      apply<C, C, 1>(ctx, out, {&self}, [=](C x) { return logit(x < lo ? lo : (x > hi ? hi : x)); },
                     ew::kCostlyGrain, op);
    } else {
      apply<C, C, 1>(ctx, out, {&self}, logit, ew::kCostlyGrain, op);
    }
  });
}

#define ETNP_FLOAT_KERNEL(Name, opname) \
  void Name##_out(KernelContext& ctx, KernelArgs args) { float_unary(ctx, args, opname, Name{}); }
// With a vector routine for float32, resolved per call (a switch on a cached CPU level), so that a capped level
// applies: resolved once per process, the first call's level stayed for every later one (a test at the portable
// level left sigmoid on libm for the whole run, a bit away from the fused SiLU's vector sigmoid).
#define ETNP_FLOAT_KERNEL_VEC(Name, opname)                              \
  void Name##_out(KernelContext& ctx, KernelArgs args) {                 \
    float_unary(ctx, args, opname, Name{}, vector_f32(VectorOp::Name));  \
  }

ETNP_FLOAT_KERNEL_VEC(Hardswish, "aten::hardswish.out")
ETNP_FLOAT_KERNEL_VEC(Hardsigmoid, "aten::hardsigmoid.out")
ETNP_FLOAT_KERNEL(Acos, "aten::acos.out")
ETNP_FLOAT_KERNEL(Acosh, "aten::acosh.out")
ETNP_FLOAT_KERNEL(Asin, "aten::asin.out")
ETNP_FLOAT_KERNEL(Asinh, "aten::asinh.out")
ETNP_FLOAT_KERNEL_VEC(Atan, "aten::atan.out")
ETNP_FLOAT_KERNEL(Atanh, "aten::atanh.out")
ETNP_FLOAT_KERNEL_VEC(Cos, "aten::cos.out")
ETNP_FLOAT_KERNEL(Cosh, "aten::cosh.out")
ETNP_FLOAT_KERNEL_VEC(Erf, "aten::erf.out")
ETNP_FLOAT_KERNEL_VEC(Exp, "aten::exp.out")
ETNP_FLOAT_KERNEL_VEC(Expm1, "aten::expm1.out")
ETNP_FLOAT_KERNEL_VEC(Log, "aten::log.out")
ETNP_FLOAT_KERNEL_VEC(Log10, "aten::log10.out")
ETNP_FLOAT_KERNEL_VEC(Log1p, "aten::log1p.out")
ETNP_FLOAT_KERNEL_VEC(Log2, "aten::log2.out")
ETNP_FLOAT_KERNEL(Reciprocal, "aten::reciprocal.out")
ETNP_FLOAT_KERNEL(Rsqrt, "aten::rsqrt.out")
ETNP_FLOAT_KERNEL_VEC(Sigmoid, "aten::sigmoid.out")
ETNP_FLOAT_KERNEL_VEC(Silu, "aten::silu.out")
ETNP_FLOAT_KERNEL_VEC(Sin, "aten::sin.out")
ETNP_FLOAT_KERNEL(Sinh, "aten::sinh.out")
ETNP_FLOAT_KERNEL(Sqrt, "aten::sqrt.out")
ETNP_FLOAT_KERNEL_VEC(Tan, "aten::tan.out")
ETNP_FLOAT_KERNEL_VEC(Tanh, "aten::tanh.out")

#undef ETNP_FLOAT_KERNEL
#undef ETNP_FLOAT_KERNEL_VEC

}  // namespace

void register_unary_kernels(KernelRegistry& registry) {
  // (Tensor self, *, Tensor(a!) out) + return slot
  registry.add("aten::acos.out", 3, Acos_out);
  registry.add("aten::acosh.out", 3, Acosh_out);
  registry.add("aten::asin.out", 3, Asin_out);
  registry.add("aten::asinh.out", 3, Asinh_out);
  registry.add("aten::atan.out", 3, Atan_out);
  registry.add("aten::atanh.out", 3, Atanh_out);
  registry.add("aten::cos.out", 3, Cos_out);
  registry.add("aten::cosh.out", 3, Cosh_out);
  registry.add("aten::erf.out", 3, Erf_out);
  registry.add("aten::exp.out", 3, Exp_out);
  registry.add("aten::expm1.out", 3, Expm1_out);
  registry.add("aten::log.out", 3, Log_out);
  registry.add("aten::log10.out", 3, Log10_out);
  registry.add("aten::log1p.out", 3, Log1p_out);
  registry.add("aten::log2.out", 3, Log2_out);
  registry.add("aten::reciprocal.out", 3, Reciprocal_out);
  registry.add("aten::rsqrt.out", 3, Rsqrt_out);
  registry.add("aten::sigmoid.out", 3, Sigmoid_out);
  registry.add("aten::silu.out", 3, Silu_out);
  registry.add("aten::sin.out", 3, Sin_out);
  registry.add("aten::sinh.out", 3, Sinh_out);
  registry.add("aten::sqrt.out", 3, Sqrt_out);
  registry.add("aten::tan.out", 3, Tan_out);
  registry.add("aten::tanh.out", 3, Tanh_out);
  registry.add("aten::abs.out", 3, abs_out);
  registry.add("aten::neg.out", 3, neg_out);
  registry.add("aten::ceil.out", 3, ceil_out);
  registry.add("aten::floor.out", 3, floor_out);
  registry.add("aten::round.out", 3, round_out);
  registry.add("aten::trunc.out", 3, trunc_out);
  registry.add("aten::sign.out", 3, sign_out);
  registry.add("aten::relu.out", 3, relu_out);
  registry.add("aten::bitwise_not.out", 3, bitwise_not_out);
  registry.add("aten::isnan.out", 3, isnan_out);
  registry.add("aten::isinf.out", 3, isinf_out);
  registry.add("aten::logical_not.out", 3, logical_not_out);
  registry.add("aten::hardswish.out", 3, Hardswish_out);
  registry.add("aten::hardsigmoid.out", 3, Hardsigmoid_out);
  // (Tensor self, float a, float b, float c, float d, *, Tensor(a!) out): the fused tanh form of GELU
  registry.add("etnp::tanh_gelu.out", 7, tanh_gelu_out);
  // (Tensor self, *, str approximate='none', Tensor(a!) out)
  registry.add("aten::gelu.out", 4, gelu_out);
  // (Tensor self, Scalar alpha=1, Scalar scale=1, Scalar input_scale=1, *, Tensor(a!) out)
  registry.add("aten::elu.out", 6, elu_out);
  // (Tensor self, Scalar negative_slope=0.01, *, Tensor(a!) out)
  registry.add("aten::leaky_relu.out", 4, leaky_relu_out);
  // (Tensor self, Scalar min_val=-1, Scalar max_val=1, *, Tensor(a!) out)
  registry.add("aten::hardtanh.out", 5, hardtanh_out);
  // (Tensor self, Scalar? min=None, Scalar? max=None, *, Tensor(a!) out)
  registry.add("aten::clamp.out", 5, clamp_out);
  // (Tensor self, Tensor? min=None, Tensor? max=None, *, Tensor(a!) out)
  registry.add("aten::clamp.Tensor_out", 5, clamp_tensor_out);
  // (Tensor self, float? eps=None, *, Tensor(a!) out)
  registry.add("aten::logit.out", 4, logit_out);
}

}  // namespace etnp::kernels
