// fuzz/fuzz_attention.cc: the libFuzzer entry point of fuzz_attention
// (harness_attention.h). The replay of its inputs without libFuzzer (any
// compiler) is `smax_fuzz_replay attention PATH...` (replay_main.cc; the
// CTest test fuzz.replay.attention replays fuzz/corpus/attention and
// fuzz/regressions/attention).
#include <cstdint>
#include <cstdio>

#include "harness_attention.h"

namespace {
struct PrintStatsAtExit {
  ~PrintStatsAtExit() {
    const smax_fuzz::AttentionStats& s = smax_fuzz::attention_stats();
    std::fprintf(stderr,
                 "smax fuzz stats: %lld runs, %lld accepted (%lld checked against the oracle), "
                 "%lld rejected, %lld grey, %lld rows unchecked (overflow / non-finite v); "
                 "checked with a KV cache %lld (paged %lld), a gate %lld, ssmax_scales %lld, "
                 "unified_max %lld, power %lld\n",
                 s.runs, s.accepted, s.checked, s.rejected, s.grey, s.unchecked_rows, s.kv_cache,
                 s.paged, s.gate, s.ssmax_scales, s.unified_max, s.power);
  }
} print_stats_at_exit;
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  smax_fuzz::run_attention_one(data, size);
  return 0;
}
