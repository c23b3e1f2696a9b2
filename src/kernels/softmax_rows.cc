// src/kernels/softmax_rows.cc: batched whole-row softmax, log_softmax and
// logsumexp for the four algorithms (kernels.h, "Whole rows, batched").
//
// One dynamic dispatch per call; the target's code loops over the rows and
// picks the Logits<> instantiation (mask / scale) once per call.
//
// Per algorithm (R = read pass, W = write, see specs/kernels.md):
//  three-pass reload     max (R); e_i -> dst, sum (R+W); dst *= 1/sum (R+W)
//  three-pass recompute  max (R); sum (R); dst = e_i / sum (R+W)
//  two-pass              (mu, nu) sum, no max pass (R); dst = e_i / sum (R+W)
//                        rows out of ExpRef's exact range: three-pass reload
//  online                (ref, d) with lazy rescaling (R); dst = e_i / d (R+W)
// log_softmax: (t - max) - log(sum), in that order; logsumexp: max + log(sum)
// in float64, rounded once. Sums are blocked (exp-inl.h: BlockSum).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/softmax_rows.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/exp-inl.h"
#include "kernels/kernels.h"

HWY_BEFORE_NAMESPACE();
namespace smax::kernels::HWY_NAMESPACE {

enum class RowOp { kSoftmax, kLogSoftmax, kLogSumExp };

// Output of a row whose result is one constant (NaN row, empty row).
HWY_INLINE void ConstRow(RowOp op, float* HWY_RESTRICT dst, size_t n, float value) {
  if (op == RowOp::kLogSumExp) {
    dst[0] = value;
  } else {
    Fill(dst, n, value);
  }
}

HWY_INLINE void NanRow(RowOp op, float* HWY_RESTRICT dst, size_t n) {
  ConstRow(op, dst, n, std::numeric_limits<float>::quiet_NaN());
}

// Every logit is -inf (masked). kZero: softmax 0, log_softmax and logsumexp
// -inf (the log of an empty sum); kNan: NaN.
HWY_INLINE void EmptyRowOut(RowOp op, EmptyRow policy, float* HWY_RESTRICT dst,
                            size_t n) {
  if (policy == EmptyRow::kNan) {
    NanRow(op, dst, n);
  } else {
    ConstRow(op, dst, n, op == RowOp::kSoftmax ? 0.0f : kNegInf);
  }
}

// Three-pass (reload or recompute). The sum uses ExpRef (exact reduction of
// t with N = round(m log2e), no TwoSum) when |m| <= kRefMaxAbs, otherwise
// ExpDiff (TwoSum). Both give e^(t - m) to ~1.5 ulp for every t.
template <class Src>
HWY_INLINE void ThreePassRow(const Src& src, size_t n, float* HWY_RESTRICT dst,
                             RowOp op, bool reload, EmptyRow policy) {
  const MinMax mm = RowMinMax(src, n);
  const float m = mm.max;
  if (m == kNegInf) {
    if (RowHasNaN(src, n)) return NanRow(op, dst, n);
    return EmptyRowOut(op, policy, dst, n);
  }
  if (!(m < kInf)) return NanRow(op, dst, n);  // +inf or NaN max
  const bool use_ref = std::fabs(m) <= kRefMaxAbs;
  const float nref = use_ref ? std::nearbyint(m * kLog2e) : 0.0f;
  // log(sum e^(t - m)) = log(s) + (use_ref ? nref ln2 - m : 0).
  const double shift = use_ref ? nref * kLn2d - static_cast<double>(m) : 0.0;
  const bool store = op == RowOp::kSoftmax && reload;
  double s;
  if (use_ref) {
    const ExpRef e = ExpRef::Make(nref);
    if (ExpRefTable::Usable(m, mm.min, e)) {  // AVX2+: table exp, |m| <= 256
      const ExpRefTable et = ExpRefTable::Make(e, nref);
      s = store ? ExpSum<true>(src, n, et, dst) : ExpSum<false>(src, n, et, nullptr);
    } else if (e.NeverFlushes(mm.min)) {  // the usual case: range of the row < ~85
      const ExpRefNoFlush ef{e};
      s = store ? ExpSum<true>(src, n, ef, dst) : ExpSum<false>(src, n, ef, nullptr);
    } else {
      s = store ? ExpSum<true>(src, n, e, dst) : ExpSum<false>(src, n, e, nullptr);
    }
  } else {
    const ExpDiff e = ExpDiff::Make(m);
    s = store ? ExpSum<true>(src, n, e, dst) : ExpSum<false>(src, n, e, nullptr);
  }
  if (!(s < std::numeric_limits<double>::infinity())) return NanRow(op, dst, n);
  switch (op) {
    case RowOp::kSoftmax: {
      const float inv = static_cast<float>(1.0 / s);
      if (reload) {
        ScaleInPlace(dst, n, inv);
      } else if (use_ref) {
        const ExpRef e = ExpRef::Make(nref, FlushExtra(inv));
        if (e.NeverFlushes(mm.min)) {
          ExpScaleStore(src, n, ExpRefNoFlush{e}, inv, dst);
        } else {
          ExpScaleStore(src, n, e, inv, dst);
        }
      } else {
        ExpScaleStore(src, n, ExpDiff::Make(m, FlushExtra(inv)), inv, dst);
      }
      return;
    }
    case RowOp::kLogSoftmax:
      LogStore(src, n, m, static_cast<float>(std::log(s) + shift), dst);
      return;
    case RowOp::kLogSumExp:
      dst[0] = static_cast<float>(static_cast<double>(m) + (std::log(s) + shift));
      return;
  }
}

// Two-pass: pass 1 is TwoPassScan (exp-inl.h); out-of-range rows (|max| >
// kRefMaxAbs, +inf, NaN) are recomputed with the three-pass algorithm.
template <class Src>
HWY_INLINE void TwoPassRow(const Src& src, size_t n, float* HWY_RESTRICT dst, RowOp op,
                           EmptyRow policy) {
  const TwoPassResult st = TwoPassScan(src, n);
  if (!st.in_range) {
    return ThreePassRow(src, n, dst, op, /*reload=*/op == RowOp::kSoftmax, policy);
  }
  if (st.mu == 0.0) return EmptyRowOut(op, policy, dst, n);
  switch (op) {
    case RowOp::kSoftmax: {
      // y = 2^(n_i - nu) p(r_i) / mu: ExpRef with N = nu.
      const float inv = static_cast<float>(1.0 / st.mu);
      ExpScaleStore(src, n, ExpRef::Make(static_cast<float>(st.nu), FlushExtra(inv)),
                    inv, dst);
      return;
    }
    case RowOp::kLogSoftmax: {
      const double l = std::log(st.mu) + st.nu * kLn2d - static_cast<double>(st.max);
      LogStore(src, n, st.max, static_cast<float>(l), dst);
      return;
    }
    case RowOp::kLogSumExp:
      dst[0] = static_cast<float>(st.nu * kLn2d + std::log(st.mu));
      return;
  }
}

// Online: pass 1 is OnlineScan (exp-inl.h), sum = d * e^ref.
template <class Src>
HWY_INLINE void OnlineRow(const Src& src, size_t n, float* HWY_RESTRICT dst, RowOp op,
                          EmptyRow policy) {
  const OnlineResult st = OnlineScan(src, n);
  if (std::isnan(st.d)) return NanRow(op, dst, n);
  if (st.d == 0.0) return EmptyRowOut(op, policy, dst, n);
  switch (op) {
    case RowOp::kSoftmax: {
      ExpShiftScaleStore(src, n, st.ref, 1.0 / st.d, dst);
      return;
    }
    case RowOp::kLogSoftmax: {
      // log(sum e^(t - max)) = log(d) + ref - max, in float64.
      const double l = std::log(st.d) + (static_cast<double>(st.ref) - st.max);
      LogStore(src, n, st.max, static_cast<float>(l), dst);
      return;
    }
    case RowOp::kLogSumExp:
      dst[0] = static_cast<float>(static_cast<double>(st.ref) + std::log(st.d));
      return;
  }
}

// A row of one element has a closed form, exact for every algorithm:
// softmax 1, log_softmax 0, logsumexp t_0 (NaN / +inf -> NaN, -inf -> the
// empty-row policy). The general paths get it right only to ~1 ulp of the
// exp, and a lone class must have log-probability exactly 0.
HWY_INLINE void SingleElementRows(const Rows& rows, RowOp op) {
  for (int64_t r = 0; r < rows.rows; ++r) {
    float t = rows.src[r * rows.src_stride] * rows.scale;
    if (rows.mask != nullptr) t = t + rows.mask[r * rows.mask_stride];
    float* dst = rows.dst + r * rows.dst_stride;
    if (t == kNegInf) {
      EmptyRowOut(op, rows.empty_row, dst, 1);
    } else if (!(t < kInf)) {
      NanRow(op, dst, 1);
    } else {
      dst[0] = op == RowOp::kSoftmax ? 1.0f : op == RowOp::kLogSoftmax ? 0.0f : t;
    }
  }
}

HWY_NOINLINE void RowsImpl(const Rows& rows, Algorithm algorithm, RowOp op) {
  const size_t n = static_cast<size_t>(rows.cols);
  if (n == 1) return SingleElementRows(rows, op);
  WithLogits(rows.src, rows.mask, rows.scale, [&](const auto& proto) {
    using Src = std::decay_t<decltype(proto)>;
    for (int64_t r = 0; r < rows.rows; ++r) {
      const Src src{rows.src + r * rows.src_stride,
                    rows.mask != nullptr ? rows.mask + r * rows.mask_stride : nullptr,
                    rows.scale};
      float* dst = rows.dst + r * rows.dst_stride;
      switch (algorithm) {
        case Algorithm::kTwoPass:
          TwoPassRow(src, n, dst, op, rows.empty_row);
          break;
        case Algorithm::kOnline:
          OnlineRow(src, n, dst, op, rows.empty_row);
          break;
        case Algorithm::kThreePassRecompute:
          ThreePassRow(src, n, dst, op, /*reload=*/false, rows.empty_row);
          break;
        case Algorithm::kThreePassReload:
        case Algorithm::kAuto:  // ops resolve kAuto; reload is the safe default
        default:
          ThreePassRow(src, n, dst, op, /*reload=*/true, rows.empty_row);
          break;
      }
    }
  });
}

void SoftmaxRowsImpl(const Rows& rows, Algorithm algorithm) {
  RowsImpl(rows, algorithm, RowOp::kSoftmax);
}
void LogSoftmaxRowsImpl(const Rows& rows, Algorithm algorithm) {
  RowsImpl(rows, algorithm, RowOp::kLogSoftmax);
}
void LogSumExpRowsImpl(const Rows& rows, Algorithm algorithm) {
  RowsImpl(rows, algorithm, RowOp::kLogSumExp);
}

}  // namespace smax::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace smax::kernels {

HWY_EXPORT(SoftmaxRowsImpl);
HWY_EXPORT(LogSoftmaxRowsImpl);
HWY_EXPORT(LogSumExpRowsImpl);

void softmax_rows(const Rows& rows, Algorithm algorithm) noexcept {
  HWY_DYNAMIC_DISPATCH(SoftmaxRowsImpl)(rows, algorithm);
}
void log_softmax_rows(const Rows& rows, Algorithm algorithm) noexcept {
  HWY_DYNAMIC_DISPATCH(LogSoftmaxRowsImpl)(rows, algorithm);
}
void logsumexp_rows(const Rows& rows, Algorithm algorithm) noexcept {
  HWY_DYNAMIC_DISPATCH(LogSumExpRowsImpl)(rows, algorithm);
}

}  // namespace smax::kernels
#endif  // HWY_ONCE
