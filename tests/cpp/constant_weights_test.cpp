// Constant weights: layout changes of constants folded at load (runtime) and matrix products that pack
// constant weights at load (kernels/linalg.cpp + packed_gemm.h), against a double-precision reference and
// against the same program with the weights given as inputs (the general path). A transposed weight that only
// mm and addmm read becomes a view of the constant (no copy); one that other kernels read is copied once.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "etnp/backend.h"
#include "tools/writer/writer.h"
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

/// Runs `fast` (constant weights) and `slow` (the same program with the weights as inputs) on one random input:
/// each of mm, addmm and linear against the reference and against the general path.
void expect_products_match(Method& fast, Method& slow, const Case& c, const std::vector<float>& w,
                           const std::vector<float>& b, std::mt19937& rng) {
  const std::vector<float> x = random_floats(rng, static_cast<size_t>(c.m) * c.k);
  const auto out = exec(fast, {tensor_input(x, {c.m, c.k})});
  const auto ref = exec(slow, {tensor_input(x, {c.m, c.k}), tensor_input(w, {c.n, c.k}), tensor_input(b, {c.n})});
  ASSERT_EQ(out.size(), 3u);
  expect_near_reference(floats(out[0]), x, w, nullptr, c, "mm");
  expect_near_reference(floats(out[1]), x, w, &b, c, "addmm");
  expect_near_reference(floats(out[2]), x, w, &b, c, "linear");
  for (size_t o = 0; o < 3; ++o) {
    const auto a = floats(out[o]), r = floats(ref[o]);
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], r[i], 1e-5 * (1 + c.k)) << "output " << o;
  }
}

/// Two layers that share one weight W [n, k] (a model whose layers are one module): each permutes W and
/// multiplies, y1 = x @ W^T, y2 = y1 @ W^T (k == n).
std::vector<uint8_t> shared_layers_program(int32_t m_rows, int32_t k, const std::vector<float>& w) {
  format::ProgramWriter writer;
  auto& m = writer.add_method("forward");
  const int32_t x = m.planned_tensor(f32({m_rows, k}));
  const int32_t wv = m.constant_tensor(f32({k, k}), format::as_bytes(w));
  const int32_t wt1 = m.planned_tensor(f32({k, k}));
  const int32_t wt2 = m.planned_tensor(f32({k, k}));
  const int32_t y1 = m.planned_tensor(f32({m_rows, k}));
  const int32_t y2 = m.planned_tensor(f32({m_rows, k}));
  m.kernel("aten::permute_copy.out", {wv, m.int_list({1, 0}), wt1, wt1});
  m.kernel("aten::mm.out", {x, wt1, y1, y1});
  m.kernel("aten::permute_copy.out", {wv, m.int_list({1, 0}), wt2, wt2});
  m.kernel("aten::mm.out", {y1, wt2, y2, y2});
  m.set_inputs({x});
  m.set_outputs({y2});
  return writer.serialize();
}

TEST(ConstantWeights, LayersSharingWeightsHoldOnePackingAndNoCopy) {
  std::mt19937 rng(77);
  const int32_t rows = 5, k = 40;
  const std::vector<float> w = random_floats(rng, static_cast<size_t>(k) * k);
  const std::vector<float> x = random_floats(rng, static_cast<size_t>(rows) * k);
  const PackedWeightCacheStats before = packed_weight_cache_stats();
  Program program = load_bytes(shared_layers_program(rows, k, w));
  auto method = program.load_method("forward");
  EXPECT_EQ(method->load_time_bytes(), 0u);  // W^T is a view of W: no copy
  EXPECT_EQ(packed_weight_cache_stats().entries, before.entries + 1);  // one packing
  const auto out = floats(exec(*method, {tensor_input(x, {rows, k})})[0]);
  ASSERT_EQ(out.size(), static_cast<size_t>(rows) * k);
  for (int32_t i = 0; i < rows; ++i) {
    std::vector<double> y1(static_cast<size_t>(k));
    for (int32_t j = 0; j < k; ++j) {
      for (int32_t p = 0; p < k; ++p) y1[j] += double(x[i * k + p]) * w[j * k + p];
    }
    for (int32_t j = 0; j < k; ++j) {
      double ref = 0.0;
      for (int32_t p = 0; p < k; ++p) ref += y1[p] * w[j * k + p];
      ASSERT_NEAR(out[static_cast<size_t>(i) * k + j], ref, 1e-4) << i << "," << j;
    }
  }
  method.reset();
  EXPECT_EQ(packed_weight_cache_stats().entries, before.entries);  // gone with its last user
}

// Products on constant weights, packed at load, except products of one row (a decoding step, a classifier's last
// layer) and of few rows with long sums over large weights, which read the weights where they lie as dot products
// and pack nothing: the rule's edges are one row over 64 KiB of weights, then rows under 16, 1,024 products per
// sum per row, 1 MiB of weights.
TEST(ConstantWeights, PackedProductsMatchTheReferenceAndTheGeneralPath) {
  struct Product {
    Case c;
    bool in_place;
  };
  const Product products[] = {
      {{1, 1, 1}, false},       {{1, 17, 33}, false},   {{5, 3, 15}, false},    {{6, 16, 16}, false},
      {{7, 64, 100}, false},    {{13, 100, 17}, false}, {{64, 33, 48}, false},  {{2, 257, 31}, false},
      {{37, 300, 65}, false},
      {{1, 1280, 1000}, true},   // MobileNetV2's classifier
      {{2, 2048, 160}, true},    // 2 rows, 2,048 products
      {{15, 15360, 20}, true},   // 15 rows, 15 x 1,024 products
      {{2, 1500, 400}, false},   // 2 rows: sums too short
      {{1, 1024, 200}, true},    // one row, 800 KiB of weights
      {{1, 128, 128}, true},     // one row, 64 KiB of weights
      {{1, 127, 128}, false},    // one row, under 64 KiB
      {{2, 17, 33}, false},      // 2 rows, short sums
      {{3, 3072, 80}, false},    // 960 KiB of weights
      {{16, 16384, 16}, false},  // 16 rows
  };
  std::mt19937 rng(1234);
  for (const auto& [c, in_place] : products) {
    const std::vector<float> w = random_floats(rng, static_cast<size_t>(c.n) * c.k);
    const std::vector<float> b = random_floats(rng, static_cast<size_t>(c.n));
    const PackedWeightCacheStats before = packed_weight_cache_stats();
    Program constant = load_bytes(linear_program(c, w, b, false));
    Program general = load_bytes(linear_program(c, w, b, true));
    auto fast = constant.load_method("forward");
    auto slow = general.load_method("forward");
    // Made at load: no copy of the permuted weight (mm and addmm read it as a view of the constant), and the
    // packed weights (n rounded up to whole 16-column panels, plus the bias), in the weight cache: one packing
    // for mm (no bias), one that addmm and linear share (the same weights and bias, the same packed bytes).
    const size_t panel_bytes = static_cast<size_t>(c.k) * ((c.n + 15) / 16 * 16) * sizeof(float);
    EXPECT_EQ(fast->load_time_bytes(), 0u) << "k=" << c.k << " n=" << c.n;
    EXPECT_EQ(packed_weight_cache_stats().entries, before.entries + (in_place ? 0 : 2))
        << "m=" << c.m << " k=" << c.k << " n=" << c.n;
    if (!in_place) {
      EXPECT_GE(packed_weight_cache_stats().bytes, before.bytes + 2 * panel_bytes) << "k=" << c.k << " n=" << c.n;
    }
    EXPECT_EQ(slow->load_time_bytes(), 0u);
    for (int run = 0; run < 2; ++run) {  // the second run reuses what was folded and packed at load
      expect_products_match(*fast, *slow, c, w, b, rng);
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
  EXPECT_EQ(method->load_time_bytes(), w.size() * sizeof(float));  // mul reads it too: a copy, not a view
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

namespace etnp::writer_testing {
namespace {

/// conv2d (3x3, padding 1, `groups`) then an inference batch norm; constants, or the same values as inputs.
std::vector<uint8_t> conv_bn_program(int32_t cin, int32_t cout, int32_t groups, bool conv_bias, bool bn_affine,
                                     const std::vector<std::vector<float>>& params, bool as_inputs,
                                     bool separate_input_memory = true, int32_t h = 5, int32_t w = 6) {
  format::ProgramWriter writer;
  auto& m = writer.add_method("forward");
  // The input in an arena of its own: the fused convolution writes the batch norm's output, which must not
  // share the input's bytes (ConvolutionIsNotFusedOverItsOwnInput covers the case where it does).
  const int32_t x = m.planned_tensor(f32({1, cin, h, w}), separate_input_memory ? 2 : 1);
  auto param = [&](size_t i, std::vector<int32_t> sizes) {
    return as_inputs ? m.planned_tensor(f32(std::move(sizes))) : m.constant_tensor(f32(std::move(sizes)), format::as_bytes(params[i]));
  };
  const int32_t wt = param(0, {cout, cin / groups, 3, 3});
  const int32_t b = conv_bias ? param(1, {cout}) : m.none();
  const int32_t gamma = bn_affine ? param(2, {cout}) : m.none();
  const int32_t beta = bn_affine ? param(3, {cout}) : m.none();
  const int32_t mean = param(4, {cout});
  const int32_t var = param(5, {cout});
  const int32_t conv_out = m.planned_tensor(f32({1, cout, h, w}));
  const int32_t out = m.planned_tensor(f32({1, cout, h, w}));
  const int32_t save_mean = m.planned_tensor(f32({0}));
  const int32_t save_invstd = m.planned_tensor(f32({0}));
  m.kernel("aten::convolution.out", {x, wt, b, m.int_list({1, 1}), m.int_list({1, 1}), m.int_list({1, 1}),
                                     m.bool_value(false), m.int_list({0, 0}), m.int_value(groups), conv_out, conv_out});
  m.kernel("aten::_native_batch_norm_legit_no_training.out",
           {conv_out, gamma, beta, mean, var, m.double_value(0.1), m.double_value(1e-5), out, save_mean, save_invstd,
            out});
  std::vector<int32_t> inputs = {x};
  if (as_inputs) {
    inputs.push_back(wt);
    if (conv_bias) inputs.push_back(b);
    if (bn_affine) {
      inputs.push_back(gamma);
      inputs.push_back(beta);
    }
    inputs.push_back(mean);
    inputs.push_back(var);
  }
  m.set_inputs(inputs);
  m.set_outputs({out});
  return writer.serialize();
}

/// A 3x3 convolution's weights [cout, cin / groups, 3, 3], then cout values each of its bias and of a batch
/// norm's gamma, beta, mean and variance (positive).
std::vector<std::vector<float>> conv_bn_params(std::mt19937& rng, int32_t cin, int32_t cout, int32_t groups) {
  std::vector<std::vector<float>> params = {random_floats(rng, static_cast<size_t>(cout) * (cin / groups) * 9)};
  for (int i = 0; i < 5; ++i) params.push_back(random_floats(rng, static_cast<size_t>(cout)));
  for (float& v : params[5]) v = std::abs(v) + 0.1f;  // variances
  return params;
}

TEST(ConstantWeights, BatchNormFoldedIntoConvolutionMatchesTheUnfoldedPair) {
  std::mt19937 rng(7);
  // 5x6 maps, and 3x3 ones with 512 -> 64 channels: fewer pixels than a GEMM tile has columns, (one group) sums
  // of 4,608 products and 1.2 MB of weights, the dot products on the weights where they lie.
  for (const auto& [h, w] : {std::pair{5, 6}, std::pair{3, 3}}) {
    for (int32_t groups : {1, 4}) {
      for (bool conv_bias : {false, true}) {
        for (bool bn_affine : {false, true}) {
          const int32_t cin = h == 3 ? 512 : 4, cout = h == 3 ? 64 : 8;
          const std::vector<std::vector<float>> params = conv_bn_params(rng, cin, cout, groups);
          LoadOptions profiled;
          profiled.enable_profiling = true;
          Program folded = load_bytes(
              conv_bn_program(cin, cout, groups, conv_bias, bn_affine, params, false, true, h, w), profiled);
          Program plain =
              load_bytes(conv_bn_program(cin, cout, groups, conv_bias, bn_affine, params, true, true, h, w));
          auto a = folded.load_method("forward");
          auto b = plain.load_method("forward");
          const std::vector<float> x = random_floats(rng, static_cast<size_t>(cin) * h * w);
          std::vector<Value> in_b = {tensor_input(x, {1, cin, h, w}),
                                     tensor_input(params[0], {cout, cin / groups, 3, 3})};
          if (conv_bias) in_b.push_back(tensor_input(params[1], {cout}));
          if (bn_affine) {
            in_b.push_back(tensor_input(params[2], {cout}));
            in_b.push_back(tensor_input(params[3], {cout}));
          }
          in_b.push_back(tensor_input(params[4], {cout}));
          in_b.push_back(tensor_input(params[5], {cout}));
          // Double-precision reference of the pair.
          std::vector<double> ref(static_cast<size_t>(cout) * h * w);
          const int32_t cin_g = cin / groups, cout_g = cout / groups;
          for (int32_t oc = 0; oc < cout; ++oc) {
            const double scale = (bn_affine ? params[2][oc] : 1.0) / std::sqrt(double(params[5][oc]) + 1e-5);
            for (int32_t y = 0; y < h; ++y) {
              for (int32_t xx = 0; xx < w; ++xx) {
                double acc = conv_bias ? params[1][oc] : 0.0;
                for (int32_t icg = 0; icg < cin_g; ++icg) {
                  const int32_t ic = (oc / cout_g) * cin_g + icg;
                  for (int32_t kh = 0; kh < 3; ++kh) {
                    for (int32_t kw = 0; kw < 3; ++kw) {
                      const int32_t iy = y + kh - 1, ix = xx + kw - 1;
                      if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                      acc += double(x[(ic * h + iy) * w + ix]) * params[0][((oc * cin_g + icg) * 3 + kh) * 3 + kw];
                    }
                  }
                }
                ref[(oc * h + y) * w + xx] = (acc - params[4][oc]) * scale + (bn_affine ? params[3][oc] : 0.0);
              }
            }
          }
          for (int run = 0; run < 2; ++run) {
            const auto want = floats(b->execute(in_b)[0]);
            const auto got = floats(exec(*a, {tensor_input(x, {1, cin, h, w})})[0]);
            ASSERT_EQ(got.size(), ref.size());
            ASSERT_EQ(want.size(), ref.size());
            for (size_t i = 0; i < got.size(); ++i) {
              ASSERT_NEAR(want[i], ref[i], 1e-4 * (1 + std::abs(ref[i])))
                  << "unfolded, map " << h << "x" << w << ", groups " << groups << " at " << i;
              ASSERT_NEAR(got[i], ref[i], 1e-4 * (1 + std::abs(ref[i])))
                  << "folded, map " << h << "x" << w << ", groups " << groups << " conv_bias " << conv_bias
                  << " bn_affine " << bn_affine << " at " << i;
            }
          }
          // The batch norm ran once, at load.
          const auto& events = a->profile_events();
          ASSERT_EQ(events.size(), 4u);  // 2 runs x 2 instructions
          EXPECT_EQ(events[1].name, "aten::_native_batch_norm_legit_no_training.out");
          EXPECT_TRUE(events[1].folded);
          EXPECT_FALSE(events[0].folded);
        }
      }
    }
  }
}

TEST(ConstantWeights, ConvolutionIsNotFusedOverItsOwnInput) {
  // One arena: the planner gives the batch norm's output the input's bytes (their lifetimes do not meet).
  std::mt19937 rng(8);
  const int32_t cin = 4, cout = 4;
  const std::vector<std::vector<float>> params = conv_bn_params(rng, cin, cout, 1);
  LoadOptions profiled;
  profiled.enable_profiling = true;
  Program shared = load_bytes(conv_bn_program(cin, cout, 1, true, true, params, false, false), profiled);
  Program separate = load_bytes(conv_bn_program(cin, cout, 1, true, true, params, false, true));
  auto a = shared.load_method("forward");
  auto b = separate.load_method("forward");
  const std::vector<float> x = random_floats(rng, static_cast<size_t>(cin) * 30);
  const auto got = floats(exec(*a, {tensor_input(x, {1, cin, 5, 6})})[0]);
  const auto want = floats(exec(*b, {tensor_input(x, {1, cin, 5, 6})})[0]);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-4f * (1 + std::abs(want[i]))) << i;
  ASSERT_EQ(a->profile_events().size(), 2u);
  EXPECT_FALSE(a->profile_events()[1].folded);
}

/// conv2d (3x3, padding 1, `groups`, with a bias), optionally an inference batch norm, then an activation:
/// relu, hardtanh(0, 6), clamp(min -0.25) or clamp(max 0.5). Constants, or the same values as inputs (nothing
/// fuses then: the weights are not constant).
std::vector<uint8_t> conv_act_program(int32_t cin, int32_t cout, int32_t groups, bool with_bn, int act,
                                      const std::vector<std::vector<float>>& params, bool as_inputs) {
  format::ProgramWriter writer;
  auto& m = writer.add_method("forward");
  const int32_t x = m.planned_tensor(f32({1, cin, 5, 6}), 2);
  auto param = [&](size_t i, std::vector<int32_t> sizes) {
    return as_inputs ? m.planned_tensor(f32(std::move(sizes))) : m.constant_tensor(f32(std::move(sizes)), format::as_bytes(params[i]));
  };
  const int32_t w = param(0, {cout, cin / groups, 3, 3});
  const int32_t b = param(1, {cout});
  int32_t y = m.planned_tensor(f32({1, cout, 5, 6}));
  m.kernel("aten::convolution.out", {x, w, b, m.int_list({1, 1}), m.int_list({1, 1}), m.int_list({1, 1}),
                                     m.bool_value(false), m.int_list({0, 0}), m.int_value(groups), y, y});
  std::vector<int32_t> inputs = {x, w, b};
  if (with_bn) {
    const int32_t gamma = param(2, {cout}), beta = param(3, {cout}), mean = param(4, {cout}), var = param(5, {cout});
    const int32_t normed = m.planned_tensor(f32({1, cout, 5, 6}));
    const int32_t save_mean = m.planned_tensor(f32({0})), save_invstd = m.planned_tensor(f32({0}));
    m.kernel("aten::_native_batch_norm_legit_no_training.out",
             {y, gamma, beta, mean, var, m.double_value(0.1), m.double_value(1e-5), normed, save_mean, save_invstd,
              normed});
    inputs.insert(inputs.end(), {gamma, beta, mean, var});
    y = normed;
  }
  const int32_t out = m.planned_tensor(f32({1, cout, 5, 6}));
  if (act == 0) m.kernel("aten::relu.out", {y, out, out});
  if (act == 1) m.kernel("aten::hardtanh.out", {y, m.int_value(0), m.double_value(6.0), out, out});
  if (act == 2) m.kernel("aten::clamp.out", {y, m.double_value(-0.25), m.none(), out, out});
  if (act == 3) m.kernel("aten::clamp.out", {y, m.none(), m.double_value(0.5), out, out});
  if (!as_inputs) inputs.resize(1);
  m.set_inputs(inputs);
  m.set_outputs({out});
  return writer.serialize();
}

// A convolution and the activation after it (and a batch norm between them) run as one fused call, NaN kept.
// Without a batch norm, grouped: the same bits as the separate calls with the weights as inputs (the clamp after
// the same sums); with one group the constant weights take the NHWC engines, which sum the taps in another order
// (float rounding apart, as with a batch norm). Regular and grouped convolutions.
TEST(ConstantWeights, ActivationsAfterConvolutionsRunInTheirEpilogue) {
  std::mt19937 rng(11);
  const char* acts[] = {"aten::relu.out", "aten::hardtanh.out", "aten::clamp.out", "aten::clamp.out"};
  for (int32_t groups : {1, 4}) {
    for (bool with_bn : {false, true}) {
      for (int act = 0; act < 4; ++act) {
        const int32_t cin = 4, cout = 8;
        std::vector<std::vector<float>> params = conv_bn_params(rng, cin, cout, groups);
        for (float& v : params[0]) v *= 4.0f;  // outputs past hardtanh's 6 as well
        LoadOptions profiled;
        profiled.enable_profiling = true;
        Program fused = load_bytes(conv_act_program(cin, cout, groups, with_bn, act, params, false), profiled);
        Program plain = load_bytes(conv_act_program(cin, cout, groups, with_bn, act, params, true));
        auto a = fused.load_method("forward");
        auto b = plain.load_method("forward");
        std::vector<float> x = random_floats(rng, static_cast<size_t>(cin) * 30);
        for (float& v : x) v *= 3.0f;
        x[7] = std::numeric_limits<float>::quiet_NaN();  // NaN stays NaN through every clamp
        std::vector<Value> in_b = {tensor_input(x, {1, cin, 5, 6})};
        for (size_t i = 0; i < (with_bn ? 6u : 2u); ++i) {
          in_b.push_back(tensor_input(params[i], i == 0 ? std::vector<int64_t>{cout, cin / groups, 3, 3}
                                                        : std::vector<int64_t>{cout}));
        }
        const std::string where = std::string(acts[act]) + " " + std::to_string(act) + ", groups " +
                                  std::to_string(groups) + (with_bn ? ", batch norm" : "");
        for (int run = 0; run < 2; ++run) {
          const auto got = floats(exec(*a, {tensor_input(x, {1, cin, 5, 6})})[0]);
          const auto want = floats(b->execute(in_b)[0]);
          ASSERT_EQ(got.size(), want.size());
          size_t nans = 0;
          for (size_t i = 0; i < got.size(); ++i) {
            ASSERT_EQ(std::isnan(got[i]), std::isnan(want[i])) << where << " at " << i;
            nans += std::isnan(got[i]) ? 1 : 0;
            if (std::isnan(want[i])) continue;
            if (with_bn || groups == 1) {
              ASSERT_NEAR(got[i], want[i], 1e-4 * (1 + std::abs(want[i]))) << where << " at " << i;
            } else {
              ASSERT_EQ(got[i], want[i]) << where << " at " << i;
            }
          }
          EXPECT_GT(nans, 0u) << where;
        }
        // The activation (and the batch norm) ran once, at load: folded into the convolution.
        const auto& events = a->profile_events();
        const size_t calls = with_bn ? 3 : 2;
        ASSERT_EQ(events.size(), 2 * calls) << where;
        EXPECT_EQ(events[0].name, "aten::convolution.out");
        EXPECT_FALSE(events[0].folded);
        for (size_t i = 1; i < calls; ++i) EXPECT_TRUE(events[i].folded) << where << " instruction " << i;
        EXPECT_EQ(events[calls - 1].name, acts[act]);
      }
    }
  }
}

/// One convolution: input [n, cin, (h,) w], weight [cout, cin / groups, (kh,) kw], bias; constants or inputs.
struct ConvCase {
  int32_t n, cin, h, w, cout, kh, kw, sh, sw, ph, pw, dh, dw, groups;
  bool one_d = false;
  int32_t oh() const { return (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1; }
  int32_t ow() const { return (w + 2 * pw - dw * (kw - 1) - 1) / sw + 1; }
  std::vector<int64_t> in_shape() const {
    return one_d ? std::vector<int64_t>{n, cin, w} : std::vector<int64_t>{n, cin, h, w};
  }
};

std::vector<uint8_t> conv_program(const ConvCase& c, const std::vector<float>& w, const std::vector<float>& b,
                                  bool as_inputs) {
  format::ProgramWriter writer;
  auto& m = writer.add_method("forward");
  auto dims = [&](int32_t a, int32_t b2, int32_t h, int32_t w2) {
    return c.one_d ? std::vector<int32_t>{a, b2, w2} : std::vector<int32_t>{a, b2, h, w2};
  };
  auto pair = [&](int32_t y, int32_t x) { return c.one_d ? m.int_list({x}) : m.int_list({y, x}); };
  const int32_t x = m.planned_tensor(f32(dims(c.n, c.cin, c.h, c.w)));
  const std::vector<int32_t> w_sizes = dims(c.cout, c.cin / c.groups, c.kh, c.kw);
  const int32_t wv = as_inputs ? m.planned_tensor(f32(w_sizes)) : m.constant_tensor(f32(w_sizes), format::as_bytes(w));
  const int32_t bv = as_inputs ? m.planned_tensor(f32({c.cout})) : m.constant_tensor(f32({c.cout}), format::as_bytes(b));
  const int32_t out = m.planned_tensor(f32(dims(c.n, c.cout, c.oh(), c.ow())));
  m.kernel("aten::convolution.out", {x, wv, bv, pair(c.sh, c.sw), pair(c.ph, c.pw), pair(c.dh, c.dw),
                                     m.bool_value(false), pair(0, 0), m.int_value(c.groups), out, out});
  m.set_inputs(as_inputs ? std::vector<int32_t>{x, wv, bv} : std::vector<int32_t>{x});
  m.set_outputs({out});
  return writer.serialize();
}

// Convolutions with constant weights run on weights packed at load for the NHWC engines (one group: the indirect
// GEMM; depthwise: compute::DepthwiseConv), the layout changed around them; the same program with the weights as
// inputs runs the NCHW paths. Both match the double-precision definition, over strides, padding, dilation, odd
// channel counts, batches, 1-D inputs, a larger map, and one-group convolutions with fewer than 16 output channels
// (on 16+ pixels) that stay NCHW; a
// NaN input reaches exactly the outputs whose windows hold it.
TEST(ConstantWeights, ConvolutionsOnPackedWeightsMatchTheDefinitionAndTheGeneralPath) {
  const ConvCase cases[] = {
      {1, 5, 6, 7, 17, 1, 1, 1, 1, 0, 0, 1, 1, 1},     // pointwise
      {2, 16, 9, 9, 24, 1, 1, 1, 1, 0, 0, 1, 1, 1},    // pointwise, batch 2
      {1, 3, 11, 10, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1},   // a stem: 3 channels, stride 2
      {1, 8, 9, 8, 20, 3, 3, 1, 1, 2, 2, 2, 2, 1},     // dilated
      {1, 6, 7, 9, 19, 5, 3, 1, 2, 2, 1, 1, 1, 1},     // 5x3, strides (1, 2)
      {1, 4, 2, 2, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1},      // 2x2 map: most taps read padding; 8 channels
      {1, 3, 6, 6, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1},      // 8 channels on 36 pixels: NCHW
      {1, 16, 8, 8, 16, 3, 3, 1, 1, 1, 1, 1, 1, 16},   // depthwise
      {2, 24, 9, 7, 24, 3, 3, 2, 2, 1, 1, 1, 1, 24},   // depthwise, stride 2, batch 2
      {1, 3, 6, 9, 3, 3, 3, 1, 1, 1, 1, 1, 1, 3},      // depthwise on 3 channels
      {1, 32, 7, 7, 32, 5, 5, 1, 1, 2, 2, 1, 1, 32},   // depthwise 5x5
      {1, 4, 1, 40, 18, 1, 5, 1, 2, 0, 2, 1, 1, 1, true},  // 1-D
      {1, 4, 50, 50, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1},    // 2,500 output pixels, 8 channels: NCHW
      {1, 4, 50, 50, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1},   // 2,500 output pixels, 16 channels
      {1, 64, 2, 2, 37, 3, 3, 1, 1, 1, 1, 1, 1, 1},    // 2x2 map, small weights: packed
      // Fewer than 16 output pixels, sums of 4,096 products or more, 1 MiB of weights or more: dot products on
      // the weights where they lie (a weight row left over after blocks of 3, pixel rows of 4, 4 and 1, k = 4131
      // not a multiple of 8, a batch of 2, a 1x1, two groups, 1-D).
      {1, 512, 2, 2, 259, 3, 3, 1, 1, 1, 1, 1, 1, 1},
      {2, 459, 5, 5, 64, 3, 3, 2, 2, 1, 1, 1, 1, 1},
      {1, 4096, 3, 3, 64, 1, 1, 1, 1, 0, 0, 1, 1, 1},
      {1, 1024, 3, 3, 64, 3, 3, 1, 1, 1, 1, 1, 1, 2},
      {1, 1024, 1, 12, 64, 1, 5, 1, 1, 0, 2, 1, 1, 1, true},
      {1, 256, 2, 2, 512, 3, 3, 1, 1, 1, 1, 1, 1, 1},  // 2,304 products: packed
      // Atrous on maps smaller than the dilation: only the taps that reach the input are packed (DeepLabV3's
      // ASPP: the centre, as a pointwise product; a 1x3 rectangle, through the indirect GEMM), unless the
      // first live tap lies past the padding (one output pixel, its only live tap the middle one): packed whole.
      {1, 16, 4, 4, 20, 3, 3, 1, 1, 12, 12, 12, 12, 1},
      {1, 8, 3, 6, 16, 3, 3, 1, 1, 3, 3, 3, 3, 1},
      {1, 8, 5, 5, 16, 3, 3, 1, 1, 1, 1, 3, 3, 1},
  };
  std::mt19937 rng(5);
  for (const ConvCase& c : cases) {
    const std::string where = "cin " + std::to_string(c.cin) + " cout " + std::to_string(c.cout) + " kernel " +
                              std::to_string(c.kh) + "x" + std::to_string(c.kw) + " groups " + std::to_string(c.groups) +
                              " map " + std::to_string(c.h) + "x" + std::to_string(c.w);
    const int32_t cin_g = c.cin / c.groups, cout_g = c.cout / c.groups;
    const std::vector<float> w = random_floats(rng, static_cast<size_t>(c.cout) * cin_g * c.kh * c.kw);
    const std::vector<float> b = random_floats(rng, static_cast<size_t>(c.cout));
    std::vector<float> x = random_floats(rng, static_cast<size_t>(c.n) * c.cin * c.h * c.w);
    const size_t nan_at = x.size() / 3;
    const PackedWeightCacheStats before = packed_weight_cache_stats();
    Program packed = load_bytes(conv_program(c, w, b, false));
    Program general = load_bytes(conv_program(c, w, b, true));
    auto a = packed.load_method("forward");
    auto g = general.load_method("forward");
    // The route's rule (kernels/conv.cpp, pack_nhwc_conv): depthwise ones are packed; one group is packed unless
    // its output channels are too few to fill the GEMM's tiles where the map would, or it runs as dot products
    // (a map smaller than a tile, sums of 4,096 products or more, 1 MiB of weights or more).
    const int32_t pixels = c.oh() * c.ow();
    const bool depthwise = c.groups == c.cin && cout_g == 1;
    const bool dots = pixels < 16 && cin_g * c.kh * c.kw >= 4096 && w.size() * sizeof(float) >= (size_t{1} << 20);
    const bool nhwc = depthwise || (c.groups == 1 && (c.cout >= 16 || pixels < 16) && !dots);
    EXPECT_EQ(packed_weight_cache_stats().entries, before.entries + (nhwc ? 1 : 0)) << where;
    // Trimmed where some kernel row or column reads only padding for every output and the first live one does
    // not start past the padding: the packing (panels padded to 16 columns) is then smaller than the weights.
    // (live[t]: some output reads the input through tap t.)
    auto live_taps = [](int32_t outs, int32_t kernel, int32_t stride, int32_t pad, int32_t dilation, int32_t in) {
      std::vector<bool> live(static_cast<size_t>(kernel));
      for (int32_t o = 0; o < outs; ++o) {
        for (int32_t t = 0; t < kernel; ++t) {
          const int32_t at = o * stride - pad + t * dilation;
          live[static_cast<size_t>(t)] = live[static_cast<size_t>(t)] || (at >= 0 && at < in);
        }
      }
      return live;
    };
    const std::vector<bool> rows = live_taps(c.oh(), c.kh, c.sh, c.ph, c.dh, c.h);
    const std::vector<bool> cols = live_taps(c.ow(), c.kw, c.sw, c.pw, c.dw, c.w);
    auto first = [](const std::vector<bool>& v) { return std::find(v.begin(), v.end(), true) - v.begin(); };
    const bool some_dead = std::count(rows.begin(), rows.end(), false) + std::count(cols.begin(), cols.end(), false);
    const bool trimmed = c.groups == 1 && nhwc && some_dead && first(rows) * c.dh <= c.ph && first(cols) * c.dw <= c.pw;
    if (nhwc && c.groups == 1) {
      const size_t grew = packed_weight_cache_stats().bytes - before.bytes;
      if (trimmed) {
        EXPECT_LT(grew, w.size() * sizeof(float)) << where << ": the dead taps' weights were packed";
      } else {
        EXPECT_GE(grew, w.size() * sizeof(float)) << where;
      }
    }
    for (int with_nan = 0; with_nan < 2; ++with_nan) {
      if (with_nan == 1) x[nan_at] = std::numeric_limits<float>::quiet_NaN();
      const auto got = floats(exec(*a, {tensor_input(x, c.in_shape())})[0]);
      const std::vector<int64_t> w_shape = c.one_d ? std::vector<int64_t>{c.cout, cin_g, c.kw}
                                                   : std::vector<int64_t>{c.cout, cin_g, c.kh, c.kw};
      const auto want = floats(exec(*g, {tensor_input(x, c.in_shape()), tensor_input(w, w_shape),
                                           tensor_input(b, {c.cout})})[0]);
      ASSERT_EQ(got.size(), static_cast<size_t>(c.n) * c.cout * c.oh() * c.ow()) << where;
      ASSERT_EQ(want.size(), got.size()) << where;
      size_t i = 0;
      for (int32_t n = 0; n < c.n; ++n) {
        for (int32_t oc = 0; oc < c.cout; ++oc) {
          for (int32_t oy = 0; oy < c.oh(); ++oy) {
            for (int32_t ox = 0; ox < c.ow(); ++ox, ++i) {
              double ref = b[oc], magnitude = std::abs(b[oc]);
              bool nan = false;
              const int32_t group = oc / cout_g;
              for (int32_t ic = 0; ic < cin_g; ++ic) {
                for (int32_t ky = 0; ky < c.kh; ++ky) {
                  for (int32_t kx = 0; kx < c.kw; ++kx) {
                    const int32_t iy = oy * c.sh - c.ph + ky * c.dh, ix = ox * c.sw - c.pw + kx * c.dw;
                    if (iy < 0 || iy >= c.h || ix < 0 || ix >= c.w) continue;
                    const size_t at = ((static_cast<size_t>(n) * c.cin + group * cin_g + ic) * c.h + iy) * c.w + ix;
                    const double term = double(x[at]) * w[((static_cast<size_t>(oc) * cin_g + ic) * c.kh + ky) * c.kw + kx];
                    nan = nan || std::isnan(x[at]);
                    ref += term;
                    magnitude += std::abs(term);
                  }
                }
              }
              ASSERT_EQ(std::isnan(got[i]), nan) << where << " at " << i;
              ASSERT_EQ(std::isnan(want[i]), nan) << where << " at " << i;
              if (nan) continue;
              ASSERT_NEAR(got[i], ref, 1e-6 * (1 + magnitude)) << where << " at " << i;
              ASSERT_NEAR(want[i], ref, 1e-6 * (1 + magnitude)) << where << " at " << i;
            }
          }
        }
      }
    }
  }
}

/// How conv_relu_over_input_program plans y and what else its buffer holds.
enum class OverInput {
  Apart,         ///< y in a buffer of its own: c lives on until y's convolution reads it
  YOnC,          ///< y planned on c's bytes, and no other room: c cannot live on
  YOnCRoomLater, ///< y on c's bytes; s = neg(y) in a buffer of its own, free until then: c can move there
  YOnCRoomTaken, ///< y on c's bytes; s = neg(u) in a buffer of its own, read after y: no room
};

/// u [1, 16, 6, 6] -> neg -> x -> conv 3x3 -> c -> relu -> r -> conv 1x1 -> y, r planned on x's bytes (as a
/// planner does once x's last reader has run), so the convolution cannot write r while it reads x; the method
/// returns y, or (with s) o = s + y in a buffer of its own. The weights are constants, or method inputs after u
/// (no fusion).
std::vector<uint8_t> conv_relu_over_input_program(const std::vector<std::vector<float>>& p, bool as_inputs,
                                                  OverInput plan) {
  format::ProgramWriter writer;
  auto& m = writer.add_method("forward");
  const TensorSpec spec = f32({1, 16, 6, 6});
  const int32_t u = m.planned_tensor(spec);
  std::vector<int32_t> inputs = {u};
  const std::vector<std::vector<int32_t>> sizes = {{16, 16, 3, 3}, {16}, {16, 16, 1, 1}, {16}};
  std::vector<int32_t> params;
  for (size_t i = 0; i < p.size(); ++i) {
    params.push_back(as_inputs ? m.planned_tensor(f32(sizes[i])) : m.constant_tensor(f32(sizes[i]), format::as_bytes(p[i])));
    if (as_inputs) inputs.push_back(params.back());
  }
  const int32_t x = m.planned_tensor(spec);
  const int32_t c = m.planned_tensor(spec);
  const int32_t r = m.planned_alias(x, spec);
  const int32_t y = plan == OverInput::Apart ? m.planned_tensor(spec, 2) : m.planned_alias(c, spec);
  const bool room = plan == OverInput::YOnCRoomLater || plan == OverInput::YOnCRoomTaken;
  const int32_t s = room ? m.planned_tensor(spec, 3) : -1;
  auto conv = [&](int32_t in, int32_t w, int32_t b, int32_t pad, int32_t out) {
    m.kernel("aten::convolution.out", {in, w, b, m.int_list({1, 1}), m.int_list({pad, pad}), m.int_list({1, 1}),
                                       m.bool_value(false), m.int_list({0, 0}), m.int_value(1), out, out});
  };
  m.kernel("aten::neg.out", {u, x, x});
  if (plan == OverInput::YOnCRoomTaken) m.kernel("aten::neg.out", {u, s, s});
  conv(x, params[0], params[1], 1, c);
  m.kernel("aten::relu.out", {c, r, r});
  conv(r, params[2], params[3], 0, y);
  if (plan == OverInput::YOnCRoomLater) m.kernel("aten::neg.out", {y, s, s});
  int32_t result = y;
  if (room) {
    result = m.planned_tensor(spec, 2);
    m.kernel("aten::add.out", {s, y, m.int_value(1), result, result});
  }
  m.set_inputs(inputs);
  m.set_outputs({result});
  return writer.serialize();
}

// An activation whose output the plan put on the convolution's input bytes still runs in the convolution's
// epilogue: the convolution writes its own output and the activation's reader reads that (re-homed), unless
// something else uses those bytes before that reader has run; then the output moves to planned bytes nothing
// live uses meanwhile, where there are such. Either way the result is the unfused calls'.
TEST(ConstantWeights, ActivationPlannedOnTheConvolutionInputFoldsThroughItsOwnOutput) {
  std::mt19937 rng(29);
  std::vector<std::vector<float>> params;
  for (size_t n : {16 * 16 * 9, 16, 16 * 16, 16}) params.push_back(random_floats(rng, n));
  const std::vector<float> u = random_floats(rng, 16 * 36);
  for (OverInput plan : {OverInput::Apart, OverInput::YOnC, OverInput::YOnCRoomLater, OverInput::YOnCRoomTaken}) {
    const int variant = static_cast<int>(plan);
    LoadOptions profiled;
    profiled.enable_profiling = true;
    Program fused = load_bytes(conv_relu_over_input_program(params, false, plan), profiled);
    Program plain = load_bytes(conv_relu_over_input_program(params, true, plan));
    auto a = fused.load_method("forward");
    auto b = plain.load_method("forward");
    std::vector<Value> in_b = {tensor_input(u, {1, 16, 6, 6})};
    const std::vector<std::vector<int64_t>> shapes = {{16, 16, 3, 3}, {16}, {16, 16, 1, 1}, {16}};
    for (size_t i = 0; i < params.size(); ++i) in_b.push_back(tensor_input(params[i], shapes[i]));
    for (int run = 0; run < 2; ++run) {
      const auto got = floats(exec(*a, {tensor_input(u, {1, 16, 6, 6})})[0]);
      const auto want = floats(b->execute(in_b)[0]);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 1e-4 * (1 + std::abs(want[i]))) << "plan " << variant << " at " << i;
      }
    }
    const auto& events = a->profile_events();
    const auto relu = std::ranges::find(events, std::string("aten::relu.out"), &ProfileEvent::name);
    ASSERT_NE(relu, events.end());
    EXPECT_EQ(relu->folded, plan == OverInput::Apart || plan == OverInput::YOnCRoomLater) << "plan " << variant;
  }
}

/// x [1, 8, 7, 6] -> conv 3x3 (16) -> relu -> y1 -> conv 1x1 (12) -> y2 -> depthwise 3x3 (12) -> y3, and, by
/// `shape`: 0 nothing else; 1 y1 also a method output; 2 y2 also read by an add (z = y2 + y2, an output); 3 no
/// relu, y1 laid out channels-last (the program's dim order).
std::vector<uint8_t> conv_chain_program(const std::vector<std::vector<float>>& p, bool as_inputs, int shape) {
  format::ProgramWriter writer;
  auto& m = writer.add_method("forward");
  const int32_t x = m.planned_tensor(f32({1, 8, 7, 6}), 2);
  std::vector<int32_t> params;
  const std::vector<std::vector<int32_t>> sizes = {{16, 8, 3, 3}, {16}, {12, 16, 1, 1}, {12}, {12, 1, 3, 3}, {12}};
  for (size_t i = 0; i < p.size(); ++i) {
    params.push_back(as_inputs ? m.planned_tensor(f32(sizes[i])) : m.constant_tensor(f32(sizes[i]), format::as_bytes(p[i])));
  }
  TensorSpec y1_spec = f32({1, 16, 7, 6});
  if (shape == 3) y1_spec.dim_order = {0, 2, 3, 1};
  const int32_t c1 = m.planned_tensor(y1_spec), y1 = m.planned_tensor(y1_spec);
  const int32_t y2 = m.planned_tensor(f32({1, 12, 7, 6})), y3 = m.planned_tensor(f32({1, 12, 7, 6}));
  const int32_t z = m.planned_tensor(f32({1, 12, 7, 6}));
  auto conv = [&](int32_t in, int32_t w, int32_t b, int32_t pad, int32_t groups, int32_t out) {
    m.kernel("aten::convolution.out", {in, w, b, m.int_list({1, 1}), m.int_list({pad, pad}), m.int_list({1, 1}),
                                       m.bool_value(false), m.int_list({0, 0}), m.int_value(groups), out, out});
  };
  if (shape == 3) {
    conv(x, params[0], params[1], 1, 1, y1);  // straight into the next convolution's channels-last input
  } else {
    conv(x, params[0], params[1], 1, 1, c1);
    m.kernel("aten::relu.out", {c1, y1, y1});
  }
  conv(y1, params[2], params[3], 0, 1, y2);
  conv(y2, params[4], params[5], 1, 12, y3);
  std::vector<int32_t> outputs = {y3};
  if (shape == 1) outputs.push_back(y1);
  if (shape == 2) {
    m.kernel("aten::add.out", {y2, y2, m.int_value(1), z, z});
    outputs.push_back(z);
  }
  std::vector<int32_t> inputs = {x};
  if (as_inputs) inputs.insert(inputs.end(), params.begin(), params.end());
  m.set_inputs(inputs);
  m.set_outputs(outputs);
  return writer.serialize();
}

// Convolutions on packed weights that feed each other pass NHWC bytes between them (no transposes, paired at
// load): the outputs match the NCHW paths', and where a paired tensor would be seen elsewhere (a method output,
// an add reading it) it stays NCHW and correct; a convolution writing a channels-last tensor keeps the NCHW paths.
TEST(ConstantWeights, ChainedConvolutionsOnPackedWeightsMatchTheGeneralPath) {
  std::mt19937 rng(21);
  const std::vector<size_t> counts = {16 * 8 * 9, 16, 12 * 16, 12, 12 * 9, 12};
  std::vector<std::vector<float>> params;
  for (size_t n : counts) params.push_back(random_floats(rng, n));
  const std::vector<float> x = random_floats(rng, 8 * 7 * 6);
  for (int shape = 0; shape < 4; ++shape) {
    Program packed = load_bytes(conv_chain_program(params, false, shape));
    Program general = load_bytes(conv_chain_program(params, true, shape));
    auto a = packed.load_method("forward");
    auto g = general.load_method("forward");
    std::vector<Value> in_g = {tensor_input(x, {1, 8, 7, 6})};
    const std::vector<std::vector<int64_t>> shapes = {{16, 8, 3, 3}, {16}, {12, 16, 1, 1}, {12}, {12, 1, 3, 3}, {12}};
    for (size_t i = 0; i < params.size(); ++i) in_g.push_back(tensor_input(params[i], shapes[i]));
    for (int run = 0; run < 2; ++run) {
      const auto got = exec(*a, {tensor_input(x, {1, 8, 7, 6})});
      const auto want = exec(*g, in_g);
      ASSERT_EQ(got.size(), want.size());
      for (size_t o = 0; o < got.size(); ++o) {
        const auto gv = floats(got[o]), wv = floats(want[o]);
        ASSERT_EQ(gv.size(), wv.size());
        for (size_t i = 0; i < gv.size(); ++i) {
          ASSERT_NEAR(gv[i], wv[i], 1e-4 * (1 + std::abs(wv[i]))) << "shape " << shape << " output " << o << " at " << i;
        }
      }
    }
  }
}

/// The outputs of a load-time fusion's test program: y alone; y and the chain's intermediate `mid`
/// (`also_output`); or, `listed`, cat([y, mid]) along dim 0 (`cat_shape`), which reads `mid` through a tensor list.
void set_fusion_outputs(format::MethodWriter& m, int32_t y, int32_t mid, bool also_output, bool listed,
                        std::vector<int32_t> cat_shape) {
  if (listed) {
    const int32_t both = m.planned_tensor(f32(std::move(cat_shape)));
    m.kernel("aten::cat.out", {m.tensor_list({y, mid}), m.int_value(0), both, both});
    m.set_outputs({both});
  } else {
    m.set_outputs(also_output ? std::vector<int32_t>{y, mid} : std::vector<int32_t>{y});
  }
}

/// y = x * sigmoid(x) (or sigmoid(x) * x) over [3, 37]; `keep_sigmoid`: s = sigmoid(x) is an output too.
/// `listed`: the output is cat([y, s]) instead (s read again through a tensor list).
std::vector<uint8_t> silu_program(bool sigmoid_first, bool keep_sigmoid, bool listed = false) {
  format::ProgramWriter writer;
  auto& m = writer.add_method("forward");
  const int32_t x = m.planned_tensor(f32({3, 37}));
  const int32_t s = m.planned_tensor(f32({3, 37}));
  const int32_t y = m.planned_tensor(f32({3, 37}));
  m.kernel("aten::sigmoid.out", {x, s, s});
  m.kernel("aten::mul.out", sigmoid_first ? std::vector<int32_t>{s, x, y, y} : std::vector<int32_t>{x, s, y, y});
  m.set_inputs({x});
  set_fusion_outputs(m, y, s, keep_sigmoid, listed, {6, 37});
  return writer.serialize();
}

// A decomposed SiLU (a sigmoid that only a multiply by its input reads) runs as one aten::silu at load: the same
// bits as the two calls, NaN and infinities included; a sigmoid that is also an output, or in a tensor list, stays.
TEST(ConstantWeights, DecomposedSiluRunsAsOnePass) {
  std::mt19937 rng(3);
  std::vector<float> x = random_floats(rng, 3 * 37);
  for (float& v : x) v *= 12.0f;
  x[5] = std::numeric_limits<float>::quiet_NaN();
  x[6] = std::numeric_limits<float>::infinity();
  x[7] = -std::numeric_limits<float>::infinity();
  for (bool sigmoid_first : {false, true}) {
    LoadOptions profiled;
    profiled.enable_profiling = true;
    Program fused = load_bytes(silu_program(sigmoid_first, false), profiled);
    Program plain = load_bytes(silu_program(sigmoid_first, true), profiled);
    auto a = fused.load_method("forward");
    auto b = plain.load_method("forward");
    const auto got = floats(exec(*a, {tensor_input(x, {3, 37})})[0]);
    const auto want = floats(exec(*b, {tensor_input(x, {3, 37})})[0]);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      if (std::isnan(want[i])) {
        ASSERT_TRUE(std::isnan(got[i])) << i;
      } else {
        ASSERT_EQ(got[i], want[i]) << i << " x=" << x[i];
        if (std::isfinite(x[i])) {
          ASSERT_NEAR(got[i], double(x[i]) / (1.0 + std::exp(-double(x[i]))), 1e-5 * (1 + std::abs(want[i]))) << i;
        }
      }
    }
    ASSERT_EQ(a->profile_events().size(), 2u);
    EXPECT_TRUE(a->profile_events()[0].folded);  // the sigmoid
    EXPECT_FALSE(a->profile_events()[1].folded);
    ASSERT_EQ(b->profile_events().size(), 2u);
    EXPECT_FALSE(b->profile_events()[0].folded);
    // A sigmoid that a tensor list also holds (cat([y, s])) stays: the cat reads it.
    Program listed = load_bytes(silu_program(sigmoid_first, false, true), profiled);
    auto c = listed.load_method("forward");
    const auto both = floats(exec(*c, {tensor_input(x, {3, 37})})[0]);
    const auto outputs = exec(*b, {tensor_input(x, {3, 37})});
    const auto s_want = floats(outputs[1]);
    ASSERT_EQ(both.size(), 2 * want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      for (const auto& [value, expected] : {std::pair{both[i], want[i]}, std::pair{both[want.size() + i], s_want[i]}}) {
        if (std::isnan(expected)) {
          ASSERT_TRUE(std::isnan(value)) << i;
        } else {
          ASSERT_EQ(value, expected) << i;
        }
      }
    }
    ASSERT_EQ(c->profile_events().size(), 3u);
    EXPECT_FALSE(c->profile_events()[0].folded);
  }
}

/// An exporter's hardswish (or hardsigmoid) over x [2, 5, 3, 3]: its 3 and 6 int64 constants made float by
/// dim-order copies, y = x + 3, a clamp to [0, 6] (`clamps`: 0 two clamps, 1 one clamp, 2 a hardtanh), times x
/// (hardswish; `x_first`: x is the multiply's first operand), divided by 6. `also_output`: the clamp's result is an
/// output too. `three`: the number added.
std::vector<uint8_t> hard_activation_program(bool hardswish, int clamps, bool x_first, bool also_output,
                                             int64_t three = 3, bool listed = false) {
  format::ProgramWriter writer;
  auto& m = writer.add_method("forward");
  const std::vector<int32_t> shape = {2, 5, 3, 3};
  const int32_t x = m.planned_tensor(f32(shape));
  auto number = [&](int64_t v) {
    const int32_t constant =
        m.constant_tensor({ScalarType::Long, {}, {}, ShapeDynamism::Static, {}}, format::as_bytes(std::vector<int64_t>{v}));
    const int32_t as_float = m.planned_tensor(f32({}));
    m.kernel("dim_order_ops::_to_dim_order_copy.out",
             {constant, m.bool_value(false), m.int_list({}), as_float, as_float});
    return as_float;
  };
  const int32_t k3 = number(three);
  const int32_t a = m.planned_tensor(f32(shape));
  m.kernel("aten::add.out", {x, k3, m.int_value(1), a, a});
  int32_t c = m.planned_tensor(f32(shape));
  if (clamps == 0) {
    const int32_t low = m.planned_tensor(f32(shape));
    m.kernel("aten::clamp.out", {a, m.int_value(0), m.none(), low, low});
    m.kernel("aten::clamp.out", {low, m.none(), m.int_value(6), c, c});
  } else if (clamps == 1) {
    m.kernel("aten::clamp.out", {a, m.int_value(0), m.int_value(6), c, c});
  } else {
    m.kernel("aten::hardtanh.out", {a, m.int_value(0), m.int_value(6), c, c});
  }
  int32_t numerator = c;
  if (hardswish) {
    numerator = m.planned_tensor(f32(shape));
    m.kernel("aten::mul.out", x_first ? std::vector<int32_t>{x, c, numerator, numerator}
                                      : std::vector<int32_t>{c, x, numerator, numerator});
  }
  const int32_t k6 = number(6);
  const int32_t y = m.planned_tensor(f32(shape));
  m.kernel("aten::div.out", {numerator, k6, y, y});
  m.set_inputs({x});
  set_fusion_outputs(m, y, c, also_output, listed, {4, 5, 3, 3});
  return writer.serialize();
}

// A decomposed hardswish or hardsigmoid runs as one aten::hardswish.out / aten::hardsigmoid.out at load (its
// constants folded first): the same bits as the calls it replaces, NaN, infinities, -3 and the clamp's edges
// included, whichever form the clamp takes and whichever side of the multiply x is on. A chain whose clamp is also
// an output, or that adds another number, stays as it is.
TEST(ConstantWeights, DecomposedHardswishRunsAsOnePass) {
  std::mt19937 rng(5);
  std::vector<float> x = random_floats(rng, 2 * 5 * 3 * 3);
  for (float& v : x) v *= 8.0f;
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), -3.0f, 3.0f, 0.0f, -0.0f, -3.0000002f,
                            2.9999998f, 1e30f, -1e30f, 1e-40f};
  for (size_t i = 0; i < std::size(specials); ++i) x[3 + i] = specials[i];
  const std::vector<int64_t> shape = {2, 5, 3, 3};
  for (bool hardswish : {true, false}) {
    for (int clamps : {0, 1, 2}) {
      for (bool x_first : {true, false}) {
        if (!hardswish && !x_first) continue;
        const std::string where = std::string(hardswish ? "hardswish" : "hardsigmoid") + ", clamp form " +
                                  std::to_string(clamps) + (x_first ? ", x first" : ", x second");
        LoadOptions profiled;
        profiled.enable_profiling = true;
        Program fused = load_bytes(hard_activation_program(hardswish, clamps, x_first, false), profiled);
        Program plain = load_bytes(hard_activation_program(hardswish, clamps, x_first, true), profiled);
        auto a = fused.load_method("forward");
        auto b = plain.load_method("forward");
        const auto got = floats(exec(*a, {tensor_input(x, shape)})[0]);
        const auto want = floats(exec(*b, {tensor_input(x, shape)})[0]);
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < got.size(); ++i) {
          // The definition, step by step in float.
          float t = x[i] + 3.0f;
          t = t < 0.0f ? 0.0f : t;
          t = t > 6.0f ? 6.0f : t;
          const float def = hardswish ? x[i] * t / 6.0f : t / 6.0f;
          if (std::isnan(def)) {
            ASSERT_TRUE(std::isnan(got[i]) && std::isnan(want[i])) << where << " at " << i;
          } else {
            ASSERT_EQ(std::bit_cast<uint32_t>(want[i]), std::bit_cast<uint32_t>(def)) << where << " x=" << x[i];
            ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(def)) << where << " x=" << x[i];
          }
        }
        // Fused: every call but the divide folded at load (the constants' copies too); kept: none of the chain.
        const auto& fe = a->profile_events();
        size_t running = 0;
        for (const auto& e : fe) running += e.folded ? 0 : 1;
        EXPECT_EQ(running, 1u) << where;
        EXPECT_EQ(fe.back().name, "aten::div.out") << where;
        EXPECT_FALSE(fe.back().folded) << where;
        size_t kept = 0;
        for (const auto& e : b->profile_events()) kept += e.folded ? 0 : 1;
        EXPECT_EQ(kept, b->profile_events().size() - 2) << where << ": only the constants' copies fold";
      }
    }
  }
  // The clamp's result also read through a tensor list (a cat), which the use counts do not show: left as it is;
  // fused, the cat would read bytes nothing wrote.
  {
    LoadOptions profiled;
    profiled.enable_profiling = true;
    Program listed = load_bytes(hard_activation_program(true, 1, true, false, 3, true), profiled);
    auto m = listed.load_method("forward");
    const auto got = floats(exec(*m, {tensor_input(x, shape)})[0]);
    ASSERT_EQ(got.size(), 2 * x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      float t = x[i] + 3.0f;
      t = t < 0.0f ? 0.0f : t;
      t = t > 6.0f ? 6.0f : t;
      const float def = x[i] * t / 6.0f;
      for (const auto& [value, want] : {std::pair{got[i], def}, std::pair{got[x.size() + i], t}}) {
        if (std::isnan(want)) {
          ASSERT_TRUE(std::isnan(value)) << i;
        } else {
          ASSERT_EQ(value, want) << i << " x=" << x[i];
        }
      }
    }
    size_t running = 0;
    for (const auto& e : m->profile_events()) running += e.folded ? 0 : 1;
    EXPECT_EQ(running, 5u);  // add, clamp, mul, div, cat
  }
  // x + 2 instead of x + 3: not a hardswish, left as it is (and still right).
  LoadOptions profiled;
  profiled.enable_profiling = true;
  Program other = load_bytes(hard_activation_program(true, 0, true, false, 2), profiled);
  auto m = other.load_method("forward");
  const auto got = floats(exec(*m, {tensor_input(x, shape)})[0]);
  for (size_t i = 0; i < got.size(); ++i) {
    float t = x[i] + 2.0f;
    t = t < 0.0f ? 0.0f : t;
    t = t > 6.0f ? 6.0f : t;
    const float def = x[i] * t / 6.0f;
    if (std::isnan(def)) {
      ASSERT_TRUE(std::isnan(got[i])) << i;
    } else {
      ASSERT_EQ(got[i], def) << i;
    }
  }
  size_t running = 0;
  for (const auto& e : m->profile_events()) running += e.folded ? 0 : 1;
  EXPECT_EQ(running, 5u);  // add, two clamps, mul, div
}

/// GPT-2's GELU written out over x [3, 70]: h = x * 0.5, p = pow(x, 3), q = p * 0.044715, r = x + q,
/// s = r * sqrt(2 / pi), t = tanh(s), u = t + 1, y = h * u; the numbers as constant 0-d float tensors.
/// `swapped`: each multiply and add with its operands the other way round. `also_output`: t is an output too.
std::vector<uint8_t> tanh_gelu_program(bool swapped, bool also_output) {
  format::ProgramWriter writer;
  auto& m = writer.add_method("forward");
  const std::vector<int32_t> shape = {3, 70};
  const int32_t x = m.planned_tensor(f32(shape));
  auto number = [&](float v) { return m.constant_tensor(f32({}), format::as_bytes(std::vector<float>{v})); };
  auto step = [&](const char* name, int32_t a, int32_t b, bool add) {
    const int32_t out = m.planned_tensor(f32(shape));
    const int32_t l = swapped ? b : a, r = swapped ? a : b;
    m.kernel(name, add ? std::vector<int32_t>{l, r, m.int_value(1), out, out} : std::vector<int32_t>{l, r, out, out});
    return out;
  };
  const int32_t h = step("aten::mul.out", x, number(0.5f), false);
  const int32_t p = m.planned_tensor(f32(shape));
  m.kernel("aten::pow.Tensor_Scalar_out", {x, m.double_value(3.0), p, p});
  const int32_t q = step("aten::mul.out", p, number(0.044715f), false);
  const int32_t r = step("aten::add.out", x, q, true);
  const int32_t s = step("aten::mul.out", r, number(0.7978845608f), false);
  const int32_t t = m.planned_tensor(f32(shape));
  m.kernel("aten::tanh.out", {s, t, t});
  const int32_t u = step("aten::add.out", t, number(1.0f), true);
  const int32_t y = step("aten::mul.out", h, u, false);
  m.set_inputs({x});
  m.set_outputs(also_output ? std::vector<int32_t>{y, t} : std::vector<int32_t>{y});
  return writer.serialize();
}

// GPT-2's GELU written out in operators runs as one etnp::tanh_gelu.out at load: the same bits as the eight calls,
// NaN, infinities, huge and tiny inputs included, whichever order each multiply's and add's operands come in. A chain
// with an intermediate that is also an output stays as it is.
TEST(ConstantWeights, DecomposedTanhGeluRunsAsOnePass) {
  std::mt19937 rng(9);
  std::vector<float> x = random_floats(rng, 3 * 70);
  for (float& v : x) v *= 6.0f;
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), 0.0f, -0.0f, 1e30f, -1e30f, 1e-40f, 2e12f,
                            -3.0f, 10.0f};
  for (size_t i = 0; i < std::size(specials); ++i) x[5 + i] = specials[i];
  for (bool swapped : {false, true}) {
    LoadOptions profiled;
    profiled.enable_profiling = true;
    Program fused = load_bytes(tanh_gelu_program(swapped, false), profiled);
    Program plain = load_bytes(tanh_gelu_program(swapped, true), profiled);
    auto a = fused.load_method("forward");
    auto b = plain.load_method("forward");
    for (int run = 0; run < 2; ++run) {
      const auto got = floats(exec(*a, {tensor_input(x, {3, 70})})[0]);
      const auto want = floats(exec(*b, {tensor_input(x, {3, 70})})[0]);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        if (std::isnan(want[i])) {
          ASSERT_TRUE(std::isnan(got[i])) << i << " x=" << x[i];
        } else {
          ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i])) << i << " x=" << x[i];
          if (std::abs(x[i]) < 50.0f) {
            const double g = 0.5 * x[i] * (1.0 + std::tanh(0.7978845608 * (x[i] + 0.044715 * std::pow(double(x[i]), 3))));
            ASSERT_NEAR(got[i], g, 1e-5 * (1.0 + std::abs(g))) << i << " x=" << x[i];
          }
        }
      }
    }
    size_t running = 0;
    for (const auto& e : a->profile_events()) running += e.folded ? 0 : 1;
    EXPECT_EQ(running, 2u) << (swapped ? "swapped" : "in order");  // 2 runs x the last multiply
    EXPECT_EQ(a->profile_events().back().name, "aten::mul.out");
    size_t kept = 0;
    for (const auto& e : b->profile_events()) kept += e.folded ? 0 : 1;
    EXPECT_EQ(kept, b->profile_events().size()) << "nothing folds when the tanh is an output";
  }
}

/// A program calling etnp::convolution_affine_clamp.out itself: a 1x1 convolution of a [1, 2, 1, 2] input to 2
/// channels, weights [[1, 2], [3, 4]], bias (10, 20), the given channel scale, clamp [-inf, 100], transposed or not.
std::vector<uint8_t> affine_clamp_program(const std::vector<float>& scale, bool transposed) {
  static const std::vector<float> w = {1, 2, 3, 4}, b = {10, 20};
  format::ProgramWriter writer;
  auto& m = writer.add_method("forward");
  const int32_t x = m.planned_tensor(f32({1, 2, 1, 2}));
  const int32_t out = m.planned_tensor(f32({1, 2, 1, 2}));
  m.kernel("etnp::convolution_affine_clamp.out",
           {x, m.constant_tensor(f32({2, 2, 1, 1}), format::as_bytes(w)),
            m.constant_tensor(f32({2}), format::as_bytes(b)), m.int_list({1, 1}), m.int_list({0, 0}),
            m.int_list({1, 1}), m.bool_value(transposed), m.int_list({0, 0}), m.int_value(1),
            m.constant_tensor(f32({static_cast<int32_t>(scale.size())}), format::as_bytes(scale)),
            m.double_value(-std::numeric_limits<double>::infinity()), m.double_value(100.0), out, out});
  m.set_inputs({x});
  m.set_outputs({out});
  return writer.serialize();
}

// The fused operator as a program may call it: its definition, and a precise error for what it cannot run.
TEST(ConstantWeights, FusedConvolutionOperatorRunsItsDefinitionAndRefusesTheRest) {
  // x = [[1, 2], [3, 4]] (channel, pixel): conv = [[1*1 + 2*3, 1*2 + 2*4], [3*1 + 4*3, 3*2 + 4*4]] = [[7, 10],
  // [15, 22]]; times (2, 5), plus (10, 20): [[24, 30], [95, 130]]; clamped to 100.
  const std::vector<float> x = {1, 2, 3, 4};
  Program ok = load_bytes(affine_clamp_program({2, 5}, false));
  auto method = ok.load_method("forward");
  EXPECT_EQ(floats(exec(*method, {tensor_input(x, {1, 2, 1, 2})})[0]), (std::vector<float>{24, 30, 95, 100}));

  const std::pair<std::vector<uint8_t>, std::string> refused[] = {
      {affine_clamp_program({2, 5, 7}, false), "channel_scale must have one value per output channel"},
      {affine_clamp_program({2, 5}, true), "transposed convolutions are not supported"},
  };
  for (const auto& [bytes, message] : refused) {
    Program p = load_bytes(bytes);
    auto bad = p.load_method("forward");
    try {
      exec(*bad, {tensor_input(x, {1, 2, 1, 2})});
      ADD_FAILURE() << "no error for: " << message;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::ExecutionError) << e.what();
      const std::string what = e.what();
      EXPECT_NE(what.find("etnp::convolution_affine_clamp.out: " + message), std::string::npos) << what;
    }
  }
}

// Transposed weights read as views where the kernel cannot use a packing (addmm with alpha 2, which is not
// packed) run the general path on the transposed dim order: same result as the definition, each of the three
// transposing operators.
TEST(ConstantWeights, TransposedViewsFeedTheGeneralPathWhereNothingIsPacked) {
  const std::vector<float> w = {1, 2, 3, 4, 5, 6};  // W [2, 3]
  for (int op = 0; op < 3; ++op) {
    format::ProgramWriter writer;
    auto& m = writer.add_method("forward");
    const int32_t x = m.planned_tensor(f32({1, 3}));
    const int32_t wv = m.constant_tensor(f32({2, 3}), format::as_bytes(w));
    const int32_t wt = m.planned_tensor(f32({3, 2}));
    const int32_t bias = m.planned_tensor(f32({2}));
    const int32_t y = m.planned_tensor(f32({1, 2}));
    if (op == 0) m.kernel("aten::permute_copy.out", {wv, m.int_list({1, 0}), wt, wt});
    if (op == 1) m.kernel("aten::transpose_copy.int_out", {wv, m.int_value(-1), m.int_value(0), wt, wt});
    if (op == 2) m.kernel("aten::t_copy.out", {wv, wt, wt});
    m.kernel("aten::addmm.out", {bias, x, wt, m.int_value(1), m.int_value(2), y, y});
    m.set_inputs({x, bias});
    m.set_outputs({y});
    Program p = load_bytes(writer.serialize());
    auto method = p.load_method("forward");
    EXPECT_EQ(method->load_time_bytes(), 0u) << op;
    const std::vector<float> in = {1, 10, 100}, b = {0.5f, -0.5f};
    // y = b + 2 * x @ W^T = b + 2 * (321, 654)
    EXPECT_EQ(floats(exec(*method, {tensor_input(in, {1, 3}), tensor_input(b, {2})})[0]),
              (std::vector<float>{642.5f, 1307.5f}))
        << op;
  }
}

}  // namespace
}  // namespace etnp::writer_testing
