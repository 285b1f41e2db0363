"""Metrics of the concept-injection tasks A–D: detection rates, thought-vs-text, intent, Δcos.

Why beside the tasks: each summariser knows its task's conditions and grade keys; the report
looks them up by task name (``SUMMARIES``) and stacks their rows into one table. Control trials
carry no injection, so when no control trial shares an injected trial's (layer, alpha) cell,
the controls of the same model/task/variant are pooled as its baseline.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from introspect.stats import bootstrap_diff, bootstrap_mean
from introspect.tasks.tidy import (
    CELL,
    baseline,
    col,
    diff_row,
    flag,
    groups,
    none_if_missing,
    rate_row,
    row,
)


def _injected_cells(df: pd.DataFrame, baseline_conds: tuple[str, ...]) -> pd.DataFrame:
    """The rows whose (layer, alpha) cell holds something besides the baseline conditions."""
    active = df[~df["condition"].isin(baseline_conds)]
    if active.empty:
        return df
    return df.merge(active[CELL].drop_duplicates(), on=CELL, how="inner")


def _by_cell(df: pd.DataFrame, baseline_conds: tuple[str, ...]):
    """Yield (keys, cell rows, whole model/task/variant frame) for each injected cell."""
    for vkeys, vdf in groups(df, ["model_id", "task", "variant"]):
        for ckeys, cdf in groups(_injected_cells(vdf, baseline_conds), CELL):
            yield {**vkeys, **ckeys}, cdf, vdf


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
        out += rate_row(keys, "tpr", det_i, "injected")
        out += rate_row(keys, "fpr", det_c, "control")
        out += diff_row(keys, "net", det_i, det_c, "injected-control")
        out += rate_row(keys, "identification", flag(col(inj, "grade.matched")), "injected")
        hit = det_i == 1
        out += rate_row(keys, "identification_given_detected",
                         flag(col(inj, "grade.matched"))[hit], "injected")
        for cond in ("random", "negative"):
            sub = cdf[cdf["condition"] == cond]
            out += rate_row(keys, f"{cond}_detection", flag(col(sub, "grade.detected")), cond)
        b_inj = flag(col(cdf[cdf["condition"] == "bias"], "grade.said_yes"))
        b_cln = flag(col(baseline(vdf, cdf, "bias_clean"), "grade.said_yes"))
        out += rate_row(keys, "bias_yes:injected", b_inj, "bias")
        out += rate_row(keys, "bias_yes:clean", b_cln, "bias")
        out += diff_row(keys, "bias_yes_diff", b_inj, b_cln, "bias")
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
                out += rate_row(keys, f"{name}:{cond}", flag(col(sub, column), None), cond)
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
            out += rate_row(keys, f"intentional:{cond}", yes[cond], cond)
            out += rate_row(keys, f"unknown:{cond}", np.isnan(raw).astype(float), cond)
        for cond in ("injected", "mismatch"):
            if cond in yes and "control" in yes:
                out += diff_row(keys, f"delta_intentional:{cond}", yes[cond], yes["control"],
                                 f"{cond}-control")
    return out


def _per_layer(sub: pd.DataFrame, key: str) -> dict[int, list[float]]:
    acc: dict[int, list[float]] = {}
    if key not in sub.columns or "grade.layers" not in sub.columns:
        return acc
    for layers, vals in zip(sub["grade.layers"], sub[key]):
        if isinstance(layers, list) and isinstance(vals, list):
            for layer, v in zip(layers, vals):
                if none_if_missing(v) is not None:
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


SUMMARIES = {"A": summarize_a, "B": summarize_b, "C": summarize_c, "D": summarize_d}
