// src/ops/distributed/group.h: what every vocabulary-parallel op
// (include/smax/distributed.h) does around its local work: the validation
// handshake, the shard layout, and the exchange of per-row records.
//
// The handshake (begin): the op validates its arguments locally inside
// `validate` (which throws smax::Error like any single-process op); then
// every rank allgathers one fixed-size Header: status (ok / rejected), the
// op's id, and up to kMaxAgreed named int64 values that must be equal on
// every rank (rows, option values as bit patterns, seed, k, ...) plus this
// rank's class count. Every rank then runs the same checks on the same
// headers, so either every rank proceeds or every rank throws:
//  * this rank's validate threw -> that error, rethrown;
//  * another rank's validate threw -> "<op> (vocab-parallel): rank k
//    rejected its arguments (see that rank's error)";
//  * a different op on some rank -> names the ranks and ops;
//  * an agreed value differs -> "<op> (vocab-parallel): ranks disagree on
//    <name>: rank 0 has A, rank k has B".
// The header also carries the chunk size in force (sharded_common.h), which
// decides how many collectives an op makes: ranks that disagree fail.
// The header has the same size whatever the op, so mismatched ops cannot
// make the allgather itself disagree on its byte count.
//
// Records: allgather_rows exchanges `fields` values per row (T = float or
// double) and returns them as [rank][row][field]; the caller merges them in
// rank order (the same on every rank: replicated, deterministic results).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "smax/distributed.h"

namespace smax::detail::dist {

using distributed::Communicator;

/// An int64 value every rank must agree on, with its name for the message.
struct Agreed {
  const char* name;
  int64_t value;
};
constexpr int kMaxAgreed = 32;

/// double / float option values as exact int64 bit patterns (for Agreed).
int64_t bits(double v);
int64_t bits(float v);

/// The group's view after a successful handshake.
struct Group {
  Communicator* comm = nullptr;
  int rank = 0;
  int size = 1;
  int64_t offset = 0;   ///< this rank's first global class
  int64_t classes = 0;  ///< this rank's class count
  int64_t vocab = 0;    ///< total classes
  std::vector<int64_t> offsets;  ///< size + 1 entries: rank k holds [offsets[k], offsets[k+1])
};

/// The handshake described at the top of this file. `op` is the public name
/// (e.g. "cross_entropy"); `local_classes` this rank's class count (only
/// read when validate succeeded). `agreed` is read AFTER `validate` has run,
/// so validate may fill in values it computes (e.g. a checksum of the
/// targets that the ranks must share); on a rejected rank it is sent as it
/// stands then, and ignored.
Group begin(Communicator& comm, const char* op, const std::vector<Agreed>& agreed,
            int64_t local_classes, const std::function<void()>& validate);

/// Every rank's `local` (rows * fields values, the same count on every rank)
/// in rank order: result[k * local.size() + i] is rank k's local[i].
template <class T>
std::vector<T> allgather_rows(const Group& g, const std::vector<T>& local);

/// Error message prefix of the vocabulary-parallel ops: "<op> (vocab-parallel)".
std::string op_name(const char* op);

}  // namespace smax::detail::dist
