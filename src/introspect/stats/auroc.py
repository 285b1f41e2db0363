"""AUROC with an interval that keeps its 95% at the boundary and under clustering.

Why not the percentile bootstrap the self-knowledge summaries used: when the scores separate the
classes perfectly (AUROC 1 or 0) every resample separates them too, so the interval has zero width
("1.000 [1.000, 1.000]") and covers nothing once the true AUROC is below 1; with few positives it
undercovers near the boundary generally. The interval here is Newcombe's (2006, Stat. Med. 25:559,
method 5): a score-type interval that inverts the Hanley–McNeil variance written as a function of
the AUROC itself, so it stays inside [0, 1] and has width at 0 and 1. Rows that share an item
(draws of one question) are not independent: the sample sizes enter at their effective values,
divided by the design effect of Obuchowski's (1997, Biometrics 53:567) clustered DeLong variance
over the plain DeLong variance. At the boundary both variances are 0 and the design effect is
taken as the rows per cluster (every cluster counts once): conservative, never too narrow. With
clusters, Student's t on (clusters − 1) degrees of freedom replaces z, as in ``introspect.stats.clustered``.
Coverage by simulation: ``coverage`` below, checked in ``tests/test_auroc.py``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.optimize import brentq
from scipy.stats import norm, rankdata
from scipy.stats import t as student_t

Interval = tuple[float, float, float]
NAN3: Interval = (math.nan, math.nan, math.nan)


def auroc_point(score: Any, label: Any) -> float:
    """P(score of a positive > score of a negative), ties 1/2: the Mann–Whitney U statistic
    over n1 n0, from midranks."""
    y = np.asarray(label, bool)
    n1 = int(y.sum())
    n0 = y.size - n1
    if not n1 or not n0:
        return math.nan
    r = rankdata(np.asarray(score, float))
    return float((r[y].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def newcombe(a: float, m: float, n: float, level: float = 0.95, df: int | None = None,
             ) -> tuple[float, float]:
    """Newcombe's method-5 bounds for an AUROC ``a`` from ``m`` positives and ``n`` negatives
    (real numbers: effective sizes are allowed); with ``df``, Student's t quantile on that many
    degrees of freedom replaces the normal one (few clusters)."""
    z = float(norm.ppf(0.5 + level / 2) if df is None else student_t.ppf(0.5 + level / 2, max(df, 1)))
    ns = (m + n) / 2 - 1  # Newcombe's N* − 1, used for both m − 1 and n − 1

    def sd(t: float) -> float:
        v = t * (1 - t) / (m * n) * (1 + ns * ((1 - t) / (2 - t) + t / (1 + t)))
        return math.sqrt(max(v, 0.0))

    eps = 1e-12  # at a = 1 (0) the bound equation also holds at t = a: search strictly inside
    lo = 0.0 if a <= 0 else brentq(lambda t: (a - t) - z * sd(t), 0.0, min(a, 1 - eps))
    hi = 1.0 if a >= 1 else brentq(lambda t: (t - a) - z * sd(t), max(a, eps), 1.0)
    return float(lo), float(hi)


def _placements(s: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """DeLong's placement values: for each positive the share of negatives below it (ties 1/2),
    for each negative the share of positives above it."""
    pos, neg = np.sort(s[y]), np.sort(s[~y])
    v10 = (np.searchsorted(neg, s[y], "left") + np.searchsorted(neg, s[y], "right")) / (2 * neg.size)
    v01 = 1 - (np.searchsorted(pos, s[~y], "left") + np.searchsorted(pos, s[~y], "right")) / (2 * pos.size)
    return v10, v01


def design_effect(score: Any, label: Any, clusters: Any) -> float:
    """Obuchowski's clustered DeLong variance over the unclustered one (at least 1); at a
    perfect separation, rows per cluster (each cluster one observation)."""
    s, y = np.asarray(score, float), np.asarray(label, bool)
    codes = np.unique(np.asarray([repr(c) for c in np.ravel(np.asarray(clusters, dtype=object))]),
                      return_inverse=True)[1]
    m, n = int(y.sum()), int((~y).sum())
    i10, i01 = np.unique(codes[y]).size, np.unique(codes[~y]).size
    v10, v01 = _placements(s, y)
    a = float(v10.mean())
    iid = float(np.var(v10, ddof=1) / m + np.var(v01, ddof=1) / n) if m > 1 and n > 1 else 0.0
    g = codes.max() + 1
    c10 = np.bincount(codes[y], weights=v10 - a, minlength=g)  # Σ_j V10 − m_i A per cluster
    c01 = np.bincount(codes[~y], weights=v01 - a, minlength=g)
    if iid <= 0 or i10 < 2 or i01 < 2:
        return max(1.0, m / i10, n / i01)
    s10 = i10 / ((i10 - 1) * m) * float((c10 ** 2).sum())
    s01 = i01 / ((i01 - 1) * n) * float((c01 ** 2).sum())
    s11 = g / (g - 1) * float((c10 * c01).sum()) if g > 1 else 0.0
    clustered = s10 / m + s01 / n + 2 * s11 / (m * n)
    return max(1.0, clustered / iid)


def auroc_ci(score: Any, label: Any, clusters: Any = None, level: float = 0.95) -> Interval:
    """(AUROC, lo, hi) of ``score`` for the 0/1 ``label``: Newcombe's score interval, at sample
    sizes divided by the design effect and with t on (clusters − 1) degrees of freedom when rows come
    in ``clusters``. NaN without both classes."""
    s, y = np.asarray(score, float), np.asarray(label, bool)
    m, n = int(y.sum()), int((~y).sum())
    if not m or not n:
        return NAN3
    a = auroc_point(s, y)
    if clusters is None:
        return (a, *newcombe(a, m, n, level))
    g = len({repr(c) for c in np.ravel(np.asarray(clusters, dtype=object))})
    d = design_effect(s, y, clusters)
    return (a, *newcombe(a, m / d, n / d, level, df=g - 1))


def _binormal(rng: np.random.Generator, d: float, m: int, n: int, cluster_size: int, icc: float,
              levels: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """m positives and n negatives, scores N(d, 1) and N(0, 1), in clusters of one class sharing
    a random effect of intra-class correlation ``icc``; ``levels`` > 0 rounds to that many values."""
    def one(k: int, size: int) -> tuple[np.ndarray, np.ndarray]:
        g = -(-size // cluster_size)
        u = np.repeat(rng.normal(size=g), cluster_size)[:size] * math.sqrt(icc)
        return u + rng.normal(size=size) * math.sqrt(1 - icc), np.repeat(np.arange(g) * 2 + k, cluster_size)[:size]

    (xp, cp), (xn, cn) = one(1, m), one(0, n)
    x = np.concatenate([xp + d, xn])
    if levels:
        x = np.round(norm.cdf(x - d / 2) * (levels - 1))
    return x, np.concatenate([cp, cn]), np.r_[np.ones(m, bool), np.zeros(n, bool)]


def _items(rng: np.random.Generator, g: int, k: int, spread: float, skill: float, options: int = 1,
           item_sd: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """g items of ``options`` options (association: a target's candidate words), k sampled
    draws each (the self-knowledge layout): an option's outcome rate is expit(a + u), with an
    item effect a ~ N(0, item_sd²) shared by its options and u ~ N(0, spread²); its one
    prediction is expit(skill·u + b + N(0, 1)), b ~ N(0, item_sd²) per item, repeated on every
    draw; labels are the draws, clustered by item."""
    a = np.repeat(rng.normal(size=g) * item_sd, options)
    b = np.repeat(rng.normal(size=g) * item_sd, options)
    u = rng.normal(size=g * options) * spread
    pred = 1 / (1 + np.exp(-(skill * u + b + rng.normal(size=g * options))))
    y = rng.random((g * options, k)) < 1 / (1 + np.exp(-(a + u)))[:, None]
    return np.repeat(pred, k), np.repeat(np.arange(g), options * k), y.ravel()


def coverage(auc: float = 0.75, m: int = 10, n: int = 10, *, cluster_size: int = 1, icc: float = 0.0,
             levels: int = 0, items: tuple | None = None, runs: int = 2000,
             seed: int = 0) -> dict[str, float]:
    """Share of ``runs`` simulated samples whose ``auroc_ci`` covers the true AUROC, and the mean
    width. Binormal rows (separation √2·Φ⁻¹(auc)) of m positives and n negatives, optionally
    clustered and tied (``_binormal``), or, with ``items=(g, k, spread, skill[, options, item_sd])``, the item-draw
    layout (``_items``). The truth is the AUROC of one very large sample of the same design."""
    rng = np.random.default_rng(seed)
    d = math.sqrt(2) * float(norm.ppf(auc))
    if items is None:
        def sample(scale: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            return _binormal(rng, d, m * scale, n * scale, cluster_size, icc, levels)
    else:
        def sample(scale: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            return _items(rng, items[0] * scale, *items[1:])
    x, _, y = sample(max(1, 400_000 // (m + n if items is None else items[0] * items[1] * (items[4] if len(items) > 4 else 1))))
    truth = auroc_point(x, y)
    hit = width = done = 0
    for _ in range(runs):
        x, cl, y = sample()
        _, lo, hi = auroc_ci(x, y, cl if items is not None or cluster_size > 1 else None)
        if math.isfinite(lo):
            done += 1
            hit += lo <= truth <= hi
            width += hi - lo
    return {"truth": truth, "coverage": hit / done, "mean_width": width / done, "runs": done}
