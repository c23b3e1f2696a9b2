// src/reference/sparse.cc: see sparse.h. Plain double loops and full sorts.
#include "reference/sparse.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "reference/reference.h"
#include "reference/rows.h"
#include "smax/error.h"

namespace smax::reference {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

enum class RowState { kOk, kNan, kEmpty };

// Classifies a row and returns its max (NaN / +inf -> kNan).
RowState classify(const std::vector<double>& t, double* m) {
  *m = -kInf;
  for (double v : t) {
    if (std::isnan(v) || v == kInf) return RowState::kNan;
    *m = std::max(*m, v);
  }
  return *m == -kInf ? RowState::kEmpty : RowState::kOk;
}

// Output of a special row, or false for a regular one.
bool special_row(const std::vector<double>& t, EmptyRow e, std::vector<double>* out, double* m) {
  const RowState s = classify(t, m);
  if (s == RowState::kOk) return false;
  const bool nan = s == RowState::kNan || e == EmptyRow::kNan;
  out->assign(t.size(), nan ? kNaN : 0.0);
  return true;
}

// Finite values shifted by the max, sorted descending.
std::vector<double> sorted_shifted(const std::vector<double>& t, double m, double factor) {
  std::vector<double> z;
  for (double v : t) {
    if (v > -kInf) z.push_back(factor * (v - m));
  }
  std::sort(z.begin(), z.end(), [](double a, double b) { return a > b; });
  return z;
}

std::vector<int64_t> dropped_to_keepdim(const TensorView& src, int axis, TensorView* v) {
  if (v->rank == src.rank - 1) {  // insert the axis with size 1
    TensorView k = *v;
    k.rank = v->rank + 1;
    for (int d = 0, s = 0; d < k.rank; ++d) {
      if (d == axis) {
        k.shape[d] = 1;
        k.strides[d] = 0;
      } else {
        k.shape[d] = v->shape[s];
        k.strides[d] = v->strides[s];
        ++s;
      }
    }
    *v = k;
  }
  return {};
}

}  // namespace

std::vector<double> sparsemax_row(const std::vector<double>& t, EmptyRow e) {
  std::vector<double> y;
  double m;
  if (special_row(t, e, &y, &m)) return y;
  const std::vector<double> z = sorted_shifted(t, m, 1.0);
  double c = 0.0, tau = 0.0;
  for (size_t k = 0; k < z.size(); ++k) {  // k* = max{k : 1 + k z_k > c_k}
    c += z[k];
    if (1.0 + static_cast<double>(k + 1) * z[k] > c) tau = (c - 1.0) / static_cast<double>(k + 1);
  }
  y.assign(t.size(), 0.0);
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] > -kInf) y[i] = std::max(t[i] - m - tau, 0.0);
  }
  return y;
}

std::vector<double> entmax15_row(const std::vector<double>& t, EmptyRow e) {
  std::vector<double> y;
  double m;
  if (special_row(t, e, &y, &m)) return y;
  const std::vector<double> z = sorted_shifted(t, m, 0.5);
  double c1 = 0.0, c2 = 0.0, tau_star = 0.0;
  for (size_t k = 0; k < z.size(); ++k) {
    const double kk = static_cast<double>(k + 1);
    c1 += z[k];
    c2 += z[k] * z[k];
    const double mu = c1 / kk;
    const double ss = kk * (c2 / kk - mu * mu);
    const double delta = (1.0 - ss) / kk;
    const double tau = mu - std::sqrt(std::max(delta, 0.0));
    if (tau <= z[k]) tau_star = tau;  // k* = #{k : tau_k <= z_k}: a prefix
  }
  y.assign(t.size(), 0.0);
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] > -kInf) {
      const double v = std::max(0.5 * (t[i] - m) - tau_star, 0.0);
      y[i] = v * v;
    }
  }
  return y;
}

std::vector<double> entmax_bisect_row(const std::vector<double>& t, double alpha, int n_iter,
                                      bool ensure_sum_one, EmptyRow e) {
  std::vector<double> y;
  double m;
  if (special_row(t, e, &y, &m)) return y;
  if (alpha == 1.0) return sparse_softmax_row(t, static_cast<int64_t>(t.size()), -1, e);
  const double am1 = alpha - 1.0;
  std::vector<double> z(t.size());
  for (size_t i = 0; i < t.size(); ++i) z[i] = t[i] > -kInf ? am1 * (t[i] - m) : -kInf;
  auto p_at = [&](double tau, std::vector<double>* out) {
    double s = 0.0;
    for (size_t i = 0; i < z.size(); ++i) {
      const double v = z[i] - tau;
      const double p = v > 0.0 ? std::pow(v, 1.0 / am1) : 0.0;
      if (out) (*out)[i] = p;
      s += p;
    }
    return s;
  };
  double tau_lo = -1.0;
  const double tau_hi = -std::pow(1.0 / static_cast<double>(t.size()), am1);
  double dm = tau_hi - tau_lo;
  double tau_m = tau_lo;
  for (int it = 0; it < n_iter; ++it) {
    dm /= 2;
    tau_m = tau_lo + dm;
    const double f_m = p_at(tau_m, nullptr) - 1.0;
    if (f_m >= 0) tau_lo = tau_m;  // f(tau_lo) >= 0 always (see ops/sparse/sparse_rows.h)
  }
  y.assign(t.size(), 0.0);
  const double s = p_at(tau_m, &y);
  if (ensure_sum_one) {
    for (double& v : y) v /= s;
  }
  return y;
}

std::vector<double> sparse_softmax_row(const std::vector<double>& t, int64_t k, int64_t force,
                                       EmptyRow e) {
  std::vector<double> y;
  double m;
  if (special_row(t, e, &y, &m)) return y;
  std::vector<int64_t> order;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] > -kInf) order.push_back(static_cast<int64_t>(i));
  }
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return t[static_cast<size_t>(a)] > t[static_cast<size_t>(b)];
  });
  std::vector<char> kept(t.size(), 0);
  for (size_t r = 0; r < order.size() && static_cast<int64_t>(r) < k; ++r) {
    kept[static_cast<size_t>(order[r])] = 1;
  }
  if (force >= 0 && t[static_cast<size_t>(force)] > -kInf) kept[static_cast<size_t>(force)] = 1;
  double s = 0.0;
  y.assign(t.size(), 0.0);
  for (size_t i = 0; i < t.size(); ++i) {
    if (kept[i]) {
      y[i] = std::exp(t[i] - m);
      s += y[i];
    }
  }
  for (double& v : y) v /= s;
  return y;
}

std::vector<double> entmax_vjp_row(const std::vector<double>& y, const std::vector<double>& g,
                                   double alpha, double s, double* dalpha) {
  const size_t n = y.size();
  std::vector<double> dx(n, 0.0);
  if (dalpha) *dalpha = 0.0;
  for (double v : y) {
    if (!std::isfinite(v)) {
      dx.assign(n, kNaN);
      if (dalpha) *dalpha = kNaN;
      return dx;
    }
  }
  std::vector<double> w(n, 0.0);
  double sw = 0.0, gw = 0.0;
  for (size_t i = 0; i < n; ++i) {
    if (y[i] > 0.0) w[i] = alpha == 2.0 ? 1.0 : std::pow(y[i], 2.0 - alpha);
    sw += w[i];
    gw += g[i] * w[i];
  }
  if (sw == 0.0) return dx;
  const double q = gw / sw;
  for (size_t i = 0; i < n; ++i) dx[i] = s * w[i] * (g[i] - q);
  if (dalpha) {
    double H = 0.0;
    std::vector<double> S(n, 0.0);
    for (size_t i = 0; i < n; ++i) {
      if (y[i] > 0.0) S[i] = y[i] * std::log(y[i]);
      H += S[i];
    }
    const double am1 = alpha - 1.0;
    double v = 0.0;
    for (size_t i = 0; i < n; ++i) {
      const double pt = w[i] / sw;
      v += g[i] * ((y[i] - pt) / (am1 * am1) - (S[i] - pt * H) / am1);
    }
    *dalpha = v;
  }
  return dx;
}

// ---- tensors ----------------------------------------------------------------------

namespace {

template <class RowFn>
std::vector<double> by_rows(const char* fn, const TensorView& src, const SoftmaxOptions& o,
                            RowFn&& row_fn) {
  const RefRows R = ref_rows(fn, src, o, true);
  return map_rows(R, [&](int64_t r) { return row_fn(R.row_copy(r), r, R); });
}

std::vector<double> row_alphas(const char* fn, const EntmaxBisectOptions& p, const RefRows& R) {
  if (p.alpha_tensor) return ref_row_values(fn, *p.alpha_tensor, R);
  return std::vector<double>(static_cast<size_t>(R.rows), static_cast<double>(p.alpha));
}

}  // namespace

std::vector<double> sparsemax(const TensorView& src, const SoftmaxOptions& o) {
  return by_rows("sparsemax", src, o, [&](const std::vector<double>& t, int64_t, const RefRows&) {
    return sparsemax_row(t, o.empty_row);
  });
}

std::vector<double> entmax15(const TensorView& src, const SoftmaxOptions& o) {
  return by_rows("entmax15", src, o, [&](const std::vector<double>& t, int64_t, const RefRows&) {
    return entmax15_row(t, o.empty_row);
  });
}

std::vector<double> entmax_bisect(const TensorView& src, const EntmaxBisectOptions& p,
                                  const SoftmaxOptions& o) {
  std::vector<double> alphas;
  return by_rows("entmax_bisect", src, o,
                 [&](const std::vector<double>& t, int64_t r, const RefRows& R) {
                   if (alphas.empty()) alphas = row_alphas("entmax_bisect", p, R);
                   return entmax_bisect_row(t, alphas[static_cast<size_t>(r)], p.n_iter,
                                            p.ensure_sum_one, o.empty_row);
                 });
}

std::vector<double> sparse_softmax(const TensorView& src, int64_t k, const SoftmaxOptions& o) {
  return by_rows("sparse_softmax", src, o,
                 [&](const std::vector<double>& t, int64_t, const RefRows&) {
                   return sparse_softmax_row(t, k, -1, o.empty_row);
                 });
}

std::vector<double> entmax_backward(const TensorView& y, const TensorView& dy, double alpha,
                                    const SoftmaxOptions& o, const EntmaxBisectOptions* params,
                                    std::vector<double>* dalpha) {
  const RefRows Y = ref_rows("entmax_backward", y, o, false);
  const RefRows G = ref_rows("entmax_backward", dy, o, false);
  std::vector<double> alphas(static_cast<size_t>(Y.rows), alpha);
  if (params != nullptr) alphas = row_alphas("entmax_backward", *params, Y);
  std::vector<double> out(Y.values.size());
  const std::vector<char> masked = ref_masked("entmax_backward", y, o);
  if (dalpha) dalpha->assign(static_cast<size_t>(Y.rows), 0.0);
  for (int64_t r = 0; r < Y.rows; ++r) {
    const std::vector<double> yr(Y.row(r), Y.row(r) + Y.n), gr(G.row(r), G.row(r) + G.n);
    double da = 0.0;
    const std::vector<double> dx =
        entmax_vjp_row(yr, gr, alphas[static_cast<size_t>(r)], Y.scale, dalpha ? &da : nullptr);
    if (dalpha) (*dalpha)[static_cast<size_t>(r)] = da;
    std::copy(dx.begin(), dx.end(), out.begin() + r * Y.n);
    for (int64_t k = 0; k < Y.n; ++k) {
      if (masked[static_cast<size_t>(r * Y.n + k)]) out[static_cast<size_t>(r * Y.n + k)] = 0.0;
    }
  }
  return Y.scatter(out);
}

namespace {

struct LossSetup {
  RefRows R;
  std::vector<double> targets, weights, alphas;
  double weight_sum = 0.0;
};

LossSetup loss_setup(const SparseLossSpec& spec, const TensorView& src, const TensorView& target,
                     const LossOptions& loss, const SoftmaxOptions& o) {
  LossSetup S;
  S.R = ref_rows("sparse_loss", src, o, true);
  TensorView tv = target;
  dropped_to_keepdim(src, S.R.axis, &tv);
  S.targets = ref_row_values("sparse_loss", tv, S.R);
  std::vector<double> cw;
  if (loss.weight) cw = to_dense(*loss.weight);
  S.weights.assign(S.targets.size(), 0.0);
  for (size_t r = 0; r < S.targets.size(); ++r) {
    const auto t = static_cast<int64_t>(S.targets[r]);
    if (t == loss.ignore_index) continue;
    if (t < 0 || t >= S.R.n) throw Error(Status::kInvalidArgument, "sparse_loss: bad target");
    S.weights[r] = cw.empty() ? 1.0 : cw[static_cast<size_t>(t)];
    S.weight_sum += S.weights[r];
  }
  S.alphas = row_alphas("sparse_loss", spec.bisect, S.R);
  return S;
}

// Row distribution of the loss described by `spec`.
std::vector<double> spec_row(const SparseLossSpec& spec, const std::vector<double>& t,
                             double alpha, int64_t target, EmptyRow e) {
  switch (spec.which) {
    case SparseLossSpec::kSparsemax: return sparsemax_row(t, e);
    case SparseLossSpec::kEntmax15: return entmax15_row(t, e);
    case SparseLossSpec::kBisect: return entmax_bisect_row(t, alpha, spec.bisect.n_iter, true, e);
    case SparseLossSpec::kTopK:
      return sparse_softmax_row(t, spec.k, spec.force_target ? target : -1, e);
  }
  return {};
}

double spec_alpha(const SparseLossSpec& spec, double row_alpha) {
  switch (spec.which) {
    case SparseLossSpec::kSparsemax: return 2.0;
    case SparseLossSpec::kEntmax15: return 1.5;
    case SparseLossSpec::kBisect: return row_alpha;
    case SparseLossSpec::kTopK: return 1.0;
  }
  return 2.0;
}

}  // namespace

std::vector<double> sparse_loss(const SparseLossSpec& spec, const TensorView& src,
                                const TensorView& target, const LossOptions& loss,
                                const SoftmaxOptions& o) {
  const LossSetup S = loss_setup(spec, src, target, loss, o);
  std::vector<double> per_row(static_cast<size_t>(S.R.rows), 0.0);
  double total = 0.0;
  for (int64_t r = 0; r < S.R.rows; ++r) {
    const size_t rr = static_cast<size_t>(r);
    const auto tg = static_cast<int64_t>(S.targets[rr]);
    if (tg == loss.ignore_index) continue;
    const std::vector<double> t(S.R.row(r), S.R.row(r) + S.R.n);
    const double alpha = spec_alpha(spec, S.alphas[rr]);
    double m;
    const RowState st = classify(t, &m);
    double L;
    if (st == RowState::kNan) {
      L = kNaN;
    } else if (st == RowState::kEmpty) {
      L = o.empty_row == EmptyRow::kNan ? kNaN : 0.0;
    } else {
      const std::vector<double> p = spec_row(spec, t, alpha, tg, o.empty_row);
      if (alpha == 1.0) {  // log sum over the kept set - t_target
        double s = 0.0;
        for (size_t i = 0; i < t.size(); ++i) {
          if (p[i] > 0.0) s += std::exp(t[i] - m);
        }
        L = m + std::log(s) - t[static_cast<size_t>(tg)];
      } else {
        double sa = 0.0, pt = 0.0;
        for (size_t i = 0; i < t.size(); ++i) {
          if (p[i] > 0.0) {
            sa += std::pow(p[i], alpha);
            pt += p[i] * (t[i] - m);
          }
        }
        L = (1.0 - sa) / (alpha * (alpha - 1.0)) + pt + (m - t[static_cast<size_t>(tg)]);
      }
    }
    per_row[rr] = S.weights[rr] * L;
    total += per_row[rr];
  }
  if (loss.reduction == Reduction::kNone) return per_row;
  if (loss.reduction == Reduction::kSum) return {total};
  if (S.weight_sum == 0.0) return {loss.empty_mean == EmptyMean::kZero ? 0.0 : kNaN};
  return {total / S.weight_sum};
}

std::vector<double> sparse_loss_backward(const SparseLossSpec& spec, const TensorView& src,
                                         const TensorView& target, const TensorView& dloss,
                                         const LossOptions& loss, const SoftmaxOptions& o) {
  const LossSetup S = loss_setup(spec, src, target, loss, o);
  std::vector<double> gl;
  if (loss.reduction == Reduction::kNone) {
    TensorView dv = dloss;
    dropped_to_keepdim(src, S.R.axis, &dv);
    gl = ref_row_values("sparse_loss_backward", dv, S.R);
  } else {
    gl.assign(static_cast<size_t>(S.R.rows), to_dense(dloss)[0]);
  }
  std::vector<double> out(S.R.values.size(), 0.0);
  for (int64_t r = 0; r < S.R.rows; ++r) {
    const size_t rr = static_cast<size_t>(r);
    const auto tg = static_cast<int64_t>(S.targets[rr]);
    if (tg == loss.ignore_index) continue;
    double c = S.weights[rr] * gl[rr];
    if (loss.reduction == Reduction::kMean) {
      // Zero weight sum with non-ignored rows: 0 / 0 (PyTorch's w / sum w).
      c = S.weight_sum != 0.0 ? c / S.weight_sum
          : loss.empty_mean == EmptyMean::kZero ? 0.0
                                                 : kNaN;
    }
    const std::vector<double> t(S.R.row(r), S.R.row(r) + S.R.n);
    const std::vector<double> p =
        spec_row(spec, t, spec_alpha(spec, S.alphas[rr]), tg, o.empty_row);
    double m;
    const bool regular = classify(t, &m) == RowState::kOk;
    for (int64_t i = 0; i < S.R.n; ++i) {
      const size_t ii = static_cast<size_t>(i);
      double g = c * S.R.scale * (p[ii] - (regular && i == tg ? 1.0 : 0.0));
      if (regular && t[ii] == -kInf) g = 0.0;  // masked entries, masked target
      // An empty row gives its empty_row value (0 or NaN) whatever c (a NaN
      // c from a 0 / 0 mean included), as the library's special-row path.
      if (!regular && !std::isnan(p[ii]) && std::isnan(c)) g = p[ii];
      out[static_cast<size_t>(r * S.R.n + i)] = g;
    }
  }
  return S.R.scatter(out);
}

}  // namespace smax::reference
