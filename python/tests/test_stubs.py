"""smax/_smax.pyi, the type stub of the extension smax._smax, is written by the
build: `nanobind_add_stub` in python/CMakeLists.txt runs nanobind's stub
generator on the module just built, and the stub is installed next to the
module (in the wheel too), so type checkers see it. It is not checked in.

These tests read the installed stub and fail when it is missing, or when it
names a function, class, class member or parameter the module lacks (or lacks
one the module has), or has another number of overloads. They compare names,
not stubgen's text, so they hold whatever nanobind version built the package
(pyproject.toml: nanobind>=2.0); the text itself is the building nanobind's
stubgen output by construction.
"""
from __future__ import annotations

import ast
import pathlib

import pytest

import smax._smax as ext

STUB = pathlib.Path(ext.__file__).with_name("_smax.pyi")


def _stub_tree() -> ast.Module:
    assert STUB.is_file(), f"the installed package has no stub {STUB} (python/CMakeLists.txt)"
    return ast.parse(STUB.read_text(), filename=str(STUB))


def _defs(body: list[ast.stmt]) -> dict[str, list[ast.FunctionDef]]:
    """The functions of a module or class body by name (overloads together)."""
    out: dict[str, list[ast.FunctionDef]] = {}
    for node in body:
        if isinstance(node, ast.FunctionDef):
            out.setdefault(node.name, []).append(node)
    return out


def _classes(tree: ast.Module) -> dict[str, ast.ClassDef]:
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


def _split_top_level(text: str) -> list[str]:
    """Splits a parameter list at the commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _nb_params(signature: str) -> list[str]:
    """The parameter names of one of nanobind's `__nb_signature__` strings,
    'def name(a: T, b: U = \\0, /) -> R' -> ['a', 'b']."""
    inner = signature[signature.index("(") + 1: signature.rindex(")")]
    names = [p.split(":")[0].split("=")[0].strip() for p in _split_top_level(inner)]
    return [n.lstrip("*") for n in names if n not in ("/", "*")]


def _stub_params(fn: ast.FunctionDef) -> list[str]:
    a = fn.args
    names = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]
    names += [p.arg for p in (a.vararg, a.kwarg) if p is not None]
    return [n for n in names if n != "self"]


def _module_names() -> tuple[set[str], set[str]]:
    public = [n for n in dir(ext) if not n.startswith("_")]
    classes = {n for n in public if isinstance(getattr(ext, n), type)}
    return set(public) - classes, classes


def test_stub_is_installed_next_to_the_module():
    assert STUB.is_file(), f"the installed package has no stub {STUB} (python/CMakeLists.txt)"
    assert STUB.with_name("py.typed").is_file()


def test_stub_names_the_module_functions_and_classes():
    tree = _stub_tree()
    functions, classes = _module_names()
    stub_functions = {n for n in _defs(tree.body) if not n.startswith("_")}
    stub_classes = {n for n in _classes(tree) if not n.startswith("_")}
    assert functions - stub_functions == set(), "functions of smax._smax missing from the stub"
    assert stub_functions - functions == set(), "functions in the stub that smax._smax lacks"
    assert classes - stub_classes == set(), "classes of smax._smax missing from the stub"
    assert stub_classes - classes == set(), "classes in the stub that smax._smax lacks"


def test_stub_function_signatures_match_the_module():
    stub = _defs(_stub_tree().body)
    functions, _ = _module_names()
    for name in sorted(functions & stub.keys()):
        signatures = getattr(ext, name).__nb_signature__
        defs = stub[name]
        assert len(defs) == len(signatures), f"{name}: overload count differs"
        for fn, (sig, _doc, _defaults) in zip(defs, signatures):
            assert _stub_params(fn) == _nb_params(sig), f"{name}: parameters differ"


def test_stub_class_members_match_the_module():
    stub = _classes(_stub_tree())
    _, classes = _module_names()
    for name in sorted(classes & stub.keys()):
        cls = getattr(ext, name)
        have = {n for n in vars(cls) if not n.startswith("_")} | (
            {n for n in ("__init__", "__copy__") if n in vars(cls)})
        want = set(_defs(stub[name].body))
        assert have == want, f"{name}: members in one of module and stub only: {sorted(have ^ want)}"


@pytest.mark.parametrize("signature, params", [
    ("def f(x: ndarray[writable=False], out: ndarray[], co: smax._smax.SoftmaxOptions) -> None",
     ["x", "out", "co"]),
    ("def f(op: str, algorithm: str = \\0, cols: int = \\1) -> str", ["op", "algorithm", "cols"]),
    ("def f(a: dict[str, int], /, *, b: tuple[int, int] = \\0) -> None", ["a", "b"]),
    ("def f() -> str", []),
])
def test_nb_params_parses_nanobind_signatures(signature, params):
    assert _nb_params(signature) == params
