// tools/smax/fma_peak.cc: this core's measured peak rate of f32 FMAs
// (cpu.h, fma_peak_gflops), the compute floor `smax attention --floor`
// reports beside a call's FLOP rate.
//
// Method: 12 independent accumulators (more than FMA latency x FMA ports on
// current x86 cores), each updated by MulAdd in a loop the compiler cannot
// shorten (the result is returned); the best of a few timed runs, on the
// widest SIMD target the CPU supports (Highway's dynamic dispatch).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "fma_peak.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <chrono>

#include "cpu.h"

HWY_BEFORE_NAMESPACE();
namespace smax_cli::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Runs `steps` steps of 12 vector FMAs; returns (a lane sum, lanes).
double FmaLoopImpl(int64_t steps, float seed, int64_t* lanes) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  const V m = hn::Set(d, 0.999999f), a = hn::Set(d, seed);
  V acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = hn::Set(d, seed + static_cast<float>(i));
  for (int64_t s = 0; s < steps; ++s) {
    for (int i = 0; i < 12; ++i) acc[i] = hn::MulAdd(acc[i], m, a);
  }
  V sum = acc[0];
  for (int i = 1; i < 12; ++i) sum = hn::Add(sum, acc[i]);
  *lanes = static_cast<int64_t>(hn::Lanes(d));
  return static_cast<double>(hn::GetLane(hn::SumOfLanes(d, sum)));
}

}  // namespace smax_cli::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace smax_cli {

HWY_EXPORT(FmaLoopImpl);

double fma_peak_gflops() {
  const int64_t steps = 20000000;
  double best = 0.0, sink = 0.0;
  for (int run = 0; run < 3; ++run) {
    int64_t lanes = 0;
    const auto t0 = std::chrono::steady_clock::now();
    sink += HWY_DYNAMIC_DISPATCH(FmaLoopImpl)(steps, 1e-3f * static_cast<float>(run + 1), &lanes);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0) best = std::max(best, 2.0 * 12.0 * static_cast<double>(lanes * steps) / s * 1e-9);
  }
  // The accumulated value is data the compiler cannot drop; it is finite.
  return sink == sink ? best : best;
}

}  // namespace smax_cli
#endif  // HWY_ONCE
