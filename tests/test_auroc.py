"""The AUROC interval (``introspect.stats.auroc``): hand-checked values, width at the boundary, the
clustered design effect, and coverage by simulation (issue 19: the Delegate Game's
``confidence_auroc`` printed 1.000 [1.000, 1.000] from a percentile bootstrap)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from introspect.stats.auroc import auroc_ci, auroc_point, coverage, design_effect, newcombe


def test_point_is_mann_whitney_with_half_ties():
    assert auroc_point([0.9, 0.4, 0.4, 0.1], [1, 1, 0, 0]) == 0.875
    assert math.isnan(auroc_point([0.1, 0.2], [1, 1]))


def test_newcombe_bounds_solve_the_score_equation():
    """Each bound t satisfies |a − t| = z·sd(t) with Newcombe's variance at N* = (m + n)/2."""
    a, m, n, z = 0.8, 12, 20, 1.959963984540054
    ns = (m + n) / 2 - 1
    for t in newcombe(a, m, n):
        v = t * (1 - t) / (m * n) * (1 + ns * ((1 - t) / (2 - t) + t / (1 + t)))
        assert abs(a - t) == pytest.approx(z * math.sqrt(v), abs=1e-9)
    lo, hi = newcombe(a, m, n)
    assert 0 < lo < a < hi < 1


def test_a_perfect_separation_keeps_width():
    """The percentile bootstrap gives [1, 1] here; the score interval reaches down, less with
    more rows, and mirrors at 0."""
    s = np.r_[np.zeros(27), np.ones(3)]
    a, lo, hi = auroc_ci(s, s)
    assert a == hi == 1.0 and 0.5 < lo < 0.8
    _, lo_big, _ = auroc_ci(np.r_[s, s, s], np.r_[s, s, s])
    assert lo < lo_big < 1.0
    a0, lo0, hi0 = auroc_ci(s, 1 - s)
    assert a0 == lo0 == 0.0 and hi0 == pytest.approx(1 - lo)


def test_interval_mirrors_when_the_score_is_negated():
    rng = np.random.default_rng(1)
    y = rng.random(40) < 0.4
    s = rng.normal(size=40) + y
    a, lo, hi = auroc_ci(s, y)
    b, lo2, hi2 = auroc_ci(-s, y)
    assert (b, lo2, hi2) == pytest.approx((1 - a, 1 - hi, 1 - lo))


def test_design_effect_counts_duplicated_rows_once():
    """Each row copied k times into its own cluster carries no more information than one copy:
    the design effect is about k, so the interval matches the unduplicated one's width; rows
    that are their own clusters have a design effect of about 1."""
    rng = np.random.default_rng(2)
    y = np.r_[np.ones(15, bool), np.zeros(25, bool)]
    s = rng.normal(size=40) + y
    k = 6
    d = design_effect(np.repeat(s, k), np.repeat(y, k), np.repeat(np.arange(40), k))
    assert d == pytest.approx(k, rel=0.15)
    assert design_effect(s, y, np.arange(40)) == pytest.approx(1.0, abs=0.1)
    one = auroc_ci(s, y)
    dup = auroc_ci(np.repeat(s, k), np.repeat(y, k), np.repeat(np.arange(40), k))
    assert dup[0] == pytest.approx(one[0])
    assert dup[2] - dup[1] >= 0.9 * (one[2] - one[1])
    naive = auroc_ci(np.repeat(s, k), np.repeat(y, k))  # clusters ignored: far too narrow
    assert naive[2] - naive[1] < 0.6 * (one[2] - one[1])


def test_a_separated_clustered_sample_counts_clusters():
    """At AUROC 1 the variances are 0: each cluster counts once (rows per cluster)."""
    y = np.repeat([1, 1, 0, 0, 0, 0], 5).astype(bool)
    assert design_effect(y.astype(float), y, np.repeat(np.arange(6), 5)) == 5.0
    _, lo, _ = auroc_ci(y.astype(float), y, np.repeat(np.arange(6), 5))
    _, lo_rows, _ = auroc_ci(y.astype(float), y)
    assert lo < lo_rows


# Coverage: 400 samples per setting (Monte-Carlo error ±1.1 points). Settings span small and
# unbalanced samples, true AUROC up to 0.99 (where samples often separate perfectly), ties (a
# score that is a share of 8 draws), clusters of one class, and the self-knowledge layout (one
# prediction per item, 5–8 sampled draws as labels; association's 6 options per target, with
# item effects on both the score and the outcome). Each setting ≥ 0.90; the mean ≥ 0.94.
SETTINGS = [
    dict(auc=0.5, m=10, n=10), dict(auc=0.9, m=10, n=10), dict(auc=0.97, m=10, n=20),
    dict(auc=0.99, m=5, n=25), dict(auc=0.9, m=3, n=27), dict(auc=0.75, m=30, n=60),
    dict(auc=0.9, m=10, n=20, levels=9),
    dict(auc=0.75, m=40, n=40, cluster_size=8, icc=0.5), dict(auc=0.95, m=40, n=40, cluster_size=8, icc=0.5),
    dict(items=(30, 8, 1.5, 1.0)), dict(items=(10, 5, 1.5, 1.0)), dict(items=(30, 8, 0.5, 0.0)),
    dict(items=(30, 8, 3.0, 5.0)), dict(items=(30, 8, 1.0, 1.0, 6, 1.0)),
]


@pytest.fixture(scope="module")
def covered() -> list[dict]:
    return [coverage(runs=400, seed=i, **kw) for i, kw in enumerate(SETTINGS)]


def test_every_setting_covers(covered):
    for kw, r in zip(SETTINGS, covered):
        assert r["coverage"] >= 0.90, f"{kw}: {r}"
    assert np.mean([r["coverage"] for r in covered]) >= 0.94


def test_the_simulated_truths_are_the_ones_asked_for(covered):
    for kw, r in zip(SETTINGS, covered):
        if "auc" in kw and "levels" not in kw:
            assert r["truth"] == pytest.approx(kw["auc"], abs=0.005), kw
