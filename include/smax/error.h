// smax/error.h: the one exception type every public C++ entry point throws.
//
// Contract: a public function either completes, or throws smax::Error before
// writing anything to its destination. The message names the offending
// argument and value, e.g. "softmax: axis 3 is out of range for rank 2".
#pragma once

#include <stdexcept>
#include <string>

namespace smax {

/// Why a call failed. Mirrors the C ABI's status codes.
enum class Status : int {
  kOk = 0,
  kInvalidArgument = 1,  ///< bad shape, stride, pointer, option or value
  kUnsupported = 2,      ///< valid request that this build cannot serve
  kOutOfMemory = 3,      ///< a scratch allocation failed
  kInternal = 4,         ///< a bug in smax; please report it
};

/// Human-readable name of a status ("invalid argument", ...).
const char* status_name(Status status) noexcept;

/// Exception thrown by every public smax function on bad input.
class Error : public std::runtime_error {
 public:
  Error(Status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  Status status() const noexcept { return status_; }

 private:
  Status status_;
};

}  // namespace smax
