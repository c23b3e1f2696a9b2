// src/ops/losses/cross_entropy.cc: cross_entropy and cross_entropy_backward
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
#include <type_traits>
#include <vector>

#include "kernels/cross_entropy.h"
#include "ops/losses/cross_entropy.h"
#include "ops/losses/cross_entropy_f64.h"
#include "ops/losses/cross_entropy_rows.h"
#include "core/convert.h"
#include "core/errors.h"
#include "core/loss_rows.h"
#include "core/rowwise.h"
#include "core/validate.h"
#include "smax/cross_entropy.h"
#include "smax/error.h"

namespace smax {
namespace detail {
namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

// What the sharded cross-entropy shares (ops/losses/cross_entropy_rows.h).
namespace ce_rows {

void check_ce_options(const char* op, const CrossEntropyOptions& ce) {
  check_ce_scalars(op, ce);
  check_loss_enums(op, ce.loss);
}


void prepare(CeSetup& s, Rowwise& rw, const LogitsSetup& ls, const TensorView& target,
             const CrossEntropyOptions& ce, ClassShard shard) {
  s.src = as_rank1_if_scalar(rw.src());
  s.axis = rw.axis();
  s.classes = s.src.shape[s.axis];
  s.vocab = shard.vocab < 0 ? s.classes : shard.vocab;
  s.rows = count_rows(s.src, s.axis);
  s.has_weight = ce.loss.weight.has_value();
  s.a = ce.label_smoothing;
  s.zs = ce.lse_square_scale;
  s.cap = ce.softcap;
  s.scale = rw.scale();
  int inputs = 1;
  if (ls.mask) {
    rw.add_bool_masked_input(*ls.mask, "additive_mask");  // bool mask wins over NaN
    s.mask_input = inputs++;
  }
  std::vector<char> active(static_cast<size_t>(s.rows), 1);
  double denominator = static_cast<double>(s.rows);
  if (is_floating(target.dtype)) {
    s.probs = true;
    rw.add_input(target, "target");
    s.target_input = inputs++;
    if (ce.loss.weight) {
      const TensorView& w = *ce.loss.weight;
      check_float_view(w, s.op, "weight");
      if (w.rank != 1 || w.shape[0] != s.classes) {
        fail(s.op, "weight shape " + w.describe() + " must be [" + std::to_string(s.classes) +
                       "] (one weight per class)");
      }
      s.weight.resize(static_cast<size_t>(s.classes));
      s.weight64.resize(static_cast<size_t>(s.classes));
      const auto* wp = static_cast<const char*>(w.data);
      const int64_t step = w.strides[0] * dtype_size(w.dtype);
      for (int64_t c = 0; c < s.classes; ++c) {
        s.weight[static_cast<size_t>(c)] = load_f32(wp + c * step, w.dtype);
        s.weight64[static_cast<size_t>(c)] = load_f64(wp + c * step, w.dtype);
      }
    }
  } else {
    if (target.dtype != DType::kI64) {
      fail(s.op, std::string("target must be i64 class indices or floating probabilities, got ") +
                     dtype_name(target.dtype));
    }
    s.lr.emplace(s.op, s.src, s.axis, target, ce.loss, shard);
    if (ce.loss.weight) {
      s.weight.resize(static_cast<size_t>(s.classes));
      s.weight64.resize(static_cast<size_t>(s.classes));
      for (int64_t c = 0; c < s.classes; ++c) {
        s.weight[static_cast<size_t>(c)] = static_cast<float>(s.lr->class_weight(c));
        s.weight64[static_cast<size_t>(c)] = s.lr->class_weight(c);
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

kernels::XentRow make_row(const CeSetup& s, const RowArgs& a) {
  kernels::XentRow row;
  row.x = a.in[0];
  row.mask = s.mask_input >= 0 ? a.in[s.mask_input] : nullptr;
  row.softcap = s.cap;
  row.n = a.n;
  return row;
}

// t_j as double from the row (u_j after scale / bool mask, softcap, mask).
double logit_at(const CeSetup& s, const RowArgs& a, int64_t j) {
  double u = static_cast<double>(a.in[0][j]);
  if (s.cap > 0.0f && std::isfinite(u)) {
    u = static_cast<double>(s.cap) * std::tanh(u / static_cast<double>(s.cap));
  }
  if (s.mask_input >= 0) u += static_cast<double>(a.in[s.mask_input][j]);
  return u;
}

// d t_j / d u_j (1 without softcap).
double cap_deriv(const CeSetup& s, const RowArgs& a, int64_t j) {
  if (!(s.cap > 0.0f)) return 1.0;
  const double x = std::fabs(static_cast<double>(a.in[0][j]) / static_cast<double>(s.cap));
  const double e = std::exp(-2.0 * x);
  return 4.0 * e / ((1.0 + e) * (1.0 + e));
}

bool masked_at(const CeSetup& s, const RowArgs& a, int64_t j) {
  return logit_at(s, a, j) == -kInf;
}

// NaN row of the gradient; masked entries stay 0.
void nan_row(const CeSetup& s, const RowArgs& a, float* out) {
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

// accuracy's argmax. With softcap and an additive mask it is the first
// maximum of the float64 t_j = cap tanh(u_j / cap) + mask_j (logit_at): the
// scan's f32 t = fl(fl(c) + mask) rounds the cap's last bits away and ties
// entries whose logits differ (fuzz/regressions/options/
// cross_entropy_prob_targets_softcap_mask_accuracy). Candidates: the
// entries whose f32 t is within 2^-18 (cap + |max|) of the f32 max, four
// times the scan's rounding of t (Tanh <= 4 ulp, u / cap, the products and
// the sum: <= 2^-21 cap + 2^-24 |t| each way); every other entry is below
// the maximum in float64 too. Otherwise the scan's argmax (of t, or of u
// with softcap and no mask).
int64_t accuracy_argmax(const CeSetup& s, const RowArgs& a, const kernels::XentScan& sc) {
  if (!(s.cap > 0.0f) || s.mask_input < 0 || a.n == 0) return sc.argmax;
  const double m = static_cast<double>(sc.max);
  if (!std::isfinite(m)) return sc.argmax;
  const float threshold =
      static_cast<float>(m - 0x1p-18 * (static_cast<double>(s.cap) + std::fabs(m)));
  constexpr int64_t kCap = 64;
  int64_t idx[kCap];
  const int64_t count = kernels::xent_near_max(make_row(s, a), threshold, idx, kCap);
  int64_t best = -1;
  double best_v = -kInf;
  auto consider = [&](int64_t j) {
    const double v = logit_at(s, a, j);
    if (best < 0 || v > best_v) {
      best = j;
      best_v = v;
    }
  };
  if (count <= kCap) {
    for (int64_t k = 0; k < count; ++k) consider(idx[k]);
  } else {  // many near-ties (e.g. a saturated cap): every entry, in order
    for (int64_t j = 0; j < a.n; ++j) consider(j);
  }
  return best < 0 ? sc.argmax : best;
}

namespace {
struct Outputs {
  std::optional<RowView> lse, entropy, target_logprob;
  bool z = false, acc = false;
};
}  // namespace

// L = LSE(t) from a scan: NaN (NaN / +inf in the row), -inf (every logit
// masked, or n == 0), else ref + log d.
double scan_lse(const kernels::XentScan& sc) {
  return std::isnan(sc.d) ? kNan : sc.d == 0.0 ? -kInf : static_cast<double>(sc.ref) + std::log(sc.d);
}

void grad_row_with(const CeSetup& s, const RowArgs& a, double g, double shift, double inv_d,
                   double A, int64_t y, double wy, float* out) {
  const kernels::XentRow row = make_row(s, a);
  const double C = static_cast<double>(s.vocab);
  const float* weight = s.weight.empty() ? nullptr : s.weight.data();
  kernels::XentGrad gr;
  gr.shift = static_cast<float>(shift);
  gr.weight = weight;
  gr.scale = s.scale;
  gr.b = static_cast<float>(g * s.a / C);
  if (s.probs) {
    gr.q = a.in[s.target_input];
    gr.bq = static_cast<float>(g * (1.0 - s.a));
  }
  gr.factor = g * A * inv_d;
  gr.stream = a.stream_out && out == a.out[0];
  // The target's term is read before the kernel: `out` may be the logits.
  const bool fix_y = y >= 0 && !masked_at(s, a, y);
  const double fix =
      fix_y ? static_cast<double>(s.scale) * cap_deriv(s, a, y) * g * (1.0 - s.a) * wy : 0.0;
  // Beyond-f32 factors (e.g. 2 zs L with L near FLT_MAX) in float64.
  const float* q = gr.q;
  xent_grad_guarded(
      row, gr, out, [&](int64_t j) { return logit_at(s, a, j); },
      [&](int64_t j, double t) {
        const double p = std::exp(t - shift) * inv_d;
        const double w = weight != nullptr ? static_cast<double>(weight[j]) : 1.0;
        const double qj = q != nullptr ? static_cast<double>(q[j]) : 0.0;
        // b and bq in float64 (gr's are f32: a denormal-range g loses them).
        const double dt = g * A * p - w * (g * s.a / C + (q != nullptr ? g * (1.0 - s.a) : 0.0) * qj);
        return static_cast<double>(s.scale) * cap_deriv(s, a, j) * dt;
      });
  if (fix_y) out[y] = static_cast<float>(static_cast<double>(out[y]) - fix);
}

bool grad_row_special(const CeSetup& s, const RowArgs& a, double g, double L, float* out) {
  if (L == -kInf) {  // every logit masked (or n == 0)
    fill(out, a.n, s.empty_row == EmptyRow::kNan ? std::numeric_limits<float>::quiet_NaN() : 0.0f);
    return true;
  }
  if (!std::isfinite(L) || std::isnan(g)) {  // NaN row, or a NaN G_r (0 / 0 mean, NaN dloss)
    nan_row(s, a, out);
    return true;
  }
  return false;
}

void grad_row(const CeSetup& s, const RowArgs& a, double g, double L, double shift, double inv_d,
              double sum_w, const kernels::XentProbSums* ps_in, float* out) {
  if (grad_row_special(s, a, g, L, out)) return;
  const double C = static_cast<double>(s.vocab);
  double A;
  double wy = 1.0;
  int64_t y = -1;
  if (s.probs) {
    const float* weight = s.weight.empty() ? nullptr : s.weight.data();
    const kernels::XentProbSums ps =
        ps_in != nullptr ? *ps_in : kernels::xent_prob_sums(make_row(s, a), a.in[s.target_input], weight);
    A = (1.0 - s.a) * (ps.wq + ps.wq_masked) + 2.0 * s.zs * L;
  } else {
    y = s.lr->target(a.row);
    wy = s.lr->weight(a.row);
    A = (1.0 - s.a) * wy + 2.0 * s.zs * wy * L;
  }
  if (s.a > 0.0) A += s.a / C * sum_w;
  grad_row_with(s, a, g, shift, inv_d, A, y, wy, out);
}

// grad is exactly src (same data, shape and strides).
bool same_view(const TensorView& a_in, const TensorView& b_in) {
  const TensorView a = as_rank1_if_scalar(a_in), b = as_rank1_if_scalar(b_in);
  if (a.data != b.data || a.rank != b.rank || a.dtype != b.dtype) return false;
  for (int d = 0; d < a.rank; ++d) {
    if (a.shape[d] != b.shape[d] || a.strides[d] != b.strides[d]) return false;
  }
  return true;
}

// How the gradient rows (a Rowwise output, out[0]) are stored
// (core/stream_stores.h): asked only where every row's kernel streams when
// told to, so that a measured streamed sample is one: f32 logits and
// gradient, the gradient contiguous along the axis and not the logits
// themselves (those go through scratch), rows of >= kStreamMinCols; class
// or probability targets (one site: the same kernel, with q's stream or
// without).
// (Rows that end early store as usual even then: ignored targets, empty or
// NaN rows, factors beyond f32; a batch with many of them measures partly
// regular stores as streamed, which can only favour "regular".) The
// footprint is the logits plus the gradient, plus the probabilities.
StoreChoice grad_stores(const CeSetup& s, const Rowwise& rw, const TensorView& grad) {
  const int64_t n = rw.row_length();
  if (s.src.dtype != DType::kF32 || grad.dtype != DType::kF32 || n < kStreamMinCols ||
      same_view(grad, s.src) || grad.rank == 0 || grad.strides[rw.axis()] != 1) {
    return StoreChoice::kRegular;
  }
  const int64_t numel = s.rows * n;  // (rw.rows() is known only once it runs)
  const int64_t bytes = s.probs ? 12 : 8;
  return choose_stores(StoreSite::kCrossEntropy,
                       numel < INT64_MAX / bytes ? numel * bytes : INT64_MAX);
}

}  // namespace ce_rows
using namespace ce_rows;  // NOLINT: this file's own helpers, named detail:: below
}  // namespace detail

using detail::RowArgs;

void cross_entropy(const TensorView& src, const TensorView& target, const TensorView& dst,
                   const CrossEntropyOptions& ce, const SoftmaxOptions& options) {
  const char* op = "cross_entropy";
  detail::check_ce_options(op, ce);
  detail::Pass pass(op, src, target, ce, options);
  detail::Rowwise& rw = pass.rw;
  detail::CeSetup& s = pass.s;

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
  std::vector<detail::NamedView> ins = {{target, "target"}};
  if (ce.loss.weight) ins.push_back({*ce.loss.weight, "weight"});
  if (options.additive_mask) ins.push_back({*options.additive_mask, "additive_mask"});
  if (options.bool_mask) ins.push_back({*options.bool_mask, "bool_mask"});
  // The fused gradient: src's shape, exactly src or disjoint from it
  // (Rowwise checks a separate output), disjoint from everything else. In
  // place (grad is src) it is not a Rowwise output: the row function writes
  // it straight over the logits' row once the row is done (through scratch
  // when the row is strided or was transformed by scale / masks).
  const bool fused = ce.grad.has_value();
  const bool in_place = fused && detail::same_view(*ce.grad, src);
  if (fused) {
    if (in_place) {
      detail::check_no_self_overlap(*ce.grad, "grad", op);
    } else {
      rw.add_output(*ce.grad, "grad", /*allow_alias=*/false);
    }
    std::vector<detail::NamedView> others = ins;
    others.insert(others.end(), outs.begin(), outs.end());
    detail::check_outputs_disjoint(op, {{*ce.grad, "grad"}}, others);
  }
  ins.push_back({src, "src"});
  detail::check_outputs_disjoint(op, outs, ins);
  const std::vector<double> G = fused ? s.red->unit_coefficients() : std::vector<double>();

  const size_t rows = static_cast<size_t>(s.rows);
  std::vector<double> loss(rows, 0.0), z(o.z ? rows : 0), lse(o.lse ? rows : 0),
      ent(o.entropy ? rows : 0), tlp(o.target_logprob ? rows : 0), acc(o.acc ? rows : 0);
  const double C = static_cast<double>(s.classes);
  const float* weight = s.weight.empty() ? nullptr : s.weight.data();

  // f64 logits: float64 arithmetic (cross_entropy_f64.h), else f32.
  const bool f64 = s.src.dtype == DType::kF64;
  auto row_fn = [&](const auto& a) {
    using T = std::remove_pointer_t<decltype(a.scratch)>;
    constexpr bool kF64 = std::is_same_v<T, double>;
    const int64_t r = a.row;
    const size_t ri = static_cast<size_t>(r);
    const bool active = s.red->active(r);
    const bool need_stats = o.lse || o.entropy;
    // Where the gradient row goes: the output, or (in place) the logits'
    // row itself when Rowwise passed it directly, else scratch + scatter.
    T* grad_out = nullptr;
    void* scatter_to = nullptr;
    int64_t scatter_stride = 0;
    if (in_place) {
      const detail::Geometry& geo = rw.geometry();
      int64_t off[detail::kMaxOperands];
      geo.row_offsets(r, off);
      char* row0 = geo.at(0, off[0]);
      if (a.in[0] == reinterpret_cast<const T*>(row0) &&
          (geo.axis_stride[0] == 1 || a.n <= 1)) {
        grad_out = reinterpret_cast<T*>(row0);
      } else {
        grad_out = a.scratch;
        scatter_to = row0;
        scatter_stride = geo.axis_stride[0];
      }
    } else if (fused) {
      grad_out = a.out[0];
    }
    auto finish_grad = [&] {
      if (scatter_to == nullptr) return;
      if constexpr (kF64) {
        detail::scatter_row_f64(grad_out, a.n, scatter_to, s.src.dtype, scatter_stride);
      } else {
        detail::scatter_row_f32(grad_out, a.n, scatter_to, s.src.dtype, scatter_stride);
      }
    };
    if (fused && !active && !need_stats) {
      for (int64_t j = 0; j < a.n; ++j) grad_out[j] = 0;
      finish_grad();
      return;
    }
    if (!active && !need_stats) return;
    // Per-row results (filled below, then stored where requested).
    double L = -detail::kInf, H = 0.0, loss_r = 0.0, z_r = 0.0, tlp_r = -detail::kInf, acc_r = 0.0;
    if constexpr (kF64) {
      const detail::CeWants wants{o.entropy.has_value(), o.acc};
      const detail::CeRowF64 rr = detail::ce_forward_row_f64(
          s, a, active, wants, fused ? G[ri] : 0.0, fused ? grad_out : nullptr,
          a.scratch + (in_place ? a.n : 0));
      L = rr.L, H = rr.H, loss_r = rr.loss, z_r = rr.z, tlp_r = rr.tlp, acc_r = rr.acc;
    } else {
      kernels::XentScan sc;
      kernels::XentProbSums ps;
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
            ps = kernels::xent_prob_sums(detail::make_row(s, a), q, weight);
            const double b = 1.0 - s.a;
            loss_r = b * (ps.wq * L - ps.wqt);
            if (b != 0.0 && ps.wq_masked != 0.0) loss_r += b * ps.wq_masked * detail::kInf;
            tlp_r = ps.qt - ps.q * L;
            if (ps.q_masked != 0.0) tlp_r -= ps.q_masked * detail::kInf;
            if (o.acc) acc_r = detail::accuracy_argmax(s, a, sc) == detail::first_argmax(q, a.n) ? 1.0 : 0.0;
            z_r = s.zs * L * L;
          } else {
            const int64_t y = s.lr->target(r);
            const double wy = s.lr->weight(r);
            const double ty = detail::logit_at(s, a, y);
            const double c = (1.0 - s.a) * wy;
            if (c != 0.0) loss_r = c * (L - ty);
            z_r = s.zs * wy * L * L;
            tlp_r = ty - L;
            if (o.acc) acc_r = detail::accuracy_argmax(s, a, sc) == y ? 1.0 : 0.0;
          }
          if (s.a > 0.0) loss_r += s.a * (sc.sum_w * L - sc.sum_t) / C;
          loss_r += z_r;
        }
      }
      if (fused && active && a.n > 0) {
        detail::grad_row(s, a, G[ri], detail::scan_lse(sc), sc.ref, 1.0 / sc.d, sc.sum_w,
                         s.probs ? &ps : nullptr, grad_out);
      } else if (fused) {
        detail::fill(grad_out, a.n, 0.0f);  // inactive row (its stats were needed)
      }
    }
    finish_grad();
    loss[ri] = loss_r;
    if (o.z) z[ri] = z_r;
    if (o.lse) lse[ri] = L;
    if (o.entropy) ent[ri] = H;
    if (o.target_logprob) tlp[ri] = active ? tlp_r : 0.0;
    if (o.acc) acc[ri] = active ? acc_r : 0.0;
  };

  if (f64) {
    rw.run<double>(detail::ce_f64_scratch(s.classes) + (in_place ? s.classes : 0), row_fn);
  } else {
    if (fused && !in_place) {
      rw.set_stores(detail::StoreSite::kCrossEntropy, detail::grad_stores(s, rw, *ce.grad));
    }
    rw.run(in_place ? s.classes : 0, row_fn);
  }

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
  if (ce.grad) {
    detail::fail(op, "grad (the fused gradient of the forward) is not an option of the backward "
                     "pass; pass the gradient as dsrc");
  }
  detail::Pass pass(op, src, target, ce, options);
  detail::Rowwise& rw = pass.rw;
  detail::CeSetup& s = pass.s;
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

  const float* weight = s.weight.empty() ? nullptr : s.weight.data();

  if (s.src.dtype == DType::kF64) {  // float64 arithmetic (cross_entropy_f64.h)
    rw.run<double>(detail::ce_f64_scratch(s.classes), [&](const detail::RowArgs64& a) {
      double* out = a.out[0];
      if (!s.red->active(a.row)) {
        for (int64_t j = 0; j < a.n; ++j) out[j] = 0.0;
        return;
      }
      detail::ce_backward_row_f64(s, a, G[static_cast<size_t>(a.row)], out, a.scratch);
    });
    return;
  }
  rw.set_stores(detail::StoreSite::kCrossEntropy, detail::grad_stores(s, rw, dsrc));
  rw.run(0, [&](const RowArgs& a) {
    const int64_t r = a.row;
    float* out = a.out[0];
    if (!s.red->active(r)) {
      detail::fill(out, a.n, 0.0f);
      return;
    }
    const double g = G[static_cast<size_t>(r)];
    if (use_lse) {
      const double L = lse_in[static_cast<size_t>(r)];
      detail::grad_row(s, a, g, L, L, 1.0, 0.0, nullptr, out);
      return;
    }
    kernels::XentScanRequest req;
    req.sums = s.a > 0.0;
    req.weight = weight;
    const kernels::XentScan sc = kernels::xent_scan(detail::make_row(s, a), req);
    detail::grad_row(s, a, g, detail::scan_lse(sc), sc.ref, 1.0 / sc.d, sc.sum_w, nullptr, out);
  });
}

}  // namespace smax
