// fp32 GEMM for constant weights: the weights (and bias) are packed once at load into 16-column panels,
// and each call runs an AVX2/FMA 6x16 micro-kernel straight over the row-major input with the bias and the
// output clamp fused in. Used by the XNNPACK delegate (fully-connected layers, 1x1 convolutions and the other
// single-group ones as an indirect GEMM, where it beats the Debian (2022) XNNPACK kernels) and by the portable
// matrix products whose weights are constants. gemm.h is the general kernel for operands that change per call.
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>
#include <vector>

namespace etnp::compute {

/// Below this many multiply-adds (or elements moved) an operator is not split across threads: waking the
/// pool's workers takes a few microseconds, about what this much work takes on one core.
inline constexpr size_t kParallelWork = size_t{1} << 18;

class PackedGemm {
 public:
  static constexpr size_t kPanel = 16;

  /// `w`: the weights as [n, k] (w_is_nk, the fully-connected layout) or [k, n], row-major; `bias`: n
  /// floats or null.
  PackedGemm(const float* w, bool w_is_nk, size_t k, size_t n, const float* bias);

  size_t k() const { return k_; }
  size_t n() const { return n_; }
  /// Bytes of the packed weights and bias.
  size_t bytes() const { return (panels_.size() + bias_.size()) * sizeof(float); }

  /// out[r, j] = clamp(sum_i in[r * in_stride + i] * W(i, j) + bias[j], min, max) for r < rows, j < n;
  /// out rows are n floats apart. Splits the rows across the shared thread pool when worth it.
  void run(const float* in, size_t rows, size_t in_stride, float out_min, float out_max, float* out) const;
  /// Indirect rows, on the calling thread: row r of the input is `segs` runs of `seg_k` floats (segs * seg_k ==
  /// k()), run s starting at a[r * segs + s]. A convolution points them into its input instead of copying patches.
  void run_indirect(const float* const* a, size_t rows, size_t segs, size_t seg_k, float out_min, float out_max,
                    float* out) const;

 private:
  void run_rows(const float* in, size_t rows, size_t in_stride, size_t p_begin, size_t p_end, float out_min,
                float out_max, float* out) const;

  size_t k_ = 0, n_ = 0;
  std::vector<float> panels_;  ///< [n / 16 rounded up][k][16], zero-padded past n.
  std::vector<float> bias_;    ///< [panels * 16], zero-padded.
};

/// Geometry of a 2-D convolution over NHWC images.
struct Conv2dGeometry {
  size_t in_h = 0, in_w = 0, channels = 0;
  size_t kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1;
  size_t pad_top = 0, pad_left = 0;
  size_t out_h = 0, out_w = 0;
  size_t patch() const { return kernel_h * kernel_w * channels; }
};

/// What conv2d_indirect keeps between calls: padded input rows and the patch pointers into them.
struct Conv2dScratch {
  std::vector<float> rows;
  std::vector<const float*> patches;
};

/// A convolution with one group through the packed GEMM, reading each output pixel's patch where it lies in
/// zero-padded copies of the input rows (an indirect GEMM: no im2col copy): in [batch, H, W, C] -> out [batch,
/// OH, OW, gemm.n()], where `gemm` holds the [Cout, KH, KW, C] filter as [n, k] weights. Each thread of the
/// shared pool pads its rows and multiplies its own share of the output pixels.
void conv2d_indirect(const PackedGemm& gemm, const Conv2dGeometry& g, size_t batch, const float* in, float out_min,
                     float out_max, float* out, Conv2dScratch& scratch);

/// Runs the batch * out_h output rows of a convolution in one contiguous chunk per thread of the shared pool
/// (on the calling thread when `work`, in multiply-adds, is below what waking the pool costs):
/// rows(chunk, image, y0, y1) for each image's part of each chunk. `chunks` (conv_row_chunks) is how many
/// scratch slots the caller keeps, one per chunk.
size_t conv_row_chunks(size_t batch, size_t out_h);
void for_each_conv_row_chunk(size_t batch, size_t out_h, size_t chunks, size_t work,
                             const std::function<void(size_t chunk, size_t image, size_t y0, size_t y1)>& rows);

/// One padded input row of a convolution: `padded` elements holding image row `src` (w pixels of c channels,
/// nullptr for a row outside the image) from pixel column `pad_left`, clipped to the `span` columns the taps
/// reach, and `fill` (the value that means zero) everywhere else.
template <typename T>
void load_padded_row(T* row, size_t padded, const T* src, size_t w, size_t c, size_t span, size_t pad_left, T fill) {
  if (src == nullptr) {
    std::fill(row, row + padded, fill);
    return;
  }
  const size_t left = std::min(pad_left, span);
  const size_t cols = std::min(w, span - left);
  std::fill(row, row + left * c, fill);
  std::copy(src, src + cols * c, row + left * c);
  std::fill(row + (left + cols) * c, row + padded, fill);
}

/// A depthwise convolution (dilation 1, one output per channel) over NHWC rows flattened to W*C floats. With C a
/// multiple of 8 it runs blocks of output pixels x 8 channels, any stride. Otherwise (stride 1 only) each kernel
/// tap is a shift by C floats, so vectors run along (x, c) whatever C is (the weights repeat with period
/// lcm(C, 8)): few-channel images (3-channel filters) stay fully vectorized, where kernels vectorized over
/// channels waste most lanes.
class DepthwiseConv {
 public:
  /// `filter`: [kh, kw, C] (XNNPACK's depthwise layout); `bias`: C floats or null.
  DepthwiseConv(const float* filter, const float* bias, size_t channels, size_t kernel_h, size_t kernel_w,
                size_t stride_h, size_t stride_w, size_t pad_top, size_t pad_left);
  /// False when the kernel is too tall, or (C not a multiple of 8) the stride is not 1 or the weight pattern
  /// would be too large (C with a large odd factor).
  static bool supported(size_t channels, size_t kernel_h, size_t stride_h, size_t stride_w);

  /// in [batch, h, w, C] -> out [batch, out_h, out_w, C]; out_w = (w + pads - kw) / stride + 1 (given by the
  /// caller's shape propagation, as are out_h and the pads implied by it). `scratch` keeps padded rows between calls.
  void run(const float* in, size_t batch, size_t h, size_t w, size_t out_h, size_t out_w, float out_min,
           float out_max, float* out, std::vector<float>& scratch) const;
  /// Bytes of the repacked weights and bias.
  size_t bytes() const { return (weights_.size() + bias_.size()) * sizeof(float); }

 private:
  /// Outputs [0, left) and [right, out_w) of a row have taps outside the image.
  struct Edges {
    size_t left = 0, right = 0;
  };
  Edges edges(size_t w, size_t out_w) const;
  /// The AVX2 pixel-block kernel reads the input rows in place (channels a multiple of 8, some output with
  /// every tap inside the image); otherwise rows are copied padded into a ring.
  bool reads_in_place(size_t w, size_t out_w) const;
  size_t scratch_floats(size_t w, size_t out_w) const;
  void run_rows(const float* in, size_t h, size_t w, size_t out_w, size_t y0, size_t y1, float out_min,
                float out_max, float* out, float* rows) const;

  size_t c_, kh_, kw_, sh_, sw_, pad_top_, pad_left_, period_;
  std::vector<float> weights_;  ///< [kh][kw][period]: tap weights repeated along the flattened row.
  std::vector<float> bias_;     ///< [period]
};

}  // namespace etnp::compute
