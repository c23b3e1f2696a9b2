"""The integer softmaxes (smax.int_softmax, smax.shiftmax,
smax.qlinear_softmax) against the numpy re-implementations of the published
algorithms (quantized_reference.py), exactly; against ONNX Runtime's own
QLinearSoftmax and HuggingFace's IntSoftmax when those packages import."""
import importlib.util

import numpy as np
import pytest

import smax
from quantized_reference import (ibert_constants, ibert_int_softmax, ivit_shiftmax,
                                 ort_qlinear_softmax)

RNG = np.random.default_rng(1234)


@pytest.mark.parametrize("n", [1, 5, 64, 1000])
@pytest.mark.parametrize("s", [1 / 64, 0.1, 0.003])
def test_int_ops_match_numpy(n, s):
    x = RNG.integers(-3000, 3000, (6, n)).astype(np.int32)
    assert np.array_equal(smax.int_softmax(x, s), ibert_int_softmax(x, s))
    assert np.array_equal(smax.shiftmax(x, s), ivit_shiftmax(x, s))
    assert np.array_equal(smax.int_softmax(x, s, output_bit=16), ibert_int_softmax(x, s, 16))
    # Another axis: the transposed call.
    assert np.array_equal(smax.shiftmax(x.T, s, dim=0), ivit_shiftmax(x, s).T)


@pytest.mark.parametrize("dtype,zp", [(np.uint8, 0), (np.int8, -128), (np.int8, 5)])
@pytest.mark.parametrize("n", [1, 3, 64, 1000])
@pytest.mark.parametrize("bias_correction", [False, True])
def test_qlinear_matches_numpy(dtype, zp, n, bias_correction):
    info = np.iinfo(dtype)
    x = RNG.integers(info.min, info.max + 1, (7, n)).astype(dtype)
    got = smax.qlinear_softmax(x, 0.05, 0, 1 / 256, zp, bias_correction=bias_correction)
    assert got.dtype == dtype
    assert np.array_equal(got, ort_qlinear_softmax(x, 0.05, 1 / 256, zp, bias_correction))


def _ort_qlinear(x, xs, xzp, ys, yzp):
    import onnxruntime as ort
    from onnx import TensorProto, helper
    dt = TensorProto.UINT8 if x.dtype == np.uint8 else TensorProto.INT8
    node = helper.make_node("QLinearSoftmax", ["x", "xs", "xzp", "ys", "yzp"], ["y"],
                            domain="com.microsoft", axis=-1, opset=13)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", dt, list(x.shape))],
        [helper.make_tensor_value_info("y", dt, list(x.shape))],
        initializer=[helper.make_tensor("xs", TensorProto.FLOAT, [], [xs]),
                     helper.make_tensor("xzp", dt, [], [xzp]),
                     helper.make_tensor("ys", TensorProto.FLOAT, [], [ys]),
                     helper.make_tensor("yzp", dt, [], [yzp])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid("com.microsoft", 1)])
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


@pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None
                    or importlib.util.find_spec("onnx") is None,
                    reason="onnxruntime / onnx not installed")
@pytest.mark.parametrize("dtype,zp,ys", [(np.uint8, 0, 1 / 256), (np.int8, -128, 1 / 256),
                                         (np.int8, 5, 0.003), (np.uint8, 3, 0.01)])
@pytest.mark.parametrize("n", [1, 3, 64, 1000])
def test_qlinear_matches_onnxruntime(dtype, zp, ys, n):
    info = np.iinfo(dtype)
    x = RNG.integers(info.min, info.max + 1, (9, n)).astype(dtype)
    assert np.array_equal(smax.qlinear_softmax(x, 0.05, 0, ys, zp), _ort_qlinear(x, 0.05, 0, ys, zp))


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None
                    or importlib.util.find_spec("torch") is None,
                    reason="transformers / torch not installed")
@pytest.mark.parametrize("s", [2.0**-6, 2.0**-4, 2.0**-10])
def test_int_softmax_matches_huggingface(s):
    import torch
    from transformers.models.ibert.quant_modules import IntSoftmax
    _, _, c = ibert_constants(s)
    # float64, so HF's own products are exact; QuantAct(16) calibrated to
    # [0, c 2^30] (docs/quantized.md, "int_softmax").
    m = IntSoftmax(8, quant_mode=True).double().eval()
    m.act.x_min.fill_(0.0)
    m.act.x_max.fill_(float(c) * 2.0**30)
    x = RNG.integers(-2000, 2000, (16, 300)).astype(np.int32)
    out, sf = m(torch.tensor(x * s, dtype=torch.float64), torch.tensor(s, dtype=torch.float64))
    hf = torch.round(out / sf).to(torch.int64).numpy().reshape(x.shape)
    assert np.array_equal(smax.int_softmax(x, s), hf)


def test_errors():
    x = np.zeros(4, np.int32)
    with pytest.raises(Exception, match="scaling_factor must be finite"):
        smax.int_softmax(x, float("nan"))
    with pytest.raises(TypeError, match="expected int32"):
        smax.shiftmax(x.astype(np.float32), 0.1)
    with pytest.raises(Exception, match="y_zero_point"):
        smax.qlinear_softmax(np.zeros(4, np.uint8), 0.1, 0, 0.1, 300)
