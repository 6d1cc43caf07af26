// Writes .pte programs and .ptd external data without PyTorch: values, tensors (constant, memory-planned,
// unplanned, mutable with initial state, external), instruction chains, delegates and named data, laid out as
// the ExecuTorch serializer lays them out (shared/spec/pte-format.md §2), so the official runtime accepts them.
//
//   etnp::format::ProgramWriter w;
//   auto& m = w.add_method("forward");
//   const int32_t x = m.planned_tensor({ScalarType::Float, {2, 3}});
//   const int32_t y = m.planned_tensor({ScalarType::Float, {2, 3}});
//   const int32_t out = m.planned_tensor({ScalarType::Float, {2, 3}});
//   m.kernel("aten::add.out", {x, y, m.int_value(1), out, out});
//   m.set_inputs({x, y});
//   m.set_outputs({out});
//   w.write("add.pte");
//
// Nothing here is validated beyond what the writer needs to lay the file out: a test may deliberately write a
// program the runtime must reject. Index arguments are value indices of the same method.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "etnp/named_data.h"
#include "etnp/scalar_type.h"
#include "etnp/tensor.h"

namespace executorch_flatbuffer {
struct ProgramT;
}

namespace etnp::format {

/// Shape and type of a tensor value. For ShapeDynamism::DynamicBound, `sizes` are the upper bounds.
struct TensorSpec {
  ScalarType dtype = ScalarType::Float;
  std::vector<int32_t> sizes;
  std::vector<uint8_t> dim_order;  ///< Empty = contiguous (0, 1, ..., rank-1).
  ShapeDynamism dynamism = ShapeDynamism::Static;
  std::string name;                ///< Fully qualified name (ExtraTensorInfo); required for external tensors.

  /// Element count times element size, from `sizes` (the bound of a dynamic tensor).
  size_t nbytes() const;
};

/// Raw bytes of a typed array, for constant data.
template <typename T>
std::span<const uint8_t> as_bytes(std::span<const T> values) {
  return {reinterpret_cast<const uint8_t*>(values.data()), values.size_bytes()};
}
template <typename T>
std::span<const uint8_t> as_bytes(const std::vector<T>& values) {
  return as_bytes(std::span<const T>(values));
}

/// Where a delegate's payload goes: its own segment (what exporters do) or inline in the flatbuffer.
enum class PayloadPlacement : uint8_t { Segment, Inline };

struct CompileSpecEntry {
  std::string key;
  std::vector<uint8_t> value;
};

class ProgramWriter;

/// One method (ExecutionPlan). Obtained from ProgramWriter::add_method; owned by the ProgramWriter.
class MethodWriter {
 public:
  // --- Values. Each returns the new value's index. ------------------------------------------------------
  int32_t none();
  int32_t int_value(int64_t v);
  int32_t double_value(double v);
  int32_t bool_value(bool v);
  int32_t string_value(std::string v);
  /// An IntList of literal integers: adds one Int value per item, then the list (which boxes their indices).
  int32_t int_list(std::span<const int64_t> items);
  int32_t int_list(std::initializer_list<int64_t> items) { return int_list(std::span<const int64_t>(items)); }
  /// An IntList over existing Int values (e.g. symbolic sizes computed by earlier instructions).
  int32_t int_list_of_values(std::vector<int32_t> value_indices);
  int32_t double_list(std::vector<double> items);
  int32_t bool_list(std::vector<bool> items);
  int32_t tensor_list(std::vector<int32_t> tensor_values);
  /// Items are tensor (or None) value indices, or -1 for None.
  int32_t optional_tensor_list(std::vector<int32_t> items);

  // --- Tensors. --------------------------------------------------------------------------------------------
  /// Memory-planned: the writer's planner gives it an offset in arena `memory_id` (1-based), sharing bytes with
  /// tensors whose lifetimes (instruction ranges, see plan_memory) do not overlap.
  int32_t planned_tensor(TensorSpec spec, uint32_t memory_id = 1);
  /// A planned view of `base`'s bytes (what exporters emit for an elided view_copy): same arena and offset.
  /// `spec.nbytes()` must not exceed the base's; the base stays alive as long as the alias is used.
  /// A `byte_offset` starts the view inside the base: no exporter does that (tests make corrupt plans with it).
  int32_t planned_alias(int32_t base, TensorSpec spec, uint64_t byte_offset = 0);
  /// No storage at load: an input the caller's buffer backs, an output the caller supplies, a view target.
  int32_t unplanned_tensor(TensorSpec spec);
  /// Read-only data in the program's constant segment (identical bytes are stored once).
  int32_t constant_tensor(TensorSpec spec, std::span<const uint8_t> data);
  /// Planned memory whose initial contents come from the mutable-data segment (state such as a KV cache).
  int32_t mutable_tensor(TensorSpec spec, std::span<const uint8_t> initial, uint32_t memory_id = 1);
  /// A constant whose bytes live in an external .ptd under `spec.name`. When `data` is non-empty the bytes are
  /// also added to the program writer's external data (ProgramWriter::external_data()).
  int32_t external_tensor(TensorSpec spec, std::span<const uint8_t> data = {});

  // --- Instructions (appended to the current chain). Each returns its index in the chain. ---------------------
  /// `op` is the qualified name with overload, e.g. "aten::add.out", "executorch_prim::et_view.default", or
  /// without overload ("aten::_local_scalar_dense"). Operators are listed once per method.
  size_t kernel(std::string_view op, std::vector<int32_t> args);
  /// A DelegateCall with a new BackendDelegate entry. `args` = delegate inputs then outputs.
  size_t delegate(std::string backend_id, std::vector<uint8_t> payload, std::vector<int32_t> args,
                  std::vector<CompileSpecEntry> compile_specs = {},
                  PayloadPlacement placement = PayloadPlacement::Segment);
  size_t move(int32_t from, int32_t to);
  /// Jumps to `destination` (an instruction index in this chain) when `cond` is false. Use
  /// set_jump_destination to patch a forward jump once the target is known.
  size_t jump_false(int32_t cond, int32_t destination);
  void set_jump_destination(size_t instruction, int32_t destination);
  size_t free(int32_t tensor_value);
  /// Instructions in the current chain so far (= the index the next instruction gets).
  size_t num_instructions() const;
  /// Starts a new chain (exporters emit one; the format allows several, run in order).
  void new_chain();

  // --- Signature. ----------------------------------------------------------------------------------------------
  void set_inputs(std::vector<int32_t> values) { inputs_ = std::move(values); }
  void set_outputs(std::vector<int32_t> values) { outputs_ = std::move(values); }
  /// Pytree spec strings (runtime-semantics.md §9). By default the writer emits torch's JSON encoding for a flat
  /// tuple of inputs and a single output or tuple of outputs.
  void set_input_spec(std::string spec) { input_spec_ = std::move(spec); has_input_spec_ = true; }
  void set_output_spec(std::string spec) { output_spec_ = std::move(spec); has_output_spec_ = true; }

  const std::string& name() const { return name_; }
  size_t num_values() const { return values_.size(); }
  /// Arena sizes the planner computed (index 0 = arena 1); valid after ProgramWriter::serialize().
  const std::vector<int64_t>& arena_sizes() const { return arena_sizes_; }
  /// Planned offset of a tensor value after serialize(), or -1 when it is not planned.
  int64_t planned_offset(int32_t value) const;

 private:
  friend class ProgramWriter;
  MethodWriter(ProgramWriter* owner, std::string name) : owner_(owner), name_(std::move(name)) {}

  enum class Kind : uint8_t { None, Int, Double, Bool, String, IntList, DoubleList, BoolList, TensorList,
                              OptionalTensorList, Tensor };
  enum class Storage : uint8_t { Planned, Alias, Unplanned, Constant, Mutable, External };
  struct Value {
    Kind kind = Kind::None;
    int64_t int_value = 0;
    double double_value = 0;
    bool bool_value = false;
    std::string string_value;
    std::vector<int64_t> items;        // list items (value indices, or -1)
    std::vector<double> double_items;
    std::vector<bool> bool_items;
    TensorSpec tensor;
    Storage storage = Storage::Unplanned;
    uint32_t memory_id = 0;
    int32_t alias_of = -1;
    uint64_t alias_offset = 0;         // bytes into the alias' base
    uint32_t data_index = 0;           // constant / mutable buffer index
    uint64_t offset = 0;               // planned offset, set by plan_memory
  };
  enum class InstrKind : uint8_t { Kernel, Delegate, Move, JumpFalse, Free };
  struct Instruction {
    InstrKind kind = InstrKind::Kernel;
    int32_t index = 0;            // op index / delegate index
    std::vector<int32_t> args;    // kernel/delegate args; move: {from, to}; jump: {cond, dest}; free: {value}
  };
  struct Delegate {
    std::string id;
    uint32_t payload = 0;         // index into the program writer's payload list
    PayloadPlacement placement = PayloadPlacement::Segment;
    std::vector<CompileSpecEntry> compile_specs;
  };

  int32_t push(Value v);
  size_t append(Instruction instr);
  void plan_memory();

  ProgramWriter* owner_;
  std::string name_;
  std::vector<Value> values_;
  std::vector<std::vector<Instruction>> chains_{1};
  std::vector<std::string> operators_;
  std::vector<Delegate> delegates_;
  std::vector<int32_t> inputs_, outputs_;
  std::string input_spec_, output_spec_;
  bool has_input_spec_ = false, has_output_spec_ = false;
  std::vector<int64_t> arena_sizes_;
};

/// A .ptd (FlatTensor "FT01") file: named tensors with their layout, and opaque named blobs.
class PtdWriter {
 public:
  void add_tensor(std::string key, const TensorLayout& layout, std::span<const uint8_t> data,
                  uint32_t alignment = 16);
  void add_blob(std::string key, std::span<const uint8_t> data, uint32_t alignment = 16);
  bool empty() const { return entries_.empty(); }
  size_t size() const { return entries_.size(); }
  bool contains(std::string_view key) const;
  /// The file: "FT01" flatbuffer with the FH01 header spliced in, then 128-byte aligned segments
  /// (identical blobs stored once).
  std::vector<uint8_t> serialize() const;
  void write(const std::string& path) const;

 private:
  struct Entry {
    std::string key;
    std::vector<uint8_t> data;
    uint32_t alignment = 16;
    bool has_layout = false;
    TensorLayout layout;
  };
  std::vector<Entry> entries_;
};

struct WriterOptions {
  uint32_t segment_alignment = 128;   ///< Alignment of each segment relative to the segment base.
  uint32_t constant_alignment = 16;   ///< Alignment of each constant inside the constant segment.
};

class ProgramWriter {
 public:
  explicit ProgramWriter(WriterOptions options = {});
  ~ProgramWriter();
  ProgramWriter(const ProgramWriter&) = delete;
  ProgramWriter& operator=(const ProgramWriter&) = delete;

  /// Adds a method; the reference stays valid for the writer's lifetime.
  MethodWriter& add_method(std::string name);
  MethodWriter& method(std::string_view name);

  /// A blob in the program's own named data (one segment per distinct blob), e.g. delegate weights.
  void add_named_data(std::string key, std::span<const uint8_t> data, uint32_t alignment = 16);
  /// Data that belongs in the external .ptd rather than the program (external tensors add theirs here).
  PtdWriter& external_data() { return external_; }
  const PtdWriter& external_data() const { return external_; }

  /// The .pte bytes. Runs each method's memory planner first.
  std::vector<uint8_t> serialize();
  /// Writes the .pte; returns its size in bytes.
  size_t write(const std::string& path);

 private:
  friend class MethodWriter;
  uint32_t add_constant(std::span<const uint8_t> data);
  uint32_t add_mutable(std::span<const uint8_t> data);
  uint32_t add_payload(std::vector<uint8_t> payload);

  WriterOptions options_;
  std::vector<std::unique_ptr<MethodWriter>> methods_;
  std::vector<std::vector<uint8_t>> constants_{1};  // entry 0: the placeholder
  std::unordered_multimap<size_t, uint32_t> constant_index_;  // content hash -> constant index
  std::vector<std::vector<uint8_t>> mutables_{1};
  std::vector<std::vector<uint8_t>> payloads_;
  struct Named {
    std::string key;
    std::vector<uint8_t> data;
    uint32_t alignment = 16;
  };
  std::vector<Named> named_;
  PtdWriter external_;
};

/// Packs an unpacked program (the generated object API's ProgramT) into a finished "ET12" flatbuffer without
/// extended header or segments. Unlike the generated Pack(), empty vectors and strings are written (present but
/// empty), as the ExecuTorch serializer writes them: the runtime requires several (values, inputs, outputs,
/// delegates, non_const_buffer_sizes, instructions, tensor sizes and dim_order of rank-0 tensors).
std::vector<uint8_t> pack_program(const executorch_flatbuffer::ProgramT& program);

/// Lower-case hex SHA-256 of `data` (the key XNNPACK exporters give delegate constants).
std::string sha256_hex(std::span<const uint8_t> data);

/// Writes `bytes` to `path`; throws InvalidArgument naming the path on failure.
void write_file(const std::string& path, std::span<const uint8_t> bytes);

}  // namespace etnp::format
