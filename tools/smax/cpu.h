// tools/smax/cpu.h: what `smax info` reports about the machine.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace smax_cli {

/// "AMD EPYC 7B13" from /proc/cpuinfo, or "unknown".
std::string cpu_model();
/// (feature, present) for the SIMD features that matter to smax's targets,
/// from __builtin_cpu_supports on x86 (empty elsewhere).
std::vector<std::pair<std::string, bool>> cpu_features();

/// Data/unified cache sizes in bytes (0 = unknown), as seen by cpu0: from
/// /sys/devices/system/cpu/cpu0/cache, falling back to sysconf.
struct CacheSizes {
  int64_t l1d = 0;
  int64_t l2 = 0;
  int64_t l3 = 0;
};
CacheSizes cache_sizes();

/// Read bandwidth from memory of `threads` threads (each sweeping its share),
/// GB/s (1e9 bytes / s): the best of several XOR sweeps over a buffer of
/// max(bytes, 4 x L3, 64 MiB) (so it comes from DRAM, not a cache). The
/// memory floor of a call that reads `bytes` once with that many threads is
/// bytes / this. Allocates and fills the buffer (~0.1-1 s).
double read_bandwidth_gbs(int64_t bytes, int threads = 1);

/// This core's measured peak f32 FMA rate, GFLOP/s (2 per lane per FMA):
/// 12 independent MulAdd chains on the widest supported SIMD target, the best
/// of 3 runs of ~0.1-0.5 s (tools/smax/fma_peak.cc). The compute floor of a
/// call of F FLOPs is F / this.
double fma_peak_gflops();

/// "32 KiB", "1 MiB", "unknown".
std::string format_bytes(int64_t bytes);

}  // namespace smax_cli
