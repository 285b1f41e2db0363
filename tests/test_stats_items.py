"""The self-knowledge statistics on hand-computed tables, and the properties that make them the
right test: cluster-robust errors do not shrink when a question is repeated, held-out baselines
never see their own fold, paired tests use the pairs."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import chi2

from introspect.stats import items as S
from introspect.stats.auroc import auroc_point
from introspect.stats.intervals import wilson


def test_auroc_ece_and_score_block_by_hand():
    assert auroc_point(np.array([0.9, 0.4, 0.4, 0.1]), np.array([1, 1, 0, 0], bool)) == 0.875
    assert math.isnan(auroc_point(np.array([0.1, 0.2]), np.array([1, 1], bool)))
    # bins 0.1: mean p .1 vs mean y .5 (2 rows); 0.9: .9 vs 1 (2 rows) -> (2*.4 + 2*.1) / 4
    assert S.ece(np.array([0.1, 0.1, 0.9, 0.9]), np.array([0, 1, 1, 1])) == pytest.approx(0.25)
    p, y = np.array([0.8, 0.8, 0.2, 0.2]), np.array([1.0, 0, 0, 0])
    s = S.score_block(p, y, np.arange(4))
    assert s["accuracy"][0][0] == pytest.approx(3 / 4)
    assert s["majority_baseline"][0][0] == pytest.approx(3 / 4)
    assert s["brier"][0][0] == pytest.approx((0.04 + 0.64 + 0.04 + 0.04) / 4)
    assert s["brier_baseline"][0][0] == pytest.approx((0.75 ** 2 + 3 * 0.25 ** 2) / 4)
    assert s["auroc"][0][0] == pytest.approx((0.5 + 1 + 1) / 3)
    assert s["base_rate"][0][0] == 0.25 and s["accuracy"][1] == 4


def test_expand_draws_drops_unparsed_behaviour_and_missing_predictions():
    p, y, c = S.expand_draws([0.7, None, 0.2], [[1, None, 0], [1, 1], [None]], ["a", "b", "c"])
    assert list(p) == [0.7, 0.7] and list(y) == [1.0, 0.0] and list(c) == ["a", "a"]


def test_fisher_by_hand():
    a = np.array([1, 1, 1, 0, 1, 0, 0, 0], bool)  # table [[3, 1], [1, 3]]
    b = np.array([1, 1, 1, 1, 0, 0, 0, 0], bool)
    (orr, lo, hi), p = S.fisher(a, b)
    assert orr == pytest.approx(9.0) and lo < 9 < hi
    assert p == pytest.approx(34 / 70)  # hypergeometric: (16 + 1 + 16 + 1) / 70


def test_fisher_odds_ratio_is_undefined_when_a_variable_never_varies():
    """A model that never delegates: no odds ratio (it read 1.6 [0.03, 83] from the 0.5 added to
    empty cells), Fisher's p 1; one delegation in each error class gives a number again."""
    errors = np.array([1, 0, 1, 0, 1, 0, 0, 0], bool)
    (orr, lo, hi), p = S.fisher(np.zeros(8, bool), errors)
    assert math.isnan(orr) and math.isnan(lo) and math.isnan(hi) and p == pytest.approx(1.0)
    (orr, _, _), _ = S.fisher(errors, np.ones(8, bool))
    assert math.isnan(orr)
    (orr, lo, hi), _ = S.fisher(np.array([1, 0, 0, 0, 1, 0, 0, 0], bool), errors)
    assert math.isfinite(orr) and lo < orr < hi


def test_lr_test_matches_the_closed_form():
    x = np.array([1] * 8 + [0] * 8, float)
    y = np.array([1] * 6 + [0] * 2 + [1] * 2 + [0] * 6, float)
    stat, df, p = S.lr_test(y, pd.DataFrame({"x": x}), pd.DataFrame())
    full = 16 * (0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    want = 2 * (full - 16 * math.log(0.5))
    assert df == 1 and stat == pytest.approx(want, rel=1e-5)
    assert p == pytest.approx(chi2.sf(want, 1), rel=1e-4)


def test_lr_test_is_nan_when_the_controls_alone_separate_y_and_large_when_only_the_term_does():
    # a control that separates delegation (a model that delegates every subtraction): both fits
    # reach llf ~ 0, and 2 * (0 - 0) must not read as p = 1 ("nothing beyond the surface")
    minus = np.array([1] * 6 + [0] * 10, float)
    err = np.array([1, 0] * 8, float)
    y = minus.copy()
    stat, df, p = S.lr_test(y, pd.DataFrame({"minus": minus, "err": err}), pd.DataFrame({"minus": minus}))
    assert math.isnan(p) and math.isnan(stat)
    # the added term alone separates y (a perfect introspector): a real, tiny p
    stat, df, p = S.lr_test(err, pd.DataFrame({"err": err}), pd.DataFrame())
    assert df == 1 and p < 1e-4


def test_paired_binary_uses_pairs():
    (d, lo, hi), p = S.paired_binary(np.array([1, 1, 1, 0.]), np.array([1, 0, 0, 0.]))
    assert d == 0.5 and lo <= d <= hi
    assert p == pytest.approx(0.5)  # McNemar exact: 2 discordant pairs, both one way -> 2 * 0.5**2
    # no discordant pair (Gemma's recovery: 1 of 30 right before and after): not 0 [0, 0]
    one = np.r_[1.0, np.zeros(29)]
    (d, lo, hi), p = S.paired_binary(one, one)
    assert d == 0 and lo < -0.05 and hi > 0.05 and p == 1.0


@pytest.mark.parametrize("cells", [
    (0.02, 0.01, 0.01, 0.96),  # rare successes, no change (P(both), P(a only), P(b only), P(neither))
    (0.3, 0.5, 0.0, 0.2),  # a large one-way drop
    (0.25, 0.25, 0.25, 0.25),  # independent halves
    (0.25, 0.55, 0.05, 0.15),  # clean 0.8 → perturbed 0.3
    (0.0, 0.1, 0.0, 0.9),  # a small one-sided drop from zero
])
def test_paired_difference_interval_covers(cells):
    """Newcombe's paired interval on 30 pairs, 400 samples per setting: ≥ 0.92 (simulated
    0.94–1.00 over 1,000 samples at 30 and 100 pairs; conservative where successes are rare)."""
    rng = np.random.default_rng(7)
    d, hits = cells[1] - cells[2], 0
    for _ in range(400):
        k = rng.choice(4, size=30, p=cells)
        _, lo, hi = S.newcombe_paired((k == 0) | (k == 1), (k == 0) | (k == 2))
        hits += lo - 1e-12 <= d <= hi + 1e-12
    assert hits / 400 >= 0.92


def test_cluster_robust_errors_do_not_shrink_with_repeats():
    rng = np.random.default_rng(0)
    n, k = 150, 4
    x = rng.normal(size=n)
    y = (rng.random(n) < 1 / (1 + np.exp(-x))).astype(float)
    one = S.logit_fit(y, pd.DataFrame({"x": x}))
    rep = pd.DataFrame({"x": np.repeat(x, k)})
    naive = S.logit_fit(np.repeat(y, k), rep)
    clustered = S.logit_fit(np.repeat(y, k), rep, np.repeat(np.arange(n), k))
    assert naive.bse["x"] == pytest.approx(one.bse["x"] / math.sqrt(k), rel=0.02)  # the bug
    assert clustered.bse["x"] == pytest.approx(one.bse["x"], rel=0.05)  # the fix
    assert S.logit_fit(np.ones(10), pd.DataFrame({"x": np.arange(10.)})) is None  # one class


def test_held_out_surface_baseline_never_sees_its_fold():
    rng = np.random.default_rng(1)
    n = 60
    x = rng.normal(size=n)
    y = (x > 0).astype(float)
    groups = np.arange(n) // 2
    folds = S.grouped_folds(groups, 5)
    assert sorted(np.concatenate(folds).tolist()) == list(range(n))
    for f in folds:  # a group never straddles two folds
        assert not set(groups[f]) & set(groups[np.setdiff1d(np.arange(n), f)])
    X = pd.DataFrame({"x": x})
    p, fold = S.cross_validated_p(y, X, groups, return_folds=True)
    assert auroc_point(p, y > 0.5) > 0.95
    xs = (x - x.mean()) / x.std(ddof=1)
    for f in np.unique(fold):  # each fold predicted by a fit on the other folds only
        test, train = fold == f, fold != f
        w = S.ridge_logit(y[train] >= 0.5, pd.DataFrame({"x": xs[train]}))
        assert np.allclose(p[test], 1 / (1 + np.exp(-(w[0] + w[1] * xs[test]))))
    strat = S.grouped_folds(groups, 5, y=y)  # stratified: every fold keeps about the base rate
    assert max(abs(y[t].mean() - y.mean()) for t in strat) < 0.2


def test_pair_credit_and_cluster_boot():
    assert S.pair_credit(0.9, (1, 5), (0, 9)) == 1.0  # i fails, j right: i is harder
    assert S.pair_credit(0.9, (0, 5), (1, 9)) == 0.0
    assert S.pair_credit(0.2, (0, 5), (0, 5)) == 0.5  # true tie: half
    assert S.pair_credit(None, (0, 5), (1, 5)) is None
    est, lo, hi = S.boot_mean([1, 1, 0, 0, np.nan], ["a", "a", "b", "b", "c"])
    assert est == 0.5 and lo == 0.0 and hi == 1.0  # two clusters: resamples are 0, .5 or 1


def test_calibration_slope_recovers_calibration():
    rng = np.random.default_rng(2)
    p = rng.uniform(0.05, 0.95, 3000)
    y = (rng.random(3000) < p).astype(float)
    (a, alo, ahi), (b, blo, bhi) = S.calibration_slope(p, y)
    assert alo < 0 < ahi and blo < 1 < bhi
    (_, _, _), (b2, _, _) = S.calibration_slope(np.clip(p + (p - 0.5), 0.01, 0.99), y)
    assert b2 < 0.8  # over-confident predictions: slope below 1


def test_held_out_auroc_counts_pairs_within_folds_and_is_unbiased_without_signal():
    p = np.array([0.9, 0.1, 0.2, 0.8])
    y = np.array([1, 0, 1, 0], bool)
    fold = np.array([0, 0, 1, 1])
    assert S.fold_auroc(p, y, fold) == 0.5  # fold 0 right (1/1), fold 1 wrong (0/1); no cross pairs
    assert auroc_point(p, y) == 0.75  # pooling would count cross-fold pairs too
    pooled, within = [], []
    for seed in range(150):  # 30 rows, 70% positive, features unrelated to the label
        rng = np.random.default_rng(seed)
        yy = (rng.random(30) < 0.7).astype(float)
        X = pd.DataFrame({"a": rng.normal(size=30), "b": (rng.random(30) < 0.3).astype(float)})
        q, f = S.cross_validated_p(yy, X, np.arange(30), return_folds=True)
        pooled.append(auroc_point(q, yy > 0.5))
        within.append(S.fold_auroc(q, yy > 0.5, f))
    assert abs(np.nanmean(within) - 0.5) < 0.04
    assert np.nanmean(within) > np.nanmean(pooled)  # pooled held-out AUROC runs low by itself


def test_rate_ci_keeps_width_at_one_and_covers():
    """80 hits in 80 draws over 10 items: the bootstrap says [1, 1]; ``rate_ci`` reaches below 1.
    Coverage of the mean item rate, 10–30 items × 8 draws, item rates Beta around 0.5–0.995
    (300 samples each): every setting ≥ 0.92 (the bootstrap: 0.33 at 0.995 with 10 items)."""
    y, c = np.ones(80), np.repeat(np.arange(10), 8)
    assert S.boot_mean(y, c)[1:] == (1.0, 1.0)
    v, lo, hi = S.rate_ci(y, c)
    assert v == hi == 1.0 and 0.85 < lo < 0.99
    assert S.rate_ci([1, 0, 1, 1])[1:] == pytest.approx(wilson(3, 4)[1:])
    rng = np.random.default_rng(0)
    for g, mean, conc in [(30, 0.5, 2), (10, 0.97, 10), (10, 0.995, 50), (30, 0.8, 1)]:
        hit = 0
        for _ in range(300):
            q = rng.beta(mean * conc, (1 - mean) * conc, g)
            y = (rng.random((g, 8)) < q[:, None]).astype(float).ravel()
            _, lo, hi = S.rate_ci(y, np.repeat(np.arange(g), 8))
            hit += lo <= mean <= hi
        assert hit / 300 >= 0.92, (g, mean, hit / 300)
