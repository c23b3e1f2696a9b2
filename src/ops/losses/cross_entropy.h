// src/ops/losses/cross_entropy.h: what cross_entropy.cc and z_loss.cc share: the
// logits setup (softcap moves the additive mask behind the cap), per-row
// f32 outputs and inputs, the reduction of fully weighted per-row losses and
// the guard around kernels::xent_grad for factors beyond f32; also the check
// of CrossEntropyOptions' scalars (linear_cross_entropy.cc uses it too).
//
// Why a reduction here and not only LossRows::write: PyTorch's label
// smoothing with class weights is not w[target] * (something) per row (the
// smoothing term is weighted per class, and still counts when w[target] is
// 0), and probability targets have no per-row weight and divide kMean by the
// number of rows. So the ops compute each row's fully weighted loss l_r and
// `Reducer` sums them (float64, row order) and divides by the denominator
// taken from LossRows (sum of w[target] over non-ignored rows, in LossRows'
// order) or by the row count.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "kernels/cross_entropy.h"
#include "core/loss_rows.h"
#include "core/validate.h"
#include "smax/cross_entropy.h"
#include "smax/loss.h"
#include "smax/options.h"
#include "smax/tensor.h"

namespace smax::detail {

/// Softcap > 0 with an additive mask: the mask must be added after the cap,
/// so it is taken out of the options given to Rowwise and passed as an
/// ordinary input (`mask`: a view of src's shape with zero strides where it
/// broadcasts). Otherwise `options` is used as is.
struct LogitsSetup {
  SoftmaxOptions options;
  std::optional<TensorView> mask;
};
LogitsSetup setup_logits(const char* op, const TensorView& src, const SoftmaxOptions& options,
                         float softcap);

/// A per-row f32 view (src's shape without the axis, or keepdim), validated.
struct RowView {
  TensorView view;
  int64_t strides[kMaxRank] = {};
};
RowView check_row_view(const char* op, const TensorView& src, int axis, const TensorView& view,
                       const char* name, bool output);
void write_rows(const TensorView& src, int axis, const RowView& rv,
                const std::vector<double>& values);
std::vector<double> read_rows(const TensorView& src, int axis, const RowView& rv);

/// Every output must be disjoint from every input and from the other outputs.
struct NamedView {
  TensorView view;
  const char* name;
};
void check_outputs_disjoint(const char* op, const std::vector<NamedView>& outputs,
                            const std::vector<NamedView>& inputs);

class Reducer {
 public:
  /// `active[r]` false: row r is ignored (0 in kNone, left out of sums);
  /// kMean divides by `denominator`.
  Reducer(const char* op, const TensorView& src, int axis, Reduction reduction,
          EmptyMean empty_mean, std::vector<char> active, double denominator);
  Reduction reduction() const { return reduction_; }
  bool active(int64_t r) const { return active_[static_cast<size_t>(r)] != 0; }
  /// dst fits the reduction (kNone: a row view; else one element).
  void check_output(const TensorView& dst, const char* name) const;
  void write(const std::vector<double>& values, const TensorView& dst) const;
  /// G_r: dloss_r (kNone), dloss (kSum), dloss / denominator (kMean; when
  /// the denominator is 0: NaN under EmptyMean::kNan, as PyTorch's 0 / 0,
  /// 0 under kZero); 0 for inactive rows.
  std::vector<double> coefficients(const TensorView& dloss) const;
  /// coefficients() for a unit dloss (1.0f in every element), without a
  /// tensor: the multipliers of the fused gradient (CrossEntropyOptions::grad).
  std::vector<double> unit_coefficients() const;
  /// Same reduction with another denominator (accuracy: count of rows).
  Reducer with_denominator(double denominator) const;

 private:
  /// kMean: g / denominator, or for a zero denominator NaN (kNan) / 0 (kZero).
  double mean_factor(double g) const;

  const char* op_;
  TensorView src_;
  int axis_;
  Reduction reduction_;
  EmptyMean empty_mean_;
  std::vector<char> active_;
  double denominator_;
};

/// Everything cross_entropy's forward and backward passes need, validated
/// (cross_entropy.cc's prepare(); the float64 rows of cross_entropy_f64.cc
/// read it too).
struct CeSetup {
  const char* op;
  TensorView src;
  int axis = 0;
  int64_t classes = 0;
  int64_t vocab = 0;  // label smoothing's C: classes, or V for a vocabulary-parallel shard
  int64_t rows = 0;
  bool probs = false;
  std::optional<LossRows> lr;  // class-index targets
  std::vector<float> weight;     // f32 class weights (empty: none, or an empty shard)
  bool has_weight = false;       // class weights given (even for an empty shard)
  std::vector<double> weight64;  // the same weights as read, exactly (the float64 rows)
  double a = 0.0, zs = 0.0;
  float cap = 0.0f;
  std::optional<Reducer> red;
  int mask_input = -1;    // Rowwise input index of the post-cap additive mask
  int target_input = -1;  // Rowwise input index of probability targets
  EmptyRow empty_row = EmptyRow::kZero;
  float scale = 1.0f;
};

/// Checks CrossEntropyOptions' scalars, in this order: label_smoothing in
/// [0, 1], lse_square_scale finite and >= 0, softcap finite and >= 0 (0 =
/// off). Throws kInvalidArgument (via fail) naming `op` on the first bad one.
/// Shared by cross_entropy and linear_cross_entropy (the latter has no
/// LossOptions enum check at this point, hence not part of this helper).
void check_ce_scalars(const char* op, const CrossEntropyOptions& ce);

/// Writes the gradient row kernels::xent_grad(row, gr, out) writes, except
/// where the f32 kernel cannot represent the row's coefficients:
///  * gr.factor finite and |gr.factor| >= 2^126: the kernel's f32 factor
///    would be inf, and inf * e^(t_j - shift) = inf * 0 is NaN wherever p_j
///    underflows (rare; the row's gradient overflows at its max anyway);
///  * a nonzero factor, b or bq below 2^-100 (a denormal-range upstream
///    gradient, e.g. dloss = 6e-39): the kernel flushes products it deems
///    denormal before the final scale, which (temperature 1e-30) can bring
///    them back to the normal range: a whole term would be lost.
/// Such a row is evaluated in float64 instead: out[j] = 0 where
/// logit(j) == -inf, else entry(j, logit(j)) rounded once to f32 (inf only
/// where the float64 value is beyond f32); entry must take b and bq in
/// float64, not gr's f32 copies. logit(j) is read before out[j] is written,
/// so `out` may be the row of logits. Shared by cross_entropy_backward (and
/// its fused forward) and z_loss_backward
/// (fuzz/regressions: cross_entropy_backward_prob_targets_zloss_overflow_nan,
/// z_loss_backward_factor_overflow_nan, cross_entropy_backward_denormal_dloss_temperature).
inline bool xent_grad_needs_f64(const kernels::XentGrad& gr) {
  auto tiny = [](double v) { return v != 0.0 && std::fabs(v) < 0x1p-100; };
  return (std::isfinite(gr.factor) && std::fabs(gr.factor) >= 0x1p126) || tiny(gr.factor) ||
         tiny(gr.b) || tiny(gr.bq);
}
template <class Logit, class Entry>
void xent_grad_guarded(const kernels::XentRow& row, const kernels::XentGrad& gr, float* out,
                       const Logit& logit, const Entry& entry) {
  if (xent_grad_needs_f64(gr)) {
    for (int64_t j = 0; j < row.n; ++j) {
      const double t = logit(j);
      out[j] = t == -std::numeric_limits<double>::infinity()
                   ? 0.0f
                   : static_cast<float>(entry(j, t));
    }
    return;
  }
  kernels::xent_grad(row, gr, out);
}

}  // namespace smax::detail
