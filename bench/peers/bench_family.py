#!/usr/bin/env python3
"""bench/peers/bench_family.py: smax's normalisers, losses and samplers
against the Python libraries users would otherwise call, on the same torch
tensors, in one process (docs/benchmarking.md, "Normalisers, losses,
sampling"). The goals of issues 4 and 5:

* sparsemax and entmax15 on 256x32000 and 4096x128 vs the `entmax` package
  (PyTorch CPU): >= 10x faster (forward, and forward + backward);
* cross_entropy forward + backward on 4096x128256 vs
  torch.nn.functional.cross_entropy: >= 3x faster;
* softmax_topk (k = 50, 64x128256) vs torch.softmax followed by torch.topk:
  >= 3x faster.

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
    args = ap.parse_args()

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
    smax_ce = ce(st.cross_entropy)
    run(f"cross_entropy fwd+bwd {n}x{v}", "torch.nn.functional.cross_entropy", torch_ce, smax_ce,
        lambda: (torch_ce().clone() - smax_ce().clone()).abs().max().item(), 3.0)
    del logits

    # ---- softmax_topk vs torch.softmax + torch.topk --------------------------------------
    n, v, k = (64, 128256, 50) if not args.quick else (8, 1000, 5)
    x = randn(n, v)

    def peer_topk():
        return torch.topk(torch.softmax(x, dim=-1), k, dim=-1)

    def smax_topk():
        return smax.softmax_topk(x, k, dim=-1)
    run(f"softmax_topk k={k} {n}x{v}", "torch.softmax + torch.topk", peer_topk, smax_topk,
        lambda: (peer_topk()[0] - smax_topk()[0]).abs().max().item(), 3.0)

    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
