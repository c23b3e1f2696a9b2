// tests/test_rescaled_spec.cc: hand vectors of the rescaled and rectified softmaxes
// (docs/vectors.md), finite differences of the float64 reference, low
// precision rounding, every error path, special rows.
// Helpers, bounds and the fixture: tests/rescaled_util.h.
#include "rescaled_util.h"

namespace smax_test {
namespace {

// ---------------------------------------------------------------------------
// Hand vectors (docs/normalizers.md, "Rescaled and rectified softmaxes").
// ---------------------------------------------------------------------------
TEST(RescaledSpec, HandVectors) {
  // SSMax, s = 1.
  {
    std::vector<float> x = {1, 0}, y(2);
    SsmaxOptions p;
    p.s = 1.0f;
    smax::ssmax(smax::make_view(x.data(), {2}), smax::make_view(y.data(), {2}), p);
    expect_row(y, {2.0 / 3, 1.0 / 3}, 2e-6, "ssmax [1,0]");
    std::vector<float> x4 = {1, 0, 0, 0}, y4(4);
    smax::ssmax(smax::make_view(x4.data(), {4}), smax::make_view(y4.data(), {4}), p);
    expect_row(y4, {4.0 / 7, 1.0 / 7, 1.0 / 7, 1.0 / 7}, 2e-6, "ssmax [1,0,0,0]");
  }
  // softpick (eps = 0 for the exact values; the default 1e-6 changes them by ~1e-6).
  {
    SoftpickOptions p;
    p.eps = 0.0f;
    std::vector<float> x = {std::log(3.0f), std::log(2.0f)}, y(2), g = {1, 0}, dx(2);
    smax::softpick(smax::make_view(x.data(), {2}), smax::make_view(y.data(), {2}), p);
    expect_row(y, {2.0 / 3, 1.0 / 3}, 2e-6, "softpick [ln3,ln2]");
    smax::softpick_backward(smax::make_view(x.data(), {2}), smax::make_view(g.data(), {2}),
                            smax::make_view(dx.data(), {2}), p);
    expect_row(dx, {1.0 / 3, -4.0 / 9}, 2e-6, "softpick VJP");
    std::vector<float> x3 = {std::log(2.0f), 0.0f, -std::log(2.0f)}, y3(3);
    smax::softpick(smax::make_view(x3.data(), {3}), smax::make_view(y3.data(), {3}), p);
    expect_row(y3, {2.0 / 3, 0, 0}, 2e-6, "softpick [ln2,0,-ln2]");
    EXPECT_EQ(y3[1], 0.0f);
    EXPECT_EQ(y3[2], 0.0f);
    // A masked entry (-inf, or bool mask 0) adds 0 to the denominator, as the
    // authors' softpick (|e^t - 1| taken only where t is finite): [ln3, ln2,
    // masked] -> [2/3, 1/3, 0], not [1/2, 1/4, 0] (|0 - 1| = 1 counted).
    std::vector<float> xm = {std::log(3.0f), std::log(2.0f), -INFINITY}, ym(3);
    smax::softpick(smax::make_view(xm.data(), {3}), smax::make_view(ym.data(), {3}), p);
    expect_row(ym, {2.0 / 3, 1.0 / 3, 0}, 2e-6, "softpick [ln3,ln2,-inf]");
    std::vector<float> xb = {std::log(3.0f), 5.0f, std::log(2.0f)}, yb(3);
    std::vector<uint8_t> keep = {1, 0, 1};
    smax::SoftmaxOptions mo;
    mo.bool_mask = smax::make_bool_view(keep.data(), {3});
    smax::softpick(smax::make_view(xb.data(), {3}), smax::make_view(yb.data(), {3}), p, mo);
    expect_row(yb, {2.0 / 3, 0, 1.0 / 3}, 2e-6, "softpick bool-masked");
  }
  // StableMax.
  {
    std::vector<float> x = {0, 1, -1}, y(3), g = {0, 1, 0}, dx(3);
    smax::stablemax(smax::make_view(x.data(), {3}), smax::make_view(y.data(), {3}));
    expect_row(y, {2.0 / 7, 4.0 / 7, 1.0 / 7}, 1e-6, "stablemax [0,1,-1]");
    smax::stablemax_backward(smax::make_view(x.data(), {3}), smax::make_view(g.data(), {3}),
                             smax::make_view(dx.data(), {3}));
    expect_row(dx, {-8.0 / 49, 6.0 / 49, -2.0 / 49}, 2e-6, "stablemax VJP");
    std::vector<float> x2 = {1, 3}, y2(2);
    smax::stablemax(smax::make_view(x2.data(), {2}), smax::make_view(y2.data(), {2}));
    expect_row(y2, {1.0 / 3, 2.0 / 3}, 1e-6, "stablemax [1,3]");
    int64_t tg = 1;
    float loss = 0;
    smax::stablemax_cross_entropy(smax::make_view(x.data(), {1, 3}),
                                  smax::make_index_view(&tg, {1}), smax::make_view(&loss, {}));
    EXPECT_NEAR(loss, 0.5596158, 1e-6);
    // Gradient (s'/s)(y - d_t) at t = 1: [1*(2/7), (1/2)(4/7 - 1), (1/2)(1/7)].
    float one = 1.0f;
    std::vector<float> gx(3);
    smax::stablemax_cross_entropy_backward(smax::make_view(x.data(), {1, 3}),
                                           smax::make_index_view(&tg, {1}),
                                           smax::make_view(&one, {}),
                                           smax::make_view(gx.data(), {1, 3}));
    expect_row(gx, {2.0 / 7, -3.0 / 14, 1.0 / 14}, 2e-6, "stablemax CE gradient");
  }
  // Collapse gaps: f32 ~16.6, f16 ~7.6, bf16 ~5.5 for one competitor.
  {
    struct Gap {
      Precision p;
      float below, above;
    };
    for (const Gap& gp : {Gap{Precision::kF32, 16.0f, 17.0f}, Gap{Precision::kF16, 7.0f, 8.0f},
                          Gap{Precision::kBF16, 5.0f, 6.0f}}) {
      std::vector<float> a = {0.0f, -gp.below}, b = {0.0f, -gp.above};
      EXPECT_EQ(smax::softmax_collapse_fraction(smax::make_view(a.data(), {2}), gp.p), 0.0)
          << smax::precision_name(gp.p);
      EXPECT_EQ(smax::softmax_collapse_fraction(smax::make_view(b.data(), {2}), gp.p), 1.0)
          << smax::precision_name(gp.p);
    }
  }
}

// ---------------------------------------------------------------------------
// Finite differences of the float64 reference forward vs the reference VJPs.
// ---------------------------------------------------------------------------
TEST(RescaledSpec, ReferenceVjpMatchesFiniteDifferences) {
  Rng rng("fd");
  const double h = 1e-6;
  for (int trial = 0; trial < 20; ++trial) {
    const size_t n = 2 + static_cast<size_t>(trial % 6);
    Row x(n), g(n);
    for (size_t i = 0; i < n; ++i) {
      double v = rng.uniform(-3.0f, 3.0f);
      if (std::fabs(v) < 0.2) v += v < 0 ? -0.3 : 0.3;  // softpick / stablemax kinks at 0
      x[i] = v;
      g[i] = rng.normal();
    }
    if (trial % 5 == 0) x[0] = -INFINITY;  // a masked entry
    const double sigma = 0.7, s = 0.6;
    const int64_t tg = trial % static_cast<int64_t>(n) == 0 ? 1 : trial % static_cast<int64_t>(n);
    auto dotg = [&](const Row& y) {
      double acc = 0;
      for (size_t i = 0; i < n; ++i) acc += g[i] * y[i];
      return acc;
    };
    // L(x) = <g, f(sigma x)>; dL/dx = sigma * VJP(t = sigma x).
    auto scaled = [&](const Row& v) {
      Row t(v);
      for (double& e : t) e *= sigma;
      return t;
    };
    auto ssm = [&](const Row& v, double ss) {
      return dotg(ref::ssmax_row(scaled(v), ss, 0, smax::EmptyRow::kZero, false, false));
    };
    auto spk = [&](const Row& v) {
      return dotg(ref::softpick_row(scaled(v), 1e-6, smax::EmptyRow::kZero).y);
    };
    auto stm = [&](const Row& v) { return dotg(ref::stablemax_row(scaled(v), smax::EmptyRow::kZero)); };
    auto ce = [&](const Row& v) { return ref::stablemax_ce_row(scaled(v), tg, smax::EmptyRow::kZero); };
    const Row t = scaled(x);
    const Row y_ss = ref::ssmax_row(t, s, 0, smax::EmptyRow::kZero, false, false);
    double ds = 0;
    const Row v_ss = ref::ssmax_vjp_row(t, y_ss, g, s, 0, sigma, smax::EmptyRow::kZero, false, &ds);
    const Row v_sp = ref::softpick_vjp_row(t, g, 1e-6, sigma, smax::EmptyRow::kZero);
    const Row v_st = ref::stablemax_vjp_row(t, g, sigma, smax::EmptyRow::kZero);
    const Row v_ce = ref::stablemax_ce_grad_row(t, tg, sigma, smax::EmptyRow::kZero);
    for (size_t j = 0; j < n; ++j) {
      if (x[j] == -INFINITY) {
        EXPECT_EQ(v_ss[j], 0.0);
        EXPECT_EQ(v_sp[j], 0.0);
        EXPECT_EQ(v_st[j], 0.0);
        continue;
      }
      Row xp = x, xm = x;
      xp[j] += h;
      xm[j] -= h;
      auto fd = [&](const std::function<double(const Row&)>& f) { return (f(xp) - f(xm)) / (2 * h); };
      const std::string at = "trial " + std::to_string(trial) + " j " + std::to_string(j);
      EXPECT_NEAR(v_ss[j], fd([&](const Row& v) { return ssm(v, s); }), 1e-7) << "ssmax " << at;
      EXPECT_NEAR(v_sp[j], fd(spk), 1e-7) << "softpick " << at;
      EXPECT_NEAR(v_st[j], fd(stm), 1e-7) << "stablemax " << at;
      if (x[static_cast<size_t>(tg)] != -INFINITY) {
        EXPECT_NEAR(v_ce[j], fd(ce), 1e-7) << "CE " << at;
      }
    }
    const double fds = (ssm(x, s + h) - ssm(x, s - h)) / (2 * h);
    EXPECT_NEAR(ds, fds, 1e-7) << "ssmax ds, trial " << trial;
  }
}

// The vector f16 / bf16 rounding of the detector vs the reference's.
TEST(RescaledSpec, LowPrecisionRounding) {
  std::vector<float> x;
  for (uint32_t b = 0; b <= 0x47900000u; b += 997) {  // 0 .. ~73728, every binade
    float v;
    std::memcpy(&v, &b, 4);
    x.push_back(v);
  }
  for (float v : {0.0f, 1.0f, 65504.0f, 65519.0f, 65520.0f, 0x1p-14f, 0x1p-24f, 0x1p-25f,
                  0x1.8p-25f, 0x1.0p-133f, 0x1.8p-134f, 1.0f + 0x1p-11f, 1.0f + 0x1p-8f,
                  1.0f + 0x1.8p-8f})
    x.push_back(v);
  std::vector<float> out(x.size());
  for (Precision p : {Precision::kF16, Precision::kBF16}) {
    smax::kernels::round_to_precision_row(x.data(), static_cast<int64_t>(x.size()),
                                          static_cast<int>(p), out.data());
    int bad = 0;
    for (size_t i = 0; i < x.size() && bad < 5; ++i) {
      const double want = ref::round_to(x[i], p);
      const double scalar = smax::kernels::round_to_precision(x[i], static_cast<int>(p));
      if (static_cast<double>(out[i]) != want || scalar != want) {
        ++bad;
        ADD_FAILURE() << smax::precision_name(p) << " x=" << x[i] << " vector=" << out[i]
                      << " scalar=" << scalar << " ref=" << want;
      }
    }
  }
}

// Every error path throws smax::Error before writing anything.
TEST(RescaledErrors, ThrowBeforeWriting) {
  Tensor src({4, 5}), dst({4, 5}), bad({4, 6}), dy({4, 5});
  src.fill([](int64_t i) { return static_cast<float>(i % 7) - 3.0f; });
  dy.fill([](int64_t i) { return static_cast<float>(i % 3); });
  dst.poison();
  const TensorView s = src.view(), d = dst.view(), b = bad.view(), g = dy.view();
  SsmaxOptions sp;
  sp.s = NAN;
  EXPECT_TRUE(throws_invalid([&] { smax::ssmax(s, d, sp); }, "ssmax: s must be finite"));
  sp.s = 1.0f;
  sp.fixed_n = -2;
  EXPECT_TRUE(throws_invalid([&] { smax::ssmax(s, d, sp); }, "fixed_n must be >= 0, got -2"));
  EXPECT_TRUE(throws_invalid([&] { smax::ssmax_backward(s, s, g, d, sp); }, "fixed_n"));
  sp.fixed_n = 0;
  EXPECT_TRUE(throws_invalid([&] { smax::ssmax(s, b, sp); }, "dst"));
  Tensor srows({3, 1});
  sp.s_rows = srows.view();
  EXPECT_TRUE(throws_invalid([&] { smax::ssmax(s, d, sp); }, "s_rows"));
  sp.s_rows.reset();
  Tensor dsbad({5});
  const TensorView dsv = dsbad.view();
  EXPECT_TRUE(throws_invalid([&] { smax::ssmax_backward(s, s, g, d, sp, {}, &dsv); }, "ds"));
  EXPECT_TRUE(throws_invalid([&] { smax::ssmax_backward(s, b, g, d, sp); }, "y"));
  SoftpickOptions pk;
  for (float eps : {-1.0f, NAN, INFINITY, 1e-40f}) {
    pk.eps = eps;
    EXPECT_TRUE(throws_invalid([&] { smax::softpick(s, d, pk); }, "softpick: eps must be"));
    EXPECT_TRUE(throws_invalid([&] { smax::softpick_backward(s, g, d, pk); }, "eps"));
  }
  SoftmaxOptions o;
  o.axis = 2;
  EXPECT_TRUE(throws_invalid([&] { smax::stablemax(s, d, o); }, "axis"));
  EXPECT_TRUE(throws_invalid([&] { smax::stablemax_backward(s, b, d); }, "dy"));
  o.axis = -1;
  o.temperature = 0.0f;
  EXPECT_TRUE(throws_invalid([&] { smax::softpick(s, d, {}, o); }, "temperature"));
  EXPECT_TRUE(throws_invalid([&] { smax::softmax_collapse_fraction(s, Precision::kF16, o); }, "temperature"));
  EXPECT_TRUE(throws_invalid([&] { smax::softmax_collapse_fraction(s, static_cast<Precision>(7)); },
                             "precision has unknown value 7"));
  Tensor flags({5});
  const TensorView fv = flags.view();
  EXPECT_TRUE(throws_invalid([&] { smax::softmax_collapse_fraction(s, Precision::kF32, {}, &fv); }, "flags"));
  EXPECT_TRUE(throws_invalid([&] { (void)smax::parse_precision("fp8"); }, "fp8"));
  // Partial overlap of dst and src.
  TensorView shifted = s;
  shifted.data = static_cast<float*>(shifted.data) + 1;
  shifted.shape[0] = 3;
  TensorView s3 = s;
  s3.shape[0] = 3;
  EXPECT_TRUE(throws_invalid([&] { smax::stablemax(s3, shifted); }, "overlaps"));
  // Cross-entropy.
  I64Tensor tg({4});
  tg.fill([](int64_t i) { return i; });
  Tensor loss({4}), one(std::vector<int64_t>{});
  LossOptions lo;
  tg.at(1) = 5;
  EXPECT_TRUE(throws_invalid([&] { smax::stablemax_cross_entropy(s, tg.view(), one.view(), lo); }, "target 5"));
  tg.at(1) = 1;
  EXPECT_TRUE(throws_invalid([&] { smax::stablemax_cross_entropy(s, tg.view(), loss.view(), lo); }, "dst"));
  lo.reduction = Reduction::kNone;
  EXPECT_TRUE(throws_invalid(
      [&] { smax::stablemax_cross_entropy_backward(s, tg.view(), one.view(), d, lo); }, "dloss"));
  Tensor w({4});
  lo.weight = w.view();
  EXPECT_TRUE(throws_invalid([&] { smax::stablemax_cross_entropy(s, tg.view(), loss.view(), lo); }, "weight"));
  const std::vector<float> after = dst.dense();
  for (float v : after) EXPECT_EQ(v, kSentinel);
  EXPECT_TRUE(dst.guards_intact());
  EXPECT_EQ(one.at(0), kSentinel);
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(loss.at(i), kSentinel);
}

// n = 1, single visible entry, all-masked rows and special values by name.
TEST(RescaledSpec, SpecialRows) {
  std::vector<float> one = {2.5f}, y(1);
  for (float s : {0.43f, -1.0f}) {
    SsmaxOptions p;
    p.s = s;
    smax::ssmax(smax::make_view(one.data(), {1}), smax::make_view(y.data(), {1}), p);
    EXPECT_EQ(y[0], 1.0f);
  }
  smax::stablemax(smax::make_view(one.data(), {1}), smax::make_view(y.data(), {1}));
  EXPECT_EQ(y[0], 1.0f);
  // One visible entry among masked ones: ln 1 = 0.
  std::vector<float> x = {-INFINITY, 3.0f, -INFINITY}, y3(3);
  smax::ssmax(smax::make_view(x.data(), {3}), smax::make_view(y3.data(), {3}));
  EXPECT_EQ(y3[0], 0.0f);
  EXPECT_EQ(y3[1], 1.0f);
  EXPECT_EQ(y3[2], 0.0f);
  // c < 0 keeps masked entries masked.
  SsmaxOptions neg;
  neg.s = -1.0f;
  std::vector<float> x4 = {-INFINITY, 1.0f, 0.0f, -INFINITY}, y4(4);
  smax::ssmax(smax::make_view(x4.data(), {4}), smax::make_view(y4.data(), {4}), neg);
  EXPECT_EQ(y4[0], 0.0f);
  EXPECT_EQ(y4[3], 0.0f);
  EXPECT_NEAR(y4[1], 1.0 / 3, 1e-6);  // softmax([-ln2, 0])
  // Per-row s: a NaN s gives a NaN row (forward, dsrc and ds), others are fine.
  {
    std::vector<float> xs = {1, 0, 2, 0.5f, -1, 0}, ys(6), srow = {NAN, 1.0f}, dy = {1, 2, 3, 4, 5, 6},
                       dx(6), dsv(2);
    SsmaxOptions ps;
    ps.s_rows = smax::make_view(srow.data(), {2, 1});
    smax::ssmax(smax::make_view(xs.data(), {2, 3}), smax::make_view(ys.data(), {2, 3}), ps);
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(std::isnan(ys[static_cast<size_t>(i)]));
    const std::vector<double> r = ref::softmax_row({0.5 * std::log(3.0), -std::log(3.0), 0.0},
                                                   EmptyRow::kZero);
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(ys[static_cast<size_t>(3 + i)], r[static_cast<size_t>(i)], 1e-6);
    const TensorView dsview = smax::make_view(dsv.data(), {2});
    smax::ssmax_backward(smax::make_view(xs.data(), {2, 3}), smax::make_view(ys.data(), {2, 3}),
                         smax::make_view(dy.data(), {2, 3}), smax::make_view(dx.data(), {2, 3}),
                         ps, {}, &dsview);
    EXPECT_TRUE(std::isnan(dsv[0]));
    EXPECT_TRUE(std::isnan(dx[0]));
    EXPECT_TRUE(std::isfinite(dsv[1]));
  }
  // Softpick: all <= 0 -> zeros; +inf -> NaN row.
  std::vector<float> np = {-1.0f, 0.0f, -3.0f}, yp(3);
  smax::softpick(smax::make_view(np.data(), {3}), smax::make_view(yp.data(), {3}));
  for (float v : yp) EXPECT_EQ(v, 0.0f);
  np[1] = INFINITY;
  smax::softpick(smax::make_view(np.data(), {3}), smax::make_view(yp.data(), {3}));
  for (float v : yp) EXPECT_TRUE(std::isnan(v));
  // StableMax with huge finite values: no overflow.
  std::vector<float> big = {FLT_MAX, FLT_MAX, -FLT_MAX}, yb(3);
  smax::stablemax(smax::make_view(big.data(), {3}), smax::make_view(yb.data(), {3}));
  EXPECT_NEAR(yb[0], 0.5f, 1e-6f);
  EXPECT_NEAR(yb[1], 0.5f, 1e-6f);
  EXPECT_EQ(yb[2], 0.0f);
}

}  // namespace
}  // namespace smax_test
