// An operator registry: "namespace::op.overload" -> kernel. Kernel families fill one through this interface;
// the runtime owns the process-wide instance (runtime/registry.h), with the built-in kernels in it.
#pragma once

#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "etnp/kernel.h"

namespace etnp {

class KernelRegistry {
 public:
  /// Throws InvalidArgument when the name is already taken.
  void add(KernelEntry entry);
  /// Registers `fn` under `name` with an exact argument count (schema arguments + return slot).
  void add(std::string name, int num_args, KernelFn fn, KernelPrepareFn prepare = nullptr) {
    add(KernelEntry{std::move(name), fn, num_args, prepare});
  }
  /// nullptr when absent. Entries never move once added.
  const KernelEntry* find(std::string_view name) const;
  std::vector<std::string> names() const;

 private:
  mutable std::shared_mutex mutex_;
  std::unordered_map<std::string, std::unique_ptr<KernelEntry>> entries_;
};

}  // namespace etnp
