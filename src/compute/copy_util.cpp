#include "compute/copy_util.h"

#include <algorithm>
#include <cstring>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "etnp/threadpool.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ETNP_COPY_AVX2 1
#elif defined(__aarch64__)
#include <arm_neon.h>
#define ETNP_COPY_NEON 1
#endif

namespace etnp::compute {

// ---------------------------------------------------------------------------------------------------------
// Scalar conversions

namespace {

[[noreturn]] void scalar_overflow(const char* op, const Scalar& s, ScalarType t) {
  std::string v = s.is_floating() ? std::to_string(s.d) : s.is_bool() ? (s.b ? "True" : "False") : std::to_string(s.i);
  kernel_fail(std::string(op) + ": value " + v + " cannot be converted to type " +
              std::string(scalar_type_name(t)) + " without overflow");
}

}  // namespace

template <typename T>
T scalar_to(const Scalar& s, const char* op) {
  if (s.is_bool()) return convert<T>(s.b);
  if constexpr (std::is_same_v<T, bool>) {
    return s.is_floating() ? s.d != 0.0 : s.i != 0;
  } else if constexpr (is_float_v<T>) {
    const double d = s.is_floating() ? s.d : static_cast<double>(s.i);
    if constexpr (!std::is_same_v<T, double>) {
      // Only finite values beyond the type's range overflow (inf and NaN pass through).
      double max = std::is_same_v<T, float> ? double(std::numeric_limits<float>::max())
                   : std::is_same_v<T, Half> ? 65504.0
                                             : 3.3895313892515355e38;
      if (std::isfinite(d) && (d > max || d < -max)) scalar_overflow(op, s, scalar_type_of<T>());
    }
    return convert<T>(d);
  } else {
    using L = std::numeric_limits<T>;
    if (s.is_floating()) {
      // c10's overflow rule for a floating value: NaN, infinities and anything outside [lowest, max] fail
      // (no negative wrap-around for unsigned types, unlike integer values).
      const double d = s.d;
      if (std::isnan(d) || d < static_cast<double>(L::lowest()) || d > static_cast<double>(L::max())) {
        scalar_overflow(op, s, scalar_type_of<T>());
      }
      return cast_element<T>(d);
    }
    const int64_t i = s.i;
    if constexpr (L::is_signed) {
      if (i < static_cast<int64_t>(L::lowest()) || i > static_cast<int64_t>(L::max())) scalar_overflow(op, s, scalar_type_of<T>());
    } else {
      const uint64_t mag = i < 0 ? (uint64_t(0) - static_cast<uint64_t>(i)) : static_cast<uint64_t>(i);
      if (mag > static_cast<uint64_t>(L::max())) scalar_overflow(op, s, scalar_type_of<T>());
    }
    return static_cast<T>(i);
  }
}

#define ETNP_INSTANTIATE_SCALAR_TO(T) template T scalar_to<T>(const Scalar&, const char*);
ETNP_INSTANTIATE_SCALAR_TO(uint8_t)
ETNP_INSTANTIATE_SCALAR_TO(int8_t)
ETNP_INSTANTIATE_SCALAR_TO(int16_t)
ETNP_INSTANTIATE_SCALAR_TO(int32_t)
ETNP_INSTANTIATE_SCALAR_TO(int64_t)
ETNP_INSTANTIATE_SCALAR_TO(uint16_t)
ETNP_INSTANTIATE_SCALAR_TO(uint32_t)
ETNP_INSTANTIATE_SCALAR_TO(uint64_t)
ETNP_INSTANTIATE_SCALAR_TO(float)
ETNP_INSTANTIATE_SCALAR_TO(double)
ETNP_INSTANTIATE_SCALAR_TO(Half)
ETNP_INSTANTIATE_SCALAR_TO(BFloat16)
ETNP_INSTANTIATE_SCALAR_TO(bool)
#undef ETNP_INSTANTIATE_SCALAR_TO

// ---------------------------------------------------------------------------------------------------------
// The strided copy engine

namespace {

/// The copy after dropping size-1 dims, ordering dims by destination stride (outermost first, so writes
/// stream) and merging dims that are contiguous in both operands.
struct CopyPlan {
  int rank = 0;
  int64_t numel = 1;
  // Only [0, rank) is ever written or read: zeroing all 32 dims (768 bytes) took longer than a small copy.
  int64_t size[kMaxCopyRank];
  int64_t dst[kMaxCopyRank];
  int64_t src[kMaxCopyRank];
};

CopyPlan make_plan(std::span<const int64_t> shape, const int64_t* ds, const int64_t* ss) {
  CopyPlan p;
  if (shape.size() > static_cast<size_t>(kMaxCopyRank)) kernel_fail("copy: rank " + std::to_string(shape.size()) + " is too large");
  int order[kMaxCopyRank];
  int n = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) {
      p.numel = 0;
      return p;
    }
    p.numel *= shape[d];
    if (shape[d] != 1) order[n++] = static_cast<int>(d);
  }
  // Stable insertion sort by |dst stride| descending (then |src stride| descending).
  for (int i = 1; i < n; ++i) {
    const int v = order[i];
    int j = i;
    while (j > 0) {
      const int u = order[j - 1];
      const int64_t du = std::llabs(ds[u]), dv = std::llabs(ds[v]);
      const bool v_before_u = dv > du || (dv == du && std::llabs(ss[v]) > std::llabs(ss[u]));
      if (!v_before_u) break;
      order[j] = u;
      --j;
    }
    order[j] = v;
  }
  for (int k = 0; k < n; ++k) {
    const int d = order[k];
    if (p.rank > 0 && p.dst[p.rank - 1] == ds[d] * shape[d] && p.src[p.rank - 1] == ss[d] * shape[d]) {
      p.size[p.rank - 1] *= shape[d];
      p.dst[p.rank - 1] = ds[d];
      p.src[p.rank - 1] = ss[d];
    } else {
      p.size[p.rank] = shape[d];
      p.dst[p.rank] = ds[d];
      p.src[p.rank] = ss[d];
      ++p.rank;
    }
  }
  if (p.rank == 0) {  // a single element
    p.rank = 1;
    p.size[0] = 1;
    p.dst[0] = 1;
    p.src[0] = 1;
  }
  return p;
}

// dst[i * drow + j] = src[i + j * scol] for 4-byte elements, whole register blocks of the tile transposed in
// registers (8x8 with AVX2, 4x4 with NEON); returns the rows and columns done (the caller finishes the edges). The
// layout changes of convolutions (NCHW <-> NHWC) and permutes are such tiles: element by element, they took a
// third of a small CNN's time.
#ifdef ETNP_COPY_AVX2
__attribute__((target("avx2"))) void transpose_blocks_avx2(uint32_t* d, const uint32_t* s, int64_t rows, int64_t cols,
                                                            int64_t drow, int64_t scol, int64_t& rows_done,
                                                            int64_t& cols_done) {
  rows_done = rows / 8 * 8;
  cols_done = cols / 8 * 8;
  for (int64_t i = 0; i < rows_done; i += 8) {
    for (int64_t j = 0; j < cols_done; j += 8) {
      // r[k] = source column j + k, its rows i .. i + 7.
      __m256 r[8];
      for (int k = 0; k < 8; ++k) r[k] = _mm256_loadu_ps(reinterpret_cast<const float*>(s + i + (j + k) * scol));
      const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
      const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
      const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
      const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
      const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
      const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
      const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
      const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
      const __m256 out[8] = {_mm256_permute2f128_ps(u0, u4, 0x20), _mm256_permute2f128_ps(u1, u5, 0x20),
                             _mm256_permute2f128_ps(u2, u6, 0x20), _mm256_permute2f128_ps(u3, u7, 0x20),
                             _mm256_permute2f128_ps(u0, u4, 0x31), _mm256_permute2f128_ps(u1, u5, 0x31),
                             _mm256_permute2f128_ps(u2, u6, 0x31), _mm256_permute2f128_ps(u3, u7, 0x31)};
      for (int k = 0; k < 8; ++k) _mm256_storeu_ps(reinterpret_cast<float*>(d + (i + k) * drow + j), out[k]);
    }
  }
}
#endif

#ifdef ETNP_COPY_NEON
void transpose_blocks_neon(uint32_t* d, const uint32_t* s, int64_t rows, int64_t cols, int64_t drow, int64_t scol,
                           int64_t& rows_done, int64_t& cols_done) {
  rows_done = rows / 4 * 4;
  cols_done = cols / 4 * 4;
  for (int64_t i = 0; i < rows_done; i += 4) {
    for (int64_t j = 0; j < cols_done; j += 4) {
      const uint32x4_t r0 = vld1q_u32(s + i + j * scol), r1 = vld1q_u32(s + i + (j + 1) * scol);
      const uint32x4_t r2 = vld1q_u32(s + i + (j + 2) * scol), r3 = vld1q_u32(s + i + (j + 3) * scol);
      const uint32x4x2_t a = vtrnq_u32(r0, r1), b = vtrnq_u32(r2, r3);
      vst1q_u32(d + i * drow + j, vcombine_u32(vget_low_u32(a.val[0]), vget_low_u32(b.val[0])));
      vst1q_u32(d + (i + 1) * drow + j, vcombine_u32(vget_low_u32(a.val[1]), vget_low_u32(b.val[1])));
      vst1q_u32(d + (i + 2) * drow + j, vcombine_u32(vget_high_u32(a.val[0]), vget_high_u32(b.val[0])));
      vst1q_u32(d + (i + 3) * drow + j, vcombine_u32(vget_high_u32(a.val[1]), vget_high_u32(b.val[1])));
    }
  }
}
#endif

/// Same-dtype element mover: E is an unsigned type of the element's size.
template <typename E>
struct SameTypeMover {
  E* dst;
  const E* src;
  void run(int64_t doff, int64_t soff, int64_t n, int64_t ds, int64_t ss) const {
    E* d = dst + doff;
    const E* s = src + soff;
    if (ds == 1 && ss == 1) {
      // memmove: a corrupt program may alias source and destination (glibc's memcpy is the same routine).
      std::memmove(d, s, static_cast<size_t>(n) * sizeof(E));
    } else if (ss == 0) {
      const E v = *s;
      if (ds == 1) {
        std::fill_n(d, n, v);
      } else {
        for (int64_t i = 0; i < n; ++i) d[i * ds] = v;
      }
    } else if (ds == 1) {
      for (int64_t i = 0; i < n; ++i) d[i] = s[i * ss];
    } else {
      for (int64_t i = 0; i < n; ++i) d[i * ds] = s[i * ss];
    }
  }
  // dst[i * drow + j] = src[i + j * scol] for a rows x cols tile.
  void tile(int64_t doff, int64_t soff, int64_t rows, int64_t cols, int64_t drow, int64_t scol) const {
    E* d = dst + doff;
    const E* s = src + soff;
    int64_t rows_done = 0, cols_done = 0;  // the top-left block transposed in registers
    if constexpr (sizeof(E) == 4) {
#ifdef ETNP_COPY_AVX2
      if (has_avx2_fma()) transpose_blocks_avx2(d, s, rows, cols, drow, scol, rows_done, cols_done);
#elif defined(ETNP_COPY_NEON)
      transpose_blocks_neon(d, s, rows, cols, drow, scol, rows_done, cols_done);
#endif
    }
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = i < rows_done ? cols_done : 0; j < cols; ++j) d[i * drow + j] = s[i + j * scol];
    }
  }
};

/// Elements of any other size (complex types): byte copies.
struct BytesMover {
  unsigned char* dst;
  const unsigned char* src;
  size_t esize;
  void run(int64_t doff, int64_t soff, int64_t n, int64_t ds, int64_t ss) const {
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(dst + (doff + i * ds) * static_cast<int64_t>(esize), src + (soff + i * ss) * static_cast<int64_t>(esize), esize);
    }
  }
  void tile(int64_t doff, int64_t soff, int64_t rows, int64_t cols, int64_t drow, int64_t scol) const {
    for (int64_t i = 0; i < rows; ++i) run(doff + i * drow, soff + i, cols, 1, scol);
  }
};

template <typename To, typename From>
struct ConvertMover {
  To* dst;
  const From* src;
  void run(int64_t doff, int64_t soff, int64_t n, int64_t ds, int64_t ss) const {
    To* d = dst + doff;
    const From* s = src + soff;
    if (ds == 1 && ss == 1) {
      for (int64_t i = 0; i < n; ++i) d[i] = cast_element<To>(s[i]);
    } else if (ss == 0) {
      const To v = cast_element<To>(*s);
      for (int64_t i = 0; i < n; ++i) d[i * ds] = v;
    } else {
      for (int64_t i = 0; i < n; ++i) d[i * ds] = cast_element<To>(s[i * ss]);
    }
  }
  void tile(int64_t doff, int64_t soff, int64_t rows, int64_t cols, int64_t drow, int64_t scol) const {
    To* d = dst + doff;
    const From* s = src + soff;
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) d[i * drow + j] = cast_element<To>(s[i + j * scol]);
    }
  }
};

/// Converting movers behind function pointers: execute_plan is instantiated once for every pair of dtypes, not
/// once per pair (13 x 13 of them), which made this file by far the slowest of the library to compile. Only the
/// element loops are per pair; a call through the pointer costs once per run or per tile, not per element.
struct ErasedConvertMover {
  using RunFn = void (*)(void*, const void*, int64_t, int64_t, int64_t, int64_t, int64_t);
  using TileFn = void (*)(void*, const void*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);
  void* dst;
  const void* src;
  RunFn run_fn;
  TileFn tile_fn;
  void run(int64_t doff, int64_t soff, int64_t n, int64_t ds, int64_t ss) const {
    run_fn(dst, src, doff, soff, n, ds, ss);
  }
  void tile(int64_t doff, int64_t soff, int64_t rows, int64_t cols, int64_t drow, int64_t scol) const {
    tile_fn(dst, src, doff, soff, rows, cols, drow, scol);
  }
};

template <typename To, typename From>
void convert_run(void* dst, const void* src, int64_t doff, int64_t soff, int64_t n, int64_t ds, int64_t ss) {
  ConvertMover<To, From>{static_cast<To*>(dst), static_cast<const From*>(src)}.run(doff, soff, n, ds, ss);
}

template <typename To, typename From>
void convert_tile(void* dst, const void* src, int64_t doff, int64_t soff, int64_t rows, int64_t cols, int64_t drow,
                  int64_t scol) {
  ConvertMover<To, From>{static_cast<To*>(dst), static_cast<const From*>(src)}.tile(doff, soff, rows, cols, drow, scol);
}

// Below this a copy runs on the calling thread: a parallel region costs a few microseconds, what moving
// about 64 KiB (a transpose: less) takes on one core.
constexpr int64_t kParallelMinBytes = int64_t(1) << 16;
constexpr int64_t kChunkElems = int64_t(1) << 16;       // work per parallel item when splitting long runs
constexpr int64_t kTile = 32;

/// Offsets of run `r` (a multi-index over dims [0, outer_rank)).
inline void run_offsets(const CopyPlan& p, int outer_rank, int64_t r, int64_t& doff, int64_t& soff) {
  doff = 0;
  soff = 0;
  for (int d = outer_rank - 1; d >= 0 && r > 0; --d) {
    const int64_t i = r % p.size[d];
    r /= p.size[d];
    doff += i * p.dst[d];
    soff += i * p.src[d];
  }
}

template <typename Mover>
void execute_plan(const CopyPlan& p, const Mover& mover, size_t elem_bytes, bool parallel) {
  if (p.numel == 0) return;
  ThreadPool& pool = ThreadPool::current();
  const bool par = parallel && p.numel * static_cast<int64_t>(elem_bytes) >= kParallelMinBytes &&
                   pool.num_threads() > 1;
  const int r = p.rank;

  // Transpose-like: destination walks its last dim with stride 1 while the source is contiguous along
  // the previous dim. Tiles keep both sides in cache.
  if (r >= 2 && p.dst[r - 1] == 1 && p.src[r - 2] == 1 && p.src[r - 1] != 1 && p.size[r - 1] >= 8 &&
      p.size[r - 2] >= 8) {
    const int64_t rows = p.size[r - 2], cols = p.size[r - 1];
    const int64_t row_blocks = (rows + kTile - 1) / kTile;
    const int64_t outer = p.numel / (rows * cols);
    auto body = [&](size_t b, size_t e) {
      for (size_t item = b; item < e; ++item) {
        const int64_t o = static_cast<int64_t>(item) / row_blocks;
        const int64_t rb = static_cast<int64_t>(item) % row_blocks;
        int64_t doff, soff;
        run_offsets(p, r - 2, o, doff, soff);
        const int64_t i0 = rb * kTile, ni = std::min(kTile, rows - i0);
        for (int64_t j0 = 0; j0 < cols; j0 += kTile) {
          const int64_t nj = std::min(kTile, cols - j0);
          mover.tile(doff + i0 * p.dst[r - 2] + j0, soff + i0 + j0 * p.src[r - 1], ni, nj, p.dst[r - 2], p.src[r - 1]);
        }
      }
    };
    const size_t items = static_cast<size_t>(outer * row_blocks);
    if (par) {
      // Chunks of about kChunkElems, but at least one per thread: the layout changes around a convolution on
      // a small map are a few hundred KiB, a few row blocks.
      const size_t per_thread = (items + pool.num_threads() - 1) / pool.num_threads();
      const auto grain = static_cast<size_t>(kChunkElems / (kTile * cols) + 1);
      pool.parallel_for(items, std::max<size_t>(1, std::min(grain, per_thread)), body);
    } else {
      body(0, items);
    }
    return;
  }

  const int64_t inner = p.size[r - 1];
  const int64_t runs = p.numel / inner;
  const int64_t threads = static_cast<int64_t>(pool.num_threads());
  int64_t per_run = 1;  // parallel items per run (long runs are split so that all threads get work)
  if (par && runs < threads * 4 && inner > kChunkElems) per_run = (inner + kChunkElems - 1) / kChunkElems;
  const int64_t chunk = (inner + per_run - 1) / per_run;
  const int64_t dsi = p.dst[r - 1], ssi = p.src[r - 1];

  auto body = [&](size_t b, size_t e) {
    if (per_run == 1) {
      int64_t idx[kMaxCopyRank] = {};
      int64_t rem = static_cast<int64_t>(b);
      int64_t doff = 0, soff = 0;
      for (int d = r - 2; d >= 0; --d) {
        idx[d] = rem % p.size[d];
        rem /= p.size[d];
        doff += idx[d] * p.dst[d];
        soff += idx[d] * p.src[d];
      }
      for (size_t run = b; run < e; ++run) {
        mover.run(doff, soff, inner, dsi, ssi);
        for (int d = r - 2; d >= 0; --d) {
          if (++idx[d] < p.size[d]) {
            doff += p.dst[d];
            soff += p.src[d];
            break;
          }
          doff -= p.dst[d] * (p.size[d] - 1);
          soff -= p.src[d] * (p.size[d] - 1);
          idx[d] = 0;
        }
      }
    } else {
      for (size_t item = b; item < e; ++item) {
        const int64_t run = static_cast<int64_t>(item) / per_run;
        const int64_t start = (static_cast<int64_t>(item) % per_run) * chunk;
        if (start >= inner) continue;
        int64_t doff, soff;
        run_offsets(p, r - 1, run, doff, soff);
        mover.run(doff + start * dsi, soff + start * ssi, std::min(chunk, inner - start), dsi, ssi);
      }
    }
  };
  const size_t items = static_cast<size_t>(runs * per_run);
  if (par) {
    const int64_t elems_per_item = per_run == 1 ? inner : chunk;
    pool.parallel_for(items, static_cast<size_t>(std::max<int64_t>(1, kChunkElems / elems_per_item)), body);
  } else {
    body(0, items);
  }
}

}  // namespace

void strided_copy(void* dst, ScalarType dst_type, const int64_t* dst_strides, const void* src,
                  ScalarType src_type, const int64_t* src_strides, std::span<const int64_t> shape,
                  bool parallel) {
  const CopyPlan plan = make_plan(shape, dst_strides, src_strides);
  if (plan.numel == 0) return;
  if (dst_type == src_type) {
    const size_t es = element_size(dst_type);
    if (plan.rank == 1 && plan.dst[0] == 1 && plan.src[0] == 1 &&
        plan.numel * static_cast<int64_t>(es) < kParallelMinBytes) {
      // One contiguous run on one thread (a split or slice of a small tensor): no pool, no movers.
      std::memmove(dst, src, static_cast<size_t>(plan.numel) * es);
      return;
    }
    switch (es) {
      case 1: execute_plan(plan, SameTypeMover<uint8_t>{static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src)}, es, parallel); return;
      case 2: execute_plan(plan, SameTypeMover<uint16_t>{static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src)}, es, parallel); return;
      case 4: execute_plan(plan, SameTypeMover<uint32_t>{static_cast<uint32_t*>(dst), static_cast<const uint32_t*>(src)}, es, parallel); return;
      case 8: execute_plan(plan, SameTypeMover<uint64_t>{static_cast<uint64_t*>(dst), static_cast<const uint64_t*>(src)}, es, parallel); return;
      default:
        if (es == 0) unsupported_dtype("copy", dst_type);
        execute_plan(plan, BytesMover{static_cast<unsigned char*>(dst), static_cast<const unsigned char*>(src), es}, es, parallel);
        return;
    }
  }
  ErasedConvertMover mover{dst, src, nullptr, nullptr};
  size_t elem_bytes = 0;
  dispatch(dst_type, "copy", [&](auto to_tag) {
    using To = decltype(to_tag);
    dispatch(src_type, "copy", [&](auto from_tag) {
      using From = decltype(from_tag);
      mover.run_fn = &convert_run<To, From>;
      mover.tile_fn = &convert_tile<To, From>;
      elem_bytes = std::max(sizeof(To), sizeof(From));
    });
  });
  execute_plan(plan, mover, elem_bytes, parallel);
}

void contiguous_strides(std::span<const int64_t> shape, int64_t* strides) {
  int64_t running = 1;
  for (size_t k = shape.size(); k-- > 0;) {
    strides[k] = running;
    running *= shape[k] == 0 ? 1 : shape[k];
  }
}

int64_t numel_of(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

void copy_same_shape(Tensor& dst, const Tensor& src, const char* op) {
  if (dst.dim() != src.dim() || !std::equal(dst.sizes().begin(), dst.sizes().end(), src.sizes().begin())) {
    kernel_fail(std::string(op) + ": cannot copy a tensor of shape " + shape_str(src.sizes()) +
                " into one of shape " + shape_str(dst.sizes()));
  }
  if (dst.data() == src.data() && dst.dtype() == src.dtype() &&
      std::equal(dst.strides().begin(), dst.strides().end(), src.strides().begin())) {
    return;
  }
  strided_copy(dst.data(), dst.dtype(), dst.strides().data(), src.data(), src.dtype(), src.strides().data(),
               dst.sizes());
}

void copy_broadcast(Tensor& dst, const Tensor& src, const char* op) {
  if (src.dim() > dst.dim()) {
    kernel_fail(std::string(op) + ": cannot broadcast shape " + shape_str(src.sizes()) + " to " + shape_str(dst.sizes()));
  }
  const int lead = dst.dim() - src.dim();
  for (int d = 0; d < src.dim(); ++d) {
    if (src.size(d) != 1 && src.size(d) != dst.size(d + lead)) {
      kernel_fail(std::string(op) + ": cannot broadcast shape " + shape_str(src.sizes()) + " to " +
                  shape_str(dst.sizes()));
    }
  }
  if (lead == 0 && src.data() == dst.data() && src.dtype() == dst.dtype() &&
      std::equal(dst.sizes().begin(), dst.sizes().end(), src.sizes().begin()) &&
      std::equal(dst.strides().begin(), dst.strides().end(), src.strides().begin())) {
    return;
  }
  const auto ss = broadcast_strides(src, dst.sizes());
  strided_copy(dst.data(), dst.dtype(), dst.strides().data(), src.data(), src.dtype(), ss.data(), dst.sizes());
}

void copy_flat(Tensor& dst, const Tensor& src, const char* op) {
  if (dst.numel() != src.numel()) {
    kernel_fail(std::string(op) + ": cannot copy " + std::to_string(src.numel()) + " elements (shape " +
                shape_str(src.sizes()) + ") into " + std::to_string(dst.numel()) + " (shape " +
                shape_str(dst.sizes()) + ")");
  }
  if (src.numel() == 0) return;
  int64_t cs[kMaxTensorRank];
  if (dst.is_contiguous_order()) {
    // dst's memory is the row-major sequence: view it with src's shape.
    if (dst.data() == src.data() && dst.dtype() == src.dtype() && src.is_contiguous_order()) return;
    contiguous_strides(src.sizes(), cs);
    strided_copy(dst.data(), dst.dtype(), cs, src.data(), src.dtype(), src.strides().data(), src.sizes());
  } else if (src.is_contiguous_order()) {
    contiguous_strides(dst.sizes(), cs);
    strided_copy(dst.data(), dst.dtype(), dst.strides().data(), src.data(), src.dtype(), cs, dst.sizes());
  } else {
    // Both permuted: go through a row-major temporary of src's dtype.
    std::vector<unsigned char> tmp(static_cast<size_t>(src.numel()) * src.element_size());
    contiguous_strides(src.sizes(), cs);
    strided_copy(tmp.data(), src.dtype(), cs, src.data(), src.dtype(), src.strides().data(), src.sizes());
    contiguous_strides(dst.sizes(), cs);
    strided_copy(dst.data(), dst.dtype(), dst.strides().data(), tmp.data(), src.dtype(), cs, dst.sizes());
  }
}

void fill_with_scalar(Tensor& t, const Scalar& s, const char* op) {
  dispatch(t.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T v = scalar_to<T>(s, op);
    T* d = t.data_as<T>();
    const int64_t n = t.numel();
    // Every element of a tensor lives in its first numel slots whatever the dim order.
    if (n * static_cast<int64_t>(sizeof(T)) >= kParallelMinBytes && ThreadPool::current().num_threads() > 1) {
      ThreadPool::current().parallel_for(static_cast<size_t>(n), static_cast<size_t>(kChunkElems),
                                        [&](size_t b, size_t e) { std::fill(d + b, d + e, v); });
    } else {
      std::fill(d, d + n, v);
    }
  });
}

void check_index_dtype(const Tensor& index, const char* op, bool allow_bool) {
  const ScalarType t = index.dtype();
  if (t == ScalarType::Long || t == ScalarType::Int) return;
  if (allow_bool && (t == ScalarType::Bool || t == ScalarType::Byte)) return;
  kernel_fail(std::string(op) + ": index tensors must be int64 or int32" + (allow_bool ? " (or bool masks)" : "") +
              ", got " + std::string(scalar_type_name(t)));
}

void gather_as_int64(const Tensor& t, std::vector<int64_t>& out) {
  out.resize(static_cast<size_t>(t.numel()));
  if (out.empty()) return;
  int64_t cs[kMaxTensorRank];
  contiguous_strides(t.sizes(), cs);
  strided_copy(out.data(), ScalarType::Long, cs, t.data(), t.dtype(), t.strides().data(), t.sizes(), false);
}

}  // namespace etnp::compute
