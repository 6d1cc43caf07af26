// Data-movement kernels: views materialized as copies (view, permute, expand, slice, select, ...), layout and
// dtype conversions (clone, _to_copy, the dim_order ops), joins and splits (cat, stack, split, unbind),
// scatters into slices, and rearrangements (pixel_shuffle, flip, roll, repeat, tril).
//
// Most kernels describe the source as a strided view of the input (sizes + element strides + a start
// offset) and hand it with the output's strides to strided_copy, which merges contiguous dims into memcpy
// runs, tiles transposes and converts dtypes. Every output is resized before it is written.
#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "compute/copy_util.h"
#include "kernels/kernel_util.h"
#include "kernels/register.h"

namespace etnp::kernels {
namespace {

Tensor& tensor_arg(KernelArgs args, size_t i) { return args[i]->to_tensor(); }

std::optional<int64_t> optional_int(const EValue* v) {
  if (v->is_none()) return std::nullopt;
  return v->to_int();
}

char* elem_ptr(const Tensor& t, int64_t offset) {
  return static_cast<char*>(t.data()) + offset * static_cast<int64_t>(t.element_size());
}

/// A strided block: per dim its size, the destination stride and the source stride.
struct Block {
  int rank = 0;
  // Only [0, rank) is ever written or read (see CopyPlan).
  int64_t size[kMaxCopyRank];
  int64_t dst[kMaxCopyRank];
  int64_t src[kMaxCopyRank];

  void add(int64_t n, int64_t dst_stride, int64_t src_stride) {
    if (rank >= kMaxCopyRank) kernel_fail("copy: too many dims");
    size[rank] = n;
    dst[rank] = dst_stride;
    src[rank] = src_stride;
    ++rank;
  }
};

/// out[out_offset + block] = self[self_offset + block].
void copy_block(Tensor& out, int64_t out_offset, const Tensor& self, int64_t self_offset, const Block& b) {
  strided_copy(elem_ptr(out, out_offset), out.dtype(), b.dst, elem_ptr(self, self_offset), self.dtype(), b.src,
               std::span<const int64_t>(b.size, static_cast<size_t>(b.rank)));
}

/// Block whose destination is all of `out` (its dims in order) and whose source strides are given per dim.
Block block_over(const Tensor& out, std::span<const int64_t> src_strides) {
  Block b;
  for (int d = 0; d < out.dim(); ++d) b.add(out.size(d), out.stride(d), src_strides[d]);
  return b;
}

/// An int list argument's values: inline up to 16 of them (dims, sizes and shapes: nearly every call, without a
/// heap allocation), on the heap beyond.
class IntArgs {
 public:
  explicit IntArgs(const EValue* v) {
    const IntListRef list = v->to_int_list();
    size_ = list.size();
    if (size_ > kInline) heap_.resize(size_);
    int64_t* p = data();
    for (size_t i = 0; i < size_; ++i) p[i] = list[i];
  }
  IntArgs(const IntArgs&) = delete;
  IntArgs& operator=(const IntArgs&) = delete;

  int64_t* data() { return size_ > kInline ? heap_.data() : inline_; }
  const int64_t* data() const { return size_ > kInline ? heap_.data() : inline_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int64_t operator[](size_t i) const { return data()[i]; }
  int64_t& operator[](size_t i) { return data()[i]; }
  const int64_t* begin() const { return data(); }
  const int64_t* end() const { return data() + size_; }
  operator std::span<const int64_t>() const { return {data(), size_}; }

 private:
  static constexpr size_t kInline = 16;
  size_t size_ = 0;
  int64_t inline_[kInline];
  std::vector<int64_t> heap_;
};

IntArgs int_list(const EValue* v) { return IntArgs(v); }

std::string list_str(std::span<const int64_t> v) { return shape_str(v); }

// ---------------------------------------------------------------------------------------------------------
// view / reshape family

/// Resolves a view size list (one -1 allowed) against numel, as ATen's infer_size.
/// Resolves in place.
void infer_view_size(IntArgs& size, int64_t numel, const char* op) {
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < size.size(); ++i) {
    if (size[i] == -1) {
      if (infer >= 0) kernel_fail(std::string(op) + ": only one dimension can be inferred in " + list_str(size));
      infer = static_cast<int>(i);
    } else if (size[i] < 0) {
      kernel_fail(std::string(op) + ": invalid shape dimension " + std::to_string(size[i]) + " in " + list_str(size));
    } else if (__builtin_mul_overflow(known, size[i], &known)) {
      kernel_fail(std::string(op) + ": shape " + list_str(size) + " is too large");
    }
  }
  if (infer >= 0) {
    if (known == 0) {
      kernel_fail(std::string(op) + ": cannot reshape a tensor of " + std::to_string(numel) + " elements into " +
                  list_str(size) + " because the unspecified dimension can be any value");
    }
    if (numel % known != 0) {
      kernel_fail(std::string(op) + ": shape " + list_str(size) + " is invalid for input of size " + std::to_string(numel));
    }
    size[static_cast<size_t>(infer)] = numel / known;
  } else if (known != numel) {
    kernel_fail(std::string(op) + ": shape " + list_str(size) + " is invalid for input of size " + std::to_string(numel));
  }
}

void view_copy_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "view_copy.out";
  const Tensor& self = tensor_arg(args, 0);
  Tensor& out = tensor_arg(args, 2);
  IntArgs size(args[1]);
  infer_view_size(size, self.numel(), op);
  resize_output(out, size, op);
  copy_flat(out, self, op);
}

void squeeze_dims(const Tensor& self, Tensor& out, std::span<const int64_t> dims, const char* op) {
  bool squeeze[kMaxTensorRank] = {};
  for (int64_t d : dims) {
    const int64_t nd = normalize_dim(d, self.dim(), op);
    if (self.dim() > 0 && self.size(static_cast<int>(nd)) == 1) squeeze[nd] = true;
  }
  InlineShape shape;
  for (int d = 0; d < self.dim(); ++d) {
    if (!squeeze[d]) shape.dims[shape.rank++] = self.size(d);
  }
  resize_output(out, shape, op);
  copy_flat(out, self, op);
}

void squeeze_copy_dim_out(KernelContext&, KernelArgs args) {
  const int64_t dim[1] = {args[1]->to_int()};
  squeeze_dims(tensor_arg(args, 0), tensor_arg(args, 2), dim, "squeeze_copy.dim_out");
}

void squeeze_copy_dims_out(KernelContext&, KernelArgs args) {
  squeeze_dims(tensor_arg(args, 0), tensor_arg(args, 2), int_list(args[1]), "squeeze_copy.dims_out");
}

void unsqueeze_copy_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "unsqueeze_copy.out";
  const Tensor& self = tensor_arg(args, 0);
  Tensor& out = tensor_arg(args, 2);
  const int64_t dim = normalize_dim(args[1]->to_int(), self.dim() + 1, op);
  ETNP_KERNEL_CHECK(self.dim() < kMaxTensorRank, op << ": a rank-" << self.dim() << " input has no room for a dim");
  InlineShape shape = InlineShape::of(self.sizes());
  std::copy_backward(shape.dims.begin() + dim, shape.dims.begin() + static_cast<ptrdiff_t>(shape.rank),
                     shape.dims.begin() + static_cast<ptrdiff_t>(shape.rank) + 1);
  shape.dims[static_cast<size_t>(dim)] = 1;
  ++shape.rank;
  resize_output(out, shape, op);
  copy_flat(out, self, op);
}

// ---------------------------------------------------------------------------------------------------------
// permutations

void permute_into(const Tensor& self, Tensor& out, std::span<const int64_t> dims, const char* op) {
  if (static_cast<int>(dims.size()) != self.dim()) {
    kernel_fail(std::string(op) + ": dims " + list_str(dims) + " do not match a rank-" + std::to_string(self.dim()) +
                " input");
  }
  bool seen[kMaxTensorRank] = {};
  int64_t shape[kMaxTensorRank] = {};
  int64_t src_strides[kMaxTensorRank] = {};
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = normalize_dim(dims[i], self.dim(), op);
    if (self.dim() > 0 && seen[d]) kernel_fail(std::string(op) + ": repeated dim in " + list_str(dims));
    if (self.dim() == 0) continue;
    seen[d] = true;
    shape[i] = self.size(static_cast<int>(d));
    src_strides[i] = self.stride(static_cast<int>(d));
  }
  resize_output(out, std::span<const int64_t>(shape, dims.size()), op);
  copy_block(out, 0, self, 0, block_over(out, std::span<const int64_t>(src_strides, dims.size())));
}

void permute_copy_out(KernelContext&, KernelArgs args) {
  permute_into(tensor_arg(args, 0), tensor_arg(args, 2), int_list(args[1]), "permute_copy.out");
}

void transpose_into(const Tensor& self, Tensor& out, int64_t dim0, int64_t dim1, const char* op) {
  const int64_t a = normalize_dim(dim0, self.dim(), op), b = normalize_dim(dim1, self.dim(), op);
  std::vector<int64_t> dims(static_cast<size_t>(self.dim()));
  for (int i = 0; i < self.dim(); ++i) dims[i] = i;
  if (self.dim() > 0) std::swap(dims[a], dims[b]);
  permute_into(self, out, dims, op);
}

void transpose_copy_int_out(KernelContext&, KernelArgs args) {
  transpose_into(tensor_arg(args, 0), tensor_arg(args, 3), args[1]->to_int(), args[2]->to_int(),
                 "transpose_copy.int_out");
}

void t_copy_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "t_copy.out";
  const Tensor& self = tensor_arg(args, 0);
  if (self.dim() > 2) {
    kernel_fail(std::string(op) + ": expects a tensor with <= 2 dimensions, got " + std::to_string(self.dim()));
  }
  transpose_into(self, tensor_arg(args, 1), 0, self.dim() < 2 ? 0 : 1, op);
}

// ---------------------------------------------------------------------------------------------------------
// expand

void expand_copy_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "expand_copy.out";
  const Tensor& self = tensor_arg(args, 0);
  Tensor& out = tensor_arg(args, 3);
  const auto size = int_list(args[1]);
  const int rank = static_cast<int>(size.size());
  if (rank < self.dim()) {
    kernel_fail(std::string(op) + ": the number of sizes provided (" + std::to_string(rank) +
                ") must be greater or equal to the number of dimensions in the tensor (" +
                std::to_string(self.dim()) + ")");
  }
  if (rank > kMaxTensorRank) kernel_fail(std::string(op) + ": rank " + std::to_string(rank) + " is too large");
  std::vector<int64_t> shape(static_cast<size_t>(rank));
  int64_t src_strides[kMaxTensorRank] = {};
  const int lead = rank - self.dim();
  for (int i = 0; i < rank; ++i) {
    const int64_t want = size[i];
    if (i < lead) {
      if (want < 0) {
        kernel_fail(std::string(op) + ": the expanded size of the tensor (" + std::to_string(want) +
                    ") isn't allowed in a leading, non-existing dimension " + std::to_string(i));
      }
      shape[i] = want;
      src_strides[i] = 0;
      continue;
    }
    const int d = i - lead;
    const int64_t have = self.size(d);
    if (want == -1) {
      shape[i] = have;
      src_strides[i] = self.stride(d);
    } else if (have == want) {
      shape[i] = have;
      src_strides[i] = self.stride(d);
    } else if (have == 1 && want >= 0) {
      shape[i] = want;
      src_strides[i] = 0;
    } else {
      kernel_fail(std::string(op) + ": the expanded size of the tensor (" + std::to_string(want) +
                  ") must match the existing size (" + std::to_string(have) + ") at non-singleton dimension " +
                  std::to_string(i) + ". Target sizes: " + list_str(size) + ". Tensor sizes: " +
                  shape_str(self.sizes()));
    }
  }
  resize_output(out, shape, op);
  copy_block(out, 0, self, 0, block_over(out, std::span<const int64_t>(src_strides, static_cast<size_t>(rank))));
}

// ---------------------------------------------------------------------------------------------------------
// plain copies and layout / dtype conversions

void copy_into_resized(const Tensor& self, Tensor& out, const char* op) {
  resize_output(out, self.sizes(), op);
  copy_same_shape(out, self, op);
}

void alias_copy_out(KernelContext&, KernelArgs args) {
  copy_into_resized(tensor_arg(args, 0), tensor_arg(args, 1), "alias_copy.out");
}
void detach_copy_out(KernelContext&, KernelArgs args) {
  copy_into_resized(tensor_arg(args, 0), tensor_arg(args, 1), "detach_copy.out");
}
void lift_fresh_copy_out(KernelContext&, KernelArgs args) {
  copy_into_resized(tensor_arg(args, 0), tensor_arg(args, 1), "lift_fresh_copy.out");
}

/// MemoryFormat values: 0 contiguous, 1 preserve, 2 channels_last, 3 channels_last_3d. The layout actually
/// written is out's dim order (the exporter gives out the layout the format asks for).
void check_memory_format(const EValue* v, const char* op) {
  if (v->is_none()) return;
  const int64_t f = v->to_int();
  if (f < 0 || f > 3) kernel_fail(std::string(op) + ": invalid memory_format " + std::to_string(f));
}

void clone_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "clone.out";
  check_memory_format(args[1], op);
  copy_into_resized(tensor_arg(args, 0), tensor_arg(args, 2), op);
}

void to_copy_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "_to_copy.out";
  check_memory_format(args[2], op);
  copy_into_resized(tensor_arg(args, 0), tensor_arg(args, 3), op);
}

/// A dim_order argument must describe the out tensor's layout (which is what gets written). None leaves
/// the choice to the out tensor.
void check_dim_order_arg(const EValue* v, const Tensor& out, const char* op) {
  if (v->is_none()) return;
  const auto order = int_list(v);
  bool same = static_cast<int>(order.size()) == out.dim();
  for (size_t i = 0; same && i < order.size(); ++i) same = order[i] == out.dim_order()[i];
  if (!same) {
    std::vector<int64_t> have(out.dim_order().begin(), out.dim_order().end());
    kernel_fail(std::string(op) + ": dim_order " + list_str(order) + " does not match the out tensor's dim order " +
                list_str(have));
  }
}

void to_dim_order_copy_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "_to_dim_order_copy.out";
  Tensor& out = tensor_arg(args, 3);
  check_dim_order_arg(args[2], out, op);
  copy_into_resized(tensor_arg(args, 0), out, op);
}

void clone_dim_order_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "_clone_dim_order.out";
  Tensor& out = tensor_arg(args, 3);
  check_dim_order_arg(args[2], out, op);
  copy_into_resized(tensor_arg(args, 0), out, op);
}

void empty_dim_order_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "_empty_dim_order.out";
  Tensor& out = tensor_arg(args, 2);
  check_dim_order_arg(args[1], out, op);
  const auto size = int_list(args[0]);
  resize_output(out, size, op);
}

void copy_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "copy.out";
  const Tensor& self = tensor_arg(args, 0);
  const Tensor& src = tensor_arg(args, 1);
  Tensor& out = tensor_arg(args, 3);
  resize_output(out, self.sizes(), op);
  copy_broadcast(out, src, op);
}

void copy_inplace(KernelContext&, KernelArgs args) {
  constexpr const char* op = "copy_";
  Tensor& self = tensor_arg(args, 0);
  const Tensor& src = tensor_arg(args, 1);
  copy_broadcast(self, src, op);
  // The return slot normally is self; if the program gave it its own tensor, it receives self too.
  if (args[3]->is_tensor()) {
    Tensor& ret = args[3]->to_tensor();
    if (&ret != &self && ret.data() != self.data()) copy_into_resized(self, ret, op);
  }
}

// ---------------------------------------------------------------------------------------------------------
// strided views: as_strided, unfold, diagonal, slice, select, narrow

void as_strided_copy_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "as_strided_copy.out";
  const Tensor& self = tensor_arg(args, 0);
  const auto size = int_list(args[1]);
  const auto stride = int_list(args[2]);
  const int64_t offset = optional_int(args[3]).value_or(0);
  Tensor& out = tensor_arg(args, 4);
  if (size.size() != stride.size()) {
    kernel_fail(std::string(op) + ": mismatch in length of strides and shape (" + std::to_string(stride.size()) +
                " vs " + std::to_string(size.size()) + ")");
  }
  if (offset < 0) kernel_fail(std::string(op) + ": negative storage offset " + std::to_string(offset));
  int64_t last = offset;
  bool empty = false;
  for (size_t i = 0; i < size.size(); ++i) {
    if (size[i] < 0) kernel_fail(std::string(op) + ": negative size in " + list_str(size));
    if (stride[i] < 0) kernel_fail(std::string(op) + ": negative strides are not supported: " + list_str(stride));
    if (size[i] == 0) empty = true;
  }
  if (!empty) {
    bool overflow = false;
    for (size_t i = 0; i < size.size(); ++i) {
      int64_t span;
      overflow = overflow || __builtin_mul_overflow(size[i] - 1, stride[i], &span) ||
                 __builtin_add_overflow(last, span, &last);
    }
    if (overflow || last >= self.numel()) {
      kernel_fail(std::string(op) + ": size " + list_str(size) + ", stride " + list_str(stride) + " and offset " +
                  std::to_string(offset) + " reach element " + std::to_string(last) + ", out of bounds for storage of " +
                  std::to_string(self.numel()) + " elements");
    }
  }
  resize_output(out, size, op);
  if (empty) return;
  // as_strided indexes the input's storage (its physical layout), whatever its dim order.
  copy_block(out, 0, self, offset, block_over(out, stride));
}

void unfold_copy_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "unfold_copy.out";
  const Tensor& self = tensor_arg(args, 0);
  const int64_t dim = normalize_dim(args[1]->to_int(), self.dim(), op);
  const int64_t size = args[2]->to_int();
  int64_t step = args[3]->to_int();
  Tensor& out = tensor_arg(args, 4);
  const int64_t dim_size = self.dim() == 0 ? 1 : self.size(static_cast<int>(dim));
  if (size < 0 || size > dim_size) {
    kernel_fail(std::string(op) + ": maximum size for tensor at dimension " + std::to_string(dim) + " is " +
                std::to_string(dim_size) + " but size is " + std::to_string(size));
  }
  if (step <= 0) kernel_fail(std::string(op) + ": step is " + std::to_string(step) + " but must be > 0");
  step = std::min(step, dim_size + 1);  // the same windows, and dim_stride * step cannot overflow
  std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end());
  std::vector<int64_t> src_strides(self.strides().begin(), self.strides().end());
  const int64_t dim_stride = self.dim() == 0 ? 1 : self.stride(static_cast<int>(dim));
  if (self.dim() > 0) {
    shape[dim] = (dim_size - size) / step + 1;
    src_strides[dim] = dim_stride * step;
  }
  shape.push_back(size);
  src_strides.push_back(dim_stride);
  resize_output(out, shape, op);
  copy_block(out, 0, self, 0, block_over(out, src_strides));
}

void diagonal_copy_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "diagonal_copy.out";
  const Tensor& self = tensor_arg(args, 0);
  const int64_t offset = args[1]->to_int();
  if (self.dim() < 2) kernel_fail(std::string(op) + ": expects a tensor with at least 2 dims");
  const int d1 = static_cast<int>(normalize_dim(args[2]->to_int(), self.dim(), op));
  const int d2 = static_cast<int>(normalize_dim(args[3]->to_int(), self.dim(), op));
  Tensor& out = tensor_arg(args, 4);
  if (d1 == d2) kernel_fail(std::string(op) + ": diagonal dimensions cannot be identical " + std::to_string(d1));
  int64_t len;
  int64_t start = 0;
  if (offset >= 0) {
    len = std::max<int64_t>(std::min(self.size(d1), self.size(d2) - offset), 0);
    if (len > 0) start = offset * self.stride(d2);
  } else {
    len = std::max<int64_t>(std::min(self.size(d1) + offset, self.size(d2)), 0);
    if (len > 0) start = -offset * self.stride(d1);
  }
  std::vector<int64_t> shape, src_strides;
  for (int d = 0; d < self.dim(); ++d) {
    if (d == d1 || d == d2) continue;
    shape.push_back(self.size(d));
    src_strides.push_back(self.stride(d));
  }
  shape.push_back(len);
  src_strides.push_back(self.stride(d1) + self.stride(d2));
  resize_output(out, shape, op);
  if (out.numel() == 0) return;
  copy_block(out, 0, self, start, block_over(out, src_strides));
}

struct SliceRange {
  int64_t start = 0;
  int64_t length = 0;
  int64_t step = 1;  // the step given, or the dim's size where it is larger: the same elements, no overflow
};

/// ATen's slice clamping: None start = 0, None end = INT64_MAX, negatives wrap once, then clamp to [0, size].
SliceRange slice_range(int64_t size, std::optional<int64_t> start_opt, std::optional<int64_t> end_opt, int64_t step,
                       const char* op) {
  if (step <= 0) kernel_fail(std::string(op) + ": slice step must be positive, got " + std::to_string(step));
  int64_t start = start_opt.value_or(0);
  int64_t end = end_opt.value_or(std::numeric_limits<int64_t>::max());
  if (start < 0) start += size;
  if (end < 0) end += size;
  if (start < 0) {
    start = 0;
  } else if (start >= size) {
    start = size;
  }
  if (end < start) {
    end = start;
  } else if (end >= size) {
    end = size;
  }
  // A step beyond the size takes at most one element: clamped, so that step * stride cannot overflow.
  step = std::min(step, std::max<int64_t>(size, 1));
  return {start, end == start ? 0 : (end - start - 1) / step + 1, step};
}

/// Block over `view_shape` (self's dims with `dim` resized to `len` and strided by `step`) into `out_strides`.
Block slice_block(const Tensor& self, int dim, int64_t len, int64_t step, std::span<const int64_t> out_strides) {
  Block b;
  for (int d = 0; d < self.dim(); ++d) {
    b.add(d == dim ? len : self.size(d), out_strides[d], d == dim ? self.stride(d) * step : self.stride(d));
  }
  return b;
}

void slice_copy_tensor_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "slice_copy.Tensor_out";
  const Tensor& self = tensor_arg(args, 0);
  Tensor& out = tensor_arg(args, 5);
  if (self.dim() == 0) kernel_fail(std::string(op) + ": slice() cannot be applied to a 0-dim tensor");
  const int dim = static_cast<int>(normalize_dim(args[1]->to_int(), self.dim(), op));
  const int64_t step = args[4]->to_int();
  const SliceRange r = slice_range(self.size(dim), optional_int(args[2]), optional_int(args[3]), step, op);
  InlineShape shape = InlineShape::of(self.sizes());
  shape[static_cast<size_t>(dim)] = r.length;
  resize_output(out, shape, op);
  if (out.numel() == 0) return;
  copy_block(out, 0, self, r.start * self.stride(dim), slice_block(self, dim, r.length, r.step, out.strides()));
}

void narrow_copy_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "narrow_copy.out";
  const Tensor& self = tensor_arg(args, 0);
  Tensor& out = tensor_arg(args, 4);
  if (self.dim() == 0) kernel_fail(std::string(op) + ": narrow() cannot be applied to a 0-dim tensor");
  const int dim = static_cast<int>(normalize_dim(args[1]->to_int(), self.dim(), op));
  int64_t start = args[2]->to_int();
  const int64_t length = args[3]->to_int();
  const int64_t size = self.size(dim);
  if (start < -size || start > size) {
    kernel_fail(std::string(op) + ": start " + std::to_string(start) + " out of range for dimension " +
                std::to_string(dim) + " of size " + std::to_string(size));
  }
  if (start < 0) start += size;
  if (length < 0 || start > size - length) {
    kernel_fail(std::string(op) + ": start (" + std::to_string(start) + ") + length (" + std::to_string(length) +
                ") exceeds dimension size (" + std::to_string(size) + ")");
  }
  std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end());
  shape[dim] = length;
  resize_output(out, shape, op);
  if (out.numel() == 0) return;
  copy_block(out, 0, self, start * self.stride(dim), slice_block(self, dim, length, 1, out.strides()));
}

int64_t checked_select_index(const Tensor& self, int dim, int64_t index, const char* op) {
  const int64_t size = self.size(dim);
  if (index < -size || index >= size) {
    kernel_fail(std::string(op) + ": index " + std::to_string(index) + " out of range for tensor of size " +
                shape_str(self.sizes()) + " at dimension " + std::to_string(dim));
  }
  return index < 0 ? index + size : index;
}

/// Copies self[..., index, ...] (dim removed) into `out` (already shaped).
void copy_select(Tensor& out, const Tensor& self, int dim, int64_t index) {
  Block b;
  int od = 0;
  for (int d = 0; d < self.dim(); ++d) {
    if (d == dim) continue;
    b.add(self.size(d), out.stride(od), self.stride(d));
    ++od;
  }
  copy_block(out, 0, self, index * self.stride(dim), b);
}

std::vector<int64_t> shape_without(const Tensor& t, int dim) {
  std::vector<int64_t> s(t.sizes().begin(), t.sizes().end());
  s.erase(s.begin() + dim);
  return s;
}

void select_copy_int_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "select_copy.int_out";
  const Tensor& self = tensor_arg(args, 0);
  Tensor& out = tensor_arg(args, 3);
  if (self.dim() == 0) kernel_fail(std::string(op) + ": select() cannot be applied to a 0-dim tensor");
  const int dim = static_cast<int>(normalize_dim(args[1]->to_int(), self.dim(), op));
  const int64_t index = checked_select_index(self, dim, args[2]->to_int(), op);
  resize_output(out, shape_without(self, dim), op);
  copy_select(out, self, dim, index);
}

// ---------------------------------------------------------------------------------------------------------
// scatters into views

void slice_scatter_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "slice_scatter.out";
  const Tensor& self = tensor_arg(args, 0);
  const Tensor& src = tensor_arg(args, 1);
  Tensor& out = tensor_arg(args, 6);
  if (self.dim() == 0) kernel_fail(std::string(op) + ": slice() cannot be applied to a 0-dim tensor");
  const int dim = static_cast<int>(normalize_dim(args[2]->to_int(), self.dim(), op));
  const int64_t step = args[5]->to_int();
  const SliceRange r = slice_range(self.size(dim), optional_int(args[3]), optional_int(args[4]), step, op);
  std::vector<int64_t> slice_shape(self.sizes().begin(), self.sizes().end());
  slice_shape[dim] = r.length;
  if (src.dim() != self.dim() || !std::equal(slice_shape.begin(), slice_shape.end(), src.sizes().begin())) {
    kernel_fail(std::string(op) + ": expected src to have a size equal to the slice of self. src size = " +
                shape_str(src.sizes()) + ", slice size = " + list_str(slice_shape));
  }
  copy_into_resized(self, out, op);
  if (src.numel() == 0) return;
  Block b;
  for (int d = 0; d < self.dim(); ++d) {
    b.add(slice_shape[d], d == dim ? out.stride(d) * r.step : out.stride(d), src.stride(d));
  }
  copy_block(out, r.start * out.stride(dim), src, 0, b);
}

void select_scatter_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "select_scatter.out";
  const Tensor& self = tensor_arg(args, 0);
  const Tensor& src = tensor_arg(args, 1);
  Tensor& out = tensor_arg(args, 4);
  if (self.dim() == 0) kernel_fail(std::string(op) + ": select() cannot be applied to a 0-dim tensor");
  const int dim = static_cast<int>(normalize_dim(args[2]->to_int(), self.dim(), op));
  const int64_t index = checked_select_index(self, dim, args[3]->to_int(), op);
  const auto slice_shape = shape_without(self, dim);
  if (src.dim() != self.dim() - 1 || !std::equal(slice_shape.begin(), slice_shape.end(), src.sizes().begin())) {
    kernel_fail(std::string(op) + ": expected src to have a size equal to the slice of self. src size = " +
                shape_str(src.sizes()) + ", slice size = " + list_str(slice_shape));
  }
  copy_into_resized(self, out, op);
  Block b;
  int sd = 0;
  for (int d = 0; d < self.dim(); ++d) {
    if (d == dim) continue;
    b.add(self.size(d), out.stride(d), src.stride(sd));
    ++sd;
  }
  copy_block(out, index * out.stride(dim), src, 0, b);
}

// ---------------------------------------------------------------------------------------------------------
// joins and splits

bool is_legacy_empty(const Tensor& t) { return t.dim() == 1 && t.size(0) == 0; }

/// A concatenation of 4-D tensors along channels, which the load may pair with its neighbours in NHWC order
/// (KernelState::keeps_channels_last): then each input's pixels are runs of its channels, copied to their place in
/// the output's.
struct CatChannels final : KernelState {
  ChannelsLastArgs keeps_channels_last() const override { return {{0}, {2}, {}}; }
  void use_channels_last(bool input, bool output) override { nhwc = input && output; }
  bool nhwc = false;
};

std::unique_ptr<KernelState> prepare_cat(KernelArgs args) {
  if (args.size() != 4 || args[0]->tag() != Tag::ListTensor || !args[1]->is_int() || !args[2]->is_tensor()) {
    return nullptr;
  }
  const Tensor& out = args[2]->to_tensor();
  const auto fits = [&](const Tensor& t) { return channels_last_candidate(t, out.dtype()); };
  // A malformed list is the call's to report, with its context: here it only means "no state".
  try {
    const TensorListRef tensors = args[0]->to_tensor_list();
    if (tensors.empty() || !fits(out) || normalize_dim(args[1]->to_int(), 4, "cat.out") != 1) return nullptr;
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (!fits(tensors[i])) return nullptr;
    }
  } catch (const Error&) {
    return nullptr;
  }
  return std::make_unique<CatChannels>();
}

/// cat along channels of NHWC bytes (a paired CatChannels).
void cat_channels_last(KernelArgs args, const TensorListRef& tensors, Tensor& out) {
  constexpr const char* op = "cat.out";
  const Tensor& first = tensors[0];
  int64_t channels = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    const bool same = t.dim() == 4 && t.dtype() == out.dtype() && t.size(0) == first.size(0) &&
                      t.size(2) == first.size(2) && t.size(3) == first.size(3);
    if (!same || normalize_dim(args[1]->to_int(), 4, op) != 1) {
      kernel_fail(std::string(op) + ": a concatenation paired with its neighbours in NHWC order no longer fits it "
                  "(tensor " + std::to_string(i) + " of shape " + shape_str(t.sizes()) + ")");
    }
    channels += t.size(1);
  }
  resize_output(out, {first.size(0), channels, first.size(2), first.size(3)}, op);
  const int64_t pixels = first.size(0) * first.size(2) * first.size(3);
  int64_t at = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    Block b;
    b.add(pixels, channels, t.size(1));
    b.add(t.size(1), 1, 1);
    copy_block(out, at, t, 0, b);
    at += t.size(1);
  }
}

void cat_out(KernelContext& ctx, KernelArgs args) {
  constexpr const char* op = "cat.out";
  const TensorListRef tensors = args[0]->to_tensor_list();
  Tensor& out = tensor_arg(args, 2);
  if (tensors.empty()) kernel_fail(std::string(op) + ": expected a non-empty list of Tensors");
  if (const auto* state = static_cast<const CatChannels*>(ctx.state()); state != nullptr && state->nhwc) {
    return cat_channels_last(args, tensors, out);
  }
  // ATen skips 1-D tensors of size 0 (the legacy "empty" tensor) for shape purposes.
  const Tensor* ref = nullptr;
  ScalarType common = tensors[0].dtype();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    common = i == 0 ? t.dtype() : promote_types(common, t.dtype());
    if (ref == nullptr && !is_legacy_empty(t)) ref = &t;
  }
  if (!can_cast(common, out.dtype())) {
    kernel_fail(std::string(op) + ": result type " + std::string(scalar_type_name(common)) +
                " can't be cast to the desired output type " + std::string(scalar_type_name(out.dtype())));
  }
  if (ref == nullptr) {
    resize_output(out, {0}, op);
    return;
  }
  if (ref->dim() == 0) kernel_fail(std::string(op) + ": zero-dimensional tensor cannot be concatenated");
  const int dim = static_cast<int>(normalize_dim(args[1]->to_int(), ref->dim(), op));
  std::vector<int64_t> shape(ref->sizes().begin(), ref->sizes().end());
  int64_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (is_legacy_empty(t)) continue;
    if (t.dim() != ref->dim()) {
      kernel_fail(std::string(op) + ": tensors must have same number of dimensions: got " +
                  std::to_string(ref->dim()) + " and " + std::to_string(t.dim()));
    }
    for (int d = 0; d < t.dim(); ++d) {
      if (d != dim && t.size(d) != ref->size(d)) {
        kernel_fail(std::string(op) + ": sizes of tensors must match except in dimension " + std::to_string(dim) +
                    ". Expected size " + std::to_string(ref->size(d)) + " but got size " + std::to_string(t.size(d)) +
                    " for tensor number " + std::to_string(i) + " in the list");
      }
    }
    total += t.size(dim);
  }
  shape[dim] = total;
  resize_output(out, shape, op);
  int64_t pos = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (is_legacy_empty(t)) continue;
    if (t.numel() > 0) {
      Block b;
      for (int d = 0; d < t.dim(); ++d) b.add(t.size(d), out.stride(d), t.stride(d));
      copy_block(out, pos * out.stride(dim), t, 0, b);
    }
    pos += t.size(dim);
  }
}

void stack_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "stack.out";
  const TensorListRef tensors = args[0]->to_tensor_list();
  Tensor& out = tensor_arg(args, 2);
  if (tensors.empty()) kernel_fail(std::string(op) + ": expects a non-empty TensorList");
  const Tensor& ref = tensors[0];
  const int dim = static_cast<int>(normalize_dim(args[1]->to_int(), ref.dim() + 1, op));
  ScalarType common = ref.dtype();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    common = promote_types(common, t.dtype());
    if (t.dim() != ref.dim() || !std::equal(t.sizes().begin(), t.sizes().end(), ref.sizes().begin())) {
      kernel_fail(std::string(op) + ": expects each tensor to be equal size, but got " + shape_str(ref.sizes()) +
                  " at entry 0 and " + shape_str(t.sizes()) + " at entry " + std::to_string(i));
    }
  }
  if (!can_cast(common, out.dtype())) {
    kernel_fail(std::string(op) + ": result type " + std::string(scalar_type_name(common)) +
                " can't be cast to the desired output type " + std::string(scalar_type_name(out.dtype())));
  }
  std::vector<int64_t> shape(ref.sizes().begin(), ref.sizes().end());
  shape.insert(shape.begin() + dim, static_cast<int64_t>(tensors.size()));
  resize_output(out, shape, op);
  if (out.numel() == 0) return;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    Block b;
    for (int d = 0; d < t.dim(); ++d) b.add(t.size(d), out.stride(d < dim ? d : d + 1), t.stride(d));
    copy_block(out, static_cast<int64_t>(i) * out.stride(dim), t, 0, b);
  }
}

/// Copies consecutive chunks of self along dim (chunk sizes in `sizes`) into the outs.
void split_into(const Tensor& self, int dim, std::span<const int64_t> sizes, const TensorListRef& outs,
                const char* op) {
  if (outs.size() != sizes.size()) {
    kernel_fail(std::string(op) + ": expected " + std::to_string(sizes.size()) + " output tensors, got " +
                std::to_string(outs.size()));
  }
  // Split along the outermost dim of size above 1 of a contiguous tensor (a recurrent cell's [1, 3 * H] gates):
  // each chunk is one run of bytes.
  int64_t outer = 1;
  for (int d = 0; d < dim; ++d) outer *= self.size(d);
  const bool runs = outer == 1 && self.is_contiguous_order();
  int64_t pos = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    Tensor& out = outs[i];
    InlineShape shape = InlineShape::of(self.sizes());
    shape[static_cast<size_t>(dim)] = sizes[i];
    resize_output(out, shape, op);
    if (out.numel() > 0) {
      if (runs && out.is_contiguous_order() && out.dtype() == self.dtype() && out.data() != nullptr &&
          self.data() != nullptr) {
        const size_t es = self.element_size();
        std::memcpy(out.data(), self.data_as<const uint8_t>() + static_cast<size_t>(pos * self.stride(dim)) * es,
                    static_cast<size_t>(out.numel()) * es);
      } else {
        copy_block(out, 0, self, pos * self.stride(dim), slice_block(self, dim, sizes[i], 1, out.strides()));
      }
    }
    pos += sizes[i];
  }
}

void split_copy_tensor_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "split_copy.Tensor_out";
  const Tensor& self = tensor_arg(args, 0);
  const int64_t split_size = args[1]->to_int();
  if (self.dim() == 0) kernel_fail(std::string(op) + ": split expects at least a 1-dimensional tensor");
  const int dim = static_cast<int>(normalize_dim(args[2]->to_int(), self.dim(), op));
  const TensorListRef outs = args[3]->to_tensor_list();
  const int64_t size = self.size(dim);
  if (split_size < 0 || (split_size == 0 && size != 0)) {
    kernel_fail(std::string(op) + ": split_size can only be 0 if dimension size is 0, but got split_size " +
                std::to_string(split_size));
  }
  const int64_t chunks = split_size == 0 ? 1 : std::max<int64_t>((size + split_size - 1) / split_size, 1);
  std::vector<int64_t> sizes(static_cast<size_t>(chunks), split_size);
  sizes.back() = size - split_size * (chunks - 1);
  split_into(self, dim, sizes, outs, op);
}

void split_with_sizes_copy_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "split_with_sizes_copy.out";
  const Tensor& self = tensor_arg(args, 0);
  const auto sizes = int_list(args[1]);
  if (self.dim() == 0) kernel_fail(std::string(op) + ": split expects at least a 1-dimensional tensor");
  const int dim = static_cast<int>(normalize_dim(args[2]->to_int(), self.dim(), op));
  int64_t sum = 0;
  for (int64_t s : sizes) {
    if (s < 0) kernel_fail(std::string(op) + ": split_sizes must be non-negative, got " + list_str(sizes));
    sum += s;
  }
  if (sum != self.size(dim)) {
    kernel_fail(std::string(op) + ": split_sizes " + list_str(sizes) + " must sum to the dimension size " +
                std::to_string(self.size(dim)));
  }
  split_into(self, dim, sizes, args[3]->to_tensor_list(), op);
}

void unbind_copy_int_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "unbind_copy.int_out";
  const Tensor& self = tensor_arg(args, 0);
  if (self.dim() == 0) kernel_fail(std::string(op) + ": dimension specified as 0 but tensor has no dimensions");
  const int dim = static_cast<int>(normalize_dim(args[1]->to_int(), self.dim(), op));
  const TensorListRef outs = args[2]->to_tensor_list();
  if (static_cast<int64_t>(outs.size()) != self.size(dim)) {
    kernel_fail(std::string(op) + ": expected " + std::to_string(self.size(dim)) + " output tensors, got " +
                std::to_string(outs.size()));
  }
  const auto shape = shape_without(self, dim);
  for (size_t i = 0; i < outs.size(); ++i) {
    Tensor& out = outs[i];
    resize_output(out, shape, op);
    copy_select(out, self, dim, static_cast<int64_t>(i));
  }
}

// ---------------------------------------------------------------------------------------------------------
// rearrangements

void pixel_shuffle_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "pixel_shuffle.out";
  const Tensor& self = tensor_arg(args, 0);
  const int64_t r = args[1]->to_int();
  Tensor& out = tensor_arg(args, 2);
  if (self.dim() < 3) kernel_fail(std::string(op) + ": expects input to have at least 3 dimensions");
  if (r <= 0) kernel_fail(std::string(op) + ": upscale_factor must be greater than 0, got " + std::to_string(r));
  const int n = self.dim();
  const int64_t c = self.size(n - 3), h = self.size(n - 2), w = self.size(n - 1);
  if (c % (r * r) != 0) {
    kernel_fail(std::string(op) + ": channels " + std::to_string(c) + " not divisible by upscale_factor squared " +
                std::to_string(r * r));
  }
  std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end());
  shape[n - 3] = c / (r * r);
  shape[n - 2] = h * r;
  shape[n - 1] = w * r;
  resize_output(out, shape, op);
  if (out.numel() == 0) return;
  // out[.., oc, y*r+i, x*r+j] = in[.., oc*r*r + i*r + j, y, x]; walk (oc, y, i, x, j).
  Block b;
  for (int d = 0; d < n - 3; ++d) b.add(self.size(d), out.stride(d), self.stride(d));
  const int64_t sc = self.stride(n - 3), sh = self.stride(n - 2), sw = self.stride(n - 1);
  const int64_t oc = out.stride(n - 3), oh = out.stride(n - 2), ow = out.stride(n - 1);
  b.add(c / (r * r), oc, sc * r * r);
  b.add(h, oh * r, sh);
  b.add(r, oh, sc * r);
  b.add(w, ow * r, sw);
  b.add(r, ow, sc);
  copy_block(out, 0, self, 0, b);
}

void pixel_unshuffle_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "pixel_unshuffle.out";
  const Tensor& self = tensor_arg(args, 0);
  const int64_t r = args[1]->to_int();
  Tensor& out = tensor_arg(args, 2);
  if (self.dim() < 3) kernel_fail(std::string(op) + ": expects input to have at least 3 dimensions");
  if (r <= 0) kernel_fail(std::string(op) + ": downscale_factor must be greater than 0, got " + std::to_string(r));
  const int n = self.dim();
  const int64_t c = self.size(n - 3), h = self.size(n - 2), w = self.size(n - 1);
  if (h % r != 0 || w % r != 0) {
    kernel_fail(std::string(op) + ": height " + std::to_string(h) + " and width " + std::to_string(w) +
                " must be divisible by downscale_factor " + std::to_string(r));
  }
  std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end());
  shape[n - 3] = c * r * r;
  shape[n - 2] = h / r;
  shape[n - 1] = w / r;
  resize_output(out, shape, op);
  if (out.numel() == 0) return;
  // out[.., ic*r*r + i*r + j, y, x] = in[.., ic, y*r+i, x*r+j]; walk (ic, i, j, y, x).
  Block b;
  for (int d = 0; d < n - 3; ++d) b.add(self.size(d), out.stride(d), self.stride(d));
  const int64_t sc = self.stride(n - 3), sh = self.stride(n - 2), sw = self.stride(n - 1);
  const int64_t oc = out.stride(n - 3), oh = out.stride(n - 2), ow = out.stride(n - 1);
  b.add(c, oc * r * r, sc);
  b.add(r, oc * r, sh);
  b.add(r, oc, sw);
  b.add(h / r, oh, sh * r);
  b.add(w / r, ow, sw * r);
  copy_block(out, 0, self, 0, b);
}

void flip_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "flip.out";
  const Tensor& self = tensor_arg(args, 0);
  const auto dims = int_list(args[1]);
  Tensor& out = tensor_arg(args, 2);
  bool flip[kMaxTensorRank] = {};
  for (int64_t d : dims) {
    const int64_t nd = normalize_dim(d, self.dim(), op);
    if (self.dim() == 0) continue;
    if (flip[nd]) kernel_fail(std::string(op) + ": dims has duplicates: " + list_str(dims));
    flip[nd] = true;
  }
  resize_output(out, self.sizes(), op);
  if (out.numel() == 0) return;
  // Read flipped dims backwards: start at their last index with a negative stride.
  int64_t start = 0;
  std::vector<int64_t> src_strides(self.strides().begin(), self.strides().end());
  for (int d = 0; d < self.dim(); ++d) {
    if (!flip[d]) continue;
    start += (self.size(d) - 1) * self.stride(d);
    src_strides[d] = -self.stride(d);
  }
  copy_block(out, 0, self, start, block_over(out, src_strides));
}

/// out = self rolled by shift[d] along each dim (out index j reads self index (j - shift) mod n).
void roll_strided(Tensor& out, const Tensor& self, const std::vector<int64_t>& shift) {
  const int rank = self.dim();
  int rolled[kMaxTensorRank];
  int nrolled = 0;
  for (int d = 0; d < rank; ++d) {
    if (shift[d] != 0) rolled[nrolled++] = d;
  }
  // Each rolled dim splits into two segments; copy each of the 2^k combinations as one block.
  for (int mask = 0; mask < (1 << nrolled); ++mask) {
    Block b;
    int64_t out_off = 0, src_off = 0;
    bool empty = false;
    int k = 0;
    for (int d = 0; d < rank; ++d) {
      int64_t len = self.size(d);
      if (k < nrolled && rolled[k] == d) {
        const int64_t s = shift[d];
        const bool second = (mask >> k) & 1;
        // segment 0: out [s, n) <- self [0, n-s); segment 1: out [0, s) <- self [n-s, n)
        if (!second) {
          len = self.size(d) - s;
          out_off += s * out.stride(d);
        } else {
          len = s;
          src_off += (self.size(d) - s) * self.stride(d);
        }
        ++k;
      }
      if (len == 0) empty = true;
      b.add(len, out.stride(d), self.stride(d));
    }
    if (!empty) copy_block(out, out_off, self, src_off, b);
  }
}

void roll_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "roll.out";
  const Tensor& self = tensor_arg(args, 0);
  const auto shifts = int_list(args[1]);
  const auto dims = int_list(args[2]);
  Tensor& out = tensor_arg(args, 3);
  resize_output(out, self.sizes(), op);
  if (dims.empty()) {
    if (shifts.size() != 1) {
      kernel_fail(std::string(op) + ": shifts and dimensions must align. shifts: " + std::to_string(shifts.size()) +
                  ", dims: 0");
    }
  } else if (shifts.size() != dims.size()) {
    kernel_fail(std::string(op) + ": shifts and dimensions must align. shifts: " + std::to_string(shifts.size()) +
                ", dims: " + std::to_string(dims.size()));
  }
  if (self.numel() == 0) return;
  auto wrap = [](int64_t s, int64_t n) { return ((s % n) + n) % n; };
  if (dims.empty()) {
    // Roll the flattened tensor: work on row-major copies when the layouts are not contiguous.
    const int64_t n = self.numel();
    const int64_t s = wrap(shifts[0], n);
    const size_t es = self.element_size();
    std::vector<unsigned char> src_buf, dst_buf;
    const void* src = self.data();
    // A non-contiguous input, or one that shares storage with the output (an in-place roll), is read from a
    // row-major copy.
    const auto out_begin = reinterpret_cast<uintptr_t>(out.data());
    const auto self_begin = reinterpret_cast<uintptr_t>(self.data());
    const bool aliased = out_begin < self_begin + self.nbytes() && self_begin < out_begin + out.nbytes();
    if (!self.is_contiguous_order() || aliased) {
      src_buf.resize(static_cast<size_t>(n) * es);
      Tensor flat(self.dtype(), self.sizes(), {}, src_buf.data());
      copy_same_shape(flat, self, op);
      src = src_buf.data();
    }
    const bool direct = out.is_contiguous_order() && out.dtype() == self.dtype();
    if (!direct) dst_buf.resize(static_cast<size_t>(n) * es);
    unsigned char* dst = direct ? static_cast<unsigned char*>(out.data()) : dst_buf.data();
    const auto* s8 = static_cast<const unsigned char*>(src);
    std::memcpy(dst + s * static_cast<int64_t>(es), s8, static_cast<size_t>(n - s) * es);
    std::memcpy(dst, s8 + (n - s) * static_cast<int64_t>(es), static_cast<size_t>(s) * es);
    if (!direct) {
      Tensor flat(self.dtype(), self.sizes(), {}, dst_buf.data());
      copy_same_shape(out, flat, op);
    }
    return;
  }
  std::vector<int64_t> shift(static_cast<size_t>(self.dim()), 0);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = normalize_dim(dims[i], self.dim(), op);
    if (self.dim() == 0) continue;
    shift[d] = wrap(shift[d] + wrap(shifts[i], self.size(static_cast<int>(d))), self.size(static_cast<int>(d)));
  }
  roll_strided(out, self, shift);
}

void repeat_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "repeat.out";
  const Tensor& self = tensor_arg(args, 0);
  const auto repeats = int_list(args[1]);
  Tensor& out = tensor_arg(args, 2);
  const int rank = static_cast<int>(repeats.size());
  if (rank < self.dim()) {
    kernel_fail(std::string(op) + ": number of dimensions of repeat dims (" + std::to_string(rank) +
                ") can not be smaller than number of dimensions of tensor (" + std::to_string(self.dim()) + ")");
  }
  for (int64_t r : repeats) {
    if (r < 0) kernel_fail(std::string(op) + ": repeats cannot be negative, got " + list_str(repeats));
  }
  const int lead = rank - self.dim();
  std::vector<int64_t> shape(static_cast<size_t>(rank));
  for (int i = 0; i < rank; ++i) {
    if (__builtin_mul_overflow(repeats[i], i < lead ? 1 : self.size(i - lead), &shape[i])) {
      kernel_fail(std::string(op) + ": repeats " + list_str(repeats) + " give a too large output");
    }
  }
  resize_output(out, shape, op);
  if (out.numel() == 0) return;
  // Each out dim splits into (repeat, size): the repeat part has source stride 0.
  Block b;
  for (int i = 0; i < rank; ++i) {
    const int64_t n = i < lead ? 1 : self.size(i - lead);
    const int64_t s = i < lead ? 0 : self.stride(i - lead);
    b.add(repeats[i], out.stride(i) * n, 0);
    b.add(n, out.stride(i), s);
  }
  copy_block(out, 0, self, 0, b);
}

void repeat_interleave_tensor_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "repeat_interleave.Tensor_out";
  const Tensor& repeats = tensor_arg(args, 0);
  const std::optional<int64_t> output_size = optional_int(args[1]);
  Tensor& out = tensor_arg(args, 2);
  if (repeats.dim() != 1) {
    kernel_fail(std::string(op) + ": repeat_interleave only accepts a 1D vector as repeat, got rank " +
                std::to_string(repeats.dim()));
  }
  if (repeats.dtype() != ScalarType::Long && repeats.dtype() != ScalarType::Int) {
    kernel_fail(std::string(op) + ": repeats has to be Long or Int tensor, got " +
                std::string(scalar_type_name(repeats.dtype())));
  }
  if (out.dtype() != repeats.dtype()) {
    kernel_fail(std::string(op) + ": out dtype " + std::string(scalar_type_name(out.dtype())) +
                " must match repeats dtype " + std::string(scalar_type_name(repeats.dtype())));
  }
  std::vector<int64_t> reps;
  gather_as_int64(repeats, reps);
  int64_t total = 0;
  for (int64_t r : reps) {
    if (r < 0) kernel_fail(std::string(op) + ": repeats can not be negative, got " + std::to_string(r));
    total += r;
  }
  if (output_size && *output_size != total) {
    kernel_fail(std::string(op) + ": allocated size " + std::to_string(*output_size) +
                " does not match required size " + std::to_string(total));
  }
  resize_output(out, {total}, op);
  int64_t pos = 0;
  const int64_t stride = out.dim() > 0 ? out.stride(0) : 1;
  for (size_t i = 0; i < reps.size(); ++i) {
    for (int64_t k = 0; k < reps[i]; ++k, ++pos) {
      if (out.dtype() == ScalarType::Long) {
        out.data_as<int64_t>()[pos * stride] = static_cast<int64_t>(i);
      } else {
        out.data_as<int32_t>()[pos * stride] = static_cast<int32_t>(i);
      }
    }
  }
}

void tril_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "tril.out";
  const Tensor& self = tensor_arg(args, 0);
  const int64_t diagonal = args[1]->to_int();
  Tensor& out = tensor_arg(args, 2);
  if (self.dim() < 2) kernel_fail(std::string(op) + ": input tensor must have at least 2 dimensions");
  copy_into_resized(self, out, op);
  if (out.numel() == 0) return;
  const int n = out.dim();
  const int64_t rows = out.size(n - 2), cols = out.size(n - 1);
  const int64_t rs = out.stride(n - 2), cs = out.stride(n - 1);
  const int64_t mats = out.numel() / (rows * cols);
  const size_t es = out.element_size();
  auto* base = static_cast<unsigned char*>(out.data());
  for (int64_t m = 0; m < mats; ++m) {
    // offset of matrix m over the batch dims
    int64_t rem = m, off = 0;
    for (int d = n - 3; d >= 0; --d) {
      off += (rem % out.size(d)) * out.stride(d);
      rem /= out.size(d);
    }
    for (int64_t i = 0; i < rows; ++i) {
      // keep j <= i + diagonal, zero the rest of the row
      const int64_t first_zero = std::clamp<int64_t>(i + diagonal + 1, 0, cols);
      if (cs == 1) {
        if (first_zero < cols) {
          std::memset(base + (off + i * rs + first_zero) * static_cast<int64_t>(es), 0,
                      static_cast<size_t>(cols - first_zero) * es);
        }
        continue;
      }
      for (int64_t j = first_zero; j < cols; ++j) {
        std::memset(base + (off + i * rs + j * cs) * static_cast<int64_t>(es), 0, es);
      }
    }
  }
}

}  // namespace

void register_shape_kernels(KernelRegistry& registry) {
  registry.add("aten::view_copy.out", 4, view_copy_out);
  registry.add("aten::permute_copy.out", 4, permute_copy_out);
  registry.add("aten::transpose_copy.int_out", 5, transpose_copy_int_out);
  registry.add("aten::t_copy.out", 3, t_copy_out);
  registry.add("aten::expand_copy.out", 5, expand_copy_out);
  registry.add("aten::clone.out", 4, clone_out);
  registry.add("aten::_to_copy.out", 5, to_copy_out);
  registry.add("dim_order_ops::_to_dim_order_copy.out", 5, to_dim_order_copy_out);
  registry.add("dim_order_ops::_clone_dim_order.out", 5, clone_dim_order_out);
  registry.add("dim_order_ops::_empty_dim_order.out", 4, empty_dim_order_out);
  registry.add("aten::alias_copy.out", 3, alias_copy_out);
  registry.add("aten::detach_copy.out", 3, detach_copy_out);
  registry.add("aten::lift_fresh_copy.out", 3, lift_fresh_copy_out);
  registry.add("aten::copy.out", 5, copy_out);
  registry.add("aten::copy_", 4, copy_inplace);
  registry.add("aten::squeeze_copy.dim_out", 4, squeeze_copy_dim_out);
  registry.add("aten::squeeze_copy.dims_out", 4, squeeze_copy_dims_out);
  registry.add("aten::unsqueeze_copy.out", 4, unsqueeze_copy_out);
  registry.add("aten::as_strided_copy.out", 6, as_strided_copy_out);
  registry.add("aten::unfold_copy.out", 6, unfold_copy_out);
  registry.add("aten::diagonal_copy.out", 6, diagonal_copy_out);
  registry.add("aten::cat.out", 4, cat_out, prepare_cat);
  registry.add("aten::stack.out", 4, stack_out);
  registry.add("aten::split_copy.Tensor_out", 5, split_copy_tensor_out);
  registry.add("aten::split_with_sizes_copy.out", 5, split_with_sizes_copy_out);
  registry.add("aten::unbind_copy.int_out", 4, unbind_copy_int_out);
  registry.add("aten::slice_copy.Tensor_out", 7, slice_copy_tensor_out);
  registry.add("aten::select_copy.int_out", 5, select_copy_int_out);
  registry.add("aten::narrow_copy.out", 6, narrow_copy_out);
  registry.add("aten::slice_scatter.out", 8, slice_scatter_out);
  registry.add("aten::select_scatter.out", 6, select_scatter_out);
  registry.add("aten::pixel_shuffle.out", 4, pixel_shuffle_out);
  registry.add("aten::pixel_unshuffle.out", 4, pixel_unshuffle_out);
  registry.add("aten::flip.out", 4, flip_out);
  registry.add("aten::roll.out", 5, roll_out);
  registry.add("aten::repeat.out", 4, repeat_out);
  registry.add("aten::repeat_interleave.Tensor_out", 4, repeat_interleave_tensor_out);
  registry.add("aten::tril.out", 4, tril_out);
}

}  // namespace etnp::kernels
