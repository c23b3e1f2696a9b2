// fuzz/fuzz_attention.cc: the libFuzzer entry point of fuzz_attention
// (harness_attention.h). Built with -DSMAX_FUZZ_ATTENTION_REPLAY it is
// instead a replay driver (no libFuzzer, any compiler): 
//   smax_fuzz_attention_replay PATH...   # files or directories of inputs
// which runs every input through the same checks (the CTest test
// fuzz.replay.attention replays fuzz/corpus/attention and
// fuzz/regressions/attention). Exit 0 when every input passed, 2 when no
// input was found; a violation aborts with its description.
#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "harness_attention.h"

#ifndef SMAX_FUZZ_ATTENTION_REPLAY

namespace {
struct PrintStatsAtExit {
  ~PrintStatsAtExit() {
    const smax_fuzz::AttentionStats& s = smax_fuzz::attention_stats();
    std::fprintf(stderr,
                 "smax fuzz stats: %lld runs, %lld accepted (%lld checked against the oracle), "
                 "%lld rejected, %lld grey, %lld rows unchecked (overflow / non-finite v)\n",
                 s.runs, s.accepted, s.checked, s.rejected, s.grey, s.unchecked_rows);
  }
} print_stats_at_exit;
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  smax_fuzz::run_attention_one(data, size);
  return 0;
}

#else  // replay driver

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    const fs::path p(argv[i]);
    if (fs::is_directory(p)) {
      for (const auto& e : fs::directory_iterator(p)) {
        if (e.is_regular_file() && e.path().filename().string()[0] != '.') files.push_back(e.path());
      }
    } else if (fs::is_regular_file(p)) {
      files.push_back(p);
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    std::fprintf(stderr, "usage: %s PATH...  (no inputs under the given paths)\n", argv[0]);
    return 2;
  }
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    const std::vector<uint8_t> data((std::istreambuf_iterator<char>(in)),
                                    std::istreambuf_iterator<char>());
    std::fprintf(stderr, "replay attention %s (%zu bytes)\n", f.string().c_str(), data.size());
    smax_fuzz::run_attention_one(data.data(), data.size());
  }
  const smax_fuzz::AttentionStats& s = smax_fuzz::attention_stats();
  std::printf("attention: %zu inputs passed (%lld accepted, %lld checked against the oracle, "
              "%lld rejected as required, %lld grey, %lld rows unchecked)\n",
              files.size(), s.accepted, s.checked, s.rejected - s.grey, s.grey, s.unchecked_rows);
  return 0;
}

#endif
