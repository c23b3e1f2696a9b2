// tests/mpi/test_mpi_linear_cross_entropy.cc: the vocabulary-parallel
// linear cross-entropy (smax/distributed.h: linear_cross_entropy, its
// backward and fused forms) over MPI against smax::linear_cross_entropy with
// the whole LM head (mpi_test_util.h): hidden replicated, each rank its rows
// of the weight and bias; the loss, lse and dhidden replicated, dweight /
// dbias this shard's rows. Even, uneven and empty shards, more ranks than
// classes, ignored targets, reductions, smoothing, z-loss and softcap, a bad
// argument on one rank. Tolerances: the logits' f32 GEMM error dominates the
// bounds of include/smax/linear_cross_entropy.h (E_r ~ (D + 3) 2^-24 sum |h||w|
// with |h|, |w| ~ 0.5 and D = 24: ~1e-5), so 1e-4 absolute on the loss
// values and 1e-5 relative + 1e-6 absolute on gradients.
#include <optional>
#include <string>
#include <vector>

#include "mpi_test_util.h"
#include "smax/distributed.h"
#include "smax/linear_cross_entropy.h"

namespace {

using namespace smax_mpi_test;
namespace dist = smax::distributed;

constexpr int64_t kRows = 7;
constexpr int64_t kDim = 24;

std::vector<int64_t> vocab_sizes() {
  std::vector<int64_t> v = {41, 300};
  if (ranks() >= 2) v.push_back(ranks() - 1);
  return v;
}

struct Variant {
  const char* name;
  smax::Reduction reduction;
  float label_smoothing, lse_square_scale, softcap;
  int ignore_every;
};

const Variant kVariants[] = {
    {"mean", smax::Reduction::kMean, 0.0f, 0.0f, 0.0f, 3},
    {"none, smoothing 0.1, z-loss", smax::Reduction::kNone, 0.1f, 1e-4f, 0.0f, 4},
    {"sum, softcap 3", smax::Reduction::kSum, 0.0f, 0.0f, 3.0f, 0},
};

smax::TensorView scalar_or_rows(std::vector<float>& v, smax::Reduction r) {
  if (r == smax::Reduction::kNone) return f32(v, {kRows});
  return smax::make_view(v.data(), smax::DType::kF32, 0, nullptr, nullptr);
}

TEST(MpiLinearCrossEntropy, LossAndGradientsMatchTheWholeHead) {
  uint64_t salt = 1;
  for (int64_t v : vocab_sizes()) {
    for (Split split : splits()) {
      for (const Variant& var : kVariants) {
        const Shard s = my_shard(shard_sizes(v, ranks(), split));
        const std::string what = std::string(var.name) + ", " + split_name(split) +
                                 ", V = " + std::to_string(v);
        std::vector<float> hidden = normal(kRows * kDim, salt, 0.5f);
        std::vector<float> w_full = normal(v * kDim, salt + 1, 0.5f);
        std::vector<float> b_full = normal(v, salt + 2, 0.5f);
        std::vector<float> w = row_block(w_full, kDim, s), b = row_block(b_full, 1, s);
        std::vector<int64_t> target = targets(kRows, v, salt, var.ignore_every);
        const size_t reduced = var.reduction == smax::Reduction::kNone ? kRows : 1;
        std::vector<float> dloss = normal(reduced, salt + 3, 1.0f);
        ++salt;
        smax::SoftmaxOptions o;
        o.threads = 1;
        smax::CrossEntropyOptions ce;
        ce.loss.reduction = var.reduction;
        ce.label_smoothing = var.label_smoothing;
        ce.lse_square_scale = var.lse_square_scale;
        ce.softcap = var.softcap;
        std::vector<float> loss_whole(reduced), loss(reduced), lse_whole(kRows), lse(kRows);
        smax::CrossEntropyOptions ce_whole = ce, ce_mine = ce;
        ce_whole.lse = f32(lse_whole, {kRows});
        ce_mine.lse = f32(lse, {kRows});
        smax::linear_cross_entropy(f32(hidden, {kRows, kDim}), f32(w_full, {v, kDim}),
                                   i64(target, {kRows}), f32(b_full, {v}),
                                   scalar_or_rows(loss_whole, var.reduction), ce_whole, {}, o);
        dist::linear_cross_entropy(world(), f32(hidden, {kRows, kDim}), f32(w, {s.n, kDim}),
                                   i64(target, {kRows}), f32(b, {s.n}),
                                   scalar_or_rows(loss, var.reduction), ce_mine, {}, o);
        expect_close(loss, loss_whole, 1e-5, 1e-4, "loss, " + what);
        expect_close(lse, lse_whole, 1e-5, 1e-4, "lse, " + what);
        expect_replicated(loss, "loss");
        expect_replicated(lse, "lse");

        // Backward and fused: dhidden full (replicated), dweight / dbias rows.
        std::vector<float> dh_whole(kRows * kDim), dw_whole(v * kDim), db_whole(v);
        smax::linear_cross_entropy_backward(
            f32(hidden, {kRows, kDim}), f32(w_full, {v, kDim}), i64(target, {kRows}),
            f32(b_full, {v}), scalar_or_rows(dloss, var.reduction), f32(dh_whole, {kRows, kDim}),
            f32(dw_whole, {v, kDim}), f32(db_whole, {v}), ce, {}, o);
        for (bool fused : {false, true}) {
          const std::string how = std::string(fused ? "fused, " : "backward, ") + what;
          std::vector<float> dh(kRows * kDim), dw(s.n * kDim), db(s.n), fl(reduced);
          if (fused) {
            dist::linear_cross_entropy_fused(
                world(), f32(hidden, {kRows, kDim}), f32(w, {s.n, kDim}), i64(target, {kRows}),
                f32(b, {s.n}), scalar_or_rows(fl, var.reduction),
                scalar_or_rows(dloss, var.reduction), f32(dh, {kRows, kDim}),
                f32(dw, {s.n, kDim}), f32(db, {s.n}), ce, {}, o);
            expect_close(fl, loss_whole, 1e-5, 1e-4, "loss, " + how);
          } else {
            dist::linear_cross_entropy_backward(
                world(), f32(hidden, {kRows, kDim}), f32(w, {s.n, kDim}), i64(target, {kRows}),
                f32(b, {s.n}), scalar_or_rows(dloss, var.reduction), f32(dh, {kRows, kDim}),
                f32(dw, {s.n, kDim}), f32(db, {s.n}), ce, {}, o);
          }
          expect_close(dh, dh_whole, 1e-5, 1e-6, "dhidden, " + how);
          expect_close(dw, row_block(dw_whole, kDim, s), 1e-5, 1e-6, "dweight, " + how);
          expect_close(db, row_block(db_whole, 1, s), 1e-5, 1e-6, "dbias, " + how);
          expect_replicated(dh, "dhidden");
        }
      }
    }
  }
}

TEST(MpiLinearCrossEntropy, BadWeightShapeOnOneRankFailsEveryRank) {
  const int64_t v = 40;
  const Shard s = my_shard(shard_sizes(v, ranks(), Split::kUneven));
  const int bad = ranks() - 1;
  const int64_t d = rank() == bad ? kDim + 1 : kDim;  // the bad rank's rows are too wide
  std::vector<float> hidden = normal(kRows * kDim, 5, 0.5f), w = normal(s.n * d, 6, 0.5f);
  std::vector<int64_t> target = targets(kRows, v, 5);
  std::vector<float> loss(1, 5.0f);
  smax::SoftmaxOptions o;
  o.threads = 1;
  const std::string e = error_of([&] {
    dist::linear_cross_entropy(world(), f32(hidden, {kRows, kDim}), f32(w, {s.n, d}),
                               i64(target, {kRows}), std::nullopt,
                               scalar_or_rows(loss, smax::Reduction::kMean), {}, {}, o);
  });
  if (rank() == bad) {
    EXPECT_NE(e, "");
  } else {
    EXPECT_EQ(e, "linear_cross_entropy (vocab-parallel): rank " + std::to_string(bad) +
                     " rejected its arguments (see that rank's error)");
  }
  EXPECT_EQ(loss[0], 5.0f);
}

}  // namespace
