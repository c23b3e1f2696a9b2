// tests/test_sparse_f64.cc: the sparse normalisers (sparsemax, 1.5-entmax,
// alpha-entmax, top-k sparse softmax), their backward passes and their
// losses with f64 operands run in float64 arithmetic (Rowwise::run_native,
// src/ops/sparse/), on every SIMD target, against long double oracles written
// here from the formulas of include/smax/sparse.h (x87 80-bit: 11 more bits
// than float64):
//  * the "float64" bounds of include/smax/sparse.h for the forward outputs,
//    the backward (dx and dalpha), the losses and their gradients, over row
//    lengths 1 to 32000, spreads from 0.5 to 50, masked entries, a scale,
//    several alphas and k;
//  * logits near 12345.678 (spread 0.01): rounded to f32 they lose their
//    differences (f32's ulp there is 1e-3), so the test fails by orders of
//    magnitude if an op fell back to f32 arithmetic;
//  * the same bits for 1 and 3 threads; f32 outputs from f64 inputs that
//    are the float64 results rounded once; NaN and all-masked rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "smax/smax.h"
#include "test_util.h"

namespace smax_test {
namespace {

using smax::DType;
using LD = long double;
using RowLD = std::vector<LD>;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kU64 = 0x1p-52;  // the bounds' 2u of float64

smax::TensorView f32_view(float* p, std::vector<int64_t> shape) {
  return smax::make_view(p, DType::kF32, static_cast<int>(shape.size()), shape.data(), nullptr);
}

// ---- data -------------------------------------------------------------------------

struct Rows {
  int64_t rows = 0, n = 0;
  std::vector<double> x;  // [rows, n]; -inf = masked
  const double* row(int64_t r) const { return x.data() + r * n; }
};

// Uniform logits offset + [-spread, spread] (offset 12345.678: the f32 trap);
// `masked` hides about one entry in six (-inf), never all of a row.
Rows make_rows(int64_t rows, int64_t n, double spread, double offset, bool masked, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-spread, spread), unit(0.0, 1.0);
  Rows R{rows, n, std::vector<double>(static_cast<size_t>(rows * n))};
  for (double& v : R.x) v = offset + u(rng);
  if (masked && n > 1) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 1; j < n; ++j) {
        if (unit(rng) < 1.0 / 6.0) R.x[static_cast<size_t>(r * n + j)] = -kInf;
      }
    }
  }
  return R;
}

// ---- long double oracles on one row (t: the row's logits, -inf masked) ----------

LD row_max(const double* t, int64_t n) {
  LD m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) m = std::max<LD>(m, t[i]);
  return m;
}

// Visible d_i = t_i - m (exact in long double for float64 inputs within 2^11
// of each other's exponent; the rows here are), sorted descending.
RowLD sorted_d(const double* t, int64_t n, LD m) {
  RowLD d;
  for (int64_t i = 0; i < n; ++i) {
    if (t[i] > -kInf) d.push_back(static_cast<LD>(t[i]) - m);
  }
  std::sort(d.begin(), d.end(), std::greater<LD>());
  return d;
}

RowLD sparsemax_ld(const double* t, int64_t n) {
  const LD m = row_max(t, n);
  const RowLD a = sorted_d(t, n, m);
  LD cum = 0, tau = 0;
  for (size_t k = 0; k < a.size(); ++k) {
    cum += a[k];
    if (1 + static_cast<LD>(k + 1) * a[k] > cum) tau = (cum - 1) / static_cast<LD>(k + 1);
  }
  RowLD y(static_cast<size_t>(n), 0);
  for (int64_t i = 0; i < n; ++i) {
    if (t[i] > -kInf) y[static_cast<size_t>(i)] = std::max<LD>(t[i] - m - tau, 0);
  }
  return y;
}

// The exact sort algorithm (Peters et al. 2019) on z = (t - m) / 2.
RowLD entmax15_ld(const double* t, int64_t n) {
  const LD m = row_max(t, n);
  RowLD z = sorted_d(t, n, m);
  for (LD& v : z) v /= 2;
  LD c1 = 0, c2 = 0, tau_star = 0;
  for (size_t k = 0; k < z.size(); ++k) {
    c1 += z[k];
    c2 += z[k] * z[k];
    const LD kk = static_cast<LD>(k + 1), mu = c1 / kk;
    const LD ss = kk * (c2 / kk - mu * mu);
    const LD tau = mu - std::sqrt(std::max<LD>((1 - ss) / kk, 0));
    if (tau <= z[k]) tau_star = tau;
  }
  RowLD y(static_cast<size_t>(n), 0);
  for (int64_t i = 0; i < n; ++i) {
    if (t[i] > -kInf) {
      const LD v = std::max<LD>((t[i] - m) / 2 - tau_star, 0);
      y[static_cast<size_t>(i)] = v * v;
    }
  }
  return y;
}

// The bisection of include/smax/sparse.h (EntmaxBisectOptions): the same
// float64 sequence of tau_lo, dm and tau_m as the op, the mass at each
// tau_m in long double, the output at the last tau_m in long double.
RowLD bisect_ld(const double* t, int64_t n, double alpha, int n_iter, bool ensure_sum_one) {
  const LD m = row_max(t, n);
  const LD am1 = static_cast<LD>(alpha) - 1, p = 1 / am1;
  auto mass = [&](double tau, RowLD* out) {
    LD s = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (!(t[i] > -kInf)) continue;
      const LD v = am1 * (t[i] - m) - tau;
      const LD y = v > 0 ? std::pow(v, p) : 0;
      if (out) (*out)[static_cast<size_t>(i)] = y;
      s += y;
    }
    return s;
  };
  double tau_lo = -1.0;
  const double tau_hi = -std::pow(1.0 / static_cast<double>(n), alpha - 1.0);
  double dm = tau_hi - tau_lo, tau_m = tau_lo;
  for (int it = 0; it < n_iter; ++it) {
    dm /= 2;
    tau_m = tau_lo + dm;
    if (tau_m == tau_lo) break;
    if (mass(tau_m, nullptr) - 1 >= 0) tau_lo = tau_m;
  }
  RowLD y(static_cast<size_t>(n), 0);
  const LD s = mass(tau_m, &y);
  if (ensure_sum_one) {
    for (LD& v : y) v /= s;
  }
  return y;
}

// Top-k softmax: the k largest visible entries (ties: lower index first),
// plus `force` when >= 0 and visible.
RowLD topk_ld(const double* t, int64_t n, int64_t k, int64_t force) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return t[a] > t[b]; });
  std::vector<char> kept(static_cast<size_t>(n), 0);
  for (int64_t r = 0; r < std::min(k, n); ++r) kept[static_cast<size_t>(order[r])] = 1;
  if (force >= 0) kept[static_cast<size_t>(force)] = 1;
  const LD m = row_max(t, n);
  RowLD y(static_cast<size_t>(n), 0);
  LD s = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (kept[static_cast<size_t>(i)] && t[i] > -kInf) {
      y[static_cast<size_t>(i)] = std::exp(static_cast<LD>(t[i]) - m);
      s += y[static_cast<size_t>(i)];
    }
  }
  for (LD& v : y) v /= s;
  return y;
}

// ---- the ops under test -------------------------------------------------------------

enum class Op { kSparsemax, kEntmax15, kBisect, kTopK };
struct OpCase {
  Op op;
  double alpha = 2.0;  // kBisect
  bool ensure = false;
  int64_t k = 0;  // kTopK
  std::string name() const {
    switch (op) {
      case Op::kSparsemax: return "sparsemax";
      case Op::kEntmax15: return "entmax15";
      case Op::kBisect:
        return "entmax_bisect alpha " + std::to_string(alpha) + (ensure ? " ensure" : "");
      case Op::kTopK: return "sparse_softmax k " + std::to_string(k);
    }
    return "";
  }
  // p of the bound (1 for sparsemax and top-k, 2 for entmax15, 1/(alpha-1)).
  double power() const {
    if (op == Op::kEntmax15) return 2.0;
    if (op == Op::kBisect) return 1.0 / (alpha - 1.0);
    return 1.0;
  }
};

RowLD oracle(const OpCase& c, const double* t, int64_t n) {
  switch (c.op) {
    case Op::kSparsemax: return sparsemax_ld(t, n);
    case Op::kEntmax15: return entmax15_ld(t, n);
    case Op::kBisect: return bisect_ld(t, n, c.alpha, 50, c.ensure);
    case Op::kTopK: return topk_ld(t, n, c.k, -1);
  }
  return {};
}

// The oracles do not depend on the SIMD target: each (case, data, row) is
// computed once per process (the tests run on every target).
template <class V>
const V& memo(const std::string& key, const std::function<V()>& compute) {
  static std::map<std::string, V> cache;
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, compute()).first;
  return it->second;
}

void run_forward(const OpCase& c, const smax::TensorView& src, const smax::TensorView& dst,
                 const smax::SoftmaxOptions& o = {}) {
  switch (c.op) {
    case Op::kSparsemax: smax::sparsemax(src, dst, o); break;
    case Op::kEntmax15: smax::entmax15(src, dst, o); break;
    case Op::kBisect: {
      smax::EntmaxBisectOptions p;
      p.alpha = static_cast<float>(c.alpha);
      p.ensure_sum_one = c.ensure;
      smax::entmax_bisect(src, dst, p, o);
      break;
    }
    case Op::kTopK: smax::sparse_softmax(src, dst, c.k, o); break;
  }
}

// The forward bound of include/smax/sparse.h, "float64".
double forward_bound(const OpCase& c, LD want, int64_t n) {
  const double y = static_cast<double>(want);
  if (c.op == Op::kTopK) return 1e-14 * std::fabs(y) + 1e-300;
  return kU64 * std::fabs(y) + 1e-16 * (64.0 + static_cast<double>(n)) * std::max(1.0, c.power());
}

std::vector<OpCase> forward_cases(int64_t n) {
  std::vector<OpCase> v = {{Op::kSparsemax}, {Op::kEntmax15}};
  for (double a : {1.25, 1.5, 2.0}) v.push_back({Op::kBisect, a, false});
  v.push_back({Op::kBisect, 1.75, true});
  for (int64_t k : {int64_t{1}, int64_t{5}, n / 2}) {
    if (k >= 1 && k < n) v.push_back({Op::kTopK, 2.0, false, k});
  }
  return v;
}

class SparseF64 : public TargetTest {};

TEST_P(SparseF64, ForwardWithinTheFloat64Bound) {
  uint64_t seed = 11;
  for (int64_t n : std::vector<int64_t>{1, 2, 7, 100, 1000, 32000}) {
    for (const auto& [spread, offset, masked] :
         std::vector<std::tuple<double, double, bool>>{{0.5, 0.0, false},
                                                        {3.0, 0.0, true},
                                                        {50.0, -20.0, false},
                                                        {0.01, 12345.678, false}}) {
      const int64_t rows = n > 1000 ? 2 : 4;
      const Rows R = make_rows(rows, n, spread, offset, masked, seed++);
      for (const OpCase& c : forward_cases(n)) {
        SCOPED_TRACE(c.name() + " n " + std::to_string(n) + " spread " + std::to_string(spread) +
                     " offset " + std::to_string(offset));
        std::vector<double> x = R.x, y(x.size(), kNan);
        run_forward(c, f64_view(x.data(), {rows, n}), f64_view(y.data(), {rows, n}));
        for (int64_t r = 0; r < rows; ++r) {
          const RowLD& want = memo<RowLD>(
              c.name() + " " + std::to_string(seed) + " " + std::to_string(r),
              [&] { return oracle(c, R.row(r), n); });
          for (int64_t j = 0; j < n; ++j) {
            const LD w = want[static_cast<size_t>(j)];
            const double got = y[static_cast<size_t>(r * n + j)];
            ASSERT_LE(std::fabs(static_cast<LD>(got) - w), forward_bound(c, w, n))
                << "row " << r << " j " << j << " got " << got << " want "
                << static_cast<double>(w);
          }
        }
      }
    }
  }
}

// A scale and an additive mask: the op's logits are t = fl(fl(x s) + mask)
// in double (the oracle reads those same doubles).
TEST_P(SparseF64, ScaleAndAdditiveMaskFormLogitsInDouble) {
  const int64_t rows = 3, n = 300;
  const Rows R = make_rows(rows, n, 4.0, 1000.0, false, 5);
  const Rows M = make_rows(rows, n, 1.0, 0.0, true, 6);
  const double s = 0.3;
  std::vector<double> t(R.x.size());
  for (size_t i = 0; i < t.size(); ++i) t[i] = R.x[i] * s + M.x[i];
  for (const OpCase& c : forward_cases(n)) {
    SCOPED_TRACE(c.name());
    std::vector<double> x = R.x, mask = M.x, y(x.size());
    smax::SoftmaxOptions o;
    o.scale = static_cast<float>(s);
    o.temperature = 1.0f;
    // scale is an f32 option: the op's s is double(float(0.3)).
    for (size_t i = 0; i < t.size(); ++i) {
      t[i] = R.x[i] * static_cast<double>(static_cast<float>(s)) + M.x[i];
    }
    o.additive_mask = f64_view(mask.data(), {rows, n});
    run_forward(c, f64_view(x.data(), {rows, n}), f64_view(y.data(), {rows, n}), o);
    for (int64_t r = 0; r < rows; ++r) {
      const RowLD want = oracle(c, t.data() + r * n, n);
      for (int64_t j = 0; j < n; ++j) {
        const LD w = want[static_cast<size_t>(j)];
        ASSERT_LE(std::fabs(static_cast<LD>(y[static_cast<size_t>(r * n + j)]) - w),
                  forward_bound(c, w, n))
            << "row " << r << " j " << j;
      }
    }
  }
}

// ---- backward -----------------------------------------------------------------------

struct BackwardWant {
  RowLD dx;
  LD dalpha = 0;
  double dx_mag = 0;  // s G of the bound (per row)
  std::vector<double> w;
  double dalpha_mag = 0;  // M of the dalpha bound
};

// dx = s w (g - q), w = y^(2 - alpha) on y > 0, q = <g,w> / sum w; dalpha
// as include/smax/sparse.h (entmax_bisect_backward).
BackwardWant backward_ld(const double* y, const double* g, int64_t n, double alpha, double s) {
  BackwardWant b;
  b.dx.assign(static_cast<size_t>(n), 0);
  b.w.assign(static_cast<size_t>(n), 0);
  LD sw = 0, gw = 0, gy = 0, gS = 0, H = 0, gabs = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!(y[i] > 0)) continue;
    const LD yi = y[i];
    const LD w = alpha == 2.0 ? 1 : std::pow(yi, static_cast<LD>(2) - static_cast<LD>(alpha));
    const LD S = yi * std::log(yi);
    b.w[static_cast<size_t>(i)] = static_cast<double>(w);
    sw += w;
    gw += g[i] * w;
    gy += g[i] * yi;
    gS += g[i] * S;
    H += S;
    gabs += std::fabs(g[i]) * w;
  }
  const LD q = gw / sw;
  for (int64_t i = 0; i < n; ++i) b.dx[static_cast<size_t>(i)] = s * b.w[static_cast<size_t>(i)] * (g[i] - q);
  b.dx_mag = std::fabs(s) * static_cast<double>(gabs / sw);
  const LD am1 = static_cast<LD>(alpha) - 1;
  b.dalpha = (gy - q) / (am1 * am1) - (gS - q * H) / am1;
  for (int64_t i = 0; i < n; ++i) {
    if (!(y[i] > 0)) continue;
    const double pt = b.w[static_cast<size_t>(i)] / static_cast<double>(sw);
    const double S = y[i] * std::log(y[i]);
    b.dalpha_mag += std::fabs(g[i]) * ((y[i] + pt) / static_cast<double>(am1 * am1) +
                                       (std::fabs(S) + pt * std::fabs(static_cast<double>(H))) /
                                           std::fabs(static_cast<double>(am1)));
  }
  return b;
}

TEST_P(SparseF64, BackwardWithinTheFloat64Bound) {
  uint64_t seed = 101;
  for (int64_t n : std::vector<int64_t>{1, 7, 100, 1000, 32000}) {
    for (double alpha : {2.0, 1.5, 1.25, 3.0}) {
      const int64_t rows = n > 1000 ? 2 : 4;
      // y from the op itself (an f64 forward), dy standard normal.
      const Rows R = make_rows(rows, n, 2.0, 0.0, true, seed++);
      std::vector<double> x = R.x, y(x.size()), g(x.size()), dx(x.size(), kNan);
      std::mt19937_64 rng(seed++);
      std::normal_distribution<double> normal;
      for (double& v : g) v = normal(rng);
      smax::EntmaxBisectOptions p;
      p.alpha = static_cast<float>(alpha);
      smax::entmax_bisect(f64_view(x.data(), {rows, n}), f64_view(y.data(), {rows, n}), p);
      std::vector<double> dalpha(static_cast<size_t>(rows), kNan);
      smax::SoftmaxOptions o;
      o.scale = 0.7f;
      const double s_op = static_cast<double>(0.7f);  // the op's s: double(scale)
      if (alpha == 2.0) {
        smax::sparsemax_backward(f64_view(y.data(), {rows, n}), f64_view(g.data(), {rows, n}),
                                 f64_view(dx.data(), {rows, n}), o);
      } else if (alpha == 1.5) {
        smax::entmax15_backward(f64_view(y.data(), {rows, n}), f64_view(g.data(), {rows, n}),
                                f64_view(dx.data(), {rows, n}), o);
      } else {
        smax::entmax_bisect_backward(f64_view(y.data(), {rows, n}), f64_view(g.data(), {rows, n}),
                                     f64_view(dx.data(), {rows, n}),
                                     f64_view(dalpha.data(), {rows}), p, o);
      }
      for (int64_t r = 0; r < rows; ++r) {
        SCOPED_TRACE("n " + std::to_string(n) + " alpha " + std::to_string(alpha) + " row " +
                     std::to_string(r));
        const BackwardWant b = backward_ld(y.data() + r * n, g.data() + r * n, n, alpha, s_op);
        const double eq = 1e-15 * (static_cast<double>(n) + 750.0 * (1.0 + std::fabs(2.0 - alpha)));
        for (int64_t j = 0; j < n; ++j) {
          const LD w = b.dx[static_cast<size_t>(j)];
          const double bound = kU64 * std::fabs(static_cast<double>(w)) +
                               eq * b.w[static_cast<size_t>(j)] * b.dx_mag + 1e-300;
          ASSERT_LE(std::fabs(static_cast<LD>(dx[static_cast<size_t>(r * n + j)]) - w), bound)
              << "j " << j;
        }
        if (alpha != 2.0 && alpha != 1.5) {
          const LD want = b.dalpha;
          EXPECT_LE(std::fabs(static_cast<LD>(dalpha[static_cast<size_t>(r)]) - want),
                    1e-14 * (1.0 + std::fabs(static_cast<double>(want))) +
                        4e-16 * (static_cast<double>(n) + 16.0) * b.dalpha_mag)
              << "dalpha " << dalpha[static_cast<size_t>(r)] << " want "
              << static_cast<double>(want);
        }
      }
    }
  }
}

// ---- losses -------------------------------------------------------------------------

// Per-row loss of the Fenchel-Young losses ((1 - sum p^alpha) / (alpha
// (alpha - 1)) + <p, t - m> + (m - t_target)) and of the top-k loss (m + log
// sum_K e^(t - m) - t_target), and p (the gradient is p - e_target).
struct LossWant {
  LD loss = 0;
  RowLD p;
};
LossWant loss_ld(const OpCase& c, const double* t, int64_t n, int64_t target) {
  LossWant L;
  const LD m = row_max(t, n);
  if (c.op == Op::kTopK) {
    L.p = topk_ld(t, n, c.k, -1);
    LD s = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (L.p[static_cast<size_t>(i)] > 0) s += std::exp(static_cast<LD>(t[i]) - m);
    }
    L.loss = (m - t[target]) + std::log(s);
    return L;
  }
  OpCase normalised = c;  // the losses' alpha-entmax renormalises p (ensure_sum_one)
  normalised.ensure = true;
  L.p = oracle(normalised, t, n);
  const LD alpha = c.op == Op::kSparsemax ? 2 : c.op == Op::kEntmax15 ? 1.5L : c.alpha;
  LD spa = 0, pd = 0;
  for (int64_t i = 0; i < n; ++i) {
    const LD p = L.p[static_cast<size_t>(i)];
    if (p > 0) {
      spa += std::pow(p, alpha);
      pd += p * (t[i] - m);
    }
  }
  L.loss = (1 - spa) / (alpha * (alpha - 1)) + pd + (m - t[target]);
  return L;
}

void run_loss(const OpCase& c, double* x, int64_t rows, int64_t n, int64_t* target, double* out,
              double* dx, double* dloss, const smax::LossOptions& lo) {
  const auto src = f64_view(x, {rows, n});
  const auto tv = smax::make_index_view(target, {rows});
  smax::EntmaxBisectOptions p;
  p.alpha = static_cast<float>(c.alpha);
  p.ensure_sum_one = c.ensure;
  switch (c.op) {
    case Op::kSparsemax:
      smax::sparsemax_loss(src, tv, f64_view(out, {rows}), lo);
      smax::sparsemax_loss_backward(src, tv, f64_view(dloss, {rows}), f64_view(dx, {rows, n}), lo);
      break;
    case Op::kEntmax15:
      smax::entmax15_loss(src, tv, f64_view(out, {rows}), lo);
      smax::entmax15_loss_backward(src, tv, f64_view(dloss, {rows}), f64_view(dx, {rows, n}), lo);
      break;
    case Op::kBisect:
      smax::entmax_bisect_loss(src, tv, f64_view(out, {rows}), p, lo);
      smax::entmax_bisect_loss_backward(src, tv, f64_view(dloss, {rows}), f64_view(dx, {rows, n}),
                                        p, lo);
      break;
    case Op::kTopK:
      smax::sparse_softmax_loss(src, tv, f64_view(out, {rows}), c.k, {}, lo);
      smax::sparse_softmax_loss_backward(src, tv, f64_view(dloss, {rows}),
                                         f64_view(dx, {rows, n}), c.k, {}, lo);
      break;
  }
}

TEST_P(SparseF64, LossesAndGradientsWithinTheFloat64Bound) {
  uint64_t seed = 501;
  for (int64_t n : std::vector<int64_t>{2, 7, 100, 1000, 32000}) {
    for (const auto& [spread, offset] :
         std::vector<std::pair<double, double>>{{0.5, 0.0}, {20.0, 0.0}, {0.01, 12345.678}}) {
      const int64_t rows = n > 1000 ? 2 : 4;
      const Rows R = make_rows(rows, n, spread, offset, false, seed++);
      std::vector<int64_t> target(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) target[static_cast<size_t>(r)] = (r * 7919 + 3) % n;
      std::vector<OpCase> cases = {{Op::kSparsemax}, {Op::kEntmax15}, {Op::kBisect, 1.25}};
      if (n > 2) cases.push_back({Op::kTopK, 2.0, false, n / 2});
      for (const OpCase& c : cases) {
        SCOPED_TRACE(c.name() + " n " + std::to_string(n) + " spread " + std::to_string(spread) +
                     " offset " + std::to_string(offset));
        std::vector<double> x = R.x, loss(static_cast<size_t>(rows), kNan), dx(x.size(), kNan);
        std::vector<double> dloss(static_cast<size_t>(rows));
        for (int64_t r = 0; r < rows; ++r) dloss[static_cast<size_t>(r)] = 0.5 + 0.25 * r;
        smax::LossOptions lo;
        lo.reduction = smax::Reduction::kNone;
        run_loss(c, x.data(), rows, n, target.data(), loss.data(), dx.data(), dloss.data(), lo);
        const double A = 1e-16 * (64.0 + static_cast<double>(n)) * std::max(1.0, c.power());
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t tg = target[static_cast<size_t>(r)];
          const LossWant& L = memo<LossWant>(
              c.name() + " " + std::to_string(seed) + " " + std::to_string(r),
              [&] { return loss_ld(c, R.row(r), n, tg); });
          const double bound = 1e-14 * (1.0 + std::fabs(static_cast<double>(L.loss)));
          EXPECT_LE(std::fabs(static_cast<LD>(loss[static_cast<size_t>(r)]) - L.loss), bound)
              << "row " << r << " loss " << loss[static_cast<size_t>(r)] << " want "
              << static_cast<double>(L.loss);
          const double cs = dloss[static_cast<size_t>(r)];
          for (int64_t j = 0; j < n; ++j) {
            const LD want = cs * (L.p[static_cast<size_t>(j)] - (j == tg ? 1 : 0));
            const double got = dx[static_cast<size_t>(r * n + j)];
            const double b = c.op == Op::kTopK
                                 ? 1e-14 * (std::fabs(static_cast<double>(want)) + cs) + 1e-300
                                 : kU64 * std::fabs(static_cast<double>(want)) + cs * A;
            ASSERT_LE(std::fabs(static_cast<LD>(got) - want), b)
                << "row " << r << " j " << j << " got " << got << " want "
                << static_cast<double>(want);
          }
        }
      }
    }
  }
}

// Per-row alpha read in its own dtype: an f64 alpha of 1 + 1e-10 is > 1
// (rounded to f32 it would be 1, rejected), and the rows use it exactly.
TEST_P(SparseF64, Float64AlphaTensorIsReadExactly) {
  const int64_t rows = 2, n = 50;
  const Rows R = make_rows(rows, n, 0.002, 0.0, false, 3);
  std::vector<double> x = R.x, y(x.size()), alpha = {1.0 + 1e-10, 1.75};
  smax::EntmaxBisectOptions p;
  p.alpha_tensor = f64_view(alpha.data(), {rows, 1});
  smax::entmax_bisect(f64_view(x.data(), {rows, n}), f64_view(y.data(), {rows, n}), p);
  const RowLD want = bisect_ld(R.row(1), n, 1.75, 50, false);
  for (int64_t j = 0; j < n; ++j) {
    EXPECT_LE(std::fabs(static_cast<LD>(y[static_cast<size_t>(n + j)]) - want[static_cast<size_t>(j)]),
              forward_bound({Op::kBisect, 1.75}, want[static_cast<size_t>(j)], n));
  }
  double sum = 0.0;
  for (int64_t j = 0; j < n; ++j) sum += y[static_cast<size_t>(j)];
  EXPECT_NEAR(sum, 1.0, 1e-6);  // alpha -> 1: close to a softmax of near-equal logits
  alpha[0] = 1.0;
  EXPECT_TRUE(throws_invalid(
      [&] { smax::entmax_bisect(f64_view(x.data(), {rows, n}), f64_view(y.data(), {rows, n}), p); },
      "alpha_tensor element 0 must be finite and > 1"));
}

// ---- bits, narrow outputs, special rows ---------------------------------------------

TEST_P(SparseF64, ThreadsAndF32OutputsAreTheFloat64ResultRoundedOnce) {
  // 33 x 4000 elements: several tasks of the fixed grid (65536 elements each).
  const int64_t rows = 33, n = 4000;
  const Rows R = make_rows(rows, n, 3.0, 100.0, true, 77);
  for (const OpCase& c : forward_cases(n)) {
    SCOPED_TRACE(c.name());
    std::vector<double> x = R.x, y1(x.size()), y3(x.size());
    smax::SoftmaxOptions o1, o3;
    o1.threads = 1;
    o3.threads = 3;
    run_forward(c, f64_view(x.data(), {rows, n}), f64_view(y1.data(), {rows, n}), o1);
    run_forward(c, f64_view(x.data(), {rows, n}), f64_view(y3.data(), {rows, n}), o3);
    ASSERT_EQ(0, std::memcmp(y1.data(), y3.data(), y1.size() * sizeof(double)));
    std::vector<float> y32(x.size());
    run_forward(c, f64_view(x.data(), {rows, n}), f32_view(y32.data(), {rows, n}));
    for (size_t i = 0; i < y32.size(); ++i) {
      ASSERT_EQ(y32[i], static_cast<float>(y1[i])) << "i " << i;
    }
    // In place (dst = src) gives the same bits.
    run_forward(c, f64_view(x.data(), {rows, n}), f64_view(x.data(), {rows, n}));
    ASSERT_EQ(0, std::memcmp(x.data(), y1.data(), y1.size() * sizeof(double)));
  }
}

TEST_P(SparseF64, SpecialRows) {
  const int64_t n = 5;
  std::vector<double> x = {1.0, kNan, 2.0, 0.0, 1.0,          // NaN
                           -kInf, -kInf, -kInf, -kInf, -kInf,  // all masked
                           0.5, kInf, 0.0, 0.0, 0.0,           // +inf
                           3.0, -kInf, 3.0, -kInf, 1.0};       // masked entries
  const int64_t rows = 4;
  for (const OpCase& c : forward_cases(n)) {
    for (smax::EmptyRow e : {smax::EmptyRow::kZero, smax::EmptyRow::kNan}) {
      SCOPED_TRACE(c.name());
      std::vector<double> y(x.size(), 7.0);
      smax::SoftmaxOptions o;
      o.empty_row = e;
      run_forward(c, f64_view(x.data(), {rows, n}), f64_view(y.data(), {rows, n}), o);
      for (int64_t j = 0; j < n; ++j) {
        EXPECT_TRUE(std::isnan(y[static_cast<size_t>(j)]));
        EXPECT_TRUE(std::isnan(y[static_cast<size_t>(2 * n + j)]));
        if (e == smax::EmptyRow::kNan) {
          EXPECT_TRUE(std::isnan(y[static_cast<size_t>(n + j)]));
        } else {
          EXPECT_EQ(y[static_cast<size_t>(n + j)], 0.0);
        }
      }
      const RowLD want = oracle(c, x.data() + 3 * n, n);
      for (int64_t j = 0; j < n; ++j) {
        EXPECT_NEAR(y[static_cast<size_t>(3 * n + j)], static_cast<double>(want[static_cast<size_t>(j)]),
                    1e-15);
      }
      EXPECT_EQ(y[static_cast<size_t>(3 * n + 1)], 0.0);
      EXPECT_EQ(y[static_cast<size_t>(3 * n + 3)], 0.0);
    }
  }
}

SMAX_INSTANTIATE_PER_TARGET(SparseF64);

}  // namespace
}  // namespace smax_test
