// tests/f64_rows.h: the rows the float64-path tests share
// (test_rescaled_f64, test_reweight_f64, test_sampling_f64): logits offset
// + uniform [-spread, spread] with optional masked entries, standard normal
// upstream gradients, and the shapes every such test walks: rows of 1 to
// 32000 entries, spreads 1, 20 (masked) and 600, and logits at 12345.678
// +- 0.01 (masked), where f32 arithmetic loses their differences.
#pragma once

#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace smax_test {

/// rows x n logits offset + uniform [-spread, spread]; `masked`: about one
/// in six entries -inf (never entry 0 of a row).
inline std::vector<double> make_rows(int64_t rows, int64_t n, double spread, double offset,
                                     bool masked, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-spread, spread), unit(0.0, 1.0);
  std::vector<double> x(static_cast<size_t>(rows * n));
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = offset + u(rng);
    if (masked && i % static_cast<size_t>(n) != 0 && unit(rng) < 1.0 / 6.0) {
      x[i] = -std::numeric_limits<double>::infinity();
    }
  }
  return x;
}

/// `count` standard normal values.
inline std::vector<double> normal(size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> d;
  std::vector<double> g(count);
  for (double& v : g) v = d(rng);
  return g;
}

struct Shape {
  int64_t n;
  double spread, offset;
  bool masked;
};
/// The shapes above; `wide` adds the spread of 600.
inline std::vector<Shape> f64_shapes(bool wide = true) {
  std::vector<Shape> v;
  for (int64_t n : std::vector<int64_t>{1, 7, 100, 1000, 32000}) {
    v.push_back({n, 1.0, 0.0, false});
    v.push_back({n, 20.0, 0.0, true});
    if (wide) v.push_back({n, 600.0, 0.0, false});
    v.push_back({n, 0.01, 12345.678, true});
  }
  return v;
}
inline std::string describe(const Shape& s) {
  return "n " + std::to_string(s.n) + " spread " + std::to_string(s.spread) + " offset " +
         std::to_string(s.offset) + (s.masked ? " masked" : "");
}

}  // namespace smax_test
