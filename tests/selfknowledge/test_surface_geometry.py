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
