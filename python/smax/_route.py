"""Where an array function goes: a tensor that requires grad (with grad mode
on) to the autograd Functions of ``_autograd.py`` (imported here on first
use, so numpy-only callers never import torch), anything else to the plain
calls of ``_common.py``."""
from __future__ import annotations

from typing import Any

from ._common import _normalize, _opt, _wants_grad


def autograd() -> Any:
    """smax/_autograd.py (the torch Functions), for a caller holding a tensor."""
    from . import _autograd
    return _autograd


def normalizer(op: str, from_y: bool, x: Any, dim: Any, params: tuple, co: Any, mask: Any,
               out: Any) -> Any:
    """A normaliser's array function: through autograd (smax/_autograd.py's
    generic Function, backward ``<op>_backward`` of y (`from_y`) or x) when a
    tensor requires grad, else ``_normalize``."""
    if out is None and _wants_grad(x, mask):
        return autograd().normalizer(op, from_y, x, mask, dim, params, co)
    co.mask = _opt(mask)  # co is this call's own object
    return _normalize(op, x, dim, params, co, out)
