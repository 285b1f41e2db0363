"""Short-answer (SimpleQA) grading as 003 does it: exact match, else a judge consensus, else excluded.

Why: a substring match credits "Paris or Lyon" for "Paris" and misses "N.Y.C." for "New York
City"; neither error is visible in a rate. 003 scores a (string-normalised) exact match as
right; any other reply goes to several judges and counts only when they agree, and replies
without a consensus are excluded from the truth and counted. Here the judges are optional
(``--option judge=<model>`` or a list of models, loaded like any other, through
``introspect.tasks.judge.ModelJudge``); without a judge, a reply that is not an exact match is
excluded, never guessed. Every grade says how it was reached (``exact`` / ``judge`` /
``excluded``) so the summary can report the exclusion rate beside the accuracy.
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from introspect.tasks.judge import JudgeVerdict

METHODS = ("exact", "judge", "excluded")
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")


def normalize_answer(text: str) -> str:
    """SQuAD-style normalisation: first line, lower case, no punctuation, articles or extra
    spaces ("The Eiffel Tower." -> "eiffel tower")."""
    line = text.strip().split("\n", 1)[0] if text.strip() else ""
    s = line.lower().translate(str.maketrans("", "", string.punctuation))
    return " ".join(_ARTICLES.sub(" ", s).split())


def exact_match(response: str, answer: str) -> bool:
    a = normalize_answer(answer)
    return bool(a) and normalize_answer(response) == a


def criterion(answer: str) -> str:
    return (f"The reference answer is {answer!r}. Does the answer given state that same answer "
            "(YES), rather than a different answer, several answers, or no answer (NO)?")


@dataclass(frozen=True)
class ShortGrade:
    """``correct`` is None when the reply was excluded (no exact match and no consensus)."""

    correct: bool | None
    method: str
    verdicts: tuple[str | None, ...] = ()


def consensus(verdicts: Sequence[str | None]) -> bool | None:
    """True/False when every judge gave the same parseable label, else None (003 excludes
    trials without a consensus)."""
    if not verdicts or any(v is None for v in verdicts) or len(set(verdicts)) != 1:
        return None
    return verdicts[0] == "YES"


def grade_short(items: Sequence[tuple[str, str, str]], judges: Sequence[Any] = ()) -> list[ShortGrade]:
    """Grades of (question, response, reference answer) triples: exact matches first, the rest
    through every judge in one batch each (``judge_many``), then their consensus."""
    out: list[ShortGrade | None] = [ShortGrade(True, "exact") if exact_match(r, a) else None
                                    for _, r, a in items]
    rest = [i for i, g in enumerate(out) if g is None]
    if rest and judges:
        asks = [(items[i][0], items[i][1].strip() or "(no answer)", criterion(items[i][2])) for i in rest]
        labels: list[list[str | None]] = [[] for _ in rest]
        for j in judges:
            verdicts: list[JudgeVerdict] = j.judge_many(asks)
            for k, v in enumerate(verdicts):
                labels[k].append(v.label)
        for k, i in enumerate(rest):
            c = consensus(labels[k])
            out[i] = ShortGrade(c, "judge" if c is not None else "excluded", tuple(labels[k]))
    return [g if g is not None else ShortGrade(None, "excluded") for g in out]


_JUDGES: dict[tuple[str, ...], list[Any]] = {}


def judges_for(names: Any) -> list[Any]:
    """``ModelJudge``s for the ``judge`` option (a model name or path, a comma-separated list as
    ``--option judge=a,b`` gives, or a YAML list), loaded once per process; none when unset."""
    if names in (None, "", [], ()):
        return []
    if isinstance(names, str):
        names = [n for n in (x.strip() for x in names.split(",")) if n]
    key = tuple(str(n) for n in (names if isinstance(names, (list, tuple)) else [names]))
    if key not in _JUDGES:
        from introspect.engine.load.models import load_model
        from introspect.tasks.judge import ModelJudge

        _JUDGES[key] = [ModelJudge(load_model(n), model_id=n) for n in key]
    return _JUDGES[key]
