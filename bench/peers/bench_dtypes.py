#!/usr/bin/env python3
"""bench/peers/bench_dtypes.py: smax's storage dtypes against smax f32 and
the peers users would call in that dtype, on the same torch tensors, in one
process (docs/benchmarking.md, "Dtypes"). The goals of the dtype issue, one
thread:

* bf16 and f16 softmax on 256x32000 and 64x128256: >= 1.7x faster than smax
  f32 on the same shape (the bytes moved halve), and >= 2x torch.softmax in
  that dtype;
* bf16 cross-entropy forward + backward on 4096x128256: >= 3x
  torch.nn.functional.cross_entropy in bf16;
* f64 softmax on 256x32000: >= 2x torch.softmax in float64 and >= 3x
  scipy.special.softmax (when scipy imports).

Also reported, without a goal: f64 sparsemax and entmax15 (float64
arithmetic) against the entmax package in float64.

Each case times the peer and smax in alternating rounds (median of --reps
per round, median over rounds), prints the max difference between the two
results and the case's memory floor: the bytes it must move (one read of the
input, one write of the output, in their dtypes) over the copy bandwidth of
this machine measured in the same run (torch's copy of a 256 MiB buffer:
one read and one write stream).

    python3 bench/peers/bench_dtypes.py [--threads 1] [--reps 5] [--rounds 3]
                                        [--quick] [--json FILE]
"""
import argparse
import json
import statistics
import sys

from bench_family import timeit  # the same timing (median of reps after a warm-up)


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

    torch.set_num_threads(args.threads)
    smax.set_max_threads(args.threads)
    g = torch.Generator().manual_seed(1)
    records = []

    # Copy bandwidth (read + write streams), the floor's denominator.
    buf = torch.empty((64 << 20) if not args.quick else (1 << 20), dtype=torch.float32)
    dst = torch.empty_like(buf)
    copy_s = min(timeit(lambda: dst.copy_(buf), args.reps) for _ in range(args.rounds))
    bandwidth = 2 * buf.numel() * 4 / copy_s  # bytes per second
    del buf, dst
    print(f"copy bandwidth {bandwidth / 1e9:.2f} GB/s (read + write)", flush=True)

    def run(case, peer_name, peer_fn, smax_fn, compare, goal, floor_bytes):
        peer_t, smax_t = [], []
        for _ in range(args.rounds):
            peer_t.append(timeit(peer_fn, args.reps))
            smax_t.append(timeit(smax_fn, args.reps))
        p, s = statistics.median(peer_t), statistics.median(smax_t)
        floor = floor_bytes / bandwidth
        diff = compare()
        holds = None if goal is None else p / s >= goal
        rec = {"case": case, "peer": peer_name, "peer_ms": p * 1e3, "smax_ms": s * 1e3,
               "ratio": p / s, "goal": goal, "holds": holds, "floor_ms": floor * 1e3,
               "smax_over_floor": s / floor, "max_abs_diff": diff, "threads": args.threads}
        records.append(rec)
        verdict = "" if goal is None else f" (goal {goal}x: {'holds' if holds else 'does not hold'})"
        print(f"{case:40s} {peer_name:32s} peer {p*1e3:9.3f} ms  smax {s*1e3:9.3f} ms  "
              f"ratio {p/s:6.2f}x{verdict}  floor {floor*1e3:8.3f} ms ({s/floor:4.2f}x)  "
              f"max|diff| {diff:.2e}", flush=True)

    def maxdiff(a, b):
        return (a.double() - b.double()).abs().max().item()

    shapes = [(256, 32000), (64, 128256)] if not args.quick else [(8, 1000)]
    for dtype, name in ((torch.bfloat16, "bf16"), (torch.float16, "f16")):
        for n, v in shapes:
            x32 = torch.randn(n, v, generator=g)
            x = x32.to(dtype)
            x32 = x.float()  # the same values
            nbytes = n * v * x.element_size()
            # Kernel against kernel: both write preallocated outputs (an f32
            # output of 256x32000 is past glibc's 32 MB mmap threshold, so an
            # allocating call pays ~8000 page faults that the half-size
            # narrow output, reused from the heap, does not).
            y32, y = torch.empty_like(x32), torch.empty_like(x)
            run(f"softmax {name} {n}x{v}", "smax softmax f32 (both out=)",
                lambda: smax.softmax(x32, out=y32), lambda: smax.softmax(x, out=y),
                lambda: maxdiff(smax.softmax(x32).to(dtype), smax.softmax(x)), 1.7, 2 * nbytes)
            run(f"softmax {name} {n}x{v}", f"torch.softmax {name}",
                lambda: torch.softmax(x, -1), lambda: smax.softmax(x),
                lambda: maxdiff(torch.softmax(x, -1), smax.softmax(x)), 2.0, 2 * nbytes)
            run(f"log_softmax {name} {n}x{v}", f"torch.log_softmax {name}",
                lambda: torch.log_softmax(x, -1), lambda: smax.log_softmax(x),
                lambda: maxdiff(torch.log_softmax(x, -1), smax.log_softmax(x)), None, 2 * nbytes)
            del x, x32, y, y32

    # bf16 cross-entropy forward + backward.
    n, v = (4096, 128256) if not args.quick else (64, 1000)
    logits = torch.randn(n, v, generator=g).to(torch.bfloat16).requires_grad_(True)
    target = torch.randint(0, v, (n,), generator=g)

    def ce(f):
        def go():
            logits.grad = None
            f(logits, target).backward()
            return logits.grad
        return go
    torch_ce, smax_ce = ce(torch.nn.functional.cross_entropy), ce(st.cross_entropy)
    run(f"cross_entropy fwd+bwd bf16 {n}x{v}", "F.cross_entropy bf16", torch_ce, smax_ce,
        lambda: maxdiff(torch_ce().clone(), smax_ce().clone()), 3.0, 2 * n * v * 2)
    del logits

    # float64 softmax.
    n, v = (256, 32000) if not args.quick else (8, 1000)
    x = torch.randn(n, v, generator=g, dtype=torch.float64)
    run(f"softmax f64 {n}x{v}", "torch.softmax f64", lambda: torch.softmax(x, -1),
        lambda: smax.softmax(x), lambda: maxdiff(torch.softmax(x, -1), smax.softmax(x)), 2.0,
        2 * n * v * 8)
    # The same kernels without the allocation: a 64 MB output is mmapped and
    # faulted in on every allocating call (both pay it, ~3 ns per element).
    y64 = torch.empty_like(x)
    run(f"softmax f64 {n}x{v}", "aten._softmax.out f64 (both out=)",
        lambda: torch.ops.aten._softmax.out(x, -1, False, out=y64),
        lambda: smax.softmax(x, out=y64), lambda: maxdiff(torch.softmax(x, -1), smax.softmax(x)),
        2.0, 2 * n * v * 8)
    del y64
    try:
        import scipy.special
        xn = x.numpy()
        run(f"softmax f64 {n}x{v}", "scipy.special.softmax", lambda: scipy.special.softmax(xn, axis=-1),
            lambda: smax.softmax(xn),
            lambda: float(abs(scipy.special.softmax(xn, axis=-1) - smax.softmax(xn)).max()), 3.0,
            2 * n * v * 8)
    except ImportError:
        records.append({"case": f"softmax f64 {n}x{v}", "peer": "scipy.special.softmax",
                        "status": "missing"})
        print("scipy missing (pip install scipy)")

    # float64 sparsemax / entmax15 (float64 arithmetic since the sparse
    # family's float64 path) vs the entmax package in float64; no goal stated.
    try:
        import entmax
    except ImportError:
        entmax = None
        print("entmax missing (pip install entmax)")
    if entmax is not None:
        for n, v in ([(256, 32000), (4096, 128)] if not args.quick else [(8, 1000)]):
            x = torch.randn(n, v, generator=g, dtype=torch.float64)
            for name in ("sparsemax", "entmax15"):
                peer_f, ours = getattr(entmax, name), getattr(smax, name)
                run(f"{name} f64 {n}x{v}", f"entmax.{name} f64",
                    lambda: peer_f(x, -1), lambda: ours(x),
                    lambda: maxdiff(peer_f(x, -1), ours(x)), None, 2 * n * v * 8)
            del x

    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
