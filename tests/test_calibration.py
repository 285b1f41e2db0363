"""The report's intervals and tests on synthetic task-A records with a known truth (issue 17).

Every run writes records in the public layout, loads them with ``report.load_results`` and
summarises them with ``report.summarize`` (``introspect.report.calibration``): 400 experiments per
setting, at 5, 10, 20 and 50 concepts, one and three trials, K = 4 samples. Coverage is asserted
for every interval the report prints for TPR, FPR, Net, identification (and identification vs a
random concept), the P(yes) shift and the introspection score; the A/A check asserts that with
no true effect the report calls some headline test significant after Holm in at most 5% of runs
(plus 2.58 Monte-Carlo standard errors) and never says "detected" more often. Minutes of CPU: marked
``calibration``, run by ``make test-all`` (CI), not by ``make test``.
"""

from __future__ import annotations

import math
from concurrent.futures import ProcessPoolExecutor

import pytest

from introspect.report.calibration import GRID, METRICS, NULL_GRID, SHARED_NULL, run_setting, table

pytestmark = pytest.mark.calibration
RUNS = 400
# The band holds for the continuous intervals (Student t over concepts). The rate and
# paired-rate intervals (Wilson / Newcombe with Student's t on G−1 degrees of freedom) are
# conservative where the noise is mostly binomial (with 5 concepts t is 2.78): they may cover up
# to 99% (at 5 concepts with one trial, up to 99.8%), never below 93%. Narrowing them with
# plug-in corrections undercovered (down to 82% at 5 concepts in our simulations), so they stay
# conservative; README shows every figure. 400 runs carry a Monte-Carlo error of ±1.1 points, so
# each band is checked on both trial settings pooled (800 runs) at the 99% level of that error,
# and every single setting must stay above 90%.
BAND = (0.93, 0.97)
RATE_BAND = (0.93, 0.99)
CONTINUOUS = ("p_yes_shift", "introspection_score")
Z99 = 2.576


@pytest.fixture(scope="module")
def results() -> dict[tuple, dict]:
    jobs = [("positive", g, t, 4, RUNS, 0) for g, t in GRID]
    jobs += [("null", g, t, 4, RUNS, 1) for g, t in NULL_GRID]
    jobs.append((*SHARED_NULL, RUNS, 2))
    with ProcessPoolExecutor(2) as ex:
        out = list(ex.map(run_setting, jobs))
    print("\n" + table(out))
    return {(r["scenario"], r["concepts"], r["trials"]): r for r in out}


def _se(p: float, n: int) -> float:
    return math.sqrt(p * (1 - p) / n)


@pytest.mark.parametrize("g", sorted({g for g, _ in GRID}))
def test_every_printed_interval_covers(results, g):
    settings = [results[("positive", g, t)] for gg, t in GRID if gg == g]
    n = RUNS * len(settings)
    for m in METRICS:
        for r in settings:
            assert r[m]["printed"] == RUNS, f"{m}: printed in {r[m]['printed']} of {RUNS} runs"
            assert r[m]["coverage"] >= 0.90, f"{m}, {g} concepts × {r['trials']} trials: {r[m]['coverage']:.3f}"
        cov = sum(r[m]["coverage"] for r in settings) / len(settings)
        lo, hi = BAND if m in CONTINUOUS else RATE_BAND if g >= 10 else (RATE_BAND[0], 1.0)
        assert lo - Z99 * _se(lo, n) <= cov <= hi + Z99 * _se(hi, n), f"{m} at {g} concepts: {cov:.3f}"


@pytest.mark.parametrize("g,t", [x for x in GRID if x[0] >= 10])
def test_intervals_are_not_wider_than_needed(results, g, t):
    """Honest width: from 10 concepts the new intervals stay within 1.6× the percentile
    bootstrap's (which undercovers), and shrink as concepts are added."""
    r = results[("positive", g, t)]
    for m in ("tpr", "fpr", "net"):
        assert r[m]["mean_width"] <= 1.6 * r[m]["percentile_bootstrap_width"], m
    if g < 50:
        bigger = results[("positive", {10: 20, 20: 50}[g], t)]
        assert all(bigger[m]["mean_width"] < r[m]["mean_width"] for m in METRICS)


@pytest.mark.parametrize("g,t", NULL_GRID)
def test_a_null_stays_null(results, g, t):
    r = results[("null", g, t)]
    fp = r["any_headline_significant"]
    assert fp <= 0.05 + Z99 * _se(0.05, RUNS), f"{g} concepts: {fp:.3f} of runs call a headline test significant"
    assert r["verdict_detected"] <= fp
    assert r["net"]["coverage"] >= 0.90 and r["introspection_score"]["coverage"] >= 0.90


def test_a_null_with_shared_concept_effects_stays_null(results):
    """Concept effects shared by control and injected answers (logit SD 1), 24 concepts × 3
    trials × 2 samples: Net's interval excludes 0 no more often than 5% (it excluded 0 about
    twice as often as the sign-flip test rejected before the t hull), and "detected" never
    outruns the Holm-adjusted tests."""
    name, g, t, _ = SHARED_NULL
    r = results[(name, g, t)]
    excludes = 1 - r["net"]["coverage"]
    assert excludes <= 0.05 + Z99 * _se(0.05, RUNS), f"Net's interval excludes 0 in {excludes:.3f} of runs"
    assert r["any_headline_significant"] <= 0.05 + Z99 * _se(0.05, RUNS)
    assert r["verdict_detected"] <= r["any_headline_significant"]
    assert r["follows_vector"]["coverage"] >= 0.90
