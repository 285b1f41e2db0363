"""Small statistics helpers: every rate in a report carries a 95% interval.

Why these choices: trial counts per cell are small (tens), so proportions use the Wilson score
interval (sane at 0/n and n/n, unlike the normal approximation); differences and correlations use
a seeded percentile bootstrap, so a report is reproducible bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from statsmodels.stats.contingency_tables import mcnemar
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


def mcc_ci(
    y_true: Sequence[Any] | np.ndarray,
    y_pred: Sequence[Any] | np.ndarray,
    n_boot: int = 2000,
    seed: int = 0,
    ci: float = 0.95,
) -> Interval:
    """MCC with a percentile-bootstrap interval over (true, pred) pairs; empty -> nans."""
    t = np.asarray(y_true, dtype=bool)
    p = np.asarray(y_pred, dtype=bool)
    if t.size == 0:
        return _NAN3
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, t.size, size=(n_boot, t.size))
    bt, bp = t[idx], p[idx]
    boots = _mcc_counts(
        (bt & bp).sum(1).astype(float), (~bt & ~bp).sum(1).astype(float),
        (~bt & bp).sum(1).astype(float), (bt & ~bp).sum(1).astype(float),
    )
    return (mcc(t, p), *_percentile(np.asarray(boots, dtype=float), ci))


def mcnemar_test(
    a_bool: Sequence[Any] | np.ndarray, b_bool: Sequence[Any] | np.ndarray, exact: bool | None = None
) -> tuple[float, float]:
    """McNemar's test for paired binary outcomes; returns (statistic, p-value).

    ``exact=None`` picks the exact binomial test when there are fewer than 25 discordant pairs.
    """
    a = np.asarray(a_bool, dtype=bool)
    b = np.asarray(b_bool, dtype=bool)
    if a.shape != b.shape:
        raise ValueError(f"paired samples differ in shape: {a.shape} vs {b.shape}")
    table = [[int(np.sum(a & b)), int(np.sum(a & ~b))], [int(np.sum(~a & b)), int(np.sum(~a & ~b))]]
    discordant = table[0][1] + table[1][0]
    if discordant == 0:
        return 0.0, 1.0
    use_exact = discordant < 25 if exact is None else exact
    res = mcnemar(table, exact=use_exact, correction=True)
    return float(res.statistic), float(res.pvalue)


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
