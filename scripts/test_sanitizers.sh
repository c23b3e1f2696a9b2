#!/usr/bin/env bash
# scripts/test_sanitizers.sh: the sanitizer suites (docs/reliability.md).
#
#  * asan: builds build-asan with -DSMAX_SANITIZE="address;undefined" and runs
#    the CTest suite (every test program of scripts/test.sh, the C ABI test
#    and the fuzz corpus / regression replays; the few tests left out are
#    listed below) under AddressSanitizer,
#    LeakSanitizer and UndefinedBehaviorSanitizer; any report fails the test.
#  * tsan: builds build-tsan with -DSMAX_SANITIZE=thread (only the threaded
#    test program) and runs the concurrency tests that use a std::thread pool
#    under ThreadSanitizer (ignore_noninstrumented_modules=1: accesses inside
#    the uninstrumented OpenMP runtime are not reported). libgomp is not
#    TSan-instrumented, so OpenMP's own
#    barriers look like races to TSan (false positives); the OpenMP variant is
#    therefore left out here. The code inside the tasks is the same for both
#    pools (smax::set_parallel_for only swaps the fan-out).
#
# Sanitizer builds compile a reduced set of Highway targets (AVX2, SSE4,
# SCALAR on x86; the TSan build SSE4 and the fallback only; CMake option
# SMAX_HWY_TARGETS=reduced, the default when
# SMAX_SANITIZE is set) and compile the Highway kernel files without
# instrumentation (SMAX_SANITIZE_KERNEL_FLAGS=-fno-sanitize=all, the
# default): ASan on src/kernels/softmax_rows.cc alone took > 25 CPU-minutes
# with clang 14 (uninstrumented: 2.3), see docs/reliability.md. Every other
# file (op layer, references, tests, CLI, harnesses) is instrumented.
#
# The asan suite leaves out (SAN_CTEST_EXCLUDE, a ctest -E regex; set it to
# "" to run everything):
#  * the AVX2 and SSE4 instances of the per-SIMD-target tests
#    (Targets/...Foo/AVX2, .../SSE4): the kernels are not instrumented, and
#    the instrumented code (op layer, gather / scatter, references, tests)
#    is the same for every target, so a second or third target adds run
#    time (AVX2: ~1/4 of the suite) but no sanitizer coverage. EMU128
#    stays: clang's portable fallback, which no other suite runs (the gcc
#    suite's fallback is SCALAR). AVX2 and SSE4 run in the normal suite.
#  * cli.run_threads1_target_scalar: asks for --target scalar, which a clang
#    build does not have (its portable fallback is EMU128); it fails with a
#    usage error, not a sanitizer report.
# Every test program of every op family, the C ABI test, the CLI, the
# examples and the fuzz replays run.
#
#   scripts/test_sanitizers.sh [asan] [tsan]     # default: both
# Environment: JOBS (2), ASAN_DIR (build-asan), TSAN_DIR (build-tsan),
#              CTEST_ARGS (extra ctest arguments for the asan suite),
#              SAN_CTEST_EXCLUDE (see above).
set -euo pipefail
cd "$(dirname "$0")/.."

JOBS=${JOBS:-2}
# clang: gcc 12 needs > 9 CPU-minutes for one instrumented kernel file even
# at -O1; clang 14 about 3 (docs/reliability.md). Override with SAN_CC/SAN_CXX.
SAN_CC=${SAN_CC:-clang-14}
SAN_CXX=${SAN_CXX:-clang++-14}
ASAN_DIR=${ASAN_DIR:-build-asan}
TSAN_DIR=${TSAN_DIR:-build-tsan}
SAN_CTEST_EXCLUDE=${SAN_CTEST_EXCLUDE-/(AVX2|SSE4)( |$)|^cli\.run_threads1_target_scalar$}
suites=("$@")
[ ${#suites[@]} -eq 0 ] && suites=(asan tsan)

# Install clang, its sanitizer runtimes and LLVM's OpenMP when missing (the
# same way scripts/setup.sh installs the base packages).
if [ "$SAN_CXX" = clang++-14 ] && command -v dpkg-query >/dev/null 2>&1; then
  missing=()
  for p in clang-14 libclang-rt-14-dev libomp-14-dev; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    SUDO=()
    [ "$(id -u)" -ne 0 ] && SUDO=(sudo)
    echo "test_sanitizers.sh: installing ${missing[*]}"
    "${SUDO[@]}" apt-get update -q </dev/null
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
  fi
fi
export CC=$SAN_CC CXX=$SAN_CXX

# A build directory configured with another compiler is reconfigured from scratch.
fresh_if_other_compiler() {
  if [ -f "$1/CMakeCache.txt" ] && ! grep -q "^CMAKE_CXX_COMPILER:.*$SAN_CXX" "$1/CMakeCache.txt"; then
    rm -rf "$1/CMakeCache.txt" "$1/CMakeFiles"
  fi
}

status=0
summary=()
now() { date +%s; }

# build_suite NAME DIR CONFIGURE-ARG... -- BUILD-ARG...: configures DIR
# (Release) and builds it, from a fresh cache if another compiler made it; on
# failure records "NAME: FAILED (build failed after N s)" and returns 1. Sets
# t0 and t1 (start, end of the build) for record_suite.
build_suite() {
  local name=$1 dir=$2 conf=()
  shift 2
  while [ "$1" != "--" ]; do conf+=("$1"); shift; done
  shift
  t0=$(now)
  fresh_if_other_compiler "$dir"
  if ! { cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release "${conf[@]}" >/dev/null &&
         cmake --build "$dir" -j"$JOBS" "$@"; }; then
    summary+=("$name: FAILED (build failed after $(( $(now) - t0 )) s)")
    status=1
    return 1
  fi
  t1=$(now)
}

# record_suite NAME RC LOG: records the suite's result, its build and test
# times (t0, t1 from build_suite; now) and the last ctest count line of LOG.
record_suite() {
  local name=$1 rc=$2 log=$3
  local t2; t2=$(now)
  local counts; counts=$(grep -E 'tests passed|tests failed' "$log" | tail -1)
  summary+=("$name: $( [ "$rc" -eq 0 ] && echo PASSED || echo FAILED ) (build $((t1 - t0)) s, tests $((t2 - t1)) s; ${counts:-no ctest summary})")
  [ "$rc" -eq 0 ] || status=1
}

run_asan() {
  local t0 t1
  # -DSMAX_BUILD_MPI=OFF: the vocabulary-parallel ops run here through the
  # in-process thread communicator (tests/test_distributed_*); the mpirun
  # programs (tests/mpi) run in the Release suite, since LeakSanitizer
  # reports OpenMPI's own start-up allocations in every rank.
  build_suite asan+ubsan "$ASAN_DIR" -DSMAX_SANITIZE="address;undefined" \
    -DSMAX_BUILD_BENCHMARKS=OFF -DSMAX_BUILD_MPI=OFF -- || return 0
  echo "== ASan+UBSan: running the CTest suite (excluded: ${SAN_CTEST_EXCLUDE:-nothing}) =="
  local rc=0
  read -r -a extra <<<"${CTEST_ARGS:-}"
  local sel=()
  [ -n "$SAN_CTEST_EXCLUDE" ] && sel=(-E "$SAN_CTEST_EXCLUDE")
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1} \
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
    ctest --test-dir "$ASAN_DIR" --output-on-failure -j"$JOBS" "${sel[@]}" "${extra[@]}" \
      2>&1 | tee "$ASAN_DIR/ctest_asan.log" || rc=$?
  record_suite asan+ubsan "$rc" "$ASAN_DIR/ctest_asan.log"
}

run_tsan() {
  local t0 t1
  # Kernels for SSE4 and the fallback only (not AVX2 as well): TSan sees
  # the op layer's tasks, pools and merges, which are the same on every
  # target, and the kernels are not instrumented; the C ABI test caps the
  # target at "sse4", so SSE4 stays. Saves a third of the kernels' compile.
  build_suite tsan "$TSAN_DIR" -DSMAX_SANITIZE=thread -DSMAX_HWY_TARGETS=sse4 \
    -DSMAX_BUILD_BENCHMARKS=OFF -DSMAX_BUILD_MPI=OFF \
    -DSMAX_BUILD_TOOLS=OFF -- --target test_concurrency c_api_test || return 0
  echo "== TSan: threaded tests (std::thread pool) and the C ABI =="
  local rc=0
  TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:ignore_noninstrumented_modules=1} \
    ctest --test-dir "$TSAN_DIR" --output-on-failure -j1 \
      -R '^(Concurrency\..*StdThreadPool|c_api)$' 2>&1 | tee "$TSAN_DIR/ctest_tsan.log" || rc=$?
  record_suite tsan "$rc" "$TSAN_DIR/ctest_tsan.log"
}

for s in "${suites[@]}"; do
  case "$s" in
    asan) run_asan ;;
    tsan) run_tsan ;;
    *) echo "test_sanitizers.sh: unknown suite '$s' (asan, tsan)" >&2; exit 2 ;;
  esac
done

echo "== sanitizer suites =="
for line in "${summary[@]}"; do echo "  $line"; done
exit $status
