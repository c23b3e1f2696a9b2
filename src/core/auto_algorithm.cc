// src/core/auto_algorithm.cc: what Algorithm::kAuto means on this machine.
//
// While a row's working set (src + dst for softmax / log_softmax, src for
// logsumexp) stays in the last-level cache, one exp per element is worth more
// than a saved sweep and three-pass-reload wins; beyond it every sweep is paid
// in DRAM traffic and two-pass (Dukhan & Ablavatski: R + RW, no max pass)
// wins. Online never won on the development machine (its first pass needs an
// exact difference per element), so auto does not pick it. Figures: the
// `smax compare` table in docs/design.md (Zen 3, 32 MiB L3: reload 0.53 vs
// two-pass 0.57 ns/elem at 1M elements, 0.67 vs 0.59 at 4M, 0.82 vs 0.64 at 32M).
// Re-measured after the segment kernels got the row kernels' exp (smax_bench,
// median of 3, docs/benchmarking.md): reload 0.41 vs two-pass 0.58 at 1M,
// 0.61 vs 0.62 at 4M (the threshold: 32 MiB of src + dst), 0.73 vs 0.66 at
// 16M and 32M; the threshold stays.
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>

#include "core/internal.h"
#include "core/stream_stores.h"

namespace smax::detail {
namespace {

// Size in bytes of the cache at `level` from Linux sysfs ("32768K"), or 0.
int64_t sysfs_cache_bytes(int level) {
  for (int index = 0; index < 8; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index);
    std::ifstream level_file(dir + "/level");
    int found = 0;
    if (!(level_file >> found) || found != level) continue;
    std::ifstream size_file(dir + "/size");
    int64_t value = 0;
    char unit = 0;
    if (!(size_file >> value)) return 0;
    size_file >> unit;
    return unit == 'K' ? value << 10 : unit == 'M' ? value << 20 : value;
  }
  return 0;
}

// Last-level cache size. sysfs first: glibc's sysconf has been seen to report
// a 320 MiB L3 on a 32 MiB EPYC VM.
int64_t llc_bytes_once() {
  static const int64_t bytes = [] {
    int64_t value = sysfs_cache_bytes(3);
    if (value <= 0) value = sysfs_cache_bytes(2);
    if (value <= 0) value = sysconf(_SC_LEVEL3_CACHE_SIZE);
    return value > 0 ? value : int64_t{8} << 20;
  }();
  return bytes;
}

}  // namespace

int64_t last_level_cache_bytes() { return llc_bytes_once(); }

Algorithm choose_algorithm(const std::string& op, int64_t cols) {
  return choose_forward_algorithm(op == "softmax" || op == "log_softmax", cols);
}

Algorithm choose_forward_algorithm(bool writes_row, int64_t cols) {
  const int64_t row_bytes = cols * int64_t{sizeof(float)};
  const int64_t footprint = writes_row ? 2 * row_bytes : row_bytes;
  // Half the LLC: the other half holds the neighbours' rows and other data.
  return footprint <= last_level_cache_bytes() / 2 ? Algorithm::kThreePassReload : Algorithm::kTwoPass;
}

}  // namespace smax::detail
