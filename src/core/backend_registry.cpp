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

const char* backend_option_type_name(const BackendOptionValue& value) {
  if (std::holds_alternative<bool>(value)) return "bool";
  if (std::holds_alternative<int64_t>(value)) return "int";
  return "str";
}

BackendOptions Backend::get_options(const BackendOptions& requested) const {
  BackendOptions values;
  for (const auto& [key, expected] : requested) {
    BackendOptionValue value = get_option(key);
    if (value.index() != expected.index()) {
      throw Error(ErrorKind::InvalidArgument, "backend '" + std::string(name()) + "' option '" + key + "' is " +
                                                  backend_option_type_name(value) + ", not " +
                                                  backend_option_type_name(expected));
    }
    values.emplace(key, std::move(value));
  }
  return values;
}

void Backend::set_options(const BackendOptions& options) {
  std::vector<std::pair<std::string, BackendOptionValue>> previous;
  try {
    for (const auto& [key, value] : options) {
      BackendOptionValue old = get_option(key);  // an unknown key throws here, before anything changed
      set_option(key, value);
      previous.emplace_back(key, std::move(old));
    }
  } catch (...) {
    for (auto it = previous.rbegin(); it != previous.rend(); ++it) set_option(it->first, it->second);
    throw;
  }
}

}  // namespace etnp
