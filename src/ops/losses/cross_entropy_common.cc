// src/ops/losses/cross_entropy_common.cc: see ops/losses/cross_entropy.h.
#include <cmath>
#include <limits>
#include <string>

#include "ops/losses/cross_entropy.h"
#include "core/convert.h"
#include "core/errors.h"
#include "core/loss_rows.h"
#include "core/validate.h"
#include "smax/error.h"

namespace smax::detail {
LogitsSetup setup_logits(const char* op, const TensorView& src, const SoftmaxOptions& options,
                         float softcap) {
  LogitsSetup s;
  s.options = options;
  if (!(softcap > 0.0f) || !options.additive_mask) return s;
  check_float_view(src, op, "src");
  const TensorView& mask = *options.additive_mask;
  check_float_view(mask, op, "additive_mask");
  const TensorView target = as_rank1_if_scalar(src);
  TensorView b = target;
  b.data = mask.data;
  b.dtype = mask.dtype;
  broadcast_strides(mask, "additive_mask", target, op, b.strides);
  s.options.additive_mask.reset();
  s.mask = b;
  return s;
}

RowView check_row_view(const char* op, const TensorView& src_in, int axis, const TensorView& view,
                       const char* name, bool output) {
  check_float_view(view, op, name);
  RowView rv;
  rv.view = view;
  reduced_strides(as_rank1_if_scalar(src_in), axis, view, name, op, rv.strides);
  if (output) check_no_self_overlap(view, name, op);
  return rv;
}

void write_rows(const TensorView& src, int axis, const RowView& rv,
                const std::vector<double>& values) {
  auto* out = static_cast<char*>(rv.view.data);
  const int size = dtype_size(rv.view.dtype);
  for_each_reduced_offset(as_rank1_if_scalar(src), axis, rv.strides, [&](int64_t r, int64_t off) {
    store_f64(out + off * size, rv.view.dtype, values[static_cast<size_t>(r)]);
  });
}

std::vector<double> read_rows(const TensorView& src, int axis, const RowView& rv) {
  std::vector<double> v(static_cast<size_t>(count_rows(src, axis)));
  const auto* in = static_cast<const char*>(rv.view.data);
  const int size = dtype_size(rv.view.dtype);
  for_each_reduced_offset(as_rank1_if_scalar(src), axis, rv.strides, [&](int64_t r, int64_t off) {
    v[static_cast<size_t>(r)] = load_f64(in + off * size, rv.view.dtype);
  });
  return v;
}

void check_outputs_disjoint(const char* op, const std::vector<NamedView>& outputs,
                            const std::vector<NamedView>& inputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    for (const NamedView& in : inputs) {
      check_disjoint_or_same(outputs[i].view, outputs[i].name, in.view, in.name, op, false);
    }
    for (size_t j = i + 1; j < outputs.size(); ++j) {
      check_disjoint_or_same(outputs[j].view, outputs[j].name, outputs[i].view, outputs[i].name,
                             op, false);
    }
  }
}

void check_ce_scalars(const char* op, const CrossEntropyOptions& ce) {
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
}

Reducer::Reducer(const char* op, const TensorView& src, int axis, Reduction reduction,
                 EmptyMean empty_mean, std::vector<char> active, double denominator)
    : op_(op),
      src_(as_rank1_if_scalar(src)),
      axis_(axis),
      reduction_(reduction),
      empty_mean_(empty_mean),
      active_(std::move(active)),
      denominator_(denominator) {}

Reducer Reducer::with_denominator(double denominator) const {
  Reducer r = *this;
  r.denominator_ = denominator;
  return r;
}

void Reducer::check_output(const TensorView& dst, const char* name) const {
  check_float_view(dst, op_, name);
  if (reduction_ == Reduction::kNone) {
    check_row_view(op_, src_, axis_, dst, name, true);
  } else if (dst.numel() != 1) {
    fail(op_, std::string(name) + " shape " + dst.describe() +
                  " must hold one element for reduction '" + reduction_name(reduction_) + "'");
  }
}

void Reducer::write(const std::vector<double>& values, const TensorView& dst) const {
  if (reduction_ == Reduction::kNone) {
    RowView rv;
    rv.view = dst;
    reduced_strides(src_, axis_, dst, "dst", op_, rv.strides);
    std::vector<double> v = values;
    for (size_t r = 0; r < v.size(); ++r) {
      if (!active_[r]) v[r] = 0.0;
    }
    write_rows(src_, axis_, rv, v);
    return;
  }
  double sum = 0.0;
  for (size_t r = 0; r < values.size(); ++r) {
    if (active_[r]) sum += values[r];
  }
  if (reduction_ == Reduction::kMean) {
    if (denominator_ == 0.0 && empty_mean_ == EmptyMean::kZero) {
      sum = 0.0;
    } else if (denominator_ == 0.0) {
      sum = std::numeric_limits<double>::quiet_NaN();
    } else {
      sum /= denominator_;
    }
  }
  store_f64(dst.data, dst.dtype, sum);
}

std::vector<double> Reducer::coefficients(const TensorView& dloss) const {
  check_float_view(dloss, op_, "dloss");
  std::vector<double> c(active_.size(), 0.0);
  if (reduction_ == Reduction::kNone) {
    const RowView rv = check_row_view(op_, src_, axis_, dloss, "dloss", false);
    const std::vector<double> g = read_rows(src_, axis_, rv);
    for (size_t r = 0; r < c.size(); ++r) c[r] = active_[r] ? g[r] : 0.0;
    return c;
  }
  if (dloss.numel() != 1) {
    fail(op_, "dloss shape " + dloss.describe() + " must hold one element for reduction '" +
                  reduction_name(reduction_) + "'");
  }
  double g = load_f64(dloss.data, dloss.dtype);
  if (reduction_ == Reduction::kMean) g = mean_factor(g);
  for (size_t r = 0; r < c.size(); ++r) c[r] = active_[r] ? g : 0.0;
  return c;
}

double Reducer::mean_factor(double g) const {
  if (denominator_ != 0.0) return g / denominator_;
  // A zero denominator with counted rows (their weights all 0): PyTorch's
  // w / sum w = 0 / 0, NaN for every counted row (kNan), or 0 (kZero).
  return empty_mean_ == EmptyMean::kZero ? 0.0 : std::numeric_limits<double>::quiet_NaN();
}

std::vector<double> Reducer::unit_coefficients() const {
  // Exactly coefficients() with dloss = 1.0f: g = 1, kMean divides once.
  double g = 1.0;
  if (reduction_ == Reduction::kMean) g = mean_factor(g);
  std::vector<double> c(active_.size(), 0.0);
  for (size_t r = 0; r < c.size(); ++r) c[r] = active_[r] ? g : 0.0;
  return c;
}

}  // namespace smax::detail
