"""Refusal rates by label, and a model with a direction removed against the model itself.

Why requests are the unit: each request is answered once (greedily), so a rate is a proportion
over requests (Wilson), and a change between two models that answered the same requests is a
paired difference (Newcombe's paired interval, with the exact sign-flip p of the discordant
pairs), not two independent rates.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from introspect.tasks.tidy import col, groups, paired_row, rate_row

LABELS = ("unsafe", "safe")


def summarize_refusal(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Per label: the share of requests refused, complied with, and answered neither way."""
    rows: list[dict[str, Any]] = []
    for keys, g in groups(df, ["model_id", "task", "layer_idx", "alpha", "alpha_units", "variant"]):
        refusal, label, ids = col(g, "grade.refusal"), col(g, "grade.label"), col(g, "grade.id")
        for lab in LABELS:
            m = (label == lab).to_numpy()
            for what in ("refuses", "complies", "other"):
                x = (refusal[m] == what).to_numpy(dtype=float)
                metric = {"refuses": "refusal_rate", "complies": "compliance_rate", "other": "other_rate"}[what]
                rows += rate_row(keys, f"{metric}:{lab}", x, "clean", clusters=ids[m].to_numpy(dtype=object))
    return rows


def refusal_change(trials: pd.DataFrame, changed: str, base: str) -> list[dict[str, Any]]:
    """``changed`` (e.g. the model with a direction removed) minus ``base``, paired by request:
    refusal rate by label, and the share of answers neither refusing nor complying."""
    t = trials[trials["task"] == "refusal"]
    a, b = t[t["model_id"] == changed], t[t["model_id"] == base]
    if a.empty or b.empty:
        return []
    ka = a.assign(_id=col(a, "grade.id").astype(str), _lab=col(a, "grade.label"), _r=col(a, "grade.refusal"))
    kb = b.assign(_id=col(b, "grade.id").astype(str), _lab=col(b, "grade.label"), _r=col(b, "grade.refusal"))
    both = ka[["variant", "_id", "_lab", "_r"]].merge(kb[["variant", "_id", "_r"]], on=["variant", "_id"],
                                                      suffixes=("_a", "_b"))
    rows: list[dict[str, Any]] = []
    keys = {"model_id": f"{changed} - {base}", "task": "refusal", "layer_idx": None, "alpha": 0.0,
            "alpha_units": "raw", "variant": ",".join(sorted(both["variant"].unique()))}
    for lab in LABELS:
        s = both[both["_lab"] == lab]
        for what, metric in (("refuses", "refusal_rate_change"), ("other", "other_rate_change")):
            x, y = (s["_r_a"] == what).to_numpy(float), (s["_r_b"] == what).to_numpy(float)
            rows += paired_row(keys, f"{metric}:{lab}", x, y, "clean", clusters=s["_id"].to_numpy(dtype=object),
                               note=f"{changed} minus {base}, paired by request ({len(s)} requests)")
    return rows


SUMMARIES = {"refusal": summarize_refusal}


def pairs(models: list[str]) -> list[tuple[str, str]]:
    """(model with a direction removed, the model it was removed from) for every such pair present."""
    have = set(models)
    out = []
    for m in models:
        base, sep, _ = m.partition("+ablate-")
        if sep and base in have:
            out.append((m, base))
    return out
