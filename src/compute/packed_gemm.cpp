#include "compute/packed_gemm.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#include "etnp/threadpool.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ETNP_XNN_GEMM_AVX2 1
#endif

namespace etnp::compute {
namespace {

constexpr size_t kMr = 6;
constexpr size_t kNr = PackedGemm::kPanel;
constexpr size_t kMrNarrow = 8;  // rows of the tile for a last panel of 8 columns or fewer
constexpr size_t kKc = 256;  // K block: a panel's 256 x 16 floats (16 KiB) stay in L1

// c[MR x nr] = clamp(a[MR x k] * panel[k x 16] + bias, lo, hi), c rows ldc apart. Direct: `a` is a matrix,
// rows a_stride floats apart (segs == 1). Indirect: `a` holds row pointers, row i in `segs` segments of seg_k
// floats, segment s at ((const float* const*)a)[i * a_stride + s] (a convolution: one per kernel row, pointing
// into the input image); the weights of the segments follow one another in the panel. With `accumulate` the
// sums continue from c (an earlier K block) instead of starting at the bias; the clamp applies only to the
// last K block (`clamp`).
template <bool Indirect, int MR>
inline const float* row_segment(const void* a, size_t a_stride, int i, size_t s) {
  if constexpr (Indirect) {
    return static_cast<const float* const*>(a)[static_cast<size_t>(i) * a_stride + s];
  } else {
    return static_cast<const float*>(a) + static_cast<size_t>(i) * a_stride;
  }
}

template <bool Indirect, int MR>
void kernel_generic(size_t segs, const void* a, size_t a_stride, size_t seg_k, const float* panel, const float* bias,
                    float lo, float hi, float* c, size_t ldc, size_t nr, bool accumulate, bool clamp) {
  float acc[MR][kNr] = {};
  for (int i = 0; i < MR; ++i) {
    if (accumulate) {
      std::memcpy(acc[i], c + i * ldc, nr * sizeof(float));
    } else {
      std::memcpy(acc[i], bias, sizeof(acc[i]));
    }
  }
  for (size_t s = 0; s < (Indirect ? segs : 1); ++s) {  // direct: one segment, no loop
    for (size_t p = 0; p < seg_k; ++p) {
      const float* w = panel + p * kNr;
      for (int i = 0; i < MR; ++i) {
        const float x = row_segment<Indirect, MR>(a, a_stride, i, s)[p];
        for (size_t j = 0; j < kNr; ++j) acc[i][j] += x * w[j];
      }
    }
    panel += seg_k * kNr;
  }
  for (int i = 0; i < MR; ++i) {
    for (size_t j = 0; j < nr; ++j) c[i * ldc + j] = clamp ? std::min(std::max(acc[i][j], lo), hi) : acc[i][j];
  }
}

#ifdef ETNP_XNN_GEMM_AVX2
__attribute__((target("avx2,fma"), always_inline)) inline void load_row(const float* row, __m256& v0, __m256& v1,
                                                                         size_t nr, __m256i mask0, __m256i mask1) {
  if (nr == kNr) {
    v0 = _mm256_loadu_ps(row);
    v1 = _mm256_loadu_ps(row + 8);
  } else {
    v0 = _mm256_maskload_ps(row, mask0);
    v1 = _mm256_maskload_ps(row + 8, mask1);
  }
}

__attribute__((target("avx2,fma"), always_inline)) inline void store_row(float* row, __m256 v0, __m256 v1, __m256 lo,
                                                                          __m256 hi, bool clamp, size_t nr,
                                                                          __m256i mask0, __m256i mask1) {
  if (clamp) {
    v0 = _mm256_min_ps(_mm256_max_ps(v0, lo), hi);
    v1 = _mm256_min_ps(_mm256_max_ps(v1, lo), hi);
  }
  if (nr == kNr) {
    _mm256_storeu_ps(row, v0);
    _mm256_storeu_ps(row + 8, v1);
  } else {
    _mm256_maskstore_ps(row, mask0, v0);
    _mm256_maskstore_ps(row + 8, mask1, v1);
  }
}

// Accumulators are named variables (not arrays) so that GCC keeps all twelve in registers.
template <bool Indirect, int MR>
__attribute__((target("avx2,fma"))) void kernel_avx2(size_t segs, const void* a, size_t a_stride, size_t seg_k,
                                                     const float* panel, const float* bias, float lo, float hi,
                                                     float* c, size_t ldc, size_t nr, bool accumulate, bool clamp) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  // The last panel's columns past n are padding: only the first nr are loaded and stored.
  const __m256i mask0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(nr)), lane);
  const __m256i mask1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(nr) - 8), lane);
  const __m256 bias0 = _mm256_load_ps(bias), bias1 = _mm256_load_ps(bias + 8);
  __m256 c00 = bias0, c01 = bias1, c10 = bias0, c11 = bias1, c20 = bias0, c21 = bias1;
  __m256 c30 = bias0, c31 = bias1, c40 = bias0, c41 = bias1, c50 = bias0, c51 = bias1;
  if (accumulate) {
    load_row(c, c00, c01, nr, mask0, mask1);
    if constexpr (MR > 1) load_row(c + ldc, c10, c11, nr, mask0, mask1);
    if constexpr (MR > 2) load_row(c + 2 * ldc, c20, c21, nr, mask0, mask1);
    if constexpr (MR > 3) load_row(c + 3 * ldc, c30, c31, nr, mask0, mask1);
    if constexpr (MR > 4) load_row(c + 4 * ldc, c40, c41, nr, mask0, mask1);
    if constexpr (MR > 5) load_row(c + 5 * ldc, c50, c51, nr, mask0, mask1);
  }
  for (size_t s = 0; s < (Indirect ? segs : 1); ++s) {  // direct: one segment, no loop
    const float* a0 = row_segment<Indirect, MR>(a, a_stride, 0, s);
    const float* a1 = MR > 1 ? row_segment<Indirect, MR>(a, a_stride, 1, s) : a0;
    const float* a2 = MR > 2 ? row_segment<Indirect, MR>(a, a_stride, 2, s) : a0;
    const float* a3 = MR > 3 ? row_segment<Indirect, MR>(a, a_stride, 3, s) : a0;
    const float* a4 = MR > 4 ? row_segment<Indirect, MR>(a, a_stride, 4, s) : a0;
    const float* a5 = MR > 5 ? row_segment<Indirect, MR>(a, a_stride, 5, s) : a0;
    for (size_t p = 0; p < seg_k; ++p) {
      const __m256 w0 = _mm256_load_ps(panel);
      const __m256 w1 = _mm256_load_ps(panel + 8);
      panel += kNr;
      __m256 x = _mm256_broadcast_ss(a0 + p);
      c00 = _mm256_fmadd_ps(x, w0, c00);
      c01 = _mm256_fmadd_ps(x, w1, c01);
      if constexpr (MR > 1) {
        x = _mm256_broadcast_ss(a1 + p);
        c10 = _mm256_fmadd_ps(x, w0, c10);
        c11 = _mm256_fmadd_ps(x, w1, c11);
      }
      if constexpr (MR > 2) {
        x = _mm256_broadcast_ss(a2 + p);
        c20 = _mm256_fmadd_ps(x, w0, c20);
        c21 = _mm256_fmadd_ps(x, w1, c21);
      }
      if constexpr (MR > 3) {
        x = _mm256_broadcast_ss(a3 + p);
        c30 = _mm256_fmadd_ps(x, w0, c30);
        c31 = _mm256_fmadd_ps(x, w1, c31);
      }
      if constexpr (MR > 4) {
        x = _mm256_broadcast_ss(a4 + p);
        c40 = _mm256_fmadd_ps(x, w0, c40);
        c41 = _mm256_fmadd_ps(x, w1, c41);
      }
      if constexpr (MR > 5) {
        x = _mm256_broadcast_ss(a5 + p);
        c50 = _mm256_fmadd_ps(x, w0, c50);
        c51 = _mm256_fmadd_ps(x, w1, c51);
      }
    }
  }
  const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
  store_row(c, c00, c01, vlo, vhi, clamp, nr, mask0, mask1);
  if constexpr (MR > 1) store_row(c + ldc, c10, c11, vlo, vhi, clamp, nr, mask0, mask1);
  if constexpr (MR > 2) store_row(c + 2 * ldc, c20, c21, vlo, vhi, clamp, nr, mask0, mask1);
  if constexpr (MR > 3) store_row(c + 3 * ldc, c30, c31, vlo, vhi, clamp, nr, mask0, mask1);
  if constexpr (MR > 4) store_row(c + 4 * ldc, c40, c41, vlo, vhi, clamp, nr, mask0, mask1);
  if constexpr (MR > 5) store_row(c + 5 * ldc, c50, c51, vlo, vhi, clamp, nr, mask0, mask1);
}

bool use_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}

// The last panel when n % 16 leaves it 8 columns or fewer (n = 24, 40, ...): 8 rows x 8 columns, the same eight
// independent sums per k step as the 6x16 tile, without multiplying the panel's padding half.
template <bool Indirect, int MR>
__attribute__((target("avx2,fma"))) void kernel_narrow_avx2(size_t segs, const void* a, size_t a_stride,
                                                            size_t seg_k, const float* panel, const float* bias,
                                                            float lo, float hi, float* c, size_t ldc, size_t nr,
                                                            bool accumulate, bool clamp) {
  const __m256i mask =
      _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(nr)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  const __m256 b = _mm256_load_ps(bias);
  __m256 acc[MR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) acc[i] = accumulate ? _mm256_maskload_ps(c + i * ldc, mask) : b;
  for (size_t s = 0; s < (Indirect ? segs : 1); ++s) {  // direct: one segment, no loop
    const float* rows[MR];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) rows[i] = row_segment<Indirect, MR>(a, a_stride, i, s);
    for (size_t p = 0; p < seg_k; ++p) {
      const __m256 w = _mm256_load_ps(panel);
      panel += kNr;
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) acc[i] = _mm256_fmadd_ps(_mm256_broadcast_ss(rows[i] + p), w, acc[i]);
    }
  }
  const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    const __m256 v = clamp ? _mm256_min_ps(_mm256_max_ps(acc[i], vlo), vhi) : acc[i];
    _mm256_maskstore_ps(c + i * ldc, mask, v);
  }
}
#endif

using Kernel = void (*)(size_t, const void*, size_t, size_t, const float*, const float*, float, float, float*, size_t,
                        size_t, bool, bool);

template <bool Indirect>
Kernel kernel_for(size_t mr) {
#ifdef ETNP_XNN_GEMM_AVX2
  if (use_avx2()) {
    static constexpr Kernel kAvx2[] = {nullptr,
                                       kernel_avx2<Indirect, 1>,
                                       kernel_avx2<Indirect, 2>,
                                       kernel_avx2<Indirect, 3>,
                                       kernel_avx2<Indirect, 4>,
                                       kernel_avx2<Indirect, 5>,
                                       kernel_avx2<Indirect, 6>};
    return kAvx2[mr];
  }
#endif
  static constexpr Kernel kGeneric[] = {nullptr,
                                        kernel_generic<Indirect, 1>,
                                        kernel_generic<Indirect, 2>,
                                        kernel_generic<Indirect, 3>,
                                        kernel_generic<Indirect, 4>,
                                        kernel_generic<Indirect, 5>,
                                        kernel_generic<Indirect, 6>};
  return kGeneric[mr];
}

// One panel's tiles over rows [r0, r1): 6x16 tiles, or 8x8 ones for a last panel of 8 columns or fewer.
// row_at(r) is row r of A (a pointer into the matrix, or into the row pointers for the indirect form).
template <bool Indirect, typename RowAt>
void run_panel(RowAt row_at, size_t r0, size_t r1, size_t segs, size_t a_stride, size_t seg_k, const float* panel,
               const float* bias, float lo, float hi, float* c, size_t ldc, size_t nr, bool accumulate, bool clamp) {
#ifdef ETNP_XNN_GEMM_AVX2
  if (nr <= 8 && use_avx2()) {
    static constexpr Kernel kNarrow[] = {nullptr,
                                         kernel_narrow_avx2<Indirect, 1>,
                                         kernel_narrow_avx2<Indirect, 2>,
                                         kernel_narrow_avx2<Indirect, 3>,
                                         kernel_narrow_avx2<Indirect, 4>,
                                         kernel_narrow_avx2<Indirect, 5>,
                                         kernel_narrow_avx2<Indirect, 6>,
                                         kernel_narrow_avx2<Indirect, 7>,
                                         kernel_narrow_avx2<Indirect, 8>};
    for (size_t r = r0; r < r1; r += kMrNarrow) {
      kNarrow[std::min(kMrNarrow, r1 - r)](segs, row_at(r), a_stride, seg_k, panel, bias, lo, hi, c + r * ldc, ldc,
                                           nr, accumulate, clamp);
    }
    return;
  }
#endif
  for (size_t r = r0; r < r1; r += kMr) {
    kernel_for<Indirect>(std::min(kMr, r1 - r))(segs, row_at(r), a_stride, seg_k, panel, bias, lo, hi, c + r * ldc,
                                                ldc, nr, accumulate, clamp);
  }
}

// 64-byte aligned start inside a vector over-allocated by 16 floats (the kernels use aligned loads).
const float* aligned(const std::vector<float>& v) {
  const auto p = reinterpret_cast<uintptr_t>(v.data());
  return reinterpret_cast<const float*>((p + 63) & ~uintptr_t{63});
}

}  // namespace

PackedGemm::PackedGemm(const float* w, bool w_is_nk, size_t k, size_t n, const float* bias) : k_(k), n_(n) {
  const size_t panels = (n + kNr - 1) / kNr;
  panels_.assign(panels * k * kNr + 16, 0.0f);
  bias_.assign(panels * kNr + 16, 0.0f);
  auto* packed = const_cast<float*>(aligned(panels_));
  auto* packed_bias = const_cast<float*>(aligned(bias_));
  for (size_t j = 0; j < n; ++j) {
    float* dst = packed + (j / kNr) * k * kNr + (j % kNr);
    for (size_t i = 0; i < k; ++i) dst[i * kNr] = w_is_nk ? w[j * k + i] : w[i * n + j];
    if (bias != nullptr) packed_bias[j] = bias[j];
  }
}

void PackedGemm::run_rows(const float* in, size_t rows, size_t in_stride, size_t p_begin, size_t p_end,
                          float out_min, float out_max, float* out) const {
  // K in blocks whose weight panel stays in L1; rows in blocks whose inputs stay in L2 while every panel
  // streams past them.
  const size_t kc_max = std::min(k_, kKc);
  const size_t block = std::max<size_t>(kMr, (128 * 1024 / std::max<size_t>(kc_max * sizeof(float), 1)) / kMr * kMr);
  const float* packed = aligned(panels_);
  const float* packed_bias = aligned(bias_);
  for (size_t k0 = 0; k0 < k_ || k0 == 0; k0 += kKc) {
    const size_t kc = std::min(kKc, k_ - k0);
    const bool first = k0 == 0, last = k0 + kc >= k_;
    for (size_t r0 = 0; r0 < rows; r0 += block) {
      const size_t r1 = std::min(rows, r0 + block);
      for (size_t p = p_begin; p < p_end; ++p) {
        const float* panel = packed + (p * k_ + k0) * kNr;
        const float* bias = packed_bias + p * kNr;
        const size_t nr = std::min(kNr, n_ - p * kNr);
        run_panel<false>([&](size_t r) -> const void* { return in + r * in_stride + k0; }, r0, r1, 1, in_stride,
                         kc, panel, bias, out_min, out_max, out + p * kNr, n_, nr, !first, last);
      }
    }
    if (k_ == 0) break;
  }
}

void PackedGemm::run(const float* in, size_t rows, size_t in_stride, float out_min, float out_max, float* out) const {
  if (rows == 0 || n_ == 0) return;
  const size_t tiles = (rows + kMr - 1) / kMr;
  const size_t panels = (n_ + kNr - 1) / kNr;
  ThreadPool& pool = ThreadPool::current();
  const size_t threads = pool.num_threads();
  if (threads > 1 && rows * k_ * n_ >= kParallelWork) {
    // Many rows: split row tiles (each thread streams every panel past its own rows). Few rows: whichever of
    // row tiles and column panels divides more evenly (64 rows are 11 tiles, 6 + 5 on two threads, while their
    // 48 panels split 24 + 24; a decoder's single row has one tile).
    auto rounds = [&](size_t items) { return static_cast<double>((items + threads - 1) / threads * threads) / items; };
    if (panels < 2 || tiles >= 8 * threads || (tiles >= threads && rounds(tiles) <= rounds(panels))) {
      pool.parallel_for(tiles, 1, [&](size_t t0, size_t t1) {
        const size_t r0 = t0 * kMr, r1 = std::min(rows, t1 * kMr);
        run_rows(in + r0 * in_stride, r1 - r0, in_stride, 0, panels, out_min, out_max, out + r0 * n_);
      });
    } else {
      pool.parallel_for(panels, 1, [&](size_t p0, size_t p1) {
        run_rows(in, rows, in_stride, p0, p1, out_min, out_max, out);
      });
    }
    return;
  }
  run_rows(in, rows, in_stride, 0, panels, out_min, out_max, out);
}

void PackedGemm::run_indirect(const float* const* a, size_t rows, size_t segs, size_t seg_k, float out_min,
                              float out_max, float* out) const {
  if (rows == 0 || n_ == 0) return;
  const float* packed = aligned(panels_);
  const float* packed_bias = aligned(bias_);
  const size_t panels = (n_ + kNr - 1) / kNr;
  // K in blocks of whole segments (as run_rows: the panel's block stays in L1).
  const size_t group = std::max<size_t>(1, kKc / std::max<size_t>(seg_k, 1));
  for (size_t s0 = 0; s0 < segs || s0 == 0; s0 += group) {
    const size_t gs = std::min(group, segs - s0);
    const bool first = s0 == 0, last = s0 + gs >= segs;
    for (size_t p = 0; p < panels; ++p) {
      const float* panel = packed + (p * k_ + s0 * seg_k) * kNr;
      const float* bias = packed_bias + p * kNr;
      const size_t nr = std::min(kNr, n_ - p * kNr);
      run_panel<true>([&](size_t r) -> const void* { return a + r * segs + s0; }, 0, rows, gs, segs, seg_k, panel,
                      bias, out_min, out_max, out + p * kNr, n_, nr, !first, last);
    }
    if (segs == 0) break;
  }
}

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

// ---- depthwise convolution -----------------------------------------------------------------------------

namespace {

constexpr size_t kMaxPeriod = 4096;
constexpr size_t kMaxKernel = 16;  // kernel rows (padded input rows kept at once)

size_t weight_period(size_t channels) {
  size_t period = channels;
  while (period % 8 != 0) period += channels;  // lcm(C, 8)
  return period;
}

#ifdef ETNP_XNN_GEMM_AVX2
// out[j] = clamp(bias[j % P] + sum_taps rows[ky][j + kx*C] * w[ky][kx][j % P]) for j < n, 8 at a time.
__attribute__((target("avx2,fma"))) void depthwise_row_avx2(const float* const* rows, size_t kh, size_t kw, size_t c,
                                                            const float* weights, const float* bias, size_t period,
                                                            size_t n, float lo, float hi, float* out) {
  const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
  size_t phase = 0;
  for (size_t j = 0; j < n; j += 8) {
    __m256 acc = _mm256_loadu_ps(bias + phase);
    for (size_t ky = 0; ky < kh; ++ky) {
      const float* src = rows[ky] + j;
      const float* wk = weights + ky * kw * period + phase;
      for (size_t kx = 0; kx < kw; ++kx) {
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(src + kx * c), _mm256_loadu_ps(wk + kx * period), acc);
      }
    }
    acc = _mm256_min_ps(_mm256_max_ps(acc, vlo), vhi);
    if (j + 8 <= n) {
      _mm256_storeu_ps(out + j, acc);
    } else {
      const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n - j)),
                                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
      _mm256_maskstore_ps(out + j, mask, acc);
    }
    phase += 8;
    if (phase == period) phase = 0;
  }
}
// Channels a multiple of 8, any stride: blocks of P output pixels x 8 channels with the taps outermost, so
// that P independent accumulators hide the FMA latency and each weight vector is loaded once per block (a
// row-at-a-time loop chains all kh * kw FMAs of an output vector and runs at a fraction of the FMA rate).
template <int P>
__attribute__((target("avx2,fma"), always_inline)) inline void depthwise_block_avx2(
    const float* const* rows, size_t kh, size_t kw, size_t c, size_t step, size_t in_off, const float* weights,
    __m256 bias, __m256 lo, __m256 hi, float* out) {
  __m256 acc[P];
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) acc[p] = bias;
  for (size_t ky = 0; ky < kh; ++ky) {
    const float* row = rows[ky] + in_off;
    const float* wk = weights + ky * kw * c;
    for (size_t kx = 0; kx < kw; ++kx) {
      const __m256 w = _mm256_loadu_ps(wk + kx * c);
      const float* src = row + kx * c;
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) acc[p] = _mm256_fmadd_ps(_mm256_loadu_ps(src + p * step), w, acc[p]);
    }
  }
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) _mm256_storeu_ps(out + p * c, _mm256_min_ps(_mm256_max_ps(acc[p], lo), hi));
}

// The same for kernels 3 wide at stride 1, walking each kernel row's inputs once: an input feeds three
// neighbouring outputs, so a row of P outputs loads P + 2 input vectors instead of 3 * P (the loads, not the
// multiply-adds, bound the general form; at stride 2 the saving measured nothing).
template <int P>
__attribute__((target("avx2,fma"), always_inline)) inline void depthwise_block3_avx2(
    const float* const* rows, size_t kh, size_t c, size_t in_off, const float* weights, __m256 bias, __m256 lo,
    __m256 hi, float* out) {
  __m256 acc[P];
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) acc[p] = bias;
  for (size_t ky = 0; ky < kh; ++ky) {
    const float* row = rows[ky] + in_off;
    const float* wk = weights + ky * 3 * c;
    const __m256 w[3] = {_mm256_loadu_ps(wk), _mm256_loadu_ps(wk + c), _mm256_loadu_ps(wk + 2 * c)};
#pragma GCC unroll 32
    for (int i = 0; i < P + 2; ++i) {
      const __m256 x = _mm256_loadu_ps(row + i * c);
#pragma GCC unroll 3
      for (int kx = 0; kx < 3; ++kx) {
        const int d = i - kx;  // input i is tap kx of output d
        if (d >= 0 && d < P) acc[d] = _mm256_fmadd_ps(x, w[kx], acc[d]);
      }
    }
  }
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) _mm256_storeu_ps(out + p * c, _mm256_min_ps(_mm256_max_ps(acc[p], lo), hi));
}

// Output pixels [x, x + P * blocks) of a row, P at a time; advances x.
template <int P>
__attribute__((target("avx2,fma"), always_inline)) inline void depthwise_blocks_avx2(
    const float* const* rows, size_t kh, size_t kw, size_t c, size_t stride, const float* weights, const float* bias,
    size_t out_w, __m256 lo, __m256 hi, float* out, size_t& x) {
  const size_t step = stride * c;  // floats between the inputs of neighbouring output pixels
  for (; x + P <= out_w; x += P) {
    for (size_t ch = 0; ch < c; ch += 8) {
      const __m256 b = _mm256_loadu_ps(bias + ch);
      float* o = out + x * c + ch;
      if (kw == 3 && stride == 1) {
        depthwise_block3_avx2<P>(rows, kh, c, x * step + ch, weights + ch, b, lo, hi, o);
      } else {
        depthwise_block_avx2<P>(rows, kh, kw, c, step, x * step + ch, weights + ch, b, lo, hi, o);
      }
    }
  }
}

// One output whose taps reach past the left or right edge of the image: only its `taps` columns inside are
// summed (the others would multiply padding zeros), read in place; rows[ky] is null for a row above or below.
__attribute__((target("avx2,fma"))) void depthwise_edge_pixel_c8_avx2(const float* const* rows, size_t kh,
                                                                     size_t taps, size_t c, const float* weights,
                                                                     size_t weight_row, const float* bias, float lo,
                                                                     float hi, float* out) {
  const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
  for (size_t ch = 0; ch < c; ch += 8) {
    __m256 acc = _mm256_loadu_ps(bias + ch);
    for (size_t ky = 0; ky < kh; ++ky) {
      if (rows[ky] == nullptr) continue;
      for (size_t t = 0; t < taps; ++t) {
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(rows[ky] + t * c + ch),
                              _mm256_loadu_ps(weights + ky * weight_row + t * c + ch), acc);
      }
    }
    _mm256_storeu_ps(out + ch, _mm256_min_ps(_mm256_max_ps(acc, vlo), vhi));
  }
}

__attribute__((target("avx2,fma"))) void depthwise_row_c8_avx2(const float* const* rows, size_t kh, size_t kw,
                                                              size_t c, size_t stride, const float* weights,
                                                              const float* bias, size_t out_w, float lo, float hi,
                                                              float* out) {
  const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
  size_t x = 0;
  depthwise_blocks_avx2<8>(rows, kh, kw, c, stride, weights, bias, out_w, vlo, vhi, out, x);
  depthwise_blocks_avx2<4>(rows, kh, kw, c, stride, weights, bias, out_w, vlo, vhi, out, x);
  depthwise_blocks_avx2<2>(rows, kh, kw, c, stride, weights, bias, out_w, vlo, vhi, out, x);
  depthwise_blocks_avx2<1>(rows, kh, kw, c, stride, weights, bias, out_w, vlo, vhi, out, x);
}
#endif

// Any channel count and stride, one output at a time (no AVX2).
void depthwise_row_strided_generic(const float* const* rows, size_t kh, size_t kw, size_t c, size_t stride,
                                   const float* weights, const float* bias, size_t out_w, float lo, float hi,
                                   float* out) {
  for (size_t x = 0; x < out_w; ++x) {
    for (size_t ch = 0; ch < c; ++ch) {
      float acc = bias[ch];
      for (size_t ky = 0; ky < kh; ++ky) {
        for (size_t kx = 0; kx < kw; ++kx) acc += rows[ky][(x * stride + kx) * c + ch] * weights[(ky * kw + kx) * c + ch];
      }
      out[x * c + ch] = std::min(std::max(acc, lo), hi);
    }
  }
}

void depthwise_row_generic(const float* const* rows, size_t kh, size_t kw, size_t c, const float* weights,
                           const float* bias, size_t period, size_t n, float lo, float hi, float* out) {
  for (size_t j = 0; j < n; ++j) {
    const size_t phase = j % period;
    float acc = bias[phase];
    for (size_t ky = 0; ky < kh; ++ky) {
      for (size_t kx = 0; kx < kw; ++kx) acc += rows[ky][j + kx * c] * weights[(ky * kw + kx) * period + phase];
    }
    out[j] = std::min(std::max(acc, lo), hi);
  }
}

}  // namespace

bool DepthwiseConv::supported(size_t channels, size_t kernel_h, size_t stride_h, size_t stride_w) {
  if (channels == 0 || kernel_h > kMaxKernel || stride_h == 0 || stride_w == 0) return false;
  return channels % 8 == 0 || (stride_w == 1 && weight_period(channels) <= kMaxPeriod);
}

DepthwiseConv::DepthwiseConv(const float* filter, const float* bias, size_t channels, size_t kernel_h,
                             size_t kernel_w, size_t stride_h, size_t stride_w, size_t pad_top, size_t pad_left)
    : c_(channels), kh_(kernel_h), kw_(kernel_w), sh_(stride_h), sw_(stride_w), pad_top_(pad_top),
      pad_left_(pad_left), period_(weight_period(channels)) {
  // 8 extra floats so that the vector loads at the end of a period stay inside.
  weights_.assign(kh_ * kw_ * period_ + 8, 0.0f);
  bias_.assign(period_ + 8, 0.0f);
  for (size_t t = 0; t < kh_ * kw_; ++t) {
    for (size_t j = 0; j < period_; ++j) weights_[t * period_ + j] = filter[t * c_ + j % c_];
  }
  if (bias != nullptr) {
    for (size_t j = 0; j < period_; ++j) bias_[j] = bias[j % c_];
  }
}

DepthwiseConv::Edges DepthwiseConv::edges(size_t w, size_t out_w) const {
  Edges e;
  e.left = std::min(out_w, (pad_left_ + sw_ - 1) / sw_);  // outputs whose first tap is left of the image
  e.right = w + pad_left_ >= kw_ ? std::min(out_w, (w + pad_left_ - kw_) / sw_ + 1) : 0;  // first past the right edge
  e.right = std::max(e.right, e.left);
  return e;
}

bool DepthwiseConv::reads_in_place(size_t w, size_t out_w) const {
#ifdef ETNP_XNN_GEMM_AVX2
  const Edges e = edges(w, out_w);
  return use_avx2() && c_ % 8 == 0 && e.right > e.left;
#else
  (void)w;
  (void)out_w;
  return false;
#endif
}

size_t DepthwiseConv::scratch_floats(size_t w, size_t out_w) const {
  if (reads_in_place(w, out_w)) return w * c_;  // one row of zeros
  return kh_ * (((out_w - 1) * sw_ + kw_) * c_ + 8);  // the ring of padded rows
}

// Output rows [y0, y1) of one image; `rows` is scratch_floats(w, out_w) floats.
void DepthwiseConv::run_rows(const float* in, size_t h, size_t w, size_t out_w, size_t y0, size_t y1,
                             float out_min, float out_max, float* out, float* rows) const {
  const float* taps[kMaxKernel];
#ifdef ETNP_XNN_GEMM_AVX2
  if (reads_in_place(w, out_w)) {
    // The pixel-block kernel reads exactly the taps it needs, so the outputs whose taps lie inside the image
    // read the input rows in place, and a row of zeros stands for the rows above and below the image; the few
    // outputs at each edge sum only their taps inside (a full padded copy of every input row cost ~7% of
    // MobileNetV2, and padded copies of the edge columns as much as the edge outputs themselves).
    const Edges e = edges(w, out_w);
    float* zero = rows;
    std::fill(zero, zero + w * c_, 0.0f);
    const size_t first_col = e.left * sw_ - pad_left_;  // input column of the first inside output's first tap
    for (size_t y = y0; y < y1; ++y) {
      const float* src[kMaxKernel];
      for (size_t ky = 0; ky < kh_; ++ky) {
        const size_t iy = y * sh_ + ky - pad_top_;  // unsigned wrap-around: a padding row
        src[ky] = iy < h ? in + iy * w * c_ : nullptr;
      }
      float* out_row = out + y * out_w * c_;
      for (size_t ky = 0; ky < kh_; ++ky) taps[ky] = (src[ky] != nullptr ? src[ky] : zero) + first_col * c_;
      depthwise_row_c8_avx2(taps, kh_, kw_, c_, sw_, weights_.data(), bias_.data(), e.right - e.left, out_min,
                            out_max, out_row + e.left * c_);
      auto edge_output = [&](size_t x) {
        // Taps [kx0, kx1) of this output fall inside the image.
        const auto ix0 = static_cast<ptrdiff_t>(x * sw_) - static_cast<ptrdiff_t>(pad_left_);
        const size_t kx0 = ix0 < 0 ? static_cast<size_t>(-ix0) : 0;
        const auto inside = static_cast<ptrdiff_t>(w) - ix0;
        const size_t kx1 = std::min<size_t>(kw_, inside > 0 ? static_cast<size_t>(inside) : 0);
        const float* edge_rows[kMaxKernel];
        for (size_t ky = 0; ky < kh_; ++ky) {
          edge_rows[ky] = src[ky] != nullptr && kx1 > kx0 ? src[ky] + (static_cast<size_t>(ix0) + kx0) * c_ : nullptr;
        }
        depthwise_edge_pixel_c8_avx2(edge_rows, kh_, kx1 > kx0 ? kx1 - kx0 : 0, c_, weights_.data() + kx0 * c_,
                                     kw_ * c_, bias_.data(), out_min, out_max, out_row + x * c_);
      };
      for (size_t x = 0; x < e.left; ++x) edge_output(x);
      for (size_t x = e.right; x < out_w; ++x) edge_output(x);
    }
    return;
  }
#endif
  const size_t span = (out_w - 1) * sw_ + kw_;  // padded columns the taps reach
  const size_t padded = span * c_ + 8;          // plus vector slack
  const size_t n = out_w * c_;
  // Slot s holds input row iy with iy mod kh == s (iy is -1 for the padding row above the image, so "not
  // loaded" needs a value no row can have).
  ptrdiff_t loaded[kMaxKernel];
  std::fill(loaded, loaded + kh_, std::numeric_limits<ptrdiff_t>::min());
  for (size_t y = y0; y < y1; ++y) {
    for (size_t ky = 0; ky < kh_; ++ky) {
      const ptrdiff_t iy = static_cast<ptrdiff_t>(y * sh_ + ky) - static_cast<ptrdiff_t>(pad_top_);
      const size_t slot = static_cast<size_t>((iy % static_cast<ptrdiff_t>(kh_) + static_cast<ptrdiff_t>(kh_)) %
                                              static_cast<ptrdiff_t>(kh_));
      float* buf = rows + slot * padded;
      if (loaded[slot] != iy) {
        const bool inside = iy >= 0 && static_cast<size_t>(iy) < h;
        load_padded_row(buf, padded, inside ? in + static_cast<size_t>(iy) * w * c_ : nullptr, w, c_, span, pad_left_,
                        0.0f);
        loaded[slot] = iy;
      }
      taps[ky] = buf;
    }
    float* out_row = out + y * n;
#ifdef ETNP_XNN_GEMM_AVX2
    if (use_avx2() && c_ % 8 == 0) {
      depthwise_row_c8_avx2(taps, kh_, kw_, c_, sw_, weights_.data(), bias_.data(), out_w, out_min, out_max, out_row);
      continue;
    }
    if (use_avx2() && sw_ == 1) {
      depthwise_row_avx2(taps, kh_, kw_, c_, weights_.data(), bias_.data(), period_, n, out_min, out_max, out_row);
      continue;
    }
#endif
    if (sw_ == 1) {
      depthwise_row_generic(taps, kh_, kw_, c_, weights_.data(), bias_.data(), period_, n, out_min, out_max, out_row);
    } else {
      depthwise_row_strided_generic(taps, kh_, kw_, c_, sw_, weights_.data(), bias_.data(), out_w, out_min, out_max,
                                    out_row);
    }
  }
}

size_t conv_row_chunks(size_t batch, size_t out_h) {
  return std::min(batch * out_h, std::max<size_t>(1, ThreadPool::current().num_threads()));
}

void for_each_conv_row_chunk(size_t batch, size_t out_h, size_t chunks, size_t work,
                             const std::function<void(size_t chunk, size_t image, size_t y0, size_t y1)>& rows) {
  const size_t total_rows = batch * out_h;
  auto run_chunk = [&](size_t chunk) {
    const size_t r0 = total_rows * chunk / chunks, r1 = total_rows * (chunk + 1) / chunks;
    for (size_t r = r0; r < r1;) {
      const size_t b = r / out_h, y = r % out_h;
      const size_t y_end = std::min(out_h, y + (r1 - r));
      rows(chunk, b, y, y_end);
      r += y_end - y;
    }
  };
  if (chunks == 1 || work < kParallelWork) {
    for (size_t i = 0; i < chunks; ++i) run_chunk(i);
    return;
  }
  ThreadPool::current().parallel_for(chunks, 1, [&](size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; ++i) run_chunk(i);
  });
}

void DepthwiseConv::run(const float* in, size_t batch, size_t h, size_t w, size_t out_h, size_t out_w,
                        float out_min, float out_max, float* out, std::vector<float>& scratch) const {
  if (batch == 0 || out_h == 0 || out_w == 0) return;
  const size_t per_chunk = scratch_floats(w, out_w);
  const size_t chunks = conv_row_chunks(batch, out_h);
  scratch.resize(chunks * per_chunk);
  for_each_conv_row_chunk(batch, out_h, chunks, batch * out_h * out_w * c_ * kh_ * kw_,
                          [&](size_t chunk, size_t b, size_t y0, size_t y1) {
                            run_rows(in + b * h * w * c_, h, w, out_w, y0, y1, out_min, out_max,
                                     out + b * out_h * out_w * c_, scratch.data() + chunk * per_chunk);
                          });
}

}  // namespace etnp::compute
