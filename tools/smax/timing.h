// tools/smax/timing.h: wall-clock timing with std::chrono::steady_clock.
//
// A measurement has three phases:
//  1. warm-up: calls `fn` until at least kWarmupCalls calls and at least
//     kWarmupSeconds have passed (the first, cold call faults pages in and
//     wakes threads; none of these calls is timed); a first call that lasts
//     kLongCallSeconds or more is the whole warm-up (such an op needs no
//     batching, and a second untimed call would only cost time);
//  2. calibration: picks how many calls one sample batches
//     (calls_per_sample) so that a sample lasts >= min_sample_s: short ops
//     would otherwise be dominated by the clock's own cost. It starts from
//     the warm per-call time and doubles the batch until a timed batch lasts
//     long enough (these batches are not counted either);
//  3. sampling: takes samples of calls_per_sample calls until `repeat`
//     samples, or until min_time_s has passed with at least min_samples.
// It reports the median time per call (which shrugs off the odd preemption
// on a shared machine), the min and max, and the p10 / p90 quantiles over
// samples; spread_pct() is (p90 - p10) / median in percent.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace smax_cli {

struct TimingConfig {
  int repeat = 0;              ///< > 0: exactly this many samples
  double min_time_s = 0.5;     ///< else: sample for at least this long
  int min_samples = 3;         ///< ... and at least this many samples
  int max_samples = 100000;    ///< ... and at most this many
  double min_sample_s = 20e-6; ///< batch calls so one sample lasts this long
};

/// Warm-up: at least this many untimed calls, lasting at least kWarmupSeconds.
inline constexpr int kWarmupCalls = 2;
static_assert(kWarmupCalls >= 2, "the per-call estimate skips the first (cold) call");
inline constexpr double kLongCallSeconds = 0.1;
inline constexpr double kWarmupSeconds = 1e-3;
/// Upper bound of calls_per_sample.
inline constexpr int64_t kMaxCallsPerSample = int64_t{1} << 20;
/// `smax compare` / `smax run` flag a measurement whose spread_pct() is above this.
inline constexpr double kNoisySpreadPct = 10.0;

struct Timing {
  double median_s = 0;       ///< median seconds per call
  double min_s = 0;          ///< fastest sample, seconds per call
  double max_s = 0;          ///< slowest sample, seconds per call
  double p10_s = 0;          ///< 10th percentile of the samples (linear interpolation)
  double p90_s = 0;          ///< 90th percentile
  int samples = 0;
  int warmup_calls = 0;      ///< untimed calls of the warm-up phase
  int64_t calls_per_sample = 1;
  /// (p90 - p10) / median * 100: the run-to-run spread of this measurement.
  double spread_pct() const { return median_s > 0 ? (p90_s - p10_s) / median_s * 100.0 : 0.0; }
  bool noisy() const { return spread_pct() > kNoisySpreadPct; }
};

/// Seconds on steady_clock since an arbitrary epoch.
double now_seconds();

/// Times `fn` as described above.
Timing measure(const std::function<void()>& fn, const TimingConfig& config);

/// "0.0123 ms median (min 0.012, max 0.0131 ms; spread 4.1%) over 25 samples
/// of 64 calls", with " !" after the spread when the measurement is noisy().
std::string format_timing(const Timing& t);

}  // namespace smax_cli
