#include "compute/conv_indirect.h"

#include <algorithm>

#include "compute/conv_rows.h"
#include "compute/gemm_kernel.h"
#include "compute/parallel.h"
#include "etnp/threadpool.h"

namespace etnp::compute {
namespace {

constexpr size_t kMr = kGemmTileRows;

}  // namespace

void conv2d_indirect(const PackedGemm& gemm, const Conv2dGeometry& g, size_t batch, const float* in, float out_min,
                     float out_max, float* out, Conv2dScratch& scratch) {
  const size_t c = g.channels, n = gemm.n(), pixels = g.out_h * g.out_w;
  const size_t rows_total = batch * pixels;
  if (rows_total == 0 || n == 0) return;
  // The GEMM reads each output pixel's patch where it lies in zero-padded copies of the input rows: one
  // segment per kernel row (its kernel_w * C floats are contiguous there) or, dilated along the width, one
  // per tap. Nothing is copied per tap (im2col copied every input pixel kernel_h * kernel_w times).
  const bool row_segments = g.dilation_w == 1;
  const size_t segs = row_segments ? g.kernel_h : g.kernel_h * g.kernel_w;
  const size_t seg_k = row_segments ? g.kernel_w * c : c;
  const size_t span = (g.out_w - 1) * g.stride_w + (g.kernel_w - 1) * g.dilation_w + 1;  // padded columns used
  const size_t row_floats = span * c;

  // Each thread takes a contiguous share of the output pixels (whole micro-tiles) and pads its own input rows,
  // in one parallel region.
  const size_t tiles = (rows_total + kMr - 1) / kMr;
  ThreadPool& pool = ThreadPool::current();
  const size_t chunks = rows_total * gemm.k() * n >= kParallelWork ? std::min(pool.num_threads(), tiles) : 1;
  // Pixel blocks whose padded input rows take about 128 KiB: they stay in L2 while every panel passes them.
  const size_t out_rows = std::max<size_t>(1, (128 * 1024 / sizeof(float)) / (row_floats * g.stride_h + 1));
  size_t block = std::max(kMr, out_rows * g.out_w);
  block = std::min(block, (tiles + chunks - 1) / chunks * kMr);
  block = (block + kMr - 1) / kMr * kMr;
  const size_t max_out_rows = (block - 1) / g.out_w + 2;  // a block may start and end mid-row
  const size_t band_rows = (max_out_rows - 1) * g.stride_h + (g.kernel_h - 1) * g.dilation_h + 1;
  scratch.rows.resize(chunks * band_rows * row_floats);
  scratch.patches.resize(chunks * block * segs);

  auto run_chunk = [&](size_t chunk) {
    const size_t r_begin = tiles * chunk / chunks * kMr;
    const size_t r_end = std::min(rows_total, tiles * (chunk + 1) / chunks * kMr);
    float* band = scratch.rows.data() + chunk * band_rows * row_floats;
    const float** patches = scratch.patches.data() + chunk * block * segs;
    for (size_t r0 = r_begin; r0 < r_end;) {
      const size_t image = r0 / pixels, p0 = r0 % pixels;
      const size_t rows = std::min({block, r_end - r0, pixels - p0});  // a block stays within one image
      const size_t oy0 = p0 / g.out_w, oy1 = (p0 + rows - 1) / g.out_w;
      const float* image_in = in + image * g.in_h * g.in_w * c;
      const size_t used_rows = (oy1 - oy0) * g.stride_h + (g.kernel_h - 1) * g.dilation_h + 1;
      for (size_t j = 0; j < used_rows; ++j) {
        const size_t iy = oy0 * g.stride_h + j - g.pad_top;  // unsigned wrap-around: a padding row
        load_padded_row(band + j * row_floats, row_floats, iy < g.in_h ? image_in + iy * g.in_w * c : nullptr,
                        g.in_w, c, span, g.pad_left, 0.0f);
      }
      size_t oy = oy0, ox = p0 % g.out_w;
      for (size_t i = 0; i < rows; ++i) {
        const float* at = band + (oy - oy0) * g.stride_h * row_floats + ox * g.stride_w * c;
        const float** patch = patches + i * segs;
        for (size_t ky = 0; ky < g.kernel_h; ++ky) {
          const float* row = at + ky * g.dilation_h * row_floats;
          if (row_segments) {
            patch[ky] = row;
          } else {
            for (size_t kx = 0; kx < g.kernel_w; ++kx) patch[ky * g.kernel_w + kx] = row + kx * g.dilation_w * c;
          }
        }
        if (++ox == g.out_w) {
          ox = 0;
          ++oy;
        }
      }
      gemm.run_indirect(patches, rows, segs, seg_k, out_min, out_max, out + r0 * n);
      r0 += rows;
    }
  };
  if (chunks == 1) {
    run_chunk(0);
    return;
  }
  pool.parallel_for(chunks, 1, [&](size_t c0, size_t c1) {
    for (size_t i = c0; i < c1; ++i) run_chunk(i);
  });
}

}  // namespace etnp::compute
