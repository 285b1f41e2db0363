"""Dot-and-interval (forest) plots for a grid with one α: every condition and ablation a row.

Why its own module: a run with one layer and one α (the quick preset) has no curve to draw; a
line over α with one point says nothing and a 1 × 1 heatmap less. ``shapes.figure_kinds``
decides when these plots replace them. Each row is an estimate with its 95% interval from the
summary and is labelled with its n; hover adds the number of concepts and the interval's method.
"""

from __future__ import annotations

import html

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from introspect.report.panels import PALETTE, Panel, customdata, err, fmt_alpha, label, style, task
from introspect.report.panels import detection as _detection
from introspect.report.shapes import FOREST, kinds_of
from introspect.tasks.injection.metrics_steer import RULE

_FOREST = (("tpr", "TPR (injected)"), ("fpr", "FPR (matched control)"),
           ("random_detection", "yes under a Gaussian vector"),
           ("concept_random_detection", "yes under another concept's vector"),
           ("negative_detection", "yes under −v"), ("identification", "names the concept"),
           ("identification:concept_random", "names it under another concept's vector"),
           ("names_vector_word:concept_random", "names the other vector's word"),
           ("latent_identification", "its name rises most (latent)"),
           ("bias_wrong:injected", "wrong answers to bias questions, injected"),
           ("bias_wrong:clean", "wrong answers to bias questions, not injected"),
           ("bias_detection_reports", "detection reports to bias questions"))
_FOREST_DIFF = (("net", "Net = TPR − FPR"), ("net_vs_random", "Net over the Gaussian ablation"),
                ("net_beyond_yes_bias", "Net beyond the yes-bias"), ("bias_wrong_rise", "rise in wrong bias answers"),
                ("identification_vs_random", "naming vs under another vector"),
                ("follows_vector", "naming follows the vector"),
                ("latent_identification_vs_random", "latent naming vs under another vector"),
                ("latent_follows_vector", "latent naming follows the vector"))
ROW_PX = 30  # height of one forest row


def _n(v: object) -> str:
    return "" if pd.isna(v) else f"{int(v)}"


def forest_rows(fig: go.Figure, names: list[str], d: pd.DataFrame, color: str, fmt: str,
                row: int | None = None, col: int | None = None) -> None:
    """One dot per row of ``d`` at its value with its 95% interval; the y labels carry n (``row``,
    ``col``: the subplot, on a figure made by ``make_subplots``)."""
    if d.empty:
        return
    at = dict(row=row, col=col) if row is not None else {}
    fig.add_trace(go.Scatter(
        x=d["value"], y=names, mode="markers", marker=dict(color=color, size=10), error_x=err(d),
        customdata=customdata(d), showlegend=False,
        hovertemplate=(f"%{{y}}: %{{x:{fmt}}} [%{{customdata[0]:{fmt}}}, %{{customdata[1]:{fmt}}}]"
                       "<br>n = %{customdata[2]}, concepts = %{customdata[3]}<br>CI: %{customdata[4]}"
                       "<extra></extra>")), **at)
    ticks = [f"{html.escape(nm)} <span style='color:#59636e'>n={_n(n)}{_why(lo, g)}</span>" if _n(n)
             else html.escape(nm) for nm, n, lo, g in zip(names, d["n"], d["lo"], d["n_clusters"] if "n_clusters" in d else [None] * len(d))]
    fig.update_yaxes(type="category", tickvals=names, ticktext=ticks, automargin=True, **at)


def _why(lo: object, concepts: object) -> str:
    """Beside n, why a dot has no bar: too few concepts for an interval (``stats.clustered``)."""
    if not pd.isna(lo):
        return ""
    return f", {_n(concepts)} concepts: no interval" if _n(concepts) else ", no interval"


def task_a_forest(summary: pd.DataFrame) -> list[Panel]:
    """One α: a forest plot per cell of the conditions and ablations (rates) and of the paired
    differences the verdict reads, instead of one-point lines over α."""
    panels = []
    for (model, variant, units), sub in _detection(summary).groupby(["model_id", "variant", "alpha_units"]):
        if FOREST not in kinds_of(sub):
            continue
        for layer in sorted(sub["layer_idx"].dropna().unique()):
            cell = sub[sub["layer_idx"] == layer]
            pick = [[(name, cell[cell["metric"] == m].iloc[0]) for m, name in spec if (cell["metric"] == m).any()]
                    for spec in (_FOREST, _FOREST_DIFF)]
            if not pick[0] and not pick[1]:
                continue
            fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.34,
                                subplot_titles=["rates (95% CI over concepts)", "paired differences (95% CI)"])
            for k, (rows, color) in enumerate(((pick[0], PALETTE[0]), (pick[1], PALETTE[1]))):
                rows = rows[::-1]  # first row on top
                forest_rows(fig, [nm for nm, _ in rows], pd.DataFrame([r for _, r in rows]), color,
                            ".0%", 1, k + 1)
            fig.add_vline(x=0, line_color="#444", line_width=1, row=1, col=2)
            fig.update_xaxes(range=[-0.02, 1.02], tickformat=".0%", row=1, col=1)
            fig.update_xaxes(tickformat="+.0%", zeroline=False, row=1, col=2)
            alpha = float(cell["alpha"].iloc[0])
            panels.append(Panel(
                f"Task A · layer {int(layer)}, α {fmt_alpha(alpha)} ({units}) · {label(model, variant)}",
                "One cell of the grid (one α: no curve over α to draw). Left: each condition's rate "
                "with its 95% interval over concepts; a true detector also says yes under another "
                "concept's vector and under −v (injected thoughts too), not under a Gaussian vector. "
                "Right: the paired differences the verdict reads (Net, over the Gaussian ablation, "
                "beyond the yes-bias, naming and whether it follows the vector). n: answers (rates) "
                "or pairs (differences).",
                style(fig, 110 + ROW_PX * max(len(pick[0]), len(pick[1]), 4)), kind=FOREST))
    return panels


def steering_forest(model: str, sub: pd.DataFrame, cell_rows: pd.DataFrame) -> Panel:
    """The steering check of a one-cell grid: one row per concept (its lp rise over a random
    direction, in nats) under the mean over concepts with its 95% interval."""
    sub = sub.sort_values("value")
    r0 = sub.iloc[0]
    fig = go.Figure()
    mean = cell_rows[cell_rows["metric"] == "steer_lp_rise_vs_random"]
    names = [str(w) for w in sub["word"]]
    fig.add_trace(go.Scatter(
        x=sub["value"], y=names, mode="markers", marker=dict(color=PALETTE[4], size=9),
        customdata=customdata(sub), name="a concept",
        hovertemplate="%{y}: %{x:.2f} nats<br>n = %{customdata[2]}<extra></extra>"))
    ticks = [f"{html.escape(nm)} <span style='color:#59636e'>n={_n(n)}</span>" for nm, n in zip(names, sub["n"])]
    if not mean.empty:
        top = "mean over concepts"
        forest_rows(fig, [top], mean.head(1), PALETTE[0], ".2f")
        names, ticks = [*names, top], [*ticks, f"<b>{top}</b> <span style='color:#59636e'>"
                                               f"n={_n(mean['n'].iloc[0])}</span>"]
    fig.update_yaxes(type="category", categoryorder="array", categoryarray=names, tickvals=names,
                     ticktext=ticks, automargin=True)
    fig.add_vline(x=0, line_color="#444", line_width=1)
    fig.add_vline(x=1, line_color="#888", line_width=1, line_dash="dot")
    fig.update_layout(xaxis_title="nats over a random direction of the same norm", showlegend=False)
    return Panel(
        f"Task A · steering check · layer {int(r0.layer_idx)}, α {fmt_alpha(r0.alpha)} · {model}",
        "Does each concept's vector move the model towards its concept? Injected into a neutral "
        "prompt as the detection trials inject, the log-probability of the concept's word forms "
        "at the first generated step minus its value under a Gaussian direction of the same norm "
        "(any push raises rare words a little). One dot per concept; top row: the mean over "
        f"concepts with its 95% interval; dotted line: 1 nat. {RULE}.",
        style(fig, 110 + 24 * max(len(names), 4)), kind=FOREST)


def steering_cells(summary: pd.DataFrame) -> pd.DataFrame:
    """Task A's per-concept steering rows, with ``word`` and ``cell`` columns."""
    a = task(summary, "A")
    s = a[(a["variant"] == "steer") & a["metric"].str.startswith("steer_lp_rise_vs_random:")]
    return s.assign(word=s["metric"].str.removeprefix("steer_lp_rise_vs_random:"),
                    cell=[f"L{int(r.layer_idx)} α{fmt_alpha(r.alpha)}" for r in s.itertuples()])
