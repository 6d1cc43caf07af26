#include "compute/int4_gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>

#include "core/cpu_features.h"
#include "core/target_region.h"
#include "etnp/threadpool.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#elif defined(__aarch64__) && defined(__GNUC__)
#include <arm_neon.h>
#endif

namespace etnp::compute {

bool Int4Weights::supports(size_t k, size_t group_size) {
  return k > 0 && k % 32 == 0 && (group_size == 0 || (group_size % 32 == 0 && k % group_size == 0));
}

Int4Weights::Int4Weights(const int8_t* w_nk, size_t n, size_t k, const float* scales, const float* bias,
                         size_t group_size)
    : n_(n), k_(k), group_size_(group_size) {
  const size_t g = groups(), gk = group_k();
  bool bf16 = true;
  for (size_t i = 0; i < n * g; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &scales[i], 4);
    bf16 = bf16 && (bits & 0xFFFF) == 0;
  }
  // Channels past n hold w = 0 (stored 8) and scale 0: their lanes compute zeros that are never stored.
  packed_.assign(blocks() * k * 4, 0x88);
  (bf16 ? scales_bf16_.assign(blocks() * g * 8, 0) : scales_f32_.assign(blocks() * g * 8, 0.0f));
  zp_terms_.assign(blocks() * 8, 0.0f);
  std::vector<int32_t> sums(g);
  for (size_t j = 0; j < n; ++j) {
    const size_t b = j / 8, lane = j % 8, stride = run_stride(b);
    uint8_t* dst = packed_.data() + offset(b, 0) + lane * 4;
    const int8_t* row = w_nk + j * k;
    std::fill(sums.begin(), sums.end(), 0);
    for (size_t i = 0; i < k; i += 8, dst += stride) {
      for (size_t q = 0; q < 4; ++q) {
        dst[q] = static_cast<uint8_t>((row[i + q] + 8) | ((row[i + 4 + q] + 8) << 4));
      }
    }
    for (size_t q = 0; q < g; ++q) {
      for (size_t i = q * gk; i < (q + 1) * gk; ++i) sums[q] += row[i];
    }
    float term = 0.0f;
    for (size_t q = 0; q < g; ++q) {
      const float sc = scales[j * g + q];
      const size_t at = scale_index(b, q) + lane;
      if (bf16) {
        uint32_t bits;
        std::memcpy(&bits, &sc, 4);
        scales_bf16_[at] = static_cast<uint16_t>(bits >> 16);
      } else {
        scales_f32_[at] = sc;
      }
      term += static_cast<float>(sums[q]) * sc;
    }
    zp_terms_[j] = term;
  }
  if (bias != nullptr) bias_.assign(bias, bias + n);
}

float Int4Weights::scale(size_t j, size_t g) const {
  const size_t at = scale_index(j / 8, g) + j % 8;
  if (!bf16_scales()) return scales_f32_[at];
  const uint32_t bits = uint32_t{scales_bf16_[at]} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

namespace {

// Row r's sums of its codes over each run of 32 k, [rows, k / 32]: the 4-bit values are stored with +8, so a
// product of stored values over a run is the true one plus 8 * (this sum).
void code_sums(const int8_t* x, size_t rows, size_t k, int32_t* out) {
  for (size_t r = 0; r < rows; ++r) {
    for (size_t c = 0; c < k / 32; ++c) {
      int32_t s = 0;
      for (size_t i = 0; i < 32; ++i) s += x[r * k + c * 32 + i];
      out[r * (k / 32) + c] = s;
    }
  }
}

// The float epilogue shared by every implementation: out = clamp(sum * scale_r + bias, lo, hi) over `cols`,
// the product rounded before the add. (GCC contracts a * b + c into a fused multiply-add in C++ wherever the
// target has FMA, as the AVX2 tiles' callers do: the empty asm makes the product a value of its own there.)
inline void store_row(const float* sum, float row_scale, const float* bias, float lo, float hi, size_t cols,
                      float* out) {
  for (size_t c = 0; c < cols; ++c) {
    float v = sum[c] * row_scale;
#if defined(__x86_64__) && defined(__GNUC__)
    asm("" : "+x"(v));
#endif
    if (bias != nullptr) v += bias[c];
    out[c] = std::min(std::max(v, lo), hi);
  }
}

// One block of 8 channels for every row, one value at a time: the definition.
void block_generic(const int8_t* x, const RowQuantParams* params, const int32_t* xsums, size_t rows,
                   const Int4Weights& w, size_t b, float lo, float hi, float* out) {
  const size_t k = w.k(), gk = w.group_k(), n = w.n();
  const size_t cols = std::min<size_t>(8, n - b * 8);
  const uint8_t* packed = w.block(b);
  const size_t stride = w.run_stride(b);
  const float* zp_terms = w.zero_point_terms(b);
  for (size_t r = 0; r < rows; ++r) {
    float sum[8];
    for (size_t lane = 0; lane < 8; ++lane) sum[lane] = -static_cast<float>(params[r].zero_point) * zp_terms[lane];
    for (size_t c = 0; c < k / 32; ++c) {
      for (size_t lane = 0; lane < 8; ++lane) {
        int32_t acc = 0;
        for (size_t i = c * 32; i < (c + 1) * 32; ++i) {
          const uint8_t byte = packed[(i / 8) * stride + lane * 4 + i % 4];
          const int32_t u = (i % 8) < 4 ? (byte & 0x0F) : (byte >> 4);
          acc += u * x[r * k + i];
        }
        acc -= 8 * xsums[r * (k / 32) + c];
        sum[lane] = std::fma(static_cast<float>(acc), w.scale(b * 8 + lane, c * 32 / gk), sum[lane]);
      }
    }
    store_row(sum, params[r].scale, w.bias() != nullptr ? w.bias() + b * 8 : nullptr, lo, hi, cols,
              out + r * n + b * 8);
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
// The x86 tiles, one source compiled for each vector level (int4_tiles_x86.inc).
ETNP_TARGET_BEGIN("avx2,fma")
namespace avx2 {
#include "compute/int4_tiles_x86.inc"
}  // namespace avx2
ETNP_TARGET_END

ETNP_TARGET_BEGIN("avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni")
#define ETNP_INT4_VNNI
namespace vnni {
#include "compute/int4_tiles_x86.inc"
}  // namespace vnni
#undef ETNP_INT4_VNNI
ETNP_TARGET_END
#elif defined(__aarch64__) && defined(__GNUC__)
// The aarch64 tiles, one source compiled for each vector level (int4_tiles_neon.inc): Advanced SIMD (the
// baseline), DotProd (sdot) and I8MM (smmla).
#define ETNP_INT4_NEON_LEVEL 0
namespace neon {
#include "compute/int4_tiles_neon.inc"
}  // namespace neon
#undef ETNP_INT4_NEON_LEVEL

ETNP_TARGET_BEGIN("arch=armv8.2-a+dotprod")
#define ETNP_INT4_NEON_LEVEL 1
namespace dotprod {
#include "compute/int4_tiles_neon.inc"
}  // namespace dotprod
#undef ETNP_INT4_NEON_LEVEL
ETNP_TARGET_END

ETNP_TARGET_BEGIN("arch=armv8.6-a+dotprod+i8mm")
#define ETNP_INT4_NEON_LEVEL 2
namespace i8mm {
#include "compute/int4_tiles_neon.inc"
}  // namespace i8mm
#undef ETNP_INT4_NEON_LEVEL
ETNP_TARGET_END
#endif

using BlocksFn = void (*)(const int8_t* x, const RowQuantParams* params, const int32_t* xsums, size_t rows,
                          const Int4Weights& w, size_t b0, size_t b1, float lo, float hi, float* out);

// The implementation for a level, and the level it runs at (the portable loops where this build has no tiles
// for the CPU's level).
std::pair<BlocksFn, CpuLevel> select_blocks(CpuLevel level) {
#if defined(__x86_64__) && defined(__GNUC__)
  switch (level) {
    case CpuLevel::avx512_vnni:
      return {vnni::blocks, level};
    case CpuLevel::avx2_fma:
      return {avx2::blocks, level};
    case CpuLevel::portable:
      break;
  }
#elif defined(__aarch64__) && defined(__GNUC__)
  switch (level) {
    case CpuLevel::neon_i8mm:
      return {i8mm::blocks, level};
    case CpuLevel::neon_dotprod:
      return {dotprod::blocks, level};
    case CpuLevel::neon:
      return {neon::blocks, level};
    case CpuLevel::portable:
      break;
  }
#else
  (void)level;  // no tiles but the portable loops elsewhere
#endif
  return {[](const int8_t* x, const RowQuantParams* params, const int32_t* xsums, size_t rows, const Int4Weights& w,
             size_t b0, size_t b1, float lo, float hi, float* out) {
            for (size_t b = b0; b < b1; ++b) block_generic(x, params, xsums, rows, w, b, lo, hi, out);
          },
          CpuLevel::portable};
}

}  // namespace

const char* int4_gemm_kernel_name() { return cpu_level_name(select_blocks(cpu_level()).second); }

void gemm_qd8_int4_f32(const int8_t* x, const RowQuantParams* params, size_t rows, const Int4Weights& w,
                       float out_min, float out_max, float* out, int32_t* scratch, ThreadPool* pool) {
  const size_t blocks = w.blocks();
  if (rows == 0 || w.n() == 0) return;
  code_sums(x, rows, w.k(), scratch);
  const BlocksFn fn = select_blocks(cpu_level()).first;
  auto run = [&](size_t b0, size_t b1) { fn(x, params, scratch, rows, w, b0, b1, out_min, out_max, out); };
  // A parallel region costs a few microseconds of wake-up: worth it from about 128K multiply-adds (a 64 KB
  // weight read) per thread. Chunks of 4 blocks keep the one-row tile at its widest.
  const size_t threads = pool == nullptr ? 1 : pool->num_threads();
  if (threads > 1 && rows * w.n() * w.k() >= threads * (size_t{1} << 17) && blocks >= 8) {
    const size_t quads = (blocks + 3) / 4;
    pool->parallel_for(quads, 1, [&](size_t q0, size_t q1) { run(q0 * 4, std::min(blocks, q1 * 4)); });
  } else {
    run(0, blocks);
  }
}

}  // namespace etnp::compute
