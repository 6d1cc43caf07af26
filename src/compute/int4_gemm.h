// The product of dynamically quantized int8 activations (one scale and zero point per row) and 4-bit weights
// (per output channel, or in groups of k): the "8da4w" linear layers of language models. Decoding multiplies
// one row at a time, so the weights' bytes are what bounds it: they stay 4-bit in memory (half the bytes of
// an int8 copy) and are widened in registers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "compute/row_quant.h"
#include "compute/weight_cache.h"

namespace etnp {
class ThreadPool;
}

namespace etnp::compute {

/// 4-bit weights [n, k], packed at load. Blocks of 8 output channels; within a block, every 8 consecutive k
/// are 32 bytes: byte j holds channel j / 4's values at k + j % 4 (low nibble) and k + 4 + j % 4 (high
/// nibble), stored as w + 8 (0..15). Widening the low and the high nibbles of those 32 bytes gives two
/// vectors whose 32-bit lanes are the 8 channels' four k each, so one unsigned x signed byte multiply-add
/// per four k serves eight channels. Scales are [n, groups] (a channel has one group, its whole row, for
/// per-channel weights), kept as bfloat16 when every one of them is a bfloat16 value (the block scales of
/// ExecuTorch's 8da4w are), so that a decoding step reads 1/16 byte of scale per weight rather than 1/8.
/// The activations' zero point meets the weights through one float per channel: the sum over groups of
/// scale times the group's weight sum.
class Int4Weights {
 public:
  /// The shapes this packing takes: k a multiple of 32, and groups (group_size > 0) a multiple of 32 that
  /// divides k. Other 4-bit layers use the int8 packing of their caller.
  static bool supports(size_t k, size_t group_size);

  Int4Weights() = default;
  /// `w_nk`: [n, k] values in -8..7; `scales`: n per-channel scales, or with group_size > 0 [n, k / group_size];
  /// `bias`: n floats or null. Requires supports(k, group_size).
  Int4Weights(const int8_t* w_nk, size_t n, size_t k, const float* scales, const float* bias, size_t group_size);

  size_t n() const { return n_; }
  size_t k() const { return k_; }
  size_t blocks() const { return (n_ + 7) / 8; }
  /// k per group (the whole row for per-channel weights).
  size_t group_k() const { return group_size_ == 0 ? k_ : group_size_; }
  size_t groups() const { return k_ / group_k(); }
  /// Block b's packed weights: k / 8 runs of 32 bytes.
  const uint8_t* block(size_t b) const { return packed_.data() + b * k_ * 4; }
  /// Block b's 8 scales of group g: bfloat16 (the high halves of the floats) when bf16_scales(), else floats.
  bool bf16_scales() const { return !scales_bf16_.empty(); }
  const uint16_t* scales_bf16(size_t b, size_t g) const { return scales_bf16_.data() + (b * groups() + g) * 8; }
  const float* scales_f32(size_t b, size_t g) const { return scales_f32_.data() + (b * groups() + g) * 8; }
  float scale(size_t j, size_t g) const;
  /// Per channel (8 per block): sum over groups, in group order, of float(weight sum of the group) * scale.
  const float* zero_point_terms(size_t b) const { return zp_terms_.data() + b * 8; }
  const float* bias() const { return bias_.empty() ? nullptr : bias_.data(); }
  size_t bytes() const {
    return packed_.size() + scales_bf16_.size() * sizeof(uint16_t) +
           (scales_f32_.size() + zp_terms_.size() + bias_.size()) * sizeof(float);
  }
  /// Everything the GEMM reads, for WeightCache.
  WeightBytes content() const {
    return {bytes_of(n_),           bytes_of(k_),          bytes_of(group_size_), bytes_of(packed_),
            bytes_of(scales_bf16_), bytes_of(scales_f32_), bytes_of(zp_terms_),   bytes_of(bias_)};
  }

 private:
  size_t n_ = 0, k_ = 0, group_size_ = 0;
  std::vector<uint8_t> packed_;
  std::vector<uint16_t> scales_bf16_;  // [blocks][groups][8], 0 for the channels past n; or empty
  std::vector<float> scales_f32_;      // the same layout, where some scale is not a bfloat16
  std::vector<float> zp_terms_;        // [blocks * 8]
  std::vector<float> bias_;
};

/// out[r, j] = clamp((sum_g float(sum_{k in g} x[r,k] * w[j,k]) * scale[j,g] - zp_r * zp_term[j]) * scale_r
///                    + bias[j], lo, hi),
/// the group sums exact in int32 and folded in float in group order, starting from -zp_r * zp_term[j] (so
/// every implementation gives the same bits). `scratch` holds int4_gemm_scratch_ints(rows, w) int32s. With `pool` (not nullptr) the channel
/// blocks are split across its threads when the product is large enough to gain from it.
void gemm_qd8_int4_f32(const int8_t* x, const RowQuantParams* params, size_t rows, const Int4Weights& w,
                       float out_min, float out_max, float* out, int32_t* scratch, ThreadPool* pool);
inline size_t int4_gemm_scratch_ints(size_t rows, const Int4Weights& w) { return rows * w.groups(); }

/// The implementation in use ("avx2" or "generic"), for tests and benchmarks.
const char* int4_gemm_kernel_name();

}  // namespace etnp::compute
