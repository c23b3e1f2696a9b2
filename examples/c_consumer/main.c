/* examples/c_consumer/main.c: softmax through the C ABI, from plain C99.
 * Built by examples/c_consumer/CMakeLists.txt (find_package) and by
 * `cc -std=c99 main.c $(pkg-config --cflags --libs --static smax)`. */
#include <math.h>
#include <stdio.h>

#include <smax/c/smax.h>

int main(void) {
  float x[2][3] = {{1, 2, 3}, {4, 5, 6}}, y[2][3];
  int64_t shape[2] = {2, 3};
  smax_tensor src, dst;
  if (smax_tensor_init(&src, x, SMAX_DTYPE_F32, 2, shape, NULL) != SMAX_STATUS_OK ||
      smax_tensor_init(&dst, y, SMAX_DTYPE_F32, 2, shape, NULL) != SMAX_STATUS_OK ||
      smax_softmax(&src, &dst, NULL) != SMAX_STATUS_OK) {
    fprintf(stderr, "c_consumer: %s\n", smax_last_error());
    return 1;
  }
  for (int r = 0; r < 2; ++r) {
    float sum = y[r][0] + y[r][1] + y[r][2];
    if (fabsf(sum - 1.0f) > 1e-6f) {
      fprintf(stderr, "c_consumer: row %d sums to %g\n", r, sum);
      return 1;
    }
  }
  printf("c_consumer: softmax of {1, 2, 3} = {%.6f, %.6f, %.6f}\n", y[0][0], y[0][1], y[0][2]);
  return 0;
}
