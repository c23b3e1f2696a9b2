// src/reference/bounds.cc: the documented bounds of the CLI table's ops
// (see bounds.h).
#include "reference/bounds.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <functional>
#include <limits>

#include "reference/cross_entropy.h"
#include "reference/reference.h"
#include "reference/rescaled.h"
#include "reference/reweight.h"
#include "reference/sparse.h"
#include "smax/error.h"
#include "smax/smax.h"

namespace smax::reference {
namespace {

namespace ref = ::smax::reference;

constexpr double kU = 0x1p-24;
constexpr double kInfD = std::numeric_limits<double>::infinity();
constexpr const char* kFn = "op_bounds";

bool ends_with(const std::string& s, const char* tail) {
  const size_t n = std::char_traits<char>::length(tail);
  return s.size() >= n && s.compare(s.size() - n, n, tail) == 0;
}

// The ops whose output follows the loss's reduction (OutShape::kLoss in
// testing/op_table.h), forward and backward.
bool is_loss_op(const std::string& name) {
  static const char* const kLosses[] = {"sparsemax_loss", "entmax15_loss", "entmax_bisect_loss",
                                        "sparse_softmax_loss", "stablemax_cross_entropy",
                                        "cross_entropy", "z_loss", "spherical_z_loss"};
  for (const char* l : kLosses) {
    if (name == l || name == std::string(l) + "_backward") return true;
  }
  return false;
}

// The call's parameters; a missing one reads as 0.
struct Params {
  const std::map<std::string, double>& m;
  double operator()(const char* name) const {
    const auto it = m.find(name);
    return it == m.end() ? 0.0 : it->second;
  }
};

// CrossEntropyOptions from a call's parameters (label_smoothing,
// lse_square_scale, softcap; absent ones 0) and loss options.
CrossEntropyOptions ce_options(const Params& P, const LossOptions& loss) {
  CrossEntropyOptions ce;
  ce.loss = loss;
  ce.label_smoothing = static_cast<float>(P("label_smoothing"));
  ce.lse_square_scale = static_cast<float>(P("lse_square_scale"));
  ce.softcap = static_cast<float>(P("softcap"));
  return ce;
}


// A per-row view (targets) in the keepdim form that ref_row_values
// broadcasts: the "without the axis" form gets the axis back with size 1.
TensorView keepdim_view(const BoundCall& call, const TensorView& o) {
  TensorView v = o;
  const int rank = call.x.rank;
  const int ax = static_cast<int>(call.options.axis < 0 ? call.options.axis + rank : call.options.axis);
  if (rank > 0 && v.rank == rank - 1) {
    for (int d = v.rank; d > ax; --d) {
      v.shape[d] = v.shape[d - 1];
      v.strides[d] = v.strides[d - 1];
    }
    v.shape[ax] = 1;
    v.strides[ax] = 0;
    v.rank += 1;
  }
  return v;
}

// The re-weighting normalisers (bounds_reweight.cc): true for one of them
// (forward or backward), with its kind in *op when op is not null.
bool reweight_op(const std::string& name, ReweightOp* op) {
  static const std::pair<const char*, ReweightOp> kOps[] = {
      {"self_adjust_softmax", ReweightOp::kSelfAdjust},
      {"sigmoid_normalizer", ReweightOp::kSigmoid},
      {"softplus_normalizer", ReweightOp::kSoftplus},
      {"power_softmax", ReweightOp::kPower},
      {"probability_temperature", ReweightOp::kProbabilityTemperature},
      {"logit_standardization", ReweightOp::kLogitStandardization}};
  for (const auto& k : kOps) {
    if (name == k.first || name == std::string(k.first) + "_backward") {
      if (op) *op = k.second;
      return true;
    }
  }
  return false;
}

// Per-row loss coefficient c_r = G_r * w[target_r] (0 for ignored rows) and
// the kMean denominator.
struct LossRows {
  std::vector<double> w;  // per row weight (0 ignored)
  double den = 0.0;
  std::vector<double> G;  // per row upstream factor (backward)
};
LossRows loss_rows(const BoundCall& c, const RefRows& R, bool backward) {
  LossRows L;
  const std::vector<double> tg = ref::ref_row_values(kFn, keepdim_view(c, c.target), R);
  std::vector<double> cw;
  if (c.loss.weight) cw = ref::to_dense(*c.loss.weight);
  L.w.assign(static_cast<size_t>(R.rows), 0.0);
  for (int64_t r = 0; r < R.rows; ++r) {
    const int64_t t = static_cast<int64_t>(tg[static_cast<size_t>(r)]);
    if (t == c.loss.ignore_index) continue;
    L.w[static_cast<size_t>(r)] = cw.empty() ? 1.0 : cw[static_cast<size_t>(t)];
    L.den += L.w[static_cast<size_t>(r)];
  }
  if (backward) {
    const std::vector<double> dl = ref::to_dense(c.dy);
    L.G.assign(static_cast<size_t>(R.rows), 0.0);
    for (int64_t r = 0; r < R.rows; ++r) {
      double G = c.loss.reduction == Reduction::kNone ? dl[static_cast<size_t>(r)] : dl[0];
      if (c.loss.reduction == Reduction::kMean) G /= L.den;
      L.G[static_cast<size_t>(r)] = G;
    }
  }
  return L;
}

// Reduces per-row bounds like the loss: kNone as is, else one value.
std::vector<double> reduce_bounds(Reduction reduction, const std::vector<double>& rows, double den,
                                  const std::vector<double>& ref) {
  if (reduction == Reduction::kNone) return rows;
  double s = 0.0;
  for (double b : rows) s += b;
  if (reduction == Reduction::kMean) s /= den;
  const double v = ref.empty() ? 0.0 : ref[0];
  return {s + 0x1p-23 * (std::isfinite(v) ? std::fabs(v) : 0.0) + 1e-30};
}

// The per-row losses (reduction none) of a sparse loss or
// stablemax_cross_entropy forward, from their oracles.
std::vector<double> per_row_losses(const std::string& name, const BoundCall& c) {
  LossOptions none = c.loss;
  none.reduction = Reduction::kNone;
  if (name == "stablemax_cross_entropy") return ref::stablemax_cross_entropy(c.x, c.target, none, c.options);
  const Params P{c.params};
  SparseLossSpec spec;
  if (name == "sparsemax_loss") {
    spec.which = SparseLossSpec::kSparsemax;
  } else if (name == "entmax15_loss") {
    spec.which = SparseLossSpec::kEntmax15;
  } else if (name == "entmax_bisect_loss") {
    spec.which = SparseLossSpec::kBisect;
    spec.bisect.alpha = static_cast<float>(P("alpha"));
    spec.bisect.n_iter = static_cast<int>(P("n_iter"));
  } else {
    spec.which = SparseLossSpec::kTopK;
    spec.k = static_cast<int64_t>(P("k"));
    spec.force_target = c.force_target;
  }
  return ref::sparse_loss(spec, c.x, c.target, none, c.options);
}

// Bounds for the table ops (documented in each op's header).
ElementBounds table_bounds(const std::string& name, const BoundCall& e, const std::vector<double>& ref) {
  const Params P{e.params};
  ElementBounds ex;
  const bool needs_dy = ends_with(name, "_backward");
  const bool loss_op = is_loss_op(name);
  const bool same_shape = !loss_op && name != "gumbel_max" && name != "sample" && name != "softmax_topk";
  const size_t count = ref.size();
  ex.bound.assign(count, 0.0);
  ex.exact_zero.assign(count, 0);
  ex.dot_gap.assign(count, 0.0);
  const SoftmaxOptions o = e.options;
  const bool reads_y_only = name == "probability_temperature";
  // Backward passes that read only the saved output y (not src).
  const bool from_y = name == "sparsemax_backward" || name == "entmax15_backward" ||
                      name == "entmax_bisect_backward" || name == "sparse_softmax_backward" ||
                      name == "sigmoid_normalizer_backward";
  // Rows of the logits (for ops reading y: y's rows as logits).
  const TensorView in = reads_y_only || name == "probability_temperature_backward" ? e.y : e.x;
  const ref::RefRows R = ref::ref_rows(kFn, from_y ? e.y : in, o, !from_y);
  const double sigma = R.scale;
  auto set_row = [&](int64_t r, const Row& b) {
    for (int64_t k = 0; k < R.n; ++k) ex.bound[static_cast<size_t>(dense_index(R, r, k))] = b[static_cast<size_t>(k)];
  };
  auto ref_row = [&](int64_t r) {
    Row v(static_cast<size_t>(R.n));
    for (int64_t k = 0; k < R.n; ++k) v[static_cast<size_t>(k)] = ref[static_cast<size_t>(dense_index(R, r, k))];
    return v;
  };
  // Masked entries (logit -inf) of elementwise outputs: exact 0 where the
  // reference is 0.
  if (same_shape || (loss_op && needs_dy)) {
    const ref::RefRows T = from_y ? ref::ref_rows(kFn, e.y, o, true) : R;
    for (int64_t r = 0; r < T.rows; ++r) {
      for (int64_t k = 0; k < T.n; ++k) {
        const size_t i = static_cast<size_t>(dense_index(T, r, k));
        if (T.row(r)[k] == -kInfD && ref[i] == 0.0) ex.exact_zero[i] = 1;
      }
    }
  }
  Row g_all;
  ref::RefRows G;
  if (needs_dy && same_shape) G = ref::ref_rows(kFn, e.dy, o, false);
  auto grow = [&](int64_t r) { return G.row_copy(r); };

  // Per-row alpha / s of the variants (group "options").
  std::vector<double> prow;
  if (e.row_param) prow = ref::ref_row_values(kFn, *e.row_param, R);
  if (name == "sparsemax" || name == "entmax15" || name == "entmax_bisect") {
    double alpha0 = name == "sparsemax" ? 2.0 : name == "entmax15" ? 1.5 : P("alpha");
    alpha0 = static_cast<float>(alpha0);
    for (int64_t r = 0; r < R.rows; ++r) {
      const double alpha = prow.empty() ? alpha0 : static_cast<float>(prow[static_cast<size_t>(r)]);
      const Row y = ref_row(r);
      Row b(y.size());
      if (alpha == 1.0) {  // softmax's bound
        for (size_t i = 0; i < y.size(); ++i) b[i] = softmax_bound(y[i]);
      } else {
        for (size_t i = 0; i < y.size(); ++i) b[i] = entmax_forward_bound(y[i], alpha, R.n);
      }
      set_row(r, b);
    }
    return ex;
  }
  if (name == "sparse_softmax" || name == "ssmax" || name == "sigmoid_normalizer" ||
      name == "probability_temperature" || name == "gumbel_softmax" || name == "softmax_topk") {
    for (size_t i = 0; i < count; ++i) ex.bound[i] = 2e-6 * std::fabs(ref[i]) + 1e-36;
    if (name == "gumbel_softmax" && P("hard") != 0) std::fill(ex.bound.begin(), ex.bound.end(), 0.0);
    return ex;
  }
  if (name == "clipped_softmax" || name == "clipped_softmax_backward") {
    const double gamma = static_cast<float>(P("gamma"));
    const double zeta = static_cast<float>(P("zeta"));
    for (int64_t r = 0; r < R.rows; ++r) {
      set_row(r, name == "clipped_softmax"
                     ? ref::clipped_softmax_bound_row(R.row_copy(r), gamma, zeta, o.empty_row)
                     : ref::clipped_softmax_vjp_bound_row(R.row_copy(r), grow(r), gamma, zeta,
                                                          sigma, o.empty_row));
    }
    return ex;
  }
  if (name == "stablemax") {
    for (size_t i = 0; i < count; ++i) ex.bound[i] = 1e-6 * std::fabs(ref[i]) + 1e-36;
    return ex;
  }
  if (name == "softpick") {
    const float eps = static_cast<float>(P("eps"));
    for (int64_t r = 0; r < R.rows; ++r) {
      set_row(r, softpick_forward_bound(ref::softpick_row(R.row_copy(r), eps, o.empty_row)));
    }
    return ex;
  }
  if (reweight_op(name, nullptr)) {
    // include/smax/reweight.h, one row at a time (bounds_reweight.cc).
    const bool bw = needs_dy;
    ReweightBound rb;
    reweight_op(name, &rb.op);
    rb.sa.normalized = P("normalized") != 0;
    rb.sp.head_dim = static_cast<int64_t>(e.params.count("head_dim") ? P("head_dim") : 0);
    rb.sp.power = static_cast<float>(e.params.count("power") ? P("power") : 1.0);
    rb.p = static_cast<int>(P("p"));
    rb.T = static_cast<float>(P("T"));
    rb.ls.temperature = static_cast<float>(e.params.count("T") ? P("T") : 1.0);
    const bool softplus = rb.op == ReweightOp::kSoftplus;
    std::vector<double> zdense;
    if (softplus) zdense = ref::softplus_z(e.x, rb.sp, o);
    std::vector<double> yref;
    if (!bw) yref = ref;
    else if (softplus) yref = ref::softplus_normalizer(e.x, rb.sp, o);
    else if (rb.op == ReweightOp::kLogitStandardization) yref = ref::logit_standardization(e.x, rb.ls, o);
    else if (rb.op == ReweightOp::kPower) yref = ref::power_softmax(e.x, rb.p, o);
    else if (rb.op == ReweightOp::kProbabilityTemperature) yref = ref::probability_temperature(e.y, rb.T, o);
    for (int64_t r = 0; r < R.rows; ++r) {
      Row t = R.row_copy(r);
      double lambda = 1.0;
      if (softplus) {
        Row z(t.size());
        for (int64_t k = 0; k < R.n; ++k) z[static_cast<size_t>(k)] = zdense[static_cast<size_t>(dense_index(R, r, k))];
        // lambda = dz/dt (f32), as the op forms it.
        int64_t N = 0;
        for (double v : t) N += v != -kInfD;
        lambda = static_cast<float>(std::log(static_cast<double>(N)) / std::log(static_cast<double>(rb.sp.head_dim)));
        t = z;
      }
      const size_t n = t.size();
      Row y(n, 0.0);
      if (!yref.empty()) {
        for (int64_t k = 0; k < R.n; ++k) y[static_cast<size_t>(k)] = yref[static_cast<size_t>(dense_index(R, r, k))];
      }
      if (!bw) {
        set_row(r, reweight_forward_bound(rb, t, y));
        continue;
      }
      // p_j = 0, T > 1: "+-inf (NaN where dy_j == <dy,y>)" (the header);
      // which one depends on the rounding of dy_j - <dy,y>.
      if (rb.op == ReweightOp::kProbabilityTemperature && row_finite_visible(t) && rb.T > 1.0f) {
        for (size_t j = 0; j < n; ++j) {
          if (t[j] != 0.0) continue;
          ex.overflow_ok.resize(count, 0);
          ex.overflow_ok[static_cast<size_t>(dense_index(R, r, static_cast<int64_t>(j)))] = 1;
        }
      }
      set_row(r, reweight_backward_bound(rb, t, grow(r), y, ref_row(r), sigma, lambda));
    }
    return ex;
  }
  if (name == "sparsemax_backward" || name == "entmax15_backward" || name == "entmax_bisect_backward" ||
      name == "sparse_softmax_backward") {
    const double alpha0 = name == "sparsemax_backward" ? 2.0 : name == "entmax15_backward" ? 1.5
                   : name == "sparse_softmax_backward" ? 1.0 : static_cast<float>(P("alpha"));
    for (int64_t r = 0; r < R.rows; ++r) {
      const double alpha = prow.empty() ? alpha0 : static_cast<float>(prow[static_cast<size_t>(r)]);
      const Row y = R.row_copy(r), g = grow(r);
      Row b(y.size(), 1e-30);
      if (alpha == 1.0) {  // softmax_backward's bound (+ its documented dot gap)
        if (vjp_row_overflows(y.data(), g.data(), static_cast<int64_t>(y.size()))) {
          ex.overflow_ok.resize(count, 0);
          for (size_t i = 0; i < y.size(); ++i) {
            ex.overflow_ok[static_cast<size_t>(dense_index(R, r, static_cast<int64_t>(i)))] = 1;
          }
        }
        BackwardRow row;
        for (size_t i = 0; i < y.size(); ++i) row.add(y[i], g[i]);
        for (size_t i = 0; i < y.size(); ++i) {
          b[i] = softmax_backward_bound(sigma, y[i], g[i], row);
          ex.dot_gap[static_cast<size_t>(dense_index(R, r, static_cast<int64_t>(i)))] =
              softmax_backward_dot_gap(sigma, y[i], row);
        }
      } else {
        b = entmax_backward_bound(y, g, ref_row(r), alpha, sigma);
      }
      set_row(r, b);
    }
    return ex;
  }
  if (name == "ssmax_backward") {
    const ref::RefRows Y = ref::ref_rows(kFn, e.y, o, false);
    const double s0 = static_cast<float>(P("s"));
    const int64_t fixed_n = static_cast<int64_t>(P("fixed_n"));
    for (int64_t r = 0; r < R.rows; ++r) {
      const double s = prow.empty() ? s0 : static_cast<float>(prow[static_cast<size_t>(r)]);
      const Row t = R.row_copy(r), y = Y.row_copy(r), g = grow(r);
      const int64_t nn = ref::ssmax_n(t, fixed_n);
      const double cf = nn > 0 ? ref::ssmax_factor(s, nn, true) : 0.0;
      Row gap;  // softmax_backward's dot term (the same kernel; smax/rescaled.h).
      const Row b = ssmax_backward_bound(y, g, sigma * cf, &gap);
      const bool ovf = vjp_row_overflows(y.data(), g.data(), static_cast<int64_t>(y.size()));
      for (size_t i = 0; i < y.size(); ++i) {
        ex.dot_gap[static_cast<size_t>(dense_index(R, r, static_cast<int64_t>(i)))] = gap[i];
        if (ovf) {
          ex.overflow_ok.resize(count, 0);
          ex.overflow_ok[static_cast<size_t>(dense_index(R, r, static_cast<int64_t>(i)))] = 1;
        }
      }
      set_row(r, b);
    }
    return ex;
  }
  if (name == "softpick_backward") {
    const float eps = static_cast<float>(P("eps"));
    for (int64_t r = 0; r < R.rows; ++r) {
      const Row t = R.row_copy(r);
      set_row(r, softpick_backward_bound(t, grow(r), ref::softpick_row(t, eps, o.empty_row), sigma));
    }
    return ex;
  }
  if (name == "stablemax_backward") {
    for (int64_t r = 0; r < R.rows; ++r) {
      set_row(r, stablemax_backward_bound(R.row_copy(r), grow(r), sigma, o.empty_row));
    }
    return ex;
  }
  // ---- losses -------------------------------------------------------------------------
  const bool sparse_loss = name.rfind("sparsemax_loss", 0) == 0 || name.rfind("entmax15_loss", 0) == 0 ||
                           name.rfind("entmax_bisect_loss", 0) == 0 || name.rfind("sparse_softmax_loss", 0) == 0;
  const bool stable_ce = name.rfind("stablemax_cross_entropy", 0) == 0;
  if ((sparse_loss || stable_ce) && !needs_dy) {
    // Per-row weighted losses from the same oracle with reduction none.
    const std::vector<double> rows = per_row_losses(name, e);
    const LossRows L = loss_rows(e, R, needs_dy);
    const bool wide = name.rfind("sparse_softmax_loss", 0) == 0 ||
                      (name.rfind("entmax_bisect_loss", 0) == 0 && static_cast<float>(P("alpha")) == 1.0f);
    std::vector<double> rb(rows.size());
    for (size_t r = 0; r < rows.size(); ++r) {
      const double Lr = std::isfinite(rows[r]) ? std::fabs(rows[r]) : 0.0;
      const double w = std::fabs(L.w[r]);
      rb[r] = stable_ce ? 1e-6 * Lr + 1e-30 + kU * Lr : (wide ? 2e-6 : 1e-6) * (w + Lr) + kU * Lr;
    }
    ex.bound = reduce_bounds(e.loss.reduction, rb, L.den, ref);
    return ex;
  }
  if (sparse_loss || stable_ce) {
    const LossRows L = loss_rows(e, R, needs_dy);
    double alpha = name.rfind("sparsemax", 0) == 0 ? 2.0 : name.rfind("entmax15", 0) == 0 ? 1.5
                   : name.rfind("sparse_softmax", 0) == 0 ? 1.0 : static_cast<float>(P("alpha"));
    const std::vector<double> tg = ref::ref_row_values(kFn, keepdim_view(e, e.target), R);
    for (int64_t r = 0; r < R.rows; ++r) {
      const double cs = std::fabs(L.G[static_cast<size_t>(r)] * L.w[static_cast<size_t>(r)] * sigma);
      const Row dx = ref_row(r), t = R.row_copy(r);
      Row b(dx.size());
      if (stable_ce) {
        const Row yy = ref::stablemax_row(t, o.empty_row);
        const int64_t tr = static_cast<int64_t>(tg[static_cast<size_t>(r)]);
        for (size_t j = 0; j < b.size(); ++j) {
          const double d = static_cast<int64_t>(j) == tr ? 1.0 : 0.0;
          const double yv = std::isfinite(yy[j]) ? yy[j] : 0.0;
          b[j] = 2e-6 * cs * std::fabs(yv - d) / (1.0 + (std::isfinite(t[j]) ? std::fabs(t[j]) : 0.0)) + 1e-30;
        }
      } else if (alpha == 1.0) {
        // The header's 2e-6 (|ref| + |c s|) plus softmax's absolute 1e-36:
        // gradients below FLT_MIN come out as 0 (the library's exp does not
        // produce subnormals); the header lacks that term (reported).
        for (size_t j = 0; j < b.size(); ++j) b[j] = 2e-6 * (std::fabs(dx[j]) + cs) + 1e-36;
      } else {
        const double p = 1.0 / (alpha - 1.0);
        const double A = 1e-16 * (64.0 + static_cast<double>(R.n)) * std::max(1.0, p);
        for (size_t j = 0; j < b.size(); ++j) b[j] = 2 * kU * std::fabs(dx[j]) + cs * A;
      }
      set_row(r, b);
    }
    return ex;
  }
  if (name == "cross_entropy" || name == "z_loss" || name == "spherical_z_loss") {
    ref::LossRef lr;
    const CrossEntropyOptions ce = ce_options(P, e.loss);
    if (name == "cross_entropy") lr = ref::cross_entropy(e.x, e.target, ce, o).loss;
    else if (name == "z_loss") lr = ref::z_loss(e.x, &e.target, P("coefficient"), e.loss, o);
    else lr = ref::spherical_z_loss(e.x, e.target, P("a"), P("b"), e.loss, o);
    std::vector<double> rb(lr.rows_mag.size());
    for (size_t r = 0; r < rb.size(); ++r) rb[r] = 4e-6 * lr.rows_mag[r] + 1e-30;
    ex.bound = reduce_bounds(e.loss.reduction, rb, lr.denominator, ref);
    return ex;
  }
  if (name == "cross_entropy_backward" || name == "z_loss_backward" || name == "spherical_z_loss_backward") {
    ref::GradRef gr;
    const CrossEntropyOptions ce = ce_options(P, e.loss);
    if (name == "cross_entropy_backward") gr = ref::cross_entropy_backward(e.x, e.target, e.dy, ce, o);
    else if (name == "z_loss_backward") gr = ref::z_loss_backward(e.x, &e.target, e.dy, P("coefficient"), e.loss, o);
    else gr = ref::spherical_z_loss_backward(e.x, e.target, e.dy, P("a"), P("b"), e.loss, o);
    const std::vector<double> xd = ref::to_dense(e.x);
    const float s32 = static_cast<float>(sigma);
    for (size_t i = 0; i < count; ++i) {
      double f = 1.0;
      if (name == "cross_entropy_backward" && ce.softcap > 0) {
        const double u = static_cast<float>(static_cast<float>(xd[i]) * s32);
        f = 1.0 + (std::isfinite(u) ? std::fabs(u) / ce.softcap : 0.0);
        if (i < gr.t_round.size()) f += gr.t_round[i];  // with an additive mask: t's f32 rounding
      }
      ex.bound[i] = 4e-6 * gr.mag[i] * f + 1e-30;  // z_loss: mag carries L's term
    }
    return ex;
  }
  throw Error(Status::kInvalidArgument, "op_bounds: op '" + name + "' has no documented elementwise bound");
}

}  // namespace

int64_t dense_index(const RefRows& R, int64_t r, int64_t k) {
  int64_t inner = 1;
  for (size_t d = static_cast<size_t>(R.axis) + 1; d < R.shape.size(); ++d) inner *= R.shape[d];
  const int64_t o = r / inner, j = r % inner;
  return (o * R.n + k) * inner + j;
}

bool vjp_row_overflows(const double* y, const double* g, int64_t n) {
  double dot = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::fabs(y[i] * g[i]) > FLT_MAX) return true;
    dot += y[i] * g[i];
  }
  if (std::fabs(dot) > FLT_MAX) return true;
  for (int64_t i = 0; i < n; ++i) {
    if (std::fabs(y[i] * (g[i] - dot)) > FLT_MAX) return true;
  }
  return false;
}

double power_kappa(int p) {
  return std::max(2e-6, (2.0 * p + 4.0 * std::log2(static_cast<double>(p)) + 6.0) * kU);
}

const char* op_bound_header(std::string_view op) {
  static const std::map<std::string, const char*, std::less<>> kHeaders = [] {
    std::map<std::string, const char*, std::less<>> m;
    auto add = [&](const char* header, std::initializer_list<const char*> names) {
      for (const char* n : names) {
        m[n] = header;
        m[std::string(n) + "_backward"] = header;
      }
    };
    add("include/smax/sparse.h", {"sparsemax", "entmax15", "entmax_bisect", "sparse_softmax",
                                  "sparsemax_loss", "entmax15_loss", "entmax_bisect_loss",
                                  "sparse_softmax_loss"});
    add("include/smax/rescaled.h",
        {"ssmax", "softpick", "clipped_softmax", "stablemax", "stablemax_cross_entropy"});
    add("include/smax/reweight.h", {"self_adjust_softmax", "sigmoid_normalizer", "softplus_normalizer",
                                    "power_softmax", "probability_temperature", "logit_standardization"});
    add("include/smax/cross_entropy.h", {"cross_entropy", "z_loss", "spherical_z_loss"});
    m["gumbel_softmax"] = m["softmax_topk"] = "include/smax/sampling.h";
    return m;
  }();
  const auto it = kHeaders.find(op);
  return it == kHeaders.end() ? nullptr : it->second;
}

double bound_ratio(const ElementBounds& b, size_t i, double out, double ref) {
  const bool ovf = i < b.overflow_ok.size() && b.overflow_ok[i];
  if (ovf && !std::isfinite(out)) return 0.0;
  if (std::isnan(ref) || std::isnan(out)) return std::isnan(ref) == std::isnan(out) ? 0.0 : kInfD;
  if (std::isinf(ref) || std::isinf(out)) return out == ref ? 0.0 : kInfD;
  if (i < b.exact_zero.size() && b.exact_zero[i] && ref == 0.0) return out == 0.0 ? 0.0 : kInfD;
  if (static_cast<double>(static_cast<float>(ref)) == out) return 0.0;
  const double gap = i < b.dot_gap.size() ? b.dot_gap[i] : 0.0;
  return std::fabs(out - ref) / (b.bound[i] + gap);
}

ElementBounds op_bounds(std::string_view op, const BoundCall& call, const std::vector<double>& ref) {
  return table_bounds(std::string(op), call, ref);
}

}  // namespace smax::reference
