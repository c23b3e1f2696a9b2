#!/usr/bin/env bash
# scripts/setup.sh: install the Debian/Ubuntu packages smax needs to build and
# test, and only those that are missing (no apt-get at all when everything is
# there). Idempotent; runs unattended (no prompts, stdin not needed).
#
#   scripts/setup.sh            # as root, or as a user with sudo
set -euo pipefail

PACKAGES=(
  cmake             # >= 3.20 (Debian 12 has 3.25)
  make
  g++               # C++17, OpenMP (libgomp comes with GCC)
  pkg-config        # the install test checks smax.pc with it
  libhwy-dev        # Google Highway: SIMD kernels, every target, run-time dispatch
  libgtest-dev      # GoogleTest (tests/)
  libgmock-dev
  libbenchmark-dev  # Google Benchmark (bench/)
  librandom123-dev  # Random123 Philox: the counter-based RNG of the samplers (header-only)
  libopenblas-dev   # SGEMM for the chunks of linear_cross_entropy
  libopenmpi-dev    # MPI for smax_mpi (smax/mpi.h) and the tests/mpi suite (optional to build)
  openmpi-bin       # mpirun, which CTest runs the tests/mpi programs with
)

installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

missing=()
if command -v dpkg-query >/dev/null 2>&1; then
  for p in "${PACKAGES[@]}"; do
    installed "$p" || missing+=("$p")
  done
else
  echo "setup.sh: not a Debian-based system; install the equivalents of:" >&2
  echo "  ${PACKAGES[*]}" >&2
  exit 1
fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup.sh: all dependencies are installed"
  exit 0
fi

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
  else
    echo "setup.sh: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi

echo "setup.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -q </dev/null
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
