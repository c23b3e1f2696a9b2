// src/reference/bounds.cc: op_bounds (prepares a call's rows for its op's
// bound rule), the rules several ops share, and the helpers of bounds.h.
// The rules of one family live in bounds_<family>.cc; which rule an op uses
// is said beside the op's oracle in testing/table_*.cc.
#include "reference/bounds.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>

namespace smax::reference {
namespace {

constexpr double kU = 0x1p-24;
constexpr double kInfD = std::numeric_limits<double>::infinity();
constexpr const char* kFn = "op_bounds";

}  // namespace

double BoundRows::row_param_or(int64_t r, double scalar) const {
  return row_param.empty() ? scalar : static_cast<float>(row_param[static_cast<size_t>(r)]);
}

Row BoundRows::ref_row(int64_t r) const {
  Row v(static_cast<size_t>(R.n));
  for (int64_t k = 0; k < R.n; ++k) v[static_cast<size_t>(k)] = ref[at(r, k)];
  return v;
}

size_t BoundRows::at(int64_t r, int64_t k) const { return static_cast<size_t>(dense_index(R, r, k)); }

void BoundRows::set_row(int64_t r, const Row& bound) {
  for (int64_t k = 0; k < R.n; ++k) out.bound[at(r, k)] = bound[static_cast<size_t>(k)];
}

void BoundRows::allow_overflow(int64_t r, int64_t k) {
  out.overflow_ok.resize(ref.size(), 0);
  out.overflow_ok[at(r, k)] = 1;
}

ElementBounds op_bounds(const BoundShape& shape, const BoundCall& call, const std::vector<double>& ref,
                        const BoundRule& rule) {
  ElementBounds ex;
  const size_t count = ref.size();
  ex.bound.assign(count, 0.0);
  ex.exact_zero.assign(count, 0);
  ex.dot_gap.assign(count, 0.0);
  const SoftmaxOptions& o = call.options;
  const bool saved_y = shape.rows == BoundRowsFrom::kSavedY;
  const TensorView& in = shape.rows == BoundRowsFrom::kX ? call.x : call.y;
  BoundRows b{call, ref, ex, shape, ref_rows(kFn, in, o, !saved_y), {}, {}};
  // Masked entries (logit -inf) of elementwise outputs: exact 0 where the
  // reference is 0.
  if (shape.elementwise || (shape.loss && shape.backward)) {
    const RefRows T = saved_y ? ref_rows(kFn, call.y, o, true) : b.R;
    for (int64_t r = 0; r < T.rows; ++r) {
      for (int64_t k = 0; k < T.n; ++k) {
        const size_t i = static_cast<size_t>(dense_index(T, r, k));
        if (T.row(r)[k] == -kInfD && ref[i] == 0.0) ex.exact_zero[i] = 1;
      }
    }
  }
  if (shape.backward && shape.elementwise) b.G = ref_rows(kFn, call.dy, o, false);
  // Per-row alpha / s of the variants.
  if (call.row_param) b.row_param = ref_row_values(kFn, *call.row_param, b.R);
  rule(b);
  return ex;
}

void relative_bounds(BoundRows& b, double rel) {
  for (size_t i = 0; i < b.ref.size(); ++i) b.out.bound[i] = rel * std::fabs(b.ref[i]) + 1e-36;
}

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

}  // namespace smax::reference
