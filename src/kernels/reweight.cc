// src/kernels/reweight.cc: row kernels of the re-weighting normalisers (see
// kernels/reweight.h for the contracts).
//
// Two styles:
//  * f32 lanes (sigmoid, softplus, power, SA's softmax comes from the
//    library's softmax kernel): the library exp (exp-inl.h) with exact
//    arguments where the argument is a difference (TwoSum, ExpDiffV), so no
//    f32 subtraction error is amplified by the exp; log from Highway's
//    contrib/math (Log, <= 2 ulp for the arguments used here, all in
//    [~0.69, FLT_MAX]).
//  * float64 lanes (probability temperature, logit standardisation, SA's
//    r_i = (t_i - a) / (b - a) products): the input is promoted, the formula
//    is evaluated in double and rounded to f32 once. Used where an f32
//    evaluation would lose bits that the result is sensitive to:
//    p^(1/T) = exp(log(p) / T) amplifies an absolute error in log p by the
//    exponent (|log p| up to 103), (t - mu) * k overflows f32 for huge
//    logits, b - a overflows f32 for logits of both signs near FLT_MAX.
// Tails: f32 kernels use LoadTailZero / StoreTail (load-inl.h) or a padded
// stack copy; float64 kernels copy the tail through a small padded buffer.
// The padding value is chosen per input so it contributes nothing (-inf for
// logits: masked).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/reweight.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include "kernels/row-inl.h"
#include "kernels/reweight.h"

HWY_BEFORE_NAMESPACE();
namespace smax::kernels::HWY_NAMESPACE {
namespace {

// Smallest normal f32: results below it are flushed to 0 (no denormals).
constexpr float kFltMin = std::numeric_limits<float>::min();

// f32 vector of p[0, count) padded with `pad` (count <= N).
HWY_INLINE VF LoadPad(DF d, const float* HWY_RESTRICT p, size_t count, float pad) {
  HWY_ALIGN float b[kMaxLanes];
  for (size_t k = 0; k < kMaxLanes; ++k) b[k] = pad;
  std::memcpy(b, p, count * sizeof(float));
  return hn::Load(d, b);
}

// Calls f(i, count) over [0, n) in steps of N = Lanes(D) (count == N except
// for the tail). ForEachF / ForEachD: the f32 / float64 lane steps.
template <class D, class F>
HWY_INLINE void ForEachStep(size_t n, F&& f) {
  const D d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= n; i += N) f(i, N);
  if (i < n) f(i, n - i);
}
template <class F>
HWY_INLINE void ForEachF(size_t n, F&& f) {
  ForEachStep<DF>(n, f);
}

// ---- float64 lanes ------------------------------------------------------------
using D64 = hn::ScalableTag<double>;
using V64 = hn::Vec<D64>;
using DF2 = hn::Rebind<float, D64>;  // f32 with as many lanes as D64

HWY_INLINE V64 LoadD(const float* HWY_RESTRICT p, size_t count, float pad) {
  const D64 dd;
  const DF2 df;
  if (count == hn::Lanes(dd)) return hn::PromoteTo(dd, hn::LoadU(df, p));
  HWY_ALIGN float b[kMaxLanes];
  for (size_t k = 0; k < kMaxLanes; ++k) b[k] = pad;
  std::memcpy(b, p, count * sizeof(float));
  return hn::PromoteTo(dd, hn::Load(df, b));
}

// Rounds to f32 as IEEE does (kernels/demote-inl.h) and stores count lanes.
HWY_INLINE void StoreD(V64 v, float* HWY_RESTRICT p, size_t count) {
  const D64 dd;
  const DF2 df;
  const auto f = DemoteIeee(dd, v);
  if (count == hn::Lanes(dd)) {
    hn::StoreU(f, df, p);
    return;
  }
  HWY_ALIGN float b[kMaxLanes];
  hn::Store(f, df, b);
  std::memcpy(p, b, count * sizeof(float));
}

template <class F>
HWY_INLINE void ForEachD(size_t n, F&& f) {
  ForEachStep<D64>(n, f);
}

HWY_INLINE double SumD(V64 acc) {
  const D64 dd;
  return hn::GetLane(hn::SumOfLanes(dd, acc));
}

// |v| < FLT_MIN -> 0 (before demotion: no denormal f32 is stored).
HWY_INLINE V64 FlushTinyD(V64 v) {
  const D64 dd;
  return hn::IfThenZeroElse(hn::Lt(hn::Abs(v), hn::Set(dd, static_cast<double>(kFltMin))), v);
}

// R(w) = log1p(w) / w for w in [0, 1], as log(1 + w) / ((1 + w) - 1)
// (Goldberg: the rounding of 1 + w cancels), exactly 1 where 1 + w == 1
// (then R = 1 - w/2 + ... rounds to 1 within 1 ulp).
HWY_INLINE VF Log1pOverX(DF d, VF w) {
  const VF one = hn::Set(d, 1.0f);
  const VF y1 = hn::Add(w, one);
  const auto exact = hn::Eq(y1, one);
  const VF den = hn::IfThenElse(exact, one, hn::Sub(y1, one));
  return hn::IfThenElse(exact, one, hn::Div(hn::Log(d, y1), den));
}

// z = fl(lambda * t), -inf kept (lambda may be 0).
HWY_INLINE VF ScaledZ(DF d, VF t, float lambda) {
  const VF z = Opaque(hn::Mul(t, hn::Set(d, lambda)));
  return hn::IfThenElse(hn::Eq(t, hn::Set(d, kNegInf)), t, z);
}

// e^-|z| with the library exp (reference exponent 0: -|z| reduced exactly,
// below ~-86.6 and -inf flushed to 0).
HWY_INLINE VF ExpNegAbs(DF d, VF z) { return ExpRef::Make(0.0f)(d, hn::Neg(hn::Abs(z))); }

// x^e for an integer e >= 1 by binary powering (no squaring past the last
// bit, so intermediates are never smaller than the result).
template <class V>
HWY_INLINE V PowInt(V x, int e) {
  V result = x;
  bool have = false;
  V base = x;
  while (true) {
    if (e & 1) {
      result = have ? hn::Mul(result, base) : base;
      have = true;
    }
    e >>= 1;
    if (e == 0) break;
    base = hn::Mul(base, base);
  }
  return result;
}

}  // namespace

// ---- shared row statistics ----------------------------------------------------------
RowStats RowStatsImpl(const float* t, int64_t n64) {
  const DF d;
  const size_t n = static_cast<size_t>(n64);
  const VF ninf = hn::Set(d, kNegInf), pinf = hn::Set(d, kInf);
  VF vmin = pinf, vmax = ninf;
  auto nan_any = hn::Lt(vmin, vmax);  // all false
  int64_t visible = 0;
  ForEachF(n, [&](size_t i, size_t count) {
    const VF v = count == hn::Lanes(d) ? hn::LoadU(d, t + i) : LoadPad(d, t + i, count, kNegInf);
    const auto nan = hn::IsNaN(v);
    const auto vis = hn::Not(hn::Eq(v, ninf));
    visible += static_cast<int64_t>(hn::CountTrue(d, vis));
    nan_any = hn::Or(nan_any, nan);
    vmin = hn::Min(vmin, hn::IfThenElse(hn::AndNot(nan, vis), v, pinf));
    vmax = hn::Max(vmax, hn::IfThenElse(nan, ninf, v));
  });
  RowStats s;
  s.visible = visible;
  s.min = ReduceMin(d, vmin);
  s.max = ReduceMax(d, vmax);
  s.has_nan = !hn::AllFalse(d, nan_any);
  return s;
}

double VisibleSumImpl(const float* t, int64_t n) {
  const D64 dd;
  V64 acc = hn::Zero(dd);
  const V64 ninf = hn::Set(dd, -std::numeric_limits<double>::infinity());
  ForEachD(static_cast<size_t>(n), [&](size_t i, size_t count) {
    const V64 v = LoadD(t + i, count, kNegInf);
    acc = hn::Add(acc, hn::IfThenZeroElse(hn::Eq(v, ninf), v));
  });
  return SumD(acc);
}

double VisibleSqDevImpl(const float* t, int64_t n, double mu) {
  const D64 dd;
  V64 acc = hn::Zero(dd);
  const V64 ninf = hn::Set(dd, -std::numeric_limits<double>::infinity());
  const V64 vmu = hn::Set(dd, mu);
  ForEachD(static_cast<size_t>(n), [&](size_t i, size_t count) {
    const V64 v = LoadD(t + i, count, kNegInf);
    const V64 dv = hn::Sub(v, vmu);
    acc = hn::Add(acc, hn::IfThenZeroElse(hn::Eq(v, ninf), hn::Mul(dv, dv)));
  });
  return SumD(acc);
}

// ---- sigmoid ----------------------------------------------------------------------------
// z = t + b; e = e^-|z| computed as e^(t - (-b)) (z <= 0) or e^(-t - b)
// (z > 0) with the exact difference (ExpDiffV), so the rounding of t + b
// costs nothing; y = 1 / (1 + e) (z > 0) or e / (1 + e).
void SigmoidNormRowImpl(const float* t, int64_t n, float bias, float* y) {
  const DF d;
  const VF b = hn::Set(d, bias), nb = hn::Set(d, -bias), one = hn::Set(d, 1.0f);
  const VF flush = hn::Set(d, kFlushBelow);
  auto f = [&](VF v) {
    const auto pos = hn::Gt(hn::Add(v, b), hn::Zero(d));
    const VF arg = hn::IfThenElse(pos, hn::Neg(v), v);
    const VF e = ExpDiffV(d, arg, hn::IfThenElse(pos, b, nb), flush);
    const VF den = hn::Add(one, e);
    return hn::Div(hn::IfThenElse(pos, one, e), den);
  };
  ForEachF(static_cast<size_t>(n), [&](size_t i, size_t count) {
    if (count == hn::Lanes(d)) {
      hn::StoreU(f(hn::LoadU(d, t + i)), d, y + i);
    } else {
      StoreTail(d, f(LoadTailZero(d, t + i, count)), y + i, count);
    }
  });
}

// dy y (1 - y) s in float64, one rounding to f32: with a raw y (any
// value) the f32 products overflowed where the result does not (y = 1e20
// at scale 1e-30: -inf for -2.5e29; fuzz_normalizers).
void SigmoidNormBackwardRowImpl(const float* y, const float* dy, int64_t n, float scale,
                                float* dx) {
  const D64 dd;
  const V64 s = hn::Set(dd, static_cast<double>(scale)), one = hn::Set(dd, 1.0);
  ForEachD(static_cast<size_t>(n), [&](size_t i, size_t count) {
    const V64 vy = LoadD(y + i, count, 0.0f);
    const V64 vg = LoadD(dy + i, count, 0.0f);
    StoreD(hn::Mul(hn::Mul(hn::Mul(vg, vy), hn::Sub(one, vy)), s), dx + i, count);
  });
}

// ---- SA-Softmax (float64 lanes) ---------------------------------------------------------------
namespace {
struct SaLane {
  bool normalized;
  V64 a, c;
  HWY_INLINE V64 R(V64 t) const { return normalized ? hn::Mul(hn::Sub(t, a), c) : t; }
  // q = 1 + t (plain) or c + r (normalised).
  HWY_INLINE V64 Q(D64 dd, V64 t) const {
    return normalized ? hn::Add(c, R(t)) : hn::Add(hn::Set(dd, 1.0), t);
  }
};
HWY_INLINE SaLane MakeSa(const SaParams& s) {
  const D64 dd;
  return SaLane{s.normalized, hn::Set(dd, s.a), hn::Set(dd, s.c)};
}
}  // namespace

void SaForwardRowImpl(const float* t, const float* p, int64_t n, const SaParams& s, float* y) {
  const D64 dd;
  const SaLane sa = MakeSa(s);
  const V64 ninf = hn::Set(dd, -std::numeric_limits<double>::infinity());
  ForEachD(static_cast<size_t>(n), [&](size_t i, size_t count) {
    const V64 vt = LoadD(t + i, count, 0.0f);
    const V64 vp = LoadD(p + i, count, 0.0f);
    const V64 out = hn::IfThenElse(hn::Eq(vt, ninf), vp, FlushTinyD(hn::Mul(sa.R(vt), vp)));
    StoreD(out, y + i, count);
  });
}

SaDots SaDotsImpl(const float* t, const float* p, const float* g, int64_t n,
                  const SaParams& s) {
  const D64 dd;
  const SaLane sa = MakeSa(s);
  const V64 ninf = hn::Set(dd, -std::numeric_limits<double>::infinity());
  V64 gy = hn::Zero(dd), gp = hn::Zero(dd);
  ForEachD(static_cast<size_t>(n), [&](size_t i, size_t count) {
    const V64 vt = LoadD(t + i, count, kNegInf);
    const V64 vp = LoadD(p + i, count, 0.0f);
    const V64 vg = LoadD(g + i, count, 0.0f);
    const auto masked = hn::Eq(vt, ninf);
    const V64 gpv = hn::Mul(vg, vp);
    gp = hn::Add(gp, hn::IfThenZeroElse(masked, gpv));
    gy = hn::Add(gy, hn::IfThenZeroElse(masked, hn::Mul(gpv, sa.R(vt))));
  });
  return SaDots{SumD(gy), SumD(gp)};
}

void SaBackwardRowImpl(const float* t, const float* p, const float* g, int64_t n,
                       const SaParams& s, double gy, float scale, float* dx) {
  const D64 dd;
  const SaLane sa = MakeSa(s);
  const V64 ninf = hn::Set(dd, -std::numeric_limits<double>::infinity());
  const V64 vgy = hn::Set(dd, gy), vs = hn::Set(dd, scale);
  ForEachD(static_cast<size_t>(n), [&](size_t i, size_t count) {
    const V64 vt = LoadD(t + i, count, 0.0f);
    const V64 vp = LoadD(p + i, count, 0.0f);
    const V64 vg = LoadD(g + i, count, 0.0f);
    V64 v = hn::Mul(hn::Mul(vp, hn::Sub(hn::Mul(vg, sa.Q(dd, vt)), vgy)), vs);
    // Gradient through the bounds, added before the rounding to f32.
    for (int k = 0; k < 2; ++k) {
      const int64_t j = k == 0 ? s.j_min : s.j_max;
      if (j >= static_cast<int64_t>(i) && j < static_cast<int64_t>(i + count)) {
        const auto at = hn::Eq(hn::Iota(dd, static_cast<double>(i)),
                               hn::Set(dd, static_cast<double>(j)));
        v = hn::Add(v, hn::IfThenElseZero(at, hn::Set(dd, k == 0 ? s.g_min : s.g_max)));
      }
    }
    StoreD(hn::IfThenElse(hn::Eq(vt, ninf), hn::Mul(vp, hn::Zero(dd)), v), dx + i, count);
  });
}

// out_i = f(t_i) over [0, n) (the tail's padding lanes read as -inf, which f
// must map to 0), and the float64 sum of the outputs (F64Acc, padding
// included). out may be t (in place).
template <class F>
HWY_INLINE double MapStoreSum(const float* t, size_t n, float* out, const F& f) {
  const DF d;
  F64Acc sum;
  ForEachF(n, [&](size_t i, size_t count) {
    if (count == hn::Lanes(d)) {
      const VF v = f(hn::LoadU(d, t + i));
      hn::StoreU(v, d, out + i);
      sum.Add(d, v);
    } else {
      const VF v = f(LoadPad(d, t + i, count, kNegInf));
      StoreTail(d, v, out + i, count);
      sum.Add(d, v);
    }
  });
  return sum.Total(d);
}

// ---- softplus normaliser -----------------------------------------------------------------------
double SoftplusNormRowImpl(const float* t, int64_t n, float lambda, float shift, float* q) {
  const DF d;
  const ExpDiff ediff = ExpDiff::Make(shift);
  auto f = [&](VF v) {
    const VF z = ScaledZ(d, v, lambda);
    const VF w = ExpNegAbs(d, z);
    const VF r = Log1pOverX(d, w);
    const VF neg = hn::Mul(ediff(d, z), r);       // e^(z - shift) R(e^z)
    const VF pos = hn::MulAdd(w, r, z);           // z + e^-z R(e^-z)
    return hn::IfThenElse(hn::Gt(z, hn::Zero(d)), pos, neg);
  };
  return MapStoreSum(t, static_cast<size_t>(n), q, f);
}

void LogSoftplusRowImpl(const float* t, int64_t n, float lambda, float* L) {
  const DF d;
  auto f = [&](VF v) {
    const VF z = ScaledZ(d, v, lambda);
    const VF w = ExpNegAbs(d, z);
    const VF r = Log1pOverX(d, w);
    // Both logs see arguments in [~0.69, FLT_MAX]: R in (ln 2, 1],
    // z + w R > 0 for z > 0 (lanes of the other branch are discarded).
    const VF pos = hn::Log(d, hn::MulAdd(w, r, hn::Max(z, hn::Zero(d))));
    const VF neg = hn::Add(z, hn::Log(d, r));
    return hn::IfThenElse(hn::Gt(z, hn::Zero(d)), pos, neg);
  };
  ForEachF(static_cast<size_t>(n), [&](size_t i, size_t count) {
    if (count == hn::Lanes(d)) {
      hn::StoreU(f(hn::LoadU(d, t + i)), d, L + i);
    } else {
      StoreTail(d, f(LoadPad(d, t + i, count, kNegInf)), L + i, count);
    }
  });
}

// rho = sigmoid(z) / softplus(z) = 1 / ((1 + w) F), w = e^-|z|,
// F = R(w) (z <= 0) or z + w R(w) (z > 0).
void SoftplusNormBackwardRowImpl(const float* t, const float* y, const float* g, int64_t n,
                                 float lambda, float r, float coef, float* dx) {
  const DF d;
  const VF vr = hn::Set(d, r), vc = hn::Set(d, coef), one = hn::Set(d, 1.0f);
  auto f = [&](VF v, VF vy, VF vg) {
    const VF z = ScaledZ(d, v, lambda);
    const VF w = ExpNegAbs(d, z);
    const VF R = Log1pOverX(d, w);
    const VF F = hn::IfThenElse(hn::Gt(z, hn::Zero(d)), hn::MulAdd(w, R, z), R);
    const VF rho = hn::Div(one, hn::Mul(hn::Add(one, w), F));
    const VF out = hn::Mul(hn::Mul(hn::Mul(vy, rho), hn::Sub(vg, vr)), vc);
    return hn::IfThenZeroElse(hn::Eq(v, hn::Set(d, kNegInf)), out);
  };
  ForEachF(static_cast<size_t>(n), [&](size_t i, size_t count) {
    if (count == hn::Lanes(d)) {
      hn::StoreU(f(hn::LoadU(d, t + i), hn::LoadU(d, y + i), hn::LoadU(d, g + i)), d, dx + i);
    } else {
      StoreTail(d,
                f(LoadPad(d, t + i, count, kNegInf), LoadTailZero(d, y + i, count),
                  LoadTailZero(d, g + i, count)),
                dx + i, count);
    }
  });
}

// ---- Power-Softmax ---------------------------------------------------------------------------
double PowerRowImpl(const float* t, int64_t n, int p, float M, float* y) {
  const DF d;
  const VF vm = hn::Set(d, M), tiny = hn::Set(d, kFltMin), ninf = hn::Set(d, kNegInf);
  auto f = [&](VF v) {
    const VF w = PowInt(hn::Div(v, vm), p);
    const auto zero = hn::Or(hn::Eq(v, ninf), hn::Lt(hn::Abs(w), tiny));
    return hn::IfThenZeroElse(zero, w);
  };
  return MapStoreSum(t, static_cast<size_t>(n), y, f);
}

// float64 lanes: coef = s p / (M S) overflows f32 for tiny M (denormal
// rows) although the gradient of most entries does not.
void PowerBackwardRowImpl(const float* t, const float* g, int64_t n, int p, double M, double r,
                          double coef, float* dx) {
  const D64 dd;
  const V64 vm = hn::Set(dd, M), vr = hn::Set(dd, r), vc = hn::Set(dd, coef);
  const V64 ninf = hn::Set(dd, -std::numeric_limits<double>::infinity());
  ForEachD(static_cast<size_t>(n), [&](size_t i, size_t count) {
    const V64 vt = LoadD(t + i, count, 0.0f);
    const V64 vg = LoadD(g + i, count, 0.0f);
    const V64 w = PowInt(hn::Div(vt, vm), p - 1);
    const V64 out = hn::Mul(hn::Mul(w, hn::Sub(vg, vr)), vc);
    StoreD(hn::IfThenZeroElse(hn::Eq(vt, ninf), out), dx + i, count);
  });
}

// ---- probability temperature (float64 lanes) -------------------------------------------------------
double ProbPowRowImpl(const float* t, int64_t n, double a, double inv_m, float* y) {
  const D64 dd;
  const DF2 df;
  V64 acc = hn::Zero(dd);
  const V64 va = hn::Set(dd, a), vinv = hn::Set(dd, inv_m);
  ForEachD(static_cast<size_t>(n), [&](size_t i, size_t count) {
    const V64 vt = LoadD(t + i, count, 0.0f);
    const auto zero = hn::Not(hn::Gt(vt, hn::Zero(dd)));  // 0, -inf (masked), padding
    const V64 w = hn::IfThenElse(zero, hn::Set(dd, 1.0), hn::Mul(vt, vinv));
    const V64 v = FlushTinyD(hn::Exp(dd, hn::Mul(va, hn::Log(dd, w))));
    const V64 out = hn::IfThenZeroElse(zero, v);
    StoreD(out, y + i, count);
    acc = hn::Add(acc, hn::PromoteTo(dd, hn::DemoteTo(df, out)));  // sum of the stored values
  });
  return SumD(acc);
}

void ProbPowBackwardRowImpl(const float* t, const float* g, int64_t n, double a, double inv_m,
                            double r, double coef, float* dx) {
  const D64 dd;
  const double am1 = a - 1.0;
  const double at_zero =
      am1 > 0.0 ? 0.0 : (am1 == 0.0 ? 1.0 : std::numeric_limits<double>::infinity());
  const V64 vam1 = hn::Set(dd, am1), vinv = hn::Set(dd, inv_m), vr = hn::Set(dd, r);
  const V64 vc = hn::Set(dd, coef), v0 = hn::Set(dd, at_zero);
  const V64 ninf = hn::Set(dd, -std::numeric_limits<double>::infinity());
  ForEachD(static_cast<size_t>(n), [&](size_t i, size_t count) {
    const V64 vt = LoadD(t + i, count, 0.0f);
    const V64 vg = LoadD(g + i, count, 0.0f);
    const auto pos = hn::Gt(vt, hn::Zero(dd));
    const V64 w = hn::IfThenElse(pos, hn::Mul(vt, vinv), hn::Set(dd, 1.0));
    // (a - 1) log w <= 700 keeps Highway's double exp in range; larger
    // gradients overflow f32 anyway.
    const V64 e = hn::Min(hn::Mul(vam1, hn::Log(dd, w)), hn::Set(dd, 700.0));
    const V64 pw = hn::IfThenElse(pos, hn::Exp(dd, e), v0);
    const V64 out = hn::Mul(hn::Mul(pw, hn::Sub(vg, vr)), vc);
    StoreD(hn::IfThenZeroElse(hn::Eq(vt, ninf), out), dx + i, count);
  });
}

// ---- logit standardisation (float64 lanes) ------------------------------------------------------
void StandardizeRowImpl(const float* t, int64_t n, double mu, double k, float* v) {
  const D64 dd;
  const V64 vmu = hn::Set(dd, mu), vk = hn::Set(dd, k);
  const V64 ninf = hn::Set(dd, -std::numeric_limits<double>::infinity());
  ForEachD(static_cast<size_t>(n), [&](size_t i, size_t count) {
    const V64 vt = LoadD(t + i, count, 0.0f);
    const V64 out = hn::IfThenElse(hn::Eq(vt, ninf), vt, hn::Mul(hn::Sub(vt, vmu), vk));
    StoreD(out, v + i, count);
  });
}

double StandardizeHdImpl(const float* t, const float* y, const float* g, int64_t n, double mu,
                         double r) {
  const D64 dd;
  V64 acc = hn::Zero(dd);
  const V64 vmu = hn::Set(dd, mu), vr = hn::Set(dd, r);
  const V64 ninf = hn::Set(dd, -std::numeric_limits<double>::infinity());
  ForEachD(static_cast<size_t>(n), [&](size_t i, size_t count) {
    const V64 vt = LoadD(t + i, count, kNegInf);
    const V64 vy = LoadD(y + i, count, 0.0f);
    const V64 vg = LoadD(g + i, count, 0.0f);
    const V64 h = hn::Mul(vy, hn::Sub(vg, vr));
    acc = hn::Add(acc, hn::IfThenZeroElse(hn::Eq(vt, ninf), hn::Mul(h, hn::Sub(vt, vmu))));
  });
  return SumD(acc);
}

void StandardizeBackwardRowImpl(const float* t, const float* y, const float* g, int64_t n,
                                double mu, double r, double C, double coef, float* dx) {
  const D64 dd;
  const V64 vmu = hn::Set(dd, mu), vr = hn::Set(dd, r), vC = hn::Set(dd, C);
  const V64 vc = hn::Set(dd, coef);
  const V64 ninf = hn::Set(dd, -std::numeric_limits<double>::infinity());
  ForEachD(static_cast<size_t>(n), [&](size_t i, size_t count) {
    const V64 vt = LoadD(t + i, count, 0.0f);
    const V64 vy = LoadD(y + i, count, 0.0f);
    const V64 vg = LoadD(g + i, count, 0.0f);
    const V64 h = hn::Mul(vy, hn::Sub(vg, vr));
    const V64 out = hn::Mul(hn::Sub(h, hn::Mul(hn::Sub(vt, vmu), vC)), vc);
    StoreD(hn::IfThenZeroElse(hn::Eq(vt, ninf), out), dx + i, count);
  });
}

}  // namespace smax::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace smax::kernels {

HWY_EXPORT(RowStatsImpl);
HWY_EXPORT(VisibleSumImpl);
HWY_EXPORT(VisibleSqDevImpl);
HWY_EXPORT(SigmoidNormRowImpl);
HWY_EXPORT(SigmoidNormBackwardRowImpl);
HWY_EXPORT(SaForwardRowImpl);
HWY_EXPORT(SaDotsImpl);
HWY_EXPORT(SaBackwardRowImpl);
HWY_EXPORT(SoftplusNormRowImpl);
HWY_EXPORT(LogSoftplusRowImpl);
HWY_EXPORT(SoftplusNormBackwardRowImpl);
HWY_EXPORT(PowerRowImpl);
HWY_EXPORT(PowerBackwardRowImpl);
HWY_EXPORT(ProbPowRowImpl);
HWY_EXPORT(ProbPowBackwardRowImpl);
HWY_EXPORT(StandardizeRowImpl);
HWY_EXPORT(StandardizeHdImpl);
HWY_EXPORT(StandardizeBackwardRowImpl);

RowStats reweight_row_stats(const float* t, int64_t n) noexcept {
  return HWY_DYNAMIC_DISPATCH(RowStatsImpl)(t, n);
}
double reweight_visible_sum(const float* t, int64_t n) noexcept {
  return HWY_DYNAMIC_DISPATCH(VisibleSumImpl)(t, n);
}
double reweight_visible_sq_dev(const float* t, int64_t n, double mu) noexcept {
  return HWY_DYNAMIC_DISPATCH(VisibleSqDevImpl)(t, n, mu);
}
void sigmoid_norm_row(const float* t, int64_t n, float bias, float* y) noexcept {
  HWY_DYNAMIC_DISPATCH(SigmoidNormRowImpl)(t, n, bias, y);
}
void sigmoid_norm_backward_row(const float* y, const float* dy, int64_t n, float scale,
                               float* dx) noexcept {
  HWY_DYNAMIC_DISPATCH(SigmoidNormBackwardRowImpl)(y, dy, n, scale, dx);
}
void sa_forward_row(const float* t, const float* p, int64_t n, const SaParams& s,
                    float* y) noexcept {
  HWY_DYNAMIC_DISPATCH(SaForwardRowImpl)(t, p, n, s, y);
}
SaDots sa_dots(const float* t, const float* p, const float* g, int64_t n,
               const SaParams& s) noexcept {
  return HWY_DYNAMIC_DISPATCH(SaDotsImpl)(t, p, g, n, s);
}
void sa_backward_row(const float* t, const float* p, const float* g, int64_t n,
                     const SaParams& s, double gy, float scale, float* dx) noexcept {
  HWY_DYNAMIC_DISPATCH(SaBackwardRowImpl)(t, p, g, n, s, gy, scale, dx);
}
double softplus_norm_row(const float* t, int64_t n, float lambda, float shift,
                         float* q) noexcept {
  return HWY_DYNAMIC_DISPATCH(SoftplusNormRowImpl)(t, n, lambda, shift, q);
}
void log_softplus_row(const float* t, int64_t n, float lambda, float* L) noexcept {
  HWY_DYNAMIC_DISPATCH(LogSoftplusRowImpl)(t, n, lambda, L);
}
void softplus_norm_backward_row(const float* t, const float* y, const float* g, int64_t n,
                                float lambda, float r, float coef, float* dx) noexcept {
  HWY_DYNAMIC_DISPATCH(SoftplusNormBackwardRowImpl)(t, y, g, n, lambda, r, coef, dx);
}
double power_row(const float* t, int64_t n, int p, float M, float* y) noexcept {
  return HWY_DYNAMIC_DISPATCH(PowerRowImpl)(t, n, p, M, y);
}
void power_backward_row(const float* t, const float* g, int64_t n, int p, double M, double r,
                        double coef, float* dx) noexcept {
  HWY_DYNAMIC_DISPATCH(PowerBackwardRowImpl)(t, g, n, p, M, r, coef, dx);
}
double prob_pow_row(const float* t, int64_t n, double a, double inv_m, float* y) noexcept {
  return HWY_DYNAMIC_DISPATCH(ProbPowRowImpl)(t, n, a, inv_m, y);
}
void prob_pow_backward_row(const float* t, const float* g, int64_t n, double a, double inv_m,
                           double r, double coef, float* dx) noexcept {
  HWY_DYNAMIC_DISPATCH(ProbPowBackwardRowImpl)(t, g, n, a, inv_m, r, coef, dx);
}
void standardize_row(const float* t, int64_t n, double mu, double k, float* v) noexcept {
  HWY_DYNAMIC_DISPATCH(StandardizeRowImpl)(t, n, mu, k, v);
}
double standardize_hd(const float* t, const float* y, const float* g, int64_t n, double mu,
                      double r) noexcept {
  return HWY_DYNAMIC_DISPATCH(StandardizeHdImpl)(t, y, g, n, mu, r);
}
void standardize_backward_row(const float* t, const float* y, const float* g, int64_t n,
                              double mu, double r, double C, double coef, float* dx) noexcept {
  HWY_DYNAMIC_DISPATCH(StandardizeBackwardRowImpl)(t, y, g, n, mu, r, C, coef, dx);
}

}  // namespace smax::kernels
#endif  // HWY_ONCE
