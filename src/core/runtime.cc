// src/core/runtime.cc: SIMD target selection and the thread seam.
#include "smax/runtime.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <mutex>
#include <string>

#include <hwy/targets.h>

#include "kernels/kernels.h"
#include "core/internal.h"
#include "smax/error.h"
#include "smax/options.h"

namespace smax {
namespace {

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Compiled targets, best first (Highway: a lower bit is a better target).
std::vector<int64_t> compiled_target_bits() {
  std::vector<int64_t> bits;
  for (int64_t targets = HWY_TARGETS; targets != 0; targets &= targets - 1) {
    bits.push_back(targets & -targets);
  }
  return bits;
}

// Re-points Highway's dispatch at the best target that SupportedTargets()
// allows. Needed because, in Highway 1.0.3, querying SupportedTargets() can
// reset the dispatch to every target the CPU has, escaping our cap.
void sync_dispatch() { hwy::GetChosenTarget().Update(hwy::SupportedTargets()); }

// `who` names the caller in the error: "set_max_target" or the variable.
void apply_cap(std::string_view name, const std::string& who) {
  const std::string wanted = lower(name);
  if (wanted.empty() || wanted == "none") {
    hwy::DisableTargets(0);
    sync_dispatch();
    return;
  }
  for (int64_t bit : compiled_target_bits()) {
    if (lower(hwy::TargetName(bit)) == wanted) {
      // Disable every compiled target better than the cap (lower bits).
      hwy::DisableTargets(HWY_TARGETS & (bit - 1));
      sync_dispatch();
      return;
    }
  }
  std::string known;
  for (int64_t bit : compiled_target_bits()) {
    known += (known.empty() ? "" : ", ") + lower(hwy::TargetName(bit));
  }
  throw Error(Status::kInvalidArgument, who + ": unknown or not compiled target '" +
                                            std::string(name) + "' (compiled: " + known +
                                            ", or none)");
}

// SMAX_MAX_TARGET is applied once, on the first call that dispatches, unless
// set_max_target ran first (an explicit cap replaces the variable).
std::mutex g_env_mutex;
std::atomic<bool> g_env_applied{false};

}  // namespace

void detail::ensure_runtime_initialized() {
  if (g_env_applied.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(g_env_mutex);
  if (g_env_applied.load(std::memory_order_relaxed)) return;
  // An unknown name throws, as set_max_target does, and the variable stays
  // unapplied: every later call fails with the same message rather than
  // running silently on a target the user did not ask for.
  if (const char* env = std::getenv("SMAX_MAX_TARGET")) apply_cap(env, "SMAX_MAX_TARGET");
  g_env_applied.store(true, std::memory_order_release);
}

std::vector<std::string> compiled_targets() {
  std::vector<std::string> names;
  for (int64_t bit : compiled_target_bits()) names.push_back(hwy::TargetName(bit));
  return names;
}

std::vector<std::string> supported_targets() {
  detail::ensure_runtime_initialized();
  std::vector<std::string> names;
  for (int64_t bit : hwy::SupportedAndGeneratedTargets()) names.push_back(hwy::TargetName(bit));
  sync_dispatch();
  return names;
}

std::string active_target() {
  detail::ensure_runtime_initialized();
  const int64_t usable = hwy::SupportedTargets() & HWY_TARGETS;
  sync_dispatch();
  return usable ? hwy::TargetName(usable & -usable) : "none";
}

void set_max_target(std::string_view name) {
  std::lock_guard<std::mutex> lock(g_env_mutex);
  apply_cap(name, "set_max_target");
  g_env_applied.store(true, std::memory_order_release);
}

std::string kernel_name(std::string_view op, std::string_view algorithm, int64_t cols) {
  detail::ensure_runtime_initialized();
  // The softmax group of the op list (smax/op_list.inc), plus the column kernel.
  const OpInfo* info = find_op(op);
  const bool softmax_group = info != nullptr && std::string_view(info->group) == "softmax";
  if (!softmax_group && op != "softmax_columns") {
    std::string known;
    for (const OpInfo& o : op_list()) {
      if (std::string_view(o.group) == "softmax") known += std::string(o.name) + ", ";
    }
    throw Error(Status::kInvalidArgument, "kernel_name: unknown op '" + std::string(op) +
                                              "' (expected one of: " + known +
                                              "softmax_columns)");
  }
  if (cols < 0) {
    throw Error(Status::kInvalidArgument,
                "kernel_name: cols must be >= 0, got " + std::to_string(cols));
  }
  Algorithm algo = parse_algorithm(algorithm);
  if (algo == Algorithm::kAuto) algo = detail::choose_algorithm(std::string(op), cols);
  return kernels::kernel_name(std::string(op), algo);
}

// ---- threads -------------------------------------------------------------------

namespace {
std::atomic<int> g_max_threads{0};
std::mutex g_pool_mutex;
ParallelFor g_parallel_for;  // empty = OpenMP

// The processors this process may run on, counted once: omp_get_num_procs()
// asks the kernel for the affinity mask every time (a system call, ~0.4 us
// per op call on the development VM, more than a 1024-element softmax), and
// OpenMP fixes its own default thread count once at start-up too.
int processor_count() {
  static const int count = std::max(1, omp_get_num_procs());
  return count;
}
}  // namespace

int max_threads() {
  const int threads = g_max_threads.load(std::memory_order_relaxed);
  return threads > 0 ? threads : processor_count();
}

void set_max_threads(int threads) {
  if (threads < 1) {
    throw Error(Status::kInvalidArgument,
                "set_max_threads: threads must be >= 1, got " + std::to_string(threads));
  }
  g_max_threads.store(threads, std::memory_order_relaxed);
}

void set_parallel_for(ParallelFor parallel_for) {
  std::lock_guard<std::mutex> lock(g_pool_mutex);
  g_parallel_for = std::move(parallel_for);
}

namespace detail {

void run_parallel(int64_t n_tasks, int threads, const std::function<void(int64_t)>& task) {
  if (n_tasks <= 0) return;
  threads = static_cast<int>(std::min<int64_t>(std::max(threads, 1), n_tasks));
  if (threads == 1) {
    for (int64_t i = 0; i < n_tasks; ++i) task(i);
    return;
  }
  ParallelFor pool;
  {
    std::lock_guard<std::mutex> lock(g_pool_mutex);
    pool = g_parallel_for;
  }
  if (pool) {
    pool(n_tasks, threads, task);
    return;
  }
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t i = 0; i < n_tasks; ++i) task(i);
}

}  // namespace detail
}  // namespace smax
