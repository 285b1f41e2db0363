"""Task B graders: strict ``THOUGHT:`` / ``REPEAT:`` / ``CHOICE:`` formats and the free thought word.

Every free-form answer is first cut at a made-up next turn (``cut_at_next_turn``); the thought
word is matched to the concept by ``names_concept`` (inflections, never synonyms).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from introspect.grading.text import cut_at_next_turn
from introspect.grading.words import levenshtein, names_concept, single_word_after

_REPEAT = re.compile(r"(?<![A-Za-z_])REPEAT:[ \t]*(.+)", re.IGNORECASE)
_CHOICE = re.compile(r"(?<![A-Za-z_])CHOICE:[ \t]*(\d+)(?!\d)(?![.,]\d)(?![A-Za-z])", re.IGNORECASE)
_FILLER = frozenset(
    """a an the i i'm im my me it it's its is was be would that this word words which what
    when read reading line sentence comes come to mind first think thinking thought of about
    answer immediately okay ok sure here s so well hmm um uh of in on with for and""".split()
)


def parse_task_B(text: str) -> tuple[str | None, str | None]:
    """(word of ``THOUGHT: w``, text of ``REPEAT: ...`` with surrounding quotes removed)."""
    text = cut_at_next_turn(text)
    thought = single_word_after("THOUGHT", text)
    m = _REPEAT.search(text)
    repeat = m.group(1).strip().strip("\"'`“”‘’*").strip() if m else None
    return thought, (repeat or None)


def parse_thought_free(text: str) -> str | None:
    """First content word of a free answer ("Bread." -> "bread"); a quoted word wins."""
    text = cut_at_next_turn(text)
    quoted = re.search(r"[\"“'*]+([^\W\d_][\w'-]*)[\"”'*]+", text)
    if quoted and quoted.group(1).casefold() not in _FILLER:
        return quoted.group(1).casefold()
    for tok in re.findall(r"[^\W\d_][\w'-]*", text):
        if tok.casefold() not in _FILLER:
            return tok.casefold()
    return None


def parse_choice(text: str) -> int | None:
    """k from ``CHOICE: k`` (integer only); None if absent, or two different choices given."""
    ks = {int(m.group(1)) for m in _CHOICE.finditer(cut_at_next_turn(text))}
    return ks.pop() if len(ks) == 1 else None


def _norm_text(s: str) -> str:
    return " ".join(s.split()).casefold()


def grade_task_B(
    thought: str | None,
    repeat: str | None,
    target_word: str,
    original_sentence: str,
    mc_choice: int | None = None,
    mc_answer: int | None = None,
    *,
    asked: Iterable[str] | None = None,
) -> dict[str, Any]:
    """Grade task B. ``success`` is strict: both parts correct; None if only one was asked.

    ``asked`` names the parts the trial asked for ("thought", "repeat"); by default the parts
    given as non-None. Pass it explicitly so a failed parse (None) counts as wrong, not as
    not-asked. ``mc_correct`` is None unless ``mc_answer`` is given. A free ``repeat`` is cut at
    a made-up next turn before it is compared.
    """
    parts = set(asked) if asked is not None else {
        k for k, v in (("thought", thought), ("repeat", repeat)) if v is not None
    }
    if repeat is not None:
        repeat = cut_at_next_turn(repeat).strip() or None
    t_ok = names_concept(thought, target_word) if "thought" in parts else None
    r_ok = dist = None
    if "repeat" in parts:
        r_ok = repeat is not None and _norm_text(repeat) == _norm_text(original_sentence)
        if repeat is not None:
            dist = levenshtein(_norm_text(repeat), _norm_text(original_sentence))
    mc_ok = None if mc_answer is None else (mc_choice is not None and mc_choice == mc_answer)
    parse_ok = all(
        v is not None for k, v in (("thought", thought), ("repeat", repeat)) if k in parts
    ) and (mc_answer is None or mc_choice is not None)
    return {
        "thought": thought,
        "thought_correct": t_ok,
        "repeat_correct": r_ok,
        "repeat_edit_distance": dist,
        "success": bool(t_ok and r_ok) if {"thought", "repeat"} <= parts else None,
        "mc_choice": mc_choice,
        "mc_correct": mc_ok,
        "parse_ok": parse_ok,
    }
