"""A new user's first hour: every public function runs with its documented
defaults, errors about ``out=``, dtypes and double backward say what is wrong
in Python's terms ("smax.<op>: ..."), and the ```python blocks of
docs/python.md run as written."""
import inspect
import pathlib
import re

import numpy as np
import pytest

import smax

F32 = np.float32

# Public names that are not ops (constants, and the op list's record type).
CONSTANTS = {"ALGORITHMS", "EMPTY_ROW_POLICIES", "REDUCTIONS", "ATTENTION_NORMALIZERS", "OpInfo"}
RUNTIME = {"info", "set_max_target", "set_max_threads", "max_threads", "kernel_name", "op_list",
           "streaming_stores", "set_streaming_stores"}


def _inputs(lib):
    """Small valid inputs by argument name. `lib` is np or torch."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 6)).astype(F32)
    e = np.exp(x - x.max(-1, keepdims=True))
    p = (e / e.sum(-1, keepdims=True)).astype(F32)
    vals = {
        "x": x,
        "y": p,
        "dy": rng.standard_normal((4, 6)).astype(F32),
        "dx": rng.standard_normal((4, 6)).astype(F32),
        "p": p,
        "T": 0.5,
        "k": 3,
        "target": np.array([0, 5, 2, 3], np.int64),
        "a": 1.0,
        "b": 0.5,
        "hidden": rng.standard_normal((4, 5)).astype(F32),
        "weight": rng.standard_normal((6, 5)).astype(F32),
        "shape": (4, 6),
        "boxes": np.array([[0, 0, 2, 2], [1, 1, 3, 3], [0, 0, 2.1, 2], [5, 5, 6, 6]], F32),
        "scores": np.array([0.9, 0.8, 0.7, 0.6], F32),
        "q": rng.standard_normal((2, 3, 4)).astype(F32),
        "kv": rng.standard_normal((2, 5, 4)).astype(F32),
        "name": None,
        "n": smax.max_threads(),
        "op": "softmax",
        "mode": "auto",
    }
    vals["input"] = vals["logits"] = vals["x"]
    if lib is not np:
        vals = {k: lib.from_numpy(v) if isinstance(v, np.ndarray) else v
                for k, v in vals.items()}
    return vals


def required_args(fn, vals, name):
    """The values of `fn`'s required parameters (those without a default)."""
    req = [p.name for p in inspect.signature(fn).parameters.values()
           if p.default is inspect.Parameter.empty
           and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if name == "attention":
        return [vals["q"], vals["kv"], vals["kv"]]
    missing = [r for r in req if r not in vals]
    assert not missing, f"{name}: no test value for required argument(s) {missing}"
    return [vals[r] for r in req]


# The integer ops (op list group "quantized") take integer arrays and their
# quantisation parameters, not the float inputs this walk feeds every op;
# test_quantized.py runs them, their defaults and their errors.
_QUANTIZED = {op.name for op in smax.op_list() if op.group == "quantized"}


def _ops():
    return sorted(n for n in smax.__all__ if n not in CONSTANTS and n not in _QUANTIZED)


def _array_ops():
    return [n for n in _ops() if n not in RUNTIME]


def _out_ops():
    return [n for n in _array_ops() if "out" in inspect.signature(getattr(smax, n)).parameters]


def _op_call(name, lib):
    """(the array module, smax.<name>, its required arguments) for lib "numpy"
    or "torch" (skipped without torch)."""
    mod = np if lib == "numpy" else pytest.importorskip("torch")
    fn = getattr(smax, name)
    return mod, fn, required_args(fn, _inputs(mod), name)


# ---- 1. every op with only its required arguments -------------------------------------------


@pytest.mark.parametrize("name", _ops())
def test_every_op_runs_with_its_defaults_numpy(name):
    fn = getattr(smax, name)
    args = required_args(fn, _inputs(np), name)
    r = fn(*args)
    for a in (r if isinstance(r, tuple) else (r,)):
        if isinstance(a, np.ndarray) and a.dtype == F32:
            assert not np.isnan(a).any(), f"{name}: NaN with default arguments"


@pytest.mark.parametrize("name", _array_ops())
def test_every_op_runs_with_its_defaults_torch(name):
    torch = pytest.importorskip("torch")
    fn = getattr(smax, name)
    args = required_args(fn, _inputs(torch), name)
    r = fn(*args)
    # numpy without `like` / a float / two floats
    if name not in ("gumbel_noise", "softmax_collapse_fraction", "logit_scale_gradients"):
        for a in (r if isinstance(r, tuple) else (r,)):
            assert isinstance(a, torch.Tensor), f"{name}: torch in, {type(a).__name__} out"


def test_softplus_normalizer_defaults():
    x = _inputs(np)["x"]
    y = smax.softplus_normalizer(x)  # was "head_dim must be >= 2"
    sp = np.log1p(np.exp(x.astype(np.float64)))
    np.testing.assert_allclose(y, sp / sp.sum(-1, keepdims=True), rtol=1e-5)
    # head_dim gives LSSA's lambda = log N / log head_dim; lambd a fixed lambda
    lam = np.log(6) / np.log(16)
    sp = np.log1p(np.exp(lam * x.astype(np.float64)))
    np.testing.assert_allclose(smax.softplus_normalizer(x, head_dim=16),
                               sp / sp.sum(-1, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(smax.softplus_normalizer(x, lambd=lam),
                               sp / sp.sum(-1, keepdims=True), rtol=1e-5)
    with pytest.raises(ValueError, match="head_dim"):
        smax.softplus_normalizer(x, head_dim=1)


def _torch_names():
    try:
        import smax.torch as st
    except ImportError:  # pragma: no cover
        return []
    return sorted(st.__all__)


# smax.torch name -> the op its error messages name
_MODULE_OPS = {"Softmax": "softmax", "LogSoftmax": "log_softmax", "LogSumExp": "logsumexp",
               "Sparsemax": "sparsemax", "Entmax15": "entmax15", "EntmaxBisect": "entmax_bisect",
               "CrossEntropyLoss": "cross_entropy", "SparsemaxLoss": "sparsemax_loss",
               "Entmax15Loss": "entmax15_loss", "EntmaxBisectLoss": "entmax_bisect_loss"}


def _call_torch(name):
    """smax.torch.<name> with only its required arguments; float inputs require
    grad. Returns (result tensor, the tensors that require grad)."""
    torch = pytest.importorskip("torch")
    import smax.torch as st
    obj = getattr(st, name)
    vals = _inputs(torch)
    vals = {k: (v.clone().requires_grad_() if isinstance(v, torch.Tensor)
                and v.dtype == torch.float32 and k not in ("y",) else v)
            for k, v in vals.items()}
    if isinstance(obj, type):
        mod = obj()
        fn, label = mod.forward, name
    else:
        fn, label = obj, name
    args = required_args(fn, vals, label)
    r = fn(*args)
    r = r[0] if isinstance(r, tuple) else r
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    return r, leaves


@pytest.mark.parametrize("name", _torch_names())
def test_every_torch_op_runs_with_its_defaults(name):
    torch = pytest.importorskip("torch")
    r, leaves = _call_torch(name)
    assert isinstance(r, torch.Tensor)
    assert leaves
    w = torch.randn(r.shape)
    (r * w).sum().backward()
    assert any(t.grad is not None for t in leaves)


# ---- 2. and 3. out= that is not an array, or of the wrong shape ------------------------------


@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("name", _out_ops())
def test_out_not_an_array(name, lib):
    _, fn, args = _op_call(name, lib)
    for bad in (1, [1.0, 2.0], "out"):
        with pytest.raises(TypeError) as e:
            fn(*args, out=bad)
        msg = str(e.value)
        assert msg.startswith(f"smax.{name}: out must be None or a preallocated"), msg
        assert type(bad).__name__ in msg
        assert "incompatible function arguments" not in msg and "nb::" not in msg


@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("name", _out_ops())
def test_out_of_the_wrong_shape(name, lib):
    mod, fn, args = _op_call(name, lib)
    r = fn(*args)
    r = r[0] if isinstance(r, tuple) else r
    shape = tuple(r.shape)
    bad_shape = tuple(s + 1 for s in shape) if shape else (2,)
    bad = np.full(bad_shape, 7, dtype=np.asarray(r).dtype)
    if lib == "torch":
        bad = mod.from_numpy(bad)
    with pytest.raises(ValueError) as e:
        fn(*args, out=bad)
    msg = str(e.value)
    fmt = lambda s: "(" + ", ".join(map(str, s)) + ("," if len(s) == 1 else "") + ")"  # noqa: E731
    assert f"smax.{name}: out has shape {fmt(bad_shape)}, expected {fmt(shape)}" in msg, msg
    assert "dst" not in msg
    assert (np.asarray(bad) == 7).all()  # nothing written


@pytest.mark.parametrize("name", ["softmax", "sparsemax", "ssmax", "sampling_filter"])
def test_library_errors_name_out_not_dst(name):
    # An out overlapping x is found by the C++ library, which calls it dst.
    fn = getattr(smax, name)
    x = np.random.default_rng(0).standard_normal((5, 8)).astype(F32)
    with pytest.raises(ValueError, match="overlap") as e:
        fn(x[:-1], out=x[1:])
    msg = str(e.value)
    assert msg.startswith(f"smax.{name}: "), msg
    assert "dst" not in msg and "dsrc" not in msg and "out" in msg, msg


def test_attention_out_with_grad_inputs_is_written():
    # out= is not differentiable: with inputs that require grad the result
    # goes to out (it was silently dropped for a new tensor).
    torch = pytest.importorskip("torch")
    q = torch.randn(2, 3, 4, requires_grad=True)
    kv = torch.randn(2, 5, 4)
    out = torch.full((2, 3, 4), 7.0)
    r = smax.attention(q, kv, kv, out=out)
    assert r is out
    torch.testing.assert_close(out, smax.attention(q.detach(), kv, kv))


# ---- 4. double backward ------------------------------------------------------------------------


@pytest.mark.parametrize("name", _torch_names())
def test_double_backward_names_the_op(name):
    torch = pytest.importorskip("torch")
    r, leaves = _call_torch(name)
    w = torch.randn(r.shape)
    grads = torch.autograd.grad((r * w).sum(), leaves, create_graph=True, allow_unused=True)
    g = next(g for g in grads if g is not None)
    op = _MODULE_OPS.get(name, name)
    with pytest.raises(RuntimeError) as e:
        (g * g).sum().backward()
    assert str(e.value) == (f"smax.{op}: double backward is not supported (the op's "
                            f"backward is first-order)")


def test_double_backward_through_array_function_and_attention():
    torch = pytest.importorskip("torch")
    x = torch.randn(3, 5, requires_grad=True)
    (g,) = torch.autograd.grad((smax.log_softmax(x) * torch.randn(3, 5)).sum(), x,
                               create_graph=True)
    with pytest.raises(RuntimeError, match=r"^smax\.log_softmax: double backward is not"):
        g.sum().backward()
    q = torch.randn(2, 3, 4, requires_grad=True)
    kv = torch.randn(2, 5, 4)
    (g,) = torch.autograd.grad(smax.attention(q, kv, kv).sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match=r"^smax\.attention: double backward is not"):
        g.sum().backward()


def test_first_order_backward_still_works_with_create_graph_off():
    torch = pytest.importorskip("torch")
    import smax.torch as st
    x = torch.randn(3, 5, requires_grad=True)
    st.softmax(x).pow(2).sum().backward()
    assert x.grad is not None and not x.grad.requires_grad


# ---- 5. dtypes -------------------------------------------------------------------------------


def _cast_msg(op, arg, dtype):
    return (f"smax.{op}: {arg} has dtype {dtype}, expected a floating dtype (float32, "
            f"float64, float16 or bfloat16): pass e.g. {arg}.astype(np.float32) / "
            f"{arg}.float()")


# float64 / float16 / bfloat16 are accepted (python/tests/test_dtypes.py); an
# integer or complex array is the wrong dtype.
@pytest.mark.parametrize("dtype", ["int32", "int16"])
@pytest.mark.parametrize("name", ["softmax", "log_softmax", "logsumexp", "sparsemax",
                                  "softplus_normalizer", "cross_entropy", "sampling_filter"])
def test_wrong_float_dtype_numpy(name, dtype):
    fn = getattr(smax, name)
    vals = _inputs(np)
    args = required_args(fn, vals, name)
    args[0] = args[0].astype(dtype)
    arg = next(iter(inspect.signature(fn).parameters))
    with pytest.raises(TypeError) as e:
        fn(*args)
    assert str(e.value) == _cast_msg(name, arg, dtype)


@pytest.mark.parametrize("dtype", ["int32", "int16", "complex64"])
@pytest.mark.parametrize("name", ["softmax", "log_softmax", "logsumexp", "sparsemax",
                                  "softplus_normalizer", "cross_entropy"])
def test_wrong_float_dtype_torch(name, dtype):
    torch = pytest.importorskip("torch")
    fn = getattr(smax, name)
    args = required_args(fn, _inputs(torch), name)
    args[0] = args[0].to(getattr(torch, dtype))
    dtype = "complex" if dtype.startswith("complex") else dtype
    arg = next(iter(inspect.signature(fn).parameters))
    with pytest.raises(TypeError) as e:
        fn(*args)
    assert str(e.value) == _cast_msg(name, arg, dtype)


def test_wrong_dtype_other_arguments():
    x = _inputs(np)["x"]
    with pytest.raises(TypeError, match=re.escape(_cast_msg("softmax_backward", "dy", "int32"))):
        smax.softmax_backward(x, x.astype(np.int32))
    with pytest.raises(TypeError,
                       match=r"^smax\.softmax: out has dtype int32, expected a floating dtype "
                             r"\(float32, float64, float16 or bfloat16\): pass a floating out$"):
        smax.softmax(x, out=np.empty(x.shape, np.int32))
    with pytest.raises(TypeError, match=r"^smax\.softmax: x has dtype int32, expected a floating "
                                        r"dtype .*: pass e\.g\. x\.astype\(np\.float32\)"):
        smax.softmax(x.astype(np.int32))


def test_target_and_parameter_errors_use_python_names():
    x = _inputs(np)["x"]
    for op in ("cross_entropy", "sparsemax_loss"):
        with pytest.raises(TypeError, match=rf"^smax\.{op}: target has dtype int32, expected "
                                            r"int64 class indices: pass "
                                            r"target\.astype\(np\.int64\) / target\.long\(\)"):
            getattr(smax, op)(x, np.array([0, 1, 2, 3], np.int32))
    with pytest.raises(ValueError, match=r"^smax\.ssmax: s shape") as e:
        smax.ssmax(x, s=np.full((3, 1), 0.4, F32))
    assert "s_rows" not in str(e.value)
    with pytest.raises(ValueError, match=r"^smax\.entmax_bisect: alpha shape") as e:
        smax.entmax_bisect(x, alpha=np.full((3, 1), 1.5, F32))
    assert "alpha_tensor" not in str(e.value)


# ---- 6. the ```python blocks of docs/python.md run as written ---------------------------------

_DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "python.md"


def _doc_blocks():
    if not _DOC.is_file():
        return []
    text = _DOC.read_text()
    return [(text.count("\n", 0, m.start()) + 1, m.group(1))
            for m in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M)]


@pytest.mark.skipif(not _DOC.is_file(), reason="docs/python.md not found (installed tree)")
@pytest.mark.parametrize("line,code", _doc_blocks(),
                         ids=[f"line{line}" for line, _ in _doc_blocks()])
def test_docs_python_md_block_runs(line, code):
    target, threads = smax.info()["active_target"], smax.max_threads()
    try:
        exec(compile(code, f"docs/python.md:{line}", "exec"), {"__name__": "__doc_block__"})
    finally:  # a block may cap the target or the threads: restore them for the other tests
        smax.set_max_target(target)
        smax.set_max_threads(threads)


