// What every kernel family includes: the compute layer's tensor toolkit and copy engine, and the argument
// checks that name the kernel in their failure message.
#pragma once

#include "compute/copy_util.h"
#include "compute/tensor_util.h"
#include "core/kernel_registry.h"
#include "etnp/kernel.h"

namespace etnp::kernels {

// Kernels are written on the compute layer: its helpers read as the kernels' own.
using namespace ::etnp::compute;

void check_num_args(KernelArgs args, size_t expected, const char* op);
void check_same_dtype(const Tensor& a, const Tensor& b, const char* op);

/// Whether `t` is a tensor a layout-keeping kernel can be paired channels-last on
/// (KernelState::keeps_channels_last): 4-D, of `dtype`, static, in contiguous order, not empty.
bool channels_last_candidate(const Tensor& t, ScalarType dtype);

}  // namespace etnp::kernels
