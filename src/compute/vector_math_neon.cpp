// The NEON (AdvSIMD) routines of vector_math.h, Sleef's 1-ulp ones four lanes at a time. Built on aarch64 only
// (CMakeLists.txt); NEON is the AArch64 baseline, so no target flags, and vector_f32() calls into it unless the
// portable level is forced (core/cpu_features.h).
#include <arm_neon.h>
#include <sleef.h>

#include <cstring>

#include "compute/vector_math.h"

namespace etnp::compute {
namespace {

/// Runs `f` (a functor on 4 floats) over n floats; the tail goes through a padded block so every element
/// gets the same routine.
template <typename F>
void map4(const float* in, float* out, size_t n) {
  constexpr F f{};
  size_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(out + i, f(vld1q_f32(in + i)));
  if (i < n) {
    float block[4] = {};
    std::memcpy(block, in + i, (n - i) * sizeof(float));
    vst1q_f32(block, f(vld1q_f32(block)));
    std::memcpy(out + i, block, (n - i) * sizeof(float));
  }
}

#define ETNP_SLEEF4(Name, fn)                                       \
  struct Name {                                                     \
    float32x4_t operator()(float32x4_t x) const { return fn(x); }   \
  };
ETNP_SLEEF4(Exp4, Sleef_expf4_u10advsimd)
ETNP_SLEEF4(Expm14, Sleef_expm1f4_u10advsimd)
ETNP_SLEEF4(Log4, Sleef_logf4_u10advsimd)
ETNP_SLEEF4(Log1p4, Sleef_log1pf4_u10advsimd)
ETNP_SLEEF4(Log24, Sleef_log2f4_u10advsimd)
ETNP_SLEEF4(Log104, Sleef_log10f4_u10advsimd)
ETNP_SLEEF4(Sin4, Sleef_sinf4_u10advsimd)
ETNP_SLEEF4(Cos4, Sleef_cosf4_u10advsimd)
ETNP_SLEEF4(Tan4, Sleef_tanf4_u10advsimd)
ETNP_SLEEF4(Tanh4, Sleef_tanhf4_u10advsimd)
ETNP_SLEEF4(Atan4, Sleef_atanf4_u10advsimd)
ETNP_SLEEF4(Erf4, Sleef_erff4_u10advsimd)
#undef ETNP_SLEEF4

// 1 / (1 + exp(-x)), as the scalar kernel computes it.
struct Sigmoid4 {
  float32x4_t operator()(float32x4_t x) const {
    const float32x4_t one = vdupq_n_f32(1.0f);
    return vdivq_f32(one, vaddq_f32(one, Sleef_expf4_u10advsimd(vnegq_f32(x))));
  }
};

// x * sigmoid(x): what a sigmoid and a multiply by its input give.
struct Silu4 {
  float32x4_t operator()(float32x4_t x) const { return vmulq_f32(x, Sigmoid4{}(x)); }
};

// clamp(x + 3, 0, 6): the compare-and-select form keeps a NaN x + 3 (vmaxq/vminq would too; vmaxnmq would not).
inline float32x4_t relu6_of_x_plus_3(float32x4_t x) {
  const float32x4_t t = vaddq_f32(x, vdupq_n_f32(3.0f));
  const float32x4_t zero = vdupq_n_f32(0.0f), six = vdupq_n_f32(6.0f);
  const float32x4_t low = vbslq_f32(vcltq_f32(t, zero), zero, t);
  return vbslq_f32(vcgtq_f32(low, six), six, low);
}

struct Hardswish4 {
  float32x4_t operator()(float32x4_t x) const {
    return vdivq_f32(vmulq_f32(x, relu6_of_x_plus_3(x)), vdupq_n_f32(6.0f));
  }
};

struct Hardsigmoid4 {
  float32x4_t operator()(float32x4_t x) const { return vdivq_f32(relu6_of_x_plus_3(x), vdupq_n_f32(6.0f)); }
};

}  // namespace

VectorF32Fn vector_f32_neon(VectorOp op) {
  switch (op) {
    case VectorOp::Exp: return map4<Exp4>;
    case VectorOp::Expm1: return map4<Expm14>;
    case VectorOp::Log: return map4<Log4>;
    case VectorOp::Log1p: return map4<Log1p4>;
    case VectorOp::Log2: return map4<Log24>;
    case VectorOp::Log10: return map4<Log104>;
    case VectorOp::Sin: return map4<Sin4>;
    case VectorOp::Cos: return map4<Cos4>;
    case VectorOp::Tan: return map4<Tan4>;
    case VectorOp::Tanh: return map4<Tanh4>;
    case VectorOp::Atan: return map4<Atan4>;
    case VectorOp::Erf: return map4<Erf4>;
    case VectorOp::Sigmoid: return map4<Sigmoid4>;
    case VectorOp::Silu: return map4<Silu4>;
    case VectorOp::Hardswish: return map4<Hardswish4>;
    case VectorOp::Hardsigmoid: return map4<Hardsigmoid4>;
  }
  return nullptr;
}

}  // namespace etnp::compute
