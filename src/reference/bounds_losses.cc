// src/reference/bounds_losses.cc: the losses' documented bounds (see
// bounds.h): the sparse losses and stablemax_cross_entropy
// (include/smax/sparse.h, include/smax/normalizers.h) and cross_entropy /
// z_loss / spherical_z_loss (include/smax/losses.h), forward and backward.
#include <algorithm>
#include <cmath>
#include <vector>

#include "reference/bounds.h"
#include "reference/cross_entropy.h"
#include "reference/reference.h"
#include "reference/rescaled.h"
#include "reference/sparse.h"

namespace smax::reference {
namespace {

constexpr double kU = 0x1p-24;
constexpr const char* kFn = "op_bounds";

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

// Per-row loss coefficient c_r = G_r * w[target_r] (0 for ignored rows) and
// the kMean denominator.
struct LossRows {
  std::vector<double> w;  // per row weight (0 ignored)
  double den = 0.0;
  std::vector<double> G;  // per row upstream factor (backward)
};
LossRows loss_rows(const BoundRows& b) {
  const BoundCall& c = b.call;
  const RefRows& R = b.R;
  LossRows L;
  const std::vector<double> tg = ref_row_values(kFn, keepdim_view(c, c.target), R);
  std::vector<double> cw;
  if (c.loss.weight) cw = to_dense(*c.loss.weight);
  L.w.assign(static_cast<size_t>(R.rows), 0.0);
  for (int64_t r = 0; r < R.rows; ++r) {
    const int64_t t = static_cast<int64_t>(tg[static_cast<size_t>(r)]);
    if (t == c.loss.ignore_index) continue;
    L.w[static_cast<size_t>(r)] = cw.empty() ? 1.0 : cw[static_cast<size_t>(t)];
    L.den += L.w[static_cast<size_t>(r)];
  }
  if (b.shape.backward) {
    const std::vector<double> dl = to_dense(c.dy);
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

// Forward of the sparse losses and stablemax_cross_entropy: per-row bounds
// from the per-row losses (the oracle with reduction none), reduced like
// the loss. stable: StableMax's; else wide: sparse_softmax_loss's 2e-6.
void per_row_loss_bounds(BoundRows& b, const std::vector<double>& rows, bool stable, bool wide) {
  const LossRows L = loss_rows(b);
  std::vector<double> rb(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    const double Lr = std::isfinite(rows[r]) ? std::fabs(rows[r]) : 0.0;
    const double w = std::fabs(L.w[r]);
    rb[r] = stable ? 1e-6 * Lr + 1e-30 + kU * Lr : (wide ? 2e-6 : 1e-6) * (w + Lr) + kU * Lr;
  }
  b.out.bound = reduce_bounds(b.call.loss.reduction, rb, L.den, b.ref);
}

// Backward of the same: per element, from the row's coefficient c s.
void loss_gradient_bounds(BoundRows& b, double alpha, bool stable) {
  const LossRows L = loss_rows(b);
  const RefRows& R = b.R;
  const std::vector<double> tg = ref_row_values(kFn, keepdim_view(b.call, b.call.target), R);
  for (int64_t r = 0; r < R.rows; ++r) {
    const double cs = std::fabs(L.G[static_cast<size_t>(r)] * L.w[static_cast<size_t>(r)] * b.sigma());
    const Row dx = b.ref_row(r), t = b.row(r);
    Row bound(dx.size());
    if (stable) {
      const Row yy = stablemax_row(t, b.call.options.empty_row);
      const int64_t tr = static_cast<int64_t>(tg[static_cast<size_t>(r)]);
      for (size_t j = 0; j < bound.size(); ++j) {
        const double d = static_cast<int64_t>(j) == tr ? 1.0 : 0.0;
        const double yv = std::isfinite(yy[j]) ? yy[j] : 0.0;
        bound[j] = 2e-6 * cs * std::fabs(yv - d) / (1.0 + (std::isfinite(t[j]) ? std::fabs(t[j]) : 0.0)) + 1e-30;
      }
    } else if (alpha == 1.0) {
      // The header's 2e-6 (|ref| + |c s|) plus softmax's absolute 1e-36:
      // gradients below FLT_MIN come out as 0 (the library's exp does not
      // produce subnormals); the header lacks that term (reported).
      for (size_t j = 0; j < bound.size(); ++j) bound[j] = 2e-6 * (std::fabs(dx[j]) + cs) + 1e-36;
    } else {
      const double p = 1.0 / (alpha - 1.0);
      const double A = 1e-16 * (64.0 + static_cast<double>(R.n)) * std::max(1.0, p);
      for (size_t j = 0; j < bound.size(); ++j) bound[j] = 2 * kU * std::fabs(dx[j]) + cs * A;
    }
    b.set_row(r, bound);
  }
}

LossOptions reduction_none(const LossOptions& loss) {
  LossOptions none = loss;
  none.reduction = Reduction::kNone;
  return none;
}

}  // namespace

void sparse_loss_bounds(BoundRows& b, const SparseLossSpec& spec) {
  const BoundCall& c = b.call;
  const std::vector<double> rows = sparse_loss(spec, c.x, c.target, reduction_none(c.loss), c.options);
  const bool wide = spec.which == SparseLossSpec::kTopK ||
                    (spec.which == SparseLossSpec::kBisect && spec.bisect.alpha == 1.0f);
  per_row_loss_bounds(b, rows, false, wide);
}

void sparse_loss_backward_bounds(BoundRows& b, double alpha) { loss_gradient_bounds(b, alpha, false); }

void stablemax_cross_entropy_bounds(BoundRows& b) {
  const BoundCall& c = b.call;
  per_row_loss_bounds(b, stablemax_cross_entropy(c.x, c.target, reduction_none(c.loss), c.options), true,
                      false);
}

void stablemax_cross_entropy_backward_bounds(BoundRows& b) { loss_gradient_bounds(b, 0.0, true); }

void cross_entropy_family_bounds(BoundRows& b, const LossRef& lr) {
  std::vector<double> rb(lr.rows_mag.size());
  for (size_t r = 0; r < rb.size(); ++r) rb[r] = 4e-6 * lr.rows_mag[r] + 1e-30;
  b.out.bound = reduce_bounds(b.call.loss.reduction, rb, lr.denominator, b.ref);
}

void cross_entropy_family_backward_bounds(BoundRows& b, const GradRef& gr, float softcap) {
  const std::vector<double> xd = to_dense(b.call.x);
  const float s32 = static_cast<float>(b.sigma());
  for (size_t i = 0; i < b.ref.size(); ++i) {
    double f = 1.0;
    if (softcap > 0) {
      const double u = static_cast<float>(static_cast<float>(xd[i]) * s32);
      f = 1.0 + (std::isfinite(u) ? std::fabs(u) / softcap : 0.0);
      if (i < gr.t_round.size()) f += gr.t_round[i];  // with an additive mask: t's f32 rounding
    }
    b.out.bound[i] = 4e-6 * gr.mag[i] * f + 1e-30;  // z_loss: mag carries L's term
  }
}

}  // namespace smax::reference
