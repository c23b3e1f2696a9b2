// src/mpi/mpi_communicator.cc: smax::distributed::MpiCommunicator
// (include/smax/mpi.h states the contract). Library smax_mpi, built only
// when CMake finds MPI (SMAX_BUILD_MPI).
#include "smax/mpi.h"

#include <string>

#include "smax/error.h"

namespace smax::distributed {
namespace {

constexpr const char* kWho = "smax::distributed::MpiCommunicator";

std::string mpi_text(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) {
    return "MPI error code " + std::to_string(code);
  }
  return std::string(text, static_cast<size_t>(len));
}

void check(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  throw Error(Status::kInternal, std::string(kWho) + ": " + call + " failed: " + mpi_text(code));
}

// The datatype and count that describe `bytes` contiguous bytes: MPI_BYTE x
// bytes when it fits an int count (<= max_count), else one element of a
// derived type: q blocks of max_count bytes then r bytes. Frees the derived
// type on destruction.
class ByteType {
 public:
  ByteType(size_t bytes, size_t max_count) {
    if (bytes <= max_count) {
      count_ = static_cast<int>(bytes);
      return;
    }
    const size_t q = bytes / max_count;
    const size_t r = bytes % max_count;
    if (q > static_cast<size_t>(INT_MAX)) {
      throw Error(Status::kInvalidArgument,
                  std::string(kWho) + ": a message of " + std::to_string(bytes) +
                      " bytes is beyond what one MPI call can describe (" +
                      std::to_string(INT_MAX) + " blocks of " + std::to_string(max_count) +
                      " bytes)");
    }
    MPI_Datatype block = MPI_DATATYPE_NULL;
    check(MPI_Type_contiguous(static_cast<int>(max_count), MPI_BYTE, &block),
          "MPI_Type_contiguous");
    int rc = MPI_SUCCESS;
    if (r == 0) {
      rc = MPI_Type_contiguous(static_cast<int>(q), block, &type_);
    } else {
      int lengths[2] = {static_cast<int>(q), static_cast<int>(r)};
      MPI_Aint displacements[2] = {0, static_cast<MPI_Aint>(q * max_count)};
      MPI_Datatype types[2] = {block, MPI_BYTE};
      rc = MPI_Type_create_struct(2, lengths, displacements, types, &type_);
    }
    MPI_Type_free(&block);  // type_ keeps what it needs of it
    check(rc, "MPI_Type_create_struct");
    const int commit = MPI_Type_commit(&type_);
    if (commit != MPI_SUCCESS) {
      MPI_Type_free(&type_);
      check(commit, "MPI_Type_commit");
    }
    derived_ = true;
    count_ = 1;
  }
  ~ByteType() {
    if (derived_) MPI_Type_free(&type_);
  }
  ByteType(const ByteType&) = delete;
  ByteType& operator=(const ByteType&) = delete;

  MPI_Datatype type() const { return derived_ ? type_ : MPI_BYTE; }
  int count() const { return count_; }

 private:
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
  bool derived_ = false;
  int count_ = 0;
};

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, size_t max_count) : max_count_(max_count) {
  if (max_count < 1 || max_count > static_cast<size_t>(INT_MAX)) {
    throw Error(Status::kInvalidArgument, std::string(kWho) + ": max_count must be in [1, " +
                                              std::to_string(INT_MAX) + "], got " +
                                              std::to_string(max_count));
  }
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) {
    throw Error(Status::kInvalidArgument,
                std::string(kWho) + ": MPI is " + (finalized ? "finalised" : "not initialised") +
                    " (call MPI_Init first and MPI_Finalize after the communicator is gone)");
  }
  if (comm == MPI_COMM_NULL) {
    throw Error(Status::kInvalidArgument, std::string(kWho) + ": the communicator is MPI_COMM_NULL");
  }
  check(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup");
  const int rc = MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  if (rc != MPI_SUCCESS) {
    MPI_Comm_free(&comm_);
    check(rc, "MPI_Comm_set_errhandler");
  }
  int rank_rc = MPI_Comm_rank(comm_, &rank_);
  int size_rc = rank_rc == MPI_SUCCESS ? MPI_Comm_size(comm_, &size_) : rank_rc;
  if (size_rc != MPI_SUCCESS) {
    MPI_Comm_free(&comm_);
    check(size_rc, "MPI_Comm_rank / MPI_Comm_size");
  }
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiCommunicator::allgather(const void* send, void* recv, size_t bytes) {
  const ByteType t(bytes, max_count_);
  check(MPI_Allgather(send, t.count(), t.type(), recv, t.count(), t.type(), comm_),
        "MPI_Allgather");
}

void MpiCommunicator::alltoall(const void* send, void* recv, size_t bytes) {
  const ByteType t(bytes, max_count_);
  check(MPI_Alltoall(send, t.count(), t.type(), recv, t.count(), t.type(), comm_),
        "MPI_Alltoall");
}

}  // namespace smax::distributed
