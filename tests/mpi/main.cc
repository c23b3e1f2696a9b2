// tests/mpi/main.cc: gtest main of the MPI test programs (mpi_test_util.h):
// MPI_Init, one world MpiCommunicator, the shared seed, RUN_ALL_TESTS,
// MPI_Finalize. Rank 0 prints gtest's usual report; the other ranks print
// only their failures, each line prefixed with the rank. Each rank exits
// with gtest's status, so mpirun (and CTest) fail when any rank fails.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "mpi_test_util.h"

namespace smax_mpi_test {
namespace {

std::unique_ptr<smax::distributed::MpiCommunicator> g_world;
uint64_t g_seed = 0;

// The report of ranks other than 0: failed assertions only.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
    std::printf("[rank %d] %s.%s: %s:%d: %s\n", rank_, t ? t->test_suite_name() : "?",
                t ? t->name() : "?", r.file_name() ? r.file_name() : "?", r.line_number(),
                r.message());
    std::fflush(stdout);
  }

 private:
  int rank_;
};

}  // namespace

smax::distributed::MpiCommunicator& world() { return *g_world; }
uint64_t seed() { return g_seed; }

}  // namespace smax_mpi_test

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  int status = 0;
  {
    using namespace smax_mpi_test;
    g_world = std::make_unique<smax::distributed::MpiCommunicator>(MPI_COMM_WORLD);
    uint64_t s = 20261128;
    if (const char* env = std::getenv("SMAX_TEST_SEED")) s = std::strtoull(env, nullptr, 10);
    MPI_Bcast(&s, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    g_seed = s;
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    if (g_world->rank() == 0) {
      std::printf("[   smax   ] %d MPI ranks; seed %" PRIu64 " (set SMAX_TEST_SEED=<n> to change)\n",
                  g_world->size(), g_seed);
      std::fflush(stdout);
    } else {
      delete listeners.Release(listeners.default_result_printer());
      listeners.Append(new FailurePrinter(g_world->rank()));
    }
    status = RUN_ALL_TESTS();
    g_world.reset();
  }
  MPI_Finalize();
  return status;
}
