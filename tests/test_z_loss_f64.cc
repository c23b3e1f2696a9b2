// tests/test_z_loss_f64.cc: z_loss and spherical_z_loss (forward and
// backward) with f64 logits run in float64 arithmetic
// (src/ops/losses/z_loss_f64.h), on every SIMD target, against long double
// oracles written here from include/smax/losses.h:
//  * the "float64" bounds stated there, with and without targets, class
//    weights, ignored rows, additive and bool masks, a scale, per-row
//    dloss, rows of 1 to 32000 classes, logits spread up to +-600;
//  * logits near 12345.678 (spread 0.01), where f32 arithmetic is off by
//    orders of magnitude (the test fails if an op fell back to it);
//  * the same bits for 1 and 3 threads; f32 outputs that are the float64
//    results rounded once; NaN and all-masked rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "smax/smax.h"
#include "test_util.h"

namespace smax_test {
namespace {

using smax::DType;
using LD = long double;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

struct Case {
  int64_t rows = 4, n = 100;
  double spread = 1.0, offset = 0.0;
  bool weights = false, ignore = false, add_mask = false, bool_mask = false;
  double scale = 1.0;  // an f32 option: the op's s is double(float(scale))
  uint64_t seed = 1;
};

struct Data {
  Case c;
  std::vector<double> x, mask, w, dloss;
  std::vector<uint8_t> keep;
  std::vector<int64_t> y;
  std::vector<double> t;  // the op's logits: x s + mask, -inf where keep == 0
  explicit Data(const Case& cs) : c(cs) {
    std::mt19937_64 rng(c.seed);
    std::uniform_real_distribution<double> u(-c.spread, c.spread), unit(0.0, 1.0);
    const size_t total = static_cast<size_t>(c.rows * c.n);
    x.resize(total);
    for (double& v : x) v = c.offset + u(rng);
    if (c.add_mask) {
      mask.resize(total);
      for (double& v : mask) v = unit(rng) < 0.1 ? -kInf : 0.5 * (2.0 * unit(rng) - 1.0);
    }
    if (c.bool_mask) {
      keep.resize(total);
      for (uint8_t& v : keep) v = unit(rng) < 0.15 ? 0 : 1;
    }
    if (c.weights) {
      w.resize(static_cast<size_t>(c.n));
      for (double& v : w) v = 0.2 + 1.8 * unit(rng);
    }
    const double s = static_cast<double>(static_cast<float>(c.scale));
    t.resize(total);
    for (size_t i = 0; i < total; ++i) {
      t[i] = x[i] * s + (c.add_mask ? mask[i] : 0.0);
      if (c.bool_mask && keep[i] == 0) t[i] = -kInf;
    }
    y.resize(static_cast<size_t>(c.rows));
    dloss.resize(static_cast<size_t>(c.rows));
    for (int64_t r = 0; r < c.rows; ++r) {
      int64_t k = (r * 7919 + 5) % c.n;
      for (int64_t step = 0; step < c.n && !(t[static_cast<size_t>(r * c.n + k)] > -kInf); ++step) {
        k = (k + 1) % c.n;
      }
      y[static_cast<size_t>(r)] = (c.ignore && r == 1) ? -100 : k;
      dloss[static_cast<size_t>(r)] = 0.75 + 0.5 * static_cast<double>(r);
    }
  }
  const double* row(int64_t r) const { return t.data() + r * c.n; }
  double weight(int64_t r) const {
    const int64_t k = y[static_cast<size_t>(r)];
    if (k == -100) return 0.0;
    return c.weights ? w[static_cast<size_t>(k)] : 1.0;
  }
  smax::SoftmaxOptions options(int threads = 0) {
    smax::SoftmaxOptions o;
    o.scale = static_cast<float>(c.scale);
    if (c.add_mask) o.additive_mask = f64_view(mask.data(), {c.rows, c.n});
    if (c.bool_mask) {
      const int64_t shape[2] = {c.rows, c.n};
      o.bool_mask = smax::make_view(keep.data(), DType::kBool, 2, shape, nullptr);
    }
    o.threads = threads;
    return o;
  }
  smax::LossOptions loss() {
    smax::LossOptions lo;
    lo.reduction = smax::Reduction::kNone;
    if (c.weights) lo.weight = f64_view(w.data(), {c.n});
    return lo;
  }
};

// ---- oracles ------------------------------------------------------------------------

// L = log sum e^t and p = softmax(t) in long double.
struct Lse {
  LD L = 0;
  std::vector<LD> p;
};
Lse lse_ld(const double* t, int64_t n) {
  LD m = -INFINITY;
  for (int64_t j = 0; j < n; ++j) m = std::max<LD>(m, t[j]);
  Lse r;
  r.p.assign(static_cast<size_t>(n), 0);
  LD S = 0;
  for (int64_t j = 0; j < n; ++j) {
    if (t[j] > -kInf) {
      r.p[static_cast<size_t>(j)] = std::exp(static_cast<LD>(t[j]) - m);
      S += r.p[static_cast<size_t>(j)];
    }
  }
  for (LD& v : r.p) v /= S;
  r.L = m + std::log(S);
  return r;
}

// Mean and population std of the unmasked entries, from differences to a
// pivot (the first unmasked entry: t - pivot is exact for the rows here), and
// dev_k = t_k - mean.
struct Moments {
  LD D = 0, sigma = 0;
  std::vector<LD> dev;
};
Moments moments_ld(const double* t, int64_t n) {
  Moments m;
  double pivot = 0.0;
  for (int64_t k = 0; k < n; ++k) {
    if (t[k] > -kInf) {
      pivot = t[k];
      break;
    }
  }
  LD sum = 0;
  for (int64_t k = 0; k < n; ++k) {
    if (t[k] > -kInf) {
      sum += static_cast<LD>(t[k] - pivot);
      m.D += 1;
    }
  }
  const LD mean_off = sum / m.D;
  m.dev.assign(static_cast<size_t>(n), 0);
  LD m2 = 0;
  for (int64_t k = 0; k < n; ++k) {
    if (t[k] > -kInf) {
      const LD d = static_cast<LD>(t[k] - pivot) - mean_off;
      m.dev[static_cast<size_t>(k)] = d;
      m2 += d * d;
    }
  }
  m.sigma = std::sqrt(m2 / m.D);
  return m;
}

LD softplus_ld(LD x) { return std::max<LD>(x, 0) + std::log1p(std::exp(-std::fabs(x))); }
LD sigmoid_ld(LD x) { return 1 / (1 + std::exp(-x)); }

class ZLossF64 : public TargetTest {};

void check_z_loss(Data& d, bool with_target) {
  const Case& c = d.c;
  const float coef = 1e-2f;
  const double cd = static_cast<double>(coef);
  std::vector<double> x = d.x, loss(static_cast<size_t>(c.rows), kNan), dx(x.size(), kNan);
  const auto src = f64_view(x.data(), {c.rows, c.n});
  const auto tv = smax::make_index_view(d.y.data(), {c.rows});
  const auto dl = f64_view(d.dloss.data(), {c.rows});
  if (with_target) {
    smax::z_loss(src, tv, f64_view(loss.data(), {c.rows}), coef, d.loss(), d.options());
    smax::z_loss_backward(src, tv, dl, f64_view(dx.data(), {c.rows, c.n}), coef, d.loss(),
                          d.options());
  } else {
    smax::LossOptions lo;
    lo.reduction = smax::Reduction::kNone;
    smax::z_loss(src, f64_view(loss.data(), {c.rows}), coef, lo, d.options());
    smax::z_loss_backward(src, dl, f64_view(dx.data(), {c.rows, c.n}), coef, lo, d.options());
  }
  const double s = static_cast<double>(static_cast<float>(c.scale));
  for (int64_t r = 0; r < c.rows; ++r) {
    const double w = with_target ? d.weight(r) : 1.0;
    const Lse o = lse_ld(d.row(r), c.n);
    const LD want = cd * w * o.L * o.L;
    const double L = static_cast<double>(o.L);
    ASSERT_LE(std::fabs(static_cast<LD>(loss[static_cast<size_t>(r)]) - want),
              1e-14 * cd * w * (1.0 + std::fabs(L)) * std::fabs(L) + 1e-300)
        << "row " << r << " loss " << loss[static_cast<size_t>(r)] << " want "
        << static_cast<double>(want);
    const double G = d.dloss[static_cast<size_t>(r)];
    for (int64_t j = 0; j < c.n; ++j) {
      const LD p = o.p[static_cast<size_t>(j)];
      const LD gw = s * G * 2 * cd * w * o.L * p;
      const double bound =
          1e-14 * (std::fabs(L) + 1.0) * std::fabs(static_cast<double>(s * G * 2 * cd * w * p)) +
          1e-300;
      ASSERT_LE(std::fabs(static_cast<LD>(dx[static_cast<size_t>(r * c.n + j)]) - gw), bound)
          << "row " << r << " j " << j;
    }
  }
}

void check_spherical(Data& d) {
  const Case& c = d.c;
  const float a = 1.5f, b = 0.5f;
  const double ad = a, bd = b;
  std::vector<double> x = d.x, loss(static_cast<size_t>(c.rows), kNan), dx(x.size(), kNan);
  const auto src = f64_view(x.data(), {c.rows, c.n});
  const auto tv = smax::make_index_view(d.y.data(), {c.rows});
  smax::spherical_z_loss(src, tv, f64_view(loss.data(), {c.rows}), a, b, d.loss(), d.options());
  smax::spherical_z_loss_backward(src, tv, f64_view(d.dloss.data(), {c.rows}),
                                  f64_view(dx.data(), {c.rows, c.n}), a, b, d.loss(),
                                  d.options());
  const double s = static_cast<double>(static_cast<float>(c.scale));
  for (int64_t r = 0; r < c.rows; ++r) {
    const int64_t y = d.y[static_cast<size_t>(r)];
    const double w = d.weight(r);
    if (y == -100) {
      EXPECT_EQ(loss[static_cast<size_t>(r)], 0.0);
      for (int64_t j = 0; j < c.n; ++j) ASSERT_EQ(dx[static_cast<size_t>(r * c.n + j)], 0.0);
      continue;
    }
    const Moments m = moments_ld(d.row(r), c.n);
    const LD zy = m.dev[static_cast<size_t>(y)] / m.sigma;
    const LD want = w * softplus_ld(ad * (bd - zy)) / ad;
    ASSERT_LE(std::fabs(static_cast<LD>(loss[static_cast<size_t>(r)]) - want),
              1e-14 * w * (1.0 + std::fabs(static_cast<double>(want)) +
                           std::fabs(static_cast<double>(zy))) +
                  1e-300)
        << "row " << r;
    const double G = d.dloss[static_cast<size_t>(r)];
    const LD sig = sigmoid_ld(ad * (bd - zy));
    const LD c0 = -w * sig / m.sigma;
    for (int64_t j = 0; j < c.n; ++j) {
      const double got = dx[static_cast<size_t>(r * c.n + j)];
      if (!(d.row(r)[j] > -kInf)) {
        ASSERT_EQ(got, 0.0);
        continue;
      }
      const LD zk = m.dev[static_cast<size_t>(j)] / m.sigma;
      const LD want_g = s * G * c0 * ((j == y ? 1 : 0) - 1 / m.D - zy * zk / m.D);
      const double bound = 1e-14 * s * G * w * static_cast<double>(sig / m.sigma) *
                               (1.0 + std::fabs(static_cast<double>(zy * zk))) +
                           1e-300;
      ASSERT_LE(std::fabs(static_cast<LD>(got) - want_g), bound)
          << "row " << r << " j " << j << " got " << got << " want "
          << static_cast<double>(want_g);
    }
  }
}

std::vector<Case> cases() {
  std::vector<Case> v;
  uint64_t seed = 1;
  for (int64_t n : std::vector<int64_t>{1, 7, 100, 1000, 32000}) {
    for (const auto& [spread, offset] : std::vector<std::pair<double, double>>{
             {1.0, 0.0}, {40.0, 0.0}, {600.0, 0.0}, {0.01, 12345.678}}) {
      Case c;
      c.n = n;
      c.rows = n > 1000 ? 2 : 4;
      c.spread = spread;
      c.offset = offset;
      c.seed = seed++;
      v.push_back(c);
      if (n > 1) {
        c.weights = c.ignore = c.add_mask = c.bool_mask = true;
        c.scale = 0.7;
        c.seed = seed++;
        v.push_back(c);
      }
    }
  }
  return v;
}

std::string describe(const Case& c) {
  return "n " + std::to_string(c.n) + " spread " + std::to_string(c.spread) + " offset " +
         std::to_string(c.offset) + (c.weights ? " options" : "");
}

TEST_P(ZLossF64, ZLossWithinTheFloat64Bound) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(describe(c));
    Data d(c);
    check_z_loss(d, true);
    if (!c.weights) check_z_loss(d, false);
  }
}

TEST_P(ZLossF64, SphericalZLossWithinTheFloat64Bound) {
  for (const Case& c : cases()) {
    if (c.n < 2) continue;  // D = 1: std 0, NaN (SpecialRows)
    SCOPED_TRACE(describe(c));
    Data d(c);
    check_spherical(d);
  }
}

TEST_P(ZLossF64, ThreadsAndF32OutputsAreTheFloat64ResultRoundedOnce) {
  Case c;
  c.rows = 33;  // 33 x 4000: several tasks of the fixed grid (65536 elements each)
  c.n = 4000;
  c.offset = 50.0;
  c.weights = c.add_mask = true;
  Data d(c);
  const auto tv = smax::make_index_view(d.y.data(), {c.rows});
  const auto dl = f64_view(d.dloss.data(), {c.rows});
  for (int op = 0; op < 2; ++op) {
    auto run = [&](int threads, bool f32_out, std::vector<double>* loss64,
                   std::vector<float>* loss32, std::vector<double>* dx64) {
      std::vector<double> x = d.x;
      const auto src = f64_view(x.data(), {c.rows, c.n});
      const smax::TensorView out =
          f32_out ? smax::make_view(loss32->data(), {c.rows}) : f64_view(loss64->data(), {c.rows});
      const auto dsrc = f64_view(dx64->data(), {c.rows, c.n});
      if (op == 0) {
        smax::z_loss(src, tv, out, 1e-2f, d.loss(), d.options(threads));
        smax::z_loss_backward(src, tv, dl, dsrc, 1e-2f, d.loss(), d.options(threads));
      } else {
        smax::spherical_z_loss(src, tv, out, 1.5f, 0.5f, d.loss(), d.options(threads));
        smax::spherical_z_loss_backward(src, tv, dl, dsrc, 1.5f, 0.5f, d.loss(),
                                        d.options(threads));
      }
    };
    const size_t rows = static_cast<size_t>(c.rows), total = d.x.size();
    std::vector<double> l1(rows), l3(rows), g1(total), g3(total);
    std::vector<float> l32(rows);
    run(1, false, &l1, nullptr, &g1);
    run(3, false, &l3, nullptr, &g3);
    EXPECT_EQ(0, std::memcmp(l1.data(), l3.data(), rows * sizeof(double))) << "op " << op;
    EXPECT_EQ(0, std::memcmp(g1.data(), g3.data(), total * sizeof(double))) << "op " << op;
    run(1, true, nullptr, &l32, &g3);
    for (size_t r = 0; r < rows; ++r) EXPECT_EQ(l32[r], static_cast<float>(l1[r])) << "op " << op;
  }
}

TEST_P(ZLossF64, SpecialRows) {
  const int64_t n = 4, rows = 3;
  std::vector<double> x = {1.0, kNan, 2.0, -kInf,       // NaN
                           -kInf, -kInf, -kInf, -kInf,  // all masked
                           2.0, 2.0, 2.0, 2.0};         // constant: spherical std 0
  std::vector<int64_t> y = {0, 1, 2};
  std::vector<double> dloss = {1.0, 1.0, 1.0};
  for (smax::EmptyRow e : {smax::EmptyRow::kZero, smax::EmptyRow::kNan}) {
    smax::SoftmaxOptions o;
    o.empty_row = e;
    smax::LossOptions lo;
    lo.reduction = smax::Reduction::kNone;
    const auto src = f64_view(x.data(), {rows, n});
    const auto tv = smax::make_index_view(y.data(), {rows});
    std::vector<double> loss(3, 7.0), dx(12, 7.0);
    smax::z_loss(src, tv, f64_view(loss.data(), {rows}), 1e-2f, lo, o);
    smax::z_loss_backward(src, tv, f64_view(dloss.data(), {rows}), f64_view(dx.data(), {rows, n}),
                          1e-2f, lo, o);
    EXPECT_TRUE(std::isnan(loss[0]));
    EXPECT_EQ(dx[3], 0.0);  // masked entry of a NaN row
    EXPECT_TRUE(std::isnan(dx[0]));
    if (e == smax::EmptyRow::kNan) {
      EXPECT_TRUE(std::isnan(loss[1]));
      EXPECT_TRUE(std::isnan(dx[4]));
    } else {
      EXPECT_EQ(loss[1], 0.0);
      EXPECT_EQ(dx[4], 0.0);
    }
    const double L = 2.0 + std::log(4.0);
    EXPECT_NEAR(loss[2], static_cast<double>(1e-2f) * L * L, 1e-15);
    smax::spherical_z_loss(src, tv, f64_view(loss.data(), {rows}), 1.5f, 0.5f, lo, o);
    EXPECT_TRUE(std::isnan(loss[0]));
    EXPECT_TRUE(std::isnan(loss[2]));  // std = 0
    if (e == smax::EmptyRow::kNan) {
      EXPECT_TRUE(std::isnan(loss[1]));
    } else {
      EXPECT_EQ(loss[1], 0.0);
    }
  }
}

// Logits at the ends of float64's range: the spherical statistics are taken
// on the row scaled by a power of two (no overflow of the squares or the
// sum, no underflow for tiny rows); the z-loss gradient stays exactly 0 at
// masked entries and where p_j underflows even when s G 2 c w L overflows.
TEST_P(ZLossF64, ExtremeLogits) {
  smax::LossOptions lo;
  lo.reduction = smax::Reduction::kNone;
  const double a = 1.5, b = 0.5;
  const LD zy = std::sqrt(1.5L);
  const LD want = std::log1p(std::exp(static_cast<LD>(a) * (b - zy))) / a;
  for (double scale : {1e200, 1e-200, 1e300}) {
    std::vector<double> x = {scale, -scale, 0.0};
    std::vector<int64_t> y = {0};
    std::vector<double> loss(1, kNan), dx(3, kNan), dloss = {1.0};
    const auto src = f64_view(x.data(), {1, 3});
    const auto tv = smax::make_index_view(y.data(), {1});
    smax::spherical_z_loss(src, tv, f64_view(loss.data(), {1}), 1.5f, 0.5f, lo);
    EXPECT_NEAR(loss[0], static_cast<double>(want), 1e-15) << "scale " << scale;
    smax::spherical_z_loss_backward(src, tv, f64_view(dloss.data(), {1}), f64_view(dx.data(), {1, 3}),
                                    1.5f, 0.5f, lo);
    // The gradient sums to 0 over the row and scales as 1 / std.
    for (double v : dx) EXPECT_TRUE(std::isfinite(v)) << "scale " << scale;
    EXPECT_LE(std::fabs(dx[0] + dx[1] + dx[2]), 1e-15 * (std::fabs(dx[0]) + std::fabs(dx[1])));
  }
  std::vector<double> x = {1e300, -kInf, 1e300 - 1e290};
  std::vector<int64_t> y = {0};
  std::vector<double> dx(3, kNan), dloss = {1e10};
  smax::z_loss_backward(f64_view(x.data(), {1, 3}), smax::make_index_view(y.data(), {1}),
                        f64_view(dloss.data(), {1}), f64_view(dx.data(), {1, 3}), 1e-2f, lo);
  EXPECT_EQ(dx[0], kInf);  // s G 2 c w L p_0 = 2e308 * 0.01 * 1e10: beyond float64
  EXPECT_EQ(dx[1], 0.0);   // masked
  EXPECT_EQ(dx[2], 0.0);   // p_2 = e^-1e290 = 0
}

SMAX_INSTANTIATE_PER_TARGET(ZLossF64);

}  // namespace
}  // namespace smax_test
