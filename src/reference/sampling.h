// src/reference/sampling.h: float64 oracles of include/smax/sampling.h.
//
// Plain loops and full sorts, on the row view of reference/rows.h (the f32
// logits the library forms). The Gumbel noise is recomputed here directly
// from Random123's philox4x32 (not through the library's helper), from its
// documented definition. Results are dense row-major vectors in the logical
// output shape; per-row results are in row order.
#pragma once

#include <cstdint>
#include <vector>

#include "smax/options.h"
#include "smax/sampling.h"
#include "smax/tensor.h"

namespace smax::reference {

/// g(seed, row, i) = -log(-log U) (see include/smax/sampling.h).
double gumbel(uint64_t seed, uint64_t row, uint64_t i);
/// The noise of every element of `shape` with rows along `axis` (dense).
std::vector<double> gumbel_noise(const std::vector<int64_t>& shape, int64_t axis, uint64_t seed);

struct GumbelSoftmaxRef {
  std::vector<double> soft;  ///< y = softmax(z), z = fl(fl(t + fl(g)) / tau)
  std::vector<double> dst;   ///< what dst holds (soft, or the hard one-hot)
};
GumbelSoftmaxRef gumbel_softmax(const TensorView& src, const GumbelSoftmaxOptions& gumbel,
                                const SoftmaxOptions& options = {});
/// dx = c y (dy - <dy, y>), c = fl(fl(s) / tau); 0 where masked.
std::vector<double> gumbel_softmax_backward(const TensorView& y, const TensorView& dy, float tau,
                                            const SoftmaxOptions& options = {});

/// argmax_i (t_i + g_i) per row, -1 for empty / all -inf / NaN / +inf rows.
std::vector<int64_t> gumbel_max(const TensorView& src, uint64_t seed,
                                const SoftmaxOptions& options = {});

struct TopkRef {
  std::vector<double> probs;     ///< dense, src's shape with the axis = k
  std::vector<int64_t> indices;  ///< same layout
};
TopkRef softmax_topk(const TensorView& src, const SoftmaxTopkOptions& topk,
                     const SoftmaxOptions& options = {});

struct FilterRef {
  std::vector<double> values;  ///< sampling_filter's dst (dense, src's shape)
  /// Per row: the distribution sample() draws from, as (index, probability).
  std::vector<std::vector<std::pair<int64_t, double>>> dist;
  /// Per row: the top-p cut lies within `tolerance` (relative mass) of the
  /// boundary, so a library within that error may cut one entry earlier or
  /// later.
  std::vector<bool> fragile;
};
FilterRef sampling_filter(const TensorView& src, const SampleOptions& sample,
                          const SoftmaxOptions& options = {}, double tolerance = 2e-6);
/// sample(): Gumbel-max with the reference noise over the reference kept set.
std::vector<int64_t> sample(const TensorView& src, const SampleOptions& sample,
                            const SoftmaxOptions& options = {});

SoftNmsResult soft_nms(const TensorView& boxes, const TensorView& scores,
                       const SoftNmsOptions& options = {});

}  // namespace smax::reference
