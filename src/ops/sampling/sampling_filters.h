// src/ops/sampling/sampling_filters.h: the general filter chain of
// sampling_filter / sample (include/smax/sampling.h) on a row's visible
// candidates, written once for the f32 rows (TopkCandidate, float values)
// and the float64 rows (Cand64): top-k (max(top_k, min_tokens_to_keep),
// ties per TopKTies) -> top-p (at least min_tokens_to_keep) -> min-p (at
// least min_tokens_to_keep), transformers' order.
//
// Used when an option that the fast paths of sampling.cc / sampling_f64.cc
// do not model is set (uses_general_filter): min_p > 0, or
// min_tokens_to_keep > 1 / TopKTies::kKeep with top-k or top-p on. Every
// filter keeps a prefix of the order `better` (descending value, lower
// index first), so the result is again such a prefix, described by its
// size and its worst member. Plain scalar code, no allocation, no throw.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "smax/sampling.h"

namespace smax::detail {

/// Whether sampling_filter / sample need filter_candidates for these options
/// (temperature > 0).
inline bool uses_general_filter(const SampleOptions& so) {
  const bool filtering = so.top_k > 0 || so.top_p < 1.0f;
  return so.min_p > 0.0f ||
         (filtering && (so.min_tokens_to_keep > 1 || so.top_k_ties == TopKTies::kKeep));
}

/// Filters buf[0..count) (count >= 1; the row's entries above -inf, any
/// order, no NaN / +inf) in place; returns `keep`: buf[0..keep) is then the
/// kept set (not necessarily sorted).
/// `better(a, b)`: a strict total order (value descending, index ascending).
/// `mass(v, z0)`: e^(v - z0) (double); `Sum`: an accumulator with add(double)
/// and value(). The nucleus sums the masses of the top-k set in descending
/// order and keeps the shortest prefix whose sum reaches top_p * total.
/// Min-p keeps the candidates with double(v) - double(z0) >= log(min_p).
template <typename Sum, typename C, typename Better, typename Mass>
int64_t filter_candidates(C* buf, int64_t count, const SampleOptions& so, Better better,
                          Mass mass) {
  const int64_t floor_k = so.min_tokens_to_keep;
  int64_t m = count;
  // top-k: the K best (a prefix of `better`), plus the entries tied with the
  // K-th under TopKTies::kKeep (the set {value >= K-th value}).
  if (so.top_k > 0) {
    const int64_t K = std::max(so.top_k, floor_k);
    if (K < count) {
      std::nth_element(buf, buf + (K - 1), buf + count, better);
      m = K;
      if (so.top_k_ties == TopKTies::kKeep) {
        const auto kth = buf[K - 1].value;
        m = std::partition(buf + K, buf + count, [kth](const C& c) { return c.value == kth; }) -
            buf;
      }
    }
  }
  int64_t keep = m;
  bool sorted = false;
  // top-p over the top-k set, never below min(floor_k, m).
  if (so.top_p < 1.0f) {
    std::sort(buf, buf + m, better);
    sorted = true;
    const double z0 = static_cast<double>(buf[0].value);
    Sum total;
    for (int64_t j = 0; j < m; ++j) total.add(mass(buf[j].value, z0));
    const double target = static_cast<double>(so.top_p) * total.value();
    Sum cum;
    for (int64_t j = 0; j < m; ++j) {
      cum.add(mass(buf[j].value, z0));
      if (cum.value() >= target) {
        keep = j + 1;
        break;
      }
    }
    keep = std::max(keep, std::min(floor_k, m));
  }
  // min-p on what top-p kept, never below min(floor_k, keep).
  if (so.min_p > 0.0f) {
    double z0 = static_cast<double>(buf[0].value);
    if (!sorted) {
      for (int64_t j = 1; j < keep; ++j) z0 = std::max(z0, static_cast<double>(buf[j].value));
    }
    const double lthr = std::log(static_cast<double>(so.min_p));
    const auto passes = [z0, lthr](const C& c) {
      return static_cast<double>(c.value) - z0 >= lthr;
    };
    // Sorted: the passing entries are a prefix already (the test is monotone).
    const int64_t pass = (sorted ? std::partition_point(buf, buf + keep, passes)
                                 : std::partition(buf, buf + keep, passes)) -
                         buf;
    const int64_t floor_n = std::min(floor_k, keep);
    if (pass >= floor_n) {
      keep = pass;
    } else {
      // Fewer pass than the floor: the floor_n best of what top-p kept.
      if (!sorted) std::nth_element(buf, buf + (floor_n - 1), buf + keep, better);
      keep = floor_n;
    }
  }
  return keep;
}

/// The worst member (by `better`) of buf[0..keep), keep >= 1: the boundary
/// of the kept prefix.
template <typename C, typename Better>
const C& worst_candidate(const C* buf, int64_t keep, Better better) {
  const C* w = buf;
  for (int64_t j = 1; j < keep; ++j) {
    if (better(*w, buf[j])) w = buf + j;
  }
  return *w;
}

}  // namespace smax::detail
