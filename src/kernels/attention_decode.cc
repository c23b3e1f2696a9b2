// src/kernels/attention_decode.cc: the two small products of decoding
// attention (kernels/attention.h): scores S = Q K^T and the update
// O += P V for a few query rows against a block of keys, read in place.
//
// Why not SGEMM: with 1-8 query rows OpenBLAS spends most of its time
// packing K and V into its panel layout (a copy of every key and value row,
// for a product that uses each element once or a few times). These kernels
// read the rows where they are:
// * Scores: tiles of 4 rows x 2 keys, 8 vector accumulators over D (FMA), then
//   one horizontal sum each; a key is loaded once per tile of rows.
// * P V: key sub-blocks of kValueKeys rows (which stay in L1 while every row
//   tile and column strip passes over them); tiles of 4 rows x 2 vectors of
//   columns, accumulated in registers from O, keys in order, stored back.
// The order of every sum is fixed by the shapes (not the data or threads);
// D and Dv tails use zero-padded loads.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention_decode.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cstring>

#include "kernels/attention.h"
#include "kernels/row-inl.h"

HWY_BEFORE_NAMESPACE();
namespace smax::kernels::HWY_NAMESPACE {

constexpr size_t kValueKeys = 32;
// Key rows ahead of the scores loop that are prefetched.
constexpr size_t kPrefetchKeys = 16;

// Every 64-byte line of a row of n floats.
HWY_INLINE void PrefetchRow(const float* p, size_t n) {
  for (size_t c = 0; c < n; c += 16) hwy::Prefetch(p + c);
}

HWY_INLINE VF LoadPart(DF d, const float* p, size_t c, size_t count) {
  return count >= hn::Lanes(d) ? hn::LoadU(d, p + c) : LoadTailZero(d, p + c, count);
}

HWY_INLINE float Sum(DF d, VF v) { return hn::GetLane(hn::SumOfLanes(d, v)); }

// Prefetches the rows of `pf` that correspond to keys [j0, j1) of n, in
// proportion (pf.rows rows spread over the n keys).
HWY_INLINE void PrefetchShare(const PrefetchRows& pf, size_t j0, size_t j1, size_t n) {
  if (pf.rows == nullptr) return;
  const size_t rows = static_cast<size_t>(pf.n), cols = static_cast<size_t>(pf.cols);
  const size_t a = j0 * rows / n, b = j1 >= n ? rows : j1 * rows / n;
  for (size_t r = a; r < b; ++r) PrefetchRow(pf.rows[r], cols);
}

// out[r * ldo + k] = sum_c q_r[c] k_k[c], for kR rows and kK keys: full
// vectors first, then one zero-padded tail vector (D % N columns).
template <size_t kR, size_t kK>
HWY_INLINE void DotTile(DF d, const float* const* q, const float* const* k, size_t D,
                        float* out, size_t ldo) {
  const size_t N = hn::Lanes(d);
  VF acc[kR][kK];
  for (size_t r = 0; r < kR; ++r) {
    for (size_t j = 0; j < kK; ++j) acc[r][j] = hn::Zero(d);
  }
  size_t c = 0;
  for (; c + N <= D; c += N) {
    VF kv[kK];
    for (size_t j = 0; j < kK; ++j) kv[j] = hn::LoadU(d, k[j] + c);
    for (size_t r = 0; r < kR; ++r) {
      const VF qv = hn::LoadU(d, q[r] + c);
      for (size_t j = 0; j < kK; ++j) acc[r][j] = hn::MulAdd(qv, kv[j], acc[r][j]);
    }
  }
  if (c < D) {
    VF kv[kK];
    for (size_t j = 0; j < kK; ++j) kv[j] = LoadTailZero(d, k[j] + c, D - c);
    for (size_t r = 0; r < kR; ++r) {
      const VF qv = LoadTailZero(d, q[r] + c, D - c);
      for (size_t j = 0; j < kK; ++j) acc[r][j] = hn::MulAdd(qv, kv[j], acc[r][j]);
    }
  }
  for (size_t r = 0; r < kR; ++r) {
    for (size_t j = 0; j < kK; ++j) out[r * ldo + j] = Sum(d, acc[r][j]);
  }
}

// All rows of the scores of keys kp[0 .. kK): tiles of 4, 2 and 1 rows
// (each key vector is loaded once per tile).
template <size_t kK>
HWY_INLINE void DotKeys(DF d, const float* q, size_t rows, size_t ldq, const float* const* kp,
                        size_t D, float* s, size_t lds) {
  size_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const float* qp[4] = {q + r * ldq, q + (r + 1) * ldq, q + (r + 2) * ldq, q + (r + 3) * ldq};
    DotTile<4, kK>(d, qp, kp, D, s + r * lds, lds);
  }
  for (; r + 2 <= rows; r += 2) {
    const float* qp[2] = {q + r * ldq, q + (r + 1) * ldq};
    DotTile<2, kK>(d, qp, kp, D, s + r * lds, lds);
  }
  if (r < rows) {
    const float* qp[1] = {q + r * ldq};
    DotTile<1, kK>(d, qp, kp, D, s + r * lds, lds);
  }
}

void AttentionDecodeScoresImpl(const float* q, int64_t rows_, int64_t ldq,
                               const float* const* k, int64_t n_, int64_t D_, float* s,
                               int64_t lds_, const PrefetchRows& pf) {
  const DF d;
  const size_t rows = static_cast<size_t>(rows_), n = static_cast<size_t>(n_);
  const size_t D = static_cast<size_t>(D_), lds = static_cast<size_t>(lds_);
  const size_t lq = static_cast<size_t>(ldq);
  size_t j = 0;
  for (; j + 2 <= n; j += 2) {
    if (j % 4 == 0) {
      PrefetchShare(pf, j, std::min(n, j + 4), n);
      if (j + kPrefetchKeys + 4 <= n) {
        for (size_t x = 0; x < 4; ++x) PrefetchRow(k[j + kPrefetchKeys + x], D);
      }
    }
    const float* kp[2] = {k[j], k[j + 1]};
    DotKeys<2>(d, q, rows, lq, kp, D, s + j, lds);
  }
  PrefetchShare(pf, j, n, n);
  if (j < n) {
    const float* kp[1] = {k[j]};
    DotKeys<1>(d, q, rows, lq, kp, D, s + j, lds);
  }
}

// o_r[c .. c + kV N) += sum_{j in [j0, j1)} p_r[j] v_j[...], for kR rows.
template <size_t kR, size_t kV>
HWY_INLINE void AxpyTile(DF d, const float* p, size_t ldp, const float* const* v,
                         size_t j0, size_t j1, float* o, size_t ldo, size_t c, size_t cnt) {
  const size_t N = hn::Lanes(d);
  VF acc[kR][kV];
  for (size_t r = 0; r < kR; ++r) {
    for (size_t x = 0; x < kV; ++x) {
      const size_t cc = c + x * N;
      acc[r][x] = LoadPart(d, o + r * ldo, cc, std::min(N, cnt - x * N));
    }
  }
  for (size_t j = j0; j < j1; ++j) {
    VF vv[kV];
    for (size_t x = 0; x < kV; ++x) vv[x] = LoadPart(d, v[j], c + x * N, std::min(N, cnt - x * N));
    for (size_t r = 0; r < kR; ++r) {
      const VF pr = hn::Set(d, p[r * ldp + j]);
      for (size_t x = 0; x < kV; ++x) acc[r][x] = hn::MulAdd(pr, vv[x], acc[r][x]);
    }
  }
  for (size_t r = 0; r < kR; ++r) {
    for (size_t x = 0; x < kV; ++x) {
      const size_t cc = c + x * N, m = std::min(N, cnt - x * N);
      if (m >= N) {
        hn::StoreU(acc[r][x], d, o + r * ldo + cc);
      } else {
        StoreTail(d, acc[r][x], o + r * ldo + cc, m);
      }
    }
  }
}

template <size_t kR>
HWY_INLINE void AxpyRows(DF d, const float* p, size_t ldp, const float* const* v, size_t j0,
                         size_t j1, float* o, size_t ldo, size_t Dv) {
  const size_t N = hn::Lanes(d);
  size_t c = 0;
  for (; c + 2 * N <= Dv; c += 2 * N) AxpyTile<kR, 2>(d, p, ldp, v, j0, j1, o, ldo, c, 2 * N);
  for (; c < Dv; c += N) AxpyTile<kR, 1>(d, p, ldp, v, j0, j1, o, ldo, c, std::min(N, Dv - c));
}

void AttentionDecodeAccumulateImpl(const float* p, int64_t rows_, int64_t ldp,
                                   const float* const* v, int64_t n_, int64_t Dv_, float* o,
                                   int64_t ldo, const PrefetchRows& pf) {
  const DF d;
  const size_t rows = static_cast<size_t>(rows_), n = static_cast<size_t>(n_);
  const size_t Dv = static_cast<size_t>(Dv_);
  const size_t lp = static_cast<size_t>(ldp);
  const size_t lo = static_cast<size_t>(ldo);
  for (size_t j0 = 0; j0 < n; j0 += kValueKeys) {
    const size_t j1 = std::min(n, j0 + kValueKeys);
    // The next sub-block's rows, while this one is summed: its column strips
    // read the rows 64 bytes at a time, which the hardware prefetchers do
    // not follow.
    for (size_t j = j1; j < std::min(n, j1 + kValueKeys); ++j) PrefetchRow(v[j], Dv);
    PrefetchShare(pf, j0, j1, n);
    size_t r = 0;
    for (; r + 4 <= rows; r += 4) AxpyRows<4>(d, p + r * lp, lp, v, j0, j1, o + r * lo, lo, Dv);
    for (; r + 2 <= rows; r += 2) AxpyRows<2>(d, p + r * lp, lp, v, j0, j1, o + r * lo, lo, Dv);
    if (r < rows) AxpyRows<1>(d, p + r * lp, lp, v, j0, j1, o + r * lo, lo, Dv);
  }
}

}  // namespace smax::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace smax::kernels {

HWY_EXPORT(AttentionDecodeScoresImpl);
HWY_EXPORT(AttentionDecodeAccumulateImpl);

void attention_decode_scores(const float* q, int64_t rows, int64_t ldq, const float* const* k,
                             int64_t n, int64_t D, float* s, int64_t lds,
                             const PrefetchRows& prefetch) noexcept {
  if (rows <= 0 || n <= 0) return;
  if (D <= 0) {
    for (int64_t r = 0; r < rows; ++r) std::fill(s + r * lds, s + r * lds + n, 0.0f);
    return;
  }
  HWY_DYNAMIC_DISPATCH(AttentionDecodeScoresImpl)(q, rows, ldq, k, n, D, s, lds, prefetch);
}
void attention_decode_accumulate(const float* p, int64_t rows, int64_t ldp, const float* const* v,
                                 int64_t n, int64_t Dv, float* o, int64_t ldo,
                                 const PrefetchRows& prefetch) noexcept {
  if (rows <= 0 || n <= 0 || Dv <= 0) return;
  HWY_DYNAMIC_DISPATCH(AttentionDecodeAccumulateImpl)(p, rows, ldp, v, n, Dv, o, ldo, prefetch);
}

}  // namespace smax::kernels
#endif  // HWY_ONCE
