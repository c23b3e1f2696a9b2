// tests/mpi/test_mpi_softmax.cc: the vocabulary-parallel softmax family
// (smax/distributed.h: softmax, log_softmax, logsumexp and their backward
// passes) over MPI against the single-process op on the whole rows
// (mpi_test_util.h), for even, uneven and empty shards, more ranks than
// classes, f32 and f64, NaN in one shard, a bad argument on one rank and
// ranks that disagree on the row shape. Bounds: include/smax/softmax.h;
// both results are within them, so they differ by at most twice the bound.
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "mpi_test_util.h"
#include "smax/distributed.h"
#include "smax/softmax.h"

namespace {

using namespace smax_mpi_test;
namespace dist = smax::distributed;

constexpr int64_t kRows = 5;

// Class counts of the cases: small, larger, and fewer classes than ranks.
std::vector<int64_t> vocab_sizes() {
  std::vector<int64_t> v = {37, 1000};
  if (ranks() >= 2) v.push_back(ranks() - 1);
  return v;
}

struct Case {
  int64_t v;
  Split split;
  Shard s;
  std::vector<float> full;   // kRows x v
  std::vector<float> shard;  // kRows x s.n
};

Case make_case(int64_t v, Split split, uint64_t salt) {
  Case c{v, split, my_shard(shard_sizes(v, ranks(), split)), normal(kRows * v, salt), {}};
  c.shard = columns(c.full, kRows, v, c.s);
  return c;
}

std::string label(const Case& c) {
  return std::string(split_name(c.split)) + ", V = " + std::to_string(c.v) + ", shard [" +
         std::to_string(c.s.offset) + ", " + std::to_string(c.s.offset + c.s.n) + ")";
}

TEST(MpiSoftmax, ForwardOpsMatchTheWholeRow) {
  uint64_t salt = 1;
  for (int64_t v : vocab_sizes()) {
    for (Split split : splits()) {
      Case c = make_case(v, split, salt++);
      smax::SoftmaxOptions o;
      o.threads = 1;
      o.scale = 0.75f;
      std::vector<float> whole(kRows * v), got(kRows * c.s.n);
      // softmax: relative 2e-6 each (outputs >= 1e-30), absolute 1e-36 below
      smax::softmax(f32(c.full, {kRows, v}), f32(whole, {kRows, v}), o);
      dist::softmax(world(), f32(c.shard, {kRows, c.s.n}), f32(got, {kRows, c.s.n}), o);
      expect_close(got, columns(whole, kRows, v, c.s), 4e-6, 2e-36, "softmax, " + label(c));
      // log_softmax: 2e-6 (1 + |value|) each
      smax::log_softmax(f32(c.full, {kRows, v}), f32(whole, {kRows, v}), o);
      dist::log_softmax(world(), f32(c.shard, {kRows, c.s.n}), f32(got, {kRows, c.s.n}), o);
      expect_close(got, columns(whole, kRows, v, c.s), 4e-6, 4e-6, "log_softmax, " + label(c));
      // logsumexp: one value per row, replicated
      std::vector<float> lse_whole(kRows), lse(kRows);
      smax::logsumexp(f32(c.full, {kRows, v}), f32(lse_whole, {kRows}), o);
      dist::logsumexp(world(), f32(c.shard, {kRows, c.s.n}), f32(lse, {kRows}), o);
      expect_close(lse, lse_whole, 4e-6, 4e-6, "logsumexp, " + label(c));
      expect_replicated(lse, "logsumexp");
    }
  }
}

TEST(MpiSoftmax, BackwardMatchesTheWholeRow) {
  uint64_t salt = 100;
  for (int64_t v : vocab_sizes()) {
    for (Split split : splits()) {
      Case c = make_case(v, split, salt++);
      smax::SoftmaxOptions o;
      o.threads = 1;
      std::vector<float> dy_full = normal(kRows * v, salt + 1000, 1.0f);
      std::vector<float> dy = columns(dy_full, kRows, v, c.s);
      for (bool log : {false, true}) {
        std::vector<float> y_full(kRows * v), dx_full(kRows * v), dx(kRows * c.s.n);
        auto fwd = log ? smax::log_softmax : smax::softmax;
        fwd(f32(c.full, {kRows, v}), f32(y_full, {kRows, v}), o);
        std::vector<float> y = columns(y_full, kRows, v, c.s);
        if (log) {
          smax::log_softmax_backward(f32(y_full, {kRows, v}), f32(dy_full, {kRows, v}),
                                     f32(dx_full, {kRows, v}), o);
          dist::log_softmax_backward(world(), f32(y, {kRows, c.s.n}), f32(dy, {kRows, c.s.n}),
                                     f32(dx, {kRows, c.s.n}), o);
        } else {
          smax::softmax_backward(f32(y_full, {kRows, v}), f32(dy_full, {kRows, v}),
                                 f32(dx_full, {kRows, v}), o);
          dist::softmax_backward(world(), f32(y, {kRows, c.s.n}), f32(dy, {kRows, c.s.n}),
                                 f32(dx, {kRows, c.s.n}), o);
        }
        // |dx| <= |y| (|dy| + |<dy, y>|) with |dy| ~ 1: 1e-5 relative to the
        // row's scale covers twice the bound (plus the dot's cancellation).
        expect_close(dx, columns(dx_full, kRows, v, c.s), 1e-5, 1e-6,
                     std::string(log ? "log_softmax" : "softmax") + "_backward, " + label(c));
      }
    }
  }
}

TEST(MpiSoftmax, Float64RowsMatchTheWholeRow) {
  const int64_t v = 301;
  for (Split split : splits()) {
    const Shard s = my_shard(shard_sizes(v, ranks(), split));
    std::vector<double> full = normal64(kRows * v, 7), shard = columns(full, kRows, v, s);
    std::vector<double> whole(kRows * v), got(kRows * s.n), lse_whole(kRows), lse(kRows);
    smax::SoftmaxOptions o;
    o.threads = 1;
    smax::softmax(f64(full, {kRows, v}), f64(whole, {kRows, v}), o);
    dist::softmax(world(), f64(shard, {kRows, s.n}), f64(got, {kRows, s.n}), o);
    expect_close(got, columns(whole, kRows, v, s), 2e-14, 1e-300, "f64 softmax");
    smax::logsumexp(f64(full, {kRows, v}), f64(lse_whole, {kRows}), o);
    dist::logsumexp(world(), f64(shard, {kRows, s.n}), f64(lse, {kRows}), o);
    expect_close(lse, lse_whole, 2e-14, 2e-14, "f64 logsumexp");
    expect_replicated(lse, "f64 logsumexp");
  }
}

TEST(MpiSoftmax, ThreadCountDoesNotChangeTheBits) {
  Case c = make_case(5000, Split::kUneven, 11);
  std::vector<float> one(kRows * c.s.n), three(kRows * c.s.n);
  smax::SoftmaxOptions o;
  o.threads = 1;
  dist::log_softmax(world(), f32(c.shard, {kRows, c.s.n}), f32(one, {kRows, c.s.n}), o);
  o.threads = 3;
  dist::log_softmax(world(), f32(c.shard, {kRows, c.s.n}), f32(three, {kRows, c.s.n}), o);
  EXPECT_EQ(one, three);
}

TEST(MpiSoftmax, NanInOneShardGivesNanRowsEverywhere) {
  Case c = make_case(64, Split::kEven, 21);
  // Row 2 gets a NaN in the last rank's shard (the whole row is NaN for
  // every rank), row 0 stays finite.
  const int64_t j = 63;
  c.full[2 * 64 + j] = std::numeric_limits<float>::quiet_NaN();
  c.shard = columns(c.full, kRows, 64, c.s);
  smax::SoftmaxOptions o;
  o.threads = 1;
  std::vector<float> got(kRows * c.s.n), lse(kRows);
  dist::softmax(world(), f32(c.shard, {kRows, c.s.n}), f32(got, {kRows, c.s.n}), o);
  dist::logsumexp(world(), f32(c.shard, {kRows, c.s.n}), f32(lse, {kRows}), o);
  for (int64_t i = 0; i < c.s.n; ++i) {
    EXPECT_TRUE(std::isnan(got[2 * c.s.n + i])) << "column " << c.s.offset + i;
    EXPECT_FALSE(std::isnan(got[0 * c.s.n + i]));
  }
  EXPECT_TRUE(std::isnan(lse[2]));
  EXPECT_FALSE(std::isnan(lse[0]));
  expect_replicated(lse, "logsumexp with NaN");
}

TEST(MpiSoftmax, BadArgumentOnOneRankFailsEveryRank) {
  Case c = make_case(40, Split::kUneven, 31);
  const int bad = ranks() - 1;
  // The bad rank's dst has one column too many.
  const int64_t cols = c.s.n + (rank() == bad ? 1 : 0);
  std::vector<float> dst(kRows * cols, -7.0f);
  smax::SoftmaxOptions o;
  o.threads = 1;
  const std::string e = error_of([&] {
    dist::softmax(world(), f32(c.shard, {kRows, c.s.n}), f32(dst, {kRows, cols}), o);
  });
  if (rank() == bad) {
    EXPECT_NE(e, "");
    EXPECT_EQ(e.find("rejected its arguments"), std::string::npos) << e;
  } else {
    EXPECT_EQ(e, "softmax (vocab-parallel): rank " + std::to_string(bad) +
                     " rejected its arguments (see that rank's error)");
  }
  for (float x : dst) EXPECT_EQ(x, -7.0f) << "written despite the error";
}

TEST(MpiSoftmax, RanksThatDisagreeOnRowsFailEveryRank) {
  const int64_t rows = rank() == 0 ? 3 : 4;
  std::vector<float> x = normal(rows * 10, 41), y(rows * 10);
  smax::SoftmaxOptions o;
  o.threads = 1;
  const std::string e =
      error_of([&] { dist::log_softmax(world(), f32(x, {rows, 10}), f32(y, {rows, 10}), o); });
  EXPECT_NE(e.find("log_softmax (vocab-parallel): ranks disagree on"), std::string::npos) << e;
  expect_replicated(std::vector<uint64_t>{std::hash<std::string>{}(e)}, "the error message");
}

TEST(MpiSoftmax, RanksThatDisagreeOnOptionsFailEveryRank) {
  Case c = make_case(20, Split::kEven, 51);
  std::vector<float> y(kRows * c.s.n);
  smax::SoftmaxOptions o;
  o.threads = 1;
  o.temperature = rank() == 0 ? 2.0f : 1.0f;
  const std::string e = error_of(
      [&] { dist::softmax(world(), f32(c.shard, {kRows, c.s.n}), f32(y, {kRows, c.s.n}), o); });
  EXPECT_NE(e.find("ranks disagree on"), std::string::npos) << e;
}

}  // namespace
