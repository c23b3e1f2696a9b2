// src/c_api/smax_c.cc: the C ABI (include/smax/c/smax.h) over the C++ API:
// the shared helpers of c_api_internal.h (thread-local last error, guard,
// descriptor / options conversion, struct_size rule), the tensor and
// options initialisers, the softmax family, errors and runtime. The other
// op families are in smax_c_<family>.cc.
#include "smax/c/smax.h"

#include <cstddef>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <type_traits>

#include "c_api_internal.h"
#include "smax/smax.h"

static_assert(SMAX_MAX_RANK == smax::kMaxRank, "SMAX_MAX_RANK must match smax::kMaxRank");
static_assert(static_cast<int>(SMAX_STATUS_INTERNAL) == static_cast<int>(smax::Status::kInternal),
              "status codes must mirror smax::Status");
static_assert(static_cast<int>(SMAX_STATUS_OUT_OF_MEMORY) ==
                  static_cast<int>(smax::Status::kOutOfMemory),
              "status codes must mirror smax::Status");
static_assert(static_cast<int>(SMAX_ALGORITHM_ONLINE) == static_cast<int>(smax::Algorithm::kOnline),
              "algorithm values must mirror smax::Algorithm");
static_assert(static_cast<int>(SMAX_EMPTY_ROW_NAN) == static_cast<int>(smax::EmptyRow::kNan),
              "empty_row values must mirror smax::EmptyRow");
static_assert(static_cast<int>(SMAX_DTYPE_BOOL) == static_cast<int>(smax::DType::kBool),
              "dtype values must mirror smax::DType");
static_assert(static_cast<int>(SMAX_DTYPE_I64) == static_cast<int>(smax::DType::kI64) &&
                  static_cast<int>(SMAX_DTYPE_F64) == static_cast<int>(smax::DType::kF64) &&
                  static_cast<int>(SMAX_DTYPE_F16) == static_cast<int>(smax::DType::kF16) &&
                  static_cast<int>(SMAX_DTYPE_BF16) == static_cast<int>(smax::DType::kBF16) &&
                  static_cast<int>(SMAX_DTYPE_U8) == static_cast<int>(smax::DType::kU8) &&
                  static_cast<int>(SMAX_DTYPE_I8) == static_cast<int>(smax::DType::kI8) &&
                  static_cast<int>(SMAX_DTYPE_I32) == static_cast<int>(smax::DType::kI32),
              "dtype values must mirror smax::DType");
static_assert(static_cast<int>(SMAX_REDUCTION_SUM) == static_cast<int>(smax::Reduction::kSum) &&
                  static_cast<int>(SMAX_REDUCTION_MEAN) ==
                      static_cast<int>(smax::Reduction::kMean),
              "reduction values must mirror smax::Reduction");
static_assert(static_cast<int>(SMAX_EMPTY_MEAN_ZERO) == static_cast<int>(smax::EmptyMean::kZero),
              "empty_mean values must mirror smax::EmptyMean");

// Every versioned struct starts with its uint32_t struct_size (the rule the
// size check and docs/c_api.md rely on).
#define SMAX_CHECK_VERSIONED(T)                                                  \
  static_assert(offsetof(T, struct_size) == 0 &&                                 \
                    std::is_same_v<decltype(T::struct_size), uint32_t> &&        \
                    std::is_standard_layout_v<T>,                                 \
                "struct_size must be the first member (uint32_t) of " #T)
SMAX_CHECK_VERSIONED(smax_softmax_options);
SMAX_CHECK_VERSIONED(smax_loss_options);
SMAX_CHECK_VERSIONED(smax_entmax_bisect_options);
SMAX_CHECK_VERSIONED(smax_sparse_softmax_loss_options);
SMAX_CHECK_VERSIONED(smax_ssmax_options);
SMAX_CHECK_VERSIONED(smax_softpick_options);
SMAX_CHECK_VERSIONED(smax_self_adjust_options);
SMAX_CHECK_VERSIONED(smax_sigmoid_normalizer_options);
SMAX_CHECK_VERSIONED(smax_softplus_normalizer_options);
SMAX_CHECK_VERSIONED(smax_logit_standardization_options);
SMAX_CHECK_VERSIONED(smax_gumbel_softmax_options);
SMAX_CHECK_VERSIONED(smax_softmax_topk_options);
SMAX_CHECK_VERSIONED(smax_sample_options);
SMAX_CHECK_VERSIONED(smax_soft_nms_options);
SMAX_CHECK_VERSIONED(smax_cross_entropy_options);
SMAX_CHECK_VERSIONED(smax_linear_cross_entropy_options);
#undef SMAX_CHECK_VERSIONED

namespace smax::capi {

namespace {
thread_local std::string t_last_error;
// Largest struct_size accepted: guards the zero-tail scan against an
// uninitialised struct_size (no options struct will ever be this large).
constexpr uint32_t kMaxStructSize = 1024;
}  // namespace

void set_error(const char* message) noexcept {
  try {
    t_last_error = message;
  } catch (...) {
    t_last_error.clear();  // clear() never throws
  }
}

void clear_error() noexcept { t_last_error.clear(); }

const char* last_error() noexcept { return t_last_error.c_str(); }

void fail(const std::string& message) {
  throw smax::Error(smax::Status::kInvalidArgument, message);
}

bool valid_dtype(int32_t dtype) noexcept {
  return dtype >= SMAX_DTYPE_F32 && dtype <= SMAX_DTYPE_I32;
}

smax::TensorView to_view(const smax_tensor* t, const char* op, const char* name) {
  if (t == nullptr) fail(std::string(op) + ": " + name + " is a null smax_tensor pointer");
  if (t->rank < 0 || t->rank > SMAX_MAX_RANK) {
    fail(std::string(op) + ": " + name + " rank " + std::to_string(t->rank) + " is outside [0, " +
         std::to_string(SMAX_MAX_RANK) + "]");
  }
  if (!valid_dtype(t->dtype)) {
    fail(std::string(op) + ": " + name + " has unknown dtype value " + std::to_string(t->dtype));
  }
  smax::TensorView v;
  v.data = t->data;
  v.dtype = static_cast<smax::DType>(t->dtype);
  v.rank = t->rank;
  for (int d = 0; d < t->rank; ++d) {
    v.shape[d] = t->shape[d];
    v.strides[d] = t->strides[d];
  }
  return v;
}

std::optional<smax::TensorView> to_optional_view(const smax_tensor* t, const char* op,
                                                 const char* name) {
  if (t == nullptr) return std::nullopt;
  return to_view(t, op, name);
}

void check_struct_size(const void* p, uint32_t struct_size, size_t known_size, size_t min_size,
                       const char* op, const char* arg, const char* type) {
  if (struct_size < min_size) {
    fail(std::string(op) + ": " + arg + ".struct_size " + std::to_string(struct_size) +
         " is smaller than " +
         (min_size == known_size ? "sizeof(" + std::string(type) + ")"
                                 : "the oldest " + std::string(type) + " (version 0.1)") +
         " = " + std::to_string(min_size) + " (initialise it with " + type + "_init)");
  }
  if (struct_size > kMaxStructSize) {
    fail(std::string(op) + ": " + arg + ".struct_size " + std::to_string(struct_size) +
         " is larger than " + std::to_string(kMaxStructSize) + " (initialise it with " + type +
         "_init)");
  }
  const auto* bytes = static_cast<const unsigned char*>(p);
  for (size_t i = known_size; i < struct_size; ++i) {
    if (bytes[i] != 0) {
      throw smax::Error(smax::Status::kUnsupported,
                        std::string(op) + ": " + arg + " (struct_size " +
                            std::to_string(struct_size) + ") sets byte " + std::to_string(i) +
                            ", a field of a newer " + type + " that this library (sizeof " +
                            std::to_string(known_size) + ") does not know");
    }
  }
}

bool to_bool(int32_t value, const char* op, const char* name) {
  if (value != 0 && value != 1) {
    fail(std::string(op) + ": " + name + " must be 0 or 1, got " + std::to_string(value));
  }
  return value == 1;
}

smax::SoftmaxOptions to_options(const smax_softmax_options* o, const char* op) {
  smax::SoftmaxOptions out;
  if (checked(o, op, "options", "smax_softmax_options") == nullptr) return out;
  out.axis = o->axis;
  out.scale = o->scale;
  out.temperature = o->temperature;
  // Enum values are range-checked by the ops (they name the bad value).
  out.algorithm = static_cast<smax::Algorithm>(o->algorithm);
  out.empty_row = static_cast<smax::EmptyRow>(o->empty_row);
  out.threads = o->threads;
  out.additive_mask = to_optional_view(o->additive_mask, op, "additive_mask");
  out.bool_mask = to_optional_view(o->bool_mask, op, "bool_mask");
  return out;
}

smax::LossOptions to_loss(const smax_loss_options* o, const char* op) {
  smax::LossOptions out;
  if (checked(o, op, "loss", "smax_loss_options") == nullptr) return out;
  out.ignore_index = o->ignore_index;
  // Range-checked by the ops (LossRows names the bad value).
  out.reduction = static_cast<smax::Reduction>(o->reduction);
  out.empty_mean = static_cast<smax::EmptyMean>(o->empty_mean);
  out.weight = to_optional_view(o->weight, op, "weight");
  return out;
}

}  // namespace smax::capi

using namespace smax::capi;

namespace {

thread_local std::string t_string_result;  // storage for returned strings

const char* string_result(const std::string& s) noexcept {
  try {
    t_string_result = s;
  } catch (...) {
    return "";
  }
  return t_string_result.c_str();
}

}  // namespace

extern "C" {

smax_status smax_tensor_init(smax_tensor* tensor, void* data, int32_t dtype, int32_t rank,
                             const int64_t* shape, const int64_t* strides) {
  return guarded([&] {
    if (tensor == nullptr) fail("smax_tensor_init: tensor is null");
    if (rank < 0 || rank > SMAX_MAX_RANK) {
      fail("smax_tensor_init: rank " + std::to_string(rank) + " is outside [0, " +
           std::to_string(SMAX_MAX_RANK) + "]");
    }
    if (!valid_dtype(dtype)) fail("smax_tensor_init: unknown dtype value " + std::to_string(dtype));
    if (shape == nullptr && rank > 0) fail("smax_tensor_init: shape is null for rank " +
                                           std::to_string(rank));
    smax_tensor t;
    std::memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dtype;
    t.rank = rank;
    for (int d = 0; d < rank; ++d) t.shape[d] = shape[d];
    if (strides != nullptr) {
      for (int d = 0; d < rank; ++d) t.strides[d] = strides[d];
    } else {
      // Row-major; saturate instead of overflowing (the ops reject such shapes).
      int64_t s = 1;
      for (int d = rank; d-- > 0;) {
        t.strides[d] = s;
        const int64_t size = t.shape[d] > 1 ? t.shape[d] : 1;
        if (__builtin_mul_overflow(s, size, &s)) s = INT64_MAX;
      }
    }
    *tensor = t;
  });
}

void smax_softmax_options_init(smax_softmax_options* options) {
  init_struct<smax::SoftmaxOptions>(options, [](smax_softmax_options& o, const auto& d) {
    o.algorithm = static_cast<int32_t>(d.algorithm);
    o.axis = d.axis;
    o.scale = d.scale;
    o.temperature = d.temperature;
    o.empty_row = static_cast<int32_t>(d.empty_row);
    o.threads = d.threads;
  });
}

void smax_loss_options_init(smax_loss_options* options) {
  init_struct<smax::LossOptions>(options, [](smax_loss_options& o, const auto& d) {
    o.reduction = static_cast<int32_t>(d.reduction);
    o.ignore_index = d.ignore_index;
    o.empty_mean = static_cast<int32_t>(d.empty_mean);
  });
}

smax_status smax_softmax(const smax_tensor* src, const smax_tensor* dst,
                         const smax_softmax_options* options) {
  return call("softmax", &smax::softmax, Tensor{src, "src"}, Tensor{dst, "dst"}, options);
}
smax_status smax_log_softmax(const smax_tensor* src, const smax_tensor* dst,
                             const smax_softmax_options* options) {
  return call("log_softmax", &smax::log_softmax, Tensor{src, "src"}, Tensor{dst, "dst"}, options);
}
smax_status smax_logsumexp(const smax_tensor* src, const smax_tensor* dst,
                           const smax_softmax_options* options) {
  return call("logsumexp", &smax::logsumexp, Tensor{src, "src"}, Tensor{dst, "dst"}, options);
}
smax_status smax_softmax_backward(const smax_tensor* y, const smax_tensor* dy,
                                  const smax_tensor* dx, const smax_softmax_options* options) {
  return call("softmax_backward", &smax::softmax_backward, Tensor{y, "y"}, Tensor{dy, "dy"},
              Tensor{dx, "dx"}, options);
}
smax_status smax_log_softmax_backward(const smax_tensor* y, const smax_tensor* dy,
                                      const smax_tensor* dx,
                                      const smax_softmax_options* options) {
  return call("log_softmax_backward", &smax::log_softmax_backward, Tensor{y, "y"},
              Tensor{dy, "dy"}, Tensor{dx, "dx"}, options);
}

smax_status smax_logit_scale_gradients(const smax_tensor* src, const smax_tensor* dsrc,
                                       const smax_softmax_options* options, double* dscale,
                                       double* dtemperature) {
  const char* op = "logit_scale_gradients";
  return guarded([&] {
    const smax::LogitScaleGradients g = smax::logit_scale_gradients(
        to_view(src, op, "src"), to_view(dsrc, op, "dsrc"), to_options(options, op));
    if (dscale != nullptr) *dscale = g.dscale;
    if (dtemperature != nullptr) *dtemperature = g.dtemperature;
  });
}

const char* smax_last_error(void) { return smax::capi::last_error(); }

const char* smax_status_name(smax_status status) {
  // A C caller may pass any int (C enums are ints); loading an enumerator
  // outside the enum's range as a C++ enum value is undefined (UBSan:
  // "not a valid value for type 'smax_status'"), so read its bits.
  int s = 0;
  static_assert(sizeof(s) == sizeof(status), "smax_status is int-sized");
  std::memcpy(&s, &status, sizeof s);
  if (s < 0 || s > 4) return "unknown status";
  return smax::status_name(static_cast<smax::Status>(s));
}

const char* smax_active_target(void) {
  std::string target;
  if (guarded([&] { target = smax::active_target(); }) != SMAX_STATUS_OK) return "";
  return string_result(target);
}

smax_status smax_set_max_target(const char* name) {
  return guarded([&] { smax::set_max_target(name == nullptr ? "" : name); });
}

int32_t smax_max_threads(void) {
  int32_t threads = 1;
  guarded([&] { threads = smax::max_threads(); });
  return threads;
}

smax_status smax_set_max_threads(int32_t threads) {
  return guarded([&] { smax::set_max_threads(threads); });
}

const char* smax_streaming_stores(void) {
  std::string state;
  if (guarded([&] { state = smax::streaming_stores(); }) != SMAX_STATUS_OK) return "";
  return string_result(state);
}

smax_status smax_set_streaming_stores(const char* mode) {
  return guarded([&] {
    if (mode == nullptr) {
      throw smax::Error(smax::Status::kInvalidArgument,
                        "smax_set_streaming_stores: mode is NULL (expected \"on\", \"off\" or "
                        "\"auto\")");
    }
    smax::set_streaming_stores(mode);
  });
}

const char* smax_version(void) { return smax::version(); }

}  // extern "C"
