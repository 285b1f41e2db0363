"""Skip bridge work that no hook will see: normalisation statistics and per-call signature reads.

Why: outside attention (see ``attention.py``) the bridge still pays twice per block and step for
hooks nobody attached. Its RMSNorm/LayerNorm component on the native path computes the variance,
``rsqrt`` and ``sqrt`` for ``hook_scale``/``hook_normalized`` and then calls the HF norm anyway,
whose output it returns when those hooks only observe; and each block runs ``inspect.signature``
on the HF layer's ``forward`` to filter its keyword arguments. Together about a tenth of a decode
step on the default model.

``enable`` swaps each such component's class for a subclass that (norm) runs ``hook_in`` → HF
norm → ``hook_out`` while ``hook_scale`` and ``hook_normalized`` have no hook, which is the very
tensor the bridge returns, so outputs are bit-identical; and (block) reads the HF forward's
signature once per forward function. Attach a hook to ``hook_scale``/``hook_normalized`` (a
full ``run_with_cache`` does) and the norm takes the bridge's own path again. Norms on the
bridge's from-scratch path (``use_native_layernorm_autograd`` off: GPT-2, NeoX and Falcon
LayerNorms) are left alone: switching them to HF's kernel would change numerics, not just speed.
"""

from __future__ import annotations

import inspect
from typing import Any

from .attention import _hooked

_FAST: dict[type, type] = {}
_BASE: dict[type, type] = {}


def _native(norm: Any) -> bool:
    """Whether the bridge itself would return the HF norm's output when its hooks only observe."""
    return bool(norm.use_native_layernorm_autograd or getattr(norm.config, "layer_norm_folding", False))


def _norm_forward(base: type):
    def forward(self, hidden_states: Any, **kwargs: Any) -> Any:
        if kwargs or _hooked(self.hook_scale) or _hooked(self.hook_normalized):
            return base.forward(self, hidden_states, **kwargs)  # every hook fires as before
        x = self.hook_in(hidden_states)
        out = self.original_component(x)
        return self.hook_out(out if out.dtype == x.dtype else out.to(x.dtype))
    return forward


def _block_filter(base: type):
    def _filter_kwargs_for_forward(self, kwargs: dict[str, Any], num_positional_args: int = 0) -> dict[str, Any]:
        comp = self.original_component
        if comp is None:
            return kwargs
        fwd = comp.forward
        key = getattr(fwd, "__func__", fwd)  # stable for a class method and for an instance patch
        cached = self.__dict__.get("_introspect_sig")
        if cached is None or cached[0] is not key:
            try:
                params = inspect.signature(fwd).parameters
            except (ValueError, TypeError):
                return kwargs  # as the bridge does: pass everything through
            var_kw = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params.values())
            cached = (key, list(params), var_kw)
            self.__dict__["_introspect_sig"] = cached
        _, names, var_kw = cached
        if var_kw:
            return kwargs
        taken = set(names[:num_positional_args])
        return {k: v for k, v in kwargs.items() if k in names and k not in taken}
    return _filter_kwargs_for_forward


def _fast_class(base: type, attr: str, make) -> type:
    if base not in _FAST:
        fast = type(f"Fast{base.__name__}", (base,), {attr: make(base), "__module__": __name__,
                                                     "__doc__": f"{base.__name__} skipping unobserved work."})
        _FAST[base], _BASE[fast] = fast, base
    return _FAST[base]


def enable(bridge: Any, on: bool = True) -> int:
    """Give ``bridge``'s native-path norms and its blocks the fast path (``on=False`` restores the
    bridge's own classes); return how many components now run it."""
    from transformer_lens.model_bridge.generalized_components.block import BlockBridge
    from transformer_lens.model_bridge.generalized_components.normalization import (
        NormalizationBridge,
    )

    n = 0
    for mod in bridge.modules():
        base = _BASE.get(type(mod), type(mod))
        if isinstance(mod, NormalizationBridge) and _native(mod):
            new = _fast_class(base, "forward", _norm_forward) if on else base
        elif isinstance(mod, BlockBridge):
            new = _fast_class(base, "_filter_kwargs_for_forward", _block_filter) if on else base
        else:
            continue
        object.__setattr__(mod, "__class__", new)
        n += on
    return n
