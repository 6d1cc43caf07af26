// Creation and padding kernels: full/ones/zeros/empty, arange, scalar_tensor, fill, constant_pad_nd and the
// reflection/replication pads. Fill values are converted with ATen's overflow check.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "compute/copy_util.h"
#include "kernels/kernel_util.h"
#include "kernels/register.h"

namespace etnp::kernels {
namespace {

Tensor& tensor_arg(KernelArgs args, size_t i) { return args[i]->to_tensor(); }

std::string str(int64_t v) { return std::to_string(v); }

std::vector<int64_t> checked_size(const EValue* v, const char* op) {
  auto size = v->to_int_list().to_vector();
  for (int64_t s : size) {
    if (s < 0) kernel_fail(std::string(op) + ": negative dimension " + str(s) + " in size " + shape_str(size));
  }
  return size;
}

/// Scalar -> int64 truncating like Scalar::to<int64_t>, without UB for huge doubles.
int64_t scalar_as_int64(const Scalar& s) {
  return s.is_floating() ? cast_element<int64_t>(s.d) : s.is_bool() ? int64_t(s.b) : s.i;
}

Scalar int_scalar(int64_t v) {
  Scalar s;
  s.kind = Scalar::Kind::Int;
  s.i = v;
  return s;
}

// ---------------------------------------------------------------------------------------------------------
// full / ones / zeros / empty / scalar_tensor / fill

void full_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "full.out";
  Tensor& out = tensor_arg(args, 2);
  resize_output(out, checked_size(args[0], op), op);
  fill_with_scalar(out, args[1]->to_scalar(), op);
}

void full_like_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "full_like.out";
  const Tensor& self = tensor_arg(args, 0);
  Tensor& out = tensor_arg(args, 3);
  if (!args[2]->is_none()) {
    const int64_t f = args[2]->to_int();
    if (f < 0 || f > 3) kernel_fail(std::string(op) + ": invalid memory_format " + str(f));
  }
  resize_output(out, self.sizes(), op);
  fill_with_scalar(out, args[1]->to_scalar(), op);
}

void ones_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "ones.out";
  Tensor& out = tensor_arg(args, 1);
  resize_output(out, checked_size(args[0], op), op);
  fill_with_scalar(out, int_scalar(1), op);
}

void zeros_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "zeros.out";
  Tensor& out = tensor_arg(args, 1);
  resize_output(out, checked_size(args[0], op), op);
  fill_with_scalar(out, int_scalar(0), op);
}

void empty_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "empty.out";
  Tensor& out = tensor_arg(args, 2);
  resize_output(out, checked_size(args[0], op), op);
}

void scalar_tensor_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "scalar_tensor.out";
  Tensor& out = tensor_arg(args, 1);
  resize_output(out, std::span<const int64_t>(), op);
  fill_with_scalar(out, args[0]->to_scalar(), op);
}

void fill_scalar_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "fill.Scalar_out";
  const Tensor& self = tensor_arg(args, 0);
  Tensor& out = tensor_arg(args, 2);
  resize_output(out, self.sizes(), op);
  fill_with_scalar(out, args[1]->to_scalar(), op);
}

void fill_tensor_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "fill.Tensor_out";
  const Tensor& self = tensor_arg(args, 0);
  const Tensor& value = tensor_arg(args, 1);
  Tensor& out = tensor_arg(args, 2);
  if (value.dim() != 0) {
    kernel_fail(std::string(op) + ": fill only supports 0-dimension value tensor but got tensor with " +
                str(value.dim()) + " dimensions");
  }
  // value.item(): a Scalar of the value's category.
  Scalar s;
  if (value.dtype() == ScalarType::Bool) {
    s.kind = Scalar::Kind::Bool;
    s.b = *value.data_as<const bool>();
  } else if (is_floating_type(value.dtype())) {
    s.kind = Scalar::Kind::Double;
    s.d = load_as_double(value.dtype(), value.data(), 0);
  } else {
    s.kind = Scalar::Kind::Int;
    dispatch<kInts | kUInts>(value.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      s.i = static_cast<int64_t>(*value.data_as<const T>());
    });
  }
  resize_output(out, self.sizes(), op);
  fill_with_scalar(out, s, op);
}

// ---------------------------------------------------------------------------------------------------------
// arange

void arange_impl(const Scalar& start, const Scalar& end, const Scalar& step, Tensor& out, const char* op) {
  const double xstart = start.to_double(), xend = end.to_double(), xstep = step.to_double();
  if (xstep == 0.0) kernel_fail(std::string(op) + ": step must be nonzero");
  if (!std::isfinite(xstart) || !std::isfinite(xend)) {
    kernel_fail(std::string(op) + ": unsupported range: " + std::to_string(xstart) + " -> " + std::to_string(xend));
  }
  if (!((xstep > 0 && xend >= xstart) || (xstep < 0 && xend <= xstart))) {
    kernel_fail(std::string(op) + ": upper bound and larger bound inconsistent with step sign");
  }
  const ScalarType t = out.dtype();
  if (t == ScalarType::Bool) unsupported_dtype(op, t);
  // The length is computed as ATen does: in int64 for int64 outputs, in double otherwise.
  double size_d;
  if (t == ScalarType::Long) {
    const int64_t s = scalar_as_int64(start), e = scalar_as_int64(end), st = scalar_as_int64(step);
    if (st == 0) kernel_fail(std::string(op) + ": step must be nonzero");
    size_d = std::ceil(static_cast<double>(static_cast<int64_t>(static_cast<uint64_t>(e) - static_cast<uint64_t>(s))) /
                       static_cast<double>(st));
  } else {
    size_d = std::ceil((xend - xstart) / xstep);
  }
  if (!(size_d >= 0 && size_d <= static_cast<double>(std::numeric_limits<int64_t>::max()))) {
    kernel_fail(std::string(op) + ": invalid size, possible overflow?");
  }
  const int64_t n = static_cast<int64_t>(size_d);
  resize_output(out, {n}, op);
  const int64_t stride = out.stride(0);
  dispatch<kRealTypes | kUInts>(t, op, [&](auto tag) {
    using T = decltype(tag);
    T* data = out.data_as<T>();
    if constexpr (std::is_integral_v<T>) {
      // Integer outputs accumulate in int64 (ATen's acc type).
      const uint64_t s = static_cast<uint64_t>(scalar_as_int64(start)), st = static_cast<uint64_t>(scalar_as_int64(step));
      for (int64_t i = 0; i < n; ++i) data[i * stride] = static_cast<T>(s + st * static_cast<uint64_t>(i));
    } else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      // float and double accumulate in double.
      for (int64_t i = 0; i < n; ++i) data[i * stride] = static_cast<T>(xstart + xstep * static_cast<double>(i));
    } else {
      // Half and BFloat16 accumulate in float.
      const float fs = static_cast<float>(xstart), fst = static_cast<float>(xstep);
      for (int64_t i = 0; i < n; ++i) data[i * stride] = T(fs + fst * static_cast<float>(i));
    }
  });
}

void arange_out(KernelContext&, KernelArgs args) {
  arange_impl(int_scalar(0), args[0]->to_scalar(), int_scalar(1), tensor_arg(args, 1), "arange.out");
}

void arange_start_out(KernelContext&, KernelArgs args) {
  arange_impl(args[0]->to_scalar(), args[1]->to_scalar(), args[2]->to_scalar(), tensor_arg(args, 3),
              "arange.start_out");
}

// ---------------------------------------------------------------------------------------------------------
// padding

char* elem_ptr(const Tensor& t, int64_t offset) {
  return static_cast<char*>(t.data()) + offset * static_cast<int64_t>(t.element_size());
}

void constant_pad_nd_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "constant_pad_nd.out";
  const Tensor& self = tensor_arg(args, 0);
  const auto pad = args[1]->to_int_list().to_vector();
  const Scalar value = args[2]->to_scalar();
  Tensor& out = tensor_arg(args, 3);
  if (pad.size() % 2 != 0) kernel_fail(std::string(op) + ": length of pad must be even but instead it equals " + str(static_cast<int64_t>(pad.size())));
  const int rank = self.dim();
  if (static_cast<int>(pad.size() / 2) > rank) {
    kernel_fail(std::string(op) + ": length of pad should be no more than twice the number of dimensions of the input. Pad length is " +
                str(static_cast<int64_t>(pad.size())) + " while the input has " + str(rank) + " dimensions");
  }
  std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end());
  std::vector<int64_t> before(static_cast<size_t>(rank), 0), after(static_cast<size_t>(rank), 0);
  for (size_t i = 0; i < pad.size() / 2; ++i) {
    const int d = rank - 1 - static_cast<int>(i);
    before[d] = pad[2 * i];
    after[d] = pad[2 * i + 1];
    shape[d] = self.size(d) + before[d] + after[d];
    if (shape[d] < 0) {
      kernel_fail(std::string(op) + ": the input size " + str(self.size(d)) + ", plus negative padding " +
                  str(before[d]) + " and " + str(after[d]) + " resulted in a negative output size, which is invalid");
    }
  }
  resize_output(out, shape, op);
  fill_with_scalar(out, value, op);
  // Copy the part of the input that survives (negative pads crop).
  std::vector<int64_t> region(static_cast<size_t>(rank));
  int64_t src_off = 0, dst_off = 0;
  for (int d = 0; d < rank; ++d) {
    const int64_t crop_lo = std::max<int64_t>(0, -before[d]), crop_hi = std::max<int64_t>(0, -after[d]);
    region[d] = self.size(d) - crop_lo - crop_hi;
    if (region[d] <= 0) return;
    src_off += crop_lo * self.stride(d);
    dst_off += std::max<int64_t>(0, before[d]) * out.stride(d);
  }
  if (self.numel() == 0) return;
  strided_copy(elem_ptr(out, dst_off), out.dtype(), out.strides().data(), elem_ptr(self, src_off), self.dtype(),
               self.strides().data(), region);
}

enum class PadMode { Reflect, Replicate };

/// Reflection/replication padding of the last `k` dims (input rank k+1 or k+2).
void pad_nd(KernelArgs args, int k, PadMode mode, const char* op) {
  const Tensor& self = tensor_arg(args, 0);
  const auto pad = args[1]->to_int_list().to_vector();
  Tensor& out = tensor_arg(args, 2);
  if (static_cast<int>(pad.size()) != 2 * k) {
    kernel_fail(std::string(op) + ": padding size is expected to be " + str(2 * k) + ", got " + str(static_cast<int64_t>(pad.size())));
  }
  const int rank = self.dim();
  if (rank != k + 1 && rank != k + 2) {
    kernel_fail(std::string(op) + ": expected " + str(k + 1) + "D or " + str(k + 2) + "D (batch mode) input, got rank " +
                str(rank));
  }
  for (int d = (rank == k + 2 ? 1 : 0); d < rank; ++d) {
    if (self.size(d) == 0) {
      kernel_fail(std::string(op) + ": expected input with possibly 0 batch size and other non-zero dimensions, got " +
                  shape_str(self.sizes()));
    }
  }
  std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end());
  std::vector<std::vector<int64_t>> maps(static_cast<size_t>(k));
  for (int i = 0; i < k; ++i) {
    const int d = rank - 1 - i;
    const int64_t lo = pad[2 * i], hi = pad[2 * i + 1], n = self.size(d);
    if (mode == PadMode::Reflect && (lo >= n || hi >= n)) {
      kernel_fail(std::string(op) + ": padding size should be less than the corresponding input dimension, but got: padding (" +
                  str(lo) + ", " + str(hi) + ") at dimension " + str(d) + " of input " + shape_str(self.sizes()));
    }
    shape[d] = n + lo + hi;
    if (shape[d] < 1) {
      kernel_fail(std::string(op) + ": input size " + str(n) + " with padding (" + str(lo) + ", " + str(hi) +
                  ") gives output size " + str(shape[d]) + ", which is too small");
    }
    // Source index for every output position along this dim.
    auto& m = maps[static_cast<size_t>(d - (rank - k))];
    m.resize(static_cast<size_t>(shape[d]));
    for (int64_t j = 0; j < shape[d]; ++j) {
      int64_t s = j - lo;
      if (mode == PadMode::Reflect) {
        if (s < 0) s = -s;
        if (s >= n) s = 2 * (n - 1) - s;
      } else {
        s = std::clamp<int64_t>(s, 0, n - 1);
      }
      if (s < 0 || s >= n) kernel_fail(std::string(op) + ": padding too large for dimension " + str(d));
      m[static_cast<size_t>(j)] = s * self.stride(d);
    }
  }
  resize_output(out, shape, op);
  if (out.numel() == 0) return;
  if (out.dtype() != self.dtype()) {
    kernel_fail(std::string(op) + ": out dtype " + std::string(scalar_type_name(out.dtype())) + " must match input dtype " +
                std::string(scalar_type_name(self.dtype())));
  }
  const size_t es = self.element_size();
  const int first_padded = rank - k;
  // Walk the output in row-major order; padded dims read through their maps.
  int64_t idx[kMaxTensorRank] = {};
  const int64_t inner = shape[rank - 1];
  const auto& inner_map = maps.back();
  const int64_t inner_out_stride = out.stride(rank - 1);
  for (int64_t outer = 0, n_outer = out.numel() / inner; outer < n_outer; ++outer) {
    int64_t src = 0, dst = 0;
    for (int d = 0; d < rank - 1; ++d) {
      dst += idx[d] * out.stride(d);
      src += d < first_padded ? idx[d] * self.stride(d) : maps[static_cast<size_t>(d - first_padded)][static_cast<size_t>(idx[d])];
    }
    char* o = elem_ptr(out, dst);
    const char* s = elem_ptr(self, src);
    for (int64_t j = 0; j < inner; ++j) {
      std::memcpy(o + j * inner_out_stride * static_cast<int64_t>(es), s + inner_map[static_cast<size_t>(j)] * static_cast<int64_t>(es), es);
    }
    for (int d = rank - 2; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

void reflection_pad1d_out(KernelContext&, KernelArgs args) { pad_nd(args, 1, PadMode::Reflect, "reflection_pad1d.out"); }
void reflection_pad2d_out(KernelContext&, KernelArgs args) { pad_nd(args, 2, PadMode::Reflect, "reflection_pad2d.out"); }
void reflection_pad3d_out(KernelContext&, KernelArgs args) { pad_nd(args, 3, PadMode::Reflect, "reflection_pad3d.out"); }
void replication_pad1d_out(KernelContext&, KernelArgs args) { pad_nd(args, 1, PadMode::Replicate, "replication_pad1d.out"); }
void replication_pad2d_out(KernelContext&, KernelArgs args) { pad_nd(args, 2, PadMode::Replicate, "replication_pad2d.out"); }
void replication_pad3d_out(KernelContext&, KernelArgs args) { pad_nd(args, 3, PadMode::Replicate, "replication_pad3d.out"); }

}  // namespace

void register_fill_kernels(KernelRegistry& registry) {
  registry.add("aten::full.out", 4, full_out);
  registry.add("aten::full_like.out", 5, full_like_out);
  registry.add("aten::ones.out", 3, ones_out);
  registry.add("aten::zeros.out", 3, zeros_out);
  registry.add("aten::empty.out", 4, empty_out);
  registry.add("aten::arange.out", 3, arange_out);
  registry.add("aten::arange.start_out", 5, arange_start_out);
  registry.add("aten::scalar_tensor.out", 3, scalar_tensor_out);
  registry.add("aten::fill.Scalar_out", 4, fill_scalar_out);
  registry.add("aten::fill.Tensor_out", 4, fill_tensor_out);
  registry.add("aten::constant_pad_nd.out", 5, constant_pad_nd_out);
  registry.add("aten::reflection_pad1d.out", 4, reflection_pad1d_out);
  registry.add("aten::reflection_pad2d.out", 4, reflection_pad2d_out);
  registry.add("aten::reflection_pad3d.out", 4, reflection_pad3d_out);
  registry.add("aten::replication_pad1d.out", 4, replication_pad1d_out);
  registry.add("aten::replication_pad2d.out", 4, replication_pad2d_out);
  registry.add("aten::replication_pad3d.out", 4, replication_pad3d_out);
}

}  // namespace etnp::kernels
