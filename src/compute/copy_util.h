// Data movement shared by the shape, index and fill kernels: one strided copy engine (any strides, any
// sign, 0 = broadcast source, optional dtype conversion, memcpy/fill/tiled-transpose fast paths, parallel
// for big copies) and checked Scalar conversions for fills.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include "compute/tensor_util.h"

namespace etnp::compute {

/// dst[0, n) = src[0, n) for a short run (a row of a small image, tens of floats) without a call: 32-byte moves the
/// compiler inlines, the last one overlapping. memcpy's call and dispatch cost more than such a copy.
inline void copy_short_floats(float* dst, const float* src, int64_t n) {
  if (n >= 8) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) std::memcpy(dst + i, src + i, 8 * sizeof(float));
    if (i < n) std::memcpy(dst + n - 8, src + n - 8, 8 * sizeof(float));
    return;
  }
  for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i, src + i, sizeof(float));
}

/// dst[0, n) = 0 for a short run, as copy_short_floats.
inline void zero_short_floats(float* dst, int64_t n) {
  constexpr float kZeros[8] = {};
  if (n >= 8) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) std::memcpy(dst + i, kZeros, sizeof(kZeros));
    if (i < n) std::memcpy(dst + n - 8, kZeros, sizeof(kZeros));
    return;
  }
  for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i, kZeros, sizeof(float));
}

/// Element cast as PyTorch does it (convert<>), but free of UB for floats that do not fit an integer type:
/// NaN and out-of-range values go through int64 like x86 truncation (INT64_MIN), then narrow modulo 2^n.
template <typename To, typename From>
inline To cast_element(From v) {
  if constexpr (std::is_integral_v<To> && !std::is_same_v<To, bool> && is_float_v<From>) {
    const double d = static_cast<double>(static_cast<OpMath<From>>(v));
    if constexpr (std::is_same_v<To, uint64_t>) {
      if (d >= 0.0 && d < 18446744073709551616.0) return static_cast<uint64_t>(d);
    }
    if constexpr (std::is_same_v<To, int32_t>) {
      if (d > -2147483649.0 && d < 2147483648.0) return static_cast<int32_t>(d);
      return std::numeric_limits<int32_t>::min();
    }
    const int64_t i = (d >= -9223372036854775808.0 && d < 9223372036854775808.0)
                          ? static_cast<int64_t>(d)
                          : std::numeric_limits<int64_t>::min();
    return static_cast<To>(i);
  } else {
    return convert<To>(v);
  }
}

/// Scalar -> element type T, failing the kernel (like ATen's checked_convert) when the value overflows T.
/// Integers wrap into unsigned types the way PyTorch allows (-1 -> 255 for uint8).
template <typename T>
T scalar_to(const Scalar& s, const char* op);

/// Most dims a strided copy takes (ops like repeat and pixel_shuffle split each dim in two).
constexpr int kMaxCopyRank = 2 * kMaxTensorRank;

/// Copies the `shape`-shaped block src -> dst; each side is indexed through its own element strides (any
/// sign; a 0 source stride broadcasts). Converts when the dtypes differ. dst and src must not overlap.
/// Big copies run on the global thread pool unless `parallel` is false.
void strided_copy(void* dst, ScalarType dst_type, const int64_t* dst_strides, const void* src,
                  ScalarType src_type, const int64_t* src_strides, std::span<const int64_t> shape,
                  bool parallel = true);

/// dst = src for tensors of the same shape (any dim orders, any dtypes). No-op when they are the same tensor
/// memory with the same layout and dtype.
void copy_same_shape(Tensor& dst, const Tensor& src, const char* op);

/// dst = src broadcast to dst's shape (expand semantics), converting dtype.
void copy_broadcast(Tensor& dst, const Tensor& src, const char* op);

/// Copies the elements of src into dst in row-major logical order (view/reshape semantics); numel must match.
void copy_flat(Tensor& dst, const Tensor& src, const char* op);

/// Fills every element of `t` with the scalar (checked conversion to t's dtype).
void fill_with_scalar(Tensor& t, const Scalar& s, const char* op);

/// Contiguous (row-major) strides for a shape (zero sizes count as 1, like Tensor).
void contiguous_strides(std::span<const int64_t> shape, int64_t* strides);

/// Product of sizes.
int64_t numel_of(std::span<const int64_t> shape);

/// Fails the kernel unless `index` has an integer index dtype (int64/int32; with allow_bool, bool/uint8 masks).
void check_index_dtype(const Tensor& index, const char* op, bool allow_bool = false);

/// The values of an integer tensor in row-major logical order, as int64.
void gather_as_int64(const Tensor& t, std::vector<int64_t>& out);

}  // namespace etnp::compute
