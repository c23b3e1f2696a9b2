// examples/basic.cc: the smax C++ API in one page.
//
// Build: part of the main build (target smax_example_basic), or by hand
// against an installed smax:  g++ -std=c++17 basic.cc $(pkg-config --cflags
// --libs --static smax)
#include <cmath>
#include <cstdio>
#include <vector>

#include "smax/smax.h"

int main() {
  // Two rows of four logits, row-major: shape [2, 4].
  std::vector<float> logits = {1.0f, 2.0f, 3.0f, 4.0f,   //
                               -1.0f, 0.0f, 0.0f, 100.0f};
  std::vector<float> probs(logits.size());

  // softmax over the last axis (the default), algorithm chosen automatically.
  smax::softmax(smax::make_view(logits.data(), {2, 4}), smax::make_view(probs.data(), {2, 4}));

  // log_softmax with a temperature, over axis 0 (columns), on one thread.
  std::vector<float> logp(logits.size());
  smax::SoftmaxOptions options;
  options.axis = 0;
  options.temperature = 2.0f;
  options.threads = 1;
  smax::log_softmax(smax::make_view(logits.data(), {2, 4}), smax::make_view(logp.data(), {2, 4}),
                    options);

  // logsumexp: one value per row.
  std::vector<float> lse(2);
  smax::logsumexp(smax::make_view(logits.data(), {2, 4}), smax::make_view(lse.data(), {2}));

  // A boolean mask (0 = masked out) broadcast over the rows: shape [1, 4].
  const uint8_t keep[4] = {1, 1, 0, 1};
  smax::SoftmaxOptions masked;
  masked.bool_mask = smax::make_bool_view(keep, {1, 4});
  std::vector<float> masked_probs(logits.size());
  smax::softmax(smax::make_view(logits.data(), {2, 4}),
                smax::make_view(masked_probs.data(), {2, 4}), masked);

  std::printf("smax %s, target %s\n", smax::version(), smax::active_target().c_str());
  for (int r = 0; r < 2; ++r) {
    std::printf("row %d: softmax", r);
    for (int c = 0; c < 4; ++c) std::printf(" %.6f", probs[r * 4 + c]);
    std::printf("  masked");
    for (int c = 0; c < 4; ++c) std::printf(" %.6f", masked_probs[r * 4 + c]);
    std::printf("  logsumexp %.6f\n", lse[r]);
  }
  std::printf("log_softmax over axis 0 at temperature 2:");
  for (float v : logp) std::printf(" %.4f", v);
  std::printf("\n");

  // Bad arguments throw smax::Error naming the argument; nothing is written.
  try {
    options.axis = 5;
    smax::softmax(smax::make_view(logits.data(), {2, 4}), smax::make_view(probs.data(), {2, 4}),
                  options);
    std::printf("error: expected smax::Error\n");
    return 1;
  } catch (const smax::Error& e) {
    std::printf("smax::Error (%s): %s\n", smax::status_name(e.status()), e.what());
  }

  // Check row 0 against exp(k - 4) / sum_j exp(j - 4), computed in double.
  double sum = 0;
  for (int c = 0; c < 4; ++c) sum += std::exp(c - 3.0);
  for (int c = 0; c < 4; ++c) {
    const double expect = std::exp(c - 3.0) / sum;
    if (!(std::fabs(probs[c] - expect) <= 2e-6 * expect)) {
      std::printf("error: softmax[0][%d] = %.8f, expected %.8f\n", c, probs[c], expect);
      return 1;
    }
  }
  return 0;
}
