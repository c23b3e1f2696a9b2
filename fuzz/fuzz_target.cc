// fuzz/fuzz_target.cc: the libFuzzer entry point of one fuzz target.
// Compiled once per public op with SMAX_FUZZ_OP set to its name (see
// fuzz/CMakeLists.txt): fuzz_softmax, fuzz_log_softmax, fuzz_logsumexp,
// fuzz_softmax_backward, fuzz_log_softmax_backward.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "harness.h"

#ifndef SMAX_FUZZ_OP
#error "define SMAX_FUZZ_OP to an op name"
#endif

namespace {
smax_fuzz::Op target_op() {
  static const smax_fuzz::Op op = [] {
    smax_fuzz::Op o;
    if (!smax_fuzz::parse_op(SMAX_FUZZ_OP, &o)) {
      std::fprintf(stderr, "unknown SMAX_FUZZ_OP %s\n", SMAX_FUZZ_OP);
      std::abort();
    }
    return o;
  }();
  return op;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  smax_fuzz::run_one(target_op(), data, size);
  return 0;
}
