"""Normalisers beyond softmax: values and gradients against the `entmax`
package (sparsemax, entmax15, entmax_bisect) and float64 PyTorch formulas (the
rest), torch autograd, numpy in / numpy out, strided inputs, zero-copy,
special values and errors."""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import smax  # noqa: E402
import smax.torch as st  # noqa: E402
from conftest import torch_close as close  # noqa: E402
from conftest import torch_grad_close as grad_close  # noqa: E402

entmax = pytest.importorskip("entmax")

F32 = np.float32


pytestmark = pytest.mark.usefixtures("torch_seed")  # torch.manual_seed(0) per test


def backward_close(y, y64, *pairs):
    """Backpropagates one random upstream gradient (never all ones) through y and
    through its float64 reference y64, then compares the gradients of each
    (leaf, float64 leaf) pair. Returns the upstream gradient."""
    g = torch.randn(y.shape)
    y.backward(g)
    y64.backward(g.double())
    for leaf, leaf64 in pairs:
        grad_close(leaf.grad, leaf64.grad)
    return g


# ---- float64 reference formulas ---------------------------------------------------------------


def ref_stablemax(t, d):
    s = torch.where(t >= 0, t + 1, 1 / (1 - torch.where(t >= 0, torch.zeros_like(t), t)))
    return s / s.sum(d, keepdim=True)


def ref_softpick(t, d, eps=1e-6):
    e = torch.exp(t) - 1
    return torch.relu(e) / (e.abs().sum(d, keepdim=True) + eps)


def ref_ssmax(t, d, s=0.43):
    n = t.shape[d]
    return torch.softmax(t * (s * math.log(n)), d)


def ref_self_adjust(t, d, normalized=False):
    p = torch.softmax(t, d)
    if not normalized:
        return t * p
    a = torch.clamp(t.min(d, keepdim=True).values, max=0)
    b = torch.clamp(t.max(d, keepdim=True).values, min=0)
    return (t - a) / (b - a) * p


def ref_sigmoid(t, d):
    return torch.sigmoid(t - math.log(t.shape[d]))


def ref_softplus(t, d, lambd=0.7, power=1.0):
    a = torch.nn.functional.softplus(lambd * t) ** power
    return a / a.sum(d, keepdim=True)


def ref_power(t, d, p=2):
    a = t**p
    return a / a.sum(d, keepdim=True)


def ref_prob_temp(p, d, T=0.7):
    a = p ** (1 / T)
    return a / a.sum(d, keepdim=True)


def ref_logit_std(t, d, temperature=2.0, eps=1e-7):
    z = (t - t.mean(d, keepdim=True)) / (t.std(d, keepdim=True) + eps)
    return torch.softmax(z / temperature, d)


def ref_sparse_softmax(t, d, k):
    idx = t.topk(k, d).indices
    keep = torch.zeros_like(t, dtype=torch.bool).scatter_(d, idx, True)
    return torch.softmax(t.masked_fill(~keep, -math.inf), d)


def ref_clipped(t, d, gamma=-0.1, zeta=1.2):
    """Bondarenko et al.'s reference: torch.clip((zeta - gamma) * softmax + gamma, 0, 1)."""
    return torch.clip((zeta - gamma) * torch.softmax(t, d) + gamma, 0, 1)


def _pos(x):
    return x.abs() + 0.05


# name -> (smax.torch function(x, dim), float64 reference(t, dim), input transform)
FORMULAS = {
    "stablemax": (lambda x, d: st.stablemax(x, d), ref_stablemax, None),
    "softpick": (lambda x, d: st.softpick(x, d), ref_softpick, None),
    "clipped_softmax": (lambda x, d: st.clipped_softmax(x, d, gamma=-0.1, zeta=1.2),
                        ref_clipped, None),
    "ssmax": (lambda x, d: st.ssmax(x, 0.43, d), ref_ssmax, None),
    "self_adjust": (lambda x, d: st.self_adjust_softmax(x, d), ref_self_adjust, None),
    "self_adjust_normalized": (
        lambda x, d: st.self_adjust_softmax(x, d, normalized=True),
        lambda t, d: ref_self_adjust(t, d, True), None),
    "sigmoid_normalizer": (lambda x, d: st.sigmoid_normalizer(x, d), ref_sigmoid, None),
    "softplus_normalizer": (lambda x, d: st.softplus_normalizer(x, d, lambd=0.7),
                            ref_softplus, None),
    "softplus_normalizer_power2": (
        lambda x, d: st.softplus_normalizer(x, d, lambd=0.7, power=2.0),
        lambda t, d: ref_softplus(t, d, 0.7, 2.0), None),
    "power_softmax": (lambda x, d: st.power_softmax(x, 2, d), ref_power, None),
    "power_softmax4": (lambda x, d: st.power_softmax(x, 4, d), lambda t, d: ref_power(t, d, 4),
                       None),
    "probability_temperature": (lambda p, d: st.probability_temperature(p, 0.7, d),
                                ref_prob_temp, _pos),
    "logit_standardization": (lambda x, d: st.logit_standardization(x, d, temperature=2.0),
                              ref_logit_std, None),
    "sparse_softmax": (lambda x, d: st.sparse_softmax(x, 3, d),
                       lambda t, d: ref_sparse_softmax(t, d, 3), None),
    "sparsemax": (lambda x, d: st.sparsemax(x, d), lambda t, d: entmax.sparsemax(t, d), None),
    "entmax15": (lambda x, d: st.entmax15(x, d), lambda t, d: entmax.entmax15(t, d), None),
    "entmax_bisect": (lambda x, d: st.entmax_bisect(x, 1.3, d),
                      lambda t, d: entmax.entmax_bisect(t, 1.3, d, n_iter=80), None),
    "entmax_bisect_a2": (lambda x, d: st.entmax_bisect(x, 2.0, d),
                         lambda t, d: entmax.entmax_bisect(t, 2.0, d, n_iter=80), None),
}


@pytest.mark.parametrize("name", list(FORMULAS))
@pytest.mark.parametrize("shape,dim", [((6, 13), -1), ((3, 5, 7), 1), ((9, 4), 0)])
def test_values_and_gradients(name, shape, dim):
    ours, ref, tf = FORMULAS[name]
    x = torch.randn(shape) * 2
    if tf is not None:
        x = tf(x)
    x.requires_grad_(True)
    y = ours(x, dim)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32 and y.shape == x.shape
    x64 = x.detach().double().requires_grad_(True)
    y64 = ref(x64, dim)
    close(y, y64)
    backward_close(y, y64, (x, x64))


@pytest.mark.parametrize("name", ["sparsemax", "entmax15", "stablemax", "softpick", "ssmax",
                                  "clipped_softmax"])
def test_numpy_in_numpy_out_and_same_bits_as_torch(name):
    fn = getattr(smax, name)
    x = np.random.default_rng(1).standard_normal((5, 33)).astype(F32)
    y = fn(x)
    assert isinstance(y, np.ndarray) and y.dtype == F32 and y.shape == x.shape
    yt = fn(torch.from_numpy(x))
    assert isinstance(yt, torch.Tensor)
    np.testing.assert_array_equal(y, yt.numpy())


def test_entmax_long_rows_and_temperature():
    x = torch.randn(3, 32000) * 3
    for ours, ref in ((smax.sparsemax, entmax.sparsemax), (smax.entmax15, entmax.entmax15)):
        close(ours(x), ref(x.double(), -1))
        close(ours(x, scale=2.0, temperature=4.0), ref((x * 0.5).double(), -1))


def test_entmax_bisect_per_row_alpha_gradient():
    x = (torch.randn(5, 11) * 2).requires_grad_(True)
    alpha = (1.2 + torch.rand(5, 1)).requires_grad_(True)
    y = st.entmax_bisect(x, alpha, -1)
    x64 = x.detach().double().requires_grad_(True)
    a64 = alpha.detach().double().requires_grad_(True)
    y64 = entmax.entmax_bisect(x64, a64, -1, n_iter=80)
    close(y, y64)
    g = backward_close(y, y64, (x, x64), (alpha, a64))
    # a broadcast alpha (one for every row) gets the sum of the row gradients
    a1 = torch.tensor(1.5, requires_grad=True)
    b1 = torch.tensor(1.5, dtype=torch.float64, requires_grad=True)
    st.entmax_bisect(x.detach(), a1, -1).backward(g)
    entmax.entmax_bisect(x64.detach(), b1, -1, n_iter=80).backward(g.double())
    grad_close(a1.grad, b1.grad)


def test_ssmax_learnable_s_gradient():
    x = torch.randn(2, 3, 10).requires_grad_(True)
    s = torch.tensor([[[0.4]], [[0.7]]]).requires_grad_(True)
    y = st.ssmax(x, s, -1)
    x64 = x.detach().double().requires_grad_(True)
    s64 = s.detach().double().requires_grad_(True)
    y64 = torch.softmax(x64 * (s64 * math.log(10)), -1)
    close(y, y64)
    backward_close(y, y64, (x, x64), (s, s64))


def test_masks_and_mask_gradient():
    x = torch.randn(4, 9)
    keep = torch.rand(4, 9) > 0.3
    keep[:, 0] = True
    for fn in (st.sparsemax, st.entmax15, st.stablemax, st.softpick, st.sigmoid_normalizer):
        xr = x.clone().requires_grad_(True)
        y = fn(xr, -1, mask=keep)
        assert (y[~keep] == 0).all()
        xm = x.masked_fill(~keep, -math.inf).requires_grad_(True)
        ref = fn(xm, -1)
        torch.testing.assert_close(y, ref)
        g = torch.randn(4, 9)
        y.backward(g)
        ref.backward(g)
        assert (xr.grad[~keep] == 0).all()  # masked: exactly 0 gradient
        torch.testing.assert_close(xr.grad, xm.grad)
    # an additive float mask that requires grad (a learned bias)
    bias = (torch.randn(9) * 0.1).requires_grad_(True)
    xr = x.clone().requires_grad_(True)
    y = st.stablemax(xr, -1, mask=bias, scale=2.0)
    x64 = x.double().requires_grad_(True)
    b64 = bias.detach().double().requires_grad_(True)
    y64 = ref_stablemax(x64 * 2.0 + b64, -1)
    close(y, y64)
    backward_close(y, y64, (xr, x64), (bias, b64))


def test_special_values():
    inf, nan = math.inf, math.nan
    x = torch.tensor([
        [1.0, 2.0, nan, 0.0],          # NaN -> NaN row
        [-inf, 1.0, 2.0, -inf],        # -inf -> exactly 0
        [-inf, -inf, -inf, -inf],      # all masked: empty_row
        [3.0, 3.0, 3.0, 3.0],          # constant: uniform
    ])
    for fn in (smax.sparsemax, smax.entmax15, smax.entmax_bisect, smax.stablemax):
        y = fn(x)
        assert torch.isnan(y[0]).all()
        assert y[1, 0] == 0 and y[1, 3] == 0
        assert (y[2] == 0).all()
        assert torch.isnan(fn(x, empty_row="nan")[2]).all()
        torch.testing.assert_close(y[3], torch.full((4,), 0.25))
    one = torch.tensor([[5.0]])
    for fn in (smax.sparsemax, smax.entmax15, smax.entmax_bisect):
        assert fn(one).item() == 1.0
        assert fn(torch.empty(3, 0)).shape == (3, 0)


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_strided_inputs(dim):
    base = torch.randn(6, 8, 10)
    views = [base.transpose(0, 2), base[:, ::2, 1:], base.transpose(1, 2)[1:], base.permute(2, 0, 1)]
    for v in views:
        assert not v.is_contiguous()
        for ours, ref in ((smax.sparsemax, entmax.sparsemax), (smax.entmax15, entmax.entmax15)):
            close(ours(v, dim), ref(v.double(), dim))
        close(smax.stablemax(v, dim), ref_stablemax(v.double(), dim))
        vn = v.numpy()
        assert not vn.flags.c_contiguous
        close(smax.sparsemax(vn, dim), entmax.sparsemax(torch.from_numpy(vn).double(), dim))
    neg = base.numpy()[::-1, :, ::-2]  # negative strides (numpy only)
    close(smax.entmax15(neg, dim), entmax.entmax15(torch.from_numpy(neg.copy()).double(), dim))


def test_zero_copy_out_and_in_place():
    base = torch.randn(8, 12)
    x = base[:, ::2]  # strided view
    want = smax.entmax15(x.clone())
    out_base = torch.full((8, 12), 7.0)
    out = out_base[:, 1::2]
    r = smax.entmax15(x, out=out)
    assert r is out
    torch.testing.assert_close(out_base[:, 1::2], want)
    assert (out_base[:, ::2] == 7.0).all()  # untouched between the strided columns
    # in place on a strided view writes the base tensor's memory
    smax.entmax15(x, out=x)
    torch.testing.assert_close(base[:, ::2], want)
    # numpy in place
    a = np.random.default_rng(0).standard_normal((4, 9)).astype(F32)
    w = smax.sparsemax(a.copy())
    ptr = a.ctypes.data
    smax.sparsemax(a, out=a)
    assert a.ctypes.data == ptr
    np.testing.assert_array_equal(a, w)


def test_input_is_not_copied():
    # Outputs that overlap a (strided) input other than exactly are rejected:
    # only possible if the extension sees the caller's memory, not a copy.
    x = torch.randn(4, 10)
    with pytest.raises(ValueError):
        smax.sparsemax(x[:, :9], out=x[:, 1:])


def test_backward_array_functions():
    x = np.random.default_rng(3).standard_normal((4, 7)).astype(F32)
    dy = np.random.default_rng(4).standard_normal((4, 7)).astype(F32)
    xt = torch.from_numpy(x).double().requires_grad_(True)
    y64 = entmax.sparsemax(xt, -1)
    y64.backward(torch.from_numpy(dy).double())
    dx = smax.sparsemax_backward(smax.sparsemax(x), dy)
    assert isinstance(dx, np.ndarray)
    grad_close(torch.from_numpy(dx), xt.grad)
    dx, da = smax.entmax_bisect_backward(smax.entmax_bisect(x, 1.5), dy, 1.5, return_dalpha=True)
    assert da.shape == (4, 1)


def test_collapse_fraction():
    x = np.zeros((4, 16), F32)
    x[0, 0] = 40.0   # the others underflow next to it in f32: collapsed
    x[1, 0] = 5.0    # not collapsed
    x[2, 3] = 12.0   # collapsed in bf16 / f16, not in f32
    frac, flags = smax.softmax_collapse_fraction(x, return_flags=True)
    assert flags.shape == (4,) and flags[0] == 1 and flags[1] == 0
    assert frac == pytest.approx(flags.mean())
    assert smax.softmax_collapse_fraction(x, precision="bf16") >= frac


def test_errors():
    x = torch.randn(3, 5)
    with pytest.raises(TypeError, match="int32"):
        smax.sparsemax(x.int())
    with pytest.raises(ValueError):
        smax.entmax_bisect(x, alpha=0.5)
    with pytest.raises(ValueError):
        smax.entmax_bisect(x, n_iter=0)
    with pytest.raises(ValueError):
        smax.sparse_softmax(x, 0)
    with pytest.raises(ValueError):
        smax.power_softmax(x, 3)
    with pytest.raises(ValueError):
        smax.sparsemax(x, dim=2)
    with pytest.raises(ValueError):
        smax.softpick(x, eps=-1.0)
    with pytest.raises(ValueError):
        smax.softmax_collapse_fraction(x, precision="f8")
    with pytest.raises(TypeError):
        smax.sparsemax([1.0, 2.0])
    out = torch.full((3, 5), 3.0)
    with pytest.raises(ValueError):
        smax.sparsemax(x, out=out[:, :4])
    assert (out == 3.0).all()


@pytest.mark.parametrize("name", ["sparsemax", "entmax15", "entmax_bisect", "softpick",
                                  "logit_standardization", "ssmax"])
def test_bitwise_across_threads_and_layouts(name):
    fn = getattr(smax, name)
    x = torch.randn(40, 257) * 3
    ys = [fn(x, threads=n) for n in (1, 2, 3)]
    assert torch.equal(ys[0], ys[1]) and torch.equal(ys[0], ys[2])
    # the same rows seen through a transposed layout (dim 0) give the same bits
    assert torch.equal(fn(x.t().contiguous(), dim=0).t(), ys[0])


def test_entmax_bisect_options_vs_package():
    x = torch.randn(7, 12) * 0.5  # supports of several entries (see the test below)
    for n_iter in (5, 30):
        for ens in (True, False):
            close(smax.entmax_bisect(x, 1.7, -1, n_iter, ens),
                  entmax.entmax_bisect(x.double(), 1.7, -1, n_iter, ens), rtol=1e-4, atol=1e-5)
    close(smax.entmax_bisect(x, 1.0), torch.softmax(x.double(), -1))  # alpha = 1: softmax
    close(st.EntmaxBisect(alpha=1.5)(x), entmax.EntmaxBisect(alpha=1.5)(x.double()))
    close(st.Sparsemax()(x), entmax.Sparsemax()(x.double()))
    close(st.Entmax15(dim=0)(x), entmax.Entmax15(dim=0)(x.double()))


# Regression: a support of one entry used to drift to tau_hi (1/n instead of 1).
def test_entmax_bisect_single_support_without_normalisation():
    x = torch.tensor([[0.0, 3.0], [0.0, 0.5]])
    close(smax.entmax_bisect(x, 1.7, -1, 50, False),
          entmax.entmax_bisect(x.double(), 1.7, -1, 50, False))


def test_clipped_softmax_defaults_zeros_and_errors():
    # Default gamma = -0.025, zeta = 1 (the paper's BERT setting): entries with
    # p < 0.025 / 1.025 become exactly 0, the rest keep the stretched value.
    x = torch.tensor([[4.0, 1.0, -3.0, 0.0]])
    y = smax.clipped_softmax(x)
    want = torch.clip(1.025 * torch.softmax(x.double(), -1) - 0.025, 0, 1)
    close(y, want)
    assert y[0, 2].item() == 0.0
    # gamma = 0, zeta = 1 is softmax, bit for bit.
    xs = np.random.default_rng(3).standard_normal((4, 50)).astype(F32)
    assert np.array_equal(smax.clipped_softmax(xs, gamma=0.0, zeta=1.0), smax.softmax(xs))
    with pytest.raises(ValueError, match="clipped_softmax: gamma must be finite and <= 0"):
        smax.clipped_softmax(xs, gamma=0.5)
    with pytest.raises(ValueError, match="clipped_softmax: zeta must be finite and >= 1"):
        smax.clipped_softmax(xs, zeta=0.5)
