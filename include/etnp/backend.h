// The delegate interface: a backend turns a delegate payload into a handle at load and runs it on each
// DelegateCall. Backends register by the id the program names (e.g. "XnnpackBackend").
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "etnp/error.h"
#include "etnp/named_data.h"
#include "etnp/profiling.h"
#include "etnp/value.h"

namespace etnp {

/// A backend option value: bool, int or string.
using BackendOptionValue = std::variant<bool, int64_t, std::string>;
using BackendOptions = std::map<std::string, BackendOptionValue, std::less<>>;

struct CompileSpec {
  std::string_view key;
  std::span<const uint8_t> value;
};

/// Memory of one loaded method that the runtime offers the method's delegates. A method runs one instruction at
/// a time on one thread (docs/architecture.md), so its delegates' calls never overlap and this takes no lock;
/// it lives as long as the method, which destroys its delegates first.
class MethodWorkspace {
 public:
  /// Bytes readable past the end of every buffer the runtime allocates for a method (its planned arenas, the
  /// tensors it allocates at load, the shared scratch): kernels that read a few bytes past a tensor's end
  /// (XNNPACK's XNN_EXTRA_BYTES) may be given such tensors without a padded copy.
  static constexpr size_t kReadPastBytes = 128;

  virtual ~MethodWorkspace() = default;
  /// One buffer, shared by the method's delegates, for what lives only during one delegate call (its
  /// intermediate values): at least `bytes`, 64-byte aligned, followed by kReadPastBytes. A request for more
  /// than it holds replaces it with a larger one (the old contents are not kept), so a pointer from an earlier
  /// request is stale once another delegate asked for more: a delegate asks on every call (cheap when the
  /// buffer fits) and re-points its values when the answer moved. Throws std::bad_alloc.
  virtual uint8_t* shared_scratch(size_t bytes) = 0;
  /// Whether `bytes` at `data` lie within one buffer the runtime allocated for the method, with kReadPastBytes
  /// after them still in it: reading that far past the end is then safe.
  virtual bool holds(const void* data, size_t bytes) const = 0;
  /// The shared scratch's size now (Method::load_time_bytes() counts it).
  virtual size_t shared_scratch_bytes() const = 0;
};

struct BackendInitContext {
  std::string_view method_name;
  int delegate_index = -1;
  /// Data the payload may refer to by key: the caller's .ptd files first, then the program's named data.
  /// nullptr when the program has neither.
  const NamedDataMap* named_data = nullptr;
  /// Options given for this backend when the program was loaded (override the global ones).
  const BackendOptions* load_options = nullptr;
  /// A backend may call it, during init, with bytes of its payload or of named data that it has packed or copied
  /// and will not read again: the runtime drops their pages of the program's (or a .ptd's) mapping at once, so
  /// that a large model's file and what the backend makes of it are not resident together. Read again, the bytes
  /// come back from the file. Empty where nobody listens.
  std::function<void(std::span<const uint8_t>)> release_file_pages;
  /// The memory of the method being loaded, for the delegate to use while it runs (see MethodWorkspace).
  /// nullptr where the init is not for a method (a check, a test).
  MethodWorkspace* workspace = nullptr;
};

/// What a backend builds for one delegate entry; destroyed with the method.
struct DelegateHandle {
  virtual ~DelegateHandle() = default;
  /// Memory the delegate holds (its copies of constants, packed weights, buffers), reported by
  /// Method::load_time_bytes().
  virtual size_t bytes() const { return 0; }
  /// The packings it shares with other methods and programs (a process-wide weight cache, which counts them
  /// once in packed_weight_cache_stats() and not in bytes()), each with its bytes: a method's memory limit
  /// (ResourceLimits::max_method_bytes) counts every one it uses, once.
  virtual std::vector<std::pair<const void*, size_t>> shared_packings() const { return {}; }
};

/// A backend's answer to "would you take this payload?": every reason it would not, each naming the node
/// (or the part of the payload) and why. Empty: init() would accept it.
struct SupportVerdict {
  std::vector<std::string> reasons;
  bool supported() const { return reasons.empty(); }
};

class Backend {
 public:
  virtual ~Backend() = default;
  /// The id programs use, e.g. "XnnpackBackend".
  virtual std::string_view name() const = 0;
  virtual bool is_available() const = 0;
  /// What it runs on, for reports (`etnp version`): the library and its release, which decide some results
  /// (e.g. how an operator treats NaN). Empty: nothing but etnp's own code.
  virtual std::string library() const { return {}; }
  /// Builds the delegate from its payload. Throw etnp::Error(ProgramLoadError, ...) for a bad payload.
  virtual std::unique_ptr<DelegateHandle> init(const BackendInitContext& ctx, std::span<const uint8_t> payload,
                                               std::span<const CompileSpec> compile_specs) = 0;
  /// Whether init() would take this payload, without building anything: the same parsing and support checks
  /// init() makes, reported instead of thrown. load_method and `etnp inspect` both ask it, so a verdict of
  /// "runs here" means exactly "loads here". The default accepts every payload.
  virtual SupportVerdict supports(const BackendInitContext& ctx, std::span<const uint8_t> payload,
                                  std::span<const CompileSpec> compile_specs) const {
    (void)ctx, (void)payload, (void)compile_specs;
    return {};
  }
  /// Runs the delegate. `args` are the DelegateCall's values: inputs, then outputs (resize outputs).
  virtual void execute(DelegateHandle& handle, std::span<EValue* const> args) = 0;
  /// Process-wide options. Unknown keys or bad values throw InvalidArgument.
  virtual void set_option(std::string_view key, const BackendOptionValue& value);
  virtual BackendOptionValue get_option(std::string_view key) const;
  virtual std::vector<std::string> option_names() const { return {}; }

  /// The current values of the options `requested` names; each requested value gives the type the caller
  /// expects (its value is ignored). An unknown key, or an option of another type, throws InvalidArgument
  /// naming it.
  BackendOptions get_options(const BackendOptions& requested) const;
  /// Sets several process-wide options, all or none: when one is refused, those set before it get their
  /// previous values back and the refusal is thrown.
  void set_options(const BackendOptions& options);
};

/// The name of the type an option value holds: "bool", "int" or "str".
const char* backend_option_type_name(const BackendOptionValue& value);

/// Registers a backend under backend->name(). Throws InvalidArgument if the name is taken.
void register_backend(std::shared_ptr<Backend> backend);
/// The backend registered under `name`, or nullptr.
std::shared_ptr<Backend> find_backend(std::string_view name);
std::vector<std::string> registered_backend_names();
/// The backend registered under `name`; throws BackendNotAvailable naming the registered ones when none is.
std::shared_ptr<Backend> require_backend(std::string_view name);

/// The process-wide cache of packed weights (XnnpackBackend option "weight_cache_enabled"): its live entries
/// and their bytes. Each shared packing is counted here once, however many methods use it, and in no
/// method's Method::load_time_bytes(); entries go when the last method using them is destroyed.
struct PackedWeightCacheStats {
  size_t entries = 0;
  size_t bytes = 0;
};
PackedWeightCacheStats packed_weight_cache_stats();

}  // namespace etnp
