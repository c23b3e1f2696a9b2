#!/usr/bin/env bash
# scripts/bench_peers.sh: smax against oneDNN, XNNPACK, PyTorch, ONNX Runtime
# and a naive std::exp loop, on the same inputs; table, CSV, JSON, PNG.
#
#   scripts/bench_peers.sh [--no-install] [--quick] [--threads "1 2"] [--rounds 3]
#                          [--out bench-results] [--cases LIST]
#
# Installs what is missing (Debian: libdnnl-dev libxnnpack-dev
# libpthreadpool-dev; pip: torch onnxruntime onnx matplotlib numpy; torch from
# PyPI pulls ~3-4 GB of CUDA wheels), builds Release in $BUILD_DIR
# (default build-perf) and runs, per thread count, ROUNDS alternating rounds
# of bench/peers/smax_peers (C++: smax, oneDNN, XNNPACK, naive, memory floor)
# and bench/peers/bench_peers.py (PyTorch, ONNX Runtime); then
# bench/peers/report.py takes the median over rounds and writes
# $OUT/peers.{csv,json,png}, $OUT/goals.json and $OUT/table.md
# (default $BUILD_DIR/bench-results).
# A peer that cannot be installed is reported as "missing".
set -euo pipefail
cd "$(dirname "$0")/.."

INSTALL=1 QUICK= THREADS="1 2" ROUNDS=3 OUT= CASES= REPS=7
BUILD_DIR=${BUILD_DIR:-build-perf}
# (after the options) results default to $BUILD_DIR/bench-results (git-ignored)
while [ $# -gt 0 ]; do
  case "$1" in
    --no-install) INSTALL=0 ;;
    --quick) QUICK=--quick; ROUNDS=1; REPS=2 ;;
    --threads) THREADS=$2; shift ;;
    --rounds) ROUNDS=$2; shift ;;
    --reps) REPS=$2; shift ;;
    --out) OUT=$2; shift ;;
    --cases) CASES=$2; shift ;;
    *) echo "usage: $0 [--no-install] [--quick] [--threads \"1 2\"] [--rounds N] [--reps N] [--out DIR] [--cases LIST]" >&2; exit 2 ;;
  esac
  shift
done

OUT=${OUT:-$BUILD_DIR/bench-results}
SUDO=
[ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && SUDO=sudo
PY=${PYTHON:-python3}

if [ "$INSTALL" = 1 ]; then
  need=()
  for p in cmake make g++ pkg-config libhwy-dev libbenchmark-dev libdnnl-dev libxnnpack-dev \
           libpthreadpool-dev; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || need+=("$p")
  done
  if [ ${#need[@]} -gt 0 ]; then
    echo "bench_peers: apt-get install ${need[*]}" >&2
    $SUDO apt-get update -qq || true
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" \
      || echo "bench_peers: apt-get failed; missing peers will be reported as missing" >&2
  fi
  for m in numpy:numpy matplotlib:matplotlib onnx:onnx onnxruntime:onnxruntime torch:torch; do
    mod=${m%%:*} pkg=${m##*:}
    $PY -c "import $mod" 2>/dev/null || {
      echo "bench_peers: pip install $pkg" >&2
      $PY -m pip install -q "$pkg" || echo "bench_peers: pip install $pkg failed; reported as missing" >&2
    }
  done
fi

cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" -j"${JOBS:-2}" --target smax_peers smax_bench

mkdir -p "$OUT/raw"
rm -f "$OUT"/raw/*.json
case_args=()
[ -n "$CASES" ] && case_args=(--cases "$CASES")
files=()
for t in $THREADS; do
  for r in $(seq 1 "$ROUNDS"); do
    echo "bench_peers: threads=$t round $r/$ROUNDS: C++ peers" >&2
    f="$OUT/raw/cpp-t$t-r$r.json"
    if [ -x "$BUILD_DIR/bench/peers/smax_peers" ]; then
      "$BUILD_DIR/bench/peers/smax_peers" --threads "$t" --reps "$REPS" $QUICK "${case_args[@]}" --json "$f"
      files+=("$f")
    else
      echo "bench_peers: smax_peers not built (no oneDNN / XNNPACK)" >&2
    fi
    echo "bench_peers: threads=$t round $r/$ROUNDS: Python peers" >&2
    f="$OUT/raw/py-t$t-r$r.json"
    if $PY -c "import numpy" 2>/dev/null; then
      $PY bench/peers/bench_peers.py --threads "$t" --reps "$REPS" $QUICK "${case_args[@]}" --json "$f"
      files+=("$f")
    else
      echo "bench_peers: numpy missing: PyTorch / ONNX Runtime not measured" >&2
    fi
  done
done
$PY bench/peers/report.py --out "$OUT" "${files[@]}" | tee "$OUT/table.md"
