// src/kernels/rescaled.cc: row kernels of SSMax (helpers), softpick,
// StableMax and the Softmax Collapse detector (kernels/rescaled.h).
//
// Reused: the f32 exp (exp-inl.h; ExpRef: exact reduction of t with a
// reference exponent N; ExpDiff: exact t - m by TwoSum), the blocked f32 ->
// float64 sums (sum-inl.h; BlockSum, F64Acc lane accumulators), row max and
// NaN scans (scan-inl.h), tail loads (load-inl.h; padding lanes are -inf for
// logits, 0 otherwise).
//
// softpick. The shifted form relu(e^(t-m) - e^-m) / (sum |e^(t-m) -
// e^-m| + eps e^-m) holds for any shift m; we take m = N ln2 with N =
// round(max t * log2e), so that e^(t - m) is ExpRef (t reduced exactly, no
// rounded t - m) and e^-m = 2^-N is exact (0 when N > 126: then e^-m is
// below FLT_MIN and every term it would cancel is flushed too). Beyond
// ExpRef's exact range (max t > kRefMaxAbs) the shift is max t itself
// (ExpDiff) and e^-m = 0. Rows whose max is <= 0 are exactly 0. The signed
// differences a_i are stored in dst during the sum sweep, then
// dst_i = relu(a_i) * (1 / D) (the reload pattern of the softmax).
//
// StableMax. s(t) = t + 1 (t >= 0), 1/(1 - t) (t < 0): both branches are
// evaluated per vector and IfThenElse keeps one per lane (the other is
// discarded, so 1/(1 - t) at t >= 1 never leaks). s(-inf) = 0, so masked
// entries drop out by themselves. Sums are float64 (F64Acc, exact
// widening): s can be as large as FLT_MAX, so f32 block sums could overflow.
//
// Softmax Collapse. f32: the exact ExpSum (blocked order) of the softmax
// kernels, with ExpDiff(m) so that the max entry is exactly 1. f16 / bf16:
// exps rounded to the format by integer RNE on the f32 bits (subnormal f16
// by the magic-number add 0.75 = 1.5 * 2^-1, whose ulp is 2^-24, the f16
// subnormal quantum), then a sequential scalar sum rounded to the format
// after every add (frexp / nearbyint / ldexp on the exact double sum),
// stopping as soon as the partial sum exceeds 1 (terms are >= 0 and rounding
// is monotone, so it can never come back to 1).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/rescaled.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/row-inl.h"
#include "kernels/kernels.h"
#include "kernels/rescaled.h"

HWY_BEFORE_NAMESPACE();
namespace smax::kernels::HWY_NAMESPACE {
namespace rescaled {

using Plain = Logits<false, false>;  // t as it is; tail lanes -inf
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kFltMin = std::numeric_limits<float>::min();

HWY_INLINE Plain Row(const float* t) { return Plain{t, nullptr, 1.0f}; }

HWY_INLINE void EmptyFill(EmptyRow policy, float* dst, size_t n) {
  Fill(dst, n, policy == EmptyRow::kNan ? kNaN : 0.0f);
}

// Stores v at dst + i (count lanes; count < N only for the tail).
HWY_INLINE void StoreN(DF d, VF v, float* dst, size_t i, size_t count) {
  if (count == hn::Lanes(d)) {
    hn::StoreU(v, d, dst + i);
  } else {
    StoreTail(d, v, dst + i, count);
  }
}

// Calls f(t, i, count) -> summand for every vector of the row (tail lanes
// of t are -inf and must give a 0 summand) and returns the blocked sum
// (exactly the summation order of ExpSum: 4 vectors per step, 2 f32
// accumulators, f64 every 8 steps).
template <class F>
HWY_INLINE double SweepBlocked(const float* t, size_t n, F&& f) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const Plain src = Row(t);
  BlockSum sum(d);
  size_t i = 0;
  for (; i + kUnroll * N <= n; i += kUnroll * N) {
    const VF a0 = f(src.Load(d, i), i, N);
    const VF a1 = f(src.Load(d, i + N), i + N, N);
    const VF a2 = f(src.Load(d, i + 2 * N), i + 2 * N, N);
    const VF a3 = f(src.Load(d, i + 3 * N), i + 3 * N, N);
    sum.Add4(d, a0, a1, a2, a3);
  }
  unsigned k = 0;
  for (; i + N <= n; i += N, ++k) sum.Add1(f(src.Load(d, i), i, N), k);
  if (i < n) sum.Add1(f(src.LoadTail(d, i, n - i), i, n - i), k);
  return sum.Total(d);
}

// Calls f(t, i, count) for every vector of the row (no reduction).
template <class F>
HWY_INLINE void Sweep(const float* t, size_t n, F&& f) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const Plain src = Row(t);
  size_t i = 0;
  for (; i + N <= n; i += N) f(src.Load(d, i), i, N);
  if (i < n) f(src.LoadTail(d, i, n - i), i, n - i);
}

// Other-operand load with the same tail rule (0 padding).
HWY_INLINE VF LoadN(DF d, const float* p, size_t i, size_t count) {
  return count == hn::Lanes(d) ? hn::LoadU(d, p + i) : LoadTailZero(d, p + i, count);
}

// ---- softpick ----------------------------------------------------------------

// Outcome of the max scan shared by softpick forward and backward.
enum class Pick { kCompute, kNan, kEmpty, kZero };

HWY_INLINE Pick SoftpickClassify(const float* t, size_t n, float* max_out) {
  const Plain src = Row(t);
  const float m = RowMax(src, n);
  *max_out = m;
  if (!(m < kInf)) return Pick::kNan;  // +inf or a propagated NaN
  if (m == kNegInf) return RowHasNaN(src, n) ? Pick::kNan : Pick::kEmpty;
  if (m <= 0.0f) return RowHasNaN(src, n) ? Pick::kNan : Pick::kZero;
  return Pick::kCompute;  // a NaN shows up as a NaN sum
}

// The shift of the row: returns false when ExpDiff(m) must be used.
struct Shift {
  bool use_ref;
  float nref;      // N (use_ref)
  float offset;    // e^-shift as f32 (2^-N, or 0)
  double eps_term; // eps * e^-shift in float64
};
HWY_INLINE Shift SoftpickShift(float m, float eps) {
  Shift s;
  s.use_ref = m <= kRefMaxAbs;
  if (s.use_ref) {
    s.nref = std::nearbyint(m * kLog2e);  // >= 0 since m > 0
    const int N = static_cast<int>(s.nref);
    s.offset = N > 126 ? 0.0f : std::ldexp(1.0f, -N);
    s.eps_term = std::ldexp(static_cast<double>(eps), -N);
  } else {
    s.nref = 0.0f;
    s.offset = 0.0f;
    s.eps_term = static_cast<double>(eps) * std::exp(-static_cast<double>(m));
  }
  return s;
}

template <class F>
HWY_INLINE void WithShiftExp(const Shift& s, float m, F&& f) {
  if (s.use_ref) {
    f(ExpRef::Make(s.nref));
  } else {
    f(ExpDiff::Make(m));
  }
}

// Classifies the row (SoftpickClassify, *m: its max); a row with nothing to
// compute is written here (NaN row: NaN; empty: the EmptyRow policy; max
// <= 0: zeros) and gives false, else true.
HWY_INLINE bool SoftpickComputes(const float* t, size_t n, EmptyRow policy, float* out,
                                 float* m) {
  switch (SoftpickClassify(t, n, m)) {
    case Pick::kNan: Fill(out, n, kNaN); return false;
    case Pick::kEmpty: EmptyFill(policy, out, n); return false;
    case Pick::kZero: Fill(out, n, 0.0f); return false;
    case Pick::kCompute: break;
  }
  return true;
}

void SoftpickRowImpl(const float* t, int64_t n64, float eps, EmptyRow policy, float* y) {
  const size_t n = static_cast<size_t>(n64);
  const DF d;
  float m;
  if (!SoftpickComputes(t, n, policy, y, &m)) return;
  const Shift sh = SoftpickShift(m, eps);
  const VF off = hn::Set(d, sh.offset);
  const VF ninf = hn::Set(d, kNegInf);
  const VF zero = hn::Zero(d);
  double S = 0.0;
  WithShiftExp(sh, m, [&](const auto& exp) {
    S = SweepBlocked(t, n, [&](VF vt, size_t i, size_t count) {
      const VF a = hn::Sub(exp(d, vt), off);  // e^(t - shift) - e^-shift
      // Numerator relu(a), forced to 0 where t <= 0 (the exp's last-ulp
      // error must not turn e^t - 1 <= 0 into a positive output).
      StoreN(d, hn::IfThenElse(hn::Gt(vt, zero), hn::Max(a, zero), zero), y, i, count);
      return hn::IfThenZeroElse(hn::Eq(vt, ninf), hn::Abs(a));  // masked: left out
    });
  });
  const double D = S + sh.eps_term;
  if (std::isnan(D)) return Fill(y, n, kNaN);
  if (!(D > 0.0)) return Fill(y, n, 0.0f);  // eps = 0 and every a_i rounded to 0
  // 1/D fits f32: ops require eps == 0 or eps >= FLT_MIN, and then D >= eps
  // when N = 0, D >= a_max >= 0.2 when N >= 1, and with eps = 0 a nonzero D
  // is >= ulp(1)/2 (a_max = b_max - 1 with b_max the f32 exp near 1).
  const double invd = 1.0 / D;
  const VF inv = hn::Set(d, static_cast<float>(invd));
  const VF tiny = hn::Set(d, kFltMin);
  const size_t N = hn::Lanes(d);
  auto store = [&](size_t i, size_t count) {
    const VF v = hn::Mul(LoadN(d, y, i, count), inv);
    StoreN(d, hn::IfThenZeroElse(hn::Lt(v, tiny), v), y, i, count);
  };
  size_t i = 0;
  for (; i + N <= n; i += N) store(i, N);
  if (i < n) store(i, n - i);
}

void SoftpickBackwardRowImpl(const float* t, const float* g, int64_t n64, float eps,
                             float scale, EmptyRow policy, float* dx) {
  const size_t n = static_cast<size_t>(n64);
  const DF d;
  float m;
  if (!SoftpickComputes(t, n, policy, dx, &m)) return;
  const Shift sh = SoftpickShift(m, eps);
  const VF off = hn::Set(d, sh.offset);
  const VF ninf = hn::Set(d, kNegInf);
  const VF zero = hn::Zero(d);
  WithShiftExp(sh, m, [&](const auto& exp) {
    // Sweep 1: S = sum_vis |a_i| (blocked), P = sum g_i relu(a_i) (float64).
    F64Acc P0, P1;
    unsigned which = 0;
    const double S = SweepBlocked(t, n, [&](VF vt, size_t i, size_t count) {
      const VF a = hn::Sub(exp(d, vt), off);
      const auto masked = hn::Eq(vt, ninf);
      const VF vg = hn::IfThenZeroElse(masked, LoadN(d, g, i, count));
      const VF num = hn::IfThenElse(hn::Gt(vt, zero), hn::Max(a, zero), zero);
      ((which++ & 1) ? P1 : P0).AddProduct(d, vg, num);
      return hn::IfThenZeroElse(masked, hn::Abs(a));
    });
    const double D = S + sh.eps_term;
    const double P = P0.Total(d) + P1.Total(d);
    if (std::isnan(D) || std::isnan(P)) return Fill(dx, n, kNaN);
    if (!(D > 0.0)) return Fill(dx, n, 0.0f);
    const double r = P / D;  // <g, y>
    const double invd = 1.0 / D;  // <= 1/FLT_MIN: eps is 0 or >= FLT_MIN (see SoftpickRowImpl)
    // Sweep 2: dx = ((b * (1/D)) * w) * scale, w = g - r (t > 0) or r.
    const VF inv = hn::Set(d, static_cast<float>(invd));
    const VF vr = hn::Set(d, static_cast<float>(r));
    const VF vs = hn::Set(d, scale);
    Sweep(t, n, [&](VF vt, size_t i, size_t count) {
      const VF b = exp(d, vt);
      const VF w = hn::IfThenElse(hn::Gt(vt, zero), hn::Sub(LoadN(d, g, i, count), vr), vr);
      const VF v = hn::Mul(hn::Mul(hn::Mul(b, inv), w), vs);
      StoreN(d, hn::IfThenZeroElse(hn::Eq(vt, ninf), v), dx, i, count);
    });
  });
}

// ---- StableMax -----------------------------------------------------------------

// s(t) = t + 1 (t >= 0), 1 / (1 - t) (t < 0); s(-inf) = 0, s(NaN) = NaN.
HWY_INLINE VF StableS(DF d, VF t) {
  const VF one = hn::Set(d, 1.0f);
  return hn::IfThenElse(hn::Ge(t, hn::Zero(d)), hn::Add(t, one),
                        hn::Div(one, hn::Sub(one, t)));
}

// x / S as (x * pre) * inv with inv = fl(1 / (S * pre)): pre = 2^-64 when S
// is huge (> 2^100; s can be FLT_MAX) and 2^64 when it is tiny (< 2^-100;
// s(-FLT_MAX) is a denormal), so that inv is a normal f32. Scaling by a
// power of two is exact (up to underflow of terms that are negligible).
struct Recip {
  float pre, inv;
};
HWY_INLINE Recip MakeRecip(double S) {
  const double pre = S > 0x1p100 ? 0x1p-64 : S < 0x1p-100 ? 0x1p64 : 1.0;
  return Recip{static_cast<float>(pre), static_cast<float>(1.0 / (S * pre))};
}

// sum_i s(t_i) over [t, t + n) in float64 (2 lane accumulators, exact
// widening); stores s_i to `out` when it is not null.
HWY_INLINE double StableSum(const float* t, size_t n, float* out) {
  const DF d;
  F64Acc acc0, acc1;
  unsigned which = 0;
  Sweep(t, n, [&](VF vt, size_t i, size_t count) {
    const VF s = StableS(d, vt);  // tail lanes are -inf: s = 0
    if (out != nullptr) StoreN(d, s, out, i, count);
    ((which++ & 1) ? acc1 : acc0).Add(d, s);
  });
  return acc0.Total(d) + acc1.Total(d);
}

void StablemaxRowImpl(const float* t, int64_t n64, EmptyRow policy, float* y) {
  const size_t n = static_cast<size_t>(n64);
  const DF d;
  const double S = StableSum(t, n, y);
  if (!(S < std::numeric_limits<double>::infinity())) return Fill(y, n, kNaN);  // NaN, +inf
  if (S == 0.0) return EmptyFill(policy, y, n);  // every entry -inf
  const Recip rc = MakeRecip(S);
  const VF vpre = hn::Set(d, rc.pre);
  const VF inv = hn::Set(d, rc.inv);
  const VF tiny = hn::Set(d, kFltMin);
  const size_t N = hn::Lanes(d);
  auto store = [&](size_t i, size_t count) {
    const VF v = hn::Mul(hn::Mul(LoadN(d, y, i, count), vpre), inv);
    StoreN(d, hn::IfThenZeroElse(hn::Lt(v, tiny), v), y, i, count);
  };
  size_t i = 0;
  for (; i + N <= n; i += N) store(i, N);
  if (i < n) store(i, n - i);
}

void StablemaxBackwardRowImpl(const float* t, const float* g, int64_t n64, float scale,
                              EmptyRow policy, float* dx) {
  const size_t n = static_cast<size_t>(n64);
  const DF d;
  const VF ninf = hn::Set(d, kNegInf);
  // Sweep 1: S = sum s_i, P = sum g_i s_i (float64; exact products).
  F64Acc S0, S1, P0, P1;
  unsigned which = 0;
  Sweep(t, n, [&](VF vt, size_t i, size_t count) {
    const VF s = StableS(d, vt);
    const VF vg = hn::IfThenZeroElse(hn::Eq(vt, ninf), LoadN(d, g, i, count));
    if (which++ & 1) {
      S1.Add(d, s);
      P1.AddProduct(d, vg, s);
    } else {
      S0.Add(d, s);
      P0.AddProduct(d, vg, s);
    }
  });
  const double S = S0.Total(d) + S1.Total(d);
  const double P = P0.Total(d) + P1.Total(d);
  if (!(S < std::numeric_limits<double>::infinity())) return Fill(dx, n, kNaN);
  if (S == 0.0) return EmptyFill(policy, dx, n);
  if (std::isnan(P)) return Fill(dx, n, kNaN);
  // Sweep 2: dx = ((((q * pre) * inv) * q) * (g - r)) * scale, r = <g, y> =
  // P / S, with s' = q^2 (q = s = 1 / (1 - t) for t < 0; q = 1 for t >= 0):
  // q^2 alone underflows f32 for t below ~-1.8e19 (s' < FLT_MIN) although
  // s' / S = q y does not (fuzz_normalizers: t = -3.75e30, scale 1e30).
  const Recip rc = MakeRecip(S);
  const VF vpre = hn::Set(d, rc.pre);
  const VF inv = hn::Set(d, rc.inv);
  const VF vr = hn::Set(d, static_cast<float>(P / S));
  const VF vs = hn::Set(d, scale);
  const VF one = hn::Set(d, 1.0f);
  Sweep(t, n, [&](VF vt, size_t i, size_t count) {
    const VF w = hn::Sub(LoadN(d, g, i, count), vr);
    const VF q = hn::IfThenElse(hn::Ge(vt, hn::Zero(d)), one, hn::Div(one, hn::Sub(one, vt)));
    const VF ds_over_s = hn::Mul(hn::Mul(hn::Mul(q, vpre), inv), q);
    const VF v = hn::Mul(hn::Mul(ds_over_s, w), vs);
    StoreN(d, hn::IfThenZeroElse(hn::Eq(vt, ninf), v), dx, i, count);
  });
}

double StablemaxSumImpl(const float* t, int64_t n64, int64_t exclude) {
  const size_t n = static_cast<size_t>(n64);
  if (exclude < 0 || exclude >= n64) return StableSum(t, n, nullptr);
  const size_t e = static_cast<size_t>(exclude);
  return StableSum(t, e, nullptr) + StableSum(t + e + 1, n - e - 1, nullptr);
}

void StablemaxCeGradRowImpl(const float* t, int64_t n64, int64_t target, double others,
                            float coef, float* dx) {
  const size_t n = static_cast<size_t>(n64);
  const DF d;
  const double tt = static_cast<double>(t[target]);
  const double st = tt >= 0.0 ? tt + 1.0 : 1.0 / (1.0 - tt);
  const double S = others + st;
  const Recip rc = MakeRecip(S);
  const VF vpre = hn::Set(d, rc.pre);
  const VF inv = hn::Set(d, rc.inv);
  const VF one = hn::Set(d, 1.0f);
  const VF vc = hn::Set(d, coef);
  const VF ninf = hn::Set(d, kNegInf);
  // dx_j = ((((s_j * pre) * inv) * (1 / (1 + |t_j|))) * coef   (s'/s = 1/(1 + |t|)).
  Sweep(t, n, [&](VF vt, size_t i, size_t count) {
    const VF h = hn::Div(one, hn::Add(one, hn::Abs(vt)));
    const VF v = hn::Mul(hn::Mul(hn::Mul(hn::Mul(StableS(d, vt), vpre), inv), h), vc);
    StoreN(d, hn::IfThenZeroElse(hn::Eq(vt, ninf), v), dx, i, count);
  });
  // The target: y_t - 1 = -others / S, in float64 (no cancellation).
  dx[target] = t[target] == kNegInf
                   ? 0.0f
                   : static_cast<float>(-static_cast<double>(coef) * (others / S) /
                                        (1.0 + std::fabs(tt)));
}

// ---- SSMax helpers -------------------------------------------------------------

int64_t CountVisibleImpl(const float* t, int64_t n64) {
  const size_t n = static_cast<size_t>(n64);
  const DF d;
  const size_t N = hn::Lanes(d);
  const VF ninf = hn::Set(d, kNegInf);
  size_t count = 0, i = 0;
  for (; i + N <= n; i += N) count += hn::CountTrue(d, hn::Not(hn::Eq(hn::LoadU(d, t + i), ninf)));
  if (i < n) {
    const auto m = hn::AndNot(hn::Eq(LoadTailZero(d, t + i, n - i), ninf), hn::FirstN(d, n - i));
    count += hn::CountTrue(d, m);
  }
  return static_cast<int64_t>(count);
}

void SsmaxLogitsImpl(const float* t, int64_t n64, float c, float* u) {
  const size_t n = static_cast<size_t>(n64);
  const DF d;
  const VF vc = hn::Set(d, c);
  const VF ninf = hn::Set(d, kNegInf);
  const VF pinf = hn::Set(d, kInf);
  const VF nan = hn::Set(d, kNaN);
  Sweep(t, n, [&](VF vt, size_t i, size_t count) {
    VF v = hn::Mul(vt, vc);
    v = hn::IfThenElse(hn::Eq(vt, ninf), ninf, v);
    v = hn::IfThenElse(hn::Eq(vt, pinf), nan, v);
    StoreN(d, v, u, i, count);
  });
}

double SsmaxDsSumImpl(const float* t, const float* y, const float* g, int64_t n64, float dot) {
  const size_t n = static_cast<size_t>(n64);
  const DF d;
  const VF vdot = hn::Set(d, dot);
  const VF zero = hn::Zero(d);
  F64Acc acc0, acc1;
  unsigned which = 0;
  const size_t N = hn::Lanes(d);
  auto step = [&](size_t i, size_t count) {
    const VF vy = LoadN(d, y, i, count);
    const auto off = hn::Eq(vy, zero);  // masked (t = -inf) or underflowed
    // t y (g - dot) in float64: t near FLT_MAX times y > 1 (a raw y) must
    // not overflow f32 and meet an inf of the other sign (NaN, not inf).
    const VF vt = hn::IfThenZeroElse(off, LoadN(d, t, i, count));
    const VF w = hn::IfThenZeroElse(off, hn::Sub(LoadN(d, g, i, count), vdot));
    ((which++ & 1) ? acc1 : acc0).AddProduct3(d, vt, vy, w);
  };
  size_t i = 0;
  for (; i + N <= n; i += N) step(i, N);
  if (i < n) step(i, n - i);
  return acc0.Total(d) + acc1.Total(d);
}

// ---- Softmax Collapse ------------------------------------------------------------

// Round-to-nearest-even of non-negative finite f32 to bfloat16 (8 significant
// bits, f32's exponent range: the same integer trick covers subnormals).
HWY_INLINE VF RoundBF16(DF d, VF x) {
  const DI di;
  auto b = hn::BitCast(di, x);
  const auto lsb = hn::And(hn::ShiftRight<16>(b), hn::Set(di, 1));
  b = hn::Add(b, hn::Add(hn::Set(di, 0x7FFF), lsb));
  b = hn::And(b, hn::Set(di, static_cast<int32_t>(0xFFFF0000u)));
  return hn::BitCast(d, b);
}

// Round-to-nearest-even of non-negative finite f32 to binary16: 11
// significant bits for x >= 2^-14; below, multiples of 2^-24 (subnormals);
// > 65504 after rounding -> +inf.
HWY_INLINE VF RoundF16(DF d, VF x) {
  const DI di;
  auto b = hn::BitCast(di, x);
  const auto lsb = hn::And(hn::ShiftRight<13>(b), hn::Set(di, 1));
  b = hn::Add(b, hn::Add(hn::Set(di, 0xFFF), lsb));
  b = hn::And(b, hn::Set(di, ~int32_t{0x1FFF}));
  const VF normal = hn::BitCast(d, b);
  const VF magic = hn::Set(d, 0.75f);  // ulp(0.75) = 2^-24
  const VF sub = hn::Sub(Opaque(hn::Add(x, magic)), magic);
  const VF r = hn::IfThenElse(hn::Lt(x, hn::Set(d, 0x1p-14f)), sub, normal);
  return hn::IfThenElse(hn::Gt(r, hn::Set(d, 65504.0f)), hn::Set(d, kInf), r);
}

HWY_INLINE VF RoundTo(DF d, VF x, int precision) {
  return precision == 1 ? RoundF16(d, x) : RoundBF16(d, x);
}

void RoundRowImpl(const float* x, int64_t n64, int precision, float* out) {
  const size_t n = static_cast<size_t>(n64);
  const DF d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(RoundTo(d, hn::LoadU(d, x + i), precision), d, out + i);
  if (i < n) StoreTail(d, RoundTo(d, LoadTailZero(d, x + i, n - i), precision), out + i, n - i);
}

bool SoftmaxCollapseRowImpl(const float* t, int64_t n64, int precision, float* scratch) {
  const size_t n = static_cast<size_t>(n64);
  const DF d;
  const Plain src = Row(t);
  const float m = RowMax(src, n);
  if (!(m < kInf) || m == kNegInf) return false;  // +inf, NaN max, all -inf
  const ExpDiff exp = ExpDiff::Make(m);             // exp(t_max - m) = 1 exactly
  if (precision == 0) {
    const double s = ExpSum<false>(src, n, exp, nullptr);  // NaN if some t is NaN
    return static_cast<float>(s) == 1.0f;
  }
  if (RowHasNaN(src, n)) return false;
  Sweep(t, n, [&](VF vt, size_t i, size_t count) {
    StoreN(d, RoundTo(d, exp(d, vt), precision), scratch, i, count);
  });
  double acc = 0.0;
  for (size_t i = 0; i < n; ++i) {
    acc = round_to_precision(acc + static_cast<double>(scratch[i]), precision);
    if (acc > 1.0) return false;
  }
  return acc == 1.0;
}

}  // namespace rescaled

// HWY_EXPORT names the functions at the HWY_NAMESPACE level.
using rescaled::CountVisibleImpl;
using rescaled::RoundRowImpl;
using rescaled::SoftmaxCollapseRowImpl;
using rescaled::SoftpickBackwardRowImpl;
using rescaled::SoftpickRowImpl;
using rescaled::SsmaxDsSumImpl;
using rescaled::SsmaxLogitsImpl;
using rescaled::StablemaxBackwardRowImpl;
using rescaled::StablemaxCeGradRowImpl;
using rescaled::StablemaxRowImpl;
using rescaled::StablemaxSumImpl;

}  // namespace smax::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace smax::kernels {

HWY_EXPORT(SoftpickRowImpl);
HWY_EXPORT(SoftpickBackwardRowImpl);
HWY_EXPORT(StablemaxRowImpl);
HWY_EXPORT(StablemaxBackwardRowImpl);
HWY_EXPORT(StablemaxSumImpl);
HWY_EXPORT(StablemaxCeGradRowImpl);
HWY_EXPORT(CountVisibleImpl);
HWY_EXPORT(SsmaxLogitsImpl);
HWY_EXPORT(SsmaxDsSumImpl);
HWY_EXPORT(RoundRowImpl);
HWY_EXPORT(SoftmaxCollapseRowImpl);

int64_t count_visible(const float* t, int64_t n) noexcept {
  return HWY_DYNAMIC_DISPATCH(CountVisibleImpl)(t, n);
}
void ssmax_logits(const float* t, int64_t n, float c, float* u) noexcept {
  HWY_DYNAMIC_DISPATCH(SsmaxLogitsImpl)(t, n, c, u);
}
double ssmax_ds_sum(const float* t, const float* y, const float* g, int64_t n,
                    float dot) noexcept {
  return HWY_DYNAMIC_DISPATCH(SsmaxDsSumImpl)(t, y, g, n, dot);
}
void softpick_row(const float* t, int64_t n, float eps, EmptyRow empty_row, float* y) noexcept {
  HWY_DYNAMIC_DISPATCH(SoftpickRowImpl)(t, n, eps, empty_row, y);
}
void softpick_backward_row(const float* t, const float* g, int64_t n, float eps, float scale,
                           EmptyRow empty_row, float* dx) noexcept {
  HWY_DYNAMIC_DISPATCH(SoftpickBackwardRowImpl)(t, g, n, eps, scale, empty_row, dx);
}
void stablemax_row(const float* t, int64_t n, EmptyRow empty_row, float* y) noexcept {
  HWY_DYNAMIC_DISPATCH(StablemaxRowImpl)(t, n, empty_row, y);
}
void stablemax_backward_row(const float* t, const float* g, int64_t n, float scale,
                            EmptyRow empty_row, float* dx) noexcept {
  HWY_DYNAMIC_DISPATCH(StablemaxBackwardRowImpl)(t, g, n, scale, empty_row, dx);
}
double stablemax_sum(const float* t, int64_t n, int64_t exclude) noexcept {
  return HWY_DYNAMIC_DISPATCH(StablemaxSumImpl)(t, n, exclude);
}
void stablemax_ce_grad_row(const float* t, int64_t n, int64_t target, double others,
                           float coef, float* dx) noexcept {
  HWY_DYNAMIC_DISPATCH(StablemaxCeGradRowImpl)(t, n, target, others, coef, dx);
}
bool softmax_collapse_row(const float* t, int64_t n, int precision, float* scratch) noexcept {
  return HWY_DYNAMIC_DISPATCH(SoftmaxCollapseRowImpl)(t, n, precision, scratch);
}
void round_to_precision_row(const float* x, int64_t n, int precision, float* out) noexcept {
  HWY_DYNAMIC_DISPATCH(RoundRowImpl)(x, n, precision, out);
}

double round_to_precision(double v, int precision) noexcept {
  if (!(v > 0.0) || std::isinf(v)) return v;  // 0, NaN, +inf
  const int bits = precision == 1 ? 11 : 8;
  const int emin = precision == 1 ? -13 : -125;  // frexp exponent of the smallest normal
  const double maxv = precision == 1 ? 65504.0 : std::ldexp(255.0, 120);
  int e = 0;
  std::frexp(v, &e);  // v = f * 2^e, f in [0.5, 1)
  const int q = (e > emin ? e : emin) - bits;  // quantum 2^q
  const double r = std::ldexp(std::nearbyint(std::ldexp(v, -q)), q);
  return r > maxv ? std::numeric_limits<double>::infinity() : r;
}

}  // namespace smax::kernels
#endif  // HWY_ONCE
