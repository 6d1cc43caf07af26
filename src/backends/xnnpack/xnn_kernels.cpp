#include "backends/xnnpack/xnn_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "etnp/threadpool.h"
#include "compute/gemm.h"
#include "compute/conv_rows.h"
#include "core/cpu_features.h"
#include "core/target_region.h"
#include "compute/parallel.h"
#include "compute/vector_math.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#elif defined(__aarch64__) && defined(__GNUC__)
#include <arm_neon.h>
#endif

namespace etnp::xnn {
namespace {

// Row-major element strides of a shape.
void contiguous_strides(const Shape& s, size_t* strides) {
  size_t running = 1;
  for (int i = s.rank; i-- > 0;) {
    strides[i] = running;
    running *= s[i];
  }
}

// Strides that broadcast `s` (right-aligned) over `out`: 0 along broadcast dims.
void broadcast_strides(const Shape& s, const Shape& out, size_t* strides) {
  size_t own[kMaxDims];
  contiguous_strides(s, own);
  for (int i = 0; i < out.rank; ++i) {
    const int j = s.rank - out.rank + i;
    strides[i] = (j < 0 || s[j] == 1) ? 0 : own[j];
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
// dst[r][c] = src[c * src_stride + r] for an 8x8 block of 4-byte elements.
__attribute__((target("avx2"))) void transpose_8x8_avx2(const uint32_t* src, size_t src_stride, uint32_t* dst,
                                                        size_t dst_stride) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(reinterpret_cast<const float*>(src + i * src_stride));
  t[0] = _mm256_unpacklo_ps(r[0], r[1]);
  t[1] = _mm256_unpackhi_ps(r[0], r[1]);
  t[2] = _mm256_unpacklo_ps(r[2], r[3]);
  t[3] = _mm256_unpackhi_ps(r[2], r[3]);
  t[4] = _mm256_unpacklo_ps(r[4], r[5]);
  t[5] = _mm256_unpackhi_ps(r[4], r[5]);
  t[6] = _mm256_unpacklo_ps(r[6], r[7]);
  t[7] = _mm256_unpackhi_ps(r[6], r[7]);
  r[0] = _mm256_shuffle_ps(t[0], t[2], 0x44);
  r[1] = _mm256_shuffle_ps(t[0], t[2], 0xEE);
  r[2] = _mm256_shuffle_ps(t[1], t[3], 0x44);
  r[3] = _mm256_shuffle_ps(t[1], t[3], 0xEE);
  r[4] = _mm256_shuffle_ps(t[4], t[6], 0x44);
  r[5] = _mm256_shuffle_ps(t[4], t[6], 0xEE);
  r[6] = _mm256_shuffle_ps(t[5], t[7], 0x44);
  r[7] = _mm256_shuffle_ps(t[5], t[7], 0xEE);
  const __m256 o[8] = {_mm256_permute2f128_ps(r[0], r[4], 0x20), _mm256_permute2f128_ps(r[1], r[5], 0x20),
                       _mm256_permute2f128_ps(r[2], r[6], 0x20), _mm256_permute2f128_ps(r[3], r[7], 0x20),
                       _mm256_permute2f128_ps(r[0], r[4], 0x31), _mm256_permute2f128_ps(r[1], r[5], 0x31),
                       _mm256_permute2f128_ps(r[2], r[6], 0x31), _mm256_permute2f128_ps(r[3], r[7], 0x31)};
  for (int i = 0; i < 8; ++i) _mm256_storeu_ps(reinterpret_cast<float*>(dst + i * dst_stride), o[i]);
}

// dst[r][c] = src[c * src_stride + r] for r < rows, c < 3: three planes interleaved (an RGB image from NCHW
// to NHWC), eight pixels per step; the rows % 8 left are the caller's.
__attribute__((target("avx2"))) size_t interleave3_avx2(const uint32_t* src, size_t src_stride, uint32_t* dst,
                                                        size_t rows) {
  // Output vector v takes lanes from the three planes' vectors at these positions (a = plane 0, ...):
  //   v0: a0 b0 c0 a1 b1 c1 a2 b2   v1: c2 a3 b3 c3 a4 b4 c4 a5   v2: b5 c5 a6 b6 c6 a7 b7 c7
  const __m256i ia0 = _mm256_setr_epi32(0, 0, 0, 1, 0, 0, 2, 0), ib0 = _mm256_setr_epi32(0, 0, 0, 0, 1, 0, 0, 2);
  const __m256i ic0 = _mm256_setr_epi32(0, 0, 0, 0, 0, 1, 0, 0);
  const __m256i ia1 = _mm256_setr_epi32(0, 3, 0, 0, 4, 0, 0, 5), ib1 = _mm256_setr_epi32(0, 0, 3, 0, 0, 4, 0, 0);
  const __m256i ic1 = _mm256_setr_epi32(2, 0, 0, 3, 0, 0, 4, 0);
  const __m256i ia2 = _mm256_setr_epi32(0, 0, 6, 0, 0, 7, 0, 0), ib2 = _mm256_setr_epi32(5, 0, 0, 6, 0, 0, 7, 0);
  const __m256i ic2 = _mm256_setr_epi32(0, 5, 0, 0, 6, 0, 0, 7);
  size_t r = 0;
  for (; r + 8 <= rows; r += 8) {
    const __m256 a = _mm256_loadu_ps(reinterpret_cast<const float*>(src + r));
    const __m256 b = _mm256_loadu_ps(reinterpret_cast<const float*>(src + src_stride + r));
    const __m256 c = _mm256_loadu_ps(reinterpret_cast<const float*>(src + 2 * src_stride + r));
    // Blend masks: bit i set takes lane i from the second operand.
    const __m256 ab0 = _mm256_blend_ps(_mm256_permutevar8x32_ps(a, ia0), _mm256_permutevar8x32_ps(b, ib0), 0x92);
    const __m256 ab1 = _mm256_blend_ps(_mm256_permutevar8x32_ps(a, ia1), _mm256_permutevar8x32_ps(b, ib1), 0x24);
    const __m256 ab2 = _mm256_blend_ps(_mm256_permutevar8x32_ps(a, ia2), _mm256_permutevar8x32_ps(b, ib2), 0x49);
    const __m256 v0 = _mm256_blend_ps(ab0, _mm256_permutevar8x32_ps(c, ic0), 0x24);
    const __m256 v1 = _mm256_blend_ps(ab1, _mm256_permutevar8x32_ps(c, ic1), 0x49);
    const __m256 v2 = _mm256_blend_ps(ab2, _mm256_permutevar8x32_ps(c, ic2), 0x92);
    float* out = reinterpret_cast<float*>(dst + 3 * r);
    _mm256_storeu_ps(out, v0);
    _mm256_storeu_ps(out + 8, v1);
    _mm256_storeu_ps(out + 16, v2);
  }
  return r;
}
#elif defined(__aarch64__) && defined(__GNUC__)
// dst[r][c] = src[c * src_stride + r] for a 4x4 block of 4-byte elements: trn1/trn2 on 32-bit lanes pair the
// rows, then on 64-bit lanes the pairs.
inline void transpose_4x4_neon(const uint32_t* src, size_t src_stride, uint32_t* dst, size_t dst_stride) {
  const uint32x4_t r0 = vld1q_u32(src), r1 = vld1q_u32(src + src_stride);
  const uint32x4_t r2 = vld1q_u32(src + 2 * src_stride), r3 = vld1q_u32(src + 3 * src_stride);
  const uint64x2_t t0 = vreinterpretq_u64_u32(vtrn1q_u32(r0, r1)), t1 = vreinterpretq_u64_u32(vtrn2q_u32(r0, r1));
  const uint64x2_t t2 = vreinterpretq_u64_u32(vtrn1q_u32(r2, r3)), t3 = vreinterpretq_u64_u32(vtrn2q_u32(r2, r3));
  vst1q_u32(dst, vreinterpretq_u32_u64(vtrn1q_u64(t0, t2)));
  vst1q_u32(dst + dst_stride, vreinterpretq_u32_u64(vtrn1q_u64(t1, t3)));
  vst1q_u32(dst + 2 * dst_stride, vreinterpretq_u32_u64(vtrn2q_u64(t0, t2)));
  vst1q_u32(dst + 3 * dst_stride, vreinterpretq_u32_u64(vtrn2q_u64(t1, t3)));
}

// The 8x8 block of transpose_8x8_avx2, as four 4x4 ones.
__attribute__((noinline)) void transpose_8x8_neon(const uint32_t* src, size_t src_stride, uint32_t* dst,
                                                  size_t dst_stride) {
  for (size_t i = 0; i < 8; i += 4) {
    for (size_t j = 0; j < 8; j += 4) {
      transpose_4x4_neon(src + j * src_stride + i, src_stride, dst + i * dst_stride + j, dst_stride);
    }
  }
}

// interleave3_avx2 with st3, which stores three vectors interleaved: 8 pixels per step.
__attribute__((noinline)) size_t interleave3_neon(const uint32_t* src, size_t src_stride, uint32_t* dst, size_t rows) {
  size_t r = 0;
  for (; r + 8 <= rows; r += 8) {
    for (size_t h = 0; h < 8; h += 4) {
      const uint32x4x3_t v{{vld1q_u32(src + r + h), vld1q_u32(src + src_stride + r + h),
                            vld1q_u32(src + 2 * src_stride + r + h)}};
      vst3q_u32(dst + 3 * (r + h), v);
    }
  }
  return r;
}
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#define ETNP_XNN_TRANSPOSE_SIMD 1
inline bool transpose_simd() { return has_avx2_fma(); }
inline void transpose_8x8(const uint32_t* src, size_t src_stride, uint32_t* dst, size_t dst_stride) {
  transpose_8x8_avx2(src, src_stride, dst, dst_stride);
}
inline size_t interleave3(const uint32_t* src, size_t src_stride, uint32_t* dst, size_t rows) {
  return interleave3_avx2(src, src_stride, dst, rows);
}
#elif defined(__aarch64__) && defined(__GNUC__)
#define ETNP_XNN_TRANSPOSE_SIMD 1
inline bool transpose_simd() { return has_neon(); }
inline void transpose_8x8(const uint32_t* src, size_t src_stride, uint32_t* dst, size_t dst_stride) {
  transpose_8x8_neon(src, src_stride, dst, dst_stride);
}
inline size_t interleave3(const uint32_t* src, size_t src_stride, uint32_t* dst, size_t rows) {
  return interleave3_neon(src, src_stride, dst, rows);
}
#endif

// dst[r][c] = src[r * row_stride + c * col_stride] over [rows, cols], in cache-sized tiles.
template <typename T>
void transpose_2d(const T* src, T* dst, size_t rows, size_t cols, size_t row_stride, size_t col_stride) {
  constexpr size_t kTile = 32;
  if (cols == 3 && row_stride == 1) {
    // Three planes interleaved (an RGB image from NCHW to NHWC, as floats or already quantized bytes).
    size_t done = 0;
#if defined(ETNP_XNN_TRANSPOSE_SIMD)
    if (sizeof(T) == 4 && transpose_simd()) {
      done = interleave3(reinterpret_cast<const uint32_t*>(src), col_stride, reinterpret_cast<uint32_t*>(dst), rows);
    }
#endif
    const T* p0 = src;
    const T* p1 = src + col_stride;
    const T* p2 = src + 2 * col_stride;
    for (size_t r = done; r < rows; ++r) {
      dst[r * 3] = p0[r];
      dst[r * 3 + 1] = p1[r];
      dst[r * 3 + 2] = p2[r];
    }
    return;
  }
#if defined(ETNP_XNN_TRANSPOSE_SIMD)
  // The common case (row_stride 1: a plain matrix transpose) of 4-byte elements goes 8x8 at a time.
  const bool simd = sizeof(T) == 4 && row_stride == 1 && rows >= 8 && cols >= 8 && transpose_simd();
#endif
  for (size_t r0 = 0; r0 < rows; r0 += kTile) {
    const size_t r1 = std::min(rows, r0 + kTile);
    for (size_t c0 = 0; c0 < cols; c0 += kTile) {
      const size_t c1 = std::min(cols, c0 + kTile);
      size_t r_done = r0, c_done = c0;
#if defined(ETNP_XNN_TRANSPOSE_SIMD)
      if (simd) {
        r_done = r0 + (r1 - r0) / 8 * 8;
        c_done = c0 + (c1 - c0) / 8 * 8;
        for (size_t r = r0; r < r_done; r += 8) {
          for (size_t c = c0; c < c_done; c += 8) {
            transpose_8x8(reinterpret_cast<const uint32_t*>(src + c * col_stride + r), col_stride,
                          reinterpret_cast<uint32_t*>(dst + r * cols + c), cols);
          }
        }
      }
#endif
      for (size_t r = r0; r < r1; ++r) {
        const T* s = src + r * row_stride;
        T* d = dst + r * cols;
        // Only what the 8x8 blocks left: the ragged right columns, and whole rows below them.
        for (size_t c = (r < r_done ? c_done : c0); c < c1; ++c) d[c] = s[c * col_stride];
      }
    }
  }
}

template <typename T>
void transpose_typed(const T* in, T* out, int rank, const size_t* size, const size_t* in_stride) {
  // The last two output dims form 2-D tiles; the leading ones are walked with a counter.
  const size_t rows = rank >= 2 ? size[rank - 2] : 1;
  const size_t cols = size[rank - 1];
  const size_t row_stride = rank >= 2 ? in_stride[rank - 2] : 0;
  const size_t col_stride = in_stride[rank - 1];
  const int outer_rank = std::max(rank - 2, 0);
  size_t outer = 1;
  for (int i = 0; i < outer_rank; ++i) outer *= size[i];
  size_t index[kMaxDims] = {};
  size_t in_base = 0;
  for (size_t o = 0; o < outer; ++o) {
    const T* src = in + in_base;
    T* dst = out + o * rows * cols;
    if (col_stride == 1) {
      for (size_t r = 0; r < rows; ++r) std::memcpy(dst + r * cols, src + r * row_stride, cols * sizeof(T));
    } else if (rows * cols >= compute::kParallelWork && rows >= 64 && ThreadPool::current().num_threads() > 1) {
      // Large planes (image layout changes) split by row bands across the pool.
      constexpr size_t kBand = 64;
      ThreadPool::current().parallel_for((rows + kBand - 1) / kBand, 1, [&](size_t b0, size_t b1) {
        const size_t r0 = b0 * kBand, r1 = std::min(rows, b1 * kBand);
        transpose_2d(src + r0 * row_stride, dst + r0 * cols, r1 - r0, cols, row_stride, col_stride);
      });
    } else {
      transpose_2d(src, dst, rows, cols, row_stride, col_stride);
    }
    for (int i = outer_rank; i-- > 0;) {
      in_base += in_stride[i];
      if (++index[i] < size[i]) break;
      in_base -= in_stride[i] * size[i];
      index[i] = 0;
    }
  }
}

}  // namespace

void transpose(const void* in, void* out, const Shape& in_shape, std::span<const size_t> perm, size_t elem_size) {
  size_t in_strides[kMaxDims];
  contiguous_strides(in_shape, in_strides);
  // Output dims with their input strides, dropping size-1 dims and merging dims that stay adjacent.
  size_t size[kMaxDims], stride[kMaxDims];
  int rank = 0;
  size_t numel = 1;
  for (size_t i = 0; i < perm.size(); ++i) {
    const size_t d = in_shape[static_cast<int>(perm[i])];
    numel *= d;
    if (d == 1) continue;
    const size_t s = in_strides[perm[i]];
    if (rank > 0 && stride[rank - 1] == s * d) {
      size[rank - 1] *= d;
      stride[rank - 1] = s;
    } else {
      size[rank] = d;
      stride[rank] = s;
      ++rank;
    }
  }
  if (numel == 0) return;
  if (rank == 0 || (rank == 1 && stride[0] == 1)) {
    if (in != out) std::memcpy(out, in, numel * elem_size);
    return;
  }
  switch (elem_size) {
    case 1: transpose_typed(static_cast<const uint8_t*>(in), static_cast<uint8_t*>(out), rank, size, stride); break;
    case 2: transpose_typed(static_cast<const uint16_t*>(in), static_cast<uint16_t*>(out), rank, size, stride); break;
    case 4: transpose_typed(static_cast<const uint32_t*>(in), static_cast<uint32_t*>(out), rank, size, stride); break;
    default: transpose_typed(static_cast<const uint64_t*>(in), static_cast<uint64_t*>(out), rank, size, stride); break;
  }
}

void concatenate(std::span<const void* const> inputs, std::span<const Shape> shapes, size_t axis, void* out,
                 size_t elem_size) {
  size_t outer = 1;
  for (size_t i = 0; i < axis; ++i) outer *= shapes[0][static_cast<int>(i)];
  std::vector<size_t> chunk(inputs.size());
  for (size_t j = 0; j < inputs.size(); ++j) {
    size_t inner = 1;
    for (int d = static_cast<int>(axis); d < shapes[j].rank; ++d) inner *= shapes[j][d];
    chunk[j] = inner * elem_size;
  }
  auto* dst = static_cast<uint8_t*>(out);
  // Concatenating along the last axis interleaves elements (RoPE's stack of the rotated halves): runs of a few
  // bytes, for which a memcpy call per run costs ten times the copy. Runs of one fixed small size are moved
  // with a copy of that size known at compile time.
  const bool equal = std::all_of(chunk.begin(), chunk.end(), [&](size_t c) { return c == chunk[0]; });
  auto interleave = [&]<size_t C>() {
    for (size_t o = 0; o < outer; ++o) {
      for (const void* in : inputs) {
        std::memcpy(dst, static_cast<const uint8_t*>(in) + o * C, C);
        dst += C;
      }
    }
  };
  if (equal) {
    switch (chunk[0]) {
      case 2: return interleave.template operator()<2>();
      case 4: return interleave.template operator()<4>();
      case 8: return interleave.template operator()<8>();
      case 16: return interleave.template operator()<16>();
      default: break;
    }
  }
  for (size_t o = 0; o < outer; ++o) {
    for (size_t j = 0; j < inputs.size(); ++j) {
      if (chunk[j] == 0) continue;
      std::memcpy(dst, static_cast<const uint8_t*>(inputs[j]) + o * chunk[j], chunk[j]);
      dst += chunk[j];
    }
  }
}

void slice(const void* in, const Shape& in_shape, std::span<const size_t> offsets, const Shape& out_shape, void* out,
           size_t elem_size) {
  const int rank = out_shape.rank;
  if (out_shape.numel() == 0) return;
  if (rank == 0) {
    std::memcpy(out, in, elem_size);
    return;
  }
  size_t in_strides[kMaxDims];
  contiguous_strides(in_shape, in_strides);
  size_t base = 0;
  for (int i = 0; i < rank; ++i) base += offsets[i] * in_strides[i];
  const size_t row_bytes = out_shape[rank - 1] * elem_size;
  const size_t rows = out_shape.numel() / out_shape[rank - 1];
  size_t index[kMaxDims] = {};
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  size_t in_offset = base;
  for (size_t r = 0; r < rows; ++r) {
    std::memcpy(dst + r * row_bytes, src + in_offset * elem_size, row_bytes);
    for (int i = rank - 1; i-- > 0;) {
      in_offset += in_strides[i];
      if (++index[i] < out_shape[i]) break;
      in_offset -= in_strides[i] * out_shape[i];
      index[i] = 0;
    }
  }
}

void constant_pad(const void* in, const Shape& in_shape, std::span<const size_t> pre, const Shape& out_shape,
                  const void* pad_bytes, void* out, size_t elem_size) {
  const size_t out_numel = out_shape.numel();
  auto* dst = static_cast<uint8_t*>(out);
  for (size_t i = 0; i < out_numel; ++i) std::memcpy(dst + i * elem_size, pad_bytes, elem_size);
  const size_t in_numel = in_shape.numel();
  if (in_numel == 0) return;
  const int rank = in_shape.rank;
  if (rank == 0) {
    std::memcpy(out, in, elem_size);
    return;
  }
  size_t out_strides[kMaxDims];
  contiguous_strides(out_shape, out_strides);
  size_t base = 0;
  for (int i = 0; i < rank; ++i) base += pre[i] * out_strides[i];
  const size_t row = in_shape[rank - 1];
  const size_t rows = in_numel / row;
  size_t index[kMaxDims] = {};
  size_t out_offset = base;
  const auto* src = static_cast<const uint8_t*>(in);
  for (size_t r = 0; r < rows; ++r) {
    std::memcpy(dst + out_offset * elem_size, src + r * row * elem_size, row * elem_size);
    for (int i = rank - 1; i-- > 0;) {
      out_offset += out_strides[i];
      if (++index[i] < in_shape[i]) break;
      out_offset -= out_strides[i] * in_shape[i];
      index[i] = 0;
    }
  }
}

// ---- matrix products ---------------------------------------------------------------------------------

namespace {

void clamp_in_place(float* p, size_t n, float lo, float hi) {
  if (lo == -std::numeric_limits<float>::infinity() && hi == std::numeric_limits<float>::infinity()) return;
  for (size_t i = 0; i < n; ++i) p[i] = std::min(std::max(p[i], lo), hi);
}

}  // namespace

namespace {

void linear_f32_on(ThreadPool* pool, const float* in, size_t rows, size_t k, const float* w, bool w_is_nk, size_t n,
                   const float* bias, float out_min, float out_max, float* out) {
  if (rows == 0 || n == 0) return;
  const auto kk = static_cast<int64_t>(k), nn = static_cast<int64_t>(n);
  compute::GemmEpilogue epilogue;
  if (bias != nullptr) epilogue.bias = {bias, 0, 1};
  const compute::GemmMatrix b = w_is_nk ? compute::GemmMatrix{w, 1, kk} : compute::GemmMatrix{w, nn, 1};
  compute::gemm_f32(static_cast<int64_t>(rows), nn, kk, {in, kk, 1}, b, out, nn, 1, epilogue, pool);
  clamp_in_place(out, rows * n, out_min, out_max);
}

}  // namespace

void linear_f32(const float* in, size_t rows, size_t k, const float* w, bool w_is_nk, size_t n, const float* bias,
                float out_min, float out_max, float* out) {
  linear_f32_on(&ThreadPool::current(), in, rows, k, w, w_is_nk, n, bias, out_min, out_max, out);
}

void batch_matmul_f32(const float* a, const Shape& a_shape, const float* b, const Shape& b_shape, bool transpose_b,
                      float* out, const Shape& out_shape) {
  const size_t m = a_shape[a_shape.rank - 2], k = a_shape[a_shape.rank - 1];
  const size_t n = out_shape[out_shape.rank - 1];
  Shape batch = out_shape, a_batch = a_shape, b_batch = b_shape;
  batch.rank -= 2;
  a_batch.rank -= 2;
  b_batch.rank -= 2;
  size_t a_str[kMaxDims], b_str[kMaxDims];
  broadcast_strides(a_batch, batch, a_str);
  broadcast_strides(b_batch, batch, b_str);
  const size_t batches = batch.numel();
  const size_t a_mat = m * k, b_mat = k * n, o_mat = m * n;
  const float inf = std::numeric_limits<float>::infinity();
  // Products [i0, i1), each on one thread: an attention's heads (64 x 64 x 64 each) are too small for the GEMM
  // to split, and ran one after the other on one thread.
  auto run = [&](size_t i0, size_t i1, ThreadPool* pool) {
    for (size_t bi = i0; bi < i1; ++bi) {
      size_t a_off = 0, b_off = 0;
      for (size_t i = batch.rank, rest = bi; i-- > 0; rest /= batch[i]) {
        a_off += rest % batch[i] * a_str[i];
        b_off += rest % batch[i] * b_str[i];
      }
      linear_f32_on(pool, a + a_off * a_mat, m, k, b + b_off * b_mat, transpose_b, n, nullptr, -inf, inf,
                    out + bi * o_mat);
    }
  };
  ThreadPool& pool = ThreadPool::current();
  if (batches >= 2 && pool.num_threads() > 1 && batches * m * n * k >= compute::kParallelWork) {
    pool.parallel_for(batches, 1, [&](size_t i0, size_t i1) { run(i0, i1, nullptr); });
  } else {
    run(0, batches, &pool);
  }
}

// ---- element-wise ------------------------------------------------------------------------------------

bool unary_f32_supported(NodeKind kind) {
  switch (kind) {
    case NodeKind::Clamp:
    case NodeKind::Sigmoid:
    case NodeKind::Floor:
    case NodeKind::Ceiling:
    case NodeKind::SquareRoot:
    case NodeKind::ReciprocalSquareRoot:
    case NodeKind::Square:
    case NodeKind::Negate:
    case NodeKind::Abs:
    case NodeKind::Hardswish:
    case NodeKind::LeakyReLU:
    case NodeKind::ELU:
    case NodeKind::Gelu:
    case NodeKind::Tanh:
    case NodeKind::Exp:
    case NodeKind::Log:
    case NodeKind::Sin:
    case NodeKind::Cos:
      return true;
    default:
      return false;
  }
}

namespace {

template <typename F>
void map_f32(const float* __restrict in, float* __restrict out, size_t n, F f) {
  for (size_t i = 0; i < n; ++i) out[i] = f(in[i]);
}

template <typename F>
void map_f32_aliased(const float* in, float* out, size_t n, F f) {
  if (in == out) {
    for (size_t i = 0; i < n; ++i) out[i] = f(in[i]);
  } else {
    map_f32(in, out, n, f);
  }
}

}  // namespace

namespace {

/// The vector routine (compute/vector_math.h: Sleef's, 1 ulp like the libm calls below) of a transcendental
/// node kind, or nullptr.
compute::VectorF32Fn vector_unary(NodeKind kind) {
  switch (kind) {
    case NodeKind::Tanh: return compute::vector_f32(compute::VectorOp::Tanh);
    case NodeKind::Exp: return compute::vector_f32(compute::VectorOp::Exp);
    case NodeKind::Log: return compute::vector_f32(compute::VectorOp::Log);
    case NodeKind::Sin: return compute::vector_f32(compute::VectorOp::Sin);
    case NodeKind::Cos: return compute::vector_f32(compute::VectorOp::Cos);
    default: return nullptr;
  }
}

}  // namespace

void unary_f32(NodeKind kind, const float* in, float* out, size_t n, float scalar, float out_min, float out_max) {
  if (const compute::VectorF32Fn fn = vector_unary(kind)) {
    fn(in, out, n);
    clamp_in_place(out, n, out_min, out_max);
    return;
  }
  switch (kind) {
    case NodeKind::Clamp:
      map_f32_aliased(in, out, n, [=](float x) { return std::min(std::max(x, out_min), out_max); });
      return;
    case NodeKind::Sigmoid:
      map_f32_aliased(in, out, n, [](float x) { return 1.0f / (1.0f + std::exp(-x)); });
      break;
    case NodeKind::Floor: map_f32_aliased(in, out, n, [](float x) { return std::floor(x); }); break;
    case NodeKind::Ceiling: map_f32_aliased(in, out, n, [](float x) { return std::ceil(x); }); break;
    case NodeKind::SquareRoot: map_f32_aliased(in, out, n, [](float x) { return std::sqrt(x); }); break;
    case NodeKind::ReciprocalSquareRoot:
      map_f32_aliased(in, out, n, [](float x) { return 1.0f / std::sqrt(x); });
      break;
    case NodeKind::Square: map_f32_aliased(in, out, n, [](float x) { return x * x; }); break;
    case NodeKind::Negate: map_f32_aliased(in, out, n, [](float x) { return -x; }); break;
    case NodeKind::Abs: map_f32_aliased(in, out, n, [](float x) { return std::fabs(x); }); break;
    case NodeKind::Hardswish:
      map_f32_aliased(in, out, n, [](float x) { return x * std::min(std::max(x + 3.0f, 0.0f), 6.0f) / 6.0f; });
      break;
    case NodeKind::LeakyReLU:
      map_f32_aliased(in, out, n, [=](float x) { return x < 0.0f ? x * scalar : x; });
      break;
    case NodeKind::ELU:
      map_f32_aliased(in, out, n, [=](float x) { return x < 0.0f ? scalar * std::expm1(x) : x; });
      break;
    case NodeKind::Gelu:
      map_f32_aliased(in, out, n, [](float x) {
        return static_cast<float>(0.5 * x * (1.0 + std::erf(static_cast<double>(x) * 0.70710678118654752440)));
      });
      break;
    case NodeKind::Tanh: map_f32_aliased(in, out, n, [](float x) { return std::tanh(x); }); break;
    case NodeKind::Exp: map_f32_aliased(in, out, n, [](float x) { return std::exp(x); }); break;
    case NodeKind::Log: map_f32_aliased(in, out, n, [](float x) { return std::log(x); }); break;
    case NodeKind::Sin: map_f32_aliased(in, out, n, [](float x) { return std::sin(x); }); break;
    case NodeKind::Cos: map_f32_aliased(in, out, n, [](float x) { return std::cos(x); }); break;
    default:
      return;
  }
  clamp_in_place(out, n, out_min, out_max);
}

bool binary_f32_supported(NodeKind kind) {
  switch (kind) {
    case NodeKind::Add:
    case NodeKind::Subtract:
    case NodeKind::Multiply:
    case NodeKind::Divide:
    case NodeKind::Minimum:
    case NodeKind::Maximum:
    case NodeKind::PReLU:
      return true;
    default:
      return false;
  }
}

namespace {

float apply_binary(NodeKind kind, float x, float y) {
  switch (kind) {
    case NodeKind::Add: return x + y;
    case NodeKind::Subtract: return x - y;
    case NodeKind::Multiply: return x * y;
    case NodeKind::Divide: return x / y;
    case NodeKind::Minimum: return std::min(x, y);
    case NodeKind::Maximum: return std::max(x, y);
    case NodeKind::PReLU: return x < 0.0f ? x * y : x;
    default: return 0.0f;
  }
}

/// out[i] = op(a[i * a_step], b[i * b_step]), a step 0 repeating one element: loops the compiler vectorizes.
template <typename Op>
void binary_rows(const float* a, size_t a_step, const float* b, size_t b_step, float* out, size_t n, Op op) {
  if (a_step == 1 && b_step == 1) {
    for (size_t i = 0; i < n; ++i) out[i] = op(a[i], b[i]);
  } else if (a_step == 1) {
    const float y = b[0];
    for (size_t i = 0; i < n; ++i) out[i] = op(a[i], y);
  } else {
    const float x = a[0];
    for (size_t i = 0; i < n; ++i) out[i] = op(x, b[i]);
  }
}

/// The arithmetic kinds over operands that are whole or one element; false for other kinds.
bool arithmetic_rows(NodeKind kind, const float* a, size_t a_step, const float* b, size_t b_step, float* out,
                     size_t n) {
  switch (kind) {
    case NodeKind::Add: binary_rows(a, a_step, b, b_step, out, n, [](float x, float y) { return x + y; }); return true;
    case NodeKind::Subtract:
      binary_rows(a, a_step, b, b_step, out, n, [](float x, float y) { return x - y; });
      return true;
    case NodeKind::Multiply:
      binary_rows(a, a_step, b, b_step, out, n, [](float x, float y) { return x * y; });
      return true;
    case NodeKind::Divide: binary_rows(a, a_step, b, b_step, out, n, [](float x, float y) { return x / y; }); return true;
    default: return false;
  }
}

}  // namespace

void binary_f32(NodeKind kind, const float* a, const Shape& a_shape, const float* b, const Shape& b_shape, float* out,
                const Shape& out_shape, float out_min, float out_max) {
  const size_t n = out_shape.numel();
  if (n == 0) return;
  const size_t na = a_shape.numel(), nb = b_shape.numel();
  const bool whole_or_one = (na == n || na == 1) && (nb == n || nb == 1) && (na == n || nb == n);
  if (whole_or_one && arithmetic_rows(kind, a, na == n ? 1 : 0, b, nb == n ? 1 : 0, out, n)) {
    clamp_in_place(out, n, out_min, out_max);
    return;
  }
  if (na == n && nb == n) {
    for (size_t i = 0; i < n; ++i) out[i] = apply_binary(kind, a[i], b[i]);
  } else {
    size_t a_str[kMaxDims], b_str[kMaxDims];
    broadcast_strides(a_shape, out_shape, a_str);
    broadcast_strides(b_shape, out_shape, b_str);
    const int rank = out_shape.rank;
    size_t index[kMaxDims] = {};
    size_t ao = 0, bo = 0;
    for (size_t i = 0; i < n; ++i) {
      out[i] = apply_binary(kind, a[ao], b[bo]);
      for (int d = rank; d-- > 0;) {
        ao += a_str[d];
        bo += b_str[d];
        if (++index[d] < out_shape[d]) break;
        ao -= a_str[d] * out_shape[d];
        bo -= b_str[d] * out_shape[d];
        index[d] = 0;
      }
    }
  }
  clamp_in_place(out, n, out_min, out_max);
}

// ---- quantization ------------------------------------------------------------------------------------

DynamicQuantParams compute_dynamic_quant_params(float min, float max) {
  // Asymmetric int8 over [min(0, min), max(0, max)], zero point nudged to an integer (as XNNPACK's qd8).
  constexpr float qmin = -128.0f, qmax = 127.0f;
  const float rmin = std::min(0.0f, min);
  const float rmax = std::max(0.0f, max);
  const float inv_scale = rmin == rmax ? 1.0f : (qmax - qmin) / (rmax - rmin);
  const float from_min = qmin + rmin * inv_scale;
  const float from_max = qmax + rmax * inv_scale;
  float zp = from_min + from_max > 0.0f ? qmin - rmin * inv_scale : qmax - rmax * inv_scale;
  zp = std::min(std::max(zp, qmin), qmax);
  DynamicQuantParams p;
  p.scale = 1.0f / inv_scale;
  p.zero_point = static_cast<int32_t>(std::nearbyint(zp));
  return p;
}

namespace {

void quantize_row(const float* x, size_t cols, int8_t* q, DynamicQuantParams p) {
  const float inv = 1.0f / p.scale;
  const float zp = static_cast<float>(p.zero_point);
  for (size_t c = 0; c < cols; ++c) {
    float v = std::nearbyint(x[c] * inv) + zp;
    v = std::isnan(v) ? zp : std::min(std::max(v, -128.0f), 127.0f);
    q[c] = static_cast<int8_t>(v);
  }
}

DynamicQuantParams row_params(float lo, float hi) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) {
    // Non-finite inputs have no meaningful int8 range; keep the parameters finite.
    lo = std::isfinite(lo) ? lo : -std::numeric_limits<float>::max();
    hi = std::isfinite(hi) ? hi : std::numeric_limits<float>::max();
  }
  return compute_dynamic_quant_params(lo, hi);
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) void quantize_dynamic_rows_avx2(const float* in, size_t rows, size_t cols,
                                                                 int8_t* out, DynamicQuantParams* params) {
  for (size_t r = 0; r < rows; ++r) {
    const float* x = in + r * cols;
    __m256 vlo = _mm256_setzero_ps(), vhi = _mm256_setzero_ps();
    __m256i nan_seen = _mm256_setzero_si256();
    size_t c = 0;
    for (; c + 8 <= cols; c += 8) {
      const __m256 v = _mm256_loadu_ps(x + c);
      nan_seen = _mm256_or_si256(nan_seen, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
      // (v first: where either is NaN, vminps/vmaxps return the second operand, so a NaN is passed over as
      // the portable loop's std::min/std::max pass over it, and never replaces the lane's range so far.)
      vlo = _mm256_min_ps(v, vlo);
      vhi = _mm256_max_ps(v, vhi);
    }
    alignas(32) float lo8[8], hi8[8];
    _mm256_store_ps(lo8, vlo);
    _mm256_store_ps(hi8, vhi);
    float lo = 0.0f, hi = 0.0f;
    bool nan = !_mm256_testz_si256(nan_seen, nan_seen);
    for (int i = 0; i < 8; ++i) {
      lo = std::min(lo, lo8[i]);
      hi = std::max(hi, hi8[i]);
    }
    for (size_t t = c; t < cols; ++t) {
      nan = nan || std::isnan(x[t]);
      lo = std::min(lo, x[t]);
      hi = std::max(hi, x[t]);
    }
    params[r] = row_params(lo, hi);
    int8_t* q = out + r * cols;
    if (nan || !std::isfinite(lo) || !std::isfinite(hi)) {
      quantize_row(x, cols, q, params[r]);
      continue;
    }
    // Bounds are integers, so clamping before rounding equals rounding then clamping.
    const __m256 inv = _mm256_set1_ps(1.0f / params[r].scale);
    const __m256 qlo = _mm256_set1_ps(-128.0f - static_cast<float>(params[r].zero_point));
    const __m256 qhi = _mm256_set1_ps(127.0f - static_cast<float>(params[r].zero_point));
    const __m256i zp = _mm256_set1_epi32(params[r].zero_point);
    c = 0;
    for (; c + 8 <= cols; c += 8) {
      __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + c), inv);
      v = _mm256_min_ps(_mm256_max_ps(v, qlo), qhi);
      const __m256i i32 = _mm256_add_epi32(_mm256_cvtps_epi32(v), zp);
      const __m128i i16 = _mm_packs_epi32(_mm256_castsi256_si128(i32), _mm256_extracti128_si256(i32, 1));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(q + c), _mm_packs_epi16(i16, i16));
    }
    if (c < cols) quantize_row(x + c, cols - c, q + c, params[r]);
  }
}
#elif defined(__aarch64__) && defined(__GNUC__)
// quantize_dynamic_rows on 4 floats at a time: the range with fminnm/fmaxnm, which pass over NaNs as the
// portable loop's std::min/std::max do (so the parameters are the portable ones); rows with a NaN or an
// infinity go through quantize_row. Bounds are integers, so clamping before rounding (fcvtns: to nearest,
// ties to even, as nearbyint) equals rounding then clamping.
__attribute__((noinline)) void quantize_dynamic_rows_neon(const float* in, size_t rows, size_t cols, int8_t* out,
                                                          DynamicQuantParams* params) {
  for (size_t r = 0; r < rows; ++r) {
    const float* x = in + r * cols;
    float32x4_t vlo = vdupq_n_f32(0.0f), vhi = vdupq_n_f32(0.0f);
    uint32x4_t nan_seen = vdupq_n_u32(0);
    size_t c = 0;
    for (; c + 4 <= cols; c += 4) {
      const float32x4_t v = vld1q_f32(x + c);
      nan_seen = vorrq_u32(nan_seen, vmvnq_u32(vceqq_f32(v, v)));
      vlo = vminnmq_f32(vlo, v);
      vhi = vmaxnmq_f32(vhi, v);
    }
    float lo = std::min(0.0f, vminnmvq_f32(vlo)), hi = std::max(0.0f, vmaxnmvq_f32(vhi));
    bool nan = vmaxvq_u32(nan_seen) != 0;
    for (size_t t = c; t < cols; ++t) {
      nan = nan || std::isnan(x[t]);
      lo = std::min(lo, x[t]);
      hi = std::max(hi, x[t]);
    }
    params[r] = row_params(lo, hi);
    int8_t* q = out + r * cols;
    if (nan || !std::isfinite(lo) || !std::isfinite(hi)) {
      quantize_row(x, cols, q, params[r]);
      continue;
    }
    const float32x4_t inv = vdupq_n_f32(1.0f / params[r].scale);
    const float32x4_t qlo = vdupq_n_f32(-128.0f - static_cast<float>(params[r].zero_point));
    const float32x4_t qhi = vdupq_n_f32(127.0f - static_cast<float>(params[r].zero_point));
    const int32x4_t zp = vdupq_n_s32(params[r].zero_point);
    auto code = [&](const float* p) {
      const float32x4_t v = vminq_f32(vmaxq_f32(vmulq_f32(vld1q_f32(p), inv), qlo), qhi);
      return vaddq_s32(vcvtnq_s32_f32(v), zp);
    };
    c = 0;
    for (; c + 8 <= cols; c += 8) {
      const int16x8_t i16 = vcombine_s16(vqmovn_s32(code(x + c)), vqmovn_s32(code(x + c + 4)));
      vst1_s8(q + c, vqmovn_s16(i16));
    }
    if (c < cols) quantize_row(x + c, cols - c, q + c, params[r]);
  }
}
#endif

}  // namespace

void quantize_dynamic_rows(const float* in, size_t rows, size_t cols, int8_t* out, DynamicQuantParams* params) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (has_avx2_fma()) {
    quantize_dynamic_rows_avx2(in, rows, cols, out, params);
    return;
  }
#elif defined(__aarch64__) && defined(__GNUC__)
  if (has_neon()) {
    quantize_dynamic_rows_neon(in, rows, cols, out, params);
    return;
  }
#endif
  for (size_t r = 0; r < rows; ++r) {
    const float* x = in + r * cols;
    float lo = 0.0f, hi = 0.0f;
    for (size_t c = 0; c < cols; ++c) {
      lo = std::min(lo, x[c]);
      hi = std::max(hi, x[c]);
    }
    params[r] = row_params(lo, hi);
    quantize_row(x, cols, out + r * cols, params[r]);
  }
}

QD8Weights::QD8Weights(const int8_t* w_nk, size_t n, size_t k, const float* scales, const float* bias,
                       size_t group_size)
    : n_(n), k_(k), group_size_(group_size) {
#if defined(__x86_64__)
  // (Groups of whole quads: a group's sums start and end on a vector boundary.)
  quads_ = cpu_level() >= CpuLevel::avx512_vnni && group_size % 4 == 0;
#endif
  const size_t kp = k_pairs(), kq = k_quads(), g = groups();
  scales_.assign(scales, scales + n * g);
  row_sums_.assign(n * g, 0);
  // Blocks of `units` units; a unit's k in runs of `run` bytes (a quad or a pair), the block's runs side by side.
  const size_t units = quads_ ? 16 : 8, run = quads_ ? 4 : 2, step = units * run;
  const size_t block_bytes = (quads_ ? kq : kp) * step;
  packed_.assign((n + units - 1) / units * block_bytes, 0);
  // Without a division per weight (a 64-bit division is 40 cycles on a Zen 1: it made the packing of a 1 MiB
  // MLP 8 ms of its load).
  const size_t group = group_size == 0 ? k : group_size;
  for (size_t j = 0; j < n; ++j) {
    const int8_t* src = w_nk + j * k;
    int8_t* dst = packed_.data() + (j / units) * block_bytes + (j % units) * run;
    size_t i = 0;
    if (run == 2) {
      for (; i + 2 <= k; i += 2, dst += step) std::memcpy(dst, src + i, 2);
    } else {
      for (; i + 4 <= k; i += 4, dst += step) std::memcpy(dst, src + i, 4);
    }
    if (i < k) std::memcpy(dst, src + i, k - i);  // the last, partial run (its padding stays zero)
    for (size_t gi = 0; gi < g; ++gi) {
      int32_t sum = 0;
      for (size_t i = gi * group; i < (gi + 1) * group; ++i) sum += src[i];
      row_sums_[j * g + gi] = sum;
    }
  }
  if (bias != nullptr) bias_.assign(bias, bias + n);
}

namespace {

// acc[r][c] (MR rows, NB blocks of 8 units) = sum over k pairs of the int16 pair products.
// `pairs` rows are `stride` int32 apart; kp pairs are summed.
template <int MR, int NB>
void qd8_tile_scalar(const int32_t* pairs, size_t stride, size_t kp, const int8_t* const* w, int32_t* acc) {
  for (int r = 0; r < MR; ++r) {
    for (int b = 0; b < NB; ++b) {
      for (int lane = 0; lane < 8; ++lane) {
        int32_t sum = 0;
        for (size_t p = 0; p < kp; ++p) {
          const auto x0 = static_cast<int16_t>(pairs[r * stride + p] & 0xFFFF);
          const auto x1 = static_cast<int16_t>(static_cast<uint32_t>(pairs[r * stride + p]) >> 16);
          sum += x0 * w[b][p * 16 + lane * 2] + x1 * w[b][p * 16 + lane * 2 + 1];
        }
        acc[r * 8 * NB + b * 8 + lane] = sum;
      }
    }
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
ETNP_TARGET_BEGIN("avx2")
namespace avx2 {
#include "backends/xnnpack/qd8_tile_x86.inc"
}  // namespace avx2
ETNP_TARGET_END

ETNP_TARGET_BEGIN("avx2,avx512f,avx512bw,avx512vl,avx512vnni")
#define ETNP_QD8_VNNI
namespace vnni {
#include "backends/xnnpack/qd8_tile_x86.inc"
}  // namespace vnni
#undef ETNP_QD8_VNNI
ETNP_TARGET_END
#elif defined(__aarch64__) && defined(__GNUC__)
namespace neon {
#include "backends/xnnpack/qd8_tile_neon.inc"
}  // namespace neon

ETNP_TARGET_BEGIN("arch=armv8.2-a+dotprod")
#define ETNP_QD8_DOTPROD
namespace dotprod {
#include "backends/xnnpack/qd8_tile_neon.inc"
}  // namespace dotprod
#undef ETNP_QD8_DOTPROD
ETNP_TARGET_END
#endif

template <int MR, int NB>
void qd8_tile(const int32_t* pairs, size_t stride, size_t kp, const int8_t* const* w, int32_t* acc) {
#if defined(__x86_64__) && defined(__GNUC__)
  switch (cpu_level()) {
    case CpuLevel::avx512_vnni:
      return vnni::qd8_tile_simd<MR, NB>(pairs, stride, kp, w, acc);
    case CpuLevel::avx2_fma:
      return avx2::qd8_tile_simd<MR, NB>(pairs, stride, kp, w, acc);
    case CpuLevel::portable:
      break;
  }
#elif defined(__aarch64__) && defined(__GNUC__)
  switch (cpu_level()) {
    case CpuLevel::neon_i8mm:  // (sdot: the pairs' layout gives smmla nothing to gain)
    case CpuLevel::neon_dotprod:
      return dotprod::qd8_tile_simd<MR, NB>(pairs, stride, kp, w, acc);
    case CpuLevel::neon:
      return neon::qd8_tile_simd<MR, NB>(pairs, stride, kp, w, acc);
    case CpuLevel::portable:
      break;
  }
#endif
  qd8_tile_scalar<MR, NB>(pairs, stride, kp, w, acc);
}

// The quads layout: acc[r][c] (MR rows, `cols` columns of one or two units of 16, the second `unit_stride` bytes
// after the first) = sum over kq quads of the products of the row's bytes (activation + 128) with the column's
// four weights; rows are `stride` bytes apart.
template <int MR>
void qd8_quad_tile_scalar(const uint8_t* rows, size_t stride, size_t kq, const int8_t* w, size_t unit_stride,
                          int cols, int32_t* acc) {
  for (int r = 0; r < MR; ++r) {
    for (int c = 0; c < cols; ++c) {
      const int8_t* unit = w + (c / 16) * unit_stride + (c % 16) * 4;
      int32_t sum = 0;
      for (size_t q = 0; q < kq * 4; ++q) sum += int32_t{rows[r * stride + q]} * unit[(q / 4) * 64 + q % 4];
      acc[r * cols + c] = sum;
    }
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
ETNP_TARGET_BEGIN("avx2,avx512f,avx512bw,avx512vl,avx512vnni")
template <int MR, int NU>
void qd8_quad_tile_vnni(const uint8_t* rows, size_t stride, size_t kq, const int8_t* w, size_t unit_stride,
                        int cols, int32_t* acc) {
  // NU units of 16 columns: two read each row's broadcast quad for 32 columns, so that loads (one a vpdpbusd
  // with one unit) no longer outnumber the vpdpbusd. Partial sums per row over interleaved quads, added at the
  // end, so that MR * NU * kSplit chains of vpdpbusd are in flight (one per row waited on its latency at every
  // step); integer sums do not depend on their order.
  constexpr int kSplit = NU == 1 ? 4 : 2;
  __m512i c[MR][NU][kSplit];
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 2
    for (int u = 0; u < NU; ++u) {
#pragma GCC unroll 4
      for (int j = 0; j < kSplit; ++j) c[r][u][j] = _mm512_setzero_si512();
    }
  }
  auto row = [&](int r, size_t q) {
    uint32_t quad;
    std::memcpy(&quad, rows + r * stride + q * 4, 4);
    return _mm512_set1_epi32(static_cast<int32_t>(quad));
  };
  auto step = [&](size_t q, int j) {
    __m512i v[NU];
#pragma GCC unroll 2
    for (int u = 0; u < NU; ++u) v[u] = _mm512_loadu_si512(w + u * unit_stride + q * 64);
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) {
      const __m512i x = row(r, q);
#pragma GCC unroll 2
      for (int u = 0; u < NU; ++u) c[r][u][j] = _mm512_dpbusd_epi32(c[r][u][j], x, v[u]);
    }
  };
  size_t q = 0;
  for (; q + kSplit <= kq; q += kSplit) {
#pragma GCC unroll 4
    for (int j = 0; j < kSplit; ++j) step(q + j, j);
  }
  for (; q < kq; ++q) step(q, 0);
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 2
    for (int u = 0; u < NU; ++u) {
      __m512i sum = c[r][u][0];
#pragma GCC unroll 3
      for (int j = 1; j < kSplit; ++j) sum = _mm512_add_epi32(sum, c[r][u][j]);
      const int left = cols - u * 16;
      const auto mask = static_cast<__mmask16>(left >= 16 ? 0xffffu : (1u << left) - 1u);
      _mm512_mask_storeu_epi32(acc + r * cols + u * 16, mask, sum);
    }
  }
}
ETNP_TARGET_END
#endif

template <int MR>
void qd8_quad_tile(const uint8_t* rows, size_t stride, size_t kq, const int8_t* w, size_t unit_stride, int cols,
                   int32_t* acc) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (cpu_level() >= CpuLevel::avx512_vnni) {
    return cols > 16 ? qd8_quad_tile_vnni<MR, 2>(rows, stride, kq, w, unit_stride, cols, acc)
                     : qd8_quad_tile_vnni<MR, 1>(rows, stride, kq, w, unit_stride, cols, acc);
  }
#endif
  qd8_quad_tile_scalar<MR>(rows, stride, kq, w, unit_stride, cols, acc);
}

void qd8_quad_tile_rows(int mr, const uint8_t* rows, size_t stride, size_t kq, const int8_t* w, size_t unit_stride,
                        int cols, int32_t* acc) {
  switch (mr) {
    case 1: qd8_quad_tile<1>(rows, stride, kq, w, unit_stride, cols, acc); break;
    case 2: qd8_quad_tile<2>(rows, stride, kq, w, unit_stride, cols, acc); break;
    case 3: qd8_quad_tile<3>(rows, stride, kq, w, unit_stride, cols, acc); break;
    default: qd8_quad_tile<4>(rows, stride, kq, w, unit_stride, cols, acc); break;
  }
}

template <int NB>
void qd8_tile_rows(int mr, const int32_t* pairs, size_t stride, size_t kp, const int8_t* const* w, int32_t* acc) {
  switch (mr) {
    case 1: qd8_tile<1, NB>(pairs, stride, kp, w, acc); break;
    case 2: qd8_tile<2, NB>(pairs, stride, kp, w, acc); break;
    case 3: qd8_tile<3, NB>(pairs, stride, kp, w, acc); break;
    default: qd8_tile<4, NB>(pairs, stride, kp, w, acc); break;
  }
}

}  // namespace

namespace {

// A product's integer sums less the activation zero point's share, in the weights' scale: one element, and (the
// row's activation scale `s` applied) the output, biased and clamped. Every path below computes these, in this
// order, multiplies and adds never fused: the same bits at every level and for both the per-group and the
// per-channel paths.
inline float qd8_dequantize(int32_t a, int32_t zp, int32_t sum, float scale) {
  return static_cast<float>(a - zp * sum) * scale;
}

inline float qd8_finish(float y, const float* bias, int c, float out_min, float out_max) {
  return std::min(std::max(bias != nullptr ? y + bias[c] : y, out_min), out_max);
}

#if defined(__x86_64__) && defined(__GNUC__)
// qd8_dequantize of columns [c, c + 8).
__attribute__((target("avx2"), always_inline)) inline __m256 qd8_dequantize8(const int32_t* a, __m256i vzp,
                                                                              const int32_t* sums,
                                                                              const float* scales, int c) {
  const __m256i sum = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sums + c));
  const __m256i q = _mm256_sub_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + c)),
                                     _mm256_mullo_epi32(vzp, sum));
  return _mm256_mul_ps(_mm256_cvtepi32_ps(q), _mm256_loadu_ps(scales + c));
}

// to[c] += qd8_dequantize(...), per-channel weights (stride 1), 8 columns at a time.
__attribute__((target("avx2"))) void qd8_dequantize_add_avx2(const int32_t* a, int32_t zp, const int32_t* sums,
                                                             const float* scales, int cols, float* to) {
  const __m256i vzp = _mm256_set1_epi32(zp);
  int c = 0;
  for (; c + 8 <= cols; c += 8) {
    _mm256_storeu_ps(to + c, _mm256_add_ps(_mm256_loadu_ps(to + c), qd8_dequantize8(a, vzp, sums, scales, c)));
  }
  for (; c < cols; ++c) to[c] += qd8_dequantize(a[c], zp, sums[c], scales[c]);
}

// out[c] = qd8_finish(qd8_dequantize(...) * s), per-channel weights, 8 columns at a time.
__attribute__((target("avx2"))) void qd8_output_avx2(const int32_t* a, int32_t zp, const int32_t* sums,
                                                     const float* scales, float s, const float* bias, float out_min,
                                                     float out_max, int cols, float* out) {
  const __m256i vzp = _mm256_set1_epi32(zp);
  const __m256 vs = _mm256_set1_ps(s), lo = _mm256_set1_ps(out_min), hi = _mm256_set1_ps(out_max);
  int c = 0;
  for (; c + 8 <= cols; c += 8) {
    __m256 y = _mm256_mul_ps(qd8_dequantize8(a, vzp, sums, scales, c), vs);
    if (bias != nullptr) y = _mm256_add_ps(y, _mm256_loadu_ps(bias + c));
    // max(lo, y) and min(hi, y) return y where it is NaN, as std::max(y, lo) and std::min(y, hi) do.
    _mm256_storeu_ps(out + c, _mm256_min_ps(hi, _mm256_max_ps(lo, y)));
  }
  for (; c < cols; ++c) {
    out[c] = qd8_finish(qd8_dequantize(a[c], zp, sums[c], scales[c]) * s, bias, c, out_min, out_max);
  }
}
#endif

// to[c] += qd8_dequantize(a[c], zp, sums[c * stride], scales[c * stride]), c < cols.
void qd8_dequantize_add(const int32_t* a, int32_t zp, const int32_t* sums, const float* scales, size_t stride,
                        int cols, float* to) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (stride == 1 && has_avx2_fma()) return qd8_dequantize_add_avx2(a, zp, sums, scales, cols, to);
#endif
  for (int c = 0; c < cols; ++c) to[c] += qd8_dequantize(a[c], zp, sums[c * stride], scales[c * stride]);
}

// Per-channel weights (one group): the output straight from the integer sums, as the per-group path makes it
// from its summed groups.
void qd8_output(const int32_t* a, int32_t zp, const int32_t* sums, const float* scales, float s, const float* bias,
                float out_min, float out_max, int cols, float* out) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (has_avx2_fma()) return qd8_output_avx2(a, zp, sums, scales, s, bias, out_min, out_max, cols, out);
#endif
  for (int c = 0; c < cols; ++c) {
    out[c] = qd8_finish(qd8_dequantize(a[c], zp, sums[c], scales[c]) * s, bias, c, out_min, out_max);
  }
}

}  // namespace

void fully_connected_qd8_f32(const int8_t* in, const DynamicQuantParams* params, size_t rows, const QD8Weights& w,
                             float out_min, float out_max, float* out, int32_t* scratch) {
  const size_t n = w.n(), k = w.k(), kp = w.k_pairs(), blocks = w.blocks();
  if (rows == 0 || n == 0) return;
  const bool quads = w.quads();
  const size_t kq = w.k_quads();
  auto* row_bytes = reinterpret_cast<uint8_t*>(scratch);  // quads: rows of kq * 4 bytes (kq <= kp)
  if (quads) {
    // Each row as bytes q + 128 (q ^ 0x80: unsigned, as vpdpbusd takes them), the last quad's tail 128 (q = 0).
    for (size_t r = 0; r < rows; ++r) {
      uint8_t* dst = row_bytes + r * kq * 4;
      for (size_t i = 0; i < k; ++i) dst[i] = static_cast<uint8_t>(in[r * k + i]) ^ 0x80u;
      std::fill(dst + k, dst + kq * 4, uint8_t{0x80});
    }
  } else {
    // Each row as int16 pairs packed in int32 (odd k: the last pair's high half is 0).
    for (size_t r = 0; r < rows; ++r) {
      const int8_t* x = in + r * k;
      for (size_t p = 0; p < kp; ++p) {
        const auto lo = static_cast<uint16_t>(static_cast<int16_t>(x[2 * p]));
        const auto hi = 2 * p + 1 < k ? static_cast<uint16_t>(static_cast<int16_t>(x[2 * p + 1])) : uint16_t{0};
        scratch[r * kp + p] = static_cast<int32_t>(static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16));
      }
    }
  }
  // Per group (the whole row for per-channel weights): integer sums, zero-point correction with the group's
  // weight sums (quads: the zero point and the 128 the bytes carry), then the group's scale; the row's
  // activation scale applies at the end.
  const size_t groups = w.groups(), group_pairs = w.group_size() == 0 ? kp : w.group_size() / 2;
  const size_t group_quads = w.group_size() == 0 ? kq : w.group_size() / 4;
  const int32_t zp_offset = quads ? 128 : 0;
  // A tile is up to 4 rows by two units of 16 columns in the quads layout (its second unit may be partial), by
  // two blocks of 8 in the pairs layout.
  const size_t tile_blocks = quads ? 4 : 2;
  auto run_blocks = [&](size_t b0, size_t b1) {
    int32_t acc[4 * 32];
    float sum[4 * 32];
    for (size_t b = b0; b < b1; b += tile_blocks) {
      const size_t nb = std::min(tile_blocks, b1 - b);
      const int cols = static_cast<int>(std::min(nb * 8, n - b * 8));
      const int acc_stride = quads ? cols : static_cast<int>(nb) * 8;  // the pairs tile writes whole blocks
      const float* bias = w.bias() != nullptr ? w.bias() + b * 8 : nullptr;
      for (size_t r = 0; r < rows; r += 4) {
        const int mr = static_cast<int>(std::min<size_t>(4, rows - r));
        if (groups > 1) std::fill(sum, sum + mr * cols, 0.0f);
        for (size_t g = 0; g < groups; ++g) {
          if (quads) {
            const size_t q0 = g * group_quads;
            qd8_quad_tile_rows(mr, row_bytes + r * kq * 4 + q0 * 4, kq * 4, group_quads, w.block(b) + q0 * 64,
                               kq * 64, cols, acc);
          } else {
            const size_t p0 = g * group_pairs;
            const int8_t* wb[2] = {w.block(b) + p0 * 16, nb == 2 ? w.block(b + 1) + p0 * 16 : nullptr};
            const int32_t* x = scratch + r * kp + p0;
            if (nb == 2) {
              qd8_tile_rows<2>(mr, x, kp, group_pairs, wb, acc);
            } else {
              qd8_tile_rows<1>(mr, x, kp, group_pairs, wb, acc);
            }
          }
          const int32_t* sums = w.row_sums() + b * 8 * groups + g;
          const float* scales = w.scales() + b * 8 * groups + g;
          for (int i = 0; i < mr; ++i) {
            const int32_t zp = params[r + i].zero_point + zp_offset;
            if (groups == 1) {  // straight to the output
              qd8_output(acc + i * acc_stride, zp, sums, scales, params[r + i].scale, bias, out_min, out_max, cols,
                         out + (r + i) * n + b * 8);
            } else {
              qd8_dequantize_add(acc + i * acc_stride, zp, sums, scales, groups, cols, sum + i * cols);
            }
          }
        }
        if (groups == 1) continue;
        for (int i = 0; i < mr; ++i) {
          const float s = params[r + i].scale;
          const float* from = sum + i * cols;
          float* o = out + (r + i) * n + b * 8;
          for (int c = 0; c < cols; ++c) o[c] = qd8_finish(from[c] * s, bias, c, out_min, out_max);
        }
      }
    }
  };
  if (rows * n * k >= (size_t{1} << 20) && blocks >= 8) {
    // Whole tiles per chunk, at least 4 blocks, so that every chunk but the last uses the widest tile.
    const size_t tiles = (blocks + tile_blocks - 1) / tile_blocks;
    ThreadPool::current().parallel_for(tiles, 4 / tile_blocks, [&](size_t t0, size_t t1) {
      run_blocks(t0 * tile_blocks, std::min(blocks, t1 * tile_blocks));
    });
  } else {
    run_blocks(0, blocks);
  }
}

// ---- int8 depthwise convolution -------------------------------------------------------------------------

namespace {

constexpr size_t kMaxDepthwiseRows = 16;

#if defined(__x86_64__) && defined(__GNUC__)
struct RequantQS8 {
  __m256 lo, hi;  // output range less the zero point, as floats
  __m256i zp;
};

// Output pixels [x, x + P) of 8 channels from `ch`: acc = bias + sum over tap pairs of the int16-pair products.
template <int P>
__attribute__((target("avx2"), always_inline)) inline void depthwise_qs8_block(
    const int8_t* const* taps, size_t tap_pairs, size_t c, size_t step, size_t in_off, const int16_t* weights,
    const int32_t* bias, const float* scales, const RequantQS8& q, int8_t* out) {
  __m256i acc[P];
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bias));
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) acc[p] = b;
  for (size_t t = 0; t < tap_pairs; ++t) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(weights + t * c * 2));
    const int8_t* a = taps[2 * t] + in_off;
    const int8_t* z = taps[2 * t + 1] + in_off;
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) {
      const __m128i x0 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(a + p * step));
      const __m128i x1 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(z + p * step));
      const __m256i x = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(x0, x1));
      acc[p] = _mm256_add_epi32(acc[p], _mm256_madd_epi16(x, w));
    }
  }
  const __m256 scale = _mm256_loadu_ps(scales);
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) {
    __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(acc[p]), scale);
    v = _mm256_min_ps(_mm256_max_ps(v, q.lo), q.hi);
    const __m256i r = _mm256_add_epi32(_mm256_cvtps_epi32(v), q.zp);  // rounds half to even
    const __m128i r16 = _mm_packs_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out + p * c), _mm_packs_epi16(r16, r16));
  }
}

template <int P>
__attribute__((target("avx2"), always_inline)) inline void depthwise_qs8_blocks(
    const int8_t* const* taps, size_t tap_pairs, size_t c, size_t stride, const int16_t* weights,
    const int32_t* bias, const float* scales, const RequantQS8& q, size_t out_w, int8_t* out, size_t& x) {
  const size_t step = stride * c;
  for (; x + P <= out_w; x += P) {
    for (size_t ch = 0; ch < c; ch += 8) {
      depthwise_qs8_block<P>(taps, tap_pairs, c, step, x * step + ch, weights + ch * 2, bias + ch, scales + ch, q,
                             out + x * c + ch);
    }
  }
}

__attribute__((target("avx2"))) void depthwise_qs8_row_avx2(const int8_t* const* taps, size_t tap_pairs, size_t c,
                                                           size_t stride, const int16_t* weights, const int32_t* bias,
                                                           const float* scales, int8_t zp, int8_t lo, int8_t hi,
                                                           size_t out_w, int8_t* out) {
  const RequantQS8 q{_mm256_set1_ps(static_cast<float>(lo - zp)), _mm256_set1_ps(static_cast<float>(hi - zp)),
                     _mm256_set1_epi32(zp)};
  size_t x = 0;
  depthwise_qs8_blocks<8>(taps, tap_pairs, c, stride, weights, bias, scales, q, out_w, out, x);
  depthwise_qs8_blocks<4>(taps, tap_pairs, c, stride, weights, bias, scales, q, out_w, out, x);
  depthwise_qs8_blocks<2>(taps, tap_pairs, c, stride, weights, bias, scales, q, out_w, out, x);
  depthwise_qs8_blocks<1>(taps, tap_pairs, c, stride, weights, bias, scales, q, out_w, out, x);
}

// AVX-512 (BW): blocks of 16 channels (a trailing 8 through the AVX2 block), the same int32 sums and the same
// requantization instruction for instruction, so the same bytes. The clamps and conversions use the zero-masked
// forms with a full mask: GCC 12's unmasked ones read an uninitialized vector (-Wmaybe-uninitialized).
struct RequantQS8x16 {
  __m512 lo, hi;
  __m512i zp;
};

template <int P>
__attribute__((target("avx512f,avx512bw,avx2"), always_inline)) inline void depthwise_qs8_block16(
    const int8_t* const* taps, size_t tap_pairs, size_t c, size_t step, size_t in_off, const int16_t* weights,
    const int32_t* bias, const float* scales, const RequantQS8x16& q, int8_t* out) {
  constexpr __mmask16 kAll = 0xffff;
  __m512i acc[P];
  const __m512i b = _mm512_loadu_si512(bias);
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) acc[p] = b;
  for (size_t t = 0; t < tap_pairs; ++t) {
    const __m512i w = _mm512_loadu_si512(weights + t * c * 2);
    const int8_t* a = taps[2 * t] + in_off;
    const int8_t* z = taps[2 * t + 1] + in_off;
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) {
      const __m128i x0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + p * step));
      const __m128i x1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(z + p * step));
      // Channels 0-7 then 8-15, each channel's two taps side by side, as the weights.
      const __m256i pairs = _mm256_set_m128i(_mm_unpackhi_epi8(x0, x1), _mm_unpacklo_epi8(x0, x1));
      acc[p] = _mm512_add_epi32(acc[p], _mm512_madd_epi16(_mm512_cvtepi8_epi16(pairs), w));
    }
  }
  const __m512 scale = _mm512_loadu_ps(scales);
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) {
    __m512 v = _mm512_mul_ps(_mm512_maskz_cvtepi32_ps(kAll, acc[p]), scale);
    v = _mm512_maskz_min_ps(kAll, _mm512_maskz_max_ps(kAll, v, q.lo), q.hi);
    const __m512i r = _mm512_add_epi32(_mm512_maskz_cvtps_epi32(kAll, v), q.zp);  // rounds half to even
    _mm512_mask_cvtsepi32_storeu_epi8(out + p * c, kAll, r);  // narrowed with signed saturation, as packs
  }
}

template <int P>
__attribute__((target("avx512f,avx512bw,avx2"), always_inline)) inline void depthwise_qs8_blocks16(
    const int8_t* const* taps, size_t tap_pairs, size_t c, size_t stride, const int16_t* weights,
    const int32_t* bias, const float* scales, const RequantQS8x16& q16, const RequantQS8& q8, size_t out_w,
    int8_t* out, size_t& x) {
  const size_t step = stride * c;
  for (; x + P <= out_w; x += P) {
    size_t ch = 0;
    for (; ch + 16 <= c; ch += 16) {
      depthwise_qs8_block16<P>(taps, tap_pairs, c, step, x * step + ch, weights + ch * 2, bias + ch, scales + ch,
                               q16, out + x * c + ch);
    }
    if (ch < c) {  // c % 16 == 8
      depthwise_qs8_block<P>(taps, tap_pairs, c, step, x * step + ch, weights + ch * 2, bias + ch, scales + ch, q8,
                             out + x * c + ch);
    }
  }
}

__attribute__((target("avx512f,avx512bw,avx2"))) void depthwise_qs8_row_avx512(
    const int8_t* const* taps, size_t tap_pairs, size_t c, size_t stride, const int16_t* weights, const int32_t* bias,
    const float* scales, int8_t zp, int8_t lo, int8_t hi, size_t out_w, int8_t* out) {
  const RequantQS8x16 q16{_mm512_set1_ps(static_cast<float>(lo - zp)), _mm512_set1_ps(static_cast<float>(hi - zp)),
                          _mm512_set1_epi32(zp)};
  const RequantQS8 q8{_mm256_set1_ps(static_cast<float>(lo - zp)), _mm256_set1_ps(static_cast<float>(hi - zp)),
                      _mm256_set1_epi32(zp)};
  size_t x = 0;
  depthwise_qs8_blocks16<8>(taps, tap_pairs, c, stride, weights, bias, scales, q16, q8, out_w, out, x);
  depthwise_qs8_blocks16<4>(taps, tap_pairs, c, stride, weights, bias, scales, q16, q8, out_w, out, x);
  depthwise_qs8_blocks16<2>(taps, tap_pairs, c, stride, weights, bias, scales, q16, q8, out_w, out, x);
  depthwise_qs8_blocks16<1>(taps, tap_pairs, c, stride, weights, bias, scales, q16, q8, out_w, out, x);
}

// AVX-512 VNNI: 64 channels a block, four taps of a channel in each 32-bit lane for `vpdpbusd` (four u8 x s8 products
// a lane; the inputs made unsigned by flipping their top bit, which the bias makes up for: DepthwiseConvQS8's
// quad packing). The unpacks that interleave four tap rows work within 128-bit lanes, so sum k holds channels
// 16L + 4k + (0..3) in lane L; two levels of packs put the bytes back in channel order. The int32 sums are the
// same integers as the pair kernels', and the requantization is theirs instruction for instruction: the same
// bytes. A row of outputs one 64-channel block at a time, its Q * 4 weight vectors loaded once.
template <int Q>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void depthwise_qs8_row_vnni(
    const int8_t* const* taps, size_t c, size_t stride, const int8_t* weights, const int32_t* bias,
    const float* scales, int8_t zp, int8_t lo, int8_t hi, size_t out_w, int8_t* out) {
  constexpr __mmask16 kAll = 0xffff;
  const __m512 vlo = _mm512_set1_ps(static_cast<float>(lo - zp)), vhi = _mm512_set1_ps(static_cast<float>(hi - zp));
  const __m512i vzp = _mm512_set1_epi32(zp), flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const size_t step = stride * c;
  for (size_t ch = 0; ch < c; ch += 64) {
    const __mmask64 m = c - ch >= 64 ? ~__mmask64{0} : (__mmask64{1} << (c - ch)) - 1;
    __m512i w[Q][4];
#pragma GCC unroll 8
    for (int q = 0; q < Q; ++q) {
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) w[q][k] = _mm512_loadu_si512(weights + ((ch / 64) * Q * 4 + q * 4 + k) * 64);
    }
    const int32_t* b = bias + ch;
    const float* sc = scales + ch;
    for (size_t x = 0; x < out_w; ++x) {
      const size_t off = x * step + ch;
      __m512i acc[4];
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) acc[k] = _mm512_loadu_si512(b + 16 * k);
#pragma GCC unroll 8
      for (int q = 0; q < Q; ++q) {
        __m512i t[4];
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i) t[i] = _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, taps[4 * q + i] + off), flip);
        const __m512i lo01 = _mm512_unpacklo_epi8(t[0], t[1]), hi01 = _mm512_unpackhi_epi8(t[0], t[1]);
        const __m512i lo23 = _mm512_unpacklo_epi8(t[2], t[3]), hi23 = _mm512_unpackhi_epi8(t[2], t[3]);
        acc[0] = _mm512_dpbusd_epi32(acc[0], _mm512_unpacklo_epi16(lo01, lo23), w[q][0]);
        acc[1] = _mm512_dpbusd_epi32(acc[1], _mm512_unpackhi_epi16(lo01, lo23), w[q][1]);
        acc[2] = _mm512_dpbusd_epi32(acc[2], _mm512_unpacklo_epi16(hi01, hi23), w[q][2]);
        acc[3] = _mm512_dpbusd_epi32(acc[3], _mm512_unpackhi_epi16(hi01, hi23), w[q][3]);
      }
      __m512i r[4];
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        __m512 v = _mm512_mul_ps(_mm512_maskz_cvtepi32_ps(kAll, acc[k]), _mm512_loadu_ps(sc + 16 * k));
        v = _mm512_maskz_min_ps(kAll, _mm512_maskz_max_ps(kAll, v, vlo), vhi);
        r[k] = _mm512_add_epi32(_mm512_maskz_cvtps_epi32(kAll, v), vzp);  // rounds half to even
      }
      const __m512i bytes = _mm512_packs_epi16(_mm512_packs_epi32(r[0], r[1]), _mm512_packs_epi32(r[2], r[3]));
      _mm512_mask_storeu_epi8(out + x * c + ch, m, bytes);
    }
  }
}

using DepthwiseQS8RowVnni = void (*)(const int8_t* const*, size_t, size_t, const int8_t*, const int32_t*,
                                     const float*, int8_t, int8_t, int8_t, size_t, int8_t*);
/// The VNNI row for `quads` quads of taps (1 to 7) over `channels`, null where the CPU lacks it or the channels
/// leave much of a 64-channel block idle: 32 channels ran 1.3x slower than the 16-channel blocks (MobileNetV2's
/// first layer), 96 as fast, 144 and more 1.1-1.5x faster (Zen 5, one thread).
DepthwiseQS8RowVnni depthwise_qs8_row_vnni_for(size_t quads, size_t channels) {
  if (cpu_level() < CpuLevel::avx512_vnni || (channels % 64 != 0 && channels < 128)) return nullptr;
  static constexpr DepthwiseQS8RowVnni kRows[] = {depthwise_qs8_row_vnni<1>, depthwise_qs8_row_vnni<2>,
                                                  depthwise_qs8_row_vnni<3>, depthwise_qs8_row_vnni<4>,
                                                  depthwise_qs8_row_vnni<5>, depthwise_qs8_row_vnni<6>,
                                                  depthwise_qs8_row_vnni<7>};
  return quads >= 1 && quads <= std::size(kRows) ? kRows[quads - 1] : nullptr;
}
#elif defined(__aarch64__) && defined(__GNUC__)
struct RequantQS8 {
  float32x4_t lo, hi;  // output range less the zero point, as floats
  int32x4_t zp;
};

// Output pixels [x, x + P) of 8 channels from `ch`: acc = bias + sum over taps of the products, the two taps of
// a pair (their weights side by side per channel, deinterleaved by ld2) widened to int16 and multiplied with
// smlal/smlal2 into the int32 sums of channels 0..3 and 4..7. Then the AVX2 epilogue, instruction for
// instruction: float, times the scale, clamped, fcvtns (nearest, ties to even), plus the zero point, narrowed.
template <int P>
__attribute__((always_inline)) inline void depthwise_qs8_block(const int8_t* const* taps, size_t tap_pairs, size_t c,
                                                               size_t step, size_t in_off, const int16_t* weights,
                                                               const int32_t* bias, const float* scales,
                                                               const RequantQS8& q, int8_t* out) {
  int32x4_t lo[P], hi[P];
  const int32x4_t b0 = vld1q_s32(bias), b1 = vld1q_s32(bias + 4);
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) {
    lo[p] = b0;
    hi[p] = b1;
  }
  for (size_t t = 0; t < tap_pairs; ++t) {
    const int16x8x2_t w = vld2q_s16(weights + t * c * 2);  // val[0]: tap 2t of the 8 channels, val[1]: 2t + 1
    const int8_t* a = taps[2 * t] + in_off;
    const int8_t* z = taps[2 * t + 1] + in_off;
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) {
      const int16x8_t x0 = vmovl_s8(vld1_s8(a + p * step)), x1 = vmovl_s8(vld1_s8(z + p * step));
      lo[p] = vmlal_s16(lo[p], vget_low_s16(x0), vget_low_s16(w.val[0]));
      hi[p] = vmlal_high_s16(hi[p], x0, w.val[0]);
      lo[p] = vmlal_s16(lo[p], vget_low_s16(x1), vget_low_s16(w.val[1]));
      hi[p] = vmlal_high_s16(hi[p], x1, w.val[1]);
    }
  }
  const float32x4_t s0 = vld1q_f32(scales), s1 = vld1q_f32(scales + 4);
  auto requant = [&](int32x4_t acc, float32x4_t scale) {
    float32x4_t v = vmulq_f32(vcvtq_f32_s32(acc), scale);
    v = vminq_f32(vmaxq_f32(v, q.lo), q.hi);
    return vqmovn_s32(vaddq_s32(vcvtnq_s32_f32(v), q.zp));
  };
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) vst1_s8(out + p * c, vqmovn_s16(vcombine_s16(requant(lo[p], s0), requant(hi[p], s1))));
}

template <int P>
__attribute__((always_inline)) inline void depthwise_qs8_blocks(const int8_t* const* taps, size_t tap_pairs, size_t c,
                                                                size_t stride, const int16_t* weights,
                                                                const int32_t* bias, const float* scales,
                                                                const RequantQS8& q, size_t out_w, int8_t* out,
                                                                size_t& x) {
  const size_t step = stride * c;
  for (; x + P <= out_w; x += P) {
    for (size_t ch = 0; ch < c; ch += 8) {
      depthwise_qs8_block<P>(taps, tap_pairs, c, step, x * step + ch, weights + ch * 2, bias + ch, scales + ch, q,
                             out + x * c + ch);
    }
  }
}

// Blocks of 8 pixels: 16 int32 sums, the two taps' 2 widened vectors per pixel and the weights fit the 32
// registers. (noinline, as these NEON twins all are: one symbol each, to read in the disassembly.)
__attribute__((noinline)) void depthwise_qs8_row_neon(const int8_t* const* taps, size_t tap_pairs, size_t c,
                                                      size_t stride, const int16_t* weights, const int32_t* bias,
                                                      const float* scales, int8_t zp, int8_t lo, int8_t hi,
                                                      size_t out_w, int8_t* out) {
  const RequantQS8 q{vdupq_n_f32(static_cast<float>(lo - zp)), vdupq_n_f32(static_cast<float>(hi - zp)),
                     vdupq_n_s32(zp)};
  size_t x = 0;
  depthwise_qs8_blocks<8>(taps, tap_pairs, c, stride, weights, bias, scales, q, out_w, out, x);
  depthwise_qs8_blocks<4>(taps, tap_pairs, c, stride, weights, bias, scales, q, out_w, out, x);
  depthwise_qs8_blocks<2>(taps, tap_pairs, c, stride, weights, bias, scales, q, out_w, out, x);
  depthwise_qs8_blocks<1>(taps, tap_pairs, c, stride, weights, bias, scales, q, out_w, out, x);
}
#endif

}  // namespace

DepthwiseConvQS8::DepthwiseConvQS8(const int8_t* filter, const int32_t* bias, const float* scales,
                                   const Params& params)
    : p_(params) {
  const size_t c = p_.channels, taps = p_.kernel_h * p_.kernel_w;
  tap_pairs_ = (taps + 1) / 2;
  weights_.assign(tap_pairs_ * c * 2, 0);
  bias_.assign(c, 0);
  for (size_t ch = 0; ch < c; ++ch) {
    int32_t sum = 0;
    for (size_t t = 0; t < taps; ++t) {
      const int8_t v = filter[t * c + ch];
      weights_[(t / 2) * c * 2 + ch * 2 + (t % 2)] = v;
      sum += v;
    }
    bias_[ch] = (bias == nullptr ? 0 : bias[ch]) - static_cast<int32_t>(p_.in_zero_point) * sum;
  }
  scales_.assign(scales, scales + c);
#if defined(__x86_64__) && defined(__GNUC__)
  // Only where the VNNI kernel runs (a CPU without it, and the channel counts it leaves to the pair kernel, would
  // hold a second packing never read).
  if (depthwise_qs8_row_vnni_for((taps + 3) / 4, c) == nullptr) return;
  quads_ = (taps + 3) / 4;
  const size_t blocks = (c + 63) / 64;
  quad_weights_.assign(blocks * quads_ * 4 * 64, 0);
  quad_bias_.assign(blocks * 64, 0);
  quad_scales_.assign(blocks * 64, 0.0f);
  for (size_t blk = 0; blk < blocks; ++blk) {
    for (size_t k = 0; k < 4; ++k) {
      for (size_t j = 0; j < 16; ++j) {
        const size_t ch = blk * 64 + 16 * (j / 4) + 4 * k + j % 4;
        if (ch >= c) continue;
        int32_t sum = 0;
        for (size_t t = 0; t < taps; ++t) {
          const int8_t v = filter[t * c + ch];
          quad_weights_[((blk * quads_ + t / 4) * 4 + k) * 64 + 4 * j + t % 4] = v;
          sum += v;
        }
        quad_bias_[blk * 64 + 16 * k + j] = bias_[ch] - 128 * sum;
        quad_scales_[blk * 64 + 16 * k + j] = scales_[ch];
      }
    }
  }
#endif
}

bool DepthwiseConvQS8::supported(size_t channels, size_t kernel_h) {
#if defined(__x86_64__) && defined(__GNUC__)
  return has_avx2_fma() && channels > 0 && channels % 8 == 0 && kernel_h <= kMaxDepthwiseRows;
#elif defined(__aarch64__) && defined(__GNUC__)
  return has_neon() && channels > 0 && channels % 8 == 0 && kernel_h <= kMaxDepthwiseRows;
#else
  (void)channels;
  (void)kernel_h;
  return false;
#endif
}

void DepthwiseConvQS8::run_rows(const int8_t* in, size_t h, size_t w, size_t out_w, size_t y0, size_t y1,
                                int8_t* out, int8_t* rows) const {
#if (defined(__x86_64__) || defined(__aarch64__)) && defined(__GNUC__)
  const size_t c = p_.channels, kh = p_.kernel_h, kw = p_.kernel_w;
  const size_t span = (out_w - 1) * p_.stride_w + kw;  // padded columns the taps reach
  const size_t padded = span * c + 8;
  // Padded input rows, one slot per kernel row (slot = iy mod kh), plus a last slot of in_zp bytes that the
  // missing partner of an odd tap count reads (its weight is zero).
  ptrdiff_t loaded[kMaxDepthwiseRows];
  std::fill(loaded, loaded + kh, std::numeric_limits<ptrdiff_t>::min());
  const int8_t* taps[2 * kMaxDepthwiseRows * kMaxDepthwiseRows + 4];
  int8_t* filler = rows + kh * padded;
#if defined(__x86_64__)
  // The level a test capped after the packing was made may lack VNNI: the pair kernel then runs.
  const DepthwiseQS8RowVnni vnni = quads_ == 0 ? nullptr : depthwise_qs8_row_vnni_for(quads_, c);
#endif
  for (size_t y = y0; y < y1; ++y) {
    for (size_t ky = 0; ky < kh; ++ky) {
      const ptrdiff_t iy = static_cast<ptrdiff_t>(y * p_.stride_h + ky) - static_cast<ptrdiff_t>(p_.pad_top);
      const auto k = static_cast<ptrdiff_t>(kh);
      const auto slot = static_cast<size_t>((iy % k + k) % k);
      int8_t* buf = rows + slot * padded;
      if (loaded[slot] != iy) {
        const bool inside = iy >= 0 && static_cast<size_t>(iy) < h;
        compute::load_padded_row(buf, padded, inside ? in + static_cast<size_t>(iy) * w * c : nullptr, w, c, span,
                                 p_.pad_left, p_.in_zero_point);
        loaded[slot] = iy;
      }
      for (size_t kx = 0; kx < kw; ++kx) taps[ky * kw + kx] = buf + kx * c;
    }
    taps[kh * kw] = filler;
#if defined(__x86_64__)
    if (vnni != nullptr) {
      // Taps past the last of its quads read the filler (their weights are zero).
      for (size_t t = kh * kw; t < 4 * quads_; ++t) taps[t] = filler;
      vnni(taps, c, p_.stride_w, quad_weights_.data(), quad_bias_.data(), quad_scales_.data(), p_.out_zero_point,
           p_.out_min, p_.out_max, out_w, out + y * out_w * c);
      continue;
    }
    (cpu_level() >= CpuLevel::avx512_vnni ? depthwise_qs8_row_avx512 : depthwise_qs8_row_avx2)(
        taps, tap_pairs_, c, p_.stride_w, weights_.data(), bias_.data(), scales_.data(), p_.out_zero_point, p_.out_min,
        p_.out_max, out_w, out + y * out_w * c);
#else
    depthwise_qs8_row_neon(taps, tap_pairs_, c, p_.stride_w, weights_.data(), bias_.data(), scales_.data(),
                           p_.out_zero_point, p_.out_min, p_.out_max, out_w, out + y * out_w * c);
#endif
  }
#else
  (void)in, (void)h, (void)w, (void)out_w, (void)y0, (void)y1, (void)out, (void)rows;
#endif
}

void DepthwiseConvQS8::run(const int8_t* in, size_t batch, size_t h, size_t w, size_t out_h, size_t out_w,
                           int8_t* out, std::vector<uint8_t>& scratch) const {
  if (batch == 0 || out_h == 0 || out_w == 0) return;
  const size_t c = p_.channels;
  const size_t padded = ((out_w - 1) * p_.stride_w + p_.kernel_w) * c + 8;
  const size_t per_chunk = (p_.kernel_h + 1) * padded;
  const size_t chunks = compute::conv_row_chunks(batch, out_h);
  if (scratch.size() < chunks * per_chunk) scratch.resize(chunks * per_chunk);
  // The filler slot of each chunk: in_zp bytes (the taps run past an odd tap count read it at any column).
  for (size_t i = 0; i < chunks; ++i) {
    std::memset(scratch.data() + i * per_chunk + p_.kernel_h * padded, p_.in_zero_point, padded);
  }
  compute::for_each_conv_row_chunk(batch, out_h, chunks,
                                   batch * out_h * out_w * c * p_.kernel_h * p_.kernel_w * compute::kDepthwiseCost,
                                   [&](size_t chunk, size_t b, size_t y0, size_t y1) {
                                     run_rows(in + b * h * w * c, h, w, out_w, y0, y1, out + b * out_h * out_w * c,
                                              reinterpret_cast<int8_t*>(scratch.data()) + chunk * per_chunk);
                                   });
}

void requantize_s8(const int8_t* in, int8_t* out, size_t n, float in_scale, int32_t in_zp, float out_scale,
                   int32_t out_zp) {
  const float ratio = in_scale / out_scale;
  for (size_t i = 0; i < n; ++i) {
    float v = std::nearbyint(static_cast<float>(in[i] - in_zp) * ratio) + static_cast<float>(out_zp);
    out[i] = static_cast<int8_t>(std::min(std::max(v, -128.0f), 127.0f));
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
namespace {

// quantize_q8's loop 8 floats at a time, operation for operation: the product, rounding to nearest even without
// raising inexact (nearbyint), the zero point added in float, NaN to the zero point, the clamp, the code's low byte.
// Returns how many it did (a multiple of 8).
__attribute__((target("avx2"))) size_t quantize_q8_avx2(const float* in, uint8_t* out, size_t n, float inv, float lo,
                                                        float hi, float zp) {
  const __m256 vinv = _mm256_set1_ps(inv), vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi),
               vzp = _mm256_set1_ps(zp);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(in + i), vinv);
    __m256 v = _mm256_add_ps(_mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), vzp);
    v = _mm256_blendv_ps(v, vzp, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    v = _mm256_min_ps(_mm256_max_ps(v, vlo), vhi);
    const __m256i codes = _mm256_cvttps_epi32(v);  // integers in [-128, 255]: their low bytes are the codes
    const __m256i bytes = _mm256_shuffle_epi8(codes, _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1,
                                                                      -1, -1, -1, -1, 0, 4, 8, 12, -1, -1, -1, -1,
                                                                      -1, -1, -1, -1, -1, -1, -1, -1));
    const uint32_t low = static_cast<uint32_t>(_mm256_extract_epi32(bytes, 0));
    const uint32_t high = static_cast<uint32_t>(_mm256_extract_epi32(bytes, 4));
    std::memcpy(out + i, &low, 4);
    std::memcpy(out + i + 4, &high, 4);
  }
  return i;
}

}  // namespace
#endif

void quantize_q8(const float* in, void* out, size_t n, const Quant8& q) {
  const float inv = 1.0f / q.scale;
  const auto lo = static_cast<float>(q.qmin()), hi = static_cast<float>(q.qmax());
  const auto zp = static_cast<float>(q.zero_point);
  auto* bytes = static_cast<uint8_t*>(out);
  size_t start = 0;
#if defined(__x86_64__) && defined(__GNUC__)
  if (has_avx2_fma()) start = quantize_q8_avx2(in, bytes, n, inv, lo, hi, zp);
#endif
  for (size_t i = start; i < n; ++i) {
    float v = std::nearbyint(in[i] * inv) + zp;
    v = std::isnan(v) ? zp : std::min(std::max(v, lo), hi);
    const auto code = static_cast<int32_t>(v);
    bytes[i] = static_cast<uint8_t>(q.is_unsigned ? code : static_cast<int32_t>(static_cast<int8_t>(code)) & 0xFF);
  }
}

void dequantize_q8(const void* in, float* out, size_t n, const Quant8& q) {
  const auto* bytes = static_cast<const uint8_t*>(in);
  for (size_t i = 0; i < n; ++i) {
    const int32_t code = q.is_unsigned ? bytes[i] : static_cast<int8_t>(bytes[i]);
    out[i] = static_cast<float>(code - q.zero_point) * q.scale;
  }
}

void apply_q8_table(const uint8_t* table, const void* in, void* out, size_t n) {
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  for (size_t i = 0; i < n; ++i) dst[i] = table[src[i]];
}

int32_t quantize_bound(float value, float scale, int32_t zero_point, int32_t qmin, int32_t qmax) {
  if (std::isnan(value)) return qmin;
  double q = std::nearbyint(static_cast<double>(value) / scale) + zero_point;
  q = std::min(std::max(q, static_cast<double>(qmin)), static_cast<double>(qmax));
  return static_cast<int32_t>(q);
}

}  // namespace etnp::xnn
