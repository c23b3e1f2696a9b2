// tools/smax/commands.h: the CLI's commands. Each takes the whole argv and
// the index of its first option, prints its report on stdout and returns the
// process exit status; bad arguments throw UsageError (args.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace smax_cli {

class Args;
class JsonObject;
struct ExtOp;
struct OptionSpec;
struct Timing;

int cmd_info(int argc, char** argv, int first);
/// `smax info --ops` (cmd_info_ops.cc): text, or JSON when `json`.
int cmd_info_ops(bool json);
int cmd_run(int argc, char** argv, int first);
int cmd_compare(int argc, char** argv, int first);
int cmd_attention(int argc, char** argv, int first);
/// `smax bench --peers` (cmd_bench.cc).
int cmd_bench(int argc, char** argv, int first);

/// `smax bench --peers`: something asked for (a peer, matplotlib for
/// --plot) is missing (each named on stderr with its install command).
inline constexpr int kExitPeersMissing = 3;

/// Help texts (also printed by `smax help COMMAND` / `smax COMMAND --help`).
extern const char* const kMainHelp;
extern const char* const kInfoHelp;
extern const char* const kRunHelp;
extern const char* const kCompareHelp;
extern const char* const kAttentionHelp;  // cmd_attention.cc
extern const char* const kBenchHelp;      // cmd_bench.cc

/// True when argv[first..argc) contains --help or -h.
bool wants_help(int argc, char** argv, int first);

/// Caps the library's SIMD target (smax::set_max_target) and checks that the
/// CPU really runs the requested one; throws UsageError naming --target.
void apply_target(const std::string& name);

/// The most threads --threads accepts.
inline constexpr int kMaxThreads = 4096;
/// Parses --threads: an integer in [1, kMaxThreads]; throws UsageError
/// ("--threads: 100000 is out of range (1..4096)") otherwise.
int parse_threads(const std::string& text);

/// A repeat count (`what` names the option: "--repeat", "--reps"): an
/// integer in [1, 1000000]; throws UsageError otherwise.
int parse_repeat(const std::string& what, const std::string& text);
/// --min-time: seconds in [0, 3600]; throws UsageError otherwise.
double parse_min_time(const std::string& text);
/// --seed: an integer >= 0; throws UsageError otherwise.
uint64_t parse_seed(const std::string& text);
/// The timing fields of a JSON report, in this order: samples,
/// calls_per_sample, median_ms, min_ms, max_ms, spread_pct.
JsonObject& json_timing(JsonObject& o, const Timing& t);

/// Every option of `smax run` (the softmax family and the table ops share
/// one parse; cmd_run then rejects the options that do not apply to --op).
const std::vector<OptionSpec>& run_option_specs();
/// `smax run` for a table op of testing/op_table.h (cmd_run_ext.cc), from the parsed
/// options; --algo has been rejected, --reduction only reaches losses.
int cmd_run_ext(const ExtOp& op, const Args& args);

/// Parses --algo through smax::parse_algorithm with a CLI-style message.
int parse_algo(const std::string& text);  // returns static_cast<int>(smax::Algorithm)

/// The naive baseline of `smax compare`: scalar max, std::exp and sum in
/// float, then divide, in three plain loops.
void naive_softmax(const float* x, float* y, long long n);
/// The same loop on a float64 row, in double (std::exp of double).
void naive_softmax_f64(const double* x, double* y, long long n);
/// The same loop on a bf16 / f16 row (uint16_t bit patterns), in float:
/// each exp is stored rounded to the row's type, then read back and divided
/// by the float sum, the quotient rounded again (smax/src/core/convert.h's
/// round-to-nearest-even conversions).
void naive_softmax_bf16(const uint16_t* x, uint16_t* y, long long n);
void naive_softmax_f16(const uint16_t* x, uint16_t* y, long long n);

}  // namespace smax_cli
