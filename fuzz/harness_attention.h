// fuzz/harness_attention.h: one fuzz input -> one checked call of
// smax::attention or smax::attention_backward (include/smax/attention.h),
// through the C++ API or the C ABI (smax_attention*).
//
// What one input decodes to (harness_attention.cc): forward or backward;
// B, Hkv, G (H = G Hkv), Lq, Lk (up to ~600 keys: more than one 512-key
// block), D, Dv (0..64); per-tensor layouts (row-major, the transposed
// [B, L, H, D] view, padded strides, a negative stride, a random dim
// permutation, a non-unit last-dim stride); the normaliser; causal; scale
// (NaN = default, finite, and invalid inf); softcap; a bool or f32 mask of
// any rank <= 4 broadcast to [B, H, Lq, Lk]; sinks; ALiBi slopes ([H] or
// [B, H]); lse; empty_row; threads 0..3; the normaliser parameters; the SIMD
// target cap; values (ordinary, NaN, +-inf, huge, denormal) in q / k / v /
// masks; and sometimes one deliberate corruption the contract rejects
// (shape mismatches, H % Hkv != 0, wrong rank or dtype, overflowing sizes,
// null data, an output aliasing an input or another output or itself, bad
// option values, sinks / lse with a non-softmax normaliser, a mask that does
// not broadcast).
//
// What is checked:
//  * a rejected call throws smax::Error (invalid argument; C ABI: the status
//    and smax_last_error()) whose message names the op, and no byte of any
//    operand buffer (guards included) changed;
//  * an accepted call writes nothing outside its outputs (guard regions and
//    padding gaps keep their sentinel), matches src/reference/attention
//    within the header's own bounds (NaN / +-inf exactly), and gives the same
//    bits with threads = 1. Rows whose f32 logits or P V sums may overflow
//    where float64 does not (|q.k|, |t| or |v| sums beyond ~1e30), and calls
//    with non-finite v (0 * NaN in SGEMM vs the oracle's skipped zero
//    weights), are checked for guards and determinism only.
// A violation prints the decoded case and aborts.
#pragma once

#include <cstddef>
#include <cstdint>

namespace smax_fuzz {

/// Decodes `data` and runs one checked attention call. Aborts on a violation.
void run_attention_one(const uint8_t* data, size_t size);

struct AttentionStats {
  long long runs = 0, accepted = 0, rejected = 0, grey = 0, unchecked_rows = 0, checked = 0;
  // Calls checked against the oracle with each option the harness draws
  // beyond the basics: a KV cache (contiguous / paged), a gate, SSMax's
  // per-head s, a unified max, Power-Softmax.
  long long kv_cache = 0, paged = 0, gate = 0, ssmax_scales = 0, unified_max = 0, power = 0;
};
const AttentionStats& attention_stats();

}  // namespace smax_fuzz
