// smax/runtime.h: SIMD target selection, kernel names, the thread seam and
// the list of ops.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace smax {

// ---- SIMD targets ---------------------------------------------------------

/// Targets compiled into this build, best first ("AVX3", "AVX2", "SSE4",
/// "SSSE3", "SCALAR" on x86).
std::vector<std::string> compiled_targets();
/// Compiled targets this CPU can run (after any cap), best first.
std::vector<std::string> supported_targets();
/// The target kernels dispatch to now.
std::string active_target();
/// Cap the dispatched target: "avx3", "avx2", "sse4", "ssse3", "scalar"
/// (case-insensitive) or "" / "none" to lift the cap. Throws smax::Error for
/// an unknown name, or one not compiled in. Not thread-safe against calls in
/// flight: call it between calls.
/// The environment variable SMAX_MAX_TARGET is applied the same way by the
/// first call that dispatches (unless set_max_target ran first, which
/// replaces it); an unknown name there makes every such call throw
/// smax::Error naming the variable, rather than being ignored.
void set_max_target(std::string_view name);

/// Name of the kernel an op uses with `algorithm` on the active target, in the
/// grammar `<dtype>_<family>__<target>_<tags>`, e.g.
/// "f32_softmax_reload__avx2_rr2_p5_u4_acc2". `op` is an op of the softmax
/// group of op_list() ("softmax", "log_softmax", "logsumexp",
/// "softmax_backward", "log_softmax_backward") or "softmax_columns";
/// `algorithm` as accepted by parse_algorithm (for kAuto: the choice for a
/// row of `cols` elements).
std::string kernel_name(std::string_view op, std::string_view algorithm = "auto",
                        int64_t cols = 32000);

/// Whether large batched outputs are written with streaming (non-temporal)
/// stores on this host, decided for each kernel that can stream on its
/// own: "softmax=S, log_softmax=S, backward=S, cross_entropy=S", each S
/// "stream" or
/// "regular" once decided, "measuring" before (the first calls of that
/// kernel whose input + output exceed the last-level cache time both
/// kinds; the results are the same bits either way); "forced on" /
/// "forced off" when set_streaming_stores or the environment variable
/// SMAX_STREAM_STORES (on | off | auto, read once per process; other
/// values count as auto) sets it. docs/design.md, "Streaming stores".
std::string streaming_stores();
/// Sets the choice for this process: "on" (every call that can stream
/// does, whatever its size: f32 three-pass log_softmax rows of >= 128
/// elements, the backward's rows (batched or long) whose dx rows are
/// 64-byte aligned, and the f32 cross-entropy gradient of rows of
/// >= 128 class-index logits), "off", or "auto" (back to the measurement,
/// which starts over for every kernel). Replaces SMAX_STREAM_STORES. Throws smax::Error for
/// any other word. Call it between calls.
void set_streaming_stores(std::string_view mode);

// ---- the op list -------------------------------------------------------------

/// One public op, as smax/op_list.inc states it (the meaning of each field
/// is documented there). Strings are lower case: group "softmax",
/// "normalizers", "losses", "sampling", "attention" or "quantized"; kind "diff",
/// "nodiff", "backward" or "fused"; cli "run", "run_unchecked",
/// "run_inputs", "attention" or "none".
struct OpInfo {
  const char* name;
  const char* group;
  const char* kind;
  const char* cli;
};
/// Every public op, in smax/op_list.inc's order.
const std::vector<OpInfo>& op_list();
/// The op named `name`, or nullptr.
const OpInfo* find_op(std::string_view name);

// ---- threads ---------------------------------------------------------------

/// Default thread count: unless changed, the processors this process may
/// run on, counted at the first call (as OpenMP counts its default once).
int max_threads();
/// Change the default thread count used when options.threads == 0 (>= 1).
void set_max_threads(int threads);

/// A pool hook: run task(i) for every i in [0, n_tasks), using at most
/// `threads` threads, and return when all have finished. Tasks are
/// independent. smax's results do not depend on how tasks are scheduled.
using ParallelFor = std::function<void(int64_t n_tasks, int threads,
                                       const std::function<void(int64_t)>& task)>;
/// Install an application's pool (e.g. to share its threads); an empty
/// function restores the default (OpenMP).
void set_parallel_for(ParallelFor parallel_for);

}  // namespace smax
