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

}  // namespace etnp::compute
