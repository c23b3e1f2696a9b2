"""The op list (smax.op_list(), generated from smax/op_list.inc) against the
Python package: every op reaches Python the way the list says (its binding in
smax._smax and the installed stub smax/_smax.pyi, smax.<op>, smax.torch.<op>),
and every op the package exports or binds is in the list. A new op missing
from a surface, or a Python function or binding missing from the list, fails
here."""
import ast
import pathlib

import pytest

import smax
import smax._smax as ext

OPS = smax.op_list()
BY_NAME = {op.name: op for op in OPS}
# Public names of smax that are not ops.
NOT_OPS = {"info", "set_max_target", "set_max_threads", "max_threads", "kernel_name",
           "op_list", "OpInfo", "ALGORITHMS", "EMPTY_ROW_POLICIES", "REDUCTIONS",
           "streaming_stores", "set_streaming_stores",
           "ATTENTION_NORMALIZERS",
           "logit_scale_gradients"}  # a helper of every op's backward, not an op
# Functions of smax._smax that are not ops (the runtime calls).
EXT_NOT_OPS = {"version", "compiled_targets", "supported_targets", "active_target",
               "set_max_target", "max_threads", "set_max_threads", "kernel_name", "op_list",
               "streaming_stores", "set_streaming_stores", "logit_scale_gradients"}
# "diff" ops without a "<op>_backward" binding: their autograd Function computes
# the gradient from another op.
DIFF_WITHOUT_BACKWARD = {
    "logsumexp",  # d lse / d x = softmax(x): the backward calls smax's softmax
    "softmax_topk",  # scattered in torch (with smax's softmax of the whole row)
}


def test_list_is_well_formed():
    assert len(OPS) == len(BY_NAME), "an op is listed twice"
    assert {op.group for op in OPS} == {"softmax", "normalizers", "losses", "sampling",
                                        "attention", "quantized"}
    assert {op.kind for op in OPS} <= {"diff", "nodiff", "backward", "fused"}
    assert {op.cli for op in OPS} <= {"run", "run_unchecked", "run_inputs", "attention", "none"}
    for op in OPS:
        if op.kind == "backward":
            assert op.name.endswith("_backward"), op
            assert op.name[: -len("_backward")] in BY_NAME, f"{op.name}: no forward op"
        if op.kind == "fused":
            assert op.name.endswith("_fused") and op.name[: -len("_fused")] in BY_NAME, op


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.name)
def test_op_reaches_python(op):
    if op.kind == "fused":
        base = op.name[: -len("_fused")]
        assert BY_NAME[base].kind == "diff", f"{op.name}: {base} has no autograd"
        return
    assert callable(getattr(ext, op.name, None)), f"smax._smax has no binding of {op.name}"
    if op.kind in ("diff", "nodiff"):
        assert op.name in smax.__all__, f"smax.{op.name} is not exported"
        assert callable(getattr(smax, op.name))


@pytest.mark.parametrize("op", [op for op in OPS if op.kind == "diff"], ids=lambda op: op.name)
def test_differentiable_op_in_smax_torch(op):
    pytest.importorskip("torch")
    import smax.torch as st
    assert op.name in st.__all__, f"smax.torch.{op.name} is not exported"
    assert callable(getattr(st, op.name))
    assert getattr(st, op.name) is not getattr(smax, op.name), (
        f"smax.torch.{op.name} is smax's array function, not its autograd version")


def test_every_exported_function_is_listed():
    for name in smax.__all__:
        if name in NOT_OPS:
            continue
        assert name in BY_NAME, f"smax.{name} is not in smax/op_list.inc"


def test_every_torch_function_is_listed():
    pytest.importorskip("torch")
    import smax.torch as st
    for name in st.__all__:
        if name[0].isupper():  # nn.Module classes
            continue
        assert BY_NAME.get(name) is not None and BY_NAME[name].kind == "diff", (
            f"smax.torch.{name} is not a diff op of smax/op_list.inc")


def test_every_binding_is_listed():
    for name in dir(ext):
        obj = getattr(ext, name)
        if name.startswith("_") or isinstance(obj, type) or name in EXT_NOT_OPS:
            continue
        assert name in BY_NAME, f"smax._smax.{name} is not in smax/op_list.inc"


def test_backward_ops_match_differentiable_ops():
    for op in OPS:
        if op.kind == "backward":
            forward = BY_NAME[op.name[: -len("_backward")]]
            assert forward.kind == "diff", f"{op.name}: {forward.name} is {forward.kind}"
        if op.kind == "diff" and op.name not in DIFF_WITHOUT_BACKWARD:
            assert op.name + "_backward" in BY_NAME, f"{op.name}: no {op.name}_backward listed"
    for name in DIFF_WITHOUT_BACKWARD:
        assert BY_NAME[name].kind == "diff" and name + "_backward" not in BY_NAME, name


def test_every_bound_op_is_in_the_stub():
    stub = pathlib.Path(ext.__file__).with_name("_smax.pyi")
    assert stub.is_file(), f"the installed package has no stub {stub}"
    defined = {node.name for node in ast.parse(stub.read_text()).body
               if isinstance(node, ast.FunctionDef)}
    missing = [op.name for op in OPS if op.kind != "fused" and op.name not in defined]
    assert not missing, f"ops missing from {stub}: {missing}"
