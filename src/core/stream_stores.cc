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
// for the process. Each StoreSite has its own samples and decision; the
// mode (auto, forced on, forced off) is one for the process.
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

enum Mode : int { kAuto, kForcedOn, kForcedOff };
enum Decision : int { kMeasuring, kDecidedStream, kDecidedRegular };

int env_mode() {
  const char* env = std::getenv("SMAX_STREAM_STORES");
  if (env == nullptr) return kAuto;
  if (std::strcmp(env, "on") == 0) return kForcedOn;
  if (std::strcmp(env, "off") == 0) return kForcedOff;
  // "auto", and any other value: the measured choice (a value that only
  // changes speed, never results, is not worth failing calls for).
  return kAuto;
}

std::atomic<int>& mode() {
  static std::atomic<int> value{env_mode()};
  return value;
}

struct Site {
  std::atomic<int> decision{kMeasuring};
  std::mutex mutex;  // guards the samples
  int count[2] = {0, 0};
  int64_t elements[2] = {0, 0};
  double seconds[2] = {0.0, 0.0};
  void Reset() {  // with mutex held
    count[0] = count[1] = 0;
    elements[0] = elements[1] = 0;
    seconds[0] = seconds[1] = 0.0;
    decision.store(kMeasuring, std::memory_order_relaxed);
  }
};

std::atomic<unsigned> measured_calls{0};

Site& site_of(StoreSite site) {
  static Site sites[kStoreSites];
  return sites[static_cast<int>(site)];
}

}  // namespace

const char* store_site_name(StoreSite site) noexcept {
  switch (site) {
    case StoreSite::kSoftmax:
      return "softmax";
    case StoreSite::kLogSoftmax:
      return "log_softmax";
    case StoreSite::kBackward:
      return "backward";
    case StoreSite::kCrossEntropy:
      return "cross_entropy";
  }
  return "?";
}

StoreChoice choose_stores(StoreSite site, int64_t footprint_bytes) noexcept {
  switch (mode().load(std::memory_order_relaxed)) {
    case kForcedOn:
      return StoreChoice::kStream;
    case kForcedOff:
      return StoreChoice::kRegular;
    default:
      break;
  }
  if (footprint_bytes <= last_level_cache_bytes()) return StoreChoice::kRegular;
  switch (site_of(site).decision.load(std::memory_order_relaxed)) {
    case kDecidedStream:
      return StoreChoice::kStream;
    case kDecidedRegular:
      return StoreChoice::kRegular;
    default:
      measured_calls.fetch_add(1, std::memory_order_relaxed);
      return StoreChoice::kMeasure;
  }
}

unsigned measured_call_id() noexcept { return measured_calls.load(std::memory_order_relaxed); }

void record_store_sample(StoreSite site, bool stream, int64_t elements, double seconds) noexcept {
  if (elements <= 0 || !(seconds > 0.0)) return;
  Site& s = site_of(site);
  std::lock_guard<std::mutex> lock(s.mutex);
  if (mode().load(std::memory_order_relaxed) != kAuto ||
      s.decision.load(std::memory_order_relaxed) != kMeasuring) {
    return;
  }
  const int k = stream ? 1 : 0;
  ++s.count[k];
  s.elements[k] += elements;
  s.seconds[k] += seconds;
  for (int j = 0; j < 2; ++j) {
    if (s.count[j] < kMinSamples || s.elements[j] < kMinElements) return;
  }
  const double regular = s.seconds[0] / static_cast<double>(s.elements[0]);
  const double streamed = s.seconds[1] / static_cast<double>(s.elements[1]);
  s.decision.store(streamed <= kMargin * regular ? kDecidedStream : kDecidedRegular,
                   std::memory_order_relaxed);
}

const char* store_site_state(StoreSite site) noexcept {
  switch (mode().load(std::memory_order_relaxed)) {
    case kForcedOn:
      return "forced on";
    case kForcedOff:
      return "forced off";
    default:
      break;
  }
  switch (site_of(site).decision.load(std::memory_order_relaxed)) {
    case kDecidedStream:
      return "stream";
    case kDecidedRegular:
      return "regular";
    default:
      return "measuring";
  }
}

}  // namespace smax::detail

std::string smax::streaming_stores() {
  using detail::StoreSite;
  const int m = detail::mode().load(std::memory_order_relaxed);
  if (m == detail::kForcedOn) return "forced on";
  if (m == detail::kForcedOff) return "forced off";
  std::string out;
  for (int k = 0; k < detail::kStoreSites; ++k) {
    const auto site = static_cast<StoreSite>(k);
    out += std::string(k ? ", " : "") + detail::store_site_name(site) + "=" +
           detail::store_site_state(site);
  }
  return out;
}

void smax::set_streaming_stores(std::string_view mode) {
  int value = 0;
  if (mode == "on") {
    value = detail::kForcedOn;
  } else if (mode == "off") {
    value = detail::kForcedOff;
  } else if (mode == "auto") {
    value = detail::kAuto;
  } else {
    throw Error(Status::kInvalidArgument, "set_streaming_stores: unknown mode '" +
                                              std::string(mode) + "' (on, off or auto)");
  }
  for (int k = 0; k < detail::kStoreSites; ++k) {
    detail::Site& s = detail::site_of(static_cast<detail::StoreSite>(k));
    std::lock_guard<std::mutex> lock(s.mutex);
    s.Reset();
  }
  detail::mode().store(value, std::memory_order_relaxed);
}
