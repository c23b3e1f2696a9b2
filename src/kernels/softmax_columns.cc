// src/kernels/softmax_columns.cc: softmax / log_softmax / logsumexp when the
// reduced axis is strided and `inner` columns are contiguous (kernels.h,
// "Columns").
//
// Vectorised across the inner dimension: one vector of N adjacent columns is
// a block; the three sweeps (max; e -> dst and per-lane sum; scale) run down
// the axis for that block, so the block's n x N floats (n x 32 bytes on AVX2)
// stay in L1/L2 between sweeps. Every lane is its own row: per-lane max,
// per-lane exact-difference exp (ExpDiffV, TwoSum), per-lane blocked sum
// (f32, widened to float64 every 16 adds). The last partial block uses the
// masked / stack-copied tail loads and stores of load-inl.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/softmax_columns.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <type_traits>

#include "kernels/row-inl.h"
#include "kernels/kernels.h"

HWY_BEFORE_NAMESPACE();
namespace smax::kernels::HWY_NAMESPACE {

enum class ColOp { kSoftmax, kLogSoftmax, kLogSumExp };

// One block of `cnt` (<= N) columns starting at column j0.
template <class Src>
HWY_INLINE void ColumnBlock(const Columns& c, size_t j0, size_t cnt, ColOp op) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const bool full = cnt == N;
  const size_t n = static_cast<size_t>(c.n);
  auto load = [&](size_t k) {
    const Src src{c.src + static_cast<int64_t>(k) * c.src_axis_stride + j0,
                  c.mask != nullptr ? c.mask + static_cast<int64_t>(k) * c.mask_axis_stride + j0 : nullptr,
                  c.scale};
    return full ? src.Load(d, 0) : src.LoadTail(d, 0, cnt);
  };
  auto store = [&](VF v, float* p) {
    if (full) {
      hn::StoreU(v, d, p);
    } else {
      StoreTail(d, v, p, cnt);
    }
  };

  // Sweep 1: per-lane max (2 accumulators) and NaN flag.
  VF m0 = hn::Set(d, kNegInf), m1 = m0;
  auto nan = hn::Lt(m0, m0);  // all false
  size_t k = 0;
  for (; k + 2 <= n; k += 2) {
    const VF t0 = load(k), t1 = load(k + 1);
    nan = hn::Or(nan, hn::Or(hn::IsNaN(t0), hn::IsNaN(t1)));
    m0 = hn::Max(m0, t0);
    m1 = hn::Max(m1, t1);
  }
  if (k < n) {
    const VF t0 = load(k);
    nan = hn::Or(nan, hn::IsNaN(t0));
    m0 = hn::Max(m0, t0);
  }
  const VF m = hn::Max(m0, m1);
  // Lanes whose max is -inf (all masked) use shift 0: e = exp(-inf) = 0,
  // avoiding -inf - -inf.
  const VF ms = hn::IfThenZeroElse(hn::Eq(m, hn::Set(d, kNegInf)), m);
  const VF flush = hn::Set(d, kFlushBelow);

  // Sweep 2: e = exp(t - m) (stored for softmax) and the per-lane sum.
  LaneSum sum(d);
  for (k = 0; k < n; ++k) {
    const VF e = ExpDiffV(d, load(k), ms, flush);
    if (op == ColOp::kSoftmax) store(e, c.dst + static_cast<int64_t>(k) * c.dst_axis_stride + j0);
    sum.Add(d, e);
  }
  HWY_ALIGN double s[kMaxLanes];
  HWY_ALIGN float mv[kMaxLanes];
  HWY_ALIGN float nanv[kMaxLanes];
  sum.StoreLanes(d, s);
  hn::Store(m, d, mv);
  hn::Store(hn::IfThenElseZero(nan, hn::Set(d, 1.0f)), d, nanv);

  // Per lane: the factor / log-sum that makes sweep 3 produce the right
  // value, special values included (NaN lane -> NaN; empty lane -> policy).
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  HWY_ALIGN float coef[kMaxLanes];
  for (size_t l = 0; l < N; ++l) {
    const bool is_nan = nanv[l] != 0.0f || !(mv[l] < kInf) || std::isnan(s[l]);
    const bool empty = !is_nan && mv[l] == kNegInf;
    float v;
    if (op == ColOp::kSoftmax) {
      v = is_nan ? qnan
                 : empty ? (c.empty_row == EmptyRow::kNan ? qnan : 0.0f)
                         : static_cast<float>(1.0 / s[l]);
    } else if (op == ColOp::kLogSoftmax) {
      v = is_nan ? qnan
                 : empty ? (c.empty_row == EmptyRow::kNan ? qnan : 0.0f)
                         : static_cast<float>(std::log(s[l]));
    } else {
      v = is_nan ? qnan
                 : empty ? (c.empty_row == EmptyRow::kNan ? qnan : kNegInf)
                         : static_cast<float>(static_cast<double>(mv[l]) + std::log(s[l]));
    }
    coef[l] = v;
  }
  if (op == ColOp::kLogSumExp) {
    std::memcpy(c.dst + j0, coef, cnt * sizeof(float));
    return;
  }
  const VF cv = hn::Load(d, coef);
  if (op == ColOp::kSoftmax) {
    // Sweep 3: y = e / sum (0 * NaN = NaN for NaN lanes), no denormals.
    const VF tiny = hn::Set(d, std::numeric_limits<float>::min());
    for (k = 0; k < n; ++k) {
      float* p = c.dst + static_cast<int64_t>(k) * c.dst_axis_stride + j0;
      const VF e = full ? hn::LoadU(d, p) : LoadTailZero(d, p, cnt);
      const VF y = hn::Mul(e, cv);
      store(hn::IfThenZeroElse(hn::Lt(y, tiny), y), p);
    }
  } else {
    // Sweep 3: y = (t - m) - log(sum), in that order (empty lanes: -inf - 0).
    for (k = 0; k < n; ++k) {
      const VF y = hn::Sub(hn::Sub(load(k), ms), cv);
      store(y, c.dst + static_cast<int64_t>(k) * c.dst_axis_stride + j0);
    }
  }
}

HWY_NOINLINE void ColumnsImpl(const Columns& c, ColOp op) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const size_t inner = static_cast<size_t>(c.inner);
  WithLogits(c.src, c.mask, c.scale, [&](const auto& proto) {
    using Src = std::decay_t<decltype(proto)>;
    size_t j = 0;
    for (; j + N <= inner; j += N) ColumnBlock<Src>(c, j, N, op);
    if (j < inner) ColumnBlock<Src>(c, j, inner - j, op);
  });
}

void SoftmaxColumnsImpl(const Columns& c) { ColumnsImpl(c, ColOp::kSoftmax); }
void LogSoftmaxColumnsImpl(const Columns& c) { ColumnsImpl(c, ColOp::kLogSoftmax); }
void LogSumExpColumnsImpl(const Columns& c) { ColumnsImpl(c, ColOp::kLogSumExp); }

}  // namespace smax::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace smax::kernels {

HWY_EXPORT(SoftmaxColumnsImpl);
HWY_EXPORT(LogSoftmaxColumnsImpl);
HWY_EXPORT(LogSumExpColumnsImpl);

void softmax_columns(const Columns& cols) noexcept {
  HWY_DYNAMIC_DISPATCH(SoftmaxColumnsImpl)(cols);
}
void log_softmax_columns(const Columns& cols) noexcept {
  HWY_DYNAMIC_DISPATCH(LogSoftmaxColumnsImpl)(cols);
}
void logsumexp_columns(const Columns& cols) noexcept {
  HWY_DYNAMIC_DISPATCH(LogSumExpColumnsImpl)(cols);
}

}  // namespace smax::kernels
#endif  // HWY_ONCE
