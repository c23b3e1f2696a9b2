// testing/thread_communicator.h: an in-process smax::distributed::Communicator
// whose ranks are threads of one process, for the tests and benchmarks of the
// vocabulary-parallel ops (include/smax/distributed.h) without MPI.
//
// run_ranks(P, fn) starts P threads, calls fn(comm, rank) on each with a
// Communicator of size P, joins them, and returns each rank's exception (null
// when fn returned). Collectives are blocking and must be called by every
// rank in the same order, like MPI's; each one is two barriers (publish,
// copy) around shared buffers, so any number of collectives may follow each
// other. Stricter than MPI, so the tests catch what would hang or corrupt
// memory there: every rank checks that all called the same collective with
// the same byte count (else every rank throws std::logic_error naming both),
// and a rank that leaves fn (returned or threw) releases the others: a rank
// then waiting in a collective throws instead of hanging.
#pragma once

#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "smax/distributed.h"

namespace smax::testing {

std::vector<std::exception_ptr> run_ranks(
    int ranks, const std::function<void(distributed::Communicator& comm, int rank)>& fn);

/// What a rank's exception says: "" for none, what() of an smax::Error,
/// "not an smax::Error: <what()>" for another std::exception and "not an
/// smax::Error" for anything else (the tests match on these).
std::string message_of(const std::exception_ptr& e);

}  // namespace smax::testing
