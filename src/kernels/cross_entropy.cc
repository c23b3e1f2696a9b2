// src/kernels/cross_entropy.cc: the fused cross-entropy row kernels
// (kernels/cross_entropy.h): the one-read forward scan, the sums of a
// probability-target row and the one-write gradient.
//
// Scan: scan-inl.h's OnlineScanWith (the online (Milakov & Gimelshein)
// (max, sum): same reference / slack / rebase scheme as OnlineScan, exact
// t - ref through ExpDiff, blocked f32 sums widened to float64) with a
// visitor that fuses what the loss needs into the same read: sum_j w_j t_j
// and sum_j w_j over unmasked j (label smoothing), sum_j e_j (t_j - ref)
// (entropy: H = log d - S1 / d; carried across rebases, xent-inl.h's
// CarriedSum) and the first argmax. Argmax: one compare of the step max per
// 4 vectors; only a step that holds a new maximum is scanned element by
// element.
//
// Row sources (softcap), the carried sums and the gradient are shared with
// the linear cross-entropy (xent-inl.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cross_entropy.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include "kernels/cross_entropy.h"
#include "kernels/row-inl.h"

HWY_BEFORE_NAMESPACE();
namespace smax::kernels::HWY_NAMESPACE {

template <class F>
HWY_INLINE void WithSrc(const XentRow& row, F&& f) {
  WithSrc(row.x, row.mask, row.softcap, f);
}

// ---- scan ------------------------------------------------------------------------
// The OnlineScanWith visitor of the loss scan: CarriedSum (the (max, sum)
// and the entropy term), the smoothing sums and the first argmax.
template <int kSums, bool kEntropy, class Src>
struct XentVisitor {
  const Src& src;
  const float* HWY_RESTRICT w;
  bool want_argmax;
  CarriedSum<kEntropy> cs;
  F64Acc st, sw;  // smoothing sums in float64 (|t| up to FLT_MAX, w * t exact)
  float best = kNegInf;
  int64_t best_idx = 0;
  // Element-wise search of `count` lanes (vectors stored in buf) for values
  // above `best`, in index order (first occurrence of the maximum).
  HWY_ALIGN float buf[kUnroll * kMaxLanes] = {};

  XentVisitor(DF d, const Src& s, const float* HWY_RESTRICT weight, bool argmax)
      : src(s), w(weight), want_argmax(argmax), cs(d) {}

  HWY_INLINE float Rebase(DF d, VF step_max, bool /*first*/) { return cs.Rebase(d, step_max); }
  HWY_INLINE void FindBest(size_t base, size_t count) {
    for (size_t j = 0; j < count; ++j) {
      if (buf[j] > best) {
        best = buf[j];
        best_idx = static_cast<int64_t>(base + j);
      }
    }
  }
  // Smoothing sums of one vector (wv: its weights, or 1).
  HWY_INLINE void AddSums(DF d, VF t, VF wv) {
    const auto masked = hn::Eq(t, hn::Set(d, kNegInf));
    const VF tz = hn::IfThenZeroElse(masked, t);
    if (kSums == 2) {
      st.AddProduct(d, wv, tz);
    } else {
      st.Add(d, tz);
    }
    sw.Add(d, hn::IfThenZeroElse(masked, wv));
  }
  HWY_INLINE void Step4(DF d, size_t i, VF t0, VF t1, VF t2, VF t3, VF sm) {
    const size_t N = hn::Lanes(d);
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
        FindBest(i, kUnroll * N);
      }
    }
    VF e[4];
    cs.Add4(d, t0, t1, t2, t3, e);
    if (kSums) {
      const VF ts[4] = {t0, t1, t2, t3};
      for (size_t j = 0; j < 4; ++j) {
        AddSums(d, ts[j], kSums == 2 ? hn::LoadU(d, w + i + j * N) : hn::Set(d, 1.0f));
      }
    }
  }
  HWY_INLINE void Step1(DF d, size_t i, VF t, size_t count, unsigned k) {
    const bool tail = count < hn::Lanes(d);
    if (want_argmax) {
      VF key = t;
      if constexpr (Src::kRawKey) key = tail ? src.RawTail(d, i, count) : src.Raw(d, i);
      if (!hn::AllFalse(d, hn::Gt(key, hn::Set(d, best)))) {
        hn::Store(key, d, buf);
        FindBest(i, count);
      }
    }
    cs.Add1(d, t, k);
    if (kSums) {
      VF wv = hn::Set(d, 1.0f);
      if (kSums == 2) wv = tail ? LoadTailZero(d, w + i, count) : hn::LoadU(d, w + i);
      AddSums(d, t, wv);
    }
  }
};

template <int kSums, bool kEntropy, class Src>
HWY_INLINE XentScan ScanT(const Src& src, size_t n, const float* HWY_RESTRICT w,
                          bool want_argmax) {
  const DF d;
  XentVisitor<kSums, kEntropy, Src> v(d, src, w, want_argmax);
  XentScan res;
  res.max = OnlineScanWith(src, n, v);
  res.ref = v.cs.r.ref;
  res.d = v.cs.D(d);
  res.argmax = v.best_idx;
  if (kSums) {
    res.sum_t = v.st.Total(d);
    res.sum_w = v.sw.Total(d);
  }
  if (kEntropy) res.sum_et = v.cs.SumEt(d);
  return res;
}

XentScan XentScanImpl(const XentRow& row, const XentScanRequest& req) {
  XentScan out;
  const size_t n = static_cast<size_t>(row.n);
  WithSrc(row, [&](const auto& src) {
    WithScanOptions(req.sums, req.weight, req.entropy, [&](auto sums, auto entropy) {
      out = ScanT<decltype(sums)::value, decltype(entropy)::value>(src, n, req.weight, req.argmax);
    });
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

// The instantiation of GradExp for the row's options: class weights (kW),
// probability targets (kQ), streaming stores (kStream: asked by the op,
// ops/losses/cross_entropy.cc, and the row long enough for the aligned peel).
template <bool kW, bool kQ, class Src>
HWY_INLINE void GradFor(const Src& src, size_t n, const XentGrad& g, bool stream, float* dst) {
  if (stream) {
    GradExp<kW, kQ, true>(src, n, g.shift, g.factor, g.b, g.bq, g.weight, g.q, g.scale, dst);
  } else {
    GradExp<kW, kQ, false>(src, n, g.shift, g.factor, g.b, g.bq, g.weight, g.q, g.scale, dst);
  }
}

void XentGradImpl(const XentRow& row, const XentGrad& g, float* dst) {
  const size_t n = static_cast<size_t>(row.n);
  const bool stream = g.stream && StreamAligned(dst, n);
  WithSrc(row, [&](const auto& src) {
    if (g.weight != nullptr) {
      if (g.q != nullptr) {
        GradFor<true, true>(src, n, g, stream, dst);
      } else {
        GradFor<true, false>(src, n, g, stream, dst);
      }
    } else {
      if (g.q != nullptr) {
        GradFor<false, true>(src, n, g, stream, dst);
      } else {
        GradFor<false, false>(src, n, g, stream, dst);
      }
    }
  });
  // Streaming stores are weakly ordered: fence them before the caller reads dst.
  if (stream) hwy::FlushStream();
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
