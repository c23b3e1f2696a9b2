// src/ops/losses/cross_entropy_f64.cc: see cross_entropy_f64.h.
#include "ops/losses/cross_entropy_f64.h"

#include <cmath>
#include <limits>

#include "core/compensated.h"
#include "kernels/softmax_f64.h"

namespace smax::detail {
namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// t_j = softcap tanh(u_j / softcap) + mask_j; +-inf u_j pass through.
void form_logits(const CeSetup& s, const RowArgs64& a, double* t) {
  const double* u = a.in[0];
  const double cap = static_cast<double>(s.cap);
  const double* mask = s.mask_input >= 0 ? a.in[s.mask_input] : nullptr;
  for (int64_t j = 0; j < a.n; ++j) {
    double v = u[j];
    if (cap > 0.0 && std::isfinite(v)) v = cap * std::tanh(v / cap);
    if (mask != nullptr) v += mask[j];
    t[j] = v;
  }
}

// d t_j / d u_j: 1 - tanh^2(u / cap) = 4 e / (1 + e)^2 with e = e^(-2|u| / cap)
// (no cancellation where tanh is near 1); 1 without a softcap.
double cap_deriv(const CeSetup& s, double u) {
  if (!(s.cap > 0.0f)) return 1.0;
  const double e = std::exp(-2.0 * std::fabs(u / static_cast<double>(s.cap)));
  return 4.0 * e / ((1.0 + e) * (1.0 + e));
}

double weight_at(const CeSetup& s, int64_t j) {
  return s.weight64.empty() ? 1.0 : s.weight64[static_cast<size_t>(j)];
}

int64_t first_argmax(const double* v, int64_t n) {
  int64_t best = 0;
  for (int64_t j = 1; j < n; ++j) {
    if (v[j] > v[best]) best = j;
  }
  return best;
}

// The sums of a probability-target row q over t (kernels::XentProbSums' names).
struct ProbSums {
  double qt = 0.0, q = 0.0, q_masked = 0.0, wqt = 0.0, wq = 0.0, wq_masked = 0.0;
};
ProbSums prob_sums(const CeSetup& s, const RowArgs64& a, const double* t) {
  const double* q = a.in[s.target_input];
  CompensatedSum qt, qs, qm, wqt, wq, wqm;
  for (int64_t j = 0; j < a.n; ++j) {
    const double w = weight_at(s, j);
    if (t[j] == -kInf) {
      qm.add(q[j]);
      wqm.add(w * q[j]);
    } else {
      qt.add(q[j] * t[j]);
      qs.add(q[j]);
      wqt.add(w * q[j] * t[j]);
      wq.add(w * q[j]);
    }
  }
  return {qt.value(), qs.value(), qm.value(), wqt.value(), wq.value(), wqm.value()};
}

// Label smoothing's sums over t_j > -inf: sum w_j t_j and sum w_j.
struct SmoothSums {
  double t = 0.0, w = 0.0;
};
SmoothSums smooth_sums(const CeSetup& s, const double* t, int64_t n) {
  CompensatedSum st, sw;
  for (int64_t j = 0; j < n; ++j) {
    if (t[j] == -kInf) continue;
    const double w = weight_at(s, j);
    st.add(w * t[j]);
    sw.add(w);
  }
  return {st.value(), sw.value()};
}

// One sweep of a row: t formed into `t`, the terms into `e`.
struct Sweep {
  double m = -kInf, S = 0.0, L = -kInf;
  bool nan = false, empty = true;
};
Sweep sweep(const CeSetup& s, const RowArgs64& a, double* t, double* e) {
  Sweep w;
  if (a.n == 0) return w;
  form_logits(s, a, t);
  const kernels::F64Terms r = kernels::exp_terms_row_f64(t, a.n, e);
  w.m = r.max;
  w.S = r.sum;
  w.nan = std::isnan(r.sum);
  w.empty = !w.nan && r.sum == 0.0;
  w.L = w.nan ? kNan : w.empty ? -kInf : w.m + std::log(w.S);
  return w;
}

// The gradient row (cross_entropy.cc's grad_row in float64): g = G_r.
void grad_row(const CeSetup& s, const RowArgs64& a, double g, const Sweep& w, const double* t,
              const double* e, const ProbSums* ps_in, double* out) {
  const int64_t n = a.n;
  if (w.L == -kInf) {  // every logit masked (or n == 0)
    const double v = s.empty_row == EmptyRow::kNan ? kNan : 0.0;
    for (int64_t j = 0; j < n; ++j) out[j] = v;
    return;
  }
  if (!std::isfinite(w.L) || std::isnan(g)) {  // NaN row, or a NaN G_r
    for (int64_t j = 0; j < n; ++j) out[j] = t[j] == -kInf ? 0.0 : kNan;
    return;
  }
  const double C = static_cast<double>(s.classes);
  const double b = g * s.a / C;
  double A, bq = 0.0, wy = 1.0;
  int64_t y = -1;
  const double* q = nullptr;
  if (s.probs) {
    q = a.in[s.target_input];
    bq = g * (1.0 - s.a);
    const ProbSums ps = ps_in != nullptr ? *ps_in : prob_sums(s, a, t);
    A = (1.0 - s.a) * (ps.wq + ps.wq_masked) + 2.0 * s.zs * w.L;
  } else {
    y = s.lr->target(a.row);
    wy = s.lr->weight(a.row);
    A = (1.0 - s.a) * wy + 2.0 * s.zs * wy * w.L;
  }
  if (s.a > 0.0) A += s.a / C * smooth_sums(s, t, n).w;
  const double factor = g * A / w.S;
  const double target_term = g * (1.0 - s.a) * wy;
  const double* u = a.in[0];
  for (int64_t j = 0; j < n; ++j) {
    if (t[j] == -kInf) {
      out[j] = 0.0;
      continue;
    }
    const double p = e[j] == 0.0 ? 0.0 : factor * e[j];  // no inf * 0
    double dt = p - weight_at(s, j) * (b + (q != nullptr ? bq * q[j] : 0.0));
    if (j == y) dt -= target_term;
    out[j] = a.scale * cap_deriv(s, u[j]) * dt;  // u[j] read before out[j] (may alias)
  }
}

}  // namespace

CeRowF64 ce_forward_row_f64(const CeSetup& s, const RowArgs64& a, bool active, CeWants wants,
                            double G, double* grad, double* work) {
  double* t = work;
  double* e = work + a.n;
  const Sweep w = sweep(s, a, t, e);
  CeRowF64 r;
  r.L = -kInf;
  r.tlp = -kInf;
  ProbSums ps;
  if (w.nan || (w.empty && s.empty_row == EmptyRow::kNan)) {
    r.L = r.H = r.loss = r.z = r.tlp = r.acc = kNan;
  } else if (!w.empty) {
    const double log_s = std::log(w.S);
    r.L = w.L;
    if (wants.entropy) {
      CompensatedSum h;
      for (int64_t j = 0; j < a.n; ++j) {
        if (e[j] != 0.0) h.add(e[j] * (t[j] - w.m));
      }
      r.H = log_s - h.value() / w.S;
    }
    if (active) {
      const double L = r.L;
      // accuracy's argmax: of u with a softcap and no mask (tanh keeps the
      // order and cannot tie entries that differ), else of t.
      const bool by_u = s.cap > 0.0f && s.mask_input < 0;
      if (s.probs) {
        ps = prob_sums(s, a, t);
        const double b = 1.0 - s.a;
        r.loss = b * (ps.wq * L - ps.wqt);
        if (b != 0.0 && ps.wq_masked != 0.0) r.loss += b * ps.wq_masked * kInf;
        r.tlp = ps.qt - ps.q * L;
        if (ps.q_masked != 0.0) r.tlp -= ps.q_masked * kInf;
        if (wants.accuracy) {
          const int64_t pred = first_argmax(by_u ? a.in[0] : t, a.n);
          r.acc = pred == first_argmax(a.in[s.target_input], a.n) ? 1.0 : 0.0;
        }
        r.z = s.zs * L * L;
      } else {
        const int64_t y = s.lr->target(a.row);
        const double wy = s.lr->weight(a.row);
        const double ty = t[y];
        const double c = (1.0 - s.a) * wy;
        if (c != 0.0) r.loss = c * (L - ty);
        r.z = s.zs * wy * L * L;
        r.tlp = ty - L;
        if (wants.accuracy) r.acc = first_argmax(by_u ? a.in[0] : t, a.n) == y ? 1.0 : 0.0;
      }
      if (s.a > 0.0) {
        const SmoothSums sm = smooth_sums(s, t, a.n);
        r.loss += s.a * (sm.w * L - sm.t) / static_cast<double>(s.classes);
      }
      r.loss += r.z;
    }
  }
  if (grad != nullptr) {
    if (active) {
      grad_row(s, a, G, w, t, e, s.probs && !w.nan && !w.empty ? &ps : nullptr, grad);
    } else {
      for (int64_t j = 0; j < a.n; ++j) grad[j] = 0.0;
    }
  }
  return r;
}

void ce_backward_row_f64(const CeSetup& s, const RowArgs64& a, double g, double* out,
                         double* work) {
  double* t = work;
  double* e = work + a.n;
  const Sweep w = sweep(s, a, t, e);
  grad_row(s, a, g, w, t, e, nullptr, out);
}

CeShardF64 ce_shard_scan_f64(const CeSetup& s, const RowArgs64& a, bool active, int64_t y_local,
                             bool entropy, bool accuracy, double* work) {
  CeShardF64 r;
  double* t = work;
  double* e = work + a.n;
  const Sweep w = sweep(s, a, t, e);
  if (a.n == 0) return r;
  r.m = w.empty ? -kInf : w.m;
  r.S = w.nan ? kNan : w.S;
  if (w.nan) return r;
  // A fully masked shard (w.empty; its terms are not written) still counts
  // its targets' probability on masked classes (q_masked, wq_masked).
  if (entropy && !w.empty) {
    CompensatedSum h;
    for (int64_t j = 0; j < a.n; ++j) {
      if (e[j] != 0.0) h.add(e[j] * (t[j] - w.m));
    }
    r.sum_et = h.value();
  }
  if (!active) return r;
  if (s.a > 0.0) {
    const SmoothSums sm = smooth_sums(s, t, a.n);
    r.sum_t = sm.t;
    r.sum_w = sm.w;
  }
  const bool by_u = s.cap > 0.0f && s.mask_input < 0;
  const double* rank_of = by_u ? a.in[0] : t;
  const int64_t pred = accuracy ? first_argmax(rank_of, a.n) : 0;
  if (accuracy) r.best = rank_of[pred];
  if (s.probs) {
    const ProbSums ps = prob_sums(s, a, t);
    r.qt = ps.qt, r.q = ps.q, r.q_masked = ps.q_masked;
    r.wqt = ps.wqt, r.wq = ps.wq, r.wq_masked = ps.wq_masked;
    if (accuracy) {
      const double* q = a.in[s.target_input];
      const int64_t qi = first_argmax(q, a.n);
      r.q_best = q[qi];
      r.hit = pred == qi;
    }
  } else if (y_local >= 0) {
    r.ty = t[y_local];
    r.hit = accuracy && pred == y_local;
  }
  return r;
}

void ce_shard_grad_f64(const CeSetup& s, const RowArgs64& a, double g, double L, double M,
                       double D, double A, int64_t y_local, double wy, double* out,
                       double* work) {
  const int64_t n = a.n;
  if (n == 0) return;
  double* t = work;
  double* e = work + n;
  form_logits(s, a, t);
  if (L == -kInf) {  // every logit of every shard masked
    const double v = s.empty_row == EmptyRow::kNan ? kNan : 0.0;
    for (int64_t j = 0; j < n; ++j) out[j] = v;
    return;
  }
  if (!std::isfinite(L) || std::isnan(g)) {
    for (int64_t j = 0; j < n; ++j) out[j] = t[j] == -kInf ? 0.0 : kNan;
    return;
  }
  const kernels::F64Terms loc = kernels::exp_terms_row_f64(t, n, e);
  const bool none = loc.sum == 0.0;  // this shard fully masked: every p_j = 0
  const double C = static_cast<double>(s.vocab);
  const double b = g * s.a / C;
  const double bq = s.probs ? g * (1.0 - s.a) : 0.0;
  const double* q = s.probs ? a.in[s.target_input] : nullptr;
  const double factor = none ? 0.0 : g * A * (std::exp(loc.max - M) / D);
  const double target_term = g * (1.0 - s.a) * wy;
  const double* u = a.in[0];
  for (int64_t j = 0; j < n; ++j) {
    if (t[j] == -kInf) {
      out[j] = 0.0;
      continue;
    }
    const double p = none || e[j] == 0.0 ? 0.0 : factor * e[j];  // no inf * 0
    double dt = p - weight_at(s, j) * (b + (q != nullptr ? bq * q[j] : 0.0));
    if (j == y_local) dt -= target_term;
    out[j] = a.scale * cap_deriv(s, u[j]) * dt;  // u[j] read before out[j] (may alias)
  }
}

}  // namespace smax::detail
