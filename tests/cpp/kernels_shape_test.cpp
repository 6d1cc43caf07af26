// Hand-checked cases for the data-movement (shape.cpp), indexing (index.cpp) and creation (fill.cpp) kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "etnp/error.h"
#include "etnp/threadpool.h"
#include "fixtures.h"
#include "kernel_test_util.h"

namespace etnp::testing {
namespace {

using T = std::unique_ptr<OwnedTensor>;

/// Owns the EValues behind list arguments (items of int/tensor lists are pointers to other EValues).
struct Lists {
  std::vector<std::unique_ptr<std::vector<EValue>>> items;
  std::vector<std::unique_ptr<std::vector<EValue*>>> ptrs;

  EValue ints(std::vector<int64_t> v) {
    auto& it = *items.emplace_back(std::make_unique<std::vector<EValue>>());
    for (int64_t x : v) it.push_back(EValue::from_int(x));
    auto& p = *ptrs.emplace_back(std::make_unique<std::vector<EValue*>>());
    for (auto& e : it) p.push_back(&e);
    return EValue::from_int_list(p);
  }
  EValue tensors(std::vector<OwnedTensor*> v) {
    auto& it = *items.emplace_back(std::make_unique<std::vector<EValue>>());
    for (auto* t : v) it.push_back(EValue::from_tensor(&t->tensor));
    auto& p = *ptrs.emplace_back(std::make_unique<std::vector<EValue*>>());
    for (auto& e : it) p.push_back(&e);
    return EValue::from_tensor_list(p);
  }
  /// nullptr entries are None.
  EValue optional_tensors(std::vector<OwnedTensor*> v) {
    auto& it = *items.emplace_back(std::make_unique<std::vector<EValue>>());
    for (auto* t : v) it.push_back(t ? EValue::from_tensor(&t->tensor) : EValue());
    auto& p = *ptrs.emplace_back(std::make_unique<std::vector<EValue*>>());
    for (auto& e : it) p.push_back(&e);
    return EValue::from_optional_tensor_list(p);
  }
};

EValue tv(T& t) { return EValue::from_tensor(&t->tensor); }
EValue iv(int64_t v) { return EValue::from_int(v); }
EValue dv(double v) { return EValue::from_double(v); }
EValue bv(bool v) { return EValue::from_bool(v); }
EValue none() { return EValue(); }

T f32(std::vector<int64_t> sizes, std::vector<float> v = {}) { return OwnedTensor::make<float>(ScalarType::Float, sizes, v); }
T i64(std::vector<int64_t> sizes, std::vector<int64_t> v = {}) { return OwnedTensor::make<int64_t>(ScalarType::Long, sizes, v); }
T i32(std::vector<int64_t> sizes, std::vector<int32_t> v = {}) { return OwnedTensor::make<int32_t>(ScalarType::Int, sizes, v); }
T bools(std::vector<int64_t> sizes, std::vector<uint8_t> v) { return OwnedTensor::make<uint8_t>(ScalarType::Bool, sizes, v); }
/// A bounded-dynamic float output with room for `capacity` elements.
T dyn_f32(std::vector<int64_t> sizes, int64_t capacity) {
  return OwnedTensor::make<float>(ScalarType::Float, sizes, {}, ShapeDynamism::DynamicBound, capacity);
}
std::vector<float> iota(int64_t n, float start = 0) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}
std::vector<int64_t> sizes_of(const T& t) { return {t->tensor.sizes().begin(), t->tensor.sizes().end()}; }

/// Runs the kernel and returns the failure message ("" when it succeeded).
std::string failure(const std::string& name, std::vector<EValue>& args) {
  try {
    call_kernel(name, args);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// ---------------------------------------------------------------------------------------------------------
// views, permutations, expand

TEST(ShapeKernels, ViewCopyInfersMinusOne) {
  Lists l;
  auto x = f32({2, 3}, iota(6));
  auto out = dyn_f32({3, 3}, 9);
  std::vector<EValue> args{tv(x), l.ints({-1, 2}), tv(out), tv(out)};
  call_kernel("aten::view_copy.out", args);
  EXPECT_EQ(sizes_of(out), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(out->values<float>(), iota(6));
  auto bad = f32({4});
  std::vector<EValue> args2{tv(x), l.ints({4}), tv(bad), tv(bad)};
  EXPECT_NE(failure("aten::view_copy.out", args2).find("invalid for input of size 6"), std::string::npos);
}

TEST(ShapeKernels, PermuteWithNegativeDims) {
  Lists l;
  auto x = f32({2, 3, 4}, iota(24));
  auto out = f32({4, 2, 3});
  std::vector<EValue> args{tv(x), l.ints({-1, 0, 1}), tv(out), tv(out)};
  call_kernel("aten::permute_copy.out", args);
  auto v = out->values<float>();
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) EXPECT_EQ(v[(k * 2 + i) * 3 + j], float(i * 12 + j * 4 + k));
  std::vector<EValue> dup{tv(x), l.ints({0, 0, 1}), tv(out), tv(out)};
  EXPECT_NE(failure("aten::permute_copy.out", dup), "");
}

TEST(ShapeKernels, LargeTransposeMatchesNaive) {
  // Big enough for the tiled and the multi-threaded paths.
  const int64_t r = 300, c = 1100;
  auto x = f32({r, c}, iota(r * c));
  auto out = f32({c, r});
  std::vector<EValue> args{tv(x), iv(0), iv(-1), tv(out), tv(out)};
  call_kernel("aten::transpose_copy.int_out", args);
  auto v = out->values<float>();
  for (int64_t i = 0; i < c; ++i)
    for (int64_t j = 0; j < r; ++j) ASSERT_EQ(v[i * r + j], float(j * c + i)) << i << "," << j;
}

// A layout change the size of those around a convolution on a small map ([1, 256, 96] <-> [1, 96, 256], 96 KiB:
// a few row blocks of the tiled transpose), on a pool of three threads: split so that each thread gets work, every
// element where it belongs, both ways.
TEST(ShapeKernels, SmallMapTransposesSplitAcrossThreads) {
  ThreadPool::global().set_num_threads(3);
  struct Restore {
    ~Restore() { ThreadPool::global().set_num_threads(0); }
  } restore;
  Lists l;
  for (const auto& [pixels, channels] : {std::pair<int64_t, int64_t>{256, 96}, {96, 256}, {200, 40}}) {
    auto x = f32({1, pixels, channels}, iota(pixels * channels));
    auto out = f32({1, channels, pixels});
    std::vector<EValue> args{tv(x), l.ints({0, 2, 1}), tv(out), tv(out)};
    call_kernel("aten::permute_copy.out", args);
    const auto v = out->values<float>();
    for (int64_t c = 0; c < channels; ++c) {
      for (int64_t p = 0; p < pixels; ++p) {
        ASSERT_EQ(v[c * pixels + p], float(p * channels + c)) << pixels << "x" << channels << " at " << c << ", " << p;
      }
    }
  }
}

TEST(ShapeKernels, TCopy) {
  auto x = f32({2, 3}, iota(6));
  auto out = f32({3, 2});
  std::vector<EValue> args{tv(x), tv(out), tv(out)};
  call_kernel("aten::t_copy.out", args);
  EXPECT_EQ(out->values<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  auto v1 = f32({3}, {1, 2, 3});
  auto o1 = f32({3});
  std::vector<EValue> args1{tv(v1), tv(o1), tv(o1)};
  call_kernel("aten::t_copy.out", args1);
  EXPECT_EQ(o1->values<float>(), (std::vector<float>{1, 2, 3}));
}

TEST(ShapeKernels, ExpandWithMinusOneAndNewDims) {
  Lists l;
  auto x = f32({3, 1}, {1, 2, 3});
  auto out = f32({2, 3, 2});
  std::vector<EValue> args{tv(x), l.ints({2, -1, 2}), bv(false), tv(out), tv(out)};
  call_kernel("aten::expand_copy.out", args);
  EXPECT_EQ(out->values<float>(), (std::vector<float>{1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3}));
  auto out2 = f32({3, 4});
  std::vector<EValue> bad{tv(x), l.ints({4, 4}), bv(false), tv(out2), tv(out2)};
  EXPECT_NE(failure("aten::expand_copy.out", bad).find("must match the existing size (3)"), std::string::npos);
  std::vector<EValue> lead{tv(x), l.ints({-1, 3, 2}), bv(false), tv(out), tv(out)};
  EXPECT_NE(failure("aten::expand_copy.out", lead).find("leading"), std::string::npos);
}

TEST(ShapeKernels, ExpandLargeBroadcastFill) {
  Lists l;
  const int64_t n = 3'000'003;  // parallel path, odd size
  auto x = f32({1}, {2.5f});
  auto out = f32({n});
  std::vector<EValue> args{tv(x), l.ints({n}), bv(false), tv(out), tv(out)};
  call_kernel("aten::expand_copy.out", args);
  auto v = out->values<float>();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(v[i], 2.5f) << i;
}

TEST(ShapeKernels, SqueezeUnsqueeze) {
  Lists l;
  auto x = f32({1, 3, 1}, {1, 2, 3});
  auto out = f32({3, 1});
  std::vector<EValue> a{tv(x), iv(0), tv(out), tv(out)};
  call_kernel("aten::squeeze_copy.dim_out", a);
  EXPECT_EQ(out->values<float>(), (std::vector<float>{1, 2, 3}));
  auto out2 = f32({3});
  std::vector<EValue> b{tv(x), l.ints({0, -1, 1}), tv(out2), tv(out2)};  // dim 1 (size 3) is left alone
  call_kernel("aten::squeeze_copy.dims_out", b);
  EXPECT_EQ(out2->values<float>(), (std::vector<float>{1, 2, 3}));
  auto y = f32({2, 3}, iota(6));
  auto out3 = f32({2, 3, 1});
  std::vector<EValue> c{tv(y), iv(-1), tv(out3), tv(out3)};
  call_kernel("aten::unsqueeze_copy.out", c);
  EXPECT_EQ(out3->values<float>(), iota(6));
  std::vector<EValue> d{tv(y), iv(3), tv(out3), tv(out3)};
  EXPECT_NE(failure("aten::unsqueeze_copy.out", d).find("out of range"), std::string::npos);
}

/// Calls fn(idx) for every logical index of `shape` in row-major order.
template <typename F>
void for_each_logical(const std::vector<int64_t>& shape, F&& fn) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t k = 0; k < n; ++k) {
    fn(idx);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

int64_t physical(const Tensor& t, const std::vector<int64_t>& idx) {
  int64_t off = 0;
  for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.stride(static_cast<int>(d));
  return off;
}

std::vector<uint8_t> random_order(int rank, std::mt19937& rng) {
  std::vector<uint8_t> order(static_cast<size_t>(rank));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  return order;
}

TEST(ShapeKernels, RandomPermutesMatchNaive) {
  // Random shapes, permutations and input/output dim orders (and a dtype conversion half of the time)
  // against direct index arithmetic: covers dim merging, ordering, tiling and the parallel split.
  Lists l;
  std::mt19937 rng(20240611);
  for (int iter = 0; iter < 400; ++iter) {
    const int rank = 1 + static_cast<int>(rng() % 5);
    std::vector<int64_t> sizes(static_cast<size_t>(rank));
    for (auto& s : sizes) {
      const unsigned r = rng() % 20;
      s = r == 0 ? 0 : r < 3 ? 1 : r == 3 ? 40 + static_cast<int64_t>(rng() % 30) : 2 + static_cast<int64_t>(rng() % 5);
    }
    if (iter % 100 == 0) sizes = {3, 300, 500};  // > 1 MiB: the multi-threaded path
    const int r2 = static_cast<int>(sizes.size());
    std::vector<int64_t> perm(static_cast<size_t>(r2));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    auto in = OwnedTensor::make<float>(ScalarType::Float, sizes, {}, ShapeDynamism::Static, -1, random_order(r2, rng));
    int64_t linear = 0;
    for_each_logical(sizes, [&](const std::vector<int64_t>& idx) {
      in->tensor.data_as<float>()[physical(in->tensor, idx)] = static_cast<float>(linear++);
    });
    std::vector<int64_t> out_sizes(static_cast<size_t>(r2));
    for (int k = 0; k < r2; ++k) out_sizes[k] = sizes[perm[k]];
    const bool to_int = rng() % 2 == 0;
    auto out = to_int ? OwnedTensor::make<int32_t>(ScalarType::Int, out_sizes, {}, ShapeDynamism::Static, -1, random_order(r2, rng))
                      : OwnedTensor::make<float>(ScalarType::Float, out_sizes, {}, ShapeDynamism::Static, -1, random_order(r2, rng));
    std::vector<EValue> args{tv(in), l.ints(perm), tv(out), tv(out)};
    call_kernel("aten::permute_copy.out", args);
    std::vector<int64_t> in_idx(static_cast<size_t>(r2));
    for_each_logical(out_sizes, [&](const std::vector<int64_t>& j) {
      for (int k = 0; k < r2; ++k) in_idx[perm[k]] = j[k];
      int64_t expect = 0;
      for (int d = 0; d < r2; ++d) expect = expect * sizes[d] + in_idx[d];
      const int64_t off = physical(out->tensor, j);
      const double got = to_int ? out->tensor.data_as<int32_t>()[off] : out->tensor.data_as<float>()[off];
      ASSERT_EQ(got, static_cast<double>(expect)) << "iteration " << iter;
    });
  }
}

TEST(ShapeKernels, RandomCatWithMixedDimOrders) {
  Lists l;
  std::mt19937 rng(77);
  for (int iter = 0; iter < 200; ++iter) {
    const int rank = 1 + static_cast<int>(rng() % 4);
    std::vector<int64_t> base(static_cast<size_t>(rank));
    for (auto& s : base) s = 1 + static_cast<int64_t>(rng() % 4);
    const int dim = static_cast<int>(rng() % rank);
    const int n = 1 + static_cast<int>(rng() % 3);
    std::vector<std::unique_ptr<OwnedTensor>> parts;
    std::vector<OwnedTensor*> ptrs;
    std::vector<int64_t> out_sizes = base;
    out_sizes[dim] = 0;
    float counter = 0;
    for (int p = 0; p < n; ++p) {
      auto sz = base;
      sz[dim] = static_cast<int64_t>(rng() % 3);  // zero-size pieces too
      auto t = OwnedTensor::make<float>(ScalarType::Float, sz, {}, ShapeDynamism::Static, -1, random_order(rank, rng));
      for_each_logical(sz, [&](const std::vector<int64_t>& idx) {
        t->tensor.data_as<float>()[physical(t->tensor, idx)] = counter++;
      });
      out_sizes[dim] += sz[dim];
      ptrs.push_back(t.get());
      parts.push_back(std::move(t));
    }
    auto out = OwnedTensor::make<float>(ScalarType::Float, out_sizes, {}, ShapeDynamism::Static, -1, random_order(rank, rng));
    std::vector<EValue> args{l.tensors(ptrs), iv(dim - rank), tv(out), tv(out)};
    call_kernel("aten::cat.out", args);
    for_each_logical(out_sizes, [&](const std::vector<int64_t>& j) {
      int64_t pos = j[dim];
      size_t p = 0;
      while (pos >= parts[p]->tensor.size(dim)) pos -= parts[p++]->tensor.size(dim);
      std::vector<int64_t> src = j;
      src[dim] = pos;
      ASSERT_EQ(out->tensor.data_as<float>()[physical(out->tensor, j)],
                parts[p]->tensor.data_as<float>()[physical(parts[p]->tensor, src)])
          << "iteration " << iter;
    });
  }
}

// ---------------------------------------------------------------------------------------------------------
// layouts and dtypes

TEST(ShapeKernels, DimOrderCopyToChannelsLastAndBack) {
  Lists l;
  // NCHW [1, 2, 2, 3] -> channels-last memory: element (n,c,h,w) at ((n*H + h)*W + w)*C + c.
  auto x = f32({1, 2, 2, 3}, iota(12));
  auto cl = OwnedTensor::make<float>(ScalarType::Float, {1, 2, 2, 3}, {}, ShapeDynamism::Static, -1, {0, 2, 3, 1});
  std::vector<EValue> a{tv(x), bv(false), l.ints({0, 2, 3, 1}), tv(cl), tv(cl)};
  call_kernel("dim_order_ops::_to_dim_order_copy.out", a);
  auto v = cl->values<float>();
  for (int c = 0; c < 2; ++c)
    for (int h = 0; h < 2; ++h)
      for (int w = 0; w < 3; ++w) EXPECT_EQ(v[(h * 3 + w) * 2 + c], float(c * 6 + h * 3 + w));
  auto back = f32({1, 2, 2, 3});
  std::vector<EValue> b{tv(cl), bv(false), l.ints({0, 1, 2, 3}), tv(back), tv(back)};
  call_kernel("dim_order_ops::_clone_dim_order.out", b);
  EXPECT_EQ(back->values<float>(), iota(12));
  // A dim_order that contradicts out's layout is rejected.
  std::vector<EValue> c{tv(x), bv(false), l.ints({0, 2, 3, 1}), tv(back), tv(back)};
  EXPECT_NE(failure("dim_order_ops::_to_dim_order_copy.out", c).find("dim order"), std::string::npos);
}

TEST(ShapeKernels, ToDimOrderCopyConvertsDtype) {
  Lists l;
  auto x = f32({2, 3}, {1.7f, -1.7f, 0.f, 255.9f, -0.5f, 3.f});
  auto out = i32({2, 3});
  std::vector<EValue> a{tv(x), bv(false), l.ints({0, 1}), tv(out), tv(out)};
  call_kernel("dim_order_ops::_to_dim_order_copy.out", a);
  EXPECT_EQ(out->values<int32_t>(), (std::vector<int32_t>{1, -1, 0, 255, 0, 3}));
  // 0-d int64 -> float, dim_order [] (as in the const_methods fixture)
  auto s = i64({}, {7});
  auto fo = f32({});
  std::vector<EValue> b{tv(s), bv(false), l.ints({}), tv(fo), tv(fo)};
  call_kernel("dim_order_ops::_to_dim_order_copy.out", b);
  EXPECT_EQ(fo->values<float>()[0], 7.f);
  // float -> half -> float
  auto h = OwnedTensor::make<uint16_t>(ScalarType::Half, {2, 3}, {});
  std::vector<EValue> c{tv(x), bv(false), none(), tv(h), tv(h)};
  call_kernel("aten::_to_copy.out", c);
  auto back = f32({2, 3});
  std::vector<EValue> d{tv(h), none(), tv(back), tv(back)};
  call_kernel("aten::clone.out", d);
  EXPECT_EQ(back->values<float>()[3], 255.875f);  // nearest half to 255.9
  EXPECT_EQ(back->values<float>()[1], -1.7001953125f);
}

TEST(ShapeKernels, CopyInplaceBroadcastsAndConverts) {
  auto self = f32({2, 3}, iota(6));
  auto src = i64({3}, {7, 8, 9});
  std::vector<EValue> a{tv(self), tv(src), bv(false), tv(self)};
  call_kernel("aten::copy_", a);
  EXPECT_EQ(self->values<float>(), (std::vector<float>{7, 8, 9, 7, 8, 9}));
  auto out = f32({2, 3});
  auto one = f32({}, {4});
  std::vector<EValue> b{tv(self), tv(one), bv(false), tv(out), tv(out)};
  call_kernel("aten::copy.out", b);
  EXPECT_EQ(out->values<float>(), std::vector<float>(6, 4));
  auto wrong = f32({2}, {1, 2});
  std::vector<EValue> c{tv(self), tv(wrong), bv(false), tv(self)};
  EXPECT_NE(failure("aten::copy_", c).find("broadcast"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------------------
// slices and selects

TEST(ShapeKernels, SliceClampsLikeAten) {
  auto x = f32({2, 5}, iota(10));
  auto out = dyn_f32({2, 5}, 10);
  auto run = [&](EValue start, EValue end, int64_t step) {
    std::vector<EValue> a{tv(x), iv(-1), start, end, iv(step), tv(out), tv(out)};
    call_kernel("aten::slice_copy.Tensor_out", a);
    return out->tensor.numel() == 0 ? std::vector<float>{} : out->values<float>();
  };
  EXPECT_EQ(run(none(), none(), 2), (std::vector<float>{0, 2, 4, 5, 7, 9}));
  EXPECT_EQ(run(iv(-2), none(), 1), (std::vector<float>{3, 4, 8, 9}));
  EXPECT_EQ(run(iv(1), iv(std::numeric_limits<int64_t>::max()), 3), (std::vector<float>{1, 4, 6, 9}));
  EXPECT_EQ(run(iv(-100), iv(2), 1), (std::vector<float>{0, 1, 5, 6}));
  run(iv(4), iv(2), 1);
  EXPECT_EQ(sizes_of(out), (std::vector<int64_t>{2, 0}));
  run(iv(7), iv(100), 1);
  EXPECT_EQ(sizes_of(out), (std::vector<int64_t>{2, 0}));
  std::vector<EValue> bad{tv(x), iv(1), none(), none(), iv(0), tv(out), tv(out)};
  EXPECT_NE(failure("aten::slice_copy.Tensor_out", bad).find("step"), std::string::npos);
  // A step far beyond the size takes the first element (fuzz_execute: step * stride overflowed, UBSan).
  constexpr int64_t huge = int64_t{1} << 61;
  EXPECT_EQ(run(iv(1), none(), huge), (std::vector<float>{1, 6}));
  EXPECT_EQ(run(none(), none(), std::numeric_limits<int64_t>::max()), (std::vector<float>{0, 5}));
}

TEST(ShapeKernels, SelectAndNarrow) {
  auto x = f32({2, 3}, iota(6));
  auto out = f32({2});
  std::vector<EValue> a{tv(x), iv(1), iv(-1), tv(out), tv(out)};
  call_kernel("aten::select_copy.int_out", a);
  EXPECT_EQ(out->values<float>(), (std::vector<float>{2, 5}));
  std::vector<EValue> b{tv(x), iv(1), iv(3), tv(out), tv(out)};
  const std::string msg = failure("aten::select_copy.int_out", b);
  EXPECT_NE(msg.find("index 3 out of range"), std::string::npos) << msg;
  auto n = f32({2, 2});
  std::vector<EValue> c{tv(x), iv(1), iv(-2), iv(2), tv(n), tv(n)};
  call_kernel("aten::narrow_copy.out", c);
  EXPECT_EQ(n->values<float>(), (std::vector<float>{1, 2, 4, 5}));
}

TEST(ShapeKernels, SliceAndSelectScatter) {
  auto x = f32({2, 3}, iota(6));
  auto src = f32({2, 2}, {10, 11, 12, 13});
  auto out = f32({2, 3});
  std::vector<EValue> a{tv(x), tv(src), iv(1), iv(0), none(), iv(2), tv(out), tv(out)};
  call_kernel("aten::slice_scatter.out", a);
  EXPECT_EQ(out->values<float>(), (std::vector<float>{10, 1, 11, 12, 4, 13}));
  auto row = f32({3}, {7, 8, 9});
  std::vector<EValue> b{tv(x), tv(row), iv(0), iv(-1), tv(out), tv(out)};
  call_kernel("aten::select_scatter.out", b);
  EXPECT_EQ(out->values<float>(), (std::vector<float>{0, 1, 2, 7, 8, 9}));
  std::vector<EValue> c{tv(x), tv(src), iv(1), iv(0), none(), iv(1), tv(out), tv(out)};
  EXPECT_NE(failure("aten::slice_scatter.out", c).find("slice size"), std::string::npos);
  auto column = f32({2, 1}, {20, 21});
  std::vector<EValue> d{tv(x), tv(column), iv(1), iv(1), none(), iv(int64_t{1} << 61), tv(out), tv(out)};
  call_kernel("aten::slice_scatter.out", d);  // a huge step: one column, no overflow
  EXPECT_EQ(out->values<float>(), (std::vector<float>{0, 20, 2, 3, 21, 5}));
}

TEST(ShapeKernels, AsStridedUnfoldDiagonal) {
  Lists l;
  auto x = f32({2, 3}, iota(6));
  auto o = f32({2, 2});
  std::vector<EValue> a{tv(x), l.ints({2, 2}), l.ints({1, 2}), iv(1), tv(o), tv(o)};
  call_kernel("aten::as_strided_copy.out", a);
  EXPECT_EQ(o->values<float>(), (std::vector<float>{1, 3, 2, 4}));
  std::vector<EValue> oob{tv(x), l.ints({2, 2}), l.ints({3, 2}), iv(1), tv(o), tv(o)};
  EXPECT_NE(failure("aten::as_strided_copy.out", oob).find("out of bounds"), std::string::npos);

  auto y = f32({2, 4}, iota(8));
  auto u = f32({2, 2, 2});
  std::vector<EValue> b{tv(y), iv(1), iv(2), iv(2), tv(u), tv(u)};
  call_kernel("aten::unfold_copy.out", b);
  EXPECT_EQ(u->values<float>(), (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}));
  auto u2 = f32({2, 3, 2});
  std::vector<EValue> b2{tv(y), iv(-1), iv(2), iv(1), tv(u2), tv(u2)};
  call_kernel("aten::unfold_copy.out", b2);
  EXPECT_EQ(u2->values<float>(), (std::vector<float>{0, 1, 1, 2, 2, 3, 4, 5, 5, 6, 6, 7}));
  auto u3 = f32({2, 1, 2});
  std::vector<EValue> b3{tv(y), iv(1), iv(2), iv(std::numeric_limits<int64_t>::max()), tv(u3), tv(u3)};
  call_kernel("aten::unfold_copy.out", b3);  // a huge step: the first window only
  EXPECT_EQ(u3->values<float>(), (std::vector<float>{0, 1, 4, 5}));
  auto u4 = f32({2, 1, 0});
  std::vector<EValue> b4{tv(y), iv(1), iv(0), iv(5), tv(u4), tv(u4)};
  call_kernel("aten::unfold_copy.out", b4);  // size 0, a step past the dim: one empty window, as with step 5
  EXPECT_EQ(sizes_of(u4), (std::vector<int64_t>{2, 1, 0}));

  auto m = f32({3, 4}, iota(12));
  auto d = dyn_f32({4}, 4);
  std::vector<EValue> c{tv(m), iv(1), iv(0), iv(1), tv(d), tv(d)};
  call_kernel("aten::diagonal_copy.out", c);
  EXPECT_EQ(d->values<float>(), (std::vector<float>{1, 6, 11}));
  std::vector<EValue> c2{tv(m), iv(-1), iv(0), iv(1), tv(d), tv(d)};
  call_kernel("aten::diagonal_copy.out", c2);
  EXPECT_EQ(d->values<float>(), (std::vector<float>{4, 9}));
  std::vector<EValue> c3{tv(m), iv(0), iv(1), iv(0), tv(d), tv(d)};  // swapped dims: diagonal of the transpose
  call_kernel("aten::diagonal_copy.out", c3);
  EXPECT_EQ(d->values<float>(), (std::vector<float>{0, 5, 10}));
  std::vector<EValue> c4{tv(m), iv(5), iv(0), iv(1), tv(d), tv(d)};
  call_kernel("aten::diagonal_copy.out", c4);
  EXPECT_EQ(d->tensor.numel(), 0);
}

// ---------------------------------------------------------------------------------------------------------
// joins and splits

TEST(ShapeKernels, CatSkipsLegacyEmptyAndPromotes) {
  Lists l;
  auto a = f32({2, 1}, {1, 2});
  auto e = f32({0});
  auto b = i64({2, 2}, {3, 4, 5, 6});
  auto out = f32({2, 3});
  std::vector<EValue> args{l.tensors({a.get(), e.get(), b.get()}), iv(-1), tv(out), tv(out)};
  call_kernel("aten::cat.out", args);
  EXPECT_EQ(out->values<float>(), (std::vector<float>{1, 3, 4, 2, 5, 6}));
  // Float inputs cannot go into an int output.
  auto io = i64({2, 3});
  std::vector<EValue> bad{l.tensors({a.get(), b.get()}), iv(1), tv(io), tv(io)};
  EXPECT_NE(failure("aten::cat.out", bad).find("can't be cast"), std::string::npos);
  auto c = f32({3, 1});
  std::vector<EValue> mismatch{l.tensors({a.get(), c.get()}), iv(1), tv(out), tv(out)};
  EXPECT_NE(failure("aten::cat.out", mismatch).find("sizes of tensors must match"), std::string::npos);
  // zero-size pieces along the cat dim
  auto z = f32({2, 0});
  auto out2 = f32({2, 1});
  std::vector<EValue> zz{l.tensors({z.get(), a.get(), z.get()}), iv(1), tv(out2), tv(out2)};
  call_kernel("aten::cat.out", zz);
  EXPECT_EQ(out2->values<float>(), (std::vector<float>{1, 2}));
}

// A 4-D cat along channels that the load paired channels-last (CatChannels) reads and writes NHWC bytes: each
// pixel's channels of each input, in turn; an input of another spatial size no longer fits the pairing and fails.
TEST(ShapeKernels, CatPairedChannelsLastJoinsChannelRunsAndRefusesAnotherShape) {
  Lists l;
  auto a = f32({1, 2, 2, 2}, iota(8));       // NHWC bytes: pixel p holds a[2p], a[2p + 1]
  auto b = f32({1, 3, 2, 2}, iota(12, 100));  // pixel p holds b[3p .. 3p + 2]
  auto out = f32({1, 5, 2, 2});
  std::vector<EValue> args{l.tensors({a.get(), b.get()}), iv(1), tv(out), tv(out)};
  const KernelEntry* entry = runtime::kernel_registry().find("aten::cat.out");
  ASSERT_NE(entry, nullptr);
  std::vector<EValue*> ptrs;
  for (EValue& v : args) ptrs.push_back(&v);
  const std::unique_ptr<KernelState> state = entry->prepare(KernelArgs(ptrs));
  ASSERT_NE(state, nullptr);
  const KernelState::ChannelsLastArgs named = state->keeps_channels_last();
  EXPECT_EQ(named.inputs, std::vector<size_t>{0});
  EXPECT_EQ(named.outputs, std::vector<size_t>{2});
  state->use_channels_last(true, true);
  KernelContext ctx(&ThreadPool::global(), state.get());
  entry->fn(ctx, KernelArgs(ptrs));
  std::vector<float> want;
  for (int p = 0; p < 4; ++p) {
    for (int c = 0; c < 2; ++c) want.push_back(static_cast<float>(2 * p + c));
    for (int c = 0; c < 3; ++c) want.push_back(static_cast<float>(100 + 3 * p + c));
  }
  EXPECT_EQ(out->values<float>(), want);
  auto wide = f32({1, 3, 2, 3});
  args[0] = l.tensors({a.get(), wide.get()});
  ptrs[0] = &args[0];
  const Error e = etnp::testing::expect_error([&] { entry->fn(ctx, KernelArgs(ptrs)); });
  EXPECT_NE(std::string(e.what()).find("paired with its neighbours in NHWC order no longer fits it (tensor 1 of "
                                       "shape [1, 3, 2, 3])"),
            std::string::npos)
      << e.what();
}

TEST(ShapeKernels, StackSplitUnbind) {
  Lists l;
  auto a = f32({2}, {1, 2});
  auto b = f32({2}, {3, 4});
  auto s = f32({2, 2});
  std::vector<EValue> st{l.tensors({a.get(), b.get()}), iv(-1), tv(s), tv(s)};
  call_kernel("aten::stack.out", st);
  EXPECT_EQ(s->values<float>(), (std::vector<float>{1, 3, 2, 4}));

  auto x = f32({2, 5}, iota(10));
  auto p0 = f32({2, 2}), p1 = f32({2, 2}), p2 = f32({2, 1});
  auto outs = l.tensors({p0.get(), p1.get(), p2.get()});
  std::vector<EValue> sp{tv(x), iv(2), iv(1), outs, outs};
  call_kernel("aten::split_copy.Tensor_out", sp);
  EXPECT_EQ(p0->values<float>(), (std::vector<float>{0, 1, 5, 6}));
  EXPECT_EQ(p1->values<float>(), (std::vector<float>{2, 3, 7, 8}));
  EXPECT_EQ(p2->values<float>(), (std::vector<float>{4, 9}));

  auto q0 = f32({2, 1}), q1 = f32({2, 4});
  auto outs2 = l.tensors({q0.get(), q1.get()});
  std::vector<EValue> sws{tv(x), l.ints({1, 4}), iv(-1), outs2, outs2};
  call_kernel("aten::split_with_sizes_copy.out", sws);
  EXPECT_EQ(q0->values<float>(), (std::vector<float>{0, 5}));
  EXPECT_EQ(q1->values<float>(), (std::vector<float>{1, 2, 3, 4, 6, 7, 8, 9}));
  std::vector<EValue> bad{tv(x), l.ints({1, 3}), iv(1), outs2, outs2};
  EXPECT_NE(failure("aten::split_with_sizes_copy.out", bad).find("sum"), std::string::npos);
  // Along the first dim, and along the last of a [1, 10] (a recurrent cell's gates): each chunk one run of bytes.
  auto rows0 = f32({1, 5}), rows1 = f32({1, 5});
  auto outs_rows = l.tensors({rows0.get(), rows1.get()});
  std::vector<EValue> by_row{tv(x), l.ints({1, 1}), iv(0), outs_rows, outs_rows};
  call_kernel("aten::split_with_sizes_copy.out", by_row);
  EXPECT_EQ(rows0->values<float>(), (std::vector<float>{0, 1, 2, 3, 4}));
  EXPECT_EQ(rows1->values<float>(), (std::vector<float>{5, 6, 7, 8, 9}));
  auto gates = f32({1, 10}, iota(10));
  auto g0 = f32({1, 3}), g1 = f32({1, 3}), g2 = f32({1, 4});
  auto outs_gates = l.tensors({g0.get(), g1.get(), g2.get()});
  std::vector<EValue> by_gate{tv(gates), l.ints({3, 3, 4}), iv(1), outs_gates, outs_gates};
  call_kernel("aten::split_with_sizes_copy.out", by_gate);
  EXPECT_EQ(g0->values<float>(), (std::vector<float>{0, 1, 2}));
  EXPECT_EQ(g1->values<float>(), (std::vector<float>{3, 4, 5}));
  EXPECT_EQ(g2->values<float>(), (std::vector<float>{6, 7, 8, 9}));

  auto r0 = f32({5}), r1 = f32({5});
  auto outs3 = l.tensors({r0.get(), r1.get()});
  std::vector<EValue> ub{tv(x), iv(0), outs3, outs3};
  call_kernel("aten::unbind_copy.int_out", ub);
  EXPECT_EQ(r1->values<float>(), (std::vector<float>{5, 6, 7, 8, 9}));
}

// ---------------------------------------------------------------------------------------------------------
// rearrangements

TEST(ShapeKernels, PixelShuffleRoundTrip) {
  // [1, 4, 1, 2] with r=2 -> [1, 1, 2, 4]: out[0,0,i,w*2+j] = in[0, i*2+j, 0, w]
  auto x = f32({1, 4, 1, 2}, iota(8));
  auto y = f32({1, 1, 2, 4});
  std::vector<EValue> a{tv(x), iv(2), tv(y), tv(y)};
  call_kernel("aten::pixel_shuffle.out", a);
  EXPECT_EQ(y->values<float>(), (std::vector<float>{0, 2, 1, 3, 4, 6, 5, 7}));
  auto z = f32({1, 4, 1, 2});
  std::vector<EValue> b{tv(y), iv(2), tv(z), tv(z)};
  call_kernel("aten::pixel_unshuffle.out", b);
  EXPECT_EQ(z->values<float>(), iota(8));
}

TEST(ShapeKernels, FlipRollRepeat) {
  Lists l;
  auto x = f32({2, 3}, iota(6));
  auto o = f32({2, 3});
  std::vector<EValue> f{tv(x), l.ints({0, -1}), tv(o), tv(o)};
  call_kernel("aten::flip.out", f);
  EXPECT_EQ(o->values<float>(), (std::vector<float>{5, 4, 3, 2, 1, 0}));
  std::vector<EValue> r{tv(x), l.ints({1, -1}), l.ints({1, 0}), tv(o), tv(o)};
  call_kernel("aten::roll.out", r);
  // roll dim1 by 1: [2,0,1],[5,3,4]; then dim0 by -1: rows swap
  EXPECT_EQ(o->values<float>(), (std::vector<float>{5, 3, 4, 2, 0, 1}));
  std::vector<EValue> rf{tv(x), l.ints({8}), l.ints({}), tv(o), tv(o)};  // flattened, 8 mod 6 = 2
  call_kernel("aten::roll.out", rf);
  EXPECT_EQ(o->values<float>(), (std::vector<float>{4, 5, 0, 1, 2, 3}));
  auto rep = f32({2, 2, 6});
  std::vector<EValue> rp{tv(x), l.ints({2, 1, 2}), tv(rep), tv(rep)};
  call_kernel("aten::repeat.out", rp);
  auto v = rep->values<float>();
  for (int a = 0; a < 2; ++a)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 6; ++j) EXPECT_EQ(v[(a * 2 + i) * 6 + j], float(i * 3 + j % 3));
}

TEST(ShapeKernels, RepeatInterleaveAndTril) {
  auto reps = i64({3}, {2, 0, 3});
  auto out = OwnedTensor::make<int64_t>(ScalarType::Long, {5}, {}, ShapeDynamism::DynamicBound, 8);
  std::vector<EValue> a{tv(reps), none(), tv(out), tv(out)};
  call_kernel("aten::repeat_interleave.Tensor_out", a);
  EXPECT_EQ(out->values<int64_t>(), (std::vector<int64_t>{0, 0, 2, 2, 2}));
  auto neg = i64({2}, {1, -1});
  std::vector<EValue> b{tv(neg), none(), tv(out), tv(out)};
  EXPECT_NE(failure("aten::repeat_interleave.Tensor_out", b).find("negative"), std::string::npos);

  auto m = f32({2, 3, 3}, iota(18, 1));
  auto t = f32({2, 3, 3});
  std::vector<EValue> c{tv(m), iv(-1), tv(t), tv(t)};
  call_kernel("aten::tril.out", c);
  auto v = t->values<float>();
  for (int b2 = 0; b2 < 2; ++b2)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) EXPECT_EQ(v[b2 * 9 + i * 3 + j], j - i <= -1 ? float(b2 * 9 + i * 3 + j + 1) : 0.f);
}

TEST(ShapeKernels, ZeroSizeTensors) {
  Lists l;
  auto x = f32({0, 3});
  auto o = f32({3, 0});
  std::vector<EValue> p{tv(x), l.ints({1, 0}), tv(o), tv(o)};
  call_kernel("aten::permute_copy.out", p);
  auto e = f32({0, 3});
  std::vector<EValue> c{tv(x), tv(e)};
  c.push_back(tv(e));
  call_kernel("aten::alias_copy.out", c);
  auto v = f32({3, 0});
  std::vector<EValue> vw{tv(x), l.ints({3, 0}), tv(v), tv(v)};
  call_kernel("aten::view_copy.out", vw);
  std::vector<EValue> vw2{tv(x), l.ints({-1, 0}), tv(v), tv(v)};
  EXPECT_NE(failure("aten::view_copy.out", vw2), "");
}

// ---------------------------------------------------------------------------------------------------------
// indexing

TEST(IndexKernels, IndexWithNoneSlotsAndNegativeIndex) {
  Lists l;
  auto x = f32({2, 3, 4}, iota(24));
  auto idx = i64({2}, {-1, 0});
  auto out = f32({2, 3, 2});
  std::vector<EValue> a{tv(x), l.optional_tensors({nullptr, nullptr, idx.get()}), tv(out), tv(out)};
  call_kernel("aten::index.Tensor_out", a);
  EXPECT_EQ(out->values<float>(), (std::vector<float>{3, 0, 7, 4, 11, 8, 15, 12, 19, 16, 23, 20}));
  auto big = i64({1}, {4});
  std::vector<EValue> b{tv(x), l.optional_tensors({nullptr, nullptr, big.get()}), tv(out), tv(out)};
  const std::string msg = failure("aten::index.Tensor_out", b);
  EXPECT_NE(msg.find("index 4 is out of bounds for dimension 2 with size 4"), std::string::npos) << msg;
}

TEST(IndexKernels, IndexBroadcastsAndPlacesResult) {
  Lists l;
  auto x = f32({2, 3, 4}, iota(24));
  // Adjacent: dims 1 and 2 indexed by [2,1] and [1,2] -> broadcast [2,2] in place: result [2, 2, 2]
  auto i1 = i64({2, 1}, {0, 2});
  auto i2 = i32({1, 2}, {1, 3});
  auto out = f32({2, 2, 2});
  std::vector<EValue> a{tv(x), l.optional_tensors({nullptr, i1.get(), i2.get()}), tv(out), tv(out)};
  call_kernel("aten::index.Tensor_out", a);
  EXPECT_EQ(out->values<float>(), (std::vector<float>{1, 3, 9, 11, 13, 15, 21, 23}));
  // Non-adjacent: dims 0 and 2 indexed -> broadcast dims first: result [2, 3] (B=[2], then dim 1)
  auto j0 = i64({2}, {1, 0});
  auto j2 = i64({2}, {0, 3});
  auto out2 = f32({2, 3});
  std::vector<EValue> b{tv(x), l.optional_tensors({j0.get(), nullptr, j2.get()}), tv(out2), tv(out2)};
  call_kernel("aten::index.Tensor_out", b);
  EXPECT_EQ(out2->values<float>(), (std::vector<float>{12, 16, 20, 3, 7, 11}));
}

TEST(IndexKernels, IndexWithBoolMask) {
  Lists l;
  auto x = f32({2, 3}, iota(6));
  auto mask = bools({2, 3}, {1, 0, 1, 0, 0, 1});
  auto out = dyn_f32({6}, 6);
  std::vector<EValue> a{tv(x), l.optional_tensors({mask.get()}), tv(out), tv(out)};
  call_kernel("aten::index.Tensor_out", a);
  EXPECT_EQ(out->values<float>(), (std::vector<float>{0, 2, 5}));
  auto rows = bools({2}, {0, 1});
  auto out2 = OwnedTensor::make<float>(ScalarType::Float, {2, 3}, {}, ShapeDynamism::DynamicBound, 6);
  std::vector<EValue> b{tv(x), l.optional_tensors({rows.get()}), tv(out2), tv(out2)};
  call_kernel("aten::index.Tensor_out", b);
  EXPECT_EQ(sizes_of(out2), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(out2->values<float>(), (std::vector<float>{3, 4, 5}));
  auto wrong = bools({3}, {1, 0, 1});
  std::vector<EValue> c{tv(x), l.optional_tensors({wrong.get()}), tv(out2), tv(out2)};
  EXPECT_NE(failure("aten::index.Tensor_out", c).find("mask"), std::string::npos);
}

TEST(IndexKernels, IndexPutKvCacheStyle) {
  Lists l;
  // cache [1, 2, 4, 3], write positions [2] of dim 2 with values [2, 1, 3]
  auto cache = f32({1, 2, 4, 3});
  auto pos = i64({1}, {2});
  auto vals = f32({2, 1, 3}, {1, 2, 3, 4, 5, 6});
  auto out = f32({1, 2, 4, 3});
  std::vector<EValue> a{tv(cache), l.optional_tensors({nullptr, nullptr, pos.get()}), tv(vals), bv(false), tv(out), tv(out)};
  call_kernel("aten::index_put.out", a);
  auto v = out->values<float>();
  for (int h = 0; h < 2; ++h)
    for (int p = 0; p < 4; ++p)
      for (int d = 0; d < 3; ++d) EXPECT_EQ(v[(h * 4 + p) * 3 + d], p == 2 ? float(h * 3 + d + 1) : 0.f);
  auto bad = i64({1}, {-5});
  std::vector<EValue> b{tv(cache), l.optional_tensors({nullptr, nullptr, bad.get()}), tv(vals), bv(false), tv(out), tv(out)};
  EXPECT_NE(failure("aten::index_put.out", b).find("index -5 is out of bounds for dimension 2 with size 4"),
            std::string::npos);
  auto wrong = f32({3, 3});
  std::vector<EValue> c{tv(cache), l.optional_tensors({nullptr, nullptr, pos.get()}), tv(wrong), bv(false), tv(out), tv(out)};
  EXPECT_NE(failure("aten::index_put.out", c).find("cannot be broadcast"), std::string::npos);
}

TEST(IndexKernels, IndexPutAccumulateAndInplace) {
  Lists l;
  auto x = f32({4}, {1, 1, 1, 1});
  auto idx = i64({3}, {0, 2, 0});
  auto vals = f32({3}, {10, 20, 30});
  std::vector<EValue> a{tv(x), l.optional_tensors({idx.get()}), tv(vals), bv(true), tv(x)};
  call_kernel("aten::index_put_", a);
  EXPECT_EQ(x->values<float>(), (std::vector<float>{41, 1, 21, 1}));
  auto m = bools({4}, {0, 1, 0, 1});
  auto s = f32({}, {-1});
  auto out = f32({4});
  std::vector<EValue> b{tv(x), l.optional_tensors({m.get()}), tv(s), bv(false), tv(out), tv(out)};
  call_kernel("aten::index_put.out", b);
  EXPECT_EQ(out->values<float>(), (std::vector<float>{41, -1, 21, -1}));
}

TEST(IndexKernels, IndexSelectAndEmbedding) {
  auto x = f32({2, 3}, iota(6));
  auto idx = i64({3}, {2, 0, 2});
  auto out = f32({2, 3});
  std::vector<EValue> a{tv(x), iv(-1), tv(idx), tv(out), tv(out)};
  call_kernel("aten::index_select.out", a);
  EXPECT_EQ(out->values<float>(), (std::vector<float>{2, 0, 2, 5, 3, 5}));
  auto neg = i64({1}, {-1});
  std::vector<EValue> b{tv(x), iv(0), tv(neg), tv(out), tv(out)};
  EXPECT_NE(failure("aten::index_select.out", b).find("index -1 is out of range"), std::string::npos);

  auto w = f32({4, 2}, iota(8));
  auto ids = i64({2, 2}, {3, 0, 1, 1});
  auto e = f32({2, 2, 2});
  std::vector<EValue> c{tv(w), tv(ids), iv(-1), bv(false), bv(false), tv(e), tv(e)};
  call_kernel("aten::embedding.out", c);
  EXPECT_EQ(e->values<float>(), (std::vector<float>{6, 7, 0, 1, 2, 3, 2, 3}));
  auto oob = i64({2, 2}, {4, 0, 1, 1});
  std::vector<EValue> d{tv(w), tv(oob), iv(-1), bv(false), bv(false), tv(e), tv(e)};
  const std::string msg = failure("aten::embedding.out", d);
  EXPECT_NE(msg.find("index 4"), std::string::npos) << msg;
  EXPECT_NE(msg.find("4 rows"), std::string::npos) << msg;
}

TEST(IndexKernels, GatherScatter) {
  auto x = f32({2, 3}, iota(6));
  auto idx = i64({2, 2}, {2, 0, 1, 1});
  auto g = f32({2, 2});
  std::vector<EValue> a{tv(x), iv(1), tv(idx), bv(false), tv(g), tv(g)};
  call_kernel("aten::gather.out", a);
  EXPECT_EQ(g->values<float>(), (std::vector<float>{2, 0, 4, 4}));
  auto bad = i64({2, 2}, {2, 3, 1, 1});
  std::vector<EValue> b{tv(x), iv(1), tv(bad), bv(false), tv(g), tv(g)};
  EXPECT_NE(failure("aten::gather.out", b).find("index 3 is out of bounds for dimension 1 with size 3"),
            std::string::npos);

  auto src = f32({2, 2}, {10, 20, 30, 40});
  auto out = f32({2, 3});
  std::vector<EValue> c{tv(x), iv(1), tv(idx), tv(src), tv(out), tv(out)};
  call_kernel("aten::scatter.src_out", c);
  EXPECT_EQ(out->values<float>(), (std::vector<float>{20, 1, 10, 3, 40, 5}));
  std::vector<EValue> d{tv(x), iv(1), tv(idx), tv(src), tv(out), tv(out)};
  call_kernel("aten::scatter_add.out", d);
  EXPECT_EQ(out->values<float>(), (std::vector<float>{20, 1, 12, 3, 74, 5}));
  std::vector<EValue> e{tv(x), iv(0), tv(idx), dv(-1.5), tv(out), tv(out)};
  EXPECT_NE(failure("aten::scatter.value_out", e).find("index 2 is out of bounds for dimension 0 with size 2"),
            std::string::npos);
  auto idx0 = i64({1, 2}, {1, 0});
  std::vector<EValue> f{tv(x), iv(0), tv(idx0), dv(-1.5), tv(out), tv(out)};
  call_kernel("aten::scatter.value_out", f);
  EXPECT_EQ(out->values<float>(), (std::vector<float>{0, -1.5f, 2, -1.5f, 4, 5}));
}

TEST(IndexKernels, MaskedScatterSelectNonzero) {
  auto x = f32({2, 3}, iota(6));
  auto m = bools({3}, {1, 0, 1});  // broadcast over rows
  auto src = f32({5}, {10, 20, 30, 40, 50});
  auto out = f32({2, 3});
  std::vector<EValue> a{tv(x), tv(m), tv(src), tv(out), tv(out)};
  call_kernel("aten::masked_scatter.out", a);
  EXPECT_EQ(out->values<float>(), (std::vector<float>{10, 1, 20, 30, 4, 40}));
  auto small = f32({3}, {1, 2, 3});
  std::vector<EValue> b{tv(x), tv(m), tv(small), tv(out), tv(out)};
  EXPECT_NE(failure("aten::masked_scatter.out", b).find("source"), std::string::npos);

  auto sel = dyn_f32({6}, 6);
  std::vector<EValue> c{tv(x), tv(m), tv(sel), tv(sel)};
  call_kernel("aten::masked_select.out", c);
  EXPECT_EQ(sel->values<float>(), (std::vector<float>{0, 2, 3, 5}));

  auto y = f32({2, 3}, {0, 1, 0, std::nanf(""), 0, -0.0f});
  auto nz = OwnedTensor::make<int64_t>(ScalarType::Long, {6, 2}, {}, ShapeDynamism::DynamicBound, 12);
  std::vector<EValue> d{tv(y), tv(nz), tv(nz)};
  call_kernel("aten::nonzero.out", d);
  EXPECT_EQ(sizes_of(nz), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(nz->values<int64_t>(), (std::vector<int64_t>{0, 1, 1, 0}));
}

// ---------------------------------------------------------------------------------------------------------
// creation and padding

TEST(FillKernels, FullOnesZerosScalarTensor) {
  Lists l;
  auto o = OwnedTensor::make<int32_t>(ScalarType::Int, {2, 2}, {});
  std::vector<EValue> a{l.ints({2, 2}), iv(-3), tv(o), tv(o)};
  call_kernel("aten::full.out", a);
  EXPECT_EQ(o->values<int32_t>(), std::vector<int32_t>(4, -3));
  auto u8 = OwnedTensor::make<uint8_t>(ScalarType::Byte, {2}, {});
  std::vector<EValue> b{l.ints({2}), iv(300), tv(u8), tv(u8)};
  EXPECT_NE(failure("aten::full.out", b).find("overflow"), std::string::npos);
  std::vector<EValue> nan_into_int{l.ints({2, 2}), dv(std::nan("")), tv(o), tv(o)};
  EXPECT_NE(failure("aten::full.out", nan_into_int).find("overflow"), std::string::npos);
  // Integers wrap into unsigned types down to -max; floating values do not (torch.full semantics).
  std::vector<EValue> minus_one{l.ints({2}), iv(-1), tv(u8), tv(u8)};
  call_kernel("aten::full.out", minus_one);
  EXPECT_EQ(u8->values<uint8_t>(), (std::vector<uint8_t>{255, 255}));
  std::vector<EValue> minus_half{l.ints({2}), dv(-1.5), tv(u8), tv(u8)};
  EXPECT_NE(failure("aten::full.out", minus_half).find("overflow"), std::string::npos);
  auto h = OwnedTensor::make<uint16_t>(ScalarType::Half, {2}, {});
  std::vector<EValue> big_half{l.ints({2}), dv(1e10), tv(h), tv(h)};
  EXPECT_NE(failure("aten::full.out", big_half).find("overflow"), std::string::npos);
  std::vector<EValue> inf_half{l.ints({2}), dv(INFINITY), tv(h), tv(h)};
  call_kernel("aten::full.out", inf_half);
  EXPECT_EQ(h->values<uint16_t>()[0], 0x7c00);
  auto f = f32({3});
  std::vector<EValue> c{l.ints({3}), tv(f)};
  c.push_back(tv(f));
  call_kernel("aten::ones.out", c);
  EXPECT_EQ(f->values<float>(), std::vector<float>(3, 1));
  std::vector<EValue> z{l.ints({3}), tv(f), tv(f)};
  call_kernel("aten::zeros.out", z);
  EXPECT_EQ(f->values<float>(), std::vector<float>(3, 0));
  auto s = f32({});
  std::vector<EValue> d{dv(-INFINITY), tv(s), tv(s)};
  call_kernel("aten::scalar_tensor.out", d);
  EXPECT_EQ(s->values<float>()[0], -INFINITY);
  auto like = f32({2, 3});
  auto fl = f32({2, 3});
  std::vector<EValue> e{tv(like), dv(2.0), none(), tv(fl), tv(fl)};
  call_kernel("aten::full_like.out", e);
  EXPECT_EQ(fl->values<float>(), std::vector<float>(6, 2));
  auto v = i64({}, {5});
  std::vector<EValue> g{tv(like), tv(v), tv(fl), tv(fl)};
  call_kernel("aten::fill.Tensor_out", g);
  EXPECT_EQ(fl->values<float>(), std::vector<float>(6, 5));
}

TEST(FillKernels, ArangeLengthsAndValues) {
  auto run_f = [](EValue s, EValue e, EValue st) {
    auto out = dyn_f32({16}, 16);
    std::vector<EValue> a{s, e, st, tv(out), tv(out)};
    call_kernel("aten::arange.start_out", a);
    return out->tensor.numel() == 0 ? std::vector<float>{} : out->values<float>();
  };
  EXPECT_EQ(run_f(iv(-1), iv(7), iv(1)), (std::vector<float>{-1, 0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(run_f(dv(0), dv(1), dv(0.25)), (std::vector<float>{0, 0.25, 0.5, 0.75}));
  EXPECT_EQ(run_f(dv(1), dv(0), dv(-0.3)).size(), 4u);  // ceil(1/0.3) = 4
  EXPECT_EQ(run_f(iv(5), iv(5), iv(1)).size(), 0u);
  auto li = OwnedTensor::make<int64_t>(ScalarType::Long, {8}, {}, ShapeDynamism::DynamicBound, 8);
  std::vector<EValue> a{iv(10), iv(0), iv(-3), tv(li), tv(li)};
  call_kernel("aten::arange.start_out", a);
  EXPECT_EQ(li->values<int64_t>(), (std::vector<int64_t>{10, 7, 4, 1}));
  std::vector<EValue> b{iv(6), tv(li), tv(li)};
  call_kernel("aten::arange.out", b);
  EXPECT_EQ(li->values<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  std::vector<EValue> c{iv(0), iv(5), iv(-1), tv(li), tv(li)};
  EXPECT_NE(failure("aten::arange.start_out", c).find("step sign"), std::string::npos);
  std::vector<EValue> d{iv(0), iv(5), iv(0), tv(li), tv(li)};
  EXPECT_NE(failure("aten::arange.start_out", d).find("nonzero"), std::string::npos);
}

TEST(FillKernels, ConstantPadWithNegativePad) {
  Lists l;
  auto x = f32({2, 3}, iota(6));
  auto out = f32({4, 3});
  // last dim: crop 1 on the left, pad 1 on the right; dim 0: pad 1 both sides
  std::vector<EValue> a{tv(x), l.ints({-1, 1, 1, 1}), dv(9), tv(out), tv(out)};
  call_kernel("aten::constant_pad_nd.out", a);
  EXPECT_EQ(out->values<float>(), (std::vector<float>{9, 9, 9, 1, 2, 9, 4, 5, 9, 9, 9, 9}));
  std::vector<EValue> b{tv(x), l.ints({1}), dv(0), tv(out), tv(out)};
  EXPECT_NE(failure("aten::constant_pad_nd.out", b).find("even"), std::string::npos);
}

TEST(FillKernels, ReflectionAndReplicationPad) {
  Lists l;
  auto x = f32({1, 4}, {1, 2, 3, 4});
  auto out = f32({1, 7});
  std::vector<EValue> a{tv(x), l.ints({2, 1}), tv(out), tv(out)};
  call_kernel("aten::reflection_pad1d.out", a);
  EXPECT_EQ(out->values<float>(), (std::vector<float>{3, 2, 1, 2, 3, 4, 3}));
  call_kernel("aten::replication_pad1d.out", a);
  EXPECT_EQ(out->values<float>(), (std::vector<float>{1, 1, 1, 2, 3, 4, 4}));
  std::vector<EValue> bad{tv(x), l.ints({4, 0}), tv(out), tv(out)};
  EXPECT_NE(failure("aten::reflection_pad1d.out", bad).find("less than"), std::string::npos);

  auto y = f32({1, 2, 2}, {1, 2, 3, 4});
  auto o2 = f32({1, 4, 3});
  std::vector<EValue> b{tv(y), l.ints({1, 0, 1, 1}), tv(o2), tv(o2)};  // (left, right, top, bottom)
  call_kernel("aten::reflection_pad2d.out", b);
  EXPECT_EQ(o2->values<float>(), (std::vector<float>{4, 3, 4, 2, 1, 2, 4, 3, 4, 2, 1, 2}));
  call_kernel("aten::replication_pad2d.out", b);
  EXPECT_EQ(o2->values<float>(), (std::vector<float>{1, 1, 2, 1, 1, 2, 3, 3, 4, 3, 3, 4}));
}

}  // namespace
}  // namespace etnp::testing
