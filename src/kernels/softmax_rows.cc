// src/kernels/softmax_rows.cc: batched whole-row softmax, log_softmax and
// logsumexp for the four algorithms (kernels.h, "Whole rows, batched").
//
// One dynamic dispatch per call; the target's code loops over the rows and
// picks the Logits<> instantiation (mask / scale) once per call.
//
// Per algorithm (R = read pass, W = write; docs/design.md, "Softmax
// algorithms: passes over memory"):
//  three-pass reload     max (R); e_i -> dst, sum (R+W); dst *= 1/sum (R+W)
//  three-pass recompute  max (R); sum (R); dst = e_i / sum (R+W)
//  two-pass              (mu, nu) sum, no max pass (R); dst = e_i / sum (R+W)
//                        rows out of ExpRef's exact range: three-pass reload
//  online                (ref, d) with lazy rescaling (R); dst = e_i / d (R+W)
// log_softmax: (t - max) - log(sum), in that order; logsumexp: max + log(sum)
// in float64, rounded once. Sums are blocked (sum-inl.h: BlockSum).
// In a batch, the three-pass kernels run row r's last pass (scale or log
// store: store-bound) in one loop with row r+1's (min, max) scan (load + 2
// ops), so that scan costs nearly nothing: softmax 1000x1000 0.41 -> 0.35
// ns per element (docs/benchmarking.md). The results are the same bits.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/softmax_rows.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <type_traits>

#include "kernels/row-inl.h"
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
//
// The row is split where RowsImpl fuses it with its neighbours: pass 1 (the
// (min, max) scan `mm`) comes from the caller, ThreePassToSum runs pass 2
// (and everything that ends the row early) and returns the last pass, which
// FinishRow runs, fused with the next row's pass 1 when there is one.
struct LastPass {
  enum class Kind { kNone, kScale, kScaleNoFlush, kLog };
  Kind kind = Kind::kNone;
  float a = 0.0f;  // kScale*: 1 / sum; kLog: the shift m
  float b = 0.0f;  // kLog: log sum
  const float* from = nullptr;  // kScale*: the exps, when not in dst (scratch)
};

// `exps`: where reload softmax's exp pass stores e_i (dst, or a scratch row
// when the last pass streams dst; nullptr means dst). `side` (nullable):
// the previous row's streamed scale pass, run inside reload softmax's exp
// pass (ExpSum's side pass; PipelinedSoftmaxRows); *side_ran says whether
// it ran (a row that ends early has no exp pass).
// The side pass: dst_j = from_j * factor (ScalePass<false>'s products) for
// the full vectors j = head + i (i = the exp pass's vector offsets from 0)
// that fit the row, streamed: `head` elements bring dst + head to a vector
// boundary, so the streaming stores are aligned wherever dst starts (f32
// rows at malloc's 16-byte alignment included). Finish() stores what the
// vectors leave, [0, head) and the last partial vector, one at a time.
struct SideScale {
  const float* HWY_RESTRICT from = nullptr;
  float* HWY_RESTRICT dst = nullptr;
  float factor = 0.0f;
  size_t head = 0, n = 0;
  HWY_INLINE void Vector(DF d, size_t i) const {
    const size_t j = head + i;
    if (j + hn::Lanes(d) <= n) {
      hn::Stream(hn::Mul(hn::LoadU(d, from + j), hn::Set(d, factor)), d, dst + j);
    }
  }
  HWY_INLINE void Tail(DF /*d*/, size_t /*i*/, size_t /*count*/) const {}
  HWY_INLINE void Finish() const {
    const size_t lanes = hn::Lanes(DF());
    const size_t end = head + (n - head) / lanes * lanes;
    for (size_t k = 0; k < head; ++k) dst[k] = ScalePass<false>::Scalar(from[k], factor);
    for (size_t k = end; k < n; ++k) dst[k] = ScalePass<false>::Scalar(from[k], factor);
  }
  // On its own (the row whose exp pass it was to share ended early).
  HWY_INLINE void Run() const {
    const DF d;
    for (size_t i = 0; i < n; i += hn::Lanes(d)) Vector(d, i);
    Finish();
  }
};
template <class Src>
HWY_INLINE LastPass ThreePassToSum(const Src& src, size_t n, const MinMax& mm,
                                   float* HWY_RESTRICT dst, RowOp op, bool reload,
                                   EmptyRow policy, const float* ahead = nullptr,
                                   bool stream = false, float* exps = nullptr,
                                   const SideScale* side = nullptr, bool* side_ran = nullptr) {
  if (exps == nullptr) exps = dst;
  const float m = mm.max;
  if (m == kNegInf) {
    if (RowHasNaN(src, n)) {
      NanRow(op, dst, n);
    } else {
      EmptyRowOut(op, policy, dst, n);
    }
    return {};
  }
  if (!(m < kInf)) {  // +inf or NaN max
    NanRow(op, dst, n);
    return {};
  }
  const bool use_ref = std::fabs(m) <= kRefMaxAbs;
  const float nref = use_ref ? std::nearbyint(m * kLog2e) : 0.0f;
  // log(sum e^(t - m)) = log(s) + (use_ref ? nref ln2 - m : 0).
  const double shift = use_ref ? nref * kLn2d - static_cast<double>(m) : 0.0;
  const bool store = op == RowOp::kSoftmax && reload;
  auto sum = [&](const auto& exp) {
    // The next row, and this row's dst where the last pass is the first to
    // write it with regular stores (log_softmax and recompute softmax;
    // reload softmax writes it in this pass; a streamed last pass needs no
    // read-for-ownership).
    RowPrefetch prefetch{ahead, sizeof(float), nullptr, 0};
    if (!store && op != RowOp::kLogSumExp && !stream) {
      prefetch.out = dst;
      prefetch.out_bytes = sizeof(float);
    }
    if (store && side != nullptr) {
      *side_ran = true;
      return ExpSum<true>(src, n, exp, exps, prefetch, *side);
    }
    return store ? ExpSum<true>(src, n, exp, exps, prefetch)
                 : ExpSum<false>(src, n, exp, nullptr, prefetch);
  };
  const double s = use_ref ? WithRefExp(m, mm.min, nref, sum) : sum(ExpDiff::Make(m));
  if (!(s < std::numeric_limits<double>::infinity())) {
    NanRow(op, dst, n);
    return {};
  }
  switch (op) {
    case RowOp::kSoftmax: {
      const float inv = static_cast<float>(1.0 / s);
      if (reload) {
        const bool normal = softmax_outputs_normal(mm.min, m, static_cast<int64_t>(n));
        return LastPass{normal ? LastPass::Kind::kScaleNoFlush : LastPass::Kind::kScale, inv,
                        0.0f, exps == dst ? nullptr : exps};
      }
      if (use_ref) {
        // The sum's exp where it can be (the table exp has no flush, so the
        // products must be normal too): the stored values are then the
        // summed terms times 1 / sum, and rows sum to 1 as in reload.
        const ExpRef e = ExpRef::Make(nref, FlushExtra(inv));
        if (ExpRefTable::Usable(m, mm.min, ExpRef::Make(nref)) &&
            softmax_outputs_normal(mm.min, m, static_cast<int64_t>(n))) {
          ExpScaleStore(src, n, ExpRefTable::Make(e, nref), inv, dst);
        } else if (e.NeverFlushes(mm.min)) {
          ExpScaleStore(src, n, ExpRefNoFlush{e}, inv, dst);
        } else {
          ExpScaleStore(src, n, e, inv, dst);
        }
      } else {
        ExpScaleStore(src, n, ExpDiff::Make(m, FlushExtra(inv)), inv, dst);
      }
      return {};
    }
    case RowOp::kLogSoftmax:
      return LastPass{LastPass::Kind::kLog, m, static_cast<float>(std::log(s) + shift)};
    case RowOp::kLogSumExp:
      dst[0] = static_cast<float>(static_cast<double>(m) + (std::log(s) + shift));
      return {};
  }
  return {};
}

// Runs `pass` over this row; with a next row (same length) its (min, max)
// scan runs in the same loop and is returned.
template <class Src, class Pass>
HWY_INLINE MinMax PassThenScan(const Pass& pass, size_t n, const Src* next) {
  if (next != nullptr) return RowMinMaxWith(*next, n, pass);
  RunPass(n, pass);
  return MinMax{};
}

// `stream`: the log pass, or the scale pass from a scratch row
// (LastPass::from), stores with streaming stores (the row's dst is aligned
// for them: RowStreams).
template <class Src>
HWY_INLINE MinMax FinishRow(const LastPass& last, const Src& src, size_t n,
                            float* HWY_RESTRICT dst, const Src* next, bool stream = false) {
  switch (last.kind) {
    case LastPass::Kind::kScale:
      if (last.from != nullptr) {
        if (stream) return PassThenScan(ScaleCopyPass<true, true>{last.from, dst, last.a}, n, next);
        return PassThenScan(ScaleCopyPass<true, false>{last.from, dst, last.a}, n, next);
      }
      return PassThenScan(ScalePass<true>{dst, last.a}, n, next);
    case LastPass::Kind::kScaleNoFlush:
      if (last.from != nullptr) {
        if (stream) return PassThenScan(ScaleCopyPass<false, true>{last.from, dst, last.a}, n, next);
        return PassThenScan(ScaleCopyPass<false, false>{last.from, dst, last.a}, n, next);
      }
      return PassThenScan(ScalePass<false>{dst, last.a}, n, next);
    case LastPass::Kind::kLog:
      if (stream) return PassThenScan(LogPass<Src, true>{src, dst, last.a, last.b}, n, next);
      return PassThenScan(LogPass<Src>{src, dst, last.a, last.b}, n, next);
    case LastPass::Kind::kNone:
      break;
  }
  return PassThenScan(NoPass{}, n, next);
}

// One three-pass row on its own (TwoPassRow's fallback).
template <class Src>
HWY_INLINE void ThreePassRow(const Src& src, size_t n, float* HWY_RESTRICT dst,
                             RowOp op, bool reload, EmptyRow policy) {
  const LastPass last = ThreePassToSum(src, n, RowMinMax(src, n), dst, op, reload, policy);
  FinishRow<Src>(last, src, n, dst, nullptr);
}

// Rows at least this long (beyond L1) prefetch the next row's logits during
// their exp pass: 256x32000 softmax 0.59-0.61 -> 0.54-0.56 ns per element
// (A/B, docs/benchmarking.md); shorter rows stream well from L2 / L3 with
// the hardware prefetcher alone (1000x1000: no change measured).
constexpr size_t kPrefetchMinCols = 8192;

// Whether a row's last pass streams its stores: the batch asks for it
// (Rows::stream_stores), the pass is log_softmax's (streamed reload softmax
// runs PipelinedSoftmaxRows instead), and dst lets the pass peel to an
// aligned vector (a streamed pass aligns its loop on dst: scan-inl.h,
// RowMinMaxWith).
HWY_INLINE bool RowStreams(bool stream_stores, RowOp op, const float* dst, size_t n) {
  return stream_stores && op == RowOp::kLogSoftmax && StreamAligned(dst, n);
}

// Batched three-pass rows: row r's last pass shares its loop with row r+1's
// (min, max) scan, and its exp pass prefetches row r+1's logits. Rows of
// one batch never overlap another row's dst (the ops check dst against
// src / mask: disjoint or the same view).
template <class Src, class RowAt>
HWY_INLINE void ThreePassRows(int64_t rows, size_t n, const RowAt& row_at, RowOp op,
                              bool reload, EmptyRow policy, bool stream_stores) {
  if (rows <= 0) return;
  float* dst = nullptr;
  Src src = row_at(0, &dst);
  MinMax mm = RowMinMax(src, n);
  for (int64_t r = 0; r < rows; ++r) {
    const bool stream = RowStreams(stream_stores, op, dst, n);
    if (r + 1 == rows) {
      const LastPass last = ThreePassToSum(src, n, mm, dst, op, reload, policy, nullptr, stream);
      FinishRow<Src>(last, src, n, dst, nullptr, stream);
      return;
    }
    float* next_dst = nullptr;
    const Src next = row_at(r + 1, &next_dst);
    const LastPass last = ThreePassToSum(src, n, mm, dst, op, reload, policy,
                                         n >= kPrefetchMinCols ? next.x : nullptr, stream);
    mm = FinishRow(last, src, n, dst, &next, stream);
    src = next;
    dst = next_dst;
  }
}

// Batched reload softmax with streaming stores, pipelined over rows: row
// r's exps go to a scratch row (two, alternating), and its scale pass
// (scratch -> dst, streamed) runs inside row r+1's exp pass (ExpSum's side
// pass), which also prefetches row r+2's logits; then row r+2's (min, max)
// scan runs alone, from cache. So the DRAM traffic of every row (one read of
// its logits, one streamed write of its output) overlaps the compute-bound
// exps of another, instead of the store-bound scale pass carrying the
// writes and the next row's read with the FP pipes idle.
// The side pass runs on ExpSum's vector offsets from element 0, shifted by
// the head that aligns dst (SideScale); a row whose outputs may need the
// flush (kScale, rare) runs its own last pass as ThreePassRows does. Bits:
// the same passes, the same values, only in another order (the scale pass
// is elementwise).
// EPYC VM (AVX2, 512 KiB L2 per core), 1 thread, ns per element, regular
// -> streamed without the pipeline (the scale pass fused with the next
// row's scan) -> pipelined, one process, interleaved: 2000x4000 0.79 ->
// 0.68 -> 0.54, 1000x8192 0.54 -> 0.51 -> 0.43, 256x32000 0.52 -> 0.53 ->
// 0.47; 128x60000 (four rows of 240 KB no longer fit L2) 0.57 -> 0.55 ->
// 0.55 (docs/benchmarking.md, "Softmax streamed and pipelined").
template <class Src, class RowAt>
HWY_INLINE void PipelinedSoftmaxRows(int64_t rows, size_t n, const RowAt& row_at,
                                     EmptyRow policy, float* scratch) {
  if (rows <= 0) return;
  const DF d;
  const auto row_floats = static_cast<size_t>(stream_scratch_row_floats(static_cast<int64_t>(n)));
  float* const buffers[2] = {scratch, scratch + row_floats};
  float* dst = nullptr;
  Src src = row_at(0, &dst);
  MinMax mm = RowMinMax(src, n);
  SideScale pending;  // the previous row's scale pass (dst nullptr: none)
  for (int64_t r = 0; r < rows; ++r) {
    float* next_dst = nullptr;
    const bool has_next = r + 1 < rows;
    const Src next = has_next ? row_at(r + 1, &next_dst) : src;
    float* exps = buffers[r & 1];
    bool side_ran = false;
    const LastPass last = ThreePassToSum(
        src, n, mm, dst, RowOp::kSoftmax, /*reload=*/true, policy,
        has_next ? next.x : nullptr, /*stream=*/true, exps,
        pending.dst != nullptr ? &pending : nullptr, &side_ran);
    if (pending.dst != nullptr) {
      if (side_ran) {
        pending.Finish();
      } else {
        pending.Run();
      }
    }
    pending.dst = nullptr;
    if (last.kind == LastPass::Kind::kScaleNoFlush && StreamAligned(dst, n)) {
      pending = SideScale{last.from, dst, last.a, HeadToAlign(d, dst, n), n};
    } else {
      FinishRow<Src>(last, src, n, dst, nullptr, StreamAligned(dst, n));
    }
    if (!has_next) break;
    mm = RowMinMax(next, n);
    src = next;
    dst = next_dst;
  }
  if (pending.dst != nullptr) pending.Run();
}

// Two-pass: pass 1 is TwoPassScan (scan-inl.h); out-of-range rows (|max| >
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

// Online: pass 1 is OnlineScan (scan-inl.h), sum = d * e^ref.
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
  const bool stream = rows.stream_stores &&
                      (op == RowOp::kLogSoftmax || (op == RowOp::kSoftmax && rows.scratch));
  WithLogits(rows.src, rows.mask, rows.scale, [&](const auto& proto) {
    using Src = std::decay_t<decltype(proto)>;
    auto row_at = [&](int64_t r, float** dst) {
      *dst = rows.dst + r * rows.dst_stride;
      return Src{rows.src + r * rows.src_stride,
                 rows.mask != nullptr ? rows.mask + r * rows.mask_stride : nullptr,
                 rows.scale};
    };
    switch (algorithm) {
      case Algorithm::kTwoPass:
      case Algorithm::kOnline:
        for (int64_t r = 0; r < rows.rows; ++r) {
          float* dst = nullptr;
          const Src src = row_at(r, &dst);
          if (algorithm == Algorithm::kTwoPass) {
            TwoPassRow(src, n, dst, op, rows.empty_row);
          } else {
            OnlineRow(src, n, dst, op, rows.empty_row);
          }
        }
        return;
      case Algorithm::kThreePassRecompute:
        return ThreePassRows<Src>(rows.rows, n, row_at, op, /*reload=*/false, rows.empty_row,
                                  stream);
      case Algorithm::kThreePassReload:
      case Algorithm::kAuto:  // ops resolve kAuto; reload is the safe default
      default:
        if (op == RowOp::kSoftmax && stream) {
          return PipelinedSoftmaxRows<Src>(rows.rows, n, row_at, rows.empty_row, rows.scratch);
        }
        return ThreePassRows<Src>(rows.rows, n, row_at, op, /*reload=*/true, rows.empty_row,
                                  stream);
    }
  });
  // Streaming stores are weakly ordered: fence them before the caller
  // (another thread, after the task grid's join) reads dst.
  if (stream) hwy::FlushStream();
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
