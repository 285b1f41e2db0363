"""The Delegate Game's selection lift at a matched delegation rate: a control that can fail.

Why: a model's own lift is read where its argmax says T, so a control LoRA that hands over 99%
of the items keeps one and its lift "covers 0" whatever it knows; two models are comparable
only when they delegate the same share. Here every model that played a game variant is read at
a reference model's delegation rate r (each model that delegates something is a reference in
turn): it delegates its round(r·n) items of highest P(T) and keeps the rest, and its selection
lift is its baseline accuracy on the kept items minus on all of them (``accuracy_lift`` on the
baseline answers, Jeffreys interval over the cells). A lift needs ``MIN_KEPT`` kept items and
one delegated, else it is "not judged" and says why. Ties in P(T) at the cut are broken by
the item key, a fixed order unrelated to the model's errors. ``same_items`` says whether the
model played the reference's questions (keys and answers equal): two question files of one name
share a variant, and the rate, a share, then reads other items.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from introspect.tasks.selfknowledge.crossmodel import NOT_JUDGED, _game_keys, _item_source
from introspect.tasks.selfknowledge.game_metrics import accuracy_lift
from introspect.tasks.selfknowledge.rows import b, g, num

MIN_KEPT = 20  # kept items a lift needs: with fewer, its interval reads the few items, not the selection
MR_COLUMNS = ["variant", "reference", "model_id", "rate", "delegated", "kept", "same_items", "metric", "value",
              "lo", "hi", "n", "note"]


def lift_at_rate(p_delegate: np.ndarray, base_ok: np.ndarray, keys: list[str], rate: float
                 ) -> tuple[tuple[float, float, float], int, int, str]:
    """Delegate the round(``rate``·n) items of highest P(T) (ties by key), keep the rest:
    ((lift, lo, hi), delegated, kept, why not judged or "")."""
    ok = np.isfinite(p_delegate)
    n = int(ok.sum())
    k = int(round(rate * n))
    order = sorted(np.flatnonzero(ok), key=lambda i: (-p_delegate[i], keys[i]))
    deleg = np.zeros(len(p_delegate), bool)
    deleg[order[:k]] = True
    kept = ok & ~deleg
    why = ""
    if not k:
        why = f"{NOT_JUDGED}: nothing delegated at rate {rate:.2f} of {n} items"
    elif kept.sum() < MIN_KEPT:
        why = f"{NOT_JUDGED}: {int(kept.sum())} items kept at rate {rate:.2f}, fewer than {MIN_KEPT}"
    est = (np.nan, np.nan, np.nan) if why else accuracy_lift(base_ok[ok], base_ok[ok], kept[ok], deleg[ok])
    return est, k, int(kept.sum()), why


def matched_rate(df: pd.DataFrame) -> pd.DataFrame:
    """Per Delegate Game variant (question set and teammate accuracy), reference model R (one that
    delegated something, at its argmax rate r) and model M (every model of the variant, R
    included): ``lift_at_matched_rate``, M's selection lift when it delegates the share r of its
    items with the highest P(T). R's own row reads R's P(T) ranking at its own rate; M's baseline
    correctness is its own (each model plays under its own truth)."""
    rows: list[dict] = []
    d = _item_source(df)
    d = d[d["task"] == "delegate"] if len(d) else d
    if not len(d):
        return pd.DataFrame(columns=MR_COLUMNS)
    for variant, s in d.groupby("variant", sort=True):
        models = {str(m): t.reset_index(drop=True) for m, t in s.groupby("model_id", sort=True)}
        items = {m: set(zip(_game_keys(t), map(str, g(t, "answer", "")))) for m, t in models.items()}
        for ref, t in models.items():
            deleg = b(t, "delegated")
            if not deleg.any():
                continue
            rate = float(deleg.mean())
            for m, u in models.items():
                est, k, kept, why = lift_at_rate(num(u, "p_delegate"), b(u, "baseline_correct"), _game_keys(u), rate)
                rows.append({"variant": variant, "reference": ref, "model_id": m, "rate": rate, "delegated": k,
                             "kept": kept, "same_items": items[m] == items[ref], "metric": "lift_at_matched_rate", "value": est[0], "lo": est[1],
                             "hi": est[2], "n": k + kept, "note": why})
    return pd.DataFrame(rows, columns=MR_COLUMNS)
