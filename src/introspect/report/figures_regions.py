"""Task A's region grid: where the injection sits, one row per token region.

Why one grid: the region comparison is read across regions, so they stand in one figure, each
row a region of one framing (and cell), each column a reading: Net, its paired difference from
the reference region (``metrics_regions``), Net beyond the yes-bias, and that region's own
steering check (the word's first-step log-prob rise over a random direction). Each cell shows
its estimate and 95% interval; a region whose steering check does not steer cannot say much.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from introspect.report.panels import Panel, task
from introspect.report.panels import fmt_alpha as _fmt_alpha
from introspect.report.panels import label as _label
from introspect.report.panels import style as _style
from introspect.tasks.injection.metrics_steer import RULE
from introspect.tasks.injection.regions import order, split

_COLS = (("net", "Net", "RdBu"), ("region_net_vs", "Net − reference region", "RdBu"),
         ("net_beyond_yes_bias", "Net beyond yes-bias", "RdBu"),
         ("steer_lp_rise_vs_random", "steering: lp rise vs random (nats)", "PuOr"))


def _text(r) -> str:
    lo, hi = getattr(r, "lo", np.nan), getattr(r, "hi", np.nan)
    ci = f"<br>[{lo:.2f}, {hi:.2f}]" if np.isfinite(lo) and np.isfinite(hi) else ""
    return f"{r.value:.2f}{ci}"


def task_a_regions(summary: pd.DataFrame) -> list[Panel]:
    """One grid per (model, framing, units) of a run with ``--option regions=``."""
    a = task(summary, "A")
    if a.empty or "variant" not in a:
        return []
    a = a.assign(framing=[split(str(v))[0] for v in a["variant"]], region=[split(str(v))[1] for v in a["variant"]])
    a = a[a["region"].notna() & a["layer_idx"].notna()]
    panels = []
    for (model, framing, units), sub in a[a["framing"] != "steer"].groupby(["model_id", "framing", "alpha_units"]):
        steer = a[(a["model_id"] == model) & (a["framing"] == "steer") & (a["alpha_units"] == units)]
        rows = sorted({(r.region, r.layer_idx, r.alpha) for r in sub.itertuples()}, key=lambda k: (order(k[0]), k[1:]))
        many = len({k[1:] for k in rows}) > 1
        names = [f"{reg} · L{int(layer)} α{_fmt_alpha(alpha)}" if many else reg for reg, layer, alpha in rows]
        ref = next((m.split(":", 1)[1] for m in sub["metric"] if str(m).startswith("region_net_vs:")), None)
        fig = make_subplots(rows=1, cols=len(_COLS), shared_yaxes=True, horizontal_spacing=0.04,
                            subplot_titles=[t.replace("reference region", ref or "reference") for _, t, _ in _COLS])
        for j, (metric, title, scale) in enumerate(_COLS):
            z = np.full((len(rows), 1), np.nan)
            text = np.full((len(rows), 1), "", dtype=object)
            for i, (reg, layer, alpha) in enumerate(rows):
                src = steer if metric.startswith("steer") else sub
                hit = src[(src["region"] == reg) & (src["layer_idx"] == layer) & (src["alpha"] == alpha)
                          & (src["metric"].astype(str).str.startswith(metric) if metric == "region_net_vs"
                             else src["metric"] == metric)]
                if not hit.empty:
                    r = next(hit.itertuples())
                    z[i, 0], text[i, 0] = r.value, _text(r)
                elif metric == "region_net_vs" and reg == ref:
                    text[i, 0] = "reference"
            lim = float(np.nanmax(np.abs(z))) if np.isfinite(z).any() else 1.0
            fig.add_trace(go.Heatmap(z=z, x=[title], y=names, text=text, texttemplate="%{text}", colorscale=scale,
                                     zmid=0, zmin=-max(lim, 1e-9), zmax=max(lim, 1e-9), showscale=False, xgap=2,
                                     ygap=2, hovertemplate=f"{title}<br>%{{y}}: %{{text}}<extra></extra>"),
                          row=1, col=j + 1)
            fig.update_xaxes(showticklabels=False, row=1, col=j + 1)
        fig.update_yaxes(type="category", autorange="reversed")
        panels.append(Panel(
            f"Task A · where the injection sits · {_label(model, framing)}",
            "Each row injects the same concepts, cells and samples over one token region (system turn, "
            "user turn, question, answer, or several), with its own matched controls, bias questions "
            "and steering check. Net = detected under injection − the matched control; the second "
            f"column is that Net minus the reference region's ({ref or 'none in this run'}), paired by "
            "concept (95% interval over concepts); the last is the region's own steering check (" + RULE
            + "). The answer region starts at the prompt's last token, where the first answer token "
            "is read from.", _style(fig, 150 + 46 * len(rows))))
    return panels
