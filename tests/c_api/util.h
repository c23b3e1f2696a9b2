/* tests/c_api/util.h: shared helpers of the C ABI test (one .c file per
 * public header in tests/c_api, main.c runs them), compiled as C99: the
 * CHECK counters, tolerance checks, error expectations (status, a message
 * naming the argument, outputs untouched) and tensor descriptors. Failure
 * messages name the file and line of the check.
 */
#ifndef SMAX_TESTS_C_API_UTIL_H
#define SMAX_TESTS_C_API_UTIL_H
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "smax/c/smax.h"

/* Check counters (defined in main.c). */
extern int g_failures;
extern int g_checks;

#define CHECK(cond)                                                         \
  do {                                                                      \
    ++g_checks;                                                             \
    if (!(cond)) {                                                          \
      ++g_failures;                                                         \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                       \
  } while (0)

/* |got - want| <= tol * (1 + |want|) for finite values; exact for specials. */
static inline int close_to(double got, double want, double tol) {
  if (isnan(want)) return isnan(got);
  if (isinf(want)) return got == want;
  return fabs(got - want) <= tol * (1.0 + fabs(want));
}

static inline void ref_softmax(const double* x, int n, double* y) {
  double m = -INFINITY, s = 0.0;
  int i;
  for (i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  for (i = 0; i < n; ++i) s += exp(x[i] - m);
  for (i = 0; i < n; ++i) y[i] = exp(x[i] - m) / s;
}

static const float kSentinel = -12345.0f;

static inline void fill(float* p, int n, float v) {
  int i;
  for (i = 0; i < n; ++i) p[i] = v;
}

static inline int all_equal(const float* p, int n, float v) {
  int i;
  for (i = 0; i < n; ++i) {
    if (memcmp(&p[i], &v, sizeof v) != 0) return 0;
  }
  return 1;
}

/* Expects status `want`, a message containing `needle`, and dst untouched. */
static inline void expect_error(smax_status got, smax_status want, const char* needle, const float* dst,
                         int n, const char* file, int line) {
  const char* msg = smax_last_error();
  ++g_checks;
  if (got != want || msg == NULL || strstr(msg, needle) == NULL || !all_equal(dst, n, kSentinel)) {
    ++g_failures;
    fprintf(stderr, "%s:%d: expected status %d (%s) with \"%s\", got %d (%s): \"%s\"%s\n",
            file, line, (int)want, smax_status_name(want), needle, (int)got, smax_status_name(got),
            msg ? msg : "(null)", all_equal(dst, n, kSentinel) ? "" : " and dst was written");
  }
}
#define EXPECT_ERROR(call, want, needle, dst, n) \
  expect_error((call), (want), (needle), (dst), (n), __FILE__, __LINE__)

/* ---- helpers for the ops beyond the softmax family ------------------------ */

static inline smax_tensor f32_1d(float* p, int64_t n) {
  smax_tensor t;
  int64_t shape[1];
  shape[0] = n;
  smax_tensor_init(&t, p, SMAX_DTYPE_F32, 1, shape, NULL);
  return t;
}

static inline smax_tensor f32_2d(float* p, int64_t rows, int64_t cols) {
  smax_tensor t;
  int64_t shape[2];
  shape[0] = rows;
  shape[1] = cols;
  smax_tensor_init(&t, p, SMAX_DTYPE_F32, 2, shape, NULL);
  return t;
}

static inline smax_tensor f32_scalar(float* p) {
  smax_tensor t;
  smax_tensor_init(&t, p, SMAX_DTYPE_F32, 0, NULL, NULL);
  return t;
}

static inline smax_tensor i64_1d(int64_t* p, int64_t n) {
  smax_tensor t;
  int64_t shape[1];
  shape[0] = n;
  smax_tensor_init(&t, p, SMAX_DTYPE_I64, 1, shape, NULL);
  return t;
}

/* Every got[i] within atol + rtol * |want[i]| of want[i] (NaN / inf exact). */
static inline void check_vec(const float* got, const double* want, int n, double rtol, double atol,
                      const char* file, int line) {
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
      fprintf(stderr, "%s:%d: element %d: got %.9g, want %.9g\n", file, line, i, got[i],
              want[i]);
    }
  }
}
#define CHECK_VEC(got, want, n, rtol, atol) check_vec((got), (want), (n), (rtol), (atol), __FILE__, __LINE__)
/* Hand vectors of docs/vectors.md: 7 decimals, O(1) values. */
#define CHECK_HAND(got, want, n) check_vec((got), (want), (n), 0.0, 1e-6, __FILE__, __LINE__)

/* Expects status `want`, a message containing `needle`, and `bytes` bytes at
 * `buf` unchanged (compared with a snapshot taken before the call). */
static inline void expect_untouched(smax_status got, smax_status want, const char* needle,
                             const unsigned char* snapshot, const void* buf, size_t bytes,
                             const char* file, int line) {
  const char* msg = smax_last_error();
  const int same = memcmp(snapshot, buf, bytes) == 0;
  ++g_checks;
  if (got != want || msg == NULL || strstr(msg, needle) == NULL || !same) {
    ++g_failures;
    fprintf(stderr, "%s:%d: expected status %d (%s) with \"%s\", got %d (%s): \"%s\"%s\n",
            file, line, (int)want, smax_status_name(want), needle, (int)got, smax_status_name(got),
            msg ? msg : "(null)", same ? "" : " and an output was written");
  }
}
#define EXPECT_UNTOUCHED(call, want, needle, buf, bytes)                          \
  do {                                                                          \
    unsigned char snapshot_[1024];                                              \
    CHECK((bytes) <= sizeof snapshot_);                                         \
    memcpy(snapshot_, (buf), (bytes));                                          \
    expect_untouched((call), (want), (needle), snapshot_, (buf), (bytes), __FILE__, __LINE__); \
  } while (0)

static inline double dot_fd(const float* a, const float* b, int n) {
  double s = 0.0;
  int i;
  for (i = 0; i < n; ++i) s += (double)a[i] * (double)b[i];
  return s;
}

static inline double lse_d(const double* x, int n) {
  double m = -INFINITY, s = 0.0;
  int i;
  for (i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  for (i = 0; i < n; ++i) s += exp(x[i] - m);
  return m + log(s);
}

/* The test functions, one group per public header (tests/c_api/<header>.c). */
void test_options_init(void);
void test_forward_ops(void);
void test_strides_masks_specials(void);
void test_backward_ops(void);
void test_errors(void);
void test_struct_versions(void);
void test_every_function_links(void);
void test_runtime(void);
void test_sparse(void);
void test_rescaled(void);
void test_reweight(void);
void test_sampling(void);
void test_losses(void);
void test_attention_options(void);
void test_attention(void);

#endif  /* SMAX_TESTS_C_API_UTIL_H */
