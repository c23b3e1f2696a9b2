// src/kernels/softmax_f64.cc: see softmax_f64.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/softmax_f64.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/cache_control.h>
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/softmax_f64.h"

HWY_BEFORE_NAMESPACE();
namespace smax::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
#include "kernels/exp_f64-inl.h"

using DD = hn::ScalableTag<double>;
using VD = hn::Vec<DD>;
constexpr size_t kMaxLanesD = HWY_MAX_BYTES / sizeof(double);
constexpr double kInfD = std::numeric_limits<double>::infinity();
constexpr double kNanD = std::numeric_limits<double>::quiet_NaN();
// e^x underflows to 0 in float64 below about -745.13.
constexpr double kUnderflow = -745.2;

// The vector at element i of a row of n, lanes past the row = `pad`.
HWY_INLINE VD LoadPad(DD d, const double* HWY_RESTRICT p, size_t i, size_t n, double pad) {
  const size_t N = hn::Lanes(d);
  if (i + N <= n) return hn::LoadU(d, p + i);
  HWY_ALIGN double b[kMaxLanesD];
  for (size_t k = 0; k < N; ++k) b[k] = i + k < n ? p[i + k] : pad;
  return hn::Load(d, b);
}

// Writes the first min(N, n - i) lanes of v at p + i.
HWY_INLINE void StoreClip(DD d, VD v, double* HWY_RESTRICT p, size_t i, size_t n) {
  const size_t N = hn::Lanes(d);
  if (i + N <= n) return hn::StoreU(v, d, p + i);
  HWY_ALIGN double b[kMaxLanesD];
  hn::Store(v, d, b);
  std::memcpy(p + i, b, (n - i) * sizeof(double));
}

// Lane values in lane order, summed with Neumaier's compensation. A sum
// that is not finite (an inf or NaN input, or overflow) is the plain sum of
// the s lanes: a Kahan c is NaN after an inf ((inf - s) - inf), and the sum
// of [1, inf] must be inf (fuzz/regressions/log_softmax_backward).
HWY_INLINE double SumLanes(DD d, VD s, VD c) {
  HWY_ALIGN double a[kMaxLanesD], b[kMaxLanesD];
  hn::Store(s, d, a);
  hn::Store(c, d, b);
  double plain = 0.0;
  for (size_t k = 0; k < hn::Lanes(d); ++k) plain += a[k];
  if (!std::isfinite(plain)) return plain;
  double sum = 0.0, comp = 0.0;
  for (size_t k = 0; k < hn::Lanes(d); ++k) {
    for (double x : {a[k], -b[k]}) {  // Kahan's c holds the negated error
      const double t = sum + x;
      comp += std::fabs(sum) >= std::fabs(x) ? (sum - t) + x : (x - t) + sum;
      sum = t;
    }
  }
  return sum + comp;
}

// Per-lane Kahan step: s += x with the lost low part kept (negated) in c.
HWY_INLINE void KahanAdd(VD x, VD& s, VD& c) {
  const VD y = hn::Sub(x, c);
  const VD t = hn::Add(s, y);
  c = hn::Sub(hn::Sub(t, s), y);
  s = t;
}

// KahanAdd for inputs that may be +-inf (the backward's dy): once a lane's
// sum is not finite its compensation is 0, so the lane keeps inf (or NaN
// for inf - inf) instead of the NaN of (inf - s) - inf.
HWY_INLINE void KahanAddInf(VD x, VD& s, VD& c) {
  KahanAdd(x, s, c);
  c = hn::IfThenElseZero(hn::IsFinite(s), c);
}

// t - m as d + e exactly (TwoSum of t and -m; m finite). Where t = -inf
// (or the difference overflows) e is NaN: every use ignores it there (the
// exp drops lo beyond its clamp or masks the lane; log_softmax selects
// -inf for t = -inf and guards an overflowed d).
struct Diff {
  VD d, e;
};
HWY_INLINE Diff TwoDiff(VD t, VD m) {
  const VD s = hn::Sub(t, m);
  const VD bb = hn::Sub(s, t);
  const VD e = hn::Add(hn::Sub(t, hn::Sub(s, bb)), hn::Sub(hn::Neg(m), bb));
  return {s, e};
}

// How a row's terms e^(t_i - m) are formed (RowImpl picks one from the
// scan's max and min over the entries above -inf):
//  kFast: max - min < kFastRange (so every finite t_i - m is in
//    (-kFastRange, 0]): d = fl(t_i - m) without its error term, e^d by
//    ExpFast. The dropped error is at most half an ulp of |d| < 32:
//    |delta| <= 2^-49 (and <= 2^-53 |d|), a relative error of e^delta - 1
//    <= 2^-49 in the term (see softmax_f64.h for the bound it leaves).
//  kNormal: max - min in [kFastRange, -kExpNormalMin]: the exact two-term
//    difference, ExpNormal (the same bits as ExpSplit there).
//  kSplit: any other row: the exact difference, ExpSplit (subnormal terms,
//    0 below about -745.13 by the rounding of the scaled result).
// -inf entries give exactly 0 (masked lanes).
enum class Mode { kFast, kNormal, kSplit };
constexpr double kFastRange = 32.0;

// kMasked: the vector may hold -inf lanes (a row with -inf entries, or the
// padded tail); else the range alone keeps every lane in the exp's domain
// (kFast, kNormal) and the lanes are not masked.
template <Mode M, bool kMasked = true>
HWY_INLINE VD Term(DD dd, VD t, VD m) {
  if (M == Mode::kSplit) {
    const Diff x = TwoDiff(t, m);
    return exp_f64::ExpSplit(dd, x.d, x.e);  // -inf: clamped, lo dropped: 0
  }
  if (M == Mode::kFast) {
    const VD x = hn::Sub(t, m);
    if (!kMasked) return exp_f64::ExpFast(dd, x);
    // the row's finite t - m are > -32: only -inf lanes fail this
    const auto live = hn::Ge(x, hn::Set(dd, exp_f64::kExpNormalMin));
    return hn::IfThenElseZero(live, exp_f64::ExpFast(dd, x));
  }
  const Diff x = TwoDiff(t, m);
  if (!kMasked) return exp_f64::ExpNormal(dd, x.d, x.e);
  const auto live = hn::Ge(x.d, hn::Set(dd, exp_f64::kExpNormalMin));
  return hn::IfThenElseZero(live, exp_f64::ExpNormal(dd, x.d, x.e));
}

struct Scan {
  double max;
  double min;  // of the entries above -inf (+inf when there is none)
  bool nan;
  bool neg_inf;  // some entry of the whole vectors from the row start is -inf
};
// Four max / min accumulators (the max and min chains at their latency
// would bound a single pair); max and min are exact, so the order of the
// merge does not matter.
HWY_INLINE Scan MaxScan(DD d, const double* HWY_RESTRICT t, size_t n) {
  const size_t N = hn::Lanes(d);
  const VD ninf = hn::Set(d, -kInfD);
  const VD pinf = hn::Set(d, kInfD);
  VD m0 = ninf, m1 = ninf, m2 = ninf, m3 = ninf;
  VD lo0 = pinf, lo1 = pinf, lo2 = pinf, lo3 = pinf;
  auto nan = hn::Lt(m0, m0);  // all false
  auto neg_inf = nan;
  // lo = min(lo, v) over the lanes above -inf
  auto step = [&](VD v, VD& m, VD& lo) {
    m = hn::Max(m, v);
    const auto is_ninf = hn::Eq(v, ninf);
    neg_inf = hn::Or(neg_inf, is_ninf);
    lo = hn::IfThenElse(is_ninf, lo, hn::Min(lo, v));
    return hn::IsNaN(v);
  };
  size_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    const auto n0 = step(hn::LoadU(d, t + i), m0, lo0);
    const auto n1 = step(hn::LoadU(d, t + i + N), m1, lo1);
    const auto n2 = step(hn::LoadU(d, t + i + 2 * N), m2, lo2);
    const auto n3 = step(hn::LoadU(d, t + i + 3 * N), m3, lo3);
    nan = hn::Or(nan, hn::Or(hn::Or(n0, n1), hn::Or(n2, n3)));
  }
  for (; i + N <= n; i += N) nan = hn::Or(nan, step(hn::LoadU(d, t + i), m0, lo0));
  // (the padded last vector's -inf lanes are not the row's; TermSum masks
  // every vector after its whole blocks anyway)
  const bool ninf_in_row = !hn::AllFalse(d, neg_inf);
  if (i < n) nan = hn::Or(nan, step(LoadPad(d, t, i, n, -kInfD), m0, lo0));
  const VD m = hn::Max(hn::Max(m0, m1), hn::Max(m2, m3));
  const VD lo = hn::Min(hn::Min(lo0, lo1), hn::Min(lo2, lo3));
  HWY_ALIGN double lanes[kMaxLanesD], lanes_lo[kMaxLanesD];
  hn::Store(m, d, lanes);
  hn::Store(lo, d, lanes_lo);
  double mx = lanes[0], mn = lanes_lo[0];
  for (size_t k = 1; k < N; ++k) {
    mx = lanes[k] > mx ? lanes[k] : mx;
    mn = lanes_lo[k] < mn ? lanes_lo[k] : mn;
  }
  return {mx, mn, !hn::AllFalse(d, nan), ninf_in_row};
}

// What the sum pass stores to out: nothing, the terms (softmax), or
// fl(t_i - m) (log_softmax of a kFast row: its last pass subtracts log S
// from them in cache, and the output's stores overlap the exps).
enum class Keep { kNothing, kTerms, kDiffs };

// S = sum of the row's terms; out receives what `keep` says.
// Blocks of kBlock vectors are summed plainly as a balanced tree (depth 3:
// each block sum within (1 + u)^3 - 1 < 3.01 u relative, the terms are >= 0)
// and the block sums, then the vectors after the last whole block, are
// added to one per-lane Kahan accumulator (error <= 2u of the sum plus
// O(n u^2)), whose lanes SumLanes adds with Neumaier's compensation
// (<= 2u): S within 7.1 u of the exact sum of the computed terms for any n.
// The grid is fixed by n: the bits do not depend on the alignment.
constexpr size_t kBlock = 8;
template <Mode M, bool kMasked>
HWY_INLINE double TermSum(DD d, const double* t, size_t n, VD m, Keep keep,
                          double* out,  // out may be t (no restrict)
                          const double* next) {
  const size_t N = hn::Lanes(d);
  VD s = hn::Zero(d), c = s;
  size_t i = 0;
  for (; i + kBlock * N <= n; i += kBlock * N) {
    if (next != nullptr) {  // the next row's same block (a hint: into cache)
      for (size_t k = 0; k < kBlock * N; k += 64 / sizeof(double)) {
        hwy::Prefetch(next + i + k);
      }
    }
    VD e[kBlock];
    for (size_t k = 0; k < kBlock; ++k) {
      e[k] = Term<M, kMasked>(d, hn::LoadU(d, t + i + k * N), m);
    }
    // out may be t: these elements were read above
    if (keep == Keep::kTerms) {
      for (size_t k = 0; k < kBlock; ++k) hn::StoreU(e[k], d, out + i + k * N);
    } else if (keep == Keep::kDiffs) {
      for (size_t k = 0; k < kBlock; ++k) {
        hn::StoreU(hn::Sub(hn::LoadU(d, t + i + k * N), m), d, out + i + k * N);
      }
    }
    const VD b = hn::Add(hn::Add(hn::Add(e[0], e[1]), hn::Add(e[2], e[3])),
                         hn::Add(hn::Add(e[4], e[5]), hn::Add(e[6], e[7])));
    KahanAdd(b, s, c);
  }
  for (; i < n; i += N) {
    const VD v = LoadPad(d, t, i, n, -kInfD);
    const VD term = Term<M>(d, v, m);
    KahanAdd(term, s, c);
    if (keep == Keep::kTerms) StoreClip(d, term, out, i, n);
    if (keep == Keep::kDiffs) StoreClip(d, hn::Sub(v, m), out, i, n);
  }
  return SumLanes(d, s, c);
}

// The mode of a row with max mx and min mn (over the entries above -inf).
HWY_INLINE Mode RowMode(double mx, double mn) {
  // fl(mx - mn) < 32 implies mx - mn < 32 (rounding is monotonic).
  const double range = mx - mn;
  if (range < kFastRange) return Mode::kFast;
  return range <= -exp_f64::kExpNormalMin ? Mode::kNormal : Mode::kSplit;
}

// S for the row's mode (out receives what `keep` says; kDiffs: kFast only).
// Rows without -inf entries skip the lane masks in their whole blocks (the
// same bits: the masks select every lane there).
HWY_INLINE double RowSum(DD d, Mode mode, const Scan& sc, const double* t, size_t n, Keep keep,
                         double* out, const double* next = nullptr) {
  const VD m = hn::Set(d, sc.max);
  switch (mode) {
    case Mode::kFast:
      return sc.neg_inf ? TermSum<Mode::kFast, true>(d, t, n, m, keep, out, next)
                        : TermSum<Mode::kFast, false>(d, t, n, m, keep, out, next);
    case Mode::kNormal:
      return sc.neg_inf ? TermSum<Mode::kNormal, true>(d, t, n, m, keep, out, next)
                        : TermSum<Mode::kNormal, false>(d, t, n, m, keep, out, next);
    default:
      return TermSum<Mode::kSplit, true>(d, t, n, m, keep, out, next);
  }
}

constexpr size_t kPrefetchMaxN = size_t{1} << 15;
void RowImpl(F64Op op, const double* t, int64_t n_in, EmptyRow policy, double* out,
             const double* next) {
  const DD d;
  const size_t n = static_cast<size_t>(n_in);
  const size_t N = hn::Lanes(d);
  const size_t count = op == F64Op::kLogSumExp ? 1 : n;
  auto fill = [&](double v) {
    for (size_t i = 0; i < count; ++i) out[i] = v;
  };
  const Scan sc = MaxScan(d, t, n);
  if (sc.nan || sc.max == kInfD) return fill(kNanD);
  if (sc.max == -kInfD) {
    if (policy == EmptyRow::kNan) return fill(kNanD);
    return fill(op == F64Op::kSoftmax ? 0.0 : -kInfD);
  }
  const VD m = hn::Set(d, sc.max);
  // softmax keeps the terms in out (one exp per element); the last pass
  // scales them. out may be t: each element is read before it is written.
  const Mode mode = RowMode(sc.max, sc.min);
  const Keep keep = op == F64Op::kSoftmax                                ? Keep::kTerms
                    : op == F64Op::kLogSoftmax && mode == Mode::kFast ? Keep::kDiffs
                                                                        : Keep::kNothing;
  // logsumexp (no stores, so DRAM has bandwidth to spare during the exp
  // pass) prefetches the next row when the rows in play fit a 1 MiB L2;
  // softmax and log_softmax measured slower with it (their stores' traffic).
  const double* pf = op == F64Op::kLogSumExp && n <= kPrefetchMaxN ? next : nullptr;
  const double S = RowSum(d, mode, sc, t, n, keep, out, pf);  // >= 1
  const double log_s = std::log(S);
  switch (op) {
    case F64Op::kLogSumExp:
      out[0] = sc.max + log_s;
      return;
    case F64Op::kSoftmax: {
      const VD inv = hn::Set(d, 1.0 / S);
      size_t i = 0;
      for (; i + 4 * N <= n; i += 4 * N) {
        for (size_t k = 0; k < 4 * N; k += N) {
          hn::StoreU(hn::Mul(hn::LoadU(d, out + i + k), inv), d, out + i + k);
        }
      }
      for (; i < n; i += N) StoreClip(d, hn::Mul(LoadPad(d, out, i, n, 0.0), inv), out, i, n);
      return;
    }
    case F64Op::kLogSoftmax: {
      const VD ls = hn::Set(d, log_s);
      const VD neg_inf = hn::Set(d, -kInfD);
      if (mode == Mode::kFast) {
        // out holds fl(t - m) (Keep::kDiffs): fl(fl(t - m) - log S). The
        // dropped error of t - m is <= 2^-49 (|t - m| < 32), far inside
        // 1e-14 (1 + |value|); -inf stays -inf (m finite).
        size_t i = 0;
        for (; i + 4 * N <= n; i += 4 * N) {
          for (size_t k = 0; k < 4 * N; k += N) {
            hn::StoreU(hn::Sub(hn::LoadU(d, out + i + k), ls), d, out + i + k);
          }
        }
        for (; i < n; i += N) StoreClip(d, hn::Sub(LoadPad(d, out, i, n, 0.0), ls), out, i, n);
        return;
      }
      for (size_t i = 0; i < n; i += N) {
        const VD v = LoadPad(d, t, i, n, -kInfD);
        const Diff x = TwoDiff(v, m);
        // e is NaN where d is -inf (t = -inf, or t - m overflows): d - log S
        // alone there (-inf)
        const VD y = hn::Add(hn::Sub(x.d, ls), hn::IfThenZeroElse(hn::Eq(x.d, neg_inf), x.e));
        StoreClip(d, hn::IfThenElse(hn::Eq(v, neg_inf), neg_inf, y), out, i, n);
      }
      return;
    }
  }
}

F64Terms TermsImpl(const double* t, int64_t n_in, double* terms) {
  const DD d;
  const size_t n = static_cast<size_t>(n_in);
  const Scan sc = MaxScan(d, t, n);
  if (sc.nan || sc.max == kInfD) return {sc.max, kNanD};
  if (sc.max == -kInfD) return {sc.max, 0.0};
  return {sc.max, RowSum(d, RowMode(sc.max, sc.min), sc, t, n, Keep::kTerms, terms)};
}

void BackwardImpl(bool log, const double* y, const double* dy, int64_t n_in, double s_in,
                  double* dx) {
  const DD d;
  const size_t n = static_cast<size_t>(n_in);
  const size_t N = hn::Lanes(d);
  VD acc = hn::Zero(d), c = hn::Zero(d);
  for (size_t i = 0; i < n; i += N) {
    const VD g = LoadPad(d, dy, i, n, 0.0);
    // log_softmax: sum dy; softmax: <dy, y> (padding y = 0 adds 0).
    KahanAddInf(log ? g : hn::Mul(g, LoadPad(d, y, i, n, 0.0)), acc, c);
  }
  const VD total = hn::Set(d, SumLanes(d, acc, c));
  const VD sv = hn::Set(d, s_in);
  const VD neg_inf = hn::Set(d, -kInfD);
  for (size_t i = 0; i < n; i += N) {
    const VD yv = LoadPad(d, y, i, n, 0.0);
    const VD g = LoadPad(d, dy, i, n, 0.0);
    VD r;
    if (log) {
      const auto masked = hn::Eq(yv, neg_inf);
      // Highway's Exp maps NaN to 0 (its range clamp); a NaN y gives NaN dx.
      const VD ey = hn::IfThenElse(hn::IsNaN(yv), yv, hn::Exp(d, hn::IfThenZeroElse(masked, yv)));
      r = hn::IfThenZeroElse(masked, hn::Mul(sv, hn::Sub(g, hn::Mul(ey, total))));
    } else {
      r = hn::Mul(hn::Mul(sv, yv), hn::Sub(g, total));
    }
    StoreClip(d, r, dx, i, n);
  }
}

const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace smax::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace smax::kernels {
HWY_EXPORT(RowImpl);
HWY_EXPORT(BackwardImpl);
HWY_EXPORT(TermsImpl);
HWY_EXPORT(TargetName);

void softmax_row_f64(F64Op op, const double* t, int64_t n, EmptyRow policy, double* out,
                     const double* next) noexcept {
  HWY_DYNAMIC_DISPATCH(RowImpl)(op, t, n, policy, out, next);
}
void softmax_backward_row_f64(bool log, const double* y, const double* dy, int64_t n, double s,
                              double* dx) noexcept {
  HWY_DYNAMIC_DISPATCH(BackwardImpl)(log, y, dy, n, s, dx);
}
F64Terms exp_terms_row_f64(const double* t, int64_t n, double* terms) noexcept {
  return HWY_DYNAMIC_DISPATCH(TermsImpl)(t, n, terms);
}
std::string kernel_name_f64(const std::string& op) {
  std::string target = HWY_DYNAMIC_DISPATCH(TargetName)();
  for (char& ch : target) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return "f64_" + op + "__" + target;
}
}  // namespace smax::kernels
#endif
