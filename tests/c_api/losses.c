/* tests/c_api/losses.c: the C ABI test of losses (include/smax/cross_entropy.h, linear_cross_entropy.h). */
#include "util.h"

/* ---- losses (include/smax/cross_entropy.h, linear_cross_entropy.h) ---------- */

void test_losses(void) {
  /* Cross-entropy: rows [1,2,3] (t=2), [1,2,3] (t=0), [0,0,0] (ignored). */
  float x[3][3] = {{1.0f, 2.0f, 3.0f}, {1.0f, 2.0f, 3.0f}, {0.0f, 0.0f, 0.0f}};
  int64_t tgt[3] = {2, 0, -100};
  float loss[3], lse[3], ent[3], tlp[3], acc[3], mean, dsrc[3][3];
  float dloss[3] = {1.0f, 0.5f, 2.0f};
  smax_tensor tx = f32_2d(&x[0][0], 3, 3), tt = i64_1d(tgt, 3), tl = f32_1d(loss, 3);
  smax_tensor tlse = f32_1d(lse, 3), tent = f32_1d(ent, 3), ttlp = f32_1d(tlp, 3);
  smax_tensor tacc = f32_1d(acc, 3), tm = f32_scalar(&mean);
  smax_tensor tdl = f32_1d(dloss, 3), tds = f32_2d(&dsrc[0][0], 3, 3);
  smax_cross_entropy_options ce;
  smax_loss_options lo;
  const double L = 3.4076060, xd[3] = {1.0, 2.0, 3.0};
  double p[3], H = 0.0;
  int i;
  ref_softmax(xd, 3, p);
  for (i = 0; i < 3; ++i) H -= p[i] * log(p[i]);

  smax_cross_entropy_options_init(&ce);
  CHECK(ce.label_smoothing == 0.0f && ce.lse_square_scale == 0.0f && ce.softcap == 0.0f);
  CHECK(ce.lse == NULL && ce.z_loss == NULL && ce.accuracy == NULL);
  smax_loss_options_init(&lo);
  lo.reduction = SMAX_REDUCTION_NONE;
  ce.lse = &tlse;
  ce.entropy = &tent;
  ce.target_logprob = &ttlp;
  ce.accuracy = &tacc;
  CHECK(smax_cross_entropy(&tx, &tt, &tl, &ce, &lo, NULL) == SMAX_STATUS_OK);
  CHECK_HAND(loss, ((double[]){0.4076060, 2.4076060, 0.0}), 3);
  CHECK_HAND(lse, ((double[]){L, L, log(3.0)}), 3);
  CHECK_HAND(ent, ((double[]){H, H}), 2);
  CHECK_HAND(tlp, ((double[]){-0.4076060, -2.4076060, 0.0}), 3);
  CHECK(acc[0] == 1.0f && acc[1] == 0.0f && acc[2] == 0.0f);
  /* Gradient (reduction none, dloss [1, 0.5, 2]) with and without the forward's lse. */
  CHECK(smax_cross_entropy_backward(&tx, &tt, &tdl, &tds, NULL, &lo, NULL) == SMAX_STATUS_OK);
  CHECK_VEC(&dsrc[0][0],
            ((double[]){p[0], p[1], p[2] - 1.0, 0.5 * (p[0] - 1.0), 0.5 * p[1], 0.5 * p[2], 0.0,
                        0.0, 0.0}),
            9, 4e-6, 1e-7);
  {
    smax_cross_entropy_options cb;
    float d2[3][3];
    smax_tensor td2 = f32_2d(&d2[0][0], 3, 3);
    smax_cross_entropy_options_init(&cb);
    cb.lse = &tlse;
    CHECK(smax_cross_entropy_backward(&tx, &tt, &tdl, &td2, &cb, &lo, NULL) == SMAX_STATUS_OK);
    CHECK_VEC(&d2[0][0],
              ((double[]){p[0], p[1], p[2] - 1.0, 0.5 * (p[0] - 1.0), 0.5 * p[1], 0.5 * p[2],
                          0.0, 0.0, 0.0}),
              9, 4e-6, 1e-7);
  }
  /* The fused gradient (ce.grad, unit upstream gradient), reduction none:
   * rows 0 and 1 as above with dloss = 1, the ignored row 0; then in place
   * over a copy of the logits. */
  {
    smax_cross_entropy_options cg;
    float g2[3][3], xc[3][3], l2[3];
    smax_tensor tg2 = f32_2d(&g2[0][0], 3, 3), txc = f32_2d(&xc[0][0], 3, 3);
    smax_tensor tl2 = f32_1d(l2, 3);
    const double want[9] = {p[0], p[1], p[2] - 1.0, p[0] - 1.0, p[1], p[2], 0.0, 0.0, 0.0};
    smax_cross_entropy_options_init(&cg);
    CHECK(cg.grad == NULL);
    cg.grad = &tg2;
    CHECK(smax_cross_entropy(&tx, &tt, &tl2, &cg, &lo, NULL) == SMAX_STATUS_OK);
    CHECK_VEC(&g2[0][0], want, 9, 4e-6, 1e-7);
    CHECK_VEC(l2, ((double[]){0.4076060, 2.4076060, 0.0}), 3, 2e-6, 1e-7);
    memcpy(xc, x, sizeof xc);
    cg.grad = &txc;
    CHECK(smax_cross_entropy(&txc, &tt, &tl2, &cg, &lo, NULL) == SMAX_STATUS_OK);
    CHECK_VEC(&xc[0][0], want, 9, 4e-6, 1e-7);
    cg.grad = &tg2;
    fill(&dsrc[0][0], 9, kSentinel);
    EXPECT_ERROR(smax_cross_entropy_backward(&tx, &tt, &tdl, &tds, &cg, &lo, NULL),
                 SMAX_STATUS_INVALID_ARGUMENT, "grad", &dsrc[0][0], 9);
  }
  /* Default options (NULL): mean over the two non-ignored rows. */
  CHECK(smax_cross_entropy(&tx, &tt, &tm, NULL, NULL, NULL) == SMAX_STATUS_OK);
  CHECK(close_to(mean, (0.4076060 + 2.4076060) / 2.0, 1e-6));
  /* Class weights [1, 2, 3]: (3 * 0.4076060 + 1 * 2.4076060) / 4. */
  {
    float w[3] = {1.0f, 2.0f, 3.0f};
    smax_tensor tw = f32_1d(w, 3);
    smax_loss_options lw;
    smax_loss_options_init(&lw);
    lw.weight = &tw;
    CHECK(smax_cross_entropy(&tx, &tt, &tm, NULL, &lw, NULL) == SMAX_STATUS_OK);
    CHECK(close_to(mean, (3.0 * 0.4076060 + 2.4076060) / 4.0, 1e-6));
  }
  /* Label smoothing a = 0.1 and z-loss 1e-4 (sum reduction), z_loss output. */
  {
    smax_cross_entropy_options cs;
    smax_loss_options ls;
    float z = 0.0f;
    smax_tensor tz = f32_scalar(&z);
    const double a = 0.1, zs = 1e-4;
    const double row0 = (1 - a) * (L - 3.0) + a / 3.0 * ((L - 1) + (L - 2) + (L - 3));
    const double row1 = (1 - a) * (L - 1.0) + a / 3.0 * ((L - 1) + (L - 2) + (L - 3));
    smax_cross_entropy_options_init(&cs);
    cs.label_smoothing = (float)a;
    cs.lse_square_scale = (float)zs;
    cs.z_loss = &tz;
    smax_loss_options_init(&ls);
    ls.reduction = SMAX_REDUCTION_SUM;
    CHECK(smax_cross_entropy(&tx, &tt, &tm, &cs, &ls, NULL) == SMAX_STATUS_OK);
    CHECK(close_to(mean, row0 + row1 + 2.0 * zs * L * L, 2e-6));
    CHECK(close_to(z, 2.0 * zs * L * L, 1e-6));
  }
  /* Probability targets (f32, src's shape): q = one-hot of 2. */
  {
    float q[3] = {0.0f, 0.0f, 1.0f}, xr[3] = {1.0f, 2.0f, 3.0f}, out = 0.0f;
    smax_tensor tq = f32_2d(q, 1, 3), txr = f32_2d(xr, 1, 3), to = f32_scalar(&out);
    CHECK(smax_cross_entropy(&txr, &tq, &to, NULL, NULL, NULL) == SMAX_STATUS_OK);
    CHECK(close_to(out, 0.4076060, 1e-6));
  }
  /* Errors: bad target, bad label_smoothing, bad reduction, bad struct_size. */
  tgt[1] = 3;
  fill(loss, 3, kSentinel);
  EXPECT_ERROR(smax_cross_entropy(&tx, &tt, &tl, NULL, &lo, NULL), SMAX_STATUS_INVALID_ARGUMENT,
               "target", loss, 3);
  tgt[1] = 0;
  smax_cross_entropy_options_init(&ce);
  ce.label_smoothing = 1.5f;
  EXPECT_ERROR(smax_cross_entropy(&tx, &tt, &tl, &ce, &lo, NULL), SMAX_STATUS_INVALID_ARGUMENT,
               "label_smoothing", loss, 3);
  fill(&dsrc[0][0], 9, kSentinel);
  EXPECT_ERROR(smax_cross_entropy_backward(&tx, &tt, &tdl, &tds, &ce, &lo, NULL),
               SMAX_STATUS_INVALID_ARGUMENT, "label_smoothing", &dsrc[0][0], 9);
  smax_cross_entropy_options_init(&ce);
  ce.struct_size = 4;
  EXPECT_ERROR(smax_cross_entropy(&tx, &tt, &tl, &ce, &lo, NULL), SMAX_STATUS_INVALID_ARGUMENT,
               "ce.struct_size 4 is smaller than sizeof(smax_cross_entropy_options)", loss, 3);
  lo.reduction = 3;
  EXPECT_ERROR(smax_cross_entropy(&tx, &tt, &tl, NULL, &lo, NULL), SMAX_STATUS_INVALID_ARGUMENT,
               "reduction", loss, 3);
  lo.reduction = SMAX_REDUCTION_NONE;
  lo.empty_mean = 5;
  EXPECT_ERROR(smax_cross_entropy(&tx, &tt, &tl, NULL, &lo, NULL), SMAX_STATUS_INVALID_ARGUMENT,
               "empty_mean", loss, 3);

  /* PaLM z-loss alone (docs/vectors.md): x = [0,0], c = 1e-4 -> 4.8045e-5, gradient 6.9315e-5. */
  {
    float xz[2] = {0.0f, 0.0f}, out = 0.0f, one = 1.0f, g[2];
    int64_t t0 = 0;
    smax_tensor txz = f32_2d(xz, 1, 2), to = f32_scalar(&out), t1 = f32_scalar(&one);
    smax_tensor tg = f32_2d(g, 1, 2), tt0 = i64_1d(&t0, 1);
    CHECK(smax_z_loss(&txz, NULL, &to, 1e-4f, NULL, NULL) == SMAX_STATUS_OK);
    CHECK(fabs(out - 4.8045e-5) <= 1e-4 * 4.8045e-5);
    CHECK(smax_z_loss_backward(&txz, NULL, &t1, &tg, 1e-4f, NULL, NULL) == SMAX_STATUS_OK);
    CHECK_VEC(g, ((double[]){6.9315e-5, 6.9315e-5}), 2, 1e-4, 0.0);
    out = 0.0f;
    CHECK(smax_z_loss(&txz, &tt0, &to, 1e-4f, NULL, NULL) == SMAX_STATUS_OK);
    CHECK(fabs(out - 4.8045e-5) <= 1e-4 * 4.8045e-5);
    CHECK(smax_z_loss_backward(&txz, &tt0, &t1, &tg, 1e-4f, NULL, NULL) == SMAX_STATUS_OK);
    CHECK_VEC(g, ((double[]){6.9315e-5, 6.9315e-5}), 2, 1e-4, 0.0);
    out = kSentinel;
    EXPECT_ERROR(smax_z_loss(&txz, NULL, &to, -1.0f, NULL, NULL), SMAX_STATUS_INVALID_ARGUMENT,
                 "z_loss", &out, 1);
  }

  /* Spherical Z-loss (docs/losses.md, "Hand vectors"). */
  {
    float o1[2] = {1.0f, -1.0f}, o2[3] = {3.0f, 1.0f, 2.0f}, out = 0.0f, one = 1.0f, g[3];
    int64_t t0 = 0;
    smax_tensor to1 = f32_2d(o1, 1, 2), to2 = f32_2d(o2, 1, 3), tout = f32_scalar(&out);
    smax_tensor tone = f32_scalar(&one), tg = f32_2d(g, 1, 3), tt0 = i64_1d(&t0, 1);
    CHECK(smax_spherical_z_loss(&to1, &tt0, &tout, 1.0f, 0.0f, NULL, NULL) == SMAX_STATUS_OK);
    CHECK(close_to(out, 0.3132617, 1e-6));
    CHECK(smax_spherical_z_loss(&to2, &tt0, &tout, 1.0f, 1.0f, NULL, NULL) == SMAX_STATUS_OK);
    CHECK(close_to(out, 0.5870753, 1e-6));
    CHECK(smax_spherical_z_loss_backward(&to2, &tt0, &tone, &tg, 1.0f, 1.0f, NULL, NULL) ==
          SMAX_STATUS_OK);
    CHECK_HAND(g, ((double[]){-0.0906411, -0.0906411, 0.1812823}), 3);
    out = kSentinel;
    EXPECT_ERROR(smax_spherical_z_loss(&to2, &tt0, &tout, 0.0f, 1.0f, NULL, NULL),
                 SMAX_STATUS_INVALID_ARGUMENT, "spherical_z_loss", &out, 1);
  }

  /* Fused linear + cross-entropy on a tiny head: hidden [2,2], weight [3,2], bias [3]. */
  {
    float h[2][2] = {{1.0f, 0.0f}, {0.5f, -1.0f}};
    float w[3][2] = {{1.0f, 2.0f}, {0.0f, 1.0f}, {-1.0f, 0.5f}};
    float b[3] = {0.1f, 0.0f, -0.2f};
    int64_t t2[2] = {2, 0};
    float l2[2], dl2[2] = {1.0f, 0.5f}, dh[2][2], dw[3][2], db[3], total = 0.0f, one = 1.0f;
    float dh2[2][2], dw2[3][2], db2[3];
    smax_tensor th = f32_2d(&h[0][0], 2, 2), tw = f32_2d(&w[0][0], 3, 2), tb = f32_1d(b, 3);
    smax_tensor tt2 = i64_1d(t2, 2), tl2 = f32_1d(l2, 2), tdl2 = f32_1d(dl2, 2);
    smax_tensor tdh = f32_2d(&dh[0][0], 2, 2), tdw = f32_2d(&dw[0][0], 3, 2), tdb = f32_1d(db, 3);
    smax_tensor tdh2 = f32_2d(&dh2[0][0], 2, 2), tdw2 = f32_2d(&dw2[0][0], 3, 2);
    smax_tensor tdb2 = f32_1d(db2, 3), ttot = f32_scalar(&total), tone = f32_scalar(&one);
    smax_linear_cross_entropy_options lce;
    smax_loss_options ln;
    double z[2][3], pz[2][3], dz[2][3], want_l[2], want_dh[4], want_dw[6], want_db[3];
    int r, j, k;
    for (r = 0; r < 2; ++r) {
      for (j = 0; j < 3; ++j) z[r][j] = (double)h[r][0] * w[j][0] + (double)h[r][1] * w[j][1] + b[j];
      ref_softmax(z[r], 3, pz[r]);
      want_l[r] = lse_d(z[r], 3) - z[r][t2[r]];
      for (j = 0; j < 3; ++j) dz[r][j] = dl2[r] * (pz[r][j] - (j == t2[r] ? 1.0 : 0.0));
    }
    for (r = 0; r < 2; ++r)
      for (k = 0; k < 2; ++k) {
        want_dh[r * 2 + k] = 0.0;
        for (j = 0; j < 3; ++j) want_dh[r * 2 + k] += dz[r][j] * w[j][k];
      }
    for (j = 0; j < 3; ++j) {
      want_db[j] = dz[0][j] + dz[1][j];
      for (k = 0; k < 2; ++k) want_dw[j * 2 + k] = dz[0][j] * h[0][k] + dz[1][j] * h[1][k];
    }
    smax_linear_cross_entropy_options_init(&lce);
    CHECK(lce.token_chunk == 0 && lce.vocab_chunk == 0);
    smax_loss_options_init(&ln);
    ln.reduction = SMAX_REDUCTION_NONE;
    CHECK(smax_linear_cross_entropy(&th, &tw, &tt2, &tb, &tl2, NULL, &lce, &ln, NULL) ==
          SMAX_STATUS_OK);
    CHECK_VEC(l2, want_l, 2, 4e-6, 1e-6);
    CHECK(smax_linear_cross_entropy_backward(&th, &tw, &tt2, &tb, &tdl2, &tdh, &tdw, &tdb, NULL,
                                             NULL, &ln, NULL) == SMAX_STATUS_OK);
    CHECK_VEC(&dh[0][0], want_dh, 4, 1e-5, 1e-6);
    CHECK_VEC(&dw[0][0], want_dw, 6, 1e-5, 1e-6);
    CHECK_VEC(db, want_db, 3, 1e-5, 1e-6);
    /* Fused, reduction sum with dloss 1: gradients for dloss [1, 1]. */
    ln.reduction = SMAX_REDUCTION_SUM;
    CHECK(smax_linear_cross_entropy_fused(&th, &tw, &tt2, &tb, &ttot, &tone, &tdh2, &tdw2, &tdb2,
                                          NULL, &lce, &ln, NULL) == SMAX_STATUS_OK);
    CHECK(close_to(total, want_l[0] + want_l[1], 4e-6));
    for (j = 0; j < 3; ++j) {
      const double want = (pz[0][j] - (j == 2)) + (pz[1][j] - (j == 0));
      CHECK(fabs(db2[j] - want) <= 1e-5 * (1.0 + fabs(want)));
    }
    /* Errors: weight of the wrong width; masks are rejected. */
    {
      smax_tensor bad = f32_2d(&w[0][0], 2, 3);
      smax_softmax_options o;
      unsigned char keep[3] = {1, 1, 0};
      smax_tensor tk;
      int64_t s3[1] = {3};
      fill(l2, 2, kSentinel);
      EXPECT_ERROR(smax_linear_cross_entropy(&th, &bad, &tt2, NULL, &tl2, NULL, NULL, &ln, NULL),
                   SMAX_STATUS_INVALID_ARGUMENT, "linear_cross_entropy", l2, 2);
      smax_tensor_init(&tk, keep, SMAX_DTYPE_BOOL, 1, s3, NULL);
      smax_softmax_options_init(&o);
      o.bool_mask = &tk;
      ln.reduction = SMAX_REDUCTION_NONE;
      EXPECT_ERROR(smax_linear_cross_entropy(&th, &tw, &tt2, &tb, &tl2, NULL, NULL, &ln, &o),
                   SMAX_STATUS_INVALID_ARGUMENT, "mask", l2, 2);
      fill(&dh[0][0], 4, kSentinel);
      lce.token_chunk = -1;
      EXPECT_ERROR(smax_linear_cross_entropy_backward(&th, &tw, &tt2, &tb, &tdl2, &tdh, &tdw,
                                                      NULL, NULL, &lce, &ln, NULL),
                   SMAX_STATUS_INVALID_ARGUMENT, "token_chunk", &dh[0][0], 4);
    }
  }
}
