#include "kernels/kernel_util.h"
#include "kernels/register.h"
#include "runtime/kernel_registry.h"

namespace etnp::kernels {

void register_pool_kernels(KernelRegistry& registry) { (void)registry; }

}  // namespace etnp::kernels
