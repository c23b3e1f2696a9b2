// tools/smax/main.cc: entry point of the `smax` command line tool.
//
// Dispatches to the commands (cmd_*.cc) and turns every failure into one
// line on stderr, "smax: error: ...", with a non-zero exit status.
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "run_inputs.h"
#include "suggest.h"
#include "smax/smax.h"

namespace {

int fail(std::string message) {
  for (char& c : message) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  std::fflush(stdout);
  std::fprintf(stderr, "smax: error: %s\n", message.c_str());
  return smax_cli::kExitUsage;
}

const std::vector<std::string> kCommands = {"info", "run", "compare", "attention", "bench", "help"};

const char* command_help(const std::string& command) {
  if (command == "info") return smax_cli::kInfoHelp;
  if (command == "run") return smax_cli::kRunHelp;
  if (command == "compare") return smax_cli::kCompareHelp;
  if (command == "attention") return smax_cli::kAttentionHelp;
  if (command == "bench") return smax_cli::kBenchHelp;
  return nullptr;
}

int dispatch(int argc, char** argv) {
  using namespace smax_cli;
  if (argc < 2) throw UsageError("no command given (expected info, run, compare, attention or bench; see smax --help)");
  const std::string command = argv[1];
  if (command == "--help" || command == "-h") {
    std::fputs(kMainHelp, stdout);
    return kExitOk;
  }
  if (command == "--version" || command == "-V" || command == "version") {
    if (argc > 2) throw UsageError("--version takes no arguments");
    std::printf("smax %s\n", smax::version());
    return kExitOk;
  }
  if (command == "help") {
    if (argc == 2) {
      std::fputs(kMainHelp, stdout);
      return kExitOk;
    }
    const char* text = command_help(argv[2]);
    if (text == nullptr || argc > 3) {
      throw UsageError("help: unknown command '" + std::string(argv[2]) + "'" +
                       did_you_mean(argv[2], kCommands) +
                       " (expected info, run, compare, attention or bench)");
    }
    std::fputs(text, stdout);
    if (std::string(argv[2]) == "run") print_run_inputs_help();
    return kExitOk;
  }
  if (const char* text = command_help(command); text != nullptr && wants_help(argc, argv, 2)) {
    std::fputs(text, stdout);
    if (command == "run") print_run_inputs_help();
    return kExitOk;
  }
  if (command == "info") return cmd_info(argc, argv, 2);
  if (command == "run") return cmd_run(argc, argv, 2);
  if (command == "compare") return cmd_compare(argc, argv, 2);
  if (command == "attention") return cmd_attention(argc, argv, 2);
  if (command == "bench") return cmd_bench(argc, argv, 2);
  throw UsageError("unknown command '" + command + "'" + did_you_mean(command, kCommands) +
                   " (expected info, run, compare, attention or bench; see smax --help)");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return dispatch(argc, argv);
  } catch (const smax_cli::UsageError& e) {
    return fail(e.what());
  } catch (const smax::Error& e) {
    return fail(e.what());
  } catch (const std::bad_alloc&) {
    return fail("out of memory (try a smaller --shape)");
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}
