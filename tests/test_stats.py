import math

import numpy as np
import pytest

from introspect.stats import (
    bootstrap_diff,
    bootstrap_mean,
    mcc,
    mcc_ci,
    mcnemar_test,
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
    est, lo, hi = mcc_ci(t, p, n_boot=1000)
    assert est == pytest.approx(mcc(t, p))
    assert lo < est < hi
    assert lo < 0.6 < hi  # true MCC of 80%-accurate balanced labels


def test_mcnemar():
    a = [True] * 10 + [False] * 10
    b = [True] * 10 + [True] * 10  # 10 discordant, all one way
    stat, p = mcnemar_test(a, b)
    assert p == pytest.approx(2 * 0.5**10)
    assert mcnemar_test(a, a) == (0.0, 1.0)


def test_pairwise_order_accuracy():
    assert pairwise_order_accuracy(["a", "b", "c"], ["a", "b", "c"]) == 1.0
    assert pairwise_order_accuracy(["c", "b", "a"], ["a", "b", "c"]) == 0.0
    # one swap out of 3 pairs
    assert pairwise_order_accuracy(["b", "a", "c"], ["a", "b", "c"]) == pytest.approx(2 / 3)
    # items missing from the prediction are ignored
    assert pairwise_order_accuracy(["a", "c"], ["a", "b", "c"]) == 1.0
    assert math.isnan(pairwise_order_accuracy(["a"], ["a", "b"]))
