"""Plotly figures built from the tidy summary table (``metrics.summarize``).

Each builder takes the summary and returns a list of ``Panel`` (title, caption, figure); a builder
with no data for its task returns an empty list, so the dashboard shows only what exists.
Error bars and bands are the 95% intervals of the summary (Wilson for rates, bootstrap otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

PALETTE = qualitative.Plotly
GREY_BAND = "rgba(120,120,120,0.22)"
FONT = dict(family="Inter, Segoe UI, Helvetica, Arial, sans-serif", size=13)


@dataclass
class Panel:
    """One figure of the dashboard with its heading and a short explanation."""

    title: str
    caption: str
    fig: go.Figure


def _style(fig: go.Figure, height: int, **kw) -> go.Figure:
    fig.update_layout(template="plotly_white", height=height, font=FONT,
                      margin=dict(l=60, r=30, t=60, b=60), **kw)
    return fig


def _rgba(hex_color: str, a: float) -> str:
    h = hex_color.lstrip("#")
    r, g, b = (int(h[i:i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{a})"


def _err(sub: pd.DataFrame) -> dict:
    v, lo, hi = (sub[c].to_numpy(float) for c in ("value", "lo", "hi"))
    return dict(type="data", symmetric=False, array=np.nan_to_num(hi - v),
                arrayminus=np.nan_to_num(v - lo), thickness=1.5, width=4)


def _task(summary: pd.DataFrame, task: str) -> pd.DataFrame:
    return summary[summary["task"] == task]


def _fmt_alpha(a: float) -> str:
    return f"{a:g}"


def _label(model: str, *parts: str) -> str:
    extra = " · ".join(p for p in parts if p)
    return f"{model} · {extra}" if extra else model


# ---------------------------------------------------------------- Task A


def _grid(sub: pd.DataFrame, layers: list, alphas: list) -> tuple[np.ndarray, np.ndarray]:
    z = np.full((len(layers), len(alphas)), np.nan)
    cd = np.full((len(layers), len(alphas), 3), np.nan)
    for r in sub.itertuples():
        i, j = layers.index(r.layer_idx), alphas.index(r.alpha)
        z[i, j] = r.value
        cd[i, j] = (r.lo, r.hi, r.n)
    return z, cd


def task_a_heatmaps(summary: pd.DataFrame) -> list[Panel]:
    """Layer x alpha heatmaps of TPR, FPR and Net (TPR - FPR), one figure per model/variant."""
    a = _task(summary, "A")
    a = a[a["metric"].isin(["tpr", "fpr", "net"]) & a["layer_idx"].notna()]
    panels = []
    for (model, variant, units), sub in a.groupby(["model_id", "variant", "alpha_units"]):
        layers = sorted(sub["layer_idx"].dropna().unique().tolist())
        alphas = sorted(sub["alpha"].unique().tolist())
        fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.09,
                            subplot_titles=("TPR (detected | injected)",
                                            "FPR (detected | control)", "Net = TPR − FPR"))
        for k, metric in enumerate(("tpr", "fpr", "net")):
            z, cd = _grid(sub[sub["metric"] == metric], layers, alphas)
            fig.add_trace(go.Heatmap(
                z=z, x=[_fmt_alpha(x) for x in alphas], y=[str(int(y)) for y in layers],
                customdata=cd, coloraxis="coloraxis2" if metric == "net" else "coloraxis",
                texttemplate="%{z:.0%}", xgap=2, ygap=2, name=metric.upper(),
                hovertemplate=(f"{metric.upper()} %{{z:.0%}} [%{{customdata[0]:.0%}}, "
                               "%{customdata[1]:.0%}]<br>layer %{y}, α %{x}"
                               "<br>n = %{customdata[2]}<extra></extra>"),
            ), row=1, col=k + 1)
            fig.update_xaxes(title_text=f"α ({units})", type="category", row=1, col=k + 1)
            fig.update_yaxes(title_text="layer" if k == 0 else None, type="category",
                             row=1, col=k + 1)
        fig.update_layout(
            coloraxis=dict(colorscale="Blues", cmin=0, cmax=1,
                           colorbar=dict(title="rate", x=0.63, len=0.9, tickformat=".0%")),
            coloraxis2=dict(colorscale="RdBu", cmid=0, cmin=-1, cmax=1,
                            colorbar=dict(title="net", x=1.0, len=0.9, tickformat=".0%")),
        )
        panels.append(Panel(
            f"Task A · injected-thought detection · {_label(model, variant)}",
            "Does the model report an injected thought? Each cell is one (layer, α) setting. "
            "TPR: share of injected trials where it said it detected one; FPR: same on control "
            "trials with no injection; Net = TPR − FPR (bootstrap CI). Hover for n and the 95% CI.",
            _style(fig, 120 + 34 * max(len(layers), 4))))
    return panels


# ---------------------------------------------------------------- Task B

_B_METRICS = {"strict_success": "strict success", "thought_correct": "thought correct",
              "repeat_correct": "repeat correct", "mc_accuracy": "MC accuracy (chance 10%)"}


def _best(sub: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Per (model, variant) the row of ``metric`` with the highest value (lowest layer on ties)."""
    rows = sub[sub["metric"] == metric].sort_values(["value", "layer_idx"],
                                                    ascending=[False, True])
    return rows.drop_duplicates(["model_id", "variant"], keep="first")


def _companion(sub: pd.DataFrame, best: pd.DataFrame, metric: str) -> pd.DataFrame:
    keys = ["model_id", "variant", "layer_idx", "alpha", "alpha_units"]
    other = sub[sub["metric"] == metric]
    return best[keys].merge(other, on=keys, how="left")


def task_b_bars(summary: pd.DataFrame) -> list[Panel]:
    """Per model: each Task B rate at its best (layer, α) cell, injected vs control."""
    b = _task(summary, "B")
    present = [m for m in _B_METRICS if (b["metric"] == f"{m}:injected").any()]
    if not present:
        return []
    fig = make_subplots(rows=1, cols=len(present), subplot_titles=[_B_METRICS[m] for m in present],
                        horizontal_spacing=0.06)
    for k, m in enumerate(present):
        best = _best(b, f"{m}:injected")
        ctl = _companion(b, best, f"{m}:control")
        multi = best["variant"].nunique() > 1
        x = [_label(r.model_id, r.variant if multi else "") for r in best.itertuples()]
        for j, (name, rows) in enumerate((("injected", best), ("control", ctl))):
            cd = np.column_stack([rows["layer_idx"].astype(float), rows["alpha"], rows["n"],
                                  rows["lo"], rows["hi"]])
            fig.add_trace(go.Bar(
                x=x, y=rows["value"], name=name, marker_color=PALETTE[j] if j == 0 else "#9aa0a6",
                error_y=_err(rows), customdata=cd, legendgroup=name, showlegend=k == 0,
                hovertemplate=(f"{name}: %{{y:.0%}} [%{{customdata[3]:.0%}}, "
                               "%{customdata[4]:.0%}]<br>layer %{customdata[0]}, α "
                               "%{customdata[1]}<br>n = %{customdata[2]}<extra></extra>"),
            ), row=1, col=k + 1)
        if m == "mc_accuracy":
            fig.add_hline(y=0.1, line_dash="dot", line_color="#666", row=1, col=k + 1)
        fig.update_yaxes(range=[0, 1.05], tickformat=".0%", row=1, col=k + 1)
    fig.update_layout(barmode="group")
    return [Panel(
        "Task B · thoughts vs text · best setting per model",
        "With a concept injected over a sentence, can the model name the injected 'thought' and "
        "still repeat the sentence exactly? Strict success needs both. Bars show each rate at the "
        "(layer, α) where the injected rate is highest (hover for it), next to the same rate on "
        "control trials; error bars are 95% Wilson CIs.",
        _style(fig, 430))]


def task_b_layers(summary: pd.DataFrame) -> list[Panel]:
    """Per layer at each model's best α: the main Task B rate (strict success if asked)."""
    b = _task(summary, "B")
    metric = next((m for m in _B_METRICS if (b["metric"] == f"{m}:injected").any()), None)
    if metric is None:
        return []
    best = _best(b, f"{metric}:injected")
    fig = go.Figure()
    multi = best["variant"].nunique() > 1
    for k, r in enumerate(best.itertuples()):
        keys = ((b["model_id"] == r.model_id) & (b["variant"] == r.variant)
                & (b["alpha"] == r.alpha) & (b["alpha_units"] == r.alpha_units))
        color = PALETTE[k % len(PALETTE)]
        name = _label(r.model_id, r.variant if multi else "") + f" (α={_fmt_alpha(r.alpha)})"
        for cond, dash in (("injected", None), ("control", "dot")):
            rows = b[keys & (b["metric"] == f"{metric}:{cond}")].dropna(subset=["layer_idx"])
            rows = rows.sort_values("layer_idx")
            if rows.empty:
                continue
            x = rows["layer_idx"].astype(int).astype(str)
            cd = np.column_stack([rows["lo"], rows["hi"], rows["n"]])
            tmpl = (f"{cond}: %{{y:.0%}} [%{{customdata[0]:.0%}}, %{{customdata[1]:.0%}}]"
                    "<br>layer %{x}<br>n = %{customdata[2]}<extra>" + name + "</extra>")
            if cond == "injected":
                fig.add_trace(go.Bar(x=x, y=rows["value"], name=name, marker_color=color,
                                     error_y=_err(rows), customdata=cd, hovertemplate=tmpl,
                                     legendgroup=name))
            else:
                fig.add_trace(go.Scatter(x=x, y=rows["value"], name=f"{name} control",
                                         mode="lines+markers", customdata=cd, hovertemplate=tmpl,
                                         line=dict(color=color, dash=dash), legendgroup=name))
    fig.update_layout(barmode="group", xaxis=dict(title="layer", type="category"),
                      yaxis=dict(title=_B_METRICS[metric], range=[0, 1.05], tickformat=".0%"))
    return [Panel(
        f"Task B · {_B_METRICS[metric]} per layer",
        "The same rate across injection layers, at the α where each model does best. Bars: "
        "injected trials with 95% Wilson CIs; dotted line: control trials.",
        _style(fig, 420))]


# ---------------------------------------------------------------- Task C


def task_c_bars(summary: pd.DataFrame) -> list[Panel]:
    """Δ-intentional (vs control) for the matching concept and a mismatched one, with CIs."""
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
        cd = np.column_stack([rows["lo"], rows["hi"], rows["n"]])
        fig.add_trace(go.Bar(
            x=[lab(r) for r in rows.itertuples()], y=rows["value"], name=name,
            marker_color=PALETTE[k] if k == 0 else "#9aa0a6", error_y=_err(rows), customdata=cd,
            hovertemplate=(f"{name}: Δ %{{y:+.0%}} [%{{customdata[0]:+.0%}}, "
                           "%{customdata[1]:+.0%}]<br>n = %{customdata[2]}<extra></extra>")))
    fig.add_hline(y=0, line_color="#444", line_width=1)
    fig.update_layout(barmode="group", yaxis=dict(title="Δ % intentional vs control",
                                                  tickformat="+.0%"))
    return [Panel(
        "Task C · prefill intent · Δ-intentional",
        "A random word is prefilled into the assistant's reply and the model is asked whether it "
        "meant it. Bars: change in the share of 'yes, intended' answers versus no injection, when "
        "the matching concept (or a mismatched one) is injected before the prefill. Error bars: "
        "95% bootstrap CIs.",
        _style(fig, 420))]


# ---------------------------------------------------------------- Task D


def _band(fig: go.Figure, x: list, lo: np.ndarray, hi: np.ndarray, color: str, name: str,
          group: str, show: bool) -> None:
    ok = ~(np.isnan(lo) | np.isnan(hi))
    xs = [v for v, keep in zip(x, ok) if keep]
    fig.add_trace(go.Scatter(x=xs + xs[::-1], y=list(hi[ok]) + list(lo[ok][::-1]), fill="toself",
                             mode="lines", fillcolor=color, line=dict(width=0), hoverinfo="skip", name=name,
                             legendgroup=group, showlegend=show))


def _d_figure(d: pd.DataFrame, line_key: str) -> go.Figure:
    fig = go.Figure()
    for k, (name, sub) in enumerate(d.groupby(line_key, sort=True)):
        color = PALETTE[k % len(PALETTE)]
        ctl = sub[sub["metric"] == "delta_cos_ctrl"].sort_values("layer_idx")
        if not ctl.empty:
            _band(fig, ctl["layer_idx"].astype(int).tolist(), ctl["lo"].to_numpy(float),
                  ctl["hi"].to_numpy(float), GREY_BAND, "control words (95% CI)", "ctrl", k == 0)
        main = sub[sub["metric"] == "delta_cos"].sort_values("layer_idx")
        x = main["layer_idx"].astype(int).tolist()
        _band(fig, x, main["lo"].to_numpy(float), main["hi"].to_numpy(float), _rgba(color, 0.18),
              str(name), str(name), False)
        cd = np.column_stack([main["lo"], main["hi"], main["n"]])
        fig.add_trace(go.Scatter(
            x=x, y=main["value"], mode="lines+markers", name=str(name), legendgroup=str(name),
            line=dict(color=color, width=2.5), customdata=cd,
            hovertemplate=("Δcos %{y:.3f} [%{customdata[0]:.3f}, %{customdata[1]:.3f}]"
                           "<br>layer %{x}<br>n = %{customdata[2]}<extra>" + str(name)
                           + "</extra>")))
    fig.add_hline(y=0, line_color="#444", line_width=1)
    fig.update_layout(xaxis_title="layer", yaxis_title="Δ mean cosine (think − don't think)",
                      hovermode="x unified")
    return _style(fig, 420)


def task_d_curves(summary: pd.DataFrame) -> list[Panel]:
    """Δ-activation per layer with the control-word band: per model (lines = incentive variant),
    and across models (variant 'plain' or the first) when there are several."""
    d = _task(summary, "D")
    d = d[d["metric"].isin(["delta_cos", "delta_cos_ctrl"]) & d["layer_idx"].notna()]
    if d.empty:
        return []
    caption = ("While writing a sentence, the model is told to think (or not to think) about a "
               "word. Lines: per layer, mean cosine of the sentence's activations with the word's "
               "concept vector, think minus don't-think (shaded: 95% bootstrap CI). Grey band: "
               "the same difference measured against control words — the noise floor.")
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


BUILDERS = (task_a_heatmaps, task_b_bars, task_b_layers, task_c_bars, task_d_curves, generic_bars)


def build_figures(summary: pd.DataFrame) -> list[Panel]:
    """Every panel that has data, in dashboard order."""
    if summary.empty:
        return []
    out: list[Panel] = []
    for build in BUILDERS:
        out += build(summary)
    return [p for p in out if p.fig.data]
