"""Fast attention under the TransformerLens bridge, eager only where something needs it.

Why: the bridge forces eager attention and, for rotary models, re-implements attention step by
step so that ``hook_attn_scores`` and ``hook_pattern`` fire. Nothing in this toolkit hooks
attention internals (injection and extraction use the residual stream), yet every call paid for
it: b·h·s² scores per layer and ~35% of a decode step on a CPU. ``enable`` switches the HF model
to ``sdpa`` and lets each attention component run the HF attention module itself (``hook_in`` →
HF sdpa → ``hook_out``, as TransformerLens's base attention bridge does) whenever none of its
internal hook points has a hook attached. Attach one (``hook_pattern``, ``hook_rot_q``,
``hook_z``, a full ``run_with_cache``) and that call takes the bridge's own eager path again, so
every hook fires as before; the masks sdpa builds (boolean 4-D or none) are ones that path reads.
Residual-stream hooks sit outside attention and fire on both paths.

Left-padded rows start with query positions that may attend to nothing (no shared prefix, no
valid key yet). transformers 5.24's sdpa mask no longer repairs them; CPU kernels return 0 there,
some CUDA kernels NaN, which then spreads along the row through later layers. ``safe_mask`` lets
such a query attend to every key instead: its output is never read (it is padding) and is finite,
and every other row's mask, hence its output, is unchanged bit for bit.

Models whose attention sdpa cannot express (Gemma-2's logit soft-capping) or whose HF class has
no sdpa keep eager; ``"eager"`` on request keeps the bridge exactly as TransformerLens boots it.
"""

from __future__ import annotations

from typing import Any

CHOICES = ("auto", "sdpa", "eager")


class AttentionError(ValueError):
    """An attention implementation this toolkit cannot run."""


def check_choice(choice: str | None) -> str:
    choice = choice or "auto"
    if choice not in CHOICES:
        raise AttentionError(f"unknown attention implementation {choice!r}; use one of {', '.join(CHOICES)}")
    return choice


def best(hf_model: Any) -> str:
    """The fastest implementation that computes this model's attention exactly: sdpa unless the
    model soft-caps attention logits or its class does not support sdpa."""
    cfg = hf_model.config
    for c in (cfg, getattr(cfg, "text_config", None)):
        if c is not None and getattr(c, "attn_logit_softcapping", None):
            return "eager"  # sdpa has no soft-capping; HF itself falls back to eager here
    return "sdpa" if getattr(hf_model, "_supports_sdpa", False) else "eager"


_FAST: dict[type, type] = {}


def _fast_class(cls: type) -> type:
    """A subclass of the bridge's attention component that runs HF attention when unhooked."""
    if cls in _FAST:
        return _FAST[cls]
    from transformer_lens.model_bridge.generalized_components.attention import AttentionBridge

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if any(_hooked(hp) for hp in self._introspect_internal):
            return cls.forward(self, *args, **kwargs)  # the bridge's own path: every hook fires
        if kwargs.get("attention_mask") is not None:
            kwargs["attention_mask"] = safe_mask(kwargs["attention_mask"])
        return AttentionBridge.forward(self, *args, **kwargs)  # hook_in -> HF attention -> hook_out

    fast = type(f"Fast{cls.__name__}", (cls,), {"forward": forward, "__module__": __name__,
                                                 "__doc__": f"{cls.__name__} running HF attention when unhooked."})
    _FAST[cls] = fast
    return fast


def safe_mask(mask: Any) -> Any:
    """A 4-D attention mask whose query rows that attend to nothing attend to every key instead
    (boolean: True = attend; additive float: 0 = attend). No data-dependent branch, so no host
    sync on a GPU; an elementwise pass over the mask, small beside the attention it gates."""
    import torch

    if not isinstance(mask, torch.Tensor) or mask.dim() != 4:
        return mask
    if mask.dtype == torch.bool:
        return mask | ~mask.any(dim=-1, keepdim=True)
    return mask.masked_fill(torch.isneginf(mask).all(dim=-1, keepdim=True), 0.0)


def _hooked(hp: Any) -> bool:
    return bool(hp._forward_hooks or hp._forward_pre_hooks or hp._backward_hooks
                or getattr(hp, "_backward_pre_hooks", None))


def enable(bridge: Any, choice: str | None = "auto") -> str:
    """Set ``bridge``'s attention to ``choice`` (``auto`` = ``best``); return what now runs.

    Mutates the bridge's modules in place (their class gains the unhooked fast path); calling it
    again with ``"eager"`` restores TransformerLens's own behaviour.
    """
    from transformer_lens.hook_points import HookPoint
    from transformer_lens.model_bridge.generalized_components.attention import AttentionBridge

    choice = check_choice(choice)
    hf = bridge.original_model
    impl = best(hf) if choice == "auto" else choice
    if impl != "eager":
        try:
            hf.set_attn_implementation(impl)
        except (ValueError, ImportError, AttributeError):
            impl = "eager"
        if getattr(hf.config, "_attn_implementation", "eager") != impl:
            impl = "eager"  # the class refused it quietly (e.g. Falcon): keep what runs
    if impl == "eager":
        hf.set_attn_implementation("eager")
    for mod in bridge.modules():
        if not isinstance(mod, AttentionBridge):
            continue
        base = _FAST_BASE.get(type(mod), type(mod))
        if impl == "eager":
            object.__setattr__(mod, "__class__", base)
            continue
        internal = [hp for name, hp in mod.named_modules()
                    if isinstance(hp, HookPoint) and name not in ("hook_in", "hook_out")]
        object.__setattr__(mod, "_introspect_internal", internal)
        fast = _fast_class(base)
        _FAST_BASE[fast] = base
        object.__setattr__(mod, "__class__", fast)
    bridge.introspect_attention = impl
    return impl


_FAST_BASE: dict[type, type] = {}


def implementation(bridge: Any) -> str:
    """What attention runs when no attention-internal hook is attached."""
    impl = getattr(bridge, "introspect_attention", None)
    return impl or getattr(bridge.original_model.config, "_attn_implementation", "eager") or "eager"
