// Comparison kernels (eq, ne, lt, le, gt, ge; Tensor and Scalar overloads), where and masked_fill.
//
// Comparisons run in the compute type of torch.result_type of the operands and write a bool result into
// `out` of any dtype (bool usually; 1/0 otherwise), as PyTorch's out= variants allow.
#include <functional>
#include <string>

#include "kernels/elementwise.h"
#include "kernels/kernel_util.h"
#include "kernels/register.h"

namespace etnp::kernels {
namespace {

using ew::apply;
using ew::dispatch_compute;
using ew::ScalarOperand;

enum class Cmp { Eq, Ne, Lt, Le, Gt, Ge };

template <Cmp Op, typename C>
inline bool compare(C a, C b) {
  if constexpr (Op == Cmp::Eq) return a == b;
  else if constexpr (Op == Cmp::Ne) return a != b;
  else if constexpr (Op == Cmp::Lt) return a < b;
  else if constexpr (Op == Cmp::Le) return a <= b;
  else if constexpr (Op == Cmp::Gt) return a > b;
  else return a >= b;
}

template <Cmp Op>
void compare_tensor(KernelContext& ctx, KernelArgs args, const char* op) {
  check_num_args(args, 4, op);
  const Tensor& a = args[0]->to_tensor();
  const Tensor& b = args[1]->to_tensor();
  Tensor& out = args[2]->to_tensor();
  const std::array<const Tensor*, 2> operands{&a, &b};
  ew::resize_to_broadcast(out, operands, op);
  const ScalarType common = ew::result_type_of(operands);
  dispatch_compute<kRealTypes | kBool>(common, op, [&](auto tag) {
    using C = decltype(tag);
    apply<C, bool, 2>(ctx, out, {&a, &b}, [](C x, C y) { return compare<Op, C>(x, y); }, ew::kCheapGrain, op);
  });
}

template <Cmp Op>
void compare_scalar(KernelContext& ctx, KernelArgs args, const char* op) {
  check_num_args(args, 4, op);
  const Tensor& a = args[0]->to_tensor();
  const Scalar b = args[1]->to_scalar();
  Tensor& out = args[2]->to_tensor();
  resize_output(out, a.sizes(), op);
  const ScalarType common = promote_with_scalar(a.dtype(), b);
  dispatch_compute<kRealTypes | kBool>(common, op, [&](auto tag) {
    using C = decltype(tag);
    ScalarOperand<C> scalar(ew::scalar_to<C>(b));
    apply<C, bool, 2>(ctx, out, {&a, &scalar.tensor}, [](C x, C y) { return compare<Op, C>(x, y); },
                      ew::kCheapGrain, op);
  });
}

#define ETNP_COMPARE_KERNELS(name, Op)                                                                         \
  void name##_tensor_out(KernelContext& ctx, KernelArgs args) { compare_tensor<Op>(ctx, args, "aten::" #name ".Tensor_out"); } \
  void name##_scalar_out(KernelContext& ctx, KernelArgs args) { compare_scalar<Op>(ctx, args, "aten::" #name ".Scalar_out"); }

ETNP_COMPARE_KERNELS(eq, Cmp::Eq)
ETNP_COMPARE_KERNELS(ne, Cmp::Ne)
ETNP_COMPARE_KERNELS(lt, Cmp::Lt)
ETNP_COMPARE_KERNELS(le, Cmp::Le)
ETNP_COMPARE_KERNELS(gt, Cmp::Gt)
ETNP_COMPARE_KERNELS(ge, Cmp::Ge)

#undef ETNP_COMPARE_KERNELS

void check_mask_dtype(const Tensor& mask, bool allow_byte, const char* op, const char* what) {
  if (mask.dtype() == ScalarType::Bool || (allow_byte && mask.dtype() == ScalarType::Byte)) return;
  kernel_fail(std::string(op) + ": expected " + what + " to be a bool tensor, got " +
              std::string(scalar_type_name(mask.dtype())));
}

// where(condition, self, other): condition ? self : other, broadcast over all three. The condition may be
// bool or (deprecated in PyTorch, still accepted) uint8.
void where_self_out(KernelContext& ctx, KernelArgs args) {
  const char* op = "aten::where.self_out";
  check_num_args(args, 5, op);
  const Tensor& cond = args[0]->to_tensor();
  const Tensor& self = args[1]->to_tensor();
  const Tensor& other = args[2]->to_tensor();
  Tensor& out = args[3]->to_tensor();
  check_mask_dtype(cond, /*allow_byte=*/true, op, "condition");
  const std::array<const Tensor*, 3> operands{&cond, &self, &other};
  ew::resize_to_broadcast(out, operands, op);
  const std::array<const Tensor*, 2> values{&self, &other};
  const ScalarType common = ew::result_type_of(values);
  ew::check_can_cast(common, out, op);
  dispatch_compute<kRealTypes | kBool>(common, op, [&](auto tag) {
    using C = decltype(tag);
    apply<C, C, 3>(ctx, out, {&cond, &self, &other}, [](C c, C a, C b) { return c != C(0) ? a : b; },
                   ew::kCheapGrain, op);
  });
}

// masked_fill(self, mask, value): value where mask is true, self elsewhere; the value is first converted to
// self's dtype.
void masked_fill_scalar_out(KernelContext& ctx, KernelArgs args) {
  const char* op = "aten::masked_fill.Scalar_out";
  check_num_args(args, 5, op);
  const Tensor& self = args[0]->to_tensor();
  const Tensor& mask = args[1]->to_tensor();
  const Scalar value = args[2]->to_scalar();
  Tensor& out = args[3]->to_tensor();
  check_mask_dtype(mask, /*allow_byte=*/false, op, "mask");
  const std::array<const Tensor*, 2> operands{&self, &mask};
  ew::resize_to_broadcast(out, operands, op);
  ew::check_can_cast(self.dtype(), out, op);
  dispatch<kRealTypes | kBool>(self.dtype(), op, [&](auto self_tag) {
    using T = decltype(self_tag);
    using C = OpMath<T>;
    const C fill = ew::cast_to<C>(ew::scalar_to<T>(value));
    apply<C, C, 2>(ctx, out, {&self, &mask}, [fill](C x, C m) { return m != C(0) ? fill : x; }, ew::kCheapGrain,
                   op);
  });
}

}  // namespace

void register_compare_kernels(KernelRegistry& registry) {
  // (Tensor self, Tensor|Scalar other, *, Tensor(a!) out) + return slot
  registry.add("aten::eq.Tensor_out", 4, eq_tensor_out);
  registry.add("aten::eq.Scalar_out", 4, eq_scalar_out);
  registry.add("aten::ne.Tensor_out", 4, ne_tensor_out);
  registry.add("aten::ne.Scalar_out", 4, ne_scalar_out);
  registry.add("aten::lt.Tensor_out", 4, lt_tensor_out);
  registry.add("aten::lt.Scalar_out", 4, lt_scalar_out);
  registry.add("aten::le.Tensor_out", 4, le_tensor_out);
  registry.add("aten::le.Scalar_out", 4, le_scalar_out);
  registry.add("aten::gt.Tensor_out", 4, gt_tensor_out);
  registry.add("aten::gt.Scalar_out", 4, gt_scalar_out);
  registry.add("aten::ge.Tensor_out", 4, ge_tensor_out);
  registry.add("aten::ge.Scalar_out", 4, ge_scalar_out);
  // (Tensor condition, Tensor self, Tensor other, *, Tensor(a!) out)
  registry.add("aten::where.self_out", 5, where_self_out);
  // (Tensor self, Tensor mask, Scalar value, *, Tensor(a!) out)
  registry.add("aten::masked_fill.Scalar_out", 5, masked_fill_scalar_out);
}

}  // namespace etnp::kernels
