#include "compute/tensor_util.h"

#include <algorithm>

namespace etnp::compute {

void unsupported_dtype(const char* op, ScalarType t) {
  kernel_fail(std::string(op) + ": unsupported dtype " + std::string(scalar_type_name(t)));
}

double load_as_double(ScalarType t, const void* base, int64_t offset) {
  double r = 0;
  dispatch(t, "load", [&](auto tag) {
    using T = decltype(tag);
    r = static_cast<double>(static_cast<OpMath<T>>(static_cast<const T*>(base)[offset]));
  });
  return r;
}

int64_t load_as_int(ScalarType t, const void* base, int64_t offset) {
  int64_t r = 0;
  dispatch(t, "load", [&](auto tag) {
    using T = decltype(tag);
    r = static_cast<int64_t>(static_cast<OpMath<T>>(static_cast<const T*>(base)[offset]));
  });
  return r;
}

void store_from_double(ScalarType t, void* base, int64_t offset, double v) {
  dispatch(t, "store", [&](auto tag) {
    using T = decltype(tag);
    static_cast<T*>(base)[offset] = convert<T>(v);
  });
}

namespace {

int category(ScalarType t) {
  if (t == ScalarType::Bool) return 0;
  if (is_floating_type(t)) return 2;
  return 1;
}

bool is_unsigned(ScalarType t) {
  return t == ScalarType::Byte || t == ScalarType::UInt16 || t == ScalarType::UInt32 || t == ScalarType::UInt64;
}

ScalarType signed_of_size(size_t bytes) {
  switch (bytes) {
    case 1: return ScalarType::Char;
    case 2: return ScalarType::Short;
    case 4: return ScalarType::Int;
    default: return ScalarType::Long;
  }
}

}  // namespace

ScalarType promote_types(ScalarType a, ScalarType b) {
  if (a == b) return a;
  const int ca = category(a), cb = category(b);
  if (ca != cb) return ca > cb ? a : b;
  if (ca == 2) {
    // Half + BFloat16 -> Float; otherwise the wider type.
    if ((a == ScalarType::Half && b == ScalarType::BFloat16) || (a == ScalarType::BFloat16 && b == ScalarType::Half)) {
      return ScalarType::Float;
    }
    return element_size(a) >= element_size(b) ? a : b;
  }
  // Both integral.
  const bool ua = is_unsigned(a), ub = is_unsigned(b);
  const size_t sa = element_size(a), sb = element_size(b);
  if (ua == ub) return sa >= sb ? a : b;
  const ScalarType u = ua ? a : b, s = ua ? b : a;
  const size_t su = element_size(u), ss = element_size(s);
  if (ss > su) return s;
  return signed_of_size(std::min<size_t>(su * 2, 8));
}

ScalarType promote_with_scalar(ScalarType tensor_type, const Scalar& s) {
  const int ct = category(tensor_type);
  const int cs = s.is_floating() ? 2 : s.is_integral() ? 1 : 0;
  if (cs <= ct) return tensor_type;
  return cs == 2 ? ScalarType::Float : ScalarType::Long;
}

ScalarType result_type(const Tensor& a, const Tensor& b) {
  const bool za = a.dim() == 0, zb = b.dim() == 0;
  if (za == zb) return promote_types(a.dtype(), b.dtype());
  const Tensor& zero_dim = za ? a : b;
  const Tensor& dimmed = za ? b : a;
  if (category(zero_dim.dtype()) > category(dimmed.dtype())) return zero_dim.dtype();
  return dimmed.dtype();
}

bool can_cast(ScalarType from, ScalarType to) {
  const int cf = category(from), ct = category(to);
  if (cf == 2 && ct < 2) return false;
  if (cf != 0 && ct == 0) return false;
  return true;
}

int64_t normalize_dim(int64_t dim, int64_t rank, const char* op) {
  const int64_t r = rank == 0 ? 1 : rank;
  if (dim < -r || dim >= r) {
    kernel_fail(std::string(op) + ": dim " + std::to_string(dim) + " is out of range for a rank-" +
                std::to_string(rank) + " tensor");
  }
  return dim < 0 ? dim + r : dim;
}

std::string shape_str(std::span<const int64_t> shape) {
  std::string r = "[";
  for (size_t i = 0; i < shape.size(); ++i) r += (i ? ", " : "") + std::to_string(shape[i]);
  return r + "]";
}

InlineShape broadcast_shapes(std::span<const int64_t> a, std::span<const int64_t> b, const char* op) {
  const size_t n = std::max(a.size(), b.size());
  if (n > static_cast<size_t>(kMaxTensorRank)) {
    kernel_fail(std::string(op) + ": shapes " + shape_str(a) + " and " + shape_str(b) + " have more than " +
                std::to_string(kMaxTensorRank) + " dims");
  }
  InlineShape shape;
  shape.rank = n;
  int64_t* out = shape.dims.data();
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1) {
      kernel_fail(std::string(op) + ": shapes " + shape_str(a) + " and " + shape_str(b) + " cannot be broadcast");
    }
    out[i] = da == 1 ? db : da;
  }
  return shape;
}

void resize_output(Tensor& out, std::span<const int64_t> shape, const char* op) {
  if (!out.try_resize(shape)) {
    kernel_fail(std::string(op) + ": output of shape " + shape_str(out.sizes()) + " (" +
                (out.dynamism() == ShapeDynamism::Static ? "static" : "bound " + shape_str(out.bound_sizes())) +
                ") cannot be resized to " + shape_str(shape));
  }
}

std::array<int64_t, kMaxTensorRank> broadcast_strides(const Tensor& t, std::span<const int64_t> out_shape) {
  std::array<int64_t, kMaxTensorRank> s{};
  const int rank = static_cast<int>(out_shape.size());
  const int lead = rank - t.dim();
  for (int i = 0; i < rank; ++i) {
    if (i < lead) continue;
    const int d = i - lead;
    s[i] = t.size(d) == 1 ? 0 : t.stride(d);
  }
  return s;
}

}  // namespace etnp::compute
