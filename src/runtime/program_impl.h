// Internals behind etnp::Program and etnp::Method (include/etnp/program.h).
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "etnp/backend.h"
#include "etnp/kernel.h"
#include "etnp/program.h"
#include "format/ptd_file.h"
#include "format/pte_file.h"

namespace etnp::detail {

struct ProgramImpl {
  std::unique_ptr<format::PteFile> file;
  std::vector<std::unique_ptr<format::PtdFile>> data_files;
  /// The caller's .ptd files (null when none): where EXTERNAL tensors are looked up.
  std::unique_ptr<format::MergedDataMap> external_data;
  /// The caller's .ptd files, then the program's named data: what delegates see (null when neither).
  std::unique_ptr<format::MergedDataMap> delegate_data;
  LoadOptions options;
  Verification verified = Verification::Minimal;

  size_t plan_index(std::string_view name) const;  // throws InvalidArgument naming the methods
  MethodMeta meta(size_t plan_index) const;
};

/// One pre-decoded instruction: everything the loop needs, resolved at load.
struct Instruction {
  /// Folded: a kernel call on constants that ran once at load (its output is constant); the loop skips it.
  enum class Kind : uint8_t { Kernel, Delegate, Move, JumpFalse, Free, Folded };
  Kind kind = Kind::Kernel;
  KernelFn fn = nullptr;
  KernelState* state = nullptr;
  KernelPrepareFn prepare = nullptr;  // run by prepare_kernels(), after load-time folding
  Backend* backend = nullptr;
  DelegateHandle* delegate = nullptr;
  std::span<EValue* const> args;
  int32_t a = 0;  // move_from / cond_value_index / value_index
  int32_t b = 0;  // move_to / destination_instruction
  const std::string* name = nullptr;  // operator or backend name, for errors and profiles
  /// Some tensor argument may have no storage when this runs (a view or freed tensor of a malformed
  /// program): check before calling instead of letting the kernel dereference null.
  bool check_storage = false;
  int32_t skip_check_arg = -1;  // et_view's output, which the kernel itself points at storage
};

struct MethodImpl {
  std::shared_ptr<ProgramImpl> program;
  const format::fb::ExecutionPlan* plan = nullptr;
  MethodMeta meta;

  std::vector<EValue> values;
  std::vector<Tensor> tensors;                 // one per tensor value; values point into it
  std::vector<int32_t> tensor_of_value;        // value index -> index into tensors (-1 if none)
  std::vector<EValue*> list_items;             // storage of every boxed list's item pointers
  struct FreeDeleter {
    void operator()(void* p) const { std::free(p); }
  };
  std::vector<std::unique_ptr<uint8_t, FreeDeleter>> arenas;
  std::vector<std::unique_ptr<uint8_t, FreeDeleter>> owned_buffers;
  size_t owned_bytes = 0;                      // sum of owned_buffers' sizes
  std::deque<Tensor> load_time_tensors;        // constants the method computed at load (folded weights)
  std::deque<EValue> load_time_values;
  std::vector<bool> planned_input;             // per method input: copy into planned memory (else bind)
  std::vector<bool> input_set;
  /// FreeCall targets with the storage they had at load: put back after every run, so the next run (and
  /// set_input, which copies into planned input storage) finds the memory plan intact.
  std::vector<std::pair<Tensor*, void*>> freed_storage;

  std::vector<EValue*> arg_storage;            // all instruction args, spans point into it
  std::vector<Instruction> instructions;       // chain 0 (exporters emit one chain)
  std::deque<std::string> names;               // storage for Instruction::name (stable addresses)
  std::vector<std::unique_ptr<KernelState>> kernel_states;
  std::vector<std::unique_ptr<DelegateHandle>> delegates;
  std::vector<std::shared_ptr<Backend>> backends;
  KernelContext kernel_context{nullptr, nullptr};

  bool profiling = false;
  std::vector<ProfileEvent> events;

  void load();
  /// Zeroed memory the method keeps (unplanned tensors, constants made at load), counted in owned_bytes.
  uint8_t* own(size_t nbytes, const std::string& what);
  size_t load_time_bytes() const;
  void set_input(size_t index, const Value& value);
  void run();
  Value output(size_t index) const;

 private:
  void build_values();
  void build_delegates();
  void build_instructions();
  void mark_storage_checks();
  void fold_constants();
  void fold_constant_layout(Instruction& ins, const std::vector<uint32_t>& writes);
  void fold_batch_norm(Instruction& conv, Instruction& bn, const std::vector<uint32_t>& uses);
  void elide_copies();
  void prepare_kernels();
  ErrorContext context() const;
};

}  // namespace etnp::detail
