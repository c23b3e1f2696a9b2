// src/kernels/attention_decode.cc: the two small products of decoding
// attention (kernels/attention.h): scores S = Q K^T and the update
// O += P V for a few query rows against a block of keys, read in place.
//
// Why not SGEMM: with 1-8 query rows OpenBLAS spends most of its time
// packing K and V into its panel layout (a copy of every key and value row,
// for a product that uses each element once or a few times). These kernels
// read the rows where they are:
// * Scores: tiles of 4 rows x 4 keys on targets with 32 vector registers
//   (kWideRegisterFile), else 4 x 2 (2 x 4 for a row pair, 1 x 8 for a
//   single row): 8 or 16 vector accumulators over D (FMA), then a transposed
//   reduction that sums four accumulators at once (vectors of 4+ lanes; the
//   key tail and the scalar target: one horizontal sum each); a key is
//   loaded once per tile of rows.
// * P V: key sub-blocks of kValueKeys rows (which stay in L1 while every row
//   tile and column strip passes over them); tiles of 4 rows x 4 vectors of
//   columns (kWideRegisterFile) or x 2, accumulated in registers from O,
//   keys in order, stored back.
// * Prefetches into L2 (PrefetchRow) keep the memory stream going.
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

// Targets with 32 vector registers (AVX-512, AArch64) hold tiles of 16
// accumulators plus their operands; the others (AVX2, SSE4: 16) take tiles
// of 8. The tile shape changes no sum's order (every accumulator is one
// chain over D or over the keys), so the bits do not depend on it.
#if (HWY_ARCH_X86_64 && HWY_TARGET <= HWY_AVX3) || HWY_ARCH_ARM_A64
constexpr bool kWideRegisterFile = true;
#else
constexpr bool kWideRegisterFile = false;
#endif

// Every 64-byte line of a row of n floats, into L2 (locality 2: x86's
// prefetcht1). Streams from DRAM: a prefetch into L1 holds one of its few
// miss buffers until the line arrives, and with the products' compute
// between the loads, too few lines stay in flight to keep the memory busy
// (measured on a Zen 4 core: 8 heads x 8192 keys x D 128, 127 ns per key
// with prefetches into L1, 77 ns into L2, 50 ns for a plain read; the L2 to
// L1 refill is the hardware's).
HWY_INLINE void PrefetchRow(const float* p, size_t n) {
#if defined(__GNUC__) || defined(__clang__)
  for (size_t c = 0; c < n; c += 16) __builtin_prefetch(p + c, 0, 2);
#else
  for (size_t c = 0; c < n; c += 16) hwy::Prefetch(p + c);  // (into L1: no hint)
#endif
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

// acc[r][k] = the lane partial sums of q_r[c] k_k[c] over c < D, for kR
// rows and kK keys: full vectors first, then one zero-padded tail vector
// (D % N columns).
template <size_t kR, size_t kK>
HWY_INLINE void DotAccumulate(DF d, const float* const* q, const float* const* k, size_t D,
                              VF (&acc)[kR][kK]) {
  const size_t N = hn::Lanes(d);
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
}

// out[r * ldo + k] = sum_c q_r[c] k_k[c], for kR rows and kK keys, one
// horizontal sum each.
template <size_t kR, size_t kK>
HWY_INLINE void DotTile(DF d, const float* const* q, const float* const* k, size_t D,
                        float* out, size_t ldo) {
  VF acc[kR][kK];
  DotAccumulate(d, q, k, D, acc);
  for (size_t r = 0; r < kR; ++r) {
    for (size_t j = 0; j < kK; ++j) out[r * ldo + j] = Sum(d, acc[r][j]);
  }
}

// Fixed-width vectors of 4+ lanes only (the halving below stops on the
// compile-time lane count; scalable vectors take the per-sum path).
#if HWY_TARGET != HWY_SCALAR && !HWY_HAVE_SCALABLE
// out[0 .. 4) = the lane sums of a, b, c, e (at least 4 lanes). A transposed
// reduction: within each 128-bit block, interleaves and adds give lane k =
// the block's sum of vector k ((x0 + x2) + (x1 + x3)); then the blocks are
// added by halving the vector. ~9 vector operations for four sums, where
// four SumOfLanes take ~6 each.
template <class D>
HWY_INLINE void StoreBlockSums(D d, hn::VFromD<D> v, float* out) {
  if constexpr (hn::MaxLanes(D()) <= 4) {
    hn::StoreU(v, d, out);
  } else {
    const hn::Half<D> dh;
    StoreBlockSums(dh, hn::Add(hn::LowerHalf(dh, v), hn::UpperHalf(dh, v)), out);
  }
}

HWY_INLINE void Sum4(DF d, VF a, VF b, VF c, VF e, float* out) {
  const VF ab = hn::Add(hn::InterleaveLower(d, a, b), hn::InterleaveUpper(d, a, b));
  const VF ce = hn::Add(hn::InterleaveLower(d, c, e), hn::InterleaveUpper(d, c, e));
  const hn::Repartition<uint64_t, DF> d64;
  const auto ab64 = hn::BitCast(d64, ab), ce64 = hn::BitCast(d64, ce);
  const VF lo = hn::BitCast(d, hn::InterleaveLower(d64, ab64, ce64));
  const VF hi = hn::BitCast(d, hn::InterleaveUpper(d64, ab64, ce64));
  StoreBlockSums(d, hn::Add(lo, hi), out);
}

// out[r * ldo + j] = <q_r, k_j> for kR rows and kK keys (vectors of at least
// 4 lanes): kR x kK accumulators over D, then the transposed reduction, four
// accumulators at a time: a row's four keys (kK = 4 or 8), or two keys of a
// pair of rows (kK = 2).
template <size_t kR, size_t kK>
HWY_INLINE void DotTileT(DF d, const float* const* q, const float* const* k, size_t D,
                         float* out, size_t ldo) {
  static_assert(kK % 4 == 0 || (kK == 2 && kR % 2 == 0), "sums in groups of four");
  VF acc[kR][kK];
  DotAccumulate(d, q, k, D, acc);
  if constexpr (kK % 4 == 0) {
    for (size_t r = 0; r < kR; ++r) {
      for (size_t j = 0; j < kK; j += 4) {
        Sum4(d, acc[r][j], acc[r][j + 1], acc[r][j + 2], acc[r][j + 3], out + r * ldo + j);
      }
    }
  } else {  // kK = 2: rows in pairs
    for (size_t r = 0; r < kR; r += 2) {
      float t[4];
      Sum4(d, acc[r][0], acc[r][1], acc[r + 1][0], acc[r + 1][1], t);
      out[r * ldo] = t[0];
      out[r * ldo + 1] = t[1];
      out[(r + 1) * ldo] = t[2];
      out[(r + 1) * ldo + 1] = t[3];
    }
  }
}
#endif  // HWY_TARGET != HWY_SCALAR && !HWY_HAVE_SCALABLE

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
#if HWY_TARGET != HWY_SCALAR && !HWY_HAVE_SCALABLE
  {
    // Groups of 4 keys with the transposed reduction: tiles of 4 rows x 4
    // keys (wide register files) or two of 4 x 2, 2 rows x 4 keys (8+
    // accumulators: enough independent FMA chains to cover their latency);
    // a single row takes 8 keys at a time for the same reason.
    const size_t step = rows == 1 ? 8 : 4;
    for (; j + step <= n; j += step) {
      PrefetchShare(pf, j, std::min(n, j + step), n);
      if (j + kPrefetchKeys + step <= n) {
        for (size_t x = 0; x < step; ++x) PrefetchRow(k[j + kPrefetchKeys + x], D);
      }
      if (rows == 1) {
        const float* qp[1] = {q};
        DotTileT<1, 8>(d, qp, k + j, D, s + j, lds);
        continue;
      }
      size_t r = 0;
      for (; r + 4 <= rows; r += 4) {
        const float* qp[4] = {q + r * lq, q + (r + 1) * lq, q + (r + 2) * lq, q + (r + 3) * lq};
        if constexpr (kWideRegisterFile) {
          DotTileT<4, 4>(d, qp, k + j, D, s + r * lds + j, lds);
        } else {
          DotTileT<4, 2>(d, qp, k + j, D, s + r * lds + j, lds);
          DotTileT<4, 2>(d, qp, k + j + 2, D, s + r * lds + j + 2, lds);
        }
      }
      for (; r + 2 <= rows; r += 2) {
        const float* qp[2] = {q + r * lq, q + (r + 1) * lq};
        DotTileT<2, 4>(d, qp, k + j, D, s + r * lds + j, lds);
      }
      if (r < rows) {
        const float* qp[1] = {q + r * lq};
        DotTileT<1, 4>(d, qp, k + j, D, s + r * lds + j, lds);
      }
    }
  }
#endif
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
  if constexpr (kWideRegisterFile && kR >= 2) {
    for (; c + 4 * N <= Dv; c += 4 * N) AxpyTile<kR, 4>(d, p, ldp, v, j0, j1, o, ldo, c, 4 * N);
  }
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
