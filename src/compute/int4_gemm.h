// The product of dynamically quantized int8 activations (one scale and zero point per row) and 4-bit weights
// (per output channel, or in groups of k): the "8da4w" linear layers of language models. Decoding multiplies
// one row at a time, so the weights' bytes are what bounds it: they stay 4-bit in memory (half the bytes of
// an int8 copy) and are widened in registers.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "compute/large_pages.h"
#include "compute/row_quant.h"
#include "compute/weight_cache.h"

namespace etnp {
class ThreadPool;
}

namespace etnp::compute {

/// 4-bit weights [n, k], packed at load. Blocks of 8 output channels, in panels of 4 blocks (the last panel may
/// hold fewer). For every 8 consecutive k a panel stores 32 bytes per block, one block after the other, so
/// that a decoding step reads each panel as one sequential stream. In a block's 32 bytes, byte j holds
/// channel j / 4's values at k + j % 4 (low nibble) and k + 4 + j % 4 (high nibble), stored as w + 8
/// (0..15): widening the low and the high nibbles gives two vectors whose 32-bit lanes are the 8 channels'
/// four k each, so one unsigned x signed byte multiply-add per four k serves eight channels. Scales are
/// [n, groups] (a channel has one group, its whole row, for per-channel weights), stored per panel and group
/// (8 per block), as bfloat16 when every one of them is a bfloat16 value (the block scales of ExecuTorch's
/// 8da4w are), so that a decoding step reads 1/16 byte of scale per weight rather than 1/8. The activations'
/// zero point meets the weights through one float per channel: the sum over groups of scale times the
/// group's weight sum.
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
  static constexpr size_t kPanelBlocks = 4;
  /// Blocks in block b's panel.
  size_t panel_blocks(size_t b) const { return std::min(kPanelBlocks, blocks() - b / kPanelBlocks * kPanelBlocks); }
  /// Block b's 32 bytes of its first 8 k; those of the next 8 k follow run_stride(b) bytes on.
  const uint8_t* block(size_t b) const { return packed_.data() + offset(b, 0); }
  size_t run_stride(size_t b) const { return panel_blocks(b) * 32; }
  /// Block b's 8 scales of group g: bfloat16 (the high halves of the floats) when bf16_scales(), else floats.
  bool bf16_scales() const { return !scales_bf16_.empty(); }
  const uint16_t* scales_bf16(size_t b, size_t g) const { return scales_bf16_.data() + scale_index(b, g); }
  const float* scales_f32(size_t b, size_t g) const { return scales_f32_.data() + scale_index(b, g); }
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
  size_t offset(size_t b, size_t k8) const {
    const size_t panel = b / kPanelBlocks;
    return panel * kPanelBlocks * k_ * 4 + k8 / 8 * run_stride(b) + b % kPanelBlocks * 32;
  }
  size_t scale_index(size_t b, size_t g) const {
    const size_t panel = b / kPanelBlocks;
    return panel * kPanelBlocks * groups() * 8 + g * panel_blocks(b) * 8 + b % kPanelBlocks * 8;
  }

  size_t n_ = 0, k_ = 0, group_size_ = 0;
  std::vector<uint8_t, LargePageAllocator<uint8_t>> packed_;
  std::vector<uint16_t> scales_bf16_;  // per panel [groups][panel blocks][8], 0 past n; or empty
  std::vector<float> scales_f32_;      // the same layout, where some scale is not a bfloat16
  std::vector<float> zp_terms_;        // [blocks * 8]
  std::vector<float> bias_;
};

/// out[r, j] = clamp((sum_c float(sum_{k in c} x[r,k] * w[j,k]) * scale[j,g(c)] - zp_r * zp_term[j]) * scale_r
///                    + bias[j], lo, hi),
/// c the runs of 32 consecutive k (g(c) the group holding run c): the run sums exact in int32, folded in
/// float in k order with one fused multiply-add each, starting from -zp_r * zp_term[j] (so every
/// implementation gives the same bits). `scratch` holds int4_gemm_scratch_ints(rows, w) int32s. With `pool`
/// (not nullptr) the channel blocks are split across its threads when the product is large enough to gain.
void gemm_qd8_int4_f32(const int8_t* x, const RowQuantParams* params, size_t rows, const Int4Weights& w,
                       float out_min, float out_max, float* out, int32_t* scratch, ThreadPool* pool);
inline size_t int4_gemm_scratch_ints(size_t rows, const Int4Weights& w) { return rows * (w.k() / 32); }

/// The level whose implementation runs (cpu_level_name: "avx512_vnni", "avx2_fma", "neon_i8mm", "neon_dotprod",
/// "neon" or "portable"; every level has one), for tests and benchmarks.
const char* int4_gemm_kernel_name();

}  // namespace etnp::compute
