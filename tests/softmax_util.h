// tests/softmax_util.h: the per-target sweep fixture shared by
// tests/test_softmax_forward.cc and tests/test_softmax_backward.cc.
#pragma once

#include <string>
#include <vector>

#include "test_util.h"

namespace smax_test {

/// Per-target fixture of the softmax-family sweeps: sweep() runs every op in
/// `ops` x every algorithm x every size on [rows, n] (rows = 1 for n > 4096)
/// with data from Rng(tag + data name + "/" + misalign), and stops after a
/// few failures so one bug does not flood the log.
class SweepTargetTest : public TargetTest {
 protected:
  void sweep(const std::string& tag, const std::vector<Op>& ops,
             const std::vector<int64_t>& sizes, Data data, const SoftmaxOptions& base,
             int64_t rows, int64_t misalign,
             const std::vector<Algorithm>& algos = all_algorithms()) {
    Rng rng(tag + data_name(data) + "/" + std::to_string(misalign));
    for (Op op : ops) {
      for (Algorithm a : algos) {
        for (int64_t n : sizes) {
          SoftmaxOptions o = base;
          o.algorithm = a;
          const int64_t r = n > 4096 ? 1 : rows;
          const ::testing::AssertionResult res =
              check_contiguous(op, {r, n}, -1, data, o, rng, misalign);
          EXPECT_TRUE(res) << "target " << GetParam();
          if (!res && ++failures_ >= 12) {
            FAIL() << "stopping this sweep after " << failures_ << " failing cases";
          }
        }
      }
    }
  }
  int failures_ = 0;
};

}  // namespace smax_test
