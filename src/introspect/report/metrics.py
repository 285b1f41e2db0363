"""Task metrics with 95% intervals, as one tidy table.

``summarize(df)`` returns one row per (model_id, task, layer_idx, alpha, alpha_units, variant,
metric) with ``value``, ``lo``, ``hi``, ``n`` and an informational ``condition`` column. Metric
names are unique within those keys; per-condition metrics are named ``<metric>:<condition>``.
Rates use Wilson intervals, differences and means a seeded percentile bootstrap.

Each task has a summariser looked up by exact task name, then by the longest registered prefix,
else the generic one (mean of every boolean / 0-1 grade key and of every other numeric grade key).
Task modules add their own with ``register_summary(prefix, fn)``; ``fn(df_one_model_task)``
returns a list of row dicts (``row()`` builds one).

Control trials carry no injection, so when no control trial shares an injected trial's
(layer, alpha) cell, the controls of the same model/task/variant are pooled as its baseline.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from introspect.report.load import load_results
from introspect.stats import bootstrap_diff, bootstrap_mean, wilson

KEYS = ["model_id", "task", "layer_idx", "alpha", "alpha_units", "variant"]
CELL = ["layer_idx", "alpha", "alpha_units"]
SUMMARY_COLUMNS = KEYS + ["metric", "condition", "value", "lo", "hi", "n"]

Summarizer = Callable[[pd.DataFrame], list[dict[str, Any]]]
_SUMMARIES: dict[str, tuple[Summarizer, bool]] = {}


def register_summary(task_prefix: str, fn: Summarizer, *, exact: bool = False) -> Summarizer:
    """Use ``fn`` for tasks named ``task_prefix`` (or starting with it unless ``exact``)."""
    _SUMMARIES[task_prefix] = (fn, exact)
    return fn


def summarizer_for(task: str) -> Summarizer:
    """The summariser of a task: exact name, else the longest matching prefix, else generic."""
    if task in _SUMMARIES:
        return _SUMMARIES[task][0]
    prefixes = [p for p, (_, ex) in _SUMMARIES.items() if not ex and task.startswith(p)]
    return _SUMMARIES[max(prefixes, key=len)][0] if prefixes else summarize_generic


# ---------------------------------------------------------------- helpers


def _none(v: Any) -> Any:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def row(keys: dict[str, Any], metric: str, est: tuple[float, float, float], n: int,
        condition: str = "") -> dict[str, Any]:
    """One summary row: ``keys`` holds (some of) KEYS, ``est`` is (value, lo, hi)."""
    out = {k: _none(keys.get(k)) for k in KEYS}
    out.update(metric=metric, condition=condition, value=est[0], lo=est[1], hi=est[2], n=int(n))
    return out


def groups(df: pd.DataFrame, by: list[str]) -> Iterator[tuple[dict[str, Any], pd.DataFrame]]:
    """``groupby`` that keeps missing keys (as None) and yields (keys dict, sub-frame)."""
    if df.empty:
        return
    for key, sub in df.groupby(by, dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        yield {k: _none(v) for k, v in zip(by, key)}, sub


def flag(s: pd.Series, none_as: bool | None = False) -> np.ndarray:
    """A grade column as floats 0/1; missing values become ``none_as`` (NaN when None).

    A column with no value at all (absent from these records) is all NaN, so it yields no rate.
    """
    if all(_none(v) is None for v in s):
        return np.full(len(s), np.nan)
    fill = np.nan if none_as is None else float(none_as)
    return np.array([fill if _none(v) is None else float(bool(v)) for v in s], dtype=float)


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


def _injected_cells(df: pd.DataFrame, baseline_conds: tuple[str, ...]) -> pd.DataFrame:
    """The rows whose (layer, alpha) cell holds something besides the baseline conditions."""
    active = df[~df["condition"].isin(baseline_conds)]
    if active.empty:
        return df
    return df.merge(active[CELL].drop_duplicates(), on=CELL, how="inner")


def _rate_row(keys: dict[str, Any], metric: str, x: np.ndarray, condition: str) -> list[dict]:
    est, n = rate(x)
    return [row(keys, metric, est, n, condition)] if n else []


def _diff_row(keys: dict[str, Any], metric: str, a: np.ndarray, b: np.ndarray,
              condition: str) -> list[dict]:
    a, b = a[~np.isnan(a)], b[~np.isnan(b)]
    if not (a.size and b.size):
        return []
    return [row(keys, metric, bootstrap_diff(a, b), a.size + b.size, condition)]


def _by_cell(df: pd.DataFrame, baseline_conds: tuple[str, ...]):
    """Yield (keys, cell rows, whole model/task/variant frame) for each injected cell."""
    for vkeys, vdf in groups(df, ["model_id", "task", "variant"]):
        for ckeys, cdf in groups(_injected_cells(vdf, baseline_conds), CELL):
            yield {**vkeys, **ckeys}, cdf, vdf


# ---------------------------------------------------------------- task summarisers


def summarize_a(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Task A: TPR, FPR, Net, identification, ablation detection, bias yes-rates, mean p_yes."""
    out: list[dict[str, Any]] = []
    injected_bias = np.nan_to_num(flag(col(df, "extra.bias_injected"))).astype(bool)
    is_clean_bias = (df["condition"] == "bias").to_numpy() & ~injected_bias
    df = df.assign(condition=df["condition"].where(~is_clean_bias, "bias_clean"))
    for keys, cdf, vdf in _by_cell(df, ("control", "bias_clean")):
        inj = cdf[cdf["condition"] == "injected"]
        ctl = baseline(vdf, cdf, "control")
        det_i, det_c = flag(col(inj, "grade.detected")), flag(col(ctl, "grade.detected"))
        out += _rate_row(keys, "tpr", det_i, "injected")
        out += _rate_row(keys, "fpr", det_c, "control")
        out += _diff_row(keys, "net", det_i, det_c, "injected-control")
        out += _rate_row(keys, "identification", flag(col(inj, "grade.matched")), "injected")
        hit = det_i == 1
        out += _rate_row(keys, "identification_given_detected",
                         flag(col(inj, "grade.matched"))[hit], "injected")
        for cond in ("random", "negative"):
            sub = cdf[cdf["condition"] == cond]
            out += _rate_row(keys, f"{cond}_detection", flag(col(sub, "grade.detected")), cond)
        b_inj = flag(col(cdf[cdf["condition"] == "bias"], "grade.said_yes"))
        b_cln = flag(col(baseline(vdf, cdf, "bias_clean"), "grade.said_yes"))
        out += _rate_row(keys, "bias_yes:injected", b_inj, "bias")
        out += _rate_row(keys, "bias_yes:clean", b_cln, "bias")
        out += _diff_row(keys, "bias_yes_diff", b_inj, b_cln, "bias")
        for cond in ("injected", "control", "random", "negative"):
            sub = ctl if cond == "control" else cdf[cdf["condition"] == cond]
            p = pd.to_numeric(col(sub, "p_yes"), errors="coerce")
            if p.notna().any():
                out.append(row(keys, f"p_yes_mean:{cond}", bootstrap_mean(p.to_numpy(float)),
                               int(p.notna().sum()), cond))
    return out


def summarize_b(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Task B: strict success, thought-correct, repeat-correct, MC accuracy; per condition."""
    out: list[dict[str, Any]] = []
    names = {"grade.success": "strict_success", "grade.thought_correct": "thought_correct",
             "grade.repeat_correct": "repeat_correct", "grade.mc_correct": "mc_accuracy"}
    for keys, cdf, vdf in _by_cell(df, ("control",)):
        for cond in ("injected", "control"):
            sub = baseline(vdf, cdf, cond) if cond == "control" else cdf[cdf["condition"] == cond]
            for column, name in names.items():
                out += _rate_row(keys, f"{name}:{cond}", flag(col(sub, column), None), cond)
    return out


def summarize_c(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Task C: % intentional (None = not intentional), unknown rate, and deltas vs control."""
    out: list[dict[str, Any]] = []
    for keys, cdf, vdf in _by_cell(df, ("control",)):
        yes: dict[str, np.ndarray] = {}
        for cond in ("control", "injected", "mismatch"):
            sub = baseline(vdf, cdf, cond) if cond == "control" else cdf[cdf["condition"] == cond]
            if sub.empty:
                continue
            raw = flag(col(sub, "grade.intentional"), None)
            yes[cond] = np.nan_to_num(raw, nan=0.0)
            out += _rate_row(keys, f"intentional:{cond}", yes[cond], cond)
            out += _rate_row(keys, f"unknown:{cond}", np.isnan(raw).astype(float), cond)
        for cond in ("injected", "mismatch"):
            if cond in yes and "control" in yes:
                out += _diff_row(keys, f"delta_intentional:{cond}", yes[cond], yes["control"],
                                 f"{cond}-control")
    return out


def _per_layer(sub: pd.DataFrame, key: str) -> dict[int, list[float]]:
    acc: dict[int, list[float]] = {}
    if key not in sub.columns or "grade.layers" not in sub.columns:
        return acc
    for layers, vals in zip(sub["grade.layers"], sub[key]):
        if isinstance(layers, list) and isinstance(vals, list):
            for layer, v in zip(layers, vals):
                if _none(v) is not None:
                    acc.setdefault(int(layer), []).append(float(v))
    return acc


_D_PAIR = ["word", "trial_index"]


def _paired_diff(think: pd.DataFrame, dont: pd.DataFrame, key: str) -> dict[int, list[float]] | None:
    """Per-layer think − don't-think differences of matched trials (same word and sentence).

    Both conditions read the same teacher-forced tokens, so pairing removes the large
    word-to-word spread of raw cosines; None when the trials do not pair one to one.
    """
    if not set(_D_PAIR) <= set(think.columns) or think.empty:
        return None
    t, d = think.set_index(_D_PAIR), dont.set_index(_D_PAIR)
    if t.index.has_duplicates or d.index.has_duplicates or set(t.index) != set(d.index):
        return None
    diffs = _per_layer(pd.DataFrame({"grade.layers": t["grade.layers"], key: [
        [a - b for a, b in zip(tv, d.loc[i, key])] for i, tv in t[key].items()]}), key)
    return diffs


def summarize_d(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Task D: per-layer delta cosine (think - dont_think), its control band, peak layer, AUC.

    Matched trials give a paired difference (bootstrap CI of the mean per-trial difference);
    otherwise the two conditions are compared as independent samples.
    """
    out: list[dict[str, Any]] = []
    for keys, vdf in groups(df, ["model_id", "task", "variant", "alpha", "alpha_units"]):
        think, dont = vdf[vdf["condition"] == "think"], vdf[vdf["condition"] == "dont_think"]
        for key, metric in (("grade.cos", "delta_cos"), ("grade.cos_ctrl", "delta_cos_ctrl")):
            t, d = _per_layer(think, key), _per_layer(dont, key)
            paired = _paired_diff(think, dont, key)
            layers = sorted(set(t) & set(d))
            curve = []
            for layer in layers:
                est = bootstrap_mean(paired[layer]) if paired else bootstrap_diff(t[layer], d[layer])
                n_obs = len(paired[layer]) if paired else len(t[layer]) + len(d[layer])
                out.append(row({**keys, "layer_idx": layer}, metric, est, n_obs, "think-dont_think"))
                curve.append(est[0])
            if metric == "delta_cos":
                for layer in layers:
                    out.append(row({**keys, "layer_idx": layer}, "cos:think",
                                   bootstrap_mean(t[layer]), len(t[layer]), "think"))
                    out.append(row({**keys, "layer_idx": layer}, "cos:dont_think",
                                   bootstrap_mean(d[layer]), len(d[layer]), "dont_think"))
            if layers:
                n = len(think) + len(dont)
                auc = float(np.trapezoid(curve, x=layers)) if len(layers) > 1 else curve[0]
                nan = (math.nan, math.nan)
                out.append(row({**keys, "layer_idx": None}, f"auc_{metric}", (auc, *nan), n,
                               "think-dont_think"))
                if metric == "delta_cos":
                    i = int(np.argmax(curve))
                    out.append(row({**keys, "layer_idx": None}, "peak_layer",
                                   (float(layers[i]), *nan), n, "think-dont_think"))
                    out.append(row({**keys, "layer_idx": None}, "peak_delta_cos",
                                   (curve[i], *nan), n, "think-dont_think"))
    return out


def _is_binary(s: pd.Series) -> bool:
    vals = [v for v in s if _none(v) is not None]
    return bool(vals) and all(
        isinstance(v, (bool, np.bool_, int, np.integer, float)) and v in (0, 1) for v in vals
    )


def _is_numeric(s: pd.Series) -> bool:
    vals = [v for v in s if _none(v) is not None]
    return bool(vals) and all(
        isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
        for v in vals
    )


def summarize_generic(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Any task: Wilson rate of each boolean/0-1 grade key (missing values dropped) and the
    bootstrap mean of each other numeric grade key, per keys and condition."""
    out: list[dict[str, Any]] = []
    grade_cols = [c for c in df.columns if c.startswith("grade.")]
    for keys, sub in groups(df, KEYS + ["condition"]):
        cond = keys.pop("condition")
        for c in grade_cols:
            name = f"{c.removeprefix('grade.')}:{cond}"
            if _is_binary(sub[c]):
                out += _rate_row(keys, name, flag(sub[c], None), cond)
            elif _is_numeric(sub[c]):
                x = pd.to_numeric(sub[c], errors="coerce").dropna().to_numpy(float)
                out.append(row(keys, f"mean_{name}", bootstrap_mean(x), x.size, cond))
    return out


for _name, _fn in (("A", summarize_a), ("B", summarize_b), ("C", summarize_c), ("D", summarize_d)):
    register_summary(_name, _fn, exact=True)


# ---------------------------------------------------------------- entry points


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    """The tidy metrics table of a ``load_results`` frame (empty frame -> empty table)."""
    rows: list[dict[str, Any]] = []
    if not df.empty:
        df = df.copy()
        df["alpha_units"] = df["alpha_units"].fillna("unit")
        df["variant"] = df["variant"].fillna("default")
        for (_model, task), sub in df.groupby(["model_id", "task"], sort=True):
            rows += summarizer_for(str(task))(sub.reset_index(drop=True))
    out = pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
    out["layer_idx"] = pd.array(out["layer_idx"], dtype="Int64")
    out["n"] = out["n"].astype(int)
    for c in ("alpha", "value", "lo", "hi"):
        out[c] = pd.to_numeric(out[c], errors="coerce").astype(float)
    return out


def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_summary(results_dir: Path | str) -> tuple[Path, Path]:
    """Write ``summary.csv`` and ``summary.json`` into ``results_dir``; return their paths."""
    d = Path(results_dir)
    table = summarize(load_results(d))
    csv_path, json_path = d / "summary.csv", d / "summary.json"
    _atomic_write(csv_path, table.to_csv(index=False))
    _atomic_write(json_path, table.to_json(orient="records", indent=1))
    return csv_path, json_path
