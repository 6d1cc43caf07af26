// What etnp::Method holds (include/etnp/program.h): the value table, the decoded instructions and the memory
// behind them. Built by load() (method_load.cpp, then the passes of method_passes.cpp), bound by set_input and
// set_output_buffer (method_bind.cpp), run by run() (method_run.cpp).
#pragma once

#include <atomic>
#include <cstdlib>
#include <deque>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "etnp/backend.h"
#include "etnp/kernel.h"
#include "etnp/program.h"
#include "compute/large_pages.h"
#include "format/pte_file.h"
#include "runtime/program_impl.h"

namespace etnp {
namespace runtime {

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
  std::span<const int> mutated_args;  // KernelEntry::mutated_args: arguments written besides the out slot
  int32_t a = 0;  // move_from / cond_value_index / value_index
  int32_t b = 0;  // move_to / destination_instruction
  const std::string* name = nullptr;  // operator or backend name, for errors and profiles
  /// Some tensor argument may have no storage when this runs (a view or freed tensor of a malformed
  /// program): check before calling instead of letting the kernel dereference null.
  bool check_storage = false;
  int32_t skip_check_arg = -1;  // et_view's output, which the kernel itself points at storage
  bool view = false;            // an et_view call (runtime::is_view_operator) with its output at args[2]
};

struct UseAnalysis;  // use_analysis.h

/// The MethodWorkspace a method gives its delegates: one scratch buffer they share, and the method's own buffers
/// (every one allocated with MethodWorkspace::kReadPastBytes to spare) for holds().
class DelegateWorkspace final : public MethodWorkspace {
 public:
  DelegateWorkspace(const std::vector<compute::ZeroedBuffer>& arenas, const std::vector<compute::ZeroedBuffer>& owned)
      : arenas_(arenas), owned_(owned) {}
  uint8_t* shared_scratch(size_t bytes) override;
  bool holds(const void* data, size_t bytes) const override;
  size_t shared_scratch_bytes() const override { return scratch_bytes_; }

 private:
  const std::vector<compute::ZeroedBuffer>& arenas_;
  const std::vector<compute::ZeroedBuffer>& owned_;
  compute::ZeroedBuffer scratch_;
  size_t scratch_bytes_ = 0;  ///< what scratch_ holds before its kReadPastBytes
};

/// "[2, 3]": a shape (or dim order) in error messages.
std::string list_string(std::span<const int64_t> values);
std::string list_string(std::span<const uint8_t> values);

}  // namespace runtime

struct Method::Impl {
  using Instruction = runtime::Instruction;

  std::shared_ptr<const Program::Impl> program;
  const format::fb::ExecutionPlan* plan = nullptr;
  MethodMeta meta;

  std::vector<EValue> values;
  std::vector<Tensor> tensors;                 // one per tensor value; values point into it
  std::vector<int32_t> tensor_of_value;        // value index -> index into tensors (-1 if none)
  std::vector<EValue*> list_items;             // storage of every boxed list's item pointers
  // Each allocated with MethodWorkspace::kReadPastBytes after the bytes asked for (allocate_zeroed).
  std::vector<compute::ZeroedBuffer> arenas;         // the planned buffers (1 to n of the plan's)
  std::vector<compute::ZeroedBuffer> owned_buffers;  // storage of unplanned tensors and of constants made at load
  /// Given to the delegates at init (BackendInitContext::workspace); declared before them, so it outlives them.
  runtime::DelegateWorkspace delegate_workspace{arenas, owned_buffers};
  size_t owned_bytes = 0;                      // sum of owned_buffers' sizes
  uint64_t arena_bytes = 0;                    // sum of the planned arenas' sizes
  std::deque<Tensor> load_time_tensors;        // constants the method computed at load (folded weights)
  std::deque<EValue> load_time_values;
  std::deque<std::vector<EValue*>> load_time_args;  // argument lists of instructions the passes fused
  std::vector<bool> planned_input;             // per method input: copy into planned memory (else bind)
  std::vector<bool> input_set;
  /// Per method output: why set_output_buffer refuses it (Method::output_buffer_refusal), or empty.
  std::vector<std::string> output_refusals;
  /// Per method input: an instruction writes it in place (Method::writes_input).
  std::vector<bool> written_inputs;
  /// FreeCall targets with the storage they had at load: put back after every run, so the next run (and
  /// set_input, which copies into planned input storage) finds the memory plan intact.
  std::vector<std::pair<Tensor*, void*>> freed_storage;
  /// File bytes the load consumed (folded constants, delegates' payloads and weights): released as each is
  /// consumed and together again at the end of the load (release_consumed_file_pages).
  std::vector<std::span<const uint8_t>> consumed_file_bytes;

  std::vector<EValue*> arg_storage;            // all instruction args, spans point into it
  std::vector<Instruction> instructions;       // chain 0 (exporters emit one chain)
  std::deque<std::string> names;               // storage for Instruction::name (stable addresses)
  std::vector<std::unique_ptr<KernelState>> kernel_states;
  std::vector<std::unique_ptr<DelegateHandle>> delegates;
  std::vector<std::shared_ptr<Backend>> backends;
  KernelContext kernel_context{nullptr, nullptr};

  bool profiling = false;
  std::vector<ProfileEvent> events;

  void load();  // method_load.cpp
  /// Zeroed memory the method keeps (unplanned tensors, constants made at load), counted in owned_bytes.
  uint8_t* own(size_t nbytes, const std::string& what);
  size_t load_time_bytes() const;
  /// Throws ProgramLoadError when `more` bytes for `what` would take the method past
  /// ResourceLimits::max_method_bytes.
  void check_memory_limit(uint64_t more, const std::string& what) const;
  // method_bind.cpp
  void set_input(size_t index, const Value& value);
  void set_input(size_t index, const TensorView& tensor);
  void set_output_buffer(size_t index, void* data, size_t nbytes);
  Value output(size_t index) const;
  TensorView output_view(size_t index) const;
  void run();  // method_run.cpp: run_instructions() between the execute probes (probes.h)
  ErrorContext context() const;

  /// Set while a public entry point (execute, set_input, run, output, set_output_buffer) runs: a call of the
  /// method on another thread meanwhile is refused instead of racing (method.cpp's InUse). Its release and
  /// acquire also order the calls that take turns on one method from several threads.
  std::atomic<bool> in_use{false};

 private:
  void run_instructions();  // method_run.cpp
  void check_input_index(size_t index) const;   // InvalidArgument past the last input
  void check_output_index(size_t index) const;  // InvalidArgument past the last output
  /// Throws InvalidArgument `what` naming the method and input `index`.
  [[noreturn]] void reject_input(size_t index, const std::string& what) const;
  // method_load.cpp
  void build_values();
  void build_instructions();
  void prepare_kernels();
  void build_delegates();
  /// Releases the file pages of `range` where it lies in the program's or a data file's mapping (not read at
  /// run time), and records it for release_consumed_file_pages.
  void release_file_pages(std::span<const uint8_t> range);
  /// Releases the file pages of every recorded range again, neighbours as one, once all are known.
  void release_consumed_file_pages();
  // method_passes.cpp, in the order load() runs them
  void fold_constants();
  /// Folded constants by content hash (data, bytes), so that equal ones share one buffer.
  using FoldedConstants = std::multimap<uint64_t, std::pair<const uint8_t*, size_t>>;
  void fold_constant_layout(Instruction& ins, const runtime::UseAnalysis& usage, FoldedConstants& folded);
  /// fold_constant_layout's zero-copy case: true when `ins` transposed a constant matrix that only packing
  /// kernels read, and its readers now read the constant in place, through a transposed dim order.
  bool fold_transpose_as_view(Instruction& ins, const runtime::UseAnalysis& usage);
  /// The outputs fold_convolution_epilogue re-homed so far (their bytes and new lifetimes), which the snapshot
  /// analysis it decides on does not know.
  struct RehomedOutput {
    uintptr_t begin = 0, end = 0;  ///< the bytes
    size_t from = 0, until = 0;    ///< the instructions that now reference them
  };
  /// A convolution and the batch norm and/or activation after it, as one fused convolution.
  void fold_convolution_epilogue(size_t pc, const runtime::UseAnalysis& usage,
                                 std::vector<RehomedOutput>& rehomed_outputs);
  /// fold_convolution_epilogue's way around a chain output planned on the convolution's input bytes: the readers
  /// of `last` read the convolution's own output `target` instead, when that is safe; true when done (and
  /// recorded in `rehomed_outputs`).
  bool rehome_chain_output(size_t pc, size_t chain_end, EValue* target, EValue* last,
                           const runtime::UseAnalysis& usage, std::vector<RehomedOutput>& rehomed_outputs);
  /// Where `bytes` bytes in a planned buffer (64-byte aligned) hold nothing live over instructions [from, until]:
  /// no tensor but values `except` by `usage`, and no output re-homed before; 0 when no such place is free.
  uintptr_t free_planned_bytes(size_t bytes, size_t from, size_t until, const runtime::UseAnalysis& usage,
                               const std::vector<RehomedOutput>& rehomed_outputs,
                               std::initializer_list<uint32_t> except) const;
  /// A sigmoid whose only reader multiplies it by the sigmoid's input (a decomposed SiLU), as one aten::silu.
  void fold_silu(size_t pc, const runtime::UseAnalysis& usage);
  /// An exporter's decomposition of hardswish or hardsigmoid (add 3, clamp to [0, 6], multiply by the input,
  /// divide by 6), as one aten::hardswish.out or aten::hardsigmoid.out.
  void fold_hard_activation(size_t pc, const runtime::UseAnalysis& usage);
  /// The tanh form of GELU written out in operators (GPT-2's), as one etnp::tanh_gelu.out.
  void fold_tanh_gelu(size_t pc, const runtime::UseAnalysis& usage);
  void elide_copies(const runtime::UseAnalysis& refs);
  /// After prepare_kernels: tensors that one channels-last kernel writes and only such kernels read keep their
  /// bytes in NHWC order (KernelState::exchanges_channels_last).
  void pair_channels_last();
  void mark_storage_checks();
  // method_bind.cpp
  void find_output_refusals(const runtime::UseAnalysis& refs);
  void find_written_inputs();
  /// Throws ProgramLoadError naming the input or instruction when a method input is a constant tensor, or a
  /// kernel or move writes one.
  void refuse_writes_to_constants() const;
  /// Throws ProgramLoadError naming the instruction when a tensor it writes overlaps one of its arguments'
  /// storage at another address (a corrupt memory plan).
  void refuse_overlapping_writes() const;
  /// Calls fn(value) for each value the instruction writes (kernel out slots and mutated arguments, a move's
  /// target).
  template <typename Fn>
  void for_each_written(const Instruction& ins, Fn&& fn) const;
};

}  // namespace etnp
