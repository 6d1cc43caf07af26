// Indexing kernels: advanced indexing (index.Tensor, index_put — the LLM KV-cache update), index_select,
// gather/scatter, embedding, masked_scatter/masked_select and nonzero. Index values are validated before
// any memory is touched: an out-of-range index fails the kernel with the index and the bound.
#include <algorithm>
#include <string>
#include <vector>

#include "etnp/threadpool.h"
#include "compute/copy_util.h"
#include "kernels/kernel_util.h"
#include "kernels/register.h"

namespace etnp::kernels {
namespace {

Tensor& tensor_arg(KernelArgs args, size_t i) { return args[i]->to_tensor(); }

char* elem_ptr(const Tensor& t, int64_t offset) {
  return static_cast<char*>(t.data()) + offset * static_cast<int64_t>(t.element_size());
}

std::string str(int64_t v) { return std::to_string(v); }

void check_same_dtypes(const Tensor& a, const char* a_name, const Tensor& b, const char* b_name, const char* op) {
  if (a.dtype() != b.dtype()) {
    kernel_fail(std::string(op) + ": " + a_name + " (" + std::string(scalar_type_name(a.dtype())) + ") and " +
                b_name + " (" + std::string(scalar_type_name(b.dtype())) + ") must have the same dtype");
  }
}

/// Reads integer index element `off` (physical offset) of a Long or Int tensor.
inline int64_t read_index(const Tensor& t, int64_t off) {
  return t.dtype() == ScalarType::Long ? t.data_as<const int64_t>()[off] : t.data_as<const int32_t>()[off];
}

/// Copies one element of `es` bytes.
inline void copy_element(char* dst, const char* src, size_t es) {
  switch (es) {
    case 1: *dst = *src; return;
    case 2: std::memcpy(dst, src, 2); return;
    case 4: std::memcpy(dst, src, 4); return;
    case 8: std::memcpy(dst, src, 8); return;
    default: std::memcpy(dst, src, es); return;
  }
}

/// Walks a shape in row-major order keeping a running offset for up to two stride sets.
struct Walker {
  int rank = 0;
  int64_t size[kMaxCopyRank] = {};
  int64_t stride_a[kMaxCopyRank] = {};
  int64_t stride_b[kMaxCopyRank] = {};
  int64_t idx[kMaxCopyRank] = {};
  int64_t off_a = 0, off_b = 0;

  void add(int64_t n, int64_t sa, int64_t sb) {
    if (rank >= kMaxCopyRank) kernel_fail("index: too many dims");
    size[rank] = n;
    stride_a[rank] = sa;
    stride_b[rank] = sb;
    ++rank;
  }
  /// Positions the walker at row-major element `linear`.
  void seek(int64_t linear) {
    off_a = off_b = 0;
    for (int d = rank - 1; d >= 0; --d) {
      idx[d] = linear % size[d];
      linear /= size[d];
      off_a += idx[d] * stride_a[d];
      off_b += idx[d] * stride_b[d];
    }
  }
  void next() {
    for (int d = rank - 1; d >= 0; --d) {
      if (++idx[d] < size[d]) {
        off_a += stride_a[d];
        off_b += stride_b[d];
        return;
      }
      off_a -= stride_a[d] * (size[d] - 1);
      off_b -= stride_b[d] * (size[d] - 1);
      idx[d] = 0;
    }
  }
};

// ---------------------------------------------------------------------------------------------------------
// Advanced indexing (index.Tensor, index_put)

struct DimIndex {
  int dim = 0;                   // the self dim this index addresses
  std::vector<int64_t> shape;    // the index tensor's shape (a mask contributes 1-D coordinates)
  std::vector<int64_t> values;   // row-major values, negative ones not yet wrapped
};

struct IndexPlan {
  std::vector<DimIndex> indices;  // in self-dim order
  std::vector<int64_t> bshape;    // broadcast shape of all index tensors
  int64_t bnumel = 1;
  bool indexed[kMaxTensorRank] = {};
  std::vector<int> pre_dims;      // self dims before the broadcast block in the result
  std::vector<int> post_dims;     // self dims after it
  std::vector<int64_t> result_shape;
};

/// Coordinates of the true elements of a mask (row-major), one vector per mask dim.
void mask_coordinates(const Tensor& mask, std::vector<std::vector<int64_t>>& coords) {
  const int rank = mask.dim();
  coords.assign(static_cast<size_t>(rank), {});
  if (mask.numel() == 0) return;
  const auto* data = static_cast<const uint8_t*>(mask.data());
  int64_t idx[kMaxTensorRank] = {};
  int64_t off = 0;
  for (int64_t n = 0; n < mask.numel(); ++n) {
    if (data[off] != 0) {
      for (int d = 0; d < rank; ++d) coords[d].push_back(idx[d]);
    }
    for (int d = rank - 1; d >= 0; --d) {
      if (++idx[d] < mask.size(d)) {
        off += mask.stride(d);
        break;
      }
      off -= mask.stride(d) * (mask.size(d) - 1);
      idx[d] = 0;
    }
  }
}

IndexPlan plan_index(const Tensor& self, const OptionalTensorListRef& list, const char* op) {
  IndexPlan plan;
  int d = 0;
  auto too_many = [&]() {
    kernel_fail(std::string(op) + ": too many indices for tensor of dimension " + str(self.dim()));
  };
  for (size_t k = 0; k < list.size(); ++k) {
    const Tensor* t = list[k];
    if (t == nullptr) {
      if (d >= self.dim()) too_many();
      ++d;
      continue;
    }
    if (t->dtype() == ScalarType::Bool || t->dtype() == ScalarType::Byte) {
      if (t->dim() == 0) kernel_fail(std::string(op) + ": 0-dim boolean indices are not supported");
      if (d + t->dim() > self.dim()) too_many();
      for (int j = 0; j < t->dim(); ++j) {
        if (t->size(j) != self.size(d + j)) {
          kernel_fail(std::string(op) + ": the shape of the mask " + shape_str(t->sizes()) + " at index " + str(j) +
                      " does not match the shape of the indexed tensor " + shape_str(self.sizes()) + " at index " +
                      str(d + j));
        }
      }
      std::vector<std::vector<int64_t>> coords;
      mask_coordinates(*t, coords);
      for (int j = 0; j < t->dim(); ++j) {
        DimIndex di;
        di.dim = d + j;
        di.shape = {static_cast<int64_t>(coords[j].size())};
        di.values = std::move(coords[j]);
        plan.indices.push_back(std::move(di));
      }
      d += t->dim();
      continue;
    }
    check_index_dtype(*t, op, true);
    if (d >= self.dim()) too_many();
    DimIndex di;
    di.dim = d;
    di.shape.assign(t->sizes().begin(), t->sizes().end());
    gather_as_int64(*t, di.values);
    plan.indices.push_back(std::move(di));
    ++d;
  }
  for (size_t k = 0; k < plan.indices.size(); ++k) {
    const DimIndex& di = plan.indices[k];
    plan.bshape = k == 0 ? di.shape : broadcast_shapes(plan.bshape, di.shape, op).to_vector();
    plan.indexed[di.dim] = true;
  }
  for (int64_t s : plan.bshape) plan.bnumel *= s;
  if (plan.indices.empty()) {
    // No index tensors: the result is self.
    for (int i = 0; i < self.dim(); ++i) plan.post_dims.push_back(i);
    plan.result_shape.assign(self.sizes().begin(), self.sizes().end());
    return plan;
  }
  // Validate (and wrap) every index value against its dim.
  for (DimIndex& di : plan.indices) {
    const int64_t size = self.size(di.dim);
    for (int64_t& v : di.values) {
      if (v < -size || v >= size) {
        kernel_fail(std::string(op) + ": index " + str(v) + " is out of bounds for dimension " + str(di.dim) +
                    " with size " + str(size));
      }
      if (v < 0) v += size;
    }
  }
  const int first = plan.indices.front().dim, last = plan.indices.back().dim;
  int count = 0;
  for (int i = 0; i < self.dim(); ++i) count += plan.indexed[i] ? 1 : 0;
  const bool adjacent = last - first + 1 == count;
  // Adjacent indexed dims are replaced in place by the broadcast shape; otherwise it goes first.
  for (int i = 0; i < self.dim(); ++i) {
    if (plan.indexed[i]) continue;
    if (adjacent && i < first) {
      plan.pre_dims.push_back(i);
    } else {
      plan.post_dims.push_back(i);
    }
  }
  for (int i : plan.pre_dims) plan.result_shape.push_back(self.size(i));
  plan.result_shape.insert(plan.result_shape.end(), plan.bshape.begin(), plan.bshape.end());
  for (int i : plan.post_dims) plan.result_shape.push_back(self.size(i));
  return plan;
}

/// offsets[b] = sum over index tensors of value(b) * strides[dim], for every broadcast position b.
std::vector<int64_t> index_offsets(const IndexPlan& plan, std::span<const int64_t> strides) {
  std::vector<int64_t> offsets(static_cast<size_t>(plan.bnumel), 0);
  if (plan.bnumel == 0) return offsets;
  const int brank = static_cast<int>(plan.bshape.size());
  for (const DimIndex& di : plan.indices) {
    // Strides of this index's row-major values seen from the broadcast shape.
    Walker w;
    const int lead = brank - static_cast<int>(di.shape.size());
    int64_t own[kMaxCopyRank] = {};
    int64_t running = 1;
    for (int k = static_cast<int>(di.shape.size()) - 1; k >= 0; --k) {
      own[k] = running;
      running *= di.shape[k];
    }
    for (int k = 0; k < brank; ++k) {
      const int j = k - lead;
      const int64_t s = (j < 0 || di.shape[j] == 1) ? 0 : own[j];
      w.add(plan.bshape[k], s, 0);
    }
    const int64_t stride = strides[di.dim];
    for (int64_t b = 0; b < plan.bnumel; ++b, w.next()) offsets[b] += di.values[w.off_a] * stride;
  }
  return offsets;
}

/// A contiguous run check: the dims (in order) of a tensor with these strides form one row-major block.
bool dims_contiguous(const std::vector<int>& dims, const Tensor& t, const std::vector<int>& positions) {
  int64_t expect = 1;
  for (size_t k = dims.size(); k-- > 0;) {
    const int d = positions[k];
    if (t.size(d) != 1 && t.stride(d) != expect) return false;
    expect *= t.size(d);
  }
  return true;
}

void index_tensor_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "index.Tensor_out";
  const Tensor& self = tensor_arg(args, 0);
  Tensor& out = tensor_arg(args, 2);
  check_same_dtypes(self, "self", out, "out", op);
  const IndexPlan plan = plan_index(self, args[1]->to_optional_tensor_list(), op);
  resize_output(out, plan.result_shape, op);
  if (out.numel() == 0) return;
  const std::vector<int64_t> offsets = index_offsets(plan, self.strides());
  const int npre = static_cast<int>(plan.pre_dims.size());
  const int brank = static_cast<int>(plan.bshape.size());

  // Outer walk over (pre dims, broadcast dims): a = out offset, b = self offset of the pre dims.
  Walker outer;
  for (int k = 0; k < npre; ++k) outer.add(self.size(plan.pre_dims[k]), out.stride(k), self.stride(plan.pre_dims[k]));
  for (int k = 0; k < brank; ++k) outer.add(plan.bshape[k], out.stride(npre + k), 0);
  // Inner block over the post dims.
  std::vector<int64_t> post_shape, post_out, post_self;
  std::vector<int> out_positions;
  int64_t post_numel = 1;
  for (size_t k = 0; k < plan.post_dims.size(); ++k) {
    const int d = plan.post_dims[k];
    post_shape.push_back(self.size(d));
    post_self.push_back(self.stride(d));
    post_out.push_back(out.stride(npre + brank + static_cast<int>(k)));
    out_positions.push_back(npre + brank + static_cast<int>(k));
    post_numel *= self.size(d);
  }
  const bool flat_post = dims_contiguous(plan.post_dims, self, plan.post_dims) &&
                         dims_contiguous(plan.post_dims, out, out_positions);
  const size_t es = self.element_size();
  const int64_t outer_numel = out.numel() / std::max<int64_t>(post_numel, 1);
  const int64_t bnumel = std::max<int64_t>(plan.bnumel, 1);

  auto body = [&](size_t begin, size_t end) {
    Walker w = outer;
    w.seek(static_cast<int64_t>(begin));
    for (size_t o = begin; o < end; ++o, w.next()) {
      const int64_t b = static_cast<int64_t>(o) % bnumel;
      char* dst = elem_ptr(out, w.off_a);
      const char* src = elem_ptr(self, w.off_b + offsets[b]);
      if (post_numel == 1) {
        copy_element(dst, src, es);
      } else if (flat_post) {
        std::memmove(dst, src, static_cast<size_t>(post_numel) * es);
      } else {
        strided_copy(dst, out.dtype(), post_out.data(), src, self.dtype(), post_self.data(), post_shape, false);
      }
    }
  };
  if (out.nbytes() >= (size_t(1) << 20)) {
    ThreadPool::global().parallel_for(static_cast<size_t>(outer_numel),
                                      static_cast<size_t>(std::max<int64_t>(1, 16384 / std::max<int64_t>(post_numel, 1))),
                                      body);
  } else {
    body(0, static_cast<size_t>(outer_numel));
  }
}

template <typename T>
inline void accumulate_element(char* dst, const char* src) {
  T a, b;
  std::memcpy(&a, dst, sizeof(T));
  std::memcpy(&b, src, sizeof(T));
  T r;
  if constexpr (std::is_same_v<T, bool>) {
    r = a || b;
  } else {
    r = static_cast<T>(static_cast<OpMath<T>>(a) + static_cast<OpMath<T>>(b));
  }
  std::memcpy(dst, &r, sizeof(T));
}

void index_put_impl(Tensor& out, const Tensor& self, const OptionalTensorListRef& list, const Tensor& values,
                    bool accumulate, const char* op) {
  check_same_dtypes(self, "self", values, "values", op);
  check_same_dtypes(self, "self", out, "out", op);
  const IndexPlan plan = plan_index(self, list, op);
  // values must broadcast to the indexing result.
  const auto& rs = plan.result_shape;
  bool ok = values.dim() <= static_cast<int>(rs.size());
  for (int d = 0; ok && d < values.dim(); ++d) {
    const int64_t target = rs[rs.size() - static_cast<size_t>(values.dim()) + static_cast<size_t>(d)];
    ok = values.size(d) == 1 || values.size(d) == target;
  }
  if (!ok) {
    kernel_fail(std::string(op) + ": shape mismatch: value tensor of shape " + shape_str(values.sizes()) +
                " cannot be broadcast to indexing result of shape " + shape_str(rs));
  }
  resize_output(out, self.sizes(), op);
  copy_same_shape(out, self, op);  // no-op when out is self
  if (numel_of(rs) == 0) return;
  const std::vector<int64_t> offsets = index_offsets(plan, out.strides());
  const auto vstrides = broadcast_strides(values, rs);
  const int npre = static_cast<int>(plan.pre_dims.size());
  const int brank = static_cast<int>(plan.bshape.size());
  Walker w;  // a = values offset, b = out offset of the pre dims
  for (int k = 0; k < npre; ++k) w.add(rs[k], vstrides[k], out.stride(plan.pre_dims[k]));
  for (int k = 0; k < brank; ++k) w.add(plan.bshape[k], vstrides[npre + k], 0);
  std::vector<int64_t> post_shape, post_out, post_val;
  std::vector<int> out_positions;
  int64_t post_numel = 1;
  for (size_t k = 0; k < plan.post_dims.size(); ++k) {
    const int d = plan.post_dims[k];
    post_shape.push_back(out.size(d));
    post_out.push_back(out.stride(d));
    post_val.push_back(vstrides[npre + brank + k]);
    post_numel *= out.size(d);
  }
  // values' post dims are a flat run when their broadcast strides are row-major.
  bool flat_post = dims_contiguous(plan.post_dims, out, plan.post_dims);
  {
    int64_t expect = 1;
    for (size_t k = post_shape.size(); k-- > 0;) {
      if (post_shape[k] != 1 && post_val[k] != expect) flat_post = false;
      expect *= post_shape[k];
    }
  }
  const size_t es = out.element_size();
  const int64_t outer_numel = numel_of(rs) / post_numel;
  const int64_t bnumel = std::max<int64_t>(plan.bnumel, 1);
  w.seek(0);
  if (!accumulate) {
    for (int64_t o = 0; o < outer_numel; ++o, w.next()) {
      char* dst = elem_ptr(out, w.off_b + offsets[o % bnumel]);
      const char* src = elem_ptr(values, w.off_a);
      if (post_numel == 1) {
        copy_element(dst, src, es);
      } else if (flat_post) {
        std::memmove(dst, src, static_cast<size_t>(post_numel) * es);
      } else {
        strided_copy(dst, out.dtype(), post_out.data(), src, values.dtype(), post_val.data(), post_shape, false);
      }
    }
    return;
  }
  dispatch(out.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    Walker inner;
    for (size_t k = 0; k < post_shape.size(); ++k) inner.add(post_shape[k], post_out[k], post_val[k]);
    for (int64_t o = 0; o < outer_numel; ++o, w.next()) {
      char* dst = elem_ptr(out, w.off_b + offsets[o % bnumel]);
      const char* src = elem_ptr(values, w.off_a);
      inner.seek(0);
      for (int64_t i = 0; i < post_numel; ++i, inner.next()) {
        accumulate_element<T>(dst + inner.off_a * static_cast<int64_t>(sizeof(T)),
                              src + inner.off_b * static_cast<int64_t>(sizeof(T)));
      }
    }
  });
}

void index_put_out(KernelContext&, KernelArgs args) {
  index_put_impl(tensor_arg(args, 4), tensor_arg(args, 0), args[1]->to_optional_tensor_list(), tensor_arg(args, 2),
                 args[3]->to_bool(), "index_put.out");
}

void index_put_inplace(KernelContext&, KernelArgs args) {
  Tensor& self = tensor_arg(args, 0);
  index_put_impl(self, self, args[1]->to_optional_tensor_list(), tensor_arg(args, 2), args[3]->to_bool(),
                 "index_put_");
  if (args[4]->is_tensor()) {
    Tensor& ret = args[4]->to_tensor();
    if (&ret != &self && ret.data() != self.data()) {
      resize_output(ret, self.sizes(), "index_put_");
      copy_same_shape(ret, self, "index_put_");
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// index_select, embedding

void index_select_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "index_select.out";
  const Tensor& self = tensor_arg(args, 0);
  const Tensor& index = tensor_arg(args, 2);
  Tensor& out = tensor_arg(args, 3);
  check_same_dtypes(self, "self", out, "out", op);
  check_index_dtype(index, op);
  if (index.dim() > 1) kernel_fail(std::string(op) + ": index should have dimension 1 or 0, got " + str(index.dim()));
  const int dim = static_cast<int>(normalize_dim(args[1]->to_int(), self.dim(), op));
  std::vector<int64_t> idx;
  gather_as_int64(index, idx);
  const int64_t dim_size = self.dim() == 0 ? 1 : self.size(dim);
  for (int64_t v : idx) {
    if (v < 0 || v >= dim_size) {
      kernel_fail(std::string(op) + ": index " + str(v) + " is out of range for dimension " + str(dim) + " with size " +
                  str(dim_size));
    }
  }
  if (self.dim() == 0) {
    if (idx.size() != 1) kernel_fail(std::string(op) + ": index_select() of a 0-dim tensor needs exactly one index");
    resize_output(out, self.sizes(), op);
    copy_same_shape(out, self, op);
    return;
  }
  std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end());
  shape[dim] = static_cast<int64_t>(idx.size());
  resize_output(out, shape, op);
  if (out.numel() == 0) return;
  std::vector<int64_t> slab_shape, slab_out, slab_self;
  for (int d = 0; d < self.dim(); ++d) {
    if (d == dim) continue;
    slab_shape.push_back(self.size(d));
    slab_out.push_back(out.stride(d));
    slab_self.push_back(self.stride(d));
  }
  for (size_t k = 0; k < idx.size(); ++k) {
    strided_copy(elem_ptr(out, static_cast<int64_t>(k) * out.stride(dim)), out.dtype(), slab_out.data(),
                 elem_ptr(self, idx[k] * self.stride(dim)), self.dtype(), slab_self.data(), slab_shape);
  }
}

void embedding_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "embedding.out";
  const Tensor& weight = tensor_arg(args, 0);
  const Tensor& indices = tensor_arg(args, 1);
  Tensor& out = tensor_arg(args, 5);
  if (weight.dim() != 2) kernel_fail(std::string(op) + ": weight must be 2-D, got rank " + str(weight.dim()));
  check_index_dtype(indices, op);
  check_same_dtypes(weight, "weight", out, "out", op);
  std::vector<int64_t> shape(indices.sizes().begin(), indices.sizes().end());
  shape.push_back(weight.size(1));
  if (shape.size() > static_cast<size_t>(kMaxTensorRank)) kernel_fail(std::string(op) + ": output rank too large");
  std::vector<int64_t> idx;
  gather_as_int64(indices, idx);
  const int64_t rows = weight.size(0), dim = weight.size(1);
  for (int64_t v : idx) {
    if (v < 0 || v >= rows) {
      kernel_fail(std::string(op) + ": index " + str(v) + " is out of range for an embedding table of " + str(rows) +
                  " rows");
    }
  }
  resize_output(out, shape, op);
  if (out.numel() == 0) return;
  const size_t es = weight.element_size();
  const int r = indices.dim();
  const bool fast = out.is_contiguous_order() && weight.stride(1) == 1;
  Walker w;  // out offsets of the index dims
  for (int d = 0; d < r; ++d) w.add(indices.size(d), out.stride(d), 0);
  const int64_t out_inner = out.stride(r);
  const int64_t wi = weight.stride(1);
  for (size_t k = 0; k < idx.size(); ++k, w.next()) {
    char* dst = elem_ptr(out, w.off_a);
    const char* src = elem_ptr(weight, idx[k] * weight.stride(0));
    if (fast) {
      std::memmove(dst, src, static_cast<size_t>(dim) * es);
    } else {
      const int64_t shape1[1] = {dim};
      strided_copy(dst, out.dtype(), &out_inner, src, weight.dtype(), &wi, shape1, false);
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// gather / scatter

/// ATen treats 0-d tensors as 1-element 1-d ones here.
int64_t size_nonempty(const Tensor& t, int d) { return t.dim() == 0 ? 1 : t.size(d); }
int64_t stride_nonempty(const Tensor& t, int d) { return t.dim() == 0 ? 1 : t.stride(d); }
int rank_nonempty(const Tensor& t) { return t.dim() == 0 ? 1 : t.dim(); }

void gather_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "gather.out";
  const Tensor& self = tensor_arg(args, 0);
  const Tensor& index = tensor_arg(args, 2);
  Tensor& out = tensor_arg(args, 4);
  check_same_dtypes(self, "self", out, "out", op);
  check_index_dtype(index, op);
  const int dim = static_cast<int>(normalize_dim(args[1]->to_int(), self.dim(), op));
  if (index.numel() != 0 && rank_nonempty(index) != rank_nonempty(self)) {
    kernel_fail(std::string(op) + ": index tensor must have the same number of dimensions as input tensor");
  }
  for (int d = 0; index.numel() != 0 && d < rank_nonempty(self); ++d) {
    if (d != dim && size_nonempty(index, d) > size_nonempty(self, d)) {
      kernel_fail(std::string(op) + ": size does not match at dimension " + str(d) + " expected index " +
                  shape_str(index.sizes()) + " to be smaller than self " + shape_str(self.sizes()) +
                  " apart from dimension " + str(dim));
    }
  }
  resize_output(out, index.sizes(), op);
  if (index.numel() == 0) return;
  const int64_t bound = size_nonempty(self, dim);
  const int64_t dim_stride = stride_nonempty(self, dim);
  std::vector<int64_t> self_strides(index.sizes().size(), 0);
  for (int d = 0; d < index.dim(); ++d) self_strides[d] = (d == dim || self.dim() == 0) ? 0 : self.stride(d);
  const size_t es = self.element_size();
  const std::array<const int64_t*, 3> strides = {out.strides().data(), index.strides().data(), self_strides.data()};
  for_each_index<3>(index.sizes(), strides, [&](const std::array<int64_t, 3>& o) {
    const int64_t v = read_index(index, o[1]);
    if (v < 0 || v >= bound) {
      kernel_fail(std::string(op) + ": index " + str(v) + " is out of bounds for dimension " + str(dim) +
                  " with size " + str(bound));
    }
    copy_element(elem_ptr(out, o[0]), elem_ptr(self, o[2] + v * dim_stride), es);
  });
}

enum class ScatterMode { Src, Value, Add };

void scatter_impl(KernelArgs args, ScatterMode mode, const char* op) {
  const Tensor& self = tensor_arg(args, 0);
  const Tensor& index = tensor_arg(args, 2);
  Tensor& out = tensor_arg(args, 4);
  check_same_dtypes(self, "self", out, "out", op);
  check_index_dtype(index, op);
  const int dim = static_cast<int>(normalize_dim(args[1]->to_int(), self.dim(), op));
  const Tensor* src = mode == ScatterMode::Value ? nullptr : &tensor_arg(args, 3);
  if (src != nullptr) check_same_dtypes(self, "self", *src, "src", op);
  if (index.numel() != 0) {
    if (rank_nonempty(index) != rank_nonempty(self) || (src != nullptr && rank_nonempty(*src) != rank_nonempty(self))) {
      kernel_fail(std::string(op) + ": index tensor must have the same number of dimensions as self and src");
    }
    for (int d = 0; d < rank_nonempty(self); ++d) {
      const int64_t is = size_nonempty(index, d);
      if ((d != dim && is > size_nonempty(self, d)) || (src != nullptr && is > size_nonempty(*src, d))) {
        kernel_fail(std::string(op) + ": expected index " + shape_str(index.sizes()) + " to be smaller than self " +
                    shape_str(self.sizes()) + " apart from dimension " + str(dim) +
                    (src != nullptr ? " and to be smaller size than src " + shape_str(src->sizes()) : std::string()));
      }
    }
  }
  resize_output(out, self.sizes(), op);
  copy_same_shape(out, self, op);
  if (index.numel() == 0) return;
  // Validate every index first so that a bad one leaves no partial update behind.
  const int64_t bound = size_nonempty(out, dim);
  const int64_t dim_stride = stride_nonempty(out, dim);
  std::vector<int64_t> out_strides(index.sizes().size());
  for (int d = 0; d < index.dim(); ++d) out_strides[d] = (d == dim || out.dim() == 0) ? 0 : out.stride(d);
  // (a 0-d src or out is addressed like a 1-element 1-d tensor)
  std::vector<int64_t> src_strides(index.sizes().size(), 0);
  for (int d = 0; src != nullptr && d < index.dim(); ++d) src_strides[d] = src->dim() == 0 ? 0 : src->stride(d);
  const std::array<const int64_t*, 3> strides = {index.strides().data(), src_strides.data(), out_strides.data()};
  for_each_index<3>(index.sizes(), strides, [&](const std::array<int64_t, 3>& o) {
    const int64_t v = read_index(index, o[0]);
    if (v < 0 || v >= bound) {
      kernel_fail(std::string(op) + ": index " + str(v) + " is out of bounds for dimension " + str(dim) +
                  " with size " + str(bound));
    }
  });
  dispatch(out.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    T value{};
    if (mode == ScatterMode::Value) value = scalar_to<T>(args[3]->to_scalar(), op);
    T* o_data = out.data_as<T>();
    const T* s_data = src != nullptr ? src->data_as<const T>() : nullptr;
    for_each_index<3>(index.sizes(), strides, [&](const std::array<int64_t, 3>& o) {
      const int64_t v = read_index(index, o[0]);
      T& dst = o_data[o[2] + v * dim_stride];
      switch (mode) {
        case ScatterMode::Src: dst = s_data[o[1]]; break;
        case ScatterMode::Value: dst = value; break;
        case ScatterMode::Add:
          if constexpr (std::is_same_v<T, bool>) {
            dst = dst || s_data[o[1]];
          } else {
            dst = static_cast<T>(static_cast<OpMath<T>>(dst) + static_cast<OpMath<T>>(s_data[o[1]]));
          }
          break;
      }
    });
  });
}

void scatter_src_out(KernelContext&, KernelArgs args) { scatter_impl(args, ScatterMode::Src, "scatter.src_out"); }
void scatter_value_out(KernelContext&, KernelArgs args) { scatter_impl(args, ScatterMode::Value, "scatter.value_out"); }
void scatter_add_out(KernelContext&, KernelArgs args) { scatter_impl(args, ScatterMode::Add, "scatter_add.out"); }

// ---------------------------------------------------------------------------------------------------------
// masks

void check_bool_mask(const Tensor& mask, const char* op) {
  if (mask.dtype() != ScalarType::Bool) {
    kernel_fail(std::string(op) + ": expected mask to be a bool tensor, got " + std::string(scalar_type_name(mask.dtype())));
  }
}

void masked_scatter_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "masked_scatter.out";
  const Tensor& self = tensor_arg(args, 0);
  const Tensor& mask = tensor_arg(args, 1);
  const Tensor& source = tensor_arg(args, 2);
  Tensor& out = tensor_arg(args, 3);
  check_bool_mask(mask, op);
  check_same_dtypes(self, "self", source, "source", op);
  check_same_dtypes(self, "self", out, "out", op);
  const auto shape = broadcast_shapes(self.sizes(), mask.sizes(), op);
  resize_output(out, shape, op);
  if (out.numel() == 0) return;
  // source is consumed in its row-major order.
  std::vector<unsigned char> src_flat(static_cast<size_t>(source.numel()) * source.element_size());
  if (!src_flat.empty()) {
    std::vector<int64_t> cs(static_cast<size_t>(source.dim()));
    contiguous_strides(source.sizes(), cs.data());
    strided_copy(src_flat.data(), source.dtype(), cs.data(), source.data(), source.dtype(), source.strides().data(),
                 source.sizes(), false);
  }
  const auto self_s = broadcast_strides(self, shape);
  const auto mask_s = broadcast_strides(mask, shape);
  const std::array<const int64_t*, 3> strides = {out.strides().data(), self_s.data(), mask_s.data()};
  const auto* mask_data = static_cast<const uint8_t*>(mask.data());
  const size_t es = out.element_size();
  int64_t used = 0;
  const int64_t available = source.numel();
  // Count first: ATen rejects a source with fewer elements than the mask has true values.
  for_each_index<3>(shape, strides, [&](const std::array<int64_t, 3>& o) { used += mask_data[o[2]] != 0; });
  if (used > available) {
    kernel_fail(std::string(op) + ": number of elements of source (" + str(available) +
                ") < number of ones in mask (" + str(used) + ")");
  }
  int64_t k = 0;
  for_each_index<3>(shape, strides, [&](const std::array<int64_t, 3>& o) {
    const char* src = mask_data[o[2]] != 0 ? reinterpret_cast<const char*>(src_flat.data()) + (k++) * static_cast<int64_t>(es)
                                           : elem_ptr(self, o[1]);
    copy_element(elem_ptr(out, o[0]), src, es);
  });
}

void masked_select_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "masked_select.out";
  const Tensor& self = tensor_arg(args, 0);
  const Tensor& mask = tensor_arg(args, 1);
  Tensor& out = tensor_arg(args, 2);
  check_bool_mask(mask, op);
  check_same_dtypes(self, "self", out, "out", op);
  const auto shape = broadcast_shapes(self.sizes(), mask.sizes(), op);
  const auto self_s = broadcast_strides(self, shape);
  const auto mask_s = broadcast_strides(mask, shape);
  const std::array<const int64_t*, 2> strides = {self_s.data(), mask_s.data()};
  const auto* mask_data = static_cast<const uint8_t*>(mask.data());
  int64_t count = 0;
  for_each_index<2>(shape, strides, [&](const std::array<int64_t, 2>& o) { count += mask_data[o[1]] != 0; });
  resize_output(out, {count}, op);
  if (count == 0) return;
  const size_t es = out.element_size();
  const int64_t ostride = out.stride(0);
  int64_t k = 0;
  for_each_index<2>(shape, strides, [&](const std::array<int64_t, 2>& o) {
    if (mask_data[o[1]] != 0) copy_element(elem_ptr(out, (k++) * ostride), elem_ptr(self, o[0]), es);
  });
}

void nonzero_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "nonzero.out";
  const Tensor& self = tensor_arg(args, 0);
  Tensor& out = tensor_arg(args, 1);
  if (out.dtype() != ScalarType::Long) {
    kernel_fail(std::string(op) + ": out must be int64, got " + std::string(scalar_type_name(out.dtype())));
  }
  const int rank = self.dim();
  std::vector<uint8_t> nz(static_cast<size_t>(self.numel()));
  dispatch(self.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* data = self.data_as<const T>();
    int64_t i = 0;
    const std::array<const int64_t*, 1> strides = {self.strides().data()};
    for_each_index<1>(self.sizes(), strides, [&](const std::array<int64_t, 1>& o) {
      nz[static_cast<size_t>(i++)] = static_cast<OpMath<T>>(data[o[0]]) != OpMath<T>(0);
    });
  });
  int64_t count = 0;
  for (uint8_t v : nz) count += v;
  resize_output(out, {count, rank}, op);
  if (count == 0 || rank == 0) return;
  int64_t* o = out.data_as<int64_t>();
  const int64_t s0 = out.stride(0), s1 = out.stride(1);
  int64_t idx[kMaxTensorRank] = {};
  int64_t row = 0;
  for (size_t n = 0; n < nz.size(); ++n) {
    if (nz[n]) {
      for (int d = 0; d < rank; ++d) o[row * s0 + d * s1] = idx[d];
      ++row;
    }
    for (int d = rank - 1; d >= 0; --d) {
      if (++idx[d] < self.size(d)) break;
      idx[d] = 0;
    }
  }
}

}  // namespace

void register_index_kernels(KernelRegistry& registry) {
  registry.add("aten::index.Tensor_out", 4, index_tensor_out);
  registry.add("aten::index_put.out", 6, index_put_out);
  registry.add("aten::index_put_", 5, index_put_inplace);
  registry.add("aten::index_select.out", 5, index_select_out);
  registry.add("aten::embedding.out", 7, embedding_out);
  registry.add("aten::gather.out", 6, gather_out);
  registry.add("aten::scatter.src_out", 6, scatter_src_out);
  registry.add("aten::scatter.value_out", 6, scatter_value_out);
  registry.add("aten::scatter_add.out", 6, scatter_add_out);
  registry.add("aten::masked_scatter.out", 5, masked_scatter_out);
  registry.add("aten::masked_select.out", 4, masked_select_out);
  registry.add("aten::nonzero.out", 3, nonzero_out);
}

}  // namespace etnp::kernels
