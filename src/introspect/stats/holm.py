"""Multiplicity: Holm's step-down adjusted p-values, over a list or over a table's families of rows.

Why Holm: a headline or a verdict picks from many tests (variants, cells, metrics); Holm controls
the family-wise error at no cost in assumptions. Why families by row: a metric table's rows carry
their own p, and which rows form a family (the headline family per model and task, or each other
metric on its own) is part of what the report claims, so it is decided in one place.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

NAN = math.nan


def holm(pvals: Any) -> np.ndarray:
    """Holm step-down adjusted p-values; NaNs stay NaN and are not counted as tests. (Written out:
    statsmodels' ``multipletests`` runs a garbage collection on every call, half a second each.)"""
    p = np.asarray([np.nan if v is None else v for v in np.ravel(np.asarray(pvals, dtype=object))],
                   dtype=float)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    if ok.size:
        order = ok[np.argsort(p[ok], kind="stable")]
        m = order.size
        adj = np.maximum.accumulate((m - np.arange(m)) * p[order])
        out[order] = np.minimum(adj, 1.0)
    return out


def add_holm(rows: list[dict[str, Any]], headline: set[str] | None = None) -> list[dict[str, Any]]:
    """Fill ``p_holm`` in place: one family per (model, task) holding every variant, cell and
    ``headline`` metric (what a headline or a verdict picks from); every other metric with a p is
    a family of its own per (model, task, metric) over variants and cells. Rows of another task
    or without a p are left alone."""
    fam: dict[tuple, list[dict]] = {}
    for r in rows:
        if math.isnan(r.get("p", NAN)):
            continue
        key = ((r["model_id"], r["task"], "headline") if headline and r["metric"] in headline
               else (r["model_id"], r["task"], r["metric"]))
        fam.setdefault(key, []).append(r)
    for members in fam.values():
        for r, adj in zip(members, holm([r["p"] for r in members])):
            r["p_holm"] = float(adj)
            r["holm_m"] = len(members)
    return rows


def holm_interval(r: dict[str, Any], alpha: float = 0.05) -> tuple[float, float]:
    """The row's interval at level 1 − alpha/m (m = its Holm family's size; Bonferroni, so it
    is conservative), for claims that must survive the multiplicity of a headline."""
    e = r.get("_est")
    m = int(r.get("holm_m", 1))
    if e is None or e.refit is None or math.isnan(r["lo"]):
        return NAN, NAN
    return e.refit(1 - alpha / m)
