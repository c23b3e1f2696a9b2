// tests/test_errors.cc: every caller mistake gets smax::Error with
// Status::kInvalidArgument, a message naming the argument, and no write to
// the destination (checked against a sentinel fill of dst and its guards).
#include <climits>
#include <cstring>
#include <string>
#include <vector>

#include "smax/smax.h"
#include "test_util.h"

namespace smax_test {
namespace {

constexpr int64_t kRows = 2, kCols = 3;

/// Runs `call` on a sentinel-filled dst and checks the error and that dst
/// (view and guards) is untouched.
::testing::AssertionResult rejects(Tensor& dst, const std::function<void(const TensorView&)>& call,
                                   const std::string& needle) {
  dst.poison();
  const std::vector<float> before = dst.storage();
  ::testing::AssertionResult r = throws_invalid([&] { call(dst.view()); }, needle);
  if (!r) return r;
  if (std::memcmp(before.data(), dst.storage().data(), before.size() * sizeof(float)) != 0) {
    return ::testing::AssertionFailure() << "dst was written before the error: " << r.message();
  }
  return r;
}

Tensor good_src() {
  Tensor t({kRows, kCols});
  t.fill([](int64_t i) { return static_cast<float>(i) * 0.5f; });
  return t;
}

/// Checks all three forward ops with `src` and `o` (valid dst for each).
void expect_forward_rejects(const TensorView& src, const SoftmaxOptions& o,
                            const std::string& needle, const std::string& what) {
  Tensor dst({kRows, kCols}), lse({kRows});
  EXPECT_TRUE(rejects(dst, [&](const TensorView& d) { smax::softmax(src, d, o); }, needle))
      << "softmax: " << what;
  EXPECT_TRUE(rejects(dst, [&](const TensorView& d) { smax::log_softmax(src, d, o); }, needle))
      << "log_softmax: " << what;
  if (o.axis == -1 || o.axis == 1) {
    EXPECT_TRUE(rejects(lse, [&](const TensorView& d) { smax::logsumexp(src, d, o); }, needle))
        << "logsumexp: " << what;
  } else {
    EXPECT_TRUE(rejects(dst, [&](const TensorView& d) { smax::logsumexp(src, d, o); }, needle))
        << "logsumexp: " << what;
  }
}

/// Checks both backward ops with y = `y`, dy = `dy`, options `o`.
void expect_backward_rejects(const TensorView& y, const TensorView& dy, const SoftmaxOptions& o,
                             const std::string& needle, const std::string& what) {
  Tensor dx({kRows, kCols});
  EXPECT_TRUE(
      rejects(dx, [&](const TensorView& d) { smax::softmax_backward(y, dy, d, o); }, needle))
      << "softmax_backward: " << what;
  EXPECT_TRUE(rejects(
      dx, [&](const TensorView& d) { smax::log_softmax_backward(y, dy, d, o); }, needle))
      << "log_softmax_backward: " << what;
}

TEST(Errors, NullDataWithNonEmptyShape) {
  Tensor src = good_src();
  TensorView v = src.view();
  v.data = nullptr;
  expect_forward_rejects(v, {}, "src", "null src");
  expect_backward_rejects(v, src.view(), {}, "y", "null y");
  expect_backward_rejects(src.view(), v, {}, "dy", "null dy");
  TensorView dst = src.view();
  dst.data = nullptr;
  EXPECT_TRUE(throws_invalid([&] { smax::softmax(src.view(), dst); }, "dst"));
}

// Data not aligned to the element type (fuzz finding: a misaligned int64
// target was read as int64_t: UB). Rejected for every dtype, nothing written.
TEST(Errors, MisalignedData) {
  Tensor src = good_src();
  TensorView v = src.view();
  v.data = reinterpret_cast<char*>(v.data) + 1;
  expect_forward_rejects(v, {}, "src", "misaligned src");
  alignas(8) unsigned char raw[8 * 4] = {};
  std::vector<float> x(6, 0.5f), loss(2, -1.0f);
  const int64_t shape[1] = {2}, strides[1] = {1};
  const auto target = smax::make_view(raw + 4, smax::DType::kI64, 1, shape, strides);
  smax::LossOptions lo;
  lo.reduction = smax::Reduction::kNone;
  EXPECT_TRUE(throws_invalid(
      [&] { smax::sparsemax_loss(smax::make_view(x.data(), {2, 3}), target, smax::make_view(loss.data(), {2}), lo); },
      "aligned"));
  EXPECT_EQ(loss[0], -1.0f);
  EXPECT_EQ(loss[1], -1.0f);
}

// Fuzz regression (fuzz/regressions/losses/describe_rank_out_of_range_ubsan):
// an error message described a view of rank 9, and describe() indexed
// shape[8] (UBSan). describe() and numel() are safe on any rank; the op
// rejects the view, naming the rank.
TEST(Errors, DescribeAnyRank) {
  float x[4] = {1, 2, 3, 4};
  for (int rank : {9, 100, -1, INT_MAX}) {
    smax::TensorView v = smax::make_view(x, {4});
    v.rank = rank;
    const std::string d = v.describe();
    EXPECT_NE(d.find("rank " + std::to_string(rank)), std::string::npos) << d;
    (void)v.numel();  // no out-of-bounds read (UBSan in the sanitizer suite)
    float y[4] = {};
    EXPECT_TRUE(throws_invalid([&] { smax::softmax(v, smax::make_view(y, {4})); }, "rank"));
  }
}

TEST(Errors, NegativeSize) {
  Tensor src = good_src();
  TensorView v = src.view();
  v.shape[0] = -2;
  expect_forward_rejects(v, {}, "src", "negative size");
  v = src.view();
  v.shape[1] = -1;
  expect_forward_rejects(v, {}, "src", "negative size in the axis");
}

TEST(Errors, ElementCountOverflow) {
  Tensor src = good_src();
  TensorView v = src.view();
  v.shape[0] = int64_t{1} << 32;
  v.shape[1] = int64_t{1} << 32;
  v.strides[0] = 0;
  v.strides[1] = 0;
  expect_forward_rejects(v, {}, "src", "2^64 elements");
  v.rank = 3;
  v.shape[0] = v.shape[1] = v.shape[2] = int64_t{1} << 22;  // 2^66
  expect_forward_rejects(v, {}, "src", "2^66 elements");
}

TEST(Errors, StrideByteOffsetsOverflow) {
  Tensor src = good_src();
  TensorView v = src.view();
  v.strides[0] = INT64_MAX / 2;  // * 4 bytes overflows
  expect_forward_rejects(v, {}, "src", "stride INT64_MAX/2");
  v.strides[0] = INT64_MIN / 2;
  expect_forward_rejects(v, {}, "src", "stride INT64_MIN/2");
  v = src.view();
  v.strides[1] = INT64_MAX / 3;
  expect_forward_rejects(v, {}, "src", "axis stride INT64_MAX/3");
  // The same for dst.
  Tensor dst({kRows, kCols});
  TensorView d = dst.view();
  d.strides[0] = INT64_MAX / 2;
  EXPECT_TRUE(throws_invalid([&] { smax::softmax(src.view(), d); }, "dst"));
  EXPECT_TRUE(dst.guards_intact());
}

TEST(Errors, AxisOutOfRange) {
  Tensor src = good_src();
  for (int64_t axis : std::vector<int64_t>{2, 3, -3, -100, INT64_MAX, INT64_MIN}) {
    SoftmaxOptions o;
    o.axis = axis;
    expect_forward_rejects(src.view(), o, "axis", "axis " + std::to_string(axis));
    expect_backward_rejects(src.view(), src.view(), o, "axis", "axis " + std::to_string(axis));
  }
}

TEST(Errors, ShapeMismatch) {
  Tensor src = good_src(), wrong({kCols, kRows}), wrong_rank({kRows, kCols, 1});
  EXPECT_TRUE(rejects(wrong, [&](const TensorView& d) { smax::softmax(src.view(), d); }, "dst"));
  EXPECT_TRUE(
      rejects(wrong_rank, [&](const TensorView& d) { smax::log_softmax(src.view(), d); }, "dst"));
  Tensor lse_bad({kCols});
  EXPECT_TRUE(
      rejects(lse_bad, [&](const TensorView& d) { smax::logsumexp(src.view(), d); }, "dst"));
  Tensor lse_bad2({kRows, 2});
  EXPECT_TRUE(
      rejects(lse_bad2, [&](const TensorView& d) { smax::logsumexp(src.view(), d); }, "dst"));
  // Backward: dy and dx must have y's shape.
  expect_backward_rejects(src.view(), wrong.view(), {}, "dy", "dy shape");
  Tensor dx_bad({kCols, kRows});
  EXPECT_TRUE(rejects(
      dx_bad, [&](const TensorView& d) { smax::softmax_backward(src.view(), src.view(), d); },
      "dx"));
}

TEST(Errors, MaskNotBroadcastable) {
  Tensor src = good_src(), m33({3, 3}), m2({kRows, 2}), big({1, kRows, kCols});
  SoftmaxOptions o;
  o.additive_mask = m33.view();
  expect_forward_rejects(src.view(), o, "additive_mask", "additive [3,3] over [2,3]");
  o.additive_mask = m2.view();
  expect_forward_rejects(src.view(), o, "additive_mask", "additive [2,2] over [2,3]");
  o.additive_mask = big.view();
  expect_forward_rejects(src.view(), o, "additive_mask", "additive rank 3 over rank 2");
  o = {};
  BoolTensor b({kRows, 2});
  o.bool_mask = b.view();
  expect_forward_rejects(src.view(), o, "bool_mask", "bool [2,2] over [2,3]");
  // A null mask pointer with a non-empty shape.
  TensorView null_mask = m33.view();
  null_mask.data = nullptr;
  null_mask.shape[0] = 1;
  o = {};
  o.additive_mask = null_mask;
  expect_forward_rejects(src.view(), o, "additive_mask", "null additive mask");
}

TEST(Errors, WrongDtype) {
  Tensor src = good_src();
  BoolTensor bsrc({kRows, kCols});
  expect_forward_rejects(bsrc.view(), {}, "src", "bool src");
  expect_backward_rejects(bsrc.view(), src.view(), {}, "y", "bool y");
  expect_backward_rejects(src.view(), bsrc.view(), {}, "dy", "bool dy");
  SoftmaxOptions o;
  o.bool_mask = src.view();  // f32 where bool is required
  expect_forward_rejects(src.view(), o, "bool_mask", "f32 bool_mask");
  o = {};
  o.additive_mask = bsrc.view();  // bool where f32 is required
  expect_forward_rejects(src.view(), o, "additive_mask", "bool additive_mask");
  BoolTensor bdst({kRows, kCols});
  EXPECT_TRUE(throws_invalid([&] { smax::softmax(src.view(), bdst.view()); }, "dst"));
  TensorView weird = src.view();
  weird.dtype = static_cast<DType>(42);
  expect_forward_rejects(weird, {}, "src", "dtype 42");
}

TEST(Errors, ScaleAndTemperature) {
  Tensor src = good_src();
  for (float bad : {0.0f, -0.0f, -1.0f, kNanF, kInfF, -kInfF}) {
    SoftmaxOptions o;
    o.scale = bad;
    expect_forward_rejects(src.view(), o, "scale", "scale " + std::to_string(bad));
    expect_backward_rejects(src.view(), src.view(), o, "scale", "scale " + std::to_string(bad));
    o = {};
    o.temperature = bad;
    expect_forward_rejects(src.view(), o, "temperature", "temperature " + std::to_string(bad));
    expect_backward_rejects(src.view(), src.view(), o, "temperature",
                            "temperature " + std::to_string(bad));
  }
}

TEST(Errors, UnknownEnumValues) {
  Tensor src = good_src();
  for (int bad : {99, -1, 5}) {
    SoftmaxOptions o;
    o.algorithm = static_cast<Algorithm>(bad);
    expect_forward_rejects(src.view(), o, "algorithm", "algorithm " + std::to_string(bad));
  }
  for (int bad : {2, -1, 77}) {
    SoftmaxOptions o;
    o.empty_row = static_cast<EmptyRow>(bad);
    expect_forward_rejects(src.view(), o, "empty_row", "empty_row " + std::to_string(bad));
  }
}

TEST(Errors, ParseNames) {
  EXPECT_TRUE(throws_invalid([] { smax::parse_algorithm("bogus"); }, "bogus"));
  EXPECT_TRUE(throws_invalid([] { smax::parse_algorithm(""); }, "algorithm"));
  EXPECT_TRUE(throws_invalid([] { smax::parse_empty_row("maybe"); }, "maybe"));
  for (Algorithm a : all_algorithms()) {
    EXPECT_EQ(smax::parse_algorithm(algo_str(a)), a);
    EXPECT_EQ(std::string(smax::algorithm_name(a)), algo_str(a));
  }
  EXPECT_EQ(smax::parse_empty_row("zero"), EmptyRow::kZero);
  EXPECT_EQ(smax::parse_empty_row("nan"), EmptyRow::kNan);
  EXPECT_STREQ(smax::empty_row_name(EmptyRow::kNan), "nan");
}

// Every parse_X / X_name pair shares one table helper (src/core/enum_names.h):
// one message format listing the accepted names, exact case-sensitive match,
// "unknown" for a value outside the enum.
TEST(Errors, ParseNamesUnifiedFormat) {
  auto what = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const smax::Error& e) {
      EXPECT_EQ(e.status(), smax::Status::kInvalidArgument);
      return std::string(e.what());
    }
    return std::string("<no throw>");
  };
  EXPECT_EQ(what([] { smax::parse_reduction("avg"); }),
            "parse_reduction: unknown reduction 'avg' (expected one of: none, mean, sum)");
  EXPECT_EQ(what([] { smax::parse_algorithm("Online"); }),
            "parse_algorithm: unknown algorithm 'Online' (expected one of: auto, "
            "three-pass-reload, three-pass-recompute, two-pass, online)");
  EXPECT_EQ(what([] { smax::parse_empty_row(""); }),
            "parse_empty_row: unknown empty_row policy '' (expected one of: zero, nan)");
  EXPECT_EQ(what([] { smax::parse_precision("F32"); }),
            "parse_precision: unknown precision 'F32' (expected one of: f32, f16, bf16)");
  EXPECT_EQ(what([] { smax::parse_soft_nms_method("soft"); }),
            "parse_soft_nms_method: unknown soft_nms method 'soft' (expected one of: hard, "
            "linear, gaussian)");
  EXPECT_EQ(what([] { smax::parse_attention_normalizer("Softmax"); }),
            "parse_attention_normalizer: unknown attention normalizer 'Softmax' (expected one "
            "of: softmax, sigmoid, softpick, ssmax, stablemax, softplus, power)");
  EXPECT_EQ(smax::parse_reduction("sum"), smax::Reduction::kSum);
  EXPECT_EQ(smax::parse_precision("bf16"), smax::Precision::kBF16);
  EXPECT_EQ(smax::parse_soft_nms_method("linear"), smax::SoftNmsMethod::kLinear);
  EXPECT_EQ(smax::parse_attention_normalizer("ssmax"), smax::AttentionNormalizer::kSsmax);
  EXPECT_STREQ(smax::algorithm_name(static_cast<Algorithm>(99)), "unknown");
  EXPECT_STREQ(smax::empty_row_name(static_cast<EmptyRow>(-1)), "unknown");
  EXPECT_STREQ(smax::reduction_name(static_cast<smax::Reduction>(7)), "unknown");
  EXPECT_STREQ(smax::precision_name(static_cast<smax::Precision>(3)), "unknown");
  EXPECT_STREQ(smax::soft_nms_method_name(static_cast<smax::SoftNmsMethod>(3)), "unknown");
  EXPECT_STREQ(smax::attention_normalizer_name(static_cast<smax::AttentionNormalizer>(7)),
               "unknown");
}

TEST(Errors, ThreadsNegative) {
  Tensor src = good_src();
  SoftmaxOptions o;
  o.threads = -1;
  expect_forward_rejects(src.view(), o, "threads", "threads -1");
  expect_backward_rejects(src.view(), src.view(), o, "threads", "threads -1");
  EXPECT_TRUE(throws_invalid([] { smax::set_max_threads(0); }, "threads"));
  EXPECT_TRUE(throws_invalid([] { smax::set_max_threads(-3); }, "threads"));
}

TEST(Errors, DstZeroStride) {
  Tensor src = good_src(), dst({kRows, kCols});
  TensorView d = dst.view();
  d.strides[0] = 0;  // two rows written to the same place
  EXPECT_TRUE(throws_invalid([&] { smax::softmax(src.view(), d); }, "dst"));
  d = dst.view();
  d.strides[1] = 0;
  EXPECT_TRUE(throws_invalid([&] { smax::log_softmax(src.view(), d); }, "dst"));
  // Self-overlap without a zero stride: strides [1, 1] map (0,1) and (1,0)
  // to one element.
  d = dst.view();
  d.strides[0] = 1;
  EXPECT_TRUE(throws_invalid([&] { smax::softmax(src.view(), d); }, "dst"));
  Tensor lse({kRows});
  TensorView l = lse.view();
  l.strides[0] = 0;
  EXPECT_TRUE(throws_invalid([&] { smax::logsumexp(src.view(), l); }, "dst"));
  for (float v : dst.storage()) ASSERT_EQ(v, kSentinel);
  // dx of the backward, too.
  TensorView dxv = dst.view();
  dxv.strides[0] = 0;
  EXPECT_TRUE(throws_invalid([&] { smax::softmax_backward(src.view(), src.view(), dxv); }, "dx"));
  // A zero stride on a dim of size 1 is fine.
  Tensor s1({1, kCols}), d1({1, kCols});
  s1.fill([](int64_t i) { return static_cast<float>(i); });
  TensorView d1v = d1.view();
  d1v.strides[0] = 0;
  EXPECT_NO_THROW(smax::softmax(s1.view(), d1v));
}

TEST(Errors, PartialOverlap) {
  // One buffer; src = [2,3] at offset 0; dst = [2,3] at offset 3 (shares row 1).
  Tensor buf({3 * kCols});
  buf.fill([](int64_t i) { return static_cast<float>(i); });
  float* base = static_cast<float*>(buf.view().data);
  TensorView src = smax::make_view(base, {kRows, kCols});
  TensorView dst = smax::make_view(base + kCols, {kRows, kCols});
  const std::vector<float> before = buf.storage();
  EXPECT_TRUE(throws_invalid([&] { smax::softmax(src, dst); }, "dst"));
  EXPECT_TRUE(throws_invalid([&] { smax::log_softmax(src, dst); }, "dst"));
  EXPECT_EQ(before, buf.storage());
  // Same pointer, different strides: not exact in-place aliasing.
  TensorView transposed = smax::make_view(base, {kRows, kCols}, {1, kRows});
  EXPECT_TRUE(throws_invalid([&] { smax::softmax(src, transposed); }, "dst"));
  EXPECT_EQ(before, buf.storage());
  // logsumexp output inside its input.
  TensorView lse = smax::make_view(base + 1, {kRows});
  EXPECT_TRUE(throws_invalid([&] { smax::logsumexp(src, lse); }, "dst"));
  EXPECT_EQ(before, buf.storage());
  // dst overlapping a mask.
  Tensor s2 = good_src();
  SoftmaxOptions o;
  o.additive_mask = src;
  EXPECT_TRUE(throws_invalid([&] { smax::softmax(s2.view(), src, o); }, "dst"));
  // Backward: dx may be dy, but not overlap y or part of dy.
  Tensor y = good_src();
  EXPECT_TRUE(throws_invalid([&] { smax::softmax_backward(y.view(), src, dst); }, "dx"));
  EXPECT_TRUE(throws_invalid([&] { smax::log_softmax_backward(src, y.view(), dst); }, "dx"));
  EXPECT_EQ(before, buf.storage());
  Tensor dy = good_src();
  EXPECT_TRUE(
      throws_invalid([&] { smax::softmax_backward(y.view(), dy.view(), y.view()); }, "dx"));
}

TEST(Errors, MakeViewRank) {
  float data[4] = {};
  int64_t shape[smax::kMaxRank + 1];
  for (auto& s : shape) s = 1;
  EXPECT_TRUE(throws_invalid(
      [&] { smax::make_view(data, DType::kF32, smax::kMaxRank + 1, shape, nullptr); }, "rank"));
  EXPECT_TRUE(
      throws_invalid([&] { smax::make_view(data, DType::kF32, -1, shape, nullptr); }, "rank"));
  EXPECT_NO_THROW(smax::make_view(data, DType::kF32, smax::kMaxRank, shape, nullptr));
  // A hand-built view with a bad rank is rejected by the ops.
  Tensor src = good_src();
  TensorView v = src.view();
  v.rank = smax::kMaxRank + 1;
  expect_forward_rejects(v, {}, "src", "rank 9");
  v.rank = -1;
  expect_forward_rejects(v, {}, "src", "rank -1");
}

TEST(Errors, SetMaxTarget) {
  EXPECT_TRUE(throws_invalid([] { smax::set_max_target("bogus"); }, "bogus"));
  EXPECT_TRUE(throws_invalid([] { smax::set_max_target("avx9000"); }, "avx9000"));
  // The failed calls changed nothing.
  EXPECT_EQ(smax::active_target(), initial_target());
}

}  // namespace
}  // namespace smax_test
