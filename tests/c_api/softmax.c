/* tests/c_api/softmax.c: the C ABI test of the softmax family (include/smax/softmax.h): options, forward and backward ops, strides, masks, special values, errors. */
#include "util.h"

void test_options_init(void) {
  smax_softmax_options o;
  memset(&o, 0x7f, sizeof o);
  smax_softmax_options_init(&o);
  CHECK(o.struct_size == sizeof(smax_softmax_options));
  CHECK(o.axis == -1);
  CHECK(o.scale == 1.0f && o.temperature == 1.0f);
  CHECK(o.additive_mask == NULL && o.bool_mask == NULL);
  CHECK(o.algorithm == SMAX_ALGORITHM_AUTO && o.empty_row == SMAX_EMPTY_ROW_ZERO);
  CHECK(o.threads == 0);
  smax_softmax_options_init(NULL); /* no crash */
}

void test_forward_ops(void) {
  float x[2][4] = {{1.0f, 2.0f, 3.0f, 4.0f}, {-1.0f, 0.5f, 0.25f, 90.0f}};
  float y[2][4], lse[2];
  int64_t shape[2] = {2, 4};
  int64_t lse_shape[1] = {2};
  smax_tensor src, dst, out;
  int r, i;
  CHECK(smax_tensor_init(&src, x, SMAX_DTYPE_F32, 2, shape, NULL) == SMAX_STATUS_OK);
  CHECK(src.strides[0] == 4 && src.strides[1] == 1);
  CHECK(smax_tensor_init(&dst, y, SMAX_DTYPE_F32, 2, shape, NULL) == SMAX_STATUS_OK);
  CHECK(smax_tensor_init(&out, lse, SMAX_DTYPE_F32, 1, lse_shape, NULL) == SMAX_STATUS_OK);

  CHECK(smax_softmax(&src, &dst, NULL) == SMAX_STATUS_OK);
  CHECK(strcmp(smax_last_error(), "") == 0);
  for (r = 0; r < 2; ++r) {
    double xd[4], yd[4];
    for (i = 0; i < 4; ++i) xd[i] = x[r][i];
    ref_softmax(xd, 4, yd);
    for (i = 0; i < 4; ++i) CHECK(fabs(y[r][i] - yd[i]) <= 2e-6 * yd[i] + 1e-36);
  }

  CHECK(smax_log_softmax(&src, &dst, NULL) == SMAX_STATUS_OK);
  for (r = 0; r < 2; ++r) {
    double m = -INFINITY, s = 0.0;
    for (i = 0; i < 4; ++i) m = x[r][i] > m ? x[r][i] : m;
    for (i = 0; i < 4; ++i) s += exp(x[r][i] - m);
    for (i = 0; i < 4; ++i) CHECK(close_to(y[r][i], (x[r][i] - m) - log(s), 2e-6));
  }

  CHECK(smax_logsumexp(&src, &out, NULL) == SMAX_STATUS_OK);
  /* logsumexp(1,2,3,4) = 4 + log(1 + e^-1 + e^-2 + e^-3) */
  CHECK(close_to(lse[0], 4.0 + log(1.0 + exp(-1.0) + exp(-2.0) + exp(-3.0)), 2e-6));
  CHECK(close_to(lse[1], 90.0 + log(1.0 + exp(-91.0) + exp(-89.5) + exp(-89.75)), 2e-6));

  /* axis 0, temperature 2, explicit algorithm and thread count. */
  {
    smax_softmax_options o;
    smax_softmax_options_init(&o);
    o.axis = 0;
    o.temperature = 2.0f;
    o.algorithm = SMAX_ALGORITHM_ONLINE;
    o.threads = 2;
    CHECK(smax_softmax(&src, &dst, &o) == SMAX_STATUS_OK);
    for (i = 0; i < 4; ++i) {
      double xd[2], yd[2];
      xd[0] = x[0][i] / 2.0;
      xd[1] = x[1][i] / 2.0;
      ref_softmax(xd, 2, yd);
      CHECK(fabs(y[0][i] - yd[0]) <= 2e-6 * yd[0] + 1e-36);
      CHECK(fabs(y[1][i] - yd[1]) <= 2e-6 * yd[1] + 1e-36);
    }
  }
}

void test_strides_masks_specials(void) {
  /* A strided view (every other element of a 1x8 buffer, negative stride). */
  float buf[8] = {0.0f, 10.0f, 1.0f, 10.0f, 2.0f, 10.0f, 3.0f, 10.0f};
  float y[4];
  int64_t shape[1] = {4}, neg[1] = {-2};
  smax_tensor src, dst, mask;
  double xd[4] = {3.0, 2.0, 1.0, 0.0}, yd[4];
  int i;
  CHECK(smax_tensor_init(&src, &buf[6], SMAX_DTYPE_F32, 1, shape, neg) == SMAX_STATUS_OK);
  CHECK(smax_tensor_init(&dst, y, SMAX_DTYPE_F32, 1, shape, NULL) == SMAX_STATUS_OK);
  CHECK(smax_softmax(&src, &dst, NULL) == SMAX_STATUS_OK);
  ref_softmax(xd, 4, yd);
  for (i = 0; i < 4; ++i) CHECK(fabs(y[i] - yd[i]) <= 2e-6 * yd[i]);

  /* Bool mask: masked entries give exactly 0; an all-masked row follows empty_row. */
  {
    unsigned char keep[4] = {1, 0, 1, 0};
    smax_softmax_options o;
    double md[2] = {3.0, 1.0}, my[2];
    CHECK(smax_tensor_init(&mask, keep, SMAX_DTYPE_BOOL, 1, shape, NULL) == SMAX_STATUS_OK);
    smax_softmax_options_init(&o);
    o.bool_mask = &mask;
    CHECK(smax_softmax(&src, &dst, &o) == SMAX_STATUS_OK);
    ref_softmax(md, 2, my);
    CHECK(y[1] == 0.0f && y[3] == 0.0f);
    CHECK(fabs(y[0] - my[0]) <= 2e-6 * my[0] && fabs(y[2] - my[1]) <= 2e-6 * my[1]);
    memset(keep, 0, sizeof keep);
    CHECK(smax_softmax(&src, &dst, &o) == SMAX_STATUS_OK);
    for (i = 0; i < 4; ++i) CHECK(y[i] == 0.0f);
    o.empty_row = SMAX_EMPTY_ROW_NAN;
    CHECK(smax_softmax(&src, &dst, &o) == SMAX_STATUS_OK);
    for (i = 0; i < 4; ++i) CHECK(isnan(y[i]));
  }

  /* Additive mask broadcast over rows, -inf entries give exact zeros. */
  {
    float x2[2][3] = {{1.0f, 2.0f, 3.0f}, {0.0f, 0.0f, 0.0f}};
    float add[3] = {0.0f, -INFINITY, 0.5f};
    float out[2][3];
    int64_t s2[2] = {2, 3}, s1[1] = {3};
    smax_tensor a, b, m;
    smax_softmax_options o;
    double r0[2] = {1.0, 3.5}, e0[2], r1[2] = {0.0, 0.5}, e1[2];
    smax_tensor_init(&a, x2, SMAX_DTYPE_F32, 2, s2, NULL);
    smax_tensor_init(&b, out, SMAX_DTYPE_F32, 2, s2, NULL);
    smax_tensor_init(&m, add, SMAX_DTYPE_F32, 1, s1, NULL);
    smax_softmax_options_init(&o);
    o.additive_mask = &m;
    CHECK(smax_softmax(&a, &b, &o) == SMAX_STATUS_OK);
    ref_softmax(r0, 2, e0);
    ref_softmax(r1, 2, e1);
    CHECK(out[0][1] == 0.0f && out[1][1] == 0.0f);
    CHECK(fabs(out[0][0] - e0[0]) <= 2e-6 * e0[0] && fabs(out[0][2] - e0[1]) <= 2e-6 * e0[1]);
    CHECK(fabs(out[1][0] - e1[0]) <= 2e-6 * e1[0] && fabs(out[1][2] - e1[1]) <= 2e-6 * e1[1]);
  }

  /* NaN and +inf rows; in-place; scalar (rank 0). */
  {
    float row[3] = {1.0f, NAN, 2.0f};
    float one = 7.5f;
    int64_t s3[1] = {3};
    smax_tensor t, sc;
    smax_tensor_init(&t, row, SMAX_DTYPE_F32, 1, s3, NULL);
    CHECK(smax_softmax(&t, &t, NULL) == SMAX_STATUS_OK);
    CHECK(isnan(row[0]) && isnan(row[1]) && isnan(row[2]));
    row[0] = 1.0f;
    row[1] = INFINITY;
    row[2] = 2.0f;
    CHECK(smax_log_softmax(&t, &t, NULL) == SMAX_STATUS_OK);
    CHECK(isnan(row[0]) && isnan(row[1]) && isnan(row[2]));
    CHECK(smax_tensor_init(&sc, &one, SMAX_DTYPE_F32, 0, NULL, NULL) == SMAX_STATUS_OK);
    CHECK(smax_softmax(&sc, &sc, NULL) == SMAX_STATUS_OK);
    CHECK(one == 1.0f);
  }

  /* logsumexp of an empty row is -inf; empty tensors with NULL data are fine. */
  {
    float lse = 0.0f;
    int64_t s0[1] = {0};
    smax_tensor e, d;
    smax_tensor_init(&e, NULL, SMAX_DTYPE_F32, 1, s0, NULL);
    smax_tensor_init(&d, &lse, SMAX_DTYPE_F32, 0, NULL, NULL);
    CHECK(smax_logsumexp(&e, &d, NULL) == SMAX_STATUS_OK);
    CHECK(isinf(lse) && lse < 0);
    CHECK(smax_softmax(&e, &e, NULL) == SMAX_STATUS_OK);
  }
}

void test_backward_ops(void) {
  float x[5] = {0.5f, -1.0f, 2.0f, 0.0f, 1.5f};
  float dyv[5] = {0.3f, -1.2f, 0.7f, 2.0f, -0.4f};
  float y[5], dx[5];
  double yd[5], xd[5], dot = 0.0, sum = 0.0;
  int64_t shape[1] = {5};
  smax_tensor tx, ty, tdy, tdx;
  smax_softmax_options o;
  int i;
  for (i = 0; i < 5; ++i) xd[i] = x[i];
  smax_tensor_init(&tx, x, SMAX_DTYPE_F32, 1, shape, NULL);
  smax_tensor_init(&ty, y, SMAX_DTYPE_F32, 1, shape, NULL);
  smax_tensor_init(&tdy, dyv, SMAX_DTYPE_F32, 1, shape, NULL);
  smax_tensor_init(&tdx, dx, SMAX_DTYPE_F32, 1, shape, NULL);
  smax_softmax_options_init(&o);
  o.scale = 0.5f;

  CHECK(smax_softmax(&tx, &ty, &o) == SMAX_STATUS_OK);
  CHECK(smax_softmax_backward(&ty, &tdy, &tdx, &o) == SMAX_STATUS_OK);
  for (i = 0; i < 5; ++i) dot += (double)dyv[i] * (double)y[i];
  for (i = 0; i < 5; ++i) {
    const double want = 0.5 * y[i] * (dyv[i] - dot);
    CHECK(fabs(dx[i] - want) <= 2e-6 * 0.5 * fabs(y[i]) * (fabs(dyv[i]) + fabs(dot)) + 1e-30);
  }
  /* The forward result itself, with scale 0.5. */
  for (i = 0; i < 5; ++i) xd[i] *= 0.5;
  ref_softmax(xd, 5, yd);
  for (i = 0; i < 5; ++i) CHECK(fabs(y[i] - yd[i]) <= 2e-6 * yd[i]);

  CHECK(smax_log_softmax(&tx, &ty, &o) == SMAX_STATUS_OK);
  CHECK(smax_log_softmax_backward(&ty, &tdy, &tdx, &o) == SMAX_STATUS_OK);
  for (i = 0; i < 5; ++i) sum += dyv[i];
  for (i = 0; i < 5; ++i) {
    const double e = exp((double)y[i]);
    const double want = 0.5 * (dyv[i] - e * sum);
    CHECK(fabs(dx[i] - want) <= 2e-6 * 0.5 * (fabs(dyv[i]) + 2.0 * e * 4.6) + 1e-30);
  }
  /* dx may alias dy. */
  CHECK(smax_log_softmax_backward(&ty, &tdy, &tdy, &o) == SMAX_STATUS_OK);
  for (i = 0; i < 5; ++i) CHECK(dyv[i] == dx[i]);

  /* Gradients of scale and temperature: S = sum x dx; dscale = S / scale,
   * dtemperature = -S / temperature (here T = 1, scale = 0.5). */
  {
    double s = 0.0, dscale = 0.0, dtemp = 0.0;
    for (i = 0; i < 5; ++i) s += (double)x[i] * (double)dx[i];
    CHECK(smax_logit_scale_gradients(&tx, &tdx, &o, &dscale, &dtemp) == SMAX_STATUS_OK);
    CHECK(fabs(dscale - s / 0.5) <= 1e-12 * (1.0 + fabs(s)));
    CHECK(fabs(dtemp + s) <= 1e-12 * (1.0 + fabs(s)));
    CHECK(smax_logit_scale_gradients(&tx, &tdx, NULL, NULL, NULL) == SMAX_STATUS_OK);
    dscale = 7.0;
    CHECK(smax_logit_scale_gradients(&tx, NULL, NULL, &dscale, &dtemp) ==
          SMAX_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(smax_last_error(), "dsrc") != NULL && dscale == 7.0);
  }
}

void test_errors(void) {
  float x[6] = {1, 2, 3, 4, 5, 6};
  float y[6];
  int64_t shape[2] = {2, 3}, bad_shape[2] = {3, 2}, zero_strides[2] = {0, 1};
  int64_t huge_strides[2] = {INT64_MAX / 2, 1};
  smax_tensor src, dst, t;
  smax_softmax_options o;
  smax_tensor_init(&src, x, SMAX_DTYPE_F32, 2, shape, NULL);
  smax_tensor_init(&dst, y, SMAX_DTYPE_F32, 2, shape, NULL);

#define RESET() fill(y, 6, kSentinel)
  RESET();
  EXPECT_ERROR(smax_softmax(NULL, &dst, NULL), SMAX_STATUS_INVALID_ARGUMENT, "src", y, 6);
  EXPECT_ERROR(smax_softmax(&src, NULL, NULL), SMAX_STATUS_INVALID_ARGUMENT, "dst", y, 6);

  smax_softmax_options_init(&o);
  o.axis = 2;
  EXPECT_ERROR(smax_softmax(&src, &dst, &o), SMAX_STATUS_INVALID_ARGUMENT, "axis 2", y, 6);
  o.axis = -3;
  EXPECT_ERROR(smax_log_softmax(&src, &dst, &o), SMAX_STATUS_INVALID_ARGUMENT, "axis -3", y, 6);

  smax_softmax_options_init(&o);
  o.temperature = 0.0f;
  EXPECT_ERROR(smax_softmax(&src, &dst, &o), SMAX_STATUS_INVALID_ARGUMENT, "temperature", y, 6);
  smax_softmax_options_init(&o);
  o.scale = NAN;
  EXPECT_ERROR(smax_softmax(&src, &dst, &o), SMAX_STATUS_INVALID_ARGUMENT, "scale", y, 6);
  smax_softmax_options_init(&o);
  o.algorithm = 99;
  EXPECT_ERROR(smax_softmax(&src, &dst, &o), SMAX_STATUS_INVALID_ARGUMENT, "algorithm", y, 6);
  smax_softmax_options_init(&o);
  o.empty_row = -1;
  EXPECT_ERROR(smax_softmax(&src, &dst, &o), SMAX_STATUS_INVALID_ARGUMENT, "empty_row", y, 6);
  smax_softmax_options_init(&o);
  o.threads = -2;
  EXPECT_ERROR(smax_softmax(&src, &dst, &o), SMAX_STATUS_INVALID_ARGUMENT, "threads", y, 6);
  smax_softmax_options_init(&o);
  o.struct_size = 8;
  EXPECT_ERROR(smax_softmax(&src, &dst, &o), SMAX_STATUS_INVALID_ARGUMENT, "struct_size", y, 6);

  /* Shape mismatch, wrong dtype, bad rank, null data, zero-stride dst,
   * overflowing strides, partial overlap. */
  smax_tensor_init(&t, y, SMAX_DTYPE_F32, 2, bad_shape, NULL);
  EXPECT_ERROR(smax_softmax(&src, &t, NULL), SMAX_STATUS_INVALID_ARGUMENT, "shape", y, 6);
  t = dst;
  t.dtype = SMAX_DTYPE_BOOL;
  EXPECT_ERROR(smax_softmax(&src, &t, NULL), SMAX_STATUS_INVALID_ARGUMENT, "dtype", y, 6);
  t.dtype = 7;
  EXPECT_ERROR(smax_softmax(&src, &t, NULL), SMAX_STATUS_INVALID_ARGUMENT, "dtype", y, 6);
  t = dst;
  t.rank = 9;
  EXPECT_ERROR(smax_softmax(&src, &t, NULL), SMAX_STATUS_INVALID_ARGUMENT, "rank 9", y, 6);
  t.rank = -1;
  EXPECT_ERROR(smax_softmax(&src, &t, NULL), SMAX_STATUS_INVALID_ARGUMENT, "rank -1", y, 6);
  t = src;
  t.data = NULL;
  EXPECT_ERROR(smax_softmax(&t, &dst, NULL), SMAX_STATUS_INVALID_ARGUMENT, "null", y, 6);
  smax_tensor_init(&t, y, SMAX_DTYPE_F32, 2, shape, zero_strides);
  EXPECT_ERROR(smax_softmax(&src, &t, NULL), SMAX_STATUS_INVALID_ARGUMENT, "stride 0", y, 6);
  smax_tensor_init(&t, x, SMAX_DTYPE_F32, 2, shape, huge_strides);
  EXPECT_ERROR(smax_softmax(&t, &dst, NULL), SMAX_STATUS_INVALID_ARGUMENT, "overflow", y, 6);
  {
    float buf[8];
    int64_t s1[1] = {6};
    smax_tensor a, b;
    fill(buf, 8, kSentinel);
    smax_tensor_init(&a, buf, SMAX_DTYPE_F32, 1, s1, NULL);
    smax_tensor_init(&b, buf + 1, SMAX_DTYPE_F32, 1, s1, NULL);
    EXPECT_ERROR(smax_softmax(&a, &b, NULL), SMAX_STATUS_INVALID_ARGUMENT, "overlaps", buf, 8);
  }
  /* Backward: dx aliasing y is rejected. */
  fill(x, 6, kSentinel);
  EXPECT_ERROR(smax_softmax_backward(&src, &dst, &src, NULL), SMAX_STATUS_INVALID_ARGUMENT,
               "dx", x, 6);
  EXPECT_ERROR(smax_log_softmax_backward(&src, NULL, &dst, NULL), SMAX_STATUS_INVALID_ARGUMENT,
               "dy", x, 6);
  /* logsumexp dst of the wrong shape. */
  RESET();
  EXPECT_ERROR(smax_logsumexp(&src, &dst, NULL), SMAX_STATUS_INVALID_ARGUMENT, "logsumexp", y, 6);

  /* A successful call clears the message. */
  smax_tensor_init(&src, x, SMAX_DTYPE_F32, 2, shape, NULL);
  fill(x, 6, 1.0f);
  CHECK(smax_softmax(&src, &dst, NULL) == SMAX_STATUS_OK);
  CHECK(strcmp(smax_last_error(), "") == 0);

  /* Descriptor helper errors. */
  CHECK(smax_tensor_init(NULL, x, SMAX_DTYPE_F32, 1, shape, NULL) ==
        SMAX_STATUS_INVALID_ARGUMENT);
  t.rank = 3;
  CHECK(smax_tensor_init(&t, x, SMAX_DTYPE_F32, 9, shape, NULL) == SMAX_STATUS_INVALID_ARGUMENT);
  CHECK(t.rank == 3); /* untouched */
  CHECK(strstr(smax_last_error(), "rank 9") != NULL);
  CHECK(smax_tensor_init(&t, x, 9, 1, shape, NULL) == SMAX_STATUS_INVALID_ARGUMENT); /* past SMAX_DTYPE_I32 */
  CHECK(smax_tensor_init(&t, x, SMAX_DTYPE_F32, 2, NULL, NULL) == SMAX_STATUS_INVALID_ARGUMENT);
#undef RESET
}
