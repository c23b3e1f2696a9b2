// smax/mpi.h: an MPI smax::distributed::Communicator, so the vocabulary-
// parallel ops of smax/distributed.h run over MPI. Library smax_mpi (CMake
// target smax::mpi, built when CMake finds MPI; option SMAX_BUILD_MPI); link
// it and MPI's C library (MPI::MPI_CXX does both).
//
//   MPI_Init(&argc, &argv);
//   smax::distributed::MpiCommunicator comm(MPI_COMM_WORLD);
//   smax::distributed::cross_entropy(comm, my_logit_shard, targets, loss);
//
// Contract
// * The caller owns `comm` and keeps MPI initialised while the
//   MpiCommunicator exists. The constructor is collective over `comm`: it
//   duplicates it (MPI_Comm_dup), so smax's messages never match the
//   caller's, and sets MPI_ERRORS_RETURN on the duplicate only (the caller's
//   communicator keeps its own error handler). The destructor frees the
//   duplicate (skipped when MPI is already finalised).
// * allgather is one MPI_Allgather of bytes, alltoall one MPI_Alltoall.
//   Counts beyond INT_MAX bytes go as one element of a derived datatype
//   (whole blocks of `max_count` bytes plus the remainder), so any size_t
//   count that MPI can address is sent; max_count is a parameter only so the
//   tests can exercise that path with small buffers.
// * Every MPI error (a failing call, a dead peer the MPI library reports)
//   throws smax::Error (Status::kInternal for a transport failure,
//   kInvalidArgument for a bad communicator) whose message names the MPI call
//   and MPI_Error_string's text. Errors are not made collective here: the
//   ops' handshake (smax/distributed.h) is what keeps bad arguments from
//   reaching MPI on one rank only.
// * Not thread-safe: one MpiCommunicator is used by one thread at a time,
//   as the ops use it (they call it from the calling thread). With several
//   threads calling MPI, MPI must be initialised with MPI_THREAD_MULTIPLE.
#pragma once

#include <mpi.h>

#include <climits>
#include <cstddef>

#include "smax/distributed.h"

namespace smax::distributed {

class MpiCommunicator final : public Communicator {
 public:
  /// Collective over `comm` (duplicates it). Throws smax::Error when MPI is
  /// not initialised, `comm` is MPI_COMM_NULL or an MPI call fails.
  explicit MpiCommunicator(MPI_Comm comm, size_t max_count = INT_MAX);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void allgather(const void* send, void* recv, size_t bytes) override;
  void alltoall(const void* send, void* recv, size_t bytes) override;

  /// smax's duplicate of the caller's communicator.
  MPI_Comm comm() const { return comm_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  size_t max_count_;
};

}  // namespace smax::distributed
