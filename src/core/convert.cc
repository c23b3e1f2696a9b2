// src/core/convert.cc: strided row gather / scatter with dtype conversion
// (see convert.h). Contiguous rows use the SIMD conversions of
// kernels/dtype_convert.h (the same bits); strided ones the scalar
// definitions. The f32 cases stay plain copies.
#include "core/convert.h"

#include "kernels/dtype_convert.h"

namespace smax::detail {

void gather_row_f32(const void* base, DType dt, int64_t stride, int64_t n, float* out) {
  if (stride == 1 && dt != DType::kF32) return kernels::widen_row(base, dt, n, out);
  switch (dt) {
    case DType::kF64: {
      const auto* p = static_cast<const double*>(base);
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(p[i * stride]);
      return;
    }
    case DType::kF16: {
      const auto* p = static_cast<const uint16_t*>(base);
      for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(p[i * stride]);
      return;
    }
    case DType::kBF16: {
      const auto* p = static_cast<const uint16_t*>(base);
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(p[i * stride]);
      return;
    }
    default: {
      const auto* p = static_cast<const float*>(base);
      for (int64_t i = 0; i < n; ++i) out[i] = p[i * stride];
      return;
    }
  }
}

void scatter_row_f32(const float* in, int64_t n, void* base, DType dt, int64_t stride) {
  if (stride == 1 && dt != DType::kF32) return kernels::narrow_row(in, n, base, dt);
  switch (dt) {
    case DType::kF64: {
      auto* p = static_cast<double*>(base);
      for (int64_t i = 0; i < n; ++i) p[i * stride] = in[i];
      return;
    }
    case DType::kF16: {
      auto* p = static_cast<uint16_t*>(base);
      for (int64_t i = 0; i < n; ++i) p[i * stride] = f32_to_f16(in[i]);
      return;
    }
    case DType::kBF16: {
      auto* p = static_cast<uint16_t*>(base);
      for (int64_t i = 0; i < n; ++i) p[i * stride] = f32_to_bf16(in[i]);
      return;
    }
    default: {
      auto* p = static_cast<float*>(base);
      for (int64_t i = 0; i < n; ++i) p[i * stride] = in[i];
      return;
    }
  }
}

void gather_row_f64(const void* base, DType dt, int64_t stride, int64_t n, double* out) {
  const auto* p = static_cast<const char*>(base);
  const int64_t step = stride * dtype_size(dt);
  if (dt == DType::kF64) {
    const auto* d = static_cast<const double*>(base);
    for (int64_t i = 0; i < n; ++i) out[i] = d[i * stride];
    return;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = load_f64(p + i * step, dt);
}

void scatter_row_f64(const double* in, int64_t n, void* base, DType dt, int64_t stride) {
  auto* p = static_cast<char*>(base);
  const int64_t step = stride * dtype_size(dt);
  if (dt == DType::kF64) {
    auto* d = static_cast<double*>(base);
    for (int64_t i = 0; i < n; ++i) d[i * stride] = in[i];
    return;
  }
  for (int64_t i = 0; i < n; ++i) store_f64(p + i * step, dt, in[i]);
}

}  // namespace smax::detail
