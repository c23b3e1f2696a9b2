#!/usr/bin/env bash
# scripts/run_main.sh: the main job. Installs what is missing, builds the
# `smax` CLI (Release) and runs `smax compare`: smax's softmax algorithms
# against each other, a naive loop and memcpy, over one row of 1K..32M
# elements, with ns/element, GB/s and the max error vs float64.
#
#   scripts/run_main.sh [smax compare options]   # e.g. --threads 2 --sizes 1K..1M
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
scripts/build.sh smax_cli
BUILD_DIR=${BUILD_DIR:-build}
exec "$BUILD_DIR/smax" compare "$@"
