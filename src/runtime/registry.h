// The process-wide registries, with everything built in registered on first use: the kernel families of
// src/kernels and the backends of src/backends. Users add theirs through etnp::register_kernel and
// etnp::register_backend, which land here too.
#pragma once

#include "core/backend_registry.h"
#include "core/kernel_registry.h"

namespace etnp::runtime {

KernelRegistry& kernel_registry();
BackendRegistry& backend_registry();

}  // namespace etnp::runtime
