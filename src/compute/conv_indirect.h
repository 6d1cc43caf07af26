// fp32 convolution with one group as an indirect GEMM over packed weights (packed_gemm.h), and the transposed
// convolution with one group as a GEMM whose rows are scattered onto the output.
#pragma once

#include <cstddef>
#include <vector>

#include "compute/packed_gemm.h"

namespace etnp::compute {

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
  std::vector<float> zeros;  ///< one pixel of zeros, for the taps of dead columns between live ones
};

/// A convolution with one group through the packed GEMM, reading each output pixel's patch where it lies in
/// zero-padded copies of the input rows (an indirect GEMM: no im2col copy): in [batch, H, W, C] -> out [batch,
/// OH, OW, gemm.n()], where `gemm` holds the [Cout, KH, KW, C] filter as [n, k] weights. Each thread of the
/// shared pool pads its rows and multiplies its own share of the output pixels.
void conv2d_indirect(const PackedGemm& gemm, const Conv2dGeometry& g, size_t batch, const float* in, float out_min,
                     float out_max, float* out, Conv2dScratch& scratch);

/// A transposed convolution with one group over NHWC images: in [batch, in_h, in_w, channels] -> out [batch, out_h,
/// out_w, Cout], out[oy, ox] = bias + the sum over input pixels (iy, ix) and taps (ky, kx) with oy = iy * stride_h +
/// ky * dilation_h - pad_top (and so for x) of in[iy, ix] x W[ky, kx]. `gemm` holds the weights as [k, n] with
/// k = channels and n = KH * KW * Cout ([ky][kx][oc] columns) and no bias. Rows of input pixels go through the GEMM
/// in chunks (their products stay in the cache), then each product row is added onto the outputs its taps reach;
/// `bias` (Cout floats or null) starts every output, the clamp ends it. On the calling thread; `scratch` is kept.
void deconv2d_gemm(const PackedGemm& gemm, const Conv2dGeometry& g, size_t batch, const float* in, const float* bias,
                   float out_min, float out_max, float* out, std::vector<float>& scratch);

}  // namespace etnp::compute
