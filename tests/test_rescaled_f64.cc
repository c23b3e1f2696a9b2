// tests/test_rescaled_f64.cc: SSMax, softpick, StableMax, the StableMax
// cross-entropy and clipped softmax (forward and backward) with f64 logits
// run in float64 arithmetic (src/ops/normalizers/rescaled_f64.h,
// clipped_softmax.cc), on every SIMD target,
// against long double oracles written here from include/smax/normalizers.h:
//  * the "float64" bounds stated there, over rows of 1 to 32000 entries,
//    spreads up to +-600, masked entries, a scale, per-row s (SSMax) and ds;
//  * logits near 12345.678 (spread 0.01): rounded to f32 they lose their
//    differences, so the test fails by orders of magnitude if an op fell
//    back to f32 arithmetic;
//  * the same bits for 1 and 3 threads; f32 outputs that are the float64
//    results rounded once; NaN and all-masked rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "smax/smax.h"
#include "f64_rows.h"
#include "test_util.h"

namespace smax_test {
namespace {

using smax::DType;
using LD = long double;
using RowLD = std::vector<LD>;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

int64_t rows_of(const Shape& s) { return s.n > 1000 ? 2 : 4; }

// ---- oracles on one row ---------------------------------------------------------------

RowLD softmax_ld(const std::vector<double>& u) {
  LD m = -INFINITY;
  for (double v : u) m = std::max<LD>(m, v);
  RowLD y(u.size(), 0);
  LD S = 0;
  for (size_t i = 0; i < u.size(); ++i) {
    if (u[i] > -kInf) S += (y[i] = std::exp(static_cast<LD>(u[i]) - m));
  }
  for (LD& v : y) v /= S;
  return y;
}

// Softpick: a_j = |e^t_j - 1| e^-m (m = max t > 0), y_j = [t_j > 0] a_j / D,
// D = sum a + eps e^-m; also q_j = e^(t_j - m) / D and K = sum_vis q.
struct Softpick {
  RowLD y, q;
  LD K = 0;
};
Softpick softpick_ld(const double* t, int64_t n, double eps) {
  Softpick s;
  s.y.assign(static_cast<size_t>(n), 0);
  s.q.assign(static_cast<size_t>(n), 0);
  LD m = -INFINITY;
  for (int64_t j = 0; j < n; ++j) m = std::max<LD>(m, t[j]);
  if (!(m > 0)) return s;
  const LD em = std::exp(-m);
  RowLD a(static_cast<size_t>(n), 0);
  LD D = eps * em;
  for (int64_t j = 0; j < n; ++j) {
    if (!(t[j] > -kInf)) continue;
    const LD tj = t[j];
    a[static_cast<size_t>(j)] = tj > 0 ? std::exp(tj - m) * -std::expm1(-tj) : em * -std::expm1(tj);
    D += a[static_cast<size_t>(j)];
  }
  for (int64_t j = 0; j < n; ++j) {
    if (!(t[j] > -kInf)) continue;
    s.y[static_cast<size_t>(j)] = t[j] > 0 ? a[static_cast<size_t>(j)] / D : 0;
    s.q[static_cast<size_t>(j)] = std::exp(static_cast<LD>(t[j]) - m) / D;
    s.K += s.q[static_cast<size_t>(j)];
  }
  return s;
}

LD stable_s(LD x) { return x >= 0 ? x + 1 : 1 / (1 - x); }
LD stable_ds(LD x) { return x >= 0 ? 1 : 1 / ((1 - x) * (1 - x)); }

class RescaledF64 : public TargetTest {};

// ---- SSMax ------------------------------------------------------------------------------

TEST_P(RescaledF64, SsmaxForwardAndBackwardWithinTheFloat64Bound) {
  uint64_t seed = 1;
  for (const Shape& sh : f64_shapes()) {
    SCOPED_TRACE(describe(sh));
    const int64_t rows = rows_of(sh), n = sh.n;
    std::vector<double> x = make_rows(rows, n, sh.spread, sh.offset, sh.masked, seed++);
    std::vector<double> s_rows(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) s_rows[static_cast<size_t>(r)] = 0.3 + 0.1 * r;
    smax::SsmaxOptions p;
    p.s_rows = f64_view(s_rows.data(), {rows, 1});
    smax::SoftmaxOptions o;
    o.scale = 0.5f;  // an f32 option: the op's s is double(0.5f) = 0.5
    std::vector<double> y(x.size(), kNan), dx(x.size(), kNan), ds(static_cast<size_t>(rows), kNan);
    std::vector<double> g = normal(x.size(), seed++);
    smax::ssmax(f64_view(x.data(), {rows, n}), f64_view(y.data(), {rows, n}), p, o);
    const smax::TensorView dsv = f64_view(ds.data(), {rows});
    smax::ssmax_backward(f64_view(x.data(), {rows, n}), f64_view(y.data(), {rows, n}),
                         f64_view(g.data(), {rows, n}), f64_view(dx.data(), {rows, n}), p, o,
                         &dsv);
    for (int64_t r = 0; r < rows; ++r) {
      const double* xr = x.data() + r * n;
      std::vector<double> t(xr, xr + n), u(static_cast<size_t>(n));
      int64_t visible = 0;
      for (double& v : t) {
        v *= 0.5;
        visible += v > -kInf;
      }
      const double c = s_rows[static_cast<size_t>(r)] * std::log(static_cast<double>(visible));
      for (int64_t j = 0; j < n; ++j) u[static_cast<size_t>(j)] = t[static_cast<size_t>(j)] * c;
      const RowLD want = softmax_ld(u);
      for (int64_t j = 0; j < n; ++j) {
        const LD w = want[static_cast<size_t>(j)];
        ASSERT_LE(std::fabs(static_cast<LD>(y[static_cast<size_t>(r * n + j)]) - w),
                  1e-14 * static_cast<double>(w) + 1e-300)
            << "row " << r << " j " << j;
      }
      // Backward from the op's own y.
      const double* yr = y.data() + r * n;
      const double* gr = g.data() + r * n;
      LD dot = 0, abs_dot = 0, ds_want = 0, ds_mag = 0;
      for (int64_t j = 0; j < n; ++j) {
        dot += static_cast<LD>(gr[j]) * yr[j];
        abs_dot += std::fabs(gr[j] * yr[j]);
      }
      const double sc = 0.5 * c;
      for (int64_t j = 0; j < n; ++j) {
        const LD want_dx = t[static_cast<size_t>(j)] > -kInf ? sc * yr[j] * (gr[j] - dot) : 0;
        const double bound = 1e-14 * std::fabs(sc) * yr[j] * (std::fabs(gr[j]) + std::fabs(static_cast<double>(dot))) +
                             4e-16 * std::fabs(sc) * yr[j] * static_cast<double>(abs_dot) + 1e-300;
        ASSERT_LE(std::fabs(static_cast<LD>(dx[static_cast<size_t>(r * n + j)]) - want_dx), bound)
            << "row " << r << " j " << j;
        if (yr[j] != 0.0) {
          ds_want += static_cast<LD>(t[static_cast<size_t>(j)]) * yr[j] * (gr[j] - dot);
          ds_mag += std::fabs(t[static_cast<size_t>(j)] * yr[j]) * (std::fabs(gr[j]) + std::fabs(static_cast<double>(dot)));
        }
      }
      const double lnn = std::log(static_cast<double>(visible));
      ds_want *= lnn;
      EXPECT_LE(std::fabs(static_cast<LD>(ds[static_cast<size_t>(r)]) - ds_want),
                1e-14 * lnn * static_cast<double>(ds_mag) + 1e-300)
          << "row " << r << " ds " << ds[static_cast<size_t>(r)];
    }
  }
}

// ---- softpick -----------------------------------------------------------------------------

TEST_P(RescaledF64, SoftpickForwardAndBackwardWithinTheFloat64Bound) {
  uint64_t seed = 101;
  for (const Shape& sh : f64_shapes()) {
    SCOPED_TRACE(describe(sh));
    const int64_t rows = rows_of(sh), n = sh.n;
    // Centre the plain rows on 0.5 so that both signs of t occur.
    std::vector<double> x =
        make_rows(rows, n, sh.spread, sh.offset == 0.0 ? 0.5 : sh.offset, sh.masked, seed++);
    std::vector<double> y(x.size(), kNan), dx(x.size(), kNan);
    std::vector<double> g = normal(x.size(), seed++);
    smax::SoftpickOptions p;
    smax::SoftmaxOptions o;
    o.scale = 0.75f;
    smax::softpick(f64_view(x.data(), {rows, n}), f64_view(y.data(), {rows, n}), p, o);
    smax::softpick_backward(f64_view(x.data(), {rows, n}), f64_view(g.data(), {rows, n}),
                            f64_view(dx.data(), {rows, n}), p, o);
    const double eps = static_cast<double>(p.eps);
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<double> t(x.begin() + r * n, x.begin() + (r + 1) * n);
      for (double& v : t) v *= 0.75;
      const Softpick want = softpick_ld(t.data(), n, eps);
      LD rr = 0, G = 0;
      for (int64_t j = 0; j < n; ++j) {
        if (!(t[static_cast<size_t>(j)] > -kInf)) continue;
        rr += g[static_cast<size_t>(r * n + j)] * want.y[static_cast<size_t>(j)];
        G += std::fabs(g[static_cast<size_t>(r * n + j)]) *
             (want.y[static_cast<size_t>(j)] + want.q[static_cast<size_t>(j)]);
      }
      const double K = static_cast<double>(want.K);
      for (int64_t j = 0; j < n; ++j) {
        const size_t k = static_cast<size_t>(j);
        const double yw = static_cast<double>(want.y[k]), q = static_cast<double>(want.q[k]);
        ASSERT_LE(std::fabs(static_cast<LD>(y[static_cast<size_t>(r * n + j)]) - want.y[k]),
                  1e-14 * ((1 + K) * yw + q) + 1e-300)
            << "row " << r << " j " << j;
        const double gj = g[static_cast<size_t>(r * n + j)];
        const LD v = t[k] > 0 ? gj - rr : rr;
        const LD want_dx = t[k] > -kInf ? 0.75L * want.q[k] * v : 0;
        const double bound =
            1e-14 * 0.75 * q * ((1 + K) * (std::fabs(gj) + std::fabs(static_cast<double>(rr))) +
                                static_cast<double>(G)) +
            1e-300;
        ASSERT_LE(std::fabs(static_cast<LD>(dx[static_cast<size_t>(r * n + j)]) - want_dx), bound)
            << "row " << r << " j " << j;
      }
    }
  }
}

// ---- StableMax and its cross-entropy ------------------------------------------------------

TEST_P(RescaledF64, StablemaxWithinTheFloat64Bound) {
  uint64_t seed = 201;
  for (const Shape& sh : f64_shapes()) {
    SCOPED_TRACE(describe(sh));
    const int64_t rows = rows_of(sh), n = sh.n;
    std::vector<double> x = make_rows(rows, n, sh.spread, sh.offset, sh.masked, seed++);
    std::vector<double> y(x.size(), kNan), dx(x.size(), kNan), dxl(x.size(), kNan);
    std::vector<double> g = normal(x.size(), seed++);
    std::vector<double> loss(static_cast<size_t>(rows), kNan), dloss(static_cast<size_t>(rows));
    std::vector<int64_t> target(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      target[static_cast<size_t>(r)] = 0;  // entry 0 is never masked
      dloss[static_cast<size_t>(r)] = 0.5 + r;
    }
    smax::SoftmaxOptions o;
    o.scale = 0.75f;
    const auto src = f64_view(x.data(), {rows, n});
    smax::stablemax(src, f64_view(y.data(), {rows, n}), o);
    smax::stablemax_backward(src, f64_view(g.data(), {rows, n}), f64_view(dx.data(), {rows, n}), o);
    smax::LossOptions lo;
    lo.reduction = smax::Reduction::kNone;
    const auto tv = smax::make_index_view(target.data(), {rows});
    smax::stablemax_cross_entropy(src, tv, f64_view(loss.data(), {rows}), lo, o);
    smax::stablemax_cross_entropy_backward(src, tv, f64_view(dloss.data(), {rows}),
                                           f64_view(dxl.data(), {rows, n}), lo, o);
    for (int64_t r = 0; r < rows; ++r) {
      RowLD s(static_cast<size_t>(n), 0);
      std::vector<double> t(x.begin() + r * n, x.begin() + (r + 1) * n);
      LD S = 0;
      for (int64_t j = 0; j < n; ++j) {
        t[static_cast<size_t>(j)] *= 0.75;
        if (t[static_cast<size_t>(j)] > -kInf) S += (s[static_cast<size_t>(j)] = stable_s(t[static_cast<size_t>(j)]));
      }
      LD rr = 0, G = 0;
      for (int64_t j = 0; j < n; ++j) {
        rr += g[static_cast<size_t>(r * n + j)] * (s[static_cast<size_t>(j)] / S);
        G += std::fabs(g[static_cast<size_t>(r * n + j)]) * (s[static_cast<size_t>(j)] / S);
      }
      for (int64_t j = 0; j < n; ++j) {
        const size_t k = static_cast<size_t>(j);
        const LD yw = s[k] / S;
        ASSERT_LE(std::fabs(static_cast<LD>(y[static_cast<size_t>(r * n + j)]) - yw),
                  1e-14 * static_cast<double>(yw) + 1e-300)
            << "row " << r << " j " << j;
        const double gj = g[static_cast<size_t>(r * n + j)];
        const LD d = t[k] > -kInf ? stable_ds(t[k]) / S : 0;
        const LD want_dx = 0.75L * d * (gj - rr);
        const double bound = 1e-14 * 0.75 * static_cast<double>(d) *
                                 (std::fabs(gj) + std::fabs(static_cast<double>(rr)) + static_cast<double>(G)) +
                             1e-300;
        ASSERT_LE(std::fabs(static_cast<LD>(dx[static_cast<size_t>(r * n + j)]) - want_dx), bound)
            << "row " << r << " j " << j;
        // Cross-entropy gradient: c s (y_j - [j == target]) / (1 + |t_j|).
        const LD c = 0.75L * dloss[static_cast<size_t>(r)];
        const LD want_l = t[k] > -kInf ? c * (yw - (j == 0 ? 1 : 0)) / (1 + std::fabs(static_cast<LD>(t[k]))) : 0;
        ASSERT_LE(std::fabs(static_cast<LD>(dxl[static_cast<size_t>(r * n + j)]) - want_l),
                  1e-14 * std::fabs(static_cast<double>(want_l)) + 1e-300)
            << "row " << r << " j " << j;
      }
      const LD want_loss = std::log(S / s[0]);
      EXPECT_LE(std::fabs(static_cast<LD>(loss[static_cast<size_t>(r)]) - want_loss),
                1e-14 * std::fabs(static_cast<double>(want_loss)) + 1e-300)
          << "row " << r;
    }
  }
}

// ---- clipped softmax ------------------------------------------------------------------------

TEST_P(RescaledF64, ClippedSoftmaxWithinTheFloat64Bound) {
  uint64_t seed = 301;
  smax::ClippedSoftmaxOptions p;
  p.gamma = -0.03125f;  // exact in f32 and in double
  p.zeta = 1.0f;
  const double gamma = p.gamma, a = 1.0 - gamma;
  for (const Shape& sh : f64_shapes()) {
    SCOPED_TRACE(describe(sh));
    const int64_t rows = rows_of(sh), n = sh.n;
    std::vector<double> x = make_rows(rows, n, sh.spread, sh.offset, sh.masked, seed++);
    std::vector<double> y(x.size(), kNan), dx(x.size(), kNan);
    std::vector<double> g = normal(x.size(), seed++);
    smax::SoftmaxOptions o;
    o.scale = 0.75f;
    smax::clipped_softmax(f64_view(x.data(), {rows, n}), f64_view(y.data(), {rows, n}), p, o);
    smax::clipped_softmax_backward(f64_view(x.data(), {rows, n}), f64_view(g.data(), {rows, n}),
                                   f64_view(dx.data(), {rows, n}), p, o);
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<double> t(x.begin() + r * n, x.begin() + (r + 1) * n);
      for (double& v : t) v *= 0.75;
      const RowLD P = softmax_ld(t);
      // u_i = a g_i where 0 <= z_i <= 1; r = <u, p>; E = sum |u_i| e_i.
      RowLD u(static_cast<size_t>(n), 0);
      LD rr = 0, E = 0;
      std::vector<double> e(static_cast<size_t>(n));
      std::vector<char> near(static_cast<size_t>(n), 0);
      for (int64_t i = 0; i < n; ++i) {
        const size_t k = static_cast<size_t>(i);
        e[k] = 1e-14 * static_cast<double>(P[k]) + 1e-300;
        if (!(t[k] > -kInf)) continue;
        const LD z = a * P[k] + gamma;
        near[k] = std::fabs(static_cast<double>(z)) <= a * e[k] ||
                  std::fabs(static_cast<double>(z - 1)) <= a * e[k];
        if (z >= 0 && z <= 1) u[k] = a * g[static_cast<size_t>(r * n + i)];
        rr += u[k] * P[k];
        E += std::fabs(u[k]) * e[k];
      }
      for (int64_t j = 0; j < n; ++j) {
        const size_t k = static_cast<size_t>(j);
        const LD z = a * P[k] + gamma;
        const LD want = z < 0 ? 0 : z > 1 ? 1 : z;
        ASSERT_LE(std::fabs(static_cast<LD>(y[static_cast<size_t>(r * n + j)]) - want),
                  (1 + 0x1p-52) * a * e[k] + 0x1p-53 * static_cast<double>(want))
            << "row " << r << " j " << j;
        if (!(t[k] > -kInf)) {
          ASSERT_EQ(dx[static_cast<size_t>(r * n + j)], 0.0);
          continue;
        }
        double flip = 0.0;
        for (int64_t i = 0; i < n; ++i) {
          if (near[static_cast<size_t>(i)]) {
            flip += std::fabs(g[static_cast<size_t>(r * n + i)]) *
                    (static_cast<double>(P[static_cast<size_t>(i)]) + (i == j));
          }
        }
        flip *= 0.75 * (static_cast<double>(P[k]) + e[k]) * a;
        const LD want_dx = 0.75L * P[k] * (u[k] - rr);
        const double bound =
            0.75 * (e[k] * (std::fabs(static_cast<double>(u[k])) + std::fabs(static_cast<double>(rr))) +
                    (static_cast<double>(P[k]) + e[k]) * static_cast<double>(E)) +
            0x1p-53 * std::fabs(static_cast<double>(want_dx)) + 1e-300 + flip;
        ASSERT_LE(std::fabs(static_cast<LD>(dx[static_cast<size_t>(r * n + j)]) - want_dx), bound)
            << "row " << r << " j " << j;
      }
    }
  }
}

// ---- bits, narrow outputs, special rows -------------------------------------------------

TEST_P(RescaledF64, ThreadsAndF32OutputsAreTheFloat64ResultRoundedOnce) {
  // 33 x 4000: several tasks of the fixed grid (65536 elements each).
  const int64_t rows = 33, n = 4000;
  std::vector<double> x = make_rows(rows, n, 3.0, 0.5, true, 7);
  const std::vector<std::function<void(const smax::TensorView&, const smax::TensorView&, int)>> ops = {
      [](const smax::TensorView& a, const smax::TensorView& b, int th) {
        smax::SoftmaxOptions o;
        o.threads = th;
        smax::ssmax(a, b, {}, o);
      },
      [](const smax::TensorView& a, const smax::TensorView& b, int th) {
        smax::SoftmaxOptions o;
        o.threads = th;
        smax::softpick(a, b, {}, o);
      },
      [](const smax::TensorView& a, const smax::TensorView& b, int th) {
        smax::SoftmaxOptions o;
        o.threads = th;
        smax::stablemax(a, b, o);
      }};
  for (size_t op = 0; op < ops.size(); ++op) {
    std::vector<double> y1(x.size()), y3(x.size());
    std::vector<float> y32(x.size());
    ops[op](f64_view(x.data(), {rows, n}), f64_view(y1.data(), {rows, n}), 1);
    ops[op](f64_view(x.data(), {rows, n}), f64_view(y3.data(), {rows, n}), 3);
    EXPECT_EQ(0, std::memcmp(y1.data(), y3.data(), y1.size() * sizeof(double))) << "op " << op;
    ops[op](f64_view(x.data(), {rows, n}), smax::make_view(y32.data(), {rows, n}), 1);
    for (size_t i = 0; i < y32.size(); ++i) {
      ASSERT_EQ(y32[i], static_cast<float>(y1[i])) << "op " << op << " i " << i;
    }
  }
}

TEST_P(RescaledF64, SpecialRows) {
  const int64_t n = 4, rows = 4;
  std::vector<double> x = {1.0, kNan, 2.0, -kInf,        // NaN
                           -kInf, -kInf, -kInf, -kInf,   // all masked
                           0.5, kInf, 0.0, 0.0,          // +inf
                           -1.0, -2.0, 0.0, -kInf};      // softpick: all <= 0
  for (smax::EmptyRow e : {smax::EmptyRow::kZero, smax::EmptyRow::kNan}) {
    smax::SoftmaxOptions o;
    o.empty_row = e;
    std::vector<double> a(x.size(), 7.0), b(x.size(), 7.0), c(x.size(), 7.0);
    smax::ssmax(f64_view(x.data(), {rows, n}), f64_view(a.data(), {rows, n}), {}, o);
    smax::softpick(f64_view(x.data(), {rows, n}), f64_view(b.data(), {rows, n}), {}, o);
    smax::stablemax(f64_view(x.data(), {rows, n}), f64_view(c.data(), {rows, n}), o);
    for (const auto* y : {&a, &b, &c}) {
      for (int64_t j = 0; j < n; ++j) {
        EXPECT_TRUE(std::isnan((*y)[static_cast<size_t>(j)]));
        EXPECT_TRUE(std::isnan((*y)[static_cast<size_t>(2 * n + j)]));
        if (e == smax::EmptyRow::kNan) {
          EXPECT_TRUE(std::isnan((*y)[static_cast<size_t>(n + j)]));
        } else {
          EXPECT_EQ((*y)[static_cast<size_t>(n + j)], 0.0);
        }
      }
    }
    for (int64_t j = 0; j < n; ++j) EXPECT_EQ(b[static_cast<size_t>(3 * n + j)], 0.0);
    EXPECT_EQ(a[static_cast<size_t>(3 * n + 3)], 0.0);
    EXPECT_EQ(c[static_cast<size_t>(3 * n + 3)], 0.0);
  }
}

// Logits near the top of float64: the StableMax sum overflows and is taken
// on s 2^-600 instead; the outputs are the exact quotients.
TEST_P(RescaledF64, StablemaxSumBeyondFloat64) {
  std::vector<double> x = {1e308, 1e308, 5e307, -1.0};
  std::vector<double> y(4, kNan);
  smax::stablemax(f64_view(x.data(), {4}), f64_view(y.data(), {4}));
  const LD S = 1e308L + 1e308L + 5e307L + 0.5L + 3;
  EXPECT_NEAR(y[0], static_cast<double>((1e308L + 1) / S), 1e-15);
  EXPECT_NEAR(y[2], static_cast<double>((5e307L + 1) / S), 1e-15);
  EXPECT_GT(y[3], 0.0);
  EXPECT_LT(y[3], 1e-300);
}

// The StableMax cross-entropy with a sum beyond float64: both the plain
// ratio (k s_t normal) and the log form (k s_t below DBL_MIN).
TEST_P(RescaledF64, StablemaxCrossEntropyBeyondFloat64) {
  std::vector<double> x = {1e308, 1e308, -1e140};
  smax::LossOptions lo;
  lo.reduction = smax::Reduction::kNone;
  const LD s0 = 1e308L + 1, s2 = 1 / (1 + 1e140L), S = 2 * s0 + s2;
  for (int64_t target : {int64_t{0}, int64_t{2}}) {
    std::vector<int64_t> y = {target};
    std::vector<double> loss(1, kNan), dx(3, kNan), dloss = {1.0};
    const auto src = f64_view(x.data(), {1, 3});
    const auto tv = smax::make_index_view(y.data(), {1});
    smax::stablemax_cross_entropy(src, tv, f64_view(loss.data(), {1}), lo);
    const LD want = std::log(S / (target == 0 ? s0 : s2));
    EXPECT_LE(std::fabs(static_cast<LD>(loss[0]) - want), 1e-14 * static_cast<double>(want))
        << "target " << target << " loss " << loss[0];
    smax::stablemax_cross_entropy_backward(src, tv, f64_view(dloss.data(), {1}),
                                           f64_view(dx.data(), {1, 3}), lo);
    for (int64_t j = 0; j < 3; ++j) {
      const LD yj = (j == 2 ? s2 : s0) / S;
      const LD w = (yj - (j == target ? 1 : 0)) / (1 + std::fabs(static_cast<LD>(x[static_cast<size_t>(j)])));
      EXPECT_LE(std::fabs(static_cast<LD>(dx[static_cast<size_t>(j)]) - w),
                1e-14 * std::fabs(static_cast<double>(w)) + 1e-300)
          << "target " << target << " j " << j;
    }
  }
}

SMAX_INSTANTIATE_PER_TARGET(RescaledF64);

}  // namespace
}  // namespace smax_test
