// src/kernels/xent-inl.h: the row pieces the cross-entropy kernels
// (cross_entropy.cc) and the linear cross-entropy kernels
// (linear_cross_entropy.cc) share: the row sources (plain and softcapped
// logits), the online (max, sum) with the entropy term carried across
// rebases, the dispatch of the scan's compile-time options, and the
// one-write gradient.
//
// Softcap: t = cap * tanh(u / cap) (Highway's Tanh, <= 4 ulp) with +-inf
// and NaN u passed through. Its derivative in the gradient is computed as
// 4E / (1 + E)^2 with E = e^(-2|u / cap|) (no cancellation, unlike
// 1 - tanh^2 near |tanh| = 1).
//
// Carried sums: at a rebase (rare) the partial sums are totalled in float64
// and carried: S0' = f S0, S1' = f (S1 + (ref - ref') S0) with
// f = e^(ref - ref').
//
// Included only from kernels/row-inl.h, inside its per-target namespace
// smax::kernels::HWY_NAMESPACE (with `hn`, the standard and Highway headers
// and the pieces listed before this one in row-inl.h already in scope).
#ifndef SMAX_KERNELS_ROW_INL_PIECE_
#error "include kernels/row-inl.h, not its pieces"
#endif

// ---- row sources: t_j (and what the softcap derivative needs) ---------------
// Plain rows: t = x (the op layer formed the logits).
// `x` is not restrict: the gradient may be written over it in place (each
// element is loaded before its own store).
struct PlainSrc {
  static constexpr bool kCap = false;
  static constexpr bool kRawKey = false;  // argmax over t itself
  const float* x;
  HWY_INLINE VF Load(DF d, size_t i) const { return hn::LoadU(d, x + i); }
  // Lanes [count, N) are -inf.
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

// Calls f(src) with the row source of logits x (softcap 0 = off; mask
// nullable, softcap only).
template <class F>
HWY_INLINE void WithSrc(const float* x, const float* mask, float softcap, F&& f) {
  if (softcap > 0.0f) {
    const float inv = 1.0f / softcap;
    if (mask != nullptr) {
      f(CapSrc<true>{x, mask, softcap, inv});
    } else {
      f(CapSrc<false>{x, nullptr, softcap, inv});
    }
  } else {
    f(PlainSrc{x});
  }
}

// Calls f(std::integral_constant<int, kSums>, std::integral_constant<bool,
// kEntropy>) for the scan's options: kSums 0 none, 1 unweighted (sum t,
// count), 2 weighted (sum w t, sum w).
template <class F>
HWY_INLINE void WithScanOptions(bool sums, const float* weight, bool entropy, F&& f) {
  using E1 = std::integral_constant<bool, true>;
  using E0 = std::integral_constant<bool, false>;
  const int s = !sums ? 0 : (weight != nullptr ? 2 : 1);
  if (entropy) {
    if (s == 0) f(std::integral_constant<int, 0>{}, E1{});
    if (s == 1) f(std::integral_constant<int, 1>{}, E1{});
    if (s == 2) f(std::integral_constant<int, 2>{}, E1{});
  } else {
    if (s == 0) f(std::integral_constant<int, 0>{}, E0{});
    if (s == 1) f(std::integral_constant<int, 1>{}, E0{});
    if (s == 2) f(std::integral_constant<int, 2>{}, E0{});
  }
}

// ---- the online (max, sum) with carried sums ----------------------------------
// sum_j e^(t_j - ref) and (kEntropy) sum_j e^(t_j - ref) (t_j - ref), the
// part of a loss scan's OnlineScanWith visitor that moves with the
// reference. A rebase carries exact zeros as zeros: f overflows at the first
// rebase when ref = 0 >> ref' (every logit below about -709), where the sums
// are 0 (0 * inf would be NaN), or NaN, which must survive.
template <bool kEntropy>
struct CarriedSum {
  BlockSum sum, ent;
  double carry0 = 0.0, carry1 = 0.0;
  OnlineRef r;
  explicit CarriedSum(DF d) : sum(d), ent(d) {}

  HWY_INLINE float Rebase(DF d, VF step_max) {  // rare path
    const float new_ref = ReduceMax(d, step_max);
    const double s0 = carry0 + sum.Total(d);
    const double f = std::exp(static_cast<double>(r.ref) - static_cast<double>(new_ref));
    if (kEntropy) {
      const double s1 = carry1 + ent.Total(d);
      carry1 = (s0 == 0.0 && s1 == 0.0)
                   ? 0.0
                   : f * (s1 + (static_cast<double>(r.ref) - static_cast<double>(new_ref)) * s0);
      ent = BlockSum(d);
    }
    carry0 = s0 == 0.0 ? 0.0 : f * s0;
    sum = BlockSum(d);
    return r.Move(new_ref);
  }
  // e (t - ref), 0 where e = 0 (no 0 * inf for masked t).
  HWY_INLINE VF EntropyTerm(DF d, VF t, VF e) const {
    return hn::IfThenZeroElse(hn::Eq(e, hn::Zero(d)), hn::Mul(e, hn::Sub(t, hn::Set(d, r.ref))));
  }
  // Adds the 4 vectors of a step; e[j] = e^(t_j - ref).
  HWY_INLINE void Add4(DF d, VF t0, VF t1, VF t2, VF t3, VF* e) {
    e[0] = r.exp(d, t0);
    e[1] = r.exp(d, t1);
    e[2] = r.exp(d, t2);
    e[3] = r.exp(d, t3);
    sum.Add4(d, e[0], e[1], e[2], e[3]);
    if (kEntropy) {
      ent.Add4(d, EntropyTerm(d, t0, e[0]), EntropyTerm(d, t1, e[1]), EntropyTerm(d, t2, e[2]),
               EntropyTerm(d, t3, e[3]));
    }
  }
  // Adds the k-th single vector; returns e^(t - ref).
  HWY_INLINE VF Add1(DF d, VF t, unsigned k) {
    const VF e = ExpTail(r.exp, d, t);
    sum.Add1(e, k);
    if (kEntropy) ent.Add1(EntropyTerm(d, t, e), k);
    return e;
  }
  HWY_INLINE double D(DF d) { return carry0 + sum.Total(d); }
  HWY_INLINE double SumEt(DF d) { return carry1 + ent.Total(d); }
};

// ---- gradient --------------------------------------------------------------------
// dst_j = scale cap'_j (e^(t_j - shift) factor - (b + bq q_j) w_j), 0 where
// t_j = -inf (kW: w_j given, else 1; kQ: q_j given, else 0). kStream: the
// full vectors are written with streaming stores (pass-inl.h, StoreOut),
// after a head up to dst's first aligned vector (StreamAligned(dst, n) must
// hold); each element is computed alone, so the bits are the same.
template <bool kW, bool kQ, bool kStream, class Src, class Exp>
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
  // The c < N elements from i, as one partial vector (the head and the tail).
  auto partial = [&](size_t i, size_t c) {
    VF a;
    const VF t = src.LoadTail2(d, i, c, &a);
    const VF g = f(t, a, kW ? LoadTailZero(d, w + i, c) : one,
                   kQ ? LoadTailZero(d, q + i, c) : zero);
    StoreTail(d, g, dst + i, c);
  };
  size_t i = 0;
  if constexpr (kStream) {
    i = HeadToAlign(d, dst, n);
    if (i != 0) partial(0, i);
  }
  // In place (dst == src.x): each vector is loaded before it is stored.
  for (; i + 2 * N <= n; i += 2 * N) {
    VF a0, a1;
    const VF t0 = src.Load2(d, i, &a0);
    const VF t1 = src.Load2(d, i + N, &a1);
    const VF g0 = f(t0, a0, kW ? hn::LoadU(d, w + i) : one, kQ ? hn::LoadU(d, q + i) : zero);
    const VF g1 = f(t1, a1, kW ? hn::LoadU(d, w + i + N) : one,
                    kQ ? hn::LoadU(d, q + i + N) : zero);
    StoreOut<kStream>(g0, d, dst + i);
    StoreOut<kStream>(g1, d, dst + i + N);
  }
  for (; i + N <= n; i += N) {
    VF a;
    const VF t = src.Load2(d, i, &a);
    StoreOut<kStream>(
        f(t, a, kW ? hn::LoadU(d, w + i) : one, kQ ? hn::LoadU(d, q + i) : zero), d, dst + i);
  }
  if (i < n) partial(i, n - i);
}

// GradT with e^(t - shift) for an arbitrary finite shift: ExpRef with
// N = round(shift log2e) and e^(N ln2 - shift) folded into the factor in
// float64 (as pass-inl.h's ExpShiftScaleStore) when |shift| <= kRefMaxAbs,
// else ExpDiff.
template <bool kW, bool kQ, bool kStream, class Src>
HWY_INLINE void GradExp(const Src& src, size_t n, float shift, double factor, float b, float bq,
                        const float* HWY_RESTRICT w, const float* HWY_RESTRICT q, float scale,
                        float* dst) {
  if (std::fabs(shift) <= kRefMaxAbs) {
    const float nref = std::nearbyint(shift * kLog2e);
    const float f = static_cast<float>(
        factor * std::exp(static_cast<double>(nref) * kLn2d - static_cast<double>(shift)));
    GradT<kW, kQ, kStream>(src, n, ExpRef::Make(nref, FlushExtra(std::fabs(f))), f, b, bq, w, q, scale,
                  dst);
  } else {
    const float f = static_cast<float>(factor);
    GradT<kW, kQ, kStream>(src, n, ExpDiff::Make(shift, FlushExtra(std::fabs(f))), f, b, bq, w, q, scale,
                  dst);
  }
}
