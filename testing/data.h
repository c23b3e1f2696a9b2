// testing/data.h: reproducible input data for `smax run` / `smax compare`.
//
// The generator is splitmix64 + Box-Muller, written out here (not
// std::normal_distribution) so that a seed gives the same data with any
// standard library, and fast enough to fill 2^25 elements in well under a
// second.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace smax_cli {

/// Distribution of generated logits.
struct Dist {
  enum class Kind { kNormal, kUniform } kind = Kind::kNormal;
  double a = 0.0;  ///< normal: mean; uniform: low
  double b = 1.0;  ///< normal: standard deviation; uniform: high
};

/// "normal" (mean 0, std 1), "normal:MEAN,STD" (STD > 0), "uniform:LO,HI"
/// (LO < HI). Throws UsageError naming --dist otherwise.
Dist parse_dist(const std::string& text);
/// Canonical text form, e.g. "normal:0,1" or "uniform:90,100".
std::string format_dist(const Dist& dist);

/// Fills dst[0..n) with samples of `dist`, deterministically from `seed`
/// (same seed and n: same floats).
void fill(float* dst, size_t n, const Dist& dist, uint64_t seed);

/// A heap buffer of floats aligned to 64 bytes (the library does not need
/// alignment; this just keeps timings free of split-line noise). Pages are
/// touched on construction so that the first timed run does not pay faults.
class FloatBuffer {
 public:
  explicit FloatBuffer(size_t n);
  ~FloatBuffer();
  FloatBuffer(const FloatBuffer&) = delete;
  FloatBuffer& operator=(const FloatBuffer&) = delete;
  float* data() { return data_; }
  const float* data() const { return data_; }
  size_t size() const { return n_; }

 private:
  float* data_ = nullptr;
  size_t n_ = 0;
};

}  // namespace smax_cli
