"""Optional LLM judge: verdict parsing, agreement with the rules (Cohen's kappa), and a real run on
a tiny random model that must report unparseable replies as such."""

from __future__ import annotations

import math

import pytest

from introspect import grading as G
from introspect.tasks.judge import (
    Agreement,
    Judge,
    JudgeVerdict,
    ModelJudge,
    agreement,
    detection_criterion,
    identification_criterion,
    intent_criterion,
    parse_verdict,
)


@pytest.mark.parametrize(
    "raw,label",
    [(" YES", "YES"), (" no.", "NO"), ("Answer: Yes", "YES"), (' **NO**', "NO"), ("\nyes, because", "YES"),
     (" Yesterday", None), (" maybe", None), ("", None), (" The answer is YES", None)],
)
def test_parse_verdict_is_strict(raw, label):
    assert parse_verdict(raw) == label


def test_agreement_hand_table():
    # rule YES: judge YES 4, NO 1; rule NO: judge YES 2, NO 3 -> po = .7, pe = (5*6 + 5*4)/100 = .5
    rule = ["YES"] * 5 + ["NO"] * 5
    judge = ["YES"] * 4 + ["NO"] + ["YES"] * 2 + ["NO"] * 3
    a = agreement(rule, judge)
    assert isinstance(a, Agreement)
    assert a.n == 10 and a.n_unparsed == 0 and a.labels == ("NO", "YES")
    assert a.table == ((3, 2), (1, 4))
    assert math.isclose(a.raw, 0.7) and math.isclose(a.kappa, 0.4)
    assert a.kappa_ci[0] < 0.4 < a.kappa_ci[1]


def test_agreement_bools_unparsed_and_degenerate():
    verdicts = [JudgeVerdict("YES", " YES", "m"), JudgeVerdict(None, " hmm", "m"), JudgeVerdict("NO", " NO", "m")]
    a = agreement([True, True, False], verdicts)
    assert a.n == 2 and a.n_unparsed == 1 and a.raw == 1.0 and math.isclose(a.kappa, 1.0)
    a = agreement([True, True], ["YES", "YES"])  # one class only: kappa undefined, said so
    assert a.raw == 1.0 and math.isnan(a.kappa)
    a = agreement([True, False], [None, None])
    assert a.n == 0 and a.n_unparsed == 2 and math.isnan(a.raw) and math.isnan(a.kappa)
    a = agreement([None, "YES", "NO"], ["NO", None, "NO"])  # rule UNKNOWN vs judge unparsed, kept apart
    assert (a.n, a.n_unparsed, a.n_unlabelled) == (1, 1, 1)
    with pytest.raises(ValueError, match="2 rule labels but 1 judge"):
        agreement([True, False], ["YES"])


def test_criteria_name_the_word():
    assert "bread" in identification_criterion("bread") and "bread" in intent_criterion("bread")
    assert "injected" in detection_criterion()


def test_model_judge_on_tiny_model_reports_honestly(tiny_model):
    """A random model cannot judge: whatever it writes must be recorded raw and parsed strictly."""
    model = tiny_model("llama")
    judge: Judge = ModelJudge(model, max_new_tokens=3)
    items = [
        ("Do you detect an injected thought?", "Yes, I detect a thought about bread.", detection_criterion()),
        ("Do you detect an injected thought?", "No.", detection_criterion()),
        ("Did you mean to say that?", "Oops, a typo.", intent_criterion("violin")),
    ]
    verdicts = judge.judge_many(items)  # type: ignore[attr-defined]
    assert len(verdicts) == 3
    for v in verdicts:
        assert isinstance(v, JudgeVerdict) and v.model_id == model.introspect_info.name
        assert v.label == parse_verdict(v.raw) and v.parsed is (v.label is not None)
    assert judge.judge(*items[0]) == judge.judge(*items[0])  # greedy: deterministic
    rule = [G.grade_task_A(a, "bread", True)["detected"] for _, a, _ in items[:2]]
    a = agreement(rule, verdicts[:2])
    assert a.n + a.n_unparsed + a.n_unlabelled == 2
