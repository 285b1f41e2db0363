"""Intervals and tests with the concept as the unit of replication.

Why a module of its own: every injected answer nests inside a concept (K samples of T trials),
each concept with its own matched controls, so the report's population is the concepts. A
percentile bootstrap over 3 concepts is [min, max] of their means (~75% coverage labelled 95%),
and a clustered McNemar statistic cannot exceed the number of clusters; both were replaced.
What is used instead, each checked by simulation through the real loader and summariser
(``experiments.calibrate``, ``tests/test_calibration.py``):

- **rates** (TPR, FPR, identification): the mean of the concepts' rates with a Wilson interval
  whose n is the effective sample size n_eff = p(1−p) / Var̂(mean of concept rates) (a design
  effect; all the answers when the concepts show no spread) and whose z is Student's t with G−1
  degrees of freedom (G concepts): Wilson keeps 0/n and n/n honest, t keeps few concepts honest.
  Where the noise is mostly binomial rather than between concepts, t on G−1 degrees of freedom
  is conservative (measured: ~99% at 5 concepts); plug-in corrections that narrow it undercovered
  (down to 82% at 5 concepts in the simulations), so none is used;
- **paired 0/1 differences** (Net = TPR − matched FPR, injected − ablation): the hull of
  Newcombe's hybrid score interval for paired proportions (built from the two discordance
  rates' intervals above and the correlation of their concept-level values) and Student's t
  over the concepts' paired differences. Newcombe alone excluded 0 in a null about twice as
  often as the sign-flip test rejected (5% vs 2–3% at 24 concepts × 3 trials × 2 samples), so
  the printed interval claimed what the test did not; t over the differences tracks the test,
  Newcombe keeps the interval honest where the differences have no spread (a Net of 1);
- **continuous means and differences** (P(yes) shifts, log-odds scores, task D cosines): Student's
  t over the concepts' means;
- **p-values**: the exact sign-flip (Fisher randomisation) test on the concepts' paired
  differences, valid for any symmetric null; its smallest reachable p is 2^(1−G), so three
  concepts can never reach 0.05 and the report says so (``smallest_p``, ``power_line``);
- fewer than ``MIN_CLUSTERS`` concepts: no interval at all, and the row says why.

Every concept weighs the same (the estimate is the mean of the concepts' means), which is the
population quantity the intervals target.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from scipy import stats as _st

MIN_CLUSTERS = 5
NUMERIC_FLOOR = 1e-4  # P(yes) / log-odds differences below this are rounding, not effects (see floored)
LEVEL = 0.95
_EXACT_MAX = 16  # exact sign-flip enumeration up to this many concepts, seeded Monte Carlo above
_MC_DRAWS = 20000
NO_INTERVAL = f"fewer than {MIN_CLUSTERS} concepts: no interval (none from so few would cover 95%)"


@dataclass(frozen=True)
class Est:
    """An estimate with its interval: ``value`` (mean of the concepts' values), ``lo``/``hi`` (NaN
    when there is none), ``n`` answers or pairs, ``g`` concepts, ``method`` (the ``ci`` label),
    ``p`` (sign-flip, for differences) and ``note`` (why there is no interval, if there is none).
    ``refit(level)`` recomputes the interval at another confidence level (Holm-adjusted claims)."""

    value: float
    lo: float
    hi: float
    n: int
    g: int
    method: str
    p: float = math.nan
    note: str = ""
    refit: Callable[[float], tuple[float, float]] | None = None
    sd: float = math.nan  # between-concept SD of the concept-level values (for power lines)

    @property
    def interval(self) -> tuple[float, float, float]:
        return self.value, self.lo, self.hi


def _arr(x: Any) -> np.ndarray:
    return np.asarray([np.nan if v is None else v for v in np.ravel(np.asarray(x, dtype=object))],
                      dtype=float)


def _labels(clusters: Any, n: int) -> np.ndarray:
    if clusters is None:
        return np.arange(n).astype(str).astype(object)  # no clusters: every value its own unit
    lab = np.asarray([repr(v) for v in np.ravel(np.asarray(clusters, dtype=object))], dtype=object)
    if lab.size != n:
        raise ValueError(f"{n} values but {lab.size} cluster labels")
    return lab


def cluster_means(x: Any, clusters: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(labels, mean per cluster, count per cluster) of the non-NaN values, labels sorted."""
    v = _arr(x)
    lab = _labels(clusters, v.size)
    ok = ~np.isnan(v)
    keys, inv = np.unique(lab[ok], return_inverse=True)
    if keys.size == 0:
        return keys, np.zeros(0), np.zeros(0)
    cnt = np.bincount(inv).astype(float)
    return keys, np.bincount(inv, weights=v[ok]) / cnt, cnt


@lru_cache(maxsize=4096)
def _tq(g: int, level: float) -> float:
    return float(_st.t.ppf(0.5 + level / 2, g - 1))


def _wilson(p: float, n: float, z: float) -> tuple[float, float]:
    den = 1 + z * z / n
    c = (p + z * z / (2 * n)) / den
    h = z * math.sqrt(max(p * (1 - p), 0.0) / n + z * z / (4 * n * n)) / den
    return max(0.0, c - h), min(1.0, c + h)


def deff_wilson(p: float, n: float, var: float, g: int, level: float = LEVEL) -> tuple[float, float]:
    """Wilson bounds for a rate ``p`` over ``n`` answers in ``g`` clusters whose estimate has
    variance ``var``: at the design-effect size n_eff = p(1−p)/var (``n`` at 0, 1 or no
    variance), with t on g − 1 degrees of freedom."""
    n_eff = n if (var <= 0 or p <= 0 or p >= 1) else p * (1 - p) / var
    return _wilson(p, max(n_eff, 1e-9), _tq(g, level))


def _rate_bounds(r: np.ndarray, n: float, level: float) -> tuple[float, float]:
    """``deff_wilson`` for concept rates ``r`` over ``n`` answers (mean of the concepts' rates)."""
    return deff_wilson(float(r.mean()), n, float(r.var(ddof=1)) / r.size, r.size, level)


def rate(x: Any, clusters: Any, level: float = LEVEL) -> Est:
    """A 0/1 rate over concepts (NaNs dropped). Without cluster labels the answers are the units."""
    keys, r, cnt = cluster_means(x, clusters)
    n, g = int(cnt.sum()), int(keys.size)
    if not g:
        return Est(math.nan, math.nan, math.nan, 0, 0, "")
    value = float(r.mean())
    if clusters is None:  # independent answers: plain Wilson
        lo, hi = _wilson(value, n, float(_st.norm.ppf(0.5 + level / 2)))
        return Est(value, lo, hi, n, g, "wilson",
                   refit=lambda lv: _wilson(value, n, float(_st.norm.ppf(0.5 + lv / 2))))
    if g < MIN_CLUSTERS:
        return Est(value, math.nan, math.nan, n, g, "none", note=NO_INTERVAL)
    lo, hi = _rate_bounds(r, n, level)
    return Est(value, lo, hi, n, g, "wilson-deff-t(concept)", refit=lambda lv: _rate_bounds(r, n, lv))


def sign_flip_p(d: Any, seed: int = 0) -> float:
    """Two-sided exact sign-flip p of mean(d) = 0 for concept-level differences ``d`` (NaN
    dropped): the share of the 2^G sign patterns whose |mean| reaches the observed one (seeded
    Monte Carlo above 16 concepts). All zero -> 1."""
    d = _arr(d)
    d = d[~np.isnan(d)]
    g = d.size
    if g == 0:
        return math.nan
    obs = abs(d.mean())
    if obs == 0:
        return 1.0
    tol = 1e-12 * max(1.0, obs)
    if g <= _EXACT_MAX:
        signs = 1 - 2 * ((np.arange(2**g)[:, None] >> np.arange(g)) & 1)
        return float(np.mean(np.abs(signs @ d) / g >= obs - tol))
    rng = np.random.default_rng(seed)
    signs = rng.choice((-1.0, 1.0), size=(_MC_DRAWS, g))
    return float((1 + np.sum(np.abs(signs @ d) / g >= obs - tol)) / (1 + _MC_DRAWS))


def smallest_p(g: int) -> float:
    """The smallest two-sided p the sign-flip test can reach with ``g`` concepts: 2^(1−g)."""
    return min(1.0, 2.0 ** (1 - g)) if g > 0 else math.nan


def _t_bounds(m: np.ndarray, level: float) -> tuple[float, float]:
    g = m.size
    h = _tq(g, level) * float(m.std(ddof=1)) / math.sqrt(g)
    return float(m.mean() - h), float(m.mean() + h)


def concept_mean(m: Any, n: int | None = None, level: float = LEVEL, *,
                 test: bool = False) -> Est:
    """Student-t interval of the mean of concept-level values ``m`` (one per concept); with
    ``test`` also the sign-flip p of mean = 0."""
    m = _arr(m)
    m = m[~np.isnan(m)]
    g = m.size
    if not g:
        return Est(math.nan, math.nan, math.nan, 0, 0, "")
    value, n = float(m.mean()), int(n if n is not None else g)
    p = sign_flip_p(m) if test else math.nan
    sd = float(m.std(ddof=1)) if g > 1 else math.nan
    if g < MIN_CLUSTERS:
        return Est(value, math.nan, math.nan, n, g, "none", p, NO_INTERVAL, sd=sd)
    lo, hi = _t_bounds(m, level)
    return Est(value, lo, hi, n, g, "t(concept)", p, refit=lambda lv: _t_bounds(m, lv), sd=sd)


def mean(x: Any, clusters: Any, level: float = LEVEL, *, test: bool = False) -> Est:
    """Mean of numeric values over concepts (each concept's mean counts once), Student-t."""
    keys, m, cnt = cluster_means(x, clusters)
    return concept_mean(m, int(cnt.sum()), level, test=test)


def floored(d: Any, floor: float = NUMERIC_FLOOR) -> np.ndarray:
    """Differences smaller than ``floor`` set to exactly 0: below it they are float32 rounding of
    two batch layouts (a placebo's P(yes) and log-odds shifts on the default model measure
    1e-7–1e-5), not effects, and a test must not call them significant."""
    d = _arr(d)
    return np.where(np.abs(d) < floor, 0.0, d)


def paired_mean_diff(a: Any, b: Any, clusters: Any, level: float = LEVEL, floor: float = 0.0) -> Est:
    """mean(a − b) over complete pairs, concept-level Student-t interval and sign-flip p;
    differences below ``floor`` count as 0 (``floored``)."""
    a, b = _arr(a), _arr(b)
    if a.shape != b.shape:
        raise ValueError(f"paired samples differ in shape: {a.shape} vs {b.shape}")
    return mean(floored(a - b, floor) if floor else a - b, clusters, level, test=True)


def _newcombe(bc: np.ndarray, cc: np.ndarray, n: float, level: float) -> tuple[float, float]:
    """Newcombe's hybrid score interval for b − c from the concept-level discordance rates."""
    b, c = float(bc.mean()), float(cc.mean())
    lb, ub = _rate_bounds(bc, n, level)
    lc, uc = _rate_bounds(cc, n, level)
    phi = float(np.corrcoef(bc, cc)[0, 1]) if bc.std() > 0 and cc.std() > 0 else 0.0
    lo = (b - c) - math.sqrt(max((b - lb) ** 2 + (uc - c) ** 2 - 2 * phi * (b - lb) * (uc - c), 0.0))
    hi = (b - c) + math.sqrt(max((ub - b) ** 2 + (c - lc) ** 2 - 2 * phi * (ub - b) * (c - lc), 0.0))
    return max(-1.0, lo), min(1.0, hi)


def _paired_bounds(bc: np.ndarray, cc: np.ndarray, n: float, level: float) -> tuple[float, float]:
    """The hull of ``_newcombe`` and Student's t over the concepts' differences ``bc − cc``: it
    excludes 0 only where both do (see the module docstring)."""
    lo, hi = _newcombe(bc, cc, n, level)
    d = bc - cc
    if d.std() > 0:
        tl, th = _t_bounds(d, level)
        lo, hi = min(lo, tl), max(hi, th)
    return max(-1.0, lo), min(1.0, hi)


PAIRED_CI = "newcombe∪t(concept)"


def paired_rate_diff(a: Any, b: Any, clusters: Any, level: float = LEVEL) -> Est:
    """mean(a − b) of paired 0/1 outcomes over concepts: the hull of Newcombe's interval from the
    discordance rates (design-effect Wilson, t) and t over the concepts' differences
    (``_paired_bounds``); sign-flip p on the concepts' differences."""
    a, b = _arr(a), _arr(b)
    if a.shape != b.shape:
        raise ValueError(f"paired samples differ in shape: {a.shape} vs {b.shape}")
    ok = ~(np.isnan(a) | np.isnan(b))
    lab = _labels(clusters, a.size)
    a, b, lab = a[ok], b[ok], lab[ok]
    if not a.size:
        return Est(math.nan, math.nan, math.nan, 0, 0, "")
    keys, bc, cnt = cluster_means((a > b).astype(float), lab)
    _, cc, _ = cluster_means((a < b).astype(float), lab)
    d = bc - cc
    g, n = int(keys.size), int(cnt.sum())
    value, p = float(d.mean()), sign_flip_p(d)
    sd = float(d.std(ddof=1)) if g > 1 else math.nan
    if g < MIN_CLUSTERS:
        return Est(value, math.nan, math.nan, n, g, "none", p, NO_INTERVAL, sd=sd)
    lo, hi = _paired_bounds(bc, cc, n, level)
    return Est(value, lo, hi, n, g, PAIRED_CI, p, refit=lambda lv: _paired_bounds(bc, cc, n, lv), sd=sd)


def unpaired_rate_diff(a: Any, a_clusters: Any, b: Any, b_clusters: Any,
                       level: float = LEVEL) -> Est:
    """rate(a) − rate(b) of independent groups (Newcombe's unpaired hybrid score interval from
    the two rates' intervals); no p-value. Used only where controls cannot be paired."""
    ra, rb = rate(a, a_clusters, level), rate(b, b_clusters, level)
    if not (ra.n and rb.n):
        return Est(math.nan, math.nan, math.nan, 0, 0, "")
    d = ra.value - rb.value
    if math.isnan(ra.lo) or math.isnan(rb.lo):
        return Est(d, math.nan, math.nan, ra.n + rb.n, ra.g, "none", note=ra.note or rb.note)
    lo = d - math.sqrt((ra.value - ra.lo) ** 2 + (rb.hi - rb.value) ** 2)
    hi = d + math.sqrt((ra.hi - ra.value) ** 2 + (rb.value - rb.lo) ** 2)
    return Est(d, max(-1.0, lo), min(1.0, hi), ra.n + rb.n, ra.g, "newcombe-unpaired")


def per_concept(parts: Sequence[tuple[Any, Any]], combine: Callable[..., Any]) -> tuple[np.ndarray, int]:
    """Concept-level values of a statistic of several parts: each part is (values, concepts);
    ``combine(*part_means)`` maps the parts' per-concept means (arrays over the concepts present
    in every part) to one value per concept. Returns (values, answers behind them)."""
    tables = [cluster_means(v, c) for v, c in parts]
    common = set(tables[0][0])
    for keys, _, _ in tables[1:]:
        common &= set(keys)
    keys = np.array(sorted(common), dtype=object)
    if not keys.size:
        return np.zeros(0), 0
    means = [m[np.searchsorted(k, keys)] for k, m, _ in tables]
    n = int(sum(c[np.isin(k, keys)].sum() for k, _, c in tables))
    return np.asarray(combine(*means), dtype=float), n


# ---------------------------------------------------------------- power


def power_line(g: int, m: float, sd: float, tests: int, alpha: float = 0.05,
               power: float = 0.8) -> tuple[float, str]:
    """(smallest difference detectable at ``power``, one line saying so) for a concept-level
    two-sided test with ``g`` concepts of ``m`` answers each, between-concept SD ``sd`` of the
    per-concept differences, Holm over ``tests`` tests (Bonferroni at its first step, normal
    approximation with t quantiles). States when the sign-flip test cannot reach the level."""
    level = alpha / max(tests, 1)
    if g < 2:
        return math.nan, f"{g} concept(s): no test is possible"
    p_floor = smallest_p(g)
    need = next(k for k in range(2, 64) if smallest_p(k) < level)
    if p_floor >= level:
        return math.nan, (f"cannot reject: with {g} concepts the smallest p is {p_floor:.3g}, "
                          f"above {alpha:g}/{tests} (Holm over {tests} tests); needs ≥ {need} "
                          "concepts")
    mde = (_tq(g, 1 - level) + float(_st.t.ppf(power, g - 1))) * sd / math.sqrt(g)
    return float(mde), (f"smallest difference detectable at {power:.0%} power ≈ {mde:.2f} "
                        f"({g} concepts × {m:.0f} answers, between-concept SD {sd:.2f}, Holm over "
                        f"{tests} tests; smallest reachable p {p_floor:.2g})")
