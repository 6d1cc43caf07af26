// The runtime tensor that kernels and backends read and write. It never owns its data: the data lives in
// the program's constant storage, a method's planned arena, a caller's buffer, or memory the method keeps.
#pragma once

#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <span>

#include "etnp/scalar_type.h"

namespace etnp {

constexpr int kMaxTensorRank = 16;

enum class ShapeDynamism : uint8_t { Static = 0, DynamicBound = 1, DynamicUnbound = 2 };

class Tensor {
 public:
  Tensor() = default;
  /// A tensor with the given shape and memory order (dim_order empty = contiguous). Throws on a bad rank
  /// or dim order. `capacity_numel` is the element count the storage holds (the shape's bound).
  Tensor(ScalarType dtype, std::span<const int64_t> sizes, std::span<const uint8_t> dim_order, void* data,
         ShapeDynamism dynamism = ShapeDynamism::Static);

  ScalarType dtype() const { return dtype_; }
  int dim() const { return dim_; }
  int64_t size(int d) const { return sizes_[d]; }
  int64_t stride(int d) const { return strides_[d]; }
  std::span<const int64_t> sizes() const { return {sizes_, static_cast<size_t>(dim_)}; }
  std::span<const int64_t> strides() const { return {strides_, static_cast<size_t>(dim_)}; }
  std::span<const uint8_t> dim_order() const { return {dim_order_, static_cast<size_t>(dim_)}; }
  int64_t numel() const { return numel_; }
  size_t element_size() const { return etnp::element_size(dtype_); }
  size_t nbytes() const { return static_cast<size_t>(numel_) * element_size(); }
  ShapeDynamism dynamism() const { return dynamism_; }
  /// Largest element count the storage may hold (the serialized shape's numel).
  int64_t capacity_numel() const { return capacity_numel_; }
  /// Serialized sizes: the upper bounds of a dynamic tensor, the shape of a static one.
  std::span<const int64_t> bound_sizes() const { return {bound_sizes_, static_cast<size_t>(dim_)}; }

  void* data() const { return data_; }
  template <typename T>
  T* data_as() const { return static_cast<T*>(data_); }
  void set_data(void* data) { data_ = data; }
  /// True for data fixed at load (the program's constants, external weights, results the runtime computed
  /// from them at load): the same bytes on every run, so a kernel's prepare hook may pre-pack them.
  bool is_constant() const { return constant_; }
  void set_constant(bool constant) { constant_ = constant; }

  /// True when dim_order is 0,1,...,n-1 (row-major).
  bool is_contiguous_order() const {
    for (int i = 0; i < dim_; ++i) {
      if (dim_order_[i] != i) return false;
    }
    return true;
  }
  /// True when dim_order is 0,2,3,1 (rank 4) or 0,2,3,4,1 (rank 5).
  bool is_channels_last_order() const;

  /// Changes the shape within the tensor's dynamism: a static tensor only accepts its own shape, a
  /// bounded one any shape of the same rank with no more elements than its bound. Strides follow
  /// dim_order. Throws etnp::Error(ExecutionError) otherwise.
  void resize(std::span<const int64_t> new_sizes);
  /// resize() for callers that must not throw; returns false when the shape is not allowed.
  bool try_resize(std::span<const int64_t> new_sizes) {
    // The sizes it has (checked when they were set): the common case, every kernel call.
    if (static_cast<int>(new_sizes.size()) == dim_ && std::equal(new_sizes.begin(), new_sizes.end(), sizes_)) {
      return true;
    }
    return try_resize_to_other(new_sizes);
  }
  /// Sets the element count the storage holds (for tensors whose storage is larger than their bound).
  void set_capacity_numel(int64_t n) { capacity_numel_ = n; }

 private:
  void compute_strides();
  bool try_resize_to_other(std::span<const int64_t> new_sizes);

  ScalarType dtype_ = ScalarType::Float;
  int8_t dim_ = 0;
  ShapeDynamism dynamism_ = ShapeDynamism::Static;
  bool constant_ = false;
  int64_t numel_ = 1;
  int64_t capacity_numel_ = 1;
  void* data_ = nullptr;
  int64_t sizes_[kMaxTensorRank] = {};
  int64_t strides_[kMaxTensorRank] = {};
  int64_t bound_sizes_[kMaxTensorRank] = {};
  uint8_t dim_order_[kMaxTensorRank] = {};
};

/// Strides (in elements) for a shape laid out in `dim_order` (zero sizes count as 1).
void strides_from_dim_order(std::span<const int64_t> sizes, std::span<const uint8_t> dim_order,
                            std::span<int64_t> strides);

}  // namespace etnp
