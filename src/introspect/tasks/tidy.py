"""The tidy metrics table's vocabulary: one row, its keys, grouping, matching, and rates with CIs.

Why its own module: task families' summarisers (``injection.metrics``) and the report's generic
summariser build the same rows the same way; keeping the row format here keeps them in step
without the tasks importing the report.

The unit of replication is the concept (``introspect.stats.clustered``): every row's estimate is the
mean of its concepts' values and ``ci`` names the interval: ``wilson-deff-t(concept)`` (rates),
``newcombe∪t(concept)`` (paired 0/1 differences), ``t(concept)`` (means and continuous
differences), ``wilson`` (answers with no concept, treated as independent), ``newcombe-unpaired``
(controls that could not be paired) or ``none`` (fewer than ``MIN_CLUSTERS`` concepts: no
interval, and ``note`` says why). Differences carry ``p`` (exact sign-flip over the concepts'
paired differences), ``p_min`` (the smallest p that many concepts can reach) and ``p_holm``
(Holm over the family a headline picks from: every variant, cell and headline metric of a task;
any other metric is its own family over variants and cells).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd

from introspect.stats import clustered as C

KEYS = ["model_id", "task", "layer_idx", "alpha", "alpha_units", "variant"]
CELL = ["layer_idx", "alpha", "alpha_units"]
EFFECT_P = 0.05  # the level of every claim: Holm's for the headline family, a gate's test (``clears``)
SUMMARY_COLUMNS = KEYS + ["metric", "condition", "value", "lo", "hi", "n", "n_clusters", "ci",
                          "p", "p_min", "p_holm", "note"]
# An injected/ablation record and the control record with the same match key saw the identical
# prompt and the same sampling stream (records contract); controls that carry a concept word
# (tasks B, C and the steering check) are matched on the word too.
MATCH_KEY = ["model_id", "task", "variant", "trial_index", "sample", "extra.sentence",
             "extra.question"]
NAN = math.nan
_HEAVY = ("prompt", "token_positions", "source", "trial_id", "run_id", "gen", "type", "ts")


def none_if_missing(v: Any) -> Any:
    """None for a missing value (None or NaN), else the value itself."""
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def row(keys: dict[str, Any], metric: str, est: tuple[float, float, float], n: int,
        condition: str = "", *, ci: str = "", n_clusters: int | None = None, p: float = NAN,
        p_min: float = NAN, note: str = "") -> dict[str, Any]:
    """One summary row: ``keys`` holds (some of) KEYS, ``est`` is (value, lo, hi)."""
    out = {k: none_if_missing(keys.get(k)) for k in KEYS}
    out.update(metric=metric, condition=condition, value=est[0], lo=est[1], hi=est[2], n=int(n),
               n_clusters=n_clusters, ci=ci, p=p, p_min=p_min, p_holm=NAN, note=note)
    return out


def row_p(r: dict[str, Any] | None) -> float:
    """A row's sign-flip p: NaN where none was computed (None, blank or no row)."""
    p = None if r is None else r.get("p")
    return NAN if p is None or p == "" else float(p)


def clears(r: dict[str, Any] | None, level: float) -> bool:
    """A gate's row above 0: its 95% interval's lower end above 0 and its sign-flip p (where one
    was computed) below ``level``, so no gate claims more than its test."""
    return r is not None and r["lo"] > 0 and not row_p(r) >= level


def est_row(keys: dict[str, Any], metric: str, e: C.Est, condition: str = "",
            note: str = "") -> list[dict[str, Any]]:
    """The row of a ``clustered.Est`` (none when it holds no value). The row keeps the estimate's
    ``refit`` (an interval at another level) under the private key ``_est`` for verdicts."""
    if not e.n:
        return []
    p_min = C.smallest_p(e.g) if not math.isnan(e.p) else NAN
    r = row(keys, metric, e.interval, e.n, condition, ci=e.method, n_clusters=e.g, p=e.p,
            p_min=p_min, note="; ".join(x for x in (note, e.note) if x))
    r["_est"] = e
    return [r]


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


def num(s: pd.Series) -> np.ndarray:
    """A column as floats (missing or non-numeric -> NaN)."""
    return pd.to_numeric(s, errors="coerce").to_numpy(float)


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


# ---------------------------------------------------------------- matching


def concepts(df: pd.DataFrame) -> np.ndarray:
    """The cluster label of each row: its concept word ('' when it has none)."""
    return np.array(["" if none_if_missing(w) is None else str(w) for w in col(df, "word")],
                    dtype=object)


KEY_COLUMNS = {True: "_match_w", False: "_match"}  # precomputed match keys (``with_match_keys``)


def with_match_keys(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with its match keys computed once (``pair`` then merges on them directly)."""
    return df.assign(**{KEY_COLUMNS[w]: _match_key(df, w) for w in (True, False)})


def _text(c: pd.Series) -> pd.Series:
    return c.astype(object).where(c.notna(), "").astype(str)


def _match_key(df: pd.DataFrame, with_word: bool) -> pd.Series:
    """One string per row joining its ``MATCH_KEY`` values (and word): a single merge column."""
    parts = []
    for k in MATCH_KEY + (["word"] if with_word else []):
        c = col(df, k)
        if k in ("sample", "trial_index"):
            c = pd.to_numeric(c, errors="coerce").fillna(0 if k == "sample" else -1).astype(int).astype(str)
        parts.append(_text(c))
    return parts[0].str.cat(parts[1:], sep="\x1f")


def pair(treated: pd.DataFrame, controls: pd.DataFrame) -> pd.DataFrame:
    """Treated rows joined to the control with the same match key (treated rows without one drop).

    Control columns come back suffixed ``~c``; ``concept`` is the treated row's word,
    ``prompt`` its (trial, sentence) and ``control_id`` names the control (one control may serve
    several treated rows). Controls that all carry a word are matched on it too.
    Duplicate controls of one key (a resumed run) count once.
    """
    if treated.empty or controls.empty:
        return pd.DataFrame()
    with_word = bool(concepts(controls).all()) and "word" in treated.columns
    kcol = KEY_COLUMNS[with_word]

    def keyed(d: pd.DataFrame) -> pd.DataFrame:
        k = d[kcol] if kcol in d.columns else _match_key(d, with_word)
        return d.drop(columns=[c for c in (*_HEAVY, *KEY_COLUMNS.values()) if c in d.columns]).assign(_k=k)

    t, c = keyed(treated), keyed(controls)
    c = c.drop_duplicates("_k", keep="last")
    pos = pd.Series(np.arange(len(c)), index=c["_k"].to_numpy())
    where = pos.reindex(t["_k"].to_numpy()).to_numpy()  # the control row of each treated row
    hit = ~np.isnan(where)
    if not hit.any():
        return pd.DataFrame()
    t = t.iloc[np.flatnonzero(hit)].reset_index(drop=True)
    c = c.iloc[where[hit].astype(int)].drop(columns="_k").reset_index(drop=True)
    c.columns = [f"{k}~c" for k in c.columns]
    out = pd.concat([t, c], axis=1)
    out["concept"] = concepts(out)
    out["prompt"] = (pd.to_numeric(col(out, "trial_index"), errors="coerce").fillna(-1).astype(int).astype(str)
                     + "|" + _text(col(out, "extra.sentence")))
    return out.rename(columns={"_k": "control_id"})


# ---------------------------------------------------------------- rows with intervals


def unique_controls(p: pd.DataFrame) -> pd.DataFrame:
    """The matched pairs with each control once (for rates of the controls themselves)."""
    return p.drop_duplicates("control_id") if not p.empty else p


def _clusters(clusters: Any, n: int) -> Any:
    """Concept labels, or None (answers as independent units) when there are none at all."""
    if clusters is None:
        return None
    lab = np.asarray(clusters, dtype=object)
    return None if lab.size == n and all(v in ("", None) for v in lab) else lab


def rate_row(keys: dict[str, Any], metric: str, x: np.ndarray, condition: str,
             clusters: Any = None, note: str = "") -> list[dict]:
    """The rate of a 0/1 array (NaNs dropped) over concepts, or no row when it holds no value."""
    x = np.asarray(x, dtype=float)
    return est_row(keys, metric, C.rate(x, _clusters(clusters, x.size)), condition, note)


def mean_row(keys: dict[str, Any], metric: str, x: np.ndarray, condition: str,
             clusters: Any = None, note: str = "") -> list[dict]:
    """The mean of a numeric array over concepts (Student t), or no row when it holds no value."""
    x = np.asarray(x, dtype=float)
    return est_row(keys, metric, C.mean(x, _clusters(clusters, x.size)), condition, note)


def diff_row(keys: dict[str, Any], metric: str, a: np.ndarray, b: np.ndarray, condition: str,
             a_clusters: Any = None, b_clusters: Any = None, note: str = "") -> list[dict]:
    """Unpaired rate(a) − rate(b) (NaNs dropped; Newcombe), or no row when a side is empty.
    Only for controls that cannot be paired (records written before matching)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    e = C.unpaired_rate_diff(a, _clusters(a_clusters, a.size), b, _clusters(b_clusters, b.size))
    return est_row(keys, metric, e, condition, note)


def _binary(x: np.ndarray) -> bool:
    return bool(np.isin(x[~np.isnan(x)], (0.0, 1.0)).all())


def paired_row(keys: dict[str, Any], metric: str, a: np.ndarray, b: np.ndarray,
               condition: str, clusters: Any = None, note: str = "", floor: float = 0.0) -> list[dict]:
    """mean(a − b) over complete pairs, by concept: Newcombe for 0/1 outcomes, Student t
    otherwise (differences below ``floor`` counted as 0), each with the exact sign-flip p. No
    complete pair -> no row."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    lab = _clusters(clusters, a.size)
    if _binary(a) and _binary(b):
        return est_row(keys, metric, C.paired_rate_diff(a, b, lab), condition, note)
    return est_row(keys, metric, C.paired_mean_diff(a, b, lab, floor=floor), condition, note)


def combo_row(keys: dict[str, Any], metric: str, parts: list[tuple[Any, Any]], combine: Any,
              condition: str, note: str = "") -> list[dict]:
    """A statistic of several parts per concept (``clustered.per_concept``), Student t over the
    concepts present in every part, with its sign-flip p."""
    vals, n = C.per_concept(parts, combine)
    if not vals.size:
        return []
    return est_row(keys, metric, C.concept_mean(vals, n, test=True), condition, note)


SPLIT_SEED = 0


def split_half(cells: list[tuple[dict[str, Any], pd.DataFrame]], score: Any, report: Any,
               seed: int = SPLIT_SEED) -> list[dict[str, Any]]:
    """Winner's-curse guard: pick the best cell on a seeded half of the concepts, report it on
    the other half.

    ``cells`` holds (keys, matched pairs with a ``concept`` column) per grid cell; ``score(pairs)``
    rates a cell on the selection half (higher is better, NaN skips it); ``report(keys,
    held_out_pairs, note)`` returns the rows to show. Needs two cells and two concepts.
    """
    words = sorted({w for _, p in cells for w in p["concept"]} - {""})
    if len(cells) < 2 or len(words) < 2:
        return []
    perm = [words[i] for i in np.random.default_rng(seed).permutation(len(words))]
    sel, held = sorted(perm[: len(words) // 2]), sorted(perm[len(words) // 2:])
    best, best_score = None, -math.inf
    for i, (_, p) in enumerate(cells):
        s = score(p[p["concept"].isin(sel)])
        if not math.isnan(s) and s > best_score:
            best, best_score = i, s
    if best is None:
        return []
    keys, p = cells[best]
    note = (f"cell chosen on concepts {sel} (seed {seed}, best of {len(cells)} cells, score "
            f"{best_score:.3g}); estimate on the held-out concepts {held}")
    return report(keys, p[p["concept"].isin(held)], note)


def mean_diff(a: np.ndarray, b: np.ndarray) -> float:
    """nanmean(a − b), NaN when no pair is complete."""
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    return float(np.nanmean(d)) if np.isfinite(d).any() else math.nan
