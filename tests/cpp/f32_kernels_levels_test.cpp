// etnp's own fp32 vector kernels (GEMM micro-kernels, GEMV, depthwise convolutions, vector math) at every CPU
// level this machine has (cpu_levels.h), so that the portable twin, AVX2 and NEON implementations all meet the
// same reference. Small integer values make every sum exact in float whatever the order or fusion of the
// multiply-adds, so those cases compare exactly; random floats compare with a tolerance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "compute/depthwise.h"
#include "compute/dot_rows.h"
#include "compute/gemm.h"
#include "compute/gemm_kernel.h"
#include "compute/packed_gemm.h"
#include "compute/vector_math.h"
#include "cpu_levels.h"
#include "etnp/threadpool.h"

namespace etnp::compute {
namespace {

using etnp::testing::at_each_cpu_level;

/// Integers in [-5, 5] (or [-3, 3] with `small`): products and their sums stay exact in float.
std::vector<float> int_values(size_t n, unsigned seed, bool small = false) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t h = (i * 2654435761u + seed * 40503u) >> 7;
    v[i] = small ? static_cast<float>(h % 7) - 3.0f : static_cast<float>(h % 11) - 5.0f;
  }
  return v;
}

std::vector<float> random_floats(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// ---------------------------------------------------------------------------------------------------------
// GEMM micro-kernels (gemm_kernel.h), called directly: rows around the 6-, 8- and 12-row tiles, every column count
// of a last panel (the narrow 8-column kernels up to 8), K of 0 and odd lengths, bias or none, an earlier
// K block's sums (accumulate), clamp, output rows wider than the panel.

struct PanelCase {
  size_t rows, cols, k;
  bool bias, accumulate, clamp;
};

TEST(GemmKernel, PanelMatchesTheDefinitionAtEveryCpuLevel) {
  std::vector<PanelCase> cases;
  for (size_t rows : {1, 2, 5, 6, 7, 8, 9, 11, 12, 13, 24, 25}) {
    for (size_t cols : {1, 3, 7, 8, 9, 15, 16}) {
      for (size_t k : {0, 1, 5, 33}) {
        for (int flags = 0; flags < 8; ++flags) {
          cases.push_back({rows, cols, k, (flags & 1) != 0, (flags & 2) != 0, (flags & 4) != 0});
        }
      }
    }
  }
  at_each_cpu_level([&](CpuLevel level) {
    for (const PanelCase& t : cases) {
      const size_t ldc = t.cols + 3, a_stride = t.k + 2;
      const auto a = int_values(t.rows * a_stride, 1);
      const auto panel = int_values(t.k * kGemmPanel, 2, true);
      const auto bias = int_values(kGemmPanel, 3);
      const auto before = int_values(t.rows * ldc, 4);
      std::vector<float> c = before;
      GemmPanelOut out;
      out.c = c.data();
      out.ldc = ldc;
      out.cols = t.cols;
      out.bias = t.bias ? bias.data() : nullptr;
      out.accumulate = t.accumulate;
      out.clamp = t.clamp;
      out.lo = -20.0f;
      out.hi = 25.0f;
      // Direct rows, and the same rows through pointers in two segments (a convolution's kernel rows).
      for (int indirect = 0; indirect < 2; ++indirect) {
        c = before;
        if (indirect == 0) {
          gemm_panel_f32(a.data(), a_stride, t.rows, t.k, panel.data(), out, panel.data());
        } else {
          if (t.k % 2 != 0) continue;
          std::vector<const float*> ptrs;
          for (size_t r = 0; r < t.rows; ++r) {
            ptrs.push_back(a.data() + r * a_stride);
            ptrs.push_back(a.data() + r * a_stride + t.k / 2);
          }
          gemm_panel_f32_indirect(ptrs.data(), 2, t.rows, 2, t.k / 2, panel.data(), out);
        }
        for (size_t r = 0; r < t.rows; ++r) {
          for (size_t j = 0; j < ldc; ++j) {
            float want = before[r * ldc + j];  // columns past `cols` are left alone
            if (j < t.cols) {
              double acc = t.accumulate ? before[r * ldc + j] : (t.bias ? bias[j] : 0.0);
              for (size_t p = 0; p < t.k; ++p) acc += double(a[r * a_stride + p]) * panel[p * kGemmPanel + j];
              if (t.clamp) acc = std::min(std::max(acc, -20.0), 25.0);
              want = static_cast<float>(acc);
            }
            ASSERT_EQ(c[r * ldc + j], want)
                << cpu_level_name(level) << (indirect ? " indirect " : " direct ") << t.rows << "x" << t.cols << "x"
                << t.k << " bias " << t.bias << " accumulate " << t.accumulate << " clamp " << t.clamp << " at " << r
                << "," << j;
          }
        }
      }
    }
  });
}

TEST(GemmKernel, RandomFloatsAgreeWithThePortableTwinAtEveryCpuLevel) {
  // Rounding differs with the fusion of the multiply-adds only: within a few ulps of the sums' magnitude.
  const size_t rows = 13, k = 300;
  const auto a = random_floats(rows * k, 11), panel = random_floats(k * kGemmPanel, 12), bias = random_floats(16, 13);
  for (size_t cols : {5, 16}) {
    std::vector<float> portable;
    at_each_cpu_level([&](CpuLevel level) {
      std::vector<float> c(rows * cols);
      GemmPanelOut out;
      out.c = c.data();
      out.ldc = cols;
      out.cols = cols;
      out.bias = bias.data();
      gemm_panel_f32(a.data(), k, rows, k, panel.data(), out);
      if (level == CpuLevel::portable) {
        portable = c;
        return;
      }
      for (size_t i = 0; i < c.size(); ++i) {
        ASSERT_NEAR(c[i], portable[i], 1e-4) << cpu_level_name(level) << " at " << i;
      }
    });
  }
}

TEST(GemmKernel, PanelPairGivesThePanelsBitsWhereTheCpuHasIt) {
  // gemm_panel_pair_f32 (and its indirect form) against gemm_panel_f32 on each of the two panels: random floats,
  // so that a difference in the order or fusion of the sums shows; rows across the 12- and 8-row tiles, a second
  // panel of 1 to 16 columns, the accumulate, bias and clamp forms. Where no level has the pair tile it must
  // refuse and write nothing.
  bool ran = false;
  for (size_t rows : {1, 5, 12, 13, 25}) {
    for (size_t cols : {17, 24, 31, 32}) {
      for (size_t k : {1, 34, 300}) {
        for (int flags = 0; flags < 8; ++flags) {
          const size_t ldc = cols + 5, a_stride = k + 3, panel_stride = k * kGemmPanel + 16;
          const auto a = random_floats(rows * a_stride, 31);
          const auto panels = random_floats(panel_stride + k * kGemmPanel, 32);
          const auto bias = random_floats(2 * kGemmPanel, 33);
          const auto before = random_floats(rows * ldc, 34);
          GemmPanelOut out;
          out.ldc = ldc;
          out.cols = cols;
          out.bias = (flags & 1) != 0 ? bias.data() : nullptr;
          out.accumulate = (flags & 2) != 0;
          out.clamp = (flags & 4) != 0;
          out.lo = -1.5f;
          out.hi = 2.0f;
          at_each_cpu_level([&](CpuLevel level) {
            std::vector<float> pair = before, single = before;
            out.c = pair.data();
            if (!gemm_panel_pair_f32(a.data(), a_stride, rows, k, panels.data(), panel_stride, out)) {
              ASSERT_EQ(pair, before) << cpu_level_name(level) << ": refused, yet wrote";
              return;
            }
            ran = true;
            GemmPanelOut first = out, second = out;
            first.c = single.data();
            first.cols = kGemmPanel;
            second.c = single.data() + kGemmPanel;
            second.cols = cols - kGemmPanel;
            if (out.bias != nullptr) second.bias = out.bias + kGemmPanel;
            gemm_panel_f32(a.data(), a_stride, rows, k, panels.data(), first);
            gemm_panel_f32(a.data(), a_stride, rows, k, panels.data() + panel_stride, second);
            ASSERT_EQ(std::memcmp(pair.data(), single.data(), pair.size() * sizeof(float)), 0)
                << cpu_level_name(level) << " " << rows << "x" << cols << "x" << k << " flags " << flags;
            // The same rows through pointers, in two segments (a convolution's kernel rows).
            if (k % 2 != 0) return;
            std::vector<const float*> ptrs;
            for (size_t r = 0; r < rows; ++r) {
              ptrs.push_back(a.data() + r * a_stride);
              ptrs.push_back(a.data() + r * a_stride + k / 2);
            }
            std::vector<float> pair_indirect = before, single_indirect = before;
            out.c = pair_indirect.data();
            ASSERT_TRUE(gemm_panel_pair_f32_indirect(ptrs.data(), 2, rows, 2, k / 2, panels.data(), panel_stride, out))
                << cpu_level_name(level) << ": the direct pair ran, the indirect one refused";
            first.c = single_indirect.data();
            second.c = single_indirect.data() + kGemmPanel;
            gemm_panel_f32_indirect(ptrs.data(), 2, rows, 2, k / 2, panels.data(), first);
            gemm_panel_f32_indirect(ptrs.data(), 2, rows, 2, k / 2, panels.data() + panel_stride, second);
            ASSERT_EQ(std::memcmp(pair_indirect.data(), single_indirect.data(), pair.size() * sizeof(float)), 0)
                << cpu_level_name(level) << " indirect " << rows << "x" << cols << "x" << k << " flags " << flags;
            ASSERT_EQ(pair_indirect, pair) << cpu_level_name(level) << " indirect vs direct";
          });
        }
      }
    }
  }
  if (!ran) {
    GTEST_SKIP() << "no pair tile at this CPU's levels (" << cpu_level_name(cpu_level()) << "): refusals checked";
  }
}

TEST(GemmKernel, EveryVectorLevelGivesTheSameBits) {
  // The AVX2 and AVX-512 tiles (x86-64; the NEON levels share one tile) make the same fused multiply-adds in the
  // same order from the same start, so a program's outputs do not depend on which of the two this CPU has. Random
  // floats, so that any difference in fusion or order shows; 25 rows cross the 12-row tile twice, 9 the 6-row one.
  std::vector<CpuLevel> vector_levels;
  at_each_cpu_level([&](CpuLevel level) {
    if (level != CpuLevel::portable) vector_levels.push_back(level);
  });
  if (vector_levels.size() < 2) {
    GTEST_SKIP() << "this CPU has one vector level (" << cpu_level_name(cpu_level()) << ")";
  }
  const size_t k = 301;
  const auto panel = random_floats(k * kGemmPanel, 22), bias = random_floats(kGemmPanel, 23);
  for (size_t rows : {9, 25}) {
    const auto a = random_floats(rows * k, 21);
    for (size_t cols : {13, 16}) {
      for (int accumulate = 0; accumulate < 2; ++accumulate) {
        const auto before = random_floats(rows * cols, 24);
        std::vector<float> first;
        at_each_cpu_level([&](CpuLevel level) {
          if (level == CpuLevel::portable) return;
          std::vector<float> c = before;
          GemmPanelOut out;
          out.c = c.data();
          out.ldc = cols;
          out.cols = cols;
          out.bias = bias.data();
          out.accumulate = accumulate != 0;
          out.clamp = true;
          out.lo = -3.0f;
          out.hi = 3.0f;
          gemm_panel_f32(a.data(), k, rows, k, panel.data(), out);
          if (first.empty()) {
            first = c;
            return;
          }
          ASSERT_EQ(std::memcmp(c.data(), first.data(), c.size() * sizeof(float)), 0)
              << cpu_level_name(level) << " vs " << cpu_level_name(vector_levels.front()) << ", " << rows
              << " rows, " << cols << " columns, accumulate " << accumulate;
        });
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// gemm_f32 (blocked GEMM with packing, and its matrix-vector paths) over layouts: A and B row-major or
// transposed (B's columns contiguous: the transposing panel packer), C row-major or strided, a single row
// (GEMV, both the axpy and dot-product forms) and a single column.

TEST(GemmF32, MatchesTheDefinitionAtEveryCpuLevel) {
  at_each_cpu_level([&](CpuLevel level) {
    for (int64_t m : {1, 5, 6, 13}) {
      for (int64_t n : {1, 8, 17, 40}) {
        for (int64_t k : {1, 9, 16, 300}) {
          const auto av = int_values(static_cast<size_t>(m * k), 21);
          const auto bv = int_values(static_cast<size_t>(k * n), 22, true);
          for (int layout = 0; layout < 8; ++layout) {
            const bool at = (layout & 1) != 0, bt = (layout & 2) != 0, ct = (layout & 4) != 0;
            const GemmMatrix a = at ? GemmMatrix{av.data(), 1, m} : GemmMatrix{av.data(), k, 1};
            const GemmMatrix b = bt ? GemmMatrix{bv.data(), 1, k} : GemmMatrix{bv.data(), n, 1};
            std::vector<float> c(static_cast<size_t>(m * n), std::numeric_limits<float>::quiet_NaN());
            const int64_t c_rs = ct ? 1 : n, c_cs = ct ? m : 1;
            gemm_f32(m, n, k, a, b, c.data(), c_rs, c_cs, GemmEpilogue{}, nullptr);
            for (int64_t i = 0; i < m; ++i) {
              for (int64_t j = 0; j < n; ++j) {
                double acc = 0.0;
                for (int64_t p = 0; p < k; ++p) {
                  acc += double(av[size_t(i * a.row_stride + p * a.col_stride)]) *
                         bv[size_t(p * b.row_stride + j * b.col_stride)];
                }
                ASSERT_EQ(c[size_t(i * c_rs + j * c_cs)], static_cast<float>(acc))
                    << cpu_level_name(level) << " " << m << "x" << n << "x" << k << " layout " << layout << " at "
                    << i << "," << j;
              }
            }
          }
        }
      }
    }
  });
}

// The epilogue: a scale and a bias per row (an NCHW convolution's channels, applied in the micro-kernels'
// registers) or a bias per column, alpha, and a clamp that keeps NaN, over the same layouts and sizes (K past
// one 256 block, a single column, strided C). Integer sums and power-of-two scales keep every value exact.
TEST(GemmF32, EpilogueMatchesTheDefinitionAtEveryCpuLevel) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  at_each_cpu_level([&](CpuLevel level) {
    for (int64_t m : {1, 5, 6, 13}) {
      for (int64_t n : {1, 8, 17, 40}) {
        for (int64_t k : {1, 16, 300}) {
          auto av = int_values(static_cast<size_t>(m * k), 41);
          av[0] = nan;  // row 0, every column: NaN through the sums and every clamp
          const auto bv = int_values(static_cast<size_t>(k * n), 42, true);
          std::vector<float> scale(static_cast<size_t>(std::max(m, n))), bias(scale.size());
          for (size_t i = 0; i < scale.size(); ++i) {
            scale[i] = (i % 3 == 0) ? 0.5f : (i % 3 == 1 ? 2.0f : -1.0f);
            bias[i] = static_cast<float>(static_cast<int>(i % 7) - 3);
          }
          for (int form = 0; form < 5; ++form) {
            for (bool ct : {false, true}) {
              GemmEpilogue ep;
              if (form == 0 || form == 1) ep.bias = GemmMatrix{bias.data(), 1, 0};  // per row
              if (form == 0 || form == 2) ep.scale = GemmMatrix{scale.data(), 1, 0};
              if (form == 3) ep.bias = GemmMatrix{bias.data(), 0, 1};  // per column
              if (form == 4) ep.alpha = 2.0f;
              if (form != 2) {
                ep.min = -20.0f;
                ep.max = form == 4 ? std::numeric_limits<float>::infinity() : 30.0f;
              }
              std::vector<float> c(static_cast<size_t>(m * n), -7.0f);
              const int64_t c_rs = ct ? 1 : n, c_cs = ct ? m : 1;
              gemm_f32(m, n, k, GemmMatrix{av.data(), k, 1}, GemmMatrix{bv.data(), n, 1}, c.data(), c_rs, c_cs, ep,
                       nullptr);
              for (int64_t i = 0; i < m; ++i) {
                for (int64_t j = 0; j < n; ++j) {
                  double acc = 0.0;
                  for (int64_t p = 0; p < k; ++p) acc += double(av[size_t(i * k + p)]) * bv[size_t(p * n + j)];
                  float want = static_cast<float>(acc) * ep.alpha;
                  if (ep.scale.data != nullptr) want *= scale[size_t(i)];
                  if (ep.bias.data != nullptr) want += bias[size_t(ep.bias.col_stride == 0 ? i : j)];
                  want = want < ep.min ? ep.min : want;
                  want = want > ep.max ? ep.max : want;
                  const float got = c[size_t(i * c_rs + j * c_cs)];
                  if (std::isnan(want)) {
                    ASSERT_TRUE(std::isnan(got)) << cpu_level_name(level) << " form " << form << " at " << i << "," << j;
                  } else {
                    ASSERT_EQ(got, want) << cpu_level_name(level) << " " << m << "x" << n << "x" << k << " form "
                                         << form << (ct ? " strided C" : "") << " at " << i << "," << j;
                  }
                }
              }
            }
          }
        }
      }
    }
  });
}

TEST(GemmF32, RandomFloatsAgreeWithThePortableTwinAtEveryCpuLevel) {
  // The GEMV forms (one row: k sequential; one row times a transposed B: dot products) and a tiled product.
  const int64_t k = 777, n = 53;
  const auto av = random_floats(static_cast<size_t>(7 * k), 31), bv = random_floats(static_cast<size_t>(k * n), 32);
  for (int form = 0; form < 3; ++form) {
    const int64_t m = form == 2 ? 7 : 1;
    const GemmMatrix a{av.data(), k, 1};
    const GemmMatrix b = form == 1 ? GemmMatrix{bv.data(), 1, k} : GemmMatrix{bv.data(), n, 1};
    std::vector<float> portable;
    at_each_cpu_level([&](CpuLevel level) {
      std::vector<float> c(static_cast<size_t>(m * n));
      gemm_f32(m, n, k, a, b, c.data(), n, 1, GemmEpilogue{}, nullptr);
      if (level == CpuLevel::portable) {
        portable = c;
        return;
      }
      for (size_t i = 0; i < c.size(); ++i) {
        ASSERT_NEAR(c[i], portable[i], 2e-4) << cpu_level_name(level) << " form " << form << " at " << i;
      }
    });
  }
}

// ---------------------------------------------------------------------------------------------------------
// PackedGemm: the single-row streaming path (gemv_panels) against the definition and, bit for bit, against the
// micro-kernel at the same level (row 0 of a several-row product).

TEST(PackedGemm, SingleRowMatchesTheDefinitionAndTheMicroKernelAtEveryCpuLevel) {
  at_each_cpu_level([&](CpuLevel level) {
    for (size_t k : {1, 3, 4, 255, 300}) {
      for (size_t n : {1, 8, 17, 48}) {
        const auto x = int_values(7 * k, 41), w = int_values(n * k, 42, true), bias = int_values(n, 43);
        const PackedGemm gemm(w.data(), true, k, n, bias.data());
        std::vector<float> one(n), many(7 * n);
        gemm.run(x.data(), 1, k, -30.0f, 40.0f, one.data());
        for (size_t j = 0; j < n; ++j) {
          double acc = bias[j];
          for (size_t i = 0; i < k; ++i) acc += double(x[i]) * w[j * k + i];
          acc = std::min(std::max(acc, -30.0), 40.0);
          ASSERT_EQ(one[j], static_cast<float>(acc)) << cpu_level_name(level) << " " << k << "x" << n << " at " << j;
        }
        const auto xf = random_floats(7 * k, 44), wf = random_floats(n * k, 45);
        const PackedGemm gemm_f(wf.data(), true, k, n, bias.data());
        const float inf = std::numeric_limits<float>::infinity();
        gemm_f.run(xf.data(), 1, k, -inf, inf, one.data());
        gemm_f.run(xf.data(), 7, k, -inf, inf, many.data());
        for (size_t j = 0; j < n; ++j) {
          ASSERT_EQ(one[j], many[j]) << cpu_level_name(level) << " " << k << "x" << n << " at " << j;
        }
      }
    }
  });
}

// PackedGemm's packing of [n, k] weights, byte for byte against the layout it documents ([n / 16 rounded up][k][16],
// zero past n): taps of 1 (a fully-connected layer), 9 and 49 (a convolution's filter read as [Cout, KH, KW, Cin]),
// channel counts across the 8-wide register transposes and the 256-float blocks, partial last panels, a column
// scale or none (random floats: the scale must be one multiply, as the epilogue folds assume). The larger ones
// (300 channels of 9 or 49 taps, 40 columns) are packed by two threads: the pool is made to have them.
TEST(PackedGemm, PacksWeightRowsInTheDocumentedLayoutAtEveryCpuLevel) {
  ThreadPool pool(2);
  const ThreadPool::Use use(pool);
  at_each_cpu_level([&](CpuLevel level) {
    for (size_t taps : {1, 9, 49}) {
      for (size_t channels : {1, 7, 8, 29, 300}) {
        for (size_t n : {1, 16, 17, 40}) {
          for (bool scaled : {false, true}) {
            const size_t k = taps * channels;
            const auto w = random_floats(n * k, 46), scale = random_floats(n, 47);
            const PackedGemm gemm(w.data(), true, k, n, nullptr, FilterTaps{taps}, scaled ? scale.data() : nullptr);
            const size_t panels = (n + 15) / 16;
            std::vector<float> expected(panels * k * 16, 0.0f);
            for (size_t j = 0; j < n; ++j) {
              for (size_t t = 0; t < taps; ++t) {
                for (size_t c = 0; c < channels; ++c) {
                  const float v = w[j * k + c * taps + t];
                  expected[(j / 16 * k + t * channels + c) * 16 + j % 16] = scaled ? v * scale[j] : v;
                }
              }
            }
            const auto content = gemm.content();
            ASSERT_EQ(content.size(), 4u);
            ASSERT_EQ(content[2].size(), expected.size() * sizeof(float));
            ASSERT_EQ(std::memcmp(content[2].data(), expected.data(), content[2].size()), 0)
                << cpu_level_name(level) << " taps " << taps << " channels " << channels << " n " << n
                << (scaled ? " scaled" : "");
          }
        }
      }
    }
  });
}

// A window of each filter (FilterTaps' rectangle): the packing holds exactly the rectangle's taps of each
// [Cin, KH, KW] filter, in [rows * cols, Cin] order, as the whole-filter packing of those taps copied out.
TEST(PackedGemm, PacksAFilterWindowAsTheWindowsTapsAlone) {
  ThreadPool pool(2);
  const ThreadPool::Use use(pool);
  struct Case {
    size_t kh, kw, rows, cols, row0, col0;
  };
  const Case cases[] = {{3, 3, 1, 1, 1, 1}, {5, 5, 3, 2, 1, 2}, {3, 3, 2, 3, 0, 0}, {1, 7, 1, 4, 0, 3}};
  for (const Case& c : cases) {
    for (size_t channels : {1, 9, 300}) {
      for (size_t n : {5, 40}) {
        const size_t taps = c.rows * c.cols, k = taps * channels;
        const auto w = random_floats(n * channels * c.kh * c.kw, 48), scale = random_floats(n, 49);
        FilterTaps filter{taps};
        filter.kh = c.kh, filter.kw = c.kw, filter.rows = c.rows, filter.cols = c.cols, filter.row0 = c.row0,
        filter.col0 = c.col0;
        const PackedGemm gemm(w.data(), true, k, n, nullptr, filter, scale.data());
        std::vector<float> expected(((n + 15) / 16) * k * 16, 0.0f);
        for (size_t j = 0; j < n; ++j) {
          for (size_t y = 0; y < c.rows; ++y) {
            for (size_t x = 0; x < c.cols; ++x) {
              for (size_t ch = 0; ch < channels; ++ch) {
                const float v = w[((j * channels + ch) * c.kh + c.row0 + y) * c.kw + c.col0 + x];
                expected[(j / 16 * k + (y * c.cols + x) * channels + ch) * 16 + j % 16] = v * scale[j];
              }
            }
          }
        }
        const auto content = gemm.content();
        ASSERT_EQ(content[2].size(), expected.size() * sizeof(float));
        ASSERT_EQ(std::memcmp(content[2].data(), expected.data(), content[2].size()), 0)
            << c.kh << "x" << c.kw << " window " << c.rows << "x" << c.cols << " at " << c.row0 << "," << c.col0
            << " channels " << channels << " n " << n;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// DepthwiseConv (depthwise.h), NHWC: channel counts a multiple of 8 (pixel blocks, read in place or through
// padded rows, any stride) and others (the flattened-row kernel, stride 1), kernels 1 to 5 wide, padding on
// each side or none, images narrower than the kernel (every output an edge one), batches, bias or none, clamp.

TEST(DepthwiseConv, MatchesTheDefinitionAtEveryCpuLevel) {
  struct Case {
    size_t c, h, w, kh, kw, sh, sw, pad_top, pad_left, pad_bottom, pad_right;
  };
  const Case cases[] = {
      {8, 7, 9, 3, 3, 1, 1, 1, 1, 1, 1},     {16, 6, 13, 3, 3, 2, 2, 1, 1, 1, 1}, {24, 5, 21, 5, 5, 1, 1, 2, 2, 2, 2},
      {8, 4, 2, 3, 3, 1, 1, 1, 1, 1, 1},     {16, 9, 17, 3, 3, 2, 2, 0, 0, 1, 1}, {8, 5, 11, 2, 2, 2, 1, 0, 0, 0, 0},
      {32, 3, 40, 1, 3, 1, 1, 0, 1, 0, 1},   {8, 8, 8, 5, 3, 1, 2, 2, 1, 2, 1},   {3, 6, 10, 3, 3, 1, 1, 1, 1, 1, 1},
      {5, 5, 7, 3, 5, 2, 1, 0, 2, 1, 2},     {12, 4, 9, 3, 3, 1, 1, 1, 1, 1, 1},  {1, 3, 19, 1, 4, 1, 1, 0, 0, 0, 3},
  };
  at_each_cpu_level([&](CpuLevel level) {
    for (const Case& t : cases) {
      ASSERT_TRUE(DepthwiseConv::supported(t.c, t.kh, t.sh, t.sw));
      const size_t out_h = (t.h + t.pad_top + t.pad_bottom - t.kh) / t.sh + 1;
      const size_t out_w = (t.w + t.pad_left + t.pad_right - t.kw) / t.sw + 1;
      for (size_t batch : {1, 2}) {
        for (int with_bias = 0; with_bias < 2; ++with_bias) {
          const auto x = int_values(batch * t.h * t.w * t.c, 61), f = int_values(t.kh * t.kw * t.c, 62, true);
          const auto bias = int_values(t.c, 63);
          const DepthwiseConv conv(f.data(), with_bias ? bias.data() : nullptr, t.c, t.kh, t.kw, t.sh, t.sw,
                                   t.pad_top, t.pad_left);
          const float lo = with_bias ? -30.0f : -std::numeric_limits<float>::infinity();
          const float hi = with_bias ? 40.0f : std::numeric_limits<float>::infinity();
          std::vector<float> out(batch * out_h * out_w * t.c, std::numeric_limits<float>::quiet_NaN());
          std::vector<float> scratch;
          conv.run(x.data(), batch, t.h, t.w, out_h, out_w, lo, hi, out.data(), scratch);
          for (size_t b = 0; b < batch; ++b) {
            for (size_t oy = 0; oy < out_h; ++oy) {
              for (size_t ox = 0; ox < out_w; ++ox) {
                for (size_t ch = 0; ch < t.c; ++ch) {
                  double acc = with_bias ? bias[ch] : 0.0;
                  for (size_t ky = 0; ky < t.kh; ++ky) {
                    for (size_t kx = 0; kx < t.kw; ++kx) {
                      const auto iy = static_cast<ptrdiff_t>(oy * t.sh + ky) - static_cast<ptrdiff_t>(t.pad_top);
                      const auto ix = static_cast<ptrdiff_t>(ox * t.sw + kx) - static_cast<ptrdiff_t>(t.pad_left);
                      if (iy < 0 || ix < 0 || iy >= static_cast<ptrdiff_t>(t.h) || ix >= static_cast<ptrdiff_t>(t.w)) {
                        continue;
                      }
                      acc += double(x[((b * t.h + size_t(iy)) * t.w + size_t(ix)) * t.c + ch]) *
                             f[(ky * t.kw + kx) * t.c + ch];
                    }
                  }
                  acc = std::min(std::max(acc, double(lo)), double(hi));
                  ASSERT_EQ(out[((b * out_h + oy) * out_w + ox) * t.c + ch], static_cast<float>(acc))
                      << cpu_level_name(level) << " case " << (&t - cases) << " batch " << batch << " bias "
                      << with_bias << " at " << b << "," << oy << "," << ox << "," << ch;
                }
              }
            }
          }
        }
      }
    }
  });
}

// Random floats: every vector level gives the first one's bits (AVX2's, or NEON's): the same fused multiply-adds
// in the same order per output (bias, then the taps in (ky, kx) order, padding rows as zeros for the outputs whose
// columns are all inside and skipped for the others). Covers AVX-512's whole-row 3x3 and 5x5 kernels: strides 1
// and 2, channel counts with an 8-channel tail, rows narrower than a block and wider than several, none to two edge
// outputs a side.
TEST(DepthwiseConv, GivesTheSameBitsAtEveryVectorLevel) {
  struct Case {
    size_t c, h, w, kh, kw, s, pad;
  };
  const Case cases[] = {{16, 5, 14, 3, 3, 1, 1},  {144, 4, 56, 3, 3, 1, 1}, {24, 6, 7, 3, 3, 2, 1},
                        {40, 7, 13, 3, 3, 2, 1},  {8, 3, 3, 3, 3, 1, 1},    {96, 5, 21, 3, 3, 2, 0},
                        {32, 4, 12, 3, 3, 1, 0},  {72, 9, 9, 5, 5, 1, 2},   {16, 5, 30, 3, 3, 1, 2},
                        {24, 7, 20, 5, 5, 1, 2},  {40, 6, 31, 5, 5, 2, 2},  {16, 4, 17, 5, 5, 1, 0}};
  for (const Case& t : cases) {
    const size_t out_h = (t.h + 2 * t.pad - t.kh) / t.s + 1, out_w = (t.w + 2 * t.pad - t.kw) / t.s + 1;
    const auto x = random_floats(2 * t.h * t.w * t.c, 71), f = random_floats(t.kh * t.kw * t.c, 72);
    const auto bias = random_floats(t.c, 73);
    const DepthwiseConv conv(f.data(), bias.data(), t.c, t.kh, t.kw, t.s, t.s, t.pad, t.pad);
    std::vector<float> first;  // the first vector level's
    at_each_cpu_level([&](CpuLevel level) {
      if (level == CpuLevel::portable) return;
      std::vector<float> out(2 * out_h * out_w * t.c), scratch;
      conv.run(x.data(), 2, t.h, t.w, out_h, out_w, -0.9f, 0.8f, out.data(), scratch);
      if (first.empty()) {
        first = out;
        return;
      }
      ASSERT_EQ(std::memcmp(out.data(), first.data(), out.size() * sizeof(float)), 0)
          << cpu_level_name(level) << " case " << (&t - cases);
    });
  }
}

// depthwise_then_pointwise: bands of depthwise rows straight into the 1x1 convolution's GEMM give the bits of the
// two run one after the other, at 1 and 2 threads, for bands that divide the rows and bands that do not.
TEST(DepthwiseConv, ThenPointwiseGivesTheBitsOfTheTwoInTurn) {
  struct Case {
    size_t c, h, w, s, n;
  };
  const Case cases[] = {{96, 112, 112, 2, 24}, {144, 30, 30, 1, 40}, {24, 121, 65, 1, 17}};
  for (const Case& t : cases) {
    const size_t out_h = (t.h + 2 - 3) / t.s + 1, out_w = (t.w + 2 - 3) / t.s + 1;
    ASSERT_TRUE(depthwise_then_pointwise_pays(out_h, out_w, t.c)) << (&t - cases);
    const auto x = random_floats(t.h * t.w * t.c, 81), f = random_floats(9 * t.c, 82);
    const auto bias = random_floats(t.c, 83), pw = random_floats(t.n * t.c, 84), pw_bias = random_floats(t.n, 85);
    const DepthwiseConv dw(f.data(), bias.data(), t.c, 3, 3, t.s, t.s, 1, 1);
    const PackedGemm gemm(pw.data(), true, t.c, t.n, pw_bias.data());
    for (size_t threads : {1, 2}) {
      ThreadPool pool(threads);
      const ThreadPool::Use use(pool);
      std::vector<float> mid(out_h * out_w * t.c), apart(out_h * out_w * t.n), fused(apart.size()), scratch;
      dw.run(x.data(), 1, t.h, t.w, out_h, out_w, 0.0f, 6.0f, mid.data(), scratch);
      gemm.run(mid.data(), out_h * out_w, t.c, -2.0f, 2.5f, apart.data());
      depthwise_then_pointwise(dw, 0.0f, 6.0f, gemm, -2.0f, 2.5f, x.data(), 1, t.h, t.w, out_h, out_w, fused.data(),
                               scratch);
      ASSERT_EQ(std::memcmp(fused.data(), apart.data(), fused.size() * sizeof(float)), 0)
          << "case " << (&t - cases) << " threads " << threads;
    }
  }
}

// dot_rows_f32 (dot_rows.h): rows of a by weight rows read in place, every block shape (1-4 rows, 1-3 weight
// rows; one row by eight at once, with the columns past the last eight), k around the 8- and 16-float steps, the
// output pass; integer values, so exact against the definition; a NaN
// reaches exactly its row's outputs; random floats equal the portable level bit for bit (the same lanes, fused
// multiply-adds and order on every level).

TEST(DotRows, MatchesTheDefinitionAtEveryCpuLevel) {
  const float kInf = std::numeric_limits<float>::infinity();
  struct Case {
    size_t rows, n, k;
  };
  const Case cases[] = {{1, 1, 1},  {4, 2, 8},   {3, 5, 7},   {9, 37, 27}, {16, 4, 576}, {2, 3, 17},
                        {5, 1, 64}, {1, 8, 5},   {1, 17, 40}, {1, 24, 16}, {1, 11, 8},   {1, 8, 33}};
  at_each_cpu_level([&](CpuLevel level) {
    for (const Case& t : cases) {
      const size_t lda = t.k + 3, ldw = t.k + 5;  // rows apart by more than k
      const auto a = int_values(t.rows * lda, 71), w = int_values(t.n * ldw, 72, true);
      const auto scale = int_values(t.n, 73), bias = int_values(t.n, 74);
      for (int pass = 0; pass < 3; ++pass) {  // none; bias; scale, bias and a clamp
        DotRowsOut out;
        std::vector<float> c(t.rows * t.n * 2, std::numeric_limits<float>::quiet_NaN());
        out.c = c.data();
        out.row_stride = 1;
        out.col_stride = t.rows * 2;  // column-major, every other row left alone
        if (pass >= 1) out.bias = bias.data();
        if (pass == 2) out.scale = scale.data(), out.clamp = true, out.lo = -40.0f, out.hi = 50.0f;
        dot_rows_f32(a.data(), lda, t.rows, w.data(), ldw, t.n, t.k, out, nullptr);
        for (size_t p = 0; p < t.rows; ++p) {
          for (size_t j = 0; j < t.n; ++j) {
            double ref = 0;
            for (size_t i = 0; i < t.k; ++i) ref += double(a[p * lda + i]) * w[j * ldw + i];
            if (pass == 2) ref *= scale[j];
            if (pass >= 1) ref += bias[j];
            if (pass == 2) ref = std::min(std::max(ref, -40.0), 50.0);
            ASSERT_EQ(c[p + j * out.col_stride], static_cast<float>(ref))
                << cpu_level_name(level) << " rows " << t.rows << " n " << t.n << " k " << t.k << " pass " << pass
                << " at " << p << "," << j;
          }
        }
        for (size_t i = t.rows; i < c.size(); i += out.col_stride) {
          for (size_t r = 0; r < t.rows && i + r < c.size(); ++r) ASSERT_TRUE(std::isnan(c[i + r])) << "written past";
        }
      }
      // One NaN input: the outputs of its row are NaN, the clamp keeps them, the other rows are untouched.
      auto with_nan = a;
      const size_t nan_row = t.rows / 2;
      with_nan[nan_row * lda + t.k / 2] = std::numeric_limits<float>::quiet_NaN();
      std::vector<float> c(t.rows * t.n);
      DotRowsOut out;
      out.c = c.data();
      out.row_stride = t.n;
      out.col_stride = 1;
      out.clamp = true;
      out.lo = -kInf;
      out.hi = 0.0f;
      dot_rows_f32(with_nan.data(), lda, t.rows, w.data(), ldw, t.n, t.k, out, nullptr);
      for (size_t p = 0; p < t.rows; ++p) {
        for (size_t j = 0; j < t.n; ++j) {
          ASSERT_EQ(std::isnan(c[p * t.n + j]), p == nan_row) << cpu_level_name(level) << " at " << p << "," << j;
        }
      }
    }
  });
}

TEST(DotRows, RandomFloatsEqualThePortableLevelAndSplitAcrossThreadsTheSame) {
  const size_t n = 301, k = 1153;
  for (size_t rows : {7, 1}) {
    const auto a = random_floats(rows * k, 81), w = random_floats(n * k, 82);
    auto run = [&](ThreadPool* pool) {
      std::vector<float> c(rows * n);
      DotRowsOut out;
      out.c = c.data();
      out.row_stride = n;
      dot_rows_f32(a.data(), k, rows, w.data(), k, n, k, out, pool);
      return c;
    };
    std::vector<float> portable;
    at_each_cpu_level([&](CpuLevel level) {  // the portable level first
      const std::vector<float> single = run(nullptr);
      if (level == CpuLevel::portable) portable = single;
      EXPECT_EQ(single, portable) << cpu_level_name(level) << ", " << rows << " rows";
      ThreadPool pool(2);
      EXPECT_EQ(run(&pool), portable) << cpu_level_name(level) << ", " << rows << " rows on 2 threads";
    });
  }
}

// ---------------------------------------------------------------------------------------------------------
// Vector math (vector_math.h): each level's routine (none at the portable level) within the accuracy the
// element-wise kernels are held to, lengths around the 4- and 8-lane widths; softmax at each level.

TEST(VectorMath, RoutinesMatchTheScalarFunctionsAtEveryCpuLevel) {
  struct Case {
    VectorOp op;
    double (*ref)(double);
    float lo, hi;
    double abs_floor = 1e-37;  // absolute tolerance where the result crosses zero
  };
  const Case cases[] = {
      {VectorOp::Exp, [](double x) { return std::exp(x); }, -87.0f, 88.0f},
      {VectorOp::Expm1, [](double x) { return std::expm1(x); }, -20.0f, 20.0f},
      {VectorOp::Log, [](double x) { return std::log(x); }, 1e-30f, 1e30f},
      {VectorOp::Log1p, [](double x) { return std::log1p(x); }, -0.99f, 1e6f},
      {VectorOp::Log2, [](double x) { return std::log2(x); }, 1e-20f, 1e20f},
      {VectorOp::Log10, [](double x) { return std::log10(x); }, 1e-20f, 1e20f},
      {VectorOp::Sin, [](double x) { return std::sin(x); }, -100.0f, 100.0f, 1e-7},
      {VectorOp::Cos, [](double x) { return std::cos(x); }, -100.0f, 100.0f, 1e-7},
      {VectorOp::Tan, [](double x) { return std::tan(x); }, -1.5f, 1.5f},
      {VectorOp::Tanh, [](double x) { return std::tanh(x); }, -12.0f, 12.0f},
      {VectorOp::Atan, [](double x) { return std::atan(x); }, -1e4f, 1e4f},
      {VectorOp::Erf, [](double x) { return std::erf(x); }, -5.0f, 5.0f},
      {VectorOp::Sigmoid, [](double x) { return 1.0 / (1.0 + std::exp(-x)); }, -90.0f, 90.0f},
      {VectorOp::Silu, [](double x) { return x / (1.0 + std::exp(-x)); }, -20.0f, 20.0f},
      {VectorOp::Hardswish, [](double x) { return x * std::clamp(x + 3.0, 0.0, 6.0) / 6.0; }, -8.0f, 8.0f},
      {VectorOp::Hardsigmoid, [](double x) { return std::clamp(x + 3.0, 0.0, 6.0) / 6.0; }, -8.0f, 8.0f},
  };
  at_each_cpu_level([&](CpuLevel level) {
    std::mt19937 rng(7);
    for (const Case& c : cases) {
      const VectorF32Fn fn = vector_f32(c.op);
      if (level == CpuLevel::portable) {
        ASSERT_EQ(fn, nullptr) << "the portable level runs the scalar loops";
        continue;
      }
      if (fn == nullptr) continue;  // a build without Sleef
      for (size_t n : {1, 3, 4, 5, 7, 8, 9, 1001}) {
        std::uniform_real_distribution<float> dist(c.lo, c.hi);
        std::vector<float> x(n), y(n);
        for (float& v : x) v = dist(rng);
        fn(x.data(), y.data(), n);
        for (size_t i = 0; i < n; ++i) {
          const double ref = c.ref(double(x[i]));
          const double tol = std::max(2.5 * std::abs(ref) * std::numeric_limits<float>::epsilon(), c.abs_floor);
          ASSERT_NEAR(y[i], ref, tol) << cpu_level_name(level) << " op " << int(c.op) << " n=" << n << " x=" << x[i];
        }
      }
      // In place, as the element-wise kernels call it.
      std::vector<float> x = {0.5f, 1.0f, 2.0f, 0.25f, 3.0f};
      std::vector<float> y(x.size());
      fn(x.data(), y.data(), x.size());
      fn(x.data(), x.data(), x.size());
      EXPECT_EQ(x, y) << cpu_level_name(level);
    }
  });
}

TEST(VectorMath, SoftmaxMatchesTheDefinitionAtEveryCpuLevel) {
  at_each_cpu_level([&](CpuLevel level) {
    for (size_t len : {1, 3, 4, 7, 8, 9, 100}) {
      auto x = random_floats(3 * len, 51);
      for (float& v : x) v *= 20.0f;
      x[0] = 1000.0f;  // large inputs do not overflow
      std::vector<float> y(x.size());
      softmax_rows_f32(x.data(), y.data(), 3, len);
      for (size_t r = 0; r < 3; ++r) {
        const float* row = x.data() + r * len;
        const double mx = *std::max_element(row, row + len);
        double sum = 0.0;
        for (size_t j = 0; j < len; ++j) sum += std::exp(double(row[j]) - mx);
        for (size_t j = 0; j < len; ++j) {
          const double want = std::exp(double(row[j]) - mx) / sum;
          ASSERT_NEAR(y[r * len + j], want, 4e-7 + 1e-6 * want) << cpu_level_name(level) << " len " << len;
        }
      }
    }
    const std::vector<float> with_nan = {1.0f, std::numeric_limits<float>::quiet_NaN(), 2.0f, 0.0f, 1.0f};
    std::vector<float> y(with_nan.size());
    softmax_rows_f32(with_nan.data(), y.data(), 1, with_nan.size());
    for (float v : y) EXPECT_TRUE(std::isnan(v)) << cpu_level_name(level);
  });
}

}  // namespace
}  // namespace etnp::compute

namespace etnp::compute {
namespace {

// A NaN input makes NaN outputs through every clamp, at every level (XNNPACK's max(min, x) order, which the
// official runtime's outputs show, and aten::clamp's): the GEMM micro-kernels (6x16 and narrow), the packed
// GEMM's single-row path and its tiles, and both depthwise kernels. Before, the AVX2 kernels turned NaN into
// the lower bound (-inf when unclamped).
TEST(F32Kernels, ClampsKeepNaNAtEveryCpuLevel) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  at_each_cpu_level([&](CpuLevel level) {
    for (const float lo : {-inf, 0.0f}) {
      const float hi = lo == 0.0f ? 6.0f : inf;
      const std::string where = std::string(cpu_level_name(level)) + (lo == 0.0f ? " clamped" : " unclamped");
      // Packed GEMM, k = 9, n = 24 (a full panel and a narrow one), rows 1 (GEMV) and 7 (tiles): row 0 has a NaN.
      std::vector<float> w = int_values(24 * 9, 71, true);
      const PackedGemm gemm(w.data(), true, 9, 24, nullptr);
      for (size_t rows : {1, 7}) {
        std::vector<float> in = int_values(rows * 9, 72);
        in[4] = nan;
        std::vector<float> out(rows * 24, 0.0f);
        gemm.run(in.data(), rows, 9, lo, hi, out.data());
        for (size_t j = 0; j < 24; ++j) ASSERT_TRUE(std::isnan(out[j])) << where << " rows " << rows << " at " << j;
        for (size_t i = 24; i < out.size(); ++i) ASSERT_FALSE(std::isnan(out[i])) << where << " at " << i;
      }
      // Depthwise, 8 channels (pixel blocks) and 3 (flattened rows): pixel (0, 0) of channel 1 is NaN.
      for (size_t c : {8, 3}) {
        const auto f = int_values(9 * c, 73, true);
        const DepthwiseConv conv(f.data(), nullptr, c, 3, 3, 1, 1, 1, 1);
        std::vector<float> x = int_values(5 * 6 * c, 74);
        x[1] = nan;
        std::vector<float> out(5 * 6 * c, 0.0f), scratch;
        conv.run(x.data(), 1, 5, 6, 5, 6, lo, hi, out.data(), scratch);
        for (size_t y = 0; y < 5; ++y) {
          for (size_t xx = 0; xx < 6; ++xx) {
            for (size_t ch = 0; ch < c; ++ch) {
              const bool touches = ch == 1 && y <= 1 && xx <= 1;  // the 3x3 windows over pixel (0, 0)
              ASSERT_EQ(std::isnan(out[(y * 6 + xx) * c + ch]), touches)
                  << where << " channels " << c << " at " << y << "," << xx << "," << ch;
            }
          }
        }
      }
    }
  });
}

}  // namespace
}  // namespace etnp::compute
