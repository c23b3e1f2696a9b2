// src/ops/losses/z_loss.cc: PaLM's z-loss (coefficient * LSE^2) on its own and de
// Brebisson & Vincent's spherical Z-loss (include/smax/cross_entropy.h),
// forward and backward, through the same Rowwise / LossRows / Reducer
// machinery as cross_entropy. f64 src runs in float64 arithmetic
// (Rowwise::run_native; the row math in ops/losses/z_loss_f64.h).
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cross_entropy.h"
#include "ops/losses/cross_entropy.h"
#include "ops/losses/z_loss_f64.h"
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

// Rows, per-row weights (w[target] or 1) and the reducer of a z-loss call.
struct ZSetup {
  TensorView src;
  int axis = 0;
  std::optional<LossRows> lr;
  std::optional<Reducer> red;
  std::vector<double> w;  // per row; 0 for ignored rows
};

ZSetup z_setup(const char* op, Rowwise& rw, const TensorView* target, const LossOptions& loss) {
  check_loss_enums(op, loss);
  ZSetup z;
  z.src = as_rank1_if_scalar(rw.src());
  z.axis = rw.axis();
  const int64_t rows = count_rows(z.src, z.axis);
  std::vector<char> active(static_cast<size_t>(rows), 1);
  z.w.assign(static_cast<size_t>(rows), 1.0);
  double denominator = static_cast<double>(rows);
  if (target != nullptr) {
    z.lr.emplace(op, z.src, z.axis, *target, loss);
    denominator = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
      active[static_cast<size_t>(r)] = !z.lr->ignored(r);
      z.w[static_cast<size_t>(r)] = z.lr->weight(r);
      denominator += z.lr->weight(r);
    }
  } else if (loss.weight) {
    fail(op, "weight needs class targets (use the overload that takes `target`)");
  }
  z.red.emplace(op, z.src, z.axis, loss.reduction, loss.empty_mean, std::move(active),
                denominator);
  return z;
}

void check_coefficient(const char* op, float c) {
  if (!(std::isfinite(c) && c >= 0.0f)) {
    fail(op, "coefficient must be finite and >= 0, got " + std::to_string(c));
  }
}

void check_ab(const char* op, float a, float b) {
  if (!(std::isfinite(a) && a > 0.0f)) fail(op, "a must be finite and > 0, got " + std::to_string(a));
  if (!std::isfinite(b)) fail(op, "b must be finite, got " + std::to_string(b));
}

std::vector<NamedView> loss_inputs(const TensorView& src, const TensorView* target,
                                   const LossOptions& loss, const SoftmaxOptions& options) {
  std::vector<NamedView> ins = {{src, "src"}};
  if (target != nullptr) ins.push_back({*target, "target"});
  if (loss.weight) ins.push_back({*loss.weight, "weight"});
  if (options.additive_mask) ins.push_back({*options.additive_mask, "additive_mask"});
  if (options.bool_mask) ins.push_back({*options.bool_mask, "bool_mask"});
  return ins;
}

kernels::XentRow plain_row(const RowArgs& a) {
  kernels::XentRow row;
  row.x = a.in[0];
  row.n = a.n;
  return row;
}

void z_forward(const TensorView& src, const TensorView* target, const TensorView& dst,
               float coefficient, const LossOptions& loss, const SoftmaxOptions& options) {
  const char* op = "z_loss";
  check_coefficient(op, coefficient);
  Rowwise rw(op, src, "src", true, options);
  ZSetup z = z_setup(op, rw, target, loss);
  z.red->check_output(dst, "dst");
  check_outputs_disjoint(op, {{dst, "dst"}}, loss_inputs(src, target, loss, options));
  std::vector<double> values(z.w.size(), 0.0);
  const double c = coefficient;
  // Scratch: the float64 path's terms (n doubles).
  rw.run_native(8 * rw.row_length(), [&](const auto& a) {
    const size_t r = static_cast<size_t>(a.row);
    if (!z.red->active(a.row)) return;
    double v;
    if constexpr (std::is_same_v<RowValue<decltype(a)>, double>) {
      const ZRow64 zr = a.n > 0 ? z_row_f64(a.in[0], a.n, a.scratch) : ZRow64{2};
      if (zr.kind == 1) {
        v = kNan;
      } else if (zr.kind == 2) {
        v = options.empty_row == EmptyRow::kNan ? kNan : 0.0;
      } else {
        v = c * z.w[r] * zr.L * zr.L;
      }
    } else {
      const kernels::XentScan sc =
          a.n > 0 ? kernels::xent_scan(plain_row(a), {}) : kernels::XentScan{};
      if (std::isnan(sc.d)) {
        v = kNan;
      } else if (sc.d == 0.0) {
        v = options.empty_row == EmptyRow::kNan ? kNan : 0.0;
      } else {
        const double L = static_cast<double>(sc.ref) + std::log(sc.d);
        v = c * z.w[r] * L * L;
      }
    }
    values[r] = v;
  });
  z.red->write(values, dst);
}

void z_backward(const TensorView& src, const TensorView* target, const TensorView& dloss,
                const TensorView& dsrc, float coefficient, const LossOptions& loss,
                const SoftmaxOptions& options) {
  const char* op = "z_loss_backward";
  check_coefficient(op, coefficient);
  Rowwise rw(op, src, "src", true, options);
  ZSetup z = z_setup(op, rw, target, loss);
  rw.add_output(dsrc, "dsrc", true);
  const std::vector<double> G = z.red->coefficients(dloss);
  std::vector<NamedView> ins = {{dloss, "dloss"}};
  if (target != nullptr) ins.push_back({*target, "target"});
  if (loss.weight) ins.push_back({*loss.weight, "weight"});
  check_outputs_disjoint(op, {{dsrc, "dsrc"}}, ins);
  const float scale = rw.scale();
  const double c = coefficient;
  if (rw.any_input_f64()) {
    rw.run<double>(rw.row_length(), [&](const RowArgs64& a) {
      double* out = a.out[0];
      const size_t r = static_cast<size_t>(a.row);
      if (!z.red->active(a.row) || a.n == 0) {
        for (int64_t j = 0; j < a.n; ++j) out[j] = 0.0;
        return;
      }
      const ZRow64 zr = z_row_f64(a.in[0], a.n, a.scratch);
      if (zr.kind != 0 || std::isnan(G[r])) {
        // NaN row or NaN coefficient: NaN, masked entries 0; all masked:
        // the empty-row policy.
        const bool all_masked = zr.kind == 2;
        const double fill = all_masked && options.empty_row == EmptyRow::kZero ? 0.0 : kNan;
        for (int64_t j = 0; j < a.n; ++j) out[j] = (!all_masked && a.in[0][j] == -kInf) ? 0.0 : fill;
        return;
      }
      // dsrc_j = K p_j, K = s G 2 c w L, p_j = terms_j / S. An entry with
      // p_j = 0 (masked, or below float64's range) gets exactly 0 even when
      // K overflows (inf * 0 would be NaN).
      const double K = a.scale * G[r] * 2.0 * c * z.w[r] * zr.L;
      for (int64_t j = 0; j < a.n; ++j) {
        const double p = a.scratch[j] / zr.sum;
        out[j] = p == 0.0 ? 0.0 : K * p;
      }
    });
    return;
  }
  rw.run(0, [&](const RowArgs& a) {
    float* out = a.out[0];
    const size_t r = static_cast<size_t>(a.row);
    if (!z.red->active(a.row) || a.n == 0) {
      for (int64_t j = 0; j < a.n; ++j) out[j] = 0.0f;
      return;
    }
    const kernels::XentScan sc = kernels::xent_scan(plain_row(a), {});
    if (std::isnan(sc.d) || sc.d == 0.0) {
      const bool all_masked = !std::isnan(sc.d);
      const float fill = all_masked && options.empty_row == EmptyRow::kZero
                             ? 0.0f
                             : std::numeric_limits<float>::quiet_NaN();
      for (int64_t j = 0; j < a.n; ++j) out[j] = (!all_masked && a.in[0][j] == -INFINITY) ? 0.0f : fill;
      return;
    }
    if (std::isnan(G[r])) {  // 0 / 0 mean (or NaN dloss): NaN, masked entries 0
      for (int64_t j = 0; j < a.n; ++j) {
        out[j] = a.in[0][j] == -INFINITY ? 0.0f : std::numeric_limits<float>::quiet_NaN();
      }
      return;
    }
    const double L = static_cast<double>(sc.ref) + std::log(sc.d);
    kernels::XentGrad gr;
    gr.shift = sc.ref;
    gr.factor = G[r] * 2.0 * c * z.w[r] * L / sc.d;
    gr.scale = scale;
    // Beyond-f32 factors (L near FLT_MAX times a large dloss) in float64, as
    // cross_entropy_backward does.
    const float* x = a.in[0];
    xent_grad_guarded(
        plain_row(a), gr, out, [&](int64_t j) { return static_cast<double>(x[j]); },
        [&](int64_t, double t) {
          return static_cast<double>(scale) * gr.factor * std::exp(t - static_cast<double>(sc.ref));
        });
  });
}

// ---- spherical Z-loss ---------------------------------------------------------------
struct Sphere {
  double D, mean, sigma, zy;
  bool nan, empty;
};

Sphere sphere_row(const RowArgs& a, int64_t y) {
  Sphere s{};
  const kernels::SphereStats st = kernels::sphere_stats(a.in[0], a.n);
  s.D = static_cast<double>(st.count);
  s.empty = st.count == 0;
  if (s.empty) return s;
  s.mean = st.mean;
  s.sigma = std::sqrt(st.m2 / s.D);
  const double ty = static_cast<double>(a.in[0][y]);
  s.zy = ty == -kInf ? kNan : (ty - s.mean) / s.sigma;
  s.nan = std::isnan(s.zy) || std::isnan(s.sigma) || std::isinf(s.sigma);
  return s;
}

double softplus(double x) { return std::max(x, 0.0) + std::log1p(std::exp(-std::fabs(x))); }
double sigmoid(double x) { return x >= 0 ? 1.0 / (1.0 + std::exp(-x)) : std::exp(x) / (1.0 + std::exp(x)); }

}  // namespace
}  // namespace detail

using detail::RowArgs;

void z_loss(const TensorView& src, const TensorView& dst, float coefficient,
            const LossOptions& loss, const SoftmaxOptions& options) {
  detail::z_forward(src, nullptr, dst, coefficient, loss, options);
}

void z_loss(const TensorView& src, const TensorView& target, const TensorView& dst,
            float coefficient, const LossOptions& loss, const SoftmaxOptions& options) {
  detail::z_forward(src, &target, dst, coefficient, loss, options);
}

void z_loss_backward(const TensorView& src, const TensorView& dloss, const TensorView& dsrc,
                     float coefficient, const LossOptions& loss, const SoftmaxOptions& options) {
  detail::z_backward(src, nullptr, dloss, dsrc, coefficient, loss, options);
}

void z_loss_backward(const TensorView& src, const TensorView& target, const TensorView& dloss,
                     const TensorView& dsrc, float coefficient, const LossOptions& loss,
                     const SoftmaxOptions& options) {
  detail::z_backward(src, &target, dloss, dsrc, coefficient, loss, options);
}

void spherical_z_loss(const TensorView& src, const TensorView& target, const TensorView& dst,
                      float a, float b, const LossOptions& loss, const SoftmaxOptions& options) {
  const char* op = "spherical_z_loss";
  detail::check_ab(op, a, b);
  detail::Rowwise rw(op, src, "src", true, options);
  detail::ZSetup z = detail::z_setup(op, rw, &target, loss);
  z.red->check_output(dst, "dst");
  detail::check_outputs_disjoint(op, {{dst, "dst"}}, detail::loss_inputs(src, &target, loss, options));
  std::vector<double> values(z.w.size(), 0.0);
  const double ad = a, bd = b;
  rw.run_native(0, [&](const auto& args) {
    const int64_t r = args.row;
    if (!z.red->active(r)) return;
    const size_t ri = static_cast<size_t>(r);
    if (args.n == 0) {
      values[ri] = options.empty_row == EmptyRow::kNan ? detail::kNan : 0.0;
      return;
    }
    bool empty;
    double zy;
    if constexpr (std::is_same_v<detail::RowValue<decltype(args)>, double>) {
      const detail::Sphere64 s = detail::sphere_row_f64(args.in[0], args.n, z.lr->target(r));
      empty = s.empty;
      zy = s.zy;
    } else {
      const detail::Sphere s = detail::sphere_row(args, z.lr->target(r));
      empty = s.empty;
      zy = s.zy;
    }
    if (empty) {
      values[ri] = options.empty_row == EmptyRow::kNan ? detail::kNan : 0.0;
    } else {
      values[ri] = z.w[ri] * detail::softplus(ad * (bd - zy)) / ad;
    }
  });
  z.red->write(values, dst);
}

void spherical_z_loss_backward(const TensorView& src, const TensorView& target,
                               const TensorView& dloss, const TensorView& dsrc, float a,
                               float b, const LossOptions& loss,
                               const SoftmaxOptions& options) {
  const char* op = "spherical_z_loss_backward";
  detail::check_ab(op, a, b);
  detail::Rowwise rw(op, src, "src", true, options);
  detail::ZSetup z = detail::z_setup(op, rw, &target, loss);
  rw.add_output(dsrc, "dsrc", true);
  const std::vector<double> G = z.red->coefficients(dloss);
  std::vector<detail::NamedView> ins = {{target, "target"}, {dloss, "dloss"}};
  if (loss.weight) ins.push_back({*loss.weight, "weight"});
  detail::check_outputs_disjoint(op, {{dsrc, "dsrc"}}, ins);
  const double s_scale = rw.scale();
  const double ad = a, bd = b;
  const float nanf = std::numeric_limits<float>::quiet_NaN();
  if (rw.any_input_f64()) {  // float64 arithmetic (ops/losses/z_loss_f64.h)
    rw.run<double>(0, [&](const detail::RowArgs64& args) {
      double* out = args.out[0];
      const int64_t r = args.row;
      const size_t ri = static_cast<size_t>(r);
      if (!z.red->active(r) || args.n == 0) {
        for (int64_t j = 0; j < args.n; ++j) out[j] = 0.0;
        return;
      }
      const int64_t y = z.lr->target(r);
      const detail::Sphere64 s = detail::sphere_row_f64(args.in[0], args.n, y);
      if (s.empty) {
        const double v = options.empty_row == EmptyRow::kNan ? detail::kNan : 0.0;
        for (int64_t j = 0; j < args.n; ++j) out[j] = v;
        return;
      }
      if (s.nan || std::isnan(G[ri])) {  // NaN row, or a 0 / 0 mean (NaN dloss)
        for (int64_t j = 0; j < args.n; ++j) {
          out[j] = args.in[0][j] == -detail::kInf ? 0.0 : detail::kNan;
        }
        return;
      }
      // As the f32 path below, with s = double(scale) / double(temperature).
      const double c0 = -z.w[ri] * detail::sigmoid(ad * (bd - s.zy)) / s.sigma;
      const double f = args.scale * G[ri] * c0;
      // alpha + beta (t_k - mean) with beta (t_k - mean) = gamma z_k.
      const double alpha = -f / s.D, gamma = -f * s.zy / s.D;
      detail::sphere_grad_f64(args.in[0], args.n, s, alpha, gamma, f, y, out);
    });
    return;
  }
  rw.run(0, [&](const RowArgs& args) {
    float* out = args.out[0];
    const int64_t r = args.row;
    const size_t ri = static_cast<size_t>(r);
    if (!z.red->active(r) || args.n == 0) {
      for (int64_t j = 0; j < args.n; ++j) out[j] = 0.0f;
      return;
    }
    const int64_t y = z.lr->target(r);
    const detail::Sphere s = detail::sphere_row(args, y);
    if (s.empty) {
      const float v = options.empty_row == EmptyRow::kNan ? nanf : 0.0f;
      for (int64_t j = 0; j < args.n; ++j) out[j] = v;
      return;
    }
    if (s.nan || std::isnan(G[ri])) {  // NaN row, or a 0 / 0 mean (NaN dloss)
      for (int64_t j = 0; j < args.n; ++j) out[j] = args.in[0][j] == -INFINITY ? 0.0f : nanf;
      return;
    }
    // dl/dt_k = c0 ([k == y] - 1/D - z_y (t_k - mean) / (sigma D)), c0 = -w sig / sigma.
    const double c0 = -z.w[ri] * detail::sigmoid(ad * (bd - s.zy)) / s.sigma;
    const double f = s_scale * G[ri] * c0;
    const double alpha = -f / s.D, beta = -f * s.zy / (s.sigma * s.D);
    kernels::sphere_grad(args.in[0], args.n, s.mean, alpha, beta, out);
    // The target entry in float64 from the start: adding f to the rounded
    // f32 value loses everything when that value is beyond FLT_MAX (+inf
    // plus a larger negative f must give -inf, not +inf).
    const double ty = static_cast<double>(args.in[0][y]);
    out[y] = static_cast<float>(std::fma(beta, ty - s.mean, alpha) + f);
  });
}

}  // namespace smax
