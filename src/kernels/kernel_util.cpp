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

}  // namespace etnp::kernels
