"""How each token is picked: the sampling settings, per-row seeded streams, the choice itself.

Why per-row streams: a trial's text must not depend on which other trials share its batch, its
shard, or whether the run was resumed. Every output row draws from its own generator, seeded from
(trial key, sample index), one uniform number per step (inverse CDF), on the host; only those b
numbers go to the device, where the logits, softmax, top-k and top-p stay.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor


class SamplingError(ValueError):
    """A sampling setting outside its range (reported as one line, exit 2, by the CLIs)."""


@dataclass(frozen=True)
class Sampling:
    """How to pick each token. ``temperature == 0`` is greedy; ``top_k == 0`` and ``top_p == 1`` are off."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0

    def __post_init__(self) -> None:
        t, p, k = self.temperature, self.top_p, self.top_k
        if not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
            raise SamplingError(f"temperature must be a finite number >= 0 (0 = greedy), got {t}")
        if not isinstance(p, (int, float)) or not (0 < p <= 1):
            raise SamplingError(f"top_p must be in (0, 1], got {p}")
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise SamplingError(f"top_k must be an integer >= 0 (0 = off), got {k}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def to_dict(self) -> dict[str, Any]:
        return {"temperature": float(self.temperature), "top_p": float(self.top_p), "top_k": int(self.top_k),
                "do_sample": not self.greedy}


GREEDY = Sampling()


def stream_seed(key: str | int, sample: int = 0) -> int:
    """The RNG seed of output row (key, sample): a stable 63-bit hash, independent of batching."""
    return int.from_bytes(hashlib.sha256(f"{key}:{sample}".encode()).digest()[:8], "big") >> 1


def check_stops(stop: Sequence[str]) -> tuple[str, ...]:
    if isinstance(stop, str):
        stop = (stop,)
    bad = [s for s in stop if not isinstance(s, str) or s == ""]
    if bad:
        raise SamplingError(f"stop strings must be non-empty strings, got {bad[0]!r}")
    return tuple(stop)


# ---------------------------------------------------------------- token choice
def _uniforms(gens: Sequence[torch.Generator | None], device: Any) -> Tensor:
    """One draw per row from its own (CPU) stream, then to the device: b floats cross, nothing else."""
    return torch.tensor([float(torch.rand((), generator=g)) if g is not None else 0.0 for g in gens], device=device)


def choose(logits: Float[Tensor, "b vocab"], sampling: Sampling, gens: Sequence[torch.Generator | None]) -> Int[Tensor, " b"]:
    """Next token per row, on the logits' device. Each row draws one uniform number from its own
    generator (inverse CDF), so its choice depends only on its own logits and stream."""
    if sampling.greedy:
        return logits.argmax(-1)
    x = logits.float() / sampling.temperature
    if sampling.top_k:
        kth = x.topk(min(sampling.top_k, x.shape[-1]), dim=-1).values[:, -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    probs = torch.softmax(x, dim=-1)
    if sampling.top_p < 1:
        sp, idx = probs.sort(dim=-1, descending=True)
        drop = (sp.cumsum(-1) - sp) >= sampling.top_p  # keep the smallest set reaching top_p
        probs = probs.scatter(-1, idx, sp.masked_fill(drop, 0.0))
    cdf = probs.cumsum(-1)
    u = _uniforms(gens, logits.device) * cdf[:, -1]
    return torch.searchsorted(cdf, u[:, None]).squeeze(-1).clamp_(max=logits.shape[-1] - 1)


def resolve_sampling(sampling: Sampling | None = None, *, temperature: float | None = None, top_p: float | None = None,
                     top_k: int | None = None, do_sample: bool | None = None) -> Sampling:
    """A ``Sampling`` from loose keywords (``do_sample=False`` forces greedy, as in transformers)."""
    if sampling is not None:
        return sampling
    t = temperature if temperature is not None else (1.0 if do_sample else 0.0)
    if do_sample is False:
        t = 0.0
    return Sampling(float(t), 1.0 if top_p is None else top_p, 0 if top_k is None else top_k)
