// Reductions: sum, mean, amax/amin, argmax/argmin, any, max/min (with indices and full), prod, var, var_mean,
// plus the scans cumsum and topk. A ReducePlan splits the input's dims into kept and reduced ones (any dim
// order, strides only); each output element folds its reduced elements in row-major order of the reduced
// dims, so the position in that order is the flat index argmax/argmin report. Floating sums accumulate in
// double (ATen's CPU cumsum does too; for sum/var it only makes the float results more accurate), except the
// float32 mean: the official runtime adds its float32 elements one by one in float32 and divides by the count
// in float32, and an LLM's RMSNorm (mean of squares) feeding int8 quantization turns any 1-ulp difference
// there into visible differences downstream, so etnp folds it the same way.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "etnp/threadpool.h"
#include "kernels/kernel_util.h"
#include "kernels/register.h"

namespace etnp::kernels {
namespace {

/// Which input dims are reduced. `dims` empty (or None) means all of them.
std::vector<bool> reduce_mask(int rank, const std::vector<int64_t>& dims, const char* op) {
  std::vector<bool> mask(static_cast<size_t>(rank), dims.empty());
  for (int64_t d : dims) {
    const auto nd = static_cast<size_t>(normalize_dim(d, rank, op));
    if (rank == 0) continue;
    ETNP_KERNEL_CHECK(!mask[nd], op << ": dim " << nd << " appears multiple times in the list of dims");
    mask[nd] = true;
  }
  return mask;
}

/// Reads an `int[1]? dim` argument (None -> empty).
std::vector<int64_t> dim_list_arg(const EValue& v) {
  if (v.is_none()) return {};
  return v.to_int_list().to_vector();
}

struct ReducePlan {
  int rank = 0;
  bool keepdim = false;
  std::vector<bool> mask;
  std::vector<int64_t> out_shape;
  std::vector<int64_t> kept_sizes, kept_in;  // kept dims, input logical order
  std::vector<int64_t> red_sizes, red_in;    // reduced dims, input logical order
  int64_t out_numel = 1, red_numel = 1;

  /// Strides of `out` for the kept dims (call after resizing out to out_shape).
  std::vector<int64_t> out_strides(const Tensor& out) const {
    std::vector<int64_t> s;
    int j = 0;
    for (int d = 0; d < rank; ++d) {
      if (!mask[static_cast<size_t>(d)]) s.push_back(out.stride(keepdim ? d : j));
      if (!mask[static_cast<size_t>(d)] || keepdim) ++j;
    }
    if (s.empty()) s.push_back(0);
    return s;
  }
};

ReducePlan make_plan(const Tensor& in, std::vector<bool> mask, bool keepdim) {
  ReducePlan p;
  p.rank = in.dim();
  p.keepdim = keepdim;
  p.mask = std::move(mask);
  for (int d = 0; d < p.rank; ++d) {
    const int64_t size = in.size(d);
    if (p.mask[static_cast<size_t>(d)]) {
      p.red_sizes.push_back(size);
      p.red_in.push_back(in.stride(d));
      p.red_numel *= size;
      if (keepdim) p.out_shape.push_back(1);
    } else {
      p.kept_sizes.push_back(size);
      p.kept_in.push_back(in.stride(d));
      p.out_numel *= size;
      p.out_shape.push_back(size);
    }
  }
  // Rank-0 iteration helpers need at least one dim.
  if (p.kept_sizes.empty()) {
    p.kept_sizes.push_back(1);
    p.kept_in.push_back(0);
  }
  return p;
}

/// Calls fn(in_base, out_offsets...) for every output element (up to two outputs).
template <typename F>
void for_each_output(const ReducePlan& p, const std::vector<int64_t>& out0, const std::vector<int64_t>& out1, F&& fn) {
  for_each_index<3>(p.kept_sizes, {p.kept_in.data(), out0.data(), out1.data()},
                    [&](const std::array<int64_t, 3>& off) { fn(off[0], off[1], off[2]); });
}

/// Calls fn(in_offset) for each reduced element of the output whose input base offset is `base`, in
/// row-major order of the reduced dims; fn returns false to stop early.
template <typename F>
void for_each_reduced(const ReducePlan& p, int64_t base, F&& fn) {
  const size_t n = p.red_sizes.size();
  if (n == 0) {
    fn(base);
    return;
  }
  if (n == 1) {
    const int64_t size = p.red_sizes[0], stride = p.red_in[0];
    for (int64_t i = 0; i < size; ++i) {
      if (!fn(base + i * stride)) return;
    }
    return;
  }
  int64_t idx[kMaxTensorRank] = {};
  int64_t off = base;
  for (int64_t i = 0; i < p.red_numel; ++i) {
    if (!fn(off)) return;
    for (int d = static_cast<int>(n) - 1; d >= 0; --d) {
      const auto ud = static_cast<size_t>(d);
      if (++idx[d] < p.red_sizes[ud]) {
        off += p.red_in[ud];
        break;
      }
      off -= p.red_in[ud] * (p.red_sizes[ud] - 1);
      idx[d] = 0;
    }
  }
}

void check_nonempty_reduction(const ReducePlan& p, const char* op) {
  for (size_t i = 0; i < p.red_sizes.size(); ++i) {
    ETNP_KERNEL_CHECK(p.red_sizes[i] != 0, op << ": expected reduction dims to have non-zero size");
  }
}

/// The accumulator of sums/products for element type T: double for floats, uint64 (wrapping) for integers.
template <typename T>
using SumAcc = std::conditional_t<is_float_v<T>, double, uint64_t>;

template <typename T>
T from_sum_acc(SumAcc<T> acc) {
  if constexpr (is_float_v<T>) {
    return convert<T>(acc);
  } else if constexpr (std::is_same_v<T, bool>) {
    return acc != 0;
  } else {
    return static_cast<T>(acc);  // modular
  }
}

template <typename T>
SumAcc<T> to_sum_acc(T v) {
  if constexpr (is_float_v<T>) {
    return static_cast<double>(static_cast<OpMath<T>>(v));
  } else {
    return static_cast<uint64_t>(static_cast<int64_t>(v));
  }
}

template <typename T>
bool is_nan_value(T v) {
  if constexpr (is_float_v<T>) {
    return std::isnan(static_cast<float>(static_cast<OpMath<T>>(v)));
  } else {
    return false;
  }
}

std::optional<ScalarType> dtype_arg(const EValue& v) {
  if (v.is_none()) return std::nullopt;
  return static_cast<ScalarType>(v.to_int());
}

void check_dtype_arg(const std::optional<ScalarType>& dtype, const Tensor& out, const char* op) {
  ETNP_KERNEL_CHECK(!dtype || *dtype == out.dtype(), op << ": dtype argument " << scalar_type_name(*dtype)
                                                        << " does not match out dtype "
                                                        << scalar_type_name(out.dtype()));
}

// ---------------------------------------------------------------------------------------------------------
// sum / prod / mean

enum class Fold { Sum, Prod, Mean };

/// The float32 mean of x[0, n), as the official runtime computes it (see the header).
float float_mean(const float* x, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) acc += x[i];
  return acc / static_cast<float>(n);
}

/// out = fold(in over plan), elements converted to out's dtype first (ATen casts self to the result dtype).
void fold_reduce(const Tensor& in, Tensor& out, const ReducePlan& plan, Fold fold, const char* op) {
  resize_output(out, plan.out_shape, op);
  // Float sums and means over trailing dims of contiguous tensors (a global average pool over NCHW): each
  // output reduces one contiguous block, summed in double in four lanes (means: float_mean).
  const bool trailing = std::is_sorted(plan.mask.begin(), plan.mask.end()) && !plan.red_sizes.empty();
  if (fold != Fold::Prod && trailing && in.dtype() == ScalarType::Float && out.dtype() == ScalarType::Float &&
      in.is_contiguous_order() && out.is_contiguous_order()) {
    const float* src = in.data_as<const float>();
    float* dst = out.data_as<float>();
    const int64_t n = plan.red_numel;
    int64_t o = 0;
    if (fold == Fold::Mean) {
      // Eight outputs at a time: eight independent chains of float adds, each in its own element order (the
      // same bits as one at a time; a single chain waits on every add's latency: RMSNorm's 96 x 576 took 40 us).
      for (; o + 8 <= plan.out_numel; o += 8) {
        float acc[8] = {};
        const float* x = src + o * n;
        for (int64_t i = 0; i < n; ++i) {
          for (int l = 0; l < 8; ++l) acc[l] += x[l * n + i];
        }
        for (int l = 0; l < 8; ++l) dst[o + l] = acc[l] / static_cast<float>(n);
      }
    }
    for (; o < plan.out_numel; ++o) {
      const float* x = src + o * n;
      if (fold == Fold::Mean) {
        dst[o] = float_mean(x, n);
        continue;
      }
      double lane[4] = {0, 0, 0, 0};
      int64_t i = 0;
      for (; i + 4 <= n; i += 4) {
        for (int l = 0; l < 4; ++l) lane[l] += static_cast<double>(x[i + l]);
      }
      double acc = (lane[0] + lane[1]) + (lane[2] + lane[3]);
      for (; i < n; ++i) acc += static_cast<double>(x[i]);
      dst[o] = static_cast<float>(acc);
    }
    return;
  }
  const std::vector<int64_t> os = plan.out_strides(out);
  if (fold == Fold::Mean && out.dtype() == ScalarType::Float) {
    float* dst = out.data_as<float>();
    const auto count = static_cast<float>(plan.red_numel);
    dispatch(in.dtype(), op, [&](auto in_tag) {
      using I = decltype(in_tag);
      const I* src = in.data_as<const I>();
      for_each_output(plan, os, os, [&](int64_t base, int64_t o, int64_t) {
        float acc = 0.0f;
        for_each_reduced(plan, base, [&](int64_t off) {
          acc += convert<float>(src[off]);
          return true;
        });
        dst[o] = acc / count;
      });
    });
    return;
  }
  dispatch(out.dtype(), op, [&](auto out_tag) {
    using O = decltype(out_tag);
    using Acc = SumAcc<O>;
    O* dst = out.data_as<O>();
    dispatch(in.dtype(), op, [&](auto in_tag) {
      using I = decltype(in_tag);
      const I* src = in.data_as<const I>();
      for_each_output(plan, os, os, [&](int64_t base, int64_t o, int64_t) {
        Acc acc = fold == Fold::Prod ? Acc(1) : Acc(0);
        if (fold == Fold::Prod) {
          for_each_reduced(plan, base, [&](int64_t off) {
            acc = acc * to_sum_acc<O>(convert<O>(src[off]));
            return true;
          });
        } else {
          for_each_reduced(plan, base, [&](int64_t off) {
            acc = acc + to_sum_acc<O>(convert<O>(src[off]));
            return true;
          });
        }
        if constexpr (is_float_v<O>) {
          if (fold == Fold::Mean) acc = acc / static_cast<double>(plan.red_numel);
        }
        dst[o] = from_sum_acc<O>(acc);
      });
    });
  });
}

// aten::sum.IntList_out(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None, Tensor(a!) out)
void sum_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "aten::sum.IntList_out";
  check_num_args(args, 6, op);
  const Tensor& in = args[0]->to_tensor();
  Tensor& out = args[4]->to_tensor();
  check_dtype_arg(dtype_arg(*args[3]), out, op);
  const ReducePlan plan = make_plan(in, reduce_mask(in.dim(), dim_list_arg(*args[1]), op), args[2]->to_bool());
  fold_reduce(in, out, plan, Fold::Sum, op);
}

void check_mean_dtypes(const Tensor& in, const Tensor& out, const std::optional<ScalarType>& dtype, const char* op) {
  check_dtype_arg(dtype, out, op);
  ETNP_KERNEL_CHECK(dtype || is_floating_type(in.dtype()),
                    op << ": could not infer output dtype; input dtype must be floating point, got "
                       << scalar_type_name(in.dtype()));
  ETNP_KERNEL_CHECK(is_floating_type(out.dtype()),
                    op << ": out must be floating point, got " << scalar_type_name(out.dtype()));
}

/// A float32 mean of a static 4-D tensor over its pixels (dims 2 and 3: a global average pooling, the squeeze of
/// a squeeze-and-excitation gate), which the load may pair in NHWC order (KernelState::keeps_channels_last). The
/// input's pixels are then runs of its channels; each channel still adds its pixels one by one in their order,
/// so the bits are those of the NCHW fold. The result, one value per channel, is the same bytes in either order.
struct MeanPixels final : KernelState {
  int64_t images = 0, channels = 0, pixels = 0;
  bool nhwc = false;
  ChannelsLastArgs keeps_channels_last() const override { return {{0}, {}, {4}}; }
  void use_channels_last(bool input, bool) override { nhwc = input; }
};

std::unique_ptr<KernelState> prepare_mean(KernelArgs args) {
  if (args.size() != 6 || !args[0]->is_tensor() || !args[4]->is_tensor() || !args[3]->is_none()) return nullptr;
  const Tensor& in = args[0]->to_tensor();
  const Tensor& out = args[4]->to_tensor();
  // The result, one value per channel, is the same bytes in either order: any float32 tensor in contiguous order.
  if (!channels_last_candidate(in, ScalarType::Float) || out.dtype() != ScalarType::Float ||
      !out.is_contiguous_order() || out.dynamism() != ShapeDynamism::Static || !args[2]->is_bool()) {
    return nullptr;
  }
  // Arguments of the wrong kind are the call's to report, with its context: here they only mean "no state".
  try {
    if (reduce_mask(4, dim_list_arg(*args[1]), "aten::mean.out") != std::vector<bool>{false, false, true, true}) {
      return nullptr;
    }
  } catch (const Error&) {
    return nullptr;
  }
  if (out.numel() != in.size(0) * in.size(1)) return nullptr;
  auto state = std::make_unique<MeanPixels>();
  state->images = in.size(0);
  state->channels = in.size(1);
  state->pixels = in.size(2) * in.size(3);
  return state;
}

/// out[n][c] = the float32 mean of in[n][p][c] over the pixels p, in pixel order (NHWC bytes).
void mean_pixels_nhwc(const float* in, int64_t images, int64_t pixels, int64_t channels, float* acc, float* out) {
  for (int64_t n = 0; n < images; ++n) {
    std::fill(acc, acc + channels, 0.0f);
    const float* x = in + n * pixels * channels;
    for (int64_t p = 0; p < pixels; ++p, x += channels) {
      for (int64_t c = 0; c < channels; ++c) acc[c] += x[c];
    }
    for (int64_t c = 0; c < channels; ++c) out[n * channels + c] = acc[c] / static_cast<float>(pixels);
  }
}

// aten::mean.out(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None, Tensor(a!) out)
void mean_out(KernelContext& ctx, KernelArgs args) {
  constexpr const char* op = "aten::mean.out";
  check_num_args(args, 6, op);
  const Tensor& in = args[0]->to_tensor();
  Tensor& out = args[4]->to_tensor();
  check_mean_dtypes(in, out, dtype_arg(*args[3]), op);
  const ReducePlan plan = make_plan(in, reduce_mask(in.dim(), dim_list_arg(*args[1]), op), args[2]->to_bool());
  const auto* state = static_cast<const MeanPixels*>(ctx.state());
  if (state != nullptr && state->nhwc) {
    // What the load paired holds NHWC bytes: only this fold may read them.
    ETNP_KERNEL_CHECK(in.dim() == 4 && in.size(0) == state->images && in.size(1) == state->channels &&
                          in.size(2) * in.size(3) == state->pixels && in.dtype() == ScalarType::Float &&
                          out.dtype() == ScalarType::Float && out.is_contiguous_order(),
                      op << ": a mean paired with its neighbours in NHWC order no longer fits its input (shape "
                         << shape_str(in.sizes()) << ")");
    resize_output(out, plan.out_shape, op);
    auto* acc = static_cast<float*>(ctx.scratch(static_cast<size_t>(state->channels) * sizeof(float)));
    mean_pixels_nhwc(in.data_as<const float>(), state->images, state->pixels, state->channels, acc,
                     out.data_as<float>());
    return;
  }
  fold_reduce(in, out, plan, Fold::Mean, op);
}

// aten::mean.dtype_out(Tensor self, *, ScalarType? dtype=None, Tensor(a!) out)
void mean_dtype_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "aten::mean.dtype_out";
  check_num_args(args, 4, op);
  const Tensor& in = args[0]->to_tensor();
  Tensor& out = args[2]->to_tensor();
  check_mean_dtypes(in, out, dtype_arg(*args[1]), op);
  const ReducePlan plan = make_plan(in, reduce_mask(in.dim(), {}, op), false);
  fold_reduce(in, out, plan, Fold::Mean, op);
}

// aten::prod.int_out(Tensor self, int dim, bool keepdim=False, *, ScalarType? dtype=None, Tensor(a!) out)
void prod_int_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "aten::prod.int_out";
  check_num_args(args, 6, op);
  const Tensor& in = args[0]->to_tensor();
  Tensor& out = args[4]->to_tensor();
  check_dtype_arg(dtype_arg(*args[3]), out, op);
  const ReducePlan plan = make_plan(in, reduce_mask(in.dim(), {args[1]->to_int()}, op), args[2]->to_bool());
  fold_reduce(in, out, plan, Fold::Prod, op);
}

// aten::prod.out(Tensor self, *, ScalarType? dtype=None, Tensor(a!) out)
void prod_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "aten::prod.out";
  check_num_args(args, 4, op);
  const Tensor& in = args[0]->to_tensor();
  Tensor& out = args[2]->to_tensor();
  check_dtype_arg(dtype_arg(*args[1]), out, op);
  const ReducePlan plan = make_plan(in, reduce_mask(in.dim(), {}, op), false);
  fold_reduce(in, out, plan, Fold::Prod, op);
}

// ---------------------------------------------------------------------------------------------------------
// amax / amin / max / min (values), any

/// out = max or min over the plan, NaN propagating; same dtype in and out.
template <bool kMax>
void extreme_reduce(const Tensor& in, Tensor& out, const ReducePlan& plan, const char* op) {
  check_same_dtype(in, out, op);
  check_nonempty_reduction(plan, op);
  resize_output(out, plan.out_shape, op);
  const std::vector<int64_t> os = plan.out_strides(out);
  dispatch<kRealTypes | kBool | kUInts>(in.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using Cmp = OpMath<T>;
    const T* src = in.data_as<const T>();
    T* dst = out.data_as<T>();
    for_each_output(plan, os, os, [&](int64_t base, int64_t o, int64_t) {
      T best = src[base];
      for_each_reduced(plan, base, [&](int64_t off) {
        const T v = src[off];
        if (is_nan_value(v)) {
          best = v;
          return false;
        }
        if (kMax ? static_cast<Cmp>(v) > static_cast<Cmp>(best) : static_cast<Cmp>(v) < static_cast<Cmp>(best)) best = v;
        return true;
      });
      dst[o] = best;
    });
  });
}

// aten::amax.out(Tensor self, int[1] dim=[], bool keepdim=False, *, Tensor(a!) out)
template <bool kMax>
void amax_amin_out(KernelContext&, KernelArgs args) {
  const char* op = kMax ? "aten::amax.out" : "aten::amin.out";
  check_num_args(args, 5, op);
  const Tensor& in = args[0]->to_tensor();
  Tensor& out = args[3]->to_tensor();
  const ReducePlan plan = make_plan(in, reduce_mask(in.dim(), dim_list_arg(*args[1]), op), args[2]->to_bool());
  extreme_reduce<kMax>(in, out, plan, op);
}

// aten::max.unary_out(Tensor self, *, Tensor(a!) out)
template <bool kMax>
void max_min_unary_out(KernelContext&, KernelArgs args) {
  const char* op = kMax ? "aten::max.unary_out" : "aten::min.unary_out";
  check_num_args(args, 3, op);
  const Tensor& in = args[0]->to_tensor();
  Tensor& out = args[1]->to_tensor();
  ETNP_KERNEL_CHECK(in.numel() > 0, op << ": operation does not have an identity (empty input)");
  const ReducePlan plan = make_plan(in, reduce_mask(in.dim(), {}, op), false);
  extreme_reduce<kMax>(in, out, plan, op);
}

void any_reduce(const Tensor& in, Tensor& out, const ReducePlan& plan, const char* op) {
  ETNP_KERNEL_CHECK(out.dtype() == ScalarType::Bool || (out.dtype() == ScalarType::Byte && in.dtype() == ScalarType::Byte),
                    op << ": out must be bool (or uint8 for uint8 input), got " << scalar_type_name(out.dtype()));
  resize_output(out, plan.out_shape, op);
  const std::vector<int64_t> os = plan.out_strides(out);
  dispatch(in.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* src = in.data_as<const T>();
    auto* dst = static_cast<uint8_t*>(out.data());  // bool and uint8 are both one byte, 0 or 1
    for_each_output(plan, os, os, [&](int64_t base, int64_t o, int64_t) {
      bool any = false;
      for_each_reduced(plan, base, [&](int64_t off) {
        any = convert<bool>(src[off]);
        return !any;
      });
      dst[o] = any ? 1 : 0;
    });
  });
}

// aten::any.out(Tensor self, int dim, bool keepdim=False, *, Tensor(a!) out)
void any_dim_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "aten::any.out";
  check_num_args(args, 5, op);
  const Tensor& in = args[0]->to_tensor();
  Tensor& out = args[3]->to_tensor();
  any_reduce(in, out, make_plan(in, reduce_mask(in.dim(), {args[1]->to_int()}, op), args[2]->to_bool()), op);
}

// aten::any.dims_out(Tensor self, int[]? dim=None, bool keepdim=False, *, Tensor(a!) out)
void any_dims_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "aten::any.dims_out";
  check_num_args(args, 5, op);
  const Tensor& in = args[0]->to_tensor();
  Tensor& out = args[3]->to_tensor();
  any_reduce(in, out, make_plan(in, reduce_mask(in.dim(), dim_list_arg(*args[1]), op), args[2]->to_bool()), op);
}

// aten::any.all_out(Tensor self, *, Tensor(a!) out)
void any_all_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "aten::any.all_out";
  check_num_args(args, 3, op);
  const Tensor& in = args[0]->to_tensor();
  Tensor& out = args[1]->to_tensor();
  any_reduce(in, out, make_plan(in, reduce_mask(in.dim(), {}, op), false), op);
}

// ---------------------------------------------------------------------------------------------------------
// Arg reductions: argmax/argmin and max.dim/min.dim. First NaN wins; ties keep the first index.

/// Writes index (and value when `values` is given) of the extreme over the plan.
template <bool kMax>
void arg_reduce(const Tensor& in, Tensor* values, Tensor& indices, const ReducePlan& plan, const char* op) {
  ETNP_KERNEL_CHECK(indices.dtype() == ScalarType::Long, op << ": indices must be int64, got "
                                                            << scalar_type_name(indices.dtype()));
  ETNP_KERNEL_CHECK(in.numel() > 0 || plan.out_numel == 0,
                    op << ": cannot reduce an empty tensor (expected reduction dim to have non-zero size)");
  check_nonempty_reduction(plan, op);
  if (values != nullptr) {
    check_same_dtype(in, *values, op);
    resize_output(*values, plan.out_shape, op);
  }
  resize_output(indices, plan.out_shape, op);
  const std::vector<int64_t> is = plan.out_strides(indices);
  const std::vector<int64_t> vs = values != nullptr ? plan.out_strides(*values) : is;
  dispatch<kRealTypes | kBool | kUInts>(in.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using Cmp = OpMath<T>;
    const T* src = in.data_as<const T>();
    int64_t* idx = indices.data_as<int64_t>();
    T* val = values != nullptr ? values->data_as<T>() : nullptr;
    for_each_output(plan, is, vs, [&](int64_t base, int64_t io, int64_t vo) {
      T best = src[base];
      int64_t best_i = 0, i = 0;
      for_each_reduced(plan, base, [&](int64_t off) {
        const T v = src[off];
        if (is_nan_value(v)) {
          best = v;
          best_i = i;
          return false;
        }
        if (kMax ? static_cast<Cmp>(v) > static_cast<Cmp>(best) : static_cast<Cmp>(v) < static_cast<Cmp>(best)) {
          best = v;
          best_i = i;
        }
        ++i;
        return true;
      });
      idx[io] = best_i;
      if (val != nullptr) val[vo] = best;
    });
  });
}

// aten::argmax.out(Tensor self, int? dim=None, bool keepdim=False, *, Tensor(a!) out)
template <bool kMax>
void argmax_argmin_out(KernelContext&, KernelArgs args) {
  const char* op = kMax ? "aten::argmax.out" : "aten::argmin.out";
  check_num_args(args, 5, op);
  const Tensor& in = args[0]->to_tensor();
  const bool keepdim = args[2]->to_bool();
  Tensor& out = args[3]->to_tensor();
  std::vector<int64_t> dims;
  if (!args[1]->is_none()) dims.push_back(args[1]->to_int());
  // dim=None reduces the flattened tensor; with keepdim the result keeps the rank with all sizes 1.
  const ReducePlan plan = make_plan(in, reduce_mask(in.dim(), dims, op), keepdim);
  arg_reduce<kMax>(in, nullptr, out, plan, op);
}

// aten::max.dim_max(Tensor self, int dim, bool keepdim=False, *, Tensor(a!) max, Tensor(b!) max_values)
template <bool kMax>
void max_min_dim_out(KernelContext&, KernelArgs args) {
  const char* op = kMax ? "aten::max.dim_max" : "aten::min.dim_min";
  check_num_args(args, 6, op);
  const Tensor& in = args[0]->to_tensor();
  Tensor& values = args[3]->to_tensor();
  Tensor& indices = args[4]->to_tensor();
  const ReducePlan plan = make_plan(in, reduce_mask(in.dim(), {args[1]->to_int()}, op), args[2]->to_bool());
  arg_reduce<kMax>(in, &values, indices, plan, op);
}

// ---------------------------------------------------------------------------------------------------------
// var / var_mean: two passes in double; divisor max(N - correction, 0) (0 gives inf or NaN, as in ATen).

void var_reduce(const Tensor& in, Tensor& var_out, Tensor* mean_out, const ReducePlan& plan, double correction,
                const char* op) {
  ETNP_KERNEL_CHECK(is_floating_type(in.dtype()), op << ": input must be floating point, got "
                                                     << scalar_type_name(in.dtype()));
  check_same_dtype(in, var_out, op);
  resize_output(var_out, plan.out_shape, op);
  if (mean_out != nullptr) {
    check_same_dtype(in, *mean_out, op);
    resize_output(*mean_out, plan.out_shape, op);
  }
  const std::vector<int64_t> vs = plan.out_strides(var_out);
  const std::vector<int64_t> ms = mean_out != nullptr ? plan.out_strides(*mean_out) : vs;
  const double n = static_cast<double>(plan.red_numel);
  const double divisor = std::max(n - correction, 0.0);
  dispatch<kFloats | kHalfs>(in.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* src = in.data_as<const T>();
    T* vdst = var_out.data_as<T>();
    T* mdst = mean_out != nullptr ? mean_out->data_as<T>() : nullptr;
    for_each_output(plan, vs, ms, [&](int64_t base, int64_t vo, int64_t mo) {
      double sum = 0;
      for_each_reduced(plan, base, [&](int64_t off) {
        sum += static_cast<double>(static_cast<OpMath<T>>(src[off]));
        return true;
      });
      const double mean = sum / n;
      double m2 = 0;
      for_each_reduced(plan, base, [&](int64_t off) {
        const double d = static_cast<double>(static_cast<OpMath<T>>(src[off])) - mean;
        m2 += d * d;
        return true;
      });
      vdst[vo] = convert<T>(m2 / divisor);
      if (mdst != nullptr) mdst[mo] = convert<T>(mean);
    });
  });
}

double correction_arg(const EValue& v) { return v.is_none() ? 1.0 : v.to_scalar().to_double(); }

// aten::var.correction_out(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False,
//   Tensor(a!) out)
void var_correction_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "aten::var.correction_out";
  check_num_args(args, 6, op);
  const Tensor& in = args[0]->to_tensor();
  Tensor& out = args[4]->to_tensor();
  const ReducePlan plan = make_plan(in, reduce_mask(in.dim(), dim_list_arg(*args[1]), op), args[3]->to_bool());
  var_reduce(in, out, nullptr, plan, correction_arg(*args[2]), op);
}

// aten::var.out(Tensor self, int[1]? dim, bool unbiased=True, bool keepdim=False, *, Tensor(a!) out)
void var_unbiased_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "aten::var.out";
  check_num_args(args, 6, op);
  const Tensor& in = args[0]->to_tensor();
  Tensor& out = args[4]->to_tensor();
  const ReducePlan plan = make_plan(in, reduce_mask(in.dim(), dim_list_arg(*args[1]), op), args[3]->to_bool());
  var_reduce(in, out, nullptr, plan, args[2]->to_bool() ? 1.0 : 0.0, op);
}

// aten::var_mean.correction_out(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False,
//   Tensor(a!) out0, Tensor(b!) out1)
void var_mean_correction_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "aten::var_mean.correction_out";
  check_num_args(args, 7, op);
  const Tensor& in = args[0]->to_tensor();
  Tensor& var = args[4]->to_tensor();
  Tensor& mean = args[5]->to_tensor();
  const ReducePlan plan = make_plan(in, reduce_mask(in.dim(), dim_list_arg(*args[1]), op), args[3]->to_bool());
  var_reduce(in, var, &mean, plan, correction_arg(*args[2]), op);
}

// ---------------------------------------------------------------------------------------------------------
// Scans along one dim.

/// Calls fn(in_offset, out_offset) for the start of every line along `dim` (the other dims row-major).
template <typename F>
void for_each_line(const Tensor& in, const Tensor& out, int dim, F&& fn) {
  std::vector<int64_t> shape(in.sizes().begin(), in.sizes().end());
  if (shape.empty()) {
    fn(0, 0);
    return;
  }
  shape[static_cast<size_t>(dim)] = 1;
  for_each_index<2>(shape, {in.strides().data(), out.strides().data()},
                    [&](const std::array<int64_t, 2>& off) { fn(off[0], off[1]); });
}

// aten::cumsum.out(Tensor self, int dim, *, ScalarType? dtype=None, Tensor(a!) out)
void cumsum_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "aten::cumsum.out";
  check_num_args(args, 5, op);
  const Tensor& in = args[0]->to_tensor();
  const int dim = static_cast<int>(normalize_dim(args[1]->to_int(), in.dim(), op));
  Tensor& out = args[3]->to_tensor();
  check_dtype_arg(dtype_arg(*args[2]), out, op);
  resize_output(out, in.sizes(), op);
  if (in.numel() == 0) return;
  const int64_t len = in.dim() == 0 ? 1 : in.size(dim);
  const int64_t xs = in.dim() == 0 ? 0 : in.stride(dim), ys = in.dim() == 0 ? 0 : out.stride(dim);
  dispatch(out.dtype(), op, [&](auto out_tag) {
    using O = decltype(out_tag);
    O* dst = out.data_as<O>();
    dispatch(in.dtype(), op, [&](auto in_tag) {
      using I = decltype(in_tag);
      const I* src = in.data_as<const I>();
      for_each_line(in, out, dim, [&](int64_t xi, int64_t yi) {
        SumAcc<O> acc = 0;
        for (int64_t i = 0; i < len; ++i) {
          acc = acc + to_sum_acc<O>(convert<O>(src[xi + i * xs]));
          dst[yi + i * ys] = from_sum_acc<O>(acc);
        }
      });
    });
  });
}

// aten::topk.values(Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True, *,
//   Tensor(a!) values, Tensor(b!) indices)
void topk_values(KernelContext&, KernelArgs args) {
  constexpr const char* op = "aten::topk.values";
  check_num_args(args, 8, op);
  const Tensor& in = args[0]->to_tensor();
  const int64_t k = args[1]->to_int();
  const int dim = static_cast<int>(normalize_dim(args[2]->to_int(), in.dim(), op));
  const bool largest = args[3]->to_bool();
  Tensor& values = args[5]->to_tensor();
  Tensor& indices = args[6]->to_tensor();
  const int64_t len = in.dim() == 0 ? 1 : in.size(dim);
  ETNP_KERNEL_CHECK(k >= 0 && k <= len, op << ": selected index k=" << k << " out of range for a dim of size " << len);
  check_same_dtype(in, values, op);
  ETNP_KERNEL_CHECK(indices.dtype() == ScalarType::Long, op << ": indices must be int64");
  std::vector<int64_t> shape(in.sizes().begin(), in.sizes().end());
  if (!shape.empty()) shape[static_cast<size_t>(dim)] = k;
  resize_output(values, shape, op);
  resize_output(indices, shape, op);
  if (values.numel() == 0) return;
  const int64_t xs = in.dim() == 0 ? 0 : in.stride(dim);
  const int64_t vs = in.dim() == 0 ? 0 : values.stride(dim), is = in.dim() == 0 ? 0 : indices.stride(dim);
  // Line starts of values and indices may differ (dim orders), so walk them side by side.
  std::vector<int64_t> value_starts;
  for_each_line(in, values, dim, [&](int64_t, int64_t vi) { value_starts.push_back(vi); });
  dispatch<kRealTypes | kBool | kUInts>(in.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using Cmp = OpMath<T>;
    const T* src = in.data_as<const T>();
    T* vdst = values.data_as<T>();
    int64_t* idst = indices.data_as<int64_t>();
    std::vector<std::pair<Cmp, int64_t>> line(static_cast<size_t>(len));
    // Total order: NaN counts as the largest value; equal values keep index order (a stable selection).
    auto before = [&](const std::pair<Cmp, int64_t>& a, const std::pair<Cmp, int64_t>& b) {
      const bool an = is_nan_value(a.first), bn = is_nan_value(b.first);
      if (an != bn) return largest ? an : bn;
      if (!an && a.first != b.first) return largest ? a.first > b.first : a.first < b.first;
      return a.second < b.second;
    };
    size_t line_no = 0;
    for_each_line(in, indices, dim, [&](int64_t xi, int64_t ii) {
      for (int64_t i = 0; i < len; ++i) line[static_cast<size_t>(i)] = {static_cast<Cmp>(src[xi + i * xs]), i};
      std::partial_sort(line.begin(), line.begin() + k, line.end(), before);
      const int64_t vi = value_starts[line_no++];
      for (int64_t i = 0; i < k; ++i) {
        const auto& e = line[static_cast<size_t>(i)];
        vdst[vi + i * vs] = src[xi + e.second * xs];
        idst[ii + i * is] = e.second;
      }
    });
  });
}

}  // namespace

void register_reduce_kernels(KernelRegistry& registry) {
  registry.add("aten::sum.IntList_out", 6, sum_out);
  registry.add("aten::mean.out", 6, mean_out, prepare_mean);
  registry.add("aten::mean.dtype_out", 4, mean_dtype_out);
  registry.add("aten::prod.int_out", 6, prod_int_out);
  registry.add("aten::prod.out", 4, prod_out);
  registry.add("aten::amax.out", 5, amax_amin_out<true>);
  registry.add("aten::amin.out", 5, amax_amin_out<false>);
  registry.add("aten::max.unary_out", 3, max_min_unary_out<true>);
  registry.add("aten::min.unary_out", 3, max_min_unary_out<false>);
  registry.add("aten::any.out", 5, any_dim_out);
  registry.add("aten::any.dims_out", 5, any_dims_out);
  registry.add("aten::any.all_out", 3, any_all_out);
  registry.add("aten::argmax.out", 5, argmax_argmin_out<true>);
  registry.add("aten::argmin.out", 5, argmax_argmin_out<false>);
  registry.add("aten::max.dim_max", 6, max_min_dim_out<true>);
  registry.add("aten::min.dim_min", 6, max_min_dim_out<false>);
  registry.add("aten::var.correction_out", 6, var_correction_out);
  registry.add("aten::var.out", 6, var_unbiased_out);
  registry.add("aten::var_mean.correction_out", 7, var_mean_correction_out);
  registry.add("aten::cumsum.out", 5, cumsum_out);
  registry.add("aten::topk.values", 8, topk_values);
}

}  // namespace etnp::kernels
