#include "backends/xnnpack/xnn_executor.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <new>

#include "compute/packed_gemm.h"
#include "compute/vector_math.h"
#include "backends/xnnpack/xnn_kernels.h"
#include "backends/xnnpack/xnn_ops.h"
#include "backends/xnnpack/xnn_shape.h"
#include "etnp/backend.h"
#include "etnp/threadpool.h"

namespace etnp::xnn {

using compute::Conv2dGeometry;
using compute::DepthwiseConv;
using compute::PackedGemm;
using compute::conv2d_indirect;
using compute::kParallelWork;

// ---- steps ---------------------------------------------------------------------------------------------

struct RunContext {
  void* const* data;
  const Shape* shapes;
  pthreadpool_t pool;
};


class Step {
 public:
  /// `runner`: what runs the node, for profiles ("XNNPACK", "own kernel").
  Step(const Node& node, const char* runner)
      : node_(node), label_(std::string(node_kind_name(node.kind)) + " (" + runner + ")") {}
  virtual ~Step() = default;
  /// Called after the shapes changed, before run.
  virtual void reshape(const Shape* /*shapes*/) {}
  virtual void run(const RunContext& ctx) = 0;
  const Node& node() const { return node_; }
  /// "XNNConv2d (own kernel)": the name of the step's profile events.
  const std::string& label() const { return label_; }

 protected:
  /// Multiply-adds for convolutions and fully-connected layers (outputs x reduction length), elements read
  /// and written for everything else.
  size_t work_estimate(const Shape* shapes) const {
    if (node_.outputs.empty()) return 0;
    const Shape& out = shapes[node_.outputs[0]];
    size_t work = out.numel();
    switch (node_.kind) {
      case NodeKind::FullyConnected:
      case NodeKind::Conv2d:
      case NodeKind::DepthwiseConv2d:
      case NodeKind::ConvTranspose2d:
        if (node_.inputs.size() >= 2 && node_.inputs[1] != kInvalidId && out.rank > 0 && out[out.rank - 1] > 0) {
          work *= std::max<size_t>(1, shapes[node_.inputs[1]].numel() / out[out.rank - 1]);
        }
        break;
      default:
        if (!node_.inputs.empty() && node_.inputs[0] != kInvalidId) work += shapes[node_.inputs[0]].numel();
    }
    return work;
  }
  Node node_;
  std::string label_;
};

namespace {

using ops::status_name;

[[noreturn]] void load_fail(const std::string& msg) {
  throw Error(ErrorKind::ProgramLoadError, "XNNPACK payload: " + msg);
}

[[noreturn]] void run_fail(const std::string& msg) { throw Error(ErrorKind::ExecutionError, "XNNPACK: " + msg); }

/// A node run by one XNNPACK operator (xnn_ops.h). Operators whose create-time parameters depend on shapes
/// (the channel count of a pooling, say) name that parameter with `key` and are recreated when it changes.
class XnnStep final : public Step {
 public:
  using Create = std::function<xnn_status(const Shape* shapes, ops::Operator& op)>;
  using Setup = std::function<xnn_status(ops::Operator& op, const RunContext& ctx)>;
  using Key = std::function<size_t(const Shape* shapes)>;

  XnnStep(const Node& node, const char* what, Create create, Setup setup, Key key, const Shape* shapes)
      : Step(node, "XNNPACK"), what_(what), create_(std::move(create)), setup_(std::move(setup)), key_(std::move(key)) {
    if (key_) key_value_ = key_(shapes);
    const xnn_status s = create_(shapes, op_);
    if (s != xnn_status_success || !op_.created()) {
      load_fail(node_.describe() + ": XNNPACK could not create its " + what_ + " operator (" + status_name(s) + ")");
    }
    if (!key_) create_ = nullptr;  // it may hold pointers to load-time data
  }

  void reshape(const Shape* shapes) override {
    serial_ = work_estimate(shapes) < kParallelWork;
    if (!key_) return;
    const size_t k = key_(shapes);
    if (k == key_value_) return;
    ops::Operator op;
    const xnn_status s = create_(shapes, op);
    if (s != xnn_status_success || !op.created()) {
      run_fail(node_.describe() + ": XNNPACK could not recreate its " + what_ + " operator (" + status_name(s) + ")");
    }
    op_ = std::move(op);
    key_value_ = k;
  }

  void run(const RunContext& ctx) override {
    // Small operators run on the calling thread: waking the pool costs more than they take.
    RunContext local = ctx;
    if (serial_) local.pool = nullptr;
    xnn_status s = setup_(op_, local);
    if (s == xnn_status_success) s = op_.run(local.pool);
    if (s != xnn_status_success) {
      run_fail(node_.describe() + ": XNNPACK " + what_ + " failed (" + status_name(s) + ")");
    }
  }

 private:
  std::string what_;
  Create create_;
  Setup setup_;
  Key key_;
  size_t key_value_ = 0;
  ops::Operator op_;
  bool serial_ = false;
};

/// A node run by the delegate's own kernels.
class OwnStep final : public Step {
 public:
  using Run = std::function<void(const RunContext& ctx)>;
  using Reshape = std::function<void(const Shape* shapes)>;
  OwnStep(const Node& node, Run run, Reshape reshape = nullptr)
      : Step(node, "own kernel"), run_(std::move(run)), reshape_(std::move(reshape)) {}
  void reshape(const Shape* shapes) override {
    if (reshape_) reshape_(shapes);
  }
  void run(const RunContext& ctx) override { run_(ctx); }

 private:
  Run run_;
  Reshape reshape_;
};

constexpr float kInf = std::numeric_limits<float>::infinity();
// Largest element count of any value (2^36 fp32 elements is 256 GiB: beyond any real model).
constexpr size_t kMaxValueElements = size_t{1} << 36;

bool is_f32(const Value& v) { return v.dtype == DataType::fp32; }
bool is_qs8(const Value& v) { return v.dtype == DataType::qint8 && v.quant == QuantKind::PerTensor; }
bool is_q8(const Value& v) {
  return (v.dtype == DataType::qint8 || v.dtype == DataType::quint8) && v.quant == QuantKind::PerTensor;
}
Quant8 quant8(const Value& v) { return Quant8{v.dtype == DataType::quint8, v.scale, v.zero_point}; }
bool same_quant(const Value& a, const Value& b) {
  return a.dtype == b.dtype && a.scale == b.scale && a.zero_point == b.zero_point;
}

int8_t q8_min(const Value& out, float bound) {
  return static_cast<int8_t>(quantize_bound(bound, out.scale, out.zero_point, -128, 127));
}

bool supports_fused_clamp(NodeKind kind) {
  switch (kind) {
    case NodeKind::Conv2d:
    case NodeKind::DepthwiseConv2d:
    case NodeKind::ConvTranspose2d:
    case NodeKind::FullyConnected:
    case NodeKind::Add:
    case NodeKind::Subtract:
    case NodeKind::Multiply:
    case NodeKind::Divide:
    case NodeKind::AvgPooling2d:
    case NodeKind::MaxPooling2d:
    case NodeKind::GlobalAvgPooling2d:
      return true;
    default:
      return false;
  }
}

ops::QParams qparams(const Value& v) { return ops::QParams{v.scale, static_cast<int8_t>(v.zero_point)}; }

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
    default: return ops::UnaryOp::Sigmoid;
  }
}

/// The payload's window as the adapter takes it (convolutions: as serialized).
ops::PoolParams window_params(const WindowParams& w) {
  ops::PoolParams p;
  p.pad_top = w.pad_top;
  p.pad_right = w.pad_right;
  p.pad_bottom = w.pad_bottom;
  p.pad_left = w.pad_left;
  p.kernel_h = w.kernel_h;
  p.kernel_w = w.kernel_w;
  p.stride_h = w.stride_h;
  p.stride_w = w.stride_w;
  p.dilation_h = w.dilation_h;
  p.dilation_w = w.dilation_w;
  return p;
}

/// Pooling windows: an unset (0) dilation means none.
ops::PoolParams pool_params(const WindowParams& w) {
  ops::PoolParams p = window_params(w);
  p.dilation_h = std::max<uint32_t>(p.dilation_h, 1);
  p.dilation_w = std::max<uint32_t>(p.dilation_w, 1);
  return p;
}

// True when transposing `shape` by `perm` leaves the bytes in place (only size-1 dims move).
bool transpose_is_copy(const Shape& shape, std::span<const size_t> perm) {
  int last = -1;
  for (size_t p : perm) {
    if (shape[static_cast<int>(p)] == 1) continue;
    if (static_cast<int>(p) < last) return false;
    last = static_cast<int>(p);
  }
  return true;
}

}  // namespace

// ---- building ----------------------------------------------------------------------------------------

void Executor::AlignedDeleter::operator()(uint8_t* p) const { ::operator delete[](p, std::align_val_t(64)); }

Executor::AlignedBytes Executor::allocate(size_t bytes) {
  // XNNPACK may read up to XNN_EXTRA_BYTES past any buffer it is given.
  const size_t total = bytes + ops::kExtraBytes + 64;
  auto* p = static_cast<uint8_t*>(::operator new[](total, std::align_val_t(64)));
  std::memset(p + bytes, 0, total - bytes);
  return AlignedBytes(p);
}

Executor::Executor(Graph graph) : graph_(std::move(graph)) {
  const xnn_status init = ops::initialize();
  if (init != xnn_status_success) {
    throw Error(ErrorKind::BackendNotAvailable,
                std::string("XNNPACK could not be initialized (") + status_name(init) + ")");
  }
  const size_t n = graph_.values.size();
  is_constant_.resize(n);
  for (size_t i = 0; i < n; ++i) is_constant_[i] = graph_.values[i].is_constant();
  constant_data_.assign(n, nullptr);
  shapes_.resize(n);
  for (size_t i = 0; i < n; ++i) shapes_[i] = graph_.values[i].dims;
  propagate_shapes(ErrorKind::ProgramLoadError);
  // Shapes derived from the serialized input dims must match the serialized ones, up to size-1 dims (the
  // propagated shape is the one used; XNNPACK itself recomputes shapes at run time).
  for (const Node& node : graph_.nodes) {
    for (uint32_t out : node.outputs) {
      if (shapes_[out].numel() != graph_.values[out].dims.numel()) {
        load_fail(node.describe() + ": output value " + std::to_string(graph_.values[out].serialized_id) +
                  " is declared " + graph_.values[out].dims.str() + " but the node produces " + shapes_[out].str());
      }
    }
  }
  fuse_clamps();
  compile();
  // Constant bytes are only valid during load; everything needed later has been copied.
  for (Value& v : graph_.values) {
    v.data = nullptr;
    v.data_bytes = 0;
  }
  graph_.flatbuffer_copy.clear();
  graph_.flatbuffer_copy.shrink_to_fit();
  input_shapes_.resize(graph_.input_values.size());
  staging_.resize(graph_.input_values.size());
  staging_capacity_.assign(graph_.input_values.size(), 0);
  data_.assign(n, nullptr);
}

Executor::~Executor() = default;

void Executor::propagate_shapes(ErrorKind kind) {
  for (const Node& node : graph_.nodes) {
    std::string err = infer_node_shapes(graph_, node, shapes_);
    if (err.empty()) {
      // Padding, resizing and transposed convolutions can grow shapes; keep byte sizes far from overflow.
      for (uint32_t out : node.outputs) {
        size_t numel = 1;
        for (int d = 0; d < shapes_[out].rank && err.empty(); ++d) {
          const size_t dim = shapes_[out][d];
          if (dim != 0 && numel > kMaxValueElements / dim) err = "output shape " + shapes_[out].str() + " is too large";
          numel *= dim;
        }
      }
    }
    if (!err.empty()) {
      if (kind == ErrorKind::ProgramLoadError) load_fail(node.describe() + ": " + err);
      run_fail(node.describe() + ": " + err);
    }
  }
}

void Executor::fuse_clamps() {
  std::vector<int> consumers(graph_.values.size(), 0);
  std::vector<int> producer(graph_.values.size(), -1);
  for (size_t i = 0; i < graph_.nodes.size(); ++i) {
    for (uint32_t in : graph_.nodes[i].inputs) {
      if (in != kInvalidId) ++consumers[in];
    }
    for (uint32_t out : graph_.nodes[i].outputs) producer[out] = static_cast<int>(i);
  }
  std::vector<uint8_t> removed(graph_.nodes.size(), 0);
  for (size_t i = 0; i < graph_.nodes.size(); ++i) {
    Node& clamp = graph_.nodes[i];
    if (clamp.kind != NodeKind::Clamp) continue;
    const uint32_t mid = clamp.inputs[0];
    const uint32_t out = clamp.outputs[0];
    const Value& mid_value = graph_.values[mid];
    const Value& out_value = graph_.values[out];
    if (producer[mid] < 0 || consumers[mid] != 1 || mid_value.is_external()) continue;
    Node& prod = graph_.nodes[static_cast<size_t>(producer[mid])];
    if (!supports_fused_clamp(prod.kind) || prod.outputs.size() != 1) continue;
    if (mid_value.dtype != out_value.dtype || mid_value.quant != out_value.quant ||
        (mid_value.quant == QuantKind::PerTensor && !same_quant(mid_value, out_value))) {
      continue;
    }
    if (mid_value.dtype != DataType::fp32 && mid_value.dtype != DataType::qint8) continue;
    prod.output_min = std::max(prod.output_min, clamp.output_min);
    prod.output_max = std::min(prod.output_max, clamp.output_max);
    if (prod.output_min > prod.output_max) prod.output_min = prod.output_max;
    prod.outputs[0] = out;
    removed[i] = 1;
    ++stats_.fused_clamps;
  }
  std::vector<Node> kept;
  kept.reserve(graph_.nodes.size());
  for (size_t i = 0; i < graph_.nodes.size(); ++i) {
    if (!removed[i]) kept.push_back(std::move(graph_.nodes[i]));
  }
  graph_.nodes = std::move(kept);
}

void Executor::compile() {
  const std::vector<Value>& values = graph_.values;
  const Shape* init_shapes = shapes_.data();

  // Copies a constant the steps read at run time into padded storage the executor owns.
  auto keep = [&](uint32_t id) {
    if (id == kInvalidId || !is_constant_[id] || constant_data_[id] != nullptr) return;
    const Value& v = values[id];
    const size_t bytes = value_storage_bytes(v, v.dims);
    AlignedBytes copy = allocate(bytes);
    std::memcpy(copy.get(), v.data, bytes);
    constant_data_[id] = copy.get();
    constant_storage_.push_back(std::move(copy));
    constant_bytes_ += bytes;
  };

  for (const Node& node : graph_.nodes) {
    auto V = [&](size_t i) -> const Value& { return values[node.inputs[i]]; };
    auto O = [&](size_t i = 0) -> const Value& { return values[node.outputs[i]]; };
    auto unsupported = [&](const std::string& why) {
      std::string types;
      for (uint32_t in : node.inputs) {
        types += (types.empty() ? "" : ", ");
        types += in == kInvalidId ? "none" : datatype_name(values[in].dtype);
      }
      types += " -> ";
      for (size_t i = 0; i < node.outputs.size(); ++i) types += (i ? ", " : "") + std::string(datatype_name(O(i).dtype));
      load_fail(node.describe() + " with types (" + types + ") is not supported by this runtime" +
                (why.empty() ? "" : ": " + why));
    };
    const uint32_t in0 = node.inputs.empty() ? kInvalidId : node.inputs[0];
    const uint32_t out0 = node.outputs[0];
    const float out_min = node.output_min, out_max = node.output_max;
    // XNNPACK asserts (rather than reports) on these, so they are checked here.
    if (!(out_min < out_max)) unsupported("the output range is empty");
    auto q8_range = [&](const Value& o, int8_t& lo, int8_t& hi) {
      lo = q8_min(o, out_min);
      hi = q8_min(o, out_max);
      if (lo >= hi) unsupported("the output range is empty after quantization");
    };
    auto check_scale_ratio = [&](double ratio, double lo, double hi, const char* what) {
      if (!(ratio >= lo && ratio < hi)) {
        unsupported(std::string(what) + " scale ratio " + std::to_string(ratio) + " is outside XNNPACK's range");
      }
    };
    auto add_xnn = [&](const char* what, XnnStep::Create create, XnnStep::Setup setup, XnnStep::Key key = nullptr) {
      steps_.push_back(std::make_unique<XnnStep>(node, what, std::move(create), std::move(setup), std::move(key),
                                                 init_shapes));
      ++stats_.xnnpack_operators;
    };
    auto add_own = [&](OwnStep::Run run, OwnStep::Reshape reshape = nullptr) {
      steps_.push_back(std::make_unique<OwnStep>(node, std::move(run), std::move(reshape)));
      ++stats_.own_kernels;
    };
    auto require_constant = [&](uint32_t id, const char* what) {
      if (id != kInvalidId && !is_constant_[id]) unsupported(std::string(what) + " must be constant");
    };

    // 8-bit quantized unary nodes (other than a plain clamp XNNPACK runs) become a 256-entry table built
    // through the fp32 function: exact for every input code.
    if (node.inputs.size() == 1 && node.outputs.size() == 1 && unary_f32_supported(node.kind) && is_q8(V(0)) &&
        is_q8(O()) && !(node.kind == NodeKind::Clamp && is_qs8(V(0)) && same_quant(V(0), O()))) {
      const Quant8 qi = quant8(V(0)), qo = quant8(O());
      std::array<float, 256> x{}, y{};
      std::array<uint8_t, 256> codes{};
      for (int b = 0; b < 256; ++b) codes[static_cast<size_t>(b)] = static_cast<uint8_t>(b);
      dequantize_q8(codes.data(), x.data(), 256, qi);
      const bool clamp = node.kind == NodeKind::Clamp;
      unary_f32(node.kind, x.data(), y.data(), 256, node.scalar, clamp ? out_min : -kInf, clamp ? out_max : kInf);
      std::array<uint8_t, 256> table{};
      quantize_q8(y.data(), table.data(), 256, qo);
      keep(in0);
      add_own([=](const RunContext& c) {
        apply_q8_table(table.data(), c.data[in0], c.data[out0], c.shapes[in0].numel());
      });
      continue;
    }

    switch (node.kind) {
      // ---- element-wise binary ------------------------------------------------------------------------
      case NodeKind::Add:
      case NodeKind::Subtract:
      case NodeKind::Multiply:
      case NodeKind::Divide:
      case NodeKind::Minimum:
      case NodeKind::Maximum: {
        const uint32_t in1 = node.inputs[1];
        keep(in0);
        keep(in1);
        const NodeKind kind = node.kind;
        auto setup_shapes = [in0, in1](const RunContext& c, size_t* s0, size_t* s1, size_t& r0, size_t& r1) {
          const Shape& a = c.shapes[in0];
          const Shape& b = c.shapes[in1];
          r0 = std::max<size_t>(a.rank, 1);
          r1 = std::max<size_t>(b.rank, 1);
          s0[0] = s1[0] = 1;
          for (int i = 0; i < a.rank; ++i) s0[i] = a[i];
          for (int i = 0; i < b.rank; ++i) s1[i] = b[i];
        };
        if (is_f32(V(0)) && is_f32(V(1)) && is_f32(O())) {
          add_xnn(
              "binary f32",
              [=](const Shape*, ops::Operator& op) {
                // Minimum and maximum take no output range (nothing fuses a clamp into them).
                const bool ranged = kind != NodeKind::Minimum && kind != NodeKind::Maximum;
                return ops::create_binary_f32(binary_op(kind), ranged ? out_min : -kInf, ranged ? out_max : kInf,
                                              op);
              },
              [=](ops::Operator& op, const RunContext& c) {
                size_t s0[kMaxDims], s1[kMaxDims], r0, r1;
                setup_shapes(c, s0, s1, r0, r1);
                return ops::setup_binary(op, r0, s0, r1, s1, c.data[in0], c.data[in1], c.data[out0], c.pool);
              });
          break;
        }
        auto in_range = [](double r, double lo, double hi) { return r >= lo && r < hi; };
        const bool xnn_q8 =
            is_qs8(V(0)) && is_qs8(V(1)) && is_qs8(O()) &&
            ((kind == NodeKind::Multiply && in_range(double(V(0).scale) * V(1).scale / O().scale, 0x1.0p-16, 0x1.0p+8)) ||
             ((kind == NodeKind::Add || kind == NodeKind::Subtract) &&
              in_range(double(V(0).scale) / O().scale, 0x1.0p-10, 0x1.0p+8) &&
              in_range(double(V(1).scale) / O().scale, 0x1.0p-10, 0x1.0p+8)));
        if (!xnn_q8 && is_q8(V(0)) && is_q8(V(1)) && is_q8(O())) {
          // Other 8-bit combinations (division, min/max, scale ratios XNNPACK refuses, uint8): computed in
          // fp32 on dequantized operands, then quantized.
          const Quant8 qa = quant8(V(0)), qb = quant8(V(1)), qo = quant8(O());
          add_own([=, fa = std::vector<float>(), fb = std::vector<float>(), fo = std::vector<float>()](
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
          break;
        }
        if (xnn_q8) {
          const Value a = V(0), b = V(1), o = O();
          int8_t lo, hi;
          q8_range(o, lo, hi);
          add_xnn(
              "binary qs8",
              [=](const Shape*, ops::Operator& op) {
                return ops::create_binary_qs8(binary_op(kind), qparams(a), qparams(b), qparams(o), lo, hi, op);
              },
              [=](ops::Operator& op, const RunContext& c) {
                size_t s0[kMaxDims], s1[kMaxDims], r0, r1;
                setup_shapes(c, s0, s1, r0, r1);
                return ops::setup_binary(op, r0, s0, r1, s1, c.data[in0], c.data[in1], c.data[out0], c.pool);
              });
          break;
        }
        unsupported("");
        break;
      }
      case NodeKind::PReLU: {
        const uint32_t in1 = node.inputs[1];
        if (!is_f32(V(0)) || !is_f32(V(1)) || !is_f32(O())) unsupported("");
        const Shape& x = init_shapes[in0];
        const Shape& slope = init_shapes[in1];
        const size_t channels = x.rank == 0 ? 1 : x[x.rank - 1];
        if (is_constant_[in1] && x.rank >= 1 && slope.numel() == channels && channels > 0 &&
            (slope.rank == 0 || slope[slope.rank - 1] == channels)) {
          const float* slope_data = reinterpret_cast<const float*>(V(1).data);
          std::vector<float> slope_copy(slope_data, slope_data + channels);  // aligned copy for XNNPACK
          add_xnn(
              "prelu f32",
              [=](const Shape*, ops::Operator& op) { return ops::create_prelu_f32(channels, slope_copy.data(), op); },
              [=](ops::Operator& op, const RunContext& c) {
                const Shape& s = c.shapes[in0];
                const size_t rows = s[s.rank - 1] == 0 ? 0 : s.numel() / s[s.rank - 1];
                return ops::setup_prelu_f32(op, rows, static_cast<const float*>(c.data[in0]),
                                            static_cast<float*>(c.data[out0]), c.pool);
              });
        } else {
          keep(in0);
          keep(in1);
          add_own([=](const RunContext& c) {
            binary_f32(NodeKind::PReLU, static_cast<const float*>(c.data[in0]), c.shapes[in0],
                       static_cast<const float*>(c.data[in1]), c.shapes[in1], static_cast<float*>(c.data[out0]),
                       c.shapes[out0], -kInf, kInf);
          });
        }
        break;
      }

      // ---- element-wise unary -------------------------------------------------------------------------
      case NodeKind::Clamp: {
        keep(in0);
        if (is_f32(V(0)) && is_f32(O())) {
          add_xnn(
              "clamp f32",
              [=](const Shape*, ops::Operator& op) { return ops::create_clamp_f32(out_min, out_max, op); },
              [=](ops::Operator& op, const RunContext& c) {
                return ops::setup_unary(op, c.shapes[in0].numel(), c.data[in0], c.data[out0], c.pool);
              });
          break;
        }
        if (is_qs8(V(0)) && is_qs8(O()) && same_quant(V(0), O())) {
          int8_t lo, hi;
          q8_range(O(), lo, hi);
          add_xnn(
              "clamp s8",
              [=](const Shape*, ops::Operator& op) { return ops::create_clamp_s8(lo, hi, op); },
              [=](ops::Operator& op, const RunContext& c) {
                return ops::setup_unary(op, c.shapes[in0].numel(), c.data[in0], c.data[out0], c.pool);
              });
          break;
        }
        unsupported("");
        break;
      }
      case NodeKind::Softmax: {
        if (!is_f32(V(0)) || !is_f32(O())) unsupported("");
        keep(in0);
        auto channels_of = [in0](const Shape* s) {
          const Shape& x = s[in0];
          return std::max<size_t>(x[x.rank - 1], 1);
        };
        // The own kernel (vector exp) runs the attention softmax several times faster than the 2022 library.
        add_own([=](const RunContext& c) {
          const Shape& x = c.shapes[in0];
          const size_t channels = channels_of(c.shapes);
          compute::softmax_rows_f32(static_cast<const float*>(c.data[in0]), static_cast<float*>(c.data[out0]),
                      x[x.rank - 1] == 0 ? 0 : x.numel() / channels, channels);
        });
        break;
      }
      case NodeKind::Sigmoid:
      case NodeKind::Floor:
      case NodeKind::Ceiling:
      case NodeKind::SquareRoot:
      case NodeKind::Square:
      case NodeKind::Negate:
      case NodeKind::Abs:
      case NodeKind::Hardswish:
      case NodeKind::LeakyReLU:
      case NodeKind::ELU: {
        if (!is_f32(V(0)) || !is_f32(O())) unsupported("");
        keep(in0);
        const ops::UnaryOp kind = unary_op(node.kind);
        const float scalar = node.scalar;
        add_xnn(
            "unary f32", [=](const Shape*, ops::Operator& op) { return ops::create_unary_f32(kind, scalar, op); },
            [=](ops::Operator& op, const RunContext& c) {
              return ops::setup_unary(op, c.shapes[in0].numel(), c.data[in0], c.data[out0], c.pool);
            });
        break;
      }
      case NodeKind::ReciprocalSquareRoot:
      case NodeKind::Gelu:
      case NodeKind::Tanh:
      case NodeKind::Exp:
      case NodeKind::Log:
      case NodeKind::Sin:
      case NodeKind::Cos: {
        if (!is_f32(V(0)) || !is_f32(O())) unsupported("");
        keep(in0);
        const NodeKind kind = node.kind;
        add_own([=](const RunContext& c) {
          unary_f32(kind, static_cast<const float*>(c.data[in0]), static_cast<float*>(c.data[out0]),
                    c.shapes[in0].numel(), 0.0f, -kInf, kInf);
        });
        break;
      }

      // ---- conversions and copies ---------------------------------------------------------------------
      case NodeKind::Convert: {
        keep(in0);
        const Value& x = V(0);
        const Value& y = O();
        if (is_f32(x) && is_qs8(y)) {
          const float scale = y.scale;
          const auto zp = static_cast<int8_t>(y.zero_point);
          add_xnn(
              "convert f32->qs8",
              [=](const Shape*, ops::Operator& op) { return ops::create_convert_f32_qs8({scale, zp}, op); },
              [=](ops::Operator& op, const RunContext& c) {
                return ops::setup_unary(op, c.shapes[in0].numel(), c.data[in0], c.data[out0], c.pool);
              });
        } else if (is_qs8(x) && is_f32(y)) {
          const float scale = x.scale;
          const auto zp = static_cast<int8_t>(x.zero_point);
          add_xnn(
              "convert qs8->f32",
              [=](const Shape*, ops::Operator& op) { return ops::create_convert_qs8_f32({scale, zp}, op); },
              [=](ops::Operator& op, const RunContext& c) {
                return ops::setup_unary(op, c.shapes[in0].numel(), c.data[in0], c.data[out0], c.pool);
              });
        } else if (is_qs8(x) && is_qs8(y)) {
          const float in_scale = x.scale, out_scale = y.scale;
          const int32_t in_zp = x.zero_point, out_zp = y.zero_point;
          add_own([=](const RunContext& c) {
            requantize_s8(static_cast<const int8_t*>(c.data[in0]), static_cast<int8_t*>(c.data[out0]),
                          c.shapes[in0].numel(), in_scale, in_zp, out_scale, out_zp);
          });
        } else if (is_f32(x) && is_q8(y)) {
          const Quant8 q = quant8(y);
          add_own([=](const RunContext& c) {
            quantize_q8(static_cast<const float*>(c.data[in0]), c.data[out0], c.shapes[in0].numel(), q);
          });
        } else if (is_q8(x) && is_f32(y)) {
          const Quant8 q = quant8(x);
          add_own([=](const RunContext& c) {
            dequantize_q8(c.data[in0], static_cast<float*>(c.data[out0]), c.shapes[in0].numel(), q);
          });
        } else if (is_q8(x) && is_q8(y)) {
          // Between uint8 and int8 (or requantizing uint8): one table over the 256 input codes.
          std::array<uint8_t, 256> codes{}, table{};
          std::array<float, 256> real{};
          for (int b = 0; b < 256; ++b) codes[static_cast<size_t>(b)] = static_cast<uint8_t>(b);
          dequantize_q8(codes.data(), real.data(), 256, quant8(x));
          quantize_q8(real.data(), table.data(), 256, quant8(y));
          add_own([=](const RunContext& c) {
            apply_q8_table(table.data(), c.data[in0], c.data[out0], c.shapes[in0].numel());
          });
        } else if (is_f32(x) && y.dtype == DataType::qdint8) {
          const Value qv = y;
          add_own([=](const RunContext& c) {
            const Shape& s = c.shapes[in0];
            const size_t rows = dynamic_quant_rows(qv, s);
            const size_t cols = rows == 0 ? 0 : s.numel() / rows;
            auto* q = static_cast<int8_t*>(c.data[out0]);
            auto* params = reinterpret_cast<DynamicQuantParams*>(q + ((s.numel() + 7) & ~size_t{7}));
            quantize_dynamic_rows(static_cast<const float*>(c.data[in0]), rows, cols, q, params);
          });
        } else if (x.dtype == y.dtype && (is_f32(x) || x.dtype == DataType::int32)) {
          const size_t elem = datatype_size(x.dtype);
          add_own([=](const RunContext& c) {
            if (c.data[in0] != c.data[out0]) std::memcpy(c.data[out0], c.data[in0], c.shapes[in0].numel() * elem);
          });
        } else {
          unsupported("");
        }
        break;
      }
      case NodeKind::Copy:
      case NodeKind::StaticReshape: {
        if (V(0).dtype != O().dtype || datatype_size(V(0).dtype) == 0) unsupported("");
        keep(in0);
        const Value xv = V(0);
        add_own([=](const RunContext& c) {
          if (c.data[in0] != c.data[out0]) {
            std::memcpy(c.data[out0], c.data[in0], value_storage_bytes(xv, c.shapes[in0]));
          }
        });
        break;
      }
      case NodeKind::StaticTranspose: {
        const size_t elem = datatype_size(V(0).dtype);
        if (V(0).dtype != O().dtype || elem == 0 || V(0).dtype == DataType::qdint8) unsupported("");
        keep(in0);
        const std::vector<size_t> perm = node.list_a;
        add_own([=](const RunContext& c) {
          if (c.data[in0] == c.data[out0]) return;  // planned as a view (only size-1 dims move)
          transpose(c.data[in0], c.data[out0], c.shapes[in0], perm, elem);
        });
        break;
      }
      case NodeKind::StaticSlice: {
        const size_t elem = datatype_size(V(0).dtype);
        if (V(0).dtype != O().dtype || elem == 0 || V(0).dtype == DataType::qdint8) unsupported("");
        keep(in0);
        const std::vector<size_t> offsets = node.list_a;
        add_own([=](const RunContext& c) {
          slice(c.data[in0], c.shapes[in0], offsets, c.shapes[out0], c.data[out0], elem);
        });
        break;
      }
      case NodeKind::StaticConstantPad: {
        const size_t elem = datatype_size(V(0).dtype);
        if (V(0).dtype != O().dtype || elem == 0 || V(0).dtype == DataType::qdint8) unsupported("");
        keep(in0);
        uint8_t pad[8] = {};
        if (is_f32(V(0))) {
          std::memcpy(pad, &node.scalar, sizeof(float));
        } else if (is_qs8(V(0))) {
          pad[0] = static_cast<uint8_t>(
              static_cast<int8_t>(quantize_bound(node.scalar, V(0).scale, V(0).zero_point, -128, 127)));
        } else if (node.scalar != 0.0f) {
          unsupported("non-zero padding value");
        }
        const std::vector<size_t> pre = node.list_a;
        std::array<uint8_t, 8> pad_bytes;
        std::memcpy(pad_bytes.data(), pad, 8);
        add_own([=](const RunContext& c) {
          constant_pad(c.data[in0], c.shapes[in0], pre, c.shapes[out0], pad_bytes.data(), c.data[out0], elem);
        });
        break;
      }
      case NodeKind::Concatenate: {
        const size_t elem = datatype_size(V(0).dtype);
        if (elem == 0 || V(0).dtype == DataType::qdint8) unsupported("");
        for (size_t i = 0; i < node.inputs.size(); ++i) {
          if (V(i).dtype != O().dtype || (V(i).quant == QuantKind::PerTensor && !same_quant(V(i), O()))) {
            unsupported("inputs and output must share datatype and quantization");
          }
          keep(node.inputs[i]);
        }
        const std::vector<uint32_t> ins = node.inputs;
        const size_t axis = node.axis;
        add_own([=](const RunContext& c) {
          const void* ptrs[5];
          Shape shapes[5];
          for (size_t i = 0; i < ins.size(); ++i) {
            ptrs[i] = c.data[ins[i]];
            shapes[i] = c.shapes[ins[i]];
          }
          concatenate(std::span<const void* const>(ptrs, ins.size()), std::span<const Shape>(shapes, ins.size()),
                      axis, c.data[out0], elem);
        });
        break;
      }

      // ---- matrix products ----------------------------------------------------------------------------
      case NodeKind::FullyConnected: {
        const uint32_t filter = node.inputs[1];
        const uint32_t bias = node.inputs[2];
        const Value& x = V(0);
        const Value& w = V(1);
        const Value* b = bias == kInvalidId ? nullptr : &values[bias];
        const bool transposed = (node.flags & kFlagTransposeWeights) != 0;
        const Shape& ws = init_shapes[filter];
        const size_t k = transposed ? ws[0] : ws[1];
        const size_t units = transposed ? ws[1] : ws[0];
        auto rows_of = [in0, k](const RunContext& c) { return k == 0 ? 0 : c.shapes[in0].numel() / k; };
        if (is_f32(x) && is_f32(w) && is_f32(O()) && (b == nullptr || is_f32(*b))) {
          if (is_constant_[filter] && (b == nullptr || is_constant_[bias])) {
            // Weights packed once at load for the delegate's GEMM (2-2.7x the 2022 XNNPACK kernels here).
            auto gemm = std::make_shared<const PackedGemm>(reinterpret_cast<const float*>(w.data), !transposed, k,
                                                           units,
                                                           b == nullptr ? nullptr : reinterpret_cast<const float*>(b->data));
            packed_bytes_ += gemm->bytes();
            add_own([=](const RunContext& c) {
              gemm->run(static_cast<const float*>(c.data[in0]), rows_of(c), k, out_min, out_max,
                        static_cast<float*>(c.data[out0]));
            });
          } else {
            // Weights computed at run time: the library's GEMM, which packs them per call.
            keep(in0);
            keep(filter);
            keep(bias);
            add_own([=](const RunContext& c) {
              linear_f32(static_cast<const float*>(c.data[in0]), rows_of(c), k, static_cast<const float*>(c.data[filter]),
                         !transposed, units, bias == kInvalidId ? nullptr : static_cast<const float*>(c.data[bias]),
                         out_min, out_max, static_cast<float*>(c.data[out0]));
            });
          }
          break;
        }
        if (is_qs8(x) && is_qs8(O()) && (w.dtype == DataType::qint8 || w.dtype == DataType::qcint8) &&
            (b == nullptr || b->dtype == DataType::qint32 || b->dtype == DataType::qcint32)) {
          require_constant(filter, "the filter");
          require_constant(bias, "the bias");
          const Value o = O();
          const auto in_zp = static_cast<int8_t>(x.zero_point);
          const float in_scale = x.scale;
          int8_t lo, hi;
          q8_range(o, lo, hi);
          const auto* bias_data = b == nullptr ? nullptr : reinterpret_cast<const int32_t*>(b->data);
          if (w.quant == QuantKind::PerTensor) {
            check_scale_ratio(double(in_scale) * w.scale / o.scale, 0x1.0p-32, 256.0, "requantization");
          } else {
            for (float ws : w.channel_scales) {
              check_scale_ratio(double(in_scale) * ws / o.scale, 0x1.0p-32, 256.0, "requantization");
            }
          }
          if (w.quant == QuantKind::PerTensor) {
            if (w.zero_point != 0) unsupported("per-tensor int8 weights need zero point 0");
            const auto* kernel = reinterpret_cast<const int8_t*>(w.data);
            const float k_scale = w.scale;
            add_xnn(
                "fully-connected qs8",
                [=](const Shape*, ops::Operator& op) {
                  return ops::create_fully_connected_qs8(k, units, {in_scale, in_zp}, k_scale, kernel, bias_data,
                                                         qparams(o), lo, hi, transposed, op);
                },
                [=](ops::Operator& op, const RunContext& c) {
                  return ops::setup_fully_connected_qs8(op, rows_of(c), static_cast<const int8_t*>(c.data[in0]),
                                                        static_cast<int8_t*>(c.data[out0]), c.pool);
                });
          } else {
            // Per-channel weights: the 2022 library only has them for convolutions, so run a 1x1 one.
            if (w.channel_dim != (transposed ? 1u : 0u)) unsupported("per-channel scales must follow the units");
            std::vector<int8_t> kernel(reinterpret_cast<const int8_t*>(w.data),
                                       reinterpret_cast<const int8_t*>(w.data) + k * units);
            if (transposed) {
              const Shape kn{2, {k, units}};
              const size_t perm[2] = {1, 0};
              std::vector<int8_t> t(kernel.size());
              transpose(kernel.data(), t.data(), kn, perm, 1);
              kernel.swap(t);
            }
            const std::vector<float> scales = w.channel_scales;
            add_xnn(
                "fully-connected qc8",
                [=](const Shape*, ops::Operator& op) {
                  ops::ConvParams p;
                  p.group_input_channels = k;
                  p.group_output_channels = units;
                  return ops::create_convolution_qc8(p, {in_scale, in_zp}, scales.data(), kernel.data(), bias_data,
                                                     qparams(o), lo, hi, op);
                },
                [=](ops::Operator& op, const RunContext& c) {
                  return ops::setup_convolution(op, 1, rows_of(c), 1, c.data[in0], c.data[out0], c.pool);
                });
          }
          break;
        }
        const bool int4 = w.dtype == DataType::qcint4 || w.dtype == DataType::qbint4;
        if (x.dtype == DataType::qdint8 && (w.dtype == DataType::qcint8 || int4) && is_f32(O()) &&
            (b == nullptr || is_f32(*b))) {
          require_constant(filter, "the filter");
          require_constant(bias, "the bias");
          if (int4 && transposed) unsupported("4-bit weights must be [units, inputs]");
          if (w.quant == QuantKind::PerChannel && w.channel_dim != (transposed ? 1u : 0u)) {
            unsupported("per-channel scales must follow the units");
          }
          if (w.quant == QuantKind::Blockwise && (w.group_size % 2 != 0 || w.channel_dim != 0)) {
            unsupported("blockwise weights need an even group size along the inputs");
          }
          std::vector<int8_t> w_nk(units * k);
          if (int4) {
            // Two per byte, element 2i in the low nibble, stored with +8; rows padded to whole bytes.
            const size_t row_bytes = (k + 1) / 2;
            for (size_t j = 0; j < units; ++j) {
              for (size_t i = 0; i < k; ++i) {
                const uint8_t byte = w.data[j * row_bytes + i / 2];
                w_nk[j * k + i] = static_cast<int8_t>(((i % 2 == 0) ? (byte & 0xF) : (byte >> 4)) - 8);
              }
            }
          } else if (transposed) {
            const Shape kn{2, {k, units}};
            const size_t perm[2] = {1, 0};
            transpose(w.data, w_nk.data(), kn, perm, 1);
          } else {
            std::memcpy(w_nk.data(), w.data, units * k);
          }
          std::vector<float> bias_copy;
          if (b != nullptr) {
            bias_copy.resize(units);
            std::memcpy(bias_copy.data(), b->data, units * sizeof(float));
          }
          const bool blockwise = w.quant == QuantKind::Blockwise;
          auto packed = std::make_shared<const QD8Weights>(
              w_nk.data(), units, k, blockwise ? w.block_scales.data() : w.channel_scales.data(),
              b == nullptr ? nullptr : bias_copy.data(), blockwise ? w.group_size : 0);
          packed_bytes_ += packed->bytes();
          const Value xv = x;
          const std::string where = node.describe();
          add_own([=, scratch = std::vector<int32_t>()](const RunContext& c) mutable {
            const Shape& s = c.shapes[in0];
            const size_t rows = rows_of(c);
            if (dynamic_quant_rows(xv, s) != rows) {
              run_fail(where + ": dynamic quantization rows do not match the fully-connected rows");
            }
            const auto* q = static_cast<const int8_t*>(c.data[in0]);
            const auto* params = reinterpret_cast<const DynamicQuantParams*>(q + ((s.numel() + 7) & ~size_t{7}));
            scratch.resize(qd8_scratch_ints(rows, *packed));
            fully_connected_qd8_f32(q, params, rows, *packed, out_min, out_max, static_cast<float*>(c.data[out0]),
                                    scratch.data());
          });
          break;
        }
        unsupported("");
        break;
      }
      case NodeKind::BatchMatrixMultiply: {
        const uint32_t in1 = node.inputs[1];
        if (!is_f32(V(0)) || !is_f32(V(1)) || !is_f32(O())) unsupported("");
        keep(in0);
        keep(in1);
        const bool transpose_b = (node.flags & kFlagTransposeWeights) != 0;
        add_own([=](const RunContext& c) {
          batch_matmul_f32(static_cast<const float*>(c.data[in0]), c.shapes[in0], static_cast<const float*>(c.data[in1]),
                           c.shapes[in1], transpose_b, static_cast<float*>(c.data[out0]), c.shapes[out0]);
        });
        break;
      }

      // ---- convolutions -------------------------------------------------------------------------------
      case NodeKind::Conv2d:
      case NodeKind::DepthwiseConv2d:
      case NodeKind::ConvTranspose2d: {
        const uint32_t filter = node.inputs[1];
        const uint32_t bias = node.inputs[2];
        require_constant(filter, "the filter");
        require_constant(bias, "the bias");
        if (node.flags != 0) unsupported("unsupported flags " + std::to_string(node.flags));
        const WindowParams w = node.window;
        const bool depthwise = node.kind == NodeKind::DepthwiseConv2d;
        const bool deconv = node.kind == NodeKind::ConvTranspose2d;
        // Depthwise: one group per input channel, HWGo filter layout.
        const uint32_t groups = w.groups;
        const size_t gin = depthwise ? 1 : w.group_input_channels;
        const size_t gout = depthwise ? w.group_output_channels / w.group_input_channels : w.group_output_channels;
        ops::ConvParams cp;
        static_cast<ops::PoolParams&>(cp) = window_params(w);
        cp.groups = groups;
        cp.group_input_channels = gin;
        cp.group_output_channels = gout;
        cp.depthwise = depthwise;
        const Value& x = V(0);
        const Value& f = V(1);
        const Value* b = bias == kInvalidId ? nullptr : &values[bias];
        const size_t cin = groups * gin, cout = groups * gout;
        if (is_f32(x) && is_f32(f) && is_f32(O()) && (b == nullptr || is_f32(*b))) {
          const bool pointwise = !depthwise && !deconv && groups == 1 && w.kernel_h == 1 && w.kernel_w == 1 &&
                                 w.stride_h == 1 && w.stride_w == 1 && w.pad_top == 0 && w.pad_right == 0 &&
                                 w.pad_bottom == 0 && w.pad_left == 0;
          if (pointwise) {
            // A 1x1 convolution over NHWC is a GEMM [N*H*W, Cin] x [Cout, Cin]^T.
            auto gemm = std::make_shared<const PackedGemm>(
                reinterpret_cast<const float*>(f.data), true, cin, cout,
                b == nullptr ? nullptr : reinterpret_cast<const float*>(b->data));
            packed_bytes_ += gemm->bytes();
            add_own([=](const RunContext& c) {
              const Shape& s = c.shapes[in0];
              gemm->run(static_cast<const float*>(c.data[in0]), s[0] * s[1] * s[2], cin, out_min, out_max,
                        static_cast<float*>(c.data[out0]));
            });
            break;
          }
          if (depthwise && w.dilation_h == 1 && w.dilation_w == 1 && gout == 1 &&
              DepthwiseConv::supported(cin, w.kernel_h, w.stride_h, w.stride_w)) {
            auto conv = std::make_shared<const DepthwiseConv>(
                reinterpret_cast<const float*>(f.data), b == nullptr ? nullptr : reinterpret_cast<const float*>(b->data),
                cin, w.kernel_h, w.kernel_w, w.stride_h, w.stride_w, w.pad_top, w.pad_left);
            packed_bytes_ += conv->bytes();
            add_own([=, scratch = std::vector<float>()](const RunContext& c) mutable {
              const Shape& s = c.shapes[in0];
              const Shape& o = c.shapes[out0];
              conv->run(static_cast<const float*>(c.data[in0]), s[0], s[1], s[2], o[1], o[2], out_min, out_max,
                        static_cast<float*>(c.data[out0]), scratch);
            });
            break;
          }
          if (!depthwise && !deconv && groups == 1) {
            // Other single-group convolutions: the same GEMM reading patches in place (indirect).
            auto gemm = std::make_shared<const PackedGemm>(
                reinterpret_cast<const float*>(f.data), true, size_t{w.kernel_h} * w.kernel_w * cin, cout,
                b == nullptr ? nullptr : reinterpret_cast<const float*>(b->data));
            packed_bytes_ += gemm->bytes();
            add_own([=, scratch = compute::Conv2dScratch()](const RunContext& c) mutable {
              const Shape& s = c.shapes[in0];
              const Shape& o = c.shapes[out0];
              Conv2dGeometry g;
              g.in_h = s[1];
              g.in_w = s[2];
              g.channels = cin;
              g.kernel_h = w.kernel_h;
              g.kernel_w = w.kernel_w;
              g.stride_h = w.stride_h;
              g.stride_w = w.stride_w;
              g.dilation_h = w.dilation_h;
              g.dilation_w = w.dilation_w;
              g.pad_top = w.pad_top;
              g.pad_left = w.pad_left;
              g.out_h = o[1];
              g.out_w = o[2];
              conv2d_indirect(*gemm, g, s[0], static_cast<const float*>(c.data[in0]), out_min, out_max,
                            static_cast<float*>(c.data[out0]), scratch);
            });
            break;
          }
          const auto* kernel = reinterpret_cast<const float*>(f.data);
          const auto* bias_data = b == nullptr ? nullptr : reinterpret_cast<const float*>(b->data);
          if (deconv) {
            add_xnn(
                "deconvolution f32",
                [=](const Shape*, ops::Operator& op) {
                  return ops::create_deconvolution_f32(cp, kernel, bias_data, out_min, out_max, op);
                },
                [=](ops::Operator& op, const RunContext& c) {
                  const Shape& s = c.shapes[in0];
                  return ops::setup_deconvolution_f32(op, s[0], s[1], s[2], w.adjustment_h, w.adjustment_w,
                                                      static_cast<const float*>(c.data[in0]),
                                                      static_cast<float*>(c.data[out0]), c.pool);
                });
          } else {
            add_xnn(
                depthwise ? "depthwise convolution f32" : "convolution f32",
                [=](const Shape*, ops::Operator& op) {
                  return ops::create_convolution_f32(cp, kernel, bias_data, out_min, out_max, op);
                },
                [=](ops::Operator& op, const RunContext& c) {
                  const Shape& s = c.shapes[in0];
                  return ops::setup_convolution(op, s[0], s[1], s[2], c.data[in0], c.data[out0], c.pool);
                });
          }
          break;
        }
        if (!deconv && is_qs8(x) && is_qs8(O()) && (f.dtype == DataType::qint8 || f.dtype == DataType::qcint8) &&
            (b == nullptr || b->dtype == DataType::qint32 || b->dtype == DataType::qcint32)) {
          const Value o = O();
          const auto in_zp = static_cast<int8_t>(x.zero_point);
          const float in_scale = x.scale;
          int8_t lo, hi;
          q8_range(o, lo, hi);
          if (f.quant == QuantKind::PerTensor) {
            check_scale_ratio(double(in_scale) * f.scale / o.scale, 0x1.0p-32, 256.0, "requantization");
          } else {
            for (float fs : f.channel_scales) {
              check_scale_ratio(double(in_scale) * fs / o.scale, 0x1.0p-32, 256.0, "requantization");
            }
          }
          const auto* kernel = reinterpret_cast<const int8_t*>(f.data);
          const auto* bias_data = b == nullptr ? nullptr : reinterpret_cast<const int32_t*>(b->data);
          if (f.quant == QuantKind::PerChannel && f.channel_dim != (depthwise ? 3u : 0u)) {
            unsupported("per-channel scales must follow the outputs");
          }
          if (depthwise && gout == 1 && w.dilation_h == 1 && w.dilation_w == 1 &&
              DepthwiseConvQS8::supported(cin, w.kernel_h)) {
            // The requantization scale of each channel, computed as XNNPACK computes it (in float).
            std::vector<float> scales(cin);
            for (size_t ch = 0; ch < cin; ++ch) {
              const float ks = f.quant == QuantKind::PerChannel ? f.channel_scales[ch] : f.scale;
              scales[ch] = in_scale * ks / o.scale;
            }
            DepthwiseConvQS8::Params p;
            p.channels = cin;
            p.kernel_h = w.kernel_h;
            p.kernel_w = w.kernel_w;
            p.stride_h = w.stride_h;
            p.stride_w = w.stride_w;
            p.pad_top = w.pad_top;
            p.pad_left = w.pad_left;
            p.in_zero_point = in_zp;
            p.out_zero_point = static_cast<int8_t>(o.zero_point);
            p.out_min = lo;
            p.out_max = hi;
            auto conv = std::make_shared<const DepthwiseConvQS8>(kernel, bias_data, scales.data(), p);
            packed_bytes_ += conv->bytes();
            add_own([=, scratch = std::vector<int8_t>()](const RunContext& c) mutable {
              const Shape& s = c.shapes[in0];
              const Shape& os = c.shapes[out0];
              conv->run(static_cast<const int8_t*>(c.data[in0]), s[0], s[1], s[2], os[1], os[2],
                        static_cast<int8_t*>(c.data[out0]), scratch);
            });
            break;
          }
          if (f.quant == QuantKind::PerChannel) {
            const std::vector<float> scales = f.channel_scales;
            add_xnn(
                depthwise ? "depthwise convolution qc8" : "convolution qc8",
                [=](const Shape*, ops::Operator& op) {
                  return ops::create_convolution_qc8(cp, {in_scale, in_zp}, scales.data(), kernel, bias_data,
                                                     qparams(o), lo, hi, op);
                },
                [=](ops::Operator& op, const RunContext& c) {
                  const Shape& s = c.shapes[in0];
                  return ops::setup_convolution(op, s[0], s[1], s[2], c.data[in0], c.data[out0], c.pool);
                });
          } else {
            if (f.zero_point != 0) unsupported("per-tensor int8 weights need zero point 0");
            const float k_scale = f.scale;
            add_xnn(
                depthwise ? "depthwise convolution qs8" : "convolution qs8",
                [=](const Shape*, ops::Operator& op) {
                  return ops::create_convolution_qs8(cp, {in_scale, in_zp}, k_scale, kernel, bias_data, qparams(o), lo,
                                                     hi, op);
                },
                [=](ops::Operator& op, const RunContext& c) {
                  const Shape& s = c.shapes[in0];
                  return ops::setup_convolution(op, s[0], s[1], s[2], c.data[in0], c.data[out0], c.pool);
                });
          }
          break;
        }
        unsupported("");
        break;
      }

      // ---- pooling ------------------------------------------------------------------------------------
      case NodeKind::GlobalAvgPooling2d: {
        keep(in0);
        auto channels_of = [in0](const Shape* s) { return std::max<size_t>(s[in0][3], 1); };
        auto width_of = [in0](const RunContext& c) { return c.shapes[in0][1] * c.shapes[in0][2]; };
        if (is_f32(V(0)) && is_f32(O())) {
          add_xnn(
              "global average pooling f32",
              [=](const Shape* s, ops::Operator& op) {
                return ops::create_global_average_pooling_f32(channels_of(s), out_min, out_max, op);
              },
              [=](ops::Operator& op, const RunContext& c) {
                return ops::setup_global_average_pooling(op, c.shapes[in0][0], width_of(c), c.data[in0], c.data[out0],
                                                         c.pool);
              },
              channels_of);
          break;
        }
        if (is_qs8(V(0)) && is_qs8(O())) {
          // Own kernel: the int32 sum of each channel, scaled in fp32, the output zero point added, then rounded
          // half to even, as the official runtime's XNNPACK computes a quantized mean. The 2022 library rounds
          // before adding the zero point, so ties go the other way for an odd zero point; on a 2x2 map (an int8
          // MobileNetV2 at 64x64) a quarter of the outputs are ties.
          const Value x = V(0), o = O();
          int8_t lo, hi;
          q8_range(o, lo, hi);
          const int32_t in_zero = x.zero_point, out_zero = o.zero_point;
          add_own([=, sums = std::vector<int32_t>()](const RunContext& c) mutable {
            const Shape& sh = c.shapes[in0];
            const size_t batch = sh[0], pixels = sh[1] * sh[2], channels = std::max<size_t>(sh[3], 1);
            const float scale = x.scale / (o.scale * static_cast<float>(std::max<size_t>(pixels, 1)));
            const float zero = static_cast<float>(out_zero);
            const auto* in = static_cast<const int8_t*>(c.data[in0]);
            auto* out = static_cast<int8_t*>(c.data[out0]);
            sums.resize(channels);
            for (size_t b = 0; b < batch; ++b, out += channels) {
              std::fill(sums.begin(), sums.end(), -in_zero * static_cast<int32_t>(pixels));
              for (size_t p = 0; p < pixels; ++p, in += channels) {
                for (size_t ch = 0; ch < channels; ++ch) sums[ch] += in[ch];
              }
              for (size_t ch = 0; ch < channels; ++ch) {
                const float v = std::nearbyint(static_cast<float>(sums[ch]) * scale + zero);
                out[ch] = static_cast<int8_t>(std::clamp(v, float(lo), float(hi)));
              }
            }
          });
          break;
        }
        unsupported("");
        break;
      }
      case NodeKind::AvgPooling2d:
      case NodeKind::MaxPooling2d: {
        keep(in0);
        const WindowParams w = node.window;
        const bool is_max = node.kind == NodeKind::MaxPooling2d;
        const ops::PoolParams pp = pool_params(w);
        auto channels_of = [in0](const Shape* s) { return std::max<size_t>(s[in0][3], 1); };
        if (is_f32(V(0)) && is_f32(O())) {
          add_xnn(
              is_max ? "max pooling f32" : "average pooling f32",
              [=](const Shape* s, ops::Operator& op) {
                if (is_max) return ops::create_max_pooling_f32(pp, channels_of(s), out_min, out_max, op);
                return ops::create_average_pooling_f32(pp, channels_of(s), out_min, out_max, op);
              },
              [=](ops::Operator& op, const RunContext& c) {
                const Shape& s = c.shapes[in0];
                return ops::setup_pooling(op, s[0], s[1], s[2], c.data[in0], c.data[out0], c.pool);
              },
              channels_of);
          break;
        }
        if (is_max && is_qs8(V(0)) && is_qs8(O()) && same_quant(V(0), O())) {
          int8_t lo, hi;
          q8_range(O(), lo, hi);
          add_xnn(
              "max pooling s8",
              [=](const Shape* s, ops::Operator& op) {
                return ops::create_max_pooling_s8(pp, channels_of(s), lo, hi, op);
              },
              [=](ops::Operator& op, const RunContext& c) {
                const Shape& s = c.shapes[in0];
                return ops::setup_pooling(op, s[0], s[1], s[2], c.data[in0], c.data[out0], c.pool);
              },
              channels_of);
          break;
        }
        unsupported("");
        break;
      }
      case NodeKind::ArgMaxPooling2d: {
        const uint32_t index_out = node.outputs[1];
        if (!is_f32(V(0)) || !is_f32(O(0)) || datatype_size(O(1).dtype) != 4 || is_f32(O(1))) unsupported("");
        keep(in0);
        const ops::PoolParams pp = pool_params(node.window);
        auto channels_of = [in0](const Shape* s) { return std::max<size_t>(s[in0][3], 1); };
        add_xnn(
            "argmax pooling f32",
            [=](const Shape* s, ops::Operator& op) { return ops::create_argmax_pooling_f32(pp, channels_of(s), op); },
            [=](ops::Operator& op, const RunContext& c) {
              const Shape& s = c.shapes[in0];
              return ops::setup_argmax_pooling_f32(op, s[0], s[1], s[2], static_cast<const float*>(c.data[in0]),
                                                   static_cast<float*>(c.data[out0]),
                                                   static_cast<uint32_t*>(c.data[index_out]), c.pool);
            },
            channels_of);
        break;
      }
      case NodeKind::StaticResizeBilinear2D: {
        if (!is_f32(V(0)) || !is_f32(O())) unsupported("");
        keep(in0);
        const uint32_t flags = node.flags;
        const size_t new_h = node.new_height, new_w = node.new_width;
        auto channels_of = [in0](const Shape* s) { return std::max<size_t>(s[in0][3], 1); };
        add_xnn(
            "resize bilinear f32",
            [=](const Shape* s, ops::Operator& op) {
              return ops::create_resize_bilinear_f32(channels_of(s), new_h, new_w, flags, op);
            },
            [=](ops::Operator& op, const RunContext& c) {
              const Shape& s = c.shapes[in0];
              return ops::setup_resize_bilinear_f32(op, s[0], s[1], s[2], static_cast<const float*>(c.data[in0]),
                                                    static_cast<float*>(c.data[out0]), c.pool);
            },
            channels_of);
        break;
      }
    }
  }
}

// ---- running -----------------------------------------------------------------------------------------

void Executor::plan_memory() {
  const size_t n = graph_.values.size();
  storage_root_.resize(n);
  for (size_t i = 0; i < n; ++i) storage_root_[i] = static_cast<uint32_t>(i);
  // Reshapes, copies and transposes that only move size-1 dims are views of their input when their
  // output is internal.
  for (const Node& node : graph_.nodes) {
    const uint32_t in = node.inputs.empty() ? kInvalidId : node.inputs[0];
    const uint32_t out = node.outputs[0];
    if (in == kInvalidId || graph_.values[out].is_external()) continue;
    bool view = node.kind == NodeKind::StaticReshape || node.kind == NodeKind::Copy;
    if (node.kind == NodeKind::StaticTranspose) view = transpose_is_copy(shapes_[in], node.list_a);
    if (view) storage_root_[out] = storage_root_[in];
  }
  constexpr size_t kUnused = std::numeric_limits<size_t>::max();
  std::vector<size_t> first(n, kUnused), last(n, 0);
  for (size_t i = 0; i < graph_.nodes.size(); ++i) {
    const Node& node = graph_.nodes[i];
    for (uint32_t out : node.outputs) {
      const uint32_t r = storage_root_[out];
      first[r] = std::min(first[r], i);
      last[r] = std::max(last[r], i);
    }
    for (uint32_t in : node.inputs) {
      if (in == kInvalidId) continue;
      const uint32_t r = storage_root_[in];
      last[r] = std::max(last[r], i);
    }
  }
  struct Slot {
    uint32_t value;
    size_t bytes;
  };
  std::vector<Slot> slots;
  for (uint32_t v = 0; v < n; ++v) {
    if (storage_root_[v] != v || first[v] == kUnused || is_constant_[v] || graph_.values[v].is_external()) continue;
    const size_t bytes = (value_storage_bytes(graph_.values[v], shapes_[v]) + 63) & ~size_t{63};
    slots.push_back({v, bytes});
  }
  std::stable_sort(slots.begin(), slots.end(), [](const Slot& a, const Slot& b) { return a.bytes > b.bytes; });
  arena_offset_.assign(n, kUnused);
  struct Placed {
    size_t offset, bytes, first, last;
  };
  std::vector<Placed> placed;
  size_t total = 0;
  for (const Slot& s : slots) {
    std::vector<std::pair<size_t, size_t>> busy;
    for (const Placed& p : placed) {
      if (p.first <= last[s.value] && first[s.value] <= p.last) busy.emplace_back(p.offset, p.offset + p.bytes);
    }
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    for (const auto& [b, e] : busy) {
      if (offset + s.bytes <= b) break;
      offset = std::max(offset, e);
    }
    arena_offset_[s.value] = offset;
    placed.push_back({offset, s.bytes, first[s.value], last[s.value]});
    total = std::max(total, offset + s.bytes);
  }
  arena_size_ = total;
  if (total > arena_capacity_ || !arena_) {
    try {
      arena_ = allocate(total);
    } catch (const std::bad_alloc&) {
      run_fail("cannot allocate " + std::to_string(total) + " bytes for intermediate values");
    }
    arena_capacity_ = total;
  }
  for (auto& step : steps_) step->reshape(shapes_.data());
}

namespace {

bool dtype_matches(DataType dtype, ScalarType st, bool output) {
  switch (dtype) {
    case DataType::fp32: return st == ScalarType::Float;
    case DataType::fp16: return st == ScalarType::Half;
    case DataType::bf16: return st == ScalarType::BFloat16;
    case DataType::qint8:
    case DataType::qcint8: return st == ScalarType::Char || st == ScalarType::QInt8;
    case DataType::quint8: return st == ScalarType::Byte || st == ScalarType::QUInt8;
    case DataType::qint32:
    case DataType::qcint32:
    case DataType::int32:
      return st == ScalarType::Int || st == ScalarType::QInt32 || (output && st == ScalarType::Long);
    default: return false;
  }
}

Tensor& external_tensor(std::span<EValue* const> args, const Value& v) {
  if (v.external_id >= args.size() || args[v.external_id] == nullptr) {
    run_fail("external value " + std::to_string(v.external_id) + " has no delegate argument (the call has " +
             std::to_string(args.size()) + ")");
  }
  const EValue& arg = *args[v.external_id];
  if (!arg.is_tensor()) {
    run_fail("delegate argument " + std::to_string(v.external_id) + " is a " + tag_name(arg.tag()) +
             ", expected a tensor");
  }
  return arg.to_tensor();
}

}  // namespace

void Executor::execute(std::span<EValue* const> args) {
  std::lock_guard<std::mutex> lock(mutex_);
  // Inputs: physical shapes (sizes permuted by dim order) and data.
  bool changed = !planned_;
  for (size_t i = 0; i < graph_.input_values.size(); ++i) {
    const uint32_t vid = graph_.input_values[i];
    const Value& v = graph_.values[vid];
    Tensor& t = external_tensor(args, v);
    if (!dtype_matches(v.dtype, t.dtype(), false)) {
      run_fail("input " + std::to_string(v.external_id) + " is " + std::string(scalar_type_name(t.dtype())) +
               ", the graph expects " + datatype_name(v.dtype));
    }
    // The tensor's own rank wins over the serialized one (a 0-d scalar is serialized as [1]).
    if (t.dim() > kMaxDims) {
      run_fail("input " + std::to_string(v.external_id) + " has rank " + std::to_string(t.dim()) +
               " (XNNPACK allows at most 6)");
    }
    Shape s;
    s.rank = static_cast<uint8_t>(t.dim());
    for (int d = 0; d < s.rank; ++d) s[d] = static_cast<size_t>(t.size(t.dim_order()[d]));
    if (s != input_shapes_[i]) {
      input_shapes_[i] = s;
      changed = true;
    }
    if (t.data() == nullptr && t.numel() > 0) run_fail("input " + std::to_string(v.external_id) + " has no data");
    data_[vid] = t.data();
  }
  if (changed) {
    for (size_t i = 0; i < graph_.input_values.size(); ++i) shapes_[graph_.input_values[i]] = input_shapes_[i];
    planned_ = false;
    propagate_shapes(ErrorKind::ExecutionError);
    plan_memory();
    planned_ = true;
  }
  // Inputs the caller owns: XNNPACK may read a few bytes past their end, so a buffer that ends within
  // XNN_EXTRA_BYTES of a page boundary is staged through a padded copy.
  for (size_t i = 0; i < graph_.input_values.size(); ++i) {
    const uint32_t vid = graph_.input_values[i];
    const size_t bytes = value_storage_bytes(graph_.values[vid], shapes_[vid]);
    if (bytes == 0 || data_[vid] == nullptr) continue;
    const auto end = reinterpret_cast<uintptr_t>(data_[vid]) + bytes - 1;
    if ((end & 4095u) < 4096u - ops::kExtraBytes) continue;
    if (staging_capacity_[i] < bytes) {
      staging_[i] = allocate(bytes);
      staging_capacity_[i] = bytes;
    }
    std::memcpy(staging_[i].get(), data_[vid], bytes);
    data_[vid] = staging_[i].get();
  }
  // Outputs: resized to the propagated shape (logical order), written in place.
  for (uint32_t vid : graph_.output_values) {
    const Value& v = graph_.values[vid];
    Tensor& t = external_tensor(args, v);
    if (!dtype_matches(v.dtype, t.dtype(), true)) {
      run_fail("output " + std::to_string(v.external_id) + " is " + std::string(scalar_type_name(t.dtype())) +
               ", the graph produces " + datatype_name(v.dtype));
    }
    const Shape& s = shapes_[vid];
    if (t.dim() != s.rank) {
      // Ranks may differ only by size-1 dims (a 0-d output computed as [1]); the bytes are the same.
      if (static_cast<size_t>(t.numel()) != s.numel()) {
        run_fail("output " + std::to_string(v.external_id) + " has rank " + std::to_string(t.dim()) +
                 ", the graph produces " + s.str());
      }
      data_[vid] = t.data();
      continue;
    }
    int64_t sizes[kMaxDims];
    for (int d = 0; d < s.rank; ++d) sizes[t.dim_order()[d]] = static_cast<int64_t>(s[d]);
    if (!t.try_resize(std::span<const int64_t>(sizes, s.rank))) {
      run_fail("output " + std::to_string(v.external_id) + " cannot hold the result shape " + s.str() +
               " (its bound is " + std::to_string(t.capacity_numel()) + " elements)");
    }
    data_[vid] = t.data();
  }
  for (size_t v = 0; v < data_.size(); ++v) {
    if (is_constant_[v]) {
      data_[v] = constant_data_[v];
    } else if (arena_offset_[v] != std::numeric_limits<size_t>::max()) {
      data_[v] = arena_.get() + arena_offset_[v];
    }
  }
  for (size_t v = 0; v < data_.size(); ++v) {
    if (storage_root_[v] != v) data_[v] = data_[storage_root_[v]];
  }
  const RunContext ctx{data_.data(), shapes_.data(), ThreadPool::global().handle()};
  if (delegate_profiling_active()) {
    for (auto& step : steps_) {
      const uint64_t start = profile_clock_ns();
      step->run(ctx);
      report_delegate_part(step->label(), step->node().debug_handle, start, profile_clock_ns());
    }
  } else {
    for (auto& step : steps_) step->run(ctx);
  }
  // int64 outputs: the graph wrote int32 values; widen them in place from the back.
  for (uint32_t vid : graph_.output_values) {
    Tensor& t = external_tensor(args, graph_.values[vid]);
    if (t.dtype() != ScalarType::Long) continue;
    auto* bytes = static_cast<uint8_t*>(t.data());
    for (int64_t i = t.numel(); i-- > 0;) {
      int32_t narrow;
      std::memcpy(&narrow, bytes + i * 4, sizeof(narrow));
      const int64_t wide = narrow;
      std::memcpy(bytes + i * 8, &wide, sizeof(wide));
    }
  }
}

}  // namespace etnp::xnn
