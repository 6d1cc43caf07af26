// Rules for quantization: conversions between fp32 and the 8-bit and dynamically quantized types, and the
// 256-entry tables that run 8-bit unary nodes.
#include <algorithm>
#include <array>
#include <cstring>

#include "backends/xnnpack/xnn_rules.h"

namespace etnp::xnn {
namespace {

/// The 256 int8/uint8 codes, dequantized with `q`.
std::array<float, 256> all_codes(const Quant8& q) {
  std::array<uint8_t, 256> codes{};
  for (int b = 0; b < 256; ++b) codes[static_cast<size_t>(b)] = static_cast<uint8_t>(b);
  std::array<float, 256> real{};
  dequantize_q8(codes.data(), real.data(), 256, q);
  return real;
}

void add_table(StepBuilder& b, const std::array<uint8_t, 256>& table) {
  const uint32_t in0 = b.view.in_id(0), out0 = b.view.out_id();
  b.keep(in0);
  b.add_own([=](const RunContext& c) {
    apply_q8_table(table.data(), c.data[in0], c.data[out0], c.shapes[in0].numel());
  });
}

enum class ConvertPath { F32ToQS8, QS8ToF32, Requantize, F32ToQ8, Q8ToF32, Q8ToQ8, F32ToQD8, Same, None };

ConvertPath convert_path(const NodeView& v) {
  const Value& x = v.in(0);
  const Value& y = v.out();
  if (is_f32(x) && is_qs8(y)) return ConvertPath::F32ToQS8;
  if (is_qs8(x) && is_f32(y)) return ConvertPath::QS8ToF32;
  if (is_qs8(x) && is_qs8(y)) return ConvertPath::Requantize;
  if (is_f32(x) && is_q8(y)) return ConvertPath::F32ToQ8;
  if (is_q8(x) && is_f32(y)) return ConvertPath::Q8ToF32;
  if (is_q8(x) && is_q8(y)) return ConvertPath::Q8ToQ8;
  if (is_f32(x) && y.dtype == DataType::qdint8) return ConvertPath::F32ToQD8;
  if (x.dtype == y.dtype && (is_f32(x) || x.dtype == DataType::int32)) return ConvertPath::Same;
  return ConvertPath::None;
}

}  // namespace

bool q8_table_applies(const NodeView& v) {
  const Node& n = v.node;
  return n.inputs.size() == 1 && n.outputs.size() == 1 && unary_f32_supported(n.kind) && is_q8(v.in(0)) &&
         is_q8(v.out()) && !(n.kind == NodeKind::Clamp && is_qs8(v.in(0)) && same_quant(v.in(0), v.out()));
}

void build_q8_table(StepBuilder& b) {
  const NodeView& v = b.view;
  const std::array<float, 256> x = all_codes(quant8(v.in(0)));
  std::array<float, 256> y{};
  const bool clamp = v.node.kind == NodeKind::Clamp;
  unary_f32(v.node.kind, x.data(), y.data(), 256, v.node.scalar, clamp ? v.node.output_min : -kInf,
            clamp ? v.node.output_max : kInf);
  std::array<uint8_t, 256> table{};
  quantize_q8(y.data(), table.data(), 256, quant8(v.out()));
  add_table(b, table);
}

Refusal check_convert(const NodeView& v) { return convert_path(v) == ConvertPath::None ? refuse() : kSupported; }

void build_convert(StepBuilder& b) {
  const NodeView& v = b.view;
  const uint32_t in0 = v.in_id(0), out0 = v.out_id();
  const Value& x = v.in(0);
  const Value& y = v.out();
  b.keep(in0);
  auto unary_setup = [=](ops::Operator& op, const RunContext& c) {
    return ops::setup_unary(op, c.shapes[in0].numel(), c.data[in0], c.data[out0], c.pool);
  };
  switch (convert_path(v)) {
    case ConvertPath::F32ToQS8: {
      const ops::QParams q = qparams(y);
      b.add_xnn(
          "convert f32->qs8", [=](const Shape*, ops::Operator& op) { return ops::create_convert_f32_qs8(q, op); },
          unary_setup);
      return;
    }
    case ConvertPath::QS8ToF32: {
      const ops::QParams q = qparams(x);
      b.add_xnn(
          "convert qs8->f32", [=](const Shape*, ops::Operator& op) { return ops::create_convert_qs8_f32(q, op); },
          unary_setup);
      return;
    }
    case ConvertPath::Requantize: {
      const float in_scale = x.scale, out_scale = y.scale;
      const int32_t in_zp = x.zero_point, out_zp = y.zero_point;
      b.add_own([=](const RunContext& c) {
        requantize_s8(static_cast<const int8_t*>(c.data[in0]), static_cast<int8_t*>(c.data[out0]),
                      c.shapes[in0].numel(), in_scale, in_zp, out_scale, out_zp);
      });
      return;
    }
    case ConvertPath::F32ToQ8: {
      const Quant8 q = quant8(y);
      b.add_own([=](const RunContext& c) {
        quantize_q8(static_cast<const float*>(c.data[in0]), c.data[out0], c.shapes[in0].numel(), q);
      });
      return;
    }
    case ConvertPath::Q8ToF32: {
      const Quant8 q = quant8(x);
      b.add_own([=](const RunContext& c) {
        dequantize_q8(c.data[in0], static_cast<float*>(c.data[out0]), c.shapes[in0].numel(), q);
      });
      return;
    }
    case ConvertPath::Q8ToQ8: {
      // Between uint8 and int8 (or requantizing uint8): one table over the 256 input codes.
      const std::array<float, 256> real = all_codes(quant8(x));
      std::array<uint8_t, 256> table{};
      quantize_q8(real.data(), table.data(), 256, quant8(y));
      add_table(b, table);
      return;
    }
    case ConvertPath::F32ToQD8: {
      const Value qv = y;
      b.add_own([=](const RunContext& c) {
        const Shape& s = c.shapes[in0];
        const size_t rows = dynamic_quant_rows(qv, s);
        const size_t cols = rows == 0 ? 0 : s.numel() / rows;
        auto* q = static_cast<int8_t*>(c.data[out0]);
        auto* params = reinterpret_cast<DynamicQuantParams*>(q + dynamic_quant_params_offset(s.numel()));
        quantize_dynamic_rows(static_cast<const float*>(c.data[in0]), rows, cols, q, params);
        // The spare entries XNNPACK's qd8 operators read past the last row repeat it: the 2024 library's qd8
        // kernels (qc8w, qc4w, qb4w) let them change the last row's result (stale arena bytes there gave
        // infinities or wrong values; copies of the last row give the right ones).
        const DynamicQuantParams last = rows > 0 ? params[rows - 1] : DynamicQuantParams{0, 1.0f};
        std::fill(params + rows, params + rows + kExtraDynamicQuantParams, last);
      });
      return;
    }
    case ConvertPath::Same: {
      const size_t elem = datatype_size(x.dtype);
      b.add_own([=](const RunContext& c) {
        if (c.data[in0] != c.data[out0]) std::memcpy(c.data[out0], c.data[in0], c.shapes[in0].numel() * elem);
      });
      return;
    }
    case ConvertPath::None: return;
  }
}

}  // namespace etnp::xnn
