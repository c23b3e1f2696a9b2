// src/kernels/cross_entropy.cc: the fused cross-entropy row kernels
// (kernels/cross_entropy.h): the one-read forward scan, the sums of a
// probability-target row and the one-write gradient.
//
// Scan: the online (Milakov & Gimelshein) (max, sum) of scan-inl.h's
// OnlineScan (same reference / slack / rebase scheme, exact t - ref through
// ExpDiff, blocked f32 sums widened to float64), with what the loss needs
// fused into the same read: sum_j w_j t_j and sum_j w_j over unmasked j
// (label smoothing), sum_j e_j (t_j - ref) (entropy: H = log d - S1 / d)
// and the first argmax. At a rebase (rare) the partial sums are totalled in
// float64 and carried: S0' = f S0, S1' = f (S1 + (ref - ref') S0) with
// f = e^(ref - ref'). Argmax: one compare of the step max per 4 vectors;
// only a step that holds a new maximum is scanned element by element.
//
// Softcap: t = cap * tanh(u / cap) (Highway's Tanh, <= 4 ulp) with +-inf
// and NaN u passed through. Its derivative in the gradient is computed as
// 4E / (1 + E)^2 with E = e^(-2|u / cap|) (no cancellation, unlike
// 1 - tanh^2 near |tanh| = 1).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cross_entropy.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include "kernels/cross_entropy.h"
#include "kernels/exp-inl.h"
#include "kernels/scan-inl.h"
#include "kernels/sum-inl.h"

HWY_BEFORE_NAMESPACE();
namespace smax::kernels::HWY_NAMESPACE {

// ---- row sources: t_j (and what the softcap derivative needs) ---------------
// Plain rows: t = x (the op layer formed the logits).
// `x` is not restrict: the gradient may be written over it in place (each
// element is loaded before its own store).
struct PlainSrc {
  static constexpr bool kCap = false;
  static constexpr bool kRawKey = false;  // argmax over t itself
  const float* x;
  HWY_INLINE VF Load(DF d, size_t i) const { return hn::LoadU(d, x + i); }
  HWY_INLINE VF LoadTail(DF d, size_t i, size_t count) const {
    return Logits<false, false>{x, nullptr, 1.0f}.LoadTail(d, i, count);
  }
  // a = u / cap (unused without softcap).
  HWY_INLINE VF Load2(DF d, size_t i, VF* a) const {
    *a = hn::Zero(d);
    return Load(d, i);
  }
  HWY_INLINE VF LoadTail2(DF d, size_t i, size_t count, VF* a) const {
    *a = hn::Zero(d);
    return LoadTail(d, i, count);
  }
};

// Softcapped rows: t = cap * tanh(u / cap) (+ mask), +-inf / NaN u kept.
template <bool kMask>
struct CapSrc {
  static constexpr bool kCap = true;
  // Without a mask after the cap, the argmax is taken over u: the cap is
  // monotonic, and rounding cap * tanh(u / cap) to f32 would create ties.
  static constexpr bool kRawKey = !kMask;
  const float* x;  // not restrict (in-place gradient)
  const float* HWY_RESTRICT mask;
  float cap;
  float inv_cap;

  HWY_INLINE VF Cap(DF d, VF u, VF* a) const {
    const VF arg = hn::Mul(u, hn::Set(d, inv_cap));
    *a = arg;
    const VF c = hn::Mul(hn::Tanh(d, arg), hn::Set(d, cap));
    return hn::IfThenElse(hn::IsFinite(u), c, u);
  }
  HWY_INLINE VF Load2(DF d, size_t i, VF* a) const {
    VF t = Cap(d, hn::LoadU(d, x + i), a);
    if (kMask) t = hn::Add(t, hn::LoadU(d, mask + i));
    return t;
  }
  HWY_INLINE VF LoadTail2(DF d, size_t i, size_t count, VF* a) const {
    VF t = Cap(d, Logits<false, false>{x, nullptr, 1.0f}.LoadTail(d, i, count), a);
    if (kMask) t = hn::Add(t, LoadTailZero(d, mask + i, count));  // -inf + 0 past n
    return t;
  }
  HWY_INLINE VF Load(DF d, size_t i) const {
    VF a;
    return Load2(d, i, &a);
  }
  HWY_INLINE VF Raw(DF d, size_t i) const { return hn::LoadU(d, x + i); }
  HWY_INLINE VF RawTail(DF d, size_t i, size_t count) const {
    return Logits<false, false>{x, nullptr, 1.0f}.LoadTail(d, i, count);
  }
  HWY_INLINE VF LoadTail(DF d, size_t i, size_t count) const {
    VF a;
    return LoadTail2(d, i, count, &a);
  }
};

template <class F>
HWY_INLINE void WithSrc(const XentRow& row, F&& f) {
  if (row.softcap > 0.0f) {
    const float inv = 1.0f / row.softcap;
    if (row.mask != nullptr) {
      f(CapSrc<true>{row.x, row.mask, row.softcap, inv});
    } else {
      f(CapSrc<false>{row.x, nullptr, row.softcap, inv});
    }
  } else {
    f(PlainSrc{row.x});
  }
}

// ---- scan ------------------------------------------------------------------------
// kSums: 0 none, 1 unweighted (sum t, count), 2 weighted (sum w t, sum w).
template <int kSums, bool kEntropy, class Src>
HWY_INLINE XentScan ScanT(const Src& src, size_t n, const float* HWY_RESTRICT w,
                          bool want_argmax) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const VF neg_inf = hn::Set(d, kNegInf);
  BlockSum sum(d), ent(d);
  F64Acc st, sw;  // smoothing sums in float64 (|t| up to FLT_MAX, w * t exact)
  double carry0 = 0.0, carry1 = 0.0;
  float ref = 0.0f;        // any finite value: -inf elements give 0
  float thresh = kNegInf;  // ref + slack; -inf until the first finite max
  VF vmax = neg_inf;
  ExpDiff exp = ExpDiff::Make(ref);
  float best = kNegInf;
  int64_t best_idx = 0;

  auto rebase = [&](VF step_max) {  // rare path
    const float new_ref = ReduceMax(d, step_max);
    // f overflows only at the first rebase (ref = 0 >> new_ref), where the
    // sums are 0 (or NaN, which must survive): hence the s0 == 0 tests.
    const double s0 = carry0 + sum.Total(d);
    const double f = std::exp(static_cast<double>(ref) - static_cast<double>(new_ref));
    if (kEntropy) {
      const double s1 = carry1 + ent.Total(d);
      carry1 = (s0 == 0.0 && s1 == 0.0)
                   ? 0.0
                   : f * (s1 + (static_cast<double>(ref) - static_cast<double>(new_ref)) * s0);
      ent = BlockSum(d);
    }
    carry0 = s0 == 0.0 ? 0.0 : f * s0;
    sum = BlockSum(d);
    ref = new_ref;
    thresh = ref + kOnlineSlack;
    exp = ExpDiff::Make(ref);
  };
  // Element-wise search of `count` lanes of `v` (k vectors stored in buf) for
  // values above `best`, in index order (first occurrence of the maximum).
  HWY_ALIGN float buf[kUnroll * kMaxLanes] = {};
  auto find_best = [&](size_t base, size_t count) {
    for (size_t j = 0; j < count; ++j) {
      if (buf[j] > best) {
        best = buf[j];
        best_idx = static_cast<int64_t>(base + j);
      }
    }
  };
  // Smoothing sums and the entropy term of one vector (tail path).
  auto extras1 = [&](VF t, VF e, size_t at, bool tail, size_t count, unsigned k) {
    if (kSums) {
      const auto masked = hn::Eq(t, neg_inf);
      VF wv = hn::Set(d, 1.0f);
      if (kSums == 2) wv = tail ? LoadTailZero(d, w + at, count) : hn::LoadU(d, w + at);
      const VF tz = hn::IfThenZeroElse(masked, t);
      if (kSums == 2) {
        st.AddProduct(d, wv, tz);
      } else {
        st.Add(d, tz);
      }
      sw.Add(d, hn::IfThenZeroElse(masked, wv));
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
    if (want_argmax) {
      VF k0 = t0, k1 = t1, k2 = t2, k3 = t3, km = sm;
      if constexpr (Src::kRawKey) {
        k0 = src.Raw(d, i);
        k1 = src.Raw(d, i + N);
        k2 = src.Raw(d, i + 2 * N);
        k3 = src.Raw(d, i + 3 * N);
        km = hn::Max(hn::Max(k0, k1), hn::Max(k2, k3));
      }
      if (HWY_UNLIKELY(!hn::AllFalse(d, hn::Gt(km, hn::Set(d, best))))) {
        hn::Store(k0, d, buf);
        hn::Store(k1, d, buf + N);
        hn::Store(k2, d, buf + 2 * N);
        hn::Store(k3, d, buf + 3 * N);
        find_best(i, kUnroll * N);
      }
    }
    const VF e0 = exp(d, t0), e1 = exp(d, t1), e2 = exp(d, t2), e3 = exp(d, t3);
    sum.Add4(d, e0, e1, e2, e3);
    if (kSums) {
      const VF ts[4] = {t0, t1, t2, t3};
      for (size_t j = 0; j < 4; ++j) {
        const auto masked = hn::Eq(ts[j], neg_inf);
        const VF wv = kSums == 2 ? hn::LoadU(d, w + i + j * N) : hn::Set(d, 1.0f);
        const VF tz = hn::IfThenZeroElse(masked, ts[j]);
        if (kSums == 2) {
          st.AddProduct(d, wv, tz);
        } else {
          st.Add(d, tz);
        }
        sw.Add(d, hn::IfThenZeroElse(masked, wv));
      }
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
    if (want_argmax) {
      VF key = t;
      if constexpr (Src::kRawKey) key = tail ? src.RawTail(d, i, count) : src.Raw(d, i);
      if (!hn::AllFalse(d, hn::Gt(key, hn::Set(d, best)))) {
        hn::Store(key, d, buf);
        find_best(i, count);
      }
    }
    const VF e = ExpTail(exp, d, t);
    sum.Add1(e, k);
    extras1(t, e, i, tail, count, k);
    ++k;
  };
  for (; i + N <= n; i += N) one(src.Load(d, i), N, false);
  if (i < n) one(src.LoadTail(d, i, n - i), n - i, true);

  XentScan res;
  res.ref = ref;
  res.d = carry0 + sum.Total(d);
  res.max = ReduceMax(d, vmax);
  res.argmax = best_idx;
  if (kSums) {
    res.sum_t = st.Total(d);
    res.sum_w = sw.Total(d);
  }
  if (kEntropy) res.sum_et = carry1 + ent.Total(d);
  return res;
}

XentScan XentScanImpl(const XentRow& row, const XentScanRequest& req) {
  XentScan out;
  const size_t n = static_cast<size_t>(row.n);
  WithSrc(row, [&](const auto& src) {
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

// ---- probability-target sums (float64 throughout; not the hot path) -------------
XentProbSums XentProbSumsImpl(const XentRow& row, const float* q, const float* w) {
  XentProbSums out;
  const size_t n = static_cast<size_t>(row.n);
  WithSrc(row, [&](const auto& src) {
    const DF d;
    const size_t N = hn::Lanes(d);
    F64Acc qt, qs, qm, wqt, wqs, wqm;
    const VF neg_inf = hn::Set(d, kNegInf);
    auto add = [&](VF t, VF vq, VF vw) {
      const auto masked = hn::Eq(t, neg_inf);
      const VF qf = hn::IfThenZeroElse(masked, vq);
      const VF qmask = hn::IfThenElseZero(masked, vq);
      const VF tf = hn::IfThenZeroElse(masked, t);
      qt.AddProduct(d, qf, tf);
      qs.Add(d, qf);
      qm.Add(d, qmask);
      const VF wq = hn::Mul(vw, vq);
      wqt.AddProduct(d, hn::IfThenZeroElse(masked, wq), tf);
      wqs.Add(d, hn::IfThenZeroElse(masked, wq));
      wqm.Add(d, hn::IfThenElseZero(masked, wq));
    };
    const VF one = hn::Set(d, 1.0f);
    size_t i = 0;
    for (; i + N <= n; i += N) {
      add(src.Load(d, i), hn::LoadU(d, q + i), w != nullptr ? hn::LoadU(d, w + i) : one);
    }
    if (i < n) {
      const size_t c = n - i;
      add(src.LoadTail(d, i, c), LoadTailZero(d, q + i, c),
          w != nullptr ? LoadTailZero(d, w + i, c) : one);
    }
    out.qt = qt.Total(d);
    out.q = qs.Total(d);
    out.q_masked = qm.Total(d);
    out.wqt = wqt.Total(d);
    out.wq = wqs.Total(d);
    out.wq_masked = wqm.Total(d);
  });
  return out;
}

// ---- gradient --------------------------------------------------------------------
template <bool kW, bool kQ, class Src, class Exp>
HWY_INLINE void GradT(const Src& src, size_t n, const Exp& exp, float factor, float b, float bq,
                      const float* HWY_RESTRICT w, const float* HWY_RESTRICT q, float scale,
                      float* dst) {  // dst may be exactly the logits (src.x)
  const DF d;
  const size_t N = hn::Lanes(d);
  const VF vf = hn::Set(d, factor);
  const VF vb = hn::Set(d, b);
  const VF vbq = hn::Set(d, bq);
  const VF vs = hn::Set(d, scale);
  const VF neg_inf = hn::Set(d, kNegInf);
  const ExpRef exp0 = ExpRef::Make(0.0f);
  auto f = [&](VF t, VF a, VF vw, VF vq) {
    VF sub = vb;
    if (kQ) sub = hn::MulAdd(vbq, vq, vb);
    if (kW) sub = hn::Mul(sub, vw);
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
  const VF zero = hn::Zero(d);
  size_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    VF a0, a1;
    const VF t0 = src.Load2(d, i, &a0);
    const VF t1 = src.Load2(d, i + N, &a1);
    const VF g0 = f(t0, a0, kW ? hn::LoadU(d, w + i) : one, kQ ? hn::LoadU(d, q + i) : zero);
    const VF g1 = f(t1, a1, kW ? hn::LoadU(d, w + i + N) : one,
                    kQ ? hn::LoadU(d, q + i + N) : zero);
    hn::StoreU(g0, d, dst + i);
    hn::StoreU(g1, d, dst + i + N);
  }
  for (; i + N <= n; i += N) {
    VF a;
    const VF t = src.Load2(d, i, &a);
    hn::StoreU(f(t, a, kW ? hn::LoadU(d, w + i) : one, kQ ? hn::LoadU(d, q + i) : zero), d,
               dst + i);
  }
  if (i < n) {
    const size_t c = n - i;
    VF a;
    const VF t = src.LoadTail2(d, i, c, &a);
    const VF g = f(t, a, kW ? LoadTailZero(d, w + i, c) : one,
                   kQ ? LoadTailZero(d, q + i, c) : zero);
    StoreTail(d, g, dst + i, c);
  }
}

template <bool kW, bool kQ, class Src>
HWY_INLINE void GradExp(const Src& src, size_t n, const XentGrad& g, float* dst) {
  const float shift = g.shift;
  if (std::fabs(shift) <= kRefMaxAbs) {
    // ExpRef with N = round(shift log2e); e^(N ln2 - shift) folded into the
    // factor in float64 (as ExpShiftScaleStore).
    const float nref = std::nearbyint(shift * kLog2e);
    const float f = static_cast<float>(
        g.factor * std::exp(static_cast<double>(nref) * kLn2d - static_cast<double>(shift)));
    GradT<kW, kQ>(src, n, ExpRef::Make(nref, FlushExtra(std::fabs(f))), f, g.b, g.bq, g.weight,
                  g.q, g.scale, dst);
  } else {
    const float f = static_cast<float>(g.factor);
    GradT<kW, kQ>(src, n, ExpDiff::Make(shift, FlushExtra(std::fabs(f))), f, g.b, g.bq,
                  g.weight, g.q, g.scale, dst);
  }
}

// ---- entries near the max (accuracy's exact argmax with softcap + mask) --------
int64_t XentNearMaxImpl(const XentRow& row, float threshold, int64_t* idx, int64_t cap) {
  int64_t count = 0;
  const size_t n = static_cast<size_t>(row.n);
  WithSrc(row, [&](const auto& src) {
    const DF d;
    const size_t N = hn::Lanes(d);
    const VF th = hn::Set(d, threshold);
    HWY_ALIGN float buf[kMaxLanes] = {};
    auto one = [&](VF t, size_t i, size_t lanes) {
      if (hn::AllFalse(d, hn::Ge(t, th))) return;
      hn::Store(t, d, buf);
      for (size_t k = 0; k < lanes; ++k) {
        if (buf[k] >= threshold) {
          if (count < cap) idx[count] = static_cast<int64_t>(i + k);
          ++count;
        }
      }
    };
    size_t i = 0;
    for (; i + N <= n; i += N) one(src.Load(d, i), i, N);
    if (i < n) one(src.LoadTail(d, i, n - i), i, n - i);
  });
  return count;
}

void XentGradImpl(const XentRow& row, const XentGrad& g, float* dst) {
  const size_t n = static_cast<size_t>(row.n);
  WithSrc(row, [&](const auto& src) {
    if (g.weight != nullptr) {
      if (g.q != nullptr) {
        GradExp<true, true>(src, n, g, dst);
      } else {
        GradExp<true, false>(src, n, g, dst);
      }
    } else {
      if (g.q != nullptr) {
        GradExp<false, true>(src, n, g, dst);
      } else {
        GradExp<false, false>(src, n, g, dst);
      }
    }
  });
}

}  // namespace smax::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace smax::kernels {

HWY_EXPORT(XentScanImpl);
HWY_EXPORT(XentProbSumsImpl);
HWY_EXPORT(XentGradImpl);
HWY_EXPORT(XentNearMaxImpl);

XentScan xent_scan(const XentRow& row, const XentScanRequest& req) noexcept {
  return HWY_DYNAMIC_DISPATCH(XentScanImpl)(row, req);
}
XentProbSums xent_prob_sums(const XentRow& row, const float* q, const float* weight) noexcept {
  return HWY_DYNAMIC_DISPATCH(XentProbSumsImpl)(row, q, weight);
}
void xent_grad(const XentRow& row, const XentGrad& g, float* dst) noexcept {
  HWY_DYNAMIC_DISPATCH(XentGradImpl)(row, g, dst);
}
int64_t xent_near_max(const XentRow& row, float threshold, int64_t* idx, int64_t cap) noexcept {
  return HWY_DYNAMIC_DISPATCH(XentNearMaxImpl)(row, threshold, idx, cap);
}

}  // namespace smax::kernels
#endif  // HWY_ONCE
