#include "compute/int4_gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/cpu_features.h"
#include "etnp/threadpool.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace etnp::compute {

bool Int4Weights::supports(size_t k, size_t group_size) {
  return k > 0 && k % 32 == 0 && (group_size == 0 || (group_size % 32 == 0 && k % group_size == 0));
}

Int4Weights::Int4Weights(const int8_t* w_nk, size_t n, size_t k, const float* scales, const float* bias,
                         size_t group_size)
    : n_(n), k_(k), group_size_(group_size) {
  const size_t g = groups(), gk = group_k();
  bool bf16 = true;
  for (size_t i = 0; i < n * g; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &scales[i], 4);
    bf16 = bf16 && (bits & 0xFFFF) == 0;
  }
  // Channels past n hold w = 0 (stored 8) and scale 0: their lanes compute zeros that are never stored.
  packed_.assign(blocks() * k * 4, 0x88);
  (bf16 ? scales_bf16_.assign(blocks() * g * 8, 0) : scales_f32_.assign(blocks() * g * 8, 0.0f));
  zp_terms_.assign(blocks() * 8, 0.0f);
  std::vector<int32_t> sums(g);
  for (size_t j = 0; j < n; ++j) {
    const size_t b = j / 8, lane = j % 8, stride = run_stride(b);
    uint8_t* dst = packed_.data() + offset(b, 0) + lane * 4;
    const int8_t* row = w_nk + j * k;
    std::fill(sums.begin(), sums.end(), 0);
    for (size_t i = 0; i < k; i += 8, dst += stride) {
      for (size_t q = 0; q < 4; ++q) {
        dst[q] = static_cast<uint8_t>((row[i + q] + 8) | ((row[i + 4 + q] + 8) << 4));
      }
    }
    for (size_t q = 0; q < g; ++q) {
      for (size_t i = q * gk; i < (q + 1) * gk; ++i) sums[q] += row[i];
    }
    float term = 0.0f;
    for (size_t q = 0; q < g; ++q) {
      const float sc = scales[j * g + q];
      const size_t at = scale_index(b, q) + lane;
      if (bf16) {
        uint32_t bits;
        std::memcpy(&bits, &sc, 4);
        scales_bf16_[at] = static_cast<uint16_t>(bits >> 16);
      } else {
        scales_f32_[at] = sc;
      }
      term += static_cast<float>(sums[q]) * sc;
    }
    zp_terms_[j] = term;
  }
  if (bias != nullptr) bias_.assign(bias, bias + n);
}

float Int4Weights::scale(size_t j, size_t g) const {
  const size_t at = scale_index(j / 8, g) + j % 8;
  if (!bf16_scales()) return scales_f32_[at];
  const uint32_t bits = uint32_t{scales_bf16_[at]} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

namespace {

// Row r's sums of its codes over each run of 32 k, [rows, k / 32]: the 4-bit values are stored with +8, so a
// product of stored values over a run is the true one plus 8 * (this sum).
void code_sums(const int8_t* x, size_t rows, size_t k, int32_t* out) {
  for (size_t r = 0; r < rows; ++r) {
    for (size_t c = 0; c < k / 32; ++c) {
      int32_t s = 0;
      for (size_t i = 0; i < 32; ++i) s += x[r * k + c * 32 + i];
      out[r * (k / 32) + c] = s;
    }
  }
}

// The float epilogue shared by every implementation: out = clamp(sum * scale_r + bias, lo, hi) over `cols`,
// the product rounded before the add. (GCC contracts a * b + c into a fused multiply-add in C++ wherever the
// target has FMA, as the AVX2 tiles' callers do: the empty asm makes the product a value of its own there.)
inline void store_row(const float* sum, float row_scale, const float* bias, float lo, float hi, size_t cols,
                      float* out) {
  for (size_t c = 0; c < cols; ++c) {
    float v = sum[c] * row_scale;
#if defined(__x86_64__) && defined(__GNUC__)
    asm("" : "+x"(v));
#endif
    if (bias != nullptr) v += bias[c];
    out[c] = std::min(std::max(v, lo), hi);
  }
}

// One block of 8 channels for every row, one value at a time: the definition.
void block_generic(const int8_t* x, const RowQuantParams* params, const int32_t* xsums, size_t rows,
                   const Int4Weights& w, size_t b, float lo, float hi, float* out) {
  const size_t k = w.k(), gk = w.group_k(), n = w.n();
  const size_t cols = std::min<size_t>(8, n - b * 8);
  const uint8_t* packed = w.block(b);
  const size_t stride = w.run_stride(b);
  const float* zp_terms = w.zero_point_terms(b);
  for (size_t r = 0; r < rows; ++r) {
    float sum[8];
    for (size_t lane = 0; lane < 8; ++lane) sum[lane] = -static_cast<float>(params[r].zero_point) * zp_terms[lane];
    for (size_t c = 0; c < k / 32; ++c) {
      for (size_t lane = 0; lane < 8; ++lane) {
        int32_t acc = 0;
        for (size_t i = c * 32; i < (c + 1) * 32; ++i) {
          const uint8_t byte = packed[(i / 8) * stride + lane * 4 + i % 4];
          const int32_t u = (i % 8) < 4 ? (byte & 0x0F) : (byte >> 4);
          acc += u * x[r * k + i];
        }
        acc -= 8 * xsums[r * (k / 32) + c];
        sum[lane] = std::fma(static_cast<float>(acc), w.scale(b * 8 + lane, c * 32 / gk), sum[lane]);
      }
    }
    store_row(sum, params[r].scale, w.bias() != nullptr ? w.bias() + b * 8 : nullptr, lo, hi, cols,
              out + r * n + b * 8);
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
// A hint to fetch the line at base + offset, which may lie past the end of base's array (a prefetch never
// faults); the address is formed as an integer, since pointer arithmetic past the array is undefined.
__attribute__((target("avx2,fma"), always_inline)) inline void prefetch(const void* base, size_t offset) {
  _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(base) + offset), _MM_HINT_T0);
}

// Four bytes at p, in every 32-bit lane.
__attribute__((target("avx2,fma"), always_inline)) inline __m256i broadcast4(const int8_t* p) {
  int32_t v;
  __builtin_memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// The 8 scales of block b's group g, as floats.
template <bool BF16>
__attribute__((target("avx2,fma"), always_inline)) inline __m256 load_scales(const Int4Weights& w, size_t b, size_t g) {
  if constexpr (BF16) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.scales_bf16(b, g)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  } else {
    return _mm256_loadu_ps(w.scales_f32(b, g));
  }
}

// sum = fma(float(int16 pair sums widened - 8 * code sum), scale, sum): one run of 32 k folded into the sums.
__attribute__((target("avx2,fma"), always_inline)) inline __m256 fold_run(__m256 sum, __m256i acc16, int32_t code_sum,
                                                                      __m256 scale) {
  const __m256i exact =
      _mm256_sub_epi32(_mm256_madd_epi16(acc16, _mm256_set1_epi16(1)), _mm256_set1_epi32(8 * code_sum));
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(exact), scale, sum);
}

// acc += the int16 pair products of 8 k: the block's widened low and high nibbles with the codes at k, k + 4.
// (The empty asm pins the running sum to a register there: without it GCC reassociates the unrolled integer
// adds into a tree whose partial products it spills to the stack.)
__attribute__((target("avx2,fma"), always_inline)) inline __m256i madd8(__m256i acc, __m256i lo, __m256i hi,
                                                                    __m256i c0, __m256i c1) {
  acc = _mm256_add_epi16(acc, _mm256_maddubs_epi16(lo, c0));
  acc = _mm256_add_epi16(acc, _mm256_maddubs_epi16(hi, c1));
  asm("" : "+x"(acc));
  return acc;
}

// The 32 packed bytes of 8 k, widened: low nibbles (k .. k + 3 of each channel) and high (k + 4 .. k + 7).
__attribute__((target("avx2,fma"), always_inline)) inline void widen(const uint8_t* p, __m256i& lo, __m256i& hi) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  lo = _mm256_and_si256(v, low4);
  hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
}

// The tiles. Per 8 k, a block's 32 packed bytes widen into two vectors of unsigned values whose 32-bit
// lanes are its 8 channels' four k each; a row's 4 codes at k and at k + 4 are broadcast and multiplied with
// _mm256_maddubs_epi16 (unsigned x signed bytes, adjacent pairs summed into int16). Over 32 k the int16
// lanes add at most 8 * 2 * 15 * 128 = 30720 in magnitude; then they are widened to int32, corrected
// (-8 * code sum), converted, and multiplied by their group's scale into the float sums with one fused
// multiply-add, in k order: the same operations, in the same order, as block_generic, so both give the same
// bits. Accumulators are named variables, not arrays, so that GCC keeps them all in the 16 vector registers.
//
// 4 rows x 1 block (prefill: the widened weights serve four rows).
template <bool BF16>
__attribute__((target("avx2,fma"), noinline)) void tile_4x1(const int8_t* x, size_t k, const RowQuantParams* params,
                                              const int32_t* xsums, const Int4Weights& w, size_t b,
                                              float (*out_sum)[8]) {
  const size_t gk = w.group_k(), runs = k / 32;
  const uint8_t* wp = w.block(b);
  const size_t stride = w.run_stride(b);
  const __m256 zp_terms = _mm256_loadu_ps(w.zero_point_terms(b));
  auto zp_sum = [&](int r) { return -static_cast<float>(params[r].zero_point); };
  __m256 s0 = _mm256_mul_ps(_mm256_set1_ps(zp_sum(0)), zp_terms), s1 = _mm256_mul_ps(_mm256_set1_ps(zp_sum(1)), zp_terms);
  __m256 s2 = _mm256_mul_ps(_mm256_set1_ps(zp_sum(2)), zp_terms), s3 = _mm256_mul_ps(_mm256_set1_ps(zp_sum(3)), zp_terms);
  const int8_t *x0 = x, *x1 = x + k, *x2 = x + 2 * k, *x3 = x + 3 * k;
  const size_t runs_per_group = gk / 32;
  for (size_t c = 0, g = 0, left = runs_per_group; c < runs; ++c) {
    const size_t k32 = c * 32;
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
#pragma GCC unroll 4
    for (size_t k8 = k32; k8 < k32 + 32; k8 += 8) {
      __m256i lo, hi;
      widen(wp + k8 / 8 * stride, lo, hi);
      a0 = madd8(a0, lo, hi, broadcast4(x0 + k8), broadcast4(x0 + k8 + 4));
      a1 = madd8(a1, lo, hi, broadcast4(x1 + k8), broadcast4(x1 + k8 + 4));
      a2 = madd8(a2, lo, hi, broadcast4(x2 + k8), broadcast4(x2 + k8 + 4));
      a3 = madd8(a3, lo, hi, broadcast4(x3 + k8), broadcast4(x3 + k8 + 4));
    }
    const __m256 scale = load_scales<BF16>(w, b, g);
    if (--left == 0) {  // (the group index is counted: a division per run cost as much as the run's products)
      ++g;
      left = runs_per_group;
    }
    s0 = fold_run(s0, a0, xsums[c], scale);
    s1 = fold_run(s1, a1, xsums[runs + c], scale);
    s2 = fold_run(s2, a2, xsums[2 * runs + c], scale);
    s3 = fold_run(s3, a3, xsums[3 * runs + c], scale);
  }
  _mm256_storeu_ps(out_sum[0], s0);
  _mm256_storeu_ps(out_sum[1], s1);
  _mm256_storeu_ps(out_sum[2], s2);
  _mm256_storeu_ps(out_sum[3], s3);
}

// 1 row x NB blocks (decoding: the broadcast codes serve NB blocks), NB <= 4.
template <int NB, bool BF16>
__attribute__((target("avx2,fma"), noinline)) void tile_1xn(const int8_t* x, size_t k, const RowQuantParams* params,
                                              const int32_t* xsums, const Int4Weights& w, size_t b0,
                                              float (*out_sum)[NB * 8]) {
  static_assert(NB >= 1 && NB <= 4);
  const size_t gk = w.group_k(), groups = w.groups(), runs = k / 32;
  const uint8_t* wp = w.block(b0);  // the NB blocks, 32 bytes apart in one panel
  const size_t stride = w.run_stride(b0);
  // Two panels on (the tiles two on, or past the end, where a prefetch does nothing).
  const size_t ahead = 2 * Int4Weights::kPanelBlocks * k * 4;
  const size_t scales_ahead = 2 * Int4Weights::kPanelBlocks * groups * 8 * (BF16 ? sizeof(uint16_t) : sizeof(float));
  const __m256 zp = _mm256_set1_ps(-static_cast<float>(params[0].zero_point));
  __m256 s0 = _mm256_mul_ps(zp, _mm256_loadu_ps(w.zero_point_terms(b0))), s1 = s0, s2 = s0, s3 = s0;
  if constexpr (NB > 1) s1 = _mm256_mul_ps(zp, _mm256_loadu_ps(w.zero_point_terms(b0 + 1)));
  if constexpr (NB > 2) s2 = _mm256_mul_ps(zp, _mm256_loadu_ps(w.zero_point_terms(b0 + 2)));
  if constexpr (NB > 3) s3 = _mm256_mul_ps(zp, _mm256_loadu_ps(w.zero_point_terms(b0 + 3)));
  const size_t runs_per_group = gk / 32;
  for (size_t c = 0, g = 0, left = runs_per_group; c < runs; ++c) {
    const size_t k32 = c * 32;
    // The same bytes of the panel two on, and its scales: the hardware prefetcher alone does not keep up
    // when the weights stream from memory.
    // (A run of a full panel is 4 x 128 bytes: 2 * NB lines, unrolled.)
#pragma GCC unroll 8
    for (int line = 0; line < 2 * NB; ++line) prefetch(wp, ahead + k32 / 8 * stride + 64 * line);
    if (left == runs_per_group) {
      prefetch(BF16 ? static_cast<const void*>(w.scales_bf16(b0, g)) : w.scales_f32(b0, g), scales_ahead);
    }
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
#pragma GCC unroll 4
    for (size_t k8 = k32; k8 < k32 + 32; k8 += 8) {
      const __m256i c0 = broadcast4(x + k8), c1 = broadcast4(x + k8 + 4);
      __m256i lo, hi;
      const uint8_t* run = wp + k8 / 8 * stride;
      widen(run, lo, hi);
      a0 = madd8(a0, lo, hi, c0, c1);
      if constexpr (NB > 1) {
        widen(run + 32, lo, hi);
        a1 = madd8(a1, lo, hi, c0, c1);
      }
      if constexpr (NB > 2) {
        widen(run + 64, lo, hi);
        a2 = madd8(a2, lo, hi, c0, c1);
      }
      if constexpr (NB > 3) {
        widen(run + 96, lo, hi);
        a3 = madd8(a3, lo, hi, c0, c1);
      }
    }
    s0 = fold_run(s0, a0, xsums[c], load_scales<BF16>(w, b0, g));
    if constexpr (NB > 1) s1 = fold_run(s1, a1, xsums[c], load_scales<BF16>(w, b0 + 1, g));
    if constexpr (NB > 2) s2 = fold_run(s2, a2, xsums[c], load_scales<BF16>(w, b0 + 2, g));
    if constexpr (NB > 3) s3 = fold_run(s3, a3, xsums[c], load_scales<BF16>(w, b0 + 3, g));
    if (--left == 0) {
      ++g;
      left = runs_per_group;
    }
  }
  const __m256 sums[4] = {s0, s1, s2, s3};
  for (int b = 0; b < NB; ++b) _mm256_storeu_ps(out_sum[0] + b * 8, sums[b]);
}

// One tile: 4 x 1 or 1 x NB.
template <int MR, int NB, bool BF16>
__attribute__((target("avx2,fma"), always_inline)) inline void tile_avx2(const int8_t* x, size_t k,
                                                                     const RowQuantParams* params,
                                                                     const int32_t* xsums, const Int4Weights& w,
                                                                     size_t b0, float (*sum)[NB * 8]) {
  static_assert((MR == 4 && NB == 1) || MR == 1);
  if constexpr (MR == 4) {
    tile_4x1<BF16>(x, k, params, xsums, w, b0, sum);
  } else {
    tile_1xn<NB, BF16>(x, k, params, xsums, w, b0, sum);
  }
}

template <int MR, int NB>
__attribute__((target("avx2,fma"))) void tiles_avx2(const int8_t* x, const RowQuantParams* params,
                                                const int32_t* xsums, size_t rows, const Int4Weights& w,
                                                size_t b0, float lo, float hi, float* out) {
  const size_t k = w.k(), n = w.n(), runs = k / 32;
  float sum[MR][NB * 8];
  for (size_t r = 0; r + MR <= rows; r += MR) {
    const int8_t* xr = x + r * k;
    if (w.bf16_scales()) {
      tile_avx2<MR, NB, true>(xr, k, params + r, xsums + r * runs, w, b0, sum);
    } else {
      tile_avx2<MR, NB, false>(xr, k, params + r, xsums + r * runs, w, b0, sum);
    }
    for (int i = 0; i < MR; ++i) {
      const size_t cols = std::min<size_t>(NB * 8, n - b0 * 8);
      store_row(sum[i], params[r + i].scale, w.bias() != nullptr ? w.bias() + b0 * 8 : nullptr, lo, hi, cols,
                out + (r + i) * n + b0 * 8);
    }
  }
}

// Blocks [b0, b1) for every row: tiles of 4 rows x 1 block while 4 rows remain (the widened weights serve
// four rows; 8 x 1, its sums in memory, measured slower), then single rows over 4, 2 or 1 blocks (the
// broadcast codes serve several blocks).
__attribute__((target("avx2,fma"))) void blocks_avx2(const int8_t* x, const RowQuantParams* params,
                                                 const int32_t* xsums, size_t rows, const Int4Weights& w, size_t b0,
                                                 size_t b1, float lo, float hi, float* out) {
  const size_t k = w.k(), n = w.n(), runs = k / 32;
  const size_t full = rows / 4 * 4;
  // The first two panels' weights, which the tiles' own prefetches (two panels ahead) never ask for: a call
  // starts on bytes that are not in any cache when a decoding step streams the model's layers one by one.
  const size_t ahead = std::min<size_t>(b1 - b0, 2 * Int4Weights::kPanelBlocks) * k * 4;
  for (size_t at = 0; at < ahead; at += 64) prefetch(w.block(b0), at);
  if (full > 0) {
    for (size_t b = b0; b < b1; ++b) tiles_avx2<4, 1>(x, params, xsums, full, w, b, lo, hi, out);
  }
  for (size_t r = full; r < rows; ++r) {
    const int8_t* xr = x + r * k;
    const RowQuantParams* pr = params + r;
    const int32_t* sr = xsums + r * runs;
    float* outr = out + r * n;
    size_t b = b0;
    for (; b + 4 <= b1; b += 4) tiles_avx2<1, 4>(xr, pr, sr, 1, w, b, lo, hi, outr);
    for (; b + 2 <= b1; b += 2) tiles_avx2<1, 2>(xr, pr, sr, 1, w, b, lo, hi, outr);
    for (; b < b1; ++b) tiles_avx2<1, 1>(xr, pr, sr, 1, w, b, lo, hi, outr);
  }
}
#endif

bool use_avx2() {
#if defined(__x86_64__) && defined(__GNUC__)
  return has_avx2_fma();
#else
  return false;
#endif
}

}  // namespace

const char* int4_gemm_kernel_name() { return use_avx2() ? "avx2" : "generic"; }

void gemm_qd8_int4_f32(const int8_t* x, const RowQuantParams* params, size_t rows, const Int4Weights& w,
                       float out_min, float out_max, float* out, int32_t* scratch, ThreadPool* pool) {
  const size_t blocks = w.blocks();
  if (rows == 0 || w.n() == 0) return;
  code_sums(x, rows, w.k(), scratch);
  const bool avx2 = use_avx2();
  auto run = [&](size_t b0, size_t b1) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (avx2) return blocks_avx2(x, params, scratch, rows, w, b0, b1, out_min, out_max, out);
#endif
    for (size_t b = b0; b < b1; ++b) block_generic(x, params, scratch, rows, w, b, out_min, out_max, out);
  };
  // A parallel region costs a few microseconds of wake-up: worth it from about 128K multiply-adds (a 64 KB
  // weight read) per thread. Chunks of 4 blocks keep the one-row tile at its widest.
  const size_t threads = pool == nullptr ? 1 : pool->num_threads();
  if (threads > 1 && rows * w.n() * w.k() >= threads * (size_t{1} << 17) && blocks >= 8) {
    const size_t quads = (blocks + 3) / 4;
    pool->parallel_for(quads, 1, [&](size_t q0, size_t q1) { run(q0 * 4, std::min(blocks, q1 * 4)); });
  } else {
    run(0, blocks);
  }
}

}  // namespace etnp::compute
