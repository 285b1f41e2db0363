"""Task D's metrics: per-layer Δ cosine of paired instructions, raw and mean-centred, with a band.

Why on its own: task D reads every layer and no (layer, α) grid, so its rows are per layer.
Two contrasts, each paired trial by trial (same word, sentence and teacher-forced tokens):
think − don't-think (variant ``plain``) and Lindsey's incentive pair rewarded − punished
(variant ``incentive``). Each is measured on raw cosines (``cos``) and on cosines after removing
the mean residual of the baseline prompts (``cos_centred``), and the same difference is taken
against unrelated concept vectors (``cos_ctrl``): that difference's interval is the control band,
and ``delta_cos_specific`` = Δcos − Δcos_ctrl (per trial) is what is specific to the concept.
Intervals: Student t over concepts (``introspect.stats.clustered``); unpaired records fall back to an
independent bootstrap. The control *band* is the spread of single unrelated concepts (a t
prediction interval from each unrelated word's own Δcos, ``cos_ctrl_words``), which is what one
concept's Δcos should be compared with, and ``above_band`` counts the concepts above it. The peak
is not an argmax reported on the data that chose it: its layer is chosen on a seeded half of the
concepts and its Δcos reported on the other half; the layer's interval is a bootstrap over
concepts of the argmax (descriptive).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as _st

from introspect.stats import clustered as C
from introspect.stats.intervals import bootstrap_diff
from introspect.tasks.tidy import (
    SPLIT_SEED,
    col,
    concepts,
    est_row,
    groups,
    mean_row,
    none_if_missing,
    pair,
    rate_row,
    row,
)

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
    """Area under a per-layer curve (a summary of the whole curve; no interval is claimed)."""
    if not layers:
        return []
    auc = float(np.trapezoid(curve, x=layers)) if len(layers) > 1 else curve[0]
    return [row({**keys, "layer_idx": None}, f"auc_{metric}", (auc, math.nan, math.nan), n, cond,
                note="area under the per-layer mean curve; no interval")]


def _concept_layer(acc: dict[int, tuple[list, list]]) -> tuple[list[int], list[str], np.ndarray]:
    """(layers, concepts, per-concept × per-layer mean) of ``_paired`` output."""
    layers = sorted(acc)
    names = {repr(w): w for _, (_, labs) in acc.items() for w in labs}  # cluster_means keys are repr()
    order = sorted(names)
    m = np.full((len(order), len(layers)), np.nan)
    for j, layer in enumerate(layers):
        keys, means, _ = C.cluster_means(acc[layer][0], acc[layer][1])
        m[np.searchsorted(order, keys), j] = means
    return layers, [names[k] for k in order], m


def _peak_rows(keys: dict, metric: str, acc: dict[int, tuple[list, list]], cond: str,
               seed: int = SPLIT_SEED) -> list[dict]:
    """The peak layer chosen on a seeded half of the concepts, its Δcos on the other half."""
    layers, words, m = _concept_layer(acc)
    if not words or len(layers) < 2:
        return []
    rng = np.random.default_rng(seed)
    suffix = metric.removeprefix("delta_cos")
    out: list[dict] = []
    if len(words) >= 2:
        perm = rng.permutation(len(words))
        sel, held = perm[: len(words) // 2], perm[len(words) // 2:]
        j = int(np.nanargmax(np.nanmean(m[sel], axis=0)))
        note = (f"layer chosen on concepts {sorted(words[i] for i in sel)} (seed {seed}); Δcos on "
                f"the held-out {sorted(words[i] for i in held)}")
        out += est_row({**keys, "layer_idx": layers[j]}, f"peak_{metric}@held_out",
                       C.concept_mean(m[held, j], len(held), test=True), cond, note)
    boots = [layers[int(np.nanargmax(np.nanmean(m[rng.integers(0, len(words), len(words))], axis=0)))]
             for _ in range(2000)]
    lo, hi = (float(x) for x in np.quantile(boots, [0.025, 0.975]))
    full = int(np.nanargmax(np.nanmean(m, axis=0)))
    out.append(row({**keys, "layer_idx": None}, f"peak_layer{suffix}", (float(layers[full]), lo, hi),
                   len(words), cond, ci="bootstrap(concept) of the argmax", n_clusters=len(words),
                   note="the layer of the largest mean Δcos over all concepts; its interval is "
                        "descriptive (a bootstrap of an argmax has no coverage guarantee)"))
    return out


def _band_rows(keys: dict, p: pd.DataFrame, measure: str, delta: str, cond: str, tag: str,
               acc: dict[int, tuple[list, list]]) -> list[dict]:
    """Per layer, the prediction interval of one unrelated concept's Δcos (t over the unrelated
    words' own mean differences), and the share of this run's concepts whose Δcos lies above it."""
    key = f"grade.cos_ctrl_words{measure}"
    if key not in p.columns:
        return []
    per_word: dict[int, list[np.ndarray]] = {}
    for i in range(len(p)):
        r = p.iloc[i]
        la, a, b = r.get("grade.layers"), r.get(key), r.get(f"{key}~c")
        if not (isinstance(la, list) and isinstance(a, list) and isinstance(b, list)):
            continue
        d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)  # words × layers
        for j, layer in enumerate(la):
            per_word.setdefault(int(layer), []).append(d[:, j])
    out: list[dict] = []
    for layer, ds in sorted(per_word.items()):
        w = np.nanmean(np.stack(ds), axis=0)  # each unrelated word's mean Δcos
        w = w[np.isfinite(w)]
        if w.size < 3:
            continue
        half = float(_st.t.ppf(0.975, w.size - 1) * w.std(ddof=1) * math.sqrt(1 + 1 / w.size))
        lo, hi = float(w.mean() - half), float(w.mean() + half)
        lk = {**keys, "layer_idx": layer}
        out.append(row(lk, f"band_{delta}{tag}", (float(w.mean()), lo, hi), w.size, cond,
                       ci=f"prediction(t, {w.size} unrelated concepts)", n_clusters=w.size,
                       note="where one unrelated concept's Δcos falls 95% of the time"))
        if layer in acc:
            keys_c, means, _ = C.cluster_means(acc[layer][0], acc[layer][1])
            out += rate_row(lk, f"above_band_{delta}{tag}", (means > hi).astype(float), cond,
                            note="share of this run's concepts whose Δcos lies above the band "
                                 "(concepts as independent units)")
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
            acc = _paired(p, key, minus)
            for layer, (vals, labs) in sorted(acc.items()):
                r = mean_row({**keys, "layer_idx": layer}, name, np.array(vals), cond, labs,
                             note="paired per trial")
                out += r
                curve.append(r[0]["value"])
                layers.append(layer)
            if metric in ("delta_cos", "delta_cos_centred"):
                out += _peak_rows(keys, name, acc, cond)
                out += _band_rows(keys, p, metric.removeprefix("delta_cos"), metric, cond, tag, acc)
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
