// float32 transcendental functions over whole arrays with Sleef's 1-ulp routines (the accuracy of the scalar libm
// calls they replace): AVX2 ones 8 lanes at a time on x86-64, NEON (AdvSIMD) ones 4 at a time on aarch64. The
// element-wise kernels use them for contiguous float32 tensors and keep the scalar loops for every other dtype and
// layout. Also pow3_f32, a cube with libm's bits that calls libm only where it must.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace etnp::compute {

/// Silu: x * sigmoid(x), the two operations of a decomposed SiLU in one pass (the same bits as both).
/// Hardswish: x * clamp(x + 3, 0, 6) / 6 and Hardsigmoid: clamp(x + 3, 0, 6) / 6, each step rounded as ATen's
/// kernels (and the exporters' decompositions of them) round it; NaN stays NaN.
enum class VectorOp { Exp, Expm1, Log, Log1p, Log2, Log10, Sin, Cos, Tan, Tanh, Atan, Erf, Sigmoid, Silu, Hardswish,
                      Hardsigmoid };

/// out[i] = op(in[i]) for i < n (in and out may be the same array).
using VectorF32Fn = void (*)(const float* in, float* out, size_t n);

/// The vector routine for `op`, or nullptr where this build (no Sleef) or CPU level (below AVX2/FMA or NEON)
/// has none.
VectorF32Fn vector_f32(VectorOp op);

/// Softmax over `rows` contiguous rows of `len` floats, y = exp(x - max) / sum, with the vector exp where there
/// is one; a row holding a NaN is NaN throughout. `in` and `out` may be the same array. The portable _softmax
/// and the XNNPACK delegate's Softmax node both run it.
void softmax_rows_f32(const float* in, float* out, size_t rows, size_t len);

/// std::pow(x, 3.0f), bit for bit, without the libm call where that is provably not needed. x * x is exact in
/// double and one more multiply rounds once (to 53 bits), so rounding that to float gives the correctly rounded
/// cube unless the double lands near the midpoint of two floats. libm's powf is correctly rounded everywhere
/// but near those midpoints: over every float input (glibc 2.36, with and without FMA), each result that
/// differs from the correctly rounded cube lies within 2^-9.2 float ulp of a midpoint. Within 2^-7 ulp, and
/// outside the normal float range (zero aside), this asks powf itself; about 1.5% of inputs do.
inline float pow3_f32(float x) {
  const double d = x;
  const double cube = d * d * d;
  const uint64_t bits = std::bit_cast<uint64_t>(cube);
  const uint64_t biased_exponent = (bits >> 52) & 0x7ff;
  // The 29 bits a double has below a float's last one: 1 << 28 is the midpoint.
  const int64_t below = static_cast<int64_t>(bits & 0x1FFFFFFFu) - (int64_t{1} << 28);
  const bool normal_float = biased_exponent >= 1023 - 126 && biased_exponent <= 1023 + 127;
  if ((normal_float && (below >= (int64_t{1} << 22) || below <= -(int64_t{1} << 22))) || cube == 0.0) {
    return static_cast<float>(cube);
  }
  return std::pow(x, 3.0f);
}

}  // namespace etnp::compute
