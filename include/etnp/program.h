// Loading and running ExecuTorch programs.
//
//   auto program = etnp::Program::load_file("model.pte");
//   auto method = program.load_method("forward");
//   std::vector<float> x(3);
//   std::vector<etnp::Value> inputs = {etnp::TensorRef{etnp::ScalarType::Float, {3}, {}, x.data()}};
//   std::vector<etnp::Value> outputs = method->execute(inputs);  // a std::span<const etnp::Value>
//
// Thread safety: a Program is immutable after load and may be shared by any number of threads; each Method
// owns its planned memory and must be used by one thread at a time (load one Method per thread, or lock).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "etnp/backend.h"
#include "etnp/error.h"
#include "etnp/file_info.h"
#include "etnp/profiling.h"
#include "etnp/scalar_type.h"
#include "etnp/value.h"

namespace etnp {

/// Bounds on what a program may make the runtime allocate or do, for files from sources that are not trusted
/// (docs/security.md). A program beyond a bound is refused with ProgramLoadError naming the bound and the
/// sizes, before the memory is allocated; an execute beyond one fails with ExecutionError. 0 means no bound.
struct ResourceLimits {
  /// Bytes one method may hold: its planned arenas, the storage it keeps for unplanned tensors and the constants
  /// it makes at load, its kernels' packed weights and its delegates' memory. Default: half of physical memory.
  uint64_t max_method_bytes = default_max_method_bytes();
  /// The largest tensor a program may declare, in bytes. A dynamic tensor never grows past its declared upper
  /// bound, so this also bounds every resize.
  uint64_t max_tensor_bytes = 0;
  /// Instructions one execute may run: a program whose jumps loop forever fails after this many.
  uint64_t max_instructions_per_execute = 10'000'000;
  /// Counts a program may declare: methods, and per method values and instructions.
  uint64_t max_methods = 0;
  uint64_t max_values = 0;
  uint64_t max_instructions = 0;

  /// Half of this machine's physical memory (what max_method_bytes defaults to).
  static uint64_t default_max_method_bytes();
  /// The fields by name ("max_method_bytes", ...), in declaration order: what the CLI's --limit and the Python
  /// package's `limits` take.
  static std::span<const std::string_view> names();
  /// Sets the field called `name`; false when there is none.
  bool set(std::string_view name, uint64_t value);
  /// The field called `name`; nullopt when there is none.
  std::optional<uint64_t> get(std::string_view name) const;
};

struct LoadOptions {
  Verification verification = Verification::InternalConsistency;
  /// Memory, size, count and time bounds (ResourceLimits).
  ResourceLimits limits;
  /// External data files (.ptd) whose tensors and delegate constants the program refers to by key.
  std::vector<std::string> data_files;
  /// External data already in memory; the caller keeps the bytes alive as long as the Program.
  std::vector<std::span<const uint8_t>> data_buffers;
  /// Per-backend options for this program's delegates, e.g. {"XnnpackBackend", {{"num_threads", 2}}}.
  std::map<std::string, BackendOptions, std::less<>> backend_options;
  /// Record a timed event per instruction and delegate call (Method::profile_events()).
  bool enable_profiling = false;
};

/// A tensor by reference that owns neither its elements nor its shape: the allocation-free form of TensorRef,
/// for a caller that sets inputs and reads outputs on every call (Method::set_input, Method::output_view).
/// An input's spans and data are the caller's; an output's are the method's, valid until its next set_input,
/// run or execute.
struct TensorView {
  ScalarType dtype = ScalarType::Float;
  std::span<const int64_t> sizes;
  std::span<const uint8_t> dim_order;  ///< Empty means contiguous (row-major).
  const void* data = nullptr;

  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(dtype); }
};

/// A tensor passed in or handed back. Inputs point at the caller's memory; outputs at the method's memory,
/// valid until the next execute() of that method or its destruction.
struct TensorRef {
  ScalarType dtype = ScalarType::Float;
  std::vector<int64_t> sizes;
  std::vector<uint8_t> dim_order;  ///< Empty means contiguous (row-major).
  const void* data = nullptr;

  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(dtype); }
  TensorView view() const { return TensorView{dtype, sizes, dim_order, data}; }
};

/// A method input or output: None, a tensor, or a scalar/string.
using Value = std::variant<std::monostate, TensorRef, int64_t, double, bool, std::string>;

struct TensorInfo {
  ScalarType dtype = ScalarType::Float;
  std::vector<int64_t> sizes;      ///< Upper bounds for a dynamic tensor.
  std::vector<uint8_t> dim_order;
  ShapeDynamism dynamism = ShapeDynamism::Static;
  bool memory_planned = false;
  size_t nbytes = 0;
  std::string name;                ///< Fully qualified name, when the program records one.
};

struct ValueInfo {
  Tag tag = Tag::None;
  TensorInfo tensor;  ///< When tag == Tensor.
  Value value;        ///< For Int/Double/Bool/String inputs: the value recorded at export.
};

struct MethodMeta {
  std::string name;
  std::vector<ValueInfo> inputs;
  std::vector<ValueInfo> outputs;
  /// The method's named tensors (weights, buffers: those with a fully qualified name), in value order.
  std::vector<TensorInfo> attributes;
  std::vector<int64_t> planned_buffer_sizes;  ///< One per arena (the file's entry 0 placeholder dropped).
  std::vector<std::string> backends;          ///< One per delegate entry, in order.
  std::vector<std::string> operators;         ///< Operator names in the method's operator table.
  size_t num_instructions = 0;
  size_t num_values = 0;
};

/// One reason a method would not load here.
struct LoadProblem {
  enum class Kind : uint8_t {
    MissingBackend,      ///< A delegate's backend is not registered or not available on this machine.
    MissingOperator,     ///< An instruction calls an operator this build lacks (uncalled ones do not count).
    ExternalData,        ///< A tensor stored in external data that the given .ptd files lack or hold wrongly.
    UnsupportedPayload,  ///< A delegate's backend rejects its payload (Backend::supports).
  };
  Kind kind = Kind::MissingBackend;
  /// What is missing or rejected: the backend id, the operator name, the data key; the backend id for a payload.
  std::string name;
  /// The reason in words, naming the delegate and node for a rejected payload.
  std::string message;
};

const char* load_problem_kind_name(LoadProblem::Kind kind);  // "missing_backend", "missing_operator", ...

/// Whether Program::load_method(method) succeeds here, and every reason it would not. load_method checks
/// the same things (the dependencies before it builds anything, each payload before its backend's init()).
struct LoadVerdict {
  std::string method;
  std::vector<LoadProblem> problems;
  bool loads() const { return problems.empty(); }
};

class Method;

class Program {
 public:
  /// Loads a .pte file (memory-mapped, not copied). Throws etnp::Error(ProgramLoadError) on a bad file.
  static Program load_file(const std::string& path, const LoadOptions& options = {});
  /// Loads from memory. `keep_alive` owns the bytes (may be null if the caller guarantees their lifetime);
  /// unaligned bytes are copied once.
  static Program load_buffer(std::span<const uint8_t> bytes, std::shared_ptr<const void> keep_alive = nullptr,
                             const LoadOptions& options = {});
  /// Loads from an open file descriptor (memory-mapped; the descriptor may be closed afterwards).
  static Program load_fd(int fd, const LoadOptions& options = {});

  std::vector<std::string> method_names() const;
  bool has_method(std::string_view name) const;
  /// Throws InvalidArgument naming the methods that exist when `name` is not one of them.
  MethodMeta method_meta(std::string_view name) const;
  /// Builds a runnable method: plans its memory, resolves kernels, initializes delegates.
  std::unique_ptr<Method> load_method(std::string_view name) const;

  ProgramInfo info() const;
  /// Every reason load_method(method) would fail here (empty when it loads), without building the method.
  /// Throws InvalidArgument like method_meta() for an unknown method.
  LoadVerdict load_verdict(std::string_view method) const;
  /// The pytree spec strings of a method (empty when absent).
  std::string input_spec(std::string_view method) const;
  std::string output_spec(std::string_view method) const;

 private:
  struct Impl;  // src/runtime/program_impl.h
  friend class Method;
  explicit Program(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;
};

class Method {
 public:
  ~Method();
  const MethodMeta& meta() const;
  const std::string& name() const;
  size_t num_inputs() const;
  size_t num_outputs() const;

  /// Whether the method writes input `index` in place (a program that mutates an input, exported with
  /// alloc_graph_input=False): it then writes the caller's memory of that input, through TensorRef::data.
  /// A memory-planned input is copied into the method and the caller's memory is never written.
  bool writes_input(size_t index) const;

  /// Sets every input, runs, and returns the outputs (see TensorRef for their lifetime).
  std::vector<Value> execute(std::span<const Value> inputs);

  /// Step-wise use: set inputs, run, read outputs.
  void set_input(size_t index, const Value& value);
  void run();
  Value output(size_t index) const;
  /// The same without allocating: a tensor input set from a view (checked as set_input(Value) checks it), and a
  /// tensor output seen in place (InvalidArgument when output `index` is not a tensor; output() returns those).
  /// A loop of set_input(TensorView), run() and output_view() allocates nothing once the method is loaded.
  void set_input(size_t index, const TensorView& tensor);
  TensorView output_view(size_t index) const;
  /// Makes output `index` be written to caller memory (at least its TensorInfo::nbytes). Throws
  /// InvalidArgument naming the output when output_buffer_refusal(index) is not empty.
  void set_output_buffer(size_t index, void* data, size_t nbytes);
  /// Why output `index` cannot be bound to caller memory, as a clause after "output N": it "is Int, not a
  /// tensor", "is a constant of the program", "is memory-planned", is a method input or another output
  /// returned as is, a view or a move target (aliased), or is written by no instruction. Empty when it can be.
  const std::string& output_buffer_refusal(size_t index) const;

  /// Events recorded since load (or the last clear) when the program was loaded with enable_profiling.
  const std::vector<ProfileEvent>& profile_events() const;
  void clear_profile_events();

  /// Memory the method allocated at load besides its planned buffers (MethodMeta::planned_buffer_sizes):
  /// storage of unplanned tensors, constants computed at load (folded layouts and batch norms), weights that
  /// kernels packed, and what its delegates hold (DelegateHandle::bytes(): the XNNPACK delegate's copies of
  /// constants, the weights its own kernels packed and its intermediate arena once a run sized it, or, with
  /// its workspace_sharing_mode 1, the one arena the method's delegates share, counted once; not the
  /// weights packed inside XNNPACK operators, which the library does not report). Packed weights shared
  /// through the weight cache (always those of the portable matrix products with constant weights; the XNNPACK
  /// delegate's with its option weight_cache_enabled) are in no method's figure: they are counted once, by
  /// packed_weight_cache_stats() (etnp/backend.h).
  size_t load_time_bytes() const;

 private:
  struct Impl;  // src/runtime/method_impl.h
  friend class Program;
  explicit Method(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// Library version, e.g. "0.1.0".
const char* version();
/// The .pte schema identifier this runtime reads ("ET12").
const char* schema_identifier();
/// The ExecuTorch release whose format and semantics this runtime is verified against (its exporter and
/// runtime are the test oracle), e.g. "1.5.1". Programs of other releases with the same schema load too.
const char* executorch_version();

}  // namespace etnp
