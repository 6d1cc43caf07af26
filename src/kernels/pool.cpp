// Pooling and resampling over the last two dims of (N,)C,H,W tensors: max_pool2d_with_indices, avg_pool2d,
// _adaptive_avg_pool2d, upsample_bilinear2d.vec and upsample_nearest2d.vec. Every kernel indexes through
// strides (any dim order) and splits the (n, c) planes across the thread pool.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "core/cpu_features.h"
#include "etnp/threadpool.h"
#include "kernels/kernel_util.h"
#include "kernels/register.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ETNP_POOL_AVX2 1
#endif
#if defined(__aarch64__)
#include <arm_neon.h>
#endif

namespace etnp::kernels {
namespace {

/// The (n, c) planes of a rank-3 or rank-4 tensor: plane p has base offset base(p); rows/cols via strides.
struct Planes {
  int64_t count = 0, channels = 0;
  int64_t stride_n = 0, stride_c = 0, stride_h = 0, stride_w = 0;
  int64_t h = 0, w = 0;
  int64_t base(int64_t p) const { return (p / channels) * stride_n + (p % channels) * stride_c; }
};

Planes planes_of(const Tensor& t) {
  Planes p;
  const int r = t.dim();
  p.channels = t.size(r - 3);
  p.count = (r == 4 ? t.size(0) : 1) * p.channels;
  p.stride_n = r == 4 ? t.stride(0) : 0;
  p.stride_c = t.stride(r - 3);
  p.stride_h = t.stride(r - 2);
  p.stride_w = t.stride(r - 1);
  p.h = t.size(r - 2);
  p.w = t.size(r - 1);
  return p;
}

/// Output shape: input's leading dims with the last two replaced.
std::vector<int64_t> with_spatial(const Tensor& in, int64_t oh, int64_t ow) {
  std::vector<int64_t> shape(in.sizes().begin(), in.sizes().end());
  shape[shape.size() - 2] = oh;
  shape[shape.size() - 1] = ow;
  return shape;
}

/// Runs fn(plane) for every plane, split across the pool in shares of at least 8192 units of work (window taps).
/// The bar is low on purpose: the input usually comes from a split convolution, and on one thread the half
/// the other core wrote crosses between the cores' caches (a small CNN's 2x2 pooling, 16 planes of 32x32: 18 us
/// on one thread after a two-thread convolution, 7 us split, on the 2-core Zen 1 machine).
template <typename F>
void for_planes(KernelContext& ctx, int64_t planes, int64_t work_per_plane, F&& fn) {
  ThreadPool* pool = ctx.pool() != nullptr ? ctx.pool() : &ThreadPool::global();
  const size_t grain = static_cast<size_t>(std::max<int64_t>(1, (int64_t{1} << 13) / std::max<int64_t>(1, work_per_plane)));
  pool->parallel_for(static_cast<size_t>(planes), grain, [&](size_t b, size_t e) {
    for (size_t p = b; p < e; ++p) fn(static_cast<int64_t>(p));
  });
}

/// int[2] argument that may be given as one value (or, for `stride`, be empty = `fallback`).
std::array<int64_t, 2> pair_arg(const EValue& v, const char* name, const char* op,
                                std::optional<std::array<int64_t, 2>> fallback = std::nullopt) {
  const std::vector<int64_t> vals = v.to_int_list().to_vector();
  if (vals.empty() && fallback) return *fallback;
  ETNP_KERNEL_CHECK(vals.size() == 1 || vals.size() == 2,
                    op << ": " << name << " must have one or two entries, got " << vals.size());
  return {vals[0], vals.size() == 2 ? vals[1] : vals[0]};
}

void check_pool_input(const Tensor& in, const char* op) {
  ETNP_KERNEL_CHECK(in.dim() == 3 || in.dim() == 4,
                    op << ": expected a 3-D or 4-D input, got shape " << shape_str(in.sizes()));
  for (int d = in.dim() - 3; d < in.dim(); ++d) {
    ETNP_KERNEL_CHECK(in.size(d) > 0, op << ": input of shape " << shape_str(in.sizes())
                                         << " has an empty non-batch dimension");
  }
}

/// ATen's pooling_output_shape: floor or ceil division, and with ceil_mode the last window must start
/// inside the input or its left padding.
int64_t pooled_size(int64_t in, int64_t kernel, int64_t pad, int64_t stride, int64_t dilation, bool ceil_mode) {
  const int64_t numer = in + 2 * pad - dilation * (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  int64_t out = (numer >= 0 ? numer / stride : -((-numer + stride - 1) / stride)) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

struct Pool2dParams {
  std::array<int64_t, 2> kernel, stride, pad, dilation;
  int64_t oh, ow;
  bool operator==(const Pool2dParams&) const = default;
};

Pool2dParams pool2d_params(const Tensor& in, const EValue& kernel_v, const EValue& stride_v, const EValue& pad_v,
                           const std::array<int64_t, 2>& dilation, bool ceil_mode, const char* op) {
  Pool2dParams p;
  p.kernel = pair_arg(kernel_v, "kernel_size", op);
  p.stride = pair_arg(stride_v, "stride", op, p.kernel);
  p.pad = pair_arg(pad_v, "padding", op);
  p.dilation = dilation;
  constexpr int64_t kMaxParam = int64_t{1} << 31;  // keeps size arithmetic far from overflow
  for (int i = 0; i < 2; ++i) {
    ETNP_KERNEL_CHECK(p.kernel[i] < kMaxParam && p.stride[i] < kMaxParam && p.dilation[i] < kMaxParam,
                      op << ": kernel_size/stride/dilation too large");
    ETNP_KERNEL_CHECK(p.kernel[i] > 0, op << ": kernel_size must be positive");
    ETNP_KERNEL_CHECK(p.stride[i] > 0, op << ": stride must be positive");
    ETNP_KERNEL_CHECK(p.dilation[i] > 0, op << ": dilation must be positive");
    ETNP_KERNEL_CHECK(p.pad[i] >= 0 && p.pad[i] <= ((p.kernel[i] - 1) * p.dilation[i] + 1) / 2,
                      op << ": padding " << p.pad[i] << " must be non-negative and at most half the kernel size");
  }
  const int r = in.dim();
  p.oh = pooled_size(in.size(r - 2), p.kernel[0], p.pad[0], p.stride[0], p.dilation[0], ceil_mode);
  p.ow = pooled_size(in.size(r - 1), p.kernel[1], p.pad[1], p.stride[1], p.dilation[1], ceil_mode);
  ETNP_KERNEL_CHECK(p.oh >= 1 && p.ow >= 1, op << ": input of shape " << shape_str(in.sizes())
                                               << " is too small; calculated output size " << p.oh << "x" << p.ow);
  return p;
}

#ifdef ETNP_POOL_AVX2
/// Max pooling of 8 outputs at a time along one output row of a float32 plane with unit column strides and
/// dilation 1, for the outputs [ow_begin, ow_end) whose windows lie inside the row (the caller leaves the rest to
/// the scalar loop and passes a range whose vector reads stay inside the plane): rows [h0, h1) of `s` (`row_stride`
/// apart, `w` wide), kernel width `kw`, column stride `sw`, left padding `pw`. The scalar loop's arithmetic, in
/// lanes: start from -inf at the window's first element, in window order take a greater value or any NaN.
__attribute__((target("avx2,fma"))) void max_pool_row_avx2(const float* s, int64_t row_stride, int64_t w, int64_t h0,
                                                             int64_t h1, int64_t kw, int64_t sw, int64_t pw,
                                                             int64_t ow_begin, int64_t ow_end, float* d, int64_t* x) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i lane_cols = _mm256_mullo_epi32(lanes, _mm256_set1_epi32(static_cast<int>(sw)));
  for (int64_t ow = ow_begin; ow + 8 <= ow_end; ow += 8) {
    const int64_t w0 = ow * sw - pw;
    // Plane indices of lane j's first window element (row h0, column w0 + j * sw).
    const __m256i first = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(h0 * w + w0)), lane_cols);
    __m256 best = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    __m256i best_index = first;
    for (int64_t ih = h0; ih < h1; ++ih) {
      const float* row = s + ih * row_stride + w0;
      for (int64_t kx = 0; kx < kw; ++kx) {
        __m256 v;
        if (sw == 1) {
          v = _mm256_loadu_ps(row + kx);
        } else if (sw == 2) {
          const __m256 lo = _mm256_loadu_ps(row + kx), hi = _mm256_loadu_ps(row + kx + 8);
          v = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0x88)), 0xD8));
        } else {
          v = _mm256_i32gather_ps(row + kx, lane_cols, 4);
        }
        const __m256 take = _mm256_or_ps(_mm256_cmp_ps(v, best, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        const __m256i index = _mm256_add_epi32(first, _mm256_set1_epi32(static_cast<int>((ih - h0) * w + kx)));
        best = _mm256_blendv_ps(best, v, take);
        best_index = _mm256_blendv_epi8(best_index, index, _mm256_castps_si256(take));
      }
    }
    _mm256_storeu_ps(d + ow, best);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(x + ow), _mm256_cvtepi32_epi64(_mm256_castsi256_si128(best_index)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(x + ow + 4),
                        _mm256_cvtepi32_epi64(_mm256_extracti128_si256(best_index, 1)));
  }
}

/// Max pooling of a whole float32 plane through a table of its windows, 8 output pixels at a time whatever their
/// rows: for the small maps of a network's later layers, whose rows are too short for max_pool_row_avx2. `offsets`:
/// per block of 8 pixels, per tap of the window (row-major), the 8 pixels' input offsets row * w + col;
/// `first`: per block, the offsets of the windows' first elements (the index a window of -inf reports).
/// Contiguous planes in and out. The 8 values of a tap are loaded one by one: AVX2's gather took about 40
/// cycles on a Zen 1, 5 per tap.
__attribute__((target("avx2,fma"))) void max_pool_plane_avx2(const float* s, const int32_t* offsets,
                                                               const int32_t* first, int64_t taps, int64_t pixels,
                                                               float* d, int64_t* x) {
  for (int64_t p0 = 0; p0 < pixels; p0 += 8) {
    const int32_t* block = offsets + p0 * taps;
    __m256 best = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    __m256i best_index = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(first + p0));
    for (int64_t t = 0; t < taps; ++t) {
      const int32_t* o = block + t * 8;
      const __m256i at = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(o));
      const __m256 v = _mm256_setr_ps(s[o[0]], s[o[1]], s[o[2]], s[o[3]], s[o[4]], s[o[5]], s[o[6]], s[o[7]]);
      const __m256 take = _mm256_or_ps(_mm256_cmp_ps(v, best, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      best = _mm256_blendv_ps(best, v, take);
      best_index = _mm256_blendv_epi8(best_index, at, _mm256_castps_si256(take));
    }
    alignas(32) float values[8];
    alignas(32) int64_t indices[8];
    _mm256_store_ps(values, best);
    _mm256_store_si256(reinterpret_cast<__m256i*>(indices), _mm256_cvtepi32_epi64(_mm256_castsi256_si128(best_index)));
    _mm256_store_si256(reinterpret_cast<__m256i*>(indices + 4),
                       _mm256_cvtepi32_epi64(_mm256_extracti128_si256(best_index, 1)));
    const int64_t lanes = std::min<int64_t>(8, pixels - p0);
    std::copy(values, values + lanes, d + p0);
    std::copy(indices, indices + lanes, x + p0);
  }
}

/// The window table of max_pool_plane_avx2 for an h x w input, in `table` (resized): blocks of 8 output pixels x
/// taps x 8 offsets, then one first offset per pixel (the pixel count rounded up to 8). A tap outside the input
/// (padding, ceil mode) repeats the window's tap before it (its first inside tap, for those before that): a value
/// seen again changes neither the maximum nor its index, NaN included (it is then the last NaN seen). Pixels past
/// the last read offset 0.
void max_pool_window_table(const Pool2dParams& p, int64_t h, int64_t w, std::vector<int32_t>& table) {
  const int64_t taps = p.kernel[0] * p.kernel[1], pixels = p.oh * p.ow, padded = (pixels + 7) / 8 * 8;
  table.assign(static_cast<size_t>(padded * taps + padded), 0);
  int32_t* first = table.data() + padded * taps;
  for (int64_t px = 0; px < pixels; ++px) {
    const int64_t oy = px / p.ow, ox = px % p.ow;
    int32_t* lane = table.data() + (px / 8) * taps * 8 + px % 8;
    first[px] = -1;
    int64_t leading = 0;  // taps before the first inside one
    for (int64_t ky = 0; ky < p.kernel[0]; ++ky) {
      for (int64_t kx = 0; kx < p.kernel[1]; ++kx) {
        const int64_t tap = ky * p.kernel[1] + kx;
        const int64_t iy = oy * p.stride[0] - p.pad[0] + ky * p.dilation[0];
        const int64_t ix = ox * p.stride[1] - p.pad[1] + kx * p.dilation[1];
        if (iy < 0 || iy >= h || ix < 0 || ix >= w) {
          if (first[px] < 0) {
            ++leading;
          } else {
            lane[tap * 8] = lane[(tap - 1) * 8];
          }
          continue;
        }
        lane[tap * 8] = static_cast<int32_t>(iy * w + ix);
        if (first[px] < 0) first[px] = lane[tap * 8];
      }
    }
    for (int64_t tap = 0; tap < leading; ++tap) lane[tap * 8] = first[px];
  }
}

/// Whether a float32 max pooling runs through the window table: rows under 32 outputs (the row loop would leave a
/// scalar tail per row, whose compare-and-branch per tap mispredicts about every other time: squeezenet's 15-output
/// rows have 14 in it), planes contiguous in and out, a table of at most 64 Ki offsets.
bool max_pool_by_table(const Pool2dParams& p, const Planes& in, const Planes& out, const Planes& indices) {
  return has_avx2_fma() && p.ow < 32 && (p.oh * p.ow + 8) * (p.kernel[0] * p.kernel[1] + 1) <= (1 << 16) &&
         in.h * in.w < (int64_t{1} << 31) &&  // int32 offsets
         in.stride_w == 1 && in.stride_h == in.w && out.stride_w == 1 && out.stride_h == p.ow &&
         indices.stride_w == 1 && indices.stride_h == p.ow;
}

#endif  // ETNP_POOL_AVX2

/// The larger of `best` and `v` by ATen's max pooling rule (a greater value or any NaN takes over).
inline float max_pool_take(float best, float v) { return (v > best || v != v) ? v : best; }

/// One output pixel of an NHWC max pooling, portably (NEON's four lanes on aarch64): dst[0, c) = each channel's
/// maximum over the window's taps [h0, h1) x [w0, w1) (steps dh, dw) in ATen's order; `row` and `pixel` floats
/// between input rows and pixels.
void max_pool_pixel_nhwc(const float* in, int64_t row, int64_t pixel, int64_t c, int64_t h0, int64_t h1, int64_t dh,
                         int64_t w0, int64_t w1, int64_t dw, float* dst) {
  int64_t k = 0;
#if defined(__aarch64__)
  for (; k + 4 <= c; k += 4) {
    float32x4_t best = vdupq_n_f32(-std::numeric_limits<float>::infinity());
    for (int64_t ih = h0; ih < h1; ih += dh) {
      for (int64_t iw = w0; iw < w1; iw += dw) {
        const float32x4_t v = vld1q_f32(in + ih * row + iw * pixel + k);
        best = vbslq_f32(vorrq_u32(vcgtq_f32(v, best), vmvnq_u32(vceqq_f32(v, v))), v, best);
      }
    }
    vst1q_f32(dst + k, best);
  }
#endif
  for (; k < c; ++k) {
    float best = -std::numeric_limits<float>::infinity();
    for (int64_t ih = h0; ih < h1; ih += dh) {
      for (int64_t iw = w0; iw < w1; iw += dw) best = max_pool_take(best, in[ih * row + iw * pixel + k]);
    }
    dst[k] = best;
  }
}

#ifdef ETNP_POOL_AVX2
/// The same, 8 channels at a time with AVX2.
__attribute__((target("avx2,fma"))) void max_pool_pixel_nhwc_avx2(const float* in, int64_t row, int64_t c,
                                                                    int64_t h0, int64_t h1, int64_t dh, int64_t w0,
                                                                    int64_t w1, int64_t dw, float* dst) {
  int64_t k = 0;
  for (; k + 8 <= c; k += 8) {
    __m256 best = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    for (int64_t ih = h0; ih < h1; ih += dh) {
      for (int64_t iw = w0; iw < w1; iw += dw) {
        const __m256 v = _mm256_loadu_ps(in + ih * row + iw * c + k);
        best = _mm256_blendv_ps(best, v,
                                _mm256_or_ps(_mm256_cmp_ps(v, best, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
      }
    }
    _mm256_storeu_ps(dst + k, best);
  }
  if (k < c) max_pool_pixel_nhwc(in + k, row, c, c - k, h0, h1, dh, w0, w1, dw, dst + k);
}
#endif

/// Max pooling of a 4-D float32 tensor whose bytes are NHWC (paired at load): the values only, the indices left
/// unwritten (the load pairs a max pooling only where nothing reads them).
void max_pool_nhwc(KernelContext& ctx, const float* in, float* out, int64_t n, int64_t c, int64_t h, int64_t w,
                   const Pool2dParams& p) {
  for_planes(ctx, n * p.oh, p.ow * p.kernel[0] * p.kernel[1] * c, [&](int64_t r) {
    const int64_t b = r / p.oh, oh = r % p.oh;
    int64_t h0 = oh * p.stride[0] - p.pad[0];
    const int64_t h1 = std::min(h0 + (p.kernel[0] - 1) * p.dilation[0] + 1, h);
    while (h0 < 0) h0 += p.dilation[0];
    const float* image = in + b * h * w * c;
    for (int64_t ow = 0; ow < p.ow; ++ow) {
      int64_t w0 = ow * p.stride[1] - p.pad[1];
      const int64_t w1 = std::min(w0 + (p.kernel[1] - 1) * p.dilation[1] + 1, w);
      while (w0 < 0) w0 += p.dilation[1];
      float* dst = out + (r * p.ow + ow) * c;
#ifdef ETNP_POOL_AVX2
      if (has_avx2_fma()) {
        max_pool_pixel_nhwc_avx2(image, w * c, c, h0, h1, p.dilation[0], w0, w1, p.dilation[1], dst);
        continue;
      }
#endif
      max_pool_pixel_nhwc(image, w * c, c, c, h0, h1, p.dilation[0], w0, w1, p.dilation[1], dst);
    }
  });
}

/// What a float32 max pooling keeps from the load: the window table of the AVX2 loop for the serialized input
/// size (empty where that loop does not take it; a call on another size builds its own), and for a static 4-D
/// input the NHWC pairing (KernelState::keeps_channels_last: the input, argument 0, and the values, argument 6).
struct MaxPoolState final : KernelState {
  Pool2dParams params{};
  int64_t n = 0, c = 0, h = 0, w = 0;
  std::vector<int32_t> table;
  bool four_d = false, nhwc = false;
  size_t bytes() const override { return table.size() * sizeof(int32_t); }
  bool fits(const Pool2dParams& p, int64_t in_h, int64_t in_w) const { return in_h == h && in_w == w && p == params; }
  ChannelsLastArgs keeps_channels_last() const override {
    if (!four_d) return {};
    return {{0}, {6}, {}};
  }
  void use_channels_last(bool input, bool output) override { nhwc = input && output; }
};

std::unique_ptr<KernelState> prepare_max_pool(KernelArgs args) {
  constexpr const char* op = "aten::max_pool2d_with_indices.out";
  // Arguments the call would reject are its to report, with its context: here they only mean "no state".
  try {
    if (args.size() != 9) return nullptr;
    const Tensor& in = args[0]->to_tensor();
    const Tensor& out = args[6]->to_tensor();
    const Tensor& indices = args[7]->to_tensor();
    if (in.dtype() != ScalarType::Float || (in.dim() != 3 && in.dim() != 4) || !in.is_contiguous_order() ||
        !out.is_contiguous_order() || !indices.is_contiguous_order() || in.numel() == 0) {
      return nullptr;
    }
    const auto dilation = pair_arg(*args[4], "dilation", op);
    const Pool2dParams p = pool2d_params(in, *args[1], *args[2], *args[3], dilation, args[5]->to_bool(), op);
    const Planes pi = planes_of(in);
    auto state = std::make_unique<MaxPoolState>();
    state->params = p;
    state->n = in.dim() == 4 ? in.size(0) : 1;
    state->c = pi.channels;
    state->h = pi.h;
    state->w = pi.w;
    state->four_d = in.dim() == 4 && in.dynamism() == ShapeDynamism::Static;
#ifdef ETNP_POOL_AVX2
    // The call's outputs are contiguous tensors of the pooled size: their planes.
    Planes po = pi;
    po.stride_h = p.ow;
    if (max_pool_by_table(p, pi, po, po)) max_pool_window_table(p, pi.h, pi.w, state->table);
#endif
    if (state->table.empty() && !state->four_d) return nullptr;
    return state;
  } catch (const Error&) {
    return nullptr;
  }
}

// aten::max_pool2d_with_indices.out(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0,
//   int[2] dilation=1, bool ceil_mode=False, *, Tensor(a!) out, Tensor(b!) indices)
void max_pool2d_with_indices_out(KernelContext& ctx, KernelArgs args) {
  constexpr const char* op = "aten::max_pool2d_with_indices.out";
  check_num_args(args, 9, op);
  const Tensor& in = args[0]->to_tensor();
  Tensor& out = args[6]->to_tensor();
  Tensor& indices = args[7]->to_tensor();
  check_pool_input(in, op);
  const auto dilation = pair_arg(*args[4], "dilation", op);
  const Pool2dParams p = pool2d_params(in, *args[1], *args[2], *args[3], dilation, args[5]->to_bool(), op);
  check_same_dtype(in, out, op);
  ETNP_KERNEL_CHECK(indices.dtype() == ScalarType::Long, op << ": indices must be int64");
  const auto shape = with_spatial(in, p.oh, p.ow);
  resize_output(out, shape, op);
  resize_output(indices, shape, op);
  const auto* state = static_cast<const MaxPoolState*>(ctx.state());  // prepare_max_pool's, or null
  if (state != nullptr && state->nhwc) {
    // What the load paired holds NHWC bytes: no other loop may read or write them.
    ETNP_KERNEL_CHECK(in.dim() == 4 && in.dtype() == ScalarType::Float && in.size(0) == state->n &&
                          in.size(1) == state->c && state->fits(p, in.size(2), in.size(3)),
                      op << ": a max pooling paired with its neighbours in NHWC order no longer fits its input of shape "
                         << shape_str(in.sizes()));
    return max_pool_nhwc(ctx, in.data_as<const float>(), out.data_as<float>(), state->n, state->c, state->h,
                         state->w, p);
  }
  const Planes pi = planes_of(in), po = planes_of(out), px = planes_of(indices);
  dispatch<kRealTypes>(in.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using Acc = OpMath<T>;
    const T* src = in.data_as<const T>();
    T* dst = out.data_as<T>();
    int64_t* idx = indices.data_as<int64_t>();
    // Outputs [vec_begin, vec_end) of a row have every window column inside the input row (and, for stride 2,
    // the float after it): the vector loop takes them where the planes' columns are contiguous.
    int64_t vec_begin = 0;
    [[maybe_unused]] int64_t vec_end = 0;  // only the AVX2 build has the vector loops
#ifdef ETNP_POOL_AVX2
    if constexpr (std::is_same_v<T, float>) {
      const bool vector = has_avx2_fma() && p.dilation[0] == 1 && p.dilation[1] == 1 && pi.stride_w == 1 &&
                          po.stride_w == 1 && px.stride_w == 1 && pi.h * pi.w < (int64_t{1} << 31);
      if (vector) {
        vec_begin = (p.pad[1] + p.stride[1] - 1) / p.stride[1];
        // Output o's window is columns o * stride - pad + [0, kernel); the stride-2 loads read one float past it.
        const int64_t last = pi.w - (p.stride[1] == 2 ? 1 : 0) + p.pad[1] - p.kernel[1];
        vec_end = last >= 0 ? std::min(p.ow, last / p.stride[1] + 1) : 0;
        vec_end = std::max(vec_end, vec_begin);
      }
    }
#endif
    [[maybe_unused]] const int32_t* table = nullptr;
    std::vector<int32_t> own_table;
#ifdef ETNP_POOL_AVX2
    if constexpr (std::is_same_v<T, float>) {
      if (max_pool_by_table(p, pi, po, px)) {
        if (state != nullptr && !state->table.empty() && state->fits(p, pi.h, pi.w)) {
          table = state->table.data();
        } else {
          max_pool_window_table(p, pi.h, pi.w, own_table);
          table = own_table.data();
        }
      }
    }
#endif
    for_planes(ctx, pi.count, p.oh * p.ow * p.kernel[0] * p.kernel[1], [&](int64_t plane) {
      const T* s = src + pi.base(plane);
      T* d = dst + po.base(plane);
      int64_t* x = idx + px.base(plane);
#ifdef ETNP_POOL_AVX2
      if constexpr (std::is_same_v<T, float>) {
        if (table != nullptr) {
          const int64_t taps = p.kernel[0] * p.kernel[1], pixels = p.oh * p.ow;
          max_pool_plane_avx2(s, table, table + (pixels + 7) / 8 * 8 * taps, taps, pixels, d, x);
          return;
        }
      }
#endif
      for (int64_t oh = 0; oh < p.oh; ++oh) {
        int64_t h0 = oh * p.stride[0] - p.pad[0];
        const int64_t h1 = std::min(h0 + (p.kernel[0] - 1) * p.dilation[0] + 1, pi.h);
        while (h0 < 0) h0 += p.dilation[0];
        int64_t vec_done = vec_begin;
#ifdef ETNP_POOL_AVX2
        if constexpr (std::is_same_v<T, float>) {
          if (vec_end - vec_begin >= 8) {
            max_pool_row_avx2(s, pi.stride_h, pi.w, h0, h1, p.kernel[1], p.stride[1], p.pad[1], vec_begin, vec_end,
                              d + oh * po.stride_h, x + oh * px.stride_h);
            vec_done = vec_begin + (vec_end - vec_begin) / 8 * 8;
            if (vec_done < vec_end) {  // the last 8, overlapping the blocks before: the same values again
              max_pool_row_avx2(s, pi.stride_h, pi.w, h0, h1, p.kernel[1], p.stride[1], p.pad[1], vec_end - 8,
                                vec_end, d + oh * po.stride_h, x + oh * px.stride_h);
              vec_done = vec_end;
            }
          }
        }
#endif
        for (int64_t ow = 0; ow < p.ow; ++ow) {
          if (ow == vec_begin && vec_done > vec_begin) {
            ow = vec_done - 1;
            continue;
          }
          int64_t w0 = ow * p.stride[1] - p.pad[1];
          const int64_t w1 = std::min(w0 + (p.kernel[1] - 1) * p.dilation[1] + 1, pi.w);
          while (w0 < 0) w0 += p.dilation[1];
          // As ATen: start from -inf at the first window element; a NaN always takes over.
          int64_t best_index = h0 * pi.w + w0;
          Acc best = std::numeric_limits<Acc>::has_infinity ? -std::numeric_limits<Acc>::infinity()
                                                             : std::numeric_limits<Acc>::lowest();
          for (int64_t ih = h0; ih < h1; ih += p.dilation[0]) {
            for (int64_t iw = w0; iw < w1; iw += p.dilation[1]) {
              const Acc v = static_cast<Acc>(s[ih * pi.stride_h + iw * pi.stride_w]);
              // Selects, not a branch: on real data whether a tap takes over is a coin toss.
              bool take = v > best;
              if constexpr (std::is_floating_point_v<Acc>) take = take | (v != v);
              best = take ? v : best;
              best_index = take ? ih * pi.w + iw : best_index;
            }
          }
          d[oh * po.stride_h + ow * po.stride_w] = convert<T>(best);
          x[oh * px.stride_h + ow * px.stride_w] = best_index;
        }
      }
    });
  });
}

// aten::avg_pool2d.out(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, bool ceil_mode=False,
//   bool count_include_pad=True, int? divisor_override=None, *, Tensor(a!) out)
void avg_pool2d_out(KernelContext& ctx, KernelArgs args) {
  constexpr const char* op = "aten::avg_pool2d.out";
  check_num_args(args, 9, op);
  const Tensor& in = args[0]->to_tensor();
  const bool ceil_mode = args[4]->to_bool();
  const bool count_include_pad = args[5]->to_bool();
  const std::optional<int64_t> divisor =
      args[6]->is_none() ? std::nullopt : std::optional<int64_t>(args[6]->to_int());
  Tensor& out = args[7]->to_tensor();
  check_pool_input(in, op);
  ETNP_KERNEL_CHECK(!divisor || *divisor != 0, op << ": divisor must be not zero");
  const Pool2dParams p = pool2d_params(in, *args[1], *args[2], *args[3], {1, 1}, ceil_mode, op);
  check_same_dtype(in, out, op);
  resize_output(out, with_spatial(in, p.oh, p.ow), op);
  const Planes pi = planes_of(in), po = planes_of(out);
  dispatch<kRealTypes>(in.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    // Integers sum in int64 and divide as integers (ATen's accumulate type).
    using Acc = std::conditional_t<std::is_integral_v<T>, int64_t, OpMath<T>>;
    const T* src = in.data_as<const T>();
    T* dst = out.data_as<T>();
    for_planes(ctx, pi.count, p.oh * p.ow * p.kernel[0] * p.kernel[1], [&](int64_t plane) {
      const T* s = src + pi.base(plane);
      T* d = dst + po.base(plane);
      for (int64_t oh = 0; oh < p.oh; ++oh) {
        for (int64_t ow = 0; ow < p.ow; ++ow) {
          int64_t h0 = oh * p.stride[0] - p.pad[0], w0 = ow * p.stride[1] - p.pad[1];
          int64_t h1 = std::min(h0 + p.kernel[0], pi.h + p.pad[0]);
          int64_t w1 = std::min(w0 + p.kernel[1], pi.w + p.pad[1]);
          const int64_t pool_size = (h1 - h0) * (w1 - w0);
          h0 = std::max<int64_t>(h0, 0);
          w0 = std::max<int64_t>(w0, 0);
          h1 = std::min(h1, pi.h);
          w1 = std::min(w1, pi.w);
          T& o = d[oh * po.stride_h + ow * po.stride_w];
          if (h0 >= h1 || w0 >= w1) {
            o = convert<T>(0);
            continue;
          }
          Acc sum = 0;
          for (int64_t ih = h0; ih < h1; ++ih) {
            for (int64_t iw = w0; iw < w1; ++iw) {
              if constexpr (std::is_integral_v<T>) {
                sum = static_cast<Acc>(static_cast<uint64_t>(sum) + static_cast<uint64_t>(s[ih * pi.stride_h + iw * pi.stride_w]));
              } else {
                sum += static_cast<Acc>(s[ih * pi.stride_h + iw * pi.stride_w]);
              }
            }
          }
          const int64_t factor = divisor ? *divisor : count_include_pad ? pool_size : (h1 - h0) * (w1 - w0);
          if constexpr (std::is_integral_v<T>) {
            // int64 division can only overflow for INT64_MIN / -1; wrap like two's complement instead.
            o = static_cast<T>(factor == -1 ? static_cast<int64_t>(0 - static_cast<uint64_t>(sum)) : sum / factor);
          } else {
            o = convert<T>(sum / static_cast<Acc>(factor));
          }
        }
      }
    });
  });
}

// aten::_adaptive_avg_pool2d.out(Tensor self, SymInt[2] output_size, *, Tensor(a!) out)
void adaptive_avg_pool2d_out(KernelContext& ctx, KernelArgs args) {
  constexpr const char* op = "aten::_adaptive_avg_pool2d.out";
  check_num_args(args, 4, op);
  const Tensor& in = args[0]->to_tensor();
  const std::vector<int64_t> size = args[1]->to_int_list().to_vector();
  Tensor& out = args[2]->to_tensor();
  check_pool_input(in, op);
  ETNP_KERNEL_CHECK(size.size() == 2, op << ": output_size must have 2 entries");
  ETNP_KERNEL_CHECK(size[0] >= 0 && size[1] >= 0, op << ": output_size must be non-negative");
  check_same_dtype(in, out, op);
  resize_output(out, with_spatial(in, size[0], size[1]), op);
  const Planes pi = planes_of(in), po = planes_of(out);
  const int64_t oh_n = size[0], ow_n = size[1];
  dispatch<kFloats | kHalfs>(in.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using Acc = OpMath<T>;
    const T* src = in.data_as<const T>();
    T* dst = out.data_as<T>();
    for_planes(ctx, pi.count, pi.h * pi.w, [&](int64_t plane) {
      const T* s = src + pi.base(plane);
      T* d = dst + po.base(plane);
      for (int64_t oh = 0; oh < oh_n; ++oh) {
        const int64_t h0 = oh * pi.h / oh_n, h1 = ((oh + 1) * pi.h + oh_n - 1) / oh_n;
        for (int64_t ow = 0; ow < ow_n; ++ow) {
          const int64_t w0 = ow * pi.w / ow_n, w1 = ((ow + 1) * pi.w + ow_n - 1) / ow_n;
          Acc sum = 0;
          for (int64_t ih = h0; ih < h1; ++ih) {
            for (int64_t iw = w0; iw < w1; ++iw) sum += static_cast<Acc>(s[ih * pi.stride_h + iw * pi.stride_w]);
          }
          d[oh * po.stride_h + ow * po.stride_w] = convert<T>(sum / static_cast<Acc>((h1 - h0) * (w1 - w0)));
        }
      }
    });
  });
}

// ---------------------------------------------------------------------------------------------------------
// Upsampling (ATen's upsample_*2d.vec: exactly one of output_size and scale_factors).

struct UpsampleSize {
  int64_t oh, ow;
  std::optional<double> scale_h, scale_w;
};

UpsampleSize upsample_size(const Tensor& in, const EValue& size_v, const EValue& scales_v, const char* op) {
  ETNP_KERNEL_CHECK(in.dim() == 4, op << ": expected a 4-D input, got shape " << shape_str(in.sizes()));
  const bool has_size = !size_v.is_none(), has_scales = !scales_v.is_none();
  ETNP_KERNEL_CHECK(has_size != has_scales, op << ": must specify exactly one of output_size and scale_factors");
  UpsampleSize u{};
  if (has_size) {
    const std::vector<int64_t> size = size_v.to_int_list().to_vector();
    ETNP_KERNEL_CHECK(size.size() == 2, op << ": output_size must have 2 entries, got " << size.size());
    u.oh = size[0];
    u.ow = size[1];
  } else {
    const std::span<const double> scales = scales_v.to_double_list();
    ETNP_KERNEL_CHECK(scales.size() == 2, op << ": scale_factors must have 2 entries, got " << scales.size());
    for (size_t i = 0; i < 2; ++i) {
      ETNP_KERNEL_CHECK(std::isfinite(scales[i]) && scales[i] > 0 && static_cast<double>(in.size(2 + i)) * scales[i] < 1e15,
                        op << ": scale factors must be positive and finite");
    }
    u.oh = static_cast<int64_t>(static_cast<double>(in.size(2)) * scales[0]);
    u.ow = static_cast<int64_t>(static_cast<double>(in.size(3)) * scales[1]);
    u.scale_h = scales[0];
    u.scale_w = scales[1];
  }
  ETNP_KERNEL_CHECK(in.size(2) > 0 && in.size(3) > 0 && u.oh > 0 && u.ow > 0,
                    op << ": input and output sizes should be greater than 0, got input " << shape_str(in.sizes())
                       << " and output " << u.oh << "x" << u.ow);
  return u;
}

/// Source-per-destination ratio (ATen's area_pixel_compute_scale / compute_scales_value), in float.
float pixel_scale(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  if (align_corners) return out > 1 ? static_cast<float>(in - 1) / static_cast<float>(out - 1) : 0.0f;
  if (scale && *scale > 0) return static_cast<float>(1.0 / *scale);
  return static_cast<float>(in) / static_cast<float>(out);
}

struct LinearTap {
  int64_t i0, i1;
  float l0, l1;
};

std::vector<LinearTap> linear_taps(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  std::vector<LinearTap> taps(static_cast<size_t>(out));
  const float ratio = pixel_scale(in, out, align_corners, scale);
  for (int64_t o = 0; o < out; ++o) {
    LinearTap& t = taps[static_cast<size_t>(o)];
    if (in == out) {
      t = {o, o, 1.0f, 0.0f};
      continue;
    }
    float real = align_corners ? ratio * static_cast<float>(o) : ratio * (static_cast<float>(o) + 0.5f) - 0.5f;
    if (!align_corners && real < 0.0f) real = 0.0f;
    const int64_t i0 = std::min(static_cast<int64_t>(std::floor(real)), in - 1);
    const float l1 = std::min(std::max(real - static_cast<float>(i0), 0.0f), 1.0f);
    t = {i0, i0 + (i0 < in - 1 ? 1 : 0), 1.0f - l1, l1};
  }
  return taps;
}

// aten::upsample_bilinear2d.vec_out(Tensor input, SymInt[]? output_size, bool align_corners,
//   float[]? scale_factors, *, Tensor(a!) out)
void upsample_bilinear2d_vec_out(KernelContext& ctx, KernelArgs args) {
  constexpr const char* op = "aten::upsample_bilinear2d.vec_out";
  check_num_args(args, 6, op);
  const Tensor& in = args[0]->to_tensor();
  const bool align_corners = args[2]->to_bool();
  Tensor& out = args[4]->to_tensor();
  const UpsampleSize u = upsample_size(in, *args[1], *args[3], op);
  check_same_dtype(in, out, op);
  resize_output(out, with_spatial(in, u.oh, u.ow), op);
  const std::vector<LinearTap> th = linear_taps(in.size(2), u.oh, align_corners, u.scale_h);
  const std::vector<LinearTap> tw = linear_taps(in.size(3), u.ow, align_corners, u.scale_w);
  const Planes pi = planes_of(in), po = planes_of(out);
  dispatch<kFloats | kHalfs>(in.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using Acc = OpMath<T>;
    const T* src = in.data_as<const T>();
    T* dst = out.data_as<T>();
    for_planes(ctx, pi.count, u.oh * u.ow * 4, [&](int64_t plane) {
      const T* s = src + pi.base(plane);
      T* d = dst + po.base(plane);
      for (int64_t oh = 0; oh < u.oh; ++oh) {
        const LinearTap& h = th[static_cast<size_t>(oh)];
        const T* r0 = s + h.i0 * pi.stride_h;
        const T* r1 = s + h.i1 * pi.stride_h;
        for (int64_t ow = 0; ow < u.ow; ++ow) {
          const LinearTap& w = tw[static_cast<size_t>(ow)];
          const Acc v00 = static_cast<Acc>(r0[w.i0 * pi.stride_w]), v01 = static_cast<Acc>(r0[w.i1 * pi.stride_w]);
          const Acc v10 = static_cast<Acc>(r1[w.i0 * pi.stride_w]), v11 = static_cast<Acc>(r1[w.i1 * pi.stride_w]);
          const Acc wl0 = static_cast<Acc>(w.l0), wl1 = static_cast<Acc>(w.l1);
          const Acc v = static_cast<Acc>(h.l0) * (wl0 * v00 + wl1 * v01) + static_cast<Acc>(h.l1) * (wl0 * v10 + wl1 * v11);
          d[oh * po.stride_h + ow * po.stride_w] = convert<T>(v);
        }
      }
    });
  });
}

/// ATen's nearest_idx: identity and exact 2x fast cases, otherwise floor(dst * scale) clamped.
std::vector<int64_t> nearest_taps(int64_t in, int64_t out, std::optional<double> scale) {
  std::vector<int64_t> taps(static_cast<size_t>(out));
  const float s = pixel_scale(in, out, false, scale);
  for (int64_t o = 0; o < out; ++o) {
    int64_t i;
    if (out == in) {
      i = o;
    } else if (out == 2 * in) {
      i = o >> 1;
    } else {
      i = std::min(static_cast<int64_t>(std::floor(static_cast<float>(o) * s)), in - 1);
    }
    taps[static_cast<size_t>(o)] = i;
  }
  return taps;
}

// aten::upsample_nearest2d.vec_out(Tensor input, SymInt[]? output_size, float[]? scale_factors, *, Tensor(a!) out)
void upsample_nearest2d_vec_out(KernelContext& ctx, KernelArgs args) {
  constexpr const char* op = "aten::upsample_nearest2d.vec_out";
  check_num_args(args, 5, op);
  const Tensor& in = args[0]->to_tensor();
  Tensor& out = args[3]->to_tensor();
  const UpsampleSize u = upsample_size(in, *args[1], *args[2], op);
  check_same_dtype(in, out, op);
  resize_output(out, with_spatial(in, u.oh, u.ow), op);
  const std::vector<int64_t> th = nearest_taps(in.size(2), u.oh, u.scale_h);
  const std::vector<int64_t> tw = nearest_taps(in.size(3), u.ow, u.scale_w);
  const Planes pi = planes_of(in), po = planes_of(out);
  dispatch(in.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* src = in.data_as<const T>();
    T* dst = out.data_as<T>();
    for_planes(ctx, pi.count, u.oh * u.ow, [&](int64_t plane) {
      const T* s = src + pi.base(plane);
      T* d = dst + po.base(plane);
      for (int64_t oh = 0; oh < u.oh; ++oh) {
        const T* row = s + th[static_cast<size_t>(oh)] * pi.stride_h;
        for (int64_t ow = 0; ow < u.ow; ++ow) {
          d[oh * po.stride_h + ow * po.stride_w] = row[tw[static_cast<size_t>(ow)] * pi.stride_w];
        }
      }
    });
  });
}

}  // namespace

void register_pool_kernels(KernelRegistry& registry) {
  registry.add("aten::max_pool2d_with_indices.out", 9, max_pool2d_with_indices_out, prepare_max_pool);
  registry.add("aten::avg_pool2d.out", 9, avg_pool2d_out);
  registry.add("aten::_adaptive_avg_pool2d.out", 4, adaptive_avg_pool2d_out);
  registry.add("aten::upsample_bilinear2d.vec_out", 6, upsample_bilinear2d_vec_out);
  registry.add("aten::upsample_nearest2d.vec_out", 5, upsample_nearest2d_vec_out);
}

}  // namespace etnp::kernels
