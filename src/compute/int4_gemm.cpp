#include "compute/int4_gemm.h"

#include <algorithm>
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
    const size_t b = j / 8, lane = j % 8;
    uint8_t* dst = packed_.data() + b * k * 4;
    std::fill(sums.begin(), sums.end(), 0);
    for (size_t i = 0; i < k; ++i) {
      const auto u = static_cast<uint8_t>(w_nk[j * k + i] + 8);
      uint8_t& byte = dst[(i / 8) * 32 + lane * 4 + i % 4];
      byte = (i % 8) < 4 ? static_cast<uint8_t>((byte & 0xF0) | u) : static_cast<uint8_t>((byte & 0x0F) | (u << 4));
      sums[i / gk] += w_nk[j * k + i];
    }
    float term = 0.0f;
    for (size_t q = 0; q < g; ++q) {
      const float sc = scales[j * g + q];
      const size_t at = (b * g + q) * 8 + lane;
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
  const size_t at = ((j / 8) * groups() + g) * 8 + j % 8;
  if (!bf16_scales()) return scales_f32_[at];
  const uint32_t bits = uint32_t{scales_bf16_[at]} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

namespace {

// Row r's group sums of its codes, [rows, groups]: the 4-bit values are stored with +8, so a product of
// stored values over a group is the true one plus 8 * (this sum).
void code_sums(const int8_t* x, size_t rows, const Int4Weights& w, int32_t* out) {
  const size_t k = w.k(), gk = w.group_k(), groups = w.groups();
  for (size_t r = 0; r < rows; ++r) {
    for (size_t g = 0; g < groups; ++g) {
      int32_t s = 0;
      for (size_t i = 0; i < gk; ++i) s += x[r * k + g * gk + i];
      out[r * groups + g] = s;
    }
  }
}

// The float epilogue shared by every implementation: out = clamp(sum * scale_r + bias, lo, hi) over `cols`.
inline void store_row(const float* sum, float row_scale, const float* bias, float lo, float hi, size_t cols,
                      float* out) {
  for (size_t c = 0; c < cols; ++c) {
    const float v = bias != nullptr ? sum[c] * row_scale + bias[c] : sum[c] * row_scale;
    out[c] = std::min(std::max(v, lo), hi);
  }
}

// One block of 8 channels for rows [r0, r1), one value at a time: the definition.
void block_generic(const int8_t* x, const RowQuantParams* params, const int32_t* xsums, size_t r0, size_t r1,
                   const Int4Weights& w, size_t b, float lo, float hi, float* out) {
  const size_t k = w.k(), gk = w.group_k(), groups = w.groups(), n = w.n();
  const size_t cols = std::min<size_t>(8, n - b * 8);
  const uint8_t* packed = w.block(b);
  const float* zp_terms = w.zero_point_terms(b);
  for (size_t r = r0; r < r1; ++r) {
    float sum[8];
    for (size_t lane = 0; lane < 8; ++lane) sum[lane] = -static_cast<float>(params[r].zero_point) * zp_terms[lane];
    for (size_t g = 0; g < groups; ++g) {
      for (size_t lane = 0; lane < 8; ++lane) {
        int32_t acc = 0;
        for (size_t i = g * gk; i < (g + 1) * gk; ++i) {
          const uint8_t byte = packed[(i / 8) * 32 + lane * 4 + i % 4];
          const int32_t u = (i % 8) < 4 ? (byte & 0x0F) : (byte >> 4);
          acc += u * x[r * k + i];
        }
        acc -= 8 * xsums[r * groups + g];
        sum[lane] += static_cast<float>(acc) * w.scale(b * 8 + lane, g);
      }
    }
    store_row(sum, params[r].scale, w.bias() != nullptr ? w.bias() + b * 8 : nullptr, lo, hi, cols,
              out + r * n + b * 8);
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
// MR rows x NB blocks of 8 channels. Per 8 k: the 32 packed bytes of a block widen (and / shift) into two
// vectors of unsigned values; each row's 4 codes at k, k + 4 are broadcast and multiplied with
// _mm256_maddubs_epi16 (unsigned x signed bytes, adjacent pairs summed into int16). Over 32 k the int16
// lanes add at most 8 * 2 * 15 * 128 = 30720 in magnitude, so they are widened to int32 once per 32 k.
// At a group's end the int32 sums are corrected (-8 * code sum), converted, scaled and added to the float
// sums in memory, in group order: the same operations, in the same order, as block_generic, so both give
// the same bits.
template <int MR, int NB, bool BF16>
__attribute__((target("avx2"))) void tile_avx2(const int8_t* x, size_t x_stride, const RowQuantParams* params,
                                               const int32_t* xsums, const Int4Weights& w, size_t b0,
                                               float (*sum)[NB * 8]) {
  const size_t gk = w.group_k(), groups = w.groups();
  const __m256i low4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  const uint8_t* wp[NB];
  for (int b = 0; b < NB; ++b) wp[b] = w.block(b0 + b);
  for (int r = 0; r < MR; ++r) {
    const __m256 zp = _mm256_set1_ps(-static_cast<float>(params[r].zero_point));
    for (int b = 0; b < NB; ++b) {
      _mm256_storeu_ps(sum[r] + b * 8, _mm256_mul_ps(zp, _mm256_loadu_ps(w.zero_point_terms(b0 + b))));
    }
  }
  for (size_t g = 0; g < groups; ++g) {
    __m256i acc[MR][NB];
    for (int r = 0; r < MR; ++r) {
      for (int b = 0; b < NB; ++b) acc[r][b] = _mm256_setzero_si256();
    }
    for (size_t k32 = g * gk; k32 < (g + 1) * gk; k32 += 32) {
      __m256i acc16[MR][NB];
      for (int r = 0; r < MR; ++r) {
        for (int b = 0; b < NB; ++b) acc16[r][b] = _mm256_setzero_si256();
      }
#pragma GCC unroll 4
      for (size_t k8 = k32; k8 < k32 + 32; k8 += 8) {
        __m256i lo[NB], hi[NB];
        for (int b = 0; b < NB; ++b) {
          const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp[b] + k8 * 4));
          lo[b] = _mm256_and_si256(v, low4);
          hi[b] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
        }
        for (int r = 0; r < MR; ++r) {
          int32_t x0, x1;
          __builtin_memcpy(&x0, x + r * x_stride + k8, 4);
          __builtin_memcpy(&x1, x + r * x_stride + k8 + 4, 4);
          const __m256i v0 = _mm256_set1_epi32(x0), v1 = _mm256_set1_epi32(x1);
          for (int b = 0; b < NB; ++b) {
            acc16[r][b] = _mm256_add_epi16(acc16[r][b], _mm256_maddubs_epi16(lo[b], v0));
            acc16[r][b] = _mm256_add_epi16(acc16[r][b], _mm256_maddubs_epi16(hi[b], v1));
          }
        }
      }
      for (int r = 0; r < MR; ++r) {
        for (int b = 0; b < NB; ++b) acc[r][b] = _mm256_add_epi32(acc[r][b], _mm256_madd_epi16(acc16[r][b], ones));
      }
    }
    __m256 scale[NB];
    for (int b = 0; b < NB; ++b) {
      if constexpr (BF16) {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.scales_bf16(b0 + b, g)));
        scale[b] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
      } else {
        scale[b] = _mm256_loadu_ps(w.scales_f32(b0 + b, g));
      }
    }
    for (int r = 0; r < MR; ++r) {
      const __m256i xs8 = _mm256_set1_epi32(8 * xsums[r * groups + g]);
      for (int b = 0; b < NB; ++b) {
        const __m256 scaled = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(acc[r][b], xs8)), scale[b]);
        _mm256_storeu_ps(sum[r] + b * 8, _mm256_add_ps(_mm256_loadu_ps(sum[r] + b * 8), scaled));
      }
    }
  }
}

template <int MR, int NB>
__attribute__((target("avx2"))) void tiles_avx2(const int8_t* x, const RowQuantParams* params,
                                                const int32_t* xsums, size_t rows, const Int4Weights& w,
                                                size_t b0, float lo, float hi, float* out) {
  const size_t k = w.k(), n = w.n(), groups = w.groups();
  float sum[MR][NB * 8];
  for (size_t r = 0; r + MR <= rows; r += MR) {
    if (w.bf16_scales()) {
      tile_avx2<MR, NB, true>(x + r * k, k, params + r, xsums + r * groups, w, b0, sum);
    } else {
      tile_avx2<MR, NB, false>(x + r * k, k, params + r, xsums + r * groups, w, b0, sum);
    }
    for (int i = 0; i < MR; ++i) {
      const size_t cols = std::min<size_t>(NB * 8, n - b0 * 8);
      store_row(sum[i], params[r + i].scale, w.bias() != nullptr ? w.bias() + b0 * 8 : nullptr, lo, hi, cols,
                out + (r + i) * n + b0 * 8);
    }
  }
}

// Blocks [b0, b1) for every row: tiles of 4 rows x 1 block while 4 rows remain (the widened weights serve
// four rows), then single rows over 4, 2 or 1 blocks (the broadcast codes serve several blocks).
__attribute__((target("avx2"))) void blocks_avx2(const int8_t* x, const RowQuantParams* params,
                                                 const int32_t* xsums, size_t rows, const Int4Weights& w, size_t b0,
                                                 size_t b1, float lo, float hi, float* out) {
  const size_t k = w.k(), n = w.n(), groups = w.groups();
  const size_t full = rows / 4 * 4;
  if (full > 0) {
    for (size_t b = b0; b < b1; ++b) tiles_avx2<4, 1>(x, params, xsums, full, w, b, lo, hi, out);
  }
  for (size_t r = full; r < rows; ++r) {
    const int8_t* xr = x + r * k;
    const RowQuantParams* pr = params + r;
    const int32_t* sr = xsums + r * groups;
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
  code_sums(x, rows, w, scratch);
  const bool avx2 = use_avx2();
  auto run = [&](size_t b0, size_t b1) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (avx2) return blocks_avx2(x, params, scratch, rows, w, b0, b1, out_min, out_max, out);
#endif
    for (size_t b = b0; b < b1; ++b) block_generic(x, params, scratch, 0, rows, w, b, out_min, out_max, out);
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
