// float32 transcendental functions over whole arrays with Sleef's 1-ulp routines (the accuracy of the scalar libm
// calls they replace): AVX2 ones 8 lanes at a time on x86-64, NEON (AdvSIMD) ones 4 at a time on aarch64. The
// element-wise kernels use them for contiguous float32 tensors and keep the scalar loops for every other dtype and
// layout.
#pragma once

#include <cstddef>

namespace etnp::compute {

/// Silu: x * sigmoid(x), the two operations of a decomposed SiLU in one pass (the same bits as both).
enum class VectorOp { Exp, Expm1, Log, Log1p, Log2, Log10, Sin, Cos, Tan, Tanh, Atan, Erf, Sigmoid, Silu };

/// out[i] = op(in[i]) for i < n (in and out may be the same array).
using VectorF32Fn = void (*)(const float* in, float* out, size_t n);

/// The vector routine for `op`, or nullptr where this build (no Sleef) or CPU level (below AVX2/FMA or NEON)
/// has none.
VectorF32Fn vector_f32(VectorOp op);

/// Softmax over `rows` contiguous rows of `len` floats, y = exp(x - max) / sum, with the vector exp where there
/// is one; a row holding a NaN is NaN throughout. `in` and `out` may be the same array. The portable _softmax
/// and the XNNPACK delegate's Softmax node both run it.
void softmax_rows_f32(const float* in, float* out, size_t rows, size_t len);

}  // namespace etnp::compute
