"""Grading one Delegate Game reply: the decision read from the logits beside the parsed text.

Why a module of its own: the task (``delegate.execute``) and the Inspect scorer
(``integrations.inspect.delegate_game``) grade a reply with this one function, so a record made
either way is the same record.
"""

from __future__ import annotations

from typing import Any

from introspect.data import MCQuestion, ShortQuestion
from introspect.tasks.selfknowledge.parse import is_delegation, parse_letter
from introspect.tasks.selfknowledge.shortanswer import ShortGrade

Question = MCQuestion | ShortQuestion

POOL_FIELDS = ("pool_knobs", "pool_calibration_accuracy", "pool_calibration_in_band", "anchor")
ROTATION_FIELDS = ("rotations", "raw_correct", "raw_p_correct", "raw_choice", "raw_entropy", "raw_mass",
                   "rotation_letters", "rotation_consistent", "option_scores", "pride_choice", "pride_correct",
                   "pride_p_correct", "letter_prior")


def grade_game(q: Question, b: dict[str, Any], d: Any, text: str, acc: float, mate: bool,
               short: ShortGrade | None = None) -> dict[str, Any]:
    """Logit reading (P(T) over A–D and T; delegated = T is the argmax) and text reading of one
    game reply, with the baseline it is compared to and the team's score. A short answer kept
    is graded like the baseline (``short``: exact match, judge consensus, or None = excluded)."""
    mc = isinstance(q, MCQuestion)
    if mc:  # a letter, else a hand-over said in words ("I'd delegate this one") reads as T
        tchoice = parse_letter(text, "ABCDT") or ("T" if is_delegation(text) else None)
        t_deleg, t_ok = tchoice == "T", tchoice == q.answer
    else:
        t_deleg = is_delegation(text)
        tchoice = "T" if t_deleg else (text.strip() or None)
        t_ok = None if t_deleg else (short.correct if short else None)
    deleg = bool(d and d.choice == "T") if mc else t_deleg
    kept_ok = bool(d and d.choice == q.answer) if mc else t_ok
    return {
        "qid": q.id, "answer": q.answer, "teammate_accuracy": acc, "teammate_correct": mate,
        "baseline_correct": b["correct"], "baseline_p_correct": b["p_correct"], "entropy": b["entropy"],
        "baseline_mass": b["mass"], "baseline_low_mass": b["low_mass"], "baseline_choice": b["choice"],
        "baseline_text_choice": b["text_choice"], "baseline_text_correct": b["text_correct"],
        "baseline_parse_ok": b["parse_ok"],
        # short answers: the raw probability of a first token "T" (any other token is an answer)
        "p_delegate": (d.p("T") if mc else d.mass) if d else None, "game_mass": d.mass if (d and mc) else None,
        "game_low_mass": bool(d and mc and d.low_mass), "game_choice": d.choice if (d and mc) else tchoice,
        "game_entropy": d.entropy(list("ABCD")) if (d and mc) else None,
        "delegated": deleg, "game_correct": None if (kept_ok is None and not deleg) else bool(kept_ok) and not deleg,
        "team_correct": mate if deleg else kept_ok,
        "team_expected": acc if deleg else (None if kept_ok is None else float(kept_ok)),
        "game_grade_method": "letter" if mc else ("delegated" if t_deleg else (short.method if short else "excluded")),
        "baseline_grade_method": b.get("grade_method", "letter"), "pool_excluded": b.get("pool_excluded", 0),
        "baseline_n_draws": b.get("n_draws"), "baseline_n_draws_excluded": b.get("n_draws_excluded"),
        "game_text_choice": tchoice, "game_parse_ok": tchoice is not None, "delegated_text": t_deleg,
        "game_text_correct": bool(t_ok) and not t_deleg, "parse_ok": tchoice is not None,
        # rotations (letter-free baseline): the raw rotation-0 reading beside the decision above
        **{f"baseline_{k}": b[k] for k in ROTATION_FIELDS if k in b},
    }
