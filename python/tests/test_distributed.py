"""smax.distributed (the vocabulary-parallel ops over torch.distributed)
against the single-process ops on the whole rows, on 2 and 4 gloo ranks on
127.0.0.1.

One spawn per world size runs every check in each rank (spawning is the
cost: a few seconds per process for `import torch`); each rank writes
{check: "ok" | "skip: why" | "fail: what"} to a JSON file and the tests
below assert per check, over every rank. The spawn is bounded in time (a
hang kills the ranks and fails every test of that world size), and gloo's own
timeout is short. Checks of an op group this build does not have
(smax._smax._distributed.groups, SMAX_DISTRIBUTED_GROUPS) are skipped,
naming the group.

Each rank draws the FULL tensors from one seed, takes its shard of the
classes (uneven, with an empty shard on 4 ranks, and more ranks than
classes), runs the distributed op and compares with the whole-row op:
values, gradients (float64 against torch's float64 autograd at
gradcheck-level tolerances where the op takes float64), replicated outputs
equal on every rank, every rank raising together on bad or mismatched
arguments, and the DTensor path against torch's loss_parallel().
"""
from __future__ import annotations

import datetime
import json
import math
import os
import socket
import tempfile
import time
import traceback
from typing import Any, Callable, Dict, List

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

import smax  # noqa: E402
import smax._smax as _ext  # noqa: E402

GROUPS = set(_ext._distributed.groups)
TIMEOUT_S = 100  # one world size, spawn included

# ---- what each rank runs ----------------------------------------------------------------------


class Skip(Exception):
    pass


def _need(group: str) -> None:
    if group not in GROUPS:
        raise Skip(f"this build has no vocabulary-parallel {group} ops "
                   f"(SMAX_DISTRIBUTED_GROUPS; built: {sorted(GROUPS) or 'none'})")


def _sizes(v: int, world: int, kind: str) -> List[int]:
    """Class counts per rank: 'uneven' (an empty shard on 4 ranks) or 'even'."""
    if kind == "even":
        return [v // world + (1 if k < v % world else 0) for k in range(world)]
    weights = [0 if (world >= 4 and k == 1) else k + 1 for k in range(world)]
    n = [v * w // sum(weights) for w in weights]
    n[-1] += v - sum(n)
    return n


def _slice(full: Any, sizes: List[int], rank: int, dim: int = -1) -> Any:
    off = sum(sizes[:rank])
    return full.narrow(dim, off, sizes[rank])


def _gen(seed: int) -> Any:
    return torch.Generator().manual_seed(seed)


def _close(got: Any, want: Any, rtol: float, atol: float, what: str) -> None:
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True,
                               msg=lambda m: f"{what}: {m}")


def _replicated(t: Any, what: str) -> None:
    """t (a per-row output) is bit-equal on every rank."""
    flat = t.detach().reshape(-1).contiguous().view(torch.uint8) if t.numel() else \
        torch.empty(0, dtype=torch.uint8)
    every = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(every, flat)
    for k, other in enumerate(every):
        assert torch.equal(other, every[0]), f"{what}: rank {k} differs from rank 0"


def _raises_on_every_rank(fn: Callable[[], Any], exc: type, match: str) -> str:
    try:
        fn()
    except exc as e:
        assert match in str(e), f"expected {match!r} in {e!r}"
        return str(e)
    raise AssertionError(f"rank {dist.get_rank()} did not raise {exc.__name__}")


def check_communicator(rank: int, world: int) -> None:
    import numpy as np
    import smax.distributed as sd
    comm = sd.TorchCommunicator()
    assert (comm.rank(), comm.size()) == (rank, world)
    send = np.arange(5, dtype=np.uint8) + 10 * rank
    recv = np.zeros(5 * world, dtype=np.uint8)
    comm.allgather(send, recv)
    assert recv.tolist() == [x + 10 * k for k in range(world) for x in range(5)]
    sizes = [3, 0, 5, 2][:world]
    lay = sd.shard_layout(sizes[rank])
    assert lay == sd.ShardLayout(sum(sizes[:rank]), sizes[rank], sum(sizes)), lay
    # a communicator's own exception reaches the caller (on every rank)
    class Broken(sd.TorchCommunicator):
        def allgather(self, send: Any, recv: Any) -> None:
            raise KeyError("transport down")
    _raises_on_every_rank(lambda: sd.shard_layout(4, Broken()), KeyError, "transport down")
    # one rank's bad argument: every rank raises
    _raises_on_every_rank(lambda: sd.shard_layout(-1 if rank == world - 1 else 2), ValueError,
                          "shard_layout")


def check_vocab_offset(rank: int, world: int) -> None:
    import smax.distributed as sd
    sizes = _sizes(13, world, "uneven")
    x = torch.randn(2, sizes[rank], generator=_gen(1))
    off = sum(sizes[:rank])
    _need("softmax")
    sd.softmax(x, vocab_offset=off, threads=1)
    wrong = off + (1 if rank == world - 1 else 0)
    _raises_on_every_rank(lambda: sd.softmax(x, vocab_offset=wrong, threads=1), ValueError,
                          f"rank {world - 1} passed {sum(sizes[:world - 1]) + 1}")


def check_softmax_family(rank: int, world: int) -> None:
    import smax.distributed as sd
    _need("softmax")
    for v, kind in ((37, "uneven"), (world - 1, "even"), (64, "even")):
        sizes = _sizes(v, world, kind)
        full = torch.randn(4, v, generator=_gen(v), dtype=torch.float64) * 3
        x = _slice(full, sizes, rank).clone().float().requires_grad_()
        xf = full.float()
        g = torch.randn(4, v, generator=_gen(v + 1), dtype=torch.float64)
        for name, ref in (("softmax", torch.softmax), ("log_softmax", torch.log_softmax)):
            y = getattr(sd, name)(x, -1, threads=1)
            _close(y, _slice(getattr(smax, name)(xf), sizes, rank), 4e-6, 4e-6,
                   f"{name} vs smax, V={v}")
            _close(y.double(), _slice(ref(xf.double(), -1), sizes, rank), 4e-6, 4e-6,
                   f"{name} vs torch, V={v}")
            (dx,) = torch.autograd.grad(y, x, _slice(g, sizes, rank).float())
            xd = xf.double().requires_grad_()
            (dref,) = torch.autograd.grad(ref(xd, -1), xd, g)
            _close(dx.double(), _slice(dref, sizes, rank), 1e-5, 1e-5, f"d{name}, V={v}")
        lse = sd.logsumexp(x, -1, threads=1)
        _close(lse.double(), torch.logsumexp(xf.double(), -1), 4e-6, 4e-6, "logsumexp")
        _replicated(lse, "logsumexp")
        (dx,) = torch.autograd.grad(lse, x, g[:, 0].float())
        _close(dx.double(), _slice(torch.softmax(xf.double(), -1) * g[:, :1], sizes, rank),
               1e-5, 1e-6, "dlogsumexp")


def check_softmax_float64(rank: int, world: int) -> None:
    import smax.distributed as sd
    _need("softmax")
    sizes = _sizes(29, world, "uneven")
    full = torch.randn(3, 29, generator=_gen(5), dtype=torch.float64)
    x = _slice(full, sizes, rank).clone().requires_grad_()
    g = torch.randn(3, 29, generator=_gen(6), dtype=torch.float64)
    y = sd.log_softmax(x, -1, threads=1)
    (dx,) = torch.autograd.grad(y, x, _slice(g, sizes, rank))
    xd = full.clone().requires_grad_()
    yref = torch.log_softmax(xd, -1)
    (dref,) = torch.autograd.grad(yref, xd, g)
    _close(y, _slice(yref, sizes, rank), 1e-12, 1e-12, "f64 log_softmax")
    _close(dx, _slice(dref, sizes, rank), 1e-10, 1e-12, "f64 dlog_softmax")


# The float options are float32 in smax (CrossEntropyOptions): values exact in
# float32, so the float64 references use the same numbers.
CE_VARIANTS = [
    dict(),
    dict(reduction="sum", ignore_index=-100, weight=True),
    dict(reduction="none", label_smoothing=0.125),
    dict(reduction="mean", label_smoothing=0.25, weight=True, lse_square_scale=2.0**-10),
    dict(reduction="mean", softcap=4.0, lse_square_scale=2.0**-13),
]


def _ce_ref(x: Any, t: Any, w: Any, opts: Dict[str, Any]) -> Any:
    import torch.nn.functional as F
    z = x
    if opts.get("softcap"):
        z = opts["softcap"] * torch.tanh(x / opts["softcap"])
    red = opts.get("reduction", "mean")
    loss = F.cross_entropy(z, t, weight=w, reduction="none",
                           label_smoothing=opts.get("label_smoothing", 0.0))
    c = opts.get("lse_square_scale", 0.0)
    keep = t != -100
    wt = (w[t.clamp(min=0)] if w is not None else torch.ones_like(loss)) * keep
    if c:
        loss = loss + c * torch.logsumexp(z, -1).pow(2) * wt
    if red == "none":
        return loss
    if red == "sum":
        return loss.sum()
    return loss.sum() / wt.sum()


def check_cross_entropy(rank: int, world: int) -> None:
    import smax.distributed as sd
    _need("cross_entropy")
    v = 41
    sizes = _sizes(v, world, "uneven")
    full = torch.randn(8, v, generator=_gen(11), dtype=torch.float64) * 2
    target = torch.randint(0, v, (8,), generator=_gen(12))
    target[3] = -100
    w_full = torch.rand(v, generator=_gen(13), dtype=torch.float64) + 0.5
    for i, opts in enumerate(CE_VARIANTS):
        for dtype in (torch.float32, torch.float64):
            o = dict(opts)
            w = _slice(w_full, sizes, rank).to(dtype) if o.pop("weight", False) else None
            wf = w_full if w is not None else None
            for fused in (True, False):
                x = _slice(full, sizes, rank).to(dtype).clone().requires_grad_()
                loss = sd.cross_entropy(x, target, w, group=None, threads=1, fused=fused, **o)
                xd = full.to(dtype).double().clone().requires_grad_()
                ref = _ce_ref(xd, target, wf, opts)
                tol = (1e-5, 2e-5) if dtype == torch.float32 else (1e-10, 1e-10)
                what = f"cross_entropy {opts} {dtype} fused={fused}"
                _close(loss.double(), ref, *tol, what)
                _replicated(loss, what)
                g = torch.randn(loss.shape, generator=_gen(20 + i), dtype=torch.float64)
                (dx,) = torch.autograd.grad(loss, x, g.to(dtype))
                (dref,) = torch.autograd.grad(ref, xd, g)
                gtol = (1e-5, 1e-6) if dtype == torch.float32 else (1e-9, 1e-11)
                _close(dx.double(), _slice(dref, sizes, rank), *gtol, "d" + what)
    # extras: z_loss, lse, accuracy (replicated)
    x = _slice(full, sizes, rank).float()
    loss, z, lse, acc = sd.cross_entropy(x, target, lse_square_scale=1e-2, return_z_loss=True,
                                         return_lse=True, return_accuracy=True, threads=1)
    full_res = smax.cross_entropy(full.float(), target, lse_square_scale=1e-2,
                                  return_z_loss=True, return_lse=True, return_accuracy=True)
    for got, want, name in zip((loss, z, lse, acc), full_res, ("loss", "z_loss", "lse", "acc")):
        _close(got, want, 1e-5, 2e-5, f"extra {name}")
        _replicated(got, f"extra {name}")


def check_cross_entropy_edge_cases(rank: int, world: int) -> None:
    import smax.distributed as sd
    _need("cross_entropy")
    v = 10
    sizes = _sizes(v, world, "uneven")
    full = torch.randn(5, v, generator=_gen(31))
    x = _slice(full, sizes, rank).clone().requires_grad_()
    # all targets ignored: NaN mean (PyTorch's), zero gradient
    ign = torch.full((5,), -100)
    loss = sd.cross_entropy(x, ign, threads=1)
    assert torch.isnan(loss), loss
    (dx,) = torch.autograd.grad(loss, x)
    assert torch.equal(dx, torch.zeros_like(dx))
    # NaN in one shard: that row's loss is NaN on every rank, the others finite
    holder = max(range(world), key=lambda k: sizes[k])
    bad = full.clone()
    bad[2, sum(sizes[:holder])] = float("nan")
    xb = _slice(bad, sizes, rank)
    t = torch.randint(0, v, (5,), generator=_gen(32))
    per_row = sd.cross_entropy(xb, t, reduction="none", threads=1)
    assert torch.isnan(per_row[2]) and torch.isfinite(per_row[[0, 1, 3, 4]]).all(), per_row
    _replicated(per_row, "NaN row")
    # mismatched row counts: every rank raises
    rows = 5 if rank != 0 else 4
    xr = torch.randn(rows, sizes[rank])
    _raises_on_every_rank(lambda: sd.cross_entropy(xr, torch.zeros(rows, dtype=torch.int64),
                                                   threads=1),
                          ValueError, "ranks disagree")
    # one rank's bad weight length: every rank raises
    wlen = sizes[rank] + (3 if rank == world - 1 else 0)
    _raises_on_every_rank(lambda: sd.cross_entropy(_slice(full, sizes, rank), t,
                                                   torch.ones(wlen), threads=1),
                          ValueError, "cross_entropy")
    # disagreeing options (label smoothing on one rank)
    _raises_on_every_rank(lambda: sd.cross_entropy(
        _slice(full, sizes, rank), t, label_smoothing=0.1 if rank == 0 else 0.0, threads=1),
        ValueError, "ranks disagree")


def check_dtensor_loss_parallel(rank: int, world: int) -> None:
    import smax.distributed as sd
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import loss_parallel
    _need("cross_entropy")
    _need("softmax")
    mesh = init_device_mesh("cpu", (world,))
    v = 4 * world + 3  # uneven (torch.chunk sizes)
    full = torch.randn(6, v, generator=_gen(41))
    target = torch.randint(0, v, (6,), generator=_gen(42))
    target[1] = -100
    a = distribute_tensor(full, mesh, [Shard(-1)]).requires_grad_()
    b = distribute_tensor(full, mesh, [Shard(-1)]).requires_grad_()
    with loss_parallel():  # (label smoothing fails inside loss_parallel: torch mixes DTensors)
        ref = torch.nn.functional.cross_entropy(a, target)
        ref.backward()
    loss = sd.cross_entropy(b, target, threads=1)
    assert isinstance(loss, DTensor)
    loss.backward()
    _close(loss.full_tensor(), ref.full_tensor(), 1e-5, 1e-5, "DTensor loss vs loss_parallel")
    assert isinstance(b.grad, DTensor) and b.grad.placements == a.grad.placements
    _close(b.grad.to_local(), a.grad.to_local(), 1e-5, 1e-6, "DTensor grad vs loss_parallel")
    # with options loss_parallel() cannot run: against torch on the whole rows
    e = distribute_tensor(full, mesh, [Shard(-1)]).requires_grad_()
    ls = sd.cross_entropy(e, target, label_smoothing=0.125, reduction="sum", threads=1)
    ls.backward()
    xf = full.clone().requires_grad_()
    rf = torch.nn.functional.cross_entropy(xf, target, label_smoothing=0.125, reduction="sum")
    rf.backward()
    _close(ls.full_tensor(), rf, 1e-5, 1e-5, "DTensor smoothed loss")
    _close(e.grad.full_tensor(), xf.grad, 1e-5, 1e-6, "DTensor smoothed grad")
    # log_softmax / softmax on the DTensor: Shard(-1) results, gradients back
    c = distribute_tensor(full, mesh, [Shard(-1)]).requires_grad_()
    y = sd.log_softmax(c, -1, threads=1)
    assert isinstance(y, DTensor) and y.placements == c.placements
    _close(y.full_tensor(), torch.log_softmax(full, -1), 4e-6, 4e-6, "DTensor log_softmax")
    y.to_local().sum().backward()
    xd = full.clone().requires_grad_()
    torch.log_softmax(xd, -1).sum().backward()
    _close(c.grad.full_tensor(), xd.grad, 1e-5, 1e-6, "DTensor dlog_softmax")
    p = sd.softmax(distribute_tensor(full, mesh, [Shard(-1)]), -1, threads=1)
    _close(p.full_tensor(), torch.softmax(full, -1), 4e-6, 1e-7, "DTensor softmax")


def check_linear_cross_entropy(rank: int, world: int) -> None:
    import smax.distributed as sd
    _need("linear_cross_entropy")
    v, d = 53, 16
    sizes = _sizes(v, world, "uneven")
    h_full = torch.randn(7, d, generator=_gen(51), dtype=torch.float64) * 0.5
    w_full = torch.randn(v, d, generator=_gen(52), dtype=torch.float64) * 0.5
    b_full = torch.randn(v, generator=_gen(53), dtype=torch.float64) * 0.5
    target = torch.randint(0, v, (7,), generator=_gen(54))
    target[0] = -100
    # float64 is the single-process op's path only: every rank refuses it
    _raises_on_every_rank(lambda: sd.linear_cross_entropy(
        h_full, _slice(w_full, sizes, rank, 0), target, threads=1), ValueError, "float64")
    for dtype in (torch.float32,):
        h = h_full.to(dtype).clone().requires_grad_()
        w = _slice(w_full, sizes, rank, 0).to(dtype).clone().requires_grad_()
        b = _slice(b_full, sizes, rank, 0).to(dtype).clone().requires_grad_()
        loss = sd.linear_cross_entropy(h, w, target, b, label_smoothing=0.1, threads=1)
        loss.backward()
        hr = h_full.clone().requires_grad_()
        wr = w_full.clone().requires_grad_()
        br = b_full.clone().requires_grad_()
        ref = torch.nn.functional.cross_entropy(hr @ wr.T + br, target, label_smoothing=0.1)
        ref.backward()
        tol = (1e-5, 1e-5) if dtype == torch.float32 else (1e-10, 1e-10)
        what = f"linear_cross_entropy {dtype}"
        _close(loss.double(), ref, *tol, what)
        _replicated(loss, what)
        _close(h.grad.double(), hr.grad, *tol, "dhidden " + what)
        _replicated(h.grad, "dhidden")
        _close(w.grad.double(), _slice(wr.grad, sizes, rank, 0), *tol, "dweight " + what)
        _close(b.grad.double(), _slice(br.grad, sizes, rank, 0), *tol, "dbias " + what)


def check_topk_and_sample(rank: int, world: int) -> None:
    import smax.distributed as sd
    _need("sampling")
    v = 45
    sizes = _sizes(v, world, "uneven")
    full = torch.randn(4, v, generator=_gen(61)) * 2
    x = _slice(full, sizes, rank).clone().requires_grad_()
    p, i = sd.softmax_topk(x, 5, threads=1)
    pr, ir = smax.softmax_topk(full, 5)
    assert torch.equal(i, ir), (i, ir)
    _close(p, pr, 4e-6, 1e-30, "softmax_topk probs")
    _replicated(p, "softmax_topk probs")
    pn, _ = sd.softmax_topk(x, 5, renormalize=True, threads=1)
    _close(pn, smax.softmax_topk(full, 5, renormalize=True)[0], 4e-6, 1e-30, "renormalised")
    for kw in (dict(), dict(top_k=5, temperature=0.7), dict(top_p=0.8), dict(temperature=0.0)):
        s = sd.sample(_slice(full, sizes, rank), seed=99, threads=1, **kw)
        sr = smax.sample(full, seed=99, **kw)
        assert torch.equal(s, sr), (kw, s, sr)
        _replicated(s, f"sample {kw}")


def check_topk_gradient(rank: int, world: int) -> None:
    import smax.distributed as sd
    _need("sampling")
    _need("softmax")  # the gradient of the full row's probabilities needs its softmax
    v = 45
    sizes = _sizes(v, world, "uneven")
    full = torch.randn(4, v, generator=_gen(61)) * 2
    for renormalize in (False, True):
        x = _slice(full, sizes, rank).clone().requires_grad_()
        p, i = sd.softmax_topk(x, 5, renormalize=renormalize, threads=1)
        g = torch.randn(p.shape, generator=_gen(62))
        (dx,) = torch.autograd.grad(p, x, g)
        xd = full.double().clone().requires_grad_()
        z = xd.gather(1, i)
        pr = torch.softmax(z, -1) if renormalize else torch.softmax(xd, -1).gather(1, i)
        (dref,) = torch.autograd.grad(pr, xd, g.double())
        _close(dx.double(), _slice(dref, sizes, rank), 1e-5, 1e-6,
               f"dsoftmax_topk renormalize={renormalize}")


CHECKS = {name[len("check_"):]: fn for name, fn in dict(globals()).items()
          if name.startswith("check_")}


def _rank_main(rank: int, world: int, port: int, out_dir: str) -> None:
    torch.set_num_threads(1)
    smax.set_max_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=30))
    results: Dict[str, str] = {}
    try:
        for name, fn in CHECKS.items():
            try:
                fn(rank, world)
                results[name] = "ok"
            except Skip as e:
                results[name] = f"skip: {e}"
            except Exception:  # noqa: BLE001 (the report names it)
                results[name] = "fail: " + traceback.format_exc(limit=6)
            dist.barrier()  # the next check starts together (a failed one may leave ranks apart)
    finally:
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump(results, f)
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_RUNS: Dict[int, Any] = {}


def _run_world(world: int) -> Any:
    """{rank: {check: result}} of one spawn of `world` ranks, or a string
    saying why the spawn failed (timeout, crash)."""
    if world in _RUNS:
        return _RUNS[world]
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory() as out:
        ctx = mp.spawn(_rank_main, args=(world, _free_port(), out), nprocs=world, join=False)
        deadline = time.monotonic() + TIMEOUT_S
        error = None
        try:
            while not ctx.join(timeout=1):
                if time.monotonic() > deadline:
                    error = f"{world} ranks did not finish within {TIMEOUT_S} s (a hang?)"
                    break
        except Exception as e:  # noqa: BLE001 (a rank crashed)
            error = f"a rank failed: {e}"
        if error is not None:
            for p in ctx.processes:
                if p.is_alive():
                    p.kill()
        res: Any = {}
        for r in range(world):
            path = os.path.join(out, f"rank{r}.json")
            if os.path.exists(path):
                with open(path) as f:
                    res[r] = json.load(f)
        if error is not None or len(res) != world:
            res = error or f"only ranks {sorted(res)} reported"
    _RUNS[world] = res
    return res


@pytest.mark.parametrize("check", sorted(CHECKS))
@pytest.mark.parametrize("world", [2, 4])
def test_distributed(world: int, check: str) -> None:
    res = _run_world(world)
    if isinstance(res, str):
        pytest.fail(res)
    outcomes = {r: res[r].get(check, "fail: not run") for r in sorted(res)}
    fails = {r: o for r, o in outcomes.items() if o.startswith("fail")}
    assert not fails, "\n".join(f"rank {r}: {o}" for r, o in fails.items())
    skips = {o for o in outcomes.values() if o.startswith("skip")}
    if skips:
        pytest.skip(skips.pop()[len("skip: "):])


# ---- in-process checks: a one-rank Communicator written in Python -----------------------------


def _one_rank_comm(calls: list) -> Any:
    import smax.distributed as sd
    import threading

    class OneRank(sd.Communicator):
        """The trivial group of one rank: allgather / alltoall copy send to recv."""

        def __init__(self) -> None:
            super().__init__()

        def rank(self) -> int:
            return 0

        def size(self) -> int:
            return 1

        def allgather(self, send: Any, recv: Any) -> None:
            calls.append(threading.get_ident())
            recv[:] = send

        def alltoall(self, send: Any, recv: Any) -> None:
            calls.append(threading.get_ident())
            recv[:] = send

    return OneRank()


def test_one_rank_is_bit_equal_to_the_single_process_op() -> None:
    import smax.distributed as sd
    if "softmax" not in GROUPS:
        pytest.skip("this build has no vocabulary-parallel softmax ops")
    calls: list = []
    comm = _one_rank_comm(calls)
    x = torch.randn(6, 1000, generator=_gen(71)) * 3
    assert torch.equal(sd.softmax(x, group=comm), smax.softmax(x))
    assert torch.equal(sd.log_softmax(x, group=comm), smax.log_softmax(x))
    assert torch.equal(sd.logsumexp(x, group=comm), smax.logsumexp(x))
    assert calls, "the Python communicator was never called"


def test_the_op_releases_the_gil_and_calls_back_on_the_calling_thread() -> None:
    """Between its collectives the op scans its shard in C++: a Python thread
    that waits for the first collective must get to run before the last one,
    which it can only do when the op released the GIL (a long switch interval
    keeps the interpreter from handing the GIL over inside the callbacks)."""
    import sys
    import threading
    import smax.distributed as sd
    if "softmax" not in GROUPS:
        pytest.skip("this build has no vocabulary-parallel softmax ops")
    calls: list = []
    first_done = threading.Event()
    ran_between: list = []

    class Mirror(sd.Communicator):
        """Two ranks in one: rank 1 is a copy of rank 0 (the same shard), so
        the op runs its multi-rank path on the row [x, x]."""

        def __init__(self) -> None:
            super().__init__()

        def rank(self) -> int:
            return 0

        def size(self) -> int:
            return 2

        def allgather(self, send: Any, recv: Any) -> None:
            calls.append(threading.get_ident())
            if first_done.is_set():
                ran_between.append(spun.is_set())
            recv[: send.size] = send
            recv[send.size:] = send
            first_done.set()

        def alltoall(self, send: Any, recv: Any) -> None:
            raise AssertionError("log_softmax has no alltoall")

    spun = threading.Event()

    def spin() -> None:  # blocked (GIL free) until the first collective, then needs the GIL
        if first_done.wait(timeout=60):
            spun.set()

    x = torch.randn(64, 1 << 16, generator=_gen(72))
    old = sys.getswitchinterval()
    sys.setswitchinterval(5.0)
    t = threading.Thread(target=spin)
    t.start()
    try:
        y = sd.log_softmax(x, group=Mirror(), threads=1)
    finally:
        first_done.set()
        t.join()
        sys.setswitchinterval(old)
    assert len(calls) >= 2, f"expected the handshake and the records' collectives, got {calls}"
    assert any(ran_between), "no Python thread ran while the op computed: the GIL was held"
    assert set(calls) == {threading.get_ident()}, "a collective ran on another thread"
    _close(y, smax.log_softmax(x) - math.log(2.0), 0, 1e-5, "log_softmax of [x, x]")
