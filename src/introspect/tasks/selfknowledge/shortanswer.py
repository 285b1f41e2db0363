"""Short-answer (SimpleQA) grading as 003 does it: exact match, else a judge consensus, else excluded.

Why: a substring match credits "Paris or Lyon" for "Paris" and misses "N.Y.C." for "New York
City"; neither error is visible in a rate. 003 scores a (string-normalised) exact match as
right; any other reply goes to several judges and counts only when they agree, and replies
without a consensus are excluded from the truth and counted. Here the judges are optional
(``--option judge=<model>`` or a list of models, loaded like any other, through
``introspect.tasks.judge.ModelJudge``); without a judge, a reply that is not an exact match is
excluded, never guessed. Every grade says how it was reached (``exact`` / ``judge`` /
``excluded``) so the summary can report the exclusion rate beside the accuracy.

Numeric answers (arithmetic asked without options, ``answer_type`` "number") need no judge:
the number the reply states is read as the difficulty truth reads it (the "Answer: N" statement,
the reply following a prefilled "Answer:", else a result its last sentence ends on) and compared
as an integer (``number``); a reply that states none is excluded, never guessed from its last
integer. String normalisation would not do: it strips the minus sign, so "-5" would match "5".
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from introspect.tasks.judge import JudgeVerdict
from introspect.tasks.selfknowledge.parse import final_answer, stated_result

METHODS = ("exact", "judge", "number", "excluded")
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


def stated_number(response: str, prefill: str = "Answer:") -> int | None:
    """The integer a reply states: the first "Answer: N" of ``prefill`` + the reply (an
    expression there gives its result), else the result its last sentence ends on; else None."""
    v = final_answer(prefill + response)
    return v if v is not None else stated_result(response)


def grade_number(response: str, answer: str) -> ShortGrade:
    """A numeric reply against an integer reference: right or wrong when it states a number
    (``number``), else excluded."""
    v = stated_number(response)
    return ShortGrade(None, "excluded") if v is None else ShortGrade(v == int(answer), "number")


def grade_replies(items: Sequence[tuple[Any, str]], judges: Sequence[Any] = ()) -> list[ShortGrade]:
    """Grades of (short question, reply) pairs in their order: numeric questions
    (``answer_type`` "number") by the number stated, the rest by ``grade_short`` in one batch."""
    numeric = [getattr(q, "answer_type", "") == "number" for q, _ in items]
    text = iter(grade_short([(q.question, r, q.answer) for (q, r), n in zip(items, numeric) if not n], judges))
    return [grade_number(r, q.answer) if n else next(text) for (q, r), n in zip(items, numeric)]


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
