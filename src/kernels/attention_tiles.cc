// src/kernels/attention_tiles.cc: the register-tiled product of prefill
// attention (kernels/attention.h, attention_gemm_panels): C = A B (or C +=)
// with B packed in panels of kAttentionPanel = 16 columns.
//
// Why not SGEMM: OpenBLAS packs its B operand again on every call, and the
// prefill calls it once per (query block, key block) on the same K and V:
// about a fifth of the forward went to re-packing. The attention driver
// packs K^T and V once per task (attention_forward.cc) and this kernel reads
// the panels where they are.
//
// Tile: kRows rows x 16 columns of C in registers (16 / lanes vectors per
// row: 2 on AVX2 with 6 rows, 12 accumulators + 2 B vectors + 1 broadcast
// of the 16 registers; 1 on AVX-512 with 8 rows; 4 on SSE4 / NEON with 3
// rows). Each step k loads one 16-wide row of the panel and broadcasts
// A(r, k) for each row: kRows x 16 / lanes FMAs per 16 / lanes + kRows
// loads. Panels are walked outermost, so one panel stays in L1 while every
// row tile passes over it.
//
// Bits: every C element is one multiply-add chain over k = 0 .. K - 1 in
// order, started from 0, then added to C once (accumulate; as SGEMM with
// beta = 1, so a sum over many calls has the error of a block sum plus one
// addition per call), whatever the tile shape or row position: on a given
// target the result depends on the operands only (not the threads, the
// tiling or the rows computed beside it). Highway's MulAdd is fused on
// targets with FMA (AVX2, AVX-512) and a separate multiply and add on SSE4 /
// SSSE3, so the bits may differ between targets (the bounds hold on each).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention_tiles.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cstring>

#include "kernels/attention.h"
#include "kernels/row-inl.h"

HWY_BEFORE_NAMESPACE();
namespace smax::kernels::HWY_NAMESPACE {

constexpr size_t kPanel = static_cast<size_t>(kAttentionPanel);
// Fixed-width targets only (the x86 ones and the scalar fallback): a panel
// row is a whole number of vectors.
static_assert(!HWY_HAVE_SCALABLE, "fixed-width vectors");
constexpr size_t kTileLanes = hn::MaxLanes(DF());
static_assert(kPanel % kTileLanes == 0, "a 16-column panel row is whole vectors");
// Vectors per 16-column row of a tile, and the rows of the largest tile.
constexpr size_t kVecs = kPanel / kTileLanes;
constexpr size_t kTileRows = kVecs >= 16 ? 1 : kVecs >= 4 ? 3 : kVecs == 2 ? 6 : 8;

// C rows [0, kRows) x the 16 columns of one panel.
template <size_t kRows>
HWY_INLINE void FullTile(DF d, size_t K, const float* a, size_t ars, size_t acs, const float* b,
                         float* c, size_t ldc, bool accumulate) {
  constexpr size_t N = kTileLanes;
  VF acc[kRows][kVecs];
  for (size_t r = 0; r < kRows; ++r) {
    for (size_t v = 0; v < kVecs; ++v) acc[r][v] = hn::Zero(d);
  }
  for (size_t k = 0; k < K; ++k) {
    const float* bk = b + k * kPanel;
    VF bv[kVecs];
    for (size_t v = 0; v < kVecs; ++v) bv[v] = hn::LoadU(d, bk + v * N);
    const float* ak = a + k * acs;
    for (size_t r = 0; r < kRows; ++r) {
      const VF av = hn::Set(d, ak[r * ars]);
      for (size_t v = 0; v < kVecs; ++v) acc[r][v] = hn::MulAdd(av, bv[v], acc[r][v]);
    }
  }
  for (size_t r = 0; r < kRows; ++r) {
    for (size_t v = 0; v < kVecs; ++v) {
      float* cv = c + r * ldc + v * N;
      hn::StoreU(accumulate ? hn::Add(hn::LoadU(d, cv), acc[r][v]) : acc[r][v], d, cv);
    }
  }
}

// The same for the first `cols` columns only (the last panel of C): through
// a 16-wide copy of the tile (the same multiply-add chains).
template <size_t kRows>
HWY_NOINLINE void EdgeTile(DF d, size_t K, const float* a, size_t ars, size_t acs,
                           const float* b, float* c, size_t ldc, size_t cols, bool accumulate) {
  HWY_ALIGN float edge[kRows * kPanel];
  for (size_t r = 0; r < kRows; ++r) {
    std::fill(edge + r * kPanel, edge + (r + 1) * kPanel, 0.0f);
    if (accumulate) std::memcpy(edge + r * kPanel, c + r * ldc, cols * sizeof(float));
  }
  FullTile<kRows>(d, K, a, ars, acs, b, edge, kPanel, accumulate);
  for (size_t r = 0; r < kRows; ++r) {
    std::memcpy(c + r * ldc, edge + r * kPanel, cols * sizeof(float));
  }
}

template <size_t kRows>
HWY_INLINE void Tile(DF d, size_t K, const float* a, size_t ars, size_t acs, const float* b,
                     float* c, size_t ldc, size_t cols, bool accumulate) {
  if (cols == kPanel) {
    FullTile<kRows>(d, K, a, ars, acs, b, c, ldc, accumulate);
  } else {
    EdgeTile<kRows>(d, K, a, ars, acs, b, c, ldc, cols, accumulate);
  }
}

// Rows [0, rows) of one panel: full tiles, then smaller ones for the rest.
template <size_t kRows>
HWY_INLINE void PanelRows(DF d, size_t rows, size_t K, const float* a, size_t ars, size_t acs,
                          const float* b, float* c, size_t ldc, size_t cols, bool accumulate) {
  size_t r = 0;
  for (; r + kRows <= rows; r += kRows) {
    Tile<kRows>(d, K, a + r * ars, ars, acs, b, c + r * ldc, ldc, cols, accumulate);
  }
  // The rest: tiles of 4, 2 and 1 rows.
  if constexpr (kRows > 4) {
    for (; r + 4 <= rows; r += 4) {
      Tile<4>(d, K, a + r * ars, ars, acs, b, c + r * ldc, ldc, cols, accumulate);
    }
  }
  if constexpr (kRows > 2) {
    for (; r + 2 <= rows; r += 2) {
      Tile<2>(d, K, a + r * ars, ars, acs, b, c + r * ldc, ldc, cols, accumulate);
    }
  }
  if constexpr (kRows > 1) {
    for (; r < rows; ++r) {
      Tile<1>(d, K, a + r * ars, ars, acs, b, c + r * ldc, ldc, cols, accumulate);
    }
  }
}

// Columns of every panel for rows [r0, r1) of C.
HWY_INLINE void PanelsOfRows(DF d, size_t r0, size_t r1, size_t N, size_t K, const float* a,
                             size_t ars, size_t acs, const float* bp, size_t panel_stride,
                             float* c, size_t ldc, bool accumulate, bool prefetch) {
  const size_t panels = (N + kPanel - 1) / kPanel;
  for (size_t p = 0; p < panels; ++p) {
    const size_t c0 = p * kPanel;
    const size_t cols = std::min(kPanel, N - c0);
    const float* b = bp + p * panel_stride;
    if (prefetch && p + 1 < panels) {
      // The next panel's first lines, while this one is used by every row.
      const float* next = b + panel_stride;
      for (size_t k = 0; k < std::min<size_t>(K, 8); ++k) hwy::Prefetch(next + k * kPanel);
    }
    PanelRows<kTileRows>(d, r1 - r0, K, a + r0 * ars, ars, acs, b, c + r0 * ldc + c0, ldc, cols,
                         accumulate);
  }
}

void AttentionGemmPanelsImpl(int64_t M, int64_t N, int64_t K, const float* a, int64_t ars,
                             int64_t acs, const float* bp, int64_t panel_stride, float* c,
                             int64_t ldc, bool accumulate) {
  const DF d;
  const size_t m = static_cast<size_t>(M), n = static_cast<size_t>(N), k = static_cast<size_t>(K);
  const size_t as = static_cast<size_t>(ars), ks = static_cast<size_t>(acs);
  const size_t ps = static_cast<size_t>(panel_stride), lc = static_cast<size_t>(ldc);
  if (ars == 1 && acs > 1) {
    // A read column-wise (a transposed view): a tile's k steps touch K lines
    // of A. Rows outer, two tiles' rows at a time, so those lines stay in L1
    // while every panel passes over them.
    constexpr size_t kChunk = 2 * kTileRows;
    for (size_t r0 = 0; r0 < m; r0 += kChunk) {
      PanelsOfRows(d, r0, std::min(m, r0 + kChunk), n, k, a, as, ks, bp, ps, c, lc, accumulate,
                   false);
    }
  } else {
    // Panels outer: one panel stays in L1 while every row tile passes over it.
    PanelsOfRows(d, 0, m, n, k, a, as, ks, bp, ps, c, lc, accumulate, true);
  }
}

}  // namespace smax::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace smax::kernels {

HWY_EXPORT(AttentionGemmPanelsImpl);

void attention_gemm_panels(int64_t M, int64_t N, int64_t K, const float* a, int64_t ars,
                           int64_t acs, const float* bp, int64_t panel_stride, float* c,
                           int64_t ldc, bool accumulate) noexcept {
  if (M <= 0 || N <= 0) return;
  HWY_DYNAMIC_DISPATCH(AttentionGemmPanelsImpl)(M, N, K, a, ars, acs, bp, panel_stride, c, ldc,
                                               accumulate);
}

void attention_pack_row(const float* row, int64_t n, int64_t k, float* dst,
                        int64_t panel_stride) noexcept {
  float* p = dst + k * kAttentionPanel;
  for (int64_t c = 0; c < n; c += kAttentionPanel, p += panel_stride) {
    std::memcpy(p, row + c, static_cast<size_t>(std::min(kAttentionPanel, n - c)) * sizeof(float));
  }
}

void attention_pack_pad(float* dst, int64_t K, int64_t n, int64_t panel_stride) noexcept {
  const int64_t used = n % kAttentionPanel;
  if (used == 0) return;
  float* p = dst + (n / kAttentionPanel) * panel_stride;
  for (int64_t k = 0; k < K; ++k) {
    std::fill(p + k * kAttentionPanel + used, p + (k + 1) * kAttentionPanel, 0.0f);
  }
}

void attention_pack_rows(const float* m, int64_t ld, int64_t rows, int64_t n, float* dst,
                         int64_t panel_stride) noexcept {
  // Panel by panel: the writes are sequential, each row's 16 floats one
  // fixed-size copy.
  const int64_t w = kAttentionPanel;
  int64_t c = 0;
  for (; c + w <= n; c += w) {
    float* p = dst + (c / w) * panel_stride;
    for (int64_t r = 0; r < rows; ++r) std::memcpy(p + r * w, m + r * ld + c, w * sizeof(float));
  }
  if (c < n) {
    float* p = dst + (c / w) * panel_stride;
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(p + r * w, m + r * ld + c, static_cast<size_t>(n - c) * sizeof(float));
    }
  }
  attention_pack_pad(dst, rows, n, panel_stride);
}

void attention_pack_column(const float* col, int64_t K, int64_t c, float* dst,
                           int64_t panel_stride) noexcept {
  float* p = dst + (c / kAttentionPanel) * panel_stride + c % kAttentionPanel;
  for (int64_t k = 0; k < K; ++k) p[k * kAttentionPanel] = col[k];
}

}  // namespace smax::kernels
#endif  // HWY_ONCE
