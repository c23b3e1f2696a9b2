"""The integer softmaxes (smax/quantized.h; docs/quantized.md) on numpy
integer arrays: ``int_softmax`` (I-BERT) and ``shiftmax`` (I-ViT) take and
return int32; ``qlinear_softmax`` (ONNX Runtime's QLinearSoftmax) takes uint8
or int8 and returns the same dtype. Forward only (integer ops have no
gradient). ``dim`` is the reduced axis; ``threads``: 0 = default (the bits do
not depend on it); ``out``: optional preallocated output (may be ``x``)."""
from __future__ import annotations

from typing import Any

import numpy as np

from . import _smax

__all__ = ["int_softmax", "shiftmax", "qlinear_softmax"]


def _out(x: Any, dtype: Any, out: Any) -> Any:
    return np.empty(np.shape(x), dtype=dtype) if out is None else out


def int_softmax(x: Any, scaling_factor: float, output_bit: int = 8, dim: int = -1, *,
                threads: int = 0, out: Any = None) -> Any:
    """I-BERT integer-only softmax (Kim et al. 2021) as HuggingFace's
    IntSoftmax computes it: int32 ``x`` (real value ``x * scaling_factor``)
    to int32 ``y`` (real value ``y / 2**output_bit``)."""
    y = _out(x, np.int32, out)
    _smax.int_softmax(x, y, scaling_factor, output_bit, dim, threads)
    return y


def shiftmax(x: Any, scaling_factor: float, output_bit: int = 8, dim: int = -1, *,
             threads: int = 0, out: Any = None) -> Any:
    """I-ViT Shiftmax (Li & Gu 2023) as the authors' IntSoftmax computes it:
    int32 ``x`` to int32 ``y`` (real value ``y / 2**(output_bit - 1)``)."""
    y = _out(x, np.int32, out)
    _smax.shiftmax(x, y, scaling_factor, output_bit, dim, threads)
    return y


def qlinear_softmax(x: Any, x_scale: float, x_zero_point: int, y_scale: float,
                    y_zero_point: int, dim: int = -1, *, bias_correction: bool = False,
                    threads: int = 0, out: Any = None) -> Any:
    """ONNX Runtime's com.microsoft QLinearSoftmax bit for bit (opset-13 axis
    semantics) on uint8 / int8 ``x``; ``bias_correction`` (default off)
    spreads each row's rounding deficit over the row (Pandey et al. 2023)."""
    y = _out(x, np.asarray(x).dtype if not hasattr(x, "dtype") else x.dtype, out)
    _smax.qlinear_softmax(x, y, x_scale, x_zero_point, y_scale, y_zero_point,
                          bias_correction, dim, threads)
    return y
