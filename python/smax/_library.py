"""smax's differentiable ops as PyTorch custom ops (``torch.library``), so
that ``torch.compile(fullgraph=True)`` and ``torch.export`` see each smax
call as one opaque node instead of a graph break.

One generic mechanism, driven by the op list (``smax.op_list()``, kind
"diff") and the Python signature of each ``smax.torch`` function:

* ``smax::<op>`` (forward) takes the function's arguments flattened to typed
  schema arguments (``op_schema``): tensors (``Tensor`` / ``Tensor?``), ints,
  floats, bools, strs and their optionals. A knob that may be a number or a
  tensor (``scale``, ``temperature``, ``alpha``, ``s``, ``ssmax_s``,
  ``sigmoid_bias``, ``seed``) becomes two arguments, ``<name>`` (the number)
  and ``<name>_t`` (the tensor, else None). It returns a fixed tuple of
  tensors (``_N_OUT``; an extra that was not asked for is an empty tensor),
  which the ``smax.torch`` function unpacks to its usual result.
* ``smax::<op>_backward(Tensor?[] grads, Tensor[] outputs, bool[] needs,
  <forward args>) -> Tensor[]``: one gradient per tensor argument (an
  empty tensor where ``needs`` is False). A custom op's forward cannot hand
  Python state to its backward, so this rebuilds it: it runs the op's
  autograd Function of ``smax/_autograd.py`` on the saved inputs and
  returns ``torch.autograd.grad`` of its outputs (the C++ backward kernel),
  exactly eager's gradients for every learnable knob (a float mask, scale /
  temperature tensors, alpha, s, linear_cross_entropy's weight and bias,
  attention's sinks / gate / ...). The forward kernel is not run again:
  the saved forward ``outputs`` are replayed (``_common.replaying``),
  except for the ops of ``_RECOMPUTE`` / ``_RECOMPUTE_WITH``, whose
  Functions compute more than their outputs (those pay one more forward
  pass per backward).
* ``register_fake`` (output shapes and dtypes only, ``_fake_outputs``) for
  both, ``register_autograd`` on the forward.

``smax.torch.<op>`` emits ``torch.ops.smax.<op>`` while torch.compile /
torch.export trace it (``tracing``), and runs the autograd Functions
directly in eager mode (the same kernels, so the same bits). Adding an op:
nothing here unless its signature has an argument type ``op_schema`` does
not know (it then fails at import, naming the argument), its result is not
what ``_fake_outputs`` knows (x's shape, a row reduction, a loss), or its
autograd Function computes more than its outputs (add it to ``_RECOMPUTE``;
python/tests/test_torch_library.py finds each of these).
"""
from __future__ import annotations

import inspect
import numbers
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from ._attention import capturing_lse, lse_shape
from ._common import def_signature, replaying

#: The ``torch.library`` namespace of smax's ops: ``torch.ops.smax.<op>``.
NAMESPACE = "smax"
_LIB = torch.library.Library(NAMESPACE, "DEF")

#: Knobs that may be a number or a tensor: a schema number plus ``<name>_t``.
_PAIRS = frozenset({"scale", "temperature", "alpha", "s", "ssmax_s", "sigmoid_bias", "seed"})
#: (op, arg) pairs of _PAIRS names that are numbers only (attention's softmax scale).
_NUMBER_ONLY = frozenset({("attention", "scale")})
#: Eager-only arguments of smax.torch functions (not in the schema).
_EAGER_ONLY = frozenset({"inplace_backward"})
#: Outputs of the ops whose result is not one tensor.
_N_OUT = {"cross_entropy": 6, "linear_cross_entropy": 6, "gumbel_softmax": 2,
          "softmax_topk": 2, "attention": 2}
#: Ops whose backward runs their forward kernel again: their autograd
#: Function computes more than their outputs (the fused cross-entropy
#: gradient, linear_cross_entropy's lse, Gumbel's soft sample). Every other
#: op's backward replays the saved forward outputs (``_common.replaying``;
#: the generic calls of smax/_common.py, softmax_topk's and attention's
#: Functions take them): no second forward pass.
_RECOMPUTE = frozenset({"cross_entropy", "linear_cross_entropy", "gumbel_softmax"})
#: Ops that recompute when this tensor argument is given (attention's gate:
#: its backward needs the output before the gate, which is not an output).
_RECOMPUTE_WITH = {"attention": "gate"}
#: cross_entropy / linear_cross_entropy's extras, in their order.
_CE_EXTRAS = ("z_loss", "lse", "entropy", "target_logprob", "accuracy")

_SCALAR_TYPES = {"int": "int", "float": "float", "bool": "bool", "str": "str",
                 "Optional[float]": "float?", "Optional[int]": "int?"}
_TENSOR_TYPES = frozenset({"Array", "Any", "Tensor", "Optional[Tensor]", "Optional[Array]",
                           "Union[float, Array]"})


class Param:
    """One schema argument: its name, schema type, and what it is
    ("tensor", "scalar", or "value" / "knob" for the two halves of a pair)."""

    __slots__ = ("name", "type", "kind", "py")

    def __init__(self, name: str, type_: str, kind: str, py: str) -> None:
        self.name, self.type, self.kind, self.py = name, type_, kind, py


def op_schema(op: str, fn: Callable[..., Any]) -> List[Param]:
    """The schema arguments of ``smax::<op>`` from the signature of the
    ``smax.torch`` function ``fn`` (ValueError naming an argument whose
    annotation has no schema type)."""
    params: List[Param] = []
    for p in inspect.signature(fn).parameters.values():
        if p.name in _EAGER_ONLY:
            continue
        ann = p.annotation if isinstance(p.annotation, str) else getattr(
            p.annotation, "__name__", str(p.annotation))
        if p.name in _PAIRS and (op, p.name) not in _NUMBER_ONLY:
            base = "int" if p.name == "seed" else "float"
            params.append(Param(p.name, base + ("?" if p.default is None else ""), "value",
                                p.name))
            params.append(Param(p.name + "_t", "Tensor?", "knob", p.name))
        elif ann in _TENSOR_TYPES:
            required = p.default is inspect.Parameter.empty
            params.append(Param(p.name, "Tensor" if required else "Tensor?", "tensor", p.name))
        elif ann in _SCALAR_TYPES:
            params.append(Param(p.name, _SCALAR_TYPES[ann], "scalar", p.name))
        else:
            raise ValueError(f"smax._library: smax.torch.{op}'s argument {p.name} is annotated "
                             f"{ann!r}, which has no torch.library schema type")
    return params


def _schema(op: str, params: Sequence[Param]) -> str:
    outs = ", ".join(["Tensor"] * _N_OUT.get(op, 1))
    args = ", ".join(f"{p.type} {p.name}" for p in params)
    return f"{op}({args}) -> ({outs})" if _N_OUT.get(op, 1) > 1 else f"{op}({args}) -> Tensor"


# ---- the Python values <-> schema arguments -----------------------------------------------


def _is_tensor(v: Any) -> bool:
    return isinstance(v, torch.Tensor)


def flatten(op: str, values: Sequence[Any]) -> List[Any]:
    """The schema arguments of ``smax::<op>`` from the values of the
    ``smax.torch`` function's parameters (in signature order, eager-only
    ones included)."""
    spec = _SPECS[op]
    named = dict(zip(spec.py_names, values))
    out: List[Any] = []
    for p in spec.params:
        v = named[p.py]
        if p.kind == "value":
            if _is_tensor(v):
                out.append(None if p.type.endswith("?") else (0 if p.type == "int" else 0.0))
            elif v is None and p.py == "seed":
                out.append(None)
            else:
                out.append(_coerce(v, p.type))
        elif p.kind == "knob":
            if _is_tensor(v):
                out.append(v)
            elif v is None and p.py == "seed":
                # torch's generator draws the seed (as smax._common._seed),
                # as a graph op so a compiled graph draws a new one per call.
                out.append(torch.randint(0, 2**62, (), dtype=torch.int64))
            else:
                out.append(None)
        elif p.kind == "scalar":
            out.append(_coerce(v, p.type))
        else:
            out.append(v)
    return out


def _coerce(v: Any, type_: str) -> Any:
    """A Python / numpy number as the schema type wants it (anything else is
    passed on, for the op's own type error)."""
    if v is None or isinstance(v, torch.Tensor):
        return v
    t = type_.rstrip("?")
    if t == "float" and isinstance(v, numbers.Real):
        return float(v)
    if t == "int" and isinstance(v, numbers.Integral) and not isinstance(v, bool):
        return int(v)
    if t == "bool" and isinstance(v, (bool, numbers.Integral)):
        return bool(v)
    return v


def _unflatten(op: str, args: Sequence[Any], detach: bool = True) -> Dict[str, Any]:
    """The keyword arguments of the eager function from schema arguments
    (``detach=False``: fake tensors, as they are; a seed tensor stays one)."""
    spec = _SPECS[op]
    kw: Dict[str, Any] = {}
    for p, v in zip(spec.params, args):
        if p.kind == "knob":
            if v is not None:
                if not detach:
                    kw[p.py] = v
                else:
                    kw[p.py] = int(v) if p.py == "seed" else v.detach()
        elif p.kind == "tensor":
            kw[p.py] = v.detach() if (detach and v is not None) else v
        else:
            kw[p.py] = v
    return kw


def _pack(op: str, kw: Dict[str, Any], res: Any) -> Tuple[torch.Tensor, ...]:
    """The fixed output tuple of smax::<op> from the eager function's result."""
    if op in ("cross_entropy", "linear_cross_entropy"):
        res = res if isinstance(res, tuple) else (res,)
        loss, rest = res[0], list(res[1:])
        outs = [loss]
        for name in _CE_EXTRAS:
            outs.append(rest.pop(0) if kw.get("return_" + name) else loss.new_empty((0,)))
        return tuple(outs)
    if op == "gumbel_softmax":
        if kw.get("return_soft"):
            y, soft = res
            return y, (soft.clone() if soft is y else soft)
        return res, res.new_empty((0,))
    if op == "softmax_topk":
        return tuple(res)
    if op == "attention":  # (out, lse) from _run_eager
        return res
    return (res,)


def _run_eager(op: str, eager: Callable[..., Any], kw: Dict[str, Any]) -> Any:
    """eager(**kw); for attention (out, lse): the lse its autograd forward
    saved (f32 softmax), else an empty f32 tensor, as _fake_outputs says."""
    if op != "attention":
        return eager(**kw)
    with capturing_lse() as slot:
        out = eager(**kw)
    lse = slot[0] if slot else None
    return out, (lse if lse is not None else torch.empty((0,), dtype=torch.float32))


def unpack(op: str, kw: Dict[str, Any], outs: Any) -> Any:
    """The ``smax.torch`` function's result from smax::<op>'s outputs."""
    if op in ("cross_entropy", "linear_cross_entropy"):
        extras = [o for o, n in zip(outs[1:], _CE_EXTRAS) if kw.get("return_" + n)]
        return (outs[0], *extras) if extras else outs[0]
    if op == "gumbel_softmax":
        return (outs[0], outs[1]) if kw.get("return_soft") else outs[0]
    if op == "softmax_topk":
        return outs[0], outs[1]
    if op == "attention":  # the lse output is the backward's, not the user's
        return outs[0]
    return outs


# ---- shapes (fake tensors) ------------------------------------------------------------------


def _dim(d: int, rank: int) -> int:
    if rank == 0:
        return 0
    return d + rank if d < 0 else d


def _rows(shape: Tuple[int, ...], d: int, keepdim: bool = False) -> Tuple[int, ...]:
    if not shape:
        return ()
    return shape[:d] + ((1,) if keepdim else ()) + shape[d + 1:]


def _fake_outputs(op: str, kw: Dict[str, Any]) -> Tuple[torch.Tensor, ...]:
    """Empty tensors of the shapes and dtypes smax::<op> returns (no data)."""
    if op == "attention":  # out, and the lse its backward starts from (or empty)
        q, v = kw["q"], kw["v"]
        lse = lse_shape(q, kw.get("normalizer", "softmax"))
        return (q.new_empty(tuple(q.shape[:-1]) + (v.shape[-1],)),
                q.new_empty(lse if lse is not None else (0,), dtype=torch.float32))
    if op == "linear_cross_entropy":
        h = kw["hidden"]
        rows = tuple(h.shape[:1])
        return _ce_fake(h, rows, kw)
    x = next(v for v in kw.values() if _is_tensor(v))  # the first tensor: x / input / logits / p
    shape = tuple(x.shape)
    if op == "cross_entropy":
        d = kw["dim"]
        d = (1 if len(shape) >= 2 else 0) if d is None else _dim(d, len(shape))
        return _ce_fake(x, _rows(shape, d), kw)
    if op == "logsumexp":
        return (x.new_empty(_rows(shape, _dim(kw["dim"], len(shape)), kw["keepdim"])),)
    if op == "softmax_topk":
        d = _dim(kw["dim"], len(shape))
        k = int(kw["k"])
        oshape = shape[:d] + (k,) + shape[d + 1:] if shape else (k,)
        return x.new_empty(oshape), x.new_empty(oshape, dtype=torch.int64)
    if op == "gumbel_softmax":
        return x.new_empty(shape), x.new_empty(shape if kw.get("return_soft") else (0,))
    if "target" in kw and "reduction" in kw:  # a loss
        red = kw["reduction"]
        rows = _rows(shape, _dim(kw["dim"], len(shape)))
        return (x.new_empty(rows if red == "none" else ()),)
    return (x.new_empty(shape),)


def _ce_fake(x: torch.Tensor, rows: Tuple[int, ...],
             kw: Dict[str, Any]) -> Tuple[torch.Tensor, ...]:
    reduced = rows if kw["reduction"] == "none" else ()
    shapes = (reduced, rows, rows, rows, reduced)
    extras = [x.new_empty(s if kw.get("return_" + n) else (0,))
              for s, n in zip(shapes, _CE_EXTRAS)]
    return (x.new_empty(reduced), *extras)


# ---- registration ----------------------------------------------------------------------------


class _Spec:
    def __init__(self, op: str, eager: Callable[..., Any]) -> None:
        self.op = op
        self.eager = eager
        self.py_names = list(inspect.signature(eager).parameters)
        self.params = op_schema(op, eager)
        self.tensor_idx = [i for i, p in enumerate(self.params) if p.type.startswith("Tensor")]


_SPECS: Dict[str, _Spec] = {}


def registered() -> List[str]:
    """The ops registered so far (``torch.ops.smax.<name>``)."""
    return list(_SPECS)


def _outs(op: str, res: Any) -> Tuple[torch.Tensor, ...]:
    return res if isinstance(res, tuple) else (res,)


def register(op: str, eager: Callable[..., Any]) -> None:
    """Defines smax::<op> and smax::<op>_backward around the eager
    ``smax.torch`` function ``eager`` (its autograd Functions)."""
    spec = _Spec(op, eager)
    _SPECS[op] = spec
    n_out = _N_OUT.get(op, 1)
    _LIB.define(_schema(op, spec.params))
    bparams = ", ".join(f"{p.type} {p.name}" for p in spec.params)
    _LIB.define(f"{op}_backward(Tensor?[] grads, Tensor[] outputs, bool[] needs, {bparams}) "
                f"-> Tensor[]")
    with_arg = _RECOMPUTE_WITH.get(op)
    with_idx = [p.name for p in spec.params].index(with_arg) if with_arg else None

    def replays(inputs: Sequence[Any]) -> bool:
        return op not in _RECOMPUTE and (with_idx is None or inputs[with_idx] is None)

    def forward(*args: Any) -> Any:
        kw = _unflatten(op, args)
        with torch.no_grad():
            outs = _pack(op, kw, _run_eager(op, eager, kw))
        return outs if n_out > 1 else outs[0]

    def forward_fake(*args: Any) -> Any:
        outs = _fake_outputs(op, _unflatten(op, args, detach=False))
        return outs if n_out > 1 else outs[0]

    def backward_impl(grads: List[Optional[torch.Tensor]], outputs: List[torch.Tensor],
                      needs: List[bool], *args: Any) -> List[torch.Tensor]:
        args = list(args)
        leaves = []
        for j, i in enumerate(spec.tensor_idx):
            t = args[i]
            if t is not None:
                t = t.detach()
                if needs[j]:
                    t.requires_grad_()
                    leaves.append(t)
                args[i] = t
        kw = _unflatten(op, args)
        for j, i in enumerate(spec.tensor_idx):  # the leaves themselves, not detached views
            p = spec.params[i]
            if needs[j] and args[i] is not None:
                kw[p.py] = args[i]
        outs: Tuple[torch.Tensor, ...] = ()
        if leaves:
            with torch.enable_grad(), replaying([o.detach() for o in outputs]) as pending:
                outs = _pack(op, kw, _run_eager(op, eager, kw))
            if pending:  # pragma: no cover  (an op that should be in _RECOMPUTE)
                raise RuntimeError(f"smax::{op}_backward: the forward did not replay its "
                                   f"saved outputs; add {op!r} to smax._library._RECOMPUTE")
        pairs = [(o, g) for o, g in zip(outs, grads)
                 if g is not None and o.requires_grad]
        got = (torch.autograd.grad([o for o, _ in pairs], leaves, [g for _, g in pairs],
                                   allow_unused=True) if pairs else [None] * len(leaves))
        result, k = [], 0
        for j, i in enumerate(spec.tensor_idx):
            t = args[i]
            if needs[j] and t is not None:
                g = got[k]
                k += 1
                result.append(torch.zeros(t.shape, dtype=t.dtype) if g is None
                              else g.contiguous())
            else:
                result.append(torch.empty((0,)))
        return result

    def backward_fake(grads: Any, outputs: Any, needs: List[bool],
                      *args: Any) -> List[torch.Tensor]:
        result = []
        for j, i in enumerate(spec.tensor_idx):
            t = args[i]
            result.append(t.new_empty(tuple(t.shape)) if needs[j] and t is not None
                          else torch.empty((0,)))
        return result

    def setup_context(ctx: Any, inputs: Tuple[Any, ...], output: Any) -> None:
        # Outputs nobody differentiates get None, not zeros (as in eager):
        # an unused extra costs no gradient pass and cannot turn 0 * NaN
        # into a NaN gradient.
        ctx.set_materialize_grads(False)
        saved = _outs(op, output) if replays(inputs) else ()
        ctx.n_outputs = len(saved)
        ctx.save_for_backward(*[inputs[i] for i in spec.tensor_idx], *saved)
        ctx.scalars = [None if i in spec.tensor_idx else v for i, v in enumerate(inputs)]

    def autograd_backward(ctx: Any, *grads: Any) -> Tuple[Optional[torch.Tensor], ...]:
        args = list(ctx.scalars)
        saved = ctx.saved_tensors
        n_in = len(saved) - ctx.n_outputs
        for i, t in zip(spec.tensor_idx, saved[:n_in]):
            args[i] = t
        needs = [bool(ctx.needs_input_grad[i]) and args[i] is not None
                 and args[i].is_floating_point() for i in spec.tensor_idx]
        res: List[Optional[torch.Tensor]] = [None] * len(args)
        if not any(needs):
            return tuple(res)
        got = getattr(torch.ops.smax, op + "_backward")(list(grads), list(saved[n_in:]),
                                                          needs, *args)
        for j, i in enumerate(spec.tensor_idx):
            if needs[j]:
                res[i] = got[j]
        return tuple(res)

    _LIB.impl(op, forward, "CPU")
    _LIB.impl(op + "_backward", backward_impl, "CPU")
    torch.library.register_fake(f"{NAMESPACE}::{op}", forward_fake, lib=_LIB)
    torch.library.register_fake(f"{NAMESPACE}::{op}_backward", backward_fake, lib=_LIB)
    torch.library.register_autograd(f"{NAMESPACE}::{op}", autograd_backward,
                                    setup_context=setup_context, lib=_LIB)


# ---- routing ------------------------------------------------------------------------------


def _traced_tensor(t: Any) -> bool:
    """A fake, functional or traceable wrapper-subclass tensor (what a trace
    hands an op). nn.Parameter is a plain Tensor subclass, not one of them:
    eager calls with parameters stay on the autograd Functions."""
    if not isinstance(t, torch.Tensor):
        return False
    return (isinstance(t, FakeTensor) or is_traceable_wrapper_subclass(t)
            or torch._is_functional_tensor(t))


def tracing(tensors: Sequence[Any]) -> bool:
    """True while torch.compile / torch.export trace (or any tensor is a
    fake / functional / traceable subclass tensor, or a dispatch mode is
    active: a make_fx trace): then smax.torch emits torch.ops.smax.<op>."""
    if torch.compiler.is_compiling():
        return True
    if torch._C._len_torch_dispatch_stack() > 0:
        return True
    return any(_traced_tensor(t) for t in tensors)


def call(op: str, values: Sequence[Any]) -> Any:
    """Runs torch.ops.smax.<op> for the values of the smax.torch function's
    parameters (in signature order) and unpacks its result."""
    spec = _SPECS[op]
    named = dict(zip(spec.py_names, values))
    if named.get("inplace_backward"):
        raise ValueError(f"smax.torch.{op}: inplace_backward=True overwrites the logits in "
                         f"place, which torch.compile / torch.export cannot trace (custom ops "
                         f"are functional); leave it False there")
    outs = getattr(torch.ops.smax, op)(*flatten(op, values))
    return unpack(op, named, outs)


def routed(op: str, eager: Callable[..., Any]) -> Callable[..., Any]:
    """The public ``smax.torch.<op>``: ``eager``'s signature, docstring and
    behaviour; while torch.compile / torch.export trace it
    (``tracing``), a call of torch.ops.smax.<op> instead. Registers the op."""
    register(op, eager)
    sig = inspect.signature(eager)
    params = list(sig.parameters.values())
    text, call_args, defaults = def_signature(params)
    values = "(" + "".join(p.name + ", " for p in params) + ")"
    src = (f"def {op}({text}):\n"
           f"    _v = {values}\n"
           f"    if _tracing(_v):\n"
           f"        return _call({op!r}, _v)\n"
           f"    return _eager({call_args})\n")
    ns: dict = {"_tracing": tracing, "_call": call, "_eager": eager, **defaults}
    exec(src, ns)  # a real signature: inspect, help() and call errors as a def's
    fn = ns[op]
    fn.__module__ = "smax.torch"
    fn.__qualname__ = op
    fn.__signature__ = sig
    fn.__annotations__ = dict(getattr(eager, "__annotations__", {}))
    fn.__doc__ = eager.__doc__
    fn.__wrapped_eager__ = eager
    return fn
