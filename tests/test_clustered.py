"""Concept-level intervals and tests (``introspect.stats.clustered``), each against an independent
computation: brute-force sign enumeration, statsmodels' Wilson interval, scipy's t interval and
Newcombe's formula written out."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.proportion import proportion_confint

from introspect.stats import clustered as C


def _wilson(p: float, n: float, z: float) -> tuple[float, float]:
    """statsmodels' Wilson interval at the level whose normal quantile is ``z``."""
    alpha = 2 * (1 - stats.norm.cdf(z))
    return proportion_confint(p * n, n, alpha=alpha, method="wilson")


def test_sign_flip_matches_brute_force():
    rng = np.random.default_rng(0)
    for g in (1, 3, 6, 9):
        for _ in range(5):
            d = np.round(rng.normal(0.1, 0.3, g), 2)
            d[rng.random(g) < 0.3] = 0.0
            obs = abs(d.mean())
            flips = [abs(np.dot(s, d)) / g for s in itertools.product((-1, 1), repeat=g)]
            want = 1.0 if obs == 0 else np.mean([f >= obs - 1e-12 for f in flips])
            assert C.sign_flip_p(d) == pytest.approx(want)


def test_sign_flip_hand_values_and_floor():
    assert C.sign_flip_p([1, 1, 1, 1, 1]) == pytest.approx(2 / 32)  # all agree: the floor
    assert C.smallest_p(5) == pytest.approx(2 / 32) and C.smallest_p(3) == pytest.approx(0.25)
    # two zeros: only the four signed values matter; all-plus / all-minus of 4 -> 8 of 64
    assert C.sign_flip_p([0.5, 0.5, 1.0, 0.0, 0.5, 0.0]) == pytest.approx(8 / 64)
    assert C.sign_flip_p([0, 0, 0]) == 1.0
    big = C.sign_flip_p(np.full(30, 0.2))  # Monte Carlo above 16 concepts: (1 + hits)/(1 + draws)
    assert big == pytest.approx(1 / 20001, rel=0.5)


def test_rate_is_design_effect_wilson_with_t():
    x = np.array([1, 1, 1, 0, 1, 0, 0, 1, 1, 0, 0, 0], dtype=float)
    lab = np.repeat(["a", "b", "c", "d", "e", "f"], 2)
    e = C.rate(x, lab)
    r = np.array([1, 0.5, 0.5, 0.5, 0.5, 0])
    p = r.mean()
    n_eff = p * (1 - p) / (r.var(ddof=1) / 6)  # 15: the concepts vary less than binomially
    lo, hi = _wilson(p, n_eff, stats.t.ppf(0.975, 5))
    assert (e.value, e.n, e.g, e.method) == (pytest.approx(p), 12, 6, "wilson-deff-t(concept)")
    assert (e.lo, e.hi) == pytest.approx((lo, hi))
    # no spread between concepts at all: n_eff is every answer
    z = C.rate(np.array([0, 1] * 6, dtype=float), lab)
    assert (z.lo, z.hi) == pytest.approx(_wilson(0.5, 12, stats.t.ppf(0.975, 5)))
    # 0 of n is not [0, 0]
    zero = C.rate(np.zeros(12), lab)
    assert zero.lo == 0 and zero.hi == pytest.approx(_wilson(0.0, 12, stats.t.ppf(0.975, 5))[1])
    assert zero.hi > 0.2


def test_few_concepts_print_no_interval():
    e = C.rate([1, 0, 1, 1], ["a", "a", "b", "b"])
    assert e.value == pytest.approx(0.75) and math.isnan(e.lo) and math.isnan(e.hi)
    assert e.method == "none" and "fewer than 5 concepts" in e.note
    d = C.paired_rate_diff([1, 1, 1, 1], [0, 0, 0, 0], ["a", "b", "c", "d"])
    assert d.value == 1.0 and math.isnan(d.lo) and d.p == pytest.approx(2 / 16)


def test_mean_is_student_t_over_concept_means():
    x = np.array([0.1, 0.3, 0.2, 0.2, 0.5, 0.4, -0.1, 0.1, 0.0, 0.2])
    lab = np.repeat(list("abcde"), 2)
    m = np.array([0.2, 0.2, 0.45, 0.0, 0.1])
    e = C.mean(x, lab, test=True)
    lo, hi = stats.t.interval(0.95, 4, loc=m.mean(), scale=m.std(ddof=1) / math.sqrt(5))
    assert e.value == pytest.approx(m.mean()) and (e.lo, e.hi) == pytest.approx((lo, hi))
    assert e.p == pytest.approx(C.sign_flip_p(m)) and e.sd == pytest.approx(m.std(ddof=1))
    lo99, hi99 = e.refit(0.99)
    assert (lo99, hi99) == pytest.approx(stats.t.interval(0.99, 4, loc=m.mean(),
                                                          scale=m.std(ddof=1) / math.sqrt(5)))


def test_paired_rate_diff_is_the_hull_of_newcombe_and_t_over_differences():
    lab = np.repeat(list("abcdef"), 2)
    a = np.array([1, 1, 1, 0, 1, 1, 0, 1, 1, 0, 0, 0], dtype=float)
    b = np.array([1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0], dtype=float)
    e = C.paired_rate_diff(a, b, lab)
    bc = np.array([0.5, 0.5, 1.0, 0.0, 0.5, 0.0])  # injected yes, control no
    # injected no, control yes: none (c = 0 in every concept)
    t = stats.t.ppf(0.975, 5)
    n_eff = bc.mean() * (1 - bc.mean()) / (bc.var(ddof=1) / 6)
    lb, ub = _wilson(bc.mean(), n_eff, t)
    lc, uc = _wilson(0.0, 12, t)
    want_lo = bc.mean() - math.sqrt((bc.mean() - lb) ** 2 + uc ** 2)  # φ = 0: c has no spread
    want_hi = bc.mean() + math.sqrt((ub - bc.mean()) ** 2 + lc ** 2)
    t_lo, t_hi = stats.t.interval(0.95, 5, loc=bc.mean(), scale=bc.std(ddof=1) / math.sqrt(6))
    assert want_lo < t_lo  # here Newcombe is the wider side below ...
    assert t_hi > want_hi  # ... and t over the differences above: the hull takes each
    assert e.value == pytest.approx(5 / 12) and (e.lo, e.hi) == pytest.approx((want_lo, t_hi))
    assert e.p == pytest.approx(8 / 64) and e.method == "newcombe∪t(concept)"
    # no discordant pair at all: an honest ± bound, not [0, 0]
    same = C.paired_rate_diff(b, b, lab)
    assert same.value == 0 and same.lo < -0.1 and same.hi > 0.1 and same.p == 1.0
    # every concept's difference 1 (no spread): t would be [1, 1], Newcombe keeps a lower bound
    ones = C.paired_rate_diff(np.ones(12), np.zeros(12), lab)
    assert ones.value == 1.0 and ones.hi == 1.0 and 0.4 < ones.lo < 0.95


def test_per_concept_combination_uses_concepts_in_every_part():
    vals, n = C.per_concept([([1.0, 3.0, 5.0], ["a", "a", "b"]), ([1.0, 1.0, 9.0], ["a", "b", "c"])],
                            lambda x, y: x - y)
    assert vals.tolist() == pytest.approx([2 - 1, 5 - 1]) and n == 5  # c has no first part


def test_power_line_states_when_a_design_cannot_reject():
    mde, line = C.power_line(3, 4, 0.3, tests=1)
    assert math.isnan(mde) and "cannot reject" in line and "needs ≥ 6 concepts" in line
    _, line = C.power_line(8, 4, 0.3, tests=18)
    assert "cannot reject" in line and "needs ≥ 10 concepts" in line  # 2^-7 > 0.05/18 > 2^-9
    assert not math.isnan(C.power_line(10, 4, 0.3, tests=18)[0])
    mde, line = C.power_line(20, 4, 0.3, tests=6)
    want = (stats.t.ppf(1 - 0.05 / 6 / 2, 19) + stats.t.ppf(0.8, 19)) * 0.3 / math.sqrt(20)
    assert mde == pytest.approx(want) and f"{want:.2f}" in line
