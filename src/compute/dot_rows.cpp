#include "compute/dot_rows.h"

#include <algorithm>
#include <cmath>

#include "compute/gemm.h"
#include "compute/parallel.h"
#include "core/cpu_features.h"
#include "etnp/threadpool.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ETNP_DOT_AVX2 1
#endif
#if defined(__aarch64__)
#include <arm_neon.h>
#define ETNP_DOT_NEON 1
#endif

namespace etnp::compute {
namespace {

/// Rows of `a` and columns (weight rows) one block multiplies: 4 x 3 sums of 8 lanes, three weight vectors and
/// one of `a` fill AVX2's 16 registers (a microbenchmark of ResNet-18's last 3x3 convolution, 4 rows by 512
/// weight rows of 4608: 4 x 3 about 500 us, 4 x 2 625-670, 4 x 4 and 2 x 4 slower).
constexpr size_t kBlockRows = 4, kBlockCols = 3;
/// How far ahead (in floats) each weight row is fetched into the cache. The weights are read where the program
/// file is mapped, in 4 KiB pages, across which the hardware prefetcher does not run: without it the last 3x3
/// convolutions of ResNet-18 read their weights 15-20% slower than from a packed copy in huge pages; with it, as
/// fast (256 measured best of 128-2048).
constexpr size_t kPrefetchFloats = 256;

/// The 8 partial sums of one dot product added in the order every level uses: ((0+4)+(2+6)) + ((1+5)+(3+7)).
inline float add_lanes(const float* l) { return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7])); }

/// The elements past the last whole 8, one at a time after the lanes' sum.
inline float add_tail(float s, const float* a, const float* w, size_t k8, size_t k) {
  for (size_t i = k8; i < k; ++i) s = std::fma(a[i], w[i], s);
  return s;
}

/// sums[j * R + r] = a_r . w_j for r < R, j < J.
using Dots = void (*)(const float* a, size_t lda, const float* w, size_t ldw, size_t k, float* sums);

template <int R, int J>
void dots_portable(const float* a, size_t lda, const float* w, size_t ldw, size_t k, float* sums) {
  float acc[J][R][8] = {};
  const size_t k8 = k & ~size_t{7};
  for (size_t i = 0; i < k8; i += 8) {
    for (int j = 0; j < J; ++j) {
      for (int r = 0; r < R; ++r) {
        for (int l = 0; l < 8; ++l) acc[j][r][l] = std::fma(a[r * lda + i + l], w[j * ldw + i + l], acc[j][r][l]);
      }
    }
  }
  for (int j = 0; j < J; ++j) {
    for (int r = 0; r < R; ++r) sums[j * R + r] = add_tail(add_lanes(acc[j][r]), a + r * lda, w + j * ldw, k8, k);
  }
}

#ifdef ETNP_DOT_AVX2
template <int R, int J>
__attribute__((target("avx2,fma"))) void dots_avx2(const float* a, size_t lda, const float* w, size_t ldw, size_t k,
                                                   float* sums) {
  __m256 acc[J][R];
#pragma GCC unroll 8
  for (int j = 0; j < J; ++j) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[j][r] = _mm256_setzero_ps();
  }
  const size_t k8 = k & ~size_t{7};
  for (size_t i = 0; i < k8; i += 8) {
    __m256 wv[J];
#pragma GCC unroll 8
    for (int j = 0; j < J; ++j) {
      _mm_prefetch(reinterpret_cast<const char*>(w + j * ldw + i + kPrefetchFloats), _MM_HINT_T0);
      wv[j] = _mm256_loadu_ps(w + j * ldw + i);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 av = _mm256_loadu_ps(a + r * lda + i);
#pragma GCC unroll 8
      for (int j = 0; j < J; ++j) acc[j][r] = _mm256_fmadd_ps(av, wv[j], acc[j][r]);
    }
  }
  for (int j = 0; j < J; ++j) {
    for (int r = 0; r < R; ++r) {
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, acc[j][r]);
      sums[j * R + r] = add_tail(add_lanes(lanes), a + r * lda, w + j * ldw, k8, k);
    }
  }
}
#endif

#ifdef ETNP_DOT_AVX2
/// x_l = lane l + lane l+4 (l < 4) of two sums at once: [x0..x3 of p | x0..x3 of q].
__attribute__((target("avx2,fma"))) inline __m256 fold_halves(__m256 p, __m256 q) {
  return _mm256_add_ps(_mm256_permute2f128_ps(p, q, 0x20), _mm256_permute2f128_ps(p, q, 0x31));
}

/// One row of `a` by 8 weight rows (sums[j] = a . w_j), the shape of a language model's decoding step: the block
/// kernels keep 3 sums in flight there, which leaves the FMA units waiting on their latency; 8 keep both busy.
/// The partial sums are added in the same order as add_lanes (so the results equal the block kernels'), eight
/// dot products at a time across the registers' lanes.
__attribute__((target("avx2,fma"))) void dots_row8_avx2(const float* a, const float* w, size_t ldw, size_t k,
                                                        float* sums) {
  constexpr int J = 8;
  __m256 acc[J];
#pragma GCC unroll 8
  for (int j = 0; j < J; ++j) acc[j] = _mm256_setzero_ps();
  const size_t k8 = k & ~size_t{7};
  size_t i = 0;
  for (; i + 16 <= k8; i += 16) {  // one cache line of each weight row per step, fetched ahead once
    const __m256 a0 = _mm256_loadu_ps(a + i), a1 = _mm256_loadu_ps(a + i + 8);
#pragma GCC unroll 8
    for (int j = 0; j < J; ++j) {
      _mm_prefetch(reinterpret_cast<const char*>(w + j * ldw + i + kPrefetchFloats), _MM_HINT_T0);
    }
#pragma GCC unroll 8
    for (int j = 0; j < J; ++j) acc[j] = _mm256_fmadd_ps(a0, _mm256_loadu_ps(w + j * ldw + i), acc[j]);
#pragma GCC unroll 8
    for (int j = 0; j < J; ++j) acc[j] = _mm256_fmadd_ps(a1, _mm256_loadu_ps(w + j * ldw + i + 8), acc[j]);
  }
  if (i < k8) {
    const __m256 a0 = _mm256_loadu_ps(a + i);
#pragma GCC unroll 8
    for (int j = 0; j < J; ++j) acc[j] = _mm256_fmadd_ps(a0, _mm256_loadu_ps(w + j * ldw + i), acc[j]);
  }
  const __m256 x01 = fold_halves(acc[0], acc[1]), x23 = fold_halves(acc[2], acc[3]);
  const __m256 x45 = fold_halves(acc[4], acc[5]), x67 = fold_halves(acc[6], acc[7]);
  // y0 = x0 + x2, y1 = x1 + x3: [y0 y1 of sum 0, y0 y1 of 2 | y0 y1 of 1, y0 y1 of 3], and of sums 4-7.
  const __m256 y0123 = _mm256_add_ps(_mm256_shuffle_ps(x01, x23, _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm256_shuffle_ps(x01, x23, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m256 y4567 = _mm256_add_ps(_mm256_shuffle_ps(x45, x67, _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm256_shuffle_ps(x45, x67, _MM_SHUFFLE(3, 2, 3, 2)));
  // y0 + y1: [sums 0 2 4 6 | 1 3 5 7], put in order.
  const __m256 z = _mm256_add_ps(_mm256_shuffle_ps(y0123, y4567, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm256_shuffle_ps(y0123, y4567, _MM_SHUFFLE(3, 1, 3, 1)));
  _mm256_storeu_ps(sums, _mm256_permutevar8x32_ps(z, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  if (k8 < k) {
    for (int j = 0; j < J; ++j) sums[j] = add_tail(sums[j], a, w + j * ldw, k8, k);
  }
}
#endif

#ifdef ETNP_DOT_NEON
template <int R, int J>
void dots_neon(const float* a, size_t lda, const float* w, size_t ldw, size_t k, float* sums) {
  float32x4_t lo[J][R], hi[J][R];  // lanes 0-3 and 4-7 of the 8 partial sums
#pragma GCC unroll 8
  for (int j = 0; j < J; ++j) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) lo[j][r] = hi[j][r] = vdupq_n_f32(0.0f);
  }
  const size_t k8 = k & ~size_t{7};
  for (size_t i = 0; i < k8; i += 8) {
    float32x4_t w0[J], w1[J];
#pragma GCC unroll 8
    for (int j = 0; j < J; ++j) {
      __builtin_prefetch(w + j * ldw + i + kPrefetchFloats);
      w0[j] = vld1q_f32(w + j * ldw + i);
      w1[j] = vld1q_f32(w + j * ldw + i + 4);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const float32x4_t a0 = vld1q_f32(a + r * lda + i), a1 = vld1q_f32(a + r * lda + i + 4);
#pragma GCC unroll 8
      for (int j = 0; j < J; ++j) lo[j][r] = vfmaq_f32(lo[j][r], a0, w0[j]), hi[j][r] = vfmaq_f32(hi[j][r], a1, w1[j]);
    }
  }
  for (int j = 0; j < J; ++j) {
    for (int r = 0; r < R; ++r) {
      float lanes[8];
      vst1q_f32(lanes, lo[j][r]);
      vst1q_f32(lanes + 4, hi[j][r]);
      sums[j * R + r] = add_tail(add_lanes(lanes), a + r * lda, w + j * ldw, k8, k);
    }
  }
}
#endif

/// The block kernels of the best level this CPU has, indexed [cols - 1][rows - 1].
using DotsTable = Dots[kBlockCols][kBlockRows];
#define ETNP_DOTS_TABLE(f) \
  {{f<1, 1>, f<2, 1>, f<3, 1>, f<4, 1>}, {f<1, 2>, f<2, 2>, f<3, 2>, f<4, 2>}, {f<1, 3>, f<2, 3>, f<3, 3>, f<4, 3>}}

#ifdef ETNP_DOT_AVX2
const DotsTable& dots_avx2_table() {
  static constexpr DotsTable kAvx2 = ETNP_DOTS_TABLE(dots_avx2);
  return kAvx2;
}
#endif

const DotsTable& dots_table() {
#ifdef ETNP_DOT_AVX2
  if (has_avx2_fma()) return dots_avx2_table();
#endif
#ifdef ETNP_DOT_NEON
  static constexpr DotsTable kNeon = ETNP_DOTS_TABLE(dots_neon);
  if (has_neon()) return kNeon;
#endif
  static constexpr DotsTable kPortable = ETNP_DOTS_TABLE(dots_portable);
  return kPortable;
}
#undef ETNP_DOTS_TABLE

inline float output_pass(float s, size_t j, const DotRowsOut& out) {
  if (out.scale != nullptr) s = s * out.scale[j];
  if (out.bias != nullptr) s = s + out.bias[j];
  return out.clamp ? clamp_keep_nan(s, out.lo, out.hi) : s;
}

}  // namespace

void dot_rows_f32(const float* a, size_t lda, size_t rows, const float* w, size_t ldw, size_t n, size_t k,
                  const DotRowsOut& out, ThreadPool* pool) {
  if (rows == 0 || n == 0) return;
  const DotsTable& table = dots_table();
  bool row8 = false;  // one row by eight columns at a time (dots_row8_avx2), the last n % 8 as below
#ifdef ETNP_DOT_AVX2
  row8 = rows == 1 && &table == &dots_avx2_table();
#endif
  // Columns [j0, j1) of every row: kBlockCols weight rows at a time, read from memory once and multiplied by
  // each block of rows of `a` from the cache.
  auto columns = [&](size_t j0, size_t j1) {
    float sums[kBlockCols * kBlockRows];
#ifdef ETNP_DOT_AVX2
    if (row8) {
      alignas(32) float eight[8];
      for (; j0 + 8 <= j1; j0 += 8) {
        dots_row8_avx2(a, w + j0 * ldw, ldw, k, eight);
        for (size_t jj = 0; jj < 8; ++jj) out.c[(j0 + jj) * out.col_stride] = output_pass(eight[jj], j0 + jj, out);
      }
    }
#endif
    for (size_t j = j0; j < j1; j += kBlockCols) {
      const size_t jn = std::min(kBlockCols, j1 - j);
      for (size_t p = 0; p < rows; p += kBlockRows) {
        const size_t rn = std::min(kBlockRows, rows - p);
        table[jn - 1][rn - 1](a + p * lda, lda, w + j * ldw, ldw, k, sums);
        for (size_t jj = 0; jj < jn; ++jj) {
          for (size_t r = 0; r < rn; ++r) {
            out.c[(p + r) * out.row_stride + (j + jj) * out.col_stride] = output_pass(sums[jj * rn + r], j + jj, out);
          }
        }
      }
    }
  };
  const size_t block_cols = row8 ? 8 : kBlockCols;
  const size_t blocks = (n + block_cols - 1) / block_cols;
  const size_t block_work = block_cols * rows * k;
  if (pool == nullptr || pool->num_threads() < 2 || blocks < 2 || blocks * block_work < kParallelWork) {
    columns(0, n);
    return;
  }
  const size_t grain = std::max<size_t>(1, kParallelWork / std::max<size_t>(1, block_work));
  pool->parallel_for(blocks, grain, [&](size_t begin, size_t end) {
    columns(begin * block_cols, std::min(n, end * block_cols));
  });
}

}  // namespace etnp::compute
