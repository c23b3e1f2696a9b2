// src/core/dense_rows.cc: see dense_rows.h.
#include "core/dense_rows.h"

namespace smax::detail {

int64_t dense_f32_numel(const TensorView& view) noexcept {
  if (view.dtype != DType::kF32 || view.rank < 0 || view.rank > kMaxRank) return -1;
  int64_t numel = 1;  // also the row-major stride of the next dim outwards
  for (int d = view.rank - 1; d >= 0; --d) {
    const int64_t size = view.shape[d];
    if (size <= 0) return -1;  // empty views and negative sizes: the general path
    if (size > 1 && view.strides[d] != numel) return -1;
    if (__builtin_mul_overflow(numel, size, &numel)) return -1;
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(numel, int64_t{4}, &bytes)) return -1;
  const auto address = reinterpret_cast<uintptr_t>(view.data);
  if (address == 0 || address % 4 != 0) return -1;
  if (address + static_cast<uintptr_t>(bytes) < address) return -1;
  return numel;
}

bool bytes_overlap(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) noexcept {
  const auto a_lo = reinterpret_cast<uintptr_t>(a), b_lo = reinterpret_cast<uintptr_t>(b);
  return a_lo < b_lo + static_cast<uintptr_t>(b_bytes) &&
         b_lo < a_lo + static_cast<uintptr_t>(a_bytes);
}

}  // namespace smax::detail
