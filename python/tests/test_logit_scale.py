"""Learnable ``scale`` and ``temperature``: every differentiable op reads its
logits as ``t = x * scale / temperature + mask``, so a one-element tensor
that requires grad gets d loss / d scale and d loss / d temperature
(``smax.logit_scale_gradients`` on the op's input and input gradient).

Each op is checked against itself on pre-scaled logits: ``op(x, scale=S,
temperature=T)`` against ``op(x * (S / T), scale=1, temperature=1)`` with
the multiplication in torch's autograd, values and every gradient (x, S, T),
plus ``torch.autograd.gradcheck`` in float64, the hand vector of docs/numerics.md, the
numpy helper, and the errors for knobs an op does not differentiate."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import smax  # noqa: E402
import smax.torch as st  # noqa: E402

R, C = 4, 9
TARGET = torch.tensor([0, 3, 8, 5])
PROB_TARGET = torch.softmax(torch.linspace(-1, 1, R * C).reshape(R, C), -1)

# op name -> call(x, **knobs); x is [R, C] float64 (logits along the last dim).
OPS = {
    "softmax": lambda x, **k: st.softmax(x, -1, **k),
    "log_softmax": lambda x, **k: st.log_softmax(x, -1, **k),
    "logsumexp": lambda x, **k: st.logsumexp(x, -1, **k),
    "softmax_masked": lambda x, **k: st.softmax(
        x, -1, mask=torch.linspace(-2, 2, C, dtype=torch.float64), **k),
    "sparsemax": lambda x, **k: st.sparsemax(x, -1, **k),
    "entmax15": lambda x, **k: st.entmax15(x, -1, **k),
    "entmax_bisect": lambda x, **k: st.entmax_bisect(x, 1.3, -1, **k),
    "sparse_softmax": lambda x, **k: st.sparse_softmax(x, 4, -1, **k),
    "ssmax": lambda x, **k: st.ssmax(x, 0.5, -1, **k),
    "softpick": lambda x, **k: st.softpick(x, -1, **k),
    "clipped_softmax": lambda x, **k: st.clipped_softmax(x, -1, **k),
    "stablemax": lambda x, **k: st.stablemax(x, -1, **k),
    "self_adjust_softmax": lambda x, **k: st.self_adjust_softmax(x, -1, **k),
    "sigmoid_normalizer": lambda x, **k: st.sigmoid_normalizer(x, -1, **k),
    "softplus_normalizer": lambda x, **k: st.softplus_normalizer(x, -1, **k),
    "power_softmax": lambda x, **k: st.power_softmax(x, 2, -1, **k),
    "logit_standardization": lambda x, **k: st.logit_standardization(
        x, -1, **{n: v for n, v in k.items() if n == "scale"}),
    "sparsemax_loss": lambda x, **k: st.sparsemax_loss(x, TARGET, **k),
    "entmax15_loss": lambda x, **k: st.entmax15_loss(x, TARGET, **k),
    "entmax_bisect_loss": lambda x, **k: st.entmax_bisect_loss(x, TARGET, 1.3, **k),
    "sparse_softmax_loss": lambda x, **k: st.sparse_softmax_loss(x, TARGET, 4, **k),
    "stablemax_cross_entropy": lambda x, **k: st.stablemax_cross_entropy(x, TARGET, **k),
    "spherical_z_loss": lambda x, **k: st.spherical_z_loss(x, TARGET, 1.0, 0.5, **k),
    "z_loss": lambda x, **k: st.z_loss(x, TARGET, 1e-2, **k),
    "cross_entropy": lambda x, **k: st.cross_entropy(
        x, TARGET, label_smoothing=0.1, lse_square_scale=1e-3, softcap=5.0, **k),
    "cross_entropy_two_call": lambda x, **k: st.cross_entropy(x, TARGET, fused=False, **k),
    "cross_entropy_probs": lambda x, **k: st.cross_entropy(x, PROB_TARGET.double(), **k),
    "array_cross_entropy": lambda x, **k: smax.cross_entropy(x, TARGET, **k),
    "gumbel_softmax": lambda x, **k: st.gumbel_softmax(x, 0.8, seed=7, **k),
    "softmax_topk": lambda x, **k: st.softmax_topk(x, 3, -1, **k)[0],
}
SCALE_ONLY = {"logit_standardization"}  # its temperature is the paper's, after standardising


def _grads(op, x0, s0, t0, prescale):
    x = x0.clone().requires_grad_()
    s = torch.tensor(s0, dtype=torch.float64, requires_grad=True)
    t = torch.tensor(t0, dtype=torch.float64, requires_grad=(op not in SCALE_ONLY))
    if prescale:
        y = OPS[op](x * (s / t))
    else:
        y = OPS[op](x, scale=s, temperature=t)
    g = torch.linspace(-1, 1, y.numel(), dtype=y.dtype).reshape(y.shape)
    (y * g).sum().backward()
    return y.detach(), x.grad, s.grad, t.grad


@pytest.mark.parametrize("op", sorted(OPS))
def test_knob_gradients_match_prescaled_logits(op):
    torch.manual_seed(1)
    x0 = torch.randn(R, C, dtype=torch.float64) * 2
    y, dx, ds, dt = _grads(op, x0, 1.3, 0.7, prescale=False)
    y_r, dx_r, ds_r, dt_r = _grads(op, x0, 1.3, 0.7, prescale=True)
    torch.testing.assert_close(y, y_r, rtol=2e-5, atol=1e-6)
    torch.testing.assert_close(dx, dx_r, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(ds, ds_r, rtol=1e-4, atol=1e-5)
    if op in SCALE_ONLY:
        assert dt is None
    else:
        torch.testing.assert_close(dt, dt_r, rtol=1e-4, atol=1e-5)


def test_linear_cross_entropy_temperature_and_bias():
    """Logits h W^T + b: dT = -(1/T) (<h, dh> + <b, db>), both taps summed."""
    torch.manual_seed(2)
    h0, w0, b0 = torch.randn(6, 5), torch.randn(11, 5), torch.randn(11)
    target = torch.tensor([0, 1, 10, 4, 4, 7])

    def run(prescale):
        h, w, b = (v.clone().requires_grad_() for v in (h0, w0, b0))
        t = torch.tensor(0.6, requires_grad=True)
        if prescale:
            loss = torch.nn.functional.cross_entropy((h @ w.T + b) / t, target)
        else:
            loss = st.linear_cross_entropy(h, w, target, b, temperature=t)
        loss.backward()
        return loss.detach(), h.grad, w.grad, b.grad, t.grad

    for got, want in zip(run(False), run(True)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_gradcheck_float64():
    x = torch.randn(3, 6, dtype=torch.float64, requires_grad=True)
    t = torch.tensor(0.7, dtype=torch.float64, requires_grad=True)
    s = torch.tensor(1.3, dtype=torch.float64, requires_grad=True)
    # scale and temperature are float32 options (smax::SoftmaxOptions), so the
    # numerical derivative needs a step well above float32's spacing at 0.7.
    for fn in (st.softmax, st.log_softmax, st.logsumexp):
        assert torch.autograd.gradcheck(
            lambda x, t, s: fn(x, -1, temperature=t, scale=s), (x, t, s), eps=1e-3,
            atol=1e-5, rtol=1e-3)


def test_spec_vector_and_shapes():
    # softmax([0, 1, 3] / 2), g = [1, 0, 0]: dT = 0.0742180 (docs/numerics.md).
    t = torch.tensor([2.0], requires_grad=True)  # a one-element tensor keeps its shape
    y = st.softmax(torch.tensor([0.0, 1.0, 3.0]), temperature=t)
    y[0].backward()
    assert t.grad.shape == (1,)
    assert abs(float(t.grad) - 0.0742180) < 5e-7
    # A tensor knob without grad is just its value; x need not require grad.
    x = torch.tensor([0.0, 1.0, 3.0])
    assert torch.equal(st.softmax(x, temperature=torch.tensor(2.0)), st.softmax(x, temperature=2.0))
    assert torch.equal(smax.softmax(x, temperature=torch.tensor(2.0)), smax.softmax(x, temperature=2.0))


def test_numpy_helper():
    x = np.array([[1.0, np.inf, 2.0], [0.5, -1.0, np.nan]], np.float32)
    dx = np.array([[0.5, 0.0, -0.25], [2.0, 1.0, 0.0]], np.float32)
    s = 0.5 - 0.5 + 1.0 - 1.0  # inf and NaN sit under zero gradients
    ds, dt = smax.logit_scale_gradients(x, dx, scale=2.0, temperature=0.5)
    assert ds == s / 2.0 and dt == -s / 0.5
    ds, dt = smax.logit_scale_gradients(x.T, dx.T.astype(np.float64), temperature=4.0)
    assert ds == s and dt == -s / 4.0
    with pytest.raises(ValueError, match="logit_scale_gradients.*shape"):
        smax.logit_scale_gradients(x, dx[:, :2])


def test_errors():
    x = torch.randn(2, 5)
    t = torch.tensor(2.0, requires_grad=True)
    with pytest.raises(ValueError, match="temperature must be a number or a one-element tensor"):
        st.softmax(x, temperature=torch.ones(2, requires_grad=True))
    with pytest.raises(TypeError, match="logit_standardization: temperature is a tensor that "
                                        "requires grad"):
        st.logit_standardization(x, temperature=t)
    with pytest.raises(TypeError, match="softmax_backward: temperature is a tensor that requires"):
        smax.softmax_backward(x, x, temperature=t)
    with pytest.raises(TypeError, match="needs x as a torch tensor"):
        smax.softmax(x.numpy(), temperature=t)
    # inplace_backward overwrites the logits the knob's gradient needs.
    with pytest.raises(ValueError, match="inplace_backward=True overwrites the logits"):
        st.cross_entropy(x.clone().requires_grad_(), torch.tensor([0, 1]), temperature=t,
                         inplace_backward=True)
    # The op's own name in the error, with a learnable scale beside it.
    with pytest.raises(TypeError, match="logit_standardization: temperature"):
        st.logit_standardization(x, scale=torch.tensor(2.0, requires_grad=True), temperature=t)
    # Integer tensors are values (they cannot require grad).
    assert torch.equal(st.softmax(x, scale=torch.tensor(2)), st.softmax(x, scale=2.0))
