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

std::vector<std::string> kernel_libraries() {
  bool aten = false, quantized = false, lstm = false;
  for (const std::string& name : registered_kernel_names()) {
    aten = aten || name.starts_with("aten::");
    quantized = quantized || name.starts_with("quantized_decomposed::");
    lstm = lstm || name == "etnp::lstm.out";
  }
  std::vector<std::string> libraries;
  if (aten) libraries.insert(libraries.end(), {"portable", "optimized"});  // the ATen kernels run compute's fast paths
  if (quantized) libraries.emplace_back("quantized");
  if (lstm) libraries.emplace_back("lstm");
  return libraries;
}

void register_backend(std::shared_ptr<Backend> backend) { runtime::backend_registry().add(std::move(backend)); }
std::shared_ptr<Backend> find_backend(std::string_view name) { return runtime::backend_registry().find(name); }
std::vector<std::string> registered_backend_names() { return runtime::backend_registry().names(); }

std::shared_ptr<Backend> require_backend(std::string_view name) {
  if (std::shared_ptr<Backend> backend = find_backend(name)) return backend;
  std::string names;
  for (const std::string& n : registered_backend_names()) names += (names.empty() ? "'" : ", '") + n + "'";
  ErrorContext c;
  c.backend = std::string(name);
  throw Error(ErrorKind::BackendNotAvailable, "no backend named '" + std::string(name) +
                                                  "' is registered (registered: " + (names.empty() ? "none" : names) + ")",
              c);
}

}  // namespace etnp
