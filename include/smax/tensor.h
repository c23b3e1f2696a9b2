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

/// Element types. f32 is the compute type; kBool (one byte, zero = masked
/// out, non-zero = kept) is accepted for boolean masks only; kI64 for class
/// indices (loss targets) and returned indices (top-k, sampling, NMS).
enum class DType : int { kF32 = 0, kBool = 1, kI64 = 2 };

/// Size of one element of `dtype` in bytes.
int dtype_size(DType dtype) noexcept;
/// "f32" / "bool" / "i64".
const char* dtype_name(DType dtype) noexcept;

/// Non-owning strided N-D view. Plain data: copy it freely. A non-empty
/// view's data must be aligned to its element size (4 bytes for f32, 8 for
/// i64): misaligned data is rejected with smax::Error.
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
