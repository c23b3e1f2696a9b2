// src/kernels/scan-inl.h: the row scans, each one read of the row: the max
// (RowMax), (min, max) with a fused pass over another row (RowMinMaxWith),
// the NaN test, and OnlineScanWith, the one online scan of the library (4
// vectors per step, a reference that moves only when a step passes the
// visitor's threshold, the per-step work done by a visitor). Its visitors
// here: OnlineSum (OnlineScan: the online (m, d) sum, Milakov & Gimelshein)
// and TwoPassSum (TwoPassScan: the (mu, nu) sum, Dukhan & Ablavatski); the
// loss scans (cross_entropy.cc, linear_cross_entropy.cc) and the top-k scan
// (sampling.cc) bring their own.
// Results depend only on the row (fixed accumulator order, whatever pass
// or extra visitor work runs alongside).
//
// Included only from kernels/row-inl.h, inside its per-target namespace
// smax::kernels::HWY_NAMESPACE (with `hn`, the standard and Highway headers
// and the pieces listed before this one in row-inl.h already in scope).
#ifndef SMAX_KERNELS_ROW_INL_PIECE_
#error "include kernels/row-inl.h, not its pieces"
#endif

// Slack of the online / two-pass reference: elements up to e^32 (online) or
// 2^40 (two-pass) above the reference are summed without rescaling. The
// reference only moves when a step's max exceeds it by more (rare), so the
// steady state costs one exp per element and one compare per 4 vectors.
constexpr float kOnlineSlack = 32.0f;
constexpr float kTwoPassSlack = 40.0f;

// ---- row scans ----------------------------------------------------------------
// max_i t_i with 4 independent accumulators (hides the 3-cycle max latency;
// the loop is load-bound). NaN may or may not propagate (x86 max semantics).
template <class Src>
HWY_INLINE float RowMax(const Src& src, size_t n) {
  const DF d;
  const size_t N = hn::Lanes(d);
  VF m0 = hn::Set(d, kNegInf), m1 = m0, m2 = m0, m3 = m0;
  size_t i = 0;
  for (; i + kUnroll * N <= n; i += kUnroll * N) {
    m0 = hn::Max(m0, src.Load(d, i));
    m1 = hn::Max(m1, src.Load(d, i + N));
    m2 = hn::Max(m2, src.Load(d, i + 2 * N));
    m3 = hn::Max(m3, src.Load(d, i + 3 * N));
  }
  for (; i + N <= n; i += N) m0 = hn::Max(m0, src.Load(d, i));
  if (i < n) m1 = hn::Max(m1, src.LoadTail(d, i, n - i));
  m0 = hn::Max(hn::Max(m0, m1), hn::Max(m2, m3));
  return ReduceMax(d, m0);
}

// (min_i t_i, max_i t_i) in one read: the min lets the three-pass kernels
// drop the exp's flush (ExpRefNoFlush). 4 + 4 accumulators; in cache the
// extra min costs ~0.1 cycle per element, the saved flush ~0.25. `pass`
// (over another row of n elements) runs in the same loop; the scan's loads
// and accumulator order do not depend on it, so the result is the same bits
// as RowMinMax's.
// The loads start at the first element aligned to the vector size (a head
// of fewer elements first: pass-inl.h, HeadToAlign), or, when the pass
// streams its stores, at the first element where the pass's output is
// aligned (streaming stores must be). That changes which
// accumulator an element meets, which changes nothing: a min or max is the
// same value in any order, except which of +0 / -0 or whether a NaN comes
// out, and neither changes an output (a zero max or min gives the same
// exps, sums and differences; a NaN anywhere makes the row's sum NaN, and
// every user turns the row into NaN whatever max and min say).
struct MinMax {
  float min, max;
};
// The address a row source's loads start from, for HeadToAlign: the f32
// logits (Logits), nullptr (no peel) for any other source.
template <class Src>
HWY_INLINE const void* SrcAlignTarget(const Src& /*src*/) {
  return nullptr;
}
template <bool kMask, bool kScale>
HWY_INLINE const void* SrcAlignTarget(const Logits<kMask, kScale>& src) {
  return src.x;
}
template <class Src, class Pass>
HWY_INLINE MinMax RowMinMaxWith(const Src& src, size_t n, const Pass& pass) {
  const DF d;
  const size_t N = hn::Lanes(d);
  VF m0 = hn::Set(d, kNegInf), m1 = m0, m2 = m0, m3 = m0;
  VF l0 = hn::Set(d, kInf), l1 = l0, l2 = l0, l3 = l0;
  size_t i = HeadToAlign(d, kPassStreams<Pass> ? PassAlignTarget(pass) : SrcAlignTarget(src), n);
  if (i != 0) {
    // Lanes past the head are -inf: fine for the max; +inf for the min.
    const VF t = src.LoadTail(d, 0, i);
    PassHead(pass, i);
    m2 = t;
    l2 = hn::IfThenElse(hn::FirstN(d, i), t, hn::Set(d, kInf));
  }
  for (; i + kUnroll * N <= n; i += kUnroll * N) {
    const VF t0 = src.Load(d, i), t1 = src.Load(d, i + N);
    const VF t2 = src.Load(d, i + 2 * N), t3 = src.Load(d, i + 3 * N);
    pass.Vector(d, i);
    pass.Vector(d, i + N);
    pass.Vector(d, i + 2 * N);
    pass.Vector(d, i + 3 * N);
    m0 = hn::Max(m0, t0);
    m1 = hn::Max(m1, t1);
    m2 = hn::Max(m2, t2);
    m3 = hn::Max(m3, t3);
    l0 = hn::Min(l0, t0);
    l1 = hn::Min(l1, t1);
    l2 = hn::Min(l2, t2);
    l3 = hn::Min(l3, t3);
  }
  for (; i + N <= n; i += N) {
    const VF t = src.Load(d, i);
    pass.Vector(d, i);
    m0 = hn::Max(m0, t);
    l0 = hn::Min(l0, t);
  }
  if (i < n) {
    // Tail lanes past n are -inf: fine for the max; the min takes +inf
    // there instead, so it is the min of the row's own entries.
    const VF t = src.LoadTail(d, i, n - i);
    pass.Tail(d, i, n - i);
    m1 = hn::Max(m1, t);
    l1 = hn::Min(l1, hn::IfThenElse(hn::FirstN(d, n - i), t, hn::Set(d, kInf)));
  }
  m0 = hn::Max(hn::Max(m0, m1), hn::Max(m2, m3));
  l0 = hn::Min(hn::Min(l0, l1), hn::Min(l2, l3));
  return MinMax{ReduceMin(d, l0), ReduceMax(d, m0)};
}
template <class Src>
HWY_INLINE MinMax RowMinMax(const Src& src, size_t n) {
  return RowMinMaxWith(src, n, NoPass{});
}

// True if some t_i is NaN (IsNaN, not Ne(t, t): AVX2 Ne is the ordered
// compare, false for NaN) (used only when the max is -inf, where a NaN could
// hide behind max's operand order).
template <class Src>
HWY_INLINE bool RowHasNaN(const Src& src, size_t n) {
  const DF d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const VF t = src.Load(d, i);
    if (!hn::AllFalse(d, hn::IsNaN(t))) return true;
  }
  if (i < n) {
    const VF t = src.LoadTail(d, i, n - i);
    if (!hn::AllFalse(d, hn::IsNaN(t))) return true;
  }
  return false;
}

// ---- the online scan template ---------------------------------------------------
// OnlineScanWith(src, n, visitor): one read of the row in steps of kUnroll
// vectors, with a row-wide reference that moves only when some lane of a
// step exceeds the visitor's threshold (-inf until the first rebase). The
// loads, the step max, the running max and the threshold test are here;
// what is summed, and any other per-step work of the caller (a loss's
// smoothing sums and argmax, the top-k filter), is the visitor's:
//   float Rebase(DF d, VF step_max, bool first): the rare path, called before
//     the step's Step4 / Step1 with the lane max of its vectors (first: no
//     rebase yet); moves the reference, rescales or carries the sums and
//     returns the new threshold;
//   void Step4(DF d, size_t i, VF t0, VF t1, VF t2, VF t3, VF step_max): the
//     full vectors at i, i + N, i + 2N, i + 3N;
//   void Step1(DF d, size_t i, VF t, size_t count, unsigned k): the k-th
//     (k = 0, 1, ...) single vector after the last full step, at i; count = N,
//     or count < N for the row's tail, whose lanes [count, N) are -inf.
// Returns max_i t_i (rows with NaN: unspecified, x86 max semantics).
template <class Src, class Visitor>
HWY_INLINE float OnlineScanWith(const Src& src, size_t n, Visitor& visitor) {
  const DF d;
  const size_t N = hn::Lanes(d);
  float thresh = kNegInf;
  VF vmax = hn::Set(d, kNegInf);
  size_t i = 0;
  for (; i + kUnroll * N <= n; i += kUnroll * N) {
    const VF t0 = src.Load(d, i);
    const VF t1 = src.Load(d, i + N);
    const VF t2 = src.Load(d, i + 2 * N);
    const VF t3 = src.Load(d, i + 3 * N);
    const VF sm = hn::Max(hn::Max(t0, t1), hn::Max(t2, t3));
    vmax = hn::Max(vmax, sm);
    if (HWY_UNLIKELY(!hn::AllFalse(d, hn::Gt(sm, hn::Set(d, thresh))))) {
      thresh = visitor.Rebase(d, sm, !(thresh > kNegInf));
    }
    visitor.Step4(d, i, t0, t1, t2, t3, sm);
  }
  unsigned k = 0;
  auto one = [&](VF t, size_t count) {
    vmax = hn::Max(vmax, t);
    if (!hn::AllFalse(d, hn::Gt(t, hn::Set(d, thresh)))) {
      thresh = visitor.Rebase(d, t, !(thresh > kNegInf));
    }
    visitor.Step1(d, i, t, count, k++);
  };
  for (; i + N <= n; i += N) one(src.Load(d, i), N);
  if (i < n) one(src.LoadTail(d, i, n - i), n - i);
  return ReduceMax(d, vmax);
}

// ---- online (Milakov & Gimelshein) (m, d) sum ------------------------------------
// Sum = d * e^ref, with ref a single (row-wide) f32 reference and the true
// max m tracked alongside. Each step of 4 vectors takes its per-lane max;
// only if some lane exceeds ref + kOnlineSlack does ref move (to the step's
// max): the f32 block sums are widened, the float64 sums are multiplied by
// e^(ref_old - ref_new) computed in float64 (exact to 1e-16, so rescaling
// never adds f32 error) and the step continues. Otherwise elements up to
// e^32 above ref are summed as they are (no overflow: 2^46 * 16 * 4 << FLT_MAX;
// nothing that matters is flushed: an element flushed relative to ref is
// below e^-87 of the true max). Hence ~1 exp per element. Before the first
// finite element ref's threshold is -inf, which also guards -inf - -inf.

// sum += exp(t0) + ... + exp(t3) in BlockSum's order (the Step4 of the sum
// visitors below).
template <class Exp>
HWY_INLINE void AddExp4(DF d, const Exp& exp, BlockSum& sum, VF t0, VF t1, VF t2, VF t3) {
  sum.Add4(d, exp(d, t0), exp(d, t1), exp(d, t2), exp(d, t3));
}

// The moving reference of the online sum: e^(t - ref) through ExpDiff (exact
// t - ref). Move() sets ref to the step's max and returns the new threshold.
struct OnlineRef {
  float ref = 0.0f;  // any finite value: -inf elements give 0
  ExpDiff exp = ExpDiff::Make(0.0f);
  HWY_INLINE float Move(float new_ref) {
    ref = new_ref;
    exp = ExpDiff::Make(ref);
    return ref + kOnlineSlack;
  }
};

// The visitor of OnlineScan: sum_i e^(t_i - ref), blocked; a rebase widens
// the f32 blocks and scales the float64 sums by e^(ref_old - ref_new).
struct OnlineSum {
  BlockSum sum;
  OnlineRef r;
  explicit OnlineSum(DF d) : sum(d) {}
  HWY_INLINE float Rebase(DF d, VF step_max, bool first) {
    const float new_ref = ReduceMax(d, step_max);
    sum.Flush(d);
    if (!first) sum.wide.Scale(std::exp(static_cast<double>(r.ref) - new_ref));
    return r.Move(new_ref);
  }
  HWY_INLINE void Step4(DF d, size_t /*i*/, VF t0, VF t1, VF t2, VF t3, VF /*step_max*/) {
    AddExp4(d, r.exp, sum, t0, t1, t2, t3);
  }
  HWY_INLINE void Step1(DF d, size_t /*i*/, VF t, size_t /*count*/, unsigned k) {
    sum.Add1(r.exp(d, t), k);
  }
};

struct OnlineResult {
  float ref;   // the reference (finite unless the row holds +inf / NaN)
  double d;    // sum = d * e^ref
  float max;   // true max (NaN/inf rows: unspecified)
};

template <class Src>
HWY_INLINE OnlineResult OnlineScan(const Src& src, size_t n) {
  const DF d;
  OnlineSum v(d);
  OnlineResult res;
  res.max = OnlineScanWith(src, n, v);
  res.d = v.sum.Total(d);
  res.ref = v.r.ref;
  return res;
}

// ---- two-pass (Dukhan & Ablavatski) scan ---------------------------------------
// e^t = mu * 2^nu. The sum is kept as S * 2^N with a row-wide integer
// reference N; every element is computed directly as 2^(n_i - N) * p(r_i)
// by ExpRef (no max pass, no subtraction t - m: the reduction of t itself is
// exact). N moves only when a step's max t exceeds (N + slack) * ln2; the
// rescale by 2^(N_old - N_new) is a power of two, exact in float64.
// in_range: the true max of t must satisfy |max| <= kRefMaxAbs (so that
// every reduction that is not flushed is exact); -inf rows are in range.

// The visitor of TwoPassScan (and of the top-k scan's normaliser): sum_i
// e^(t_i - nref ln2), blocked.
struct TwoPassSum {
  BlockSum sum;
  float nref = 0.0f;
  ExpRef exp = ExpRef::Make(0.0f);
  explicit TwoPassSum(DF d) : sum(d) {}
  HWY_INLINE float Rebase(DF d, VF step_max, bool first) {
    const float m = ReduceMax(d, step_max);
    // Clamp keeps the exponent arithmetic finite for inf/huge rows (those
    // are out of range and recomputed by the caller anyway).
    const float mc = std::fmin(std::fmax(m, -1e6f), 1e6f);
    const float new_ref = std::nearbyint(mc * kLog2e);
    sum.Flush(d);
    if (!first) sum.wide.Scale(std::ldexp(1.0, static_cast<int>(nref - new_ref)));
    nref = new_ref;
    exp = ExpRef::Make(nref);
    if (!(m < kInf)) return kInf;
    return (nref + kTwoPassSlack) * static_cast<float>(kLn2d);
  }
  HWY_INLINE void Step4(DF d, size_t /*i*/, VF t0, VF t1, VF t2, VF t3, VF /*step_max*/) {
    AddExp4(d, exp, sum, t0, t1, t2, t3);
  }
  HWY_INLINE void Step1(DF d, size_t /*i*/, VF t, size_t /*count*/, unsigned k) {
    sum.Add1(exp(d, t), k);
  }
};

struct TwoPassResult {
  double mu;   // sum = mu * 2^nu
  double nu;   // round(max * log2e); -inf for an empty row
  float max;   // true max of t
  bool in_range;
};

template <class Src>
HWY_INLINE TwoPassResult TwoPassScan(const Src& src, size_t n) {
  const DF d;
  TwoPassSum v(d);
  TwoPassResult res;
  res.max = OnlineScanWith(src, n, v);
  const double s = v.sum.Total(d);
  const float nref = v.nref;
  if (res.max == kNegInf && s == 0.0) {  // every logit -inf (NaN gives s NaN)
    res.mu = 0.0;
    res.nu = -std::numeric_limits<double>::infinity();
    res.in_range = true;
    return res;
  }
  res.in_range = std::fabs(res.max) <= kRefMaxAbs && std::isfinite(s);
  if (!res.in_range) {
    res.mu = s;
    res.nu = nref;
    return res;
  }
  // Normalise to nu = round(max * log2e) (the two-pass state of docs/design.md,
  // "Softmax algorithms: passes over memory"), exactly.
  const double nu = std::nearbyint(static_cast<double>(res.max) * kLog2ed);
  res.mu = std::ldexp(s, static_cast<int>(nref - nu));
  res.nu = nu;
  return res;
}
