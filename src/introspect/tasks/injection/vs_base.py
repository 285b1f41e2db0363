"""Task A of an adapted model against its base model on the same words, concept by concept.

Why: each model's verdict says whether that model detects; it cannot say whether an adapter
detects *more* than its base model does on the same concepts. That matters where the base model
itself reacts: in the two-turn framing it says yes more often after any push in the earlier turn
(Net 0.12 [0.05, 0.20] on the positive control's words), so an adapter's Net there is partly the
base model's. Runs of the two models on the same words (``--words-file``) give every concept a
Net in each; the difference per concept gets the same concept-level Student-t interval and
sign-flip p as every other concept-level mean (``stats.clustered.concept_mean``), over the
concepts both runs have. The rows are extra comparisons, outside the verdict's Holm family.

``latent_beyond_steering_vs_base``: latent naming beyond steering (after the detection report −
after the neutral prefill, first sample of each trial) of the adapted model minus the base
model's on the same words: what training added to naming beyond what the vector steers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from introspect.tasks.injection.metrics_a import NOT_CELL, _first_sample, detection_questions
from introspect.tasks.tidy import (
    CELL,
    col,
    combo_row,
    concepts,
    flag,
    groups,
    pair,
    with_match_keys,
)

# metric -> (the reference condition each injected answer is paired with, what is differenced)
METRICS = {
    "net_vs_base": ("control", "Net (injected − matched control)"),
    "net_vs_random_vs_base": ("random", "Net over the Gaussian ablation (injected − random direction)"),
}


def _diffs(inj: pd.DataFrame, ref: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Each injected answer's detection minus its paired reference answer's, and its concept."""
    p = pair(inj, ref)
    if p.empty:
        return np.zeros(0), np.zeros(0, dtype=object)
    return flag(col(p, "grade.detected")) - flag(col(p, "grade.detected~c")), p["concept"].to_numpy()


def _latent_excess(cdf: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per injected trial (first sample: one latent reading per trial), report hit − neutral hit."""
    inj = _first_sample(cdf[cdf["condition"] == "injected"])
    if inj.empty or "grade.latent_names_word_neutral" not in inj.columns:
        return np.zeros(0), np.zeros(0, dtype=object)
    d = flag(col(inj, "grade.latent_names_word"), None) - flag(col(inj, "grade.latent_names_word_neutral"), None)
    keep = ~np.isnan(d)
    return d[keep], concepts(inj)[keep]


def _cells(df: pd.DataFrame) -> dict[tuple, pd.DataFrame]:
    return {tuple(k.values()): sub for k, sub in groups(df[~df["condition"].isin(NOT_CELL)], CELL)}


def vs_base(records: pd.DataFrame, adapted: str, base: str) -> list[dict[str, Any]]:
    """Summary rows (``model_id`` = "ADAPTED − BASE") per task-A framing and cell both models
    ran: each of ``METRICS`` as the adapted model's per-concept value minus the base model's."""
    if records.empty or not {"model_id", "task", "condition", "variant"} <= set(records.columns):
        return []
    a = records[(records["task"] == "A") & records["model_id"].isin((adapted, base))]
    a = detection_questions(a)
    if a.empty:
        return []
    a = with_match_keys(a)
    out: list[dict[str, Any]] = []
    for vkeys, vdf in groups(a, ["variant"]):
        by_model = {m: vdf[vdf["model_id"] == m] for m in (adapted, base)}
        cells = {m: _cells(d) for m, d in by_model.items()}
        for cell in sorted(set(cells[adapted]) & set(cells[base]), key=str):
            keys = {"model_id": f"{adapted} − {base}", "task": "A", **vkeys, **dict(zip(CELL, cell))}
            for metric, (ref_cond, what) in METRICS.items():
                parts = []
                for m in (adapted, base):
                    cdf = cells[m][cell]
                    src = by_model[m] if ref_cond == "control" else cdf
                    parts.append(_diffs(cdf[cdf["condition"] == "injected"], src[src["condition"] == ref_cond]))
                if all(len(v) for v, _ in parts):
                    out += combo_row(keys, metric, parts, lambda x, y: x - y, f"{adapted} − {base}",
                                     note=f"{what}: the adapted model's minus the base model's, paired "
                                          "by concept (concepts both runs have); not in the verdict's Holm family")
            parts = [_latent_excess(cells[m][cell]) for m in (adapted, base)]
            if all(len(v) for v, _ in parts):
                out += combo_row(keys, "latent_beyond_steering_vs_base", parts, lambda x, y: x - y,
                                 f"{adapted} − {base}",
                                 note="latent naming beyond steering (report − neutral prefill): the adapted "
                                      "model's minus the base model's, paired by concept; not in the Holm family")
    for r in out:
        r.pop("_est", None)  # verdicts' private refit handle: these rows feed no verdict
    return out
