"""The output projection in float32 for half-precision models.

Why: a bf16 logit keeps 8 significant bits, so near a logit of 16 neighbouring values lie
0.0625 apart (0.125 past 32). First-token P(yes), the chosen token's log-probability and greedy
near-ties then move in ~0.1-nat steps that are rounding, not the model. ``enable`` gives the HF
model's output layer (``get_output_embeddings()``, which the bridge wraps as ``unembed``) a
float32 copy of its weight and bias and a forward computing ``F.linear(x.float(), W32, b32)``.
Every reading gets float32 logits: decoding, next-token log-probs, the bridge's own forward and
``run_with_cache``; ``unembed.hook_in``/``hook_out`` fire as before (``hook_out`` sees float32).

Cost: d_vocab × d_model × 4 bytes on the output layer's device (a 128k × 8192 head: 4 GiB),
counted when weights are placed (``planned_bytes``); the logits come out in float32 (4 bytes a
vocabulary entry instead of 2), which the batch plan already counts (``devices.row_bytes``).
"""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

HALF = (torch.bfloat16, torch.float16)
_KEY = "_introspect_head32_key"


def output_linear(hf: torch.nn.Module) -> torch.nn.Module | None:
    """The module holding the output projection's weight (under the bridge's wrapper if booted),
    or None when the model has no plain linear head."""
    out = hf.get_output_embeddings()
    inner = getattr(out, "original_component", None)
    lin = out if inner is None else inner
    w = getattr(lin, "weight", None)
    return lin if isinstance(w, torch.Tensor) and w.dim() == 2 else None


def _fp32(lin: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The float32 weight and bias, copied again only if the module's own changed (a moved
    model, weights processed in place or replaced), so they never go stale."""
    w, b = lin.weight, getattr(lin, "bias", None)
    key = (w.data_ptr(), w._version, w.device, None if b is None else (b.data_ptr(), b._version))
    if lin.__dict__.get(_KEY) != key:
        lin._buffers["introspect_weight32"] = w.detach().float()
        lin._buffers["introspect_bias32"] = None if b is None else b.detach().float()
        lin.__dict__[_KEY] = key
    return lin._buffers["introspect_weight32"], lin._buffers["introspect_bias32"]


def _forward32(self: torch.nn.Module, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    w, b = _fp32(self)
    return F.linear(x.to(w.dtype), w, b)


def enable(hf: torch.nn.Module, on: bool | None = None) -> int:
    """Project to logits in float32: ``on`` None = when the head's weights are bf16/fp16.
    Returns the bytes the float32 copy takes (0 when off). Accelerate's device hook, if the
    module has one, keeps running around the new forward."""
    lin = output_linear(hf)
    if lin is None or lin.weight.device.type == "meta":
        return 0
    if on is None:
        on = lin.weight.dtype in HALF
    if not on or lin.weight.dtype == torch.float32:
        return 0
    lin.register_buffer("introspect_weight32", None, persistent=False)  # never in a state dict
    lin.register_buffer("introspect_bias32", None, persistent=False)
    w, b = _fp32(lin)
    fwd = types.MethodType(_forward32, lin)
    if hasattr(lin, "_hf_hook") and hasattr(lin, "_old_forward"):
        lin._old_forward = fwd  # accelerate's wrapper calls this between its pre and post hooks
    else:
        lin.forward = fwd
    return w.numel() * 4 + (0 if b is None else b.numel() * 4)


def is_fp32(model: Any) -> bool:
    """Whether the model (bridge or HF) projects to logits in float32."""
    hf = getattr(model, "original_model", model)
    lin = output_linear(hf)
    return lin is not None and (lin.weight.dtype == torch.float32 or "introspect_weight32" in lin._buffers)


def planned_bytes(folder: Path | str, dtype: torch.dtype, on: bool | None = None) -> int:
    """Bytes ``enable`` will add for the model in ``folder`` at ``dtype`` (read from its
    config.json before any weight loads, so placement can count them)."""
    if not (on if on is not None else dtype in HALF) or dtype == torch.float32:
        return 0
    try:
        cfg = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        return 0
    cfg = cfg.get("text_config") or cfg
    vocab = cfg.get("vocab_size") or 0
    width = cfg.get("hidden_size") or cfg.get("n_embd") or cfg.get("d_model") or 0
    return int(vocab) * int(width) * 4


def note(extra: int) -> str:
    """The run-header note stating the cost."""
    return f"output projection in float32 (+{extra / 2**20:.1f} MiB for its float32 weight copy)"
