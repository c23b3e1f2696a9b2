// tests/mpi/test_mpi_sampling.cc: the vocabulary-parallel softmax_topk and
// sample (smax/distributed.h) over MPI against the single-process ops on the
// whole rows (mpi_test_util.h): global indices, replicated outputs, the same
// sample for a seed whatever the number of ranks; even, uneven and empty
// shards, more ranks than classes, a bad k on one rank, disagreeing seeds.
// Tolerances: softmax_topk's probabilities twice its bound
// (include/smax/sampling.h: 2e-6 relative + 1e-36); indices exact (random
// normal logits have no ties).
#include <algorithm>
#include <string>
#include <vector>

#include "mpi_test_util.h"
#include "smax/distributed.h"
#include "smax/sampling.h"

namespace {

using namespace smax_mpi_test;
namespace dist = smax::distributed;

constexpr int64_t kRows = 6;

std::vector<int64_t> vocab_sizes() {
  std::vector<int64_t> v = {29, 2000};
  if (ranks() >= 2) v.push_back(ranks() - 1);
  return v;
}

TEST(MpiSoftmaxTopk, MatchesTheWholeRow) {
  uint64_t salt = 1;
  for (int64_t v : vocab_sizes()) {
    for (Split split : splits()) {
      for (bool renormalize : {false, true}) {
        const Shard s = my_shard(shard_sizes(v, ranks(), split));
        std::vector<float> full = normal(kRows * v, salt++), shard = columns(full, kRows, v, s);
        const int64_t k = std::min<int64_t>(5, v);
        smax::SoftmaxTopkOptions t;
        t.k = k;
        t.renormalize = renormalize;
        smax::SoftmaxOptions o;
        o.threads = 1;
        std::vector<float> p_whole(kRows * k), p(kRows * k);
        std::vector<int64_t> i_whole(kRows * k), idx(kRows * k);
        smax::softmax_topk(f32(full, {kRows, v}), f32(p_whole, {kRows, k}),
                           i64(i_whole, {kRows, k}), t, o);
        dist::softmax_topk(world(), f32(shard, {kRows, s.n}), f32(p, {kRows, k}),
                           i64(idx, {kRows, k}), t, o);
        const std::string what = std::string(split_name(split)) + ", V = " + std::to_string(v) +
                                 (renormalize ? ", renormalised" : "");
        EXPECT_EQ(idx, i_whole) << what;
        expect_close(p, p_whole, 4e-6, 2e-36, "probs, " + what);
        expect_replicated(p, "probs");
        expect_replicated(idx, "indices");
      }
    }
  }
}

TEST(MpiSample, SameGlobalIndexAsTheWholeRow) {
  struct Filter {
    const char* name;
    float temperature, top_p, min_p;
    int64_t top_k;
  };
  const Filter filters[] = {{"plain", 1.0f, 1.0f, 0.0f, 0},
                            {"greedy", 0.0f, 1.0f, 0.0f, 0},
                            {"top_k 7", 0.8f, 1.0f, 0.0f, 7},
                            {"top_p 0.9", 1.2f, 0.9f, 0.0f, 0},
                            {"top_k 50, top_p 0.95, min_p 0.05", 1.0f, 0.95f, 0.05f, 50}};
  uint64_t salt = 100;
  for (int64_t v : vocab_sizes()) {
    for (Split split : splits()) {
      for (const Filter& f : filters) {
        const Shard s = my_shard(shard_sizes(v, ranks(), split));
        std::vector<float> full = normal(kRows * v, salt++), shard = columns(full, kRows, v, s);
        smax::SampleOptions so;
        so.temperature = f.temperature;
        so.top_k = f.top_k;
        so.top_p = f.top_p;
        so.min_p = f.min_p;
        so.seed = 1234 + salt;
        smax::SoftmaxOptions o;
        o.threads = 1;
        std::vector<int64_t> whole(kRows), got(kRows);
        smax::sample(f32(full, {kRows, v}), i64(whole, {kRows}), so, o);
        dist::sample(world(), f32(shard, {kRows, s.n}), i64(got, {kRows}), so, o);
        EXPECT_EQ(got, whole) << f.name << ", " << split_name(split) << ", V = " << v;
        expect_replicated(got, "samples");
      }
    }
  }
}

TEST(MpiSoftmaxTopk, KBeyondTheVocabularyFailsEveryRank) {
  const int64_t v = 10;
  const Shard s = my_shard(shard_sizes(v, ranks(), Split::kEven));
  std::vector<float> full = normal(kRows * v, 7), shard = columns(full, kRows, v, s);
  const int64_t k = v + 1;
  std::vector<float> p(kRows * k, -1.0f);
  std::vector<int64_t> idx(kRows * k, -1);
  smax::SoftmaxOptions o;
  o.threads = 1;
  const std::string e = error_of([&] {
    dist::softmax_topk(world(), f32(shard, {kRows, s.n}), f32(p, {kRows, k}),
                       i64(idx, {kRows, k}), smax::SoftmaxTopkOptions{k, false}, o);
  });
  EXPECT_NE(e, "") << "rank " << rank() << " did not throw";
  EXPECT_EQ(e.find("not an smax::Error"), std::string::npos) << e;
  for (float x : p) EXPECT_EQ(x, -1.0f);
}

TEST(MpiSample, RanksThatDisagreeOnTheSeedFailEveryRank) {
  const int64_t v = 50;
  const Shard s = my_shard(shard_sizes(v, ranks(), Split::kUneven));
  std::vector<float> full = normal(kRows * v, 9), shard = columns(full, kRows, v, s);
  smax::SampleOptions so;
  so.seed = rank() == 0 ? 1 : 2;
  std::vector<int64_t> got(kRows, -5);
  smax::SoftmaxOptions o;
  o.threads = 1;
  const std::string e = error_of(
      [&] { dist::sample(world(), f32(shard, {kRows, s.n}), i64(got, {kRows}), so, o); });
  EXPECT_NE(e.find("ranks disagree on"), std::string::npos) << e;
  for (int64_t x : got) EXPECT_EQ(x, -5);
}

}  // namespace
