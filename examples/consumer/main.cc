// examples/consumer/main.cc: softmax([1, 2, 3]) through an installed smax.
// Exits non-zero when the result is wrong.
#include <cmath>
#include <cstdio>

#include "smax/smax.h"

int main() {
  const float x[3] = {1.0f, 2.0f, 3.0f};
  float y[3] = {0, 0, 0};
  smax::softmax(smax::make_view(x, {3}), smax::make_view(y, {3}));

  // exp(k - 3) / (1 + e^-1 + e^-2), in double.
  const double e1 = std::exp(-1.0), e2 = std::exp(-2.0), sum = 1.0 + e1 + e2;
  const double expect[3] = {e2 / sum, e1 / sum, 1.0 / sum};
  int bad = 0;
  for (int i = 0; i < 3; ++i) {
    const double rel = std::fabs(y[i] - expect[i]) / expect[i];
    std::printf("y[%d] = %.8f (expected %.8f, rel err %.2e)\n", i, y[i], expect[i], rel);
    if (!(rel <= 2e-6)) bad = 1;
  }
  std::printf("smax %s on %s: %s\n", smax::version(), smax::active_target().c_str(),
              bad ? "MISMATCH" : "ok");
  return bad;
}
