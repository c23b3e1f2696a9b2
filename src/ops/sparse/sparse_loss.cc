// src/ops/sparse/sparse_loss.cc: Fenchel-Young losses of sparsemax / 1.5-entmax /
// alpha-entmax and the top-k softmax loss, forward and backward
// (include/smax/sparse.h; targets, weights, reductions: include/smax/loss.h).
//
// Per row (t the logits, m = max t, p the distribution, d = t - m on the
// candidates, all in float64):
//   loss = (1 - sum p^alpha) / (alpha (alpha - 1)) + <p, d> + (m - t_target)
// which is <p, t> - t_target rewritten with sum p = 1, so that huge logits
// do not cancel; top-k: loss = m + log sum_K e^(t - m) - t_target.
// Gradient d loss / d t = p - d_target (the selection / threshold is
// piecewise constant), times c_r (dloss, weight, reduction) and s.
// f64 logits run on float64 rows (Rowwise::run_native): the same float64
// solvers, the logits and the gradient never rounded to f32.
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/sparse.h"
#include "core/loss_rows.h"
#include "core/rowwise.h"
#include "ops/sparse/sparse_rows.h"
#include "ops/sparse/sparse_shared.h"
#include "core/validate.h"
#include "smax/sparse.h"

namespace smax {
namespace {

using detail::LossRows;
using detail::Rowwise;
namespace sp = detail::sparse;

// What a loss needs from its normaliser.
struct Family {
  enum Which { kSparsemax, kEntmax15, kBisect, kTopK } which;
  double alpha = 2.0;  // kBisect: scalar alpha (per-row if per_row)
  bool per_row = false;
  int n_iter = 50;
  int64_t k = 0;  // kTopK
  bool force_target = false;
};

template <class Args>
double row_alpha(const Family& f, const Args& a) {
  switch (f.which) {
    case Family::kSparsemax: return 2.0;
    case Family::kEntmax15: return 1.5;
    case Family::kBisect: return f.per_row ? static_cast<double>(a.row_in[0]) : f.alpha;
    case Family::kTopK: return 1.0;
  }
  return 2.0;
}

double pow_alpha(double p, double alpha) {
  if (alpha == 2.0) return p * p;
  if (alpha == 1.5) return p * std::sqrt(p);
  return std::pow(p, alpha);
}

// Scratch bytes per row: the top-k probabilities (n values of either type)
// and solve_topk's scratch, or prepare()'s.
int64_t scratch_bytes(const Family& f, int64_t n) {
  if (f.which == Family::kTopK) return 8 * n + sp::topk_bytes(n);
  return sp::work_bytes(n);
}

// Solves one candidate-set row (not top-k).
template <class Args>
sp::Row solve_row(const Family& f, const Args& a, double alpha) {
  const double radius = f.which == Family::kEntmax15 ? 2.0 : 1.0 / (alpha - 1.0);
  sp::Row row = sp::prepare(a.in[0], a.n, radius, a.scratch);
  if (row.kind != sp::Kind::kOk) return row;
  switch (f.which) {
    case Family::kSparsemax: sp::solve_sparsemax(row); break;
    case Family::kEntmax15: sp::solve_entmax15(row); break;
    default: sp::solve_bisect(row, alpha, f.n_iter, /*ensure_sum_one=*/true); break;
  }
  return row;
}

double empty_loss(EmptyRow policy) { return policy == EmptyRow::kNan ? sp::kNaND : 0.0; }

// Unweighted loss of one row; `probs` is n values of scratch (top-k only).
template <class T>
double row_loss(const Family& f, const detail::RowArgsOf<T>& a, int64_t target, T* probs) {
  const T* t = a.in[0];
  const double alpha = row_alpha(f, a);
  if (f.which == Family::kTopK || alpha == 1.0) {
    const int64_t k = f.which == Family::kTopK ? f.k : a.n;
    const sp::TopK r = sp::solve_topk(t, a.n, k, f.force_target ? target : -1,
                                      a.scratch + a.n, probs);
    if (r.kind == sp::Kind::kNan) return sp::kNaND;
    if (r.kind == sp::Kind::kEmpty) return empty_loss(a.empty_row);
    // (m - t_target) + log_sum: one rounding each, no cancellation against
    // a large lse (f32 rows: lse - t_target, the same to f32 resolution).
    if constexpr (std::is_same_v<T, double>) return (r.m - t[target]) + r.log_sum;
    return r.lse - static_cast<double>(t[target]);
  }
  const sp::Row row = solve_row(f, a, alpha);
  if (row.kind == sp::Kind::kNan) return sp::kNaND;
  if (row.kind == sp::Kind::kEmpty) return empty_loss(a.empty_row);
  double sum_pa = 0.0, pd = 0.0;
  for (int64_t k = 0; k < row.count; ++k) {
    const double p = row.p[k];
    if (p > 0.0) {
      sum_pa += pow_alpha(p, alpha);
      pd += p * row.d[k];
    }
  }
  return (1.0 - sum_pa) / (alpha * (alpha - 1.0)) + pd + (row.m - static_cast<double>(t[target]));
}

// dsrc row = cs * (p - d_target); masked entries 0.
// A NaN coefficient's gradient row: NaN, exactly 0 where t = -inf (masked).
template <class T>
void nan_grad_row(const T* t, int64_t n, T* out) {
  for (int64_t j = 0; j < n; ++j) {
    out[j] = t[j] == -std::numeric_limits<T>::infinity() ? T(0) : static_cast<T>(sp::kNaND);
  }
}

template <class T>
void row_grad(const Family& f, const detail::RowArgsOf<T>& a, int64_t target, double cs) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const T* t = a.in[0];
  T* out = a.out[0];
  const int64_t n = a.n;
  const double alpha = row_alpha(f, a);
  if (f.which == Family::kTopK || alpha == 1.0) {
    const int64_t k = f.which == Family::kTopK ? f.k : n;
    const sp::TopK r = sp::solve_topk(t, n, k, f.force_target ? target : -1, a.scratch, out);
    if (r.kind != sp::Kind::kOk) {
      sp::write_topk_special(r, n, out, a.empty_row);
      return;
    }
    if (std::isnan(cs)) {  // 0 / 0 mean (or NaN dloss): NaN, masked entries 0
      nan_grad_row(t, n, out);
      return;
    }
    const double pt = out[target];
    if constexpr (std::is_same_v<T, double>) {
      for (int64_t j = 0; j < n; ++j) out[j] *= cs;
    } else {
      kernels::scale_segment(out, n, static_cast<float>(cs));
    }
    if (t[target] > kNegInf) out[target] = static_cast<T>(cs * (pt - 1.0));
    return;
  }
  const sp::Row row = solve_row(f, a, alpha);
  if (row.kind != sp::Kind::kOk) {
    sp::write_row(row, out, a.empty_row);
    return;
  }
  if (std::isnan(cs)) {  // 0 / 0 mean (or NaN dloss): NaN, masked entries 0
    nan_grad_row(t, n, out);
    return;
  }
  sp::fill_row(out, n, T(0));
  double pt = 0.0;
  for (int64_t k = 0; k < row.count; ++k) {
    out[row.idx[k]] = static_cast<T>(cs * row.p[k]);
    if (row.idx[k] == target) pt = row.p[k];
  }
  if (t[target] > kNegInf) out[target] = static_cast<T>(cs * (pt - 1.0));
}

void add_alpha(const char* op, Rowwise& rw, const EntmaxBisectOptions& params) {
  if (params.alpha_tensor) {
    rw.add_row_input(*params.alpha_tensor, "alpha_tensor", DType::kF32);
    detail::check_alpha_tensor(op, *params.alpha_tensor);
  }
}

// An output of a loss may not overlap any of its inputs (src is checked by
// the caller, with the aliasing it allows): target, class weights, masks,
// per-row alpha and dloss.
void check_output_disjoint(const char* op, const TensorView& out, const char* out_name,
                           const TensorView& target, const LossOptions& loss,
                           const SoftmaxOptions& options, const EntmaxBisectOptions* params,
                           const TensorView* dloss) {
  detail::check_disjoint_or_same(out, out_name, target, "target", op, false);
  if (loss.weight) detail::check_disjoint_or_same(out, out_name, *loss.weight, "weight", op, false);
  if (options.additive_mask) {
    detail::check_disjoint_or_same(out, out_name, *options.additive_mask, "additive_mask", op, false);
  }
  if (options.bool_mask) {
    detail::check_disjoint_or_same(out, out_name, *options.bool_mask, "bool_mask", op, false);
  }
  if (params != nullptr && params->alpha_tensor) {
    detail::check_disjoint_or_same(out, out_name, *params->alpha_tensor, "alpha_tensor", op, false);
  }
  if (dloss != nullptr) detail::check_disjoint_or_same(out, out_name, *dloss, "dloss", op, false);
}

void loss_forward(const char* op, const Family& f, const TensorView& src,
                  const TensorView& target, const TensorView& dst, const LossOptions& loss,
                  const SoftmaxOptions& options, const EntmaxBisectOptions* params) {
  Rowwise rw(op, src, "src", true, options);
  if (params != nullptr) add_alpha(op, rw, *params);
  LossRows lr(op, src, rw.axis(), target, loss);
  lr.check_output(dst, "dst");
  detail::check_disjoint_or_same(dst, "dst", src, "src", op, false);
  check_output_disjoint(op, dst, "dst", target, loss, options, params, nullptr);
  std::vector<double> out(static_cast<size_t>(lr.rows()), 0.0);
  const int64_t n = rw.row_length();
  rw.run_native(scratch_bytes(f, n), [&](const auto& a) {
    if (lr.ignored(a.row)) return;
    out[static_cast<size_t>(a.row)] = row_loss(f, a, lr.target(a.row), a.scratch);
  });
  lr.write(out, dst);
}

void loss_backward(const char* op, const Family& f, const TensorView& src,
                   const TensorView& target, const TensorView& dloss, const TensorView& dsrc,
                   const LossOptions& loss, const SoftmaxOptions& options,
                   const EntmaxBisectOptions* params) {
  Rowwise rw(op, src, "src", true, options);
  rw.add_output(dsrc, "dsrc");
  if (params != nullptr) add_alpha(op, rw, *params);
  LossRows lr(op, src, rw.axis(), target, loss);
  check_output_disjoint(op, dsrc, "dsrc", target, loss, options, params, &dloss);
  const std::vector<double> c = lr.coefficients(dloss);
  const int64_t n = rw.row_length();
  rw.run_native(scratch_bytes(f, n), [&](const auto& a) {
    if (lr.ignored(a.row)) {
      if (a.n > 0) sp::fill_row(a.out[0], a.n, detail::RowValue<decltype(a)>(0));
      return;
    }
    row_grad(f, a, lr.target(a.row), c[static_cast<size_t>(a.row)] * a.scale);
  });
}

Family bisect_family(const char* op, const EntmaxBisectOptions& params) {
  detail::check_bisect_params(op, params);
  Family f{Family::kBisect};
  f.alpha = params.alpha;
  f.per_row = params.alpha_tensor.has_value();
  f.n_iter = params.n_iter;
  return f;
}

Family topk_family(const char* op, int64_t k, const SparseSoftmaxLossOptions& params) {
  detail::check_k(op, k);
  Family f{Family::kTopK};
  f.k = k;
  f.force_target = params.force_target;
  return f;
}

}  // namespace

void sparsemax_loss(const TensorView& src, const TensorView& target, const TensorView& dst,
                    const LossOptions& loss, const SoftmaxOptions& options) {
  loss_forward("sparsemax_loss", Family{Family::kSparsemax}, src, target, dst, loss, options,
               nullptr);
}
void sparsemax_loss_backward(const TensorView& src, const TensorView& target,
                             const TensorView& dloss, const TensorView& dsrc,
                             const LossOptions& loss, const SoftmaxOptions& options) {
  loss_backward("sparsemax_loss_backward", Family{Family::kSparsemax}, src, target, dloss, dsrc,
                loss, options, nullptr);
}

void entmax15_loss(const TensorView& src, const TensorView& target, const TensorView& dst,
                   const LossOptions& loss, const SoftmaxOptions& options) {
  loss_forward("entmax15_loss", Family{Family::kEntmax15}, src, target, dst, loss, options,
               nullptr);
}
void entmax15_loss_backward(const TensorView& src, const TensorView& target,
                            const TensorView& dloss, const TensorView& dsrc,
                            const LossOptions& loss, const SoftmaxOptions& options) {
  loss_backward("entmax15_loss_backward", Family{Family::kEntmax15}, src, target, dloss, dsrc,
                loss, options, nullptr);
}

void entmax_bisect_loss(const TensorView& src, const TensorView& target, const TensorView& dst,
                        const EntmaxBisectOptions& params, const LossOptions& loss,
                        const SoftmaxOptions& options) {
  const char* op = "entmax_bisect_loss";
  loss_forward(op, bisect_family(op, params), src, target, dst, loss, options, &params);
}
void entmax_bisect_loss_backward(const TensorView& src, const TensorView& target,
                                 const TensorView& dloss, const TensorView& dsrc,
                                 const EntmaxBisectOptions& params, const LossOptions& loss,
                                 const SoftmaxOptions& options) {
  const char* op = "entmax_bisect_loss_backward";
  loss_backward(op, bisect_family(op, params), src, target, dloss, dsrc, loss, options, &params);
}

void sparse_softmax_loss(const TensorView& src, const TensorView& target, const TensorView& dst,
                         int64_t k, const SparseSoftmaxLossOptions& params,
                         const LossOptions& loss, const SoftmaxOptions& options) {
  const char* op = "sparse_softmax_loss";
  loss_forward(op, topk_family(op, k, params), src, target, dst, loss, options, nullptr);
}
void sparse_softmax_loss_backward(const TensorView& src, const TensorView& target,
                                  const TensorView& dloss, const TensorView& dsrc, int64_t k,
                                  const SparseSoftmaxLossOptions& params,
                                  const LossOptions& loss, const SoftmaxOptions& options) {
  const char* op = "sparse_softmax_loss_backward";
  loss_backward(op, topk_family(op, k, params), src, target, dloss, dsrc, loss, options,
                nullptr);
}

}  // namespace smax
