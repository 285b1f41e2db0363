"""Rows of the self-knowledge summary tables (``SK_COLUMNS``) and reading grade columns.

Why its own module: the SEB, game and recovery summaries all read ``grade.*`` columns of a
flattened record frame (lists included) and emit the same rows; one place keeps them in step.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pandas as pd

from introspect.stats import clustered as C
from introspect.stats.intervals import wilson
from introspect.stats.items import score_block

# n: the rows behind a figure (draws, pairs, trials); n_items: the distinct items (questions,
# option words, targets) behind it, the unit its interval resamples
SK_COLUMNS = ["model_id", "task", "variant", "condition", "metric", "value", "lo", "hi", "n", "n_items"]
NAN = math.nan


def row(keys: dict[str, Any], metric: str, est: Sequence[float], n: int,
        condition: str = "clean", *, n_items: int | None = None) -> dict[str, Any]:
    """One summary row; ``n_items`` defaults to ``n`` (each row one item)."""
    return {**keys, "condition": condition, "metric": metric, "value": float(est[0]),
            "lo": float(est[1]), "hi": float(est[2]), "n": int(n),
            "n_items": int(n if n_items is None else n_items)}


def prop(keys: dict[str, Any], metric: str, k: float, n: float, cond: str = "clean", *,
         n_items: int | None = None) -> list[dict]:
    """A Wilson-interval rate (nothing when n = 0)."""
    return [row(keys, metric, wilson(k, n), int(n), cond, n_items=n_items)] if n > 0 else []


def value(keys: dict[str, Any], metric: str, v: float, n: int, cond: str = "clean", *,
          n_items: int | None = None) -> dict:
    """A value without an interval (a p-value, a BIC difference)."""
    return row(keys, metric, (v, NAN, NAN), n, cond, n_items=n_items)


def n_unique(clusters: Any) -> int:
    return int(pd.Series(np.asarray(clusters, dtype=object)).nunique()) if len(clusters) else 0


def block(keys: dict[str, Any], prefix: str, p: np.ndarray, y: np.ndarray, clusters: np.ndarray,
          choice: np.ndarray | None = None, cond: str = "clean") -> list[dict]:
    """``stats.items.score_block`` as rows named ``<prefix><score>``; n = draws, n_items = clusters."""
    k = n_unique(clusters)
    return [row(keys, prefix + name, est, n, cond, n_items=k) for name, (est, n) in
            score_block(p, y, clusters, choice).items()]


def modal_letter(keys: dict[str, Any], metric: str, choices: Sequence[Any], *,
                 n_items: int | None = None) -> list[dict]:
    """The share of decisions whose letter is the most common one (nothing without letters).
    Beside every multiple-choice headline: at 1.0 one letter wins everywhere, so the accuracy is
    the share keyed to that letter and an AUROC of P(correct) reads the letter prior."""
    letters = [c for c in (str(v) for v in choices) if len(c) == 1 and c in "ABCDEFGH"]
    return prop(keys, metric, max(map(letters.count, set(letters))), len(letters),
                n_items=n_items) if letters else []


def order_consistency(keys: dict[str, Any], metric: str, pairs: Sequence[Any], items: Sequence[Any]) -> list[dict]:
    """Two-option decisions asked in both orders (``pairs``: [letter in the first order, letter in
    the swapped one], ``items``: the item of each): the share whose choice follows the option when
    the order swaps (the two letters differ). Why not a modal-letter bar: with two options the most
    common letter is at least 0.5 by arithmetic; here a reader that says one letter whatever it
    reads scores 0, one that follows the options 1, a coin 0.5. Interval over items (``rate``)."""
    ok = [(ls, c) for ls, c in zip(pairs, items)
          if isinstance(ls, (list, tuple)) and len(ls) == 2 and all(x in ("A", "B") for x in ls)]
    if not ok:
        return []
    e = C.rate([float(ls[0] != ls[1]) for ls, _ in ok], [str(c) for _, c in ok])
    return [row(keys, metric, e.interval, e.n, n_items=e.g)]


def draw_rows(keys: dict[str, Any], k: Sequence[Any], n_items: int) -> list[dict]:
    """K, the sampled draws behind each item's truth (the smallest), and a warning row when it
    is 1: a single draw makes a probability look like a certainty and fakes calibration."""
    ks = [int(v) for v in k if isnum(v)]
    if not ks:
        return []
    out = [value(keys, "truth_draws_per_item", float(min(ks)), n_items)]
    if min(ks) < 2:
        out.append(value(keys, "warning_single_draw_truth", 1.0, n_items))
    return out


def g(df: pd.DataFrame, name: str, fill: Any = None) -> pd.Series:
    """A grade column (``fill`` where absent or missing)."""
    col = f"grade.{name}"
    if col not in df.columns:
        return pd.Series([fill] * len(df), index=df.index, dtype=object)
    return df[col].astype(object).where(df[col].notna(), fill)


def b(df: pd.DataFrame, name: str) -> np.ndarray:
    return np.array([bool(v) for v in g(df, name, False)], bool)


def num(df: pd.DataFrame, name: str) -> np.ndarray:
    return pd.to_numeric(g(df, name), errors="coerce").to_numpy(float)


def lists(df: pd.DataFrame, name: str) -> list[list]:
    """A list-valued grade column (a missing cell is an empty list)."""
    return [list(v) if isinstance(v, (list, tuple, np.ndarray)) else [] for v in g(df, name)]


def frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=SK_COLUMNS)


def groups(df: pd.DataFrame, by: Sequence[str] = ("model_id", "task", "variant")
           ) -> Iterator[tuple[dict[str, Any], pd.DataFrame]]:
    if df.empty:
        return
    d = df.copy()
    d["variant"] = d["variant"].fillna("default") if "variant" in d else "default"
    for key, sub in d.groupby(list(by), sort=True, dropna=False):
        yield dict(zip(by, key if isinstance(key, tuple) else (key,))), sub


def with_source(df: pd.DataFrame) -> pd.DataFrame:
    """``source`` column: grade.source, else the variant's part before ":" (question set)."""
    d = df.copy()
    fallback = d["variant"].fillna("").astype(str).str.split(":").str[0] if "variant" in d else ""
    d["source"] = g(d, "source").where(g(d, "source").notna(), fallback) if len(d) else []
    return d


def z(x: np.ndarray) -> np.ndarray:
    """z-scores (NaNs kept); all NaN when x has no finite value, zeros where it has no spread
    (a constant the fits leave out). Callers check ``usable`` before calling a column a predictor."""
    x = np.asarray(x, float)
    ok = np.isfinite(x)
    if not ok.any():
        return np.full_like(x, np.nan)
    if ok.sum() < 2 or np.std(x[ok]) == 0:
        return np.where(ok, 0.0, np.nan)
    return (x - x[ok].mean()) / x[ok].std()


def isnum(v: Any) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))


def ab_letter(p_a: Any) -> str | None:
    """The letter an A/B decision chose from its renormalised P(A) (a tie is "A", as the argmax)."""
    return ("A" if float(p_a) >= 0.5 else "B") if isnum(p_a) else None
