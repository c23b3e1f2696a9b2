// tests/test_cross_entropy_f64.cc: cross_entropy and cross_entropy_backward
// with f64 logits run in float64 arithmetic (src/ops/losses/cross_entropy_f64.h),
// on every SIMD target, against a long double oracle written here from the
// formulas of include/smax/losses.h (x87 80-bit: 11 more bits than float64):
//  * the float64 bounds of include/smax/losses.h ("float64") for the per-row
//    loss, lse, z_loss, entropy, target_logprob and the gradient (fused and
//    backward), over class and probability targets, class weights, label
//    smoothing, z-loss, softcap, additive and bool masks, ignored rows, rows
//    from 1 to 32000 classes and logits spread up to +-600;
//  * a case where f32 arithmetic would be 1e6 times outside the bound (so
//    the test fails if the f64 path fell back to f32);
//  * the fused gradient has the bits of the backward with dloss = 1; the
//    same bits for 1, 2 and 7 threads, for transposed logits and in place;
//  * special rows (NaN, all masked under both policies); f32, bf16 and f16
//    loss and gradient outputs that are the float64 values rounded once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/convert.h"
#include "smax/smax.h"
#include "test_util.h"

namespace smax_test {
namespace {

using smax::DType;
using LD = long double;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kUnit = 1e-14;  // the float64 bound's constant

struct Case {
  int64_t rows = 4, n = 100;
  double spread = 5.0;
  double scale = 1.0;
  bool weights = false, probs = false, add_mask = false, bool_mask = false, ignore = false;
  float a = 0.0f, zs = 0.0f, cap = 0.0f;
  uint64_t seed = 1;
};

// The data of a case, and the library's views of it.
struct Data {
  Case c;
  std::vector<double> x, q, w, mask;
  std::vector<int64_t> y;
  std::vector<uint8_t> keep;
  explicit Data(const Case& cs) : c(cs) {
    std::mt19937_64 rng(c.seed);
    std::uniform_real_distribution<double> u(-c.spread, c.spread), unit(0.0, 1.0);
    const size_t total = static_cast<size_t>(c.rows * c.n);
    x.resize(total);
    for (double& v : x) v = u(rng);
    if (c.add_mask) {
      mask.resize(total);
      for (double& v : mask) v = unit(rng) < 0.1 ? -kInf : 3.0 * (2.0 * unit(rng) - 1.0);
    }
    if (c.bool_mask) {
      keep.resize(total);
      for (uint8_t& v : keep) v = unit(rng) < 0.15 ? 0 : 1;
    }
    if (c.weights) {
      w.resize(static_cast<size_t>(c.n));
      for (double& v : w) v = 0.2 + 1.8 * unit(rng);
    }
    y.resize(static_cast<size_t>(c.rows));
    for (int64_t r = 0; r < c.rows; ++r) {
      // A visible target (masked ones are tested on their own).
      int64_t t = static_cast<int64_t>(unit(rng) * static_cast<double>(c.n)) % c.n;
      for (int64_t k = 0; k < c.n && !visible(r, t); ++k) t = (t + 1) % c.n;
      y[static_cast<size_t>(r)] = c.ignore && r % 3 == 1 ? -100 : t;
    }
    if (c.probs) {
      q.assign(total, 0.0);
      for (int64_t r = 0; r < c.rows; ++r) {
        double sum = 0.0;
        for (int64_t j = 0; j < c.n; ++j) {
          double& v = q[static_cast<size_t>(r * c.n + j)];
          v = visible(r, j) && unit(rng) < 0.5 ? unit(rng) : 0.0;
          sum += v;
        }
        for (int64_t j = 0; j < c.n && sum > 0; ++j) q[static_cast<size_t>(r * c.n + j)] /= sum;
      }
    }
  }
  bool visible(int64_t r, int64_t j) const {
    const size_t i = static_cast<size_t>(r * c.n + j);
    return !(c.add_mask && mask[i] == -kInf) && !(c.bool_mask && keep[i] == 0);
  }
  smax::TensorView src() { return f64_view(x.data(), {c.rows, c.n}); }
  smax::TensorView target() {
    return c.probs ? f64_view(q.data(), {c.rows, c.n}) : smax::make_index_view(y.data(), {c.rows});
  }
  smax::CrossEntropyOptions ce(smax::Reduction red) {
    smax::CrossEntropyOptions o;
    o.loss.reduction = red;
    if (c.weights) o.loss.weight = f64_view(w.data(), {c.n});
    o.label_smoothing = c.a;
    o.lse_square_scale = c.zs;
    o.softcap = c.cap;
    return o;
  }
  smax::SoftmaxOptions options() {
    smax::SoftmaxOptions o;
    o.scale = static_cast<float>(c.scale);
    if (c.add_mask) o.additive_mask = f64_view(mask.data(), {c.rows, c.n});
    if (c.bool_mask) {
      const int64_t shape[2] = {c.rows, c.n};
      o.bool_mask = smax::make_view(keep.data(), DType::kBool, 2, shape, nullptr);
    }
    return o;
  }
};

// The long double oracle of one row: values, gradient (for G = 1) and the
// magnitudes the bounds scale.
struct RefRow {
  bool empty = false;
  LD L = 0, loss = 0, z = 0, H = 0, tlp = 0;
  double M = 0, F = 1, sum_pt = 0;
  double tmax = 0;      // max_j |t_j| over t_j > -inf
  int64_t argmax = -1;  // first max of t
  std::vector<LD> grad;
  std::vector<double> grad_mag;
};

RefRow oracle(const Data& d, int64_t r) {
  const Case& c = d.c;
  const int64_t n = c.n;
  const double s = static_cast<double>(static_cast<float>(c.scale));  // double(scale) / 1
  std::vector<double> u(static_cast<size_t>(n));
  std::vector<LD> t(static_cast<size_t>(n));
  double umax = 0;
  for (int64_t j = 0; j < n; ++j) {
    const size_t i = static_cast<size_t>(r * n + j);
    double v = d.x[i] * s;  // the library forms u in double: the input's own rounding
    if (c.add_mask && c.cap == 0.0f) v += d.mask[i];
    if (c.bool_mask && d.keep[i] == 0) v = -kInf;
    u[static_cast<size_t>(j)] = v;
    if (std::isfinite(v)) umax = std::max(umax, std::fabs(v));
    LD tv = v;
    if (c.cap > 0.0f && std::isfinite(v)) tv = static_cast<LD>(c.cap) * std::tanh(static_cast<LD>(v) / c.cap);
    if (c.cap > 0.0f && c.add_mask) tv += d.mask[i];
    if (c.bool_mask && d.keep[i] == 0) tv = -INFINITY;
    t[static_cast<size_t>(j)] = tv;
  }
  RefRow o;
  if (c.cap > 0.0f) o.F = 1.0 + c.cap + (1.0 + 1.0 / c.cap) * umax;
  LD m = -INFINITY;
  for (int64_t j = 0; j < n; ++j) {
    const LD v = t[static_cast<size_t>(j)];
    if (v > m) {
      m = v;
      o.argmax = j;
    }
    if (v != -INFINITY) o.tmax = std::max(o.tmax, static_cast<double>(std::fabs(v)));
  }
  o.grad.assign(static_cast<size_t>(n), 0);
  o.grad_mag.assign(static_cast<size_t>(n), 0);
  if (m == -INFINITY) {
    o.empty = true;
    return o;
  }
  LD S = 0;
  for (LD v : t) S += std::exp(v - m);
  o.L = m + std::log(S);
  const LD L = o.L;
  std::vector<LD> p(static_cast<size_t>(n));
  LD ent = 0, pt = 0;
  for (int64_t j = 0; j < n; ++j) {
    const LD tj = t[static_cast<size_t>(j)];
    p[static_cast<size_t>(j)] = std::exp(tj - m) / S;
    if (tj != -INFINITY) {
      ent -= p[static_cast<size_t>(j)] * (tj - L);
      pt += p[static_cast<size_t>(j)] * std::fabs(tj);
    }
  }
  o.H = ent;
  o.sum_pt = static_cast<double>(pt);
  const LD a = c.a, C = static_cast<LD>(n), zs = c.zs;
  auto wt = [&](int64_t j) -> LD { return c.weights ? d.w[static_cast<size_t>(j)] : 1.0L; };
  LD WU = 0, smooth = 0, smooth_mag = 0;
  for (int64_t j = 0; j < n; ++j) {
    const LD tj = t[static_cast<size_t>(j)];
    if (tj == -INFINITY) continue;
    WU += wt(j);
    smooth += wt(j) * (L - tj);
    smooth_mag += std::fabs(wt(j)) * (1 + std::fabs(L) + std::fabs(tj));
  }
  LD A = 0, D = 0;
  int64_t y = -1;
  std::vector<LD> B(static_cast<size_t>(n));
  if (c.probs) {
    LD lq = 0, mag = 0, Wq = 0, tmax = 0;
    for (int64_t j = 0; j < n; ++j) {
      const LD qj = d.q[static_cast<size_t>(r * n + j)], tj = t[static_cast<size_t>(j)];
      if (qj != 0) lq += wt(j) * qj * (L - tj);
      mag += std::fabs(wt(j) * qj) * (1 + std::fabs(L) + (tj == -INFINITY ? 0 : std::fabs(tj)));
      Wq += wt(j) * ((1 - a) * qj + (tj == -INFINITY ? 0 : a / C));
      B[static_cast<size_t>(j)] = wt(j) * ((1 - a) * qj + (tj == -INFINITY ? 0 : a / C));
      if (tj != -INFINITY) tmax = std::max(tmax, std::fabs(tj));
      if (tj != -INFINITY) o.tlp += qj * (tj - L);
    }
    o.z = zs * L * L;
    o.loss = (1 - a) * lq + a / C * smooth + o.z;
    o.M = static_cast<double>((1 - a) * mag + a / C * smooth_mag + 2 * zs * (1 + std::fabs(L)) * std::fabs(L));
    A = Wq + 2 * zs * L;
    o.tlp = o.tlp;  // sum_j q_j (t_j - L)
    (void)tmax;
  } else {
    y = d.y[static_cast<size_t>(r)];
    if (y < 0) return o;  // ignored: only L and H are defined
    const LD wy = wt(y), ty = t[static_cast<size_t>(y)];
    o.z = zs * wy * L * L;
    o.loss = (1 - a) * wy * (L - ty) + a / C * smooth + o.z;
    o.tlp = ty - L;
    o.M = static_cast<double>((1 - a) * std::fabs(wy) * (1 + std::fabs(L) + std::fabs(ty)) +
                              a / C * smooth_mag + 2 * zs * std::fabs(wy) * (1 + std::fabs(L)) * std::fabs(L));
    A = (1 - a) * wy + a / C * WU + 2 * zs * wy * L;
    D = (1 - a) * wy;
    for (int64_t j = 0; j < n; ++j) B[static_cast<size_t>(j)] = a / C * wt(j);
  }
  for (int64_t j = 0; j < n; ++j) {
    const size_t k = static_cast<size_t>(j);
    if (t[k] == -INFINITY) continue;
    LD cd = 1;
    if (c.cap > 0.0f) {
      // 1 - tanh^2 without its cancellation (4 e / (1 + e)^2, e = e^(-2|u/cap|)).
      const LD e = std::exp(-2 * std::fabs(static_cast<LD>(u[k]) / c.cap));
      cd = 4 * e / ((1 + e) * (1 + e));
    }
    const LD dt = p[k] * A - B[k] - (j == y ? D : 0);
    o.grad[k] = s * cd * dt;
    o.grad_mag[k] = static_cast<double>(std::fabs(s) * cd *
                                        (p[k] * std::fabs(A) + std::fabs(B[k]) + (j == y ? std::fabs(D) : 0)));
  }
  return o;
}

bool row_active(const Data& d, int64_t r) { return d.c.probs || d.y[static_cast<size_t>(r)] >= 0; }

// Forward (kNone, every per-row output, fused gradient) against the oracle.
void check_forward(Data& d) {
  const Case& c = d.c;
  SCOPED_TRACE(std::string("case: weights ") + (c.weights ? "1" : "0") + " probs " + (c.probs ? "1" : "0") +
               " masks " + (c.add_mask ? "1" : "0") + (c.bool_mask ? "1" : "0") + " a " + std::to_string(c.a) +
               " zs " + std::to_string(c.zs) + " cap " + std::to_string(c.cap) + " scale " + std::to_string(c.scale));
  std::vector<double> loss(static_cast<size_t>(c.rows)), lse(loss.size()), z(loss.size()),
      ent(loss.size()), tlp(loss.size()), acc(loss.size()), grad(d.x.size());
  smax::CrossEntropyOptions ce = d.ce(smax::Reduction::kNone);
  ce.lse = f64_view(lse.data(), {c.rows});
  ce.z_loss = f64_view(z.data(), {c.rows});
  ce.entropy = f64_view(ent.data(), {c.rows});
  ce.target_logprob = f64_view(tlp.data(), {c.rows});
  ce.accuracy = f64_view(acc.data(), {c.rows});
  ce.grad = f64_view(grad.data(), {c.rows, c.n});
  smax::cross_entropy(d.src(), d.target(), f64_view(loss.data(), {c.rows}), ce, d.options());
  for (int64_t r = 0; r < c.rows; ++r) {
    SCOPED_TRACE("row " + std::to_string(r));
    const size_t ri = static_cast<size_t>(r);
    const RefRow o = oracle(d, r);
    ASSERT_FALSE(o.empty);
    const double L = static_cast<double>(o.L), aL = std::fabs(L);
    EXPECT_LE(std::fabs(lse[ri] - o.L), kUnit * o.F * (1 + aL));
    EXPECT_LE(std::fabs(ent[ri] - o.H), kUnit * o.F * (1 + aL + o.sum_pt + std::fabs(static_cast<double>(o.H))));
    if (!row_active(d, r)) {
      EXPECT_EQ(loss[ri], 0.0);
      for (int64_t j = 0; j < c.n; ++j) ASSERT_EQ(grad[static_cast<size_t>(r * c.n + j)], 0.0);
      continue;
    }
    EXPECT_LE(std::fabs(loss[ri] - o.loss), kUnit * o.F * o.M + 1e-300) << loss[ri];
    EXPECT_LE(std::fabs(z[ri] - o.z), kUnit * o.F * std::fabs(static_cast<double>(o.z)) * (1 + aL) / std::max(aL, 1e-300) + 1e-300);
    if (!c.probs) {
      const double ty = std::fabs(static_cast<double>(o.tlp + o.L));
      EXPECT_LE(std::fabs(tlp[ri] - o.tlp), kUnit * o.F * (1 + aL + ty));
    } else {
      EXPECT_LE(std::fabs(tlp[ri] - o.tlp), kUnit * o.F * (1 + aL + o.tmax));
    }
    if (c.cap == 0.0f) {  // (with a softcap, tanh can tie entries in long double too)
      int64_t want = d.y[ri];
      if (c.probs) {
        want = 0;
        for (int64_t j = 1; j < c.n; ++j) {
          if (d.q[static_cast<size_t>(r * c.n + j)] > d.q[static_cast<size_t>(r * c.n + want)]) want = j;
        }
      }
      EXPECT_EQ(acc[ri], o.argmax == want ? 1.0 : 0.0);
    }
    for (int64_t j = 0; j < c.n; ++j) {
      const size_t k = static_cast<size_t>(j);
      const double got = grad[static_cast<size_t>(r * c.n + j)];
      ASSERT_LE(std::fabs(got - o.grad[k]), kUnit * o.F * o.grad_mag[k] + 1e-300)
          << "j " << j << " got " << got << " want " << static_cast<double>(o.grad[k]);
    }
  }
}

class CrossEntropyF64 : public TargetTest {};

TEST_P(CrossEntropyF64, ClassTargetsWithinTheFloat64Bound) {
  uint64_t seed = 1;
  for (int64_t n : std::vector<int64_t>{1, 7, 100, 1000, 32000}) {
    for (double spread : {1.0, 40.0, 600.0}) {
      Case c;
      c.n = n;
      c.rows = n > 1000 ? 2 : 5;
      c.spread = spread;
      c.seed = seed++;
      SCOPED_TRACE("n " + std::to_string(n) + " spread " + std::to_string(spread));
      Data plain(c);
      check_forward(plain);
      c.weights = c.ignore = true;
      c.a = 0.1f;
      c.zs = 1e-4f;
      c.scale = 0.7;
      Data options(c);
      check_forward(options);
      if (n > 1) {
        c.add_mask = c.bool_mask = true;
        Data masked(c);
        check_forward(masked);
        c.cap = 30.0f;
        Data capped(c);
        check_forward(capped);
      }
    }
  }
}

TEST_P(CrossEntropyF64, ProbabilityTargetsWithinTheFloat64Bound) {
  uint64_t seed = 100;
  for (int64_t n : std::vector<int64_t>{2, 9, 1000, 32000}) {
    Case c;
    c.n = n;
    c.rows = 3;
    c.probs = true;
    c.spread = 50.0;
    c.seed = seed++;
    SCOPED_TRACE("n " + std::to_string(n));
    Data plain(c);
    check_forward(plain);
    c.weights = true;
    c.a = 0.2f;
    c.zs = 1e-3f;
    c.add_mask = c.bool_mask = true;
    Data options(c);
    check_forward(options);
    c.cap = 15.0f;
    Data capped(c);
    check_forward(capped);
  }
}

// Logits near 1e4 with a softmax spread of a few units: f32 arithmetic
// loses ~1e-3 of L - t_y here, the float64 path keeps ~1e-12.
TEST_P(CrossEntropyF64, FarFromZeroLogitsKeepFloat64Accuracy) {
  Case c;
  c.n = 1000;
  c.rows = 3;
  c.spread = 3.0;
  Data d(c);
  for (double& v : d.x) v += 12345.678;
  check_forward(d);
  std::vector<double> loss(3);
  smax::cross_entropy(d.src(), d.target(), f64_view(loss.data(), {3}), d.ce(smax::Reduction::kNone));
  for (int64_t r = 0; r < 3; ++r) {
    const RefRow o = oracle(d, r);
    EXPECT_LE(std::fabs(loss[static_cast<size_t>(r)] - o.loss), 1e-10);  // f32: ~1e-3
  }
}

// The backward with per-row dloss: within the bound scaled by |dloss_r|,
// and with dloss = 1 the bits of the fused gradient.
TEST_P(CrossEntropyF64, BackwardMatchesTheOracleAndTheFusedBits) {
  for (bool probs : {false, true}) {
    Case c;
    c.n = 3000;
    c.rows = 4;
    c.probs = probs;
    c.weights = c.add_mask = true;
    c.ignore = !probs;
    c.a = 0.05f;
    c.zs = 2e-4f;
    c.cap = 20.0f;
    c.spread = 30.0;
    c.seed = probs ? 7 : 8;
    Data d(c);
    std::vector<double> dloss = {0.5, -2.0, 3.0, 1e-3}, dx(d.x.size()), ones(4, 1.0), dx1(d.x.size());
    const smax::CrossEntropyOptions ce = d.ce(smax::Reduction::kNone);
    smax::cross_entropy_backward(d.src(), d.target(), f64_view(dloss.data(), {4}),
                                 f64_view(dx.data(), {4, c.n}), ce, d.options());
    for (int64_t r = 0; r < 4; ++r) {
      const RefRow o = oracle(d, r);
      for (int64_t j = 0; j < c.n; ++j) {
        const size_t k = static_cast<size_t>(j);
        const double g = row_active(d, r) ? dloss[static_cast<size_t>(r)] : 0.0;
        ASSERT_LE(std::fabs(dx[static_cast<size_t>(r * c.n + j)] - g * o.grad[k]),
                  kUnit * o.F * std::fabs(g) * o.grad_mag[k] + 1e-300)
            << "row " << r << " j " << j;
      }
    }
    smax::cross_entropy_backward(d.src(), d.target(), f64_view(ones.data(), {4}),
                                 f64_view(dx1.data(), {4, c.n}), ce, d.options());
    std::vector<double> loss(4), fused(d.x.size());
    smax::CrossEntropyOptions cf = ce;
    cf.grad = f64_view(fused.data(), {4, c.n});
    smax::cross_entropy(d.src(), d.target(), f64_view(loss.data(), {4}), cf, d.options());
    EXPECT_EQ(0, std::memcmp(dx1.data(), fused.data(), fused.size() * sizeof(double)));
  }
}

// Mean reduction: sum of the rows' losses over the weight sum.
TEST_P(CrossEntropyF64, MeanReduction) {
  Case c;
  c.n = 500;
  c.rows = 6;
  c.weights = c.ignore = true;
  c.spread = 20.0;
  Data d(c);
  double mean = 0;
  smax::cross_entropy(d.src(), d.target(), f64_view(&mean, {}), d.ce(smax::Reduction::kMean));
  LD num = 0, den = 0;
  double mag = 0;
  for (int64_t r = 0; r < c.rows; ++r) {
    const int64_t y = d.y[static_cast<size_t>(r)];
    if (y < 0) continue;
    const RefRow o = oracle(d, r);
    num += o.loss;
    den += d.w[static_cast<size_t>(y)];
    mag += o.M;
  }
  EXPECT_LE(std::fabs(mean - num / den), kUnit * mag / static_cast<double>(den) + 1e-300);
}

TEST_P(CrossEntropyF64, ThreadsLayoutsAndInPlaceGiveTheSameBits) {
  Case c;
  c.n = 777;
  c.rows = 9;
  c.weights = c.add_mask = true;
  c.a = 0.1f;
  c.cap = 10.0f;
  c.spread = 20.0;
  Data d(c);
  auto run = [&](int threads, std::vector<double>& loss, std::vector<double>& grad) {
    loss.assign(static_cast<size_t>(c.rows), 0.0);
    grad.assign(d.x.size(), 0.0);
    smax::CrossEntropyOptions ce = d.ce(smax::Reduction::kNone);
    ce.grad = f64_view(grad.data(), {c.rows, c.n});
    smax::SoftmaxOptions o = d.options();
    o.threads = threads;
    smax::cross_entropy(d.src(), d.target(), f64_view(loss.data(), {c.rows}), ce, o);
  };
  std::vector<double> l1, g1, l, g;
  run(1, l1, g1);
  for (int threads : {2, 7}) {
    run(threads, l, g);
    EXPECT_EQ(0, std::memcmp(l1.data(), l.data(), l.size() * sizeof(double))) << threads;
    EXPECT_EQ(0, std::memcmp(g1.data(), g.data(), g.size() * sizeof(double))) << threads;
  }
  // Transposed logits, mask and gradient ([n, rows] memory, axis 0 logical... as a strided view).
  std::vector<double> xt(d.x.size()), mt(d.x.size()), gt(d.x.size()), lt(static_cast<size_t>(c.rows));
  for (int64_t r = 0; r < c.rows; ++r) {
    for (int64_t j = 0; j < c.n; ++j) {
      xt[static_cast<size_t>(j * c.rows + r)] = d.x[static_cast<size_t>(r * c.n + j)];
      mt[static_cast<size_t>(j * c.rows + r)] = d.mask[static_cast<size_t>(r * c.n + j)];
    }
  }
  smax::CrossEntropyOptions ce = d.ce(smax::Reduction::kNone);
  ce.grad = f64_view(gt.data(), {c.rows, c.n}, {1, c.rows});
  smax::SoftmaxOptions o;
  o.additive_mask = f64_view(mt.data(), {c.rows, c.n}, {1, c.rows});
  smax::cross_entropy(f64_view(xt.data(), {c.rows, c.n}, {1, c.rows}), d.target(),
                      f64_view(lt.data(), {c.rows}), ce, o);
  EXPECT_EQ(0, std::memcmp(l1.data(), lt.data(), lt.size() * sizeof(double)));
  for (int64_t r = 0; r < c.rows; ++r) {
    for (int64_t j = 0; j < c.n; ++j) {
      ASSERT_EQ(g1[static_cast<size_t>(r * c.n + j)], gt[static_cast<size_t>(j * c.rows + r)]);
    }
  }
  // In place, read and written directly (no mask, scale 1): the bits of a
  // separate gradient.
  {
    std::vector<double> xs = d.x, ls(static_cast<size_t>(c.rows)), gs(d.x.size()),
                        li2(static_cast<size_t>(c.rows));
    smax::CrossEntropyOptions cs = d.ce(smax::Reduction::kNone);
    cs.grad = f64_view(gs.data(), {c.rows, c.n});
    smax::cross_entropy(d.src(), d.target(), f64_view(ls.data(), {c.rows}), cs);
    smax::CrossEntropyOptions cd = d.ce(smax::Reduction::kNone);
    cd.grad = f64_view(xs.data(), {c.rows, c.n});
    smax::cross_entropy(f64_view(xs.data(), {c.rows, c.n}), d.target(),
                        f64_view(li2.data(), {c.rows}), cd);
    EXPECT_EQ(0, std::memcmp(ls.data(), li2.data(), ls.size() * sizeof(double)));
    EXPECT_EQ(0, std::memcmp(gs.data(), xs.data(), xs.size() * sizeof(double)));
  }
  // In place: the logits become their gradient.
  std::vector<double> xi = d.x, li(static_cast<size_t>(c.rows));
  smax::CrossEntropyOptions ci = d.ce(smax::Reduction::kNone);
  ci.grad = f64_view(xi.data(), {c.rows, c.n});
  smax::cross_entropy(f64_view(xi.data(), {c.rows, c.n}), d.target(), f64_view(li.data(), {c.rows}),
                      ci, d.options());
  EXPECT_EQ(0, std::memcmp(l1.data(), li.data(), li.size() * sizeof(double)));
  EXPECT_EQ(0, std::memcmp(g1.data(), xi.data(), xi.size() * sizeof(double)));
}

TEST_P(CrossEntropyF64, SpecialRowsAndNarrowOutputs) {
  // Row 0 NaN, row 1 all masked, row 2 masked target, row 3 ordinary.
  const int64_t n = 5;
  std::vector<double> x = {1, kNan, 2, 3, 4, 1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 0.5, -1, 2, 7, 1};
  std::vector<uint8_t> keep(20, 1);
  for (int j = 0; j < n; ++j) keep[static_cast<size_t>(n + j)] = 0;
  keep[static_cast<size_t>(2 * n + 3)] = 0;
  std::vector<int64_t> y = {0, 1, 3, 3};
  const int64_t shape[2] = {4, n};
  for (smax::EmptyRow policy : {smax::EmptyRow::kZero, smax::EmptyRow::kNan}) {
    smax::SoftmaxOptions o;
    o.bool_mask = smax::make_view(keep.data(), DType::kBool, 2, shape, nullptr);
    o.empty_row = policy;
    smax::CrossEntropyOptions ce;
    ce.loss.reduction = smax::Reduction::kNone;
    std::vector<double> loss(4), grad(20);
    ce.grad = f64_view(grad.data(), {4, n});
    smax::cross_entropy(f64_view(x.data(), {4, n}), smax::make_index_view(y.data(), {4}),
                        f64_view(loss.data(), {4}), ce, o);
    EXPECT_TRUE(std::isnan(loss[0]));
    for (int j = 0; j < n; ++j) EXPECT_TRUE(std::isnan(grad[static_cast<size_t>(j)]));
    if (policy == smax::EmptyRow::kNan) {
      EXPECT_TRUE(std::isnan(loss[1]));
    } else {
      EXPECT_EQ(loss[1], 0.0);
    }
    EXPECT_EQ(loss[2], kInf);  // the target is masked: -log 0
    EXPECT_EQ(grad[static_cast<size_t>(2 * n + 3)], 0.0);
    EXPECT_TRUE(std::isfinite(loss[3]));
    // An f32 loss output is the float64 loss rounded once.
    std::vector<float> loss32(4);
    smax::CrossEntropyOptions c32;
    c32.loss.reduction = smax::Reduction::kNone;
    smax::cross_entropy(f64_view(x.data(), {4, n}), smax::make_index_view(y.data(), {4}),
                        smax::make_view(loss32.data(), {4}), c32, o);
    EXPECT_EQ(loss32[3], static_cast<float>(loss[3]));
    // bf16 / f16 loss and gradient: the float64 values rounded once (no
    // double rounding through f32).
    for (DType nt : {DType::kBF16, DType::kF16}) {
      std::vector<uint16_t> loss16(4), grad16(20);
      smax::CrossEntropyOptions c16;
      c16.loss.reduction = smax::Reduction::kNone;
      const int64_t rows_shape[1] = {4};
      c16.grad = smax::make_view(grad16.data(), nt, 2, shape, nullptr);
      smax::cross_entropy(f64_view(x.data(), {4, n}), smax::make_index_view(y.data(), {4}),
                          smax::make_view(loss16.data(), nt, 1, rows_shape, nullptr), c16, o);
      // NaN == NaN here (payloads may differ).
      // (8-byte buffers: store_f64 / load_f64 switch over every dtype's size.)
      auto same = [&](uint16_t got, double v) {
        uint64_t want = 0, have = got;
        smax::detail::store_f64(&want, nt, v);
        const double g = smax::detail::load_f64(&have, nt);
        return static_cast<uint16_t>(want) == got || (std::isnan(g) && std::isnan(v));
      };
      for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(same(loss16[i], loss[i])) << smax::dtype_name(nt) << " loss " << i;
      for (size_t i = 0; i < 20; ++i) EXPECT_TRUE(same(grad16[i], grad[i])) << smax::dtype_name(nt) << " grad " << i;
    }
  }
}

SMAX_INSTANTIATE_PER_TARGET(CrossEntropyF64);

}  // namespace
}  // namespace smax_test
