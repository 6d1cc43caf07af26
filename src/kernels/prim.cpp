// Operators the runtime itself provides (symbolic sizes, scalar arithmetic, views, indexed copies).
#include <cmath>

#include "kernels/kernel_util.h"
#include "kernels/register.h"

namespace etnp::kernels {
namespace {

// Scalar operands of executorch_prim ops are Int, Double or Bool values.
double as_double(const EValue& v) { return v.to_scalar().to_double(); }
bool both_int(const EValue& a, const EValue& b) { return !a.is_double() && !b.is_double(); }
int64_t as_int(const EValue& v) { return v.to_scalar().to_int(); }

void sym_size_int(KernelContext&, KernelArgs args) {
  const Tensor& self = args[0]->to_tensor();
  const int64_t dim = normalize_dim(args[1]->to_int(), self.dim(), "aten::sym_size.int");
  args[2]->set_int(self.size(static_cast<int>(dim)));
}

void sym_numel(KernelContext&, KernelArgs args) { args[1]->set_int(args[0]->to_tensor().numel()); }

void local_scalar_dense(KernelContext&, KernelArgs args) {
  const Tensor& self = args[0]->to_tensor();
  ETNP_KERNEL_CHECK(self.numel() >= 1, "aten::_local_scalar_dense: the tensor is empty");
  if (self.dtype() == ScalarType::Bool) {
    args[1]->set_bool(*self.data_as<const uint8_t>() != 0);
  } else if (is_floating_type(self.dtype())) {
    args[1]->set_double(load_as_double(self.dtype(), self.data(), 0));
  } else {
    args[1]->set_int(load_as_int(self.dtype(), self.data(), 0));
  }
}

template <typename IntOp, typename FloatOp>
void arithmetic(KernelArgs args, IntOp int_op, FloatOp float_op) {
  const EValue& a = *args[0];
  const EValue& b = *args[1];
  if (both_int(a, b)) {
    args[2]->set_int(int_op(as_int(a), as_int(b)));
  } else {
    args[2]->set_double(float_op(as_double(a), as_double(b)));
  }
}

void prim_add(KernelContext&, KernelArgs args) {
  arithmetic(args, [](int64_t x, int64_t y) { return static_cast<int64_t>(uint64_t(x) + uint64_t(y)); },
             [](double x, double y) { return x + y; });
}
void prim_sub(KernelContext&, KernelArgs args) {
  arithmetic(args, [](int64_t x, int64_t y) { return static_cast<int64_t>(uint64_t(x) - uint64_t(y)); },
             [](double x, double y) { return x - y; });
}
void prim_mul(KernelContext&, KernelArgs args) {
  arithmetic(args, [](int64_t x, int64_t y) { return static_cast<int64_t>(uint64_t(x) * uint64_t(y)); },
             [](double x, double y) { return x * y; });
}
void prim_truediv(KernelContext&, KernelArgs args) { args[2]->set_double(as_double(*args[0]) / as_double(*args[1])); }

int64_t floordiv_int(int64_t a, int64_t b) {
  ETNP_KERNEL_CHECK(b != 0, "executorch_prim::floordiv: integer division by zero");
  if (a == INT64_MIN && b == -1) return INT64_MIN;
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

double floordiv_double(double a, double b) {
  if (b == 0.0) return a == 0.0 || std::isnan(a) ? NAN : (std::signbit(a) != std::signbit(b) ? -INFINITY : INFINITY);
  return std::floor(a / b);
}

int64_t mod_int(int64_t a, int64_t b) {
  ETNP_KERNEL_CHECK(b != 0, "executorch_prim::mod: integer modulo by zero");
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

double mod_double(double a, double b) {
  double r = std::fmod(a, b);
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

void prim_floordiv(KernelContext&, KernelArgs args) { arithmetic(args, floordiv_int, floordiv_double); }
void prim_mod(KernelContext&, KernelArgs args) { arithmetic(args, mod_int, mod_double); }

template <typename Cmp>
void compare(KernelArgs args, Cmp cmp) {
  const EValue& a = *args[0];
  const EValue& b = *args[1];
  if (a.is_bool() && b.is_bool()) {
    args[2]->set_bool(cmp(int64_t(a.to_bool()), int64_t(b.to_bool())));
  } else if (both_int(a, b)) {
    args[2]->set_bool(cmp(as_int(a), as_int(b)));
  } else {
    args[2]->set_bool(cmp(as_double(a), as_double(b)));
  }
}

void prim_eq(KernelContext&, KernelArgs args) { compare(args, [](auto x, auto y) { return x == y; }); }
void prim_gt(KernelContext&, KernelArgs args) { compare(args, [](auto x, auto y) { return x > y; }); }
void prim_lt(KernelContext&, KernelArgs args) { compare(args, [](auto x, auto y) { return x < y; }); }
void prim_ge(KernelContext&, KernelArgs args) { compare(args, [](auto x, auto y) { return x >= y; }); }
void prim_le(KernelContext&, KernelArgs args) { compare(args, [](auto x, auto y) { return x <= y; }); }

void prim_neg(KernelContext&, KernelArgs args) {
  const EValue& a = *args[0];
  if (a.is_double()) args[1]->set_double(-a.to_double());
  else args[1]->set_int(static_cast<int64_t>(0 - uint64_t(as_int(a))));
}

template <double (*Fn)(double)>
void prim_rounding(KernelContext&, KernelArgs args) {
  const EValue& a = *args[0];
  if (a.is_double()) {
    const double r = Fn(a.to_double());
    ETNP_KERNEL_CHECK(std::isfinite(r) && std::fabs(r) < 9.2e18, "executorch_prim: cannot convert " << r << " to an integer");
    args[1]->set_int(static_cast<int64_t>(r));
  } else {
    args[1]->set_int(as_int(a));
  }
}

double round_half_even(double x) { return std::nearbyint(x); }

void prim_sym_float(KernelContext&, KernelArgs args) { args[1]->set_double(as_double(*args[0])); }
void prim_sym_int(KernelContext&, KernelArgs args) {
  const EValue& a = *args[0];
  if (a.is_double()) {
    const double d = a.to_double();
    ETNP_KERNEL_CHECK(std::isfinite(d) && std::fabs(d) < 9.2e18, "executorch_prim::sym_int: cannot convert " << d);
    args[1]->set_int(static_cast<int64_t>(d));
  } else {
    args[1]->set_int(as_int(a));
  }
}
void prim_sym_not(KernelContext&, KernelArgs args) { args[1]->set_bool(!args[0]->to_bool()); }
void prim_sym_max(KernelContext&, KernelArgs args) {
  arithmetic(args, [](int64_t x, int64_t y) { return x > y ? x : y; }, [](double x, double y) { return std::fmax(x, y); });
}
void prim_sym_min(KernelContext&, KernelArgs args) {
  arithmetic(args, [](int64_t x, int64_t y) { return x < y ? x : y; }, [](double x, double y) { return std::fmin(x, y); });
}
void prim_sym_ite(KernelContext&, KernelArgs args) { *args[3] = args[0]->to_bool() ? *args[1] : *args[2]; }

// out = view of self with `size` (one -1 inferred); out points at self's data.
void et_view(KernelContext&, KernelArgs args) {
  constexpr const char* op = "executorch_prim::et_view.default";
  const Tensor& self = args[0]->to_tensor();
  Tensor& out = args[2]->to_tensor();
  const IntListRef size = args[1]->to_int_list();
  ETNP_KERNEL_CHECK(static_cast<int>(size.size()) == out.dim(),
                    op << ": size has " << size.size() << " entries, the output has rank " << out.dim());
  int64_t shape[kMaxTensorRank];
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < size.size(); ++i) {
    shape[i] = size[i];
    if (shape[i] == -1) {
      ETNP_KERNEL_CHECK(infer < 0, op << ": more than one -1 in the size");
      infer = static_cast<int>(i);
    } else {
      ETNP_KERNEL_CHECK(shape[i] >= 0, op << ": negative size " << shape[i]);
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    ETNP_KERNEL_CHECK(known != 0 && self.numel() % known == 0, op << ": cannot infer -1 for " << self.numel() << " elements");
    shape[infer] = self.numel() / known;
    known *= shape[infer];
  }
  ETNP_KERNEL_CHECK(known == self.numel(),
                    op << ": a view of " << shape_str(self.sizes()) << " cannot have " << known << " elements");
  ETNP_KERNEL_CHECK(self.dtype() == out.dtype(), op << ": dtype differs between input and output");
  resize_output(out, std::span<const int64_t>(shape, size.size()), op);
  out.set_data(self.data());
}

// copy_to[index] = copy_from, growing copy_to's dim 0 to index + 1.
void et_copy_index(KernelContext&, KernelArgs args) {
  constexpr const char* op = "executorch_prim::et_copy_index.tensor";
  Tensor& to = args[0]->to_tensor();
  const Tensor& from = args[1]->to_tensor();
  const int64_t index = args[2]->to_int();
  ETNP_KERNEL_CHECK(to.dim() == from.dim() + 1, op << ": rank mismatch");
  ETNP_KERNEL_CHECK(to.dtype() == from.dtype(), op << ": dtype mismatch");
  ETNP_KERNEL_CHECK(index >= 0, op << ": negative index " << index);
  int64_t shape[kMaxTensorRank];
  shape[0] = index + 1;
  for (int d = 0; d < from.dim(); ++d) shape[d + 1] = from.size(d);
  if (to.size(0) < index + 1) resize_output(to, std::span<const int64_t>(shape, to.dim()), op);
  for (int d = 0; d < from.dim(); ++d) {
    ETNP_KERNEL_CHECK(to.size(d + 1) == from.size(d), op << ": shape mismatch");
  }
  const size_t row = from.nbytes();
  std::memmove(static_cast<uint8_t*>(to.data()) + row * static_cast<size_t>(index), from.data(), row);
}

}  // namespace

void register_prim_kernels(KernelRegistry& r) {
  r.add("aten::sym_size.int", 3, sym_size_int);
  r.add("aten::sym_numel", 2, sym_numel);
  r.add("aten::_local_scalar_dense", 2, local_scalar_dense);
  r.add("executorch_prim::add.Scalar", 3, prim_add);
  r.add("executorch_prim::sub.Scalar", 3, prim_sub);
  r.add("executorch_prim::mul.Scalar", 3, prim_mul);
  r.add("executorch_prim::truediv.Scalar", 3, prim_truediv);
  r.add("executorch_prim::floordiv.Scalar", 3, prim_floordiv);
  r.add("executorch_prim::floordiv.int", 3, prim_floordiv);
  r.add("executorch_prim::mod.Scalar", 3, prim_mod);
  r.add("executorch_prim::mod.int", 3, prim_mod);
  r.add("executorch_prim::eq.Scalar", 3, prim_eq);
  r.add("executorch_prim::gt.Scalar", 3, prim_gt);
  r.add("executorch_prim::lt.Scalar", 3, prim_lt);
  r.add("executorch_prim::ge.Scalar", 3, prim_ge);
  r.add("executorch_prim::le.Scalar", 3, prim_le);
  r.add("executorch_prim::neg.Scalar", 2, prim_neg);
  r.add("executorch_prim::ceil.Scalar", 2, prim_rounding<std::ceil>);
  r.add("executorch_prim::round.Scalar", 2, prim_rounding<round_half_even>);
  r.add("executorch_prim::trunc.Scalar", 2, prim_rounding<std::trunc>);
  r.add("executorch_prim::sym_float.Scalar", 2, prim_sym_float);
  r.add("executorch_prim::sym_int.Scalar", 2, prim_sym_int);
  r.add("executorch_prim::sym_not.Scalar", 2, prim_sym_not);
  r.add("executorch_prim::sym_max.Scalar", 3, prim_sym_max);
  r.add("executorch_prim::sym_min.Scalar", 3, prim_sym_min);
  r.add("executorch_prim::sym_ite.Scalar", 4, prim_sym_ite);
  r.add("executorch_prim::et_copy_index.tensor", 3, et_copy_index);
  r.add("executorch_prim::et_view.default", 3, et_view);
}

}  // namespace etnp::kernels
