#include "backends/xnnpack/xnn_executor.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>

#include "backends/xnnpack/xnn_ops.h"
#include "backends/xnnpack/xnn_rules.h"
#include "backends/xnnpack/xnn_shape.h"
#include "backends/xnnpack/xnn_steps.h"
#include "compute/memory_planner.h"
#include "etnp/backend.h"
#include "etnp/threadpool.h"

namespace etnp::xnn {
namespace {

// Largest element count of any value (2^36 fp32 elements is 256 GiB: beyond any real model).
constexpr size_t kMaxValueElements = size_t{1} << 36;

[[noreturn]] void load_fail(const std::string& msg) {
  throw Error(ErrorKind::ProgramLoadError, "XNNPACK payload: " + msg);
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

/// Propagates `shapes` through the nodes; the first node whose shapes or parameters do not fit, as
/// "node 3 (XNNConv2d): why", or "".
std::string propagate(const Graph& graph, std::vector<Shape>& shapes) {
  for (const Node& node : graph.nodes) {
    std::string err = infer_node_shapes(graph, node, shapes);
    if (err.empty()) {
      // Padding, resizing and transposed convolutions can grow shapes; keep byte sizes far from overflow.
      for (uint32_t out : node.outputs) {
        size_t numel = 1;
        for (int d = 0; d < shapes[out].rank && err.empty(); ++d) {
          const size_t dim = shapes[out][d];
          if (dim != 0 && numel > kMaxValueElements / dim) err = "output shape " + shapes[out].str() + " is too large";
          numel *= dim;
        }
      }
    }
    if (!err.empty()) return node.describe() + ": " + err;
  }
  return {};
}

/// Folds each clamp that alone reads a producer's output into the producer's output range; returns how many.
size_t fuse_clamps(Graph& graph) {
  std::vector<int> consumers(graph.values.size(), 0);
  std::vector<int> producer(graph.values.size(), -1);
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    for (uint32_t in : graph.nodes[i].inputs) {
      if (in != kInvalidId) ++consumers[in];
    }
    for (uint32_t out : graph.nodes[i].outputs) producer[out] = static_cast<int>(i);
  }
  std::vector<uint8_t> removed(graph.nodes.size(), 0);
  size_t fused = 0;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    Node& clamp = graph.nodes[i];
    if (clamp.kind != NodeKind::Clamp) continue;
    const uint32_t mid = clamp.inputs[0];
    const uint32_t out = clamp.outputs[0];
    const Value& mid_value = graph.values[mid];
    const Value& out_value = graph.values[out];
    if (producer[mid] < 0 || consumers[mid] != 1 || mid_value.is_external()) continue;
    Node& prod = graph.nodes[static_cast<size_t>(producer[mid])];
    if ((node_kind_traits(prod.kind) & kFusesClamp) == 0 || prod.outputs.size() != 1) continue;
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
    ++fused;
  }
  std::vector<Node> kept;
  kept.reserve(graph.nodes.size());
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    if (!removed[i]) kept.push_back(std::move(graph.nodes[i]));
  }
  graph.nodes = std::move(kept);
  return fused;
}

}  // namespace

CheckedGraph check_graph(Graph graph) {
  CheckedGraph c;
  c.graph = std::move(graph);
  const Graph& g = c.graph;
  c.shapes.resize(g.values.size());
  for (size_t i = 0; i < g.values.size(); ++i) c.shapes[i] = g.values[i].dims;
  if (std::string err = propagate(g, c.shapes); !err.empty()) {
    c.reasons.push_back(std::move(err));
    return c;  // later nodes' shapes are unknown
  }
  // Shapes derived from the serialized input dims must match the serialized ones, up to size-1 dims (the
  // propagated shape is the one used; XNNPACK itself recomputes shapes at run time).
  for (const Node& node : g.nodes) {
    for (uint32_t out : node.outputs) {
      if (c.shapes[out].numel() != g.values[out].dims.numel()) {
        c.reasons.push_back(node.describe() + ": output value " + std::to_string(g.values[out].serialized_id) +
                            " is declared " + g.values[out].dims.str() + " but the node produces " +
                            c.shapes[out].str());
      }
    }
  }
  if (!c.reasons.empty()) return c;
  c.fused_clamps = fuse_clamps(c.graph);
  for (const Node& node : g.nodes) {
    const NodeView view{node, g.values, c.shapes.data()};
    if (Refusal why = check_node(view)) c.reasons.push_back(refusal_message(view, *why));
  }
  return c;
}

static_assert(ops::kExtraBytes <= MethodWorkspace::kReadPastBytes,
              "the runtime's buffers leave too little room for XNNPACK's over-reads");

// ---- building ----------------------------------------------------------------------------------------

void Executor::AlignedDeleter::operator()(uint8_t* p) const { ::operator delete[](p, std::align_val_t(64)); }

Executor::AlignedBytes Executor::allocate(size_t bytes) {
  // XNNPACK may read up to XNN_EXTRA_BYTES past any buffer it is given.
  const size_t total = bytes + ops::kExtraBytes + 64;
  auto* p = static_cast<uint8_t*>(::operator new[](total, std::align_val_t(64)));
  std::memset(p + bytes, 0, total - bytes);
  return AlignedBytes(p);
}

Executor::Executor(Graph graph) : Executor(check_graph(std::move(graph))) {}

Executor::Executor(CheckedGraph checked, ExecutorOptions options)
    : graph_(std::move(checked.graph)),
      engines_(options.engines),
      shapes_(std::move(checked.shapes)),
      workspace_(options.workspace),
      shared_arena_(options.shared_arena && options.workspace != nullptr) {
  packed_.shared = options.share_weights;
  const xnn_status init = ops::initialize();
  if (init != xnn_status_success) {
    throw Error(ErrorKind::BackendNotAvailable,
                std::string("XNNPACK could not be initialized (") + ops::status_name(init) + ")");
  }
  if (!checked.reasons.empty()) {
    const size_t more = checked.reasons.size() - 1;
    load_fail(checked.reasons[0] + (more == 0 ? "" : " (and " + std::to_string(more) + " more)"));
  }
  for (const Value& v : graph_.values) {
    // parse_graph's missing_data mode: such a graph can be checked, never built.
    if (v.data_missing) load_fail("value " + std::to_string(v.serialized_id) + " has no constant data");
  }
  stats_.fused_clamps = checked.fused_clamps;
  const size_t n = graph_.values.size();
  is_constant_.resize(n);
  for (size_t i = 0; i < n; ++i) is_constant_[i] = graph_.values[i].is_constant();
  constant_data_.assign(n, nullptr);
  build_steps(options.release_constant);
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
  input_bytes_.assign(graph_.input_values.size(), 0);
  data_.assign(n, nullptr);
}

Executor::~Executor() = default;

void Executor::propagate_shapes() {
  if (std::string err = propagate(graph_, shapes_); !err.empty()) run_fail(err);
}

void Executor::build_steps(const std::function<void(std::span<const uint8_t>)>& release_constant) {
  // Copies a constant the steps read at run time into padded storage the executor owns.
  auto keep = [this](uint32_t id) {
    if (id == kInvalidId || !is_constant_[id] || constant_data_[id] != nullptr) return;
    const Value& v = graph_.values[id];
    const size_t bytes = value_storage_bytes(v, v.dims);
    AlignedBytes copy = allocate(bytes);
    std::memcpy(copy.get(), v.data, bytes);
    constant_data_[id] = copy.get();
    constant_storage_.push_back(std::move(copy));
    constant_bytes_ += bytes;
  };
  // The last node that reads each constant: once it is built, the constant's bytes are not read again.
  std::vector<size_t> last_reader(graph_.values.size(), 0);
  for (size_t i = 0; i < graph_.nodes.size(); ++i) {
    for (uint32_t in : graph_.nodes[i].inputs) {
      if (in != kInvalidId && is_constant_[in]) last_reader[in] = i;
    }
  }
  runs_with_next_.assign(graph_.nodes.size(), 0);
  std::vector<uint32_t> readers(graph_.values.size(), 0);
  for (const Node& node : graph_.nodes) {
    for (uint32_t in : node.inputs) {
      if (in != kInvalidId) ++readers[in];
    }
  }
  for (size_t i = 0; i < graph_.nodes.size(); ++i) {
    const Node& node = graph_.nodes[i];
    const NodeView view{node, graph_.values, shapes_.data()};
    StepBuilder builder{view, steps_, stats_.xnnpack_operators, stats_.own_kernels, packed_, keep, engines_};
    // A node whose output only the next node reads may run with it as one step.
    size_t last = i;
    if (i + 1 < graph_.nodes.size() && node.outputs.size() == 1 && readers[node.outputs[0]] == 1) {
      const NodeView next{graph_.nodes[i + 1], graph_.values, shapes_.data()};
      if (build_depthwise_pointwise(builder, next)) {
        runs_with_next_[i] = 1;
        last = i + 1;
        ++stats_.fused_pairs;
      }
    }
    if (last == i) build_node(builder);
    for (size_t j = i; release_constant && j <= last; ++j) {
      for (uint32_t in : graph_.nodes[j].inputs) {
        if (in == kInvalidId || !is_constant_[in] || last_reader[in] != j) continue;
        const Value& v = graph_.values[in];
        if (v.data != nullptr && v.data_bytes > 0) release_constant({v.data, v.data_bytes});
      }
    }
    i = last;
  }
}

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
      last[r] = std::max(last[r], i + runs_with_next_[i]);
    }
  }
  std::vector<uint32_t> planned;
  std::vector<compute::BufferLifetime> lifetimes;
  for (uint32_t v = 0; v < n; ++v) {
    if (storage_root_[v] != v || first[v] == kUnused || is_constant_[v] || graph_.values[v].is_external()) continue;
    planned.push_back(v);
    lifetimes.push_back({value_storage_bytes(graph_.values[v], shapes_[v]), static_cast<int64_t>(first[v]),
                         static_cast<int64_t>(last[v])});
  }
  const compute::MemoryPlan plan = compute::plan_memory(lifetimes, 64);
  arena_values_.clear();
  for (size_t i = 0; i < planned.size(); ++i) arena_values_.emplace_back(planned[i], plan.offsets[i]);
  const size_t total = plan.total;
  arena_size_ = total;
  arena_base_ = nullptr;
  if (!shared_arena_ && (total > arena_capacity_ || !arena_)) {
    try {
      arena_ = compute::ZeroedBuffer(total + ops::kExtraBytes);  // XNNPACK may read a few bytes past a value
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

void Executor::execute(std::span<EValue* const> args, ThreadPool& pool) {
  std::lock_guard<std::mutex> lock(mutex_);
  const ThreadPool::Use use(pool);
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
    propagate_shapes();
    plan_memory();
    for (size_t i = 0; i < graph_.input_values.size(); ++i) {
      const uint32_t vid = graph_.input_values[i];
      input_bytes_[i] = value_storage_bytes(graph_.values[vid], shapes_[vid]);
    }
    // The constants keep their place until the shapes change; the arena's values until the arena moves.
    for (size_t v = 0; v < data_.size(); ++v) {
      if (is_constant_[v]) data_[v] = constant_data_[v];
    }
    views_.clear();
    for (size_t v = 0; v < data_.size(); ++v) {
      if (storage_root_[v] != v) views_.push_back(static_cast<uint32_t>(v));
    }
    planned_ = true;
  }
  // The method's shared scratch moves when another of its delegates needed more since this one last ran.
  uint8_t* arena = arena_.data();
  if (shared_arena_) {
    try {
      arena = workspace_->shared_scratch(arena_size_);
    } catch (const std::bad_alloc&) {
      run_fail("cannot allocate " + std::to_string(arena_size_) + " bytes for intermediate values");
    }
  }
  if (arena != arena_base_) {
    for (const auto& [v, offset] : arena_values_) data_[v] = arena + offset;
    arena_base_ = arena;
  }
  // Inputs the caller owns: XNNPACK may read a few bytes past their end, so a buffer that ends within
  // XNN_EXTRA_BYTES of a page boundary is staged through a padded copy.
  for (size_t i = 0; i < graph_.input_values.size(); ++i) {
    const uint32_t vid = graph_.input_values[i];
    const size_t bytes = input_bytes_[i];
    if (bytes == 0 || data_[vid] == nullptr) continue;
    const auto end = reinterpret_cast<uintptr_t>(data_[vid]) + bytes - 1;
    if ((end & 4095u) < 4096u - ops::kExtraBytes) continue;
    if (workspace_ != nullptr && workspace_->holds(data_[vid], bytes)) continue;  // the method's: padded
    if (staging_capacity_[i] < bytes) {
      staging_[i] = allocate(bytes);
      staging_bytes_ += bytes - staging_capacity_[i];
      staging_capacity_[i] = bytes;
    }
    std::memcpy(staging_[i].get(), data_[vid], bytes);
    data_[vid] = staging_[i].get();
  }
  // Outputs: resized to the propagated shape (logical order), written in place.
  bool long_outputs = false;
  for (uint32_t vid : graph_.output_values) {
    const Value& v = graph_.values[vid];
    Tensor& t = external_tensor(args, v);
    long_outputs = long_outputs || t.dtype() == ScalarType::Long;
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
    if (!t.try_resize(std::span<const int64_t>(sizes, s.rank))) {  // inline where they are these sizes already
      run_fail("output " + std::to_string(v.external_id) + " cannot hold the result shape " + s.str() +
               " (its bound is " + std::to_string(t.capacity_numel()) + " elements)");
    }
    data_[vid] = t.data();
  }
  for (const uint32_t v : views_) data_[v] = data_[storage_root_[v]];
  // XNNPACK's operators run on the pool's threads of now, kept for the whole call (a concurrent
  // set_num_threads does not stop them); an operator last reshaped for other threads is reshaped again.
  const ThreadPool::Lease lease = pool.lease();
  const RunContext ctx{data_.data(), shapes_.data(), lease.handle(), &scratch_};
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
  if (!long_outputs) return;
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
