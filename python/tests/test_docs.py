"""Every ```python block of README.md and docs/*.md runs as written.

One case per block (scripts/doc_blocks.py finds them; its docstring has the
conventions): each block runs in a fresh namespace, in a scratch folder,
against the installed smax package. A block marked
`<!-- doc-test: skip: REASON -->` is reported as skipped with its reason; one
marked `<!-- doc-test: requires: MODULE -->` is skipped where MODULE (an
optional package such as transformers) is not installed.
"""
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("doc_blocks", ROOT / "scripts" / "doc_blocks.py")
doc_blocks = importlib.util.module_from_spec(_spec)
sys.modules["doc_blocks"] = doc_blocks  # dataclasses look their module up there
_spec.loader.exec_module(doc_blocks)

BLOCKS = [b for b in doc_blocks.all_blocks() if b.lang == "python"]


def test_the_docs_have_python_blocks():
    assert len(BLOCKS) >= 3, "README.md and docs/*.md lost their Python examples"


@pytest.mark.parametrize("block", BLOCKS, ids=[b.where for b in BLOCKS])
def test_python_block_runs(block, tmp_path, monkeypatch):
    if block.skip:
        pytest.skip(block.skip)
    for module in block.requires:
        pytest.importorskip(module, reason=f"{block.where} needs {module} (an optional package)")
    monkeypatch.chdir(tmp_path)
    code = compile(block.code, block.where, "exec")
    exec(code, {"__name__": "__doc_block__"})
