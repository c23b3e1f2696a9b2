// src/ops/normalizers/rescaled.cc: SSMax, softpick, StableMax (+ cross-entropy) and the
// Softmax Collapse detector (include/smax/rescaled.h), on the Rowwise driver
// (core/rowwise.h) and LossRows (core/loss_rows.h). Op parameters are checked
// before Rowwise::run, so nothing is written on error. Row math lives in
// kernels/rescaled.cc (Highway); SSMax's softmax is the library's softmax
// row kernel (kernels::softmax_rows) with scale = s ln n. f64 logits (SSMax
// backward: any f64 input) run in float64 arithmetic: the row math of
// ops/normalizers/rescaled_f64.h (SSMax on the float64 softmax kernels, c
// not rounded to f32). The collapse detector stays f32 (it asks whether
// f32 / f16 / bf16 arithmetic collapses).
#include "smax/rescaled.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/softmax_f64.h"
#include "kernels/rescaled.h"
#include "ops/normalizers/rescaled_f64.h"
#include "core/enum_names.h"
#include "core/errors.h"
#include "core/loss_rows.h"
#include "core/rowwise.h"
#include "core/validate.h"
#include "smax/error.h"

namespace smax {
namespace {

using detail::check_disjoint_or_same;
using detail::LossRows;
using detail::RowArgs;
using detail::Rowwise;
using detail::BackwardRowwise;
using detail::ForwardRowwise;

constexpr float kNaNf = std::numeric_limits<float>::quiet_NaN();
constexpr float kNegInff = -std::numeric_limits<float>::infinity();

using detail::fail;
using detail::num;

void fill(float* p, int64_t n, float v) {
  for (int64_t i = 0; i < n; ++i) p[i] = v;
}

float empty_value(EmptyRow policy) { return policy == EmptyRow::kNan ? kNaNf : 0.0f; }

// ---- SSMax ---------------------------------------------------------------------

void check_ssmax(const char* op, const SsmaxOptions& p) {
  if (!p.s_rows && !std::isfinite(p.s)) fail(op, "s must be finite, got " + num(p.s));
  if (p.fixed_n < 0) fail(op, "fixed_n must be >= 0, got " + std::to_string(p.fixed_n));
}

// c = fl(s ln n), rounded once from float64 (the reference does the same).
float ssmax_factor(double s, int64_t n) {
  return static_cast<float>(s * std::log(static_cast<double>(n)));
}

// n of the row: fixed_n, or the visible count (0: every entry -inf).
int64_t ssmax_n(const SsmaxOptions& p, const float* t, int64_t n) {
  return p.fixed_n > 0 ? p.fixed_n : kernels::count_visible(t, n);
}

// Declares the per-row s (s_rows, when given) as Rowwise's row input 0.
void add_s_rows(Rowwise& rw, const SsmaxOptions& p) {
  if (p.s_rows) rw.add_row_input(*p.s_rows, "s_rows", DType::kF32);
}

// c = ssmax_factor(s, nn) with the row's s: s_rows[row] (add_s_rows) or s.
float row_factor(const SsmaxOptions& p, const RowArgs& a, int64_t nn) {
  const double s = p.s_rows ? static_cast<double>(a.row_in[0]) : static_cast<double>(p.s);
  return ssmax_factor(s, nn);
}

// The float64 path's c = s ln n (not rounded to f32) and visible count.
double row_factor64(const SsmaxOptions& p, const detail::RowArgs64& a, int64_t nn) {
  const double s = p.s_rows ? a.row_in[0] : static_cast<double>(p.s);
  return s * std::log(static_cast<double>(nn));
}
int64_t count_visible64(const double* t, int64_t n) {
  int64_t c = 0;
  for (int64_t i = 0; i < n; ++i) c += static_cast<int64_t>(t[i] != -HUGE_VAL);
  return c;
}

void fill64(double* p, int64_t n, double v) {
  for (int64_t i = 0; i < n; ++i) p[i] = v;
}
double empty_value64(EmptyRow policy) {
  return policy == EmptyRow::kNan ? std::numeric_limits<double>::quiet_NaN() : 0.0;
}

}  // namespace

void ssmax(const TensorView& src, const TensorView& dst, const SsmaxOptions& params,
           const SoftmaxOptions& options) {
  const char* op = "ssmax";
  check_ssmax(op, params);
  ForwardRowwise rw(op, src, dst, options);
  add_s_rows(rw, params);
  const Algorithm algo =
      options.algorithm == Algorithm::kAuto ? Algorithm::kThreePassReload : options.algorithm;
  if (rw.any_input_f64()) {  // float64 arithmetic (ops/normalizers/rescaled_f64.h)
    rw.run<double>(rw.row_length(), [&](const detail::RowArgs64& a) {
      const int64_t n = a.n;
      if (n == 0) return;
      const int64_t nn = params.fixed_n > 0 ? params.fixed_n : count_visible64(a.in[0], n);
      if (nn == 0) return fill64(a.out[0], n, empty_value64(a.empty_row));
      const double c = row_factor64(params, a, nn);
      if (!std::isfinite(c)) return fill64(a.out[0], n, std::nan(""));
      detail::ssmax_row_f64(a.in[0], n, c, a.empty_row, a.scratch, a.out[0]);
    });
    return;
  }
  rw.run(rw.src().shape[rw.axis()], [&](const RowArgs& a) {
    const int64_t n = a.n;
    if (n == 0) return;
    const float* t = a.in[0];
    float* y = a.out[0];
    const int64_t nn = ssmax_n(params, t, n);
    if (nn == 0) return fill(y, n, empty_value(a.empty_row));
    const float c = row_factor(params, a, nn);
    if (!std::isfinite(c)) return fill(y, n, kNaNf);
    kernels::Rows r;
    r.rows = 1;
    r.cols = n;
    r.dst = y;
    r.empty_row = a.empty_row;
    if (c > 0.0f) {  // u = fl(t * c) inside the kernel; -inf stays -inf
      r.src = t;
      r.scale = c;
    } else {  // c <= 0 would turn -inf into +inf or NaN: mask explicitly
      kernels::ssmax_logits(t, n, c, a.scratch);
      r.src = a.scratch;
      r.scale = 1.0f;
    }
    kernels::softmax_rows(r, algo);
  });
}

void ssmax_backward(const TensorView& src, const TensorView& y, const TensorView& dy,
                    const TensorView& dsrc, const SsmaxOptions& params,
                    const SoftmaxOptions& options, const TensorView* ds) {
  const char* op = "ssmax_backward";
  check_ssmax(op, params);
  Rowwise rw(op, src, "src", /*src_is_logits=*/true, options);
  rw.add_input(y, "y");
  rw.add_input(dy, "dy");
  rw.add_output(dsrc, "dsrc");
  add_s_rows(rw, params);
  if (ds != nullptr) rw.add_row_output(*ds, "ds");
  rw.zero_masked_outputs();
  if (rw.any_input_f64()) {  // float64 arithmetic (ops/normalizers/rescaled_f64.h)
    rw.run<double>(0, [&](const detail::RowArgs64& a) {
      const int64_t n = a.n;
      double* dsv = ds != nullptr ? a.row_out[0] : nullptr;
      if (n == 0) {
        if (dsv) *dsv = 0.0;
        return;
      }
      const double* t = a.in[0];
      double* dx = a.out[0];
      const int64_t visible = count_visible64(t, n);
      const int64_t nn = params.fixed_n > 0 ? params.fixed_n : visible;
      if (visible == 0) {
        fill64(dx, n, empty_value64(a.empty_row));
        if (dsv) *dsv = empty_value64(a.empty_row);
        return;
      }
      const double c = row_factor64(params, a, nn);
      if (!std::isfinite(c)) {  // NaN row; masked entries keep their exact 0
        for (int64_t i = 0; i < n; ++i) dx[i] = t[i] == -HUGE_VAL ? 0.0 : std::nan("");
        if (dsv) *dsv = std::nan("");
        return;
      }
      kernels::softmax_backward_row_f64(false, a.in[1], a.in[2], n, a.scale * c, dx);
      for (int64_t i = 0; i < n; ++i) {
        if (t[i] == -HUGE_VAL) dx[i] = 0.0;
      }
      if (dsv) {
        const double dot = detail::dot_f64(a.in[2], a.in[1], n);
        *dsv = std::log(static_cast<double>(nn)) *
               detail::ssmax_ds_sum_f64(t, a.in[1], a.in[2], n, dot);
      }
    });
    return;
  }
  rw.run(0, [&](const RowArgs& a) {
    const int64_t n = a.n;
    float* dsv = ds != nullptr ? a.row_out[0] : nullptr;
    if (n == 0) {
      if (dsv) *dsv = 0.0f;
      return;
    }
    const float* t = a.in[0];
    const float* yv = a.in[1];
    const float* g = a.in[2];
    float* dx = a.out[0];
    // All-masked rows follow empty_row whatever fixed_n is.
    const int64_t visible = kernels::count_visible(t, n);
    const int64_t nn = params.fixed_n > 0 ? params.fixed_n : visible;
    if (visible == 0) {
      fill(dx, n, empty_value(a.empty_row));
      if (dsv) *dsv = empty_value(a.empty_row);
      return;
    }
    const float c = row_factor(params, a, nn);
    if (!std::isfinite(c)) {  // NaN row; masked (t = -inf) entries keep their exact 0
      for (int64_t i = 0; i < n; ++i) {
        dx[i] = t[i] == -std::numeric_limits<float>::infinity() ? 0.0f : kNaNf;
      }
      if (dsv) *dsv = kNaNf;
      return;
    }
    const double dot = kernels::dot_segment(g, yv, n);
    const float k = static_cast<float>(static_cast<double>(a.scale) * static_cast<double>(c));
    kernels::softmax_backward_segment(yv, g, n, dot, k, dx);
    if (visible < n) {
      // Entries with t = -inf are masked: exactly 0 gradient whatever y and
      // dy hold (a NaN dot, or a y that is not 0 there, would leak into them).
      for (int64_t i = 0; i < n; ++i) {
        if (t[i] == -std::numeric_limits<float>::infinity()) dx[i] = 0.0f;
      }
    }
    if (dsv) {
      const double lnn = std::log(static_cast<double>(nn));
      *dsv = static_cast<float>(lnn * kernels::ssmax_ds_sum(t, yv, g, n, static_cast<float>(dot)));
    }
  });
}

// ---- softpick --------------------------------------------------------------------

namespace {
void check_softpick(const char* op, const SoftpickOptions& p) {
  if (!(std::isfinite(p.eps) && (p.eps == 0.0f || p.eps >= FLT_MIN))) {
    fail(op, "eps must be 0 or a finite value >= FLT_MIN (1.17549435e-38), got " + num(p.eps));
  }
}
}  // namespace

void softpick(const TensorView& src, const TensorView& dst, const SoftpickOptions& params,
              const SoftmaxOptions& options) {
  const char* op = "softpick";
  check_softpick(op, params);
  ForwardRowwise rw(op, src, dst, options);
  rw.run_native(0, [&](const auto& a) {
    if (a.n == 0) return;
    if constexpr (std::is_same_v<detail::RowValue<decltype(a)>, double>) {
      detail::softpick_row_f64(a.in[0], a.n, params.eps, a.empty_row, a.out[0]);
    } else {
      kernels::softpick_row(a.in[0], a.n, params.eps, a.empty_row, a.out[0]);
    }
  });
}

void softpick_backward(const TensorView& src, const TensorView& dy, const TensorView& dsrc,
                       const SoftpickOptions& params, const SoftmaxOptions& options) {
  const char* op = "softpick_backward";
  check_softpick(op, params);
  BackwardRowwise rw(op, src, "src", true, dy, dsrc, options);
  rw.zero_masked_outputs();
  rw.run_native(0, [&](const auto& a) {
    if (a.n == 0) return;
    if constexpr (std::is_same_v<detail::RowValue<decltype(a)>, double>) {
      detail::softpick_backward_row_f64(a.in[0], a.in[1], a.n, params.eps, a.scale, a.empty_row,
                                        a.out[0]);
    } else {
      kernels::softpick_backward_row(a.in[0], a.in[1], a.n, params.eps, a.scale, a.empty_row,
                                     a.out[0]);
    }
  });
}

// ---- StableMax ------------------------------------------------------------------

void stablemax(const TensorView& src, const TensorView& dst, const SoftmaxOptions& options) {
  ForwardRowwise rw("stablemax", src, dst, options);
  rw.run_native(0, [&](const auto& a) {
    if (a.n == 0) return;
    if constexpr (std::is_same_v<detail::RowValue<decltype(a)>, double>) {
      detail::stablemax_row_f64(a.in[0], a.n, a.empty_row, a.out[0]);
    } else {
      kernels::stablemax_row(a.in[0], a.n, a.empty_row, a.out[0]);
    }
  });
}

void stablemax_backward(const TensorView& src, const TensorView& dy, const TensorView& dsrc,
                        const SoftmaxOptions& options) {
  BackwardRowwise rw("stablemax_backward", src, "src", true, dy, dsrc, options);
  rw.zero_masked_outputs();
  rw.run_native(0, [&](const auto& a) {
    if (a.n == 0) return;
    if constexpr (std::is_same_v<detail::RowValue<decltype(a)>, double>) {
      detail::stablemax_backward_row_f64(a.in[0], a.in[1], a.n, a.scale, a.empty_row, a.out[0]);
    } else {
      kernels::stablemax_backward_row(a.in[0], a.in[1], a.n, a.scale, a.empty_row, a.out[0]);
    }
  });
}

namespace {

// Status of one cross-entropy row (from the sum of the other classes and the
// target's logit): kOk, or the special outcome.
enum class CeRow { kOk, kNan, kEmpty, kInf };

CeRow ce_classify(double others, double tt) {
  if (std::isnan(others) || std::isnan(tt) || others == HUGE_VAL || tt == HUGE_VAL) {
    return CeRow::kNan;
  }
  if (tt == -HUGE_VAL) return others == 0.0 ? CeRow::kEmpty : CeRow::kInf;
  return CeRow::kOk;
}

// The row's sum of the other classes (k-scaled on the float64 path, see
// rescaled_f64.h; k = 1 on the f32 path, whose float64 sum cannot overflow).
double ce_others(const float* t, int64_t n, int64_t tg, double* k) {
  *k = 1.0;
  return kernels::stablemax_sum(t, n, tg);
}
double ce_others(const double* t, int64_t n, int64_t tg, double* k) {
  return detail::stablemax_sum_f64(t, n, tg, k);
}

double stable_s(double t) { return t >= 0.0 ? t + 1.0 : 1.0 / (1.0 - t); }

}  // namespace

void stablemax_cross_entropy(const TensorView& src, const TensorView& target,
                             const TensorView& dst, const LossOptions& loss,
                             const SoftmaxOptions& options) {
  const char* op = "stablemax_cross_entropy";
  Rowwise rw(op, src, "src", /*src_is_logits=*/true, options);
  LossRows lr(op, src, rw.axis(), target, loss);
  lr.check_output(dst, "dst");
  // dst may not overlap any input (Rowwise only knows src and the masks as
  // inputs of its own outputs; dst here is written by LossRows).
  check_disjoint_or_same(dst, "dst", src, "src", op, false);
  check_disjoint_or_same(dst, "dst", target, "target", op, false);
  if (loss.weight) check_disjoint_or_same(dst, "dst", *loss.weight, "weight", op, false);
  if (options.additive_mask) {
    check_disjoint_or_same(dst, "dst", *options.additive_mask, "additive_mask", op, false);
  }
  if (options.bool_mask) check_disjoint_or_same(dst, "dst", *options.bool_mask, "bool_mask", op, false);
  std::vector<double> per(static_cast<size_t>(lr.rows()), 0.0);
  rw.run_native(0, [&](const auto& a) {
    const size_t r = static_cast<size_t>(a.row);
    if (lr.ignored(a.row) || a.n == 0) return;
    const int64_t tg = lr.target(a.row);
    const auto* t = a.in[0];
    double k;
    const double others = ce_others(t, a.n, tg, &k);
    switch (ce_classify(others, t[tg])) {
      case CeRow::kNan: per[r] = std::nan(""); return;
      case CeRow::kEmpty: per[r] = a.empty_row == EmptyRow::kNan ? std::nan("") : 0.0; return;
      case CeRow::kInf: per[r] = HUGE_VAL; return;
      case CeRow::kOk: break;
    }
    // -log s_t + log(s_t + others) = log1p(others / s_t): no cancellation.
    const double st = stable_s(static_cast<double>(t[tg]));
    if (k == 1.0 || k * st >= DBL_MIN) {
      per[r] = std::log1p(others / (k * st));  // k * st exact (a power of 2, normal)
    } else {
      // k s_t would lose bits below DBL_MIN: the ratio is then beyond 2^600,
      // and log1p(q) = log q = (log(others) - log k) - log s_t to rounding.
      per[r] = (std::log(others) - std::log(k)) - std::log(st);
    }
  });
  lr.write(per, dst);
}

void stablemax_cross_entropy_backward(const TensorView& src, const TensorView& target,
                                      const TensorView& dloss, const TensorView& dsrc,
                                      const LossOptions& loss, const SoftmaxOptions& options) {
  const char* op = "stablemax_cross_entropy_backward";
  Rowwise rw(op, src, "src", /*src_is_logits=*/true, options);
  rw.add_output(dsrc, "dsrc");
  LossRows lr(op, src, rw.axis(), target, loss);
  // dsrc vs the inputs Rowwise does not know about (src and masks it checks).
  check_disjoint_or_same(dsrc, "dsrc", dloss, "dloss", op, false);
  check_disjoint_or_same(dsrc, "dsrc", target, "target", op, false);
  if (loss.weight) check_disjoint_or_same(dsrc, "dsrc", *loss.weight, "weight", op, false);
  const std::vector<double> coef = lr.coefficients(dloss);
  rw.zero_masked_outputs();
  rw.run_native(0, [&](const auto& a) {
    using T = detail::RowValue<decltype(a)>;
    constexpr T kNaNT = std::numeric_limits<T>::quiet_NaN();
    const int64_t n = a.n;
    if (n == 0) return;
    T* dx = a.out[0];
    if (lr.ignored(a.row)) return std::fill(dx, dx + n, T(0));
    const int64_t tg = lr.target(a.row);
    const T* t = a.in[0];
    double k;
    const double others = ce_others(t, n, tg, &k);
    switch (ce_classify(others, t[tg])) {
      case CeRow::kNan: return std::fill(dx, dx + n, kNaNT);
      case CeRow::kEmpty: return std::fill(dx, dx + n, static_cast<T>(empty_value(a.empty_row)));
      case CeRow::kInf:  // masked target: the others' gradient, 0 on the target
      case CeRow::kOk: break;
    }
    const double c = coef[static_cast<size_t>(a.row)] * static_cast<double>(a.scale);
    if (std::isnan(c)) {  // 0 / 0 mean (or NaN dloss): NaN, masked entries 0
      for (int64_t j = 0; j < n; ++j) dx[j] = t[j] == -INFINITY ? T(0) : kNaNT;
      return;
    }
    if constexpr (std::is_same_v<T, double>) {
      detail::stablemax_ce_grad_row_f64(t, n, tg, others, k, c, dx);
    } else {
      kernels::stablemax_ce_grad_row(t, n, tg, others, static_cast<float>(c), dx);
    }
  });
}

// ---- Softmax Collapse ---------------------------------------------------------------

namespace {
constexpr auto kPrecisionNames = detail::name_table<Precision>(
    "parse_precision", "precision",
    {{Precision::kF32, "f32"}, {Precision::kF16, "f16"}, {Precision::kBF16, "bf16"}});
}  // namespace

Precision parse_precision(std::string_view name) { return kPrecisionNames.parse(name); }
const char* precision_name(Precision precision) noexcept { return kPrecisionNames.name(precision); }

double softmax_collapse_fraction(const TensorView& src, Precision precision,
                                 const SoftmaxOptions& options, const TensorView* flags) {
  const char* op = "softmax_collapse_fraction";
  detail::check_enum_range(op, precision, Precision::kBF16, "precision has unknown value ");
  const int p = static_cast<int>(precision);
  Rowwise rw(op, src, "src", /*src_is_logits=*/true, options);
  if (flags != nullptr) rw.add_row_output(*flags, "flags");
  const int64_t rows = detail::count_rows(rw.src(), rw.axis());
  std::vector<uint8_t> collapsed(static_cast<size_t>(rows), 0);
  rw.run(p == 0 ? 0 : rw.src().shape[rw.axis()], [&](const RowArgs& a) {
    const bool c = a.n > 0 && kernels::softmax_collapse_row(a.in[0], a.n, p, a.scratch);
    collapsed[static_cast<size_t>(a.row)] = c ? 1 : 0;
    if (flags != nullptr) *a.row_out[0] = c ? 1.0f : 0.0f;
  });
  if (rows == 0) return 0.0;
  int64_t count = 0;
  for (uint8_t c : collapsed) count += c;
  return static_cast<double>(count) / static_cast<double>(rows);
}

}  // namespace smax
