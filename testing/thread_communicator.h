// testing/thread_communicator.h: an in-process smax::distributed::Communicator
// whose ranks are threads of one process, for the tests and benchmarks of the
// vocabulary-parallel ops (include/smax/distributed.h) without MPI.
//
// run_ranks(P, fn) starts P threads, calls fn(comm, rank) on each with a
// Communicator of size P, joins them, and returns each rank's exception (null
// when fn returned). Collectives are blocking and must be called by every
// rank in the same order, like MPI's; each one is two barriers (publish,
// copy) around shared buffers, so any number of collectives may follow each
// other. A rank that exits early (exception) while others wait in a
// collective would deadlock them, as it would under MPI: that is exactly
// what the ops' handshake must prevent, and a test of it needs no timeout
// when the ops are right (the CTest TIMEOUT is the backstop).
#pragma once

#include <exception>
#include <functional>
#include <vector>

#include "smax/distributed.h"

namespace smax::testing {

std::vector<std::exception_ptr> run_ranks(
    int ranks, const std::function<void(distributed::Communicator& comm, int rank)>& fn);

}  // namespace smax::testing
