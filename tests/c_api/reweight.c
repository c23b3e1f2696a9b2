/* tests/c_api/reweight.c: the C ABI test of re-weighting normalisers (include/smax/reweight.h). */
#include "util.h"

/* ---- re-weighting normalisers (include/smax/reweight.h) --------------------- */

void test_reweight(void) {
  /* SA-Softmax (docs/normalizers.md, "Re-weighting normalisers"). */
  {
    float x[2], y[2];
    float xv[3] = {0.5f, -1.0f, 2.0f}, g[3] = {1.0f, 2.0f, -1.0f}, dx[3];
    smax_tensor tx = f32_1d(x, 2), ty = f32_1d(y, 2);
    smax_tensor txv = f32_1d(xv, 3), tg = f32_1d(g, 3), tdx = f32_1d(dx, 3);
    smax_self_adjust_options so;
    x[0] = 0.0f;
    x[1] = (float)log(3.0);
    CHECK(smax_self_adjust_softmax(&tx, &ty, NULL, NULL) == SMAX_STATUS_OK);
    CHECK_HAND(y, ((double[]){0.0, 0.8239592}), 2);
    smax_self_adjust_options_init(&so);
    CHECK(so.normalized == 0 && so.grad_through_bounds == 1);
    so.normalized = 1;
    x[0] = 1.0f;
    x[1] = 3.0f;
    CHECK(smax_self_adjust_softmax(&tx, &ty, &so, NULL) == SMAX_STATUS_OK);
    CHECK_HAND(y, ((double[]){0.0397343, 0.8807971}), 2);
    x[0] = -1.0f;
    x[1] = 1.0f;
    CHECK(smax_self_adjust_softmax(&tx, &ty, &so, NULL) == SMAX_STATUS_OK);
    CHECK_HAND(y, ((double[]){0.0, 0.8807971}), 2);
    CHECK(smax_self_adjust_softmax_backward(&txv, &tg, &tdx, NULL, NULL) == SMAX_STATUS_OK);
    CHECK_HAND(dx, ((double[]){0.5366996, 0.0610850, -1.1298661}), 3);
    so.grad_through_bounds = -1;
    fill(dx, 3, kSentinel);
    EXPECT_ERROR(smax_self_adjust_softmax_backward(&txv, &tg, &tdx, &so, NULL),
                 SMAX_STATUS_INVALID_ARGUMENT, "grad_through_bounds", dx, 3);
  }

  /* Sigmoid normaliser: n = 4, [ln4, 0, 0, 0] -> [0.5, 0.2, 0.2, 0.2]; VJP dy y (1 - y). */
  {
    float x[4] = {0.0f, 0.0f, 0.0f, 0.0f}, y[4], g[4] = {1.0f, -2.0f, 0.5f, 3.0f}, dx[4];
    smax_tensor tx = f32_1d(x, 4), ty = f32_1d(y, 4), tg = f32_1d(g, 4), tdx = f32_1d(dx, 4);
    smax_sigmoid_normalizer_options so;
    double want[4];
    int i;
    x[0] = (float)log(4.0);
    CHECK(smax_sigmoid_normalizer(&tx, &ty, NULL, NULL) == SMAX_STATUS_OK);
    CHECK_HAND(y, ((double[]){0.5, 0.2, 0.2, 0.2}), 4);
    CHECK(smax_sigmoid_normalizer_backward(&ty, &tg, &tdx, NULL) == SMAX_STATUS_OK);
    for (i = 0; i < 4; ++i) want[i] = (double)g[i] * y[i] * (1.0 - y[i]);
    CHECK_VEC(dx, want, 4, 1e-6, 1e-30);
    /* A fixed bias 0: sigmoid(t). */
    smax_sigmoid_normalizer_options_init(&so);
    so.has_bias = 1;
    so.bias = 0.0f;
    CHECK(smax_sigmoid_normalizer(&tx, &ty, &so, NULL) == SMAX_STATUS_OK);
    CHECK_HAND(y, ((double[]){0.8, 0.5, 0.5, 0.5}), 4);
    so.has_bias = 3;
    fill(y, 4, kSentinel);
    EXPECT_ERROR(smax_sigmoid_normalizer(&tx, &ty, &so, NULL), SMAX_STATUS_INVALID_ARGUMENT,
                 "has_bias", y, 4);
  }

  /* Softplus normaliser with lambda = 1 and its VJP. */
  {
    float x[2], y[2], g[2] = {1.0f, -0.5f}, dx[2];
    smax_tensor tx = f32_1d(x, 2), ty = f32_1d(y, 2), tg = f32_1d(g, 2), tdx = f32_1d(dx, 2);
    smax_softplus_normalizer_options so;
    double r, want[2];
    int i;
    smax_softplus_normalizer_options_init(&so);
    CHECK(so.has_lambda == 0 && so.power == 1.0f);
    so.has_lambda = 1;
    so.lambda = 1.0f;
    x[0] = 0.0f;
    x[1] = 0.0f;
    CHECK(smax_softplus_normalizer(&tx, &ty, &so, NULL) == SMAX_STATUS_OK);
    CHECK_HAND(y, ((double[]){0.5, 0.5}), 2);
    x[0] = (float)log(exp(1.0) - 1.0);
    CHECK(smax_softplus_normalizer(&tx, &ty, &so, NULL) == SMAX_STATUS_OK);
    CHECK_HAND(y, ((double[]){0.5906161, 0.4093839}), 2);
    CHECK(smax_softplus_normalizer_backward(&tx, &tg, &tdx, &so, NULL) == SMAX_STATUS_OK);
    r = dot_fd(g, y, 2);
    for (i = 0; i < 2; ++i) {
      const double z = x[i], sp = log1p(exp(z)), sig = 1.0 / (1.0 + exp(-z));
      want[i] = y[i] * (sig / sp) * (g[i] - r);
    }
    CHECK_VEC(dx, want, 2, 1e-5, 1e-7);
    /* Default lambda needs head_dim >= 2. */
    fill(y, 2, kSentinel);
    EXPECT_ERROR(smax_softplus_normalizer(&tx, &ty, NULL, NULL), SMAX_STATUS_INVALID_ARGUMENT,
                 "head_dim", y, 2);
  }

  /* Power-Softmax p = 2 (docs/vectors.md). */
  {
    float x[3] = {1.0f, -2.0f, 0.0f}, y[3];
    float xv[3] = {1.0f, -2.0f, 0.5f}, g[3] = {1.0f, 0.0f, 2.0f}, dx[3];
    smax_tensor tx = f32_1d(x, 3), ty = f32_1d(y, 3);
    smax_tensor txv = f32_1d(xv, 3), tg = f32_1d(g, 3), tdx = f32_1d(dx, 3);
    CHECK(smax_power_softmax(&tx, &ty, 2, NULL) == SMAX_STATUS_OK);
    CHECK_HAND(y, ((double[]){0.2, 0.8, 0.0}), 3);
    CHECK(smax_power_softmax_backward(&txv, &tg, &tdx, 2, NULL) == SMAX_STATUS_OK);
    CHECK_HAND(dx, ((double[]){0.2721088, 0.2176871, 0.3265306}), 3);
    fill(y, 3, kSentinel);
    EXPECT_ERROR(smax_power_softmax(&tx, &ty, 3, NULL), SMAX_STATUS_INVALID_ARGUMENT,
                 "power_softmax", y, 3);
  }

  /* Probability-domain temperature: [0.2, 0.8], T = 0.5 -> [1/17, 16/17]. */
  {
    float p[2] = {0.2f, 0.8f}, y[2], g[2] = {1.0f, -1.0f}, dp[2];
    smax_tensor tp = f32_1d(p, 2), ty = f32_1d(y, 2), tg = f32_1d(g, 2), tdp = f32_1d(dp, 2);
    double s = 0.0, r, want[2];
    int i;
    CHECK(smax_probability_temperature(&tp, &ty, 0.5f, NULL) == SMAX_STATUS_OK);
    for (i = 0; i < 2; ++i) s += (double)p[i] * p[i];
    CHECK_VEC(y, ((double[]){(double)p[0] * p[0] / s, (double)p[1] * p[1] / s}), 2, 2e-6, 1e-36);
    CHECK(smax_probability_temperature_backward(&tp, &tg, &tdp, 0.5f, NULL) == SMAX_STATUS_OK);
    r = dot_fd(g, y, 2);
    for (i = 0; i < 2; ++i) want[i] = 2.0 * p[i] / s * (g[i] - r);
    CHECK_VEC(dp, want, 2, 4e-6, 1e-7);
    fill(y, 2, kSentinel);
    EXPECT_ERROR(smax_probability_temperature(&tp, &ty, 0.0f, NULL), SMAX_STATUS_INVALID_ARGUMENT,
                 "probability_temperature", y, 2);
  }

  /* Logit standardisation: [1,2,3] -> z^ = [-1, 0, 1] (eps 0), and its VJP. */
  {
    float x[3] = {1.0f, 2.0f, 3.0f}, y[3], g[3] = {0.5f, -1.0f, 2.0f}, dx[3];
    smax_tensor tx = f32_1d(x, 3), ty = f32_1d(y, 3), tg = f32_1d(g, 3), tdx = f32_1d(dx, 3);
    smax_logit_standardization_options lo;
    double z[3] = {-1.0, 0.0, 1.0}, want[3], r, h[3], C = 0.0;
    int i;
    smax_logit_standardization_options_init(&lo);
    CHECK(lo.temperature == 1.0f && lo.eps == 1e-7f && lo.unbiased == 1);
    lo.eps = 0.0f;
    lo.temperature = 2.0f;
    CHECK(smax_logit_standardization(&tx, &ty, &lo, NULL) == SMAX_STATUS_OK);
    for (i = 0; i < 3; ++i) z[i] /= 2.0;
    ref_softmax(z, 3, want);
    CHECK_VEC(y, want, 3, 4e-6, 1e-36);
    CHECK(smax_logit_standardization_backward(&tx, &tg, &tdx, &lo, NULL) == SMAX_STATUS_OK);
    /* std = 1 (unbiased), d = [-1, 0, 1], k = 1 / T, C = sum h d / (D std^2), D = 2. */
    r = 0.0;
    for (i = 0; i < 3; ++i) r += g[i] * want[i];
    for (i = 0; i < 3; ++i) h[i] = want[i] * (g[i] - r);
    for (i = 0; i < 3; ++i) C += h[i] * (i - 1.0) / 2.0;
    for (i = 0; i < 3; ++i) want[i] = 0.5 * (h[i] - (i - 1.0) * C);
    CHECK_VEC(dx, want, 3, 1e-5, 1e-7);
    lo.temperature = -1.0f;
    fill(y, 3, kSentinel);
    EXPECT_ERROR(smax_logit_standardization(&tx, &ty, &lo, NULL), SMAX_STATUS_INVALID_ARGUMENT,
                 "temperature", y, 3);
  }
}
