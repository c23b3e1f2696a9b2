/* tests/c_api/sparse.c: the C ABI test of sparse normalisers (include/smax/sparse.h). */
#include "util.h"

/* ---- sparse normalisers (include/smax/sparse.h) ----------------------------- */

void test_sparse(void) {
  float x[3] = {-2.0f, 0.0f, 0.5f}, y[3], dx[3];
  float g[3] = {1.0f, 2.0f, 4.0f};
  smax_tensor tx = f32_1d(x, 3), ty = f32_1d(y, 3), tg = f32_1d(g, 3), tdx = f32_1d(dx, 3);

  /* sparsemax and its VJP (docs/normalizers.md, "Sparse normalisers"). */
  CHECK(smax_sparsemax(&tx, &ty, NULL) == SMAX_STATUS_OK);
  CHECK_HAND(y, ((double[]){0.0, 0.25, 0.75}), 3);
  CHECK(y[0] == 0.0f);
  CHECK(smax_sparsemax_backward(&ty, &tg, &tdx, NULL) == SMAX_STATUS_OK);
  CHECK_HAND(dx, ((double[]){0.0, -1.0, 1.0}), 3);
  {
    float x2[3] = {0.5f, 0.3f, 0.1f};
    smax_tensor t2 = f32_1d(x2, 3);
    CHECK(smax_sparsemax(&t2, &t2, NULL) == SMAX_STATUS_OK); /* in place */
    CHECK_HAND(x2, ((double[]){8.0 / 15.0, 1.0 / 3.0, 2.0 / 15.0}), 3);
  }

  /* sparsemax / entmax15 losses: two rows of [-2, 0, 0.5], targets 1 and 2. */
  {
    float xs[2][3] = {{-2.0f, 0.0f, 0.5f}, {-2.0f, 0.0f, 0.5f}};
    int64_t tgt[2] = {1, 2};
    float loss[2], mean, dloss[2] = {1.0f, 1.0f}, dsrc[2][3];
    smax_tensor ts = f32_2d(&xs[0][0], 2, 3), tt = i64_1d(tgt, 2), tl = f32_1d(loss, 2);
    smax_tensor tm = f32_scalar(&mean), tdl = f32_1d(dloss, 2), tds = f32_2d(&dsrc[0][0], 2, 3);
    smax_loss_options lo;
    smax_loss_options_init(&lo);
    lo.reduction = SMAX_REDUCTION_NONE;
    CHECK(smax_sparsemax_loss(&ts, &tt, &tl, &lo, NULL) == SMAX_STATUS_OK);
    CHECK_HAND(loss, ((double[]){0.5625, 0.0625}), 2);
    CHECK(smax_sparsemax_loss(&ts, &tt, &tm, NULL, NULL) == SMAX_STATUS_OK); /* mean */
    CHECK(close_to(mean, 0.3125, 1e-6));
    CHECK(smax_sparsemax_loss_backward(&ts, &tt, &tdl, &tds, &lo, NULL) == SMAX_STATUS_OK);
    CHECK_HAND(&dsrc[0][0], ((double[]){0.0, -0.75, 0.75, 0.0, 0.25, -0.25}), 6);

    /* 1.5-entmax: targets 1 and 2 (docs/vectors.md: t=1 -> 0.684371, t=2 -> 0.184371). */
    CHECK(smax_entmax15_loss(&ts, &tt, &tl, &lo, NULL) == SMAX_STATUS_OK);
    CHECK_VEC(loss, ((double[]){0.684371, 0.184371}), 2, 0.0, 2e-6);
    CHECK(smax_entmax15_loss_backward(&ts, &tt, &tdl, &tds, &lo, NULL) == SMAX_STATUS_OK);
    CHECK_HAND(&dsrc[0][0],
              ((double[]){0.0, 0.3260074 - 1.0, 0.6739926, 0.0, 0.3260074, 0.6739926 - 1.0}), 6);

    /* alpha-entmax by bisection at alpha = 1.5 is 1.5-entmax. */
    {
      smax_entmax_bisect_options bo;
      smax_entmax_bisect_options_init(&bo);
      bo.alpha = 1.5f;
      CHECK(smax_entmax_bisect_loss(&ts, &tt, &tl, &bo, &lo, NULL) == SMAX_STATUS_OK);
      CHECK_VEC(loss, ((double[]){0.684371, 0.184371}), 2, 0.0, 2e-6);
      CHECK(smax_entmax_bisect_loss_backward(&ts, &tt, &tdl, &tds, NULL, &lo, NULL) ==
            SMAX_STATUS_OK);
      CHECK_HAND(&dsrc[0][0],
                ((double[]){0.0, 0.3260074 - 1.0, 0.6739926, 0.0, 0.3260074, 0.6739926 - 1.0}),
                6);
    }
  }

  /* 1.5-entmax and its VJP. */
  CHECK(smax_entmax15(&tx, &ty, NULL) == SMAX_STATUS_OK);
  CHECK_HAND(y, ((double[]){0.0, 0.3260074, 0.6739926}), 3);
  {
    float g2[3] = {0.0f, 1.0f, 0.0f};
    smax_tensor tg2 = f32_1d(g2, 3);
    CHECK(smax_entmax15_backward(&ty, &tg2, &tdx, NULL) == SMAX_STATUS_OK);
    CHECK_VEC(dx, ((double[]){0.0, 0.336760, -0.336760}), 3, 0.0, 2e-6);

    /* entmax_bisect with NULL params (alpha 1.5) and its VJP with dalpha. */
    {
      float yb[3], dxb[3], dalpha = -7.0f;
      smax_tensor tyb = f32_1d(yb, 3), tdxb = f32_1d(dxb, 3), tda = f32_scalar(&dalpha);
      double w[3], sw = 0.0, H = 0.0, want = 0.0;
      int i;
      CHECK(smax_entmax_bisect(&tx, &tyb, NULL, NULL) == SMAX_STATUS_OK);
      CHECK_HAND(yb, ((double[]){0.0, 0.3260074, 0.6739926}), 3);
      CHECK(smax_entmax_bisect_backward(&tyb, &tg2, &tdxb, &tda, NULL, NULL) == SMAX_STATUS_OK);
      CHECK_VEC(dxb, ((double[]){0.0, 0.336760, -0.336760}), 3, 0.0, 2e-6);
      /* dalpha = sum g_i [(y_i - p~_i)/(a-1)^2 - (S_i - p~_i H)/(a-1)], a = 1.5. */
      for (i = 0; i < 3; ++i) {
        w[i] = yb[i] > 0 ? sqrt((double)yb[i]) : 0.0;
        sw += w[i];
        H += yb[i] > 0 ? yb[i] * log((double)yb[i]) : 0.0;
      }
      for (i = 0; i < 3; ++i) {
        const double pt = w[i] / sw, S = yb[i] > 0 ? yb[i] * log((double)yb[i]) : 0.0;
        want += g2[i] * ((yb[i] - pt) / 0.25 - (S - pt * H) / 0.5);
      }
      CHECK(close_to(dalpha, want, 1e-5));
    }
  }
  /* alpha = 1.33 (docs/vectors.md, 4 decimals). */
  {
    float xa[3] = {-1.0f, 0.0f, 0.5f}, ya[3];
    smax_tensor ta = f32_1d(xa, 3), tya = f32_1d(ya, 3);
    smax_entmax_bisect_options bo;
    smax_entmax_bisect_options_init(&bo);
    bo.alpha = 1.33f;
    CHECK(smax_entmax_bisect(&ta, &tya, &bo, NULL) == SMAX_STATUS_OK);
    CHECK_VEC(ya, ((double[]){0.0460, 0.3276, 0.6264}), 3, 0.0, 6e-5);
  }

  /* Top-k sparse softmax, its VJP and loss (docs/normalizers.md, "Sparse normalisers"). */
  {
    float xk[4] = {1.0f, 2.0f, 3.0f, 0.0f}, yk[4], gk[4] = {1.0f, 2.0f, 3.0f, 4.0f}, dk[4];
    smax_tensor txk = f32_1d(xk, 4), tyk = f32_1d(yk, 4), tgk = f32_1d(gk, 4);
    smax_tensor tdk = f32_1d(dk, 4);
    double r, want[4];
    int i;
    CHECK(smax_sparse_softmax(&txk, &tyk, 2, NULL) == SMAX_STATUS_OK);
    CHECK_HAND(yk, ((double[]){0.0, 0.2689414, 0.7310586, 0.0}), 4);
    CHECK(yk[0] == 0.0f && yk[3] == 0.0f);
    CHECK(smax_sparse_softmax_backward(&tyk, &tgk, &tdk, NULL) == SMAX_STATUS_OK);
    r = dot_fd(gk, yk, 4);
    for (i = 0; i < 4; ++i) want[i] = yk[i] * (gk[i] - r);
    CHECK_VEC(dk, want, 4, 2e-6, 1e-7);
    {
      float xs[2][4] = {{1.0f, 2.0f, 3.0f, 0.0f}, {1.0f, 2.0f, 3.0f, 0.0f}};
      int64_t tgt[2] = {2, 0};
      float loss[2], dloss[2] = {1.0f, 1.0f}, dsrc[2][4];
      smax_tensor ts = f32_2d(&xs[0][0], 2, 4), tt = i64_1d(tgt, 2), tl = f32_1d(loss, 2);
      smax_tensor tdl = f32_1d(dloss, 2), tds = f32_2d(&dsrc[0][0], 2, 4);
      smax_loss_options lo;
      smax_sparse_softmax_loss_options so;
      smax_loss_options_init(&lo);
      lo.reduction = SMAX_REDUCTION_NONE;
      CHECK(smax_sparse_softmax_loss(&ts, &tt, &tl, 2, NULL, &lo, NULL) == SMAX_STATUS_OK);
      CHECK_HAND(loss, ((double[]){0.3132617, 2.3132617}), 2);
      CHECK(smax_sparse_softmax_loss_backward(&ts, &tt, &tdl, &tds, 2, NULL, &lo, NULL) ==
            SMAX_STATUS_OK);
      CHECK_HAND(&dsrc[0][0],
                ((double[]){0.0, 0.2689414, 0.7310586 - 1.0, 0.0, -1.0, 0.2689414, 0.7310586,
                            0.0}),
                8);
      /* OPEN point: force_target puts the target into the kept set. */
      smax_sparse_softmax_loss_options_init(&so);
      so.force_target = 1;
      CHECK(smax_sparse_softmax_loss(&ts, &tt, &tl, 2, &so, &lo, NULL) == SMAX_STATUS_OK);
      CHECK_HAND(loss, ((double[]){0.3132617, 2.4076060}), 2);
    }
  }

  /* Errors: bad parameters, bad targets, bad booleans; nothing written. */
  fill(y, 3, kSentinel);
  EXPECT_ERROR(smax_sparse_softmax(&tx, &ty, 0, NULL), SMAX_STATUS_INVALID_ARGUMENT,
               "sparse_softmax", y, 3);
  {
    smax_entmax_bisect_options bo;
    smax_entmax_bisect_options_init(&bo);
    bo.alpha = 0.5f;
    EXPECT_ERROR(smax_entmax_bisect(&tx, &ty, &bo, NULL), SMAX_STATUS_INVALID_ARGUMENT, "alpha",
                 y, 3);
    smax_entmax_bisect_options_init(&bo);
    bo.n_iter = 0;
    EXPECT_ERROR(smax_entmax_bisect(&tx, &ty, &bo, NULL), SMAX_STATUS_INVALID_ARGUMENT,
                 "n_iter", y, 3);
    smax_entmax_bisect_options_init(&bo);
    bo.ensure_sum_one = 2;
    EXPECT_ERROR(smax_entmax_bisect(&tx, &ty, &bo, NULL), SMAX_STATUS_INVALID_ARGUMENT,
                 "params.ensure_sum_one must be 0 or 1, got 2", y, 3);
  }
  EXPECT_ERROR(smax_sparsemax(&tx, NULL, NULL), SMAX_STATUS_INVALID_ARGUMENT, "dst", y, 3);
  {
    smax_tensor short_dy = f32_1d(g, 2);
    fill(dx, 3, kSentinel);
    EXPECT_ERROR(smax_entmax15_backward(&ty, &short_dy, &tdx, NULL),
                 SMAX_STATUS_INVALID_ARGUMENT, "entmax15_backward", dx, 3);
  }
  {
    float loss[1] = {kSentinel};
    int64_t bad = 3;
    smax_tensor tt = i64_1d(&bad, 1), tl = f32_1d(loss, 1);
    smax_tensor tx2 = f32_2d(x, 1, 3);
    smax_loss_options lo;
    smax_loss_options_init(&lo);
    lo.reduction = SMAX_REDUCTION_NONE;
    EXPECT_ERROR(smax_sparsemax_loss(&tx2, &tt, &tl, &lo, NULL), SMAX_STATUS_INVALID_ARGUMENT,
                 "target", loss, 1);
    lo.reduction = 7;
    bad = 1;
    EXPECT_ERROR(smax_entmax15_loss(&tx2, &tt, &tl, &lo, NULL), SMAX_STATUS_INVALID_ARGUMENT,
                 "reduction", loss, 1);
    /* A float tensor as target. */
    EXPECT_ERROR(smax_sparsemax_loss(&tx2, &tl, &tl, NULL, NULL), SMAX_STATUS_INVALID_ARGUMENT,
                 "sparsemax_loss", loss, 1);
  }
}
