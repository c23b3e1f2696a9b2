// src/core/errors.h: the argument-error plumbing every op shares.
//
// Contract:
//   fail(op, message) throws smax::Error(Status::kInvalidArgument,
//     "<op>: <message>"); it never returns. op is the public entry point's
//     name (e.g. "softmax", "soft_nms") and message says what was wrong.
//   num(v) formats a number for such a message the way printf's "%.9g"
//     does (9 significant digits, shortest of fixed/exponent form, "nan",
//     "inf", "-inf"), independent of the global C and C++ locales. Floats
//     promote exactly, so num(float) prints the float's value; integers
//     belong in std::to_string (num(int64) would round past 2^53 and switch
//     to exponent form).
// Messages are part of the tested surface (tests, Python and CLI match on
// them): change the wording here only together with those tests.
#pragma once

#include <locale>
#include <sstream>
#include <string>

#include "smax/error.h"

namespace smax::detail {

[[noreturn]] inline void fail(const char* op, const std::string& message) {
  throw Error(Status::kInvalidArgument, std::string(op) + ": " + message);
}

inline std::string num(double v) {
  std::ostringstream os;
  os.imbue(std::locale::classic());
  os.precision(9);
  os << v;
  return os.str();
}

}  // namespace smax::detail
