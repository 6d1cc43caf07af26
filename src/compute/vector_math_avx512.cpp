// The AVX-512 routines of vector_math.h: Sleef's 16-lane forms of the AVX2 file's 8-lane ones, the same
// operations in the same order. This file alone is compiled with -mavx512f -mavx512dq (CMakeLists.txt);
// vector_f32() calls into it only on CPUs at the avx512_vnni level.
#include <immintrin.h>
#include <sleef.h>

#include <cstdint>

#include "compute/vector_math.h"

namespace etnp::compute {
namespace {

/// Runs `f` (a functor on 16 floats) over n floats; the tail's lanes are loaded and stored under a mask, so
/// every element gets the same routine.
template <typename F>
void map16(const float* in, float* out, size_t n) {
  constexpr F f{};
  size_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, f(_mm512_loadu_ps(in + i)));
  if (i < n) {
    const auto tail = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(out + i, tail, f(_mm512_maskz_loadu_ps(tail, in + i)));
  }
}

#define ETNP_SLEEF16(Name, fn)                                \
  struct Name {                                               \
    __m512 operator()(__m512 x) const { return fn(x); }       \
  };
ETNP_SLEEF16(Exp16, Sleef_expf16_u10avx512f)
ETNP_SLEEF16(Expm116, Sleef_expm1f16_u10avx512f)
ETNP_SLEEF16(Log16, Sleef_logf16_u10avx512f)
ETNP_SLEEF16(Log1p16, Sleef_log1pf16_u10avx512f)
ETNP_SLEEF16(Log216, Sleef_log2f16_u10avx512f)
ETNP_SLEEF16(Log1016, Sleef_log10f16_u10avx512f)
ETNP_SLEEF16(Sin16, Sleef_sinf16_u10avx512f)
ETNP_SLEEF16(Cos16, Sleef_cosf16_u10avx512f)
ETNP_SLEEF16(Tan16, Sleef_tanf16_u10avx512f)
ETNP_SLEEF16(Tanh16, Sleef_tanhf16_u10avx512f)
ETNP_SLEEF16(Atan16, Sleef_atanf16_u10avx512f)
ETNP_SLEEF16(Erf16, Sleef_erff16_u10avx512f)
#undef ETNP_SLEEF16

// 1 / (1 + exp(-x)), as the scalar kernel computes it.
struct Sigmoid16 {
  __m512 operator()(__m512 x) const {
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512 e = Sleef_expf16_u10avx512f(_mm512_sub_ps(_mm512_setzero_ps(), x));
    return _mm512_div_ps(one, _mm512_add_ps(one, e));
  }
};

// x * sigmoid(x): what a sigmoid and a multiply by its input give.
struct Silu16 {
  __m512 operator()(__m512 x) const { return _mm512_mul_ps(x, Sigmoid16{}(x)); }
};

// clamp(x + 3, 0, 6): max then min with x as the second operand, which those instructions return when either
// is NaN. (The maskz forms with every lane set: GCC 12's unmasked ones read an undefined vector and warn.)
inline __m512 relu6_of_x_plus_3(__m512 x) {
  constexpr __mmask16 all = 0xFFFF;
  const __m512 t = _mm512_add_ps(x, _mm512_set1_ps(3.0f));
  return _mm512_maskz_min_ps(all, _mm512_set1_ps(6.0f), _mm512_maskz_max_ps(all, _mm512_setzero_ps(), t));
}

struct Hardswish16 {
  __m512 operator()(__m512 x) const {
    return _mm512_div_ps(_mm512_mul_ps(x, relu6_of_x_plus_3(x)), _mm512_set1_ps(6.0f));
  }
};

struct Hardsigmoid16 {
  __m512 operator()(__m512 x) const { return _mm512_div_ps(relu6_of_x_plus_3(x), _mm512_set1_ps(6.0f)); }
};

}  // namespace

VectorF32Fn vector_f32_avx512(VectorOp op) {
  switch (op) {
    case VectorOp::Exp: return map16<Exp16>;
    case VectorOp::Expm1: return map16<Expm116>;
    case VectorOp::Log: return map16<Log16>;
    case VectorOp::Log1p: return map16<Log1p16>;
    case VectorOp::Log2: return map16<Log216>;
    case VectorOp::Log10: return map16<Log1016>;
    case VectorOp::Sin: return map16<Sin16>;
    case VectorOp::Cos: return map16<Cos16>;
    case VectorOp::Tan: return map16<Tan16>;
    case VectorOp::Tanh: return map16<Tanh16>;
    case VectorOp::Atan: return map16<Atan16>;
    case VectorOp::Erf: return map16<Erf16>;
    case VectorOp::Sigmoid: return map16<Sigmoid16>;
    case VectorOp::Silu: return map16<Silu16>;
    case VectorOp::Hardswish: return map16<Hardswish16>;
    case VectorOp::Hardsigmoid: return map16<Hardsigmoid16>;
  }
  return nullptr;
}

}  // namespace etnp::compute
