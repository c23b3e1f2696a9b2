// tests/mpi/test_mpi_cross_entropy.cc: the vocabulary-parallel
// cross_entropy and cross_entropy_backward (smax/distributed.h) over MPI
// against smax::cross_entropy on the whole rows (mpi_test_util.h): every
// reduction, class weights (each rank its shard's), ignored targets, all
// targets ignored, label smoothing (C = V), z-loss, softcap, probability
// targets, the extras (z_loss, lse, entropy, target_logprob, accuracy,
// replicated), the fused gradient and the backward pass (this shard's
// columns), uneven / empty shards, more ranks than classes, a bad argument
// on one rank and disagreeing options. Tolerances: twice the per-row bound
// of include/smax/losses.h (4e-6 (1 + |lse| + |t_target|) with |lse|, |t| of
// a few units here: 5e-5 absolute) and, for gradients, 1e-5 relative plus
// 1e-7 absolute.
#include <cmath>
#include <string>
#include <vector>

#include "mpi_test_util.h"
#include "smax/distributed.h"
#include "smax/losses.h"

namespace {

using namespace smax_mpi_test;
namespace dist = smax::distributed;

constexpr int64_t kRows = 9;

std::vector<int64_t> vocab_sizes() {
  std::vector<int64_t> v = {53, 700};
  if (ranks() >= 2) v.push_back(ranks() - 1);
  return v;
}

struct Variant {
  const char* name;
  smax::Reduction reduction;
  bool weighted;
  float label_smoothing;
  float lse_square_scale;
  float softcap;
  int ignore_every;
};

const Variant kVariants[] = {
    {"mean", smax::Reduction::kMean, false, 0.0f, 0.0f, 0.0f, 0},
    {"none, ignored rows", smax::Reduction::kNone, false, 0.0f, 0.0f, 0.0f, 4},
    {"sum, weights", smax::Reduction::kSum, true, 0.0f, 0.0f, 0.0f, 3},
    {"mean, weights, smoothing 0.1", smax::Reduction::kMean, true, 0.1f, 0.0f, 0.0f, 4},
    {"mean, z-loss 1e-4, softcap 5", smax::Reduction::kMean, false, 0.0f, 1e-4f, 5.0f, 5},
    {"none, everything", smax::Reduction::kNone, true, 0.2f, 1e-3f, 4.0f, 3},
};

// One call of both ops: the loss, every extra and the fused gradient.
struct Outputs {
  std::vector<float> loss, z, lse, entropy, tlp, acc, grad, dsrc;
};

smax::CrossEntropyOptions options(const Variant& var, std::vector<float>* weight, int64_t n,
                                  Outputs& out, int64_t rows_out) {
  smax::CrossEntropyOptions ce;
  ce.loss.reduction = var.reduction;
  if (var.weighted) ce.loss.weight = f32(*weight, {n});
  ce.label_smoothing = var.label_smoothing;
  ce.lse_square_scale = var.lse_square_scale;
  ce.softcap = var.softcap;
  const int64_t reduced = var.reduction == smax::Reduction::kNone ? kRows : 1;
  out.loss.assign(reduced, 0.0f);
  out.z.assign(reduced, 0.0f);
  out.acc.assign(reduced, 0.0f);
  out.lse.assign(rows_out, 0.0f);
  out.entropy.assign(rows_out, 0.0f);
  out.tlp.assign(rows_out, 0.0f);
  ce.z_loss = f32(out.z, {reduced == 1 ? 1 : kRows});
  ce.accuracy = f32(out.acc, {reduced == 1 ? 1 : kRows});
  ce.lse = f32(out.lse, {kRows});
  ce.entropy = f32(out.entropy, {kRows});
  ce.target_logprob = f32(out.tlp, {kRows});
  return ce;
}

smax::TensorView loss_view(const Variant& var, Outputs& out) {
  if (var.reduction == smax::Reduction::kNone) return f32(out.loss, {kRows});
  return smax::make_view(out.loss.data(), smax::DType::kF32, 0, nullptr, nullptr);
}

void expect_replicated_outputs(const Outputs& o, const std::string& what) {
  expect_replicated(o.loss, ("loss, " + what).c_str());
  expect_replicated(o.lse, ("lse, " + what).c_str());
  expect_replicated(o.entropy, ("entropy, " + what).c_str());
  expect_replicated(o.tlp, ("target_logprob, " + what).c_str());
  expect_replicated(o.acc, ("accuracy, " + what).c_str());
  expect_replicated(o.z, ("z_loss, " + what).c_str());
}

TEST(MpiCrossEntropy, ClassIndexTargetsMatchTheWholeRow) {
  uint64_t salt = 1;
  for (int64_t v : vocab_sizes()) {
    for (Split split : splits()) {
      for (const Variant& var : kVariants) {
        const Shard s = my_shard(shard_sizes(v, ranks(), split));
        const std::string what = std::string(var.name) + ", " + split_name(split) +
                                 ", V = " + std::to_string(v);
        std::vector<float> full = normal(kRows * v, salt), shard = columns(full, kRows, v, s);
        std::vector<int64_t> target = targets(kRows, v, salt, var.ignore_every);
        std::vector<float> w_full(v);
        for (int64_t j = 0; j < v; ++j) w_full[j] = 0.5f + 0.01f * static_cast<float>(j % 97);
        std::vector<float> w = std::vector<float>(w_full.begin() + s.offset,
                                                  w_full.begin() + s.offset + s.n);
        std::vector<float> dloss = normal(var.reduction == smax::Reduction::kNone ? kRows : 1,
                                          salt + 9, 1.0f);
        ++salt;
        smax::SoftmaxOptions o;
        o.threads = 1;
        Outputs whole, got;
        smax::CrossEntropyOptions ce_whole = options(var, &w_full, v, whole, kRows);
        smax::CrossEntropyOptions ce = options(var, &w, s.n, got, kRows);
        whole.grad.assign(kRows * v, 0.0f);
        got.grad.assign(kRows * s.n, 0.0f);
        ce_whole.grad = f32(whole.grad, {kRows, v});
        ce.grad = f32(got.grad, {kRows, s.n});
        smax::cross_entropy(f32(full, {kRows, v}), i64(target, {kRows}), loss_view(var, whole),
                            ce_whole, o);
        dist::cross_entropy(world(), f32(shard, {kRows, s.n}), i64(target, {kRows}),
                            loss_view(var, got), ce, o);
        expect_close(got.loss, whole.loss, 1e-5, 5e-5, "loss, " + what);
        expect_close(got.z, whole.z, 1e-5, 5e-5, "z_loss, " + what);
        expect_close(got.lse, whole.lse, 1e-5, 5e-5, "lse, " + what);
        expect_close(got.entropy, whole.entropy, 1e-5, 5e-5, "entropy, " + what);
        expect_close(got.tlp, whole.tlp, 1e-5, 5e-5, "target_logprob, " + what);
        expect_close(got.acc, whole.acc, 0.0, 0.0, "accuracy, " + what);
        expect_close(got.grad, columns(whole.grad, kRows, v, s), 1e-5, 1e-7,
                     "fused gradient, " + what);
        expect_replicated_outputs(got, what);

        // The backward pass (without the lse: it scans the shard again).
        smax::CrossEntropyOptions b_whole = ce_whole, b = ce;
        b_whole.lse.reset();
        b.lse.reset();
        b_whole.grad.reset();
        b.grad.reset();
        b_whole.z_loss = b_whole.entropy = b_whole.target_logprob = b_whole.accuracy = std::nullopt;
        b.z_loss = b.entropy = b.target_logprob = b.accuracy = std::nullopt;
        std::vector<float> dsrc_whole(kRows * v), dsrc(kRows * s.n);
        const std::vector<int64_t> dshape =
            var.reduction == smax::Reduction::kNone ? std::vector<int64_t>{kRows}
                                                    : std::vector<int64_t>{};
        smax::cross_entropy_backward(f32(full, {kRows, v}), i64(target, {kRows}),
                                     f32(dloss, dshape), f32(dsrc_whole, {kRows, v}), b_whole, o);
        dist::cross_entropy_backward(world(), f32(shard, {kRows, s.n}), i64(target, {kRows}),
                                     f32(dloss, dshape), f32(dsrc, {kRows, s.n}), b, o);
        expect_close(dsrc, columns(dsrc_whole, kRows, v, s), 1e-5, 1e-7, "backward, " + what);
      }
    }
  }
}

TEST(MpiCrossEntropy, ProbabilityTargetsAreShardColumns) {
  const int64_t v = 120;
  for (Split split : splits()) {
    const Shard s = my_shard(shard_sizes(v, ranks(), split));
    std::vector<float> full = normal(kRows * v, 61), shard = columns(full, kRows, v, s);
    std::vector<float> q_full = normal(kRows * v, 62, 1.0f);
    for (int64_t r = 0; r < kRows; ++r) {  // rows of a distribution
      double sum = 0;
      for (int64_t j = 0; j < v; ++j) sum += q_full[r * v + j] = std::exp(q_full[r * v + j]);
      for (int64_t j = 0; j < v; ++j) q_full[r * v + j] = static_cast<float>(q_full[r * v + j] / sum);
    }
    std::vector<float> q = columns(q_full, kRows, v, s);
    smax::SoftmaxOptions o;
    o.threads = 1;
    smax::CrossEntropyOptions ce;
    ce.loss.reduction = smax::Reduction::kNone;
    std::vector<float> loss_whole(kRows), loss(kRows);
    smax::cross_entropy(f32(full, {kRows, v}), f32(q_full, {kRows, v}), f32(loss_whole, {kRows}),
                        ce, o);
    dist::cross_entropy(world(), f32(shard, {kRows, s.n}), f32(q, {kRows, s.n}),
                        f32(loss, {kRows}), ce, o);
    expect_close(loss, loss_whole, 1e-5, 5e-5, std::string("probability targets, ") +
                                                    split_name(split));
    expect_replicated(loss, "probability-target loss");
  }
}

TEST(MpiCrossEntropy, AllTargetsIgnoredGivesTheEmptyMean) {
  const int64_t v = 30;
  const Shard s = my_shard(shard_sizes(v, ranks(), Split::kUneven));
  std::vector<float> full = normal(kRows * v, 71), shard = columns(full, kRows, v, s);
  std::vector<int64_t> target(kRows, -100);
  smax::SoftmaxOptions o;
  o.threads = 1;
  for (smax::EmptyMean em : {smax::EmptyMean::kNan, smax::EmptyMean::kZero}) {
    smax::CrossEntropyOptions ce;
    ce.loss.empty_mean = em;
    std::vector<float> loss(1, 5.0f), grad(kRows * s.n, 3.0f);
    ce.grad = f32(grad, {kRows, s.n});
    dist::cross_entropy(world(), f32(shard, {kRows, s.n}), i64(target, {kRows}),
                        smax::make_view(loss.data(), smax::DType::kF32, 0, nullptr, nullptr), ce,
                        o);
    if (em == smax::EmptyMean::kNan) {
      EXPECT_TRUE(std::isnan(loss[0]));
    } else {
      EXPECT_EQ(loss[0], 0.0f);
    }
    for (float g : grad) EXPECT_EQ(g, 0.0f);
    expect_replicated(loss, "all-ignored loss");
  }
}

TEST(MpiCrossEntropy, TargetOutOfRangeFailsEveryRank) {
  const int64_t v = 25;
  const Shard s = my_shard(shard_sizes(v, ranks(), Split::kEven));
  std::vector<float> full = normal(kRows * v, 81), shard = columns(full, kRows, v, s);
  std::vector<int64_t> target = targets(kRows, v, 81);
  target[3] = v;  // one past the last global class, on every rank
  std::vector<float> loss(1, 5.0f);
  smax::SoftmaxOptions o;
  o.threads = 1;
  const std::string e = error_of([&] {
    dist::cross_entropy(world(), f32(shard, {kRows, s.n}), i64(target, {kRows}),
                        smax::make_view(loss.data(), smax::DType::kF32, 0, nullptr, nullptr), {},
                        o);
  });
  EXPECT_NE(e, "") << "rank " << rank();
  EXPECT_EQ(e.find("not an smax::Error"), std::string::npos) << e;
  EXPECT_EQ(loss[0], 5.0f);
}

TEST(MpiCrossEntropy, BadWeightOnOneRankFailsEveryRank) {
  const int64_t v = 25;
  const Shard s = my_shard(shard_sizes(v, ranks(), Split::kEven));
  std::vector<float> full = normal(kRows * v, 91), shard = columns(full, kRows, v, s);
  std::vector<int64_t> target = targets(kRows, v, 91);
  const int bad = ranks() / 2;
  std::vector<float> w(s.n + (rank() == bad ? 2 : 0), 1.0f);  // the bad rank's is too long
  smax::CrossEntropyOptions ce;
  ce.loss.weight = f32(w, {static_cast<int64_t>(w.size())});
  std::vector<float> loss(1, 5.0f);
  smax::SoftmaxOptions o;
  o.threads = 1;
  const std::string e = error_of([&] {
    dist::cross_entropy(world(), f32(shard, {kRows, s.n}), i64(target, {kRows}),
                        smax::make_view(loss.data(), smax::DType::kF32, 0, nullptr, nullptr), ce,
                        o);
  });
  if (rank() == bad) {
    EXPECT_NE(e, "");
  } else {
    EXPECT_EQ(e, "cross_entropy (vocab-parallel): rank " + std::to_string(bad) +
                     " rejected its arguments (see that rank's error)");
  }
  EXPECT_EQ(loss[0], 5.0f);
}

TEST(MpiCrossEntropy, RanksThatDisagreeOnOptionsFailEveryRank) {
  const int64_t v = 25;
  const Shard s = my_shard(shard_sizes(v, ranks(), Split::kEven));
  std::vector<float> full = normal(kRows * v, 95), shard = columns(full, kRows, v, s);
  std::vector<int64_t> target = targets(kRows, v, 95);
  smax::CrossEntropyOptions ce;
  ce.label_smoothing = rank() == ranks() - 1 ? 0.1f : 0.0f;
  std::vector<float> loss(1, 5.0f);
  smax::SoftmaxOptions o;
  o.threads = 1;
  const std::string e = error_of([&] {
    dist::cross_entropy(world(), f32(shard, {kRows, s.n}), i64(target, {kRows}),
                        smax::make_view(loss.data(), smax::DType::kF32, 0, nullptr, nullptr), ce,
                        o);
  });
  EXPECT_NE(e.find("ranks disagree on"), std::string::npos) << e;
}

}  // namespace
