# Public API of the `smax` package (implementation: smax/__init__.py).
# ArrayT: numpy.ndarray, torch.Tensor or any DLPack-capable array; results
# have the caller's array type (numpy for other DLPack arrays).
from typing import Any, Dict, List, NamedTuple, Optional, Tuple, TypeVar


__version__: str
ALGORITHMS: Tuple[str, ...]
EMPTY_ROW_POLICIES: Tuple[str, ...]

ArrayT = TypeVar("ArrayT")

def softmax(x: ArrayT, dim: int = -1, *, scale: float = 1.0, temperature: float = 1.0,
            mask: Optional[Any] = None, algorithm: str = "auto", empty_row: str = "zero",
            threads: int = 0, out: Optional[Any] = None) -> ArrayT: ...
def log_softmax(x: ArrayT, dim: int = -1, *, scale: float = 1.0, temperature: float = 1.0,
                mask: Optional[Any] = None, algorithm: str = "auto", empty_row: str = "zero",
                threads: int = 0, out: Optional[Any] = None) -> ArrayT: ...
def logsumexp(x: ArrayT, dim: int = -1, keepdim: bool = False, *, scale: float = 1.0,
              temperature: float = 1.0, mask: Optional[Any] = None, algorithm: str = "auto",
              empty_row: str = "zero", threads: int = 0, out: Optional[Any] = None) -> ArrayT: ...
def softmax_backward(y: ArrayT, dy: Any, dim: int = -1, *, scale: float = 1.0,
                     temperature: float = 1.0, threads: int = 0,
                     out: Optional[Any] = None) -> ArrayT: ...
def log_softmax_backward(y: ArrayT, dy: Any, dim: int = -1, *, scale: float = 1.0,
                         temperature: float = 1.0, threads: int = 0,
                         out: Optional[Any] = None) -> ArrayT: ...

def info() -> Dict[str, Any]: ...
def set_max_target(name: Optional[str]) -> None: ...
def set_max_threads(n: int) -> None: ...
def max_threads() -> int: ...
def kernel_name(op: str, algorithm: str = "auto", cols: int = 32000) -> str: ...
class OpInfo(NamedTuple):
    name: str
    group: str
    kind: str
    cli: str
def op_list() -> List[OpInfo]: ...

# Every op beyond the softmax family: annotated in smax/_ops.py (re-exported).
from ._ops import (
    sparsemax as sparsemax,
    entmax15 as entmax15,
    entmax_bisect as entmax_bisect,
    sparse_softmax as sparse_softmax,
    sparsemax_backward as sparsemax_backward,
    entmax15_backward as entmax15_backward,
    entmax_bisect_backward as entmax_bisect_backward,
    sparse_softmax_backward as sparse_softmax_backward,
    ssmax as ssmax,
    softpick as softpick,
    clipped_softmax as clipped_softmax,
    stablemax as stablemax,
    softmax_collapse_fraction as softmax_collapse_fraction,
    self_adjust_softmax as self_adjust_softmax,
    sigmoid_normalizer as sigmoid_normalizer,
    softplus_normalizer as softplus_normalizer,
    power_softmax as power_softmax,
    probability_temperature as probability_temperature,
    logit_standardization as logit_standardization,
    cross_entropy as cross_entropy,
    linear_cross_entropy as linear_cross_entropy,
    z_loss as z_loss,
    spherical_z_loss as spherical_z_loss,
    sparsemax_loss as sparsemax_loss,
    entmax15_loss as entmax15_loss,
    entmax_bisect_loss as entmax_bisect_loss,
    sparse_softmax_loss as sparse_softmax_loss,
    stablemax_cross_entropy as stablemax_cross_entropy,
    gumbel_noise as gumbel_noise,
    gumbel_softmax as gumbel_softmax,
    gumbel_max as gumbel_max,
    softmax_topk as softmax_topk,
    sampling_filter as sampling_filter,
    sample as sample,
    soft_nms as soft_nms,
    REDUCTIONS as REDUCTIONS,
)

# Internal helpers shared with smax.torch.
from ._attention import ATTENTION_NORMALIZERS as ATTENTION_NORMALIZERS
from ._attention import attention as attention
from . import _smax as _C
def _forward(fn: Any, op: str, x: Any, out_shape: Optional[Tuple[int, ...]], dim: int,
             scale: float, temperature: float, mask: Any, algorithm: str, empty_row: str,
             threads: int, out: Any) -> Any: ...
def _norm_dim(dim: Any, rank: int, op: str) -> int: ...
