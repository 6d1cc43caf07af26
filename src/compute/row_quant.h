// Per-row parameters of dynamically quantized activations.
#pragma once

#include <cstdint>

namespace etnp::compute {

/// One row's scale and zero point, in XNNPACK's `xnn_quantization_params` layout (the qdint8 tensors of the
/// XNNPACK delegate store them after their codes, so that its qd8 operators read them in place):
/// value = (code - zero_point) * scale.
struct RowQuantParams {
  int32_t zero_point;
  float scale;
};

}  // namespace etnp::compute
