// fuzz/harness_ops.h: one fuzz input -> one checked call of a public op
// beyond the softmax family (normalisers, losses, samplers, Soft-NMS,
// linear cross-entropy).
//
// The ops are grouped into three libFuzzer targets, one per group of
// smax/op_list.inc (normalizers, losses, sampling: every op of the group, in
// the list's order, forward and backward); the first input byte picks the
// op of the group. A fourth target:
//  * options: the options the CLI table does not expose, the op called
//    directly and checked against its oracle with the same options:
//    entmax_bisect (+ backward) with a per-row alpha_tensor (and dalpha),
//    ssmax (+ backward) with per-row s_rows (and ds), sparse_softmax_loss
//    (+ backward) with force_target, cross_entropy (+ backward) with f32
//    probability targets, and cross_entropy's optional outputs (z_loss,
//    accuracy, lse, entropy, target_logprob). A group of its own, so that
//    the inputs of the other groups (corpora, regressions) decode as before.
// Most ops are driven through the CLI's op table (testing/op_table.h: how
// to call the op and its float64 oracle); the harness builds its own strided
// views, options, masks, parameters (valid and invalid), targets, class
// weights and reductions, and checks each result against the oracle within
// the bound that the op's header documents (not the table's uniform bound;
// see docs/reliability.md for the few places where the check is weaker).
//
// What is checked, as in harness.h:
//  * a call the contract rejects (bad axis / scale / temperature / threads /
//    empty_row, non-broadcastable masks, bad parameters, targets out of
//    range, wrong dtypes, corrupted views, outputs sharing an element with
//    an input they may not alias, ...) throws smax::Error (invalid argument)
//    naming the op, and no byte of any operand changed;
//  * a valid call succeeds, writes nothing outside its outputs, matches the
//    oracle (NaN / inf / required exact zeros exactly, finite values within
//    the documented bound) and gives the same bits with threads = 1;
//  * outputs whose address range overlaps an input without sharing an
//    element may be rejected (conservative overlap rule) or must be right.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace smax_fuzz {

enum class Group : int { kNormalizers, kLosses, kSampling, kOptions };

/// "normalizers", "losses", "sampling", "options" (the fuzz target is fuzz_<name>).
const char* group_name(Group group);
bool parse_group(const std::string& name, Group* group);

/// Decodes `data` and runs one checked call of an op of `group`. Aborts
/// with a description on a violation.
void run_group_one(Group group, const uint8_t* data, size_t size);

/// Counters since start (for the replay driver's summary).
struct GroupStats {
  long long runs = 0, accepted = 0, rejected = 0, grey = 0, skipped = 0, known_dot_gap = 0;
  long long known_open = 0;  ///< calls of known open findings / undefined cases, not checked
  long long nonfinite_dy_rows = 0;  ///< rows with +-inf / NaN dy whose values are not compared
  long long typed = 0;  ///< accepted calls with f64 / f16 / bf16 operands (harness_ops_dtypes.cc)
};
const GroupStats& group_stats();

}  // namespace smax_fuzz
