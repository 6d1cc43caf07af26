#include "compute/conv_indirect.h"

#include <algorithm>
#include <cstddef>
#include <limits>

#include "compute/conv_rows.h"
#include "compute/copy_util.h"
#include "compute/gemm.h"
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
  // Only the live taps are multiplied (conv_rows.h: the others read nothing but padding, so the sums lose only
  // additions of zero): as a convolution over their rectangle, its padding moved (negative where the rectangle
  // starts inside the image).
  TapRange ty = live_taps(g.in_h, g.out_h, g.kernel_h, g.stride_h, g.dilation_h, g.pad_top);
  TapRange tx = live_taps(g.in_w, g.out_w, g.kernel_w, g.stride_w, g.dilation_w, g.pad_left);
  const bool none = ty.empty() || tx.empty();  // every output is the bias
  if (none) ty = tx = TapRange{0, 0};
  const size_t kh = ty.count(), kw = tx.count();
  const auto pad_top = static_cast<ptrdiff_t>(g.pad_top) - static_cast<ptrdiff_t>(ty.first * g.dilation_h);
  const auto pad_left = static_cast<ptrdiff_t>(g.pad_left) - static_cast<ptrdiff_t>(tx.first * g.dilation_w);
  // The GEMM reads each output pixel's patch where it lies in zero-padded copies of the input rows: one
  // segment per kernel row (its kernel_w * C floats are contiguous there) or, dilated along the width or with
  // only some columns live, one per tap, from the first live tap to the last in raster order (those of dead
  // columns in between read a row of zeros). Nothing is copied per tap (im2col copied every input pixel
  // kernel_h * kernel_w times).
  const bool row_segments = g.dilation_w == 1 && kw == g.kernel_w;
  const size_t first_tap = ty.first * g.kernel_w + tx.first;
  const size_t segs = none ? 0 : row_segments ? kh : (ty.last * g.kernel_w + tx.last) - first_tap + 1;
  const size_t seg_k = row_segments ? g.kernel_w * c : c;
  const size_t k_begin = row_segments ? ty.first * g.kernel_w * c : first_tap * c;
  const size_t span = (g.out_w - 1) * g.stride_w + (kw - 1) * g.dilation_w + 1;  // padded columns used
  // A rectangle starting inside the image: its rows begin -pad_left pixels in.
  const size_t skip = pad_left < 0 ? std::min<size_t>(static_cast<size_t>(-pad_left), g.in_w) : 0;
  const size_t row_floats = span * c;

  // Each thread takes a contiguous share of the output pixels (whole micro-tiles) or, for a few pixels (a
  // network's last maps: 2x2 pixels of 512 channels read 9 MiB of 3x3 weights), of the output channels, and pads
  // its own input rows, in one parallel region.
  const size_t tiles = (rows_total + kMr - 1) / kMr, panels = gemm.panels();
  ThreadPool& pool = ThreadPool::current();
  const size_t threads = rows_total * segs * seg_k * n >= kParallelWork ? pool.num_threads() : 1;
  const bool by_rows = PackedGemm::split_rows(rows_total, panels, threads);
  const size_t chunks = std::max<size_t>(1, std::min(threads, by_rows ? tiles : panels));
  // Pixel blocks whose padded input rows take about 128 KiB: they stay in L2 while every panel passes them.
  const size_t out_rows = std::max<size_t>(1, (128 * 1024 / sizeof(float)) / (row_floats * g.stride_h + 1));
  size_t block = std::max(kMr, out_rows * g.out_w);
  if (by_rows) block = std::min(block, (tiles + chunks - 1) / chunks * kMr);
  block = (block + kMr - 1) / kMr * kMr;
  const size_t max_out_rows = (block - 1) / g.out_w + 2;  // a block may start and end mid-row
  const size_t band_rows = none ? 0 : (max_out_rows - 1) * g.stride_h + (kh - 1) * g.dilation_h + 1;
  scratch.rows.resize(chunks * band_rows * row_floats);
  scratch.patches.resize(chunks * block * segs);
  if (!row_segments && kw < g.kernel_w) scratch.zeros.assign(c, 0.0f);
  const float* zeros = scratch.zeros.data();

  auto run_chunk = [&](size_t chunk) {
    const size_t r_begin = by_rows ? tiles * chunk / chunks * kMr : 0;
    const size_t r_end = by_rows ? std::min(rows_total, tiles * (chunk + 1) / chunks * kMr) : rows_total;
    const size_t p_begin = by_rows ? 0 : panels * chunk / chunks;
    const size_t p_end = by_rows ? panels : panels * (chunk + 1) / chunks;
    float* band = scratch.rows.data() + chunk * band_rows * row_floats;
    const float** patches = scratch.patches.data() + chunk * block * segs;
    for (size_t r0 = r_begin; r0 < r_end;) {
      const size_t image = r0 / pixels, p0 = r0 % pixels;
      const size_t rows = std::min({block, r_end - r0, pixels - p0});  // a block stays within one image
      const size_t oy0 = p0 / g.out_w, oy1 = (p0 + rows - 1) / g.out_w;
      const float* image_in = in + image * g.in_h * g.in_w * c;
      const size_t used_rows = none ? 0 : (oy1 - oy0) * g.stride_h + (kh - 1) * g.dilation_h + 1;
      for (size_t j = 0; j < used_rows; ++j) {
        const ptrdiff_t iy = static_cast<ptrdiff_t>(oy0 * g.stride_h + j) - pad_top;
        const float* src = iy >= 0 && iy < static_cast<ptrdiff_t>(g.in_h) ? image_in + iy * g.in_w * c : nullptr;
        load_padded_row(band + j * row_floats, row_floats, src == nullptr ? nullptr : src + skip * c, g.in_w - skip,
                        c, span, pad_left < 0 ? 0 : static_cast<size_t>(pad_left), 0.0f);
      }
      size_t oy = oy0, ox = p0 % g.out_w;
      for (size_t i = 0; i < rows && segs > 0; ++i) {
        const float* at = band + (oy - oy0) * g.stride_h * row_floats + ox * g.stride_w * c;
        const float** patch = patches + i * segs;
        if (row_segments) {
          for (size_t ky = 0; ky < kh; ++ky) patch[ky] = at + ky * g.dilation_h * row_floats;
        } else {
          for (size_t s = 0; s < segs; ++s) {
            const size_t ky = (first_tap + s) / g.kernel_w, kx = (first_tap + s) % g.kernel_w;
            patch[s] = kx < tx.first || kx > tx.last
                           ? zeros
                           : at + (ky - ty.first) * g.dilation_h * row_floats + (kx - tx.first) * g.dilation_w * c;
          }
        }
        if (++ox == g.out_w) {
          ox = 0;
          ++oy;
        }
      }
      gemm.run_indirect(patches, rows, segs, seg_k, k_begin, out_min, out_max, out + r0 * n, p_begin, p_end);
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

namespace etnp::compute {

void deconv2d_gemm(const PackedGemm& gemm, const Conv2dGeometry& g, size_t batch, const float* in, const float* bias,
                   float out_min, float out_max, float* out, std::vector<float>& scratch) {
  const size_t taps = g.kernel_h * g.kernel_w;
  const size_t row_floats = gemm.n(), cout = row_floats / taps;
  const size_t in_pixels = g.in_h * g.in_w, out_pixels = g.out_h * g.out_w;
  if (batch == 0 || out_pixels == 0 || cout == 0) return;
  for (size_t p = 0; p < batch * out_pixels; ++p) {
    float* o = out + p * cout;
    if (bias != nullptr) {
      copy_short_floats(o, bias, static_cast<int64_t>(cout));
    } else {
      zero_short_floats(o, static_cast<int64_t>(cout));
    }
  }
  // Input pixels a chunk: their products fill about 256 KiB, read back from the cache by the scatter.
  const size_t chunk = std::max<size_t>(1, (size_t{1} << 16) / row_floats);
  scratch.resize(std::min(chunk, std::max<size_t>(in_pixels, 1)) * row_floats);
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const auto sh = static_cast<int64_t>(g.stride_h), sw = static_cast<int64_t>(g.stride_w);
  const auto dh = static_cast<int64_t>(g.dilation_h), dw = static_cast<int64_t>(g.dilation_w);
  const auto pt = static_cast<int64_t>(g.pad_top), pl = static_cast<int64_t>(g.pad_left);
  const auto oh = static_cast<int64_t>(g.out_h), ow = static_cast<int64_t>(g.out_w);
  const auto kw = static_cast<int64_t>(g.kernel_w);
  // The taps [lo, hi) of an input coordinate x that land inside [0, size) at x * stride + k * dilation - pad.
  auto live = [](int64_t x, int64_t stride, int64_t dilation, int64_t pad, int64_t kernel, int64_t size) {
    const int64_t first = x * stride - pad;  // output of tap 0
    int64_t lo, hi;
    if (dilation == 1) {  // no division in the common case
      lo = std::max<int64_t>(0, -first);
      hi = std::min(kernel, size - first);
    } else {
      lo = first >= 0 ? 0 : (-first + dilation - 1) / dilation;
      hi = first >= size ? 0 : std::min(kernel, (size - first + dilation - 1) / dilation);
    }
    return std::pair<int64_t, int64_t>(lo, std::max(lo, hi));
  };
  for (size_t b = 0; b < batch; ++b) {
    const float* src = in + b * in_pixels * g.channels;
    float* dst = out + b * out_pixels * cout;
    for (size_t p0 = 0; p0 < in_pixels; p0 += chunk) {
      const size_t rows = std::min(chunk, in_pixels - p0);
      gemm.run(src + p0 * g.channels, rows, g.channels, -kInf, kInf, scratch.data());
      auto iy = static_cast<int64_t>(p0 / g.in_w), ix = static_cast<int64_t>(p0 % g.in_w);
      for (size_t r = 0; r < rows; ++r, ix = ix + 1 == static_cast<int64_t>(g.in_w) ? (++iy, 0) : ix + 1) {
        const auto [ky0, ky1] = live(iy, sh, dh, pt, static_cast<int64_t>(g.kernel_h), oh);
        const auto [kx0, kx1] = live(ix, sw, dw, pl, kw, ow);
        const float* product = scratch.data() + r * row_floats;
        for (int64_t ky = ky0; ky < ky1; ++ky) {
          float* o = dst + static_cast<size_t>(((iy * sh + ky * dh - pt) * ow + ix * sw + kx0 * dw - pl)) * cout;
          const float* t = product + static_cast<size_t>(ky * kw + kx0) * cout;
          if (dw == 1) {
            // The live taps of a row reach consecutive outputs: one run of (kx1 - kx0) * Cout sums.
            const size_t n = static_cast<size_t>(kx1 - kx0) * cout;
            for (size_t i = 0; i < n; ++i) o[i] += t[i];
          } else {
            for (int64_t kx = kx0; kx < kx1; ++kx, o += dw * cout, t += cout) {
              for (size_t c = 0; c < cout; ++c) o[c] += t[c];
            }
          }
        }
      }
    }
  }
  if (clamps_anything(out_min, out_max)) {
    for (size_t i = 0; i < batch * out_pixels * cout; ++i) out[i] = clamp_keep_nan(out[i], out_min, out_max);
  }
}

}  // namespace etnp::compute
