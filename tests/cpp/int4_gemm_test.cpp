// compute::gemm_qd8_int4_f32 against its definition (exact int64 group sums, then the float fold it states),
// on every tile shape, on each implementation this CPU can run (x86: AVX-512 VNNI, AVX2; aarch64: I8MM,
// DotProd, NEON; the portable one), split across threads or not, against the exact value in doubles, and
// against the delegate's int8-packed kernel.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/xnnpack/xnn_kernels.h"
#include "compute/int4_gemm.h"
#include "core/cpu_features.h"
#include "cpu_levels.h"
#include "etnp/threadpool.h"

namespace etnp::compute {
namespace {

struct Case {
  size_t rows, n, k, group_size;
};

struct Problem {
  Case c;
  std::vector<int8_t> w, x;
  std::vector<float> scales, bias;
  std::vector<RowQuantParams> params;

  // extremes: values at the ends of their ranges, where an int16 partial sum would overflow first.
  Problem(Case cs, uint32_t seed, bool extremes = false) : c(cs) {
    std::mt19937 rng(seed);
    const size_t groups = c.group_size == 0 ? 1 : c.k / c.group_size;
    w.resize(c.n * c.k);
    x.resize(c.rows * c.k);
    for (auto& v : w) v = static_cast<int8_t>(extremes ? (rng() % 2 ? 7 : -8) : static_cast<int>(rng() % 16) - 8);
    for (auto& v : x) v = static_cast<int8_t>(extremes ? (rng() % 2 ? 127 : -128) : static_cast<int>(rng() % 256) - 128);
    if (extremes) {
      std::fill(w.begin(), w.begin() + c.k, int8_t{-8});  // channel 0: -8 * -128 on every k
      std::fill(x.begin(), x.begin() + c.k, int8_t{-128});
    }
    std::uniform_real_distribution<float> scale(0.001f, 0.05f), b(-1.0f, 1.0f);
    scales.resize(c.n * groups);
    for (auto& s : scales) s = scale(rng);
    bias.resize(c.n);
    for (auto& v : bias) v = b(rng);
    for (size_t r = 0; r < c.rows; ++r) {
      params.push_back({static_cast<int32_t>(rng() % 256) - 128, 0.001f + 0.01f * static_cast<float>(r)});
    }
  }

  Int4Weights pack(bool with_bias = true) const {
    return Int4Weights(w.data(), c.n, c.k, scales.data(), with_bias ? bias.data() : nullptr, c.group_size);
  }

  std::vector<float> run(const Int4Weights& packed, ThreadPool* pool, float lo, float hi) const {
    std::vector<float> out(c.rows * c.n, std::numeric_limits<float>::quiet_NaN());
    std::vector<int32_t> scratch(int4_gemm_scratch_ints(c.rows, packed));
    gemm_qd8_int4_f32(x.data(), params.data(), c.rows, packed, lo, hi, out.data(), scratch.data(), pool);
    return out;
  }

  // The stated fold: the zero point's term first (its per-channel float computed as the packing states),
  // then the exact sums of x * w over each run of 32 k times their group's scale, each added with one fused
  // multiply-add, in k order, then the row scale and the bias.
  std::vector<float> reference(bool with_bias, float lo, float hi) const {
    const size_t gk = c.group_size == 0 ? c.k : c.group_size, groups = c.k / gk;
    std::vector<float> out(c.rows * c.n);
    for (size_t r = 0; r < c.rows; ++r) {
      for (size_t j = 0; j < c.n; ++j) {
        float zp_term = 0.0f;
        for (size_t g = 0; g < groups; ++g) {
          int32_t wsum = 0;
          for (size_t i = g * gk; i < (g + 1) * gk; ++i) wsum += w[j * c.k + i];
          zp_term += static_cast<float>(wsum) * scales[j * groups + g];
        }
        float sum = -static_cast<float>(params[r].zero_point) * zp_term;
        for (size_t run = 0; run < c.k / 32; ++run) {
          int64_t acc = 0;
          for (size_t i = run * 32; i < (run + 1) * 32; ++i) acc += int64_t{x[r * c.k + i]} * w[j * c.k + i];
          sum = std::fma(static_cast<float>(acc), scales[j * groups + run * 32 / gk], sum);
        }
        const float v = with_bias ? sum * params[r].scale + bias[j] : sum * params[r].scale;
        out[r * c.n + j] = std::min(std::max(v, lo), hi);
      }
    }
    return out;
  }

  // The exact value, in doubles: sum_g scale * sum_k (x - zp) * w, scaled, plus the bias (unclamped).
  double exact(size_t r, size_t j, bool with_bias) const {
    const size_t gk = c.group_size == 0 ? c.k : c.group_size, groups = c.k / gk;
    double sum = 0.0;
    for (size_t g = 0; g < groups; ++g) {
      int64_t acc = 0;
      for (size_t i = g * gk; i < (g + 1) * gk; ++i) {
        acc += int64_t{x[r * c.k + i] - params[r].zero_point} * w[j * c.k + i];
      }
      sum += static_cast<double>(acc) * scales[j * groups + g];
    }
    return sum * params[r].scale + (with_bias ? bias[j] : 0.0);
  }
};

void expect_bits_equal(const std::vector<float>& got, const std::vector<float>& want, const Case& c,
                       const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    uint32_t a, b;
    std::memcpy(&a, &got[i], 4);
    std::memcpy(&b, &want[i], 4);
    ASSERT_EQ(a, b) << what << ": rows " << c.rows << " n " << c.n << " k " << c.k << " group " << c.group_size
                    << " at row " << i / c.n << " channel " << i % c.n << ": " << got[i] << " vs " << want[i];
  }
}

const float kInf = std::numeric_limits<float>::infinity();

// testing::at_each_cpu_level, checking first that the level runs its own implementation.
template <class Fn>
void at_each_level(Fn fn) {
  testing::at_each_cpu_level([&](CpuLevel level) {
    ASSERT_STREQ(int4_gemm_kernel_name(), cpu_level_name(level));
    fn(level);
  });
}

// Rows cover the 4-row tile and each single-row tile width (4, 2, 1 blocks) and their remainders; channels
// cover partial blocks; groups are per channel, 32, 64 and 128.
const Case kCases[] = {
    {1, 8, 32, 0},     {1, 1, 32, 32},   {1, 21, 64, 32},  {2, 40, 96, 32},   {3, 64, 128, 64},
    {4, 24, 256, 128}, {5, 57, 64, 0},   {7, 33, 192, 64}, {9, 72, 576, 32},  {16, 48, 128, 128},
    {13, 17, 64, 32},  {23, 40, 128, 0},
};

TEST(Int4Gemm, MatchesTheDefinitionBitForBitOnEveryImplementation) {
  uint32_t seed = 1;
  for (const Case& c : kCases) {
    for (bool with_bias : {true, false}) {
      const Problem p(c, seed++);
      const Int4Weights packed = p.pack(with_bias);
      const auto want = p.reference(with_bias, -kInf, kInf);
      // The stated fold is within float rounding of the exact value (the zero point's term cancels against
      // the group sums, so the bound scales with the largest of them).
      for (size_t r = 0; r < c.rows; ++r) {
        for (size_t j = 0; j < c.n; ++j) {
          const double e = p.exact(r, j, with_bias);
          ASSERT_NEAR(want[r * c.n + j], e, 1e-5 * (1.0 + std::fabs(e)) + 2e-4 * p.params[r].scale * c.k)
              << r << "," << j;
        }
      }
      at_each_level([&](CpuLevel level) {
        expect_bits_equal(p.run(packed, nullptr, -kInf, kInf), want, c, cpu_level_name(level));
      });
    }
  }
}

TEST(Int4Gemm, ExtremeValuesDoNotOverflowThePartialSums) {
  // 32 k of (-8 - 0) * (-128 - zp) per group: the widest int16 lane sum the kernel forms is 8 pairs of
  // 15 * 128 (the stored +8 values) plus the other sign.
  for (const Case& c : {Case{1, 16, 64, 32}, Case{4, 8, 128, 0}, Case{6, 16, 256, 128}, Case{5, 27, 192, 64},
                        Case{3, 40, 96, 32}, Case{2, 12, 128, 128}}) {
    const Problem p(c, 7, /*extremes=*/true);
    const Int4Weights packed = p.pack();
    at_each_level([&](CpuLevel level) {
      expect_bits_equal(p.run(packed, nullptr, -kInf, kInf), p.reference(true, -kInf, kInf), c,
                        cpu_level_name(level));
    });
  }
}

TEST(Int4Gemm, ClampsToTheOutputRange) {
  const Case c{3, 20, 64, 32};
  const Problem p(c, 11);
  const Int4Weights packed = p.pack();
  at_each_level([&](CpuLevel level) {
    const auto got = p.run(packed, nullptr, -0.25f, 0.5f);
    expect_bits_equal(got, p.reference(true, -0.25f, 0.5f), c, cpu_level_name(level));
    EXPECT_GT(std::count(got.begin(), got.end(), 0.5f) + std::count(got.begin(), got.end(), -0.25f), 0);
  });
}

TEST(Int4Gemm, SplitAcrossThreadsGivesTheSameBits) {
  // Large enough to be split (rows * n * k above the per-thread threshold), one row (decoding) and several.
  ThreadPool pool(2);
  for (const Case& c : {Case{1, 1536, 576, 32}, Case{5, 512, 512, 128}, Case{1, 1000, 384, 0}}) {
    const Problem p(c, 21);
    const Int4Weights packed = p.pack();
    at_each_level([&](CpuLevel level) {
      expect_bits_equal(p.run(packed, &pool, -kInf, kInf), p.run(packed, nullptr, -kInf, kInf), c,
                        cpu_level_name(level));
    });
  }
}

TEST(Int4Gemm, AgreesWithTheInt8PackedKernel) {
  // The XNNPACK delegate's int8 packing computes the same exact group sums; it applies the zero point per
  // group in integers, so the two folds differ by float rounding only.
  for (const Case& c : {Case{1, 24, 64, 32}, Case{6, 40, 256, 64}, Case{4, 17, 96, 0}}) {
    const Problem p(c, 31);
    const xnn::QD8Weights int8_packed(p.w.data(), c.n, c.k, p.scales.data(), p.bias.data(), c.group_size);
    std::vector<float> want(c.rows * c.n);
    std::vector<int32_t> scratch(xnn::qd8_scratch_ints(c.rows, int8_packed));
    xnn::fully_connected_qd8_f32(p.x.data(), p.params.data(), c.rows, int8_packed, -kInf, kInf, want.data(),
                                 scratch.data());
    const auto got = p.run(p.pack(), nullptr, -kInf, kInf);
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-5 * (1.0 + std::fabs(want[i])) + 2e-4 * p.params[i / c.n].scale * c.k) << i;
    }
  }
}

TEST(Int4Gemm, KeepsBfloat16ScalesAsBfloat16) {
  // Scales that are bfloat16 values (ExecuTorch's 8da4w block scales) are stored in 2 bytes, others in 4;
  // both give the definition's bits.
  const Case c{6, 40, 128, 32};  // the 4-row tiles over a pair and a single block, then single rows
  Problem p(c, 41);
  const Int4Weights f32 = p.pack();
  EXPECT_FALSE(f32.bf16_scales());
  for (auto& s : p.scales) {
    uint32_t bits;
    std::memcpy(&bits, &s, 4);
    bits &= 0xFFFF0000u;
    std::memcpy(&s, &bits, 4);
  }
  const Int4Weights bf16 = p.pack();
  EXPECT_TRUE(bf16.bf16_scales());
  EXPECT_LT(bf16.bytes(), f32.bytes());
  at_each_level([&](CpuLevel level) {
    expect_bits_equal(p.run(bf16, nullptr, -kInf, kInf), p.reference(true, -kInf, kInf), c, cpu_level_name(level));
  });
}

TEST(Int4Gemm, EveryLevelHasItsOwnImplementation) {
  // x86: portable, avx2_fma, avx512_vnni; aarch64: portable, neon (smlal), neon_dotprod (sdot), neon_i8mm
  // (smmla for four rows, sdot for one). The levels this CPU has are the ones the other tests walk.
  std::string seen;
  testing::at_each_cpu_level([&](CpuLevel level) {
    EXPECT_STREQ(int4_gemm_kernel_name(), cpu_level_name(level));
    seen += std::string(" ") + int4_gemm_kernel_name();
  });
  std::printf("[ info ] int4 GEMM implementations run:%s\n", seen.c_str());
}

TEST(Int4Gemm, SupportsOnlyWholeRunsOf32) {
  EXPECT_TRUE(Int4Weights::supports(32, 0));
  EXPECT_TRUE(Int4Weights::supports(576, 32));
  EXPECT_TRUE(Int4Weights::supports(512, 128));
  EXPECT_FALSE(Int4Weights::supports(0, 0));
  EXPECT_FALSE(Int4Weights::supports(48, 0));    // k not a multiple of 32
  EXPECT_FALSE(Int4Weights::supports(96, 16));   // groups under 32
  EXPECT_FALSE(Int4Weights::supports(96, 64));   // a group that does not divide k
  EXPECT_FALSE(Int4Weights::supports(576, 48));  // groups not a multiple of 32
}

}  // namespace
}  // namespace etnp::compute
