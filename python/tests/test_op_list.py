"""The op list (smax.op_list(), generated from smax/op_list.inc) against the
Python package: every op reaches Python the way the list says, and every op
the package exports is in the list. A new op missing from a surface, or a
Python function missing from the list, fails here."""
import pytest

import smax
import smax._smax as ext

OPS = smax.op_list()
BY_NAME = {op.name: op for op in OPS}
# Public names of smax that are not ops.
NOT_OPS = {"info", "set_max_target", "set_max_threads", "max_threads", "kernel_name",
           "op_list", "OpInfo", "ALGORITHMS", "EMPTY_ROW_POLICIES", "REDUCTIONS",
           "ATTENTION_NORMALIZERS"}


def test_list_is_well_formed():
    assert len(OPS) == len(BY_NAME), "an op is listed twice"
    assert {op.group for op in OPS} == {"softmax", "normalizers", "losses", "sampling",
                                        "attention"}
    assert {op.kind for op in OPS} <= {"diff", "nodiff", "backward", "fused"}
    assert {op.cli for op in OPS} <= {"run", "run_unchecked", "attention", "none"}
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
