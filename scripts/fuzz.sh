#!/usr/bin/env bash
# scripts/fuzz.sh: build the libFuzzer harnesses (fuzz/, clang + ASan +
# UBSan) and run each for a fixed time, printing executions per target.
#
#   scripts/fuzz.sh [TARGET...]     # default: every target; TARGET is an op
#                                   # of the softmax family:
#                                   #   softmax log_softmax logsumexp
#                                   #   softmax_backward log_softmax_backward
#                                   # or a group of the other ops (the op is
#                                   # picked by the first input byte):
#                                   #   normalizers losses sampling options
#                                   # (options: op options the CLI table
#                                   # does not expose, fuzz/harness_ops.h)
# Environment: FUZZ_SECONDS (60 per target), FUZZ_DIR (build-fuzz), JOBS (2:
#              build jobs, and how many fuzzers run at once), CC / CXX
#              (clang-14 / clang++-14), FUZZ_ARGS (extra libFuzzer flags).
#
# The build instruments every object with ASan + UBSan and all but the
# Highway kernels with libFuzzer's coverage (SMAX_SANITIZE_KERNEL_FLAGS in the
# top-level CMakeLists.txt; the kernels keep ASan only), for the reduced set
# of Highway targets (docs/reliability.md has the measured compile times).
#
# Each target starts from fuzz/corpus/<op>/ (kept in git, small) plus a
# working corpus in $FUZZ_DIR/corpus/<op>/ that grows across runs. A crash,
# a contract violation (the harness aborts with a description), a leak or a
# timeout stops that target; its input is copied to fuzz/regressions/<op>/,
# which the CTest test fuzz.replay.<op> replays in every build. Exit status:
# 0 when every target ran clean for its whole duration.
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_PER_TARGET=${FUZZ_SECONDS:-60}
FUZZ_DIR=${FUZZ_DIR:-build-fuzz}
JOBS=${JOBS:-2}
export CC=${CC:-clang-14} CXX=${CXX:-clang++-14}
ALL=(softmax log_softmax logsumexp softmax_backward log_softmax_backward normalizers losses sampling options attention)
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${ALL[@]}")
read -r -a extra <<<"${FUZZ_ARGS:-}"

if ! command -v "$CXX" >/dev/null 2>&1; then
  echo "fuzz.sh: $CXX not found (Debian: apt-get install clang-14 libclang-rt-14-dev)" >&2
  exit 1
fi

cmake -S . -B "$FUZZ_DIR" -DCMAKE_BUILD_TYPE=Release -DSMAX_BUILD_FUZZERS=ON \
  -DSMAX_BUILD_TESTS=OFF -DSMAX_BUILD_BENCHMARKS=OFF -DSMAX_BUILD_TOOLS=OFF >/dev/null
build_targets=()
for t in "${targets[@]}"; do build_targets+=(--target "fuzz_$t"); done
t_build=$(date +%s)
cmake --build "$FUZZ_DIR" -j"$JOBS" "${build_targets[@]}"
echo "fuzz.sh: build took $(( $(date +%s) - t_build )) s"

export OMP_WAIT_POLICY=PASSIVE OPENBLAS_NUM_THREADS=1
status=0
results=()
run_target() {  # runs one fuzzer; its log is $FUZZ_DIR/fuzz_$1.log
  local t=$1
  local work="$FUZZ_DIR/corpus/$t" artifacts="$FUZZ_DIR/artifacts/$t/"
  mkdir -p "$work" "$artifacts" "fuzz/corpus/$t"
  rm -f "$artifacts"* "$FUZZ_DIR/fuzz_$t.rc"
  local rc=0
  "$FUZZ_DIR/fuzz/fuzz_$t" -max_total_time="$SECONDS_PER_TARGET" -print_final_stats=1 \
    -max_len=4096 -timeout=60 -rss_limit_mb=6144 -artifact_prefix="$artifacts" \
    "${extra[@]}" "$work" "fuzz/corpus/$t" >"$FUZZ_DIR/fuzz_$t.log" 2>&1 || rc=$?
  echo $rc >"$FUZZ_DIR/fuzz_$t.rc"
}
# JOBS fuzzers at a time.
running=0
for t in "${targets[@]}"; do
  echo "== fuzz_$t: ${SECONDS_PER_TARGET} s =="
  run_target "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$JOBS" ]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait || true
for t in "${targets[@]}"; do
  log="$FUZZ_DIR/fuzz_$t.log"
  artifacts="$FUZZ_DIR/artifacts/$t/"
  rc=$(cat "$FUZZ_DIR/fuzz_$t.rc" 2>/dev/null || echo 1)
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  if [ -z "$execs" ]; then
    execs=$(grep -o '^#[0-9]*' "$log" | tail -1 | tr -d '#')
  fi
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*')
  if [ $rc -eq 0 ]; then
    results+=("fuzz_$t: clean, ${execs:-?} executions in ${SECONDS_PER_TARGET} s, coverage ${cov:-?} edges")
  else
    status=1
    mkdir -p "fuzz/regressions/$t"
    for f in "$artifacts"*; do
      [ -f "$f" ] || continue
      cp "$f" "fuzz/regressions/$t/$(basename "$f")"
      echo "fuzz.sh: kept $f as fuzz/regressions/$t/$(basename "$f")"
    done
    grep -A12 'VIOLATION\|ERROR: \|runtime error' "$log" | head -40 || true
    results+=("fuzz_$t: FAILED (exit $rc) after ${execs:-?} executions; log $log")
  fi
done

echo "== fuzz summary (${SECONDS_PER_TARGET} s per target) =="
for r in "${results[@]}"; do echo "  $r"; done
exit $status
