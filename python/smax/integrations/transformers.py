"""smax inside Hugging Face transformers models (optional: ``pip install
transformers``, or the ``hf`` extra: ``pip install "smax[hf]"``).

``apply(model, attention="smax", loss="linear_cross_entropy")`` patches one
model instance (its class and other instances are untouched):

* **attention**: registers ``smax_attention_forward`` with transformers'
  attention-function interface under the name ``"smax"``
  (``AttentionInterface.register``; and ``AttentionMaskInterface.register``
  with transformers' SDPA mask builder, so the model builds the same boolean
  masks it builds for ``"sdpa"``: padding, sliding windows and packed
  sequences arrive as masks) and sets the model's attention implementation to
  it (``model.set_attn_implementation("smax")``). The function maps
  transformers' call ``(module, query, key, value, attention_mask, dropout,
  scaling, **kwargs)`` to ``smax.torch.attention`` with SDPA's semantics:
  grouped-query attention, top-left causal when no mask is given (exactly as
  transformers' SDPA path decides it), boolean or float additive masks,
  Gemma 2's ``softcap``, gpt-oss' sinks (``s_aux``) and T5-style
  ``position_bias``. ``normalizer=`` swaps the softmax for another of
  ``smax.ATTENTION_NORMALIZERS`` (the model then computes something else than
  its eager twin: for training with that normaliser), and
  ``attention_options=`` passes other keywords of ``smax.torch.attention``
  (``ssmax_s``, ``sigmoid_bias``, ``softpick_eps`` ...): floats or constant
  tensors; a tensor that requires grad raises ``TypeError`` (it would not be
  a registered parameter; to learn it, keep it in a module that owns it,
  e.g. ``smax.nn.SSMax(learn_s=True)`` in your own attention).
* **loss**: ``model(input_ids, labels=labels)`` computes transformers'
  ``ForCausalLMLoss`` (labels shifted left by one, ``ignore_index=-100``,
  mean over the non-ignored tokens, or sum / ``num_items_in_batch``; the
  given ``shift_labels`` instead of the shifted labels, as transformers)
  with ``smax.torch.linear_cross_entropy`` on the decoder's last hidden
  state and the ``lm_head`` weight (and bias): the ``[tokens, vocab]``
  logits are never materialised for the loss.
  ``config.final_logit_softcapping`` (Gemma 2), ``config.logit_scale``
  (Cohere) and ``config.logits_scaling`` (Granite) are applied as the
  model's own head does. Whether the output still carries logits is
  ``return_logits``: ``"auto"`` (default) computes them only in eval mode
  (``model.eval()``), so a training step never builds them (Liger-Kernel's
  rule); ``True`` always (the loss stays fused); ``False`` never. Without
  logits, ``return_dict=False`` gives a tuple one entry shorter
  (``(loss, past_key_values, ...)``: transformers' ``to_tuple`` drops the
  ``None`` logits). Without labels the model's own forward runs unchanged.
  The patched ``forward`` (an instance attribute holding only the model)
  looks the decoder, ``lm_head`` and options up on the model at each call:
  ``copy.deepcopy(model)`` runs the copy's weights, ``resize_token_embeddings``
  takes effect and ``torch.save(model)`` / ``pickle`` keep the patch.

``unapply(model)`` restores the model's forward and attention implementation.

Differences from the eager model (the tests bound them): attention and the
loss compute in float32 (float64 for float64 models) with other summation
orders than PyTorch's, so float32 results agree to a few ulps of their
magnitude, not bitwise; a query row whose keys are all masked (a left-padding
position) gives 0, as SDPA does, where eager gives an average over the
masked keys (mask the label of the last padding position, which the shift
makes predict the first real token).
Attention dropout is not supported (``ValueError`` when
``config.attention_dropout > 0`` in training mode); smax runs on CPU tensors
only.
"""
from __future__ import annotations

import inspect
from typing import Any, Dict, Optional

import torch

try:
    import transformers
    from transformers import AttentionInterface
except ImportError as _e:  # pragma: no cover - exercised only without transformers
    raise ImportError("smax.integrations.transformers needs transformers >= 4.48 (its "
                      "AttentionInterface): pip install transformers") from _e

import smax
import smax.torch as st

__all__ = ["apply", "unapply", "register", "smax_attention_forward", "causal_lm_loss",
           "ATTENTION_NAME"]

#: The name smax attention is registered under (``config._attn_implementation``).
ATTENTION_NAME = "smax"
_OPTIONS_ATTR = "_smax_attention_options"
_PATCH_ATTR = "_smax_patch"


# ---- attention ---------------------------------------------------------------------------


def smax_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                           value: torch.Tensor, attention_mask: Optional[torch.Tensor],
                           dropout: float = 0.0, scaling: Optional[float] = None,
                           is_causal: Optional[bool] = None, **kwargs: Any) -> Any:
    """transformers' attention-function contract on ``smax.torch.attention``.

    query ``[B, H, Lq, D]``, key / value ``[B, Hkv, Lk, D]`` (``H % Hkv == 0``;
    any strides, read in place), attention_mask ``None``, bool (True =
    attend) or float (added), broadcastable to ``[B, H, Lq, Lk]``. Returns
    ``(out [B, Lq, H, Dv] contiguous, None)`` (no attention weights, as
    transformers' SDPA path). ``is_causal`` follows transformers' SDPA rule:
    causal (top-left) only when no mask is given, ``Lq > 1`` and the module
    is causal. kwargs used: ``softcap``, ``s_aux`` (sinks), ``position_bias``;
    the options ``apply`` stored on the module (normalizer ...) are added.
    """
    opts: Dict[str, Any] = dict(getattr(module, _OPTIONS_ATTR, None) or {})
    if dropout:
        raise ValueError(f"smax attention: dropout={dropout} is not supported (set the "
                         "config's attention_dropout to 0, or train with model.eval()-style "
                         "dropout off)")
    if query.device.type != "cpu":
        raise ValueError(f"smax attention runs on CPU tensors; query is on {query.device}")
    q_len, kv_len = query.shape[2], key.shape[2]
    if is_causal is None:
        is_causal = getattr(module, "is_causal", True)
    is_causal = bool(q_len > 1 and attention_mask is None and is_causal)
    position_bias = kwargs.get("position_bias")
    if is_causal and kv_len > q_len:  # an empty static cache: the keys past Lq are never seen
        key, value = key[:, :, :q_len], value[:, :, :q_len]
        if position_bias is not None:
            position_bias = position_bias[..., :q_len]
    if position_bias is not None:  # additive bias; a bool mask becomes -inf where False
        if attention_mask is None:
            attention_mask = position_bias
        elif attention_mask.dtype == torch.bool:
            attention_mask = position_bias.masked_fill(~attention_mask, float("-inf"))
        else:
            attention_mask = position_bias + attention_mask
    if kwargs.get("softcap") is not None:
        opts["softcap"] = float(kwargs["softcap"])
    if kwargs.get("s_aux") is not None:
        opts["sinks"] = kwargs["s_aux"]
    out = st.attention(query, key, value, attention_mask, 0.0, is_causal, scaling,
                       query.shape[1] != key.shape[1], **opts)
    return out.transpose(1, 2).contiguous(), None


def register(name: str = ATTENTION_NAME) -> str:
    """Registers ``smax_attention_forward`` as attention implementation
    ``name`` (and transformers' SDPA mask builder for it, where the installed
    transformers has ``AttentionMaskInterface``); returns ``name``."""
    AttentionInterface.register(name, smax_attention_forward)
    try:
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    except ImportError:  # older transformers: the model builds 4-D float masks itself
        return name
    AttentionMaskInterface.register(name, sdpa_mask)
    return name


def _set_attn_implementation(model: Any, name: str) -> None:
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(name)
    else:  # transformers < 4.54
        model.config._attn_implementation = name


# ---- loss --------------------------------------------------------------------------------


def causal_lm_loss(hidden: torch.Tensor, weight: torch.Tensor, labels: Optional[torch.Tensor],
                   bias: Optional[torch.Tensor] = None, *,
                   shift_labels: Optional[torch.Tensor] = None,
                   num_items_in_batch: Any = None, ignore_index: int = -100,
                   softcap: Optional[float] = None, scale: float = 1.0,
                   temperature: float = 1.0, **options: Any) -> torch.Tensor:
    """transformers' ``ForCausalLMLoss`` on ``hidden @ weight.T + bias``
    without the logits (``smax.torch.linear_cross_entropy``).

    hidden ``[B, L, D]``, labels ``[B, L]`` (the targets are ``labels``
    shifted left by one, the last position ignored) or ``shift_labels``
    ``[B, L]`` (already shifted). Mean over the tokens whose target is not
    ``ignore_index``; with ``num_items_in_batch`` the sum divided by it. The
    logits are ``softcap * tanh(z * scale / temperature / softcap)`` with
    ``z = hidden @ weight.T + bias`` (no softcap when None). A float16 /
    bfloat16 hidden is widened to float32 (transformers upcasts the logits
    to float32); the loss is float32 (float64 for float64 hidden).
    ``options`` go to ``linear_cross_entropy`` (``lse_square_scale``,
    ``label_smoothing``, ``token_chunk`` ...).
    """
    if shift_labels is None:
        if labels is None:
            raise ValueError("smax causal_lm_loss: give labels or shift_labels")
        labels = torch.nn.functional.pad(labels, (0, 1), value=ignore_index)
        shift_labels = labels[..., 1:]
    h = hidden.reshape(-1, hidden.shape[-1])
    if h.dtype in (torch.float16, torch.bfloat16):
        h = h.float()
    target = shift_labels.reshape(-1).to(device=h.device, dtype=torch.long)
    if target.shape[0] != h.shape[0]:
        raise ValueError(f"smax causal_lm_loss: {h.shape[0]} hidden states and "
                         f"{target.shape[0]} labels")
    reduction = "mean" if num_items_in_batch is None else "sum"
    loss = st.linear_cross_entropy(h, weight, target, bias, ignore_index=ignore_index,
                                   reduction=reduction, softcap=softcap, scale=scale,
                                   temperature=temperature, **options)
    if num_items_in_batch is not None:
        if torch.is_tensor(num_items_in_batch):
            num_items_in_batch = num_items_in_batch.to(loss.device)
        loss = loss / num_items_in_batch
    return loss


def _head_logit_options(config: Any) -> Dict[str, Any]:
    """What the model's head does to ``lm_head(hidden)``, as linear_cross_entropy options."""
    out: Dict[str, Any] = {}
    if getattr(config, "final_logit_softcapping", None):  # Gemma 2 / 3
        out["softcap"] = float(config.final_logit_softcapping)
    if getattr(config, "logit_scale", None) not in (None, 1, 1.0):  # Cohere: logits * s
        out["scale"] = float(config.logit_scale)
    if getattr(config, "logits_scaling", None) not in (None, 1, 1.0):  # Granite: logits / s
        out["temperature"] = float(config.logits_scaling)
    return out


def _check_loss_patchable(model: Any) -> None:
    head = model.get_output_embeddings()
    if not isinstance(head, torch.nn.Linear):
        raise NotImplementedError(f"smax: {type(model).__name__}'s output embeddings are "
                                  f"{type(head).__name__}, not an nn.Linear lm_head")
    loss_type = getattr(model, "loss_type", None)
    if loss_type not in (None, "ForCausalLM") or "_loss_function" in vars(model):
        raise NotImplementedError(f"smax: {type(model).__name__} has loss {loss_type!r} or a "
                                  "custom loss_function; only ForCausalLMLoss is replaced")


def _original_forward(model: Any) -> Any:
    """The forward ``apply`` replaced: an instance-level one it found (an
    accelerate hook ...) or the class's, bound to ``model``."""
    saved = (vars(model).get(_PATCH_ATTR) or {}).get("forward")
    return saved if saved is not None else type(model).forward.__get__(model, type(model))


class _PatchedForward:
    """The instance-level ``forward`` ``apply(loss=...)`` installs.

    It holds only the model it belongs to (``model``) and looks up the
    decoder, the ``lm_head``, the options (``model._smax_patch``, plain data)
    and the original forward on each call, so ``copy.deepcopy(model)`` (which
    deep-copies this object with the model's memo: ``model`` becomes the
    copy), ``resize_token_embeddings`` and ``torch.save(model)`` /
    ``pickle`` all see the model's current weights.
    """

    __slots__ = ("model",)

    def __init__(self, model: Any) -> None:
        self.model = model

    def __getstate__(self) -> Any:
        return self.model

    def __setstate__(self, model: Any) -> None:
        self.model = model

    # what inspect.signature / functools / Trainer's signature-column logic see
    @property
    def __wrapped__(self) -> Any:
        return _original_forward(self.model)

    @property
    def __name__(self) -> str:
        return "forward"

    @property
    def __doc__(self) -> Optional[str]:  # type: ignore[override]
        return getattr(type(self.model).forward, "__doc__", None)

    def __repr__(self) -> str:
        return f"<smax patched forward of {type(self.model).__name__}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _smax_forward(self.model, *args, **kwargs)


def _smax_forward(model: Any, *args: Any, **kwargs: Any) -> Any:
    state = vars(model)[_PATCH_ATTR]
    orig = _original_forward(model)
    labels_at = state["labels_at"]
    labels = kwargs.pop("labels", None)
    if labels is None and len(args) > labels_at:
        labels, args = args[labels_at], args[:labels_at] + (None,) + args[labels_at + 1:]
    if labels is None:  # no loss (transformers ignores shift_labels without labels)
        return orig(*args, **kwargs)
    _check_loss_patchable(model)
    head = model.get_output_embeddings()
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else model.base_model
    return_logits = state["return_logits"]
    head_opts = {**_head_logit_options(model.config), **state["loss_options"]}
    shift_labels = kwargs.pop("shift_labels", None)
    num_items = kwargs.pop("num_items_in_batch", None)
    ignore_index = kwargs.pop("ignore_index", -100)
    return_dict = kwargs.pop("return_dict", None)
    want_logits = (not model.training) if return_logits == "auto" else bool(return_logits)
    if not want_logits and state["has_logits_to_keep"] and "logits_to_keep" not in kwargs:
        kwargs["logits_to_keep"] = torch.empty(0, dtype=torch.long)  # an empty lm_head call
    seen = []
    hook = decoder.register_forward_hook(lambda mod, inp, out: seen.append(out))
    try:
        out = orig(*args, return_dict=True, **kwargs)
    finally:
        hook.remove()
    if not seen:
        raise RuntimeError(f"smax: {type(model).__name__}'s decoder was not called")
    last = seen[-1]
    hidden = getattr(last, "last_hidden_state", None)
    hidden = last[0] if hidden is None else hidden
    loss = causal_lm_loss(hidden, head.weight, labels, head.bias, shift_labels=shift_labels,
                          num_items_in_batch=num_items, ignore_index=ignore_index, **head_opts)
    fields = {k: getattr(out, k) for k in out.__dataclass_fields__}
    fields["loss"] = loss
    if not want_logits:
        fields["logits"] = None
    out = type(out)(**fields)
    if return_dict is None:
        return_dict = getattr(model.config, "return_dict", True)
    return out if return_dict else out.to_tuple()


def _loss_patch_state(model: Any, return_logits: Any,
                      loss_options: Dict[str, Any]) -> Dict[str, Any]:
    _check_loss_patchable(model)
    params = list(inspect.signature(model.forward).parameters)
    if "labels" not in params:
        raise NotImplementedError(f"smax: {type(model).__name__}.forward takes no labels")
    return {"labels_at": params.index("labels"), "has_logits_to_keep": "logits_to_keep" in params,
            "return_logits": return_logits, "loss_options": loss_options}


# ---- apply / unapply ---------------------------------------------------------------------


def apply(model: Any, attention: Optional[str] = "smax",
          loss: Optional[str] = "linear_cross_entropy", normalizer: str = "softmax", *,
          attention_options: Optional[Dict[str, Any]] = None,
          loss_options: Optional[Dict[str, Any]] = None, return_logits: Any = "auto") -> Any:
    """Patches a transformers model instance in place and returns it.

    attention: ``"smax"`` (smax attention for every attention module of the
    model) or None (unchanged). loss: ``"linear_cross_entropy"`` (the fused
    causal-LM loss, for ``*ForCausalLM`` models) or None. normalizer: one of
    ``smax.ATTENTION_NORMALIZERS``; attention_options: more keywords of
    ``smax.torch.attention``; loss_options: more keywords of
    ``smax.torch.linear_cross_entropy`` (``lse_square_scale`` for a z-loss,
    ``label_smoothing`` ...); return_logits: ``"auto"``, True or False (module
    docstring; without logits a ``return_dict=False`` tuple has no logits
    slot: ``(loss, past_key_values, ...)``). A tensor in attention_options
    that requires grad raises ``TypeError`` (it would not be registered with
    the model). Applying twice replaces the first patch.
    """
    if attention not in ("smax", None):
        raise ValueError(f"smax.integrations.transformers.apply: attention must be 'smax' or "
                         f"None, got {attention!r}")
    if loss not in ("linear_cross_entropy", None):
        raise ValueError("smax.integrations.transformers.apply: loss must be "
                         f"'linear_cross_entropy' or None, got {loss!r}")
    if normalizer not in smax.ATTENTION_NORMALIZERS:
        raise ValueError("smax.integrations.transformers.apply: normalizer must be one of "
                         f"{', '.join(smax.ATTENTION_NORMALIZERS)}, got {normalizer!r}")
    if return_logits not in ("auto", True, False):
        raise ValueError("smax.integrations.transformers.apply: return_logits must be 'auto', "
                         f"True or False, got {return_logits!r}")
    if not isinstance(model, transformers.PreTrainedModel):
        raise TypeError("smax.integrations.transformers.apply: expected a transformers "
                        f"PreTrainedModel, got {type(model).__name__}")
    for key, value in (attention_options or {}).items():
        if torch.is_tensor(value) and value.requires_grad:
            raise TypeError(
                f"smax.integrations.transformers.apply: attention_options[{key!r}] is a tensor "
                "that requires grad; apply() does not register it with the model (it would be "
                "missing from model.parameters() and state_dict, so neither trained nor "
                "saved). Pass a float (or a constant tensor); to learn it, keep it in a module "
                "that owns the parameter (e.g. smax.nn.SSMax(learn_s=True) in your own "
                "attention)")
    unapply(model)
    state: Dict[str, Any] = {}
    if attention is not None:
        opts = {"normalizer": normalizer, **(attention_options or {})}
        state["attn_implementation"] = model.config._attn_implementation
        _set_attn_implementation(model, register())
        for m in model.modules():
            object.__setattr__(m, _OPTIONS_ATTR, opts)
    if loss is not None:
        state.update(_loss_patch_state(model, return_logits, dict(loss_options or {})))
        state["forward"] = vars(model).get("forward")
    object.__setattr__(model, _PATCH_ATTR, state)
    if loss is not None:
        object.__setattr__(model, "forward", _PatchedForward(model))
    return model


def unapply(model: Any) -> Any:
    """Undoes ``apply`` (a no-op on an unpatched model); returns the model."""
    state = vars(model).get(_PATCH_ATTR)
    if state is None:
        return model
    if "forward" in state:
        object.__delattr__(model, "forward")
        if state["forward"] is not None:
            object.__setattr__(model, "forward", state["forward"])
    if "attn_implementation" in state:
        _set_attn_implementation(model, state["attn_implementation"] or "eager")
        for m in model.modules():
            if _OPTIONS_ATTR in vars(m):
                object.__delattr__(m, _OPTIONS_ATTR)
    object.__delattr__(model, _PATCH_ATTR)
    return model
