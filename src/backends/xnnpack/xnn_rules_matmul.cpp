// Rules for matrix products: fully-connected layers (fp32, int8, dynamically quantized int8 x int8/int4) and
// batch matrix multiplication.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <vector>

#include "backends/xnnpack/conv_qs8.h"
#include "backends/xnnpack/xnn_rules.h"
#include "compute/int4_gemm.h"
#include "compute/packed_gemm.h"
#include "etnp/threadpool.h"

namespace etnp::xnn {
namespace {

enum class LinearPath { F32, QS8, QD8, None };

struct Linear {
  LinearPath path = LinearPath::None;
  bool transposed = false;  ///< filter is [K, N]
  size_t k = 0, units = 0;
};

bool is_int4(const Value& w) { return w.dtype == DataType::qcint4 || w.dtype == DataType::qbint4; }

Linear linear_of(const NodeView& v) {
  Linear l;
  const Value& x = v.in(0);
  const Value& w = v.in(1);
  const Value* b = v.optional_in(2);
  const Value& o = v.out();
  l.transposed = (v.node.flags & kFlagTransposeWeights) != 0;
  const Shape& ws = v.shapes[v.in_id(1)];
  l.k = l.transposed ? ws[0] : ws[1];
  l.units = l.transposed ? ws[1] : ws[0];
  if (is_f32(x) && is_f32(w) && is_f32(o) && (b == nullptr || is_f32(*b))) {
    l.path = LinearPath::F32;
  } else if (is_qs8(x) && is_qs8(o) && (w.dtype == DataType::qint8 || w.dtype == DataType::qcint8) &&
             (b == nullptr || b->dtype == DataType::qint32 || b->dtype == DataType::qcint32)) {
    l.path = LinearPath::QS8;
  } else if (x.dtype == DataType::qdint8 && (w.dtype == DataType::qcint8 || is_int4(w)) && is_f32(o) &&
             (b == nullptr || is_f32(*b))) {
    l.path = LinearPath::QD8;
  }
  return l;
}

}  // namespace

Refusal check_fully_connected(const NodeView& v) {
  const Linear l = linear_of(v);
  const Value& w = v.in(1);
  if (l.path == LinearPath::None) return refuse();
  if (l.path == LinearPath::F32) return kSupported;
  if (Refusal r = check_constant(v, v.in_id(1), "the filter")) return r;
  if (Refusal r = check_constant(v, v.in_id(2), "the bias")) return r;
  if (l.path == LinearPath::QS8) {
    if (Refusal r = check_q8_range(v, v.out())) return r;
    if (Refusal r = check_requantization(v.in(0), w, v.out())) return r;
    if (w.quant == QuantKind::PerTensor) {
      if (w.zero_point != 0) return refuse("per-tensor int8 weights need zero point 0");
    } else if (w.channel_dim != (l.transposed ? 1u : 0u)) {
      // Per-channel weights: the 2022 library only has them for convolutions, so they run as a 1x1 one.
      return refuse("per-channel scales must follow the units");
    }
    return kSupported;
  }
  if (is_int4(w) && l.transposed) return refuse("4-bit weights must be [units, inputs]");
  if (w.quant == QuantKind::PerChannel && w.channel_dim != (l.transposed ? 1u : 0u)) {
    return refuse("per-channel scales must follow the units");
  }
  if (w.quant == QuantKind::Blockwise && (w.group_size % 2 != 0 || w.channel_dim != 0)) {
    return refuse("blockwise weights need an even group size along the inputs");
  }
  return kSupported;
}

namespace {

void build_linear_f32(StepBuilder& b, const Linear& l) {
  const NodeView& v = b.view;
  const uint32_t in0 = v.in_id(0), filter = v.in_id(1), bias = v.in_id(2), out0 = v.out_id();
  const float out_min = v.node.output_min, out_max = v.node.output_max;
  const size_t k = l.k, units = l.units;
  const bool transposed = l.transposed;
  auto rows_of = [in0, k](const RunContext& c) { return k == 0 ? 0 : c.shapes[in0].numel() / k; };
  const Value* bv = v.optional_in(2);
  if (v.is_constant(filter) && (bv == nullptr || v.is_constant(bias))) {
    const auto* kernel = reinterpret_cast<const float*>(v.in(1).data);
    const float* bias_data = bv == nullptr ? nullptr : reinterpret_cast<const float*>(bv->data);
    if (b.use_library(measured::library_fully_connected_f32_faster())) {
      b.add_xnn(
          "fully-connected f32",
          [=](const Shape*, ops::Operator& op) {
            return ops::create_fully_connected_f32(k, units, kernel, bias_data, out_min, out_max, transposed, op);
          },
          [=](ops::Operator& op, const RunContext& c) {
            return ops::setup_fully_connected_f32(op, rows_of(c), static_cast<const float*>(c.data[in0]),
                                                  static_cast<float*>(c.data[out0]), c.pool);
          });
      return;
    }
    // Weights packed once at load for the delegate's GEMM.
    auto gemm = b.packed.hold(
        std::make_shared<const compute::PackedGemm>(kernel, !transposed, k, units, bias_data));
    b.add_own([=](const RunContext& c) {
      gemm->run(static_cast<const float*>(c.data[in0]), rows_of(c), k, out_min, out_max,
                static_cast<float*>(c.data[out0]));
    });
    return;
  }
  // Weights computed at run time: the library's GEMM, which packs them per call.
  b.keep(in0);
  b.keep(filter);
  b.keep(bias);
  b.add_own([=](const RunContext& c) {
    linear_f32(static_cast<const float*>(c.data[in0]), rows_of(c), k, static_cast<const float*>(c.data[filter]),
               !transposed, units, bias == kInvalidId ? nullptr : static_cast<const float*>(c.data[bias]), out_min,
               out_max, static_cast<float*>(c.data[out0]));
  });
}

/// An int8 filter as [units, k] (a transposed one, [k, units], transposed back).
std::vector<int8_t> int8_units_by_inputs(const Value& w, size_t k, size_t units, bool transposed) {
  const auto* codes = reinterpret_cast<const int8_t*>(w.data);
  std::vector<int8_t> kernel(codes, codes + k * units);
  if (transposed) {
    const Shape kn{2, {k, units}};
    const size_t perm[2] = {1, 0};
    transpose(codes, kernel.data(), kn, perm, 1);
  }
  return kernel;
}

void build_linear_qs8(StepBuilder& b, const Linear& l) {
  const NodeView& v = b.view;
  const uint32_t in0 = v.in_id(0), out0 = v.out_id();
  const Value& x = v.in(0);
  const Value& w = v.in(1);
  const Value* bv = v.optional_in(2);
  const Value o = v.out();
  const size_t k = l.k, units = l.units;
  const bool transposed = l.transposed;
  auto rows_of = [in0, k](const RunContext& c) { return k == 0 ? 0 : c.shapes[in0].numel() / k; };
  const ops::QParams in_q = qparams(x);
  const Q8Range r = q8_range(v.node, o);
  const auto* bias_data = bv == nullptr ? nullptr : reinterpret_cast<const int32_t*>(bv->data);
  if (ConvQS8::supported() && !b.use_library(measured::library_int8_product_faster())) {
    // The delegate's int8 convolution, as a 1x1 one over `rows` pixels (weights [units, k]).
    const std::vector<int8_t> kernel = int8_units_by_inputs(w, k, units, transposed);
    const std::vector<float> scales = requantization_scales(x, w, o, units);
    ConvQS8::Params p;
    p.in_channels = k;
    p.out_channels = units;
    p.in_zero_point = in_q.zero_point;
    p.out_zero_point = static_cast<int8_t>(o.zero_point);
    p.out_min = r.lo;
    p.out_max = r.hi;
    auto fc = b.packed.hold(std::make_shared<const ConvQS8>(kernel.data(), bias_data, scales.data(), p));
    b.add_own([=](const RunContext& c) {
      fc->run(static_cast<const int8_t*>(c.data[in0]), rows_of(c), 1, 1, 1, 1, static_cast<int8_t*>(c.data[out0]),
              c.scratch->bytes);
    });
    return;
  }
  if (w.quant == QuantKind::PerTensor) {
    const auto* kernel = reinterpret_cast<const int8_t*>(w.data);
    const float k_scale = w.scale;
    b.add_xnn(
        "fully-connected qs8",
        [=](const Shape*, ops::Operator& op) {
          return ops::create_fully_connected_qs8(k, units, in_q, k_scale, kernel, bias_data, qparams(o), r.lo, r.hi,
                                                 transposed, op);
        },
        [=](ops::Operator& op, const RunContext& c) {
          return ops::setup_fully_connected_qs8(op, rows_of(c), static_cast<const int8_t*>(c.data[in0]),
                                                static_cast<int8_t*>(c.data[out0]), c.pool);
        });
    return;
  }
  // Per-channel weights: the 2022 library only has them for convolutions, so run a 1x1 one.
  const std::vector<int8_t> kernel = int8_units_by_inputs(w, k, units, transposed);
  const std::vector<float> scales = w.channel_scales;
  b.add_xnn(
      "fully-connected qc8",
      [=](const Shape*, ops::Operator& op) {
        ops::ConvParams p;
        p.group_input_channels = k;
        p.group_output_channels = units;
        return ops::create_convolution_qc8(p, in_q, scales.data(), kernel.data(), bias_data, qparams(o), r.lo, r.hi,
                                           op);
      },
      [=](ops::Operator& op, const RunContext& c) {
        return ops::setup_convolution(op, 1, rows_of(c), 1, c.data[in0], c.data[out0], c.pool);
      });
}

/// The parameters XNNPACK's qd8 fully-connected operators read, in the layout they read them.
static_assert(sizeof(DynamicQuantParams) == 8 && offsetof(DynamicQuantParams, zero_point) == 0 &&
              offsetof(DynamicQuantParams, scale) == 4);
static_assert(kExtraDynamicQuantParams >= ops::kExtraQuantizationParams);

/// Whether this build's XNNPACK has the layer's operator and takes its weights as they are stored.
bool library_has_qd8(const Linear& l, const Value& w) {
  if (!ops::has_qd8_fully_connected()) return false;
  if (w.dtype == DataType::qcint8) return true;
  if (l.k % 2 != 0) return false;  // 4-bit rows padded to whole bytes: the library packs k / 2 bytes
  if (w.dtype == DataType::qcint4) return ops::qc4w_fully_connected_is_sound();
  return w.group_size % 32 == 0 && w.group_size > 0 && l.k % w.group_size == 0;  // qb4w: XNN_MIN_BLOCKSIZE
}

void build_linear_qd8_library(StepBuilder& b, const Linear& l) {
  const NodeView& v = b.view;
  const uint32_t in0 = v.in_id(0), out0 = v.out_id();
  const Value& w = v.in(1);
  const Value* bv = v.optional_in(2);
  const float out_min = v.node.output_min, out_max = v.node.output_max;
  const size_t k = l.k, units = l.units;
  std::vector<int8_t> kernel;
  if (w.dtype == DataType::qcint8 && l.transposed) {
    kernel.resize(units * k);
    const Shape kn{2, {k, units}};
    const size_t perm[2] = {1, 0};
    transpose(w.data, kernel.data(), kn, perm, 1);
  }
  ops::QD8Kernel q;
  q.data = kernel.empty() ? static_cast<const void*>(w.data) : kernel.data();
  std::vector<uint16_t> bf16;
  if (w.dtype == DataType::qcint8) {
    q.type = ops::QD8Kernel::Type::QC8W;
  } else if (w.dtype == DataType::qcint4) {
    q.type = ops::QD8Kernel::Type::QC4W;
  } else {
    // The block scales came from bf16 (xnn_graph.cpp rounds inline fp32 ones to bf16): their top halves.
    q.type = ops::QD8Kernel::Type::QB4W;
    bf16.resize(w.block_scales.size());
    for (size_t i = 0; i < bf16.size(); ++i) {
      uint32_t bits;
      std::memcpy(&bits, &w.block_scales[i], 4);
      bf16[i] = static_cast<uint16_t>(bits >> 16);
    }
    q.block_scales = bf16.data();
    q.block_size = w.group_size;
  }
  q.channel_scales = w.channel_scales.data();
  const float* bias_data = bv == nullptr ? nullptr : reinterpret_cast<const float*>(bv->data);
  const Value xv = v.in(0);
  const std::string where = v.node.describe();
  // The operator is created (and packs `q`'s bytes) inside add_xnn, while `kernel` and `bf16` still live.
  b.add_xnn(
      "fully-connected qd8",
      [=](const Shape*, ops::Operator& op) {
        return ops::create_fully_connected_qd8(k, units, q, bias_data, out_min, out_max, op);
      },
      [=](ops::Operator& op, const RunContext& c) {
        const Shape& s = c.shapes[in0];
        const size_t rows = k == 0 ? 0 : s.numel() / k;
        if (dynamic_quant_rows(xv, s) != rows) {
          run_fail(where + ": dynamic quantization rows do not match the fully-connected rows");
        }
        const auto* x = static_cast<const int8_t*>(c.data[in0]);
        return ops::setup_fully_connected_qd8(op, rows, x, x + dynamic_quant_params_offset(s.numel()),
                                              static_cast<float*>(c.data[out0]), c.pool);
      });
}

void build_linear_qd8(StepBuilder& b, const Linear& l) {
  const NodeView& v = b.view;
  const Value& w = v.in(1);
  if (library_has_qd8(l, w) && b.use_library(measured::library_fully_connected_qd8_faster(w.dtype, w.group_size, l.k))) {
    return build_linear_qd8_library(b, l);
  }
  const uint32_t in0 = v.in_id(0), out0 = v.out_id();
  const Value* bv = v.optional_in(2);
  const float out_min = v.node.output_min, out_max = v.node.output_max;
  const size_t k = l.k, units = l.units;
  auto rows_of = [in0, k](const RunContext& c) { return k == 0 ? 0 : c.shapes[in0].numel() / k; };
  std::vector<int8_t> w_nk(units * k);
  if (is_int4(w)) {
    // Two per byte, element 2i in the low nibble, stored with +8; rows padded to whole bytes.
    const size_t row_bytes = (k + 1) / 2;
    for (size_t j = 0; j < units; ++j) {
      const uint8_t* src = w.data + j * row_bytes;
      int8_t* dst = w_nk.data() + j * k;
      for (size_t i = 0; i + 1 < k; i += 2) {
        dst[i] = static_cast<int8_t>((src[i / 2] & 0xF) - 8);
        dst[i + 1] = static_cast<int8_t>((src[i / 2] >> 4) - 8);
      }
      if (k % 2 != 0) dst[k - 1] = static_cast<int8_t>((src[k / 2] & 0xF) - 8);
    }
  } else if (l.transposed) {
    const Shape kn{2, {k, units}};
    const size_t perm[2] = {1, 0};
    transpose(w.data, w_nk.data(), kn, perm, 1);
  } else {
    std::memcpy(w_nk.data(), w.data, units * k);
  }
  std::vector<float> bias_copy;
  if (bv != nullptr) {
    bias_copy.resize(units);
    std::memcpy(bias_copy.data(), bv->data, units * sizeof(float));
  }
  const bool blockwise = w.quant == QuantKind::Blockwise;
  const float* scales = blockwise ? w.block_scales.data() : w.channel_scales.data();
  const float* bias = bv == nullptr ? nullptr : bias_copy.data();
  const size_t group_size = blockwise ? w.group_size : 0;
  const Value xv = v.in(0);
  const std::string where = v.node.describe();
  // One step over either packing: `multiply(weights, codes, params, rows, out, scratch)` runs its GEMM.
  auto add_step = [&](auto packed, auto multiply) {
    b.add_own([=](const RunContext& c) {
      const Shape& s = c.shapes[in0];
      const size_t rows = rows_of(c);
      if (dynamic_quant_rows(xv, s) != rows) {
        run_fail(where + ": dynamic quantization rows do not match the fully-connected rows");
      }
      const auto* q = static_cast<const int8_t*>(c.data[in0]);
      const auto* params = reinterpret_cast<const DynamicQuantParams*>(q + dynamic_quant_params_offset(s.numel()));
      multiply(*packed, q, params, rows, static_cast<float*>(c.data[out0]), c.scratch->ints);
    });
  };
  if (is_int4(w) && compute::Int4Weights::supports(k, group_size)) {
    // 4-bit weights stay 4-bit (the bytes a decoding step streams halve).
    add_step(b.packed.hold(std::make_shared<const compute::Int4Weights>(w_nk.data(), units, k, scales, bias,
                                                                         group_size)),
             [out_min, out_max](const compute::Int4Weights& weights, const int8_t* q, const DynamicQuantParams* p,
                                size_t rows, float* out, std::vector<int32_t>& scratch) {
               scratch.resize(compute::int4_gemm_scratch_ints(rows, weights));
               compute::gemm_qd8_int4_f32(q, p, rows, weights, out_min, out_max, out, scratch.data(),
                                          &ThreadPool::current());
             });
    return;
  }
  add_step(b.packed.hold(std::make_shared<const QD8Weights>(w_nk.data(), units, k, scales, bias, group_size)),
           [out_min, out_max](const QD8Weights& weights, const int8_t* q, const DynamicQuantParams* p, size_t rows,
                              float* out, std::vector<int32_t>& scratch) {
             scratch.resize(qd8_scratch_ints(rows, weights));
             fully_connected_qd8_f32(q, p, rows, weights, out_min, out_max, out, scratch.data());
           });
}

}  // namespace

void build_fully_connected(StepBuilder& b) {
  const Linear l = linear_of(b.view);
  switch (l.path) {
    case LinearPath::F32: return build_linear_f32(b, l);
    case LinearPath::QS8: return build_linear_qs8(b, l);
    case LinearPath::QD8: return build_linear_qd8(b, l);
    case LinearPath::None: return;
  }
}

// ---- batch matrix multiply: the library's GEMM over broadcast batches ------------------------------------

Refusal check_batch_matmul(const NodeView& v) {
  return is_f32(v.in(0)) && is_f32(v.in(1)) && is_f32(v.out()) ? kSupported : refuse();
}

void build_batch_matmul(StepBuilder& b) {
  const NodeView& v = b.view;
  const uint32_t in0 = v.in_id(0), in1 = v.in_id(1), out0 = v.out_id();
  b.keep(in0);
  b.keep(in1);
  const bool transpose_b = (v.node.flags & kFlagTransposeWeights) != 0;
  if (ops::has_batch_matmul_f32() && b.use_library(measured::library_batch_matmul_f32_faster())) {
    b.add_xnn(
        "batch matrix multiply f32",
        [=](const Shape*, ops::Operator& op) { return ops::create_batch_matmul_f32(transpose_b, op); },
        [=](ops::Operator& op, const RunContext& c) {
          // Both operands' batch dims, right-aligned to the longer one (1 where absent).
          const Shape &a = c.shapes[in0], &bs = c.shapes[in1];
          const int rank = std::max(a.rank, bs.rank) - 2;
          size_t batch_a[kMaxDims], batch_b[kMaxDims];
          for (int i = 0; i < rank; ++i) {
            const int ia = i - (rank - (a.rank - 2)), ib = i - (rank - (bs.rank - 2));
            batch_a[i] = ia >= 0 ? a[ia] : 1;
            batch_b[i] = ib >= 0 ? bs[ib] : 1;
          }
          const size_t m = a[a.rank - 2], k = a[a.rank - 1];
          const size_t n = transpose_b ? bs[bs.rank - 2] : bs[bs.rank - 1];
          return ops::setup_batch_matmul_f32(op, static_cast<size_t>(rank), batch_a, batch_b, m, k, n,
                                             static_cast<const float*>(c.data[in0]),
                                             static_cast<const float*>(c.data[in1]),
                                             static_cast<float*>(c.data[out0]), c.pool);
        });
    return;
  }
  b.add_own([=](const RunContext& c) {
    batch_matmul_f32(static_cast<const float*>(c.data[in0]), c.shapes[in0], static_cast<const float*>(c.data[in1]),
                     c.shapes[in1], transpose_b, static_cast<float*>(c.data[out0]), c.shapes[out0]);
  });
}

}  // namespace etnp::xnn
