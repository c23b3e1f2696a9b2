// tools/smax/cmd_info.cc: `smax info`.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "args.h"
#include "commands.h"
#include "cpu.h"
#include "json.h"
#include "op_table.h"
#include "smax/smax.h"

namespace smax_cli {
namespace {

const char* const kOps[] = {"softmax", "log_softmax", "logsumexp", "softmax_backward",
                            "log_softmax_backward"};
// Row lengths at which `auto` is shown: in L1, a vocabulary row, out of cache.
const int64_t kRowLengths[] = {1024, 32000, int64_t{1} << 25};

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

}  // namespace

int cmd_info(int argc, char** argv, int first) {
  const Args args("smax info", {{"target", true}, {"format", true}, {"ops", false}, {"help", false}},
                  argc, argv, first);
  const Format format = parse_format(args.get("format", "text"));
  if (args.has("ops")) return cmd_info_ops(format == Format::kJson);
  if (args.has("target")) apply_target(args.get("target", ""));

  const std::string model = cpu_model();
  const auto features = cpu_features();
  const CacheSizes caches = cache_sizes();
  const unsigned hw_threads = std::thread::hardware_concurrency();
  const int threads = smax::max_threads();
  const std::vector<std::string> compiled = smax::compiled_targets();
  const std::vector<std::string> supported = smax::supported_targets();
  const std::string active = smax::active_target();
  const char* env_cap = std::getenv("SMAX_MAX_TARGET");
  const std::string stores = smax::streaming_stores();
  const char* env_stores = std::getenv("SMAX_STREAM_STORES");

  std::vector<std::string> have, missing;
  for (const auto& [name, present] : features) (present ? have : missing).push_back(name);

  if (format == Format::kJson) {
    JsonObject feat;
    for (const auto& [name, present] : features) feat.boolean(name, present);
    JsonObject cache;
    cache.integer("l1d", caches.l1d).integer("l2", caches.l2).integer("l3", caches.l3);
    JsonObject kernels;
    for (const char* op : kOps) {
      JsonObject per_len;
      for (int64_t n : kRowLengths) {
        per_len.str(std::to_string(n), smax::kernel_name(op, "auto", n));
      }
      kernels.raw(op, per_len.compact());
    }
    JsonObject out;
    out.str("version", smax::version())
        .str("cpu", model)
        .raw("features", feat.compact())
        .raw("cache_bytes", cache.compact())
        .integer("hardware_threads", hw_threads)
        .integer("threads", threads)
        .raw("compiled_targets", json_string_array(compiled))
        .raw("supported_targets", json_string_array(supported))
        .str("active_target", active)
        .raw("max_target_env", env_cap ? json_string(env_cap) : "null")
        .str("streaming_stores", stores)
        .raw("stream_stores_env", env_stores ? json_string(env_stores) : "null")
        .raw("kernels_auto", kernels.pretty(2));
    std::printf("%s\n", out.pretty().c_str());
    return kExitOk;
  }

  std::printf("smax %s\n", smax::version());
  std::printf("cpu        %s, %u hardware threads\n", model.c_str(), hw_threads);
  if (!features.empty()) {
    std::printf("features   %s\n", join(have, " ").c_str());
    if (!missing.empty()) std::printf("missing    %s\n", join(missing, " ").c_str());
  }
  std::printf("caches     L1d %s, L2 %s, L3 %s\n", format_bytes(caches.l1d).c_str(),
              format_bytes(caches.l2).c_str(), format_bytes(caches.l3).c_str());
  std::printf("threads    %d (smax::max_threads)\n", threads);
  std::printf("targets    compiled:  %s\n", join(compiled, " ").c_str());
  std::printf("           supported: %s\n", join(supported, " ").c_str());
  std::printf("           active:    %s%s%s%s\n", active.c_str(),
              env_cap ? " (SMAX_MAX_TARGET=" : "", env_cap ? env_cap : "", env_cap ? ")" : "");
  // Streaming stores: decided by the first large batched calls of a process
  // (docs/design.md, "Streaming stores"), so a fresh `smax info` says
  // "measuring" unless SMAX_STREAM_STORES forces it.
  std::printf("stores     streaming: %s%s%s%s\n", stores.c_str(),
              env_stores ? " (SMAX_STREAM_STORES=" : "", env_stores ? env_stores : "",
              env_stores ? ")" : "");
  std::printf("kernels    with --algo auto, by row length n:\n");
  for (const char* op : kOps) {
    bool first_line = true;
    for (int64_t n : kRowLengths) {
      std::printf("  %-22s n=%-6s %s\n", first_line ? op : "", format_size(n).c_str(),
                  smax::kernel_name(op, "auto", n).c_str());
      first_line = false;
    }
  }
  return kExitOk;
}

}  // namespace smax_cli
