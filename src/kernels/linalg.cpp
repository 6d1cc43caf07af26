// Matrix products: mm, bmm, addmm and linear. float32 goes through the blocked gemm_f32 (any strides, so
// every dim order works without copies where a matrix view exists); other dtypes use a strided triple loop
// that accumulates in the op-math type (integers wrap modulo 2^bits, computed in unsigned arithmetic).
// Where the weights are constant float32 (the usual linear layer), mm, addmm and linear pack them once at
// load (packed_gemm.h) and each call runs straight over the packed panels with the bias fused in.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "etnp/threadpool.h"
#include "compute/dot_rows.h"
#include "compute/gemm.h"
#include "kernels/kernel_util.h"
#include "compute/packed_gemm.h"
#include "kernels/register.h"

namespace etnp::kernels {
namespace {

constexpr unsigned kMatmulTypes = kInts | kFloats | kHalfs;

/// Accumulator of a product of T: float for 16-bit floats, an unsigned type for integers (wrapping without UB).
template <typename T>
struct MatmulAcc {
  using type = OpMath<T>;
};
template <typename T>
  requires std::is_integral_v<T>
struct MatmulAcc<T> {
  using type = std::conditional_t<sizeof(T) <= 4, uint32_t, uint64_t>;
};

template <typename T>
typename MatmulAcc<T>::type scalar_as_acc(const Scalar& s) {
  using Acc = typename MatmulAcc<T>::type;
  if constexpr (std::is_integral_v<T>) {
    return static_cast<Acc>(s.to_int());
  } else {
    return static_cast<Acc>(s.to_double());
  }
}

/// Strided matrix of element type T.
template <typename T>
struct MatrixRef {
  const T* data;
  int64_t rs, cs;
};

/// c = alpha * a @ b (+ beta * bias) for one matrix, any dtype. `bias.data == nullptr` skips the bias.
template <typename T>
void matmul_generic(int64_t m, int64_t n, int64_t k, MatrixRef<T> a, MatrixRef<T> b, T* c, int64_t c_rs,
                    int64_t c_cs, typename MatmulAcc<T>::type alpha, typename MatmulAcc<T>::type beta,
                    MatrixRef<T> bias, bool scale) {
  using Acc = typename MatmulAcc<T>::type;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      Acc acc = 0;
      for (int64_t p = 0; p < k; ++p) {
        acc += static_cast<Acc>(static_cast<OpMath<T>>(a.data[i * a.rs + p * a.cs])) *
               static_cast<Acc>(static_cast<OpMath<T>>(b.data[p * b.rs + j * b.cs]));
      }
      if (scale) acc = acc * alpha;
      if (bias.data != nullptr) {
        acc += beta * static_cast<Acc>(static_cast<OpMath<T>>(bias.data[i * bias.rs + j * bias.cs]));
      }
      if constexpr (std::is_integral_v<T>) {
        c[i * c_rs + j * c_cs] = static_cast<T>(acc);
      } else {
        c[i * c_rs + j * c_cs] = convert<T>(acc);
      }
    }
  }
}

void check_matrix(const Tensor& t, int rank, const char* what, const char* op) {
  ETNP_KERNEL_CHECK(t.dim() == rank, op << ": " << what << " must be a " << rank << "-D tensor, got shape "
                                        << shape_str(t.sizes()));
}

void check_dtypes(const char* op, const Tensor& out, std::initializer_list<const Tensor*> ins) {
  for (const Tensor* t : ins) {
    ETNP_KERNEL_CHECK(t->dtype() == out.dtype(),
                      op << ": expected all tensors to have dtype " << scalar_type_name(out.dtype()) << ", got "
                         << scalar_type_name(t->dtype()));
  }
}

/// out[b] = alpha * a[b] @ w[b] + beta * bias for `batches` matrices given by batch strides.
struct BatchedProduct {
  int64_t batches, m, n, k;
  const Tensor* a;
  int64_t a_bs, a_rs, a_cs;
  const Tensor* b;
  int64_t b_bs, b_rs, b_cs;
  Tensor* out;
  int64_t c_bs, c_rs, c_cs;
  const Tensor* bias = nullptr;  // broadcast over the batch
  int64_t bias_rs = 0, bias_cs = 0;
  Scalar alpha{Scalar::Kind::Int, 1};
  Scalar beta{Scalar::Kind::Int, 1};
};

void run_product(KernelContext& ctx, const BatchedProduct& p, const char* op) {
  const bool scale = p.alpha.to_double() != 1.0;
  // As in ATen, beta == 0 ignores self entirely (its NaNs and infinities do not propagate).
  const Tensor* bias = p.beta.to_double() == 0.0 ? nullptr : p.bias;
  if (p.out->dtype() == ScalarType::Float) {
    GemmEpilogue ep;
    ep.alpha = static_cast<float>(p.alpha.to_double());
    ep.beta = static_cast<float>(p.beta.to_double());
    if (bias != nullptr) ep.bias = GemmMatrix{bias->data_as<const float>(), p.bias_rs, p.bias_cs};
    const float* a = p.a->data_as<const float>();
    const float* b = p.b->data_as<const float>();
    float* c = p.out->data_as<float>();
    ThreadPool* pool = ctx.pool() != nullptr ? ctx.pool() : &ThreadPool::global();
    auto one = [&](int64_t i, ThreadPool* inner) {
      gemm_f32(p.m, p.n, p.k, GemmMatrix{a + i * p.a_bs, p.a_rs, p.a_cs}, GemmMatrix{b + i * p.b_bs, p.b_rs, p.b_cs},
               c + i * p.c_bs, p.c_rs, p.c_cs, ep, inner);
    };
    // Many small products (attention heads): one per thread rather than splitting each one.
    const double flops = 2.0 * double(p.m) * double(p.n) * double(p.k);
    if (p.batches > 1 && pool->num_threads() > 1 && flops < 4e6) {
      const size_t grain = static_cast<size_t>(std::max(1.0, std::ceil(2e6 / std::max(flops, 1.0))));
      pool->parallel_for(static_cast<size_t>(p.batches), grain, [&](size_t begin, size_t end) {
        for (size_t i = begin; i < end; ++i) one(static_cast<int64_t>(i), nullptr);
      });
      return;
    }
    for (int64_t i = 0; i < p.batches; ++i) one(i, pool);
    return;
  }
  dispatch<kMatmulTypes>(p.out->dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_integral_v<T>) {
      ETNP_KERNEL_CHECK(!p.alpha.is_floating() && !p.beta.is_floating(),
                        op << ": for integral input tensors, alpha and beta must not be floating point");
    }
    const T* a = p.a->data_as<const T>();
    const T* b = p.b->data_as<const T>();
    T* c = p.out->data_as<T>();
    MatrixRef<T> bias_ref{bias != nullptr ? bias->data_as<const T>() : nullptr, p.bias_rs, p.bias_cs};
    for (int64_t i = 0; i < p.batches; ++i) {
      matmul_generic<T>(p.m, p.n, p.k, MatrixRef<T>{a + i * p.a_bs, p.a_rs, p.a_cs},
                        MatrixRef<T>{b + i * p.b_bs, p.b_rs, p.b_cs}, c + i * p.c_bs, p.c_rs, p.c_cs,
                        scalar_as_acc<T>(p.alpha), scalar_as_acc<T>(p.beta), bias_ref, scale);
    }
  });
}

// ---- Constant weights, packed at load ----------------------------------------------------------------------

/// The constant weights (and bias) of one mm/addmm/linear instruction, as its load prepared them: packed, or, for
/// products of few rows with long sums over large weights (runs_as_dots), read where they lie. Instructions that
/// pack the same weights (a model whose layers share them) hold one packing, through compute::WeightCache.
struct ConstantWeights final : KernelState {
  // bytes() stays 0: the cache counts a packing once (etnp::packed_weight_cache_stats()).
  std::pair<const void*, size_t> shared_packing() const override {
    return gemm ? std::pair<const void*, size_t>{gemm.get(), gemm->bytes()} : std::pair<const void*, size_t>{};
  }
  std::vector<size_t> packed_constant_args() const override { return packed_args; }
  std::shared_ptr<const PackedGemm> gemm;  ///< null: the weights are read in place, as [n, k] rows at `source`
  const float* bias = nullptr;              ///< in place: n floats or null
  size_t k = 0, n = 0;
  const void* source = nullptr;  ///< The weight tensor's data at load: the fast path checks it is still bound.
  std::vector<size_t> packed_args;  ///< the packed weight's and bias's positions in the arguments
};

/// Whether a product of `rows` rows (at most, as loaded) by [n, k] weights reads the weights in place as dot
/// products (compute/dot_rows.h) rather than packing them at load, which costs a fresh process about 1 ms per MiB
/// of weights on the project's machine (the packed copy's pages, written once).
/// - One row (a language model's decoding step, a classifier's last layer), over 64 KiB of weights or more (below,
///   packing costs little, and a recurrent cell's short sums, 32 products by 128 weight rows, ran 1.4-1.6x
///   slower as dot products). Measured on the project's machine, 1 thread, against the packed GEMM: 0.62-0.94x
///   with the weights in the caches (k 64 to 4,096, n 128 to 4,096), and 0.72-1.2x from memory for k of 512 and
///   more; k of 256 read from memory each time took 1.8x (rows of 1 KiB are too short for the prefetchers), which
///   only a model of such layers larger than the last-level cache meets. The exported tiny Llama (k 256 and 768,
///   one token per call): load 6-26 -> 1 ms, each call as fast (0.22-0.29 ms against 0.22-0.31).
/// - 2 to 15 rows: 2 to 4 rows with 1,024 to 1,280 products 1.09-1.23x, with 2,048 1.05x; 4 rows with 4,096
///   0.93x, 8 rows 1.0x; sums of 256 to 512 products 1.13-1.85x (each row's sums reduce alone): hence k of 1,024
///   per row at least, and weights of 1 MiB or more.
constexpr int64_t kDotOneRowMinWeightBytes = int64_t{64} << 10;
constexpr int64_t kDotMaxRows = 16;
constexpr int64_t kDotMinProductsPerRow = 1024;

bool runs_as_dots(int64_t rows, int64_t k, int64_t n) {
  if (rows == 1) return n * k * int64_t{sizeof(float)} >= kDotOneRowMinWeightBytes;
  return rows > 1 && rows < kDotMaxRows && k >= kDotMinProductsPerRow * rows &&
         n * k * int64_t{sizeof(float)} >= compute::kDotsMinWeightBytes;
}

/// The rows a linear layer's input makes: the product of every dimension but the last.
int64_t linear_rows(const Tensor& input) {
  int64_t rows = 1;
  for (int d = 0; d + 1 < input.dim(); ++d) rows *= input.size(d);
  return rows;
}

bool is_scalar_one(const EValue& v) {
  return (v.is_int() && v.to_int() == 1) || (v.is_double() && v.to_double() == 1.0);
}

/// Prepares a constant float32 weight seen as W[k, n] with element (i, j) at i * rs + j * cs, where one of the
/// strides is 1 (a row-major [k, n] or [n, k] matrix), for products of at most `rows` rows; `bias` (n floats,
/// contiguous) may be null; `packed_args`: the positions of the weight and the bias in the instruction's arguments.
std::unique_ptr<KernelState> prepare_weights(const Tensor& w, int64_t rows, int64_t k, int64_t n, int64_t rs,
                                             int64_t cs, const Tensor* bias, std::vector<size_t> packed_args) {
  if (w.dtype() != ScalarType::Float || !w.is_constant() || w.data() == nullptr || k <= 0 || n <= 0) return nullptr;
  const bool nk = rs == 1 && cs == k;  // [n, k] row-major: the linear layout
  const bool kn = cs == 1 && rs == n;
  if (!nk && !kn) return nullptr;
  if (bias != nullptr && (bias->dtype() != ScalarType::Float || !bias->is_constant() || bias->numel() != n ||
                          (bias->dim() > 0 && bias->stride(bias->dim() - 1) != 1))) {
    return nullptr;
  }
  auto state = std::make_unique<ConstantWeights>();
  const auto* weights = w.data_as<const float>();
  const float* b = bias != nullptr ? bias->data_as<const float>() : nullptr;
  state->source = w.data();
  state->k = static_cast<size_t>(k);
  state->n = static_cast<size_t>(n);
  if (nk && runs_as_dots(rows, k, n)) {
    state->bias = b;
    return state;
  }
  state->gemm = compute::WeightCache::global().share_made<PackedGemm>(
      {reinterpret_cast<uintptr_t>(weights), nk, state->k, state->n, reinterpret_cast<uintptr_t>(b)},
      [&] { return std::make_shared<const PackedGemm>(weights, nk, state->k, state->n, b); });
  state->packed_args = std::move(packed_args);
  return state;
}

/// Runs out[rows, n] = a[rows, k] @ W (+ bias) on the prepared weights when the operands fit (row-major
/// input rows, a contiguous output, the prepared tensor still bound); false leaves the call to the general path.
bool run_packed(KernelContext& ctx, const Tensor& weight, const void* a, int64_t rows, int64_t a_row_stride,
                int64_t a_col_stride, Tensor& out) {
  const auto* prepared = static_cast<const ConstantWeights*>(ctx.state());
  if (prepared == nullptr || prepared->source != weight.data() || a_col_stride != 1 || !out.is_contiguous_order() ||
      out.dtype() != ScalarType::Float) {
    return false;
  }
  if (prepared->gemm == nullptr) {
    compute::DotRowsOut o;
    o.c = out.data_as<float>();
    o.row_stride = prepared->n;
    o.bias = prepared->bias;
    compute::dot_rows_f32(static_cast<const float*>(a), static_cast<size_t>(a_row_stride), static_cast<size_t>(rows),
                          static_cast<const float*>(prepared->source), prepared->k, prepared->n, prepared->k, o,
                          ctx.pool());
    return true;
  }
  constexpr float kInf = std::numeric_limits<float>::infinity();
  prepared->gemm->run(static_cast<const float*>(a), static_cast<size_t>(rows), static_cast<size_t>(a_row_stride),
                      -kInf, kInf, out.data_as<float>());
  return true;
}

// mm(self, mat2): mat2 is the weight.
std::unique_ptr<KernelState> prepare_mm(KernelArgs args) {
  if (args.size() != 4 || !args[0]->is_tensor() || !args[1]->is_tensor()) return nullptr;
  const Tensor& a = args[0]->to_tensor();
  const Tensor& b = args[1]->to_tensor();
  if (a.dim() != 2 || b.dim() != 2) return nullptr;
  return prepare_weights(b, a.size(0), b.size(0), b.size(1), b.stride(0), b.stride(1), nullptr, {1});
}

// addmm(self, mat1, mat2, beta, alpha): mat2 is the weight, self the bias; only the plain form (beta = alpha
// = 1, a bias per output column) is packed.
std::unique_ptr<KernelState> prepare_addmm(KernelArgs args) {
  if (args.size() != 7 || !args[0]->is_tensor() || !args[1]->is_tensor() || !args[2]->is_tensor()) return nullptr;
  if (!is_scalar_one(*args[3]) || !is_scalar_one(*args[4])) return nullptr;
  const Tensor& self = args[0]->to_tensor();
  const Tensor& a = args[1]->to_tensor();
  const Tensor& b = args[2]->to_tensor();
  if (a.dim() != 2 || b.dim() != 2 || self.dim() < 1 || self.dim() > 2 || (self.dim() == 2 && self.size(0) != 1)) {
    return nullptr;
  }
  return prepare_weights(b, a.size(0), b.size(0), b.size(1), b.stride(0), b.stride(1), &self, {0, 2});
}

// linear(input, weight, bias): weight [n, k].
std::unique_ptr<KernelState> prepare_linear(KernelArgs args) {
  if (args.size() != 5 || !args[0]->is_tensor() || !args[1]->is_tensor()) return nullptr;
  const Tensor& input = args[0]->to_tensor();
  const Tensor& w = args[1]->to_tensor();
  const Tensor* bias = args[2]->to_optional_tensor();
  if (input.dim() < 1 || w.dim() != 2 || (bias != nullptr && bias->dim() != 1)) return nullptr;
  return prepare_weights(w, linear_rows(input), w.size(1), w.size(0), w.stride(1), w.stride(0), bias, {1, 2});
}

// aten::mm.out(Tensor self, Tensor mat2, *, Tensor(a!) out)
void mm_out(KernelContext& ctx, KernelArgs args) {
  constexpr const char* op = "aten::mm.out";
  check_num_args(args, 4, op);
  const Tensor& a = args[0]->to_tensor();
  const Tensor& b = args[1]->to_tensor();
  Tensor& out = args[2]->to_tensor();
  check_matrix(a, 2, "self", op);
  check_matrix(b, 2, "mat2", op);
  ETNP_KERNEL_CHECK(a.size(1) == b.size(0), op << ": shapes " << shape_str(a.sizes()) << " and "
                                                << shape_str(b.sizes()) << " cannot be multiplied");
  check_dtypes(op, out, {&a, &b});
  resize_output(out, {a.size(0), b.size(1)}, op);
  if (run_packed(ctx, b, a.data(), a.size(0), a.stride(0), a.stride(1), out)) return;
  BatchedProduct p{1, a.size(0), b.size(1), a.size(1), &a, 0, a.stride(0), a.stride(1), &b, 0, b.stride(0),
                   b.stride(1), &out, 0, out.stride(0), out.stride(1)};
  run_product(ctx, p, op);
}

// aten::bmm.out(Tensor self, Tensor mat2, *, Tensor(a!) out)
void bmm_out(KernelContext& ctx, KernelArgs args) {
  constexpr const char* op = "aten::bmm.out";
  check_num_args(args, 4, op);
  const Tensor& a = args[0]->to_tensor();
  const Tensor& b = args[1]->to_tensor();
  Tensor& out = args[2]->to_tensor();
  check_matrix(a, 3, "self", op);
  check_matrix(b, 3, "mat2", op);
  ETNP_KERNEL_CHECK(a.size(0) == b.size(0) && a.size(2) == b.size(1),
                    op << ": shapes " << shape_str(a.sizes()) << " and " << shape_str(b.sizes())
                       << " cannot be batch-multiplied");
  check_dtypes(op, out, {&a, &b});
  resize_output(out, {a.size(0), a.size(1), b.size(2)}, op);
  BatchedProduct p{a.size(0), a.size(1), b.size(2), a.size(2), &a, a.stride(0), a.stride(1), a.stride(2),
                   &b, b.stride(0), b.stride(1), b.stride(2), &out, out.stride(0), out.stride(1), out.stride(2)};
  run_product(ctx, p, op);
}

/// Strides that broadcast `bias` (rank <= 2) over an [m, n] matrix; fails when it does not broadcast.
void bias_strides(const Tensor& bias, int64_t m, int64_t n, int64_t& rs, int64_t& cs, const char* op) {
  ETNP_KERNEL_CHECK(bias.dim() <= 2, op << ": bias/self of shape " << shape_str(bias.sizes())
                                        << " cannot be broadcast to [" << m << ", " << n << "]");
  rs = cs = 0;
  const int64_t target[2] = {m, n};
  for (int d = 0; d < bias.dim(); ++d) {
    const int td = 2 - bias.dim() + d;
    const int64_t s = bias.size(d);
    ETNP_KERNEL_CHECK(s == 1 || s == target[td], op << ": bias/self of shape " << shape_str(bias.sizes())
                                                    << " cannot be broadcast to [" << m << ", " << n << "]");
    if (s != 1) (td == 0 ? rs : cs) = bias.stride(d);
  }
}

// aten::addmm.out(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1, Tensor(a!) out)
void addmm_out(KernelContext& ctx, KernelArgs args) {
  constexpr const char* op = "aten::addmm.out";
  check_num_args(args, 7, op);
  const Tensor& self = args[0]->to_tensor();
  const Tensor& a = args[1]->to_tensor();
  const Tensor& b = args[2]->to_tensor();
  const Scalar beta = args[3]->to_scalar();
  const Scalar alpha = args[4]->to_scalar();
  Tensor& out = args[5]->to_tensor();
  check_matrix(a, 2, "mat1", op);
  check_matrix(b, 2, "mat2", op);
  ETNP_KERNEL_CHECK(a.size(1) == b.size(0), op << ": shapes " << shape_str(a.sizes()) << " and "
                                                << shape_str(b.sizes()) << " cannot be multiplied");
  check_dtypes(op, out, {&self, &a, &b});
  const int64_t m = a.size(0), n = b.size(1);
  BatchedProduct p{1, m, n, a.size(1), &a, 0, a.stride(0), a.stride(1), &b, 0, b.stride(0), b.stride(1), &out, 0,
                   0, 0};
  bias_strides(self, m, n, p.bias_rs, p.bias_cs, op);
  resize_output(out, {m, n}, op);
  if (run_packed(ctx, b, a.data(), m, a.stride(0), a.stride(1), out)) return;
  p.c_rs = out.stride(0);
  p.c_cs = out.stride(1);
  p.bias = &self;
  p.alpha = alpha;
  p.beta = beta;
  run_product(ctx, p, op);
}

/// A contiguous copy of `t`'s elements in logical (row-major) order.
std::vector<unsigned char> contiguous_bytes(const Tensor& t) {
  const size_t es = t.element_size();
  std::vector<unsigned char> bytes(static_cast<size_t>(t.numel()) * es);
  const auto* src = static_cast<const unsigned char*>(t.data());
  unsigned char* dst = bytes.data();
  const int64_t* strides[1] = {t.strides().data()};
  for_each_index<1>(t.sizes(), {strides[0]}, [&](const std::array<int64_t, 1>& off) {
    std::memcpy(dst, src + off[0] * static_cast<int64_t>(es), es);
    dst += es;
  });
  return bytes;
}

// aten::linear.out(Tensor input, Tensor weight, Tensor? bias=None, *, Tensor(a!) out)
void linear_out(KernelContext& ctx, KernelArgs args) {
  constexpr const char* op = "aten::linear.out";
  check_num_args(args, 5, op);
  const Tensor& input = args[0]->to_tensor();
  const Tensor& weight = args[1]->to_tensor();
  const Tensor* bias = args[2]->to_optional_tensor();
  Tensor& out = args[3]->to_tensor();
  ETNP_KERNEL_CHECK(input.dim() >= 1, op << ": input must have at least one dimension");
  ETNP_KERNEL_CHECK(weight.dim() == 2 || weight.dim() == 1,
                    op << ": weight must be 1-D or 2-D, got shape " << shape_str(weight.sizes()));
  const int64_t in_features = input.size(input.dim() - 1);
  const int64_t w_in = weight.size(weight.dim() - 1);
  ETNP_KERNEL_CHECK(in_features == w_in, op << ": input of shape " << shape_str(input.sizes())
                                            << " does not match weight of shape " << shape_str(weight.sizes()));
  check_dtypes(op, out, {&input, &weight});
  if (bias != nullptr) check_dtypes(op, out, {bias});
  const bool vector_weight = weight.dim() == 1;
  const int64_t out_features = vector_weight ? 1 : weight.size(0);
  std::vector<int64_t> out_shape(input.sizes().begin(), input.sizes().end() - 1);
  if (!vector_weight) out_shape.push_back(out_features);
  resize_output(out, out_shape, op);

  const int64_t rows = linear_rows(input);
  if (!vector_weight && input.is_contiguous_order() &&
      run_packed(ctx, weight, input.data(), rows, in_features, input.stride(input.dim() - 1), out)) {
    return;
  }
  // Rows of the input (and output) must be one stride apart; otherwise work on contiguous copies.
  std::vector<unsigned char> in_copy, out_copy;
  const void* in_data = input.data();
  int64_t in_rs = input.dim() >= 2 ? input.stride(input.dim() - 2) : 0;
  int64_t in_cs = input.stride(input.dim() - 1);
  if (input.dim() > 2 && !input.is_contiguous_order()) {
    in_copy = contiguous_bytes(input);
    in_data = in_copy.data();
    in_rs = in_features;
    in_cs = 1;
  }
  void* out_data = out.data();
  int64_t out_rs = out_features, out_cs = 1;
  const bool out_direct = out.dim() <= 2 || out.is_contiguous_order();
  if (out.dim() == 2 && !vector_weight) {
    out_rs = out.stride(0);
    out_cs = out.stride(1);
  } else if (out.dim() == 1 && !vector_weight) {
    out_cs = out.stride(0);
  } else if (!out_direct) {
    out_copy.resize(static_cast<size_t>(out.numel()) * out.element_size());
    out_data = out_copy.data();
  }
  // Wrap the raw buffers as 2-D tensors so the shared product code sees [rows, in] @ [in, out].
  const int64_t a_sizes[2] = {rows, in_features};
  Tensor a(input.dtype(), a_sizes, {}, const_cast<void*>(in_data));
  const int64_t b_sizes[2] = {in_features, out_features};
  Tensor b(weight.dtype(), b_sizes, {}, weight.data());
  const int64_t c_sizes[2] = {rows, out_features};
  Tensor c(out.dtype(), c_sizes, {}, out_data);
  const int64_t w_rs = vector_weight ? 0 : weight.stride(0);
  const int64_t w_cs = weight.stride(weight.dim() - 1);
  BatchedProduct p{1, rows, out_features, in_features, &a, 0, in_rs, in_cs, &b, 0, w_cs, w_rs, &c, 0, out_rs,
                   out_cs};
  if (bias != nullptr) {
    // The bias broadcasts against the output's trailing dim (and, as a 2-D bias, the rows).
    bias_strides(*bias, rows, out_features, p.bias_rs, p.bias_cs, op);
    p.bias = bias;
  }
  run_product(ctx, p, op);
  if (!out_copy.empty()) {
    const size_t es = out.element_size();
    const unsigned char* src = out_copy.data();
    auto* dst = static_cast<unsigned char*>(out.data());
    for_each_index<1>(out.sizes(), {out.strides().data()}, [&](const std::array<int64_t, 1>& off) {
      std::memcpy(dst + off[0] * static_cast<int64_t>(es), src, es);
      src += es;
    });
  }
}

}  // namespace

void register_linalg_kernels(KernelRegistry& registry) {
  registry.add("aten::mm.out", 4, mm_out, prepare_mm);
  registry.add("aten::bmm.out", 4, bmm_out);
  registry.add("aten::addmm.out", 7, addmm_out, prepare_addmm);
  registry.add("aten::linear.out", 5, linear_out, prepare_linear);
}

}  // namespace etnp::kernels
