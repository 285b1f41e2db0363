"""The steering check's metrics: does the injected vector move the model at all?

Why it exists: a null detection rate means nothing if the injection did nothing (on Gemma 3
270M at the quick preset, injected and control answers were word-for-word identical). Per
(concept, layer, α) the task-A variant ``steer`` injects the concept into a neutral prompt and
compares with the same prompt un-injected (``steer_control``, same sample streams): the rise in
the log-probability mass of the concept's word forms at the first generated step, in nats, and
how often a short free continuation mentions the word. The rule, stated in every row's note:
a (concept, layer, α) *steers* when its lp rise is at least ``STEER_NATS`` = 1 nat (the word
became e ≈ 2.7 times likelier). Per cell: the share of concepts that steer.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from introspect.stats import wilson
from introspect.tasks.tidy import (
    CELL,
    col,
    flag,
    groups,
    mean_row,
    num,
    pair,
    paired_row,
    rate_row,
    row,
)

STEER_NATS = 1.0
RULE = (f"steers = lp rise ≥ {STEER_NATS:g} nat: log-prob of the concept's word forms at the "
        "first generated step on a neutral prompt, injected minus not injected")
TABLE_COLUMNS = ["model_id", "word", *CELL, "lp_steer", "lp_control", "lp_rise",
                 "mention_steer", "mention_control", "n", "steers"]


def steering_pairs(df: pd.DataFrame) -> pd.DataFrame:
    """Steer records joined to their un-injected control (same word, prompt and sample)."""
    st = df[df["condition"] == "steer"]
    ctl = df[df["condition"] == "steer_control"]
    return pair(st, ctl)


def steering_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, concept, layer, α): lp rise in nats, mention rates and ``steers``."""
    pairs = steering_pairs(df)
    if pairs.empty:
        return pd.DataFrame(columns=TABLE_COLUMNS)
    by = ["model_id", "word", *CELL]
    pairs = pd.concat([pairs[[c for c in by if c in pairs.columns]], pd.DataFrame({  # a narrow frame: the paired records are hundreds of columns
        "lp_s": num(col(pairs, "grade.lp_word")), "lp_c": num(col(pairs, "grade.lp_word~c")),
        "m_s": flag(col(pairs, "grade.mentions"), None), "m_c": flag(col(pairs, "grade.mentions~c"), None)},
        index=pairs.index)], axis=1)
    out = []
    for keys, sub in groups(pairs, by):
        rise = float(np.nanmean(sub["lp_s"] - sub["lp_c"])) if (
            sub["lp_s"].notna() & sub["lp_c"].notna()).any() else np.nan
        out.append({**keys, "lp_steer": float(np.nanmean(sub["lp_s"])) if sub["lp_s"].notna().any() else np.nan,
                    "lp_control": float(np.nanmean(sub["lp_c"])) if sub["lp_c"].notna().any() else np.nan,
                    "lp_rise": rise,
                    "mention_steer": float(np.nanmean(sub["m_s"])) if sub["m_s"].notna().any() else np.nan,
                    "mention_control": float(np.nanmean(sub["m_c"])) if sub["m_c"].notna().any() else np.nan,
                    "n": len(sub), "steers": bool(rise >= STEER_NATS) if not np.isnan(rise) else None})
    return pd.DataFrame(out, columns=TABLE_COLUMNS)


def steers_lookup(table: pd.DataFrame) -> dict[tuple, bool]:
    """{(word, layer, α, units): steers} for the concepts with an lp rise."""
    return {(r.word, r.layer_idx, float(r.alpha), r.alpha_units): bool(r.steers)
            for r in table.itertuples() if r.steers is not None}


def cell_share(table: pd.DataFrame, keys: dict[str, Any]) -> tuple[tuple[float, float, float], int]:
    """Share of a cell's concepts that steer (Wilson over concepts) and how many concepts."""
    m = np.ones(len(table), bool)
    for k in CELL:
        m &= np.array([v == keys.get(k) for v in table[k]], dtype=bool)
    s = table[m & table["steers"].notna().to_numpy()]
    return wilson(int(s["steers"].astype(bool).sum()), len(s)), len(s)


def summarize_steering(df: pd.DataFrame, table: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows of variant ``steer`` per cell: share steering, mean lp rise, mentions, per concept."""
    pairs = steering_pairs(df)
    out: list[dict[str, Any]] = []
    if pairs.empty:
        return out
    for keys, sub in groups(pairs, ["model_id", "task", "variant", *CELL]):
        share, n_c = cell_share(table[table["model_id"] == keys["model_id"]], keys)
        if n_c:
            out.append(row(keys, "steer_share", share, n_c, "steer", ci="wilson(concepts)",
                           n_clusters=n_c, note=RULE))
        lab = sub["concept"].to_numpy()
        lp_s, lp_c = num(col(sub, "grade.lp_word")), num(col(sub, "grade.lp_word~c"))
        out += paired_row(keys, "steer_lp_rise", lp_s, lp_c, "steer-steer_control", lab,
                          note="nats; " + RULE)
        m_s, m_c = flag(col(sub, "grade.mentions"), None), flag(col(sub, "grade.mentions~c"), None)
        out += rate_row(keys, "steer_mention:steer", m_s, "steer", lab)
        out += rate_row(keys, "steer_mention:control", m_c, "steer_control", lab)
        out += paired_row(keys, "steer_mention_diff", m_s, m_c, "steer-steer_control", lab)
        out += rate_row(keys, "steer_coherent:steer", flag(col(sub, "grade.coherent"), None),
                        "steer", lab)
        for word, w in groups(sub, ["concept"]):
            name = word["concept"]
            out += mean_row(keys, f"steer_lp_rise:{name}",
                            num(col(w, "grade.lp_word")) - num(col(w, "grade.lp_word~c")),
                            "steer-steer_control", note="nats; " + RULE)
            hit = table[(table["word"] == name) & (table["model_id"] == keys["model_id"])]
            for r in hit.itertuples():
                if all(getattr(r, k) == keys[k] for k in CELL) and r.steers is not None:
                    v = float(r.steers)
                    out.append(row(keys, f"steers:{name}", (v, v, v), int(r.n), "steer",
                                   note=RULE))
    return out
