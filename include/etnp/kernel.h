// The interface between the runtime and operator kernels, for the built-in kernels and for kernels that
// users compile in themselves (see docs/custom-kernels.md and examples/custom_kernel).
//
// A kernel is resolved once, when a method is loaded; calling it is one indirect call. Arguments follow the
// ExecuTorch boxed convention: every schema argument in order (out tensors included), then one slot for the
// return value (the out tensor again for out-variants).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <typeindex>
#include <typeinfo>
#include <utility>
#include <vector>

#include "etnp/error.h"
#include "etnp/value.h"

namespace etnp {

using KernelArgs = std::span<EValue* const>;

/// Per-instruction state a kernel builds once at load time (pre-packed weights, chosen fast path, ...).
struct KernelState {
  virtual ~KernelState() = default;
  /// Memory the state holds (pre-packed weights, ...), reported by Method::load_time_bytes().
  virtual size_t bytes() const { return 0; }
  /// A packing the state shares with other instructions through the process-wide weight cache, and its bytes:
  /// in no method's load_time_bytes() (packed_weight_cache_stats() counts it) but held to the method's
  /// max_method_bytes, once per method however many of its instructions share it. {nullptr, 0}: none.
  virtual std::pair<const void*, size_t> shared_packing() const { return {nullptr, 0}; }
  /// Positions in the instruction's arguments of the constants packed into the state, which its calls no longer
  /// read: the runtime releases their pages of the program file at load (read again from the file should a call
  /// fall back to them), so that the weights are not resident twice.
  virtual std::vector<size_t> packed_constant_args() const { return {}; }
  /// Channels-last exchange, decided at load: a state that runs its operator in NHWC order may read its first
  /// argument and write its result in that order instead of the tensors' own, where the runtime finds that a
  /// tensor's only writer and every reader are such kernels (the tensor's sizes stay NCHW; its bytes hold NHWC),
  /// so that no transpose runs between them. Default: never.
  virtual bool exchanges_channels_last() const { return false; }
  /// Layout-keeping operators (max pooling, concatenation along channels, a batch norm, a mean over the pixels, a
  /// product by one value per channel) join such a pairing instead: the argument positions of the tensors (or
  /// tensor lists) it reads and of those it writes, all of which it can take in NHWC order together, and of the
  /// tensors whose bytes are the same in either order (per-channel constants, one pixel per channel: [N, C, 1, 1],
  /// [N, C]), which it reads or writes as they are. The runtime pairs the named inputs and outputs with the
  /// exchanging kernels around them, all or none, and only where every other tensor the call references is read
  /// by nothing else (a state may then leave it unwritten: max pooling's indices). Default: none.
  struct ChannelsLastArgs {
    std::vector<size_t> inputs, outputs, neutral;
  };
  virtual ChannelsLastArgs keeps_channels_last() const { return {}; }
  /// Called at load, before any run, with what the runtime paired: argument 0 and/or the result as NHWC bytes
  /// (for a layout-keeping state, true and true: every argument keeps_channels_last() names).
  virtual void use_channels_last(bool /*input*/, bool /*output*/) {}
};

class ThreadPool;

/// What a kernel may use while it runs.
class KernelContext {
 public:
  KernelContext(ThreadPool* pool, KernelState* state) : pool_(pool), state_(state) {}
  /// Scratch memory valid until the kernel returns; 64-byte aligned. Reused across calls.
  void* scratch(size_t bytes);
  /// The thread pool for parallel loops (never null while a method runs).
  ThreadPool* pool() const { return pool_; }
  /// State built by the kernel's prepare function at load, or nullptr.
  KernelState* state() const { return state_; }
  /// The runtime points the context at each instruction's state before calling its kernel.
  void set_state(KernelState* state) { state_ = state; }
  /// An object of type T that the method keeps for all its kernels, default-constructed on first use: scratch
  /// a kernel grows and reuses from call to call (buffers sized for its shapes), which the method's kernels,
  /// running one at a time, share instead of each instruction's state keeping its own. It lives as long as the
  /// method; what it holds is whatever the last kernel that used it left there.
  template <typename T>
  T& shared_scratch() {
    const std::type_index type(typeid(T));
    for (auto& [t, object] : shared_scratch_) {
      if (t == type) return *static_cast<T*>(object.get());
    }
    auto object = std::make_shared<T>();
    T& ref = *object;
    shared_scratch_.emplace_back(type, std::move(object));
    return ref;
  }

 private:
  ThreadPool* pool_;
  KernelState* state_;
  std::vector<unsigned char> scratch_;
  std::vector<std::pair<std::type_index, std::shared_ptr<void>>> shared_scratch_;
};

using KernelFn = void (*)(KernelContext& ctx, KernelArgs args);
/// Optional load-time hook: sees the instruction's arguments (constants already bound, shapes are the
/// serialized ones) and returns state for KernelContext::state(), or nullptr.
using KernelPrepareFn = std::unique_ptr<KernelState> (*)(KernelArgs args);

struct KernelEntry {
  std::string name;       ///< "namespace::op.overload", e.g. "aten::add.out".
  KernelFn fn = nullptr;
  int num_args = -1;      ///< Exact argument count (schema args + 1 return slot); -1 = not checked.
  KernelPrepareFn prepare = nullptr;
  /// Argument positions, besides the out slot, that the kernel writes in place: the `Tensor(a!)` inputs of
  /// its schema (a KV cache it updates, say). The load-time passes treat them as written, so that no copy
  /// elision or caller binding assumes the argument keeps its bytes.
  std::vector<int> mutated_args = {};
};

/// Adds a kernel to the process-wide registry. Throws InvalidArgument if the name is already registered.
/// Registering must happen before the programs that use the kernel are loaded.
void register_kernel(KernelEntry entry);

/// Registers `entry` at static-initialization time: `static etnp::KernelRegistrar r({"my::op.out", fn, 3});`
struct KernelRegistrar {
  explicit KernelRegistrar(KernelEntry entry) { register_kernel(std::move(entry)); }
};

/// Names of every registered kernel, sorted.
std::vector<std::string> registered_kernel_names();

/// The kernel libraries this build has, in ExecuTorch's vocabulary: "portable" (the ATen operators),
/// "optimized" (etnp's fast paths: packed GEMMs, convolutions, vector math), "quantized" (the
/// quantized_decomposed operators) and "lstm" (the library that provides etnp::lstm.out), each listed only
/// when its operators are registered.
std::vector<std::string> kernel_libraries();

/// Throws etnp::Error(ExecutionError, message) — the way kernels report a failure; the runtime adds the
/// method, instruction and operator to the message.
[[noreturn]] void kernel_fail(std::string message);

/// `ETNP_KERNEL_CHECK(cond, "message " << value)` fails the kernel with a formatted message.
#define ETNP_KERNEL_CHECK(cond, msg_stream)                       \
  do {                                                            \
    if (!(cond)) {                                                \
      ::std::ostringstream etnp_kernel_check_os_;                 \
      etnp_kernel_check_os_ << msg_stream;                        \
      ::etnp::kernel_fail(etnp_kernel_check_os_.str());           \
    }                                                             \
  } while (0)

}  // namespace etnp

#include <sstream>
