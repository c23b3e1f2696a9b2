// testing/data.cc: reproducible input data.
#include "data.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "args.h"

namespace smax_cli {
namespace {

// splitmix64 (Steele, Lea, Flood 2014): one 64-bit state, passes BigCrush.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Uniform in (0, 1): 53 random bits, offset by half an ulp so log() is finite.
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }
};

std::pair<double, double> parse_pair(const std::string& text, const std::string& params) {
  const size_t comma = params.find(',');
  if (comma == std::string::npos) {
    throw UsageError("--dist: expected two numbers in '" + text + "' (e.g. uniform:90,100)");
  }
  return {parse_double("--dist", params.substr(0, comma)),
          parse_double("--dist", params.substr(comma + 1))};
}

}  // namespace

Dist parse_dist(const std::string& text) {
  const size_t colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  Dist dist;
  if (kind == "normal") {
    dist.kind = Dist::Kind::kNormal;
    if (colon != std::string::npos) {
      auto [mean, std] = parse_pair(text, text.substr(colon + 1));
      if (!(std > 0)) {
        throw UsageError("--dist: standard deviation must be > 0 in '" + text + "'");
      }
      dist.a = mean;
      dist.b = std;
    }
    return dist;
  }
  if (kind == "uniform") {
    dist.kind = Dist::Kind::kUniform;
    if (colon == std::string::npos) {
      throw UsageError("--dist: uniform needs bounds, e.g. uniform:-1,1 (got '" + text + "')");
    }
    auto [lo, hi] = parse_pair(text, text.substr(colon + 1));
    if (!(lo < hi)) throw UsageError("--dist: need LO < HI in '" + text + "'");
    dist.a = lo;
    dist.b = hi;
    return dist;
  }
  throw UsageError("--dist: unknown distribution '" + text +
                   "' (expected normal, normal:MEAN,STD or uniform:LO,HI)");
}

std::string format_dist(const Dist& dist) {
  const char* kind = dist.kind == Dist::Kind::kNormal ? "normal" : "uniform";
  return std::string(kind) + ":" + format_number(dist.a) + "," + format_number(dist.b);
}

void fill(float* dst, size_t n, const Dist& dist, uint64_t seed) {
  SplitMix64 rng{seed};
  if (dist.kind == Dist::Kind::kUniform) {
    const double width = dist.b - dist.a;
    for (size_t i = 0; i < n; ++i) {
      dst[i] = static_cast<float>(dist.a + width * rng.uniform());
    }
    return;
  }
  // Box-Muller: two uniforms give two independent standard normals.
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  size_t i = 0;
  for (; i + 1 < n; i += 2) {
    const double r = std::sqrt(-2.0 * std::log(rng.uniform()));
    const double theta = kTwoPi * rng.uniform();
    dst[i] = static_cast<float>(dist.a + dist.b * r * std::cos(theta));
    dst[i + 1] = static_cast<float>(dist.a + dist.b * r * std::sin(theta));
  }
  if (i < n) {
    const double r = std::sqrt(-2.0 * std::log(rng.uniform()));
    dst[i] = static_cast<float>(dist.a + dist.b * r * std::cos(kTwoPi * rng.uniform()));
  }
}

FloatBuffer::FloatBuffer(size_t n) : n_(n) {
  constexpr size_t kAlign = 64;
  size_t bytes = (n * sizeof(float) + kAlign - 1) / kAlign * kAlign;
  if (bytes == 0) bytes = kAlign;
  data_ = static_cast<float*>(std::aligned_alloc(kAlign, bytes));
  if (data_ == nullptr) throw std::bad_alloc();
  std::memset(data_, 0, bytes);
}

FloatBuffer::~FloatBuffer() { std::free(data_); }

}  // namespace smax_cli
