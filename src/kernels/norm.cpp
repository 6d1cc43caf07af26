// Normalizations and softmax: _native_batch_norm_legit_no_training, native_layer_norm, native_group_norm,
// _softmax and _log_softmax. Contiguous float32 has row-vectorized paths split across the thread pool; other
// dtypes and dim orders go through strided loops (or contiguous copies) accumulating in the op-math type.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "etnp/threadpool.h"
#include "kernels/kernel_util.h"
#include "compute/vector_math.h"
#include "kernels/register.h"

namespace etnp::kernels {
namespace {

ThreadPool& pool_of(KernelContext& ctx) { return ctx.pool() != nullptr ? *ctx.pool() : ThreadPool::global(); }

void parallel_rows(KernelContext& ctx, int64_t rows, int64_t work_per_row, const std::function<void(int64_t)>& fn) {
  const size_t grain = static_cast<size_t>(std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, work_per_row)));
  pool_of(ctx).parallel_for(static_cast<size_t>(rows), grain, [&](size_t b, size_t e) {
    for (size_t r = b; r < e; ++r) fn(static_cast<int64_t>(r));
  });
}

/// Elements of `t` in logical order, converted to A.
template <typename T, typename A>
std::vector<A> gather_as(const Tensor& t) {
  std::vector<A> v(static_cast<size_t>(t.numel()));
  const T* src = t.data_as<const T>();
  A* dst = v.data();
  for_each_index<1>(t.sizes(), {t.strides().data()},
                    [&](const std::array<int64_t, 1>& off) { *dst++ = static_cast<A>(static_cast<OpMath<T>>(src[off[0]])); });
  return v;
}

/// Writes logical-order values into `t` (any dim order), converting to T.
template <typename T, typename A>
void scatter_from(Tensor& t, const std::vector<A>& v) {
  T* dst = t.data_as<T>();
  const A* src = v.data();
  for_each_index<1>(t.sizes(), {t.strides().data()},
                    [&](const std::array<int64_t, 1>& off) { dst[off[0]] = convert<T>(static_cast<OpMath<T>>(*src++)); });
}

/// Mean and biased variance of n values (two passes; partial sums in lanes so the loops vectorize).
template <typename A>
void moments(const A* x, int64_t n, A& mean, A& var) {
  constexpr int kLanes = 8;
  A part[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) part[l] += x[i + l];
  }
  A sum = 0;
  for (int l = 0; l < kLanes; ++l) sum += part[l];
  for (; i < n; ++i) sum += x[i];
  mean = sum / static_cast<A>(n);
  A sq[kLanes] = {};
  i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const A d = x[i + l] - mean;
      sq[l] += d * d;
    }
  }
  A ss = 0;
  for (int l = 0; l < kLanes; ++l) ss += sq[l];
  for (; i < n; ++i) ss += (x[i] - mean) * (x[i] - mean);
  var = ss / static_cast<A>(n);
}

/// The mean and 1 / sqrt(variance + eps) of a row of n values: false (with ATen's mean 0 and rstd NaN) for an
/// empty row.
template <typename A>
bool row_stats(const A* x, int64_t n, double eps, A& mean, A& rstd) {
  if (n == 0) {
    mean = 0;
    rstd = std::numeric_limits<A>::quiet_NaN();
    return false;
  }
  A var;
  moments(x, n, mean, var);
  rstd = A(1) / std::sqrt(var + static_cast<A>(eps));
  return true;
}

// ---------------------------------------------------------------------------------------------------------
/// An inference batch norm of a static float32 4-D tensor, which the load may pair in NHWC order
/// (KernelState::keeps_channels_last): the input and output then hold runs of the channels per pixel; the
/// per-channel constants and the empty statistics outputs are the same bytes in either order. Each element's
/// arithmetic is the NCHW loop's.
struct BatchNormChannels final : KernelState {
  int64_t numel = 0, channels = 0;
  bool nhwc = false;
  ChannelsLastArgs keeps_channels_last() const override { return {{0}, {7}, {1, 2, 3, 4, 8, 9}}; }
  void use_channels_last(bool input, bool output) override { nhwc = input && output; }
};

std::unique_ptr<KernelState> prepare_batch_norm(KernelArgs args) {
  if (args.size() != 11 || !args[0]->is_tensor() || !args[7]->is_tensor()) return nullptr;
  const Tensor& in = args[0]->to_tensor();
  const Tensor& out = args[7]->to_tensor();
  const auto fits = [&](const Tensor& t) {
    return channels_last_candidate(t, ScalarType::Float) && std::ranges::equal(t.sizes(), in.sizes());
  };
  if (!fits(in) || !fits(out)) return nullptr;
  auto state = std::make_unique<BatchNormChannels>();
  state->numel = in.numel();
  state->channels = in.size(1);
  return state;
}

// aten::_native_batch_norm_legit_no_training.out(Tensor input, Tensor? weight, Tensor? bias, Tensor running_mean,
//   Tensor running_var, float momentum, float eps, *, Tensor(a!) out0, Tensor(b!) out1, Tensor(c!) out2)

void batch_norm_no_training_out(KernelContext& ctx, KernelArgs args) {
  constexpr const char* op = "aten::_native_batch_norm_legit_no_training.out";
  check_num_args(args, 11, op);
  const Tensor& in = args[0]->to_tensor();
  const Tensor* weight = args[1]->to_optional_tensor();
  const Tensor* bias = args[2]->to_optional_tensor();
  const Tensor& running_mean = args[3]->to_tensor();
  const Tensor& running_var = args[4]->to_tensor();
  const double eps = args[6]->to_double();
  Tensor& out = args[7]->to_tensor();
  Tensor& save_mean = args[8]->to_tensor();
  Tensor& save_invstd = args[9]->to_tensor();
  ETNP_KERNEL_CHECK(in.dim() >= 2, op << ": input must have at least 2 dims, got shape " << shape_str(in.sizes()));
  const int64_t channels = in.size(1);
  for (const Tensor* t : {weight, bias, &running_mean, &running_var}) {
    if (t == nullptr) continue;
    ETNP_KERNEL_CHECK(t->dim() == 1 && t->size(0) == channels,
                      op << ": per-channel tensors must have shape [" << channels << "], got " << shape_str(t->sizes()));
    check_same_dtype(in, *t, op);
  }
  check_same_dtype(in, out, op);
  resize_output(out, in.sizes(), op);
  // Without training there are no batch statistics: the other outputs are empty.
  resize_output(save_mean, {0}, op);
  resize_output(save_invstd, {0}, op);

  dispatch<kFloats | kHalfs>(in.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using Acc = OpMath<T>;
    // Per-channel (x - mean) * invstd * w + b, invstd computed in double like the reference kernel.
    std::vector<Acc> mean(static_cast<size_t>(channels)), invstd(mean.size()), w(mean.size(), Acc(1)), b(mean.size(), Acc(0));
    for (int64_t c = 0; c < channels; ++c) {
      const auto i = static_cast<size_t>(c);
      mean[i] = static_cast<Acc>(running_mean.data_as<const T>()[c * running_mean.stride(0)]);
      const Acc var = static_cast<Acc>(running_var.data_as<const T>()[c * running_var.stride(0)]);
      invstd[i] = static_cast<Acc>(1.0 / std::sqrt(static_cast<double>(var) + eps));
      if (weight != nullptr) w[i] = static_cast<Acc>(weight->data_as<const T>()[c * weight->stride(0)]);
      if (bias != nullptr) b[i] = static_cast<Acc>(bias->data_as<const T>()[c * bias->stride(0)]);
    }
    const T* src = in.data_as<const T>();
    T* dst = out.data_as<T>();
    if (const auto* state = static_cast<const BatchNormChannels*>(ctx.state()); state != nullptr && state->nhwc) {
      // What the load paired holds NHWC bytes: runs of the channels, pixel after pixel.
      ETNP_KERNEL_CHECK(in.dim() == 4 && in.numel() == state->numel && channels == state->channels &&
                            in.dtype() == ScalarType::Float,
                        op << ": a batch norm paired with its neighbours in NHWC order no longer fits its input "
                              "(shape " << shape_str(in.sizes()) << ")");
      const int64_t pixels = in.numel() / channels;
      parallel_rows(ctx, pixels, channels, [&](int64_t p) {
        const T* x = src + p * channels;
        T* y = dst + p * channels;
        for (int64_t c = 0; c < channels; ++c) {
          const auto i = static_cast<size_t>(c);
          y[c] = convert<T>((static_cast<Acc>(x[c]) - mean[i]) * invstd[i] * w[i] + b[i]);
        }
      });
      return;
    }
    if (in.is_contiguous_order() && out.is_contiguous_order()) {
      int64_t inner = 1;
      for (int d = 2; d < in.dim(); ++d) inner *= in.size(d);
      const int64_t planes = in.size(0) * channels;
      parallel_rows(ctx, planes, inner, [&](int64_t p) {
        const auto c = static_cast<size_t>(p % channels);
        const Acc m = mean[c], s = invstd[c], wc = w[c], bc = b[c];
        const T* x = src + p * inner;
        T* y = dst + p * inner;
        for (int64_t i = 0; i < inner; ++i) y[i] = convert<T>((static_cast<Acc>(x[i]) - m) * s * wc + bc);
      });
      return;
    }
    // Any dim order: a third "operand" whose only non-zero stride is dim 1 yields the channel index.
    std::vector<int64_t> channel_stride(static_cast<size_t>(in.dim()), 0);
    channel_stride[1] = 1;
    for_each_index<3>(in.sizes(), {in.strides().data(), out.strides().data(), channel_stride.data()},
                      [&](const std::array<int64_t, 3>& off) {
                        const auto c = static_cast<size_t>(off[2]);
                        dst[off[1]] = convert<T>((static_cast<Acc>(src[off[0]]) - mean[c]) * invstd[c] * w[c] + b[c]);
                      });
  });
}

// ---------------------------------------------------------------------------------------------------------
// aten::native_layer_norm.out(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, float eps,
//   *, Tensor(a!) out0, Tensor(b!) out1, Tensor(c!) out2)

void layer_norm_out(KernelContext& ctx, KernelArgs args) {
  constexpr const char* op = "aten::native_layer_norm.out";
  check_num_args(args, 9, op);
  const Tensor& in = args[0]->to_tensor();
  const std::vector<int64_t> normalized = args[1]->to_int_list().to_vector();
  const Tensor* weight = args[2]->to_optional_tensor();
  const Tensor* bias = args[3]->to_optional_tensor();
  const double eps = args[4]->to_double();
  Tensor& out = args[5]->to_tensor();
  Tensor& mean_out = args[6]->to_tensor();
  Tensor& rstd_out = args[7]->to_tensor();
  const int rank = in.dim();
  const int norm_rank = static_cast<int>(normalized.size());
  ETNP_KERNEL_CHECK(norm_rank >= 1 && norm_rank <= rank,
                    op << ": normalized_shape " << shape_str(normalized) << " does not fit input of shape "
                       << shape_str(in.sizes()));
  const int axis = rank - norm_rank;
  int64_t inner = 1, rows = 1;
  for (int d = 0; d < rank; ++d) {
    if (d >= axis) {
      ETNP_KERNEL_CHECK(in.size(d) == normalized[static_cast<size_t>(d - axis)],
                        op << ": input of shape " << shape_str(in.sizes()) << " does not end with normalized_shape "
                           << shape_str(normalized));
      inner *= in.size(d);
    } else {
      rows *= in.size(d);
    }
  }
  for (const Tensor* t : {weight, bias}) {
    if (t == nullptr) continue;
    ETNP_KERNEL_CHECK(t->numel() == inner, op << ": weight/bias of shape " << shape_str(t->sizes())
                                              << " does not match normalized_shape " << shape_str(normalized));
    check_same_dtype(in, *t, op);
  }
  check_same_dtype(in, out, op);
  check_same_dtype(in, mean_out, op);
  check_same_dtype(in, rstd_out, op);
  std::vector<int64_t> stat_shape(in.sizes().begin(), in.sizes().end());
  for (int d = axis; d < rank; ++d) stat_shape[static_cast<size_t>(d)] = 1;
  resize_output(out, in.sizes(), op);
  resize_output(mean_out, stat_shape, op);
  resize_output(rstd_out, stat_shape, op);
  if (rows == 0) return;

  dispatch<kFloats | kHalfs>(in.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using Acc = OpMath<T>;
    // Row r of x -> row r of y, mean[r], rstd[r]; w and b may be null. A row's values are all read (moments)
    // before any of its outputs is written, so y may be x.
    auto normalize_rows = [&](const Acc* x, const Acc* w, const Acc* b, Acc* y, Acc* mean, Acc* rstd) {
      parallel_rows(ctx, rows, inner * 4, [&](int64_t r) {
        const Acc* xr = x + r * inner;
        Acc* yr = y + r * inner;
        if (!row_stats(xr, inner, eps, mean[r], rstd[r])) return;
        const Acc m = mean[r], s = rstd[r];
        if (w != nullptr && b != nullptr) {
          for (int64_t i = 0; i < inner; ++i) yr[i] = (xr[i] - m) * s * w[i] + b[i];
        } else {
          for (int64_t i = 0; i < inner; ++i) {
            Acc v = (xr[i] - m) * s;
            if (w != nullptr) v *= w[i];
            if (b != nullptr) v += b[i];
            yr[i] = v;
          }
        }
      });
    };
    if constexpr (std::is_same_v<T, Acc>) {
      // Contiguous tensors of the accumulation type (float, double): no staging copies.
      auto dense = [](const Tensor* t) { return t == nullptr || t->is_contiguous_order(); };
      if (dense(&in) && dense(&out) && dense(weight) && dense(bias) && dense(&mean_out) && dense(&rstd_out)) {
        normalize_rows(in.data_as<const T>(), weight == nullptr ? nullptr : weight->data_as<const T>(),
                       bias == nullptr ? nullptr : bias->data_as<const T>(), out.data_as<T>(), mean_out.data_as<T>(),
                       rstd_out.data_as<T>());
        return;
      }
    }
    const std::vector<Acc> x = gather_as<T, Acc>(in);
    std::vector<Acc> w, b;
    if (weight != nullptr) w = gather_as<T, Acc>(*weight);
    if (bias != nullptr) b = gather_as<T, Acc>(*bias);
    std::vector<Acc> y(x.size()), mean(static_cast<size_t>(rows)), rstd(static_cast<size_t>(rows));
    normalize_rows(x.data(), w.empty() ? nullptr : w.data(), b.empty() ? nullptr : b.data(), y.data(), mean.data(),
                   rstd.data());
    scatter_from<T, Acc>(out, y);
    scatter_from<T, Acc>(mean_out, mean);
    scatter_from<T, Acc>(rstd_out, rstd);
  });
}

// ---------------------------------------------------------------------------------------------------------
// aten::native_group_norm.out(Tensor input, Tensor? weight, Tensor? bias, SymInt N, SymInt C, SymInt HxW,
//   int group, float eps, *, Tensor(a!) out0, Tensor(b!) out1, Tensor(c!) out2)

void group_norm_out(KernelContext& ctx, KernelArgs args) {
  constexpr const char* op = "aten::native_group_norm.out";
  check_num_args(args, 12, op);
  const Tensor& in = args[0]->to_tensor();
  const Tensor* weight = args[1]->to_optional_tensor();
  const Tensor* bias = args[2]->to_optional_tensor();
  const int64_t n = args[3]->to_int(), c = args[4]->to_int(), hxw = args[5]->to_int();
  const int64_t groups = args[6]->to_int();
  const double eps = args[7]->to_double();
  Tensor& out = args[8]->to_tensor();
  Tensor& mean_out = args[9]->to_tensor();
  Tensor& rstd_out = args[10]->to_tensor();
  ETNP_KERNEL_CHECK(in.dim() >= 2, op << ": input must have at least 2 dims");
  ETNP_KERNEL_CHECK(groups > 0 && c % groups == 0,
                    op << ": number of channels " << c << " must be divisible by the number of groups " << groups);
  ETNP_KERNEL_CHECK(in.size(0) == n && in.size(1) == c && in.numel() == n * c * hxw,
                    op << ": input of shape " << shape_str(in.sizes()) << " does not match N=" << n << ", C=" << c
                       << ", HxW=" << hxw);
  for (const Tensor* t : {weight, bias}) {
    if (t == nullptr) continue;
    ETNP_KERNEL_CHECK(t->dim() == 1 && t->size(0) == c,
                      op << ": weight/bias must have shape [" << c << "], got " << shape_str(t->sizes()));
    check_same_dtype(in, *t, op);
  }
  check_same_dtype(in, out, op);
  check_same_dtype(in, mean_out, op);
  check_same_dtype(in, rstd_out, op);
  resize_output(out, in.sizes(), op);
  resize_output(mean_out, {n, groups}, op);
  resize_output(rstd_out, {n, groups}, op);
  const int64_t per_group = c / groups, inner = per_group * hxw;

  dispatch<kFloats | kHalfs>(in.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using Acc = OpMath<T>;
    const std::vector<Acc> x = gather_as<T, Acc>(in);
    std::vector<Acc> w, b;
    if (weight != nullptr) w = gather_as<T, Acc>(*weight);
    if (bias != nullptr) b = gather_as<T, Acc>(*bias);
    std::vector<Acc> y(x.size()), mean(static_cast<size_t>(n * groups)), rstd(mean.size());
    parallel_rows(ctx, n * groups, inner * 4, [&](int64_t r) {
      const auto ri = static_cast<size_t>(r);
      const Acc* xr = x.data() + r * inner;
      Acc* yr = y.data() + r * inner;
      if (!row_stats(xr, inner, eps, mean[ri], rstd[ri])) return;
      const Acc m = mean[ri], s = rstd[ri];
      const int64_t g = r % groups;
      for (int64_t j = 0; j < per_group; ++j) {
        const auto ch = static_cast<size_t>(g * per_group + j);
        const Acc wc = w.empty() ? Acc(1) : w[ch], bc = b.empty() ? Acc(0) : b[ch];
        const Acc* xc = xr + j * hxw;
        Acc* yc = yr + j * hxw;
        for (int64_t k = 0; k < hxw; ++k) yc[k] = (xc[k] - m) * s * wc + bc;
      }
    });
    scatter_from<T, Acc>(out, y);
    scatter_from<T, Acc>(mean_out, mean);
    scatter_from<T, Acc>(rstd_out, rstd);
  });
}

// ---------------------------------------------------------------------------------------------------------
// Softmax along one dim: out = exp(x - max) / sum, log_softmax = x - max - log(sum).

/// One line of `len` elements at strides xs (input) / ys (output).
template <typename T, bool kLog>
void softmax_line(const T* x, int64_t xs, T* y, int64_t ys, int64_t len) {
  using Acc = OpMath<T>;
  Acc mx = -std::numeric_limits<Acc>::infinity();
  for (int64_t i = 0; i < len; ++i) {
    const Acc v = static_cast<Acc>(x[i * xs]);
    // A NaN max makes the whole line NaN, as in ATen.
    if (std::isnan(v)) {
      mx = v;
      break;
    }
    if (v > mx) mx = v;
  }
  Acc sum = 0;
  if constexpr (kLog) {
    for (int64_t i = 0; i < len; ++i) sum += std::exp(static_cast<Acc>(x[i * xs]) - mx);
    const Acc log_sum = std::log(sum);
    for (int64_t i = 0; i < len; ++i) y[i * ys] = convert<T>(static_cast<Acc>(x[i * xs]) - mx - log_sum);
  } else {
    // Writes exp(x - max) first, so y may not alias x with a different stride; out never aliases in here.
    std::vector<Acc> e;
    Acc* tmp = nullptr;
    Acc stack_buf[256];
    if (len <= 256) {
      tmp = stack_buf;
    } else {
      e.resize(static_cast<size_t>(len));
      tmp = e.data();
    }
    for (int64_t i = 0; i < len; ++i) {
      tmp[i] = std::exp(static_cast<Acc>(x[i * xs]) - mx);
      sum += tmp[i];
    }
    for (int64_t i = 0; i < len; ++i) y[i * ys] = convert<T>(tmp[i] / sum);
  }
}

/// log_softmax over a contiguous float row (the common "last dim" case), vectorizable passes; softmax itself
/// is kernels::softmax_rows_f32 (vector_math.h).
void log_softmax_row_f32(const float* x, float* y, int64_t len) {
  float mx = -std::numeric_limits<float>::infinity();
  bool nan = false;
  for (int64_t i = 0; i < len; ++i) {
    mx = std::max(mx, x[i]);
    nan = nan || std::isnan(x[i]);
  }
  if (nan) mx = std::numeric_limits<float>::quiet_NaN();
  float sum = 0;
  for (int64_t i = 0; i < len; ++i) sum += std::exp(x[i] - mx);
  const float log_sum = std::log(sum);
  for (int64_t i = 0; i < len; ++i) y[i] = x[i] - mx - log_sum;
}

template <bool kLog>
void softmax_impl(KernelContext& ctx, KernelArgs args, const char* op) {
  check_num_args(args, 5, op);
  const Tensor& in = args[0]->to_tensor();
  const int64_t dim = normalize_dim(args[1]->to_int(), in.dim(), op);
  const bool half_to_float = args[2]->to_bool();
  Tensor& out = args[3]->to_tensor();
  ETNP_KERNEL_CHECK(!half_to_float, op << ": softmax with half to float conversion is not supported on CPU");
  check_same_dtype(in, out, op);
  resize_output(out, in.sizes(), op);
  if (in.numel() == 0) return;
  const int rank = in.dim();
  const int64_t len = rank == 0 ? 1 : in.size(static_cast<int>(dim));
  const int64_t xs = rank == 0 ? 0 : in.stride(static_cast<int>(dim));
  const int64_t ys = rank == 0 ? 0 : out.stride(static_cast<int>(dim));

  if (in.dtype() == ScalarType::Float && in.is_contiguous_order() && out.is_contiguous_order() && dim == rank - 1) {
    const float* x = in.data_as<const float>();
    float* y = out.data_as<float>();
    parallel_rows(ctx, in.numel() / len, len * 8, [&](int64_t r) {
      if constexpr (kLog) {
        log_softmax_row_f32(x + r * len, y + r * len, len);
      } else {
        softmax_rows_f32(x + r * len, y + r * len, 1, static_cast<size_t>(len));
      }
    });
    return;
  }
  dispatch<kFloats | kHalfs>(in.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* x = in.data_as<const T>();
    T* y = out.data_as<T>();
    if (rank == 0) {
      softmax_line<T, kLog>(x, 0, y, 0, 1);
      return;
    }
    // Line starts: iterate the shape with the softmax dim collapsed to 1.
    std::vector<int64_t> lines_shape(in.sizes().begin(), in.sizes().end());
    lines_shape[static_cast<size_t>(dim)] = 1;
    std::vector<std::array<int64_t, 2>> starts;
    starts.reserve(static_cast<size_t>(in.numel() / len));
    for_each_index<2>(lines_shape, {in.strides().data(), out.strides().data()},
                      [&](const std::array<int64_t, 2>& off) { starts.push_back({off[0], off[1]}); });
    parallel_rows(ctx, static_cast<int64_t>(starts.size()), len * 8, [&](int64_t l) {
      const auto& s = starts[static_cast<size_t>(l)];
      softmax_line<T, kLog>(x + s[0], xs, y + s[1], ys, len);
    });
  });
}

// aten::_softmax.out(Tensor self, int dim, bool half_to_float, *, Tensor(a!) out)
void softmax_out(KernelContext& ctx, KernelArgs args) { softmax_impl<false>(ctx, args, "aten::_softmax.out"); }
// aten::_log_softmax.out(Tensor self, int dim, bool half_to_float, *, Tensor(a!) out)
void log_softmax_out(KernelContext& ctx, KernelArgs args) { softmax_impl<true>(ctx, args, "aten::_log_softmax.out"); }

}  // namespace

void register_norm_kernels(KernelRegistry& registry) {
  registry.add("aten::_native_batch_norm_legit_no_training.out", 11, batch_norm_no_training_out,
               prepare_batch_norm);
  registry.add("aten::native_layer_norm.out", 9, layer_norm_out);
  registry.add("aten::native_group_norm.out", 12, group_norm_out);
  registry.add("aten::_softmax.out", 5, softmax_out);
  registry.add("aten::_log_softmax.out", 5, log_softmax_out);
}

}  // namespace etnp::kernels
