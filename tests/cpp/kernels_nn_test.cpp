// Tests of the neural-network, linear-algebra and reduction kernels (linalg.cpp, conv.cpp, pool.cpp, norm.cpp,
// reduce.cpp, gemm.cpp), called directly through the registry.
//
// Expected values come from hand computation, from naive double-precision reference loops written here (for
// the GEMM/convolution/normalization cases over odd sizes), or — where ATen's exact conventions matter
// (upsampling coordinates, pooling windows with ceil_mode) — from PyTorch 1.13, generated offline with
//   import torch, torch.nn.functional as F
//   x = torch.arange(12.).reshape(1,1,3,4)*0.37-1; y = torch.arange(25.).reshape(1,1,5,5)
//   F.interpolate(x, scale_factor=(1.7,2.3), mode='bilinear', align_corners=False).flatten().tolist()
//   F.interpolate(x, size=(5,3), mode='bilinear', align_corners=True)
//   F.interpolate(x, scale_factor=(1.5,0.6), mode='nearest'); F.interpolate(x, size=(7,5), mode='nearest')
//   F.avg_pool2d(y, 3, 2, 1, ceil_mode=True, count_include_pad=False)   # and count_include_pad=True
//   F.avg_pool2d(y, (2,3), (2,2), (1,1), count_include_pad=True, divisor_override=5)
//   F.max_pool2d(z, (3,2), (2,3), (1,1), (1,2), ceil_mode=True, return_indices=True)  # z: the 6x7 below
// and pasted as literals (torch is not needed to run the tests).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <functional>
#include <cmath>
#include <deque>
#include <limits>
#include <random>

#include "etnp/error.h"
#include "etnp/threadpool.h"
#include "cpu_levels.h"
#include "fixtures.h"
#include "kernel_test_util.h"
#include "compute/gemm.h"

namespace etnp::testing {
namespace {

using Owned = std::unique_ptr<OwnedTensor>;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

int64_t numel_of(const std::vector<int64_t>& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

/// Element offset of logical index `flat` (row-major) in tensor t.
int64_t offset_of(const Tensor& t, int64_t flat) {
  int64_t off = 0;
  for (int d = t.dim() - 1; d >= 0; --d) {
    off += (flat % t.size(d)) * t.stride(d);
    flat /= t.size(d);
  }
  return off;
}

/// A tensor with values given in logical (row-major) order, laid out in `dim_order`.
template <typename T>
Owned tensor(ScalarType dtype, std::vector<int64_t> sizes, const std::vector<T>& values, std::vector<uint8_t> dim_order = {}) {
  Owned t = OwnedTensor::make<uint8_t>(dtype, sizes, {}, ShapeDynamism::Static, -1, dim_order);
  T* data = reinterpret_cast<T*>(t->storage.data());
  for (size_t i = 0; i < values.size(); ++i) data[offset_of(t->tensor, static_cast<int64_t>(i))] = values[i];
  return t;
}

Owned f32(std::vector<int64_t> sizes, const std::vector<float>& values, std::vector<uint8_t> dim_order = {}) {
  return tensor<float>(ScalarType::Float, std::move(sizes), values, std::move(dim_order));
}

/// An output tensor that may be resized to any shape of its rank with up to `capacity` elements.
Owned out_tensor(ScalarType dtype, std::vector<int64_t> sizes, int64_t capacity = -1, std::vector<uint8_t> dim_order = {}) {
  const int64_t cap = capacity < 0 ? numel_of(sizes) : capacity;
  return OwnedTensor::make<uint8_t>(dtype, sizes, {}, ShapeDynamism::DynamicBound, cap, dim_order);
}

/// Values of t in logical order.
template <typename T>
std::vector<T> logical(const OwnedTensor& t) {
  std::vector<T> v(static_cast<size_t>(t.tensor.numel()));
  const T* data = reinterpret_cast<const T*>(t.storage.data());
  for (size_t i = 0; i < v.size(); ++i) v[i] = data[offset_of(t.tensor, static_cast<int64_t>(i))];
  return v;
}

std::vector<int64_t> shape(const OwnedTensor& t) { return {t.tensor.sizes().begin(), t.tensor.sizes().end()}; }

std::vector<float> random_values(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

/// Builds the boxed argument list of one kernel call (list items live as long as the Call).
class Call {
 public:
  Call& t(OwnedTensor& x) { return push(EValue::from_tensor(&x.tensor)); }
  Call& i(int64_t v) { return push(EValue::from_int(v)); }
  Call& d(double v) { return push(EValue::from_double(v)); }
  Call& b(bool v) { return push(EValue::from_bool(v)); }
  Call& none() { return push(EValue()); }
  Call& ints(const std::vector<int64_t>& v) {
    auto& ptrs = lists_.emplace_back();
    for (int64_t x : v) ptrs.push_back(&items_.emplace_back(EValue::from_int(x)));
    return push(EValue::from_int_list(ptrs));
  }
  Call& doubles(const std::vector<double>& v) {
    auto& vals = doubles_.emplace_back(v);
    return push(EValue::from_double_list(vals));
  }
  /// Adds the return slot and runs the kernel (throws what the kernel throws).
  void run(const std::string& name) {
    std::vector<EValue> a = args_;
    a.push_back(EValue());
    call_kernel(name, a);
  }
  /// What the kernel's prepare hook builds for these arguments (nullptr: no hook, or no state).
  std::unique_ptr<KernelState> prepare(const std::string& name) {
    std::vector<EValue> a = args_;
    a.push_back(EValue());
    const KernelEntry* entry = runtime::kernel_registry().find(name);
    if (entry == nullptr || entry->prepare == nullptr) return nullptr;
    std::vector<EValue*> ptrs;
    for (EValue& v : a) ptrs.push_back(&v);
    return entry->prepare(KernelArgs(ptrs));
  }
  /// As run, with `state` as the kernel's state instead of what its prepare hook would build for these arguments.
  void run_with_state(const std::string& name, const KernelState* state) {
    std::vector<EValue> a = args_;
    a.push_back(EValue());
    const KernelEntry* entry = runtime::kernel_registry().find(name);
    ASSERT_NE(entry, nullptr) << name;
    std::vector<EValue*> ptrs;
    for (EValue& v : a) ptrs.push_back(&v);
    KernelContext ctx(&ThreadPool::global(), const_cast<KernelState*>(state));
    entry->fn(ctx, KernelArgs(ptrs));
  }

 private:
  Call& push(EValue v) {
    args_.push_back(v);
    return *this;
  }
  std::deque<EValue> items_;
  std::deque<std::vector<EValue*>> lists_;
  std::deque<std::vector<double>> doubles_;
  std::vector<EValue> args_;
};

void expect_close(const std::vector<float>& got, const std::vector<double>& want, double rtol, double atol,
                  const std::string& what = "") {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << what << " at " << i;
      continue;
    }
    EXPECT_NEAR(got[i], want[i], atol + rtol * std::fabs(want[i])) << what << " at " << i;
  }
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rtol = 1e-6,
                  double atol = 1e-6, const std::string& what = "") {
  expect_close(got, std::vector<double>(want.begin(), want.end()), rtol, atol, what);
}

// ---------------------------------------------------------------------------------------------------------
// Linear algebra

/// Naive double-precision c = a @ b over logical values.
std::vector<double> matmul_ref(const std::vector<float>& a, const std::vector<float>& b, int64_t m, int64_t k, int64_t n) {
  std::vector<double> c(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += double(a[size_t(i * k + p)]) * double(b[size_t(p * n + j)]);
      c[size_t(i * n + j)] = s;
    }
  }
  return c;
}

TEST(NnKernelsLinalg, MmHandChecked) {
  auto a = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  auto b = f32({3, 2}, {7, 8, 9, 10, 11, 12});
  auto out = out_tensor(ScalarType::Float, {2, 2});
  Call().t(*a).t(*b).t(*out).run("aten::mm.out");
  EXPECT_EQ(logical<float>(*out), (std::vector<float>{58, 64, 139, 154}));
}

struct MmCase {
  int64_t m, k, n;
};

TEST(NnKernelsLinalg, MmMatchesReferenceOnOddAndBlockedSizes) {
  // Odd edges, k > one cache block (256), a GEMV (m == 1) and a matrix-vector (n == 1) product.
  for (const MmCase& c : {MmCase{5, 7, 129}, MmCase{129, 300, 33}, MmCase{1, 256, 768}, MmCase{1, 129, 5},
                          MmCase{64, 256, 300}, MmCase{7, 5, 1}, MmCase{6, 16, 16}, MmCase{13, 1, 17}}) {
    const auto av = random_values(c.m * c.k, 1), bv = random_values(c.k * c.n, 2);
    auto a = f32({c.m, c.k}, av);
    auto b = f32({c.k, c.n}, bv);
    auto out = out_tensor(ScalarType::Float, {c.m, c.n});
    Call().t(*a).t(*b).t(*out).run("aten::mm.out");
    expect_close(logical<float>(*out), matmul_ref(av, bv, c.m, c.k, c.n), 1e-5, 1e-5,
                 "mm " + std::to_string(c.m) + "x" + std::to_string(c.k) + "x" + std::to_string(c.n));
  }
}

TEST(NnKernelsLinalg, MmHandlesTransposedLayouts) {
  const int64_t m = 17, k = 33, n = 9;
  const auto av = random_values(m * k, 3), bv = random_values(k * n, 4);
  const auto want = matmul_ref(av, bv, m, k, n);
  // Every combination of row-major / column-major operands and output.
  for (int mask = 0; mask < 8; ++mask) {
    std::vector<uint8_t> ta = (mask & 1) ? std::vector<uint8_t>{1, 0} : std::vector<uint8_t>{};
    std::vector<uint8_t> tb = (mask & 2) ? std::vector<uint8_t>{1, 0} : std::vector<uint8_t>{};
    std::vector<uint8_t> tc = (mask & 4) ? std::vector<uint8_t>{1, 0} : std::vector<uint8_t>{};
    auto a = f32({m, k}, av, ta);
    auto b = f32({k, n}, bv, tb);
    auto out = out_tensor(ScalarType::Float, {m, n}, -1, tc);
    Call().t(*a).t(*b).t(*out).run("aten::mm.out");
    expect_close(logical<float>(*out), want, 1e-5, 1e-5, "layout mask " + std::to_string(mask));
  }
}

TEST(NnKernelsLinalg, MmResizesDynamicOutputAndRejectsBadShapes) {
  auto a = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  auto b = f32({3, 1}, {1, 1, 1});
  auto out = out_tensor(ScalarType::Float, {4, 4}, 16);
  Call().t(*a).t(*b).t(*out).run("aten::mm.out");
  EXPECT_EQ(shape(*out), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(logical<float>(*out), (std::vector<float>{6, 15}));
  auto bad = f32({2, 2}, {1, 2, 3, 4});
  EXPECT_THROW(Call().t(*a).t(*bad).t(*out).run("aten::mm.out"), Error);
  auto d = tensor<double>(ScalarType::Double, {3, 1}, {1, 1, 1});
  EXPECT_THROW(Call().t(*a).t(*d).t(*out).run("aten::mm.out"), Error);
}

TEST(NnKernelsLinalg, MmIntegerAndDouble) {
  auto a = tensor<int64_t>(ScalarType::Long, {2, 2}, {1, 2, 3, 4});
  auto b = tensor<int64_t>(ScalarType::Long, {2, 2}, {5, 6, 7, 8});
  auto out = out_tensor(ScalarType::Long, {2, 2});
  Call().t(*a).t(*b).t(*out).run("aten::mm.out");
  EXPECT_EQ(logical<int64_t>(*out), (std::vector<int64_t>{19, 22, 43, 50}));
  // int8 products wrap modulo 256: 100*100 + 100*100 = 20000 = 78*256 + 32.
  auto c = tensor<int8_t>(ScalarType::Char, {1, 2}, {100, 100});
  auto e = tensor<int8_t>(ScalarType::Char, {2, 1}, {100, 100});
  auto o8 = out_tensor(ScalarType::Char, {1, 1});
  Call().t(*c).t(*e).t(*o8).run("aten::mm.out");
  EXPECT_EQ(logical<int8_t>(*o8)[0], static_cast<int8_t>(32));
  auto da = tensor<double>(ScalarType::Double, {1, 3}, {0.1, 0.2, 0.3});
  auto db = tensor<double>(ScalarType::Double, {3, 1}, {1, 2, 3});
  auto od = out_tensor(ScalarType::Double, {1, 1});
  Call().t(*da).t(*db).t(*od).run("aten::mm.out");
  EXPECT_DOUBLE_EQ(logical<double>(*od)[0], 0.1 + 0.4 + 0.9);
}

TEST(NnKernelsLinalg, BmmMatchesReferenceAnyLayout) {
  const int64_t bs = 3, m = 5, k = 129, n = 7;
  const auto av = random_values(bs * m * k, 5), bv = random_values(bs * k * n, 6);
  std::vector<double> want;
  for (int64_t i = 0; i < bs; ++i) {
    std::vector<float> ai(av.begin() + i * m * k, av.begin() + (i + 1) * m * k);
    std::vector<float> bi(bv.begin() + i * k * n, bv.begin() + (i + 1) * k * n);
    const auto ci = matmul_ref(ai, bi, m, k, n);
    want.insert(want.end(), ci.begin(), ci.end());
  }
  for (const std::vector<uint8_t>& order : {std::vector<uint8_t>{}, std::vector<uint8_t>{1, 2, 0},
                                            std::vector<uint8_t>{0, 2, 1}}) {
    auto a = f32({bs, m, k}, av, order);
    auto b = f32({bs, k, n}, bv, order);
    auto out = out_tensor(ScalarType::Float, {bs, m, n}, -1, order);
    Call().t(*a).t(*b).t(*out).run("aten::bmm.out");
    expect_close(logical<float>(*out), want, 1e-5, 1e-5, "bmm");
  }
}

TEST(NnKernelsLinalg, AddmmBroadcastsSelfWithAlphaBeta) {
  auto a = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  auto b = f32({3, 2}, {7, 8, 9, 10, 11, 12});
  auto bias_row = f32({2}, {1, -1});
  auto out = out_tensor(ScalarType::Float, {2, 2});
  // out = 0.5 * bias + 2 * a @ b
  Call().t(*bias_row).t(*a).t(*b).d(0.5).i(2).t(*out).run("aten::addmm.out");
  EXPECT_EQ(logical<float>(*out), (std::vector<float>{116.5f, 127.5f, 278.5f, 307.5f}));
  auto bias_col = f32({2, 1}, {10, 20});
  Call().t(*bias_col).t(*a).t(*b).i(1).i(1).t(*out).run("aten::addmm.out");
  EXPECT_EQ(logical<float>(*out), (std::vector<float>{68, 74, 159, 174}));
  // beta == 0 ignores self, NaNs included.
  auto nan_bias = f32({2, 2}, {kNaN, kNaN, kNaN, kNaN});
  Call().t(*nan_bias).t(*a).t(*b).i(0).i(1).t(*out).run("aten::addmm.out");
  EXPECT_EQ(logical<float>(*out), (std::vector<float>{58, 64, 139, 154}));
  auto bad_bias = f32({3}, {1, 2, 3});
  EXPECT_THROW(Call().t(*bad_bias).t(*a).t(*b).i(1).i(1).t(*out).run("aten::addmm.out"), Error);
}

TEST(NnKernelsLinalg, AddmmLargeMatchesReference) {
  const int64_t m = 64, k = 257, n = 129;
  const auto av = random_values(m * k, 7), bv = random_values(k * n, 8), biasv = random_values(n, 9);
  auto a = f32({m, k}, av);
  auto b = f32({k, n}, bv);
  auto bias = f32({n}, biasv);
  auto out = out_tensor(ScalarType::Float, {m, n});
  Call().t(*bias).t(*a).t(*b).i(1).i(1).t(*out).run("aten::addmm.out");
  auto want = matmul_ref(av, bv, m, k, n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) want[size_t(i * n + j)] += biasv[size_t(j)];
  }
  expect_close(logical<float>(*out), want, 1e-5, 1e-5);
}

TEST(NnKernelsLinalg, LinearUsesWeightOutByIn) {
  const int64_t batch = 2, rows = 3, in = 5, outf = 4;
  const auto xv = random_values(batch * rows * in, 10), wv = random_values(outf * in, 11), bv = random_values(outf, 12);
  auto x = f32({batch, rows, in}, xv);
  auto w = f32({outf, in}, wv);
  auto bias = f32({outf}, bv);
  auto out = out_tensor(ScalarType::Float, {batch, rows, outf});
  Call().t(*x).t(*w).t(*bias).t(*out).run("aten::linear.out");
  std::vector<double> want;
  for (int64_t r = 0; r < batch * rows; ++r) {
    for (int64_t o = 0; o < outf; ++o) {
      double s = bv[size_t(o)];
      for (int64_t p = 0; p < in; ++p) s += double(xv[size_t(r * in + p)]) * wv[size_t(o * in + p)];
      want.push_back(s);
    }
  }
  expect_close(logical<float>(*out), want, 1e-5, 1e-6);
  // Same through a permuted input layout and without bias.
  auto xp = f32({batch, rows, in}, xv, {2, 0, 1});
  Call().t(*xp).t(*w).none().t(*out).run("aten::linear.out");
  for (int64_t r = 0; r < batch * rows; ++r) {
    for (int64_t o = 0; o < outf; ++o) want[size_t(r * outf + o)] -= bv[size_t(o)];
  }
  expect_close(logical<float>(*out), want, 1e-5, 1e-6);
}

TEST(NnKernelsLinalg, LinearLargeMatchesReference) {
  // Full 16-column weight panels (transposed packing), a partial one, k with a remainder of 8.
  const int64_t rows = 70, in = 301, outf = 40;
  const auto xv = random_values(rows * in, 13), wv = random_values(outf * in, 14), bv = random_values(outf, 15);
  auto x = f32({rows, in}, xv);
  auto w = f32({outf, in}, wv);
  auto bias = f32({outf}, bv);
  auto out = out_tensor(ScalarType::Float, {rows, outf});
  Call().t(*x).t(*w).t(*bias).t(*out).run("aten::linear.out");
  std::vector<double> want;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < outf; ++o) {
      double acc = bv[size_t(o)];
      for (int64_t p = 0; p < in; ++p) acc += double(xv[size_t(r * in + p)]) * wv[size_t(o * in + p)];
      want.push_back(acc);
    }
  }
  expect_close(logical<float>(*out), want, 1e-5, 1e-5);
}

TEST(NnKernelsLinalg, GemmEpilogueAndZeroK) {
  // k == 0: C = beta * bias only.
  float bias[3] = {1, 2, 3};
  float c[6] = {kNaN, kNaN, kNaN, kNaN, kNaN, kNaN};
  compute::GemmEpilogue ep;
  ep.beta = 2.0f;
  ep.bias = compute::GemmMatrix{bias, 0, 1};
  compute::gemm_f32(2, 3, 0, {nullptr, 0, 1}, {nullptr, 3, 1}, c, 3, 1, ep, nullptr);
  EXPECT_EQ(std::vector<float>(c, c + 6), (std::vector<float>{2, 4, 6, 2, 4, 6}));
  const std::string kernel = compute::gemm_f32_kernel_name();
  EXPECT_TRUE(kernel == "avx2-fma" || kernel == "neon" || kernel == "generic") << kernel;
}

TEST(NnKernelsLinalg, GemmEpilogueBiasLayouts) {
  // alpha * A B + beta * bias with the bias per row (a convolution's channel), per column (addmm), as a
  // matrix, and a transposed (strided) output, over sizes that leave partial tiles.
  const int64_t m = 13, n = 37, k = 9;
  const auto av = random_values(m * k, 71), bv = random_values(k * n, 72), biasv = random_values(m * n, 73);
  struct Layout {
    int64_t bias_rs, bias_cs;
    bool transposed_out;
  };
  for (const Layout& l : {Layout{1, 0, false}, Layout{0, 1, false}, Layout{n, 1, false}, Layout{1, 0, true}}) {
    compute::GemmEpilogue ep;
    ep.alpha = 0.5f;
    ep.beta = 3.0f;
    ep.bias = compute::GemmMatrix{biasv.data(), l.bias_rs, l.bias_cs};
    std::vector<float> c(static_cast<size_t>(m * n), kNaN);
    const int64_t c_rs = l.transposed_out ? 1 : n, c_cs = l.transposed_out ? m : 1;
    compute::gemm_f32(m, n, k, {av.data(), k, 1}, {bv.data(), n, 1}, c.data(), c_rs, c_cs, ep, nullptr);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0.0;
        for (int64_t p = 0; p < k; ++p) acc += double(av[size_t(i * k + p)]) * bv[size_t(p * n + j)];
        const double want = 0.5 * acc + 3.0 * biasv[size_t(i * l.bias_rs + j * l.bias_cs)];
        ASSERT_NEAR(c[size_t(i * c_rs + j * c_cs)], want, 1e-4)
            << l.bias_rs << "," << l.bias_cs << " at " << i << "," << j;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// Convolution

struct ConvCase {
  int64_t n, c_in, h, w, c_out, kh, kw;
  int64_t sh, sw, ph, pw, dh, dw;
  int64_t groups;
  bool transposed;
  int64_t oph, opw;
  bool bias;
  bool one_d;
};

/// Naive double convolution over logical NCHW values (weights as ATen lays them out).
std::vector<double> conv_ref(const ConvCase& c, const std::vector<float>& x, const std::vector<float>& w,
                             const std::vector<float>& b, int64_t& oh, int64_t& ow) {
  const int64_t cin_g = c.c_in / c.groups, cout_g = c.c_out / c.groups;
  if (!c.transposed) {
    oh = (c.h + 2 * c.ph - c.dh * (c.kh - 1) - 1) / c.sh + 1;
    ow = (c.w + 2 * c.pw - c.dw * (c.kw - 1) - 1) / c.sw + 1;
  } else {
    oh = (c.h - 1) * c.sh - 2 * c.ph + c.dh * (c.kh - 1) + c.oph + 1;
    ow = (c.w - 1) * c.sw - 2 * c.pw + c.dw * (c.kw - 1) + c.opw + 1;
  }
  std::vector<double> out(size_t(c.n * c.c_out * oh * ow), 0.0);
  auto X = [&](int64_t n, int64_t ch, int64_t i, int64_t j) { return double(x[size_t(((n * c.c_in + ch) * c.h + i) * c.w + j)]); };
  for (int64_t n = 0; n < c.n; ++n) {
    if (!c.transposed) {
      for (int64_t oc = 0; oc < c.c_out; ++oc) {
        const int64_t g = oc / cout_g;
        for (int64_t i = 0; i < oh; ++i) {
          for (int64_t j = 0; j < ow; ++j) {
            double s = c.bias ? b[size_t(oc)] : 0.0;
            for (int64_t icl = 0; icl < cin_g; ++icl) {
              for (int64_t p = 0; p < c.kh; ++p) {
                for (int64_t q = 0; q < c.kw; ++q) {
                  const int64_t ii = i * c.sh - c.ph + p * c.dh, jj = j * c.sw - c.pw + q * c.dw;
                  if (ii < 0 || ii >= c.h || jj < 0 || jj >= c.w) continue;
                  s += X(n, g * cin_g + icl, ii, jj) * w[size_t(((oc * cin_g + icl) * c.kh + p) * c.kw + q)];
                }
              }
            }
            out[size_t(((n * c.c_out + oc) * oh + i) * ow + j)] = s;
          }
        }
      }
    } else {
      // Scatter form: every input pixel spreads over the output through the kernel.
      for (int64_t ic = 0; ic < c.c_in; ++ic) {
        const int64_t g = ic / cin_g;
        for (int64_t i = 0; i < c.h; ++i) {
          for (int64_t j = 0; j < c.w; ++j) {
            for (int64_t ocl = 0; ocl < cout_g; ++ocl) {
              for (int64_t p = 0; p < c.kh; ++p) {
                for (int64_t q = 0; q < c.kw; ++q) {
                  const int64_t oi = i * c.sh - c.ph + p * c.dh, oj = j * c.sw - c.pw + q * c.dw;
                  if (oi < 0 || oi >= oh || oj < 0 || oj >= ow) continue;
                  out[size_t(((n * c.c_out + g * cout_g + ocl) * oh + oi) * ow + oj)] +=
                      X(n, ic, i, j) * w[size_t(((ic * cout_g + ocl) * c.kh + p) * c.kw + q)];
                }
              }
            }
          }
        }
      }
      if (c.bias) {
        for (int64_t oc = 0; oc < c.c_out; ++oc) {
          for (int64_t k = 0; k < oh * ow; ++k) out[size_t((n * c.c_out + oc) * oh * ow + k)] += b[size_t(oc)];
        }
      }
    }
  }
  return out;
}

void run_conv_case(const ConvCase& c, uint32_t seed, std::vector<uint8_t> order = {}, bool as_double = false) {
  const int64_t cin_g = c.c_in / c.groups;
  const std::vector<int64_t> w_shape =
      c.transposed ? std::vector<int64_t>{c.c_in, c.c_out / c.groups, c.kh, c.kw}
                   : std::vector<int64_t>{c.c_out, cin_g, c.kh, c.kw};
  const auto xv = random_values(c.n * c.c_in * c.h * c.w, seed);
  const auto wv = random_values(numel_of(w_shape), seed + 1);
  const auto bv = random_values(c.c_out, seed + 2);
  int64_t oh = 0, ow = 0;
  const auto want = conv_ref(c, xv, wv, bv, oh, ow);
  std::vector<int64_t> xs{c.n, c.c_in, c.h, c.w}, ws = w_shape, os{c.n, c.c_out, oh, ow};
  if (c.one_d) {
    xs.erase(xs.begin() + 2);
    ws.erase(ws.begin() + 2);
    os.erase(os.begin() + 2);
  }
  // Double runs take the same (float-representable) values through the generic direct path.
  const ScalarType dtype = as_double ? ScalarType::Double : ScalarType::Float;
  auto make = [&](std::vector<int64_t> sizes, const std::vector<float>& v, std::vector<uint8_t> o) {
    return as_double ? tensor<double>(dtype, sizes, std::vector<double>(v.begin(), v.end()), o) : f32(sizes, v, o);
  };
  auto x = make(xs, xv, order);
  auto w = make(ws, wv, order);
  auto b = make({c.c_out}, bv, {});
  auto out = out_tensor(dtype, os, -1, order);
  Call call;
  call.t(*x).t(*w);
  if (c.bias) {
    call.t(*b);
  } else {
    call.none();
  }
  if (c.one_d) {
    call.ints({c.sw}).ints({c.pw}).ints({c.dw}).b(c.transposed).ints({c.opw});
  } else {
    call.ints({c.sh, c.sw}).ints({c.ph, c.pw}).ints({c.dh, c.dw}).b(c.transposed).ints({c.oph, c.opw});
  }
  call.i(c.groups).t(*out).run("aten::convolution.out");
  EXPECT_EQ(shape(*out), os);
  std::vector<float> got;
  if (as_double) {
    for (double v : logical<double>(*out)) got.push_back(static_cast<float>(v));
  } else {
    got = logical<float>(*out);
  }
  expect_close(got, want, 1e-5, 1e-5,
               "conv cin=" + std::to_string(c.c_in) + " cout=" + std::to_string(c.c_out) + " g=" +
                   std::to_string(c.groups) + (c.transposed ? " transposed" : ""));
}

TEST(NnKernelsConv, HandChecked2x2) {
  auto x = f32({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  auto w = f32({1, 1, 2, 2}, {1, 0, 0, -1});
  auto b = f32({1}, {10});
  auto out = out_tensor(ScalarType::Float, {1, 1, 2, 2});
  Call().t(*x).t(*w).t(*b).ints({1, 1}).ints({0, 0}).ints({1, 1}).b(false).ints({0, 0}).i(1).t(*out).run(
      "aten::convolution.out");
  EXPECT_EQ(logical<float>(*out), (std::vector<float>{6, 6, 6, 6}));
}

TEST(NnKernelsConv, GemmPathsMatchReference) {
  // {n, cin, h, w, cout, kh, kw, sh, sw, ph, pw, dh, dw, groups, transposed, oph, opw, bias, one_d}
  run_conv_case({1, 3, 13, 11, 8, 3, 3, 2, 2, 1, 1, 1, 1, 1, false, 0, 0, true, false}, 20);   // stem-like
  run_conv_case({2, 16, 7, 9, 24, 1, 1, 1, 1, 0, 0, 1, 1, 1, false, 0, 0, false, false}, 21);  // 1x1 direct
  run_conv_case({1, 5, 10, 12, 129, 1, 1, 1, 1, 0, 0, 1, 1, 1, false, 0, 0, true, false}, 22); // odd cout
  run_conv_case({1, 6, 9, 9, 4, 3, 2, 1, 3, 2, 0, 2, 1, 2, false, 0, 0, true, false}, 23);     // groups, dilation
  run_conv_case({1, 4, 8, 8, 6, 1, 1, 2, 2, 0, 0, 1, 1, 1, false, 0, 0, true, false}, 24);     // strided 1x1
  run_conv_case({2, 3, 1, 17, 5, 1, 4, 1, 2, 0, 3, 1, 2, 1, false, 0, 0, true, true}, 25);     // 1-D
  // Atrous (DeepLabV3's ASPP): padding and dilation far wider than the 4x4 map, so most taps of every output
  // (all but the centre one) fall outside it; this wrote past its im2col rows before.
  run_conv_case({1, 6, 4, 4, 5, 3, 3, 1, 1, 12, 12, 12, 12, 1, false, 0, 0, true, false}, 26);
  run_conv_case({1, 4, 3, 5, 3, 3, 3, 2, 1, 9, 7, 9, 7, 1, false, 0, 0, false, false}, 27);
  // Only the live taps are multiplied: a rectangle starting inside the image (padding moved below zero), dead
  // kernel rows with groups and a batch, and no live tap at all (every output the bias, or zero).
  run_conv_case({1, 3, 5, 5, 4, 3, 3, 1, 1, 1, 1, 3, 3, 1, false, 0, 0, true, false}, 28);
  run_conv_case({2, 4, 3, 20, 6, 3, 3, 1, 1, 4, 4, 4, 4, 2, false, 0, 0, true, false}, 29);
  run_conv_case({1, 2, 1, 1, 3, 1, 1, 2, 2, 1, 1, 1, 1, 1, false, 0, 0, true, false}, 30);
  run_conv_case({1, 2, 1, 1, 3, 1, 1, 2, 2, 1, 1, 1, 1, 1, false, 0, 0, false, false}, 31);
}

TEST(NnKernelsConv, DepthwiseMatchesReference) {
  // At every CPU level: the portable planes, and the AVX2 or NEON phase planes and 8-column tiles (rows that end
  // in a short tile, stride 2's deinterleaving copy on wide rows, stride 3, a row length of whole tiles).
  at_each_cpu_level([](CpuLevel level) {
    SCOPED_TRACE(cpu_level_name(level));
    run_conv_case({1, 8, 12, 13, 8, 3, 3, 1, 1, 1, 1, 1, 1, 8, false, 0, 0, true, false}, 30);
    run_conv_case({2, 5, 11, 14, 5, 3, 3, 2, 2, 1, 1, 1, 1, 5, false, 0, 0, false, false}, 31);
    run_conv_case({1, 4, 9, 10, 8, 5, 3, 3, 3, 2, 1, 1, 2, 4, false, 0, 0, true, false}, 32);  // multiplier 2
    run_conv_case({1, 3, 5, 5, 3, 3, 3, 1, 1, 0, 0, 2, 2, 3, false, 0, 0, true, false}, 33);   // dilation, no pad
    run_conv_case({1, 8, 4, 4, 8, 3, 3, 1, 1, 12, 12, 12, 12, 8, false, 0, 0, true, false}, 34);  // atrous
    run_conv_case({1, 3, 9, 37, 3, 3, 3, 1, 1, 1, 1, 1, 1, 3, false, 0, 0, true, false}, 35);   // 4 tiles + 5
    run_conv_case({2, 2, 7, 41, 2, 3, 3, 2, 2, 1, 1, 1, 1, 2, false, 0, 0, true, false}, 36);   // stride 2, wide
    run_conv_case({1, 2, 11, 50, 4, 5, 5, 3, 3, 2, 2, 1, 1, 2, false, 0, 0, false, false}, 37); // stride 3
    run_conv_case({1, 2, 6, 16, 2, 3, 3, 1, 1, 1, 1, 1, 1, 2, false, 0, 0, true, false}, 38);   // whole tiles
    run_conv_case({2, 3, 1, 29, 3, 1, 5, 1, 2, 0, 2, 1, 1, 3, false, 0, 0, true, true}, 39);    // 1-D, stride 2
  });
}

TEST(NnKernelsConv, TransposedMatchesReference) {
  run_conv_case({1, 4, 5, 6, 6, 3, 3, 2, 2, 1, 1, 1, 1, 1, true, 1, 0, true, false}, 40);
  run_conv_case({2, 4, 4, 3, 6, 2, 3, 1, 2, 0, 1, 2, 1, 2, true, 0, 1, false, false}, 41);
  run_conv_case({1, 2, 1, 7, 3, 1, 3, 1, 3, 0, 1, 1, 1, 1, true, 0, 2, true, true}, 42);
  // Stride 1 and 2 (each with its own col2im loop), and 4 (the general one).
  run_conv_case({1, 3, 4, 5, 2, 3, 2, 1, 1, 1, 0, 1, 1, 1, true, 0, 0, true, false}, 43);
  run_conv_case({1, 3, 5, 9, 4, 4, 4, 2, 2, 1, 1, 1, 1, 1, true, 0, 0, true, false}, 44);
  run_conv_case({1, 2, 3, 4, 2, 2, 5, 4, 4, 0, 2, 1, 1, 1, true, 1, 3, false, false}, 49);
}

TEST(NnKernelsConv, DoubleDirectPathMatchesReference) {
  run_conv_case({1, 4, 5, 6, 6, 3, 3, 2, 2, 1, 1, 1, 1, 1, true, 1, 0, true, false}, 45, {}, true);
  run_conv_case({2, 4, 4, 3, 6, 2, 3, 1, 2, 0, 1, 2, 1, 2, true, 0, 1, false, false}, 46, {}, true);
  run_conv_case({1, 6, 9, 9, 4, 3, 2, 1, 3, 2, 0, 2, 1, 2, false, 0, 0, true, false}, 47, {0, 2, 3, 1}, true);
  run_conv_case({2, 3, 1, 17, 5, 1, 4, 1, 2, 0, 3, 1, 2, 1, false, 0, 0, true, true}, 48, {}, true);
}

TEST(NnKernelsConv, ChannelsLastLayoutMatchesReference) {
  run_conv_case({1, 6, 7, 8, 10, 3, 3, 1, 1, 1, 1, 1, 1, 2, false, 0, 0, true, false}, 50, {0, 2, 3, 1});
  run_conv_case({1, 6, 7, 8, 6, 3, 3, 2, 1, 1, 1, 1, 1, 6, false, 0, 0, true, false}, 51, {0, 2, 3, 1});
  run_conv_case({1, 4, 5, 6, 6, 3, 3, 2, 2, 1, 1, 1, 1, 2, true, 1, 1, true, false}, 52, {0, 2, 3, 1});
}

TEST(NnKernelsConv, DoubleDtypeAndErrors) {
  auto x = tensor<double>(ScalarType::Double, {1, 1, 2, 2}, {1, 2, 3, 4});
  auto w = tensor<double>(ScalarType::Double, {2, 1, 1, 1}, {0.5, -1});
  auto out = out_tensor(ScalarType::Double, {1, 2, 2, 2});
  Call().t(*x).t(*w).none().ints({1, 1}).ints({0, 0}).ints({1, 1}).b(false).ints({0, 0}).i(1).t(*out).run(
      "aten::convolution.out");
  EXPECT_EQ(logical<double>(*out), (std::vector<double>{0.5, 1, 1.5, 2, -1, -2, -3, -4}));
  // 3 input channels cannot feed a weight expecting 2 per group.
  auto x3 = f32({1, 3, 4, 4}, random_values(48, 1));
  auto w2 = f32({4, 2, 3, 3}, random_values(72, 2));
  auto o = out_tensor(ScalarType::Float, {1, 4, 2, 2});
  EXPECT_THROW(Call().t(*x3).t(*w2).none().ints({1, 1}).ints({0, 0}).ints({1, 1}).b(false).ints({0, 0}).i(1).t(*o).run(
                   "aten::convolution.out"),
               Error);
  // Kernel larger than the padded input.
  auto w5 = f32({1, 3, 5, 5}, random_values(75, 3));
  EXPECT_THROW(Call().t(*x3).t(*w5).none().ints({1, 1}).ints({0, 0}).ints({1, 1}).b(false).ints({0, 0}).i(1).t(*o).run(
                   "aten::convolution.out"),
               Error);
  // A 2-D convolution's stride, padding and dilation: one entry (repeated) or two, nothing else.
  auto w3 = f32({4, 3, 3, 3}, random_values(108, 4));
  try {
    Call().t(*x3).t(*w3).none().ints({1, 1, 1}).ints({0, 0}).ints({1, 1}).b(false).ints({0, 0}).i(1).t(*o).run(
        "aten::convolution.out");
    FAIL() << "a stride of three entries was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("stride must have 2 entries, got 3"), std::string::npos) << e.what();
  }
  try {
    Call().t(*x3).t(*w3).none().ints({1, 1}).ints({}).ints({1, 1}).b(false).ints({0, 0}).i(1).t(*o).run(
        "aten::convolution.out");
    FAIL() << "an empty padding was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("padding must have 2 entries, got 0"), std::string::npos) << e.what();
  }
  // One entry stands for both dims: stride 2 of a 3x3 kernel over 4x4, padding 1, is a 2x2 output.
  Call().t(*x3).t(*w3).none().ints({2}).ints({1}).ints({1}).b(false).ints({0}).i(1).t(*o).run(
      "aten::convolution.out");
  auto o2 = out_tensor(ScalarType::Float, {1, 4, 2, 2});
  Call().t(*x3).t(*w3).none().ints({2, 2}).ints({1, 1}).ints({1, 1}).b(false).ints({0, 0}).i(1).t(*o2).run(
      "aten::convolution.out");
  EXPECT_EQ(logical<float>(*o), logical<float>(*o2));
}

// The parallel splits (GEMM tiles, GEMV chunks, batched heads, depthwise channels, im2col rows, col2im
// channels, a convolution's images) with an odd thread count, whatever the machine has.
class NnKernelsThreads : public ::testing::Test {
 protected:
  void SetUp() override { ThreadPool::global().set_num_threads(3); }
  void TearDown() override { ThreadPool::global().set_num_threads(0); }
};

TEST_F(NnKernelsThreads, ParallelPathsMatchReference) {
  // 150x300x200 is big enough to split into tiles (a multiple of the three threads, of equal sizes).
  for (const MmCase& c : {MmCase{67, 300, 131}, MmCase{1, 512, 1000}, MmCase{200, 64, 3}, MmCase{150, 300, 200}}) {
    const auto av = random_values(c.m * c.k, 90), bv = random_values(c.k * c.n, 91);
    auto a = f32({c.m, c.k}, av);
    auto b = f32({c.k, c.n}, bv, {1, 0});
    auto out = out_tensor(ScalarType::Float, {c.m, c.n});
    Call().t(*a).t(*b).t(*out).run("aten::mm.out");
    expect_close(logical<float>(*out), matmul_ref(av, bv, c.m, c.k, c.n), 1e-5, 1e-5, "threaded mm");
  }
  const int64_t bs = 5, m = 9, k = 33, n = 17;
  const auto av = random_values(bs * m * k, 92), bv = random_values(bs * k * n, 93);
  auto a = f32({bs, m, k}, av);
  auto b = f32({bs, k, n}, bv);
  auto out = out_tensor(ScalarType::Float, {bs, m, n});
  Call().t(*a).t(*b).t(*out).run("aten::bmm.out");
  std::vector<double> want;
  for (int64_t i = 0; i < bs; ++i) {
    const auto ci = matmul_ref(std::vector<float>(av.begin() + i * m * k, av.begin() + (i + 1) * m * k),
                               std::vector<float>(bv.begin() + i * k * n, bv.begin() + (i + 1) * k * n), m, k, n);
    want.insert(want.end(), ci.begin(), ci.end());
  }
  expect_close(logical<float>(*out), want, 1e-5, 1e-5, "threaded bmm");
  run_conv_case({2, 24, 30, 31, 24, 3, 3, 2, 2, 1, 1, 1, 1, 24, false, 0, 0, true, false}, 94);
  run_conv_case({1, 16, 20, 21, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1, false, 0, 0, true, false}, 95);
  run_conv_case({1, 8, 9, 10, 12, 3, 3, 2, 2, 1, 1, 1, 1, 1, true, 1, 1, true, false}, 96);
  // (image, group) GEMMs too small to split one by one go to the threads whole, each with its own patches: five
  // images of a small CNN's stem over three threads (uneven shares), and twelve pairs of a grouped, dilated
  // convolution whose dead kernel rows are trimmed (each thread gathers its own live weights).
  run_conv_case({5, 3, 32, 32, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, false, 0, 0, true, false}, 97);
  run_conv_case({6, 16, 3, 64, 64, 3, 3, 1, 1, 4, 4, 4, 4, 2, false, 0, 0, true, false}, 98);
}

// ---------------------------------------------------------------------------------------------------------
// Pooling and upsampling

TEST(NnKernelsPool, MaxPoolWithIndices) {
  auto x = f32({1, 1, 4, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
  auto out = out_tensor(ScalarType::Float, {1, 1, 2, 2});
  auto idx = out_tensor(ScalarType::Long, {1, 1, 2, 2});
  Call().t(*x).ints({2, 2}).ints({}).ints({0}).ints({1}).b(false).t(*out).t(*idx).run(
      "aten::max_pool2d_with_indices.out");
  EXPECT_EQ(logical<float>(*out), (std::vector<float>{6, 8, 14, 16}));
  EXPECT_EQ(logical<int64_t>(*idx), (std::vector<int64_t>{5, 7, 13, 15}));
}

TEST(NnKernelsPool, MaxPoolCeilModeDilationPaddingMatchesTorch) {
  auto z = f32({1, 1, 6, 7}, {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6,
                              4, 3, 3, 8, 3, 2, 7, 9, 5, 0, 2, 8, 8, 4, 1, 9, 7, 1, 6});
  auto out = out_tensor(ScalarType::Float, {1, 1, 4, 3});
  auto idx = out_tensor(ScalarType::Long, {1, 1, 4, 3});
  Call().t(*z).ints({3, 2}).ints({2, 3}).ints({1, 1}).ints({1, 2}).b(true).t(*out).t(*idx).run(
      "aten::max_pool2d_with_indices.out");
  EXPECT_EQ(logical<float>(*out), (std::vector<float>{5, 8, 9, 6, 8, 9, 7, 9, 8, 4, 7, 1}));
  EXPECT_EQ(logical<int64_t>(*idx), (std::vector<int64_t>{8, 11, 5, 22, 11, 12, 29, 30, 26, 36, 39, 40}));
}

TEST(NnKernelsPool, MaxPoolNaNWinsAnd3DInput) {
  auto x = f32({1, 2, 2}, {1, kNaN, 3, 2});
  auto out = out_tensor(ScalarType::Float, {1, 1, 1});
  auto idx = out_tensor(ScalarType::Long, {1, 1, 1});
  Call().t(*x).ints({2}).ints({2}).ints({0}).ints({1}).b(false).t(*out).t(*idx).run(
      "aten::max_pool2d_with_indices.out");
  EXPECT_TRUE(std::isnan(logical<float>(*out)[0]));
  EXPECT_EQ(logical<int64_t>(*idx)[0], 1);
  // Padding above half the kernel is rejected.
  EXPECT_THROW(Call().t(*x).ints({2}).ints({2}).ints({2}).ints({1}).b(false).t(*out).t(*idx).run(
                   "aten::max_pool2d_with_indices.out"),
               Error);
}

/// A max pooling's geometry over [n, c, h, w].
struct MaxPoolCase {
  int64_t n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw;
  bool ceil;
  int64_t out_size(int64_t in, int64_t k, int64_t st, int64_t pad, int64_t dil) const {
    const int64_t span = in + 2 * pad - dil * (k - 1) - 1;
    int64_t out = (ceil ? (span + st - 1) / st : span / st) + 1;
    if (ceil && (out - 1) * st >= in + pad) --out;
    return out;
  }
  int64_t oh() const { return out_size(h, kh, sh, ph, dh); }
  int64_t ow() const { return out_size(w, kw, sw, pw, dw); }
  std::string describe() const {
    return "kernel " + std::to_string(kh) + "x" + std::to_string(kw) + " stride " + std::to_string(sw) + " padding " +
           std::to_string(pw) + " input " + std::to_string(h) + "x" + std::to_string(w) + (ceil ? " ceil" : "");
  }
};

/// Runs aten::max_pool2d_with_indices.out on `xv` (logical NCHW values) with the given dim order and checks values
/// and indices against ATen's definition: start from -inf at the window's first element, take a greater value or
/// any NaN in window order (so a window's last NaN and its index win). `state`: a prepared state to run with
/// instead of the one the kernel's prepare hook builds for these tensors.
void check_max_pool(const MaxPoolCase& c, const std::vector<float>& xv, const std::vector<uint8_t>& order,
                    const std::string& where, const KernelState* state = nullptr) {
  const int64_t oh = c.oh(), ow = c.ow();
  auto x = f32({c.n, c.c, c.h, c.w}, xv, order);
  auto out = out_tensor(ScalarType::Float, {c.n, c.c, oh, ow}, -1, order);
  auto idx = out_tensor(ScalarType::Long, {c.n, c.c, oh, ow}, -1, order);
  Call call;
  call.t(*x).ints({c.kh, c.kw}).ints({c.sh, c.sw}).ints({c.ph, c.pw}).ints({c.dh, c.dw}).b(c.ceil).t(*out).t(*idx);
  if (state == nullptr) {
    call.run("aten::max_pool2d_with_indices.out");
  } else {
    call.run_with_state("aten::max_pool2d_with_indices.out", state);
  }
  const auto got = logical<float>(*out);
  const auto got_idx = logical<int64_t>(*idx);
  size_t i = 0;
  for (int64_t plane = 0; plane < c.n * c.c; ++plane) {
    const float* xp = xv.data() + plane * c.h * c.w;
    for (int64_t y = 0; y < oh; ++y) {
      for (int64_t z = 0; z < ow; ++z, ++i) {
        float best = -std::numeric_limits<float>::infinity();
        int64_t best_at = -1;
        for (int64_t ky = 0; ky < c.kh; ++ky) {
          for (int64_t kx = 0; kx < c.kw; ++kx) {
            const int64_t iy = y * c.sh - c.ph + ky * c.dh, ix = z * c.sw - c.pw + kx * c.dw;
            if (iy < 0 || iy >= c.h || ix < 0 || ix >= c.w) continue;
            const float v = xp[iy * c.w + ix];
            if (best_at < 0) best_at = iy * c.w + ix;
            if (v > best || std::isnan(v)) {
              best = v;
              best_at = iy * c.w + ix;
            }
          }
        }
        ASSERT_EQ(got_idx[i], best_at) << where << " at " << i;
        if (std::isnan(best)) {
          ASSERT_TRUE(std::isnan(got[i])) << where << " at " << i;
        } else {
          ASSERT_EQ(got[i], best) << where << " at " << i;
        }
      }
    }
  }
}

/// Values from a few levels, so that windows tie; one in `special_every` is -inf or NaN.
std::vector<float> max_pool_values(std::mt19937& rng, size_t n, unsigned special_every) {
  const float levels[] = {-1.5f, 0.0f, 2.0f, 2.0f, 3.25f, -std::numeric_limits<float>::infinity(), kNaN};
  std::vector<float> xv(n);
  for (float& v : xv) v = rng() % special_every == 0 ? levels[5 + rng() % 2] : levels[rng() % 5];
  return xv;
}

// Rows wide enough for the row loop (8 outputs at a time, strides 1, 2 and 3, the windows inside the row) and
// its edges, rows under 32 outputs for the window table (8 pixels of any rows at a time; a tap in the padding
// repeats the one before it), with NaN and -inf now and then and in most windows (several NaNs in a window before
// and after padding: the last one's index wins), for contiguous and channels-last inputs and outputs.
TEST(NnKernelsPool, MaxPoolWideRowsMatchTheDefinition) {
  std::mt19937 rng(7);
  const MaxPoolCase cases[] = {
      {1, 3, 9, 40, 3, 3, 1, 1, 1, 1, 1, 1, false}, {2, 2, 31, 31, 3, 3, 2, 2, 0, 0, 1, 1, true},
      {1, 4, 12, 37, 2, 2, 2, 2, 0, 0, 1, 1, false}, {1, 2, 10, 50, 3, 5, 3, 3, 1, 2, 1, 1, true},
      {1, 1, 7, 64, 1, 4, 1, 1, 0, 0, 1, 1, false}, {1, 2, 11, 45, 3, 3, 2, 2, 1, 1, 2, 2, false},
      {1, 5, 8, 17, 3, 3, 2, 2, 1, 1, 1, 1, true}, {1, 2, 6, 80, 3, 3, 2, 2, 1, 1, 1, 1, true},
      {1, 1, 5, 110, 3, 3, 3, 3, 0, 0, 1, 1, false},
      // Rows of 11 and 13 outputs: the row loop's last block overlaps the one before it.
      {1, 3, 9, 23, 3, 3, 2, 2, 0, 0, 1, 1, true}, {1, 2, 6, 13, 3, 3, 1, 1, 1, 1, 1, 1, false},
      // Small maps with padding on every side and a window wider than tall (the table's repeated taps).
      {1, 3, 7, 7, 3, 3, 2, 2, 1, 1, 1, 1, true}, {2, 2, 5, 6, 3, 5, 1, 2, 1, 2, 1, 1, false},
  };
  at_each_cpu_level([&](CpuLevel level) {
    for (const MaxPoolCase& c : cases) {
      for (unsigned special_every : {50u, 3u}) {
        for (bool channels_last : {false, true}) {
          const std::vector<float> xv =
              max_pool_values(rng, static_cast<size_t>(c.n * c.c * c.h * c.w), special_every);
          const std::vector<uint8_t> order = channels_last ? std::vector<uint8_t>{0, 2, 3, 1} : std::vector<uint8_t>{};
          check_max_pool(c, xv, order,
                         c.describe() + (channels_last ? " channels-last" : "") + " special 1/" +
                             std::to_string(special_every) + " level " + std::to_string(static_cast<int>(level)));
        }
      }
    }
  });
}

// The window table a max pooling builds at load serves the input size it was built for; a call on another size
// (a dynamic shape, another stride) builds its own and gets the definition's values and indices all the same.
TEST(NnKernelsPool, MaxPoolTableBuiltAtLoadServesOnlyItsSize) {
  const KernelEntry* entry = runtime::kernel_registry().find("aten::max_pool2d_with_indices.out");
  ASSERT_NE(entry, nullptr);
  std::mt19937 rng(9);
  const MaxPoolCase loaded{1, 4, 15, 15, 3, 3, 2, 2, 0, 0, 1, 1, true};
  auto x = f32({1, 4, 15, 15}, std::vector<float>(4 * 15 * 15, 1.0f));
  auto out = out_tensor(ScalarType::Float, {1, 4, loaded.oh(), loaded.ow()});
  auto idx = out_tensor(ScalarType::Long, {1, 4, loaded.oh(), loaded.ow()});
  std::deque<EValue> items;
  std::vector<EValue*> pair_lists[4];
  std::vector<EValue> args;
  const int64_t pairs[4][2] = {{3, 3}, {2, 2}, {0, 0}, {1, 1}};
  args.push_back(EValue::from_tensor(&x->tensor));
  for (int k = 0; k < 4; ++k) {
    for (int64_t v : pairs[k]) pair_lists[k].push_back(&items.emplace_back(EValue::from_int(v)));
    args.push_back(EValue::from_int_list(pair_lists[k]));
  }
  args.push_back(EValue::from_bool(true));
  args.push_back(EValue::from_tensor(&out->tensor));
  args.push_back(EValue::from_tensor(&idx->tensor));
  args.push_back(EValue());
  std::vector<EValue*> ptrs;
  for (EValue& a : args) ptrs.push_back(&a);
  const std::unique_ptr<KernelState> state = entry->prepare != nullptr ? entry->prepare(KernelArgs(ptrs)) : nullptr;
  ASSERT_NE(state, nullptr);  // a 4-D float pooling may pair channels-last (KernelState::keeps_channels_last)
  EXPECT_FALSE(state->keeps_channels_last().inputs.empty());
  if (has_avx2_fma()) {
    EXPECT_GT(state->bytes(), 0u);
  } else {
    EXPECT_EQ(state->bytes(), 0u);  // the table serves the AVX2 loop only
  }
  const MaxPoolCase calls[] = {loaded, {1, 4, 9, 11, 3, 3, 2, 2, 0, 0, 1, 1, true},
                               {2, 3, 15, 15, 3, 3, 2, 2, 1, 1, 1, 1, false}, {1, 2, 15, 15, 2, 2, 2, 2, 0, 0, 1, 1, true}};
  for (const MaxPoolCase& c : calls) {
    const std::vector<float> xv = max_pool_values(rng, static_cast<size_t>(c.n * c.c * c.h * c.w), 4);
    check_max_pool(c, xv, {}, c.describe() + " with the table of 15x15, 3x3, stride 2", state.get());
  }
}

// A 4-D max pooling that the load paired channels-last pools NHWC bytes: the values of the NCHW pooling of the
// same image (NaN taken over numbers), at each CPU level; an input of another size no longer fits and fails.
TEST(NnKernelsPool, MaxPoolPairedChannelsLastMatchesTheNchwPoolingAndRefusesAnotherSize) {
  const KernelEntry* entry = runtime::kernel_registry().find("aten::max_pool2d_with_indices.out");
  ASSERT_NE(entry, nullptr);
  constexpr int64_t c = 11, h = 5, w = 5;  // an 8-wide block and a tail of 3
  std::vector<float> nchw = etnp::testing::random_floats(static_cast<size_t>(c * h * w), -1.0f, 1.0f, 17);
  nchw[3 * h * w + 2 * w + 2] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> nhwc(nchw.size());
  for (int64_t ch = 0; ch < c; ++ch) {
    for (int64_t p = 0; p < h * w; ++p) nhwc[static_cast<size_t>(p * c + ch)] = nchw[static_cast<size_t>(ch * h * w + p)];
  }
  // max_pool2d_with_indices(x, 3, 2, 1, 1, ceil_mode) into out and idx, its state prepared for the first call's
  // shapes (and paired channels-last with `paired`).
  struct Call {
    std::deque<EValue> items;
    std::deque<std::vector<EValue*>> lists;
    std::vector<EValue> args;
    std::vector<EValue*> ptrs;
  };
  auto pooling = [](const Owned& x, const Owned& out, const Owned& idx) {
    auto call = std::make_unique<Call>();
    call->args.push_back(EValue::from_tensor(&x->tensor));
    for (const int64_t v : {3, 2, 1, 1}) {
      auto& list = call->lists.emplace_back();
      for (int k = 0; k < 2; ++k) list.push_back(&call->items.emplace_back(EValue::from_int(v)));
      call->args.push_back(EValue::from_int_list(list));
    }
    call->args.push_back(EValue::from_bool(true));
    call->args.push_back(EValue::from_tensor(&out->tensor));
    call->args.push_back(EValue::from_tensor(&idx->tensor));
    call->args.push_back(EValue());
    for (EValue& a : call->args) call->ptrs.push_back(&a);
    return call;
  };
  auto run = [&](const Call& call, KernelState* state) {
    KernelContext ctx(&ThreadPool::global(), state);
    entry->fn(ctx, KernelArgs(call.ptrs));
  };
  at_each_cpu_level([&](CpuLevel level) {
    auto x = f32({1, c, h, w}, nchw);
    auto ref = out_tensor(ScalarType::Float, {1, c, 3, 3});
    auto ref_idx = out_tensor(ScalarType::Long, {1, c, 3, 3});
    run(*pooling(x, ref, ref_idx), nullptr);
    auto xl = f32({1, c, h, w}, nhwc);
    auto got = out_tensor(ScalarType::Float, {1, c, 3, 3});
    auto got_idx = out_tensor(ScalarType::Long, {1, c, 3, 3});
    const auto paired = pooling(xl, got, got_idx);
    const std::unique_ptr<KernelState> state = entry->prepare(KernelArgs(paired->ptrs));
    ASSERT_NE(state, nullptr);
    state->use_channels_last(true, true);
    run(*paired, state.get());
    const std::vector<float> want = ref->values<float>(), have = got->values<float>();
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t p = 0; p < 9; ++p) {
        const float a = have[static_cast<size_t>(p * c + ch)], b = want[static_cast<size_t>(ch * 9 + p)];
        ASSERT_TRUE(a == b || (std::isnan(a) && std::isnan(b))) << cpu_level_name(level) << " channel " << ch << " at " << p;
      }
    }
    EXPECT_TRUE(std::isnan(have[static_cast<size_t>(4 * c + 3)]));  // the NaN's window, channel 3
    // The state prepared for 5x5, called on 7x7.
    auto bigger = f32({1, c, 7, 7}, std::vector<float>(static_cast<size_t>(c * 49), 0.0f));
    auto big_out = out_tensor(ScalarType::Float, {1, c, 4, 4});
    auto big_idx = out_tensor(ScalarType::Long, {1, c, 4, 4});
    const Error e = etnp::testing::expect_error([&] { run(*pooling(bigger, big_out, big_idx), state.get()); });
    EXPECT_NE(std::string(e.what()).find("paired with its neighbours in NHWC order no longer fits its input of shape "
                                         "[1, 11, 7, 7]"),
              std::string::npos)
        << e.what();
  });
}

// A mean over the pixels, a product by one value per channel (either operand order) and an inference batch norm
// whose states the load paired channels-last read and write NHWC bytes: the NCHW kernels' results, transposed, bit
// for bit; the per-channel tensors are read as they are. A call on another size fails.
TEST(NnKernelsPool, PairedChannelsLastMeanScaleAndBatchNormMatchTheNchwKernelsBitForBit) {
  constexpr int64_t n = 2, c = 11, h = 3, w = 5, hw = h * w;
  const std::vector<float> x = random_values(n * c * hw, 41, -3.0f, 3.0f);
  auto nhwc_of = [&](const std::vector<float>& nchw) {
    std::vector<float> out(nchw.size());
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t ch = 0; ch < c; ++ch) {
        for (int64_t p = 0; p < hw; ++p) out[size_t((i * hw + p) * c + ch)] = nchw[size_t((i * c + ch) * hw + p)];
      }
    }
    return out;
  };
  auto bits = [](const std::vector<float>& v) {
    std::vector<uint32_t> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) b[i] = std::bit_cast<uint32_t>(v[i]);
    return b;
  };
  auto zeros = [](int64_t count) { return std::vector<float>(static_cast<size_t>(count), 0.0f); };
  auto paired_state = [](Call& call, const std::string& name) {
    std::unique_ptr<KernelState> state = call.prepare(name);
    EXPECT_NE(state, nullptr) << name;
    if (state != nullptr) state->use_channels_last(true, true);
    return state;
  };
  auto refuses_another_size = [&](const std::string& name, const std::function<void(Call&, OwnedTensor&)>& args,
                                  const KernelState* state) {
    auto bigger = f32({n, c, h + 1, w}, zeros(n * c * (h + 1) * w));
    Call call;
    args(call, *bigger);
    const Error e = etnp::testing::expect_error([&] { call.run_with_state(name, state); });
    EXPECT_NE(std::string(e.what()).find("paired with its neighbours in NHWC order no longer fits"), std::string::npos)
        << e.what();
  };

  // mean(x, [-1, -2], keepdim): one value per channel, the same bytes in either order.
  {
    auto xn = f32({n, c, h, w}, x);
    auto want = f32({n, c, 1, 1}, zeros(n * c));
    Call().t(*xn).ints({-1, -2}).b(true).none().t(*want).run("aten::mean.out");
    auto xl = f32({n, c, h, w}, nhwc_of(x));
    auto got = f32({n, c, 1, 1}, zeros(n * c));
    Call call;
    call.t(*xl).ints({-1, -2}).b(true).none().t(*got);
    const auto state = paired_state(call, "aten::mean.out");
    call.run_with_state("aten::mean.out", state.get());
    EXPECT_EQ(bits(logical<float>(*got)), bits(logical<float>(*want)));
    auto out = f32({n, c, 1, 1}, zeros(n * c));
    refuses_another_size("aten::mean.out",
                         [&](Call& k, OwnedTensor& in) { k.t(in).ints({-1, -2}).b(true).none().t(*out); }, state.get());
    // Over one dim only, or with a dtype: no state (the tensor's own order).
    auto rows = f32({n, c, h, 1}, zeros(n * c * h));
    EXPECT_EQ(Call().t(*xn).ints({3}).b(true).none().t(*rows).prepare("aten::mean.out"), nullptr);
  }
  // x * g and g * x for g [n, c, 1, 1].
  const std::vector<float> g = random_values(n * c, 42, -2.0f, 2.0f);
  for (bool image_first : {true, false}) {
    auto gate = f32({n, c, 1, 1}, g);
    auto xn = f32({n, c, h, w}, x);
    auto want = f32({n, c, h, w}, zeros(n * c * hw));
    Call ref;
    (image_first ? ref.t(*xn).t(*gate) : ref.t(*gate).t(*xn)).t(*want).run("aten::mul.out");
    auto xl = f32({n, c, h, w}, nhwc_of(x));
    auto got = f32({n, c, h, w}, zeros(n * c * hw));
    Call call;
    (image_first ? call.t(*xl).t(*gate) : call.t(*gate).t(*xl)).t(*got);
    const auto state = paired_state(call, "aten::mul.out");
    call.run_with_state("aten::mul.out", state.get());
    EXPECT_EQ(bits(logical<float>(*got)), bits(nhwc_of(logical<float>(*want)))) << image_first;
    auto out = f32({n, c, h + 1, w}, zeros(n * c * (h + 1) * w));
    refuses_another_size(
        "aten::mul.out",
        [&](Call& k, OwnedTensor& in) { (image_first ? k.t(in).t(*gate) : k.t(*gate).t(in)).t(*out); }, state.get());
  }
  // A product of two images, or by one value per image: no state (an element-wise product of one shape, or a
  // broadcast whose result depends on the bytes' order).
  {
    auto a = f32({n, c, h, w}, x);
    auto per_image = f32({n, 1, 1, 1}, zeros(n));
    auto out = f32({n, c, h, w}, zeros(n * c * hw));
    EXPECT_EQ(Call().t(*a).t(*a).t(*out).prepare("aten::mul.out"), nullptr);
    EXPECT_EQ(Call().t(*a).t(*per_image).t(*out).prepare("aten::mul.out"), nullptr);
  }
  // batch_norm(x, weight, bias, mean, var, 0.1, 1e-5) into out, save_mean, save_invstd.
  {
    auto weight = f32({c}, random_values(c, 43));
    auto bias = f32({c}, random_values(c, 44));
    auto mean = f32({c}, random_values(c, 45));
    auto var = f32({c}, random_values(c, 46, 0.5f, 2.0f));
    auto args = [&](Call& k, OwnedTensor& in, OwnedTensor& out, OwnedTensor& sm, OwnedTensor& si) -> Call& {
      return k.t(in).t(*weight).t(*bias).t(*mean).t(*var).d(0.1).d(1e-5).t(out).t(sm).t(si);
    };
    auto xn = f32({n, c, h, w}, x);
    auto want = f32({n, c, h, w}, zeros(n * c * hw));
    auto sm = out_tensor(ScalarType::Float, {0}), si = out_tensor(ScalarType::Float, {0});
    Call ref;
    args(ref, *xn, *want, *sm, *si).run("aten::_native_batch_norm_legit_no_training.out");
    auto xl = f32({n, c, h, w}, nhwc_of(x));
    auto got = f32({n, c, h, w}, zeros(n * c * hw));
    Call call;
    args(call, *xl, *got, *sm, *si);
    const auto state = paired_state(call, "aten::_native_batch_norm_legit_no_training.out");
    call.run_with_state("aten::_native_batch_norm_legit_no_training.out", state.get());
    EXPECT_EQ(bits(logical<float>(*got)), bits(nhwc_of(logical<float>(*want))));
    auto out = f32({n, c, h + 1, w}, zeros(n * c * (h + 1) * w));
    refuses_another_size(
        "aten::_native_batch_norm_legit_no_training.out", [&](Call& k, OwnedTensor& in) { args(k, in, *out, *sm, *si); },
        state.get());
    // As many elements in other channels (5 of 3x11), with per-channel tensors to match: refused too.
    auto other = f32({n, w, h, c}, x);
    auto other_out = f32({n, w, h, c}, zeros(n * c * hw));
    auto k5 = f32({w}, random_values(w, 47, 0.5f, 2.0f));
    Call odd;
    odd.t(*other).t(*k5).t(*k5).t(*k5).t(*k5).d(0.1).d(1e-5).t(*other_out).t(*sm).t(*si);
    const Error e = etnp::testing::expect_error(
        [&] { odd.run_with_state("aten::_native_batch_norm_legit_no_training.out", state.get()); });
    EXPECT_NE(std::string(e.what()).find("paired with its neighbours in NHWC order no longer fits its input (shape "
                                         "[2, 5, 3, 11])"),
              std::string::npos)
        << e.what();
  }
}

TEST(NnKernelsPool, AvgPoolMatchesTorch) {
  std::vector<float> yv(25);
  for (int i = 0; i < 25; ++i) yv[size_t(i)] = float(i);
  auto y = f32({1, 1, 5, 5}, yv);
  auto out = out_tensor(ScalarType::Float, {1, 1, 3, 3});
  Call().t(*y).ints({3}).ints({2}).ints({1}).b(true).b(false).none().t(*out).run("aten::avg_pool2d.out");
  expect_close(logical<float>(*out), std::vector<float>{3.0f, 4.5f, 6.0f, 10.5f, 12.0f, 13.5f, 18.0f, 19.5f, 21.0f});
  Call().t(*y).ints({3}).ints({2}).ints({1}).b(true).b(true).none().t(*out).run("aten::avg_pool2d.out");
  expect_close(logical<float>(*out), std::vector<float>{1.3333333730697632f, 3.0f, 2.6666667461395264f, 7.0f, 12.0f,
                                                        9.0f, 8.0f, 13.0f, 9.333333015441895f});
  Call().t(*y).ints({2, 3}).ints({2, 2}).ints({1, 1}).b(false).b(true).i(5).t(*out).run("aten::avg_pool2d.out");
  expect_close(logical<float>(*out), std::vector<float>{0.2f, 1.2f, 1.4f, 6.4f, 11.4f, 8.8f, 14.4f, 23.4f, 16.8f});
  EXPECT_THROW(Call().t(*y).ints({2}).ints({2}).ints({0}).b(false).b(true).i(0).t(*out).run("aten::avg_pool2d.out"),
               Error);
}

TEST(NnKernelsPool, AdaptiveAvgPoolOverlappingWindows) {
  // 5 -> 3 rows: windows [0,2), [1,4), [3,5); 7 -> 2 cols: [0,4), [3,7).
  std::vector<float> xv(2 * 5 * 7);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = float(i % 11) - 3.0f;
  auto x = f32({2, 5, 7}, xv);
  auto out = out_tensor(ScalarType::Float, {2, 3, 2});
  Call().t(*x).ints({3, 2}).t(*out).run("aten::_adaptive_avg_pool2d.out");
  const int64_t rows[3][2] = {{0, 2}, {1, 4}, {3, 5}}, cols[2][2] = {{0, 4}, {3, 7}};
  std::vector<double> want;
  for (int c = 0; c < 2; ++c) {
    for (auto& r : rows) {
      for (auto& cl : cols) {
        double s = 0;
        for (int64_t i = r[0]; i < r[1]; ++i) {
          for (int64_t j = cl[0]; j < cl[1]; ++j) s += xv[size_t(c * 35 + i * 7 + j)];
        }
        want.push_back(s / double((r[1] - r[0]) * (cl[1] - cl[0])));
      }
    }
  }
  expect_close(logical<float>(*out), want, 1e-6, 1e-6);
}

std::vector<float> upsample_input() {
  std::vector<float> v(12);
  for (int i = 0; i < 12; ++i) v[size_t(i)] = float(i) * 0.37f - 1.0f;
  return v;
}

TEST(NnKernelsPool, UpsampleBilinearMatchesTorch) {
  auto x = f32({1, 1, 3, 4}, upsample_input());
  auto out = out_tensor(ScalarType::Float, {1, 1, 5, 9});
  Call().t(*x).none().b(false).doubles({1.7, 2.3}).t(*out).run("aten::upsample_bilinear2d.vec_out");
  expect_close(logical<float>(*out),
               std::vector<float>{-1.0f, -0.9436956644058228f, -0.7828260660171509f, -0.6219565272331238f,
                                  -0.4610869586467743f, -0.3002174198627472f, -0.1393478363752365f,
                                  0.021521707996726036f, 0.11000001430511475f, -0.4341176152229309f,
                                  -0.37781330943107605f, -0.21694369614124298f, -0.056074127554893494f,
                                  0.1047954335808754f, 0.2656649947166443f, 0.42653459310531616f, 0.587404191493988f,
                                  0.6758824586868286f, 0.43647074699401855f, 0.4927751123905182f, 0.6536446809768677f,
                                  0.8145142197608948f, 0.9753837585449219f, 1.1362532377243042f, 1.297122836112976f,
                                  1.4579925537109375f, 1.5464708805084229f, 1.3070589303970337f, 1.363363265991211f,
                                  1.5242328643798828f, 1.6851023435592651f, 1.845971941947937f, 2.0068414211273193f,
                                  2.167711019515991f, 2.328580617904663f, 2.4170589447021484f, 1.9600000381469727f,
                                  2.0163042545318604f, 2.1771738529205322f, 2.338043212890625f, 2.498913049697876f,
                                  2.6597824096679688f, 2.8206522464752197f, 2.9815216064453125f, 3.070000171661377f});
  auto out2 = out_tensor(ScalarType::Float, {1, 1, 5, 3});
  Call().t(*x).ints({5, 3}).b(true).none().t(*out2).run("aten::upsample_bilinear2d.vec_out");
  expect_close(logical<float>(*out2),
               std::vector<float>{-1.0f, -0.4449999928474426f, 0.11000001430511475f, -0.25999999046325684f,
                                  0.29500001668930054f, 0.8500000834465027f, 0.48000001907348633f, 1.0350000858306885f,
                                  1.5900001525878906f, 1.2200000286102295f, 1.774999976158142f, 2.330000162124634f,
                                  1.9600000381469727f, 2.5149998664855957f, 3.070000171661377f});
  // Exactly one of output_size / scale_factors.
  EXPECT_THROW(Call().t(*x).ints({5, 3}).b(true).doubles({2, 2}).t(*out2).run("aten::upsample_bilinear2d.vec_out"),
               Error);
}

TEST(NnKernelsPool, UpsampleNearestMatchesTorch) {
  auto x = f32({1, 1, 3, 4}, upsample_input());
  auto out = out_tensor(ScalarType::Float, {1, 1, 4, 2});
  Call().t(*x).none().doubles({1.5, 0.6}).t(*out).run("aten::upsample_nearest2d.vec_out");
  expect_close(logical<float>(*out), std::vector<float>{-1.0f, -0.63f, -1.0f, -0.63f, 0.48f, 0.85f, 1.96f, 2.33f});
  auto out2 = out_tensor(ScalarType::Float, {1, 1, 7, 5});
  Call().t(*x).ints({7, 5}).none().t(*out2).run("aten::upsample_nearest2d.vec_out");
  const std::vector<int> src_rows = {0, 0, 0, 1, 1, 2, 2}, src_cols = {0, 0, 1, 2, 3};
  std::vector<float> want;
  for (int r : src_rows) {
    for (int c : src_cols) want.push_back(upsample_input()[size_t(r * 4 + c)]);
  }
  EXPECT_EQ(logical<float>(*out2), want);
}

// ---------------------------------------------------------------------------------------------------------
// Normalization and softmax

TEST(NnKernelsNorm, BatchNormNoTraining) {
  auto x = f32({1, 2, 1, 2}, {1, 2, 3, 4});
  auto w = f32({2}, {2, 1});
  auto b = f32({2}, {0, 1});
  auto mean = f32({2}, {1, 3});
  auto var = f32({2}, {3.99999f, 0.99999f});
  auto out = out_tensor(ScalarType::Float, {1, 2, 1, 2});
  auto m0 = out_tensor(ScalarType::Float, {0});
  auto m1 = out_tensor(ScalarType::Float, {0});
  Call().t(*x).t(*w).t(*b).t(*mean).t(*var).d(0.1).d(1e-5).t(*out).t(*m0).t(*m1).run(
      "aten::_native_batch_norm_legit_no_training.out");
  // channel 0: (x - 1) / 2 * 2 + 0; channel 1: (x - 3) / 1 * 1 + 1
  expect_close(logical<float>(*out), std::vector<float>{0, 1, 1, 2}, 1e-6, 1e-6);
  EXPECT_EQ(m0->tensor.numel(), 0);
  // Channels-last input and no weight/bias.
  auto xc = f32({1, 2, 1, 2}, {1, 2, 3, 4}, {0, 2, 3, 1});
  auto oc = out_tensor(ScalarType::Float, {1, 2, 1, 2}, -1, {0, 2, 3, 1});
  Call().t(*xc).none().none().t(*mean).t(*var).d(0.1).d(1e-5).t(*oc).t(*m0).t(*m1).run(
      "aten::_native_batch_norm_legit_no_training.out");
  expect_close(logical<float>(*oc), std::vector<float>{0, 0.5f, 0, 1}, 1e-6, 1e-6);
}

TEST(NnKernelsNorm, LayerNormMatchesReference) {
  const int64_t rows = 6, n = 129;
  const auto xv = random_values(rows * n, 60, -3, 5), wv = random_values(n, 61), bv = random_values(n, 62);
  auto x = f32({2, 3, n}, xv);
  auto w = f32({n}, wv);
  auto b = f32({n}, bv);
  auto out = out_tensor(ScalarType::Float, {2, 3, n});
  auto mean = out_tensor(ScalarType::Float, {2, 3, 1});
  auto rstd = out_tensor(ScalarType::Float, {2, 3, 1});
  Call().t(*x).ints({n}).t(*w).t(*b).d(1e-5).t(*out).t(*mean).t(*rstd).run("aten::native_layer_norm.out");
  std::vector<double> want, want_mean, want_rstd;
  for (int64_t r = 0; r < rows; ++r) {
    double m = 0, v = 0;
    for (int64_t i = 0; i < n; ++i) m += xv[size_t(r * n + i)];
    m /= double(n);
    for (int64_t i = 0; i < n; ++i) v += (xv[size_t(r * n + i)] - m) * (xv[size_t(r * n + i)] - m);
    const double s = 1.0 / std::sqrt(v / double(n) + 1e-5);
    want_mean.push_back(m);
    want_rstd.push_back(s);
    for (int64_t i = 0; i < n; ++i) want.push_back((xv[size_t(r * n + i)] - m) * s * wv[size_t(i)] + bv[size_t(i)]);
  }
  expect_close(logical<float>(*out), want, 1e-5, 1e-5, "out");
  expect_close(logical<float>(*mean), want_mean, 1e-5, 1e-6, "mean");
  expect_close(logical<float>(*rstd), want_rstd, 1e-5, 1e-6, "rstd");
  // The same input stored with dim order (1, 0, 2): the strided path, same results.
  auto xp = f32({2, 3, n}, xv, {1, 0, 2});
  auto outp = out_tensor(ScalarType::Float, {2, 3, n});
  auto meanp = out_tensor(ScalarType::Float, {2, 3, 1});
  auto rstdp = out_tensor(ScalarType::Float, {2, 3, 1});
  Call().t(*xp).ints({n}).t(*w).t(*b).d(1e-5).t(*outp).t(*meanp).t(*rstdp).run("aten::native_layer_norm.out");
  expect_close(logical<float>(*outp), want, 1e-5, 1e-5, "out (dim order 1, 0, 2)");
  expect_close(logical<float>(*meanp), want_mean, 1e-5, 1e-6, "mean (dim order 1, 0, 2)");
  // Normalizing the last two dims, no affine parameters.
  auto out2 = out_tensor(ScalarType::Float, {2, 3, n});
  auto mean2 = out_tensor(ScalarType::Float, {2, 1, 1});
  auto rstd2 = out_tensor(ScalarType::Float, {2, 1, 1});
  Call().t(*x).ints({3, n}).none().none().d(1e-5).t(*out2).t(*mean2).t(*rstd2).run("aten::native_layer_norm.out");
  double m = 0;
  for (int64_t i = 0; i < 3 * n; ++i) m += xv[size_t(i)];
  EXPECT_NEAR(logical<float>(*mean2)[0], m / double(3 * n), 1e-5);
  EXPECT_THROW(Call().t(*x).ints({4}).none().none().d(1e-5).t(*out2).t(*mean2).t(*rstd2).run("aten::native_layer_norm.out"),
               Error);
}

TEST(NnKernelsNorm, GroupNormMatchesReference) {
  const int64_t n = 2, c = 6, hw = 5, groups = 3;
  const auto xv = random_values(n * c * hw, 70, -2, 2), wv = random_values(c, 71), bv = random_values(c, 72);
  auto x = f32({n, c, hw}, xv);
  auto w = f32({c}, wv);
  auto b = f32({c}, bv);
  auto out = out_tensor(ScalarType::Float, {n, c, hw});
  auto mean = out_tensor(ScalarType::Float, {n, groups});
  auto rstd = out_tensor(ScalarType::Float, {n, groups});
  Call().t(*x).t(*w).t(*b).i(n).i(c).i(hw).i(groups).d(1e-5).t(*out).t(*mean).t(*rstd).run(
      "aten::native_group_norm.out");
  std::vector<double> want(xv.size()), want_mean, want_rstd;
  const int64_t per = (c / groups) * hw;
  for (int64_t r = 0; r < n * groups; ++r) {
    double m = 0, v = 0;
    for (int64_t i = 0; i < per; ++i) m += xv[size_t(r * per + i)];
    m /= double(per);
    for (int64_t i = 0; i < per; ++i) v += (xv[size_t(r * per + i)] - m) * (xv[size_t(r * per + i)] - m);
    const double s = 1.0 / std::sqrt(v / double(per) + 1e-5);
    want_mean.push_back(m);
    want_rstd.push_back(s);
    for (int64_t i = 0; i < per; ++i) {
      const int64_t ch = (r % groups) * (c / groups) + i / hw;
      want[size_t(r * per + i)] = (xv[size_t(r * per + i)] - m) * s * wv[size_t(ch)] + bv[size_t(ch)];
    }
  }
  expect_close(logical<float>(*out), want, 1e-5, 1e-5, "out");
  expect_close(logical<float>(*mean), want_mean, 1e-5, 1e-6, "mean");
  expect_close(logical<float>(*rstd), want_rstd, 1e-5, 1e-6, "rstd");
}

std::vector<double> softmax_ref(const std::vector<float>& x, int64_t outer, int64_t len, int64_t inner, bool log) {
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      double mx = -INFINITY, s = 0;
      for (int64_t k = 0; k < len; ++k) mx = std::max(mx, double(x[size_t((o * len + k) * inner + i)]));
      for (int64_t k = 0; k < len; ++k) s += std::exp(double(x[size_t((o * len + k) * inner + i)]) - mx);
      for (int64_t k = 0; k < len; ++k) {
        const double v = double(x[size_t((o * len + k) * inner + i)]) - mx;
        y[size_t((o * len + k) * inner + i)] = log ? v - std::log(s) : std::exp(v) / s;
      }
    }
  }
  return y;
}

TEST(NnKernelsNorm, SoftmaxAndLogSoftmaxAnyDim) {
  const auto xv = random_values(3 * 129 * 5, 80, -20, 20);
  for (bool log : {false, true}) {
    const char* op = log ? "aten::_log_softmax.out" : "aten::_softmax.out";
    auto x = f32({3, 129, 5}, xv);
    auto out = out_tensor(ScalarType::Float, {3, 129, 5});
    Call().t(*x).i(-1).b(false).t(*out).run(op);
    expect_close(logical<float>(*out), softmax_ref(xv, 3 * 129, 5, 1, log), 1e-5, 1e-6, "last dim");
    Call().t(*x).i(1).b(false).t(*out).run(op);
    expect_close(logical<float>(*out), softmax_ref(xv, 3, 129, 5, log), 1e-5, 1e-6, "middle dim");
    auto xt = f32({3, 129, 5}, xv, {2, 0, 1});
    Call().t(*xt).i(0).b(false).t(*out).run(op);
    expect_close(logical<float>(*out), softmax_ref(xv, 1, 3, 129 * 5, log), 1e-5, 1e-6, "first dim, permuted");
  }
}

TEST(NnKernelsNorm, SoftmaxEdgeValues) {
  auto x = f32({3, 3}, {0, -kInf, 0, 1, kNaN, 2, 1000, 1000, -1000});
  auto out = out_tensor(ScalarType::Float, {3, 3});
  Call().t(*x).i(1).b(false).t(*out).run("aten::_softmax.out");
  const auto y = logical<float>(*out);
  EXPECT_FLOAT_EQ(y[0], 0.5f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_FLOAT_EQ(y[2], 0.5f);
  EXPECT_TRUE(std::isnan(y[3]) && std::isnan(y[4]) && std::isnan(y[5]));
  EXPECT_FLOAT_EQ(y[6], 0.5f);
  EXPECT_EQ(y[8], 0.0f);
  auto s = f32({}, {3.5f});
  auto so = out_tensor(ScalarType::Float, {});
  Call().t(*s).i(0).b(false).t(*so).run("aten::_log_softmax.out");
  EXPECT_EQ(logical<float>(*so)[0], 0.0f);
  EXPECT_THROW(Call().t(*x).i(1).b(true).t(*out).run("aten::_softmax.out"), Error);
  EXPECT_THROW(Call().t(*x).i(2).b(false).t(*out).run("aten::_softmax.out"), Error);
}

// Rows longer than the eight-lane maximum and sum (with a tail), against a double reference; a NaN inside the
// lanes makes its whole row NaN.
TEST(NnKernelsNorm, SoftmaxLongRowsMatchReference) {
  for (const int64_t len : {8, 37, 64}) {
    const int64_t rows = 5;
    auto xv = random_values(rows * len, 70 + static_cast<uint32_t>(len), -20, 20);
    xv[size_t(3 * len + 5)] = kNaN;
    auto x = f32({rows, len}, xv);
    auto out = out_tensor(ScalarType::Float, {rows, len});
    Call().t(*x).i(1).b(false).t(*out).run("aten::_softmax.out");
    const auto y = logical<float>(*out);
    for (int64_t r = 0; r < rows; ++r) {
      if (r == 3) {
        for (int64_t i = 0; i < len; ++i) EXPECT_TRUE(std::isnan(y[size_t(r * len + i)])) << len << " " << i;
        continue;
      }
      double mx = -1e300, sum = 0;
      for (int64_t i = 0; i < len; ++i) mx = std::max(mx, double(xv[size_t(r * len + i)]));
      for (int64_t i = 0; i < len; ++i) sum += std::exp(double(xv[size_t(r * len + i)]) - mx);
      for (int64_t i = 0; i < len; ++i) {
        const double want = std::exp(double(xv[size_t(r * len + i)]) - mx) / sum;
        ASSERT_NEAR(y[size_t(r * len + i)], want, 1e-6 * want + 1e-12) << "len " << len << " row " << r << " at " << i;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// Reductions

/// 2x3x4 tensor with values 0..23.
Owned iota234() {
  std::vector<float> v(24);
  for (int i = 0; i < 24; ++i) v[size_t(i)] = float(i);
  return f32({2, 3, 4}, v);
}

TEST(NnKernelsReduce, SumDimsKeepdimNegativeAndAll) {
  auto x = iota234();
  auto out = out_tensor(ScalarType::Float, {2, 1, 4}, 24);
  Call().t(*x).ints({-2}).b(true).none().t(*out).run("aten::sum.IntList_out");
  EXPECT_EQ(shape(*out), (std::vector<int64_t>{2, 1, 4}));
  EXPECT_EQ(logical<float>(*out), (std::vector<float>{12, 15, 18, 21, 48, 51, 54, 57}));
  auto out2 = out_tensor(ScalarType::Float, {3});
  Call().t(*x).ints({0, 2}).b(false).none().t(*out2).run("aten::sum.IntList_out");
  EXPECT_EQ(logical<float>(*out2), (std::vector<float>{60, 92, 124}));
  auto all = out_tensor(ScalarType::Float, {});
  Call().t(*x).none().b(false).none().t(*all).run("aten::sum.IntList_out");
  EXPECT_EQ(logical<float>(*all)[0], 276.0f);
  Call().t(*x).ints({}).b(false).none().t(*all).run("aten::sum.IntList_out");
  EXPECT_EQ(logical<float>(*all)[0], 276.0f);
  EXPECT_THROW(Call().t(*x).ints({1, -2}).b(false).none().t(*out2).run("aten::sum.IntList_out"), Error);
  EXPECT_THROW(Call().t(*x).ints({3}).b(false).none().t(*out2).run("aten::sum.IntList_out"), Error);
}

TEST(NnKernelsReduce, SumDtypesAndPermutedLayout) {
  auto b = tensor<bool>(ScalarType::Bool, {2, 3}, {true, false, true, true, true, true});
  auto out = out_tensor(ScalarType::Long, {2});
  Call().t(*b).ints({1}).b(false).i(static_cast<int64_t>(ScalarType::Long)).t(*out).run("aten::sum.IntList_out");
  EXPECT_EQ(logical<int64_t>(*out), (std::vector<int64_t>{2, 3}));
  // int8 sums wrap in the int8 out dtype.
  auto c = tensor<int8_t>(ScalarType::Char, {3}, {100, 100, 100});
  auto o8 = out_tensor(ScalarType::Char, {});
  Call().t(*c).none().b(false).none().t(*o8).run("aten::sum.IntList_out");
  EXPECT_EQ(logical<int8_t>(*o8)[0], static_cast<int8_t>(44));
  // dtype argument must agree with out.
  EXPECT_THROW(Call().t(*c).none().b(false).i(static_cast<int64_t>(ScalarType::Long)).t(*o8).run("aten::sum.IntList_out"),
               Error);
  // Channels-last input, reduce H and W.
  std::vector<float> v(2 * 3 * 2 * 2);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i);
  auto x = f32({2, 3, 2, 2}, v, {0, 2, 3, 1});
  auto o = out_tensor(ScalarType::Float, {2, 3});
  Call().t(*x).ints({2, 3}).b(false).none().t(*o).run("aten::sum.IntList_out");
  EXPECT_EQ(logical<float>(*o), (std::vector<float>{6, 22, 38, 54, 70, 86}));
}

// Means and sums over trailing dims of contiguous float tensors take a flat path; against a double reference,
// for block lengths that are and are not multiples of its four lanes.
TEST(NnKernelsReduce, TrailingDimsMatchReference) {
  for (const int64_t w : {4, 7}) {
    const int64_t rows = 6, h = 5, n = h * w;
    const auto xv = random_values(rows * n, 90 + w, -4, 6);
    auto x = f32({2, 3, h, w}, xv);
    auto mean = out_tensor(ScalarType::Float, {2, 3});
    auto sum = out_tensor(ScalarType::Float, {2, 3, 1, 1});
    Call().t(*x).ints({2, 3}).b(false).none().t(*mean).run("aten::mean.out");
    Call().t(*x).ints({-2, -1}).b(true).none().t(*sum).run("aten::sum.IntList_out");
    std::vector<double> want_mean, want_sum;
    for (int64_t r = 0; r < rows; ++r) {
      double acc = 0;
      for (int64_t i = 0; i < n; ++i) acc += xv[size_t(r * n + i)];
      want_sum.push_back(acc);
      want_mean.push_back(acc / double(n));
    }
    expect_close(logical<float>(*mean), want_mean, 1e-6, 1e-6, "mean");
    expect_close(logical<float>(*sum), want_sum, 1e-6, 1e-5, "sum");
  }
}

// A float32 mean is the official runtime's: its elements added one by one in float32, the sum divided by the
// count in float32. An LLM's RMSNorm takes the mean of squares over the model dim; a double sum rounds
// differently by an ulp in most rows, which the int8 KV cache after it turned into logits 0.1 apart. Both the
// flat path (trailing dims) and the general one (a middle dim) must give those bits exactly.
TEST(NnKernelsReduce, FloatMeanFoldsInFloat32LikeTheOfficialRuntime) {
  const int64_t rows = 67, dim = 384;  // eight rows at a time, and three left over
  std::vector<float> squares = random_values(rows * dim, 7, -0.2f, 0.2f);
  for (float& v : squares) v *= v;
  auto x = f32({1, rows, dim}, squares);
  auto out = out_tensor(ScalarType::Float, {1, rows, 1});
  Call().t(*x).ints({-1}).b(true).none().t(*out).run("aten::mean.out");
  std::vector<float> want;
  for (int64_t r = 0; r < rows; ++r) {
    float acc = 0.0f;
    for (int64_t i = 0; i < dim; ++i) acc += squares[size_t(r * dim + i)];
    want.push_back(acc / float(dim));
  }
  EXPECT_EQ(logical<float>(*out), want);

  // [4, 300, 3] reduced over dim 1: strided elements, in index order.
  const int64_t a = 4, n = 300, c = 3;
  const std::vector<float> v = random_values(a * n * c, 8, -3, 5);
  auto y = f32({a, n, c}, v);
  auto mid = out_tensor(ScalarType::Float, {a, c});
  Call().t(*y).ints({1}).b(false).none().t(*mid).run("aten::mean.out");
  std::vector<float> want_mid;
  for (int64_t i = 0; i < a; ++i) {
    for (int64_t k = 0; k < c; ++k) {
      float acc = 0.0f;
      for (int64_t j = 0; j < n; ++j) acc += v[size_t((i * n + j) * c + k)];
      want_mid.push_back(acc / float(n));
    }
  }
  EXPECT_EQ(logical<float>(*mid), want_mid);
}

TEST(NnKernelsReduce, MeanVariantsAndEmpty) {
  auto x = iota234();
  auto out = out_tensor(ScalarType::Float, {2, 3, 1});
  Call().t(*x).ints({-1}).b(true).none().t(*out).run("aten::mean.out");
  EXPECT_EQ(logical<float>(*out), (std::vector<float>{1.5f, 5.5f, 9.5f, 13.5f, 17.5f, 21.5f}));
  auto all = out_tensor(ScalarType::Float, {});
  Call().t(*x).none().t(*all).run("aten::mean.dtype_out");
  EXPECT_EQ(logical<float>(*all)[0], 11.5f);
  auto e = f32({0, 3}, {});
  auto eo = out_tensor(ScalarType::Float, {3});
  Call().t(*e).ints({0}).b(false).none().t(*eo).run("aten::mean.out");
  for (float v : logical<float>(*eo)) EXPECT_TRUE(std::isnan(v));
  // Integer input needs an explicit floating dtype.
  auto ints = tensor<int64_t>(ScalarType::Long, {2}, {1, 2});
  auto io = out_tensor(ScalarType::Float, {});
  EXPECT_THROW(Call().t(*ints).none().b(false).none().t(*io).run("aten::mean.out"), Error);
  Call().t(*ints).none().b(false).i(static_cast<int64_t>(ScalarType::Float)).t(*io).run("aten::mean.out");
  EXPECT_EQ(logical<float>(*io)[0], 1.5f);
}

TEST(NnKernelsReduce, AmaxAminPropagateNaN) {
  auto x = f32({2, 3}, {1, kNaN, 3, -4, 5, -6});
  auto out = out_tensor(ScalarType::Float, {2});
  Call().t(*x).ints({1}).b(false).t(*out).run("aten::amax.out");
  auto y = logical<float>(*out);
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], 5.0f);
  Call().t(*x).ints({-1}).b(false).t(*out).run("aten::amin.out");
  y = logical<float>(*out);
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], -6.0f);
  auto out0 = out_tensor(ScalarType::Float, {1, 3});
  Call().t(*x).ints({0}).b(true).t(*out0).run("aten::amax.out");
  y = logical<float>(*out0);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_TRUE(std::isnan(y[1]));
  EXPECT_EQ(y[2], 3.0f);
  auto e = f32({2, 0}, {});
  EXPECT_THROW(Call().t(*e).ints({1}).b(false).t(*out).run("aten::amax.out"), Error);
  auto full = out_tensor(ScalarType::Float, {});
  auto xi = tensor<int32_t>(ScalarType::Int, {4}, {3, -7, 9, 2});
  auto fi = out_tensor(ScalarType::Int, {});
  Call().t(*xi).t(*fi).run("aten::min.unary_out");
  EXPECT_EQ(logical<int32_t>(*fi)[0], -7);
  Call().t(*xi).t(*fi).run("aten::max.unary_out");
  EXPECT_EQ(logical<int32_t>(*fi)[0], 9);
  EXPECT_THROW(Call().t(*e).t(*full).run("aten::max.unary_out"), Error);
}

TEST(NnKernelsReduce, ArgmaxArgminTiesNaNAndFlatten) {
  auto x = f32({2, 4}, {1, 3, 3, 0, 2, kNaN, 7, kNaN});
  auto out = out_tensor(ScalarType::Long, {2});
  Call().t(*x).i(1).b(false).t(*out).run("aten::argmax.out");
  EXPECT_EQ(logical<int64_t>(*out), (std::vector<int64_t>{1, 1}));
  Call().t(*x).i(1).b(false).t(*out).run("aten::argmin.out");
  EXPECT_EQ(logical<int64_t>(*out), (std::vector<int64_t>{3, 1}));
  auto flat = out_tensor(ScalarType::Long, {});
  auto y = f32({2, 3}, {1, 9, 2, 9, 0, 9});
  Call().t(*y).none().b(false).t(*flat).run("aten::argmax.out");
  EXPECT_EQ(logical<int64_t>(*flat)[0], 1);
  auto keep = out_tensor(ScalarType::Long, {1, 1});
  Call().t(*y).none().b(true).t(*keep).run("aten::argmin.out");
  EXPECT_EQ(shape(*keep), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(logical<int64_t>(*keep)[0], 4);
  auto col = out_tensor(ScalarType::Long, {1, 3});
  Call().t(*y).i(-2).b(true).t(*col).run("aten::argmax.out");
  EXPECT_EQ(logical<int64_t>(*col), (std::vector<int64_t>{1, 0, 1}));
}

TEST(NnKernelsReduce, MaxMinDimValuesAndIndices) {
  auto x = f32({3, 4}, {1, 5, 5, 2, kNaN, 1, kNaN, 0, -1, -3, -3, 4});
  auto vals = out_tensor(ScalarType::Float, {3});
  auto idx = out_tensor(ScalarType::Long, {3});
  Call().t(*x).i(1).b(false).t(*vals).t(*idx).run("aten::max.dim_max");
  auto v = logical<float>(*vals);
  EXPECT_EQ(v[0], 5.0f);
  EXPECT_TRUE(std::isnan(v[1]));
  EXPECT_EQ(v[2], 4.0f);
  EXPECT_EQ(logical<int64_t>(*idx), (std::vector<int64_t>{1, 0, 3}));
  Call().t(*x).i(1).b(false).t(*vals).t(*idx).run("aten::min.dim_min");
  v = logical<float>(*vals);
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[2], -3.0f);
  EXPECT_EQ(logical<int64_t>(*idx), (std::vector<int64_t>{0, 0, 1}));
  // keepdim over dim 0
  auto kv = out_tensor(ScalarType::Float, {1, 4});
  auto ki = out_tensor(ScalarType::Long, {1, 4});
  auto y = f32({2, 4}, {1, 2, 3, 4, 4, 3, 2, 1});
  Call().t(*y).i(0).b(true).t(*kv).t(*ki).run("aten::max.dim_max");
  EXPECT_EQ(logical<float>(*kv), (std::vector<float>{4, 3, 3, 4}));
  EXPECT_EQ(logical<int64_t>(*ki), (std::vector<int64_t>{1, 1, 0, 0}));
  auto e = f32({2, 0}, {});
  EXPECT_THROW(Call().t(*e).i(1).b(false).t(*vals).t(*idx).run("aten::max.dim_max"), Error);
}

TEST(NnKernelsReduce, AnyVariants) {
  auto x = tensor<bool>(ScalarType::Bool, {2, 3}, {false, false, true, false, false, false});
  auto out = out_tensor(ScalarType::Bool, {2});
  Call().t(*x).i(1).b(false).t(*out).run("aten::any.out");
  EXPECT_EQ(logical<bool>(*out), (std::vector<bool>{true, false}));
  auto k = out_tensor(ScalarType::Bool, {1, 3});
  Call().t(*x).ints({0}).b(true).t(*k).run("aten::any.dims_out");
  EXPECT_EQ(logical<bool>(*k), (std::vector<bool>{false, false, true}));
  auto all = out_tensor(ScalarType::Bool, {});
  Call().t(*x).t(*all).run("aten::any.all_out");
  EXPECT_TRUE(logical<bool>(*all)[0]);
  Call().t(*x).none().b(false).t(*all).run("aten::any.dims_out");
  EXPECT_TRUE(logical<bool>(*all)[0]);
  auto f = f32({3}, {0, kNaN, 0});
  Call().t(*f).t(*all).run("aten::any.all_out");
  EXPECT_TRUE(logical<bool>(*all)[0]);
  auto e = f32({0}, {});
  Call().t(*e).t(*all).run("aten::any.all_out");
  EXPECT_FALSE(logical<bool>(*all)[0]);
  auto bad = out_tensor(ScalarType::Float, {});
  EXPECT_THROW(Call().t(*f).t(*bad).run("aten::any.all_out"), Error);
}

TEST(NnKernelsReduce, ProdIntAndAll) {
  auto x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  auto out = out_tensor(ScalarType::Float, {2});
  Call().t(*x).i(1).b(false).none().t(*out).run("aten::prod.int_out");
  EXPECT_EQ(logical<float>(*out), (std::vector<float>{6, 120}));
  auto xi = tensor<int32_t>(ScalarType::Int, {3}, {-2, 3, 7});
  auto all = out_tensor(ScalarType::Long, {});
  Call().t(*xi).i(static_cast<int64_t>(ScalarType::Long)).t(*all).run("aten::prod.out");
  EXPECT_EQ(logical<int64_t>(*all)[0], -42);
  auto e = f32({0}, {});
  auto ef = out_tensor(ScalarType::Float, {});
  Call().t(*e).none().t(*ef).run("aten::prod.out");
  EXPECT_EQ(logical<float>(*ef)[0], 1.0f);
}

TEST(NnKernelsReduce, VarAndVarMean) {
  auto x = f32({2, 4}, {1, 2, 3, 4, 2, 2, 2, 6});
  auto out = out_tensor(ScalarType::Float, {2});
  Call().t(*x).ints({1}).none().b(false).t(*out).run("aten::var.correction_out");
  expect_close(logical<float>(*out), std::vector<float>{5.0f / 3.0f, 4.0f});
  Call().t(*x).ints({1}).i(0).b(false).t(*out).run("aten::var.correction_out");
  expect_close(logical<float>(*out), std::vector<float>{1.25f, 3.0f});
  Call().t(*x).ints({1}).d(2.0).b(false).t(*out).run("aten::var.correction_out");
  expect_close(logical<float>(*out), std::vector<float>{2.5f, 6.0f});
  Call().t(*x).ints({1}).b(false).b(false).t(*out).run("aten::var.out");
  expect_close(logical<float>(*out), std::vector<float>{1.25f, 3.0f});
  auto var = out_tensor(ScalarType::Float, {1, 1});
  auto mean = out_tensor(ScalarType::Float, {1, 1});
  Call().t(*x).none().i(1).b(true).t(*var).t(*mean).run("aten::var_mean.correction_out");
  expect_close(logical<float>(*mean), std::vector<float>{2.75f});
  expect_close(logical<float>(*var), std::vector<float>{2.5f});
  // A single element with correction 1 divides by zero: NaN (0/0).
  auto one = f32({1}, {3});
  auto o1 = out_tensor(ScalarType::Float, {});
  Call().t(*one).none().none().b(false).t(*o1).run("aten::var.correction_out");
  EXPECT_TRUE(std::isnan(logical<float>(*o1)[0]));
}

TEST(NnKernelsReduce, CumsumAnyDimAndDtype) {
  auto x = iota234();
  auto out = out_tensor(ScalarType::Float, {2, 3, 4});
  Call().t(*x).i(1).none().t(*out).run("aten::cumsum.out");
  const auto y = logical<float>(*out);
  EXPECT_EQ(std::vector<float>(y.begin(), y.begin() + 12),
            (std::vector<float>{0, 1, 2, 3, 4, 6, 8, 10, 12, 15, 18, 21}));
  auto xi = tensor<int32_t>(ScalarType::Int, {4}, {1, 2, 3, 4});
  auto lo = out_tensor(ScalarType::Long, {4});
  Call().t(*xi).i(-1).i(static_cast<int64_t>(ScalarType::Long)).t(*lo).run("aten::cumsum.out");
  EXPECT_EQ(logical<int64_t>(*lo), (std::vector<int64_t>{1, 3, 6, 10}));
  auto xp = f32({2, 3}, {1, 2, 3, 4, 5, 6}, {1, 0});
  auto op = out_tensor(ScalarType::Float, {2, 3});
  Call().t(*xp).i(0).none().t(*op).run("aten::cumsum.out");
  EXPECT_EQ(logical<float>(*op), (std::vector<float>{1, 2, 3, 5, 7, 9}));
}

TEST(NnKernelsReduce, TopkLargestSmallestTiesAndNaN) {
  auto x = f32({2, 5}, {3, 1, 3, kNaN, 2, 5, 5, 1, 5, 0});
  auto vals = out_tensor(ScalarType::Float, {2, 3});
  auto idx = out_tensor(ScalarType::Long, {2, 3});
  Call().t(*x).i(3).i(-1).b(true).b(true).t(*vals).t(*idx).run("aten::topk.values");
  auto v = logical<float>(*vals);
  EXPECT_TRUE(std::isnan(v[0]));
  EXPECT_EQ(v[1], 3.0f);
  EXPECT_EQ(v[2], 3.0f);
  EXPECT_EQ(std::vector<float>(v.begin() + 3, v.end()), (std::vector<float>{5, 5, 5}));
  EXPECT_EQ(logical<int64_t>(*idx), (std::vector<int64_t>{3, 0, 2, 0, 1, 3}));
  Call().t(*x).i(3).i(1).b(false).b(true).t(*vals).t(*idx).run("aten::topk.values");
  EXPECT_EQ(logical<float>(*vals), (std::vector<float>{1, 2, 3, 0, 1, 5}));
  EXPECT_EQ(logical<int64_t>(*idx), (std::vector<int64_t>{1, 4, 0, 4, 2, 0}));
  // Along dim 0 with a resizable output, and k out of range.
  auto cv = out_tensor(ScalarType::Float, {2, 5}, 10);
  auto ci = out_tensor(ScalarType::Long, {2, 5}, 10);
  Call().t(*x).i(1).i(0).b(true).b(true).t(*cv).t(*ci).run("aten::topk.values");
  EXPECT_EQ(shape(*cv), (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(logical<int64_t>(*ci), (std::vector<int64_t>{1, 1, 0, 0, 0}));
  EXPECT_THROW(Call().t(*x).i(6).i(1).b(true).b(true).t(*cv).t(*ci).run("aten::topk.values"), Error);
}

}  // namespace
}  // namespace etnp::testing
