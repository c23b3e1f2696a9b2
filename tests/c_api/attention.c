/* tests/c_api/attention.c: the C ABI test of attention (include/smax/attention.h). */
#include "util.h"

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

void test_attention_options(void) {
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
  CHECK(o.power_p == 2 && o.reserved1 == 0);
  smax_attention_options_init(NULL); /* no crash */
  CHECK(strcmp(smax_attention_normalizer_name(SMAX_ATTENTION_SOFTMAX), "softmax") == 0);
  CHECK(strcmp(smax_attention_normalizer_name(SMAX_ATTENTION_SOFTPLUS), "softplus") == 0);
  CHECK(strcmp(smax_attention_normalizer_name(SMAX_ATTENTION_POWER), "power") == 0);
  CHECK(strcmp(smax_attention_normalizer_name(7), "unknown") == 0);
  CHECK(strcmp(smax_attention_normalizer_name(-1), "unknown") == 0);
  CHECK(smax_attention_normalizer_parse("stablemax", &n) == SMAX_STATUS_OK);
  CHECK(n == SMAX_ATTENTION_STABLEMAX);
  CHECK(smax_attention_normalizer_parse("Softmax", &n) == SMAX_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(smax_last_error(), "normalizer") != NULL && n == SMAX_ATTENTION_STABLEMAX);
  CHECK(smax_attention_normalizer_parse(NULL, &n) == SMAX_STATUS_INVALID_ARGUMENT);
  CHECK(smax_attention_normalizer_parse("ssmax", NULL) == SMAX_STATUS_INVALID_ARGUMENT);
}

/* Runs once per SIMD target. */
void test_attention(void) {
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

  /* A paged KV cache with a length (version 0.3 fields): keys 0..3 live in
   * pages {2, 0} of a pool of 3 pages of 2 keys ([3, 1, 2, D]); the sequence
   * holds 3 keys, so key 3 is never read (its page slot holds NaN) and the
   * result is the contiguous problem with key 3 masked. A version 0.2
   * struct (struct_size before cache_seqlens) does not see the fields. */
  {
    float kp[3 * 2 * ATT_D], vp[3 * 2 * ATT_DV];
    int32_t table[2] = {2, 0}, lens[1] = {3};
    int64_t kp_shape[4] = {3, 1, 2, ATT_D}, vp_shape[4] = {3, 1, 2, ATT_DV};
    int64_t table_shape[2] = {1, 2}, lens_shape[1] = {1};
    unsigned char first3[ATT_LQ * ATT_LK];
    smax_tensor tkp, tvp, ttable, tlens;
    int j, c;
    fill(kp, 3 * 2 * ATT_D, NAN);
    fill(vp, 3 * 2 * ATT_DV, NAN);
    for (j = 0; j < 3; ++j) { /* key j: page table[j / 2], row j % 2 */
      for (c = 0; c < ATT_D; ++c) kp[(table[j / 2] * 2 + j % 2) * ATT_D + c] = k[j * ATT_D + c];
      for (c = 0; c < ATT_DV; ++c) vp[(table[j / 2] * 2 + j % 2) * ATT_DV + c] = v[j * ATT_DV + c];
    }
    for (i = 0; i < ATT_LQ * ATT_LK; ++i) first3[i] = (unsigned char)(i % ATT_LK < 3);
    CHECK(smax_tensor_init(&tkp, kp, SMAX_DTYPE_F32, 4, kp_shape, NULL) == SMAX_STATUS_OK);
    CHECK(smax_tensor_init(&tvp, vp, SMAX_DTYPE_F32, 4, vp_shape, NULL) == SMAX_STATUS_OK);
    CHECK(smax_tensor_init(&ttable, table, SMAX_DTYPE_I32, 2, table_shape, NULL) == SMAX_STATUS_OK);
    CHECK(smax_tensor_init(&tlens, lens, SMAX_DTYPE_I32, 1, lens_shape, NULL) == SMAX_STATUS_OK);
    smax_attention_options_init(&o);
    CHECK(o.cache_seqlens == NULL && o.block_table == NULL);
    o.cache_seqlens = &tlens;
    o.block_table = &ttable;
    fill(out, ATT_H * ATT_LQ * ATT_DV, kSentinel);
    CHECK(smax_attention(&tq, &tkp, &tvp, &to, &o) == SMAX_STATUS_OK);
    ref_attention(q, 1, k, v, (double)(float)(1.0 / sqrt(2.0)), 0, first3, 0, 0.0, want, P,
                  want_lse);
    CHECK_VEC(out, want, ATT_H * ATT_LQ * ATT_DV, 1e-5, 1e-6);
    /* A page index outside the pool: invalid, nothing written. */
    table[1] = 3;
    fill(out, ATT_H * ATT_LQ * ATT_DV, kSentinel);
    CHECK(smax_attention(&tq, &tkp, &tvp, &to, &o) == SMAX_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(smax_last_error(), "block_table[0, 1]") != NULL && out[0] == kSentinel);
    table[1] = 0;
    /* Version 0.2: the pool is read as [B = 3, ...] and fails on the batch. */
    o.struct_size = (uint32_t)offsetof(smax_attention_options, cache_seqlens);
    CHECK(smax_attention(&tq, &tkp, &tvp, &to, &o) == SMAX_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(smax_last_error(), "batch sizes differ") != NULL);
  }

  /* Gated attention through the ABI: a head-wise gate [1, H, LQ, 1]; out =
   * sigmoid(g) * the ungated output, which ungated_out receives. */
  {
    float gate[ATT_H * ATT_LQ], ungated[ATT_H * ATT_LQ * ATT_DV];
    int64_t g_shape[4] = {1, ATT_H, ATT_LQ, 1};
    smax_tensor tg, tu;
    int j;
    for (i = 0; i < ATT_H * ATT_LQ; ++i) gate[i] = (float)i * 0.75f - 2.0f;
    CHECK(smax_tensor_init(&tg, gate, SMAX_DTYPE_F32, 4, g_shape, NULL) == SMAX_STATUS_OK);
    CHECK(smax_tensor_init(&tu, ungated, SMAX_DTYPE_F32, 4, o_shape, NULL) == SMAX_STATUS_OK);
    smax_attention_options_init(&o);
    CHECK(o.gate == NULL && o.ungated_out == NULL && o.dgate == NULL);
    CHECK(o.has_unified_max == 0 && o.unified_max == 0.0f && o.dattn_mask == NULL);
    o.gate = &tg;
    o.ungated_out = &tu;
    fill(out, ATT_H * ATT_LQ * ATT_DV, kSentinel);
    CHECK(smax_attention(&tq, &tk, &tv, &to, &o) == SMAX_STATUS_OK);
    ref_attention(q, 1, k, v, (double)(float)(1.0 / sqrt(2.0)), 0, NULL, 0, 0.0, want, P, want_lse);
    CHECK_VEC(ungated, want, ATT_H * ATT_LQ * ATT_DV, 1e-5, 1e-6);
    for (i = 0; i < ATT_H * ATT_LQ; ++i) {
      for (j = 0; j < ATT_DV; ++j) want[i * ATT_DV + j] *= 1.0 / (1.0 + exp(-(double)gate[i]));
    }
    CHECK_VEC(out, want, ATT_H * ATT_LQ * ATT_DV, 1e-5, 1e-6);
    /* The unified max through the ABI: the same output within the bound. */
    o.gate = NULL;
    o.ungated_out = NULL;
    o.has_unified_max = 1;
    o.unified_max = 4.0f;
    CHECK(smax_attention(&tq, &tk, &tv, &to, &o) == SMAX_STATUS_OK);
    ref_attention(q, 1, k, v, (double)(float)(1.0 / sqrt(2.0)), 0, NULL, 0, 0.0, want, P, want_lse);
    CHECK_VEC(out, want, ATT_H * ATT_LQ * ATT_DV, 1e-5, 1e-6);
    o.unified_max = INFINITY;
    CHECK(smax_attention(&tq, &tk, &tv, &to, &o) == SMAX_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(smax_last_error(), "unified_max") != NULL);
    o.has_unified_max = 2;
    CHECK(smax_attention(&tq, &tk, &tv, &to, &o) == SMAX_STATUS_INVALID_ARGUMENT);
    o.has_unified_max = 0;
    o.dgate = &tu;
    CHECK(smax_attention(&tq, &tk, &tv, &to, &o) == SMAX_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(smax_last_error(), "gate") != NULL);
  }

  /* SSMax's per-head s (version 0.4 fields): head h with ssmax_scales[h]
   * equals a call with ssmax_s = ssmax_scales[h]; a 0.3 struct (struct_size
   * before ssmax_scales) does not see the field; dssmax_scales needs SSMAX. */
  {
    float scales[ATT_H], one[ATT_H * ATT_LQ * ATT_DV];
    int64_t s_shape[1] = {ATT_H};
    smax_tensor ts;
    for (i = 0; i < ATT_H; ++i) scales[i] = 0.25f + 0.5f * (float)i;
    CHECK(smax_tensor_init(&ts, scales, SMAX_DTYPE_F32, 1, s_shape, NULL) == SMAX_STATUS_OK);
    smax_attention_options_init(&o);
    CHECK(o.ssmax_scales == NULL && o.dssmax_scales == NULL);
    o.normalizer = SMAX_ATTENTION_SSMAX;
    o.ssmax_scales = &ts;
    fill(out, ATT_H * ATT_LQ * ATT_DV, kSentinel);
    CHECK(smax_attention(&tq, &tk, &tv, &to, &o) == SMAX_STATUS_OK);
    memcpy(one, out, sizeof one);
    for (i = 0; i < ATT_H; ++i) {
      smax_attention_options o1;
      smax_attention_options_init(&o1);
      o1.normalizer = SMAX_ATTENTION_SSMAX;
      o1.ssmax_s = scales[i];
      fill(out, ATT_H * ATT_LQ * ATT_DV, kSentinel);
      CHECK(smax_attention(&tq, &tk, &tv, &to, &o1) == SMAX_STATUS_OK);
      CHECK(memcmp(out + i * ATT_LQ * ATT_DV, one + i * ATT_LQ * ATT_DV,
                   sizeof(float) * ATT_LQ * ATT_DV) == 0);
    }
    o.struct_size = (uint32_t)offsetof(smax_attention_options, ssmax_scales);
    CHECK(smax_attention(&tq, &tk, &tv, &to, &o) == SMAX_STATUS_OK);  /* field not seen */
    o.struct_size = (uint32_t)sizeof(smax_attention_options);
    o.normalizer = SMAX_ATTENTION_SOFTMAX;
    CHECK(smax_attention(&tq, &tk, &tv, &to, &o) == SMAX_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(smax_last_error(), "ssmax_scales") != NULL);
  }

  /* Power-Softmax's p (version 0.5 field): 0 is the default 2, a 0.4 struct
   * does not see the field, odd p is an error, reserved1 must be 0. */
  {
    float two[ATT_H * ATT_LQ * ATT_DV];
    smax_attention_options_init(&o);
    o.normalizer = SMAX_ATTENTION_POWER;
    CHECK(smax_attention(&tq, &tk, &tv, &to, &o) == SMAX_STATUS_OK);
    memcpy(two, out, sizeof two);
    o.power_p = 0;
    CHECK(smax_attention(&tq, &tk, &tv, &to, &o) == SMAX_STATUS_OK);
    CHECK(memcmp(out, two, sizeof two) == 0);
    o.power_p = 4;
    CHECK(smax_attention(&tq, &tk, &tv, &to, &o) == SMAX_STATUS_OK);
    CHECK(memcmp(out, two, sizeof two) != 0);
    o.struct_size = (uint32_t)offsetof(smax_attention_options, power_p);
    CHECK(smax_attention(&tq, &tk, &tv, &to, &o) == SMAX_STATUS_OK);  /* field not seen */
    CHECK(memcmp(out, two, sizeof two) == 0);
    o.struct_size = (uint32_t)sizeof(smax_attention_options);
    o.power_p = 3;
    CHECK(smax_attention(&tq, &tk, &tv, &to, &o) == SMAX_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(smax_last_error(), "power_p") != NULL);
    o.power_p = 2;
    o.reserved1 = 1;
    CHECK(smax_attention(&tq, &tk, &tv, &to, &o) == SMAX_STATUS_UNSUPPORTED);
    CHECK(strstr(smax_last_error(), "reserved1") != NULL);
  }

  /* Every normaliser runs through the ABI (finite output). */
  {
    int32_t nz;
    for (nz = SMAX_ATTENTION_SOFTMAX; nz <= SMAX_ATTENTION_POWER; ++nz) {
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
    /* The knobs' gradients through the ABI: an all-zero float mask's gradient
     * is dT, whose rows sum to 0 for softmax (sum_j P (dP - <dP, P>) = 0). */
    {
      float zmask[ATT_LQ * ATT_LK], dmask[ATT_LQ * ATT_LK];
      int64_t mshape[2] = {ATT_LQ, ATT_LK};
      smax_tensor tz, tdm;
      smax_attention_options ok = o;
      memset(zmask, 0, sizeof zmask);
      CHECK(smax_tensor_init(&tz, zmask, SMAX_DTYPE_F32, 2, mshape, NULL) == SMAX_STATUS_OK);
      CHECK(smax_tensor_init(&tdm, dmask, SMAX_DTYPE_F32, 2, mshape, NULL) == SMAX_STATUS_OK);
      ok.attn_mask = &tz;
      ok.dattn_mask = &tdm;
      fill(dmask, ATT_LQ * ATT_LK, kSentinel);
      CHECK(smax_attention_backward(&tq, &tk, &tv, &to, &tdo, &tdq, &tdk, &tdv, &ok) ==
            SMAX_STATUS_OK);
      for (i = 0; i < ATT_LQ; ++i) {
        double row = 0.0;
        for (j = 0; j < ATT_LK; ++j) row += dmask[i * ATT_LK + j];
        CHECK(fabs(row) < 1e-5 && dmask[i * ATT_LK + 3] == 0.0f); /* key 3: causal */
      }
      ok.attn_mask = NULL;
      CHECK(smax_attention_backward(&tq, &tk, &tv, &to, &tdo, &tdq, &tdk, &tdv, &ok) ==
            SMAX_STATUS_INVALID_ARGUMENT);
      CHECK(strstr(smax_last_error(), "dattn_mask") != NULL);
      /* Restore dq / dk / dv of the plain call for the checks below. */
      CHECK(smax_attention_backward(&tq, &tk, &tv, &to, &tdo, &tdq, &tdk, &tdv, &o) ==
            SMAX_STATUS_OK);
    }
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
    o.normalizer = 7;
    EXPECT_ERROR(smax_attention(&tq, &tk, &tv, &to, &o), SMAX_STATUS_INVALID_ARGUMENT,
                 "params.normalizer has unknown value 7", out, ATT_H * ATT_LQ * ATT_DV);
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
