#!/usr/bin/env bash
# scripts/build.sh: configure and build smax (Release by default).
#
#   scripts/build.sh [TARGET...]        # default: every target
# Environment: BUILD_DIR (build), BUILD_TYPE (Release), JOBS (2),
#              CMAKE_ARGS (extra configure arguments, e.g. "-DSMAX_SANITIZE=address;undefined").
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
BUILD_TYPE=${BUILD_TYPE:-Release}
JOBS=${JOBS:-2}
read -r -a EXTRA <<<"${CMAKE_ARGS:-}"

cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE="$BUILD_TYPE" "${EXTRA[@]}"
if [ $# -eq 0 ]; then
  cmake --build "$BUILD_DIR" -j"$JOBS"
else
  targets=()
  for t in "$@"; do targets+=(--target "$t"); done
  cmake --build "$BUILD_DIR" -j"$JOBS" "${targets[@]}"
fi
