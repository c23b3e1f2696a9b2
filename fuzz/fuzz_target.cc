// fuzz/fuzz_target.cc: the libFuzzer entry point of one fuzz target.
// Compiled once per public op with SMAX_FUZZ_OP set to its name (see
// fuzz/CMakeLists.txt): fuzz_softmax, fuzz_log_softmax, fuzz_logsumexp,
// fuzz_softmax_backward, fuzz_log_softmax_backward.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "harness.h"
#include "operands.h"

#ifndef SMAX_FUZZ_OP
#error "define SMAX_FUZZ_OP to an op name"
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const smax_fuzz::Op op =
      smax_fuzz::parse_or_abort(smax_fuzz::parse_op, SMAX_FUZZ_OP, "SMAX_FUZZ_OP");
  smax_fuzz::run_one(op, data, size);
  return 0;
}
