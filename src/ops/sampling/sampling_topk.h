// src/ops/sampling/sampling_topk.h: the f32 top-k of one row and the option
// checks of the samplers (defined in sampling.cc), shared by softmax_topk /
// sample and their vocabulary-parallel forms (ops/distributed/
// sampling_sharded.cc). Internal to src/ops; nothing here throws except
// check_sample_options.
#pragma once

#include <cstdint>

#include "kernels/sampling.h"
#include "smax/sampling.h"

namespace smax::detail {

/// The candidate buffer size topk_row needs for k winners in a row of n.
int64_t topk_cap(int64_t k, int64_t n);

/// The order of softmax_topk's outputs: NaN above everything (then +inf,
/// finite, -inf), ties by the lower index.
bool better_nan_first(const kernels::TopkCandidate& a, const kernels::TopkCandidate& b);

/// The k best of t[0..n) (1 <= k <= n), sorted by better_nan_first, in
/// buf[0..k) (buf holds topk_cap(k, n) entries); -inf entries follow the
/// others by ascending index. Returns the scan: (ref, d) the online
/// normaliser sum_i e^(t_i - ref) = d, max; d is NaN when the row holds NaN
/// or +inf (the ranking then puts NaN first).
kernels::TopkScan topk_row(const float* t, int64_t n, int64_t k, kernels::TopkCandidate* buf,
                           int64_t cap);

/// Throws smax::Error (invalid argument, naming `op` and the option) for a
/// bad SampleOptions value.
void check_sample_options(const SampleOptions& so, const char* op);

}  // namespace smax::detail
