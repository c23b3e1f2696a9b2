// fuzz/replay_main.cc: runs fuzz inputs through the harness without
// libFuzzer, so the corpus and every crash the fuzzers found are regression
// tests in any build (gcc included).
//
//   smax_fuzz_replay OP PATH...   # PATH: a file or a directory of inputs
//
// OP is a softmax-family op (harness.h), `attention` (harness_attention.h)
// or, in builds with the CLI's op table, a group of the other ops:
// normalizers, losses, sampling, options (harness_ops.h).
//
// Exits 0 when every input passed (a violation aborts with its description),
// 2 on a usage error or when no input was found.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "harness.h"
#include "harness_attention.h"
#ifdef SMAX_FUZZ_HAVE_GROUPS
#include "harness_ops.h"
#endif

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  smax_fuzz::Op op = smax_fuzz::Op::kSoftmax;
  bool is_group = false;
  const bool is_attention = argc >= 3 && std::string(argv[1]) == "attention";
#ifdef SMAX_FUZZ_HAVE_GROUPS
  smax_fuzz::Group group = smax_fuzz::Group::kNormalizers;
  is_group = argc >= 3 && smax_fuzz::parse_group(argv[1], &group);
#endif
  if (argc < 3 || (!is_group && !is_attention && !smax_fuzz::parse_op(argv[1], &op))) {
    std::fprintf(stderr, "usage: %s OP PATH...  (OP: softmax, log_softmax, logsumexp, "
                         "softmax_backward, log_softmax_backward; attention; normalizers, "
                         "losses, sampling, options)\n", argv[0]);
    return 2;
  }
  std::vector<fs::path> files;
  for (int i = 2; i < argc; ++i) {
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
    std::fprintf(stderr, "%s: no inputs under the given paths\n", argv[0]);
    return 2;
  }
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    const std::vector<uint8_t> data((std::istreambuf_iterator<char>(in)),
                                    std::istreambuf_iterator<char>());
    std::fprintf(stderr, "replay %s %s (%zu bytes)\n", argv[1], f.string().c_str(), data.size());
    if (is_attention) {
      smax_fuzz::run_attention_one(data.data(), data.size());
      continue;
    }
#ifdef SMAX_FUZZ_HAVE_GROUPS
    if (is_group) {
      smax_fuzz::run_group_one(group, data.data(), data.size());
      continue;
    }
#endif
    smax_fuzz::run_one(op, data.data(), data.size());
  }
  if (is_attention) {
    const smax_fuzz::AttentionStats& a = smax_fuzz::attention_stats();
    std::printf("attention: %zu inputs passed (%lld accepted, %lld checked against the oracle, "
                "%lld rejected as required, %lld grey, %lld rows unchecked); checked with a KV "
                "cache %lld (paged %lld), a gate %lld, ssmax_scales %lld, unified_max %lld, "
                "power %lld\n",
                files.size(), a.accepted, a.checked, a.rejected - a.grey, a.grey, a.unchecked_rows,
                a.kv_cache, a.paged, a.gate, a.ssmax_scales, a.unified_max, a.power);
    return 0;
  }
#ifdef SMAX_FUZZ_HAVE_GROUPS
  if (is_group) {
    const smax_fuzz::GroupStats& g = smax_fuzz::group_stats();
    std::printf("%s: %zu inputs passed (%lld accepted, %lld rejected as required, %lld "
                "conservatively rejected or rejected by the oracle too, %lld skipped, %lld within "
                "the documented dot-product gap, %lld of the known open finding; %lld accepted "
                "with f64 / f16 / bf16 operands)\n",
                argv[1], files.size(), g.accepted, g.rejected - g.grey, g.grey, g.skipped,
                g.known_dot_gap, g.known_open, g.typed);
    return 0;
  }
#endif
  const smax_fuzz::Stats& s = smax_fuzz::stats();
  std::printf("%s: %zu inputs passed (%lld accepted, %lld rejected as required, %lld "
              "conservatively rejected, %lld within the documented dot-product gap; %lld accepted "
              "with f64 / f16 / bf16 operands)\n",
              argv[1], files.size(), s.accepted, s.rejected - s.grey, s.grey, s.known_dot_gap,
              s.typed);
  return 0;
}
