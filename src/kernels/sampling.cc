// src/kernels/sampling.cc: Highway kernels of the sampling family
// (src/kernels/sampling.h).
//
// topk_scan: one read of the row does two things per step of 4 vectors:
//  * the online normaliser, as TwoPassScan (scan-inl.h's OnlineScanWith
//    with TwoPassSum; Dukhan & Ablavatski's reference-exponent form of the
//    online sum): a row-wide reference exponent that moves only when a
//    step's max exceeds it by kTwoPassSlack octaves (an exact power-of-two
//    rescale), ExpRef reducing t itself (no TwoSum), blocked f32 sums
//    widened to float64 every 16 adds per lane. Rows beyond ExpRef's exact
//    range (|max| > kRefMaxAbs), with +inf or NaN get their sum from
//    OnlineScan (TwoSum exp) in a second read;
//  * a threshold filter for the k best (the visitor's other half): one
//    compare of the step's max with the current k-th best value `thr`; only
//    when some lane is above it are the 4 vectors stored and their lanes
//    pushed (in index order) into the candidate buffer. When the buffer is
//    full, nth_element keeps the best k and thr rises to the k-th value.
//    After ~cap elements thr is near the top of the distribution, so almost
//    every step is 1 compare + 1 branch on top of the exp-sum (no heap, no
//    per-element scalar work).
// An element enters only if strictly greater than thr: an element equal to
// the k-th best has a higher index than all buffered ones, so it loses the
// tie (ties keep the lower index) and may be dropped.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/sampling.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <string>

#include "kernels/row-inl.h"
#include "kernels/sampling.h"

HWY_BEFORE_NAMESPACE();
namespace smax::kernels::HWY_NAMESPACE {

// Keeps the best k of buf[0..count) in buf[0..k) and returns the k-th value.
HWY_INLINE float Compact(TopkCandidate* buf, int64_t& count, int64_t k) {
  std::nth_element(buf, buf + (k - 1), buf + count, topk_better);
  count = k;
  return buf[k - 1].value;
}

// The OnlineScanWith visitor of topk_scan: TwoPassSum (the normaliser) and
// the threshold filter of the candidates.
struct TopkVisitor {
  TwoPassSum sum;
  TopkCandidate* HWY_RESTRICT buf;
  int64_t k, cap;
  float thr = kNegInf;  // k-th best value at the last compaction
  int64_t count = 0;
  TopkVisitor(DF d, TopkCandidate* HWY_RESTRICT b, int64_t kk, int64_t c)
      : sum(d), buf(b), k(kk), cap(c) {}

  HWY_INLINE float Rebase(DF d, VF step_max, bool first) { return sum.Rebase(d, step_max, first); }
  // Pushes the lanes of v above thr (lanes [0, lanes), element base + j).
  HWY_INLINE void Push(DF d, VF v, size_t base, size_t lanes) {
    if (hn::AllFalse(d, hn::Gt(v, hn::Set(d, thr)))) return;
    HWY_ALIGN float b[kMaxLanes] = {};  // slow path; {} quiets -Wmaybe-uninitialized
    hn::Store(v, d, b);
    for (size_t j = 0; j < lanes; ++j) {
      if (b[j] > thr) {
        buf[count].value = b[j];
        buf[count].index = static_cast<int64_t>(base + j);
        if (++count == cap) thr = Compact(buf, count, k);
      }
    }
  }
  HWY_INLINE void Step4(DF d, size_t i, VF t0, VF t1, VF t2, VF t3, VF sm) {
    sum.Step4(d, i, t0, t1, t2, t3, sm);
    if (HWY_UNLIKELY(!hn::AllFalse(d, hn::Gt(sm, hn::Set(d, thr))))) {
      const size_t N = hn::Lanes(d);
      Push(d, t0, i, N);
      Push(d, t1, i + N, N);
      Push(d, t2, i + 2 * N, N);
      Push(d, t3, i + 3 * N, N);
    }
  }
  HWY_INLINE void Step1(DF d, size_t i, VF t, size_t lanes, unsigned s) {
    sum.Step1(d, i, t, lanes, s);
    Push(d, t, i, lanes);  // padding lanes are -inf
  }
};

TopkScan TopkScanImpl(const float* HWY_RESTRICT t, int64_t n64, int64_t k,
                      TopkCandidate* HWY_RESTRICT buf, int64_t cap) {
  const DF d;
  const size_t n = static_cast<size_t>(n64);
  const Logits<false, false> src{t, nullptr, 1.0f};
  // The sum: TwoPassScan's scheme (scan-inl.h): sum = S * 2^nref with ExpRef
  // reducing t itself (no TwoSum), nref moving only when a step's max
  // exceeds (nref + kTwoPassSlack) ln2; the rescale is a power of two.
  TopkVisitor v(d, buf, k, cap);
  const float max = OnlineScanWith(src, n, v);
  const float nref = v.sum.nref;
  const int64_t count = v.count;

  TopkScan res;
  const double total = v.sum.sum.Total(d);
  res.max = max;
  res.count = count;
  if (res.max == kNegInf && total == 0.0) {  // every logit -inf (NaN gives NaN sums)
    res.ref = 0.0;
    res.d = 0.0;
  } else if (std::fabs(res.max) <= kRefMaxAbs && std::isfinite(total)) {
    res.ref = static_cast<double>(nref) * kLn2d;
    res.d = total;
  } else {
    // |max| beyond the exact range of ExpRef, +inf or NaN: the sum again
    // with the TwoSum online scan (a second read; the candidates stand).
    const OnlineResult o = OnlineScan(src, n);
    res.ref = o.ref;
    res.d = o.d;
  }
  return res;
}

int64_t SelectGreaterImpl(const float* HWY_RESTRICT t, int64_t n64, float thr,
                          int64_t* HWY_RESTRICT out) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const size_t n = static_cast<size_t>(n64);
  const Logits<false, false> src{t, nullptr, 1.0f};
  const VF vt = hn::Set(d, thr);
  int64_t count = 0;
  auto take = [&](VF v, size_t base, size_t lanes) {
    HWY_ALIGN float b[kMaxLanes] = {};  // slow path; {} quiets -Wmaybe-uninitialized
    hn::Store(v, d, b);
    for (size_t j = 0; j < lanes; ++j) {
      if (b[j] > thr) out[count++] = static_cast<int64_t>(base + j);
    }
  };
  size_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    const VF v0 = src.Load(d, i);
    const VF v1 = src.Load(d, i + N);
    if (HWY_UNLIKELY(!hn::AllFalse(d, hn::Gt(hn::Max(v0, v1), vt)))) {
      take(v0, i, N);
      take(v1, i + N, N);
    }
  }
  for (; i + N <= n; i += N) {
    const VF v = src.Load(d, i);
    if (!hn::AllFalse(d, hn::Gt(v, vt))) take(v, i, N);
  }
  if (i < n) {
    const VF v = src.LoadTail(d, i, n - i);
    if (!hn::AllFalse(d, hn::Gt(v, vt))) take(v, i, n - i);
  }
  return count;
}

MaxScan MaxScanImpl(const float* HWY_RESTRICT t, int64_t n64) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const size_t n = static_cast<size_t>(n64);
  const Logits<false, false> src{t, nullptr, 1.0f};
  // NaN lanes are replaced by -inf before the max (x86 max semantics would
  // let them through or not depending on the operand order) and recorded.
  VF m0 = hn::Set(d, kNegInf), m1 = m0;
  VF nan = hn::Zero(d);
  auto step = [&](VF& m, VF v) {
    const auto isnan = hn::IsNaN(v);
    nan = hn::Or(nan, hn::VecFromMask(d, isnan));
    m = hn::Max(m, hn::IfThenElse(isnan, hn::Set(d, kNegInf), v));
  };
  size_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    step(m0, src.Load(d, i));
    step(m1, src.Load(d, i + N));
  }
  for (; i + N <= n; i += N) step(m0, src.Load(d, i));
  if (i < n) step(m1, src.LoadTail(d, i, n - i));
  MaxScan r;
  r.max = ReduceMax(d, hn::Max(m0, m1));
  const DI di;
  r.has_nan = !hn::AllTrue(di, hn::Eq(hn::BitCast(di, nan), hn::Zero(di)));
  return r;
}

int64_t FindFirstEqualImpl(const float* HWY_RESTRICT t, int64_t n64, float v) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const size_t n = static_cast<size_t>(n64);
  const VF vv = hn::Set(d, v);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    if (!hn::AllFalse(d, hn::Eq(hn::LoadU(d, t + i), vv))) break;
  }
  for (; i < n; ++i) {
    if (t[i] == v) return static_cast<int64_t>(i);
  }
  return n64;
}

// Philox4x32-10 for `count` consecutive element pairs j0, j0 + 1, ... of a
// row, vectorised across pairs: each u64 lane holds one 32-bit word (high
// half 0) so MulEven on the u32 view is the full 32 x 32 -> 64 product
// (mulhilo32). Writes the high word of u for elements 2j and 2j + 1
// (Philox words 1 and 3) to hi[2q], hi[2q + 1]. The scalar target calls the
// Random123 function; both give the words of kernels::philox_words.
void PhiloxHiWordsImpl(uint64_t seed, uint64_t row, uint64_t j0, size_t count,
                       uint32_t* HWY_RESTRICT hi) {
#if HWY_TARGET == HWY_SCALAR
  for (size_t q = 0; q < count; ++q) {
    uint32_t w[4];
    philox_words(seed, row, j0 + q, w);
    hi[2 * q] = w[1];
    hi[2 * q + 1] = w[3];
  }
#else
  using D64 = hn::ScalableTag<uint64_t>;
  using V64 = hn::Vec<D64>;
  const D64 d64;
  const hn::Repartition<uint32_t, D64> d32;
  const size_t N = hn::Lanes(d64);
  uint32_t k0[10], k1[10];
  k0[0] = static_cast<uint32_t>(seed);
  k1[0] = static_cast<uint32_t>(seed >> 32);
  for (int r = 1; r < 10; ++r) {
    k0[r] = k0[r - 1] + 0x9E3779B9u;  // PHILOX_W32_0
    k1[r] = k1[r - 1] + 0xBB67AE85u;  // PHILOX_W32_1
  }
  const V64 lo32 = hn::Set(d64, uint64_t{0xFFFFFFFFu});
  const V64 m0 = hn::Set(d64, uint64_t{0xD2511F53u});  // PHILOX_M4x32_0
  const V64 m1 = hn::Set(d64, uint64_t{0xCD9E8D57u});  // PHILOX_M4x32_1
  const V64 row_lo = hn::Set(d64, row & 0xFFFFFFFFu);
  const V64 row_hi = hn::Set(d64, row >> 32);
  HWY_ALIGN uint64_t tail[HWY_MAX_BYTES / sizeof(uint64_t)];
  for (size_t q = 0; q < count; q += N) {
    const V64 j = hn::Iota(d64, j0 + q);
    V64 c0 = hn::And(j, lo32), c1 = hn::ShiftRight<32>(j), c2 = row_lo, c3 = row_hi;
    for (int r = 0; r < 10; ++r) {
      const V64 p0 = hn::MulEven(hn::BitCast(d32, c0), hn::BitCast(d32, m0));
      const V64 p1 = hn::MulEven(hn::BitCast(d32, c2), hn::BitCast(d32, m1));
      c0 = hn::Xor(hn::Xor(hn::ShiftRight<32>(p1), c1), hn::Set(d64, uint64_t{k0[r]}));
      c1 = hn::And(p1, lo32);
      c2 = hn::Xor(hn::Xor(hn::ShiftRight<32>(p0), c3), hn::Set(d64, uint64_t{k1[r]}));
      c3 = hn::And(p0, lo32);
    }
    // Little-endian u64 (w1 | w3 << 32) stores the pair (w1, w3).
    const V64 packed = hn::Or(c1, hn::ShiftLeft<32>(c3));
    if (q + N <= count) {
      hn::StoreU(packed, d64, reinterpret_cast<uint64_t*>(hi) + q);
    } else {
      hn::Store(packed, d64, tail);
      std::memcpy(hi + 2 * q, tail, (count - q) * sizeof(uint64_t));
    }
  }
#endif
}

int64_t SamplingTargetImpl() { return HWY_TARGET; }

}  // namespace smax::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace smax::kernels {

HWY_EXPORT(TopkScanImpl);
HWY_EXPORT(SelectGreaterImpl);
HWY_EXPORT(MaxScanImpl);
HWY_EXPORT(FindFirstEqualImpl);
HWY_EXPORT(PhiloxHiWordsImpl);
HWY_EXPORT(SamplingTargetImpl);

TopkScan topk_scan(const float* t, int64_t n, int64_t k, TopkCandidate* buf,
                   int64_t cap) noexcept {
  return HWY_DYNAMIC_DISPATCH(TopkScanImpl)(t, n, k, buf, cap);
}
int64_t select_greater(const float* t, int64_t n, float thr, int64_t* out) noexcept {
  return HWY_DYNAMIC_DISPATCH(SelectGreaterImpl)(t, n, thr, out);
}
MaxScan max_scan(const float* t, int64_t n) noexcept {
  return HWY_DYNAMIC_DISPATCH(MaxScanImpl)(t, n);
}
int64_t find_first_equal(const float* t, int64_t n, float v) noexcept {
  return HWY_DYNAMIC_DISPATCH(FindFirstEqualImpl)(t, n, v);
}
void philox_hi_words(uint64_t seed, uint64_t row, uint64_t j0, int64_t count,
                     uint32_t* hi) noexcept {
  HWY_DYNAMIC_DISPATCH(PhiloxHiWordsImpl)(seed, row, j0, static_cast<size_t>(count), hi);
}
std::string softmax_topk_kernel_name() {
  std::string target = hwy::TargetName(HWY_DYNAMIC_DISPATCH(SamplingTargetImpl)());
  for (char& ch : target) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return "f32_softmax_topk__" + target + "_rr2_p5_u4_ts_filter";
}

}  // namespace smax::kernels
#endif  // HWY_ONCE
