/* tests/c_api/sampling.c: the C ABI test of sampling (include/smax/sampling.h). */
#include "util.h"

/* ---- sampling (include/smax/sampling.h) --------------------------------------- */

void test_sampling(void) {
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

  /* C ABI 0.6: min_p, min_tokens_to_keep, top_k_ties; a 0.5 struct (32 bytes). */
  {
    float x[6] = {5.0f, 3.0f, 3.0f, 1.0f, 3.0f, 0.0f}, f[6];
    int64_t idx = -5;
    smax_tensor tx = f32_1d(x, 6), tf = f32_1d(f, 6), ti = i64_1d(&idx, 1);
    smax_sample_options so;
    smax_sample_options_init(&so);
    CHECK(so.struct_size == 48 && so.min_p == 0.0f && so.min_tokens_to_keep == 1 &&
          so.top_k_ties == SMAX_TOP_K_TIES_EXACT && so.reserved0 == 0);
    so.top_k = 2; /* exact: {0, 1}; keep: every 3 -> {0, 1, 2, 4} */
    CHECK(smax_sampling_filter(&tx, &tf, &so, NULL) == SMAX_STATUS_OK);
    CHECK(f[0] == 5.0f && f[1] == 3.0f && isinf(f[2]) && isinf(f[3]) && isinf(f[4]) &&
          isinf(f[5]));
    so.top_k_ties = SMAX_TOP_K_TIES_KEEP;
    CHECK(smax_sampling_filter(&tx, &tf, &so, NULL) == SMAX_STATUS_OK);
    CHECK(f[0] == 5.0f && f[1] == 3.0f && f[2] == 3.0f && isinf(f[3]) && f[4] == 3.0f &&
          isinf(f[5]));
    /* min_p = 1 keeps the max only; min_tokens_to_keep = 2 adds index 1. */
    smax_sample_options_init(&so);
    so.min_p = 1.0f;
    CHECK(smax_sampling_filter(&tx, &tf, &so, NULL) == SMAX_STATUS_OK);
    CHECK(f[0] == 5.0f && isinf(f[1]) && isinf(f[2]) && isinf(f[4]));
    CHECK(smax_sample(&tx, &ti, &so, NULL) == SMAX_STATUS_OK && idx == 0);
    so.min_tokens_to_keep = 2;
    CHECK(smax_sampling_filter(&tx, &tf, &so, NULL) == SMAX_STATUS_OK);
    CHECK(f[0] == 5.0f && f[1] == 3.0f && isinf(f[2]) && isinf(f[4]));
    /* A 0.5 caller: struct_size 32, the new fields are not read. */
    so.struct_size = 32;
    CHECK(smax_sampling_filter(&tx, &tf, &so, NULL) == SMAX_STATUS_OK);
    CHECK(f[0] == 5.0f && f[1] == 3.0f && f[2] == 3.0f && f[3] == 1.0f && f[5] == 0.0f);
    so.struct_size = 28;
    fill(f, 6, kSentinel);
    EXPECT_ERROR(smax_sampling_filter(&tx, &tf, &so, NULL), SMAX_STATUS_INVALID_ARGUMENT,
                 "struct_size", f, 6);
    /* Bad values: invalid argument naming the field; nothing written. */
    smax_sample_options_init(&so);
    so.min_p = 1.5f;
    fill(f, 6, kSentinel);
    EXPECT_ERROR(smax_sampling_filter(&tx, &tf, &so, NULL), SMAX_STATUS_INVALID_ARGUMENT,
                 "min_p", f, 6);
    so.min_p = NAN;
    idx = -5;
    EXPECT_UNTOUCHED(smax_sample(&tx, &ti, &so, NULL), SMAX_STATUS_INVALID_ARGUMENT, "min_p",
                     &idx, sizeof idx);
    smax_sample_options_init(&so);
    so.min_tokens_to_keep = -1;
    EXPECT_ERROR(smax_sampling_filter(&tx, &tf, &so, NULL), SMAX_STATUS_INVALID_ARGUMENT,
                 "min_tokens_to_keep", f, 6);
    smax_sample_options_init(&so);
    so.top_k_ties = 2;
    EXPECT_ERROR(smax_sampling_filter(&tx, &tf, &so, NULL), SMAX_STATUS_INVALID_ARGUMENT,
                 "top_k_ties", f, 6);
    smax_sample_options_init(&so);
    so.reserved0 = 1;
    EXPECT_ERROR(smax_sampling_filter(&tx, &tf, &so, NULL), SMAX_STATUS_UNSUPPORTED,
                 "reserved0", f, 6);
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
