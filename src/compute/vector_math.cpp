#include "compute/vector_math.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/cpu_features.h"

namespace etnp::compute {

#if defined(ETNP_HAVE_SLEEF) && defined(__x86_64__)
// vector_math_avx2.cpp and vector_math_avx512.cpp, compiled for those: called only once the CPU is known to
// have them.
VectorF32Fn vector_f32_avx2(VectorOp op);
VectorF32Fn vector_f32_avx512(VectorOp op);

VectorF32Fn vector_f32(VectorOp op) {
  switch (cpu_level()) {
    case CpuLevel::avx512_vnni: return vector_f32_avx512(op);
    case CpuLevel::avx2_fma: return vector_f32_avx2(op);
    case CpuLevel::portable: break;
  }
  return nullptr;
}
#elif defined(ETNP_HAVE_SLEEF) && defined(__aarch64__)
// vector_math_neon.cpp: every AArch64 CPU has NEON, but the portable level (a test's cap) keeps the libm loops.
VectorF32Fn vector_f32_neon(VectorOp op);

VectorF32Fn vector_f32(VectorOp op) { return has_neon() ? vector_f32_neon(op) : nullptr; }
#else
VectorF32Fn vector_f32(VectorOp) { return nullptr; }
#endif

void softmax_rows_f32(const float* in, float* out, size_t rows, size_t len) {
  const VectorF32Fn vexp = vector_f32(VectorOp::Exp);  // per call (a switch), so a capped CPU level applies
  for (size_t r = 0; r < rows; ++r) {
    const float* x = in + r * len;
    float* y = out + r * len;
    // The maximum in eight lanes (a single running maximum is a chain of dependent instructions). A NaN in
    // the row is skipped here but reaches the sum below, and so every output.
    float lane_max[8];
    std::fill(lane_max, lane_max + 8, -std::numeric_limits<float>::infinity());
    size_t j = 0;
    for (; j + 8 <= len; j += 8) {
      for (size_t l = 0; l < 8; ++l) lane_max[l] = x[j + l] > lane_max[l] ? x[j + l] : lane_max[l];
    }
    float mx = *std::max_element(lane_max, lane_max + 8);
    for (; j < len; ++j) mx = x[j] > mx ? x[j] : mx;
    for (size_t i = 0; i < len; ++i) y[i] = x[i] - mx;
    if (vexp != nullptr) {
      vexp(y, y, len);
    } else {
      for (size_t i = 0; i < len; ++i) y[i] = std::exp(y[i]);
    }
    // Eight partial sums, so that the loop vectorizes.
    float part[8] = {};
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
      for (size_t l = 0; l < 8; ++l) part[l] += y[i + l];
    }
    float sum = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
    for (; i < len; ++i) sum += y[i];
    const float inv = 1.0f / sum;  // as ATen's vectorized softmax: a multiply by the reciprocal
    for (size_t k = 0; k < len; ++k) y[k] *= inv;
  }
}

}  // namespace etnp::compute

