// aten::convolution.out for 1-D and 2-D inputs: stride, padding, dilation, groups, transposed convolution with
// output_padding, optional bias. Float32 with constant weights runs on weights packed at load for the NHWC
// engines (NhwcConv below), except on maps smaller than a GEMM tile with large weights (runs_as_dots), which run
// as dot products of each pixel's patch with the weights where they lie. Other contiguous float32 runs as GEMM (1x1
// kernels read the input directly, others through an im2col buffer) or, for depthwise convolutions, as a direct
// row-vectorized loop; everything else
// (other dtypes) uses a direct strided loop that accumulates in the op-math type. Transposed float32 runs as
// GEMM + col2im. etnp::convolution_affine_clamp.out is the float32 path with a per-channel scale and a clamp
// in its output pass: what the runtime makes of a convolution, batch norm and activation at load.
#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "etnp/threadpool.h"
#include "compute/conv_indirect.h"
#include "compute/conv_rows.h"
#include "compute/copy_util.h"
#include "compute/depthwise.h"
#include "compute/dot_rows.h"
#include "compute/gemm.h"
#include "compute/gemm_kernel.h"
#include "compute/packed_gemm.h"
#include "compute/parallel.h"
#include "compute/weight_cache.h"
#include "core/cpu_features.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ETNP_CONV_AVX2 1
#elif defined(__aarch64__)
#include <arm_neon.h>
#define ETNP_CONV_NEON 1
#endif
#include "kernels/kernel_util.h"
#include "kernels/register.h"

namespace etnp::kernels {
namespace {

constexpr const char* kConvOp = "aten::convolution.out";

/// A convolution described as 2-D (1-D convolutions get H = KH = 1).
struct ConvShape {
  int64_t n, c_in, h, w;
  int64_t c_out, kh, kw;
  int64_t oh, ow;
  int64_t sh, sw, ph, pw, dh, dw;
  int64_t groups;
  int64_t cin_g, cout_g;  // channels per group
  bool transposed;
};

/// What etnp::convolution_affine_clamp.out does to each output on its way out: times scale[channel] (when
/// given, then the bias is added after it), clamped to [min, max] (aten::clamp's arithmetic: NaN stays).
struct ConvEpilogue {
  const float* scale = nullptr;
  float min = -std::numeric_limits<float>::infinity();
  float max = std::numeric_limits<float>::infinity();
  bool clamps() const { return compute::clamps_anything(min, max); }
  bool active() const { return scale != nullptr || clamps(); }
  /// Output channel `c`'s plane of `count` floats, computed without its bias when there is a scale.
  void finish(float* plane, int64_t count, int64_t c, const float* bias) const {
    compute::GemmRowEpilogue ep;
    if (scale != nullptr) {
      ep.scale = scale + c;
      ep.bias = bias != nullptr ? bias + c : nullptr;
    }
    ep.clamp = clamps();
    ep.lo = min;
    ep.hi = max;
    compute::gemm_row_epilogue(plane, 0, 1, static_cast<size_t>(count), ep);
  }
};

/// Element strides of a rank-3 or rank-4 tensor as [n, c, h, w] (h stride 0 for rank 3).
struct Strides4 {
  int64_t n, c, h, w;
};

Strides4 strides4(const Tensor& t) {
  if (t.dim() == 3) return {t.stride(0), t.stride(1), 0, t.stride(2)};
  return {t.stride(0), t.stride(1), t.stride(2), t.stride(3)};
}

/// Reads an int[] argument with `spatial` (1 or 2) entries (a single entry is repeated, as ATen does); a fixed
/// pair, not a vector: four of these a call were a heap allocation each.
std::array<int64_t, 2> spatial_list(const EValue& v, size_t spatial, const char* name) {
  const IntListRef list = v.to_int_list();
  ETNP_KERNEL_CHECK(list.size() == spatial || list.size() == 1, kConvOp << ": " << name << " must have " << spatial
                                                                        << " entries, got " << list.size());
  return {list[0], list[list.size() == 1 ? 0 : spatial - 1]};
}

ConvShape conv_shape(const Tensor& input, const Tensor& weight, const Tensor* bias, KernelArgs args) {
  const int rank = input.dim();
  ETNP_KERNEL_CHECK(rank == 3 || rank == 4, kConvOp << ": only 1-D and 2-D convolutions are supported (input of shape "
                                                    << shape_str(input.sizes()) << ")");
  ETNP_KERNEL_CHECK(weight.dim() == rank, kConvOp << ": expected " << rank << "-D weight for " << rank
                                                  << "-D input, got weight of shape " << shape_str(weight.sizes()));
  const size_t spatial = static_cast<size_t>(rank - 2);
  const auto stride = spatial_list(*args[3], spatial, "stride");
  const auto padding = spatial_list(*args[4], spatial, "padding");
  const auto dilation = spatial_list(*args[5], spatial, "dilation");
  const bool transposed = args[6]->to_bool();
  const auto output_padding = spatial_list(*args[7], spatial, "output_padding");
  const int64_t groups = args[8]->to_int();
  ETNP_KERNEL_CHECK(groups > 0 && groups <= input.size(1) + weight.size(0),
                    kConvOp << ": groups must be positive and at most the channel count, got " << groups);
  // Bounds that keep every size computation far from int64 overflow on malformed programs.
  constexpr int64_t kMaxParam = int64_t{1} << 31;
  for (size_t i = 0; i < spatial; ++i) {
    ETNP_KERNEL_CHECK(stride[i] < kMaxParam && padding[i] < kMaxParam && dilation[i] < kMaxParam &&
                          output_padding[i] < kMaxParam,
                      kConvOp << ": stride/padding/dilation/output_padding too large");
    ETNP_KERNEL_CHECK(stride[i] > 0, kConvOp << ": stride must be positive");
    ETNP_KERNEL_CHECK(dilation[i] > 0, kConvOp << ": dilation must be positive");
    ETNP_KERNEL_CHECK(padding[i] >= 0, kConvOp << ": padding must be non-negative");
    ETNP_KERNEL_CHECK(output_padding[i] >= 0, kConvOp << ": output_padding must be non-negative");
    if (transposed) {
      ETNP_KERNEL_CHECK(output_padding[i] < stride[i] || output_padding[i] < dilation[i],
                        kConvOp << ": output padding must be smaller than either stride or dilation");
    }
  }

  ConvShape s{};
  s.transposed = transposed;
  s.groups = groups;
  s.n = input.size(0);
  s.c_in = input.size(1);
  const bool two_d = rank == 4;
  s.h = two_d ? input.size(2) : 1;
  s.w = input.size(rank - 1);
  s.kh = two_d ? weight.size(2) : 1;
  s.kw = weight.size(rank - 1);
  s.sh = two_d ? stride[0] : 1;
  s.sw = stride[spatial - 1];
  s.ph = two_d ? padding[0] : 0;
  s.pw = padding[spatial - 1];
  s.dh = two_d ? dilation[0] : 1;
  s.dw = dilation[spatial - 1];
  if (!transposed) {
    ETNP_KERNEL_CHECK(s.c_in == weight.size(1) * groups,
                      kConvOp << ": input of shape " << shape_str(input.sizes()) << " has " << s.c_in
                              << " channels, but weight of shape " << shape_str(weight.sizes()) << " with groups="
                              << groups << " expects " << weight.size(1) * groups);
    s.c_out = weight.size(0);
    ETNP_KERNEL_CHECK(s.c_out % groups == 0, kConvOp << ": out channels " << s.c_out << " not divisible by groups "
                                                     << groups);
    s.cin_g = weight.size(1);
    s.cout_g = s.c_out / groups;
    const int64_t eff_h = s.dh * (s.kh - 1) + 1, eff_w = s.dw * (s.kw - 1) + 1;
    ETNP_KERNEL_CHECK(s.h + 2 * s.ph >= eff_h && s.w + 2 * s.pw >= eff_w,
                      kConvOp << ": padded input of shape " << shape_str(input.sizes())
                              << " is smaller than the (dilated) kernel of shape " << shape_str(weight.sizes()));
    s.oh = (s.h + 2 * s.ph - eff_h) / s.sh + 1;
    s.ow = (s.w + 2 * s.pw - eff_w) / s.sw + 1;
  } else {
    ETNP_KERNEL_CHECK(s.c_in == weight.size(0), kConvOp << ": input of shape " << shape_str(input.sizes()) << " has "
                                                        << s.c_in << " channels, but transposed weight of shape "
                                                        << shape_str(weight.sizes()) << " expects " << weight.size(0));
    ETNP_KERNEL_CHECK(s.c_in % groups == 0, kConvOp << ": in channels " << s.c_in << " not divisible by groups "
                                                    << groups);
    s.cin_g = s.c_in / groups;
    s.cout_g = weight.size(1);
    s.c_out = s.cout_g * groups;
    const int64_t oph = two_d ? output_padding[0] : 0, opw = output_padding[spatial - 1];
    s.oh = (s.h - 1) * s.sh - 2 * s.ph + s.dh * (s.kh - 1) + oph + 1;
    s.ow = (s.w - 1) * s.sw - 2 * s.pw + s.dw * (s.kw - 1) + opw + 1;
    ETNP_KERNEL_CHECK(s.oh > 0 && s.ow > 0, kConvOp << ": transposed convolution output size is not positive");
  }
  if (bias != nullptr) {
    ETNP_KERNEL_CHECK(bias->dim() == 1 && bias->size(0) == s.c_out,
                      kConvOp << ": bias of shape " << shape_str(bias->sizes()) << " does not match " << s.c_out
                              << " output channels");
  }
  return s;
}

// ---------------------------------------------------------------------------------------------------------
// Direct strided convolution for any dtype and layout (and every transposed convolution).

template <typename T>
void conv_direct(const ConvShape& s, const Tensor& input, const Tensor& weight, const Tensor* bias, Tensor& out,
                 ThreadPool* pool) {
  using Acc = OpMath<T>;
  const T* in = input.data_as<const T>();
  const T* wt = weight.data_as<const T>();
  const T* bs = bias != nullptr ? bias->data_as<const T>() : nullptr;
  const int64_t bias_stride = bias != nullptr ? bias->stride(0) : 0;
  T* o = out.data_as<T>();
  const Strides4 si = strides4(input), sw = strides4(weight), so = strides4(out);
  auto plane = [&](int64_t idx) {
    const int64_t n = idx / s.c_out, oc = idx % s.c_out;
    const int64_t g = oc / s.cout_g, ocl = oc % s.cout_g;
    for (int64_t oh = 0; oh < s.oh; ++oh) {
      for (int64_t ow = 0; ow < s.ow; ++ow) {
        Acc acc = 0;
        for (int64_t icl = 0; icl < s.cin_g; ++icl) {
          const int64_t ic = g * s.cin_g + icl;
          const T* in_c = in + n * si.n + ic * si.c;
          // Weight layout: [c_out, cin_g, kh, kw], or [c_in, cout_g, kh, kw] when transposed.
          const T* w_c = s.transposed ? wt + ic * sw.n + ocl * sw.c : wt + oc * sw.n + icl * sw.c;
          for (int64_t kh = 0; kh < s.kh; ++kh) {
            int64_t ih;
            if (!s.transposed) {
              ih = oh * s.sh - s.ph + kh * s.dh;
            } else {
              const int64_t t = oh + s.ph - kh * s.dh;
              if (t < 0 || t % s.sh != 0) continue;
              ih = t / s.sh;
            }
            if (ih < 0 || ih >= s.h) continue;
            for (int64_t kw = 0; kw < s.kw; ++kw) {
              int64_t iw;
              if (!s.transposed) {
                iw = ow * s.sw - s.pw + kw * s.dw;
              } else {
                const int64_t t = ow + s.pw - kw * s.dw;
                if (t < 0 || t % s.sw != 0) continue;
                iw = t / s.sw;
              }
              if (iw < 0 || iw >= s.w) continue;
              acc += static_cast<Acc>(in_c[ih * si.h + iw * si.w]) * static_cast<Acc>(w_c[kh * sw.h + kw * sw.w]);
            }
          }
        }
        if (bs != nullptr) acc += static_cast<Acc>(bs[oc * bias_stride]);
        o[n * so.n + oc * so.c + oh * so.h + ow * so.w] = convert<T>(acc);
      }
    }
  };
  const size_t planes = static_cast<size_t>(s.n * s.c_out);
  const size_t per_plane = static_cast<size_t>(std::max<int64_t>(1, s.oh * s.ow * s.cin_g * s.kh * s.kw));
  const size_t grain = std::max<size_t>(1, (1u << 16) / per_plane);
  auto body = [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) plane(static_cast<int64_t>(i));
  };
  if (pool != nullptr) {
    pool->parallel_for(planes, grain, body);
  } else {
    body(0, planes);
  }
}

// ---------------------------------------------------------------------------------------------------------
// float32, contiguous NC(H)W.

/// Output range [lo, hi) of positions o for which o * stride + offset lies in [0, size).
inline void valid_range(int64_t offset, int64_t stride, int64_t size, int64_t count, int64_t& lo, int64_t& hi) {
  // A padding wider than the output (a dilated convolution on a small map) leaves no valid output: lo = count.
  lo = offset >= 0 ? 0 : std::min(count, (-offset + stride - 1) / stride);
  const int64_t last = size - 1 - offset;  // o * stride <= last
  hi = last < 0 ? 0 : std::min(count, last / stride + 1);
  if (hi < lo) hi = lo;
}

/// One output plane of a depthwise convolution, portable: out = sum_{kh,kw} w * shifted input rows (+ bias).
void depthwise_plane_generic(const ConvShape& s, const float* src, const float* w, float bias, float* dst) {
  for (int64_t oh = 0; oh < s.oh; ++oh) {
    float* orow = dst + oh * s.ow;
    for (int64_t ow = 0; ow < s.ow; ++ow) orow[ow] = 0.0f;
    for (int64_t kh = 0; kh < s.kh; ++kh) {
      const int64_t ih = oh * s.sh - s.ph + kh * s.dh;
      if (ih < 0 || ih >= s.h) continue;
      const float* irow = src + ih * s.w;
      for (int64_t kw = 0; kw < s.kw; ++kw) {
        const float wv = w[kh * s.kw + kw];
        const int64_t off = kw * s.dw - s.pw;
        int64_t lo, hi;
        valid_range(off, s.sw, s.w, s.ow, lo, hi);
        for (int64_t ow = lo; ow < hi; ++ow) orow[ow] += wv * irow[ow * s.sw + off];
      }
    }
    for (int64_t ow = 0; ow < s.ow; ++ow) orow[ow] += bias;
  }
}

#if defined(ETNP_CONV_AVX2) || defined(ETNP_CONV_NEON)
/// Depthwise convolution with AVX2 or NEON. Each input plane is copied once into zero-padded "phase planes"
/// (phase q holds padded columns q, q + sw, q + 2 sw, ...), so every tap of every output row is a contiguous,
/// unconditional 8-wide load whatever the stride, padding or dilation. Outputs are computed in groups of
/// (row, 8 columns) tiles, several tiles at once so the FMA chains overlap.
struct DepthwiseLayout {
  int64_t phase_w, phase_rows, phase_size;  // one phase plane: phase_rows x phase_w
  int64_t ow_pad;                           // output row rounded up to 8
  std::vector<int64_t> tap_offset;          // per (kh, kw): offset of the tap's input for output (0, 0)
  std::vector<int64_t> lo, hi;              // per phase: columns holding input (the rest is padding)
};

DepthwiseLayout depthwise_layout(const ConvShape& s) {
  DepthwiseLayout l;
  l.ow_pad = (s.ow + 7) / 8 * 8;
  l.phase_w = l.ow_pad + (s.dw * (s.kw - 1)) / s.sw + 1;
  l.phase_rows = (s.oh - 1) * s.sh + s.dh * (s.kh - 1) + 1;
  l.phase_size = l.phase_rows * l.phase_w;
  for (int64_t kh = 0; kh < s.kh; ++kh) {
    for (int64_t kw = 0; kw < s.kw; ++kw) {
      const int64_t col = kw * s.dw;  // padded column of output column 0
      l.tap_offset.push_back((col % s.sw) * l.phase_size + kh * s.dh * l.phase_w + col / s.sw);
    }
  }
  // Padded column idx * sw + q of phase q holds input column idx * sw + q - pw.
  for (int64_t q = 0; q < s.sw; ++q) {
    int64_t lo, hi;
    valid_range(q - s.pw, s.sw, s.w, l.phase_w, lo, hi);
    l.lo.push_back(lo);
    l.hi.push_back(hi);
  }
  return l;
}
#endif

#ifdef ETNP_CONV_AVX2
/// Copies one input plane (H x W, contiguous) into the phase planes. Only the input-holding region is
/// written: the caller zeroes the planes once and the padding stays zero for every channel.
__attribute__((target("avx2,fma"))) void fill_phase_planes_avx2(const ConvShape& s, const DepthwiseLayout& l,
                                                                const float* src, float* planes) {
  for (int64_t ih = 0; ih < s.h; ++ih) {
    const int64_t prow = ih + s.ph;
    if (prow >= l.phase_rows) break;  // rows no output reads
    const float* irow = src + ih * s.w;
    for (int64_t q = 0; q < s.sw; ++q) {
      float* dst = planes + q * l.phase_size + prow * l.phase_w;
      const int64_t off = q - s.pw, lo = l.lo[static_cast<size_t>(q)], hi = l.hi[static_cast<size_t>(q)];
      int64_t idx = lo;
      if (s.sw == 1) {
        for (; idx + 8 <= hi; idx += 8) _mm256_storeu_ps(dst + idx, _mm256_loadu_ps(irow + idx + off));
      } else if (s.sw == 2) {
        // Even elements of 16 consecutive inputs: shuffle within lanes, then order the 64-bit pairs.
        for (; idx + 8 <= hi && 2 * idx + off + 16 <= s.w; idx += 8) {
          const float* p = irow + 2 * idx + off;
          const __m256 t = _mm256_shuffle_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8), _MM_SHUFFLE(2, 0, 2, 0));
          _mm256_storeu_ps(dst + idx,
                           _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), _MM_SHUFFLE(3, 1, 2, 0))));
        }
      }
      for (; idx < hi; ++idx) dst[idx] = irow[idx * s.sw + off];
    }
  }
}

/// The tiles' store: sum + bias, or sum * scale + bias (a multiply, then an add: as the portable level rounds),
/// clamped when `clamps` (max(lo, x), then min(hi, x): x stays when NaN, as aten::clamp).
struct DepthwiseStoreAvx2 {
  __m256 scale, lo, hi;
  bool scaled, clamps;
};

/// N output tiles of 8 columns: sum over taps of w[t] * planes[taps[t] + in_base[i] ...]. Tiles whose bit is
/// set in `partial` are the last of a row shorter than 8: stored through `tail` so nothing past the row is
/// written.
template <int N>
__attribute__((target("avx2,fma"), always_inline)) inline void depthwise_tiles_avx2(
    const float* planes, const int64_t* taps, int64_t num_taps, const float* w, float bias, const int64_t* in_base,
    float* const* out, unsigned partial, __m256i tail, const DepthwiseStoreAvx2& store) {
  __m256 acc[N];
  for (int i = 0; i < N; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t t = 0; t < num_taps; ++t) {
    const __m256 wv = _mm256_broadcast_ss(w + t);
    const float* p = planes + taps[t];
    for (int i = 0; i < N; ++i) acc[i] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(p + in_base[i]), acc[i]);
  }
  const __m256 b = _mm256_set1_ps(bias);
  for (int i = 0; i < N; ++i) {
    __m256 v = _mm256_add_ps(store.scaled ? _mm256_mul_ps(acc[i], store.scale) : acc[i], b);
    if (store.clamps) v = _mm256_min_ps(store.hi, _mm256_max_ps(store.lo, v));
    if (partial & (1u << i)) {
      _mm256_maskstore_ps(out[i], tail, v);
    } else {
      _mm256_storeu_ps(out[i], v);
    }
  }
}

/// All output channels fed by one input plane: `mult` weights/biases/output planes in a row. `planes` is the
/// zeroed phase-plane buffer.
__attribute__((target("avx2,fma"))) void depthwise_channel_avx2(const ConvShape& s, const DepthwiseLayout& l,
                                                                const float* src, const float* w, const float* bias,
                                                                const float* scale, const ConvEpilogue& post,
                                                                int64_t mult, float* dst, float* planes) {
  const int64_t taps = s.kh * s.kw;
  fill_phase_planes_avx2(s, l, src, planes);
  const int64_t tail_lanes = s.ow % 8;
  alignas(32) int32_t mask_bits[8];
  for (int i = 0; i < 8; ++i) mask_bits[i] = i < tail_lanes ? -1 : 0;
  const __m256i tail = _mm256_load_si256(reinterpret_cast<const __m256i*>(mask_bits));
  for (int64_t m = 0; m < mult; ++m) {
    const float* wm = w + m * taps;
    const float bm = bias != nullptr ? bias[m] : 0.0f;
    const DepthwiseStoreAvx2 store{_mm256_set1_ps(scale != nullptr ? scale[m] : 1.0f), _mm256_set1_ps(post.min),
                                   _mm256_set1_ps(post.max), scale != nullptr, post.clamps()};
    float* out_plane = dst + m * s.oh * s.ow;
    // Tiles in row-major order, eight at a time (no divisions in the loop: they would cost more than the FMAs).
    int64_t base[8];
    float* out[8];
    unsigned partial = 0;
    int pending = 0;
    for (int64_t oh = 0; oh < s.oh; ++oh) {
      const int64_t row_base = oh * s.sh * l.phase_w;
      float* row_out = out_plane + oh * s.ow;
      for (int64_t c = 0; c < s.ow; c += 8) {
        base[pending] = row_base + c;
        out[pending] = row_out + c;
        if (c + 8 > s.ow) partial |= 1u << pending;
        if (++pending == 8) {
          depthwise_tiles_avx2<8>(planes, l.tap_offset.data(), taps, wm, bm, base, out, partial, tail, store);
          pending = 0;
          partial = 0;
        }
      }
    }
    for (int k = 0; k < pending; ++k) {
      depthwise_tiles_avx2<1>(planes, l.tap_offset.data(), taps, wm, bm, base + k, out + k, (partial >> k) & 1u,
                              tail, store);
    }
  }
}
#endif

#ifdef ETNP_CONV_NEON
// The NEON twins of the three functions above: the same phase planes, tiles and sums (from zero, one fused
// multiply-add per tap in tap order, then the bias), a tile's 8 columns as two q registers.

void fill_phase_planes_neon(const ConvShape& s, const DepthwiseLayout& l, const float* src, float* planes) {
  for (int64_t ih = 0; ih < s.h; ++ih) {
    const int64_t prow = ih + s.ph;
    if (prow >= l.phase_rows) break;  // rows no output reads
    const float* irow = src + ih * s.w;
    for (int64_t q = 0; q < s.sw; ++q) {
      float* dst = planes + q * l.phase_size + prow * l.phase_w;
      const int64_t off = q - s.pw, lo = l.lo[static_cast<size_t>(q)], hi = l.hi[static_cast<size_t>(q)];
      int64_t idx = lo;
      if (s.sw == 1) {
        std::copy(irow + lo + off, irow + hi + off, dst + lo);
        continue;
      }
      if (s.sw == 2) {
        // LD2 splits 8 consecutive inputs into the even and odd ones.
        for (; idx + 4 <= hi && 2 * idx + off + 8 <= s.w; idx += 4) {
          vst1q_f32(dst + idx, vld2q_f32(irow + 2 * idx + off).val[0]);
        }
      }
      for (; idx < hi; ++idx) dst[idx] = irow[idx * s.sw + off];
    }
  }
}

template <int N>
[[gnu::always_inline]] inline void depthwise_tiles_neon(const float* planes, const int64_t* taps, int64_t num_taps,
                                                        const float* w, float bias, const int64_t* in_base,
                                                        float* const* out, unsigned partial, int64_t tail_lanes) {
  float32x4_t acc[N][2];
  for (int i = 0; i < N; ++i) acc[i][0] = acc[i][1] = vdupq_n_f32(0.0f);
  for (int64_t t = 0; t < num_taps; ++t) {
    const float wv = w[t];
    const float* p = planes + taps[t];
    for (int i = 0; i < N; ++i) {
      acc[i][0] = vfmaq_n_f32(acc[i][0], vld1q_f32(p + in_base[i]), wv);
      acc[i][1] = vfmaq_n_f32(acc[i][1], vld1q_f32(p + in_base[i] + 4), wv);
    }
  }
  const float32x4_t b = vdupq_n_f32(bias);
  for (int i = 0; i < N; ++i) {
    float tile[8];
    float* dst = (partial & (1u << i)) != 0 ? tile : out[i];  // a row's last, short tile: only its columns
    vst1q_f32(dst, vaddq_f32(acc[i][0], b));
    vst1q_f32(dst + 4, vaddq_f32(acc[i][1], b));
    if (dst == tile) std::copy(tile, tile + tail_lanes, out[i]);
  }
}

void depthwise_channel_neon(const ConvShape& s, const DepthwiseLayout& l, const float* src, const float* w,
                            const float* bias, int64_t mult, float* dst, float* planes) {
  const int64_t taps = s.kh * s.kw;
  fill_phase_planes_neon(s, l, src, planes);
  const int64_t tail_lanes = s.ow % 8;
  for (int64_t m = 0; m < mult; ++m) {
    const float* wm = w + m * taps;
    const float bm = bias != nullptr ? bias[m] : 0.0f;
    float* out_plane = dst + m * s.oh * s.ow;
    int64_t base[8];
    float* out[8];
    unsigned partial = 0;
    int pending = 0;
    for (int64_t oh = 0; oh < s.oh; ++oh) {
      const int64_t row_base = oh * s.sh * l.phase_w;
      float* row_out = out_plane + oh * s.ow;
      for (int64_t c = 0; c < s.ow; c += 8) {
        base[pending] = row_base + c;
        out[pending] = row_out + c;
        if (c + 8 > s.ow) partial |= 1u << pending;
        if (++pending == 8) {
          depthwise_tiles_neon<8>(planes, l.tap_offset.data(), taps, wm, bm, base, out, partial, tail_lanes);
          pending = 0;
          partial = 0;
        }
      }
    }
    for (int k = 0; k < pending; ++k) {
      depthwise_tiles_neon<1>(planes, l.tap_offset.data(), taps, wm, bm, base + k, out + k, (partial >> k) & 1u,
                              tail_lanes);
    }
  }
}
#endif

void conv_depthwise_f32(const ConvShape& s, const float* in, const float* wt, const float* bias, float* out,
                        ThreadPool* pool, const ConvEpilogue& post) {
  // With a scale, the planes are summed without the bias, which post.finish adds after scaling.
  const float* inner_bias = post.scale != nullptr ? nullptr : bias;
  auto finish = [&](int64_t n, int64_t oc0, int64_t count) {
    if (!post.active()) return;
    for (int64_t oc = oc0; oc < oc0 + count; ++oc) {
      post.finish(out + (n * s.c_out + oc) * s.oh * s.ow, s.oh * s.ow, oc, bias);
    }
  };
  const int64_t mult = s.cout_g;  // output channels per input channel
  const int64_t taps = s.kh * s.kw, plane_out = s.oh * s.ow;
  const size_t per_channel = static_cast<size_t>(std::max<int64_t>(1, plane_out * taps * mult));
  const size_t grain = std::max<size_t>(1, (1u << 17) / per_channel);
  const size_t channels = static_cast<size_t>(s.n * s.c_in);
#if defined(ETNP_CONV_AVX2) || defined(ETNP_CONV_NEON)
#ifdef ETNP_CONV_AVX2
  const bool vector = has_avx2_fma();
  // The scale and clamp in the tiles' store.
  const auto depthwise_channel = [&post](const ConvShape& cs, const DepthwiseLayout& l, const float* src,
                                         const float* w, const float* channel_bias, int64_t count, float* dst,
                                         float* planes, int64_t oc0) {
    depthwise_channel_avx2(cs, l, src, w, channel_bias, post.scale != nullptr ? post.scale + oc0 : nullptr, post, count,
                           dst, planes);
  };
  constexpr bool finished_in_store = true;
#else
  const bool vector = has_neon();
  const auto depthwise_channel = [&](const ConvShape& cs, const DepthwiseLayout& l, const float* src, const float* w,
                                     const float* channel_bias, int64_t count, float* dst, float* planes, int64_t) {
    depthwise_channel_neon(cs, l, src, w, post.scale != nullptr ? nullptr : channel_bias, count, dst, planes);
  };
  constexpr bool finished_in_store = false;
#endif
  if (vector) {
    const DepthwiseLayout layout = depthwise_layout(s);
    pool->parallel_for(channels, grain, [&](size_t b, size_t e) {
      thread_local std::vector<float> scratch;
      const size_t planes_size = static_cast<size_t>(s.sw * layout.phase_size);
      if (scratch.size() < planes_size) scratch.resize(planes_size);
      std::fill(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(planes_size), 0.0f);
      for (size_t idx = b; idx < e; ++idx) {
        const int64_t n = static_cast<int64_t>(idx) / s.c_in, ic = static_cast<int64_t>(idx) % s.c_in;
        const int64_t oc0 = ic * mult;
        depthwise_channel(s, layout, in + idx * s.h * s.w, wt + oc0 * taps, bias != nullptr ? bias + oc0 : nullptr,
                          mult, out + (n * s.c_out + oc0) * plane_out, scratch.data(), oc0);
        if (!finished_in_store) finish(n, oc0, mult);
      }
    });
    return;
  }
#endif
  pool->parallel_for(channels, grain, [&](size_t b, size_t e) {
    for (size_t idx = b; idx < e; ++idx) {
      const int64_t n = static_cast<int64_t>(idx) / s.c_in, ic = static_cast<int64_t>(idx) % s.c_in;
      for (int64_t m = 0; m < mult; ++m) {
        const int64_t oc = ic * mult + m;
        depthwise_plane_generic(s, in + idx * s.h * s.w, wt + oc * taps,
                                inner_bias != nullptr ? inner_bias[oc] : 0.0f, out + (n * s.c_out + oc) * plane_out);
      }
      finish(n, ic * mult, mult);
    }
  });
}

/// cols[(ic, kh, kw)][(oh, ow)] = input[ic][oh*sh - ph + kh*dh][ow*sw - pw + kw*dw] (0 outside) for one group;
/// on the calling thread when `pool` is nullptr.
void im2col_f32(const ConvShape& s, const float* in, float* cols, ThreadPool* pool) {
  const int64_t kk = s.kh * s.kw, plane_out = s.oh * s.ow;
  auto body = [&](size_t b, size_t e) {
    for (size_t r = b; r < e; ++r) {
      const int64_t row = static_cast<int64_t>(r);
      const int64_t ic = row / kk, kh = (row / s.kw) % s.kh, kw = row % s.kw;
      const float* src = in + ic * s.h * s.w;
      float* dst = cols + row * plane_out;
      const int64_t off_w = kw * s.dw - s.pw;
      int64_t lo, hi;
      valid_range(off_w, s.sw, s.w, s.ow, lo, hi);
      // Rows of small images are tens of floats: copied and zeroed inline (the calls of memmove and memset were
      // half of im2col's time on a 32x32 image).
      for (int64_t oh = 0; oh < s.oh; ++oh) {
        float* d = dst + oh * s.ow;
        const int64_t ih = oh * s.sh - s.ph + kh * s.dh;
        if (ih < 0 || ih >= s.h) {
          compute::zero_short_floats(d, s.ow);
          continue;
        }
        const float* irow = src + ih * s.w;
        if (hi <= lo) {
          compute::zero_short_floats(d, s.ow);
          continue;
        }
        compute::zero_short_floats(d, lo);
        if (s.sw == 1) {
          compute::copy_short_floats(d + lo, irow + lo + off_w, hi - lo);
        } else {
          for (int64_t ow = lo; ow < hi; ++ow) d[ow] = irow[ow * s.sw + off_w];
        }
        compute::zero_short_floats(d + hi, s.ow - hi);
      }
    }
  };
  const size_t rows = static_cast<size_t>(s.cin_g * kk);
  if (pool == nullptr) {
    body(0, rows);
    return;
  }
  pool->parallel_for(rows, std::max<size_t>(1, (1u << 16) / static_cast<size_t>(std::max<int64_t>(1, plane_out))), body);
}

/// Whether a convolution runs as dot products of each output pixel's patch with its weights where they lie
/// (compute/dot_rows.h), and so is not packed at load (pack_nhwc_conv): fewer output pixels (per image and group)
/// than a GEMM tile has columns, long sums, and weights large enough that packing them is what its load costs.
/// ResNet-18 on a 64x64 image ends in three 3x3 convolutions on 2x2 maps with 9.4 MB of weights each, 63% of
/// what its load packed (its load 30 -> 15 ms without); in the NCHW GEMM, which reads them in place too, they
/// ran 1.8x slower (a quarter of each 16-column tile used, one broadcast load per weight); as dot products, as
/// fast as packed. Shorter sums pay relatively more for their reduction into one value per output: 2,304
/// products (its stride-2 convolution) ran 15% slower than packed, 256 to 320 (1x1 projections; EfficientNet's
/// last convolution) up to 2x, and the whole ResNet-18 3-6% slower when every one of its small-map convolutions
/// above 1,024 products ran so.
constexpr int64_t kDotMaxPixels = 16;
constexpr int64_t kDotMinProducts = 4096;

bool runs_as_dots(const ConvShape& s) {
  return s.oh * s.ow < kDotMaxPixels && s.cin_g * s.kh * s.kw >= kDotMinProducts &&
         s.c_out * s.cin_g * s.kh * s.kw * int64_t{sizeof(float)} >= compute::kDotsMinWeightBytes;
}

/// patches[p * k + (ic * kh + ty) * kw + tx] = the input under tap (ty, tx) of channel ic for output pixel p, or 0
/// in the padding: each pixel's patch in the weights' own [Cin, KH, KW] order.
void gather_patches_f32(const ConvShape& s, const float* in, float* patches) {
  const int64_t k = s.cin_g * s.kh * s.kw, plane_in = s.h * s.w;
  for (int64_t oy = 0; oy < s.oh; ++oy) {
    for (int64_t ox = 0; ox < s.ow; ++ox) {
      float* dst = patches + (oy * s.ow + ox) * k;
      for (int64_t ic = 0; ic < s.cin_g; ++ic) {
        const float* plane = in + ic * plane_in;
        for (int64_t ty = 0; ty < s.kh; ++ty) {
          const int64_t iy = oy * s.sh + ty * s.dh - s.ph;
          for (int64_t tx = 0; tx < s.kw; ++tx) {
            const int64_t ix = ox * s.sw + tx * s.dw - s.pw;
            *dst++ = iy >= 0 && iy < s.h && ix >= 0 && ix < s.w ? plane[iy * s.w + ix] : 0.0f;
          }
        }
      }
    }
  }
}

/// The rectangle of a convolution's taps that reach its input (compute/conv_rows.h): `rows` and `cols` of the
/// kernel, and `shape`, the convolution with that rectangle for its kernel and the padding moved to it (negative
/// where it starts inside the image).
struct LiveTaps {
  ConvShape shape;
  compute::TapRange rows, cols;
};

LiveTaps live_taps_of(const ConvShape& s) {
  auto size = [](int64_t v) { return static_cast<size_t>(v); };
  LiveTaps t{s, compute::live_taps(size(s.h), size(s.oh), size(s.kh), size(s.sh), size(s.dh), size(s.ph)),
             compute::live_taps(size(s.w), size(s.ow), size(s.kw), size(s.sw), size(s.dw), size(s.pw))};
  t.shape.kh = static_cast<int64_t>(t.rows.count());
  t.shape.kw = static_cast<int64_t>(t.cols.count());
  t.shape.ph = s.ph - static_cast<int64_t>(t.rows.first) * s.dh;
  t.shape.pw = s.pw - static_cast<int64_t>(t.cols.first) * s.dw;
  return t;
}

/// Non-transposed float32 convolution on contiguous buffers.
void conv_f32_contiguous(KernelContext& ctx, const ConvShape& s, const float* in, const float* wt, const float* bias,
                         float* out, ThreadPool* pool, const ConvEpilogue& post = {}) {
  if (s.cin_g == 1 && s.groups == s.c_in) {
    conv_depthwise_f32(s, in, wt, bias, out, pool, post);
    return;
  }
  const int64_t k = s.cin_g * s.kh * s.kw, plane_out = s.oh * s.ow, plane_in = s.h * s.w;
  // Only the live taps are multiplied: the patches of their rectangle and their weights gathered per call.
  const LiveTaps reached = live_taps_of(s);
  const ConvShape& live = reached.shape;
  const compute::TapRange &ty = reached.rows, &tx = reached.cols;
  const bool trimmed = live.kh != s.kh || live.kw != s.kw;
  const int64_t k_live = s.cin_g * live.kh * live.kw;
  const bool direct = s.kh == 1 && s.kw == 1 && s.sh == 1 && s.sw == 1 && s.ph == 0 && s.pw == 0;
  const bool dots = runs_as_dots(s);  // the patches as rows of k_live floats, in the cols scratch
  const size_t cols_floats = direct && !dots ? 0 : static_cast<size_t>(k_live * plane_out);
  const size_t weight_floats = trimmed && live.kh * live.kw > 1 ? static_cast<size_t>(s.cout_g * k_live) : 0;
  const size_t scratch_floats = cols_floats + weight_floats;
  // One (image, group) pair: its patches, its live weights, one GEMM. `scratch` holds scratch_floats floats.
  auto run_pair = [&](int64_t pair, float* scratch, ThreadPool* inner) {
    const int64_t n = pair / s.groups, g = pair % s.groups;
    float* cols = scratch;
    float* live_weights = scratch == nullptr ? nullptr : scratch + cols_floats;
    const float* in_g = in + (n * s.c_in + g * s.cin_g) * plane_in;
    float* out_g = out + (n * s.c_out + g * s.cout_g) * plane_out;
    GemmMatrix a{wt + g * s.cout_g * k, k, 1};
    if (trimmed) {
      if (k_live == 0) {  // no tap reads the input: every output is the bias
        for (int64_t oc = 0; oc < s.cout_g; ++oc) {
          const int64_t c = g * s.cout_g + oc;
          const float b = bias == nullptr ? 0.0f : bias[c];
          std::fill(out_g + oc * plane_out, out_g + (oc + 1) * plane_out, post.scale != nullptr ? 0.0f : b);
          post.finish(out_g + oc * plane_out, plane_out, c, bias);
        }
        return;
      }
      const int64_t first_tap = static_cast<int64_t>(ty.first) * s.kw + static_cast<int64_t>(tx.first);
      if (live.kh * live.kw == 1) {
        a = GemmMatrix{a.data + first_tap, k, s.kh * s.kw};  // one tap: its weights, kh * kw floats apart
      } else {
        float* dst = live_weights;
        for (int64_t row = 0; row < s.cout_g * s.cin_g; ++row) {  // (oc, ic) pairs: their kh x kw filters
          const float* filter = a.data + row * s.kh * s.kw + first_tap;
          for (int64_t y = 0; y < live.kh; ++y) dst = std::copy(filter + y * s.kw, filter + y * s.kw + live.kw, dst);
        }
        a = GemmMatrix{live_weights, k_live, 1};
      }
    }
    if (dots && a.col_stride == 1) {
      gather_patches_f32(live, in_g, cols);
      compute::DotRowsOut o;
      o.c = out_g;
      o.row_stride = 1;
      o.col_stride = static_cast<size_t>(plane_out);
      o.scale = post.scale != nullptr ? post.scale + g * s.cout_g : nullptr;
      o.bias = bias != nullptr ? bias + g * s.cout_g : nullptr;
      o.clamp = post.clamps();
      o.lo = post.min;
      o.hi = post.max;
      compute::dot_rows_f32(cols, static_cast<size_t>(k_live), static_cast<size_t>(plane_out), a.data,
                            static_cast<size_t>(a.row_stride), static_cast<size_t>(s.cout_g),
                            static_cast<size_t>(k_live), o, inner);
      return;
    }
    GemmMatrix b{in_g, plane_in, 1};
    if (!direct) {
      im2col_f32(live, in_g, cols, inner);
      b = GemmMatrix{cols, plane_out, 1};
    }
    GemmEpilogue ep;
    if (bias != nullptr) ep.bias = GemmMatrix{bias + g * s.cout_g, 1, 0};
    if (post.scale != nullptr) ep.scale = GemmMatrix{post.scale + g * s.cout_g, 1, 0};
    ep.min = post.min;
    ep.max = post.max;
    gemm_f32(s.cout_g, plane_out, k_live, a, b, out_g, plane_out, 1, ep, inner);
  };
  const int64_t pairs = s.n * s.groups;
  const size_t threads = pool == nullptr ? 1 : pool->num_threads();
  const double pair_macs = double(s.cout_g) * double(plane_out) * double(k_live);
  // A batch (or groups) of GEMMs too small to split one by one (a small CNN's first layer on two images): the
  // pairs go to the threads whole, each with its own scratch.
  const bool split_pairs = threads > 1 && pairs > 1 && pair_macs < compute::kGemmParallelMacs &&
                           pair_macs * double(pairs) >= double(compute::kParallelWork);
  if (split_pairs) {
    const size_t tasks = std::min(threads, static_cast<size_t>(pairs));
    auto* scratch =
        scratch_floats == 0 ? nullptr : static_cast<float*>(ctx.scratch(tasks * scratch_floats * sizeof(float)));
    pool->parallel_for(tasks, 1, [&](size_t t0, size_t t1) {
      for (size_t t = t0; t < t1; ++t) {
        float* own = scratch == nullptr ? nullptr : scratch + t * scratch_floats;
        const int64_t first = static_cast<int64_t>(t) * pairs / static_cast<int64_t>(tasks);
        const int64_t last = static_cast<int64_t>(t + 1) * pairs / static_cast<int64_t>(tasks);
        for (int64_t pair = first; pair < last; ++pair) run_pair(pair, own, nullptr);
      }
    });
    return;
  }
  auto* scratch = scratch_floats == 0 ? nullptr : static_cast<float*>(ctx.scratch(scratch_floats * sizeof(float)));
  for (int64_t pair = 0; pair < pairs; ++pair) run_pair(pair, scratch, pool);
}

/// dst[i * stride] += src[i] for i < n. The col2im of a transposed convolution; stride 2 (upsampling by two) is
/// written out so that it vectorizes (interleaving src with the untouched lanes), 3x the strided loop.
void add_strided(float* __restrict dst, const float* __restrict src, int64_t n, int64_t stride) {
  if (stride == 1) {
    for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
  } else if (stride == 2) {
    for (int64_t i = 0; i < n; ++i) dst[2 * i] += src[i];
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i * stride] += src[i];
  }
}

/// Transposed float32 convolution on contiguous buffers, as GEMM + col2im: per group,
/// cols[(oc, kh, kw)][(ih, iw)] = sum_ic w[ic][(oc, kh, kw)] * x[ic][(ih, iw)], then every column entry is added
/// to the output pixel (ih * sh - ph + kh * dh, iw * sw - pw + kw * dw) it lands on.
void conv_transposed_f32_contiguous(KernelContext& ctx, const ConvShape& s, const float* in, const float* wt,
                                    const float* bias, float* out, ThreadPool* pool) {
  const int64_t kk = s.kh * s.kw, rows = s.cout_g * kk, plane_in = s.h * s.w, plane_out = s.oh * s.ow;
  float* cols = static_cast<float*>(ctx.scratch(static_cast<size_t>(rows * plane_in) * sizeof(float)));
  for (int64_t n = 0; n < s.n; ++n) {
    for (int64_t g = 0; g < s.groups; ++g) {
      // weight [c_in, cout_g, kh, kw]: this group's block is [cin_g, rows], used transposed.
      gemm_f32(rows, plane_in, s.cin_g, GemmMatrix{wt + g * s.cin_g * rows, 1, rows},
               GemmMatrix{in + (n * s.c_in + g * s.cin_g) * plane_in, plane_in, 1}, cols, plane_in, 1, GemmEpilogue{},
               pool);
      float* out_g = out + (n * s.c_out + g * s.cout_g) * plane_out;
      // Output channels are independent: each sums its own kh*kw column rows.
      const size_t grain = std::max<size_t>(1, (1u << 16) / static_cast<size_t>(std::max<int64_t>(1, plane_in * kk)));
      pool->parallel_for(static_cast<size_t>(s.cout_g), grain, [&](size_t b, size_t e) {
        for (size_t ocl = b; ocl < e; ++ocl) {
          float* o = out_g + static_cast<int64_t>(ocl) * plane_out;
          const float bv = bias != nullptr ? bias[g * s.cout_g + static_cast<int64_t>(ocl)] : 0.0f;
          std::fill(o, o + plane_out, 0.0f);
          for (int64_t kh = 0; kh < s.kh; ++kh) {
            for (int64_t kw = 0; kw < s.kw; ++kw) {
              const float* c = cols + ((static_cast<int64_t>(ocl) * s.kh + kh) * s.kw + kw) * plane_in;
              int64_t lo, hi;
              valid_range(kw * s.dw - s.pw, s.sw, s.ow, s.w, lo, hi);
              for (int64_t ih = 0; ih < s.h; ++ih) {
                const int64_t oh = ih * s.sh - s.ph + kh * s.dh;
                if (oh < 0 || oh >= s.oh) continue;
                const int64_t row_off = oh * s.ow + kw * s.dw - s.pw;
                add_strided(o + row_off + lo * s.sw, c + ih * s.w + lo, hi - lo, s.sw);
              }
            }
          }
          if (bias != nullptr) {
            for (int64_t i = 0; i < plane_out; ++i) o[i] += bv;
          }
        }
      });
    }
  }
}

/// Resizes `out` to the convolution's [n, c_out, (oh,) ow] for an input of rank `input_rank` (3 or 4).
void resize_conv_output(Tensor& out, const ConvShape& s, int input_rank, const char* op) {
  std::vector<int64_t> out_shape{s.n, s.c_out};
  if (input_rank == 4) out_shape.push_back(s.oh);
  out_shape.push_back(s.ow);
  resize_output(out, out_shape, op);
}

/// Logical-order copy of a float tensor (so any dim order can use the contiguous path).
std::vector<float> contiguous_f32(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  const float* src = t.data_as<const float>();
  float* dst = v.data();
  for_each_index<1>(t.sizes(), {t.strides().data()}, [&](const std::array<int64_t, 1>& off) { *dst++ = src[off[0]]; });
  return v;
}

// ---- Constant weights, packed at load for the NHWC engines --------------------------------------------------

/// A float32 2-D (or 1-D) convolution with one group, or depthwise with one output per input channel, whose
/// weights are constants: packed when it was loaded for the NHWC engines the XNNPACK delegate runs
/// (compute/conv_indirect.h and compute/depthwise.h), the batch norm's scale of a fused
/// convolution_affine_clamp folded into them. A call transposes its input to NHWC, runs the engine with the
/// bias and the clamp in its output pass, and transposes the output back. The NCHW GEMM multiplies per-call
/// packed weights by columns that are the output pixels, which the small maps of a network's later layers
/// (and of small inputs) leave too few to fill its tiles; its depthwise loop vectorizes along a row, as short.
/// The depthwise engine's scratch (padded input rows), one per method (KernelContext::shared_scratch): its
/// convolutions run one at a time. Held per convolution, MobileNetV2's kept 1.2 MB after a run.
struct DepthwiseRows {
  std::vector<float> floats;
};

struct NhwcConv final : KernelState {
  std::shared_ptr<const compute::PackedGemm> gemm;            ///< one group: [Cout, KH, KW, Cin] as [n, k]
  std::shared_ptr<const compute::DepthwiseConv> depthwise;    ///< depthwise: [KH, KW, C]
  const void* weight_source = nullptr;  ///< the weight tensor's data when packed: the call checks it is still bound
  const void* scale_source = nullptr;   ///< the folded scale's data, or null
  /// One group, trimmed: the geometry the packing holds (live_tap_window of the program's static shape).
  std::optional<ConvShape> trimmed;
  std::vector<size_t> packed_args;       ///< the weight, the bias and the scale: not read by the calls
  std::pair<const void*, size_t> shared_packing() const override {
    if (gemm) return {gemm.get(), gemm->bytes()};
    return {depthwise.get(), depthwise->bytes()};
  }
  std::vector<size_t> packed_constant_args() const override { return packed_args; }
  bool exchanges_channels_last() const override { return true; }
  void use_channels_last(bool input, bool output) override {
    input_nhwc = input_nhwc || input;
    output_nhwc = output_nhwc || output;
  }
  bool input_nhwc = false, output_nhwc = false;  ///< paired at load: no transpose on that side
};

/// The NHWC route takes maps of every size: on the project's Zen 3 machine the 224x224 MobileNetV2s (etnp_demo's,
/// the exported fixture) ran 9-13% faster at 1 and 2 threads with their 112x112 and 56x56 maps on it too, peak
/// memory lower (no im2col buffers); per layer, the 56x56 depthwise 374 -> 102 us, the 112x112 pointwise 1013 ->
/// 701 us. (A Zen 1 core had measured the opposite, 13% slower, and the route stopped at 2,048 pixels then.)
///
/// The columns of the GEMM micro-tile (6x16). The NHWC GEMM's columns are the output channels: fewer than this (a
/// small CNN's first 3 -> 8 convolution) leave its tiles half idle, where the NCHW GEMM's columns, the pixels, fill
/// them when there are this many (smallcnn 7% faster).
constexpr int64_t kGemmTileColumns = 16;

/// Whether the NHWC engines take a convolution of this shape: 2-D or 1-D, not transposed, one group (any
/// kernel, stride, dilation) or depthwise with one output per channel that compute::DepthwiseConv runs.
bool nhwc_engines_take(const ConvShape& s) {
  if (s.transposed) return false;
  if (s.groups == 1) return true;
  return s.cin_g == 1 && s.groups == s.c_in && s.cout_g == 1 && s.dh == 1 && s.dw == 1 &&
         compute::DepthwiseConv::supported(static_cast<size_t>(s.c_in), static_cast<size_t>(s.kh),
                                           static_cast<size_t>(s.sh), static_cast<size_t>(s.sw));
}

/// live_taps_of(s).shape where some kernel row or column never reaches the input, some tap does, and the moved
/// padding is not negative (a first live tap past the padding); else nullopt. An atrous convolution on a map
/// smaller than its dilation reads the input through few of its taps: DeepLabV3's three 3x3 ASPP branches (rates
/// 12, 24, 36) on its 4x4 map of a 64x64 image read the centre only, and packed whole they were 26.5 of the 42 MB
/// its load packed.
std::optional<ConvShape> live_tap_window(const ConvShape& s) {
  const LiveTaps t = live_taps_of(s);
  const ConvShape& live = t.shape;
  if (t.rows.empty() || t.cols.empty() || (live.kh == s.kh && live.kw == s.kw) || live.ph < 0 || live.pw < 0) {
    return std::nullopt;
  }
  return live;
}

/// Packs a convolution's constant float32 weights (the scale at argument `scale_arg` when not 0, one per output
/// channel, multiplied in; the bias added after it) for the NHWC engines, or nullptr when they do not take it.
/// Shapes are the serialized ones.
std::unique_ptr<KernelState> pack_nhwc_conv(KernelArgs args, size_t scale_arg) {
  // Arguments of the wrong kind are the call's to report, with its context: here they only mean "not packed".
  const Tensor* scale = nullptr;
  ConvShape s;
  try {
    scale = scale_arg != 0 ? args[scale_arg]->to_optional_tensor() : nullptr;
    const Tensor& input = args[0]->to_tensor();
    const Tensor& weight = args[1]->to_tensor();
    const Tensor* bias = args[2]->to_optional_tensor();
    const Tensor& out = args[args.size() - 2]->to_tensor();
    // The layouts are the program's (static): a channels-last input or output never takes the route, so that a
    // call never has to fall back from a route the load paired with its neighbours.
    if (input.dtype() != ScalarType::Float || !input.is_contiguous_order() || !out.is_contiguous_order() ||
        weight.dtype() != ScalarType::Float || !weight.is_constant() || weight.data() == nullptr ||
        !weight.is_contiguous_order()) {
      return nullptr;
    }
    for (const Tensor* t : {bias, scale}) {
      if (t != nullptr && (t->dtype() != ScalarType::Float || !t->is_constant() || t->data() == nullptr ||
                           !t->is_contiguous_order())) {
        return nullptr;
      }
    }
    s = conv_shape(input, weight, bias, args);
  } catch (const Error&) {
    return nullptr;
  }
  const Tensor& weight = args[1]->to_tensor();
  const Tensor* bias = args[2]->to_optional_tensor();
  if (!nhwc_engines_take(s) || (scale != nullptr && scale->numel() != s.c_out)) return nullptr;
  if (s.groups == 1 && s.c_out < kGemmTileColumns && s.oh * s.ow >= kGemmTileColumns) return nullptr;
  if (s.groups == 1 && runs_as_dots(s)) return nullptr;  // dot products on the weights where they lie
  const float* w = weight.data_as<const float>();
  const float* sc = scale != nullptr ? scale->data_as<const float>() : nullptr;
  const float* b = bias != nullptr ? bias->data_as<const float>() : nullptr;
  const int64_t taps = s.kh * s.kw;
  auto state = std::make_unique<NhwcConv>();
  state->weight_source = weight.data();
  state->scale_source = scale != nullptr ? scale->data() : nullptr;
  state->packed_args = {1, 2};
  if (scale != nullptr) state->packed_args.push_back(scale_arg);
  if (s.groups == 1) {
    // With a static input the taps that never reach it are left out (a dynamic one may grow into them).
    const std::optional<ConvShape> live =
        args[0]->to_tensor().dynamism() == ShapeDynamism::Static ? live_tap_window(s) : std::nullopt;
    const ConvShape& p = live ? *live : s;
    state->trimmed = live;
    const int64_t live_taps = p.kh * p.kw;
    // Read as [Cout, KH, KW, Cin]: a pixel's patch is KH rows of KW * Cin contiguous floats.
    const auto k = static_cast<size_t>(live_taps * s.c_in), n = static_cast<size_t>(s.c_out);
    const int64_t row0 = (s.ph - p.ph) / s.dh, col0 = (s.pw - p.pw) / s.dw;  // the first live tap
    state->gemm = compute::WeightCache::global().share_made<compute::PackedGemm>(
        {reinterpret_cast<uintptr_t>(w), k, n, reinterpret_cast<uintptr_t>(b), static_cast<uint64_t>(taps),
         reinterpret_cast<uintptr_t>(sc), static_cast<uint64_t>(p.kh), static_cast<uint64_t>(p.kw),
         static_cast<uint64_t>(row0), static_cast<uint64_t>(col0)},
        [&] {
          compute::FilterTaps filter{static_cast<size_t>(live_taps)};
          if (live) {  // the live rectangle of each [KH, KW] filter
            filter.kh = static_cast<size_t>(s.kh);
            filter.kw = static_cast<size_t>(s.kw);
            filter.rows = static_cast<size_t>(p.kh);
            filter.cols = static_cast<size_t>(p.kw);
            filter.row0 = static_cast<size_t>(row0);
            filter.col0 = static_cast<size_t>(col0);
          }
          return std::make_shared<const compute::PackedGemm>(w, true, k, n, b, filter, sc);
        });
  } else {
    state->depthwise = compute::WeightCache::global().share_made<compute::DepthwiseConv>(
        {reinterpret_cast<uintptr_t>(w), reinterpret_cast<uintptr_t>(b), reinterpret_cast<uintptr_t>(sc),
         static_cast<uint64_t>(s.c_in), static_cast<uint64_t>(s.kh), static_cast<uint64_t>(s.kw),
         static_cast<uint64_t>(s.sh), static_cast<uint64_t>(s.sw), static_cast<uint64_t>(s.ph),
         static_cast<uint64_t>(s.pw)},
        [&] {
          // [C, 1, KH, KW] -> [KH, KW, C].
          std::vector<float> packed(static_cast<size_t>(taps * s.c_in));
          for (int64_t c = 0; c < s.c_in; ++c) {
            const float k = sc != nullptr ? sc[c] : 1.0f;
            for (int64_t t = 0; t < taps; ++t) packed[static_cast<size_t>(t * s.c_in + c)] = w[c * taps + t] * k;
          }
          return std::make_shared<const compute::DepthwiseConv>(
              packed.data(), b, static_cast<size_t>(s.c_in), static_cast<size_t>(s.kh), static_cast<size_t>(s.kw),
              static_cast<size_t>(s.sh), static_cast<size_t>(s.sw), static_cast<size_t>(s.ph),
              static_cast<size_t>(s.pw));
        });
  }
  return state;
}

std::unique_ptr<KernelState> prepare_convolution(KernelArgs args) {
  if (args.size() != 11 || !args[0]->is_tensor() || !args[1]->is_tensor()) return nullptr;
  return pack_nhwc_conv(args, 0);
}

std::unique_ptr<KernelState> prepare_convolution_affine_clamp(KernelArgs args) {
  if (args.size() != 14 || !args[0]->is_tensor() || !args[1]->is_tensor()) return nullptr;
  return pack_nhwc_conv(args, 9);
}

/// Runs the convolution on the state's packed weights when they still fit the call (the same constants bound,
/// contiguous float32 tensors of the packed geometry); false leaves it to the NCHW paths.
bool run_nhwc(KernelContext& ctx, const ConvShape& s, const Tensor& input, const Tensor& weight,
              const Tensor* scale, float out_min, float out_max, Tensor& out) {
  auto* state = static_cast<NhwcConv*>(ctx.state());
  if (state == nullptr || state->weight_source != weight.data() ||
      state->scale_source != (scale != nullptr ? scale->data() : nullptr) || !input.is_contiguous_order() ||
      !out.is_contiguous_order()) {
    // What the load paired holds NHWC bytes: no NCHW path may read or write them.
    ETNP_KERNEL_CHECK(state == nullptr || (!state->input_nhwc && !state->output_nhwc),
                      kConvOp << ": a convolution paired with its neighbours in NHWC order no longer fits its packed "
                                 "weights (a rebound constant or a changed layout)");
    return false;
  }
  const int64_t in_floats = state->input_nhwc ? 0 : s.n * s.c_in * s.h * s.w;
  const int64_t out_floats = state->output_nhwc ? 0 : s.n * s.c_out * s.oh * s.ow;
  auto* scratch = in_floats + out_floats == 0
                      ? nullptr
                      : static_cast<float*>(ctx.scratch(static_cast<size_t>(in_floats + out_floats) * sizeof(float)));
  const float* in_nhwc = state->input_nhwc ? input.data_as<const float>() : scratch;
  float* out_nhwc = state->output_nhwc ? out.data_as<float>() : scratch + in_floats;
  // [n, C, HW] <-> [n, HW, C], as a tiled transpose.
  auto transpose = [](float* dst, const float* src, int64_t n, int64_t channels, int64_t plane, bool to_nhwc) {
    const int64_t shape[3] = {n, to_nhwc ? plane : channels, to_nhwc ? channels : plane};
    const int64_t dst_strides[3] = {channels * plane, to_nhwc ? channels : plane, 1};
    const int64_t src_strides[3] = {channels * plane, 1, to_nhwc ? plane : channels};
    compute::strided_copy(dst, ScalarType::Float, dst_strides, src, ScalarType::Float, src_strides, shape);
  };
  if (!state->input_nhwc) transpose(scratch, input.data_as<const float>(), s.n, s.c_in, s.h * s.w, true);
  if (state->gemm) {
    auto size = [](int64_t v) { return static_cast<size_t>(v); };
    ConvShape p = s;  // the geometry the packing holds
    if (const auto& t = state->trimmed) {
      // (Trimmed only for a static input, whose map cannot change.)
      ETNP_KERNEL_CHECK(s.h == t->h && s.w == t->w, kConvOp << ": a " << s.h << "x" << s.w
                                                            << " map reached a convolution packed for " << t->h
                                                            << "x" << t->w);
      p.kh = t->kh, p.kw = t->kw, p.ph = t->ph, p.pw = t->pw;
    }
    const compute::Conv2dGeometry g{.in_h = size(p.h), .in_w = size(p.w), .channels = size(p.c_in),
                                    .kernel_h = size(p.kh), .kernel_w = size(p.kw), .stride_h = size(p.sh),
                                    .stride_w = size(p.sw), .dilation_h = size(p.dh), .dilation_w = size(p.dw),
                                    .pad_top = size(p.ph), .pad_left = size(p.pw), .out_h = size(p.oh),
                                    .out_w = size(p.ow)};
    const bool pointwise =
        p.kh == 1 && p.kw == 1 && p.sh == 1 && p.sw == 1 && p.ph == 0 && p.pw == 0 && p.oh == p.h && p.ow == p.w;
    if (pointwise) {
      state->gemm->run(in_nhwc, static_cast<size_t>(s.n * s.h * s.w), static_cast<size_t>(s.c_in), out_min, out_max,
                       out_nhwc);
    } else {
      compute::conv2d_indirect(*state->gemm, g, static_cast<size_t>(s.n), in_nhwc, out_min, out_max, out_nhwc,
                               ctx.shared_scratch<compute::Conv2dScratch>());
    }
  } else {
    state->depthwise->run(in_nhwc, static_cast<size_t>(s.n), static_cast<size_t>(s.h), static_cast<size_t>(s.w),
                          static_cast<size_t>(s.oh), static_cast<size_t>(s.ow), out_min, out_max, out_nhwc,
                          ctx.shared_scratch<DepthwiseRows>().floats);
  }
  if (!state->output_nhwc) transpose(out.data_as<float>(), out_nhwc, s.n, s.c_out, s.oh * s.ow, false);
  return true;
}

// aten::convolution.out(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, SymInt[] padding,
//   SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups, *, Tensor(a!) out)
void convolution_out(KernelContext& ctx, KernelArgs args) {
  check_num_args(args, 11, kConvOp);
  const Tensor& input = args[0]->to_tensor();
  const Tensor& weight = args[1]->to_tensor();
  const Tensor* bias = args[2]->to_optional_tensor();
  Tensor& out = args[9]->to_tensor();
  const ConvShape s = conv_shape(input, weight, bias, args);
  check_same_dtype(input, weight, kConvOp);
  check_same_dtype(input, out, kConvOp);
  if (bias != nullptr) check_same_dtype(input, *bias, kConvOp);
  resize_conv_output(out, s, input.dim(), kConvOp);
  if (out.numel() == 0) return;
  ThreadPool* pool = ctx.pool() != nullptr ? ctx.pool() : &ThreadPool::global();

  if (input.dtype() == ScalarType::Float) {
    constexpr float kInf = std::numeric_limits<float>::infinity();
    if (run_nhwc(ctx, s, input, weight, nullptr, -kInf, kInf, out)) return;
    const bool contiguous = input.is_contiguous_order() && weight.is_contiguous_order() && out.is_contiguous_order();
    const float* bias_data = nullptr;
    std::vector<float> bias_copy;
    if (bias != nullptr) {
      if (bias->stride(0) == 1) {
        bias_data = bias->data_as<const float>();
      } else {
        bias_copy = contiguous_f32(*bias);
        bias_data = bias_copy.data();
      }
    }
    auto run = [&](const float* in, const float* wt, float* o) {
      if (s.transposed) {
        conv_transposed_f32_contiguous(ctx, s, in, wt, bias_data, o, pool);
      } else {
        conv_f32_contiguous(ctx, s, in, wt, bias_data, o, pool);
      }
    };
    if (contiguous) {
      run(input.data_as<const float>(), weight.data_as<const float>(), out.data_as<float>());
      return;
    }
    // Other dim orders (channels-last, ...): convert, run the contiguous path, scatter back.
    const std::vector<float> in_c = contiguous_f32(input), w_c = contiguous_f32(weight);
    std::vector<float> out_c(static_cast<size_t>(out.numel()));
    run(in_c.data(), w_c.data(), out_c.data());
    float* dst = out.data_as<float>();
    const float* src = out_c.data();
    for_each_index<1>(out.sizes(), {out.strides().data()},
                      [&](const std::array<int64_t, 1>& off) { dst[off[0]] = *src++; });
    return;
  }
  dispatch<kFloats | kHalfs>(input.dtype(), kConvOp, [&](auto tag) {
    using T = decltype(tag);
    conv_direct<T>(s, input, weight, bias, out, pool);
  });
}

// etnp::convolution_affine_clamp.out(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride,
//   SymInt[] padding, SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups,
//   Tensor? channel_scale, float min, float max, *, Tensor(a!) out)
// out = clamp(conv(input, weight) * channel_scale[c] + bias[c], min, max): what the runtime makes at load of a
// convolution followed by an inference batch norm (the scale and the shifted bias) and an activation (relu,
// hardtanh, clamp), so that the three run as one pass. Float32, not transposed, contiguous.
void convolution_affine_clamp_out(KernelContext& ctx, KernelArgs args) {
  constexpr const char* op = "etnp::convolution_affine_clamp.out";
  check_num_args(args, 14, op);
  const Tensor& input = args[0]->to_tensor();
  const Tensor& weight = args[1]->to_tensor();
  const Tensor* bias = args[2]->to_optional_tensor();
  const Tensor* scale = args[9]->to_optional_tensor();
  Tensor& out = args[12]->to_tensor();
  const ConvShape s = conv_shape(input, weight, bias, args);
  for (const Tensor* t : {&input, &weight, bias, scale, static_cast<const Tensor*>(&out)}) {
    ETNP_KERNEL_CHECK(t == nullptr || (t->dtype() == ScalarType::Float && t->is_contiguous_order()),
                      op << ": every tensor must be float32 and contiguous");
  }
  ETNP_KERNEL_CHECK(!s.transposed, op << ": transposed convolutions are not supported");
  ETNP_KERNEL_CHECK(bias == nullptr || bias->numel() == s.c_out, op << ": bias must have one value per output channel");
  ETNP_KERNEL_CHECK(scale == nullptr || scale->numel() == s.c_out,
                    op << ": channel_scale must have one value per output channel");
  resize_conv_output(out, s, input.dim(), op);
  if (out.numel() == 0) return;
  ConvEpilogue post;
  post.scale = scale != nullptr ? scale->data_as<const float>() : nullptr;
  post.min = static_cast<float>(args[10]->to_double());
  post.max = static_cast<float>(args[11]->to_double());
  if (run_nhwc(ctx, s, input, weight, scale, post.min, post.max, out)) return;
  conv_f32_contiguous(ctx, s, input.data_as<const float>(), weight.data_as<const float>(),
                      bias != nullptr ? bias->data_as<const float>() : nullptr, out.data_as<float>(),
                      ctx.pool() != nullptr ? ctx.pool() : &ThreadPool::global(), post);
}

}  // namespace

void register_conv_kernels(KernelRegistry& registry) {
  registry.add("aten::convolution.out", 11, convolution_out, prepare_convolution);
  registry.add("etnp::convolution_affine_clamp.out", 14, convolution_affine_clamp_out,
               prepare_convolution_affine_clamp);
}

}  // namespace etnp::kernels
