"""Task A's dashboard figures: detection beside the steering check, P(yes) curves, the controls.

Why its own module: task A has the most figures, and each must show every (layer, α) cell
rather than a picked one (a best cell is shown only when it was picked on half of the concepts
and measured on the other half). Every point carries its 95% interval from the summary; hover
shows the interval's method, n and the number of concepts.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from introspect.report.figures_regions import task_a_regions
from introspect.report.forest import steering_cells, steering_forest, task_a_forest
from introspect.report.panels import NOT_DETECTION, PALETTE, Panel, customdata
from introspect.report.panels import detection as _detection
from introspect.report.panels import err as _err
from introspect.report.panels import fmt_alpha as _fmt_alpha
from introspect.report.panels import label as _label
from introspect.report.panels import style as _style
from introspect.report.panels import task as _task
from introspect.report.shapes import FOREST, HEATMAP, LINE_ALPHA, grid_shape, kinds_of
from introspect.tasks.injection.metrics_steer import RULE

__all__ = ["BUILDERS_A", "NOT_DETECTION", "grid_shape", "task_a_forest"]

_cd = customdata


def _grid(sub: pd.DataFrame, layers: list, alphas: list) -> tuple[np.ndarray, np.ndarray]:
    z = np.full((len(layers), len(alphas)), np.nan)
    cd = np.full((len(layers), len(alphas), 6), np.nan, dtype=object)
    for r, c in zip(sub.itertuples(), _cd(sub)):
        i, j = layers.index(r.layer_idx), alphas.index(r.alpha)
        z[i, j] = r.value
        cd[i, j] = c
    return z, cd


_HEAT = (("tpr", "TPR (detected | injected)"), ("fpr", "FPR (detected | matched control)"),
         ("net", "Net = TPR − FPR (paired)"), ("steer_share", "share of concepts that steer"))


def task_a_heatmaps(summary: pd.DataFrame) -> list[Panel]:
    """Layer × α heatmaps of TPR, matched FPR, Net and, beside them, the steering check (only
    on a grid of at least 2 × 2 cells)."""
    a = _detection(summary)
    a = a[a["metric"].isin([m for m, _ in _HEAT])]
    panels = []
    for (model, variant, units), sub in a.groupby(["model_id", "variant", "alpha_units"]):
        if HEATMAP not in kinds_of(sub):
            continue
        layers = sorted(sub["layer_idx"].dropna().unique().tolist())
        alphas = sorted(sub["alpha"].unique().tolist())
        shown = [(m, t) for m, t in _HEAT if (sub["metric"] == m).any()]
        fig = make_subplots(rows=1, cols=len(shown), horizontal_spacing=0.07,
                            subplot_titles=[t for _, t in shown])
        for k, (metric, _) in enumerate(shown):
            z, cd = _grid(sub[sub["metric"] == metric], layers, alphas)
            extra = "<br>Holm p = %{customdata[5]:.3g}" if metric == "net" else ""
            fig.add_trace(go.Heatmap(
                z=z, x=[_fmt_alpha(x) for x in alphas], y=[str(int(y)) for y in layers],
                customdata=cd, coloraxis="coloraxis2" if metric == "net" else "coloraxis",
                texttemplate="%{z:.0%}", xgap=2, ygap=2, name=metric,
                hovertemplate=(f"{metric} %{{z:.0%}} [%{{customdata[0]:.0%}}, "
                               "%{customdata[1]:.0%}]<br>layer %{y}, α %{x}"
                               "<br>n = %{customdata[2]}, concepts = %{customdata[3]}"
                               "<br>CI: %{customdata[4]}" + extra + "<extra></extra>"),
            ), row=1, col=k + 1)
            fig.update_xaxes(title_text=f"α ({units})", type="category", row=1, col=k + 1)
            fig.update_yaxes(title_text="layer" if k == 0 else None, type="category",
                             row=1, col=k + 1)
        fig.update_layout(
            coloraxis=dict(colorscale="Blues", cmin=0, cmax=1, colorbar=dict(
                title="rate", x=1.0, len=0.45, y=0.78, tickformat=".0%")),
            coloraxis2=dict(colorscale="RdBu", cmid=0, cmin=-1, cmax=1, colorbar=dict(
                title="net", x=1.0, len=0.45, y=0.22, tickformat=".0%")))
        steer = ("The right-hand map is the steering check: " + RULE + "; a detection number "
                 "next to a cell where nothing steers cannot mean introspection. "
                 if any(m == "steer_share" for m, _ in shown) else
                 "These records carry no steering check. ")
        panels.append(Panel(
            f"Task A · injected-thought detection · {_label(model, variant)}",
            "Does the model report an injected thought? Each cell is one (layer, α) setting. "
            "TPR: share of injected answers that report one; FPR: the same among the control "
            "answers to the identical prompts and sample streams; Net = TPR − FPR over those "
            "pairs (Newcombe interval over concepts, Holm-adjusted sign-flip p in the hover). "
            + steer + "Hover for n, concepts and the 95% CI.",
            _style(fig, 140 + 34 * max(len(layers), 4)), kind=HEATMAP))
    return panels


def _curves(fig: go.Figure, rows: pd.DataFrame, name: str, color: str, at: tuple[int, int],
            dash=None, show: bool = True, fmt: str = ".2f") -> None:
    rows = rows.sort_values("alpha")
    if rows.empty:
        return
    fig.add_trace(go.Scatter(
        x=rows["alpha"], y=rows["value"], mode="lines+markers", name=name, legendgroup=name,
        showlegend=show, line=dict(color=color, dash=dash), error_y=_err(rows),
        customdata=_cd(rows),
        hovertemplate=(f"{name}: %{{y:{fmt}}} [%{{customdata[0]:{fmt}}}, %{{customdata[1]:{fmt}}}]"
                       "<br>α %{x}<br>n = %{customdata[2]}, concepts = %{customdata[3]}"
                       "<br>CI: %{customdata[4]}<extra></extra>")), row=at[0], col=at[1])


def _per_layer_figure(series: list[tuple[str, pd.DataFrame, str, str | None]], units: str,
                      y_title: str, fmt: str, y_range=None) -> go.Figure | None:
    """One small panel per layer (up to 4 a row), x = α, a line per series with error bars; None
    with fewer than two α (a one-point line says nothing: the forest plot shows that grid)."""
    if LINE_ALPHA not in kinds_of(pd.concat([s for _, s, _, _ in series])):
        return None
    layers = sorted({int(x) for _, s, _, _ in series for x in s["layer_idx"].dropna()})
    n_cols = min(len(layers), 4)
    n_rows = -(-len(layers) // n_cols)
    fig = make_subplots(rows=n_rows, cols=n_cols, shared_yaxes=True, horizontal_spacing=0.03,
                        vertical_spacing=0.12 if n_rows > 1 else 0.0,
                        subplot_titles=[f"layer {x}" for x in layers])
    for k, layer in enumerate(layers):
        r, c = divmod(k, n_cols)
        for name, s, color, dash in series:
            _curves(fig, s[s["layer_idx"] == layer], name, color, (r + 1, c + 1), dash, k == 0, fmt)
        fig.update_xaxes(title_text=f"α ({units})", row=r + 1, col=c + 1)
        fig.update_yaxes(range=y_range, row=r + 1, col=c + 1)
        if c == 0:
            fig.update_yaxes(title_text=y_title, row=r + 1, col=1)
    return _style(fig, 80 + 300 * n_rows)


def task_a_pyes(summary: pd.DataFrame) -> list[Panel]:
    """P(yes) vs α per layer: detection (injected), its matched control, bias questions."""
    panels = []
    for (model, variant, units), sub in _detection(summary).groupby(
            ["model_id", "variant", "alpha_units"]):
        b = sub  # bias questions are asked in the same framing (same variant)
        series = [("detection, injected", sub[sub["metric"] == "p_yes_mean:injected"], PALETTE[0], None),
                  ("detection, matched control", sub[sub["metric"] == "p_yes_mean:control"],
                   "#6e7781", "dot"),
                  ("bias question, injected", b[b["metric"] == "p_yes_mean:bias_injected"],
                   PALETTE[1], None),
                  ("bias question, not injected", b[b["metric"] == "p_yes_mean:bias_clean"],
                   PALETTE[1], "dot")]
        if series[0][1].empty:
            continue
        fig = _per_layer_figure(series, units, "mean P(yes)", ".2f", [0, 1])
        if fig is not None:
            panels.append(Panel(
                f"Task A · P(yes) vs α · {_label(model, variant)}",
                "First-token probability of 'yes' as the injection strength grows, per layer. "
                "Blue: the detection question with the concept injected; grey dotted: the same "
                "prompts and samples without injection; red: unrelated yes/no questions (right "
                "answer 'no') in the same framing with and without the same injection. A rise on "
                "the bias questions as large as on detection is a yes-bias, not introspection. "
                "Bars: 95% Student-t intervals over concepts.", fig, kind=LINE_ALPHA))
    return panels


def task_a_score(summary: pd.DataFrame) -> list[Panel]:
    """The introspection score vs α, one line per layer, with its concept-clustered CI."""
    s = _detection(summary)
    s = s[s["metric"] == "introspection_score"]
    panels = []
    for (model, variant, units), sub in s.groupby(["model_id", "variant", "alpha_units"]):
        if LINE_ALPHA not in kinds_of(sub):
            continue  # one α: the forest plot carries the score
        fig = go.Figure()
        for k, (layer, rows) in enumerate(sub.groupby("layer_idx")):
            rows = rows.sort_values("alpha")
            fig.add_trace(go.Scatter(
                x=rows["alpha"], y=rows["value"], mode="lines+markers", name=f"layer {int(layer)}",
                line=dict(color=PALETTE[k % len(PALETTE)]), error_y=_err(rows), customdata=_cd(rows),
                hovertemplate=("score %{y:+.3f} [%{customdata[0]:+.3f}, %{customdata[1]:+.3f}]"
                               "<br>α %{x}<br>n = %{customdata[2]}, concepts = %{customdata[3]}"
                               f"<extra>layer {int(layer)}</extra>")))
        fig.add_hline(y=0, line_color="#444", line_width=1)
        fig.update_layout(xaxis_title=f"α ({units})", yaxis_title="introspection score (Δ log-odds)")
        panels.append(Panel(
            f"Task A · introspection score · {_label(model, variant)}",
            "Per concept, the shift in the log-odds of P(yes) that the injection causes on the "
            "detection question minus its mean shift on ≥ 5 unrelated yes/no questions asked in the "
            "same framing with the same injection: a uniform push towards 'yes' scores 0, "
            "wherever P(yes) starts. Bars: 95% Student-t intervals over concepts.",
            _style(fig, 400), kind=LINE_ALPHA))
    return panels


_CONTROLS = (("tpr", "TPR (injected)", PALETTE[0], None), ("fpr", "FPR (matched control)", "#6e7781", "dot"),
             ("random_detection", "random vector", PALETTE[3], "dash"),
             ("concept_random_detection", "another concept's vector", PALETTE[4], "dash"),
             ("negative_detection", "−v", PALETTE[5], "dash"),
             ("identification", "identified the concept", PALETTE[2], None),
             ("identification:concept_random", "named it under another concept's vector", PALETTE[2], "dot"),
             ("tpr:coherent", "TPR, coherent answers", PALETTE[6], None))


def task_a_controls(summary: pd.DataFrame) -> list[Panel]:
    """Every detection-side rate per layer vs α: TPR beside its controls and conditionals."""
    panels = []
    for (model, variant, units), sub in _detection(summary).groupby(
            ["model_id", "variant", "alpha_units"]):
        series = [(name, sub[sub["metric"] == m], c, d) for m, name, c, d in _CONTROLS]
        series = [s for s in series if not s[1].empty]
        if len(series) < 3:
            continue
        fig = _per_layer_figure(series, units, "rate", ".0%", [0, 1.05])
        if fig is not None:
            fig.update_yaxes(tickformat=".0%")
            panels.append(Panel(
                f"Task A · controls · {_label(model, variant)}",
                "Per layer and α: TPR next to the matched FPR, the ablations (a norm-matched "
                "Gaussian vector, another concept's vector, −v), identification of the injected "
                "concept next to naming it under another concept's vector (the same stream: what "
                "guessing gives), and TPR among coherent answers. 95% intervals over concepts.", fig,
                kind=LINE_ALPHA))
    return panels


def task_a_steering(summary: pd.DataFrame) -> list[Panel]:
    """Per concept × cell: the lp rise in nats (the steering check), with the rule; a grid of one
    cell gets a forest plot of the concepts instead of a one-column heatmap."""
    s = steering_cells(summary)
    panels = []
    for model, sub in s.groupby("model_id"):
        sub = sub.sort_values(["layer_idx", "alpha"])
        if kinds_of(sub) == {FOREST}:  # one cell
            a = _task(summary, "A")
            panels.append(steering_forest(model, sub, a[(a["model_id"] == model) & (a["variant"] == "steer")]))
            continue
        cells = list(dict.fromkeys(sub["cell"]))
        words = sorted(sub["word"].unique())
        z = np.full((len(words), len(cells)), np.nan)
        cd = np.full((len(words), len(cells), 6), np.nan, dtype=object)
        for r, c in zip(sub.itertuples(), _cd(sub)):
            z[words.index(r.word), cells.index(r.cell)] = r.value
            cd[words.index(r.word), cells.index(r.cell)] = c
        fig = go.Figure(go.Heatmap(
            z=z, x=cells, y=words, customdata=cd, colorscale="PuOr", zmid=0, texttemplate="%{z:.1f}",
            colorbar=dict(title="nats"), xgap=1, ygap=1,
            hovertemplate=("%{y} at %{x}: %{z:.2f} nats over a random direction"
                           "<br>n = %{customdata[2]}<extra></extra>")))
        fig.update_layout(xaxis=dict(title="cell", type="category"),
                          yaxis=dict(title="concept", type="category"))
        panels.append(Panel(
            f"Task A · steering check · {model}",
            "Does each concept's vector move the model towards its concept? Injected into a "
            "neutral prompt as the detection trials inject, the log-probability of the concept's "
            "word forms at the first generated step minus its value under a Gaussian direction of "
            f"the same norm (any push raises rare words a little). {RULE}.",
            _style(fig, 160 + 22 * max(len(words), 4))))
    return panels


def task_a_held_out(summary: pd.DataFrame) -> list[Panel]:
    """Net at the cell picked on half of the concepts, measured on the other half."""
    h = _detection(summary)
    h = h[h["metric"] == "net@held_out"]
    if h.empty:
        return []
    fig = go.Figure()
    y = [_label(r.model_id, r.variant, f"L{int(r.layer_idx)} α{_fmt_alpha(r.alpha)}")
         for r in h.itertuples()]
    lo, hi = h["value"] - h["lo"], h["hi"] - h["value"]
    fig.add_trace(go.Scatter(
        x=h["value"], y=y, mode="markers", marker=dict(size=11, color=PALETTE[0]),
        error_x=dict(type="data", symmetric=False, array=np.nan_to_num(hi),
                     arrayminus=np.nan_to_num(lo)), customdata=_cd(h), text=h["note"],
        hovertemplate=("Net %{x:+.0%} [%{customdata[0]:+.0%}, %{customdata[1]:+.0%}]"
                       "<br>n = %{customdata[2]}, concepts = %{customdata[3]}<br>%{text}"
                       "<extra></extra>")))
    fig.add_vline(x=0, line_color="#444", line_width=1)
    fig.update_layout(xaxis=dict(title="Net on held-out concepts", tickformat="+.0%"),
                      yaxis=dict(type="category", automargin=True))
    return [Panel(
        "Task A · best cell, measured on held-out concepts",
        "The best (layer, α) is picked by Net on a seeded half of the concepts and its Net is "
        "shown on the other half, so the estimate carries no winner's curse (hover for the "
        "two halves). Bars: 95% CIs.", _style(fig, 160 + 40 * len(h)))]


BUILDERS_A = (task_a_forest, task_a_heatmaps, task_a_regions, task_a_pyes, task_a_score, task_a_controls,
              task_a_steering, task_a_held_out)
