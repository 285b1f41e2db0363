"""The Delegate Game's surface controls: what a heuristic could use instead of introspection.

Why option geometry: the generated arithmetic items have the answer and three distractors drawn
from answer ±1, ±2, ±10 and a random offset, so the key is rarely the smallest or largest option
(about one item in ten) while a distractor at a given letter is an extreme one about two times
in three. A model that always says "A" is then wrong mostly where option A is an extreme value,
and one that picks by value ("the middle one") is wrong where the key is extreme. Those errors
follow the options' layout, not anything the model knows about itself, so the controls that
``surface_auroc`` and ``lr_p[baseline_error|surface]`` hold fixed include it: the key's rank
among the numeric options (and whether it is the smallest or largest), and per letter whether
the option there is an extreme value (the last letter left out: the extremes always number two,
so it is the others' complement). Items whose options are not all distinct numbers have none.

Why arithmetic features: within a pool of one digit and term setting, question length is
constant, yet a sum that carries past 10, a negative result or a product is harder for every
model; P(T) that rises there reads the expression, not the model's own errors. So an item of
the form "What is <expression>?" adds the result's size (log10 of 1 + |value|), its sign,
whether it has more digits than any operand (a carry into a new column), the operators it has
and its largest operand (``arith_*``; None for any other question). The controls enter the fits
linearly: a heuristic on some other function of the expression is not held fixed.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pandas as pd

from introspect.data import LETTERS, MCQuestion
from introspect.tasks.selfknowledge.rows import g, lists, num, z


def _number(text: str) -> float | None:
    try:
        return float(str(text).replace(",", "").strip())
    except ValueError:
        return None


def option_ranks(options: Any) -> list[int] | None:
    """Each option's rank among the options as numbers (0 = smallest); None unless every option
    is a distinct number."""
    vals = [_number(o) for o in options]
    if len(vals) < 3 or any(v is None for v in vals) or len(set(vals)) < len(vals):
        return None
    order = sorted(range(len(vals)), key=vals.__getitem__)
    return [order.index(i) for i in range(len(vals))]


_EXPR = re.compile(r"^What is (-?\d+(?:\s*[-+*]\s*-?\d+)+)\?$")
ARITH = ("arith_result_log", "arith_negative", "arith_longer", "arith_minus", "arith_times", "arith_operand_log")


def arithmetic_features(question: str) -> dict[str, float | None]:
    """``ARITH`` of a "What is <expression>?" question (see the module docstring); None otherwise."""
    m = _EXPR.match(question.strip())
    if m is None:
        return dict.fromkeys(ARITH)
    expr = m.group(1)
    nums = [int(x) for x in re.findall(r"\d+", expr)]
    if expr.startswith("-"):
        nums[0] = -nums[0]
    ops = re.findall(r"(?<=\d)\s*([-+*])", expr)
    from introspect.data.arithmetic import _evaluate

    value = _evaluate(nums, ops) if len(ops) == len(nums) - 1 else None
    if value is None:
        return dict.fromkeys(ARITH)
    return {"arith_result_log": math.log10(1 + abs(value)), "arith_negative": float(value < 0),
            # the result has more digits than any operand: a carry into a new column
            "arith_longer": float(len(str(abs(value))) > max(len(str(abs(x))) for x in nums)),
            "arith_minus": float(ops.count("-")), "arith_times": float(ops.count("*")),
            "arith_operand_log": math.log10(1 + max(abs(x) for x in nums))}


def surface(q: Any) -> dict[str, Any]:
    """Surface features of one question (003's controls, and the options' geometry)."""
    text = q.format() if isinstance(q, MCQuestion) else q.question
    return {"question_length": len(q.question), "n_words": len(text.split()),
            "digit_fraction": sum(c.isdigit() for c in text) / max(1, len(text)),
            "topic": getattr(q, "topic", "") or "", "human_difficulty": getattr(q, "difficulty", "") or "",
            "answer_type": getattr(q, "answer_type", "") or "",
            "option_ranks": option_ranks(q.options) if isinstance(q, MCQuestion) else None,
            **arithmetic_features(q.question)}


def geometry_frame(s: pd.DataFrame) -> pd.DataFrame:
    """Option-geometry columns (see the module docstring); none unless every row has ranks of
    one length and a lettered key among them."""
    ranks, keys = lists(s, "option_ranks"), [str(v) for v in g(s, "answer", "")]
    n = len(ranks[0]) if ranks else 0
    if n < 3 or any(len(r) != n or k not in LETTERS[:n] for r, k in zip(ranks, keys)):
        return pd.DataFrame(index=range(len(s)))
    R = np.array(ranks, float)
    key = R[np.arange(len(s)), [LETTERS.index(k) for k in keys]]
    extreme = (R == 0) | (R == n - 1)
    X = pd.DataFrame({"key_rank_z": z(key / (n - 1)), "key_extreme": (key == 0) | (key == n - 1)},
                     index=range(len(s)))
    for j in range(n - 1):
        X[f"extreme_at_{LETTERS[j]}"] = extreme[:, j]
    return X.astype(float)


def surface_frame(s: pd.DataFrame) -> pd.DataFrame:
    """Surface controls: z-scored length and digit share, topic, human-difficulty and
    answer-type dummies, the expression's features (arithmetic) and the options' geometry (a
    constant column is left out by the fits)."""
    X = pd.DataFrame({"question_length_z": z(num(s, "question_length")),
                      "digit_fraction_z": z(num(s, "digit_fraction"))}, index=range(len(s)))
    for col in ("topic", "human_difficulty", "answer_type"):
        cats = pd.Series([str(v) for v in g(s, col, "")])
        if cats.nunique() > 1:
            d = pd.get_dummies(cats, prefix=col, drop_first=True, dtype=float)
            X = pd.concat([X, d.reset_index(drop=True)], axis=1)
    for name in ARITH:  # the expression's features, where every row has them
        v = num(s, name)
        if np.isfinite(v).all() and len(v) and np.ptp(v) > 0:
            X[f"{name}_z"] = z(v)
    geo = geometry_frame(s.reset_index(drop=True))
    geo = geo.loc[:, [c for c in geo.columns if geo[c].nunique() > 1]]
    return pd.concat([X, geo], axis=1).fillna(0.0)
