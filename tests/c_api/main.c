/* tests/c_api/main.c: the C ABI test (include/smax/c/smax.h), compiled as C99;
 * one file per public header in tests/c_api/, helpers in util.h.
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
#include "util.h"

int g_failures = 0;
int g_checks = 0;

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
