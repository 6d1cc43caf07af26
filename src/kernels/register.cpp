#include "kernels/register.h"
#include "core/kernel_registry.h"


namespace etnp::kernels {

void register_builtin_kernels(KernelRegistry& registry) {
  register_prim_kernels(registry);
  register_unary_kernels(registry);
  register_binary_kernels(registry);
  register_compare_kernels(registry);
  register_linalg_kernels(registry);
  register_conv_kernels(registry);
  register_pool_kernels(registry);
  register_norm_kernels(registry);
  register_reduce_kernels(registry);
  register_shape_kernels(registry);
  register_index_kernels(registry);
  register_fill_kernels(registry);
  register_quantized_kernels(registry);
  register_custom_kernels(registry);
  register_llm_kernels(registry);
}

}  // namespace etnp::kernels
