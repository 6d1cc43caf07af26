#include "core/backend_registry.h"

#include <algorithm>
#include <mutex>

namespace etnp {

void BackendRegistry::add(std::shared_ptr<Backend> backend) {
  if (!backend) throw Error(ErrorKind::InvalidArgument, "register_backend: null backend");
  std::string name(backend->name());
  std::unique_lock lock(mutex_);
  if (!backends_.try_emplace(name, std::move(backend)).second) {
    throw Error(ErrorKind::InvalidArgument, "backend '" + name + "' is already registered");
  }
}

std::shared_ptr<Backend> BackendRegistry::find(std::string_view name) const {
  std::shared_lock lock(mutex_);
  auto it = backends_.find(std::string(name));
  return it == backends_.end() ? nullptr : it->second;
}

std::vector<std::string> BackendRegistry::names() const {
  std::shared_lock lock(mutex_);
  std::vector<std::string> out;
  for (const auto& [name, backend] : backends_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

void Backend::set_option(std::string_view key, const BackendOptionValue&) {
  throw Error(ErrorKind::InvalidArgument, "backend '" + std::string(name()) + "' has no option '" +
                                              std::string(key) + "'");
}

BackendOptionValue Backend::get_option(std::string_view key) const {
  throw Error(ErrorKind::InvalidArgument, "backend '" + std::string(name()) + "' has no option '" +
                                              std::string(key) + "'");
}

}  // namespace etnp
