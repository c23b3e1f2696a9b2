# Public API of the `smax` package (implementation: smax/__init__.py).
# ArrayT: numpy.ndarray, torch.Tensor or any DLPack-capable array; results
# have the caller's array type (numpy for other DLPack arrays).
from typing import Any, Dict, Optional, Tuple, TypeVar


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

# Internal helpers shared with smax.torch.
from . import _smax as _C
def _forward(fn: Any, op: str, x: Any, out_shape: Optional[Tuple[int, ...]], dim: int,
             scale: float, temperature: float, mask: Any, algorithm: str, empty_row: str,
             threads: int, out: Any) -> Any: ...
def _norm_dim(dim: Any, rank: int, op: str) -> int: ...
