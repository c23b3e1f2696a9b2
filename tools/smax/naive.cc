// tools/smax/naive.cc: the baseline every softmax is measured against.
//
// Kept in its own translation unit, compiled with the project's ordinary
// flags (no -ffast-math), so the compiler cannot vectorise the exp or
// reassociate the float sum: this is what a straightforward C++ loop costs.
#include <cmath>
#include <limits>

#include "commands.h"

namespace smax_cli {

void naive_softmax(const float* x, float* y, long long n) {
  float m = -std::numeric_limits<float>::infinity();
  for (long long i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  float sum = 0.0f;
  for (long long i = 0; i < n; ++i) {
    const float e = std::exp(x[i] - m);
    y[i] = e;
    sum += e;
  }
  for (long long i = 0; i < n; ++i) y[i] = y[i] / sum;
}

}  // namespace smax_cli
