"""Metrics of the concept-injection tasks A–D, looked up by task name (``SUMMARIES``).

Why beside the tasks: each summariser knows its task's conditions and grade keys; the report
looks them up by task name and stacks their rows into one table. Task A lives in
``metrics_a`` (with the steering check in ``metrics_steer``), task D in ``metrics_d``; tasks B
and C are here. Every injected record is compared with the control record of the same match
key (identical prompt and sample streams, records contract): rates with concept-clustered
intervals, paired differences with McNemar and clustered McNemar p-values, Holm over the grid,
and the best cell chosen on half of the concepts and shown on the other half. Records written
before matching existed (no control shares a key) fall back to the controls of the same
model/task/variant pooled as the baseline, compared unpaired, and say so in ``note``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from introspect.stats.holm import add_holm, holm_interval
from introspect.tasks.injection.metrics_a import summarize_a
from introspect.tasks.injection.metrics_d import summarize_d
from introspect.tasks.injection.verdict_a import EFFECT_P, IDENTICAL, VERDICTS, power
from introspect.tasks.tidy import (
    CELL,
    baseline,
    col,
    concepts,
    diff_row,
    flag,
    groups,
    mean_diff,
    mean_row,
    num,
    pair,
    paired_row,
    rate_row,
    row,
    split_half,
)

LEGACY = "controls not matched (records predate matching): pooled, unpaired"


def _cells(vdf: pd.DataFrame, baseline_conds: tuple[str, ...]):
    """(cell keys, cell rows) for each (layer, α, units) holding more than the baselines."""
    return groups(vdf[~vdf["condition"].isin(baseline_conds)], CELL)


def _pairs_exist(vdf: pd.DataFrame, treated: str, control: str) -> bool:
    return not pair(vdf[vdf["condition"] == treated], vdf[vdf["condition"] == control]).empty


def _common_rows(keys: dict, inj: pd.DataFrame, p: pd.DataFrame) -> list[dict]:
    """Coherence and identical-answer share of a matched cell."""
    lab = p["concept"].to_numpy()
    out = rate_row(keys, "coherent:injected", flag(col(inj, "grade.coherent"), None), "injected",
                   concepts(inj))
    out += rate_row(keys, "coherent:control", flag(col(p, "grade.coherent~c"), None),
                    "control (matched)", lab)
    same = np.array([float(a == b) for a, b in zip(col(p, "response"), col(p, "response~c"))])
    out += rate_row(keys, "answers_identical", same, "injected=control", lab,
                    note="share of injected answers word-for-word equal to their matched control")
    return out


def _same(p: pd.DataFrame) -> list[float]:
    """Per pair: 1 when the injected answer equals its control word for word (pairs with no
    recorded text on either side are left out)."""
    return [float(a == b) for a, b in zip(col(p, "response"), col(p, "response~c")) if a or b]


def verdict(model: str, task: str, rows: list[dict], identical: list[float],
            headline: set[str]) -> list[dict]:
    """Tasks B/C: "detected" when a headline difference survives Holm with its Holm-level
    interval above 0; "no measurable effect" when ≥ ``IDENTICAL`` of injected answers equal their
    controls; otherwise "inconclusive", with the power line. (Whether the vector steers at all is
    task A's steering check.)"""
    if not identical:
        return []
    mine = [r for r in rows if r["model_id"] == model and r["task"] == task and r["metric"] in headline]
    hits = [f"{r['metric']} {r['variant']} L{int(r['layer_idx'])} α{r['alpha']:g}" for r in mine
            if r["p_holm"] < EFFECT_P and holm_interval(r, EFFECT_P)[0] > 0]
    same = float(np.mean(identical))
    first = sorted(headline)[0]
    mde, line, tests = power(rows, model, task, next((m for m in sorted(headline) if any(
        r["metric"] == m for r in mine)), first))
    evidence = (f"{same:.0%} of injected answers equal their matched control; Holm over {tests} "
                f"tests ({', '.join(sorted(headline))} over every variant and cell)")
    if hits:
        v, note = 1.0, f"detected: {', '.join(hits)} above 0 after Holm; {evidence}"
    elif same >= IDENTICAL:
        v, note = -1.0, (f"no measurable effect: {evidence}. A null here says nothing about "
                         "introspection (see task A's steering check)")
    else:
        v, note = 0.0, f"inconclusive: {evidence}; {line}"
    keys = {"model_id": model, "task": task, "variant": "all"}
    return [row(keys, "verdict", (v, math.nan, math.nan), len(identical), VERDICTS[v], note=note),
            row(keys, f"power:{first}", (mde, math.nan, math.nan), len(identical), "", note=line)]


# ---------------------------------------------------------------- Task B

B_NAMES = {"grade.success": "strict_success", "grade.thought_correct": "thought_correct",
           "grade.repeat_correct": "repeat_correct", "grade.mc_correct": "mc_accuracy"}
B_HEADLINE = {"delta_strict_success", "delta_mc_accuracy"}


def _b_rows(keys: dict, p: pd.DataFrame, suffix: str = "", note: str = "") -> list[dict]:
    out: list[dict] = []
    lab = p["concept"].to_numpy()
    for column, name in B_NAMES.items():
        a, b = flag(col(p, column), None), flag(col(p, f"{column}~c"), None)
        out += rate_row(keys, f"{name}:injected{suffix}", a, "injected", lab, note=note)
        out += rate_row(keys, f"{name}:control{suffix}", b, "control (matched)", lab, note=note)
        out += paired_row(keys, f"delta_{name}{suffix}", a, b, "injected-control", lab, note=note)
    return out


def _b_score(p: pd.DataFrame) -> float:
    """Split-half score: the first B rate present, injected minus control."""
    for column in ("grade.success", "grade.thought_correct", "grade.mc_correct"):
        a = flag(col(p, column), None)
        if not np.isnan(a).all():
            return mean_diff(a, flag(col(p, f"{column}~c"), None))
    return float("nan")


def summarize_b(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Task B: strict success, thought-correct, repeat-correct, MC accuracy, injected vs matched
    control, with paired differences (McNemar) per cell; split-half best cell."""
    out: list[dict[str, Any]] = []
    identical: dict[str, list[float]] = {}
    for vkeys, vdf in groups(df, ["model_id", "task", "variant"]):
        matched = _pairs_exist(vdf, "injected", "control")
        ctl = vdf[vdf["condition"] == "control"]
        cells = []
        for ckeys, cdf in _cells(vdf, ("control",)):
            keys = {**vkeys, **ckeys}
            inj = cdf[cdf["condition"] == "injected"]
            if matched:
                p = pair(inj, ctl)
                if p.empty:
                    continue
                out += _b_rows(keys, p) + _common_rows(keys, inj, p)
                cells.append((keys, p))
                identical.setdefault(keys["model_id"], []).extend(_same(p))
                continue
            base = baseline(vdf, cdf, "control")
            for column, name in B_NAMES.items():
                a, b = flag(col(inj, column), None), flag(col(base, column), None)
                out += rate_row(keys, f"{name}:injected", a, "injected", concepts(inj))
                out += rate_row(keys, f"{name}:control", b, "control", concepts(base), note=LEGACY)
                out += diff_row(keys, f"delta_{name}", a, b, "injected-control", concepts(inj),
                                concepts(base), note=LEGACY)
        out += split_half(cells, _b_score, lambda k, h, note: _b_rows(k, h, "@held_out", note))
    add_holm(out, B_HEADLINE)
    for model, same in sorted(identical.items()):
        out += verdict(model, "B", out, same, B_HEADLINE)
    return out


# ---------------------------------------------------------------- Task C


def _intent(df: pd.DataFrame, suffix: str = "") -> tuple[np.ndarray, np.ndarray]:
    """(said it was intentional: None counts as not, unknown: None) as 0/1 arrays."""
    raw = flag(col(df, f"grade.intentional{suffix}"), None)
    return np.nan_to_num(raw, nan=0.0), np.isnan(raw).astype(float)


def _c_rows(keys: dict, pi: pd.DataFrame, pm: pd.DataFrame, suffix: str = "",
            note: str = "") -> list[dict]:
    """Intentional/unknown rates and paired deltas from (injected, control) and (mismatch,
    control) pairs."""
    out: list[dict] = []
    done_control = False
    for cond, p in (("injected", pi), ("mismatch", pm)):
        if p.empty:
            continue
        lab = p["concept"].to_numpy()
        (yes, unk), (yes_c, unk_c) = _intent(p), _intent(p, "~c")
        if not done_control:
            out += rate_row(keys, f"intentional:control{suffix}", yes_c, "control (matched)", lab,
                            note=note)
            out += rate_row(keys, f"unknown:control{suffix}", unk_c, "control (matched)", lab,
                            note=note)
            done_control = True
        out += rate_row(keys, f"intentional:{cond}{suffix}", yes, cond, lab, note=note)
        out += rate_row(keys, f"unknown:{cond}{suffix}", unk, cond, lab, note=note)
        out += paired_row(keys, f"delta_intentional:{cond}{suffix}", yes, yes_c,
                          f"{cond}-control", lab, note=note)
        if cond == "injected":
            out += mean_row(keys, f"p_yes_mean:injected{suffix}", num(col(p, "p_yes")), cond, lab)
            out += mean_row(keys, f"p_yes_mean:control{suffix}", num(col(p, "p_yes~c")),
                            "control (matched)", lab)
    return out


def _c_score(p: pd.DataFrame) -> float:
    return mean_diff(_intent(p)[0], _intent(p, "~c")[0])


def summarize_c(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Task C: % intentional (None = not intentional) and unknown, per condition against the
    matched control; paired Δ-intentional for the matching and the mismatched concept (McNemar),
    and matching minus mismatched; split-half best cell."""
    out: list[dict[str, Any]] = []
    identical: dict[str, list[float]] = {}
    for vkeys, vdf in groups(df, ["model_id", "task", "variant"]):
        matched = _pairs_exist(vdf, "injected", "control")
        ctl = vdf[vdf["condition"] == "control"]
        cells = []
        for ckeys, cdf in _cells(vdf, ("control",)):
            keys = {**vkeys, **ckeys}
            inj, mis = cdf[cdf["condition"] == "injected"], cdf[cdf["condition"] == "mismatch"]
            if matched:
                pi, pm = pair(inj, ctl), pair(mis, ctl)
                out += _c_rows(keys, pi, pm)
                if not pi.empty:
                    out += _common_rows(keys, inj, pi)
                    cells.append((keys, pi))
                    identical.setdefault(keys["model_id"], []).extend(_same(pi))
                pim = pair(inj, mis)
                if not pim.empty:
                    out += paired_row(keys, "delta_intentional:injected-mismatch", _intent(pim)[0],
                                      _intent(pim, "~c")[0], "injected-mismatch",
                                      pim["concept"].to_numpy())
                continue
            yes: dict[str, np.ndarray] = {}
            labs: dict[str, np.ndarray] = {}
            for cond in ("control", "injected", "mismatch"):
                sub = baseline(vdf, cdf, cond) if cond == "control" else cdf[cdf["condition"] == cond]
                if sub.empty:
                    continue
                yes[cond], unk = _intent(sub)
                note = LEGACY if cond == "control" else ""
                labs[cond] = concepts(sub)
                out += rate_row(keys, f"intentional:{cond}", yes[cond], cond, labs[cond], note=note)
                out += rate_row(keys, f"unknown:{cond}", unk, cond, labs[cond], note=note)
            for cond in ("injected", "mismatch"):
                if cond in yes and "control" in yes:
                    out += diff_row(keys, f"delta_intentional:{cond}", yes[cond], yes["control"],
                                    f"{cond}-control", labs[cond], labs["control"], note=LEGACY)
        out += split_half(cells, _c_score, lambda k, h, note: _c_rows(
            k, h, pd.DataFrame(), "@held_out", note))
    add_holm(out, C_HEADLINE)
    for model, same in sorted(identical.items()):
        out += verdict(model, "C", out, same, C_HEADLINE)
    return out


C_HEADLINE = {"delta_intentional:injected-mismatch", "delta_intentional:injected"}


SUMMARIES = {"A": summarize_a, "B": summarize_b, "C": summarize_c, "D": summarize_d}
