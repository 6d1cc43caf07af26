// The float32 matrix multiply shared by mm/bmm/addmm/linear and convolution: cache-blocked, with packed
// panels, the micro-kernel of gemm_kernel.h and the output tiles split across the thread pool. Accumulates in
// float32, like ATen's CPU kernels.
#pragma once

#include <cstdint>
#include <limits>

namespace etnp {
class ThreadPool;
}

namespace etnp::compute {

/// A strided matrix view: element (i, j) is data[i * row_stride + j * col_stride].
struct GemmMatrix {
  const float* data = nullptr;
  int64_t row_stride = 0;
  int64_t col_stride = 0;
};

/// aten::clamp's compares, which keep a NaN: x < lo ? lo : x, then > hi ? hi : x.
inline float clamp_keep_nan(float x, float lo, float hi) {
  const float y = x < lo ? lo : x;
  return y > hi ? hi : y;
}

/// Whether [lo, hi] clamps anything (an infinite bound clamps nothing).
inline bool clamps_anything(float lo, float hi) {
  return lo != -std::numeric_limits<float>::infinity() || hi != std::numeric_limits<float>::infinity();
}

/// What is done to the product on its way out: C = clamp(alpha * (A B) * scale(i, j) + beta * bias(i, j), min,
/// max). A scale or bias of nullptr is absent (and never read); broadcasting uses zero strides (per column:
/// row_stride 0, col_stride 1; per row, a convolution's channel: row_stride 1, col_stride 0). The clamp keeps
/// NaN, as aten::clamp does (x < min ? min : x, then x > max ? max : x); infinite bounds clamp nothing.
struct GemmEpilogue {
  float alpha = 1.0f;
  float beta = 1.0f;
  GemmMatrix bias;
  GemmMatrix scale;
  float min = -std::numeric_limits<float>::infinity();
  float max = std::numeric_limits<float>::infinity();
  bool clamps() const { return clamps_anything(min, max); }
};

/// Below this many multiply-adds (m * n * k; tens of microseconds) gemm_f32 runs on the calling thread: splitting
/// costs more than it saves.
inline constexpr double kGemmParallelMacs = 4e6;

/// C[m x n] = alpha * A[m x k] * B[k x n] (+ beta * bias). C may have any strides (its elements must not
/// overlap A, B or bias). With `pool` (not nullptr) the work is split across its threads; callers already
/// inside a parallel region must pass nullptr.
void gemm_f32(int64_t m, int64_t n, int64_t k, GemmMatrix a, GemmMatrix b, float* c, int64_t c_row_stride,
              int64_t c_col_stride, const GemmEpilogue& epilogue, ThreadPool* pool);

/// The micro-kernel in use ("avx2-fma", "neon" or "generic"), for tests and benchmarks.
const char* gemm_f32_kernel_name();

}  // namespace etnp::compute
