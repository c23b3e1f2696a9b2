// tests/test_size_safety.cc: sizes and offsets at the edges of int64 and of
// 32-bit indexing (docs/reliability.md, "Guarantees" and "How it is tested").
//
//  * Rejection of views whose element counts or byte offsets overflow int64,
//    in the cases tests/test_errors.cc does not cover: per-dim reaches that
//    fit but whose sum does not, INT64_MIN strides, byte (not element)
//    overflow in the negative direction, offsets that wrap the address
//    space, and the same checks on masks, logsumexp's dst and backward's
//    dx. Nothing may be written on rejection.
//  * Zero-sized dims make the element count 0 whatever the other sizes and
//    their order (no spurious overflow error).
//  * Offsets beyond 2^31 elements: a row of 2^31 + 7 elements (logsumexp,
//    one scalar out) and rows, columns and gathered rows 2^31+ elements
//    apart, all over a sparse mapping (MAP_NORESERVE, zero pages) so the
//    test costs little memory: pages that are only read map the shared zero
//    page.
#include <sys/mman.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "reference/reference.h"
#include "test_util.h"

namespace smax_test {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

// A src / dst pair of small real tensors; the caller corrupts one view.
struct Pair {
  Tensor src{{3, 5}};
  Tensor dst{{3, 5}};
  Pair() {
    src.fill([](int64_t i) { return 0.25f * static_cast<float>(i % 7); });
  }
};

void expect_all_ops_reject(const TensorView& src, const TensorView& dst, const std::string& needle,
                           Tensor& dst_owner, const std::string& what) {
  EXPECT_TRUE(throws_invalid([&] { smax::softmax(src, dst); }, needle)) << what;
  EXPECT_TRUE(throws_invalid([&] { smax::log_softmax(src, dst); }, needle)) << what;
  EXPECT_TRUE(dst_owner.guards_intact()) << what;
  for (float v : dst_owner.dense()) {
    ASSERT_EQ(std::memcmp(&v, &kSentinel, sizeof v), 0) << what << ": dst written";
  }
}

TEST(SizeSafety, SumOfReachesOverflows) {
  // Each dim reaches < INT64_MAX / 4 bytes, together they overflow.
  Pair p;
  p.dst.poison();
  TensorView v = p.src.view();
  v.strides[0] = kMax / 8;  // reach 2 * kMax/8 elements = kMax/4 -> *4 bytes ~ kMax
  v.strides[1] = kMax / 16;  // reach 4 * kMax/16 = kMax/4 elements
  expect_all_ops_reject(v, p.dst.view(), "overflow", p.dst, "sum of positive reaches");
  v.strides[0] = -(kMax / 8);
  v.strides[1] = -(kMax / 16);
  expect_all_ops_reject(v, p.dst.view(), "overflow", p.dst, "sum of negative reaches");
}

TEST(SizeSafety, Int64MinStride) {
  Pair p;
  p.dst.poison();
  TensorView v = p.src.view();
  v.strides[1] = kMin;
  expect_all_ops_reject(v, p.dst.view(), "overflow", p.dst, "INT64_MIN stride");
  v = p.src.view();
  v.strides[0] = kMin + 1;
  expect_all_ops_reject(v, p.dst.view(), "overflow", p.dst, "INT64_MIN + 1 stride");
}

TEST(SizeSafety, ByteOverflowOnly) {
  // Element offsets fit int64, byte offsets (x4) do not: both signs.
  Pair p;
  p.dst.poison();
  TensorView v = p.src.view();
  v.strides[1] = kMax / 4 / 4 + 1;  // 4 steps of this * 4 bytes > kMax
  expect_all_ops_reject(v, p.dst.view(), "overflow", p.dst, "positive byte overflow");
  v.strides[1] = -(kMax / 4 / 4) - 2;  // -(2^63 + 16) bytes: just past INT64_MIN
  expect_all_ops_reject(v, p.dst.view(), "overflow", p.dst, "negative byte overflow");
  // dst with the same strides.
  TensorView d = p.dst.view();
  d.strides[0] = kMax / 8;
  EXPECT_TRUE(throws_invalid([&] { smax::softmax(p.src.view(), d); }, "dst"));
  EXPECT_TRUE(p.dst.guards_intact());
}

TEST(SizeSafety, OffsetsWrapTheAddressSpace) {
  // A negative stride that would reach below address 0, and a positive one
  // past the top: both fit int64 but not the address space.
  Pair p;
  p.dst.poison();
  TensorView v = p.src.view();
  v.data = reinterpret_cast<void*>(uintptr_t{4096});
  v.strides[0] = -(int64_t{1} << 40);
  expect_all_ops_reject(v, p.dst.view(), "address", p.dst, "below 0");
  v.data = reinterpret_cast<void*>(~uintptr_t{0} - 4095);
  v.strides[0] = int64_t{1} << 40;
  expect_all_ops_reject(v, p.dst.view(), "address", p.dst, "past the top");
}

TEST(SizeSafety, MasksLogsumexpAndBackwardChecked) {
  Pair p;
  p.dst.poison();
  Tensor mask({3, 5});
  SoftmaxOptions o;
  TensorView m = mask.view();
  m.strides[0] = kMax / 2;
  o.additive_mask = m;
  EXPECT_TRUE(throws_invalid([&] { smax::softmax(p.src.view(), p.dst.view(), o); },
                             "additive_mask"));
  BoolTensor keep({3, 5});
  TensorView k = keep.view();
  k.strides[1] = kMin;
  SoftmaxOptions ob;
  ob.bool_mask = k;
  EXPECT_TRUE(throws_invalid([&] { smax::softmax(p.src.view(), p.dst.view(), ob); },
                             "bool_mask"));
  // logsumexp's dst.
  Tensor lse({3});
  lse.poison();
  TensorView l = lse.view();
  l.strides[0] = kMax / 3;
  EXPECT_TRUE(throws_invalid([&] { smax::logsumexp(p.src.view(), l); }, "dst"));
  EXPECT_TRUE(lse.guards_intact());
  // Backward: y, dy and dx.
  Tensor y({3, 5}), dy({3, 5});
  y.fill([](int64_t) { return 0.2f; });
  dy.fill([](int64_t i) { return static_cast<float>(i); });
  for (int which = 0; which < 3; ++which) {
    TensorView vy = y.view(), vdy = dy.view(), vdx = p.dst.view();
    TensorView& bad = which == 0 ? vy : which == 1 ? vdy : vdx;
    bad.strides[0] = kMin / 2;
    const char* name = which == 0 ? "y" : which == 1 ? "dy" : "dx";
    EXPECT_TRUE(throws_invalid([&] { smax::softmax_backward(vy, vdy, vdx); }, name)) << name;
    EXPECT_TRUE(throws_invalid([&] { smax::log_softmax_backward(vy, vdy, vdx); }, name)) << name;
  }
  for (float v : p.dst.dense()) ASSERT_EQ(std::memcmp(&v, &kSentinel, sizeof v), 0);
}

TEST(SizeSafety, ElementCountIgnoresDimOrder) {
  // The product of the non-zero sizes must fit int64 whatever the order of
  // the dims and wherever a zero-sized dim is (the batch dims are multiplied
  // together even when the axis is empty). Before this check was made
  // order-independent, [2^40, 2^40, 0] was rejected but [0, 2^40, 2^40]
  // accepted, and an empty axis next to huge batch dims overflowed the row
  // count (signed overflow, UB).
  for (int zero_at = 0; zero_at < 3; ++zero_at) {
    for (int64_t axis = 0; axis < 3; ++axis) {
      TensorView v;
      v.dtype = smax::DType::kF32;
      v.rank = 3;
      for (int d = 0; d < 3; ++d) {
        v.shape[d] = d == zero_at ? 0 : (int64_t{1} << 40);
        v.strides[d] = 1;
      }
      SoftmaxOptions o;
      o.axis = axis;
      const std::string what = "zero at " + std::to_string(zero_at) + " axis " +
                               std::to_string(axis);
      EXPECT_TRUE(throws_invalid([&] { smax::softmax(v, v, o); }, "element count")) << what;
      EXPECT_TRUE(throws_invalid([&] { smax::log_softmax_backward(v, v, v, o); },
                                 "element count")) << what;
      // Sizes whose non-zero product fits are fine: empty views, no error.
      for (int d = 0; d < 3; ++d) {
        if (d != zero_at) v.shape[d] = int64_t{1} << 20;
      }
      EXPECT_NO_THROW(smax::softmax(v, v, o)) << what;
      EXPECT_NO_THROW(smax::log_softmax_backward(v, v, v, o)) << what;
      float out[1] = {kSentinel};
      TensorView l = v;  // logsumexp keeps the axis as size 1
      l.data = out;
      l.shape[axis] = 1;
      if (zero_at != axis) {
        EXPECT_NO_THROW(smax::logsumexp(v, l, o)) << what;
      }
    }
  }
  // A negative size is still an error even next to a zero.
  TensorView v;
  v.rank = 2;
  v.shape[0] = 0;
  v.shape[1] = -1;
  EXPECT_TRUE(throws_invalid([&] { smax::softmax(v, v); }, "negative"));
}

// ---- offsets beyond 2^31 --------------------------------------------------------

// An anonymous private mapping reserving no swap: pages never written read
// as zeros and share the kernel's zero page.
class SparseFloats {
 public:
  explicit SparseFloats(int64_t count) : bytes_(static_cast<size_t>(count) * sizeof(float)) {
    void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    data_ = p == MAP_FAILED ? nullptr : static_cast<float*>(p);
  }
  ~SparseFloats() {
    if (data_ != nullptr) munmap(data_, bytes_);
  }
  SparseFloats(const SparseFloats&) = delete;
  SparseFloats& operator=(const SparseFloats&) = delete;
  float* data() const { return data_; }

 private:
  size_t bytes_;
  float* data_ = nullptr;
};

constexpr int64_t k2p31 = int64_t{1} << 31;

TEST(SizeSafety, LogSumExpOfARowLongerThan2p31) {
  // One contiguous row of n = 2^31 + 7 elements (rows mode: unit stride, no
  // scratch), all zero except three: logsumexp = log((n - 3) + e^3 + e^5 +
  // e^-2). The non-zero entries sit at both ends and just past 2^31, where a
  // 32-bit index would wrap.
  const int64_t n = k2p31 + 7;
  SparseFloats mem(n);
  if (mem.data() == nullptr) GTEST_SKIP() << "cannot map " << n << " floats";
  float* x = mem.data();
  x[0] = 3.0f;
  x[k2p31 + 1] = 5.0f;
  x[n - 1] = -2.0f;
  const double want =
      std::log(static_cast<double>(n - 3) + std::exp(3.0) + std::exp(5.0) + std::exp(-2.0));
  for (Algorithm a : {Algorithm::kAuto, Algorithm::kTwoPass}) {
    float out = kSentinel;
    SoftmaxOptions o;
    o.algorithm = a;
    smax::logsumexp(smax::make_view(x, {n}), smax::make_view(&out, {1}), o);
    EXPECT_LE(std::fabs(out - want), 2e-6 * (1.0 + std::fabs(want)))
        << algo_str(a) << ": got " << out << ", want " << want;
  }
}

TEST(SizeSafety, RowsColumnsAndGatherBeyond2p31) {
  // Views whose elements lie more than 2^31 elements apart, so every offset
  // computation (row offsets, axis strides, column strides) must be 64-bit.
  // Only the pages holding elements are touched.
  const int64_t far = k2p31 + 3;  // > 2^31: a wrapped 32-bit index points elsewhere
  SparseFloats mem(3 * far + 64);
  if (mem.data() == nullptr) GTEST_SKIP() << "cannot map sparse memory";
  float* base = mem.data();
  const float vals[3][4] = {{1, 2, 3, 4}, {-1, 0.5f, 9, 2}, {0, 0, 0, 30}};
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 4; ++c) base[r * far + c] = vals[r][c];
  }
  Tensor src_copy({3, 4});
  src_copy.fill([&](int64_t i) { return vals[i / 4][i % 4]; });

  auto check = [&](const TensorView& src, int64_t axis, bool bool_mask, const std::string& what) {
    SoftmaxOptions o;
    o.axis = axis;
    BoolTensor keep({3, 4});
    keep.fill([](int64_t) { return uint8_t{1}; });
    if (bool_mask) o.bool_mask = keep.view();  // forces the gather mode
    Tensor dst({3, 4});
    smax::softmax(src, dst.view(), o);
    const std::vector<double> ref = smax::reference::softmax(src_copy.view(), o);
    EXPECT_TRUE(check_softmax(to_dense(dst.view()), ref, what));
  };
  // Rows 2^31+3 elements apart (rows mode, one batch dim).
  check(smax::make_view(base, {3, 4}, {far, 1}), -1, false, "rows far apart");
  // Reduction over the far axis: columns mode (the inner dim is contiguous).
  check(smax::make_view(base, {3, 4}, {far, 1}), 0, false, "columns far apart");
  // With a bool mask: gather mode.
  check(smax::make_view(base, {3, 4}, {far, 1}), 0, true, "gathered far apart");
  check(smax::make_view(base, {3, 4}, {far, 1}), 1, true, "gathered rows far apart");
  // Negative far strides from the last row.
  float* last = base + 2 * far;
  Tensor rev({3, 4});
  rev.fill([&](int64_t i) { return vals[2 - i / 4][i % 4]; });
  Tensor dst({3, 4});
  smax::log_softmax(smax::make_view(last, {3, 4}, {-far, 1}), dst.view(), SoftmaxOptions{});
  EXPECT_TRUE(check_log(to_dense(dst.view()), smax::reference::log_softmax(rev.view()),
                        "negative far stride"));
  // Backward with dy rows far apart, dx contiguous.
  Tensor y({3, 4}), dx({3, 4});
  make_saved_output(Op::kSoftmaxBackward, src_copy, SoftmaxOptions{}, y);
  const TensorView dy = smax::make_view(base, {3, 4}, {far, 1});
  smax::softmax_backward(y.view(), dy, dx.view());
  const std::vector<double> ref = smax::reference::softmax_backward(y.view(), dy);
  const std::vector<double> yd = to_dense(y.view()), dyd = to_dense(dy);
  EXPECT_TRUE(check_backward(false, to_dense(dx.view()), ref, yd, dyd, Geometry({3, 4}, 1), 1.0,
                             "backward dy far apart"));
}

}  // namespace
}  // namespace smax_test
