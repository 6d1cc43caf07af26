#include "runtime/registry.h"

#include "kernels/register.h"
#ifdef ETNP_WITH_XNNPACK
#include "backends/xnnpack/xnnpack_backend.h"
#endif

namespace etnp {

KernelRegistry& runtime::kernel_registry() {
  // Never destroyed: kernels may be looked up from static destructors of user code.
  static KernelRegistry* registry = [] {
    auto* r = new KernelRegistry();
    kernels::register_builtin_kernels(*r);
    return r;
  }();
  return *registry;
}

BackendRegistry& runtime::backend_registry() {
  static BackendRegistry* registry = [] {
    auto* r = new BackendRegistry();
#ifdef ETNP_WITH_XNNPACK
    r->add(backends::make_xnnpack_backend());
#endif
    return r;
  }();
  return *registry;
}

void register_kernel(KernelEntry entry) { runtime::kernel_registry().add(std::move(entry)); }
std::vector<std::string> registered_kernel_names() { return runtime::kernel_registry().names(); }

void register_backend(std::shared_ptr<Backend> backend) { runtime::backend_registry().add(std::move(backend)); }
std::shared_ptr<Backend> find_backend(std::string_view name) { return runtime::backend_registry().find(name); }
std::vector<std::string> registered_backend_names() { return runtime::backend_registry().names(); }

}  // namespace etnp
