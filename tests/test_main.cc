// tests/test_main.cc: gtest main that prints the base seed, the SIMD targets,
// and how to reproduce a failure.
#include <cinttypes>
#include <cstdio>

#include "test_util.h"

namespace {

class SeedPrinter : public ::testing::EmptyTestEventListener {
 public:
  void OnTestProgramStart(const ::testing::UnitTest&) override {
    std::string targets;
    for (const std::string& t : smax::supported_targets()) targets += " " + t;
    std::printf("[   smax   ] base seed %" PRIu64
                " (set SMAX_TEST_SEED=<n> or --gtest_random_seed=<n> to change); "
                "targets:%s; active %s; max_threads %d\n",
                smax_test::base_seed(), targets.c_str(), smax::active_target().c_str(),
                smax::max_threads());
    std::fflush(stdout);
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result() != nullptr && info.result()->Failed()) {
      std::printf("[   smax   ] %s.%s failed with base seed %" PRIu64
                  "; reproduce: SMAX_TEST_SEED=%" PRIu64 " --gtest_filter='%s.%s'\n",
                  info.test_suite_name(), info.name(), smax_test::base_seed(),
                  smax_test::base_seed(), info.test_suite_name(), info.name());
      std::fflush(stdout);
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  smax_test::initial_target();  // record the starting cap before any test changes it
  ::testing::UnitTest::GetInstance()->listeners().Append(new SeedPrinter);
  return RUN_ALL_TESTS();
}
