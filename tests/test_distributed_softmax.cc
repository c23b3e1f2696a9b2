// The vocabulary-parallel softmax family (include/smax/distributed.h,
// src/ops/distributed/softmax_sharded.cc): on P = 1..4 ranks (threads) with
// even, uneven and empty shards, every op gives what the single-process op
// gives on the whole row: bit-equal on one rank, within the stated bound
// (the single-process bound plus the exchange's 2^-24) on several, against
// the single-process op and a float64 oracle; replicated outputs are the
// same bits on every rank; special rows (NaN / +inf in one shard, all
// masked) behave as in one process; the bits do not depend on threads; and
// a bad or mismatched argument on one rank fails every rank, writing nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "distributed_util.h"
#include "ops/distributed/sharded_common.h"
#include "smax/distributed.h"
#include "smax/softmax.h"

namespace {

using smax::DType;
using smax::SoftmaxOptions;
using smax::TensorView;
using smax::distributed::Communicator;
using smax::testing::Dense;
using smax::testing::layouts_for;
using smax::testing::message_of;
using smax::testing::offsets_of;
using smax::testing::run_ok;
using smax::testing::run_ranks;

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

enum class Op { kSoftmax, kLogSoftmax, kLogSumExp };

Dense random_logits(DType dt, int64_t rows, int64_t cols, uint32_t seed, double spread = 4.0) {
  Dense x(dt, rows, cols);
  std::mt19937 gen(seed);
  std::normal_distribution<double> nd(0.0, spread);
  for (int64_t i = 0; i < rows * cols; ++i) x.set(i, nd(gen));
  return x;
}

// The output's dtype-specific slack: half an ulp of a narrow output type.
double narrow_rel(DType dt) {
  return dt == DType::kBF16 ? 0x1p-8 : dt == DType::kF16 ? 0x1p-11 : 0.0;
}

// Single-process bound + exchange (softmax.h): relative 2e-6 (f32), 1e-14
// (f64 arithmetic), for outputs >= 1e-30; log outputs absolute * (1 + |v|).
// Two approximations of one value differ by at most the sum of their bounds.
double bound_of(DType src, DType dst) {
  const double one = src == DType::kF64 ? 1e-14 : 2e-6 + 0x1p-24;
  return 2.0 * one + 2.0 * narrow_rel(dst);
}

void expect_close(double got, double want, double rel, bool log, const std::string& where) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << where << " got " << got;
    return;
  }
  if (std::isinf(want)) {
    EXPECT_EQ(got, want) << where;
    return;
  }
  const double tol = log ? rel * (1.0 + std::fabs(want)) : rel * std::fabs(want) + 1e-30;
  EXPECT_NEAR(got, want, tol) << where;
}

void run_single(Op op, const TensorView& src, const TensorView& dst, const SoftmaxOptions& o) {
  switch (op) {
    case Op::kSoftmax: smax::softmax(src, dst, o); break;
    case Op::kLogSoftmax: smax::log_softmax(src, dst, o); break;
    case Op::kLogSumExp: smax::logsumexp(src, dst, o); break;
  }
}
void run_sharded(Op op, Communicator& c, const TensorView& src, const TensorView& dst,
                 const SoftmaxOptions& o) {
  switch (op) {
    case Op::kSoftmax: smax::distributed::softmax(c, src, dst, o); break;
    case Op::kLogSoftmax: smax::distributed::log_softmax(c, src, dst, o); break;
    case Op::kLogSumExp: smax::distributed::logsumexp(c, src, dst, o); break;
  }
}

// Runs op sharded over `sizes` and single-process; checks bits (P = 1) or
// the bound, and that logsumexp is the same bits on every rank.
void check_forward(Op op, const Dense& x, DType dst_type, const std::vector<int64_t>& sizes,
                   SoftmaxOptions o = {}, const std::string& tag = "") {
  const int P = static_cast<int>(sizes.size());
  const auto off = offsets_of(sizes);
  const int64_t R = x.rows(), V = x.cols();
  const bool lse = op == Op::kLogSumExp;
  Dense want(dst_type, R, lse ? 1 : V);
  run_single(op, x.full(), lse ? want.rows_view() : want.full(), o);
  Dense got(dst_type, R, lse ? 1 : V);
  std::vector<Dense> lses(P, Dense(dst_type, R, 1));
  run_ok(P, [&](Communicator& c, int k) {
    const TensorView src = x.shard(off[k], sizes[k]);
    if (lse) {
      run_sharded(op, c, src, lses[k].rows_view(), o);
    } else {
      run_sharded(op, c, src, got.shard(off[k], sizes[k]), o);
    }
  });
  if (lse) {
    for (int k = 1; k < P; ++k) EXPECT_TRUE(lses[k].same_bits(lses[0])) << tag << " rank " << k;
    got = lses[0];
  }
  if (P == 1) {
    EXPECT_TRUE(got.same_bits(want)) << tag << " (one rank: bit-equal)";
    return;
  }
  const double rel = bound_of(x.dtype(), dst_type);
  for (int64_t i = 0; i < got.rows() * got.cols(); ++i) {
    expect_close(got.get(i), want.get(i), rel, op != Op::kSoftmax,
                 tag + " P=" + std::to_string(P) + " element " + std::to_string(i));
  }
}

TEST(DistributedSoftmax, EveryOpDtypeAndLayoutMatchesTheSingleProcessOp) {
  const int64_t V = 37;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16, DType::kF64}) {
    const Dense x = random_logits(dt, 5, V, 11);
    for (Op op : {Op::kSoftmax, Op::kLogSoftmax, Op::kLogSumExp}) {
      for (const auto& sizes : layouts_for(V)) {
        check_forward(op, x, dt, sizes, {},
                      std::string("dtype ") + smax::dtype_name(dt) + " op " +
                          std::to_string(static_cast<int>(op)));
      }
    }
  }
}

TEST(DistributedSoftmax, MixedDtypesScaleTemperatureAndMasks) {
  const int64_t R = 4, V = 29;
  const Dense x = random_logits(DType::kF32, R, V, 5);
  Dense add(DType::kF32, R, V);
  std::vector<uint8_t> keep(static_cast<size_t>(R * V), 1);
  for (int64_t i = 0; i < R * V; ++i) {
    add.set(i, (i % 7 == 0) ? -kInf : 0.25 * (i % 3));
    keep[static_cast<size_t>(i)] = (i % 5) != 1;
  }
  for (const auto& sizes : layouts_for(V)) {
    const auto off = offsets_of(sizes);
    const int P = static_cast<int>(sizes.size());
    for (Op op : {Op::kSoftmax, Op::kLogSoftmax, Op::kLogSumExp}) {
      for (DType out : {DType::kF32, DType::kBF16, DType::kF64}) {
        const bool lse = op == Op::kLogSumExp;
        SoftmaxOptions o;
        o.scale = 1.5f;
        o.temperature = 0.7f;
        o.additive_mask = add.full();
        o.bool_mask = smax::make_bool_view(keep.data(), {R, V});
        Dense want(out, R, lse ? 1 : V), got(out, R, lse ? 1 : V);
        run_single(op, x.full(), lse ? want.rows_view() : want.full(), o);
        run_ok(P, [&](Communicator& c, int k) {
          SoftmaxOptions ok = o;
          ok.additive_mask = add.shard(off[k], sizes[k]);
          ok.bool_mask = smax::make_bool_view(keep.data() + off[k], {R, sizes[k]}, {V, 1});
          if (lse) {
            if (k == 0) {
              run_sharded(op, c, x.shard(off[k], sizes[k]), got.rows_view(), ok);
            } else {
              Dense mine(out, R, 1);
              run_sharded(op, c, x.shard(off[k], sizes[k]), mine.rows_view(), ok);
            }
          } else {
            run_sharded(op, c, x.shard(off[k], sizes[k]), got.shard(off[k], sizes[k]), ok);
          }
        });
        if (P == 1) {
          EXPECT_TRUE(got.same_bits(want));
          continue;
        }
        for (int64_t i = 0; i < got.rows() * got.cols(); ++i) {
          expect_close(got.get(i), want.get(i), bound_of(DType::kF32, out), op != Op::kSoftmax,
                       "masked P=" + std::to_string(P));
        }
      }
    }
  }
}

TEST(DistributedSoftmax, AgainstTheFloat64Oracle) {
  // f32 logits of wide range; the oracle is float64 softmax of the same
  // logits: the sharded result is within 2e-6 + 2^-24 relative (softmax)
  // and (2e-6 + 2^-24)(1 + |v|) absolute (log_softmax, logsumexp).
  const int64_t R = 3, V = 1000;
  const Dense x = random_logits(DType::kF32, R, V, 21, 30.0);
  const std::vector<int64_t> sizes = {300, 0, 411, 289};
  const auto off = offsets_of(sizes);
  Dense sm(DType::kF32, R, V), ls(DType::kF32, R, V), lse(DType::kF32, R, 1);
  run_ok(4, [&](Communicator& c, int k) {
    smax::distributed::softmax(c, x.shard(off[k], sizes[k]), sm.shard(off[k], sizes[k]));
    smax::distributed::log_softmax(c, x.shard(off[k], sizes[k]), ls.shard(off[k], sizes[k]));
    Dense mine(DType::kF32, R, 1);
    smax::distributed::logsumexp(c, x.shard(off[k], sizes[k]),
                                 k == 0 ? lse.rows_view() : mine.rows_view());
  });
  const double rel = 2e-6 + 0x1p-24;
  for (int64_t r = 0; r < R; ++r) {
    double m = -kInf;
    for (int64_t j = 0; j < V; ++j) m = std::max(m, x.get(r, j));
    long double s = 0;
    for (int64_t j = 0; j < V; ++j) s += std::exp(static_cast<long double>(x.get(r, j) - m));
    const double L = m + static_cast<double>(std::log(s));
    expect_close(lse.get(r), L, rel, true, "lse row " + std::to_string(r));
    for (int64_t j = 0; j < V; ++j) {
      const double p = static_cast<double>(std::exp(static_cast<long double>(x.get(r, j) - m)) / s);
      if (p >= 1e-30) expect_close(sm.get(r, j), p, rel, false, "softmax");
      expect_close(ls.get(r, j), x.get(r, j) - L, rel, true, "log_softmax");
    }
  }
}

TEST(DistributedSoftmax, LongRowsUseTheSegmentGrid) {
  // Shards longer than kSegment (2^16): the local state is merged over
  // segments, then over ranks.
  const int64_t V = 150001;
  for (DType dt : {DType::kF32, DType::kBF16}) {  // bf16: the direct narrow path
    const Dense x = random_logits(dt, 2, V, 3);
    for (Op op : {Op::kSoftmax, Op::kLogSoftmax, Op::kLogSumExp}) {
      check_forward(op, x, dt, {70000, 1, V - 70001}, {}, "long");
      check_forward(op, x, dt, {V}, {}, "long P=1");
    }
  }
}

TEST(DistributedSoftmax, StridedClassAxis) {
  // Classes along axis 0 ([V, R] with R contiguous): each shard is a block
  // of rows of the transposed buffer.
  const int64_t V = 23, R = 6;
  const Dense x = random_logits(DType::kF32, V, R, 8);
  const std::vector<int64_t> sizes = {10, 0, 13};
  const auto off = offsets_of(sizes);
  SoftmaxOptions o;
  o.axis = 0;
  Dense want(DType::kF32, V, R), got(DType::kF32, V, R);
  smax::softmax(x.full(), want.full(), o);
  run_ok(3, [&](Communicator& c, int k) {
    const int64_t shape[2] = {sizes[k], R}, strides[2] = {R, 1};
    const TensorView src = smax::make_view(const_cast<void*>(x.at(off[k] * R)), DType::kF32, 2,
                                           shape, strides);
    const TensorView dst = smax::make_view(got.at(off[k] * R), DType::kF32, 2, shape, strides);
    smax::distributed::softmax(c, src, dst, o);
  });
  for (int64_t i = 0; i < V * R; ++i) {
    expect_close(got.get(i), want.get(i), bound_of(DType::kF32, DType::kF32), false, "axis 0");
  }
}

TEST(DistributedSoftmax, SpecialRows) {
  // Row 0: NaN in rank 1's shard; row 1: +inf in rank 2's shard; row 2:
  // every entry -inf (all masked); row 3: rank 0's shard all -inf only.
  const int64_t R = 4, V = 12;
  const std::vector<int64_t> sizes = {4, 4, 4};
  const auto off = offsets_of(sizes);
  for (smax::EmptyRow policy : {smax::EmptyRow::kZero, smax::EmptyRow::kNan}) {
    for (DType dt : {DType::kF32, DType::kF64, DType::kBF16}) {
      Dense x = random_logits(dt, R, V, 4);
      x.set(0 * V + 5, kNan);
      x.set(1 * V + 9, kInf);
      for (int64_t j = 0; j < V; ++j) x.set(2 * V + j, -kInf);
      for (int64_t j = 0; j < 4; ++j) x.set(3 * V + j, -kInf);
      SoftmaxOptions o;
      o.empty_row = policy;
      for (Op op : {Op::kSoftmax, Op::kLogSoftmax, Op::kLogSumExp}) {
        check_forward(op, x, dt, sizes, o, "special");
        check_forward(op, x, dt, {V}, o, "special P=1");
      }
    }
  }
}

TEST(DistributedSoftmax, BitsDoNotDependOnThreads) {
  const int64_t R = 300, V = 2000;  // several tasks per rank
  const Dense x = random_logits(DType::kF32, R, V, 9);
  const std::vector<int64_t> sizes = {700, 1300};
  const auto off = offsets_of(sizes);
  std::vector<Dense> outs;
  for (int threads : {1, 2, 3}) {
    SoftmaxOptions o;
    o.threads = threads;
    Dense got(DType::kF32, R, V);
    run_ok(2, [&](Communicator& c, int k) {
      smax::distributed::log_softmax(c, x.shard(off[k], sizes[k]), got.shard(off[k], sizes[k]),
                                     o);
    });
    outs.push_back(got);
  }
  EXPECT_TRUE(outs[1].same_bits(outs[0]));
  EXPECT_TRUE(outs[2].same_bits(outs[0]));
}

// Chunks of a few rows (many allgathers per call) give the bits of the
// default chunking: each row is merged on its own.
TEST(DistributedSoftmax, BitsDoNotDependOnTheChunking) {
  const int64_t R = 97, V = 2000;
  const Dense x = random_logits(DType::kF32, R, V, 19);
  const std::vector<int64_t> sizes = {700, 0, 1300};
  const auto off = offsets_of(sizes);
  std::vector<Dense> outs;
  for (int64_t chunk : {int64_t{0}, int64_t{4096}, int64_t{40000}}) {
    smax::detail::dist::set_chunk_bytes(chunk);
    Dense got(DType::kF32, R, V);
    Dense dx(DType::kF32, R, V);
    run_ok(3, [&](Communicator& c, int k) {
      smax::distributed::softmax(c, x.shard(off[k], sizes[k]), got.shard(off[k], sizes[k]));
      smax::distributed::softmax_backward(c, got.shard(off[k], sizes[k]),
                                          x.shard(off[k], sizes[k]), dx.shard(off[k], sizes[k]));
    });
    outs.push_back(got);
    outs.push_back(dx);
  }
  smax::detail::dist::set_chunk_bytes(0);
  for (size_t i = 2; i < outs.size(); ++i) EXPECT_TRUE(outs[i].same_bits(outs[i % 2])) << i;
}

// ---- backward ----------------------------------------------------------------

TEST(DistributedSoftmax, BackwardMatchesTheSingleProcessOp) {
  const int64_t R = 6, V = 41;
  for (bool log : {false, true}) {
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16, DType::kF64}) {
      const Dense x = random_logits(DType::kF32, R, V, 13);
      Dense y(dt, R, V);
      if (log) {
        smax::log_softmax(x.full(), y.full());
      } else {
        smax::softmax(x.full(), y.full());
      }
      const Dense dy = random_logits(dt, R, V, 14, 1.0);
      SoftmaxOptions o;
      o.scale = 2.0f;
      o.temperature = 1.25f;
      Dense want(dt, R, V);
      if (log) {
        smax::log_softmax_backward(y.full(), dy.full(), want.full(), o);
      } else {
        smax::softmax_backward(y.full(), dy.full(), want.full(), o);
      }
      for (const auto& sizes : layouts_for(V)) {
        const int P = static_cast<int>(sizes.size());
        const auto off = offsets_of(sizes);
        Dense got(dt, R, V);
        run_ok(P, [&](Communicator& c, int k) {
          if (log) {
            smax::distributed::log_softmax_backward(c, y.shard(off[k], sizes[k]),
                                                    dy.shard(off[k], sizes[k]),
                                                    got.shard(off[k], sizes[k]), o);
          } else {
            smax::distributed::softmax_backward(c, y.shard(off[k], sizes[k]),
                                                dy.shard(off[k], sizes[k]),
                                                got.shard(off[k], sizes[k]), o);
          }
        });
        if (P == 1) {
          EXPECT_TRUE(got.same_bits(want));
          continue;
        }
        // softmax.h's backward bound: 2e-6 |s| |y| (|dy| + |<dy, y>|) (f32),
        // both sides, plus the narrow output's half ulp of |dx|.
        const double one = dt == DType::kF64 ? 1e-14 : 4e-6;
        for (int64_t r = 0; r < R; ++r) {
          double dot = 0.0, sum = 0.0, asum = 0.0;
          for (int64_t j = 0; j < V; ++j) {
            dot += std::fabs(y.get(r, j) * dy.get(r, j));
            sum += dy.get(r, j);
            asum += std::fabs(dy.get(r, j));
          }
          const double s = 2.0 / 1.25;
          for (int64_t j = 0; j < V; ++j) {
            const double mag = log ? s * (std::fabs(dy.get(r, j)) + std::exp(y.get(r, j)) * asum)
                                   : s * std::fabs(y.get(r, j)) * (std::fabs(dy.get(r, j)) + dot);
            const double tol = 2 * one * mag + 2 * narrow_rel(dt) * std::fabs(want.get(r, j)) +
                               1e-30;
            EXPECT_NEAR(got.get(r, j), want.get(r, j), tol)
                << (log ? "log_" : "") << "softmax_backward P=" << P << " dtype "
                << smax::dtype_name(dt) << " (" << r << ", " << j << ") sum " << sum;
          }
        }
      }
    }
  }
}

// ---- errors ------------------------------------------------------------------

TEST(DistributedSoftmax, OneRanksBadArgumentFailsEveryRankAndWritesNothing) {
  const int64_t R = 3, V = 10;
  const Dense x = random_logits(DType::kF32, R, V, 1);
  const std::vector<int64_t> sizes = {4, 6};
  const auto off = offsets_of(sizes);
  Dense got(DType::kF32, R, V, 7.0);
  Dense bad(DType::kF32, R + 1, 6, 7.0);
  const auto errors = run_ranks(2, [&](Communicator& c, int k) {
    smax::distributed::softmax(c, x.shard(off[k], sizes[k]),
                               k == 1 ? bad.shard(0, 6) : got.shard(off[k], sizes[k]));
  });
  EXPECT_NE(message_of(errors[1]).find("softmax"), std::string::npos) << message_of(errors[1]);
  EXPECT_EQ(message_of(errors[0]),
            "softmax (vocab-parallel): rank 1 rejected its arguments (see that rank's error)");
  for (int64_t i = 0; i < R * V; ++i) EXPECT_EQ(got.get(i), 7.0);
  for (int64_t i = 0; i < (R + 1) * 6; ++i) EXPECT_EQ(bad.get(i), 7.0);
}

TEST(DistributedSoftmax, MismatchedRowsOrOptionsFailEveryRankNamingThem) {
  const int64_t V = 10;
  const Dense x = random_logits(DType::kF32, 4, V, 1);
  Dense got(DType::kF32, 4, V, 7.0);
  {
    const auto errors = run_ranks(2, [&](Communicator& c, int k) {
      const int64_t rows = k == 1 ? 3 : 4;
      const int64_t shape[2] = {rows, 5}, strides[2] = {V, 1};
      smax::distributed::log_softmax(
          c, smax::make_view(const_cast<void*>(x.at(k * 5)), DType::kF32, 2, shape, strides),
          smax::make_view(got.at(k * 5), DType::kF32, 2, shape, strides));
    });
    for (const auto& e : errors) {
      EXPECT_EQ(message_of(e),
                "log_softmax (vocab-parallel): ranks disagree on row shape (dim 0): rank 0 has 4, "
                "rank 1 has 3");
    }
  }
  {
    const auto errors = run_ranks(3, [&](Communicator& c, int k) {
      SoftmaxOptions o;
      o.temperature = k == 2 ? 2.0f : 1.0f;
      Dense lse(DType::kF32, 4, 1);
      smax::distributed::logsumexp(c, x.shard(k * 3, 3), lse.rows_view(), o);
    });
    for (const auto& e : errors) {
      EXPECT_NE(message_of(e).find("ranks disagree on temperature"), std::string::npos)
          << message_of(e);
    }
  }
  {
    const auto errors = run_ranks(2, [&](Communicator& c, int k) {
      Dense y(k == 0 ? DType::kF32 : DType::kF64, 4, 5), dy(DType::kF32, 4, 5),
          dx(DType::kF32, 4, 5);
      smax::distributed::softmax_backward(c, y.full(), dy.full(), dx.full());
    });
    for (const auto& e : errors) {
      EXPECT_NE(message_of(e).find("softmax_backward (vocab-parallel): ranks disagree on y dtype"),
                std::string::npos)
          << message_of(e);
    }
  }
  for (int64_t i = 0; i < 4 * V; ++i) EXPECT_EQ(got.get(i), 7.0);
}

}  // namespace
