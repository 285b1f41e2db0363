"""The Delegate Game's lift at a matched delegation rate (``matched_rate``): a control that
delegates nearly everything is read at the adapter's rate, where its lift can fail; a lift with
fewer than 20 kept items is "not judged"; the interval keeps its 95% for a model whose P(T)
knows nothing of its errors."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from introspect.tasks.selfknowledge.matched_rate import MIN_KEPT, lift_at_rate, matched_rate


def _game(models: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]) -> pd.DataFrame:
    """Flat records: per model (baseline wrong, P(T), delegated) per question."""
    rows = []
    for m, (wrong, p, deleg) in models.items():
        rows += [{"model_id": m, "task": "delegate", "variant": "items:teammate=0.5", "grade.qid": f"q{q}",
                  "grade.source": "items", "grade.baseline_correct": not bool(wrong[q]),
                  "grade.p_delegate": float(p[q]), "grade.delegated": bool(deleg[q])} for q in range(len(wrong))]
    return pd.DataFrame(rows)


def _adapter_and_control(rng: np.random.Generator, n: int = 250):
    wrong = rng.random(n) < 0.45
    p_ad = 1 / (1 + np.exp(-(2.5 * wrong - 1.2 + rng.normal(0, 1, n))))  # tracks its errors
    p_ctl = rng.uniform(0.9, 1.0, n)  # delegates nearly everything, P(T) blind to errors
    wrong_ctl = wrong ^ (rng.random(n) < 0.1)  # the control's errors nearly the base model's
    return {"adapter": (wrong, p_ad, p_ad > np.quantile(p_ad, 0.2)),
            "control": (wrong_ctl, p_ctl, p_ctl > 0.902)}


def test_the_control_is_read_at_the_adapters_rate_where_it_keeps_enough():
    """The control's own rate keeps too few items (not judged); at the adapter's rate (0.8) it
    keeps 50, its lift covers 0 and the adapter's lies above 0."""
    out = matched_rate(_game(_adapter_and_control(np.random.default_rng(1))))
    at = out[out.reference == "adapter"].set_index("model_id")
    assert at.loc["adapter", "rate"] == pytest.approx(0.8) and (at["kept"] == 50).all()
    assert at.loc["adapter", "lo"] > 0
    assert at.loc["control", "lo"] <= 0 <= at.loc["control", "hi"] and at.loc["control", "note"] == ""
    own = out[out.reference == "control"].set_index("model_id")
    assert (own["kept"] < MIN_KEPT).all() and own["value"].isna().all()
    assert own.loc["control", "note"].startswith("not judged:") and "fewer than 20" in own.loc["control", "note"]


def test_a_model_that_never_delegates_is_no_reference_and_nothing_delegated_is_not_judged():
    wrong = np.arange(40) % 3 == 0
    p = np.linspace(0, 0.4, 40)
    out = matched_rate(_game({"never": (wrong, p, np.zeros(40, bool)),
                              "some": (wrong, p, np.arange(40) < 4)}))
    assert set(out["reference"]) == {"some"}
    est, k, kept, why = lift_at_rate(p, ~wrong, [f"q{i}" for i in range(40)], 0.0)
    assert k == 0 and kept == 40 and np.isnan(est[0]) and "nothing delegated" in why


def test_the_highest_p_delegate_items_are_delegated_ties_by_key():
    p = np.array([0.9, 0.5, 0.9, 0.1] * 10)
    ok = np.ones(40, bool)
    ok[[0, 2]] = False  # the two highest are wrong
    est, k, kept, why = lift_at_rate(p, ok, [f"q{i:02d}" for i in range(40)], 0.05)
    assert (k, kept, why) == (2, 38, "")
    assert est[0] == pytest.approx(38 / 38 - 38 / 40)


@pytest.mark.calibration
def test_lift_at_a_matched_rate_covers_zero_for_a_blind_p_delegate():
    """Null: P(T) independent of the errors, 400 games each at 60 and 250 items (45% errors),
    delegating the top 80% and 50%: the 95% interval covers 0 in 0.93–0.99."""
    rng = np.random.default_rng(5)
    for n, rate in ((60, 0.5), (250, 0.8), (250, 0.5)):
        keys = [f"q{i}" for i in range(n)]
        cover = []
        for _ in range(400):
            ok = rng.random(n) >= 0.45
            (v, lo, hi), _, kept, why = lift_at_rate(rng.random(n), ok, keys, rate)
            assert why == "" and kept >= MIN_KEPT
            cover.append(lo <= 0 <= hi)
        print(f"lift at matched rate, null coverage at {n} items, rate {rate}: {np.mean(cover):.3f}")
        assert 0.93 <= np.mean(cover) <= 0.99, (n, rate, np.mean(cover))


def test_a_model_that_played_other_questions_under_the_same_variant_name_is_marked():
    """Two question files of one name share a variant: the rate is still read, and the row says
    the questions differ from the reference's (keys equal, answers not)."""
    wrong = np.arange(60) % 3 == 0
    p = np.linspace(0, 1, 60)
    d = _game({"a": (wrong, p, p > 0.5), "b": (wrong, p, p > 0.7), "c": (wrong, p, p > 0.7)})
    d["grade.answer"] = [str(q % 60 + (1000 if m == "c" else 0)) for m, q in zip(d["model_id"], range(len(d)))]
    out = matched_rate(d).set_index(["reference", "model_id"])
    assert out.loc[("a", "b"), "same_items"] and out.loc[("a", "a"), "same_items"]
    assert not out.loc[("a", "c"), "same_items"] and not out.loc[("c", "b"), "same_items"]
    from introspect.report.compare import Comparison, matched_table

    t = matched_table(Comparison(pd.DataFrame(), pd.DataFrame(), ("a", "b", "c"), matched=matched_rate(d)))
    assert set(t[(t["rate of"] == "a") & (t["model"] == "c")]["questions"]) == {"other ones"}
    assert set(t[(t["rate of"] == "a") & (t["model"] == "b")]["questions"]) == {"the reference's"}
