// src/kernels/attention.cc: row kernels of fused attention (kernels/attention.h).
//
// * Logits: t = fl(s * scale), then cap * tanh(t / cap) (Highway's contrib
//   Tanh, a few ulp), then + fl(-slope * |i - j|) (ALiBi; |i - j| is exact in
//   f32 below 2^24), then + the additive mask, then -inf where the bool mask is
//   0 or j >= limit (causal). Multiplies and adds are separate roundings (the
//   library builds with -ffp-contract=off), like the reference's f32 logits.
// * Online step (Milakov & Gimelshein): M = max(m_old, max t); p = e^(t - M)
//   with the exact difference (ExpDiff: TwoSum + the library exp, -inf and
//   t - M < ~-87 flush to exact 0); the block sum is widened to float64 per
//   vector (F64Acc), so d never loses bits to the block length. NaN / +inf
//   logits set `bad` (the op turns the row into NaN; the max ignores NaN).
//   The logit transform runs in the step's first pass (LogitsPass).
// Tails run the same vector code on a zero-padded stack copy, so every
// element is computed by the same instruction sequence whatever n is.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/attention.h"
#include "kernels/row-inl.h"

HWY_BEFORE_NAMESPACE();
namespace smax::kernels::HWY_NAMESPACE {

HWY_INLINE VF LogitsVec(DF d, VF s, size_t j, const AttentionLogits& p, const float* add,
                        const uint8_t* keep, size_t count) {
  const DI di;
  VF t = hn::Mul(s, hn::Set(d, p.scale));
  if (p.softcap > 0.0f) {
    const VF cap = hn::Set(d, p.softcap);
    t = hn::Mul(cap, hn::CallTanh(d, hn::Div(t, cap)));
  }
  if (p.alibi_slope != 0.0f) {
    const VF jj = hn::ConvertTo(d, hn::Iota(di, static_cast<int32_t>(j)));
    const VF dist = hn::Abs(hn::Sub(hn::Set(d, p.alibi_i_minus_j0), jj));
    t = hn::Add(t, hn::Neg(hn::Mul(hn::Set(d, p.alibi_slope), dist)));
  }
  if (add != nullptr) t = hn::Add(t, hn::LoadU(d, add));
  if (keep != nullptr) {
    const hn::Rebind<uint8_t, DF> d8;
    const auto k32 = hn::PromoteTo(di, hn::LoadU(d8, keep));
    t = hn::IfThenElse(hn::RebindMask(d, hn::Eq(k32, hn::Zero(di))), hn::Set(d, kNegInf), t);
  }
  if (p.limit >= 0) {
    const VF jj = hn::ConvertTo(d, hn::Iota(di, static_cast<int32_t>(j)));
    const VF lim = hn::Set(d, static_cast<float>(std::min<int64_t>(p.limit, int64_t{1} << 24)));
    t = hn::IfThenElse(hn::Ge(jj, lim), hn::Set(d, kNegInf), t);
  }
  (void)count;
  return t;
}

// One pass of the logit transform over s[0, n) in place: each vector of t
// is stored and handed to on_vec (the tail's lanes past n as -inf). The
// scale-and-causal-limit case (the common one) needs no select below the
// limit.
template <class OnVec>
HWY_INLINE void LogitsPass(DF d, float* s, size_t n, const AttentionLogits& p, OnVec&& on_vec) {
  const size_t N = hn::Lanes(d);
  size_t j = 0;
  if (p.softcap <= 0.0f && p.alibi_slope == 0.0f && p.add == nullptr && p.keep == nullptr) {
    const VF scale = hn::Set(d, p.scale);
    const size_t below = p.limit < 0 ? n : std::min(n, static_cast<size_t>(p.limit));
    for (; j + N <= below; j += N) {
      const VF t = hn::Mul(hn::LoadU(d, s + j), scale);
      hn::StoreU(t, d, s + j);
      on_vec(t);
    }
  }
  for (; j + N <= n; j += N) {
    const VF t = LogitsVec(d, hn::LoadU(d, s + j), j, p, p.add ? p.add + j : nullptr,
                           p.keep ? p.keep + j : nullptr, N);
    hn::StoreU(t, d, s + j);
    on_vec(t);
  }
  if (j < n) {
    const size_t c = n - j;
    HWY_ALIGN float sb[kMaxLanes] = {};
    HWY_ALIGN float ab[kMaxLanes] = {};
    HWY_ALIGN uint8_t kb[kMaxLanes] = {};
    std::memcpy(sb, s + j, c * sizeof(float));
    if (p.add) std::memcpy(ab, p.add + j, c * sizeof(float));
    if (p.keep) std::memcpy(kb, p.keep + j, c);
    const VF t = LogitsVec(d, hn::Load(d, sb), j, p, p.add ? ab : nullptr,
                           p.keep ? kb : nullptr, c);
    hn::Store(t, d, sb);
    std::memcpy(s + j, sb, c * sizeof(float));
    on_vec(hn::IfThenElse(hn::FirstN(d, c), t, hn::Set(d, kNegInf)));
  }
}

void AttentionLogitsRowImpl(float* s, int64_t n, const AttentionLogits& p_in) {
  // A local copy: the stores to s could alias the caller's struct, which
  // would make the compiler re-read (and re-test) every field per vector.
  const AttentionLogits p = p_in;
  LogitsPass(DF(), s, static_cast<size_t>(n), p, [](VF) {});
}

// Pass 1 of an online step, one vector: NaN lanes count as -inf in the max
// and set bad, as does +inf.
HWY_INLINE void MaxBad(DF d, VF v, VF& mx, hn::Mask<DF>& bad) {
  const auto nan = hn::IsNaN(v);
  bad = hn::Or(bad, hn::Or(nan, hn::Eq(v, hn::Set(d, kInf))));
  mx = hn::Max(mx, hn::IfThenElse(nan, hn::Set(d, kNegInf), v));
}

// Pass 2 of an online step over t[0, n) (logits -> p in place), given the
// block's max bm and bad flag from pass 1.
OnlineStep OnlineFinish(DF d, float* t, size_t n, float m_old, float bm, bool is_bad) {
  const size_t N = hn::Lanes(d);
  HWY_ALIGN float tb[kMaxLanes];
  size_t j = 0;
  OnlineStep r;
  r.bad = is_bad;
  const float M = bm > m_old ? bm : m_old;
  r.m = M;
  r.block_max = bm;
  if (M == kNegInf) {
    for (size_t k = 0; k < n; ++k) t[k] = 0.0f;
    r.alpha = 1.0f;
    r.sum = 0.0;
    return r;
  }
  r.alpha = m_old == kNegInf ? 1.0f
                             : static_cast<float>(std::exp(static_cast<double>(m_old) -
                                                           static_cast<double>(M)));
  const ExpDiff e = ExpDiff::Make(M);
  // One accumulator, one vector per step: with two (a 2x unrolled loop)
  // the exp's constants and the f64 accumulators outgrow AVX2's 16
  // registers and the accumulators round-trip through the stack.
  F64Acc acc;
  j = 0;
  for (; j + N <= n; j += N) {
    const VF p0 = e(d, hn::LoadU(d, t + j));
    hn::StoreU(p0, d, t + j);
    acc.Add(d, p0);
  }
  if (j < n) {
    const size_t cc = n - j;
    for (size_t k = 0; k < N; ++k) tb[k] = kNegInf;
    std::memcpy(tb, t + j, cc * sizeof(float));
    const VF p0 = e(d, hn::Load(d, tb));
    hn::Store(p0, d, tb);
    std::memcpy(t + j, tb, cc * sizeof(float));
    acc.Add(d, p0);
  }
  r.sum = acc.Total(d);
  return r;
}

OnlineStep AttentionLogitsOnlineStepImpl(float* s, int64_t n, const AttentionLogits& p_in,
                                         float m_old) {
  const DF d;
  const AttentionLogits p = p_in;  // see AttentionLogitsRowImpl
  // Pass 1 with the logit transform (the same vector ops as
  // attention_logits_row, so the same t): t stored, max and bad.
  VF mx = hn::Set(d, kNegInf);
  auto bad = hn::FirstN(d, 0);
  LogitsPass(d, s, static_cast<size_t>(n), p, [&](VF t) { MaxBad(d, t, mx, bad); });
  return OnlineFinish(d, s, static_cast<size_t>(n), m_old, ReduceMax(d, mx),
                      !hn::AllFalse(d, bad));
}

void AttentionScaleRowImpl(float* o, int64_t n_, float a) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const size_t n = static_cast<size_t>(n_);
  const VF va = hn::Set(d, a);
  size_t j = 0;
  for (; j + N <= n; j += N) hn::StoreU(hn::Mul(hn::LoadU(d, o + j), va), d, o + j);
  for (; j < n; ++j) o[j] *= a;  // same single rounding as the vector multiply
}

void AttentionExpShiftRowImpl(float* t, int64_t n_, float lse) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const size_t n = static_cast<size_t>(n_);
  const ExpDiff e = ExpDiff::Make(lse);
  size_t j = 0;
  for (; j + N <= n; j += N) hn::StoreU(e(d, hn::LoadU(d, t + j)), d, t + j);
  if (j < n) {
    const size_t c = n - j;
    HWY_ALIGN float tb[kMaxLanes];
    for (size_t k = 0; k < N; ++k) tb[k] = kNegInf;
    std::memcpy(tb, t + j, c * sizeof(float));
    hn::Store(e(d, hn::Load(d, tb)), d, tb);
    std::memcpy(t + j, tb, c * sizeof(float));
  }
}

void AttentionSoftmaxGradRowImpl(const float* p, float* dp, int64_t n_, float delta) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const size_t n = static_cast<size_t>(n_);
  const VF vd = hn::Set(d, delta);
  size_t j = 0;
  for (; j + N <= n; j += N) {
    hn::StoreU(hn::Mul(hn::LoadU(d, p + j), hn::Sub(hn::LoadU(d, dp + j), vd)), d, dp + j);
  }
  for (; j < n; ++j) dp[j] = p[j] * (dp[j] - delta);  // the same two roundings
}

void AttentionSoftcapGradRowImpl(const float* s, float* dt, int64_t n_, float scale,
                                 float cap) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const size_t n = static_cast<size_t>(n_);
  const VF vs = hn::Set(d, scale), vc = hn::Set(d, cap), one = hn::Set(d, 1.0f);
  const VF zero = hn::Zero(d);
  // dt = 0 (a masked entry) stays exactly 0 even where s is NaN (a NaN score
  // under the mask) instead of 0 * NaN; a NaN dt stays NaN (Eq is false for
  // NaN, so IfThenZeroElse keeps the product).
  auto f = [&](VF sv, VF g) {
    const VF th = hn::CallTanh(d, hn::Div(hn::Mul(sv, vs), vc));
    return hn::IfThenZeroElse(hn::Eq(g, zero),
                              hn::Mul(g, hn::Mul(hn::Sub(one, th), hn::Add(one, th))));
  };
  size_t j = 0;
  for (; j + N <= n; j += N) {
    hn::StoreU(f(hn::LoadU(d, s + j), hn::LoadU(d, dt + j)), d, dt + j);
  }
  if (j < n) {
    const size_t c = n - j;
    HWY_ALIGN float sb[kMaxLanes] = {};
    HWY_ALIGN float gb[kMaxLanes] = {};
    std::memcpy(sb, s + j, c * sizeof(float));
    std::memcpy(gb, dt + j, c * sizeof(float));
    hn::Store(f(hn::Load(d, sb), hn::Load(d, gb)), d, gb);
    std::memcpy(dt + j, gb, c * sizeof(float));
  }
}

// sigmoid(g) from t = e^-|g| (no overflow: t <= 1).
HWY_INLINE VF SigmoidVec(DF d, VF g) {
  const VF one = hn::Set(d, 1.0f);
  const VF t = hn::CallExp(d, hn::Neg(hn::Abs(g)));
  const VF den = hn::Add(one, t);
  const VF s = hn::IfThenElse(hn::Ge(g, hn::Zero(d)), hn::Div(one, den), hn::Div(t, den));
  return hn::IfThenElse(hn::IsNaN(g), g, s);  // Highway's Exp does not keep NaN
}

// f(d, x, y, z) over rows of n elements (z may be null), tails through a
// zero-padded stack copy.
template <class F>
HWY_INLINE void GateRows(const float* x, const float* y, const float* z, float* out, size_t n,
                         F f) {
  const DF d;
  const size_t N = hn::Lanes(d);
  size_t j = 0;
  for (; j + N <= n; j += N) {
    const VF zv = z == nullptr ? hn::Zero(d) : hn::LoadU(d, z + j);
    hn::StoreU(f(d, hn::LoadU(d, x + j), hn::LoadU(d, y + j), zv), d, out + j);
  }
  if (j < n) {
    const size_t c = n - j;
    HWY_ALIGN float xb[kMaxLanes] = {}, yb[kMaxLanes] = {}, zb[kMaxLanes] = {};
    std::memcpy(xb, x + j, c * sizeof(float));
    std::memcpy(yb, y + j, c * sizeof(float));
    if (z != nullptr) std::memcpy(zb, z + j, c * sizeof(float));
    hn::Store(f(d, hn::Load(d, xb), hn::Load(d, yb), hn::Load(d, zb)), d, xb);
    std::memcpy(out + j, xb, c * sizeof(float));
  }
}

void AttentionGateRowImpl(const float* a, const float* g, float* out, int64_t n) {
  GateRows(a, g, nullptr, out, static_cast<size_t>(n),
           [](DF d, VF av, VF gv, VF) HWY_ATTR { return hn::Mul(av, SigmoidVec(d, gv)); });
}

void AttentionGateGradRowImpl(const float* dd, const float* a, const float* g, float* out,
                              int64_t n) {
  GateRows(dd, a, g, out, static_cast<size_t>(n), [](DF d, VF dv, VF av, VF gv) HWY_ATTR {
    // sigmoid'(g) = s (1 - s) = t / (1 + t)^2 with t = e^-|g|: no
    // cancellation in 1 - s where s is near 1.
    const VF t = hn::CallExp(d, hn::Neg(hn::Abs(gv)));
    const VF den = hn::Add(hn::Set(d, 1.0f), t);
    const VF sp = hn::IfThenElse(hn::IsNaN(gv), gv, hn::Div(t, hn::Mul(den, den)));
    return hn::Mul(hn::Mul(dv, av), sp);
  });
}

}  // namespace smax::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace smax::kernels {

HWY_EXPORT(AttentionLogitsRowImpl);
HWY_EXPORT(AttentionLogitsOnlineStepImpl);
HWY_EXPORT(AttentionScaleRowImpl);
HWY_EXPORT(AttentionSoftcapGradRowImpl);
HWY_EXPORT(AttentionExpShiftRowImpl);
HWY_EXPORT(AttentionSoftmaxGradRowImpl);

void attention_exp_shift_row(float* t, int64_t n, float lse) noexcept {
  if (n > 0) HWY_DYNAMIC_DISPATCH(AttentionExpShiftRowImpl)(t, n, lse);
}
void attention_softmax_grad_row(const float* p, float* dp, int64_t n, float delta) noexcept {
  if (n > 0) HWY_DYNAMIC_DISPATCH(AttentionSoftmaxGradRowImpl)(p, dp, n, delta);
}
HWY_EXPORT(AttentionGateRowImpl);
HWY_EXPORT(AttentionGateGradRowImpl);

void attention_gate_row(const float* a, const float* g, float* out, int64_t n) noexcept {
  if (n > 0) HWY_DYNAMIC_DISPATCH(AttentionGateRowImpl)(a, g, out, n);
}
void attention_gate_grad_row(const float* d, const float* a, const float* g, float* out,
                             int64_t n) noexcept {
  if (n > 0) HWY_DYNAMIC_DISPATCH(AttentionGateGradRowImpl)(d, a, g, out, n);
}

void attention_logits_row(float* s, int64_t n, const AttentionLogits& p) noexcept {
  if (n > 0) HWY_DYNAMIC_DISPATCH(AttentionLogitsRowImpl)(s, n, p);
}
OnlineStep attention_logits_online_step(float* s, int64_t n, const AttentionLogits& p,
                                        float m_old) noexcept {
  if (n <= 0) {
    OnlineStep r;
    r.m = m_old;
    return r;
  }
  return HWY_DYNAMIC_DISPATCH(AttentionLogitsOnlineStepImpl)(s, n, p, m_old);
}
void attention_scale_row(float* o, int64_t n, float a) noexcept {
  if (n > 0) HWY_DYNAMIC_DISPATCH(AttentionScaleRowImpl)(o, n, a);
}
void attention_softcap_grad_row(const float* s, float* dt, int64_t n, float scale,
                                float cap) noexcept {
  if (n > 0) HWY_DYNAMIC_DISPATCH(AttentionSoftcapGradRowImpl)(s, dt, n, scale, cap);
}

}  // namespace smax::kernels
#endif  // HWY_ONCE
