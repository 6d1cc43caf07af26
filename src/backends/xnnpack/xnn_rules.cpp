// The rule table's dispatch (xnn_node_kinds.inc) and what every rule shares.
#include "backends/xnnpack/xnn_rules.h"

#include <algorithm>

#include "compute/int4_gemm.h"

namespace etnp::xnn {

Refusal check_node(const NodeView& v) {
  // XNNPACK asserts (rather than reports) on an empty range, so it is checked here.
  if (!(v.node.output_min < v.node.output_max)) return refuse("the output range is empty");
  switch (v.node.kind) {
#define XNN_NODE_KIND(kind, name, member, layout, shape, rule, traits) \
  case NodeKind::kind:                                                \
    return check_##rule(v);
#include "backends/xnnpack/xnn_node_kinds.inc"
#undef XNN_NODE_KIND
  }
  return refuse("unknown node kind");
}

void build_node(StepBuilder& b) {
  switch (b.view.node.kind) {
#define XNN_NODE_KIND(kind, name, member, layout, shape, rule, traits) \
  case NodeKind::kind:                                                \
    build_##rule(b);                                                   \
    return;
#include "backends/xnnpack/xnn_node_kinds.inc"
#undef XNN_NODE_KIND
  }
}

namespace measured {

// bench/xnnpack_engines.cpp, 2026-12-01, on this project's 2-core Zen 3 machines (figures: README.md, "What
// runs where"). The functions only the 2024 library has are asked about only where it is the one built.
bool library_unary_faster() { return true; }
bool library_softmax_faster() { return true; }
bool library_fully_connected_f32_faster() { return false; }
bool library_fully_connected_qd8_faster(DataType weights, size_t group_size, size_t k) {
  // qcint8: 0.75-0.89 of the delegate's time for one row, equal for 64. 4-bit weights that the delegate keeps
  // 4-bit (compute/int4_gemm.h: k a multiple of 32, groups of 32n): the delegate's kernel. Others (the
  // int8-packed kernel): qcint4 0.73-0.86; qbint4 groups of 32 or 64: 0.7-0.94, of 128 equal to 1.2, of 256
  // 1.05-1.25 (that kernel scales each group once).
  if (weights != DataType::qcint8 && compute::Int4Weights::supports(k, weights == DataType::qbint4 ? group_size : 0)) {
    return false;
  }
  return weights != DataType::qbint4 || group_size < 128;
}
bool library_batch_matmul_f32_faster() { return false; }
// 2026-12-05, Zen 4 with AVX-512 VNNI, Debian 12 (`etnp bench`, whole programs): MobileNetV2 int8 6.36 -> 3.27 ms,
// ResNet-18 int8 2.30 -> 1.1 ms against the 2022 library's operators. The 2024 library was not timed on such a CPU;
// the official runtime's newer XNNPACK, with VNNI kernels of its own, took 3.51 ms on the same MobileNetV2.
// 2026-12-06, Zen 3 with AVX2 (the int16-pair tiles), own time over the library's, fresh processes alternated, 1 / 2
// threads: Debian 12 (2022 library) MobileNetV2 int8 fixture 0.63-0.78 / 0.81-0.88, live ResNet-18 int8
// 0.54-0.56 / 0.69-0.77, live MobileNetV2 int8 0.67-0.75 / 0.74-0.77; Debian 13 (2024 library) 0.86 / 0.74,
// 0.64 / 0.64, 0.68 / 0.80. Loads 4-19 ms shorter (XNNPACK's qc8 weight packing).
bool library_int8_product_faster() { return false; }

}  // namespace measured

std::string refusal_message(const NodeView& v, const std::string& why) {
  std::string types;
  for (uint32_t in : v.node.inputs) {
    types += (types.empty() ? "" : ", ");
    types += in == kInvalidId ? "none" : datatype_name(v.values[in].dtype);
  }
  types += " -> ";
  for (size_t i = 0; i < v.node.outputs.size(); ++i) {
    types += (i ? ", " : "") + std::string(datatype_name(v.out(i).dtype));
  }
  return v.node.describe() + " with types (" + types + ") is not supported by this runtime" +
         (why.empty() ? "" : ": " + why);
}

Q8Range q8_range(const Node& node, const Value& out) {
  auto code = [&](float bound) {
    return static_cast<int8_t>(quantize_bound(bound, out.scale, out.zero_point, -128, 127));
  };
  return Q8Range{code(node.output_min), code(node.output_max)};
}

std::vector<float> requantization_scales(const Value& x, const Value& w, const Value& out, size_t channels) {
  std::vector<float> scales(channels);
  for (size_t c = 0; c < channels; ++c) {
    scales[c] = x.scale * (w.quant == QuantKind::PerChannel ? w.channel_scales[c] : w.scale) / out.scale;
  }
  return scales;
}

Refusal check_q8_range(const NodeView& v, const Value& out) {
  if (q8_range(v.node, out).empty()) return refuse("the output range is empty after quantization");
  return kSupported;
}

Refusal check_scale_ratio(double ratio, double lo, double hi, const char* what) {
  if (!(ratio >= lo && ratio < hi)) {
    return refuse(std::string(what) + " scale ratio " + std::to_string(ratio) + " is outside XNNPACK's range");
  }
  return kSupported;
}

Refusal check_constant(const NodeView& v, uint32_t id, const char* what) {
  if (id != kInvalidId && !v.is_constant(id)) return refuse(std::string(what) + " must be constant");
  return kSupported;
}

Refusal check_requantization(const Value& x, const Value& w, const Value& out) {
  if (w.quant == QuantKind::PerTensor) {
    return check_scale_ratio(double(x.scale) * w.scale / out.scale, 0x1.0p-32, 256.0, "requantization");
  }
  for (float ws : w.channel_scales) {
    if (Refusal r = check_scale_ratio(double(x.scale) * ws / out.scale, 0x1.0p-32, 256.0, "requantization")) return r;
  }
  return kSupported;
}

}  // namespace etnp::xnn
