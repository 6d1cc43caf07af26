#include "compute/gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "compute/gemm_kernel.h"
#include "core/cpu_features.h"
#include "etnp/threadpool.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ETNP_GEMM_X86 1
#endif
#if defined(__aarch64__)
#include <arm_neon.h>
#define ETNP_GEMM_NEON 1
#endif

namespace etnp::compute {
namespace {

// Register tile (rows of A x columns of B, the micro-kernel's) and cache blocks. A packed MC x KC block
// (144 KiB) stays in L2, a packed KC x NR micro-panel of B (16 KiB) in L1.
constexpr int64_t kMR = static_cast<int64_t>(kGemmTileRows);
constexpr int64_t kNR = static_cast<int64_t>(kGemmPanel);
constexpr int64_t kKC = 256;
constexpr int64_t kMCMax = 144;   // multiple of kMR
constexpr int64_t kNCMax = 1024;  // multiple of kNR

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---------------------------------------------------------------------------------------------------------
// Packing. A block (mc x kc) -> mc contiguous rows of kc floats (the micro-kernel reads A by rows); B block
// (kc x nc) -> panels of kNR columns, each kc x kNR, zero-padded past nc.

void pack_a(const GemmMatrix& a, int64_t i0, int64_t mc, int64_t p0, int64_t kc, float* dst) {
  for (int64_t i = 0; i < mc; ++i) {
    const float* src = a.data + (i0 + i) * a.row_stride + p0 * a.col_stride;
    float* row = dst + i * kc;
    for (int64_t p = 0; p < kc; ++p) row[p] = src[p * a.col_stride];
  }
}

#if ETNP_GEMM_X86
/// panel[p][j] = src[j * ld + p] for a full kNR-column panel: src holds kNR rows (the columns of B), each kc
/// contiguous floats.
__attribute__((target("avx2,fma"))) void pack_b_panel_transposed_avx2(const float* src, int64_t ld, int64_t kc,
                                                                      float* panel) {
  int64_t p = 0;
  for (; p + 8 <= kc; p += 8) {
    for (int64_t half = 0; half < kNR; half += 8) {
      const float* s0 = src + half * ld + p;
      __m256 r0 = _mm256_loadu_ps(s0), r1 = _mm256_loadu_ps(s0 + ld), r2 = _mm256_loadu_ps(s0 + 2 * ld),
             r3 = _mm256_loadu_ps(s0 + 3 * ld), r4 = _mm256_loadu_ps(s0 + 4 * ld), r5 = _mm256_loadu_ps(s0 + 5 * ld),
             r6 = _mm256_loadu_ps(s0 + 6 * ld), r7 = _mm256_loadu_ps(s0 + 7 * ld);
      // 8x8 transpose: interleave pairs, then quads, then swap 128-bit halves.
      const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
      const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
      const __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
      const __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
      const __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
      const __m256 u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
      const __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
      const __m256 u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
      const __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
      const __m256 u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
      const __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
      const __m256 u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
      r0 = _mm256_permute2f128_ps(u0, u4, 0x20);
      r1 = _mm256_permute2f128_ps(u1, u5, 0x20);
      r2 = _mm256_permute2f128_ps(u2, u6, 0x20);
      r3 = _mm256_permute2f128_ps(u3, u7, 0x20);
      r4 = _mm256_permute2f128_ps(u0, u4, 0x31);
      r5 = _mm256_permute2f128_ps(u1, u5, 0x31);
      r6 = _mm256_permute2f128_ps(u2, u6, 0x31);
      r7 = _mm256_permute2f128_ps(u3, u7, 0x31);
      float* d = panel + p * kNR + half;
      _mm256_storeu_ps(d + 0 * kNR, r0);
      _mm256_storeu_ps(d + 1 * kNR, r1);
      _mm256_storeu_ps(d + 2 * kNR, r2);
      _mm256_storeu_ps(d + 3 * kNR, r3);
      _mm256_storeu_ps(d + 4 * kNR, r4);
      _mm256_storeu_ps(d + 5 * kNR, r5);
      _mm256_storeu_ps(d + 6 * kNR, r6);
      _mm256_storeu_ps(d + 7 * kNR, r7);
    }
  }
  for (; p < kc; ++p) {
    for (int64_t j = 0; j < kNR; ++j) panel[p * kNR + j] = src[j * ld + p];
  }
}
#endif

#if ETNP_GEMM_NEON
/// The NEON twin of pack_b_panel_transposed_avx2, in 4x4 transposes.
void pack_b_panel_transposed_neon(const float* src, int64_t ld, int64_t kc, float* panel) {
  int64_t p = 0;
  for (; p + 4 <= kc; p += 4) {
    for (int64_t j = 0; j < kNR; j += 4) {
      const float* s0 = src + j * ld + p;
      const float32x4_t r0 = vld1q_f32(s0), r1 = vld1q_f32(s0 + ld), r2 = vld1q_f32(s0 + 2 * ld),
                        r3 = vld1q_f32(s0 + 3 * ld);
      // Interleave pairs of rows (t0 = r0[0] r1[0] r0[2] r1[2], ...), then their 64-bit halves.
      const float64x2_t t0 = vreinterpretq_f64_f32(vtrn1q_f32(r0, r1));
      const float64x2_t t1 = vreinterpretq_f64_f32(vtrn2q_f32(r0, r1));
      const float64x2_t t2 = vreinterpretq_f64_f32(vtrn1q_f32(r2, r3));
      const float64x2_t t3 = vreinterpretq_f64_f32(vtrn2q_f32(r2, r3));
      float* d = panel + p * kNR + j;
      vst1q_f32(d + 0 * kNR, vreinterpretq_f32_f64(vtrn1q_f64(t0, t2)));
      vst1q_f32(d + 1 * kNR, vreinterpretq_f32_f64(vtrn1q_f64(t1, t3)));
      vst1q_f32(d + 2 * kNR, vreinterpretq_f32_f64(vtrn2q_f64(t0, t2)));
      vst1q_f32(d + 3 * kNR, vreinterpretq_f32_f64(vtrn2q_f64(t1, t3)));
    }
  }
  for (; p < kc; ++p) {
    for (int64_t j = 0; j < kNR; ++j) panel[p * kNR + j] = src[j * ld + p];
  }
}
#endif

void pack_b(const GemmMatrix& b, int64_t p0, int64_t kc, int64_t j0, int64_t nc, float* dst) {
  if (b.col_stride == 1) {
    // Row by row, so the source is read sequentially (B rows are often a power of two apart: walking a
    // column panel down them would miss the TLB and cache sets on every row).
    for (int64_t p = 0; p < kc; ++p) {
      const float* src = b.data + (p0 + p) * b.row_stride + j0;
      int64_t jr = 0;
      for (; jr + kNR <= nc; jr += kNR) {
        std::memcpy(dst + jr * kc + p * kNR, src + jr, kNR * sizeof(float));
      }
      if (jr < nc) {
        float* d = dst + jr * kc + p * kNR;
        const int64_t cols = nc - jr;
        for (int64_t j = 0; j < cols; ++j) d[j] = src[jr + j];
        for (int64_t j = cols; j < kNR; ++j) d[j] = 0.0f;
      }
    }
    return;
  }
  for (int64_t jr = 0; jr < nc; jr += kNR) {
    float* panel = dst + jr * kc;
    const int64_t cols = std::min(kNR, nc - jr);
#if ETNP_GEMM_X86
    if (b.row_stride == 1 && cols == kNR && has_avx2_fma()) {
      // Columns of B contiguous (a transposed weight, as in linear): 8x8 transposes.
      pack_b_panel_transposed_avx2(b.data + p0 + (j0 + jr) * b.col_stride, b.col_stride, kc, panel);
      continue;
    }
#endif
#if ETNP_GEMM_NEON
    if (b.row_stride == 1 && cols == kNR && has_neon()) {
      pack_b_panel_transposed_neon(b.data + p0 + (j0 + jr) * b.col_stride, b.col_stride, kc, panel);
      continue;
    }
#endif
    for (int64_t j = 0; j < cols; ++j) {
      const float* src = b.data + p0 * b.row_stride + (j0 + jr + j) * b.col_stride;
      for (int64_t p = 0; p < kc; ++p) panel[p * kNR + j] = src[p * b.row_stride];
    }
    for (int64_t j = cols; j < kNR; ++j) {
      for (int64_t p = 0; p < kc; ++p) panel[p * kNR + j] = 0.0f;
    }
  }
}

struct PackBuffers {
  std::vector<float> a;
  std::vector<float> b;
  std::vector<float> tile;  ///< mc x kNR sums for an output with non-unit column stride
};

// Pool threads live as long as the process, so each keeps its packing buffers between calls.
PackBuffers& pack_buffers() {
  thread_local PackBuffers buffers;
  return buffers;
}

struct Problem {
  int64_t m, n, k;
  GemmMatrix a, b;
  float* c;
  int64_t c_rs, c_cs;
  GemmEpilogue ep;
};

bool needs_epilogue(const GemmEpilogue& ep) {
  return ep.alpha != 1.0f || (ep.bias.data != nullptr && ep.beta != 0.0f) || ep.scale.data != nullptr || ep.clamps();
}

void apply_epilogue(const Problem& pr, int64_t i0, int64_t mc, int64_t j0, int64_t nc) {
  const GemmEpilogue& ep = pr.ep;
  const bool has_bias = ep.bias.data != nullptr && ep.beta != 0.0f;
  const bool has_scale = ep.scale.data != nullptr;
  const bool clamps = ep.clamps();
  const float lo = ep.min, hi = ep.max;
  if (pr.c_cs == 1 && (!has_bias || ep.bias.col_stride == 0 || ep.bias.col_stride == 1) &&
      (!has_scale || ep.scale.col_stride == 0)) {
    // Contiguous output rows with a bias per row (a convolution's channel) or per column: loops the compiler
    // vectorizes (the strided loop below was ~8% of a portable CNN). Same arithmetic, same results.
    for (int64_t i = i0; i < i0 + mc; ++i) {
      float* row = pr.c + i * pr.c_rs + j0;
      const float alpha = has_scale ? ep.alpha * ep.scale.data[i * ep.scale.row_stride] : ep.alpha;
      if (!has_bias) {
        for (int64_t j = 0; j < nc; ++j) row[j] *= alpha;
      } else if (ep.bias.col_stride == 0) {
        const float bias = ep.beta * ep.bias.data[i * ep.bias.row_stride];
        for (int64_t j = 0; j < nc; ++j) row[j] = row[j] * alpha + bias;
      } else {
        const float* bias = ep.bias.data + i * ep.bias.row_stride + j0;
        for (int64_t j = 0; j < nc; ++j) row[j] = row[j] * alpha + ep.beta * bias[j];
      }
      if (clamps) {
        for (int64_t j = 0; j < nc; ++j) row[j] = clamp_keep_nan(row[j], lo, hi);
      }
    }
    return;
  }
  for (int64_t i = i0; i < i0 + mc; ++i) {
    float* row = pr.c + i * pr.c_rs;
    const float* bias_row = has_bias ? ep.bias.data + i * ep.bias.row_stride : nullptr;
    const float* scale_row = has_scale ? ep.scale.data + i * ep.scale.row_stride : nullptr;
    for (int64_t j = j0; j < j0 + nc; ++j) {
      float v = row[j * pr.c_cs] * (has_scale ? ep.alpha * scale_row[j * ep.scale.col_stride] : ep.alpha);
      if (has_bias) v += ep.beta * bias_row[j * ep.bias.col_stride];
      row[j * pr.c_cs] = clamps ? clamp_keep_nan(v, lo, hi) : v;
    }
  }
}

/// One mc x nc output tile, all of k.
void run_tile(const Problem& pr, int64_t i0, int64_t mc, int64_t j0, int64_t nc) {
  PackBuffers& buf = pack_buffers();
  const int64_t nc_padded = round_up(nc, kNR);
  const int64_t kc_max = std::min(kKC, pr.k);
  // A row-major A is read in place (its rows are streams the prefetcher follows); other layouts are packed.
  const bool a_in_place = pr.a.col_stride == 1;
  if (!a_in_place && buf.a.size() < static_cast<size_t>(mc * kc_max)) buf.a.resize(static_cast<size_t>(mc * kc_max));
  if (buf.b.size() < static_cast<size_t>(nc_padded * kc_max)) buf.b.resize(static_cast<size_t>(nc_padded * kc_max));
  // Output columns not contiguous: each panel's sums go through a contiguous tile and are added from there.
  const bool direct = pr.c_cs == 1;
  if (!direct && buf.tile.size() < static_cast<size_t>(mc * kNR)) buf.tile.resize(static_cast<size_t>(mc * kNR));

  const bool epilogue = needs_epilogue(pr.ep);
  // A per-row epilogue (a convolution's channels: alpha and beta 1, bias and scale one per row) runs on each
  // tile as it is stored; others after each panel.
  const GemmEpilogue& ep = pr.ep;
  const bool per_row = direct && epilogue && ep.alpha == 1.0f && ep.beta == 1.0f &&
                       (ep.bias.data == nullptr || (ep.bias.row_stride == 1 && ep.bias.col_stride == 0)) &&
                       (ep.scale.data == nullptr || (ep.scale.row_stride == 1 && ep.scale.col_stride == 0));
  GemmRowEpilogue rows;
  if (per_row) {
    rows.scale = ep.scale.data != nullptr ? ep.scale.data + i0 : nullptr;
    rows.bias = ep.bias.data != nullptr ? ep.bias.data + i0 : nullptr;
    rows.clamp = ep.clamps();
    rows.lo = ep.min;
    rows.hi = ep.max;
  }
  for (int64_t p0 = 0; p0 < pr.k; p0 += kKC) {
    const int64_t kc = std::min(kKC, pr.k - p0);
    const bool accumulate = p0 > 0, last = p0 + kc >= pr.k;
    const float* a = buf.a.data();
    size_t a_stride = static_cast<size_t>(kc);
    if (a_in_place) {
      a = pr.a.data + i0 * pr.a.row_stride + p0;
      a_stride = static_cast<size_t>(pr.a.row_stride);
    } else {
      pack_a(pr.a, i0, mc, p0, kc, buf.a.data());
    }
    pack_b(pr.b, p0, kc, j0, nc, buf.b.data());
    for (int64_t jr = 0; jr < nc; jr += kNR) {
      const int64_t cols = std::min(kNR, nc - jr);
      float* cp = pr.c + i0 * pr.c_rs + (j0 + jr) * pr.c_cs;
      GemmPanelOut out;
      out.cols = static_cast<size_t>(cols);
      if (direct) {
        out.c = cp;
        out.ldc = static_cast<size_t>(pr.c_rs);
        out.accumulate = accumulate;
        if (last && per_row) out.rows = &rows;
      } else {
        out.c = buf.tile.data();
        out.ldc = kGemmPanel;
      }
      gemm_panel_f32(a, a_stride, static_cast<size_t>(mc), static_cast<size_t>(kc), buf.b.data() + jr * kc, out);
      if (!direct) {
        for (int64_t i = 0; i < mc; ++i) {
          for (int64_t j = 0; j < cols; ++j) {
            float& dst = cp[i * pr.c_rs + j * pr.c_cs];
            dst = accumulate ? dst + buf.tile[i * kNR + j] : buf.tile[i * kNR + j];
          }
        }
      }
      // Bias and scaling while the panel's columns are still in L1.
      if (last && epilogue && !per_row) apply_epilogue(pr, i0, mc, j0 + jr, cols);
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// Matrix-vector products (m == 1): memory bound, so no packing. The loops are written once and compiled
// twice, the second time with AVX2 enabled, chosen by has_avx2_fma(); aarch64 has NEON twins.

/// c[j] = sum_p a[p] * b[p][j] for j in [j0, j1), b rows contiguous in j (axpy form, k sequential).
[[gnu::always_inline]] inline void gemv_rows_body(const Problem& pr, int64_t j0, int64_t j1) {
  constexpr int64_t kChunk = 256;
  float acc[kChunk];
  for (int64_t jb = j0; jb < j1; jb += kChunk) {
    const int64_t len = std::min(kChunk, j1 - jb);
    for (int64_t j = 0; j < len; ++j) acc[j] = 0.0f;
    for (int64_t p = 0; p < pr.k; ++p) {
      const float av = pr.a.data[p * pr.a.col_stride];
      const float* brow = pr.b.data + p * pr.b.row_stride + jb;
      for (int64_t j = 0; j < len; ++j) acc[j] += av * brow[j];
    }
    for (int64_t j = 0; j < len; ++j) pr.c[(jb + j) * pr.c_cs] = acc[j];
  }
}

/// c[j] = dot(a, column j of b), columns contiguous (b row stride 1); a contiguous too.
[[gnu::always_inline]] inline void gemv_cols_body(const Problem& pr, int64_t j0, int64_t j1) {
  const float* a = pr.a.data;
  const int64_t k = pr.k;
  for (int64_t j = j0; j < j1; ++j) {
    const float* col = pr.b.data + j * pr.b.col_stride;
    float part[8] = {};
    int64_t p = 0;
    for (; p + 8 <= k; p += 8) {
      for (int64_t l = 0; l < 8; ++l) part[l] += a[p + l] * col[p + l];
    }
    float sum = ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));
    for (; p < k; ++p) sum += a[p] * col[p];
    pr.c[j * pr.c_cs] = sum;
  }
}

void gemv_rows_generic(const Problem& pr, int64_t j0, int64_t j1) { gemv_rows_body(pr, j0, j1); }
void gemv_cols_generic(const Problem& pr, int64_t j0, int64_t j1) { gemv_cols_body(pr, j0, j1); }
#if ETNP_GEMM_X86
__attribute__((target("avx2,fma"))) void gemv_rows_avx2(const Problem& pr, int64_t j0, int64_t j1) {
  gemv_rows_body(pr, j0, j1);
}
__attribute__((target("avx2,fma"))) void gemv_cols_avx2(const Problem& pr, int64_t j0, int64_t j1) {
  gemv_cols_body(pr, j0, j1);
}
#endif

#if ETNP_GEMM_NEON
// The NEON twins: the same loops and order of sums, each multiply-add fused (as in the micro-kernels).
void gemv_rows_neon(const Problem& pr, int64_t j0, int64_t j1) {
  constexpr int64_t kChunk = 256;
  float acc[kChunk];
  for (int64_t jb = j0; jb < j1; jb += kChunk) {
    const int64_t len = std::min(kChunk, j1 - jb);
    std::fill(acc, acc + len, 0.0f);
    for (int64_t p = 0; p < pr.k; ++p) {
      const float av = pr.a.data[p * pr.a.col_stride];
      const float* brow = pr.b.data + p * pr.b.row_stride + jb;
      int64_t j = 0;
      for (; j + 8 <= len; j += 8) {
        vst1q_f32(acc + j, vfmaq_n_f32(vld1q_f32(acc + j), vld1q_f32(brow + j), av));
        vst1q_f32(acc + j + 4, vfmaq_n_f32(vld1q_f32(acc + j + 4), vld1q_f32(brow + j + 4), av));
      }
      for (; j < len; ++j) acc[j] = std::fma(av, brow[j], acc[j]);
    }
    for (int64_t j = 0; j < len; ++j) pr.c[(jb + j) * pr.c_cs] = acc[j];
  }
}

void gemv_cols_neon(const Problem& pr, int64_t j0, int64_t j1) {
  const float* a = pr.a.data;
  const int64_t k = pr.k;
  for (int64_t j = j0; j < j1; ++j) {
    const float* col = pr.b.data + j * pr.b.col_stride;
    float32x4_t lo = vdupq_n_f32(0.0f), hi = vdupq_n_f32(0.0f);  // the body's part[0..3] and part[4..7]
    int64_t p = 0;
    for (; p + 8 <= k; p += 8) {
      lo = vfmaq_f32(lo, vld1q_f32(a + p), vld1q_f32(col + p));
      hi = vfmaq_f32(hi, vld1q_f32(a + p + 4), vld1q_f32(col + p + 4));
    }
    const float32x4_t s = vaddq_f32(lo, hi);
    float sum = (vgetq_lane_f32(s, 0) + vgetq_lane_f32(s, 1)) + (vgetq_lane_f32(s, 2) + vgetq_lane_f32(s, 3));
    for (; p < k; ++p) sum = std::fma(a[p], col[p], sum);
    pr.c[j * pr.c_cs] = sum;
  }
}
#endif

void run_gemv(const Problem& pr, ThreadPool* pool) {
  using Fn = void (*)(const Problem&, int64_t, int64_t);
  const bool rows_form = pr.b.col_stride == 1;
  Fn fn = rows_form ? gemv_rows_generic : gemv_cols_generic;
#if ETNP_GEMM_X86
  if (has_avx2_fma()) fn = rows_form ? gemv_rows_avx2 : gemv_cols_avx2;
#endif
#if ETNP_GEMM_NEON
  if (has_neon()) fn = rows_form ? gemv_rows_neon : gemv_cols_neon;
#endif
  auto body = [&](size_t begin, size_t end) {
    fn(pr, static_cast<int64_t>(begin), static_cast<int64_t>(end));
    if (needs_epilogue(pr.ep)) apply_epilogue(pr, 0, 1, static_cast<int64_t>(begin), static_cast<int64_t>(end - begin));
  };
  const int64_t work = pr.n * pr.k;
  if (pool == nullptr || work < (int64_t{1} << 18)) {
    body(0, static_cast<size_t>(pr.n));
    return;
  }
  // Chunks of whole cache lines of the output, at least ~64K multiply-adds each (a parallel region costs
  // microseconds of wake-up and synchronization).
  const size_t grain = static_cast<size_t>(std::max<int64_t>(16, round_up(ceil_div(int64_t{1} << 16, pr.k), 16)));
  pool->parallel_for(static_cast<size_t>(pr.n), grain, body);
}

}  // namespace

const char* gemm_f32_kernel_name() {
  if (has_avx2_fma()) return "avx2-fma";
  if (has_neon()) return "neon";
  return "generic";
}

void gemm_f32(int64_t m, int64_t n, int64_t k, GemmMatrix a, GemmMatrix b, float* c, int64_t c_row_stride,
              int64_t c_col_stride, const GemmEpilogue& epilogue, ThreadPool* pool) {
  if (m <= 0 || n <= 0) return;
  Problem pr{m, n, k, a, b, c, c_row_stride, c_col_stride, epilogue};
  // Work on whichever of C and C^T = B^T A^T has unit column stride (or is a single row), so that the
  // micro-kernel stores contiguous rows and matrix-vector products take the m == 1 path.
  const bool transpose = (n == 1 && m > 1) || (c_col_stride != 1 && c_row_stride == 1 && m > 1);
  if (transpose) {
    pr.m = n;
    pr.n = m;
    pr.a = GemmMatrix{b.data, b.col_stride, b.row_stride};
    pr.b = GemmMatrix{a.data, a.col_stride, a.row_stride};
    pr.c_rs = c_col_stride;
    pr.c_cs = c_row_stride;
    pr.ep.bias = GemmMatrix{epilogue.bias.data, epilogue.bias.col_stride, epilogue.bias.row_stride};
    pr.ep.scale = GemmMatrix{epilogue.scale.data, epilogue.scale.col_stride, epilogue.scale.row_stride};
  }
  if (pr.k == 0) {
    for (int64_t i = 0; i < pr.m; ++i) {
      for (int64_t j = 0; j < pr.n; ++j) pr.c[i * pr.c_rs + j * pr.c_cs] = 0.0f;
    }
    apply_epilogue(pr, 0, pr.m, 0, pr.n);
    return;
  }
  if (pr.m == 1 && (pr.b.col_stride == 1 || (pr.b.row_stride == 1 && pr.a.col_stride == 1))) {
    run_gemv(pr, pool);
    return;
  }

  const size_t threads = pool == nullptr ? 1 : pool->num_threads();
  const double macs = double(pr.m) * double(pr.n) * double(pr.k);
  const bool parallel = threads > 1 && macs >= kGemmParallelMacs;
  int64_t mc = std::min(kMCMax, round_up(pr.m, kMR));
  int64_t nc = std::min(kNCMax, round_up(pr.n, kNR));
  if (parallel) {
    // Smaller tiles until every thread has one (keeping tiles at least 6x64 to amortize the packing).
    while (static_cast<size_t>(ceil_div(pr.m, mc) * ceil_div(pr.n, nc)) < threads) {
      if (nc > 4 * kNR) {
        nc = round_up(nc / 2, kNR);
      } else if (mc > kMR) {
        mc = round_up(mc / 2, kMR);
      } else {
        break;
      }
    }
  }
  int64_t m_tiles = ceil_div(pr.m, mc), n_tiles = ceil_div(pr.n, nc);
  if (parallel) {
    // Equal tiles, as many as a multiple of the thread count where the columns (else the rows) allow: n = 3136
    // in tiles of 1024 left a last tile of 64 and one thread with twice the work of the other.
    const auto t = static_cast<int64_t>(threads);
    while ((m_tiles * n_tiles) % t != 0 && ceil_div(pr.n, n_tiles + 1) >= 4 * kNR) ++n_tiles;
    while ((m_tiles * n_tiles) % t != 0 && ceil_div(pr.m, m_tiles + 1) >= kMR) ++m_tiles;  // few columns (7x7 maps)
    nc = round_up(ceil_div(pr.n, n_tiles), kNR);
    mc = round_up(ceil_div(pr.m, m_tiles), kMR);
    m_tiles = ceil_div(pr.m, mc);
    n_tiles = ceil_div(pr.n, nc);
  }
  auto body = [&](size_t begin, size_t end) {
    for (size_t t = begin; t < end; ++t) {
      const int64_t ti = static_cast<int64_t>(t) / n_tiles, tj = static_cast<int64_t>(t) % n_tiles;
      const int64_t i0 = ti * mc, j0 = tj * nc;
      run_tile(pr, i0, std::min(mc, pr.m - i0), j0, std::min(nc, pr.n - j0));
    }
  };
  const size_t tiles = static_cast<size_t>(m_tiles * n_tiles);
  if (!parallel || tiles == 1) {
    body(0, tiles);
  } else {
    pool->parallel_for(tiles, 1, body);
  }
}

}  // namespace etnp::compute
