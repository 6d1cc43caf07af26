// An example of a kernel compiled into etnp by its user (see docs/custom-kernels.md).
//
// It implements the out-variant operator
//
//     my_ops::scaled_add.out(Tensor x, Tensor y, *, float alpha=1.0, Tensor(a!) out) -> Tensor(a!)
//
// computing out = x + alpha * y for float32 tensors of the same shape. A program exported with a custom op
// of that schema (registered on the PyTorch side with torch.library) calls it by this name.
//
// Build it into the library with:
//     cmake -S . -B build -DETNP_EXTRA_KERNEL_SOURCES=$PWD/examples/custom_kernel/my_kernels.cpp
// Only the public headers (include/etnp/) are used.
#include <algorithm>
#include <cstdint>

#include "etnp/kernel.h"
#include "etnp/tensor.h"
#include "etnp/value.h"

namespace my_ops {

// The runtime passes every schema argument in schema order — positional, keyword-only (after `*`) and out
// tensors alike — followed by one slot for the return value (for an out variant, the out tensor again):
//
//     args[0] = x, args[1] = y, args[2] = alpha (a Double value), args[3] = out, args[4] = return slot
//
// Keyword arguments with defaults are always present: the exporter writes the default into the program.
void scaled_add_out(etnp::KernelContext& ctx, etnp::KernelArgs args) {
  const etnp::Tensor& x = args[0]->to_tensor();  // to_*() throws a clear error when the tag is wrong
  const etnp::Tensor& y = args[1]->to_tensor();
  // `float` schema arguments arrive as Double values; a Scalar argument would use to_scalar().
  const double alpha = args[2]->to_double();
  etnp::Tensor& out = args[3]->to_tensor();

  // Validate everything before touching memory: a malformed program must fail cleanly, never crash.
  ETNP_KERNEL_CHECK(x.dtype() == etnp::ScalarType::Float && y.dtype() == etnp::ScalarType::Float &&
                        out.dtype() == etnp::ScalarType::Float,
                    "my_ops::scaled_add.out: float32 tensors only");
  ETNP_KERNEL_CHECK(std::equal(x.sizes().begin(), x.sizes().end(), y.sizes().begin(), y.sizes().end()),
                    "my_ops::scaled_add.out: x and y must have the same shape");
  // This simple kernel only handles the default (row-major) memory layout; a general kernel would walk
  // the tensors through strides().
  ETNP_KERNEL_CHECK(x.is_contiguous_order() && y.is_contiguous_order() && out.is_contiguous_order(),
                    "my_ops::scaled_add.out: contiguous tensors only");

  // Outputs must be resized to the result shape before writing (it may differ from the serialized shape
  // when the program has dynamic shapes). resize() throws when the output's bounds cannot hold it.
  out.resize(x.sizes());

  const float* xp = x.data_as<const float>();
  const float* yp = y.data_as<const float>();
  float* op = out.data_as<float>();
  const float a = static_cast<float>(alpha);
  const int64_t n = x.numel();
  (void)ctx;  // ctx.pool() offers a thread pool for large work, ctx.scratch(bytes) temporary memory
  for (int64_t i = 0; i < n; ++i) op[i] = xp[i] + a * yp[i];
}

// Registers the kernel while the program starts (before any program is loaded). The third field is the
// exact argument count (4 schema arguments + 1 return slot); the runtime rejects calls with another count
// when it loads a method.
static etnp::KernelRegistrar register_scaled_add({"my_ops::scaled_add.out", scaled_add_out, 5});

}  // namespace my_ops
