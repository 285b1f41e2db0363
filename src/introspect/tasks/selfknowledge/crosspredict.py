"""Cross-prediction with the behaviour held fixed (Binder et al. 2024, "Looking Inward").

Why: ``crossmodel.self_vs_other`` holds the *predictor* fixed and changes the behaviour it is
scored on; for two models of one base (an adapter and its base model) the behaviours nearly
coincide and that difference is about 0 by construction. Here model B's behaviour is held fixed
and the predictor changes: B's own predictions against every other model's readings of the same
items, AUROC(B predicts B) − AUROC(P predicts B), paired by item. Above 0: B predicts its own
behaviour better than P's predictions do, what privileged access would show. P is either a
model trained on B's behaviour on other items (Binder et al.'s rival: ``train-selfknow
--truth-from``), or any model whose readings are its predictions of its own behaviour, which
stands for "a model's sense of these items", a weaker rival than a trained one.

An AUROC over a handful of one class says little and its interval is wide or undefined, so every
row needs ``MIN_CLASS`` items of each class in B's behaviour on the items it compares; below that
the row is "not judged" (value NaN) and its ``note`` says why (``crossmodel.Classes``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from introspect.tasks.selfknowledge.crossmodel import (  # noqa: F401 (MIN_CLASS: the gate's size, read here)
    MIN_CLASS,
    NOT_JUDGED,
    Classes,
    _behaviour,
    _by_task,
    _item_source,
    _predictions,
    auroc_difference,
    clustered_auroc,
)

TASKS = ("delegate", "seb-association", "seb-restriction", "seb-difficulty")
CP_COLUMNS = ["task", "behaviour", "predictor", "self", "metric", "value", "lo", "hi", "n",
              "positives", "negatives", "note"]


def _row(task: str, b: str, p: str, metric: str, est: tuple[float, float, float], n: int,
         cls: Classes, note: str = "") -> dict:
    """One output row; a row below the class gate keeps its counts and loses its figures."""
    note = note or cls.note
    est = est if not note else (np.nan, np.nan, np.nan)
    return {"task": task, "behaviour": b, "predictor": p, "self": b == p and metric == "auroc",
            "metric": metric, "value": est[0], "lo": est[1], "hi": est[2], "n": n,
            "positives": cls.positives, "negatives": cls.negatives, "note": note}


def cross_prediction(df: pd.DataFrame) -> pd.DataFrame:
    """Rows per task, behaviour owner B and predictor P (every model with predictions on B's
    items, B itself included): ``auroc`` of P's predictions against B's behaviour on the items
    both have, Newcombe's interval clustered by item; for P ≠ B, ``self_minus_predictor`` =
    AUROC(B→B) − AUROC(P→B) on the items B's behaviour and both predictions have, paired by item,
    with the jackknife-over-items t interval (``crossmodel.auroc_difference``). Every row is
    gated: fewer than ``MIN_CLASS`` items of either class in B's behaviour there and it is "not
    judged" (NaN, ``note`` says why); ``n`` counts the compared items."""
    rows: list[dict] = []
    for task, s in _by_task(_item_source(df)):
        if task not in TASKS:
            continue
        pred, beh = _predictions(task, s), _behaviour(task, s)
        by_model = {str(m): dict(zip(d["key"], d["p"])) for m, d in pred.groupby("model_id")}
        for b in sorted({str(m) for m, _ in beh}):
            own = by_model.get(b, {})
            for p in sorted(by_model, key=lambda m: (m != b, m)):  # B's own reading first
                keys = sorted(k for k in by_model[p] if (b, k) in beh)
                if not keys:
                    continue
                draws = [beh[(b, k)] for k in keys]
                cls = Classes.of(draws)
                est = clustered_auroc(np.array([by_model[p][k] for k in keys]), draws, keys)[0] \
                    if cls.judged else (np.nan, np.nan, np.nan)
                rows.append(_row(task, b, p, "auroc", est, len(keys), cls))
                if p == b:
                    continue
                both = [k for k in keys if k in own]
                draws = [beh[(b, k)] for k in both]
                cls = Classes.of(draws)
                why = "" if both else f"{NOT_JUDGED}: {b} made no prediction on the items {p} predicted"
                est = auroc_difference((np.array([own[k] for k in both]), draws),
                                       [(np.array([by_model[p][k] for k in both]), draws)]) \
                    if both and cls.judged else (np.nan, np.nan, np.nan)
                rows.append(_row(task, b, p, "self_minus_predictor", est, len(both), cls, why))
    return pd.DataFrame(rows, columns=CP_COLUMNS)
