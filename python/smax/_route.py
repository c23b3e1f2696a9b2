"""Where an array function goes: a tensor that requires grad (with grad mode
on) to the autograd Functions of ``_autograd.py`` (imported here on first
use, so numpy-only callers never import torch), anything else to the plain
calls of ``_common.py``."""
from __future__ import annotations

import functools
import inspect
from typing import Any

from ._common import _is_torch, _normalize, _opt, _wants_grad


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


#: The options through which every op reads its logits, t = x * scale / temperature.
LOGIT_SCALE_KNOBS = ("scale", "temperature")


def learnable_logit_scale(*tapped: str, knobs: tuple = LOGIT_SCALE_KNOBS) -> Any:
    """Decorator of an array function whose logits are ``x * scale /
    temperature`` (``knobs``: the options it reads that way): ``scale`` and
    ``temperature`` may also be one-element torch tensors, and one that
    requires grad gets its gradient (smax/_autograd.py, ``logit_scale_call``:
    the arguments named in ``tapped``, default the first, pass through an
    autograd node that turns their gradient into the knobs' gradients with
    ``logit_scale_gradients``). Plain numbers take the function as is."""

    def deco(fn: Any) -> Any:
        sig = inspect.signature(fn)
        names = list(sig.parameters)
        taps = tapped or (names[0],)
        positional = [names.index(k) for k in knobs
                      if k in names and sig.parameters[k].kind is
                      inspect.Parameter.POSITIONAL_OR_KEYWORD]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not (any(_is_torch(kwargs.get(k)) for k in knobs)
                    or any(i < len(args) and _is_torch(args[i]) for i in positional)):
                return fn(*args, **kwargs)
            return autograd().logit_scale_call(fn, sig, taps, knobs, args, kwargs)

        return wrapper

    return deco
