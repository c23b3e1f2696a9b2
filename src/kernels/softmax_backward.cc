// src/kernels/softmax_backward.cc: vector-Jacobian products of softmax and
// log_softmax (kernels.h, "Backward").
//   softmax:     dx = scale * y * (dy - <dy, y>)
//   log_softmax: dx = scale * (dy - exp(y) * sum(dy)); dx = 0 where y = -inf
// Two sweeps per row: the reduction (accumulated in float64 vectors, exact
// products), then the elementwise store. Batched rows of >= 512
// (kGradPipelineMinCols) fold the next row's reduction into this row's store
// sweep (BlockedReduce): the same bits. dx may equal dy (the store sweep
// reads dy[i] before writing dx[i]); otherwise dx must not overlap y or dy. exp(y) for y <= 0 is ExpRef with N = 0: y itself is
// reduced exactly, y = -inf gives exact 0. log_softmax vectors where f32
// would lose the result run in float64, rounded once (LogSoftmaxStep,
// demote-inl.h): a sum of dy beyond f32 or +-inf, and lanes with
// -inf < y < -86 (f32 flushes their e^y, which a large scale or a tiny dy
// makes count).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/softmax_backward.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/row-inl.h"
#include "kernels/kernels.h"

HWY_BEFORE_NAMESPACE();
namespace smax::kernels::HWY_NAMESPACE {

// sum_i a_i * b_i (b == nullptr: sum_i a_i), in steps. The gradient bound
// is relative to |y| (|dy| + |<dy, y>|), and <dy, y> cancels (dy has both
// signs), so the dot is accumulated in float64 from the start: products of
// two f32 are exact in f64, 2 independent f64 accumulator pairs (acc0 takes
// the vector at i, acc1 the one at i + N). Step(i) for i = 0, 2N, 4N, ...
// while i + 2N <= n, then Finish(n): BlockedDot runs it on its own, and a
// pipelined backward row runs the next row's steps inside its own store
// sweep (GradStore's `side`), so both give the same bits by construction.
// a, b: dy, y of the row reduced (never the dx being written).
struct BlockedReduce {
  // Defined here so that it is compiled for the target (the implicit one
  // would not be, and F64Acc's constructor is target code).
  HWY_INLINE BlockedReduce(const float* reduce_a, const float* reduce_b)
      : a(reduce_a), b(reduce_b) {}
  const float* a;
  const float* b;
  F64Acc acc0, acc1;
  HWY_INLINE void Add(F64Acc& acc, size_t i) {
    const DF d;
    if (b != nullptr) {
      acc.AddProduct(d, hn::LoadU(d, a + i), hn::LoadU(d, b + i));
    } else {
      acc.Add(d, hn::LoadU(d, a + i));
    }
  }
  HWY_INLINE void Step(size_t i) {
    Add(acc0, i);
    Add(acc1, i + hn::Lanes(DF()));
  }
  // The steps after the main loop, from i = n rounded down to 2N: whole
  // vectors into acc0, the partial one (zero-padded) into acc1.
  HWY_INLINE double Finish(size_t n) {
    const DF d;
    const size_t N = hn::Lanes(d);
    size_t i = n / (2 * N) * (2 * N);
    for (; i + N <= n; i += N) Add(acc0, i);
    if (i < n) {
      const VF va = LoadTailZero(d, a + i, n - i);
      if (b != nullptr) {
        acc1.AddProduct(d, va, LoadTailZero(d, b + i, n - i));
      } else {
        acc1.Add(d, va);
      }
    }
    return acc0.Total(d) + acc1.Total(d);
  }
};

// The reduction of one row in one sweep (load-bound: memory, not the
// widening, limits it).
HWY_INLINE double BlockedDot(const float* a, const float* b, size_t n) {
  const size_t N = hn::Lanes(DF());
  BlockedReduce reduce(a, b);
  for (size_t i = 0; i + 2 * N <= n; i += 2 * N) reduce.Step(i);
  return reduce.Finish(n);
}

// SoftmaxGradF64 (dx in float64, rounded once): demote-inl.h.

// dx = (y * (dy - dot)) * scale in f32 where that is exact to the bound,
// else (a vector with a lane at risk) the float64 products. In f32 the
// intermediate p = y (dy - dot) can overflow where the result does not
// (|scale| < 1; a raw y near FLT_MAX), and a p below FLT_MIN (denormal, 4e-5
// relative at 8.6e-42) times a scale > 1 (1 / temperature = 1e30) carries
// that rounding into the result: found by the fuzz targets
// (gumbel_softmax_backward at temperature 1e-30). The check costs an abs,
// two or three compares and a test per vector; the float64 path (promote,
// four products, demote) runs only for vectors at risk (it made the whole
// sweep 1.3-2.5x slower when it ran for every vector).
struct SoftmaxGradFn {
  VF vs;
  double scale;
  bool big;  // |scale| > 1: p below FLT_MIN is at risk too
  static SoftmaxGradFn Make(float scale) {
    return SoftmaxGradFn{hn::Set(DF(), scale), static_cast<double>(scale),
                         std::fabs(scale) > 1.0f};
  }
  // Lanes whose f32 p = y g overflowed (inf; NaN needs no float64: it stays
  // NaN) or, for |scale| > 1, fell below FLT_MIN while y, g != 0.
  HWY_INLINE hn::Mask<DF> Risk(VF y, VF g, VF p) const {
    const DF d;
    const VF ap = hn::Abs(p);
    auto risk = hn::Gt(ap, hn::Set(d, std::numeric_limits<float>::max()));
    if (big) {
      const auto tiny = hn::Lt(ap, hn::Set(d, std::numeric_limits<float>::min()));
      risk = hn::Or(risk, hn::AndNot(hn::Or(hn::Eq(y, hn::Zero(d)), hn::Eq(g, hn::Zero(d))), tiny));
    }
    return risk;
  }
  HWY_INLINE VF operator()(VF y, VF dy, VF dot) const {
    const DF d;
    const VF g = hn::Sub(dy, dot);
    const VF p = hn::Mul(y, g);
    if (HWY_LIKELY(hn::AllFalse(d, Risk(y, g, p)))) return hn::Mul(p, vs);
    return SoftmaxGradF64(y, g, scale);
  }
};
// log_softmax's step (dx = (dy - exp(y) * sum) * scale, 0 where y = -inf):
// LogSoftmaxStep, demote-inl.h.

// What a row's store sweep does beside its own work, once per step of two
// vectors at element i (GradStore's main loops: i = 0, 2N, 4N, ... while
// i + 2N <= n).
//
// NoSide: nothing (a row whose next row is in cache or absent);
// BlockedReduce (above): the next row's reduction, pipelined. The next
// row's inputs must not overlap this row's dx (ops: dx is exactly dy or
// disjoint from y and dy, and its rows do not overlap).
struct NoSide {
  HWY_INLINE void Step(size_t /*i*/) const {}
};

// log_softmax's store sweep: dx = step(y, dy) per vector. A function of its
// own, always inlined: as a lambda of GradStore, GCC compiled it out of
// line, and its captures (the pointers, the step's constants, the next
// row's accumulators) were reloaded from memory, and the accumulators
// stored back, after every store (Highway's stores may alias anything).
template <bool kStream, class Side>
HWY_INLINE void LogGradSweep(const float* HWY_RESTRICT y, const float* dy, size_t n,
                             const LogSoftmaxStep step, float* dx, Side& side) {
  const DF d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    side.Step(i);
    const VF g0 = step(d, hn::LoadU(d, y + i), hn::LoadU(d, dy + i));
    const VF g1 = step(d, hn::LoadU(d, y + i + N), hn::LoadU(d, dy + i + N));
    StoreOut<kStream>(g0, d, dx + i);
    StoreOut<kStream>(g1, d, dx + i + N);
  }
  for (; i + N <= n; i += N) StoreOut<kStream>(step(d, hn::LoadU(d, y + i), hn::LoadU(d, dy + i)), d, dx + i);
  if (i < n) {
    // Padding lanes (zeros) are computed but never stored.
    const VF g = step(d, LoadTailZero(d, y + i, n - i), LoadTailZero(d, dy + i, n - i));
    StoreTail(d, g, dx + i, n - i);
  }
}

// red64: the reduction in float64; red = its f32 rounding. kStream: dx is
// written with streaming stores (pass-inl.h, StoreOut; dx must be aligned
// to the vector: GradStreams).
template <bool kLog, bool kStream, class Side>
HWY_INLINE void GradStore(const float* HWY_RESTRICT y, const float* dy, size_t n,
                          double red64, float scale, float* dx, Side& side) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const float red = static_cast<float>(red64);
  const VF vr = hn::Set(d, red);
  const VF vs = hn::Set(d, scale);
  if (kLog) {
    LogGradSweep<kStream>(y, dy, n, LogSoftmaxStep::Make(d, red64, scale), dx, side);
  } else {
    // Two vectors per step with one risk test for both (the common case
    // costs an abs and a compare per vector over the plain f32 form).
    const SoftmaxGradFn grad = SoftmaxGradFn::Make(scale);
    size_t i = 0;
    for (; i + 2 * N <= n; i += 2 * N) {
      side.Step(i);
      const VF y0 = hn::LoadU(d, y + i), y1 = hn::LoadU(d, y + i + N);
      const VF g0 = hn::Sub(hn::LoadU(d, dy + i), vr), g1 = hn::Sub(hn::LoadU(d, dy + i + N), vr);
      const VF p0 = hn::Mul(y0, g0), p1 = hn::Mul(y1, g1);
      if (HWY_LIKELY(hn::AllFalse(d, hn::Or(grad.Risk(y0, g0, p0), grad.Risk(y1, g1, p1))))) {
        StoreOut<kStream>(hn::Mul(p0, vs), d, dx + i);
        StoreOut<kStream>(hn::Mul(p1, vs), d, dx + i + N);
      } else {
        StoreOut<kStream>(SoftmaxGradF64(y0, g0, grad.scale), d, dx + i);
        StoreOut<kStream>(SoftmaxGradF64(y1, g1, grad.scale), d, dx + i + N);
      }
    }
    for (; i + N <= n; i += N) {
      StoreOut<kStream>(grad(hn::LoadU(d, y + i), hn::LoadU(d, dy + i), vr), d, dx + i);
    }
    if (i < n) {
      // Padding lanes (zeros) are computed but never stored.
      const VF g = grad(LoadTailZero(d, y + i, n - i), LoadTailZero(d, dy + i, n - i), vr);
      StoreTail(d, g, dx + i, n - i);
    }
  }
}

// Whether a row's store sweep streams: the batch asks for it
// (BackwardRows::stream_stores) and dx is aligned to the vector (the sweep
// has no peel: its f32 / float64 choice is made per pair of vectors from
// element 0, so a peel would move lanes between pairs and change bits).
HWY_INLINE bool GradStreams(bool stream_stores, const float* dx) {
  const size_t bytes = hn::Lanes(DF()) * sizeof(float);
  return stream_stores && reinterpret_cast<uintptr_t>(dx) % bytes == 0;
}

// Every row of r: the reduction (softmax: dot = sum dy * y; log-softmax:
// sum = sum dy, BlockedDot), then GradStore<kLog>. Rows of >=
// kGradPipelineMinCols are pipelined: each row's store sweep also computes
// the next row's reduction (BlockedReduce), the same bits. Measured
// (docs/benchmarking.md, "Backward rows pipelined"): 8-17% faster from
// DRAM at 1000-32000 columns, 3-5% at 1000x1000 (in L3), no change at 256
// columns; shorter rows keep the two sweeps.
constexpr size_t kGradPipelineMinCols = 512;
template <bool kLog>
HWY_INLINE void GradRows(const BackwardRows& r) {
  const size_t n = static_cast<size_t>(r.cols);
  const bool pipelined = n >= kGradPipelineMinCols;
  auto reduce = [&](const float* y, const float* dy) {
    return BlockedDot(dy, kLog ? nullptr : y, n);
  };
  double reduced = r.rows > 0 ? reduce(r.y, r.dy) : 0.0;
  for (int64_t row = 0; row < r.rows; ++row) {
    const float* y = r.y + row * r.y_stride;
    const float* dy = r.dy + row * r.dy_stride;
    float* dx = r.dx + row * r.dx_stride;
    const bool last = row + 1 == r.rows;
    const float* next_y = last ? nullptr : y + r.y_stride;
    const float* next_dy = last ? nullptr : dy + r.dy_stride;
    const bool stream = GradStreams(r.stream_stores, dx);
    if (pipelined && !last) {
      BlockedReduce side(next_dy, kLog ? nullptr : next_y);
      if (stream) {
        GradStore<kLog, true>(y, dy, n, reduced, r.scale, dx, side);
      } else {
        GradStore<kLog, false>(y, dy, n, reduced, r.scale, dx, side);
      }
      reduced = side.Finish(n);
      continue;
    }
    NoSide none;
    if (stream) {
      GradStore<kLog, true>(y, dy, n, reduced, r.scale, dx, none);
    } else {
      GradStore<kLog, false>(y, dy, n, reduced, r.scale, dx, none);
    }
    if (!last) reduced = reduce(next_y, next_dy);
  }
  if (r.stream_stores) hwy::FlushStream();
}
void SoftmaxBackwardRowsImpl(const BackwardRows& r) { GradRows<false>(r); }
void LogSoftmaxBackwardRowsImpl(const BackwardRows& r) { GradRows<true>(r); }

double DotSegmentImpl(const float* a, const float* b, int64_t n) {
  return BlockedDot(a, b, static_cast<size_t>(n));
}
double SumSegmentImpl(const float* a, int64_t n) {
  return BlockedDot(a, nullptr, static_cast<size_t>(n));
}
// A segment of a long row (its reduction done); streamed where dx is aligned.
template <bool kLog>
HWY_INLINE void GradSegment(const float* y, const float* dy, int64_t n, double red, float scale,
                            float* dx, bool stream) {
  NoSide none;
  if (GradStreams(stream, dx)) {
    GradStore<kLog, true>(y, dy, static_cast<size_t>(n), red, scale, dx, none);
    hwy::FlushStream();
  } else {
    GradStore<kLog, false>(y, dy, static_cast<size_t>(n), red, scale, dx, none);
  }
}
void SoftmaxBackwardSegmentImpl(const float* y, const float* dy, int64_t n, double dot,
                                float scale, float* dx, bool stream) {
  GradSegment<false>(y, dy, n, dot, scale, dx, stream);
}
void LogSoftmaxBackwardSegmentImpl(const float* y, const float* dy, int64_t n, double sum,
                                   float scale, float* dx, bool stream) {
  GradSegment<true>(y, dy, n, sum, scale, dx, stream);
}

// Columns: one vector of `cnt` adjacent columns at a time; per-lane blocked
// reduction down the axis, then the elementwise sweep.
template <bool kLog>
HWY_INLINE void BackwardColumnBlock(const BackwardColumns& c, size_t j0, size_t cnt) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const bool full = cnt == N;
  const size_t n = static_cast<size_t>(c.n);
  auto load = [&](const float* p) { return full ? hn::LoadU(d, p) : LoadTailZero(d, p, cnt); };
  F64Acc sum;  // float64 per lane, exact products (see BlockedDot)
  for (size_t k = 0; k < n; ++k) {
    const int64_t kk = static_cast<int64_t>(k);
    const VF dy = load(c.dy + kk * c.dy_axis_stride + j0);
    if (kLog) {
      sum.Add(d, dy);
    } else {
      sum.AddProduct(d, dy, load(c.y + kk * c.y_axis_stride + j0));
    }
  }
  HWY_ALIGN double s[kMaxLanes] = {};
  HWY_ALIGN float sf[kMaxLanes];
  sum.StoreLanes(d, s);
  bool wide = false;  // a column's sum dy beyond f32 (or +-inf)
  for (size_t l = 0; l < N; ++l) {
    sf[l] = static_cast<float>(s[l]);
    wide |= kLog && l < cnt && !std::isfinite(sf[l]);
  }
  // log_softmax where f32 loses the result (LogSoftmaxStep's cases; the
  // lanes' sums differ, so element by element): float64, rounded once.
  auto log_f64 = [&](size_t k) {
    const int64_t kk = static_cast<int64_t>(k);
    const double scale = static_cast<double>(c.scale);
    for (size_t l = 0; l < cnt; ++l) {
      const double y = c.y[kk * c.y_axis_stride + static_cast<int64_t>(j0 + l)];
      const double dy = c.dy[kk * c.dy_axis_stride + static_cast<int64_t>(j0 + l)];
      c.dx[kk * c.dx_axis_stride + static_cast<int64_t>(j0 + l)] =
          y == -std::numeric_limits<double>::infinity()
              ? 0.0f
              : static_cast<float>(scale * (dy - std::exp(y) * s[l]));
    }
  };
  const VF vr = hn::Load(d, sf);
  const VF vs = hn::Set(d, c.scale);
  const SoftmaxGradFn grad = SoftmaxGradFn::Make(c.scale);
  for (size_t k = 0; k < n; ++k) {
    const int64_t kk = static_cast<int64_t>(k);
    const VF vy = load(c.y + kk * c.y_axis_stride + j0);
    const VF vdy = load(c.dy + kk * c.dy_axis_stride + j0);
    if (kLog && (wide || LogSoftmaxStep::AnyTiny(d, vy))) {
      log_f64(k);
      continue;
    }
    const VF g = kLog ? LogSoftmaxStep::F32(d, vy, vdy, vr, vs) : grad(vy, vdy, vr);
    float* p = c.dx + kk * c.dx_axis_stride + j0;
    if (full) {
      hn::StoreU(g, d, p);
    } else {
      StoreTail(d, g, p, cnt);
    }
  }
}

template <bool kLog>
HWY_INLINE void BackwardColumnsT(const BackwardColumns& c) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const size_t inner = static_cast<size_t>(c.inner);
  size_t j = 0;
  for (; j + N <= inner; j += N) BackwardColumnBlock<kLog>(c, j, N);
  if (j < inner) BackwardColumnBlock<kLog>(c, j, inner - j);
}

void SoftmaxBackwardColumnsImpl(const BackwardColumns& c) { BackwardColumnsT<false>(c); }
void LogSoftmaxBackwardColumnsImpl(const BackwardColumns& c) { BackwardColumnsT<true>(c); }

}  // namespace smax::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace smax::kernels {

HWY_EXPORT(SoftmaxBackwardRowsImpl);
HWY_EXPORT(LogSoftmaxBackwardRowsImpl);
HWY_EXPORT(DotSegmentImpl);
HWY_EXPORT(SumSegmentImpl);
HWY_EXPORT(SoftmaxBackwardSegmentImpl);
HWY_EXPORT(LogSoftmaxBackwardSegmentImpl);
HWY_EXPORT(SoftmaxBackwardColumnsImpl);
HWY_EXPORT(LogSoftmaxBackwardColumnsImpl);

void softmax_backward_rows(const BackwardRows& rows) noexcept {
  HWY_DYNAMIC_DISPATCH(SoftmaxBackwardRowsImpl)(rows);
}
void log_softmax_backward_rows(const BackwardRows& rows) noexcept {
  HWY_DYNAMIC_DISPATCH(LogSoftmaxBackwardRowsImpl)(rows);
}
double dot_segment(const float* a, const float* b, int64_t n) noexcept {
  return HWY_DYNAMIC_DISPATCH(DotSegmentImpl)(a, b, n);
}
double sum_segment(const float* a, int64_t n) noexcept {
  return HWY_DYNAMIC_DISPATCH(SumSegmentImpl)(a, n);
}
void softmax_backward_segment(const float* y, const float* dy, int64_t n, double dot,
                              float scale, float* dx, bool stream) noexcept {
  HWY_DYNAMIC_DISPATCH(SoftmaxBackwardSegmentImpl)(y, dy, n, dot, scale, dx, stream);
}
void log_softmax_backward_segment(const float* y, const float* dy, int64_t n, double sum,
                                  float scale, float* dx, bool stream) noexcept {
  HWY_DYNAMIC_DISPATCH(LogSoftmaxBackwardSegmentImpl)(y, dy, n, sum, scale, dx, stream);
}
void softmax_backward_columns(const BackwardColumns& cols) noexcept {
  HWY_DYNAMIC_DISPATCH(SoftmaxBackwardColumnsImpl)(cols);
}
void log_softmax_backward_columns(const BackwardColumns& cols) noexcept {
  HWY_DYNAMIC_DISPATCH(LogSoftmaxBackwardColumnsImpl)(cols);
}

}  // namespace smax::kernels
#endif  // HWY_ONCE
