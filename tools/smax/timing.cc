// tools/smax/timing.cc: wall-clock timing (contract in timing.h).
#include "timing.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

namespace smax_cli {
namespace {

// Quantile q in [0, 1] of sorted values, linear interpolation between ranks.
double quantile(const std::vector<double>& sorted, double q) {
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (pos - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

double time_batch(const std::function<void()>& fn, int64_t calls) {
  const double t0 = now_seconds();
  for (int64_t i = 0; i < calls; ++i) fn();
  return now_seconds() - t0;
}

}  // namespace

double now_seconds() {
  using Clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

Timing measure(const std::function<void()>& fn, const TimingConfig& config) {
  Timing timing;
  // 1. Warm-up (untimed): the cold first call must not end the calibration.
  // The fastest warm call (not the first) estimates the per-call time: one
  // preempted call must not disable batching.
  const double warm_start = now_seconds();
  double fastest = 0;
  while (true) {
    const double call = time_batch(fn, 1);
    ++timing.warmup_calls;
    if (timing.warmup_calls == 2 || (timing.warmup_calls > 2 && call < fastest)) fastest = call;
    if (timing.warmup_calls >= kWarmupCalls && now_seconds() - warm_start >= kWarmupSeconds) break;
    if (timing.warmup_calls == 1 && call >= kLongCallSeconds) {
      fastest = call;  // a long op: one warm-up call, no batching
      break;
    }
  }
  // 2. Calibration: nothing to do when a warm call lasts min_sample_s; else
  // a first guess from the fastest warm call, then double the batch until
  // one timed batch lasts min_sample_s.
  int64_t calls = 1;
  if (fastest < config.min_sample_s) {
    const double guess =
        fastest > 0 ? std::ceil(config.min_sample_s / fastest) : static_cast<double>(kMaxCallsPerSample);
    calls = static_cast<int64_t>(std::min(guess, static_cast<double>(kMaxCallsPerSample)));
    while (calls < kMaxCallsPerSample && time_batch(fn, calls) < config.min_sample_s) {
      calls = std::min(calls * 2, kMaxCallsPerSample);
    }
  }
  timing.calls_per_sample = calls;

  // 3. Sampling.
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
  timing.median_s = quantile(per_call, 0.5);
  timing.min_s = per_call.front();
  timing.max_s = per_call.back();
  timing.p10_s = quantile(per_call, 0.1);
  timing.p90_s = quantile(per_call, 0.9);
  return timing;
}

std::string format_timing(const Timing& t) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "%.4g ms median (min %.4g, max %.4g ms; spread %.1f%%%s) over %d samples of %lld "
                "call%s",
                t.median_s * 1e3, t.min_s * 1e3, t.max_s * 1e3, t.spread_pct(),
                t.noisy() ? " !" : "", t.samples, static_cast<long long>(t.calls_per_sample),
                t.calls_per_sample == 1 ? "" : "s");
  return buf;
}

}  // namespace smax_cli
