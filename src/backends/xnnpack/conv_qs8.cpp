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

constexpr size_t kBlock = 16;      // outputs per packed block (the int32 lanes of one 512-bit vector)
constexpr size_t kPassPixels = 64;  // output pixels gathered per pass: their rows stay in L2 while every block runs

}  // namespace

ConvQS8::ConvQS8(const int8_t* filter, const int32_t* bias, const float* scales, const Params& params) : p_(params) {
  const size_t n = p_.out_channels;
  patch_ = p_.kernel_h * p_.kernel_w * p_.in_channels;
  quads_ = (patch_ + 3) / 4;
  blocks_ = (n + kBlock - 1) / kBlock;
  packed_.assign(blocks_ * quads_ * kBlock * 4, 0);
  bias_.assign(blocks_ * kBlock, 0);
  scales_.assign(blocks_ * kBlock, 0.0f);
  // The gathered bytes are x + 128 and padded taps read in_zp + 128: sum((x + 128) * w) - (in_zp + 128) * sum(w)
  // is sum((x - in_zp) * w). Unsigned arithmetic wraps as XNNPACK's int32 sums do.
  const auto offset = static_cast<uint32_t>(static_cast<int32_t>(p_.in_zero_point) + 128);
  for (size_t j = 0; j < n; ++j) {
    const int8_t* row = filter + j * patch_;
    int8_t* dst = packed_.data() + (j / kBlock) * quads_ * kBlock * 4 + (j % kBlock) * 4;
    uint32_t sum = 0;
    for (size_t i = 0; i < patch_; ++i) {
      dst[(i / 4) * kBlock * 4 + i % 4] = row[i];
      sum += static_cast<uint32_t>(static_cast<int32_t>(row[i]));
    }
    const uint32_t b = bias == nullptr ? 0u : static_cast<uint32_t>(bias[j]);
    bias_[j] = static_cast<int32_t>(b - offset * sum);
    scales_[j] = scales[j];
  }
}

#if defined(__x86_64__) && defined(__GNUC__)

ETNP_TARGET_BEGIN("avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni")
namespace {

constexpr __mmask16 kAll = 0xFFFF;

struct Requant {
  __m512 lo, hi;  // output range less the zero point, as floats
  __m512i zp;
};

// Rows [0, MR) x blocks [0, NB) of 16 outputs: acc = bias + sum over the quads of vpdpbusd(row bytes, weights),
// then XNNPACK's fp32 requantization; the last block stores the lanes of `last_mask`.
template <int MR, int NB>
void qs8_tile(const uint8_t* rows, size_t row_bytes, size_t quads, const int8_t* w, size_t block_bytes,
              const int32_t* bias, const float* scales, const Requant& q, int8_t* out, size_t out_stride,
              __mmask16 last_mask) {
  __m512i acc[MR][NB];
#pragma GCC unroll 2
  for (int b = 0; b < NB; ++b) {
    const __m512i bv = _mm512_loadu_si512(bias + b * kBlock);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) acc[r][b] = bv;
  }
  for (size_t k = 0; k < quads; ++k) {
    __m512i wv[NB];
#pragma GCC unroll 2
    for (int b = 0; b < NB; ++b) wv[b] = _mm512_loadu_si512(w + b * block_bytes + k * kBlock * 4);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      uint32_t quad;
      std::memcpy(&quad, rows + r * row_bytes + k * 4, 4);
      const __m512i x = _mm512_set1_epi32(static_cast<int32_t>(quad));
#pragma GCC unroll 2
      for (int b = 0; b < NB; ++b) acc[r][b] = _mm512_dpbusd_epi32(acc[r][b], x, wv[b]);
    }
  }
#pragma GCC unroll 2
  for (int b = 0; b < NB; ++b) {
    const __m512 scale = _mm512_loadu_ps(scales + b * kBlock);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      // (The maskz forms with every lane set: GCC 12's unmasked ones read an undefined vector and warn.)
      __m512 v = _mm512_mul_ps(_mm512_maskz_cvtepi32_ps(kAll, acc[r][b]), scale);
      v = _mm512_maskz_min_ps(kAll, _mm512_maskz_max_ps(kAll, v, q.lo), q.hi);
      const __m512i i = _mm512_add_epi32(_mm512_maskz_cvtps_epi32(kAll, v), q.zp);  // rounds half to even
      // Narrowed with signed saturation (the clamp above leaves nothing to saturate), the lanes that exist stored.
      _mm512_mask_cvtsepi32_storeu_epi8(out + r * out_stride + b * kBlock,
                                        b == NB - 1 ? last_mask : kAll, i);
    }
  }
}

template <int NB>
void qs8_tile_rows(int mr, const uint8_t* rows, size_t row_bytes, size_t quads, const int8_t* w, size_t block_bytes,
                   const int32_t* bias, const float* scales, const Requant& q, int8_t* out, size_t out_stride,
                   __mmask16 last_mask) {
  switch (mr) {
#define ETNP_QS8_ROWS(M)                                                                                  \
  case M:                                                                                                 \
    return qs8_tile<M, NB>(rows, row_bytes, quads, w, block_bytes, bias, scales, q, out, out_stride, \
                           last_mask);
    ETNP_QS8_ROWS(1)
    ETNP_QS8_ROWS(2)
    ETNP_QS8_ROWS(3)
    ETNP_QS8_ROWS(4)
    ETNP_QS8_ROWS(5)
    ETNP_QS8_ROWS(6)
    ETNP_QS8_ROWS(7)
    default:
      ETNP_QS8_ROWS(8)
#undef ETNP_QS8_ROWS
  }
}

// The products of `pixels` gathered rows with blocks [b0, b1), into out's rows (n outputs apart).
void qs8_multiply(const uint8_t* rows, size_t pixels, size_t row_bytes, size_t quads, const int8_t* packed,
                  const int32_t* bias, const float* scales, size_t n, size_t b0, size_t b1, int8_t zp, int8_t lo,
                  int8_t hi, int8_t* out) {
  const Requant q{_mm512_set1_ps(static_cast<float>(lo - zp)), _mm512_set1_ps(static_cast<float>(hi - zp)),
                  _mm512_set1_epi32(zp)};
  const size_t block_bytes = quads * kBlock * 4;
  for (size_t b = b0; b < b1; b += 2) {
    const int nb = b + 1 < b1 ? 2 : 1;
    const size_t last_cols = std::min(kBlock, n - (b + nb - 1) * kBlock);
    const auto mask = static_cast<__mmask16>((1u << last_cols) - 1u);
    for (size_t r = 0; r < pixels; r += 8) {
      const int mr = static_cast<int>(std::min<size_t>(8, pixels - r));
      const uint8_t* x = rows + r * row_bytes;
      int8_t* o = out + r * n + b * kBlock;
      if (nb == 2) {
        qs8_tile_rows<2>(mr, x, row_bytes, quads, packed + b * block_bytes, block_bytes, bias + b * kBlock,
                         scales + b * kBlock, q, o, n, mask);
      } else {
        qs8_tile_rows<1>(mr, x, row_bytes, quads, packed + b * block_bytes, block_bytes, bias + b * kBlock,
                         scales + b * kBlock, q, o, n, mask);
      }
    }
  }
}

// Bytes x + 128 (x ^ 0x80): the unsigned operand vpdpbusd takes.
void xor_copy(const int8_t* src, uint8_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = static_cast<uint8_t>(src[i]) ^ 0x80u;
}

}  // namespace

void ConvQS8::gather(const int8_t* in, size_t h, size_t w, size_t out_h, size_t out_w, size_t p0, size_t p1,
                     uint8_t* rows) const {
  const size_t c = p_.in_channels, row_bytes = quads_ * 4;
  const bool pointwise = p_.kernel_h == 1 && p_.kernel_w == 1 && p_.stride_h == 1 && p_.stride_w == 1 &&
                         p_.pad_top == 0 && p_.pad_left == 0;
  if (pointwise && row_bytes == c) {
    // Each pixel's patch is itself and the rows are the input's pixels as they lie: one copy.
    xor_copy(in + p0 * c, rows, (p1 - p0) * c);
    return;
  }
  const auto fill = static_cast<uint8_t>(static_cast<uint8_t>(p_.in_zero_point) ^ 0x80u);
  size_t image = p0 / (out_h * out_w), oy = p0 / out_w % out_h, ox = p0 % out_w;
  for (size_t p = p0; p < p1; ++p) {
    const int8_t* src_image = in + image * h * w * c;
    uint8_t* dst = rows + (p - p0) * row_bytes;
    for (size_t ky = 0; ky < p_.kernel_h; ++ky) {
      const auto iy = static_cast<ptrdiff_t>(oy * p_.stride_h + ky * p_.dilation_h) - static_cast<ptrdiff_t>(p_.pad_top);
      const bool row_inside = iy >= 0 && static_cast<size_t>(iy) < h;
      const auto ix0 = static_cast<ptrdiff_t>(ox * p_.stride_w) - static_cast<ptrdiff_t>(p_.pad_left);
      if (row_inside && p_.dilation_w == 1 && ix0 >= 0 && static_cast<size_t>(ix0) + p_.kernel_w <= w) {
        // The kernel row lies inside the image: its taps are one run of the input row (a first layer's 3
        // channels: 9 bytes, not three copies of 3).
        xor_copy(src_image + (static_cast<size_t>(iy) * w + static_cast<size_t>(ix0)) * c, dst, p_.kernel_w * c);
        dst += p_.kernel_w * c;
        continue;
      }
      for (size_t kx = 0; kx < p_.kernel_w; ++kx, dst += c) {
        const auto ix =
            static_cast<ptrdiff_t>(ox * p_.stride_w + kx * p_.dilation_w) - static_cast<ptrdiff_t>(p_.pad_left);
        if (!row_inside || ix < 0 || static_cast<size_t>(ix) >= w) {
          std::memset(dst, fill, c);
        } else {
          xor_copy(src_image + (static_cast<size_t>(iy) * w + static_cast<size_t>(ix)) * c, dst, c);
        }
      }
    }
    std::memset(dst, 0, row_bytes - patch_);  // the last quad's tail meets zero weights
    if (++ox == out_w) {
      ox = 0;
      if (++oy == out_h) {
        oy = 0;
        ++image;
      }
    }
  }
}

ETNP_TARGET_END

bool ConvQS8::supported() { return cpu_level() >= CpuLevel::avx512_vnni; }

#else

void ConvQS8::gather(const int8_t*, size_t, size_t, size_t, size_t, size_t, size_t, uint8_t*) const {}
bool ConvQS8::supported() { return false; }

#endif

void ConvQS8::run(const int8_t* in, size_t batch, size_t h, size_t w, size_t out_h, size_t out_w, int8_t* out,
                  std::vector<uint8_t>& scratch) const {
#if defined(__x86_64__) && defined(__GNUC__)
  const size_t pixels = batch * out_h * out_w, n = p_.out_channels, row_bytes = quads_ * 4;
  if (pixels == 0 || n == 0) return;
  const size_t threads = std::max<size_t>(1, ThreadPool::current().num_threads());
  const size_t chunks = pixels * n * patch_ < compute::kParallelWork ? 1 : threads;
  // A small image (a classifier's last 7x7 maps) gives each thread a share of the outputs, not of the pixels.
  const bool split_outputs = chunks > 1 && pixels < chunks * kPassPixels && blocks_ >= 2 * chunks;
  const size_t slot = kPassPixels * row_bytes;
  if (scratch.size() < chunks * slot) scratch.resize(chunks * slot);
  auto run_chunk = [&](size_t i) {
    size_t p0 = 0, p1 = pixels, b0 = 0, b1 = blocks_;
    if (split_outputs) {
      const size_t pairs = (blocks_ + 1) / 2;  // whole pairs of blocks, the two-block tile's unit
      b0 = 2 * (pairs * i / chunks);
      b1 = std::min(blocks_, 2 * (pairs * (i + 1) / chunks));
    } else {
      p0 = pixels * i / chunks;
      p1 = pixels * (i + 1) / chunks;
    }
    uint8_t* rows = scratch.data() + i * slot;
    for (size_t p = p0; p < p1; p += kPassPixels) {
      const size_t end = std::min(p1, p + kPassPixels);
      gather(in, h, w, out_h, out_w, p, end, rows);
      qs8_multiply(rows, end - p, row_bytes, quads_, packed_.data(), bias_.data(), scales_.data(), n, b0, b1,
                   p_.out_zero_point, p_.out_min, p_.out_max, out + p * n);
    }
  };
  if (chunks == 1) {
    run_chunk(0);
    return;
  }
  ThreadPool::current().parallel_for(chunks, 1, [&](size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; ++i) run_chunk(i);
  });
#else
  (void)in, (void)batch, (void)h, (void)w, (void)out_h, (void)out_w, (void)out, (void)scratch;
#endif
}

}  // namespace etnp::xnn
