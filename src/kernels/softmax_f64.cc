// src/kernels/softmax_f64.cc: see softmax_f64.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/softmax_f64.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
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

// t - m as d + e exactly (TwoSum of t and -m; m finite). Where d is below
// -1e300 (t = -inf, or a difference that overflows) the error term is set
// to 0: every use ignores it there (the term underflows to 0, the log value
// is -inf or beyond any bound's reach), and TwoSum's e would be NaN.
struct Diff {
  VD d, e;
};
HWY_INLINE Diff TwoDiff(DD dd, VD t, VD m) {
  const VD s = hn::Sub(t, m);
  const VD bb = hn::Sub(s, t);
  const VD e = hn::Add(hn::Sub(t, hn::Sub(s, bb)), hn::Sub(hn::Neg(m), bb));
  return {s, hn::IfThenZeroElse(hn::Lt(s, hn::Set(dd, -1e300)), e)};
}

// e^(t - m) = e^(d + e) (exp_f64-inl.h), 0 below the underflow (the
// argument is replaced there, so -inf never reaches the exp). kNormal: the
// row's finite t - m are all >= kExpNormalMin (ExpNormal, the same bits as
// ExpSplit there); its lanes below that are -inf ones.
template <bool kNormal>
HWY_INLINE VD Term(DD dd, const Diff& x) {
  const auto under = hn::Lt(x.d, hn::Set(dd, kNormal ? exp_f64::kExpNormalMin : kUnderflow));
  const VD hi = hn::IfThenElse(under, hn::Set(dd, -1.0), x.d);
  const VD lo = hn::IfThenZeroElse(under, x.e);
  const VD ex = kNormal ? exp_f64::ExpNormal(dd, hi, lo) : exp_f64::ExpSplit(dd, hi, lo);
  return hn::IfThenZeroElse(under, ex);
}

struct Scan {
  double max;
  double min;  // of the entries above -inf (+inf when there is none)
  bool nan;
};
HWY_INLINE Scan MaxScan(DD d, const double* HWY_RESTRICT t, size_t n) {
  const size_t N = hn::Lanes(d);
  VD m = hn::Set(d, -kInfD);
  VD lo = hn::Set(d, kInfD);
  auto nan = hn::Lt(m, m);  // all false
  for (size_t i = 0; i < n; i += N) {
    const VD v = LoadPad(d, t, i, n, -kInfD);
    nan = hn::Or(nan, hn::Not(hn::Eq(v, v)));
    m = hn::Max(m, v);
    lo = hn::Min(lo, hn::IfThenElse(hn::Eq(v, hn::Set(d, -kInfD)), hn::Set(d, kInfD), v));
  }
  HWY_ALIGN double lanes[kMaxLanesD], lanes_lo[kMaxLanesD];
  hn::Store(m, d, lanes);
  hn::Store(lo, d, lanes_lo);
  double mx = lanes[0], mn = lanes_lo[0];
  for (size_t k = 1; k < N; ++k) {
    mx = lanes[k] > mx ? lanes[k] : mx;
    mn = lanes_lo[k] < mn ? lanes_lo[k] : mn;
  }
  return {mx, mn, !hn::AllFalse(d, nan)};
}

// S = sum of the row's terms (Kahan, four accumulators; see RowImpl); the
// terms are stored to out when keep_terms.
template <bool kNormal>
HWY_INLINE double TermSum(DD d, const double* t, size_t n, VD m, bool keep_terms,
                          double* out) {  // out may be t (no restrict)
  const size_t N = hn::Lanes(d);
  // Four Kahan accumulators (s_k, c_k), one per vector of a step of four,
  // so the compensated adds of a step are independent (a single chain runs
  // at its 4-op latency per vector); the vectors after the last whole step
  // go to (s0, c0). Merged in a fixed order: the bits depend on n only.
  VD s0 = hn::Zero(d), c0 = s0, s1 = s0, c1 = s0, s2 = s0, c2 = s0, s3 = s0, c3 = s0;
  size_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    const VD e0 = Term<kNormal>(d, TwoDiff(d, hn::LoadU(d, t + i), m));
    const VD e1 = Term<kNormal>(d, TwoDiff(d, hn::LoadU(d, t + i + N), m));
    const VD e2 = Term<kNormal>(d, TwoDiff(d, hn::LoadU(d, t + i + 2 * N), m));
    const VD e3 = Term<kNormal>(d, TwoDiff(d, hn::LoadU(d, t + i + 3 * N), m));
    KahanAdd(e0, s0, c0);
    KahanAdd(e1, s1, c1);
    KahanAdd(e2, s2, c2);
    KahanAdd(e3, s3, c3);
    if (keep_terms) {  // out may be t: these elements were read above
      hn::StoreU(e0, d, out + i);
      hn::StoreU(e1, d, out + i + N);
      hn::StoreU(e2, d, out + i + 2 * N);
      hn::StoreU(e3, d, out + i + 3 * N);
    }
  }
  for (; i < n; i += N) {
    const VD term = Term<kNormal>(d, TwoDiff(d, LoadPad(d, t, i, n, -kInfD), m));
    KahanAdd(term, s0, c0);
    if (keep_terms) StoreClip(d, term, out, i, n);
  }
  // (s_k - c_k) are the accumulators' values: the c_k (tiny) are added
  // plainly, the s_k with compensation.
  c0 = hn::Add(hn::Add(c0, c1), hn::Add(c2, c3));
  KahanAdd(s1, s0, c0);
  KahanAdd(s2, s0, c0);
  KahanAdd(s3, s0, c0);
  return SumLanes(d, s0, c0);
}

void RowImpl(F64Op op, const double* t, int64_t n_in, EmptyRow policy, double* out) {
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
  const bool keep_terms = op == F64Op::kSoftmax;
  const bool normal = sc.min - sc.max >= exp_f64::kExpNormalMin;
  const double S = normal ? TermSum<true>(d, t, n, m, keep_terms, out)
                          : TermSum<false>(d, t, n, m, keep_terms, out);  // >= 1
  const double log_s = std::log(S);
  switch (op) {
    case F64Op::kLogSumExp:
      out[0] = sc.max + log_s;
      return;
    case F64Op::kSoftmax: {
      const VD inv = hn::Set(d, 1.0 / S);
      for (size_t i = 0; i < n; i += N) {
        StoreClip(d, hn::Mul(LoadPad(d, out, i, n, 0.0), inv), out, i, n);
      }
      return;
    }
    case F64Op::kLogSoftmax: {
      const VD ls = hn::Set(d, log_s);
      const VD neg_inf = hn::Set(d, -kInfD);
      for (size_t i = 0; i < n; i += N) {
        const VD v = LoadPad(d, t, i, n, -kInfD);
        const Diff x = TwoDiff(d, v, m);
        const VD y = hn::Add(hn::Sub(x.d, ls), x.e);
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
  const VD m = hn::Set(d, sc.max);
  const bool normal = sc.min - sc.max >= exp_f64::kExpNormalMin;
  const double S = normal ? TermSum<true>(d, t, n, m, true, terms)
                          : TermSum<false>(d, t, n, m, true, terms);
  return {sc.max, S};
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

void softmax_row_f64(F64Op op, const double* t, int64_t n, EmptyRow policy, double* out) noexcept {
  HWY_DYNAMIC_DISPATCH(RowImpl)(op, t, n, policy, out);
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
