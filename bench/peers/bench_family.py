#!/usr/bin/env python3
"""bench/peers/bench_family.py: smax's normalisers, losses and samplers
against the Python libraries users would otherwise call, on the same torch
tensors, in one process (docs/benchmarking.md, "Normalisers, losses,
sampling"). The goals of issues 4 and 5:

* sparsemax and entmax15 on 256x32000 and 4096x128 vs the `entmax` package
  (PyTorch CPU): >= 10x faster (forward, and forward + backward);
* cross_entropy forward + backward on 4096x128256 vs
  torch.nn.functional.cross_entropy: >= 3x faster (smax.torch.cross_entropy's
  default fused path, and with inplace_backward=True);
* softmax_topk (k = 50, 64x128256) vs torch.softmax followed by torch.topk:
  >= 3x faster;
* sample with top_p alone (p = 0.9, 64x128256) vs the usual torch nucleus
  sampler (softmax, sort, cumsum, mask, multinomial): reported, no goal.

Each case times the peer and smax in alternating rounds (median of --reps
per round, median over rounds), checks that both give the same result
(max abs difference printed) and writes a JSON list of records.

    python3 bench/peers/bench_family.py [--threads 1] [--reps 5] [--rounds 3]
                                        [--quick] [--json FILE]
"""
import argparse
import json
import statistics
import sys
import time


def timeit(fn, reps):
    fn()  # warm-up (allocations, page faults)
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="small shapes (a smoke test)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--only", default="",
                    help="comma-separated families to run (sparsemax, entmax15, cross_entropy, "
                         "softmax_topk, sample); default all")
    args = ap.parse_args()
    only = [w for w in args.only.split(",") if w]

    def want(family):
        return not only or family in only

    import torch
    import smax
    import smax.torch as st
    try:
        import entmax
    except ImportError:
        entmax = None

    torch.set_num_threads(args.threads)
    smax.set_max_threads(args.threads)
    g = torch.Generator().manual_seed(1)

    def randn(*shape, requires_grad=False):
        return torch.randn(*shape, generator=g).requires_grad_(requires_grad)

    records = []

    def run(case, peer_name, peer_fn, smax_fn, compare, goal):
        peer_t, smax_t = [], []
        for _ in range(args.rounds):
            peer_t.append(timeit(peer_fn, args.reps))
            smax_t.append(timeit(smax_fn, args.reps))
        p, s = statistics.median(peer_t), statistics.median(smax_t)
        diff = compare()
        rec = {"case": case, "peer": peer_name, "peer_ms": p * 1e3, "smax_ms": s * 1e3,
               "ratio": p / s, "goal": goal, "holds": p / s >= goal, "max_abs_diff": diff,
               "threads": args.threads}
        records.append(rec)
        print(f"{case:44s} {peer_name:28s} peer {p*1e3:9.3f} ms  smax {s*1e3:9.3f} ms  "
              f"ratio {p/s:6.2f}x (goal {goal}x: {'holds' if p/s >= goal else 'does not hold'})  "
              f"max|diff| {diff:.2e}", flush=True)

    shapes = [(256, 32000), (4096, 128)] if not args.quick else [(8, 1000), (64, 128)]
    # ---- sparsemax / entmax15 vs the entmax package -----------------------------------
    for name in ("sparsemax", "entmax15"):
        if not want(name):
            continue
        if entmax is None:
            records.append({"case": name, "peer": "entmax", "status": "missing"})
            print(f"{name}: entmax package missing (pip install entmax)")
            continue
        peer_f = getattr(entmax, name)
        smax_f = getattr(st, name)
        for shape in shapes:
            x = randn(*shape)
            run(f"{name} fwd {shape[0]}x{shape[1]}", f"entmax.{name}",
                lambda: peer_f(x, dim=-1), lambda: smax_f(x, dim=-1),
                lambda: (peer_f(x, dim=-1) - smax_f(x, dim=-1)).abs().max().item(), 10.0)
            xr = randn(*shape, requires_grad=True)
            gy = randn(*shape)

            def fb(f):
                def go():
                    xr.grad = None
                    f(xr, dim=-1).backward(gy)
                    return xr.grad.clone()
                return go
            run(f"{name} fwd+bwd {shape[0]}x{shape[1]}", f"entmax.{name}", fb(peer_f), fb(smax_f),
                lambda: (fb(peer_f)() - fb(smax_f)()).abs().max().item(), 10.0)

    # ---- cross_entropy fwd+bwd vs torch --------------------------------------------------
    if want("cross_entropy"):
        bench_cross_entropy(args, randn, g, run, torch, st)
    if want("softmax_topk"):
        bench_topk(args, randn, run, torch, smax)
    if want("sample"):
        bench_sample(args, randn, g, run, torch, smax)

    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)
    return 0


def bench_cross_entropy(args, randn, g, run, torch, st):
    n, v = (4096, 128256) if not args.quick else (64, 1000)
    logits = randn(n, v, requires_grad=True)
    target = torch.randint(0, v, (n,), generator=g)

    def ce(f):
        def go():
            logits.grad = None
            f(logits, target).backward()
            return logits.grad
        return go
    torch_ce = ce(torch.nn.functional.cross_entropy)
    smax_ce = ce(st.cross_entropy)  # default: fused (forward writes the unit gradient)
    run(f"cross_entropy fwd+bwd {n}x{v}", "torch.nn.functional.cross_entropy", torch_ce, smax_ce,
        lambda: (torch_ce().clone() - smax_ce().clone()).abs().max().item(), 3.0)
    smax_ce2 = ce(lambda x, t: st.cross_entropy(x, t, fused=False))
    run(f"cross_entropy fwd+bwd {n}x{v} (fused=False)", "torch.nn.functional.cross_entropy",
        torch_ce, smax_ce2, lambda: (torch_ce().clone() - smax_ce2().clone()).abs().max().item(),
        3.0)
    want_grad = torch_ce().clone()
    # inplace_backward: the gradient overwrites the logits, so every call runs on
    # the previous call's gradient (the cost does not depend on the values); the
    # check uses a fresh copy.
    xin = logits.detach().clone().requires_grad_(True)

    def smax_inplace():
        xin.grad = None
        st.cross_entropy(xin, target, inplace_backward=True).backward()
        return xin.grad

    def check_inplace():
        with torch.no_grad():
            xin.copy_(logits)
        return (want_grad - smax_inplace()).abs().max().item()
    run(f"cross_entropy fwd+bwd {n}x{v} (inplace_backward)", "torch.nn.functional.cross_entropy",
        torch_ce, smax_inplace, check_inplace, 3.0)
    del logits, xin, want_grad


def bench_topk(args, randn, run, torch, smax):
    # ---- softmax_topk vs torch.softmax + torch.topk --------------------------------------
    n, v, k = (64, 128256, 50) if not args.quick else (8, 1000, 5)
    x = randn(n, v)

    def peer_topk():
        return torch.topk(torch.softmax(x, dim=-1), k, dim=-1)

    def smax_topk():
        return smax.softmax_topk(x, k, dim=-1)
    run(f"softmax_topk k={k} {n}x{v}", "torch.softmax + torch.topk", peer_topk, smax_topk,
        lambda: (peer_topk()[0] - smax_topk()[0]).abs().max().item(), 3.0)



def bench_sample(args, randn, g, run, torch, smax):
    # ---- sample, top_p alone, vs a torch nucleus sampler -----------------------------------
    n, v, top_p = (64, 128256, 0.9) if not args.quick else (8, 1000, 0.9)
    x = randn(n, v)

    def peer_topp():
        p = torch.softmax(x, dim=-1)
        sp, si = torch.sort(p, dim=-1, descending=True)
        cs = torch.cumsum(sp, dim=-1)
        sp = sp.masked_fill(cs - sp >= top_p, 0.0)  # the shortest prefix reaching top_p
        return si.gather(-1, torch.multinomial(sp, 1, generator=g)).squeeze(-1)

    def smax_topp():
        return smax.sample(x, top_p=top_p, seed=7)

    def kept_diff():  # nucleus sizes: torch's prefix vs smax.sampling_filter's
        p = torch.softmax(x.double(), dim=-1)
        sp, _ = torch.sort(p, dim=-1, descending=True)
        peer_kept = ((torch.cumsum(sp, dim=-1) - sp) < top_p).sum(-1)
        smax_kept = torch.isfinite(smax.sampling_filter(x, top_p=top_p)).sum(-1)
        return (peer_kept - smax_kept).abs().max().item()
    run(f"sample top_p={top_p} {n}x{v}", "softmax+sort+cumsum+multinomial", peer_topp,
        smax_topp, kept_diff, 1.0)


if __name__ == "__main__":
    sys.exit(main())
