/* tests/c_api/rescaled.c: the C ABI test of rescaled / rectified softmaxes (include/smax/rescaled.h). */
#include "util.h"

/* ---- rescaled / rectified softmaxes (include/smax/rescaled.h) ---------------- */

void test_rescaled(void) {
  const double ln2 = log(2.0), ln3 = log(3.0);

  /* SSMax, s = 1 (docs/vectors.md), and its VJP with ds. */
  {
    float x[2] = {1.0f, 0.0f}, y[2], g[2] = {1.0f, 0.0f}, dx[2], ds = -7.0f;
    float x4[4] = {1.0f, 0.0f, 0.0f, 0.0f}, y4[4];
    smax_tensor tx = f32_1d(x, 2), ty = f32_1d(y, 2), tg = f32_1d(g, 2), tdx = f32_1d(dx, 2);
    smax_tensor tds = f32_scalar(&ds), tx4 = f32_1d(x4, 4), ty4 = f32_1d(y4, 4);
    smax_ssmax_options so;
    smax_ssmax_options_init(&so);
    so.s = 1.0f;
    CHECK(smax_ssmax(&tx, &ty, &so, NULL) == SMAX_STATUS_OK);
    CHECK_HAND(y, ((double[]){2.0 / 3.0, 1.0 / 3.0}), 2);
    CHECK(smax_ssmax(&tx4, &ty4, &so, NULL) == SMAX_STATUS_OK);
    CHECK_HAND(y4, ((double[]){4.0 / 7.0, 1.0 / 7.0, 1.0 / 7.0, 1.0 / 7.0}), 4);
    /* dsrc = (s ln n) y (g - <g,y>) = ln2 [2/9, -2/9]; ds = ln2 sum t y (g - <g,y>) = ln2 2/9. */
    CHECK(smax_ssmax_backward(&tx, &ty, &tg, &tdx, &tds, &so, NULL) == SMAX_STATUS_OK);
    CHECK_HAND(dx, ((double[]){ln2 * 2.0 / 9.0, -ln2 * 2.0 / 9.0}), 2);
    CHECK(close_to(ds, ln2 * 2.0 / 9.0, 1e-6));
    /* ds is optional. */
    CHECK(smax_ssmax_backward(&tx, &ty, &tg, &tdx, NULL, &so, NULL) == SMAX_STATUS_OK);
    CHECK_HAND(dx, ((double[]){ln2 * 2.0 / 9.0, -ln2 * 2.0 / 9.0}), 2);
  }

  /* softpick (eps = 0 for the exact hand values) and its VJP. */
  {
    float x[2], y[2], g[2] = {1.0f, 0.0f}, dx[2];
    float x3[3], y3[3];
    smax_tensor tx = f32_1d(x, 2), ty = f32_1d(y, 2), tg = f32_1d(g, 2), tdx = f32_1d(dx, 2);
    smax_tensor tx3 = f32_1d(x3, 3), ty3 = f32_1d(y3, 3);
    smax_softpick_options po;
    x[0] = (float)ln3;
    x[1] = (float)ln2;
    x3[0] = (float)ln2;
    x3[1] = 0.0f;
    x3[2] = (float)-ln2;
    smax_softpick_options_init(&po);
    CHECK(po.eps == 1e-6f);
    po.eps = 0.0f;
    CHECK(smax_softpick(&tx, &ty, &po, NULL) == SMAX_STATUS_OK);
    CHECK_HAND(y, ((double[]){2.0 / 3.0, 1.0 / 3.0}), 2);
    CHECK(smax_softpick(&tx3, &ty3, &po, NULL) == SMAX_STATUS_OK);
    CHECK_HAND(y3, ((double[]){2.0 / 3.0, 0.0, 0.0}), 3);
    CHECK(smax_softpick_backward(&tx, &tg, &tdx, &po, NULL) == SMAX_STATUS_OK);
    CHECK_HAND(dx, ((double[]){1.0 / 3.0, -4.0 / 9.0}), 2);
    /* Default eps 1e-6 (NULL params): y = 2 / (3 + 1e-6). */
    CHECK(smax_softpick(&tx, &ty, NULL, NULL) == SMAX_STATUS_OK);
    CHECK(close_to(y[0], 2.0 / (3.0 + 1e-6), 1e-6));
    /* Errors: eps < 0. */
    po.eps = -1.0f;
    fill(y, 2, kSentinel);
    EXPECT_ERROR(smax_softpick(&tx, &ty, &po, NULL), SMAX_STATUS_INVALID_ARGUMENT, "eps", y, 2);
    fill(dx, 2, kSentinel);
    EXPECT_ERROR(smax_softpick_backward(&tx, &tg, &tdx, &po, NULL), SMAX_STATUS_INVALID_ARGUMENT,
                 "eps", dx, 2);
  }

  /* Clipped softmax and its VJP (docs/vectors.md): x = [ln 6, ln 3, 0],
   * p = [0.6, 0.3, 0.1]; gamma = -0.25, zeta = 1.25 clips below only,
   * x = [ln 8, 0, 0] with gamma = -0.1, zeta = 1.5 clips above. */
  {
    float x[3], y[3], g[3] = {1.0f, 0.0f, 0.0f}, dx[3];
    smax_tensor tx = f32_1d(x, 3), ty = f32_1d(y, 3), tg = f32_1d(g, 3), tdx = f32_1d(dx, 3);
    smax_clipped_softmax_options co;
    x[0] = (float)log(6.0);
    x[1] = (float)ln3;
    x[2] = 0.0f;
    smax_clipped_softmax_options_init(&co);
    CHECK(co.gamma == -0.025f && co.zeta == 1.0f);
    co.gamma = -0.25f;
    co.zeta = 1.25f;
    CHECK(smax_clipped_softmax(&tx, &ty, &co, NULL) == SMAX_STATUS_OK);
    CHECK_HAND(y, ((double[]){0.65, 0.2, 0.0}), 3);
    CHECK(smax_clipped_softmax_backward(&tx, &tg, &tdx, &co, NULL) == SMAX_STATUS_OK);
    CHECK_HAND(dx, ((double[]){0.36, -0.27, -0.09}), 3);
    x[0] = (float)log(8.0);
    x[1] = 0.0f;
    co.gamma = -0.1f;
    co.zeta = 1.5f;
    g[1] = 1.0f;
    CHECK(smax_clipped_softmax(&tx, &ty, &co, NULL) == SMAX_STATUS_OK);
    CHECK_HAND(y, ((double[]){1.0, 0.06, 0.06}), 3);
    CHECK(smax_clipped_softmax_backward(&tx, &tg, &tdx, &co, NULL) == SMAX_STATUS_OK);
    CHECK_HAND(dx, ((double[]){-0.128, 0.144, -0.016}), 3);
    /* Errors: gamma > 0, zeta < 1; nothing written. */
    co.gamma = 0.5f;
    fill(y, 3, kSentinel);
    EXPECT_ERROR(smax_clipped_softmax(&tx, &ty, &co, NULL), SMAX_STATUS_INVALID_ARGUMENT, "gamma",
                 y, 3);
    co.gamma = -0.1f;
    co.zeta = 0.5f;
    fill(dx, 3, kSentinel);
    EXPECT_ERROR(smax_clipped_softmax_backward(&tx, &tg, &tdx, &co, NULL),
                 SMAX_STATUS_INVALID_ARGUMENT, "zeta", dx, 3);
  }

  /* StableMax, its VJP and cross-entropy (docs/vectors.md). */
  {
    float x[3] = {0.0f, 1.0f, -1.0f}, y[3], g[3] = {0.0f, 1.0f, 0.0f}, dx[3];
    float x2[2] = {1.0f, 3.0f}, y2[2];
    smax_tensor tx = f32_1d(x, 3), ty = f32_1d(y, 3), tg = f32_1d(g, 3), tdx = f32_1d(dx, 3);
    smax_tensor tx2 = f32_1d(x2, 2), ty2 = f32_1d(y2, 2);
    CHECK(smax_stablemax(&tx, &ty, NULL) == SMAX_STATUS_OK);
    CHECK_HAND(y, ((double[]){2.0 / 7.0, 4.0 / 7.0, 1.0 / 7.0}), 3);
    CHECK(smax_stablemax(&tx2, &ty2, NULL) == SMAX_STATUS_OK);
    CHECK_HAND(y2, ((double[]){1.0 / 3.0, 2.0 / 3.0}), 2);
    CHECK(smax_stablemax_backward(&tx, &tg, &tdx, NULL) == SMAX_STATUS_OK);
    CHECK_HAND(dx, ((double[]){-8.0 / 49.0, 6.0 / 49.0, -2.0 / 49.0}), 3);
    {
      int64_t t = 1;
      float loss = 0.0f, dloss = 1.0f, ds[3];
      smax_tensor tt = i64_1d(&t, 1), tl = f32_1d(&loss, 1), tdl = f32_1d(&dloss, 1);
      smax_tensor tsrc = f32_2d(x, 1, 3), tds = f32_2d(ds, 1, 3);
      smax_loss_options lo;
      smax_loss_options_init(&lo);
      lo.reduction = SMAX_REDUCTION_NONE;
      CHECK(smax_stablemax_cross_entropy(&tsrc, &tt, &tl, &lo, NULL) == SMAX_STATUS_OK);
      CHECK(close_to(loss, 0.5596158, 1e-6));
      /* (y - d_t) / (1 + |t|). */
      CHECK(smax_stablemax_cross_entropy_backward(&tsrc, &tt, &tdl, &tds, &lo, NULL) ==
            SMAX_STATUS_OK);
      CHECK_HAND(ds, ((double[]){2.0 / 7.0, -3.0 / 14.0, 1.0 / 14.0}), 3);
      t = -100; /* ignored row: loss 0, gradient 0 */
      CHECK(smax_stablemax_cross_entropy(&tsrc, &tt, &tl, &lo, NULL) == SMAX_STATUS_OK);
      CHECK(loss == 0.0f);
      t = 3;
      loss = kSentinel;
      EXPECT_ERROR(smax_stablemax_cross_entropy(&tsrc, &tt, &tl, &lo, NULL),
                   SMAX_STATUS_INVALID_ARGUMENT, "target", &loss, 1);
    }
  }

  /* Softmax Collapse detector: [0, -200] collapses in f32, [0, 0] does not. */
  {
    float x[2][2] = {{0.0f, -200.0f}, {0.0f, 0.0f}}, flags[2] = {-1.0f, -1.0f};
    double fraction = -1.0;
    smax_tensor tx = f32_2d(&x[0][0], 2, 2), tf = f32_1d(flags, 2);
    CHECK(smax_softmax_collapse_fraction(&tx, &tf, SMAX_PRECISION_F32, NULL, &fraction) ==
          SMAX_STATUS_OK);
    CHECK(fraction == 0.5);
    CHECK(flags[0] == 1.0f && flags[1] == 0.0f);
    CHECK(smax_softmax_collapse_fraction(&tx, NULL, SMAX_PRECISION_BF16, NULL, &fraction) ==
          SMAX_STATUS_OK);
    CHECK(fraction == 0.5);
    CHECK(smax_softmax_collapse_fraction(&tx, NULL, SMAX_PRECISION_F16, NULL, NULL) ==
          SMAX_STATUS_OK);
    fraction = -1.0;
    fill(flags, 2, kSentinel);
    EXPECT_ERROR(smax_softmax_collapse_fraction(&tx, &tf, 9, NULL, &fraction),
                 SMAX_STATUS_INVALID_ARGUMENT, "precision", flags, 2);
    CHECK(fraction == -1.0);
  }
}
