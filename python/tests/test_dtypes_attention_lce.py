"""attention and linear_cross_entropy in every storage dtype (the op-list
walk of the other ops is test_dtypes.py, whose helpers this file uses):
output and gradient dtypes, a float64 reference (SDPA; a float64 matmul +
cross_entropy) on the same rounded inputs, torch in the same dtype, mixed
operand dtypes and gradcheck.
"""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
import smax  # noqa: E402
import smax.torch as st  # noqa: E402
from test_dtypes import (DTYPES, EPS, TORCH_DTYPE, F, assert_ulp,  # noqa: E402
                         assert_within, dtype_name, reference_input, to_numpy)

pytestmark = pytest.mark.usefixtures("torch_seed")

# ---- attention and linear_cross_entropy -----------------------------------------------------
#
# Attention computes in float32 (f32 GEMMs) unless q, k or v is float64 (the
# backward: also out or dout): then in float64 (DGEMM, float64 row ops;
# include/smax/attention.h "float64"), on the exact operands. float16 /
# bfloat16 widen exactly, and each output is the float32 (float64) result
# rounded once to its dtype. So the float64 reference runs on the inputs as
# smax reads them (reference_input()) and the bound is the op's own bound
# plus half an ulp of the output dtype: attention rtol 1e-5 / atol 2e-6
# (test_attention.py: close()), its gradients 2e-4 of the gradient's scale
# (grad_close()), in float64 rtol 1e-12 / atol 1e-13 and 1e-11 of the
# gradient's scale (the float64 bound is ~1e-14 relative for these shapes).
# linear cross-entropy does the same for float32 / float16 / bfloat16 hidden
# and weight (rtol 1e-4 / atol 1e-5, gradients 2e-4 of the scale:
# test_losses.py::test_linear_cross_entropy); with a float64 hidden or
# weight it computes in float64 (DGEMMs; include/smax/linear_cross_entropy.h,
# "float64"): the reference runs on the exact inputs and the bound is 1e-13
# (LCE_F64).
LCE_F64 = 1e-13
ATT_TOL = {"float64": (1e-12, 1e-13)}  # (rtol, atol); others: (1e-5, 2e-6)
ATT_GRAD_TOL = {"float64": 1e-11}  # of the gradient's scale; others: 2e-4

ATT_SHAPES = dict(q=(2, 4, 9, 16), k=(2, 2, 13, 16), v=(2, 2, 13, 8))  # GQA, Dv != D
ATT_MASK = (2, 1, 9, 13)  # an additive mask, broadcast over heads


def att_inputs(name, lib="torch"):
    """q, k, v (N(0, 1)) and an additive mask in dtype `name`."""
    ts = [torch.randn(ATT_SHAPES[n], dtype=torch.float64).to(TORCH_DTYPE[name])
          for n in ("q", "k", "v")]
    ts.append((torch.randn(ATT_MASK, dtype=torch.float64) * 0.5).to(TORCH_DTYPE[name]))
    return ts if lib == "torch" else [to_numpy(t, name) for t in ts]


def sdpa_ref(q, k, v, mask, name, causal):
    """float64 SDPA on the inputs as smax reads them (and its lse)."""
    q, k, v, m = (reference_input(a, name, "attention") for a in (q, k, v, mask))
    m = with_causal(m, causal)  # SDPA takes a mask or is_causal, not both
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True)
    kk = k.repeat_interleave(q.shape[1] // k.shape[1], 1)
    s = q @ kk.transpose(-1, -2) / math.sqrt(q.shape[-1]) + m
    return out, torch.logsumexp(s, -1)


def with_causal(m, causal):
    """The additive mask m with SDPA's top-left causal mask (-inf) folded in."""
    if not causal:
        return m
    return m.masked_fill(torch.ones(m.shape[-2:], dtype=torch.bool).triu(1), -math.inf)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("name", DTYPES)
def test_attention_dtypes(name, lib, causal):
    q, k, v, m = att_inputs(name, lib)
    out, lse = smax.attention(q, k, v, attn_mask=m, is_causal=causal, enable_gqa=True,
                              return_lse=True)
    assert type(out) is type(q) and type(lse) is type(q)
    assert dtype_name(out) == dtype_name(q) and dtype_name(lse) == dtype_name(q)
    want, want_lse = sdpa_ref(q, k, v, m, name, causal)
    rtol, atol = ATT_TOL.get(name, (1e-5, 2e-6))
    assert_within(out, want, name, rtol, atol, "smax.attention out")
    assert_within(lse, want_lse, name, rtol, atol, "smax.attention lse")
    if name != "float32":  # out= of another dtype is respected: float32 out of any input
        out32 = torch.empty(tuple(want.shape), dtype=torch.float32)
        assert smax.attention(q, k, v, attn_mask=m, is_causal=causal, enable_gqa=True,
                              out=out32) is out32
        assert_within(out32, want, "float32", 1e-5, 2e-6, "float32 out")


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
def test_attention_operands_of_mixed_dtypes(name):
    """Each operand its own dtype: the result is the float32 call on the
    widened operands, rounded once to q's dtype; with a float64 operand the
    float64 call on the widened operands, rounded once."""
    q, k, v, m = att_inputs("float32")
    td = TORCH_DTYPE[name]
    qn, mn = q.to(td), m.to(td)
    got = smax.attention(qn, k, v.to(torch.bfloat16), attn_mask=mn, enable_gqa=True)
    assert got.dtype == td
    want = smax.attention(qn.float(), k, v.to(torch.bfloat16).float(), attn_mask=mn.float(),
                          enable_gqa=True)
    assert torch.equal(got, want.to(td))
    got = smax.attention(qn, k, v.to(torch.float64), attn_mask=mn, enable_gqa=True)
    assert got.dtype == td
    want = smax.attention(qn.double(), k.double(), v.double(), attn_mask=mn.double(),
                          enable_gqa=True)
    assert torch.equal(got, want.to(td))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", DTYPES)
def test_attention_agrees_with_torch_in_the_dtype(name, causal):
    """F.scaled_dot_product_attention on the same tensors in the same dtype:
    float32 / float64 within the float32 bound; float16 / bfloat16 within a
    few ulps of the dtype at v's scale (torch's narrow SDPA rounds its own
    intermediates, e.g. P to the dtype before P V: |out| moves by up to
    eps/2 max|v| for that alone)."""
    q, k, v, m = att_inputs(name)
    got = smax.attention(q, k, v, attn_mask=m, is_causal=causal, enable_gqa=True)
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=with_causal(m, causal),
                                            enable_gqa=True)
    assert got.dtype == theirs.dtype == TORCH_DTYPE[name]
    if name in ("float16", "bfloat16"):
        assert_ulp(got, theirs, name, atol=4 * EPS[name] * v.double().abs().max().item(),
                   what="smax.attention vs SDPA")
    else:
        rtol, atol = ATT_TOL.get(name, (1e-5, 2e-6))
        assert_ulp(got, theirs, name, rtol=rtol, atol=atol, what="smax.attention vs SDPA")


@pytest.mark.parametrize("name", DTYPES)
def test_attention_gradients_in_dtype(name):
    """dq, dk, dv in each input's dtype, vs float64 SDPA's gradients on the
    rounded inputs and upstream gradient. float16 / bfloat16: the backward
    reads the forward's output as saved, rounded to the dtype (as SDPA's
    does): D_i = <dout_i, out_i> moves by up to dD_i = eps/2 sum_c |dout_ic
    out_ic|, which moves dq_i by <= s dD_i max|k| and dk_j by <= s sum_i
    P_ij dD_i max|q| <= s Lq max(dD) max|q|: that term joins the bound."""
    q, k, v, m = att_inputs(name)
    td = TORCH_DTYPE[name]
    for t in (q, k, v):
        t.requires_grad_(True)
    out = st.attention(q, k, v, attn_mask=m, enable_gqa=True)
    assert out.dtype == td
    g = torch.randn(out.shape, dtype=torch.float64).to(td)
    out.backward(g)
    assert (q.grad.dtype, k.grad.dtype, v.grad.dtype) == (td, td, td)
    r = [reference_input(t, name, "attention").requires_grad_(True) for t in (q, k, v)]
    want = F.scaled_dot_product_attention(*r, attn_mask=reference_input(m, name, "attention"),
                                          enable_gqa=True)
    want.backward(reference_input(g, name, "attention"))
    narrow = name in ("float16", "bfloat16")
    dd = (0.5 * EPS[name] * (g.double() * out.detach().double()).abs().sum(-1).max().item()
          if narrow else 0.0)
    s = 1 / math.sqrt(q.shape[-1])
    extra = {"dq": s * dd * k.detach().double().abs().max().item(),
             "dk": s * q.shape[2] * dd * q.detach().double().abs().max().item(),
             "dv": 0.0}  # dv = P^T dout does not read out
    for got, ref, what in ((q.grad, r[0].grad, "dq"), (k.grad, r[1].grad, "dk"),
                           (v.grad, r[2].grad, "dv")):
        scale = ref.abs().max().item()
        assert_within(got, ref, name, 0.0, ATT_GRAD_TOL.get(name, 2e-4) * scale + extra[what],
                      f"attention {what}")


LCE_N, LCE_D, LCE_V = 12, 16, 50
LCE_T = torch.tensor([(7 * i) % LCE_V for i in range(LCE_N)])


def lce_inputs(name, lib="torch"):
    """hidden [12, 16], weight [50, 16] and bias [50] in dtype `name`."""
    ts = [torch.randn(LCE_N, LCE_D, dtype=torch.float64),
          torch.randn(LCE_V, LCE_D, dtype=torch.float64) * 0.3,
          torch.randn(LCE_V, dtype=torch.float64) * 0.1]
    ts = [t.to(TORCH_DTYPE[name]) for t in ts]
    return ts if lib == "torch" else [to_numpy(t, name) for t in ts]


def lce_ref(h, w, b, name, reduction, label_smoothing=0.0):
    h, w, b = (reference_input(a, name, "linear_cross_entropy") for a in (h, w, b))
    z = h @ w.t() + b
    return (F.cross_entropy(z, LCE_T, reduction=reduction, label_smoothing=label_smoothing),
            torch.logsumexp(z, -1))


@pytest.mark.parametrize("reduction", ["none", "mean"])
@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("name", DTYPES)
def test_linear_cross_entropy_dtypes(name, lib, reduction):
    h, w, b = lce_inputs(name, lib)
    t = LCE_T if lib == "torch" else LCE_T.numpy()
    loss, lse = smax.linear_cross_entropy(h, w, t, b, reduction=reduction, return_lse=True)
    assert type(loss) is type(h) and type(lse) is type(h)
    assert dtype_name(loss) == dtype_name(h) and dtype_name(lse) == dtype_name(h)
    want, want_lse = lce_ref(h, w, b, name, reduction)
    tol = (LCE_F64, LCE_F64) if name == "float64" else (1e-4, 1e-5)
    assert_within(loss, want, name, *tol, "linear_cross_entropy loss")
    assert_within(lse, want_lse, name, *tol, "linear_cross_entropy lse")


@pytest.mark.parametrize("name", ["float16", "bfloat16", "float64"])
def test_linear_cross_entropy_operands_of_mixed_dtypes(name):
    """hidden in `name`, weight float32, bias float64: the loss has hidden's
    dtype. float16 / bfloat16 hidden: the float32 call on the widened
    operands, rounded once. float64 hidden: the float64 path (a float64
    hidden or weight), every operand read exactly: a float64 reference on
    the same values within 1e-13, and the reverse (float32 hidden, float64
    weight) too."""
    h, w, b = lce_inputs("float32")
    hn = h.to(TORCH_DTYPE[name])
    got = smax.linear_cross_entropy(hn, w, LCE_T, b.double(), reduction="none")
    assert got.dtype == TORCH_DTYPE[name]
    if name == "float64":
        want = F.cross_entropy(hn @ w.double().t() + b.double(), LCE_T, reduction="none")
        assert_within(got, want, name, LCE_F64, LCE_F64, "float64 hidden, float32 weight")
        rev = smax.linear_cross_entropy(h, w.double(), LCE_T, b, reduction="none")
        assert rev.dtype == torch.float32
        assert_within(rev, want, "float32", LCE_F64, LCE_F64, "float32 hidden, float64 weight")
    else:
        want = smax.linear_cross_entropy(hn.float(), w, LCE_T, b, reduction="none")
        assert torch.equal(got, want.to(got.dtype))


@pytest.mark.parametrize("name", DTYPES)
def test_linear_cross_entropy_agrees_with_torch_in_the_dtype(name):
    """F.cross_entropy(F.linear(h, w, b), t) in the same dtype: float32
    within the float32 bound, float64 within 1e-13 (both float64); float16 /
    bfloat16 within a few ulps of the dtype at the logits' scale (torch
    rounds the [N, V] logits to the dtype, smax keeps them in float32)."""
    h, w, b = lce_inputs(name)
    got = smax.linear_cross_entropy(h, w, LCE_T, b, reduction="none")
    z = F.linear(h, w, b)
    theirs = F.cross_entropy(z, LCE_T, reduction="none")
    assert got.dtype == theirs.dtype == TORCH_DTYPE[name]
    if name in ("float16", "bfloat16"):
        zmax = z.double().abs().max().item()
        assert_ulp(got, theirs, name, atol=4 * EPS[name] * zmax, what="smax.lce vs torch")
    elif name == "float64":
        assert_ulp(got, theirs, name, rtol=LCE_F64, atol=LCE_F64, what="smax.lce vs torch")
    else:
        assert_ulp(got, theirs, name, rtol=1e-4, atol=1e-5, what="smax.lce vs torch")


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
@pytest.mark.parametrize("name", DTYPES)
def test_linear_cross_entropy_gradients_in_dtype(name, label_smoothing):
    """dhidden, dweight, dbias in each input's dtype, vs float64 autograd on
    the rounded inputs. The forward's lse that the backward reuses stays
    float32 for float16 / bfloat16 hidden (return_lse hands it out in
    hidden's dtype), so each gradient is the float32 result rounded once:
    the float32 bound plus half an ulp. float64: the float64 path, within
    1e-13 of the gradient's scale."""
    h, w, b = lce_inputs(name)
    td = TORCH_DTYPE[name]
    for t in (h, w, b):
        t.requires_grad_(True)
    loss, lse = st.linear_cross_entropy(h, w, LCE_T, b, label_smoothing=label_smoothing,
                                        return_lse=True)
    assert loss.dtype == td and lse.dtype == td
    loss.backward()
    assert (h.grad.dtype, w.grad.dtype, b.grad.dtype) == (td, td, td)
    r = [reference_input(t, name, "linear_cross_entropy").requires_grad_(True)
         for t in (h, w, b)]
    # label_smoothing is a float32 option of the C++ API (0.1 is 0.100000001
    # there): the reference uses that value, which float64 resolves.
    a32 = float(torch.tensor(label_smoothing, dtype=torch.float32))
    F.cross_entropy(r[0] @ r[1].t() + r[2], LCE_T, label_smoothing=a32).backward()
    rel = LCE_F64 if name == "float64" else 2e-4
    for got, ref, what in ((h.grad, r[0].grad, "dhidden"), (w.grad, r[1].grad, "dweight"),
                           (b.grad, r[2].grad, "dbias")):
        assert_within(got, ref, name, 0.0, rel * ref.abs().max().item(), f"lce {what}")
    # operands of their own dtypes: each gradient in its input's dtype
    h2 = h.detach().clone().requires_grad_(True)
    w2 = w.detach().float().requires_grad_(True)
    b2 = b.detach().double().requires_grad_(True)
    st.linear_cross_entropy(h2, w2, LCE_T, b2).backward()
    assert (h2.grad.dtype, w2.grad.dtype, b2.grad.dtype) == (td, torch.float32, torch.float64)


def test_gradcheck_attention_and_linear_cross_entropy_operands():
    """gradcheck in float64 over every differentiable operand (q, k, v with a
    float64 additive mask and GQA; hidden, weight, bias). Both compute
    float64 in float64 (DGEMMs): gradcheck's default tolerances (eps = 1e-6,
    atol = 1e-5, rtol = 1e-3); linear_cross_entropy with label smoothing,
    class weights, a z-loss, a softcap and scale / temperature, and without
    smoothing (the backward then reuses the forward's float64 lse)."""
    gen = torch.Generator().manual_seed(5)
    q = torch.randn(1, 2, 4, 8, dtype=torch.float64, generator=gen).requires_grad_(True)
    k = torch.randn(1, 1, 5, 8, dtype=torch.float64, generator=gen).requires_grad_(True)
    v = torch.randn(1, 1, 5, 3, dtype=torch.float64, generator=gen).requires_grad_(True)
    m = torch.randn(4, 5, dtype=torch.float64, generator=gen) * 0.5
    assert torch.autograd.gradcheck(
        lambda a, b, c: st.attention(a, b, c, attn_mask=m, is_causal=True, enable_gqa=True),
        (q, k, v))
    h = torch.randn(5, 6, dtype=torch.float64, generator=gen).requires_grad_(True)
    w = (torch.randn(11, 6, dtype=torch.float64, generator=gen) * 0.5).requires_grad_(True)
    b = (torch.randn(11, dtype=torch.float64, generator=gen) * 0.1).requires_grad_(True)
    t = torch.tensor([0, 3, 10, 7, 2])
    cw = torch.rand(11, dtype=torch.float64, generator=gen) + 0.5
    assert torch.autograd.gradcheck(
        lambda a, c, d: st.linear_cross_entropy(a, c, t, d, reduction="none",
                                                label_smoothing=0.1),
        (h, w, b))
    assert torch.autograd.gradcheck(
        lambda a, c, d: st.linear_cross_entropy(a, c, t, d, cw, label_smoothing=0.05,
                                                lse_square_scale=1e-2, softcap=3.0,
                                                scale=0.75, temperature=1.25),
        (h, w, b))
    assert torch.autograd.gradcheck(
        lambda a, c, d: st.linear_cross_entropy(a, c, t, d, reduction="sum"), (h, w, b))
