"""Planted positives for the Delegate Game (self-knowledge issue, 5a): synthetic agents with a
known nature go through the real summary (``summarize_delegate``), and each is recovered as what
it is.

- an **oracle** whose P(T) equals its own probability of being wrong (driven mostly by a
  difficulty the surface does not show): P(T) predicts its errors, its delegation lifts accuracy,
  and own error predicts delegation beyond the surface controls;
- a **surface-only** agent whose errors and P(T) both follow question length: P(T) predicts its
  errors just as well, but the surface baseline does too, and own error adds nothing beyond it;
- a **letter-biased null** that answers "A" to everything and delegates at random: P(T) says
  nothing about its errors, its lift covers 0, and its modal-letter rate is 1.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from introspect.tasks.selfknowledge.game_metrics import summarize_delegate

LR = "lr_p[baseline_error|surface]"


def agent(kind: str, n: int = 200, seed: int = 0, teammate: float = 0.5) -> pd.DataFrame:
    """Delegate records of one synthetic agent (one row per question, the real grade fields)."""
    rng = np.random.default_rng(seed)
    length = rng.integers(20, 120, n)
    hidden = rng.normal(0, 1.5, n)  # a difficulty only the agent itself can see
    logit_wrong = (length - 70) / 15.0 if kind == "surface" else hidden + (length - 70) / 60.0
    p_wrong = 1 / (1 + np.exp(-logit_wrong))
    key = rng.choice(list("ABCD"), n)
    if kind == "letter":
        choice = np.full(n, "A")
        wrong = key != "A"
        p_t = np.clip(rng.normal(0.4, 0.1, n), 0.01, 0.99)
    else:
        wrong = rng.random(n) < p_wrong
        choice = np.where(wrong, np.where(key == "A", "B", "A"), key)
        p_t = p_wrong if kind == "oracle" else 1 / (1 + np.exp(-(length - 70) / 15.0))
    deleg = rng.random(n) < p_t
    team = rng.random(n) < teammate
    rows = []
    for i in range(n):
        ok = bool(not wrong[i])
        rows.append({"model_id": "m", "task": "delegate", "variant": f"teammate{teammate}", "condition": "clean",
                     "word": f"q{i}", "grade.qid": f"q{i}", "grade.baseline_correct": ok,
                     "grade.baseline_choice": str(choice[i]), "grade.delegated": bool(deleg[i]),
                     "grade.game_correct": ok and not deleg[i], "grade.teammate_accuracy": teammate,
                     "grade.team_correct": bool(team[i]) if deleg[i] else ok,
                     "grade.team_expected": teammate if deleg[i] else float(ok),
                     "grade.p_delegate": float(p_t[i]), "grade.question_length": int(length[i]),
                     "grade.digit_fraction": 0.1, "grade.game_parse_ok": True,
                     "grade.delegated_text": bool(deleg[i])})
    return pd.DataFrame(rows)


def _read(kind: str, seed: int = 0) -> pd.DataFrame:
    s = summarize_delegate(agent(kind, seed=seed))
    return s[s.variant == "teammate0.5"].set_index("metric")


def test_each_planted_agent_is_recovered_as_what_it_is():
    oracle, surface, letter = (_read(k) for k in ("oracle", "surface", "letter"))
    # the oracle: self-knowledge beyond the surface
    assert oracle.loc["p_delegate_auroc", "lo"] > 0.5
    assert oracle.loc["self_accuracy_lift", "lo"] > 0
    assert oracle.loc[LR, "value"] < 0.001
    assert oracle.loc["p_delegate_auroc", "value"] > oracle.loc["surface_auroc", "hi"]
    # the surface agent: P(T) tracks its errors, but no better than the surface does
    assert surface.loc["p_delegate_auroc", "lo"] > 0.5
    assert surface.loc["surface_auroc", "lo"] > 0.85
    assert surface.loc[LR, "value"] > 0.05
    # the letter-biased null: nothing to read, and the letter prior is flagged
    assert letter.loc["p_delegate_auroc", "lo"] < 0.5 < letter.loc["p_delegate_auroc", "hi"]
    assert letter.loc["self_accuracy_lift", "lo"] < 0 < letter.loc["self_accuracy_lift", "hi"]
    assert letter.loc["baseline_modal_letter_rate", "value"] == 1.0


@pytest.mark.calibration
def test_planted_agents_over_seeds():
    """Over 30 seeds: the beyond-surface test finds the oracle every time and the surface agent
    at about its 5% level; the letter null's AUROC interval covers 0.5 at about its 95%."""
    runs = 30
    oracle = sum(_read("oracle", s).loc[LR, "value"] < 0.05 for s in range(runs))
    surface = sum(_read("surface", s).loc[LR, "value"] < 0.05 for s in range(runs))
    covers = 0
    for s in range(runs):
        r = _read("letter", s).loc["p_delegate_auroc"]
        covers += r["lo"] <= 0.5 <= r["hi"]
    assert oracle == runs
    assert surface <= 5  # 5% of 30 is 1.5; 6 or more would be p < 0.005 under a calibrated test
    assert covers >= 26  # 95% of 30 is 28.5; 25 or fewer would be p < 0.02
