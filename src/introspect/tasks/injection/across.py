"""Task A across several trainings of one recipe: the training, not the concept, is the unit.

Why: ``vs_base`` and the verdict speak for one adapter. Whether a recipe gives adapters that
detect is a question about trainings (other seeds, other held-out words, other weights), and the
positive control's recipes work on some and not on others. Per recipe, framing and cell, these
rows say how many trainings clear the bar and the exact interval of the chance that one does
(``stats.replication``: why no interval on the trainings' mean).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from introspect.stats import replication as RP
from introspect.tasks.injection.verdict_a import A_VERDICTS
from introspect.tasks.tidy import CELL

TOP = max(A_VERDICTS)  # "detected and identified"


def cleared(r: dict[str, Any]) -> bool:
    """A training's row clears the bar as a verdict's gate would: its interval above 0 and its
    sign-flip p below 0.05."""
    return bool(r["lo"] > 0 and r["p"] < 0.05)


def _scale(adapted: str) -> str:
    """The ``--adapter-scale`` suffix of an adapted model id ("x0.5"; "" at full scale): each scale
    pools with its own."""
    _, x, scale = adapted.rsplit("+", 1)[-1].partition("x")
    return x + scale


def _row(where: dict[str, Any], metric: str, rep: RP.Replication, note: str) -> dict[str, Any]:
    return {**where, "task": "A", "metric": metric, "value": rep.rate, "lo": rep.lo, "hi": rep.hi,
            "n_clusters": rep.k, "trainings_cleared": rep.m, "mean_of_trainings": rep.mean,
            "seeds": " ".join(map(str, rep.seeds)), "ci": "clopper-pearson(training)", "note": note}


def _pool(groups: dict[tuple, list[tuple[float, bool, int]]], label: Any, make: Any
          ) -> tuple[list[dict[str, Any]], list[str]]:
    out: list[dict[str, Any]] = []
    skipped: list[str] = []
    for key, group in groups.items():
        if len(group) < 2:
            continue
        try:
            rep = RP.replication(*map(list, zip(*group)))
        except ValueError as e:
            skipped.append(f"{label(key)}: not pooled: {e}")
            continue
        out.append(make(key, rep))
    return out, skipped


def across_trainings(rows: list[dict[str, Any]], trainings: dict[str, tuple[str, int]]
                     ) -> tuple[list[dict[str, Any]], list[str]]:
    """Rows of ``vs_base`` from several trainings, pooled per recipe, framing, cell and metric
    that two or more trainings ran: how many clear the bar (``cleared``), the exact interval of
    the chance that a training does, and the mean of their estimates (no interval).
    ``trainings`` maps each adapted model id to (recipe, seed) (``train.provenance.recipe``).
    Returns the rows and one line per group that could not be pooled (why)."""
    groups: dict[tuple, list[tuple[float, bool, int]]] = {}
    for r in rows:
        adapted, base = str(r["model_id"]).split(" − ", 1)
        if adapted in trainings:
            name, seed = trainings[adapted]
            key = (name + _scale(adapted), base, r["variant"],
                   *(r[c] for c in CELL), r["metric"])
            groups.setdefault(key, []).append((float(r["value"]), cleared(r), seed))

    def label(key: tuple) -> str:
        name, base, variant, layer, alpha, units, metric = key
        return f"{name} vs {base}, task A {variant} L{int(layer)} α{alpha:g} {units}, {metric}"

    def make(key: tuple, rep: RP.Replication) -> dict[str, Any]:
        name, base, variant, layer, alpha, units, metric = key
        return _row({"model_id": f"{name} − {base} ({rep.k} trainings)", "variant": variant, "layer_idx": layer,
                     "alpha": alpha, "alpha_units": units}, f"{metric}_replication", rep,
                    f"share of independent trainings (one per seed) whose {metric} interval is above 0 with "
                    f"sign-flip p < 0.05, exact interval; {RP.MEAN_NOTE}")

    return _pool(groups, label, make)


def verdicts_across(summary: pd.DataFrame, trainings: dict[str, tuple[str, int]]
                    ) -> tuple[list[dict[str, Any]], list[str]]:
    """Task A's verdict of several trainings of one recipe: how many read "detected and
    identified", with the exact interval; the note lists every training's label by seed.
    (A verdict covers all the framings a model ran: compare trainings run alike.)"""
    if summary.empty or "metric" not in summary:
        return [], []
    v = summary[(summary["metric"] == "verdict") & (summary["task"] == "A")]
    groups: dict[tuple, list[tuple[float, bool, int]]] = {}
    labels: dict[tuple, list[str]] = {}
    for _, r in v.iterrows():
        if r["model_id"] in trainings:
            name, seed = trainings[r["model_id"]]
            key = (name + _scale(r["model_id"]),)
            groups.setdefault(key, []).append((float(r["value"]), float(r["value"]) >= TOP, seed))
            labels.setdefault(key, []).append(f"seed {seed}: {A_VERDICTS.get(float(r['value']), r['value'])}")

    def make(key: tuple, rep: RP.Replication) -> dict[str, Any]:
        r = _row({"model_id": f"{key[0]} ({rep.k} trainings)", "variant": "all"}, "verdict_replication", rep,
                 f"share of independent trainings (one per seed) whose task-A verdict is "
                 f"\"{A_VERDICTS[TOP]}\", exact interval; {'; '.join(sorted(labels[key]))}")
        return {**r, "mean_of_trainings": float("nan"), "labels": "; ".join(sorted(labels[key]))}  # labels have no mean

    return _pool(groups, lambda key: f"{key[0]}, task A verdict", make)
