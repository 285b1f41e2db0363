"""The steering check's metrics: does the injected vector move the model towards its concept?

Why it exists: a null detection rate means nothing if the injection did nothing. Per (concept,
layer, α) the task-A variant ``steer`` injects the concept into a neutral prompt, from a mark in
the user turn through the answer (the detection trials' rule; never position 0), beside a
Gaussian direction of the same norm (``steer_random``, a fresh direction per sample) and no
injection (``steer_control``), all from the same sample streams. The score is the log-probability
mass of the concept's word forms at the first generated step. Any push raises rare tokens a
little, so the comparison that counts is against the random direction: per concept, the rise
over random (mean over samples); per cell, its mean over concepts with a Student-t interval and
a sign-flip p. A cell *steers* when that interval lies above 0 (``RULE``). A concept's word
gaining ≥ ``STEER_NATS`` over random is the descriptive per-concept flag (``steer_share``).
Mentions of the word in the continuation are reported beside (injected vs random vs control).
Each framing is judged by the check with its own injection span: ``two_turn`` injects over turn 1
only and asks in turn 2, so its cells steer when ``steer_two_turn`` (the same check over a neutral
two-turn prompt, injected over turn 1) does; older records without it fall back to ``steer``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from introspect.stats import clustered as C
from introspect.tasks.injection.common import is_steer  # the steering checks, by injection span
from introspect.tasks.injection.regions import split
from introspect.tasks.tidy import (
    CELL,
    EFFECT_P,
    clears,
    col,
    est_row,
    flag,
    groups,
    num,
    pair,
    paired_row,
    rate_row,
    row,
)

STEER_NATS = 1.0
RULE = ("a cell steers when the concept's word forms gain more log-prob at the first answer step "
        "than under a random direction of the same norm (mean over concepts, 95% interval above 0 and "
        f"sign-flip p < {EFFECT_P:g})")
TABLE_COLUMNS = ["model_id", "variant", "word", *CELL, "lp_steer", "lp_random", "lp_control", "lp_rise",
                 "lp_rise_vs_random", "mention_steer", "mention_random", "mention_control", "n",
                 "steers"]


def steering_pairs(df: pd.DataFrame, treated: str = "steer") -> pd.DataFrame:
    """``treated`` records (steer or steer_random) joined to their un-injected control (same
    word, prompt and sample)."""
    return pair(df[df["condition"] == treated], df[df["condition"] == "steer_control"])


def _narrow(p: pd.DataFrame, tag: str) -> pd.DataFrame:
    """(model, word, cell, sample, lp, mention) of paired steering records: the paired frames are
    hundreds of columns wide."""
    if p.empty:
        return pd.DataFrame(columns=["model_id", "variant", "word", *CELL, "sample", f"lp_{tag}", f"m_{tag}",
                                     "lp_control", "m_control"])
    return pd.DataFrame({
        "model_id": col(p, "model_id").to_numpy(), "variant": col(p, "variant").to_numpy(),
        "word": p["concept"].to_numpy(),
        **{k: col(p, k).to_numpy() for k in CELL}, "sample": num(col(p, "sample")),
        f"lp_{tag}": num(col(p, "grade.lp_word")), f"m_{tag}": flag(col(p, "grade.mentions"), None),
        "lp_control": num(col(p, "grade.lp_word~c")), "m_control": flag(col(p, "grade.mentions~c"), None)})


def _nanmean(x: pd.Series) -> float:
    x = pd.to_numeric(x, errors="coerce")
    return float(x.mean()) if x.notna().any() else np.nan


def steering_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, concept, layer, α): log-probs (injected, random, control), rises in
    nats, mention rates, and ``steers`` (rise over random ≥ ``STEER_NATS``; None without a
    random-direction control)."""
    s = _narrow(steering_pairs(df, "steer"), "steer")
    if s.empty:
        return pd.DataFrame(columns=TABLE_COLUMNS)
    r = _narrow(steering_pairs(df, "steer_random"), "random")
    by = ["model_id", "variant", "word", *CELL]
    out = []
    for keys, sub in groups(s, by):
        rnd = r
        for k, v in keys.items():
            rnd = rnd[np.array([x == v for x in rnd[k]], dtype=bool)] if not rnd.empty else rnd
        lp_s, lp_r = _nanmean(sub["lp_steer"]), _nanmean(rnd["lp_random"]) if not rnd.empty else np.nan
        vs_random = lp_s - lp_r
        out.append({**keys, "lp_steer": lp_s, "lp_random": lp_r, "lp_control": _nanmean(sub["lp_control"]),
                    "lp_rise": lp_s - _nanmean(sub["lp_control"]), "lp_rise_vs_random": vs_random,
                    "mention_steer": _nanmean(sub["m_steer"]),
                    "mention_random": _nanmean(rnd["m_random"]) if not rnd.empty else np.nan,
                    "mention_control": _nanmean(sub["m_control"]), "n": len(sub),
                    "steers": None if np.isnan(vs_random) else bool(vs_random >= STEER_NATS)})
    return pd.DataFrame(out, columns=TABLE_COLUMNS)


def _in_cell(table: pd.DataFrame, keys: dict[str, Any]) -> pd.DataFrame:
    m = np.ones(len(table), bool)
    for k in ("model_id", "variant", *CELL):
        m &= np.array([v == keys.get(k) for v in table[k]], dtype=bool)
    return table[m]


def summarize_steering(df: pd.DataFrame, table: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows of variant ``steer`` per cell: the rise over the random direction and over no
    injection (concept-level t, sign-flip p), the share of concepts whose word gains ≥ 1 nat
    over random, mention rates and their paired difference, coherence."""
    st = steering_pairs(df, "steer")
    out: list[dict[str, Any]] = []
    if st.empty:
        return out
    steer, rnd = df[df["condition"] == "steer"], df[df["condition"] == "steer_random"]
    for keys, sub in groups(st, ["model_id", "task", "variant", *CELL]):
        t = _in_cell(table, keys)
        vs_r = t["lp_rise_vs_random"].to_numpy(float)
        if np.isfinite(vs_r).any():
            out += est_row(keys, "steer_lp_rise_vs_random", C.concept_mean(vs_r, int(t["n"].sum()), test=True),
                           "steer-steer_random", note="nats; " + RULE)
            share = (vs_r[np.isfinite(vs_r)] >= STEER_NATS).astype(float)
            out += est_row(keys, "steer_share", C.rate(share, None), "steer",
                           note=f"share of concepts whose word gains ≥ {STEER_NATS:g} nat over the random direction")
        out += est_row(keys, "steer_lp_rise", C.concept_mean(t["lp_rise"].to_numpy(float), int(t["n"].sum()),
                                                             test=True),
                       "steer-steer_control", note="nats over no injection")
        lab = sub["concept"].to_numpy()
        m_s, m_c = flag(col(sub, "grade.mentions"), None), flag(col(sub, "grade.mentions~c"), None)
        out += rate_row(keys, "steer_mention:steer", m_s, "steer", lab)
        out += rate_row(keys, "steer_mention:control", m_c, "steer_control", lab)
        rp = pair(_in_cell(steer, keys), _in_cell(rnd, keys))
        if not rp.empty:
            out += rate_row(keys, "steer_mention:random", flag(col(rp, "grade.mentions~c"), None), "steer_random",
                            rp["concept"].to_numpy())
            out += paired_row(keys, "steer_mention_vs_random", flag(col(rp, "grade.mentions"), None),
                              flag(col(rp, "grade.mentions~c"), None), "steer-steer_random",
                              rp["concept"].to_numpy())
        out += rate_row(keys, "steer_coherent:steer", flag(col(sub, "grade.coherent"), None), "steer", lab)
        for r in t.itertuples():  # per concept (the dashboard's steering map); deterministic: no interval
            if np.isfinite(r.lp_rise_vs_random):
                out.append(row(keys, f"steer_lp_rise_vs_random:{r.word}", (float(r.lp_rise_vs_random),
                               np.nan, np.nan), int(r.n), "steer-steer_random", n_clusters=1,
                               note="nats; the concept's first-step log-prob minus its mean under its samples' random directions"))
    return out


def steer_variant(rows: list[dict[str, Any]], model: str, framing: str) -> str:
    """The steering check that judges ``framing``: its own span's where the run has it."""
    base, region = split(str(framing))
    own = f"steer@{region}" if region else "steer_two_turn" if base == "two_turn" else "steer"
    has = any(r["variant"] == own and r["model_id"] == model for r in rows if r["metric"] == "steer_lp_rise_vs_random")
    return own if has else "steer"


def steering_cells(rows: list[dict[str, Any]], model: str) -> set[tuple]:
    """The (check, layer, α, units) cells of a model that steer (``RULE``): the one place that rule
    is asked, by its test as well as its interval, as the verdict's gates are."""
    return {(r["variant"], *(r[k] for k in CELL)) for r in rows
            if r["metric"] == "steer_lp_rise_vs_random" and r["model_id"] == model and is_steer(r["variant"])
            and clears(r, EFFECT_P)}


def cell_steers(rows: list[dict[str, Any]], model: str, cell: dict[str, Any]) -> bool:
    """Whether a framing's (layer, α, units) cell of a model steers (``RULE``), by the check with
    that framing's injection span (``steer_variant``)."""
    check = steer_variant(rows, model, cell["variant"])
    return (check, *(cell[k] for k in CELL)) in steering_cells(rows, model)


def steers_lookup(table: pd.DataFrame) -> dict[tuple, bool]:
    """{(check, word, layer, α, units): steers} for the concepts with a rise over random."""
    return {(r.variant, r.word, r.layer_idx, float(r.alpha), r.alpha_units): bool(r.steers)
            for r in table.itertuples() if r.steers is not None}
