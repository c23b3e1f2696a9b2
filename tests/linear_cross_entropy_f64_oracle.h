// tests/linear_cross_entropy_f64_oracle.h: the data and the long double
// oracle of tests/test_linear_cross_entropy_f64.cc, written from the
// formulas and the "float64" bounds of include/smax/linear_cross_entropy.h
// (x87 80-bit long double: 11 more bits than float64).
//
// Oracle: z_rj = sum_k h_rk w_jk + b_j, u = z s (s = double(scale) /
// double(temperature), the library's multiplier), t = softcap tanh(u /
// softcap), then cross_entropy's formulas and the gradients dz, dhidden =
// dz W, dweight = dz^T H, dbias = sum_r dz_r, all in long double from the
// f64 inputs. Bounds (the header's "float64" paragraph): per row
//   E_r = s (D + 3) 2^-53 max_j (sum_k |h_rk w_jk| + |b_j|)  (the GEMM's)
//   F = 1 + softcap + (1 + 1 / softcap) max_j |u_rj| with a softcap, else 1
// and the loss / lse / entropy / target_logprob / z-loss / gradient bounds
// built from them below.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "smax/smax.h"
#include "test_util.h"

namespace smax_test {
namespace lce64 {

using LD = long double;
using smax::EmptyRow;
using smax::Reduction;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kUnit = 1e-14;     // the float64 bounds' constant
constexpr double kU = 0x1p-53;      // float64's unit roundoff

struct LceCase {
  int64_t N = 6, D = 16, V = 50;
  double h_scale = 1.0, w_scale = 0.5;
  // b_j = b_shift + b_ramp j + b_scale * normal; `masked` classes get -inf.
  double b_scale = 1.0, b_shift = 0.0, b_ramp = 0.0;
  bool bias = true, weights = false, ignore = false;
  int masked = 0;
  float a = 0.0f, zs = 0.0f, cap = 0.0f, scale = 1.0f, temperature = 1.0f;
  Reduction red = Reduction::kNone;
  EmptyRow empty_row = EmptyRow::kZero;
  int64_t token_chunk = 0, vocab_chunk = 0;
  int threads = 0;
  uint64_t seed = 1;
};

// The inputs of a case (f64) and the library's views and options.
struct LceData {
  LceCase c;
  std::vector<double> h, w, b, cw, dloss;
  std::vector<int64_t> y;
  explicit LceData(const LceCase& cs) : c(cs) {
    std::mt19937_64 rng(c.seed);
    std::normal_distribution<double> normal(0.0, 1.0);
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    h.resize(static_cast<size_t>(c.N * c.D));
    w.resize(static_cast<size_t>(c.V * c.D));
    for (double& v : h) v = c.h_scale * normal(rng);
    for (double& v : w) v = c.w_scale * normal(rng);
    b.resize(static_cast<size_t>(c.V));
    for (int64_t j = 0; j < c.V; ++j) {
      b[static_cast<size_t>(j)] = c.b_shift + c.b_ramp * static_cast<double>(j) + c.b_scale * normal(rng);
    }
    for (int k = 0; k < c.masked && c.V > 1; ++k) {
      b[static_cast<size_t>((k * 7 + 3) % c.V)] = -kInf;
    }
    if (c.weights) {
      cw.resize(static_cast<size_t>(c.V));
      for (double& v : cw) v = 0.25 + 1.75 * unit(rng);
    }
    y.resize(static_cast<size_t>(c.N));
    for (int64_t r = 0; r < c.N; ++r) {
      int64_t t = c.V > 0 ? static_cast<int64_t>(unit(rng) * static_cast<double>(c.V)) % c.V : -100;
      for (int64_t k = 0; c.V > 0 && k < c.V && b[static_cast<size_t>(t)] == -kInf; ++k) t = (t + 1) % c.V;
      y[static_cast<size_t>(r)] = (c.ignore && r % 3 == 1) || c.V == 0 ? -100 : t;
    }
    dloss.resize(c.red == Reduction::kNone ? static_cast<size_t>(c.N) : 1);
    for (double& v : dloss) v = 2.0 * unit(rng) - 0.5;
  }
  double s() const { return static_cast<double>(c.scale) / static_cast<double>(c.temperature); }
  smax::TensorView hidden() { return f64_view(h.data(), {c.N, c.D}); }
  smax::TensorView weight() { return f64_view(w.data(), {c.V, c.D}); }
  smax::TensorView target() { return smax::make_index_view(y.data(), {c.N}); }
  std::optional<smax::TensorView> bias() {
    if (!c.bias && c.masked == 0) return std::nullopt;
    return f64_view(b.data(), {c.V});
  }
  smax::TensorView dloss_view() {
    if (c.red == Reduction::kNone) return f64_view(dloss.data(), {c.N});
    return f64_view(dloss.data(), {});
  }
  smax::CrossEntropyOptions ce() {
    smax::CrossEntropyOptions o;
    o.loss.reduction = c.red;
    if (c.weights) o.loss.weight = f64_view(cw.data(), {c.V});
    o.label_smoothing = c.a;
    o.lse_square_scale = c.zs;
    o.softcap = c.cap;
    return o;
  }
  smax::LinearCrossEntropyOptions lce() const {
    smax::LinearCrossEntropyOptions o;
    o.token_chunk = c.token_chunk;
    o.vocab_chunk = c.vocab_chunk;
    return o;
  }
  smax::SoftmaxOptions options() const {
    smax::SoftmaxOptions o;
    o.scale = c.scale;
    o.temperature = c.temperature;
    o.empty_row = c.empty_row;
    o.threads = c.threads;
    return o;
  }
  bool has_bias() const { return c.bias || c.masked > 0; }
  double cwt(int64_t j) const { return c.weights ? cw[static_cast<size_t>(j)] : 1.0; }
  bool active(int64_t r) const { return y[static_cast<size_t>(r)] >= 0; }
};

// One row of the oracle: values and the magnitudes their bounds scale.
struct RowRef {
  bool empty = false;
  LD L = 0, loss = 0, z = 0, H = 0, tlp = 0;
  double E = 0, F = 1, M = 0, wy = 0, ty = 0, tmax = 0, sum_pt = 0;
  int64_t argmax = 0;
  double gap = kInf;  // max u - the second largest u (distinct index)
  // Bounds.
  double b_loss = 0, b_lse = 0, b_ent = 0, b_tlp = 0, b_z = 0;
};

struct Ref {
  std::vector<RowRef> rows;
  std::vector<double> G;                  // G_r
  std::vector<LD> dz, dh, dw, db;         // N x V, N x D, V x D, V
  std::vector<double> e, b_dh, b_dw, b_db;  // dz's bound e_rj and the GEMMs'
  LD reduced = 0;                         // kMean / kSum loss
  double b_reduced = 0;
};

inline Ref oracle(const LceData& d) {
  const LceCase& c = d.c;
  const int64_t N = c.N, D = c.D, V = c.V;
  const LD s = static_cast<LD>(d.s());
  const LD cap = c.cap, a = c.a, zs = c.zs, C = static_cast<LD>(std::max<int64_t>(V, 1));
  Ref R;
  R.rows.resize(static_cast<size_t>(N));
  R.G.assign(static_cast<size_t>(N), 0.0);
  R.dz.assign(static_cast<size_t>(N * V), 0);
  R.e.assign(static_cast<size_t>(N * V), 0.0);
  // G_r and the mean's denominator.
  LD den = 0;
  for (int64_t r = 0; r < N; ++r) {
    if (d.active(r)) den += d.cwt(d.y[static_cast<size_t>(r)]);
  }
  for (int64_t r = 0; r < N; ++r) {
    if (!d.active(r)) continue;
    LD g = c.red == Reduction::kNone ? d.dloss[static_cast<size_t>(r)] : d.dloss[0];
    if (c.red == Reduction::kMean) g /= den;
    R.G[static_cast<size_t>(r)] = static_cast<double>(g);
  }
  LD Wsum = 0;
  for (int64_t j = 0; j < V; ++j) Wsum += d.cwt(j);
  std::vector<LD> u(static_cast<size_t>(V)), t(static_cast<size_t>(V));
  LD sum_loss = 0, sum_abs = 0, sum_bound = 0;
  for (int64_t r = 0; r < N; ++r) {
    RowRef& o = R.rows[static_cast<size_t>(r)];
    double emax = 0, umax = 0;
    for (int64_t j = 0; j < V; ++j) {
      LD z = 0, mag = 0;
      for (int64_t k = 0; k < D; ++k) {
        const LD p = static_cast<LD>(d.h[static_cast<size_t>(r * D + k)]) * d.w[static_cast<size_t>(j * D + k)];
        z += p;
        mag += std::fabs(p);
      }
      const double bj = d.has_bias() ? d.b[static_cast<size_t>(j)] : 0.0;
      if (std::isfinite(bj)) mag += std::fabs(bj);
      z += bj;
      emax = std::max(emax, static_cast<double>(mag));
      u[static_cast<size_t>(j)] = z * s;
      t[static_cast<size_t>(j)] = u[static_cast<size_t>(j)];
      if (std::isfinite(static_cast<double>(z))) {
        umax = std::max(umax, static_cast<double>(std::fabs(u[static_cast<size_t>(j)])));
        if (cap > 0) t[static_cast<size_t>(j)] = cap * std::tanh(u[static_cast<size_t>(j)] / cap);
      }
    }
    o.E = static_cast<double>(s) * static_cast<double>(D + 3) * kU * emax;
    if (cap > 0) o.F = 1.0 + static_cast<double>(cap) + (1.0 + 1.0 / static_cast<double>(cap)) * umax;
    // Argmax of u and the gap to the runner-up.
    LD best = -INFINITY, second = -INFINITY, m = -INFINITY;
    for (int64_t j = 0; j < V; ++j) {
      const LD v = u[static_cast<size_t>(j)];
      if (v > best) {
        second = best;
        best = v;
        o.argmax = j;
      } else if (v > second) {
        second = v;
      }
      m = std::max(m, t[static_cast<size_t>(j)]);
      if (t[static_cast<size_t>(j)] != -INFINITY) o.tmax = std::max(o.tmax, static_cast<double>(std::fabs(t[static_cast<size_t>(j)])));
    }
    o.gap = static_cast<double>(best - second);
    if (m == -INFINITY) {
      o.empty = true;
      continue;
    }
    LD S = 0;
    for (LD v : t) S += std::exp(v - m);
    o.L = m + std::log(S);
    const LD L = o.L;
    std::vector<LD> p(static_cast<size_t>(V));
    LD ent = 0, pt = 0, WU = 0, smooth = 0, smooth_mag = 0;
    for (int64_t j = 0; j < V; ++j) {
      const LD tj = t[static_cast<size_t>(j)];
      p[static_cast<size_t>(j)] = std::exp(tj - m) / S;
      if (tj == -INFINITY) continue;
      ent -= p[static_cast<size_t>(j)] * (tj - L);
      pt += p[static_cast<size_t>(j)] * std::fabs(tj);
      WU += d.cwt(j);
      smooth += d.cwt(j) * (L - tj);
      smooth_mag += d.cwt(j) * (1 + std::fabs(L) + std::fabs(tj));
    }
    o.H = ent;
    o.sum_pt = static_cast<double>(pt);
    const double aL = static_cast<double>(std::fabs(L));
    o.b_lse = kUnit * o.F * (1 + aL) + o.E;
    o.b_ent = kUnit * o.F * (1 + aL + o.tmax + std::fabs(static_cast<double>(ent))) + 3 * o.E * (1 + o.tmax);
    if (!d.active(r)) continue;
    const int64_t y = d.y[static_cast<size_t>(r)];
    const LD wy = d.cwt(y), ty = t[static_cast<size_t>(y)];
    o.wy = static_cast<double>(wy);
    o.ty = static_cast<double>(std::fabs(ty));
    o.z = zs * wy * L * L;
    o.loss = (1 - a) * wy * (L - ty) + a / C * smooth + o.z;
    o.tlp = ty - L;
    o.M = static_cast<double>((1 - a) * wy * (1 + std::fabs(L) + std::fabs(ty)) + a / C * smooth_mag +
                              2 * zs * wy * (1 + std::fabs(L)) * std::fabs(L));
    o.b_loss = kUnit * o.F * o.M +
               2 * o.E * (o.wy * (1 + 2 * static_cast<double>(zs) * aL) + static_cast<double>(a * Wsum / C));
    o.b_tlp = kUnit * o.F * (1 + aL + o.ty) + 2 * o.E;
    o.b_z = kUnit * o.F * static_cast<double>(std::fabs(o.z)) * (1 + aL) / std::max(aL, 1e-300) +
            2 * static_cast<double>(zs) * o.wy * aL * o.E;
    sum_loss += o.loss;
    sum_abs += std::fabs(o.loss);
    sum_bound += o.b_loss;
    // dz_rj = s cap'_j G (p_j A - B_j) and its bound e_rj.
    const double G = R.G[static_cast<size_t>(r)];
    const LD A = (1 - a) * wy + a / C * WU + 2 * zs * wy * L;
    for (int64_t j = 0; j < V; ++j) {
      const size_t k = static_cast<size_t>(j), q = static_cast<size_t>(r * V + j);
      if (t[k] == -INFINITY) continue;
      LD cd = 1;
      if (cap > 0) {
        const LD ee = std::exp(-2 * std::fabs(u[k] / cap));
        cd = 4 * ee / ((1 + ee) * (1 + ee));
      }
      const LD B = (j == y ? (1 - a) * wy : 0) + a / C * d.cwt(j);
      R.dz[q] = s * cd * G * (p[k] * A - B);
      const double pj = static_cast<double>(p[k]), aA = static_cast<double>(std::fabs(A)),
                   aB = static_cast<double>(B), sg = static_cast<double>(s) * std::fabs(G);
      double e = kUnit * o.F * sg * static_cast<double>(cd) * (pj * aA + aB) +
                 2.5 * sg * pj * (aA + 2 * static_cast<double>(zs) * o.wy) * o.E + 1e-300;
      if (cap > 0) e += sg * (pj * aA + aB) * o.E / static_cast<double>(cap);
      R.e[q] = e;
    }
  }
  if (c.red == Reduction::kSum) {
    R.reduced = sum_loss;
    R.b_reduced = static_cast<double>(sum_bound + (N + 2) * kU * sum_abs);
  } else if (c.red == Reduction::kMean) {
    R.reduced = sum_loss / den;
    R.b_reduced = static_cast<double>((sum_bound + (N + 2) * kU * sum_abs) / den);
  }
  // The gradient GEMMs and their bounds.
  R.dh.assign(static_cast<size_t>(N * D), 0);
  R.dw.assign(static_cast<size_t>(V * D), 0);
  R.db.assign(static_cast<size_t>(V), 0);
  R.b_dh.assign(R.dh.size(), 0.0);
  R.b_dw.assign(R.dw.size(), 0.0);
  R.b_db.assign(R.db.size(), 0.0);
  for (int64_t r = 0; r < N; ++r) {
    for (int64_t j = 0; j < V; ++j) {
      const size_t q = static_cast<size_t>(r * V + j);
      const LD g = R.dz[q];
      const double ag = static_cast<double>(std::fabs(g));
      R.db[static_cast<size_t>(j)] += g;
      R.b_db[static_cast<size_t>(j)] += R.e[q] + static_cast<double>(N + 2) * kU * ag;
      for (int64_t k = 0; k < D; ++k) {
        const double hk = d.h[static_cast<size_t>(r * D + k)], wk = d.w[static_cast<size_t>(j * D + k)];
        R.dh[static_cast<size_t>(r * D + k)] += g * wk;
        R.dw[static_cast<size_t>(j * D + k)] += g * hk;
        R.b_dh[static_cast<size_t>(r * D + k)] += (R.e[q] + static_cast<double>(V + 2) * kU * ag) * std::fabs(wk);
        R.b_dw[static_cast<size_t>(j * D + k)] += (R.e[q] + static_cast<double>(N + 2) * kU * ag) * std::fabs(hk);
      }
    }
  }
  return R;
}

}  // namespace lce64
}  // namespace smax_test
