"""Small statistics helpers shared by the reports: Wilson, bootstraps, MCC, Holm.

Why these choices: proportions of independent trials use the Wilson score interval (sane at 0/n
and n/n, unlike the normal approximation); many tests at once get Holm-adjusted p-values. The
injection tasks' concept-level intervals and tests live in ``introspect.stats.clustered``; the
percentile cluster bootstrap here (``cluster_mean``) is kept as the comparator the calibration
prints beside them (it is what the report used before, and it is too narrow with few concepts).
Every bootstrap is seeded, so a report is reproducible bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from statsmodels.stats.proportion import proportion_confint

Interval = tuple[float, float, float]  # (estimate, lo, hi)
_NAN3: Interval = (math.nan, math.nan, math.nan)


def _clean(x: Any) -> np.ndarray:
    """1-D float array with None/NaN dropped (booleans become 0/1)."""
    arr = np.asarray([np.nan if v is None else v for v in np.ravel(np.asarray(x, dtype=object))],
                     dtype=float)
    return arr[~np.isnan(arr)]


def wilson(k: int | float, n: int | float, alpha: float = 0.05) -> Interval:
    """Proportion k/n with its Wilson score interval at level 1-alpha; n=0 gives (nan, nan, nan)."""
    if n <= 0:
        return _NAN3
    lo, hi = proportion_confint(k, n, alpha=alpha, method="wilson")
    return float(k / n), float(lo), float(hi)


def _percentile(stats: np.ndarray, ci: float) -> tuple[float, float]:
    stats = stats[np.isfinite(stats)]
    if stats.size == 0:
        return math.nan, math.nan
    q = (1 - ci) / 2
    lo, hi = np.quantile(stats, [q, 1 - q])
    return float(lo), float(hi)


def bootstrap_mean(
    x: Sequence[float] | np.ndarray, n_boot: int = 2000, seed: int = 0, ci: float = 0.95
) -> Interval:
    """Mean of x with a percentile-bootstrap interval (None/NaN dropped; empty -> nans)."""
    a = _clean(x)
    if a.size == 0:
        return _NAN3
    rng = np.random.default_rng(seed)
    boots = a[rng.integers(0, a.size, size=(n_boot, a.size))].mean(axis=1)
    return (float(a.mean()), *_percentile(boots, ci))


def bootstrap_diff(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    n_boot: int = 2000,
    seed: int = 0,
    ci: float = 0.95,
) -> Interval:
    """mean(a) - mean(b) for two independent samples, each resampled separately (percentile CI)."""
    xa, xb = _clean(a), _clean(b)
    if xa.size == 0 or xb.size == 0:
        return _NAN3
    rng = np.random.default_rng(seed)
    ma = xa[rng.integers(0, xa.size, size=(n_boot, xa.size))].mean(axis=1)
    mb = xb[rng.integers(0, xb.size, size=(n_boot, xb.size))].mean(axis=1)
    return (float(xa.mean() - xb.mean()), *_percentile(ma - mb, ci))


def mcc(y_true: Sequence[Any] | np.ndarray, y_pred: Sequence[Any] | np.ndarray) -> float:
    """Matthews correlation of two binary labelings (0 when any margin of the table is empty)."""
    t = np.asarray(y_true, dtype=bool)
    p = np.asarray(y_pred, dtype=bool)
    if t.shape != p.shape:
        raise ValueError(f"y_true and y_pred differ in shape: {t.shape} vs {p.shape}")
    return _mcc_counts(
        float(np.sum(t & p)), float(np.sum(~t & ~p)), float(np.sum(~t & p)), float(np.sum(t & ~p))
    )


def _mcc_counts(tp: Any, tn: Any, fp: Any, fn: Any) -> Any:
    """Vectorised MCC from confusion counts (scalars or arrays)."""
    num = tp * tn - fp * fn
    den = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)
    return float(out) if np.ndim(out) == 0 else out


def jeffreys_ci(
    counts: Sequence[float] | np.ndarray,
    stat: Callable[[np.ndarray], np.ndarray],
    n_draws: int = 4000,
    seed: int = 0,
    ci: float = 0.95,
) -> tuple[float, float]:
    """Interval for a function of multinomial cell probabilities: ``stat`` maps a (draws, cells)
    array to one value per draw, and the interval is its quantiles over the Jeffreys posterior
    Dirichlet(counts + 1/2). Unlike a bootstrap it does not collapse when a cell is empty,
    which is where small games live (few delegations, a perfect table)."""
    cells = np.random.default_rng(seed).dirichlet(np.asarray(counts, dtype=float) + 0.5, n_draws)
    with np.errstate(invalid="ignore", divide="ignore"):
        return _percentile(np.asarray(stat(cells), dtype=float), ci)


def mcc_ci(
    y_true: Sequence[Any] | np.ndarray,
    y_pred: Sequence[Any] | np.ndarray,
    n_draws: int = 4000,
    seed: int = 0,
    ci: float = 0.95,
) -> Interval:
    """MCC of (true, pred) pairs with a Jeffreys interval: quantiles of the MCC over the posterior
    Dirichlet(counts + 1/2) of the four cells. The percentile bootstrap it replaces covered 0.78
    at 30 items and a true MCC of 0.88 (a perfect table resamples to [1, 1]) and 0.92 at the null
    with rare delegation; this one covered 0.935-0.998 on the same grid (tests/test_stats.py). An
    observed MCC of +-1 keeps that end of the interval, as Clopper-Pearson does at 0 or n hits.
    Empty, or one class on either side (a model that never delegates): nans, since the MCC is
    then 0/0 and a 0 [0, 0] would look measured."""
    t = np.asarray(y_true, dtype=bool)
    p = np.asarray(y_pred, dtype=bool)
    if t.size == 0 or t.all() or not t.any() or p.all() or not p.any():
        return _NAN3
    tp, tn = float((t & p).sum()), float((~t & ~p).sum())
    fp, fn = float((~t & p).sum()), float((t & ~p).sum())
    lo, hi = jeffreys_ci([tp, tn, fp, fn], lambda c: _mcc_counts(*c.T), n_draws, seed, ci)
    est = mcc(t, p)
    if fp == 0 and fn == 0:
        hi = 1.0
    if tp == 0 and tn == 0:
        lo = -1.0
    return (est, lo, hi)


def pairwise_order_accuracy(
    predicted_order: Sequence[Any], true_order: Sequence[Any]
) -> float:
    """Fraction of item pairs that the predicted order puts in the same relative order as the truth.

    Both arguments list items first to last; only items present in both count. Fewer than two
    shared items gives nan.
    """
    pred_rank = {item: i for i, item in enumerate(predicted_order)}
    items = [item for item in true_order if item in pred_rank]
    if len(items) < 2:
        return math.nan
    ranks = np.array([pred_rank[item] for item in items])  # in true order
    i, j = np.triu_indices(len(items), k=1)
    return float(np.mean(ranks[i] < ranks[j]))


# ---------------------------------------------------------------- clustered intervals
#
# Sampled trials are not independent: K answers to one prompt, and all prompts of one concept,
# share that concept's effect. The concept is the unit of clustering; the bootstrap resamples
# concepts with replacement and keeps every trial and sample of a drawn concept (samples nested).
# Controls shared by every concept (task A's prompts carry no concept) are clustered by prompt
# instead, and a paired statistic over injected/control pairs resamples concepts and prompts at
# once (a two-way "pigeonhole" bootstrap: each pair's weight is the product of its concept's and
# its prompt's draw counts), so neither source of spread is dropped.


@dataclass(frozen=True)
class Part:
    """One set of values for ``cluster_bootstrap``: a value per row, the row's cluster label
    (e.g. its concept) and, optionally, a second crossed label (e.g. its prompt)."""

    values: Any
    clusters: Any
    crossed: Any = None


def _first(means: list[Any]) -> Any:
    return means[0]


def n_levels(labels: Any) -> int:
    """Number of distinct labels (None counts as one label)."""
    return len({repr(v) for v in np.ravel(np.asarray(labels, dtype=object))})


def _codes(labels: list[np.ndarray]) -> tuple[list[np.ndarray], int]:
    """Integer codes of labels over their union (shared across parts)."""
    keys = [np.array([repr(v) for v in np.ravel(np.asarray(lab, dtype=object))]) for lab in labels]
    if not keys:
        return [], 0
    uniq = np.unique(np.concatenate(keys)) if any(k.size for k in keys) else np.array([])
    return [np.searchsorted(uniq, k) for k in keys], int(uniq.size)


def cluster_bootstrap(
    parts: Sequence[Part],
    combine: Callable[[list[Any]], Any] = _first,
    n_boot: int = 2000,
    seed: int = 0,
    ci: float = 0.95,
) -> tuple[Interval, float]:
    """Cluster-bootstrap estimate of ``combine([mean of each part])`` and a two-sided p for 0.

    Each replicate draws the clusters (labels pooled over all parts, so a concept drawn twice
    counts twice in every part) and, if any part has ``crossed`` labels, those too; a row's
    weight is its cluster's draw count times its crossed label's. ``combine`` maps the list of
    weighted part means (arrays over replicates) to the statistic; the default is the first
    part's mean. NaN values are dropped first. Returns ((estimate, lo, hi), p_boot) with a
    percentile interval; p_boot = 2·min(P*(stat ≤ 0), P*(stat ≥ 0)), capped at 1. Replicates in
    which a part draws no row are dropped. Any empty part gives nans.
    """
    vals, labs, cross = [], [], []
    for p in parts:
        v = np.asarray([np.nan if x is None else x for x in np.ravel(np.asarray(p.values, dtype=object))],
                       dtype=float)
        keep = ~np.isnan(v)
        vals.append(v[keep])
        labs.append(np.ravel(np.asarray(p.clusters, dtype=object))[keep])
        cross.append(None if p.crossed is None else np.ravel(np.asarray(p.crossed, dtype=object))[keep])
    if not vals or any(v.size == 0 for v in vals):
        return _NAN3, math.nan
    est = float(combine([v.mean() for v in vals]))
    rng = np.random.default_rng(seed)
    codes, g = _codes(labs)
    w_c = rng.multinomial(g, np.full(g, 1.0 / g), size=n_boot).astype(float)
    has_cross = [c is not None for c in cross]
    if any(has_cross):
        pcodes, h = _codes([c for c in cross if c is not None])
        it = iter(pcodes)
        pcodes_all = [next(it) if hc else None for hc in has_cross]
        w_p = rng.multinomial(h, np.full(h, 1.0 / h), size=n_boot).astype(float)
    means = []
    for k, v in enumerate(vals):  # per-cluster sums and counts: replicates never touch rows
        if has_cross[k]:
            s_gh, n_gh = np.zeros((g, h)), np.zeros((g, h))
            np.add.at(s_gh, (codes[k], pcodes_all[k]), v)
            np.add.at(n_gh, (codes[k], pcodes_all[k]), 1.0)
            num = np.einsum("bg,gh,bh->b", w_c, s_gh, w_p)
            tot = np.einsum("bg,gh,bh->b", w_c, n_gh, w_p)
        else:
            num = w_c @ np.bincount(codes[k], weights=v, minlength=g)
            tot = w_c @ np.bincount(codes[k], minlength=g).astype(float)
        with np.errstate(invalid="ignore", divide="ignore"):
            means.append(np.where(tot > 0, num / np.where(tot > 0, tot, 1.0), np.nan))
    stats = np.asarray(combine(means), dtype=float)
    stats = stats[np.isfinite(stats)]
    if stats.size == 0:
        return (est, math.nan, math.nan), math.nan
    p = float(min(1.0, 2 * min(np.mean(stats <= 0), np.mean(stats >= 0))))
    return (est, *_percentile(stats, ci)), p


def cluster_mean(x: Any, clusters: Any, crossed: Any = None, **kw: Any) -> Interval:
    """Mean of x with a cluster-bootstrap interval (see ``cluster_bootstrap``)."""
    return cluster_bootstrap([Part(x, clusters, crossed)], **kw)[0]
