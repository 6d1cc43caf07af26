// The AVX2 routines of vector_math.h. This file alone is compiled with -mavx2 -mfma (CMakeLists.txt);
// vector_f32() calls into it only on CPUs that have both.
#include <immintrin.h>
#include <sleef.h>

#include <cstring>

#include "compute/vector_math.h"

namespace etnp::compute {
namespace {

/// Runs `f` (a functor on 8 floats) over n floats; the tail goes through a padded block so every element
/// gets the same routine.
template <typename F>
void map8(const float* in, float* out, size_t n) {
  constexpr F f{};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, f(_mm256_loadu_ps(in + i)));
  if (i < n) {
    float block[8] = {};
    std::memcpy(block, in + i, (n - i) * sizeof(float));
    _mm256_storeu_ps(block, f(_mm256_loadu_ps(block)));
    std::memcpy(out + i, block, (n - i) * sizeof(float));
  }
}

#define ETNP_SLEEF8(Name, fn)                                 \
  struct Name {                                               \
    __m256 operator()(__m256 x) const { return fn(x); }       \
  };
ETNP_SLEEF8(Exp8, Sleef_expf8_u10avx2)
ETNP_SLEEF8(Expm18, Sleef_expm1f8_u10avx2)
ETNP_SLEEF8(Log8, Sleef_logf8_u10avx2)
ETNP_SLEEF8(Log1p8, Sleef_log1pf8_u10avx2)
ETNP_SLEEF8(Log28, Sleef_log2f8_u10avx2)
ETNP_SLEEF8(Log108, Sleef_log10f8_u10avx2)
ETNP_SLEEF8(Sin8, Sleef_sinf8_u10avx2)
ETNP_SLEEF8(Cos8, Sleef_cosf8_u10avx2)
ETNP_SLEEF8(Tan8, Sleef_tanf8_u10avx2)
ETNP_SLEEF8(Tanh8, Sleef_tanhf8_u10avx2)
ETNP_SLEEF8(Atan8, Sleef_atanf8_u10avx2)
ETNP_SLEEF8(Erf8, Sleef_erff8_u10avx2)
#undef ETNP_SLEEF8

// 1 / (1 + exp(-x)), as the scalar kernel computes it.
struct Sigmoid8 {
  __m256 operator()(__m256 x) const {
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 e = Sleef_expf8_u10avx2(_mm256_sub_ps(_mm256_setzero_ps(), x));
    return _mm256_div_ps(one, _mm256_add_ps(one, e));
  }
};

// x * sigmoid(x): what a sigmoid and a multiply by its input give.
struct Silu8 {
  __m256 operator()(__m256 x) const { return _mm256_mul_ps(x, Sigmoid8{}(x)); }
};

// clamp(x + 3, 0, 6): max then min with x as the second operand, which those instructions return when either
// is NaN.
inline __m256 relu6_of_x_plus_3(__m256 x) {
  const __m256 t = _mm256_add_ps(x, _mm256_set1_ps(3.0f));
  return _mm256_min_ps(_mm256_set1_ps(6.0f), _mm256_max_ps(_mm256_setzero_ps(), t));
}

struct Hardswish8 {
  __m256 operator()(__m256 x) const {
    return _mm256_div_ps(_mm256_mul_ps(x, relu6_of_x_plus_3(x)), _mm256_set1_ps(6.0f));
  }
};

struct Hardsigmoid8 {
  __m256 operator()(__m256 x) const { return _mm256_div_ps(relu6_of_x_plus_3(x), _mm256_set1_ps(6.0f)); }
};

}  // namespace

VectorF32Fn vector_f32_avx2(VectorOp op) {
  switch (op) {
    case VectorOp::Exp: return map8<Exp8>;
    case VectorOp::Expm1: return map8<Expm18>;
    case VectorOp::Log: return map8<Log8>;
    case VectorOp::Log1p: return map8<Log1p8>;
    case VectorOp::Log2: return map8<Log28>;
    case VectorOp::Log10: return map8<Log108>;
    case VectorOp::Sin: return map8<Sin8>;
    case VectorOp::Cos: return map8<Cos8>;
    case VectorOp::Tan: return map8<Tan8>;
    case VectorOp::Tanh: return map8<Tanh8>;
    case VectorOp::Atan: return map8<Atan8>;
    case VectorOp::Erf: return map8<Erf8>;
    case VectorOp::Sigmoid: return map8<Sigmoid8>;
    case VectorOp::Silu: return map8<Silu8>;
    case VectorOp::Hardswish: return map8<Hardswish8>;
    case VectorOp::Hardsigmoid: return map8<Hardsigmoid8>;
  }
  return nullptr;
}

}  // namespace etnp::compute
