"""smax's ops as torch.library custom ops (python/smax/_library.py):
torch.library.opcheck on every differentiable op of the op list (the sample
table must cover them all), torch.compile(fullgraph=True) against eager
(values and gradients) for representative ops, torch.export of a module."""
import inspect

import pytest
import torch

import smax
import smax.torch as st
from smax import _library

DIFF_OPS = [op.name for op in smax.op_list() if op.kind == "diff"]


@pytest.fixture(autouse=True)
def _fresh_compile_caches():
    """Compile afresh: torch's on-disk AOTAutograd / FX graph caches key on the
    forward graph, not on a custom op's Python autograd formula, so a graph
    cached before a change of smax/_library.py would run the old backward."""
    import torch._functorch.config
    import torch._inductor.config
    with torch._functorch.config.patch(enable_autograd_cache=False), \
            torch._inductor.config.patch(fx_graph_cache=False):
        yield


def _g(*shape, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen, dtype=dtype).requires_grad_()


def _tgt(n, c, seed=1):
    return torch.randint(0, c, (n,), generator=torch.Generator().manual_seed(seed))


def _fmask(*shape):  # a learnable additive mask
    return (0.1 * torch.randn(*shape, generator=torch.Generator().manual_seed(7))).requires_grad_()


# op -> () -> (args, kwargs) of a small smax.torch call; tensors that require
# grad get gradients. Learnable knobs appear where the op has them.
SAMPLES = {
    "softmax": lambda: ((_g(3, 5),), dict(temperature=torch.tensor(1.5, requires_grad=True),
                                            mask=_fmask(1, 5))),
    "log_softmax": lambda: ((_g(3, 5), 0), dict(scale=torch.tensor(0.7, requires_grad=True))),
    "logsumexp": lambda: ((_g(2, 3, 4), 1, True), dict(mask=_fmask(3, 1))),
    "sparsemax": lambda: ((_g(3, 6),), {}),
    "entmax15": lambda: ((_g(3, 6),), dict(mask=torch.tensor([True] * 5 + [False]))),
    "entmax_bisect": lambda: ((_g(3, 6), torch.full((3, 1), 1.4, requires_grad=True)), {}),
    "sparse_softmax": lambda: ((_g(3, 6), 3), {}),
    "ssmax": lambda: ((_g(3, 6), torch.full((3, 1), 0.5, requires_grad=True)), {}),
    "softpick": lambda: ((_g(3, 6),), {}),
    "stablemax": lambda: ((_g(3, 6),), {}),
    "self_adjust_softmax": lambda: ((_g(3, 6),), dict(normalized=True)),
    "sigmoid_normalizer": lambda: ((_g(3, 6),), dict(bias=-1.0)),
    "softplus_normalizer": lambda: ((_g(3, 6),), dict(lambd=2.0)),
    "power_softmax": lambda: ((_g(3, 6), 2), {}),
    "probability_temperature": lambda: (
        (torch.softmax(_g(3, 6).detach(), -1).requires_grad_(), 0.7), {}),
    "logit_standardization": lambda: ((_g(3, 6),), dict(temperature=2.0)),
    "clipped_softmax": lambda: ((_g(3, 6),), dict(gamma=-0.05, zeta=1.05)),
    "sparsemax_loss": lambda: ((_g(4, 6), _tgt(4, 6)), {}),
    "entmax15_loss": lambda: ((_g(4, 6), _tgt(4, 6)), dict(reduction="none")),
    "entmax_bisect_loss": lambda: ((_g(4, 6), _tgt(4, 6), 1.3), {}),
    "sparse_softmax_loss": lambda: ((_g(4, 6), _tgt(4, 6), 3), dict(force_target=True)),
    "stablemax_cross_entropy": lambda: ((_g(4, 6), _tgt(4, 6)), dict(reduction="sum")),
    "cross_entropy": lambda: ((_g(4, 6), _tgt(4, 6)),
                              dict(label_smoothing=0.1, lse_square_scale=1e-2, return_lse=True,
                                   return_z_loss=True, return_entropy=True,
                                   return_target_logprob=True, return_accuracy=True)),
    "z_loss": lambda: ((_g(4, 6), _tgt(4, 6), 1e-2), {}),
    "spherical_z_loss": lambda: ((_g(4, 6), _tgt(4, 6), 1.0, 0.5), {}),
    "linear_cross_entropy": lambda: ((_g(4, 3), _g(6, 3, seed=2), _tgt(4, 6),
                                      _g(6, seed=3)), dict(return_lse=True)),
    "gumbel_softmax": lambda: ((_g(3, 6), 0.8), dict(seed=5, return_soft=True)),
    "softmax_topk": lambda: ((_g(3, 6), 2), {}),
    "attention": lambda: ((_g(1, 2, 3, 4), _g(1, 2, 5, 4, seed=1), _g(1, 2, 5, 4, seed=2)),
                          dict(sinks=_g(2, seed=4))),
}


# More calls per op for opcheck: other output shapes and schema paths
# (probability targets, reduction "none", 3-D inputs, tensor knobs, no seed).
VARIANTS = [
    ("cross_entropy", lambda: ((_g(2, 5, 3), torch.softmax(torch.randn(2, 5, 3), 1)),
                               dict(reduction="none", softcap=2.0, mask=_fmask(1, 5, 1),
                                    return_entropy=True, return_target_logprob=True))),
    ("cross_entropy", lambda: ((_g(5), torch.tensor(2)), dict(return_lse=True, fused=False))),
    ("linear_cross_entropy", lambda: ((_g(4, 3), _g(6, 3, seed=2), _tgt(4, 6), None,
                                       torch.rand(6)),
                                      dict(reduction="none", return_z_loss=True,
                                           lse_square_scale=0.1, return_entropy=True,
                                           return_target_logprob=True, return_accuracy=True,
                                           temperature=torch.tensor(2.0, requires_grad=True)))),
    ("attention", lambda: ((_g(2, 3, 4), _g(2, 5, 4, seed=1), _g(2, 5, 2, seed=2)),
                           dict(attn_mask=_fmask(3, 5), gate=_g(2, 3, 2, seed=5),
                                alibi_slopes=_g(2, seed=6), is_causal=True))),
    ("attention", lambda: ((_g(1, 2, 3, 4), _g(1, 2, 5, 4, seed=1), _g(1, 2, 5, 4, seed=2)),
                           dict(normalizer="sigmoid",
                                sigmoid_bias=torch.tensor([-1.0], requires_grad=True)))),
    ("attention", lambda: ((_g(1, 2, 3, 4), _g(1, 2, 5, 4, seed=1), _g(1, 2, 5, 4, seed=2)),
                           dict(normalizer="ssmax",
                                ssmax_s=torch.tensor([0.4, 0.5], requires_grad=True)))),
    ("gumbel_softmax", lambda: ((_g(3, 6),), dict(hard=True))),
    ("logsumexp", lambda: ((_g(6),), {})),
    ("softmax_topk", lambda: ((_g(2, 6, 3), 2, 1), dict(renormalize=True))),
    ("sparsemax_loss", lambda: ((_g(4, 6), _tgt(4, 6)), dict(weight=torch.rand(6),
                                                             reduction="none"))),
]


def test_every_differentiable_op_is_registered_and_sampled():
    assert sorted(SAMPLES) == sorted(DIFF_OPS), "add a SAMPLES entry for each new op"
    assert sorted(_library.registered()) == sorted(DIFF_OPS)
    for op in DIFF_OPS:
        assert hasattr(torch.ops.smax, op) and hasattr(torch.ops.smax, op + "_backward")


def _schema_args(op, args, kwargs):
    bound = inspect.signature(getattr(st, op)).bind(*args, **kwargs)
    bound.apply_defaults()
    return _library.flatten(op, list(bound.arguments.values()))


@pytest.mark.parametrize("op", DIFF_OPS)
def test_opcheck(op):
    args, kwargs = SAMPLES[op]()
    torch.library.opcheck(getattr(torch.ops.smax, op).default, _schema_args(op, args, kwargs))


@pytest.mark.parametrize("case", range(len(VARIANTS)),
                         ids=[f"{op}-{i}" for i, (op, _) in enumerate(VARIANTS)])
def test_opcheck_variants(case):
    op, sample = VARIANTS[case]
    args, kwargs = sample()
    torch.library.opcheck(getattr(torch.ops.smax, op).default, _schema_args(op, args, kwargs))


def _grads(fn, inputs):
    """fn's outputs and the gradients of a random linear function of them."""
    outs = fn(*inputs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    gen = torch.Generator().manual_seed(11)
    total = sum((o * torch.randn(o.shape, generator=gen, dtype=o.dtype)).sum()
                for o in outs if o.is_floating_point())
    leaves = [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
    return [o.detach() for o in outs], torch.autograd.grad(total, leaves, allow_unused=True)


CASES = [(op, SAMPLES[op]) for op in DIFF_OPS] + VARIANTS


@pytest.mark.parametrize("case", range(len(CASES)),
                         ids=[f"{op}-{i}" for i, (op, _) in enumerate(CASES)])
def test_library_op_matches_eager(case):
    """torch.ops.smax.<op> (what compiled graphs run) gives eager's values and
    gradients bit for bit: it runs the same kernels."""
    op, sample = CASES[case]
    args, kwargs = sample()
    tensors = [a for a in list(args) + list(kwargs.values()) if isinstance(a, torch.Tensor)]
    names = list(kwargs)

    def eager(*ts):
        it = iter(ts)
        a = [next(it) if isinstance(x, torch.Tensor) else x for x in args]
        kw = {k: next(it) if isinstance(kwargs[k], torch.Tensor) else kwargs[k] for k in names}
        return getattr(st, op)(*a, **kw)

    def library(*ts):
        it = iter(ts)
        a = [next(it) if isinstance(x, torch.Tensor) else x for x in args]
        kw = {k: next(it) if isinstance(kwargs[k], torch.Tensor) else kwargs[k] for k in names}
        bound = inspect.signature(getattr(st, op)).bind(*a, **kw)
        bound.apply_defaults()
        return _library.call(op, list(bound.arguments.values()))

    torch.manual_seed(0)  # a seed drawn from torch's generator (gumbel_softmax): the same
    out_e, g_e = _grads(eager, tensors)
    torch.manual_seed(0)
    out_l, g_l = _grads(library, tensors)
    for a, b in zip(out_e, out_l):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert any(g is not None for g in g_e)
    for a, b in zip(g_e, g_l):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, rtol=0, atol=0)


def _split(samples):
    """(tensors, rebuild): every sample's tensors in one flat list, and a
    function mapping such a list back to the per-op (args, kwargs)."""
    flat, layout = [], []
    for op, (args, kwargs) in samples:
        a_idx = []
        for x in args:
            a_idx.append(len(flat) if isinstance(x, torch.Tensor) else None)
            if isinstance(x, torch.Tensor):
                flat.append(x)
        k_idx = {}
        for k, x in kwargs.items():
            k_idx[k] = len(flat) if isinstance(x, torch.Tensor) else None
            if isinstance(x, torch.Tensor):
                flat.append(x)
        layout.append((op, args, kwargs, a_idx, k_idx))

    def calls(ts):
        for op, args, kwargs, a_idx, k_idx in layout:
            a = [ts[i] if i is not None else x for x, i in zip(args, a_idx)]
            kw = {k: ts[i] if i is not None else kwargs[k] for k, i in k_idx.items()}
            yield op, a, kw

    return flat, calls


def test_compile_fullgraph_every_op_matches_eager():
    """One function calling every differentiable op compiles with
    fullgraph=True (no graph break) and gives eager's values and gradients."""
    flat, calls = _split([(op, SAMPLES[op]()) for op in DIFF_OPS])

    def fn(*ts):
        outs = []
        for op, a, kw in calls(ts):
            r = getattr(st, op)(*a, **kw)
            outs.extend(r if isinstance(r, tuple) else (r,))
        return tuple(outs)

    torch._dynamo.reset()
    seen = []

    def record(gm, example_inputs):  # the graph dynamo captured: one node per smax call
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward

    torch.compile(fn, fullgraph=True, backend=record)(*flat)
    assert sorted(t for t in seen if t.startswith("smax.")) == sorted(
        f"smax.{op}" for op in DIFF_OPS)

    torch._dynamo.reset()
    out_e, g_e = _grads(fn, flat)
    out_c, g_c = _grads(torch.compile(fn, fullgraph=True), flat)
    assert len(out_e) == len(out_c)
    for a, b in zip(out_e, out_c):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    for a, b in zip(g_e, g_c):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, rtol=0, atol=0)


class _Block(torch.nn.Module):
    """Attention (learned sinks), a softmax with a learned temperature and a
    cross-entropy with extras: the smax ops of a small model."""

    def __init__(self):
        super().__init__()
        self.sinks = torch.nn.Parameter(torch.zeros(2))
        self.temperature = torch.nn.Parameter(torch.tensor(1.5))
        self.head = torch.nn.Linear(4, 6)

    def forward(self, q, k, v, target):
        a = st.attention(q, k, v, is_causal=True, sinks=self.sinks)  # [1, 2, 3, 4]
        logits = self.head(a.reshape(-1, 4))  # [6, 6]
        p = st.softmax(logits, -1, temperature=self.temperature)
        loss, lse = st.cross_entropy(logits, target, label_smoothing=0.1, return_lse=True)
        return loss + 1e-3 * (lse ** 2).mean() + p.max(-1).values.mean()


def test_export_matches_eager():
    torch.manual_seed(0)
    model = _Block()
    q, k, v = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)
    target = torch.randint(0, 6, (6,))
    ep = torch.export.export(model, (q, k, v, target))
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert {"smax.attention.default", "smax.softmax.default",
            "smax.cross_entropy.default"} <= targets
    torch.testing.assert_close(ep.module()(q, k, v, target), model(q, k, v, target),
                               rtol=0, atol=0)
    # other inputs of the same shapes: the exported program is not specialised on values
    q2 = torch.randn(1, 2, 3, 4)
    torch.testing.assert_close(ep.module()(q2, k, v, target), model(q2, k, v, target),
                               rtol=0, atol=0)


def test_compile_trains_learnable_knobs_and_lse():
    """A compiled model's parameter gradients equal eager's: attention's sinks,
    a learned temperature tensor, and the z-loss term built from cross_entropy's
    lse (differentiable) all reach their parameters."""
    torch.manual_seed(1)
    model = _Block()
    q, k, v = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)
    target = torch.randint(0, 6, (6,))
    model(q, k, v, target).backward()
    eager = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    torch._dynamo.reset()
    torch.compile(model, fullgraph=True)(q, k, v, target).backward()
    for n, p in model.named_parameters():
        assert eager[n].abs().sum() > 0, n
        # Inductor reorders the float32 sums of the torch ops around smax's
        # (the linear layer's backward): equal to float32 rounding, not bitwise.
        torch.testing.assert_close(p.grad, eager[n], rtol=1e-6, atol=1e-8)


def test_export_dynamic_batch():
    class Losses(torch.nn.Module):
        def forward(self, x, t):
            return st.cross_entropy(x, t, reduction="none") + st.logsumexp(x, 1)

    n = torch.export.Dim("n")
    ep = torch.export.export(Losses(), (torch.randn(5, 7), torch.randint(0, 7, (5,))),
                             dynamic_shapes=({0: n}, {0: n}))
    x, t = torch.randn(11, 7), torch.randint(0, 7, (11,))
    torch.testing.assert_close(ep.module()(x, t), Losses()(x, t), rtol=0, atol=0)


@pytest.mark.parametrize("op", [op for op in DIFF_OPS if op not in _library._RECOMPUTE])
def test_backward_replays_the_forward(op, monkeypatch):
    """smax::<op>_backward does not run the forward kernel again (it replays
    the saved outputs): with the kernel gone, the backward still gives the
    gradients."""
    from smax import _common

    args, kwargs = SAMPLES[op]()
    bound = inspect.signature(getattr(st, op)).bind(*args, **kwargs)
    bound.apply_defaults()
    out = _library.call(op, list(bound.arguments.values()))
    leaves = [t for t in list(args) + list(kwargs.values())
              if isinstance(t, torch.Tensor) and t.requires_grad]

    def gone(*a, **k):
        raise AssertionError(f"smax.{op}'s forward kernel ran in the backward")

    monkeypatch.setattr(_common._C, op, gone)
    out = out[0] if isinstance(out, tuple) else out  # softmax_topk: the probabilities
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(5))
    grads = torch.autograd.grad((out * weights).sum(), leaves, allow_unused=True)
    assert any(g is not None and g.abs().sum() > 0 for g in grads)


def test_parameters_in_eager_stay_on_the_autograd_functions(monkeypatch):
    # nn.Parameter is a Tensor subclass but not a traced one: an eager call
    # with a learnable knob or an owned weight must not take the custom-op
    # route (which recomputes some forwards in the backward).
    def refuse(*args, **kwargs):
        raise AssertionError("eager call routed through torch.ops.smax")

    monkeypatch.setattr(_library, "call", refuse)
    temperature = torch.nn.Parameter(torch.tensor(1.5))
    x = torch.randn(3, 7, requires_grad=True)
    st.softmax(x, dim=-1, temperature=temperature).sum().backward()
    assert temperature.grad is not None
    weight = torch.nn.Parameter(torch.randn(11, 5))
    hidden = torch.randn(4, 5, requires_grad=True)
    target = torch.randint(0, 11, (4,))
    st.linear_cross_entropy(hidden, weight, target).backward()
    assert weight.grad is not None and hidden.grad is not None
