// tests/test_linear_cross_entropy.cc: linear_cross_entropy on every SIMD target: hand
// vector, odd and vocabulary sizes, every option, fused, all ignored, zero
// weight sum, adversarial rows.
// Helpers, bounds and the fixture: tests/linear_cross_entropy_util.h.
#include "linear_cross_entropy_util.h"

namespace smax_test {
namespace {

// ---- hand vectors ------------------------------------------------------------------
TEST_P(Lce, HandVector) {
  // h = [1, 0], W = [[1, 0], [2, 0], [0, 0]] -> z = [1, 2, 0], target 1:
  // loss = log(e + e^2 + 1) - 2 = 0.4076059644, dz = softmax(z) - e_1 =
  // [0.2447284711, -0.3347590421, 0.0900305732], dhidden = dz W =
  // [-0.4247896131, 0], dweight = dz^T h, dbias = dz.
  const float h[] = {1.0f, 0.0f};
  const float w[] = {1.0f, 0.0f, 2.0f, 0.0f, 0.0f, 0.0f};
  const float b[] = {0.0f, 0.0f, 0.0f};
  const int64_t t[] = {1};
  float loss = 0.0f, one = 1.0f;
  float dh[2], dw[6], db[3];
  CrossEntropyOptions ce;
  smax::linear_cross_entropy(smax::make_view(h, {1, 2}), smax::make_view(w, {3, 2}),
                             smax::make_index_view(t, {1}), smax::make_view(b, {3}),
                             smax::make_view(&loss, {1}), ce);
  EXPECT_NEAR(loss, 0.4076059644, 1e-6);
  smax::linear_cross_entropy_backward(smax::make_view(h, {1, 2}), smax::make_view(w, {3, 2}),
                                      smax::make_index_view(t, {1}), smax::make_view(b, {3}),
                                      smax::make_view(&one, {1}), smax::make_view(dh, {1, 2}),
                                      smax::make_view(dw, {3, 2}), smax::make_view(db, {3}), ce);
  const double dz[] = {0.2447284711, -0.3347590421, 0.0900305732};
  EXPECT_NEAR(dh[0], -0.4247896131, 1e-6);
  EXPECT_EQ(dh[1], 0.0f);
  for (int j = 0; j < 3; ++j) {
    EXPECT_NEAR(dw[2 * j], dz[j], 1e-6);
    EXPECT_EQ(dw[2 * j + 1], 0.0f);
    EXPECT_NEAR(db[j], dz[j], 1e-6);
  }
  // The cross-entropy hand vector (docs/losses.md, "Hand vectors"): LSE(x) - x_t
  // with x = z (no bias).
  smax::linear_cross_entropy(smax::make_view(h, {1, 2}), smax::make_view(w, {3, 2}),
                             smax::make_index_view(t, {1}), std::nullopt,
                             smax::make_view(&loss, {1}), ce);
  EXPECT_NEAR(loss, 0.4076059644, 1e-6);
}

// ---- sizes -------------------------------------------------------------------------
TEST_P(Lce, OddSizes) {
  Rng rng("odd");
  const int64_t dims[][3] = {{1, 1, 1},   {2, 3, 2},   {3, 5, 7},   {7, 13, 31}, {8, 8, 8},
                             {9, 2, 33},  {17, 33, 101}, {5, 31, 1000}, {3, 9, 1001},
                             {1, 1, 100}, {31, 3, 9},  {33, 1, 3}};
  int i = 0;
  for (const auto& d : dims) {
    for (Reduction red : {Reduction::kNone, Reduction::kMean, Reduction::kSum}) {
      Case c = sized_case(d[0], d[1], d[2], red);
      c.gen.bias = (i % 2) == 0;
      c.gen.ignore = 0.2;
      c.dbias = (i % 3) != 0;
      c.lce.vocab_chunk = (i % 4) == 1 ? 7 : 0;
      c.lce.token_chunk = (i % 4) == 2 ? 3 : 0;
      ++i;
      ASSERT_TRUE(run_case(c, rng)) << GetParam();
    }
  }
}

// D = 0 (no hidden units) with null hidden / weight / dhidden / dweight
// data: logits are the bias alone; no address may be formed from the null
// pointers (fuzz finding: the backward computed dweight + v0 * stride).
TEST_P(Lce, ZeroHiddenUnitsNullData) {
  const int64_t N = 3, V = 7;
  std::vector<float> bias(V), dbias(V, -1.0f), loss(1, -1.0f), dloss(1, 1.0f);
  for (int64_t j = 0; j < V; ++j) bias[static_cast<size_t>(j)] = 0.25f * static_cast<float>(j);
  std::vector<int64_t> target = {1, 6, 3};
  const auto h = smax::make_view(static_cast<float*>(nullptr), {N, 0});
  const auto w = smax::make_view(static_cast<float*>(nullptr), {V, 0});
  const auto t = smax::make_index_view(target.data(), {N});
  const auto b = smax::make_view(bias.data(), {V});
  smax::CrossEntropyOptions ce;  // mean
  smax::linear_cross_entropy(h, w, t, b, smax::make_view(loss.data(), {}), ce);
  // Every row has the logits `bias`: loss = mean over rows of lse(bias) - bias[target].
  double lse = 0.0;
  for (float v : bias) lse += std::exp(static_cast<double>(v));
  lse = std::log(lse);
  double want = 0.0;
  for (int64_t tg : target) want += lse - bias[static_cast<size_t>(tg)];
  EXPECT_NEAR(loss[0], want / N, 1e-6);
  smax::linear_cross_entropy_backward(h, w, t, b, smax::make_view(dloss.data(), {}),
                                      smax::make_view(static_cast<float*>(nullptr), {N, 0}),
                                      smax::make_view(static_cast<float*>(nullptr), {V, 0}),
                                      smax::make_view(dbias.data(), {V}), ce);
  for (int64_t j = 0; j < V; ++j) {
    double g = 0.0;
    for (int64_t tg : target) g += std::exp(bias[static_cast<size_t>(j)] - lse) - (tg == j ? 1.0 : 0.0);
    EXPECT_NEAR(dbias[static_cast<size_t>(j)], g / N, 1e-6) << j;
  }
}

TEST_P(Lce, VocabularySizes) {
  Rng rng("vocab");
  for (int64_t V : {0, 1, 2, 3, 7, 8, 9, 31, 33, 100, 1000, 1001, 32000, 128256}) {
    Case c;
    c.N = V > 10000 ? 2 : 3;
    c.D = 3;
    c.V = V;
    c.gen.ignore = V == 0 ? 1.0 : 0.0;
    c.ce.loss.reduction = Reduction::kNone;
    c.outputs = true;
    ASSERT_TRUE(run_case(c, rng)) << GetParam();
  }
  // N = 0 and D = 0.
  for (Reduction red : {Reduction::kNone, Reduction::kMean, Reduction::kSum}) {
    Case c;
    c.N = 0;
    c.ce.loss.reduction = red;
    c.ce.loss.empty_mean = EmptyMean::kZero;
    ASSERT_TRUE(run_case(c, rng)) << GetParam();
    c.N = 4;
    c.D = 0;
    ASSERT_TRUE(run_case(c, rng)) << GetParam();
  }
}

// ---- every option ---------------------------------------------------------------------
TEST_P(Lce, EveryOption) {
  run_variants("options", 9, [](Reduction red, int variant, int i) {
    Case c = sized_case(37, 19, 203, red);
    c.gen.ignore = 0.2;
    c.outputs = true;
    c.lce.token_chunk = (i % 3) == 0 ? 8 : 0;
    c.lce.vocab_chunk = (i % 2) == 0 ? 64 : 0;
    switch (variant) {
      case 0: break;
      case 1: c.ce.label_smoothing = 0.1f; break;
      case 2: c.ce.lse_square_scale = 1e-2f; break;
      case 3: c.ce.softcap = 3.0f; break;
      case 4: c.gen.class_weights = true; break;
      case 5:
        c.opt.scale = 0.7f;
        c.opt.temperature = 1.3f;
        c.gen.bias = false;
        break;
      case 6:  // everything at once, padded vocabulary (-inf bias)
        c.ce.label_smoothing = 0.2f;
        c.ce.lse_square_scale = 1e-4f;
        c.ce.softcap = 5.0f;
        c.gen.class_weights = true;
        c.gen.masked_classes = 5;
        c.opt.temperature = 0.8f;
        break;
      case 7:  // the forward's lse handed to the backward
        c.lse_to_backward = true;
        c.ce.lse_square_scale = 1e-3f;
        break;
      case 8:
        c.ce.label_smoothing = 1.0f;
        c.gen.class_weights = true;
        c.lse_to_backward = true;  // ignored with smoothing: rescans
        break;
    }
    return c;
  });
}

TEST_P(Lce, Fused) {
  run_variants("fused", 4, [](Reduction red, int variant, int i) {
    Case c = sized_case(23, 11, 97, red);
    c.fused = true;
    c.gen.ignore = 0.2;
    c.outputs = (i % 2) == 0;
    c.lce.vocab_chunk = variant == 3 ? 16 : 0;  // tiled vocabulary: two passes
    c.lce.token_chunk = (i % 3) == 0 ? 5 : 0;
    if (variant == 1) {
      c.ce.label_smoothing = 0.1f;
      c.ce.softcap = 4.0f;
      c.gen.class_weights = true;
    }
    if (variant == 2) {
      c.ce.lse_square_scale = 1e-3f;
      c.gen.masked_classes = 3;
      c.opt.scale = 1.5f;
    }
    return c;
  });
}

TEST_P(Lce, AllIgnored) {
  Rng rng("ignored");
  for (Reduction red : {Reduction::kNone, Reduction::kMean, Reduction::kSum}) {
    for (EmptyMean em : {EmptyMean::kNan, EmptyMean::kZero}) {
      Case c;
      c.N = 6;
      c.ce.loss.reduction = red;
      c.ce.loss.empty_mean = em;
      c.gen.ignore = 1.0;
      c.outputs = true;
      ASSERT_TRUE(run_case(c, rng)) << GetParam();
    }
  }
}

// kMean where every counted row has weight 0 (targets 0 and 2 weigh 0, row
// 1 ignored): loss NaN and, as PyTorch's linear + cross_entropy, the
// gradient of the counted rows NaN (w_y / sum w = 0 / 0): dhidden rows 0
// and 2, every dweight and dbias entry (sums over those rows); dhidden row 1
// is 0. kZero: loss and gradients 0. Backward, fused, a tiled vocabulary and
// the oracle agree. (The gradients used to be exactly 0.)
TEST_P(Lce, ZeroWeightSumMean) {
  const float h[] = {1.0f, 0.5f, -1.0f, 2.0f, 0.25f, 0.0f};
  const float w[] = {1.0f, 0.0f, 2.0f, -1.0f, 0.0f, 0.5f};
  const float cw[] = {0.0f, 1.0f, 0.0f};
  const int64_t t[] = {0, -100, 2};
  const float one = 1.0f;
  const TensorView hv = smax::make_view(h, {3, 2}), wv = smax::make_view(w, {3, 2});
  const TensorView tv = smax::make_index_view(t, {3});
  for (int zero = 0; zero < 2; ++zero) {
    for (int mode = 0; mode < 3; ++mode) {  // backward, fused, tiled vocabulary
      CrossEntropyOptions ce;
      ce.loss.weight = smax::make_view(cw, {3});
      if (zero) ce.loss.empty_mean = EmptyMean::kZero;
      LinearCrossEntropyOptions lce;
      if (mode == 2) lce.vocab_chunk = 2;
      float loss = 7.0f, dh[6], dw[6], db[3];
      std::fill(dh, dh + 6, 7.0f);
      std::fill(dw, dw + 6, 7.0f);
      std::fill(db, db + 3, 7.0f);
      const std::string what = std::string(zero ? "kZero" : "kNan") + " mode " + std::to_string(mode);
      if (mode == 1) {
        smax::linear_cross_entropy_fused(hv, wv, tv, std::nullopt, smax::make_view(&loss, {}),
                                         smax::make_view(&one, {}), smax::make_view(dh, {3, 2}),
                                         smax::make_view(dw, {3, 2}), smax::make_view(db, {3}),
                                         ce, lce);
        if (zero) {
          EXPECT_EQ(loss, 0.0f) << what;
        } else {
          EXPECT_TRUE(std::isnan(loss)) << what;
        }
      } else {
        smax::linear_cross_entropy_backward(hv, wv, tv, std::nullopt, smax::make_view(&one, {}),
                                            smax::make_view(dh, {3, 2}),
                                            smax::make_view(dw, {3, 2}),
                                            smax::make_view(db, {3}), ce, lce);
      }
      const TensorView dl = smax::make_view(&one, {});
      const LceResult R = smax::reference::linear_cross_entropy(hv, wv, tv, std::nullopt, ce, {}, &dl);
      auto expect = [&](float got, double want, bool nan, const std::string& name) {
        if (nan && !zero) {
          EXPECT_TRUE(std::isnan(got)) << what << " " << name << " = " << got;
          EXPECT_TRUE(std::isnan(want)) << what << " oracle " << name;
        } else {
          EXPECT_EQ(got, 0.0f) << what << " " << name;
          EXPECT_EQ(want, 0.0) << what << " oracle " << name;
        }
      };
      for (int i = 0; i < 6; ++i) {
        expect(dh[i], R.dhidden[static_cast<size_t>(i)], i / 2 != 1, "dhidden " + std::to_string(i));
        expect(dw[i], R.dweight[static_cast<size_t>(i)], true, "dweight " + std::to_string(i));
      }
      for (int j = 0; j < 3; ++j) expect(db[j], R.dbias[static_cast<size_t>(j)], true, "dbias");
    }
  }
}

TEST_P(Lce, Adversarial) {
  Rng rng("adversarial");
  // Huge logits (|z| ~ 1e4: naive exp overflows), with and without softcap.
  for (float cap : {0.0f, 30.0f}) {
    Case c;
    c.N = 13;
    c.D = 5;
    c.V = 77;
    c.gen.h_scale = 40.0f;
    c.gen.w_scale = 40.0f;
    c.gen.b_scale = 1000.0f;
    c.ce.softcap = cap;
    c.ce.loss.reduction = Reduction::kNone;
    c.outputs = true;
    c.lce.vocab_chunk = 16;
    ASSERT_TRUE(run_case(c, rng)) << GetParam();
  }
  // Every logit below -709 (bias -1000): the scan's first rebase moves its
  // reference from 0 to ~-1000, where e^(0 - ref) overflows float64; the
  // sums, still exactly 0, must stay 0 (they were 0 * inf = NaN).
  Rng r0("very-negative");
  for (int64_t chunk : {int64_t{0}, int64_t{16}}) {
    for (float cap : {0.0f, 2000.0f}) {
      Case c;
      c.N = 6;
      c.V = 45;
      c.gen.b_shift = -1000.0f;
      c.ce.softcap = cap;
      c.ce.label_smoothing = 0.1f;
      c.ce.loss.reduction = Reduction::kNone;
      c.outputs = true;
      c.lce.vocab_chunk = chunk;
      ASSERT_TRUE(run_case(c, r0)) << GetParam() << " chunk " << chunk << " cap " << cap;
    }
  }
  // Constant logits (W = 0), ties everywhere.
  {
    Case c;
    c.gen.w_scale = 0.0f;
    c.gen.bias = false;
    c.ce.loss.reduction = Reduction::kNone;
    c.outputs = true;
    ASSERT_TRUE(run_case(c, rng)) << GetParam();
  }
  // A masked target (-inf bias on every class but a few): loss +inf, finite gradients.
  {
    Case c;
    c.N = 9;
    c.V = 12;
    c.gen.masked_classes = 6;
    c.ce.loss.reduction = Reduction::kNone;
    c.outputs = true;
    ASSERT_TRUE(run_case(c, rng)) << GetParam();
  }
  // Every class masked: empty rows (kZero and kNan).
  for (EmptyRow er : {EmptyRow::kZero, EmptyRow::kNan}) {
    Rng r2("allmasked");
    Inputs in = make_inputs(4, 3, 5, Gen{}, r2);
    in.bias.fill([](int64_t) { return -kInfF; });
    in.has_bias = true;
    SoftmaxOptions opt;
    opt.empty_row = er;
    CrossEntropyOptions ce;
    ce.loss.reduction = Reduction::kNone;
    Tensor dst({4}), dl({4}), dh({4, 3}), dw({5, 3}), db({5});
    fill_normal(dl, r2);
    smax::linear_cross_entropy(in.hidden.view(), in.weight.view(), in.target.view(), in.bias_view(),
                               dst.view(), ce, {}, opt);
    smax::linear_cross_entropy_backward(in.hidden.view(), in.weight.view(), in.target.view(),
                                        in.bias_view(), dl.view(), dh.view(), dw.view(), db.view(),
                                        ce, {}, opt);
    const LceProblem p = smax::reference::lce_problem(in.hidden.view(), in.weight.view(),
                                                      in.target.view(), in.bias_view(), ce, opt);
    const std::vector<double> g = to_dense(dl.view());
    const LceResult ref = smax::reference::lce_solve(p, &g);
    for (int64_t r = 0; r < 4; ++r) {
      const double want = ref.row_loss[static_cast<size_t>(r)];
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(dst.at(r)));
      } else {
        EXPECT_EQ(dst.at(r), want);
      }
    }
    for (int64_t i = 0; i < 12; ++i) {
      EXPECT_EQ(std::isnan(dh.at(i)), std::isnan(ref.dhidden[static_cast<size_t>(i)]));
      if (er == EmptyRow::kZero) {
        EXPECT_EQ(dh.at(i), 0.0f);
      }
    }
  }
  // NaN in one hidden row: that row's loss NaN, the others exact.
  {
    Rng r3("nanrow");
    Inputs in = make_inputs(5, 4, 9, Gen{}, r3);
    in.hidden.at(2 * 4 + 1) = kNanF;
    in.target.at(2) = 3;
    CrossEntropyOptions ce;
    ce.loss.reduction = Reduction::kNone;
    Tensor dst({5});
    smax::linear_cross_entropy(in.hidden.view(), in.weight.view(), in.target.view(), in.bias_view(),
                               dst.view(), ce);
    EXPECT_TRUE(std::isnan(dst.at(2)));
    for (int64_t r : {0, 1, 3, 4}) {
      if (in.target.at(r) != -100) {
        EXPECT_TRUE(std::isfinite(dst.at(r)));
      }
    }
  }
}

SMAX_INSTANTIATE_PER_TARGET(Lce);

}  // namespace
}  // namespace smax_test
