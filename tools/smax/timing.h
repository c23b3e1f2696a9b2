// tools/smax/timing.h: wall-clock timing with std::chrono::steady_clock.
//
// A measurement warms up (one call, which also faults pages in), picks how
// many calls one sample batches so that a sample lasts >= min_sample_s
// (short rows would otherwise be dominated by the clock's own cost), then
// takes samples until `repeat` samples, or until min_time_s has passed with
// at least min_samples samples. It reports the median time per call, which
// shrugs off the odd preemption on a shared machine.
#pragma once

#include <cstdint>
#include <functional>

namespace smax_cli {

struct TimingConfig {
  int repeat = 0;              ///< > 0: exactly this many samples
  double min_time_s = 0.5;     ///< else: sample for at least this long
  int min_samples = 3;         ///< ... and at least this many samples
  int max_samples = 100000;    ///< ... and at most this many
  double min_sample_s = 20e-6; ///< batch calls so one sample lasts this long
};

struct Timing {
  double median_s = 0;       ///< median seconds per call
  double min_s = 0;          ///< fastest sample, seconds per call
  int samples = 0;
  int64_t calls_per_sample = 1;
};

/// Seconds on steady_clock since an arbitrary epoch.
double now_seconds();

/// Times `fn` as described above.
Timing measure(const std::function<void()>& fn, const TimingConfig& config);

}  // namespace smax_cli
