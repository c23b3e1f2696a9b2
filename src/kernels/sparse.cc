// src/kernels/sparse.cc: Highway kernels of the sparse normalisers
// (src/kernels/sparse.h): the max / special-value sweep, candidate
// compaction, the float64 power sums of the entmax bisection, the backward
// statistics and the top-k exponentials.
//
// Why float64 on the candidates: after the max shift the candidates are the
// exact differences d_i = t_i - m in (-R, 0] (R = 1, 2 or 1/(alpha-1)), and
// the threshold only moves inside that interval; in float64 the threshold and
// every y_i = [z_i - tau]_+^p are exact to ~1e-16, so the only error left is
// the final rounding to f32. Candidate sets are short for real logits (the
// tail of the distribution within R of the max), so the f32 sweeps over the
// whole row (max, compaction, zero fill, backward) dominate.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/sparse.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <cmath>
#include <cstring>
#include <limits>

#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include "kernels/row-inl.h"
#include "kernels/sparse.h"

HWY_BEFORE_NAMESPACE();
namespace smax::kernels::HWY_NAMESPACE {

using D64 = hn::ScalableTag<double>;
using V64 = hn::Vec<D64>;
using DF64 = hn::Rebind<float, D64>;  // f32 lanes, as many as D64 has
constexpr size_t kMaxLanes64 = HWY_MAX_BYTES / sizeof(double);

SparseScan SparseScanImpl(const float* t, int64_t n64) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const size_t n = static_cast<size_t>(n64);
  const Logits<false, false> src{t, nullptr, 1.0f};
  VF m0 = hn::Set(d, kNegInf), m1 = m0;
  auto nan = hn::Zero(d);  // NaN lanes accumulate as all-ones bits
  size_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    const VF a = src.Load(d, i), b = src.Load(d, i + N);
    m0 = hn::Max(m0, a);
    m1 = hn::Max(m1, b);
    nan = hn::Or(nan, hn::VecFromMask(d, hn::Or(hn::IsNaN(a), hn::IsNaN(b))));
  }
  for (; i + N <= n; i += N) {
    const VF a = src.Load(d, i);
    m0 = hn::Max(m0, a);
    nan = hn::Or(nan, hn::VecFromMask(d, hn::IsNaN(a)));
  }
  if (i < n) {
    const VF a = src.LoadTail(d, i, n - i);  // padding lanes are -inf
    m1 = hn::Max(m1, a);
    nan = hn::Or(nan, hn::VecFromMask(d, hn::IsNaN(a)));
  }
  SparseScan s;
  s.max = ReduceMax(d, hn::Max(m0, m1));
  s.has_nan = !hn::AllFalse(d, hn::MaskFromVec(nan));
  s.has_pos_inf = !s.has_nan && s.max == kInf;  // without NaN the max is exact
  return s;
}

// The float64 rows' sweep and compaction (sparse_scan_f64 /
// sparse_candidates_f64): the same structure on float64 lanes.
SparseScan64 SparseScan64Impl(const double* t, int64_t n64) {
  const D64 d;
  const size_t N = hn::Lanes(d);
  const size_t n = static_cast<size_t>(n64);
  const double ninf = -std::numeric_limits<double>::infinity();
  V64 m0 = hn::Set(d, ninf), m1 = m0;
  auto nan = hn::Zero(d);  // NaN lanes accumulate as all-ones bits
  size_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    const V64 a = hn::LoadU(d, t + i), b = hn::LoadU(d, t + i + N);
    m0 = hn::Max(m0, a);
    m1 = hn::Max(m1, b);
    nan = hn::Or(nan, hn::VecFromMask(d, hn::Or(hn::IsNaN(a), hn::IsNaN(b))));
  }
  for (; i + N <= n; i += N) {
    const V64 a = hn::LoadU(d, t + i);
    m0 = hn::Max(m0, a);
    nan = hn::Or(nan, hn::VecFromMask(d, hn::IsNaN(a)));
  }
  SparseScan64 s;
  // The lanes folded here, not by MaxOfLanes: Highway 1.0.3's EMU128 one
  // starts from the lowest finite value, so an all -inf row would reduce
  // to -DBL_MAX and look visible (load-inl.h, ReduceMax).
  HWY_ALIGN double lanes[kMaxLanes64];
  hn::Store(hn::Max(m0, m1), d, lanes);
  s.max = lanes[0];
  for (size_t l = 1; l < N; ++l) s.max = lanes[l] > s.max ? lanes[l] : s.max;
  s.has_nan = !hn::AllFalse(d, hn::MaskFromVec(nan));
  for (; i < n; ++i) {
    s.has_nan |= std::isnan(t[i]);
    s.max = t[i] > s.max ? t[i] : s.max;
  }
  s.has_pos_inf = !s.has_nan && s.max == std::numeric_limits<double>::infinity();
  return s;
}

int64_t SparseCandidates64Impl(const double* t, int64_t n64, double r, double m, int64_t* idx,
                               double* dd) {
  const D64 d;
  const size_t N = hn::Lanes(d);
  const size_t n = static_cast<size_t>(n64);
  const V64 vm = hn::Set(d, m), vlo = hn::Set(d, -r);
  int64_t count = 0;
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const V64 diff = hn::Sub(hn::LoadU(d, t + i), vm);  // -inf - m = -inf: never kept
    const auto mask = hn::Ge(diff, vlo);
    if (HWY_UNLIKELY(!hn::AllFalse(d, mask))) {
      uint8_t bytes[8] = {};
      hn::StoreMaskBits(d, mask, bytes);
      uint64_t bits;
      std::memcpy(&bits, bytes, sizeof bits);
      while (bits != 0) {  // the kept lanes, by count-trailing-zeros
        const size_t l = static_cast<size_t>(__builtin_ctzll(bits));
        bits &= bits - 1;
        idx[count] = static_cast<int64_t>(i + l);
        dd[count] = t[i + l] - m;
        ++count;
      }
    }
  }
  for (; i < n; ++i) {
    const double v = t[i] - m;
    if (v >= -r) {
      idx[count] = static_cast<int64_t>(i);
      dd[count] = v;
      ++count;
    }
  }
  return count;
}

int64_t SparseCandidatesImpl(const float* t, int64_t n64, float lo, float m, int64_t* idx,
                             double* dd) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const size_t n = static_cast<size_t>(n64);
  const Logits<false, false> src{t, nullptr, 1.0f};
  const VF vlo = hn::Set(d, lo);
  const VF vninf = hn::Set(d, kNegInf);
  const double md = static_cast<double>(m);
  int64_t count = 0;
  // Per block: the kept lanes as a bit mask, visited with count-trailing-
  // zeros, so the cost follows the kept lanes (a per-lane branch mispredicts
  // constantly, and Highway 1.0.3's AVX2 CompressStore copies its 2 KiB
  // table to the stack on every call).
  auto extract = [&](const float* block, size_t base, uint64_t bits) {
    while (bits != 0) {
      const size_t l = static_cast<size_t>(__builtin_ctzll(bits));
      bits &= bits - 1;
      idx[count] = static_cast<int64_t>(base + l);
      dd[count] = static_cast<double>(block[l]) - md;
      ++count;
    }
  };
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const VF v = src.Load(d, i);
    const auto mask = hn::And(hn::Ge(v, vlo), hn::Gt(v, vninf));
    if (HWY_UNLIKELY(!hn::AllFalse(d, mask))) {
      uint8_t bytes[8] = {};
      hn::StoreMaskBits(d, mask, bytes);
      uint64_t bits;
      std::memcpy(&bits, bytes, sizeof bits);
      extract(t + i, i, bits);
    }
  }
  for (; i < n; ++i) {
    const float x = t[i];
    if (x >= lo && x > kNegInf) {
      idx[count] = static_cast<int64_t>(i);
      dd[count] = static_cast<double>(x) - md;
      ++count;
    }
  }
  return count;
}

// max(z - tau, 0)^p for one vector; kind: 1 -> v, 2 -> v^2, 3 -> sqrt(v),
// 0 -> exp(p log v).
template <int kKind>
HWY_INLINE V64 PowPos(D64 d, V64 z, V64 tau, V64 p) {
  const V64 v = hn::Sub(z, tau);
  const auto pos = hn::Gt(v, hn::Zero(d));
  if (kKind == 1) return hn::IfThenElseZero(pos, v);
  if (kKind == 2) return hn::IfThenElseZero(pos, hn::Mul(v, v));
  if (kKind == 3) return hn::IfThenElseZero(pos, hn::Sqrt(hn::IfThenElseZero(pos, v)));
  const V64 safe = hn::IfThenElse(pos, v, hn::Set(d, 1.0));
  return hn::IfThenElseZero(pos, hn::Exp(d, hn::Mul(p, hn::Log(d, safe))));
}

template <int kKind>
HWY_INLINE double PowSumT(const double* z, size_t k, double tau, double p, double* out) {
  const D64 d;
  const size_t N = hn::Lanes(d);
  const V64 vt = hn::Set(d, tau), vp = hn::Set(d, p);
  V64 s0 = hn::Zero(d), s1 = hn::Zero(d);
  size_t i = 0;
  for (; i + 2 * N <= k; i += 2 * N) {
    const V64 a = PowPos<kKind>(d, hn::LoadU(d, z + i), vt, vp);
    const V64 b = PowPos<kKind>(d, hn::LoadU(d, z + i + N), vt, vp);
    if (out != nullptr) {
      hn::StoreU(a, d, out + i);
      hn::StoreU(b, d, out + i + N);
    }
    s0 = hn::Add(s0, a);
    s1 = hn::Add(s1, b);
  }
  for (; i < k; i += N) {
    const size_t cnt = k - i < N ? k - i : N;
    HWY_ALIGN double buf[kMaxLanes64];
    for (size_t l = 0; l < N; ++l) buf[l] = l < cnt ? z[i + l] : tau;  // padding -> 0
    const V64 a = PowPos<kKind>(d, hn::Load(d, buf), vt, vp);
    if (out != nullptr) {
      hn::Store(a, d, buf);
      for (size_t l = 0; l < cnt; ++l) out[i + l] = buf[l];
    }
    s0 = hn::Add(s0, a);
  }
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
}

double PowSumDispatch(const double* z, int64_t k64, double tau, double p, double* out) {
  const size_t k = static_cast<size_t>(k64);
  if (p == 1.0) return PowSumT<1>(z, k, tau, p, out);
  if (p == 2.0) return PowSumT<2>(z, k, tau, p, out);
  if (p == 0.5) return PowSumT<3>(z, k, tau, p, out);
  return PowSumT<0>(z, k, tau, p, out);
}

double EntmaxPowSumImpl(const double* z, int64_t k, double tau, double p) {
  return PowSumDispatch(z, k, tau, p, nullptr);
}
double EntmaxPowStoreImpl(const double* z, int64_t k, double tau, double p, double* out) {
  return PowSumDispatch(z, k, tau, p, out);
}

// ---- 1.5-entmax on a whole row -------------------------------------------------
// z_i = (t_i - m) / 2, y_i = max(z_i - tau*, 0)^2, sum y = 1. Each pass at a
// lower bound tau gathers, over S = {z_i > tau}: k = |S|, s1 = sum v,
// s2 = sum v^2, vmin = min v (v_i = z_i - tau), and from those
//  * certifies: the exact threshold of S is tau + delta, delta the smaller
//    root of k delta^2 - 2 s1 delta + s2 - 1 = 0, written
//    (s2 - 1) / (s1 + sqrt(D)) (no cancellation). When vmin >= delta >= 0,
//    no entry of S falls below tau + delta (one exactly at it gets y = 0)
//    and every other entry lies at
//    or below tau, so sum (z - tau - delta)_+^2 = 1 holds on S: the answer;
//  * or steps: Newton on f(tau) = sum (z - tau)_+^2 - 1 (convex,
//    decreasing): tau + (s2 - 1) / (2 s1) <= tau* (a convex function lies
//    above its tangent), so S only shrinks towards the support.
// Stage A runs the passes in f32 (8 lanes per AVX2 vector, half the float64
// cost) to find the support; stage B repeats them in float64 on the exact
// z from just below stage A's tau (usually one pass: the certificate), so
// the threshold is float64-exact whatever stage A's rounding did.

struct Entmax15Pass {
  double k, s1, s2, vmin;
};

// Certify (returns tau* or NaN with *next = the Newton step, NaN when the
// pass cannot step: tau at or past tau* by rounding).
HWY_INLINE double Entmax15Step(const Entmax15Pass& s, double tau, double* next) {
  *next = std::numeric_limits<double>::quiet_NaN();
  if (!(s.k >= 1.0) || !(s.s1 > 0.0)) return *next;
  const double disc = s.s1 * s.s1 - s.k * (s.s2 - 1.0);
  if (disc >= 0.0) {
    const double delta = (s.s2 - 1.0) / (s.s1 + std::sqrt(disc));
    if (delta >= 0.0 && s.vmin >= delta) return tau + delta;
  }
  if (s.s2 > 1.0) *next = tau + (s.s2 - 1.0) / (2.0 * s.s1);
  return std::numeric_limits<double>::quiet_NaN();
}

template <class D, class V>
HWY_INLINE double FoldMin(D d, V v) {  // EMU128's MinOfLanes caps at the max finite
  HWY_ALIGN hn::TFromD<D> lanes[HWY_MAX_BYTES / sizeof(hn::TFromD<D>)];
  hn::Store(v, d, lanes);
  double r = static_cast<double>(lanes[0]);
  for (size_t l = 1; l < hn::Lanes(d); ++l) r = lanes[l] < r ? lanes[l] : r;
  return r;
}

// The sums of one Entmax15 pass over its v_i, per lane: k = #(v > 0),
// a = sum of max(v, 0), b = sum of max(v, 0)^2, mn = the smallest v > 0
// (inf if none). Two of them (even / odd vectors) are merged by Finish.
template <class D>
struct Entmax15Acc {
  using V = hn::Vec<D>;
  V k, a, b, mn;
  explicit Entmax15Acc(D d) : k(hn::Zero(d)), a(k), b(k), mn(hn::Set(d, kInf)) {}
  HWY_INLINE void Add(D d, V v) {
    const auto p = hn::Gt(v, hn::Zero(d));
    const V w = hn::IfThenElseZero(p, v);
    k = hn::Add(k, hn::IfThenElseZero(p, hn::Set(d, hn::TFromD<D>{1})));
    a = hn::Add(a, w);
    b = hn::MulAdd(w, w, b);
    mn = hn::Min(mn, hn::IfThenElse(p, v, hn::Set(d, kInf)));
  }
  static HWY_INLINE Entmax15Pass Finish(D d, const Entmax15Acc& x, const Entmax15Acc& y) {
    Entmax15Pass r;
    r.k = hn::GetLane(hn::SumOfLanes(d, hn::Add(x.k, y.k)));
    r.s1 = hn::GetLane(hn::SumOfLanes(d, hn::Add(x.a, y.a)));
    r.s2 = hn::GetLane(hn::SumOfLanes(d, hn::Add(x.b, y.b)));
    r.vmin = FoldMin(d, hn::Min(x.mn, y.mn));
    return r;
  }
};

// Stage A pass: v_i = fl(t_i / 2 - c), c = m / 2 + tau, in f32.
HWY_INLINE Entmax15Pass Entmax15PassF32(const float* t, size_t n, float c) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const Logits<false, false> src{t, nullptr, 1.0f};
  const VF vc = hn::Set(d, -c), half = hn::Set(d, 0.5f);
  Entmax15Acc<DF> acc0(d), acc1(d);
  auto v = [&](VF x) { return hn::MulAdd(x, half, vc); };
  size_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    acc0.Add(d, v(src.Load(d, i)));
    acc1.Add(d, v(src.Load(d, i + N)));
  }
  for (; i + N <= n; i += N) acc0.Add(d, v(src.Load(d, i)));
  if (i < n) acc1.Add(d, v(src.LoadTail(d, i, n - i)));  // padding: -inf
  return Entmax15Acc<DF>::Finish(d, acc0, acc1);
}

// Loads N64 logits as float64 (the tail from a -inf padded copy).
HWY_INLINE V64 LoadT64(const float* t, size_t i, size_t n) {
  const D64 d;
  const DF64 df;
  const size_t N = hn::Lanes(d);
  if (i + N <= n) return hn::PromoteTo(d, hn::LoadU(df, t + i));
  HWY_ALIGN float buf[kMaxLanes64];
  for (size_t l = 0; l < N; ++l) buf[l] = i + l < n ? t[i + l] : kNegInf;
  return hn::PromoteTo(d, hn::Load(df, buf));
}

// Stage B pass: v_i = (t_i - m) / 2 - tau in float64 (z exact).
HWY_INLINE Entmax15Pass Entmax15PassF64(const float* t, size_t n, double m, double tau) {
  const D64 d;
  const size_t N = hn::Lanes(d);
  const V64 vm = hn::Set(d, m), vt = hn::Set(d, tau), half = hn::Set(d, 0.5);
  Entmax15Acc<D64> acc0(d), acc1(d);
  auto v = [&](V64 x) { return hn::Sub(hn::Mul(hn::Sub(x, vm), half), vt); };
  size_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    acc0.Add(d, v(LoadT64(t, i, n)));
    acc1.Add(d, v(LoadT64(t, i + N, n)));
  }
  for (; i < n; i += N) acc0.Add(d, v(LoadT64(t, i, n)));
  return Entmax15Acc<D64>::Finish(d, acc0, acc1);
}

double Entmax15ThresholdImpl(const float* t, int64_t n64, float m) {
  const size_t n = static_cast<size_t>(n64);
  const double md = static_cast<double>(m);
  // Stage A: from tau = -1 (max z = 0 and y_max = tau*^2 <= 1: tau* >= -1).
  double tau = -1.0;
  for (int pass = 0; pass < 32; ++pass) {
    const Entmax15Pass s = Entmax15PassF32(t, n, static_cast<float>(0.5 * md + tau));
    double next;
    const double cert = Entmax15Step(s, tau, &next);
    if (!std::isnan(cert) || std::isnan(next)) break;  // support found (or rounding)
    tau = next;
  }
  // Stage B: back off by more than stage A's rounding (f32 v: ~1e-7 of
  // |t / 2| and |c|; sums of <= n terms) and certify in float64.
  const double margin = 1e-5 * (1.0 + 0.5 * std::fabs(md)) + 1e-6 * std::fabs(tau);
  tau = std::max(-1.0, tau - margin);
  for (int pass = 0; pass < 64; ++pass) {
    const Entmax15Pass s = Entmax15PassF64(t, n, md, tau);
    double next;
    const double cert = Entmax15Step(s, tau, &next);
    if (!std::isnan(cert)) return cert;
    if (std::isnan(next)) break;
    tau = next;
  }
  return std::numeric_limits<double>::quiet_NaN();
}

void Entmax15StoreImpl(const float* t, int64_t n64, float m, double tau, float* dst) {
  const D64 d;
  const DF64 df;
  const size_t N = hn::Lanes(d);
  const size_t n = static_cast<size_t>(n64);
  const V64 vm = hn::Set(d, static_cast<double>(m)), vt = hn::Set(d, tau);
  const V64 half = hn::Set(d, 0.5);
  auto f = [&](V64 x) {
    const V64 v = hn::Max(hn::Sub(hn::Mul(hn::Sub(x, vm), half), vt), hn::Zero(d));
    return hn::DemoteTo(df, hn::Mul(v, v));
  };
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(f(LoadT64(t, i, n)), df, dst + i);
  if (i < n) {
    HWY_ALIGN float buf[kMaxLanes64];
    hn::Store(f(LoadT64(t, i, n)), df, buf);
    for (size_t l = 0; i + l < n; ++l) dst[i + l] = buf[l];
  }
}

// w = y^(2-alpha) on y > 0 (kind 2: indicator, 3: sqrt, 0: exp(e log y)).
// One vector of float64 lanes from f32 (widened exactly) or f64 values.
HWY_INLINE V64 LoadU64(const float* p) { return hn::PromoteTo(D64(), hn::LoadU(DF64(), p)); }
HWY_INLINE V64 LoadU64(const double* p) { return hn::LoadU(D64(), p); }

template <int kKind, class TIn>
HWY_INLINE EntmaxGradSums GradSumsT(const TIn* y, const TIn* g, size_t n, double alpha,
                                    bool with_alpha, double* w_out) {
  const D64 d;
  const size_t N = hn::Lanes(d);
  const V64 e = hn::Set(d, 2.0 - alpha);
  V64 sw = hn::Zero(d), gw = sw, gy = sw, gS = sw, H = sw, sy = sw;
  auto step = [&](V64 vy, V64 vg) -> V64 {
    const auto pos = hn::Gt(vy, hn::Zero(d));
    V64 w;
    if (kKind == 2) {
      w = hn::IfThenElseZero(pos, hn::Set(d, 1.0));
    } else if (kKind == 3) {
      w = hn::IfThenElseZero(pos, hn::Sqrt(hn::IfThenElseZero(pos, vy)));
    } else {
      const V64 safe = hn::IfThenElse(pos, vy, hn::Set(d, 1.0));
      w = hn::IfThenElseZero(pos, hn::Exp(d, hn::Mul(e, hn::Log(d, safe))));
    }
    sw = hn::Add(sw, w);
    sy = hn::Add(sy, vy);
    gw = hn::MulAdd(vg, w, gw);
    if (with_alpha) {
      const V64 safe = hn::IfThenElse(pos, vy, hn::Set(d, 1.0));
      const V64 S = hn::IfThenElseZero(pos, hn::Mul(vy, hn::Log(d, safe)));
      gy = hn::MulAdd(vg, vy, gy);
      gS = hn::MulAdd(vg, S, gS);
      H = hn::Add(H, S);
    }
    return w;
  };
  size_t i = 0;
  for (; i + N <= n; i += N) {
    hn::StoreU(step(LoadU64(y + i), LoadU64(g + i)), d, w_out + i);
  }
  if (i < n) {
    const size_t cnt = n - i;
    HWY_ALIGN TIn by[kMaxLanes64] = {}, bg[kMaxLanes64] = {};
    HWY_ALIGN double bw[kMaxLanes64];
    for (size_t l = 0; l < cnt; ++l) {
      by[l] = y[i + l];
      bg[l] = g[i + l];
    }
    const V64 w = step(LoadU64(by), LoadU64(bg));
    hn::Store(w, d, bw);
    for (size_t l = 0; l < cnt; ++l) w_out[i + l] = bw[l];
  }
  EntmaxGradSums r;
  r.sum_w = hn::GetLane(hn::SumOfLanes(d, sw));
  r.gw = hn::GetLane(hn::SumOfLanes(d, gw));
  r.sum_y = hn::GetLane(hn::SumOfLanes(d, sy));
  if (with_alpha) {
    r.gy = hn::GetLane(hn::SumOfLanes(d, gy));
    r.gS = hn::GetLane(hn::SumOfLanes(d, gS));
    r.H = hn::GetLane(hn::SumOfLanes(d, H));
  }
  return r;
}

EntmaxGradSums EntmaxGradSumsImpl(const float* y, const float* g, int64_t n64, double alpha,
                                  bool with_alpha, double* w_out) {
  const size_t n = static_cast<size_t>(n64);
  if (alpha == 2.0) return GradSumsT<2>(y, g, n, alpha, with_alpha, w_out);
  if (alpha == 1.5) return GradSumsT<3>(y, g, n, alpha, with_alpha, w_out);
  return GradSumsT<0>(y, g, n, alpha, with_alpha, w_out);
}
EntmaxGradSums EntmaxGradSums64Impl(const double* y, const double* g, int64_t n64, double alpha,
                                    bool with_alpha, double* w_out) {
  const size_t n = static_cast<size_t>(n64);
  if (alpha == 2.0) return GradSumsT<2>(y, g, n, alpha, with_alpha, w_out);
  if (alpha == 1.5) return GradSumsT<3>(y, g, n, alpha, with_alpha, w_out);
  return GradSumsT<0>(y, g, n, alpha, with_alpha, w_out);
}

// The float64 rows' dx = s w (g - q), every operand and the result double.
void EntmaxGradStore64Impl(const double* w, const double* g, int64_t n64, double q, double scale,
                           double* dx) {
  const D64 d;
  const size_t N = hn::Lanes(d);
  const size_t n = static_cast<size_t>(n64);
  const V64 vq = hn::Set(d, q), vs = hn::Set(d, scale);
  auto f = [&](V64 vw, V64 vg) { return hn::Mul(hn::Mul(vw, hn::Sub(vg, vq)), vs); };
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(f(hn::LoadU(d, w + i), hn::LoadU(d, g + i)), d, dx + i);
  if (i < n) {
    const size_t cnt = n - i;
    HWY_ALIGN double bw[kMaxLanes64] = {}, bg[kMaxLanes64] = {}, bx[kMaxLanes64];
    for (size_t l = 0; l < cnt; ++l) {
      bg[l] = g[i + l];
      bw[l] = w[i + l];
    }
    hn::Store(f(hn::Load(d, bw), hn::Load(d, bg)), d, bx);
    for (size_t l = 0; l < cnt; ++l) dx[i + l] = bx[l];
  }
}

// dx = fl32(s w (g - q)) in float64: g - q cancels where g_i is close to the
// weighted mean q, and a large w_i (y^(2-alpha), alpha > 2, small y) scales
// that cancellation up, so neither q nor w is rounded to f32 before it.
void EntmaxGradStoreImpl(const double* w, const float* g, int64_t n64, double q, float scale,
                         float* dx) {
  const D64 d;
  const DF64 df;
  const size_t N = hn::Lanes(d);
  const size_t n = static_cast<size_t>(n64);
  const V64 vq = hn::Set(d, q), vs = hn::Set(d, static_cast<double>(scale));
  // DemoteIeee: a gradient beyond f32 is inf on every target (DemoteTo
  // saturates at FLT_MAX on SCALAR).
  auto f = [&](V64 vw, V64 vg) { return DemoteIeee(d, hn::Mul(hn::Mul(vw, hn::Sub(vg, vq)), vs)); };
  size_t i = 0;
  for (; i + N <= n; i += N) {
    hn::StoreU(f(hn::LoadU(d, w + i), hn::PromoteTo(d, hn::LoadU(df, g + i))), df, dx + i);
  }
  if (i < n) {
    const size_t cnt = n - i;
    HWY_ALIGN float bg[kMaxLanes64] = {}, bx[kMaxLanes64];
    HWY_ALIGN double bw[kMaxLanes64] = {};
    for (size_t l = 0; l < cnt; ++l) {
      bg[l] = g[i + l];
      bw[l] = w[i + l];
    }
    hn::Store(f(hn::Load(d, bw), hn::PromoteTo(d, hn::Load(df, bg))), df, bx);
    for (size_t l = 0; l < cnt; ++l) dx[i + l] = bx[l];
  }
}

double TopkExpStoreImpl(const float* t, int64_t n64, float theta, int64_t ge_end64, float m,
                        float* dst) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const size_t n = static_cast<size_t>(n64);
  const size_t ge_end = static_cast<size_t>(ge_end64);
  const Logits<false, false> src{t, nullptr, 1.0f};
  const ExpDiff exp = ExpDiff::Make(m);
  const VF vth = hn::Set(d, theta);
  BlockSum sum(d);
  auto keep = [&](VF v, size_t i) {
    if (i + N <= ge_end) return hn::Ge(v, vth);
    if (i >= ge_end) return hn::Gt(v, vth);
    return hn::Or(hn::Gt(v, vth), hn::And(hn::Eq(v, vth), hn::FirstN(d, ge_end - i)));
  };
  size_t i = 0;
  unsigned k = 0;
  for (; i + N <= n; i += N, ++k) {
    const VF v = src.Load(d, i);
    const VF e = hn::IfThenElseZero(keep(v, i), exp(d, v));
    hn::StoreU(e, d, dst + i);
    sum.Add1(e, k);
    if ((k & 15) == 15) sum.Flush(d);  // <= 8 adds per lane per f32 chain
  }
  if (i < n) {
    const VF v = src.LoadTail(d, i, n - i);
    const VF e = hn::IfThenElseZero(keep(v, i), exp(d, v));
    StoreTail(d, e, dst + i, n - i);
    sum.Add1(e, k);
  }
  return sum.Total(d);
}

int64_t NthEqualIndexImpl(const float* t, int64_t n64, float v, int64_t count) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const size_t n = static_cast<size_t>(n64);
  const VF vv = hn::Set(d, v);
  int64_t seen = 0;
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto eq = hn::Eq(hn::LoadU(d, t + i), vv);
    const int64_t c = static_cast<int64_t>(hn::CountTrue(d, eq));
    if (seen + c >= count) break;
    seen += c;
  }
  for (; i < n; ++i) {
    if (t[i] == v && ++seen == count) return static_cast<int64_t>(i);
  }
  return n64;
}

int64_t CountGreaterImpl(const float* t, int64_t n64, float v) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const size_t n = static_cast<size_t>(n64);
  const Logits<false, false> src{t, nullptr, 1.0f};
  const VF vv = hn::Set(d, v);
  size_t count = 0;
  size_t i = 0;
  for (; i + N <= n; i += N) count += hn::CountTrue(d, hn::Gt(src.Load(d, i), vv));
  if (i < n) count += hn::CountTrue(d, hn::Gt(src.LoadTail(d, i, n - i), vv));  // pad -inf
  return static_cast<int64_t>(count);
}

void SparseFillImpl(float* dst, int64_t n, float value) {
  Fill(dst, static_cast<size_t>(n), value);
}

}  // namespace smax::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace smax::kernels {

HWY_EXPORT(SparseScanImpl);
HWY_EXPORT(SparseCandidatesImpl);
HWY_EXPORT(SparseScan64Impl);
HWY_EXPORT(SparseCandidates64Impl);
HWY_EXPORT(EntmaxPowSumImpl);
HWY_EXPORT(EntmaxPowStoreImpl);
HWY_EXPORT(EntmaxGradSumsImpl);
HWY_EXPORT(EntmaxGradStoreImpl);
HWY_EXPORT(EntmaxGradSums64Impl);
HWY_EXPORT(EntmaxGradStore64Impl);
HWY_EXPORT(TopkExpStoreImpl);
HWY_EXPORT(NthEqualIndexImpl);
HWY_EXPORT(CountGreaterImpl);
HWY_EXPORT(SparseFillImpl);
HWY_EXPORT(Entmax15ThresholdImpl);
HWY_EXPORT(Entmax15StoreImpl);

SparseScan sparse_scan(const float* t, int64_t n) noexcept {
  return HWY_DYNAMIC_DISPATCH(SparseScanImpl)(t, n);
}
int64_t sparse_candidates(const float* t, int64_t n, float lo, float m, int64_t* idx,
                          double* d) noexcept {
  return HWY_DYNAMIC_DISPATCH(SparseCandidatesImpl)(t, n, lo, m, idx, d);
}
double entmax_pow_sum(const double* z, int64_t k, double tau, double p) noexcept {
  return HWY_DYNAMIC_DISPATCH(EntmaxPowSumImpl)(z, k, tau, p);
}
double entmax_pow_store(const double* z, int64_t k, double tau, double p, double* out) noexcept {
  return HWY_DYNAMIC_DISPATCH(EntmaxPowStoreImpl)(z, k, tau, p, out);
}
EntmaxGradSums entmax_grad_sums(const float* y, const float* g, int64_t n, double alpha,
                                bool with_alpha, double* w_out) noexcept {
  return HWY_DYNAMIC_DISPATCH(EntmaxGradSumsImpl)(y, g, n, alpha, with_alpha, w_out);
}
void entmax_grad_store(const double* w, const float* g, int64_t n, double q, float scale,
                       float* dx) noexcept {
  HWY_DYNAMIC_DISPATCH(EntmaxGradStoreImpl)(w, g, n, q, scale, dx);
}
EntmaxGradSums entmax_grad_sums(const double* y, const double* g, int64_t n, double alpha,
                                bool with_alpha, double* w_out) noexcept {
  return HWY_DYNAMIC_DISPATCH(EntmaxGradSums64Impl)(y, g, n, alpha, with_alpha, w_out);
}
void entmax_grad_store(const double* w, const double* g, int64_t n, double q, double scale,
                       double* dx) noexcept {
  HWY_DYNAMIC_DISPATCH(EntmaxGradStore64Impl)(w, g, n, q, scale, dx);
}
SparseScan64 sparse_scan_f64(const double* t, int64_t n) noexcept {
  return HWY_DYNAMIC_DISPATCH(SparseScan64Impl)(t, n);
}
int64_t sparse_candidates_f64(const double* t, int64_t n, double r, double m, int64_t* idx,
                              double* d) noexcept {
  return HWY_DYNAMIC_DISPATCH(SparseCandidates64Impl)(t, n, r, m, idx, d);
}
double topk_exp_store(const float* t, int64_t n, float theta, int64_t ge_end, float m,
                      float* dst) noexcept {
  return HWY_DYNAMIC_DISPATCH(TopkExpStoreImpl)(t, n, theta, ge_end, m, dst);
}
int64_t nth_equal_index(const float* t, int64_t n, float v, int64_t count) noexcept {
  return HWY_DYNAMIC_DISPATCH(NthEqualIndexImpl)(t, n, v, count);
}
int64_t count_greater(const float* t, int64_t n, float v) noexcept {
  return HWY_DYNAMIC_DISPATCH(CountGreaterImpl)(t, n, v);
}
void sparse_fill(float* dst, int64_t n, float value) noexcept {
  HWY_DYNAMIC_DISPATCH(SparseFillImpl)(dst, n, value);
}
double entmax15_threshold(const float* t, int64_t n, float m) noexcept {
  return HWY_DYNAMIC_DISPATCH(Entmax15ThresholdImpl)(t, n, m);
}
void entmax15_store(const float* t, int64_t n, float m, double tau, float* dst) noexcept {
  HWY_DYNAMIC_DISPATCH(Entmax15StoreImpl)(t, n, m, tau, dst);
}

}  // namespace smax::kernels
#endif  // HWY_ONCE
