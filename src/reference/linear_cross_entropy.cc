// src/reference/linear_cross_entropy.cc: see linear_cross_entropy.h. Plain
// double loops over materialised logits.
#include "reference/linear_cross_entropy.h"

#include <cmath>
#include <limits>
#include <string>

#include "reference/reference.h"
#include "reference/rows.h"
#include "smax/error.h"

namespace smax::reference {
namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

[[noreturn]] void fail(const std::string& message) {
  reference::fail("reference::linear_cross_entropy", message);
}

}  // namespace

LceResult lce_solve(const LceProblem& p, const std::vector<double>* dloss) {
  const int64_t N = p.N, D = p.D, V = p.V;
  const double C = static_cast<double>(V);
  auto cw = [&](int64_t j) { return p.class_w.empty() ? 1.0 : p.class_w[static_cast<size_t>(j)]; };
  LceResult out;
  const size_t n = static_cast<size_t>(N);
  out.row_loss.assign(n, 0.0);
  out.z_rows.assign(n, 0.0);
  out.lse.assign(n, -kInf);
  out.entropy.assign(n, 0.0);
  out.target_logprob.assign(n, 0.0);
  out.accuracy.assign(n, 0.0);
  out.logits.assign(static_cast<size_t>(N * V), 0.0);
  std::vector<double> u(static_cast<size_t>(N * V));
  for (int64_t r = 0; r < N; ++r) {
    for (int64_t j = 0; j < V; ++j) {
      double z = 0.0;
      for (int64_t k = 0; k < D; ++k) {
        z += p.h[static_cast<size_t>(r * D + k)] * p.w[static_cast<size_t>(j * D + k)];
      }
      if (!p.b.empty()) z += p.b[static_cast<size_t>(j)];
      const double uu = z * p.s;
      double t = uu;
      if (p.cap > 0.0 && std::isfinite(uu)) t = p.cap * std::tanh(uu / p.cap);
      u[static_cast<size_t>(r * V + j)] = uu;
      out.logits[static_cast<size_t>(r * V + j)] = t;
    }
  }
  // Per row: L, p, loss terms.
  std::vector<double> L(n, -kInf), WU(n, 0.0);
  std::vector<char> active(n, 0), empty_rows(n, 0);
  double denominator = 0.0, count = 0.0;
  for (int64_t r = 0; r < N; ++r) {
    const size_t ri = static_cast<size_t>(r);
    const double* t = out.logits.data() + r * V;
    const int64_t y = p.target[ri];
    active[ri] = y != p.ignore_index;
    const double wy = active[ri] ? cw(y) : 0.0;
    denominator += wy;
    count += active[ri] ? 1.0 : 0.0;
    bool nan = false;
    double m = -kInf;
    int64_t arg = 0;
    for (int64_t j = 0; j < V; ++j) {
      if (std::isnan(t[j]) || t[j] == kInf) nan = true;
      if (t[j] > m) {
        m = t[j];
        arg = j;
      }
    }
    double lse = -kInf, H = 0.0, loss = 0.0, zr = 0.0, tlp = -kInf, acc = 0.0;
    const bool empty = !nan && m == -kInf;
    empty_rows[ri] = empty;
    if (nan || (empty && p.empty_row == EmptyRow::kNan)) {
      lse = H = loss = zr = tlp = acc = kNan;
    } else if (!empty) {
      double sum = 0.0;
      for (int64_t j = 0; j < V; ++j) sum += std::exp(t[j] - m);
      lse = m + std::log(sum);
      double pt = 0.0, sw = 0.0, swt = 0.0;
      for (int64_t j = 0; j < V; ++j) {
        if (t[j] == -kInf) continue;
        pt += std::exp(t[j] - lse) * t[j];
        sw += cw(j);
        swt += cw(j) * t[j];
      }
      H = lse - pt;
      WU[ri] = sw;
      if (active[ri]) {
        const double ty = t[y];
        const double c = (1.0 - p.a) * wy;
        if (c != 0.0) loss = c * (lse - ty);
        if (p.a > 0.0) loss += p.a / C * (sw * lse - swt);
        zr = p.zs * wy * lse * lse;
        loss += zr;
        tlp = ty - lse;
        acc = arg == y ? 1.0 : 0.0;
      }
    }
    L[ri] = lse;
    out.lse[ri] = lse;
    out.entropy[ri] = H;
    out.row_loss[ri] = active[ri] ? loss : 0.0;
    out.z_rows[ri] = active[ri] ? zr : 0.0;
    out.target_logprob[ri] = active[ri] ? tlp : 0.0;
    out.accuracy[ri] = active[ri] ? acc : 0.0;
  }
  auto reduce = [&](const std::vector<double>& v, double den) {
    double s = 0.0;
    for (size_t r = 0; r < n; ++r) {
      if (active[r]) s += v[r];
    }
    if (p.reduction == Reduction::kMean) {
      if (den == 0.0) return p.empty_mean == EmptyMean::kZero ? 0.0 : kNan;
      return s / den;
    }
    return s;
  };
  out.loss = reduce(out.row_loss, denominator);
  out.z_loss = reduce(out.z_rows, denominator);
  out.accuracy_reduced = reduce(out.accuracy, count);
  if (dloss == nullptr) return out;

  // Backward.
  out.G.assign(n, 0.0);
  for (int64_t r = 0; r < N; ++r) {
    const size_t ri = static_cast<size_t>(r);
    if (!active[ri]) continue;
    if (p.reduction == Reduction::kNone) {
      out.G[ri] = (*dloss)[ri];
    } else {
      double g = (*dloss)[0];
      if (p.reduction == Reduction::kMean) {
        // Zero weight sum with counted rows: PyTorch's w / sum w = 0 / 0.
        g = denominator != 0.0                    ? g / denominator
            : p.empty_mean == EmptyMean::kZero ? 0.0
                                                 : kNan;
      }
      out.G[ri] = g;
    }
  }
  out.dz.assign(static_cast<size_t>(N * V), 0.0);
  for (int64_t r = 0; r < N; ++r) {
    const size_t ri = static_cast<size_t>(r);
    if (!active[ri]) continue;
    const double* t = out.logits.data() + r * V;
    double* dz = out.dz.data() + r * V;
    const double lse = L[ri];
    if (empty_rows[ri]) {  // every logit -inf (or V = 0): empty_row policy
      for (int64_t j = 0; j < V; ++j) dz[j] = p.empty_row == EmptyRow::kNan ? kNan : 0.0;
      continue;
    }
    if (!std::isfinite(lse)) {
      for (int64_t j = 0; j < V; ++j) dz[j] = t[j] == -kInf ? 0.0 : kNan;
      continue;
    }
    const int64_t y = p.target[ri];
    const double wy = cw(y);
    const double G = out.G[ri];
    const double A = (1.0 - p.a) * wy + p.a / C * WU[ri] + 2.0 * p.zs * wy * lse;
    for (int64_t j = 0; j < V; ++j) {
      if (t[j] == -kInf) continue;
      const double pj = std::exp(t[j] - lse);
      const double B = (j == y ? (1.0 - p.a) * wy : 0.0) + p.a / C * cw(j);
      double capd = 1.0;
      if (p.cap > 0.0) {
        const double th = std::tanh(u[static_cast<size_t>(r * V + j)] / p.cap);
        capd = 1.0 - th * th;
      }
      dz[j] = p.s * capd * G * (pj * A - B);
    }
  }
  out.dhidden.assign(static_cast<size_t>(N * D), 0.0);
  out.dweight.assign(static_cast<size_t>(V * D), 0.0);
  out.dbias.assign(static_cast<size_t>(V), 0.0);
  for (int64_t r = 0; r < N; ++r) {
    for (int64_t j = 0; j < V; ++j) {
      const double g = out.dz[static_cast<size_t>(r * V + j)];
      out.dbias[static_cast<size_t>(j)] += g;
      for (int64_t k = 0; k < D; ++k) {
        out.dhidden[static_cast<size_t>(r * D + k)] += g * p.w[static_cast<size_t>(j * D + k)];
        out.dweight[static_cast<size_t>(j * D + k)] += g * p.h[static_cast<size_t>(r * D + k)];
      }
    }
  }
  return out;
}

LceProblem lce_problem(const TensorView& hidden, const TensorView& weight,
                       const TensorView& target, const std::optional<TensorView>& bias,
                       const CrossEntropyOptions& ce, const SoftmaxOptions& options) {
  if (hidden.rank != 2 || weight.rank != 2 || hidden.shape[1] != weight.shape[1]) {
    fail("hidden [N, D] and weight [V, D] expected");
  }
  LceProblem p;
  p.N = hidden.shape[0];
  p.D = hidden.shape[1];
  p.V = weight.shape[0];
  p.h = to_dense(hidden);
  p.w = to_dense(weight);
  if (bias) p.b = to_dense(*bias);
  if (target.dtype != DType::kI64 || target.numel() != p.N) fail("target must be i64 [N]");
  p.target = i64_dense(target);  // rank 1 or [N, 1]: N values in logical order
  for (int64_t r = 0; r < p.N; ++r) {
    const int64_t y = p.target[static_cast<size_t>(r)];
    if (y != ce.loss.ignore_index && (y < 0 || y >= p.V)) fail("target out of range");
  }
  if (ce.loss.weight) p.class_w = to_dense(*ce.loss.weight);
  p.s = static_cast<double>(options.scale / options.temperature);
  p.cap = ce.softcap;
  p.a = ce.label_smoothing;
  p.zs = ce.lse_square_scale;
  p.ignore_index = ce.loss.ignore_index;
  p.reduction = ce.loss.reduction;
  p.empty_mean = ce.loss.empty_mean;
  p.empty_row = options.empty_row;
  return p;
}

LceResult linear_cross_entropy(const TensorView& hidden, const TensorView& weight,
                               const TensorView& target, const std::optional<TensorView>& bias,
                               const CrossEntropyOptions& ce, const SoftmaxOptions& options,
                               const TensorView* dloss) {
  const LceProblem p = lce_problem(hidden, weight, target, bias, ce, options);
  if (dloss == nullptr) return lce_solve(p);
  const std::vector<double> g = to_dense(*dloss);
  return lce_solve(p, &g);
}

}  // namespace smax::reference
