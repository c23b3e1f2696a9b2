// testing/args.h: command-line parsing for the smax CLI.
//
// Every parse failure throws UsageError; main() prints it as one line,
// "smax: error: <message>", and exits with kExitUsage.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace smax_cli {

/// Exit statuses of the CLI (documented in docs/cli.md).
inline constexpr int kExitOk = 0;
inline constexpr int kExitCheckFailed = 1;  ///< --check found errors above the bounds
inline constexpr int kExitUsage = 2;        ///< bad arguments, or smax::Error from the library

/// A bad command line. The message names the option and the offending value.
class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& message) : std::runtime_error(message) {}
};

/// One option a command accepts: "--name VALUE" (or "--name=VALUE") when
/// takes_value, else a switch "--name".
struct OptionSpec {
  std::string name;  ///< without the leading "--"
  bool takes_value = true;
};

/// Parsed options of one command. Lookups only see names that were declared.
class Args {
 public:
  /// Parses argv[first..argc) against `specs`. `command` is used in
  /// messages ("unknown option '--x' for 'smax run'"). Positional arguments
  /// and repeated options are errors.
  Args(const std::string& command, const std::vector<OptionSpec>& specs, int argc,
       char** argv, int first);

  bool has(const std::string& name) const { return values_.count(name) != 0; }
  /// The option's value, or `fallback` when absent.
  std::string get(const std::string& name, const std::string& fallback) const;

 private:
  std::map<std::string, std::string> values_;
};

/// Strict integer parse of the whole string (optional sign, decimal digits,
/// optional binary suffix K/M/G = 2^10/2^20/2^30 when allow_suffix).
/// `what` names the option in the message ("--threads").
int64_t parse_int(const std::string& what, const std::string& text, bool allow_suffix = false);
/// Strict floating-point parse of the whole string; rejects NaN and inf.
double parse_double(const std::string& what, const std::string& text);
/// "256x32000", "33554432", "2x3x4", "4Kx8K": 1..8 dims, each >= 1, product
/// fitting in int64.
std::vector<int64_t> parse_shape(const std::string& text);
/// "256x32000" for messages and reports.
std::string format_shape(const std::vector<int64_t>& shape);
/// Row sizes for `smax compare`: a comma-separated list of sizes ("1K,4M")
/// and/or ranges "LO..HI" (LO, 4*LO, 16*LO, ... <= HI, then HI itself).
std::vector<int64_t> parse_sizes(const std::string& text);
/// A number as printf's %g writes it: "0.43", "1e-06", "10".
std::string format_number(double v);
/// "1K", "32M", "1000" (binary suffix when exact).
std::string format_size(int64_t n);

enum class Format { kText, kJson };
Format parse_format(const std::string& text);

}  // namespace smax_cli
