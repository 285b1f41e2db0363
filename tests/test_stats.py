import math

import numpy as np
import pytest

from introspect.stats.intervals import (
    _mcc_counts,
    bootstrap_diff,
    bootstrap_mean,
    mcc,
    mcc_ci,
    pairwise_order_accuracy,
    wilson,
)


def test_wilson_known_values():
    # Wilson 95% for 3/4: closed form with z = 1.959964
    p, lo, hi = wilson(3, 4)
    z = 1.959963984540054
    n, ph = 4, 0.75
    centre = (ph + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(ph * (1 - ph) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    assert p == 0.75
    assert lo == pytest.approx(centre - half, abs=1e-9)
    assert hi == pytest.approx(centre + half, abs=1e-9)
    assert (lo, hi) == pytest.approx((0.3006418, 0.9544127), abs=1e-6)
    # textbook values: 0/10 -> [0, 0.2775], 10/10 -> [0.7225, 1]
    assert wilson(0, 10)[1:] == pytest.approx((0.0, 0.27753), abs=1e-4)
    assert wilson(10, 10)[1:] == pytest.approx((0.72247, 1.0), abs=1e-4)


def test_wilson_empty_is_nan():
    assert all(math.isnan(v) for v in wilson(0, 0))


def test_bootstrap_diff_brackets_true_diff():
    rng = np.random.default_rng(1)
    a = rng.normal(1.0, 1.0, 400)
    b = rng.normal(0.5, 1.0, 400)
    d, lo, hi = bootstrap_diff(a, b, n_boot=2000, seed=0)
    assert d == pytest.approx(a.mean() - b.mean())
    assert lo < 0.5 < hi
    assert lo < d < hi
    assert hi - lo < 0.4
    # seeded: identical on repeat
    assert bootstrap_diff(a, b, seed=0) == (d, lo, hi)


def test_bootstrap_diff_drops_missing_and_empty():
    d, lo, hi = bootstrap_diff([1, 1, None, float("nan")], [0, 0])
    assert (d, lo, hi) == (1.0, 1.0, 1.0)
    assert all(math.isnan(v) for v in bootstrap_diff([], [1.0]))


def test_bootstrap_mean():
    m, lo, hi = bootstrap_mean([0.0, 1.0, 2.0, 3.0, 4.0])
    assert m == 2.0
    assert 0.0 <= lo < 2.0 < hi <= 4.0
    assert all(math.isnan(v) for v in bootstrap_mean([]))


def test_mcc_hand_computed():
    # table: TP=3, TN=2, FP=1, FN=1 -> (6-1)/sqrt(4*4*3*3) = 5/12
    y_true = [1, 1, 1, 1, 0, 0, 0]
    y_pred = [1, 1, 1, 0, 1, 0, 0]
    assert mcc(y_true, y_pred) == pytest.approx(5 / 12)
    assert mcc([1, 0, 1, 0], [1, 0, 1, 0]) == pytest.approx(1.0)
    assert mcc([1, 0, 1, 0], [0, 1, 0, 1]) == pytest.approx(-1.0)
    assert mcc([1, 1, 0], [1, 1, 1]) == 0.0  # empty margin


def test_mcc_ci_brackets_estimate():
    rng = np.random.default_rng(0)
    t = rng.random(300) < 0.5
    p = np.where(rng.random(300) < 0.8, t, ~t)
    est, lo, hi = mcc_ci(t, p)
    assert est == pytest.approx(mcc(t, p))
    assert lo < est < hi
    assert lo < 0.6 < hi  # true MCC of 80%-accurate balanced labels


def _mcc_coverage(n: int, p_err: float, p_deleg_err: float, p_deleg_ok: float, reps: int,
                  interval) -> float:
    """Share of simulated games whose interval holds the population MCC (degenerate games skipped)."""
    a, b = p_err * p_deleg_err, (1 - p_err) * p_deleg_ok  # P(err, deleg), P(ok, deleg)
    c, d = p_err - a, 1 - p_err - b
    truth = (a * d - b * c) / np.sqrt(p_err * (1 - p_err) * (a + b) * (c + d))
    rng = np.random.default_rng(7)
    hits = runs = 0
    for r in range(reps):
        err = rng.random(n) < p_err
        deleg = rng.random(n) < np.where(err, p_deleg_err, p_deleg_ok)
        est, lo, hi = interval(err, deleg, r)
        if np.isnan(est):
            continue
        runs += 1
        hits += lo - 1e-9 <= truth <= hi + 1e-9
    return hits / runs


def _percentile_mcc(t, p, seed):
    idx = np.random.default_rng(seed).integers(0, t.size, size=(1000, t.size))
    bt, bp = t[idx], p[idx]
    boots = _mcc_counts(*((x & y).sum(1) * 1.0 for x, y in ((bt, bp), (~bt, ~bp), (~bt, bp), (bt, ~bp))))
    return mcc(t, p), *np.quantile(boots, [0.025, 0.975])


def test_mcc_ci_covers_a_strong_signal_in_a_small_game_where_the_bootstrap_does_not():
    """30 items, delegation on 95% of errors and 5% of successes (true MCC 0.88): a perfect table
    is common and the percentile bootstrap collapses to [1, 1] on it."""
    jeffreys = _mcc_coverage(30, 0.7, 0.95, 0.05, 300, lambda t, p, r: mcc_ci(t, p, seed=r))
    boot = _mcc_coverage(30, 0.7, 0.95, 0.05, 300, _percentile_mcc)
    assert jeffreys >= 0.91, jeffreys
    assert boot < 0.85, boot  # the failure this interval fixes


def test_mcc_ci_covers_the_null_with_rare_delegation():
    assert _mcc_coverage(30, 0.7, 0.1, 0.1, 300, lambda t, p, r: mcc_ci(t, p, seed=r)) >= 0.91


def test_mcc_ci_keeps_the_observed_end_of_a_perfect_table():
    t = np.array([1, 1, 1, 0, 0, 0], bool)
    est, lo, hi = mcc_ci(t, t)
    assert (est, hi) == (1.0, 1.0) and 0 < lo < 1
    est, lo, hi = mcc_ci(t, ~t)
    assert (est, lo) == (-1.0, -1.0) and -1 < hi < 0


def test_mcc_ci_is_undefined_when_one_side_has_one_class():
    """A model that never delegates: no MCC and no interval, not a collapsed 0 [0, 0]."""
    errs = np.array([True, False, True, False, False])
    assert np.isnan(mcc_ci(errs, np.zeros(5, bool))).all()
    assert np.isnan(mcc_ci(np.ones(5, bool), errs)).all()


def test_pairwise_order_accuracy():
    assert pairwise_order_accuracy(["a", "b", "c"], ["a", "b", "c"]) == 1.0
    assert pairwise_order_accuracy(["c", "b", "a"], ["a", "b", "c"]) == 0.0
    # one swap out of 3 pairs
    assert pairwise_order_accuracy(["b", "a", "c"], ["a", "b", "c"]) == pytest.approx(2 / 3)
    # items missing from the prediction are ignored
    assert pairwise_order_accuracy(["a", "c"], ["a", "b", "c"]) == 1.0
    assert math.isnan(pairwise_order_accuracy(["a"], ["a", "b"]))


# ---------------------------------------------------------------- clustered intervals


def test_cluster_bootstrap_degenerate_cases():
    from introspect.stats.intervals import Part, cluster_bootstrap, cluster_mean

    # every concept has the same rate: no between-concept spread, a zero-width interval
    x = [1, 0, 1, 0, 1, 0]
    assert cluster_mean(x, ["a", "a", "b", "b", "c", "c"]) == (0.5, 0.5, 0.5)
    # one cluster: resampling it changes nothing
    assert cluster_mean([0.0, 1.0, 1.0], ["a"] * 3) == pytest.approx((2 / 3, 2 / 3, 2 / 3))
    # missing values are dropped; an empty part gives nans
    assert cluster_mean([1.0, None, float("nan"), 0.0], ["a", "a", "b", "b"])[0] == 0.5
    (est, lo, hi), p = cluster_bootstrap([Part([], [])])
    assert all(math.isnan(v) for v in (est, lo, hi, p))


def test_cluster_bootstrap_resamples_whole_concepts():
    from introspect.stats.intervals import cluster_mean

    # two concepts of very different size: the bootstrap distribution only ever holds
    # weighted means of the two concept means, so the interval spans exactly [0, 1]
    x = [1.0] * 10 + [0.0] * 2
    lab = ["big"] * 10 + ["small"] * 2
    est, lo, hi = cluster_mean(x, lab, n_boot=4000)
    assert est == pytest.approx(10 / 12)
    assert (lo, hi) == (0.0, 1.0)  # draws of (small, small) and (big, big) both occur
    # reproducible bit for bit with the seed
    assert cluster_mean(x, lab, n_boot=4000) == (est, lo, hi)


def test_cluster_bootstrap_coverage_beats_naive_on_clustered_data():
    """Concepts drawn from a population whose rates vary (Beta(0.6, 1.4), mean 0.3); 20 concepts
    × 10 samples each. Wilson treats the 200 correlated answers as independent and misses the
    population rate about a third of the time; the concept bootstrap stays near 95%."""
    from introspect.stats.intervals import cluster_mean

    rng = np.random.default_rng(7)
    true, n_sim = 0.3, 200
    cover_c = cover_w = 0
    lab = np.repeat(np.arange(20), 10)
    for _ in range(n_sim):
        p_c = rng.beta(0.6, 1.4, 20)
        x = (rng.random((20, 10)) < p_c[:, None]).astype(float).ravel()
        _, lo, hi = cluster_mean(x, lab, n_boot=400, seed=int(rng.integers(1 << 30)))
        cover_c += lo <= true <= hi
        _, wlo, whi = wilson(x.sum(), x.size)
        cover_w += wlo <= true <= whi
    assert cover_c / n_sim >= 0.88  # 0.92 with these seeds
    assert cover_w / n_sim <= 0.75  # 0.635 with these seeds


def test_crossed_bootstrap_keeps_prompt_spread():
    from introspect.stats.intervals import Part, cluster_bootstrap

    # the value depends on the prompt only: one-way over concepts sees no spread, two-way does
    concept = ["a", "a", "b", "b", "c", "c"]
    prompt = [0, 1, 0, 1, 0, 1]
    x = [1.0, 0.0] * 3
    (_, lo1, hi1), _ = cluster_bootstrap([Part(x, concept)])
    (_, lo2, hi2), _ = cluster_bootstrap([Part(x, concept, prompt)])
    assert lo1 == hi1 == 0.5
    assert lo2 < 0.5 < hi2


def test_cluster_bootstrap_combines_parts_with_shared_draws():
    from introspect.stats.intervals import Part, cluster_bootstrap

    # part 0 minus part 1, same concepts: every concept's difference is exactly 0.1
    a, b = [0.5, 0.7, 0.2], [0.4, 0.6, 0.1]
    lab = ["x", "y", "z"]
    (est, lo, hi), p = cluster_bootstrap([Part(a, lab), Part(b, lab)], lambda m: m[0] - m[1])
    assert est == pytest.approx(0.1) and lo == pytest.approx(0.1) and hi == pytest.approx(0.1)
    assert p == 0.0  # no replicate at or below 0


def test_holm_matches_hand_values():
    from introspect.stats.holm import holm

    assert holm([0.01, 0.04, 0.03, 0.2]) == pytest.approx([0.04, 0.09, 0.09, 0.2])
    out = holm([0.01, None, float("nan"), 0.02])
    assert out[0] == pytest.approx(0.02) and out[3] == pytest.approx(0.02)
    assert math.isnan(out[1]) and math.isnan(out[2])


def test_holm_equals_statsmodels():
    from statsmodels.stats.multitest import multipletests

    from introspect.stats.holm import holm

    rng = np.random.default_rng(0)
    for _ in range(20):
        p = rng.random(int(rng.integers(1, 30))) ** 3
        p[rng.random(p.size) < 0.2] = p[0]  # ties
        assert holm(p) == pytest.approx(multipletests(p, method="holm")[1])
