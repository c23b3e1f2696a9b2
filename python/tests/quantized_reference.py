"""Pure-numpy re-implementations of the published integer softmaxes, written
from the reference code (docs/quantized.md) for the tests to compare smax
with bit for bit: int64 integer arithmetic, with float32 only where the
reference itself forms a constant in float32.

* ibert_int_softmax: HuggingFace transformers' IntSoftmax (I-BERT, Kim et
  al. 2021) with its QuantAct(16) calibrated to the largest exponential.
* ivit_shiftmax: I-ViT's IntSoftmax (Shiftmax, Li & Gu 2023), n = 15.
* ort_qlinear_softmax: ONNX Runtime's QlinearSoftmaxCPU (float table, float
  sequential sum, nearbyintf, saturation) plus smax's bias correction.
All reduce the last axis."""
import numpy as np

F32 = np.float32


def ibert_constants(s):
    s = F32(s)
    coef0 = 0.35815147
    x0 = int(np.floor(F32(-0.6931) / s))
    b = int(np.floor(F32(0.96963238 / coef0) / s))
    c = int(np.floor(F32(1.0 / coef0) / (s * s)))
    return x0, b, c


def ibert_int_softmax(x, scaling_factor, output_bit=8):
    x = np.asarray(x, dtype=np.int64)
    x0, b, c = ibert_constants(scaling_factor)
    v = np.maximum(x - x.max(axis=-1, keepdims=True), 30 * x0)
    q = v // x0                                   # floor(x / x0), >= 0
    r = v - x0 * q
    z = np.maximum((r + b) * r + c, 0)            # int_polynomial
    # QuantAct(16) against the largest exponential c 2^30:
    # round(z 2^(30-q) 32767 / (c 2^30)) = round(z 32767 / (c 2^q)), ties to even.
    num = [int(t) * 32767 for t in z.ravel()]
    den = [c << int(t) for t in q.ravel()]
    e = []
    for n_, d_ in zip(num, den):
        qq, rr = divmod(n_, d_)
        if 2 * rr > d_ or (2 * rr == d_ and qq % 2 == 1):
            qq += 1
        e.append(min(qq, 32767))
    e = np.array(e, dtype=np.int64).reshape(z.shape)
    factor = (1 << 32) // e.sum(axis=-1, keepdims=True)
    return (e * factor) >> (32 - output_bit)


def ivit_shiftmax(x, scaling_factor, output_bit=8):
    n = 15
    x = np.asarray(x, dtype=np.int64)
    x0 = int(np.floor(F32(-1.0) / F32(scaling_factor)))
    v = x - x.max(axis=-1, keepdims=True)
    v = v + v // 2 - v // 16                      # x + floor(x/2) - floor(x/2^4)
    v = np.maximum(v, n * x0)
    q = v // x0
    r = v - x0 * q
    # floor((r/2 - x0) 2^(n-q)) = floor((r - 2 x0) 2^(n-q) / 2)
    e = np.maximum(((r - 2 * x0) << (n - q)) // 2, 0)
    s = np.minimum(e.sum(axis=-1, keepdims=True), 2**31 - 1)
    factor = (2**31 - 1) // s
    return (e * factor) // 2 ** (31 - output_bit + 1)


def ort_table(x_scale, n):
    bit_shift = np.log(np.float64(F32(np.finfo(np.float32).max) / F32(n)))
    bit_shift = max(0.0, bit_shift - 5) / np.float64(F32(x_scale))
    k = np.arange(256, dtype=np.float64)
    return np.exp((k - 255 + bit_shift) * np.float64(F32(x_scale))).astype(np.float32)


def ort_qlinear_softmax(x, x_scale, y_scale, y_zero_point, bias_correction=False):
    x = np.asarray(x)
    signed = x.dtype == np.int8
    lo, hi = (-128, 127) if signed else (0, 255)
    n = x.shape[-1]
    table = ort_table(x_scale, n)
    yq = F32(np.floor(F32(1.0) / F32(y_scale)))
    rows = x.reshape(-1, n).astype(np.int64)
    out = np.empty(rows.shape, dtype=np.int64)
    with np.errstate(over="ignore", invalid="ignore"):
        for i, row in enumerate(rows):
            vt = table[row + 255 - row.max()]
            s = F32(0)
            for v in vt:                              # ORT's sequential float sum
                s = F32(s + v)
            t = (vt * yq) / s
            delta = F32(0)
            if bias_correction:
                deficit = np.float64(yq) - np.rint(t).astype(np.float64).sum()
                if np.isfinite(deficit):
                    delta = F32(deficit / n)
            r = np.rint(t + delta)
            fits = r < F32(2**31)
            v = np.where(fits, r, 0).astype(np.int64) + int(y_zero_point)
            out[i] = np.where(fits, np.clip(v, lo, hi), hi)
    return out.reshape(x.shape).astype(x.dtype)
