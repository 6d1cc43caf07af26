// Shape propagation for XNNGraph nodes (physical dims). The 2022 XNNPACK has no reshape support, so the
// delegate computes every value's shape itself from the actual input shapes.
#pragma once

#include <span>
#include <string>

#include "backends/xnnpack/xnn_graph.h"

namespace etnp::xnn {

/// Computes the shapes of `node`'s outputs into `shapes` (indexed by value) from its inputs' shapes, and
/// checks the node's parameters against them. Returns an empty string, or what is wrong.
std::string infer_node_shapes(const Graph& graph, const Node& node, std::span<Shape> shapes);

/// Output size of a sliding window along one dimension, or 0 when the window does not fit.
size_t window_output_size(size_t input, uint32_t pad_before, uint32_t pad_after, uint32_t kernel, uint32_t stride,
                          uint32_t dilation);

/// Broadcasts two shapes numpy-style; false when they are incompatible.
bool broadcast_shape(const Shape& a, const Shape& b, Shape& out);

}  // namespace etnp::xnn
