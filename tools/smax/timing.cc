// tools/smax/timing.cc: wall-clock timing.
#include "timing.h"

#include <algorithm>
#include <chrono>
#include <vector>

namespace smax_cli {

double now_seconds() {
  using Clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

Timing measure(const std::function<void()>& fn, const TimingConfig& config) {
  Timing timing;
  // Warm-up and calibration: double the batch until it lasts min_sample_s.
  int64_t calls = 1;
  while (true) {
    const double t0 = now_seconds();
    for (int64_t i = 0; i < calls; ++i) fn();
    const double elapsed = now_seconds() - t0;
    if (elapsed >= config.min_sample_s || calls >= (int64_t{1} << 20)) break;
    calls *= 2;
  }
  timing.calls_per_sample = calls;

  std::vector<double> per_call;
  const double start = now_seconds();
  while (true) {
    const double t0 = now_seconds();
    for (int64_t i = 0; i < calls; ++i) fn();
    const double t1 = now_seconds();
    per_call.push_back((t1 - t0) / static_cast<double>(calls));
    const int n = static_cast<int>(per_call.size());
    if (config.repeat > 0) {
      if (n >= config.repeat) break;
    } else if ((n >= config.min_samples && t1 - start >= config.min_time_s) ||
               n >= config.max_samples) {
      break;
    }
  }
  timing.samples = static_cast<int>(per_call.size());
  std::sort(per_call.begin(), per_call.end());
  const size_t n = per_call.size();
  timing.median_s = n % 2 == 1 ? per_call[n / 2] : 0.5 * (per_call[n / 2 - 1] + per_call[n / 2]);
  timing.min_s = per_call.front();
  return timing;
}

}  // namespace smax_cli
