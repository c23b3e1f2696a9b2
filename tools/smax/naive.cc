// tools/smax/naive.cc: the baseline every softmax is measured against.
//
// Kept in its own translation unit, compiled with the project's ordinary
// flags (no -ffast-math), so the compiler cannot vectorise the exp or
// reassociate the float sum: this is what a straightforward C++ loop costs.
// The f64 / f16 / bf16 loops are the same loop on rows of that type (see
// commands.h for what each one rounds).
#include <cmath>
#include <cstdint>
#include <limits>

#include "commands.h"
#include "core/convert.h"

namespace smax_cli {
namespace {

// The f32 loop with T in memory and Acc (float or double) in registers;
// widen / narrow convert one element. Narrow T: each exp is stored rounded
// to T, then read back and divided (what the f32 loop does on a T array).
template <typename T, typename Acc, Acc (*widen)(T), T (*narrow)(Acc)>
void naive_loop(const T* x, T* y, long long n) {
  Acc m = -std::numeric_limits<Acc>::infinity();
  for (long long i = 0; i < n; ++i) {
    const Acc v = widen(x[i]);
    m = v > m ? v : m;
  }
  Acc sum = 0;
  for (long long i = 0; i < n; ++i) {
    const Acc e = std::exp(widen(x[i]) - m);
    y[i] = narrow(e);
    sum += e;
  }
  for (long long i = 0; i < n; ++i) y[i] = narrow(widen(y[i]) / sum);
}

float same_f32(float v) { return v; }
double same_f64(double v) { return v; }

}  // namespace

void naive_softmax(const float* x, float* y, long long n) {
  naive_loop<float, float, same_f32, same_f32>(x, y, n);
}

void naive_softmax_f64(const double* x, double* y, long long n) {
  naive_loop<double, double, same_f64, same_f64>(x, y, n);
}

void naive_softmax_bf16(const uint16_t* x, uint16_t* y, long long n) {
  naive_loop<uint16_t, float, smax::detail::bf16_to_f32, smax::detail::f32_to_bf16>(x, y, n);
}

void naive_softmax_f16(const uint16_t* x, uint16_t* y, long long n) {
  naive_loop<uint16_t, float, smax::detail::f16_to_f32, smax::detail::f32_to_f16>(x, y, n);
}

}  // namespace smax_cli
