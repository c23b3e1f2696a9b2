// src/kernels/linear_cross_entropy.cc: the row kernels of the fused linear
// cross-entropy (kernels/linear_cross_entropy.h), run on each row of a GEMM
// tile of logits while it is still in cache.
//
// Logits: lce_logits forms u = fl(fl(z + bias) * s) in place (an Add, then a
// Mul: nothing to contract into an FMA).
//
// Scan: scan-inl.h's OnlineScanWith (the online (Milakov & Gimelshein)
// (max, sum), exact t - ref through ExpDiff, blocked f32 sums widened to
// float64) with a visitor that adds the label-smoothing sums (sum w_j t_j,
// sum w_j over unmasked j, blocked f32) and the entropy term
// sum e_j (t_j - ref) (carried across rebases, xent-inl.h's CarriedSum); the
// first argmax is a second, compare-only read. The op layer merges the
// per-chunk results of a row in float64 the same way as a rebase.
//
// Row sources (softcap) and the gradient are cross_entropy.cc's
// (xent-inl.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/linear_cross_entropy.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include "kernels/row-inl.h"
#include "kernels/linear_cross_entropy.h"

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

// ---- scan ---------------------------------------------------------------------------
// The OnlineScanWith visitor of the row scan: CarriedSum (the (max, sum)
// and the entropy term) and the smoothing sums (blocked f32).
template <int kSums, bool kEntropy>
struct LceVisitor {
  const float* HWY_RESTRICT w;
  CarriedSum<kEntropy> cs;
  BlockSum st, sw;
  LceVisitor(DF d, const float* HWY_RESTRICT weight) : w(weight), cs(d), st(d), sw(d) {}

  HWY_INLINE float Rebase(DF d, VF step_max, bool /*first*/) { return cs.Rebase(d, step_max); }
  // Smoothing terms of one vector: w t and w over unmasked lanes (wv: the
  // weights, or 1).
  HWY_INLINE void Terms(DF d, VF t, VF wv, VF* tv, VF* wk) const {
    const auto masked = hn::Eq(t, hn::Set(d, kNegInf));
    *tv = hn::IfThenZeroElse(masked, kSums == 2 ? hn::Mul(wv, t) : t);
    *wk = hn::IfThenZeroElse(masked, wv);
  }
  HWY_INLINE void Step4(DF d, size_t i, VF t0, VF t1, VF t2, VF t3, VF /*step_max*/) {
    const size_t N = hn::Lanes(d);
    VF e[4];
    cs.Add4(d, t0, t1, t2, t3, e);
    if (kSums) {
      VF tv[4], wk[4];
      const VF ts[4] = {t0, t1, t2, t3};
      for (size_t j = 0; j < 4; ++j) {
        Terms(d, ts[j], kSums == 2 ? hn::LoadU(d, w + i + j * N) : hn::Set(d, 1.0f), &tv[j],
              &wk[j]);
      }
      st.Add4(d, tv[0], tv[1], tv[2], tv[3]);
      sw.Add4(d, wk[0], wk[1], wk[2], wk[3]);
    }
  }
  HWY_INLINE void Step1(DF d, size_t i, VF t, size_t count, unsigned k) {
    cs.Add1(d, t, k);
    if (kSums) {
      VF wv = hn::Set(d, 1.0f);
      if (kSums == 2) {
        wv = count < hn::Lanes(d) ? LoadTailZero(d, w + i, count) : hn::LoadU(d, w + i);
      }
      VF tv, wk;
      Terms(d, t, wv, &tv, &wk);
      st.Add1(tv, k);
      sw.Add1(wk, k);
    }
  }
};

template <int kSums, bool kEntropy, class Src>
HWY_INLINE LceScan ScanT(const Src& src, size_t n, const float* HWY_RESTRICT w,
                         bool want_argmax) {
  const DF d;
  const size_t N = hn::Lanes(d);
  LceVisitor<kSums, kEntropy> v(d, w);
  const float max = OnlineScanWith(src, n, v);

  LceScan res;
  res.ref = v.cs.r.ref;
  res.d = v.cs.D(d);
  res.max = max;
  if (kSums) {
    res.sum_t = v.st.Total(d);
    res.sum_w = v.sw.Total(d);
  }
  if (kEntropy) res.sum_et = v.cs.SumEt(d);
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
  WithSrc(u, nullptr, req.softcap, [&](const auto& src) {
    WithScanOptions(req.sums, req.weight, req.entropy, [&](auto sums, auto entropy) {
      out = ScanT<decltype(sums)::value, decltype(entropy)::value>(src, n, req.weight, req.argmax);
    });
  });
  return out;
}

// ---- gradient -----------------------------------------------------------------------
void LceGradImpl(float* u, int64_t n64, const LceGrad& g) {
  const size_t n = static_cast<size_t>(n64);
  if (n == 0) return;
  WithSrc(u, nullptr, g.softcap, [&](const auto& src) {
    if (g.weight != nullptr) {
      GradExp<true, false, false>(src, n, g.shift, g.factor, g.b, 0.0f, g.weight, nullptr, g.scale, u);
    } else {
      GradExp<false, false, false>(src, n, g.shift, g.factor, g.b, 0.0f, nullptr, nullptr, g.scale, u);
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
