// tests/test_cross_entropy.cc: cross_entropy on every SIMD target: random and
// adversarial rows, vocabularies, strided 3-D tensors on any axis with masks,
// in place and lse input, z-losses, thread counts.
// Helpers, bounds and the fixture: tests/cross_entropy_util.h.
#include "cross_entropy_util.h"

namespace smax_test {
namespace {

TEST_P(CrossEntropy, RandomRowsEveryConfig) {
  Rng rng("random");
  for (int64_t n : kSizes) {
    Case c;
    c.shape = {5, n};
    c.ignore = 0.2;
    expect(c, Reduction::kMean, rng);
    c.weights = true;
    c.smoothing = 0.1f;
    expect(c, Reduction::kMean, rng);
    c.zs = 1e-2f;
    c.cap = 3.0f;
    expect(c, Reduction::kSum, rng);
    c.probs = true;
    expect(c, Reduction::kMean, rng);
    c.weights = false;
    c.cap = 0.0f;
    expect(c, Reduction::kSum, rng);
  }
}

TEST_P(CrossEntropy, Vocabularies) {
  Rng rng("vocab");
  Case c;
  c.shape = {3, 32000};
  c.ignore = 0.2;
  c.weights = true;
  c.smoothing = 0.1f;
  c.zs = 1e-4f;
  expect(c, Reduction::kMean, rng);
  for (int64_t n : {int64_t{128256}, int64_t{256000}}) {
    Case v;
    v.shape = {1, n};
    v.data = Data::kWide;
    expect(v, Reduction::kMean, rng);
    v.smoothing = 0.1f;
    v.cap = 30.0f;
    v.zs = 1e-4f;
    v.weights = true;
    expect(v, Reduction::kSum, rng);
    v.smoothing = 0.0f;
    v.lse_input = true;
    v.in_place = true;
    expect(v, Reduction::kNone, rng);
  }
}

TEST_P(CrossEntropy, Adversarial) {
  Rng rng("adversarial");
  for (Data d : all_data()) {
    for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{33}, int64_t{1001}}) {
      Case c;
      c.shape = {3, n};
      c.data = d;
      c.ignore = 0.2;
      expect(c, Reduction::kMean, rng);
      c.smoothing = 0.2f;
      c.weights = true;
      c.zs = 1e-3f;
      expect(c, Reduction::kNone, rng);
      c.cap = 10.0f;
      expect(c, Reduction::kSum, rng);
      c.probs = true;
      expect(c, Reduction::kMean, rng);
      c.empty_row = EmptyRow::kNan;
      c.probs = false;
      expect(c, Reduction::kSum, rng);
    }
  }
}

TEST_P(CrossEntropy, StridedAnyAxisWithMasks) {
  Rng rng("strided");
  const std::vector<int64_t> shape = {3, 5, 37};
  for (int axis = 0; axis < 3; ++axis) {
    std::vector<int64_t> sh = shape;
    std::swap(sh[static_cast<size_t>(axis)], sh[2]);  // classes (37) along `axis`
    Case c;
    c.shape = sh;
    c.axis = axis;
    c.src_strides = permuted_strides(sh, {2, 0, 1}, 3);
    c.ignore = 0.2;
    c.weights = true;
    c.smoothing = 0.1f;
    c.zs = 1e-3f;
    c.scale = 0.5f;
    c.temperature = 0.7f;
    // Masks broadcast as [C] along the last dim: only when the classes are last.
    c.bool_mask = c.add_mask = axis == 2;
    expect(c, Reduction::kMean, rng);
    c.cap = 5.0f;
    expect(c, Reduction::kNone, rng);
    c.probs = true;
    expect(c, Reduction::kSum, rng);
  }
}

TEST_P(CrossEntropy, InPlaceAndLseInput) {
  Rng rng("inplace");
  for (int64_t n : {int64_t{1}, int64_t{9}, int64_t{1001}}) {
    Case c;
    c.shape = {4, n};
    c.ignore = 0.2;
    c.in_place = true;
    c.weights = true;
    expect(c, Reduction::kMean, rng);
    c.lse_input = true;
    c.zs = 1e-3f;
    expect(c, Reduction::kNone, rng);
    c.bool_mask = c.add_mask = true;
    c.cap = 4.0f;
    expect(c, Reduction::kSum, rng);
  }
}

TEST_P(CrossEntropy, ZLosses) {
  Rng rng("zloss");
  for (int64_t n : kSizes) {
    for (Data d : {Data::kUniform, Data::kWide, Data::kHigh, Data::kSomeNegInf, Data::kNan}) {
      Tensor x({4, n}, {}, 1);
      fill_rows(x, 1, d, rng);
      IndexTensor t({4});
      t.fill([&](int64_t i) -> int64_t { return n == 0 || i == 1 ? -100 : rng.index(n); });
      Tensor w({n});
      w.fill([&](int64_t) { return rng.uniform(0.5f, 2.0f); });
      for (bool with_target : {false, true}) {
        LossOptions lo;
        lo.reduction = Reduction::kNone;
        if (with_target) lo.weight = w.view();
        const TensorView tv = t.view();
        Tensor out({4}), dl({4}), dx({4, n});
        fill_normal(dl, rng);
        SoftmaxOptions o;
        o.scale = 0.75f;
        const float coef = 1e-3f;
        if (with_target) {
          smax::z_loss(x.view(), tv, out.view(), coef, lo, o);
          smax::z_loss_backward(x.view(), tv, dl.view(), dx.view(), coef, lo, o);
        } else {
          smax::z_loss(x.view(), out.view(), coef, lo, o);
          smax::z_loss_backward(x.view(), dl.view(), dx.view(), coef, lo, o);
        }
        const auto R = ref::z_loss(x.view(), with_target ? &tv : nullptr, coef, lo, o);
        const auto G = ref::z_loss_backward(x.view(), with_target ? &tv : nullptr, dl.view(), coef, lo, o);
        const std::string what = std::string("z_loss ") + data_name(d) + " n " + std::to_string(n) +
                                 (with_target ? " target" : "");
        EXPECT_TRUE(check_rows(out.dense(), R.rows, R.rows_mag, kLossEps, what));
        EXPECT_TRUE(check_rows(dx.dense(), G.dsrc, G.mag, kGradEps, what + " backward"));
        EXPECT_TRUE(out.guards_intact() && dx.guards_intact());
        // Spherical (class targets only).
        if (!with_target) continue;
        const float a = 1.5f, bb = 0.5f;
        smax::spherical_z_loss(x.view(), tv, out.view(), a, bb, lo, o);
        smax::spherical_z_loss_backward(x.view(), tv, dl.view(), dx.view(), a, bb, lo, o);
        const auto S = ref::spherical_z_loss(x.view(), tv, a, bb, lo, o);
        const auto SG = ref::spherical_z_loss_backward(x.view(), tv, dl.view(), a, bb, lo, o);
        EXPECT_TRUE(check_rows(out.dense(), S.rows, S.rows_mag, kLossEps, "spherical " + what));
        EXPECT_TRUE(check_rows(dx.dense(), SG.dsrc, SG.mag, kGradEps, "spherical " + what + " backward"));
      }
    }
  }
}

TEST_P(CrossEntropy, ThreadCountsBitwiseEqual) {
  Rng rng("threads");
  Tensor x({37, 1001});
  fill_rows(x, 1, Data::kWide, rng);
  IndexTensor t({37});
  t.fill([&](int64_t) -> int64_t { return rng.bernoulli(0.2) ? -100 : rng.index(1001); });
  Tensor dl({37});
  fill_normal(dl, rng);
  CrossEntropyOptions ce;
  ce.label_smoothing = 0.1f;
  ce.lse_square_scale = 1e-4f;
  ce.softcap = 20.0f;
  ce.loss.reduction = Reduction::kNone;
  std::vector<float> first_loss, first_grad, first_ent, first_fused;
  for (int threads : {1, 2, 3}) {
    SoftmaxOptions o;
    o.threads = threads;
    Tensor loss({37}), ent({37}), dx({37, 1001});
    ce.entropy = ent.view();
    smax::cross_entropy(x.view(), t.view(), loss.view(), ce, o);
    ce.entropy.reset();
    smax::cross_entropy_backward(x.view(), t.view(), dl.view(), dx.view(), ce, o);
    Tensor fused_loss({37}), fused_grad({37, 1001});
    ce.grad = fused_grad.view();
    smax::cross_entropy(x.view(), t.view(), fused_loss.view(), ce, o);
    ce.grad.reset();
    if (threads == 1) {
      first_loss = loss.dense();
      first_grad = dx.dense();
      first_ent = ent.dense();
      first_fused = fused_grad.dense();
      EXPECT_EQ(0, std::memcmp(first_loss.data(), fused_loss.dense().data(), first_loss.size() * 4));
      continue;
    }
    EXPECT_EQ(0, std::memcmp(first_fused.data(), fused_grad.dense().data(), first_fused.size() * 4))
        << threads;
    EXPECT_EQ(0, std::memcmp(first_loss.data(), loss.dense().data(), first_loss.size() * 4)) << threads;
    EXPECT_EQ(0, std::memcmp(first_ent.data(), ent.dense().data(), first_ent.size() * 4)) << threads;
    EXPECT_EQ(0, std::memcmp(first_grad.data(), dx.dense().data(), first_grad.size() * 4)) << threads;
  }
}

SMAX_INSTANTIATE_PER_TARGET(CrossEntropy);

}  // namespace
}  // namespace smax_test
