// The XNNPACK delegate's own kernels (the nodes Debian's 2022 XNNPACK cannot run), against hand-computed
// values.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "cpu_levels.h"
#include "etnp/threadpool.h"
#include "compute/conv_indirect.h"
#include "compute/depthwise.h"
#include "compute/packed_gemm.h"
#include "compute/vector_math.h"
#include "backends/xnnpack/conv_qs8.h"
#include "backends/xnnpack/xnn_kernels.h"
#include "backends/xnnpack/xnn_ops.h"
#include "backends/xnnpack/xnn_shape.h"

namespace etnp::xnn {

using compute::Conv2dGeometry;
using compute::DepthwiseConv;
using compute::PackedGemm;
using compute::conv2d_indirect;
namespace {

Shape shape(std::initializer_list<size_t> dims) {
  Shape s;
  for (size_t d : dims) s[s.rank++] = d;
  return s;
}

std::vector<float> iota_f(size_t n, float start = 0.0f) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(XnnpackKernels, TransposeNchwToNhwc) {
  // [1, 2, 2, 3] (N, C, H, W) -> perm (0, 2, 3, 1) -> [1, 2, 3, 2].
  const std::vector<float> in = iota_f(12);
  std::vector<float> out(12, -1.0f);
  const size_t perm[] = {0, 2, 3, 1};
  transpose(in.data(), out.data(), shape({1, 2, 2, 3}), perm, sizeof(float));
  // out[0, h, w, c] = in[0, c, h, w] = c * 6 + h * 3 + w.
  const std::vector<float> expected = {0, 6, 1, 7, 2, 8, 3, 9, 4, 10, 5, 11};
  EXPECT_EQ(out, expected);
}

TEST(XnnpackKernels, TransposeRank3Middle) {
  // [2, 3, 2] -> perm (1, 0, 2): the innermost dim stays contiguous.
  const std::vector<float> in = iota_f(12);
  std::vector<float> out(12);
  const size_t perm[] = {1, 0, 2};
  transpose(in.data(), out.data(), shape({2, 3, 2}), perm, sizeof(float));
  const std::vector<float> expected = {0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11};
  EXPECT_EQ(out, expected);
}

TEST(XnnpackKernels, TransposeBytesAndLargeTiles) {
  // int8 [37, 70] -> [70, 37] crosses several 32x32 tiles with ragged edges.
  const size_t rows = 37, cols = 70;
  std::vector<int8_t> in(rows * cols), out(rows * cols);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int8_t>(i * 7);
  const size_t perm[] = {1, 0};
  transpose(in.data(), out.data(), shape({rows, cols}), perm, 1);
  for (size_t r = 0; r < rows; ++r) {
    for (size_t c = 0; c < cols; ++c) ASSERT_EQ(out[c * rows + r], in[r * cols + c]) << r << "," << c;
  }
}

TEST(XnnpackKernels, TransposeFloatMatricesAllSizes) {
  // Sizes around the 8x8 SIMD blocks and the 32x32 tiles, batched (rank 3, swapping the last two dims), at each
  // level (AVX2's 8x8 block, NEON's four 4x4 ones, the scalar loop).
  testing::at_each_cpu_level([&](CpuLevel level) {
    SCOPED_TRACE(cpu_level_name(level));
    for (size_t rows : {1, 7, 8, 9, 16, 33, 64}) {
      for (size_t cols : {1, 3, 8, 13, 40, 128}) {
        const size_t batch = 2;
        std::vector<float> in(batch * rows * cols), out(in.size(), -1.0f);
        for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i);
        const size_t perm[] = {0, 2, 1};
        transpose(in.data(), out.data(), shape({batch, rows, cols}), perm, sizeof(float));
        for (size_t b = 0; b < batch; ++b) {
          for (size_t r = 0; r < rows; ++r) {
            for (size_t c = 0; c < cols; ++c) {
              ASSERT_EQ(out[(b * cols + c) * rows + r], in[(b * rows + r) * cols + c]) << rows << "x" << cols;
            }
          }
        }
      }
    }
  });
}

TEST(XnnpackKernels, TransposeThreePlanesToPixels) {
  // RGB images NCHW -> NHWC, the layout change before a CNN's first convolution: the eight-pixel interleave,
  // pixel counts that leave a tail, and a plane large enough to split across the pool; at each level (AVX2's
  // permutes and blends, NEON's st3, the scalar loop).
  testing::at_each_cpu_level([&](CpuLevel level) {
    SCOPED_TRACE(cpu_level_name(level));
    for (const auto& [h, w] : {std::pair<size_t, size_t>{1, 1}, {2, 4}, {5, 7}, {224, 224}, {300, 301}}) {
      const size_t batch = 2, pixels = h * w;
      std::vector<float> in(batch * 3 * pixels), out(in.size(), -1.0f);
      for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i);
      const size_t perm[] = {0, 2, 3, 1};
      transpose(in.data(), out.data(), shape({batch, 3, h, w}), perm, sizeof(float));
      for (size_t b = 0; b < batch; ++b) {
        for (size_t p = 0; p < pixels; ++p) {
          for (size_t c = 0; c < 3; ++c) {
            ASSERT_EQ(out[(b * pixels + p) * 3 + c], in[(b * 3 + c) * pixels + p]) << h << "x" << w << " " << p;
          }
        }
      }
      // The same for a quantized (int8) image.
      std::vector<int8_t> in8(in.size()), out8(in.size(), 0);
      for (size_t i = 0; i < in8.size(); ++i) in8[i] = static_cast<int8_t>(i * 7);
      transpose(in8.data(), out8.data(), shape({batch, 3, h, w}), perm, 1);
      for (size_t b = 0; b < batch; ++b) {
        for (size_t p = 0; p < pixels; ++p) {
          for (size_t c = 0; c < 3; ++c) {
            ASSERT_EQ(out8[(b * pixels + p) * 3 + c], in8[(b * 3 + c) * pixels + p]) << h << "x" << w << " " << p;
          }
        }
      }
    }
  });
}

TEST(XnnpackKernels, TransposeOnlySizeOneDimsIsCopy) {
  const std::vector<float> in = iota_f(5);
  std::vector<float> out(5);
  const size_t perm[] = {0, 3, 1, 2};
  transpose(in.data(), out.data(), shape({1, 1, 1, 5}), perm, sizeof(float));
  EXPECT_EQ(out, in);
}

TEST(XnnpackKernels, ConcatenateMiddleAxis) {
  // [2, 1, 2] ++ [2, 2, 2] along axis 1 -> [2, 3, 2].
  const std::vector<float> a = {1, 2, 3, 4};
  const std::vector<float> b = {10, 11, 12, 13, 14, 15, 16, 17};
  std::vector<float> out(12);
  const void* ptrs[] = {a.data(), b.data()};
  const Shape shapes[] = {shape({2, 1, 2}), shape({2, 2, 2})};
  concatenate(ptrs, shapes, 1, out.data(), sizeof(float));
  const std::vector<float> expected = {1, 2, 10, 11, 12, 13, 3, 4, 14, 15, 16, 17};
  EXPECT_EQ(out, expected);
}

TEST(XnnpackKernels, ConcatenateLastAxisInterleaves) {
  // Along the last axis with runs of 1..4 elements of 1, 2 and 4 bytes from 2 or 3 inputs (RoPE's stack of
  // halves: the fixed-size copies), and runs of unequal length: element by element against the definition.
  for (size_t elem : {1, 2, 4}) {
    for (size_t inputs : {2, 3}) {
      for (size_t run : {1, 2, 3, 4}) {
        const size_t outer = 37;
        std::vector<std::vector<uint8_t>> in(inputs);
        std::vector<Shape> shapes;
        std::vector<const void*> ptrs;
        std::vector<size_t> runs;
        for (size_t j = 0; j < inputs; ++j) {
          const size_t r = j == 2 ? run + 1 : run;  // the third input's runs differ: the general path
          runs.push_back(r);
          in[j].resize(outer * r * elem);
          for (size_t i = 0; i < in[j].size(); ++i) in[j][i] = static_cast<uint8_t>(i * 7 + j * 101);
          shapes.push_back(shape({outer, r}));
          ptrs.push_back(in[j].data());
        }
        size_t total = 0;
        for (size_t r : runs) total += r;
        std::vector<uint8_t> out(outer * total * elem), want;
        concatenate(ptrs, shapes, 1, out.data(), elem);
        for (size_t o = 0; o < outer; ++o) {
          for (size_t j = 0; j < inputs; ++j) {
            want.insert(want.end(), in[j].begin() + o * runs[j] * elem, in[j].begin() + (o + 1) * runs[j] * elem);
          }
        }
        ASSERT_EQ(out, want) << elem << "-byte elements, " << inputs << " inputs, runs of " << run;
      }
    }
  }
}

TEST(XnnpackKernels, SliceAndPad) {
  // in [3, 4] = 0..11; slice rows 1..2, cols 1..3 -> [[5, 6], [9, 10]].
  const std::vector<float> in = iota_f(12);
  std::vector<float> sliced(4);
  const size_t offsets[] = {1, 1};
  slice(in.data(), shape({3, 4}), offsets, shape({2, 2}), sliced.data(), sizeof(float));
  EXPECT_EQ(sliced, (std::vector<float>{5, 6, 9, 10}));

  // Pad [2, 2] by (1 before, 0 after) rows and (0, 1) cols with -1 -> [3, 3].
  std::vector<float> padded(9);
  const float pad = -1.0f;
  const size_t pre[] = {1, 0};
  constant_pad(sliced.data(), shape({2, 2}), pre, shape({3, 3}), &pad, padded.data(), sizeof(float));
  EXPECT_EQ(padded, (std::vector<float>{-1, -1, -1, 5, 6, -1, 9, 10, -1}));
}

TEST(XnnpackKernels, BatchMatmulBroadcastAndTranspose) {
  // a [2, 2, 3], b [3, 2] broadcast over the batch.
  const std::vector<float> a = {1, 2, 3, 4, 5, 6, -1, 0, 1, 2, 2, 2};
  const std::vector<float> b = {1, 0, 0, 1, 1, 1};  // [[1,0],[0,1],[1,1]]
  std::vector<float> out(8);
  batch_matmul_f32(a.data(), shape({2, 2, 3}), b.data(), shape({3, 2}), false, out.data(), shape({2, 2, 2}));
  EXPECT_EQ(out, (std::vector<float>{4, 5, 10, 11, 0, 1, 4, 4}));

  // Same product with b given as [N, K] = [[1, 0, 1], [0, 1, 1]].
  const std::vector<float> bt = {1, 0, 1, 0, 1, 1};
  std::vector<float> out_t(8);
  batch_matmul_f32(a.data(), shape({2, 2, 3}), bt.data(), shape({2, 3}), true, out_t.data(), shape({2, 2, 2}));
  EXPECT_EQ(out_t, out);
}

TEST(XnnpackKernels, BatchMatmulSplitsItsProductsAcrossThreadsWithTheSameBits) {
  // [2, 3] products of 40 x 48 by 48 x 40 (B broadcast over the first batch dim), enough work to split by
  // product: each product is the one-thread result, bit for bit, and matches a double-precision reference.
  const size_t m = 40, k = 48, n = 40;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> a(6 * m * k), b(3 * k * n);
  for (auto& v : a) v = dist(rng);
  for (auto& v : b) v = dist(rng);
  for (bool transpose_b : {false, true}) {
    const Shape b_shape = transpose_b ? shape({3, int64_t(n), int64_t(k)}) : shape({3, int64_t(k), int64_t(n)});
    const Shape out_shape = shape({2, 3, int64_t(m), int64_t(n)});
    std::vector<float> one(6 * m * n), two(6 * m * n);
    ThreadPool one_thread(1), pool(2);
    {
      ThreadPool::Use use(one_thread);
      batch_matmul_f32(a.data(), shape({2, 3, int64_t(m), int64_t(k)}), b.data(), b_shape, transpose_b, one.data(),
                       out_shape);
    }
    {
      ThreadPool::Use use(pool);
      batch_matmul_f32(a.data(), shape({2, 3, int64_t(m), int64_t(k)}), b.data(), b_shape, transpose_b, two.data(),
                       out_shape);
    }
    for (size_t i = 0; i < one.size(); ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(two[i]), std::bit_cast<uint32_t>(one[i])) << i;
    }
    for (size_t p = 0; p < 6; ++p) {
      const float* bp = b.data() + (p % 3) * k * n;
      for (size_t i = 0; i < m; ++i) {
        for (size_t j = 0; j < n; ++j) {
          double want = 0;
          for (size_t q = 0; q < k; ++q) {
            want += double(a[(p * m + i) * k + q]) * (transpose_b ? bp[j * k + q] : bp[q * n + j]);
          }
          ASSERT_NEAR(two[(p * m + i) * n + j], want, 1e-4) << "product " << p << " (" << i << ", " << j << ")";
        }
      }
    }
  }
}

TEST(XnnpackKernels, LinearMatchesNaive) {
  const size_t rows = 7, k = 300, n = 33;
  std::vector<float> x(rows * k), w(n * k), bias(n);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37) % 11) - 5.0f;
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>((i * 13) % 7) - 3.0f;
  for (size_t i = 0; i < n; ++i) bias[i] = static_cast<float>(i);
  // W as [N, K] (fully-connected layout) and the same W as [K, N].
  std::vector<float> w_kn(k * n);
  for (size_t j = 0; j < n; ++j) {
    for (size_t i = 0; i < k; ++i) w_kn[i * n + j] = w[j * k + i];
  }
  std::vector<float> out(rows * n), out_kn(rows * n);
  linear_f32(x.data(), rows, k, w.data(), true, n, bias.data(), -1000.0f, 1000.0f, out.data());
  linear_f32(x.data(), rows, k, w_kn.data(), false, n, bias.data(), -1000.0f, 1000.0f, out_kn.data());
  for (size_t r = 0; r < rows; ++r) {
    for (size_t j = 0; j < n; ++j) {
      double acc = bias[j];
      for (size_t i = 0; i < k; ++i) acc += double(x[r * k + i]) * w[j * k + i];
      acc = std::min(std::max(acc, -1000.0), 1000.0);
      ASSERT_EQ(out[r * n + j], static_cast<float>(acc)) << r << "," << j;  // small integers: exact
      ASSERT_EQ(out_kn[r * n + j], static_cast<float>(acc)) << r << "," << j;
    }
  }
}

TEST(XnnpackKernels, PackedGemmMatchesNaive) {
  // Row counts around the 6-row tile, K across the 256-deep blocks, N around the 16-column panels, both
  // weight layouts, strided input rows, with and without bias and clamp.
  for (size_t m : {1, 5, 6, 13}) {
    for (size_t k : {1, 7, 256, 300, 513}) {
      for (size_t n : {1, 15, 16, 17, 40}) {
        for (int variant = 0; variant < 2; ++variant) {
          const bool nk = variant == 0;
          const size_t stride = k + (variant == 1 ? 3 : 0);
          std::vector<float> x(m * stride), w(n * k), bias(n);
          for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37) % 11) - 5.0f;
          for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>((i * 13) % 7) - 3.0f;
          for (size_t j = 0; j < n; ++j) bias[j] = static_cast<float>(j % 5);
          const float lo = variant == 0 ? -std::numeric_limits<float>::infinity() : -50.0f;
          const float hi = variant == 0 ? std::numeric_limits<float>::infinity() : 60.0f;
          const PackedGemm gemm(w.data(), nk, k, n, variant == 0 ? bias.data() : nullptr);
          std::vector<float> out(m * n, -1.0f);
          gemm.run(x.data(), m, stride, lo, hi, out.data());
          for (size_t r = 0; r < m; ++r) {
            for (size_t j = 0; j < n; ++j) {
              double acc = variant == 0 ? bias[j] : 0.0;
              for (size_t i = 0; i < k; ++i) acc += double(x[r * stride + i]) * (nk ? w[j * k + i] : w[i * n + j]);
              acc = std::min(std::max(acc, double(lo)), double(hi));
              ASSERT_EQ(out[r * n + j], static_cast<float>(acc)) << m << "x" << k << "x" << n << " v" << variant;
            }
          }
        }
      }
    }
  }
}

TEST(XnnpackKernels, PackedGemmSplitsFewRowsByTheEvenerShare) {
  // Two threads: rows in whole 6-row tiles when they divide as evenly as the 16-column panels, else panels.
  EXPECT_FALSE(PackedGemm::split_rows(9, 63, 2));   // 6 + 3 rows; 32 + 31 panels (squeezenet's last 3x3 map)
  EXPECT_TRUE(PackedGemm::split_rows(12, 63, 2));   // 6 + 6 rows
  EXPECT_FALSE(PackedGemm::split_rows(64, 48, 2));  // 36 + 28 rows; 24 + 24 panels
  EXPECT_TRUE(PackedGemm::split_rows(200, 10, 2));  // many rows
  EXPECT_FALSE(PackedGemm::split_rows(1, 100, 2));  // one tile
  EXPECT_TRUE(PackedGemm::split_rows(9, 1, 2));     // one panel
  // Either split gives every output the sums of one thread, bit for bit.
  std::mt19937 rng(6);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  ThreadPool pool(2);
  for (size_t rows : {9, 12}) {
    const size_t k = 512, n = 1000;
    std::vector<float> x(rows * k), w(n * k), bias(n);
    for (auto& v : x) v = dist(rng);
    for (auto& v : w) v = dist(rng);
    for (auto& v : bias) v = dist(rng);
    const PackedGemm gemm(w.data(), true, k, n, bias.data());
    std::vector<float> one(rows * n), two(rows * n);
    {
      ThreadPool one_thread(1);
      ThreadPool::Use use(one_thread);
      gemm.run(x.data(), rows, k, 0.0f, std::numeric_limits<float>::infinity(), one.data());
    }
    {
      ThreadPool::Use use(pool);
      gemm.run(x.data(), rows, k, 0.0f, std::numeric_limits<float>::infinity(), two.data());
    }
    for (size_t i = 0; i < one.size(); ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(one[i]), std::bit_cast<uint32_t>(two[i])) << rows << " rows, at " << i;
    }
  }
}

TEST(XnnpackKernels, PackedGemmOneRowHasTheMicroKernelsBits) {
  // A single row (decoding) streams each panel whole; its sums must be the micro-kernel's, bit for bit, which
  // row 0 of a several-row product gives. Random floats (rounding differs with any other order), K across
  // the 256-deep blocks and not a multiple of 4, a partial last panel, one thread and two (panels split).
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  ThreadPool pool(2);
  for (size_t threads : {1, 2}) {
    for (size_t k : {3, 255, 577, 1000}) {
      for (size_t n : {17, 49, 1536}) {
        std::vector<float> x(7 * k), w(n * k), bias(n);
        for (auto& v : x) v = dist(rng);
        for (auto& v : w) v = dist(rng);
        for (auto& v : bias) v = dist(rng);
        const PackedGemm gemm(w.data(), true, k, n, bias.data());
        std::vector<float> one(n), many(7 * n);
        {
          ThreadPool::Use use(threads == 2 ? pool : ThreadPool::global());
          gemm.run(x.data(), 1, k, -0.5f, std::numeric_limits<float>::infinity(), one.data());
        }
        gemm.run(x.data(), 7, k, -0.5f, std::numeric_limits<float>::infinity(), many.data());
        for (size_t j = 0; j < n; ++j) {
          ASSERT_EQ(std::bit_cast<uint32_t>(one[j]), std::bit_cast<uint32_t>(many[j])) << k << "x" << n << " at " << j;
        }
      }
    }
  }
}

TEST(XnnpackKernels, IndirectConvolutionMatchesNaive) {
  // Batches, strides, padding on every side, dilation and channel counts around the GEMM's tiles and
  // panels, at one thread and at three (each thread pads its rows and multiplies its own share of the
  // pixels, or for a few pixels of the output channels; the larger cases pass the size from which the work is
  // split).
  struct Case {
    size_t batch, h, w, c, cout, kh, kw, stride, dilation, pad;
  };
  const Case cases[] = {{1, 5, 6, 3, 16, 3, 3, 1, 1, 1}, {3, 9, 8, 3, 17, 3, 3, 2, 1, 1},
                        {2, 32, 32, 16, 32, 3, 3, 2, 1, 1}, {1, 57, 31, 5, 40, 3, 5, 1, 2, 2},
                        {2, 23, 29, 24, 24, 2, 2, 2, 1, 0},
                        // Taps that read only padding are skipped: DeepLab's atrous 3x3 over a 4x4 map (the centre
                        // tap alone), dead kernel rows, dead columns between live taps, a 5x5 kernel on one pixel,
                        // live taps whose rectangle starts inside the image (the padding moved below zero), and no
                        // live tap at all (every output the bias).
                        {1, 4, 4, 16, 20, 3, 3, 1, 12, 12}, {2, 3, 20, 5, 17, 3, 3, 1, 4, 4},
                        {1, 20, 3, 5, 17, 3, 3, 1, 4, 4}, {1, 1, 1, 8, 16, 5, 5, 1, 1, 2},
                        {1, 5, 5, 3, 16, 3, 3, 1, 3, 1}, {1, 1, 1, 3, 16, 1, 1, 2, 1, 1},
                        // A last map of a few pixels and many channels: the threads split the output channels.
                        {1, 2, 2, 128, 136, 3, 3, 1, 1, 1}};
  for (size_t threads : {1, 3}) {
    ThreadPool::global().set_num_threads(threads);
    for (const Case& t : cases) {
      Conv2dGeometry g;
      g.in_h = t.h;
      g.in_w = t.w;
      g.channels = t.c;
      g.kernel_h = t.kh;
      g.kernel_w = t.kw;
      g.stride_h = g.stride_w = t.stride;
      g.dilation_h = g.dilation_w = t.dilation;
      g.pad_top = g.pad_left = t.pad;
      g.out_h = (t.h + 2 * t.pad - t.dilation * (t.kh - 1) - 1) / t.stride + 1;
      g.out_w = (t.w + 2 * t.pad - t.dilation * (t.kw - 1) - 1) / t.stride + 1;
      std::vector<float> x(t.batch * t.h * t.w * t.c), f(t.cout * t.kh * t.kw * t.c), bias(t.cout);
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37) % 11) - 5.0f;
      for (size_t i = 0; i < f.size(); ++i) f[i] = static_cast<float>((i * 13) % 7) - 3.0f;
      for (size_t j = 0; j < t.cout; ++j) bias[j] = static_cast<float>(j % 5);
      const PackedGemm gemm(f.data(), true, g.patch(), t.cout, bias.data());
      std::vector<float> out(t.batch * g.out_h * g.out_w * t.cout, -1.0f);
      compute::Conv2dScratch scratch;
      conv2d_indirect(gemm, g, t.batch, x.data(), -200.0f, 200.0f, out.data(), scratch);
      for (size_t b = 0; b < t.batch; ++b) {
        for (size_t oy = 0; oy < g.out_h; ++oy) {
          for (size_t ox = 0; ox < g.out_w; ++ox) {
            for (size_t o = 0; o < t.cout; ++o) {
              double acc = bias[o];
              for (size_t ky = 0; ky < t.kh; ++ky) {
                for (size_t kx = 0; kx < t.kw; ++kx) {
                  const auto pad = static_cast<ptrdiff_t>(t.pad);
                  const auto iy = static_cast<ptrdiff_t>(oy * t.stride + ky * t.dilation) - pad;
                  const auto ix = static_cast<ptrdiff_t>(ox * t.stride + kx * t.dilation) - pad;
                  const bool inside = iy >= 0 && ix >= 0 && iy < static_cast<ptrdiff_t>(t.h) &&
                                      ix < static_cast<ptrdiff_t>(t.w);
                  if (!inside) continue;
                  for (size_t ci = 0; ci < t.c; ++ci) {
                    acc += double(x[((b * t.h + size_t(iy)) * t.w + size_t(ix)) * t.c + ci]) *
                           f[((o * t.kh + ky) * t.kw + kx) * t.c + ci];
                  }
                }
              }
              acc = std::min(std::max(acc, -200.0), 200.0);
              ASSERT_EQ(out[((b * g.out_h + oy) * g.out_w + ox) * t.cout + o], static_cast<float>(acc))
                  << threads << " threads, case " << (&t - cases) << " at " << b << "," << oy << "," << ox << "," << o;
            }
          }
        }
      }
    }
  }
  ThreadPool::global().set_num_threads(0);
}

TEST(XnnpackKernels, UnaryTranscendentals) {
  const std::vector<float> x = {-2.0f, -0.5f, 0.0f, 0.25f, 1.0f, 3.0f};
  std::vector<float> y(x.size());
  const float inf = std::numeric_limits<float>::infinity();
  unary_f32(NodeKind::Tanh, x.data(), y.data(), x.size(), 0, -inf, inf);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_FLOAT_EQ(y[i], std::tanh(x[i]));
  unary_f32(NodeKind::Gelu, x.data(), y.data(), x.size(), 0, -inf, inf);
  EXPECT_NEAR(y[4], 0.8413447f, 1e-6f);  // 1 * Phi(1)
  EXPECT_NEAR(y[0], -0.0455003f, 1e-6f);  // -2 * Phi(-2)
  EXPECT_EQ(y[2], 0.0f);
  const std::vector<float> pos = {0.25f, 1.0f, 4.0f};
  std::vector<float> r(3);
  unary_f32(NodeKind::ReciprocalSquareRoot, pos.data(), r.data(), 3, 0, -inf, inf);
  EXPECT_EQ(r, (std::vector<float>{2.0f, 1.0f, 0.5f}));
  unary_f32(NodeKind::Exp, x.data(), y.data(), x.size(), 0, -inf, 5.0f);  // clamped above at 5
  EXPECT_FLOAT_EQ(y[4], std::exp(1.0f));
  EXPECT_EQ(y[5], 5.0f);
  unary_f32(NodeKind::LeakyReLU, x.data(), y.data(), x.size(), 0.1f, -inf, inf);
  EXPECT_FLOAT_EQ(y[0], -0.2f);
  EXPECT_EQ(y[5], 3.0f);
}

TEST(XnnpackKernels, BinaryBroadcast) {
  // [2, 3] - [3] and [2, 1] * [1, 3].
  const std::vector<float> a = {1, 2, 3, 4, 5, 6};
  const std::vector<float> b = {1, 1, 2};
  std::vector<float> out(6);
  const float inf = std::numeric_limits<float>::infinity();
  binary_f32(NodeKind::Subtract, a.data(), shape({2, 3}), b.data(), shape({3}), out.data(), shape({2, 3}), -inf, inf);
  EXPECT_EQ(out, (std::vector<float>{0, 1, 1, 3, 4, 4}));
  const std::vector<float> col = {2, -1};
  const std::vector<float> row = {1, 2, 3};
  binary_f32(NodeKind::Multiply, col.data(), shape({2, 1}), row.data(), shape({1, 3}), out.data(), shape({2, 3}), -2.0f,
             inf);
  EXPECT_EQ(out, (std::vector<float>{2, 4, 6, -1, -2, -2}));
  Shape r;
  EXPECT_FALSE(broadcast_shape(shape({2, 3}), shape({2}), r));
}

TEST(XnnpackKernels, Softmax) {
  const std::vector<float> x = {0.0f, 0.0f, std::log(2.0f), 1000.0f, 1000.0f, 1000.0f};
  std::vector<float> y(6);
  compute::softmax_rows_f32(x.data(), y.data(), 2, 3);
  EXPECT_FLOAT_EQ(y[0], 0.25f);
  EXPECT_FLOAT_EQ(y[2], 0.5f);
  EXPECT_FLOAT_EQ(y[3], 1.0f / 3.0f);  // large inputs do not overflow
}

TEST(XnnpackKernels, DynamicQuantParams) {
  // Range [-1, 3]: inverse scale 255 / 4; the zero point comes from the side with the smaller error.
  DynamicQuantParams p = compute_dynamic_quant_params(-1.0f, 3.0f);
  EXPECT_FLOAT_EQ(p.scale, 4.0f / 255.0f);
  EXPECT_EQ(p.zero_point, -64);  // -128 + 1 * 63.75 = -64.25 -> -64
  // All-positive rows still include 0 in their range: zero point at the bottom.
  p = compute_dynamic_quant_params(2.0f, 5.1f);
  EXPECT_FLOAT_EQ(p.scale, 5.1f / 255.0f);
  EXPECT_EQ(p.zero_point, -128);
  // A constant-zero row gets scale 1.
  p = compute_dynamic_quant_params(0.0f, 0.0f);
  EXPECT_EQ(p.scale, 1.0f);

  const std::vector<float> row = {-1.0f, 0.0f, 3.0f, 1.0f};
  std::vector<int8_t> q(4);
  DynamicQuantParams params;
  quantize_dynamic_rows(row.data(), 1, 4, q.data(), &params);
  EXPECT_EQ(q[0], -128);  // round(-63.75) - 64
  EXPECT_EQ(q[1], -64);
  EXPECT_EQ(q[2], 127);   // round(191.25) - 64
  EXPECT_EQ(q[3], 0);     // round(63.75) - 64
}

TEST(XnnpackKernels, QuantizeDynamicRowsVectorAndTail) {
  // Two rows of 19 (two 8-wide blocks plus a tail): every element matches the per-element formula.
  const size_t rows = 2, cols = 19;
  std::vector<float> x(rows * cols);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i) * 0.7f) * (i < cols ? 3.0f : 0.01f);
  x[5] = 2.5f;  // a tie after scaling is still rounded to even
  std::vector<int8_t> q(x.size());
  DynamicQuantParams params[2];
  quantize_dynamic_rows(x.data(), rows, cols, q.data(), params);
  for (size_t r = 0; r < rows; ++r) {
    float lo = 0, hi = 0;
    for (size_t c = 0; c < cols; ++c) {
      lo = std::min(lo, x[r * cols + c]);
      hi = std::max(hi, x[r * cols + c]);
    }
    const DynamicQuantParams p = compute_dynamic_quant_params(lo, hi);
    EXPECT_EQ(params[r].scale, p.scale);
    EXPECT_EQ(params[r].zero_point, p.zero_point);
    for (size_t c = 0; c < cols; ++c) {
      const float v = std::nearbyint(x[r * cols + c] * (1.0f / p.scale)) + static_cast<float>(p.zero_point);
      EXPECT_EQ(q[r * cols + c], static_cast<int8_t>(std::min(std::max(v, -128.0f), 127.0f))) << r << "," << c;
    }
  }
}

TEST(XnnpackKernels, QuantizeDynamicRowsGivesThePortableResultAtEveryCpuLevel) {
  // Every width from 1 to 41 (the 4- and 8-wide vector blocks and every tail), and rows that the vector
  // loops must hand to the scalar one or range like it: a NaN inside a vector block (passed over in the range,
  // quantized to the zero point), an infinity, all zeros, negative zeros, all negative, all positive.
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (size_t cols = 1; cols <= 41; ++cols) {
    const size_t rows = 7;
    std::vector<float> x(rows * cols);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i) * 0.37f + 0.1f) * 4.0f;
    for (size_t c = 0; c < cols; ++c) {
      x[2 * cols + c] = 0.0f;
      x[3 * cols + c] = c % 2 ? -0.0f : -1.5f * static_cast<float>(c);
      x[4 * cols + c] = -std::fabs(x[c]) - 0.25f;
      x[5 * cols + c] = std::fabs(x[c]) + 2.0f;
    }
    x[0 * cols + cols / 2] = 9.5f;  // a tie after scaling, at times
    if (cols > 2) x[1 * cols + 1] = nan;
    if (cols > 12) {  // a NaN in a later block, in the lane that holds the row's minimum so far
      x[1 * cols + 2] = -7.0f;
      x[1 * cols + 10] = nan;
    }
    if (cols > 3) x[6 * cols + cols - 2] = -inf;
    std::vector<int8_t> want(x.size());
    std::vector<DynamicQuantParams> want_params(rows);
    testing::at_each_cpu_level([&](CpuLevel level) {
      std::vector<int8_t> q(x.size(), 99);
      std::vector<DynamicQuantParams> params(rows);
      quantize_dynamic_rows(x.data(), rows, cols, q.data(), params.data());
      if (level == CpuLevel::portable) {
        want = q;
        want_params = params;
      }
      for (size_t r = 0; r < rows; ++r) {
        ASSERT_EQ(std::bit_cast<uint32_t>(params[r].scale), std::bit_cast<uint32_t>(want_params[r].scale))
            << cpu_level_name(level) << " cols " << cols << " row " << r;
        ASSERT_EQ(params[r].zero_point, want_params[r].zero_point) << cpu_level_name(level) << " cols " << cols;
        for (size_t c = 0; c < cols; ++c) {
          ASSERT_EQ(int(q[r * cols + c]), int(want[r * cols + c]))
              << cpu_level_name(level) << " cols " << cols << " at " << r << "," << c;
        }
      }
    });
  }
}

// The int8 depthwise convolution against the XNNPACK per-channel int8 operator it replaces: byte for byte, over
// strides, paddings, kernel sizes (odd and even tap counts), zero points, output ranges, extreme codes and
// widths that leave every pixel-block remainder, channel counts past blocks of 64; at each vector level (AVX2 runs
// the pair kernel, AVX-512 its 16-channel form or, up to 7 quads of taps, the VNNI quad kernel; every aarch64 level
// the NEON one; the portable level has none, and supported() says so).
TEST(XnnpackKernels, DepthwiseQS8MatchesXnnpackExactly) {
  ASSERT_EQ(ops::initialize(), xnn_status_success);
  bool ran = false;
  testing::at_each_cpu_level([&](CpuLevel level) {
    if (level == CpuLevel::portable) {
      EXPECT_FALSE(DepthwiseConvQS8::supported(8, 3));
      return;
    }
    ASSERT_TRUE(DepthwiseConvQS8::supported(8, 3)) << cpu_level_name(level);
    ran = true;
    struct Case {
      size_t c, k, s, p, h, w;
      int8_t in_zp, out_zp, lo, hi;
    };
    const Case cases[] = {{8, 3, 1, 1, 5, 9, 3, -7, -128, 127},    {16, 3, 2, 1, 9, 17, -128, 0, -128, 127},
                          {32, 3, 1, 1, 7, 7, 12, 5, -20, 90},     {24, 5, 2, 2, 8, 13, -3, 127, -128, 127},
                          {48, 3, 2, 0, 6, 30, 0, -100, -128, 50}, {8, 1, 1, 0, 3, 4, 7, 7, -128, 127},
                          {64, 3, 1, 1, 4, 23, 100, -5, 0, 6},     {16, 2, 1, 0, 5, 12, -1, 2, -128, 127},
                          {40, 5, 1, 2, 6, 11, 127, -128, -128, 127}, {8, 3, 3, 1, 7, 31, -128, 3, -100, 100},
                          {24, 1, 2, 0, 4, 15, -128, 0, -128, 127},
                          // AVX-512 VNNI's blocks of 64 channels: two and a half, two and a quarter (tails of 32 and
                          // 16), 200 (8 past three); 7x7 (13 quads of taps: the pair kernel).
                          {160, 3, 1, 1, 6, 10, 5, -3, -128, 127},   {144, 3, 2, 1, 7, 9, -128, 4, -60, 127},
                          {200, 5, 1, 2, 5, 6, 9, 0, -128, 127},    {72, 7, 1, 3, 8, 9, -2, 1, -128, 127}};
    std::mt19937 rng(7);
    size_t case_index = 0;
    std::uniform_int_distribution<int> byte(-128, 127), big(-40000, 40000);
    std::uniform_real_distribution<float> unit(0.5f, 1.5f);
    for (const Case& cs : cases) {
      const size_t oh = (cs.h + 2 * cs.p - cs.k) / cs.s + 1, ow = (cs.w + 2 * cs.p - cs.k) / cs.s + 1;
      std::vector<int8_t> filter(cs.k * cs.k * cs.c), in(2 * cs.h * cs.w * cs.c);
      for (auto& v : filter) v = static_cast<int8_t>(byte(rng));
      for (auto& v : in) v = static_cast<int8_t>(byte(rng));
      if (case_index++ % 3 == 2) {
        // Extreme codes: -128 x -127 on every other tap. (Not -128 weights: XNNPACK's operator, the reference, gives
        // other values for them under emulated aarch64, whose int8 kernels sum two products in int16 lanes.)
        std::fill(filter.begin(), filter.end(), int8_t{-127});
        for (size_t i = 0; i < in.size(); i += 2) in[i] = -128;
      }
      std::vector<int32_t> bias(cs.c);
      for (auto& v : bias) v = big(rng);
      const float in_scale = 0.02f, out_scale = 0.05f * unit(rng);
      std::vector<float> kernel_scales(cs.c), scales(cs.c);
      for (size_t ch = 0; ch < cs.c; ++ch) {
        kernel_scales[ch] = 0.004f * unit(rng);
        scales[ch] = in_scale * kernel_scales[ch] / out_scale;
      }
      DepthwiseConvQS8::Params p;
      p.channels = cs.c;
      p.kernel_h = p.kernel_w = cs.k;
      p.stride_h = p.stride_w = cs.s;
      p.pad_top = p.pad_left = cs.p;
      p.in_zero_point = cs.in_zp;
      p.out_zero_point = cs.out_zp;
      p.out_min = cs.lo;
      p.out_max = cs.hi;
      const DepthwiseConvQS8 own(filter.data(), bias.data(), scales.data(), p);
      // The VNNI kernel's second packing exists only where that kernel runs (AVX-512 VNNI, 64 | C or C >= 128, at
      // most 28 taps); the pair kernel's is always there: int16 weights in pairs of taps, int32 bias, float scales.
      const size_t pair_bytes = (cs.k * cs.k + 1) / 2 * 2 * cs.c * sizeof(int16_t) + cs.c * (4 + 4);
#if defined(__x86_64__)
      const bool vnni = level == CpuLevel::avx512_vnni && (cs.c % 64 == 0 || cs.c >= 128) && cs.k * cs.k <= 28;
#else
      const bool vnni = false;
#endif
      EXPECT_EQ(own.bytes() > pair_bytes, vnni) << cpu_level_name(level) << ": " << cs.c << " channels, k " << cs.k;
      std::vector<int8_t> got(2 * oh * ow * cs.c), want(got.size());
      std::vector<uint8_t> scratch;
      own.run(in.data(), 2, cs.h, cs.w, oh, ow, got.data(), scratch);

      ops::ConvParams cp;
      cp.pad_top = cp.pad_right = cp.pad_bottom = cp.pad_left = static_cast<uint32_t>(cs.p);
      cp.kernel_h = cp.kernel_w = static_cast<uint32_t>(cs.k);
      cp.stride_h = cp.stride_w = static_cast<uint32_t>(cs.s);
      cp.groups = static_cast<uint32_t>(cs.c);
      cp.group_input_channels = cp.group_output_channels = 1;
      cp.depthwise = true;
      ops::Operator op;
      ASSERT_EQ(ops::create_convolution_qc8(cp, {in_scale, cs.in_zp}, kernel_scales.data(), filter.data(),
                                                 bias.data(), {out_scale, cs.out_zp}, cs.lo, cs.hi, op),
                xnn_status_success);
      std::vector<int8_t> padded_in(in.size() + ops::kExtraBytes);  // XNNPACK may read past the input
      std::copy(in.begin(), in.end(), padded_in.begin());
      ASSERT_EQ(ops::setup_convolution(op, 2, cs.h, cs.w, padded_in.data(), want.data(), nullptr),
                xnn_status_success);
      ASSERT_EQ(op.run(nullptr), xnn_status_success);
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(int(got[i]), int(want[i])) << cpu_level_name(level) << ": " << cs.c << " channels, k " << cs.k
                                             << ", stride " << cs.s << " at " << i;
      }
    }
  });
  EXPECT_TRUE(ran || cpu_level() == CpuLevel::portable);
}

// The int8 convolution against the XNNPACK operators it replaces (per-channel and per-tensor weights): byte for
// byte, over kernel sizes, strides, dilations, paddings, channel counts that leave every row, block and quad
// remainder, zero points and output ranges, one thread and two (the pixels split, or for a small image the
// outputs), at each level that has tiles (AVX2: int16 pairs; AVX-512 VNNI: byte quads). Below AVX2 supported() is
// false and the delegate keeps XNNPACK's operator.
#if defined(__x86_64__)
TEST(XnnpackKernels, ConvQS8MatchesXnnpackExactly) {
  ASSERT_EQ(ops::initialize(), xnn_status_success);
  bool ran = false;
  testing::at_each_cpu_level([&](CpuLevel level) {
    if (level < CpuLevel::avx2_fma) {
      EXPECT_FALSE(ConvQS8::supported()) << cpu_level_name(level);
      return;
    }
    ASSERT_TRUE(ConvQS8::supported());
    ran = true;
    struct Case {
      size_t cin, cout, k, s, d, p, h, w, batch, threads;
      int8_t in_zp, out_zp, lo, hi;
      bool per_tensor;
    };
    const Case cases[] = {
        {3, 16, 3, 2, 1, 1, 17, 19, 1, 1, -128, 0, -128, 127, false},  // a first layer: 3 channels
        {16, 24, 1, 1, 1, 0, 9, 11, 2, 1, 5, -7, -128, 127, false},     // pointwise, 198 pixels: passes and tails
        {37, 33, 3, 1, 1, 1, 6, 7, 1, 1, 12, 5, -20, 90, false},        // quads, rows and blocks all with tails
        {8, 1, 5, 1, 2, 4, 9, 9, 1, 1, -3, 127, -128, 127, false},      // dilated, one output
        {5, 17, 2, 3, 1, 0, 10, 13, 1, 1, 127, -128, -128, 127, true},  // even kernel, stride 3, per-tensor
        {32, 64, 3, 1, 1, 1, 28, 28, 1, 2, -1, 2, -128, 127, false},   // two threads over the pixels
        {64, 96, 3, 1, 1, 1, 7, 7, 1, 2, 100, -5, 0, 60, false},       // two threads over the outputs
        {24, 40, 1, 2, 1, 0, 15, 15, 3, 2, -128, 3, -100, 100, true},  // strided pointwise, batch 3, two threads
        {7, 13, 3, 1, 1, 0, 8, 9, 1, 1, 0, -1, -128, 127, false},       // odd patch; two blocks of 8, the second of 5
        {15, 32, 1, 1, 1, 0, 5, 5, 1, 1, -60, 9, -128, 127, false},     // pointwise with an odd channel count
        {32, 48, 1, 1, 1, 0, 20, 21, 1, 2, 9, -4, -128, 127, false},    // pointwise in place, two threads by pixels
        {64, 96, 1, 1, 1, 0, 7, 7, 1, 2, -128, 6, -50, 127, true},      // pointwise in place, two threads by outputs
    };
    std::mt19937 rng(11);
    std::uniform_int_distribution<int> byte(-128, 127), big(-40000, 40000);
    std::uniform_real_distribution<float> unit(0.5f, 1.5f);
    size_t case_index = 0;
    for (const Case& cs : cases) {
      ThreadPool::global().set_num_threads(cs.threads);
      const size_t span = cs.d * (cs.k - 1) + 1;
      const size_t oh = (cs.h + 2 * cs.p - span) / cs.s + 1, ow = (cs.w + 2 * cs.p - span) / cs.s + 1;
      const size_t patch = cs.k * cs.k * cs.cin;
      std::vector<int8_t> filter(cs.cout * patch), in(cs.batch * cs.h * cs.w * cs.cin);
      for (auto& v : filter) v = static_cast<int8_t>(byte(rng));
      for (auto& v : in) v = static_cast<int8_t>(byte(rng));
      if (case_index++ % 3 == 1) {
        // Extreme codes: -128 inputs against -127 weights on every other position.
        for (size_t i = 0; i < filter.size(); i += 2) filter[i] = -127;
        for (size_t i = 0; i < in.size(); i += 2) in[i] = -128;
      }
      std::vector<int32_t> bias(cs.cout);
      for (auto& v : bias) v = big(rng);
      const float in_scale = 0.02f, out_scale = 0.05f * unit(rng) * std::sqrt(float(patch));
      std::vector<float> kernel_scales(cs.cout, 0.004f * unit(rng)), scales(cs.cout);
      for (size_t n = 0; n < cs.cout; ++n) {
        if (!cs.per_tensor) kernel_scales[n] = 0.004f * unit(rng);
        scales[n] = in_scale * kernel_scales[n] / out_scale;
      }
      ConvQS8::Params p;
      p.in_channels = cs.cin;
      p.out_channels = cs.cout;
      p.kernel_h = p.kernel_w = cs.k;
      p.stride_h = p.stride_w = cs.s;
      p.dilation_h = p.dilation_w = cs.d;
      p.pad_top = p.pad_left = cs.p;
      p.in_zero_point = cs.in_zp;
      p.out_zero_point = cs.out_zp;
      p.out_min = cs.lo;
      p.out_max = cs.hi;
      const ConvQS8 own(filter.data(), bias.data(), scales.data(), p);
      std::vector<int8_t> got(cs.batch * oh * ow * cs.cout), want(got.size());
      std::vector<uint8_t> scratch;
      own.run(in.data(), cs.batch, cs.h, cs.w, oh, ow, got.data(), scratch);

      ops::ConvParams cp;
      cp.pad_top = cp.pad_right = cp.pad_bottom = cp.pad_left = static_cast<uint32_t>(cs.p);
      cp.kernel_h = cp.kernel_w = static_cast<uint32_t>(cs.k);
      cp.stride_h = cp.stride_w = static_cast<uint32_t>(cs.s);
      cp.dilation_h = cp.dilation_w = static_cast<uint32_t>(cs.d);
      cp.groups = 1;
      cp.group_input_channels = cs.cin;
      cp.group_output_channels = cs.cout;
      ops::Operator op;
      const ops::QParams qi{in_scale, cs.in_zp}, qo{out_scale, cs.out_zp};
      ASSERT_EQ(cs.per_tensor ? ops::create_convolution_qs8(cp, qi, kernel_scales[0], filter.data(), bias.data(), qo,
                                                            cs.lo, cs.hi, op)
                              : ops::create_convolution_qc8(cp, qi, kernel_scales.data(), filter.data(), bias.data(),
                                                            qo, cs.lo, cs.hi, op),
                xnn_status_success);
      std::vector<int8_t> padded_in(in.size() + ops::kExtraBytes);  // XNNPACK may read past the input
      std::copy(in.begin(), in.end(), padded_in.begin());
      ASSERT_EQ(ops::setup_convolution(op, cs.batch, cs.h, cs.w, padded_in.data(), want.data(), nullptr),
                xnn_status_success);
      ASSERT_EQ(op.run(nullptr), xnn_status_success);
      size_t clamped = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(int(got[i]), int(want[i])) << cs.cin << " -> " << cs.cout << " channels, k " << cs.k << ", stride "
                                             << cs.s << ", dilation " << cs.d << " at " << i;
        clamped += want[i] == cs.lo || want[i] == cs.hi;
      }
      EXPECT_LT(clamped, got.size() * 3 / 4) << "a case whose outputs are mostly clamped tests little";
    }
    // As the delegate runs an int8 fully-connected layer: a 1x1 convolution over the rows, against XNNPACK's
    // per-tensor fully-connected operator.
    const size_t rows = 11, k = 37, units = 21;
    std::vector<int8_t> wq(units * k), in(rows * k), got(rows * units), want(rows * units);
    for (auto& v : wq) v = static_cast<int8_t>(byte(rng));
    for (auto& v : in) v = static_cast<int8_t>(byte(rng));
    std::vector<int32_t> bias(units);
    for (auto& v : bias) v = big(rng);
    const ops::QParams qi{0.03f, -9}, qo{0.4f, 6};
    const float w_scale = 0.005f;
    ConvQS8::Params p;
    p.in_channels = k;
    p.out_channels = units;
    p.in_zero_point = qi.zero_point;
    p.out_zero_point = qo.zero_point;
    const std::vector<float> scales(units, qi.scale * w_scale / qo.scale);
    const ConvQS8 fc(wq.data(), bias.data(), scales.data(), p);
    std::vector<uint8_t> scratch;
    fc.run(in.data(), rows, 1, 1, 1, 1, got.data(), scratch);
    ops::Operator op;
    ASSERT_EQ(ops::create_fully_connected_qs8(k, units, qi, w_scale, wq.data(), bias.data(), qo, -128, 127, false, op),
              xnn_status_success);
    in.resize(in.size() + ops::kExtraBytes);
    ASSERT_EQ(ops::setup_fully_connected_qs8(op, rows, in.data(), want.data(), nullptr), xnn_status_success);
    ASSERT_EQ(op.run(nullptr), xnn_status_success);
    EXPECT_EQ(got, want);
    EXPECT_GT(std::count_if(want.begin(), want.end(), [](int8_t v) { return v != -128 && v != 127; }), 100);
  });
  ThreadPool::global().set_num_threads(0);
  EXPECT_TRUE(ran || cpu_level() < CpuLevel::avx2_fma);
}
#else
TEST(XnnpackKernels, ConvQS8IsX86Only) { EXPECT_FALSE(ConvQS8::supported()); }
#endif

TEST(XnnpackKernels, FullyConnectedQd8) {
  // One row x = [1, -1] quantized with scale 0.5 and zero point 2: q = [4, 0].
  const int8_t q[] = {4, 0};
  const DynamicQuantParams params{.zero_point = 2, .scale = 0.5f};
  const int8_t weights[] = {3, -1, 0, 2};  // rows: unit 0 = [3, -1], unit 1 = [0, 2]
  const float scales[] = {0.1f, 1.0f};
  const float bias[] = {0.5f, 0.0f};
  const QD8Weights w(weights, 2, 2, scales, bias);
  std::vector<float> out(2);
  std::vector<int32_t> scratch(qd8_scratch_ints(1, w));
  const float inf = std::numeric_limits<float>::infinity();
  fully_connected_qd8_f32(q, &params, 1, w, -inf, inf, out.data(), scratch.data());
  // unit 0: ((4*3 + 0*-1) - 2*2) * 0.5 * 0.1 + 0.5 = 8 * 0.05 + 0.5 = 0.9
  // unit 1: ((4*0 + 0*2) - 2*2) * 0.5 * 1.0 = -2
  EXPECT_FLOAT_EQ(out[0], 0.9f);
  EXPECT_FLOAT_EQ(out[1], -2.0f);
}

TEST(XnnpackKernels, FullyConnectedQd8Blocked) {
  // Odd k, units not a multiple of the 8-unit block, rows not a multiple of the 4-row tile.
  const size_t rows = 6, k = 37, n = 21;
  std::vector<int8_t> weights(n * k), q(rows * k);
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<int8_t>((i * 73) % 255 - 127);
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<int8_t>((i * 31) % 256 - 128);
  std::vector<float> scales(n), bias(n);
  for (size_t j = 0; j < n; ++j) {
    scales[j] = 0.001f * static_cast<float>(j + 1);
    bias[j] = static_cast<float>(j) - 10.0f;
  }
  std::vector<DynamicQuantParams> params(rows);
  for (size_t r = 0; r < rows; ++r) params[r] = {.zero_point = static_cast<int32_t>(r) * 9 - 20, .scale = 0.01f * static_cast<float>(r + 1)};
  const QD8Weights w(weights.data(), n, k, scales.data(), bias.data());
  std::vector<float> out(rows * n);
  std::vector<int32_t> scratch(qd8_scratch_ints(rows, w));
  fully_connected_qd8_f32(q.data(), params.data(), rows, w, -5.0f, 5.0f, out.data(), scratch.data());
  for (size_t r = 0; r < rows; ++r) {
    for (size_t j = 0; j < n; ++j) {
      int64_t acc = 0;
      for (size_t i = 0; i < k; ++i) acc += (q[r * k + i] - params[r].zero_point) * int64_t{weights[j * k + i]};
      const double ref = std::min(std::max(double(acc) * params[r].scale * scales[j] + bias[j], -5.0), 5.0);
      ASSERT_NEAR(out[r * n + j], ref, 1e-4 * (1.0 + std::fabs(ref))) << r << "," << j;
    }
  }
}

TEST(XnnpackKernels, FullyConnectedQd8GivesTheSameBitsAtEveryCpuLevel) {
  // The tile sums int8 products exactly into int32 at every level and in both layouts (AVX-512 VNNI's vpdpbusd
  // on quads of bytes offset by 128, or vpdpwssd on pairs; AVX2's madd and add; aarch64's sdot by four k, NEON's
  // smull and sadalp; the scalar loops), so the outputs are bit-identical: the weights packed at the top level
  // run at each level, and each level's own packing too; extreme codes (-128 x -127 on every k, and -128 x -128) included. Odd k (a last half pair),
  // k pairs that leave every remainder of sdot's four, units not a multiple of the 8-unit block, rows 1..7
  // (every tile height), per-channel weights and groups of 32, 64 and 128.
  struct Case {
    size_t rows, k, n, group;
  };
  const Case cases[] = {{7, 75, 37, 0},  {1, 8, 8, 0},     {2, 13, 9, 0},     {3, 30, 17, 0},   {4, 64, 16, 32},
                        {5, 128, 21, 64}, {6, 256, 40, 128}, {1, 192, 24, 64}, {3, 6, 3, 0},     {5, 97, 47, 0}};
  uint32_t seed = 5;
  for (const Case& cs : cases) {
    const size_t rows = cs.rows, k = cs.k, n = cs.n;
    std::vector<int8_t> weights(n * k), q(rows * k);
    std::mt19937 rng(seed++);
    for (auto& v : weights) v = static_cast<int8_t>(static_cast<int>(rng() % 256) - 128);
    for (auto& v : q) v = static_cast<int8_t>(static_cast<int>(rng() % 256) - 128);
    std::fill(weights.begin(), weights.begin() + k, int8_t{-127});
    std::fill(q.begin(), q.begin() + k, int8_t{-128});
    if (n > 1) std::fill(weights.begin() + k, weights.begin() + 2 * k, int8_t{-128});  // -128 x -128
    const size_t groups = cs.group == 0 ? 1 : k / cs.group;
    std::vector<float> scales(n * groups), bias(n);
    for (size_t j = 0; j < scales.size(); ++j) scales[j] = 0.001f * static_cast<float>(j % 17 + 1);
    for (size_t j = 0; j < n; ++j) bias[j] = 0.1f * static_cast<float>(j);
    std::vector<DynamicQuantParams> params(rows);
    for (size_t r = 0; r < rows; ++r) params[r] = {.zero_point = static_cast<int32_t>(r) * 11 - 30, .scale = 0.02f};
    const QD8Weights w(weights.data(), n, k, scales.data(), bias.data(), cs.group);
    std::vector<int32_t> scratch(qd8_scratch_ints(rows, w));
    const float inf = std::numeric_limits<float>::infinity();
    std::vector<float> want(rows * n);
    testing::at_each_cpu_level([&](CpuLevel level) {
      std::vector<float> out(rows * n);
      fully_connected_qd8_f32(q.data(), params.data(), rows, w, -inf, inf, out.data(), scratch.data());
      // The layout this level packs (pairs below AVX-512 VNNI), besides the top level's run at this one.
      const QD8Weights packed_here(weights.data(), n, k, scales.data(), bias.data(), cs.group);
      std::vector<float> out_here(rows * n);
      fully_connected_qd8_f32(q.data(), params.data(), rows, packed_here, -inf, inf, out_here.data(), scratch.data());
      for (size_t i = 0; i < out.size(); ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(out_here[i]), std::bit_cast<uint32_t>(out[i]))
            << cpu_level_name(level) << " (its own packing) rows " << rows << " k " << k << " n " << n << " at " << i;
      }
      if (level == CpuLevel::portable) {
        want = out;
        // Every unit against the exact sum, in doubles.
        for (size_t r = 0; r < rows; ++r) {
          for (size_t j = 0; j < n; ++j) {
            double ref = bias[j];
            for (size_t g = 0; g < groups; ++g) {
              int64_t acc = 0;
              for (size_t i = g * (k / groups); i < (g + 1) * (k / groups); ++i) {
                acc += int64_t{q[r * k + i] - params[r].zero_point} * weights[j * k + i];
              }
              ref += double(acc) * params[r].scale * scales[j * groups + g];
            }
            ASSERT_NEAR(out[r * n + j], ref, 1e-5 * (1.0 + std::fabs(ref))) << r << "," << j;
          }
        }
      }
      for (size_t i = 0; i < out.size(); ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(want[i]))
            << cpu_level_name(level) << " rows " << rows << " k " << k << " n " << n << " group " << cs.group
            << " at " << i;
      }
    });
  }
}

// fp32 -> 8-bit codes against the definition (round half to even, the zero point added, clamped; NaN to the zero
// point), signed and unsigned, over ties, infinities and lengths that leave every remainder of the 8-float vector
// loop, at each CPU level (AVX2 runs the vector loop, the portable level the scalar one).
TEST(XnnpackKernels, QuantizeQ8RoundsHalfToEvenAtEveryCpuLevel) {
  std::vector<float> x = {0.5f,  1.5f,  2.5f,   -0.5f, -1.5f, -2.5f, 0.49999997f, 1e9f, -1e9f,
                          std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(), 0.0f, -0.0f, 3.75f, -3.25f};
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> real(-40.0f, 40.0f);
  for (int i = 0; i < 61; ++i) x.push_back(real(rng));
  for (const Quant8 q : {Quant8{false, 0.25f, -3}, Quant8{true, 0.5f, 128}, Quant8{false, 1.0f, 0}}) {
    std::vector<uint8_t> want(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      double v = std::nearbyint(double(x[i] * (1.0f / q.scale)));  // the product in float, as XNNPACK's convert
      int32_t code = std::isnan(x[i]) ? q.zero_point
                                      : int32_t(std::min(std::max(v + q.zero_point, double(q.qmin())), double(q.qmax())));
      want[i] = static_cast<uint8_t>(code & 0xFF);
    }
    testing::at_each_cpu_level([&](CpuLevel level) {
      for (size_t n : {x.size(), size_t{7}, size_t{8}, size_t{9}, size_t{16}, size_t{1}}) {
        std::vector<uint8_t> got(n, 0x5A);
        quantize_q8(x.data(), got.data(), n, q);
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(int(got[i]), int(want[i])) << cpu_level_name(level) << " x " << x[i] << " zp " << q.zero_point
                                               << (q.is_unsigned ? " unsigned" : " signed") << " n " << n;
        }
      }
    });
  }
}

TEST(XnnpackKernels, Requantize) {
  const int8_t in[] = {-128, 0, 10, 127};
  int8_t out[4];
  // (q - 0) * 0.5 / 0.25 + 1, saturated.
  requantize_s8(in, out, 4, 0.5f, 0, 0.25f, 1);
  EXPECT_EQ(out[0], -128);
  EXPECT_EQ(out[1], 1);
  EXPECT_EQ(out[2], 21);
  EXPECT_EQ(out[3], 127);
  EXPECT_EQ(quantize_bound(6.0f, 0.05f, -5, -128, 127), 115);
  EXPECT_EQ(quantize_bound(std::numeric_limits<float>::infinity(), 0.05f, -5, -128, 127), 127);
  EXPECT_EQ(quantize_bound(-std::numeric_limits<float>::infinity(), 0.05f, -5, -128, 127), -128);
}

}  // namespace
}  // namespace etnp::xnn
