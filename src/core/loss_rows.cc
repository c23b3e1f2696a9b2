// src/core/loss_rows.cc: see loss_rows.h.
#include "core/loss_rows.h"

#include "core/convert.h"

#include <cmath>
#include <limits>
#include <string>

#include "core/enum_names.h"
#include "core/errors.h"
#include "core/validate.h"
#include "smax/error.h"

namespace smax {

namespace {
constexpr auto kReductionNames = detail::name_table<Reduction>(
    "parse_reduction", "reduction",
    {{Reduction::kNone, "none"}, {Reduction::kMean, "mean"}, {Reduction::kSum, "sum"}});
}  // namespace

Reduction parse_reduction(std::string_view name) { return kReductionNames.parse(name); }
const char* reduction_name(Reduction reduction) noexcept { return kReductionNames.name(reduction); }

namespace detail {
void check_loss_enums(const char* op, const LossOptions& loss) {
  check_enum_range(op, loss.reduction, Reduction::kSum, "reduction has unknown value ");
  check_enum_range(op, loss.empty_mean, EmptyMean::kZero, "empty_mean has unknown value ");
}

LossRows::LossRows(const char* op, const TensorView& src_in, int axis, const TensorView& target,
                   const LossOptions& options, ClassShard shard)
    : op_(op), src_(as_rank1_if_scalar(src_in)), axis_(axis) {
  classes_ = src_.shape[axis_];
  offset_ = shard.vocab < 0 ? 0 : shard.offset;
  const int64_t vocab = shard.vocab < 0 ? classes_ : shard.vocab;
  ignore_index_ = options.ignore_index;
  reduction_ = options.reduction;
  empty_mean_ = options.empty_mean;
  check_loss_enums(op, options);
  check_view(target, op, "target", DType::kI64);
  reduced_strides(src_, axis_, target, "target", op, target_strides_);
  target_ = target;

  class_weights_.assign(static_cast<size_t>(classes_), 1.0);
  if (options.weight) {
    const TensorView& w = *options.weight;
    check_float_view(w, op, "weight");
    if (w.rank != 1 || w.shape[0] != classes_) {
      fail(op, "weight shape " + w.describe() + " must be [" + std::to_string(classes_) +
                   "] (one weight per class)");
    }
    const auto* wp = static_cast<const char*>(w.data);
    const int64_t step = w.strides[0] * dtype_size(w.dtype);
    for (int64_t c = 0; c < classes_; ++c) {
      class_weights_[static_cast<size_t>(c)] = load_f64(wp + c * step, w.dtype);
    }
  }

  const auto* tp = static_cast<const int64_t*>(target.data);
  const int64_t rows = count_rows(src_, axis_);
  targets_.resize(static_cast<size_t>(rows));
  weights_.resize(static_cast<size_t>(rows));
  for_each_reduced_offset(src_, axis_, target_strides_, [&](int64_t r, int64_t off) {
    const int64_t t = tp[off];
    if (t != ignore_index_ && (t < 0 || t >= vocab)) {
      fail(op, "target " + std::to_string(t) + " (row " + std::to_string(r) +
                   ") is outside [0, " + std::to_string(vocab) + ") and is not ignore_index (" +
                   std::to_string(ignore_index_) + ")");
    }
    targets_[static_cast<size_t>(r)] = t;
    const bool here = t != ignore_index_ && t >= offset_ && t - offset_ < classes_;
    const double w = here ? class_weights_[static_cast<size_t>(t - offset_)] : 0.0;
    weights_[static_cast<size_t>(r)] = w;
    weight_sum_ += w;
  });
}

double LossRows::class_weight(int64_t c) const { return class_weights_[static_cast<size_t>(c)]; }

void LossRows::check_output(const TensorView& dst, const char* name) const {
  check_float_view(dst, op_, name);
  if (reduction_ == Reduction::kNone) {
    int64_t strides[kMaxRank];
    reduced_strides(src_, axis_, dst, name, op_, strides);
    check_no_self_overlap(dst, name, op_);
  } else if (dst.numel() != 1) {
    fail(op_, std::string(name) + " shape " + dst.describe() + " must hold one element for reduction '" +
                  reduction_name(reduction_) + "'");
  }
}

double LossRows::reduce(const std::vector<double>& values) const {
  double sum = 0.0;
  for (int64_t r = 0; r < rows(); ++r) {
    if (!ignored(r)) sum += weight(r) * values[static_cast<size_t>(r)];
  }
  if (reduction_ != Reduction::kMean) return sum;
  if (weight_sum_ == 0.0 && empty_mean_ == EmptyMean::kZero) return 0.0;
  return sum / weight_sum_;
}

void LossRows::write(const std::vector<double>& loss, const TensorView& dst) const {
  auto* out = static_cast<char*>(dst.data);
  if (reduction_ != Reduction::kNone) {
    store_f64(out, dst.dtype, reduce(loss));
    return;
  }
  int64_t strides[kMaxRank];
  reduced_strides(src_, axis_, dst, "dst", op_, strides);
  const int size = dtype_size(dst.dtype);
  for_each_reduced_offset(src_, axis_, strides, [&](int64_t r, int64_t off) {
    store_f64(out + off * size, dst.dtype,
              ignored(r) ? 0.0 : weight(r) * loss[static_cast<size_t>(r)]);
  });
}

std::vector<double> LossRows::coefficients(const TensorView& dloss) const {
  check_float_view(dloss, op_, "dloss");
  std::vector<double> c(static_cast<size_t>(rows()), 0.0);
  const auto* g = static_cast<const char*>(dloss.data);
  const int size = dtype_size(dloss.dtype);
  if (reduction_ == Reduction::kNone) {
    int64_t strides[kMaxRank];
    reduced_strides(src_, axis_, dloss, "dloss", op_, strides);
    for_each_reduced_offset(src_, axis_, strides, [&](int64_t r, int64_t off) {
      if (!ignored(r)) c[static_cast<size_t>(r)] = weight(r) * load_f64(g + off * size, dloss.dtype);
    });
    return c;
  }
  if (dloss.numel() != 1) {
    fail(op_, "dloss shape " + dloss.describe() + " must hold one element for reduction '" +
                  reduction_name(reduction_) + "'");
  }
  double scale = load_f64(g, dloss.dtype);
  if (reduction_ == Reduction::kMean) {
    // A zero weight sum with non-ignored rows: PyTorch's w / sum w = 0 / 0,
    // NaN for every non-ignored row (kNan), or 0 (kZero).
    scale = weight_sum_ != 0.0                   ? scale / weight_sum_
            : empty_mean_ == EmptyMean::kZero ? 0.0
                                                : std::numeric_limits<double>::quiet_NaN();
  }
  for (int64_t r = 0; r < rows(); ++r) {
    if (!ignored(r)) c[static_cast<size_t>(r)] = weight(r) * scale;
  }
  return c;
}

}  // namespace detail
}  // namespace smax
