// src/core/basics.cc: small public helpers: errors, dtypes, views, option names.
#include <algorithm>
#include <cstring>
#include <sstream>
#include <string>

#include "core/enum_names.h"
#include "smax/error.h"
#include "smax/options.h"
#include "smax/tensor.h"
#include "smax/version.h"

namespace smax {

const char* version() noexcept { return "0.1.0"; }

const char* status_name(Status status) noexcept {
  switch (status) {
    case Status::kOk: return "ok";
    case Status::kInvalidArgument: return "invalid argument";
    case Status::kUnsupported: return "unsupported";
    case Status::kOutOfMemory: return "out of memory";
    case Status::kInternal: return "internal error";
  }
  return "unknown status";
}

int dtype_size(DType dtype) noexcept {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kBool: return 1;
    case DType::kI64: return 8;
    case DType::kF64: return 8;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kU8: return 1;
    case DType::kI8: return 1;
    case DType::kI32: return 4;
  }
  return 0;
}

const char* dtype_name(DType dtype) noexcept {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kBool: return "bool";
    case DType::kI64: return "i64";
    case DType::kF64: return "f64";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kU8: return "u8";
    case DType::kI8: return "i8";
    case DType::kI32: return "i32";
  }
  return "unknown-dtype";
}

int64_t TensorView::numel() const noexcept {
  int64_t n = 1;
  const int r = std::clamp(rank, 0, kMaxRank);  // an invalid rank reads nothing out of bounds
  for (int d = 0; d < r; ++d) n *= shape[d];
  return n;
}

// Safe on any view, also one whose rank is out of range (error messages
// describe the views they reject).
std::string TensorView::describe() const {
  std::ostringstream out;
  if (rank < 0 || rank > kMaxRank) {
    out << "<rank " << rank << ", outside [0, " << kMaxRank << "]> " << dtype_name(dtype);
    return out.str();
  }
  out << "[";
  for (int d = 0; d < rank; ++d) out << (d ? ", " : "") << shape[d];
  out << "] strides [";
  for (int d = 0; d < rank; ++d) out << (d ? ", " : "") << strides[d];
  out << "] " << dtype_name(dtype);
  return out.str();
}

TensorView make_view(void* data, DType dtype, int rank, const int64_t* shape,
                     const int64_t* strides) {
  if (rank < 0 || rank > kMaxRank) {
    throw Error(Status::kInvalidArgument,
                "make_view: rank " + std::to_string(rank) + " is outside [0, " +
                    std::to_string(kMaxRank) + "]");
  }
  if (rank > 0 && shape == nullptr) {
    throw Error(Status::kInvalidArgument, "make_view: shape is null for rank " +
                                              std::to_string(rank));
  }
  // The view is aggregate-initialised from the final values: GCC turned a
  // default-constructed view's zeroing and the copy loops into `rep stos` /
  // `rep movs` (~40 cycles each to start on Zen 4, most of this function).
  int64_t sizes[kMaxRank], steps[kMaxRank];
  int64_t stride = 1;  // row-major strides, from the last dim
  for (int k = 0; k < kMaxRank; ++k) {
    const int d = kMaxRank - 1 - k;
    const bool used = d < rank;
    sizes[d] = used ? shape[d] : 0;
    if (strides != nullptr) {
      steps[d] = used ? strides[d] : 0;
    } else {
      // Sizes are validated later, so a stride that would overflow stays at
      // its last value (saturates) instead (an overflow test, not a
      // division per dim: this runs on every call that makes its views).
      steps[d] = used ? stride : 0;
      int64_t next = 0;
      if (used && sizes[d] > 0 && !__builtin_mul_overflow(stride, sizes[d], &next)) stride = next;
    }
  }
  static_assert(kMaxRank == 8, "the initialiser below lists kMaxRank entries");
  const TensorView view{data,
                        dtype,
                        rank,
                        {sizes[0], sizes[1], sizes[2], sizes[3], sizes[4], sizes[5], sizes[6],
                         sizes[7]},
                        {steps[0], steps[1], steps[2], steps[3], steps[4], steps[5], steps[6],
                         steps[7]}};
  return view;
}

namespace {
TensorView view_from_lists(void* data, DType dtype, std::initializer_list<int64_t> shape,
                           const std::initializer_list<int64_t>* strides) {
  if (strides != nullptr && strides->size() != shape.size()) {
    throw Error(Status::kInvalidArgument,
                "make_view: " + std::to_string(strides->size()) + " strides for " +
                    std::to_string(shape.size()) + " dimensions");
  }
  if (shape.size() > static_cast<size_t>(kMaxRank)) {
    throw Error(Status::kInvalidArgument, "make_view: rank " + std::to_string(shape.size()) +
                                              " exceeds kMaxRank " + std::to_string(kMaxRank));
  }
  return make_view(data, dtype, static_cast<int>(shape.size()), shape.begin(),
                   strides ? strides->begin() : nullptr);
}
}  // namespace

TensorView make_view(float* data, std::initializer_list<int64_t> shape) {
  return view_from_lists(data, DType::kF32, shape, nullptr);
}
TensorView make_view(const float* data, std::initializer_list<int64_t> shape) {
  return view_from_lists(const_cast<float*>(data), DType::kF32, shape, nullptr);
}
TensorView make_view(float* data, std::initializer_list<int64_t> shape,
                     std::initializer_list<int64_t> strides) {
  return view_from_lists(data, DType::kF32, shape, &strides);
}
TensorView make_view(const float* data, std::initializer_list<int64_t> shape,
                     std::initializer_list<int64_t> strides) {
  return view_from_lists(const_cast<float*>(data), DType::kF32, shape, &strides);
}
TensorView make_index_view(int64_t* data, std::initializer_list<int64_t> shape) {
  return view_from_lists(data, DType::kI64, shape, nullptr);
}
TensorView make_index_view(const int64_t* data, std::initializer_list<int64_t> shape) {
  return view_from_lists(const_cast<int64_t*>(data), DType::kI64, shape, nullptr);
}
TensorView make_bool_view(const uint8_t* data, std::initializer_list<int64_t> shape) {
  return view_from_lists(const_cast<uint8_t*>(data), DType::kBool, shape, nullptr);
}
TensorView make_bool_view(const uint8_t* data, std::initializer_list<int64_t> shape,
                          std::initializer_list<int64_t> strides) {
  return view_from_lists(const_cast<uint8_t*>(data), DType::kBool, shape, &strides);
}

namespace {
constexpr auto kAlgorithmNames = detail::name_table<Algorithm>(
    "parse_algorithm", "algorithm",
    {{Algorithm::kAuto, "auto"},
     {Algorithm::kThreePassReload, "three-pass-reload"},
     {Algorithm::kThreePassRecompute, "three-pass-recompute"},
     {Algorithm::kTwoPass, "two-pass"},
     {Algorithm::kOnline, "online"}});
constexpr auto kEmptyRowNames = detail::name_table<EmptyRow>(
    "parse_empty_row", "empty_row policy", {{EmptyRow::kZero, "zero"}, {EmptyRow::kNan, "nan"}});
}  // namespace

Algorithm parse_algorithm(std::string_view name) { return kAlgorithmNames.parse(name); }
const char* algorithm_name(Algorithm algorithm) noexcept { return kAlgorithmNames.name(algorithm); }

EmptyRow parse_empty_row(std::string_view name) { return kEmptyRowNames.parse(name); }
const char* empty_row_name(EmptyRow policy) noexcept { return kEmptyRowNames.name(policy); }

}  // namespace smax
