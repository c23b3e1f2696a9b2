// src/reference/cross_entropy.cc: see cross_entropy.h. float64 throughout.
#include "reference/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "reference/reference.h"
#include "reference/rows.h"
#include "smax/error.h"

namespace smax::reference {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

// A row view given in dropped form (src's rank - 1) as keepdim (axis size 1).
TensorView keepdim(const TensorView& v, const RefRows& R) {
  if (v.rank != static_cast<int>(R.shape.size()) - 1) return v;
  TensorView k = v;
  k.rank = v.rank + 1;
  for (int d = 0, e = 0; d < k.rank; ++d) {
    if (d == R.axis) {
      k.shape[d] = 1;
      k.strides[d] = 0;
    } else {
      k.shape[d] = v.shape[e];
      k.strides[d] = v.strides[e];
      ++e;
    }
  }
  return k;
}

std::vector<double> per_row(const char* fn, const TensorView& v, const RefRows& R) {
  return ref_row_values(fn, keepdim(v, R), R);
}

// x * y with 0 * inf = 0: error scales of terms whose weight is exactly 0
// (label_smoothing 1, z-loss off) must not turn NaN on an infinite L or t_y.
double mul0(double x, double y) { return x == 0.0 ? 0.0 : x * y; }

// The logits t (and u, before softcap and the additive mask) by row.
struct Logits {
  RefRows R;
  std::vector<double> t, u;
  double cap = 0.0;
  bool raw_key = false;  // argmax over u (softcap without an additive mask)
  double deriv(int64_t r, int64_t j) const {  // dt/du
    if (cap == 0.0) return 1.0;
    const double c = std::cosh(u[static_cast<size_t>(r * R.n + j)] / cap);
    return 1.0 / (c * c);  // 1 - tanh^2 without cancellation
  }
  const double* row(int64_t r) const { return t.data() + r * R.n; }
  /// First argmax of the row (over u when raw_key).
  int64_t argmax(int64_t r) const {
    const double* k = (raw_key ? u.data() : t.data()) + r * R.n;
    int64_t best = 0;
    for (int64_t j = 1; j < R.n; ++j) {
      if (k[j] > k[best]) best = j;
    }
    return best;
  }
};

Logits make_logits(const char* fn, const TensorView& src, double cap,
                   const SoftmaxOptions& options) {
  Logits lg;
  lg.cap = cap;
  SoftmaxOptions o = options;
  std::vector<double> mask;
  if (cap > 0.0 && options.additive_mask) {
    o.additive_mask.reset();
    // The mask broadcast to src's shape (right-aligned, stride 0 where it
    // broadcasts), read as plain values.
    const TensorView& m = *options.additive_mask;
    TensorView b = src;
    if (b.rank == 0) {
      b.rank = 1;
      b.shape[0] = 1;
    }
    b.data = m.data;
    for (int d = 0; d < b.rank; ++d) {
      const int md = d - (b.rank - m.rank);
      b.strides[d] = (md >= 0 && m.shape[md] != 1) ? m.strides[md] : 0;
    }
    SoftmaxOptions plain;
    plain.axis = options.axis;
    mask = ref_rows(fn, b, plain, false).values;
  }
  lg.raw_key = cap > 0.0 && !options.additive_mask;
  lg.R = ref_rows(fn, src, o, true);
  lg.u = lg.R.values;
  lg.t = lg.R.values;
  // Entries the bool mask hides stay -inf whatever the post-cap additive
  // mask holds there (NaN included), as without softcap.
  std::vector<char> hidden;
  if (!mask.empty() && options.bool_mask) {
    SoftmaxOptions only_bool;
    only_bool.axis = options.axis;
    only_bool.bool_mask = options.bool_mask;
    hidden = ref_masked(fn, src, only_bool);
  }
  for (size_t i = 0; i < lg.t.size(); ++i) {
    double v = lg.u[i];
    if (cap > 0.0 && std::isfinite(v)) v = cap * std::tanh(v / cap);
    if (!mask.empty() && (hidden.empty() || !hidden[i])) v += mask[i];
    lg.t[i] = v;
  }
  return lg;
}

// Row statistics of softmax(t).
struct RowStats {
  bool nan = false, empty = false;
  double L = -kInf;
  std::vector<double> p;
  int64_t argmax = 0;
};

RowStats stats(const double* t, int64_t n) {
  RowStats s;
  double m = -kInf;
  for (int64_t j = 0; j < n; ++j) {
    if (std::isnan(t[j]) || t[j] == kInf) s.nan = true;
    if (t[j] > m) {
      m = t[j];
      s.argmax = j;
    }
  }
  s.empty = !s.nan && m == -kInf;
  if (s.nan || s.empty) return s;
  double sum = 0.0;
  for (int64_t j = 0; j < n; ++j) sum += std::exp(t[j] - m);
  s.L = m + std::log(sum);
  // p from (t - m) and the sum, not exp(t - L): for |m| ~ FLT_MAX, m + log(sum)
  // rounds back to m in double.
  s.p.resize(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) s.p[static_cast<size_t>(j)] = std::exp(t[j] - m) / sum;
  return s;
}

// The gradient row of an empty row (no visible class: NaN under
// EmptyRow::kNan, else left as is, i.e. 0) or of a row with a NaN / +inf
// logit (NaN, masked entries 0); true when the row is one of those (written).
bool special_grad_row(const RowStats& st, const double* t, int64_t n, EmptyRow empty,
                      double* g) {
  if (st.empty) {
    if (empty == EmptyRow::kNan) std::fill(g, g + n, kNan);
    return true;
  }
  if (st.nan) {
    for (int64_t j = 0; j < n; ++j) g[j] = t[j] == -kInf ? 0.0 : kNan;
    return true;
  }
  return false;
}

struct Targets {
  bool probs = false;
  std::vector<double> index;  // class-index targets by row
  std::vector<double> q;      // probability rows (rows * n)
  std::vector<double> w;      // class weights (C), 1 without
  std::vector<char> active;
  std::vector<double> row_w;  // w[target] (0 ignored); 1 for probabilities
  double denominator = 0.0;
};

Targets make_targets(const char* fn, const TensorView* target, const LossOptions& loss,
                     const RefRows& R) {
  Targets tg;
  tg.w.assign(static_cast<size_t>(R.n), 1.0);
  if (loss.weight) tg.w = to_dense(*loss.weight);
  const size_t rows = static_cast<size_t>(R.rows);
  tg.active.assign(rows, 1);
  tg.row_w.assign(rows, 1.0);
  tg.denominator = static_cast<double>(rows);
  if (target == nullptr) return tg;
  if (target->dtype == DType::kF32) {
    tg.probs = true;
    SoftmaxOptions plain;
    plain.axis = R.axis;
    tg.q = ref_rows(fn, *target, plain, false).values;
    return tg;
  }
  tg.index = per_row(fn, *target, R);
  tg.denominator = 0.0;
  for (size_t r = 0; r < rows; ++r) {
    const double y = tg.index[r];
    if (y == static_cast<double>(loss.ignore_index)) {
      tg.active[r] = 0;
      tg.row_w[r] = 0.0;
      continue;
    }
    if (y < 0 || y >= static_cast<double>(R.n)) {
      throw Error(Status::kInvalidArgument, std::string(fn) + ": target out of range");
    }
    tg.row_w[r] = tg.w[static_cast<size_t>(y)];
    tg.denominator += tg.row_w[r];
  }
  return tg;
}

LossRef make_loss_ref(const Targets& tg, const LossOptions& loss, size_t rows) {
  LossRef L;
  L.rows.assign(rows, 0.0);
  L.rows_mag.assign(rows, 0.0);
  L.active = tg.active;
  L.denominator = tg.denominator;
  L.reduction = loss.reduction;
  L.empty_mean = loss.empty_mean;
  return L;
}

// G_r from dloss (dst's shape).
std::vector<double> coefficients(const char* fn, const LossRef& L, const TensorView& dloss,
                                 const RefRows& R) {
  std::vector<double> G(L.active.size(), 0.0);
  if (L.reduction == Reduction::kNone) {
    const std::vector<double> g = per_row(fn, dloss, R);
    for (size_t r = 0; r < G.size(); ++r) G[r] = L.active[r] ? g[r] : 0.0;
    return G;
  }
  double g = to_dense(dloss)[0];
  if (L.reduction == Reduction::kMean) {
    // Zero denominator with counted rows: PyTorch's w / sum w = 0 / 0.
    g = L.denominator != 0.0                  ? g / L.denominator
        : L.empty_mean == EmptyMean::kZero ? 0.0
                                             : kNan;
  }
  for (size_t r = 0; r < G.size(); ++r) G[r] = L.active[r] ? g : 0.0;
  return G;
}

}  // namespace

RefRows cross_entropy_logits(const char* fn, const TensorView& src, double softcap,
                             const SoftmaxOptions& options) {
  const Logits lg = make_logits(fn, src, softcap, options);
  RefRows R = lg.R;
  R.values = lg.t;
  return R;
}

double LossRef::reduce_with(const std::vector<double>& values, double den) const {
  double sum = 0.0;
  for (size_t r = 0; r < values.size(); ++r) {
    if (active[r]) sum += values[r];
  }
  if (reduction != Reduction::kMean) return sum;
  if (den == 0.0) return empty_mean == EmptyMean::kZero ? 0.0 : kNan;
  return sum / den;
}

double LossRef::reduce(const std::vector<double>& values) const {
  return reduce_with(values, denominator);
}

CrossEntropyRef cross_entropy(const TensorView& src, const TensorView& target,
                              const CrossEntropyOptions& ce, const SoftmaxOptions& options) {
  const char* fn = "reference::cross_entropy";
  const Logits lg = make_logits(fn, src, ce.softcap, options);
  const RefRows& R = lg.R;
  const Targets tg = make_targets(fn, &target, ce.loss, R);
  const size_t rows = static_cast<size_t>(R.rows);
  const double a = ce.label_smoothing, zs = ce.lse_square_scale, C = static_cast<double>(R.n);
  CrossEntropyRef out;
  out.loss = make_loss_ref(tg, ce.loss, rows);
  out.z.assign(rows, 0.0);
  out.lse.assign(rows, 0.0);
  out.entropy.assign(rows, 0.0);
  out.target_logprob.assign(rows, 0.0);
  out.accuracy.assign(rows, 0.0);
  out.lse_mag.assign(rows, 0.0);
  out.entropy_mag.assign(rows, 0.0);
  out.target_logprob_mag.assign(rows, 0.0);
  out.t_max.assign(rows, 0.0);
  const bool nan_empty = options.empty_row == EmptyRow::kNan;
  for (size_t r = 0; r < rows; ++r) {
    const double* t = lg.row(static_cast<int64_t>(r));
    const int64_t n = R.n;
    const RowStats st = stats(t, n);
    const bool act = tg.active[r] != 0;
    double tmax = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      if (std::isfinite(t[j])) tmax = std::max(tmax, std::fabs(t[j]));
    }
    out.t_max[r] = tmax;
    double loss = 0.0, z = 0.0, L, H, tlp = 0.0, acc = 0.0, mag = 0.0;
    if (st.nan || (st.empty && nan_empty)) {
      loss = z = L = H = tlp = acc = kNan;
    } else if (st.empty) {
      L = -kInf;
      H = 0.0;
      tlp = -kInf;
    } else {
      L = st.L;
      H = 0.0;
      double pabs_t = 0.0;
      for (int64_t j = 0; j < n; ++j) {
        if (t[j] == -kInf) continue;
        H -= st.p[static_cast<size_t>(j)] * (t[j] - L);
        pabs_t += st.p[static_cast<size_t>(j)] * std::fabs(t[j]);
      }
      out.entropy_mag[r] = 1.0 + std::fabs(L) + pabs_t + std::fabs(H);
      // Smoothing part over the unmasked classes.
      double smooth = 0.0, smooth_mag = 0.0;
      for (int64_t j = 0; j < n; ++j) {
        if (t[j] == -kInf) continue;
        const double w = tg.w[static_cast<size_t>(j)];
        smooth += w * (L - t[j]);
        smooth_mag += std::fabs(w) * (1.0 + std::fabs(L) + std::fabs(t[j]));
      }
      if (tg.probs) {
        const double* q = tg.q.data() + r * static_cast<size_t>(n);
        double wq_lt = 0.0, qt = 0.0, wq_mag = 0.0;
        bool inf_mass = false, inf_q = false;
        int64_t qarg = 0;
        for (int64_t j = 0; j < n; ++j) {
          if (q[j] > q[qarg]) qarg = j;
          const double w = tg.w[static_cast<size_t>(j)];
          if (t[j] == -kInf) {
            if (w * q[j] != 0.0 && a != 1.0) inf_mass = true;
            if (q[j] != 0.0) inf_q = true;
            continue;
          }
          wq_lt += w * q[j] * (L - t[j]);
          qt += q[j] * (t[j] - L);
          wq_mag += std::fabs(w * q[j]) * (1.0 + std::fabs(L) + std::fabs(t[j]));
        }
        loss = (1.0 - a) * wq_lt + a / C * smooth + (inf_mass ? kInf : 0.0);
        z = zs * L * L;
        tlp = qt - (inf_q ? kInf : 0.0);
        acc = lg.argmax(static_cast<int64_t>(r)) == qarg ? 1.0 : 0.0;
        mag = mul0((1.0 - a), wq_mag) + mul0(a / C, smooth_mag);
        out.target_logprob_mag[r] = 1.0 + std::fabs(L) + tmax;
      } else if (act) {
        const int64_t y = static_cast<int64_t>(tg.index[r]);
        const double wy = tg.row_w[r];
        const double nll = L - t[y];
        loss = ((1.0 - a) * wy != 0.0 ? (1.0 - a) * wy * nll : 0.0) + a / C * smooth;
        z = zs * wy * L * L;
        tlp = t[y] - L;
        acc = lg.argmax(static_cast<int64_t>(r)) == y ? 1.0 : 0.0;
        mag = mul0((1.0 - a) * std::fabs(wy), 1.0 + std::fabs(L) + std::fabs(t[y])) +
              mul0(a / C, smooth_mag);
        out.target_logprob_mag[r] = 1.0 + std::fabs(L) + std::fabs(t[y]);
        mag += mul0(2.0 * zs * std::fabs(wy), (1.0 + std::fabs(L)) * std::fabs(L));
      }
      if (tg.probs) mag += mul0(2.0 * zs, (1.0 + std::fabs(L)) * std::fabs(L));
      loss += z;
    }
    out.lse[r] = L;
    out.lse_mag[r] = 1.0 + (std::isfinite(L) ? std::fabs(L) : 0.0);
    out.entropy[r] = H;
    if (!act) {
      loss = z = tlp = acc = 0.0;
      mag = 0.0;
    }
    out.loss.rows[r] = loss;
    out.loss.rows_mag[r] = mag;
    out.z[r] = z;
    out.target_logprob[r] = tlp;
    out.accuracy[r] = acc;
  }
  return out;
}

GradRef cross_entropy_backward(const TensorView& src, const TensorView& target,
                               const TensorView& dloss, const CrossEntropyOptions& ce,
                               const SoftmaxOptions& options) {
  const char* fn = "reference::cross_entropy_backward";
  const Logits lg = make_logits(fn, src, ce.softcap, options);
  const RefRows& R = lg.R;
  const Targets tg = make_targets(fn, &target, ce.loss, R);
  const size_t rows = static_cast<size_t>(R.rows);
  const LossRef L = make_loss_ref(tg, ce.loss, rows);
  const std::vector<double> G = coefficients(fn, L, dloss, R);
  const double a = ce.label_smoothing, zs = ce.lse_square_scale, C = static_cast<double>(R.n);
  const int64_t n = R.n;
  std::vector<double> by_row(rows * static_cast<size_t>(n), 0.0), mag(by_row.size(), 0.0);
  std::vector<double> t_round(by_row.size(), 0.0);
  const bool cap_mask = ce.softcap > 0.0f && options.additive_mask.has_value();
  for (size_t r = 0; r < rows; ++r) {
    if (!tg.active[r]) continue;
    const double* t = lg.row(static_cast<int64_t>(r));
    double* g = by_row.data() + r * static_cast<size_t>(n);
    double* m = mag.data() + r * static_cast<size_t>(n);
    const RowStats st = stats(t, n);
    if (cap_mask && !st.empty && !st.nan) {
      for (int64_t j = 0; j < n; ++j) {
        if (t[j] == -kInf) continue;
        t_round[r * static_cast<size_t>(n) + static_cast<size_t>(j)] =
            0.03 * (std::fabs(t[j]) + std::fabs(st.L));
      }
    }
    if (special_grad_row(st, t, n, options.empty_row, g)) continue;
    double W_U = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      if (t[j] > -kInf) W_U += tg.w[static_cast<size_t>(j)];
    }
    double A;
    int64_t y = -1;
    double D = 0.0;
    const double* q = tg.probs ? tg.q.data() + r * static_cast<size_t>(n) : nullptr;
    if (tg.probs) {
      double wq = 0.0;
      for (int64_t j = 0; j < n; ++j) wq += tg.w[static_cast<size_t>(j)] * q[j];
      A = (1.0 - a) * wq + a / C * W_U + 2.0 * zs * st.L;
    } else {
      y = static_cast<int64_t>(tg.index[r]);
      const double wy = tg.row_w[r];
      A = (1.0 - a) * wy + a / C * W_U + 2.0 * zs * wy * st.L;
      D = (1.0 - a) * wy;
    }
    for (int64_t j = 0; j < n; ++j) {
      if (t[j] == -kInf) continue;
      const double w = tg.w[static_cast<size_t>(j)];
      const double B = tg.probs ? w * ((1.0 - a) * q[j] + a / C) : a / C * w;
      const double p = st.p[static_cast<size_t>(j)];
      const double f = R.scale * lg.deriv(static_cast<int64_t>(r), j) * G[r];
      g[j] = f * (p * A - B - (j == y ? D : 0.0));
      m[j] = std::fabs(f) * (p * std::fabs(A) + std::fabs(B) + (j == y ? std::fabs(D) : 0.0));
    }
  }
  return GradRef{R.scatter(by_row), R.scatter(mag), R.scatter(t_round)};
}

LossRef z_loss(const TensorView& src, const TensorView* target, double c, const LossOptions& loss,
               const SoftmaxOptions& options) {
  const char* fn = "reference::z_loss";
  const Logits lg = make_logits(fn, src, 0.0, options);
  const Targets tg = make_targets(fn, target, loss, lg.R);
  LossRef out = make_loss_ref(tg, loss, static_cast<size_t>(lg.R.rows));
  for (size_t r = 0; r < out.rows.size(); ++r) {
    if (!tg.active[r]) continue;
    const RowStats st = stats(lg.row(static_cast<int64_t>(r)), lg.R.n);
    if (st.nan || (st.empty && options.empty_row == EmptyRow::kNan)) {
      out.rows[r] = kNan;
    } else if (!st.empty) {
      out.rows[r] = c * tg.row_w[r] * st.L * st.L;
      out.rows_mag[r] = c * std::fabs(tg.row_w[r]) * (1.0 + std::fabs(st.L)) * std::fabs(st.L);
    }
  }
  return out;
}

GradRef z_loss_backward(const TensorView& src, const TensorView* target, const TensorView& dloss,
                        double c, const LossOptions& loss, const SoftmaxOptions& options) {
  const char* fn = "reference::z_loss_backward";
  const Logits lg = make_logits(fn, src, 0.0, options);
  const RefRows& R = lg.R;
  const Targets tg = make_targets(fn, target, loss, R);
  const LossRef L = make_loss_ref(tg, loss, static_cast<size_t>(R.rows));
  const std::vector<double> G = coefficients(fn, L, dloss, R);
  const int64_t n = R.n;
  std::vector<double> by_row(static_cast<size_t>(R.rows * n), 0.0), mag(by_row.size(), 0.0);
  for (int64_t r = 0; r < R.rows; ++r) {
    if (!tg.active[static_cast<size_t>(r)]) continue;
    const double* t = lg.row(r);
    double* g = by_row.data() + r * n;
    double* m = mag.data() + r * n;
    const RowStats st = stats(t, n);
    if (special_grad_row(st, t, n, options.empty_row, g)) continue;
    const double f0 = R.scale * G[static_cast<size_t>(r)] * 2.0 * c *
                      tg.row_w[static_cast<size_t>(r)];
    const double f = f0 * st.L;
    for (int64_t j = 0; j < n; ++j) {
      // Masked entries exactly 0, also for a NaN G (0 / 0 mean).
      g[j] = t[j] == -kInf ? 0.0 : f * st.p[static_cast<size_t>(j)];
      // |g_j| plus L's absolute error (~2u from the f32 exps) in 4e-6 units:
      // 4e-6 (|L| + 0.1) |f0 p_j| (smax/cross_entropy.h; L near 0 cancels).
      m[j] = std::fabs(f0 * st.p[static_cast<size_t>(j)]) * (std::fabs(st.L) + 0.1);
    }
  }
  return GradRef{R.scatter(by_row), R.scatter(mag), {}};
}

namespace {

struct SphereRow {
  bool empty = false;
  double D = 0.0, mean = 0.0, sigma = 0.0, zy = kNan;
};

SphereRow sphere(const double* t, int64_t n, int64_t y) {
  SphereRow s;
  double sum = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    if (t[j] == -kInf) continue;
    sum += t[j];
    s.D += 1.0;
  }
  if (s.D == 0.0) {
    s.empty = true;
    return s;
  }
  s.mean = sum / s.D;
  double m2 = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    if (t[j] != -kInf) m2 += (t[j] - s.mean) * (t[j] - s.mean);
  }
  s.sigma = std::sqrt(m2 / s.D);
  s.zy = t[y] == -kInf ? kNan : (t[y] - s.mean) / s.sigma;
  return s;
}

double softplus(double x) { return std::max(x, 0.0) + std::log1p(std::exp(-std::fabs(x))); }
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

}  // namespace

LossRef spherical_z_loss(const TensorView& src, const TensorView& target, double a, double b,
                         const LossOptions& loss, const SoftmaxOptions& options) {
  const char* fn = "reference::spherical_z_loss";
  const Logits lg = make_logits(fn, src, 0.0, options);
  const Targets tg = make_targets(fn, &target, loss, lg.R);
  LossRef out = make_loss_ref(tg, loss, static_cast<size_t>(lg.R.rows));
  for (size_t r = 0; r < out.rows.size(); ++r) {
    if (!tg.active[r]) continue;
    const SphereRow s =
        sphere(lg.row(static_cast<int64_t>(r)), lg.R.n, static_cast<int64_t>(tg.index[r]));
    if (s.empty) {
      out.rows[r] = options.empty_row == EmptyRow::kNan ? kNan : 0.0;
      continue;
    }
    out.rows[r] = tg.row_w[r] * softplus(a * (b - s.zy)) / a;
    out.rows_mag[r] = std::fabs(tg.row_w[r]) * (1.0 + std::fabs(out.rows[r]) + std::fabs(s.zy));
  }
  return out;
}

GradRef spherical_z_loss_backward(const TensorView& src, const TensorView& target,
                                  const TensorView& dloss, double a, double b,
                                  const LossOptions& loss, const SoftmaxOptions& options) {
  const char* fn = "reference::spherical_z_loss_backward";
  const Logits lg = make_logits(fn, src, 0.0, options);
  const RefRows& R = lg.R;
  const Targets tg = make_targets(fn, &target, loss, R);
  const LossRef L = make_loss_ref(tg, loss, static_cast<size_t>(R.rows));
  const std::vector<double> G = coefficients(fn, L, dloss, R);
  const int64_t n = R.n;
  std::vector<double> by_row(static_cast<size_t>(R.rows * n), 0.0), mag(by_row.size(), 0.0);
  for (int64_t r = 0; r < R.rows; ++r) {
    const size_t ri = static_cast<size_t>(r);
    if (!tg.active[ri]) continue;
    const double* t = lg.row(r);
    double* g = by_row.data() + r * n;
    double* m = mag.data() + r * n;
    const int64_t y = static_cast<int64_t>(tg.index[ri]);
    const SphereRow s = sphere(t, n, y);
    if (s.empty) {
      if (options.empty_row == EmptyRow::kNan) std::fill(g, g + n, kNan);
      continue;
    }
    const double c0 = -tg.row_w[ri] * sigmoid(a * (b - s.zy)) / s.sigma;
    const double f = R.scale * G[ri] * c0;
    for (int64_t k = 0; k < n; ++k) {
      if (t[k] == -kInf) continue;
      const double zk = (t[k] - s.mean) / s.sigma;
      g[k] = f * ((k == y ? 1.0 : 0.0) - 1.0 / s.D - s.zy * zk / s.D);
      m[k] = std::fabs(f) * (1.0 + std::fabs(s.zy * zk));
    }
  }
  return GradRef{R.scatter(by_row), R.scatter(mag), {}};
}

}  // namespace smax::reference
