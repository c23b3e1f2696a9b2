// tests/kernels/kernel_test.h: helpers of the kernel building-block tests
// (tests/kernels/test_kernel_*.cc, compiled per Highway target).
#pragma once

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace smax_kernel_test {

inline std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

inline uint32_t Bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

inline uint64_t Bits(double x) {
  uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

// What OnlineScanWith told its visitor (test_kernel_scan.cc).
struct KtCall {
  int kind;        // 0 Rebase, 4 Step4, 1 Step1
  size_t i;        // Step*: the element index
  size_t count;    // Step1: lanes
  unsigned k;      // Step1: ordinal
  bool first;      // Rebase
  float step_max;  // Rebase: the lane max of its step
};

constexpr float kLog2eF = 1.44269504f;
constexpr double kLn2 = 0.6931471805599453;

}  // namespace smax_kernel_test
