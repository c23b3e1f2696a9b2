/* tests/c_api/abi.c: the C ABI test of versioned structs (defaults, struct_size rules, dtype i64), the link check of every function, and the runtime functions. */
#include "util.h"

/* ---- versioned structs, defaults, dtype i64 ----------------------------------- */

void test_struct_versions(void) {
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
    CHECK(smax_tensor_init(&t, buf, 9, 1, shape, NULL) == SMAX_STATUS_INVALID_ARGUMENT);
    CHECK(smax_tensor_init(&t, buf, -1, 1, shape, NULL) == SMAX_STATUS_INVALID_ARGUMENT);
  }
}

/* Every function of the header, referenced once: a missing definition is a
 * link error of this program. The ops come from the op list (a missing
 * smax_<op> of an op of smax/op_list.inc does not compile); the options inits
 * of the ops of `smax run`'s table are called by tests/test_c_abi_ops.cc
 * (their ExtOp::c_run in testing/table_*.cc); the rest are the inits of the
 * other options structs and the runtime. */
typedef void (*any_fn)(void);
void test_every_function_links(void) {
  const any_fn fns[] = {
#define SMAX_OP(name, group, kind, cli) (any_fn)smax_##name,
#include "smax/op_list.inc"
      (any_fn)smax_tensor_init, (any_fn)smax_softmax_options_init,
      (any_fn)smax_loss_options_init, (any_fn)smax_soft_nms_options_init,
      (any_fn)smax_linear_cross_entropy_options_init,
      (any_fn)smax_last_error, (any_fn)smax_status_name, (any_fn)smax_active_target,
      (any_fn)smax_set_max_target, (any_fn)smax_max_threads, (any_fn)smax_set_max_threads,
      (any_fn)smax_version, (any_fn)smax_streaming_stores, (any_fn)smax_set_streaming_stores,
      (any_fn)smax_attention_options_init, (any_fn)smax_attention_normalizer_name,
      (any_fn)smax_attention_normalizer_parse, (any_fn)smax_logit_scale_gradients};
  size_t i;
  for (i = 0; i < sizeof fns / sizeof fns[0]; ++i) CHECK(fns[i] != NULL);
}

void test_runtime(void) {
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

  /* Streaming stores: forced either way, bad words rejected, back to auto. */
  CHECK(smax_set_streaming_stores("off") == SMAX_STATUS_OK);
  CHECK(strcmp(smax_streaming_stores(), "forced off") == 0);
  CHECK(smax_set_streaming_stores("on") == SMAX_STATUS_OK);
  CHECK(strcmp(smax_streaming_stores(), "forced on") == 0);
  CHECK(smax_set_streaming_stores("sometimes") == SMAX_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(smax_last_error(), "sometimes") != NULL);
  CHECK(smax_set_streaming_stores(NULL) == SMAX_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(smax_last_error(), "NULL") != NULL);
  CHECK(strcmp(smax_streaming_stores(), "forced on") == 0);
  CHECK(smax_set_streaming_stores("auto") == SMAX_STATUS_OK);
  CHECK(strcmp(smax_streaming_stores(),
               "softmax=measuring, log_softmax=measuring, backward=measuring, "
               "cross_entropy=measuring") == 0);
}
