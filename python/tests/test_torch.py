"""smax with PyTorch: values and gradients against torch (float64 and float32),
torch in -> torch out, autograd (gradcheck), masks, layouts, zero-copy."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import smax  # noqa: E402
import smax.torch as st  # noqa: E402
from conftest import assert_log_close, assert_softmax_close  # noqa: E402

OPS = {
    "softmax": (st.softmax, lambda x, d: torch.softmax(x, d)),
    "log_softmax": (st.log_softmax, lambda x, d: torch.log_softmax(x, d)),
    "logsumexp": (st.logsumexp, lambda x, d: torch.logsumexp(x, d)),
}


def _check(name, got, want64):
    g, w = got.detach().double().numpy(), want64.detach().numpy()
    if name == "softmax":
        assert_softmax_close(g, w)
    else:
        assert_log_close(g, w)


pytestmark = pytest.mark.usefixtures("torch_seed")  # torch.manual_seed(0) per test


# ---- values ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(OPS))
@pytest.mark.parametrize("shape,dim", [((8, 100), -1), ((4, 6, 10), 1), ((5, 7), 0), ((3, 20000), -1)])
def test_values_vs_torch(name, shape, dim):
    ours, ref = OPS[name]
    x = torch.randn(shape) * 5
    y = ours(x, dim)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32
    _check(name, y, ref(x.double(), dim))
    torch.testing.assert_close(y, ref(x, dim), rtol=1e-5, atol=1e-5)
    # the plain array functions give the same bits for torch tensors
    plain = getattr(smax, name)(x, dim)
    assert isinstance(plain, torch.Tensor)
    assert torch.equal(plain, y)


def test_logsumexp_keepdim():
    x = torch.randn(3, 4, 5)
    for d in range(-3, 3):
        for k in (False, True):
            y = st.logsumexp(x, d, k)
            assert y.shape == torch.logsumexp(x, d, k).shape
            _check("logsumexp", y, torch.logsumexp(x.double(), d, k))


def test_adversarial_vs_torch():
    x = torch.tensor(
        [
            [90.0, 92.5, 95.0, 97.5, 100.0, 99.0],
            [-float("inf"), 0.0, 1.0, -float("inf"), 2.0, 3.0],
            [1.0, float("nan"), 2.0, 3.0, 4.0, 5.0],
            [-1e30, 1e30, 0.0, 1.0, 2.0, 3.0],
        ]
    )
    for name, (ours, ref) in OPS.items():
        _check(name, ours(x), ref(x.double(), -1))
    allmasked = torch.full((2, 5), -float("inf"))
    # torch: NaN softmax / log_softmax, -inf logsumexp; smax "nan" matches the first two.
    assert torch.isnan(st.softmax(allmasked, empty_row="nan")).all()
    assert torch.equal(torch.isnan(torch.softmax(allmasked, -1)), torch.isnan(st.softmax(allmasked, empty_row="nan")))
    assert (st.softmax(allmasked) == 0).all()
    assert torch.isneginf(st.log_softmax(allmasked)).all()
    assert torch.equal(st.logsumexp(allmasked), torch.logsumexp(allmasked, -1))


@pytest.mark.parametrize("name", list(OPS))
def test_non_contiguous(name):
    ours, ref = OPS[name]
    base = torch.randn(20, 30)
    for x in (base.t(), base[::2, 1::3], base[:, 5], base.t()[3:17:2], base.unsqueeze(0).expand(4, 20, 30)):
        assert not x.is_contiguous() or x.dim() == 1
        for d in range(x.dim()):
            _check(name, ours(x, d), ref(x.double(), d))


def test_masks_vs_torch():
    x = torch.randn(2, 3, 16, 16)
    causal = torch.ones(16, 16, dtype=torch.bool).tril()
    bias = torch.randn(3, 1, 16)
    ref = torch.softmax((x * 0.25).masked_fill(~causal, -float("inf")), -1)
    torch.testing.assert_close(st.softmax(x, scale=0.25, mask=causal), ref, rtol=1e-5, atol=1e-6)
    ref = torch.softmax(x * 0.25 + bias, -1)
    torch.testing.assert_close(st.softmax(x, scale=0.25, mask=bias), ref, rtol=1e-5, atol=1e-6)
    ref = torch.log_softmax(x / 0.7 + bias, -1)
    torch.testing.assert_close(st.log_softmax(x, temperature=0.7, mask=bias), ref, rtol=1e-5, atol=1e-5)
    # padding mask with one fully masked query row
    pad = torch.ones(2, 1, 16, 16, dtype=torch.bool)
    pad[1, 0, 3] = False
    y = st.softmax(x, mask=pad)
    assert (y[1, :, 3] == 0).all()
    assert torch.isnan(st.softmax(x, mask=pad, empty_row="nan")[1, :, 3]).all()


# ---- gradients -----------------------------------------------------------------------------


def _grads(fn, x, dy, **kw):
    x = x.detach().clone().requires_grad_(True)
    y = fn(x, **kw)
    y.backward(dy)
    return y.detach(), x.grad


@pytest.mark.parametrize("shape,dim", [((6, 50), -1), ((4, 5, 6), 1), ((7, 3), 0)])
@pytest.mark.parametrize("scale", [1.0, 0.3])
def test_softmax_grad_vs_torch(shape, dim, scale):
    x = torch.randn(shape) * 3
    dy = torch.randn(shape)
    y, g = _grads(lambda v: st.softmax(v, dim, scale=scale), x, dy)
    y64, g64 = _grads(lambda v: torch.softmax(v * scale, dim), x.double(), dy.double())
    # |dx - ref| <= 2e-6 * s * |y| * (|dy| + |<dy, y>|) (+ the effect of y's own error)
    dot = (dy.double() * y64).sum(dim, keepdim=True).abs()
    bound = 6e-6 * scale * y64.abs() * (dy.double().abs() + dot + (dy.double() * y64).abs().sum(dim, keepdim=True)) + 1e-30
    assert ((g.double() - g64).abs() <= bound).all()
    torch.testing.assert_close(g, torch.autograd.grad(torch.softmax(x.requires_grad_() * scale, dim), x, dy)[0],
                               rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("shape,dim", [((6, 50), -1), ((4, 5, 6), 1), ((7, 3), 0)])
def test_log_softmax_grad_vs_torch(shape, dim):
    x = torch.randn(shape) * 3
    dy = torch.randn(shape)
    _, g = _grads(lambda v: st.log_softmax(v, dim, temperature=2.0), x, dy)
    _, g64 = _grads(lambda v: torch.log_softmax(v / 2.0, dim), x.double(), dy.double())
    torch.testing.assert_close(g.double(), g64, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("keepdim", [False, True])
def test_logsumexp_grad_vs_torch(keepdim):
    x = torch.randn(4, 5, 6) * 3
    for d in (0, 1, -1):
        dy = torch.randn(torch.logsumexp(x, d, keepdim).shape)
        _, g = _grads(lambda v: st.logsumexp(v, d, keepdim, scale=1.5), x, dy)
        _, g64 = _grads(lambda v: torch.logsumexp(v * 1.5, d, keepdim), x.double(), dy.double())
        torch.testing.assert_close(g.double(), g64, rtol=1e-5, atol=1e-6)


def test_grad_masked_entries_are_zero():
    x = torch.randn(3, 8, requires_grad=True)
    mask = torch.rand(3, 8) > 0.4
    mask[1] = False  # fully masked row
    for fn in (st.softmax, st.log_softmax):
        (g,) = torch.autograd.grad(fn(x, mask=mask).exp().sum() if fn is st.log_softmax
                                   else (fn(x, mask=mask) * torch.randn(3, 8)).sum(), x)
        assert (g[~mask] == 0).all() and torch.isfinite(g).all()
    (g,) = torch.autograd.grad(st.logsumexp(x, mask=mask).clamp(min=-1e30).sum(), x)
    assert (g[~mask] == 0).all()


def test_additive_mask_grad():
    x = torch.randn(2, 4, 10, requires_grad=True)
    bias = (torch.randn(4, 10) * 0.5).requires_grad_(True)
    dy = torch.randn(2, 4, 10)
    for ours, ref in ((st.softmax, torch.softmax), (st.log_softmax, torch.log_softmax)):
        gx, gb = torch.autograd.grad(ours(x, scale=0.5, mask=bias), (x, bias), dy)
        rx, rb = torch.autograd.grad(ref(x * 0.5 + bias, -1), (x, bias), dy)
        torch.testing.assert_close(gx, rx, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(gb, rb, rtol=1e-4, atol=1e-6)
    dl = torch.randn(2, 4)
    gx, gb = torch.autograd.grad(st.logsumexp(x, mask=bias, temperature=2.0), (x, bias), dl)
    rx, rb = torch.autograd.grad(torch.logsumexp(x / 2.0 + bias, -1), (x, bias), dl)
    torch.testing.assert_close(gx, rx, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(gb, rb, rtol=1e-4, atol=1e-6)


def test_expanded_upstream_gradient():
    # (y * w).sum() hands backward an expanded dy with zero strides
    x = torch.randn(5, 9, requires_grad=True)
    st.softmax(x).sum().backward()
    torch.testing.assert_close(x.grad, torch.zeros(5, 9), atol=1e-6, rtol=0)
    x.grad = None
    st.log_softmax(x, 0).sum().backward()
    x64 = x.detach().double().requires_grad_()
    torch.log_softmax(x64, 0).sum().backward()
    torch.testing.assert_close(x.grad.double(), x64.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", list(OPS))
def test_gradcheck(name):
    # gradcheck on float32 tensors, with a step and tolerances sized for
    # float32 central differences (with masks and transposed inputs); the
    # float64 gradcheck of every differentiable op is in test_dtypes.py.
    ours, _ = OPS[name]
    x = (torch.randn(3, 7) * 1.5).requires_grad_(True)
    mask = torch.randn(3, 7).requires_grad_(True)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "not double precision"
        assert torch.autograd.gradcheck(lambda a, m: ours(a, -1, scale=0.8, mask=m), (x, mask),
                                        eps=1e-2, atol=2e-3, rtol=1e-2)
        assert torch.autograd.gradcheck(lambda a: ours(a.t(), 0), (x,), eps=1e-2, atol=2e-3, rtol=1e-2)


def test_non_floating_is_a_type_error():
    # float64 / float16 / bfloat16 are accepted: test_dtypes.py
    x = torch.randn(3, 4, dtype=torch.float64)
    with pytest.raises(TypeError, match="int32"):
        st.softmax(x.int())
    with pytest.raises(TypeError, match="complex"):
        smax.log_softmax(x.to(torch.complex64))
    with pytest.raises(TypeError):
        st.softmax(np.ones((2, 2), np.float32))


def test_tensors_dlpack_cannot_carry_are_type_errors():
    # CPU strided tensors reach the extension as DLPack capsules
    # (smax/_common.py, _arg); any other tensor keeps the extension's own
    # import and its TypeError, with nothing written.
    with pytest.raises(TypeError, match="CPU"):
        smax.softmax(torch.empty(3, 4, device="meta"))
    with pytest.raises(TypeError):
        smax.softmax(torch.randn(3, 4).to_sparse())
    out = torch.full((3, 4), 7.0)
    with pytest.raises(TypeError):
        smax.softmax(torch.randn(3, 4).to_sparse(), out=out)
    assert bool((out == 7.0).all())


def test_double_backward_raises():
    x = torch.randn(3, 4, requires_grad=True)
    (g,) = torch.autograd.grad(st.softmax(x)[:, 0].sum(), x, create_graph=True)
    with pytest.raises(RuntimeError):
        g.sum().backward()


def test_plain_functions_route_autograd():
    x = torch.randn(4, 6, requires_grad=True)
    y = smax.softmax(x)
    assert y.requires_grad
    (y * torch.arange(6.0)).sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    with torch.no_grad():
        assert not smax.softmax(x).requires_grad
    with pytest.raises(RuntimeError):
        smax.softmax(torch.randn(4, 6), out=torch.empty(4, 6, requires_grad=True))


def test_nn_module_and_modules():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 5)
            self.act = st.LogSoftmax(dim=-1)

        def forward(self, v):
            return self.act(self.lin(v))

    net = Net()
    v = torch.randn(16, 8)
    out = net(v)
    torch.testing.assert_close(out, torch.log_softmax(net.lin(v), -1), rtol=1e-5, atol=1e-5)
    torch.nn.functional.nll_loss(out, torch.randint(0, 5, (16,))).backward()
    assert net.lin.weight.grad is not None
    assert "dim=-1" in repr(st.Softmax(-1, temperature=0.5))
    torch.testing.assert_close(st.LogSumExp(0, True)(v), torch.logsumexp(v, 0, True), rtol=1e-5, atol=1e-5)


# ---- zero copy / out= ---------------------------------------------------------------------------


def test_torch_in_place_on_transposed_view():
    base = torch.randn(12, 9)
    orig = base.clone()
    view = base.t()[:, ::2]  # (9, 6), non-contiguous
    want = torch.softmax(view.clone(), 0)
    r = smax.softmax(view, 0, out=view)
    assert r is view
    torch.testing.assert_close(base[::2, :].t(), want, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(base[1::2], orig[1::2], rtol=0, atol=0)


def test_torch_input_not_copied():
    base = torch.randn(10, 16)
    with pytest.raises(ValueError, match="overlap"):
        smax.softmax(base.t()[:, :-1], out=base.t()[:, 1:])
    with pytest.raises(ValueError, match="overlap"):
        smax.log_softmax(base[:, ::2][:-1], out=base[:, ::2][1:])


def test_out_tensor_and_numpy_mask_with_torch_input():
    x = torch.randn(3, 5)
    out = torch.empty(3, 5)
    r = smax.softmax(x, out=out, mask=np.array([True, True, False, True, True]))
    assert r is out and (out[:, 2] == 0).all()
    assert out.data_ptr() == r.data_ptr()
    with pytest.raises(TypeError):
        smax.softmax(x, out=torch.empty(3, 5, dtype=torch.int32))
