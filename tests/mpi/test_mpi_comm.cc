// tests/mpi/test_mpi_comm.cc: smax::distributed::MpiCommunicator
// (include/smax/mpi.h) itself: allgather / alltoall in rank order, empty
// messages, the derived-datatype path of counts beyond max_count, its errors,
// and shard_layout over MPI (uneven and empty shards).
#include <cstdint>
#include <numeric>
#include <vector>

#include "mpi_test_util.h"
#include "smax/distributed.h"

namespace {

using namespace smax_mpi_test;
using smax::distributed::MpiCommunicator;

// Bytes that depend on (rank, index): a message's origin shows in its bytes.
std::vector<unsigned char> pattern(int from, int to, size_t bytes) {
  std::vector<unsigned char> v(bytes);
  for (size_t i = 0; i < bytes; ++i) v[i] = static_cast<unsigned char>(31 * from + 7 * to + i);
  return v;
}

void check_allgather(MpiCommunicator& comm, size_t bytes) {
  const auto mine = pattern(comm.rank(), 0, bytes);
  std::vector<unsigned char> all(bytes * comm.size() + 1, 0xAB);  // + a guard byte
  comm.allgather(mine.data(), all.data(), bytes);
  for (int k = 0; k < comm.size(); ++k) {
    const auto want = pattern(k, 0, bytes);
    EXPECT_TRUE(std::equal(want.begin(), want.end(), all.begin() + k * bytes))
        << "allgather of " << bytes << " bytes: rank " << k << "'s block";
  }
  EXPECT_EQ(all.back(), 0xAB) << "allgather wrote past size() * bytes";
}

void check_alltoall(MpiCommunicator& comm, size_t bytes) {
  std::vector<unsigned char> send;
  for (int j = 0; j < comm.size(); ++j) {
    const auto block = pattern(comm.rank(), j, bytes);
    send.insert(send.end(), block.begin(), block.end());
  }
  std::vector<unsigned char> recv(bytes * comm.size() + 1, 0xCD);
  comm.alltoall(send.data(), recv.data(), bytes);
  for (int j = 0; j < comm.size(); ++j) {
    const auto want = pattern(j, comm.rank(), bytes);
    EXPECT_TRUE(std::equal(want.begin(), want.end(), recv.begin() + j * bytes))
        << "alltoall of " << bytes << " bytes: the block from rank " << j;
  }
  EXPECT_EQ(recv.back(), 0xCD) << "alltoall wrote past size() * bytes";
}

TEST(MpiCommunicator, RankAndSizeAreTheWorlds) {
  int r = -1, p = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  EXPECT_EQ(world().rank(), r);
  EXPECT_EQ(world().size(), p);
  EXPECT_NE(world().comm(), MPI_COMM_WORLD);  // smax's own duplicate
}

TEST(MpiCommunicator, AllgatherPutsRankKAtBlockK) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{8}, size_t{1000}, size_t{1} << 16}) {
    check_allgather(world(), bytes);
  }
}

TEST(MpiCommunicator, AlltoallDeliversBlockJToRankJ) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{24}, size_t{4099}}) check_alltoall(world(), bytes);
}

// Counts above max_count go as one element of a derived datatype (blocks of
// max_count bytes plus the remainder): with max_count = 7, 30 bytes are 4
// blocks + 2 bytes, 28 bytes 4 whole blocks. The same code serves counts
// beyond INT_MAX with the default max_count.
TEST(MpiCommunicator, CountsBeyondMaxCountUseADerivedType) {
  MpiCommunicator small(MPI_COMM_WORLD, 7);
  for (size_t bytes : {size_t{7}, size_t{8}, size_t{28}, size_t{30}, size_t{100003}}) {
    check_allgather(small, bytes);
    check_alltoall(small, bytes);
  }
}

TEST(MpiCommunicator, ConstructionErrorsAreSmaxErrors) {
  EXPECT_EQ(error_of([] { MpiCommunicator c(MPI_COMM_NULL); }),
            "smax::distributed::MpiCommunicator: the communicator is MPI_COMM_NULL");
  EXPECT_EQ(error_of([] { MpiCommunicator c(MPI_COMM_WORLD, 0); }),
            "smax::distributed::MpiCommunicator: max_count must be in [1, 2147483647], got 0");
}

TEST(MpiCommunicator, CommunicatorsOnASubgroup) {
  // Even and odd world ranks in two communicators: each is its own group.
  MPI_Comm half;
  MPI_Comm_split(MPI_COMM_WORLD, world().rank() % 2, world().rank(), &half);
  {
    MpiCommunicator comm(half);
    EXPECT_EQ(comm.size(), (world().size() + 1 - world().rank() % 2) / 2);
    EXPECT_EQ(comm.rank(), world().rank() / 2);
    check_allgather(comm, 12);
    check_alltoall(comm, 5);
  }
  MPI_Comm_free(&half);
}

TEST(MpiShardLayout, TilesTheClassesInRankOrder) {
  for (Split split : {Split::kEven, Split::kUneven, Split::kEmptyOne}) {
    for (int64_t v : {int64_t{1}, int64_t{2}, int64_t{17}, int64_t{128256}}) {
      const auto sizes = shard_sizes(v, ranks(), split);
      const Shard s = my_shard(sizes);
      const auto layout = smax::distributed::shard_layout(world(), s.n);
      EXPECT_EQ(layout.offset, s.offset) << split_name(split) << ", V = " << v;
      EXPECT_EQ(layout.classes, s.n);
      EXPECT_EQ(layout.vocab, v);
    }
  }
}

TEST(MpiShardLayout, NegativeClassCountFailsEveryRank) {
  const std::string e =
      error_of([] { smax::distributed::shard_layout(world(), rank() == ranks() - 1 ? -3 : 4); });
  EXPECT_NE(e, "") << "rank " << rank() << " did not throw";
  EXPECT_EQ(e.find("not an smax::Error"), std::string::npos) << e;
}

}  // namespace
