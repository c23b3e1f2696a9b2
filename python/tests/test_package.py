"""The structure of the Python package: __init__.py only imports and
re-exports, _common.py is a leaf (nothing from the package but the
extension), the modules of smax import each other without a cycle (counting
imports inside functions too), and smax.torch has every differentiable op of
the op list."""
import ast
import pathlib

import pytest

import smax

PKG = pathlib.Path(smax.__file__).resolve().parent
MODULES = sorted(p.stem for p in PKG.glob("*.py"))


def _imports(name):
    """The smax modules `name` imports (anywhere in the file)."""
    tree = ast.parse((PKG / f"{name}.py").read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module:
                found.add(node.module.split(".")[0])
            elif node.level == 1:
                found.update(a.name for a in node.names)
            elif node.module and node.module.split(".")[0] == "smax":
                parts = node.module.split(".")
                found.add(parts[1] if len(parts) > 1 else "__init__")
        elif isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] == "smax":
                    found.add(parts[1] if len(parts) > 1 else "__init__")
    return {m for m in found if m in MODULES or m == "__init__"} - {name}


def test_common_is_a_leaf():
    assert _imports("_common") == set()


# The one allowed back edge: smax.torch re-exports smax.nn's module names
# (Softmax, CrossEntropyLoss, ...) through its module __getattr__ (PEP 562),
# which imports smax.nn on first attribute access, after smax.torch is fully
# initialised; smax.nn is built on smax.torch's functions. Nothing else in
# smax.torch uses smax.nn, and no import-time cycle results.
LAZY_REEXPORTS = {("torch", "nn")}


def test_no_import_cycle():
    graph = {m: _imports(m) - {n for a, n in LAZY_REEXPORTS if a == m} for m in MODULES}
    done, active = set(), []

    def visit(m):
        if m in active:
            pytest.fail("import cycle: " + " -> ".join(active[active.index(m):] + [m]))
        if m in done:
            return
        active.append(m)
        for n in sorted(graph.get(m, ())):
            visit(n)
        active.pop()
        done.add(m)

    for m in MODULES:
        visit(m)


def test_init_only_reexports():
    tree = ast.parse((PKG / "__init__.py").read_text())
    for node in tree.body:
        ok = (isinstance(node, (ast.Import, ast.ImportFrom))
              or (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
              or (isinstance(node, (ast.Assign, ast.AugAssign))
                  and ast.unparse(node).startswith("__all__")))
        assert ok, f"smax/__init__.py line {node.lineno}: {ast.unparse(node)[:60]}"


def test_torch_has_every_diff_op():
    pytest.importorskip("torch")
    import smax.torch as st
    diff = [op.name for op in smax.op_list() if op.kind == "diff"]
    assert [n for n in st.__all__ if n[0].islower()] == diff


def test_integrations_are_optional():
    """smax.integrations imports none of its integrations, and one whose
    library is missing raises ImportError naming what to install."""
    import subprocess
    import sys
    code = ("import sys; sys.modules['transformers'] = None\n"
            "import smax.integrations\n"
            "try:\n"
            "    import smax.integrations.transformers\n"
            "except ImportError as e:\n"
            "    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert "pip install transformers" in out.stdout, out.stdout + out.stderr
