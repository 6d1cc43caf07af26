// Machinery shared by the elementwise kernel families (unary.cpp, binary.cpp, compare.cpp).
//
// An elementwise kernel picks a compute type C (PyTorch's "opmath" of the common dtype: float for the 16-bit
// floats), loads every input as C, applies a scalar functor and converts the functor's result R to the output's
// dtype. apply() walks the broadcast operands in the output's memory order with adjacent dimensions merged, so
// contiguous and same-layout (e.g. channels-last) operands become one flat loop. Operands that already have
// the compute type and a unit or zero inner stride are read in place (the fast, vectorizable path); the others
// are converted block by block into stack buffers. Big tensors are split across the thread pool.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "etnp/threadpool.h"
#include "kernels/kernel_util.h"

namespace etnp::kernels::ew {

// ---------------------------------------------------------------------------------------------------------
// Conversions that are defined for every input (C++ leaves float -> int out of range undefined).

/// float/double -> integer: truncates toward zero; NaN and out-of-range values give what x86's cvtt*
/// instructions give (the type's minimum for 32/64-bit targets, via int32 for narrower ones), without UB.
template <typename To, typename F>
inline To float_to_int(F v) {
  static_assert(std::is_floating_point_v<F> && std::is_integral_v<To>);
  if constexpr (std::is_same_v<To, bool>) {
    return v != F(0);
  } else if constexpr (sizeof(To) == 8 && std::is_signed_v<To>) {
    if (v >= F(-9223372036854775808.0) && v < F(9223372036854775808.0)) return static_cast<To>(v);
    return std::numeric_limits<To>::min();
  } else if constexpr (sizeof(To) == 4 && std::is_signed_v<To>) {
    if (v >= F(-2147483648.0) && v < F(2147483648.0)) return static_cast<To>(v);
    return std::numeric_limits<To>::min();
  } else if constexpr (sizeof(To) < 4) {
    return static_cast<To>(float_to_int<int32_t>(v));  // modular narrowing (C++20)
  } else {
    return static_cast<To>(float_to_int<int64_t>(v));  // uint32/uint64
  }
}

template <typename T>
constexpr bool is_half_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

/// Element conversion as a PyTorch cast (anything -> bool is "!= 0", float -> int truncates) with no UB.
template <typename To, typename From>
inline To cast_to(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (is_half_v<From>) {
    return cast_to<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (is_half_v<To>) {
    return To(static_cast<float>(v));
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    return float_to_int<To>(v);
  } else {
    return static_cast<To>(v);
  }
}

/// A Scalar argument converted to the compute type.
template <typename C>
inline C scalar_to(const Scalar& s) {
  if (s.is_floating()) return cast_to<C>(s.d);
  if (s.is_bool()) return cast_to<C>(s.b);
  return cast_to<C>(s.i);
}

// Wrapping integer arithmetic (signed overflow is UB in C++, two's-complement wrap in PyTorch).
template <typename T>
using WideUnsigned = std::conditional_t<(sizeof(T) <= 4), uint32_t, uint64_t>;
template <typename T>
inline T wrap_add(T a, T b) {
  return static_cast<T>(static_cast<WideUnsigned<T>>(a) + static_cast<WideUnsigned<T>>(b));
}
template <typename T>
inline T wrap_sub(T a, T b) {
  return static_cast<T>(static_cast<WideUnsigned<T>>(a) - static_cast<WideUnsigned<T>>(b));
}
template <typename T>
inline T wrap_mul(T a, T b) {
  return static_cast<T>(static_cast<WideUnsigned<T>>(a) * static_cast<WideUnsigned<T>>(b));
}
template <typename T>
inline T wrap_neg(T a) {
  return static_cast<T>(WideUnsigned<T>(0) - static_cast<WideUnsigned<T>>(a));
}

// ---------------------------------------------------------------------------------------------------------
// dtype rules.

/// The type arithmetic runs in for a common dtype: Float for Half/BFloat16, the dtype itself otherwise.
inline ScalarType compute_type_for(ScalarType common) {
  return common == ScalarType::Half || common == ScalarType::BFloat16 ? ScalarType::Float : common;
}

/// torch.result_type over several tensors: 0-d tensors only raise the category (bool < int < float) of the
/// dimensioned ones, as in PyTorch.
inline ScalarType result_type_of(std::span<const Tensor* const> tensors) {
  bool have_dim = false, have_zero = false;
  ScalarType dim_type = ScalarType::Bool, zero_type = ScalarType::Bool;
  for (const Tensor* t : tensors) {
    if (t->dim() > 0) {
      dim_type = have_dim ? promote_types(dim_type, t->dtype()) : t->dtype();
      have_dim = true;
    } else {
      zero_type = have_zero ? promote_types(zero_type, t->dtype()) : t->dtype();
      have_zero = true;
    }
  }
  if (!have_dim) return zero_type;
  if (!have_zero || is_floating_type(dim_type)) return dim_type;
  if (dim_type == ScalarType::Bool || is_floating_type(zero_type)) return promote_types(dim_type, zero_type);
  return dim_type;
}

/// Fails with PyTorch's message when the common dtype cannot be written to `out` (e.g. float into int).
inline void check_can_cast(ScalarType common, const Tensor& out, const char* op) {
  if (!can_cast(common, out.dtype())) {
    kernel_fail(std::string(op) + ": result type " + std::string(scalar_type_name(common)) +
                " can't be cast to the desired output type " + std::string(scalar_type_name(out.dtype())));
  }
}

/// Resizes `out` to the broadcast shape of `inputs`; fails the kernel when they are incompatible.
inline void resize_to_broadcast(Tensor& out, std::span<const Tensor* const> inputs, const char* op) {
  if (inputs.size() == 1) {
    resize_output(out, inputs[0]->sizes(), op);
    return;
  }
  InlineShape shape = broadcast_shapes(inputs[0]->sizes(), inputs[1]->sizes(), op);
  for (size_t k = 2; k < inputs.size(); ++k) shape = broadcast_shapes(shape, inputs[k]->sizes(), op);
  resize_output(out, shape, op);
}

[[noreturn]] inline void fail_integer_division_by_zero(const char* op) {
  kernel_fail(std::string(op) + ": ZeroDivisionError (integer division by zero)");
}

/// Fails unless `t`'s dtype is in the set (for inputs whose dtype the compute type does not cover).
inline void fail_unsupported(const char* op, const Tensor& t) { unsupported_dtype(op, t.dtype()); }

// ---------------------------------------------------------------------------------------------------------
// Block conversion between storage types and the compute type.

template <typename C, typename T>
void load_block(const void* base, int64_t offset, int64_t stride, int64_t n, C* dst) {
  if constexpr (std::is_same_v<T, bool>) {
    // Read bool storage as bytes: a byte other than 0/1 (malformed data) is "true", not undefined behaviour.
    const uint8_t* p = static_cast<const uint8_t*>(base) + offset;
    for (int64_t i = 0; i < n; ++i) dst[i] = cast_to<C>(p[i * stride] != 0);
  } else {
    const T* p = static_cast<const T*>(base) + offset;
    for (int64_t i = 0; i < n; ++i) dst[i] = cast_to<C>(p[i * stride]);
  }
}

template <typename R, typename T>
void store_block(const R* src, int64_t n, void* base, int64_t offset, int64_t stride) {
  T* p = static_cast<T*>(base) + offset;
  for (int64_t i = 0; i < n; ++i) p[i * stride] = cast_to<T>(src[i]);
}

template <typename C>
using LoadBlockFn = void (*)(const void*, int64_t, int64_t, int64_t, C*);
template <typename R>
using StoreBlockFn = void (*)(const R*, int64_t, void*, int64_t, int64_t);

template <typename C>
LoadBlockFn<C> load_block_fn(ScalarType t, const char* op) {
  LoadBlockFn<C> fn = nullptr;
  dispatch<kAllTypes>(t, op, [&](auto tag) { fn = &load_block<C, decltype(tag)>; });
  return fn;
}

template <typename R>
StoreBlockFn<R> store_block_fn(ScalarType t, const char* op) {
  StoreBlockFn<R> fn = nullptr;
  dispatch<kAllTypes>(t, op, [&](auto tag) { fn = &store_block<R, decltype(tag)>; });
  return fn;
}

// ---------------------------------------------------------------------------------------------------------
// Iteration layout.

/// Operands broadcast to the output shape, in the output's memory order (outermost first), with size-1
/// dimensions dropped and adjacent dimensions merged where every operand allows. Operand 0 is the output.
template <size_t N>
struct Layout {
  int rank = 1;
  int64_t numel = 0;
  // Only [0, rank) is ever written or read: zeroing every dim of every operand (512 bytes for a binary op) cost
  // more than the small ops of a recurrent network compute.
  std::array<int64_t, kMaxTensorRank> sizes;
  std::array<std::array<int64_t, kMaxTensorRank>, N> strides;
};

template <size_t N>
Layout<N> make_layout(const Tensor& out, const std::array<const Tensor*, N - 1>& inputs) {
  Layout<N> layout;
  layout.numel = out.numel();
  const int rank = out.dim();
  std::array<std::array<int64_t, kMaxTensorRank>, N> logical;  // [0, rank) of each operand is set below
  for (int d = 0; d < rank; ++d) logical[0][d] = out.size(d) == 1 ? 0 : out.stride(d);
  for (size_t k = 1; k < N; ++k) logical[k] = broadcast_strides(*inputs[k - 1], out.sizes());
  const auto order = out.dim_order();
  int r = 0;
  for (int i = 0; i < rank; ++i) {
    const int d = order[i];
    const int64_t size = out.size(d);
    if (size == 1) continue;
    bool merge = r > 0;
    for (size_t k = 0; k < N && merge; ++k) merge = layout.strides[k][r - 1] == logical[k][d] * size;
    if (merge) {
      layout.sizes[r - 1] *= size;
      for (size_t k = 0; k < N; ++k) layout.strides[k][r - 1] = logical[k][d];
      continue;
    }
    layout.sizes[r] = size;
    for (size_t k = 0; k < N; ++k) layout.strides[k][r] = logical[k][d];
    ++r;
  }
  if (r == 0) {  // a single element
    layout.sizes[0] = 1;
    r = 1;
  }
  layout.rank = r;
  return layout;
}

/// Calls fn(offsets, n) for consecutive runs along the innermost dimension covering the flat (row-major over
/// the layout) element range [begin, end); offsets[k] is operand k's element offset at the run's start.
template <size_t N, typename F>
void for_each_run(const Layout<N>& layout, int64_t begin, int64_t end, F&& fn) {
  if (begin >= end) return;
  const int r = layout.rank;
  int64_t idx[kMaxTensorRank] = {};
  int64_t rem = begin;
  for (int d = r - 1; d >= 0; --d) {
    idx[d] = rem % layout.sizes[d];
    rem /= layout.sizes[d];
  }
  std::array<int64_t, N> off{};
  for (size_t k = 0; k < N; ++k) {
    for (int d = 0; d < r; ++d) off[k] += idx[d] * layout.strides[k][d];
  }
  const int64_t inner = layout.sizes[r - 1];
  int64_t pos = begin;
  while (true) {
    const int64_t n = std::min(inner - idx[r - 1], end - pos);
    fn(off, n);
    pos += n;
    if (pos >= end) return;
    // The run ended at the end of a row: rewind the inner index and carry into the outer dimensions.
    for (size_t k = 0; k < N; ++k) off[k] -= idx[r - 1] * layout.strides[k][r - 1];
    idx[r - 1] = 0;
    for (int d = r - 2; d >= 0; --d) {
      if (++idx[d] < layout.sizes[d]) {
        for (size_t k = 0; k < N; ++k) off[k] += layout.strides[k][d];
        break;
      }
      for (size_t k = 0; k < N; ++k) off[k] -= layout.strides[k][d] * (layout.sizes[d] - 1);
      idx[d] = 0;
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// The elementwise engine.

inline constexpr int64_t kBlock = 256;
/// Elements per parallel chunk for cheap ops (add, mul, compare, ...).
inline constexpr int64_t kCheapGrain = 1 << 15;
/// Elements per parallel chunk for transcendental ops (exp, tanh, erf, ...).
inline constexpr int64_t kCostlyGrain = 1 << 11;

/// dst[i] = op(src...[i]) over n elements, where a broadcast source holds one value for all i.
template <typename C, typename R, size_t NIN, typename Op>
inline void compute_block(R* dst, const std::array<const C*, NIN>& src, const std::array<bool, NIN>& bcast,
                          int64_t n, Op& op) {
  if constexpr (NIN == 1) {
    const C* a = src[0];
    if (bcast[0]) {
      const R v = op(a[0]);
      for (int64_t i = 0; i < n; ++i) dst[i] = v;
    } else {
      for (int64_t i = 0; i < n; ++i) dst[i] = op(a[i]);
    }
  } else if constexpr (NIN == 2) {
    const C* a = src[0];
    const C* b = src[1];
    if (!bcast[0] && !bcast[1]) {
      for (int64_t i = 0; i < n; ++i) dst[i] = op(a[i], b[i]);
    } else if (!bcast[0]) {
      const C bv = b[0];
      for (int64_t i = 0; i < n; ++i) dst[i] = op(a[i], bv);
    } else if (!bcast[1]) {
      const C av = a[0];
      for (int64_t i = 0; i < n; ++i) dst[i] = op(av, b[i]);
    } else {
      const R v = op(a[0], b[0]);
      for (int64_t i = 0; i < n; ++i) dst[i] = v;
    }
  } else {
    [&]<size_t... I>(std::index_sequence<I...>) {
      for (int64_t i = 0; i < n; ++i) dst[i] = op(src[I][bcast[I] ? 0 : i]...);
    }(std::make_index_sequence<NIN>{});
  }
}

/// out[i] = cast<out dtype>(op(cast<C>(inputs[i])...)) over the broadcast of `inputs`, which `out` must
/// already have been resized to. `op` must not throw (it may run on several threads at once).
template <typename C, typename R, size_t NIN, typename Op>
void apply(KernelContext& ctx, Tensor& out, const std::array<const Tensor*, NIN>& inputs, Op op,
           int64_t grain = kCheapGrain, const char* opname = "elementwise") {
  constexpr size_t N = NIN + 1;
  const int64_t numel = out.numel();
  if (numel == 0) return;
  constexpr ScalarType kC = scalar_type_of<C>();
  constexpr ScalarType kR = scalar_type_of<R>();

  // A malformed program could hand over a tensor without storage; fail instead of dereferencing null.
  if (out.data() == nullptr) kernel_fail(std::string(opname) + ": output tensor has no data");
  for (size_t k = 0; k < NIN; ++k) {
    if (inputs[k]->data() == nullptr && inputs[k]->numel() > 0) {
      kernel_fail(std::string(opname) + ": input " + std::to_string(k) + " has no data");
    }
  }

  std::array<const void*, NIN> in_data{};
  std::array<bool, NIN> in_direct{};
  std::array<LoadBlockFn<C>, NIN> in_load{};
  for (size_t k = 0; k < NIN; ++k) {
    in_data[k] = inputs[k]->data();
    // bool inputs always go through load_block (see there)
    in_direct[k] = inputs[k]->dtype() == kC && kC != ScalarType::Bool;
    if (!in_direct[k]) in_load[k] = load_block_fn<C>(inputs[k]->dtype(), opname);
  }
  void* out_data = out.data();
  const bool out_direct = out.dtype() == kR;
  const StoreBlockFn<R> out_store = out_direct ? nullptr : store_block_fn<R>(out.dtype(), opname);

  // Processes n consecutive elements along the innermost dimension, in blocks of kBlock.
  // Not inlined: the flat and the strided paths, serial and parallel, call it, and one copy of its vectorized
  // loops per apply() instead of four keeps the kernels quicker to compile (it costs one call per run).
  auto run = [&](const std::array<int64_t, N>& offsets, int64_t n, const std::array<int64_t, N>& inner)
                 __attribute__((noinline)) {
    C buffers[NIN][kBlock];
    R out_buffer[kBlock];
    std::array<int64_t, N> off = offsets;
    for (int64_t done = 0; done < n;) {
      const int64_t m = std::min(kBlock, n - done);
      std::array<const C*, NIN> src{};
      std::array<bool, NIN> bcast{};
      for (size_t k = 0; k < NIN; ++k) {
        const int64_t s = inner[k + 1];
        bcast[k] = s == 0;
        if (in_direct[k] && (s == 0 || s == 1)) {
          src[k] = static_cast<const C*>(in_data[k]) + off[k + 1];
        } else {
          in_load[k] ? in_load[k](in_data[k], off[k + 1], s, s == 0 ? 1 : m, buffers[k])
                     : load_block<C, C>(in_data[k], off[k + 1], s, s == 0 ? 1 : m, buffers[k]);
          src[k] = buffers[k];
        }
      }
      const bool write_in_place = out_direct && inner[0] == 1;
      R* dst = write_in_place ? static_cast<R*>(out_data) + off[0] : out_buffer;
      compute_block<C, R, NIN>(dst, src, bcast, m, op);
      if (!write_in_place) {
        out_store ? out_store(out_buffer, m, out_data, off[0], inner[0])
                  : store_block<R, R>(out_buffer, m, out_data, off[0], inner[0]);
      }
      for (size_t k = 0; k < N; ++k) off[k] += m * inner[k];
      done += m;
    }
  };

  // Fast path: every operand contiguous in the output's element order (or a single element), so the whole tensor
  // is one run and no layout needs building.
  // An operand that broadcasts to the output with as many elements differs from its shape by leading or inner
  // 1s at most ([48] against [1, 48]: a recurrent cell's bias), so its row-major order is the output's.
  bool flat = out.is_contiguous_order();
  for (size_t k = 0; k < NIN && flat; ++k) {
    const Tensor& t = *inputs[k];
    flat = t.numel() == 1 || (t.numel() == numel && t.is_contiguous_order());
  }
  ThreadPool* pool = ctx.pool();
  const bool parallel = pool != nullptr && numel >= 2 * grain && pool->num_threads() > 1;
  if (flat) {
    std::array<int64_t, N> inner{};
    inner[0] = 1;
    for (size_t k = 0; k < NIN; ++k) inner[k + 1] = inputs[k]->numel() == 1 ? 0 : 1;
    auto chunk = [&](int64_t begin, int64_t end) {
      std::array<int64_t, N> off{};
      for (size_t k = 0; k < N; ++k) off[k] = begin * inner[k];
      run(off, end - begin, inner);
    };
    if (parallel) {
      pool->parallel_for(static_cast<size_t>(numel), static_cast<size_t>(grain),
                         [&](size_t b, size_t e) { chunk(static_cast<int64_t>(b), static_cast<int64_t>(e)); });
    } else {
      chunk(0, numel);
    }
    return;
  }

  const Layout<N> layout = make_layout<N>(out, inputs);
  std::array<int64_t, N> inner{};
  for (size_t k = 0; k < N; ++k) inner[k] = layout.strides[k][layout.rank - 1];
  // Rows of contiguous or broadcast values, as a squeeze-excitation gate's [C, H * W] * [C, 1] after the layout
  // merged H and W: straight to compute_block per row. The general loop's setup per run cost more than a row of a
  // small map takes (MobileNetV3's gates on 2x2 maps: 576 rows of 4).
  bool rows = layout.rank == 2 && out_direct && inner[0] == 1;
  for (size_t k = 0; k < NIN && rows; ++k) rows = in_direct[k] && (inner[k + 1] == 0 || inner[k + 1] == 1);
  if (rows) {
    const int64_t cols = layout.sizes[1];
    std::array<bool, NIN> bcast{};
    for (size_t k = 0; k < NIN; ++k) bcast[k] = inner[k + 1] == 0;
    auto row_range = [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        std::array<const C*, NIN> src{};
        for (size_t k = 0; k < NIN; ++k) src[k] = static_cast<const C*>(in_data[k]) + r * layout.strides[k + 1][0];
        compute_block<C, R, NIN>(static_cast<R*>(out_data) + r * layout.strides[0][0], src, bcast, cols, op);
      }
    };
    const int64_t row_count = layout.sizes[0];
    if (parallel) {
      pool->parallel_for(static_cast<size_t>(row_count), static_cast<size_t>(std::max<int64_t>(1, grain / cols)),
                         [&](size_t b, size_t e) { row_range(static_cast<int64_t>(b), static_cast<int64_t>(e)); });
    } else {
      row_range(0, row_count);
    }
    return;
  }
  auto range = [&](int64_t begin, int64_t end) {
    for_each_run(layout, begin, end, [&](const std::array<int64_t, N>& off, int64_t n) { run(off, n, inner); });
  };
  if (parallel) {
    pool->parallel_for(static_cast<size_t>(numel), static_cast<size_t>(grain),
                       [&](size_t b, size_t e) { range(static_cast<int64_t>(b), static_cast<int64_t>(e)); });
  } else {
    range(0, numel);
  }
}

/// A Scalar argument as a 0-d operand of the compute type, so Tensor-Scalar overloads share the
/// Tensor-Tensor loops (as a stride-0 operand).
template <typename C>
struct ScalarOperand {
  C value;
  Tensor tensor;
  explicit ScalarOperand(C v) : value(v), tensor(scalar_type_of<C>(), {}, {}, &value) {}
  ScalarOperand(const ScalarOperand&) = delete;
  ScalarOperand& operator=(const ScalarOperand&) = delete;
};

// ---------------------------------------------------------------------------------------------------------
// Dispatch helpers.

/// Calls fn(C{}) with the compute type of `common` (Half/BFloat16 -> float), restricted to `Set`.
template <unsigned Set, typename F>
inline void dispatch_compute(ScalarType common, const char* op, F&& fn) {
  const ScalarType c = compute_type_for(common);
  if (c != common && !(Set & kHalfs)) unsupported_dtype(op, common);
  dispatch<Set & ~unsigned(kHalfs)>(c, op, fn);
}

/// The compute type of floating ops (exp, sqrt, div, atan2, ...): the input's float type, float for
/// integer and bool inputs (PyTorch's default dtype), double stays double.
inline ScalarType float_common_type(ScalarType t) { return is_floating_type(t) ? t : ScalarType::Float; }

}  // namespace etnp::kernels::ew
