"""Sampling ops: softmax_topk against torch.softmax + torch.topk (values,
indices, gradients), gumbel_softmax (shapes, hard one-hot, determinism for a
seed, straight-through gradient), gumbel_max / sample / sampling_filter
semantics, soft_nms against a small numpy reference."""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import smax  # noqa: E402
import smax.torch as st  # noqa: E402
from conftest import torch_close as close  # noqa: E402


pytestmark = pytest.mark.usefixtures("torch_seed")  # torch.manual_seed(0) per test


# ---- softmax_topk ---------------------------------------------------------------------------------


@pytest.mark.parametrize("shape,dim,k", [((5, 100), -1, 7), ((3, 20, 4), 1, 5), ((50, 3), 0, 50)])
def test_softmax_topk_vs_torch(shape, dim, k):
    x = torch.randn(shape) * 3
    probs, idx = smax.softmax_topk(x, k, dim)
    p = torch.softmax(x.double(), dim)
    vals, ref_idx = p.topk(k, dim)
    assert idx.dtype == torch.int64 and probs.dtype == torch.float32
    assert torch.equal(idx, ref_idx)
    close(probs, vals)
    pr, ir = smax.softmax_topk(x, k, dim, renormalize=True)
    assert torch.equal(ir, ref_idx)
    close(pr, vals / vals.sum(dim, keepdim=True))


@pytest.mark.parametrize("renormalize", [False, True])
def test_softmax_topk_gradient(renormalize):
    x = torch.randn(4, 30, requires_grad=True)
    probs, idx = st.softmax_topk(x, 5, -1, renormalize=renormalize, scale=1.5)
    x64 = x.detach().double().requires_grad_(True)
    p = torch.softmax(x64 * 1.5, -1)
    ref = p.gather(-1, idx)
    if renormalize:
        ref = ref / ref.sum(-1, keepdim=True)
    close(probs, ref)
    g = torch.randn(4, 5)
    probs.backward(g)
    ref.backward(g.double())
    torch.testing.assert_close(x.grad.double(), x64.grad, rtol=1e-4, atol=1e-6)


def test_softmax_topk_ties_and_numpy():
    x = np.array([[1, 3, 3, 2, 3]], np.float32)
    probs, idx = smax.softmax_topk(x, 3)
    assert isinstance(idx, np.ndarray) and idx.dtype == np.int64
    np.testing.assert_array_equal(idx, [[1, 2, 4]])  # ties: lower index first


# ---- Gumbel ---------------------------------------------------------------------------------------


def test_gumbel_softmax_shapes_determinism_and_hard():
    x = torch.randn(64, 10)
    y1 = smax.gumbel_softmax(x, tau=0.5, seed=42)
    y2 = smax.gumbel_softmax(x, tau=0.5, seed=42)
    assert torch.equal(y1, y2)
    assert not torch.equal(y1, smax.gumbel_softmax(x, tau=0.5, seed=43))
    torch.testing.assert_close(y1.sum(-1), torch.ones(64))
    h = smax.gumbel_softmax(x, tau=0.5, hard=True, seed=42)
    assert ((h == 0) | (h == 1)).all() and (h.sum(-1) == 1).all()
    # the hard index is the soft sample's argmax and gumbel_max's sample
    assert torch.equal(h.argmax(-1), y1.argmax(-1))
    assert torch.equal(smax.gumbel_max(x, seed=42), h.argmax(-1))
    # same bits for any thread count and for a transposed layout
    assert torch.equal(smax.gumbel_softmax(x, tau=0.5, seed=42, threads=1), y1)
    xt = x.t().contiguous().t()
    assert torch.equal(smax.gumbel_softmax(xt, tau=0.5, seed=42), y1)
    # seed=None draws from torch's generator: reproducible with torch.manual_seed
    torch.manual_seed(5)
    a = smax.gumbel_softmax(x)
    torch.manual_seed(5)
    assert torch.equal(a, smax.gumbel_softmax(x))


def test_gumbel_softmax_noise_and_gradient():
    x = torch.randn(6, 9)
    g = smax.gumbel_noise(x.shape, seed=7, like=x)
    assert isinstance(g, torch.Tensor) and g.shape == x.shape
    y = smax.gumbel_softmax(x, tau=0.7, seed=7)
    assert torch.equal(smax.gumbel_softmax(x, tau=0.7, noise=g), y)
    close(y, torch.softmax((x.double() + g.double()) / 0.7, -1), rtol=1e-5, atol=1e-6)
    for hard in (False, True):
        xr = x.clone().requires_grad_(True)
        out = st.gumbel_softmax(xr, tau=0.7, hard=hard, seed=7)
        up = torch.randn(6, 9)
        out.backward(up)
        x64 = x.double().requires_grad_(True)
        soft = torch.softmax((x64 + g.double()) / 0.7, -1)
        soft.backward(up.double())  # straight-through: the soft sample's gradient
        torch.testing.assert_close(xr.grad.double(), x64.grad, rtol=1e-4, atol=1e-6)
    # drop-in shape of F.gumbel_softmax
    assert st.gumbel_softmax(x.requires_grad_(True), 1.0, True, dim=0).shape == x.shape


def test_gumbel_max_is_a_softmax_sample():
    logits = torch.tensor([0.0, 1.0, 2.0, -1.0])
    x = logits.expand(20000, 4)
    idx = smax.gumbel_max(x, seed=1)
    freq = torch.bincount(idx, minlength=4).double() / 20000
    torch.testing.assert_close(freq, torch.softmax(logits.double(), 0), atol=0.015, rtol=0)


def test_gumbel_max_and_sample_special_rows():
    x = torch.tensor([[-math.inf] * 3, [1.0, math.nan, 0.0], [0.0, 5.0, 1.0]])
    idx = smax.gumbel_max(x, seed=3)
    assert idx[0] == -1 and idx[1] == -1 and 0 <= idx[2] < 3
    assert smax.gumbel_max(x, keepdim=True, seed=3).shape == (3, 1)
    assert smax.sample(x[2:], temperature=0.0).item() == 1  # greedy


def test_sample_and_filter():
    x = torch.randn(200, 50)
    greedy = smax.sample(x, temperature=0.0)
    assert torch.equal(greedy, x.argmax(-1))
    assert torch.equal(smax.sample(x, top_k=1, seed=9), x.argmax(-1))
    s1 = smax.sample(x, temperature=0.8, top_k=10, top_p=0.9, seed=9)
    assert torch.equal(s1, smax.sample(x, temperature=0.8, top_k=10, top_p=0.9, seed=9))
    f = smax.sampling_filter(x, temperature=0.8, top_k=10, top_p=0.9)
    kept = torch.isfinite(f)
    assert (kept.sum(-1) <= 10).all() and (kept.sum(-1) >= 1).all()
    assert kept.gather(-1, s1[:, None]).all()  # samples come from the kept set
    top10 = x.topk(10, -1).indices
    assert torch.zeros_like(kept).scatter_(-1, top10, True)[kept].all()
    torch.testing.assert_close(f[kept], (x / 0.8)[kept])
    xn = x.numpy()
    r = smax.sample(xn, temperature=0.0)
    assert isinstance(r, np.ndarray) and r.dtype == np.int64
    with pytest.raises(ValueError):
        smax.sample(x, top_p=0.0)
    with pytest.raises(ValueError):
        smax.sample(x, top_k=-1)


# ---- Soft-NMS ------------------------------------------------------------------------------------


def ref_soft_nms(boxes, scores, method, sigma, nt, thresh):
    b = boxes.astype(np.float64)
    s = scores.astype(np.float64).copy()
    remaining = [i for i in range(len(s)) if s[i] >= thresh]
    kept, kept_s = [], []
    area = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    while remaining:
        best = max(remaining, key=lambda i: (s[i], -i))
        kept.append(best)
        kept_s.append(s[best])
        remaining.remove(best)
        nxt = []
        for i in remaining:
            iw = min(b[i, 2], b[best, 2]) - max(b[i, 0], b[best, 0])
            ih = min(b[i, 3], b[best, 3]) - max(b[i, 1], b[best, 1])
            inter = max(iw, 0) * max(ih, 0)
            union = area[i] + area[best] - inter
            iou = inter / union if union > 0 else 0.0
            if method == "linear":
                w = 1 - iou if iou > nt else 1.0
            elif method == "gaussian":
                w = math.exp(-iou * iou / sigma)
            else:
                w = 0.0 if iou > nt else 1.0
            s[i] *= w
            if s[i] >= thresh:
                nxt.append(i)
        remaining = nxt
    return np.array(kept, np.int64), np.array(kept_s)


@pytest.mark.parametrize("method", ["linear", "gaussian", "hard"])
def test_soft_nms(method):
    rng = np.random.default_rng(0)
    xy = rng.uniform(0, 50, (40, 2))
    wh = rng.uniform(5, 30, (40, 2))
    boxes = np.concatenate([xy, xy + wh], 1).astype(np.float32)
    scores = rng.uniform(0, 1, 40).astype(np.float32)
    idx, kept = smax.soft_nms(boxes, scores, method=method, score_threshold=0.05)
    ri, rs = ref_soft_nms(boxes, scores, method, 0.5, 0.3, 0.05)
    np.testing.assert_array_equal(idx, ri)
    np.testing.assert_allclose(kept, rs, rtol=1e-6, atol=1e-7)
    ti, ts = smax.soft_nms(torch.from_numpy(boxes), torch.from_numpy(scores), method=method,
                           score_threshold=0.05)
    assert isinstance(ti, torch.Tensor) and torch.equal(ti, torch.from_numpy(idx))
    with pytest.raises(ValueError):
        smax.soft_nms(boxes[:, ::-1].copy(), scores)  # x2 < x1


def test_in_place_and_numpy_outputs():
    x = np.random.default_rng(2).standard_normal((8, 40)).astype(np.float32)
    want = smax.sampling_filter(x, temperature=0.5, top_k=5)
    a = x.copy()
    ptr = a.ctypes.data
    r = smax.sampling_filter(a, temperature=0.5, top_k=5, out=a)  # dst may be src
    assert r is a and a.ctypes.data == ptr
    np.testing.assert_array_equal(a, want)
    y = smax.gumbel_softmax(x, tau=0.5, hard=True, seed=3)
    assert isinstance(y, np.ndarray) and y.dtype == np.float32
    y2, soft = smax.gumbel_softmax(x, tau=0.5, hard=True, seed=3, return_soft=True)
    np.testing.assert_array_equal(y, y2)
    np.testing.assert_array_equal(soft.argmax(-1), y.argmax(-1))
    probs, idx = smax.softmax_topk(x.T, 3, dim=0)  # strided (transposed) input
    assert probs.shape == (3, 8) and idx.dtype == np.int64
    np.testing.assert_array_equal(idx, np.argsort(-x, axis=-1, kind="stable")[:, :3].T)


def test_sampling_errors():
    x = torch.randn(3, 6)
    with pytest.raises(ValueError):
        smax.softmax_topk(x, 7)  # k > n
    with pytest.raises(ValueError):
        smax.gumbel_softmax(x, tau=0.0)
    with pytest.raises(ValueError):
        smax.gumbel_max(x, seed=-1)
    with pytest.raises(TypeError, match="int32"):
        smax.gumbel_max(x.int())
    with pytest.raises(ValueError):
        smax.soft_nms(np.zeros((3, 4), np.float32), np.ones(3, np.float32), method="cubic")
