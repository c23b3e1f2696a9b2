"""Shared helpers: float64 references computed from the same float32 logits
the library computes (docs/numerics.md), and the documented error bounds."""
import numpy as np
import pytest

F32 = np.float32


def logits(x, scale=1.0, temperature=1.0, mask=None):
    """t = fl(fl(x * s) + mask), s = fl(scale / temperature), -inf where a bool mask is
    False; returned in float64 (exact widening)."""
    x = np.asarray(x, dtype=F32)
    s = F32(scale) / F32(temperature)
    t = x if s == F32(1) else (x * s).astype(F32)
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype == np.bool_ or mask.dtype == np.uint8:
            t = np.where(np.broadcast_to(mask, t.shape) != 0, t, F32(-np.inf)).astype(F32)
        else:
            t = (t + mask.astype(F32)).astype(F32)
    return np.asarray(t, dtype=np.float64)


def _row_stats(t, dim):
    with np.errstate(invalid="ignore", over="ignore"):
        m = np.max(t, axis=dim, keepdims=True)
        bad = np.isnan(t).any(axis=dim, keepdims=True) | np.isposinf(t).any(axis=dim, keepdims=True)
        empty = np.isneginf(m)
        m_safe = np.where(np.isfinite(m), m, 0.0)
        e = np.exp(t - m_safe)
        ssum = e.sum(axis=dim, keepdims=True)
    return m_safe, e, ssum, bad, empty


def ref_softmax(t, dim=-1, empty_row="zero"):
    if t.ndim == 0:
        return np.float64(np.nan) if np.isnan(t) or np.isinf(t) else np.float64(1.0)
    m, e, s, bad, empty = _row_stats(t, dim)
    with np.errstate(invalid="ignore", divide="ignore"):
        y = e / s
    y = np.where(empty, 0.0 if empty_row == "zero" else np.nan, y)
    return np.where(bad, np.nan, y)


def ref_log_softmax(t, dim=-1, empty_row="zero"):
    m, e, s, bad, empty = _row_stats(t, dim)
    with np.errstate(invalid="ignore", divide="ignore"):
        y = (t - m) - np.log(s)
    y = np.where(empty, -np.inf if empty_row == "zero" else np.nan, y)
    return np.where(bad, np.nan, y)


def ref_logsumexp(t, dim=-1, keepdim=False, empty_row="zero"):
    m, e, s, bad, empty = _row_stats(t, dim)
    with np.errstate(invalid="ignore", divide="ignore"):
        y = m + np.log(s)  # an all -inf row: log(0) = -inf
    if empty_row == "nan":
        y = np.where(empty, np.nan, y)
    y = np.where(bad, np.nan, y)
    return y if keepdim else np.squeeze(y, axis=dim)


def assert_softmax_close(got, want):
    """softmax bound: relative error <= 2e-6 on outputs >= 1e-30, absolute 1e-36 below."""
    got = np.asarray(got, dtype=np.float64)
    assert got.shape == want.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = np.isnan(want) | (np.abs(got - want) <= 2e-6 * np.abs(want) + 1e-36)
    assert ok.all(), f"max rel err {np.nanmax(np.abs(got - want) / np.maximum(np.abs(want), 1e-30))}"


def assert_log_close(got, want):
    """log_softmax / logsumexp bound: absolute error <= 2e-6 * (1 + |value|)."""
    got = np.asarray(got, dtype=np.float64)
    assert got.shape == want.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    inf = np.isinf(want)
    np.testing.assert_array_equal(got[inf], want[inf])
    fin = np.isfinite(want)
    err = np.abs(got[fin] - want[fin])
    assert (err <= 2e-6 * (1 + np.abs(want[fin]))).all(), f"max abs err {err.max() if err.size else 0}"


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


# ---- shared by the torch test modules (torch imported when called) ----------------------------


@pytest.fixture
def torch_seed():
    """torch.manual_seed(0) before each test of a module that uses it
    (``pytestmark = pytest.mark.usefixtures("torch_seed")``)."""
    import torch

    torch.manual_seed(0)


def torch_close(got, want, rtol=2e-5, atol=2e-6):
    """got (float32 tensor or array) vs a float64 reference tensor, NaN where
    the reference is NaN."""
    import torch

    if isinstance(got, torch.Tensor):
        g = got.detach().double()
    else:
        g = torch.from_numpy(np.asarray(got, dtype=np.float64))
    w = want.detach().double()
    assert g.shape == w.shape, (g.shape, w.shape)
    torch.testing.assert_close(g, w, rtol=rtol, atol=atol, equal_nan=True)


def torch_grad_close(got, want, rtol=1e-4):
    """Gradients: absolute error relative to the gradient's scale."""
    import torch

    scale = want.abs().max().item() + 1e-12
    torch.testing.assert_close(got.double(), want.double(), rtol=rtol, atol=rtol * scale)


# ---- GIL ---------------------------------------------------------------------------------------


def ticks_while(call):
    """Runs call() in another thread while this one records perf_counter()
    ticks, yielding the GIL between them; returns (seconds call() took, the
    ticks inside that span). A call that holds the GIL leaves no ticks inside."""
    import threading
    import time

    span = {}

    def work():
        span["t0"] = time.perf_counter()
        call()
        span["t1"] = time.perf_counter()

    ticks = []
    th = threading.Thread(target=work)
    th.start()
    while th.is_alive():
        ticks.append(time.perf_counter())
        time.sleep(0)  # yield the GIL between ticks
    th.join()
    t0, t1 = span["t0"], span["t1"]
    return t1 - t0, [t for t in ticks if t0 < t < t1]
