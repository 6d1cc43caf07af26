#include "kernels/vector_math.h"

#if defined(ETNP_HAVE_SLEEF) && defined(__x86_64__)
#define ETNP_VECTOR_MATH 1
#endif

namespace etnp::kernels {

#ifdef ETNP_VECTOR_MATH
// vector_math_avx2.cpp, compiled for AVX2/FMA: called only once the CPU is known to have them.
VectorF32Fn vector_f32_avx2(VectorOp op);

VectorF32Fn vector_f32(VectorOp op) {
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return avx2 ? vector_f32_avx2(op) : nullptr;
}
#else
VectorF32Fn vector_f32(VectorOp) { return nullptr; }
#endif

}  // namespace etnp::kernels

