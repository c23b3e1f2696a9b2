// src/kernels/softmax_narrow.cc: batched whole-row softmax, log_softmax and
// logsumexp with bf16 / f16 storage (softmax_narrow.h), and the contiguous
// row conversions are kernels/dtype_convert.h's.
//
// The row driver mirrors softmax_rows.cc step for step (same scans, same
// exp choice, same sums, same last passes and the same fusing of a row's
// last pass with the next row's (min, max) scan), with two differences:
//  * the source is RowLogits<S> (narrow-inl.h), so every logit is the f32
//    value Logits<> forms from the widened row;
//  * outputs go through AnyOut, which rounds each f32 result once.
// Three-pass reload into a narrow dst cannot keep its exps in dst: its last
// pass recomputes e_i with the sum pass's exp functor (SumExp) and applies
// reload's scale and flush (ExpScaleOutPass<kFlush>), which are reload's f32
// values. The contract, "narrow == round(f32 kernel, same algorithm)", is in
// softmax_narrow.h and pinned by tests/test_softmax_narrow.cc.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/softmax_narrow.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cmath>
#include <type_traits>

#include "kernels/row-inl.h"
#include "kernels/narrow-inl.h"
#include "kernels/narrow_pass-inl.h"
#include "kernels/softmax_narrow.h"

HWY_BEFORE_NAMESPACE();
namespace smax::kernels::HWY_NAMESPACE {
namespace narrow_fwd {

enum class RowOp { kSoftmax, kLogSoftmax, kLogSumExp };

template <class O>
HWY_INLINE void ConstRow(RowOp op, const O& out, size_t n, float value) {
  if (op == RowOp::kLogSumExp) {
    out.Put(0, value);
  } else {
    FillOut(out, n, value);
  }
}
template <class O>
HWY_INLINE void NanRow(RowOp op, const O& out, size_t n) {
  ConstRow(op, out, n, std::numeric_limits<float>::quiet_NaN());
}
template <class O>
HWY_INLINE void EmptyRowOut(RowOp op, EmptyRow policy, const O& out, size_t n) {
  if (policy == EmptyRow::kNan) {
    NanRow(op, out, n);
  } else {
    ConstRow(op, out, n, op == RowOp::kSoftmax ? 0.0f : kNegInf);
  }
}

// The exp the three-pass sum used (softmax_rows.cc's ThreePassToSum):
// WithRefExp(m, t_min, nref) when use_ref, else ExpDiff(m).
struct SumExp {
  bool use_ref = false;
  float m = 0.0f, t_min = 0.0f, nref = 0.0f;
};
template <class F>
HWY_INLINE void WithSumExp(const SumExp& e, F&& f) {
  if (e.use_ref) {
    WithRefExp(e.m, e.t_min, e.nref, f);
  } else {
    f(ExpDiff::Make(e.m));
  }
}

// ---- log_softmax values near 0 into a narrow dst ----------------------------
// A row whose max m dominates has log_sum = log(1 + s1), s1 = the sum of
// e^(t_i - m) over the other terms, a small number; log(s) carries the f32
// sum's absolute error (~1e-6), more than an ulp of bf16 / f16 values near 0
// (the max element's output is -log_sum). Below kNearZeroLogSum the narrow
// paths recompute log_sum as log1p(s1) with s1 summed on its own (relative
// error ~16 * 2^-24), so every output, (t_i - m) - log_sum with no
// cancellation, is within 1 ulp of its narrow type. log_sum < 2^-5 implies
// m is attained once (twice gives log_sum >= log 2). softmax_narrow.h.
constexpr float kNearZeroLogSum = kNearZeroLogSumBound;

// The row with the lanes equal to m read as -inf (their exp is 0).
template <class Src>
struct BelowMax {
  const Src& src;
  float m;
  HWY_INLINE VF Load(DF d, size_t i) const { return Drop(d, src.Load(d, i)); }
  HWY_INLINE VF LoadTail(DF d, size_t i, size_t count) const {
    return Drop(d, src.LoadTail(d, i, count));
  }
  HWY_INLINE VF Drop(DF d, VF t) const {
    return hn::IfThenElse(hn::Lt(t, hn::Set(d, m)), t, hn::Set(d, kNegInf));
  }
};

// log1p(s1) for a row of finite max m attained once.
template <class Src>
HWY_INLINE float NearZeroLogSum(const Src& src, size_t n, float m) {
  const BelowMax<Src> below{src, m};
  double s1 = ExpSum<false>(below, n, ExpDiff::Make(m), nullptr);
  if (s1 < static_cast<double>(n) * 0x1p-100) {
    // The exp flushes terms below 2^-125 to 0: up to n 2^-125 of s1 may be
    // missing, more than 2^-25 of it below this threshold. Sum every term
    // in float64 then.
    const DF d;
    const size_t N = hn::Lanes(d);
    HWY_ALIGN float lanes[kMaxLanes];
    s1 = 0.0;
    for (size_t i = 0; i < n; i += N) {
      hn::Store(i + N <= n ? below.Load(d, i) : below.LoadTail(d, i, n - i), d, lanes);
      for (size_t k = 0; k < N; ++k) {
        s1 += std::exp(static_cast<double>(lanes[k]) - static_cast<double>(m));
      }
    }
  }
  return static_cast<float>(std::log1p(s1));
}

struct LastPass {
  enum class Kind {
    kNone, kScale, kScaleNoFlush, kExpScale, kExpScaleNoFlush, kScratchScale,
    kScratchScaleNoFlush, kLog
  };
  Kind kind = Kind::kNone;
  float a = 0.0f;  // kScale*, kExpScale*, kScratchScale*: 1 / sum; kLog: the shift m
  float b = 0.0f;  // kLog: log sum
  SumExp exp;      // kExpScale*: the sum pass's exp
  const float* scratch = nullptr;  // kScratchScale*: the stored exps
};

// softmax_rows.cc's ThreePassToSum with a sink. An f32 sink keeps reload's
// stored exps; a narrow one keeps them in `scratch` (n floats) when given
// (kScratchScale*: one exp per element), else gets kExpScale* (recompute
// with the sum's exp). Both give reload's f32 values, rounded once.
template <class Src, class O>
HWY_INLINE LastPass ThreePassToSum(const Src& src, size_t n, const MinMax& mm, const O& out,
                                   RowOp op, bool reload, EmptyRow policy,
                                   float* scratch = nullptr,
                                   const typename Src::T* ahead = nullptr) {
  const float m = mm.max;
  if (m == kNegInf) {
    if (RowHasNaN(src, n)) {
      NanRow(op, out, n);
    } else {
      EmptyRowOut(op, policy, out, n);
    }
    return {};
  }
  if (!(m < kInf)) {
    NanRow(op, out, n);
    return {};
  }
  SumExp sum_exp;
  sum_exp.use_ref = std::fabs(m) <= kRefMaxAbs;
  sum_exp.m = m;
  sum_exp.t_min = mm.min;
  sum_exp.nref = sum_exp.use_ref ? std::nearbyint(m * kLog2e) : 0.0f;
  const double shift =
      sum_exp.use_ref ? sum_exp.nref * kLn2d - static_cast<double>(m) : 0.0;
  bool store = false;
  float* store_to = nullptr;
  if (IsF32Out(out)) {
    store = op == RowOp::kSoftmax && reload;
    store_to = out.F32();
  } else if (scratch != nullptr) {
    store = op == RowOp::kSoftmax && reload;
    store_to = scratch;
  }
  // The exp pass prefetches the next row and, where this row's last pass
  // writes it (softmax and log_softmax, not into the exps' own f32 dst),
  // this row's output for writing.
  RowPrefetch prefetch;
  prefetch.next = ahead;
  prefetch.next_bytes = sizeof(typename Src::T);
  if (op != RowOp::kLogSumExp && !(store && store_to == out.F32())) {
    prefetch.out = out.p;
    prefetch.out_bytes = OutBytes(out);
  }
  double s = 0.0;
  WithSumExp(sum_exp, [&](const auto& exp) {
    s = store ? ExpSum<true>(src, n, exp, store_to, prefetch)
              : ExpSum<false>(src, n, exp, nullptr, prefetch);
  });
  if (!(s < std::numeric_limits<double>::infinity())) {
    NanRow(op, out, n);
    return {};
  }
  switch (op) {
    case RowOp::kSoftmax: {
      const float inv = static_cast<float>(1.0 / s);
      if (reload) {
        const bool normal = softmax_outputs_normal(mm.min, m, static_cast<int64_t>(n));
        LastPass last;
        last.a = inv;
        last.exp = sum_exp;
        if (IsF32Out(out)) {
          last.kind = normal ? LastPass::Kind::kScaleNoFlush : LastPass::Kind::kScale;
        } else if (scratch != nullptr) {
          last.kind = normal ? LastPass::Kind::kScratchScaleNoFlush : LastPass::Kind::kScratchScale;
          last.scratch = scratch;
        } else {
          last.kind = normal ? LastPass::Kind::kExpScaleNoFlush : LastPass::Kind::kExpScale;
        }
        return last;
      }
      if (sum_exp.use_ref) {
        const float nref = sum_exp.nref;
        const ExpRef e = ExpRef::Make(nref, FlushExtra(inv));
        if (ExpRefTable::Usable(m, mm.min, ExpRef::Make(nref)) &&
            softmax_outputs_normal(mm.min, m, static_cast<int64_t>(n))) {
          ExpScaleOut(src, n, ExpRefTable::Make(e, nref), inv, out);
        } else if (e.NeverFlushes(mm.min)) {
          ExpScaleOut(src, n, ExpRefNoFlush{e}, inv, out);
        } else {
          ExpScaleOut(src, n, e, inv, out);
        }
      } else {
        ExpScaleOut(src, n, ExpDiff::Make(m, FlushExtra(inv)), inv, out);
      }
      return {};
    }
    case RowOp::kLogSoftmax: {
      LastPass last;
      last.kind = LastPass::Kind::kLog;
      last.a = m;
      last.b = static_cast<float>(std::log(s) + shift);
      if (!IsF32Out(out) && last.b < kNearZeroLogSum) last.b = NearZeroLogSum(src, n, m);
      return last;
    }
    case RowOp::kLogSumExp:
      out.Put(0, static_cast<float>(static_cast<double>(m) + (std::log(s) + shift)));
      return {};
  }
  return {};
}

// RowMinMaxWith (scan-inl.h) over a plain bf16 row, the same (min, max):
// a step reads 4N bf16 as two vectors of u32 pairs and widens each into
// its even (u << 16) and odd (u & 0xffff0000) elements, 1 op per vector
// instead of vpmovzxwd + shift (min and max do not depend on which lane
// holds which element). The pass runs on the same 4 vectors per step.
template <class Pass>
HWY_INLINE MinMax Bf16MinMaxWith(const uint16_t* HWY_RESTRICT x, size_t n, const Pass& pass) {
  const DF d;
  const DU32 du;
  const size_t N = hn::Lanes(d);
  const auto high = hn::Set(du, 0xffff0000u);
  VF m0 = hn::Set(d, kNegInf), m1 = m0, m2 = m0, m3 = m0;
  VF l0 = hn::Set(d, kInf), l1 = l0, l2 = l0, l3 = l0;
  size_t i = 0;
  for (; i + kUnroll * N <= n; i += kUnroll * N) {
    const auto u0 = hn::LoadU(du, reinterpret_cast<const uint32_t*>(x + i));
    const auto u1 = hn::LoadU(du, reinterpret_cast<const uint32_t*>(x + i + 2 * N));
    const VF t0 = hn::BitCast(d, hn::ShiftLeft<16>(u0));
    const VF t1 = hn::BitCast(d, hn::And(u0, high));
    const VF t2 = hn::BitCast(d, hn::ShiftLeft<16>(u1));
    const VF t3 = hn::BitCast(d, hn::And(u1, high));
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
    const VF t = LoadWiden<Storage::kBF16>(x + i);
    pass.Vector(d, i);
    m0 = hn::Max(m0, t);
    l0 = hn::Min(l0, t);
  }
  if (i < n) {
    const VF t = LoadWidenTail<Storage::kBF16>(x + i, n - i);
    pass.Tail(d, i, n - i);
    const auto valid = hn::FirstN(d, n - i);
    m1 = hn::Max(m1, hn::IfThenElse(valid, t, hn::Set(d, kNegInf)));
    l1 = hn::Min(l1, hn::IfThenElse(valid, t, hn::Set(d, kInf)));
  }
  m0 = hn::Max(hn::Max(m0, m1), hn::Max(m2, m3));
  l0 = hn::Min(hn::Min(l0, l1), hn::Min(l2, l3));
  return MinMax{ReduceMin(d, l0), ReduceMax(d, m0)};
}

// A plain f16 row for the (min, max) scan alone: F16C's widening without
// WidenF16's NaN re-check (which keeps signalling NaN payloads for the
// values the kernels compute with; a NaN's payload does not change which
// row the scan's min and max make NaN).
struct F16ScanSource {
  const uint16_t* HWY_RESTRICT x;
  HWY_INLINE VF Load(DF d, size_t i) const {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(x + i)));
  }
  HWY_INLINE VF LoadTail(DF d, size_t i, size_t count) const {
    const VF t = LoadWidenTail<Storage::kF16>(x + i, count);
    return hn::IfThenElse(hn::FirstN(d, count), t, hn::Set(d, kNegInf));
  }
};

// Not inlined: compiled inside the whole row driver (RowsImpl), GCC kept
// the scan's accumulators on the stack (a load and a store per vector).
template <class Src, class Pass>
HWY_NOINLINE MinMax ScanWithPass(const Src& next, size_t n, const Pass& pass) {
  // x86 only: the pair loads are u32 loads of 2-byte aligned rows.
  if constexpr (std::is_same_v<Src, RowLogits<Storage::kBF16, true>> && HWY_ARCH_X86) {
    return Bf16MinMaxWith(next.x, n, pass);
  } else if constexpr (std::is_same_v<Src, RowLogits<Storage::kF16, true>> && kHaveF16C) {
    return RowMinMaxWith(F16ScanSource{next.x}, n, pass);
  } else {
    return RowMinMaxWith(next, n, pass);
  }
}
template <class Src, class Pass>
HWY_INLINE MinMax PassThenScan(const Pass& pass, size_t n, const Src* next) {
  if (next != nullptr) return ScanWithPass(*next, n, pass);
  RunPass(n, pass);
  return MinMax{};
}

template <class Src, class O>
HWY_INLINE MinMax FinishRow(const LastPass& last, const Src& src, size_t n, const O& out,
                            const Src* next) {
  switch (last.kind) {
    case LastPass::Kind::kScale:
    case LastPass::Kind::kScaleNoFlush:
      if (last.kind == LastPass::Kind::kScale) {
        return PassThenScan(ScalePass<true>{out.F32(), last.a}, n, next);
      }
      return PassThenScan(ScalePass<false>{out.F32(), last.a}, n, next);
    case LastPass::Kind::kScratchScale:
      return PassThenScan(ScratchScaleOutPass<true, O>{last.scratch, out, last.a}, n, next);
    case LastPass::Kind::kScratchScaleNoFlush:
      return PassThenScan(ScratchScaleOutPass<false, O>{last.scratch, out, last.a}, n, next);
    case LastPass::Kind::kExpScale:
    case LastPass::Kind::kExpScaleNoFlush: {
      MinMax mm{};
      const bool flush = last.kind == LastPass::Kind::kExpScale;
      WithSumExp(last.exp, [&](const auto& exp) {
        using Exp = std::decay_t<decltype(exp)>;
        if (flush) {
          mm = PassThenScan(ExpScaleOutPass<true, Src, Exp, O>{src, exp, out, last.a}, n, next);
        } else {
          mm = PassThenScan(ExpScaleOutPass<false, Src, Exp, O>{src, exp, out, last.a}, n, next);
        }
      });
      return mm;
    }
    case LastPass::Kind::kLog:
      return PassThenScan(LogOutPass<Src, O>{src, out, last.a, last.b}, n, next);
    case LastPass::Kind::kNone:
      break;
  }
  return PassThenScan(NoPass{}, n, next);
}

template <class Src, class O>
HWY_INLINE void ThreePassRow(const Src& src, size_t n, const O& out, RowOp op, bool reload,
                             EmptyRow policy) {
  const LastPass last = ThreePassToSum(src, n, RowMinMax(src, n), out, op, reload, policy);
  FinishRow<Src>(last, src, n, out, nullptr);
}

// Batched three-pass rows, row r's last pass fused with row r+1's scan.
template <class Src, class O, class RowAt>
HWY_INLINE void ThreePassRows(int64_t rows, size_t n, const RowAt& row_at, RowOp op, bool reload,
                              EmptyRow policy, float* scratch) {
  if (rows <= 0) return;
  O out{};
  Src src = row_at(0, &out);
  // The first row's scan is the fused scans' function too, so a row's
  // (min, max) bits do not depend on where its range starts.
  MinMax mm = PassThenScan(NoPass{}, n, &src);
  for (int64_t r = 0; r < rows; ++r) {
    // Row r's sum pass prefetches row r + 1 (read next by the fused pass).
    O next_out{};
    const Src next = r + 1 < rows ? row_at(r + 1, &next_out) : Src{};
    // Row r's last pass reads the scratch before row r + 1's sum refills it.
    const LastPass last =
        ThreePassToSum(src, n, mm, out, op, reload, policy, scratch, r + 1 < rows ? next.x : nullptr);
    if (r + 1 == rows) {
      FinishRow<Src>(last, src, n, out, nullptr);
      return;
    }
    mm = FinishRow(last, src, n, out, &next);
    src = next;
    out = next_out;
  }
}

template <class Src, class O>
HWY_INLINE void TwoPassRow(const Src& src, size_t n, const O& out, RowOp op, EmptyRow policy) {
  const TwoPassResult st = TwoPassScan(src, n);
  if (!st.in_range) {
    return ThreePassRow(src, n, out, op, /*reload=*/op == RowOp::kSoftmax, policy);
  }
  if (st.mu == 0.0) return EmptyRowOut(op, policy, out, n);
  switch (op) {
    case RowOp::kSoftmax: {
      const float inv = static_cast<float>(1.0 / st.mu);
      ExpScaleOut(src, n, ExpRef::Make(static_cast<float>(st.nu), FlushExtra(inv)), inv, out);
      return;
    }
    case RowOp::kLogSoftmax: {
      const double l = std::log(st.mu) + st.nu * kLn2d - static_cast<double>(st.max);
      float log_sum = static_cast<float>(l);
      if (!IsF32Out(out) && log_sum < kNearZeroLogSum) log_sum = NearZeroLogSum(src, n, st.max);
      RunPass(n, LogOutPass<Src, O>{src, out, st.max, log_sum});
      return;
    }
    case RowOp::kLogSumExp:
      out.Put(0, static_cast<float>(st.nu * kLn2d + std::log(st.mu)));
      return;
  }
}

template <class Src, class O>
HWY_INLINE void OnlineRow(const Src& src, size_t n, const O& out, RowOp op, EmptyRow policy) {
  const OnlineResult st = OnlineScan(src, n);
  if (std::isnan(st.d)) return NanRow(op, out, n);
  if (st.d == 0.0) return EmptyRowOut(op, policy, out, n);
  switch (op) {
    case RowOp::kSoftmax:
      ExpShiftScaleOut(src, n, st.ref, 1.0 / st.d, out);
      return;
    case RowOp::kLogSoftmax: {
      const double l = std::log(st.d) + (static_cast<double>(st.ref) - st.max);
      float log_sum = static_cast<float>(l);
      if (!IsF32Out(out) && log_sum < kNearZeroLogSum) log_sum = NearZeroLogSum(src, n, st.max);
      RunPass(n, LogOutPass<Src, O>{src, out, st.max, log_sum});
      return;
    }
    case RowOp::kLogSumExp:
      out.Put(0, static_cast<float>(static_cast<double>(st.ref) + std::log(st.d)));
      return;
  }
}

// n == 1: softmax 1, log_softmax 0, logsumexp t_0 (softmax_rows.cc).
template <class Src, class O>
HWY_INLINE void SingleElementRow(const Src& src, const O& out, RowOp op, EmptyRow policy) {
  const DF d;
  const float t = hn::GetLane(src.LoadTail(d, 0, 1));
  if (t == kNegInf) {
    EmptyRowOut(op, policy, out, 1);
  } else if (!(t < kInf)) {
    NanRow(op, out, 1);
  } else {
    out.Put(0, op == RowOp::kSoftmax ? 1.0f : op == RowOp::kLogSoftmax ? 0.0f : t);
  }
}

HWY_INLINE Storage StorageOf(DType t) {
  return t == DType::kBF16 ? Storage::kBF16 : t == DType::kF16 ? Storage::kF16 : Storage::kF32;
}

// The fast path: dst of the input's storage, no mask, scale 1 and a
// three-pass algorithm (auto's choice): source and sink fixed at compile
// time. The same arithmetic as RowsTyped's, so the same bits.
template <Storage S>
HWY_INLINE void RowsSameStorage(const NarrowRows& rows, Algorithm algorithm, RowOp op) {
  using Src = RowLogits<S, /*kPlain=*/true>;
  using T = typename Src::T;
  const size_t n = static_cast<size_t>(rows.cols);
  const auto* src_base = static_cast<const T*>(rows.src);
  const Out<S> dst_base{static_cast<T*>(rows.dst)};
  auto row_at = [&](int64_t r, Out<S>* out) {
    *out = dst_base.At(r * rows.dst_stride);
    return Src{src_base + r * rows.src_stride, nullptr, 1.0f, false};
  };
  const bool reload = algorithm != Algorithm::kThreePassRecompute;
  ThreePassRows<Src, Out<S>>(rows.rows, n, row_at, op, reload, rows.empty_row,
                             reload ? rows.scratch : nullptr);
}

HWY_INLINE bool TakesSameStoragePath(const NarrowRows& rows, Algorithm algorithm) {
  return rows.dst_type == rows.src_type && rows.mask == nullptr && rows.scale == 1.0f &&
         rows.cols > 1 &&
         (algorithm == Algorithm::kAuto || algorithm == Algorithm::kThreePassReload ||
          algorithm == Algorithm::kThreePassRecompute);
}

template <Storage SIn>
HWY_INLINE void RowsTyped(const NarrowRows& rows, Algorithm algorithm, RowOp op) {
  using Src = RowLogits<SIn>;
  using InT = typename Src::T;
  const size_t n = static_cast<size_t>(rows.cols);
  const auto* src_base = static_cast<const InT*>(rows.src);
  const AnyOut dst_base{rows.dst, StorageOf(rows.dst_type)};
  const float* mask = rows.mask;
  auto row_at = [&](int64_t r, AnyOut* out) {
    *out = dst_base.At(r * rows.dst_stride);
    return Src{src_base + r * rows.src_stride,
               mask != nullptr ? mask + r * rows.mask_stride : nullptr, rows.scale,
               rows.scale != 1.0f};
  };
  if (n == 1) {
    for (int64_t r = 0; r < rows.rows; ++r) {
      AnyOut out{};
      const Src src = row_at(r, &out);
      SingleElementRow(src, out, op, rows.empty_row);
    }
    return;
  }
  switch (algorithm) {
    case Algorithm::kTwoPass:
    case Algorithm::kOnline:
      for (int64_t r = 0; r < rows.rows; ++r) {
        AnyOut out{};
        const Src src = row_at(r, &out);
        if (algorithm == Algorithm::kTwoPass) {
          TwoPassRow(src, n, out, op, rows.empty_row);
        } else {
          OnlineRow(src, n, out, op, rows.empty_row);
        }
      }
      return;
    case Algorithm::kThreePassRecompute:
      return ThreePassRows<Src, AnyOut>(rows.rows, n, row_at, op, false, rows.empty_row, nullptr);
    case Algorithm::kThreePassReload:
    case Algorithm::kAuto:
    default:
      return ThreePassRows<Src, AnyOut>(rows.rows, n, row_at, op, true, rows.empty_row,
                                        rows.scratch);
  }
}

HWY_NOINLINE void RowsImpl(const NarrowRows& rows, Algorithm algorithm, RowOp op) {
  if (TakesSameStoragePath(rows, algorithm)) {
    if (rows.src_type == DType::kBF16) return RowsSameStorage<Storage::kBF16>(rows, algorithm, op);
    if (rows.src_type == DType::kF16) return RowsSameStorage<Storage::kF16>(rows, algorithm, op);
  }
  switch (StorageOf(rows.src_type)) {
    case Storage::kBF16: return RowsTyped<Storage::kBF16>(rows, algorithm, op);
    case Storage::kF16: return RowsTyped<Storage::kF16>(rows, algorithm, op);
    case Storage::kF32: return RowsTyped<Storage::kF32>(rows, algorithm, op);
  }
}

}  // namespace narrow_fwd

float NearZeroLogSumImpl(const float* t, size_t n, float m) {
  const Logits<false, false> src{t, nullptr, 1.0f};
  return narrow_fwd::NearZeroLogSum(src, n, m);
}

void SoftmaxRowsNarrowImpl(const NarrowRows& rows, Algorithm algorithm) {
  narrow_fwd::RowsImpl(rows, algorithm, narrow_fwd::RowOp::kSoftmax);
}
void LogSoftmaxRowsNarrowImpl(const NarrowRows& rows, Algorithm algorithm) {
  narrow_fwd::RowsImpl(rows, algorithm, narrow_fwd::RowOp::kLogSoftmax);
}
void LogSumExpRowsNarrowImpl(const NarrowRows& rows, Algorithm algorithm) {
  narrow_fwd::RowsImpl(rows, algorithm, narrow_fwd::RowOp::kLogSumExp);
}

}  // namespace smax::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace smax::kernels {

HWY_EXPORT(SoftmaxRowsNarrowImpl);
HWY_EXPORT(LogSoftmaxRowsNarrowImpl);
HWY_EXPORT(LogSumExpRowsNarrowImpl);
HWY_EXPORT(NearZeroLogSumImpl);

float near_zero_log_sum(const float* t, size_t n, float m) noexcept {
  return HWY_DYNAMIC_DISPATCH(NearZeroLogSumImpl)(t, n, m);
}

void softmax_rows_narrow(const NarrowRows& rows, Algorithm algorithm) noexcept {
  HWY_DYNAMIC_DISPATCH(SoftmaxRowsNarrowImpl)(rows, algorithm);
}
void log_softmax_rows_narrow(const NarrowRows& rows, Algorithm algorithm) noexcept {
  HWY_DYNAMIC_DISPATCH(LogSoftmaxRowsNarrowImpl)(rows, algorithm);
}
void logsumexp_rows_narrow(const NarrowRows& rows, Algorithm algorithm) noexcept {
  HWY_DYNAMIC_DISPATCH(LogSumExpRowsNarrowImpl)(rows, algorithm);
}
}  // namespace smax::kernels
#endif  // HWY_ONCE
