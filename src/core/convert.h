// src/core/convert.h: scalar conversions between the floating storage types
// (f32, f64, f16, bf16) and the strided row gather / scatter every op uses
// when an operand is not f32.
//
// Contract:
//  * Widening (f16 / bf16 -> f32, f32 -> f64) is exact.
//  * Narrowing rounds to nearest, ties to even, once: f32 -> bf16 / f16,
//    f64 -> f32 (the C++ cast, which rounds to nearest even). Overflow gives
//    +-inf, values below the smallest subnormal of the type give +-0, NaN
//    stays NaN (quiet, sign kept). f16 subnormals are produced (and read)
//    exactly like IEEE binary16.
// Highway 1.0.3's DemoteTo(bf16) truncates and its software DemoteTo(f16)
// (targets without F16C) truncates too, so smax rounds itself: these scalar
// functions are the definition the SIMD kernels are tested against.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "smax/tensor.h"

namespace smax::detail {

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float bf16_to_f32(uint16_t h) { return f32_from_bits(uint32_t{h} << 16); }

inline uint16_t f32_to_bf16(float f) {
  const uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  const uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);  // ties to even; carries into the exponent
  return static_cast<uint16_t>(rounded >> 16);
}

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000u | (man << 13));  // inf / NaN
  if (exp != 0) return f32_from_bits(sign | ((exp + 112u) << 23) | (man << 13));
  // Zero or subnormal: man * 2^-24, exact in f32.
  const float magnitude = static_cast<float>(man) * 5.9604644775390625e-8f;
  return sign ? -magnitude : magnitude;
}

inline uint16_t f32_to_f16(float f) {
  const uint32_t u = f32_bits(f);
  const auto sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: rounds to inf
  if (a >= 0x38800000u) {                                             // normal in f16 (>= 2^-14)
    const uint32_t rounded = a + 0xfffu + ((a >> 13) & 1u);           // ties to even
    return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
  }
  // Subnormal or zero in f16: round a * 2^24 to an integer, ties to even.
  // Values below 2^-25 (half the smallest subnormal) round to 0; 2^-25
  // itself is a tie and goes to 0 (even).
  if (a < 0x33000000u) return sign;
  const uint32_t exp = a >> 23;                   // 102..112
  const uint32_t man = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - exp;              // 14..24: man * 2^(exp-150) * 2^24
  const uint32_t q = man >> shift;
  const uint32_t rem = man & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  const uint32_t r = q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
  return static_cast<uint16_t>(sign | r);
}

/// Reads element `p` of floating dtype `dt` as f32 (f64 rounds to nearest).
inline float load_f32(const void* p, DType dt) {
  switch (dt) {
    case DType::kF64: {
      double v;
      std::memcpy(&v, p, 8);
      return static_cast<float>(v);
    }
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return f16_to_f32(h);
    }
    case DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return bf16_to_f32(h);
    }
    default: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
  }
}

/// Writes f32 `v` as element `p` of floating dtype `dt` (rounded once).
inline void store_f32(void* p, DType dt, float v) {
  switch (dt) {
    case DType::kF64: {
      const double d = v;
      std::memcpy(p, &d, 8);
      return;
    }
    case DType::kF16: {
      const uint16_t h = f32_to_f16(v);
      std::memcpy(p, &h, 2);
      return;
    }
    case DType::kBF16: {
      const uint16_t h = f32_to_bf16(v);
      std::memcpy(p, &h, 2);
      return;
    }
    default: std::memcpy(p, &v, 4); return;
  }
}

/// Element `v` (f32) rounded to `dt` and widened back: the value a store to
/// `dt` keeps (f32 and f64: `v` itself).
inline float round_to(DType dt, float v) {
  switch (dt) {
    case DType::kF16: return f16_to_f32(f32_to_f16(v));
    case DType::kBF16: return bf16_to_f32(f32_to_bf16(v));
    default: return v;
  }
}

/// `v` rounded to f32 with round-to-odd (truncate, then set the last bit if
/// inexact): rounding that f32 once more to f16 / bf16 (nearest even) gives
/// the correctly rounded f16 / bf16 of `v`, with no double-rounding error.
inline float f64_to_f32_round_odd(double v) {
  float f = static_cast<float>(v);
  if (!(static_cast<double>(f) != v) || f != f) return f;  // exact or NaN
  uint32_t u = f32_bits(f);
  if (std::fabs(static_cast<double>(f)) > std::fabs(v)) --u;  // toward zero (not below 0: v != 0)
  return f32_from_bits(u | 1u);
}

/// Reads element `p` of floating dtype `dt` as double (exact).
inline double load_f64(const void* p, DType dt) {
  if (dt == DType::kF64) {
    double v;
    std::memcpy(&v, p, 8);
    return v;
  }
  return static_cast<double>(load_f32(p, dt));
}

/// Writes double `v` as element `p` of floating dtype `dt`, rounded once to
/// nearest even.
inline void store_f64(void* p, DType dt, double v) {
  switch (dt) {
    case DType::kF64: std::memcpy(p, &v, 8); return;
    case DType::kF16:
    case DType::kBF16: store_f32(p, dt, f64_to_f32_round_odd(v)); return;
    default: store_f32(p, dt, static_cast<float>(v)); return;
  }
}

/// out[i] = element i of the strided row at `base` (stride in elements of
/// `dt`), as f32.
void gather_row_f32(const void* base, DType dt, int64_t stride, int64_t n, float* out);
/// Element i of the strided row at `base` = in[i] rounded to `dt`.
void scatter_row_f32(const float* in, int64_t n, void* base, DType dt, int64_t stride);
/// out[i] = element i of the strided row at `base`, as double (exact).
void gather_row_f64(const void* base, DType dt, int64_t stride, int64_t n, double* out);
/// Element i of the strided row at `base` = in[i] rounded once to `dt`
/// (store_f64).
void scatter_row_f64(const double* in, int64_t n, void* base, DType dt, int64_t stride);

}  // namespace smax::detail
