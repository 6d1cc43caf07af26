#include "etnp/tensor.h"

#include <string>

#include "etnp/error.h"

namespace etnp {
namespace {

std::string shape_string(std::span<const int64_t> s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

// Whether the outermost stride of `sizes` (their product with zeros counted as 1, which bounds every stride and
// the element count) fits in int64. A zero-sized dim keeps the count at 0 while the others' strides still grow.
bool strides_fit(std::span<const int64_t> sizes) {
  int64_t running = 1;
  for (int64_t s : sizes) {
    if (__builtin_mul_overflow(running, s == 0 ? 1 : s, &running)) return false;
  }
  return true;
}

}  // namespace

void strides_from_dim_order(std::span<const int64_t> sizes, std::span<const uint8_t> dim_order,
                            std::span<int64_t> strides) {
  const size_t n = sizes.size();
  if (n == 0) return;
  int64_t running = 1;
  for (size_t k = n; k-- > 0;) {
    const uint8_t d = dim_order[k];
    strides[d] = running;
    running *= sizes[d] == 0 ? 1 : sizes[d];
  }
}

Tensor::Tensor(ScalarType dtype, std::span<const int64_t> sizes, std::span<const uint8_t> dim_order, void* data,
               ShapeDynamism dynamism)
    : dtype_(dtype), dynamism_(dynamism), data_(data) {
  if (sizes.size() > static_cast<size_t>(kMaxTensorRank)) {
    throw Error(ErrorKind::ProgramLoadError, "tensor rank " + std::to_string(sizes.size()) + " exceeds " +
                                                 std::to_string(kMaxTensorRank));
  }
  if (!dim_order.empty() && dim_order.size() != sizes.size()) {
    throw Error(ErrorKind::ProgramLoadError, "dim_order has " + std::to_string(dim_order.size()) +
                                                 " entries for a rank-" + std::to_string(sizes.size()) + " tensor");
  }
  dim_ = static_cast<int8_t>(sizes.size());
  bool seen[kMaxTensorRank] = {};
  for (int i = 0; i < dim_; ++i) {
    if (sizes[i] < 0) throw Error(ErrorKind::ProgramLoadError, "negative tensor size " + shape_string(sizes));
    sizes_[i] = bound_sizes_[i] = sizes[i];
    const uint8_t d = dim_order.empty() ? static_cast<uint8_t>(i) : dim_order[i];
    if (d >= dim_ || seen[d]) {
      throw Error(ErrorKind::ProgramLoadError, "dim_order is not a permutation of 0.." + std::to_string(dim_ - 1));
    }
    seen[d] = true;
    dim_order_[i] = d;
  }
  if (!strides_fit(sizes)) {
    throw Error(ErrorKind::ProgramLoadError, "tensor shape " + shape_string(sizes) +
                                                 " is too large: its strides overflow a 64-bit element count");
  }
  numel_ = 1;
  for (int64_t n : sizes) numel_ *= n;  // at most the product strides_fit bounded, or 0
  capacity_numel_ = numel_;
  compute_strides();
}

void Tensor::compute_strides() {
  strides_from_dim_order(sizes(), dim_order(), std::span<int64_t>(strides_, dim_));
}

bool Tensor::is_channels_last_order() const {
  if (dim_ == 4) return dim_order_[0] == 0 && dim_order_[1] == 2 && dim_order_[2] == 3 && dim_order_[3] == 1;
  if (dim_ == 5) {
    return dim_order_[0] == 0 && dim_order_[1] == 2 && dim_order_[2] == 3 && dim_order_[3] == 4 &&
           dim_order_[4] == 1;
  }
  return false;
}

bool Tensor::try_resize_to_other(std::span<const int64_t> new_sizes) {
  if (static_cast<int>(new_sizes.size()) != dim_) return false;
  for (int i = 0; i < dim_; ++i) {
    if (new_sizes[i] < 0) return false;
  }
  if (!strides_fit(new_sizes)) return false;  // beyond any bound; also a zero dim beside huge ones
  if (dynamism_ == ShapeDynamism::Static) return false;
  int64_t n = 1;
  for (int64_t s : new_sizes) n *= s;  // bounded by strides_fit
  if (n > capacity_numel_) return false;
  for (int i = 0; i < dim_; ++i) sizes_[i] = new_sizes[i];
  numel_ = n;
  compute_strides();
  return true;
}

void Tensor::resize(std::span<const int64_t> new_sizes) {
  if (!try_resize(new_sizes)) {
    std::string why;
    if (static_cast<int>(new_sizes.size()) != dim_) {
      why = "rank " + std::to_string(new_sizes.size()) + " differs from the tensor's rank " + std::to_string(dim_);
    } else if (!strides_fit(new_sizes)) {
      why = "its strides overflow a 64-bit element count";
    } else if (dynamism_ == ShapeDynamism::Static) {
      why = "the tensor has the static shape " + shape_string(sizes());
    } else {
      why = "it exceeds the tensor's upper bound " + shape_string(bound_sizes());
    }
    throw Error(ErrorKind::ExecutionError, "cannot resize tensor to " + shape_string(new_sizes) + ": " + why);
  }
}

}  // namespace etnp
