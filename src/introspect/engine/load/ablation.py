"""Directional ablation as a model variant: a direction projected out of everything written into
the residual stream, at every layer and position (Arditi et al. 2024, "Refusal in language models
is mediated by a single direction").

Why on the writes, not the stream: each component's output c becomes c − r̂ r̂ᵀ c (the embedding,
every attention output, every MLP output), which is what orthogonalising their weights does, so
the stream never gains a component along r̂ that a component wrote. The stream itself is never
projected, so a concept vector injected at ``blocks.L.hook_resid_post`` keeps every part of it,
its component along r̂ included: the order at the injection layer is "components write (ablated),
then the injection adds", and nothing after removes what was injected.

The hooks are permanent (they survive ``model.hooks()`` contexts and ``reset_hooks()``) and fire on
the toolkit's direct HF calls as on the bridge's own forward, so every task, the sweep and the
Inspect provider run on the ablated model. The model gets a name and fingerprint of its own
(``+ablate-<sha8>``), so results folders and vector caches keep it apart from the original.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from introspect.engine.load.models import ABLATION_NOTE, ablated_info, model_info
from introspect.engine.tensor_hash import tensor_sha256

__all__ = ["ABLATION_NOTE", "AblationError", "Direction", "ablation_hook", "project_out", "remove_direction",
           "unit_vector", "write_hooks"]


class AblationError(ValueError):
    """A direction that cannot be removed from this model (width, norm, already ablated)."""


@dataclass(frozen=True)
class Direction:
    """A unit direction to remove, where it was read and how it was chosen."""

    name: str  # "refusal", or the file's word
    vector: Float[Tensor, " d_model"]  # unit norm, float32, CPU
    layer: int  # the layer whose residual it was read at
    position: int = -1  # the post-instruction position it was read at (from the end of the prompt)
    data: dict[str, Any] = field(default_factory=dict)  # the requests it was computed from
    selection: dict[str, Any] = field(default_factory=dict)  # the selection's figures

    @property
    def sha256(self) -> str:
        return tensor_sha256(self.vector)

    def record(self) -> dict[str, Any]:
        """What run headers say about the ablation."""
        return {"direction": self.name, "sha256": self.sha256, "layer": self.layer, "position": self.position,
                "data": dict(self.data), "selection": dict(self.selection)}


def write_hooks(model: Any) -> list[str]:
    """The hook points where components write into the residual stream: the embedding (the first
    block's input) and each block's attention and MLP outputs."""
    n = int(model.cfg.n_layers)
    return ["blocks.0.hook_resid_pre"] + [f"blocks.{i}.hook_{part}_out" for i in range(n) for part in ("attn", "mlp")]


def project_out(act: Float[Tensor, "... d_model"], r: Float[Tensor, " d_model"]) -> Float[Tensor, "... d_model"]:
    """``act`` minus its component along the unit vector ``r`` (computed in float32)."""
    a = act.float()
    return (a - (a @ r)[..., None] * r).to(act.dtype)


def ablation_hook(r: Float[Tensor, " d_model"]):
    """A forward hook projecting the unit vector ``r`` out of its activation (``r`` moved to each
    device once)."""
    on: dict[Any, Tensor] = {}

    def hook(act: Tensor, hook: Any) -> Tensor:
        if act.device not in on:
            on[act.device] = r.to(act.device, torch.float32)
        return project_out(act, on[act.device])
    return hook


def unit_vector(model: Any, direction: Direction) -> Float[Tensor, " d_model"]:
    """The direction as a float32 CPU unit vector, checked against ``model`` (its width, its norm,
    and no direction removed before)."""
    d = int(model.cfg.d_model)
    v = direction.vector.detach().to("cpu", torch.float32)
    if tuple(v.shape) != (d,):
        raise AblationError(f"direction {direction.name!r} has shape {tuple(v.shape)}, this model's residual "
                            f"stream needs [{d}]")
    norm = float(v.norm())
    if not abs(norm - 1.0) < 1e-3:
        raise AblationError(f"direction {direction.name!r} has norm {norm:.4g}; pass a unit vector")
    if getattr(model, "introspect_ablation", None):
        raise AblationError("this model already has a direction removed; load it again to remove another")
    return v / norm


def remove_direction(model: Any, direction: Direction) -> Any:
    """Attach the ablation to ``model`` in place and give it its own identity; returns the model."""
    v = unit_vector(model, direction)
    for name in write_hooks(model):
        model.add_hook(name, ablation_hook(v), is_permanent=True)
    direction = replace(direction, vector=v)
    model.introspect_info = ablated_info(model_info(model), direction.record())
    model.introspect_ablation = direction.record()
    return model
