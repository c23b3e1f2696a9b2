/* tests/c_api_test.c: the C ABI (include/smax/c/smax.h), compiled as C99.
 *
 * Checks every op against the hand vectors of docs/vectors.md or values
 * computed here in double (closed forms on small inputs), every options
 * struct and its init (defaults, struct_size: smaller rejected, larger
 * accepted with a zero tail, UNSUPPORTED with a non-zero one), strides and
 * masks through the descriptors, the runtime functions, and the error paths
 * of every op family: each bad call must return the right status, leave a
 * message naming the argument in smax_last_error(), and leave every output
 * untouched. Every function of the header is referenced (link check).
 * Exits non-zero on any failure.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "smax/c/smax.h"

static int g_failures = 0;
static int g_checks = 0;

#define CHECK(cond)                                                         \
  do {                                                                      \
    ++g_checks;                                                             \
    if (!(cond)) {                                                          \
      ++g_failures;                                                         \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                       \
  } while (0)

/* |got - want| <= tol * (1 + |want|) for finite values; exact for specials. */
static int close_to(double got, double want, double tol) {
  if (isnan(want)) return isnan(got);
  if (isinf(want)) return got == want;
  return fabs(got - want) <= tol * (1.0 + fabs(want));
}

static void ref_softmax(const double* x, int n, double* y) {
  double m = -INFINITY, s = 0.0;
  int i;
  for (i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  for (i = 0; i < n; ++i) s += exp(x[i] - m);
  for (i = 0; i < n; ++i) y[i] = exp(x[i] - m) / s;
}

static const float kSentinel = -12345.0f;

static void fill(float* p, int n, float v) {
  int i;
  for (i = 0; i < n; ++i) p[i] = v;
}

static int all_equal(const float* p, int n, float v) {
  int i;
  for (i = 0; i < n; ++i) {
    if (memcmp(&p[i], &v, sizeof v) != 0) return 0;
  }
  return 1;
}

/* Expects status `want`, a message containing `needle`, and dst untouched. */
static void expect_error(smax_status got, smax_status want, const char* needle, const float* dst,
                         int n, int line) {
  const char* msg = smax_last_error();
  ++g_checks;
  if (got != want || msg == NULL || strstr(msg, needle) == NULL || !all_equal(dst, n, kSentinel)) {
    ++g_failures;
    fprintf(stderr, "c_api_test.c:%d: expected status %d (%s) with \"%s\", got %d (%s): \"%s\"%s\n",
            line, (int)want, smax_status_name(want), needle, (int)got, smax_status_name(got),
            msg ? msg : "(null)", all_equal(dst, n, kSentinel) ? "" : " and dst was written");
  }
}
#define EXPECT_ERROR(call, want, needle, dst, n) \
  expect_error((call), (want), (needle), (dst), (n), __LINE__)

static void test_options_init(void) {
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

static void test_forward_ops(void) {
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

static void test_strides_masks_specials(void) {
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

static void test_backward_ops(void) {
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
}

static void test_errors(void) {
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
  CHECK(smax_tensor_init(&t, x, 5, 1, shape, NULL) == SMAX_STATUS_INVALID_ARGUMENT);
  CHECK(smax_tensor_init(&t, x, SMAX_DTYPE_F32, 2, NULL, NULL) == SMAX_STATUS_INVALID_ARGUMENT);
#undef RESET
}

/* ---- helpers for the ops beyond the softmax family ------------------------ */

static smax_tensor f32_1d(float* p, int64_t n) {
  smax_tensor t;
  int64_t shape[1];
  shape[0] = n;
  smax_tensor_init(&t, p, SMAX_DTYPE_F32, 1, shape, NULL);
  return t;
}

static smax_tensor f32_2d(float* p, int64_t rows, int64_t cols) {
  smax_tensor t;
  int64_t shape[2];
  shape[0] = rows;
  shape[1] = cols;
  smax_tensor_init(&t, p, SMAX_DTYPE_F32, 2, shape, NULL);
  return t;
}

static smax_tensor f32_scalar(float* p) {
  smax_tensor t;
  smax_tensor_init(&t, p, SMAX_DTYPE_F32, 0, NULL, NULL);
  return t;
}

static smax_tensor i64_1d(int64_t* p, int64_t n) {
  smax_tensor t;
  int64_t shape[1];
  shape[0] = n;
  smax_tensor_init(&t, p, SMAX_DTYPE_I64, 1, shape, NULL);
  return t;
}

/* Every got[i] within atol + rtol * |want[i]| of want[i] (NaN / inf exact). */
static void check_vec(const float* got, const double* want, int n, double rtol, double atol,
                      int line) {
  int i;
  for (i = 0; i < n; ++i) {
    int ok;
    ++g_checks;
    if (isnan(want[i])) {
      ok = isnan(got[i]);
    } else if (isinf(want[i])) {
      ok = got[i] == want[i];
    } else {
      ok = fabs(got[i] - want[i]) <= atol + rtol * fabs(want[i]);
    }
    if (!ok) {
      ++g_failures;
      fprintf(stderr, "c_api_test.c:%d: element %d: got %.9g, want %.9g\n", line, i, got[i],
              want[i]);
    }
  }
}
#define CHECK_VEC(got, want, n, rtol, atol) check_vec((got), (want), (n), (rtol), (atol), __LINE__)
/* Hand vectors of docs/vectors.md: 7 decimals, O(1) values. */
#define CHECK_HAND(got, want, n) check_vec((got), (want), (n), 0.0, 1e-6, __LINE__)

/* Expects status `want`, a message containing `needle`, and `bytes` bytes at
 * `buf` unchanged (compared with a snapshot taken before the call). */
static void expect_untouched(smax_status got, smax_status want, const char* needle,
                             const unsigned char* snapshot, const void* buf, size_t bytes,
                             int line) {
  const char* msg = smax_last_error();
  const int same = memcmp(snapshot, buf, bytes) == 0;
  ++g_checks;
  if (got != want || msg == NULL || strstr(msg, needle) == NULL || !same) {
    ++g_failures;
    fprintf(stderr, "c_api_test.c:%d: expected status %d (%s) with \"%s\", got %d (%s): \"%s\"%s\n",
            line, (int)want, smax_status_name(want), needle, (int)got, smax_status_name(got),
            msg ? msg : "(null)", same ? "" : " and an output was written");
  }
}
#define EXPECT_UNTOUCHED(call, want, needle, buf, bytes)                          \
  do {                                                                          \
    unsigned char snapshot_[1024];                                              \
    CHECK((bytes) <= sizeof snapshot_);                                         \
    memcpy(snapshot_, (buf), (bytes));                                          \
    expect_untouched((call), (want), (needle), snapshot_, (buf), (bytes), __LINE__); \
  } while (0)

static double dot_fd(const float* a, const float* b, int n) {
  double s = 0.0;
  int i;
  for (i = 0; i < n; ++i) s += (double)a[i] * (double)b[i];
  return s;
}

static double lse_d(const double* x, int n) {
  double m = -INFINITY, s = 0.0;
  int i;
  for (i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  for (i = 0; i < n; ++i) s += exp(x[i] - m);
  return m + log(s);
}

/* ---- versioned structs, defaults, dtype i64 ----------------------------------- */

static void test_struct_versions(void) {
  float x[3] = {-2.0f, 0.0f, 0.5f}, y[3];
  int64_t tgt = 2;
  float loss = 0.0f;
  smax_tensor tx = f32_1d(x, 3), ty = f32_1d(y, 3);
  smax_tensor tx2 = f32_2d(x, 1, 3), tt = i64_1d(&tgt, 1), tl = f32_1d(&loss, 1);

  /* Every *_init sets struct_size to the struct's size; NULL is ignored. */
  {
    smax_loss_options lo;
    smax_entmax_bisect_options bo;
    smax_sparse_softmax_loss_options so;
    smax_ssmax_options sso;
    smax_softpick_options po;
    smax_self_adjust_options sa;
    smax_sigmoid_normalizer_options sg;
    smax_softplus_normalizer_options sp;
    smax_logit_standardization_options ls;
    smax_gumbel_softmax_options go;
    smax_softmax_topk_options tk;
    smax_sample_options sm;
    smax_soft_nms_options nm;
    smax_cross_entropy_options ce;
    smax_linear_cross_entropy_options lce;
    memset(&lo, 0x7f, sizeof lo);
    smax_loss_options_init(&lo);
    CHECK(lo.struct_size == sizeof lo && lo.ignore_index == -100 && lo.weight == NULL);
    CHECK(lo.reduction == SMAX_REDUCTION_MEAN && lo.empty_mean == SMAX_EMPTY_MEAN_NAN);
    memset(&bo, 0x7f, sizeof bo);
    smax_entmax_bisect_options_init(&bo);
    CHECK(bo.struct_size == sizeof bo && bo.alpha == 1.5f && bo.n_iter == 50);
    CHECK(bo.ensure_sum_one == 1 && bo.alpha_tensor == NULL);
    smax_sparse_softmax_loss_options_init(&so);
    CHECK(so.struct_size == sizeof so && so.force_target == 0);
    smax_ssmax_options_init(&sso);
    CHECK(sso.struct_size == sizeof sso && sso.s == 0.43f && sso.fixed_n == 0 && !sso.s_rows);
    smax_softpick_options_init(&po);
    CHECK(po.struct_size == sizeof po);
    smax_self_adjust_options_init(&sa);
    CHECK(sa.struct_size == sizeof sa);
    smax_sigmoid_normalizer_options_init(&sg);
    CHECK(sg.struct_size == sizeof sg && sg.has_bias == 0 && sg.n_fixed == 0);
    CHECK(sg.count_visible == 0);
    smax_softplus_normalizer_options_init(&sp);
    CHECK(sp.struct_size == sizeof sp && sp.head_dim == 0);
    smax_logit_standardization_options_init(&ls);
    CHECK(ls.struct_size == sizeof ls);
    smax_gumbel_softmax_options_init(&go);
    CHECK(go.struct_size == sizeof go && go.y_soft == NULL);
    smax_softmax_topk_options_init(&tk);
    CHECK(tk.struct_size == sizeof tk);
    smax_sample_options_init(&sm);
    CHECK(sm.struct_size == sizeof sm);
    smax_soft_nms_options_init(&nm);
    CHECK(nm.struct_size == sizeof nm);
    smax_cross_entropy_options_init(&ce);
    CHECK(ce.struct_size == sizeof ce && ce.entropy == NULL && ce.target_logprob == NULL);
    smax_linear_cross_entropy_options_init(&lce);
    CHECK(lce.struct_size == sizeof lce);
    smax_loss_options_init(NULL);
    smax_entmax_bisect_options_init(NULL);
    smax_sparse_softmax_loss_options_init(NULL);
    smax_ssmax_options_init(NULL);
    smax_softpick_options_init(NULL);
    smax_self_adjust_options_init(NULL);
    smax_sigmoid_normalizer_options_init(NULL);
    smax_softplus_normalizer_options_init(NULL);
    smax_logit_standardization_options_init(NULL);
    smax_gumbel_softmax_options_init(NULL);
    smax_softmax_topk_options_init(NULL);
    smax_sample_options_init(NULL);
    smax_soft_nms_options_init(NULL);
    smax_cross_entropy_options_init(NULL);
    smax_linear_cross_entropy_options_init(NULL);
  }

  /* A caller built against a newer header: a larger struct whose unknown
   * tail is zero is accepted; a non-zero tail is UNSUPPORTED (nothing
   * written); a smaller or absurd struct_size is INVALID_ARGUMENT. */
  {
    struct {
      smax_softmax_options o;
      unsigned char tail[24];
    } big;
    memset(&big, 0, sizeof big);
    smax_softmax_options_init(&big.o);
    big.o.struct_size = (uint32_t)sizeof big;
    CHECK(smax_sparsemax(&tx, &ty, &big.o) == SMAX_STATUS_OK);
    CHECK_HAND(y, ((double[]){0.0, 0.25, 0.75}), 3);
    big.tail[5] = 1;
    fill(y, 3, kSentinel);
    EXPECT_ERROR(smax_sparsemax(&tx, &ty, &big.o), SMAX_STATUS_UNSUPPORTED, "newer", y, 3);
    big.o.struct_size = (uint32_t)sizeof(smax_softmax_options) - 4;
    EXPECT_ERROR(smax_sparsemax(&tx, &ty, &big.o), SMAX_STATUS_INVALID_ARGUMENT,
                 "options.struct_size", y, 3);
    big.o.struct_size = 0x7f7f7f7fu; /* uninitialised */
    EXPECT_ERROR(smax_sparsemax(&tx, &ty, &big.o), SMAX_STATUS_INVALID_ARGUMENT, "struct_size",
                 y, 3);
  }
  {
    struct {
      smax_loss_options o;
      unsigned char tail[16];
    } big;
    memset(&big, 0, sizeof big);
    smax_loss_options_init(&big.o);
    big.o.reduction = SMAX_REDUCTION_NONE;
    big.o.struct_size = (uint32_t)sizeof big;
    CHECK(smax_sparsemax_loss(&tx2, &tt, &tl, &big.o, NULL) == SMAX_STATUS_OK);
    CHECK(close_to(loss, 0.0625, 1e-6));
    big.tail[15] = 0x80;
    loss = kSentinel;
    EXPECT_ERROR(smax_sparsemax_loss(&tx2, &tt, &tl, &big.o, NULL), SMAX_STATUS_UNSUPPORTED,
                 "loss (struct_size", &loss, 1);
    big.o.struct_size = 8;
    EXPECT_ERROR(smax_sparsemax_loss(&tx2, &tt, &tl, &big.o, NULL), SMAX_STATUS_INVALID_ARGUMENT,
                 "loss.struct_size 8", &loss, 1);
  }
  {
    struct {
      smax_entmax_bisect_options o;
      unsigned char tail[8];
    } big;
    memset(&big, 0, sizeof big);
    smax_entmax_bisect_options_init(&big.o);
    big.o.struct_size = (uint32_t)sizeof big;
    CHECK(smax_entmax_bisect(&tx, &ty, &big.o, NULL) == SMAX_STATUS_OK);
    CHECK_HAND(y, ((double[]){0.0, 0.3260074, 0.6739926}), 3);
    big.tail[0] = 1;
    fill(y, 3, kSentinel);
    EXPECT_ERROR(smax_entmax_bisect(&tx, &ty, &big.o, NULL), SMAX_STATUS_UNSUPPORTED,
                 "smax_entmax_bisect_options", y, 3);
    big.o.struct_size = 4;
    EXPECT_ERROR(smax_entmax_bisect(&tx, &ty, &big.o, NULL), SMAX_STATUS_INVALID_ARGUMENT,
                 "params.struct_size 4", y, 3);
  }

  /* dtype i64 descriptors: smax_tensor_init accepts them, ops check them. */
  {
    int64_t buf[3];
    int64_t shape[1] = {3};
    smax_tensor t;
    CHECK(smax_tensor_init(&t, buf, SMAX_DTYPE_I64, 1, shape, NULL) == SMAX_STATUS_OK);
    CHECK(t.dtype == SMAX_DTYPE_I64 && t.strides[0] == 1);
    memset(buf, 0, sizeof buf);
    EXPECT_UNTOUCHED(smax_softmax(&tx, &t, NULL), SMAX_STATUS_INVALID_ARGUMENT, "dtype", buf,
                     sizeof buf);
    CHECK(smax_tensor_init(&t, buf, 3, 1, shape, NULL) == SMAX_STATUS_INVALID_ARGUMENT);
  }
}

/* Every function of the header, referenced once: a missing definition is a
 * link error of this program. The ops come from the op list (a missing
 * smax_<op> of an op of smax/op_list.inc does not compile); the rest are the
 * options inits and the runtime. */
typedef void (*any_fn)(void);
static void test_every_function_links(void) {
  const any_fn fns[] = {
#define SMAX_OP(name, group, kind, cli) (any_fn)smax_##name,
#include "smax/op_list.inc"
      (any_fn)smax_tensor_init, (any_fn)smax_softmax_options_init,
      (any_fn)smax_loss_options_init, (any_fn)smax_entmax_bisect_options_init,
      (any_fn)smax_sparse_softmax_loss_options_init, (any_fn)smax_ssmax_options_init,
      (any_fn)smax_softpick_options_init, (any_fn)smax_clipped_softmax_options_init,
      (any_fn)smax_self_adjust_options_init,
      (any_fn)smax_sigmoid_normalizer_options_init, (any_fn)smax_softplus_normalizer_options_init,
      (any_fn)smax_logit_standardization_options_init, (any_fn)smax_gumbel_softmax_options_init,
      (any_fn)smax_softmax_topk_options_init, (any_fn)smax_sample_options_init,
      (any_fn)smax_soft_nms_options_init, (any_fn)smax_cross_entropy_options_init,
      (any_fn)smax_linear_cross_entropy_options_init,
      (any_fn)smax_last_error, (any_fn)smax_status_name, (any_fn)smax_active_target,
      (any_fn)smax_set_max_target, (any_fn)smax_max_threads, (any_fn)smax_set_max_threads,
      (any_fn)smax_version,
      (any_fn)smax_attention_options_init, (any_fn)smax_attention_normalizer_name,
      (any_fn)smax_attention_normalizer_parse};
  size_t i;
  for (i = 0; i < sizeof fns / sizeof fns[0]; ++i) CHECK(fns[i] != NULL);
}

/* ---- sparse normalisers (include/smax/sparse.h) ----------------------------- */

static void test_sparse(void) {
  float x[3] = {-2.0f, 0.0f, 0.5f}, y[3], dx[3];
  float g[3] = {1.0f, 2.0f, 4.0f};
  smax_tensor tx = f32_1d(x, 3), ty = f32_1d(y, 3), tg = f32_1d(g, 3), tdx = f32_1d(dx, 3);

  /* sparsemax and its VJP (docs/vectors.md, "Sparse normalisers"). */
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

  /* Top-k sparse softmax, its VJP and loss (docs/vectors.md, "Sparse normalisers"). */
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

/* ---- rescaled / rectified softmaxes (include/smax/rescaled.h) ---------------- */

static void test_rescaled(void) {
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

/* ---- re-weighting normalisers (include/smax/reweight.h) --------------------- */

static void test_reweight(void) {
  /* SA-Softmax (docs/vectors.md, "Re-weighting normalisers"). */
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

/* ---- sampling (include/smax/sampling.h) --------------------------------------- */

static void test_sampling(void) {
  /* Gumbel-softmax with explicit noise (docs/vectors.md): logits [0,0], g = [0,2]. */
  {
    float x[2] = {0.0f, 0.0f}, noise[2] = {0.0f, 2.0f}, y[2], soft[2];
    float g[2] = {1.0f, -1.0f}, dx[2];
    smax_tensor tx = f32_1d(x, 2), tn = f32_1d(noise, 2), ty = f32_1d(y, 2);
    smax_tensor ts = f32_1d(soft, 2), tg = f32_1d(g, 2), tdx = f32_1d(dx, 2);
    smax_gumbel_softmax_options go;
    double r, want[2];
    int i;
    smax_gumbel_softmax_options_init(&go);
    CHECK(go.tau == 1.0f && go.hard == 0 && go.seed == 0 && go.noise == NULL);
    go.noise = &tn;
    CHECK(smax_gumbel_softmax(&tx, &ty, &go, NULL) == SMAX_STATUS_OK);
    CHECK_HAND(y, ((double[]){0.1192029, 0.8807971}), 2);
    go.tau = 2.0f;
    CHECK(smax_gumbel_softmax(&tx, &ty, &go, NULL) == SMAX_STATUS_OK);
    CHECK_HAND(y, ((double[]){0.2689414, 0.7310586}), 2);
    go.tau = 1.0f;
    go.hard = 1;
    go.y_soft = &ts;
    CHECK(smax_gumbel_softmax(&tx, &ty, &go, NULL) == SMAX_STATUS_OK);
    CHECK(y[0] == 0.0f && y[1] == 1.0f);
    CHECK_HAND(soft, ((double[]){0.1192029, 0.8807971}), 2);
    /* Straight-through backward from the soft sample: dx = (1/tau) y (g - <g,y>). */
    CHECK(smax_gumbel_softmax_backward(&ts, &tg, &tdx, 2.0f, NULL) == SMAX_STATUS_OK);
    r = dot_fd(g, soft, 2);
    for (i = 0; i < 2; ++i) want[i] = 0.5 * soft[i] * (g[i] - r);
    CHECK_VEC(dx, want, 2, 2e-6, 1e-30);
    go.tau = 0.0f;
    fill(y, 2, kSentinel);
    EXPECT_ERROR(smax_gumbel_softmax(&tx, &ty, &go, NULL), SMAX_STATUS_INVALID_ARGUMENT, "tau",
                 y, 2);
    fill(dx, 2, kSentinel);
    EXPECT_ERROR(smax_gumbel_softmax_backward(&ts, &tg, &tdx, -1.0f, NULL),
                 SMAX_STATUS_INVALID_ARGUMENT, "tau", dx, 2);
  }

  /* Seeded noise, Gumbel-max and sample agree on the same (seed, row, i). */
  {
    float noise[2][5], noise2[2][5], zeros[2][5];
    int64_t idx[2] = {-5, -5}, idx2[2] = {-5, -5};
    smax_tensor tn = f32_2d(&noise[0][0], 2, 5), tn2 = f32_2d(&noise2[0][0], 2, 5);
    smax_tensor tz = f32_2d(&zeros[0][0], 2, 5), ti = i64_1d(idx, 2), ti2 = i64_1d(idx2, 2);
    smax_sample_options so;
    int r, i;
    memset(zeros, 0, sizeof zeros);
    CHECK(smax_gumbel_noise(&tn, 42, -1) == SMAX_STATUS_OK);
    CHECK(smax_gumbel_noise(&tn2, 42, -1) == SMAX_STATUS_OK);
    CHECK(memcmp(noise, noise2, sizeof noise) == 0);
    CHECK(smax_gumbel_noise(&tn2, 43, -1) == SMAX_STATUS_OK);
    CHECK(memcmp(noise, noise2, sizeof noise) != 0);
    CHECK(smax_gumbel_max(&tz, &ti, 42, NULL) == SMAX_STATUS_OK);
    for (r = 0; r < 2; ++r) {
      int best = 0;
      for (i = 1; i < 5; ++i) best = noise[r][i] > noise[r][best] ? i : best;
      CHECK(idx[r] == best);
    }
    smax_sample_options_init(&so);
    CHECK(so.temperature == 1.0f && so.top_p == 1.0f && so.top_k == 0 && so.seed == 0);
    so.seed = 42;
    CHECK(smax_sample(&tz, &ti2, &so, NULL) == SMAX_STATUS_OK);
    CHECK(idx2[0] == idx[0] && idx2[1] == idx[1]);
    /* Bad axis; indices untouched. */
    EXPECT_UNTOUCHED(smax_gumbel_noise(&tn, 1, 2), SMAX_STATUS_INVALID_ARGUMENT, "gumbel_noise",
                     noise, sizeof noise);
    EXPECT_UNTOUCHED(smax_gumbel_max(&tz, &tn, 1, NULL), SMAX_STATUS_INVALID_ARGUMENT,
                     "gumbel_max", noise, sizeof noise);
  }

  /* Fused softmax + top-k: order by descending logit, ties by lower index. */
  {
    float x[5] = {1.0f, 3.0f, 2.0f, 3.0f, 0.0f}, probs[3];
    int64_t idx[3];
    smax_tensor tx = f32_1d(x, 5), tp = f32_1d(probs, 3), ti = i64_1d(idx, 3);
    smax_softmax_topk_options to;
    double xd[5], p[5], s;
    int i;
    for (i = 0; i < 5; ++i) xd[i] = x[i];
    ref_softmax(xd, 5, p);
    CHECK(smax_softmax_topk(&tx, &tp, &ti, 3, NULL, NULL) == SMAX_STATUS_OK);
    CHECK(idx[0] == 1 && idx[1] == 3 && idx[2] == 2);
    CHECK_VEC(probs, ((double[]){p[1], p[3], p[2]}), 3, 2e-6, 1e-36);
    smax_softmax_topk_options_init(&to);
    CHECK(to.renormalize == 0);
    to.renormalize = 1;
    CHECK(smax_softmax_topk(&tx, &tp, &ti, 3, &to, NULL) == SMAX_STATUS_OK);
    s = p[1] + p[3] + p[2];
    CHECK_VEC(probs, ((double[]){p[1] / s, p[3] / s, p[2] / s}), 3, 1e-6, 1e-36);
    /* k > n: both outputs untouched. */
    fill(probs, 3, kSentinel);
    EXPECT_ERROR(smax_softmax_topk(&tx, &tp, &ti, 6, NULL, NULL), SMAX_STATUS_INVALID_ARGUMENT,
                 "k must be", probs, 3);
    EXPECT_UNTOUCHED(smax_softmax_topk(&tx, &tp, &ti, 6, NULL, NULL),
                     SMAX_STATUS_INVALID_ARGUMENT, "softmax_topk", idx, sizeof idx);
    /* indices must be i64. */
    {
      smax_tensor bad = f32_1d((float*)idx, 3);
      EXPECT_UNTOUCHED(smax_softmax_topk(&tx, &tp, &bad, 3, NULL, NULL),
                       SMAX_STATUS_INVALID_ARGUMENT, "indices", idx, sizeof idx);
    }
  }

  /* Sampling filter and sampling: temperature, top-k, greedy. */
  {
    float x[4] = {1.0f, 3.0f, 2.0f, 0.0f}, f[4];
    int64_t idx = -5;
    smax_tensor tx = f32_1d(x, 4), tf = f32_1d(f, 4), ti = i64_1d(&idx, 1);
    smax_tensor ti0;
    smax_sample_options so;
    smax_tensor_init(&ti0, &idx, SMAX_DTYPE_I64, 0, NULL, NULL);
    smax_sample_options_init(&so);
    so.top_k = 2;
    CHECK(smax_sampling_filter(&tx, &tf, &so, NULL) == SMAX_STATUS_OK);
    CHECK(isinf(f[0]) && f[0] < 0 && f[1] == 3.0f && f[2] == 2.0f && isinf(f[3]) && f[3] < 0);
    so.top_k = 1;
    so.seed = 12345;
    CHECK(smax_sample(&tx, &ti0, &so, NULL) == SMAX_STATUS_OK);
    CHECK(idx == 1);
    smax_sample_options_init(&so);
    so.temperature = 0.0f; /* greedy */
    idx = -5;
    CHECK(smax_sample(&tx, &ti, &so, NULL) == SMAX_STATUS_OK);
    CHECK(idx == 1);
    smax_sample_options_init(&so);
    so.top_p = 0.0f;
    idx = -5;
    EXPECT_UNTOUCHED(smax_sample(&tx, &ti, &so, NULL), SMAX_STATUS_INVALID_ARGUMENT, "top_p",
                     &idx, sizeof idx);
    fill(f, 4, kSentinel);
    EXPECT_ERROR(smax_sampling_filter(&tx, &tf, &so, NULL), SMAX_STATUS_INVALID_ARGUMENT, "top_p",
                 f, 4);
  }

  /* Soft-NMS (docs/vectors.md): A = (0,0,10,10; 0.9), B = (0,5,10,15; 0.8). */
  {
    float boxes[2][4] = {{0.0f, 0.0f, 10.0f, 10.0f}, {0.0f, 5.0f, 10.0f, 15.0f}};
    float scores[2] = {0.9f, 0.8f}, kept[2];
    int64_t idx[2], count = -1;
    smax_tensor tb = f32_2d(&boxes[0][0], 2, 4), ts = f32_1d(scores, 2);
    smax_tensor tk = f32_1d(kept, 2), ti = i64_1d(idx, 2);
    smax_soft_nms_options no;
    smax_soft_nms_options_init(&no);
    CHECK(no.method == SMAX_SOFT_NMS_LINEAR && no.sigma == 0.5f && no.iou_threshold == 0.3f);
    CHECK(no.score_threshold == 0.001f && no.plus_one == 0);
    CHECK(smax_soft_nms(&tb, &ts, &ti, &tk, NULL, &count) == SMAX_STATUS_OK);
    CHECK(count == 2 && idx[0] == 0 && idx[1] == 1);
    CHECK_VEC(kept, ((double[]){0.9, 0.533333}), 2, 0.0, 1e-6);
    no.method = SMAX_SOFT_NMS_GAUSSIAN;
    CHECK(smax_soft_nms(&tb, &ts, &ti, &tk, &no, NULL) == SMAX_STATUS_OK);
    CHECK_VEC(kept, ((double[]){0.9, 0.640590}), 2, 0.0, 1e-6);
    no.plus_one = 1;
    CHECK(smax_soft_nms(&tb, &ts, &ti, &tk, &no, &count) == SMAX_STATUS_OK);
    CHECK_VEC(kept, ((double[]){0.9, 0.603872}), 2, 0.0, 1e-6);
    no.method = SMAX_SOFT_NMS_LINEAR;
    CHECK(smax_soft_nms(&tb, &ts, &ti, &tk, &no, &count) == SMAX_STATUS_OK);
    CHECK_VEC(kept, ((double[]){0.9, 0.5}), 2, 0.0, 1e-6);
    no.method = SMAX_SOFT_NMS_HARD;
    no.plus_one = 0;
    CHECK(smax_soft_nms(&tb, &ts, &ti, &tk, &no, &count) == SMAX_STATUS_OK);
    CHECK(count == 1 && idx[0] == 0 && idx[1] == -1 && kept[1] == 0.0f);
    /* Errors: unknown method, iou_threshold > 1, x2 < x1; outputs untouched. */
    count = -7;
    no.method = 7;
    fill(kept, 2, kSentinel);
    EXPECT_ERROR(smax_soft_nms(&tb, &ts, &ti, &tk, &no, &count), SMAX_STATUS_INVALID_ARGUMENT,
                 "method", kept, 2);
    CHECK(count == -7);
    smax_soft_nms_options_init(&no);
    no.iou_threshold = 2.0f;
    EXPECT_UNTOUCHED(smax_soft_nms(&tb, &ts, &ti, &tk, &no, &count), SMAX_STATUS_INVALID_ARGUMENT,
                     "iou_threshold", idx, sizeof idx);
    boxes[1][2] = -1.0f;
    EXPECT_ERROR(smax_soft_nms(&tb, &ts, &ti, &tk, NULL, &count), SMAX_STATUS_INVALID_ARGUMENT,
                 "box 1", kept, 2);
  }
}

/* ---- losses (include/smax/cross_entropy.h, linear_cross_entropy.h) ---------- */

static void test_losses(void) {
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

  /* Spherical Z-loss (docs/vectors.md, "Losses"). */
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

static void test_runtime(void) {
  const char* target = smax_active_target();
  char saved[64];
  CHECK(target != NULL && target[0] != '\0');
  strncpy(saved, target, sizeof saved - 1);
  saved[sizeof saved - 1] = '\0';
  CHECK(strcmp(smax_version(), "0.1.0") == 0);
  CHECK(smax_max_threads() >= 1);
  CHECK(smax_status_name(SMAX_STATUS_INVALID_ARGUMENT) != NULL);
  CHECK(strcmp(smax_status_name(SMAX_STATUS_OK), "ok") == 0);
  CHECK(strcmp(smax_status_name((smax_status)42), "unknown status") == 0);

  CHECK(smax_set_max_target("bogus") == SMAX_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(smax_last_error(), "bogus") != NULL);
  CHECK(strcmp(smax_active_target(), saved) == 0);
  CHECK(smax_set_max_target("sse4") == SMAX_STATUS_OK);
  CHECK(strcmp(smax_active_target(), "SSE4") == 0);
  {
    /* Ops still work on the capped target. */
    float x[3] = {0.0f, 0.0f, 0.0f}, y[3];
    int64_t s[1] = {3};
    smax_tensor a, b;
    smax_tensor_init(&a, x, SMAX_DTYPE_F32, 1, s, NULL);
    smax_tensor_init(&b, y, SMAX_DTYPE_F32, 1, s, NULL);
    CHECK(smax_softmax(&a, &b, NULL) == SMAX_STATUS_OK);
    CHECK(fabs(y[0] - 1.0 / 3.0) <= 2e-6 / 3.0);
  }
  CHECK(smax_set_max_target(NULL) == SMAX_STATUS_OK);
  /* Lifting the cap also lifts an SMAX_MAX_TARGET environment cap. */
  if (getenv("SMAX_MAX_TARGET") == NULL || getenv("SMAX_MAX_TARGET")[0] == '\0') {
    CHECK(strcmp(smax_active_target(), saved) == 0);
  }

  CHECK(smax_set_max_threads(0) == SMAX_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(smax_last_error(), "threads") != NULL);
  CHECK(smax_set_max_threads(3) == SMAX_STATUS_OK);
  CHECK(smax_max_threads() == 3);
}

/* ---- attention (include/smax/attention.h) ------------------------------------- */

/* Float64 attention of a tiny problem: B = 1, q [H][LQ][D] (element (h, i, d)
 * at q[(i * H + h) * D + d] when `q_lhd`, else q[(h * LQ + i) * D + d]),
 * k [LK][D], v [LK][DV] (one kv head shared by the H query heads: GQA),
 * optional causal, bool mask [LQ][LK], and the softmax or sigmoid (bias b)
 * normaliser. Writes out [H][LQ][DV], P [H][LQ][LK] and lse [H][LQ]. */
#define ATT_H 2
#define ATT_LQ 3
#define ATT_LK 4
#define ATT_D 2
#define ATT_DV 3
static void ref_attention(const float* q, int q_lhd, const float* k, const float* v, double scale,
                          int causal, const unsigned char* keep, int sigmoid, double b,
                          double* out, double* P, double* lse) {
  int h, i, j, c, d;
  for (h = 0; h < ATT_H; ++h) {
    for (i = 0; i < ATT_LQ; ++i) {
      double t[ATT_LK], m = -INFINITY, s = 0.0;
      double* p = P + (h * ATT_LQ + i) * ATT_LK;
      for (j = 0; j < ATT_LK; ++j) {
        double a = 0.0;
        for (d = 0; d < ATT_D; ++d) {
          const float qv = q_lhd ? q[(i * ATT_H + h) * ATT_D + d] : q[(h * ATT_LQ + i) * ATT_D + d];
          a += (double)qv * (double)k[j * ATT_D + d];
        }
        t[j] = a * scale;
        if ((causal && j > i) || (keep != NULL && keep[i * ATT_LK + j] == 0)) t[j] = -INFINITY;
        m = t[j] > m ? t[j] : m;
      }
      for (j = 0; j < ATT_LK; ++j) {
        if (sigmoid) {
          p[j] = t[j] == -INFINITY ? 0.0 : 1.0 / (1.0 + exp(-(t[j] + b)));
        } else {
          p[j] = m == -INFINITY ? 0.0 : exp(t[j] - m);
          s += p[j];
        }
      }
      if (!sigmoid) {
        for (j = 0; j < ATT_LK; ++j) p[j] = s > 0.0 ? p[j] / s : 0.0;
      }
      lse[h * ATT_LQ + i] = m == -INFINITY ? -INFINITY : m + log(s);
      for (c = 0; c < ATT_DV; ++c) {
        double o = 0.0;
        for (j = 0; j < ATT_LK; ++j) o += p[j] * (double)v[j * ATT_DV + c];
        out[(h * ATT_LQ + i) * ATT_DV + c] = o;
      }
    }
  }
}

static void test_attention_options(void) {
  smax_attention_options o;
  int32_t n = -1;
  memset(&o, 0x7f, sizeof o);
  smax_attention_options_init(&o);
  CHECK(o.struct_size == sizeof(smax_attention_options));
  CHECK(o.normalizer == SMAX_ATTENTION_SOFTMAX);
  CHECK(isnan(o.scale) && o.is_causal == 0 && o.softcap == 0.0f);
  CHECK(o.attn_mask == NULL && o.sinks == NULL && o.alibi_slopes == NULL && o.lse == NULL);
  CHECK(isnan(o.sigmoid_bias) && o.softpick_eps == 1e-6f && o.ssmax_s == 0.43f);
  CHECK(o.empty_row == SMAX_EMPTY_ROW_ZERO && o.threads == 0);
  CHECK(o.sigmoid_bias_mode == SMAX_SIGMOID_BIAS_DEFAULT && o.reserved0 == 0);
  smax_attention_options_init(NULL); /* no crash */
  CHECK(strcmp(smax_attention_normalizer_name(SMAX_ATTENTION_SOFTMAX), "softmax") == 0);
  CHECK(strcmp(smax_attention_normalizer_name(SMAX_ATTENTION_SOFTPLUS), "softplus") == 0);
  CHECK(strcmp(smax_attention_normalizer_name(6), "unknown") == 0);
  CHECK(strcmp(smax_attention_normalizer_name(-1), "unknown") == 0);
  CHECK(smax_attention_normalizer_parse("stablemax", &n) == SMAX_STATUS_OK);
  CHECK(n == SMAX_ATTENTION_STABLEMAX);
  CHECK(smax_attention_normalizer_parse("Softmax", &n) == SMAX_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(smax_last_error(), "normalizer") != NULL && n == SMAX_ATTENTION_STABLEMAX);
  CHECK(smax_attention_normalizer_parse(NULL, &n) == SMAX_STATUS_INVALID_ARGUMENT);
  CHECK(smax_attention_normalizer_parse("ssmax", NULL) == SMAX_STATUS_INVALID_ARGUMENT);
}

/* Runs once per SIMD target. */
static void test_attention(void) {
  /* q is stored [Lq][H][D] (the [B, L, H, D] layout) and viewed as
   * [B, H, Lq, D] through strides; k, v contiguous [1, 1, Lk, .]. */
  float q[ATT_LQ * ATT_H * ATT_D] = {0.5f, -1.0f, 1.5f, 0.25f, -0.75f, 2.0f,
                                     1.0f, 1.0f,  -2.0f, 0.5f, 0.125f, -0.5f};
  float k[ATT_LK * ATT_D] = {1.0f, 0.0f, 0.0f, 1.0f, -1.0f, 0.5f, 2.0f, -1.5f};
  float v[ATT_LK * ATT_DV] = {1.0f, 2.0f, 3.0f, -1.0f, 0.0f, 0.5f,
                              4.0f, -2.0f, 1.0f, 0.25f, 0.75f, -3.0f};
  float out[ATT_H * ATT_LQ * ATT_DV], lse[ATT_H * ATT_LQ];
  double want[ATT_H * ATT_LQ * ATT_DV], P[ATT_H * ATT_LQ * ATT_LK], want_lse[ATT_H * ATT_LQ];
  unsigned char keep[ATT_LQ * ATT_LK] = {1, 1, 0, 1, 0, 1, 1, 1, 0, 0, 0, 0}; /* row 2: none */
  int64_t q_shape[4] = {1, ATT_H, ATT_LQ, ATT_D};
  int64_t q_strides[4] = {ATT_LQ * ATT_H * ATT_D, ATT_D, ATT_H * ATT_D, 1};
  int64_t k_shape[4] = {1, 1, ATT_LK, ATT_D}, v_shape[4] = {1, 1, ATT_LK, ATT_DV};
  int64_t o_shape[4] = {1, ATT_H, ATT_LQ, ATT_DV}, lse_shape[3] = {1, ATT_H, ATT_LQ};
  int64_t mask_shape[2] = {ATT_LQ, ATT_LK};
  smax_tensor tq, tk, tv, to, tl, tm;
  smax_attention_options o;
  int i;
  CHECK(smax_tensor_init(&tq, q, SMAX_DTYPE_F32, 4, q_shape, q_strides) == SMAX_STATUS_OK);
  CHECK(smax_tensor_init(&tk, k, SMAX_DTYPE_F32, 4, k_shape, NULL) == SMAX_STATUS_OK);
  CHECK(smax_tensor_init(&tv, v, SMAX_DTYPE_F32, 4, v_shape, NULL) == SMAX_STATUS_OK);
  CHECK(smax_tensor_init(&to, out, SMAX_DTYPE_F32, 4, o_shape, NULL) == SMAX_STATUS_OK);
  CHECK(smax_tensor_init(&tl, lse, SMAX_DTYPE_F32, 3, lse_shape, NULL) == SMAX_STATUS_OK);
  CHECK(smax_tensor_init(&tm, keep, SMAX_DTYPE_BOOL, 2, mask_shape, NULL) == SMAX_STATUS_OK);

  /* Defaults (NULL params): softmax, scale 1/sqrt(2), GQA over 2 heads. */
  fill(out, ATT_H * ATT_LQ * ATT_DV, kSentinel);
  CHECK(smax_attention(&tq, &tk, &tv, &to, NULL) == SMAX_STATUS_OK);
  CHECK(strcmp(smax_last_error(), "") == 0);
  ref_attention(q, 1, k, v, (double)(float)(1.0 / sqrt(2.0)), 0, NULL, 0, 0.0, want, P, want_lse);
  CHECK_VEC(out, want, ATT_H * ATT_LQ * ATT_DV, 1e-5, 1e-6);

  /* Causal + bool mask (row 2 fully masked: out 0, lse -inf), scale 1, lse out. */
  smax_attention_options_init(&o);
  o.scale = 1.0f;
  o.is_causal = 1;
  o.attn_mask = &tm;
  o.lse = &tl;
  o.threads = 2;
  fill(out, ATT_H * ATT_LQ * ATT_DV, kSentinel);
  fill(lse, ATT_H * ATT_LQ, kSentinel);
  CHECK(smax_attention(&tq, &tk, &tv, &to, &o) == SMAX_STATUS_OK);
  ref_attention(q, 1, k, v, 1.0, 1, keep, 0, 0.0, want, P, want_lse);
  CHECK_VEC(out, want, ATT_H * ATT_LQ * ATT_DV, 1e-5, 1e-6);
  CHECK_VEC(lse, want_lse, ATT_H * ATT_LQ, 1e-6, 1e-6);
  for (i = 0; i < ATT_DV; ++i) CHECK(out[(0 * ATT_LQ + 2) * ATT_DV + i] == 0.0f);
  CHECK(lse[2] == -INFINITY && lse[ATT_LQ + 2] == -INFINITY);
  /* ... and empty_row NAN: the masked rows become NaN. */
  o.empty_row = SMAX_EMPTY_ROW_NAN;
  CHECK(smax_attention(&tq, &tk, &tv, &to, &o) == SMAX_STATUS_OK);
  CHECK(isnan(out[2 * ATT_DV]) && isnan(lse[2]) && !isnan(out[0]));
  o.empty_row = SMAX_EMPTY_ROW_ZERO;

  /* Sigmoid with a fixed bias 0: out = sum_j sigmoid(t_j) v_j (no normalisation). */
  smax_attention_options_init(&o);
  o.normalizer = SMAX_ATTENTION_SIGMOID;
  o.scale = 0.5f;
  o.sigmoid_bias = 0.0f;
  fill(out, ATT_H * ATT_LQ * ATT_DV, kSentinel);
  CHECK(smax_attention(&tq, &tk, &tv, &to, &o) == SMAX_STATUS_OK);
  ref_attention(q, 1, k, v, 0.5, 0, NULL, 1, 0.0, want, P, want_lse);
  CHECK_VEC(out, want, ATT_H * ATT_LQ * ATT_DV, 1e-5, 1e-6);

  /* Sigmoid, causal, default bias: one b = -ln Lk for every row (row 0 too,
   * which sees one key); sigmoid_bias_mode checked (unknown value: invalid;
   * reserved0 set: unsupported, nothing written). */
  smax_attention_options_init(&o);
  o.normalizer = SMAX_ATTENTION_SIGMOID;
  o.scale = 0.5f;
  o.is_causal = 1;
  fill(out, ATT_H * ATT_LQ * ATT_DV, kSentinel);
  CHECK(smax_attention(&tq, &tk, &tv, &to, &o) == SMAX_STATUS_OK);
  ref_attention(q, 1, k, v, 0.5, 1, NULL, 1, -log((double)ATT_LK), want, P, want_lse);
  CHECK_VEC(out, want, ATT_H * ATT_LQ * ATT_DV, 1e-5, 1e-6);
  /* The explicit PER_SEQUENCE mode, and a version 0.1 struct (struct_size
   * stops before sigmoid_bias_mode; the byte there is ignored), give the
   * same default. */
  o.sigmoid_bias_mode = SMAX_SIGMOID_BIAS_PER_SEQUENCE;
  fill(out, ATT_H * ATT_LQ * ATT_DV, kSentinel);
  CHECK(smax_attention(&tq, &tk, &tv, &to, &o) == SMAX_STATUS_OK);
  CHECK_VEC(out, want, ATT_H * ATT_LQ * ATT_DV, 1e-5, 1e-6);
  o.struct_size = (uint32_t)offsetof(smax_attention_options, sigmoid_bias_mode);
  o.sigmoid_bias_mode = 77;
  fill(out, ATT_H * ATT_LQ * ATT_DV, kSentinel);
  CHECK(smax_attention(&tq, &tk, &tv, &to, &o) == SMAX_STATUS_OK);
  CHECK_VEC(out, want, ATT_H * ATT_LQ * ATT_DV, 1e-5, 1e-6);
  o.struct_size = (uint32_t)offsetof(smax_attention_options, sigmoid_bias_mode) - 4;
  CHECK(smax_attention(&tq, &tk, &tv, &to, &o) == SMAX_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(smax_last_error(), "version 0.1") != NULL);
  o.struct_size = (uint32_t)sizeof(smax_attention_options);
  o.sigmoid_bias_mode = 3;
  fill(out, ATT_H * ATT_LQ * ATT_DV, kSentinel);
  CHECK(smax_attention(&tq, &tk, &tv, &to, &o) == SMAX_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(smax_last_error(), "sigmoid_bias_mode") != NULL && out[0] == kSentinel);
  o.sigmoid_bias_mode = SMAX_SIGMOID_BIAS_PER_ROW_VISIBLE;
  o.reserved0 = 1;
  CHECK(smax_attention(&tq, &tk, &tv, &to, &o) == SMAX_STATUS_UNSUPPORTED);
  CHECK(strstr(smax_last_error(), "reserved0") != NULL && out[0] == kSentinel);

  /* Every normaliser runs through the ABI (finite output). */
  {
    int32_t nz;
    for (nz = SMAX_ATTENTION_SOFTMAX; nz <= SMAX_ATTENTION_SOFTPLUS; ++nz) {
      smax_attention_options_init(&o);
      o.normalizer = nz;
      o.is_causal = 1;
      fill(out, ATT_H * ATT_LQ * ATT_DV, kSentinel);
      CHECK(smax_attention(&tq, &tk, &tv, &to, &o) == SMAX_STATUS_OK);
      for (i = 0; i < ATT_H * ATT_LQ * ATT_DV; ++i) CHECK(isfinite(out[i]) && out[i] != kSentinel);
    }
  }

  /* Backward, softmax, causal, scale 0.75: the chain rule in double.
   * dV = P^T dO (summed over the 2 query heads), dP = dO V^T,
   * dT = P (dP - <dP, P>), dQ = scale dT K, dK = scale sum_h dT^T Q. */
  {
    float dout[ATT_H * ATT_LQ * ATT_DV], dq[ATT_H * ATT_LQ * ATT_D], dk[ATT_LK * ATT_D],
        dv[ATT_LK * ATT_DV];
    double wdq[ATT_H * ATT_LQ * ATT_D], wdk[ATT_LK * ATT_D], wdv[ATT_LK * ATT_DV];
    int64_t dq_shape[4] = {1, ATT_H, ATT_LQ, ATT_D};
    smax_tensor tdo, tdq, tdk, tdv;
    int h, j, c, d;
    const double scale = 0.75;
    for (i = 0; i < ATT_H * ATT_LQ * ATT_DV; ++i) dout[i] = (float)((i % 5) - 2) * 0.5f + 0.125f;
    CHECK(smax_tensor_init(&tdo, dout, SMAX_DTYPE_F32, 4, o_shape, NULL) == SMAX_STATUS_OK);
    CHECK(smax_tensor_init(&tdq, dq, SMAX_DTYPE_F32, 4, dq_shape, NULL) == SMAX_STATUS_OK);
    CHECK(smax_tensor_init(&tdk, dk, SMAX_DTYPE_F32, 4, k_shape, NULL) == SMAX_STATUS_OK);
    CHECK(smax_tensor_init(&tdv, dv, SMAX_DTYPE_F32, 4, v_shape, NULL) == SMAX_STATUS_OK);
    smax_attention_options_init(&o);
    o.scale = (float)scale;
    o.is_causal = 1;
    CHECK(smax_attention(&tq, &tk, &tv, &to, &o) == SMAX_STATUS_OK);
    ref_attention(q, 1, k, v, scale, 1, NULL, 0, 0.0, want, P, want_lse);
    memset(wdq, 0, sizeof wdq);
    memset(wdk, 0, sizeof wdk);
    memset(wdv, 0, sizeof wdv);
    for (h = 0; h < ATT_H; ++h) {
      for (i = 0; i < ATT_LQ; ++i) {
        const double* p = P + (h * ATT_LQ + i) * ATT_LK;
        const float* g = dout + (h * ATT_LQ + i) * ATT_DV;
        double dp[ATT_LK], dot = 0.0;
        for (j = 0; j < ATT_LK; ++j) {
          dp[j] = 0.0;
          for (c = 0; c < ATT_DV; ++c) {
            dp[j] += (double)g[c] * (double)v[j * ATT_DV + c];
            wdv[j * ATT_DV + c] += p[j] * (double)g[c];
          }
          dot += dp[j] * p[j];
        }
        for (j = 0; j < ATT_LK; ++j) {
          const double dt = p[j] * (dp[j] - dot);
          for (d = 0; d < ATT_D; ++d) {
            wdq[(h * ATT_LQ + i) * ATT_D + d] += scale * dt * (double)k[j * ATT_D + d];
            wdk[j * ATT_D + d] += scale * dt * (double)q[(i * ATT_H + h) * ATT_D + d];
          }
        }
      }
    }
    fill(dq, ATT_H * ATT_LQ * ATT_D, kSentinel);
    fill(dk, ATT_LK * ATT_D, kSentinel);
    fill(dv, ATT_LK * ATT_DV, kSentinel);
    CHECK(smax_attention_backward(&tq, &tk, &tv, &to, &tdo, &tdq, &tdk, &tdv, &o) ==
          SMAX_STATUS_OK);
    CHECK_VEC(dq, wdq, ATT_H * ATT_LQ * ATT_D, 1e-5, 1e-6);
    CHECK_VEC(dk, wdk, ATT_LK * ATT_D, 1e-5, 1e-6);
    CHECK_VEC(dv, wdv, ATT_LK * ATT_DV, 1e-5, 1e-6);
    /* Key 3 is causally masked for every query row (Lq = 3): exact zeros. */
    for (d = 0; d < ATT_D; ++d) CHECK(dk[3 * ATT_D + d] == 0.0f);
    for (c = 0; c < ATT_DV; ++c) CHECK(dv[3 * ATT_DV + c] == 0.0f);

    /* Backward error paths: every gradient untouched. */
    fill(dq, ATT_H * ATT_LQ * ATT_D, kSentinel);
    fill(dk, ATT_LK * ATT_D, kSentinel);
    fill(dv, ATT_LK * ATT_DV, kSentinel);
    EXPECT_ERROR(smax_attention_backward(&tq, &tk, &tv, &to, &tdo, &tdq, &tdk, NULL,
                                         &o),
                 SMAX_STATUS_INVALID_ARGUMENT, "dv", dq, ATT_H * ATT_LQ * ATT_D);
    EXPECT_ERROR(smax_attention_backward(&tq, &tk, &tv, &to, &tdo, &tdq, &tdq, &tdv, &o),
                 SMAX_STATUS_INVALID_ARGUMENT, "dk", dq, ATT_H * ATT_LQ * ATT_D);
    CHECK(all_equal(dv, ATT_LK * ATT_DV, kSentinel));
    EXPECT_ERROR(smax_attention_backward(&tq, &tk, &tv, &to, &tdq, &tdq, &tdk, &tdv, &o),
                 SMAX_STATUS_INVALID_ARGUMENT, "dout", dk, ATT_LK * ATT_D);
    CHECK(all_equal(dv, ATT_LK * ATT_DV, kSentinel));
    /* dq aliasing q */
    EXPECT_ERROR(smax_attention_backward(&tq, &tk, &tv, &to, &tdo, &tq, &tdk, &tdv, &o),
                 SMAX_STATUS_INVALID_ARGUMENT, "attention_backward", dk, ATT_LK * ATT_D);
    CHECK(all_equal(dv, ATT_LK * ATT_DV, kSentinel));
  }

  /* Forward error paths: out (and lse) untouched. */
  {
    int64_t bad_shape[4] = {1, 1, ATT_LK + 1, ATT_DV};
    smax_tensor bad_v;
    CHECK(smax_tensor_init(&bad_v, v, SMAX_DTYPE_F32, 4, bad_shape, NULL) == SMAX_STATUS_OK);
    fill(out, ATT_H * ATT_LQ * ATT_DV, kSentinel);
    fill(lse, ATT_H * ATT_LQ, kSentinel);
    EXPECT_ERROR(smax_attention(&tq, &tk, &bad_v, &to, NULL), SMAX_STATUS_INVALID_ARGUMENT,
                 "v must be", out, ATT_H * ATT_LQ * ATT_DV);
    EXPECT_ERROR(smax_attention(NULL, &tk, &tv, &to, NULL), SMAX_STATUS_INVALID_ARGUMENT, "q",
                 out, ATT_H * ATT_LQ * ATT_DV);
    EXPECT_ERROR(smax_attention(&tq, &tk, &tv, &tq, NULL), SMAX_STATUS_INVALID_ARGUMENT, "out",
                 out, ATT_H * ATT_LQ * ATT_DV);
    smax_attention_options_init(&o);
    o.normalizer = 6;
    EXPECT_ERROR(smax_attention(&tq, &tk, &tv, &to, &o), SMAX_STATUS_INVALID_ARGUMENT,
                 "params.normalizer has unknown value 6", out, ATT_H * ATT_LQ * ATT_DV);
    smax_attention_options_init(&o);
    o.is_causal = 2;
    EXPECT_ERROR(smax_attention(&tq, &tk, &tv, &to, &o), SMAX_STATUS_INVALID_ARGUMENT,
                 "params.is_causal", out, ATT_H * ATT_LQ * ATT_DV);
    smax_attention_options_init(&o);
    o.empty_row = 2;
    EXPECT_ERROR(smax_attention(&tq, &tk, &tv, &to, &o), SMAX_STATUS_INVALID_ARGUMENT,
                 "params.empty_row", out, ATT_H * ATT_LQ * ATT_DV);
    smax_attention_options_init(&o);
    o.softcap = -1.0f;
    EXPECT_ERROR(smax_attention(&tq, &tk, &tv, &to, &o), SMAX_STATUS_INVALID_ARGUMENT, "softcap",
                 out, ATT_H * ATT_LQ * ATT_DV);
    smax_attention_options_init(&o);
    o.scale = INFINITY;
    EXPECT_ERROR(smax_attention(&tq, &tk, &tv, &to, &o), SMAX_STATUS_INVALID_ARGUMENT, "scale",
                 out, ATT_H * ATT_LQ * ATT_DV);
    smax_attention_options_init(&o);
    o.threads = -1;
    EXPECT_ERROR(smax_attention(&tq, &tk, &tv, &to, &o), SMAX_STATUS_INVALID_ARGUMENT, "threads",
                 out, ATT_H * ATT_LQ * ATT_DV);
    /* lse / sinks with a non-softmax normaliser; lse untouched too. */
    smax_attention_options_init(&o);
    o.normalizer = SMAX_ATTENTION_SIGMOID;
    o.lse = &tl;
    EXPECT_ERROR(smax_attention(&tq, &tk, &tv, &to, &o), SMAX_STATUS_INVALID_ARGUMENT, "lse", out,
                 ATT_H * ATT_LQ * ATT_DV);
    CHECK(all_equal(lse, ATT_H * ATT_LQ, kSentinel));
    /* A mask that does not broadcast to [B, H, Lq, Lk]. */
    {
      int64_t bad_mask_shape[2] = {ATT_LK, ATT_LQ};
      smax_tensor bm;
      CHECK(smax_tensor_init(&bm, keep, SMAX_DTYPE_BOOL, 2, bad_mask_shape, NULL) ==
            SMAX_STATUS_OK);
      smax_attention_options_init(&o);
      o.attn_mask = &bm;
      o.lse = &tl;
      EXPECT_ERROR(smax_attention(&tq, &tk, &tv, &to, &o), SMAX_STATUS_INVALID_ARGUMENT,
                   "attn_mask", out, ATT_H * ATT_LQ * ATT_DV);
      CHECK(all_equal(lse, ATT_H * ATT_LQ, kSentinel));
    }
    /* struct_size: smaller rejected, larger with a zero tail accepted, with a
     * non-zero tail UNSUPPORTED. */
    {
      struct {
        smax_attention_options o;
        unsigned char tail[16];
      } big;
      memset(&big, 0, sizeof big);
      smax_attention_options_init(&big.o);
      big.o.struct_size = sizeof big;
      CHECK(smax_attention(&tq, &tk, &tv, &to, &big.o) == SMAX_STATUS_OK);
      fill(out, ATT_H * ATT_LQ * ATT_DV, kSentinel);
      big.tail[3] = 1;
      EXPECT_ERROR(smax_attention(&tq, &tk, &tv, &to, &big.o), SMAX_STATUS_UNSUPPORTED,
                   "smax_attention_options", out, ATT_H * ATT_LQ * ATT_DV);
      big.o.struct_size = 4;
      EXPECT_ERROR(smax_attention(&tq, &tk, &tv, &to, &big.o), SMAX_STATUS_INVALID_ARGUMENT,
                   "params.struct_size 4", out, ATT_H * ATT_LQ * ATT_DV);
    }
  }
}

int main(void) {
  test_options_init();
  test_forward_ops();
  test_strides_masks_specials();
  test_backward_ops();
  test_errors();
  test_struct_versions();
  test_every_function_links();
  test_attention_options();
  {
    /* The op suites once per compiled SIMD target (capped through the ABI;
     * caps that resolve to a target already run are skipped). */
    static const char* const kCaps[] = {"", "avx3", "avx2", "sse4", "ssse3", "scalar"};
    char done[8][32];
    int n_done = 0, c, d, seen;
    for (c = 0; c < (int)(sizeof kCaps / sizeof kCaps[0]); ++c) {
      if (smax_set_max_target(kCaps[c]) != SMAX_STATUS_OK) continue; /* not compiled */
      for (seen = 0, d = 0; d < n_done; ++d) seen |= strcmp(done[d], smax_active_target()) == 0;
      if (seen) continue;
      strncpy(done[n_done], smax_active_target(), sizeof done[0] - 1);
      done[n_done][sizeof done[0] - 1] = '\0';
      printf("c_api_test: ops on %s\n", done[n_done]);
      ++n_done;
      test_sparse();
      test_rescaled();
      test_reweight();
      test_sampling();
      test_losses();
      test_attention();
    }
    CHECK(n_done >= 1);
    CHECK(smax_set_max_target(NULL) == SMAX_STATUS_OK);
  }
  test_runtime();
  if (g_failures != 0) {
    fprintf(stderr, "c_api_test: %d of %d checks failed\n", g_failures, g_checks);
    return 1;
  }
  printf("c_api_test: all %d checks passed\n", g_checks);
  return 0;
}
