"""Losses: cross_entropy against torch.nn.functional.cross_entropy with every
option (values and autograd gradients), the entmax package's losses, float64
formulas for the others, linear_cross_entropy against torch, numpy arrays,
strided inputs and errors."""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import smax  # noqa: E402
import smax.torch as st  # noqa: E402
from conftest import ticks_while  # noqa: E402
from conftest import torch_close as close  # noqa: E402
from conftest import torch_grad_close as grad_close  # noqa: E402

entmax = pytest.importorskip("entmax")
F = torch.nn.functional


pytestmark = pytest.mark.usefixtures("torch_seed")  # torch.manual_seed(0) per test


def _targets(n_rows_shape, C, ignore=True):
    t = torch.randint(0, C, n_rows_shape)
    if ignore:
        t.view(-1)[::4] = -100  # some ignored rows
    return t


# ---- cross_entropy vs torch ----------------------------------------------------------------------


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("use_weight", [False, True])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
@pytest.mark.parametrize("shape", [(16, 10), (4, 7, 3), (9,)])
def test_cross_entropy_class_indices(reduction, use_weight, label_smoothing, shape):
    C = shape[1] if len(shape) > 1 else shape[0]
    x = (torch.randn(shape) * 3).requires_grad_(True)
    tshape = shape[:1] + shape[2:] if len(shape) > 1 else ()
    target = _targets(tshape, C, ignore=len(shape) > 1)
    w = torch.rand(C) + 0.5 if use_weight else None
    loss = st.cross_entropy(x, target, w, reduction=reduction, label_smoothing=label_smoothing)
    x64 = x.detach().double().requires_grad_(True)
    ref = F.cross_entropy(x64, target, None if w is None else w.double(),
                          reduction=reduction, label_smoothing=label_smoothing)
    assert loss.shape == ref.shape and loss.dtype == torch.float32
    close(loss, ref)
    g = torch.rand(ref.shape) + 0.5 if reduction == "none" else torch.tensor(1.7)
    loss.backward(g)
    ref.backward(g.double())
    grad_close(x.grad, x64.grad)
    # the array function routes to autograd and gives the same bits
    plain = smax.cross_entropy(x.detach(), target, w, reduction=reduction,
                               label_smoothing=label_smoothing)
    assert torch.equal(plain, loss.detach())


@pytest.mark.parametrize("label_smoothing", [0.0, 0.2])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_cross_entropy_probability_targets(label_smoothing, reduction):
    x = torch.randn(8, 6, requires_grad=True)
    q = torch.softmax(torch.randn(8, 6), -1)
    w = torch.rand(6) + 0.5
    loss = st.cross_entropy(x, q, w, reduction=reduction, label_smoothing=label_smoothing)
    x64 = x.detach().double().requires_grad_(True)
    ref = F.cross_entropy(x64, q.double(), w.double(), reduction=reduction,
                          label_smoothing=label_smoothing)
    close(loss, ref)
    g = torch.rand(ref.shape) + 0.5
    loss.backward(g)
    ref.backward(g.double())
    grad_close(x.grad, x64.grad)


def test_cross_entropy_ignore_index_all_ignored_and_custom_index():
    x = torch.randn(4, 5)
    t = torch.full((4,), 3)
    t[1] = 7  # a custom ignore_index
    close(smax.cross_entropy(x, t, ignore_index=7), F.cross_entropy(x.double(), t, ignore_index=7))
    allign = torch.full((4,), -100)
    assert torch.isnan(smax.cross_entropy(x, allign))
    assert smax.cross_entropy(x, allign, empty_mean="zero").item() == 0.0
    assert smax.cross_entropy(x, allign, reduction="sum").item() == 0.0


def test_cross_entropy_extras_z_loss_softcap():
    x = (torch.randn(6, 9) * 4).requires_grad_(True)
    t = torch.randint(0, 9, (6,))
    c, cap = 1e-3, 5.0
    loss, z, lse, ent, tlp, acc = st.cross_entropy(
        x, t, lse_square_scale=c, softcap=cap, return_z_loss=True, return_lse=True,
        return_entropy=True, return_target_logprob=True, return_accuracy=True)
    x64 = x.detach().double().requires_grad_(True)
    u = cap * torch.tanh(x64 / cap)
    L = torch.logsumexp(u, -1)
    ref = F.cross_entropy(u, t, reduction="none") + c * L**2
    close(loss, ref.mean())
    close(z, (c * L**2).mean())
    close(lse, L)
    logp = torch.log_softmax(u, -1)
    close(ent, -(logp.exp() * logp).sum(-1))
    close(tlp, logp.gather(1, t[:, None])[:, 0])
    close(acc, (u.argmax(-1) == t).double().mean())
    loss.backward()
    ref.mean().backward()
    grad_close(x.grad, x64.grad)


def test_cross_entropy_scale_mask_and_dim():
    x = torch.randn(5, 8, requires_grad=True)
    t = torch.randint(0, 6, (5,))
    keep = torch.ones(8, dtype=torch.bool)
    keep[6:] = False
    loss = st.cross_entropy(x, t, mask=keep, scale=0.5)
    x64 = x.detach().double().requires_grad_(True)
    ref = F.cross_entropy((x64 * 0.5).masked_fill(~keep, -math.inf), t)
    close(loss, ref)
    loss.backward()
    ref.backward()
    grad_close(x.grad, x64.grad)
    assert (x.grad[:, 6:] == 0).all()
    # classes on the last dim of a 3-D tensor
    y = torch.randn(2, 3, 7)
    tt = torch.randint(0, 7, (2, 3))
    close(smax.cross_entropy(y, tt, dim=-1), F.cross_entropy(y.double().permute(0, 2, 1), tt))


def test_cross_entropy_module_and_numpy():
    x = torch.randn(10, 4)
    t = torch.randint(0, 4, (10,))
    m = st.CrossEntropyLoss(ignore_index=-100, label_smoothing=0.1)
    close(m(x, t), F.cross_entropy(x.double(), t, label_smoothing=0.1))
    xn, tn = x.numpy(), t.numpy()
    r = smax.cross_entropy(xn, tn, reduction="none")
    assert isinstance(r, np.ndarray) and r.shape == (10,)
    close(torch.from_numpy(r), F.cross_entropy(x.double(), t, reduction="none"))


def test_cross_entropy_strided_logits():
    base = torch.randn(12, 20)
    x = base[::2, 1::2]  # non-contiguous
    t = torch.randint(0, 10, (6,))
    close(smax.cross_entropy(x, t), F.cross_entropy(x.double(), t))
    xt = base.t()[:, :6].t()  # transposed storage
    close(smax.cross_entropy(xt, t), F.cross_entropy(xt.double(), t))


def test_cross_entropy_errors():
    x = torch.randn(4, 5)
    out = torch.full((), 9.0)
    with pytest.raises(ValueError):
        smax.cross_entropy(x, torch.tensor([0, 1, 5, 2]), out=out)
    assert out.item() == 9.0
    with pytest.raises(TypeError):
        smax.cross_entropy(x, torch.tensor([0, 1, 2, 3], dtype=torch.int32))
    with pytest.raises(ValueError):
        smax.cross_entropy(x, torch.tensor([0, 1, 2, 3]), label_smoothing=1.5)
    with pytest.raises(ValueError):
        smax.cross_entropy(x, torch.tensor([0, 1, 2, 3]), reduction="avg")
    with pytest.raises(TypeError, match="int32"):
        smax.cross_entropy(x.int(), torch.tensor([0, 1, 2, 3]))


# ---- entmax package losses --------------------------------------------------------------------

ENTMAX_LOSSES = {
    "sparsemax": (st.SparsemaxLoss, entmax.SparsemaxLoss, {}),
    "entmax15": (st.Entmax15Loss, entmax.Entmax15Loss, {}),
    "bisect": (lambda **kw: st.EntmaxBisectLoss(alpha=1.3, **kw),
               lambda **kw: entmax.EntmaxBisectLoss(alpha=1.3, n_iter=80, **kw), {}),
}


@pytest.mark.parametrize("name", list(ENTMAX_LOSSES))
@pytest.mark.parametrize("reduction", ["none", "sum", "elementwise_mean"])
@pytest.mark.parametrize("ignore_index", [-100, 2])
def test_entmax_losses(name, reduction, ignore_index):
    ours_cls, ref_cls, _ = ENTMAX_LOSSES[name]
    x = (torch.randn(12, 7) * 2).requires_grad_(True)
    t = torch.randint(0, 7, (12,))
    loss = ours_cls(ignore_index=ignore_index, reduction=reduction)(x, t)
    x64 = x.detach().double().requires_grad_(True)
    ref = ref_cls(ignore_index=ignore_index, reduction=reduction)(x64, t)
    close(loss, ref, rtol=1e-5, atol=2e-6)
    g = torch.rand(ref.shape) + 0.5
    loss.backward(g)
    ref.backward(g.double())
    grad_close(x.grad, x64.grad)


def test_entmax_loss_functions_numpy():
    x = np.random.default_rng(0).standard_normal((6, 5)).astype(np.float32)
    t = np.array([0, 1, 2, 3, 4, 0])
    for ours, ref in ((smax.sparsemax_loss, entmax.sparsemax_loss),
                      (smax.entmax15_loss, entmax.entmax15_loss)):
        r = ours(x, t, reduction="none")
        assert isinstance(r, np.ndarray)
        close(torch.from_numpy(r), ref(torch.from_numpy(x).double(), torch.from_numpy(t)))


# ---- other losses vs float64 formulas ---------------------------------------------------------


def ref_stablemax_ce(t, y):
    s = torch.where(t >= 0, t + 1, 1 / (1 - torch.where(t >= 0, torch.zeros_like(t), t)))
    return -torch.log(s.gather(1, y[:, None])[:, 0] / s.sum(-1))


def ref_spherical(t, y, a, b):
    z = (t - t.mean(-1, keepdim=True)) / t.std(-1, unbiased=False, keepdim=True)
    return F.softplus(a * (b - z.gather(1, y[:, None])[:, 0])) / a


def ref_topk_loss(t, y, k):
    v = t.topk(k, -1).values
    return torch.logsumexp(v, -1) - t.gather(1, y[:, None])[:, 0]


OTHER = {
    "stablemax_cross_entropy": (lambda x, y, **kw: st.stablemax_cross_entropy(x, y, **kw),
                                ref_stablemax_ce),
    "spherical_z_loss": (lambda x, y, **kw: st.spherical_z_loss(x, y, 2.0, 1.0, **kw),
                         lambda t, y: ref_spherical(t, y, 2.0, 1.0)),
    "z_loss": (lambda x, y, **kw: st.z_loss(x, y, 1e-2, **kw),
               lambda t, y: 1e-2 * torch.logsumexp(t, -1) ** 2),
    "z_loss_no_target": (lambda x, y, **kw: st.z_loss(x, None, 1e-2, **kw),
                         lambda t, y: 1e-2 * torch.logsumexp(t, -1) ** 2),
    "sparse_softmax_loss": (lambda x, y, **kw: st.sparse_softmax_loss(x, y, 3, **kw),
                            lambda t, y: ref_topk_loss(t, y, 3)),
}


@pytest.mark.parametrize("name", list(OTHER))
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_other_losses(name, reduction):
    ours, ref = OTHER[name]
    x = (torch.randn(10, 8) * 2).requires_grad_(True)
    t = torch.randint(0, 8, (10,))
    w = torch.rand(8) + 0.5
    weighted = name not in ("z_loss_no_target",)
    loss = ours(x, t, reduction=reduction, weight=w if weighted else None)
    x64 = x.detach().double().requires_grad_(True)
    per_row = ref(x64, t)
    rw = w.double()[t] if weighted else torch.ones(10, dtype=torch.float64)
    red = {"none": per_row * rw, "sum": (per_row * rw).sum(),
           "mean": (per_row * rw).sum() / rw.sum()}[reduction]
    close(loss, red, rtol=1e-5, atol=1e-6)
    g = torch.rand(red.shape) + 0.5
    loss.backward(g)
    red.backward(g.double())
    grad_close(x.grad, x64.grad)


# ---- linear_cross_entropy ---------------------------------------------------------------------


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_linear_cross_entropy(reduction, label_smoothing):
    N, D, V = 24, 16, 300
    h = torch.randn(N, D, requires_grad=True)
    W = (torch.randn(V, D) * 0.3).requires_grad_(True)
    b = (torch.randn(V) * 0.1).requires_grad_(True)
    t = _targets((N,), V)
    loss = st.linear_cross_entropy(h, W, t, b, reduction=reduction,
                                   label_smoothing=label_smoothing, vocab_chunk=64,
                                   token_chunk=8)
    h64, W64, b64 = (a.detach().double().requires_grad_(True) for a in (h, W, b))
    ref = F.cross_entropy(h64 @ W64.t() + b64, t, reduction=reduction,
                          label_smoothing=label_smoothing)
    close(loss, ref, rtol=1e-4, atol=1e-5)
    g = torch.rand(ref.shape) + 0.5
    loss.backward(g)
    ref.backward(g.double())
    for a, r in ((h, h64), (W, W64), (b, b64)):
        grad_close(a.grad, r.grad, rtol=2e-4)
    # the array function without autograd, numpy in / numpy out
    r = smax.linear_cross_entropy(h.detach().numpy(), W.detach().numpy(), t.numpy(),
                                  b.detach().numpy(), reduction=reduction,
                                  label_smoothing=label_smoothing)
    assert isinstance(r, np.ndarray)
    close(torch.from_numpy(np.asarray(r)), ref, rtol=1e-4, atol=1e-5)


def test_loss_errors():
    x = torch.randn(4, 5)
    with pytest.raises(ValueError):
        smax.sparsemax_loss(x, torch.tensor([0, 1, 9, 2]))
    with pytest.raises(TypeError):
        smax.entmax15_loss(x, torch.tensor([0.0, 1.0, 2.0, 3.0]))
    with pytest.raises(ValueError):
        smax.spherical_z_loss(x, torch.tensor([0, 1, 2, 3]), -1.0, 0.0)
    with pytest.raises(ValueError):
        smax.sparse_softmax_loss(x, torch.tensor([0, 1, 2, 3]), 0)


# ---- adversarial rows, zero copy, threads, DLPack, GIL ----------------------------------------


def test_cross_entropy_adversarial_rows():
    inf, nan = math.inf, math.nan
    x = torch.tensor([
        [90.0, 95.0, 100.0, 92.0],      # naive exp overflows
        [-1e30, 0.0, 1e30, 5.0],        # huge magnitudes
        [-inf, 1.0, 2.0, -inf],         # -inf logits: probability 0, gradient 0
        [1.0, nan, 0.0, 2.0],           # NaN -> NaN loss and gradient
        [3.0, 3.0, 3.0, 3.0],           # constant row
        [0.0, -inf, 1.0, 2.0],          # target's own logit is -inf -> +inf
    ], requires_grad=True)
    t = torch.tensor([2, 2, 1, 0, 3, 1])
    loss = st.cross_entropy(x, t, reduction="none")
    x64 = x.detach().double().requires_grad_(True)
    ref = F.cross_entropy(x64, t, reduction="none")
    close(loss, ref)
    assert math.isinf(loss[5].item()) and loss[5] > 0
    g = torch.tensor([1.0, 0.5, 2.0, 1.0, 1.5, 0.0])
    loss.backward(g)
    ref[:5].backward(g[:5].double())
    grad_close(x.grad[[0, 1, 2, 4]], x64.grad[[0, 1, 2, 4]])
    assert (x.grad[2, [0, 3]] == 0).all()
    assert torch.isnan(x.grad[3]).all()
    # the entmax losses on the same rows (finite ones)
    for ours, ref_fn in ((smax.sparsemax_loss, entmax.sparsemax_loss),
                         (smax.entmax15_loss, entmax.entmax15_loss)):
        rows = [0, 1, 4]
        close(ours(x.detach()[rows], t[rows], reduction="none"),
              ref_fn(x64.detach()[rows], t[rows]), rtol=1e-5, atol=1e-5)


def test_loss_inputs_are_not_copied():
    # An output overlapping an input is rejected (ValueError), which the
    # extension can only see if it reads the caller's memory, not a copy.
    x = torch.randn(6, 5)
    t = torch.randint(0, 5, (6,))
    with pytest.raises(ValueError):
        smax.cross_entropy(x, t, reduction="none", out=x[:, 0])
    with pytest.raises(ValueError):
        smax.sparsemax_loss(x, t, reduction="none", out=x[:, 1])
    # out= into a strided view of a bigger buffer
    buf = torch.full((6, 3), 9.0)
    r = smax.cross_entropy(x, t, reduction="none", out=buf[:, 1])
    assert r.data_ptr() == buf[:, 1].data_ptr()
    close(buf[:, 1], F.cross_entropy(x.double(), t, reduction="none"))
    assert (buf[:, [0, 2]] == 9.0).all()


@pytest.mark.parametrize("op", ["cross_entropy", "sparsemax_loss", "entmax_bisect_loss",
                                "stablemax_cross_entropy"])
def test_losses_bitwise_across_threads(op):
    x = torch.randn(64, 300)
    t = torch.randint(0, 300, (64,))
    fn = getattr(smax, op)
    kw = {"dim": -1} if op == "cross_entropy" else {}
    outs = [fn(x, t, reduction="none", threads=n, **kw) for n in (1, 2, 3)]
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])


class DLPackOnly:
    """An array type smax does not know: only the DLPack protocol."""

    def __init__(self, a):
        self._a = a
        self.shape = a.shape

    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_generic_dlpack_arrays():
    x = np.random.default_rng(0).standard_normal((5, 7)).astype(np.float32)
    t = np.array([0, 1, 2, 3, 4])
    r = smax.cross_entropy(DLPackOnly(x), DLPackOnly(t), reduction="none")
    assert isinstance(r, np.ndarray)
    close(torch.from_numpy(r), F.cross_entropy(torch.from_numpy(x).double(), torch.from_numpy(t),
                                               reduction="none"))
    y = smax.sparsemax(DLPackOnly(x))
    assert isinstance(y, np.ndarray)
    np.testing.assert_array_equal(y, smax.sparsemax(x))


def test_gil_released_during_loss_kernels():
    x = torch.randn(64, 1 << 17) * 4  # 32 MiB of logits
    t = torch.randint(0, 1 << 17, (64,))

    def work():
        for _ in range(3):
            smax.cross_entropy(x, t, label_smoothing=0.1, return_entropy=True, threads=1)

    seconds, inside = ticks_while(work)
    assert seconds > 0.01 and len(inside) > 10


# ---- the fused path: forward stores d loss / d logits for a unit upstream gradient ---------------


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("mode", ["fused", "inplace", "two-call"])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_cross_entropy_fused_paths_vs_torch(reduction, mode, label_smoothing):
    C = 37
    x0 = torch.randn(12, C) * 3
    t = _targets((12,), C)
    w = torch.rand(C) + 0.5
    x = x0.clone().requires_grad_(True)
    loss = st.cross_entropy(x, t, w, reduction=reduction, label_smoothing=label_smoothing,
                            fused=mode != "two-call", inplace_backward=mode == "inplace")
    x64 = x0.double().requires_grad_(True)
    ref = F.cross_entropy(x64, t, w.double(), reduction=reduction,
                          label_smoothing=label_smoothing)
    close(loss, ref)
    # random upstream gradients (per row for "none"), 1 (the multiply is skipped) and 0.37
    for g in ([torch.randn(ref.shape)] if reduction == "none"
              else [torch.tensor(1.0), torch.tensor(0.37)]):
        xi = x0.clone().requires_grad_(True)
        li = st.cross_entropy(xi, t, w, reduction=reduction, label_smoothing=label_smoothing,
                              fused=mode != "two-call", inplace_backward=mode == "inplace")
        li.backward(g)
        x64.grad = None
        F.cross_entropy(x64, t, w.double(), reduction=reduction,
                        label_smoothing=label_smoothing).backward(g.double())
        grad_close(xi.grad, x64.grad)
        if mode == "inplace":  # the gradient lives in the logits' storage
            assert xi.grad.data_ptr() == xi.data_ptr()


def test_cross_entropy_fused_matches_two_call_bitwise_and_options():
    # dloss = 1: the fused gradient has the bits of cross_entropy_backward(dloss = 1).
    x0 = torch.randn(4, 9, 5) * 4
    t = _targets((4, 5), 9)
    keep = torch.rand(9, 1) > 0.2
    kw = dict(label_smoothing=0.1, lse_square_scale=1e-3, softcap=5.0, scale=0.7, mask=keep)
    grads = []
    for fused, inplace in ((False, False), (True, False), (True, True)):
        x = x0.clone().requires_grad_(True)
        loss, z = st.cross_entropy(x, t, fused=fused, inplace_backward=inplace,
                                   return_z_loss=True, **kw)
        loss.backward()
        grads.append(x.grad.clone())
    assert torch.equal(grads[0], grads[1]) and torch.equal(grads[0], grads[2])
    # probability targets, reduction none with a random upstream gradient
    q = torch.softmax(torch.randn(6, 11), dim=1)
    x = (torch.randn(6, 11) * 2).requires_grad_(True)
    g = torch.randn(6)
    st.cross_entropy(x, q, reduction="none").backward(g)
    x64 = x.detach().double().requires_grad_(True)
    F.cross_entropy(x64, q.double(), reduction="none").backward(g.double())
    grad_close(x.grad, x64.grad)


def test_cross_entropy_fused_backward_once_and_no_double_backward():
    x = torch.randn(5, 8).requires_grad_(True)
    t = torch.randint(0, 8, (5,))
    loss = st.cross_entropy(x, t)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="fused=False"):
        loss.backward()
    # fused=False supports retain_graph
    x.grad = None
    loss = st.cross_entropy(x, t, fused=False)
    loss.backward(retain_graph=True)
    g1 = x.grad.clone()
    loss.backward()
    close(x.grad, 2 * g1)
    # double backward: a clear error naming the op
    loss = st.cross_entropy(x, t)
    (gx,) = torch.autograd.grad(loss, x, create_graph=True)
    with pytest.raises(RuntimeError,
                       match=r"smax\.cross_entropy: double backward is not supported"):
        gx.sum().backward()


def test_cross_entropy_fused_without_grad_and_numpy_grad_out():
    x = torch.randn(6, 10)
    t = torch.randint(0, 10, (6,))
    x0 = x.clone()
    st.cross_entropy(x, t, inplace_backward=True)  # no gradient needed: logits untouched
    assert torch.equal(x, x0)
    # the array API's fused output (smax._ops level): grad of a unit upstream gradient
    from smax import _ops as O
    g = np.empty((6, 10), np.float32)
    xn = x.numpy()
    loss, _ = O._cross_entropy_fwd(xn, t.numpy(), None, -100, "sum", 0.0, None, 0.0, 0.0,
                                   [False] * 5, "nan", 1.0, 1.0, None, "zero", 0, None, g)
    x64 = x.double().requires_grad_(True)
    F.cross_entropy(x64, t, reduction="sum").backward()
    grad_close(torch.from_numpy(g), x64.grad)
    buf = np.random.default_rng(0).standard_normal((6, 11)).astype(np.float32)
    before = buf.copy()
    with pytest.raises(ValueError, match="overlaps"):  # partial overlap with the logits
        O._cross_entropy_fwd(buf[:, :10], t.numpy(), None, -100, "sum", 0.0, None, 0.0, 0.0,
                             [False] * 5, "nan", 1.0, 1.0, None, "zero", 0, None, buf[:, 1:])
    assert np.array_equal(buf, before)
