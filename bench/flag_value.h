// bench/flag_value.h: the command lines of the benchmark programs
// (bench_linear_ce.cc, peers/smax_peers.cc): "--flag value" pairs.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

namespace smax_bench {

/// The value of the flag argv[*i], argv[*i + 1], and *i moved onto it; with
/// none, prints "<program>: <flag> needs a value" and exits with status 2.
inline std::string flag_value(int argc, char** argv, int* i, const char* program) {
  if (*i + 1 >= argc) {
    std::fprintf(stderr, "%s: %s needs a value\n", program, argv[*i]);
    std::exit(2);
  }
  return argv[++*i];
}

}  // namespace smax_bench
