// tests/test_cross_entropy_hand.cc: cross_entropy hand vectors (PyTorch 2.x, float64,
// docs/vectors.md), float64 finite differences of the oracles, every error path.
// Helpers, bounds and the fixture: tests/cross_entropy_util.h.
#include "cross_entropy_util.h"

namespace smax_test {
namespace {

// ---- hand vectors (PyTorch 2.x, float64, and docs/losses.md, "Hand vectors") -----
// The loss of (x, t) reduced by kMean and by kSum against the hand values.
void expect_mean_and_sum(const TensorView& x, const TensorView& t, CrossEntropyOptions ce,
                         double mean, double mean_tol, double sum, double sum_tol) {
  float got = 0.0f;
  ce.loss.reduction = Reduction::kMean;
  smax::cross_entropy(x, t, smax::make_view(&got, {}), ce);
  EXPECT_NEAR(got, mean, mean_tol) << "mean";
  ce.loss.reduction = Reduction::kSum;
  smax::cross_entropy(x, t, smax::make_view(&got, {}), ce);
  EXPECT_NEAR(got, sum, sum_tol) << "sum";
}

TEST(CrossEntropyHand, PyTorchWeightsAndSmoothing) {
  const float xv[] = {1, 2, 3, 0.5f, -1, 2, 0, 0, 0};
  const int64_t tv[] = {2, 0, -100};
  const float wv[] = {1, 2, 0.5f};
  CrossEntropyOptions ce;
  ce.loss.weight = smax::make_view(wv, {3});
  ce.label_smoothing = 0.1f;
  const TensorView x = smax::make_view(xv, {3, 3});
  const TensorView t = smax::make_index_view(tv, {3});
  float none[3];
  ce.loss.reduction = Reduction::kNone;
  smax::cross_entropy(x, t, smax::make_view(none, {3}), ce);
  EXPECT_NEAR(none[0], 0.36431004651848226, 1e-6);
  EXPECT_NEAR(none[1], 1.845333151601443, 1e-6);
  EXPECT_EQ(none[2], 0.0f);
  expect_mean_and_sum(x, t, ce, 1.4730954654132837, 1e-6, 2.2096431981199256, 1e-6);
  ce.loss.reduction = Reduction::kMean;
  const float one = 1.0f;
  float g[9];
  smax::cross_entropy_backward(x, t, smax::make_view(&one, {}), smax::make_view(g, {3, 3}), ce);
  const double want[] = {0.011789327642143717, 0.048008533509590216, -0.059797861151734,
                         -0.503414289771753,   -0.0179348114498674,  0.5213491012216203,
                         0, 0, 0};
  for (int i = 0; i < 9; ++i) EXPECT_NEAR(g[i], want[i], 1e-6) << i;
}

TEST(CrossEntropyHand, PyTorchProbabilityTargets) {
  const float xv[] = {1, 2, 3, 0.5f, -1, 2, 0, 0, 0};
  const float qv[] = {0.2f, 0.3f, 0.5f, 1, 0, 0, 0.25f, 0.25f, 0.5f};
  const float wv[] = {1, 2, 0.5f};
  CrossEntropyOptions ce;
  ce.loss.weight = smax::make_view(wv, {3});
  ce.label_smoothing = 0.2f;
  const TensorView x = smax::make_view(xv, {3, 3});
  const TensorView q = smax::make_view(qv, {3, 3});
  float none[3];
  ce.loss.reduction = Reduction::kNone;
  smax::cross_entropy(x, q, smax::make_view(none, {3}), ce);
  EXPECT_NEAR(none[0], 1.5041637351703017, 2e-6);
  EXPECT_NEAR(none[1], 1.9493550065457292, 2e-6);
  EXPECT_NEAR(none[2], 1.13523269829038, 2e-6);
  expect_mean_and_sum(x, q, ce, 1.5295838133354704, 2e-6, 4.588751440006411, 4e-6);
  ce.loss.reduction = Reduction::kSum;
  const float one = 1.0f;
  float g[9];
  smax::cross_entropy_backward(x, q, smax::make_view(&one, {}), smax::make_view(g, {3, 3}), ce);
  const double want[] = {-0.13003385146379168, -0.35065810773451717, 0.48069195919830865,
                         -0.6855332614552955,  -0.09291700762028964, 0.7784502690755851,
                         0.07777777777777779,  -0.18888888888888886, 0.11111111111111112};
  for (int i = 0; i < 9; ++i) EXPECT_NEAR(g[i], want[i], 1e-6) << i;
}

TEST(CrossEntropyHand, PlainAndAllIgnored) {
  const float xv[] = {0, 0};
  const int64_t tv[] = {0};
  float l;
  smax::cross_entropy(smax::make_view(xv, {1, 2}), smax::make_index_view(tv, {1}),
                      smax::make_view(&l, {}));
  EXPECT_NEAR(l, std::log(2.0), 1e-7);
  float g[2];
  const float one = 1.0f;
  smax::cross_entropy_backward(smax::make_view(xv, {1, 2}), smax::make_index_view(tv, {1}),
                               smax::make_view(&one, {}), smax::make_view(g, {1, 2}));
  EXPECT_FLOAT_EQ(g[0], -0.5f);
  EXPECT_FLOAT_EQ(g[1], 0.5f);
  // All ignored + mean: NaN like PyTorch, 0 on request; zero gradient.
  const int64_t ign[] = {-100, -100};
  const float x2[] = {1, 2, 3, 4};
  CrossEntropyOptions ce;
  smax::cross_entropy(smax::make_view(x2, {2, 2}), smax::make_index_view(ign, {2}),
                      smax::make_view(&l, {}), ce);
  EXPECT_TRUE(std::isnan(l));
  ce.loss.empty_mean = EmptyMean::kZero;
  smax::cross_entropy(smax::make_view(x2, {2, 2}), smax::make_index_view(ign, {2}),
                      smax::make_view(&l, {}), ce);
  EXPECT_EQ(l, 0.0f);
  float g2[4] = {9, 9, 9, 9};
  smax::cross_entropy_backward(smax::make_view(x2, {2, 2}), smax::make_index_view(ign, {2}),
                               smax::make_view(&one, {}), smax::make_view(g2, {2, 2}), ce);
  for (float v : g2) EXPECT_EQ(v, 0.0f);
}

// kMean where every counted row has weight 0 (targets 1 and 3 weigh 0, row
// 1 is ignored): the loss is NaN like PyTorch, and so is the gradient of
// every element of the counted rows (nll_loss's backward multiplies by
// w_y / sum w = 0 / 0, and log_softmax's spreads it over the row), a
// bool-masked entry excepted (smax's rule: exactly 0); the ignored row is 0.
// The backward, the fused gradient (ce.grad), label smoothing, the z-loss
// and the spherical z-loss with targets, and the float64 oracles agree;
// EmptyMean::kZero gives 0 everywhere. (The gradient used to be exactly 0.)
TEST(CrossEntropyHand, ZeroWeightSumMeanGradientIsNaN) {
  const ZeroWeightSumProblem p;
  const TensorView x = p.x(), t = p.target(), one = p.dloss();
  const SoftmaxOptions o = p.options();
  for (int zero = 0; zero < 2; ++zero) {
    for (float a : {0.0f, 0.1f}) {
      CrossEntropyOptions ce;
      ce.loss = p.loss_options(zero);
      ce.label_smoothing = a;
      const std::string what = "a=" + std::to_string(a);
      float g[12], fused[12], loss = 7.0f;
      std::fill(g, g + 12, 7.0f);
      std::fill(fused, fused + 12, 7.0f);
      smax::cross_entropy_backward(x, t, one, smax::make_view(g, {3, 4}), ce, o);
      const ref::GradRef R = ref::cross_entropy_backward(x, t, one, ce, o);
      p.expect_gradient(g, R.dsrc, zero != 0, "backward " + what);
      CrossEntropyOptions cf = ce;
      cf.grad = smax::make_view(fused, {3, 4});
      smax::cross_entropy(x, t, smax::make_view(&loss, {}), cf, o);
      p.expect_gradient(fused, R.dsrc, zero != 0, "fused " + what);
      if (zero) {
        EXPECT_EQ(loss, 0.0f) << what;
      } else {
        EXPECT_TRUE(std::isnan(loss)) << what;
      }
    }
    const LossOptions lo = p.loss_options(zero);
    float g[12];
    std::fill(g, g + 12, 7.0f);
    smax::z_loss_backward(x, t, one, smax::make_view(g, {3, 4}), 1e-2f, lo, o);
    p.expect_gradient(g, ref::z_loss_backward(x, &t, one, 1e-2, lo, o).dsrc, zero != 0, "z_loss");
    std::fill(g, g + 12, 7.0f);
    smax::spherical_z_loss_backward(x, t, one, smax::make_view(g, {3, 4}), 1.0f, 2.0f, lo, o);
    p.expect_gradient(g, ref::spherical_z_loss_backward(x, t, one, 1.0, 2.0, lo, o).dsrc,
                      zero != 0, "spherical_z_loss");
  }
}

TEST(CrossEntropyHand, SpecZLosses) {
  // PaLM: x = [0, 0], c = 1e-4 -> 4.8045e-5, gradient [6.9315e-5, 6.9315e-5].
  const float x[] = {0, 0};
  float l, g[2];
  const float one = 1.0f;
  LossOptions lo;
  smax::z_loss(smax::make_view(x, {2}), smax::make_view(&l, {}), 1e-4f, lo);
  EXPECT_NEAR(l, 4.8045e-5, 1e-9);
  smax::z_loss_backward(smax::make_view(x, {2}), smax::make_view(&one, {}), smax::make_view(g, {2}),
                        1e-4f, lo);
  EXPECT_NEAR(g[0], 6.9315e-5, 1e-9);
  EXPECT_NEAR(g[1], 6.9315e-5, 1e-9);
  // Spherical: o = [1, -1], t = 0, a = 1, b = 0 -> 0.3132617.
  const float o1[] = {1, -1};
  const int64_t t0[] = {0};
  smax::spherical_z_loss(smax::make_view(o1, {1, 2}), smax::make_index_view(t0, {1}),
                         smax::make_view(&l, {}), 1.0f, 0.0f, lo);
  EXPECT_NEAR(l, 0.3132617, 1e-6);
  // o = [3, 1, 2], t = 0, a = 1, b = 1 -> 0.5870753, gradient
  // [-0.0906411, -0.0906411, 0.1812823].
  const float o2[] = {3, 1, 2};
  smax::spherical_z_loss(smax::make_view(o2, {1, 3}), smax::make_index_view(t0, {1}),
                         smax::make_view(&l, {}), 1.0f, 1.0f, lo);
  EXPECT_NEAR(l, 0.5870753, 1e-6);
  float g3[3];
  smax::spherical_z_loss_backward(smax::make_view(o2, {1, 3}), smax::make_index_view(t0, {1}),
                                  smax::make_view(&one, {}), smax::make_view(g3, {1, 3}), 1.0f,
                                  1.0f, lo);
  EXPECT_NEAR(g3[0], -0.0906411, 1e-6);
  EXPECT_NEAR(g3[1], -0.0906411, 1e-6);
  EXPECT_NEAR(g3[2], 0.1812823, 1e-6);
}

// ---- float64 finite differences of the oracles --------------------------------------
// x on a grid of 1/64 and h = 1/256, so x +- h is exact in f32 (the oracles
// read f32 views); central differences of sum_r dloss_r * loss_r.
template <typename Loss, typename Grad>
void finite_differences(const std::vector<int64_t>& shape, Loss loss, Grad grad, Rng& rng,
                        const std::string& what, double tol = 2e-4) {
  Tensor x(shape);
  x.fill([&](int64_t) { return std::round(rng.normal() * 128.0f) / 64.0f; });
  const std::vector<double> g = grad(x);
  const double h = 1.0 / 256.0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float x0 = x.at(i);
    x.at(i) = static_cast<float>(x0 + h);
    const double up = loss(x);
    x.at(i) = static_cast<float>(x0 - h);
    const double down = loss(x);
    x.at(i) = x0;
    const double fd = (up - down) / (2 * h);
    EXPECT_NEAR(g[static_cast<size_t>(i)], fd, tol * (1.0 + std::fabs(fd))) << what << " element " << i;
  }
}

TEST(CrossEntropyReference, FiniteDifferences) {
  Rng rng("fd");
  const std::vector<int64_t> shape = {3, 6};
  Tensor dl({3});
  fill_normal(dl, rng);
  const std::vector<double> dlv = to_dense(dl.view());
  auto dot = [&](const std::vector<double>& rows) {
    double s = 0;
    for (size_t r = 0; r < rows.size(); ++r) s += dlv[r] * rows[r];
    return s;
  };
  IndexTensor t({3});
  const int64_t tv[] = {1, 5, 0};
  for (int i = 0; i < 3; ++i) t.at(i) = tv[i];
  Tensor w({6});
  w.fill([&](int64_t) { return rng.uniform(0.5f, 2.0f); });
  Tensor add({6});
  add.fill([&](int64_t i) { return i == 3 ? -kInfF : 0.25f * static_cast<float>(i); });
  Tensor q(shape);
  // No target mass on the masked class 3 (that would make the loss +inf).
  q.fill([&](int64_t i) { return i % 6 == 3 ? 0.0f : static_cast<float>(1 + i % 4) / 16.0f; });
  for (bool probs : {false, true}) {
    CrossEntropyOptions ce;
    ce.loss.reduction = Reduction::kNone;
    ce.loss.weight = w.view();
    ce.label_smoothing = 0.15f;
    ce.lse_square_scale = 0.05f;
    ce.softcap = 2.5f;
    SoftmaxOptions o;
    o.scale = 0.5f;
    o.additive_mask = add.view();
    const TensorView target = probs ? q.view() : t.view();
    finite_differences(
        shape, [&](const Tensor& x) { return dot(ref::cross_entropy(x.view(), target, ce, o).loss.rows); },
        [&](const Tensor& x) { return ref::cross_entropy_backward(x.view(), target, dl.view(), ce, o).dsrc; },
        rng, probs ? "cross_entropy probs" : "cross_entropy");
  }
  LossOptions lo;
  lo.reduction = Reduction::kNone;
  const TensorView tview = t.view();
  finite_differences(
      shape, [&](const Tensor& x) { return dot(ref::z_loss(x.view(), &tview, 0.1, lo).rows); },
      [&](const Tensor& x) { return ref::z_loss_backward(x.view(), &tview, dl.view(), 0.1, lo).dsrc; },
      rng, "z_loss");
  finite_differences(
      shape, [&](const Tensor& x) { return dot(ref::spherical_z_loss(x.view(), tview, 1.5, 0.25, lo).rows); },
      [&](const Tensor& x) {
        return ref::spherical_z_loss_backward(x.view(), tview, dl.view(), 1.5, 0.25, lo).dsrc;
      },
      rng, "spherical_z_loss");
}

// ---- errors: smax::Error naming the argument, nothing written ------------------------
TEST(CrossEntropyErrors, EveryPathThrowsBeforeWriting) {
  Tensor x({4, 5});
  x.fill([](int64_t i) { return static_cast<float>(i % 7); });
  IndexTensor t({4});
  t.fill([](int64_t i) -> int64_t { return i % 5; });
  const std::vector<int64_t> scalar;
  Tensor dst(scalar), rows({4}), dx({4, 5}), one(scalar);
  one.at(0) = 1.0f;
  auto ce_call = [&](const CrossEntropyOptions& ce, const TensorView& target, const TensorView& out,
                     const SoftmaxOptions& o = {}) {
    return [&, ce, target, out, o] { smax::cross_entropy(x.view(), target, out, ce, o); };
  };
  CrossEntropyOptions ce;
  // Targets.
  IndexTensor bad({4});
  bad.fill([](int64_t i) -> int64_t { return i == 2 ? 5 : 0; });
  EXPECT_TRUE(throws_invalid(ce_call(ce, bad.view(), dst.view()), "target 5"));
  bad.at(2) = -1;
  EXPECT_TRUE(throws_invalid(ce_call(ce, bad.view(), dst.view()), "target -1"));
  IndexTensor short_t({3});
  EXPECT_TRUE(throws_invalid(ce_call(ce, short_t.view(), dst.view()), "target"));
  Tensor ftarget({4});
  EXPECT_TRUE(throws_invalid(ce_call(ce, ftarget.view(), dst.view()), "target"));
  // Weights.
  Tensor w4({4});
  ce.loss.weight = w4.view();
  EXPECT_TRUE(throws_invalid(ce_call(ce, t.view(), dst.view()), "weight shape"));
  ce = {};
  // Options.
  for (float a : {-0.1f, 1.5f, kNanF}) {
    ce.label_smoothing = a;
    EXPECT_TRUE(throws_invalid(ce_call(ce, t.view(), dst.view()), "label_smoothing"));
  }
  ce = {};
  for (float cap : {-1.0f, kNanF, kInfF}) {
    ce.softcap = cap;
    EXPECT_TRUE(throws_invalid(ce_call(ce, t.view(), dst.view()), "softcap"));
  }
  ce = {};
  for (float zs : {-1e-4f, kNanF}) {
    ce.lse_square_scale = zs;
    EXPECT_TRUE(throws_invalid(ce_call(ce, t.view(), dst.view()), "lse_square_scale"));
  }
  ce = {};
  ce.loss.reduction = static_cast<Reduction>(7);
  EXPECT_TRUE(throws_invalid(ce_call(ce, t.view(), dst.view()), "reduction"));
  ce = {};
  SoftmaxOptions bad_o;
  bad_o.temperature = 0.0f;
  EXPECT_TRUE(throws_invalid(ce_call(ce, t.view(), dst.view(), bad_o), "temperature"));
  // Outputs: wrong shapes, overlaps.
  EXPECT_TRUE(throws_invalid(ce_call(ce, t.view(), rows.view()), "dst"));
  ce.loss.reduction = Reduction::kNone;
  EXPECT_TRUE(throws_invalid(ce_call(ce, t.view(), dst.view()), "dst"));
  Tensor rows5({5});
  ce.lse = rows5.view();
  EXPECT_TRUE(throws_invalid(ce_call(ce, t.view(), rows.view()), "lse"));
  ce.lse = rows.view();
  EXPECT_TRUE(throws_invalid(ce_call(ce, t.view(), rows.view()), "overlaps"));
  ce = {};
  ce.entropy = x.view();
  EXPECT_TRUE(throws_invalid(ce_call(ce, t.view(), dst.view()), "entropy"));
  ce = {};
  // Backward.
  EXPECT_TRUE(throws_invalid([&] { smax::cross_entropy_backward(x.view(), t.view(), rows.view(), dx.view(), ce); },
                             "dloss"));
  TensorView part = x.view();
  part.data = static_cast<float*>(part.data) + 1;
  part.shape[0] = 3;
  TensorView x3 = x.view();
  x3.shape[0] = 3;
  IndexTensor t3({3});
  t3.fill([](int64_t) -> int64_t { return 0; });
  EXPECT_TRUE(throws_invalid([&] { smax::cross_entropy_backward(x3, t3.view(), one.view(), part, ce); },
                             "overlaps"));
  // Fused gradient: wrong shape, partial overlap with src, overlap with an
  // output, given to the backward.
  ce = {};
  ce.grad = rows.view();
  EXPECT_TRUE(throws_invalid(ce_call(ce, t.view(), dst.view()), "grad"));
  ce.grad = part;
  EXPECT_TRUE(throws_invalid([&] { smax::cross_entropy(x3, t3.view(), one.view(), ce); }, "overlaps"));
  Tensor g45({4, 5});
  ce.grad = g45.view();
  ce.loss.reduction = Reduction::kNone;
  TensorView g_row = g45.view();
  g_row.rank = 1;
  g_row.shape[0] = 4;
  g_row.strides[0] = 5;
  EXPECT_TRUE(throws_invalid(ce_call(ce, t.view(), g_row), "overlaps"));
  ce.loss.reduction = Reduction::kMean;
  ce.lse = g_row;
  EXPECT_TRUE(throws_invalid(ce_call(ce, t.view(), dst.view()), "overlaps"));
  ce.lse.reset();
  EXPECT_TRUE(throws_invalid([&] { smax::cross_entropy_backward(x.view(), t.view(), one.view(), dx.view(), ce); },
                             "grad"));
  ce = {};
  // z-losses.
  EXPECT_TRUE(throws_invalid([&] { smax::z_loss(x.view(), dst.view(), -1.0f); }, "coefficient"));
  LossOptions lo;
  lo.weight = w4.view();
  EXPECT_TRUE(throws_invalid([&] { smax::z_loss(x.view(), dst.view(), 1e-4f, lo); }, "weight"));
  EXPECT_TRUE(throws_invalid([&] { smax::spherical_z_loss(x.view(), t.view(), dst.view(), 0.0f, 1.0f); }, "a must"));
  EXPECT_TRUE(throws_invalid([&] { smax::spherical_z_loss(x.view(), t.view(), dst.view(), 1.0f, kNanF); }, "b must"));
  EXPECT_TRUE(throws_invalid([&] { smax::spherical_z_loss(x.view(), bad.view(), dst.view(), 1.0f, 0.0f); }, "target"));
  // Nothing was written anywhere.
  for (const Tensor* out : {&dst, &rows, &dx, &rows5, &g45}) {
    EXPECT_TRUE(out->guards_intact());
    for (float v : out->dense()) EXPECT_EQ(v, kSentinel);
  }
}

}  // namespace
}  // namespace smax_test
