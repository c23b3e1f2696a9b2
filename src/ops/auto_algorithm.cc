// src/ops/auto_algorithm.cc: what Algorithm::kAuto means on this machine.
//
// In cache, one exp per element is worth more than a saved pass, so the
// three-pass-reload form wins; once a row (src + dst) no longer fits the
// per-core L2, every extra sweep is paid in memory traffic and the
// single-read forms win. Figures behind the threshold: docs/design.md.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "ops/internal.h"

namespace smax::detail {
namespace {

int64_t l2_bytes() {
  static const int64_t bytes = [] {
    long value = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return value > 0 ? static_cast<int64_t>(value) : int64_t{512} * 1024;
  }();
  return bytes;
}

}  // namespace

Algorithm choose_algorithm(const std::string& op, int64_t cols) {
  const int64_t row_bytes = cols * int64_t{sizeof(float)};
  const bool writes_row = op == "softmax" || op == "log_softmax";
  const int64_t footprint = writes_row ? 2 * row_bytes : row_bytes;
  if (footprint <= l2_bytes()) return Algorithm::kThreePassReload;
  return Algorithm::kOnline;
}

}  // namespace smax::detail
