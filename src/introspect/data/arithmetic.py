"""Generated arithmetic with known answers: integer maths, not a label file, with difficulty knobs (digits, terms, operators)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from introspect.data.choice import MCQuestion, ShortQuestion
from introspect.data.files import LETTERS


@dataclass(frozen=True)
class ArithmeticQuestion:
    """``question`` like "What is 23 + 58 - 7?" with its integer ``answer`` and difficulty."""

    id: str
    question: str
    expression: str
    answer: int
    digits: int
    terms: int


def _evaluate(nums: Sequence[int], ops: Sequence[str]) -> int:
    """Integer value with the usual precedence (* before + and -)."""
    acc, prod = 0, nums[0]
    sign = 1
    for op, x in zip(ops, nums[1:]):
        if op == "*":
            prod *= x
        else:
            acc += sign * prod
            sign, prod = (1 if op == "+" else -1), x
    return acc + sign * prod


def _draw(rng: random.Random, knob: int | tuple[int, int]) -> int:
    return rng.randint(*knob) if isinstance(knob, tuple) else int(knob)


def arithmetic_questions(
    n: int, seed: int, digits: int | tuple[int, int] = 2, terms: int | tuple[int, int] = 2,
    ops: str = "+-", namespace: str = "arith",
) -> list[ArithmeticQuestion]:
    """``n`` questions like "What is 23 + 58?"; harder with more digits, terms and ``*``.

    ``digits`` / ``terms`` may be a (lo, hi) range drawn per question. Operators from ``ops``
    (any of "+-*"). Deterministic given the arguments. ``namespace`` keys both the draw and the
    ids ("<namespace>-<seed>-<i>"), so tasks that must not share items (the Delegate Game and
    recovery) get different questions with different ids.
    """
    if not ops or set(ops) - set("+-*"):
        raise ValueError(f"ops must be a non-empty subset of '+-*', got {ops!r}")
    rng = random.Random(f"{namespace}:{seed}:{digits}:{terms}:{ops}")
    out = []
    for i in range(n):
        d, t = max(1, _draw(rng, digits)), max(2, _draw(rng, terms))
        nums = [rng.randint(10 ** (d - 1) if d > 1 else 1, 10**d - 1) for _ in range(t)]
        opseq = [rng.choice(ops) for _ in range(t - 1)]
        expr = " ".join([str(nums[0])] + [f"{o} {x}" for o, x in zip(opseq, nums[1:])])
        out.append(ArithmeticQuestion(f"{namespace}-{seed}-{i}", f"What is {expr}?", expr,
                                      _evaluate(nums, opseq), d, t))
    return out


def to_multiple_choice(q: ArithmeticQuestion, seed: int, n_options: int = 4) -> MCQuestion:
    """The question with ``n_options`` options: the answer and distinct nearby integers."""
    rng = random.Random(f"mc:{seed}:{q.id}")
    spread = max(5, abs(q.answer) // 10)
    cands = {q.answer + s for s in (-10, -2, -1, 1, 2, 10)}
    while len(cands) < n_options + 3:
        cands.add(q.answer + rng.randint(-spread, spread))
    cands.discard(q.answer)
    options = rng.sample(sorted(cands), n_options - 1) + [q.answer]
    rng.shuffle(options)
    return MCQuestion(q.id, q.question, tuple(str(x) for x in options),
                      LETTERS[options.index(q.answer)], f"arithmetic d{q.digits} t{q.terms}")


def arithmetic_mc(n: int, seed: int, **kw: Any) -> list[MCQuestion]:
    """4-option versions of ``arithmetic_questions(n, seed, **kw)``."""
    return [to_multiple_choice(q, seed) for q in arithmetic_questions(n, seed, **kw)]


def to_short(q: ArithmeticQuestion) -> ShortQuestion:
    """The question without options (answered in free text, graded by the number it states):
    same id, the integer answer as text, ``answer_type`` "number" so graders read a number."""
    return ShortQuestion(q.id, q.question, str(q.answer), f"arithmetic d{q.digits} t{q.terms}", "number")


def arithmetic_short(n: int, seed: int, **kw: Any) -> list[ShortQuestion]:
    """Free-text versions of ``arithmetic_questions(n, seed, **kw)`` (the same questions)."""
    return [to_short(q) for q in arithmetic_questions(n, seed, **kw)]
