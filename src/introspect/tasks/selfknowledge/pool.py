"""The Delegate Game's question pool: arithmetic with options or in free text, its difficulty
matched to each model, an anchor set every model answers, and the stratified draw of phase-1
and game questions from it.

Why free text (``--option short_answer=true``): on small models a multiple-choice baseline reads
the answer-letter prior (rotations remove it from the truth, not from the game's letters); asked
without options, answered "Answer: N" and graded by the number stated, no letter exists anywhere.

Why match difficulty (``--option calibrate_pool=true``): the game's figures (P(T) AUROC, MCC,
lift) need both right and wrong baseline answers, and at 5% right they rest on a handful of
right ones. ``calibrate`` walks a ladder of uniform settings (digits, terms, operators) and keeps
the one whose baseline accuracy is closest to 0.5 within [0.4, 0.6], recording every step. Why
uniform knobs within a pool: with digits drawn per question the digit count predicts the error,
and a model that delegates the long questions would look introspective. Why anchors (``--option
anchors=N``): calibrated pools differ between models, so no game item is shared; the anchors, one
fixed setting and the same questions for every model at a seed, are played as their own variant
(``anchor-…``) and give cross-model comparisons common items.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from introspect.data import (
    DataError,
    MCQuestion,
    ShortQuestion,
    arithmetic_mc,
    arithmetic_short,
    load_questions,
)
from introspect.tasks.base import ConfigError, RunContext
from introspect.tasks.selfknowledge.common import _knob, _opt, arith_tag

Question = MCQuestion | ShortQuestion


@dataclass(frozen=True)
class Knobs:
    """One arithmetic setting; ``digits`` / ``terms`` an int (uniform) or a (lo, hi) range."""

    digits: Any = 2
    terms: Any = 2
    ops: str = "+-"

    @property
    def tag(self) -> str:
        return arith_tag(self.digits, self.terms, self.ops)


# easiest to hardest: a guess at the order for small models; the path records what each scored
LADDER = (Knobs(1, 2, "+-"), Knobs(2, 2, "+-"), Knobs(2, 3, "+-"), Knobs(3, 2, "+-"), Knobs(3, 3, "+-"),
          Knobs(2, 2, "+-*"), Knobs(2, 3, "+-*"), Knobs(3, 3, "+-*"), Knobs(3, 4, "+-*"), Knobs(4, 4, "+-*"))
ANCHOR = Knobs(2, 2, "+-")  # the anchors' setting: the same for every model


@dataclass(frozen=True)
class Step:
    knobs: Knobs
    right: int
    n: int

    @property
    def accuracy(self) -> float:
        return self.right / self.n if self.n else float("nan")


@dataclass(frozen=True)
class Calibration:
    """The chosen setting, its accuracy, whether that lies in the band, and every step taken."""

    chosen: Knobs
    accuracy: float
    in_band: bool
    path: tuple[Step, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"chosen": self.chosen.tag, "accuracy": self.accuracy, "in_band": self.in_band,
                "path": [[s.knobs.tag, s.right, s.n] for s in self.path]}


def calibrate(score: Callable[[Knobs], tuple[int, int]], ladder: Sequence[Knobs] = LADDER, start: int = 1,
              target: float = 0.5, band: tuple[float, float] = (0.4, 0.6)) -> Calibration:
    """Walk ``ladder`` (easiest first) from ``start``: harder while the accuracy ``score(knobs)``
    (right, graded) is above ``target``, easier while below, until the walk turns back onto a
    setting already scored (the crossing is then bracketed), hits an end, or meets the target;
    keep the scored setting closest to ``target`` inside ``band`` (else closest overall,
    ``in_band`` False). Each setting is scored at most once; the path keeps the order."""
    if not ladder:
        raise ValueError("calibrate needs a non-empty ladder of settings")
    if not 0 <= start < len(ladder):
        raise ValueError(f"start={start} is outside the ladder (0..{len(ladder) - 1})")
    if not band[0] <= target <= band[1]:
        raise ValueError(f"target {target} must lie in the band {band}")
    path: list[Step] = []
    seen: set[int] = set()
    i = start
    while i not in seen and 0 <= i < len(ladder):
        seen.add(i)
        right, n = score(ladder[i])
        path.append(Step(ladder[i], int(right), int(n)))
        acc = path[-1].accuracy
        if n == 0 or acc == target:  # nothing graded: no direction; on target: nothing better
            break
        i += 1 if acc > target else -1
    scored = [s for s in path if s.n]
    if not scored:
        return Calibration(ladder[start], float("nan"), False, tuple(path))
    inside = [s for s in scored if band[0] <= s.accuracy <= band[1]]
    best = min(inside or scored, key=lambda s: abs(s.accuracy - target))
    return Calibration(best.knobs, best.accuracy, bool(inside), tuple(path))


def arithmetic_items(n: int, seed: int, knobs: Knobs, short: bool, namespace: str) -> list[Question]:
    """``n`` generated questions at ``knobs``, with four options or (``short``) in free text."""
    make = arithmetic_short if short else arithmetic_mc
    return list(make(n, seed, digits=knobs.digits, terms=knobs.terms, ops=knobs.ops, namespace=namespace))


def anchor_set(n: int, seed: int, short: bool) -> list[Question]:
    """The anchors: ``n`` questions at ``ANCHOR``, a function of ``n``, the seed and the format
    only (never of the model or its calibration), in their own id namespace."""
    return arithmetic_items(n, seed, ANCHOR, short, "delegate-anchor")


# ---------------------------------------------------------------- the task's options
def key_of(ctx: RunContext) -> tuple:
    """What a pool, its calibration and the selection depend on: model and settings."""
    return (ctx.fingerprint, ctx.cfg.seed, json.dumps(dict(ctx.cfg.options), sort_keys=True, default=str),
            getattr(ctx.cfg, "temperature", 0), getattr(ctx.cfg, "n_samples", 1))


def flag(ctx: RunContext, key: str) -> bool:
    v = _opt(ctx, key, False)
    if not isinstance(v, bool):
        raise ConfigError(f"{key} must be true or false, got {v!r}")
    return v


def sizes(ctx: RunContext) -> tuple[int, int]:
    """(game questions, phase-1 questions): ``game_n`` (default ``n``) and ``history_len``."""
    return int(_opt(ctx, "game_n", _opt(ctx, "n", 50))), int(_opt(ctx, "history_len", 50))


def knobs(ctx: RunContext) -> Knobs:
    return Knobs(_knob(_opt(ctx, "digits", 2)), _knob(_opt(ctx, "terms", 2)), str(_opt(ctx, "ops", "+-")))


def _arithmetic(ctx: RunContext) -> bool:
    return str(_opt(ctx, "questions", "arithmetic")) == "arithmetic"


def anchors(ctx: RunContext) -> list[Question]:
    """``anchors`` questions at ``ANCHOR`` (none by default), the same for every model."""
    k = int(_opt(ctx, "anchors", 0))
    if k < 0:
        raise ConfigError(f"anchors must be a count of questions (0 for none), got {k}")
    if k and not _arithmetic(ctx):
        raise ConfigError("anchors needs questions=arithmetic (a question file is already common to every model)")
    return anchor_set(k, ctx.cfg.seed, flag(ctx, "short_answer")) if k else []


_CAL: dict[tuple, Calibration] = {}


def calibration(ctx: RunContext, grade: Callable[[list[Question]], list[bool | None]]) -> Calibration | None:
    """With ``calibrate_pool`` (arithmetic only): ``calibrate`` scored by ``grade`` (the model's
    baseline correctness, None = ungraded) on ``calibration_n`` questions per setting (default
    40, their own id namespace, so none is a game item), walking from the configured knobs when
    they are on the ladder; cached per model and settings (plan and execute must agree)."""
    if not flag(ctx, "calibrate_pool"):
        return None
    if not _arithmetic(ctx):
        raise ConfigError("calibrate_pool needs questions=arithmetic (a question file has no difficulty knobs)")
    key = key_of(ctx)
    if key not in _CAL:
        m, short = int(_opt(ctx, "calibration_n", 40)), flag(ctx, "short_answer")
        if m < 1:
            raise ConfigError(f"calibration_n must be a positive count of questions, got {m}")

        def score(k: Knobs) -> tuple[int, int]:
            got = [c for c in grade(arithmetic_items(m, ctx.cfg.seed, k, short, "delegate-cal")) if c is not None]
            return sum(got), len(got)

        _CAL[key] = calibrate(score, start=LADDER.index(knobs(ctx)) if knobs(ctx) in LADDER else 1)
    return _CAL[key]


def pool(ctx: RunContext, cal: Calibration | None) -> tuple[str, list[Question]]:
    """(variant stem, the questions the game and phase 1 are drawn from): ``pool`` questions
    (default 2 (game_n + history_len) generated, or 4 (game_n + history_len) of a file), seeded
    order. Arithmetic at calibrated knobs has the stem ``arith-cal`` (the knobs are in the
    records), free text adds ``+short``; a question whose text is an anchor's is left out."""
    n, h = sizes(ctx)
    short = flag(ctx, "short_answer")
    if _arithmetic(ctx):
        kn = cal.chosen if cal else knobs(ctx)
        qs = arithmetic_items(int(_opt(ctx, "pool", 2 * (n + h))), ctx.cfg.seed, kn, short, "delegate")
        anchored = {q.question for q in anchors(ctx)}
        return ("arith-cal" if cal else kn.tag) + ("+short" if short else ""), [
            q for q in qs if q.question not in anchored]
    source = str(_opt(ctx, "questions", "arithmetic"))
    qs = list(load_questions(source, ctx.cfg.seed))
    if short and any(isinstance(q, MCQuestion) for q in qs):
        raise ConfigError(f"short_answer=true needs questions=arithmetic or a short-answer file; {source} is multiple-choice")
    random.Random(f"delegate:{ctx.cfg.seed}").shuffle(qs)
    if len(qs) <= h:
        raise DataError(f"{source}: {len(qs)} questions, need more than history_len={h}; "
                        "expected a larger question file")
    return Path(source).stem, qs[:int(_opt(ctx, "pool", min(len(qs), 4 * (n + h))))]


# ---------------------------------------------------------------- stratified, letter-balanced draw
def _key(q: Question) -> str:
    """The key letter of an MC question ("" for a short answer: nothing to balance)."""
    return q.answer if isinstance(q, MCQuestion) else ""


def _balanced(cands: list[Question], k: int, counts: dict[str, int]) -> list[Question]:
    """``k`` of ``cands`` (kept in their order), each pick from the key letter picked least so
    far (``counts``, updated; ties to the letter whose next candidate comes first), so the keys
    end within one of each other wherever the candidates allow."""
    chosen: list[Question] = []
    left = list(cands)
    for _ in range(min(k, len(left))):
        first: dict[str, int] = {}
        for i, q in enumerate(left):
            first.setdefault(_key(q), i)
        i = min(first.values(), key=lambda j: (counts.get(_key(left[j]), 0), j))
        q = left.pop(i)
        counts[_key(q)] = counts.get(_key(q), 0) + 1
        chosen.append(q)
    return chosen


def stratified(qs: Sequence[Question], correct: dict[str, bool], n: int, h: int
               ) -> tuple[list[Question], list[Question]]:
    """(phase-1 questions, game questions), disjoint, each with round(accuracy × size) questions
    the model answered right, accuracy being its baseline accuracy on the whole pool (short of
    one class, the other fills in), and **letter-balanced**: within each set the key letters
    differ by at most one wherever the pool allows (the smaller class is picked first, the other
    then evens the letters out), so a model that always answers one letter is right on a quarter
    of them, not on whatever share the draw keyed to that letter. Both keep the pool's (seeded,
    shuffled) order."""
    right = [q for q in qs if correct[q.id]]
    wrong = [q for q in qs if not correct[q.id]]
    acc = len(right) / len(qs) if qs else 0.0

    def take(k: int) -> list[Question]:
        r = min(len(right), round(acc * k))
        w = min(len(wrong), k - r)
        r = min(len(right), k - w)
        counts: dict[str, int] = {}
        picks: list[Question] = []
        for pool, m in sorted(((right, r), (wrong, w)), key=lambda x: x[1]):
            got = _balanced(pool, m, counts)
            chosen_ids = {q.id for q in got}
            pool[:] = [q for q in pool if q.id not in chosen_ids]
            picks += got
        chosen = {q.id for q in picks}
        return [q for q in qs if q.id in chosen]  # pool order: right and wrong interleaved

    hist = take(h)
    return hist, take(n)


def shuffled(qs: Sequence[Question], seed: int) -> list[Question]:
    return random.Random(f"delegate:strat:{seed}").sample(list(qs), len(qs))
