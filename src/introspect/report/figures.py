"""Plotly figures built from the tidy summary table (``metrics.summarize``).

Each builder takes the summary and returns a list of ``Panel`` (title, caption, figure); a builder
with no data for its task returns an empty list, so the dashboard shows only what exists.
Error bars and bands are the summary's 95% intervals (the ``ci`` column names each one's method:
design-effect Wilson, Newcombe, Student t over concepts, ...). Task A's figures are in ``figures_a``; a figure that
shows one cell of a grid shows the cell picked on half of the concepts and measured on the other
half, or says that its pick is post hoc.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from introspect.report.figures_a import BUILDERS_A
from introspect.report.panels import FONT, GREY_BAND, PALETTE, Panel, customdata
from introspect.report.panels import err as _err
from introspect.report.panels import fmt_alpha as _fmt_alpha
from introspect.report.panels import label as _label
from introspect.report.panels import rgba as _rgba
from introspect.report.panels import style as _style
from introspect.report.panels import task as _task
from introspect.report.shapes import LINE_LAYER, kinds_of

__all__ = ["FONT", "GREY_BAND", "PALETTE", "Panel", "build_figures"]


# ---------------------------------------------------------------- Task B

_B_METRICS = {"strict_success": "strict success", "thought_correct": "thought correct",
               "repeat_correct": "repeat correct", "mc_accuracy": "MC accuracy (chance 10%)"}
_CELL = ["model_id", "variant", "layer_idx", "alpha", "alpha_units"]


def _shown_cell(b: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """Per (model, variant): the rows of the one cell a bar chart shows, and how it was picked.

    Held-out rows (``…@held_out``: picked on half of the concepts) when the summariser made
    them; else the only cell; else the cell with the best first metric, flagged post hoc."""
    held = b[b["metric"].str.endswith("@held_out")]
    out, how = [], set()
    for (_, _), g in b.groupby(["model_id", "variant"]):
        cells = g[~g["metric"].str.endswith("@held_out")][_CELL[2:]].drop_duplicates()
        h = held[(held["model_id"] == g["model_id"].iloc[0]) & (held["variant"] == g["variant"].iloc[0])]
        if not h.empty:
            out.append(h.assign(metric=h["metric"].str.removesuffix("@held_out")))
            how.add("held-out")
        elif len(cells) <= 1:
            out.append(g)
            how.add("single")
        else:
            first = next((f"{m}:injected" for m in _B_METRICS
                          if (g["metric"] == f"{m}:injected").any()), None)
            best = g[g["metric"] == first].sort_values(["value", "layer_idx"],
                                                       ascending=[False, True]).head(1)
            out.append(g.merge(best[_CELL], on=_CELL))
            how.add("post-hoc")
    return (pd.concat(out) if out else b.iloc[:0]), ", ".join(sorted(how))


def task_b_bars(summary: pd.DataFrame) -> list[Panel]:
    """Per model: each Task B rate, injected vs matched control, in one honestly picked cell."""
    b = _task(summary, "B")
    shown, how = _shown_cell(b)
    present = [m for m in _B_METRICS if (shown["metric"] == f"{m}:injected").any()]
    if not present:
        return []
    n_cols = min(len(present), 2)  # two panes a row: four in one row overlapped titles and labels
    n_rows = -(-len(present) // n_cols)
    fig = make_subplots(rows=n_rows, cols=n_cols, subplot_titles=[_B_METRICS[m] for m in present],
                        horizontal_spacing=0.1, vertical_spacing=0.3 if n_rows > 1 else 0.1)
    multi = shown["variant"].nunique() > 1
    for k, m in enumerate(present):
        for j, cond in enumerate(("injected", "control")):
            rows = shown[shown["metric"] == f"{m}:{cond}"]
            x = [_label(r.model_id, r.variant if multi else "") for r in rows.itertuples()]
            cd = np.column_stack([rows["layer_idx"].astype(float), rows["alpha"], rows["n"],
                                  rows["lo"], rows["hi"], rows["ci"]])
            fig.add_trace(go.Bar(
                x=x, y=rows["value"], name=cond, marker_color=PALETTE[0] if j == 0 else "#9aa0a6",
                error_y=_err(rows), customdata=cd, legendgroup=cond, showlegend=k == 0,
                hovertemplate=(f"{cond}: %{{y:.0%}} [%{{customdata[3]:.0%}}, "
                               "%{customdata[4]:.0%}]<br>layer %{customdata[0]}, α "
                               "%{customdata[1]}<br>n = %{customdata[2]}<br>CI: %{customdata[5]}"
                               "<extra></extra>"),
            ), row=k // n_cols + 1, col=k % n_cols + 1)
        if m == "mc_accuracy":
            fig.add_hline(y=0.1, line_dash="dot", line_color="#666", row=k // n_cols + 1,
                          col=k % n_cols + 1)
        fig.update_yaxes(range=[0, 1.05], tickformat=".0%", row=k // n_cols + 1, col=k % n_cols + 1)
    fig.update_xaxes(tickangle=-20, automargin=True)
    fig.update_layout(barmode="group")
    pick = {"held-out": "the cell picked by the injected−control difference on half of the "
                        "concepts, with rates on the other half",
            "single": "the only (layer, α) cell", "post-hoc": "the cell with the highest "
            "injected rate (a post-hoc pick: optimistic)"}
    return [Panel(
        "Task B · thoughts vs text · one cell per model",
        "With a concept injected over a sentence, can the model name the injected 'thought' and "
        "still repeat the sentence exactly? Strict success needs both. Bars: each rate at "
        + "; ".join(pick[h] for h in how.split(", ")) + ", next to the matched control "
        "answers (same prompts and sample streams, no injection). Error bars: 95% CIs "
        "(intervals over concepts).",
        _style(fig, 130 + 320 * n_rows))]


def task_b_layers(summary: pd.DataFrame) -> list[Panel]:
    """Per layer, one line per α: the main Task B rate, injected and matched control."""
    b = _task(summary, "B")
    b = b[~b["metric"].str.endswith("@held_out")]
    if LINE_LAYER not in kinds_of(b):
        return []  # one layer: a line over layers would be one point (the bars show that cell)
    metric = next((m for m in _B_METRICS if (b["metric"] == f"{m}:injected").any()), None)
    if metric is None:
        return []
    fig = go.Figure()
    lines = b[b["metric"] == f"{metric}:injected"][["model_id", "variant", "alpha", "alpha_units"]]
    lines = lines.drop_duplicates()
    multi = lines["variant"].nunique() > 1
    for k, r in enumerate(lines.itertuples()):
        keys = ((b["model_id"] == r.model_id) & (b["variant"] == r.variant)
                & (b["alpha"] == r.alpha) & (b["alpha_units"] == r.alpha_units))
        color = PALETTE[k % len(PALETTE)]
        name = _label(r.model_id, r.variant if multi else "") + f" (α={_fmt_alpha(r.alpha)})"
        for cond, dash in (("injected", None), ("control", "dot")):
            rows = b[keys & (b["metric"] == f"{metric}:{cond}")].dropna(subset=["layer_idx"])
            rows = rows.sort_values("layer_idx")
            if rows["layer_idx"].nunique() < 2:
                continue  # this line would be one point
            cd = customdata(rows)
            fig.add_trace(go.Scatter(
                x=rows["layer_idx"].astype(int), y=rows["value"], mode="lines+markers",
                name=name if cond == "injected" else f"{name} control", legendgroup=name,
                line=dict(color=color, dash=dash), error_y=_err(rows) if cond == "injected" else None,
                customdata=cd,
                hovertemplate=(f"{cond}: %{{y:.0%}} [%{{customdata[0]:.0%}}, %{{customdata[1]:.0%}}]"
                               "<br>layer %{x}<br>n = %{customdata[2]}<extra>" + name + "</extra>")))
    fig.update_layout(xaxis=dict(title="layer"),
                      yaxis=dict(title=_B_METRICS[metric], range=[0, 1.05], tickformat=".0%"))
    return [Panel(
        f"Task B · {_B_METRICS[metric]} per layer",
        "The same rate across injection layers, one line per α (no cell is picked). Solid "
        "with 95% CIs: injected; dotted: matched control answers.",
        _style(fig, 420), kind=LINE_LAYER)]


# ---------------------------------------------------------------- Task C


def task_c_bars(summary: pd.DataFrame) -> list[Panel]:
    """Δ-intentional (vs matched control) for the matching concept and a mismatched one."""
    c = _task(summary, "C")
    c = c[c["metric"].isin(["delta_intentional:injected", "delta_intentional:mismatch"])]
    if c.empty:
        return []
    cells = c[["model_id", "variant", "layer_idx", "alpha"]].drop_duplicates()
    multi_cell = cells.groupby("model_id").size().max() > 1

    def lab(r) -> str:
        where = (f"L{int(r.layer_idx)} α{_fmt_alpha(r.alpha)}"
                 if multi_cell and not pd.isna(r.layer_idx) else "")
        return _label(r.model_id, "" if r.variant == "default" else r.variant, where)

    fig = go.Figure()
    for k, (metric, name) in enumerate((("delta_intentional:injected", "matching concept"),
                                        ("delta_intentional:mismatch", "mismatched concept"))):
        rows = c[c["metric"] == metric]
        if rows.empty:
            continue
        fig.add_trace(go.Bar(
            x=[lab(r) for r in rows.itertuples()], y=rows["value"], name=name,
            marker_color=PALETTE[k] if k == 0 else "#9aa0a6", error_y=_err(rows),
            customdata=customdata(rows),
            hovertemplate=(f"{name}: Δ %{{y:+.0%}} [%{{customdata[0]:+.0%}}, "
                           "%{customdata[1]:+.0%}]<br>n = %{customdata[2]}, concepts = "
                           "%{customdata[3]}<br>Holm p = %{customdata[5]:.3g}<extra></extra>")))
    fig.add_hline(y=0, line_color="#444", line_width=1)
    fig.update_layout(barmode="group", yaxis=dict(title="Δ % intentional vs control",
                                                  tickformat="+.0%"))
    return [Panel(
        "Task C · prefill intent · Δ-intentional",
        "A word is prefilled into the assistant's reply and the model is asked whether it "
        "meant it. Bars: change in the share of 'yes, intended' answers versus the matched "
        "control (same prompt and samples, no injection), when the matching concept (or a "
        "mismatched one) is injected before the prefill; every cell is shown. Error bars: 95% "
        "intervals over concepts; hover for the Holm-adjusted sign-flip p.",
        _style(fig, 420))]


# ---------------------------------------------------------------- Task D


def _band(fig: go.Figure, x: list, lo: np.ndarray, hi: np.ndarray, color: str, name: str,
          group: str, show: bool, col: int = 1) -> None:
    ok = ~(np.isnan(lo) | np.isnan(hi))
    xs = [v for v, keep in zip(x, ok) if keep]
    fig.add_trace(go.Scatter(x=xs + xs[::-1], y=list(hi[ok]) + list(lo[ok][::-1]), fill="toself",
                             mode="lines", fillcolor=color, line=dict(width=0), hoverinfo="skip",
                             name=name, legendgroup=group, showlegend=show), row=1, col=col)


_D_PANES = (("delta_cos", "delta_cos_ctrl", "raw cosines"),
            ("delta_cos_centred", "delta_cos_ctrl_centred", "mean-centred cosines"))


def _d_figure(d: pd.DataFrame, line_key: str) -> go.Figure:
    panes = [p for p in _D_PANES if (d["metric"] == p[0]).any()]
    fig = make_subplots(rows=1, cols=len(panes), subplot_titles=[p[2] for p in panes],
                        horizontal_spacing=0.08)
    for c, (metric, ctrl_metric, _) in enumerate(panes, 1):
        for k, (name, sub) in enumerate(d.groupby(line_key, sort=True)):
            color = PALETTE[k % len(PALETTE)]
            contrast = sub[sub["metric"] == metric]["condition"].iloc[0] if (
                sub["metric"] == metric).any() else ""
            label = f"{name} ({contrast})" if contrast else str(name)
            ctl = sub[sub["metric"] == ctrl_metric].sort_values("layer_idx")
            if not ctl.empty:
                _band(fig, ctl["layer_idx"].astype(int).tolist(), ctl["lo"].to_numpy(float),
                      ctl["hi"].to_numpy(float), GREY_BAND, "unrelated concepts (95% CI)", "ctrl",
                      k == 0 and c == 1, c)
            main = sub[sub["metric"] == metric].sort_values("layer_idx")
            x = main["layer_idx"].astype(int).tolist()
            _band(fig, x, main["lo"].to_numpy(float), main["hi"].to_numpy(float),
                  _rgba(color, 0.18), label, label, False, c)
            fig.add_trace(go.Scatter(
                x=x, y=main["value"], mode="lines+markers", name=label, legendgroup=label,
                showlegend=c == 1, line=dict(color=color, width=2.5), customdata=customdata(main),
                hovertemplate=("Δcos %{y:.3f} [%{customdata[0]:.3f}, %{customdata[1]:.3f}]"
                               "<br>layer %{x}<br>n = %{customdata[2]}, concepts = "
                               "%{customdata[3]}<extra>" + label + "</extra>")), row=1, col=c)
            fig.add_hline(y=0, line_color="#444", line_width=1, row=1, col=c)
        fig.update_xaxes(title_text="layer", row=1, col=c)
    fig.update_yaxes(title_text="Δ mean cosine (paired)", row=1, col=1)
    fig.update_layout(hovermode="x unified")
    return _style(fig, 420)


def task_d_curves(summary: pd.DataFrame) -> list[Panel]:
    """Δ-activation per layer (raw and mean-centred) with the unrelated-concept band: per model
    (lines = think − don't think, rewarded − punished), and across models when there are several."""
    d = _task(summary, "D")
    d = d[d["metric"].isin([m for p in _D_PANES for m in p[:2]]) & d["layer_idx"].notna()]
    if d.empty:
        return []
    caption = ("While writing a sentence, the model is told to think (or not to think) about a "
               "word, or promised a reward (or a punishment) for thinking about it. Lines: per "
               "layer, the paired difference in mean cosine between the sentence's activations and "
               "the word's concept vector (shaded: 95% Student-t interval over concepts), on raw "
               "and on mean-centred residuals. Grey band: the same difference measured against "
               "unrelated concepts' vectors — what any concept would show.")
    panels = []
    for model, sub in d.groupby("model_id", sort=True):
        panels.append(Panel(f"Task D · intentional control · {model}", caption,
                            _d_figure(sub, "variant")))
    if d["model_id"].nunique() > 1:
        pick = "plain" if (d["variant"] == "plain").any() else sorted(d["variant"].unique())[0]
        panels.append(Panel(f"Task D · intentional control · all models ({pick})", caption,
                            _d_figure(d[d["variant"] == pick], "model_id")))
    return panels


# ---------------------------------------------------------------- other tasks


def generic_bars(summary: pd.DataFrame, skip: tuple[str, ...] = ("A", "B", "C", "D")) -> list[Panel]:
    """One bar chart per other task: every rate metric (0-1) with its CI, one colour per model."""
    rest = summary[~summary["task"].isin(skip) & ~summary["metric"].str.startswith("mean_")]
    rest = rest[rest["lo"].notna() & rest["value"].between(0, 1)]
    panels = []
    for task, sub in rest.groupby("task", sort=True):
        fig = go.Figure()
        for k, (model, rows) in enumerate(sub.groupby("model_id", sort=True)):
            x = [r.metric + ("" if r.variant == "default" else f" ({r.variant})")
                 + ("" if pd.isna(r.layer_idx) else f" L{int(r.layer_idx)}")
                 for r in rows.itertuples()]
            cd = np.column_stack([rows["lo"], rows["hi"], rows["n"]])
            fig.add_trace(go.Bar(
                x=x, y=rows["value"], name=str(model), marker_color=PALETTE[k % len(PALETTE)],
                error_y=_err(rows), customdata=cd,
                hovertemplate=("%{x}: %{y:.0%} [%{customdata[0]:.0%}, %{customdata[1]:.0%}]"
                               "<br>n = %{customdata[2]}<extra>" + str(model) + "</extra>")))
        fig.update_layout(barmode="group", yaxis=dict(range=[0, 1.05], tickformat=".0%"),
                          xaxis=dict(tickangle=-30))
        panels.append(Panel(
            f"{task} · rates", "Mean of each yes/no grade per condition (metric:condition), "
            "with 95% Wilson CIs.", _style(fig, 440)))
    return panels


BUILDERS = (*BUILDERS_A, task_b_bars, task_b_layers, task_c_bars, task_d_curves, generic_bars)


def build_figures(summary: pd.DataFrame) -> list[Panel]:
    """Every panel that has data, in dashboard order."""
    if summary.empty:
        return []
    out: list[Panel] = []
    for build in BUILDERS:
        out += build(summary)
    return [p for p in out if p.fig.data]
