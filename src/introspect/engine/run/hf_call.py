"""The HuggingFace model call under the bridge: one forward with positions from the mask, the KV
cache under the name this transformers version uses, and only the last logits unembedded.

Why its own module: decoding, scoring and training all call the wrapped HF model directly (its
blocks are the bridge's components, so hooks fire under their TransformerLens names), and each
needs the same answers to "what is the cache argument called" and "may I keep only the last
logits", asked of the class's signature once, never by a failing call that would fire hooks twice.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from torch import Tensor


def forward(model: Any, ids: Tensor, mask: Tensor, cache: Any | None) -> tuple[Tensor, Any]:
    """One call of the wrapped HF model (hooks fire under TL names); the last position's logits,
    float32, left on the device. Positions come from the mask, so left padding and a padded gap
    after a shared prefix both get the right positions."""
    dev = model.cfg.device
    mask = mask.to(dev)
    pos = (mask.long().cumsum(-1) - 1).clamp_(min=0)[:, -ids.shape[1]:]
    kw = dict(input_ids=ids.to(dev), attention_mask=mask, position_ids=pos, **cache_kwargs(model, cache))
    if keeps_last_logits(type(model.original_model)):  # unembedding every prompt token is ~20% of a prefill
        kw["logits_to_keep"] = 1
    out = model.original_model(**kw)
    return out.logits[:, -1].float(), out.get(cache_arg(type(model.original_model)))


@functools.cache
def cache_arg(hf_class: type) -> str:
    """What the HF class calls its KV cache: ``cache`` in transformers 5.x (``past_key_values``
    there only warns a FutureWarning, and goes in 5.40), ``past_key_values`` before."""
    return "cache" if "cache" in inspect.signature(hf_class.forward).parameters else "past_key_values"


def cache_kwargs(model: Any, cache: Any | None) -> dict[str, Any]:
    """The KV-cache keyword arguments of one HF forward call, under the name this class uses."""
    return {cache_arg(type(model.original_model)): cache, "use_cache": cache is not None}


@functools.cache
def keeps_last_logits(hf_class: type) -> bool:
    """Whether the HF model class's forward takes ``logits_to_keep`` (asked of its signature once
    per class, not by a failing call, so hooks never fire twice for one step)."""
    return "logits_to_keep" in inspect.signature(hf_class.forward).parameters


def new_cache(model: Any) -> Any:
    """An empty KV cache, told the model's config where this transformers version takes one."""
    from transformers import DynamicCache

    try:
        return DynamicCache(config=model.original_model.config)
    except TypeError:
        return DynamicCache()
