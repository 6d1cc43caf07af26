// A backend registry: delegate id -> backend. The runtime owns the process-wide instance
// (runtime/registry.h), with the built-in backends in it.
#pragma once

#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "etnp/backend.h"

namespace etnp {

class BackendRegistry {
 public:
  /// Throws InvalidArgument for a null backend or a name already taken.
  void add(std::shared_ptr<Backend> backend);
  /// nullptr when absent.
  std::shared_ptr<Backend> find(std::string_view name) const;
  std::vector<std::string> names() const;

 private:
  mutable std::shared_mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<Backend>> backends_;
};

}  // namespace etnp
