"""smax/_smax.pyi is nanobind's stub generator output for the extension
smax._smax (checked in, so that type checkers and readers see the bindings
without building them). This regenerates it from the installed module and
fails when the checked-in file differs: after changing a binding, run

    python -m nanobind.stubgen -q -m smax._smax -o python/smax/_smax.pyi

(or ``python python/tests/test_stubs.py``) with the new build installed.
Skipped outside the source tree, and when the installed nanobind is not the
version that wrote the file (stubgen's output varies between versions).
"""
import pathlib
import subprocess
import sys

import pytest

STUB = pathlib.Path(__file__).resolve().parents[1] / "smax" / "_smax.pyi"
#: The nanobind version of the checked-in stub (update it with the stub).
NANOBIND_VERSION = "3.1.0"
COMMAND = [sys.executable, "-m", "nanobind.stubgen", "-q", "-m", "smax._smax", "-o"]


def generate(out: pathlib.Path) -> str:
    subprocess.run(COMMAND + [str(out)], check=True)
    return out.read_text()


@pytest.mark.skipif(not STUB.is_file(), reason="python/smax/_smax.pyi not found (installed tree)")
def test_smax_pyi_is_the_stubgen_output(tmp_path):
    nanobind = pytest.importorskip("nanobind")
    pytest.importorskip("nanobind.stubgen")
    if nanobind.__version__ != NANOBIND_VERSION:
        pytest.skip(f"nanobind {nanobind.__version__} installed, the stub was generated with "
                    f"{NANOBIND_VERSION}")
    want = generate(tmp_path / "_smax.pyi")
    assert STUB.read_text() == want, (
        "python/smax/_smax.pyi differs from the installed smax._smax; regenerate it: "
        + " ".join(["python"] + COMMAND[1:] + ["python/smax/_smax.pyi"]))


if __name__ == "__main__":  # regenerate the checked-in stub
    generate(STUB)
    print(f"wrote {STUB}")
