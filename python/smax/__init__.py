"""smax: the fastest exact softmax family on CPUs, from Python.

Every op takes numpy arrays, PyTorch CPU tensors or any DLPack-capable CPU
array **without copying** (any strides, including transposed, sliced and
negative-stride views) and returns the caller's array type:

* numpy in -> numpy out;
* torch in -> torch out (allocated with ``torch.empty``);
* any other DLPack array in -> numpy out (convert back without a copy with
  your library's ``from_dlpack``, e.g. ``jnp.from_dlpack(y)``).

Outputs are allocated contiguous by the caller's framework, or written into
``out=`` (any strides; ``out`` may be ``x`` itself for an in-place call).
Kernels run with the GIL released.

dtypes: ``float32``, ``float64``, ``float16`` and ``bfloat16`` (numpy's through
``ml_dtypes``), passed as views of their own dtype; results and gradients
have the input's dtype unless ``out=`` says otherwise (docs/python.md,
"dtypes"). Other dtypes raise ``TypeError``. Masks are ``bool`` / ``uint8`` (keep where true /
non-zero) or floating (added to the scaled logits), broadcast to ``x`` by
NumPy rules.

Errors: invalid arguments raise ``ValueError``, wrong dtypes / devices /
array types ``TypeError``, unsupported requests ``NotImplementedError``,
failed allocations ``MemoryError``.

Autograd: ``smax.torch`` has ``torch.autograd.Function`` versions. The
functions here also route a torch tensor that requires grad (with grad mode
on) through ``smax.torch``, so they are differentiable in that case too.

Beyond the softmax family (``smax/_ops.py``): sparse normalisers
(``sparsemax``, ``entmax15``, ``entmax_bisect``, ``sparse_softmax``),
rescaled / re-weighting normalisers (``ssmax``, ``softpick``, ``stablemax``,
``self_adjust_softmax``, ``sigmoid_normalizer``, ``softplus_normalizer``,
``power_softmax``, ``probability_temperature``, ``logit_standardization``),
losses (``cross_entropy`` with PyTorch's signature, ``linear_cross_entropy``,
``z_loss``, ``spherical_z_loss``, ``sparsemax_loss``, ``entmax15_loss``,
``entmax_bisect_loss``, ``sparse_softmax_loss``, ``stablemax_cross_entropy``)
and samplers (``gumbel_softmax``, ``gumbel_max``, ``gumbel_noise``,
``softmax_topk``, ``sampling_filter``, ``sample``, ``soft_nms``), plus
``softmax_collapse_fraction``. See docs/python.md.
"""
from __future__ import annotations

# Re-exports only: each submodule has an __all__; shared plumbing is in
# _common.py (a leaf), the torch Functions in _autograd.py (imported on use).
from . import _attention, _ops, _ops_quantized, _ops_softmax, _runtime
from ._attention import *  # noqa: F401,F403
from ._common import ALGORITHMS, EMPTY_ROW_POLICIES, REDUCTIONS  # noqa: F401
from ._ops import *  # noqa: F401,F403
from ._ops_quantized import *  # noqa: F401,F403
from ._ops_softmax import *  # noqa: F401,F403
from ._runtime import *  # noqa: F401,F403
from ._runtime import __version__  # noqa: F401

__all__ = ["ALGORITHMS", "EMPTY_ROW_POLICIES", "REDUCTIONS"]
__all__ += _ops_softmax.__all__
__all__ += _runtime.__all__
__all__ += _ops.__all__
__all__ += _attention.__all__
__all__ += _ops_quantized.__all__
