"""smax.qlinear_softmax against ONNX Runtime's com.microsoft QLinearSoftmax on
one thread (ORT session intra_op_num_threads=1, smax threads=1), u8 and i8,
1000 x 1000 by default; both timed in this one run (best of --repeat), and
the outputs compared bit for bit.

    python3 bench/peers/bench_quantized.py [--rows 1000] [--cols 1000] [--repeat 50]
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python", "tests"))


def best_time(fn, repeat):
    fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    import smax
    import onnxruntime as ort
    from onnx import TensorProto, helper

    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--cols", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=50)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    for dtype, zp in [(np.uint8, 0), (np.int8, -128)]:
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max + 1, (a.rows, a.cols)).astype(dtype)
        dt = TensorProto.UINT8 if dtype == np.uint8 else TensorProto.INT8
        node = helper.make_node("QLinearSoftmax", ["x", "xs", "xzp", "ys", "yzp"], ["y"],
                                domain="com.microsoft", axis=-1, opset=13)
        graph = helper.make_graph(
            [node], "g", [helper.make_tensor_value_info("x", dt, list(x.shape))],
            [helper.make_tensor_value_info("y", dt, list(x.shape))],
            initializer=[helper.make_tensor("xs", TensorProto.FLOAT, [], [0.05]),
                         helper.make_tensor("xzp", dt, [], [0]),
                         helper.make_tensor("ys", TensorProto.FLOAT, [], [1 / 256]),
                         helper.make_tensor("yzp", dt, [], [zp])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                        helper.make_opsetid("com.microsoft", 1)])
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        out = np.empty_like(x)
        t_ort = best_time(lambda: sess.run(None, {"x": x}), a.repeat)
        t_smax = best_time(lambda: smax.qlinear_softmax(x, 0.05, 0, 1 / 256, zp, threads=1, out=out),
                           a.repeat)
        same = np.array_equal(sess.run(None, {"x": x})[0], out)
        print(f"{np.dtype(dtype).name} {a.rows}x{a.cols}: ORT {t_ort * 1e3:.3f} ms, smax "
              f"{t_smax * 1e3:.3f} ms, speed-up {t_ort / t_smax:.2f}x, identical={same}")


if __name__ == "__main__":
    main()
