"""The report's metrics table: every task's summariser, looked up by name, stacked into one tidy table.

``summarize(df)`` returns one row per (model_id, task, layer_idx, alpha, alpha_units, variant,
metric) with ``value``, ``lo``, ``hi``, ``n`` and informational columns: ``condition``,
``n_clusters`` (concepts behind the row), ``ci`` (the interval's method: ``wilson``,
``cluster-bootstrap(concept)``, ``bootstrap``, ...), ``p`` / ``p_cluster`` / ``p_holm`` (McNemar,
clustered McNemar and Holm-adjusted p of paired differences) and ``note``. Metric names are
unique within those keys; per-condition metrics are named ``<metric>:<condition>``.

Why only assembly here: each task family's metrics live beside its tasks
(``tasks.injection.metrics``, ``tasks.selfknowledge.metrics``); this module registers them,
looks a task's summariser up by exact name, then by the longest registered prefix, else uses the
generic one (mean of every boolean / 0-1 grade key and of every other numeric grade key), and
writes the table. Other code adds summarisers with ``register_summary(prefix, fn)``;
``fn(df_one_model_task)`` returns a list of row dicts (``tasks.tidy.row`` builds one).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from introspect.records.atomic import atomic_write_text
from introspect.report import inspect_mc as INSPECT_SK
from introspect.report.load import load_results
from introspect.stats.intervals import bootstrap_mean
from introspect.tasks.injection.metrics import SUMMARIES as INJECTION_SUMMARIES
from introspect.tasks.refusal.metrics import SUMMARIES as REFUSAL_SUMMARIES
from introspect.tasks.selfknowledge.metrics import SUMMARIES as SK_SUMMARIES
from introspect.tasks.tidy import (
    KEYS,
    SUMMARY_COLUMNS,
    flag,
    groups,
    none_if_missing,
    rate_row,
    row,
)

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


def _is_binary(s: pd.Series) -> bool:
    vals = [v for v in s if none_if_missing(v) is not None]
    return bool(vals) and all(
        isinstance(v, (bool, np.bool_, int, np.integer, float)) and v in (0, 1) for v in vals
    )


def _is_numeric(s: pd.Series) -> bool:
    vals = [v for v in s if none_if_missing(v) is not None]
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
                out += rate_row(keys, name, flag(sub[c], None), cond)
            elif _is_numeric(sub[c]):
                x = pd.to_numeric(sub[c], errors="coerce").dropna().to_numpy(float)
                out.append(row(keys, f"mean_{name}", bootstrap_mean(x), x.size, cond, ci="bootstrap"))
    return out


_SK_P = re.compile(r"(?:^|_)p(?:\[[^\]]*\])?$")  # fisher_p, lr_p[...], p[term], ..._mcnemar_p


def _sk_rows(fn: Callable[[pd.DataFrame], pd.DataFrame]) -> Summarizer:
    """A self-knowledge summary (a frame of ``SK_COLUMNS``) as rows of the tidy table; a
    p-value metric also fills the ``p`` column, and rows without an interval say so in ``ci``."""
    def rows(df: pd.DataFrame) -> list[dict[str, Any]]:
        out = []
        for r in fn(df).to_dict("records"):
            keys = {k: r.get(k) for k in ("model_id", "task", "variant")}
            is_p = bool(_SK_P.search(str(r["metric"])))
            ci = "" if pd.isna(r["lo"]) else "95%"
            out.append(row(keys, r["metric"], (r["value"], r["lo"], r["hi"]), r["n"], r.get("condition") or "",
                           ci=ci, p=float(r["value"]) if is_p else math.nan,
                           n_clusters=r.get("n_items")))  # the items behind a row of draws
        return out

    return rows


for _name, _fn in INJECTION_SUMMARIES.items():
    register_summary(_name, _fn, exact=True)
for _name, _fn in REFUSAL_SUMMARIES.items():
    register_summary(_name, _fn, exact=True)
for _name, _sk in SK_SUMMARIES.items():
    register_summary(_name, _sk_rows(_sk), exact=True)
# the Inspect self-knowledge tasks' records (``integrations.inspect``; the summaries import
# neither inspect_ai nor torch): the Delegate Game's baseline phase is read as the ability items
# are, with the rotation rows; ``ability`` records that say how their decision was read (the
# Inspect task's) get those too, the toolkit's keep ``summarize_ability``
register_summary("delegate-baseline", _sk_rows(INSPECT_SK.summarize_mc), exact=True)
register_summary("ability", _sk_rows(INSPECT_SK.summarize_ability_any), exact=True)


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
    out["n_clusters"] = pd.array(pd.to_numeric(out["n_clusters"], errors="coerce"), dtype="Int64")
    for c in ("alpha", "value", "lo", "hi", "p", "p_min", "p_holm"):
        out[c] = pd.to_numeric(out[c], errors="coerce").astype(float)
    for c in ("ci", "note", "condition"):
        out[c] = out[c].fillna("").astype(str)
    return out


def write_summary(results_dir: Path | str, table: pd.DataFrame | None = None) -> tuple[Path, Path]:
    """Write ``summary.csv`` and ``summary.json`` into ``results_dir``; return their paths.
    ``table``: the summary of that folder if the caller already has it (it takes seconds)."""
    d = Path(results_dir)
    table = summarize(load_results(d)) if table is None else table
    csv_path, json_path = d / "summary.csv", d / "summary.json"
    atomic_write_text(csv_path, table.to_csv(index=False))
    atomic_write_text(json_path, table.to_json(orient="records", indent=1))
    return csv_path, json_path
