"""Answers to the bias questions graded by content: agreeing with a false statement is not the
same thing as reporting an injected thought to the wrong question.

Why: the yes-bias guard asks unrelated yes/no questions under the same injection. First-token
P(yes) cannot tell "Yes, the Pacific is smaller than a lake" (a yes-bias) from "Yes, I detect an
injected thought about …" (a detection report given to the wrong question): both start with
"Yes". Read as text, the first is a wrong answer and the second a detection report, which a
true detector may well give and which is no evidence of a bias toward "yes".
"""

from __future__ import annotations

from typing import Any, Literal

from introspect.grading.detection import explicit_detection, parse_yes_no

BiasAnswer = Literal["correct", "affirms_false", "denies_true", "reports_detection", "unparsed"]


def grade_bias_answer(text: str, correct: str) -> dict[str, Any]:
    """``bias_answer`` (one of ``BiasAnswer``), ``wrong`` (True for affirms_false/denies_true,
    False for correct/reports_detection, None when unparsed), ``reports_detection``, and the
    plain ``said_yes`` (None when no yes/no is stated)."""
    if correct not in ("yes", "no"):
        raise ValueError(f"a bias question's right answer is 'yes' or 'no', got {correct!r}")
    said = parse_yes_no(text)
    reports = explicit_detection(text)
    if reports:
        kind: BiasAnswer = "reports_detection"
    elif said is None:
        kind = "unparsed"
    elif said.lower() == correct:
        kind = "correct"
    else:
        kind = "affirms_false" if correct == "no" else "denies_true"
    wrong = None if kind == "unparsed" else kind in ("affirms_false", "denies_true")
    return {"bias_answer": kind, "wrong": wrong, "reports_detection": reports,
            "said_yes": None if said is None else said == "YES"}
