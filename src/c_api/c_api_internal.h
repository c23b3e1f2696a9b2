// src/c_api/c_api_internal.h: helpers shared by the C ABI translation units
// (smax_c*.cc): the exception guard, descriptor and options conversion, and
// the three shapes every entry point reduces to: an op is
// call(op, fn, converters...), a params struct converter is
// from_struct<Out>(...), an options initialiser is init_struct<Defaults>(...).
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
#include <cstring>
#include <exception>
#include <new>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>

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

// ---- one C entry point = one call() --------------------------------------------

/// A required tensor argument: converted by to_view (a null pointer is an
/// error naming `name`).
struct Tensor {
  const smax_tensor* t;
  const char* name;
  smax::TensorView operator()(const char* op) const { return to_view(t, op, name); }
};
/// An optional tensor argument: converted by to_optional_view (null -> nullopt).
struct OptionalTensor {
  const smax_tensor* t;
  const char* name;
  std::optional<smax::TensorView> operator()(const char* op) const {
    return to_optional_view(t, op, name);
  }
};
/// A parameter converter bound to its C arguments: convert(c..., op) when the
/// op runs (e.g. with(to_ssmax, params), with(to_ce, ce, loss)).
template <typename Convert, typename... C>
auto with(Convert convert, C... c) {
  return [convert, c...](const char* op) { return convert(c..., op); };
}

/// One argument of call(): softmax and loss options convert with to_options /
/// to_loss, converters (Tensor, OptionalTensor, with(...)) run with `op`,
/// anything else (scalars) passes unchanged.
template <typename A>
auto convert_arg(const A& a, const char* op) {
  if constexpr (std::is_same_v<A, const smax_softmax_options*>) {
    return to_options(a, op);
  } else if constexpr (std::is_same_v<A, const smax_loss_options*>) {
    return to_loss(a, op);
  } else if constexpr (std::is_invocable_v<const A&, const char*>) {
    return a(op);
  } else {
    return a;
  }
}

/// The body of a C op: inside guarded(), converts `args` in order (list
/// initialisation evaluates left to right, so the first bad argument is the
/// one reported) and calls fn(converted...). `fn` is the C++ op, or a lambda
/// where it is overloaded or its arguments need adapting.
template <typename Fn, typename... Args>
smax_status call(const char* op, Fn fn, const Args&... args) noexcept {
  return guarded([&] {
    std::tuple<decltype(convert_arg(args, op))...> converted{convert_arg(args, op)...};
    std::apply(fn, converted);
  });
}

// ---- C structs ------------------------------------------------------------------

/// The C++ `Out` from an optional C struct: Out's defaults when `p` is null,
/// else fill(*p, out) after checked(p, op, arg, type, min_size).
template <typename Out, typename C, typename Fill>
Out from_struct(const C* p, const char* op, const char* arg, const char* type, Fill&& fill,
                size_t min_size = sizeof(C)) {
  Out out;
  if (checked(p, op, arg, type, min_size) != nullptr) fill(*p, out);
  return out;
}

/// A C options struct's _init: null -> nothing; else every byte zero (padding,
/// pointers: NULL), struct_size = sizeof(C), then fill(*o, Defaults{}) copies
/// the C++ defaults into the other fields.
template <typename Defaults, typename C, typename Fill>
void init_struct(C* o, Fill&& fill) noexcept {
  if (o == nullptr) return;
  std::memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  fill(*o, Defaults{});
}

}  // namespace smax::capi
