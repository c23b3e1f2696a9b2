// tests/test_rescaled.cc: SSMax, softpick, StableMax (+ cross-entropy) and the
// Softmax Collapse detector (include/smax/rescaled.h) against the float64
// oracles of src/reference/rescaled.h, on every SIMD target.
//
// Bounds are the headers' (include/smax/rescaled.h), enforced as written:
//  ssmax:            |y - ref| <= 2e-6 |ref| + 1e-36 (ref: softmax of fl(t c))
//  ssmax_backward:   |dx - ref| <= 2e-6 |sigma c| |y| (|g| + |D|) + 1e-30,
//                    |ds - ref| <= 2e-6 ln n sum |t y| (|g| + |D|) + 1e-30
//  softpick:         |y - ref| <= 2e-6 ((1 + K)|ref| + q) + 1e-36
//  softpick_backward |dx - ref| <= 2e-6 sigma q ((1 + K)(|g| + |r|) + G) + 1e-30
//  stablemax:        |y - ref| <= 1e-6 |ref| + 1e-36
//  stablemax_backward|dx - ref| <= 2e-6 sigma (s'/S)(|g| + |r| + sum |g| y) + 1e-30
//  CE loss:          |l - ref| <= 1e-6 |ref| + 1e-30 per row (reductions: the
//                    sum of the rows' bounds, + 2^-24 |ref| for the f32 result)
//  CE gradient:      |dx - ref| <= 2e-6 |c sigma| |y - d_t| / (1 + |t|) + 1e-30
// with exact zeros where the reference is exactly 0 (masked entries, rows of
// softpick with max <= 0, ignored rows) and NaN exactly where it is NaN.
// Collapse flags must equal the oracle's wherever the oracle is decidable at
// the f32 exp's accuracy (reference::softmax_collapse_flags).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/rescaled.h"
#include "reference/bounds.h"
#include "reference/reference.h"
#include "reference/rescaled.h"
#include "reference/rows.h"
#include "smax/rescaled.h"
#include "test_util.h"

namespace smax_test {
namespace {

namespace ref = smax::reference;
using ref::Row;
using smax::LossOptions;
using smax::Precision;
using smax::Reduction;
using smax::SoftpickOptions;
using smax::SsmaxOptions;
using I64Tensor = Array<int64_t>;

const std::vector<int64_t> kSizes = {0, 1, 2, 3, 7, 8, 9, 31, 33, 100, 1000, 1001, 32000};
constexpr int64_t kVocab = 128256;

enum class Kind { kSsmax, kSoftpick, kStablemax };
const char* kind_name(Kind k) {
  return k == Kind::kSsmax ? "ssmax" : k == Kind::kSoftpick ? "softpick" : "stablemax";
}

// Rows of a view (no logit transform) in row order.
ref::RefRows rows_of(const TensorView& v, const SoftmaxOptions& o) {
  SoftmaxOptions plain;
  plain.axis = o.axis;
  return ref::ref_rows("test", v, plain, false);
}
Row row(const ref::RefRows& R, int64_t r) { return Row(R.row(r), R.row(r) + R.n); }

// Extra data: values near 0 (softpick's ill-conditioned region).
void fill_near_zero(Tensor& t, Rng& rng) {
  t.fill([&](int64_t) { return rng.uniform(-0.01f, 0.01f); });
}

// ---------------------------------------------------------------------------
// Checks of one op call (library output vs row-level reference + bound).
// ---------------------------------------------------------------------------
struct Checker {
  CheckResult res;
  int64_t index = 0;
  void element(float out, double refv, double bound, bool exact_zero = true) {
    check_element(res, index++, out, refv, bound, exact_zero);
  }
};

struct Params {
  SsmaxOptions ssmax;
  SoftpickOptions softpick;
};

// Forward: runs the op into dst and checks it.
::testing::AssertionResult check_forward(Kind kind, const Tensor& src, Tensor& dst,
                                         const SoftmaxOptions& o, const Params& p,
                                         const std::string& what) {
  dst.poison();
  switch (kind) {
    case Kind::kSsmax: smax::ssmax(src.view(), dst.view(), p.ssmax, o); break;
    case Kind::kSoftpick: smax::softpick(src.view(), dst.view(), p.softpick, o); break;
    case Kind::kStablemax: smax::stablemax(src.view(), dst.view(), o); break;
  }
  if (!dst.guards_intact()) return ::testing::AssertionFailure() << what << ": guard written";
  const ref::RefRows R = ref::ref_rows("test", src.view(), o);
  const ref::RefRows O = rows_of(dst.view(), o);
  std::vector<double> srow(static_cast<size_t>(R.rows), p.ssmax.s);
  if (kind == Kind::kSsmax && p.ssmax.s_rows) srow = ref::ref_row_values("t", *p.ssmax.s_rows, R);
  Checker c;
  for (int64_t r = 0; r < R.rows; ++r) {
    const Row t = row(R, r), out = row(O, r);
    if (kind == Kind::kSsmax) {
      const Row y = ref::ssmax_row(t, srow[static_cast<size_t>(r)], p.ssmax.fixed_n, o.empty_row,
                                   true, true);
      for (int64_t i = 0; i < R.n; ++i) c.element(static_cast<float>(out[i]), y[i], 2e-6 * std::fabs(y[i]) + 1e-36);
    } else if (kind == Kind::kSoftpick) {
      const ref::SoftpickRow f = ref::softpick_row(t, p.softpick.eps, o.empty_row);
      const Row b = ref::softpick_forward_bound(f);
      for (int64_t i = 0; i < R.n; ++i) c.element(static_cast<float>(out[i]), f.y[i], b[i]);
    } else {
      const Row y = ref::stablemax_row(t, o.empty_row);
      for (int64_t i = 0; i < R.n; ++i) c.element(static_cast<float>(out[i]), y[i], 1e-6 * std::fabs(y[i]) + 1e-36);
    }
  }
  return to_assertion(c.res, what);
}

// Saved forward output for ssmax_backward: the reference rounded to f32.
void saved_ssmax(const Tensor& src, const SoftmaxOptions& o, const SsmaxOptions& p, Tensor& y) {
  const std::vector<double> ref_y = ref::ssmax(src.view(), p, o);
  y.fill([&](int64_t i) { return static_cast<float>(ref_y[static_cast<size_t>(i)]); });
}

// Backward: dy random; runs the op into dst (dsrc) and checks it (and ds).
::testing::AssertionResult check_backward_op(Kind kind, const Tensor& src, Tensor& dst,
                                             const SoftmaxOptions& o, const Params& p, Rng& rng,
                                             const std::string& what) {
  Tensor dy(src.shape());
  fill_normal(dy, rng);
  Tensor y(src.shape());
  Array<float> ds(drop_axis(src.shape(), static_cast<int>(o.axis < 0 ? o.axis + static_cast<int64_t>(src.shape().size()) : o.axis)));
  dst.poison();
  switch (kind) {
    case Kind::kSsmax: {
      saved_ssmax(src, o, p.ssmax, y);
      const TensorView dsv = ds.view();
      smax::ssmax_backward(src.view(), y.view(), dy.view(), dst.view(), p.ssmax, o, &dsv);
      break;
    }
    case Kind::kSoftpick: smax::softpick_backward(src.view(), dy.view(), dst.view(), p.softpick, o); break;
    case Kind::kStablemax: smax::stablemax_backward(src.view(), dy.view(), dst.view(), o); break;
  }
  if (!dst.guards_intact() || !ds.guards_intact()) {
    return ::testing::AssertionFailure() << what << ": guard written";
  }
  const ref::RefRows R = ref::ref_rows("test", src.view(), o);
  const ref::RefRows O = rows_of(dst.view(), o);
  const ref::RefRows G = rows_of(dy.view(), o);
  const ref::RefRows Y = rows_of(y.view(), o);
  const double sigma = R.scale;
  std::vector<double> srow(static_cast<size_t>(R.rows), p.ssmax.s);
  if (kind == Kind::kSsmax && p.ssmax.s_rows) srow = ref::ref_row_values("t", *p.ssmax.s_rows, R);
  const std::vector<float> dsd = ds.dense();
  Checker c;
  for (int64_t r = 0; r < R.rows; ++r) {
    const Row t = row(R, r), out = row(O, r), g = row(G, r);
    if (kind == Kind::kSsmax) {
      const Row yy = row(Y, r);
      double dsr = 0.0;
      const double s = srow[static_cast<size_t>(r)];
      const Row dx = ref::ssmax_vjp_row(t, yy, g, s, p.ssmax.fixed_n, sigma, o.empty_row, true, &dsr);
      const int64_t nn = ref::ssmax_n(t, p.ssmax.fixed_n);
      const double cf = nn > 0 ? ref::ssmax_factor(s, nn, true) : 0.0;
      // The bounds without the documented dot terms (bounds.h).
      const Row b = ref::ssmax_backward_bound(yy, g, sigma * cf);
      for (int64_t i = 0; i < R.n; ++i) c.element(static_cast<float>(out[i]), dx[i], b[i]);
      if (R.n > 0) {
        c.element(dsd[static_cast<size_t>(r)], dsr, ref::ssmax_ds_bound(t, yy, g, nn), false);
      }
    } else if (kind == Kind::kSoftpick) {
      const ref::SoftpickRow f = ref::softpick_row(t, p.softpick.eps, o.empty_row);
      const Row dx = ref::softpick_vjp_row(t, g, p.softpick.eps, sigma, o.empty_row);
      const Row b = ref::softpick_backward_bound(t, g, f, sigma);
      for (int64_t i = 0; i < R.n; ++i) c.element(static_cast<float>(out[i]), dx[i], b[i]);
    } else {
      const Row dx = ref::stablemax_vjp_row(t, g, sigma, o.empty_row);
      const Row b = ref::stablemax_backward_bound(t, g, sigma, o.empty_row);
      for (int64_t i = 0; i < R.n; ++i) c.element(static_cast<float>(out[i]), dx[i], b[i]);
    }
  }
  return to_assertion(c.res, what);
}

// ---------------------------------------------------------------------------
// Hand vectors (docs/vectors.md, "Rescaled and rectified softmaxes").
// ---------------------------------------------------------------------------
void expect_row(const std::vector<float>& got, const std::vector<double>& want, double rel,
                const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], rel * std::fabs(want[i]) + 1e-7) << what << " [" << i << "]";
  }
}

TEST(RescaledSpec, HandVectors) {
  // SSMax, s = 1.
  {
    std::vector<float> x = {1, 0}, y(2);
    SsmaxOptions p;
    p.s = 1.0f;
    smax::ssmax(smax::make_view(x.data(), {2}), smax::make_view(y.data(), {2}), p);
    expect_row(y, {2.0 / 3, 1.0 / 3}, 2e-6, "ssmax [1,0]");
    std::vector<float> x4 = {1, 0, 0, 0}, y4(4);
    smax::ssmax(smax::make_view(x4.data(), {4}), smax::make_view(y4.data(), {4}), p);
    expect_row(y4, {4.0 / 7, 1.0 / 7, 1.0 / 7, 1.0 / 7}, 2e-6, "ssmax [1,0,0,0]");
  }
  // softpick (eps = 0 for the exact values; the default 1e-6 changes them by ~1e-6).
  {
    SoftpickOptions p;
    p.eps = 0.0f;
    std::vector<float> x = {std::log(3.0f), std::log(2.0f)}, y(2), g = {1, 0}, dx(2);
    smax::softpick(smax::make_view(x.data(), {2}), smax::make_view(y.data(), {2}), p);
    expect_row(y, {2.0 / 3, 1.0 / 3}, 2e-6, "softpick [ln3,ln2]");
    smax::softpick_backward(smax::make_view(x.data(), {2}), smax::make_view(g.data(), {2}),
                            smax::make_view(dx.data(), {2}), p);
    expect_row(dx, {1.0 / 3, -4.0 / 9}, 2e-6, "softpick VJP");
    std::vector<float> x3 = {std::log(2.0f), 0.0f, -std::log(2.0f)}, y3(3);
    smax::softpick(smax::make_view(x3.data(), {3}), smax::make_view(y3.data(), {3}), p);
    expect_row(y3, {2.0 / 3, 0, 0}, 2e-6, "softpick [ln2,0,-ln2]");
    EXPECT_EQ(y3[1], 0.0f);
    EXPECT_EQ(y3[2], 0.0f);
    // A masked entry (-inf, or bool mask 0) adds 0 to the denominator, as the
    // authors' softpick (|e^t - 1| taken only where t is finite): [ln3, ln2,
    // masked] -> [2/3, 1/3, 0], not [1/2, 1/4, 0] (|0 - 1| = 1 counted).
    std::vector<float> xm = {std::log(3.0f), std::log(2.0f), -INFINITY}, ym(3);
    smax::softpick(smax::make_view(xm.data(), {3}), smax::make_view(ym.data(), {3}), p);
    expect_row(ym, {2.0 / 3, 1.0 / 3, 0}, 2e-6, "softpick [ln3,ln2,-inf]");
    std::vector<float> xb = {std::log(3.0f), 5.0f, std::log(2.0f)}, yb(3);
    std::vector<uint8_t> keep = {1, 0, 1};
    smax::SoftmaxOptions mo;
    mo.bool_mask = smax::make_bool_view(keep.data(), {3});
    smax::softpick(smax::make_view(xb.data(), {3}), smax::make_view(yb.data(), {3}), p, mo);
    expect_row(yb, {2.0 / 3, 0, 1.0 / 3}, 2e-6, "softpick bool-masked");
  }
  // StableMax.
  {
    std::vector<float> x = {0, 1, -1}, y(3), g = {0, 1, 0}, dx(3);
    smax::stablemax(smax::make_view(x.data(), {3}), smax::make_view(y.data(), {3}));
    expect_row(y, {2.0 / 7, 4.0 / 7, 1.0 / 7}, 1e-6, "stablemax [0,1,-1]");
    smax::stablemax_backward(smax::make_view(x.data(), {3}), smax::make_view(g.data(), {3}),
                             smax::make_view(dx.data(), {3}));
    expect_row(dx, {-8.0 / 49, 6.0 / 49, -2.0 / 49}, 2e-6, "stablemax VJP");
    std::vector<float> x2 = {1, 3}, y2(2);
    smax::stablemax(smax::make_view(x2.data(), {2}), smax::make_view(y2.data(), {2}));
    expect_row(y2, {1.0 / 3, 2.0 / 3}, 1e-6, "stablemax [1,3]");
    int64_t tg = 1;
    float loss = 0;
    smax::stablemax_cross_entropy(smax::make_view(x.data(), {1, 3}),
                                  smax::make_index_view(&tg, {1}), smax::make_view(&loss, {}));
    EXPECT_NEAR(loss, 0.5596158, 1e-6);
    // Gradient (s'/s)(y - d_t) at t = 1: [1*(2/7), (1/2)(4/7 - 1), (1/2)(1/7)].
    float one = 1.0f;
    std::vector<float> gx(3);
    smax::stablemax_cross_entropy_backward(smax::make_view(x.data(), {1, 3}),
                                           smax::make_index_view(&tg, {1}),
                                           smax::make_view(&one, {}),
                                           smax::make_view(gx.data(), {1, 3}));
    expect_row(gx, {2.0 / 7, -3.0 / 14, 1.0 / 14}, 2e-6, "stablemax CE gradient");
  }
  // Collapse gaps: f32 ~16.6, f16 ~7.6, bf16 ~5.5 for one competitor.
  {
    struct Gap {
      Precision p;
      float below, above;
    };
    for (const Gap& gp : {Gap{Precision::kF32, 16.0f, 17.0f}, Gap{Precision::kF16, 7.0f, 8.0f},
                          Gap{Precision::kBF16, 5.0f, 6.0f}}) {
      std::vector<float> a = {0.0f, -gp.below}, b = {0.0f, -gp.above};
      EXPECT_EQ(smax::softmax_collapse_fraction(smax::make_view(a.data(), {2}), gp.p), 0.0)
          << smax::precision_name(gp.p);
      EXPECT_EQ(smax::softmax_collapse_fraction(smax::make_view(b.data(), {2}), gp.p), 1.0)
          << smax::precision_name(gp.p);
    }
  }
}

// ---------------------------------------------------------------------------
// Finite differences of the float64 reference forward vs the reference VJPs.
// ---------------------------------------------------------------------------
TEST(RescaledSpec, ReferenceVjpMatchesFiniteDifferences) {
  Rng rng("fd");
  const double h = 1e-6;
  for (int trial = 0; trial < 20; ++trial) {
    const size_t n = 2 + static_cast<size_t>(trial % 6);
    Row x(n), g(n);
    for (size_t i = 0; i < n; ++i) {
      double v = rng.uniform(-3.0f, 3.0f);
      if (std::fabs(v) < 0.2) v += v < 0 ? -0.3 : 0.3;  // softpick / stablemax kinks at 0
      x[i] = v;
      g[i] = rng.normal();
    }
    if (trial % 5 == 0) x[0] = -INFINITY;  // a masked entry
    const double sigma = 0.7, s = 0.6;
    const int64_t tg = trial % static_cast<int64_t>(n) == 0 ? 1 : trial % static_cast<int64_t>(n);
    auto dotg = [&](const Row& y) {
      double acc = 0;
      for (size_t i = 0; i < n; ++i) acc += g[i] * y[i];
      return acc;
    };
    // L(x) = <g, f(sigma x)>; dL/dx = sigma * VJP(t = sigma x).
    auto scaled = [&](const Row& v) {
      Row t(v);
      for (double& e : t) e *= sigma;
      return t;
    };
    auto ssm = [&](const Row& v, double ss) {
      return dotg(ref::ssmax_row(scaled(v), ss, 0, smax::EmptyRow::kZero, false, false));
    };
    auto spk = [&](const Row& v) {
      return dotg(ref::softpick_row(scaled(v), 1e-6, smax::EmptyRow::kZero).y);
    };
    auto stm = [&](const Row& v) { return dotg(ref::stablemax_row(scaled(v), smax::EmptyRow::kZero)); };
    auto ce = [&](const Row& v) { return ref::stablemax_ce_row(scaled(v), tg, smax::EmptyRow::kZero); };
    const Row t = scaled(x);
    const Row y_ss = ref::ssmax_row(t, s, 0, smax::EmptyRow::kZero, false, false);
    double ds = 0;
    const Row v_ss = ref::ssmax_vjp_row(t, y_ss, g, s, 0, sigma, smax::EmptyRow::kZero, false, &ds);
    const Row v_sp = ref::softpick_vjp_row(t, g, 1e-6, sigma, smax::EmptyRow::kZero);
    const Row v_st = ref::stablemax_vjp_row(t, g, sigma, smax::EmptyRow::kZero);
    const Row v_ce = ref::stablemax_ce_grad_row(t, tg, sigma, smax::EmptyRow::kZero);
    for (size_t j = 0; j < n; ++j) {
      if (x[j] == -INFINITY) {
        EXPECT_EQ(v_ss[j], 0.0);
        EXPECT_EQ(v_sp[j], 0.0);
        EXPECT_EQ(v_st[j], 0.0);
        continue;
      }
      Row xp = x, xm = x;
      xp[j] += h;
      xm[j] -= h;
      auto fd = [&](const std::function<double(const Row&)>& f) { return (f(xp) - f(xm)) / (2 * h); };
      const std::string at = "trial " + std::to_string(trial) + " j " + std::to_string(j);
      EXPECT_NEAR(v_ss[j], fd([&](const Row& v) { return ssm(v, s); }), 1e-7) << "ssmax " << at;
      EXPECT_NEAR(v_sp[j], fd(spk), 1e-7) << "softpick " << at;
      EXPECT_NEAR(v_st[j], fd(stm), 1e-7) << "stablemax " << at;
      if (x[static_cast<size_t>(tg)] != -INFINITY) {
        EXPECT_NEAR(v_ce[j], fd(ce), 1e-7) << "CE " << at;
      }
    }
    const double fds = (ssm(x, s + h) - ssm(x, s - h)) / (2 * h);
    EXPECT_NEAR(ds, fds, 1e-7) << "ssmax ds, trial " << trial;
  }
}

// The vector f16 / bf16 rounding of the detector vs the reference's.
TEST(RescaledSpec, LowPrecisionRounding) {
  std::vector<float> x;
  for (uint32_t b = 0; b <= 0x47900000u; b += 997) {  // 0 .. ~73728, every binade
    float v;
    std::memcpy(&v, &b, 4);
    x.push_back(v);
  }
  for (float v : {0.0f, 1.0f, 65504.0f, 65519.0f, 65520.0f, 0x1p-14f, 0x1p-24f, 0x1p-25f,
                  0x1.8p-25f, 0x1.0p-133f, 0x1.8p-134f, 1.0f + 0x1p-11f, 1.0f + 0x1p-8f,
                  1.0f + 0x1.8p-8f})
    x.push_back(v);
  std::vector<float> out(x.size());
  for (Precision p : {Precision::kF16, Precision::kBF16}) {
    smax::kernels::round_to_precision_row(x.data(), static_cast<int64_t>(x.size()),
                                          static_cast<int>(p), out.data());
    int bad = 0;
    for (size_t i = 0; i < x.size() && bad < 5; ++i) {
      const double want = ref::round_to(x[i], p);
      const double scalar = smax::kernels::round_to_precision(x[i], static_cast<int>(p));
      if (static_cast<double>(out[i]) != want || scalar != want) {
        ++bad;
        ADD_FAILURE() << smax::precision_name(p) << " x=" << x[i] << " vector=" << out[i]
                      << " scalar=" << scalar << " ref=" << want;
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Per-target suite.
// ---------------------------------------------------------------------------
class Rescaled : public TargetTest {
 protected:
  int failures_ = 0;
  void record(const ::testing::AssertionResult& r) {
    EXPECT_TRUE(r) << "target " << GetParam();
    if (!r) ++failures_;
  }
  bool stop() const { return failures_ >= 10; }
};

std::vector<Params> params_for(Kind kind) {
  Params base;
  if (kind == Kind::kSsmax) {
    std::vector<Params> v(3, base);
    v[0].ssmax.s = 0.43f;
    v[1].ssmax.s = 1.0f;
    v[1].ssmax.fixed_n = 4096;
    v[2].ssmax.s = -0.5f;  // c < 0: masked entries must stay masked
    return v;
  }
  if (kind == Kind::kSoftpick) {
    std::vector<Params> v(2, base);
    v[1].softpick.eps = 1e-8f;
    return v;
  }
  return {base};
}

TEST_P(Rescaled, RandomAndAdversarialRows) {
  for (Kind kind : {Kind::kSsmax, Kind::kSoftpick, Kind::kStablemax}) {
    const std::vector<Params> ps = params_for(kind);
    for (size_t pi = 0; pi < ps.size(); ++pi) {
      std::vector<int64_t> sizes = kSizes;
      if (pi == 0) sizes.push_back(kVocab);
      for (Data data : all_data()) {
        Rng rng(std::string(kind_name(kind)) + "/" + data_name(data) + "/" + std::to_string(pi));
        for (int64_t n : sizes) {
          const int64_t rows = n >= 32000 ? 1 : 3;
          Tensor src({rows, n}, {}, n % 3);
          fill_rows(src, 1, data, rng);
          Tensor dst({rows, n});
          SoftmaxOptions o;
          const std::string what = std::string(kind_name(kind)) + " p" + std::to_string(pi) + " " +
                                   data_name(data) + " n=" + std::to_string(n);
          record(check_forward(kind, src, dst, o, ps[pi], what));
          if (n <= 1001 || data == Data::kUniform || data == Data::kSomeNegInf) {
            record(check_backward_op(kind, src, dst, o, ps[pi], rng, what + " backward"));
          }
          if (stop()) FAIL() << "stopping after " << failures_ << " failing cases";
        }
      }
      // Near-zero rows, and empty_row = kNan.
      Rng rng(std::string(kind_name(kind)) + "/extra");
      for (int64_t n : {5, 64, 1001}) {
        Tensor src({3, n}), dst({3, n});
        fill_near_zero(src, rng);
        record(check_forward(kind, src, dst, {}, ps[pi], "near-zero"));
        record(check_backward_op(kind, src, dst, {}, ps[pi], rng, "near-zero backward"));
        SoftmaxOptions nan_rows;
        nan_rows.empty_row = EmptyRow::kNan;
        fill_rows(src, 1, Data::kAllNegInf, rng);
        record(check_forward(kind, src, dst, nan_rows, ps[pi], "all-masked kNan"));
        record(check_backward_op(kind, src, dst, nan_rows, ps[pi], rng, "all-masked kNan bwd"));
      }
    }
  }
}

TEST_P(Rescaled, AnyAxisStridedWithMasksAndScale) {
  Rng rng("axis");
  const std::vector<int64_t> shape = {4, 9, 6};
  BoolTensor keep({9, 1});
  keep.fill([&](int64_t i) { return static_cast<uint8_t>(i % 4 != 1); });
  Tensor add({6});
  add.fill([&](int64_t i) { return i == 2 ? -INFINITY : rng.normal(); });
  Tensor srows({4, 1, 1});
  srows.fill([&](int64_t i) { return 0.3f + 0.2f * static_cast<float>(i); });
  for (int axis = 0; axis < 3; ++axis) {
    for (Kind kind : {Kind::kSsmax, Kind::kSoftpick, Kind::kStablemax}) {
      Tensor src(shape, permuted_strides(shape, {2, 0, 1}, 1), 1);
      src.fill([&](int64_t) { return 2.0f * rng.normal(); });
      Tensor dst(shape, permuted_strides(shape, {1, 2, 0}, 2));
      SoftmaxOptions o;
      o.axis = axis - 3;
      o.scale = 1.5f;
      o.temperature = 0.8f;
      o.bool_mask = keep.view();
      o.additive_mask = add.view();
      Params p;
      if (axis != 0) {  // s_rows broadcasts over [4, 1, 1] only when axis != 0
        p.ssmax.s_rows = srows.view();
      }
      const std::string what = std::string(kind_name(kind)) + " axis " + std::to_string(axis);
      record(check_forward(kind, src, dst, o, p, what));
      record(check_backward_op(kind, src, dst, o, p, rng, what + " backward"));
      // The view-level oracle agrees with the row-level one used above.
      if (kind == Kind::kStablemax) {
        const std::vector<double> r = ref::stablemax(src.view(), o);
        const std::vector<float> out = dst.dense();
        smax::stablemax(src.view(), dst.view(), o);
        const std::vector<float> out2 = dst.dense();
        for (size_t i = 0; i < r.size(); ++i) {
          EXPECT_NEAR(out2[i], r[i], 1e-6 * std::fabs(r[i]) + 1e-36) << what << " " << i;
        }
        (void)out;
      }
    }
  }
}

// Runs every op once on `src` (2-D, axis -1) with `threads` and returns all
// outputs concatenated (for bitwise comparisons).
std::vector<float> run_all(const Tensor& src, const Tensor& dy, const I64Tensor& target, int threads,
                           bool in_place) {
  SoftmaxOptions o;
  o.threads = threads;
  std::vector<float> all;
  const std::vector<int64_t> shape = src.shape();
  auto take = [&](const Tensor& t) {
    const std::vector<float> v = t.dense();
    all.insert(all.end(), v.begin(), v.end());
  };
  auto fwd = [&](const std::function<void(const TensorView&, const TensorView&)>& f) {
    Tensor out(shape);
    if (in_place) {
      Tensor io(shape);
      io.fill([&](int64_t i) { return src.at(i); });
      f(io.view(), io.view());
      take(io);
    } else {
      f(src.view(), out.view());
      take(out);
    }
  };
  auto bwd = [&](const std::function<void(const TensorView&, const TensorView&)>& f) {
    Tensor g(shape);
    g.fill([&](int64_t i) { return dy.at(i); });
    if (in_place) {
      f(g.view(), g.view());  // dsrc aliases dy
      take(g);
    } else {
      Tensor out(shape);
      f(g.view(), out.view());
      take(out);
    }
  };
  SsmaxOptions sp;
  fwd([&](const TensorView& s, const TensorView& d) { smax::ssmax(s, d, sp, o); });
  Tensor y(shape);
  smax::ssmax(src.view(), y.view(), sp, o);
  bwd([&](const TensorView& g, const TensorView& d) {
    smax::ssmax_backward(src.view(), y.view(), g, d, sp, o);
  });
  fwd([&](const TensorView& s, const TensorView& d) { smax::softpick(s, d, {}, o); });
  bwd([&](const TensorView& g, const TensorView& d) { smax::softpick_backward(src.view(), g, d, {}, o); });
  fwd([&](const TensorView& s, const TensorView& d) { smax::stablemax(s, d, o); });
  bwd([&](const TensorView& g, const TensorView& d) { smax::stablemax_backward(src.view(), g, d, o); });
  LossOptions lo;
  lo.reduction = Reduction::kNone;
  Tensor loss({shape[0]});
  smax::stablemax_cross_entropy(src.view(), target.view(), loss.view(), lo, o);
  take(loss);
  Tensor dl({shape[0]});
  dl.fill([](int64_t i) { return 0.5f + static_cast<float>(i % 3); });
  Tensor gx(shape);
  smax::stablemax_cross_entropy_backward(src.view(), target.view(), dl.view(), gx.view(), lo, o);
  take(gx);
  Tensor flags({shape[0]});
  const TensorView fv = flags.view();
  all.push_back(static_cast<float>(smax::softmax_collapse_fraction(src.view(), Precision::kF32, o, &fv)));
  take(flags);
  return all;
}

TEST_P(Rescaled, ThreadsBitwiseEqualAndInPlace) {
  Rng rng("threads");
  for (int64_t n : {7, 1001, 33000}) {
    const int64_t rows = n > 10000 ? 5 : 37;
    Tensor src({rows, n}), dy({rows, n});
    fill_rows(src, 1, Data::kWide, rng);
    fill_normal(dy, rng);
    I64Tensor target({rows});
    target.fill([&](int64_t i) { return i % 5 == 4 ? int64_t{-100} : rng.index(n); });
    const std::vector<float> one = run_all(src, dy, target, 1, false);
    for (int threads : {2, 3}) {
      const std::vector<float> other = run_all(src, dy, target, threads, false);
      ASSERT_EQ(one.size(), other.size());
      EXPECT_EQ(0, std::memcmp(one.data(), other.data(), one.size() * sizeof(float)))
          << "threads " << threads << " n " << n;
    }
    const std::vector<float> inplace = run_all(src, dy, target, 2, true);
    ASSERT_EQ(one.size(), inplace.size());
    EXPECT_EQ(0, std::memcmp(one.data(), inplace.data(), one.size() * sizeof(float)))
        << "in place, n " << n;
  }
}

// Cross-entropy: every reduction, class weights, ignore_index, masks.
TEST_P(Rescaled, StablemaxCrossEntropy) {
  Rng rng("ce");
  for (int64_t n : std::vector<int64_t>{1, 2, 3, 7, 8, 9, 31, 33, 100, 1000, 1001, 32000, kVocab}) {
    for (Data data : {Data::kUniform, Data::kWide, Data::kHuge, Data::kSomeNegInf, Data::kNan,
                      Data::kPosInf, Data::kAllNegInf, Data::kHigh}) {
      const int64_t rows = n >= 32000 ? 2 : 6;
      Tensor src({rows, n});
      fill_rows(src, 1, data, rng);
      I64Tensor target({rows});
      target.fill([&](int64_t i) { return i == 2 ? int64_t{-100} : rng.index(n); });
      Tensor w({n});
      w.fill([&](int64_t) { return rng.uniform(0.5f, 2.0f); });
      for (Reduction red : {Reduction::kNone, Reduction::kMean, Reduction::kSum}) {
        LossOptions lo;
        lo.reduction = red;
        if (red != Reduction::kSum) lo.weight = w.view();
        const std::string what = std::string("CE ") + data_name(data) + " n=" + std::to_string(n) +
                                 " " + smax::reduction_name(red);
        Tensor dst(red == Reduction::kNone ? std::vector<int64_t>{rows} : std::vector<int64_t>{});
        dst.poison();
        smax::stablemax_cross_entropy(src.view(), target.view(), dst.view(), lo);
        ASSERT_TRUE(dst.guards_intact()) << what;
        const std::vector<double> r = ref::stablemax_cross_entropy(src.view(), target.view(), lo);
        // Bounds: per row 1e-6 |w l|; reduced: sum of them / denominator.
        lo.reduction = Reduction::kNone;
        const std::vector<double> per = ref::stablemax_cross_entropy(src.view(), target.view(), lo);
        lo.reduction = red;
        Checker c;
        if (red == Reduction::kNone) {
          for (int64_t i = 0; i < rows; ++i) {
            c.element(dst.at(i), r[static_cast<size_t>(i)], 1e-6 * std::fabs(r[static_cast<size_t>(i)]) + 1e-30, false);
          }
        } else {
          double b = 0, wsum = 0;
          for (int64_t i = 0; i < rows; ++i) {
            b += 1e-6 * std::fabs(per[static_cast<size_t>(i)]);
            if (target.at(i) != -100) wsum += lo.weight ? w.at(target.at(i)) : 1.0;
          }
          if (red == Reduction::kMean) b /= wsum;
          c.element(dst.at(0), r[0], b + 0x1p-24 * std::fabs(r[0]) + 1e-30, false);
        }
        record(to_assertion(c.res, what));
        // Gradient.
        Tensor dl(red == Reduction::kNone ? std::vector<int64_t>{rows} : std::vector<int64_t>{});
        fill_normal(dl, rng);
        Tensor dx({rows, n});
        dx.poison();
        smax::stablemax_cross_entropy_backward(src.view(), target.view(), dl.view(), dx.view(), lo);
        ASSERT_TRUE(dx.guards_intact()) << what;
        const std::vector<double> gr =
            ref::stablemax_cross_entropy_backward(src.view(), target.view(), dl.view(), lo);
        Checker cg;
        double wsum = 0;
        for (int64_t i = 0; i < rows; ++i) {
          if (target.at(i) != -100) wsum += lo.weight ? w.at(target.at(i)) : 1.0;
        }
        for (int64_t rr = 0; rr < rows; ++rr) {
          const int64_t tg = target.at(rr);
          double cf = 0;
          if (tg != -100) {
            cf = (lo.weight ? w.at(tg) : 1.0) * (red == Reduction::kNone ? dl.at(rr) : dl.at(0));
            if (red == Reduction::kMean) cf /= wsum;
          }
          Row t(static_cast<size_t>(n));
          for (int64_t k = 0; k < n; ++k) t[static_cast<size_t>(k)] = src.at(rr * n + k);
          double S = 0;
          for (double v : t) S += ref::stable_s(v);
          for (int64_t k = 0; k < n; ++k) {
            const size_t i = static_cast<size_t>(rr * n + k);
            const double y = ref::stable_s(t[static_cast<size_t>(k)]) / S;
            const double ymd = std::fabs(y - (k == tg ? 1.0 : 0.0));
            cg.element(dx.at(static_cast<int64_t>(i)), gr[i],
                       2e-6 * std::fabs(cf) * ymd / (1.0 + std::fabs(t[static_cast<size_t>(k)])) + 1e-30);
          }
        }
        record(to_assertion(cg.res, what + " gradient"));
        if (stop()) FAIL() << "stopping";
      }
    }
  }
  // Masks and scale, class axis 0 of a strided 3-D tensor.
  {
    const std::vector<int64_t> shape = {7, 3, 4};
    Tensor src(shape, permuted_strides(shape, {2, 1, 0}, 1));
    src.fill([&](int64_t) { return 3.0f * rng.normal(); });
    BoolTensor keep({7, 1, 1});
    keep.fill([](int64_t i) { return static_cast<uint8_t>(i != 3); });
    I64Tensor target({3, 4});
    target.fill([&](int64_t i) { return i == 5 ? int64_t{3} : rng.index(7); });  // row 5: masked target
    SoftmaxOptions o;
    o.axis = 0;
    o.temperature = 2.0f;
    o.bool_mask = keep.view();
    LossOptions lo;
    lo.reduction = Reduction::kNone;
    Tensor dst({3, 4});
    smax::stablemax_cross_entropy(src.view(), target.view(), dst.view(), lo, o);
    const std::vector<double> r = ref::stablemax_cross_entropy(src.view(), target.view(), lo, o);
    Checker c;
    for (int64_t i = 0; i < 12; ++i) c.element(dst.at(i), r[static_cast<size_t>(i)], 1e-6 * std::fabs(r[static_cast<size_t>(i)]) + 1e-30, false);
    EXPECT_EQ(dst.at(5), INFINITY);
    record(to_assertion(c.res, "CE axis 0 masked"));
    Tensor dl({3, 4});
    fill_normal(dl, rng);
    Tensor dx(shape);
    smax::stablemax_cross_entropy_backward(src.view(), target.view(), dl.view(), dx.view(), lo, o);
    const std::vector<double> gr = ref::stablemax_cross_entropy_backward(src.view(), target.view(), dl.view(), lo, o);
    for (int64_t i = 0; i < dx.numel(); ++i) {
      EXPECT_NEAR(dx.at(i), gr[static_cast<size_t>(i)], 2e-6 * std::fabs(gr[static_cast<size_t>(i)]) + 1e-7) << i;
      if (i / 12 == 3) {
        EXPECT_EQ(dx.at(i), 0.0f) << "masked class gets exactly 0";
      }
    }
  }
}

// kMean where every counted row has weight 0 (targets 1 and 3 weigh 0, row
// 1 ignored): 0 / 0, so the gradient of the counted rows is NaN (a
// bool-masked entry stays exactly 0), the ignored row 0; kZero: 0. Library
// and oracle. (It used to be 0.)
TEST_P(Rescaled, StablemaxCrossEntropyZeroWeightSumMean) {
  const ZeroWeightSumProblem p;
  for (int zero = 0; zero < 2; ++zero) {
    const LossOptions lo = p.loss_options(zero);
    float dx[12];
    std::fill(dx, dx + 12, 7.0f);
    smax::stablemax_cross_entropy_backward(p.x(), p.target(), p.dloss(),
                                           smax::make_view(dx, {3, 4}), lo, p.options());
    p.expect_gradient(dx,
                      ref::stablemax_cross_entropy_backward(p.x(), p.target(), p.dloss(), lo,
                                                            p.options()),
                      zero, "stablemax_cross_entropy");
  }
}

int lanes_of(const std::string& target) {
  std::string t;
  for (char ch : target) t += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (t.find("avx3") != std::string::npos || t.find("avx512") != std::string::npos) return 16;
  if (t.find("avx2") != std::string::npos) return 8;
  if (t.find("sse") != std::string::npos || t.find("emu128") != std::string::npos) return 4;
  if (t.find("scalar") != std::string::npos) return 1;
  return 0;
}

TEST_P(Rescaled, SoftmaxCollapse) {
  const int lanes = lanes_of(smax::active_target());
  if (lanes == 0) GTEST_SKIP() << "unknown lane count for " << smax::active_target();
  Rng rng("collapse");
  struct Case {
    Precision p;
    float gap;  // around the precision's threshold
  };
  for (const Case& cs : {Case{Precision::kF32, 16.6f}, Case{Precision::kF16, 7.6f},
                         Case{Precision::kBF16, 5.5f}}) {
    for (int64_t n : {1, 2, 3, 7, 8, 9, 31, 33, 100, 1000, 1001, 32000}) {
      const int64_t rows = n >= 32000 ? 8 : 40;
      Tensor src({rows, n});
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t at = rng.index(n);
        const float m = rng.uniform(-50.0f, 50.0f);
        // Gap grows with log n so that a sizeable share of rows is near the threshold.
        const float base = cs.gap + std::log(static_cast<float>(n)) * rng.uniform(0.0f, 1.2f) +
                           rng.uniform(-2.0f, 2.0f);
        for (int64_t k = 0; k < n; ++k) {
          src.at(r * n + k) = k == at ? m : m - base - std::fabs(rng.normal(0.0f, 2.0f));
        }
        if (r == 5 && n > 1) src.at(r * n + (at + 1) % n) = -INFINITY;
        if (r == 6) src.at(r * n + at) = NAN;
        if (r == 7 && n > 2) src.at(r * n + (at + 1) % n) = m;  // a tie
      }
      Tensor flags({rows});
      const TensorView fv = flags.view();
      const double frac = smax::softmax_collapse_fraction(src.view(), cs.p, {}, &fv);
      const std::vector<int> want = ref::softmax_collapse_flags(src.view(), cs.p, {}, lanes);
      int64_t decided = 0, count = 0;
      for (int64_t r = 0; r < rows; ++r) {
        count += flags.at(r) == 1.0f;
        EXPECT_TRUE(flags.at(r) == 0.0f || flags.at(r) == 1.0f);
        if (want[static_cast<size_t>(r)] < 0) continue;
        ++decided;
        EXPECT_EQ(flags.at(r), static_cast<float>(want[static_cast<size_t>(r)]))
            << smax::precision_name(cs.p) << " n=" << n << " row " << r;
      }
      EXPECT_EQ(frac, static_cast<double>(count) / static_cast<double>(rows));
      EXPECT_GE(decided * 10, rows * 9) << "too few decidable rows";
      EXPECT_EQ(flags.at(6), 0.0f) << "NaN row " << smax::precision_name(cs.p) << " n=" << n;
      if (n == 1) {
        EXPECT_EQ(frac, static_cast<double>(rows - 1) / static_cast<double>(rows));  // all but the NaN row
      }
    }
  }
  // Empty, all-masked and +inf rows.
  Tensor e({3, 0});
  EXPECT_EQ(smax::softmax_collapse_fraction(e.view()), 0.0);
  std::vector<float> x = {-INFINITY, -INFINITY, 0.0f, INFINITY};
  EXPECT_EQ(smax::softmax_collapse_fraction(smax::make_view(x.data(), {2, 2})), 0.0);
}

// Every error path throws smax::Error before writing anything.
TEST(RescaledErrors, ThrowBeforeWriting) {
  Tensor src({4, 5}), dst({4, 5}), bad({4, 6}), dy({4, 5});
  src.fill([](int64_t i) { return static_cast<float>(i % 7) - 3.0f; });
  dy.fill([](int64_t i) { return static_cast<float>(i % 3); });
  dst.poison();
  const TensorView s = src.view(), d = dst.view(), b = bad.view(), g = dy.view();
  SsmaxOptions sp;
  sp.s = NAN;
  EXPECT_TRUE(throws_invalid([&] { smax::ssmax(s, d, sp); }, "ssmax: s must be finite"));
  sp.s = 1.0f;
  sp.fixed_n = -2;
  EXPECT_TRUE(throws_invalid([&] { smax::ssmax(s, d, sp); }, "fixed_n must be >= 0, got -2"));
  EXPECT_TRUE(throws_invalid([&] { smax::ssmax_backward(s, s, g, d, sp); }, "fixed_n"));
  sp.fixed_n = 0;
  EXPECT_TRUE(throws_invalid([&] { smax::ssmax(s, b, sp); }, "dst"));
  Tensor srows({3, 1});
  sp.s_rows = srows.view();
  EXPECT_TRUE(throws_invalid([&] { smax::ssmax(s, d, sp); }, "s_rows"));
  sp.s_rows.reset();
  Tensor dsbad({5});
  const TensorView dsv = dsbad.view();
  EXPECT_TRUE(throws_invalid([&] { smax::ssmax_backward(s, s, g, d, sp, {}, &dsv); }, "ds"));
  EXPECT_TRUE(throws_invalid([&] { smax::ssmax_backward(s, b, g, d, sp); }, "y"));
  SoftpickOptions pk;
  for (float eps : {-1.0f, NAN, INFINITY, 1e-40f}) {
    pk.eps = eps;
    EXPECT_TRUE(throws_invalid([&] { smax::softpick(s, d, pk); }, "softpick: eps must be"));
    EXPECT_TRUE(throws_invalid([&] { smax::softpick_backward(s, g, d, pk); }, "eps"));
  }
  SoftmaxOptions o;
  o.axis = 2;
  EXPECT_TRUE(throws_invalid([&] { smax::stablemax(s, d, o); }, "axis"));
  EXPECT_TRUE(throws_invalid([&] { smax::stablemax_backward(s, b, d); }, "dy"));
  o.axis = -1;
  o.temperature = 0.0f;
  EXPECT_TRUE(throws_invalid([&] { smax::softpick(s, d, {}, o); }, "temperature"));
  EXPECT_TRUE(throws_invalid([&] { smax::softmax_collapse_fraction(s, Precision::kF16, o); }, "temperature"));
  EXPECT_TRUE(throws_invalid([&] { smax::softmax_collapse_fraction(s, static_cast<Precision>(7)); },
                             "precision has unknown value 7"));
  Tensor flags({5});
  const TensorView fv = flags.view();
  EXPECT_TRUE(throws_invalid([&] { smax::softmax_collapse_fraction(s, Precision::kF32, {}, &fv); }, "flags"));
  EXPECT_TRUE(throws_invalid([&] { (void)smax::parse_precision("fp8"); }, "fp8"));
  // Partial overlap of dst and src.
  TensorView shifted = s;
  shifted.data = static_cast<float*>(shifted.data) + 1;
  shifted.shape[0] = 3;
  TensorView s3 = s;
  s3.shape[0] = 3;
  EXPECT_TRUE(throws_invalid([&] { smax::stablemax(s3, shifted); }, "overlaps"));
  // Cross-entropy.
  I64Tensor tg({4});
  tg.fill([](int64_t i) { return i; });
  Tensor loss({4}), one(std::vector<int64_t>{});
  LossOptions lo;
  tg.at(1) = 5;
  EXPECT_TRUE(throws_invalid([&] { smax::stablemax_cross_entropy(s, tg.view(), one.view(), lo); }, "target 5"));
  tg.at(1) = 1;
  EXPECT_TRUE(throws_invalid([&] { smax::stablemax_cross_entropy(s, tg.view(), loss.view(), lo); }, "dst"));
  lo.reduction = Reduction::kNone;
  EXPECT_TRUE(throws_invalid(
      [&] { smax::stablemax_cross_entropy_backward(s, tg.view(), one.view(), d, lo); }, "dloss"));
  Tensor w({4});
  lo.weight = w.view();
  EXPECT_TRUE(throws_invalid([&] { smax::stablemax_cross_entropy(s, tg.view(), loss.view(), lo); }, "weight"));
  const std::vector<float> after = dst.dense();
  for (float v : after) EXPECT_EQ(v, kSentinel);
  EXPECT_TRUE(dst.guards_intact());
  EXPECT_EQ(one.at(0), kSentinel);
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(loss.at(i), kSentinel);
}

// n = 1, single visible entry, all-masked rows and special values by name.
TEST(RescaledSpec, SpecialRows) {
  std::vector<float> one = {2.5f}, y(1);
  for (float s : {0.43f, -1.0f}) {
    SsmaxOptions p;
    p.s = s;
    smax::ssmax(smax::make_view(one.data(), {1}), smax::make_view(y.data(), {1}), p);
    EXPECT_EQ(y[0], 1.0f);
  }
  smax::stablemax(smax::make_view(one.data(), {1}), smax::make_view(y.data(), {1}));
  EXPECT_EQ(y[0], 1.0f);
  // One visible entry among masked ones: ln 1 = 0.
  std::vector<float> x = {-INFINITY, 3.0f, -INFINITY}, y3(3);
  smax::ssmax(smax::make_view(x.data(), {3}), smax::make_view(y3.data(), {3}));
  EXPECT_EQ(y3[0], 0.0f);
  EXPECT_EQ(y3[1], 1.0f);
  EXPECT_EQ(y3[2], 0.0f);
  // c < 0 keeps masked entries masked.
  SsmaxOptions neg;
  neg.s = -1.0f;
  std::vector<float> x4 = {-INFINITY, 1.0f, 0.0f, -INFINITY}, y4(4);
  smax::ssmax(smax::make_view(x4.data(), {4}), smax::make_view(y4.data(), {4}), neg);
  EXPECT_EQ(y4[0], 0.0f);
  EXPECT_EQ(y4[3], 0.0f);
  EXPECT_NEAR(y4[1], 1.0 / 3, 1e-6);  // softmax([-ln2, 0])
  // Per-row s: a NaN s gives a NaN row (forward, dsrc and ds), others are fine.
  {
    std::vector<float> xs = {1, 0, 2, 0.5f, -1, 0}, ys(6), srow = {NAN, 1.0f}, dy = {1, 2, 3, 4, 5, 6},
                       dx(6), dsv(2);
    SsmaxOptions ps;
    ps.s_rows = smax::make_view(srow.data(), {2, 1});
    smax::ssmax(smax::make_view(xs.data(), {2, 3}), smax::make_view(ys.data(), {2, 3}), ps);
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(std::isnan(ys[static_cast<size_t>(i)]));
    const std::vector<double> r = ref::softmax_row({0.5 * std::log(3.0), -std::log(3.0), 0.0},
                                                   EmptyRow::kZero);
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(ys[static_cast<size_t>(3 + i)], r[static_cast<size_t>(i)], 1e-6);
    const TensorView dsview = smax::make_view(dsv.data(), {2});
    smax::ssmax_backward(smax::make_view(xs.data(), {2, 3}), smax::make_view(ys.data(), {2, 3}),
                         smax::make_view(dy.data(), {2, 3}), smax::make_view(dx.data(), {2, 3}),
                         ps, {}, &dsview);
    EXPECT_TRUE(std::isnan(dsv[0]));
    EXPECT_TRUE(std::isnan(dx[0]));
    EXPECT_TRUE(std::isfinite(dsv[1]));
  }
  // Softpick: all <= 0 -> zeros; +inf -> NaN row.
  std::vector<float> np = {-1.0f, 0.0f, -3.0f}, yp(3);
  smax::softpick(smax::make_view(np.data(), {3}), smax::make_view(yp.data(), {3}));
  for (float v : yp) EXPECT_EQ(v, 0.0f);
  np[1] = INFINITY;
  smax::softpick(smax::make_view(np.data(), {3}), smax::make_view(yp.data(), {3}));
  for (float v : yp) EXPECT_TRUE(std::isnan(v));
  // StableMax with huge finite values: no overflow.
  std::vector<float> big = {FLT_MAX, FLT_MAX, -FLT_MAX}, yb(3);
  smax::stablemax(smax::make_view(big.data(), {3}), smax::make_view(yb.data(), {3}));
  EXPECT_NEAR(yb[0], 0.5f, 1e-6f);
  EXPECT_NEAR(yb[1], 0.5f, 1e-6f);
  EXPECT_EQ(yb[2], 0.0f);
}

// Fuzz regression (fuzz/regressions/normalizers/softpick_backward_neg_inf_logits_nan_ref):
// a non-finite dy at a masked entry (t = -inf, from src or a mask) is left
// out of <dy, y>: the other entries are exactly those of dy = 0 there, and
// the float64 oracle agrees (it gave NaN through -inf * 0).
TEST_P(Rescaled, SoftpickBackwardNonFiniteDyAtMaskedEntries) {
  const std::vector<float> x = {1.6875f, -2.5e-39f, 7.875f, 3.0f, -INFINITY,
                                0.5f,    -1.0f,     2.0f,   4.0f, 1.0f};
  const uint8_t keep[10] = {1, 1, 1, 1, 1, 1, 0, 1, 1, 0};
  SoftmaxOptions o;
  o.bool_mask = smax::make_bool_view(keep, {2, 5});
  for (float bad : {-INFINITY, INFINITY, NAN}) {
    std::vector<float> dy = {2.5f, 2.5f, -2.7f, 7.0f, bad, 1.0f, bad, -0.5f, 0.25f, bad};
    std::vector<float> dy0 = dy;
    for (float& v : dy0) {
      if (!std::isfinite(v)) v = 0.0f;
    }
    std::vector<float> dx(10), dx0(10);
    smax::softpick_backward(smax::make_view(x.data(), {2, 5}), smax::make_view(dy.data(), {2, 5}),
                            smax::make_view(dx.data(), {2, 5}), {}, o);
    smax::softpick_backward(smax::make_view(x.data(), {2, 5}), smax::make_view(dy0.data(), {2, 5}),
                            smax::make_view(dx0.data(), {2, 5}), {}, o);
    EXPECT_EQ(std::memcmp(dx.data(), dx0.data(), sizeof(float) * dx.size()), 0);
    const std::vector<double> r = ref::softpick_backward(
        smax::make_view(x.data(), {2, 5}), smax::make_view(dy.data(), {2, 5}), {}, o);
    for (size_t i = 0; i < dx.size(); ++i) {
      const bool masked = i == 4 || keep[i] == 0;
      if (masked) {
        EXPECT_EQ(dx[i], 0.0f) << i;
        EXPECT_EQ(r[i], 0.0) << i;
        continue;
      }
      EXPECT_TRUE(std::isfinite(dx[i])) << i;
      EXPECT_TRUE(std::isfinite(r[i])) << i;
      EXPECT_NEAR(dx[i], r[i], 1e-5 * (1.0 + std::fabs(r[i]))) << i;
    }
  }
}

// Fuzz regression (fuzz/regressions/options/ssmax_backward_ds_f32_overflow):
// ds summed fl(t_i y_i) (g_i - dot); with t near 1e38 and a y above 1 (a y
// that is not a softmax output) t y overflowed f32 to -inf and met the +inf
// of a masked-by-value entry: NaN where the float64 sum is +inf. The
// products are now formed in float64.
TEST_P(Rescaled, FuzzRegressionSsmaxDsNoF32Overflow) {
  const std::vector<float> x = {0.0947265625f, -kInfF};
  const std::vector<float> y = {7.1875f, 6.9375f}, dy = {0.25f, 0.25f};
  const float mask = 1e38f, s_row = 0.43f;
  SoftmaxOptions o;
  o.scale = 0.001f;
  o.additive_mask = smax::make_view(&mask, {});
  SsmaxOptions p;
  p.s_rows = smax::make_view(&s_row, {});
  p.fixed_n = 7;
  std::vector<float> dx(2), ds(1);
  const TensorView dsv = smax::make_view(ds.data(), {});
  smax::ssmax_backward(smax::make_view(x.data(), {2}), smax::make_view(y.data(), {2}),
                       smax::make_view(dy.data(), {2}), smax::make_view(dx.data(), {2}), p, o, &dsv);
  // t = {1e38, -inf}; dot = 0.25 (7.1875 + 6.9375); entry 1's t y (g - dot)
  // is (-inf)(6.9375)(negative) = +inf, entry 0's finite in float64.
  EXPECT_EQ(ds[0], kInfF);
  // t y beyond FLT_MAX (9e38) with a small g - dot: ds is finite.
  const std::vector<float> x2 = {3e37f, 2e37f};
  const std::vector<float> y2 = {30.0f, 2.0f}, dy2 = {1e-3f, 1e-3f};
  SoftmaxOptions o2;
  std::vector<float> dx2(2), ds2(1);
  const TensorView dsv2 = smax::make_view(ds2.data(), {});
  SsmaxOptions p2;
  p2.s = 1e-30f;
  smax::ssmax_backward(smax::make_view(x2.data(), {2}), smax::make_view(y2.data(), {2}),
                       smax::make_view(dy2.data(), {2}), smax::make_view(dx2.data(), {2}), p2, o2, &dsv2);
  // ds = ln 2 sum t y (g - dot), g - dot = fl(1e-3 - fl(0.032)) (about -0.031).
  const float w = 1e-3f - static_cast<float>(30.0 * 1e-3f + 2.0 * 1e-3f);
  const double want = std::log(2.0) * (3e37 * 30.0 + 2e37 * 2.0) * static_cast<double>(w);
  EXPECT_TRUE(std::isfinite(ds2[0]));
  EXPECT_NEAR(ds2[0], want, 1e-6 * std::fabs(want));
}

SMAX_INSTANTIATE_PER_TARGET(Rescaled);

}  // namespace
}  // namespace smax_test
