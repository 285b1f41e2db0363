"""Everything that decides an adapter, as one frozen value: recorded in its metadata and checkpoints.

Why a module of its own: the loop, the plan and the gates all read it, and a resume compares it
whole (another config is another adapter).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

from introspect.train import data as D
from introspect.train import split as S


@dataclass(frozen=True)
class TrainConfig:
    """Everything that decides the adapter. Recorded in the adapter's metadata and checkpoints."""

    layer: int
    steps: int = 400
    batch_size: int = 10
    rank: int = 8
    lora_alpha: float = 16.0
    lr: float = 2e-3
    warmup: int = 10
    seed: int = 0
    strength: tuple[float, float] = (0.15, 1.25)  # resid units
    n_trials: int = 10  # "Trial N" numbers drawn from 1..n_trials
    replay_frac: float = 0.3
    replay_prompts: int = 1000  # how many neutral questions are replayed (each in R.SHAPES: 5 items)
    replay_heldout: int = 12  # questions (with all their items: >= 50) kept for the damage gates, at most a fifth
    replay_tokens: int = 40
    yes_no_heldout: float = 0.25  # share of the content rows' yes/no questions kept for the damage gates
    name_weight: float = 3.0  # loss weight of the concept name's tokens in answers that name it
    decision_weight: float = 1.0  # loss weight of a detection row's first answer token ("Yes"/"No": the decision)
    gates: bool = True  # measure the damage gates (train.gates) after training
    replay_distill: bool = True  # replay rows learn the base model's distributions (KL), not just its tokens
    replay_steered: float = 0.0  # share of replay rows with a training concept injected (teacher: the base model, same injection)
    replay_weight: float = 8.0  # loss weight of a replay row against a detection row (1.0 before 2026-11-27)
    heldout_frac: float = 0.1  # share of the training word list held out too (targets always are)
    phrasings: tuple[str, ...] = D.PHRASINGS
    checkpoint_every: int = 20
    share_prefix: bool = True
    share_trunk: bool = True  # blocks 0..layer run once for teacher and student, and once per shared prefix (train.trunk; exact)
    words_file: str | None = None
    train_words_file: str | None = None
    mix: tuple[tuple[str, float], ...] = D.DEFAULT_MIX
    split: str = "meaning"  # "meaning" (train.split) or "spelling" (the old plural-only rule)
    max_cos: float = S.MAX_COS  # meaning split: held-out words' cosine to every training word stays below
    split_layer: int | None = None  # meaning split: the layer whose vectors judge nearness (None: ``layer``)
    read_dims: int = 0  # >0: each LoRA map reads only this many input directions, those injections move and replay text leaves empty (train.subspace)

    # Defaults that changed: a record written without the field was made with this value, not today's.
    PAST_DEFAULTS: ClassVar[dict[str, Any]] = {"replay_weight": 1.0}

    def __post_init__(self) -> None:
        bad = []
        for name in ("steps", "batch_size", "rank", "n_trials", "checkpoint_every", "replay_tokens"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                bad.append(f"{name} must be an integer >= 1, got {v!r}")
        if self.batch_size < 2:
            bad.append(f"batch_size must be at least 2, got {self.batch_size}")
        for name in ("lr", "lora_alpha", "name_weight", "decision_weight", "replay_weight"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                bad.append(f"{name} must be a finite number > 0, got {v!r}")
        lo, hi = self.strength
        if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo <= hi):
            bad.append(f"strength range must satisfy 0 < lo <= hi, got {self.strength}")
        if not 0 <= self.yes_no_heldout < 1:
            bad.append(f"yes_no_heldout must be in [0, 1), got {self.yes_no_heldout}")
        if isinstance(self.replay_steered, bool) or not 0 <= self.replay_steered <= 1:
            bad.append(f"replay_steered must be in [0, 1], got {self.replay_steered!r}")
        if self.replay_steered > 0 and not self.replay_distill:
            bad.append("replay_steered needs replay_distill (a steered row's target is the base model under the "
                       "same injection, not its clean answer)")
        if not 0 <= self.replay_frac < 1:
            bad.append(f"replay_frac must be in [0, 1), got {self.replay_frac}")
        odd = [k for k, _ in self.mix if k not in D.KINDS]
        if odd or not self.mix:
            bad.append(f"unknown row kind {odd[:1]} in mix; use {', '.join(D.KINDS)}")
        shares = [v for _, v in self.mix]
        if any(isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0
               for v in shares) or not sum(shares) > 0:
            bad.append(f"mix shares must be numbers >= 0 with a positive sum, got {shares}")
        unknown = [p for p in self.phrasings if p not in D.ALL_PHRASINGS]
        if unknown or not self.phrasings:
            bad.append(f"unknown phrasing {unknown[:1]}; use {', '.join(D.ALL_PHRASINGS)}")
        if self.split not in S.RULES:
            bad.append(f"split must be one of {', '.join(S.RULES)}, got {self.split!r}")
        if isinstance(self.max_cos, bool) or not isinstance(self.max_cos, (int, float)) or not 0 < self.max_cos < 1:
            bad.append(f"max_cos must be in (0, 1), got {self.max_cos!r}")
        rd = self.read_dims
        if isinstance(rd, bool) or not isinstance(rd, int) or rd < 0:
            bad.append(f"read_dims must be an integer >= 0 (0: every input direction), got {rd!r}")
        sl = self.split_layer
        if sl is not None and (isinstance(sl, bool) or not isinstance(sl, int) or sl < 0):
            bad.append(f"split_layer must be a layer index >= 0 or None (the trained layer), got {sl!r}")
        if bad:
            raise D.TrainDataError(bad[0])

    @property
    def split_at(self) -> int:
        """The layer whose vectors judge the meaning split: ``split_layer``, else the trained layer."""
        return self.layer if self.split_layer is None else self.split_layer

    def to_dict(self) -> dict[str, Any]:
        return as_record(self)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> TrainConfig:
        return from_record(TrainConfig, d)


# ---------------------------------------------------------------- named recipes

# The flag sets docs/positive-control.md measured, by one name, so a reader reruns the page's
# lead recipe without copying five flags. Each is a set of TrainConfig fields over the defaults.
#   seed:     the defaults; detects on held-out concepts in the seed framing only.
#   two-turn: run F with the Yes/No decision weighted 5x (2026-12-03): two_turn on every other
#             step, a larger Gaussian "no" share; "detected and identified" in two_turn on 3 of 3
#             trainings at layer 24 of SmolLM2-135M, and in the never-trained seed framing.
_TWO_TURN_MIX = {"gaussian": 0.32, "clean": 0.06, "suggested": 0.05, "choice_none": 0.07}
RECIPES: dict[str, dict[str, Any]] = {
    "seed": {},
    "two-turn": {"phrasings": tuple(p for q in D.PHRASINGS for p in (q, D.TWO_TURN)),
                 "mix": tuple((k, _TWO_TURN_MIX.get(k, v)) for k, v in D.DEFAULT_MIX),
                 "decision_weight": 5.0},
}


def recipe(name: str, layer: int, **overrides: Any) -> TrainConfig:
    """The named recipe's config at ``layer``; ``overrides`` (any TrainConfig field) win."""
    if name not in RECIPES:
        raise D.TrainDataError(f"unknown recipe {name!r}; use one of {', '.join(RECIPES)}")
    return TrainConfig(layer=layer, **(RECIPES[name] | overrides))


# ---------------------------------------------------------------- any frozen config as a JSON record


def as_record(cfg: Any) -> dict[str, Any]:
    """A frozen config dataclass as the JSON-safe dict its metadata and checkpoints record."""
    return json.loads(json.dumps(asdict(cfg)))


def _tupled(v: Any) -> Any:
    return tuple(_tupled(x) for x in v) if isinstance(v, list) else v


def from_record(cls: type, d: dict[str, Any]) -> Any:
    """``cls`` back from its record: unknown keys dropped, fields added since read as their defaults
    (or, where a default changed since, as ``cls.PAST_DEFAULTS`` says it was), JSON lists turned back
    into the tuples a frozen dataclass holds."""
    names = {f.name for f in fields(cls)}
    past = {k: v for k, v in getattr(cls, "PAST_DEFAULTS", {}).items() if k not in d}
    return cls(**past, **{k: _tupled(v) for k, v in d.items() if k in names})


def same_record(old: dict[str, Any] | None, cfg: Any) -> bool:
    """Whether a recorded config is ``cfg`` (another config is another adapter: a resume refuses it)."""
    try:
        return old is not None and as_record(from_record(type(cfg), old)) == as_record(cfg)
    except (TypeError, ValueError):
        return False
