// Rules for nodes that move bytes without arithmetic: copies and reshapes, transposes, slices, constant pads
// and concatenation, on any 1/2/4-byte element type.
#include <array>
#include <cstring>

#include "backends/xnnpack/xnn_rules.h"

namespace etnp::xnn {
namespace {

/// Bytes per element of input 0 when the node may move it as plain bytes (same type out), else 0.
size_t movable_element_size(const NodeView& v) {
  const size_t elem = datatype_size(v.in(0).dtype);
  if (v.in(0).dtype != v.out().dtype || v.in(0).dtype == DataType::qdint8) return 0;
  return elem;
}

}  // namespace

// ---- copy and reshape (views of their input when planned so; xnn_executor.cpp) -------------------------

Refusal check_copy(const NodeView& v) {
  return v.in(0).dtype == v.out().dtype && datatype_size(v.in(0).dtype) != 0 ? kSupported : refuse();
}

void build_copy(StepBuilder& b) {
  const uint32_t in0 = b.view.in_id(0), out0 = b.view.out_id();
  b.keep(in0);
  const Value xv = b.view.in(0);
  b.add_own([=](const RunContext& c) {
    if (c.data[in0] != c.data[out0]) std::memcpy(c.data[out0], c.data[in0], value_storage_bytes(xv, c.shapes[in0]));
  });
}

// ---- transpose, slice ------------------------------------------------------------------------------------

Refusal check_transpose(const NodeView& v) { return movable_element_size(v) != 0 ? kSupported : refuse(); }

void build_transpose(StepBuilder& b) {
  const uint32_t in0 = b.view.in_id(0), out0 = b.view.out_id();
  const size_t elem = movable_element_size(b.view);
  b.keep(in0);
  const std::vector<size_t> perm = b.view.node.list_a;
  b.add_own([=](const RunContext& c) {
    if (c.data[in0] == c.data[out0]) return;  // planned as a view (only size-1 dims move)
    transpose(c.data[in0], c.data[out0], c.shapes[in0], perm, elem);
  });
}

Refusal check_slice(const NodeView& v) { return check_transpose(v); }

void build_slice(StepBuilder& b) {
  const uint32_t in0 = b.view.in_id(0), out0 = b.view.out_id();
  const size_t elem = movable_element_size(b.view);
  b.keep(in0);
  const std::vector<size_t> offsets = b.view.node.list_a;
  b.add_own([=](const RunContext& c) {
    slice(c.data[in0], c.shapes[in0], offsets, c.shapes[out0], c.data[out0], elem);
  });
}

// ---- constant pad: the padding value as one element's bytes ---------------------------------------------

Refusal check_pad(const NodeView& v) {
  if (movable_element_size(v) == 0) return refuse();
  if (!is_f32(v.in(0)) && !is_qs8(v.in(0)) && v.node.scalar != 0.0f) return refuse("non-zero padding value");
  return kSupported;
}

void build_pad(StepBuilder& b) {
  const NodeView& v = b.view;
  const uint32_t in0 = v.in_id(0), out0 = v.out_id();
  const size_t elem = movable_element_size(v);
  b.keep(in0);
  std::array<uint8_t, 8> pad{};
  if (is_f32(v.in(0))) {
    std::memcpy(pad.data(), &v.node.scalar, sizeof(float));
  } else if (is_qs8(v.in(0))) {
    pad[0] = static_cast<uint8_t>(
        static_cast<int8_t>(quantize_bound(v.node.scalar, v.in(0).scale, v.in(0).zero_point, -128, 127)));
  }
  const std::vector<size_t> pre = v.node.list_a;
  b.add_own([=](const RunContext& c) {
    constant_pad(c.data[in0], c.shapes[in0], pre, c.shapes[out0], pad.data(), c.data[out0], elem);
  });
}

// ---- concatenate: up to five inputs of one type and quantization ----------------------------------------

Refusal check_concatenate(const NodeView& v) {
  if (datatype_size(v.in(0).dtype) == 0 || v.in(0).dtype == DataType::qdint8) return refuse();
  for (size_t i = 0; i < v.node.inputs.size(); ++i) {
    if (v.in(i).dtype != v.out().dtype || (v.in(i).quant == QuantKind::PerTensor && !same_quant(v.in(i), v.out()))) {
      return refuse("inputs and output must share datatype and quantization");
    }
  }
  return kSupported;
}

void build_concatenate(StepBuilder& b) {
  const NodeView& v = b.view;
  const size_t elem = datatype_size(v.in(0).dtype);
  for (uint32_t in : v.node.inputs) b.keep(in);
  const std::vector<uint32_t> ins = v.node.inputs;
  const uint32_t out0 = v.out_id();
  const size_t axis = v.node.axis;
  b.add_own([=](const RunContext& c) {
    const void* ptrs[5];
    Shape shapes[5];
    for (size_t i = 0; i < ins.size(); ++i) {
      ptrs[i] = c.data[ins[i]];
      shapes[i] = c.shapes[ins[i]];
    }
    concatenate(std::span<const void* const>(ptrs, ins.size()), std::span<const Shape>(shapes, ins.size()), axis,
                c.data[out0], elem);
  });
}

}  // namespace etnp::xnn
