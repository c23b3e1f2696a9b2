// fuzz/fuzz_group.cc: the libFuzzer entry point of one group target
// (fuzz_normalizers, fuzz_losses, fuzz_sampling; harness_ops.h). Compiled
// once per group with SMAX_FUZZ_GROUP set to its name (fuzz/CMakeLists.txt).
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "harness_ops.h"
#include "operands.h"

#ifndef SMAX_FUZZ_GROUP
#error "define SMAX_FUZZ_GROUP to a group name"
#endif

namespace {
// Counters at exit (libFuzzer exits after -max_total_time): what the
// checks did, including the calls of known open findings (not failed).
struct PrintStatsAtExit {
  ~PrintStatsAtExit() {
    const smax_fuzz::GroupStats& g = smax_fuzz::group_stats();
    std::fprintf(stderr,
                 "smax fuzz stats: %lld runs, %lld accepted, %lld rejected, %lld grey, %lld skipped, "
                 "%lld dot gap, %lld known open\n",
                 g.runs, g.accepted, g.rejected, g.grey, g.skipped, g.known_dot_gap, g.known_open);
  }
} print_stats_at_exit;
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const smax_fuzz::Group group =
      smax_fuzz::parse_or_abort(smax_fuzz::parse_group, SMAX_FUZZ_GROUP, "SMAX_FUZZ_GROUP");
  smax_fuzz::run_group_one(group, data, size);
  return 0;
}
