// Rules for element-wise nodes: binary operators, PReLU, clamp, softmax and the unary functions.
#include <algorithm>
#include <vector>

#include "backends/xnnpack/xnn_rules.h"
#include "compute/vector_math.h"

namespace etnp::xnn {
namespace {

ops::BinaryOp binary_op(NodeKind kind) {
  switch (kind) {
    case NodeKind::Subtract: return ops::BinaryOp::Subtract;
    case NodeKind::Multiply: return ops::BinaryOp::Multiply;
    case NodeKind::Divide: return ops::BinaryOp::Divide;
    case NodeKind::Minimum: return ops::BinaryOp::Minimum;
    case NodeKind::Maximum: return ops::BinaryOp::Maximum;
    default: return ops::BinaryOp::Add;
  }
}

ops::UnaryOp unary_op(NodeKind kind) {
  switch (kind) {
    case NodeKind::Floor: return ops::UnaryOp::Floor;
    case NodeKind::Ceiling: return ops::UnaryOp::Ceiling;
    case NodeKind::SquareRoot: return ops::UnaryOp::SquareRoot;
    case NodeKind::Square: return ops::UnaryOp::Square;
    case NodeKind::Negate: return ops::UnaryOp::Negate;
    case NodeKind::Abs: return ops::UnaryOp::Abs;
    case NodeKind::Hardswish: return ops::UnaryOp::Hardswish;
    case NodeKind::LeakyReLU: return ops::UnaryOp::LeakyReLU;
    case NodeKind::ELU: return ops::UnaryOp::ELU;
    case NodeKind::Tanh: return ops::UnaryOp::Tanh;
    case NodeKind::Exp: return ops::UnaryOp::Exp;
    case NodeKind::Log: return ops::UnaryOp::Log;
    case NodeKind::Gelu: return ops::UnaryOp::Gelu;
    case NodeKind::ReciprocalSquareRoot: return ops::UnaryOp::ReciprocalSquareRoot;
    case NodeKind::Sin: return ops::UnaryOp::Sine;
    case NodeKind::Cos: return ops::UnaryOp::Cosine;
    default: return ops::UnaryOp::Sigmoid;
  }
}

bool all_f32(const NodeView& v) {
  for (size_t i = 0; i < v.node.inputs.size(); ++i) {
    if (!is_f32(v.in(i))) return false;
  }
  return is_f32(v.out());
}

// ---- binary: XNNPACK on fp32 and on the int8 ratios it takes, the rest through fp32 --------------------

enum class BinaryPath { F32, XnnQS8, ViaF32, None };

BinaryPath binary_path(const NodeView& v) {
  const Value &a = v.in(0), &b = v.in(1), &o = v.out();
  if (is_f32(a) && is_f32(b) && is_f32(o)) return BinaryPath::F32;
  auto in_range = [](double r, double lo, double hi) { return r >= lo && r < hi; };
  const NodeKind kind = v.node.kind;
  const bool xnn_q8 =
      is_qs8(a) && is_qs8(b) && is_qs8(o) &&
      ((kind == NodeKind::Multiply && in_range(double(a.scale) * b.scale / o.scale, 0x1.0p-16, 0x1.0p+8)) ||
       ((kind == NodeKind::Add || kind == NodeKind::Subtract) && in_range(double(a.scale) / o.scale, 0x1.0p-10, 0x1.0p+8) &&
        in_range(double(b.scale) / o.scale, 0x1.0p-10, 0x1.0p+8)));
  // Other 8-bit combinations (division, min/max, scale ratios XNNPACK refuses, uint8): computed in fp32 on
  // dequantized operands, then quantized.
  if (!xnn_q8 && is_q8(a) && is_q8(b) && is_q8(o)) return BinaryPath::ViaF32;
  if (xnn_q8) return BinaryPath::XnnQS8;
  return BinaryPath::None;
}

// Broadcast shapes as XNNPACK takes them (rank >= 1).
struct BinaryShapes {
  size_t s0[kMaxDims], s1[kMaxDims], r0, r1;
  BinaryShapes(const Shape& a, const Shape& b) {
    r0 = std::max<size_t>(a.rank, 1);
    r1 = std::max<size_t>(b.rank, 1);
    s0[0] = s1[0] = 1;
    for (int i = 0; i < a.rank; ++i) s0[i] = a[i];
    for (int i = 0; i < b.rank; ++i) s1[i] = b[i];
  }
};

/// The setup of a unary XNNPACK operator over all elements of input 0.
XnnStep::Setup unary_setup(uint32_t in0, uint32_t out0) {
  return [=](ops::Operator& op, const RunContext& c) {
    return ops::setup_unary(op, c.shapes[in0].numel(), c.data[in0], c.data[out0], c.pool);
  };
}

}  // namespace

Refusal check_binary(const NodeView& v) {
  switch (binary_path(v)) {
    case BinaryPath::F32:
    case BinaryPath::ViaF32: return kSupported;
    case BinaryPath::XnnQS8: return check_q8_range(v, v.out());
    case BinaryPath::None: break;
  }
  return refuse();
}

namespace {

/// Small unclamped arithmetic runs on the delegate's kernel: one IEEE operation per element, XNNPACK's bits but
/// for NaN (kept, where the 2022 library's clamp makes it -inf) and subnormals (XNNPACK flushes them), without an
/// operator's setup and dispatch per call: a 2-layer GRU's 168 additions, subtractions and products of 32 floats a
/// run took 16% of its time that way. Clamped ones stay on XNNPACK.
bool own_binary_f32(Engines engines, NodeKind kind, float out_min, float out_max, const Shape& out) {
  constexpr size_t kOwnBinaryMaxElements = 1024;
  const bool arithmetic = kind == NodeKind::Add || kind == NodeKind::Subtract || kind == NodeKind::Multiply ||
                          kind == NodeKind::Divide;
  return engines != Engines::Library && arithmetic && out_min == -kInf && out_max == kInf &&
         out.numel() <= kOwnBinaryMaxElements;
}

}  // namespace

void build_binary(StepBuilder& b) {
  const NodeView& v = b.view;
  const uint32_t in0 = v.in_id(0), in1 = v.in_id(1), out0 = v.out_id();
  const NodeKind kind = v.node.kind;
  const float out_min = v.node.output_min, out_max = v.node.output_max;
  b.keep(in0);
  b.keep(in1);
  auto setup = [=](ops::Operator& op, const RunContext& c) {
    const BinaryShapes s(c.shapes[in0], c.shapes[in1]);
    return ops::setup_binary(op, s.r0, s.s0, s.r1, s.s1, c.data[in0], c.data[in1], c.data[out0], c.pool);
  };
  switch (binary_path(v)) {
    case BinaryPath::F32:
      if (own_binary_f32(b.engines, kind, out_min, out_max, v.shapes[out0])) {
        b.add_own([=](const RunContext& c) {
          binary_f32(kind, static_cast<const float*>(c.data[in0]), c.shapes[in0], static_cast<const float*>(c.data[in1]),
                     c.shapes[in1], static_cast<float*>(c.data[out0]), c.shapes[out0], out_min, out_max);
        });
        return;
      }
      b.add_xnn(
          "binary f32",
          [=](const Shape*, ops::Operator& op) {
            // Minimum and maximum take no output range (nothing fuses a clamp into them).
            const bool ranged = kind != NodeKind::Minimum && kind != NodeKind::Maximum;
            return ops::create_binary_f32(binary_op(kind), ranged ? out_min : -kInf, ranged ? out_max : kInf, op);
          },
          setup);
      return;
    case BinaryPath::ViaF32: {
      const Quant8 qa = quant8(v.in(0)), qb = quant8(v.in(1)), qo = quant8(v.out());
      b.add_own([=, fa = std::vector<float>(), fb = std::vector<float>(), fo = std::vector<float>()](
                    const RunContext& c) mutable {
        const Shape &sa = c.shapes[in0], &sb = c.shapes[in1], &so = c.shapes[out0];
        fa.resize(sa.numel());
        fb.resize(sb.numel());
        fo.resize(so.numel());
        dequantize_q8(c.data[in0], fa.data(), fa.size(), qa);
        dequantize_q8(c.data[in1], fb.data(), fb.size(), qb);
        binary_f32(kind, fa.data(), sa, fb.data(), sb, fo.data(), so, out_min, out_max);
        quantize_q8(fo.data(), c.data[out0], fo.size(), qo);
      });
      return;
    }
    case BinaryPath::XnnQS8: {
      const Value a = v.in(0), bv = v.in(1), o = v.out();
      const Q8Range r = q8_range(v.node, o);
      b.add_xnn(
          "binary qs8",
          [=](const Shape*, ops::Operator& op) {
            return ops::create_binary_qs8(binary_op(kind), qparams(a), qparams(bv), qparams(o), r.lo, r.hi, op);
          },
          setup);
      return;
    }
    case BinaryPath::None: return;
  }
}

// ---- PReLU: XNNPACK with a constant per-channel slope, the own kernel otherwise ------------------------

Refusal check_prelu(const NodeView& v) { return all_f32(v) ? kSupported : refuse(); }

void build_prelu(StepBuilder& b) {
  const NodeView& v = b.view;
  const uint32_t in0 = v.in_id(0), in1 = v.in_id(1), out0 = v.out_id();
  const Shape& x = v.shapes[in0];
  const Shape& slope = v.shapes[in1];
  const size_t channels = x.rank == 0 ? 1 : x[x.rank - 1];
  if (v.is_constant(in1) && x.rank >= 1 && slope.numel() == channels && channels > 0 &&
      (slope.rank == 0 || slope[slope.rank - 1] == channels)) {
    const float* slope_data = reinterpret_cast<const float*>(v.in(1).data);
    std::vector<float> slope_copy(slope_data, slope_data + channels);  // aligned copy for XNNPACK
    b.add_xnn(
        "prelu f32",
        [=](const Shape*, ops::Operator& op) { return ops::create_prelu_f32(channels, slope_copy.data(), op); },
        [=](ops::Operator& op, const RunContext& c) {
          const Shape& s = c.shapes[in0];
          const size_t rows = s[s.rank - 1] == 0 ? 0 : s.numel() / s[s.rank - 1];
          return ops::setup_prelu_f32(op, rows, static_cast<const float*>(c.data[in0]),
                                      static_cast<float*>(c.data[out0]), c.pool);
        });
    return;
  }
  b.keep(in0);
  b.keep(in1);
  b.add_own([=](const RunContext& c) {
    binary_f32(NodeKind::PReLU, static_cast<const float*>(c.data[in0]), c.shapes[in0],
               static_cast<const float*>(c.data[in1]), c.shapes[in1], static_cast<float*>(c.data[out0]),
               c.shapes[out0], -kInf, kInf);
  });
}

// ---- clamp: XNNPACK on fp32 and on int8 with one quantization ----------------------------------------

Refusal check_clamp(const NodeView& v) {
  if (q8_table_applies(v)) return kSupported;
  if (all_f32(v)) return kSupported;
  if (is_qs8(v.in(0)) && is_qs8(v.out()) && same_quant(v.in(0), v.out())) return check_q8_range(v, v.out());
  return refuse();
}

void build_clamp(StepBuilder& b) {
  const NodeView& v = b.view;
  if (q8_table_applies(v)) return build_q8_table(b);
  const uint32_t in0 = v.in_id(0), out0 = v.out_id();
  const float out_min = v.node.output_min, out_max = v.node.output_max;
  b.keep(in0);
  if (all_f32(v)) {
    b.add_xnn(
        "clamp f32", [=](const Shape*, ops::Operator& op) { return ops::create_clamp_f32(out_min, out_max, op); },
        unary_setup(in0, out0));
    return;
  }
  const Q8Range r = q8_range(v.node, v.out());
  b.add_xnn(
      "clamp s8", [=](const Shape*, ops::Operator& op) { return ops::create_clamp_s8(r.lo, r.hi, op); },
      unary_setup(in0, out0));
}

// ---- softmax: XNNPACK's or the own kernel (vector exp), as measured -----------------------------------

Refusal check_softmax(const NodeView& v) { return all_f32(v) ? kSupported : refuse(); }

void build_softmax(StepBuilder& b) {
  const uint32_t in0 = b.view.in_id(0), out0 = b.view.out_id();
  b.keep(in0);
  auto channels_of = [in0](const Shape* shapes) {
    const Shape& x = shapes[in0];
    return std::max<size_t>(x[x.rank - 1], 1);
  };
  auto rows_of = [](const Shape& x) { return x[x.rank - 1] == 0 ? 0 : x.numel() / x[x.rank - 1]; };
  if (b.use_library(measured::library_softmax_faster())) {
    b.add_xnn(
        "softmax f32",
        [=](const Shape* shapes, ops::Operator& op) { return ops::create_softmax_f32(channels_of(shapes), op); },
        [=](ops::Operator& op, const RunContext& c) {
          return ops::setup_softmax_f32(op, rows_of(c.shapes[in0]), static_cast<const float*>(c.data[in0]),
                                        static_cast<float*>(c.data[out0]), c.pool);
        },
        channels_of);  // the 2022 library fixes the channel count at create
    return;
  }
  b.add_own([=](const RunContext& c) {
    compute::softmax_rows_f32(static_cast<const float*>(c.data[in0]), static_cast<float*>(c.data[out0]),
                              rows_of(c.shapes[in0]), channels_of(c.shapes));
  });
}

// ---- unary functions: XNNPACK's (xnn_unary) or the delegate's (own_unary: the functions the 2022 library
// lacks, which the 2024 one runs where measured faster) ---------------------------------------------------

namespace {

void add_library_unary(StepBuilder& b, uint32_t in0, uint32_t out0) {
  const ops::UnaryOp kind = unary_op(b.view.node.kind);
  const float scalar = b.view.node.scalar;
  b.add_xnn(
      "unary f32", [=](const Shape*, ops::Operator& op) { return ops::create_unary_f32(kind, scalar, op); },
      unary_setup(in0, out0));
}

void add_own_unary(StepBuilder& b, uint32_t in0, uint32_t out0) {
  const NodeKind kind = b.view.node.kind;
  const float scalar = b.view.node.scalar;
  b.add_own([=](const RunContext& c) {
    unary_f32(kind, static_cast<const float*>(c.data[in0]), static_cast<float*>(c.data[out0]), c.shapes[in0].numel(),
              scalar, -kInf, kInf);
  });
}

}  // namespace

Refusal check_xnn_unary(const NodeView& v) {
  if (q8_table_applies(v)) return kSupported;
  return all_f32(v) ? kSupported : refuse();
}

void build_xnn_unary(StepBuilder& b) {
  const NodeView& v = b.view;
  if (q8_table_applies(v)) return build_q8_table(b);
  const uint32_t in0 = v.in_id(0), out0 = v.out_id();
  b.keep(in0);
  if (b.engines == Engines::Own && unary_f32_supported(v.node.kind)) return add_own_unary(b, in0, out0);
  add_library_unary(b, in0, out0);
}

Refusal check_own_unary(const NodeView& v) { return check_xnn_unary(v); }

void build_own_unary(StepBuilder& b) {
  const NodeView& v = b.view;
  if (q8_table_applies(v)) return build_q8_table(b);
  const uint32_t in0 = v.in_id(0), out0 = v.out_id();
  b.keep(in0);
  if (ops::has_unary_f32(unary_op(v.node.kind)) && b.use_library(measured::library_unary_faster())) {
    return add_library_unary(b, in0, out0);
  }
  add_own_unary(b, in0, out0);
}

}  // namespace etnp::xnn
