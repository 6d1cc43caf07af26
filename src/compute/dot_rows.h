// A product of few rows by weights used where they lie: c[p, j] = a_p . w_j, both operands row-major with k
// contiguous. A convolution whose output map is smaller than a GEMM tile is wide (a ResNet's last 2x2 maps):
// the packed GEMM needs its weights packed at load, and the NCHW GEMM, reading them in place, fills a quarter of
// its tiles and broadcasts each weight alone. Here each weight row is read with full-width loads and multiplied
// by every row of `a` (few, so they stay in the cache), so the weights stream from memory once, unpacked.
#pragma once

#include <cstddef>
#include <cstdint>

namespace etnp {
class ThreadPool;
}

namespace etnp::compute {

/// Constant weights of this many bytes or more are worth reading in place by the products that can (convolutions on
/// maps smaller than a GEMM tile, matrix products of few rows): below it, packing them at load costs little and the
/// packed GEMM's speed is the better bargain. Each caller adds its own rule for the shape (runs_as_dots).
constexpr int64_t kDotsMinWeightBytes = int64_t{1} << 20;

/// Where dot_rows_f32 writes: c[p * row_stride + j * col_stride], each result r becoming
/// r * scale[j] + bias[j] (a null scale or bias: 1 or 0; the multiply and the add not fused), then, with
/// `clamp`, clamped to [lo, hi] keeping NaN (x < lo ? lo : x, then x > hi ? hi : x).
struct DotRowsOut {
  float* c = nullptr;
  size_t row_stride = 0, col_stride = 1;
  const float* scale = nullptr;
  const float* bias = nullptr;
  bool clamp = false;
  float lo = 0.0f, hi = 0.0f;
};

/// c[p, j] = sum_i a[p * lda + i] * w[j * ldw + i] for p < rows, j < n, i < k, then DotRowsOut's output pass.
/// The columns are split across `pool`'s threads (null: the calling thread) when the product is large enough.
/// Each sum runs in 8 interleaved partial sums (4 twice on NEON) added in a fixed order, on every level.
void dot_rows_f32(const float* a, size_t lda, size_t rows, const float* w, size_t ldw, size_t n, size_t k,
                  const DotRowsOut& out, ThreadPool* pool);

}  // namespace etnp::compute
