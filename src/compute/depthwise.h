// fp32 depthwise convolution (one output channel per input channel) over NHWC images, weights repacked at load.
#pragma once

#include <cstddef>
#include <vector>

#include "compute/weight_cache.h"

namespace etnp::compute {

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
  /// Output rows [y0, y1) of one image `in` ([h, w, C]) into `out` (row y0 first), on the calling thread;
  /// `scratch` holds scratch_floats(w, out_w) floats.
  void run_rows(const float* in, size_t h, size_t w, size_t out_w, size_t y0, size_t y1, float out_min,
                float out_max, float* out, float* scratch) const;
  size_t scratch_floats(size_t w, size_t out_w) const;
  size_t channels() const { return c_; }
  size_t taps() const { return kh_ * kw_; }
  /// Bytes of the repacked weights and bias.
  size_t bytes() const { return (weights_.size() + bias_.size()) * sizeof(float); }
  /// Everything run() reads (geometry, weights, bias), for compute::WeightCache.
  WeightBytes content() const {
    return {bytes_of(c_),        bytes_of(kh_),       bytes_of(kw_),     bytes_of(sh_),    bytes_of(sw_),
            bytes_of(pad_top_),  bytes_of(pad_left_), bytes_of(period_), bytes_of(weights_), bytes_of(bias_)};
  }

 private:
  /// Outputs [0, left) and [right, out_w) of a row have taps outside the image.
  struct Edges {
    size_t left = 0, right = 0;
  };
  Edges edges(size_t w, size_t out_w) const;
  /// The vector (AVX2 or NEON) pixel-block kernel reads the input rows in place (channels a multiple of 8, some
  /// output with every tap inside the image); otherwise rows are copied padded into a ring.
  bool reads_in_place(size_t w, size_t out_w) const;

  size_t c_, kh_, kw_, sh_, sw_, pad_top_, pad_left_, period_;
  std::vector<float> weights_;  ///< [kh][kw][period]: tap weights repeated along the flattened row.
  std::vector<float> bias_;     ///< [period]
};

class PackedGemm;

/// A depthwise convolution and the 1x1 convolution (`pointwise`, k = C) that alone reads its output, run a band of
/// output rows at a time: each thread writes a few depthwise rows to a buffer that stays in its L2 cache and
/// multiplies them by the pointwise weights at once, so the depthwise output (megabytes in MobileNetV2's first
/// blocks) never goes out to memory and back. The same operations as running the two one after the other: the same
/// bits. `out`: [batch, out_h, out_w, pointwise.n()].
void depthwise_then_pointwise(const DepthwiseConv& depthwise, float dw_min, float dw_max, const PackedGemm& pointwise,
                              float pw_min, float pw_max, const float* in, size_t batch, size_t h, size_t w,
                              size_t out_h, size_t out_w, float* out, std::vector<float>& scratch);
/// Whether depthwise_then_pointwise is worth it for a depthwise output of out_h x out_w x `channels` (an image):
/// where it does not fit in a core's L2 cache. Below, the two run one after the other and each splits across the
/// threads its own way.
bool depthwise_then_pointwise_pays(size_t out_h, size_t out_w, size_t channels);

}  // namespace etnp::compute
