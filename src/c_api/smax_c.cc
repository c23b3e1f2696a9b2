// src/c_api/smax_c.cc: the C ABI (include/smax/c/smax.h) over the C++ API.
//
// Every entry point runs its body inside guarded(), which turns every C++
// exception into a status and a thread-local message: smax::Error keeps its
// status, std::bad_alloc is SMAX_STATUS_OUT_OF_MEMORY, anything else is
// SMAX_STATUS_INTERNAL. Descriptors are validated here only as far as needed
// to convert them safely (rank bounds before copying the arrays, dtype values
// before casting); everything else is the C++ ops' validation.
#include "smax/c/smax.h"

#include <cstring>
#include <exception>
#include <new>
#include <string>

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

namespace {

thread_local std::string t_last_error;
thread_local std::string t_string_result;  // storage for returned strings

// Sets the thread's message without ever throwing (an allocation failure
// leaves a fixed message).
void set_error(const char* message) noexcept {
  try {
    t_last_error = message;
  } catch (...) {
    try {
      t_last_error.clear();
    } catch (...) {
    }
  }
}

[[noreturn]] void fail(const std::string& message) {
  throw smax::Error(smax::Status::kInvalidArgument, message);
}

template <typename Fn>
smax_status guarded(Fn&& fn) noexcept {
  try {
    fn();
    t_last_error.clear();  // clear() never throws
    return SMAX_STATUS_OK;
  } catch (const smax::Error& e) {
    set_error(e.what());
    const int s = static_cast<int>(e.status());
    return (s >= 1 && s <= 4) ? static_cast<smax_status>(s) : SMAX_STATUS_INTERNAL;
  } catch (const std::bad_alloc&) {
    set_error("smax: out of memory");
    return SMAX_STATUS_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_error((std::string("smax: internal error: ") + e.what()).c_str());
    return SMAX_STATUS_INTERNAL;
  } catch (...) {
    set_error("smax: internal error: unknown exception");
    return SMAX_STATUS_INTERNAL;
  }
}

bool valid_dtype(int32_t dtype) { return dtype == SMAX_DTYPE_F32 || dtype == SMAX_DTYPE_BOOL; }

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

smax::SoftmaxOptions to_options(const smax_softmax_options* o, const char* op) {
  smax::SoftmaxOptions out;
  if (o == nullptr) return out;
  if (o->struct_size != sizeof(smax_softmax_options)) {
    fail(std::string(op) + ": options.struct_size " + std::to_string(o->struct_size) +
         " is not sizeof(smax_softmax_options) = " +
         std::to_string(sizeof(smax_softmax_options)) +
         " (initialise options with smax_softmax_options_init)");
  }
  out.axis = o->axis;
  out.scale = o->scale;
  out.temperature = o->temperature;
  // Enum values are range-checked by the ops (they name the bad value).
  out.algorithm = static_cast<smax::Algorithm>(o->algorithm);
  out.empty_row = static_cast<smax::EmptyRow>(o->empty_row);
  out.threads = o->threads;
  if (o->additive_mask != nullptr) out.additive_mask = to_view(o->additive_mask, op, "additive_mask");
  if (o->bool_mask != nullptr) out.bool_mask = to_view(o->bool_mask, op, "bool_mask");
  return out;
}

using ForwardFn = void (*)(const smax::TensorView&, const smax::TensorView&,
                           const smax::SoftmaxOptions&);
using BackwardFn = void (*)(const smax::TensorView&, const smax::TensorView&,
                            const smax::TensorView&, const smax::SoftmaxOptions&);

smax_status forward(ForwardFn fn, const char* op, const smax_tensor* src, const smax_tensor* dst,
                    const smax_softmax_options* options) noexcept {
  return guarded([&] {
    const smax::TensorView s = to_view(src, op, "src");
    const smax::TensorView d = to_view(dst, op, "dst");
    fn(s, d, to_options(options, op));
  });
}

smax_status backward(BackwardFn fn, const char* op, const smax_tensor* y, const smax_tensor* dy,
                     const smax_tensor* dx, const smax_softmax_options* options) noexcept {
  return guarded([&] {
    const smax::TensorView vy = to_view(y, op, "y");
    const smax::TensorView vdy = to_view(dy, op, "dy");
    const smax::TensorView vdx = to_view(dx, op, "dx");
    fn(vy, vdy, vdx, to_options(options, op));
  });
}

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
  if (options == nullptr) return;
  std::memset(options, 0, sizeof *options);
  options->struct_size = sizeof(smax_softmax_options);
  options->algorithm = SMAX_ALGORITHM_AUTO;
  options->axis = -1;
  options->scale = 1.0f;
  options->temperature = 1.0f;
  options->additive_mask = nullptr;
  options->bool_mask = nullptr;
  options->empty_row = SMAX_EMPTY_ROW_ZERO;
  options->threads = 0;
}

smax_status smax_softmax(const smax_tensor* src, const smax_tensor* dst,
                         const smax_softmax_options* options) {
  return forward(&smax::softmax, "softmax", src, dst, options);
}
smax_status smax_log_softmax(const smax_tensor* src, const smax_tensor* dst,
                             const smax_softmax_options* options) {
  return forward(&smax::log_softmax, "log_softmax", src, dst, options);
}
smax_status smax_logsumexp(const smax_tensor* src, const smax_tensor* dst,
                           const smax_softmax_options* options) {
  return forward(&smax::logsumexp, "logsumexp", src, dst, options);
}
smax_status smax_softmax_backward(const smax_tensor* y, const smax_tensor* dy,
                                  const smax_tensor* dx, const smax_softmax_options* options) {
  return backward(&smax::softmax_backward, "softmax_backward", y, dy, dx, options);
}
smax_status smax_log_softmax_backward(const smax_tensor* y, const smax_tensor* dy,
                                      const smax_tensor* dx,
                                      const smax_softmax_options* options) {
  return backward(&smax::log_softmax_backward, "log_softmax_backward", y, dy, dx, options);
}

const char* smax_last_error(void) { return t_last_error.c_str(); }

const char* smax_status_name(smax_status status) {
  const int s = static_cast<int>(status);
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

const char* smax_version(void) { return smax::version(); }

}  // extern "C"
