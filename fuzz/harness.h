// fuzz/harness.h: one fuzz input -> one checked call of a public smax op.
//
// The same code runs under libFuzzer (fuzz/fuzz_target.cc, built with
// -DSMAX_BUILD_FUZZERS=ON and clang) and in the ordinary test build
// (fuzz/replay_main.cc replays fuzz/corpus/<target>/ and
// fuzz/regressions/<target>/ as a CTest test), so every crash the fuzzers
// find stays a regression test in the gcc build too.
//
// What one input decodes to (see harness_decode.cc for the byte layout): an op, a
// rank 0..8 and shape (0-sized dims, long rows crossing the kernels' segment
// size), per-operand strides (row-major, permuted and padded, negative,
// zero/broadcast, arbitrary small values that overlap, exact in-place
// aliasing, outputs placed over inputs), optional additive and bool masks
// (broadcast, sometimes not broadcastable), options (axis in and out of
// range, scale / temperature including 0, negative, NaN, inf, denormal,
// huge; every algorithm and empty_row value plus invalid ones; threads
// -1..3), the SIMD target cap, the API (C++ or the C ABI), values (NaN,
// +-inf, denormals, huge, raw bit patterns), and sometimes a corruption that
// must be rejected (element counts or byte offsets overflowing int64,
// negative sizes, bad ranks, wrong dtypes, null data).
//
// What is checked, from an independent model of the contract in
// include/smax/softmax.h:
//  * calls the contract says must fail throw smax::Error (invalid argument)
//    whose message starts with the op name (C ABI: the status and
//    smax_last_error()), and nothing in memory changed;
//  * calls it says must succeed do, write nothing outside dst, match the
//    float64 reference within the header's bounds (NaN / inf / exact zeros
//    exactly), and give the same bits with threads = 1;
//  * calls in the grey zone (outputs whose address range overlaps an input
//    without sharing an element, which the library may conservatively
//    reject) either fail cleanly or succeed correctly.
// A violation prints the decoded case and aborts (a crash for libFuzzer, a
// failed test for the replay driver).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "check.h"

namespace smax_fuzz {

/// The softmax family and its names ("softmax", ..., the fuzz target suffix:
/// fuzz_<name>), as the CLI has them (testing/check.h).
using Op = smax_cli::Op;
using smax_cli::op_name;

/// Parses an op name; false when unknown.
bool parse_op(const std::string& name, Op* op);

/// Decodes `data` and runs one checked call of `op`. Aborts on a violation.
void run_one(Op op, const uint8_t* data, size_t size);

/// Counters since start (for the replay driver's summary).
struct Stats {
  long long runs = 0, accepted = 0, rejected = 0, grey = 0, known_dot_gap = 0;
  long long typed = 0;  ///< accepted calls with f64 / f16 / bf16 operands
};
const Stats& stats();

}  // namespace smax_fuzz
