"""Option geometry in the Delegate Game's surface controls (self-knowledge issue, item 2).

The generated arithmetic items' distractors are the answer ±1, ±2, ±10 and a random offset, so
an always-"A" model's errors follow whether option A is an extreme value. Constructed records on
real generated items (``arithmetic_mc``, the options' ranks from ``surface``) go through the real
summary: the layout explains an always-A agent's errors, a layout-reading delegator is not taken
for an introspector, and a planted oracle still shows signal beyond the surface.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from introspect.data import arithmetic_mc
from introspect.tasks.selfknowledge.game_metrics import summarize_delegate
from introspect.tasks.selfknowledge.surface import geometry_frame, option_ranks, surface

LR = "lr_p[baseline_error|surface]"
N = 200


def records(kind: str, seed: int = 0, geometry: bool = True) -> pd.DataFrame:
    """One row per question: ``letter`` answers A and delegates at random, ``layout`` answers A
    and delegates where option A is an extreme value, ``oracle`` errs by a hidden difficulty and
    delegates by it."""
    qs = arithmetic_mc(N, seed, digits=2, terms=2)
    rng = np.random.default_rng(seed)
    rows = []
    for q in qs:
        feats = surface(q)
        a_extreme = feats["option_ranks"][0] in (0, 3)
        if kind == "oracle":
            p_wrong = 1 / (1 + np.exp(-rng.normal(0, 1.5)))
            ok, p_t = bool(rng.random() >= p_wrong), p_wrong
        else:
            ok = q.answer == "A"
            p_t = (0.7 if a_extreme else 0.15) if kind == "layout" else float(np.clip(rng.normal(0.4, 0.1), 0.01, 0.99))
        deleg = bool(rng.random() < p_t)
        if not geometry:
            feats = {**feats, "option_ranks": None}
        rows.append({"model_id": "m", "task": "delegate", "variant": "arith:teammate=0.5", "condition": "clean",
                     "word": q.id, **{f"grade.{k}": v for k, v in feats.items()},
                     "grade.qid": q.id, "grade.answer": q.answer, "grade.baseline_correct": ok,
                     "grade.baseline_choice": "A" if kind != "oracle" else q.answer, "grade.delegated": deleg,
                     "grade.game_correct": ok and not deleg, "grade.teammate_accuracy": 0.5,
                     "grade.team_correct": ok, "grade.team_expected": float(ok), "grade.p_delegate": float(p_t),
                     "grade.game_parse_ok": True, "grade.delegated_text": deleg})
    return pd.DataFrame(rows)


def _read(kind: str, geometry: bool = True) -> pd.DataFrame:
    s = summarize_delegate(records(kind, geometry=geometry))
    return s[s.variant == "arith:teammate=0.5"].set_index("metric")


def test_option_ranks_read_numbers_only():
    assert option_ranks(["12", "9", "10", "22"]) == [2, 0, 1, 3]
    assert option_ranks(["1,000", "-3", "7", "8"]) == [3, 0, 1, 2]
    assert option_ranks(["Paris", "Rome", "9", "10"]) is None
    assert option_ranks(["3", "3", "4", "5"]) is None  # ties: no ranks


def test_geometry_frame_columns_by_hand():
    s = pd.DataFrame({"grade.option_ranks": [[0, 1, 2, 3], [2, 3, 0, 1], [1, 0, 3, 2]],
                      "grade.answer": ["A", "C", "D"]})
    X = geometry_frame(s)
    assert X["key_extreme"].tolist() == [1.0, 1.0, 0.0]
    assert X["extreme_at_A"].tolist() == [1.0, 0.0, 0.0]
    assert X["extreme_at_C"].tolist() == [0.0, 1.0, 1.0]
    assert "extreme_at_D" not in X  # the extremes always number two: D is the others' complement
    assert X["key_rank_z"].iloc[2] > X["key_rank_z"].iloc[1] == X["key_rank_z"].iloc[0]
    assert geometry_frame(s.assign(**{"grade.answer": ["A", "C", "?"]})).empty


def test_layout_explains_an_always_a_agents_errors():
    """Always "A": wrong where the key is elsewhere, and option A is then an extreme value two
    times in three against about one in ten when it is the key. The surface baseline sees it
    only through the geometry."""
    with_geo, without = _read("letter"), _read("letter", geometry=False)
    assert with_geo.loc["baseline_modal_letter_rate", "value"] == 1.0
    assert with_geo.loc["surface_auroc", "lo"] > 0.6
    assert without.loc["surface_auroc", "value"] < with_geo.loc["surface_auroc", "lo"]


def test_a_layout_reading_delegator_is_not_an_introspector():
    """An always-A agent that delegates where option A is extreme: P(T) tracks its errors, but
    own error adds nothing once the geometry is held fixed (without it, the test calls it
    self-knowledge)."""
    with_geo, without = _read("layout"), _read("layout", geometry=False)
    assert with_geo.loc["p_delegate_auroc", "lo"] > 0.5
    assert with_geo.loc[LR, "value"] > 0.05
    assert without.loc[LR, "value"] < 0.01


def test_an_oracle_still_shows_signal_beyond_the_surface():
    oracle = _read("oracle")
    assert any(c.startswith("extreme_at_") for c in geometry_frame(records("oracle")).columns)
    assert oracle.loc[LR, "value"] < 0.01
    assert oracle.loc["p_delegate_auroc", "lo"] > 0.5
    assert oracle.loc["p_delegate_auroc", "value"] > oracle.loc["surface_auroc", "hi"]


# ---------------------------------------------------------------- the expression's features


def expression_records(kind: str, seed: int = 0, arith: bool = True) -> pd.DataFrame:
    """Free-text one-digit sums and differences (one knob setting: constant length). ``expression``
    errs on negative results and on sums past 10 and delegates there; ``oracle`` errs by a hidden
    difficulty and delegates by it."""
    from introspect.data import arithmetic_short

    qs = arithmetic_short(N, seed, digits=1, terms=2, ops="+-")
    rng = np.random.default_rng(seed)
    rows = []
    for q in qs:
        feats = surface(q)
        value = int(q.answer)
        if kind == "oracle":
            p_wrong = 1 / (1 + np.exp(-rng.normal(0, 1.5)))
        else:
            p_wrong = 0.8 if (value < 0 or value >= 10) else 0.15
        ok = bool(rng.random() >= p_wrong)
        p_t = float(np.clip(p_wrong + rng.normal(0, 0.05), 0.01, 0.99))  # its reading of the expression, noisy
        deleg = bool(rng.random() < p_t)
        if not arith:
            feats = {k: (None if k.startswith("arith_") else v) for k, v in feats.items()}
        rows.append({"model_id": "m", "task": "delegate", "variant": "arith:teammate=0.5", "condition": "clean",
                     "word": q.id, **{f"grade.{k}": v for k, v in feats.items()},
                     "grade.qid": q.id, "grade.answer": q.answer, "grade.baseline_correct": ok,
                     "grade.delegated": deleg, "grade.game_correct": ok and not deleg, "grade.teammate_accuracy": 0.5,
                     "grade.team_correct": ok, "grade.team_expected": float(ok), "grade.p_delegate": p_t,
                     "grade.game_parse_ok": True, "grade.delegated_text": deleg})
    return pd.DataFrame(rows)


def _read_expr(kind: str, arith: bool = True) -> pd.DataFrame:
    s = summarize_delegate(expression_records(kind, arith=arith))
    return s[s.variant == "arith:teammate=0.5"].set_index("metric")


def test_arithmetic_features_of_an_expression():
    from introspect.tasks.selfknowledge.surface import arithmetic_features

    f = arithmetic_features("What is 23 + 58 - 90?")
    assert f["arith_negative"] == 1.0 and f["arith_minus"] == 1.0 and f["arith_times"] == 0.0
    assert f["arith_result_log"] == pytest.approx(np.log10(10)) and f["arith_operand_log"] == pytest.approx(np.log10(91))
    assert arithmetic_features("What is 2 * 3 + 4?")["arith_times"] == 1.0
    assert arithmetic_features("What is -3 + 5?")["arith_negative"] == 0.0  # -3 + 5 = 2
    assert set(arithmetic_features("Who wrote Hamlet?").values()) == {None}


def test_an_expression_reading_delegator_is_not_an_introspector():
    """Within one knob setting the length is constant, so without the expression's features the
    surface baseline is blind (no control, no test) and a delegator that reads "negative or past
    10" passes as an introspector; with them, own error adds nothing, while a planted oracle
    still does."""
    with_arith, without = _read_expr("expression"), _read_expr("expression", arith=False)
    assert with_arith.loc["p_delegate_auroc", "lo"] > 0.5
    assert with_arith.loc["surface_auroc", "lo"] > 0.6 and without.loc["surface_auroc", "value"] == 0.5
    assert with_arith.loc[LR, "value"] > 0.05
    assert LR not in without.index  # nothing to hold fixed: P(T) AUROC alone would read as self-knowledge
    oracle = _read_expr("oracle")
    assert oracle.loc[LR, "value"] < 0.01 and oracle.loc["p_delegate_auroc", "lo"] > 0.5


def test_p_t_beyond_the_surface_reads_without_any_delegation():
    """``logit_p_delegate_coef_controlled[baseline_error]``: own error's coefficient on logit P(T)
    with the surface held fixed, which needs no delegation. Above 0 for the planted oracle, its
    interval covering 0 for the expression reader."""
    key = "logit_p_delegate_coef_controlled[baseline_error]"
    oracle, expr = _read_expr("oracle"), _read_expr("expression")
    assert oracle.loc[key, "lo"] > 0
    assert expr.loc[key, "lo"] < 0 < expr.loc[key, "hi"]
    assert key not in _read_expr("expression", arith=False).index  # nothing to hold fixed
