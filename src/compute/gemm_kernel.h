// The fp32 GEMM micro-kernels, shared by the blocked GEMM for operands that change per call (gemm.h) and the
// one with weights packed at load (packed_gemm.h): rows of A times one panel of 16 columns of B, in 6x16 tiles
// of twelve AVX2/FMA accumulators on x86-64 (12x16 tiles of one AVX-512 register a row where the CPU has the
// avx512_vnni level, with the same bits) or twenty-four NEON ones on aarch64 (8x8 tiles for a last panel of 8
// columns or fewer), or portable loops at the portable level (core/cpu_features.h).
#pragma once

#include <cstddef>

namespace etnp::compute {

/// Columns of a panel of B, stored [k][16] (row p of the panel is 16 consecutive floats).
inline constexpr size_t kGemmPanel = 16;
/// Rows of A in one AVX2 or NEON register tile: the unit callers split rows in (the AVX-512 tile takes two).
inline constexpr size_t kGemmTileRows = 6;

/// Where a panel's results go: c[r * ldc + j] for j < cols (at most 16; the panel's columns past them are
/// padding, never read back). The sums start at c's values when `accumulate` (an earlier K block),
/// else at bias[j] (16 floats; nullptr for zeros). With `clamp` each result is clamped to [lo, hi].
/// A per-row output pass (an NCHW convolution's channels are rows): each sum of row r becomes
/// sum * scale[r] + bias[r] (a null scale or bias: 1 or 0), then, with `clamp`, is clamped to [lo, hi] keeping
/// NaN (aten::clamp: x < lo ? lo : x, then x > hi ? hi : x). Rows count from the panel call's first row.
struct GemmRowEpilogue {
  const float* scale = nullptr;
  const float* bias = nullptr;
  bool clamp = false;
  float lo = 0.0f, hi = 0.0f;
};

/// GemmRowEpilogue on `rows` rows of `cols` floats, `ldc` apart (its arrays indexed from the first row): a
/// multiply and an add, never fused into one (so that every level and architecture rounds the same), then the
/// clamp. The micro-kernels apply it in registers; this is the same arithmetic on stored rows.
void gemm_row_epilogue(float* c, size_t ldc, size_t rows, size_t cols, const GemmRowEpilogue& ep);

struct GemmPanelOut {
  float* c = nullptr;
  size_t ldc = 0;
  size_t cols = kGemmPanel;
  const float* bias = nullptr;
  bool accumulate = false;
  bool clamp = false;
  float lo = 0.0f, hi = 0.0f;
  /// Applied (with the last K block) to each tile right after it is stored, while its rows are in L1.
  const GemmRowEpilogue* rows = nullptr;
};

/// C[rows x cols] (+)= A[rows x k] * panel[k x 16], row r of A being the k floats at a + r * a_stride.
/// `next_panel` (or null): the k x 16 floats the caller multiplies next, fetched into the cache while the
/// first tile runs (one line per k step), so that weights streaming from memory do not stall its start.
void gemm_panel_f32(const float* a, size_t a_stride, size_t rows, size_t k, const float* panel,
                    const GemmPanelOut& out, const float* next_panel = nullptr);

/// Two neighbouring panels at once where this CPU has a tile for them (AVX-512): C[rows x out.cols] (+)= A *
/// [panel | panel + panel_stride], out.cols from 17 to 32, out.bias 32 floats (or null), no row epilogue. The
/// same results as gemm_panel_f32 on each panel, in less time (each value of A is loaded once for both). Returns
/// false, having done nothing, where there is no such tile; the caller then runs the panels one by one.
bool gemm_panel_pair_f32(const float* a, size_t a_stride, size_t rows, size_t k, const float* panel,
                         size_t panel_stride, const GemmPanelOut& out, const float* next_panel = nullptr);

/// gemm_panel_pair_f32 over indirect rows (as gemm_panel_f32_indirect), the same terms.
bool gemm_panel_pair_f32_indirect(const float* const* a, size_t a_stride, size_t rows, size_t segs, size_t seg_k,
                                  const float* panel, size_t panel_stride, const GemmPanelOut& out);

/// The same with indirect rows: row r of A is `segs` runs of seg_k floats, run s starting at a[r * a_stride + s]
/// (a convolution points them into its input); the panel holds the runs' weights one after another.
void gemm_panel_f32_indirect(const float* const* a, size_t a_stride, size_t rows, size_t segs, size_t seg_k,
                             const float* panel, const GemmPanelOut& out);

}  // namespace etnp::compute
