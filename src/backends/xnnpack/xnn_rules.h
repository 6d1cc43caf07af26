// The rules that decide, per node kind (the `rule` column of xnn_node_kinds.inc), whether the delegate runs a
// node and with what. Each rule is two functions over the node after shape propagation and clamp fusion:
//   check_<rule>: whether it is supported (no XNNPACK object is created, no weight is packed);
//   build_<rule>: the node's step, called only for nodes their check accepted.
// Both take their decisions from the same predicates, so a check that passes means the build succeeds (short
// of XNNPACK refusing to create an operator). Units: xnn_rules_elementwise.cpp (binary, unary, softmax,
// PReLU), xnn_rules_quant.cpp (conversions, 8-bit tables), xnn_rules_shape.cpp (copies, transposes, slices,
// pads, concatenation), xnn_rules_matmul.cpp (fully-connected, batch matmul), xnn_rules_conv.cpp
// (convolutions, pooling, resize).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/xnnpack/xnn_graph.h"
#include "backends/xnnpack/xnn_kernels.h"
#include "backends/xnnpack/xnn_ops.h"
#include "backends/xnnpack/xnn_steps.h"

namespace etnp::xnn {

/// A node with its graph's values and the load-time shapes.
struct NodeView {
  const Node& node;
  const std::vector<Value>& values;
  const Shape* shapes;

  const Value& in(size_t i) const { return values[node.inputs[i]]; }
  const Value& out(size_t i = 0) const { return values[node.outputs[i]]; }
  /// An optional input (a bias): nullptr when absent.
  const Value* optional_in(size_t i) const {
    return node.inputs[i] == kInvalidId ? nullptr : &values[node.inputs[i]];
  }
  uint32_t in_id(size_t i) const { return node.inputs[i]; }
  uint32_t out_id(size_t i = 0) const { return node.outputs[i]; }
  bool is_constant(uint32_t id) const { return id != kInvalidId && values[id].is_constant(); }
};

/// A check's answer: std::nullopt when the node is supported; otherwise why not ("" when its types are the
/// reason: the message lists them).
using Refusal = std::optional<std::string>;
inline const Refusal kSupported = std::nullopt;
inline Refusal refuse(std::string why = {}) { return Refusal(std::move(why)); }

/// Where a rule's build puts what it makes; the executor owns all of it.
struct StepBuilder {
  const NodeView& view;
  std::vector<std::unique_ptr<Step>>& steps;
  size_t& xnnpack_operators;
  size_t& own_kernels;
  PackedWeights& packed;  ///< weights the own kernels packed: steps keep packed.hold(...)'s pointer
  /// Copies a constant the step reads at run time into storage the executor owns (no-op for other values).
  std::function<void(uint32_t id)> keep;
  Engines engines = Engines::Measured;

  /// For a node both can run (XNNPACK's operator exists in this build): whether XNNPACK runs it.
  /// `library_measured_faster`: the measured choice (README.md, "What runs where").
  bool use_library(bool library_measured_faster) const {
    return engines == Engines::Library || (engines == Engines::Measured && library_measured_faster);
  }

  void add_xnn(const char* what, XnnStep::Create create, XnnStep::Setup setup, XnnStep::Key key = nullptr);
  /// `runner`: what the step's profile label says ran it.
  void add_own(OwnStep::Run run, OwnStep::Reshape reshape = nullptr, const char* runner = "own kernel");
};

#define XNN_NODE_KIND(kind, name, member, layout, shape, rule, traits) \
  Refusal check_##rule(const NodeView& v);                             \
  void build_##rule(StepBuilder& b);
#include "backends/xnnpack/xnn_node_kinds.inc"
#undef XNN_NODE_KIND

/// A depthwise fp32 convolution (the builder's node) whose output only `next`, a 1x1 convolution, reads: both as one
/// step (compute::depthwise_then_pointwise), and true; false, with nothing built, for any other pair.
bool build_depthwise_pointwise(StepBuilder& b, const NodeView& next);

/// Every node's common check, then its rule's.
Refusal check_node(const NodeView& v);
void build_node(StepBuilder& b);
/// "node 3 (XNNConv2d) with types (qint8, qint8, none -> qint8) is not supported by this runtime: why"
std::string refusal_message(const NodeView& v, const std::string& why);

// ---- the measured choices ----------------------------------------------------------------------------
// For each node both XNNPACK and the delegate can run, whether this build's XNNPACK ran it faster than the
// delegate's kernel (bench/xnnpack_engines.cpp on the machines measured; the delegate's README, "What runs
// where", has the figures). StepBuilder::use_library applies them unless ETNP_XNNPACK_ENGINE says otherwise.
namespace measured {
/// The unary functions the 2022 library lacks (tanh, exp, log, gelu, rsqrt, sin, cos): 1.1-50x faster.
bool library_unary_faster();
/// Softmax: 1.5-4x faster on both releases.
bool library_softmax_faster();
/// fp32 fully-connected layers (and so 1x1 convolutions) with constant weights: the delegate's GEMM is
/// 1.4-2.9x faster on both releases.
bool library_fully_connected_f32_faster();
/// Dynamically quantized fully-connected layers with int8 (qcint8) or 4-bit (qcint4, qbint4 in groups of
/// `group_size`) weights.
bool library_fully_connected_qd8_faster(DataType weights, size_t group_size, size_t k);
/// fp32 batch matrix multiplication: the delegate's is 1.3-3.3x faster.
bool library_batch_matmul_f32_faster();
/// int8 convolutions with one group and int8 fully-connected layers, where the delegate's kernel runs
/// (ConvQS8::supported(): AVX2, or AVX-512 VNNI): the delegate's is 1.2-1.8x faster with AVX2, 1.5-2x with VNNI.
bool library_int8_product_faster();
}  // namespace measured

// ---- shared by the rules -----------------------------------------------------------------------------

inline constexpr float kInf = std::numeric_limits<float>::infinity();

inline bool is_f32(const Value& v) { return v.dtype == DataType::fp32; }
inline bool is_qs8(const Value& v) { return v.dtype == DataType::qint8 && v.quant == QuantKind::PerTensor; }
inline bool is_q8(const Value& v) {
  return (v.dtype == DataType::qint8 || v.dtype == DataType::quint8) && v.quant == QuantKind::PerTensor;
}
inline Quant8 quant8(const Value& v) { return Quant8{v.dtype == DataType::quint8, v.scale, v.zero_point}; }
inline bool same_quant(const Value& a, const Value& b) {
  return a.dtype == b.dtype && a.scale == b.scale && a.zero_point == b.zero_point;
}
inline ops::QParams qparams(const Value& v) { return ops::QParams{v.scale, static_cast<int8_t>(v.zero_point)}; }

/// The node's output range in the int8 codes of `out`.
struct Q8Range {
  int8_t lo, hi;
  bool empty() const { return lo >= hi; }
};
Q8Range q8_range(const Node& node, const Value& out);
/// The requantization scale of each of `channels` outputs of an int8 product, computed as XNNPACK computes it (in
/// float): input scale x weight scale (the channel's, or the tensor's) / output scale.
std::vector<float> requantization_scales(const Value& x, const Value& w, const Value& out, size_t channels);
/// Refuses a node whose output range is empty once quantized to `out`'s codes.
Refusal check_q8_range(const NodeView& v, const Value& out);
/// Refuses a requantization scale ratio outside XNNPACK's [lo, hi).
Refusal check_scale_ratio(double ratio, double lo, double hi, const char* what);

/// Refuses `id` (an optional input: kInvalidId passes) unless it is a constant: "<what> must be constant".
Refusal check_constant(const NodeView& v, uint32_t id, const char* what);
/// Refuses int8 weights `w` whose requantization ratio x.scale * w.scale / out.scale XNNPACK cannot take.
Refusal check_requantization(const Value& x, const Value& w, const Value& out);

/// 8-bit unary nodes (other than a clamp XNNPACK runs on int8) become a 256-entry table built through the fp32
/// function: exact for every input code. The unary rules take this path first.
bool q8_table_applies(const NodeView& v);
void build_q8_table(StepBuilder& b);

}  // namespace etnp::xnn
