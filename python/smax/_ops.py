"""Array functions of smax beyond the softmax family: sparse and re-weighting
normalisers (``_ops_normalizers.py``), losses (``_ops_losses.py``), samplers
(``_ops_sampling.py``), on the plumbing of ``_common.py``; this module
gathers them (re-exported by ``smax``; see its docstring for the array-type,
zero-copy, dtype and error conventions). Differentiable versions for PyTorch
live in ``smax.torch``.

Every function takes ``x`` as a float32 numpy array, torch CPU tensor or any
DLPack array (any rank <= 8, any strides; never copied) and returns results of
the caller's array type. The keyword options shared by all of them:

    scale, temperature: the logits are ``t = x * (scale / temperature) + mask``
        (both finite and > 0; ops with a temperature of their own name it
        differently, see each function);
    mask: None, a bool / uint8 array (False = masked out: the logit becomes
        -inf) or a float32 array added to the scaled logits; broadcast to
        ``x`` by NumPy rules. Masked entries get exactly 0 output and 0
        gradient;
    empty_row: what a row whose entries are all masked / -inf gives:
        ``"zero"`` (0, like SDPA) or ``"nan"``;
    threads: 0 = ``smax.max_threads()``; results are bitwise identical for
        any thread count;
    out: optional preallocated output (any strides; may be ``x`` for the
        normalisers: in place).

A torch tensor that requires grad (with grad mode on) is routed through the
autograd Function of ``smax/_autograd.py``, so these functions are
differentiable in that case too.
"""
from __future__ import annotations

from . import _ops_losses, _ops_normalizers, _ops_sampling
from ._common import _cross_entropy_fwd  # noqa: F401  (tests call it)
from ._ops_losses import *  # noqa: F401,F403
from ._ops_normalizers import *  # noqa: F401,F403
from ._ops_sampling import *  # noqa: F401,F403

__all__ = []
__all__ += _ops_normalizers.__all__
__all__ += _ops_losses.__all__
__all__ += _ops_sampling.__all__
