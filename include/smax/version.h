// smax/version.h
#pragma once

#define SMAX_VERSION_MAJOR 0
#define SMAX_VERSION_MINOR 1
#define SMAX_VERSION_PATCH 0

namespace smax {
/// "0.1.0"
const char* version() noexcept;
}  // namespace smax
