#include "compute/packed_gemm.h"

#include <algorithm>
#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif
#if defined(__aarch64__)
#include <arm_neon.h>
#endif

#include "compute/gemm_kernel.h"
#include "core/cpu_features.h"
#include "compute/parallel.h"
#include "etnp/threadpool.h"

namespace etnp::compute {
namespace {

constexpr size_t kMr = kGemmTileRows;
constexpr size_t kNr = kGemmPanel;
constexpr size_t kKc = 256;  // K block: a panel's 256 x 16 floats (16 KiB) stay in L1
/// Packed bytes from which a matrix's packing is split across threads, and about the share of each chunk: a
/// quarter of a millisecond of copying on one core, well above what waking the pool costs.
constexpr size_t kParallelPackBytes = size_t{128} * 1024;

// 64-byte aligned start inside a vector over-allocated by 16 floats (the kernels use aligned loads).
template <class A>
const float* aligned(const std::vector<float, A>& v) {
  const auto p = reinterpret_cast<uintptr_t>(v.data());
  return reinterpret_cast<const float*>((p + 63) & ~uintptr_t{63});
}

#if defined(__x86_64__) && defined(__GNUC__)
// One row times panels [p_begin, p_end), each streamed start to end: the single-row product of a decoding
// step, bound by the bytes of the weights. The sums are the micro-kernel's: from the bias, one fused
// multiply-add per k in k order (its K blocks continue from the stored sums), so the bits are the same.
__attribute__((target("avx2,fma"))) void gemv_panels_avx2(const float* x, size_t k, const float* packed,
                                                          const float* packed_bias, size_t n, size_t p_begin,
                                                          size_t p_end, float lo, float hi, float* out) {
  const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
  for (size_t p = p_begin; p < p_end; ++p) {
    const float* panel = packed + p * k * kNr;
    __m256 c0 = _mm256_load_ps(packed_bias + p * kNr), c1 = _mm256_load_ps(packed_bias + p * kNr + 8);
    size_t i = 0;
    for (; i + 4 <= k; i += 4) {
      // 1 KiB on: the stream's next four lines (these 4 k's 256 bytes), which the hardware prefetcher reaches
      // too late at a panel's start. The address is an integer: it may lie past the array, where pointer
      // arithmetic is undefined and a prefetch does nothing.
      const uintptr_t next = reinterpret_cast<uintptr_t>(panel + i * kNr) + 1024;
      for (uintptr_t line = 0; line < 256; line += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(next + line), _MM_HINT_T0);
      }
      for (size_t j = 0; j < 4; ++j) {
        const __m256 a = _mm256_broadcast_ss(x + i + j);
        c0 = _mm256_fmadd_ps(a, _mm256_load_ps(panel + (i + j) * kNr), c0);
        c1 = _mm256_fmadd_ps(a, _mm256_load_ps(panel + (i + j) * kNr + 8), c1);
      }
    }
    for (; i < k; ++i) {
      const __m256 a = _mm256_broadcast_ss(x + i);
      c0 = _mm256_fmadd_ps(a, _mm256_load_ps(panel + i * kNr), c0);
      c1 = _mm256_fmadd_ps(a, _mm256_load_ps(panel + i * kNr + 8), c1);
    }
    c0 = _mm256_min_ps(vhi, _mm256_max_ps(vlo, c0));
    c1 = _mm256_min_ps(vhi, _mm256_max_ps(vlo, c1));
    const size_t cols = std::min(kNr, n - p * kNr);
    if (cols == kNr) {
      _mm256_storeu_ps(out + p * kNr, c0);
      _mm256_storeu_ps(out + p * kNr + 8, c1);
    } else {
      alignas(32) float tail[kNr];
      _mm256_store_ps(tail, c0);
      _mm256_store_ps(tail + 8, c1);
      std::copy(tail, tail + cols, out + p * kNr);
    }
  }
}
#endif

#if defined(__aarch64__)
// The NEON twin: 16 columns in four q registers, the same fused sums in the same order as the NEON micro-kernel.
void gemv_panels_neon(const float* x, size_t k, const float* packed, const float* packed_bias, size_t n,
                      size_t p_begin, size_t p_end, float lo, float hi, float* out) {
  const float32x4_t vlo = vdupq_n_f32(lo), vhi = vdupq_n_f32(hi);
  for (size_t p = p_begin; p < p_end; ++p) {
    const float* panel = packed + p * k * kNr;
    const float* b = packed_bias + p * kNr;
    float32x4_t c0 = vld1q_f32(b), c1 = vld1q_f32(b + 4), c2 = vld1q_f32(b + 8), c3 = vld1q_f32(b + 12);
    for (size_t i = 0; i < k; ++i) {
      // 1 KiB ahead, as the AVX2 loop (a prefetch of an address past the array does nothing).
      __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(panel + i * kNr) + 1024));
      const float* w = panel + i * kNr;
      c0 = vfmaq_n_f32(c0, vld1q_f32(w), x[i]);
      c1 = vfmaq_n_f32(c1, vld1q_f32(w + 4), x[i]);
      c2 = vfmaq_n_f32(c2, vld1q_f32(w + 8), x[i]);
      c3 = vfmaq_n_f32(c3, vld1q_f32(w + 12), x[i]);
    }
    alignas(16) float sums[kNr];
    vst1q_f32(sums, vminq_f32(vmaxq_f32(c0, vlo), vhi));
    vst1q_f32(sums + 4, vminq_f32(vmaxq_f32(c1, vlo), vhi));
    vst1q_f32(sums + 8, vminq_f32(vmaxq_f32(c2, vlo), vhi));
    vst1q_f32(sums + 12, vminq_f32(vmaxq_f32(c3, vlo), vhi));
    std::copy(sums, sums + std::min(kNr, n - p * kNr), out + p * kNr);
  }
}
#endif

// ---- packing [n, k] weights ------------------------------------------------------------------------------
//
// Each panel is the transpose of 16 weight rows. Transposing straight from the rows (one panel column at a
// time, stores 64 bytes apart across a panel of up to k * 64 bytes) ran at a third of memcpy's speed and was
// most of a model's load. Instead a run of 256 floats of each of the 16 rows is first copied (and scaled) into a
// small buffer that stays in L1, then transposed from there into the panel with 8x8 register transposes where
// AVX2 is present. A convolution's weights ([k / taps, taps] per row, taken in [taps, k / taps] order) go the same
// way: the order only decides which panel row each transposed row of 16 lands in. (Reordering each row's taps in
// the buffer first, element by element, made the loads of portable MobileNetV2 and EfficientNet-B0 a third
// longer.)

/// Walks the panel rows that a weight row's elements land in, in the row's order: element i = channel * taps + tap
/// goes to row tap * channels + channel.
class PanelRows {
 public:
  PanelRows(size_t taps, size_t channels, size_t first)
      : taps_(taps), channels_(channels), tap_(first % taps), channel_(first / taps) {}
  /// The current element's row, then moves to the next element.
  size_t next() {
    const size_t row = tap_ * channels_ + channel_;
    if (++tap_ == taps_) {
      tap_ = 0;
      ++channel_;
    }
    return row;
  }

 private:
  size_t taps_, channels_, tap_, channel_;
};

// dst[r][c] = src[c * lds + r] for r < 8, c < 8: the 8 rows of the transpose, each stored where dst[r] points.
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) void transpose8x8_avx2(const float* src, size_t lds, float* const dst[8]) {
  const __m256 r0 = _mm256_loadu_ps(src), r1 = _mm256_loadu_ps(src + lds), r2 = _mm256_loadu_ps(src + 2 * lds),
               r3 = _mm256_loadu_ps(src + 3 * lds), r4 = _mm256_loadu_ps(src + 4 * lds),
               r5 = _mm256_loadu_ps(src + 5 * lds), r6 = _mm256_loadu_ps(src + 6 * lds),
               r7 = _mm256_loadu_ps(src + 7 * lds);
  const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1), t2 = _mm256_unpacklo_ps(r2, r3),
               t3 = _mm256_unpackhi_ps(r2, r3), t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
               t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE),
               s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE),
               s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE),
               s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  _mm256_storeu_ps(dst[0], _mm256_permute2f128_ps(s0, s4, 0x20));
  _mm256_storeu_ps(dst[1], _mm256_permute2f128_ps(s1, s5, 0x20));
  _mm256_storeu_ps(dst[2], _mm256_permute2f128_ps(s2, s6, 0x20));
  _mm256_storeu_ps(dst[3], _mm256_permute2f128_ps(s3, s7, 0x20));
  _mm256_storeu_ps(dst[4], _mm256_permute2f128_ps(s0, s4, 0x31));
  _mm256_storeu_ps(dst[5], _mm256_permute2f128_ps(s1, s5, 0x31));
  _mm256_storeu_ps(dst[6], _mm256_permute2f128_ps(s2, s6, 0x31));
  _mm256_storeu_ps(dst[7], _mm256_permute2f128_ps(s3, s7, 0x31));
}
#endif

// panel[row(i) * 16 + c] = block[c * ld + i] for c < 16, i < count, row(i) the i-th of `rows`.
void transpose_into_panel(const float* block, size_t ld, size_t count, PanelRows rows, float* panel) {
  size_t i = 0;
#if defined(__x86_64__) && defined(__GNUC__)
  if (has_avx2_fma()) {
    float* dst[8];
    for (; i + 8 <= count; i += 8) {
      for (size_t r = 0; r < 8; ++r) dst[r] = panel + rows.next() * kNr;
      transpose8x8_avx2(block + i, ld, dst);
      for (size_t r = 0; r < 8; ++r) dst[r] += 8;
      transpose8x8_avx2(block + 8 * ld + i, ld, dst);
    }
  }
#endif
  for (; i < count; ++i) {
    float* dst = panel + rows.next() * kNr;
    for (size_t c = 0; c < kNr; ++c) dst[c] = block[c * ld + i];
  }
}

// Packs panels [p_begin, p_end) of [n, k] weights read as `taps` says, column j scaled by scale[j] (when given).
void pack_nk(const float* w, size_t k, size_t n, const FilterTaps& taps, const float* scale, float* packed,
             size_t p_begin, size_t p_end) {
  constexpr size_t kRun = 256;  // floats of each row per pass: 16 rows of them stay in L1
  std::vector<float> buffer(kNr * kRun);
  const bool window = taps.kh != 0;
  const size_t row_floats = window ? k / taps.taps * taps.kh * taps.kw : k;  // a source row
  for (size_t p = p_begin; p < p_end; ++p) {
    const size_t j0 = p * kNr, cols = std::min(kNr, n - j0);
    float* panel = packed + p * k * kNr;
    for (size_t i0 = 0; i0 < k; i0 += kRun) {
      const size_t count = std::min(kRun, k - i0);
      for (size_t c = 0; c < kNr; ++c) {
        float* dst = buffer.data() + c * kRun;
        if (c >= cols) {  // the last panel's columns past n
          std::fill(dst, dst + count, 0.0f);
          continue;
        }
        const float* row = w + (j0 + c) * row_floats;
        if (window) {
          // Element i is tap i % taps (row-major in the rectangle) of channel i / taps: walked, not divided out
          // (a lone centre tap is one float per channel, kh * kw apart).
          const size_t tap = i0 % taps.taps;
          size_t y = tap / taps.cols, x = tap % taps.cols;
          const float* filter = row + i0 / taps.taps * taps.kh * taps.kw + taps.row0 * taps.kw + taps.col0;
          for (size_t i = 0; i < count; ++i) {
            dst[i] = filter[y * taps.kw + x];
            if (++x == taps.cols) {
              x = 0;
              if (++y == taps.rows) y = 0, filter += taps.kh * taps.kw;
            }
          }
        } else {
          const float* src = row + i0;
          // The row's next run, a pass ahead: the weights come from the program file's 4 KiB pages, where the
          // hardware prefetcher stops at every page boundary, and 16 rows are read at a time.
          const size_t ahead = std::min(kRun, k - std::min(k, i0 + kRun));
          for (size_t i = 0; i < ahead; i += 16) __builtin_prefetch(src + kRun + i);
          std::copy(src, src + count, dst);
        }
        if (scale != nullptr) {
          const float s = scale[j0 + c];
          for (size_t i = 0; i < count; ++i) dst[i] *= s;
        }
      }
      transpose_into_panel(buffer.data(), kRun, count, PanelRows(taps.taps, k / taps.taps, i0), panel);
    }
  }
}

}  // namespace

PackedGemm::PackedGemm(const float* w, bool w_is_nk, size_t k, size_t n, const float* bias, const FilterTaps& taps,
                       const float* column_scale)
    : k_(k), n_(n) {
  const size_t panels = (n + kNr - 1) / kNr;
  panels_.resize(panels * k * kNr + 16);  // not zeroed (LargePageAllocator): every element read is written below
  bias_.assign(panels * kNr + 16, 0.0f);
  auto* packed = const_cast<float*>(aligned(panels_));
  auto* packed_bias = const_cast<float*>(aligned(bias_));
  auto pack = [&](size_t p_begin, size_t p_end) {
    if (w_is_nk) return pack_nk(w, k, n, taps, column_scale, packed, p_begin, p_end);
    // A [k, n] matrix: each panel row is a 64-byte run of a weight row, read in order.
    for (size_t p = p_begin; p < p_end; ++p) {
      const size_t j0 = p * kNr, cols = std::min(kNr, n - j0);
      float* panel = packed + p * k * kNr;
      for (size_t i = 0; i < k; ++i) {
        float* dst = panel + i * kNr;
        std::copy(w + i * n + j0, w + i * n + j0 + cols, dst);
        std::fill(dst + cols, dst + kNr, 0.0f);  // the last panel's columns past n
      }
    }
  };
  // Packing is most of a convolutional network's load (each weight read from the file and written to fresh
  // pages): the panels of a large matrix are split across the current pool's threads.
  const size_t panel_bytes = k * kNr * sizeof(float);
  if (panels > 1 && panels * panel_bytes >= kParallelPackBytes) {
    const size_t grain = std::max<size_t>(1, kParallelPackBytes / 2 / panel_bytes);
    ThreadPool::current().parallel_for(panels, grain, pack);
  } else {
    pack(0, panels);
  }
  if (bias != nullptr) std::copy(bias, bias + n, packed_bias);
}

WeightBytes PackedGemm::content() const {
  // The vectors' aligned parts only: where the alignment padding falls depends on the allocation.
  const size_t panels = this->panels();
  return {bytes_of(k_), bytes_of(n_), std::as_bytes(std::span<const float>(aligned(panels_), panels * k_ * kNr)),
          std::as_bytes(std::span<const float>(aligned(bias_), panels * kNr))};
}

void PackedGemm::run_rows(const float* in, size_t rows, size_t in_stride, size_t p_begin, size_t p_end,
                          float out_min, float out_max, float* out) const {
#if defined(__x86_64__) && defined(__GNUC__)
  if (rows == 1 && has_avx2_fma()) {
    return gemv_panels_avx2(in, k_, aligned(panels_), aligned(bias_), n_, p_begin, p_end, out_min, out_max, out);
  }
#endif
#if defined(__aarch64__)
  if (rows == 1 && has_neon()) {
    return gemv_panels_neon(in, k_, aligned(panels_), aligned(bias_), n_, p_begin, p_end, out_min, out_max, out);
  }
#endif
  // K in blocks whose weight panel stays in L1; rows in blocks whose inputs stay in L2 while every panel
  // streams past them.
  const size_t kc_max = std::min(k_, kKc);
  const size_t block = std::max<size_t>(kMr, (128 * 1024 / std::max<size_t>(kc_max * sizeof(float), 1)) / kMr * kMr);
  const float* packed = aligned(panels_);
  const float* packed_bias = aligned(bias_);
  for (size_t k0 = 0; k0 < k_ || k0 == 0; k0 += kKc) {
    const size_t kc = std::min(kKc, k_ - k0);
    const bool first = k0 == 0, last = k0 + kc >= k_;
    for (size_t r0 = 0; r0 < rows; r0 += block) {
      const size_t r1 = std::min(rows, r0 + block);
      for (size_t p = p_begin; p < p_end;) {
        // Two panels at once where the CPU has a tile for them (gemm_panel_pair_f32), else one.
        const size_t width = p + 1 < p_end ? 2 : 1;
        const float* panel = packed + (p * k_ + k0) * kNr;
        const float* bias = packed_bias + p * kNr;
        const size_t nr = std::min(width * kNr, n_ - p * kNr);
        const GemmPanelOut panel_out{out + r0 * n_ + p * kNr, n_, nr, bias, !first, last, out_min, out_max};
        // The block the next call reads: the next panel's, or after the last panel the first one's, for the
        // next row block or else the next K block. (The weights come from memory once per call: every tile of
        // the rows reads a block after the first.)
        auto next_after = [&](size_t q) -> const float* {
          if (q < p_end) return packed + (q * k_ + k0) * kNr;
          if (r1 < rows) return packed + (p_begin * k_ + k0) * kNr;
          if (!last) return packed + (p_begin * k_ + k0 + kc) * kNr;
          return nullptr;
        };
        const float* a = in + r0 * in_stride + k0;
        if (width == 2 &&
            gemm_panel_pair_f32(a, in_stride, r1 - r0, kc, panel, k_ * kNr, panel_out, next_after(p + 2))) {
          p += 2;
          continue;
        }
        GemmPanelOut one = panel_out;
        one.cols = std::min(kNr, nr);
        gemm_panel_f32(a, in_stride, r1 - r0, kc, panel, one, next_after(p + 1));
        ++p;
      }
    }
    if (k_ == 0) break;
  }
}

size_t PackedGemm::panels() const { return (n_ + kNr - 1) / kNr; }

bool PackedGemm::split_rows(size_t rows, size_t panels, size_t threads) {
  // Many rows: by rows. Few: whichever divides the work more evenly, the rows in whole tiles or the column panels
  // (64 rows are 11 tiles, 36 + 28 rows on two threads, while their 48 panels split 24 + 24; 9 rows split 6 + 3,
  // so a squeezenet's 3x3 map of 512 -> 1000 channels goes by its 63 panels; a decoder's single row has one tile).
  const size_t tiles = (rows + kMr - 1) / kMr;
  if (panels < 2 || tiles >= 8 * threads) return true;
  if (tiles < threads) return false;
  const double row_share = static_cast<double>((tiles + threads - 1) / threads * kMr) / static_cast<double>(rows);
  const double panel_share = static_cast<double>((panels + threads - 1) / threads) / static_cast<double>(panels);
  return row_share <= panel_share;
}

void PackedGemm::run(const float* in, size_t rows, size_t in_stride, float out_min, float out_max, float* out) const {
  if (rows == 0 || n_ == 0) return;
  const size_t tiles = (rows + kMr - 1) / kMr;
  const size_t panels = this->panels();
  ThreadPool& pool = ThreadPool::current();
  const size_t threads = pool.num_threads();
  if (threads > 1 && rows * k_ * n_ >= kParallelWork) {
    if (split_rows(rows, panels, threads)) {
      pool.parallel_for(tiles, 1, [&](size_t t0, size_t t1) {
        const size_t r0 = t0 * kMr, r1 = std::min(rows, t1 * kMr);
        run_rows(in + r0 * in_stride, r1 - r0, in_stride, 0, panels, out_min, out_max, out + r0 * n_);
      });
    } else {
      pool.parallel_for(panels, 1, [&](size_t p0, size_t p1) {
        run_rows(in, rows, in_stride, p0, p1, out_min, out_max, out);
      });
    }
    return;
  }
  run_rows(in, rows, in_stride, 0, panels, out_min, out_max, out);
}

void PackedGemm::run_indirect(const float* const* a, size_t rows, size_t segs, size_t seg_k, size_t k_begin,
                              float out_min, float out_max, float* out, size_t p_begin, size_t p_end) const {
  if (rows == 0 || n_ == 0) return;
  const float* packed = aligned(panels_);
  const float* packed_bias = aligned(bias_);
  // K in blocks of whole segments (as run_rows: the panel's block stays in L1 for the next row tile). With one
  // tile nothing reuses it: every panel is streamed whole, and one after the other they are the packed weights in
  // address order (a 2x2 map of 512 channels reads 9 MiB of 3x3 weights once per call).
  const size_t group = rows <= kMr ? std::max<size_t>(segs, 1) : std::max<size_t>(1, kKc / std::max<size_t>(seg_k, 1));
  for (size_t s0 = 0; s0 < segs || s0 == 0; s0 += group) {
    const size_t gs = std::min(group, segs - s0);
    const bool first = s0 == 0, last = s0 + gs >= segs;
    for (size_t p = p_begin; p < p_end;) {
      // Two panels at once where the CPU has a tile for them (as run_rows), else one.
      const size_t width = p + 1 < p_end ? 2 : 1;
      const float* panel = packed + (p * k_ + k_begin + s0 * seg_k) * kNr;
      const float* bias = packed_bias + p * kNr;
      const size_t nr = std::min(width * kNr, n_ - p * kNr);
      GemmPanelOut panel_out{out + p * kNr, n_, nr, bias, !first, last, out_min, out_max};
      if (width == 2 && gemm_panel_pair_f32_indirect(a + s0, segs, rows, gs, seg_k, panel, k_ * kNr, panel_out)) {
        p += 2;
        continue;
      }
      panel_out.cols = std::min(kNr, nr);
      gemm_panel_f32_indirect(a + s0, segs, rows, gs, seg_k, panel, panel_out);
      ++p;
    }
    if (segs == 0) break;
  }
}

}  // namespace etnp::compute
