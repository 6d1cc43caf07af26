// One registration function per kernel family; register_builtin_kernels calls them all.
#pragma once

namespace etnp {
class KernelRegistry;
}

namespace etnp::kernels {

void register_builtin_kernels(KernelRegistry& registry);

void register_prim_kernels(KernelRegistry& registry);        // prim.cpp: sym_size, executorch_prim::*
void register_unary_kernels(KernelRegistry& registry);       // unary.cpp: abs, exp, sigmoid, relu, gelu, ...
void register_binary_kernels(KernelRegistry& registry);      // binary.cpp: add, sub, mul, div, pow, bitwise, ...
void register_compare_kernels(KernelRegistry& registry);     // compare.cpp: eq, ne, lt, ..., isnan, where, ...
void register_linalg_kernels(KernelRegistry& registry);      // linalg.cpp: mm, bmm, addmm, linear
void register_conv_kernels(KernelRegistry& registry);        // conv.cpp: convolution
void register_pool_kernels(KernelRegistry& registry);        // pool.cpp: max/avg/adaptive pooling, upsample
void register_norm_kernels(KernelRegistry& registry);        // norm.cpp: batch/layer/group norm, softmax
void register_reduce_kernels(KernelRegistry& registry);      // reduce.cpp: sum, mean, amax, argmax, var, ...
void register_shape_kernels(KernelRegistry& registry);       // shape.cpp: view, permute, expand, cat, slice, ...
void register_index_kernels(KernelRegistry& registry);       // index.cpp: index, index_put, gather, scatter, ...
void register_fill_kernels(KernelRegistry& registry);        // fill.cpp: full, arange, pads, flip, roll, ...
void register_quantized_kernels(KernelRegistry& registry);   // quantized.cpp: quantized_decomposed::*
void register_custom_kernels(KernelRegistry& registry);      // custom.cpp: etnp::lstm.out, etnp::triple.out
void register_llm_kernels(KernelRegistry& registry);         // llm.cpp: llama::custom_sdpa, update_cache, ...

}  // namespace etnp::kernels
