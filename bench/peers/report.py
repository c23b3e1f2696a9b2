#!/usr/bin/env python3
"""bench/peers/report.py: merge smax_peers / bench_peers.py JSON files into
the peer table (markdown on stdout), peers.csv, peers.json, peers.png and the
issue-3 goal check (docs/benchmarking.md).

    report.py --out DIR run1.json run2.json ...

Records of the same (op, shape, axis, lib, threads) from several rounds are
reduced to their median. ratio = lib time / smax time on the same case and
thread count (> 1: smax is faster); floor = memory floor time / lib time
(the fraction of the machine's read + read/write bandwidth floor reached,
measured by smax_peers in the same process as smax).
"""
import argparse
import collections
import csv
import json
import os
import statistics
import sys

PEERS = ["onednn", "xnnpack", "torch", "onnxruntime", "naive"]
# (op, shape, axis, threads, required ratio, "peer" or a lib name, label)
GOALS = [
    ("softmax", "1x16384", 1, 1, 2.0, "onednn", "softmax 1x16384 in cache"),
    ("softmax", "1000x1000", 1, 1, 2.0, "onednn", "softmax 1000x1000"),
    ("softmax", "256x32000", 1, 1, 1.8, "onednn", "softmax 256x32000"),
    ("softmax", "64x128256", 1, 1, 1.8, "onednn", "softmax 64x128256"),
    ("softmax", "1x33554432", 1, 1, 1.4, "onednn", "softmax 1x33554432"),
    ("log_softmax", "1x16384", 1, 1, 2.0, "peer", "log_softmax 1x16384"),
    ("log_softmax", "1000x1000", 1, 1, 2.0, "peer", "log_softmax 1000x1000"),
    ("log_softmax", "256x32000", 1, 1, 1.8, "peer", "log_softmax 256x32000"),
    ("log_softmax", "64x128256", 1, 1, 1.8, "peer", "log_softmax 64x128256"),
    ("log_softmax", "1x33554432", 1, 1, 1.4, "peer", "log_softmax 1x33554432"),
    ("logsumexp", "1x16384", 1, 1, 2.0, "peer", "logsumexp 1x16384"),
    ("logsumexp", "1000x1000", 1, 1, 2.0, "peer", "logsumexp 1000x1000"),
    ("logsumexp", "256x32000", 1, 1, 1.8, "peer", "logsumexp 256x32000"),
    ("logsumexp", "64x128256", 1, 1, 1.8, "peer", "logsumexp 64x128256"),
    ("logsumexp", "1x33554432", 1, 1, 1.4, "peer", "logsumexp 1x33554432"),
    ("softmax", "32x81x8732", 1, 1, 2.0, "torch", "column softmax [32,81,8732] dim 1"),
]


def load(paths):
    groups = collections.defaultdict(list)
    meta = {}
    for p in paths:
        with open(p) as f:
            data = json.load(f)
        for r in data["records"]:
            key = (r["op"], r["shape"], r["axis"], r["lib"], r["threads"])
            groups[key].append(r)
            meta[(r["op"], r["shape"], r["axis"])] = r
    merged = {}
    for key, rs in groups.items():
        ok = [r for r in rs if r["status"] == "ok" and r["ns_per_elem"] is not None]
        base = dict(rs[0])
        if ok:
            base["ns_per_elem"] = statistics.median(r["ns_per_elem"] for r in ok)
            base["ns_min"] = min(r["ns_min"] for r in ok)
            base["max_err"] = max(r["max_err"] for r in ok)
            base["status"] = "ok"
            base["rounds"] = len(ok)
        floors = [r["floor_ns"] for r in rs if r.get("floor_ns")]
        base["floor_ns"] = statistics.median(floors) if floors else None
        merged[key] = base
    return merged


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    merged = load(args.files)
    os.makedirs(args.out, exist_ok=True)

    # the floor of a case comes from smax_peers (same process as smax)
    floor_of = {}
    for (op, shape, axis, lib, thr), r in merged.items():
        if r.get("floor_ns") and lib == "smax":
            floor_of[(op, shape, axis, thr)] = r["floor_ns"]
    rows = []
    for (op, shape, axis, lib, thr), r in sorted(merged.items(), key=lambda kv: (
            kv[0][4], kv[0][0], kv[1]["elements"], kv[0][1], kv[0][2],
            (["smax"] + PEERS).index(kv[0][3]) if kv[0][3] in ["smax"] + PEERS else 99)):
        smax = merged.get((op, shape, axis, "smax", thr))
        t = r["ns_per_elem"] if r["status"] == "ok" else None
        ts = smax["ns_per_elem"] if smax and smax["status"] == "ok" else None
        floor = floor_of.get((op, shape, axis, thr))
        rows.append({
            "op": op, "shape": shape, "axis": axis, "lib": lib, "threads": thr,
            "status": r["status"], "ns_per_elem": t,
            "ratio_vs_smax": (t / ts) if t and ts else None,
            "ns_min": r.get("ns_min") if t else None,
            "ratio_of_mins": (r["ns_min"] / smax["ns_min"]) if t and ts else None,
            "floor_fraction": (floor / t) if t and floor else None,
            "floor_ns": floor, "max_err": r.get("max_err") if r["status"] == "ok" else None,
            "rounds": r.get("rounds", 0), "elements": r["elements"], "axis_len": r["axis_len"],
            "note": r.get("note", "")})

    with open(os.path.join(args.out, "peers.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    with open(os.path.join(args.out, "peers.json"), "w") as f:
        json.dump(rows, f, indent=1)

    def fmt(v, spec):
        return format(v, spec) if v is not None else "-"

    # The table: one line per case, ns/element and (ratio) per library.
    libs = ["smax"] + [p for p in PEERS if any(r["lib"] == p for r in rows)]
    print("| threads | op | shape | floor ns/el | " + " | ".join(libs) + " | smax floor frac | smax max err |")
    print("|---" * (len(libs) + 6) + "|")
    cases = []
    for r in rows:
        k = (r["threads"], r["op"], r["shape"], r["axis"])
        if k not in cases:
            cases.append(k)
    by = {(r["threads"], r["op"], r["shape"], r["axis"], r["lib"]): r for r in rows}
    for k in cases:
        cells = []
        for lib in libs:
            r = by.get(k + (lib,))
            if r is None:
                cells.append("n/a")
            elif r["status"] != "ok":
                cells.append(r["status"])
            elif lib == "smax":
                cells.append("**%.3f**" % r["ns_per_elem"])
            else:
                cells.append("%.3f (%.2fx)" % (r["ns_per_elem"], r["ratio_vs_smax"] or 0))
        s = by.get(k + ("smax",))
        shape = k[2] + (" dim%d" % k[3] if k[3] != len(k[2].split("x")) - 1 else "")
        print("| %d | %s | %s | %s | %s | %s | %s |" % (
            k[0], k[1], shape, fmt(s and s["floor_ns"], ".3f"), " | ".join(cells),
            fmt(s and s["floor_fraction"], ".2f"), fmt(s and s["max_err"], ".1e")))

    # Goals.
    print("\nGoals (issue 3; ratio = peer time / smax time, 1 thread):")
    goal_rows = []
    for op, shape, axis, thr, need, against, label in GOALS:
        s = by.get((thr, op, shape, axis, "smax"))
        if against == "peer":
            cands = [by.get((thr, op, shape, axis, p)) for p in PEERS if p != "naive"]
            cands = [c for c in cands if c and c["status"] == "ok"]
            peer = min(cands, key=lambda c: c["ns_per_elem"]) if cands else None
        else:
            peer = by.get((thr, op, shape, axis, against))
            peer = peer if peer and peer["status"] == "ok" else None
        ok = peer and s and s["status"] == "ok"
        ratio = peer["ns_per_elem"] / s["ns_per_elem"] if ok else None
        rmin = peer["ns_min"] / s["ns_min"] if ok else None
        held = ratio is not None and ratio >= need
        goal_rows.append((label, peer["lib"] if peer else against, ratio, need, held, rmin))
    s1 = by.get((1, "softmax", "1x33554432", 1, "smax"))
    s2 = by.get((2, "softmax", "1x33554432", 1, "smax"))
    if s1 and s2 and s1["status"] == "ok" and s2["status"] == "ok":
        r = s1["ns_per_elem"] / s2["ns_per_elem"]
        goal_rows.append(("softmax 1x33554432, 2 threads vs smax 1 thread", "smax 1T", r, 1.7,
                          r >= 1.7, s1["ns_min"] / s2["ns_min"]))
    print("  (ratio of medians over rounds; in brackets the ratio of the fastest samples)")
    for label, peer, ratio, need, held, rmin in goal_rows:
        print("  %-48s vs %-12s %6s [%s] (need %.1fx)  %s" % (
            label, peer, fmt(ratio, ".2f") + "x" if ratio else "-", fmt(rmin, ".2f"), need,
            "HOLDS" if held else "does not hold" if ratio else "not measured"))
    with open(os.path.join(args.out, "goals.json"), "w") as f:
        json.dump([dict(zip(["goal", "against", "ratio", "need", "holds", "ratio_of_mins"], g))
                   for g in goal_rows], f, indent=1)

    # Plot: time per element vs row length, softmax single rows, per library.
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot", file=sys.stderr)
        return
    threads = sorted({r["threads"] for r in rows})
    fig, axes = plt.subplots(1, len(threads), figsize=(7 * len(threads), 5), squeeze=False)
    for ax, thr in zip(axes[0], threads):
        for lib in libs + ["floor"]:
            pts = []
            for r in rows:
                if r["threads"] != thr or r["op"] != "softmax" or not r["shape"].startswith("1x"):
                    continue
                if lib == "floor":
                    if r["lib"] == "smax" and r["floor_ns"]:
                        pts.append((r["axis_len"], r["floor_ns"]))
                elif r["lib"] == lib and r["ns_per_elem"]:
                    pts.append((r["axis_len"], r["ns_per_elem"]))
            if pts:
                pts.sort()
                style = dict(lw=2.5) if lib == "smax" else dict(ls="--", color="gray") if lib == "floor" else {}
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=lib, **style)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("row length (elements)")
        ax.set_ylabel("ns per element (lower is better)")
        ax.set_title("softmax, one row, %d thread%s" % (thr, "s" if thr > 1 else ""))
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_lines():
            ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "peers.png"), dpi=110)
    print("\nwrote %s/peers.{csv,json,png}, goals.json" % args.out, file=sys.stderr)


if __name__ == "__main__":
    main()
