"""One report across models: each task's headline figure per model, side by side, with its CI.

Why a page of its own: the dashboard shows every cell of one grid; comparing families needs the
opposite, one number per task and model with its interval, next to what each model *is* (a
model-card row: family, parameters, layers, d_model, quantization at rest, dtype), because a
null on a 4-bit 135M model and one on a 0.5B model mean different things. Pure functions: the
caller loads records (``load_results`` / ``load_headers`` over several model folders) and gets a
``Comparison`` back (its HTML: ``report.compare_page.render_compare``); writing files is the CLI's job.

Injection tasks run a grid of (layer, α) cells. Where the records carry a split-half estimate
(``<metric>@held_out``: the cell picked on half of the concepts, reported on the other half),
that is the headline and its cell is the one shown; otherwise the cell with the largest headline
estimate is shown, with the number of cells it was picked from (a post-hoc pick: its nominal
interval is optimistic when that number is > 1). The task's other figures are read in the same
cell, and so is the steering check (metrics named ``steer*``) when the records have one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from introspect.tasks.selfknowledge.metrics import one_class_notes, without_one_class_truth

CARD_PREFIX = "model card: "  # introspect.engine.load.models.CARD_NOTE (kept literal: reports load without torch)
CARD_COLUMNS = ["model", "family", "parameters", "layers", "d_model", "quantization", "dtype",
                "fingerprint"]
HEADLINE_COLUMNS = ["task", "variant", "metric", "role", "model_id", "value", "lo", "hi", "n",
                    "layer_idx", "alpha", "alpha_units", "n_cells"]

# Per task: the first of these present is the headline (it picks the cell); the rest present are
# read in the same cell. A group with none of them shows its steering check, else its first metric.
HEADLINES: dict[str, tuple[str, ...]] = {
    "A": ("net", "tpr", "fpr", "introspection_score", "identification", "latent_identification"),
    "B": ("delta_strict_success", "delta_mc_accuracy", "strict_success:injected",
          "strict_success:control", "mc_accuracy:injected", "mc_accuracy:control"),
    "C": ("delta_intentional:injected", "intentional:injected", "intentional:control"),
    "D": ("peak_delta_cos_centred@held_out", "peak_delta_cos@held_out", "auc_delta_cos",
          "auc_delta_cos_ctrl"),
    # self-knowledge: the logit reading first, then its baselines, the text reading and the
    # warnings that say what a figure cannot mean (metrics of tasks.selfknowledge.metrics)
    "seb-association": ("logit_auroc", "logit_accuracy", "logit_majority_baseline", "surface_auroc", "logit_beyond_surface",
                        "text_accuracy", "text_parse_rate", "low_mass_rate", "warning_single_draw_truth"),
    "seb-restriction": ("logit_auroc", "logit_accuracy", "logit_majority_baseline", "surface_auroc", "logit_beyond_surface",
                        "logit_rule_auroc", "predict_order_consistency", "judge_order_consistency", "text_accuracy", "text_over_niceness", "predict_low_mass_rate",
                        "response_cut_rate", "warning_single_draw_truth", "warning_judged_truth_one_class"),
    "seb-difficulty": ("logit_pair_accuracy", "pair_order_consistency", "majority_pair_baseline", "surface_length_pair_accuracy", "text_pair_accuracy", "text_parse_rate",
                       "pair_excluded_rate", "answer_cut_rate", "warning_single_draw_truth"),
    # not confidence_auroc: it scores P(key) against "the top option is the key", so it reads
    # 0.92-0.97 for a model at chance; the entropy over A-D does not see the key
    "delegate": ("self_accuracy_lift", "p_delegate_auroc", "entropy_auroc[error]", "surface_auroc",
                 "baseline_accuracy", "baseline_modal_letter_rate", "rotation_consistency", "delegation_rate", "game_low_mass_rate", "entropy_unavailable",
                 "odds_ratio[baseline_error]", "other_modelling_or_per_0.1", "p_delegate_diff[high-low teammate]"),
    "delegate-probe": ("probe_cv_auroc", "game_projection_auroc[error]"),
    "recovery": ("accuracy_drop_vs_clean", "recovery_rate", "in_reasoning_rate", "accuracy", "parse_rate",
                 "cut_rate"),
    # letter-free first: the cloze reading where the records have it (the letter argmax reads the
    # answer-letter prior at these sizes; its modal-letter rate stays beside it)
    "ability": ("cloze_accuracy", "accuracy", "modal_letter_rate", "cloze_letter_agreement", "mean_p_correct",
                "low_mass_rate"),
    "seb-mean": ("seb_mean_accuracy",),  # computed across the three SEB tasks (seb_mean_rows), never summarised
    "refusal": ("refusal_rate:unsafe", "refusal_rate:safe", "other_rate:unsafe", "other_rate:safe"),
}
# 002's self-execution score (its Figs. 7-8): per model, the unweighted mean of the three tests'
# accuracies, each with chance 0.5. Here each test's logit reading, after the one-class gate
SEB_PARTS = {"seb-association": "logit_accuracy", "seb-restriction": "logit_accuracy",
             "seb-difficulty": "logit_pair_accuracy"}
SEB_MEAN = ("seb-mean", "002 score: mean of association, restriction, difficulty", "seb_mean_accuracy")
STEERING = ("steer_lp_rise_vs_random", "steer_share", "steer_lp_rise", "steer_mention_vs_random")
HELD_OUT = "@held_out"
STEERING_PREFIX = "steer"


@dataclass(frozen=True)
class Comparison:
    """Model cards (one row per model) and the headline table (tidy, one row per figure)."""

    cards: pd.DataFrame
    headline: pd.DataFrame
    models: tuple[str, ...]
    notes: tuple[str, ...] = ()  # why a figure is missing from the headlines (one-class truths)
    figures: tuple = ()  # 003's Delegate Game figures: (id, title, figure, notes), report.sk_figures
    self_other: pd.DataFrame | None = None  # crossmodel.self_vs_other's rows, when records were given
    cross: pd.DataFrame | None = None  # crosspredict.cross_prediction's rows, when records were given
    matched: pd.DataFrame | None = None  # matched_rate.matched_rate's rows (Delegate Game), when records were given


# ---------------------------------------------------------------- model cards


def _card_from_notes(notes: object) -> dict | None:
    for note in notes if isinstance(notes, (list, tuple)) else ():
        if isinstance(note, str) and note.startswith(CARD_PREFIX):
            try:
                card = json.loads(note[len(CARD_PREFIX):])
            except ValueError:
                continue
            if isinstance(card, dict):
                return card
    return None


def model_cards(headers: pd.DataFrame, models: list[str] | None = None) -> pd.DataFrame:
    """One card per model from its run headers (``model_card`` field or the card note; the
    latest header wins). Models with no card get their fingerprint and blanks."""
    cards: dict[str, dict] = {}
    if not headers.empty:
        rows = headers.sort_values("ts", na_position="first") if "ts" in headers else headers
        for r in rows.to_dict("records"):
            model = r.get("model_id")
            if not isinstance(model, str):
                continue
            card = r.get("model_card") if isinstance(r.get("model_card"), dict) else None
            card = card or _card_from_notes(r.get("notes"))
            if card or model not in cards:
                cards[model] = {"fingerprint": r.get("fingerprint"), **(card or {}), "model": model}
    for m in models or []:
        cards.setdefault(m, {"model": m})
    df = pd.DataFrame([{c: card.get(c) for c in CARD_COLUMNS} for card in cards.values()],
                      columns=CARD_COLUMNS)
    df["parameters"] = pd.to_numeric(df["parameters"], errors="coerce")
    return df.sort_values(["parameters", "model"], na_position="last").reset_index(drop=True)


# ---------------------------------------------------------------- headline figures


def _same_cell(g: pd.DataFrame, best: pd.Series) -> pd.DataFrame:
    mask = np.ones(len(g), bool)
    for c in ("layer_idx", "alpha", "alpha_units"):
        col = g[c].astype(object).where(g[c].notna(), None).to_numpy()
        want = None if pd.isna(best[c]) else best[c]
        mask &= np.array([v == want for v in col])
    return g[mask]


# a letter reading that leaves the headlines when its letter-free reading is there: task -> (letter-free, letter)
LETTER_FREE = {"ability": ("cloze_accuracy", ("accuracy",))}


def headline_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Tidy headline rows from a ``summarize`` table (any number of models)."""
    out: list[dict] = []
    if summary.empty:
        return pd.DataFrame(columns=HEADLINE_COLUMNS)
    s = without_one_class_truth(summary).copy()  # a one-class judged truth heads nothing
    s["variant"] = s["variant"].fillna("default")
    for (task, variant, model), g in s.groupby(["task", "variant", "model_id"], sort=True):
        have = set(g["metric"])
        wanted = HEADLINES.get(str(task), ())
        free, letter = LETTER_FREE.get(str(task), ("", ()))
        if free in have:  # the letter accuracy is beside the point where the options' text was scored
            wanted = tuple(m for m in wanted if m not in letter)
        present = [m for m in wanted if m in have] or [m for m in STEERING if m in have] or [
            str(g["metric"].iloc[0])]
        cells = g[(g["metric"] == present[0]) & g["value"].notna()]
        if cells.empty:
            cells = g[g["metric"] == present[0]]
        held = g[g["metric"] == present[0] + HELD_OUT]
        best = held.iloc[0] if not held.empty else cells.loc[cells["value"].fillna(-np.inf).idxmax()]
        cell = _same_cell(g, best)
        steer = [m for m in cell["metric"].unique()
                 if str(m).startswith(STEERING_PREFIX) and m not in present and ":" not in str(m)]
        rows = [(held.iloc[0], "headline (held out)")] if not held.empty else []
        for metric in [*present, *sorted(steer)]:
            r = cell[cell["metric"] == metric]
            role = "steering" if metric in steer else "same cell"
            if r.empty:  # a summary of the whole layer curve (task D's area) belongs to no cell
                r, role = g[(g["metric"] == metric) & g["layer_idx"].isna()], "all layers"
            if not r.empty:
                rows.append((r.iloc[0], "headline" if not rows else role))
        for r, role in rows:
            out.append({"task": task, "variant": variant, "metric": r["metric"], "role": role,
                        "model_id": model, "value": r["value"], "lo": r["lo"], "hi": r["hi"],
                        "n": int(r["n"]), "layer_idx": r["layer_idx"], "alpha": r["alpha"],
                        "alpha_units": r["alpha_units"], "n_cells": int(len(cells))})
    return pd.DataFrame(out, columns=HEADLINE_COLUMNS)


def seb_mean_rows(summary: pd.DataFrame) -> tuple[list[dict], list[str]]:
    """002's self-execution score per model (headline rows) and why a model has none (notes).

    Defined only where all three tests have one logit accuracy each that passed the one-class gate
    (a mean over two tests, or over a judged truth of one class, is not 002's score). It has no
    interval: its parts come from different item sets with differently clustered intervals, shown
    beside it; the mean is a summary in 002's units, not a test.
    """
    if summary.empty:
        return [], []
    s = without_one_class_truth(summary)
    rows, notes = [], []
    for model in sorted(set(s["model_id"].dropna())):
        parts, why = {}, []
        for task, metric in SEB_PARTS.items():
            r = s[(s["model_id"] == model) & (s["task"] == task) & (s["metric"] == metric) & s["value"].notna()]
            if len(r) == 1:
                parts[task] = r.iloc[0]
            elif len(r) > 1:
                why.append(f"{task} has {len(r)} variants")
            elif ((summary["model_id"] == model) & (summary["task"] == task)).any():
                why.append(f"{task} has no {metric} (or a one-class judged truth)")
            else:
                why.append("")  # not run: the table shows it, no note
        if len(parts) == len(SEB_PARTS):
            rows.append({"task": SEB_MEAN[0], "variant": SEB_MEAN[1], "metric": SEB_MEAN[2], "role": "headline",
                         "model_id": model, "value": float(np.mean([float(r["value"]) for r in parts.values()])),
                         "lo": np.nan, "hi": np.nan, "n": len(parts), "layer_idx": np.nan, "alpha": np.nan,
                         "alpha_units": None, "n_cells": 1})
        elif why and all(why):  # all three ran, yet one has no usable accuracy
            notes.append(f"{model}: no 002 score (seb_mean_accuracy): " + "; ".join(why))
    return rows, notes


def compare(summary: pd.DataFrame, headers: pd.DataFrame, records: pd.DataFrame | None = None) -> Comparison:
    """The comparison of every model in a ``summarize`` table and its run headers; with the
    ``records`` themselves, also self vs other (each model's predictions scored on every other
    model's behaviour on shared items: ``tasks.selfknowledge.crossmodel.self_vs_other``) and
    cross-prediction (each model's behaviour scored by every model's predictions:
    ``tasks.selfknowledge.crosspredict.cross_prediction``) and the Delegate Game's lift at matched
    delegation rates (``tasks.selfknowledge.matched_rate``)."""
    headline = headline_table(summary)
    seb_rows, seb_notes = seb_mean_rows(summary)
    if seb_rows:
        headline = pd.concat([headline, pd.DataFrame(seb_rows, columns=HEADLINE_COLUMNS)], ignore_index=True)
    found = sorted(set(summary["model_id"].dropna()) if not summary.empty else set())
    cards = model_cards(headers, found)
    cards = cards[cards["model"].isin(found)] if found else cards
    order = tuple(cards["model"]) + tuple(m for m in found if m not in set(cards["model"]))
    from introspect.report.sk_figures import delegate_figures

    notes = (*one_class_notes(summary), *seb_notes,
             *(["seb_mean_accuracy is 002's self-execution score (chance 0.5): the unweighted mean of the "
                "three tests' logit accuracies, without an interval (read each test's beside it)"] if seb_rows else []))
    svo = cross = matched = None
    if records is not None and len(records):
        from introspect.tasks.selfknowledge.crossmodel import self_vs_other
        from introspect.tasks.selfknowledge.crosspredict import cross_prediction
        from introspect.tasks.selfknowledge.matched_rate import matched_rate

        svo, cross, matched = self_vs_other(records), cross_prediction(records), matched_rate(records)
    return Comparison(cards.reset_index(drop=True), headline, order, notes,
                      tuple(delegate_figures(summary, list(order))), svo, cross, matched)


def _row_text(r: Any) -> str:
    """``cell_text`` of a self-knowledge table row (value, lo, hi, n, metric): no (layer, α) cell."""
    return cell_text(pd.Series({"value": r.value, "lo": r.lo, "hi": r.hi, "n": r.n, "layer_idx": np.nan,
                                "alpha": np.nan, "metric": r.metric, "role": "", "n_cells": 1}))


def self_other_table(comp: Comparison) -> pd.DataFrame:
    """Per task and predicting model: its AUROC on its own behaviour, and per other model its own
    minus that other's (the jackknife interval over items), "not judged" and why below the class
    gate, marked where the other shares the predictor's base model (about 0 by construction)."""
    s = comp.self_other
    cols = ["task", "predictor", "metric", "value"]
    if s is None or s.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    for r in s[(s["metric"] == "self_minus_other") | ((s["metric"] == "auroc") & s["self"])].itertuples():
        note = str(r.note) if isinstance(r.note, str) else ""
        if not note and not np.isfinite(r.value):
            continue
        metric = "own AUROC" if r.metric == "auroc" else (
            f"self − other (AUROC) vs {r.behaviour}{' (same base model)' if r.same_base else ''}")
        rows.append({"task": r.task, "predictor": r.predictor, "metric": metric, "value": note or _row_text(r)})
    return pd.DataFrame(rows, columns=cols)


def cross_table(comp: Comparison) -> pd.DataFrame:
    """Per task, behaviour owner B and other predictor P: AUROC(B→B) − AUROC(P→B) on the items
    all three have, with its jackknife interval, or "not judged" and why (the class gate)."""
    s = comp.cross
    cols = ["task", "behaviour", "predictor", "self − predictor (AUROC)"]
    if s is None or s.empty:
        return pd.DataFrame(columns=cols)
    rows = [{"task": r.task, "behaviour": r.behaviour, "predictor": r.predictor,
             cols[3]: r.note if r.note else _row_text(r)}
            for r in s[s["metric"] == "self_minus_predictor"].itertuples()]
    return pd.DataFrame(rows, columns=cols)


def matched_table(comp: Comparison) -> pd.DataFrame:
    """Per Delegate Game variant and reference rate: each model's selection lift when it delegates
    that share of its items by P(T), or "not judged" and why (too few kept); "questions" says
    whether it played the reference's questions or other ones under the same variant name."""
    s = comp.matched
    cols = ["variant", "rate of", "rate", "model", "questions", "kept", "lift at that rate"]
    if s is None or s.empty:
        return pd.DataFrame(columns=cols)
    rows = [{"variant": r.variant, "rate of": r.reference, "rate": f"{r.rate:.2f}", "model": r.model_id,
             "questions": "the reference's" if r.same_items else "other ones", "kept": int(r.kept),
             cols[6]: r.note if isinstance(r.note, str) and r.note else _row_text(r)}
            for r in s.itertuples()]
    return pd.DataFrame(rows, columns=cols)


def fmt_number(v: float) -> str:
    return "" if pd.isna(v) else f"{v:.3g}"


def cell_text(r: pd.Series) -> str:
    """``0.33 [0.10, 0.70] n=9 · L12 α16 (best of 4)`` (interval and cell where they exist)."""
    txt = fmt_number(r["value"])
    if not (pd.isna(r["lo"]) or pd.isna(r["hi"])):
        txt += f" [{fmt_number(r['lo'])}, {fmt_number(r['hi'])}]"
    txt += f" n={int(r['n'])}"
    where = []
    if not pd.isna(r["layer_idx"]):
        where.append(f"L{int(r['layer_idx'])}")
    if not pd.isna(r["alpha"]) and r["alpha"] != 0:
        where.append(f"α{r['alpha']:g}")
    if where:
        txt += " · " + " ".join(where)
        if str(r["metric"]).endswith(HELD_OUT):
            of = f", of {r['n_cells']}" if r["n_cells"] > 1 else ""
            txt += f" (picked on the other half of the concepts{of})"
        elif r["n_cells"] > 1 and str(r["role"]).startswith("headline"):
            txt += f" (best of {r['n_cells']})"
    return txt


def wide_table(comp: Comparison) -> pd.DataFrame:
    """Rows (task, variant, metric), one column per model, cells from ``cell_text``."""
    h = comp.headline
    if h.empty:
        return pd.DataFrame(columns=["task", "variant", "metric", *comp.models])
    h = h.assign(text=h.apply(cell_text, axis=1))
    wide = h.pivot_table(index=["task", "variant", "metric"], columns="model_id", values="text",
                         aggfunc="first", sort=False).reset_index()
    for m in comp.models:
        if m not in wide:
            wide[m] = ""
    order = {t: i for i, t in enumerate(HEADLINES)}
    first = h.drop_duplicates(["task", "variant", "metric"]).reset_index(drop=True)
    rank = {(r.task, r.variant, r.metric): (order.get(r.task, len(order)), r.task, i)
            for i, r in enumerate(first.itertuples())}
    wide["_k"] = [rank[(t, v, m)] for t, v, m in zip(wide["task"], wide["variant"], wide["metric"])]
    wide = wide.sort_values("_k").drop(columns="_k")
    return wide[["task", "variant", "metric", *comp.models]].fillna("").reset_index(drop=True)
