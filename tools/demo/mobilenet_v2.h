// MobileNetV2 (torchvision's architecture, width 1.0, batch norm folded into the convolutions) with seeded
// weights, written as .pte programs by etnp's own writer: one with the whole network in a single XNNPACK
// delegate, one with portable operators only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/writer/writer.h"

namespace etnp::demo {

/// A parameter tensor in PyTorch's layout (OIHW for convolutions, [out, in] for the classifier), named as in
/// torchvision's state_dict ("features.0.0.weight"; folded biases get "<conv>.bias").
struct Parameter {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;
};

/// One convolution of the network: NCHW semantics, always with a (folded) bias, optionally ReLU6.
struct ConvLayer {
  int32_t in_channels = 0, out_channels = 0, kernel = 1, stride = 1, padding = 0, groups = 1;
  bool relu6 = false;
  size_t weight = 0, bias = 0;  ///< Indices into MobileNetV2::parameters.
  int32_t in_size = 0, out_size = 0;  ///< Spatial size (square) before and after.
};

/// The layers in execution order. A residual block adds its input to its last convolution's output.
struct Step {
  enum class Kind : uint8_t { Conv, SaveResidual, AddResidual } kind = Kind::Conv;
  ConvLayer conv;
};

struct MobileNetV2 {
  std::vector<Parameter> parameters;
  std::vector<Step> steps;
  size_t classifier_weight = 0, classifier_bias = 0;
  int32_t num_classes = 1000;
  int32_t image_size = 224;
  int32_t last_channels = 1280;
};

/// Builds the network with He-style initialisation from `seed` (same seed, same weights, on every platform).
/// Batch norm parameters are drawn too and folded, so the weights are those of a trained-looking Conv-BN pair.
MobileNetV2 build_mobilenet_v2(uint64_t seed, int32_t num_classes = 1000);

/// The whole network in one XNNPACK delegate: NCHW float input [1, 3, 224, 224], transposed to NHWC inside
/// the delegate; output [1, num_classes]. With `constants_in_ptd` the weights go to the writer's external data.
void write_xnnpack_program(const MobileNetV2& net, format::ProgramWriter& writer, bool constants_in_ptd = false);

/// Portable operators only: aten::convolution.out, aten::hardtanh.out, aten::add.out, aten::mean.out and
/// aten::addmm.out (the flatten is a planned view of the pooled tensor).
void write_portable_program(const MobileNetV2& net, format::ProgramWriter& writer);

/// Writes every parameter as float32 into one file, and a JSON index
/// {"parameters": [{"name", "shape", "offset"}...], "seed", "num_classes"} next to it.
void write_weights(const MobileNetV2& net, uint64_t seed, const std::string& bin_path, const std::string& json_path);

}  // namespace etnp::demo
