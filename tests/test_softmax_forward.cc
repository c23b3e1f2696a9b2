// tests/test_softmax_forward.cc: softmax, log_softmax and logsumexp against
// the float64 reference, for every algorithm, on every SIMD target this
// machine supports (value-parameterised over smax::supported_targets()).
//
// Sizes: 0 .. 70 exhaustively, tile +- 1, primes, 1000/1001, vocabularies,
// and the long-row segment boundary 2^16 (65535, 65536, 65537, 3 * 2^16 + 5),
// with aligned and misaligned (data + 1) starts and row strides > cols.
// Data: the adversarial distributions of test_util.h (rows in [90, 100],
// normal * 20, all-negative, constant, +inf, NaN, all -inf, some -inf,
// denormals, huge magnitudes). Bounds: test_util.h (exactly the header's).
#include <cstring>
#include <string>
#include <vector>

#include "softmax_util.h"

namespace smax_test {
namespace {

const std::vector<Op> kForwardOps = {Op::kSoftmax, Op::kLogSoftmax, Op::kLogsumexp};

std::vector<int64_t> small_sizes() {
  std::vector<int64_t> v;
  for (int64_t n = 0; n <= 70; ++n) v.push_back(n);
  return v;
}

const std::vector<int64_t> kTileSizes = {63, 64, 65, 127, 128, 129, 255, 256, 257};
const std::vector<int64_t> kPrimes = {97, 251, 509, 1021, 1031, 2039, 4093, 8191, 16381};
const std::vector<int64_t> kLongSizes = {1000,  1001,  21841, 32000,
                                         65535, 65536, 65537, 128256,
                                         3 * 65536 + 5};

class Forward : public SweepTargetTest {};

TEST_P(Forward, SmallSizesAligned) {
  sweep("sweep/", kForwardOps, small_sizes(), Data::kUniform, {}, 3, 0);
}

TEST_P(Forward, SmallSizesMisaligned) {
  sweep("sweep/", kForwardOps, small_sizes(), Data::kWide, {}, 2, 1);
}

TEST_P(Forward, TileSizesAndPrimes) {
  std::vector<int64_t> sizes = kTileSizes;
  sizes.insert(sizes.end(), kPrimes.begin(), kPrimes.end());
  sweep("sweep/", kForwardOps, sizes, Data::kUniform, {}, 3, 0);
  sweep("sweep/", kForwardOps, sizes, Data::kWide, {}, 2, 1);
}

TEST_P(Forward, LongRowsWide) {
  sweep("sweep/", kForwardOps, kLongSizes, Data::kWide, {}, 2, 0);
}

TEST_P(Forward, LongRowsHighMisaligned) {
  sweep("sweep/", kForwardOps, kLongSizes, Data::kHigh, {}, 2, 1);
}

// Every adversarial distribution on short, tile-edge and segment-edge rows.
TEST_P(Forward, Adversarial) {
  const std::vector<int64_t> sizes = {1, 2, 3, 5, 8, 16, 17, 33, 64, 65, 100, 257, 1000, 1025,
                                      65537};
  for (Data d : all_data()) {
    SCOPED_TRACE(data_name(d));
    sweep("sweep/", kForwardOps, sizes, d, {}, 3, 0);
    if (HasFatalFailure()) return;
  }
  // Four segments of the long-row path, where the special values must
  // survive the merge of partial results.
  for (Data d : {Data::kWide, Data::kSomeNegInf, Data::kNan, Data::kPosInf, Data::kAllNegInf,
                 Data::kNanInNegInf}) {
    SCOPED_TRACE(data_name(d));
    sweep("sweep/", kForwardOps, {3 * 65536 + 5}, d, {}, 1, 0);
    if (HasFatalFailure()) return;
  }
}

TEST_P(Forward, AdversarialMisaligned) {
  const std::vector<int64_t> sizes = {1, 7, 31, 64, 129, 1001};
  for (Data d : all_data()) {
    SCOPED_TRACE(data_name(d));
    sweep("sweep/", kForwardOps, sizes, d, {}, 3, 1);
    if (HasFatalFailure()) return;
  }
}

// One batch whose rows are of different kinds: the batched three-pass
// kernels run each row's last pass in the same loop as the next row's
// (min, max) scan, so every kind must come out right after every other
// (special rows end early, others scale or log; flushing and flush-free
// scales). Also in place (dst is src), which must give the same bits.
TEST_P(Forward, MixedRowKindsInOneBatch) {
  Rng rng("mixed-rows");
  std::vector<Data> kinds;
  for (Data d : all_data()) {
    for (Data other : {Data::kUniform, Data::kNan, Data::kAllNegInf, Data::kWide}) {
      kinds.push_back(d);
      kinds.push_back(other);
    }
  }
  const int64_t rows = static_cast<int64_t>(kinds.size());
  // 8193: rows beyond kPrefetchMinCols, whose exp pass prefetches the next.
  for (int64_t n : {2, 7, 31, 64, 65, 1000, 1001, 8193}) {
    for (int64_t misalign : {0, 1}) {
      Tensor src({rows, n}, {}, misalign);
      for (int64_t r = 0; r < rows; ++r) {
        Tensor row({1, n});
        fill_rows(row, 1, kinds[static_cast<size_t>(r)], rng);
        for (int64_t k = 0; k < n; ++k) src.at(r * n + k) = row.at(k);
      }
      for (Op op : kForwardOps) {
        for (Algorithm a : all_algorithms()) {
          SoftmaxOptions o;
          o.algorithm = a;
          Tensor dst = op == Op::kLogsumexp ? Tensor({rows}, {}, misalign)
                                            : Tensor({rows, n}, {}, misalign);
          const std::string what = std::string(op_name(op)) + " mixed rows n=" +
                                   std::to_string(n) + " " + algo_str(a) + " misalign " +
                                   std::to_string(misalign);
          EXPECT_TRUE(check_op(op, src, dst, o, rng, what)) << "target " << GetParam();
          if (op == Op::kLogsumexp) continue;
          Tensor inplace = src;
          library_forward(op, inplace.view(), inplace.view(), o);
          for (int64_t i = 0; i < rows * n; ++i) {
            const float x = inplace.at(i), y = dst.at(i);
            ASSERT_TRUE(std::memcmp(&x, &y, sizeof(float)) == 0)
                << what << ": in place differs at " << i << " (" << x << " vs " << y << ")";
          }
        }
      }
    }
  }
}

TEST_P(Forward, EmptyRowNan) {
  SoftmaxOptions o;
  o.empty_row = EmptyRow::kNan;
  const std::vector<int64_t> sizes = {1, 2, 9, 64, 65, 1000, 65537};
  sweep("sweep/", kForwardOps, sizes, Data::kAllNegInf, o, 3, 0);
  sweep("sweep/", kForwardOps, sizes, Data::kSomeNegInf, o, 3, 0);  // not empty: unaffected
  sweep("sweep/", kForwardOps, sizes, Data::kNan, o, 3, 1);
}

TEST_P(Forward, ScaleAndTemperature) {
  struct ST {
    float scale, temperature;
  };
  const ST cases[] = {{0.125f, 1.0f}, {1.0f, 0.7f}, {3.0f, 2.0f}, {0.3f, 0.7f}, {1.0f, 0.05f}};
  const std::vector<int64_t> sizes = {1, 7, 64, 65, 1000, 65537};
  for (const ST& st : cases) {
    SCOPED_TRACE("scale " + std::to_string(st.scale) + " temperature " +
                 std::to_string(st.temperature));
    SoftmaxOptions o;
    o.scale = st.scale;
    o.temperature = st.temperature;
    sweep("sweep/", kForwardOps, sizes, Data::kUniform, o, 3, 0);
    sweep("sweep/", kForwardOps, sizes, Data::kWide, o, 2, 1);
    sweep("sweep/", kForwardOps, {9, 1000}, Data::kHuge, o, 3, 0);
    if (HasFatalFailure()) return;
  }
}

// Row stride > cols (padded rows), for src and dst with different paddings.
TEST_P(Forward, RowStrideGreaterThanCols) {
  Rng rng("padded");
  for (Op op : kForwardOps) {
    for (Algorithm a : all_algorithms()) {
      for (int64_t n : {1, 17, 64, 1000, 65537}) {
        const int64_t rows = n > 4096 ? 2 : 5;
        Tensor src({rows, n}, {n + 13, 1}, 1);
        fill_rows(src, 1, Data::kWide, rng);
        Tensor dst = op == Op::kLogsumexp ? Tensor({rows}, {3}) : Tensor({rows, n}, {n + 7, 1});
        SoftmaxOptions o;
        o.algorithm = a;
        EXPECT_TRUE(check_op(op, src, dst, o, rng,
                             "padded n=" + std::to_string(n) + " " + algo_str(a)));
      }
    }
  }
}

// logsumexp writes into a dst that keeps the axis as size 1, too.
TEST_P(Forward, LogSumExpKeepDim) {
  Rng rng("keepdim");
  for (Algorithm a : all_algorithms()) {
    for (int64_t n : {0, 1, 5, 64, 1000, 65537}) {
      Tensor src({3, n});
      fill_rows(src, 1, Data::kUniform, rng);
      Tensor dst({3, 1});
      SoftmaxOptions o;
      o.algorithm = a;
      EXPECT_TRUE(check_op(Op::kLogsumexp, src, dst, o, rng, "keepdim n=" + std::to_string(n)));
    }
  }
}

// n == 0: empty output, no error, nothing written; logsumexp -inf per row.
TEST_P(Forward, EmptyAxis) {
  for (Algorithm a : all_algorithms()) {
    SoftmaxOptions o;
    o.algorithm = a;
    Tensor src({4, 0}), dst({4, 0}), lse({4});
    lse.poison();
    EXPECT_NO_THROW(smax::softmax(src.view(), dst.view(), o));
    EXPECT_NO_THROW(smax::log_softmax(src.view(), dst.view(), o));
    EXPECT_TRUE(dst.guards_intact());
    EXPECT_NO_THROW(smax::logsumexp(src.view(), lse.view(), o));
    for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(lse.at(i), -kInfF) << i;
    // A null pointer is fine when there is nothing to read.
    TensorView null_src = src.view(), null_dst = dst.view();
    null_src.data = nullptr;
    null_dst.data = nullptr;
    EXPECT_NO_THROW(smax::softmax(null_src, null_dst, o));
    // Zero rows of a non-empty axis.
    Tensor s0({0, 5}), d0({0, 5}), l0({0});
    EXPECT_NO_THROW(smax::softmax(s0.view(), d0.view(), o));
    EXPECT_NO_THROW(smax::logsumexp(s0.view(), l0.view(), o));
  }
}

// n == 1: softmax 1, log_softmax 0, logsumexp t_0 (exactly).
TEST_P(Forward, SingleElementExact) {
  for (Algorithm a : all_algorithms()) {
    SoftmaxOptions o;
    o.algorithm = a;
    const float vals[] = {0.0f, -3.5f, 1e30f, -FLT_MAX, 88.0f, 0.3f, -1e-3f, 7.25f};
    const int64_t k = sizeof(vals) / sizeof(vals[0]);
    Tensor src({k, 1}), dst({k, 1}), lse({k});
    src.fill([&](int64_t i) { return vals[i]; });
    smax::softmax(src.view(), dst.view(), o);
    for (int64_t i = 0; i < k; ++i) {
      EXPECT_EQ(dst.at(i), 1.0f) << "softmax " << algo_str(a) << " x=" << vals[i];
    }
    smax::log_softmax(src.view(), dst.view(), o);
    for (int64_t i = 0; i < k; ++i) {
      EXPECT_EQ(dst.at(i), 0.0f) << "log_softmax " << algo_str(a) << " x=" << vals[i];
    }
    smax::logsumexp(src.view(), lse.view(), o);
    for (int64_t i = 0; i < k; ++i) {
      EXPECT_EQ(lse.at(i), vals[i]) << "logsumexp " << algo_str(a) << " x=" << vals[i];
    }
  }
}

// No denormal is ever produced: exp underflow flushes to exact 0.
TEST_P(Forward, NoDenormalOutputs) {
  Rng rng("denormal-out");
  for (Algorithm a : all_algorithms()) {
    for (int64_t n : {2, 33, 1000, 65537}) {
      Tensor src({2, n}), dst({2, n});
      src.fill([&](int64_t i) { return i % n == 0 ? 0.0f : rng.uniform(-110.0f, -80.0f); });
      SoftmaxOptions o;
      o.algorithm = a;
      smax::softmax(src.view(), dst.view(), o);
      int64_t bad = 0;
      for (int64_t i = 0; i < src.numel(); ++i) {
        const float v = dst.at(i);
        if (v != 0.0f && std::fabs(v) < FLT_MIN) ++bad;
      }
      EXPECT_EQ(bad, 0) << algo_str(a) << " n=" << n << ": denormal outputs";
    }
  }
}

// The scale pass drops its denormal flush when every output is provably
// >= FLT_MIN (kernels::softmax_outputs_normal: e^(t_min - m) / n with a
// margin). Rows at that boundary: n - 1 entries at the max (the sum is
// n - 1) and one at t_min just inside and just outside the condition. With
// n = 2^k - 1 (0.7 bit_width(n) - ln(n - 1) = 0.007 k + O(2^-k)) the
// smallest output is then within a factor e^(0.007 k + 0.01) of FLT_MIN
// (1.1-1.2): it must match the reference and never be a denormal. Rows of
// the row kernels and of the segment path (131071).
TEST_P(Forward, FlushFreeScaleAtItsBoundary) {
  Rng rng("flush-free-boundary");
  for (int64_t n : {31, 1023, 4095, 131071}) {
    unsigned bits = 0;
    for (int64_t k = n; k != 0; k >>= 1) ++bits;
    for (double margin : {0.0101, 0.0099, -0.5}) {
      const float t_min =
          static_cast<float>(std::log(static_cast<double>(FLT_MIN)) + 0.7 * bits + margin);
      const int64_t rows = n > 4096 ? 1 : 3;
      Tensor src({rows, n});
      src.fill([&](int64_t i) { return i % n == n / 2 ? t_min : 0.0f; });
      for (Algorithm a : all_algorithms()) {
        SoftmaxOptions o;
        o.algorithm = a;
        Tensor dst({rows, n});
        const std::string what = "n=" + std::to_string(n) + " t_min=" + std::to_string(t_min) +
                                 " " + algo_str(a);
        EXPECT_TRUE(check_op(Op::kSoftmax, src, dst, o, rng, what)) << "target " << GetParam();
        for (int64_t i = 0; i < rows * n; ++i) {
          const float v = dst.at(i);
          ASSERT_FALSE(v != 0.0f && std::fabs(v) < FLT_MIN) << what << ": denormal at " << i;
        }
      }
    }
  }
}

// Where no term can be flushed (moderate logits), three-pass-recompute
// stores exactly what reload stores: the exp of the sum pass times 1 / sum
// (the table exp on AVX2, the flush-free polynomial elsewhere), so its rows
// sum to 1 as consistently as reload's.
TEST_P(Forward, RecomputeStoresReloadsBits) {
  Rng rng("recompute-reload");
  for (int64_t n : {2, 7, 64, 65, 1000, 1001, 4099}) {
    Tensor src({3, n}), a({3, n}), b({3, n});
    fill_rows(src, 1, Data::kUniform, rng);
    SoftmaxOptions o;
    o.algorithm = Algorithm::kThreePassReload;
    smax::softmax(src.view(), a.view(), o);
    o.algorithm = Algorithm::kThreePassRecompute;
    smax::softmax(src.view(), b.view(), o);
    for (int64_t i = 0; i < 3 * n; ++i) {
      const float x = a.at(i), y = b.at(i);
      ASSERT_TRUE(std::memcmp(&x, &y, sizeof(float)) == 0)
          << "n=" << n << " [" << i << "] reload " << x << " recompute " << y << " target "
          << GetParam();
    }
  }
}

// The capped target is the one kernels dispatch to, and kernel_name says so
// in the grammar <dtype>_<family>__<target>_<tags>.
TEST_P(Forward, KernelNameNamesTheTarget) {
  std::string target = GetParam();
  for (char& c : target) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* op : {"softmax", "log_softmax", "logsumexp", "softmax_backward",
                         "log_softmax_backward"}) {
    for (Algorithm a : all_algorithms()) {
      const std::string name = smax::kernel_name(op, algo_str(a), 1000);
      EXPECT_NE(name.find("__" + target + "_"), std::string::npos) << name;
      EXPECT_EQ(name.rfind(std::string("f32_") + op, 0), 0u) << name;
    }
  }
}

SMAX_INSTANTIATE_PER_TARGET(Forward);

// The cap must hold for every later call, whatever queries come in between.
// (With Highway 1.0.3, hwy::SupportedTargets() re-initialises the dispatch
// mask with the uncapped CPU targets; a query such as active_target() must
// not let kernels escape the cap.)
TEST(Runtime, TargetCapSurvivesQueries) {
  const std::vector<std::string> targets = smax::supported_targets();
  ASSERT_FALSE(targets.empty());
  const std::string lowest = targets.back();
  std::string low = lowest;
  for (char& c : low) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  smax::set_max_target(lowest);
  for (int round = 0; round < 3; ++round) {
    EXPECT_EQ(smax::active_target(), lowest);
    (void)smax::supported_targets();
    Tensor x({1000}), y({1000});
    x.fill([](int64_t i) { return static_cast<float>(i % 17); });
    smax::softmax(x.view(), y.view());
    const std::string name = smax::kernel_name("softmax", "auto", 1000);
    EXPECT_NE(name.find("__" + low + "_"), std::string::npos)
        << "round " << round << ": capped to " << lowest << " but kernels dispatch to " << name;
  }
  smax::set_max_target(initial_target());
}

// kernel_name follows the naming grammar and names the active target.
TEST(ForwardIntrospection, KernelNames) {
  for (const char* op : {"softmax", "log_softmax", "logsumexp", "softmax_backward",
                         "log_softmax_backward"}) {
    for (Algorithm a : all_algorithms()) {
      const std::string name = smax::kernel_name(op, algo_str(a), 32000);
      EXPECT_EQ(name.rfind("f32_", 0), 0u) << name;
      EXPECT_NE(name.find("__"), std::string::npos) << name;
    }
  }
  EXPECT_FALSE(smax::compiled_targets().empty());
  EXPECT_FALSE(smax::supported_targets().empty());
}

}  // namespace
}  // namespace smax_test
