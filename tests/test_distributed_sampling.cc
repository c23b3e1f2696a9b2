// The vocabulary-parallel softmax_topk and sample (include/smax/distributed.h,
// src/ops/distributed/sampling_sharded.cc) against the single-process ops on
// the whole row: ranks are threads (testing/thread_communicator.h), the
// classes of a [rows, V] matrix are split into uneven (and empty) shards in
// rank order. softmax_topk: indices exactly, probabilities within the
// single-process bound (bit-equal with one rank); sample: the same index as
// smax::sample for every P, seed and filter setting (ties across shard
// boundaries, NaN in one shard, all-masked rows); errors on every rank.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "smax/distributed.h"
#include "smax/error.h"
#include "smax/sampling.h"
#include "thread_communicator.h"

namespace {

// Bit-identical float vectors (NaN included; empty vectors never reach
// memcmp, whose arguments must not be null).
bool same_float_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

using smax::distributed::Communicator;
using smax::testing::run_ranks;
using smax::testing::message_of;

constexpr float kInf = std::numeric_limits<float>::infinity();

// Shard sizes of V classes over P ranks: uneven, the second rank of >= 3
// empty.
std::vector<int64_t> shard_sizes(int64_t V, int P) {
  std::vector<int64_t> s(static_cast<size_t>(P), 0);
  if (P == 1) {
    s[0] = V;
    return s;
  }
  int64_t left = V;
  for (int k = 0; k < P - 1; ++k) {
    int64_t take = (k == 1 && P >= 3) ? 0 : std::min<int64_t>(left, V / P + (k == 0 ? 3 : -1));
    take = std::max<int64_t>(0, take);
    s[k] = take;
    left -= take;
  }
  s[P - 1] = left;
  return s;
}

// Rows x n_k slice of a rows x V row-major matrix.
std::vector<float> shard_of(const std::vector<float>& x, int64_t rows, int64_t V, int64_t off,
                            int64_t n) {
  std::vector<float> out(static_cast<size_t>(rows * n));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < n; ++i) out[r * n + i] = x[r * V + off + i];
  }
  return out;
}

std::vector<float> random_logits(int64_t rows, int64_t V, uint32_t seed, float spread) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, spread);
  std::vector<float> x(static_cast<size_t>(rows * V));
  for (auto& v : x) v = nd(rng);
  return x;
}

struct TopkOut {
  std::vector<float> probs;
  std::vector<int64_t> idx;
};

TopkOut topk_single(const std::vector<float>& x, int64_t rows, int64_t V, int64_t k, bool renorm,
                    int threads = 1) {
  TopkOut o{std::vector<float>(static_cast<size_t>(rows * k)),
            std::vector<int64_t>(static_cast<size_t>(rows * k))};
  smax::SoftmaxTopkOptions t;
  t.k = k;
  t.renormalize = renorm;
  smax::SoftmaxOptions so;
  so.threads = threads;
  smax::softmax_topk(smax::make_view(x.data(), {rows, V}), smax::make_view(o.probs.data(), {rows, k}),
                     smax::make_index_view(o.idx.data(), {rows, k}), t, so);
  return o;
}

// Every rank's outputs of the sharded softmax_topk.
std::vector<TopkOut> topk_sharded(const std::vector<float>& x, int64_t rows, int64_t V, int64_t k,
                                  bool renorm, int P, int threads = 1) {
  const auto sizes = shard_sizes(V, P);
  std::vector<TopkOut> outs(static_cast<size_t>(P));
  auto errors = run_ranks(P, [&](Communicator& comm, int rank) {
    int64_t off = 0;
    for (int q = 0; q < rank; ++q) off += sizes[q];
    const int64_t n = sizes[rank];
    const auto mine = shard_of(x, rows, V, off, n);
    TopkOut& o = outs[rank];
    o.probs.assign(static_cast<size_t>(rows * k), -7.0f);
    o.idx.assign(static_cast<size_t>(rows * k), -7);
    smax::SoftmaxTopkOptions t;
    t.k = k;
    t.renormalize = renorm;
    smax::SoftmaxOptions so;
    so.threads = threads;
    smax::distributed::softmax_topk(comm, smax::make_view(mine.data(), {rows, n}),
                                    smax::make_view(o.probs.data(), {rows, k}),
                                    smax::make_index_view(o.idx.data(), {rows, k}), t, so);
  });
  for (auto& e : errors) EXPECT_EQ(message_of(e), "");
  return outs;
}

void expect_topk_matches(const std::vector<float>& x, int64_t rows, int64_t V, int64_t k,
                         bool renorm) {
  const TopkOut ref = topk_single(x, rows, V, k, renorm);
  for (int P = 1; P <= 4; ++P) {
    SCOPED_TRACE("P = " + std::to_string(P));
    const auto outs = topk_sharded(x, rows, V, k, renorm, P);
    for (int rank = 0; rank < P; ++rank) {
      // Replicated: every rank the same bits.
      EXPECT_TRUE(same_float_bits(outs[rank].probs, outs[0].probs));
      EXPECT_EQ(outs[rank].idx, outs[0].idx);
    }
    EXPECT_EQ(outs[0].idx, ref.idx);
    for (size_t j = 0; j < ref.probs.size(); ++j) {
      const float got = outs[0].probs[j], want = ref.probs[j];
      if (P == 1 || std::isnan(want)) {
        // One rank: bit-equal to the single-process op (NaN rows: NaN).
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(got)) << j;
        } else {
          EXPECT_EQ(got, want) << j;
        }
      } else {
        // Both within 2e-6 relative (+1e-36) of the exact value.
        EXPECT_LE(std::fabs(got - want), 4e-6 * std::fabs(want) + 2e-36) << j;
      }
    }
  }
}

TEST(DistributedTopk, MatchesTheSingleProcessOpForEveryRankCount) {
  const int64_t rows = 5, V = 97;
  const auto x = random_logits(rows, V, 11, 3.0f);
  for (int64_t k : {1, 4, 17, 97}) {
    SCOPED_TRACE("k = " + std::to_string(k));
    expect_topk_matches(x, rows, V, k, false);
    expect_topk_matches(x, rows, V, k, true);
  }
}

TEST(DistributedTopk, TiesAcrossShardBoundariesNaNAndMaskedRows) {
  const int64_t rows = 4, V = 40;
  std::vector<float> x(static_cast<size_t>(rows * V));
  for (int64_t i = 0; i < V; ++i) {
    x[i] = static_cast<float>(i % 3);              // row 0: many ties everywhere
    x[V + i] = i == 25 ? std::nanf("") : 0.5f * (i % 5);  // row 1: NaN in a late shard
    x[2 * V + i] = -kInf;                          // row 2: all masked
    x[3 * V + i] = i < 30 ? -kInf : 1.0f;          // row 3: only the last shard visible, tied
  }
  for (int64_t k : {1, 6, 13, 40}) {
    SCOPED_TRACE("k = " + std::to_string(k));
    expect_topk_matches(x, rows, V, k, false);
    expect_topk_matches(x, rows, V, k, true);
  }
}

TEST(DistributedTopk, SameBitsForAnyThreadCount) {
  const int64_t rows = 9, V = 3000;
  const auto x = random_logits(rows, V, 5, 2.0f);
  const auto one = topk_sharded(x, rows, V, 20, false, 3, 1);
  for (int threads : {2, 3}) {
    const auto other = topk_sharded(x, rows, V, 20, false, 3, threads);
    EXPECT_TRUE(same_float_bits(one[0].probs, other[0].probs));
    EXPECT_EQ(one[0].idx, other[0].idx);
  }
}

TEST(DistributedTopk, ErrorsFailEveryRankAndWriteNothing) {
  const int64_t rows = 2, V = 10;
  const auto x = random_logits(rows, V, 3, 1.0f);
  const auto sizes = shard_sizes(V, 3);
  // k > V (each shard may be smaller than k; the whole row is not).
  for (int64_t k : {11, 3}) {
    std::vector<std::vector<float>> probs(3, std::vector<float>(static_cast<size_t>(rows * 12), -7));
    auto errors = run_ranks(3, [&](Communicator& comm, int rank) {
      int64_t off = 0;
      for (int q = 0; q < rank; ++q) off += sizes[q];
      const auto mine = shard_of(x, rows, V, off, sizes[rank]);
      std::vector<int64_t> idx(static_cast<size_t>(rows * 12), -7);
      // k = 3: rank 2 asks for 4 (disagreement).
      const int64_t kk = (k == 3 && rank == 2) ? 4 : k;
      smax::distributed::softmax_topk(
          comm, smax::make_view(mine.data(), {rows, sizes[rank]}),
          smax::make_view(probs[rank].data(), {rows, kk}),
          smax::make_index_view(idx.data(), {rows, kk}), smax::SoftmaxTopkOptions{kk, false});
    });
    for (int r = 0; r < 3; ++r) {
      const std::string m = message_of(errors[r]);
      EXPECT_NE(m.find("softmax_topk (vocab-parallel)"), std::string::npos) << m;
      EXPECT_NE(m.find(k == 3 ? "ranks disagree on k" : "k must be in [0, V = 10]"),
                std::string::npos)
          << m;
      for (float v : probs[r]) EXPECT_EQ(v, -7.0f);
    }
  }
  // One rank's bad output shape: that rank names it, the others name the rank.
  auto errors = run_ranks(2, [&](Communicator& comm, int rank) {
    const int64_t n = rank == 0 ? 4 : 6;
    std::vector<float> mine(static_cast<size_t>(rows * n), 0.0f);
    std::vector<float> probs(16, -7);
    std::vector<int64_t> idx(16, -7);
    smax::distributed::softmax_topk(comm, smax::make_view(mine.data(), {rows, n}),
                                    smax::make_view(probs.data(), {rows, rank == 1 ? 3 : 2}),
                                    smax::make_index_view(idx.data(), {rows, 2}),
                                    smax::SoftmaxTopkOptions{2, false});
    for (float v : probs) EXPECT_EQ(v, -7.0f);
  });
  EXPECT_NE(message_of(errors[1]).find("probs shape"), std::string::npos) << message_of(errors[1]);
  EXPECT_EQ(message_of(errors[0]),
            "softmax_topk (vocab-parallel): rank 1 rejected its arguments (see that rank's error)");
  // float64 logits are rejected on every rank.
  auto f64 = run_ranks(2, [&](Communicator& comm, int) {
    std::vector<double> mine(4, 0.0);
    std::vector<float> probs(2);
    std::vector<int64_t> idx(2);
    const int64_t shape[2] = {2, 2};
    smax::distributed::softmax_topk(
        comm, smax::make_view(mine.data(), smax::DType::kF64, 2, shape, nullptr),
        smax::make_view(probs.data(), {2, 1}), smax::make_index_view(idx.data(), {2, 1}),
        smax::SoftmaxTopkOptions{1, false});
  });
  EXPECT_NE(message_of(f64[0]).find("float64 src is not supported"), std::string::npos);
  EXPECT_NE(message_of(f64[1]).find("float64 src is not supported"), std::string::npos);
}

// A bool mask on the last shard only (padding classes), and the class axis
// first ([n_k, rows], axis 0): as the single-process ops on the whole
// [rows, V] row-major logits with the whole mask.
TEST(DistributedTopkAndSample, MaskOnOneShardAndAxisZero) {
  const int64_t rows = 4, V = 50, k = 6;
  const auto x = random_logits(rows, V, 31, 2.0f);
  std::vector<uint8_t> mask(static_cast<size_t>(rows * V), 1);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = V - 6; i < V; ++i) mask[r * V + i] = 0;
  }
  mask[2 * V + V - 7] = 0;
  smax::SoftmaxOptions full;
  full.bool_mask = smax::make_bool_view(mask.data(), {rows, V});
  std::vector<float> ref_p(static_cast<size_t>(rows * k));
  std::vector<int64_t> ref_i(static_cast<size_t>(rows * k)), ref_s(static_cast<size_t>(rows));
  smax::softmax_topk(smax::make_view(x.data(), {rows, V}), smax::make_view(ref_p.data(), {rows, k}),
                     smax::make_index_view(ref_i.data(), {rows, k}), k, full);
  smax::SampleOptions so;
  so.seed = 5;
  so.top_k = 10;
  so.top_p = 0.9f;
  smax::sample(smax::make_view(x.data(), {rows, V}), smax::make_index_view(ref_s.data(), {rows}),
               so, full);
  for (int P = 1; P <= 4; ++P) {
    SCOPED_TRACE("P = " + std::to_string(P));
    const auto sizes = shard_sizes(V, P);
    std::vector<std::vector<float>> probs(P, std::vector<float>(static_cast<size_t>(k * rows)));
    std::vector<std::vector<int64_t>> idx(P, std::vector<int64_t>(static_cast<size_t>(k * rows)));
    std::vector<std::vector<int64_t>> smp(P, std::vector<int64_t>(static_cast<size_t>(rows)));
    auto errors = run_ranks(P, [&](Communicator& comm, int rank) {
      int64_t off = 0;
      for (int q = 0; q < rank; ++q) off += sizes[q];
      const int64_t n = sizes[rank];
      std::vector<float> xt(static_cast<size_t>(n * rows));
      std::vector<uint8_t> mt(static_cast<size_t>(n * rows));
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t r = 0; r < rows; ++r) {
          xt[i * rows + r] = x[r * V + off + i];
          mt[i * rows + r] = mask[r * V + off + i];
        }
      }
      smax::SoftmaxOptions o;
      o.axis = 0;
      if (rank == P - 1) o.bool_mask = smax::make_bool_view(mt.data(), {n, rows});
      smax::distributed::softmax_topk(comm, smax::make_view(xt.data(), {n, rows}),
                                      smax::make_view(probs[rank].data(), {k, rows}),
                                      smax::make_index_view(idx[rank].data(), {k, rows}),
                                      smax::SoftmaxTopkOptions{k, false}, o);
      smax::distributed::sample(comm, smax::make_view(xt.data(), {n, rows}),
                                smax::make_index_view(smp[rank].data(), {rows}), so, o);
    });
    for (auto& e : errors) ASSERT_EQ(message_of(e), "");
    // Every masked class (V - 7 .. V - 1) lies in the last shard.
    for (int rank = 0; rank < P; ++rank) {
      EXPECT_EQ(smp[rank], ref_s);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < k; ++j) {
          EXPECT_EQ(idx[rank][j * rows + r], ref_i[r * k + j]);
          const float want = ref_p[r * k + j];
          EXPECT_LE(std::fabs(probs[rank][j * rows + r] - want), 4e-6 * want + 2e-36);
        }
      }
    }
  }
}

// ---- sample ------------------------------------------------------------------

std::vector<int64_t> sample_single(const std::vector<float>& x, int64_t rows, int64_t V,
                                   const smax::SampleOptions& o) {
  std::vector<int64_t> out(static_cast<size_t>(rows), -7);
  smax::sample(smax::make_view(x.data(), {rows, V}), smax::make_index_view(out.data(), {rows}), o);
  return out;
}

std::vector<std::vector<int64_t>> sample_sharded(const std::vector<float>& x, int64_t rows,
                                                 int64_t V, const smax::SampleOptions& o, int P,
                                                 int threads = 1) {
  const auto sizes = shard_sizes(V, P);
  std::vector<std::vector<int64_t>> outs(static_cast<size_t>(P));
  auto errors = run_ranks(P, [&](Communicator& comm, int rank) {
    int64_t off = 0;
    for (int q = 0; q < rank; ++q) off += sizes[q];
    const int64_t n = sizes[rank];
    const auto mine = shard_of(x, rows, V, off, n);
    outs[rank].assign(static_cast<size_t>(rows), -7);
    smax::SoftmaxOptions so;
    so.threads = threads;
    smax::distributed::sample(comm, smax::make_view(mine.data(), {rows, n}),
                              smax::make_index_view(outs[rank].data(), {rows}), o, so);
  });
  for (auto& e : errors) EXPECT_EQ(message_of(e), "");
  return outs;
}

std::vector<smax::SampleOptions> sample_settings() {
  std::vector<smax::SampleOptions> v;
  auto add = [&](float T, int64_t top_k, float top_p, float min_p, int64_t floor,
                 smax::TopKTies ties) {
    smax::SampleOptions o;
    o.temperature = T;
    o.top_k = top_k;
    o.top_p = top_p;
    o.min_p = min_p;
    o.min_tokens_to_keep = floor;
    o.top_k_ties = ties;
    v.push_back(o);
  };
  using smax::TopKTies;
  add(1.0f, 0, 1.0f, 0.0f, 1, TopKTies::kExact);      // plain Gumbel-max
  add(0.0f, 0, 1.0f, 0.0f, 1, TopKTies::kExact);      // greedy
  add(0.7f, 5, 1.0f, 0.0f, 1, TopKTies::kExact);      // top-k
  add(1.0f, 50, 0.9f, 0.0f, 1, TopKTies::kExact);     // top-k + top-p
  add(1.3f, 8, 0.8f, 0.05f, 3, TopKTies::kKeep);      // every filter, ties kept
  add(1.0f, 3, 1.0f, 0.0f, 1, TopKTies::kKeep);       // top-k ties kept
  add(1.0f, 0, 0.9f, 0.0f, 1, TopKTies::kExact);      // nucleus over the whole row
  add(0.5f, 0, 0.5f, 0.1f, 4, TopKTies::kExact);      // nucleus + min-p + floor
  add(1.0f, 0, 1.0f, 0.2f, 1, TopKTies::kExact);      // min-p alone
  add(1.0f, 0, 1.0f, 0.99f, 6, TopKTies::kExact);     // min-p below its floor
  add(1.0f, 2000, 1.0f, 0.0f, 1, TopKTies::kExact);   // top-k >= V: everything
  return v;
}

void expect_samples_match(const std::vector<float>& x, int64_t rows, int64_t V) {
  for (const auto& base : sample_settings()) {
    for (uint64_t seed : {0ull, 1ull, 42ull, 0x9e3779b97f4a7c15ull}) {
      smax::SampleOptions o = base;
      o.seed = seed;
      SCOPED_TRACE("T " + std::to_string(o.temperature) + " top_k " + std::to_string(o.top_k) +
                   " top_p " + std::to_string(o.top_p) + " min_p " + std::to_string(o.min_p) +
                   " floor " + std::to_string(o.min_tokens_to_keep) + " seed " +
                   std::to_string(seed));
      const auto ref = sample_single(x, rows, V, o);
      for (int P = 1; P <= 4; ++P) {
        const auto outs = sample_sharded(x, rows, V, o, P);
        for (int rank = 0; rank < P; ++rank) EXPECT_EQ(outs[rank], ref) << "P " << P;
      }
    }
  }
}

TEST(DistributedSample, SameTokenAsTheSingleProcessOpForEveryRankCount) {
  const int64_t rows = 6, V = 1500;
  expect_samples_match(random_logits(rows, V, 7, 2.5f), rows, V);
}

TEST(DistributedSample, FlatRowsWidenTheNucleus) {
  // Nearly flat rows: the nucleus (top_p 0.9) holds most of the 3000
  // classes, beyond the first 1024 candidates.
  const int64_t rows = 3, V = 3000;
  expect_samples_match(random_logits(rows, V, 17, 0.01f), rows, V);
}

TEST(DistributedSample, TiesNaNAndMaskedRows) {
  const int64_t rows = 5, V = 40;
  std::vector<float> x(static_cast<size_t>(rows * V));
  for (int64_t i = 0; i < V; ++i) {
    x[i] = static_cast<float>(i % 3);                       // ties across every boundary
    x[V + i] = i == 33 ? std::nanf("") : 0.1f * (i % 7);    // NaN in the last shard
    x[2 * V + i] = -kInf;                                   // all masked
    x[3 * V + i] = i < 30 ? -kInf : 2.0f;                   // visible only in the last shard
    x[4 * V + i] = i == 12 ? kInf : 0.0f;                   // +inf (greedy picks it)
  }
  expect_samples_match(x, rows, V);
}

TEST(DistributedSample, SameTokensForAnyThreadCount) {
  const int64_t rows = 12, V = 2000;
  const auto x = random_logits(rows, V, 23, 1.5f);
  for (const auto& o : sample_settings()) {
    const auto one = sample_sharded(x, rows, V, o, 3, 1);
    for (int threads : {2, 3}) EXPECT_EQ(sample_sharded(x, rows, V, o, 3, threads)[0], one[0]);
  }
}

TEST(DistributedSample, ErrorsFailEveryRankAndWriteNothing) {
  const int64_t rows = 2;
  // One rank's bad option value; then a disagreement on the seed.
  for (int variant = 0; variant < 2; ++variant) {
    std::vector<std::vector<int64_t>> outs(3, std::vector<int64_t>(rows, -7));
    auto errors = run_ranks(3, [&](Communicator& comm, int rank) {
      std::vector<float> mine(static_cast<size_t>(rows * 4), 0.0f);
      smax::SampleOptions o;
      if (variant == 0 && rank == 1) o.top_p = 0.0f;
      if (variant == 1) o.seed = rank == 2 ? 8 : 7;
      smax::distributed::sample(comm, smax::make_view(mine.data(), {rows, 4}),
                                smax::make_index_view(outs[rank].data(), {rows}), o);
    });
    for (int r = 0; r < 3; ++r) {
      const std::string m = message_of(errors[r]);
      if (variant == 0) {
        EXPECT_NE(m.find(r == 1 ? "top_p must be in (0, 1]" : "rank 1 rejected its arguments"),
                  std::string::npos)
            << m;
      } else {
        EXPECT_EQ(m, "sample (vocab-parallel): ranks disagree on seed: rank 0 has 7, rank 2 has 8");
      }
      for (int64_t v : outs[r]) EXPECT_EQ(v, -7);
    }
  }
  // Mismatched row counts.
  auto errors = run_ranks(2, [&](Communicator& comm, int rank) {
    const int64_t r = rank == 0 ? 2 : 3;
    std::vector<float> mine(static_cast<size_t>(r * 4), 0.0f);
    std::vector<int64_t> out(static_cast<size_t>(r), -7);
    smax::distributed::sample(comm, smax::make_view(mine.data(), {r, 4}),
                              smax::make_index_view(out.data(), {r}));
  });
  for (auto& e : errors) {
    EXPECT_EQ(message_of(e), "sample (vocab-parallel): ranks disagree on dim 0: rank 0 has 2, "
                             "rank 1 has 3");
  }
}

}  // namespace
