#!/usr/bin/env bash
# scripts/test_python.sh: install the Python package (`pip install .`, see
# docs/python.md), run examples/python/train_tiny.py, train_tiny_lm.py --quick
# and the pytest suite in
# python/tests, printing pytest's summary. Called by scripts/test.sh after
# CTest. pip-installs the missing test dependencies first (numpy, torch,
# pytest, nanobind, scikit-build-core, entmax, ml_dtypes, onnx, onnxruntime,
# transformers);
# nothing when they are all there.
#
#   scripts/test_python.sh [pytest options]     # e.g. -k torch  or  -x
# Environment: PYTHON (python3), JOBS (2, build parallelism),
#              SMAX_PYTHON_DEPS_ONLY=1 (install the dependencies, nothing else:
#              scripts/test.sh does so before CTest);
#              SMAX_PREBUILT_LIBRARY=/abs/path/libsmax.a (link that static
#              library, built from this tree, instead of compiling it again:
#              scripts/test.sh passes its own; see CMakeLists.txt).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
JOBS=${JOBS:-2}
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1

# As root or inside a virtual environment plain pip works; otherwise --user.
PIP_FLAGS=()
if [ "$(id -u)" -ne 0 ] && "$PYTHON" -c 'import sys; sys.exit(sys.prefix != sys.base_prefix)'; then
  PIP_FLAGS=(--user)
fi

pip_install() {
  # Another pip may be running (e.g. a large torch install): wait and retry
  # rather than racing it.
  local attempt
  for attempt in 1 2 3 4 5; do
    "$PYTHON" -m pip install "${PIP_FLAGS[@]}" "$@" && return 0
    echo "test_python.sh: pip install failed (attempt $attempt); retrying in 30 s" >&2
    sleep 30
  done
  return 1
}

missing=()
# ml_dtypes: numpy bfloat16 arrays; onnx + onnxruntime: QLinearSoftmax is
# compared with ONNX Runtime itself (tests/test_quantized.py); transformers:
# the Hugging Face integration (tests/test_transformers_integration.py, the
# doc blocks of docs/python.md and examples/python/train_tiny_lm.py).
for spec in numpy:numpy torch:torch pytest:pytest nanobind:nanobind scikit_build_core:scikit-build-core entmax:entmax ml_dtypes:ml_dtypes onnx:onnx onnxruntime:onnxruntime transformers:transformers; do
  "$PYTHON" -c "import ${spec%%:*}" 2>/dev/null || missing+=("${spec#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "test_python.sh: pip installing ${missing[*]}"
  pip_install "${missing[@]}"
else
  echo "test_python.sh: all Python test dependencies are installed"
fi

# SMAX_PYTHON_DEPS_ONLY=1: only the dependencies (scripts/test.sh, before CTest).
if [ "${SMAX_PYTHON_DEPS_ONLY:-0}" = 1 ]; then
  exit 0
fi

# The build tree persists in build-python/<wheel tag>/ (pyproject.toml), so
# this only recompiles what changed.
if [ -n "${SMAX_PREBUILT_LIBRARY:-}" ]; then
  echo "test_python.sh: pip install . (extension, linking $SMAX_PREBUILT_LIBRARY)"
  # The plain `pip install .` configuration (library + module) still
  # configures; its compile is the main build's, less tests and tools.
  cfg=$(mktemp -d)
  env -u SMAX_PREBUILT_LIBRARY cmake -S . -B "$cfg" -DSMAX_BUILD_PYTHON=ON -DSMAX_BUILD_TESTS=OFF \
    -DSMAX_BUILD_BENCHMARKS=OFF -DSMAX_BUILD_TOOLS=OFF -DSMAX_BUILD_MPI=OFF \
    -DPython_EXECUTABLE="$(command -v "$PYTHON")" >/dev/null
  rm -rf "$cfg"
  echo "test_python.sh: the plain pip install . configuration configures"
else
  echo "test_python.sh: pip install . (library + extension)"
fi
start=$(date +%s)
CMAKE_BUILD_PARALLEL_LEVEL=$JOBS "$PYTHON" -m pip install "${PIP_FLAGS[@]}" --no-build-isolation --no-deps -q .
echo "test_python.sh: installed smax in $(( $(date +%s) - start )) s"

# Run from outside the source tree so `import smax` is the installed package.
cd python/tests
"$PYTHON" -c 'import smax; print("smax", smax.__version__, "from", smax.__file__)'
"$PYTHON" ../../examples/python/train_tiny.py
"$PYTHON" ../../examples/python/train_tiny_lm.py --quick
"$PYTHON" -m pytest -q -p no:cacheprovider -rfE "$@" .
