#!/usr/bin/env python3
"""bench/threads_check.py: the default thread count is never slower than one.

For every op `smax info --ops` lists, plus attention forward, backward and
decoding and linear cross-entropy (forward and fused forward + backward,
through build/bench/smax_bench_linear_ce, N=512 D=256 V=8000), times
`smax run` (or `smax attention`) at --threads 1 and at the default
thread count (smax::max_threads(), the hardware's), interleaved A/B in
rounds, and prints median ms for each, the ratio default / 1 thread and a
verdict. One thread pool at a time (src/core/gemm.h) is what keeps attention
and linear cross-entropy from running 16-25x slower at the default count.

  python3 bench/threads_check.py [--smax build/smax] [--lce build/bench/smax_bench_linear_ce]
                                 [--rounds 3] [--min-time 0.1]
                                 [--ops softmax,attention] [--json out.json]
Exit status 1 when some op's default-thread median is slower than its
one-thread median by more than --tolerance (default 10%: the machines are
shared and noisy; rerun a flagged op before believing it).
"""
import argparse
import json
import os
import re
import subprocess
import sys

# Shapes: one batched case per op, big enough that threads can help (a few
# ms per call at one thread), small enough that the whole check takes a few
# minutes on 2 cores.
DEFAULT_SHAPE = "64x8000"
SHAPES = {
    "linear_cross_entropy": None,  # the CLI's default problem
    "soft_nms": None,
}
ATTENTION = {
    "attention": ["--shape", "1,8,512,512,64"],
    "attention_backward": ["--shape", "1,8,512,512,64", "--backward"],
    "attention_decode": ["--shape", "1,32,1,4096,128", "--kv-heads", "8"],
}


def list_ops(smax):
    out = subprocess.run([smax, "info", "--ops", "--format", "json"], capture_output=True,
                         text=True, check=True).stdout
    data = json.loads(out)
    if isinstance(data, dict):
        data = data.get("ops", [])
    return [d["name"] if isinstance(d, dict) else str(d) for d in data]


LINEAR_CE = {"linear_cross_entropy": "lce_fwd", "linear_cross_entropy_fused": "lce_fused"}


def time_linear_ce(lce, op, threads):
    mode = "fwd" if op == "linear_cross_entropy" else "fwdbwd"
    cmd = [lce, "--n", "512", "--d", "256", "--v", "8000", "--reps", "5", "--modes", mode]
    if threads:
        cmd += ["--threads", str(threads)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(rf"^\S+\s+{LINEAR_CE[op]}\s+([0-9.]+) s", r.stdout, re.M)
    if r.returncode != 0 or not m:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stdout[-300:]} {r.stderr.strip()}")
    return float(m.group(1)) * 1e3


def time_once(smax, op, threads, min_time, lce=None):
    if op in LINEAR_CE:
        return time_linear_ce(lce, op, threads)
    if op in ATTENTION:
        cmd = [smax, "attention"] + ATTENTION[op]
    else:
        cmd = [smax, "run", "--op", op]
        shape = SHAPES.get(op, DEFAULT_SHAPE)
        if shape:
            cmd += ["--shape", shape]
    cmd += ["--min-time", str(min_time), "--format", "json"]
    if threads:
        cmd += ["--threads", str(threads)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")
    return json.loads(r.stdout)["median_ms"]


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--smax", default="build/smax")
    ap.add_argument("--lce", default="build/bench/smax_bench_linear_ce")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--min-time", type=float, default=0.1)
    ap.add_argument("--tolerance", type=float, default=0.10)
    ap.add_argument("--ops", help="comma-separated subset")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()

    ops = list_ops(a.smax) + list(ATTENTION) + list(LINEAR_CE)
    if a.ops:
        wanted = a.ops.split(",")
        ops = [o for o in ops if o in wanted]
    cores = os.cpu_count()
    print(f"# smax threads check: --threads 1 vs the default ({cores} hardware threads), "
          f"{a.rounds} interleaved rounds, median ms per call")
    print(f"{'op':34s} {'1 thread':>10s} {'default':>10s} {'default/1':>10s}  verdict")
    rows, slower = [], []
    for op in ops:
        one, dflt = [], []
        try:
            for _ in range(a.rounds):
                one.append(time_once(a.smax, op, 1, a.min_time, a.lce))
                dflt.append(time_once(a.smax, op, 0, a.min_time, a.lce))
        except RuntimeError as e:
            print(f"{op:34s} error: {e}")
            slower.append(op)
            continue
        m1, md = median(one), median(dflt)
        ratio = md / m1 if m1 > 0 else float("nan")
        verdict = "ok" if ratio <= 1.0 + a.tolerance else "SLOWER"
        if verdict != "ok":
            slower.append(op)
        rows.append({"op": op, "one_thread_ms": m1, "default_ms": md, "ratio": ratio})
        print(f"{op:34s} {m1:10.3f} {md:10.3f} {ratio:10.2f}  {verdict}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cores": cores, "rows": rows, "slower": slower}, f, indent=1)
    print(f"# {len(rows) - len([r for r in rows if r['op'] in slower])} ok, "
          f"{len(slower)} slower or failing: {', '.join(slower) or 'none'}")
    return 1 if slower else 0


if __name__ == "__main__":
    sys.exit(main())
