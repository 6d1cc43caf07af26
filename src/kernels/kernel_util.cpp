#include "kernels/kernel_util.h"

#include <string>

namespace etnp::kernels {

void check_num_args(KernelArgs args, size_t expected, const char* op) {
  if (args.size() != expected) {
    kernel_fail(std::string(op) + ": expected " + std::to_string(expected) + " arguments, got " +
                std::to_string(args.size()));
  }
}

void check_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  if (a.dtype() != b.dtype()) {
    kernel_fail(std::string(op) + ": dtype mismatch, " + std::string(scalar_type_name(a.dtype())) + " vs " +
                std::string(scalar_type_name(b.dtype())));
  }
}

bool channels_last_candidate(const Tensor& t, ScalarType dtype) {
  return t.dim() == 4 && t.dtype() == dtype && t.dynamism() == ShapeDynamism::Static && t.is_contiguous_order() &&
         t.numel() > 0;
}

}  // namespace etnp::kernels
