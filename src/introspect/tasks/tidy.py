"""The tidy metrics table's vocabulary: one row, its keys, grouping, 0/1 flags and rates with CIs.

Why its own module: task families' summarisers (``injection.metrics``) and the report's generic
summariser build the same rows the same way; keeping the row format here keeps them in step
without the tasks importing the report.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd

from introspect.stats import bootstrap_diff, wilson

KEYS = ["model_id", "task", "layer_idx", "alpha", "alpha_units", "variant"]
CELL = ["layer_idx", "alpha", "alpha_units"]
SUMMARY_COLUMNS = KEYS + ["metric", "condition", "value", "lo", "hi", "n"]


def none_if_missing(v: Any) -> Any:
    """None for a missing value (None or NaN), else the value itself."""
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def row(keys: dict[str, Any], metric: str, est: tuple[float, float, float], n: int,
        condition: str = "") -> dict[str, Any]:
    """One summary row: ``keys`` holds (some of) KEYS, ``est`` is (value, lo, hi)."""
    out = {k: none_if_missing(keys.get(k)) for k in KEYS}
    out.update(metric=metric, condition=condition, value=est[0], lo=est[1], hi=est[2], n=int(n))
    return out


def groups(df: pd.DataFrame, by: list[str]) -> Iterator[tuple[dict[str, Any], pd.DataFrame]]:
    """``groupby`` that keeps missing keys (as None) and yields (keys dict, sub-frame)."""
    if df.empty:
        return
    for key, sub in df.groupby(by, dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        yield {k: none_if_missing(v) for k, v in zip(by, key)}, sub


def flag(s: pd.Series, none_as: bool | None = False) -> np.ndarray:
    """A grade column as floats 0/1; missing values become ``none_as`` (NaN when None).

    A column with no value at all (absent from these records) is all NaN, so it yields no rate.
    """
    if all(none_if_missing(v) is None for v in s):
        return np.full(len(s), np.nan)
    fill = np.nan if none_as is None else float(none_as)
    return np.array([fill if none_if_missing(v) is None else float(bool(v)) for v in s], dtype=float)


def rate(x: np.ndarray) -> tuple[tuple[float, float, float], int]:
    """Wilson rate of a 0/1 array (NaNs dropped) and its n."""
    x = x[~np.isnan(x)]
    return wilson(float(x.sum()), x.size), int(x.size)


def col(df: pd.DataFrame, name: str) -> pd.Series:
    """Column ``name``, or an all-None column when the records lack that key."""
    return df[name] if name in df.columns else pd.Series([None] * len(df), index=df.index)


def baseline(df: pd.DataFrame, sub: pd.DataFrame, condition: str) -> pd.DataFrame:
    """Rows of ``condition`` in the same (layer, alpha) cell as ``sub``, else pooled from ``df``."""
    pool = df[df["condition"] == condition]
    if sub.empty or pool.empty:
        return pool
    same = pool.merge(sub[CELL].drop_duplicates(), on=CELL, how="inner")
    return same if not same.empty else pool


def rate_row(keys: dict[str, Any], metric: str, x: np.ndarray, condition: str) -> list[dict]:
    """The Wilson-rate row of a 0/1 array, or no row when it holds no value."""
    est, n = rate(x)
    return [row(keys, metric, est, n, condition)] if n else []


def diff_row(keys: dict[str, Any], metric: str, a: np.ndarray, b: np.ndarray,
             condition: str) -> list[dict]:
    """The bootstrap row of mean(a) − mean(b) (NaNs dropped), or no row when a side is empty."""
    a, b = a[~np.isnan(a)], b[~np.isnan(b)]
    if not (a.size and b.size):
        return []
    return [row(keys, metric, bootstrap_diff(a, b), a.size + b.size, condition)]
