"""Storage dtypes: float64, float32, float16 and bfloat16 in, the same dtype out.

For every op of the op list that Python exposes (``smax.op_list()``, kinds
"diff" / "nodiff", and the backward passes that are array functions), in
every floating dtype, as numpy arrays (bfloat16 through ml_dtypes when it
imports) and torch tensors:

* the result has the input's dtype (int64 indices stay int64) and is a view
  of nothing else (no copy of the input: checked through ``out=``);
* its values agree with a float64 reference computed on the input widened
  to float64 within the op's float32 bound plus half an ulp of the output
  dtype (the row-wise ops compute in float32 arithmetic: a float64 input is
  rounded to float32 first, so their reference is taken on that rounding,
  which is what the C++ API documents);
* where torch has the op (softmax, log_softmax, logsumexp, cross_entropy,
  softmax of top-k), they agree with torch's result in that dtype within one
  ulp of the dtype on top of the op's own bound (two correct float32
  implementations differ by more than one float32 ulp; for float16 and
  bfloat16 the ulp dominates);
* a differentiable op's gradient (smax.torch) has the input's dtype.

The softmax family (softmax, log_softmax, logsumexp and their backward
passes) gets its float16 / bfloat16 / float64 kernels in the C++ library
separately; until a build has them, their cases skip with the reason, found
by a runtime probe (``SOFTMAX_DTYPES``), so they turn on by themselves.
attention and linear_cross_entropy (4-D q / k / v; hidden / weight / bias)
have their own walks in test_dtypes_attention_lce.py.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import smax  # noqa: E402
import smax.torch as st  # noqa: E402

try:
    import ml_dtypes  # noqa: F401

    NP_BF16 = ml_dtypes.bfloat16
except ImportError:  # pragma: no cover
    NP_BF16 = None

entmax = pytest.importorskip("entmax")

F = torch.nn.functional
DTYPES = ["float64", "float32", "float16", "bfloat16"]
TORCH_DTYPE = {"float64": torch.float64, "float32": torch.float32,
               "float16": torch.float16, "bfloat16": torch.bfloat16}
# Machine epsilon (one ulp at 1) and the smallest positive subnormal of each dtype.
EPS = {"float64": 2.0**-52, "float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}
TINY = {"float64": 2.0**-1074, "float32": 2.0**-149, "float16": 2.0**-24,
        "bfloat16": 2.0**-133}

pytestmark = pytest.mark.usefixtures("torch_seed")


def np_dtype(name):
    if name == "bfloat16":
        if NP_BF16 is None:  # pragma: no cover
            pytest.skip("numpy bfloat16 needs ml_dtypes")
        return NP_BF16
    return np.dtype(name)


def dtype_name(a) -> str:
    return str(a.dtype).rsplit(".", 1)[-1]


def to_torch(a):
    """A numpy result (bfloat16 too) as a torch tensor of its dtype."""
    if isinstance(a, torch.Tensor):
        return a
    if a.dtype == NP_BF16:  # exact: bfloat16 -> float32 -> bfloat16
        return torch.from_numpy(np.asarray(a, dtype=np.float32)).to(torch.bfloat16)
    return torch.from_numpy(np.asarray(a))


def to_numpy(t, name):
    """A torch tensor as a numpy array of dtype `name` (bfloat16: ml_dtypes)."""
    return t.detach().double().numpy().astype(np_dtype(name))


# ---- the softmax family's dtype support in this build (runtime probes) ----------------------


def _probe_softmax(name: str) -> bool:
    """smax.softmax takes `name` (float64: with a float64 kernel, i.e. within
    1e-13 of a float64 reference, not float32 arithmetic)."""
    x = torch.linspace(-3, 2, 12, dtype=torch.float64).reshape(3, 4) * 1.37
    try:
        y = smax.softmax(x.to(TORCH_DTYPE[name]))
    except TypeError:
        return False
    if name != "float64":
        return True
    return bool((y - torch.softmax(x, -1)).abs().max() <= 1e-13)


SOFTMAX_DTYPES = {name: _probe_softmax(name) for name in DTYPES}
SOFTMAX_FAMILY = {"softmax", "log_softmax", "logsumexp", "softmax_backward",
                  "log_softmax_backward"}
# ... and the array functions the C++ library computes with the softmax family's
# kernels (sparse_softmax_backward is softmax's backward on the top-k support).
SOFTMAX_KERNEL = SOFTMAX_FAMILY | {"sparse_softmax_backward"}
# Ops with float64 arithmetic for float64 input (docs/dtypes.md): the softmax
# family, cross_entropy, the z-losses, the sparse normalisers with their
# losses, SSMax, softpick, clipped softmax, StableMax (+ its
# cross-entropy) and the re-weighting normalisers; every other op computes in
# float32 from float64.
F64_SOFTMAX = {"softmax", "log_softmax", "logsumexp"}
F64_SPARSE = {"sparsemax", "entmax15", "entmax_bisect", "sparse_softmax", "sparsemax_loss",
              "entmax15_loss", "entmax_bisect_loss", "sparse_softmax_loss"}
F64_RESCALED = {"ssmax", "softpick", "clipped_softmax", "stablemax", "stablemax_cross_entropy"}
F64_REWEIGHT = {"self_adjust_softmax", "sigmoid_normalizer", "softplus_normalizer",
                "power_softmax", "probability_temperature", "logit_standardization"}
# The samplers compute in float64 too; gumbel_softmax's value is compared at
# the float32 bound here (its reference draws float32 noise; the float64
# path is checked against long double in tests/test_sampling_f64.cc), its
# float64 gradient strictly (F64_GRAD).
F64_SAMPLING = {"softmax_topk", "sampling_filter"}
F64_NATIVE = (F64_SOFTMAX | {"cross_entropy", "z_loss", "spherical_z_loss"} | F64_SPARSE
              | F64_RESCALED | F64_REWEIGHT | F64_SAMPLING
              | {"linear_cross_entropy", "attention"})  # the last two: test_dtypes_attention_lce.py
F64_GRAD = F64_NATIVE | {"gumbel_softmax"}


def needs_softmax(op: str, name: str) -> None:
    if op in SOFTMAX_KERNEL and not SOFTMAX_DTYPES[name]:
        kernel = ("float64 kernel (float64 input within 1e-13 of a float64 reference)"
                  if name == "float64" else f"{name} storage")
        pytest.skip(f"smax.{op}: this build's C++ softmax family has no {kernel} yet "
                    f"(the softmax-family dtype work is not merged into this branch)")


# ---- bounds -----------------------------------------------------------------------------------


def assert_within(got, want64, name, rtol, atol, what=""):
    """|got - want| <= rtol |want| + atol + half an ulp of `name` at want (NaN
    where want is NaN, equal infinities)."""
    g = to_torch(got).detach().double()
    w = want64.detach().double()
    assert g.shape == w.shape, (g.shape, w.shape)
    assert torch.equal(torch.isnan(g), torch.isnan(w)), what
    inf = torch.isinf(w)
    assert torch.equal(g[inf], w[inf]), what
    fin = torch.isfinite(w)
    err = (g[fin] - w[fin]).abs()
    bound = rtol * w[fin].abs() + atol + 0.5 * EPS[name] * w[fin].abs() * (1 + 1e-6) \
        + 0.5 * TINY[name]
    assert (err <= bound).all(), (
        f"{what} {name}: max excess {(err - bound).max().item():.3g}, "
        f"max err {err.max().item():.3g}")


def assert_ulp(got, other, name, rtol=0.0, atol=0.0, what=""):
    """Within one ulp of `name` (plus the op's own bound rtol / atol)."""
    a = to_torch(got).detach().double()
    b = to_torch(other).detach().double()
    assert a.shape == b.shape
    assert torch.equal(torch.isnan(a), torch.isnan(b)), what
    fin = torch.isfinite(b)
    assert torch.equal(a[~fin], b[~fin]), what
    m = torch.maximum(a[fin].abs(), b[fin].abs())
    err = (a[fin] - b[fin]).abs()
    # Two results, each within its bound of the exact value and each rounded
    # once: they differ by at most both bounds plus the roundings. torch's
    # own narrow results are not always correctly rounded (its float16
    # log_softmax is up to 1.5 ulp off: -0.14941 for the exact -0.149601,
    # where smax gives -0.149658, 0.47 ulp), so two ulps of the dtype; the
    # float64 reference test above holds smax itself to half an ulp.
    assert (err <= 2 * EPS[name] * m + 2 * (rtol * m + atol) + TINY[name]).all(), (
        f"{what} {name}: max err {err.max().item():.3g}")


# ---- inputs and float64 references ---------------------------------------------------------


def reference_input(x, name, op):
    """The float64 tensor the reference is computed on: the input widened to
    float64; a float64 input rounded to float32 first for the ops with float32
    arithmetic (F64_NATIVE ops: the input itself)."""
    x = to_torch(x).detach()
    if name == "float64" and op not in F64_NATIVE:
        x = x.float()
    return x.double()


# alpha = 1.25 is exact in float32 (alpha is a float32 option of the C++ API,
# so 1.3 would be 1.29999995 there and differ from the package's 1.3 by ~1e-8,
# far above the float64 bound).
def ref_entmax_bisect(t, d, alpha=1.25):
    return entmax.entmax_bisect(t, alpha, d, n_iter=80)


def ref_stablemax(t, d):
    s = torch.where(t >= 0, t + 1, 1 / (1 - torch.where(t >= 0, torch.zeros_like(t), t)))
    return s / s.sum(d, keepdim=True)


def ref_sparse_softmax(t, d, k):
    idx = t.topk(k, d).indices
    keep = torch.zeros_like(t, dtype=torch.bool).scatter_(d, idx, True)
    return torch.softmax(t.masked_fill(~keep, -math.inf), d)


def ref_stablemax_ce(t, y):
    s = torch.where(t >= 0, t + 1, 1 / (1 - torch.where(t >= 0, torch.zeros_like(t), t)))
    return -torch.log(s.gather(1, y[:, None])[:, 0] / s.sum(-1))


def ref_spherical(t, y, a=2.0, b=1.0):
    z = (t - t.mean(-1, keepdim=True)) / t.std(-1, unbiased=False, keepdim=True)
    return F.softplus(a * (b - z.gather(1, y[:, None])[:, 0])) / a


def ref_topk_loss(t, y, k=3):
    v = t.topk(k, -1).values
    return torch.logsumexp(v, -1) - t.gather(1, y[:, None])[:, 0]


def _gumbel(shape, seed=7):
    return torch.from_numpy(smax.gumbel_noise(shape, seed).astype(np.float64))


TARGET = torch.tensor([0, 3, 5, 1, 2, 6])  # 6 rows of 7 classes
N, C = 6, 7

# op -> (call(x) -> primary floating result, float64 reference(t) on the
#        reference input, (rtol, atol): the op's float32 bound)
# Every op takes x of shape [6, 7] with values ~ N(0, 1.5^2).
SPECS = {
    "softmax": (lambda x: smax.softmax(x), lambda t: torch.softmax(t, -1), (2e-6, 1e-36)),
    "log_softmax": (lambda x: smax.log_softmax(x), lambda t: torch.log_softmax(t, -1),
                    (2e-6, 2e-6)),
    "logsumexp": (lambda x: smax.logsumexp(x), lambda t: torch.logsumexp(t, -1), (2e-6, 2e-6)),
    "sparsemax": (lambda x: smax.sparsemax(x), lambda t: entmax.sparsemax(t, -1),
                  (2**-23, 1e-12)),
    "entmax15": (lambda x: smax.entmax15(x), lambda t: entmax.entmax15(t, -1), (2**-22, 1e-12)),
    "entmax_bisect": (lambda x: smax.entmax_bisect(x, 1.25), lambda t: ref_entmax_bisect(t, -1),
                      (1e-5, 1e-7)),
    "sparse_softmax": (lambda x: smax.sparse_softmax(x, 3),
                       lambda t: ref_sparse_softmax(t, -1, 3), (2e-6, 1e-36)),
    # s = 0.4375: exact in float32 (s is a float32 option)
    "ssmax": (lambda x: smax.ssmax(x, 0.4375),
              lambda t: torch.softmax(t * (0.4375 * math.log(C)), -1), (2e-6, 1e-36)),
    "softpick": (lambda x: smax.softpick(x),
                 lambda t: torch.relu(t.exp() - 1) / ((t.exp() - 1).abs().sum(-1, True) + 1e-6),
                 (4e-6, 1e-30)),
    "stablemax": (lambda x: smax.stablemax(x), lambda t: ref_stablemax(t, -1), (1e-6, 1e-30)),
    "self_adjust_softmax": (lambda x: smax.self_adjust_softmax(x),
                            lambda t: t * torch.softmax(t, -1), (2.2e-6, 1e-7)),
    "sigmoid_normalizer": (lambda x: smax.sigmoid_normalizer(x),
                           lambda t: torch.sigmoid(t - math.log(C)), (2e-6, 1e-30)),
    # lambd = 0.75 and T = 0.625: exact in float32 (float32 options)
    "softplus_normalizer": (lambda x: smax.softplus_normalizer(x, lambd=0.75),
                            lambda t: F.softplus(0.75 * t) / F.softplus(0.75 * t).sum(-1, True),
                            (4e-6, 1e-30)),
    "power_softmax": (lambda x: smax.power_softmax(x, 2),
                      lambda t: t**2 / (t**2).sum(-1, True), (4e-6, 1e-30)),
    "probability_temperature": (
        lambda x: smax.probability_temperature(abs(x) if not isinstance(x, torch.Tensor)
                                               else x.abs(), 0.625),
        lambda t: t.abs() ** (1 / 0.625) / (t.abs() ** (1 / 0.625)).sum(-1, True),
        (4e-6, 1e-30)),
    "logit_standardization": (
        lambda x: smax.logit_standardization(x, temperature=2.0),
        lambda t: torch.softmax((t - t.mean(-1, True)) / (t.std(-1, keepdim=True) + 1e-7) / 2,
                                -1), (1e-5, 1e-30)),
    # gamma, zeta exact in float32 (float32 options)
    "clipped_softmax": (lambda x: smax.clipped_softmax(x, gamma=-0.125, zeta=1.25),
                        lambda t: torch.clip(1.375 * torch.softmax(t, -1) - 0.125, 0, 1),
                        (4e-6, 1e-6)),
    "softmax_collapse_fraction": None,  # a Python float: test_collapse_fraction_dtypes
    "sparsemax_loss": (lambda x: smax.sparsemax_loss(x, to_index(x), reduction="none"),
                       lambda t: entmax.sparsemax_loss(t, TARGET), (1e-6, 1e-6)),
    "entmax15_loss": (lambda x: smax.entmax15_loss(x, to_index(x), reduction="none"),
                      lambda t: entmax.entmax15_loss(t, TARGET), (1e-6, 1e-6)),
    "entmax_bisect_loss": (
        lambda x: smax.entmax_bisect_loss(x, to_index(x), 1.25, reduction="none"),
        lambda t: entmax.entmax_bisect_loss(t, TARGET, 1.25, n_iter=80), (1e-5, 1e-6)),
    "sparse_softmax_loss": (lambda x: smax.sparse_softmax_loss(x, to_index(x), 3,
                                                               reduction="none"),
                            lambda t: ref_topk_loss(t, TARGET, 3), (4e-6, 4e-6)),
    "stablemax_cross_entropy": (
        lambda x: smax.stablemax_cross_entropy(x, to_index(x), reduction="none"),
        lambda t: ref_stablemax_ce(t, TARGET), (1e-6, 1e-6)),
    "cross_entropy": (lambda x: smax.cross_entropy(x, to_index(x), reduction="none"),
                      lambda t: F.cross_entropy(t, TARGET, reduction="none"), (4e-6, 4e-6)),
    # 2^-7: exact in float32 (the coefficient is a float32 option; 1e-2 would
    # differ from the reference's 1e-2 by ~1e-10 relative in float64)
    "z_loss": (lambda x: smax.z_loss(x, None, 2**-7, reduction="none"),
               lambda t: 2**-7 * torch.logsumexp(t, -1) ** 2, (4e-6, 1e-7)),
    "spherical_z_loss": (lambda x: smax.spherical_z_loss(x, to_index(x), 2.0, 1.0,
                                                         reduction="none"),
                         lambda t: ref_spherical(t, TARGET), (1e-5, 1e-6)),
    "gumbel_softmax": (lambda x: smax.gumbel_softmax(x, 0.7, seed=7),
                       lambda t: torch.softmax((t + _gumbel((N, C))) / 0.7, -1), (4e-6, 1e-30)),
    "softmax_topk": (lambda x: smax.softmax_topk(x, 3)[0],
                     lambda t: torch.softmax(t, -1).topk(3, -1).values, (2e-6, 1e-36)),
    # T = 0.625: exact in float32 (a float32 option)
    "sampling_filter": (lambda x: smax.sampling_filter(x, 0.625, top_k=3),
                        lambda t: (t / 0.625).masked_fill(
                            t < t.topk(3, -1).values[:, -1:], -math.inf), (2**-24, 0.0)),
    # int64 results: the same indices as float32 on the widened input
    "gumbel_max": "indices",
    "sample": "indices",
    "gumbel_noise": None,  # no input: test_gumbel_noise_dtypes
    "soft_nms": None,  # boxes + scores: test_soft_nms_dtypes
    "attention": None,  # q / k / v of 4-D: test_attention_dtypes
    "linear_cross_entropy": None,  # hidden / weight / bias: test_linear_cross_entropy_dtypes
    # the backward passes that are array functions
    "softmax_backward": (lambda y: smax.softmax_backward(y, DY.to(y.dtype)
                                                         if isinstance(y, torch.Tensor)
                                                         else to_numpy(DY, dtype_name(y))),
                         lambda y: y * (DY - (DY * y).sum(-1, True)), (2e-6, 2e-7)),
    "log_softmax_backward": None,  # covered with softmax_backward's inputs below
    "sparsemax_backward": None,
    "entmax15_backward": None,
    "entmax_bisect_backward": None,
    "sparse_softmax_backward": None,
}
DY = torch.linspace(-1, 1.5, N * C, dtype=torch.float64).reshape(N, C)


def to_index(x):
    return TARGET if isinstance(x, torch.Tensor) else TARGET.numpy()


def exposed_ops():
    """The ops Python exposes as functions: kinds diff / nodiff, and the
    backward passes that are array functions of smax."""
    # The integer ops (group "quantized": int_softmax, shiftmax,
    # qlinear_softmax) take integer arrays, not floating ones: test_quantized.py.
    return [op.name for op in smax.op_list() if op.group != "quantized" and
            (op.kind in ("diff", "nodiff") or (op.kind == "backward" and op.name in smax.__all__))]


def test_every_exposed_op_has_a_dtype_case():
    missing = [name for name in exposed_ops() if name not in SPECS]
    assert not missing, f"ops without a dtype case in {__file__}: {missing}"


VALUE_OPS = [name for name, spec in SPECS.items() if isinstance(spec, tuple)]


def make_x(name, lib, shape=(N, C)):
    x64 = torch.randn(shape, dtype=torch.float64) * 1.5
    xt = x64.to(TORCH_DTYPE[name])
    return xt if lib == "torch" else to_numpy(xt, name)


@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("op", VALUE_OPS)
def test_dtype_in_dtype_out_and_float64_reference(op, name, lib):
    needs_softmax(op, name)
    call, ref, (rtol, atol) = SPECS[op]
    if op in ("softmax_backward",):
        # y = a float64 softmax rounded to the dtype (the backward's input)
        y = torch.softmax(torch.randn(N, C, dtype=torch.float64), -1).to(TORCH_DTYPE[name])
        x = y if lib == "torch" else to_numpy(y, name)
    else:
        x = make_x(name, lib)
    got = call(x)
    assert type(got) is type(x)
    assert dtype_name(got) == (np.dtype(np_dtype(name)).name if lib == "numpy" else name)
    want = ref(reference_input(x, name, op))
    if op in F64_NATIVE and name == "float64":
        rtol, atol = 1e-13, 1e-13 * (atol > 1e-30)  # the float64 kernels' bound
    if op == "softmax_backward" and name != "float64":
        # The documented backward bound is elementwise in |y| (|dy| + |<dy, y>|)
        # plus the dot's term |y| sum |y dy| (smax/softmax.h), not relative to
        # |dx|, which cancellation can make tiny: that bound, plus half an ulp.
        yv = reference_input(x, name, op)
        dy = DY.to(TORCH_DTYPE[name]).double()  # the dy the call received
        dot = (dy * yv).sum(-1, True)
        want = yv * (dy - dot)
        f32_bound = 2e-6 * yv.abs() * (dy.abs() + dot.abs()) + \
            1.02e-6 * yv.abs() * (dy * yv).abs().sum(-1, True) + 1e-30
        g = to_torch(got).detach().double()
        half_ulp = 0.5 * EPS[name] * want.abs() * (1 + 1e-6) + 0.5 * TINY[name]
        assert ((g - want).abs() <= f32_bound + half_ulp).all(), f"smax.{op} {name}"
        return
    assert_within(got, want, name, rtol, atol, f"smax.{op}")


@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("op", ["sparsemax_backward", "entmax15_backward",
                                "entmax_bisect_backward", "sparse_softmax_backward",
                                "log_softmax_backward"])
def test_backward_array_functions_keep_the_dtype(op, name):
    needs_softmax(op, name)
    x = torch.randn(N, C, dtype=torch.float64).to(TORCH_DTYPE[name])
    fwd = {"sparsemax_backward": smax.sparsemax, "entmax15_backward": smax.entmax15,
           "entmax_bisect_backward": smax.entmax_bisect,
           "sparse_softmax_backward": lambda v: smax.sparse_softmax(v, 3),
           "log_softmax_backward": smax.log_softmax}[op]
    y = fwd(x)
    dy = DY.to(TORCH_DTYPE[name])
    dx = getattr(smax, op)(y, dy)
    assert dx.dtype == TORCH_DTYPE[name]
    # the same as the float32 call on the widened inputs, rounded once
    want = getattr(smax, op)(y.float(), dy.float())
    assert_within(dx, want.double(), name, 0.0, 2e-6 * want.abs().max().item(), f"smax.{op}")
    yn, dyn = to_numpy(y, name), to_numpy(dy, name)
    assert dtype_name(getattr(smax, op)(yn, dyn)) == np.dtype(np_dtype(name)).name


@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("op", ["gumbel_max", "sample"])
def test_index_results_stay_int64(op, name):
    x = make_x(name, "torch")
    fn = {"gumbel_max": lambda v: smax.gumbel_max(v, seed=3),
          "sample": lambda v: smax.sample(v, 0.8, top_k=4, seed=3)}[op]
    idx = fn(x)
    assert idx.dtype == torch.int64
    assert torch.equal(idx, fn(x.float()))  # float32 arithmetic on the widened input
    idx_np = fn(to_numpy(x, name))
    assert idx_np.dtype == np.int64 and np.array_equal(idx_np, idx.numpy())


@pytest.mark.parametrize("name", DTYPES)
def test_gumbel_noise_dtypes(name):
    want = torch.from_numpy(smax.gumbel_noise((4, 9), 5).astype(np.float64))
    for like in (torch.empty(0, dtype=TORCH_DTYPE[name]), np.empty(0, np_dtype(name))):
        g = smax.gumbel_noise((4, 9), 5, like=like)
        assert type(g) is type(like) and dtype_name(g) == dtype_name(like)
        assert_within(g, want, name, 2**-24, 0.0, "gumbel_noise")


@pytest.mark.parametrize("name", DTYPES)
def test_soft_nms_dtypes(name):
    from test_sampling import ref_soft_nms
    rng = np.random.default_rng(3)
    xy = rng.uniform(0, 50, (20, 2))
    boxes64 = np.concatenate([xy, xy + rng.uniform(5, 30, (20, 2))], 1)
    scores64 = rng.uniform(0.05, 1, 20)
    td = TORCH_DTYPE[name]
    boxes, scores = torch.from_numpy(boxes64).to(td), torch.from_numpy(scores64).to(td)
    idx, kept = smax.soft_nms(boxes, scores, method="gaussian")
    assert idx.dtype == torch.int64 and kept.dtype == td
    idx32, kept32 = smax.soft_nms(boxes.float(), scores.float(), method="gaussian")
    assert torch.equal(idx, idx32)
    if name == "float64":  # read exactly, computed and kept in float64
        ri, rs = ref_soft_nms(boxes64, scores64, "gaussian", 0.5, 0.3, 0.001)
        np.testing.assert_array_equal(idx.numpy(), ri)
        np.testing.assert_allclose(kept.numpy(), rs, rtol=1e-15, atol=0)
    else:
        assert_within(kept, kept32.double(), name, 2**-24, 0.0, "soft_nms")
    idx_n, kept_n = smax.soft_nms(to_numpy(boxes, name), to_numpy(scores, name),
                                  method="gaussian")
    assert np.array_equal(idx_n, idx.numpy()) and dtype_name(kept_n) == dtype_name(
        np.empty(0, np_dtype(name)))


def test_soft_nms_float64_reads_boxes_exactly():
    """Boxes near 1e6 that differ below float32's spacing there (0.0625):
    float64 boxes are read exactly, so the selection and the decayed scores
    are the float64 reference's (rounded to float32 they would not be)."""
    from test_sampling import ref_soft_nms
    rng = np.random.default_rng(5)
    xy = 1e6 + rng.uniform(0, 1, (30, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(0.2, 0.6, (30, 2))], 1)
    scores = rng.uniform(0.05, 1, 30)
    for method in ("gaussian", "linear", "hard"):
        idx, kept = smax.soft_nms(boxes, scores, method=method)
        ri, rs = ref_soft_nms(boxes, scores, method, 0.5, 0.3, 0.001)
        np.testing.assert_array_equal(idx, ri)
        np.testing.assert_allclose(kept, rs, rtol=1e-14, atol=0)
        assert kept.dtype == np.float64


@pytest.mark.parametrize("name", DTYPES)
def test_collapse_fraction_dtypes(name):
    x = make_x(name, "torch") * 30
    frac, flags = smax.softmax_collapse_fraction(x, return_flags=True)
    assert isinstance(frac, float) and flags.dtype == TORCH_DTYPE[name]
    assert frac == smax.softmax_collapse_fraction(x.float())


# ---- against torch in the same dtype ------------------------------------------------------------


TORCH_OPS = {
    "softmax": (lambda x: smax.softmax(x), lambda x: torch.softmax(x, -1), 2e-6),
    "log_softmax": (lambda x: smax.log_softmax(x), lambda x: torch.log_softmax(x, -1), 4e-6),
    "logsumexp": (lambda x: smax.logsumexp(x), lambda x: torch.logsumexp(x, -1), 4e-6),
    "cross_entropy": (lambda x: smax.cross_entropy(x, TARGET, reduction="none"),
                      lambda x: F.cross_entropy(x, TARGET, reduction="none"), 8e-6),
    "softmax_topk": (lambda x: smax.softmax_topk(x, 3)[0],
                     lambda x: torch.softmax(x, -1).topk(3, -1).values, 2e-6),
}


@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("op", list(TORCH_OPS))
def test_agrees_with_torch_in_the_dtype(op, name):
    needs_softmax(op, name)
    ours, theirs, bound = TORCH_OPS[op]
    x = make_x(name, "torch")
    got, want = ours(x), theirs(x)
    assert got.dtype == want.dtype == TORCH_DTYPE[name]
    if name == "float64" and op in F64_NATIVE:
        bound = 1e-13
    # float64 storage with float32 arithmetic: torch's float64 result is the
    # reference; ours is within the float32 bound of it.
    assert_ulp(got, want, name, rtol=bound, atol=bound, what=f"smax.{op}")


# ---- gradients in the input's dtype ------------------------------------------------------------


# op -> smax.torch call of x (the differentiable output first)
GRAD_OPS = {
    "softmax": lambda x: st.softmax(x, -1),
    "log_softmax": lambda x: st.log_softmax(x, -1),
    "logsumexp": lambda x: st.logsumexp(x, -1),
    "sparsemax": lambda x: st.sparsemax(x, -1),
    "entmax15": lambda x: st.entmax15(x, -1),
    "entmax_bisect": lambda x: st.entmax_bisect(x, 1.3, -1),
    "sparse_softmax": lambda x: st.sparse_softmax(x, 3, -1),
    "ssmax": lambda x: st.ssmax(x, 0.43, -1),
    "softpick": lambda x: st.softpick(x, -1),
    "stablemax": lambda x: st.stablemax(x, -1),
    "self_adjust_softmax": lambda x: st.self_adjust_softmax(x, -1),
    "sigmoid_normalizer": lambda x: st.sigmoid_normalizer(x, -1),
    "softplus_normalizer": lambda x: st.softplus_normalizer(x, -1, lambd=0.7),
    "power_softmax": lambda x: st.power_softmax(x, 2, -1),
    "probability_temperature": lambda x: st.probability_temperature(x.abs() + 0.05, 0.7, -1),
    "logit_standardization": lambda x: st.logit_standardization(x, -1, temperature=2.0),
    "clipped_softmax": lambda x: st.clipped_softmax(x, -1, gamma=-0.1, zeta=1.2),
    "sparsemax_loss": lambda x: st.sparsemax_loss(x, TARGET, reduction="none"),
    "entmax15_loss": lambda x: st.entmax15_loss(x, TARGET, reduction="none"),
    "entmax_bisect_loss": lambda x: st.entmax_bisect_loss(x, TARGET, 1.3, reduction="none"),
    "sparse_softmax_loss": lambda x: st.sparse_softmax_loss(x, TARGET, 3, reduction="none"),
    "stablemax_cross_entropy": lambda x: st.stablemax_cross_entropy(x, TARGET,
                                                                    reduction="none"),
    "cross_entropy": lambda x: st.cross_entropy(x, TARGET, reduction="none", fused=False),
    "z_loss": lambda x: st.z_loss(x, TARGET, 1e-2, reduction="none"),
    "spherical_z_loss": lambda x: st.spherical_z_loss(x, TARGET, 2.0, 1.0, reduction="none"),
    "gumbel_softmax": lambda x: st.gumbel_softmax(x, 0.7, seed=7),
    "softmax_topk": lambda x: st.softmax_topk(x, 3)[0],
    # q = k = v = x as [1, 1, 6, 7] (x.grad = dq + dk + dv); gradients of
    # each operand on its own: test_attention_gradients_in_dtype
    "attention": lambda x: st.attention(x[None, None], x[None, None], x[None, None])[0, 0],
    # hidden = x [6, 7] with a fixed [9, 7] weight of x's dtype (hidden's
    # gradient; weight / bias: test_linear_cross_entropy_gradients_in_dtype)
    "linear_cross_entropy": lambda x: st.linear_cross_entropy(
        x, LCE_W.to(x.dtype), TARGET, reduction="none"),
}
LCE_W = torch.linspace(-1.2, 1.3, 9 * C, dtype=torch.float64).reshape(9, C).sin()


def diff_ops():
    return [op.name for op in smax.op_list() if op.kind == "diff"]


def test_every_differentiable_op_has_a_gradient_case():
    missing = [name for name in diff_ops() if name not in GRAD_OPS]
    assert not missing, f"diff ops without a gradient case in {__file__}: {missing}"


@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("op", [k for k, v in GRAD_OPS.items() if v is not None])
def test_gradient_in_the_input_dtype(op, name):
    needs_softmax(op, name)
    fn = GRAD_OPS[op]
    x0 = torch.randn(N, C, dtype=torch.float64) * 1.5
    x = x0.to(TORCH_DTYPE[name]).requires_grad_(True)
    y = fn(x)
    assert y.dtype == TORCH_DTYPE[name]
    g = torch.linspace(0.5, 1.5, y.numel(), dtype=torch.float64).reshape(y.shape)
    gd = g.to(y.dtype)
    y.backward(gd)
    assert x.grad is not None and x.grad.dtype == TORCH_DTYPE[name]
    # Against float32 arithmetic on the widened input and upstream gradient:
    # the backward reads the forward's output in the dtype (rounded), so the
    # gradient is within a few ulps of the dtype at the gradient's scale.
    x32 = x.detach().float().requires_grad_(True)
    fn(x32).backward(gd.float())
    scale = x32.grad.abs().max().item()
    # (dx = y (g - <g, y>) with |dy| <= eps/2 |y| moves by up to ~2 eps max|g|)
    narrow = name in ("float16", "bfloat16")
    atol = 1e-5 * scale + (4 * EPS[name] * max(scale, gd.abs().max().item()) if narrow else 0)
    assert_within(x.grad, x32.grad.double(), name, 1e-5, atol + 1e-30, f"grad {op}")


@pytest.mark.parametrize("name", ["float64", "float16", "bfloat16"])
def test_cross_entropy_fused_and_mask_gradients_in_dtype(name):
    td = TORCH_DTYPE[name]
    x = (torch.randn(N, C) * 1.5).to(td).requires_grad_(True)
    mask = torch.zeros(1, C, dtype=td).requires_grad_(True)
    loss = st.cross_entropy(x, TARGET, mask=mask, label_smoothing=0.1)
    assert loss.dtype == td
    loss.backward()
    assert x.grad.dtype == td and mask.grad.dtype == td
    x2 = x.detach().clone().requires_grad_(True)
    st.cross_entropy(x2, TARGET, label_smoothing=0.1, fused=False).backward()
    assert_within(x.grad, x2.grad.double(), name, 1e-5, 1e-6, "fused vs two-call")
    # the lse the two-call backward reuses stays float32 inside; return_lse is in the dtype
    x3 = x.detach().clone().requires_grad_(True)
    loss3, lse = st.cross_entropy(x3, TARGET, fused=False, return_lse=True)
    assert lse.dtype == td and loss3.dtype == td


@pytest.mark.parametrize("name", ["float64", "float16", "bfloat16"])
def test_learnable_parameter_gradients_in_their_dtype(name):
    td = TORCH_DTYPE[name]
    x = (torch.randn(4, N, C) * 1.5).to(td).requires_grad_(True)
    alpha = torch.full((4, 1, 1), 1.5, dtype=td, requires_grad=True)
    s = torch.full((4, 1, 1), 0.43, dtype=td, requires_grad=True)
    (st.entmax_bisect(x, alpha=alpha).pow(2).sum() + st.ssmax(x, s=s).pow(2).sum()).backward()
    assert alpha.grad.dtype == td and s.grad.dtype == td and x.grad.dtype == td


# ---- torch.autograd.gradcheck in float64 ----------------------------------------------------


def _gradcheck_fn(op):
    fn = GRAD_OPS[op]
    if op == "probability_temperature":
        return lambda x: st.probability_temperature(x, 0.7, -1)
    return fn


@pytest.mark.parametrize("op", diff_ops())
def test_gradcheck_float64(op):
    """Every differentiable op under torch.autograd.gradcheck in float64, at
    the default tolerances (eps=1e-6, atol=1e-5, rtol=1e-3): every op
    computes float64 in float64 (F64_GRAD; attention's and
    linear_cross_entropy's operands:
    test_gradcheck_attention_and_linear_cross_entropy_operands)."""
    needs_softmax(op, "float64")
    gen = torch.Generator().manual_seed(11)
    x = (torch.randn(N, C, dtype=torch.float64, generator=gen) * 1.5)
    if op == "probability_temperature":
        x = x.abs() + 0.2
    x.requires_grad_(True)
    fn = _gradcheck_fn(op)
    assert op in F64_GRAD, f"{op}: a differentiable op without a float64 path"
    assert torch.autograd.gradcheck(fn, (x,))
    if op in F64_SOFTMAX:
        mask = torch.randn(1, 7, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(
            lambda a, m: getattr(st, op)(a, -1, scale=0.8, mask=m), (x, mask))


def test_cross_entropy_gradcheck_float64_every_option():
    """cross_entropy's float64 arithmetic under default gradcheck tolerances
    (eps = 1e-6): class and probability targets, class weights, label
    smoothing, z-loss, softcap, an additive mask, a fixed scale and
    temperature. (scale and temperature are float32 options, so a central
    difference of 1e-6 on them measures their f32 rounding: their learnable
    gradients are checked at eps = 1e-3 in test_logit_scale.py.) (fused=False: gradcheck runs backward more than once,
    which the fused path's in-place gradient does not allow; the fused
    gradient's bits equal the backward's, tests/test_cross_entropy_f64.cc.)"""
    gen = torch.Generator().manual_seed(5)
    x = (torch.randn(N, C, dtype=torch.float64, generator=gen) * 2).requires_grad_(True)
    w = torch.rand(C, dtype=torch.float64, generator=gen) + 0.5
    q = torch.softmax(torch.randn(N, C, dtype=torch.float64, generator=gen), -1)
    mask = torch.zeros(1, C, dtype=torch.float64)
    mask[0, 2] = -float("inf")
    q[:, 2] = 0  # no target mass on the masked class (else the loss is inf)
    q = q / q.sum(-1, keepdim=True)
    assert torch.autograd.gradcheck(
        lambda a: st.cross_entropy(a, TARGET, w, label_smoothing=0.1, lse_square_scale=1e-2,
                                   softcap=5.0, reduction="none", fused=False), (x,))
    assert torch.autograd.gradcheck(
        lambda a: st.cross_entropy(a, q, w, label_smoothing=0.2, mask=mask, scale=0.8,
                                   temperature=1.3, fused=False), (x,))


# ---- mixed dtypes, out=, DLPack ---------------------------------------------------------------


def test_bfloat16_logits_with_float32_loss_output():
    x = (torch.randn(N, C) * 1.5).to(torch.bfloat16)
    out = torch.empty((), dtype=torch.float32)
    r = smax.cross_entropy(x, TARGET, out=out)
    assert r is out and out.dtype == torch.float32
    want = F.cross_entropy(x.double(), TARGET)
    assert_within(out, want, "float32", 4e-6, 4e-6, "f32 loss of bf16 logits")
    per_row = torch.empty(N, dtype=torch.float32)
    smax.cross_entropy(x, TARGET, reduction="none", out=per_row)
    assert_within(per_row, F.cross_entropy(x.double(), TARGET, reduction="none"), "float32",
                  4e-6, 4e-6)


@pytest.mark.parametrize("op", ["sparsemax", "softmax", "log_softmax"])
def test_float16_input_float32_output(op):
    needs_softmax(op, "float16")
    x = (torch.randn(N, C) * 1.5).half()
    out = torch.empty(N, C, dtype=torch.float32)
    r = getattr(smax, op)(x, out=out)
    assert r is out
    ref = {"sparsemax": lambda t: entmax.sparsemax(t, -1),
           "softmax": lambda t: torch.softmax(t, -1),
           "log_softmax": lambda t: torch.log_softmax(t, -1)}[op](x.double())
    assert_within(out, ref, "float32", 2e-6, 2e-6, op)
    xn = to_numpy(x, "float16")
    outn = np.empty((N, C), np.float32)
    assert getattr(smax, op)(xn, out=outn) is outn
    assert_within(outn, ref, "float32", 2e-6, 2e-6, op)


@pytest.mark.parametrize("name", DTYPES)
def test_out_of_the_dtype_is_written_in_place(name):
    x = make_x(name, "torch")
    out = torch.empty(N, C, dtype=TORCH_DTYPE[name])
    ptr = out.data_ptr()
    assert smax.sparsemax(x, out=out) is out and out.data_ptr() == ptr
    assert torch.equal(out, smax.sparsemax(x))
    smax.sparsemax(x, out=x)  # exactly in place, any dtype
    assert torch.equal(x, out)
    xn = to_numpy(make_x(name, "torch"), name)
    outn = np.empty_like(xn)
    assert smax.sparsemax(xn, out=outn) is outn


@pytest.mark.parametrize("name", DTYPES)
def test_numpy_arrays_of_each_dtype_are_read_in_place(name):
    xn = to_numpy(make_x(name, "torch"), name)
    view = xn[:, ::2]  # strided: read through its strides, not copied
    y = smax.sparsemax(view)
    assert dtype_name(y) == dtype_name(xn)
    assert torch.equal(to_torch(y), smax.sparsemax(to_torch(view)))
    want = smax.sparsemax(to_torch(xn))
    assert smax.sparsemax(xn, out=xn) is xn  # written into the caller's memory
    assert torch.equal(to_torch(xn), want)


class _DL:
    """A bare DLPack-capable array (no numpy / torch type): a torch tensor's
    __dlpack__ only."""

    def __init__(self, t):
        self._t = t
        self.shape = t.shape
        self.dtype = t.dtype

    def __dlpack__(self, **kw):
        return self._t.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._t.__dlpack_device__()


@pytest.mark.parametrize("name", DTYPES)
def test_dlpack_round_trip(name):
    x = make_x(name, "torch")
    want = smax.sparsemax(x)
    # torch -> DLPack capsule -> smax -> numpy (this dtype) -> torch
    y = smax.sparsemax(_DL(x))
    assert isinstance(y, np.ndarray) and dtype_name(y) == np.dtype(np_dtype(name)).name
    back = torch.from_dlpack(y) if name != "bfloat16" else to_torch(y)
    assert back.dtype == TORCH_DTYPE[name] and torch.equal(back, want)
    # smax's torch result through DLPack into numpy (and back) keeps dtype and bits
    if name != "bfloat16":  # numpy's DLPack has no bfloat16
        arr = np.from_dlpack(want)
        assert arr.dtype == np.dtype(name)
        assert torch.equal(torch.from_dlpack(arr), want)
    # an out= given as a DLPack array is written in place
    out = torch.empty(N, C, dtype=TORCH_DTYPE[name])
    smax.sparsemax(x, out=_DL(out))
    assert torch.equal(out, want)


# ---- errors -------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["int32", "complex64", "int64"])
def test_non_floating_inputs_name_the_dtype(bad):
    x = np.ones((2, 3), dtype=bad)
    for fn in (smax.softmax, smax.sparsemax, lambda v: smax.cross_entropy(v, np.zeros(2, np.int64))):
        with pytest.raises(TypeError) as e:
            fn(x)
        msg = str(e.value)
        assert (bad if bad != "complex64" else "complex") in msg
        assert "float32, float64, float16 or bfloat16" in msg
    with pytest.raises(TypeError, match="int32"):
        smax.cross_entropy(torch.ones(2, 3, dtype=torch.int32), torch.zeros(2, dtype=torch.int64))


def test_attention_and_linear_cross_entropy_name_a_non_floating_dtype():
    q = torch.ones(1, 2, 4, 8, dtype=torch.int32)
    with pytest.raises(TypeError, match="q has dtype int32.*float32, float64, float16 or bfloat16"):
        smax.attention(q, q, q)
    qf = torch.ones(1, 2, 4, 8)
    with pytest.raises(TypeError, match="attn_mask has dtype int32.*floating"):
        smax.attention(qf, qf, qf, attn_mask=torch.ones(4, 4, dtype=torch.int32))
    h = torch.ones(4, 8, dtype=torch.int32)
    with pytest.raises(TypeError, match="hidden has dtype int32.*float32, float64"):
        smax.linear_cross_entropy(h, torch.ones(10, 8), torch.tensor([1, 2, 3, 4]))
