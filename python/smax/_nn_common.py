"""What the modules of ``smax.nn`` share: their knobs (numbers, buffers or
``nn.Parameter`` objects)."""
from __future__ import annotations

import numbers
from typing import Any, Dict

import torch


def _is_one(v: Any) -> bool:
    return isinstance(v, numbers.Real) and float(v) == 1.0


def _knob(module: torch.nn.Module, name: str, value: Any, learn: bool) -> None:
    """Sets knob ``name`` of ``module``: an ``nn.Parameter`` when ``learn`` (a
    float becomes a one-element parameter of the default dtype) or when
    ``value`` already is one, a buffer for another tensor, a plain float
    otherwise."""
    if isinstance(value, torch.nn.Parameter):
        setattr(module, name, value)
    elif learn:
        t = value.detach().clone() if isinstance(value, torch.Tensor) else torch.tensor(
            float(value), dtype=torch.get_default_dtype())
        if not t.is_floating_point():
            t = t.to(torch.get_default_dtype())
        setattr(module, name, torch.nn.Parameter(t))
    elif isinstance(value, torch.Tensor):
        module.register_buffer(name, value)
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        setattr(module, name, float(value))
    else:
        raise TypeError(f"smax.nn.{type(module).__name__}: {name} must be a number or a tensor, "
                        f"got {type(value).__name__}")


def _knob_repr(module: torch.nn.Module, names: tuple) -> list:
    """``name=value`` for each knob that is not a default logit scale of 1."""
    parts = []
    for k in names:
        v = getattr(module, k)
        if isinstance(v, torch.Tensor):
            kind = "Parameter" if isinstance(v, torch.nn.Parameter) else "buffer"
            parts.append(f"{k}={kind}{tuple(v.shape)}")
        elif not (k in ("scale", "temperature") and v == 1.0):
            parts.append(f"{k}={v!r}")
    return parts


class _LogitScale:
    """Mixin of the loss modules: ``scale`` / ``temperature`` (logits ``x *
    scale / temperature``) as knobs, learnable with ``learn_scale`` /
    ``learn_temperature``."""

    def _init_logit_scale(self, options: Dict[str, Any]) -> None:
        _knob(self, "scale", options.pop("scale", 1.0), options.pop("learn_scale", False))
        _knob(self, "temperature", options.pop("temperature", 1.0),
              options.pop("learn_temperature", False))

    def _logit_scale(self) -> Dict[str, Any]:
        return {"scale": self.scale, "temperature": self.temperature}

    def _logit_scale_repr(self) -> str:
        return "".join(", " + p for p in _knob_repr(self, ("scale", "temperature")))
