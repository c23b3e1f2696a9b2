// tests/sampling_util.h: helpers and the per-target fixture shared by
// tests/test_sampling*.cc, which test
// Gumbel noise, gumbel_softmax (+ backward),
// gumbel_max, softmax_topk, sampling_filter, sample and soft_nms
// (include/smax/sampling.h) against the float64 oracles of
// src/reference/sampling.h, on every SIMD target.
//
// Bounds (the header's, enforced as written):
//  gumbel_softmax:   |y - ref| <= 2e-6 ref + 1e-36 (ref: float64 softmax of
//                    the same f32 z); hard one-hot exactly the oracle's.
//  backward:         |dx - ref| <= 2e-6 c |y| (|dy| + |<dy,y>|) + 1e-30.
//  softmax_topk:     indices exactly the oracle's (sort-based); probs
//                    |p - ref| <= 2e-6 ref + 1e-36 (renormalised: 1e-6).
//  gumbel_max, sample, sampling_filter: exactly the oracle's (noise, indices
//                    and filtered logits use exact arithmetic), except
//                    sampling_filter / sample rows whose top-p cut lies within
//                    the documented 1e-6 of the boundary ("fragile").
//  soft_nms:         exactly the oracle's (same float64 formulas).
// Statistics: gumbel_max and sample frequencies against softmax / the
// filtered distribution, Pearson chi-square against the chi-square quantile
// at p = 1e-6 (Wilson-Hilferty), fixed seeds: deterministic.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kernels/sampling.h"
#include "reference/rows.h"
#include "reference/sampling.h"
#include "smax/sampling.h"
#include "test_util.h"

namespace smax_test {
namespace {

namespace ref = smax::reference;
using smax::GumbelSoftmaxOptions;
using smax::SampleOptions;
using smax::SoftmaxTopkOptions;
using smax::SoftNmsMethod;
using smax::SoftNmsOptions;
using I64Tensor = Array<int64_t>;


inline std::vector<double> widen(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// NaN <=> NaN; ref exactly 0 -> out exactly 0; |out - ref| <= rel |ref| + 1e-36.
inline ::testing::AssertionResult check_probs(const std::vector<double>& out,
                                       const std::vector<double>& r, double rel,
                                       const std::string& what) {
  if (out.size() != r.size()) return ::testing::AssertionFailure() << what << ": size";
  for (size_t i = 0; i < r.size(); ++i) {
    const bool ok = std::isnan(r[i]) ? std::isnan(out[i])
                    : r[i] == 0.0    ? out[i] == 0.0
                                     : std::fabs(out[i] - r[i]) <= rel * std::fabs(r[i]) + 1e-36;
    if (!ok) {
      return ::testing::AssertionFailure() << what << ": element " << i << " = " << out[i]
                                           << ", reference " << r[i] << " (seed " << base_seed()
                                           << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

// `res`, or a failure naming `what` when an output's guard region was
// written (`intact` false).
inline ::testing::AssertionResult and_guards_intact(::testing::AssertionResult res, bool intact,
                                                   const std::string& what) {
  if (res && !intact) return ::testing::AssertionFailure() << what << ": wrote outside the view";
  return res;
}

// Rows with many exact ties (values from a small set), some -inf.
inline void fill_ties(Tensor& t, Rng& rng) {
  t.fill([&](int64_t) {
    const int64_t k = rng.index(5);
    return k == 4 ? -kInfF : static_cast<float>(k);
  });
}

// Every distribution of test_util.h plus ties.
inline std::vector<std::pair<std::string, std::function<void(Tensor&, Rng&)>>> data_sets(int axis) {
  std::vector<std::pair<std::string, std::function<void(Tensor&, Rng&)>>> v;
  for (Data d : all_data()) {
    v.push_back({data_name(d), [d, axis](Tensor& t, Rng& rng) { fill_rows(t, axis, d, rng); }});
  }
  v.push_back({"ties", [](Tensor& t, Rng& rng) { fill_ties(t, rng); }});
  return v;
}

// Upper quantile of chi-square(df) at tail probability 1e-6 (Wilson-Hilferty;
// z = 4.753424 is the standard normal quantile at 1 - 1e-6).
inline double chi2_bound(int df) {
  const double z = 4.753424, a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

// Pearson chi-square of counts against probabilities (bins with expected
// count < 5 merged into one).
inline double chi2(const std::vector<int64_t>& counts, const std::vector<double>& p, int64_t draws,
            int* df) {
  double stat = 0.0, small_e = 0.0, small_o = 0.0;
  int bins = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double e = p[i] * static_cast<double>(draws);
    if (e < 5.0) {
      small_e += e;
      small_o += static_cast<double>(counts[i]);
      continue;
    }
    stat += (counts[i] - e) * (counts[i] - e) / e;
    ++bins;
  }
  if (small_e > 0.0) {
    stat += (small_o - small_e) * (small_o - small_e) / std::max(small_e, 1e-300);
    ++bins;
  }
  *df = bins - 1;
  return stat;
}

inline SoftmaxOptions axis_only(int64_t axis) {
  SoftmaxOptions o;
  o.axis = axis;
  return o;
}

// The any-axis tests: logits of `shape` laid out in memory order `order`
// (plus `pad`, permuted_strides) and misaligned by 1, rows along `axis` of `data`.
inline Tensor any_axis_logits(const std::vector<int64_t>& shape, const std::vector<int>& order,
                              int64_t pad, int axis, Data data, Rng& rng) {
  Tensor x(shape, permuted_strides(shape, order, pad), 1);
  fill_rows(x, axis, data, rng);
  return x;
}

// A bool mask of `shape` hiding every index i with i % every == at.
inline BoolTensor hide_every(const std::vector<int64_t>& shape, int64_t every, int64_t at) {
  BoolTensor keep(shape);
  keep.fill([=](int64_t i) { return static_cast<uint8_t>(i % every != at); });
  return keep;
}

// Options along `axis` with the bool mask `keep` and, if given, the additive mask `add`.
inline SoftmaxOptions masked_along(int axis, const BoolTensor& keep, const Tensor* add = nullptr) {
  SoftmaxOptions o;
  o.axis = axis;
  o.bool_mask = keep.view();
  if (add != nullptr) o.additive_mask = add->view();
  return o;
}

class Sampling : public TargetTest {};

}  // namespace
}  // namespace smax_test
