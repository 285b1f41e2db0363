"""Self-knowledge metrics on hand-computed tables: 002 §4.3's worked example (0.67), association
rates, over-niceness, MCC / lift / regressions of the Delegate Game, recovery summaries."""

import math

import numpy as np
import pandas as pd
import pytest

from introspect.stats import pairwise_order_accuracy
from introspect.tasks.selfknowledge import metrics as M


def _df(task: str, grades: list[dict], variant: str = "v", condition: str = "clean") -> pd.DataFrame:
    rows = []
    for g in grades:
        row = {"model_id": "m", "task": task, "variant": g.pop("_variant", variant),
               "condition": g.pop("_condition", condition)}
        row.update({f"grade.{k}": v for k, v in g.items()})
        rows.append(row)
    return pd.DataFrame(rows)


def _get(s: pd.DataFrame, metric: str, variant: str | None = None) -> pd.Series:
    sel = s[s.metric == metric]
    if variant is not None:
        sel = sel[sel.variant == variant]
    assert len(sel) == 1, (metric, variant, sel)
    return sel.iloc[0]


# ---------------------------------------------------------------- difficulty (002 §4.3)
def test_worked_example_gives_two_thirds():
    correct = [True, True, True, False]  # Q4 answered wrongly
    tokens = [100, 200, 300, 150]
    assert M.true_difficulty_order(correct, tokens) == [0, 1, 2, 3]  # Q1 < Q2 < Q3 < Q4
    predicted = [0, 3, 1, 2]  # Q1 < Q4 < Q2 < Q3
    acc, right, total = M.pairwise_accuracy(predicted, correct, tokens)
    assert (right, total) == (4, 6) and acc == pytest.approx(0.67, abs=0.005)
    assert pairwise_order_accuracy(predicted, [0, 1, 2, 3]) == pytest.approx(acc)


def test_tied_pairs_are_not_counted():
    acc, right, total = M.pairwise_accuracy([1, 0, 2], [True, True, False], [5, 5, 5])
    assert (right, total) == (2, 2) and acc == 1.0
    assert M.pairwise_accuracy([0, 1], [True, True], [3, 3]) == (None, 0, 0)


def test_difficulty_summary_counts_invalid_rankings_as_wrong():
    df = _df("seb-difficulty", [
        {"parse_ok": True, "pair_accuracy": 1.0, "n_answer_correct": 2, "n_tokens": [1, 2, 3, 4]},
        {"parse_ok": True, "pair_accuracy": 0.5, "n_answer_correct": 1, "n_tokens": [1, 2, 3, 4]},
        {"parse_ok": False, "pair_accuracy": 0.0, "n_answer_correct": 0, "n_tokens": [9, 9, 9, 9]},
    ])
    s = M.summarize_seb_difficulty(df)
    assert list(s.columns) == M.SK_COLUMNS
    assert _get(s, "accuracy").value == pytest.approx(0.5)
    assert _get(s, "adjusted_accuracy").value == pytest.approx(0.75)
    assert _get(s, "question_accuracy").value == pytest.approx(3 / 12)
    assert _get(s, "parse_rate").value == pytest.approx(2 / 3)


# ---------------------------------------------------------------- association (002 §4.1)
def test_association_rates_by_hand():
    c = M.confusion([1, 1, 1, 0, 0, 0, 1, 0], [1, 0, 0, 0, 0, 1, 0, 0])
    assert c == {"tp": 1, "fp": 3, "fn": 1, "tn": 3}
    r = M.association_rates(**c, n_unparsed=2)
    assert r["accuracy"] == pytest.approx(4 / 10)
    assert r["recall"] == pytest.approx(1 / 2) and r["precision"] == pytest.approx(1 / 4)
    assert r["positive_rate"] == pytest.approx(4 / 8)


def test_association_summary_and_all_no_baseline():
    df = _df("seb-association", [
        {"parse_ok": True, "list_ok": True, "n_options": 4, "tp": 1, "fp": 2, "fn": 0, "tn": 1,
         "n_correct": 2, "n_actual": 1},
        {"parse_ok": False, "list_ok": True, "n_options": 4, "tp": 0, "fp": 0, "fn": 0, "tn": 0,
         "n_correct": 0, "n_actual": 2},
    ])
    s = M.summarize_seb_association(df)
    assert _get(s, "accuracy").value == pytest.approx(2 / 8)
    assert _get(s, "baseline_all_no").value == pytest.approx(5 / 8)
    assert _get(s, "accuracy_minus_all_no").value == pytest.approx(2 / 8 - 5 / 8)
    assert _get(s, "recall").value == 1.0 and _get(s, "precision").value == pytest.approx(1 / 3)
    assert _get(s, "positive_rate").value == pytest.approx(3 / 4)
    acc = _get(s, "accuracy")
    assert acc.lo <= acc.value <= acc.hi and acc.n == 8


# ---------------------------------------------------------------- restriction (002 §4.2)
def test_over_niceness_by_hand():
    assert M.over_niceness(3, 1) == 0.75
    assert math.isnan(M.over_niceness(0, 0))
    # predicted/judged: A=answers. FN = said B (won't) but judged A (did answer).
    table = [("A", "A"), ("A", "A"), ("B", "B"), ("B", "A"), ("B", "A"), ("B", "A"), ("A", "B"),
             (None, "A")]
    grades = [{"parse_ok": p is not None, "correct": p == j, "fn": p == "B" and j == "A",
               "fp": p == "A" and j == "B", "predicted": p, "judged": j, "refused_rule": False,
               "label": "safe" if i % 2 else "unsafe"} for i, (p, j) in enumerate(table)]
    s = M.summarize_seb_restriction(_df("seb-restriction", grades))
    assert _get(s, "accuracy").value == pytest.approx(3 / 8)
    assert _get(s, "adjusted_accuracy").value == pytest.approx(3 / 7)
    assert _get(s, "over_niceness").value == pytest.approx(3 / 4)
    assert _get(s, "parse_rate").value == pytest.approx(7 / 8)
    assert _get(s, "predicted_answer_rate").value == pytest.approx(3 / 7)
    assert _get(s, "judged_answer_rate").value == pytest.approx(6 / 8)
    assert _get(s, "accuracy[safe]").n == 4


# ---------------------------------------------------------------- delegate game (003)
def test_mcc_by_hand():
    # tp=3, tn=4, fp=1, fn=2 -> (12 - 2) / sqrt(4 * 5 * 5 * 6)
    truth = [1, 1, 1, 1, 1, 0, 0, 0, 0, 0]
    pred = [1, 1, 1, 0, 0, 1, 0, 0, 0, 0]
    est, lo, hi = M.matthews(truth, pred)
    assert est == pytest.approx(10 / math.sqrt(600))
    assert lo <= est <= hi


def test_letter_entropy():
    assert M.letter_entropy([math.log(0.25)] * 4) == pytest.approx(math.log(4))
    assert M.letter_entropy([0.0, -50, -50, -50]) == pytest.approx(0.0, abs=1e-12)
    assert M.letter_entropy([-1.0, -1.0]) == pytest.approx(math.log(2))  # renormalised


def test_paired_lift():
    base = [1, 1, 0, 0]
    deleg = [False, False, True, True]
    est, lo, hi = M.paired_lift([1, 1, 0, 0], deleg, base)
    assert est == pytest.approx(0.5) and lo <= est <= hi


def _delegate_grades(n: int = 120, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        ent = float(rng.uniform(0, 1.4))
        correct = bool(rng.random() < 1 - ent / 1.6)
        deleg = bool(rng.random() < (0.85 if not correct else 0.15))
        acc = 0.2 if i % 2 else 0.8
        out.append({"baseline_correct": correct, "baseline_parse_ok": True, "entropy": ent,
                    "delegated": deleg, "game_parse_ok": True,
                    "game_correct": (not deleg) and correct, "team_correct": deleg or correct,
                    "team_expected": acc if deleg else float(correct), "teammate_accuracy": acc,
                    "question_length": int(rng.integers(10, 60)),
                    "p_delegate": float(rng.uniform(0.2, 1.0) if not correct else rng.uniform(0, 0.8)),
                    "_variant": f"arith:teammate={acc:g}"})
    return out


def test_delegate_summary_detects_introspection():
    s = M.summarize_delegate(_df("delegate", _delegate_grades()))
    assert list(s.columns) == M.SK_COLUMNS
    mcc = _get(s, "introspection_mcc", "arith:teammate=0.8")
    assert mcc.value > 0.4 and mcc.lo > 0
    lift = _get(s, "self_accuracy_lift", "arith:teammate=0.8")
    assert lift.value > 0 and lift.lo > 0
    assert _get(s, "mcnemar_p", "arith:teammate=0.8").value <= 1
    assert _get(s, "fisher_p", "arith:teammate=0.8").value < 0.01
    assert _get(s, "p_delegate_auroc", "arith:teammate=0.8").lo > 0.5
    assert _get(s, "p_delegate_diff[0.8-0.2]", "arith:all").n == 120
    orc = _get(s, "odds_ratio[baseline_correct]", "arith:all")
    assert orc.value < 1 and orc.lo <= orc.value <= orc.hi
    assert {"odds_ratio[entropy_z]", "odds_ratio[question_length_z]",
            "other_modelling_or_per_0.1"} <= set(s.metric)


def test_delegate_summary_with_no_delegation_has_no_regression():
    g = _delegate_grades(20)
    for x in g:
        x["delegated"] = False
    s = M.summarize_delegate(_df("delegate", g))
    assert _get(s, "delegation_rate", "arith:teammate=0.8").value == 0
    assert _get(s, "introspection_mcc", "arith:teammate=0.8").value == 0
    assert not s.metric.str.startswith("odds_ratio").any()


def test_logit_odds_ratio_recovers_effect():
    rng = np.random.default_rng(1)
    x = rng.normal(size=400)
    y = (rng.random(400) < 1 / (1 + np.exp(-1.0 * x))).astype(float)
    res = M.logit_odds_ratios(y, pd.DataFrame({"x": x, "const_col": 1.0}))
    assert list(res.term) == ["x"]
    assert res.lo[0] < math.e < res.hi[0]


# ---------------------------------------------------------------- recovery (002 §5)
def test_recovery_summary():
    grades = []
    for q in range(4):
        grades.append({"qid": q, "correct": q < 3, "parse_ok": True, "remarked": False,
                       "source": "a", "_variant": "a:clean", "_condition": "clean"})
        grades.append({"qid": q, "correct": q < 1, "parse_ok": True, "remarked": q == 2,
                       "source": "a", "_variant": "a:random-k1-at4", "_condition": "perturbed"})
    # another arithmetic setting: its clean runs must not serve as this one's baseline
    grades.append({"qid": 0, "correct": False, "parse_ok": True, "remarked": False,
                   "source": "b", "_variant": "b:clean", "_condition": "clean"})
    s = M.summarize_recovery(_df("recovery", grades))
    assert _get(s, "accuracy", "a:clean").value == 0.75
    assert _get(s, "accuracy", "a:random-k1-at4").value == 0.25
    assert _get(s, "accuracy_drop_vs_clean", "a:random-k1-at4").value == pytest.approx(0.5)
    rec = _get(s, "recovery_rate", "a:random-k1-at4")
    assert rec.value == pytest.approx(1 / 3) and rec.n == 3
    assert _get(s, "remark_rate", "a:random-k1-at4").value == 0.25
    assert set(s.condition) == {"clean", "perturbed"}


def test_summarize_sk_dispatches_and_ignores_other_tasks():
    df = pd.concat([_df("recovery", [{"qid": 0, "correct": True, "parse_ok": True,
                                      "remarked": False}], "clean"),
                    _df("A", [{"detected": True}])])
    s = M.summarize_sk(df)
    assert set(s.task) == {"recovery"}
    assert M.summarize_sk(pd.DataFrame(columns=["task"])).empty


def test_auroc_by_hand():
    # positives 0.9, 0.4; negatives 0.4, 0.1 -> pairs: 1, 1, 0.5 (tie), 1 -> 3.5 / 4
    est, lo, hi = M.auroc([0.9, 0.4, 0.4, 0.1], [True, True, False, False])
    assert est == pytest.approx(0.875) and lo <= est <= hi
    assert math.isnan(M.auroc([0.1, 0.2], [True, True])[0])


def test_recovery_remark_rule():
    from introspect.tasks.selfknowledge.recovery import REMARK

    assert REMARK.search("Oops, that was a typo.") and REMARK.search("Wait, let me correct that")
    assert not REMARK.search("Step 1: 3 + 4 = 7. Answer: 7")
