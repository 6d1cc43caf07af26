#include "backends/xnnpack/conv_qs8.h"

#include <algorithm>
#include <cstring>

#include "compute/parallel.h"
#include "core/cpu_features.h"
#include "core/target_region.h"
#include "etnp/threadpool.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace etnp::xnn {
namespace {

constexpr size_t kPassPixels = 64;  // output pixels gathered per pass: their rows stay in L2 while every block runs

// Copies rows of filter taps into the packed layout: [blocks][groups][Block outputs][Group positions], returning
// each output's sum of weights (wrapping, as the bias correction needs) in `sums`. (A fixed-size copy per group
// and a separate sum: the load of an int8 network is mostly this loop.)
template <size_t Block, size_t Group>
void pack_blocks(const int8_t* filter, size_t n, size_t patch, size_t groups, int8_t* packed, uint32_t* sums) {
  const size_t block_bytes = groups * Block * Group, full = patch / Group, tail = patch - full * Group;
  for (size_t j = 0; j < n; ++j) {
    const int8_t* row = filter + j * patch;
    int8_t* dst = packed + (j / Block) * block_bytes + (j % Block) * Group;
    for (size_t g = 0; g < full; ++g) std::memcpy(dst + g * Block * Group, row + g * Group, Group);
    if (tail != 0) std::memcpy(dst + full * Block * Group, row + full * Group, tail);
    uint32_t sum = 0;
    for (size_t i = 0; i < patch; ++i) sum += static_cast<uint32_t>(static_cast<int32_t>(row[i]));
    sums[j] = sum;
  }
}

// A gathered row's elements: the VNNI tiles take bytes x + 128 (x ^ 0x80, unsigned), the AVX2 ones int16 x.
inline uint8_t row_code(int8_t x, uint8_t*) { return static_cast<uint8_t>(static_cast<uint8_t>(x) ^ 0x80u); }
inline int16_t row_code(int8_t x, int16_t*) { return x; }

template <typename T>
void code_copy(const int8_t* src, T* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = row_code(src[i], dst);
}

#if defined(__x86_64__) && defined(__GNUC__)
// Bytes are gathered for the VNNI tiles alone, so on a CPU with AVX-512 BW: 64 at a time, the tail masked (a
// 3x3 patch of 64 channels is three runs of 192 bytes; the baseline loop took 16 at a time, then one by one).
ETNP_TARGET_BEGIN("avx512f,avx512bw")
void code_copy(const int8_t* src, uint8_t* dst, size_t n) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  size_t i = 0;
  for (; i + 64 <= n; i += 64) _mm512_storeu_si512(dst + i, _mm512_xor_si512(_mm512_loadu_si512(src + i), flip));
  if (i < n) {
    const __mmask64 tail = (uint64_t{1} << (n - i)) - 1;  // n - i < 64
    _mm512_mask_storeu_epi8(dst + i, tail, _mm512_xor_si512(_mm512_maskz_loadu_epi8(tail, src + i), flip));
  }
}
ETNP_TARGET_END
#endif

// Gathers the patches of output pixels [p0, p1) (numbered over batch x out_h x out_w) into rows of `row_elems`
// elements; taps outside the image read the input zero point, and the last group's tail reads 0 (its weights
// are 0 too).
// A pointwise convolution whose channels fill whole rows: each output pixel's patch is its input pixel, as it lies.
bool patches_are_pixels(const ConvQS8::Params& p, size_t row_elems) {
  return p.kernel_h == 1 && p.kernel_w == 1 && p.stride_h == 1 && p.stride_w == 1 && p.pad_top == 0 &&
         p.pad_left == 0 && row_elems == p.in_channels;
}

template <typename T>
void gather_rows(const ConvQS8::Params& p, size_t row_elems, const int8_t* in, size_t h, size_t w, size_t out_h,
                 size_t out_w, size_t p0, size_t p1, T* rows) {
  const size_t c = p.in_channels, patch = p.kernel_h * p.kernel_w * c;
  if (patches_are_pixels(p, row_elems)) {
    // Each pixel's patch is itself and the rows are the input's pixels as they lie: one copy.
    code_copy(in + p0 * c, rows, (p1 - p0) * c);
    return;
  }
  const T fill = row_code(p.in_zero_point, rows);
  size_t image = p0 / (out_h * out_w), oy = p0 / out_w % out_h, ox = p0 % out_w;
  for (size_t px = p0; px < p1; ++px) {
    const int8_t* src_image = in + image * h * w * c;
    T* dst = rows + (px - p0) * row_elems;
    for (size_t ky = 0; ky < p.kernel_h; ++ky) {
      const auto iy = static_cast<ptrdiff_t>(oy * p.stride_h + ky * p.dilation_h) - static_cast<ptrdiff_t>(p.pad_top);
      const bool row_inside = iy >= 0 && static_cast<size_t>(iy) < h;
      const auto ix0 = static_cast<ptrdiff_t>(ox * p.stride_w) - static_cast<ptrdiff_t>(p.pad_left);
      if (row_inside && p.dilation_w == 1 && ix0 >= 0 && static_cast<size_t>(ix0) + p.kernel_w <= w) {
        // The kernel row lies inside the image: its taps are one run of the input row (a first layer's 3
        // channels: 9 elements, not three copies of 3).
        code_copy(src_image + (static_cast<size_t>(iy) * w + static_cast<size_t>(ix0)) * c, dst, p.kernel_w * c);
        dst += p.kernel_w * c;
        continue;
      }
      for (size_t kx = 0; kx < p.kernel_w; ++kx, dst += c) {
        const auto ix =
            static_cast<ptrdiff_t>(ox * p.stride_w + kx * p.dilation_w) - static_cast<ptrdiff_t>(p.pad_left);
        if (!row_inside || ix < 0 || static_cast<size_t>(ix) >= w) {
          std::fill(dst, dst + c, fill);
        } else {
          code_copy(src_image + (static_cast<size_t>(iy) * w + static_cast<size_t>(ix)) * c, dst, c);
        }
      }
    }
    std::fill(dst, dst + (row_elems - patch), T(0));
    if (++ox == out_w) {
      ox = 0;
      if (++oy == out_h) {
        oy = 0;
        ++image;
      }
    }
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
bool vnni_level() { return cpu_level() >= CpuLevel::avx512_vnni; }
#else
bool vnni_level() { return false; }
#endif

}  // namespace

ConvQS8::ConvQS8(const int8_t* filter, const int32_t* bias, const float* scales, const Params& params)
    : p_(params), vnni_(vnni_level()) {
  const size_t n = p_.out_channels;
  const size_t block = vnni_ ? 16 : 8, group = vnni_ ? 4 : 2;  // outputs per block, patch positions per lane
  patch_ = p_.kernel_h * p_.kernel_w * p_.in_channels;
  groups_ = (patch_ + group - 1) / group;
  blocks_ = (n + block - 1) / block;
  row_elems_ = groups_ * group;
  packed_.assign(blocks_ * row_elems_ * block, 0);
  bias_.assign(blocks_ * block, 0);
  scales_.assign(blocks_ * block, 0.0f);
  std::vector<uint32_t> sums(n);
  if (vnni_) {
    pack_blocks<16, 4>(filter, n, patch_, groups_, packed_.data(), sums.data());
  } else {
    pack_blocks<8, 2>(filter, n, patch_, groups_, packed_.data(), sums.data());
  }
  // Rows read x + offset and padded taps in_zp + offset: sum((x + offset) * w) - (in_zp + offset) * sum(w) is
  // sum((x - in_zp) * w). Unsigned arithmetic wraps as XNNPACK's int32 sums do.
  const auto offset = static_cast<uint32_t>(static_cast<int32_t>(p_.in_zero_point) + (vnni_ ? 128 : 0));
  for (size_t j = 0; j < n; ++j) {
    const uint32_t b = bias == nullptr ? 0u : static_cast<uint32_t>(bias[j]);
    bias_[j] = static_cast<int32_t>(b - offset * sums[j]);
    scales_[j] = scales[j];
  }
}

#if defined(__x86_64__) && defined(__GNUC__)

ETNP_TARGET_BEGIN("avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni")
namespace {

constexpr size_t kVnniBlock = 16;  // outputs per packed block: the int32 lanes of one 512-bit vector
constexpr __mmask16 kAll = 0xFFFF;

// The output range less the zero point (as floats) and the zero point: XNNPACK's fp32 requantization is
// clamp(float(acc) * scale, lo - zp, hi - zp), rounded half to even, + zp.
struct RequantVnni {
  __m512 lo, hi;
  __m512i zp;
};

// acc += vpdpbusd(u8, s8), the accumulator an in-out operand of the instruction. GCC 12 compiled the intrinsic
// (_mm512_dpbusd_epi32) in vnni_tile's k loop with each accumulator copied to another register and back around
// every instruction: 415 register moves for its 108 vpdpbusd. Without them live ResNet-18 int8 ran 0.80x the time
// with 1 thread, 0.83x with 2, MobileNetV2 int8 0.89x (Zen 5; alternated builds, 8 rounds). (The qd8 and 4-bit
// tiles and the int8 depthwise measured 1.0-1.8x slower written so: there GCC schedules the intrinsic better.)
__attribute__((always_inline)) inline void dpbusd_into(__m512i& acc, __m512i u8, __m512i s8) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u8), "v"(s8));
}

// Rows [0, MR) x blocks [0, NB) of 16 outputs: acc = bias + sum over the quads of vpdpbusd(row bytes, weights),
// then the requantization; the last block stores the lanes of `last_mask`. `Flip`: the rows are the signed input
// itself (a pointwise convolution reads its pixels where they lie), made unsigned here, a quad at a time.
template <int MR, int NB, bool Flip = false>
void vnni_tile(const uint8_t* rows, size_t row_bytes, size_t quads, const int8_t* w, size_t block_bytes,
               const int32_t* bias, const float* scales, const RequantVnni& q, int8_t* out,
               size_t out_stride, __mmask16 last_mask) {
  __m512i acc[MR][NB];
#pragma GCC unroll 2
  for (int b = 0; b < NB; ++b) {
    const __m512i bv = _mm512_loadu_si512(bias + b * kVnniBlock);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) acc[r][b] = bv;
  }
  for (size_t k = 0; k < quads; ++k) {
    __m512i wv[NB];
#pragma GCC unroll 2
    for (int b = 0; b < NB; ++b) wv[b] = _mm512_loadu_si512(w + b * block_bytes + k * kVnniBlock * 4);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      uint32_t quad;
      std::memcpy(&quad, rows + r * row_bytes + k * 4, 4);
      if constexpr (Flip) quad ^= 0x80808080u;  // q + 128, as gather_rows codes it
      const __m512i x = _mm512_set1_epi32(static_cast<int32_t>(quad));
#pragma GCC unroll 2
      for (int b = 0; b < NB; ++b) dpbusd_into(acc[r][b], x, wv[b]);
    }
  }
#pragma GCC unroll 2
  for (int b = 0; b < NB; ++b) {
    const __m512 scale = _mm512_loadu_ps(scales + b * kVnniBlock);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      // (The maskz forms with every lane set: GCC 12's unmasked ones read an undefined vector and warn.)
      __m512 v = _mm512_mul_ps(_mm512_maskz_cvtepi32_ps(kAll, acc[r][b]), scale);
      v = _mm512_maskz_min_ps(kAll, _mm512_maskz_max_ps(kAll, v, q.lo), q.hi);
      const __m512i i = _mm512_add_epi32(_mm512_maskz_cvtps_epi32(kAll, v), q.zp);  // rounds half to even
      // Narrowed with signed saturation (the clamp above leaves nothing to saturate), the lanes that exist stored.
      _mm512_mask_cvtsepi32_storeu_epi8(out + r * out_stride + b * kVnniBlock, b == NB - 1 ? last_mask : kAll, i);
    }
  }
}

// The products of `pixels` gathered rows (Flip: the input's own signed pixels) with blocks [b0, b1), into out's
// rows (n outputs apart).
template <bool Flip>
void vnni_multiply(const uint8_t* rows, size_t pixels, size_t row_bytes, size_t quads, const int8_t* packed,
                   const int32_t* bias, const float* scales, size_t n, size_t b0, size_t b1, int8_t zp, int8_t lo,
                   int8_t hi, int8_t* out) {
  const RequantVnni q{_mm512_set1_ps(static_cast<float>(lo - zp)),
                                   _mm512_set1_ps(static_cast<float>(hi - zp)), _mm512_set1_epi32(zp)};
  const size_t block_bytes = quads * kVnniBlock * 4;
  for (size_t b = b0; b < b1; b += 2) {
    const int nb = b + 1 < b1 ? 2 : 1;
    const size_t last_cols = std::min(kVnniBlock, n - (b + nb - 1) * kVnniBlock);
    const auto mask = static_cast<__mmask16>((1u << last_cols) - 1u);
    for (size_t r = 0; r < pixels; r += 8) {
      const int mr = static_cast<int>(std::min<size_t>(8, pixels - r));
      const uint8_t* x = rows + r * row_bytes;
      int8_t* o = out + r * n + b * kVnniBlock;
      const int8_t* w = packed + b * block_bytes;
      const int32_t* bb = bias + b * kVnniBlock;
      const float* s = scales + b * kVnniBlock;
      switch (mr * 2 + nb - 1) {
#define ETNP_QS8_TILE(M, NB) \
  case M * 2 + NB - 1:       \
    vnni_tile<M, NB, Flip>(x, row_bytes, quads, w, block_bytes, bb, s, q, o, n, mask); \
    break;
#define ETNP_QS8_ROWS(M) ETNP_QS8_TILE(M, 1) ETNP_QS8_TILE(M, 2)
        ETNP_QS8_ROWS(1) ETNP_QS8_ROWS(2) ETNP_QS8_ROWS(3) ETNP_QS8_ROWS(4)
        ETNP_QS8_ROWS(5) ETNP_QS8_ROWS(6) ETNP_QS8_ROWS(7) ETNP_QS8_ROWS(8)
#undef ETNP_QS8_ROWS
#undef ETNP_QS8_TILE
        default: break;
      }
    }
  }
}

}  // namespace
ETNP_TARGET_END

ETNP_TARGET_BEGIN("avx2,fma")
namespace {

constexpr size_t kAvx2Block = 8;  // outputs per packed block: the int32 lanes of one 256-bit vector
constexpr int kAvx2Rows = 6;      // pixels per tile: 6 x 2 accumulators, 2 weight vectors, a row pair and a product

struct RequantAvx2 {  // as RequantVnni
  __m256 lo, hi;
  __m256i zp;
};

// Rows [0, MR) x blocks [0, NB) of 8 outputs: acc = bias + sum over the pairs of vpmaddwd(row pair, weights
// widened to int16), then the requantization; the last block stores `last_cols` outputs.
template <int MR, int NB>
void avx2_tile(const int16_t* rows, size_t row_elems, size_t pairs, const int8_t* w, size_t block_bytes,
               const int32_t* bias, const float* scales, const RequantAvx2& q, int8_t* out,
               size_t out_stride, size_t last_cols) {
  __m256i acc[MR][NB];
#pragma GCC unroll 2
  for (int b = 0; b < NB; ++b) {
    const __m256i bv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bias + b * kAvx2Block));
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) acc[r][b] = bv;
  }
  for (size_t k = 0; k < pairs; ++k) {
    __m256i wv[NB];
#pragma GCC unroll 2
    for (int b = 0; b < NB; ++b) {
      wv[b] = _mm256_cvtepi8_epi16(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + b * block_bytes + k * kAvx2Block * 2)));
    }
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
      int32_t pair;
      std::memcpy(&pair, rows + r * row_elems + k * 2, 4);
      const __m256i x = _mm256_set1_epi32(pair);
#pragma GCC unroll 2
      for (int b = 0; b < NB; ++b) acc[r][b] = _mm256_add_epi32(acc[r][b], _mm256_madd_epi16(x, wv[b]));
    }
  }
  __m256 scale[NB];
#pragma GCC unroll 2
  for (int b = 0; b < NB; ++b) scale[b] = _mm256_loadu_ps(scales + b * kAvx2Block);
  const size_t cols = (NB - 1) * kAvx2Block + last_cols;
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r) {
    __m128i half[NB];  // each block's 8 int32 outputs narrowed to int16 with signed saturation
#pragma GCC unroll 2
    for (int b = 0; b < NB; ++b) {
      __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(acc[r][b]), scale[b]);
      v = _mm256_min_ps(_mm256_max_ps(v, q.lo), q.hi);
      const __m256i i = _mm256_add_epi32(_mm256_cvtps_epi32(v), q.zp);  // rounds half to even
      half[b] = _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
    }
    // The clamp above leaves nothing to saturate.
    const __m128i bytes = _mm_packs_epi16(half[0], half[NB - 1]);
    int8_t* o = out + r * out_stride;
    if (cols == 16) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o), bytes);
    } else if (cols == 8) {
      _mm_storel_epi64(reinterpret_cast<__m128i*>(o), bytes);
    } else {
      alignas(16) int8_t tmp[16];
      _mm_store_si128(reinterpret_cast<__m128i*>(tmp), bytes);
      std::memcpy(o, tmp, cols);
    }
  }
}

void avx2_multiply(const int16_t* rows, size_t pixels, size_t row_elems, size_t pairs, const int8_t* packed,
                   const int32_t* bias, const float* scales, size_t n, size_t b0, size_t b1, int8_t zp, int8_t lo,
                   int8_t hi, int8_t* out) {
  const RequantAvx2 q{_mm256_set1_ps(static_cast<float>(lo - zp)),
                                   _mm256_set1_ps(static_cast<float>(hi - zp)), _mm256_set1_epi32(zp)};
  const size_t block_bytes = pairs * kAvx2Block * 2;
  for (size_t b = b0; b < b1; b += 2) {
    const int nb = b + 1 < b1 ? 2 : 1;
    const size_t last_cols = std::min(kAvx2Block, n - (b + nb - 1) * kAvx2Block);
    for (size_t r = 0; r < pixels; r += kAvx2Rows) {
      const int mr = static_cast<int>(std::min<size_t>(kAvx2Rows, pixels - r));
      const int16_t* x = rows + r * row_elems;
      int8_t* o = out + r * n + b * kAvx2Block;
      const int8_t* w = packed + b * block_bytes;
      const int32_t* bb = bias + b * kAvx2Block;
      const float* s = scales + b * kAvx2Block;
      switch (mr * 2 + nb - 1) {
#define ETNP_QS8_TILE(M, NB) \
  case M * 2 + NB - 1:       \
    avx2_tile<M, NB>(x, row_elems, pairs, w, block_bytes, bb, s, q, o, n, last_cols); \
    break;
#define ETNP_QS8_ROWS(M) ETNP_QS8_TILE(M, 1) ETNP_QS8_TILE(M, 2)
        ETNP_QS8_ROWS(1) ETNP_QS8_ROWS(2) ETNP_QS8_ROWS(3) ETNP_QS8_ROWS(4) ETNP_QS8_ROWS(5) ETNP_QS8_ROWS(6)
#undef ETNP_QS8_ROWS
#undef ETNP_QS8_TILE
        default: break;
      }
    }
  }
}

}  // namespace
ETNP_TARGET_END

bool ConvQS8::supported() { return cpu_level() >= CpuLevel::avx2_fma; }

void ConvQS8::run(const int8_t* in, size_t batch, size_t h, size_t w, size_t out_h, size_t out_w, int8_t* out,
                  std::vector<uint8_t>& scratch) const {
  const size_t pixels = batch * out_h * out_w, n = p_.out_channels;
  if (pixels == 0 || n == 0) return;
  const size_t threads = std::max<size_t>(1, ThreadPool::current().num_threads());
  const size_t chunks = pixels * n * patch_ < compute::kParallelWork ? 1 : threads;
  // A small image (a classifier's last 7x7 maps) gives each thread a share of the outputs, not of the pixels.
  const bool split_outputs = chunks > 1 && pixels < chunks * kPassPixels && blocks_ >= 2 * chunks;
  const size_t row_bytes = row_elems_ * (vnni_ ? sizeof(uint8_t) : sizeof(int16_t));
  // With VNNI the tile reads such pixels in place (made unsigned in registers): no gathered rows, no scratch.
  const bool in_place = vnni_ && patches_are_pixels(p_, row_elems_);
  const size_t slot = in_place ? 0 : kPassPixels * row_bytes;
  if (scratch.size() < chunks * slot) scratch.resize(chunks * slot);
  auto run_chunk = [&](size_t i) {
    size_t p0 = 0, p1 = pixels, b0 = 0, b1 = blocks_;
    if (split_outputs) {
      const size_t pairs = (blocks_ + 1) / 2;  // whole pairs of blocks, the two-block tiles' unit
      b0 = 2 * (pairs * i / chunks);
      b1 = std::min(blocks_, 2 * (pairs * (i + 1) / chunks));
    } else {
      p0 = pixels * i / chunks;
      p1 = pixels * (i + 1) / chunks;
    }
    void* slot_rows = scratch.data() + i * slot;
    for (size_t p = p0; p < p1; p += kPassPixels) {
      const size_t end = std::min(p1, p + kPassPixels);
      if (in_place) {
        vnni_multiply<true>(reinterpret_cast<const uint8_t*>(in + p * row_elems_), end - p, row_bytes, groups_,
                            packed_.data(), bias_.data(), scales_.data(), n, b0, b1, p_.out_zero_point, p_.out_min,
                            p_.out_max, out + p * n);
      } else if (vnni_) {
        auto* rows = static_cast<uint8_t*>(slot_rows);
        gather_rows(p_, row_elems_, in, h, w, out_h, out_w, p, end, rows);
        vnni_multiply<false>(rows, end - p, row_bytes, groups_, packed_.data(), bias_.data(), scales_.data(), n, b0,
                             b1, p_.out_zero_point, p_.out_min, p_.out_max, out + p * n);
      } else {
        auto* rows = static_cast<int16_t*>(slot_rows);
        gather_rows(p_, row_elems_, in, h, w, out_h, out_w, p, end, rows);
        avx2_multiply(rows, end - p, row_elems_, groups_, packed_.data(), bias_.data(), scales_.data(), n, b0, b1,
                      p_.out_zero_point, p_.out_min, p_.out_max, out + p * n);
      }
    }
  };
  if (chunks == 1) {
    run_chunk(0);
    return;
  }
  ThreadPool::current().parallel_for(chunks, 1, [&](size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; ++i) run_chunk(i);
  });
}

#else

bool ConvQS8::supported() { return false; }

void ConvQS8::run(const int8_t*, size_t, size_t, size_t, size_t, size_t, int8_t*, std::vector<uint8_t>&) const {}

#endif

}  // namespace etnp::xnn
