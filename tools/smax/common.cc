// tools/smax/common.cc: helpers shared by the commands.
#include <cctype>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "json.h"
#include "smax/smax.h"
#include "suggest.h"
#include "timing.h"

namespace smax_cli {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i];
  return out;
}

}  // namespace

int parse_repeat(const std::string& what, const std::string& text) {
  const int64_t r = parse_int(what, text);
  if (r < 1 || r > 1000000) {
    throw UsageError(what + ": expected an integer in [1, 1000000], got '" + text + "'");
  }
  return static_cast<int>(r);
}

double parse_min_time(const std::string& text) {
  const double t = parse_double("--min-time", text);
  if (!(t >= 0) || t > 3600) {
    throw UsageError("--min-time: expected seconds in [0, 3600], got '" + text + "'");
  }
  return t;
}

uint64_t parse_seed(const std::string& text) {
  const int64_t seed = parse_int("--seed", text);
  if (seed < 0) throw UsageError("--seed: expected an integer >= 0, got '" + text + "'");
  return static_cast<uint64_t>(seed);
}

JsonObject& json_timing(JsonObject& o, const Timing& t) {
  return o.integer("samples", t.samples)
      .integer("calls_per_sample", t.calls_per_sample)
      .num("median_ms", t.median_s * 1e3)
      .num("min_ms", t.min_s * 1e3)
      .num("max_ms", t.max_s * 1e3)
      .num("spread_pct", t.spread_pct());
}

bool wants_help(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) return true;
  }
  return false;
}

void apply_target(const std::string& name) {
  const std::string want = lower(name);
  try {
    smax::set_max_target(want);
  } catch (const smax::Error& e) {
    throw UsageError(std::string("--target: ") + e.what());
  }
  const std::string active = lower(smax::active_target());
  // Highway's portable baseline is called EMU128 (or SCALAR in old builds).
  const bool same = active == want ||
                    (want == "scalar" && (active == "emu128" || active == "scalar"));
  if (!same) {
    throw UsageError("--target: this CPU cannot run '" + name + "' (it runs " +
                     smax::active_target() + "; supported: " +
                     join(smax::supported_targets()) + ")");
  }
}

int parse_threads(const std::string& text) {
  const std::string range = "(1.." + std::to_string(kMaxThreads) + ")";
  int64_t n = 0;
  try {
    n = parse_int("--threads", text);
  } catch (const UsageError&) {
    const bool digits = !text.empty() && text.find_first_not_of("+-0123456789") == std::string::npos;
    if (digits) throw UsageError("--threads: " + text + " is out of range " + range);
    throw UsageError("--threads: expected an integer " + range + ", got '" + text + "'");
  }
  if (n < 1 || n > kMaxThreads) {
    throw UsageError("--threads: " + text + " is out of range " + range);
  }
  return static_cast<int>(n);
}

int parse_algo(const std::string& text) {
  static const char* const kNames[] = {"auto", "three-pass-reload", "three-pass-recompute",
                                       "two-pass", "online"};
  bool known = false;
  for (const char* k : kNames) known = known || text == k;
  if (!known) {
    std::vector<std::string> names(std::begin(kNames), std::end(kNames));
    throw UsageError("--algo: unknown algorithm '" + text + "'" + did_you_mean(text, names) +
                     " (expected auto, three-pass-reload, three-pass-recompute, two-pass "
                     "or online)");
  }
  try {
    return static_cast<int>(smax::parse_algorithm(text));
  } catch (const smax::Error& e) {
    throw UsageError(std::string("--algo: ") + e.what());
  }
}

}  // namespace smax_cli
