// Reference kernels for the XNNGraph nodes the 2022 XNNPACK library cannot run (transpose, concatenate,
// slice, batch matmul, transcendental unaries, dynamic int8 quantization, ...). They work on the
// delegate's dense buffers in XNNPACK's physical (NHWC) order and never read or write out of bounds for
// shapes that passed shape propagation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "backends/xnnpack/xnn_graph.h"
#include "compute/weight_cache.h"

namespace etnp::xnn {

/// out = in permuted: out dim i is in dim perm[i]. `elem_size` is 1, 2, 4 or 8 bytes.
void transpose(const void* in, void* out, const Shape& in_shape, std::span<const size_t> perm, size_t elem_size);

/// Concatenates `inputs` (shapes `shapes`) along `axis` into `out`.
void concatenate(std::span<const void* const> inputs, std::span<const Shape> shapes, size_t axis, void* out,
                 size_t elem_size);

/// out = in[offsets : offsets + out_shape].
void slice(const void* in, const Shape& in_shape, std::span<const size_t> offsets, const Shape& out_shape, void* out,
           size_t elem_size);

/// Pads `in` with `pad_bytes` (one element's bytes) before/after each dim.
void constant_pad(const void* in, const Shape& in_shape, std::span<const size_t> pre, const Shape& out_shape,
                  const void* pad_bytes, void* out, size_t elem_size);

/// Batched matmul with numpy broadcasting of the batch dims: a [..., M, K] x b [..., K, N] (or b [..., N, K]
/// when transpose_b) -> out [..., M, N].
void batch_matmul_f32(const float* a, const Shape& a_shape, const float* b, const Shape& b_shape, bool transpose_b,
                      float* out, const Shape& out_shape);

/// out[r, n] = clamp(sum_k in[r, k] * W(k, n) + bias[n], min, max), with W given as [N, K] (w_is_nk, the
/// fully-connected layout) or [K, N]. `bias` may be null.
void linear_f32(const float* in, size_t rows, size_t k, const float* w, bool w_is_nk, size_t n, const float* bias,
                float out_min, float out_max, float* out);

/// Element-wise fp32 unary ops (the kinds XNNPACK 2022 lacks, plus the rest as a fallback). `scalar` is
/// the LeakyReLU slope / ELU alpha; min/max clamp the result (Clamp itself uses them as its bounds).
void unary_f32(NodeKind kind, const float* in, float* out, size_t n, float scalar, float out_min, float out_max);
bool unary_f32_supported(NodeKind kind);

/// Element-wise fp32 binary ops with numpy broadcasting (Add..Maximum, PReLU with the slope as `b`).
void binary_f32(NodeKind kind, const float* a, const Shape& a_shape, const float* b, const Shape& b_shape, float* out,
                const Shape& out_shape, float out_min, float out_max);
bool binary_f32_supported(NodeKind kind);

/// Dynamic per-row int8 quantization (XNNPACK's asymmetric qd8 scheme): each row of `cols` floats gets a
/// scale and zero point from its range (always including 0).
DynamicQuantParams compute_dynamic_quant_params(float min, float max);
void quantize_dynamic_rows(const float* in, size_t rows, size_t cols, int8_t* out, DynamicQuantParams* params);

/// Weights of a dynamically quantized fully-connected layer, packed at load for the int8 GEMM in one of two
/// layouts. Pairs: blocks of 8 units, each k pair of a unit stored as two int8 (sign-extended to the int16 pairs
/// of a multiply-add when loaded: int8 halves the bytes each call streams, which bound the few-row products of a
/// decoder). Quads, when packed on a CPU with AVX-512 VNNI: blocks of 16 units x 4 consecutive k, one 64-byte
/// vector that vpdpbusd multiplies by four activation bytes (offset by 128 to be unsigned) per 32-bit lane, four
/// times the products per instruction. Both give the same int32 sums; a layout packed for a level above the
/// current one runs on its portable loop. Per-channel weights have one scale per unit; blockwise ones (4-bit,
/// "group" quantization) one per unit and group of `group_size` consecutive k.
class QD8Weights {
 public:
  QD8Weights() = default;
  /// `w_nk`: int8 [n, k] row-major (4-bit weights already unpacked); `scales`: n per-unit scales, or with
  /// group_size > 0, [n, k / group_size] scales; `bias`: n floats or null.
  QD8Weights(const int8_t* w_nk, size_t n, size_t k, const float* scales, const float* bias, size_t group_size = 0);

  size_t n() const { return n_; }
  size_t k() const { return k_; }
  size_t k_pairs() const { return (k_ + 1) / 2; }
  size_t k_quads() const { return (k_ + 3) / 4; }
  size_t blocks() const { return (n_ + 7) / 8; }
  size_t group_size() const { return group_size_; }  ///< 0: per-channel
  size_t groups() const { return group_size_ == 0 ? 1 : k_ / group_size_; }
  bool quads() const { return quads_; }  ///< the layout: quads (AVX-512 VNNI) or pairs
  /// Pairs: the 8 units of block b. Quads: the 16 units of blocks b and b + 1 (b even).
  const int8_t* block(size_t b) const {
    return packed_.data() + (quads_ ? (b / 2) * k_quads() * 64 : b * k_pairs() * 16);
  }
  /// [n, groups()] scales and sums of each unit's weights over each group (one group: the whole row).
  const float* scales() const { return scales_.data(); }
  const int32_t* row_sums() const { return row_sums_.data(); }
  const float* bias() const { return bias_.empty() ? nullptr : bias_.data(); }
  /// Bytes of the packed weights and their parameters.
  size_t bytes() const {
    return packed_.size() + (scales_.size() + bias_.size()) * sizeof(float) + row_sums_.size() * sizeof(int32_t);
  }
  /// Everything the GEMM reads, for compute::WeightCache.
  compute::WeightBytes content() const {
    using compute::bytes_of;
    return {bytes_of(n_),      bytes_of(k_),        bytes_of(group_size_), bytes_of(quads_), bytes_of(packed_),
            bytes_of(scales_), bytes_of(row_sums_), bytes_of(bias_)};
  }

 private:
  size_t n_ = 0, k_ = 0, group_size_ = 0;
  bool quads_ = false;
  std::vector<int8_t> packed_;
  std::vector<float> scales_;
  std::vector<int32_t> row_sums_;
  std::vector<float> bias_;
};

/// out[r, n] = clamp((sum_k (q[r,k] - zp_r) * w[n,k]) * scale_r * wscale[n] + bias[n], min, max).
/// `scratch` must hold qd8_scratch_ints(rows, w) int32s.
void fully_connected_qd8_f32(const int8_t* in, const DynamicQuantParams* params, size_t rows, const QD8Weights& w,
                             float out_min, float out_max, float* out, int32_t* scratch);
inline size_t qd8_scratch_ints(size_t rows, const QD8Weights& w) { return rows * w.k_pairs(); }

/// A depthwise convolution over signed 8-bit NHWC data (per-tensor or per-channel int8 weights, int32 bias) with
/// XNNPACK's fp32 requantization: out = clamp(round_half_even(float(acc) * scale[c]) + out_zp, min, max), acc
/// the exact int32 sum of bias + (x - in_zp) * w; outside the image x reads as in_zp. Two taps at a time go
/// through one multiply-add of int16 pairs (AVX2), or two widening multiply-adds (NEON); blocks of 8 pixels x 8
/// channels. AVX2 or NEON (supported() is false at the portable level), channels a multiple of 8.
class DepthwiseConvQS8 {
 public:
  struct Params {
    size_t channels = 0, kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1, pad_top = 0, pad_left = 0;
    int8_t in_zero_point = 0, out_zero_point = 0, out_min = -128, out_max = 127;
  };
  /// `filter`: [kh, kw, C] int8; `bias`: C int32 or null; `scales`: C requantization scales (input scale x
  /// weight scale / output scale).
  DepthwiseConvQS8(const int8_t* filter, const int32_t* bias, const float* scales, const Params& params);
  static bool supported(size_t channels, size_t kernel_h);

  /// in [batch, h, w, C] -> out [batch, out_h, out_w, C] (out dims from the caller's shape propagation).
  /// `scratch` keeps the padded input rows between calls.
  void run(const int8_t* in, size_t batch, size_t h, size_t w, size_t out_h, size_t out_w, int8_t* out,
           std::vector<uint8_t>& scratch) const;
  /// Bytes of the repacked weights, bias and scales.
  size_t bytes() const {
    return weights_.size() * sizeof(int16_t) + bias_.size() * sizeof(int32_t) + scales_.size() * sizeof(float) +
           quad_weights_.size() + quad_bias_.size() * sizeof(int32_t) + quad_scales_.size() * sizeof(float);
  }
  /// Everything run() reads (the parameters member by member: Params has padding), for compute::WeightCache.
  compute::WeightBytes content() const {
    using compute::bytes_of;
    return {bytes_of(p_.channels),       bytes_of(p_.kernel_h),      bytes_of(p_.kernel_w), bytes_of(p_.stride_h),
            bytes_of(p_.stride_w),       bytes_of(p_.pad_top),       bytes_of(p_.pad_left), bytes_of(p_.in_zero_point),
            bytes_of(p_.out_zero_point), bytes_of(p_.out_min),       bytes_of(p_.out_max),  bytes_of(tap_pairs_),
            bytes_of(weights_),          bytes_of(bias_),            bytes_of(scales_),     bytes_of(quads_),
            bytes_of(quad_weights_),     bytes_of(quad_bias_),       bytes_of(quad_scales_)};
  }

 private:
  void run_rows(const int8_t* in, size_t h, size_t w, size_t out_w, size_t y0, size_t y1, int8_t* out,
                int8_t* rows) const;

  Params p_;
  size_t tap_pairs_ = 0;
  std::vector<int16_t> weights_;  ///< [tap pairs][C][2]: taps 2i and 2i + 1 of each channel side by side.
  std::vector<int32_t> bias_;     ///< bias - in_zp * sum of the channel's taps
  std::vector<float> scales_;
  /// The AVX-512 VNNI kernel's packing (x86-64, made only where that kernel runs; quads_ 0 otherwise): taps in
  /// quads, 64 channels a block, zero past the taps and the channels. Per block, quad q and sum k, 64 bytes: byte
  /// 4j + i is tap 4q + i of the block's channel 16 (j / 4) + 4k + j % 4 (the order the kernel's unpacks leave its
  /// inputs in). Bias (less 128 x the taps' sum: the kernel's inputs are unsigned, 128 more) and scales per block in
  /// the same channel order, entry 16k + j.
  size_t quads_ = 0;
  std::vector<int8_t> quad_weights_;
  std::vector<int32_t> quad_bias_;
  std::vector<float> quad_scales_;
};

/// Requantizes int8/uint8 data between two per-tensor parameter sets (and converts to/from fp32):
/// q_out = clamp(round((q_in - zp_in) * scale_in / scale_out) + zp_out).
void requantize_s8(const int8_t* in, int8_t* out, size_t n, float in_scale, int32_t in_zp, float out_scale,
                   int32_t out_zp);

/// Per-tensor affine 8-bit data: signed (qint8) or unsigned (quint8).
struct Quant8 {
  bool is_unsigned = false;
  float scale = 1.0f;
  int32_t zero_point = 0;
  int32_t qmin() const { return is_unsigned ? 0 : -128; }
  int32_t qmax() const { return is_unsigned ? 255 : 127; }
};
/// out = round(in / scale) + zero_point, saturated (NaN maps to the zero point).
void quantize_q8(const float* in, void* out, size_t n, const Quant8& q);
void dequantize_q8(const void* in, float* out, size_t n, const Quant8& q);
/// A table over all 256 input codes: out code for each input code (index = the code's byte value).
void apply_q8_table(const uint8_t* table, const void* in, void* out, size_t n);

/// Quantizes a float bound to the int8/uint8 range of a per-tensor quantized value (saturating; infinities
/// map to the ends of the range).
int32_t quantize_bound(float value, float scale, int32_t zero_point, int32_t qmin, int32_t qmax);

}  // namespace etnp::xnn
