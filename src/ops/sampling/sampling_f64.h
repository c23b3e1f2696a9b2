// src/ops/sampling/sampling_f64.h: the float64 rows of the samplers
// (include/smax/sampling.h), used by sampling.cc and gumbel.cc when an input
// is f64 (Rowwise::run<double> hands float64 rows: t = x s + mask in double,
// -inf = masked).
//
// The same semantics as the f32 rows (ranking, ties by the lower index,
// NaN / +inf / all-masked rows, the Gumbel noise g(seed, r, i) of
// kernels/sampling.h) on double values: the tempered logits z = t / T are
// not rounded to f32, top-k compares doubles, the probabilities and the
// nucleus masses are e^(z - max) with an exact two-term argument summed
// with compensation, and Gumbel-max compares t + g in double (the f32 path
// compares double(f32 t) + g). Plain scalar code (nth_element / sort on
// the row's candidates); no allocation: every buffer is the caller's
// scratch. None of this throws.
#pragma once

#include <cstdint>

#include "smax/options.h"
#include "smax/sampling.h"

namespace smax::detail {

/// A top-k candidate: a float64 value and its index in the row.
struct Cand64 {
  double value;
  int64_t index;
};

/// softmax_topk of one row of n >= k >= 1 logits: idx[j] and probs[j]
/// (j < k) for the k best (descending, ties by the lower index; NaN ranks
/// above +inf above everything; -inf last by index). probs: softmax over
/// the full row, or over the k winners (renorm); NaN for NaN / +inf rows,
/// 0 at -inf entries, policy for all-masked rows. `buf` holds n candidates.
void softmax_topk_row_f64(const double* t, int64_t n, int64_t k, bool renorm, EmptyRow policy,
                          Cand64* buf, double* probs, int64_t* idx) noexcept;

/// argmax_i (t_i + g(seed, row, i)) in double, lowest index on ties; -1 for
/// n = 0, all -inf, NaN or +inf rows. The noise is evaluated only for the
/// entries within 41 of max t (g lies in [-3.61, 36.74], so no other entry
/// can reach the winner).
int64_t gumbel_argmax_f64(const double* t, int64_t n, uint64_t seed, uint64_t row) noexcept;

/// What survives sampling_filter's filters in a row (the f32 rows' Kept).
struct KeptF64 {
  enum Kind { kNone, kNaN, kAll, kPrefix, kGreedy } kind = kNone;
  int64_t index = 0;  // kGreedy: the index; kPrefix: the last kept candidate's
  double value = 0.0;  // kPrefix: the last kept candidate's value
  int64_t count = 0;   // kPrefix: buf[0..count) holds the kept set, best first
  bool keeps(double z, int64_t i) const { return z > value || (z == value && i <= index); }
};

/// Writes z = t / T (T > 0; z = t for T = 1) into z (n doubles; may not be
/// t) and decides the kept set: temperature -> top-k -> top-p, as the f32
/// rows. Greedy (T = 0): z is not written. `buf` holds n candidates.
KeptF64 filter_row_f64(const double* t, int64_t n, const SampleOptions& so, double* z,
                       Cand64* buf) noexcept;

/// gumbel_softmax's soft row y = softmax((t + g) / tau) (float64 softmax
/// kernel) with g the seeded noise, or `noise` when not null; returns the
/// hard index argmax (t + g) (lowest on ties; -1 when the row has no finite
/// best). y may be t.
int64_t gumbel_softmax_row_f64(const double* t, const double* noise, int64_t n, double tau,
                               uint64_t seed, uint64_t row, EmptyRow policy, double* y) noexcept;

}  // namespace smax::detail
