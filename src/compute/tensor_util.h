// The tensor toolkit that kernels and the copy engine share: element types, dtype dispatch, type promotion,
// broadcasting and strided iteration. Code indexes tensors through strides() in logical dimension order, which
// makes every dim order (contiguous, channels-last, ...) work; fast paths test is_contiguous_order() first.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "core/half.h"
#include "etnp/kernel.h"
#include "etnp/tensor.h"
#include "etnp/value.h"

namespace etnp::compute {

/// The type arithmetic on T is done in (PyTorch's "opmath"): float for the 16-bit floats, T otherwise.
template <typename T>
using OpMath = std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float, T>;

template <typename T>
constexpr bool is_float_v = std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

/// Converts between any two element types the way a C++/PyTorch cast does (float -> int truncates,
/// anything -> bool is "!= 0").
template <typename To, typename From>
inline To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    return static_cast<OpMath<From>>(v) != OpMath<From>(0);
  } else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>) {
    return To(static_cast<float>(static_cast<OpMath<From>>(v)));
  } else if constexpr (std::is_same_v<From, Half> || std::is_same_v<From, BFloat16>) {
    return static_cast<To>(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

// ---------------------------------------------------------------------------------------------------------
// dtype dispatch. `fn` is called with a value of the C++ element type: fn(float{}), fn(int64_t{}), ...

enum TypeSet : unsigned {
  kInts = 1u << 0,    // uint8, int8, int16, int32, int64
  kFloats = 1u << 1,  // float, double
  kHalfs = 1u << 2,   // Half, BFloat16
  kBool = 1u << 3,
  kUInts = 1u << 4,   // uint16, uint32, uint64
  kRealTypes = kInts | kFloats | kHalfs,
  kAllTypes = kInts | kFloats | kHalfs | kBool | kUInts,
};

[[noreturn]] void unsupported_dtype(const char* op, ScalarType t);

template <unsigned Set = kAllTypes, typename F>
inline void dispatch(ScalarType t, const char* op, F&& fn) {
  switch (t) {
    case ScalarType::Byte: if constexpr (Set & kInts) { fn(uint8_t{}); return; } break;
    case ScalarType::Char: if constexpr (Set & kInts) { fn(int8_t{}); return; } break;
    case ScalarType::Short: if constexpr (Set & kInts) { fn(int16_t{}); return; } break;
    case ScalarType::Int: if constexpr (Set & kInts) { fn(int32_t{}); return; } break;
    case ScalarType::Long: if constexpr (Set & kInts) { fn(int64_t{}); return; } break;
    case ScalarType::Float: if constexpr (Set & kFloats) { fn(float{}); return; } break;
    case ScalarType::Double: if constexpr (Set & kFloats) { fn(double{}); return; } break;
    case ScalarType::Half: if constexpr (Set & kHalfs) { fn(Half{}); return; } break;
    case ScalarType::BFloat16: if constexpr (Set & kHalfs) { fn(BFloat16{}); return; } break;
    case ScalarType::Bool: if constexpr (Set & kBool) { fn(bool{}); return; } break;
    case ScalarType::UInt16: if constexpr (Set & kUInts) { fn(uint16_t{}); return; } break;
    case ScalarType::UInt32: if constexpr (Set & kUInts) { fn(uint32_t{}); return; } break;
    case ScalarType::UInt64: if constexpr (Set & kUInts) { fn(uint64_t{}); return; } break;
    default: break;
  }
  unsupported_dtype(op, t);
}

template <typename T>
constexpr ScalarType scalar_type_of() {
  if constexpr (std::is_same_v<T, uint8_t>) return ScalarType::Byte;
  else if constexpr (std::is_same_v<T, int8_t>) return ScalarType::Char;
  else if constexpr (std::is_same_v<T, int16_t>) return ScalarType::Short;
  else if constexpr (std::is_same_v<T, int32_t>) return ScalarType::Int;
  else if constexpr (std::is_same_v<T, int64_t>) return ScalarType::Long;
  else if constexpr (std::is_same_v<T, float>) return ScalarType::Float;
  else if constexpr (std::is_same_v<T, double>) return ScalarType::Double;
  else if constexpr (std::is_same_v<T, Half>) return ScalarType::Half;
  else if constexpr (std::is_same_v<T, BFloat16>) return ScalarType::BFloat16;
  else if constexpr (std::is_same_v<T, bool>) return ScalarType::Bool;
  else if constexpr (std::is_same_v<T, uint16_t>) return ScalarType::UInt16;
  else if constexpr (std::is_same_v<T, uint32_t>) return ScalarType::UInt32;
  else return ScalarType::UInt64;
}

/// Reads element `offset` (in elements) of a tensor of type `t` as double; writes likewise. Slow: for
/// generic paths (Scalar arguments, mixed-dtype fallbacks) only.
double load_as_double(ScalarType t, const void* base, int64_t offset);
void store_from_double(ScalarType t, void* base, int64_t offset, double v);
int64_t load_as_int(ScalarType t, const void* base, int64_t offset);

// ---------------------------------------------------------------------------------------------------------
// Type promotion (torch.result_type rules).

/// promote_types(a, b) as PyTorch: bool < integers < floats, with int8/uint8 -> int16 etc.
ScalarType promote_types(ScalarType a, ScalarType b);
/// Result type of `tensor op scalar`: the scalar only raises the category (bool -> int -> float), not the width.
ScalarType promote_with_scalar(ScalarType tensor_type, const Scalar& s);
/// Result type when both operands are tensors, where 0-d tensors act like scalars (PyTorch's dimension
/// categories: a 0-d tensor does not widen a dimensioned tensor of the same category).
ScalarType result_type(const Tensor& a, const Tensor& b);
/// can_cast(from, to) as torch.can_cast (no float->int, no non-bool->bool).
bool can_cast(ScalarType from, ScalarType to);

// ---------------------------------------------------------------------------------------------------------
// Shapes.

/// Wraps a possibly negative dim into [0, rank); rank 0 accepts -1 and 0. Fails the kernel otherwise.
int64_t normalize_dim(int64_t dim, int64_t rank, const char* op);
/// A shape of at most kMaxTensorRank dims held in place: what kernels compute on every call, without an
/// allocation (a small model's many small operators paid two per binary call).
struct InlineShape {
  // Only [0, rank) is set, copied or read: zeroing all 16 dims took a third of a broadcast's shape check.
  std::array<int64_t, kMaxTensorRank> dims;
  size_t rank = 0;
  InlineShape() = default;
  InlineShape(const InlineShape& other) : rank(other.rank) { std::copy_n(other.dims.begin(), rank, dims.begin()); }
  InlineShape& operator=(const InlineShape& other) {
    rank = other.rank;
    std::copy_n(other.dims.begin(), rank, dims.begin());
    return *this;
  }
  std::span<const int64_t> span() const { return {dims.data(), rank}; }
  operator std::span<const int64_t>() const { return span(); }  // NOLINT: a shape wherever one is taken
  std::vector<int64_t> to_vector() const { return {dims.begin(), dims.begin() + static_cast<ptrdiff_t>(rank)}; }
  /// A tensor's sizes (at most kMaxTensorRank dims, as every tensor has).
  static InlineShape of(std::span<const int64_t> sizes) {
    InlineShape shape;
    shape.rank = std::min(sizes.size(), shape.dims.size());
    std::copy_n(sizes.begin(), shape.rank, shape.dims.begin());
    return shape;
  }
  int64_t& operator[](size_t i) { return dims[i]; }
};

/// Broadcast shape of two shapes; fails the kernel with both shapes in the message when incompatible.
InlineShape broadcast_shapes(std::span<const int64_t> a, std::span<const int64_t> b, const char* op);
std::string shape_str(std::span<const int64_t> shape);
/// Resizes `out` to `shape`, failing the kernel with the op name when the output cannot take it.
void resize_output(Tensor& out, std::span<const int64_t> shape, const char* op);
inline void resize_output(Tensor& out, std::initializer_list<int64_t> shape, const char* op) {
  resize_output(out, std::span<const int64_t>(shape.begin(), shape.size()), op);
}

/// Strides of `t` seen from a broadcast shape of rank `rank`: missing leading dims and size-1 dims get 0.
std::array<int64_t, kMaxTensorRank> broadcast_strides(const Tensor& t, std::span<const int64_t> out_shape);

/// Calls fn(offsets) for every logical index of `shape` (row-major order), where offsets[k] is the element
/// offset into operand k given its (broadcast) strides. N operands, each with `shape.size()` strides.
template <size_t N, typename F>
inline void for_each_index(std::span<const int64_t> shape, const std::array<const int64_t*, N>& strides, F&& fn) {
  const int rank = static_cast<int>(shape.size());
  int64_t numel = 1;
  for (int64_t s : shape) numel *= s;
  if (numel == 0) return;
  std::array<int64_t, N> off{};
  if (rank == 0) { fn(off); return; }
  int64_t idx[kMaxTensorRank] = {};
  const int64_t inner = shape[rank - 1];
  std::array<int64_t, N> inner_stride;
  for (size_t k = 0; k < N; ++k) inner_stride[k] = strides[k][rank - 1];
  for (int64_t outer = 0, n_outer = numel / inner; outer < n_outer; ++outer) {
    std::array<int64_t, N> o = off;
    for (int64_t i = 0; i < inner; ++i) {
      fn(o);
      for (size_t k = 0; k < N; ++k) o[k] += inner_stride[k];
    }
    // advance the outer index (dims rank-2 .. 0)
    for (int d = rank - 2; d >= 0; --d) {
      if (++idx[d] < shape[d]) {
        for (size_t k = 0; k < N; ++k) off[k] += strides[k][d];
        break;
      }
      for (size_t k = 0; k < N; ++k) off[k] -= strides[k][d] * (shape[d] - 1);
      idx[d] = 0;
    }
  }
}

}  // namespace etnp::compute
