// bench/floors.h: what this machine can do, measured in the same run as the
// softmax benchmarks, so that each result can be read as a fraction of it.
//
//  read_floor        sum of a float buffer (read-only bandwidth), SIMD, 4
//                    accumulators; returns the sum so it cannot be elided.
//  read_write_floor  dst = src * 1 (one read + one write stream, SIMD
//                    stores; the op's cost without the exp).
//  stream_copy_floor dst = src with streaming (non-temporal) stores: a
//                    copy without the destination's read-for-ownership,
//                    the cheapest one-sweep copy where the output does not
//                    fit the cache. The one-sweep copy floor of a case is
//                    the faster of this and read_write_floor.
//  exp_floor         Highway's own exp (hwy/contrib/math Exp) over an
//                    L1-resident buffer, summed: the exp throughput of a core
//                    with no memory traffic. Compare with the per-element
//                    cost of in-cache rows: a two-exp algorithm cannot beat
//                    2x this, a one-exp algorithm 1x.
// All three use Highway's dynamic dispatch (the best target of this CPU), the
// same way the smax kernels do.
#pragma once

#include <cstddef>

namespace smax_bench {

float read_floor(const float* src, size_t n);
void read_write_floor(const float* src, float* dst, size_t n);
float exp_floor(const float* src, size_t n);  // n should fit L1 (e.g. 4096)
void stream_copy_floor(const float* src, float* dst, size_t n);
const char* floor_target();                   // Highway target name

}  // namespace smax_bench
