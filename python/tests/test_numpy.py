"""smax on numpy arrays and generic DLPack arrays: results against a float64
numpy reference, layouts, masks, special values, zero-copy and errors."""
import numpy as np
import pytest

import smax
from conftest import (
    assert_log_close,
    assert_softmax_close,
    logits,
    ref_log_softmax,
    ref_logsumexp,
    ref_softmax,
    ticks_while,
)

F32 = np.float32


# ---- values ------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", smax.ALGORITHMS)
@pytest.mark.parametrize("shape,dim", [((4, 37), -1), ((3, 5, 7), 1), ((6, 9), 0), ((2, 3000), -1), ((1,), 0)])
def test_forward_random(rng, algorithm, shape, dim):
    x = (rng.standard_normal(shape) * 4).astype(F32)
    t = logits(x)
    y = smax.softmax(x, dim, algorithm=algorithm)
    assert isinstance(y, np.ndarray) and y.dtype == F32 and y.shape == x.shape
    assert_softmax_close(y, ref_softmax(t, dim))
    assert_log_close(smax.log_softmax(x, dim, algorithm=algorithm), ref_log_softmax(t, dim))
    for keepdim in (False, True):
        assert_log_close(smax.logsumexp(x, dim, keepdim, algorithm=algorithm),
                         ref_logsumexp(t, dim, keepdim))


def test_long_row(rng):
    x = rng.uniform(-20, 20, size=(2, 70001)).astype(F32)
    assert_softmax_close(smax.softmax(x), ref_softmax(logits(x)))
    assert_log_close(smax.logsumexp(x), ref_logsumexp(logits(x)))


@pytest.mark.parametrize("scale,temperature", [(0.125, 1.0), (1.0, 0.7), (3.0, 2.5)])
def test_scale_temperature(rng, scale, temperature):
    x = rng.standard_normal((5, 64)).astype(F32)
    t = logits(x, scale, temperature)
    assert_softmax_close(smax.softmax(x, scale=scale, temperature=temperature), ref_softmax(t))
    assert_log_close(smax.log_softmax(x, scale=scale, temperature=temperature), ref_log_softmax(t))
    assert_log_close(smax.logsumexp(x, scale=scale, temperature=temperature), ref_logsumexp(t))


def test_adversarial_rows():
    rows = np.array(
        [
            np.linspace(90, 100, 8),                     # naive exp overflows
            [-np.inf, 0, 1, 2, -np.inf, 3, 4, 5],        # -inf entries: exactly 0
            [1, 2, np.nan, 4, 5, 6, 7, 8],               # NaN -> NaN row
            [1, 2, np.inf, 4, 5, 6, 7, 8],               # +inf -> NaN row
            [-np.inf] * 8,                               # all -inf: empty_row policy
            [1e30, -1e30, 0, 1, 2, 3, 4, 5],
            [3.0] * 8,                                   # constant row
            [-88, -87, -100, -103, -104, -110, -1, 0],   # underflow to exactly 0
        ],
        dtype=F32,
    )
    t = logits(rows)
    for empty_row in smax.EMPTY_ROW_POLICIES:
        y = smax.softmax(rows, empty_row=empty_row)
        assert_softmax_close(y, ref_softmax(t, empty_row=empty_row))
        assert_log_close(smax.log_softmax(rows, empty_row=empty_row), ref_log_softmax(t, empty_row=empty_row))
        assert_log_close(smax.logsumexp(rows, empty_row=empty_row), ref_logsumexp(t, empty_row=empty_row))
        assert y[1, 0] == 0 and y[1, 4] == 0
    assert (smax.softmax(rows)[4] == 0).all()
    assert np.isnan(smax.softmax(rows, empty_row="nan")[4]).all()
    assert np.isneginf(smax.log_softmax(rows)[4]).all()
    assert np.isneginf(smax.logsumexp(rows)[4])
    y = smax.softmax(rows)
    assert np.all(y[np.isfinite(y)] >= 0) and not np.any((y > 0) & (y < np.finfo(F32).tiny))


def test_edge_sizes():
    assert smax.softmax(np.array([5.0], F32))[0] == 1.0
    assert smax.log_softmax(np.array([5.0], F32))[0] == 0.0
    assert smax.logsumexp(np.array([5.0], F32)) == 5.0
    empty = np.zeros((3, 0), F32)
    assert smax.softmax(empty).shape == (3, 0)
    assert np.isneginf(smax.logsumexp(empty)).all() and smax.logsumexp(empty).shape == (3,)
    s = smax.softmax(np.array(2.0, F32))
    assert s.shape == () and s == 1.0


def test_threads_bitwise(rng):
    x = rng.standard_normal((64, 513)).astype(F32)
    a = smax.softmax(x, threads=1)
    b = smax.softmax(x, threads=2)
    np.testing.assert_array_equal(a, b)


# ---- layouts -------------------------------------------------------------------------


def _layouts(rng):
    base = rng.standard_normal((12, 40)).astype(F32) * 3
    return {
        "transposed": base.T,
        "step-slice": base[1::3, 2::5],
        "neg-rows": base[::-1],
        "neg-cols": base[:, ::-1],
        "neg-both-steps": base[::-2, ::-3],
        "fortran": np.asfortranarray(base),
        "broadcast": np.broadcast_to(base[:1], (5, 40)),
        "3d-perm": rng.standard_normal((4, 5, 6)).astype(F32).transpose(2, 0, 1),
    }


@pytest.mark.parametrize("name", ["transposed", "step-slice", "neg-rows", "neg-cols",
                                  "neg-both-steps", "fortran", "broadcast", "3d-perm"])
@pytest.mark.parametrize("dim", [0, -1])
def test_strided_inputs(rng, name, dim):
    x = _layouts(rng)[name]
    assert not x.flags.c_contiguous or name == "fortran"
    t = logits(np.ascontiguousarray(x))
    assert_softmax_close(smax.softmax(x, dim), ref_softmax(t, dim))
    assert_log_close(smax.log_softmax(x, dim), ref_log_softmax(t, dim))
    assert_log_close(smax.logsumexp(x, dim), ref_logsumexp(t, dim))


def test_strided_out_and_backward(rng):
    x = rng.standard_normal((7, 30)).astype(F32)
    buf = np.full((30, 14), 7.0, F32)
    out = buf.T[::2]  # (7, 30) strided view, stride (2, 14)
    r = smax.softmax(x, out=out)
    assert r is out
    assert_softmax_close(out, ref_softmax(logits(x)))
    assert (buf[:, 1::2] == 7.0).all()  # untouched columns
    y = smax.softmax(x)
    dy = rng.standard_normal((30, 7)).astype(F32).T  # transposed upstream gradient
    dx = smax.softmax_backward(y, dy)
    y64, dy64 = y.astype(np.float64), np.ascontiguousarray(dy).astype(np.float64)
    dot = (dy64 * y64).sum(-1, keepdims=True)
    want = y64 * (dy64 - dot)
    bound = 2e-6 * (np.abs(y64) * (np.abs(dy64) + np.abs(dot))) + 1e-30
    assert (np.abs(dx - want) <= bound).all()


def test_readonly_input(rng):
    x = rng.standard_normal((3, 9)).astype(F32)
    x.flags.writeable = False
    assert_softmax_close(smax.softmax(x), ref_softmax(logits(x)))
    with pytest.raises(TypeError):
        smax.softmax(np.ones((3, 9), F32), out=x)  # a read-only output is refused


# ---- zero copy -------------------------------------------------------------------------


def test_in_place_on_strided_view_writes_the_base(rng):
    base = rng.standard_normal((10, 30)).astype(F32)
    orig = base.copy()
    view = base[1::2, ::-3]  # steps and a negative stride
    want = ref_softmax(logits(np.ascontiguousarray(view)))
    r = smax.softmax(view, out=view)
    assert r is view
    assert_softmax_close(base[1::2, ::-3], want)  # the kernels wrote the base's memory
    untouched = np.ones(base.shape, bool)
    untouched[1::2, ::-3] = False
    np.testing.assert_array_equal(base[untouched], orig[untouched])


@pytest.mark.parametrize("make", [lambda b: b, lambda b: b[:, ::2], lambda b: b.T])
def test_input_is_not_copied(make, rng):
    # smax rejects an output that overlaps its input (other than exactly in
    # place). It can only see the overlap if x reached the kernels as the same
    # memory: a copy of x would not overlap `out`.
    base = rng.standard_normal((8, 16)).astype(F32)
    x = make(base)
    out = make(base)[1:] if x.shape[0] > 1 else None
    with pytest.raises(ValueError, match="overlap"):
        smax.softmax(x[:-1], out=out)


def test_log_softmax_backward_in_place(rng):
    x = rng.standard_normal((4, 33)).astype(F32)
    y = smax.log_softmax(x)
    dy = rng.standard_normal((4, 33)).astype(F32)
    want = smax.log_softmax_backward(y, dy)
    r = smax.log_softmax_backward(y, dy, out=dy)  # dx may alias dy
    assert r is dy
    np.testing.assert_array_equal(dy, want)


# ---- masks -----------------------------------------------------------------------------


@pytest.mark.parametrize("mask_shape", [(6, 20), (20,), (1, 20), (6, 1), (3, 6, 20)])
def test_bool_mask_broadcast(rng, mask_shape):
    x = rng.standard_normal((3, 6, 20)).astype(F32) if len(mask_shape) == 3 else \
        rng.standard_normal((6, 20)).astype(F32)
    mask = rng.random(mask_shape) > 0.3
    if mask_shape == (6, 1):
        mask[2, 0] = False  # a fully masked row
    t = logits(x, mask=mask)
    for er in ("zero", "nan"):
        assert_softmax_close(smax.softmax(x, mask=mask, empty_row=er), ref_softmax(t, empty_row=er))
        assert_log_close(smax.log_softmax(x, mask=mask, empty_row=er), ref_log_softmax(t, empty_row=er))
        assert_log_close(smax.logsumexp(x, mask=mask, empty_row=er), ref_logsumexp(t, empty_row=er))


def test_bool_mask_ignores_nan_under_mask(rng):
    x = rng.standard_normal((2, 8)).astype(F32)
    x[0, 3] = np.nan
    x[1, 5] = np.inf
    mask = np.ones((2, 8), bool)
    mask[0, 3] = mask[1, 5] = False
    y = smax.softmax(x, mask=mask)
    assert np.isfinite(y).all() and y[0, 3] == 0 and y[1, 5] == 0
    np.testing.assert_allclose(y.sum(-1), 1, rtol=1e-6)


def test_additive_mask(rng):
    x = rng.standard_normal((4, 5, 12)).astype(F32)
    mask = rng.standard_normal((5, 12)).astype(F32)
    mask[1, ::2] = -np.inf
    causal = np.triu(np.full((12, 12), -np.inf, F32), 1)
    for m in (mask, mask[None], mask[:, ::-1].copy()):
        t = logits(x, 0.5, 1.0, m)
        assert_softmax_close(smax.softmax(x, scale=0.5, mask=m), ref_softmax(t))
        assert_log_close(smax.log_softmax(x, scale=0.5, mask=m), ref_log_softmax(t))
    xs = rng.standard_normal((2, 12, 12)).astype(F32)
    assert_softmax_close(smax.softmax(xs, mask=causal), ref_softmax(logits(xs, mask=causal)))
    # a strided (transposed) mask
    mt = rng.standard_normal((12, 5)).astype(F32).T
    assert_softmax_close(smax.softmax(x, mask=mt), ref_softmax(logits(x, mask=mt)))


def test_uint8_mask_is_a_bool_mask(rng):
    x = rng.standard_normal((3, 10)).astype(F32)
    m = (rng.random((3, 10)) > 0.5).astype(np.uint8) * 7
    np.testing.assert_array_equal(smax.softmax(x, mask=m), smax.softmax(x, mask=m != 0))


# ---- other DLPack producers --------------------------------------------------------------


class DLPackOnly:
    """An array type smax knows nothing about, exporting only the DLPack protocol."""

    def __init__(self, a):
        self._a = a
        self.shape = a.shape
        self.dtype = a.dtype

    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_generic_dlpack_returns_numpy(rng):
    a = rng.standard_normal((5, 11)).astype(F32)
    y = smax.softmax(DLPackOnly(a[:, ::2]))
    assert isinstance(y, np.ndarray)
    assert_softmax_close(y, ref_softmax(logits(a[:, ::2])))
    lse = smax.logsumexp(DLPackOnly(a), 0, keepdim=True)
    assert isinstance(lse, np.ndarray) and lse.shape == (1, 11)
    m = DLPackOnly(rng.random((5, 11)) > 0.5)
    assert_softmax_close(smax.softmax(a, mask=m), ref_softmax(logits(a, mask=m._a)))


# ---- errors -------------------------------------------------------------------------------


def test_errors(rng):
    x = rng.standard_normal((3, 4)).astype(F32)
    with pytest.raises(TypeError, match="int64"):
        smax.softmax(x.astype(np.int64))
    with pytest.raises(TypeError):
        smax.softmax(x.astype(np.int32))
    with pytest.raises(TypeError):
        smax.softmax([[1.0, 2.0]])
    with pytest.raises(ValueError, match="out of range"):
        smax.softmax(x, 2)
    with pytest.raises(ValueError, match="out of range"):
        smax.logsumexp(x, -3)
    with pytest.raises(ValueError):
        smax.softmax(x, scale=0.0)
    with pytest.raises(ValueError):
        smax.softmax(x, temperature=float("nan"))
    with pytest.raises(ValueError, match="fast"):
        smax.softmax(x, algorithm="fast")
    with pytest.raises(ValueError):
        smax.softmax(x, empty_row="one")
    with pytest.raises(ValueError):
        smax.softmax(x, threads=-1)
    with pytest.raises(ValueError):
        smax.softmax(x, out=np.empty((4, 3), F32))
    with pytest.raises(TypeError):
        smax.softmax(x, out=np.empty((3, 4), np.int32))
    with pytest.raises(ValueError):
        smax.softmax(x, mask=np.ones((5,), bool))  # not broadcastable
    with pytest.raises(TypeError, match="mask"):
        smax.softmax(x, mask=np.ones((3, 4), np.int32))
    with pytest.raises(ValueError, match="rank"):
        smax.softmax(np.ones((1,) * 9, F32))
    with pytest.raises(ValueError):
        smax.softmax_backward(x, np.ones((3, 5), F32))
    with pytest.raises(ValueError):
        smax.softmax(x, out=np.broadcast_to(np.empty((1, 4), F32), (3, 4)).copy()[:, :0])


# ---- runtime ---------------------------------------------------------------------------------


def test_info_and_targets(rng):
    info = smax.info()
    assert info["version"] == smax.__version__ and smax.__version__.count(".") == 2
    assert info["active_target"] in info["supported_targets"]
    assert set(info["supported_targets"]) <= set(info["compiled_targets"])
    assert info["max_threads"] >= 1
    assert info["kernels"]["softmax"].startswith("f32_softmax")
    x = rng.standard_normal((4, 1000)).astype(F32)
    try:
        for target in info["supported_targets"]:
            smax.set_max_target(target.lower())
            assert smax.info()["active_target"] == target
            assert_softmax_close(smax.softmax(x), ref_softmax(logits(x)))
    finally:
        smax.set_max_target(None)
    assert smax.info()["active_target"] == info["active_target"]
    with pytest.raises(ValueError):
        smax.set_max_target("avx9000")


def test_threads_setting():
    old = smax.max_threads()
    try:
        smax.set_max_threads(1)
        assert smax.max_threads() == 1 and smax.info()["max_threads"] == 1
    finally:
        smax.set_max_threads(old)
    with pytest.raises(ValueError):
        smax.set_max_threads(0)


def test_streaming_stores_setting(rng):
    """Forced on and off give the same bits (softmax and log_softmax stream
    rows of >= 128 elements, the backward its dx rows when they are all 64-byte aligned,
    as numpy's allocation may or may not make them); bad modes raise and
    change nothing; "auto" starts every site's measurement over."""
    # 40 rows: more than one task of the grid (16 rows of 4096), so the
    # calls leave the short path, which never streams.
    x = rng.standard_normal((40, 4096)).astype(F32)
    dy = rng.standard_normal((40, 4096)).astype(F32)
    out = {}
    try:
        for mode in ("on", "off"):
            smax.set_streaming_stores(mode)
            assert smax.streaming_stores() == f"forced {mode}"
            assert smax.info()["streaming_stores"] == f"forced {mode}"
            y = smax.log_softmax(x)
            out[mode] = (y, smax.log_softmax_backward(y, dy), smax.softmax(x))
        assert np.array_equal(out["on"][0], out["off"][0])
        assert np.array_equal(out["on"][1], out["off"][1])
        assert np.array_equal(out["on"][2], out["off"][2])
        with pytest.raises(ValueError, match="sometimes"):
            smax.set_streaming_stores("sometimes")
        with pytest.raises(TypeError, match="str"):
            smax.set_streaming_stores(1)
        assert smax.streaming_stores() == "forced off"
    finally:
        smax.set_streaming_stores("auto")
    assert smax.streaming_stores() == (
        "softmax=measuring, log_softmax=measuring, backward=measuring, cross_entropy=measuring"
    )


# ---- GIL ---------------------------------------------------------------------------------------


def test_gil_released_during_kernels():
    x = np.random.default_rng(0).standard_normal((64, 1 << 18)).astype(F32)  # 64 MiB
    out = np.empty_like(x)
    seconds, inside = ticks_while(
        lambda: smax.softmax(x, out=out, threads=1, algorithm="two-pass"))
    # The main thread kept running while the kernel ran (it could not if the
    # call held the GIL).
    assert seconds > 0.01 and len(inside) > 10, (seconds, len(inside))
    assert_softmax_close(out[:2], ref_softmax(logits(x[:2])))
