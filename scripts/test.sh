#!/usr/bin/env bash
# scripts/test.sh: installs what is missing, builds everything (Release) and
# runs every test with CTest, printing its summary. Called by .ci/run.
#
#   scripts/test.sh [ctest options]     # e.g. -R cli  or  -LE slow
# Environment: as scripts/build.sh (BUILD_DIR, BUILD_TYPE, JOBS, CMAKE_ARGS).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-2}
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$JOBS" "$@"
