// src/core/internal.h: what the op layer shares between its files.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "smax/options.h"

namespace smax::detail {

/// Applies SMAX_MAX_TARGET once per process; every op calls it before
/// dispatching to kernels. Throws smax::Error (every time) for an unknown name.
void ensure_runtime_initialized();

/// Runs task(i) for i in [0, n_tasks) on at most `threads` threads, through
/// the installed ParallelFor or OpenMP. Tasks must not throw.
void run_parallel(int64_t n_tasks, int threads, const std::function<void(int64_t)>& task);

/// Algorithm::kAuto resolved for `op` on rows of `cols` elements, from the
/// cache sizes of this machine (thresholds: docs/design.md).
Algorithm choose_algorithm(const std::string& op, int64_t cols);

/// choose_algorithm without the op's name: `writes_row` for softmax and
/// log_softmax (a working set of src + dst), false for logsumexp (src).
Algorithm choose_forward_algorithm(bool writes_row, int64_t cols);

}  // namespace smax::detail
