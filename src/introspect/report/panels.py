"""What every dashboard figure shares: the ``Panel`` value, colours, layout style, error bars.

Why its own module: the figure builders live in two modules (``figures`` for tasks B–D and
the rest, ``figures_a`` for task A); both draw with these helpers, and neither imports the other's
builders.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative

from introspect.tasks.injection.common import steer_mask

PALETTE = qualitative.Plotly
GREY_BAND = "rgba(120,120,120,0.22)"
FONT = dict(family="Inter, Segoe UI, Helvetica, Arial, sans-serif", size=13)


@dataclass(frozen=True)
class Panel:
    """One figure of the dashboard with its heading and a short explanation."""

    title: str
    caption: str
    fig: go.Figure
    kind: str = ""  # a ``shapes`` kind (forest, line over α, ...) when the figure is one


def style(fig: go.Figure, height: int, **kw) -> go.Figure:
    fig.update_layout(template="plotly_white", height=height, font=FONT,
                      margin=dict(l=60, r=30, t=60, b=60), **kw)
    return fig


def rgba(hex_color: str, a: float) -> str:
    h = hex_color.lstrip("#")
    r, g, b = (int(h[i:i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{a})"


def err(sub: pd.DataFrame) -> dict:
    """Asymmetric error bars from the summary's (value, lo, hi)."""
    v, lo, hi = (sub[c].to_numpy(float) for c in ("value", "lo", "hi"))
    return dict(type="data", symmetric=False, array=np.nan_to_num(hi - v),
                arrayminus=np.nan_to_num(v - lo), thickness=1.5, width=4)


def task(summary: pd.DataFrame, name: str) -> pd.DataFrame:
    return summary[summary["task"] == name]


def fmt_alpha(a: float) -> str:
    return f"{a:g}"


def label(model: str, *parts: str) -> str:
    extra = " · ".join(p for p in parts if p)
    return f"{model} · {extra}" if extra else model


def customdata(sub: pd.DataFrame) -> np.ndarray:
    """Hover data per row: lo, hi, n, concepts, interval method, Holm p."""
    n_c = sub["n_clusters"] if "n_clusters" in sub else pd.Series(np.nan, index=sub.index)
    ci = sub["ci"] if "ci" in sub else pd.Series("", index=sub.index)
    ph = sub["p_holm"] if "p_holm" in sub else pd.Series(np.nan, index=sub.index)
    return np.column_stack([sub["lo"], sub["hi"], sub["n"], n_c.astype("float"),
                            ci.astype(str), ph]).astype(object)


NOT_DETECTION = ("bias", "steer", "all")  # task A variants that are not a detection framing


def detection(summary: pd.DataFrame) -> pd.DataFrame:
    """Task A's detection rows that belong to a (layer, α) cell."""
    a = task(summary, "A")
    steer = steer_mask(a["variant"])  # steer_two_turn, steer@<region> too
    return a[~a["variant"].isin(NOT_DETECTION) & ~steer & a["layer_idx"].notna()]
