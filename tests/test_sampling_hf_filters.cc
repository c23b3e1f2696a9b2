// tests/test_sampling_hf_filters.cc: sampling_filter / sample with the
// filters named after Hugging Face transformers' logits warpers
// (SampleOptions::min_p, min_tokens_to_keep, top_k_ties; include/smax/
// sampling.h), on every SIMD target, f32 and f64 rows:
//  * hand rows with the kept set written out (ties at the k-th, min_p
//    boundaries, -inf, all-equal rows, min_tokens_to_keep above the kept set);
//  * random and adversarial rows against the float64 oracle
//    (ref::sampling_filter / ref::sample): the kept logits and the sample
//    exactly the oracle's (rows whose top-p cut lies within 2e-6 of the
//    boundary skipped, as in test_sampling_filter.cc);
//  * bitwise the same for 1 and 4 threads; errors name the option and
//    write nothing.
// The Python side (python/tests/test_sampling.py) compares the kept sets
// with transformers' own warpers.
#include "f64_rows.h"
#include "sampling_util.h"

namespace smax_test {
namespace {

using smax::TopKTies;

class HfFilters : public TargetTest {};

SampleOptions opts(int64_t top_k, float top_p, float min_p, int64_t keep, TopKTies ties) {
  SampleOptions s;
  s.top_k = top_k;
  s.top_p = top_p;
  s.min_p = min_p;
  s.min_tokens_to_keep = keep;
  s.top_k_ties = ties;
  return s;
}

std::string describe(const SampleOptions& s) {
  return "T=" + std::to_string(s.temperature) + " top_k=" + std::to_string(s.top_k) +
         " top_p=" + std::to_string(s.top_p) + " min_p=" + std::to_string(s.min_p) +
         " keep=" + std::to_string(s.min_tokens_to_keep) +
         (s.top_k_ties == TopKTies::kKeep ? " ties=keep" : " ties=exact");
}

// The kept indices of one f32 row by sampling_filter (-inf elsewhere, the
// kept entries equal to z = fl(t / T)).
std::vector<int64_t> kept_f32(const std::vector<float>& row, const SampleOptions& s) {
  const auto n = static_cast<int64_t>(row.size());
  Tensor x({n}), dst({n});
  x.fill([&](int64_t i) { return row[static_cast<size_t>(i)]; });
  smax::sampling_filter(x.view(), dst.view(), s);
  std::vector<int64_t> kept;
  for (int64_t i = 0; i < n; ++i) {
    if (dst.at(i) > -kInfF) {
      const float z = row[static_cast<size_t>(i)];
      EXPECT_EQ(dst.at(i), s.temperature == 0.0f ? z : z / s.temperature) << i;
      kept.push_back(i);
    }
  }
  // sample draws from the kept set.
  I64Tensor idx(std::vector<int64_t>{});
  for (uint64_t seed : {1u, 2u, 3u}) {
    SampleOptions t = s;
    t.seed = seed;
    smax::sample(x.view(), idx.view(), t);
    if (kept.empty()) {
      EXPECT_EQ(idx.at(0), -1);
    } else {
      EXPECT_TRUE(std::find(kept.begin(), kept.end(), idx.at(0)) != kept.end())
          << "sample " << idx.at(0) << " outside the kept set";
    }
  }
  return kept;
}

// The same on a float64 row.
std::vector<int64_t> kept_f64(const std::vector<float>& row, const SampleOptions& s) {
  const auto n = static_cast<int64_t>(row.size());
  std::vector<double> x(row.begin(), row.end()), dst(row.size());
  smax::sampling_filter(f64_view(x.data(), {n}), f64_view(dst.data(), {n}), s);
  std::vector<int64_t> kept;
  for (int64_t i = 0; i < n; ++i) {
    if (dst[static_cast<size_t>(i)] > -kInfD) kept.push_back(i);
  }
  return kept;
}

void expect_kept(const std::vector<float>& row, const SampleOptions& s,
                 const std::vector<int64_t>& want, const std::string& what) {
  EXPECT_EQ(kept_f32(row, s), want) << what << " (f32) " << describe(s);
  EXPECT_EQ(kept_f64(row, s), want) << what << " (f64) " << describe(s);
}

constexpr auto kExact = TopKTies::kExact;
constexpr auto kKeep = TopKTies::kKeep;

TEST_P(HfFilters, TiesAtTheKth) {
  const std::vector<float> row = {5, 3, 3, 1, 3, 0, -kInfF, 3};
  expect_kept(row, opts(2, 1, 0, 1, kExact), {0, 1}, "exactly k, lower index first");
  expect_kept(row, opts(2, 1, 0, 1, kKeep), {0, 1, 2, 4, 7}, "every entry tied with the k-th");
  expect_kept(row, opts(4, 1, 0, 1, kKeep), {0, 1, 2, 4, 7}, "k ends inside the tied group");
  expect_kept(row, opts(5, 1, 0, 1, kKeep), {0, 1, 2, 4, 7}, "k ends on the group's last");
  expect_kept(row, opts(6, 1, 0, 1, kExact), {0, 1, 2, 3, 4, 7}, "past the group");
  // top_k = 1 raised to min_tokens_to_keep = 3, then the ties of the 3rd.
  expect_kept(row, opts(1, 1, 0, 3, kExact), {0, 1, 2}, "top_k raised to the floor");
  expect_kept(row, opts(1, 1, 0, 3, kKeep), {0, 1, 2, 4, 7}, "raised, with ties");
  // top-p over the tie-extended set: masses e^0, 4 e^-2 -> 1 / (1 + 4e^-2)
  // = 0.6487 for the max; top_p 0.6 keeps it alone, 0.7 one tied entry more.
  expect_kept(row, opts(2, 0.6f, 0, 1, kKeep), {0}, "top-p inside the top-k set");
  expect_kept(row, opts(2, 0.7f, 0, 1, kKeep), {0, 1}, "top-p cuts the tied group by index");
  expect_kept(row, opts(2, 0.6f, 0, 3, kKeep), {0, 1, 2}, "top-p floor");
}

TEST_P(HfFilters, MinPBoundaries) {
  // z - z_max >= log(min_p) in float64. ln 0.5 = -0.69314718...: a float on
  // each side of it, and entries tied with the max for min_p = 1.
  const double l = std::log(0.5);
  const float below = std::nextafter(static_cast<float>(l), -kInfF);
  const float above = std::nextafter(static_cast<float>(l), kInfF);
  ASSERT_LT(static_cast<double>(below), l);
  ASSERT_GT(static_cast<double>(above), l);
  const std::vector<float> row = {0.0f, below, above, -1.0f, 0.0f, -kInfF};
  expect_kept(row, opts(0, 1, 0.5f, 1, kExact), {0, 2, 4}, "min_p 0.5");
  expect_kept(row, opts(0, 1, 1.0f, 1, kExact), {0, 4}, "min_p 1: the ties of the max");
  expect_kept(row, opts(0, 1, 1.0f, 3, kExact), {0, 2, 4}, "min_p 1, floor 3");
  expect_kept(row, opts(0, 1, 1.0f, 4, kExact), {0, 1, 2, 4}, "min_p 1, floor 4");
  expect_kept(row, opts(0, 1, 1e-30f, 1, kExact), {0, 1, 2, 3, 4}, "tiny min_p keeps all");
  expect_kept(row, opts(0, 1, 0.0f, 1, kExact), {0, 1, 2, 3, 4}, "min_p 0 is off");
  // exp(-1) = 0.3679: min_p just below keeps index 3 (z = -1), just above not.
  expect_kept(row, opts(0, 1, 0.36f, 1, kExact), {0, 1, 2, 3, 4}, "min_p 0.36");
  expect_kept(row, opts(0, 1, 0.37f, 1, kExact), {0, 1, 2, 4}, "min_p 0.37");
  // min_p applies after top-k (and its floor after top-k's cut).
  expect_kept(row, opts(1, 1, 0.5f, 1, kExact), {0}, "top-k first");
  expect_kept(row, opts(1, 1, 0.5f, 1, kKeep), {0, 4}, "top-k ties, then min_p");
  expect_kept(row, opts(2, 1, 0.01f, 5, kExact), {0, 1, 2, 3, 4}, "top_k raised to 5");
}

TEST_P(HfFilters, NegInfAllEqualAndFloorsAboveTheKeptSet) {
  // Four visible entries; floors and k beyond them keep the visible ones only.
  const std::vector<float> row = {-kInfF, 10, 0, -kInfF, 0, -kInfF, -3};
  expect_kept(row, opts(0, 0.5f, 0, 1, kExact), {1}, "top-p");
  expect_kept(row, opts(0, 0.5f, 0, 3, kExact), {1, 2, 4}, "top-p floor 3");
  expect_kept(row, opts(0, 0.5f, 0, 100, kExact), {1, 2, 4, 6}, "floor past the row");
  expect_kept(row, opts(6, 1, 0, 1, kKeep), {1, 2, 4, 6}, "k past the visible");
  expect_kept(row, opts(2, 1, 0.9f, 7, kKeep), {1, 2, 4, 6}, "floor 7 = n");
  expect_kept(row, opts(0, 1, 0.5f, 2, kExact), {1, 2}, "min_p floor 2");
  // All equal: ties everywhere.
  const std::vector<float> eq(8, 1.5f);
  expect_kept(eq, opts(3, 1, 0, 1, kExact), {0, 1, 2}, "equal, exact");
  expect_kept(eq, opts(3, 1, 0, 1, kKeep), {0, 1, 2, 3, 4, 5, 6, 7}, "equal, keep");
  expect_kept(eq, opts(0, 0.45f, 0, 1, kExact), {0, 1, 2, 3}, "equal, top-p 0.45");
  expect_kept(eq, opts(0, 0.5f, 0, 6, kExact), {0, 1, 2, 3, 4, 5}, "equal, top-p floor 6");
  expect_kept(eq, opts(0, 1, 1.0f, 1, kExact), {0, 1, 2, 3, 4, 5, 6, 7}, "equal, min_p 1");
  // All -inf: nothing kept, no sample.
  const std::vector<float> none(5, -kInfF);
  expect_kept(none, opts(2, 0.5f, 0.5f, 3, kKeep), {}, "all -inf");
  Tensor x({5});
  x.fill([](int64_t) { return -kInfF; });
  I64Tensor idx(std::vector<int64_t>{});
  smax::sample(x.view(), idx.view(), opts(2, 0.5f, 0.5f, 3, kKeep));
  EXPECT_EQ(idx.at(0), -1);
  // NaN / +inf rows stay NaN rows; greedy ignores the filters.
  for (float bad : {kNanF, kInfF}) {
    Tensor y({4}), dst({4});
    y.fill([&](int64_t i) { return i == 2 ? bad : 1.0f; });
    smax::sampling_filter(y.view(), dst.view(), opts(0, 1, 0.5f, 1, kExact));
    for (int64_t i = 0; i < 4; ++i) EXPECT_TRUE(std::isnan(dst.at(i)));
  }
  SampleOptions g = opts(1, 0.5f, 1.0f, 3, kKeep);
  g.temperature = 0.0f;
  expect_kept({1, 4, 4, 2}, g, {1}, "greedy");
}

// sampling_filter and sample against the oracle on f32 rows; threads 1 and
// 4 bitwise equal. Returns the number of fragile rows skipped via *fragile.
::testing::AssertionResult vs_reference(const Tensor& x, const SampleOptions& s,
                                        const std::string& what, int64_t* fragile) {
  const int64_t rows = x.shape()[0], n = x.shape()[1];
  Tensor dst(x.shape(), {}, 1), dst4(x.shape());
  I64Tensor idx({rows}), idx4({rows});
  SoftmaxOptions o1, o4;
  o1.threads = 1;
  o4.threads = 4;
  smax::sampling_filter(x.view(), dst.view(), s, o1);
  smax::sampling_filter(x.view(), dst4.view(), s, o4);
  smax::sample(x.view(), idx.view(), s, o1);
  smax::sample(x.view(), idx4.view(), s, o4);
  const auto F = ref::sampling_filter(x.view(), s, {}, 2e-6);
  const auto samples = ref::sample(x.view(), s, {});
  for (int64_t r = 0; r < rows; ++r) {
    if (idx.at(r) != idx4.at(r)) {
      return ::testing::AssertionFailure() << what << ": row " << r << " sample differs by threads";
    }
    for (int64_t i = 0; i < n; ++i) {
      const float a = dst.at(r * n + i), b = dst4.at(r * n + i);
      if (std::memcmp(&a, &b, sizeof a) != 0) {
        return ::testing::AssertionFailure() << what << ": threads differ at " << r << ", " << i;
      }
    }
    if (F.fragile[static_cast<size_t>(r)]) {
      ++*fragile;
      continue;
    }
    for (int64_t i = 0; i < n; ++i) {
      const double a = dst.at(r * n + i), b = F.values[static_cast<size_t>(r * n + i)];
      if (!(a == b || (std::isnan(a) && std::isnan(b)))) {
        return ::testing::AssertionFailure() << what << ": row " << r << " element " << i << " = "
                                             << a << ", reference " << b;
      }
    }
    if (idx.at(r) != samples[static_cast<size_t>(r)]) {
      return ::testing::AssertionFailure() << what << ": sample of row " << r << " = "
                                           << idx.at(r) << ", reference "
                                           << samples[static_cast<size_t>(r)];
    }
  }
  return and_guards_intact(::testing::AssertionSuccess(),
                           dst.guards_intact() && idx.guards_intact(), what);
}

std::vector<SampleOptions> option_grid(bool small) {
  std::vector<SampleOptions> v;
  using I = std::vector<int64_t>;
  using F = std::vector<float>;
  const I ks = small ? I{0, 1, 3, 5} : I{0, 50};
  const F ps = small ? F{1.0f, 0.9f, 0.3f} : F{1.0f, 0.9f};
  const F mps = small ? F{0.0f, 0.05f, 0.5f, 1.0f} : F{0.0f, 0.1f};
  const I floors = small ? I{1, 2, 7} : I{1, 3};
  float T = 0.5f;
  for (int64_t k : ks) {
    for (float p : ps) {
      for (float mp : mps) {
        for (int64_t fl : floors) {
          for (TopKTies t : {kExact, kKeep}) {
            SampleOptions s = opts(k, p, mp, fl, t);
            s.temperature = T;
            T = T == 0.5f ? 1.0f : (T == 1.0f ? 1.7f : 0.5f);
            s.seed = static_cast<uint64_t>(v.size()) + 11;
            v.push_back(s);
          }
        }
      }
    }
  }
  return v;
}

TEST_P(HfFilters, RowsVsReference) {
  Rng rng("hf-filters");
  int64_t fragile = 0, checked = 0;
  for (const auto& [name, fill] : data_sets(1)) {
    for (int64_t n : {1, 2, 7, 64, 1001}) {
      Tensor x({3, n});
      fill(x, rng);
      for (const SampleOptions& s : option_grid(n <= 64)) {
        ++checked;
        ASSERT_TRUE(vs_reference(x, s, name + " n=" + std::to_string(n) + " " + describe(s),
                                 &fragile));
      }
    }
  }
  // A vocabulary row with many ties (values on a grid of 1/8).
  Tensor v({2, 32000});
  v.fill([&](int64_t) { return std::round(rng.normal() * 16.0f) / 8.0f; });
  for (const SampleOptions& s : option_grid(false)) {
    ++checked;
    ASSERT_TRUE(vs_reference(v, s, "vocab ties " + describe(s), &fragile));
  }
  EXPECT_LT(fragile * 50, checked) << "too many fragile rows to mean anything";
}

TEST_P(HfFilters, Float64RowsVsReference) {
  int64_t fragile = 0;
  uint64_t seed = 300;
  for (int64_t n : {7, 64, 1001}) {
    const int64_t rows = 4;
    // Values exact in f32, so the oracle reads them from an f32 copy and
    // models the float64 path (Float64Semantics: z = t / T in double).
    std::vector<double> x = make_rows(rows, n, 6.0, 0.0, true, seed++);
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = i % 3 == 0 ? std::round(x[i]) : static_cast<double>(static_cast<float>(x[i]));
    }
    Tensor xf({rows, n});
    xf.fill([&](int64_t i) { return static_cast<float>(x[static_cast<size_t>(i)]); });
    const ref::Float64Semantics semantics(true);
    for (const SampleOptions& s : option_grid(n <= 64)) {
      std::vector<double> dst(x.size());
      std::vector<int64_t> idx(static_cast<size_t>(rows));
      const smax::TensorView xv = f64_view(x.data(), {rows, n});
      smax::sampling_filter(xv, f64_view(dst.data(), {rows, n}), s);
      smax::sample(xv, smax::make_index_view(idx.data(), {rows}), s);
      const auto F = ref::sampling_filter(xf.view(), s, {}, 1e-12);
      const auto samples = ref::sample(xf.view(), s, {});
      for (int64_t r = 0; r < rows; ++r) {
        if (F.fragile[static_cast<size_t>(r)]) {
          ++fragile;
          continue;
        }
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(dst[static_cast<size_t>(r * n + i)], F.values[static_cast<size_t>(r * n + i)])
              << "n=" << n << " row " << r << " i " << i << " " << describe(s);
        }
        ASSERT_EQ(idx[static_cast<size_t>(r)], samples[static_cast<size_t>(r)])
            << "n=" << n << " row " << r << " " << describe(s);
      }
    }
  }
  EXPECT_LT(fragile, 10);
}

TEST_P(HfFilters, BadValuesNameTheOptionAndWriteNothing) {
  Tensor x({2, 5}), dst({2, 5});
  x.fill([](int64_t i) { return static_cast<float>(i % 5); });
  I64Tensor idx({2});
  struct Bad {
    SampleOptions s;
    const char* name;
  };
  std::vector<Bad> bad;
  for (float mp : {kNanF, -0.01f, 1.01f, kInfF}) {
    bad.push_back({opts(0, 1, mp, 1, kExact), "min_p"});
  }
  for (int64_t fl : {0, -1, -1000}) {
    bad.push_back({opts(3, 1, 0, fl, kExact), "min_tokens_to_keep"});
  }
  bad.push_back({opts(3, 1, 0, 1, static_cast<TopKTies>(2)), "top_k_ties"});
  bad.push_back({opts(3, 1, 0, 1, static_cast<TopKTies>(-1)), "top_k_ties"});
  for (const Bad& b : bad) {
    dst.fill([](int64_t) { return 42.0f; });
    idx.fill([](int64_t) { return int64_t{-7}; });
    for (int which = 0; which < 2; ++which) {
      try {
        if (which == 0) {
          smax::sampling_filter(x.view(), dst.view(), b.s);
        } else {
          smax::sample(x.view(), idx.view(), b.s);
        }
        ADD_FAILURE() << b.name << ": no error";
      } catch (const smax::Error& e) {
        EXPECT_EQ(e.status(), smax::Status::kInvalidArgument);
        EXPECT_NE(std::string(e.what()).find(b.name), std::string::npos) << e.what();
      }
    }
    for (int64_t i = 0; i < 10; ++i) ASSERT_EQ(dst.at(i), 42.0f) << b.name;
    for (int64_t r = 0; r < 2; ++r) ASSERT_EQ(idx.at(r), -7) << b.name;
  }
  EXPECT_EQ(smax::parse_top_k_ties("keep"), kKeep);
  EXPECT_EQ(smax::parse_top_k_ties("exact"), kExact);
  EXPECT_STREQ(smax::top_k_ties_name(kKeep), "keep");
  EXPECT_THROW(smax::parse_top_k_ties("ties"), smax::Error);
}

SMAX_INSTANTIATE_PER_TARGET(HfFilters);

}  // namespace
}  // namespace smax_test
