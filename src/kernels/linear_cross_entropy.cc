// src/kernels/linear_cross_entropy.cc: the row kernels of the fused linear
// cross-entropy (kernels/linear_cross_entropy.h), run on each row of a GEMM
// tile of logits while it is still in cache.
//
// Logits: lce_logits forms u = fl(fl(z + bias) * s) in place (an Add, then a
// Mul: nothing to contract into an FMA).
//
// Scan: the online (Milakov & Gimelshein) (max, sum) of scan-inl.h's
// OnlineScan (same reference / slack / rebase scheme, exact t - ref through
// ExpDiff, blocked f32 sums widened to float64), with the label-smoothing
// sums (sum w_j t_j, sum w_j over unmasked j), the entropy term
// sum e_j (t_j - ref) and the first argmax fused into the same read. At a
// rebase (rare) the partial sums are totalled in float64 and carried:
// S0' = f S0, S1' = f (S1 + (ref - ref') S0), f = e^(ref - ref').
// The op layer merges the per-chunk results of a row in float64 the same way.
//
// Softcap: t = cap * tanh(u / cap) (Highway's Tanh, <= 4 ulp) with +-inf and
// NaN u passed through. Its derivative is computed as 4E / (1 + E)^2 with
// E = e^(-2|u / cap|) (no cancellation, unlike 1 - tanh^2 near |tanh| = 1).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/linear_cross_entropy.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include "kernels/exp-inl.h"
#include "kernels/linear_cross_entropy.h"
#include "kernels/scan-inl.h"
#include "kernels/sum-inl.h"

HWY_BEFORE_NAMESPACE();
namespace smax::kernels::HWY_NAMESPACE {

// ---- u = fl(fl(z + b) * s) --------------------------------------------------------
template <bool kBias, bool kScale>
HWY_INLINE void LogitsT(float* HWY_RESTRICT z, size_t n, const float* HWY_RESTRICT b,
                        float scale) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const VF vs = hn::Set(d, scale);
  auto f = [&](VF v, VF vb) {
    if (kBias) v = hn::Add(v, vb);
    if (kScale) v = hn::Mul(v, vs);
    return v;
  };
  size_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    const VF v0 = f(hn::LoadU(d, z + i), kBias ? hn::LoadU(d, b + i) : vs);
    const VF v1 = f(hn::LoadU(d, z + i + N), kBias ? hn::LoadU(d, b + i + N) : vs);
    hn::StoreU(v0, d, z + i);
    hn::StoreU(v1, d, z + i + N);
  }
  for (; i + N <= n; i += N) {
    hn::StoreU(f(hn::LoadU(d, z + i), kBias ? hn::LoadU(d, b + i) : vs), d, z + i);
  }
  if (i < n) {
    const size_t c = n - i;
    StoreTail(d, f(LoadTailZero(d, z + i, c), kBias ? LoadTailZero(d, b + i, c) : vs), z + i, c);
  }
}

void LceLogitsImpl(float* z, int64_t n64, const float* bias, float scale) {
  const size_t n = static_cast<size_t>(n64);
  if (bias != nullptr) {
    if (scale != 1.0f) {
      LogitsT<true, true>(z, n, bias, scale);
    } else {
      LogitsT<true, false>(z, n, bias, scale);
    }
  } else if (scale != 1.0f) {
    LogitsT<false, true>(z, n, bias, scale);
  }
}

// ---- row sources: t_j from u_j ------------------------------------------------------
// Not HWY_RESTRICT: the gradient overwrites the row it reads (in place).
struct PlainSrc {
  static constexpr bool kCap = false;
  const float* x;
  HWY_INLINE VF Load2(DF d, size_t i, VF* a) const {
    *a = hn::Zero(d);
    return hn::LoadU(d, x + i);
  }
  // Lanes [count, N) are -inf.
  HWY_INLINE VF LoadTail2(DF d, size_t i, size_t count, VF* a) const {
    *a = hn::Zero(d);
    return Logits<false, false>{x, nullptr, 1.0f}.LoadTail(d, i, count);
  }
  HWY_INLINE VF Load(DF d, size_t i) const { return hn::LoadU(d, x + i); }
  HWY_INLINE VF LoadTail(DF d, size_t i, size_t count) const {
    return Logits<false, false>{x, nullptr, 1.0f}.LoadTail(d, i, count);
  }
};

// t = cap * tanh(u / cap), +-inf / NaN u kept; a = u / cap for the derivative.
struct CapSrc {
  static constexpr bool kCap = true;
  const float* x;
  float cap;
  float inv_cap;
  HWY_INLINE VF Cap(DF d, VF u, VF* a) const {
    const VF arg = hn::Mul(u, hn::Set(d, inv_cap));
    *a = arg;
    const VF c = hn::Mul(hn::Tanh(d, arg), hn::Set(d, cap));
    return hn::IfThenElse(hn::IsFinite(u), c, u);
  }
  HWY_INLINE VF Load2(DF d, size_t i, VF* a) const { return Cap(d, hn::LoadU(d, x + i), a); }
  HWY_INLINE VF LoadTail2(DF d, size_t i, size_t count, VF* a) const {
    return Cap(d, Logits<false, false>{x, nullptr, 1.0f}.LoadTail(d, i, count), a);
  }
  HWY_INLINE VF Load(DF d, size_t i) const {
    VF a;
    return Load2(d, i, &a);
  }
  HWY_INLINE VF LoadTail(DF d, size_t i, size_t count) const {
    VF a;
    return LoadTail2(d, i, count, &a);
  }
};

template <class F>
HWY_INLINE void WithSrc(const float* u, float softcap, F&& f) {
  if (softcap > 0.0f) {
    f(CapSrc{u, softcap, 1.0f / softcap});
  } else {
    f(PlainSrc{u});
  }
}

// ---- scan ---------------------------------------------------------------------------
// kSums: 0 none, 1 unweighted (sum t, count), 2 weighted (sum w t, sum w).
template <int kSums, bool kEntropy, class Src>
HWY_INLINE LceScan ScanT(const Src& src, size_t n, const float* HWY_RESTRICT w,
                         bool want_argmax) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const VF neg_inf = hn::Set(d, kNegInf);
  BlockSum sum(d), ent(d), st(d), sw(d);
  double carry0 = 0.0, carry1 = 0.0;
  float ref = 0.0f;        // any finite value: -inf elements give 0
  float thresh = kNegInf;  // ref + slack; -inf until the first finite max
  VF vmax = neg_inf;
  ExpDiff exp = ExpDiff::Make(ref);

  auto rebase = [&](VF step_max) {  // rare path
    const float new_ref = ReduceMax(d, step_max);
    const double s0 = carry0 + sum.Total(d);
    const double f = std::exp(static_cast<double>(ref) - static_cast<double>(new_ref));
    if (kEntropy) {
      const double s1 = carry1 + ent.Total(d);
      carry1 = f * (s1 + (static_cast<double>(ref) - static_cast<double>(new_ref)) * s0);
      ent = BlockSum(d);
    }
    carry0 = f * s0;
    sum = BlockSum(d);
    ref = new_ref;
    thresh = ref + kOnlineSlack;
    exp = ExpDiff::Make(ref);
  };
  auto sums1 = [&](VF t, VF e, size_t at, bool tail, size_t count, unsigned k) {
    if (kSums) {
      const auto masked = hn::Eq(t, neg_inf);
      VF wv = hn::Set(d, 1.0f);
      if (kSums == 2) wv = tail ? LoadTailZero(d, w + at, count) : hn::LoadU(d, w + at);
      st.Add1(hn::IfThenZeroElse(masked, kSums == 2 ? hn::Mul(wv, t) : t), k);
      sw.Add1(hn::IfThenZeroElse(masked, wv), k);
    }
    if (kEntropy) {
      ent.Add1(hn::IfThenZeroElse(hn::Eq(e, hn::Zero(d)), hn::Mul(e, hn::Sub(t, hn::Set(d, ref)))),
               k);
    }
  };

  size_t i = 0;
  for (; i + kUnroll * N <= n; i += kUnroll * N) {
    const VF t0 = src.Load(d, i);
    const VF t1 = src.Load(d, i + N);
    const VF t2 = src.Load(d, i + 2 * N);
    const VF t3 = src.Load(d, i + 3 * N);
    const VF sm = hn::Max(hn::Max(t0, t1), hn::Max(t2, t3));
    vmax = hn::Max(vmax, sm);
    if (HWY_UNLIKELY(!hn::AllFalse(d, hn::Gt(sm, hn::Set(d, thresh))))) rebase(sm);
    const VF e0 = exp(d, t0), e1 = exp(d, t1), e2 = exp(d, t2), e3 = exp(d, t3);
    sum.Add4(d, e0, e1, e2, e3);
    if (kSums) {
      VF tv[4], wk[4];
      const VF ts[4] = {t0, t1, t2, t3};
      for (size_t j = 0; j < 4; ++j) {
        const auto masked = hn::Eq(ts[j], neg_inf);
        const VF wv = kSums == 2 ? hn::LoadU(d, w + i + j * N) : hn::Set(d, 1.0f);
        tv[j] = hn::IfThenZeroElse(masked, kSums == 2 ? hn::Mul(wv, ts[j]) : ts[j]);
        wk[j] = hn::IfThenZeroElse(masked, wv);
      }
      st.Add4(d, tv[0], tv[1], tv[2], tv[3]);
      sw.Add4(d, wk[0], wk[1], wk[2], wk[3]);
    }
    if (kEntropy) {
      const VF vr = hn::Set(d, ref);
      auto term = [&](VF t, VF e) {
        return hn::IfThenZeroElse(hn::Eq(e, hn::Zero(d)), hn::Mul(e, hn::Sub(t, vr)));
      };
      ent.Add4(d, term(t0, e0), term(t1, e1), term(t2, e2), term(t3, e3));
    }
  }
  unsigned k = 0;
  auto one = [&](VF t, size_t count, bool tail) {
    vmax = hn::Max(vmax, t);
    if (!hn::AllFalse(d, hn::Gt(t, hn::Set(d, thresh)))) rebase(t);
    const VF e = ExpTail(exp, d, t);
    sum.Add1(e, k);
    sums1(t, e, i, tail, count, k);
    ++k;
  };
  for (; i + N <= n; i += N) one(src.Load(d, i), N, false);
  if (i < n) one(src.LoadTail(d, i, n - i), n - i, true);

  LceScan res;
  res.ref = ref;
  res.d = carry0 + sum.Total(d);
  res.max = ReduceMax(d, vmax);
  if (kSums) {
    res.sum_t = st.Total(d);
    res.sum_w = sw.Total(d);
  }
  if (kEntropy) res.sum_et = carry1 + ent.Total(d);
  // Argmax: a second, compare-only read of the (cache-resident) row for the
  // first lane equal to the maximum (no exp). Not taken for NaN maxima.
  res.argmax = 0;
  if (want_argmax && res.max > kNegInf) {
    const VF vm = hn::Set(d, res.max);
    size_t j = 0;
    for (; j + N <= n; j += N) {
      const intptr_t at = hn::FindFirstTrue(d, hn::Eq(src.Load(d, j), vm));
      if (at >= 0) {
        res.argmax = static_cast<int64_t>(j) + at;
        return res;
      }
    }
    if (j < n) {
      const intptr_t at = hn::FindFirstTrue(d, hn::Eq(src.LoadTail(d, j, n - j), vm));
      if (at >= 0) res.argmax = static_cast<int64_t>(j) + at;
    }
  }
  return res;
}

LceScan LceScanImpl(const float* u, int64_t n64, const LceScanRequest& req) {
  LceScan out;
  const size_t n = static_cast<size_t>(n64);
  if (n == 0) return out;
  WithSrc(u, req.softcap, [&](const auto& src) {
    const int sums = !req.sums ? 0 : (req.weight != nullptr ? 2 : 1);
    if (req.entropy) {
      if (sums == 0) out = ScanT<0, true>(src, n, req.weight, req.argmax);
      if (sums == 1) out = ScanT<1, true>(src, n, req.weight, req.argmax);
      if (sums == 2) out = ScanT<2, true>(src, n, req.weight, req.argmax);
    } else {
      if (sums == 0) out = ScanT<0, false>(src, n, req.weight, req.argmax);
      if (sums == 1) out = ScanT<1, false>(src, n, req.weight, req.argmax);
      if (sums == 2) out = ScanT<2, false>(src, n, req.weight, req.argmax);
    }
  });
  return out;
}

// ---- gradient -----------------------------------------------------------------------
template <bool kW, class Src, class Exp>
HWY_INLINE void GradT(const Src& src, size_t n, const Exp& exp, float factor, float b,
                      const float* HWY_RESTRICT w, float scale, float* dst) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const VF vf = hn::Set(d, factor);
  const VF vb = hn::Set(d, b);
  const VF vs = hn::Set(d, scale);
  const VF neg_inf = hn::Set(d, kNegInf);
  const ExpRef exp0 = ExpRef::Make(0.0f);
  auto f = [&](VF t, VF a, VF vw) {
    const VF sub = kW ? hn::Mul(vb, vw) : vb;
    VF g = hn::Sub(hn::Mul(exp(d, t), vf), sub);
    if (Src::kCap) {
      // cap' = 1 - tanh^2(a) = 4E / (1 + E)^2, E = e^(-2|a|).
      const VF e2 = exp0(d, hn::Mul(hn::Set(d, -2.0f), hn::Abs(a)));
      const VF one_e = hn::Add(hn::Set(d, 1.0f), e2);
      const VF deriv = hn::Div(hn::Mul(hn::Set(d, 4.0f), e2), hn::Mul(one_e, one_e));
      g = hn::Mul(g, hn::Mul(vs, deriv));
    } else {
      g = hn::Mul(g, vs);
    }
    return hn::IfThenZeroElse(hn::Eq(t, neg_inf), g);
  };
  const VF one = hn::Set(d, 1.0f);
  size_t i = 0;
  // In place (dst == src.x): each vector is loaded before it is stored.
  for (; i + 2 * N <= n; i += 2 * N) {
    VF a0, a1;
    const VF t0 = src.Load2(d, i, &a0);
    const VF t1 = src.Load2(d, i + N, &a1);
    const VF g0 = f(t0, a0, kW ? hn::LoadU(d, w + i) : one);
    const VF g1 = f(t1, a1, kW ? hn::LoadU(d, w + i + N) : one);
    hn::StoreU(g0, d, dst + i);
    hn::StoreU(g1, d, dst + i + N);
  }
  for (; i + N <= n; i += N) {
    VF a;
    const VF t = src.Load2(d, i, &a);
    hn::StoreU(f(t, a, kW ? hn::LoadU(d, w + i) : one), d, dst + i);
  }
  if (i < n) {
    const size_t c = n - i;
    VF a;
    const VF t = src.LoadTail2(d, i, c, &a);
    StoreTail(d, f(t, a, kW ? LoadTailZero(d, w + i, c) : one), dst + i, c);
  }
}

template <bool kW, class Src>
HWY_INLINE void GradExp(const Src& src, size_t n, const LceGrad& g, float* dst) {
  const float shift = g.shift;
  if (std::fabs(shift) <= kRefMaxAbs) {
    // ExpRef with N = round(shift log2e); e^(N ln2 - shift) folded into the
    // factor in float64 (as pass-inl.h's ExpShiftScaleStore).
    const float nref = std::nearbyint(shift * kLog2e);
    const float f = static_cast<float>(
        g.factor * std::exp(static_cast<double>(nref) * kLn2d - static_cast<double>(shift)));
    GradT<kW>(src, n, ExpRef::Make(nref, FlushExtra(std::fabs(f))), f, g.b, g.weight, g.scale,
              dst);
  } else {
    const float f = static_cast<float>(g.factor);
    GradT<kW>(src, n, ExpDiff::Make(shift, FlushExtra(std::fabs(f))), f, g.b, g.weight, g.scale,
              dst);
  }
}

void LceGradImpl(float* u, int64_t n64, const LceGrad& g) {
  const size_t n = static_cast<size_t>(n64);
  if (n == 0) return;
  WithSrc(u, g.softcap, [&](const auto& src) {
    if (g.weight != nullptr) {
      GradExp<true>(src, n, g, u);
    } else {
      GradExp<false>(src, n, g, u);
    }
  });
}

// ---- acc += x in float64 -----------------------------------------------------------
void LceAccumulateImpl(const float* HWY_RESTRICT x, int64_t n64, double* HWY_RESTRICT acc) {
  const size_t n = static_cast<size_t>(n64);
  size_t i = 0;
#if HWY_TARGET != HWY_SCALAR
  const DF d;
  const hn::Half<DF> dh;
  const hn::Rebind<double, hn::Half<DF>> dd;
  const size_t N = hn::Lanes(d);
  const size_t ND = hn::Lanes(dd);
  for (; i + N <= n; i += N) {
    const VF v = hn::LoadU(d, x + i);
    hn::StoreU(hn::Add(hn::LoadU(dd, acc + i), hn::PromoteTo(dd, hn::LowerHalf(dh, v))), dd,
               acc + i);
    hn::StoreU(hn::Add(hn::LoadU(dd, acc + i + ND), hn::PromoteTo(dd, hn::UpperHalf(dh, v))), dd,
               acc + i + ND);
  }
#endif
  for (; i < n; ++i) acc[i] += static_cast<double>(x[i]);
}

}  // namespace smax::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace smax::kernels {

HWY_EXPORT(LceLogitsImpl);
HWY_EXPORT(LceScanImpl);
HWY_EXPORT(LceGradImpl);
HWY_EXPORT(LceAccumulateImpl);

void lce_logits(float* z, int64_t n, const float* bias, float scale) noexcept {
  HWY_DYNAMIC_DISPATCH(LceLogitsImpl)(z, n, bias, scale);
}
LceScan lce_scan(const float* u, int64_t n, const LceScanRequest& req) noexcept {
  return HWY_DYNAMIC_DISPATCH(LceScanImpl)(u, n, req);
}
void lce_grad(float* u, int64_t n, const LceGrad& g) noexcept {
  HWY_DYNAMIC_DISPATCH(LceGradImpl)(u, n, g);
}
void lce_accumulate(const float* x, int64_t n, double* acc) noexcept {
  HWY_DYNAMIC_DISPATCH(LceAccumulateImpl)(x, n, acc);
}

}  // namespace smax::kernels
#endif  // HWY_ONCE
