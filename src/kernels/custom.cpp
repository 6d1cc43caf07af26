// Kernels of the `etnp` operator namespace: operators that are not part of ATen or ExecuTorch's libraries
// but that programs exported for etnp (or for the runtimes etnp replaces) call.
//
//   etnp::triple.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)
//       out = 3 * x. Our reference custom kernel (see docs/custom-kernels.md).
//   etnp::lstm.out(Tensor input, Tensor h0, Tensor c0, Tensor w_ih, Tensor w_hh, Tensor b_ih, Tensor b_hh, *,
//                  Tensor(a!) out, Tensor(b!) h_n, Tensor(c!) c_n) -> (Tensor(a!), Tensor(b!), Tensor(c!))
//       A single-layer unidirectional LSTM over a whole sequence, as torch.nn.LSTM (gate order i, f, g, o):
//       input [T, B, I], h0/c0 [B, H], w_ih [4H, I], w_hh [4H, H], b_ih/b_hh [4H];
//       out [T, B, H] (h at every step), h_n / c_n [B, H] (the final state).
#include <algorithm>
#include <cmath>
#include <vector>

#include "etnp/threadpool.h"
#include "kernels/kernel_util.h"
#include "kernels/register.h"

namespace etnp::kernels {

namespace {

void triple_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "etnp::triple.out";
  const Tensor& x = args[0]->to_tensor();
  Tensor& out = args[1]->to_tensor();
  check_same_dtype(x, out, op);
  resize_output(out, x.sizes(), op);
  dispatch<kRealTypes | kUInts>(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data_as<T>();
    T* o = out.data_as<T>();
    auto triple = [](T v) -> T {
      if constexpr (std::is_integral_v<T>) {
        // Wraps on overflow like ATen's integer arithmetic (unsigned math keeps it defined).
        using U = std::make_unsigned_t<T>;
        return static_cast<T>(static_cast<U>(static_cast<U>(v) * U(3)));
      } else {
        return T(OpMath<T>(3) * static_cast<OpMath<T>>(v));
      }
    };
    if (x.is_contiguous_order() && out.is_contiguous_order()) {
      const int64_t n = x.numel();
      for (int64_t i = 0; i < n; ++i) o[i] = triple(in[i]);
      return;
    }
    for_each_index<2>(x.sizes(), {x.strides().data(), out.strides().data()},
                      [&](const std::array<int64_t, 2>& off) { o[off[1]] = triple(in[off[0]]); });
  });
}

/// Reads element (i, j) / (i) of a float32 tensor through its strides.
struct FloatView {
  const float* data;
  int64_t s0, s1;
  explicit FloatView(const Tensor& t)
      : data(t.data_as<float>()), s0(t.dim() > 0 ? t.stride(0) : 0), s1(t.dim() > 1 ? t.stride(1) : 0) {}
  float at(int64_t i, int64_t j = 0) const { return data[i * s0 + j * s1]; }
};

double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

void lstm_out(KernelContext& ctx, KernelArgs args) {
  constexpr const char* op = "etnp::lstm.out";
  const Tensor& input = args[0]->to_tensor();
  const Tensor& h0 = args[1]->to_tensor();
  const Tensor& c0 = args[2]->to_tensor();
  const Tensor& w_ih = args[3]->to_tensor();
  const Tensor& w_hh = args[4]->to_tensor();
  const Tensor& b_ih = args[5]->to_tensor();
  const Tensor& b_hh = args[6]->to_tensor();
  Tensor& out = args[7]->to_tensor();
  Tensor& h_n = args[8]->to_tensor();
  Tensor& c_n = args[9]->to_tensor();

  const std::initializer_list<const Tensor*> all = {&input, &h0, &c0, &w_ih, &w_hh, &b_ih, &b_hh, &out, &h_n, &c_n};
  for (const Tensor* t : all) {
    ETNP_KERNEL_CHECK(t->dtype() == ScalarType::Float,
                      op << ": all tensors must be float32, got " << scalar_type_name(t->dtype()));
  }
  ETNP_KERNEL_CHECK(input.dim() == 3, op << ": input must be [T, B, I], got " << shape_str(input.sizes()));
  const int64_t steps = input.size(0), batch = input.size(1), in_size = input.size(2);
  ETNP_KERNEL_CHECK(w_hh.dim() == 2 && w_hh.size(0) % 4 == 0,
                    op << ": w_hh must be [4H, H], got " << shape_str(w_hh.sizes()));
  const int64_t hidden = w_hh.size(0) / 4;
  auto expect_shape = [&](const Tensor& t, std::initializer_list<int64_t> shape, const char* name) {
    ETNP_KERNEL_CHECK(std::equal(t.sizes().begin(), t.sizes().end(), shape.begin(), shape.end()),
                      op << ": " << name << " must be "
                         << shape_str(std::span<const int64_t>(shape.begin(), shape.size())) << ", got "
                         << shape_str(t.sizes()));
  };
  expect_shape(w_hh, {4 * hidden, hidden}, "w_hh");
  expect_shape(w_ih, {4 * hidden, in_size}, "w_ih");
  expect_shape(b_ih, {4 * hidden}, "b_ih");
  expect_shape(b_hh, {4 * hidden}, "b_hh");
  expect_shape(h0, {batch, hidden}, "h0");
  expect_shape(c0, {batch, hidden}, "c0");
  resize_output(out, {steps, batch, hidden}, op);
  resize_output(h_n, {batch, hidden}, op);
  resize_output(c_n, {batch, hidden}, op);

  const FloatView x(input), wi(w_ih), wh(w_hh), bi(b_ih), bh(b_hh), h_init(h0), c_init(c0);
  const int64_t xs0 = input.stride(0), xs1 = input.stride(1), xs2 = input.stride(2);
  float* o = out.data_as<float>();
  const int64_t os0 = out.stride(0), os1 = out.stride(1), os2 = out.stride(2);
  float* hn = h_n.data_as<float>();
  float* cn = c_n.data_as<float>();

  // Batch rows are independent over the whole sequence. The recurrence runs in double and each
  // output is rounded once to float32, which keeps results within float rounding of the exact values.
  auto run_rows = [&](size_t begin, size_t end) {
    const size_t H = static_cast<size_t>(hidden);
    std::vector<double> h(H), c(H), gates(4 * H);
    for (size_t bsz = begin; bsz < end; ++bsz) {
      const int64_t b = static_cast<int64_t>(bsz);
      for (int64_t k = 0; k < hidden; ++k) {
        h[static_cast<size_t>(k)] = h_init.at(b, k);
        c[static_cast<size_t>(k)] = c_init.at(b, k);
      }
      for (int64_t t = 0; t < steps; ++t) {
        const float* xt = input.data_as<float>() + t * xs0 + b * xs1;
        for (int64_t r = 0; r < 4 * hidden; ++r) {
          double acc = static_cast<double>(bi.at(r)) + static_cast<double>(bh.at(r));
          for (int64_t k = 0; k < in_size; ++k) acc += static_cast<double>(wi.at(r, k)) * xt[k * xs2];
          for (int64_t k = 0; k < hidden; ++k) acc += static_cast<double>(wh.at(r, k)) * h[static_cast<size_t>(k)];
          gates[static_cast<size_t>(r)] = acc;
        }
        for (size_t k = 0; k < H; ++k) {
          const double i_gate = sigmoid(gates[k]);
          const double f_gate = sigmoid(gates[H + k]);
          const double g_gate = std::tanh(gates[2 * H + k]);
          const double o_gate = sigmoid(gates[3 * H + k]);
          c[k] = f_gate * c[k] + i_gate * g_gate;
          h[k] = o_gate * std::tanh(c[k]);
          o[t * os0 + b * os1 + static_cast<int64_t>(k) * os2] = static_cast<float>(h[k]);
        }
      }
      for (int64_t k = 0; k < hidden; ++k) {
        hn[b * h_n.stride(0) + k * h_n.stride(1)] = static_cast<float>(h[static_cast<size_t>(k)]);
        cn[b * c_n.stride(0) + k * c_n.stride(1)] = static_cast<float>(c[static_cast<size_t>(k)]);
      }
    }
  };
  const int64_t work_per_row = steps * 4 * hidden * (in_size + hidden);
  if (ctx.pool() != nullptr && batch > 1 && work_per_row * batch > (1 << 16)) {
    ctx.pool()->parallel_for(static_cast<size_t>(batch), 1, run_rows);
  } else {
    run_rows(0, static_cast<size_t>(batch));
  }
}

}  // namespace

void register_custom_kernels(KernelRegistry& registry) {
  registry.add("etnp::triple.out", 3, triple_out);
  registry.add("etnp::lstm.out", 11, lstm_out);
}

}  // namespace etnp::kernels
