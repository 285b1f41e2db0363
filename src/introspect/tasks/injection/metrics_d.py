"""Task D's metrics: per-layer Δ cosine of paired instructions, raw and mean-centred, with a band.

Why on its own: task D reads every layer and no (layer, α) grid, so its rows are per layer.
Two contrasts, each paired trial by trial (same word, sentence and teacher-forced tokens):
think − don't-think (variant ``plain``) and Lindsey's incentive pair rewarded − punished
(variant ``incentive``). Each is measured on raw cosines (``cos``) and on cosines after removing
the mean residual of the baseline prompts (``cos_centred``), and the same difference is taken
against unrelated concept vectors (``cos_ctrl``): that difference's interval is the control band,
and ``delta_cos_specific`` = Δcos − Δcos_ctrl (per trial) is what is specific to the concept.
Intervals: cluster bootstrap over concepts; unpaired records fall back to an independent
bootstrap.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from introspect.stats import bootstrap_diff
from introspect.tasks.tidy import col, concepts, groups, mean_row, none_if_missing, pair, row

CONTRASTS = (("think", "dont_think"), ("rewarded", "punished"))
MEASURES = (("grade.cos", "delta_cos"), ("grade.cos_centred", "delta_cos_centred"),
            ("grade.cos_ctrl", "delta_cos_ctrl"), ("grade.cos_ctrl_centred", "delta_cos_ctrl_centred"))


def _layer_values(layers: Any, vals: Any) -> dict[int, float]:
    if not isinstance(layers, list) or not isinstance(vals, list):
        return {}
    return {int(lay): float(v) for lay, v in zip(layers, vals) if none_if_missing(v) is not None}


def _per_layer(sub: pd.DataFrame, key: str) -> dict[int, list[float]]:
    """{layer: values} of a per-layer grade list over the rows."""
    acc: dict[int, list[float]] = {}
    for layers, vals in zip(col(sub, "grade.layers"), col(sub, key)):
        for layer, v in _layer_values(layers, vals).items():
            acc.setdefault(layer, []).append(v)
    return acc


def _paired(p: pd.DataFrame, key: str, minus: str | None = None) -> dict[int, tuple[list, list]]:
    """{layer: (per-pair differences, their concepts)}; ``minus`` subtracts a second measure's
    difference (Δcos − Δcos_ctrl)."""
    acc: dict[int, tuple[list, list]] = {}
    for i in range(len(p)):
        r = p.iloc[i]
        a = _layer_values(r.get("grade.layers"), r.get(key))
        b = _layer_values(r.get("grade.layers~c"), r.get(f"{key}~c"))
        if minus:
            a2 = _layer_values(r.get("grade.layers"), r.get(minus))
            b2 = _layer_values(r.get("grade.layers~c"), r.get(f"{minus}~c"))
        for layer in sorted(set(a) & set(b)):
            d = a[layer] - b[layer]
            if minus:
                if layer not in a2 or layer not in b2:
                    continue
                d -= a2[layer] - b2[layer]
            vals, labs = acc.setdefault(layer, ([], []))
            vals.append(d)
            labs.append(r["concept"])
    return acc


def _curve_rows(keys: dict, metric: str, curve: list[float], layers: list[int], n: int,
                cond: str) -> list[dict]:
    nan = (math.nan, math.nan)
    if not layers:
        return []
    auc = float(np.trapezoid(curve, x=layers)) if len(layers) > 1 else curve[0]
    out = [row({**keys, "layer_idx": None}, f"auc_{metric}", (auc, *nan), n, cond)]
    if metric in ("delta_cos", "delta_cos_centred"):
        i = int(np.argmax(curve))
        suffix = metric.removeprefix("delta_cos")
        out.append(row({**keys, "layer_idx": None}, f"peak_layer{suffix}", (float(layers[i]), *nan),
                       n, cond))
        out.append(row({**keys, "layer_idx": None}, f"peak_{metric}", (curve[i], *nan), n, cond))
    return out


def _contrast(keys: dict, a: pd.DataFrame, b: pd.DataFrame, cond: str, tag: str) -> list[dict]:
    out: list[dict] = []
    p = pair(a, b)
    n = len(a) + len(b)
    measures = list(MEASURES) + [("grade.cos", "delta_cos_specific")] + (
        [("grade.cos_centred", "delta_cos_specific_centred")] if "grade.cos_ctrl_centred" in a
        else [])
    for key, metric in measures:
        if key not in a.columns:
            continue
        name = metric + tag
        curve, layers = [], []
        if not p.empty:
            minus = None
            if metric.startswith("delta_cos_specific"):
                minus = "grade.cos_ctrl_centred" if metric.endswith("centred") else "grade.cos_ctrl"
                if minus not in a.columns:
                    continue
            for layer, (vals, labs) in sorted(_paired(p, key, minus).items()):
                r = mean_row({**keys, "layer_idx": layer}, name, np.array(vals), cond, labs,
                             note="paired per trial")
                out += r
                curve.append(r[0]["value"])
                layers.append(layer)
        elif not metric.startswith("delta_cos_specific"):
            ta, tb = _per_layer(a, key), _per_layer(b, key)
            for layer in sorted(set(ta) & set(tb)):
                est = bootstrap_diff(ta[layer], tb[layer])
                out.append(row({**keys, "layer_idx": layer}, name, est,
                               len(ta[layer]) + len(tb[layer]), cond, ci="bootstrap",
                               note="trials not paired: independent samples"))
                curve.append(est[0])
                layers.append(layer)
        out += _curve_rows(keys, name, curve, layers, n, cond)
    for c, sub in ((cond.split("-")[0], a), (cond.split("-")[1], b)):
        for layer, vals in sorted(_per_layer(sub, "grade.cos").items()):
            labs = [w for w, ls in zip(concepts(sub), col(sub, "grade.layers"))
                    if isinstance(ls, list) and layer in ls]
            out += mean_row({**keys, "layer_idx": layer}, f"cos:{c}", np.array(vals), c,
                            labs if len(labs) == len(vals) else None)
    return out


def summarize_d(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Task D: per-layer Δcos of think − don't-think and rewarded − punished (raw, centred,
    unrelated-concept band, concept-specific), cos per condition, peak layer and AUC."""
    out: list[dict[str, Any]] = []
    for keys, vdf in groups(df, ["model_id", "task", "variant", "alpha", "alpha_units"]):
        present = [(x, y) for x, y in CONTRASTS
                   if (vdf["condition"] == x).any() and (vdf["condition"] == y).any()]
        for k, (x, y) in enumerate(present):
            tag = f":{x}-{y}" if k else ""
            out += _contrast(keys, vdf[vdf["condition"] == x], vdf[vdf["condition"] == y],
                             f"{x}-{y}", tag)
    return out
