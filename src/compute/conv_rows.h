// The rows of a convolution over NHWC images: an input row copied zero-padded, and the output rows split
// across the shared thread pool. The depthwise convolutions (fp32 in depthwise.h, quantized in the XNNPACK
// delegate) use both; the indirect convolution (conv_indirect.h) pads its input rows the same way.
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>

namespace etnp::compute {

/// Runs the batch * out_h output rows of a convolution in one contiguous chunk per thread of the shared pool
/// (on the calling thread when `work`, in multiply-adds, is below what waking the pool costs):
/// rows(chunk, image, y0, y1) for each image's part of each chunk. `chunks` (conv_row_chunks) is how many
/// scratch slots the caller keeps, one per chunk.
size_t conv_row_chunks(size_t batch, size_t out_h);
/// What one depthwise multiply-add costs in GEMM ones (the unit of `work`): it loads its own input and weight
/// where a GEMM reuses each load across a register tile (measured: ~10 against ~60 GMAC/s on one core).
inline constexpr size_t kDepthwiseCost = 6;
void for_each_conv_row_chunk(size_t batch, size_t out_h, size_t chunks, size_t work,
                             const std::function<void(size_t chunk, size_t image, size_t y0, size_t y1)>& rows);

/// The kernel taps of one spatial axis that read the input for some output position, as [first, last] (first >
/// last when none does): tap t reads positions o * stride + t * dilation - pad for o < out. Taps between the two
/// that read only padding (a stride wider than the input) stay in the range. A dilated convolution over a small
/// image (DeepLab's atrous pyramid: 3x3 taps 12 to 36 apart over a 4x4 map) has only its centre tap live; the
/// convolutions multiply the live taps' rectangle alone, since the others' products are zeros.
struct TapRange {
  size_t first = 1, last = 0;
  bool empty() const { return first > last; }
  size_t count() const { return empty() ? 0 : last - first + 1; }
};

inline TapRange live_taps(size_t in, size_t out, size_t kernel, size_t stride, size_t dilation, size_t pad) {
  TapRange r;
  for (size_t t = 0; t < kernel; ++t) {
    const size_t reach = t * dilation;
    // The first output position whose input index o * stride + reach - pad is not negative.
    const size_t o = reach >= pad ? 0 : (pad - reach + stride - 1) / stride;
    if (o >= out || o * stride + reach - pad >= in) continue;
    if (r.empty()) r.first = t;
    r.last = t;
  }
  return r;
}

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

}  // namespace etnp::compute
