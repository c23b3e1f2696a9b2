// tests/test_sampling_errors.cc: error paths of the sampling ops and Soft-NMS.
// Helpers, bounds and the fixture: tests/sampling_util.h.
#include "sampling_util.h"

namespace smax_test {
namespace {

// ---------------------------------------------------------------------------
// Errors: smax::Error naming the argument, nothing written.
// ---------------------------------------------------------------------------

TEST(SamplingErrors, ThrowBeforeWriting) {
  Tensor x({3, 8}), y({3, 8}), soft({3, 8}), noise({3, 7});
  x.fill([](int64_t i) { return static_cast<float>(i % 5); });
  I64Tensor idx({3}), idx_bad({4}), topi({3, 2});
  Tensor topp({3, 2}), topp_bad({3, 3});
  y.poison();
  auto untouched = [&] {
    return y.guards_intact() && y.dense() == std::vector<float>(24, kSentinel) &&
           idx.dense() == std::vector<int64_t>(3, Array<int64_t>::sentinel()) &&
           topp.dense() == std::vector<float>(6, kSentinel);
  };
  GumbelSoftmaxOptions go;
  go.tau = 0.0f;
  EXPECT_TRUE(throws_invalid([&] { smax::gumbel_softmax(x.view(), y.view(), go); }, "tau"));
  go.tau = kNanF;
  EXPECT_TRUE(throws_invalid([&] { smax::gumbel_softmax(x.view(), y.view(), go); }, "tau"));
  go = {};
  go.noise = noise.view();
  EXPECT_TRUE(throws_invalid([&] { smax::gumbel_softmax(x.view(), y.view(), go); }, "noise"));
  go = {};
  go.y_soft = y.view();
  EXPECT_TRUE(throws_invalid([&] { smax::gumbel_softmax(x.view(), y.view(), go); }, "y_soft"));
  SoftmaxOptions bad_axis;
  bad_axis.axis = 2;
  EXPECT_TRUE(throws_invalid([&] { smax::gumbel_softmax(x.view(), y.view(), {}, bad_axis); }, "axis"));
  EXPECT_TRUE(throws_invalid(
      [&] { smax::gumbel_softmax_backward(x.view(), x.view(), y.view(), -1.0f); }, "tau"));
  EXPECT_TRUE(throws_invalid(
      [&] { smax::gumbel_softmax_backward(x.view(), noise.view(), y.view(), 1.0f); }, "dy"));
  EXPECT_TRUE(throws_invalid([&] { smax::gumbel_max(x.view(), y.view(), 1); }, "indices"));
  EXPECT_TRUE(throws_invalid([&] { smax::gumbel_max(x.view(), idx_bad.view(), 1); }, "indices"));
  TensorView alias = smax::make_index_view(static_cast<int64_t*>(x.view().data), {3});
  EXPECT_TRUE(throws_invalid([&] { smax::gumbel_max(x.view(), alias, 1); }, "overlaps"));
  EXPECT_TRUE(throws_invalid([&] { smax::softmax_topk(x.view(), topp.view(), topi.view(), 9); }, "k"));
  EXPECT_TRUE(throws_invalid([&] { smax::softmax_topk(x.view(), topp.view(), topi.view(), -1); }, "k"));
  EXPECT_TRUE(throws_invalid([&] { smax::softmax_topk(x.view(), topp_bad.view(), topi.view(), 2); }, "probs"));
  EXPECT_TRUE(throws_invalid([&] { smax::softmax_topk(x.view(), topp.view(), topp.view(), 2); }, "indices"));
  TensorView probs1 = topp.view();
  probs1.shape[1] = 1;  // [3, 1] strides [2, 1]
  const TensorView overlap = smax::make_index_view(static_cast<int64_t*>(topp.view().data), {3, 1});
  EXPECT_TRUE(throws_invalid(
      [&] { smax::softmax_topk(x.view(), probs1, overlap, 1); }, "overlaps"));
  SampleOptions s;
  s.temperature = -1.0f;
  EXPECT_TRUE(throws_invalid([&] { smax::sample(x.view(), idx.view(), s); }, "temperature"));
  s = {};
  s.top_k = -2;
  EXPECT_TRUE(throws_invalid([&] { smax::sample(x.view(), idx.view(), s); }, "top_k"));
  for (float p : {0.0f, 1.5f, kNanF}) {
    s = {};
    s.top_p = p;
    EXPECT_TRUE(throws_invalid([&] { smax::sampling_filter(x.view(), y.view(), s); }, "top_p"));
    EXPECT_TRUE(throws_invalid([&] { smax::sample(x.view(), idx.view(), s); }, "top_p"));
  }
  SoftmaxOptions t0;
  t0.temperature = 0.0f;
  EXPECT_TRUE(throws_invalid([&] { smax::sample(x.view(), idx.view(), {}, t0); }, "temperature"));
  EXPECT_TRUE(throws_invalid([&] { smax::gumbel_noise(idx.view(), 1); }, "dst"));
  EXPECT_TRUE(throws_invalid([&] { smax::gumbel_noise(y.view(), 1, 5); }, "axis"));
  EXPECT_TRUE(untouched());
}

// ---------------------------------------------------------------------------
// Soft-NMS
// ---------------------------------------------------------------------------

TEST(SoftNms, RandomBoxesVsReference) {
  Rng rng("boxes");
  for (int64_t n : {0, 1, 2, 5, 40, 300}) {
    Tensor boxes({n, 4}, permuted_strides({n, 4}, {1, 0}), 1);  // column-major too
    Tensor scores({n});
    for (int64_t i = 0; i < n; ++i) {
      const float x1 = rng.uniform(0.0f, 100.0f), y1 = rng.uniform(0.0f, 100.0f);
      const float w = rng.index(10) == 0 ? 0.0f : rng.uniform(1.0f, 40.0f);
      boxes.at(4 * i) = x1;
      boxes.at(4 * i + 1) = y1;
      boxes.at(4 * i + 2) = x1 + w;
      boxes.at(4 * i + 3) = y1 + rng.uniform(0.0f, 40.0f);
      scores.at(i) = rng.index(8) == 0 ? 0.5f : rng.uniform(0.0f, 1.0f);  // ties
    }
    for (SoftNmsMethod m : {SoftNmsMethod::kHard, SoftNmsMethod::kLinear, SoftNmsMethod::kGaussian}) {
      for (bool plus_one : {false, true}) {
        SoftNmsOptions o;
        o.method = m;
        o.plus_one = plus_one;
        o.score_threshold = m == SoftNmsMethod::kGaussian ? 0.05f : 0.001f;
        const auto a = smax::soft_nms(boxes.view(), scores.view(), o);
        const auto r = ref::soft_nms(boxes.view(), scores.view(), o);
        ASSERT_EQ(a.indices, r.indices) << n << " " << smax::soft_nms_method_name(m);
        ASSERT_EQ(a.scores, r.scores);
        for (size_t j = 1; j < a.scores.size(); ++j) {
          // Scores only decay, so the selection order is non-increasing.
          ASSERT_LE(a.scores[j], a.scores[j - 1]);
        }
        I64Tensor ki({n});
        Tensor ks({n});
        const int64_t count = smax::soft_nms(boxes.view(), scores.view(), ki.view(), ks.view(), o);
        ASSERT_EQ(count, static_cast<int64_t>(r.indices.size()));
        for (int64_t j = 0; j < n; ++j) {
          ASSERT_EQ(ki.at(j), j < count ? r.indices[static_cast<size_t>(j)] : -1);
          ASSERT_EQ(ks.at(j), j < count ? r.scores[static_cast<size_t>(j)] : 0.0f);
        }
        ASSERT_TRUE(ki.guards_intact() && ks.guards_intact());
      }
    }
  }
}

TEST(SoftNms, Errors) {
  float b[8] = {0, 0, 10, 10, 0, 5, 10, 15};
  float s[2] = {0.9f, 0.8f};
  const TensorView boxes = smax::make_view(b, {2, 4}), scores = smax::make_view(s, {2});
  EXPECT_TRUE(throws_invalid([&] { smax::soft_nms(smax::make_view(b, {2, 3}), scores); }, "boxes"));
  EXPECT_TRUE(throws_invalid([&] { smax::soft_nms(boxes, smax::make_view(s, {1})); }, "scores"));
  SoftNmsOptions o;
  o.sigma = 0.0f;
  EXPECT_TRUE(throws_invalid([&] { smax::soft_nms(boxes, scores, o); }, "sigma"));
  o = {};
  o.iou_threshold = 1.5f;
  EXPECT_TRUE(throws_invalid([&] { smax::soft_nms(boxes, scores, o); }, "iou_threshold"));
  o = {};
  o.score_threshold = kInfF;
  EXPECT_TRUE(throws_invalid([&] { smax::soft_nms(boxes, scores, o); }, "score_threshold"));
  o = {};
  o.method = static_cast<SoftNmsMethod>(7);
  EXPECT_TRUE(throws_invalid([&] { smax::soft_nms(boxes, scores, o); }, "method"));
  b[2] = -1.0f;  // x2 < x1
  EXPECT_TRUE(throws_invalid([&] { smax::soft_nms(boxes, scores); }, "box 0"));
  o = {};
  o.plus_one = true;  // width x2 - x1 + 1 = 0: a valid (empty) box with +1
  EXPECT_EQ(smax::soft_nms(boxes, scores, o).indices.size(), 2u);
  b[2] = kNanF;
  EXPECT_TRUE(throws_invalid([&] { smax::soft_nms(boxes, scores); }, "box 0"));
  b[2] = 10.0f;
  s[1] = kNanF;
  EXPECT_TRUE(throws_invalid([&] { smax::soft_nms(boxes, scores); }, "score 1"));
  s[1] = 0.8f;
  int64_t ki[3] = {5, 5, 5};
  float ks[2] = {5, 5};
  EXPECT_TRUE(throws_invalid(
      [&] { smax::soft_nms(boxes, scores, smax::make_index_view(ki, {3}), smax::make_view(ks, {2})); },
      "indices"));
  EXPECT_TRUE(throws_invalid(
      [&] { smax::soft_nms(boxes, scores, smax::make_index_view(ki, {2}), smax::make_view(s, {2})); },
      "kept_scores"));
  EXPECT_EQ(ki[0], 5);
  EXPECT_EQ(ks[0], 5.0f);
}

}  // namespace
}  // namespace smax_test
