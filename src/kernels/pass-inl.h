// src/kernels/pass-inl.h: per-vector passes over one row: RunPass (the
// Pass contract: Vector(d, i) for a full vector, Tail(d, i, count) for the
// last partial one), the exp-sum ExpSum (blocked, BlockSum order), the
// stores e_i * factor (ExpScaleStore, ExpShiftScaleStore), in-place
// scaling, log-softmax stores and Fill. Outputs are written only inside
// [0, n) (StoreTail).
//
// Included only from kernels/row-inl.h, inside its per-target namespace
// smax::kernels::HWY_NAMESPACE (with `hn`, the standard and Highway headers
// and the pieces listed before this one in row-inl.h already in scope).
#ifndef SMAX_KERNELS_ROW_INL_PIECE_
#error "include kernels/row-inl.h, not its pieces"
#endif

// ---- store passes ---------------------------------------------------------------
// A per-vector pass over one row: Vector(d, i) handles the full vector at
// element i, Tail(d, i, count) the last partial one. RunPass runs it alone;
// RowMinMaxWith runs it inside the (min, max) scan of another row of the
// same length (the batched three-pass kernels fuse a row's last pass with the
// next row's first: the last pass is store-bound and leaves the FP pipes
// and a load port idle for the scan).
//
// Alignment: a vector access that is not aligned to the vector's size
// crosses a 32-byte half (Zen 4 splits a 512-bit access into two 256-bit
// ones) or a cache line and costs two. On Zen 4, f32 rows at malloc's
// 16-byte alignment made the (min, max) scan 1.5x and the in-place scale
// pass 1.3x slower than at 64 bytes (1024 floats: 62 vs 39 ns, 45 vs 35 ns).
// So passes whose result is elementwise, or (the scan) independent of the
// order of its elements, first handle the `head` elements up to the first
// aligned one (HeadToAlign, PassHead), then run full vectors from there.
// Passes that sum in a fixed lane order (ExpSum) never peel: that would move
// elements between lanes and change the bits.
//
// Elements from p up to the next multiple of the vector size (0 when p is
// aligned or null), for rows of at least kPeelMinVectors vectors (shorter
// ones gain nothing from it).
constexpr size_t kPeelMinVectors = 2 * kUnroll;
HWY_INLINE size_t HeadToAlign(DF d, const void* p, size_t n) {
  const size_t bytes = hn::Lanes(d) * sizeof(float);
  if (bytes == sizeof(float) || n < kPeelMinVectors * hn::Lanes(d)) return 0;
  const auto address = reinterpret_cast<uintptr_t>(p);
  if (address % sizeof(float) != 0) return 0;
  return (bytes - address % bytes) % bytes / sizeof(float);
}
// The address a pass's stores start from, for HeadToAlign: the output of the
// f32 passes below (ScalePass, LogPass), nullptr (no peel) for any other.
template <class Pass>
HWY_INLINE const void* PassAlignTarget(const Pass& /*pass*/) {
  return nullptr;
}

// The head itself: a partial vector (Tail at 0), or the pass's own scalar
// loop where a masked store cost more than the alignment gained (ScalePass:
// in place, 8 ns of a 35 ns pass on Zen 4).
template <class Pass>
HWY_INLINE void PassHead(const Pass& pass, size_t count) {
  pass.Tail(DF(), 0, count);
}

template <class Pass>
HWY_INLINE void RunPass(size_t n, const Pass& pass) {
  const DF d;
  const size_t N = hn::Lanes(d);
  size_t i = HeadToAlign(d, PassAlignTarget(pass), n);
  if (i != 0) PassHead(pass, i);
  for (; i + kUnroll * N <= n; i += kUnroll * N) {
    pass.Vector(d, i);
    pass.Vector(d, i + N);
    pass.Vector(d, i + 2 * N);
    pass.Vector(d, i + 3 * N);
  }
  for (; i + N <= n; i += N) pass.Vector(d, i);
  if (i < n) pass.Tail(d, i, n - i);
}

// Brings the cache line of p into this core's cache for writing (its
// read-for-ownership done ahead of the store; a hint, never faults).
HWY_INLINE void PrefetchForWrite(const void* p) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2 && (defined(__GNUC__) || defined(__clang__))
  asm volatile("prefetchw %0" : : "m"(*static_cast<const char*>(p)));
#else
  hwy::Prefetch(p);
#endif
}

struct NoPass {
  HWY_INLINE void Vector(DF /*d*/, size_t /*i*/) const {}
  HWY_INLINE void Tail(DF /*d*/, size_t /*i*/, size_t /*count*/) const {}
};
// What a compute-bound pass over a row can bring into cache for the passes
// after it (batched rows beyond L1, where the exp pass would otherwise
// leave the memory idle): `next` (nullable), the next row, read by the
// fused pass that ends this row, of a row as long as this one with
// `next_bytes` bytes per element; `out` (nullable), this row's output,
// written by that pass (`out_bytes` per element), prefetched for writing
// so its read-for-ownership is done before the stores. Each step
// prefetches as many elements of each as it reads.
struct RowPrefetch {
  const void* next = nullptr;
  size_t next_bytes = 0;
  void* out = nullptr;
  size_t out_bytes = 0;
};

// The segment kernels' hint (kernels.h) as a RowPrefetch.
HWY_INLINE RowPrefetch ToRowPrefetch(const SegmentPrefetch& hint) {
  return RowPrefetch{hint.next, hint.next_bytes, hint.out, hint.out_bytes};
}

// sum_i exp(t_i) (exp = ExpRef or ExpDiff), blocked; stores e_i if kStore;
// prefetches as `prefetch` says. `side`: a pass over another row of n
// elements run in the same loop, vector by vector from element 0 (no peel:
// its stores must be fine at the offsets of this row's lanes), e.g. the
// previous row's streamed scale pass, so that its DRAM writes overlap the
// exps (softmax_rows.cc, pipelined rows). The sum does not depend on it.
template <bool kStore, class Src, class Exp, class Side = NoPass>
HWY_INLINE double ExpSum(const Src& src_ref, size_t n, const Exp& exp_ref,
                         float* HWY_RESTRICT dst, const RowPrefetch& prefetch = {},
                         const Side& side_ref = Side{}) {
  const Side side = side_ref;
  const Src src = src_ref;
  const Exp exp = exp_ref;
  const DF d;
  const size_t N = hn::Lanes(d);
  constexpr size_t kStepBytes = kUnroll * kMaxLanes * sizeof(float);
  BlockSum sum(d);
  const char* next = static_cast<const char*>(prefetch.next);
  char* out = static_cast<char*>(prefetch.out);
  size_t i = 0;
  for (; i + kUnroll * N <= n; i += kUnroll * N) {
    // kStepBytes bounds a step's bytes (a constant trip count: unrolled,
    // not a loop; AVX-512 reads 256 bytes of an f32 row, 128 of a bf16 one).
    if (next != nullptr) {
      const size_t b = kUnroll * N * prefetch.next_bytes;
      const char* p = next + i * prefetch.next_bytes;
      for (size_t k = 0; k < kStepBytes; k += 64) {
        if (k < b) hwy::Prefetch(p + k);
      }
    }
    if (out != nullptr) {
      const size_t b = kUnroll * N * prefetch.out_bytes;
      char* p = out + i * prefetch.out_bytes;
      for (size_t k = 0; k < kStepBytes; k += 64) {
        if (k < b) PrefetchForWrite(p + k);
      }
    }
    const VF e0 = exp(d, src.Load(d, i));
    const VF e1 = exp(d, src.Load(d, i + N));
    const VF e2 = exp(d, src.Load(d, i + 2 * N));
    const VF e3 = exp(d, src.Load(d, i + 3 * N));
    side.Vector(d, i);
    side.Vector(d, i + N);
    side.Vector(d, i + 2 * N);
    side.Vector(d, i + 3 * N);
    if (kStore) {
      hn::StoreU(e0, d, dst + i);
      hn::StoreU(e1, d, dst + i + N);
      hn::StoreU(e2, d, dst + i + 2 * N);
      hn::StoreU(e3, d, dst + i + 3 * N);
    }
    sum.Add4(d, e0, e1, e2, e3);
  }
  unsigned k = 0;
  for (; i + N <= n; i += N, ++k) {
    const VF e = exp(d, src.Load(d, i));
    side.Vector(d, i);
    if (kStore) hn::StoreU(e, d, dst + i);
    sum.Add1(e, k);
  }
  if (i < n) {
    const VF e = ExpTail(exp, d, src.LoadTail(d, i, n - i));
    side.Tail(d, i, n - i);
    if (kStore) StoreTail(d, e, dst + i, n - i);
    sum.Add1(e, k);
  }
  return sum.Total(d);
}

// dst_i = exp(t_i) * factor (the exp's flush_below already accounts for
// factor via FlushExtra, so no denormal is stored).
template <class Src, class Exp>
HWY_INLINE void ExpScaleStore(const Src& src, size_t n, const Exp& exp, float factor,
                              float* HWY_RESTRICT dst) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const VF f = hn::Set(d, factor);
  size_t i = 0;
  for (; i + kUnroll * N <= n; i += kUnroll * N) {
    const VF e0 = exp(d, src.Load(d, i));
    const VF e1 = exp(d, src.Load(d, i + N));
    const VF e2 = exp(d, src.Load(d, i + 2 * N));
    const VF e3 = exp(d, src.Load(d, i + 3 * N));
    hn::StoreU(hn::Mul(e0, f), d, dst + i);
    hn::StoreU(hn::Mul(e1, f), d, dst + i + N);
    hn::StoreU(hn::Mul(e2, f), d, dst + i + 2 * N);
    hn::StoreU(hn::Mul(e3, f), d, dst + i + 3 * N);
  }
  for (; i + N <= n; i += N) hn::StoreU(hn::Mul(exp(d, src.Load(d, i)), f), d, dst + i);
  if (i < n) {
    StoreTail(d, hn::Mul(ExpTail(exp, d, src.LoadTail(d, i, n - i)), f), dst + i, n - i);
  }
}

// dst_i = e^(t_i - shift) * factor for an arbitrary finite shift. When
// |shift| <= kRefMaxAbs the exp is ExpRef with N = round(shift log2e) and the
// constant e^(N ln2 - shift) (float64) is folded into the factor: one extra
// f32 rounding of the factor instead of 6 TwoSum ops per element.
template <class Src>
HWY_INLINE void ExpShiftScaleStore(const Src& src, size_t n, float shift, double factor,
                                   float* HWY_RESTRICT dst) {
  if (std::fabs(shift) <= kRefMaxAbs) {
    const float nref = std::nearbyint(shift * kLog2e);
    const float f = static_cast<float>(
        factor * std::exp(static_cast<double>(nref) * kLn2d - static_cast<double>(shift)));
    ExpScaleStore(src, n, ExpRef::Make(nref, FlushExtra(f)), f, dst);
  } else {
    const float f = static_cast<float>(factor);
    ExpScaleStore(src, n, ExpDiff::Make(shift, FlushExtra(f)), f, dst);
  }
}

// dst_i *= factor; kFlush: products below FLT_MIN flushed to 0 (no
// denormals). kFlush = false only where softmax_outputs_normal (kernels.h)
// holds.
template <bool kFlush = true>
struct ScalePass {
  float* HWY_RESTRICT dst;
  float factor;
  HWY_INLINE VF Apply(DF d, VF v) const {
    const VF y = hn::Mul(v, hn::Set(d, factor));
    if (!kFlush) return y;
    return hn::IfThenZeroElse(hn::Lt(hn::Abs(y), hn::Set(d, std::numeric_limits<float>::min())),
                              y);
  }
  HWY_INLINE void Vector(DF d, size_t i) const {
    hn::StoreU(Apply(d, hn::LoadU(d, dst + i)), d, dst + i);
  }
  HWY_INLINE void Tail(DF d, size_t i, size_t count) const {
    StoreTail(d, Apply(d, LoadTailZero(d, dst + i, count)), dst + i, count);
  }
  // One element: the same IEEE product and flush test as a lane.
  static HWY_INLINE float Scalar(float v, float factor) {
    const float y = v * factor;
    return kFlush && std::fabs(y) < std::numeric_limits<float>::min() ? 0.0f : y;
  }
  // Apply on elements [0, count), one at a time.
  HWY_INLINE void Head(size_t count) const {
    for (size_t k = 0; k < count; ++k) dst[k] = Scalar(dst[k], factor);
  }
};
template <bool kFlush>
HWY_INLINE void PassHead(const ScalePass<kFlush>& pass, size_t count) {
  pass.Head(count);
}
template <bool kFlush>
HWY_INLINE const void* PassAlignTarget(const ScalePass<kFlush>& pass) {
  return pass.dst;
}
template <bool kFlush = true>
HWY_INLINE void ScaleInPlace(float* HWY_RESTRICT dst, size_t n, float factor) {
  RunPass(n, ScalePass<kFlush>{dst, factor});
}

// A full output vector of a last pass: a regular store, or with kStream a
// streaming (non-temporal) one, which writes the line to memory without
// first reading it (no read-for-ownership) and without keeping it in cache:
// one DRAM sweep saved per output that is not read again soon (batched rows
// whose output exceeds the last-level cache; kernels.h, Rows::stream_stores).
// kStream needs p aligned to the vector (StreamAligned below says when a pass
// may use it) and a hwy::FlushStream() before other threads read the
// output.
template <bool kStream>
HWY_INLINE void StoreOut(VF v, DF d, float* HWY_RESTRICT p) {
  if constexpr (kStream) {
    hn::Stream(v, d, p);
  } else {
    hn::StoreU(v, d, p);
  }
}

// Whether a streamed pass over n elements of `dst` (its loop aligned on dst:
// RunPass, and RowMinMaxWith for a streaming pass) stores every full vector
// at an aligned address: dst is float-aligned and the row long enough for
// the peel (HeadToAlign).
HWY_INLINE bool StreamAligned(const void* dst, size_t n) {
  const DF d;
  if (hn::Lanes(d) == 1) return true;
  return reinterpret_cast<uintptr_t>(dst) % sizeof(float) == 0 && n >= kPeelMinVectors * hn::Lanes(d);
}

// dst_i = (t_i - shift) - log_sum, in that order.
template <class Src, bool kStream = false>
struct LogPass {
  const Src& src;
  float* HWY_RESTRICT dst;
  float shift, log_sum;
  HWY_INLINE VF Apply(DF d, VF t) const {
    return hn::Sub(hn::Sub(t, hn::Set(d, shift)), hn::Set(d, log_sum));
  }
  HWY_INLINE void Vector(DF d, size_t i) const {
    StoreOut<kStream>(Apply(d, src.Load(d, i)), d, dst + i);
  }
  HWY_INLINE void Tail(DF d, size_t i, size_t count) const {
    StoreTail(d, Apply(d, src.LoadTail(d, i, count)), dst + i, count);
  }
};
template <class Src, bool kStream>
HWY_INLINE const void* PassAlignTarget(const LogPass<Src, kStream>& pass) {
  return pass.dst;
}
// Whether a pass streams its stores (StoreOut<true>): a fused scan then
// aligns its loop on the pass's output, not on its own row (RowMinMaxWith).
template <class Pass>
constexpr bool kPassStreams = false;
template <class Src>
constexpr bool kPassStreams<LogPass<Src, true>> = true;

// dst_i = from_i * factor: ScalePass (the same products and flush) reading
// another row, for reload softmax whose exps sit in a scratch row in cache
// so that dst is written once, with kStream by streaming stores
// (kernels.h, Rows::scratch).
template <bool kFlush, bool kStream>
struct ScaleCopyPass {
  const float* HWY_RESTRICT from;
  float* HWY_RESTRICT dst;
  float factor;
  HWY_INLINE VF Apply(DF d, VF v) const { return ScalePass<kFlush>{dst, factor}.Apply(d, v); }
  HWY_INLINE void Vector(DF d, size_t i) const {
    StoreOut<kStream>(Apply(d, hn::LoadU(d, from + i)), d, dst + i);
  }
  HWY_INLINE void Tail(DF d, size_t i, size_t count) const {
    StoreTail(d, Apply(d, LoadTailZero(d, from + i, count)), dst + i, count);
  }
  HWY_INLINE void Head(size_t count) const {
    for (size_t k = 0; k < count; ++k) dst[k] = ScalePass<kFlush>::Scalar(from[k], factor);
  }
};
template <bool kFlush, bool kStream>
HWY_INLINE void PassHead(const ScaleCopyPass<kFlush, kStream>& pass, size_t count) {
  pass.Head(count);
}
template <bool kFlush, bool kStream>
HWY_INLINE const void* PassAlignTarget(const ScaleCopyPass<kFlush, kStream>& pass) {
  return pass.dst;
}
template <bool kFlush>
constexpr bool kPassStreams<ScaleCopyPass<kFlush, true>> = true;
template <class Src>
HWY_INLINE void LogStore(const Src& src, size_t n, float shift, float log_sum,
                         float* HWY_RESTRICT dst) {
  RunPass(n, LogPass<Src>{src, dst, shift, log_sum});
}

HWY_INLINE void Fill(float* HWY_RESTRICT dst, size_t n, float value) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const VF v = hn::Set(d, value);
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(v, d, dst + i);
  if (i < n) StoreTail(d, v, dst + i, n - i);
}
