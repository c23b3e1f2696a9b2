// tests/test_narrow_convert.cc: the vector bf16 / f16 conversions of
// src/kernels/narrow-inl.h (reached through kernels/dtype_convert.h's
// widen_row / narrow_row, which dispatch to the capped target) against core/convert.h's
// scalar definitions, bit for bit, on every SIMD target:
//  * widening: all 65536 bit patterns of each narrow type;
//  * narrowing: a dense sweep of f32 bit patterns (every 2^k-th pattern plus
//    random ones), every bf16 / f16 tie and its neighbours, the f16
//    overflow edge (65504, 65520 and around), f16 subnormals and their ties,
//    f32 subnormals, +-0, +-inf and NaNs with payloads;
//  * row lengths 1..40 (tails) and misaligned pointers.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include "core/convert.h"
#include "kernels/dtype_convert.h"
#include "test_util.h"

namespace {

using smax::DType;
using smax::detail::f32_bits;
using smax::detail::f32_from_bits;

class NarrowConvert : public smax_test::TargetTest {};

std::vector<uint32_t> narrowing_patterns() {
  std::vector<uint32_t> bits;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 4099) bits.push_back(static_cast<uint32_t>(u));
  // bf16 ties and neighbours: low 16 bits 0x8000 +- 1, even and odd.
  for (uint32_t hi = 0; hi < 0x10000; hi += 7) {
    for (uint32_t lo : {0x7fffu, 0x8000u, 0x8001u, 0x0000u, 0xffffu}) {
      bits.push_back((hi << 16) | lo);
    }
  }
  // f16 ties in the normal range (13 dropped bits) and neighbours.
  for (uint32_t e = 100; e < 145; ++e) {
    for (uint32_t m = 0; m < 0x800000; m += 0x2000 * 37) {
      for (uint32_t lo : {0xfffu, 0x1000u, 0x1001u, 0x3000u}) {
        const uint32_t u = (e << 23) | ((m & ~0x1fffu) | lo);
        bits.push_back(u);
        bits.push_back(u | 0x80000000u);
      }
    }
  }
  // The f16 overflow edge: 65504 (max), 65519.99.., 65520 (tie -> inf), beyond.
  for (float f : {65504.0f, 65505.0f, 65519.0f, 65520.0f, 65521.0f, 65536.0f, 1e10f,
                  3.4e38f, 6.1035156e-5f, 6.0975552e-5f, 5.9604645e-8f, 2.9802322e-8f,
                  2.9802326e-8f, 8.940697e-8f, 1e-40f, 1.4e-45f, 0.0f}) {
    bits.push_back(f32_bits(f));
    bits.push_back(f32_bits(-f));
    for (int k = -3; k <= 3; ++k) bits.push_back(f32_bits(f) + static_cast<uint32_t>(k));
  }
  // Every f16 subnormal and the midpoints between neighbours.
  for (uint32_t m = 0; m < 0x400; ++m) {
    const float v = static_cast<float>(m) * 0x1p-24f;
    const float mid = (static_cast<float>(m) + 0.5f) * 0x1p-24f;
    for (float f : {v, mid}) {
      bits.push_back(f32_bits(f));
      bits.push_back(f32_bits(f) + 1);
      bits.push_back(f32_bits(f) - 1);
    }
  }
  for (uint32_t u : {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u, 0x7f800001u,
                     0x7fa00000u, 0xff812345u, 0x7fffffffu, 0x7f802000u}) {
    bits.push_back(u);
  }
  smax_test::Rng rng("narrow_convert_random");
  for (int i = 0; i < 200000; ++i) bits.push_back(static_cast<uint32_t>(rng.gen()()));
  return bits;
}

uint16_t scalar_narrow(float f, DType t) {
  return t == DType::kBF16 ? smax::detail::f32_to_bf16(f) : smax::detail::f32_to_f16(f);
}

TEST_P(NarrowConvert, WideningIsExactForEveryPattern) {
  for (DType t : {DType::kBF16, DType::kF16}) {
    std::vector<uint16_t> all(0x10000 + 3);
    for (uint32_t h = 0; h < 0x10000; ++h) all[h + 3] = static_cast<uint16_t>(h);
    std::vector<float> out(0x10000);
    smax::kernels::widen_row(all.data() + 3, t, 0x10000, out.data());  // misaligned start
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000 && bad < 10; ++h) {
      const float want = t == DType::kBF16 ? smax::detail::bf16_to_f32(static_cast<uint16_t>(h))
                                           : smax::detail::f16_to_f32(static_cast<uint16_t>(h));
      if (f32_bits(out[h]) != f32_bits(want)) {
        ++bad;
        ADD_FAILURE() << smax::dtype_name(t) << " 0x" << std::hex << h << ": got 0x"
                      << f32_bits(out[h]) << " want 0x" << f32_bits(want);
      }
    }
  }
}

// AVX512_BF16's vcvtneps2bf16 where the CPU has it, and the integer
// rounding on the same target (dtype_convert.h, set_bf16_instruction).
class Bf16InstructionOff {
 public:
  Bf16InstructionOff() : previous_(smax::kernels::set_bf16_instruction(false)) {}
  ~Bf16InstructionOff() { smax::kernels::set_bf16_instruction(previous_); }
  Bf16InstructionOff(const Bf16InstructionOff&) = delete;
  Bf16InstructionOff& operator=(const Bf16InstructionOff&) = delete;

 private:
  bool previous_;
};

void expect_narrowing_matches_scalar(const std::vector<uint32_t>& bits, const char* path) {
  std::vector<float> in(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) in[i] = f32_from_bits(bits[i]);
  for (DType t : {DType::kBF16, DType::kF16}) {
    std::vector<uint16_t> out(in.size());
    smax::kernels::narrow_row(in.data(), static_cast<int64_t>(in.size()), out.data(), t);
    int bad = 0;
    for (size_t i = 0; i < in.size() && bad < 10; ++i) {
      const uint16_t want = scalar_narrow(in[i], t);
      if (out[i] != want) {
        ++bad;
        ADD_FAILURE() << path << " " << smax::dtype_name(t) << " f32 0x" << std::hex << bits[i]
                      << ": got 0x" << out[i] << " want 0x" << want;
      }
    }
  }
}

TEST_P(NarrowConvert, NarrowingRoundsToNearestEvenLikeTheScalarDefinition) {
  const std::vector<uint32_t> bits = narrowing_patterns();
  expect_narrowing_matches_scalar(bits, smax::kernels::cpu_has_bf16_instruction()
                                            ? "vcvtneps2bf16 where the target uses it"
                                            : "integer rounding");
  Bf16InstructionOff off;
  expect_narrowing_matches_scalar(bits, "integer rounding");
}

#if defined(__x86_64__) || defined(__i386__)
// With MXCSR's denormals-are-zero and flush-to-zero on (as
// torch.set_flush_denormal(True) leaves them), f32 subnormals still round
// to their bf16 subnormals: the instruction path's subnormal test must not
// depend on MXCSR (vfpclassps does; vcvtneps2bf16 flushes them regardless).
TEST_P(NarrowConvert, NarrowingIgnoresDenormalsAreZero) {
  std::vector<uint32_t> bits;
  for (uint32_t u = 1; u < 0x00800000u; u += 997) {
    bits.push_back(u);
    bits.push_back(u | 0x80000000u);
  }
  for (uint32_t u : {0x007fffffu, 0x00400000u, 0x00008000u, 0x00018000u, 0x00800000u, 0u}) {
    bits.push_back(u);
    bits.push_back(u | 0x80000000u);
  }
  const unsigned saved = _mm_getcsr();
  _mm_setcsr(saved | 0x8040u);  // FTZ | DAZ
  expect_narrowing_matches_scalar(bits, "DAZ + FTZ");
  _mm_setcsr(saved);
}
#endif

TEST_P(NarrowConvert, TailsWriteExactlyTheirElements) {
  smax_test::Rng rng("narrow_convert_tails");
  for (DType t : {DType::kBF16, DType::kF16}) {
    for (int64_t n = 1; n <= 40; ++n) {
      for (int64_t shift = 0; shift < 3; ++shift) {
        std::vector<float> in(static_cast<size_t>(n + 3));
        for (float& v : in) v = rng.normal(0.0f, 100.0f);
        std::vector<uint16_t> out(static_cast<size_t>(n + 8), 0xA5A5);
        smax::kernels::narrow_row(in.data() + shift, n, out.data() + 4, t);
        for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(out[static_cast<size_t>(i)], 0xA5A5);
        for (int64_t i = n + 4; i < n + 8; ++i) EXPECT_EQ(out[static_cast<size_t>(i)], 0xA5A5);
        std::vector<float> back(static_cast<size_t>(n + 8), -7.0f);
        smax::kernels::widen_row(out.data() + 4, t, n, back.data() + 4);
        for (int64_t i = 0; i < n; ++i) {
          const float want = smax::detail::round_to(t, in[static_cast<size_t>(i + shift)]);
          EXPECT_EQ(f32_bits(back[static_cast<size_t>(i + 4)]), f32_bits(want)) << n << " " << i;
        }
        EXPECT_EQ(back[3], -7.0f);
        EXPECT_EQ(back[static_cast<size_t>(n + 4)], -7.0f);
      }
    }
  }
}

SMAX_INSTANTIATE_PER_TARGET(NarrowConvert);

}  // namespace
