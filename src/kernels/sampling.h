// src/kernels/sampling.h: row kernels of the sampling family (fused softmax +
// top-k, candidate filters for Gumbel-max and nucleus sampling) and the
// counter-based Gumbel noise every sampler shares.
//
// Kernels are Highway code in src/kernels/sampling.cc, dispatched once per
// call; noexcept, allocation-free, one contiguous row of n >= 1 logits t
// (already transformed by the op: scale, masks; -inf = masked).
#pragma once

#include <Random123/philox.h>

#include <cmath>
#include <cstdint>
#include <string>

namespace smax::kernels {

// ---------------------------------------------------------------------------
// Gumbel noise: g(seed, row, i) = -log(-log U), U in [2^-53, 1 - 2^-53].
// Philox4x32-10 (Salmon et al., SC'11, Random123) with key (seed_lo, seed_hi)
// and counter (j_lo, j_hi, row_lo, row_hi), j = i / 2; element i takes the
// output words (w0, w1) when i is even and (w2, w3) when odd, u = w_hi:w_lo
// (64 bits), U = (floor(u / 2^12) + 1/2) * 2^-52 (exact in float64, never 0
// or 1). g is evaluated in float64 with std::log. The noise of (row, i) thus
// depends only on (seed, row, i): not on the layout, the thread count, the
// row length or which elements a sampler looks at.
// ---------------------------------------------------------------------------
inline double gumbel_from_u64(uint64_t u) noexcept {
  const double U = (static_cast<double>(u >> 12) + 0.5) * 0x1p-52;
  return -std::log(-std::log(U));
}

/// The four Philox output words of the element pair (2j, 2j + 1) of `row`.
inline void philox_words(uint64_t seed, uint64_t row, uint64_t j, uint32_t* w) noexcept {
  philox4x32_ctr_t c = {{static_cast<uint32_t>(j), static_cast<uint32_t>(j >> 32),
                         static_cast<uint32_t>(row), static_cast<uint32_t>(row >> 32)}};
  philox4x32_key_t k = {{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}};
  const philox4x32_ctr_t r = philox4x32(c, k);
  for (int q = 0; q < 4; ++q) w[q] = r.v[q];
}

/// u of element 2j + odd from its pair's words.
inline uint64_t philox_u64(const uint32_t* w, int odd) noexcept {
  return (static_cast<uint64_t>(w[2 * odd + 1]) << 32) | w[2 * odd];
}

/// Both noises of the element pair (2j, 2j + 1) of `row`.
inline void gumbel_pair(uint64_t seed, uint64_t row, uint64_t j, double* g2) noexcept {
  uint32_t w[4];
  philox_words(seed, row, j, w);
  g2[0] = gumbel_from_u64(philox_u64(w, 0));
  g2[1] = gumbel_from_u64(philox_u64(w, 1));
}

/// g(seed, row, i).
inline double gumbel(uint64_t seed, uint64_t row, uint64_t i) noexcept {
  double g2[2];
  gumbel_pair(seed, row, i >> 1, g2);
  return g2[i & 1];
}

/// Largest value g can take (U = 1 - 2^-53): 36.7368...; kGumbelBound is a
/// safe upper bound used to prune candidates that cannot win a Gumbel-max.
inline constexpr double kGumbelBound = 37.0;

// ---------------------------------------------------------------------------
// Fused softmax + top-k scan: one read of the row computes the online
// normaliser (sum_i e^t_i = d * e^ref) and keeps the best candidates.
// Order: larger value first, ties broken by the lower index.
// ---------------------------------------------------------------------------
struct TopkCandidate {
  float value;
  int64_t index;
};

inline bool topk_better(const TopkCandidate& a, const TopkCandidate& b) noexcept {
  return a.value > b.value || (a.value == b.value && a.index < b.index);
}

struct TopkScan {
  double ref = 0.0;   ///< reference of the sum (a multiple of ln2, or the online ref)
  double d = 0.0;     ///< sum_i e^(t_i - ref) (NaN if the row holds NaN or +inf)
  float max = 0.0f;   ///< max_i t_i (NaN lanes may be dropped: test d)
  int64_t count = 0;  ///< candidates left in buf (<= cap)
};

/// Scans t[0..n) (n >= 1): the online normaliser (m, d) (Milakov &
/// Gimelshein; in the reference-exponent form of Dukhan & Ablavatski) and a
/// threshold filter: an element enters `buf` only if it is strictly greater
/// than the current k-th best value (so ties keep the lower index); when
/// `cap` candidates are buffered, nth_element keeps the best k and raises the
/// threshold. On return buf[0..count) holds a superset of the k best
/// elements that are > -inf (unsorted; NaN never enters). Requires
/// 1 <= k <= cap.
TopkScan topk_scan(const float* t, int64_t n, int64_t k, TopkCandidate* buf,
                   int64_t cap) noexcept;

/// Writes the indices i (ascending) with t[i] > thr to out (capacity n) and
/// returns their number. NaN never passes.
int64_t select_greater(const float* t, int64_t n, float thr, int64_t* out) noexcept;

struct MaxScan {
  float max;     ///< max over the non-NaN entries (-inf if none)
  bool has_nan;  ///< some t_i is NaN
};
MaxScan max_scan(const float* t, int64_t n) noexcept;

/// Lowest i with t[i] == v, or n if none.
int64_t find_first_equal(const float* t, int64_t n, float v) noexcept;

/// Philox words 1 and 3 (the high 32 bits of u for elements 2j and 2j + 1)
/// of the pairs j = j0 .. j0 + count - 1 of `row`, to hi[2q] and hi[2q + 1]
/// (hi has 2 * count entries; the same words as philox_words).
void philox_hi_words(uint64_t seed, uint64_t row, uint64_t j0, int64_t count,
                     uint32_t* hi) noexcept;

/// Name of the fused scan on the active target, e.g.
/// "f32_softmax_topk__avx2_rr2_p5_u4_ts_filter".
std::string softmax_topk_kernel_name();

}  // namespace smax::kernels
