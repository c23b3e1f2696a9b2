// The handshake every vocabulary-parallel op starts with (src/ops/distributed/
// group.h): shard layout from the ranks' class counts, and the errors every
// rank raises together (no rank hangs) when one rank's arguments are bad or
// the ranks disagree. Ranks are threads (testing/thread_communicator.h).
#include <gtest/gtest.h>

#include <string>

#include "core/errors.h"
#include "ops/distributed/group.h"
#include "smax/distributed.h"
#include "thread_communicator.h"

namespace {

using smax::distributed::Communicator;
using smax::testing::run_ranks;
using smax::testing::message_of;

TEST(DistributedGroup, ShardLayoutTilesTheClassesInRankOrder) {
  const int64_t counts[] = {5, 0, 7, 3};
  std::vector<smax::distributed::ShardLayout> got(4);
  auto errors = run_ranks(4, [&](Communicator& comm, int rank) {
    got[rank] = smax::distributed::shard_layout(comm, counts[rank]);
  });
  for (auto& e : errors) EXPECT_EQ(message_of(e), "");
  const int64_t offsets[] = {0, 5, 5, 12};
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(got[r].offset, offsets[r]);
    EXPECT_EQ(got[r].classes, counts[r]);
    EXPECT_EQ(got[r].vocab, 15);
  }
}

TEST(DistributedGroup, OneRanksBadArgumentsFailEveryRank) {
  auto errors = run_ranks(3, [&](Communicator& comm, int rank) {
    smax::detail::dist::begin(comm, "softmax", {{"rows", 4}}, 10, [&] {
      if (rank == 1) smax::detail::fail("softmax", "dst has the wrong shape");
    });
  });
  EXPECT_EQ(message_of(errors[1]), "softmax: dst has the wrong shape");
  EXPECT_EQ(message_of(errors[0]),
            "softmax (vocab-parallel): rank 1 rejected its arguments (see that rank's error)");
  EXPECT_EQ(message_of(errors[2]), message_of(errors[0]));
}

TEST(DistributedGroup, DisagreementNamesTheValueAndTheRanks) {
  auto errors = run_ranks(3, [&](Communicator& comm, int rank) {
    smax::detail::dist::begin(comm, "cross_entropy", {{"rows", rank == 2 ? 5 : 4}}, 10, [] {});
  });
  for (auto& e : errors) {
    EXPECT_EQ(message_of(e),
              "cross_entropy (vocab-parallel): ranks disagree on rows: rank 0 has 4, rank 2 has 5");
  }
}

TEST(DistributedGroup, DifferentOpsOnDifferentRanksFail) {
  auto errors = run_ranks(2, [&](Communicator& comm, int rank) {
    smax::detail::dist::begin(comm, rank == 0 ? "softmax" : "log_softmax", {}, 3, [] {});
  });
  EXPECT_NE(message_of(errors[0]).find("ranks call different ops"), std::string::npos);
  EXPECT_NE(message_of(errors[1]).find("ranks call different ops"), std::string::npos);
}

TEST(DistributedGroup, RecordsArriveInRankOrder) {
  std::vector<std::vector<double>> got(3);
  auto errors = run_ranks(3, [&](Communicator& comm, int rank) {
    auto g = smax::detail::dist::begin(comm, "logsumexp", {}, 2, [] {});
    got[rank] = smax::detail::dist::allgather_rows(g, std::vector<double>{rank * 1.0, rank + 0.5});
  });
  for (auto& e : errors) EXPECT_EQ(message_of(e), "");
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(got[r], (std::vector<double>{0, 0.5, 1, 1.5, 2, 2.5}));
  }
}

}  // namespace

// The test communicator itself: a collective mismatch, or a rank waiting in a
// collective another rank left, throws on the ranks involved (the tests of the
// ops rely on it to turn a would-be MPI hang into a failure).
namespace {

TEST(DistributedGroup, TheThreadCommunicatorCatchesMismatchedCollectives) {
  auto errors = run_ranks(2, [&](Communicator& comm, int rank) {
    char send[16] = {}, recv[32] = {};
    comm.allgather(send, recv, rank == 0 ? 8 : 16);
  });
  for (auto& e : errors) {
    ASSERT_TRUE(e);
    try {
      std::rethrow_exception(e);
    } catch (const std::logic_error& err) {
      EXPECT_NE(std::string(err.what()).find("collective mismatch"), std::string::npos);
    }
  }
}

TEST(DistributedGroup, TheThreadCommunicatorReleasesRanksLeftWaiting) {
  auto errors = run_ranks(3, [&](Communicator& comm, int rank) {
    char send[4] = {}, recv[12] = {};
    comm.allgather(send, recv, 4);
    if (rank == 1) return;  // one collective fewer than the others
    comm.allgather(send, recv, 4);
  });
  EXPECT_FALSE(errors[1]);
  for (int r : {0, 2}) {
    ASSERT_TRUE(errors[r]);
    try {
      std::rethrow_exception(errors[r]);
    } catch (const std::logic_error& err) {
      EXPECT_NE(std::string(err.what()).find("another rank left"), std::string::npos);
    }
  }
}

}  // namespace
