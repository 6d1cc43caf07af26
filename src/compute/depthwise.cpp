#include "compute/depthwise.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "compute/conv_rows.h"
#include "compute/packed_gemm.h"
#include "core/cpu_features.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ETNP_DEPTHWISE_AVX2 1
#elif defined(__aarch64__)
#include <arm_neon.h>
#define ETNP_DEPTHWISE_NEON 1
#endif

namespace etnp::compute {
namespace {

constexpr size_t kMaxPeriod = 4096;
constexpr size_t kMaxKernel = 16;  // kernel rows (padded input rows kept at once)

size_t weight_period(size_t channels) {
  size_t period = channels;
  while (period % 8 != 0) period += channels;  // lcm(C, 8)
  return period;
}

#ifdef ETNP_DEPTHWISE_AVX2
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
    acc = _mm256_min_ps(vhi, _mm256_max_ps(vlo, acc));
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
  for (int p = 0; p < P; ++p) _mm256_storeu_ps(out + p * c, _mm256_min_ps(hi, _mm256_max_ps(lo, acc[p])));
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
  for (int p = 0; p < P; ++p) _mm256_storeu_ps(out + p * c, _mm256_min_ps(hi, _mm256_max_ps(lo, acc[p])));
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
    _mm256_storeu_ps(out + ch, _mm256_min_ps(vhi, _mm256_max_ps(vlo, acc)));
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

#ifdef ETNP_DEPTHWISE_AVX2
// AVX-512: the same blocks over 16 channels a vector (a trailing 8 through the AVX2 block), the same sums in the
// same order, so both levels give the same bits. Clamps use the zero-masked forms with a full mask: GCC 12's
// unmasked ones read an uninitialized _mm512_undefined_ps() (-Wmaybe-uninitialized).
__attribute__((target("avx512f"), always_inline)) inline __m512 clamp16(__m512 v, __m512 lo, __m512 hi) {
  return _mm512_maskz_min_ps(0xffff, hi, _mm512_maskz_max_ps(0xffff, lo, v));
}

template <int P>
__attribute__((target("avx512f"), always_inline)) inline void depthwise_block16(
    const float* const* rows, size_t kh, size_t kw, size_t c, size_t step, size_t in_off, const float* weights,
    __m512 bias, __m512 lo, __m512 hi, float* out) {
  __m512 acc[P];
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) acc[p] = bias;
  for (size_t ky = 0; ky < kh; ++ky) {
    const float* row = rows[ky] + in_off;
    const float* wk = weights + ky * kw * c;
    for (size_t kx = 0; kx < kw; ++kx) {
      const __m512 w = _mm512_loadu_ps(wk + kx * c);
      const float* src = row + kx * c;
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) acc[p] = _mm512_fmadd_ps(_mm512_loadu_ps(src + p * step), w, acc[p]);
    }
  }
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) _mm512_storeu_ps(out + p * c, clamp16(acc[p], lo, hi));
}

template <int P>
__attribute__((target("avx512f"), always_inline)) inline void depthwise_block3_16(
    const float* const* rows, size_t kh, size_t c, size_t in_off, const float* weights, __m512 bias, __m512 lo,
    __m512 hi, float* out) {
  __m512 acc[P];
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) acc[p] = bias;
  for (size_t ky = 0; ky < kh; ++ky) {
    const float* row = rows[ky] + in_off;
    const float* wk = weights + ky * 3 * c;
    const __m512 w[3] = {_mm512_loadu_ps(wk), _mm512_loadu_ps(wk + c), _mm512_loadu_ps(wk + 2 * c)};
#pragma GCC unroll 32
    for (int i = 0; i < P + 2; ++i) {
      const __m512 x = _mm512_loadu_ps(row + i * c);
#pragma GCC unroll 3
      for (int kx = 0; kx < 3; ++kx) {
        const int d = i - kx;  // input i is tap kx of output d
        if (d >= 0 && d < P) acc[d] = _mm512_fmadd_ps(x, w[kx], acc[d]);
      }
    }
  }
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) _mm512_storeu_ps(out + p * c, clamp16(acc[p], lo, hi));
}

template <int P>
__attribute__((target("avx512f,avx2,fma"), always_inline)) inline void depthwise_blocks_avx512(
    const float* const* rows, size_t kh, size_t kw, size_t c, size_t stride, const float* weights, const float* bias,
    size_t out_w, float lo, float hi, float* out, size_t& x) {
  const size_t step = stride * c;
  const __m512 lo16 = _mm512_set1_ps(lo), hi16 = _mm512_set1_ps(hi);
  const __m256 lo8 = _mm256_set1_ps(lo), hi8 = _mm256_set1_ps(hi);
  for (; x + P <= out_w; x += P) {
    size_t ch = 0;
    for (; ch + 16 <= c; ch += 16) {
      const __m512 b = _mm512_loadu_ps(bias + ch);
      float* o = out + x * c + ch;
      if (kw == 3 && stride == 1) {
        depthwise_block3_16<P>(rows, kh, c, x * step + ch, weights + ch, b, lo16, hi16, o);
      } else {
        depthwise_block16<P>(rows, kh, kw, c, step, x * step + ch, weights + ch, b, lo16, hi16, o);
      }
    }
    if (ch < c) {  // c % 16 == 8
      const __m256 b = _mm256_loadu_ps(bias + ch);
      float* o = out + x * c + ch;
      if (kw == 3 && stride == 1) {
        depthwise_block3_avx2<P>(rows, kh, c, x * step + ch, weights + ch, b, lo8, hi8, o);
      } else {
        depthwise_block_avx2<P>(rows, kh, kw, c, step, x * step + ch, weights + ch, b, lo8, hi8, o);
      }
    }
  }
}

// Square K x K kernels (3 or 5) at stride S (1 or 2): P output pixels of one block of 16 channels (`m`: the lanes
// in use, 8 for the tail of a channel count that is 8 more than a multiple of 16), the K * K weight vectors in
// registers. Each input vector is loaded once and feeds the (up to K) outputs whose taps it is: the same
// multiply-adds in the same order per output as the other blocks (bias, then taps in (ky, kx) order).
template <int K, int P, int S>
__attribute__((target("avx512f"), always_inline)) inline void depthwise_square_block16(
    const float* const* rows, size_t off, size_t c, const __m512 (&w)[K * K], __m512 bias, __m512 lo, __m512 hi,
    __mmask16 m, float* out) {
  __m512 acc[P];
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) acc[p] = bias;
#pragma GCC unroll 5
  for (int ky = 0; ky < K; ++ky) {
    const float* row = rows[ky] + off;
#pragma GCC unroll 32
    for (int i = 0; i < (P - 1) * S + K; ++i) {
      __m512 x = _mm512_maskz_loadu_ps(m, row + i * c);
      asm("" : "+v"(x));  // one load for all its uses (GCC would fold a load into each multiply-add)
#pragma GCC unroll 5
      for (int kx = 0; kx < K; ++kx) {
        const int d = (i - kx) / S;  // input i is tap kx of output d when i - kx == d * S
        if (i - kx >= 0 && (i - kx) % S == 0 && d < P) acc[d] = _mm512_fmadd_ps(x, w[ky * K + kx], acc[d]);
      }
    }
  }
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) _mm512_mask_storeu_ps(out + p * c, m, clamp16(acc[p], lo, hi));
}

// Output pixel x of a K x K kernel at `stride` that has taps outside the image: channels [ch, ch + 16) (m), the
// taps inside alone.
template <int K>
__attribute__((target("avx512f"), always_inline)) inline void depthwise_square_edge16(
    const float* const* src, size_t w, size_t c, size_t ch, size_t x, size_t stride, size_t pad_left,
    const float* weights, __m512 bias, __m512 lo, __m512 hi, __mmask16 m, float* out) {
  const size_t col = x * stride;  // padded input column of its first tap
  __m512 acc = bias;
  for (size_t ky = 0; ky < K; ++ky) {
    if (src[ky] == nullptr) continue;
    for (size_t kx = 0; kx < K; ++kx) {
      const size_t ix = col + kx - pad_left;  // unsigned wrap-around: left of the image
      if (ix >= w) continue;
      acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, src[ky] + ix * c + ch),
                            _mm512_maskz_loadu_ps(m, weights + (ky * K + kx) * c + ch), acc);
    }
  }
  _mm512_mask_storeu_ps(out + x * c + ch, m, clamp16(acc, lo, hi));
}

// One output row of a K x K kernel, channels a multiple of 8, one block of 16 channels at a time along the whole
// row, so that its weights stay in registers (blocks of pixels over every channel reloaded them, and reached a
// quarter of the FMA rate). `src[ky]`: the input row of tap row ky, null above or below the image; outputs
// [left, right) have every tap inside the row and read `zero` for a null row, as the blocks of other kernels do;
// the others sum only their taps inside the image, as depthwise_edge_pixel_c8 does: the same bits. Blocks of 8
// pixels for 3x3 kernels, of 4 for 5x5 ones (25 weight vectors and 8 sums would not fit the 32 registers).
template <int K, int S>
__attribute__((target("avx512f"))) void depthwise_square_row_avx512(const float* const* src, const float* zero,
                                                                   size_t w, size_t c, size_t pad_left, size_t left,
                                                                   size_t right, size_t out_w, const float* weights,
                                                                   const float* bias, float lo, float hi,
                                                                   float* out) {
  constexpr int kBlock = K == 3 ? 8 : 4;
  const __m512 lo16 = _mm512_set1_ps(lo), hi16 = _mm512_set1_ps(hi);
  const size_t step = S * c;
  const size_t first_col = left * S - pad_left;  // input column of output `left`'s first tap
  const float* inside[K];
  for (int ky = 0; ky < K; ++ky) inside[ky] = (src[ky] != nullptr ? src[ky] : zero) + first_col * c;
  for (size_t ch = 0; ch < c; ch += 16) {
    const __mmask16 m = ch + 16 <= c ? __mmask16(0xffff) : __mmask16(0x00ff);
    __m512 wv[K * K];
#pragma GCC unroll 25
    for (int t = 0; t < K * K; ++t) wv[t] = _mm512_maskz_loadu_ps(m, weights + t * c + ch);
    const __m512 b = _mm512_maskz_loadu_ps(m, bias + ch);
    for (size_t x = 0; x < left; ++x) {
      depthwise_square_edge16<K>(src, w, c, ch, x, S, pad_left, weights, b, lo16, hi16, m, out);
    }
    float* o = out + left * c + ch;
    const size_t count = right - left;
    size_t x = 0;
    for (; x + kBlock <= count; x += kBlock) {
      depthwise_square_block16<K, kBlock, S>(inside, x * step + ch, c, wv, b, lo16, hi16, m, o + x * c);
    }
    for (; x < count; ++x) depthwise_square_block16<K, 1, S>(inside, x * step + ch, c, wv, b, lo16, hi16, m, o + x * c);
    for (size_t x = right; x < out_w; ++x) {
      depthwise_square_edge16<K>(src, w, c, ch, x, S, pad_left, weights, b, lo16, hi16, m, out);
    }
  }
}

__attribute__((target("avx512f,avx2,fma"))) void depthwise_row_c8_avx512(const float* const* rows, size_t kh,
                                                                         size_t kw, size_t c, size_t stride,
                                                                         const float* weights, const float* bias,
                                                                         size_t out_w, float lo, float hi,
                                                                         float* out) {
  size_t x = 0;
  depthwise_blocks_avx512<8>(rows, kh, kw, c, stride, weights, bias, out_w, lo, hi, out, x);
  depthwise_blocks_avx512<4>(rows, kh, kw, c, stride, weights, bias, out_w, lo, hi, out, x);
  depthwise_blocks_avx512<2>(rows, kh, kw, c, stride, weights, bias, out_w, lo, hi, out, x);
  depthwise_blocks_avx512<1>(rows, kh, kw, c, stride, weights, bias, out_w, lo, hi, out, x);
}
#endif

#ifdef ETNP_DEPTHWISE_NEON
// The NEON twins of the AVX2 kernels above: the same loops and sums (each output from its bias, one fused
// multiply-add per tap in the same order), 8 channels as two q registers.

// Eight floats (channels) as a pair of q registers.
struct F8 {
  float32x4_t lo, hi;
};
[[gnu::always_inline]] inline F8 load8(const float* p) { return {vld1q_f32(p), vld1q_f32(p + 4)}; }
[[gnu::always_inline]] inline F8 fma8(F8 acc, F8 x, F8 w) {
  return {vfmaq_f32(acc.lo, x.lo, w.lo), vfmaq_f32(acc.hi, x.hi, w.hi)};
}
[[gnu::always_inline]] inline void store8_clamped(float* p, F8 v, float32x4_t lo, float32x4_t hi) {
  vst1q_f32(p, vminq_f32(vmaxq_f32(v.lo, lo), hi));
  vst1q_f32(p + 4, vminq_f32(vmaxq_f32(v.hi, lo), hi));
}

// depthwise_row_avx2's loop, 4 floats at a time (the period is a multiple of 8, so of 4).
void depthwise_row_neon(const float* const* rows, size_t kh, size_t kw, size_t c, const float* weights,
                        const float* bias, size_t period, size_t n, float lo, float hi, float* out) {
  const float32x4_t vlo = vdupq_n_f32(lo), vhi = vdupq_n_f32(hi);
  size_t phase = 0;
  for (size_t j = 0; j < n; j += 4) {
    float32x4_t acc = vld1q_f32(bias + phase);
    for (size_t ky = 0; ky < kh; ++ky) {
      const float* src = rows[ky] + j;
      const float* wk = weights + ky * kw * period + phase;
      for (size_t kx = 0; kx < kw; ++kx) acc = vfmaq_f32(acc, vld1q_f32(src + kx * c), vld1q_f32(wk + kx * period));
    }
    acc = vminq_f32(vmaxq_f32(acc, vlo), vhi);
    if (j + 4 <= n) {
      vst1q_f32(out + j, acc);
    } else {
      float tail[4];
      vst1q_f32(tail, acc);
      std::copy(tail, tail + (n - j), out + j);
    }
    phase += 4;
    if (phase == period) phase = 0;
  }
}

template <int P>
[[gnu::always_inline]] inline void depthwise_block_neon(const float* const* rows, size_t kh, size_t kw, size_t c,
                                                        size_t step, size_t in_off, const float* weights, F8 bias,
                                                        float32x4_t lo, float32x4_t hi, float* out) {
  F8 acc[P];
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) acc[p] = bias;
  for (size_t ky = 0; ky < kh; ++ky) {
    const float* row = rows[ky] + in_off;
    const float* wk = weights + ky * kw * c;
    for (size_t kx = 0; kx < kw; ++kx) {
      const F8 w = load8(wk + kx * c);
      const float* src = row + kx * c;
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) acc[p] = fma8(acc[p], load8(src + p * step), w);
    }
  }
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) store8_clamped(out + p * c, acc[p], lo, hi);
}

template <int P>
[[gnu::always_inline]] inline void depthwise_block3_neon(const float* const* rows, size_t kh, size_t c,
                                                         size_t in_off, const float* weights, F8 bias,
                                                         float32x4_t lo, float32x4_t hi, float* out) {
  F8 acc[P];
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) acc[p] = bias;
  for (size_t ky = 0; ky < kh; ++ky) {
    const float* row = rows[ky] + in_off;
    const float* wk = weights + ky * 3 * c;
    const F8 w[3] = {load8(wk), load8(wk + c), load8(wk + 2 * c)};
#pragma GCC unroll 32
    for (int i = 0; i < P + 2; ++i) {
      const F8 x = load8(row + i * c);
#pragma GCC unroll 3
      for (int kx = 0; kx < 3; ++kx) {
        const int d = i - kx;  // input i is tap kx of output d
        if (d >= 0 && d < P) acc[d] = fma8(acc[d], x, w[kx]);
      }
    }
  }
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) store8_clamped(out + p * c, acc[p], lo, hi);
}

template <int P>
[[gnu::always_inline]] inline void depthwise_blocks_neon(const float* const* rows, size_t kh, size_t kw, size_t c,
                                                         size_t stride, const float* weights, const float* bias,
                                                         size_t out_w, float32x4_t lo, float32x4_t hi, float* out,
                                                         size_t& x) {
  const size_t step = stride * c;
  for (; x + P <= out_w; x += P) {
    for (size_t ch = 0; ch < c; ch += 8) {
      const F8 b = load8(bias + ch);
      float* o = out + x * c + ch;
      if (kw == 3 && stride == 1) {
        depthwise_block3_neon<P>(rows, kh, c, x * step + ch, weights + ch, b, lo, hi, o);
      } else {
        depthwise_block_neon<P>(rows, kh, kw, c, step, x * step + ch, weights + ch, b, lo, hi, o);
      }
    }
  }
}

void depthwise_edge_pixel_c8_neon(const float* const* rows, size_t kh, size_t taps, size_t c, const float* weights,
                                  size_t weight_row, const float* bias, float lo, float hi, float* out) {
  const float32x4_t vlo = vdupq_n_f32(lo), vhi = vdupq_n_f32(hi);
  for (size_t ch = 0; ch < c; ch += 8) {
    F8 acc = load8(bias + ch);
    for (size_t ky = 0; ky < kh; ++ky) {
      if (rows[ky] == nullptr) continue;
      for (size_t t = 0; t < taps; ++t) {
        acc = fma8(acc, load8(rows[ky] + t * c + ch), load8(weights + ky * weight_row + t * c + ch));
      }
    }
    store8_clamped(out + ch, acc, vlo, vhi);
  }
}

void depthwise_row_c8_neon(const float* const* rows, size_t kh, size_t kw, size_t c, size_t stride,
                           const float* weights, const float* bias, size_t out_w, float lo, float hi, float* out) {
  const float32x4_t vlo = vdupq_n_f32(lo), vhi = vdupq_n_f32(hi);
  size_t x = 0;
  depthwise_blocks_neon<8>(rows, kh, kw, c, stride, weights, bias, out_w, vlo, vhi, out, x);
  depthwise_blocks_neon<4>(rows, kh, kw, c, stride, weights, bias, out_w, vlo, vhi, out, x);
  depthwise_blocks_neon<2>(rows, kh, kw, c, stride, weights, bias, out_w, vlo, vhi, out, x);
  depthwise_blocks_neon<1>(rows, kh, kw, c, stride, weights, bias, out_w, vlo, vhi, out, x);
}
#endif

// A whole output row of a square kernel (depthwise_square_row_avx512's arguments).
using DepthwiseSquareRow = void (*)(const float* const* src, const float* zero, size_t w, size_t c, size_t pad_left,
                                    size_t left, size_t right, size_t out_w, const float* weights, const float* bias,
                                    float lo, float hi, float* out);
// This architecture's vector kernels (AVX2 or NEON), and whether the CPU level allows them.
#if defined(ETNP_DEPTHWISE_AVX2)
bool vector_kernels() { return has_avx2_fma(); }
constexpr auto depthwise_row_vec = depthwise_row_avx2;
void depthwise_row_c8_vec(const float* const* rows, size_t kh, size_t kw, size_t c, size_t stride,
                          const float* weights, const float* bias, size_t out_w, float lo, float hi, float* out) {
  (cpu_level() >= CpuLevel::avx512_vnni ? depthwise_row_c8_avx512 : depthwise_row_c8_avx2)(
      rows, kh, kw, c, stride, weights, bias, out_w, lo, hi, out);
}
constexpr auto depthwise_edge_pixel_c8_vec = depthwise_edge_pixel_c8_avx2;
// Whole rows where the CPU has AVX-512 (depthwise_square_row_avx512) and they beat the pixel blocks: 3x3 kernels at
// stride 1 or 2 (1.2-1.5x on MobileNetV2's layers), 5x5 ones at stride 1 over rows of 14 outputs or more (1.2-1.6x;
// at stride 2, and over 7 outputs of which 4 are edge ones, 0.9-1.1x). Else null.
DepthwiseSquareRow depthwise_square_row_vec(size_t kh, size_t kw, size_t stride, size_t out_w) {
  if (cpu_level() < CpuLevel::avx512_vnni || kh != kw) return nullptr;
  if (kh == 3 && stride == 1) return depthwise_square_row_avx512<3, 1>;
  if (kh == 3 && stride == 2) return depthwise_square_row_avx512<3, 2>;
  if (kh == 5 && stride == 1 && out_w >= 14) return depthwise_square_row_avx512<5, 1>;
  return nullptr;
}
#elif defined(ETNP_DEPTHWISE_NEON)
bool vector_kernels() { return has_neon(); }
constexpr auto depthwise_row_vec = depthwise_row_neon;
constexpr auto depthwise_row_c8_vec = depthwise_row_c8_neon;
constexpr auto depthwise_edge_pixel_c8_vec = depthwise_edge_pixel_c8_neon;
DepthwiseSquareRow depthwise_square_row_vec(size_t /*kh*/, size_t /*kw*/, size_t /*stride*/, size_t /*out_w*/) {
  return nullptr;
}
#endif
#if defined(ETNP_DEPTHWISE_AVX2) || defined(ETNP_DEPTHWISE_NEON)
#define ETNP_DEPTHWISE_VEC 1
#endif

// Any channel count and stride, one output at a time (the portable level).
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
  // The period is a whole number of channel rows: each tap's row repeated, copied rather than indexed modulo C.
  for (size_t t = 0; t < kh_ * kw_; ++t) {
    const float* row = filter + t * c_;
    for (size_t j = 0; j < period_; j += c_) std::copy(row, row + c_, &weights_[t * period_ + j]);
  }
  if (bias != nullptr) {
    for (size_t j = 0; j < period_; j += c_) std::copy(bias, bias + c_, &bias_[j]);
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
#ifdef ETNP_DEPTHWISE_VEC
  const Edges e = edges(w, out_w);
  return vector_kernels() && c_ % 8 == 0 && e.right > e.left;
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

void DepthwiseConv::run_rows(const float* in, size_t h, size_t w, size_t out_w, size_t y0, size_t y1,
                             float out_min, float out_max, float* out, float* rows) const {
  const float* taps[kMaxKernel];
#ifdef ETNP_DEPTHWISE_VEC
  if (reads_in_place(w, out_w)) {
    // The pixel-block kernel reads exactly the taps it needs, so the outputs whose taps lie inside the image
    // read the input rows in place, and a row of zeros stands for the rows above and below the image; the few
    // outputs at each edge sum only their taps inside (a full padded copy of every input row cost ~7% of
    // MobileNetV2, and padded copies of the edge columns as much as the edge outputs themselves).
    const Edges e = edges(w, out_w);
    // The row of zeros, only where a tap of these rows falls above or below the image.
    float* zero = rows;
    if (y0 * sh_ < pad_top_ || (y1 - 1) * sh_ + kh_ > h + pad_top_) std::fill(zero, zero + w * c_, 0.0f);
    const size_t first_col = e.left * sw_ - pad_left_;  // input column of the first inside output's first tap
    const DepthwiseSquareRow square_row = depthwise_square_row_vec(kh_, kw_, sw_, out_w);
    for (size_t y = y0; y < y1; ++y) {
      const float* src[kMaxKernel];
      for (size_t ky = 0; ky < kh_; ++ky) {
        const size_t iy = y * sh_ + ky - pad_top_;  // unsigned wrap-around: a padding row
        src[ky] = iy < h ? in + iy * w * c_ : nullptr;
      }
      float* out_row = out + (y - y0) * out_w * c_;
      if (square_row != nullptr) {
        square_row(src, zero, w, c_, pad_left_, e.left, e.right, out_w, weights_.data(), bias_.data(), out_min, out_max,
               out_row);
        continue;
      }
      for (size_t ky = 0; ky < kh_; ++ky) taps[ky] = (src[ky] != nullptr ? src[ky] : zero) + first_col * c_;
      depthwise_row_c8_vec(taps, kh_, kw_, c_, sw_, weights_.data(), bias_.data(), e.right - e.left, out_min,
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
        depthwise_edge_pixel_c8_vec(edge_rows, kh_, kx1 > kx0 ? kx1 - kx0 : 0, c_, weights_.data() + kx0 * c_,
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
    float* out_row = out + (y - y0) * n;
#ifdef ETNP_DEPTHWISE_VEC
    if (vector_kernels() && c_ % 8 == 0) {
      depthwise_row_c8_vec(taps, kh_, kw_, c_, sw_, weights_.data(), bias_.data(), out_w, out_min, out_max, out_row);
      continue;
    }
    if (vector_kernels() && sw_ == 1) {
      depthwise_row_vec(taps, kh_, kw_, c_, weights_.data(), bias_.data(), period_, n, out_min, out_max, out_row);
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

void DepthwiseConv::run(const float* in, size_t batch, size_t h, size_t w, size_t out_h, size_t out_w,
                        float out_min, float out_max, float* out, std::vector<float>& scratch) const {
  if (batch == 0 || out_h == 0 || out_w == 0) return;
  const size_t per_chunk = scratch_floats(w, out_w);
  const size_t chunks = conv_row_chunks(batch, out_h);
  scratch.resize(chunks * per_chunk);
  for_each_conv_row_chunk(batch, out_h, chunks, batch * out_h * out_w * c_ * kh_ * kw_ * kDepthwiseCost,
                          [&](size_t chunk, size_t b, size_t y0, size_t y1) {
                            run_rows(in + b * h * w * c_, h, w, out_w, y0, y1, out_min, out_max,
                                     out + (b * out_h + y0) * out_w * c_, scratch.data() + chunk * per_chunk);
                          });
}

namespace {
/// Depthwise output rows per band: about this many bytes, which stay in L2 (with the band's input rows and the
/// pointwise panels) until the GEMM has read them.
constexpr size_t kBandBytes = 96 * 1024;
}  // namespace

bool depthwise_then_pointwise_pays(size_t out_h, size_t out_w, size_t channels) {
  // At least two pixels a band: a one-row product takes the GEMV path, whose sums run in another order.
  return out_w >= 2 && out_h >= 2 && out_h * out_w * channels * sizeof(float) >= 4 * kBandBytes;
}

void depthwise_then_pointwise(const DepthwiseConv& depthwise, float dw_min, float dw_max, const PackedGemm& pointwise,
                              float pw_min, float pw_max, const float* in, size_t batch, size_t h, size_t w,
                              size_t out_h, size_t out_w, float* out, std::vector<float>& scratch) {
  if (batch == 0 || out_h == 0 || out_w == 0) return;
  const size_t c = depthwise.channels(), n = pointwise.n();
  const size_t row_floats = out_w * c;
  const size_t band = std::clamp<size_t>(kBandBytes / (row_floats * sizeof(float)), 1, out_h);
  const size_t dw_floats = depthwise.scratch_floats(w, out_w);
  const size_t per_chunk = dw_floats + band * row_floats;
  const size_t chunks = conv_row_chunks(batch, out_h);
  scratch.resize(chunks * per_chunk);
  const size_t outputs = batch * out_h * out_w;
  const size_t work = outputs * c * (depthwise.taps() * kDepthwiseCost + n);
  for_each_conv_row_chunk(batch, out_h, chunks, work, [&](size_t chunk, size_t b, size_t y0, size_t y1) {
    float* dw_scratch = scratch.data() + chunk * per_chunk;
    float* rows = dw_scratch + dw_floats;
    for (size_t y = y0; y < y1; y += band) {
      const size_t y_end = std::min(y1, y + band);
      depthwise.run_rows(in + b * h * w * c, h, w, out_w, y, y_end, dw_min, dw_max, rows, dw_scratch);
      pointwise.run_on_caller(rows, (y_end - y) * out_w, c, pw_min, pw_max, out + (b * out_h + y) * out_w * n);
    }
  });
}

}  // namespace etnp::compute
