"""Array functions of smax beyond the softmax family: sparse and re-weighting
normalisers (``_ops_normalizers.py``), losses (``_ops_losses.py``), samplers
(``_ops_sampling.py``), on the plumbing of ``_ops_common.py``; this module
gathers them. Re-exported by ``smax`` (see its docstring for
the array-type, zero-copy, dtype and error conventions); differentiable
versions for PyTorch live in ``smax.torch``.

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
autograd Function of ``smax.torch``, so these functions are differentiable in
that case too.
"""
from __future__ import annotations

from . import (  # noqa: F401  (package helpers, used through this module by _torch_ops)
    _arg,
    _check_out,
    _is_torch,
    _norm_dim,
    _shape_of,
    _torch_module,
    _wants_grad,
)
from ._ops_common import (  # noqa: F401
    REDUCTIONS,
    Array,
    _st,
    _alloc,
    _co,
    _reduction,
    _lo,
    _rows_shape,
    _prep,
    _normalize,
    _vjp,
    _scalar_or_array,
    _loss_shape,
    _loss,
    _seed,
    _OPTS_DOC,
)
from ._ops_normalizers import (  # noqa: F401
    sparsemax,
    entmax15,
    entmax_bisect,
    sparse_softmax,
    sparsemax_backward,
    entmax15_backward,
    entmax_bisect_backward,
    sparse_softmax_backward,
    ssmax,
    softpick,
    clipped_softmax,
    stablemax,
    softmax_collapse_fraction,
    self_adjust_softmax,
    sigmoid_normalizer,
    softplus_normalizer,
    power_softmax,
    probability_temperature,
    logit_standardization,
)
from ._ops_losses import (  # noqa: F401
    _LOSS_DOC,
    _loss_entry,
    sparsemax_loss,
    entmax15_loss,
    entmax_bisect_loss,
    sparse_softmax_loss,
    stablemax_cross_entropy,
    spherical_z_loss,
    z_loss,
    _CE_EXTRAS,
    _ce_dim,
    cross_entropy,
    _cross_entropy_fwd,
    linear_cross_entropy,
    _linear_cross_entropy_fwd,
)
from ._ops_sampling import (  # noqa: F401
    gumbel_noise,
    gumbel_softmax,
    gumbel_max,
    softmax_topk,
    sampling_filter,
    sample,
    soft_nms,
)

__all__ = [
    # sparse normalisers
    "sparsemax", "entmax15", "entmax_bisect", "sparse_softmax",
    "sparsemax_backward", "entmax15_backward", "entmax_bisect_backward",
    "sparse_softmax_backward",
    # rescaled / rectified
    "ssmax", "softpick", "clipped_softmax", "stablemax", "softmax_collapse_fraction",
    # re-weighting
    "self_adjust_softmax", "sigmoid_normalizer", "softplus_normalizer", "power_softmax",
    "probability_temperature", "logit_standardization",
    # losses
    "cross_entropy", "linear_cross_entropy", "z_loss", "spherical_z_loss",
    "sparsemax_loss", "entmax15_loss", "entmax_bisect_loss", "sparse_softmax_loss",
    "stablemax_cross_entropy",
    # sampling
    "gumbel_noise", "gumbel_softmax", "gumbel_max", "softmax_topk", "sampling_filter",
    "sample", "soft_nms",
    "REDUCTIONS",
]
