#include "compute/gemm_kernel.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "compute/gemm.h"
#include "core/cpu_features.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ETNP_GEMM_AVX2 1
#endif
#if defined(__aarch64__)
#include <arm_neon.h>
#define ETNP_GEMM_NEON 1
#endif

namespace etnp::compute {
namespace {

constexpr size_t kMr = kGemmTileRows;
constexpr size_t kNr = kGemmPanel;
constexpr size_t kMrNarrow = 8;  // rows of the tile for a last panel of 8 columns or fewer
constexpr size_t kMrAvx512 = 12;  // rows of the AVX-512 tile (one register a row)

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
                    float lo, float hi, float* c, size_t ldc, size_t nr, bool accumulate, bool clamp,
                    const GemmRowEpilogue* rows, const float* /*next_panel: no prefetch in the portable loops*/) {
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
  if (rows != nullptr) gemm_row_epilogue(c, ldc, MR, nr, *rows);
}

#ifdef ETNP_GEMM_AVX2
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
    v0 = _mm256_min_ps(hi, _mm256_max_ps(lo, v0));
    v1 = _mm256_min_ps(hi, _mm256_max_ps(lo, v1));
  }
  if (nr == kNr) {
    _mm256_storeu_ps(row, v0);
    _mm256_storeu_ps(row + 8, v1);
  } else {
    _mm256_maskstore_ps(row, mask0, v0);
    _mm256_maskstore_ps(row + 8, mask1, v1);
  }
}

/// gemm_row_epilogue on a register of row `r` (of the arrays): a multiply and an add, then max(lo, x) and min(hi, x),
/// which keep x when it is NaN (as the portable compares do).
__attribute__((target("avx2,fma"), always_inline)) inline __m256 row_epilogue_avx2(__m256 v, int r,
                                                                                    const GemmRowEpilogue& ep) {
  if (ep.scale != nullptr) v = _mm256_mul_ps(v, _mm256_broadcast_ss(ep.scale + r));
  if (ep.bias != nullptr) v = _mm256_add_ps(v, _mm256_broadcast_ss(ep.bias + r));
  if (ep.clamp) v = _mm256_min_ps(_mm256_set1_ps(ep.hi), _mm256_max_ps(_mm256_set1_ps(ep.lo), v));
  return v;
}

// Accumulators are named variables (not arrays) so that GCC keeps all twelve in registers.
template <bool Indirect, int MR>
__attribute__((target("avx2,fma"))) void kernel_avx2(size_t segs, const void* a, size_t a_stride, size_t seg_k,
                                                     const float* panel, const float* bias, float lo, float hi,
                                                     float* c, size_t ldc, size_t nr, bool accumulate, bool clamp,
                                                     const GemmRowEpilogue* rows, const float* next_panel) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  // The last panel's columns past n are padding: only the first nr are loaded and stored.
  const __m256i mask0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(nr)), lane);
  const __m256i mask1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(nr) - 8), lane);
  const __m256 bias0 = _mm256_loadu_ps(bias), bias1 = _mm256_loadu_ps(bias + 8);
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
      // Direct: the block the next call reads. Indirect (no next panel): 1 KiB on in this panel, which a single
      // tile streams whole and the panels after it follow in memory (the few pixels of a network's last maps,
      // bound by the weights' bytes). The address is an integer: it may lie past the array, where a prefetch
      // does nothing.
      if (next_panel != nullptr) _mm_prefetch(reinterpret_cast<const char*>(next_panel + p * kNr), _MM_HINT_T0);
      if constexpr (Indirect) {
        _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(panel) + 1024), _MM_HINT_T0);
      }
      const __m256 w0 = _mm256_loadu_ps(panel);
      const __m256 w1 = _mm256_loadu_ps(panel + 8);
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
  if (rows != nullptr) {  // in registers, before the store
    c00 = row_epilogue_avx2(c00, 0, *rows);
    c01 = row_epilogue_avx2(c01, 0, *rows);
    if constexpr (MR > 1) c10 = row_epilogue_avx2(c10, 1, *rows), c11 = row_epilogue_avx2(c11, 1, *rows);
    if constexpr (MR > 2) c20 = row_epilogue_avx2(c20, 2, *rows), c21 = row_epilogue_avx2(c21, 2, *rows);
    if constexpr (MR > 3) c30 = row_epilogue_avx2(c30, 3, *rows), c31 = row_epilogue_avx2(c31, 3, *rows);
    if constexpr (MR > 4) c40 = row_epilogue_avx2(c40, 4, *rows), c41 = row_epilogue_avx2(c41, 4, *rows);
    if constexpr (MR > 5) c50 = row_epilogue_avx2(c50, 5, *rows), c51 = row_epilogue_avx2(c51, 5, *rows);
  }
  const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
  store_row(c, c00, c01, vlo, vhi, clamp, nr, mask0, mask1);
  if constexpr (MR > 1) store_row(c + ldc, c10, c11, vlo, vhi, clamp, nr, mask0, mask1);
  if constexpr (MR > 2) store_row(c + 2 * ldc, c20, c21, vlo, vhi, clamp, nr, mask0, mask1);
  if constexpr (MR > 3) store_row(c + 3 * ldc, c30, c31, vlo, vhi, clamp, nr, mask0, mask1);
  if constexpr (MR > 4) store_row(c + 4 * ldc, c40, c41, vlo, vhi, clamp, nr, mask0, mask1);
  if constexpr (MR > 5) store_row(c + 5 * ldc, c50, c51, vlo, vhi, clamp, nr, mask0, mask1);
}

// The last panel when n % 16 leaves it 8 columns or fewer (n = 24, 40, ...): 8 rows x 8 columns, the same eight
// independent sums per k step as the 6x16 tile, without multiplying the panel's padding half.
template <bool Indirect, int MR>
__attribute__((target("avx2,fma"))) void kernel_narrow_avx2(size_t segs, const void* a, size_t a_stride,
                                                            size_t seg_k, const float* panel, const float* bias,
                                                            float lo, float hi, float* c, size_t ldc, size_t nr,
                                                            bool accumulate, bool clamp, const GemmRowEpilogue* rows,
                                                            const float* /*next_panel*/) {
  const __m256i mask =
      _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(nr)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  const __m256 b = _mm256_loadu_ps(bias);
  __m256 acc[MR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) acc[i] = accumulate ? _mm256_maskload_ps(c + i * ldc, mask) : b;
  for (size_t s = 0; s < (Indirect ? segs : 1); ++s) {  // direct: one segment, no loop
    const float* rows[MR];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) rows[i] = row_segment<Indirect, MR>(a, a_stride, i, s);
    for (size_t p = 0; p < seg_k; ++p) {
      const __m256 w = _mm256_loadu_ps(panel);
      panel += kNr;
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) acc[i] = _mm256_fmadd_ps(_mm256_broadcast_ss(rows[i] + p), w, acc[i]);
    }
  }
  const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    __m256 v = clamp ? _mm256_min_ps(vhi, _mm256_max_ps(vlo, acc[i])) : acc[i];
    if (rows != nullptr) v = row_epilogue_avx2(v, i, *rows);
    _mm256_maskstore_ps(c + i * ldc, mask, v);
  }
}
#endif

// fn(first row, rows) over `rows` rows in tiles of at most max_rows, as even as can be (49 rows by 12: 9, 10, 10,
// 10, 10, not 4 x 12 + 1): a tile of few rows has too few independent sums to hide the multiply-add latency, and
// costs nearly as much as a full one.
template <typename Fn>
inline void for_even_tiles(size_t rows, size_t max_rows, Fn fn) {
  const size_t tiles = (rows + max_rows - 1) / max_rows;
  for (size_t t = 0, r = 0; t < tiles; ++t) {
    const size_t mr = (rows - r) / (tiles - t);
    fn(r, mr);
    r += mr;
  }
}

#ifdef ETNP_GEMM_AVX2
// min(hi, max(lo, v)) as the AVX2 tile (NaN stays); zero-masked forms with a full mask, because GCC 12's
// _mm512_max_ps/_mm512_min_ps read an uninitialized _mm512_undefined_ps() (a -Wmaybe-uninitialized warning).
__attribute__((target("avx512f"), always_inline)) inline __m512 clamp_avx512(__m512 v, __m512 lo, __m512 hi) {
  return _mm512_maskz_min_ps(0xffff, hi, _mm512_maskz_max_ps(0xffff, lo, v));
}

__attribute__((target("avx512f"), always_inline)) inline __m512 row_epilogue_avx512(__m512 v, int r,
                                                                                    const GemmRowEpilogue& ep) {
  if (ep.scale != nullptr) v = _mm512_mul_ps(v, _mm512_set1_ps(ep.scale[r]));
  if (ep.bias != nullptr) v = _mm512_add_ps(v, _mm512_set1_ps(ep.bias[r]));
  if (ep.clamp) v = clamp_avx512(v, _mm512_set1_ps(ep.lo), _mm512_set1_ps(ep.hi));
  return v;
}

// AVX-512 (Zen 4 and 5, Intel since Ice Lake): a panel row is one 512-bit vector, so a tile of up to 12 rows
// keeps 12 independent sums per k step in 12 of the 32 registers, twice the multiply-adds of the AVX2 tile per
// instruction. The sums, their order and their fusion are the AVX2 tile's: both levels give the same bits.
template <bool Indirect, int MR>
__attribute__((target("avx512f"))) void kernel_avx512(size_t segs, const void* a, size_t a_stride, size_t seg_k,
                                                       const float* panel, const float* bias, float lo, float hi,
                                                       float* c, size_t ldc, size_t nr, bool accumulate, bool clamp,
                                                       const GemmRowEpilogue* rows, const float* next_panel) {
  // The last panel's columns past n are padding: only the first nr are loaded and stored.
  const __mmask16 mask = static_cast<__mmask16>(nr >= kNr ? 0xffffu : (1u << nr) - 1u);
  const __m512 b = _mm512_loadu_ps(bias);
  __m512 acc[MR];
#pragma GCC unroll 12
  for (int i = 0; i < MR; ++i) acc[i] = accumulate ? _mm512_maskz_loadu_ps(mask, c + i * ldc) : b;
  if constexpr (!Indirect) {
    // Rows a_stride apart, read through one pointer per three rows (row i at base[i / 3] + (i % 3) * a_stride:
    // x86 addressing scales the stride by 4 and 8): twelve row pointers with the loop's own would not fit the
    // general registers, and GCC spilled three of them inside the loop.
    const float* base[(MR + 2) / 3];
#pragma GCC unroll 4
    for (int j = 0; j < (MR + 2) / 3; ++j) base[j] = static_cast<const float*>(a) + 3 * j * a_stride;
    for (size_t p = 0; p < seg_k; ++p) {
      if (next_panel != nullptr) _mm_prefetch(reinterpret_cast<const char*>(next_panel + p * kNr), _MM_HINT_T0);
      const __m512 w = _mm512_loadu_ps(panel);
      panel += kNr;
#pragma GCC unroll 12
      for (int i = 0; i < MR; ++i) {
        acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(base[i / 3][(i % 3) * a_stride]), w, acc[i]);
      }
#pragma GCC unroll 4
      for (int j = 0; j < (MR + 2) / 3; ++j) ++base[j];
    }
  } else {
    for (size_t s = 0; s < segs; ++s) {
      const float* a_rows[MR];
#pragma GCC unroll 12
      for (int i = 0; i < MR; ++i) a_rows[i] = row_segment<Indirect, MR>(a, a_stride, i, s);
      for (size_t p = 0; p < seg_k; ++p) {
        // As the AVX2 tile: 1 KiB on in this panel (no next panel here).
        _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(panel) + 1024), _MM_HINT_T0);
        const __m512 w = _mm512_loadu_ps(panel);
        panel += kNr;
#pragma GCC unroll 12
        for (int i = 0; i < MR; ++i) acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(a_rows[i][p]), w, acc[i]);
      }
    }
  }
  const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
#pragma GCC unroll 12
  for (int i = 0; i < MR; ++i) {
    __m512 v = acc[i];
    if (rows != nullptr) v = row_epilogue_avx512(v, i, *rows);  // in registers, before the store (as AVX2)
    if (clamp) v = clamp_avx512(v, vlo, vhi);
    _mm512_mask_storeu_ps(c + i * ldc, mask, v);
  }
}

// Two neighbouring panels (32 columns): each row's value of a k step is loaded once for both, and 24 independent
// sums hide the multiply-add latency at any tile height. The per-element sums are the one-panel tile's. `nr`
// counts the pair's columns (17 to 32); the second panel is panel_stride floats after the first. Rows as
// kernel_avx512's: direct (a matrix, segs == 1) or indirect (segs runs of seg_k floats per row); indirect tiles
// have at most 8 rows, so that their row pointers stay in the general registers.
template <bool Indirect, int MR>
__attribute__((target("avx512f"))) void kernel_pair_avx512(const void* a, size_t a_stride, size_t segs, size_t seg_k,
                                                            const float* panel, size_t panel_stride,
                                                            const float* bias, const float* lo_hi, float* c,
                                                            size_t ldc, size_t nr, bool accumulate, bool clamp,
                                                            const float* next_panel) {
  // The clamp's bounds come through memory, read after the loop: as float arguments they would hold two vector
  // registers through it, and GCC then spilled a panel row at 12 rows.
  const __mmask16 mask1 = static_cast<__mmask16>(nr >= 2 * kNr ? 0xffffu : (1u << (nr - kNr)) - 1u);
  const __m512 b0 = _mm512_loadu_ps(bias), b1 = _mm512_loadu_ps(bias + kNr);
  __m512 acc0[MR], acc1[MR];
#pragma GCC unroll 12
  for (int i = 0; i < MR; ++i) {
    acc0[i] = accumulate ? _mm512_loadu_ps(c + i * ldc) : b0;
    acc1[i] = accumulate ? _mm512_maskz_loadu_ps(mask1, c + i * ldc + kNr) : b1;
  }
  if constexpr (!Indirect) {
    const float* base[(MR + 2) / 3];  // as kernel_avx512's direct rows
#pragma GCC unroll 4
    for (int j = 0; j < (MR + 2) / 3; ++j) base[j] = static_cast<const float*>(a) + 3 * j * a_stride;
    for (size_t p = 0; p < seg_k; ++p) {
      if (next_panel != nullptr) _mm_prefetch(reinterpret_cast<const char*>(next_panel + p * kNr), _MM_HINT_T0);
      const __m512 w0 = _mm512_loadu_ps(panel), w1 = _mm512_loadu_ps(panel + panel_stride);
      panel += kNr;
#pragma GCC unroll 12
      for (int i = 0; i < MR; ++i) {
        const __m512 x = _mm512_set1_ps(base[i / 3][(i % 3) * a_stride]);
        acc0[i] = _mm512_fmadd_ps(x, w0, acc0[i]);
        acc1[i] = _mm512_fmadd_ps(x, w1, acc1[i]);
      }
#pragma GCC unroll 4
      for (int j = 0; j < (MR + 2) / 3; ++j) ++base[j];
    }
  } else {
    for (size_t s = 0; s < segs; ++s) {
      const float* a_rows[MR];
#pragma GCC unroll 12
      for (int i = 0; i < MR; ++i) a_rows[i] = row_segment<true, MR>(a, a_stride, i, s);
      for (size_t p = 0; p < seg_k; ++p) {
        const __m512 w0 = _mm512_loadu_ps(panel), w1 = _mm512_loadu_ps(panel + panel_stride);
        panel += kNr;
#pragma GCC unroll 12
        for (int i = 0; i < MR; ++i) {
          const __m512 x = _mm512_set1_ps(a_rows[i][p]);
          acc0[i] = _mm512_fmadd_ps(x, w0, acc0[i]);
          acc1[i] = _mm512_fmadd_ps(x, w1, acc1[i]);
        }
      }
    }
  }
  const __m512 vlo = _mm512_set1_ps(lo_hi[0]), vhi = _mm512_set1_ps(lo_hi[1]);
#pragma GCC unroll 12
  for (int i = 0; i < MR; ++i) {
    _mm512_storeu_ps(c + i * ldc, clamp ? clamp_avx512(acc0[i], vlo, vhi) : acc0[i]);
    _mm512_mask_storeu_ps(c + i * ldc + kNr, mask1, clamp ? clamp_avx512(acc1[i], vlo, vhi) : acc1[i]);
  }
}
#endif

#ifdef ETNP_GEMM_NEON
// The NEON twins: the same tiles, sums and order as the AVX2 kernels (one fused multiply-add per k from the
// bias or the stored sums), so both vector levels give the same bits. A row of 16 columns is four q registers.

// Rows of a last panel narrower than 16 columns go through a 16-float buffer (NEON has no masked load/store).
template <int V>
inline void load_row_neon(const float* row, float32x4_t (&v)[V], size_t nr) {
  float buf[4 * V] = {};
  const float* src = row;
  if (nr < 4 * V) {
    std::memcpy(buf, row, nr * sizeof(float));
    src = buf;
  }
#pragma GCC unroll 4
  for (int j = 0; j < V; ++j) v[j] = vld1q_f32(src + 4 * j);
}

template <int V>
inline void store_row_neon(float* row, float32x4_t (&v)[V], float32x4_t lo, float32x4_t hi, bool clamp, size_t nr) {
  if (clamp) {
#pragma GCC unroll 4
    for (int j = 0; j < V; ++j) v[j] = vminq_f32(vmaxq_f32(v[j], lo), hi);
  }
  if (nr >= 4 * V) {
#pragma GCC unroll 4
    for (int j = 0; j < V; ++j) vst1q_f32(row + 4 * j, v[j]);
    return;
  }
  float buf[4 * V];
#pragma GCC unroll 4
  for (int j = 0; j < V; ++j) vst1q_f32(buf + 4 * j, v[j]);
  std::memcpy(row, buf, nr * sizeof(float));
}

// The lane intrinsics need constant lanes; the callers' lanes are constants once their loops are unrolled, but
// not in an unoptimized build, hence the switches (which fold away).

// x with lane `lane` loaded from p (LD1 to a lane; lane 0 broadcasts, starting a new vector).
[[gnu::always_inline]] inline float32x4_t load_lane(const float* p, float32x4_t x, int lane) {
  switch (lane) {
    case 0: return vld1q_dup_f32(p);
    case 1: return vld1q_lane_f32(p, x, 1);
    case 2: return vld1q_lane_f32(p, x, 2);
    default: return vld1q_lane_f32(p, x, 3);
  }
}

// acc + w * x[lane] (FMLA by element).
[[gnu::always_inline]] inline float32x4_t fma_lane(float32x4_t acc, float32x4_t w, float32x4_t x, int lane) {
  switch (lane) {
    case 0: return vfmaq_laneq_f32(acc, w, x, 0);
    case 1: return vfmaq_laneq_f32(acc, w, x, 1);
    case 2: return vfmaq_laneq_f32(acc, w, x, 2);
    default: return vfmaq_laneq_f32(acc, w, x, 3);
  }
}

// MR x 16 tile: 4 * MR accumulators (24 of the 32 q registers at MR = 6), the panel row's four vectors, and
// A's MR floats of the k step gathered into the lanes of two vectors (six separate scalars would need 34
// registers, and GCC spilled accumulators); 96 multiply-adds per k step at MR = 6. With V = 2 (the narrow form,
// MR up to 8) only the panel's first 8 columns are multiplied: a last panel of 8 columns or fewer.
template <bool Indirect, int MR, int V>
void kernel_neon(size_t segs, const void* a, size_t a_stride, size_t seg_k, const float* panel, const float* bias,
                 float lo, float hi, float* c, size_t ldc, size_t nr, bool accumulate, bool clamp,
                 const GemmRowEpilogue* rows, const float* next_panel) {
  float32x4_t acc[MR][V];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    if (accumulate) {
      load_row_neon<V>(c + i * ldc, acc[i], nr);
    } else {
#pragma GCC unroll 4
      for (int j = 0; j < V; ++j) acc[i][j] = vld1q_f32(bias + 4 * j);
    }
  }
  for (size_t s = 0; s < (Indirect ? segs : 1); ++s) {  // direct: one segment, no loop
    const float* rows[MR];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) rows[i] = row_segment<Indirect, MR>(a, a_stride, i, s);
    for (size_t p = 0; p < seg_k; ++p) {
      if (next_panel != nullptr) __builtin_prefetch(next_panel + p * kNr);
      float32x4_t w[V];
#pragma GCC unroll 4
      for (int j = 0; j < V; ++j) w[j] = vld1q_f32(panel + 4 * j);
      panel += kNr;
      float32x4_t x[(MR + 3) / 4] = {};
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) x[i / 4] = load_lane(rows[i] + p, x[i / 4], i % 4);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
        for (int j = 0; j < V; ++j) acc[i][j] = fma_lane(acc[i][j], w[j], x[i / 4], i % 4);
      }
    }
  }
  const float32x4_t vlo = vdupq_n_f32(lo), vhi = vdupq_n_f32(hi);
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) store_row_neon<V>(c + i * ldc, acc[i], vlo, vhi, clamp, nr);
  if (rows != nullptr) gemm_row_epilogue(c, ldc, MR, nr, *rows);  // on the stored rows, as the portable level
}
#endif

using Kernel = void (*)(size_t, const void*, size_t, size_t, const float*, const float*, float, float, float*, size_t,
                        size_t, bool, bool, const GemmRowEpilogue*, const float*);

template <bool Indirect>
Kernel kernel_for(size_t mr) {
#ifdef ETNP_GEMM_AVX2
  if (has_avx2_fma()) {
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
#ifdef ETNP_GEMM_NEON
  if (has_neon()) {
    static constexpr Kernel kNeon[] = {nullptr,
                                       kernel_neon<Indirect, 1, 4>,
                                       kernel_neon<Indirect, 2, 4>,
                                       kernel_neon<Indirect, 3, 4>,
                                       kernel_neon<Indirect, 4, 4>,
                                       kernel_neon<Indirect, 5, 4>,
                                       kernel_neon<Indirect, 6, 4>};
    return kNeon[mr];
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

// One panel's tiles over `rows` rows: 6x16 tiles (12x16 with AVX-512), or 8x8 ones for a last panel of 8
// columns or fewer. `a` is the matrix (direct) or the row pointers (indirect); row r's tile starts at
// a + r * a_stride either way.
template <bool Indirect, typename A>
void run_panel(const A* a, size_t a_stride, size_t rows, size_t segs, size_t seg_k, const float* panel,
               const GemmPanelOut& out, const float* next_panel) {
  alignas(32) static constexpr float kZero[kNr] = {};
  const float* bias = out.bias != nullptr ? out.bias : kZero;
  const size_t nr = out.cols;
  const Kernel* narrow = nullptr;  // the 8x8 kernels of this CPU's vector level, if it has them
#ifdef ETNP_GEMM_AVX2
  static constexpr Kernel kNarrowAvx2[] = {nullptr,
                                           kernel_narrow_avx2<Indirect, 1>,
                                           kernel_narrow_avx2<Indirect, 2>,
                                           kernel_narrow_avx2<Indirect, 3>,
                                           kernel_narrow_avx2<Indirect, 4>,
                                           kernel_narrow_avx2<Indirect, 5>,
                                           kernel_narrow_avx2<Indirect, 6>,
                                           kernel_narrow_avx2<Indirect, 7>,
                                           kernel_narrow_avx2<Indirect, 8>};
  if (has_avx2_fma()) narrow = kNarrowAvx2;
#endif
#ifdef ETNP_GEMM_NEON
  static constexpr Kernel kNarrowNeon[] = {nullptr,
                                           kernel_neon<Indirect, 1, 2>,
                                           kernel_neon<Indirect, 2, 2>,
                                           kernel_neon<Indirect, 3, 2>,
                                           kernel_neon<Indirect, 4, 2>,
                                           kernel_neon<Indirect, 5, 2>,
                                           kernel_neon<Indirect, 6, 2>,
                                           kernel_neon<Indirect, 7, 2>,
                                           kernel_neon<Indirect, 8, 2>};
  if (has_neon()) narrow = kNarrowNeon;
#endif
  // The row epilogue's arrays, offset to each kernel call's first row.
  GemmRowEpilogue tile_rows;
  auto rows_from = [&](size_t r) -> const GemmRowEpilogue* {
    if (out.rows == nullptr) return nullptr;
    tile_rows = *out.rows;
    if (tile_rows.scale != nullptr) tile_rows.scale += r;
    if (tile_rows.bias != nullptr) tile_rows.bias += r;
    return &tile_rows;
  };
  if (nr <= 8 && narrow != nullptr) {
    for (size_t r = 0; r < rows; r += kMrNarrow) {
      narrow[std::min(kMrNarrow, rows - r)](segs, a + r * a_stride, a_stride, seg_k, panel, bias, out.lo, out.hi,
                                            out.c + r * out.ldc, out.ldc, nr, out.accumulate, out.clamp, rows_from(r),
                                            nullptr);
    }
    return;
  }
#ifdef ETNP_GEMM_AVX2
  if (cpu_level() >= CpuLevel::avx512_vnni) {
    static constexpr Kernel kAvx512[] = {
        nullptr,
        kernel_avx512<Indirect, 1>,  kernel_avx512<Indirect, 2>,  kernel_avx512<Indirect, 3>,
        kernel_avx512<Indirect, 4>,  kernel_avx512<Indirect, 5>,  kernel_avx512<Indirect, 6>,
        kernel_avx512<Indirect, 7>,  kernel_avx512<Indirect, 8>,  kernel_avx512<Indirect, 9>,
        kernel_avx512<Indirect, 10>, kernel_avx512<Indirect, 11>, kernel_avx512<Indirect, 12>};
    for_even_tiles(rows, kMrAvx512, [&](size_t r, size_t mr) {
      kAvx512[mr](segs, a + r * a_stride, a_stride, seg_k, panel, bias, out.lo, out.hi, out.c + r * out.ldc, out.ldc,
                  nr, out.accumulate, out.clamp, rows_from(r), r == 0 ? next_panel : nullptr);
    });
    return;
  }
#endif
  for (size_t r = 0; r < rows; r += kMr) {
    kernel_for<Indirect>(std::min(kMr, rows - r))(segs, a + r * a_stride, a_stride, seg_k, panel, bias, out.lo,
                                                  out.hi, out.c + r * out.ldc, out.ldc, nr, out.accumulate, out.clamp,
                                                  rows_from(r), r == 0 ? next_panel : nullptr);
  }
}

}  // namespace

void gemm_row_epilogue(float* c, size_t ldc, size_t rows, size_t cols, const GemmRowEpilogue& ep) {
  for (size_t r = 0; r < rows; ++r) {
    float* __restrict row = c + r * ldc;
    if (ep.scale != nullptr) {
      const float s = ep.scale[r];
      for (size_t j = 0; j < cols; ++j) row[j] *= s;
    }
    if (ep.bias != nullptr) {
      const float b = ep.bias[r];
      for (size_t j = 0; j < cols; ++j) row[j] += b;
    }
    if (ep.clamp) {
      const float lo = ep.lo, hi = ep.hi;
      for (size_t j = 0; j < cols; ++j) row[j] = clamp_keep_nan(row[j], lo, hi);
    }
  }
}

void gemm_panel_f32(const float* a, size_t a_stride, size_t rows, size_t k, const float* panel,
                    const GemmPanelOut& out, const float* next_panel) {
  run_panel<false>(a, a_stride, rows, 1, k, panel, out, next_panel);
}

namespace {

// The pair tiles over `rows` rows (for_even_tiles of at most 12 rows, 8 indirect); false where the CPU has none.
template <bool Indirect>
bool run_pair(const void* a, size_t a_stride, size_t rows, size_t segs, size_t seg_k, const float* panel,
              size_t panel_stride, const GemmPanelOut& out, const float* next_panel) {
#ifdef ETNP_GEMM_AVX2
  if (cpu_level() < CpuLevel::avx512_vnni || out.rows != nullptr || out.cols <= kNr) return false;
  using PairKernel = void (*)(const void*, size_t, size_t, size_t, const float*, size_t, const float*, const float*,
                              float*, size_t, size_t, bool, bool, const float*);
  static constexpr PairKernel kIndirect[] = {
      nullptr,
      kernel_pair_avx512<true, 1>, kernel_pair_avx512<true, 2>, kernel_pair_avx512<true, 3>,
      kernel_pair_avx512<true, 4>, kernel_pair_avx512<true, 5>, kernel_pair_avx512<true, 6>,
      kernel_pair_avx512<true, 7>, kernel_pair_avx512<true, 8>};
  static constexpr PairKernel kDirect[] = {
      nullptr,
      kernel_pair_avx512<false, 1>,  kernel_pair_avx512<false, 2>,  kernel_pair_avx512<false, 3>,
      kernel_pair_avx512<false, 4>,  kernel_pair_avx512<false, 5>,  kernel_pair_avx512<false, 6>,
      kernel_pair_avx512<false, 7>,  kernel_pair_avx512<false, 8>,  kernel_pair_avx512<false, 9>,
      kernel_pair_avx512<false, 10>, kernel_pair_avx512<false, 11>, kernel_pair_avx512<false, 12>};
  const PairKernel* kPair = Indirect ? kIndirect : kDirect;
  constexpr size_t max_rows = Indirect ? 8 : kMrAvx512;
  alignas(64) static constexpr float kZero[2 * kNr] = {};
  const float* bias = out.bias != nullptr ? out.bias : kZero;
  const float lo_hi[2] = {out.lo, out.hi};
  for_even_tiles(rows, max_rows, [&](size_t r, size_t mr) {
    const void* tile_a = Indirect ? static_cast<const void*>(static_cast<const float* const*>(a) + r * a_stride)
                                  : static_cast<const void*>(static_cast<const float*>(a) + r * a_stride);
    kPair[mr](tile_a, a_stride, segs, seg_k, panel, panel_stride, bias, lo_hi, out.c + r * out.ldc, out.ldc, out.cols,
              out.accumulate, out.clamp, r == 0 ? next_panel : nullptr);
  });
  return true;
#else
  (void)a, (void)a_stride, (void)rows, (void)segs, (void)seg_k, (void)panel, (void)panel_stride, (void)out;
  (void)next_panel;
  return false;
#endif
}

}  // namespace

bool gemm_panel_pair_f32(const float* a, size_t a_stride, size_t rows, size_t k, const float* panel,
                         size_t panel_stride, const GemmPanelOut& out, const float* next_panel) {
  return run_pair<false>(a, a_stride, rows, 1, k, panel, panel_stride, out, next_panel);
}

bool gemm_panel_pair_f32_indirect(const float* const* a, size_t a_stride, size_t rows, size_t segs, size_t seg_k,
                                  const float* panel, size_t panel_stride, const GemmPanelOut& out) {
  return run_pair<true>(a, a_stride, rows, segs, seg_k, panel, panel_stride, out, nullptr);
}

void gemm_panel_f32_indirect(const float* const* a, size_t a_stride, size_t rows, size_t segs, size_t seg_k,
                             const float* panel, const GemmPanelOut& out) {
  run_panel<true>(a, a_stride, rows, segs, seg_k, panel, out, nullptr);
}

}  // namespace etnp::compute
