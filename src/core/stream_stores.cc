// src/core/stream_stores.cc: the run-time choice of streaming stores
// (stream_stores.h).
//
// The measurement: the first calls whose footprint (input + output) exceeds
// the last-level cache are samples. Each runs half of every task's rows with
// streaming stores and half without (which half first alternates), timed;
// the work and the results are the call's own, so measuring costs nothing
// beyond the slower half. Once kMinSamples samples of each kind covering
// kMinElements elements each are in, the kind with the lower time per
// element wins, streaming only by a margin (kMargin): where the two are
// within noise the regular stores, which keep the output in cache for a
// caller that reads it back, are the safer choice. The decision then holds
// for the process.
#include "core/stream_stores.h"

#include "smax/error.h"
#include "smax/runtime.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>

namespace smax::detail {
namespace {

constexpr int kMinSamples = 6;
constexpr int64_t kMinElements = int64_t{1} << 23;
constexpr double kMargin = 0.97;  // stream must take <= 97% of the regular time

enum State : int { kMeasuring, kDecidedStream, kDecidedRegular, kForcedOn, kForcedOff };

int env_state() {
  const char* env = std::getenv("SMAX_STREAM_STORES");
  if (env == nullptr) return kMeasuring;
  if (std::strcmp(env, "on") == 0) return kForcedOn;
  if (std::strcmp(env, "off") == 0) return kForcedOff;
  // "auto", and any other value: the measured choice (a value that only
  // changes speed, never results, is not worth failing calls for).
  return kMeasuring;
}

std::atomic<int>& state() {
  static std::atomic<int> value{env_state()};
  return value;
}

struct Samples {
  std::mutex mutex;
  int count[2] = {0, 0};
  int64_t elements[2] = {0, 0};
  double seconds[2] = {0.0, 0.0};
  void Reset() {
    count[0] = count[1] = 0;
    elements[0] = elements[1] = 0;
    seconds[0] = seconds[1] = 0.0;
  }
};

Samples& samples() {
  static Samples s;
  return s;
}

}  // namespace

StoreChoice choose_stores(int64_t footprint_bytes) noexcept {
  switch (state().load(std::memory_order_relaxed)) {
    case kForcedOn:
      return StoreChoice::kStream;
    case kForcedOff:
    case kDecidedRegular:
      return StoreChoice::kRegular;
    case kDecidedStream:
      return footprint_bytes > last_level_cache_bytes() ? StoreChoice::kStream
                                                         : StoreChoice::kRegular;
    default:
      return footprint_bytes > last_level_cache_bytes() ? StoreChoice::kMeasure
                                                         : StoreChoice::kRegular;
  }
}

void record_store_sample(bool stream, int64_t elements, double seconds) noexcept {
  if (elements <= 0 || !(seconds > 0.0)) return;
  Samples& s = samples();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (state().load(std::memory_order_relaxed) != kMeasuring) return;
  const int k = stream ? 1 : 0;
  ++s.count[k];
  s.elements[k] += elements;
  s.seconds[k] += seconds;
  for (int j = 0; j < 2; ++j) {
    if (s.count[j] < kMinSamples || s.elements[j] < kMinElements) return;
  }
  const double regular = s.seconds[0] / static_cast<double>(s.elements[0]);
  const double streamed = s.seconds[1] / static_cast<double>(s.elements[1]);
  state().store(streamed <= kMargin * regular ? kDecidedStream : kDecidedRegular,
                std::memory_order_relaxed);
}

const char* store_choice_state() noexcept {
  switch (state().load(std::memory_order_relaxed)) {
    case kDecidedStream:
      return "stream";
    case kDecidedRegular:
      return "regular";
    case kForcedOn:
      return "forced on";
    case kForcedOff:
      return "forced off";
    default:
      return "measuring";
  }
}

}  // namespace smax::detail

std::string smax::streaming_stores() { return detail::store_choice_state(); }

void smax::set_streaming_stores(std::string_view mode) {
  int value = 0;
  if (mode == "on") {
    value = detail::kForcedOn;
  } else if (mode == "off") {
    value = detail::kForcedOff;
  } else if (mode == "auto") {
    value = detail::kMeasuring;
  } else {
    throw Error(Status::kInvalidArgument, "set_streaming_stores: unknown mode '" +
                                              std::string(mode) + "' (on, off or auto)");
  }
  detail::Samples& s = detail::samples();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.Reset();
  detail::state().store(value, std::memory_order_relaxed);
}
