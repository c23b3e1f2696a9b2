"""Every output a user can put in a loss is differentiable (issue 18 item 5):
cross_entropy's and linear_cross_entropy's extras (z_loss, lse, entropy,
target_logprob) against a float64 torch reference, gumbel_softmax's soft
sample; accuracy is not differentiable and says so; inplace_backward
refuses to differentiate the extras with a clear error."""
import pytest
import torch

import smax.torch as st

EXTRAS = ("z_loss", "lse", "entropy", "target_logprob")


def _reference_extras(x, target, weight, mask, s, softcap, zs, ignore_index, reduction):
    """The extras of cross_entropy, in float64 with torch autograd (classes on dim 1)."""
    u = x * s
    c = softcap * torch.tanh(u / softcap) if softcap else u
    t = c if mask is None else c + mask
    L = torch.logsumexp(t, 1)
    logp = t - L[:, None]
    p = logp.exp()
    valid = target != ignore_index
    y = torch.where(valid, target, torch.zeros_like(target))
    w = (weight[y] if weight is not None else torch.ones_like(L)) * valid
    z = zs * w * L ** 2
    if reduction == "mean":
        z = z.sum() / w.sum()
    elif reduction == "sum":
        z = z.sum()
    tlp = torch.where(valid, logp.gather(1, y[:, None])[:, 0], torch.zeros_like(L))
    return {"z_loss": z, "lse": L, "entropy": -(p * logp).sum(1), "target_logprob": tlp}


def _weights(outs):
    gen = torch.Generator().manual_seed(3)
    return [torch.randn(o.shape, generator=gen, dtype=o.dtype) for o in outs]


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("reduction", ["mean", "none"])
@pytest.mark.parametrize("softcap", [0.0, 3.0])
def test_cross_entropy_extras_gradients_match_reference(fused, reduction, softcap):
    gen = torch.Generator().manual_seed(0)
    x0 = 2 * torch.randn(5, 7, generator=gen, dtype=torch.float64)
    m0 = 0.3 * torch.randn(1, 7, generator=gen, dtype=torch.float64)
    weight = torch.rand(7, generator=gen, dtype=torch.float64) + 0.5
    target = torch.tensor([1, -100, 6, 0, 3])
    temp0 = torch.tensor(2.0, dtype=torch.float64)  # s = 0.5 exactly (smax rounds s to f32)
    kw = dict(weight=weight, reduction=reduction, lse_square_scale=0.0625,
              softcap=softcap or None, fused=fused)

    x, m, temp = (a.clone().requires_grad_() for a in (x0, m0, temp0))
    loss, *extras = st.cross_entropy(x, target, mask=m, temperature=temp, return_z_loss=True,
                                     return_lse=True, return_entropy=True,
                                     return_target_logprob=True, **kw)
    ws = _weights(extras)
    # the extras alone (the loss unused): their gradient only
    got = torch.autograd.grad(sum((e * w).sum() for e, w in zip(extras, ws)), (x, m, temp))

    xr, mr, tr = (a.clone().requires_grad_() for a in (x0, m0, temp0))
    ref = _reference_extras(xr, target, weight, mr, 1 / tr, softcap, 0.0625, -100, reduction)
    for name, e in zip(EXTRAS, extras):
        torch.testing.assert_close(e.detach(), ref[name].detach(), rtol=1e-12, atol=1e-12)
    want = torch.autograd.grad(sum((ref[n] * w).sum() for n, w in zip(EXTRAS, ws)),
                               (xr, mr, tr))
    for g, r in zip(got, want):
        torch.testing.assert_close(g, r, rtol=1e-10, atol=1e-12)

    # with the loss: the loss's gradient plus the extras'
    x2 = x0.clone().requires_grad_()
    loss_only = st.cross_entropy(x2, target, mask=m0, temperature=temp0, **kw)
    (g_loss,) = torch.autograd.grad(loss_only.sum(), (x2,))
    x3 = x0.clone().requires_grad_()
    loss3, *extras3 = st.cross_entropy(x3, target, mask=m0, temperature=temp0,
                                       return_z_loss=True, return_lse=True,
                                       return_entropy=True, return_target_logprob=True, **kw)
    total = loss3.sum() + sum((e * w).sum() for e, w in zip(extras3, ws))
    (g_all,) = torch.autograd.grad(total, (x3,))
    torch.testing.assert_close(g_all, g_loss + want[0], rtol=1e-10, atol=1e-12)


def test_z_loss_from_lse_trains_float32():
    """The issue's case: loss + c * lse^2 gets the z-loss gradient (float32,
    probability targets, a bool mask)."""
    gen = torch.Generator().manual_seed(1)
    x0 = torch.randn(4, 6, generator=gen)
    keep = torch.tensor([True, True, False, True, True, True])
    q = torch.softmax(torch.randn(4, 6, generator=gen).masked_fill(~keep, float("-inf")), -1)
    x = x0.clone().requires_grad_()
    loss, lse = st.cross_entropy(x, q, mask=keep, return_lse=True)
    (loss + 1e-2 * (lse ** 2).mean()).backward()
    xr = x0.clone().requires_grad_()
    t = xr.masked_fill(~keep, float("-inf"))
    lse_r = torch.logsumexp(t, 1)
    loss_r = -(q * torch.where(keep, t - lse_r[:, None], torch.zeros_like(t))).sum(1).mean()
    (loss_r + 1e-2 * (lse_r ** 2).mean()).backward()
    torch.testing.assert_close(x.grad, xr.grad, rtol=1e-5, atol=1e-7)
    assert x.grad[:, 2].eq(0).all()


def test_linear_cross_entropy_extras_gradients_match_reference():
    gen = torch.Generator().manual_seed(2)
    h0 = torch.randn(5, 4, generator=gen, dtype=torch.float64)
    w0 = torch.randn(9, 4, generator=gen, dtype=torch.float64)
    b0 = torch.randn(9, generator=gen, dtype=torch.float64)
    target = torch.tensor([1, 8, -100, 0, 4])
    h, w, b = (a.clone().requires_grad_() for a in (h0, w0, b0))
    loss, *extras = st.linear_cross_entropy(h, w, target, b, lse_square_scale=0.125,
                                            return_z_loss=True, return_lse=True,
                                            return_entropy=True, return_target_logprob=True,
                                            softcap=4.0)
    ws = _weights(extras)
    total = loss + sum((e * x).sum() for e, x in zip(extras, ws))
    got = torch.autograd.grad(total, (h, w, b))
    hr, wr, br = (a.clone().requires_grad_() for a in (h0, w0, b0))
    logits = hr @ wr.T + br
    ref = _reference_extras(logits, target, None, None, 1.0, 4.0, 0.125, -100, "mean")
    loss_r = st.cross_entropy(logits, target, lse_square_scale=0.125, softcap=4.0)
    want = torch.autograd.grad(loss_r + sum((ref[n] * x).sum() for n, x in zip(EXTRAS, ws)),
                               (hr, wr, br))
    for g, r in zip(got, want):
        torch.testing.assert_close(g, r, rtol=1e-10, atol=1e-12)


def test_accuracy_is_not_differentiable():
    x = torch.randn(4, 5, requires_grad=True)
    target = torch.randint(0, 5, (4,))
    loss, acc = st.cross_entropy(x, target, return_accuracy=True)
    assert loss.requires_grad and not acc.requires_grad
    with pytest.raises(RuntimeError, match="does not require grad"):
        acc.backward()


def test_inplace_backward_refuses_extras_gradient():
    x = torch.randn(4, 5, requires_grad=True)
    logits = x * 1.0  # a non-leaf: inplace_backward may overwrite it
    target = torch.randint(0, 5, (4,))
    loss, lse = st.cross_entropy(logits, target, return_lse=True, inplace_backward=True)
    with pytest.raises(RuntimeError, match="inplace_backward=True overwrote"):
        (loss + lse.sum()).backward()


def test_gumbel_soft_sample_is_differentiable():
    x0 = torch.randn(3, 6)
    x = x0.clone().requires_grad_()
    hard, soft = st.gumbel_softmax(x, 0.7, hard=True, seed=4, return_soft=True)
    g1, g2 = torch.randn(3, 6), torch.randn(3, 6)
    ((hard * g1).sum() + (soft * g2).sum()).backward()
    xr = x0.clone().requires_grad_()
    noise = soft.detach()  # the soft sample of the same seed, computed by torch below
    ref_soft = torch.softmax((xr + _gumbel(x0, 4)) / 0.7, -1)
    torch.testing.assert_close(ref_soft.detach(), noise, rtol=1e-5, atol=1e-7)
    ((ref_soft * (g1 + g2)).sum()).backward()  # straight-through: hard's gradient is soft's
    torch.testing.assert_close(x.grad, xr.grad, rtol=1e-5, atol=1e-6)


def _gumbel(x, seed):
    import smax
    return smax.gumbel_noise(tuple(x.shape), seed, like=x)


@pytest.mark.parametrize("extra", ["z_loss", "lse", "entropy", "target_logprob"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_fully_masked_ignored_row_gets_finite_gradients(extra, reduction):
    # A padding row: every class masked and its target ignored. Its z-loss
    # is 0, so its gradient must be 0 (the z term's L * p is -inf * 0 there).
    torch.manual_seed(0)
    x = torch.randn(4, 6, requires_grad=True)
    target = torch.randint(0, 6, (4,))
    target[3] = -100
    mask = torch.ones(4, 6, dtype=torch.bool)
    mask[3] = False
    loss, e = st.cross_entropy(x, target, mask=mask, reduction=reduction, lse_square_scale=1e-4,
                               **{"return_" + extra: True})
    lv = loss if reduction != "none" else loss[:3].sum()
    ev = e if e.dim() == 0 else e[:3].sum()  # only the valid rows' extra is used
    (lv + ev).backward()
    assert torch.isfinite(x.grad).all()
    assert torch.equal(x.grad[3], torch.zeros(6))


def test_unused_extra_under_compile_gets_no_gradient():
    # Every target ignored, empty_mean "nan": the unused z_loss extra must not
    # turn into a 0 * NaN gradient when compiled (eager gives it None).
    torch.manual_seed(0)
    x0 = torch.randn(4, 6)
    t = torch.full((4,), -100)

    def f(x):
        loss, _ = st.cross_entropy(x, t, return_z_loss=True, lse_square_scale=1e-4)
        return torch.nan_to_num(loss)

    xe = x0.clone().requires_grad_()
    f(xe).backward()
    xc = x0.clone().requires_grad_()
    torch.compile(f, backend="aot_eager", fullgraph=True)(xc).backward()
    assert torch.isfinite(xe.grad).all() and torch.isfinite(xc.grad).all()
    assert torch.equal(xe.grad, xc.grad)
