"""smax.torch: differentiable smax ops for PyTorch (CPU tensors of float32,
float64, float16 or bfloat16).

Drop-in replacements for ``torch.softmax`` / ``torch.log_softmax`` /
``torch.logsumexp`` (plus smax's options), each a ``torch.autograd.Function``
whose backward runs smax's backward kernels::

    import smax.torch as st
    logp = st.log_softmax(logits, dim=-1)            # like F.log_softmax
    loss = torch.nn.functional.nll_loss(logp, target)
    loss.backward()

Gradients flow to ``x``, to a float ``mask`` that requires grad (e.g. a
learned attention bias; its gradient is summed over broadcast dimensions),
and to ``scale`` / ``temperature`` given as one-element tensors that require
grad (a learnable temperature; docs/python.md).
Backward passes are first-order only: a double backward raises
``RuntimeError("smax.<op>: double backward is not supported ...")``. Inputs
are float32, float64, float16 or bfloat16 CPU tensors (every op, attention
and linear_cross_entropy included), gradients in their dtype. The modules ``Softmax``,
``LogSoftmax`` and ``LogSumExp`` wrap the functions for ``nn.Sequential``.

Every differentiable op of the op list (``smax.op_list()``, kind "diff") is
here, made from its array function in ``smax`` by ``_autograd.differentiable``
(the same signature minus ``out=``; autograd Functions in
``smax/_autograd.py``): the sparse normalisers (drop-ins for the ``entmax``
package's ``sparsemax``, ``entmax15``, ``entmax_bisect``, with alpha
gradients), the other normalisers, ``gumbel_softmax`` (straight-through for
``hard=True``), ``softmax_topk`` and every loss: ``cross_entropy`` is a
drop-in for ``F.cross_entropy`` (``st.cross_entropy(logits, target,
ignore_index=-100, label_smoothing=0.1)``), ``linear_cross_entropy`` gives
gradients for hidden / weight / bias. Modules: ``Sparsemax``, ``Entmax15``,
``EntmaxBisect``, ``CrossEntropyLoss``, ``SparsemaxLoss``, ``Entmax15Loss``,
``EntmaxBisectLoss`` (the entmax package's constructor arguments): aliases of
``smax.nn``'s (docs/python.md, "smax.nn").

torch.compile / torch.export: every function here is also the custom op
``torch.ops.smax.<op>`` (``smax/_library.py``: typed schema, fake and
autograd registrations), which it emits while a graph is traced, so
``torch.compile(fn, fullgraph=True)`` has no graph break; eager calls run
the autograd Functions directly. Every returned tensor that can go into a
loss is differentiable (cross_entropy's extras but accuracy included).

Adding an op: nothing here. Its array function routes a tensor that
requires grad to an autograd Function of ``smax/_autograd.py`` (the generic
normaliser / loss Functions need nothing new), and the op list's "diff" kind
puts it in this module.
"""
from __future__ import annotations

from typing import Any

import torch  # noqa: F401  (smax.torch needs PyTorch: fail here if it is missing)

import smax as _smax
from smax import _library
from smax._attention import torch_attention as attention
from smax._autograd import cross_entropy, differentiable, first_order  # noqa: F401
from smax._route import learnable_logit_scale

# Hand-written here: cross_entropy (extra fused / inplace_backward arguments)
# and attention (no out / return_lse); every other "diff" op of the op list is
# its array function made differentiable.
_HAND = {"cross_entropy": learnable_logit_scale()(cross_entropy), "attention": attention}
_OPS = [op.name for op in _smax.op_list() if op.kind == "diff"]
for _name in _OPS:
    # each op also a torch.library custom op, torch.ops.smax.<name> (smax/_library.py),
    # which this function emits while torch.compile / torch.export trace it
    globals()[_name] = _library.routed(
        _name, _HAND.get(_name) or differentiable(getattr(_smax, _name)))
del _name

# nn.Modules: defined in smax.nn (smax/nn.py), reached here through __getattr__ below.
_MODULES = ("Softmax", "LogSoftmax", "LogSumExp", "Sparsemax", "Entmax15", "EntmaxBisect",
            "CrossEntropyLoss", "SparsemaxLoss", "Entmax15Loss", "EntmaxBisectLoss")
__all__ = list(_MODULES) + _OPS


def __getattr__(name: str) -> Any:
    """The modules of ``__all__`` live in ``smax.nn`` (imported on first use,
    since smax.nn imports this module): ``smax.torch.Softmax is smax.nn.Softmax``."""
    if name in _MODULES:
        import smax.nn
        return getattr(smax.nn, name)
    raise AttributeError(f"module 'smax.torch' has no attribute {name!r}")
