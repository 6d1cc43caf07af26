// Writes XNNPACK delegate payloads ("XnnpackBackend"): the XH00 header, an XN01 XNNGraph flatbuffer and an
// empty constant region, with every constant stored as named data keyed by the SHA-256 of its bytes, as
// current exporters do (shared/spec/xnnpack-delegate.md §1, §4). Float32 graphs only; the node types are the
// ones convolutional image classifiers need.
//
//   XnnpackGraphWriter g;
//   const uint32_t x = g.input({1, 3, 8, 8}, 0);          // external id = position in the DelegateCall args
//   const uint32_t nhwc = g.internal({1, 8, 8, 3});
//   g.static_transpose({0, 2, 3, 1}, x, nhwc);
//   ...
//   add_xnnpack_delegate(program, method, g.finish(), {input_value, output_value});
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tools/writer/writer.h"

namespace etnp::format {

struct XnnConv2dParams {
  uint32_t kernel_h = 1, kernel_w = 1;
  uint32_t stride_h = 1, stride_w = 1;
  uint32_t pad_top = 0, pad_right = 0, pad_bottom = 0, pad_left = 0;
  uint32_t dilation_h = 1, dilation_w = 1;
  uint32_t groups = 1;
  uint32_t group_input_channels = 0, group_output_channels = 0;
};

struct XnnpackPayload {
  std::vector<uint8_t> bytes;  ///< The delegate payload.
  /// Constants the payload refers to by key; they belong in the program's named data (or a .ptd).
  std::vector<std::pair<std::string, std::vector<uint8_t>>> named_constants;
};

class XnnpackGraphWriter {
 public:
  static constexpr float kNoMin = -std::numeric_limits<float>::infinity();
  static constexpr float kNoMax = std::numeric_limits<float>::infinity();
  static constexpr uint32_t kFlagKeepDims = 0x40;         ///< XNN_FLAG_KEEP_DIMS
  static constexpr uint32_t kFlagTransposeWeights = 0x1;  ///< XNN_FLAG_TRANSPOSE_WEIGHTS

  XnnpackGraphWriter();
  ~XnnpackGraphWriter();
  XnnpackGraphWriter(const XnnpackGraphWriter&) = delete;
  XnnpackGraphWriter& operator=(const XnnpackGraphWriter&) = delete;

  // Values (float32). Each returns the value id nodes refer to. Dims are in XNNPACK's physical order.
  /// `external_id` = the value's position in the DelegateCall's args (inputs first, then outputs).
  uint32_t input(std::vector<uint32_t> dims, uint32_t external_id);
  uint32_t output(std::vector<uint32_t> dims, uint32_t external_id);
  uint32_t internal(std::vector<uint32_t> dims);
  /// A weight or bias: stored once as named data (key = SHA-256 hex of the bytes).
  uint32_t constant(std::vector<uint32_t> dims, std::span<const float> data);

  // Nodes. `min`/`max` clamp the output (fused activation).
  /// `filter` is [out_channels, kh, kw, in_channels_per_group] (OHWI).
  void conv2d(const XnnConv2dParams& p, uint32_t input, uint32_t filter, uint32_t bias, uint32_t output,
              float min = kNoMin, float max = kNoMax);
  /// `filter` is [1, kh, kw, channels * multiplier]; p.groups = input channels, group_input_channels = 1,
  /// group_output_channels = multiplier.
  void depthwise_conv2d(const XnnConv2dParams& p, uint32_t input, uint32_t filter, uint32_t bias, uint32_t output,
                        float min = kNoMin, float max = kNoMax);
  void clamp(uint32_t input, uint32_t output, float min, float max);
  void add(uint32_t a, uint32_t b, uint32_t output, float min = kNoMin, float max = kNoMax);
  /// NHWC mean over H and W; the output keeps the dims ([N, 1, 1, C]).
  void global_avg_pool2d(uint32_t input, uint32_t output, float min = kNoMin, float max = kNoMax);
  /// `filter` is [out_features, in_features] (or [in, out] with kFlagTransposeWeights); `bias` may be
  /// kInvalidId.
  void fully_connected(uint32_t input, uint32_t filter, uint32_t bias, uint32_t output, float min = kNoMin,
                       float max = kNoMax, uint32_t flags = 0);
  void static_transpose(std::vector<uint32_t> perm, uint32_t input, uint32_t output);
  void static_reshape(std::vector<uint32_t> new_shape, uint32_t input, uint32_t output);

  static constexpr uint32_t kInvalidId = 0xFFFFFFFFu;

  size_t num_values() const;
  size_t num_nodes() const;
  /// Serializes the graph. The writer must not be used afterwards.
  XnnpackPayload finish();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

/// Adds the payload's constants to the program's named data (or, with `constants_in_ptd`, to the program
/// writer's external .ptd data) and appends the DelegateCall. Returns the instruction index.
size_t add_xnnpack_delegate(ProgramWriter& program, MethodWriter& method, XnnpackPayload payload,
                            std::vector<int32_t> args, bool constants_in_ptd = false);

}  // namespace etnp::format
