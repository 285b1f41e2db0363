"""The Delegate Game's figures (paper 003) across models, from the toolkit's delegate summaries.

Why: 003 argues with three kinds of plot, and a table of numbers hides their shape. Its topline
(Figs 2, 4, 5) is the **self-accuracy lift** per model with its interval: accuracy on the
questions the model kept minus its baseline accuracy on all of them. Its evidence that the lift
is introspection (Fig 11) is the **introspection coefficient**, the odds ratio of delegating a
question the model got wrong at baseline against one it got right, alone and with surface
controls. Its evidence about heuristics (Figs 7–10) are **coefficient plots**: the odds ratio
of every term of the logistic regression of delegation on baseline error, surface features,
entropy and the teammate's accuracy. Each is drawn here from summary rows
(``tasks.selfknowledge.game_metrics``): ``self_accuracy_lift``, ``delegation_error_odds_ratio``
(Fisher's conditional estimate, no controls), ``odds_ratio_controlled[term]`` (per variant,
surface controls) and the pooled variants' ``odds_ratio[term]`` (questions clustered).

A figure never hides a missing point: a NaN lift (the model never delegated, or delegated
everything, so "kept" is not a choice) or an odds ratio that is not estimable or infinite draws
no marker, and the reason is written at that row and returned as a note. Nor does it draw a
number that measures nothing: a variant that never (or always) delegates has a Fisher odds
ratio in the summary only through the 0.5 added to its empty cells, so it gets the reason too. Feedback and
no-feedback variants stay separate rows, never averaged.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

TASK = "delegate"
CONTROLLED = "odds_ratio_controlled[baseline_error]"
UNCONTROLLED = "delegation_error_odds_ratio"


def _fmt(v: float) -> str:
    return "" if pd.isna(v) else f"{v:.3g}"


def _delegate(summary: pd.DataFrame) -> pd.DataFrame:
    if summary is None or summary.empty or "task" not in summary:
        return pd.DataFrame(columns=["model_id", "variant", "metric", "value", "lo", "hi", "n"])
    s = summary[summary["task"] == TASK].copy()
    s["variant"] = s["variant"].fillna("default").astype(str)
    return s


def _pooled(variant: str) -> bool:
    return variant.split("+")[0].endswith(":all")


def _value(s: pd.DataFrame, model: str, variant: str, metric: str) -> pd.Series | None:
    r = s[(s.model_id == model) & (s.variant == variant) & (s.metric == metric)]
    return None if r.empty else r.iloc[0]


def one_choice(s: pd.DataFrame, model: str, variant: str) -> str | None:
    """"never delegated (0 of n)" / "delegated all n" from the variant's delegation rate, else None."""
    d = _value(s, model, variant, "delegation_rate")
    if d is None or pd.isna(d["value"]):
        return None
    k, n = int(round(d["value"] * d["n"])), int(d["n"])
    return f"never delegated (0 of {n})" if k == 0 else f"delegated all {n}" if k == n else None


def why_no_lift(s: pd.DataFrame, model: str, variant: str) -> str:
    """Why a lift is NaN, from the same variant's delegation rate."""
    why = one_choice(s, model, variant)
    if why is None:
        return "lift undefined (no graded kept answers)"
    return why + (": no lift" if why.startswith("never") else ": nothing kept, no lift")


def _colors(models: list[str]) -> dict[str, str]:
    return {m: qualitative.Plotly[i % 10] for i, m in enumerate(models)}


def _point(x: float, lo: float, hi: float, y: str, name: str, color: str, hover: str, **kw) -> go.Scatter:
    lo, hi = (x if pd.isna(v) else v for v in (lo, hi))
    return go.Scatter(x=[x], y=[y], mode="markers", name=name, marker=dict(size=9, color=color),
                      error_x=dict(type="data", symmetric=False, array=[hi - x], arrayminus=[x - lo]),
                      hovertemplate=hover + "<extra></extra>", **kw)


def _missing(y: str, x: float, text: str, **kw) -> go.Scatter:
    """The reason a point is missing, written where it would be (no marker)."""
    return go.Scatter(x=[x], y=[y], mode="text", text=[text], textposition="middle right",
                      showlegend=False, hoverinfo="skip", textfont=dict(color="#777"), **kw)


def lift_figure(summary: pd.DataFrame, models: list[str] | None = None) -> tuple[go.Figure | None, list[str]]:
    """003 Figs 2/4/5: each model's self-accuracy lift per variant (teammate accuracy and
    feedback apart) with its Jeffreys interval; a zero line. A NaN lift: no point, its reason
    at that row (and in the notes)."""
    s = _delegate(summary)
    lift = s[(s.metric == "self_accuracy_lift") & ~s.variant.map(_pooled).astype(bool)]
    if lift.empty:
        return None, []
    models = [m for m in (models or sorted(lift.model_id.unique())) if m in set(lift.model_id)]
    variants = sorted(lift.variant.unique())
    colors = {v: qualitative.Plotly[i % 10] for i, v in enumerate(variants)}
    fig, notes = go.Figure(), []
    for r in lift.itertuples():
        y = f"{r.model_id} · {r.variant}"
        if pd.isna(r.value):
            why = why_no_lift(s, r.model_id, r.variant)
            fig.add_trace(_missing(y, 0.0, why))
            notes.append(f"{r.model_id}, {r.variant}: {why}")
            continue
        fig.add_trace(_point(r.value, r.lo, r.hi, y, r.variant, colors[r.variant],
                             f"{r.model_id} · {r.variant}<br>lift %{{x:.3g}} [{_fmt(r.lo)}, {_fmt(r.hi)}]<br>n={r.n}",
                             legendgroup=r.variant, showlegend=False))
    order = [f"{m} · {v}" for m in models for v in variants
             if not lift[(lift.model_id == m) & (lift.variant == v)].empty]
    fig.add_vline(x=0, line=dict(color="#999", dash="dot"))
    fig.update_yaxes(categoryorder="array", categoryarray=order[::-1])
    fig.update_layout(template="plotly_white", height=120 + 28 * len(order), margin=dict(l=320, r=40, t=50, b=40),
                      title="Self-accuracy lift (kept − baseline accuracy, same questions), 95% Jeffreys",
                      xaxis_title="self-accuracy lift")
    return fig, notes


def _or_ok(v: float) -> bool:
    return bool(np.isfinite(v)) and v > 0


def _why_no_or(r: pd.Series | None) -> str:
    if r is None or pd.isna(r["value"]):
        return "not estimable (no delegation, or separation)"
    return "odds ratio 0 or infinite (an empty cell: delegation follows error exactly in one direction)"


def coefficient_figure(summary: pd.DataFrame, models: list[str] | None = None) -> tuple[go.Figure | None, list[str]]:
    """003 Fig 11 (top) and Figs 7–10 (below): the introspection coefficient per model and
    variant, without controls (Fisher) and with surface controls (logit), then, per pooled
    variant, every term's odds ratio of delegating, questions clustered. Log axis, a line at 1."""
    s = _delegate(summary)
    if s.empty:
        return None, []
    models = models or sorted(s.model_id.unique())
    cells = s[s.metric.isin([UNCONTROLLED, CONTROLLED]) & ~s.variant.map(_pooled).astype(bool)][["model_id", "variant"]]
    cells = cells.drop_duplicates().sort_values(["model_id", "variant"])
    pooled = s[s.metric.str.startswith("odds_ratio[") & s.variant.map(_pooled).astype(bool)]
    panels = sorted(pooled.variant.unique())
    if cells.empty and not panels:
        return None, []
    titles = (["Introspection coefficient: odds ratio of delegating a baseline error"] if not cells.empty else [])
    titles += [f"{v}: odds ratios of delegating (logit, questions clustered)" for v in panels]
    heights = ([max(2, len(cells))] if not cells.empty else []) + [max(2, pooled[pooled.variant == v].metric.nunique())
                                                                  for v in panels]
    fig = make_subplots(rows=len(titles), cols=1, subplot_titles=titles, row_heights=heights,
                        vertical_spacing=min(0.12, 0.4 / len(titles)))
    notes: list[str] = []
    shown: set[str] = set()
    styles = {UNCONTROLLED: ("without controls (Fisher)", "#636EFA"), CONTROLLED: ("with surface controls (logit)", "#EF553B")}
    row_i = 0
    if not cells.empty:
        row_i = 1
        for c in cells.itertuples():
            y = f"{c.model_id} · {c.variant}"
            drawn, one = 0, one_choice(s, c.model_id, c.variant)
            if one:  # Fisher's estimate then comes from the 0.5 added to its empty cells alone
                why = f"{one}: no odds ratio (the summary's Fisher row is the 0.5 added to empty cells)"
                fig.add_trace(_missing(y, 1.0, why), row=1, col=1)
                notes.append(f"{y}: {why}")
                continue
            for metric, (name, color) in styles.items():
                r = _value(s, c.model_id, c.variant, metric)
                if r is None or not _or_ok(r["value"]):
                    notes.append(f"{y}, {name}: {_why_no_or(r)}")
                    continue
                fig.add_trace(_point(r["value"], r["lo"], r["hi"], y, name, color,
                                     f"{y}<br>{name}: OR %{{x:.3g}} [{_fmt(r['lo'])}, {_fmt(r['hi'])}]",
                                     legendgroup=name, showlegend=name not in shown), row=1, col=1)
                shown.add(name)
                drawn += 1
            if not drawn:  # the row stays, with its reason where the points would be
                why = _why_no_or(_value(s, c.model_id, c.variant, UNCONTROLLED))
                fig.add_trace(_missing(y, 1.0, "no odds ratio: " + why), row=1, col=1)
        fig.add_vline(x=0, line=dict(color="#999", dash="dot"), row=1, col=1)  # log axis: 10^0 = 1
    colors = _colors(models)
    for k, v in enumerate(panels, row_i + 1):
        sub = pooled[pooled.variant == v]
        for m in [m for m in models if m in set(sub.model_id)]:
            rows = sub[sub.model_id == m]
            good = rows[[_or_ok(x) for x in rows.value]]
            for r in rows[[not _or_ok(x) for x in rows.value]].itertuples():
                notes.append(f"{m}, {v}, {r.metric}: {_why_no_or(pd.Series({'value': r.value}))}")
            if good.empty:
                continue
            lo, hi = good.lo.fillna(good.value), good.hi.fillna(good.value)
            fig.add_trace(go.Scatter(
                x=good.value, y=[t[len("odds_ratio["):-1] for t in good.metric], mode="markers", name=m,
                marker=dict(size=9, color=colors[m]), legendgroup=m, showlegend=m not in shown,
                error_x=dict(type="data", symmetric=False, array=hi - good.value, arrayminus=good.value - lo),
                hovertemplate=f"{m}<br>%{{y}}: OR %{{x:.3g}}<extra></extra>"), row=k, col=1)
            shown.add(m)
        for m in [m for m in models if m not in set(sub.model_id) and m in set(s.model_id)]:
            notes.append(f"{m}, {v}: no pooled logit (never delegated, or it could not be fitted)")
        fig.add_vline(x=0, line=dict(color="#999", dash="dot"), row=k, col=1)
    fig.update_xaxes(type="log", title_text="odds ratio (log scale)")
    fig.update_layout(template="plotly_white", height=160 + 26 * sum(heights) + 60 * len(titles),
                      margin=dict(l=320, r=40, t=60, b=40))
    return fig, notes


def delegate_figures(summary: pd.DataFrame, models: list[str] | None = None) -> list[tuple[str, str, go.Figure, list[str]]]:
    """(id, title, figure, notes) of every 003 figure the summary has data for."""
    out = []
    for key, title, fn in (("sk-lift", "Delegate Game: self-accuracy lift (003 Figs 2, 4, 5)", lift_figure),
                           ("sk-coef", "Delegate Game: introspection coefficient and coefficient plots "
                                       "(003 Figs 7–11)", coefficient_figure)):
        fig, notes = fn(summary, models)
        if fig is not None:
            out.append((key, title, fig, notes))
    return out
