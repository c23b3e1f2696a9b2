// tests/test_reweight_f64.cc: the re-weighting normalisers (SA-Softmax, the
// sigmoid and softplus normalisers, Power-Softmax, probability temperature,
// logit standardisation; forward and backward) with f64 inputs run in
// float64 arithmetic (src/ops/normalizers/reweight_f64.h), on every SIMD
// target, against long double oracles written here from the formulas of
// include/smax/normalizers.h (part 2):
//  * the "float64" bounds stated there, over rows of 1 to 32000 entries,
//    spreads up to +-600, masked entries and a scale;
//  * logits near 12345.678 (spread 0.01): rounded to f32 they lose their
//    differences, so the test fails by orders of magnitude if an op fell
//    back to f32 arithmetic;
//  * the same bits for 1 and 3 threads; f32 outputs that are the float64
//    results rounded once; NaN, +inf and all-masked rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "smax/smax.h"
#include "f64_rows.h"
#include "test_util.h"

namespace smax_test {
namespace {

using LD = long double;
using RowLD = std::vector<LD>;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kU = 0x1p-53;  // float64's unit roundoff

int64_t rows_of(const Shape& s) { return s.n > 1000 ? 2 : 3; }

bool visible(double t) { return t > -kInf; }

RowLD softmax_ld(const RowLD& u) {
  LD m = -INFINITY;
  for (LD v : u) m = std::max(m, v);
  RowLD y(u.size(), 0);
  LD S = 0;
  for (size_t i = 0; i < u.size(); ++i) {
    if (u[i] > -INFINITY) S += (y[i] = std::exp(u[i] - m));
  }
  for (LD& v : y) v /= S;
  return y;
}

// One op's call on f64 views: x [rows, n] -> out, and its row oracle: the
// wanted row and the elementwise bound, from the row t (the op's logits, in
// double: x s) and the upstream gradient g of the row.
struct RowWant {
  RowLD want, bound;
};
using Call = std::function<void(const smax::TensorView& x, const smax::TensorView& g,
                                const smax::TensorView& out, const smax::SoftmaxOptions& o)>;
using Oracle = std::function<RowWant(const std::vector<double>& t, const std::vector<double>& g)>;

// Runs `call` on every shape (data from `make`) and checks each row against
// `oracle` on the op's logits t = x * scale.
void check_op(const std::string& name, double scale, const Call& call, const Oracle& oracle,
              const std::function<std::vector<double>(const Shape&, int64_t, uint64_t)>& make,
              uint64_t seed) {
  for (const Shape& sh : f64_shapes()) {
    SCOPED_TRACE(name + " " + describe(sh));
    const int64_t rows = rows_of(sh), n = sh.n;
    std::vector<double> x = make(sh, rows, seed++);
    std::vector<double> g = normal(x.size(), seed++);
    std::vector<double> out(x.size(), kNan);
    smax::SoftmaxOptions o;
    o.scale = static_cast<float>(scale);
    call(f64_view(x.data(), {rows, n}), f64_view(g.data(), {rows, n}),
         f64_view(out.data(), {rows, n}), o);
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<double> t(x.begin() + r * n, x.begin() + (r + 1) * n);
      for (double& v : t) v *= scale;
      const std::vector<double> gr(g.begin() + r * n, g.begin() + (r + 1) * n);
      const RowWant w = oracle(t, gr);
      for (int64_t j = 0; j < n; ++j) {
        const size_t k = static_cast<size_t>(j);
        const double got = out[static_cast<size_t>(r * n + j)];
        if (!std::isfinite(w.want[k])) {  // +-inf (a one-sided limit) or NaN: exactly
          ASSERT_TRUE(got == w.want[k] || (std::isnan(got) && std::isnan(w.want[k])))
              << "row " << r << " j " << j << ": got " << got;
          continue;
        }
        ASSERT_LE(std::fabs(static_cast<LD>(got) - w.want[k]), w.bound[k])
            << "row " << r << " j " << j << ": got " << got << " want "
            << static_cast<double>(w.want[k]);
      }
    }
  }
}

std::vector<double> logits(const Shape& sh, int64_t rows, uint64_t seed) {
  return make_rows(rows, sh.n, sh.spread, sh.offset, sh.masked, seed);
}

// Probabilities: e^u for u in [-spread, 0] (near 0.5 +- 0.001 for the offset
// case), about one in eight entries exactly 0, masked ones -inf.
std::vector<double> probabilities(const Shape& sh, int64_t rows, uint64_t seed) {
  std::vector<double> x = make_rows(rows, sh.n, sh.spread, 0.0, sh.masked, seed);
  std::mt19937_64 rng(seed + 7);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] == -kInf) continue;
    x[i] = sh.offset > 0 ? 0.5 + 0.1 * x[i] : std::exp(-std::fabs(x[i]));
    if (i % static_cast<size_t>(sh.n) != 0 && unit(rng) < 1.0 / 8.0) x[i] = 0.0;
  }
  return x;
}

class ReweightF64 : public TargetTest {};

// ---- SA-Softmax ----------------------------------------------------------------------------

TEST_P(ReweightF64, SelfAdjustSoftmaxWithinTheFloat64Bound) {
  for (bool normalized : {false, true}) {
    smax::SelfAdjustOptions sa;
    sa.normalized = normalized;
    const double s = 0.5;
    auto bounds = [&](const std::vector<double>& t, LD* a, LD* c) {
      LD lo = 0, hi = 0;
      for (double v : t) {
        if (visible(v)) lo = std::min<LD>(lo, v), hi = std::max<LD>(hi, v);
      }
      *a = normalized ? lo : 0;
      *c = normalized ? (hi > lo ? 1 / (hi - lo) : 0) : 1;
    };
    auto rows = [&](const std::vector<double>& t, RowLD* p, RowLD* r) {
      RowLD u(t.begin(), t.end());
      *p = softmax_ld(u);
      LD a, c;
      bounds(t, &a, &c);
      r->assign(t.size(), 0);
      for (size_t i = 0; i < t.size(); ++i) {
        if (visible(t[i])) (*r)[i] = normalized ? (t[i] - a) * c : static_cast<LD>(t[i]);
      }
    };
    check_op(std::string("sa fwd normalized ") + (normalized ? "1" : "0"), s,
        [&](auto x, auto, auto out, auto o) { smax::self_adjust_softmax(x, out, sa, o); },
        [&](const std::vector<double>& t, const std::vector<double>&) {
          RowLD p, r;
          rows(t, &p, &r);
          RowWant w;
          for (size_t i = 0; i < t.size(); ++i) {
            w.want.push_back(r[i] * p[i]);
            w.bound.push_back(1e-14 * std::fabs(r[i] * p[i]) + 1e-300 * (1 + std::fabs(r[i])));
          }
          return w;
        },
        logits, 1);
    check_op(std::string("sa bwd normalized ") + (normalized ? "1" : "0"), s,
        [&](auto x, auto g, auto out, auto o) { smax::self_adjust_softmax_backward(x, g, out, sa, o); },
        [&](const std::vector<double>& t, const std::vector<double>& g) {
          RowLD p, r;
          rows(t, &p, &r);
          LD a, c;
          bounds(t, &a, &c);
          LD gy = 0, gp = 0, agrp = 0, agp = 0;
          for (size_t i = 0; i < t.size(); ++i) {
            gy += g[i] * r[i] * p[i], gp += g[i] * p[i];
            agrp += std::fabs(g[i] * r[i] * p[i]), agp += std::fabs(g[i] * p[i]);
          }
          // The first arg-min (t < 0) and arg-max (t > 0), normalised only.
          int64_t jmin = -1, jmax = -1;
          if (normalized && c > 0) {
            for (size_t i = 0; i < t.size(); ++i) {
              if (!visible(t[i])) continue;
              if (t[i] < 0 && (jmin < 0 || t[i] < t[static_cast<size_t>(jmin)])) jmin = static_cast<int64_t>(i);
              if (t[i] > 0 && (jmax < 0 || t[i] > t[static_cast<size_t>(jmax)])) jmax = static_cast<int64_t>(i);
            }
          }
          RowWant w;
          for (size_t i = 0; i < t.size(); ++i) {
            if (!visible(t[i])) {
              w.want.push_back(0), w.bound.push_back(0);
              continue;
            }
            const LD q = normalized ? c + r[i] : 1 + static_cast<LD>(t[i]);
            LD want = s * p[i] * (g[i] * q - gy);
            LD bound = 1e-14 * s * p[i] * (std::fabs(g[i] * q) + 2 * agrp) + 1e-300;
            if (static_cast<int64_t>(i) == jmin) want += s * c * (gy - gp);
            if (static_cast<int64_t>(i) == jmax) want -= s * c * gy;
            if (static_cast<int64_t>(i) == jmin || static_cast<int64_t>(i) == jmax) {
              bound += 1e-14 * s * c * (agrp + agp);
            }
            w.want.push_back(want);
            w.bound.push_back(bound);
          }
          return w;
        },
        logits, 11);
  }
}

// ---- sigmoid normaliser ---------------------------------------------------------------------

TEST_P(ReweightF64, SigmoidNormalizerWithinTheFloat64Bound) {
  // Default bias b = -ln n (in double: not rounded to f32), and a given one.
  for (bool given : {false, true}) {
    smax::SigmoidNormalizerOptions sig;
    if (given) sig.bias = 0.75f;
    check_op("sigmoid fwd", 0.5,
        [&](auto x, auto, auto out, auto o) { smax::sigmoid_normalizer(x, out, sig, o); },
        [&](const std::vector<double>& t, const std::vector<double>&) {
          const LD b = given ? 0.75L : -std::log(static_cast<LD>(t.size()));
          RowWant w;
          for (double v : t) {
            const LD y = visible(v) ? 1 / (1 + std::exp(-(v + b))) : 0;
            w.want.push_back(y);
            w.bound.push_back(1e-14 * y + 1e-300);
          }
          return w;
        },
        logits, 21);
  }
  // Backward from a saved y in (0, 1).
  check_op("sigmoid bwd", 0.5,
      [&](auto x, auto g, auto out, auto o) {
        std::vector<double> y(static_cast<size_t>(x.shape[0] * x.shape[1]));
        smax::SoftmaxOptions plain;
        smax::sigmoid_normalizer(x, f64_view(y.data(), {x.shape[0], x.shape[1]}), {}, plain);
        smax::sigmoid_normalizer_backward(f64_view(y.data(), {x.shape[0], x.shape[1]}), g, out, o);
      },
      [&](const std::vector<double>& t, const std::vector<double>& g) {
        // The op's own y (from x = t / 0.5 with scale 1: the same logits).
        std::vector<double> y(t.size());
        std::vector<double> x(t);
        for (double& v : x) v *= 2.0;
        smax::sigmoid_normalizer(f64_view(x.data(), {1, static_cast<int64_t>(x.size())}),
                                 f64_view(y.data(), {1, static_cast<int64_t>(y.size())}));
        RowWant w;
        for (size_t i = 0; i < t.size(); ++i) {
          const LD d = 0.5L * g[i] * y[i] * (1 - static_cast<LD>(y[i]));
          w.want.push_back(d);
          w.bound.push_back(1e-15 * std::fabs(d) + 1e-300);
        }
        return w;
      },
      logits, 31);
}

// ---- softplus normaliser ------------------------------------------------------------------------

// softplus(z) and its log and sigmoid / softplus, long double.
LD softplus_ld(LD z) { return z > 0 ? z + std::log1p(std::exp(-z)) : std::log1p(std::exp(z)); }
LD log_softplus_ld(LD z) { return z > 0 ? std::log(softplus_ld(z)) : z + std::log(std::log1p(std::exp(z)) / std::exp(z)); }
LD rho_ld(LD z) { return 1 / ((1 + std::exp(-z)) * softplus_ld(z)); }

TEST_P(ReweightF64, SoftplusNormalizerWithinTheFloat64Bound) {
  for (float power : {1.0f, 1.5f}) {
    smax::SoftplusNormalizerOptions sp;
    sp.head_dim = 64;
    sp.power = power;
    const double s = 0.5;
    // The op's z = lambda t in double, lambda = ln N / ln d in double.
    auto zs = [&](const std::vector<double>& t, double* lambda) {
      int64_t N = 0;
      for (double v : t) N += visible(v);
      *lambda = std::log(static_cast<double>(N)) / std::log(64.0);
      std::vector<double> z(t.size());
      for (size_t i = 0; i < t.size(); ++i) z[i] = t[i] * *lambda;
      return z;
    };
    auto forward = [&](const std::vector<double>& z, RowLD* L) {
      L->assign(z.size(), -INFINITY);
      RowLD u(z.size(), -INFINITY);
      for (size_t i = 0; i < z.size(); ++i) {
        if (z[i] > -kInf) (*L)[i] = log_softplus_ld(z[i]), u[i] = power * (*L)[i];
      }
      return softmax_ld(u);  // = softplus^p / sum softplus^p
    };
    // The forward's relative bound at i (sy = sum_j y_j |L_j|, once per row).
    auto sum_yl = [&](const RowLD& y, const RowLD& L) {
      LD sy = 0;
      for (size_t j = 0; j < y.size(); ++j) {
        if (y[j] > 0) sy += y[j] * std::fabs(L[j]);
      }
      return sy;
    };
    auto rel = [&](const RowLD& L, LD sy, size_t i) {
      if (power == 1.0f) return 1e-14L;
      return 1e-14L + 4 * kU * power * (1 + std::fabs(L[i]) + sy);
    };
    check_op("softplus fwd", s,
        [&](auto x, auto, auto out, auto o) { smax::softplus_normalizer(x, out, sp, o); },
        [&](const std::vector<double>& t, const std::vector<double>&) {
          double lambda;
          RowLD L;
          const RowLD y = forward(zs(t, &lambda), &L);
          const LD sy = sum_yl(y, L);
          RowWant w;
          for (size_t i = 0; i < t.size(); ++i) {
            w.want.push_back(y[i]);
            w.bound.push_back(visible(t[i]) ? rel(L, sy, i) * y[i] + 1e-300 : 0);
          }
          return w;
        },
        logits, 41);
    check_op("softplus bwd", s,
        [&](auto x, auto g, auto out, auto o) { smax::softplus_normalizer_backward(x, g, out, sp, o); },
        [&](const std::vector<double>& t, const std::vector<double>& g) {
          double lambda;
          RowLD L;
          const std::vector<double> z = zs(t, &lambda);
          const RowLD y = forward(z, &L);
          const LD sy = sum_yl(y, L);
          LD r = 0, er = 0;
          for (size_t i = 0; i < t.size(); ++i) {
            if (!visible(t[i])) continue;
            r += g[i] * y[i];
            er += rel(L, sy, i) * std::fabs(g[i] * y[i]);
          }
          RowWant w;
          for (size_t i = 0; i < t.size(); ++i) {
            if (!visible(t[i])) {
              w.want.push_back(0), w.bound.push_back(0);
              continue;
            }
            const LD f = s * lambda * power * y[i] * rho_ld(z[i]);
            const LD d = f * (g[i] - r);
            w.want.push_back(d);
            w.bound.push_back(f * (rel(L, sy, i) * std::fabs(g[i] - r) + 2 * er) +
                              10 * kU * std::fabs(d) + 1e-300);
          }
          return w;
        },
        logits, 51);
  }
}

// ---- Power-Softmax -------------------------------------------------------------------------------

TEST_P(ReweightF64, PowerSoftmaxWithinTheFloat64Bound) {
  for (int p : {2, 4, 8}) {
    const double s = 0.5;
    const LD kappa1 = std::max<LD>(1e-14L, (2 * p + 4 * std::log2(p) + 6) * kU);
    auto terms = [&](const std::vector<double>& t, LD* M, LD* S) {
      *M = 0;
      for (double v : t) {
        if (visible(v)) *M = std::max<LD>(*M, std::fabs(v));
      }
      RowLD w(t.size(), 0);
      *S = 0;
      for (size_t i = 0; i < t.size(); ++i) {
        if (visible(t[i])) *S += (w[i] = std::pow(t[i] / *M, p));
      }
      return w;
    };
    check_op("power fwd p " + std::to_string(p), s,
        [&](auto x, auto, auto out, auto o) { smax::power_softmax(x, out, p, o); },
        [&](const std::vector<double>& t, const std::vector<double>&) {
          LD M, S;
          const RowLD w = terms(t, &M, &S);
          RowWant r;
          for (LD v : w) r.want.push_back(v / S), r.bound.push_back(kappa1 * v / S + 1e-300);
          return r;
        },
        logits, 61);
    check_op("power bwd p " + std::to_string(p), s,
        [&](auto x, auto g, auto out, auto o) { smax::power_softmax_backward(x, g, out, p, o); },
        [&](const std::vector<double>& t, const std::vector<double>& g) {
          LD M, S;
          const RowLD w = terms(t, &M, &S);
          LD r = 0, gy = 0;
          for (size_t i = 0; i < t.size(); ++i) r += g[i] * w[i] / S, gy += std::fabs(g[i] * w[i] / S);
          RowWant out;
          for (size_t i = 0; i < t.size(); ++i) {
            const LD f = visible(t[i]) ? s * p / (M * S) * std::pow(t[i] / M, p - 1) : 0;
            out.want.push_back(f * (g[i] - r));
            out.bound.push_back(2 * kappa1 * std::fabs(f) * (std::fabs(g[i] - r) + gy) + 1e-300);
          }
          return out;
        },
        logits, 71);
  }
}

// ---- probability temperature -------------------------------------------------------------------

TEST_P(ReweightF64, ProbabilityTemperatureWithinTheFloat64Bound) {
  // T = 0.7: 1 / T is not exact in double, and the rounding of a = 1 / T
  // moves (p / M)^a by a u |ln(p / M)| (the bound's log terms).
  for (float T : {0.5f, 2.0f, 0.125f, 0.7f}) {
    const LD a = 1 / static_cast<LD>(T);
    // w = p^a, S = sum w, and L_i = |ln(p_i / M)| with Ly = sum_j y_j L_j.
    struct Terms {
      RowLD w, L;
      LD S = 0, Ly = 0;
    };
    auto terms = [&](const std::vector<double>& t) {
      Terms m;
      m.w.assign(t.size(), 0);
      m.L.assign(t.size(), 0);
      LD M = 0;
      for (double v : t) M = std::max<LD>(M, v);
      for (size_t i = 0; i < t.size(); ++i) {
        if (!(t[i] > 0)) continue;
        m.S += (m.w[i] = std::pow(static_cast<LD>(t[i]), a));
        m.L[i] = std::fabs(std::log(t[i] / M));
      }
      for (size_t i = 0; i < t.size(); ++i) m.Ly += m.w[i] / m.S * m.L[i];
      return m;
    };
    check_op("prob fwd T " + std::to_string(T), 1.0,
        [&](auto x, auto, auto out, auto o) { smax::probability_temperature(x, out, T, o); },
        [&](const std::vector<double>& t, const std::vector<double>&) {
          const Terms m = terms(t);
          RowWant r;
          for (size_t i = 0; i < t.size(); ++i) {
            const LD y = m.w[i] / m.S;
            r.want.push_back(y);
            r.bound.push_back((1e-14L + 2 * a * kU * (2 + m.L[i] + m.Ly)) * y + 1e-300);
          }
          return r;
        },
        probabilities, 81);
    check_op("prob bwd T " + std::to_string(T), 1.0,
        [&](auto x, auto g, auto out, auto o) { smax::probability_temperature_backward(x, g, out, T, o); },
        [&](const std::vector<double>& t, const std::vector<double>& g) {
          const Terms m = terms(t);
          auto e = [&](size_t i) { return 2e-14L + 4 * std::max<LD>(a, 1) * kU * (1 + m.L[i] + m.Ly); };
          LD r = 0, er = 0;  // <g, y> and the bound of its error
          for (size_t i = 0; i < t.size(); ++i) {
            const LD y = m.w[i] / m.S;
            r += g[i] * y;
            er += std::fabs(g[i]) * y * e(i);
          }
          RowWant out;
          for (size_t i = 0; i < t.size(); ++i) {
            if (!(t[i] > 0)) {  // masked, or p = 0 (T < 1 here or T > 1: 0 or +-inf)
              const LD f = !visible(t[i]) || a > 1 ? 0 : (a == 1 ? 1 / m.S : INFINITY);
              out.want.push_back(f == 0 ? 0 : f * (g[i] - r));
              out.bound.push_back(0);
              continue;
            }
            const LD c = a * std::pow(static_cast<LD>(t[i]), a - 1) / m.S;
            out.want.push_back(c * (g[i] - r));
            out.bound.push_back(c * (e(i) * std::fabs(g[i] - r) + 2 * er) + 1e-300);
          }
          return out;
        },
        probabilities, 91);
  }
}

// ---- logit standardisation -----------------------------------------------------------------------

TEST_P(ReweightF64, LogitStandardizationWithinTheFloat64Bound) {
  for (bool unbiased : {true, false}) {
    smax::LogitStandardizationOptions ls;
    ls.temperature = 0.5f;
    ls.unbiased = unbiased;
    const double s = 0.5, eps = static_cast<double>(ls.eps);
    struct Std {
      LD mu = 0, sigma = 0, D = 0, k = 0, sv = 0;  // sv = sum_j y_j |v_j|
      RowLD v, y;
    };
    auto forward = [&](const std::vector<double>& t) {
      Std m;
      // The mean as pivot + mean(t - pivot), pivot = t_0 (visible): the
      // differences are exact, so the oracle's own sum does not lose the
      // bits of logits far from 0.
      const LD pivot = t[0];
      int64_t N = 0;
      for (double x : t) {
        if (visible(x)) m.mu += x - pivot, ++N;
      }
      m.mu = pivot + m.mu / N;
      for (double x : t) {
        if (visible(x)) m.sigma += (x - m.mu) * (x - m.mu);
      }
      m.D = unbiased ? N - 1 : N;
      m.sigma = N > 1 ? std::sqrt(m.sigma / m.D) : 0;
      m.k = m.sigma > 0 ? 1 / ((m.sigma + eps) * ls.temperature) : 0;
      m.v.assign(t.size(), -INFINITY);
      for (size_t i = 0; i < t.size(); ++i) {
        if (visible(t[i])) m.v[i] = (t[i] - m.mu) * m.k;
      }
      m.y = softmax_ld(m.v);
      for (size_t j = 0; j < m.y.size(); ++j) {
        if (m.y[j] > 0) m.sv += m.y[j] * std::fabs(m.v[j]);
      }
      return m;
    };
    // The forward's relative bound at a visible i.
    auto rel = [&](const Std& m, size_t i) {
      return 1e-14L + 8 * kU * (std::fabs(m.v[i]) + m.sv);
    };
    check_op("standardization fwd", s,
        [&](auto x, auto, auto out, auto o) { smax::logit_standardization(x, out, ls, o); },
        [&](const std::vector<double>& t, const std::vector<double>&) {
          const Std m = forward(t);
          RowWant w;
          for (size_t i = 0; i < t.size(); ++i) {
            w.want.push_back(m.y[i]);
            w.bound.push_back(visible(t[i]) ? rel(m, i) * m.y[i] + 1e-300 : 0);
          }
          return w;
        },
        logits, 101);
    check_op("standardization bwd", s,
        [&](auto x, auto g, auto out, auto o) { smax::logit_standardization_backward(x, g, out, ls, o); },
        [&](const std::vector<double>& t, const std::vector<double>& g) {
          const Std m = forward(t);
          const size_t n = t.size();
          LD r = 0, egy = 0;
          for (size_t i = 0; i < n; ++i) {
            if (visible(t[i])) r += g[i] * m.y[i];
          }
          RowLD h(n, 0), dh(n, 0), d(n, 0);
          for (size_t i = 0; i < n; ++i) {
            if (!visible(t[i])) continue;
            h[i] = m.y[i] * (g[i] - r);
            d[i] = t[i] - m.mu;
            egy += rel(m, i) * std::fabs(g[i] * m.y[i]);
          }
          LD C = 0, dC = 0;
          const LD se = m.sigma + eps;
          for (size_t i = 0; i < n; ++i) {
            if (!visible(t[i])) continue;
            dh[i] = rel(m, i) * m.y[i] * (std::fabs(g[i]) + std::fabs(r)) + m.y[i] * egy;
            if (m.sigma > 0) C += h[i] * d[i], dC += std::fabs(d[i]) * dh[i];
          }
          if (m.sigma > 0) C /= se * m.D * m.sigma, dC /= se * m.D * m.sigma;
          RowWant w;
          for (size_t i = 0; i < n; ++i) {
            const LD want = visible(t[i]) ? s * m.k * (h[i] - d[i] * C) : 0;
            w.want.push_back(want);
            w.bound.push_back(s * m.k * (dh[i] + std::fabs(d[i]) * dC +
                                         4 * kU * (std::fabs(h[i]) + std::fabs(d[i] * C))) +
                              1e-300);
          }
          return w;
        },
        logits, 111);
  }
}

// ---- threads, f32 outputs, special rows ------------------------------------------------------------

using ForwardCall = std::function<void(const smax::TensorView&, const smax::TensorView&,
                                       const smax::SoftmaxOptions&)>;
std::vector<std::pair<std::string, ForwardCall>> forward_ops() {
  return {
      {"self_adjust_softmax", [](auto x, auto y, auto o) { smax::self_adjust_softmax(x, y, {true, true}, o); }},
      {"sigmoid_normalizer", [](auto x, auto y, auto o) { smax::sigmoid_normalizer(x, y, {}, o); }},
      {"softplus_normalizer",
       [](auto x, auto y, auto o) {
         smax::SoftplusNormalizerOptions sp;
         sp.head_dim = 64;
         smax::softplus_normalizer(x, y, sp, o);
       }},
      {"power_softmax", [](auto x, auto y, auto o) { smax::power_softmax(x, y, 4, o); }},
      {"logit_standardization", [](auto x, auto y, auto o) { smax::logit_standardization(x, y, {}, o); }},
  };
}

TEST_P(ReweightF64, ThreadsAndF32OutputsAreTheFloat64ResultRoundedOnce) {
  const int64_t rows = 33, n = 4000;  // several tasks of the fixed grid
  std::vector<double> x = make_rows(rows, n, 3.0, 0.5, true, 7);
  std::vector<double> g = normal(x.size(), 8);
  for (const auto& [name, op] : forward_ops()) {
    SCOPED_TRACE(name);
    std::vector<double> y1(x.size()), y3(x.size());
    std::vector<float> y32(x.size());
    smax::SoftmaxOptions o1, o3;
    o1.threads = 1;
    o3.threads = 3;
    op(f64_view(x.data(), {rows, n}), f64_view(y1.data(), {rows, n}), o1);
    op(f64_view(x.data(), {rows, n}), f64_view(y3.data(), {rows, n}), o3);
    EXPECT_EQ(0, std::memcmp(y1.data(), y3.data(), y1.size() * sizeof(double)));
    op(f64_view(x.data(), {rows, n}), smax::make_view(y32.data(), {rows, n}), o1);
    for (size_t i = 0; i < y32.size(); ++i) ASSERT_EQ(y32[i], static_cast<float>(y1[i])) << i;
  }
  // A backward pass with an f64 dy only: float64 arithmetic too (f32 logits).
  std::vector<float> xf(x.begin(), x.end());
  std::vector<double> a(x.size()), b(x.size());
  std::vector<double> xd(xf.begin(), xf.end());
  smax::power_softmax_backward(smax::make_view(xf.data(), {rows, n}), f64_view(g.data(), {rows, n}),
                               f64_view(a.data(), {rows, n}), 2);
  smax::power_softmax_backward(f64_view(xd.data(), {rows, n}), f64_view(g.data(), {rows, n}),
                               f64_view(b.data(), {rows, n}), 2);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(double)));
}

TEST_P(ReweightF64, SpecialRows) {
  const int64_t n = 4, rows = 3;
  const std::vector<double> x = {1.0, kNan, 2.0, -kInf,       // NaN
                                 -kInf, -kInf, -kInf, -kInf,  // all masked
                                 0.5, kInf, 0.0, 0.0};        // +inf
  for (smax::EmptyRow e : {smax::EmptyRow::kZero, smax::EmptyRow::kNan}) {
    smax::SoftmaxOptions o;
    o.empty_row = e;
    for (const auto& [name, op] : forward_ops()) {
      SCOPED_TRACE(name);
      std::vector<double> in(x), y(x.size(), 7.0);
      op(f64_view(in.data(), {rows, n}), f64_view(y.data(), {rows, n}), o);
      for (int64_t j = 0; j < n; ++j) {
        EXPECT_TRUE(std::isnan(y[static_cast<size_t>(j)])) << j;
        if (e == smax::EmptyRow::kNan) {
          EXPECT_TRUE(std::isnan(y[static_cast<size_t>(n + j)]));
        } else {
          EXPECT_EQ(y[static_cast<size_t>(n + j)], 0.0);
        }
      }
      if (name == "sigmoid_normalizer") {  // +inf -> 1, elementwise
        EXPECT_EQ(y[static_cast<size_t>(2 * n + 1)], 1.0);
      } else {
        for (int64_t j = 0; j < n; ++j) EXPECT_TRUE(std::isnan(y[static_cast<size_t>(2 * n + j)]));
      }
    }
  }
  // Softplus with one visible entry: lambda = ln 1 / ln d = 0 keeps the
  // masked z at -inf (not -inf * 0 = NaN; fuzz regression).
  {
    std::vector<double> one = {-kInf, 6.3125, -kInf}, yo(3, 7.0), dxo(3, 7.0), go = {1.0, 2.0, 3.0};
    smax::SoftplusNormalizerOptions sp;
    sp.head_dim = 64;
    smax::softplus_normalizer(f64_view(one.data(), {3}), f64_view(yo.data(), {3}), sp);
    EXPECT_EQ(yo, (std::vector<double>{0.0, 1.0, 0.0}));
    smax::softplus_normalizer_backward(f64_view(one.data(), {3}), f64_view(go.data(), {3}),
                                       f64_view(dxo.data(), {3}), sp);
    EXPECT_EQ(dxo, (std::vector<double>{0.0, 0.0, 0.0}));
  }
  // Probability temperature: a negative entry or +inf -> NaN row; all zero -> policy.
  std::vector<double> p = {0.5, -0.25, 0.25, 0.0, 0.0, 0.0, 0.0, 0.0, 0.5, kInf, 0.0, 0.0};
  std::vector<double> y(p.size(), 7.0);
  smax::probability_temperature(f64_view(p.data(), {rows, n}), f64_view(y.data(), {rows, n}), 2.0f);
  for (int64_t j = 0; j < n; ++j) {
    EXPECT_TRUE(std::isnan(y[static_cast<size_t>(j)]));
    EXPECT_EQ(y[static_cast<size_t>(n + j)], 0.0);
    EXPECT_TRUE(std::isnan(y[static_cast<size_t>(2 * n + j)]));
  }
}

// Rows at the ends of float64's range (a review's findings): no overflow,
// underflow or inf * 0 where the result is an ordinary number.
TEST_P(ReweightF64, ExtremeMagnitudes) {
  auto run1 = [](std::vector<double> x, auto&& op) {
    std::vector<double> y(x.size(), 7.0);
    op(f64_view(x.data(), {static_cast<int64_t>(x.size())}),
       f64_view(y.data(), {static_cast<int64_t>(y.size())}));
    return y;
  };
  auto run_bwd = [](std::vector<double> x, std::vector<double> g, auto&& op) {
    std::vector<double> dx(x.size(), 7.0);
    const int64_t n = static_cast<int64_t>(x.size());
    op(f64_view(x.data(), {n}), f64_view(g.data(), {n}), f64_view(dx.data(), {n}));
    return dx;
  };
  // Logit standardisation of subnormal logits, and with eps = 0 at 1e-300.
  std::vector<double> y = run1({1e-310, -1e-310}, [](auto x, auto o) { smax::logit_standardization(x, o); });
  EXPECT_NEAR(y[0], 0.5, 1e-15);
  EXPECT_NEAR(y[1], 0.5, 1e-15);
  smax::LogitStandardizationOptions tight;
  tight.eps = 0.0f;
  tight.temperature = 1e-10f;
  y = run1({1e-300, -1e-300}, [&](auto x, auto o) { smax::logit_standardization(x, o, tight); });
  EXPECT_EQ(y, (std::vector<double>{1.0, 0.0}));
  // Its backward at 1e200 (default eps) and at 1e-170 (eps = 0), against
  // long double (whose range holds every intermediate).
  for (const auto& [row, eps] : std::vector<std::pair<std::vector<double>, float>>{
           {{1e200, 0.0, -3e200}, 1e-7f}, {{1e-170, 0.0, -3e-170}, 0.0f}}) {
    smax::LogitStandardizationOptions ls;
    ls.eps = eps;
    const std::vector<double> g = {1.0, 0.0, 0.0};
    const std::vector<double> dx = run_bwd(row, g, [&](auto x, auto gv, auto d) {
      smax::logit_standardization_backward(x, gv, d, ls);
    });
    const LD mu = (static_cast<LD>(row[0]) + row[1] + row[2]) / 3;
    LD ss = 0;
    for (double v : row) ss += (v - mu) * (v - mu);
    const LD sigma = std::sqrt(ss / 2), se = sigma + static_cast<LD>(eps);
    RowLD v(3), h(3);
    for (int i = 0; i < 3; ++i) v[static_cast<size_t>(i)] = (row[static_cast<size_t>(i)] - mu) / se;
    LD m = std::max(v[0], std::max(v[1], v[2])), S = 0;
    for (LD& e : v) S += (e = std::exp(e - m));
    LD r = 0, C = 0;
    for (int i = 0; i < 3; ++i) r += g[static_cast<size_t>(i)] * v[static_cast<size_t>(i)] / S;
    for (int i = 0; i < 3; ++i) {
      h[static_cast<size_t>(i)] = v[static_cast<size_t>(i)] / S * (g[static_cast<size_t>(i)] - r);
      C += h[static_cast<size_t>(i)] * (row[static_cast<size_t>(i)] - mu);
    }
    C /= se * 2 * sigma;
    for (int i = 0; i < 3; ++i) {
      const LD want = (h[static_cast<size_t>(i)] - (row[static_cast<size_t>(i)] - mu) * C) / se;
      EXPECT_LE(std::fabs(dx[static_cast<size_t>(i)] - want), 1e-12L * std::fabs(want))
          << "eps " << eps << " i " << i << " got " << dx[static_cast<size_t>(i)];
    }
  }
  // Softplus terms near DBL_MAX (lambda = 1): the sum would overflow.
  smax::SoftplusNormalizerOptions one;
  one.lambda = 1.0f;
  y = run1({1e308, 1e308}, [&](auto x, auto o) { smax::softplus_normalizer(x, o, one); });
  EXPECT_EQ(y, (std::vector<double>{0.5, 0.5}));
  // Normalised SA-Softmax with b - a beyond DBL_MAX.
  y = run1({1e308, -1e308}, [](auto x, auto o) { smax::self_adjust_softmax(x, o, {true, true}); });
  EXPECT_NEAR(y[0], 1.0, 1e-15);
  EXPECT_EQ(y[1], 0.0);
  // Power-Softmax's and probability temperature's coefficients at M = 1e308
  // and at a subnormal M.
  std::vector<double> dx = run_bwd({1e308, -1e308}, {1e300, 0.0}, [](auto x, auto g, auto d) {
    smax::power_softmax_backward(x, g, d, 2);
  });
  EXPECT_NEAR(dx[0], 5e-9, 1e-22);
  EXPECT_NEAR(dx[1], 5e-9, 1e-22);
  dx = run_bwd({5e-324, 0.0}, {1.0, 1.0}, [](auto x, auto g, auto d) {
    smax::power_softmax_backward(x, g, d, 2);
  });
  EXPECT_EQ(dx, (std::vector<double>{0.0, 0.0}));
  dx = run_bwd({1e308, 1e308}, {1e300, 0.0}, [](auto x, auto g, auto d) {
    smax::probability_temperature_backward(x, g, d, 1.0f);
  });
  EXPECT_NEAR(dx[0], 2.5e-9, 1e-22);
  EXPECT_NEAR(dx[1], -2.5e-9, 1e-22);
  // A subnormal ratio p_1 / M with T = 2: (p / M)^(1/2 - 1) is large, not inf.
  dx = run_bwd({2.0, 5e-324}, {0.0, 1.0}, [](auto x, auto g, auto d) {
    smax::probability_temperature_backward(x, g, d, 2.0f);
  });
  {
    const LD a = 0.5L, p0 = 2.0L, p1 = static_cast<LD>(5e-324);  // the subnormal's value
    const LD S = std::pow(p0, a) + std::pow(p1, a);
    const LD r = std::pow(p1, a) / S;  // <g, y> with g = (0, 1)
    const LD want = a * std::pow(p1, a - 1) / S * (1 - r);
    EXPECT_LE(std::fabs(dx[1] - want), 1e-12L * want) << dx[1];
  }
  // The sigmoid's backward from a raw y far outside [0, 1] and a tiny scale.
  {
    std::vector<double> yv = {1e160}, gv = {1.0}, d(1);
    smax::SoftmaxOptions o;
    o.scale = 1e-30f;
    smax::sigmoid_normalizer_backward(f64_view(yv.data(), {1}), f64_view(gv.data(), {1}),
                                      f64_view(d.data(), {1}), o);
    const LD want = static_cast<LD>(1e-30f) * 1e160L * (1 - 1e160L);
    EXPECT_LE(std::fabs(d[0] - want), 1e-15L * std::fabs(want)) << d[0];
  }
}

SMAX_INSTANTIATE_PER_TARGET(ReweightF64);

}  // namespace
}  // namespace smax_test
