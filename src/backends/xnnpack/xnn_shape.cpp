#include "backends/xnnpack/xnn_shape.h"

#include <algorithm>

namespace etnp::xnn {
namespace {

std::string dims_mismatch(const char* what, const Shape& got, const std::string& expected) {
  return std::string(what) + " has shape " + got.str() + ", expected " + expected;
}

std::string shape_of(std::initializer_list<size_t> dims) {
  Shape s;
  for (size_t d : dims) s[s.rank++] = d;
  return s.str();
}

std::string infer_conv(const Node& n, std::span<Shape> shapes) {
  const WindowParams& w = n.window;
  const Shape& in = shapes[n.inputs[0]];
  const Shape& filter = shapes[n.inputs[1]];
  if (in.rank != 4) return dims_mismatch("input", in, "rank 4 (NHWC)");
  if (w.kernel_h == 0 || w.kernel_w == 0 || w.stride_h == 0 || w.stride_w == 0 || w.dilation_h == 0 ||
      w.dilation_w == 0 || w.groups == 0 || w.group_input_channels == 0 || w.group_output_channels == 0) {
    return "kernel, stride, dilation, groups and channel counts must be positive";
  }
  size_t in_channels = 0, out_channels = 0;
  if (n.kind == NodeKind::DepthwiseConv2d) {
    if (w.group_output_channels % w.group_input_channels != 0) {
      return "group_output_channels is not a multiple of group_input_channels";
    }
    const size_t multiplier = w.group_output_channels / w.group_input_channels;
    in_channels = w.groups;
    out_channels = size_t{w.groups} * multiplier;
    if (filter != Shape{4, {1, w.kernel_h, w.kernel_w, out_channels}}) {
      return dims_mismatch("filter", filter, shape_of({1, w.kernel_h, w.kernel_w, out_channels}));
    }
  } else {
    in_channels = size_t{w.groups} * w.group_input_channels;
    out_channels = size_t{w.groups} * w.group_output_channels;
    if (filter != Shape{4, {out_channels, w.kernel_h, w.kernel_w, w.group_input_channels}}) {
      return dims_mismatch("filter", filter, shape_of({out_channels, w.kernel_h, w.kernel_w, w.group_input_channels}));
    }
  }
  if (in[3] != in_channels) return dims_mismatch("input", in, "[N, H, W, " + std::to_string(in_channels) + "]");
  if (n.inputs[2] != kInvalidId && shapes[n.inputs[2]].numel() != out_channels) {
    return dims_mismatch("bias", shapes[n.inputs[2]], "[" + std::to_string(out_channels) + "]");
  }
  Shape& out = shapes[n.outputs[0]];
  out.rank = 4;
  out[0] = in[0];
  out[3] = out_channels;
  if (n.kind == NodeKind::ConvTranspose2d) {
    if (w.adjustment_h >= w.stride_h || w.adjustment_w >= w.stride_w) return "adjustment must be below the stride";
    auto deconv = [](size_t x, uint32_t stride, uint32_t adj, uint32_t k, uint32_t dil, uint32_t p0, uint32_t p1,
                     size_t& result) {
      const size_t full = size_t{stride} * (std::max<size_t>(x, 1) - 1) + adj + size_t{dil} * (k - 1) + 1;
      if (full <= size_t{p0} + p1) return false;
      result = x == 0 ? 0 : full - p0 - p1;
      return true;
    };
    if (!deconv(in[1], w.stride_h, w.adjustment_h, w.kernel_h, w.dilation_h, w.pad_top, w.pad_bottom, out[1]) ||
        !deconv(in[2], w.stride_w, w.adjustment_w, w.kernel_w, w.dilation_w, w.pad_left, w.pad_right, out[2])) {
      return "padding exceeds the transposed convolution's output";
    }
    return {};
  }
  out[1] = window_output_size(in[1], w.pad_top, w.pad_bottom, w.kernel_h, w.stride_h, w.dilation_h);
  out[2] = window_output_size(in[2], w.pad_left, w.pad_right, w.kernel_w, w.stride_w, w.dilation_w);
  if (out[1] == 0 || out[2] == 0) return dims_mismatch("input", in, "at least the kernel's extent");
  return {};
}

std::string infer_pooling(const Node& n, std::span<Shape> shapes) {
  WindowParams w = n.window;
  const Shape& in = shapes[n.inputs[0]];
  if (in.rank != 4) return dims_mismatch("input", in, "rank 4 (NHWC)");
  if (n.kind == NodeKind::AvgPooling2d || w.dilation_h == 0) w.dilation_h = 1;
  if (n.kind == NodeKind::AvgPooling2d || w.dilation_w == 0) w.dilation_w = 1;
  if (w.kernel_h == 0 || w.kernel_w == 0 || w.stride_h == 0 || w.stride_w == 0) {
    return "pooling size and stride must be positive";
  }
  if (size_t{w.kernel_h} * w.kernel_w <= 1) return "1x1 pooling is not supported";
  for (uint32_t out_index : n.outputs) {
    Shape& out = shapes[out_index];
    out.rank = 4;
    out[0] = in[0];
    out[1] = window_output_size(in[1], w.pad_top, w.pad_bottom, w.kernel_h, w.stride_h, w.dilation_h);
    out[2] = window_output_size(in[2], w.pad_left, w.pad_right, w.kernel_w, w.stride_w, w.dilation_w);
    out[3] = in[3];
    if (out[1] == 0 || out[2] == 0) return dims_mismatch("input", in, "at least the pooling window's extent");
  }
  return {};
}

std::string infer_broadcast(const Node& n, std::span<Shape> shapes) {
  Shape r;
  if (!broadcast_shape(shapes[n.inputs[0]], shapes[n.inputs[1]], r)) {
    return "input shapes " + shapes[n.inputs[0]].str() + " and " + shapes[n.inputs[1]].str() + " do not broadcast";
  }
  shapes[n.outputs[0]] = r;
  return {};
}

std::string infer_prelu(const Node& n, std::span<Shape> shapes) {
  Shape r;
  if (!broadcast_shape(shapes[n.inputs[0]], shapes[n.inputs[1]], r) || r != shapes[n.inputs[0]]) {
    return "slope shape " + shapes[n.inputs[1]].str() + " does not broadcast to the input " + shapes[n.inputs[0]].str();
  }
  shapes[n.outputs[0]] = shapes[n.inputs[0]];
  return {};
}

std::string infer_softmax(const Node& n, std::span<Shape> shapes) {
  if (shapes[n.inputs[0]].rank == 0) return "softmax needs an input of rank >= 1";
  shapes[n.outputs[0]] = shapes[n.inputs[0]];
  return {};
}

std::string infer_same(const Node& n, std::span<Shape> shapes) {
  shapes[n.outputs[0]] = shapes[n.inputs[0]];
  return {};
}

std::string infer_fully_connected(const Node& n, std::span<Shape> shapes) {
  const Shape& x = shapes[n.inputs[0]];
  const Shape& f = shapes[n.inputs[1]];
  if ((n.flags & ~kFlagTransposeWeights) != 0) return "unsupported flags " + std::to_string(n.flags);
  if (x.rank < 1) return "input must have rank >= 1";
  if (f.rank != 2) return dims_mismatch("filter", f, "rank 2");
  const bool transposed = (n.flags & kFlagTransposeWeights) != 0;
  const size_t k = transposed ? f[0] : f[1];
  const size_t units = transposed ? f[1] : f[0];
  if (x[x.rank - 1] != k) return dims_mismatch("input", x, "last dim " + std::to_string(k));
  if (n.inputs[2] != kInvalidId && shapes[n.inputs[2]].numel() != units) {
    return dims_mismatch("bias", shapes[n.inputs[2]], "[" + std::to_string(units) + "]");
  }
  Shape r = x;
  r[r.rank - 1] = units;
  shapes[n.outputs[0]] = r;
  return {};
}

std::string infer_global_avg_pooling(const Node& n, std::span<Shape> shapes) {
  const Shape& x = shapes[n.inputs[0]];
  if (x.rank != 4) return dims_mismatch("input", x, "rank 4 (NHWC)");
  if ((n.flags & kFlagKeepDims) != 0) {
    shapes[n.outputs[0]] = Shape{4, {x[0], 1, 1, x[3]}};
  } else {
    shapes[n.outputs[0]] = Shape{2, {x[0], x[3]}};
  }
  return {};
}

std::string infer_transpose(const Node& n, std::span<Shape> shapes) {
  const Shape& x = shapes[n.inputs[0]];
  if (n.list_a.size() != x.rank) {
    return "perm has " + std::to_string(n.list_a.size()) + " entries for rank " + std::to_string(x.rank);
  }
  bool seen[kMaxDims] = {};
  Shape r;
  r.rank = x.rank;
  for (int i = 0; i < x.rank; ++i) {
    const size_t p = n.list_a[i];
    if (p >= x.rank || seen[p]) return "perm is not a permutation";
    seen[p] = true;
    r[i] = x[static_cast<int>(p)];
  }
  shapes[n.outputs[0]] = r;
  return {};
}

std::string infer_reshape(const Node& n, std::span<Shape> shapes) {
  const Shape& x = shapes[n.inputs[0]];
  if (n.list_a.size() > static_cast<size_t>(kMaxDims)) return "new_shape has more than 6 dims";
  Shape r;
  r.rank = static_cast<uint8_t>(n.list_a.size());
  int inferred = -1;
  size_t known = 1;
  for (int i = 0; i < r.rank; ++i) {
    r[i] = n.list_a[i];
    if (r[i] == 0) {
      if (inferred >= 0) return "new_shape has more than one inferred (0) dim";
      inferred = i;
    } else {
      if (known > (size_t{1} << 40) / r[i]) return "new_shape is too large";
      known *= r[i];
    }
  }
  const size_t numel = x.numel();
  if (inferred >= 0) {
    if (numel % known != 0) return "cannot reshape " + x.str() + " to " + r.str();
    r[inferred] = numel / known;
  } else if (known != numel) {
    return "cannot reshape " + x.str() + " (" + std::to_string(numel) + " elements) to " + r.str();
  }
  shapes[n.outputs[0]] = r;
  return {};
}

std::string infer_slice(const Node& n, std::span<Shape> shapes) {
  const Shape& x = shapes[n.inputs[0]];
  if (n.list_a.size() != x.rank || n.list_b.size() != x.rank) {
    return "offsets/sizes do not match the input rank " + std::to_string(x.rank);
  }
  Shape r;
  r.rank = x.rank;
  for (int i = 0; i < x.rank; ++i) {
    const size_t offset = n.list_a[i];
    if (offset > x[i]) return "slice offset " + std::to_string(offset) + " exceeds dim " + std::to_string(x[i]);
    // A size of 0 means "to the end of the dimension".
    const size_t size = n.list_b[i] == 0 ? x[i] - offset : n.list_b[i];
    if (size > x[i] - offset) return "slice [" + std::to_string(offset) + ", +" + std::to_string(size) +
                                     ") exceeds dim " + std::to_string(x[i]);
    r[i] = size;
  }
  shapes[n.outputs[0]] = r;
  return {};
}

std::string infer_pad(const Node& n, std::span<Shape> shapes) {
  const Shape& x = shapes[n.inputs[0]];
  if (n.list_a.size() != x.rank || n.list_b.size() != x.rank) {
    return "paddings do not match the input rank " + std::to_string(x.rank);
  }
  Shape r;
  r.rank = x.rank;
  for (int i = 0; i < x.rank; ++i) {
    if (n.list_a[i] > (size_t{1} << 30) || n.list_b[i] > (size_t{1} << 30)) return "padding is too large";
    r[i] = x[i] + n.list_a[i] + n.list_b[i];
  }
  shapes[n.outputs[0]] = r;
  return {};
}

std::string infer_resize(const Node& n, std::span<Shape> shapes) {
  const Shape& x = shapes[n.inputs[0]];
  if (x.rank != 4) return dims_mismatch("input", x, "rank 4 (NHWC)");
  // XNNPACK asserts that both sizes stay below 2^24.
  if (n.new_height == 0 || n.new_width == 0 || n.new_height >= (1u << 24) || n.new_width >= (1u << 24)) {
    return "invalid output size";
  }
  if (x[1] >= (1u << 24) || x[2] >= (1u << 24)) return dims_mismatch("input", x, "height and width below 2^24");
  if ((n.flags & ~kFlagAlignCorners) != 0) return "unsupported flags " + std::to_string(n.flags);
  shapes[n.outputs[0]] = Shape{4, {x[0], n.new_height, n.new_width, x[3]}};
  return {};
}

std::string infer_concatenate(const Node& n, std::span<Shape> shapes) {
  const Shape& first = shapes[n.inputs[0]];
  if (n.axis >= first.rank) return "axis " + std::to_string(n.axis) + " is out of range for rank " +
                                   std::to_string(first.rank);
  Shape r = first;
  for (size_t i = 1; i < n.inputs.size(); ++i) {
    const Shape& s = shapes[n.inputs[i]];
    if (s.rank != first.rank) return "inputs have different ranks";
    for (int d = 0; d < s.rank; ++d) {
      if (d != static_cast<int>(n.axis) && s[d] != first[d]) {
        return "input shapes " + first.str() + " and " + s.str() + " differ outside the axis";
      }
    }
    r[static_cast<int>(n.axis)] += s[static_cast<int>(n.axis)];
  }
  shapes[n.outputs[0]] = r;
  return {};
}

std::string infer_batch_matmul(const Node& n, std::span<Shape> shapes) {
  const Shape& a = shapes[n.inputs[0]];
  const Shape& b = shapes[n.inputs[1]];
  if ((n.flags & ~kFlagTransposeWeights) != 0) return "unsupported flags " + std::to_string(n.flags);
  if (a.rank < 2 || b.rank < 2) return "inputs must have rank >= 2";
  const bool transpose_b = (n.flags & kFlagTransposeWeights) != 0;
  const size_t m = a[a.rank - 2], k = a[a.rank - 1];
  const size_t kb = transpose_b ? b[b.rank - 1] : b[b.rank - 2];
  const size_t nn = transpose_b ? b[b.rank - 2] : b[b.rank - 1];
  if (k != kb) return "inner dims differ: " + a.str() + " x " + b.str();
  Shape ba = a, bb = b, batch;
  ba.rank -= 2;
  bb.rank -= 2;
  if (!broadcast_shape(ba, bb, batch)) return "batch dims of " + a.str() + " and " + b.str() + " do not broadcast";
  Shape r = batch;
  r[r.rank++] = m;
  r[r.rank++] = nn;
  shapes[n.outputs[0]] = r;
  return {};
}

}  // namespace

size_t window_output_size(size_t input, uint32_t pad_before, uint32_t pad_after, uint32_t kernel, uint32_t stride,
                          uint32_t dilation) {
  const size_t padded = input + pad_before + pad_after;
  const size_t extent = size_t{dilation} * (kernel - 1) + 1;
  if (input == 0 || padded < extent || stride == 0) return 0;
  return (padded - extent) / stride + 1;
}

bool broadcast_shape(const Shape& a, const Shape& b, Shape& out) {
  Shape r;
  r.rank = std::max(a.rank, b.rank);
  for (int i = 0; i < r.rank; ++i) {
    const int ia = a.rank - r.rank + i, ib = b.rank - r.rank + i;
    const size_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    if (da != db && da != 1 && db != 1) return false;
    r[i] = da == 1 ? db : da;
  }
  out = r;
  return true;
}

std::string infer_node_shapes(const Graph& /*graph*/, const Node& n, std::span<Shape> shapes) {
  switch (n.kind) {
#define XNN_NODE_KIND(kind, name, member, layout, shape, rule, traits) \
  case NodeKind::kind:                                                \
    return infer_##shape(n, shapes);
#include "backends/xnnpack/xnn_node_kinds.inc"
#undef XNN_NODE_KIND
  }
  return "unknown node kind";
}

}  // namespace etnp::xnn
