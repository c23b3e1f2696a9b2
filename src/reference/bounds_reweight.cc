// src/reference/bounds_reweight.cc: the re-weighting normalisers' documented
// bounds (include/smax/normalizers.h; see bounds.h): one row at a time, and
// their rule (reweight_bounds).
#include <algorithm>
#include <cmath>
#include <limits>

#include "reference/bounds.h"
#include "reference/reweight.h"

namespace smax::reference {

namespace {

constexpr double kU = 0x1p-24;
constexpr double kInfD = std::numeric_limits<double>::infinity();

double log_sigmoid(double z) {
  return z >= 0.0 ? -std::log1p(std::exp(-z)) : z - std::log1p(std::exp(z));
}

}  // namespace

// Relative forward bound factor e_i (|y - ref| <= e_i |ref| + 1e-36).
Row reweight_forward_rel(const ReweightBound& s, const Row& t, const Row& y) {
  const size_t n = t.size();
  Row e(n, 2e-6);
  if (!row_finite_visible(t)) return e;
  if (s.op == ReweightOp::kSelfAdjust) {
    for (double& x : e) x = 2.2e-6;
  } else if (s.op == ReweightOp::kSoftplus && s.sp.power != 1.0f) {
    Row L(n);
    double sum = 0.0;
    for (size_t i = 0; i < n; ++i) L[i] = log_softplus(t[i]);  // t here is z
    for (size_t i = 0; i < n; ++i) sum += y[i] * (t[i] == -kInfD ? 0.0 : std::fabs(L[i]));
    for (size_t i = 0; i < n; ++i) {
      const double Li = t[i] == -kInfD ? 0.0 : std::fabs(L[i]);
      e[i] = 2e-6 + 3.0 * kU * s.sp.power * (1.0 + Li + sum);
    }
  } else if (s.op == ReweightOp::kPower) {
    for (double& x : e) x = power_kappa(s.p);
  } else if (s.op == ReweightOp::kLogitStandardization) {
    // v = (t - mu) k, as the reference forms it.
    const VisibleMoments vm = visible_moments(t, s.ls.unbiased);
    const double mu = vm.mu, sigma = vm.sigma;
    const double k = sigma > 0 ? 1.0 / ((sigma + s.ls.eps) * s.ls.temperature) : 0.0;
    double sum = 0.0;
    for (size_t i = 0; i < n; ++i) {
      if (t[i] != -kInfD) sum += y[i] * std::fabs((t[i] - mu) * k);
    }
    for (size_t i = 0; i < n; ++i) {
      const double v = t[i] == -kInfD ? 0.0 : std::fabs((t[i] - mu) * k);
      e[i] = 2e-6 + 4.0 * kU * (v + sum);
    }
  }
  return e;
}

Row reweight_forward_bound(const ReweightBound& s, const Row& t, const Row& y) {
  const Row e = reweight_forward_rel(s, t, y);
  Row b(t.size());
  for (size_t i = 0; i < t.size(); ++i) {
    b[i] = e[i] * std::fabs(y[i]) + 1e-36;
    if (s.op == ReweightOp::kSelfAdjust && std::isfinite(t[i])) b[i] += 1e-36 * std::fabs(t[i]);
  }
  return b;
}

// Backward bound; t is z for softplus (lambda = dz/dt given), y the reference
// forward of the row, dx the reference backward (for relative terms).
Row reweight_backward_bound(const ReweightBound& s, const Row& t, const Row& g, const Row& y,
                            const Row& dx, double scale, double lambda) {
  const size_t n = t.size();
  Row b(n, 1e-30);
  if (s.op == ReweightOp::kSigmoid) {
    for (size_t i = 0; i < n; ++i) b[i] += 2.5e-7 * std::fabs(dx[i]);
    return b;
  }
  if (!row_finite_visible(t)) return b;
  double gy_abs = 0.0, r = 0.0;
  for (size_t i = 0; i < n; ++i) {
    gy_abs += std::fabs(g[i] * y[i]);
    r += g[i] * y[i];
  }
  switch (s.op) {
    case ReweightOp::kSelfAdjust: {
      const Row p = softmax_finite_row(t);
      double a = 0.0, bb = 0.0, c = 1.0;
      double mn = kInfD, mx = -kInfD;
      for (double v : t) {
        if (v != -kInfD) mn = std::min(mn, v), mx = std::max(mx, v);
      }
      if (s.sa.normalized) {
        a = std::min(mn, 0.0);
        bb = std::max(mx, 0.0);
        c = bb > a ? 1.0 / (bb - a) : 0.0;
      }
      Row rr(n, 0.0);
      double grp = 0.0, gp = 0.0, gr = 0.0;
      for (size_t i = 0; i < n; ++i) {
        if (t[i] == -kInfD) continue;
        rr[i] = s.sa.normalized ? (t[i] - a) * c : t[i];
        grp += std::fabs(g[i] * rr[i] * p[i]);
        gp += std::fabs(g[i] * p[i]);
        gr += std::fabs(g[i] * rr[i]);
      }
      const size_t jmin = static_cast<size_t>(std::find(t.begin(), t.end(), mn) - t.begin());
      const size_t jmax = static_cast<size_t>(std::find(t.begin(), t.end(), mx) - t.begin());
      for (size_t j = 0; j < n; ++j) {
        if (t[j] == -kInfD) continue;
        const double q = s.sa.normalized ? c + rr[j] : 1.0 + t[j];
        b[j] += scale * (2.2e-6 * p[j] * (std::fabs(g[j] * q) + 2.0 * grp) +
                         1e-36 * (std::fabs(g[j] * q) + gr));
        if (s.sa.normalized && s.sa.grad_through_bounds &&
            ((j == jmin && mn < 0) || (j == jmax && mx > 0))) {
          b[j] += 2.2e-6 * scale * c * (grp + gp);
        }
      }
      return b;
    }
    case ReweightOp::kSoftplus: {
      const Row e = reweight_forward_rel(s, t, y);
      double ey = 0.0;
      for (size_t i = 0; i < n; ++i) ey += e[i] * std::fabs(g[i] * y[i]);
      for (size_t j = 0; j < n; ++j) {
        if (t[j] == -kInfD) continue;
        const double rho = std::exp(log_sigmoid(t[j]) - log_softplus(t[j]));
        b[j] += scale * lambda * s.sp.power * y[j] * rho *
                    (e[j] * std::fabs(g[j] - r) + 2.0 * ey) +
                10.0 * kU * std::fabs(dx[j]);
      }
      return b;
    }
    case ReweightOp::kPower: {
      double M = 0.0;
      for (double v : t) {
        if (v != -kInfD) M = std::max(M, std::fabs(v));
      }
      if (M == 0.0) return b;
      double S = 0.0;
      for (double v : t) {
        if (v != -kInfD) S += std::pow(v / M, s.p);
      }
      const double kappa = power_kappa(s.p);
      for (size_t j = 0; j < n; ++j) {
        if (t[j] == -kInfD) continue;
        b[j] += 2.0 * kappa * scale * s.p / (M * S) * std::pow(std::fabs(t[j]) / M, s.p - 1) *
                (std::fabs(g[j] - r) + gy_abs);
      }
      return b;
    }
    case ReweightOp::kProbabilityTemperature: {
      double M = 0.0, S = 0.0;
      for (double v : t) M = std::max(M, v);
      if (!(M > 0.0)) return b;  // all zero: empty row
      const double a = 1.0 / static_cast<double>(s.T);
      for (double v : t) {
        if (v > 0) S += std::pow(v / M, a);
      }
      for (size_t j = 0; j < n; ++j) {
        if (t[j] == -kInfD) continue;
        const double c = scale * a / (M * S) * std::pow(t[j] / M, a - 1.0);
        b[j] += 4e-6 * std::fabs(c) * (std::fabs(g[j] - r) + gy_abs);
      }
      return b;
    }
    case ReweightOp::kLogitStandardization: {
      const Row e = reweight_forward_rel(s, t, y);
      const VisibleMoments vm = visible_moments(t, s.ls.unbiased);
      const double mu = vm.mu, D = vm.D, sigma = vm.sigma;
      const double se = sigma + s.ls.eps;
      const double k = 1.0 / (se * s.ls.temperature);
      double dr = 0.0;
      for (size_t i = 0; i < n; ++i) dr += e[i] * std::fabs(g[i] * y[i]);
      auto dh = [&](size_t i) {
        return e[i] * y[i] * (std::fabs(g[i]) + std::fabs(r)) + y[i] * dr;
      };
      double dC = 0.0;
      if (sigma > 0) {
        for (size_t i = 0; i < n; ++i) {
          if (t[i] != -kInfD) dC += std::fabs(t[i] - mu) * dh(i);
        }
        dC /= se * D * sigma;
      }
      for (size_t j = 0; j < n; ++j) {
        if (t[j] == -kInfD) continue;
        b[j] += scale * k * (dh(j) + std::fabs(t[j] - mu) * dC) + 4.0 * kU * std::fabs(dx[j]);
      }
      return b;
    }
    default: break;
  }
  return b;
}

bool row_finite_visible(const Row& t) {
  bool any = false;
  for (double v : t) {
    if (std::isnan(v) || v == kInfD) return false;
    any |= v != -kInfD;
  }
  return any;
}

void reweight_bounds(BoundRows& b, ReweightOp op) {
  const BoundCall& e = b.call;
  const SoftmaxOptions& o = e.options;
  const bool backward = b.shape.backward;
  ReweightBound rb;
  rb.op = op;
  rb.sa.normalized = b.param("normalized") != 0;
  rb.sp.head_dim = static_cast<int64_t>(b.has_param("head_dim") ? b.param("head_dim") : 0);
  rb.sp.power = static_cast<float>(b.has_param("power") ? b.param("power") : 1.0);
  rb.p = static_cast<int>(b.param("p"));
  rb.T = static_cast<float>(b.param("T"));
  rb.ls.temperature = static_cast<float>(b.has_param("T") ? b.param("T") : 1.0);
  const bool softplus = op == ReweightOp::kSoftplus;
  std::vector<double> zdense;
  if (softplus) zdense = softplus_z(e.x, rb.sp, o);
  // The reference forward output (the backward bounds read it too).
  std::vector<double> yref;
  if (!backward) yref = b.ref;
  else if (softplus) yref = softplus_normalizer(e.x, rb.sp, o);
  else if (op == ReweightOp::kLogitStandardization) yref = logit_standardization(e.x, rb.ls, o);
  else if (op == ReweightOp::kPower) yref = power_softmax(e.x, rb.p, o);
  else if (op == ReweightOp::kProbabilityTemperature) yref = probability_temperature(e.y, rb.T, o);
  for (int64_t r = 0; r < b.R.rows; ++r) {
    Row t = b.row(r);
    double lambda = 1.0;
    if (softplus) {
      Row z(t.size());
      for (int64_t k = 0; k < b.R.n; ++k) z[static_cast<size_t>(k)] = zdense[b.at(r, k)];
      // lambda = dz/dt (f32), as the op forms it.
      int64_t N = 0;
      for (double v : t) N += v != -kInfD;
      lambda = static_cast<float>(std::log(static_cast<double>(N)) /
                                  std::log(static_cast<double>(rb.sp.head_dim)));
      t = z;
    }
    const size_t n = t.size();
    Row y(n, 0.0);
    if (!yref.empty()) {
      for (int64_t k = 0; k < b.R.n; ++k) y[static_cast<size_t>(k)] = yref[b.at(r, k)];
    }
    if (!backward) {
      b.set_row(r, reweight_forward_bound(rb, t, y));
      continue;
    }
    // p_j = 0, T > 1: "+-inf (NaN where dy_j == <dy,y>)" (the header);
    // which one depends on the rounding of dy_j - <dy,y>.
    if (op == ReweightOp::kProbabilityTemperature && row_finite_visible(t) && rb.T > 1.0f) {
      for (size_t j = 0; j < n; ++j) {
        if (t[j] == 0.0) b.allow_overflow(r, static_cast<int64_t>(j));
      }
    }
    b.set_row(r, reweight_backward_bound(rb, t, b.dy_row(r), y, b.ref_row(r), b.sigma(), lambda));
  }
}

}  // namespace smax::reference
