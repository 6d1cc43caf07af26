#include <algorithm>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "backends/register.h"
#include "etnp/backend.h"

namespace etnp {
namespace {

class BackendRegistry {
 public:
  static BackendRegistry& global() {
    static BackendRegistry* registry = [] {
      auto* r = new BackendRegistry();
#ifdef ETNP_WITH_XNNPACK
      r->add(backends::make_xnnpack_backend());
#endif
      return r;
    }();
    return *registry;
  }

  void add(std::shared_ptr<Backend> backend) {
    if (!backend) throw Error(ErrorKind::InvalidArgument, "register_backend: null backend");
    std::string name(backend->name());
    std::unique_lock lock(mutex_);
    if (!backends_.try_emplace(name, std::move(backend)).second) {
      throw Error(ErrorKind::InvalidArgument, "backend '" + name + "' is already registered");
    }
  }

  std::shared_ptr<Backend> find(std::string_view name) const {
    std::shared_lock lock(mutex_);
    auto it = backends_.find(std::string(name));
    return it == backends_.end() ? nullptr : it->second;
  }

  std::vector<std::string> names() const {
    std::shared_lock lock(mutex_);
    std::vector<std::string> out;
    for (const auto& [name, b] : backends_) out.push_back(name);
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  mutable std::shared_mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<Backend>> backends_;
};

}  // namespace

void Backend::set_option(std::string_view key, const BackendOptionValue&) {
  throw Error(ErrorKind::InvalidArgument, "backend '" + std::string(name()) + "' has no option '" +
                                              std::string(key) + "'");
}

BackendOptionValue Backend::get_option(std::string_view key) const {
  throw Error(ErrorKind::InvalidArgument, "backend '" + std::string(name()) + "' has no option '" +
                                              std::string(key) + "'");
}

void register_backend(std::shared_ptr<Backend> backend) { BackendRegistry::global().add(std::move(backend)); }
std::shared_ptr<Backend> find_backend(std::string_view name) { return BackendRegistry::global().find(name); }
std::vector<std::string> registered_backend_names() { return BackendRegistry::global().names(); }

}  // namespace etnp
