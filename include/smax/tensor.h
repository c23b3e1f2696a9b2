// smax/tensor.h: a non-owning, strided view of an N-D array.
//
// A TensorView names memory that the caller owns: a data pointer, a dtype, a
// shape and per-dimension strides counted in *elements* (never bytes).
// Strides may be zero (broadcast, allowed for inputs and masks only) or
// negative (inputs and outputs). Rank 0 (a scalar) is treated as shape [1].
// A view never allocates and never frees. Source views are never written,
// even though `data` is a non-const pointer (like DLPack's DLTensor).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

namespace smax {

/// Largest rank a view may have.
inline constexpr int kMaxRank = 8;

/// Element types.
///  * Floating storage types: kF32 (float), kF64 (double), kF16 (IEEE
///    binary16) and kBF16 (bfloat16: the upper 16 bits of an f32). Narrow
///    types (f16, bf16) are widened to f32 in registers and results are
///    rounded to nearest even once, on store; docs/dtypes.md lists which ops
///    compute f64 in float64 and the bound of each storage type.
///  * kBool (one byte, zero = masked out, non-zero = kept): boolean masks.
///  * kI64: class indices (loss targets) and returned indices (top-k,
///    sampling, NMS).
///  * kU8 / kI8: quantised tensors (scale and zero point passed beside
///    them); kI32: integer-only softmax inputs (I-BERT / I-ViT).
/// The numeric values are part of the C ABI (smax_dtype mirrors them).
enum class DType : int {
  kF32 = 0,
  kBool = 1,
  kI64 = 2,
  kF64 = 3,
  kF16 = 4,
  kBF16 = 5,
  kU8 = 6,
  kI8 = 7,
  kI32 = 8,
};
/// The largest DType value (for range checks of values cast from ints).
inline constexpr DType kLastDType = DType::kI32;

/// Size of one element of `dtype` in bytes (0 for a value outside the enum).
int dtype_size(DType dtype) noexcept;
/// "f32" / "bool" / "i64" / "f64" / "f16" / "bf16" / "u8" / "i8" / "i32".
const char* dtype_name(DType dtype) noexcept;
/// True for the floating storage types f32, f64, f16 and bf16.
constexpr bool is_floating(DType dtype) noexcept {
  return dtype == DType::kF32 || dtype == DType::kF64 || dtype == DType::kF16 ||
         dtype == DType::kBF16;
}

/// Non-owning strided N-D view. Plain data: copy it freely. A non-empty
/// view's data must be aligned to its element size (4 bytes for f32, 8 for
/// f64 and i64, 2 for f16 and bf16): misaligned data is rejected with
/// smax::Error.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  int rank = 0;
  int64_t shape[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};  ///< in elements

  /// Number of elements (product of the shape; 1 for rank 0).
  /// Precondition: the shape was validated (no overflow).
  int64_t numel() const noexcept;
  /// "[256, 32000] strides [32000, 1] f32" for messages and logs.
  std::string describe() const;
};

/// Row-major contiguous view of `shape` over `data`.
TensorView make_view(float* data, std::initializer_list<int64_t> shape);
TensorView make_view(const float* data, std::initializer_list<int64_t> shape);
/// Strided view; `strides` in elements, same length as `shape`.
TensorView make_view(float* data, std::initializer_list<int64_t> shape,
                     std::initializer_list<int64_t> strides);
TensorView make_view(const float* data, std::initializer_list<int64_t> shape,
                     std::initializer_list<int64_t> strides);
/// Boolean mask views (one byte per element; non-zero = keep).
TensorView make_bool_view(const uint8_t* data, std::initializer_list<int64_t> shape);
TensorView make_bool_view(const uint8_t* data, std::initializer_list<int64_t> shape,
                          std::initializer_list<int64_t> strides);
/// int64 index views (loss targets, returned indices).
TensorView make_index_view(int64_t* data, std::initializer_list<int64_t> shape);
TensorView make_index_view(const int64_t* data, std::initializer_list<int64_t> shape);
/// Generic form used by bindings: rank <= kMaxRank, arrays of `rank` entries.
/// `strides == nullptr` means row-major contiguous. Throws smax::Error when
/// rank is out of range.
TensorView make_view(void* data, DType dtype, int rank, const int64_t* shape,
                     const int64_t* strides);

}  // namespace smax
