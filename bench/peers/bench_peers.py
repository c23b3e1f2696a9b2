#!/usr/bin/env python3
"""bench/peers/bench_peers.py: the Python peers of smax (docs/benchmarking.md).

Times PyTorch (torch.softmax / log_softmax / logsumexp) and ONNX Runtime (a
one-node Softmax / LogSoftmax / ReduceLogSumExp model built with the onnx
package) on the cases of bench/peers/smax_peers.cc, on the same inputs
(bench/data.h's formula, reproduced here bit for bit), and checks each result
against a numpy float64 reference with smax's error measures.

    bench_peers.py [--threads N] [--reps R] [--quick] [--cases ...] --json FILE

A library that cannot be imported gets status "missing" records (never
dropped); an op it does not offer gets "unsupported".
"""
import argparse
import json
import math
import statistics
import sys
import time

import numpy as np

DEFAULT_CASES = (
    "softmax:1x1024,softmax:1x4096,softmax:1x16384,softmax:1x65536,softmax:1x262144,"
    "softmax:1x1048576,softmax:1x4194304,softmax:1x16777216,softmax:1x33554432,"
    "softmax:1000x1000,softmax:256x32000,softmax:64x128256,softmax:4096x128,"
    "softmax:32x81x8732:dim1,"
    "log_softmax:1x16384,log_softmax:1000x1000,log_softmax:256x32000,log_softmax:64x128256,"
    "log_softmax:1x33554432,"
    "logsumexp:1x16384,logsumexp:1000x1000,logsumexp:256x32000,logsumexp:64x128256,"
    "logsumexp:1x33554432")
QUICK_CASES = "softmax:4x1000,log_softmax:3x333,logsumexp:5x100,softmax:4x7x5:dim1"


def parse_case(text):
    parts = text.split(":")
    dims = [int(d) for d in parts[1].split("x")]
    axis = int(parts[2][3:]) if len(parts) > 2 else len(dims) - 1
    return parts[0], dims, axis


def splitmix64(z):
    with np.errstate(over="ignore"):
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def logits(n, seed=1):
    """bench/data.h: uniform on [-8, 8), identical bits to the C++ harness."""
    out = np.empty(n, dtype=np.float32)
    chunk = 1 << 22
    base = np.uint64(seed) << np.uint64(32)
    for s in range(0, n, chunk):
        i = np.arange(s, min(n, s + chunk), dtype=np.uint64) + base
        h = splitmix64(i) >> np.uint64(40)
        out[s:s + len(i)] = (h.astype(np.float32) * np.float32(2.0 ** -23) - np.float32(1)) * np.float32(8)
    return out


def reference(op, x, axis):
    x = x.astype(np.float64)
    m = x.max(axis=axis, keepdims=True)
    s = np.exp(x - m).sum(axis=axis, keepdims=True)
    if op == "softmax":
        return np.exp(x - m) / s
    if op == "log_softmax":
        return x - m - np.log(s)
    return np.squeeze(m + np.log(s), axis=axis)


def max_error(op, y, ref):
    y = np.asarray(y, dtype=np.float64)
    if op == "softmax":
        keep = np.abs(ref) >= 1e-30
        err = np.abs(y[keep] - ref[keep]) / np.abs(ref[keep])
    else:
        err = np.abs(y - ref) / (1.0 + np.abs(ref))
    if np.isnan(y).any():
        return math.inf
    return float(err.max()) if err.size else 0.0


def calibrate(fn, min_s):
    """Calls per sample so that one sample takes about min_s."""
    t0 = time.perf_counter()
    fn()
    one = time.perf_counter() - t0
    return 1 if one >= min_s else int(min(1e6, math.ceil(min_s / max(one, 1e-9))))


def sample(fn, calls):
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls


def time_fn(fn, reps, min_s):
    calls = calibrate(fn, min_s)
    return [sample(fn, calls) for _ in range(reps)]


def time_interleaved(fns, reps, min_s):
    """Samples of every fn, taken in rounds (the order rotating per round) so
    that the libraries of one case share the machine's noisy moments."""
    calls = [calibrate(fn, min_s) for fn in fns]
    samples = [[] for _ in fns]
    for rep in range(reps):
        for j in range(len(fns)):
            k = (j + rep) % len(fns)
            samples[k].append(sample(fns[k], calls[k]))
    return samples


def smax_runner(threads):
    """smax's own Python module, writing into a preallocated output (as the
    ONNX Runtime runner's io binding does)."""
    import smax

    def make(op, x, axis):
        out_shape = list(x.shape)
        if op == "logsumexp":
            out_shape.pop(axis)
        y = np.empty(out_shape, dtype=np.float32)
        fn = {"softmax": smax.softmax, "log_softmax": smax.log_softmax,
              "logsumexp": smax.logsumexp}[op]
        return lambda: fn(x, axis, threads=threads, out=y)
    return make, "smax " + smax.__version__


def torch_runner(threads):
    import torch
    torch.set_num_threads(threads)

    def make(op, x, axis):
        t = torch.from_numpy(x)
        if op == "softmax":
            return lambda: torch.softmax(t, dim=axis)
        if op == "log_softmax":
            return lambda: torch.log_softmax(t, dim=axis)
        return lambda: torch.logsumexp(t, dim=axis)
    return make, "torch " + torch.__version__


def ort_runner(threads):
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    def make(op, x, axis):
        node_type = {"softmax": "Softmax", "log_softmax": "LogSoftmax",
                     "logsumexp": "ReduceLogSumExp"}[op]
        out_shape = list(x.shape)
        if op == "logsumexp":
            out_shape.pop(axis)
            node = helper.make_node(node_type, ["x"], ["y"], axes=[axis], keepdims=0)
            opset = 13
        else:
            node = helper.make_node(node_type, ["x"], ["y"], axis=axis)
            opset = 13
        graph = helper.make_graph(
            [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = min(model.ir_version, 8)
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(model.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        y = np.empty(out_shape, dtype=np.float32)
        io = sess.io_binding()
        io.bind_cpu_input("x", x)
        io.bind_output("y", "cpu", 0, np.float32, out_shape, y.ctypes.data)
        return lambda: (sess.run_with_iobinding(io), y)[1]
    return make, "onnxruntime " + ort.__version__


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--cases", default=None)
    ap.add_argument("--libs", default="torch,onnxruntime",
                    help="comma-separated: torch, onnxruntime, smax (its Python module)")
    ap.add_argument("--json", default="-")
    args = ap.parse_args()
    cases = [parse_case(c) for c in (args.cases or (QUICK_CASES if args.quick else DEFAULT_CASES)).split(",") if c]
    min_s = 1e-4 if args.quick else 2e-3

    libs = {}
    for name in args.libs.split(","):
        try:
            libs[name] = {"torch": torch_runner, "onnxruntime": ort_runner,
                          "smax": smax_runner}[name](args.threads)
        except Exception as e:  # ImportError and friends: reported, not dropped
            libs[name] = (None, "missing: %s" % e)

    records = []
    for op, dims, axis in cases:
        n = int(np.prod(dims))
        x = logits(n).reshape(dims)
        ref = reference(op, x, axis)
        # the memory floor in this process: read (sum) + read/write (copy)
        dst = np.empty_like(x)
        floor_fn = (lambda: x.sum()) if op == "logsumexp" else (lambda: (x.sum(), np.copyto(dst, x)))
        np_floor = statistics.median(time_fn(floor_fn, args.reps, min_s)) * 1e9 / n
        case_records, fns = [], []
        for name, (make, version) in libs.items():
            rec = {"op": op, "shape": "x".join(map(str, dims)), "axis": axis,
                   "axis_len": dims[axis], "elements": n, "lib": name,
                   "threads": args.threads, "status": "ok", "ns_per_elem": None,
                   "ns_min": None, "floor_ns": None, "numpy_floor_ns": np_floor,
                   "max_err": None, "samples": 0, "note": version}
            fn = None
            if make is None:
                rec["status"] = "missing"
            else:
                try:
                    fn = make(op, x, axis)
                    y = fn()
                    rec["max_err"] = max_error(op, np.asarray(y), ref)
                except Exception as e:
                    fn = None
                    rec["status"] = "unsupported" if "NOT_IMPLEMENTED" in str(e) else "error"
                    rec["note"] = "%s: %s" % (version, str(e).splitlines()[0][:200])
            case_records.append(rec)
            fns.append(fn)
        timed = [k for k, fn in enumerate(fns) if fn is not None]
        try:
            timings = time_interleaved([fns[k] for k in timed], args.reps, min_s)
        except Exception as e:  # a call that worked once failed later: every record says so
            for k in timed:
                case_records[k]["status"] = "error"
                case_records[k]["note"] = "timing: %s" % str(e).splitlines()[0][:200]
            timings = []
        for k, samples in zip(timed, timings):
            rec = case_records[k]
            rec["ns_per_elem"] = statistics.median(samples) * 1e9 / n
            rec["ns_min"] = min(samples) * 1e9 / n
            rec["samples"] = len(samples)
        for rec in case_records:
            print("  %-11s %-16s axis %d %-11s %-7s %s ns/elem err %s" % (
                op, rec["shape"], axis, rec["lib"], rec["status"],
                "%.3f" % rec["ns_per_elem"] if rec["ns_per_elem"] else "-",
                "%.2e" % rec["max_err"] if rec["max_err"] is not None else "-"), file=sys.stderr)
            records.append(rec)
    out = {"harness": "bench_peers.py", "threads": args.threads, "records": records}
    text = json.dumps(out, indent=1)
    if args.json == "-":
        print(text)
    else:
        with open(args.json, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
