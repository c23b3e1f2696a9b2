// src/core/loss_rows.h: targets, class weights and reductions shared by every
// loss (see include/smax/loss.h for the semantics).
//
// A loss op builds a LossRows from its logits view, targets and options
// before writing anything (it validates targets, their range, the weight
// vector and the reduction), computes one unweighted loss per row indexed by
// the row's linear index (RowArgs::row), then calls write() for the forward
// output. A backward pass calls coefficients() to turn `dloss` into one
// multiplier per row: c_r = dloss_r * w_r / (kMean ? sum of w : 1), 0 for
// ignored rows (kMean with sum of w = 0: NaN, PyTorch's 0 / 0, or 0 under
// EmptyMean::kZero); dsrc row r = c_r * (d loss_r / d logits).
#pragma once

#include <cstdint>
#include <vector>

#include "smax/loss.h"
#include "smax/options.h"
#include "smax/tensor.h"

namespace smax::detail {

/// Checks the reduction and empty_mean enum values (kInvalidArgument naming
/// `op`: "reduction has unknown value N", then the same for empty_mean).
void check_loss_enums(const char* op, const LossOptions& loss);

/// The classes of a vocabulary-parallel shard (include/smax/distributed.h):
/// targets are global class indices in [0, vocab), and the class weights
/// (options.weight, [classes]) are those of the classes [offset, offset +
/// classes). vocab < 0: not sharded (offset 0, vocab = classes).
struct ClassShard {
  int64_t offset = 0;
  int64_t vocab = -1;
};

class LossRows {
 public:
  /// `src` is the logits view (rank >= 1), `axis` its resolved class axis;
  /// `target` i64 with src's shape without the axis (or keepdim).
  LossRows(const char* op, const TensorView& src, int axis, const TensorView& target,
           const LossOptions& options, ClassShard shard = {});

  int64_t rows() const { return static_cast<int64_t>(targets_.size()); }
  int64_t classes() const { return classes_; }
  int64_t target(int64_t row) const { return targets_[static_cast<size_t>(row)]; }
  bool ignored(int64_t row) const { return target(row) == ignore_index_; }
  /// weight[target] (1 without weights), 0 for ignored rows (sharded: 0 too
  /// where the target is another shard's class: see local()).
  double weight(int64_t row) const { return weights_[static_cast<size_t>(row)]; }
  /// Sharded: the row's target is a class of this shard (never for ignored
  /// rows); always true for non-ignored rows when not sharded.
  bool local(int64_t row) const {
    const int64_t t = target(row);
    return t != ignore_index_ && t >= offset_ && t - offset_ < classes_;
  }
  /// The row's target as an index into this shard's classes (local rows).
  int64_t local_target(int64_t row) const { return target(row) - offset_; }
  /// Class weight of class c (1 without weights).
  double class_weight(int64_t c) const;
  Reduction reduction() const { return reduction_; }

  /// Checks that `dst` fits the reduction (kNone: targets' shape; else one
  /// element). Call before computing anything.
  void check_output(const TensorView& dst, const char* name) const;
  /// Writes the reduced loss; `loss[r]` is row r's unweighted loss (ignored
  /// rows are skipped whatever they hold). Sums are in float64, in row order.
  void write(const std::vector<double>& loss, const TensorView& dst) const;
  /// Per-row multipliers of the gradient from `dloss` (dst's shape).
  std::vector<double> coefficients(const TensorView& dloss) const;
  /// Same reduction of any per-row quantity (z-loss, accuracy...).
  double reduce(const std::vector<double>& values) const;

 private:
  const char* op_;
  TensorView src_;
  int axis_;
  int64_t classes_;
  int64_t offset_ = 0;  // sharded: the shard's first global class
  int64_t ignore_index_;
  Reduction reduction_;
  EmptyMean empty_mean_;
  TensorView target_;
  int64_t target_strides_[kMaxRank] = {};  // in src's index space (0 on the axis)
  std::vector<int64_t> targets_;
  std::vector<double> weights_;
  std::vector<double> class_weights_;
  double weight_sum_ = 0.0;
};

/// Calls fn(row, offset) for every row of src (row-major over the non-axis
/// dims), where offset = sum_d index_d * strides[d] over those dims.
template <typename Fn>
void for_each_reduced_offset(const TensorView& src, int axis, const int64_t* strides, Fn&& fn) {
  int64_t rows = 1;
  for (int d = 0; d < src.rank; ++d) {
    if (d != axis) rows *= src.shape[d];
  }
  int64_t index[kMaxRank] = {};
  int64_t offset = 0;
  for (int64_t r = 0; r < rows; ++r) {
    fn(r, offset);
    for (int d = src.rank - 1; d >= 0; --d) {
      if (d == axis) continue;
      if (++index[d] < src.shape[d]) {
        offset += strides[d];
        break;
      }
      offset -= strides[d] * (src.shape[d] - 1);
      index[d] = 0;
    }
  }
}

}  // namespace smax::detail
