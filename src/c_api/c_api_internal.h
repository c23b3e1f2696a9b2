// src/c_api/c_api_internal.h: helpers shared by the C ABI translation units
// (smax_c*.cc): the exception guard, descriptor and options conversion.
//
// Every C entry point runs its body inside guarded(), which turns every C++
// exception into a status and a thread-local message: smax::Error keeps its
// status, std::bad_alloc is SMAX_STATUS_OUT_OF_MEMORY, anything else is
// SMAX_STATUS_INTERNAL. Descriptors and options are validated here only as
// far as needed to convert them safely (rank bounds before copying the
// arrays, dtype values before casting, struct_size before reading fields,
// booleans); everything else is the C++ ops' validation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <new>
#include <optional>
#include <string>

#include "smax/c/smax.h"
#include "smax/error.h"
#include "smax/loss.h"
#include "smax/options.h"
#include "smax/tensor.h"

namespace smax::capi {

/// Sets the calling thread's smax_last_error() message; never throws.
void set_error(const char* message) noexcept;
/// Clears the calling thread's message; never throws.
void clear_error() noexcept;
/// The calling thread's message ("" after a successful call).
const char* last_error() noexcept;

/// Throws smax::Error(kInvalidArgument, message).
[[noreturn]] void fail(const std::string& message);

/// Runs `fn`, mapping every exception to a status and a message.
template <typename Fn>
smax_status guarded(Fn&& fn) noexcept {
  try {
    fn();
    clear_error();
    return SMAX_STATUS_OK;
  } catch (const smax::Error& e) {
    set_error(e.what());
    const int s = static_cast<int>(e.status());
    return (s >= 1 && s <= 4) ? static_cast<smax_status>(s) : SMAX_STATUS_INTERNAL;
  } catch (const std::bad_alloc&) {
    set_error("smax: out of memory");
    return SMAX_STATUS_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    try {
      set_error((std::string("smax: internal error: ") + e.what()).c_str());
    } catch (...) {
      set_error("smax: internal error");
    }
    return SMAX_STATUS_INTERNAL;
  } catch (...) {
    set_error("smax: internal error: unknown exception");
    return SMAX_STATUS_INTERNAL;
  }
}

/// True for the dtype values smax_tensor accepts.
bool valid_dtype(int32_t dtype) noexcept;

/// Converts a required descriptor (null -> error naming `name`).
smax::TensorView to_view(const smax_tensor* t, const char* op, const char* name);
/// Converts an optional descriptor (null -> nullopt).
std::optional<smax::TensorView> to_optional_view(const smax_tensor* t, const char* op,
                                                 const char* name);

/// SoftmaxOptions from the C struct (null -> defaults).
smax::SoftmaxOptions to_options(const smax_softmax_options* o, const char* op);
/// LossOptions from the C struct (null -> defaults).
smax::LossOptions to_loss(const smax_loss_options* o, const char* op);

/// Validates a versioned struct's size (see smax/c/smax.h, "Versioned
/// structs"): struct_size < min_size -> invalid argument; larger than
/// known_size -> the bytes [known_size, struct_size) must all be zero, else
/// unsupported. min_size is the size of the oldest version accepted (the
/// caller then reads only the fields struct_size covers); `arg` names the
/// argument ("params", "loss", ...), `type` the C type.
void check_struct_size(const void* p, uint32_t struct_size, size_t known_size, size_t min_size,
                       const char* op, const char* arg, const char* type);

/// Returns `p` after check_struct_size (null stays null: use the defaults).
/// min_size defaults to sizeof(T): structs that never grew accept only their
/// own size or a larger, zero-tailed one.
template <typename T>
const T* checked(const T* p, const char* op, const char* arg, const char* type,
                 size_t min_size = sizeof(T)) {
  if (p != nullptr) check_struct_size(p, p->struct_size, sizeof(T), min_size, op, arg, type);
  return p;
}

/// A C boolean field: 0 or 1, anything else is an invalid argument.
bool to_bool(int32_t value, const char* op, const char* name);

// ---- shared wrappers for the common op shapes ----------------------------------

/// op(a, b, options): forward normalisers (src, dst).
using UnaryFn = void (*)(const smax::TensorView&, const smax::TensorView&,
                         const smax::SoftmaxOptions&);
smax_status unary_op(UnaryFn fn, const char* op, const smax_tensor* a, const char* a_name,
                     const smax_tensor* b, const char* b_name,
                     const smax_softmax_options* options) noexcept;

/// op(a, b, c, options): backward passes (y or src, dy, dsrc).
using TernaryFn = void (*)(const smax::TensorView&, const smax::TensorView&,
                           const smax::TensorView&, const smax::SoftmaxOptions&);
smax_status ternary_op(TernaryFn fn, const char* op, const smax_tensor* a, const char* a_name,
                       const smax_tensor* b, const char* b_name, const smax_tensor* c,
                       const char* c_name, const smax_softmax_options* options) noexcept;

/// op(src, target, dst, loss, options): losses without parameters.
using LossFn = void (*)(const smax::TensorView&, const smax::TensorView&,
                        const smax::TensorView&, const smax::LossOptions&,
                        const smax::SoftmaxOptions&);
smax_status loss_op(LossFn fn, const char* op, const smax_tensor* src, const smax_tensor* target,
                    const smax_tensor* dst, const smax_loss_options* loss,
                    const smax_softmax_options* options) noexcept;

/// op(src, target, dloss, dsrc, loss, options): their backward passes.
using LossBackwardFn = void (*)(const smax::TensorView&, const smax::TensorView&,
                                const smax::TensorView&, const smax::TensorView&,
                                const smax::LossOptions&, const smax::SoftmaxOptions&);
smax_status loss_backward_op(LossBackwardFn fn, const char* op, const smax_tensor* src,
                             const smax_tensor* target, const smax_tensor* dloss,
                             const smax_tensor* dsrc, const smax_loss_options* loss,
                             const smax_softmax_options* options) noexcept;

}  // namespace smax::capi
