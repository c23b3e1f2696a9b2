// tests/test_sparse.cc: sparse normalisers (include/smax/sparse.h) against
// the float64 oracles of src/reference/sparse.h and the hand vectors of
// docs/vectors.md, on every SIMD target. Bounds (u = 2^-24), as stated in the header:
//   sparsemax / entmax15 / entmax_bisect:  |y - ref| <= 2u |ref| + 1e-16 (64 + n) max(1, p),
//                                          p = 1/(alpha-1) (sparsemax 1, entmax15 2)
//   sparse_softmax:                        |y - ref| <= 2e-6 |ref| + 1e-36,
//                                          exact 0 off the kept set
//   backward:  |dx - ref| <= 2u |ref| + 1e-15 (n + 100 (1 + |2 - alpha|)) s w_i G + 1e-30
//              (w_i = y_i^(2-alpha), G = sum_j w_j |dy_j| / sum w; top-k:
//              2e-6 s w_i (|dy_i| + |q|) + 1e-30, q = <dy,w>/sum w); dalpha:
//              1e-6 (|ref| + sum_i |dy_i| (|y_i - p~_i|/(a-1)^2 + |S_i - p~_i H|/(a-1)))
//   losses:    |L - ref| <= 1e-6 (1 + |ref|) (top-k 2e-6 (1 + |ref|));
//              gradients 2u |ref| + |c s| A (A the forward's absolute term;
//              top-k 2e-6 (|ref| + |c s|))
// and exact 0 (output and gradient) at masked entries.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "reference/bounds.h"
#include "reference/reference.h"
#include "reference/rows.h"
#include "kernels/sparse.h"
#include "ops/sparse_rows.h"
#include "reference/sparse.h"
#include "smax/sparse.h"
#include "test_util.h"

namespace smax_test {
namespace {

using smax::EntmaxBisectOptions;
using smax::LossOptions;
using smax::Reduction;
namespace ref = smax::reference;
using RefSpec = ref::SparseLossSpec;

constexpr double kU = 1.0 / 16777216.0;  // 2^-24

// ---------------------------------------------------------------------------
// The ops under test, as one family of cases.
// ---------------------------------------------------------------------------
struct Case {
  enum Which { kSparsemax, kEntmax15, kBisect, kTopK } which;
  double alpha = 2.0;  // kBisect
  int64_t k = 1;       // kTopK
  std::string name() const {
    switch (which) {
      case kSparsemax: return "sparsemax";
      case kEntmax15: return "entmax15";
      case kBisect: return "entmax_bisect(alpha=" + std::to_string(alpha) + ")";
      case kTopK: return "sparse_softmax(k=" + std::to_string(k) + ")";
    }
    return "?";
  }
  bool topk() const { return which == kTopK; }
  double grad_alpha() const {
    // The library's alpha is an f32 parameter.
    return which == kSparsemax ? 2.0
           : which == kEntmax15 ? 1.5
           : which == kBisect   ? static_cast<double>(static_cast<float>(alpha))
                                : 1.0;
  }
  EntmaxBisectOptions bisect() const {
    EntmaxBisectOptions p;
    p.alpha = static_cast<float>(alpha);
    return p;
  }
  RefSpec spec() const {
    RefSpec s;
    s.which = static_cast<RefSpec::Which>(which);
    s.bisect = bisect();
    s.k = k;
    return s;
  }
};

const std::vector<Case>& all_cases() {
  static const std::vector<Case> v = {
      {Case::kSparsemax},      {Case::kEntmax15},      {Case::kBisect, 1.5}, {Case::kBisect, 1.25},
      {Case::kBisect, 2.0},    {Case::kBisect, 3.0},   {Case::kBisect, 1.1}, {Case::kTopK, 2.0, 1},
      {Case::kTopK, 2.0, 3},   {Case::kTopK, 2.0, 40}};
  return v;
}

void forward(const Case& c, const TensorView& src, const TensorView& dst, const SoftmaxOptions& o) {
  switch (c.which) {
    case Case::kSparsemax: smax::sparsemax(src, dst, o); break;
    case Case::kEntmax15: smax::entmax15(src, dst, o); break;
    case Case::kBisect: smax::entmax_bisect(src, dst, c.bisect(), o); break;
    case Case::kTopK: smax::sparse_softmax(src, dst, c.k, o); break;
  }
}

std::vector<double> reference_fwd(const Case& c, const TensorView& src, const SoftmaxOptions& o) {
  switch (c.which) {
    case Case::kSparsemax: return ref::sparsemax(src, o);
    case Case::kEntmax15: return ref::entmax15(src, o);
    case Case::kBisect: return ref::entmax_bisect(src, c.bisect(), o);
    case Case::kTopK: return ref::sparse_softmax(src, c.k, o);
  }
  return {};
}

void backward(const Case& c, const TensorView& y, const TensorView& dy, const TensorView& dx,
              const SoftmaxOptions& o) {
  switch (c.which) {
    case Case::kSparsemax: smax::sparsemax_backward(y, dy, dx, o); break;
    case Case::kEntmax15: smax::entmax15_backward(y, dy, dx, o); break;
    case Case::kBisect: smax::entmax_bisect_backward(y, dy, dx, std::nullopt, c.bisect(), o); break;
    case Case::kTopK: smax::sparse_softmax_backward(y, dy, dx, o); break;
  }
}

// Elementwise check of a forward output. `masked` marks entries whose logit
// is -inf (they must be exactly 0 unless the row is NaN).
// Absolute term of the candidate-set ops: the float64 thresholds of the
// library and of the oracle differ by rounding ~n * 1e-16, amplified by the
// power p = 1/(alpha-1) (>= 1) of the output map (ref::entmax_forward_bound
// at 0).
// The alpha of the forward bound (top-k: p = 1, as sparsemax).
double bound_alpha(const Case& c) { return c.topk() ? 2.0 : c.grad_alpha(); }
double abs_term(const Case& c, int64_t n) { return ref::entmax_forward_bound(0.0, bound_alpha(c), n); }
// The forward bound of the candidate-set ops (include/smax/sparse.h).
double entmax_bound(const Case& c, double e, int64_t n) {
  return ref::entmax_forward_bound(e, bound_alpha(c), n);
}

::testing::AssertionResult check_fwd(const Case& c, const std::vector<double>& out,
                                     const std::vector<double>& expect,
                                     const std::string& what, int64_t n) {
  if (out.size() != expect.size()) return ::testing::AssertionFailure() << what << ": size";
  CheckResult r;
  for (size_t i = 0; i < expect.size(); ++i) {
    const double e = expect[i];
    const double bound = c.topk() ? ref::softmax_bound(e) : entmax_bound(c, e, n);
    check_element(r, static_cast<int64_t>(i), static_cast<float>(out[i]), e, bound,
                  /*require_exact_zero=*/c.topk());
  }
  return to_assertion(r, what + " " + c.name());
}

// Zeros required at masked entries of a dense logits array.
::testing::AssertionResult check_masked_zero(const std::vector<double>& logits,
                                             const std::vector<double>& out,
                                             const std::vector<double>& expect) {
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] == -kInfD && !std::isnan(expect[i]) && out[i] != 0.0) {
      return ::testing::AssertionFailure() << "masked entry " << i << " = " << out[i];
    }
  }
  return ::testing::AssertionSuccess();
}

// Runs one forward case on a tensor; checks values and guards.
::testing::AssertionResult run_case(const Case& c, const Tensor& src, Tensor& dst,
                                    const SoftmaxOptions& o, const std::string& what) {
  dst.poison();
  forward(c, src.view(), dst.view(), o);
  if (!dst.guards_intact()) return ::testing::AssertionFailure() << what << ": guard written";
  const auto expect = reference_fwd(c, src.view(), o);
  std::vector<double> out(static_cast<size_t>(dst.numel()));
  for (int64_t i = 0; i < dst.numel(); ++i) out[static_cast<size_t>(i)] = dst.at(i);
  const int64_t n = src.shape()[static_cast<size_t>(o.axis < 0 ? o.axis + static_cast<int64_t>(src.shape().size()) : o.axis)];
  auto res = check_fwd(c, out, expect, what, n);
  if (!res) return res;
  SoftmaxOptions lo = o;
  const auto R = ref::ref_rows("t", src.view(), lo);
  return check_masked_zero(R.scatter(R.values), out, expect);
}

std::vector<double> dense(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[static_cast<size_t>(i)] = t.at(i);
  return v;
}

// Rows with many ties: small integers.
void fill_ties(Tensor& t, Rng& rng) {
  t.fill([&](int64_t) { return static_cast<float>(rng.index(4)) * 0.5f; });
}

class Sparse : public TargetTest {};

// ---------------------------------------------------------------------------
// Hand vectors (docs/vectors.md, "Sparse normalisers")
// ---------------------------------------------------------------------------
std::vector<float> run1(const Case& c, std::vector<float> x) {
  std::vector<float> y(x.size());
  forward(c, smax::make_view(x.data(), {static_cast<int64_t>(x.size())}),
          smax::make_view(y.data(), {static_cast<int64_t>(y.size())}), {});
  return y;
}

void expect_near(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

TEST_P(Sparse, SpecVectors) {
  const Case sm{Case::kSparsemax}, e15{Case::kEntmax15};
  expect_near(run1(sm, {-2, 0, 0.5f}), {0, 0.25, 0.75}, 1e-7);
  expect_near(run1(sm, {0.5f, 0.3f, 0.1f}), {8.0 / 15, 1.0 / 3, 2.0 / 15}, 1e-7);
  expect_near(run1(sm, {1, 2, 3}), {0, 0, 1}, 0);
  expect_near(run1(e15, {-2, 0, 0.5f}), {0, 0.3260074, 0.6739926}, 1e-7);
  expect_near(run1(e15, {1, 0}), {0.8307189, 0.1692811}, 1e-7);
  expect_near(run1(e15, {3, 0}), {1, 0}, 0);
  const Case b133{Case::kBisect, 1.33};
  expect_near(run1(b133, {-1, 0, 0.5f}), {0.0460, 0.3276, 0.6264}, 1e-4);
  expect_near(run1(b133, {1, 2, 3.5f}), {0.0026, 0.1012, 0.8963}, 1e-4);
  // alpha = 1.5 bisection equals exact 1.5-entmax; alpha = 2 equals sparsemax.
  expect_near(run1({Case::kBisect, 1.5}, {-2, 0, 0.5f}), {0, 0.3260074, 0.6739926}, 2e-7);
  expect_near(run1({Case::kBisect, 2.0}, {0.5f, 0.3f, 0.1f}), {8.0 / 15, 1.0 / 3, 2.0 / 15}, 2e-7);
  expect_near(run1({Case::kTopK, 2, 2}, {1, 2, 3, 0}), {0, 0.2689414, 0.7310586, 0}, 1e-7);
  {
    // Regression: a support of one entry without renormalisation must give
    // exactly that entry 1 (the bisection used to drift to tau_hi: 1/n).
    std::vector<float> x = {0, 3}, y(2);
    smax::EntmaxBisectOptions p;
    p.alpha = 1.7f;
    p.ensure_sum_one = false;
    smax::entmax_bisect(smax::make_view(x.data(), {2}), smax::make_view(y.data(), {2}), p);
    expect_near(y, {0, 1}, 1e-6);
  }

  // VJPs.
  std::vector<float> y = {0, 0.25f, 0.75f}, g = {1, 2, 4}, dx(3);
  smax::sparsemax_backward(smax::make_view(y.data(), {3}), smax::make_view(g.data(), {3}),
                           smax::make_view(dx.data(), {3}));
  expect_near(dx, {0, -1, 1}, 0);
  std::vector<float> y15 = {0, 0.3260074f, 0.6739926f}, g15 = {0, 1, 0};
  smax::entmax15_backward(smax::make_view(y15.data(), {3}), smax::make_view(g15.data(), {3}),
                          smax::make_view(dx.data(), {3}));
  expect_near(dx, {0, 0.336760, -0.336760}, 1e-6);

  // Losses (reduction none).
  auto loss1 = [](int which, std::vector<float> x, int64_t t, int64_t k = 1) {
    float out = 0;
    int64_t tg = t;
    LossOptions lo;
    lo.reduction = Reduction::kNone;
    const auto xv = smax::make_view(x.data(), {1, static_cast<int64_t>(x.size())});
    const auto tv = smax::make_index_view(&tg, {1});
    const auto ov = smax::make_view(&out, {1});
    if (which == 0) smax::sparsemax_loss(xv, tv, ov, lo);
    if (which == 1) smax::entmax15_loss(xv, tv, ov, lo);
    if (which == 2) smax::sparse_softmax_loss(xv, tv, ov, k, {}, lo);
    if (which == 3) {
      EntmaxBisectOptions p;
      p.alpha = 1.5f;
      smax::entmax_bisect_loss(xv, tv, ov, p, lo);
    }
    return out;
  };
  EXPECT_NEAR(loss1(0, {-2, 0, 0.5f}, 1), 0.5625, 1e-7);
  EXPECT_NEAR(loss1(0, {-2, 0, 0.5f}, 2), 0.0625, 1e-8);
  EXPECT_NEAR(loss1(1, {-2, 0, 0.5f}, 2), 0.184371, 1e-6);
  EXPECT_NEAR(loss1(1, {-2, 0, 0.5f}, 1), 0.684371, 1e-6);
  EXPECT_NEAR(loss1(3, {-2, 0, 0.5f}, 2), 0.184371, 1e-6);
  EXPECT_NEAR(loss1(2, {1, 2, 3, 0}, 2, 2), 0.3132617, 1e-6);
  EXPECT_NEAR(loss1(2, {1, 2, 3, 0}, 0, 2), 2.3132617, 1e-6);
}

// ---------------------------------------------------------------------------
// Sizes and adversarial data vs the float64 oracles
// ---------------------------------------------------------------------------
TEST_P(Sparse, SizesAndData) {
  const std::vector<int64_t> sizes = {0, 1, 2, 3, 7, 8, 9, 31, 33, 100, 1000, 1001};
  Rng rng("data");
  int failures = 0;
  for (const Case& c : all_cases()) {
    for (int64_t n : sizes) {
      for (Data d : all_data()) {
        Tensor src({3, n}, {}, n % 3), dst({3, n});
        fill_rows(src, 1, d, rng);
        const auto res = run_case(c, src, dst, {}, std::string(data_name(d)) + " n=" + std::to_string(n));
        EXPECT_TRUE(res);
        if (!res && ++failures > 8) FAIL() << "too many failures";
      }
      Tensor src({2, n}), dst({2, n});
      fill_ties(src, rng);
      EXPECT_TRUE(run_case(c, src, dst, {}, "ties n=" + std::to_string(n)));
    }
  }
}

TEST_P(Sparse, LongRows) {
  Rng rng("long");
  for (const Case& c : {Case{Case::kSparsemax}, Case{Case::kEntmax15}, Case{Case::kBisect, 1.5},
                        Case{Case::kBisect, 1.3}, Case{Case::kTopK, 2, 50}}) {
    for (int64_t n : {32000, 128256}) {
      for (Data d : {Data::kUniform, Data::kWide, Data::kConstant, Data::kNan, Data::kSomeNegInf,
                     Data::kHuge, Data::kAllNegInf}) {
        if (n == 128256 && d == Data::kConstant && c.which == Case::kBisect && c.alpha != 1.5) continue;
        Tensor src({1, n}), dst({1, n});
        fill_rows(src, 1, d, rng);
        EXPECT_TRUE(run_case(c, src, dst, {}, std::string(data_name(d)) + " n=" + std::to_string(n)));
      }
      Tensor src({1, n}), dst({1, n});
      src.fill([&](int64_t) { return rng.uniform(-0.05f, 0.05f); });  // every entry a candidate
      EXPECT_TRUE(run_case(c, src, dst, {}, "dense-support n=" + std::to_string(n)));
      if (n == 32000) {
        fill_ties(src, rng);
        EXPECT_TRUE(run_case(c, src, dst, {}, "ties n=" + std::to_string(n)));
      }
    }
  }
}

// The whole-row 1.5-entmax path (rows up to kEntmax15WholeRowMax): the
// kernel's certified threshold against the exact sort algorithm in
// float64, on data that stresses the certificate (ties, an entry exactly at
// the threshold, huge and tiny spreads, masked entries); it must either
// match or decline (NaN: the op then takes the sorted path), and decline
// rarely on ordinary rows. Then the op across the path boundary.
double sorted_entmax15_tau(const std::vector<float>& t, float m) {
  std::vector<double> z;
  for (float x : t) {
    if (x > -std::numeric_limits<float>::infinity()) {
      z.push_back(0.5 * (static_cast<double>(x) - static_cast<double>(m)));
    }
  }
  std::sort(z.begin(), z.end(), std::greater<double>());
  double tau = 0.0;
  smax::detail::sparse::entmax15_support(z.data(), static_cast<int64_t>(z.size()), &tau);
  return tau;
}

TEST_P(Sparse, Entmax15WholeRowThreshold) {
  namespace kn = smax::kernels;
  Rng rng("e15-whole-row");
  int rows = 0, declined = 0, ordinary_rows = 0, ordinary_declined = 0;
  auto check = [&](const std::vector<float>& t, const std::string& what, bool ordinary) {
    const int64_t n = static_cast<int64_t>(t.size());
    float m = -std::numeric_limits<float>::infinity();
    for (float x : t) m = std::max(m, x);
    ASSERT_TRUE(std::isfinite(m)) << what;
    const double tau = kn::entmax15_threshold(t.data(), n, m);
    const double want = sorted_entmax15_tau(t, m);
    ++rows;
    ordinary_rows += ordinary;
    if (std::isnan(tau)) {
      ++declined;
      ordinary_declined += ordinary;
      return;
    }
    // Both are float64 thresholds in z units (|tau| <= 1) from sums of <= n terms.
    EXPECT_NEAR(tau, want, 1e-16 * (64.0 + static_cast<double>(n)) * 4.0) << what << " n=" << n;
    std::vector<float> y(t.size());
    kn::entmax15_store(t.data(), n, m, tau, y.data());
    double sum = 0.0;
    for (size_t i = 0; i < t.size(); ++i) {
      const double v = std::max(0.5 * (static_cast<double>(t[i]) - m) - want, 0.0);
      EXPECT_NEAR(y[i], v * v, 2 * kU * v * v + 1e-16 * (64.0 + static_cast<double>(n)) * 2)
          << what << " i=" << i;
      sum += y[i];
    }
    EXPECT_NEAR(sum, 1.0, 1e-5) << what;
  };
  for (int64_t n : {1, 2, 3, 5, 8, 9, 17, 64, 128, 129, 255, 1000, 2048}) {
    for (int rep = 0; rep < 20; ++rep) {
      std::vector<float> t(static_cast<size_t>(n));
      for (auto& x : t) x = rng.normal();
      check(t, "normal", true);
      for (auto& x : t) x = rng.normal(0.0f, 20.0f);
      check(t, "wide", true);
      for (auto& x : t) x = rng.uniform(-0.01f, 0.01f);  // every entry in the support
      check(t, "narrow", true);
      for (auto& x : t) x = static_cast<float>(rng.index(4)) * 0.5f;
      check(t, "ties", false);
      for (auto& x : t) x = rng.normal() + 1e6f;  // f32 stage A rounds coarsely here
      check(t, "offset 1e6", false);
      for (auto& x : t) x = rng.bernoulli(0.3) ? -std::numeric_limits<float>::infinity() : rng.normal();
      t[0] = 0.0f;
      check(t, "masked", false);
      for (auto& x : t) x = rng.bernoulli(0.5) ? 1e30f * rng.normal() : 1e-40f * rng.normal();
      t[0] = std::fabs(t[0]);
      check(t, "huge", false);
    }
    // An entry exactly at the threshold: four tied maxima c (y = 1/4 each,
    // tau* = -1/2 in z units) and entries at c - 1 (z = -1/2: y = 0).
    for (float c : {0.0f, 3.25f, -1024.0f, 1.5e7f}) {
      std::vector<float> t(static_cast<size_t>(std::max<int64_t>(n, 5)), c - 3.0f);
      for (int i = 0; i < 4; ++i) t[static_cast<size_t>(i) * t.size() / 5] = c;
      t.back() = c - 1.0f;
      t[t.size() / 2 + 1] = c - 1.0f;
      check(t, "entry at the threshold c=" + std::to_string(c), false);
    }
  }
  // Declining is the exception: the op's speed rests on it.
  EXPECT_LE(ordinary_declined * 100, ordinary_rows) << declined << " of " << rows << " declined";
}

TEST_P(Sparse, Entmax15PathBoundary) {
  using smax::detail::sparse::kEntmax15WholeRowMax;
  Rng rng("e15-boundary");
  const Case c{Case::kEntmax15};
  for (int64_t n : {kEntmax15WholeRowMax - 1, kEntmax15WholeRowMax, kEntmax15WholeRowMax + 1}) {
    for (Data d : all_data()) {
      Tensor src({2, n}), dst({2, n});
      fill_rows(src, 1, d, rng);
      EXPECT_TRUE(run_case(c, src, dst, {}, std::string(data_name(d)) + " n=" + std::to_string(n)));
    }
    Tensor src({2, n}), dst({2, n});
    fill_ties(src, rng);
    EXPECT_TRUE(run_case(c, src, dst, {}, "ties n=" + std::to_string(n)));
  }
}

// Every axis of a strided 3-D tensor, bool + additive masks, scale and
// temperature, empty-row policies, in place, and 1/2/3 threads bitwise equal.
TEST_P(Sparse, AxesMasksInPlaceThreads) {
  Rng rng("axes");
  const std::vector<int64_t> shape = {4, 9, 6};
  BoolTensor keep({9, 6});
  keep.fill([&](int64_t i) { return static_cast<uint8_t>(rng.bernoulli(0.7) || i % 6 == 1); });
  Tensor add({6});
  add.fill([&](int64_t i) { return i == 4 ? -kInfF : rng.normal(); });
  for (const Case& c : all_cases()) {
    for (int axis = 0; axis < 3; ++axis) {
      for (EmptyRow er : {EmptyRow::kZero, EmptyRow::kNan}) {
        Tensor src(shape, permuted_strides(shape, {2, 0, 1}, 1), 1);
        src.fill([&](int64_t) { return 2.0f * rng.normal(); });
        src.at(5) = -kInfF;
        SoftmaxOptions o;
        o.axis = axis;
        o.scale = 1.5f;
        o.temperature = 0.75f;
        o.bool_mask = keep.view();
        o.additive_mask = add.view();
        o.empty_row = er;
        Tensor dst(shape, permuted_strides(shape, {1, 2, 0}, 2));
        std::vector<float> first;
        for (int threads : {1, 2, 3}) {
          o.threads = threads;
          ASSERT_TRUE(run_case(c, src, dst, o, "axis " + std::to_string(axis)));
          const auto v = dst.dense();
          if (threads == 1) {
            first = v;
          } else {
            ASSERT_EQ(0, std::memcmp(first.data(), v.data(), v.size() * sizeof(float)))
                << c.name() << " threads " << threads;
          }
        }
        // In place (dst is src).
        Tensor inplace = src;
        const auto expect = reference_fwd(c, src.view(), o);
        forward(c, inplace.view(), inplace.view(), o);
        EXPECT_TRUE(check_fwd(c, dense(inplace), expect, "in place", shape[static_cast<size_t>(axis)])) << c.name();
        EXPECT_TRUE(inplace.guards_intact());
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Backward
// ---------------------------------------------------------------------------

// Worst err / bound of the entmax-family backward checks (reported).
double g_bwd_worst = 0;

// Bounds: top-k (softmax_backward's) 2e-6 s w_i (|dy_i| + |q|) + 1e-30;
// entmax family (include/smax/sparse.h; ref::entmax_backward_bound):
//   2u |ref_i| + 1e-15 (n + 100 (1 + |2 - alpha|)) s w_i G + 1e-30,
//   G = sum_j w_j |dy_j| / sum_j w_j,
// the second term being the float64 error of q (sums of n terms in the
// library and in the oracle, and w's exp(e log y), whose relative error
// grows with |e ln y| <= 104 |2 - alpha|) times s w_i.
::testing::AssertionResult check_bwd(const Case& c, const Tensor& y, const Tensor& dy,
                                     const Tensor& dx, const std::vector<double>& expect,
                                     int axis, double s, const std::string& what) {
  const Geometry g(y.shape(), axis);
  CheckResult r;
  const double alpha = c.grad_alpha();
  for (int64_t o = 0; o < g.outer; ++o) {
    for (int64_t j = 0; j < g.inner; ++j) {
      double gw = 0;
      auto w = [&](double yv) {
        if (!(yv > 0)) return 0.0;
        return c.topk() ? yv : alpha == 2.0 ? 1.0 : std::pow(yv, 2.0 - alpha);
      };
      std::vector<double> yr, gr, er;  // the row, for ref::entmax_backward_bound
      for (int64_t k = 0; k < g.n; ++k) {
        const int64_t i = g.index(o, k, j);
        gw += w(y.at(i)) * dy.at(i);
        yr.push_back(y.at(i));
        gr.push_back(dy.at(i));
        er.push_back(expect[static_cast<size_t>(i)]);
      }
      const double q = gw;  // top-k: <dy, y> over the support
      const std::vector<double> eb =
          c.topk() ? std::vector<double>() : ref::entmax_backward_bound(yr, gr, er, alpha, s);
      for (int64_t k = 0; k < g.n; ++k) {
        const int64_t i = g.index(o, k, j);
        const double e = expect[static_cast<size_t>(i)];
        const double bound =
            c.topk() ? 2e-6 * s * w(y.at(i)) * (std::fabs(dy.at(i)) + std::fabs(q)) + 1e-30
                     : eb[static_cast<size_t>(k)];
        // Exact 0 off the support; on it ref can be 0 by cancellation.
        check_element(r, i, dx.at(i), e, bound, w(y.at(i)) == 0.0);
      }
    }
  }
  if (!c.topk()) g_bwd_worst = std::max(g_bwd_worst, r.worst_ratio);
  return to_assertion(r, what + " " + c.name());
}

// Saved output y: the oracle's forward rounded to f32, in y's layout.
void saved_output(const Case& c, const Tensor& src, const SoftmaxOptions& o, Tensor& y) {
  const auto f = reference_fwd(c, src.view(), o);
  for (int64_t i = 0; i < y.numel(); ++i) y.at(i) = static_cast<float>(f[static_cast<size_t>(i)]);
}

std::vector<double> reference_bwd(const Case& c, const Tensor& y, const Tensor& dy,
                                  const SoftmaxOptions& o) {
  if (c.topk()) return ref::softmax_backward(y.view(), dy.view(), o);
  return ref::entmax_backward(y.view(), dy.view(), c.grad_alpha(), o);
}

TEST_P(Sparse, BackwardVsReference) {
  Rng rng("bwd");
  for (const Case& c : all_cases()) {
    for (int64_t n : {1, 2, 3, 7, 8, 9, 31, 33, 100, 1001, 32000}) {
      for (Data d : {Data::kUniform, Data::kWide, Data::kSomeNegInf, Data::kConstant, Data::kNan,
                     Data::kAllNegInf}) {
        const int64_t rows = n > 2000 ? 1 : 3;
        Tensor src({rows, n}), y({rows, n}), dy({rows, n}, {}, 1), dx({rows, n});
        fill_rows(src, 1, d, rng);
        saved_output(c, src, {}, y);
        fill_normal(dy, rng);
        dx.poison();
        backward(c, y.view(), dy.view(), dx.view(), {});
        ASSERT_TRUE(dx.guards_intact());
        EXPECT_TRUE(check_bwd(c, y, dy, dx, reference_bwd(c, y, dy, {}), 1, 1.0,
                              std::string(data_name(d)) + " n=" + std::to_string(n)));
      }
    }
    // Strided, other axis, scale, in place (dx is dy).
    const std::vector<int64_t> shape = {5, 7, 4};
    Tensor src(shape), y(shape, permuted_strides(shape, {2, 1, 0}, 1)), dy(shape);
    src.fill([&](int64_t) { return rng.normal(); });
    SoftmaxOptions o;
    o.axis = 1;
    o.scale = 2.5f;
    saved_output(c, src, o, y);
    fill_normal(dy, rng);
    const auto expect = reference_bwd(c, y, dy, o);
    Tensor dy0 = dy;
    backward(c, y.view(), dy.view(), dy.view(), o);
    EXPECT_TRUE(check_bwd(c, y, dy0, dy, expect, 1, 2.5, "strided in place"));
  }
  std::printf("backward worst err/bound = %.3g\n", g_bwd_worst);
}

// alpha > 2: w_i = y_i^(2-alpha) is largest on the smallest y_i, so one
// entry can dominate q = <dy,w>/sum w and its dx_i = s w_i (dy_i - q) is a
// large w_i times a cancelling difference. q (and w) used to be rounded to
// f32 before that difference: errors up to |q| u w_i, measured 1e-3 (alpha 4)
// to 100% (alpha 5) of the row's largest |dx|, which the old bound
// 1e-6 s w_i (|dy_i| + |q|) did not see. The bound is now relative
// (check_bwd), and y with tiny support entries (w_i > FLT_MAX at alpha = 5)
// is checked too.
TEST_P(Sparse, BisectBackwardLargeAlpha) {
  Rng rng("bisect-large-alpha");
  for (double alpha : {3.0, 4.0, 5.0}) {
    const Case c{Case::kBisect, alpha};
    for (int64_t n : {2, 3, 7, 33, 100, 1001}) {
      for (Data d : {Data::kUniform, Data::kWide, Data::kSomeNegInf}) {
        const int64_t rows = 20;
        Tensor src({rows, n}), y({rows, n}), dy({rows, n}), dx({rows, n});
        fill_rows(src, 1, d, rng);
        saved_output(c, src, {}, y);
        fill_normal(dy, rng);
        backward(c, y.view(), dy.view(), dx.view(), {});
        EXPECT_TRUE(check_bwd(c, y, dy, dx, reference_bwd(c, y, dy, {}), 1, 1.0,
                              std::string(data_name(d)) + " n=" + std::to_string(n)));
      }
    }
    // A hand-made saved output with support entries of 1e-3 .. 1e-14 (the
    // backward takes any y): at alpha = 5, w = y^-3 reaches 1e42, past
    // FLT_MAX (the f32 w gave inf there). With w ratios past 1e16 the
    // dominant entry's w_i (dy_i - q) is lost in float64 as well (library
    // and oracle alike): the bound's w_i G term says so.
    Tensor y({1, 6}), dy({1, 6}), dx({1, 6});
    const float yv[6] = {0.9f, 0.1f, 1e-3f, 1e-7f, 1e-14f, 0.0f};
    for (int64_t i = 0; i < 6; ++i) y.at(i) = yv[i];
    fill_normal(dy, rng);
    backward(c, y.view(), dy.view(), dx.view(), {});
    EXPECT_TRUE(check_bwd(c, y, dy, dx, reference_bwd(c, y, dy, {}), 1, 1.0, "tiny y"));
    for (int64_t i = 0; i < 6; ++i) EXPECT_TRUE(std::isfinite(dx.at(i))) << alpha << " " << i;
  }
  std::printf("backward worst err/bound = %.3g\n", g_bwd_worst);
}

TEST_P(Sparse, BisectDalphaAndPerRowAlpha) {
  Rng rng("dalpha");
  const std::vector<int64_t> shape = {3, 17, 2};
  Tensor src(shape), y(shape), dy(shape), dx(shape), y2(shape);
  src.fill([&](int64_t) { return 1.5f * rng.normal(); });
  fill_normal(dy, rng);
  Tensor alpha({3, 1, 2});
  alpha.fill([&](int64_t i) { return 1.1f + 0.35f * static_cast<float>(i); });
  EntmaxBisectOptions p;
  p.alpha_tensor = alpha.view();
  SoftmaxOptions o;
  o.axis = 1;
  smax::entmax_bisect(src.view(), y.view(), p, o);
  const auto fexp = ref::entmax_bisect(src.view(), p, o);
  EXPECT_TRUE(check_fwd({Case::kBisect, 1.1}, dense(y), fexp, "per-row alpha", 17));
  Tensor da({3, 2});
  da.poison();
  smax::entmax_bisect_backward(y.view(), dy.view(), dx.view(), da.view(), p, o);
  std::vector<double> da_ref;
  const auto dexp = ref::entmax_backward(y.view(), dy.view(), 0.0, o, &p, &da_ref);
  for (int64_t i = 0; i < dx.numel(); ++i) {
    const int64_t row = (i / 34) * 2 + i % 2;
    const double a = alpha.at(row);
    const double w = y.at(i) > 0 ? std::pow(y.at(i), 2.0 - a) : 0.0;
    EXPECT_NEAR(dx.at(i), dexp[static_cast<size_t>(i)], 1e-6 * w * (std::fabs(dy.at(i)) + 3) + 1e-30);
  }
  for (int64_t r = 0; r < 6; ++r) {
    EXPECT_NEAR(da.at(r), da_ref[static_cast<size_t>(r)], 1e-6 * (1 + std::fabs(da_ref[static_cast<size_t>(r)])))
        << "row " << r;
  }
  EXPECT_TRUE(da.guards_intact());
}

TEST_P(Sparse, BisectOptions) {
  Rng rng("bisect-options");
  Tensor src({4, 50}), dst({4, 50}), sm({4, 50});
  src.fill([&](int64_t) { return rng.normal(); });
  for (int n_iter : {1, 2, 5, 12, 30}) {
    for (bool sum_one : {true, false}) {
      EntmaxBisectOptions p;
      p.alpha = 1.7f;
      p.n_iter = n_iter;
      p.ensure_sum_one = sum_one;
      smax::entmax_bisect(src.view(), dst.view(), p);
      EXPECT_TRUE(check_fwd({Case::kBisect, 1.7}, dense(dst), ref::entmax_bisect(src.view(), p),
                            "n_iter " + std::to_string(n_iter), 50));
    }
  }
  // alpha = 1 routes to softmax (bitwise).
  EntmaxBisectOptions one;
  one.alpha = 1.0f;
  smax::entmax_bisect(src.view(), dst.view(), one);
  smax::softmax(src.view(), sm.view());
  EXPECT_EQ(dst.dense(), sm.dense());
  // alpha = 2 equals sparsemax to rounding.
  EntmaxBisectOptions two;
  two.alpha = 2.0f;
  smax::entmax_bisect(src.view(), dst.view(), two);
  smax::sparsemax(src.view(), sm.view());
  for (int64_t i = 0; i < dst.numel(); ++i) EXPECT_NEAR(dst.at(i), sm.at(i), 3e-7);
}

// ---------------------------------------------------------------------------
// Finite differences of the float64 oracles (VJP formulas, dalpha, losses)
// ---------------------------------------------------------------------------
TEST(SparseReference, FiniteDifferences) {
  Rng rng("fd");
  const double h = 1e-6;
  for (int rep = 0; rep < 6; ++rep) {
    const size_t n = 7;
    std::vector<double> t(n), g(n);
    for (auto& v : t) v = rng.normal();
    for (auto& v : g) v = rng.normal();
    const double scale = 1.0;
    for (double alpha : {2.0, 1.5, 1.3, 2.6}) {
      auto f = [&](const std::vector<double>& x, double a) {
        if (a == 2.0) return ref::sparsemax_row(x);
        if (a == 1.5) return ref::entmax15_row(x);
        return ref::entmax_bisect_row(x, a, 200, true);
      };
      const auto y = f(t, alpha);
      double dalpha = 0;
      const auto vjp = ref::entmax_vjp_row(y, g, alpha, scale, &dalpha);
      for (size_t j = 0; j < n; ++j) {
        auto tp = t, tm = t;
        tp[j] += h;
        tm[j] -= h;
        const auto yp = f(tp, alpha), ym = f(tm, alpha);
        double fd = 0;
        for (size_t i = 0; i < n; ++i) fd += g[i] * (yp[i] - ym[i]) / (2 * h);
        EXPECT_NEAR(vjp[j], fd, 1e-6) << "alpha " << alpha << " j " << j;
      }
      if (alpha != 2.0 && alpha != 1.5) {
        const auto yp = f(t, alpha + h), ym = f(t, alpha - h);
        double fd = 0;
        for (size_t i = 0; i < n; ++i) fd += g[i] * (yp[i] - ym[i]) / (2 * h);
        EXPECT_NEAR(dalpha, fd, 1e-6) << "dalpha, alpha " << alpha;
      }
    }
    // sparse softmax VJP = softmax VJP on the kept set.
    const auto ys = ref::sparse_softmax_row(t, 3);
    double dot = 0;
    for (size_t i = 0; i < n; ++i) dot += g[i] * ys[i];
    for (size_t j = 0; j < n; ++j) {
      auto tp = t, tm = t;
      tp[j] += h;
      tm[j] -= h;
      const auto yp = ref::sparse_softmax_row(tp, 3), ym = ref::sparse_softmax_row(tm, 3);
      double fd = 0;
      for (size_t i = 0; i < n; ++i) fd += g[i] * (yp[i] - ym[i]) / (2 * h);
      EXPECT_NEAR(ys[j] * (g[j] - dot), fd, 1e-6);
    }
  }
  // Loss gradients p - d_t by finite differences of the loss oracle.
  for (int which = 0; which < 4; ++which) {
    std::vector<float> x(6);
    for (auto& v : x) v = rng.normal();
    int64_t tg = 2;
    RefSpec spec;
    spec.which = static_cast<RefSpec::Which>(which);
    spec.bisect.alpha = 1.4f;
    spec.k = 3;
    LossOptions lo;
    lo.reduction = Reduction::kSum;
    float one = 1.0f;
    const auto grad = ref::sparse_loss_backward(spec, smax::make_view(x.data(), {1, 6}),
                                                smax::make_index_view(&tg, {1}),
                                                smax::make_view(&one, {}), lo);
    for (size_t j = 0; j < 6; ++j) {
      const float hf = 1e-2f;
      auto xp = x, xm = x;
      xp[j] += hf;
      xm[j] -= hf;
      const double lp = ref::sparse_loss(spec, smax::make_view(xp.data(), {1, 6}),
                                         smax::make_index_view(&tg, {1}), lo)[0];
      const double lm = ref::sparse_loss(spec, smax::make_view(xm.data(), {1, 6}),
                                         smax::make_index_view(&tg, {1}), lo)[0];
      const double fd = (lp - lm) / (static_cast<double>(xp[j]) - xm[j]);
      EXPECT_NEAR(grad[j], fd, 2e-3) << "loss " << which << " j " << j;
    }
  }
}

// ---------------------------------------------------------------------------
// Losses
// ---------------------------------------------------------------------------
void loss_fwd(const Case& c, const TensorView& x, const TensorView& t, const TensorView& out,
              const LossOptions& lo, const SoftmaxOptions& o, bool force) {
  smax::SparseSoftmaxLossOptions sp;
  sp.force_target = force;
  switch (c.which) {
    case Case::kSparsemax: smax::sparsemax_loss(x, t, out, lo, o); break;
    case Case::kEntmax15: smax::entmax15_loss(x, t, out, lo, o); break;
    case Case::kBisect: smax::entmax_bisect_loss(x, t, out, c.bisect(), lo, o); break;
    case Case::kTopK: smax::sparse_softmax_loss(x, t, out, c.k, sp, lo, o); break;
  }
}
void loss_bwd(const Case& c, const TensorView& x, const TensorView& t, const TensorView& dl,
              const TensorView& dx, const LossOptions& lo, const SoftmaxOptions& o, bool force) {
  smax::SparseSoftmaxLossOptions sp;
  sp.force_target = force;
  switch (c.which) {
    case Case::kSparsemax: smax::sparsemax_loss_backward(x, t, dl, dx, lo, o); break;
    case Case::kEntmax15: smax::entmax15_loss_backward(x, t, dl, dx, lo, o); break;
    case Case::kBisect: smax::entmax_bisect_loss_backward(x, t, dl, dx, c.bisect(), lo, o); break;
    case Case::kTopK: smax::sparse_softmax_loss_backward(x, t, dl, dx, c.k, sp, lo, o); break;
  }
}

// kMean where every counted row has weight 0 (targets 1 and 3 weigh 0, row
// 1 ignored): 0 / 0 as in PyTorch's weighted mean, so the gradient of the
// counted rows is NaN (a bool-masked entry stays exactly 0) and the ignored
// row 0; kZero gives 0. Every family, library and oracle. (It used to be 0.)
TEST_P(Sparse, LossZeroWeightSumMean) {
  const ZeroWeightSumProblem p;
  const SoftmaxOptions o = p.options();
  for (const Case& c : all_cases()) {
    for (int zero = 0; zero < 2; ++zero) {
      const LossOptions lo = p.loss_options(zero);
      float dx[12];
      std::fill(dx, dx + 12, 7.0f);
      loss_bwd(c, p.x(), p.target(), p.dloss(), smax::make_view(dx, {3, 4}), lo, o, false);
      float loss = 7.0f;
      loss_fwd(c, p.x(), p.target(), smax::make_view(&loss, {}), lo, o, false);
      EXPECT_TRUE(zero ? loss == 0.0f : std::isnan(loss)) << c.name() << " loss " << loss;
      p.expect_gradient(dx, ref::sparse_loss_backward(c.spec(), p.x(), p.target(), p.dloss(), lo, o),
                        zero, c.name());
    }
  }
}

TEST_P(Sparse, Losses) {
  Rng rng("loss");
  std::vector<Case> cases = all_cases();
  cases.push_back({Case::kBisect, 1.0});  // the cross-entropy limit
  std::vector<float> w = {0.5f, 1.0f, 2.0f, 1.5f, 1.0f, 0.25f, 3.0f, 1.0f, 1.0f, 2.0f, 1.0f};
  for (const Case& c : cases) {
    for (bool force : {false, true}) {
      if (force && !c.topk()) continue;
      for (Reduction red : {Reduction::kNone, Reduction::kMean, Reduction::kSum}) {
        for (int axis : {1, 0}) {
          const int64_t C = 11;
          const std::vector<int64_t> shape = axis == 1 ? std::vector<int64_t>{6, C, 3}
                                                       : std::vector<int64_t>{C, 6, 3};
          Tensor x(shape, permuted_strides(shape, {1, 2, 0}, 1));
          x.fill([&](int64_t) { return 2.0f * rng.normal(); });
          x.at(4) = -kInfF;
          Array<int64_t> tg(drop_axis(shape, axis));
          tg.fill([&](int64_t i) { return i == 3 ? int64_t{-100} : rng.index(C); });
          SoftmaxOptions o;
          o.axis = axis;
          o.temperature = 0.8f;
          LossOptions lo;
          lo.reduction = red;
          lo.weight = smax::make_view(w.data(), {C});
          RefSpec spec = c.spec();
          spec.force_target = force;
          if (c.which == Case::kBisect && c.alpha == 1.0) spec.bisect.alpha = 1.0f;
          Tensor out(red == Reduction::kNone ? drop_axis(shape, axis) : std::vector<int64_t>{});
          out.poison();
          loss_fwd(c, x.view(), tg.view(), out.view(), lo, o, force);
          ASSERT_TRUE(out.guards_intact());
          const auto lexp = ref::sparse_loss(spec, x.view(), tg.view(), lo, o);
          const double ltol = c.topk() || c.alpha == 1.0 ? 2e-6 : 1e-6;
          for (int64_t i = 0; i < out.numel(); ++i) {
            const double e = lexp[static_cast<size_t>(i)];
            if (std::isinf(e)) {
              EXPECT_EQ(out.at(i), e);
            } else {
              EXPECT_NEAR(out.at(i), e, ltol * (1 + std::fabs(e))) << c.name() << " i " << i;
            }
          }
          // Backward.
          Tensor dl(out.shape());
          fill_normal(dl, rng);
          Tensor dx(shape);
          dx.poison();
          loss_bwd(c, x.view(), tg.view(), dl.view(), dx.view(), lo, o, force);
          ASSERT_TRUE(dx.guards_intact());
          const auto gexp = ref::sparse_loss_backward(spec, x.view(), tg.view(), dl.view(), lo, o);
          const double gtol = c.topk() || c.alpha == 1.0 ? 2e-6 : 2 * kU;
          double cmax = 0;
          for (int64_t i = 0; i < dl.numel(); ++i) cmax = std::max(cmax, std::fabs(static_cast<double>(dl.at(i))));
          cmax *= 3.0 * 1.25;  // max weight * s (mean divides by a weight sum > 1)
          for (int64_t i = 0; i < dx.numel(); ++i) {
            const double e = gexp[static_cast<size_t>(i)];
            EXPECT_NEAR(dx.at(i), e, gtol * (std::fabs(e) + cmax * (gtol > 1e-6 ? 1 : 0)) +
                                       (gtol > 1e-6 ? 0.0 : abs_term(c, C)) * cmax)
                << c.name() << " reduction " << static_cast<int>(red) << " i " << i;
            if (e == 0.0 && x.at(i) == -kInfF) {
              EXPECT_EQ(dx.at(i), 0.0f);
            }
          }
        }
      }
    }
  }
}

TEST_P(Sparse, LossSpecialRows) {
  // NaN row, all-masked row (both policies), masked target, n = 0.
  std::vector<float> x = {1, kNanF, 0, -kInfF, -kInfF, -kInfF, 1, -kInfF, 2};
  std::vector<int64_t> t = {0, 1, 1};
  for (EmptyRow er : {EmptyRow::kZero, EmptyRow::kNan}) {
    for (const Case& c : all_cases()) {
      SoftmaxOptions o;
      o.empty_row = er;
      LossOptions lo;
      lo.reduction = Reduction::kNone;
      std::vector<float> out(3), dx(9);
      std::vector<float> dl = {1, 1, 1};
      loss_fwd(c, smax::make_view(x.data(), {3, 3}), smax::make_index_view(t.data(), {3}),
               smax::make_view(out.data(), {3}), lo, o, false);
      EXPECT_TRUE(std::isnan(out[0])) << c.name();
      if (er == EmptyRow::kZero) {
        EXPECT_EQ(out[1], 0.0f) << c.name();
      } else {
        EXPECT_TRUE(std::isnan(out[1])) << c.name();
      }
      EXPECT_EQ(out[2], kInfF) << c.name();
      loss_bwd(c, smax::make_view(x.data(), {3, 3}), smax::make_index_view(t.data(), {3}),
               smax::make_view(dl.data(), {3}), smax::make_view(dx.data(), {3, 3}), lo, o, false);
      for (int i = 0; i < 3; ++i) EXPECT_TRUE(std::isnan(dx[i]));
      for (int i = 3; i < 6; ++i) EXPECT_EQ(std::isnan(dx[i]), er == EmptyRow::kNan);
      EXPECT_EQ(dx[7], 0.0f) << "masked target gets no gradient";
      EXPECT_NEAR(dx[6] + dx[8], 1.0f, 1e-6) << c.name();
    }
  }
  // n = 0 with every target ignored.
  Tensor x0({2, 0});
  Array<int64_t> t0({2});
  t0.fill([](int64_t) { return int64_t{-100}; });
  Tensor o0({2});
  LossOptions lo;
  lo.reduction = Reduction::kNone;
  smax::sparsemax_loss(x0.view(), t0.view(), o0.view(), lo);
  EXPECT_EQ(o0.at(0), 0.0f);
}

// ---------------------------------------------------------------------------
// Errors: smax::Error, nothing written
// ---------------------------------------------------------------------------
TEST_P(Sparse, Errors) {
  Tensor x({2, 5}), y({2, 5}), bad({2, 4});
  x.fill([](int64_t i) { return static_cast<float>(i); });
  y.poison();
  auto untouched = [&] {
    for (float v : y.storage()) {
      if (v != kSentinel) return false;
    }
    return true;
  };
  EntmaxBisectOptions p;
  for (float a : {0.5f, 0.999f, kNanF, kInfF, -2.0f}) {
    p.alpha = a;
    EXPECT_TRUE(throws_invalid([&] { smax::entmax_bisect(x.view(), y.view(), p); }, "alpha"));
    EXPECT_TRUE(throws_invalid([&] { smax::entmax_bisect_backward(x.view(), x.view(), y.view(), std::nullopt, p); }, "alpha"));
  }
  p.alpha = 1.5f;
  p.n_iter = 0;
  EXPECT_TRUE(throws_invalid([&] { smax::entmax_bisect(x.view(), y.view(), p); }, "n_iter"));
  p.n_iter = 50;
  Tensor alpha({2, 1});
  alpha.fill([](int64_t i) { return i == 1 ? 1.0f : 1.5f; });
  p.alpha_tensor = alpha.view();
  EXPECT_TRUE(throws_invalid([&] { smax::entmax_bisect(x.view(), y.view(), p); }, "alpha_tensor"));
  Tensor alpha3({3, 1});
  alpha3.fill([](int64_t) { return 1.5f; });
  p.alpha_tensor = alpha3.view();
  EXPECT_THROW(smax::entmax_bisect(x.view(), y.view(), p), smax::Error);
  EntmaxBisectOptions one;
  one.alpha = 1.0f;
  Tensor da({2});
  EXPECT_TRUE(throws_invalid([&] { smax::entmax_bisect_backward(x.view(), x.view(), y.view(), da.view(), one); }, "dalpha"));
  EXPECT_TRUE(throws_invalid([&] { smax::sparse_softmax(x.view(), y.view(), 0); }, "k"));
  EXPECT_THROW(smax::sparsemax(x.view(), bad.view()), smax::Error);
  EXPECT_THROW(smax::entmax15(x.view(), bad.view()), smax::Error);
  EXPECT_THROW(smax::sparsemax_backward(x.view(), bad.view(), y.view()), smax::Error);
  SoftmaxOptions o;
  o.axis = 2;
  EXPECT_THROW(smax::sparsemax(x.view(), y.view(), o), smax::Error);
  o.axis = -1;
  o.temperature = 0.0f;
  EXPECT_THROW(smax::entmax15(x.view(), y.view(), o), smax::Error);
  // Losses: bad target, bad output shape, bad k.
  Array<int64_t> t({2});
  t.fill([](int64_t i) { return i == 0 ? int64_t{1} : int64_t{7}; });
  Tensor l({2});
  l.poison();
  LossOptions lo;
  lo.reduction = Reduction::kNone;
  EXPECT_TRUE(throws_invalid([&] { smax::sparsemax_loss(x.view(), t.view(), l.view(), lo); }, "target"));
  t.at(1) = 0;
  EXPECT_THROW(smax::entmax15_loss(x.view(), t.view(), bad.view(), lo), smax::Error);
  EXPECT_TRUE(throws_invalid([&] { smax::sparse_softmax_loss(x.view(), t.view(), l.view(), 0, {}, lo); }, "k"));
  EXPECT_TRUE(throws_invalid([&] { smax::sparse_softmax_loss_backward(x.view(), t.view(), l.view(), y.view(), -3, {}, lo); }, "k"));
  // Outputs overlapping an input other than src (fuzz finding: only src was
  // checked): the additive mask, class weights, per-row alpha, dloss.
  {
    std::vector<float> buf(64, 0.0f);
    const std::vector<float> before = buf;
    SoftmaxOptions mo;
    mo.additive_mask = smax::make_view(buf.data(), {2, 5});
    const auto out_on_mask = smax::make_view(buf.data() + 4, {2});
    EXPECT_TRUE(throws_invalid([&] { smax::sparsemax_loss(x.view(), t.view(), out_on_mask, lo, mo); }, "additive_mask"));
    EntmaxBisectOptions pa;
    pa.alpha_tensor = smax::make_view(buf.data() + 20, {2});
    EXPECT_TRUE(throws_invalid([&] { smax::entmax_bisect_loss(x.view(), t.view(), smax::make_view(buf.data() + 21, {2}), pa, lo); }, "alpha_tensor"));
    LossOptions lw = lo;
    lw.weight = smax::make_view(buf.data() + 30, {5});
    EXPECT_TRUE(throws_invalid([&] { smax::entmax15_loss(x.view(), t.view(), smax::make_view(buf.data() + 33, {2}), lw); }, "weight"));
    EXPECT_TRUE(throws_invalid([&] { smax::entmax15_loss_backward(x.view(), t.view(), smax::make_view(buf.data() + 60, {2}), smax::make_view(buf.data() + 26, {2, 5}), lw); }, "weight"));
    EXPECT_TRUE(throws_invalid([&] { smax::sparsemax_loss_backward(x.view(), t.view(), smax::make_view(buf.data() + 50, {2}), smax::make_view(buf.data() + 45, {2, 5}), lo); }, "dloss"));
    EXPECT_EQ(buf, before);
  }
  EXPECT_TRUE(untouched());
  EXPECT_TRUE(l.guards_intact());
  for (int64_t i = 0; i < 2; ++i) EXPECT_EQ(l.at(i), kSentinel);
}

// Fuzz regressions (fuzz/regressions/normalizers/sparse_softmax_backward_*):
// sparse_softmax_backward (and entmax_bisect_backward's alpha = 1 route) is
// softmax_backward, which ignores the masks; sparse.h promises exact 0 at
// masked entries whatever y holds there (raw y with NaN / inf, NaN rows,
// all-masked rows). Unmasked entries keep softmax_backward's bits.
TEST_P(Sparse, FuzzRegressionSoftmaxRouteMasksWin) {
  smax::EntmaxBisectOptions a1;
  a1.alpha = 1.0f;
  auto run = [&](int route, const TensorView& y, const TensorView& dy, const TensorView& dx,
                 const SoftmaxOptions& o) {
    if (route == 0) smax::sparse_softmax_backward(y, dy, dx, o);
    else smax::entmax_bisect_backward(y, dy, dx, std::nullopt, a1, o);
  };
  for (int route = 0; route < 2; ++route) {
    for (EmptyRow er : {EmptyRow::kZero, EmptyRow::kNan}) {
      // [6,3,3] axis 0, a rank-0 bool mask 0 (every entry masked) and an
      // additive mask [3,1] holding NaN; raw y with NaN / inf.
      std::vector<float> y(54), dy(54), dx(54, 7.0f);
      for (size_t i = 0; i < y.size(); ++i) {
        y[i] = i % 5 == 0 ? kNanF : i % 7 == 0 ? kInfF : 0.1f * static_cast<float>(i % 4);
        dy[i] = i % 11 == 0 ? -kInfF : 0.25f * static_cast<float>(i % 3) - 0.3f;
      }
      const uint8_t keep = 0;
      const float add[3] = {kNanF, 1.0f, -kInfF};
      SoftmaxOptions o;
      o.axis = 0;
      o.empty_row = er;
      o.bool_mask = smax::make_bool_view(&keep, {});
      o.additive_mask = smax::make_view(add, {3, 1});
      run(route, smax::make_view(y.data(), {6, 3, 3}), smax::make_view(dy.data(), {6, 3, 3}),
          smax::make_view(dx.data(), {6, 3, 3}), o);
      for (float v : dx) {
        EXPECT_EQ(v, 0.0f);
        EXPECT_FALSE(std::signbit(v));
      }
      // Bool mask [1,3] hiding column 1, additive mask -inf on row 2 of dim 1:
      // masked entries 0, the others exactly softmax_backward's (no masks).
      std::vector<float> ref(54);
      const uint8_t kb[3] = {1, 0, 1};
      const float add2[3] = {0.0f, 0.0f, -kInfF};
      o.bool_mask = smax::make_bool_view(kb, {1, 3});
      o.additive_mask = smax::make_view(add2, {3, 1});
      for (size_t i = 0; i < y.size(); ++i) {
        const bool masked = (i % 3) == 1 || (i / 3) % 3 == 2;
        y[i] = masked ? (i % 2 ? kNanF : kInfF) : 0.05f * static_cast<float>(i % 6);
      }
      run(route, smax::make_view(y.data(), {6, 3, 3}), smax::make_view(dy.data(), {6, 3, 3}),
          smax::make_view(dx.data(), {6, 3, 3}), o);
      SoftmaxOptions plain;
      plain.axis = 0;
      smax::softmax_backward(smax::make_view(y.data(), {6, 3, 3}),
                             smax::make_view(dy.data(), {6, 3, 3}),
                             smax::make_view(ref.data(), {6, 3, 3}), plain);
      for (size_t i = 0; i < y.size(); ++i) {
        const bool masked = (i % 3) == 1 || (i / 3) % 3 == 2;
        if (masked) {
          EXPECT_EQ(dx[i], 0.0f) << i;
          EXPECT_FALSE(std::signbit(dx[i])) << i;
        } else {
          EXPECT_EQ(std::memcmp(&dx[i], &ref[i], sizeof(float)), 0) << i << " " << dx[i] << " " << ref[i];
        }
      }
    }
  }
  // Without masks: exactly softmax_backward (same bits), in place on dy too.
  Rng rng("route");
  std::vector<float> y(3 * 40), dy(3 * 40), dx(3 * 40), ref(3 * 40);
  for (size_t i = 0; i < y.size(); ++i) {
    y[i] = rng.uniform(0.0f, 0.05f);
    dy[i] = rng.uniform(-2.0f, 2.0f);
  }
  smax::sparse_softmax_backward(smax::make_view(y.data(), {3, 40}), smax::make_view(dy.data(), {3, 40}),
                                smax::make_view(dx.data(), {3, 40}));
  smax::softmax_backward(smax::make_view(y.data(), {3, 40}), smax::make_view(dy.data(), {3, 40}),
                         smax::make_view(ref.data(), {3, 40}));
  EXPECT_EQ(std::memcmp(dx.data(), ref.data(), dx.size() * sizeof(float)), 0);
  // Masks of the wrong shape are rejected (they were ignored before).
  const uint8_t kb[2] = {1, 1};
  SoftmaxOptions bad;
  bad.bool_mask = smax::make_bool_view(kb, {2});
  const std::vector<float> before = dx;
  EXPECT_TRUE(throws_invalid([&] {
    smax::sparse_softmax_backward(smax::make_view(y.data(), {3, 40}), smax::make_view(dy.data(), {3, 40}),
                                  smax::make_view(dx.data(), {3, 40}), bad);
  }, "bool_mask"));
  EXPECT_EQ(dx, before);
}

// Fuzz regression (fuzz/regressions/normalizers/sparse_softmax_tiny_ties_*):
// the k-th largest was rebuilt as m + (t - m), which is not t for entries
// far below m (1e-38 next to 6.5625 came back as 0), so the tie count went
// negative and 40 entries were kept for k = 10. Exactly k entries are kept,
// the ties at the k-th value by lowest index, on the sampled path (n = 48)
// and the candidate path (n = 4800).
TEST_P(Sparse, FuzzRegressionTopKTinyValuesBelowMax) {
  const float pattern[6] = {1.98106468e-39f, -5.0625f, 6.5625f, 3.61840627e-39f, 0.0f,
                            1.02333338e-38f};
  for (int64_t n : {48, 4800}) {
    for (int64_t k : {int64_t{10}, int64_t{9}, n / 6 + 3, n / 2}) {
      std::vector<float> x(static_cast<size_t>(n)), y(x.size(), 7.0f);
      for (int64_t i = 0; i < n; ++i) x[i] = pattern[i % 6];
      smax::sparse_softmax(smax::make_view(x.data(), {1, n}), smax::make_view(y.data(), {1, n}), k);
      const std::vector<double> ref = ref::sparse_softmax_row(std::vector<double>(x.begin(), x.end()), k);
      int64_t kept = 0;
      for (int64_t i = 0; i < n; ++i) {
        kept += y[i] != 0.0f;
        EXPECT_LE(std::fabs(y[i] - ref[i]), 2e-6 * std::fabs(ref[i]) + 1e-36)
            << "n " << n << " k " << k << " i " << i << " y " << y[i] << " ref " << ref[i];
      }
      EXPECT_EQ(kept, k) << "n " << n;
    }
  }
}

// Fuzz regression (fuzz/regressions/options/entmax_bisect_dalpha_uniform_alpha_near_1):
// uniform y with alpha = 1.01 and |dy| ~ 2e7: dalpha is exactly 0, a sum of
// terms of size |g| / (alpha-1)^2 ~ 1e11 that cancel; the float64
// evaluation leaves ~1e-5, within the bound's 4e-16 (n + 16) M term (the
// old bound 1e-6 (1 + |ref|) ignored the conditioning). Also a non-uniform
// row against the oracle with the same bound.
TEST_P(Sparse, FuzzRegressionDalphaCancellingTerms) {
  const float alpha = 1.01f;
  const std::vector<float> y = {0.125f, 0.125f, 0.125f, 0.125f, 0.125f, 0.125f, 0.125f, 0.125f};
  const std::vector<float> g = {-4.01586914f, -4.01586914f, -4.01586914f, -4.01586914f,
                                -4.01586914f, -5.77270508f, -23645000.0f, -23645000.0f};
  smax::EntmaxBisectOptions b;
  b.alpha_tensor = smax::make_view(&alpha, {});
  std::vector<float> dx(8), da(1, 7.0f);
  smax::entmax_bisect_backward(smax::make_view(y.data(), {8}), smax::make_view(g.data(), {8}),
                               smax::make_view(dx.data(), {8}), smax::make_view(da.data(), {}), b);
  const double am1 = static_cast<double>(alpha) - 1.0;
  double M = 0.0;
  for (int i = 0; i < 8; ++i) {
    const double yi = y[static_cast<size_t>(i)], gi = std::fabs(g[static_cast<size_t>(i)]);
    M += gi * (2 * yi / (am1 * am1) + (std::fabs(yi * std::log(yi)) + yi * std::fabs(std::log(yi))) / am1);
  }
  EXPECT_GT(M, 1e11);
  EXPECT_LE(std::fabs(da[0]), 1e-6 + 4e-16 * (8 + 16) * M) << da[0];
  EXPECT_LE(std::fabs(da[0]), 1e-12 * M) << da[0];  // far below the terms: no gross error
}

SMAX_INSTANTIATE_PER_TARGET(Sparse);

}  // namespace
}  // namespace smax_test
