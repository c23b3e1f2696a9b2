// tests/test_sparse_losses.cc: sparse losses, every error path and the fuzz
// regressions of the sparse normalisers, on every SIMD target.
// Helpers, bounds and the fixture: tests/sparse_util.h.
#include "sparse_util.h"

namespace smax_test {
namespace {

// ---------------------------------------------------------------------------
// Losses
// ---------------------------------------------------------------------------
void loss_fwd(const Case& c, const TensorView& x, const TensorView& t, const TensorView& out,
              const LossOptions& lo, const SoftmaxOptions& o, bool force) {
  smax::SparseSoftmaxLossOptions sp;
  sp.force_target = force;
  switch (c.which) {
    case Case::kSparsemax: smax::sparsemax_loss(x, t, out, lo, o); break;
    case Case::kEntmax15: smax::entmax15_loss(x, t, out, lo, o); break;
    case Case::kBisect: smax::entmax_bisect_loss(x, t, out, c.bisect(), lo, o); break;
    case Case::kTopK: smax::sparse_softmax_loss(x, t, out, c.k, sp, lo, o); break;
  }
}
void loss_bwd(const Case& c, const TensorView& x, const TensorView& t, const TensorView& dl,
              const TensorView& dx, const LossOptions& lo, const SoftmaxOptions& o, bool force) {
  smax::SparseSoftmaxLossOptions sp;
  sp.force_target = force;
  switch (c.which) {
    case Case::kSparsemax: smax::sparsemax_loss_backward(x, t, dl, dx, lo, o); break;
    case Case::kEntmax15: smax::entmax15_loss_backward(x, t, dl, dx, lo, o); break;
    case Case::kBisect: smax::entmax_bisect_loss_backward(x, t, dl, dx, c.bisect(), lo, o); break;
    case Case::kTopK: smax::sparse_softmax_loss_backward(x, t, dl, dx, c.k, sp, lo, o); break;
  }
}

// kMean where every counted row has weight 0 (targets 1 and 3 weigh 0, row
// 1 ignored): 0 / 0 as in PyTorch's weighted mean, so the gradient of the
// counted rows is NaN (a bool-masked entry stays exactly 0) and the ignored
// row 0; kZero gives 0. Every family, library and oracle. (It used to be 0.)
TEST_P(Sparse, LossZeroWeightSumMean) {
  const ZeroWeightSumProblem p;
  const SoftmaxOptions o = p.options();
  for (const Case& c : all_cases()) {
    for (int zero = 0; zero < 2; ++zero) {
      const LossOptions lo = p.loss_options(zero);
      float dx[12];
      std::fill(dx, dx + 12, 7.0f);
      loss_bwd(c, p.x(), p.target(), p.dloss(), smax::make_view(dx, {3, 4}), lo, o, false);
      float loss = 7.0f;
      loss_fwd(c, p.x(), p.target(), smax::make_view(&loss, {}), lo, o, false);
      EXPECT_TRUE(zero ? loss == 0.0f : std::isnan(loss)) << c.name() << " loss " << loss;
      p.expect_gradient(dx, ref::sparse_loss_backward(c.spec(), p.x(), p.target(), p.dloss(), lo, o),
                        zero, c.name());
    }
  }
}

TEST_P(Sparse, Losses) {
  Rng rng("loss");
  std::vector<Case> cases = all_cases();
  cases.push_back({Case::kBisect, 1.0});  // the cross-entropy limit
  std::vector<float> w = {0.5f, 1.0f, 2.0f, 1.5f, 1.0f, 0.25f, 3.0f, 1.0f, 1.0f, 2.0f, 1.0f};
  for (const Case& c : cases) {
    for (bool force : {false, true}) {
      if (force && !c.topk()) continue;
      for (Reduction red : {Reduction::kNone, Reduction::kMean, Reduction::kSum}) {
        for (int axis : {1, 0}) {
          const int64_t C = 11;
          const std::vector<int64_t> shape = axis == 1 ? std::vector<int64_t>{6, C, 3}
                                                       : std::vector<int64_t>{C, 6, 3};
          Tensor x(shape, permuted_strides(shape, {1, 2, 0}, 1));
          x.fill([&](int64_t) { return 2.0f * rng.normal(); });
          x.at(4) = -kInfF;
          Array<int64_t> tg(drop_axis(shape, axis));
          tg.fill([&](int64_t i) { return i == 3 ? int64_t{-100} : rng.index(C); });
          SoftmaxOptions o;
          o.axis = axis;
          o.temperature = 0.8f;
          LossOptions lo;
          lo.reduction = red;
          lo.weight = smax::make_view(w.data(), {C});
          RefSpec spec = c.spec();
          spec.force_target = force;
          if (c.which == Case::kBisect && c.alpha == 1.0) spec.bisect.alpha = 1.0f;
          Tensor out(red == Reduction::kNone ? drop_axis(shape, axis) : std::vector<int64_t>{});
          out.poison();
          loss_fwd(c, x.view(), tg.view(), out.view(), lo, o, force);
          ASSERT_TRUE(out.guards_intact());
          const auto lexp = ref::sparse_loss(spec, x.view(), tg.view(), lo, o);
          const double ltol = c.topk() || c.alpha == 1.0 ? 2e-6 : 1e-6;
          for (int64_t i = 0; i < out.numel(); ++i) {
            const double e = lexp[static_cast<size_t>(i)];
            if (std::isinf(e)) {
              EXPECT_EQ(out.at(i), e);
            } else {
              EXPECT_NEAR(out.at(i), e, ltol * (1 + std::fabs(e))) << c.name() << " i " << i;
            }
          }
          // Backward.
          Tensor dl(out.shape());
          fill_normal(dl, rng);
          Tensor dx(shape);
          dx.poison();
          loss_bwd(c, x.view(), tg.view(), dl.view(), dx.view(), lo, o, force);
          ASSERT_TRUE(dx.guards_intact());
          const auto gexp = ref::sparse_loss_backward(spec, x.view(), tg.view(), dl.view(), lo, o);
          const double gtol = c.topk() || c.alpha == 1.0 ? 2e-6 : 2 * kU;
          double cmax = 0;
          for (int64_t i = 0; i < dl.numel(); ++i) cmax = std::max(cmax, std::fabs(static_cast<double>(dl.at(i))));
          cmax *= 3.0 * 1.25;  // max weight * s (mean divides by a weight sum > 1)
          for (int64_t i = 0; i < dx.numel(); ++i) {
            const double e = gexp[static_cast<size_t>(i)];
            EXPECT_NEAR(dx.at(i), e, gtol * (std::fabs(e) + cmax * (gtol > 1e-6 ? 1 : 0)) +
                                       (gtol > 1e-6 ? 0.0 : abs_term(c, C)) * cmax)
                << c.name() << " reduction " << static_cast<int>(red) << " i " << i;
            if (e == 0.0 && x.at(i) == -kInfF) {
              EXPECT_EQ(dx.at(i), 0.0f);
            }
          }
        }
      }
    }
  }
}

TEST_P(Sparse, LossSpecialRows) {
  // NaN row, all-masked row (both policies), masked target, n = 0.
  std::vector<float> x = {1, kNanF, 0, -kInfF, -kInfF, -kInfF, 1, -kInfF, 2};
  std::vector<int64_t> t = {0, 1, 1};
  for (EmptyRow er : {EmptyRow::kZero, EmptyRow::kNan}) {
    for (const Case& c : all_cases()) {
      SoftmaxOptions o;
      o.empty_row = er;
      LossOptions lo;
      lo.reduction = Reduction::kNone;
      std::vector<float> out(3), dx(9);
      std::vector<float> dl = {1, 1, 1};
      loss_fwd(c, smax::make_view(x.data(), {3, 3}), smax::make_index_view(t.data(), {3}),
               smax::make_view(out.data(), {3}), lo, o, false);
      EXPECT_TRUE(std::isnan(out[0])) << c.name();
      if (er == EmptyRow::kZero) {
        EXPECT_EQ(out[1], 0.0f) << c.name();
      } else {
        EXPECT_TRUE(std::isnan(out[1])) << c.name();
      }
      EXPECT_EQ(out[2], kInfF) << c.name();
      loss_bwd(c, smax::make_view(x.data(), {3, 3}), smax::make_index_view(t.data(), {3}),
               smax::make_view(dl.data(), {3}), smax::make_view(dx.data(), {3, 3}), lo, o, false);
      for (int i = 0; i < 3; ++i) EXPECT_TRUE(std::isnan(dx[i]));
      for (int i = 3; i < 6; ++i) EXPECT_EQ(std::isnan(dx[i]), er == EmptyRow::kNan);
      EXPECT_EQ(dx[7], 0.0f) << "masked target gets no gradient";
      EXPECT_NEAR(dx[6] + dx[8], 1.0f, 1e-6) << c.name();
    }
  }
  // n = 0 with every target ignored.
  Tensor x0({2, 0});
  Array<int64_t> t0({2});
  t0.fill([](int64_t) { return int64_t{-100}; });
  Tensor o0({2});
  LossOptions lo;
  lo.reduction = Reduction::kNone;
  smax::sparsemax_loss(x0.view(), t0.view(), o0.view(), lo);
  EXPECT_EQ(o0.at(0), 0.0f);
}

// ---------------------------------------------------------------------------
// Errors: smax::Error, nothing written
// ---------------------------------------------------------------------------
TEST_P(Sparse, Errors) {
  Tensor x({2, 5}), y({2, 5}), bad({2, 4});
  x.fill([](int64_t i) { return static_cast<float>(i); });
  y.poison();
  auto untouched = [&] {
    for (float v : y.storage()) {
      if (v != kSentinel) return false;
    }
    return true;
  };
  EntmaxBisectOptions p;
  for (float a : {0.5f, 0.999f, kNanF, kInfF, -2.0f}) {
    p.alpha = a;
    EXPECT_TRUE(throws_invalid([&] { smax::entmax_bisect(x.view(), y.view(), p); }, "alpha"));
    EXPECT_TRUE(throws_invalid([&] { smax::entmax_bisect_backward(x.view(), x.view(), y.view(), std::nullopt, p); }, "alpha"));
  }
  p.alpha = 1.5f;
  p.n_iter = 0;
  EXPECT_TRUE(throws_invalid([&] { smax::entmax_bisect(x.view(), y.view(), p); }, "n_iter"));
  p.n_iter = 50;
  Tensor alpha({2, 1});
  alpha.fill([](int64_t i) { return i == 1 ? 1.0f : 1.5f; });
  p.alpha_tensor = alpha.view();
  EXPECT_TRUE(throws_invalid([&] { smax::entmax_bisect(x.view(), y.view(), p); }, "alpha_tensor"));
  Tensor alpha3({3, 1});
  alpha3.fill([](int64_t) { return 1.5f; });
  p.alpha_tensor = alpha3.view();
  EXPECT_THROW(smax::entmax_bisect(x.view(), y.view(), p), smax::Error);
  EntmaxBisectOptions one;
  one.alpha = 1.0f;
  Tensor da({2});
  EXPECT_TRUE(throws_invalid([&] { smax::entmax_bisect_backward(x.view(), x.view(), y.view(), da.view(), one); }, "dalpha"));
  EXPECT_TRUE(throws_invalid([&] { smax::sparse_softmax(x.view(), y.view(), 0); }, "k"));
  EXPECT_THROW(smax::sparsemax(x.view(), bad.view()), smax::Error);
  EXPECT_THROW(smax::entmax15(x.view(), bad.view()), smax::Error);
  EXPECT_THROW(smax::sparsemax_backward(x.view(), bad.view(), y.view()), smax::Error);
  SoftmaxOptions o;
  o.axis = 2;
  EXPECT_THROW(smax::sparsemax(x.view(), y.view(), o), smax::Error);
  o.axis = -1;
  o.temperature = 0.0f;
  EXPECT_THROW(smax::entmax15(x.view(), y.view(), o), smax::Error);
  // Losses: bad target, bad output shape, bad k.
  Array<int64_t> t({2});
  t.fill([](int64_t i) { return i == 0 ? int64_t{1} : int64_t{7}; });
  Tensor l({2});
  l.poison();
  LossOptions lo;
  lo.reduction = Reduction::kNone;
  EXPECT_TRUE(throws_invalid([&] { smax::sparsemax_loss(x.view(), t.view(), l.view(), lo); }, "target"));
  t.at(1) = 0;
  EXPECT_THROW(smax::entmax15_loss(x.view(), t.view(), bad.view(), lo), smax::Error);
  EXPECT_TRUE(throws_invalid([&] { smax::sparse_softmax_loss(x.view(), t.view(), l.view(), 0, {}, lo); }, "k"));
  EXPECT_TRUE(throws_invalid([&] { smax::sparse_softmax_loss_backward(x.view(), t.view(), l.view(), y.view(), -3, {}, lo); }, "k"));
  // Outputs overlapping an input other than src (fuzz finding: only src was
  // checked): the additive mask, class weights, per-row alpha, dloss.
  {
    std::vector<float> buf(64, 0.0f);
    const std::vector<float> before = buf;
    SoftmaxOptions mo;
    mo.additive_mask = smax::make_view(buf.data(), {2, 5});
    const auto out_on_mask = smax::make_view(buf.data() + 4, {2});
    EXPECT_TRUE(throws_invalid([&] { smax::sparsemax_loss(x.view(), t.view(), out_on_mask, lo, mo); }, "additive_mask"));
    EntmaxBisectOptions pa;
    pa.alpha_tensor = smax::make_view(buf.data() + 20, {2});
    EXPECT_TRUE(throws_invalid([&] { smax::entmax_bisect_loss(x.view(), t.view(), smax::make_view(buf.data() + 21, {2}), pa, lo); }, "alpha_tensor"));
    LossOptions lw = lo;
    lw.weight = smax::make_view(buf.data() + 30, {5});
    EXPECT_TRUE(throws_invalid([&] { smax::entmax15_loss(x.view(), t.view(), smax::make_view(buf.data() + 33, {2}), lw); }, "weight"));
    EXPECT_TRUE(throws_invalid([&] { smax::entmax15_loss_backward(x.view(), t.view(), smax::make_view(buf.data() + 60, {2}), smax::make_view(buf.data() + 26, {2, 5}), lw); }, "weight"));
    EXPECT_TRUE(throws_invalid([&] { smax::sparsemax_loss_backward(x.view(), t.view(), smax::make_view(buf.data() + 50, {2}), smax::make_view(buf.data() + 45, {2, 5}), lo); }, "dloss"));
    EXPECT_EQ(buf, before);
  }
  EXPECT_TRUE(untouched());
  EXPECT_TRUE(l.guards_intact());
  for (int64_t i = 0; i < 2; ++i) EXPECT_EQ(l.at(i), kSentinel);
}

// Fuzz regressions (fuzz/regressions/normalizers/sparse_softmax_backward_*):
// sparse_softmax_backward (and entmax_bisect_backward's alpha = 1 route) is
// softmax_backward, which ignores the masks; sparse.h promises exact 0 at
// masked entries whatever y holds there (raw y with NaN / inf, NaN rows,
// all-masked rows). Unmasked entries keep softmax_backward's bits.
TEST_P(Sparse, FuzzRegressionSoftmaxRouteMasksWin) {
  smax::EntmaxBisectOptions a1;
  a1.alpha = 1.0f;
  auto run = [&](int route, const TensorView& y, const TensorView& dy, const TensorView& dx,
                 const SoftmaxOptions& o) {
    if (route == 0) smax::sparse_softmax_backward(y, dy, dx, o);
    else smax::entmax_bisect_backward(y, dy, dx, std::nullopt, a1, o);
  };
  for (int route = 0; route < 2; ++route) {
    for (EmptyRow er : {EmptyRow::kZero, EmptyRow::kNan}) {
      // [6,3,3] axis 0, a rank-0 bool mask 0 (every entry masked) and an
      // additive mask [3,1] holding NaN; raw y with NaN / inf.
      std::vector<float> y(54), dy(54), dx(54, 7.0f);
      for (size_t i = 0; i < y.size(); ++i) {
        y[i] = i % 5 == 0 ? kNanF : i % 7 == 0 ? kInfF : 0.1f * static_cast<float>(i % 4);
        dy[i] = i % 11 == 0 ? -kInfF : 0.25f * static_cast<float>(i % 3) - 0.3f;
      }
      const uint8_t keep = 0;
      const float add[3] = {kNanF, 1.0f, -kInfF};
      SoftmaxOptions o;
      o.axis = 0;
      o.empty_row = er;
      o.bool_mask = smax::make_bool_view(&keep, {});
      o.additive_mask = smax::make_view(add, {3, 1});
      run(route, smax::make_view(y.data(), {6, 3, 3}), smax::make_view(dy.data(), {6, 3, 3}),
          smax::make_view(dx.data(), {6, 3, 3}), o);
      for (float v : dx) {
        EXPECT_EQ(v, 0.0f);
        EXPECT_FALSE(std::signbit(v));
      }
      // Bool mask [1,3] hiding column 1, additive mask -inf on row 2 of dim 1:
      // masked entries 0, the others exactly softmax_backward's (no masks).
      std::vector<float> ref(54);
      const uint8_t kb[3] = {1, 0, 1};
      const float add2[3] = {0.0f, 0.0f, -kInfF};
      o.bool_mask = smax::make_bool_view(kb, {1, 3});
      o.additive_mask = smax::make_view(add2, {3, 1});
      for (size_t i = 0; i < y.size(); ++i) {
        const bool masked = (i % 3) == 1 || (i / 3) % 3 == 2;
        y[i] = masked ? (i % 2 ? kNanF : kInfF) : 0.05f * static_cast<float>(i % 6);
      }
      run(route, smax::make_view(y.data(), {6, 3, 3}), smax::make_view(dy.data(), {6, 3, 3}),
          smax::make_view(dx.data(), {6, 3, 3}), o);
      SoftmaxOptions plain;
      plain.axis = 0;
      smax::softmax_backward(smax::make_view(y.data(), {6, 3, 3}),
                             smax::make_view(dy.data(), {6, 3, 3}),
                             smax::make_view(ref.data(), {6, 3, 3}), plain);
      for (size_t i = 0; i < y.size(); ++i) {
        const bool masked = (i % 3) == 1 || (i / 3) % 3 == 2;
        if (masked) {
          EXPECT_EQ(dx[i], 0.0f) << i;
          EXPECT_FALSE(std::signbit(dx[i])) << i;
        } else {
          EXPECT_EQ(std::memcmp(&dx[i], &ref[i], sizeof(float)), 0) << i << " " << dx[i] << " " << ref[i];
        }
      }
    }
  }
  // Without masks: exactly softmax_backward (same bits), in place on dy too.
  Rng rng("route");
  std::vector<float> y(3 * 40), dy(3 * 40), dx(3 * 40), ref(3 * 40);
  for (size_t i = 0; i < y.size(); ++i) {
    y[i] = rng.uniform(0.0f, 0.05f);
    dy[i] = rng.uniform(-2.0f, 2.0f);
  }
  smax::sparse_softmax_backward(smax::make_view(y.data(), {3, 40}), smax::make_view(dy.data(), {3, 40}),
                                smax::make_view(dx.data(), {3, 40}));
  smax::softmax_backward(smax::make_view(y.data(), {3, 40}), smax::make_view(dy.data(), {3, 40}),
                         smax::make_view(ref.data(), {3, 40}));
  EXPECT_EQ(std::memcmp(dx.data(), ref.data(), dx.size() * sizeof(float)), 0);
  // Masks of the wrong shape are rejected (they were ignored before).
  const uint8_t kb[2] = {1, 1};
  SoftmaxOptions bad;
  bad.bool_mask = smax::make_bool_view(kb, {2});
  const std::vector<float> before = dx;
  EXPECT_TRUE(throws_invalid([&] {
    smax::sparse_softmax_backward(smax::make_view(y.data(), {3, 40}), smax::make_view(dy.data(), {3, 40}),
                                  smax::make_view(dx.data(), {3, 40}), bad);
  }, "bool_mask"));
  EXPECT_EQ(dx, before);
}

// Fuzz regression (fuzz/regressions/normalizers/sparse_softmax_tiny_ties_*):
// the k-th largest was rebuilt as m + (t - m), which is not t for entries
// far below m (1e-38 next to 6.5625 came back as 0), so the tie count went
// negative and 40 entries were kept for k = 10. Exactly k entries are kept,
// the ties at the k-th value by lowest index, on the sampled path (n = 48)
// and the candidate path (n = 4800).
TEST_P(Sparse, FuzzRegressionTopKTinyValuesBelowMax) {
  const float pattern[6] = {1.98106468e-39f, -5.0625f, 6.5625f, 3.61840627e-39f, 0.0f,
                            1.02333338e-38f};
  for (int64_t n : {48, 4800}) {
    for (int64_t k : {int64_t{10}, int64_t{9}, n / 6 + 3, n / 2}) {
      std::vector<float> x(static_cast<size_t>(n)), y(x.size(), 7.0f);
      for (int64_t i = 0; i < n; ++i) x[i] = pattern[i % 6];
      smax::sparse_softmax(smax::make_view(x.data(), {1, n}), smax::make_view(y.data(), {1, n}), k);
      const std::vector<double> ref = ref::sparse_softmax_row(std::vector<double>(x.begin(), x.end()), k);
      int64_t kept = 0;
      for (int64_t i = 0; i < n; ++i) {
        kept += y[i] != 0.0f;
        EXPECT_LE(std::fabs(y[i] - ref[i]), 2e-6 * std::fabs(ref[i]) + 1e-36)
            << "n " << n << " k " << k << " i " << i << " y " << y[i] << " ref " << ref[i];
      }
      EXPECT_EQ(kept, k) << "n " << n;
    }
  }
}

// Fuzz regression (fuzz/regressions/options/entmax_bisect_dalpha_uniform_alpha_near_1):
// uniform y with alpha = 1.01 and |dy| ~ 2e7: dalpha is exactly 0, a sum of
// terms of size |g| / (alpha-1)^2 ~ 1e11 that cancel; the float64
// evaluation leaves ~1e-5, within the bound's 4e-16 (n + 16) M term (the
// old bound 1e-6 (1 + |ref|) ignored the conditioning). Also a non-uniform
// row against the oracle with the same bound.
TEST_P(Sparse, FuzzRegressionDalphaCancellingTerms) {
  const float alpha = 1.01f;
  const std::vector<float> y = {0.125f, 0.125f, 0.125f, 0.125f, 0.125f, 0.125f, 0.125f, 0.125f};
  const std::vector<float> g = {-4.01586914f, -4.01586914f, -4.01586914f, -4.01586914f,
                                -4.01586914f, -5.77270508f, -23645000.0f, -23645000.0f};
  smax::EntmaxBisectOptions b;
  b.alpha_tensor = smax::make_view(&alpha, {});
  std::vector<float> dx(8), da(1, 7.0f);
  smax::entmax_bisect_backward(smax::make_view(y.data(), {8}), smax::make_view(g.data(), {8}),
                               smax::make_view(dx.data(), {8}), smax::make_view(da.data(), {}), b);
  const double am1 = static_cast<double>(alpha) - 1.0;
  double M = 0.0;
  for (int i = 0; i < 8; ++i) {
    const double yi = y[static_cast<size_t>(i)], gi = std::fabs(g[static_cast<size_t>(i)]);
    M += gi * (2 * yi / (am1 * am1) + (std::fabs(yi * std::log(yi)) + yi * std::fabs(std::log(yi))) / am1);
  }
  EXPECT_GT(M, 1e11);
  EXPECT_LE(std::fabs(da[0]), 1e-6 + 4e-16 * (8 + 16) * M) << da[0];
  EXPECT_LE(std::fabs(da[0]), 1e-12 * M) << da[0];  // far below the terms: no gross error
}

SMAX_INSTANTIATE_PER_TARGET(Sparse);

}  // namespace
}  // namespace smax_test
