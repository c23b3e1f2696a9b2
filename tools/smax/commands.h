// tools/smax/commands.h: the CLI's commands. Each takes the whole argv and
// the index of its first option, prints its report on stdout and returns the
// process exit status; bad arguments throw UsageError (args.h).
#pragma once

#include <string>

namespace smax_cli {

int cmd_info(int argc, char** argv, int first);
int cmd_run(int argc, char** argv, int first);
int cmd_compare(int argc, char** argv, int first);
int cmd_attention(int argc, char** argv, int first);

/// Help texts (also printed by `smax help COMMAND` / `smax COMMAND --help`).
extern const char* const kMainHelp;
extern const char* const kInfoHelp;
extern const char* const kRunHelp;
extern const char* const kCompareHelp;
extern const char* const kAttentionHelp;  // cmd_attention.cc

/// True when argv[first..argc) contains --help or -h.
bool wants_help(int argc, char** argv, int first);

/// Caps the library's SIMD target (smax::set_max_target) and checks that the
/// CPU really runs the requested one; throws UsageError naming --target.
void apply_target(const std::string& name);

/// Parses --threads: an integer >= 1 (throws UsageError otherwise).
int parse_threads(const std::string& text);

/// Parses --algo through smax::parse_algorithm with a CLI-style message.
int parse_algo(const std::string& text);  // returns static_cast<int>(smax::Algorithm)

/// The naive baseline of `smax compare`: scalar max, std::exp and sum in
/// float, then divide, in three plain loops.
void naive_softmax(const float* x, float* y, long long n);

}  // namespace smax_cli
