// src/core/stream_stores.h: whether softmax (three-pass reload, f32, batched
// rows), log_softmax (three-pass, f32, rows mode), the softmax / log_softmax
// backward (batched and long rows) and the cross-entropy gradient (class-index
// or probability targets) write their outputs with
// streaming (non-temporal) stores (kernels.h, Rows::stream_stores,
// BackwardRows::stream_stores, log_store_segment; kernels/cross_entropy.h,
// XentGrad::stream, through Rowwise::set_stores).
//
// Each of those sites (StoreSite) is decided on its own: on the Zen 4 VM
// log_softmax and the backward gain 10-25% from streaming while the
// cross-entropy gradient loses 12% (its stores follow a compute-bound scan
// that overlaps the regular stores' write-backs; docs/design.md, "Streaming
// stores"), so one process-wide answer would be wrong for one of them.
//
// Why: a row that fits L2 is read from DRAM once and its output written
// once; with regular stores the write first reads the destination line
// (read-for-ownership), so the op moves three streams, not two. Streaming
// stores skip that read, but they also skip the cache: a caller that reads
// the output right back from the last-level cache then pays a DRAM read.
// So they are used only for calls whose footprint (inputs + output)
// exceeds the last-level cache, and
// only where this host gains from them: the choice is made at run time, by
// timing the first large calls both ways (see stream_stores.cc). Results are
// the same bits either way.
//
// SMAX_STREAM_STORES=on|off|auto (read once per process; any other value
// counts as auto) forces the choice (on: every call that can stream does,
// whatever its size; for tests and benchmarks) or leaves it to the
// measurement (auto, the default);
// smax::set_streaming_stores (smax/runtime.h) replaces it.
#pragma once

#include <chrono>
#include <cstdint>

namespace smax::detail {

/// How a call should store: kRegular, kStream, or kMeasure (this call is
/// one of the timed samples: the caller alternates both kinds over its rows
/// and reports each through record_store_sample).
enum class StoreChoice { kRegular, kStream, kMeasure };

/// The kernels that can stream, each measured and decided on its own.
enum class StoreSite : int {
  kSoftmax = 0,       ///< reload softmax's scale pass from a scratch row (batched rows)
  kLogSoftmax = 1,    ///< three-pass log_softmax's log pass (rows and long rows)
  kBackward = 2,      ///< softmax_backward / log_softmax_backward rows (batched, segments)
  kCrossEntropy = 3,  ///< the cross-entropy gradient (fused or backward)
};
inline constexpr int kStoreSites = 4;
/// "softmax", "log_softmax", "backward", "cross_entropy".
const char* store_site_name(StoreSite site) noexcept;

/// The choice for a call of `site` whose operands span `footprint_bytes` in
/// all. Callers ask only for calls whose rows can stream (see
/// kStreamMinCols and the ops' conditions), so that a measured "streaming"
/// sample streams.
StoreChoice choose_stores(StoreSite site, int64_t footprint_bytes) noexcept;

/// Rows of at least this many elements reach an aligned vector with the
/// passes' peel on every target (pass-inl.h, kPeelMinVectors = 8 vectors;
/// AVX3: 16 lanes), which a streamed log pass needs.
inline constexpr int64_t kStreamMinCols = 128;

/// Bytes to which an output's rows must all be aligned where a kernel
/// streams without a peel (the backward sweep): the widest vector.
inline constexpr int64_t kStreamAlignBytes = 64;

/// One timed sample of `site`'s measurement: `elements` written in
/// `seconds` with streaming stores or not. Thread-safe; the site's decision
/// is taken once enough samples of both kinds are in.
void record_store_sample(StoreSite site, bool stream, int64_t elements, double seconds) noexcept;

/// The number of calls choose_stores has told to measure, of any site.
/// run_with_stores starts each call's samples on a thread with the kind this
/// number's parity gives, then alternates: the first sample of a call pays
/// for what ran before it (e.g. the write-back of another op's dirty
/// output), and a per-thread alternation alone gives that sample the same
/// kind in every call whenever a thread runs an even number of samples per
/// call (seen: softmax decided "regular" when interleaved with oneDNN,
/// "stream" alone), while a parity XOR alone does so for an odd number.
unsigned measured_call_id() noexcept;

/// `site`'s decision so far: "stream", "regular", "measuring", or
/// "forced on" / "forced off" (SMAX_STREAM_STORES, set_streaming_stores).
const char* store_site_state(StoreSite site) noexcept;

/// Runs `count` rows of `cols` elements as kernel(first, rows, stream) as
/// `choice` says: all with or without streaming stores, or (kMeasure) in
/// two timed halves, one each way, reported to record_store_sample; which
/// half streams alternates per task on each thread and per measured call
/// (measured_call_id), so neither kind always runs first.
/// A single row (count == 1: a long row) is one timed sample of the kind
/// whose turn it is on this thread.
template <typename Kernel>
void run_with_stores(StoreSite site, StoreChoice choice, int64_t count, int64_t cols,
                     Kernel&& kernel) {
  thread_local bool toggle = false;
  thread_local unsigned last_call = 0;
  auto next_kind = [&] {
    const unsigned call = measured_call_id();
    toggle = call != last_call ? (call & 1u) != 0 : !toggle;
    last_call = call;
    return toggle;
  };
  if (choice == StoreChoice::kMeasure && count == 1) {
    // One row (a long row): one timed sample, the kind alternating per row
    // and per call.
    const bool stream = next_kind();
    const auto start = std::chrono::steady_clock::now();
    kernel(int64_t{0}, count, stream);
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    record_store_sample(site, stream, cols, took.count());
    return;
  }
  if (choice != StoreChoice::kMeasure || count < 2) {
    kernel(int64_t{0}, count, choice == StoreChoice::kStream);
    return;
  }
  const bool stream_first = next_kind();
  const int64_t half = count / 2;
  const int64_t first[2] = {0, half}, rows[2] = {half, count - half};
  for (int k = 0; k < 2; ++k) {
    const bool stream = (k == 0) == stream_first;
    const auto start = std::chrono::steady_clock::now();
    kernel(first[k], rows[k], stream);
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    record_store_sample(site, stream, rows[k] * cols, took.count());
  }
}

/// Last-level cache size in bytes (sysfs first; auto_algorithm.cc).
int64_t last_level_cache_bytes();

}  // namespace smax::detail
