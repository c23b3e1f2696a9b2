// bench/data.h: the benchmark inputs, reproducible bit for bit in C++ and in
// numpy (bench/peers/bench_peers.py implements the same formula), so the
// C++ peer harness and the Python peers see the same logits.
//
//   h_i = splitmix64(seed * 2^32 + i);  x_i = ((h_i >> 40) / 2^23 - 1) * 8
//
// i.e. uniform on [-8, 8) with 24-bit resolution; every step is exact in f32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace smax_bench {

inline uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

inline void fill_logits(float* x, size_t n, uint32_t seed) {
  const uint64_t base = static_cast<uint64_t>(seed) << 32;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t h = splitmix64(base + i);
    x[i] = (static_cast<float>(h >> 40) * 0x1p-23f - 1.0f) * 8.0f;
  }
}

inline std::vector<float> logits(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  fill_logits(v.data(), n, seed);
  return v;
}

}  // namespace smax_bench
