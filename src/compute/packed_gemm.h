// fp32 GEMM for constant weights: the weights (and bias) are packed once at load into 16-column panels,
// and each call runs the GEMM micro-kernel (gemm_kernel.h) straight over the row-major input with the bias and
// the output clamp fused in. Used by the XNNPACK delegate (fully-connected layers, and convolutions through
// conv_indirect.h, where it beats the Debian (2022) XNNPACK kernels) and by the portable matrix products whose
// weights are constants. gemm.h is the general GEMM for operands that change per call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "compute/large_pages.h"
#include "compute/weight_cache.h"

namespace etnp::compute {

/// How a packing reads each row of [n, k] weights that are a convolution's [Cout, Cin, KH, KW] filters: as
/// [Cin, taps] (k = Cin * taps) whose product rows go in [taps, Cin] order, i.e. the filter read as [Cout, KH, KW,
/// Cin] without a reordered copy. The taps are the filter's whole KH x KW (kh == kw == 0: `taps` of them), or the
/// `rows` x `cols` rectangle at (row0, col0) of it (rows * cols == taps): a convolution whose other taps never reach
/// its input.
struct FilterTaps {
  size_t taps = 1;
  size_t kh = 0, kw = 0;  ///< the whole filter's; 0: all `taps` taps
  size_t rows = 0, cols = 0, row0 = 0, col0 = 0;
};

class PackedGemm {
 public:
  /// `w`: the weights as [n, k] (w_is_nk, the fully-connected layout) or [k, n], row-major; `bias`: n
  /// floats or null. For [n, k] weights, optionally: `taps` reads them as convolution filters (FilterTaps), and
  /// `column_scale` (n floats) multiplies column j's weights by it.
  PackedGemm(const float* w, bool w_is_nk, size_t k, size_t n, const float* bias, const FilterTaps& taps = {},
             const float* column_scale = nullptr);

  size_t k() const { return k_; }
  size_t n() const { return n_; }
  /// Bytes of the packed weights and bias.
  size_t bytes() const { return (panels_.size() + bias_.size()) * sizeof(float); }
  /// Everything run() reads (sizes, the aligned panels and bias), for compute::WeightCache.
  WeightBytes content() const;

  /// out[r, j] = clamp(sum_i in[r * in_stride + i] * W(i, j) + bias[j], min, max) for r < rows, j < n;
  /// out rows are n floats apart. Splits the rows across the shared thread pool when worth it.
  void run(const float* in, size_t rows, size_t in_stride, float out_min, float out_max, float* out) const;
  /// run() on the calling thread alone.
  void run_on_caller(const float* in, size_t rows, size_t in_stride, float out_min, float out_max, float* out) const {
    if (rows != 0 && n_ != 0) run_rows(in, rows, in_stride, 0, panels(), out_min, out_max, out);
  }
  /// Indirect rows, on the calling thread: row r of the input is `segs` runs of `seg_k` floats, run s starting at
  /// a[r * segs + s], multiplied by the weights' rows [k_begin, k_begin + segs * seg_k) (the rows outside that
  /// range count as zero inputs), for the output columns of panels [p_begin, p_end) (16 columns a panel). A
  /// convolution points the runs into its input instead of copying patches.
  void run_indirect(const float* const* a, size_t rows, size_t segs, size_t seg_k, size_t k_begin, float out_min,
                    float out_max, float* out, size_t p_begin, size_t p_end) const;
  /// Panels of 16 output columns.
  size_t panels() const;
  /// Whether `threads` threads split a product of `rows` rows and `panels` column panels by rows, in whole
  /// micro-tiles (each thread streams every panel past its rows), rather than by panels (each streams its share
  /// of the weights).
  static bool split_rows(size_t rows, size_t panels, size_t threads);

 private:
  void run_rows(const float* in, size_t rows, size_t in_stride, size_t p_begin, size_t p_end, float out_min,
                float out_max, float* out) const;

  size_t k_ = 0, n_ = 0;
  std::vector<float, LargePageAllocator<float>> panels_;  ///< [n / 16 rounded up][k][16], zero-padded past n.
  std::vector<float> bias_;    ///< [panels * 16], zero-padded.
};

}  // namespace etnp::compute
