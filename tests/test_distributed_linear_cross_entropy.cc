// The vocabulary-parallel linear cross-entropy (include/smax/distributed.h,
// src/ops/distributed/linear_cross_entropy_sharded.cc): ranks are threads
// (testing/thread_communicator.h), each holding the LM head's rows of its
// classes (uneven shards, an empty shard at P >= 3). Checked against the
// float64 oracle with the single-process bounds (tests/
// linear_cross_entropy_util.h: check_forward / check_backward on the whole
// problem, dweight / dbias assembled from the shards), replicated outputs
// bit-equal on every rank, one rank bit-equal to the single-process op, any
// thread count the same bits, and errors raised on every rank with nothing
// written.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "linear_cross_entropy_util.h"
#include "smax/distributed.h"
#include "thread_communicator.h"

namespace smax_test {
namespace {

using smax::distributed::Communicator;
using smax::testing::run_ranks;
using smax::testing::message_of;

// Uneven shards of V classes over P ranks; rank 1 empty when P >= 3.
std::vector<int64_t> shard_sizes(int64_t V, int P) {
  std::vector<int64_t> s(static_cast<size_t>(P), 0);
  int64_t left = V;
  for (int k = 0; k < P - 1; ++k) {
    const int64_t take = (k == 1 && P >= 3) ? 0 : std::min<int64_t>(left, V / P + (k == 0 ? 2 : 1));
    s[k] = take;
    left -= take;
  }
  s[P - 1] = left;
  return s;
}

enum class Mode { kForwardBackward, kLseToBackward, kFused };

// One rank's inputs and outputs.
struct RankData {
  int64_t off = 0, n = 0;
  Tensor w, b, cw;
  Outs o;
  Grads g;
};

struct DistRun {
  std::vector<RankData> ranks;
  std::vector<std::string> errors;
};

// Runs the case on P ranks: the forward (outputs as c.outputs) and the
// backward in `mode`. dloss is shared (replicated).
DistRun run_dist(const Case& c, const Inputs& in, const Tensor& dloss, int P, Mode mode,
                 int threads = 1) {
  const auto sizes = shard_sizes(c.V, P);
  DistRun run;
  run.ranks.resize(static_cast<size_t>(P));
  int64_t off = 0;
  for (int k = 0; k < P; ++k) {
    RankData& d = run.ranks[static_cast<size_t>(k)];
    d.off = off;
    d.n = sizes[k];
    off += d.n;
    d.w = Tensor({d.n, c.D});
    d.w.fill([&](int64_t i) { return in.weight.at(d.off * c.D + i); });
    d.b = Tensor({d.n});
    d.b.fill([&](int64_t i) { return in.bias.at(d.off + i); });
    d.cw = Tensor({d.n});
    d.cw.fill([&](int64_t i) { return in.cw.at(d.off + i); });
    d.o.dst = reduced_tensor(c.ce.loss.reduction, c.N);
    d.o.lse = Tensor({c.N});
    d.o.entropy = Tensor({c.N});
    d.o.tlp = Tensor({c.N});
    d.o.acc = reduced_tensor(c.ce.loss.reduction, c.N);
    d.o.z = reduced_tensor(c.ce.loss.reduction, c.N);
    d.g.dh = Tensor({c.N, c.D});
    d.g.dw = Tensor({d.n, c.D});
    d.g.db = Tensor({d.n});
  }
  auto errors = run_ranks(P, [&](Communicator& comm, int rank) {
    RankData& d = run.ranks[static_cast<size_t>(rank)];
    CrossEntropyOptions ce = c.ce;
    if (in.has_cw) ce.loss.weight = d.cw.view();
    std::optional<TensorView> bias;
    if (in.has_bias) bias = d.b.view();
    smax::SoftmaxOptions opt = c.opt;
    opt.threads = threads;
    std::optional<TensorView> db;
    if (c.dbias) db = d.g.db.view();
    if (mode == Mode::kFused) {
      CrossEntropyOptions f = ce;
      if (c.outputs) f.lse = d.o.lse.view();
      smax::distributed::linear_cross_entropy_fused(
          comm, in.hidden.view(), d.w.view(), in.target.view(), bias, d.o.dst.view(),
          dloss.view(), d.g.dh.view(), d.g.dw.view(), db, f, c.lce, opt);
      return;
    }
    CrossEntropyOptions f = ce;
    if (c.outputs || mode == Mode::kLseToBackward) f.lse = d.o.lse.view();
    if (c.outputs) {
      f.entropy = d.o.entropy.view();
      f.target_logprob = d.o.tlp.view();
      f.accuracy = d.o.acc.view();
      f.z_loss = d.o.z.view();
    }
    smax::distributed::linear_cross_entropy(comm, in.hidden.view(), d.w.view(), in.target.view(),
                                            bias, d.o.dst.view(), f, c.lce, opt);
    CrossEntropyOptions b = ce;
    if (mode == Mode::kLseToBackward) b.lse = d.o.lse.view();
    smax::distributed::linear_cross_entropy_backward(comm, in.hidden.view(), d.w.view(),
                                                     in.target.view(), bias, dloss.view(),
                                                     d.g.dh.view(), d.g.dw.view(), db, b, c.lce,
                                                     opt);
  });
  for (auto& e : errors) run.errors.push_back(message_of(e));
  return run;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  const auto x = a.dense(), y = b.dense();
  // (memcmp must not see the null data() of an empty vector: UBSan.)
  return x.size() == y.size() &&
         (x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0);
}

// dweight / dbias of the whole problem from the ranks' shards.
Grads assemble(const Case& c, const DistRun& run) {
  Grads g;
  g.dh = run.ranks[0].g.dh;
  g.dw = Tensor({c.V, c.D});
  g.db = Tensor({c.V});
  for (const RankData& d : run.ranks) {
    for (int64_t i = 0; i < d.n * c.D; ++i) g.dw.at(d.off * c.D + i) = d.g.dw.at(i);
    for (int64_t j = 0; j < d.n; ++j) g.db.at(d.off + j) = d.g.db.at(j);
  }
  return g;
}

::testing::AssertionResult check_case(Case c, Rng& rng, Mode mode, int P) {
  const std::string what = describe(c) + " P=" + std::to_string(P) +
                           " mode=" + std::to_string(static_cast<int>(mode));
  Inputs in = make_inputs(c.N, c.D, c.V, c.gen, rng);
  Tensor dloss = reduced_tensor(c.ce.loss.reduction, c.N);
  fill_normal(dloss, rng);
  const DistRun run = run_dist(c, in, dloss, P, mode);
  for (const auto& e : run.errors) {
    if (!e.empty()) return ::testing::AssertionFailure() << what << ": " << e;
  }
  // Replicated outputs: every rank the same bits.
  const RankData& r0 = run.ranks[0];
  for (const RankData& d : run.ranks) {
    if (!same_bits(d.o.dst, r0.o.dst) || !same_bits(d.g.dh, r0.g.dh) ||
        !same_bits(d.o.lse, r0.o.lse) || !same_bits(d.o.entropy, r0.o.entropy) ||
        !same_bits(d.o.tlp, r0.o.tlp) || !same_bits(d.o.acc, r0.o.acc) ||
        !same_bits(d.o.z, r0.o.z)) {
      return ::testing::AssertionFailure() << what << ": ranks differ in a replicated output";
    }
  }
  CrossEntropyOptions ce = c.ce;
  if (in.has_cw) ce.loss.weight = in.cw.view();
  const LceProblem p = smax::reference::lce_problem(in.hidden.view(), in.weight.view(),
                                                    in.target.view(), in.bias_view(), ce, c.opt);
  const std::vector<double> g = to_dense(dloss.view());
  const LceResult ref = smax::reference::lce_solve(p, &g);
  CrossEntropyOptions checked = ce;
  if (mode == Mode::kFused) {
    if (c.outputs) checked.lse = r0.o.lse.view();
  } else if (c.outputs) {
    checked.lse = r0.o.lse.view();
    checked.entropy = r0.o.entropy.view();
    checked.target_logprob = r0.o.tlp.view();
    checked.accuracy = r0.o.acc.view();
    checked.z_loss = r0.o.z.view();
  }
  auto fwd = check_forward(in, p, ref, r0.o, checked, what);
  if (!fwd) return fwd;
  return check_backward(p, ref, assemble(c, run), c.dbias, what);
}

// The cases: every option of CrossEntropyOptions the single-process op has.
Case make_case(Reduction red, int variant) {
  Case c = sized_case(13, 9, 37, red);
  switch (variant) {
    case 0: break;
    case 1:  // every option at once, outputs too
      c.ce.label_smoothing = 0.1f;
      c.ce.lse_square_scale = 1e-3f;
      c.ce.softcap = 5.0f;
      c.gen.class_weights = true;
      c.gen.ignore = 0.3;
      c.gen.masked_classes = 4;
      c.outputs = true;
      break;
    case 2:  // scale / temperature, small chunks (several tiles per shard)
      c.opt.scale = 1.5f;
      c.opt.temperature = 0.75f;
      c.lce.token_chunk = 4;
      c.lce.vocab_chunk = 5;
      c.gen.class_weights = true;
      c.outputs = true;
      break;
    case 3:  // label smoothing with every row ignored
      c.ce.label_smoothing = 0.2f;
      c.gen.ignore = 1.0;
      c.outputs = true;
      break;
  }
  return c;
}

TEST(DistributedLce, MatchesTheOracleWithinTheSingleProcessBounds) {
  Rng rng(std::string("distributed_lce"));
  for (Mode mode : {Mode::kForwardBackward, Mode::kLseToBackward, Mode::kFused}) {
    for (Reduction red : {Reduction::kNone, Reduction::kMean, Reduction::kSum}) {
      for (int variant = 0; variant < 4; ++variant) {
        for (int P = 1; P <= 4; ++P) {
          ASSERT_TRUE(check_case(make_case(red, variant), rng, mode, P));
        }
      }
    }
  }
}

// One rank: every output bit-equal to the single-process op.
TEST(DistributedLce, OneRankIsBitEqualToTheSingleProcessOp) {
  Rng rng(std::string("distributed_lce_one_rank"));
  for (Mode mode : {Mode::kForwardBackward, Mode::kLseToBackward, Mode::kFused}) {
    for (int variant = 0; variant < 4; ++variant) {
      for (Reduction red : {Reduction::kNone, Reduction::kMean}) {
        Case c = make_case(red, variant);
        Inputs in = make_inputs(c.N, c.D, c.V, c.gen, rng);
        Tensor dloss = reduced_tensor(red, c.N);
        fill_normal(dloss, rng);
        const DistRun run = run_dist(c, in, dloss, 1, mode);
        ASSERT_EQ(run.errors[0], "");
        const RankData& d = run.ranks[0];
        // The single-process op on the same inputs.
        Outs o;
        o.dst = reduced_tensor(red, c.N);
        o.lse = Tensor({c.N});
        o.entropy = Tensor({c.N});
        o.tlp = Tensor({c.N});
        o.acc = reduced_tensor(red, c.N);
        o.z = reduced_tensor(red, c.N);
        Grads g;
        g.dh = Tensor({c.N, c.D});
        g.dw = Tensor({c.V, c.D});
        g.db = Tensor({c.V});
        CrossEntropyOptions ce = c.ce;
        if (in.has_cw) ce.loss.weight = d.cw.view();
        std::optional<TensorView> bias;
        if (in.has_bias) bias = d.b.view();
        if (mode == Mode::kFused) {
          CrossEntropyOptions f = ce;
          if (c.outputs) f.lse = o.lse.view();
          smax::linear_cross_entropy_fused(in.hidden.view(), d.w.view(), in.target.view(), bias,
                                           o.dst.view(), dloss.view(), g.dh.view(), g.dw.view(),
                                           g.db.view(), f, c.lce, c.opt);
        } else {
          CrossEntropyOptions f = ce;
          if (c.outputs || mode == Mode::kLseToBackward) f.lse = o.lse.view();
          if (c.outputs) {
            f.entropy = o.entropy.view();
            f.target_logprob = o.tlp.view();
            f.accuracy = o.acc.view();
            f.z_loss = o.z.view();
          }
          smax::linear_cross_entropy(in.hidden.view(), d.w.view(), in.target.view(), bias,
                                     o.dst.view(), f, c.lce, c.opt);
          CrossEntropyOptions b = ce;
          if (mode == Mode::kLseToBackward) b.lse = o.lse.view();
          smax::linear_cross_entropy_backward(in.hidden.view(), d.w.view(), in.target.view(),
                                              bias, dloss.view(), g.dh.view(), g.dw.view(),
                                              g.db.view(), b, c.lce, c.opt);
        }
        const std::string what = describe(c) + " mode " + std::to_string(static_cast<int>(mode));
        EXPECT_TRUE(same_bits(d.o.dst, o.dst)) << what;
        EXPECT_TRUE(same_bits(d.o.lse, o.lse)) << what;
        EXPECT_TRUE(same_bits(d.o.entropy, o.entropy)) << what;
        EXPECT_TRUE(same_bits(d.o.tlp, o.tlp)) << what;
        EXPECT_TRUE(same_bits(d.o.acc, o.acc)) << what;
        EXPECT_TRUE(same_bits(d.o.z, o.z)) << what;
        EXPECT_TRUE(same_bits(d.g.dh, g.dh)) << what;
        EXPECT_TRUE(same_bits(d.g.dw, g.dw)) << what;
        EXPECT_TRUE(same_bits(d.g.db, g.db)) << what;
      }
    }
  }
}

TEST(DistributedLce, SameBitsForAnyThreadCount) {
  Rng rng(std::string("distributed_lce_threads"));
  Case c = make_case(Reduction::kMean, 1);
  c.N = 40;
  c.V = 300;
  c.D = 33;
  Inputs in = make_inputs(c.N, c.D, c.V, c.gen, rng);
  Tensor dloss = reduced_tensor(Reduction::kMean, c.N);
  fill_normal(dloss, rng);
  for (Mode mode : {Mode::kForwardBackward, Mode::kFused}) {
    const DistRun one = run_dist(c, in, dloss, 3, mode, 1);
    for (int threads : {2, 3}) {
      const DistRun other = run_dist(c, in, dloss, 3, mode, threads);
      for (size_t k = 0; k < one.ranks.size(); ++k) {
        EXPECT_EQ(other.errors[k], "");
        EXPECT_TRUE(same_bits(one.ranks[k].o.dst, other.ranks[k].o.dst));
        EXPECT_TRUE(same_bits(one.ranks[k].o.lse, other.ranks[k].o.lse));
        EXPECT_TRUE(same_bits(one.ranks[k].g.dh, other.ranks[k].g.dh));
        EXPECT_TRUE(same_bits(one.ranks[k].g.dw, other.ranks[k].g.dw));
        EXPECT_TRUE(same_bits(one.ranks[k].g.db, other.ranks[k].g.db));
      }
    }
  }
}

// bf16 weight shards and an f16 hidden (widened into the f32 tiles, as the
// single-process op does) with bf16 gradients: one rank bit-equal to the
// single-process op, P = 2 and 3 within 1e-5 of it (loss) and every rank the
// same dhidden bits.
TEST(DistributedLce, NarrowOperands) {
  const int64_t N = 11, D = 8, V = 29;
  Rng rng(std::string("distributed_lce_narrow"));
  auto to_bf16 = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
  };
  std::vector<uint16_t> w(static_cast<size_t>(V * D)), h(static_cast<size_t>(N * D));
  for (auto& x : w) x = to_bf16(rng.normal());
  // f16 hidden: small integers / 8 are exact in f16 (sign, exponent 15 bias).
  for (auto& x : h) {
    const int q = static_cast<int>(rng.index(17)) - 8;  // -8 .. 8
    const float v = static_cast<float>(q) / 8.0f;
    // f16 of v: exact for these values.
    uint16_t bits16 = 0;
    if (q != 0) {
      const float a = std::fabs(v);
      int e = 0;
      const float m = std::frexp(a, &e);  // a = m 2^e, m in [0.5, 1)
      const int exp16 = e - 1 + 15;
      const int mant = static_cast<int>((m * 2.0f - 1.0f) * 1024.0f);
      bits16 = static_cast<uint16_t>((q < 0 ? 0x8000 : 0) | (exp16 << 10) | mant);
    }
    x = bits16;
  }
  std::vector<int64_t> target(static_cast<size_t>(N));
  for (auto& t : target) t = rng.index(V);
  const int64_t hshape[2] = {N, D};
  const TensorView hidden = smax::make_view(h.data(), smax::DType::kF16, 2, hshape, nullptr);
  const float one = 1.0f;
  auto run = [&](int P, std::vector<float>& loss, std::vector<std::vector<uint16_t>>& dh) {
    const auto sizes = shard_sizes(V, P);
    loss.assign(static_cast<size_t>(P), 0.0f);
    dh.assign(static_cast<size_t>(P), std::vector<uint16_t>(static_cast<size_t>(N * D)));
    return run_ranks(P, [&](Communicator& comm, int rank) {
      int64_t off = 0;
      for (int q = 0; q < rank; ++q) off += sizes[q];
      const int64_t n = sizes[rank];
      const int64_t wshape[2] = {n, D};
      std::vector<uint16_t> dw(static_cast<size_t>(n * D));
      smax::distributed::linear_cross_entropy_fused(
          comm, hidden,
          smax::make_view(w.data() + off * D, smax::DType::kBF16, 2, wshape, nullptr),
          smax::make_index_view(target.data(), {N}), std::nullopt,
          smax::make_view(&loss[rank], {}), smax::make_view(&one, {}),
          smax::make_view(dh[rank].data(), smax::DType::kBF16, 2, hshape, nullptr),
          smax::make_view(dw.data(), smax::DType::kBF16, 2, wshape, nullptr), std::nullopt);
    });
  };
  // The single-process op.
  float ref_loss = 0.0f;
  std::vector<uint16_t> ref_dh(static_cast<size_t>(N * D)), ref_dw(static_cast<size_t>(V * D));
  const int64_t wshape[2] = {V, D};
  smax::linear_cross_entropy_fused(
      hidden, smax::make_view(w.data(), smax::DType::kBF16, 2, wshape, nullptr),
      smax::make_index_view(target.data(), {N}), std::nullopt, smax::make_view(&ref_loss, {}),
      smax::make_view(&one, {}),
      smax::make_view(ref_dh.data(), smax::DType::kBF16, 2, hshape, nullptr),
      smax::make_view(ref_dw.data(), smax::DType::kBF16, 2, wshape, nullptr), std::nullopt);
  for (int P = 1; P <= 3; ++P) {
    std::vector<float> loss;
    std::vector<std::vector<uint16_t>> dh;
    for (auto& e : run(P, loss, dh)) ASSERT_EQ(message_of(e), "");
    for (int k = 0; k < P; ++k) {
      EXPECT_EQ(dh[k], dh[0]);
      EXPECT_EQ(std::memcmp(&loss[k], &loss[0], 4), 0);
    }
    if (P == 1) {
      EXPECT_EQ(std::memcmp(&loss[0], &ref_loss, 4), 0);
      EXPECT_EQ(dh[0], ref_dh);
    } else {
      EXPECT_NEAR(loss[0], ref_loss, 1e-5 * std::fabs(ref_loss));
    }
  }
}

// Targets only in the first classes: the later ranks hold no target at all.
TEST(DistributedLce, RanksWithoutTargetsAndEmptyShards) {
  Rng rng(std::string("distributed_lce_no_target"));
  for (Reduction red : {Reduction::kNone, Reduction::kMean}) {
    Case c = make_case(red, 1);
    Inputs in = make_inputs(c.N, c.D, c.V, c.gen, rng);
    for (int64_t r = 0; r < c.N; ++r) {
      if (in.target.at(r) != -100) in.target.at(r) = in.target.at(r) % 5;
    }
    Tensor dloss = reduced_tensor(red, c.N);
    fill_normal(dloss, rng);
    for (int P : {2, 3, 4}) {
      for (Mode mode : {Mode::kForwardBackward, Mode::kFused}) {
        const DistRun run = run_dist(c, in, dloss, P, mode);
        for (const auto& e : run.errors) ASSERT_EQ(e, "");
        CrossEntropyOptions ce = c.ce;
        ce.loss.weight = in.cw.view();
        const LceProblem p = smax::reference::lce_problem(in.hidden.view(), in.weight.view(),
                                                          in.target.view(), in.bias_view(), ce,
                                                          c.opt);
        const std::vector<double> g = to_dense(dloss.view());
        const LceResult ref = smax::reference::lce_solve(p, &g);
        CrossEntropyOptions checked = ce;
        checked.lse = run.ranks[0].o.lse.view();
        if (mode != Mode::kFused) {
          checked.entropy = run.ranks[0].o.entropy.view();
          checked.target_logprob = run.ranks[0].o.tlp.view();
          checked.accuracy = run.ranks[0].o.acc.view();
          checked.z_loss = run.ranks[0].o.z.view();
        }
        EXPECT_TRUE(check_forward(in, p, ref, run.ranks[0].o, checked, "no target"));
        EXPECT_TRUE(check_backward(p, ref, assemble(c, run), true, "no target"));
      }
    }
  }
}

// NaN in one rank's weight rows: every row's loss and gradient NaN as in the
// single-process op; the other ranks' dweight rows too (through the GEMMs).
TEST(DistributedLce, NaNInOneShardPoisonsEveryRow) {
  Rng rng(std::string("distributed_lce_nan"));
  Case c = make_case(Reduction::kNone, 0);
  Inputs in = make_inputs(c.N, c.D, c.V, c.gen, rng);
  in.weight.at((c.V - 2) * c.D + 3) = std::nanf("");  // in the last shard
  Tensor dloss = reduced_tensor(Reduction::kNone, c.N);
  fill_normal(dloss, rng);
  const DistRun run = run_dist(c, in, dloss, 3, Mode::kFused);
  for (const auto& e : run.errors) ASSERT_EQ(e, "");
  for (int64_t r = 0; r < c.N; ++r) {
    const bool active = in.target.at(r) != -100;
    EXPECT_EQ(std::isnan(run.ranks[0].o.dst.at(r)), active) << r;
    EXPECT_TRUE(std::isnan(run.ranks[0].g.dh.at(r * c.D)) || !active) << r;
  }
}

TEST(DistributedLce, ErrorsFailEveryRankAndWriteNothing) {
  Rng rng(std::string("distributed_lce_errors"));
  Case c = make_case(Reduction::kMean, 0);
  Inputs in = make_inputs(c.N, c.D, c.V, c.gen, rng);
  Tensor dloss = reduced_tensor(Reduction::kMean, c.N);
  fill_normal(dloss, rng);
  const auto sizes = shard_sizes(c.V, 3);
  // variant 0: rank 2's dweight has the wrong shape; 1: rank 1 uses another
  // reduction; 2: a target >= V; 3: rank 0's targets differ; 4: f64 hidden.
  for (int variant = 0; variant < 5; ++variant) {
    std::vector<Tensor> dh(3, Tensor({c.N, c.D})), dst(3, Tensor(std::vector<int64_t>{}));
    std::vector<double> h64(static_cast<size_t>(c.N * c.D), 0.0);
    auto errors = run_ranks(3, [&](Communicator& comm, int rank) {
      int64_t off = 0;
      for (int k = 0; k < rank; ++k) off += sizes[k];
      const int64_t n = sizes[rank];
      Tensor w({n, c.D});
      w.fill([&](int64_t i) { return in.weight.at(off * c.D + i); });
      Tensor dw({variant == 0 && rank == 2 ? n + 1 : n, c.D});
      I64 target({c.N});
      target.fill([&](int64_t r) -> int64_t {
        if (variant == 2 && r == 3) return c.V;
        if (variant == 3 && rank == 0 && r == 1) return (in.target.at(r) + 1) % c.V;
        return in.target.at(r);
      });
      CrossEntropyOptions ce;
      if (variant == 1 && rank == 1) ce.loss.reduction = Reduction::kSum;
      TensorView hidden = in.hidden.view();
      const int64_t shape[2] = {c.N, c.D};
      if (variant == 4) hidden = smax::make_view(h64.data(), smax::DType::kF64, 2, shape, nullptr);
      smax::distributed::linear_cross_entropy_fused(comm, hidden, w.view(), target.view(),
                                                    std::nullopt, dst[rank].view(), dloss.view(),
                                                    dh[rank].view(), dw.view(), std::nullopt, ce);
    });
    for (int r = 0; r < 3; ++r) {
      const std::string m = message_of(errors[r]);
      SCOPED_TRACE("variant " + std::to_string(variant) + " rank " + std::to_string(r) + ": " + m);
      EXPECT_NE(m, "");
      switch (variant) {
        case 0:
          EXPECT_NE(m.find(r == 2 ? "dweight" : "rank 2 rejected its arguments"), std::string::npos);
          break;
        case 1: EXPECT_NE(m.find("ranks disagree on reduction"), std::string::npos); break;
        case 2: EXPECT_NE(m.find("target 37 (row 3) is outside [0, 37)"), std::string::npos); break;
        case 3: EXPECT_NE(m.find("ranks disagree on targets (checksum)"), std::string::npos); break;
        case 4: EXPECT_NE(m.find("float64 hidden / weight are not supported"), std::string::npos); break;
      }
      // Nothing written: the outputs still hold the sentinel.
      for (int64_t i = 0; i < c.N * c.D; ++i) ASSERT_EQ(dh[r].at(i), Tensor::sentinel());
      EXPECT_EQ(dst[r].at(0), Tensor::sentinel());
    }
  }
}

}  // namespace
}  // namespace smax_test
