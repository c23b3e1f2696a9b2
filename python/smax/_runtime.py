"""What the build has and runs: version, SIMD targets, threads, kernel names
and the op list (re-exported by ``smax``)."""
from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional

from . import _smax as _C

__all__ = ["info", "set_max_target", "set_max_threads", "max_threads", "kernel_name",
           "op_list", "OpInfo", "streaming_stores", "set_streaming_stores"]

__version__: str = _C.version()



def info() -> Dict[str, Any]:
    """What this build has and what it runs now.

    Returns a dict: ``version``; ``compiled_targets`` (SIMD targets built in,
    best first); ``supported_targets`` (those this CPU runs, after any cap);
    ``active_target`` (what kernels dispatch to now); ``max_threads`` (the
    default thread count); ``kernels`` (op -> kernel name for a row of 32000
    with ``algorithm="auto"``); ``streaming_stores`` (whether large batched
    log_softmax, backward and cross-entropy gradient outputs use streaming
    stores on this host: :func:`streaming_stores`).
    """
    ops = ("softmax", "log_softmax", "logsumexp", "softmax_backward", "log_softmax_backward")  # noqa: E501
    return {
        "version": __version__,
        "compiled_targets": list(_C.compiled_targets()),
        "supported_targets": list(_C.supported_targets()),
        "active_target": _C.active_target(),
        "max_threads": _C.max_threads(),
        "kernels": {op: _C.kernel_name(op) for op in ops},
        "streaming_stores": _C.streaming_stores(),
    }


def set_max_target(name: Optional[str]) -> None:
    """Cap the SIMD target kernels dispatch to.

    ``name``: ``"avx3"``, ``"avx2"``, ``"sse4"``, ``"ssse3"``, ``"scalar"``
    (case-insensitive), or ``None`` / ``""`` / ``"none"`` to lift the cap.
    Raises ``ValueError`` for an unknown name or one not compiled in. Call it
    between calls, not while other threads run smax ops. The environment
    variable ``SMAX_MAX_TARGET`` does the same at start-up.
    """
    _C.set_max_target("" if name is None else str(name))


def streaming_stores() -> str:
    """Whether large batched outputs are written with streaming
    (non-temporal) stores on this host, decided per kernel:
    ``"softmax=S, log_softmax=S, backward=S, cross_entropy=S"``, each ``S``
    ``"stream"`` or ``"regular"`` once decided, ``"measuring"`` before (the
    first calls of that kernel whose input and output exceed the last-level
    cache time both kinds); ``"forced on"`` / ``"forced off"`` when
    :func:`set_streaming_stores` or the environment variable
    ``SMAX_STREAM_STORES`` sets it. The results are the same bits either
    way (docs/design.md, "Streaming stores")."""
    return str(_C.streaming_stores())


def set_streaming_stores(mode: str) -> None:
    """Force streaming stores ``"on"`` or ``"off"`` for this process, or go
    back to the run-time measurement with ``"auto"`` (it starts over).
    Raises ``ValueError`` for any other value. Call it between calls, not
    while other threads run smax ops."""
    if not isinstance(mode, str):
        raise TypeError(f"set_streaming_stores: mode must be a str "
                        f"('on', 'off' or 'auto'), got {type(mode).__name__}")
    _C.set_streaming_stores(mode)


def set_max_threads(n: int) -> None:
    """Default thread count for calls with ``threads=0`` (``n >= 1``)."""
    _C.set_max_threads(int(n))


def max_threads() -> int:
    """The default thread count (hardware concurrency unless changed)."""
    return int(_C.max_threads())


class OpInfo(NamedTuple):
    """One public op of smax, as the op list states it (docs/design.md,
    "Adding an op"): ``group`` is "softmax", "normalizers", "losses",
    "sampling" or "attention"; ``kind`` "diff" (a forward op with a gradient:
    ``smax.<name>`` and ``smax.torch.<name>``), "nodiff" (``smax.<name>``),
    "backward" (the VJP of a forward op, reached through ``smax.torch``'s
    autograd) or "fused" (forward and backward in one call); ``cli`` how
    the ``smax`` command reaches it ("run", "run_unchecked", "run_inputs",
    "attention", "none")."""

    name: str
    group: str
    kind: str
    cli: str


def op_list() -> List[OpInfo]:
    """Every public op of the library, in the op list's order."""
    return [OpInfo(*entry) for entry in _C.op_list()]


def kernel_name(op: str, algorithm: str = "auto", cols: int = 32000) -> str:
    """The kernel ``op`` runs with ``algorithm`` on the active target for rows of ``cols``."""
    return str(_C.kernel_name(op, algorithm, int(cols)))
