"""Cross-prediction with the behaviour held fixed (``crosspredict.cross_prediction``): the
one-pass leave-one-item-out AUROC equals the definition, the paired interval keeps its 95% when
two predictors know B's behaviour equally well and excludes 0 when B knows itself better, and
the minimum-class gate says "not judged" below 10 items of a class."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from introspect.stats.auroc import auroc_point
from introspect.stats.items import expand_draws
from introspect.tasks.selfknowledge.crossmodel import loo_auroc
from introspect.tasks.selfknowledge.crosspredict import MIN_CLASS, cross_prediction


def _game(err: dict[str, np.ndarray], p: dict[str, np.ndarray]) -> pd.DataFrame:
    """Flat Delegate Game records: each model's baseline error per question (``err``) and its
    P(T) (``p``; a model missing from ``p`` predicted nothing)."""
    rows = []
    for m, e in err.items():
        for q, wrong in enumerate(e):
            rows.append({"model_id": m, "task": "delegate", "variant": "arith:teammate=0.5",
                         "grade.qid": f"q{q}", "grade.source": "arith", "grade.baseline_correct": not wrong,
                         "grade.p_delegate": float(p[m][q]) if m in p else None})
    return pd.DataFrame(rows)


def _sig(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def _run(rng: np.random.Generator, y: np.ndarray, d_self: float, d_other: float, shared: float = 0.0) -> pd.Series:
    """B's behaviour ``y`` held fixed; B's and P's P(T) binormal with separations ``d_self`` and
    ``d_other`` (AUROC Φ(d/√2)); noise independent, or sharing an item effect of correlation
    ``shared`` (both models' sense of which items look hard). Returns B's self_minus_predictor row."""
    u = rng.normal(size=y.size)
    noise = [math.sqrt(shared) * u + math.sqrt(1 - shared) * rng.normal(size=y.size) for _ in range(2)]
    p = {"B": _sig(d_self * y + noise[0]), "P": _sig(d_other * y + noise[1])}
    df = _game({"B": y, "P": rng.random(y.size) < 0.5}, p)
    out = cross_prediction(df)
    return out[(out.metric == "self_minus_predictor") & (out.behaviour == "B")].iloc[0]


def _fixed_behaviour(n: int, rate: float = 0.4) -> np.ndarray:
    y = np.zeros(n, bool)
    y[np.random.default_rng(n).permutation(n)[: round(rate * n)]] = True
    return y


def test_leave_one_item_out_auroc_equals_the_definition():
    """Ties, several draws per item, a missing draw, a missing prediction: every deletion equals
    ``auroc_point`` on the remaining items' draws."""
    rng = np.random.default_rng(3)
    for _ in range(50):
        n = int(rng.integers(3, 25))
        p = np.round(rng.random(n) * 4) / 4
        p[rng.random(n) < 0.1] = np.nan
        draws = [[None if rng.random() < 0.1 else float(rng.random() < 0.4) for _ in range(int(rng.integers(1, 4)))]
                 for _ in range(n)]
        est, loo = loo_auroc(p, draws)
        pp, y, c = expand_draws(list(p), draws, list(range(n)))
        assert est == pytest.approx(auroc_point(pp, y >= 0.5), nan_ok=True)
        for i in range(n):
            keep = np.array([ci != i for ci in c], bool)
            assert loo[i] == pytest.approx(auroc_point(pp[keep], y[keep] >= 0.5), nan_ok=True)


@pytest.mark.calibration
def test_interval_covers_zero_when_two_predictors_know_b_equally():
    """Null: B's own P(T) and P's separate B's errors equally (d = 1, AUROC 0.76), 400 games per
    setting with B's errors fixed: 60 and 150 items (40% errors), independent noise; 150 items
    with noise sharing an item effect (ρ = 0.5); 100 items with 10 errors, at the class gate.
    The paired 95% interval covers 0 in ≥ 0.93 (about 25 s)."""
    rng = np.random.default_rng(11)
    for n, rate, shared in ((60, 0.4, 0.0), (150, 0.4, 0.0), (150, 0.4, 0.5), (100, 0.1, 0.0)):
        y = _fixed_behaviour(n, rate)
        rows = [_run(rng, y, 1.0, 1.0, shared) for _ in range(400)]
        cover = np.mean([r.lo <= 0 <= r.hi for r in rows])
        print(f"cross-prediction null coverage at {n} items, {int(y.sum())} errors, shared {shared}: {cover:.3f}")
        assert all(r.note == "" and r.n == n for r in rows)
        assert 0.93 <= cover <= 0.99, (n, shared, cover)


def test_interval_excludes_zero_when_b_knows_itself_better():
    """Power: B's P(T) separates its errors with d = 1.4 (AUROC 0.84), P's with d = 0.4 (0.61);
    the interval lies above 0 in most of 200 games of 100 items, never below."""
    rng = np.random.default_rng(12)
    y = _fixed_behaviour(100)
    rows = [_run(rng, y, 1.4, 0.4) for _ in range(200)]
    above, below = np.mean([r.lo > 0 for r in rows]), np.mean([r.hi < 0 for r in rows])
    print(f"cross-prediction power at 100 items (AUROC 0.84 vs 0.61): {above:.3f}")
    assert above >= 0.8 and below == 0


def test_rows_are_judged_with_enough_of_each_class_and_not_below():
    """The same records judged (B knows its errors, P does not: above 0) and not judged (3 of
    B's 69 answers wrong): NaN, no interval, a note that says why; the counts stay."""
    rng = np.random.default_rng(5)
    y = _fixed_behaviour(69, 0.3)
    noise = rng.normal(size=69)
    df = _game({"B": y, "P": rng.random(69) < 0.5}, {"B": _sig(3 * y + noise), "P": _sig(rng.normal(size=69))})
    out = cross_prediction(df).set_index(["behaviour", "predictor", "metric"])
    judged = out.loc[("B", "P", "self_minus_predictor")]
    assert judged.note == "" and judged.lo > 0 and judged.n == 69
    assert out.loc[("B", "B", "auroc")].self and out.loc[("B", "B", "auroc")].value > 0.9
    assert not out.loc[("B", "P", "auroc")].self and out.loc[("B", "P", "auroc")].lo < 0.5
    few = np.zeros(69, bool)
    few[[4, 20, 50]] = True
    df = _game({"B": few, "P": y}, {"B": _sig(3 * few + noise), "P": _sig(rng.normal(size=69))})
    out = cross_prediction(df)
    gated = out[out.behaviour == "B"]
    assert len(gated) == 3 and gated.value.isna().all() and gated.lo.isna().all() and gated.hi.isna().all()
    assert (gated.note == f"not judged: 3 positive, 66 negative items: fewer than {MIN_CLASS} of a class").all()
    assert (gated.positives == 3).all() and (gated.negatives == 66).all()
    other = out[(out.behaviour == "P") & (out.metric == "self_minus_predictor")].iloc[0]
    assert other.note == "" and math.isfinite(other.value)  # P's behaviour (21 errors) is judged


def test_a_behaviour_owner_without_predictions_gets_a_reason():
    """B answered but predicted nothing: P's reading of B is scored, the difference is not."""
    y = _fixed_behaviour(40)
    df = _game({"B": y, "P": ~y}, {"P": _sig(np.arange(40) % 7 - 3.0)})
    out = cross_prediction(df)
    row = out[(out.behaviour == "B") & (out.metric == "self_minus_predictor")].iloc[0]
    assert math.isnan(row.value) and row.note == "not judged: B made no prediction on the items P predicted"
    assert out[(out.behaviour == "B") & (out.metric == "auroc")].value.notna().all()


def test_several_draws_count_an_item_in_each_class_it_shows():
    """SEB restriction, K = 2 judged draws per question: a mixed item counts once per class."""
    rows = []
    for m in ("B", "P"):
        for q in range(30):
            rows.append({"model_id": m, "task": "seb-restriction", "variant": "r", "grade.qid": f"q{q}",
                         "grade.source": "r", "grade.p_answer": q / 30 if m == "B" else 0.5,
                         "grade.judged_answered": [1.0, 0.0] if q < 12 else [1.0, 1.0]})
    out = cross_prediction(pd.DataFrame(rows))
    r = out[(out.behaviour == "B") & (out.predictor == "B")].iloc[0]
    assert (r.positives, r.negatives, r.n, r.note) == (30, 12, 30, "")
    assert cross_prediction(pd.DataFrame(columns=["model_id", "task"])).empty
