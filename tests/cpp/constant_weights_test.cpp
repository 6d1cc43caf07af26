// Constant weights: layout changes of constants folded at load (runtime) and matrix products that pack
// constant weights at load (kernels/linalg.cpp + packed_gemm.h), against a double-precision reference and
// against the same program with the weights given as inputs (the general path).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "format/writer.h"
#include "writer_test_util.h"

namespace etnp::writer_testing {
namespace {

struct Case {
  int32_t m, k, n;
};

std::vector<float> random_floats(std::mt19937& rng, size_t n) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

/// y = x @ W^T, z = x @ W^T + b (addmm), u = linear(x, W, b), with W [n, k] constant (or an input).
std::vector<uint8_t> linear_program(const Case& c, const std::vector<float>& w, const std::vector<float>& b,
                                    bool weights_as_inputs) {
  format::ProgramWriter writer;
  auto& m = writer.add_method("forward");
  const int32_t x = m.planned_tensor(f32({c.m, c.k}));
  const int32_t wv = weights_as_inputs ? m.planned_tensor(f32({c.n, c.k})) : m.constant_tensor(f32({c.n, c.k}), format::as_bytes(w));
  const int32_t bv = weights_as_inputs ? m.planned_tensor(f32({c.n})) : m.constant_tensor(f32({c.n}), format::as_bytes(b));
  const int32_t wt = m.planned_tensor(f32({c.k, c.n}));
  const int32_t y = m.planned_tensor(f32({c.m, c.n}));
  const int32_t z = m.planned_tensor(f32({c.m, c.n}));
  const int32_t u = m.planned_tensor(f32({c.m, c.n}));
  const int32_t one = m.int_value(1);
  m.kernel("aten::permute_copy.out", {wv, m.int_list({1, 0}), wt, wt});
  m.kernel("aten::mm.out", {x, wt, y, y});
  m.kernel("aten::addmm.out", {bv, x, wt, one, one, z, z});
  m.kernel("aten::linear.out", {x, wv, bv, u, u});
  if (weights_as_inputs) {
    m.set_inputs({x, wv, bv});
  } else {
    m.set_inputs({x});
  }
  m.set_outputs({y, z, u});
  return writer.serialize();
}

void expect_near_reference(const std::vector<float>& got, const std::vector<float>& x, const std::vector<float>& w,
                           const std::vector<float>* b, const Case& c, const char* what) {
  ASSERT_EQ(got.size(), static_cast<size_t>(c.m) * c.n) << what;
  for (int32_t i = 0; i < c.m; ++i) {
    for (int32_t j = 0; j < c.n; ++j) {
      double ref = b != nullptr ? (*b)[j] : 0.0;
      for (int32_t p = 0; p < c.k; ++p) ref += double(x[i * c.k + p]) * double(w[j * c.k + p]);
      const float v = got[static_cast<size_t>(i) * c.n + j];
      ASSERT_NEAR(v, ref, 1e-5 * (1 + c.k)) << what << " m=" << c.m << " k=" << c.k << " n=" << c.n << " at (" << i
                                             << ", " << j << ")";
    }
  }
}

TEST(ConstantWeights, PackedProductsMatchTheReferenceAndTheGeneralPath) {
  std::mt19937 rng(1234);
  const Case cases[] = {{1, 1, 1},   {1, 17, 33}, {5, 3, 15},   {6, 16, 16},  {7, 64, 100},
                        {13, 100, 17}, {64, 33, 48}, {2, 257, 31}, {37, 300, 65}};
  for (const Case& c : cases) {
    const std::vector<float> w = random_floats(rng, static_cast<size_t>(c.n) * c.k);
    const std::vector<float> b = random_floats(rng, static_cast<size_t>(c.n));
    Program constant = load_bytes(linear_program(c, w, b, false));
    Program general = load_bytes(linear_program(c, w, b, true));
    auto fast = constant.load_method("forward");
    auto slow = general.load_method("forward");
    for (int run = 0; run < 2; ++run) {  // the second run reuses what was folded and packed at load
      const std::vector<float> x = random_floats(rng, static_cast<size_t>(c.m) * c.k);
      const auto out = exec(*fast, {tensor_input(x, {c.m, c.k})});
      const auto ref = exec(*slow, {tensor_input(x, {c.m, c.k}), tensor_input(w, {c.n, c.k}), tensor_input(b, {c.n})});
      ASSERT_EQ(out.size(), 3u);
      expect_near_reference(floats(out[0]), x, w, nullptr, c, "mm");
      expect_near_reference(floats(out[1]), x, w, &b, c, "addmm");
      expect_near_reference(floats(out[2]), x, w, &b, c, "linear");
      for (size_t o = 0; o < 3; ++o) {
        const auto a = floats(out[o]), r = floats(ref[o]);
        for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], r[i], 1e-5 * (1 + c.k)) << "output " << o;
      }
    }
  }
}

// The folded permute's planned memory is shared with a tensor written later in the run: the fold must live in
// memory of its own, or the second run would multiply by the later tensor's bytes.
TEST(ConstantWeights, FoldedResultSurvivesReuseOfItsPlannedMemory) {
  const std::vector<float> w = {1, 2, 3, 4, 5, 6};  // [2, 3]
  format::ProgramWriter writer;
  auto& m = writer.add_method("forward");
  const int32_t x = m.planned_tensor(f32({1, 3}));
  const int32_t wv = m.constant_tensor(f32({2, 3}), format::as_bytes(w));
  const int32_t wt = m.planned_tensor(f32({3, 2}));
  const int32_t y = m.planned_tensor(f32({1, 2}));
  const int32_t scratch = m.planned_alias(wt, f32({3, 2}));  // same bytes as wt
  const int32_t z = m.planned_tensor(f32({3, 2}));
  m.kernel("aten::permute_copy.out", {wv, m.int_list({1, 0}), wt, wt});
  m.kernel("aten::mm.out", {x, wt, y, y});
  m.kernel("aten::mul.Scalar_out", {wt, m.double_value(0.0), scratch, scratch});  // overwrites wt's planned bytes
  m.kernel("aten::add.out", {scratch, scratch, m.int_value(1), z, z});
  m.set_inputs({x});
  m.set_outputs({y});
  Program p = load_bytes(writer.serialize());
  auto method = p.load_method("forward");
  const std::vector<float> in = {1, 1, 1};
  for (int run = 0; run < 3; ++run) {
    EXPECT_EQ(floats(exec(*method, {tensor_input(in, {1, 3})})[0]), (std::vector<float>{6, 15})) << "run " << run;
  }
}

// A permute whose output is a method output, or is written again later, is not folded: each run recomputes it.
TEST(ConstantWeights, PermuteOfAConstantThatIsAnOutputStillRuns) {
  const std::vector<float> w = {1, 2, 3, 4, 5, 6};
  format::ProgramWriter writer;
  auto& m = writer.add_method("forward");
  const int32_t x = m.planned_tensor(f32({3, 2}));
  const int32_t wv = m.constant_tensor(f32({2, 3}), format::as_bytes(w));
  const int32_t wt = m.planned_tensor(f32({3, 2}));
  const int32_t sum = m.planned_tensor(f32({3, 2}));
  m.kernel("aten::permute_copy.out", {wv, m.int_list({1, 0}), wt, wt});
  m.kernel("aten::add.out", {wt, x, m.int_value(1), sum, sum});
  m.kernel("aten::add.out", {sum, x, m.int_value(1), wt, wt});  // wt written again
  m.set_inputs({x});
  m.set_outputs({wt, sum});
  Program p = load_bytes(writer.serialize());
  auto method = p.load_method("forward");
  const std::vector<float> ones(6, 1.0f);
  for (int run = 0; run < 2; ++run) {
    const auto out = exec(*method, {tensor_input(ones, {3, 2})});
    EXPECT_EQ(floats(out[1]), (std::vector<float>{2, 5, 3, 6, 4, 7})) << "run " << run;
    EXPECT_EQ(floats(out[0]), (std::vector<float>{3, 6, 4, 7, 5, 8})) << "run " << run;
  }
}

}  // namespace
}  // namespace etnp::writer_testing
