// The delegate's own int8 convolution (one group, any kernel, stride, dilation and padding) on x86-64 with AVX2,
// with XNNPACK's fp32 requantization so that its bytes are XNNPACK's. With AVX-512 VNNI it sums four u8 x s8
// products per 32-bit lane in one vpdpbusd (Debian's 2022 XNNPACK widens to int16 and sums two, vpmaddwd); with
// AVX2 it sums two int16 products per lane as XNNPACK does, but packs its weights in a plain copy at load (XNNPACK
// 2022's qc8 packing was most of an int8 network's load) and keeps tiles of 6 pixels x 16 outputs in registers.
// Other CPUs keep XNNPACK's operator (supported() is false).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "compute/weight_cache.h"

namespace etnp::xnn {

/// out = clamp(round_half_even(float(acc) * scale[n]) + out_zp, min, max), acc the exact int32 sum of bias[n] +
/// sum over the patch of (x - in_zp) * w[n]; taps outside the image read x = in_zp.
///
/// How: each output pixel's patch is gathered once per call into a row, padded to a whole group of patch positions;
/// the weights are packed at load in blocks of outputs x one group of consecutive patch positions (one vector),
/// and the bias absorbs the input's offset. AVX-512 VNNI: rows of bytes x ^ 0x80 = x + 128 (unsigned, as vpdpbusd
/// takes its first operand), blocks of 16 outputs x 4 positions (64 bytes), bias[n] - (in_zp + 128) * sum(w[n]).
/// AVX2: rows of int16 x, blocks of 8 outputs x 2 positions (16 bytes, widened to int16 as they load, for
/// vpmaddwd), bias[n] - in_zp * sum(w[n]). Integer sums wrap modulo 2^32 like XNNPACK's, so every int32 is
/// XNNPACK's.
class ConvQS8 {
 public:
  struct Params {
    size_t in_channels = 0, out_channels = 0;
    size_t kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1;
    size_t pad_top = 0, pad_left = 0;
    int8_t in_zero_point = 0, out_zero_point = 0, out_min = -128, out_max = 127;
  };
  /// `filter`: [out_channels, kernel_h, kernel_w, in_channels] int8 (zero point 0); `bias`: out_channels int32 or
  /// null; `scales`: out_channels requantization scales (input scale x weight scale / output scale).
  ConvQS8(const int8_t* filter, const int32_t* bias, const float* scales, const Params& params);
  /// Whether this CPU (at the current cpu_level()) runs the kernel: AVX2 and FMA, or AVX-512 with VNNI. The
  /// constructor packs for the level current then, and run() uses that level's tiles.
  static bool supported();

  /// in [batch, h, w, in_channels] -> out [batch, out_h, out_w, out_channels] (out dims from the caller's shape
  /// propagation). `scratch` keeps the gathered patch rows between calls.
  void run(const int8_t* in, size_t batch, size_t h, size_t w, size_t out_h, size_t out_w, int8_t* out,
           std::vector<uint8_t>& scratch) const;

  /// Bytes of the packed weights, bias and scales.
  size_t bytes() const { return packed_.size() + bias_.size() * sizeof(int32_t) + scales_.size() * sizeof(float); }
  /// Everything run() reads (the parameters member by member: Params has padding), for compute::WeightCache.
  compute::WeightBytes content() const {
    using compute::bytes_of;
    return {bytes_of(vnni_),          bytes_of(p_.in_channels),    bytes_of(p_.out_channels), bytes_of(p_.kernel_h),
            bytes_of(p_.kernel_w),    bytes_of(p_.stride_h),       bytes_of(p_.stride_w),     bytes_of(p_.dilation_h),
            bytes_of(p_.dilation_w),  bytes_of(p_.pad_top),        bytes_of(p_.pad_left),     bytes_of(p_.in_zero_point),
            bytes_of(p_.out_zero_point), bytes_of(p_.out_min),     bytes_of(p_.out_max),      bytes_of(packed_),
            bytes_of(bias_),          bytes_of(scales_)};
  }

 private:
  Params p_;
  /// Packed for (and run with) the AVX-512 VNNI tiles (blocks of 16 outputs, groups of 4 patch positions), else
  /// the AVX2 ones (8 and 2).
  bool vnni_ = false;
  size_t patch_ = 0;            ///< patch positions: kernel_h x kernel_w x in_channels
  size_t groups_ = 0;           ///< groups of patch positions per row, the last padded
  size_t blocks_ = 0;           ///< blocks of outputs, the last padded
  size_t row_elems_ = 0;        ///< one gathered row: groups_ whole groups (bytes for VNNI, int16 for AVX2)
  std::vector<int8_t> packed_;  ///< [blocks_][groups_][block outputs][group patch positions]
  std::vector<int32_t> bias_;   ///< blocks_ x block, the offset absorbed
  std::vector<float> scales_;   ///< blocks_ x block
};

}  // namespace etnp::xnn
