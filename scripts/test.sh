#!/usr/bin/env bash
# scripts/test.sh: installs what is missing, builds everything (Release) and
# runs every test with CTest, printing its summary, then the sanitizer suites
# (scripts/test_sanitizers.sh), whose summary it prints again at the end.
# Called by .ci/run.
#
#   scripts/test.sh [ctest options]     # e.g. -R cli  or  -LE slow
# Environment: as scripts/build.sh (BUILD_DIR, BUILD_TYPE, JOBS, CMAKE_ARGS);
#              SMAX_SANITIZERS=0 skips the sanitizer suites;
#              SMAX_PYTHON=0 skips the Python package (scripts/test_python.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-2}
rc=0
# The Python test dependencies (torch, transformers, ...) first: some CTest
# tests run doc blocks that import them (docs.shell_blocks), and would skip
# those blocks on a machine without them.
if [ "${SMAX_PYTHON:-1}" != 0 ]; then
  SMAX_PYTHON_DEPS_ONLY=1 scripts/test_python.sh || rc=1
fi
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$JOBS" "$@" || rc=$?

# ---- Python package (docs/python.md): pip install . + pytest; SMAX_PYTHON=0 skips it.
# The package links the static library just built (SMAX_PREBUILT_LIBRARY,
# CMakeLists.txt, which compiles the library instead where that build's
# settings do not suit the module) rather than compiling it a second time.
if [ "${SMAX_PYTHON:-1}" != 0 ]; then
  prebuilt=()
  if [ -f "$BUILD_DIR/libsmax.a" ]; then
    prebuilt=(SMAX_PREBUILT_LIBRARY="$(cd "$BUILD_DIR" && pwd)/libsmax.a")
  fi
  env "${prebuilt[@]}" scripts/test_python.sh || rc=1
fi

# The sanitizer suites (ASan+UBSan over the whole suite, TSan over the
# threaded tests; docs/reliability.md). SMAX_SANITIZERS=0 skips them.
# Their summary (build / test times, PASSED / FAILED per suite) is printed
# again at the very end, after everything else.
san_log=""
if [ "${SMAX_SANITIZERS:-1}" != 0 ]; then
  san_log=$(mktemp)
  scripts/test_sanitizers.sh 2>&1 | tee "$san_log" || rc=1
fi

echo "== scripts/test.sh: $([ $rc -eq 0 ] && echo PASSED || echo FAILED) =="
if [ -n "$san_log" ]; then
  if grep -q '^== sanitizer suites ==$' "$san_log"; then
    sed -n '/^== sanitizer suites ==$/,$p' "$san_log"
  else
    echo "== sanitizer suites: no summary (the runner stopped early, see above) =="
  fi
  rm -f "$san_log"
elif [ "${SMAX_SANITIZERS:-1}" = 0 ]; then
  echo "== sanitizer suites: skipped (SMAX_SANITIZERS=0) =="
fi
exit $rc
