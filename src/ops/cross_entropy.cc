// src/ops/cross_entropy.cc: cross_entropy and cross_entropy_backward
// (include/smax/cross_entropy.h).
//
// validate everything (options, targets, weights, every output) -> one
// Rowwise run whose row function calls the kernels (kernels/cross_entropy.h)
// and keeps per-row results in float64 vectors indexed by the row -> write
// the per-row outputs and the reduction. Backward: coefficients G_r from
// dloss first, then one Rowwise run that writes dsrc.
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "kernels/cross_entropy.h"
#include "ops/cross_entropy.h"
#include "ops/loss_rows.h"
#include "ops/rowwise.h"
#include "ops/validate.h"
#include "smax/cross_entropy.h"
#include "smax/error.h"

namespace smax {
namespace detail {
namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

[[noreturn]] void fail(const char* op, const std::string& message) {
  throw Error(Status::kInvalidArgument, std::string(op) + ": " + message);
}

void check_ce_options(const char* op, const CrossEntropyOptions& ce) {
  const float a = ce.label_smoothing;
  if (!(a >= 0.0f && a <= 1.0f)) {
    fail(op, "label_smoothing must be in [0, 1], got " + std::to_string(a));
  }
  if (!(std::isfinite(ce.lse_square_scale) && ce.lse_square_scale >= 0.0f)) {
    fail(op, "lse_square_scale must be finite and >= 0, got " + std::to_string(ce.lse_square_scale));
  }
  if (!(std::isfinite(ce.softcap) && ce.softcap >= 0.0f)) {
    fail(op, "softcap must be finite and >= 0 (0 = off), got " + std::to_string(ce.softcap));
  }
  check_loss_enums(op, ce.loss);
}

// Everything both passes need, validated.
struct Setup {
  const char* op;
  TensorView src;
  int axis = 0;
  int64_t classes = 0;
  int64_t rows = 0;
  bool probs = false;
  std::optional<LossRows> lr;  // class-index targets
  std::vector<float> weight;   // f32 class weights (empty: none)
  double a = 0.0, zs = 0.0;
  float cap = 0.0f;
  std::optional<Reducer> red;
  int mask_input = -1;    // Rowwise input index of the post-cap additive mask
  int target_input = -1;  // Rowwise input index of probability targets
  EmptyRow empty_row = EmptyRow::kZero;
  float scale = 1.0f;
};

void prepare(Setup& s, Rowwise& rw, const LogitsSetup& ls, const TensorView& target,
             const CrossEntropyOptions& ce) {
  s.src = as_rank1_if_scalar(rw.src());
  s.axis = rw.axis();
  s.classes = s.src.shape[s.axis];
  s.rows = count_rows(s.src, s.axis);
  s.a = ce.label_smoothing;
  s.zs = ce.lse_square_scale;
  s.cap = ce.softcap;
  s.scale = rw.scale();
  int inputs = 1;
  if (ls.mask) {
    rw.add_input(*ls.mask, "additive_mask");
    s.mask_input = inputs++;
  }
  std::vector<char> active(static_cast<size_t>(s.rows), 1);
  double denominator = static_cast<double>(s.rows);
  if (target.dtype == DType::kF32) {
    s.probs = true;
    rw.add_input(target, "target");
    s.target_input = inputs++;
    if (ce.loss.weight) {
      const TensorView& w = *ce.loss.weight;
      check_view(w, s.op, "weight", DType::kF32);
      if (w.rank != 1 || w.shape[0] != s.classes) {
        fail(s.op, "weight shape " + w.describe() + " must be [" + std::to_string(s.classes) +
                       "] (one weight per class)");
      }
      s.weight.resize(static_cast<size_t>(s.classes));
      const float* wp = static_cast<const float*>(w.data);
      for (int64_t c = 0; c < s.classes; ++c) s.weight[static_cast<size_t>(c)] = wp[c * w.strides[0]];
    }
  } else {
    if (target.dtype != DType::kI64) {
      fail(s.op, std::string("target must be i64 class indices or f32 probabilities, got ") +
                     dtype_name(target.dtype));
    }
    s.lr.emplace(s.op, s.src, s.axis, target, ce.loss);
    if (ce.loss.weight) {
      s.weight.resize(static_cast<size_t>(s.classes));
      for (int64_t c = 0; c < s.classes; ++c) {
        s.weight[static_cast<size_t>(c)] = static_cast<float>(s.lr->class_weight(c));
      }
    }
    denominator = 0.0;
    for (int64_t r = 0; r < s.rows; ++r) {
      active[static_cast<size_t>(r)] = !s.lr->ignored(r);
      denominator += s.lr->weight(r);  // 0 for ignored rows, LossRows' order
    }
  }
  s.red.emplace(s.op, s.src, s.axis, ce.loss.reduction, ce.loss.empty_mean, std::move(active),
                denominator);
}

kernels::XentRow make_row(const Setup& s, const RowArgs& a) {
  kernels::XentRow row;
  row.x = a.in[0];
  row.mask = s.mask_input >= 0 ? a.in[s.mask_input] : nullptr;
  row.softcap = s.cap;
  row.n = a.n;
  return row;
}

// t_j as double from the row (u_j after scale / bool mask, softcap, mask).
double logit_at(const Setup& s, const RowArgs& a, int64_t j) {
  double u = static_cast<double>(a.in[0][j]);
  if (s.cap > 0.0f && std::isfinite(u)) {
    u = static_cast<double>(s.cap) * std::tanh(u / static_cast<double>(s.cap));
  }
  if (s.mask_input >= 0) u += static_cast<double>(a.in[s.mask_input][j]);
  return u;
}

// d t_j / d u_j (1 without softcap).
double cap_deriv(const Setup& s, const RowArgs& a, int64_t j) {
  if (!(s.cap > 0.0f)) return 1.0;
  const double x = std::fabs(static_cast<double>(a.in[0][j]) / static_cast<double>(s.cap));
  const double e = std::exp(-2.0 * x);
  return 4.0 * e / ((1.0 + e) * (1.0 + e));
}

bool masked_at(const Setup& s, const RowArgs& a, int64_t j) {
  return logit_at(s, a, j) == -kInf;
}

// NaN row of the gradient; masked entries stay 0.
void nan_row(const Setup& s, const RowArgs& a, float* out) {
  for (int64_t j = 0; j < a.n; ++j) {
    out[j] = masked_at(s, a, j) ? 0.0f : std::numeric_limits<float>::quiet_NaN();
  }
}

void fill(float* out, int64_t n, float v) {
  for (int64_t j = 0; j < n; ++j) out[j] = v;
}

int64_t first_argmax(const float* q, int64_t n) {
  int64_t best = 0;
  for (int64_t j = 1; j < n; ++j) {
    if (q[j] > q[best]) best = j;
  }
  return best;
}

struct Outputs {
  std::optional<RowView> lse, entropy, target_logprob;
  bool z = false, acc = false;
};

}  // namespace
}  // namespace detail

using detail::RowArgs;

void cross_entropy(const TensorView& src, const TensorView& target, const TensorView& dst,
                   const CrossEntropyOptions& ce, const SoftmaxOptions& options) {
  const char* op = "cross_entropy";
  detail::check_ce_options(op, ce);
  const detail::LogitsSetup ls = detail::setup_logits(op, src, options, ce.softcap);
  detail::Rowwise rw(op, src, "src", /*src_is_logits=*/true, ls.options);
  detail::Setup s;
  s.op = op;
  s.empty_row = options.empty_row;
  detail::prepare(s, rw, ls, target, ce);

  // Outputs: shapes, then no overlap with any input or each other.
  s.red->check_output(dst, "dst");
  detail::Outputs o;
  std::vector<detail::NamedView> outs = {{dst, "dst"}};
  if (ce.z_loss) {
    s.red->check_output(*ce.z_loss, "z_loss");
    outs.push_back({*ce.z_loss, "z_loss"});
    o.z = true;
  }
  if (ce.accuracy) {
    s.red->check_output(*ce.accuracy, "accuracy");
    outs.push_back({*ce.accuracy, "accuracy"});
    o.acc = true;
  }
  auto row_out = [&](const std::optional<TensorView>& v, const char* name,
                     std::optional<detail::RowView>& rv) {
    if (!v) return;
    rv = detail::check_row_view(op, s.src, s.axis, *v, name, true);
    outs.push_back({*v, name});
  };
  row_out(ce.lse, "lse", o.lse);
  row_out(ce.entropy, "entropy", o.entropy);
  row_out(ce.target_logprob, "target_logprob", o.target_logprob);
  std::vector<detail::NamedView> ins = {{src, "src"}, {target, "target"}};
  if (ce.loss.weight) ins.push_back({*ce.loss.weight, "weight"});
  if (options.additive_mask) ins.push_back({*options.additive_mask, "additive_mask"});
  if (options.bool_mask) ins.push_back({*options.bool_mask, "bool_mask"});
  detail::check_outputs_disjoint(op, outs, ins);

  const size_t rows = static_cast<size_t>(s.rows);
  std::vector<double> loss(rows, 0.0), z(o.z ? rows : 0), lse(o.lse ? rows : 0),
      ent(o.entropy ? rows : 0), tlp(o.target_logprob ? rows : 0), acc(o.acc ? rows : 0);
  const double C = static_cast<double>(s.classes);
  const float* weight = s.weight.empty() ? nullptr : s.weight.data();

  rw.run(0, [&](const RowArgs& a) {
    const int64_t r = a.row;
    const size_t ri = static_cast<size_t>(r);
    const bool active = s.red->active(r);
    const bool need_stats = o.lse || o.entropy;
    if (!active && !need_stats) return;
    // Per-row results (filled below, then stored where requested).
    double L = -detail::kInf, H = 0.0, loss_r = 0.0, z_r = 0.0, tlp_r = -detail::kInf, acc_r = 0.0;
    kernels::XentScan sc;
    if (a.n > 0) {
      kernels::XentScanRequest req;
      req.sums = active && s.a > 0.0;
      req.weight = weight;
      req.entropy = o.entropy.has_value();
      req.argmax = active && o.acc;
      sc = kernels::xent_scan(detail::make_row(s, a), req);
    }
    const bool nan_row = a.n > 0 && std::isnan(sc.d);
    const bool empty = a.n == 0 || (!nan_row && sc.d == 0.0);
    if (nan_row || (empty && s.empty_row == EmptyRow::kNan)) {
      L = H = loss_r = z_r = tlp_r = acc_r = detail::kNan;
    } else if (!empty) {
      const double logd = std::log(sc.d);
      L = static_cast<double>(sc.ref) + logd;
      H = logd - sc.sum_et / sc.d;
      if (active) {
        if (s.probs) {
          const float* q = a.in[s.target_input];
          const kernels::XentProbSums ps = kernels::xent_prob_sums(detail::make_row(s, a), q, weight);
          const double b = 1.0 - s.a;
          loss_r = b * (ps.wq * L - ps.wqt);
          if (b != 0.0 && ps.wq_masked != 0.0) loss_r += b * ps.wq_masked * detail::kInf;
          tlp_r = ps.qt - ps.q * L;
          if (ps.q_masked != 0.0) tlp_r -= ps.q_masked * detail::kInf;
          if (o.acc) acc_r = sc.argmax == detail::first_argmax(q, a.n) ? 1.0 : 0.0;
          z_r = s.zs * L * L;
        } else {
          const int64_t y = s.lr->target(r);
          const double wy = s.lr->weight(r);
          const double ty = detail::logit_at(s, a, y);
          const double c = (1.0 - s.a) * wy;
          if (c != 0.0) loss_r = c * (L - ty);
          z_r = s.zs * wy * L * L;
          tlp_r = ty - L;
          acc_r = sc.argmax == y ? 1.0 : 0.0;
        }
        if (s.a > 0.0) loss_r += s.a * (sc.sum_w * L - sc.sum_t) / C;
        loss_r += z_r;
      }
    }
    loss[ri] = loss_r;
    if (o.z) z[ri] = z_r;
    if (o.lse) lse[ri] = L;
    if (o.entropy) ent[ri] = H;
    if (o.target_logprob) tlp[ri] = active ? tlp_r : 0.0;
    if (o.acc) acc[ri] = active ? acc_r : 0.0;
  });

  s.red->write(loss, dst);
  if (o.z) s.red->write(z, *ce.z_loss);
  if (o.acc) {
    double count = 0.0;
    for (int64_t r = 0; r < s.rows; ++r) count += s.red->active(r) ? 1.0 : 0.0;
    s.red->with_denominator(count).write(acc, *ce.accuracy);
  }
  if (o.lse) detail::write_rows(s.src, s.axis, *o.lse, lse);
  if (o.entropy) detail::write_rows(s.src, s.axis, *o.entropy, ent);
  if (o.target_logprob) detail::write_rows(s.src, s.axis, *o.target_logprob, tlp);
}

void cross_entropy_backward(const TensorView& src, const TensorView& target,
                            const TensorView& dloss, const TensorView& dsrc,
                            const CrossEntropyOptions& ce, const SoftmaxOptions& options) {
  const char* op = "cross_entropy_backward";
  detail::check_ce_options(op, ce);
  const detail::LogitsSetup ls = detail::setup_logits(op, src, options, ce.softcap);
  detail::Rowwise rw(op, src, "src", /*src_is_logits=*/true, ls.options);
  detail::Setup s;
  s.op = op;
  s.empty_row = options.empty_row;
  detail::prepare(s, rw, ls, target, ce);
  rw.add_output(dsrc, "dsrc", /*allow_alias=*/true);
  const std::vector<double> G = s.red->coefficients(dloss);
  // The forward's lse skips the scan when label smoothing is off.
  std::vector<double> lse_in;
  const bool use_lse = ce.lse.has_value() && s.a == 0.0;
  if (use_lse) {
    const detail::RowView rv = detail::check_row_view(op, s.src, s.axis, *ce.lse, "lse", false);
    lse_in = detail::read_rows(s.src, s.axis, rv);
  }
  // dsrc vs the inputs Rowwise does not know about (src and masks it checks).
  std::vector<detail::NamedView> ins = {{target, "target"}, {dloss, "dloss"}};
  if (ce.loss.weight) ins.push_back({*ce.loss.weight, "weight"});
  if (use_lse) ins.push_back({*ce.lse, "lse"});
  detail::check_outputs_disjoint(op, {{dsrc, "dsrc"}}, ins);

  const double C = static_cast<double>(s.classes);
  const float* weight = s.weight.empty() ? nullptr : s.weight.data();
  const float nanf = std::numeric_limits<float>::quiet_NaN();

  rw.run(0, [&](const RowArgs& a) {
    const int64_t r = a.row;
    float* out = a.out[0];
    if (!s.red->active(r)) {
      detail::fill(out, a.n, 0.0f);
      return;
    }
    const double g = G[static_cast<size_t>(r)];
    const kernels::XentRow row = detail::make_row(s, a);
    double L, shift, inv_d = 1.0, sum_w = 0.0;
    if (use_lse) {
      L = lse_in[static_cast<size_t>(r)];
      shift = L;
    } else {
      kernels::XentScanRequest req;
      req.sums = s.a > 0.0;
      req.weight = weight;
      const kernels::XentScan sc = kernels::xent_scan(row, req);
      L = std::isnan(sc.d) ? detail::kNan
          : sc.d == 0.0    ? -detail::kInf
                           : static_cast<double>(sc.ref) + std::log(sc.d);
      shift = sc.ref;
      inv_d = 1.0 / sc.d;
      sum_w = sc.sum_w;
    }
    if (L == -detail::kInf) {  // every logit masked (or n == 0)
      detail::fill(out, a.n, s.empty_row == EmptyRow::kNan ? nanf : 0.0f);
      return;
    }
    if (!std::isfinite(L)) {
      detail::nan_row(s, a, out);
      return;
    }
    kernels::XentGrad gr;
    gr.shift = static_cast<float>(shift);
    gr.weight = weight;
    gr.scale = s.scale;
    gr.b = static_cast<float>(g * s.a / C);
    double A;
    double wy = 1.0;
    int64_t y = -1;
    if (s.probs) {
      gr.q = a.in[s.target_input];
      gr.bq = static_cast<float>(g * (1.0 - s.a));
      const kernels::XentProbSums ps = kernels::xent_prob_sums(row, gr.q, weight);
      A = (1.0 - s.a) * (ps.wq + ps.wq_masked) + 2.0 * s.zs * L;
    } else {
      y = s.lr->target(r);
      wy = s.lr->weight(r);
      A = (1.0 - s.a) * wy + 2.0 * s.zs * wy * L;
    }
    if (s.a > 0.0) A += s.a / C * sum_w;
    gr.factor = g * A * inv_d;
    kernels::xent_grad(row, gr, out);
    if (y >= 0 && !detail::masked_at(s, a, y)) {
      const double fix = static_cast<double>(s.scale) * detail::cap_deriv(s, a, y) * g *
                         (1.0 - s.a) * wy;
      out[y] = static_cast<float>(static_cast<double>(out[y]) - fix);
    }
  });
}

}  // namespace smax
