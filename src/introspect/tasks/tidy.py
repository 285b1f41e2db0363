"""The tidy metrics table's vocabulary: one row, its keys, grouping, matching, and rates with CIs.

Why its own module: task families' summarisers (``injection.metrics``) and the report's generic
summariser build the same rows the same way; keeping the row format here keeps them in step
without the tasks importing the report.

Every row names the interval it carries in ``ci``: ``wilson`` (independent trials, or a single
concept), ``cluster-bootstrap(concept)`` (concepts resampled, their trials and samples kept),
``…∪wilson`` (a rate's cluster interval widened to contain the Wilson interval over all
trials: a cluster bootstrap of 0/n is [0, 0], which no finite sample can promise),
``cluster-bootstrap(concept×prompt)`` (pairs whose controls are shared by every concept: both
resampled), ``bootstrap(pairs)`` / ``bootstrap`` (one concept: pairs or trials resampled),
``…∪wilson(discordant)`` (a paired 0/1 difference whose bootstrap has no spread, e.g. no
discordant pair: widened by the Wilson upper bound of the discordant share, since the
difference can be no larger than that). Paired
binary differences carry ``p`` (McNemar on the matched pairs, exact below 25 discordant pairs),
``p_cluster`` (clustered McNemar across concepts) and, once a summariser has seen the whole grid,
``p_holm`` (Holm over the grid's cells of the more conservative of the two).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd

from introspect.stats import (
    Part,
    bootstrap_diff,
    bootstrap_mean,
    cluster_bootstrap,
    cluster_mean,
    cluster_paired_diff,
    holm,
    mcnemar_clustered,
    mcnemar_test,
    n_levels,
    paired_bootstrap,
    wilson,
)

KEYS = ["model_id", "task", "layer_idx", "alpha", "alpha_units", "variant"]
CELL = ["layer_idx", "alpha", "alpha_units"]
SUMMARY_COLUMNS = KEYS + ["metric", "condition", "value", "lo", "hi", "n", "n_clusters", "ci",
                          "p", "p_cluster", "p_holm", "note"]
# An injected/ablation record and the control record with the same match key saw the identical
# prompt and the same sampling stream (records contract); controls that carry a concept word
# (tasks B, C and the steering check) are matched on the word too.
MATCH_KEY = ["model_id", "task", "variant", "trial_index", "sample", "extra.sentence"]
NAN = math.nan
_HEAVY = ("prompt", "token_positions", "source", "trial_id", "run_id", "gen", "type", "ts")


def none_if_missing(v: Any) -> Any:
    """None for a missing value (None or NaN), else the value itself."""
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def row(keys: dict[str, Any], metric: str, est: tuple[float, float, float], n: int,
        condition: str = "", *, ci: str = "", n_clusters: int | None = None, p: float = NAN,
        p_cluster: float = NAN, note: str = "") -> dict[str, Any]:
    """One summary row: ``keys`` holds (some of) KEYS, ``est`` is (value, lo, hi)."""
    out = {k: none_if_missing(keys.get(k)) for k in KEYS}
    out.update(metric=metric, condition=condition, value=est[0], lo=est[1], hi=est[2], n=int(n),
               n_clusters=n_clusters, ci=ci, p=p, p_cluster=p_cluster, p_holm=NAN, note=note)
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


def num(s: pd.Series) -> np.ndarray:
    """A column as floats (missing or non-numeric -> NaN)."""
    return pd.to_numeric(s, errors="coerce").to_numpy(float)


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


# ---------------------------------------------------------------- matching


def concepts(df: pd.DataFrame) -> np.ndarray:
    """The cluster label of each row: its concept word ('' when it has none)."""
    return np.array(["" if none_if_missing(w) is None else str(w) for w in col(df, "word")],
                    dtype=object)


def _key_frame(df: pd.DataFrame, with_word: bool) -> pd.DataFrame:
    out = pd.DataFrame(index=df.index)
    for k in MATCH_KEY + (["word"] if with_word else []):
        c = col(df, k)
        if k == "sample":
            out[k] = pd.to_numeric(c, errors="coerce").fillna(0).astype(int)
        elif k == "trial_index":
            out[k] = pd.to_numeric(c, errors="coerce").fillna(-1).astype(int)
        else:
            out[k] = ["" if none_if_missing(v) is None else str(v) for v in c]
    return out


def pair(treated: pd.DataFrame, controls: pd.DataFrame) -> pd.DataFrame:
    """Treated rows joined to the control with the same match key (treated rows without one drop).

    Control columns come back suffixed ``~c``; ``concept`` is the treated row's word,
    ``prompt`` its (trial, sentence) and ``control_id`` names the control (one control may serve
    several treated rows). Controls that all carry a word are matched on it too.
    Duplicate controls of one key (a resumed run) count once.
    """
    if treated.empty or controls.empty:
        return pd.DataFrame()
    treated, controls = (d.drop(columns=[c for c in _HEAVY if c in d.columns]) for d in (treated, controls))
    with_word = bool(concepts(controls).all()) and "word" in treated.columns
    kt, kc = _key_frame(treated, with_word), _key_frame(controls, with_word)
    keys = list(kt.columns)
    t = pd.concat([kt.add_prefix("k:"), treated], axis=1)
    c = pd.concat([kc.add_prefix("k:"), controls.add_suffix("~c")], axis=1)
    c = c.drop_duplicates([f"k:{k}" for k in keys], keep="last")
    out = t.merge(c, on=[f"k:{k}" for k in keys], how="inner")
    if out.empty:
        return out
    out = out.copy()  # one block per dtype: the merge of wide record frames is fragmented (pandas warns)
    out["concept"] = concepts(out)
    out["prompt"] = [f"{i}|{s}" for i, s in zip(out["k:trial_index"], out["k:extra.sentence"])]
    out["control_id"] = ["|".join(map(str, k)) for k in zip(*(out[f"k:{k}"] for k in keys))]
    return out.drop(columns=[f"k:{k}" for k in keys])


# ---------------------------------------------------------------- rows with intervals


def _labels(clusters: Any, n: int) -> np.ndarray:
    return np.full(n, "", dtype=object) if clusters is None else np.asarray(clusters, dtype=object)


def unique_controls(p: pd.DataFrame) -> pd.DataFrame:
    """The matched pairs with each control once (for rates of the controls themselves)."""
    return p.drop_duplicates("control_id") if not p.empty else p


def rate_row(keys: dict[str, Any], metric: str, x: np.ndarray, condition: str,
             clusters: Any = None, unit: str = "concept", note: str = "") -> list[dict]:
    """The rate row of a 0/1 array (NaNs dropped), or no row when it holds no value.

    More than one cluster: the cluster-bootstrap interval widened to contain Wilson's;
    otherwise Wilson over the trials.
    """
    x = np.asarray(x, dtype=float)
    lab = _labels(clusters, x.size)
    ok = ~np.isnan(x)
    est, n = rate(x)
    if not n:
        return []
    g = n_levels(lab[ok])
    if g < 2:
        return [row(keys, metric, est, n, condition, ci="wilson", n_clusters=g, note=note)]
    boot = cluster_mean(x[ok], lab[ok])
    hull = (est[0], float(np.nanmin([boot[1], est[1]])), float(np.nanmax([boot[2], est[2]])))
    return [row(keys, metric, hull, n, condition, ci=f"cluster-bootstrap({unit})∪wilson",
                n_clusters=g, note=note)]


def mean_row(keys: dict[str, Any], metric: str, x: np.ndarray, condition: str,
             clusters: Any = None, unit: str = "concept", note: str = "") -> list[dict]:
    """The mean of a numeric array with a cluster (or, one cluster, plain) bootstrap interval."""
    x = np.asarray(x, dtype=float)
    lab = _labels(clusters, x.size)
    ok = ~np.isnan(x)
    if not ok.any():
        return []
    g = n_levels(lab[ok])
    if g < 2:
        return [row(keys, metric, bootstrap_mean(x[ok]), int(ok.sum()), condition,
                    ci="bootstrap", n_clusters=g, note=note)]
    return [row(keys, metric, cluster_mean(x[ok], lab[ok]), int(ok.sum()), condition,
                ci=f"cluster-bootstrap({unit})", n_clusters=g, note=note)]


def diff_row(keys: dict[str, Any], metric: str, a: np.ndarray, b: np.ndarray,
             condition: str, note: str = "") -> list[dict]:
    """Unpaired mean(a) − mean(b) (NaNs dropped) by bootstrap, or no row when a side is empty."""
    a, b = a[~np.isnan(a)], b[~np.isnan(b)]
    if not (a.size and b.size):
        return []
    return [row(keys, metric, bootstrap_diff(a, b), a.size + b.size, condition,
                ci="bootstrap", note=note)]


def _binary(x: np.ndarray) -> bool:
    return bool(np.isin(x, (0.0, 1.0)).all())


def paired_row(keys: dict[str, Any], metric: str, a: np.ndarray, b: np.ndarray,
               condition: str, clusters: Any = None, crossed: Any = None,
               note: str = "") -> list[dict]:
    """mean(a − b) over complete pairs: cluster bootstrap (two-way when ``crossed`` labels are
    given), else a bootstrap over pairs; 0/1 outcomes also get McNemar ``p`` and clustered
    ``p_cluster``. No complete pair -> no row."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    ok = ~(np.isnan(a) | np.isnan(b))
    if not ok.any():
        return []
    a, b = a[ok], b[ok]
    lab = _labels(clusters, ok.size)[ok]
    crs = None if crossed is None else np.asarray(crossed, dtype=object)[ok]
    g, h = n_levels(lab), (n_levels(crs) if crs is not None else 1)
    dims = [u for u, k in (("concept", g), ("prompt", h)) if k >= 2]
    if dims:
        est, _ = cluster_paired_diff(a, b, lab, crs if h >= 2 else None)
        ci = f"cluster-bootstrap({'×'.join(dims)})"
    else:
        est, ci = paired_bootstrap(a, b), "bootstrap(pairs)"
    p = pc = NAN
    if _binary(a) and _binary(b):
        p = mcnemar_test(a.astype(bool), b.astype(bool))[1]
        if g >= 2:
            pc = mcnemar_clustered(a.astype(bool), b.astype(bool), lab)[1]
        if not est[2] > est[1]:  # no spread at all (e.g. no discordant pair): bound by Wilson
            q_hi = wilson(float(np.sum(a != b)), a.size)[2]
            est = (est[0], max(-1.0, est[0] - q_hi), min(1.0, est[0] + q_hi))
            ci += "∪wilson(discordant)"
    return [row(keys, metric, est, int(ok.sum()), condition, ci=ci, n_clusters=g, p=p,
                p_cluster=pc, note=note)]


def combo_row(keys: dict[str, Any], metric: str, parts: list[Part], combine: Any, n: int,
              condition: str, note: str = "") -> list[dict]:
    """A statistic of several parts' means (``stats.cluster_bootstrap``), clustered by concept."""
    if any(np.isnan(np.asarray(p.values, dtype=float)).all() for p in parts):
        return []
    est, _ = cluster_bootstrap(parts, combine)
    labels = np.concatenate([np.asarray(p.clusters, dtype=object) for p in parts])
    g = n_levels(labels)
    ci = "cluster-bootstrap(concept)" if g >= 2 else "bootstrap"
    return [row(keys, metric, est, n, condition, ci=ci, n_clusters=g, note=note)]


def add_holm(rows: list[dict[str, Any]], metrics: set[str] | None = None) -> list[dict[str, Any]]:
    """Fill ``p_holm`` per (model, task, variant, metric) over the grid's cells, in place.

    Each cell's p is the more conservative of McNemar's and the clustered McNemar's.
    """
    fam: dict[tuple, list[dict]] = {}
    for r in rows:
        if (metrics is None or r["metric"] in metrics) and not math.isnan(r.get("p", NAN)):
            fam.setdefault((r["model_id"], r["task"], r["variant"], r["metric"]), []).append(r)
    for members in fam.values():
        ps = [max(r["p"], r["p_cluster"]) if not math.isnan(r["p_cluster"]) else r["p"]
              for r in members]
        for r, adj in zip(members, holm(ps)):
            r["p_holm"] = float(adj)
    return rows


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
