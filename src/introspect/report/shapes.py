"""Which figures a grid of (layer, α) cells can carry: the one place the dashboard decides.

Why its own module: every builder (task A's heatmaps, curves and forest plots, task B's lines
over layers, the steering check) used to decide for itself, and a one-layer, one-α run (the
quick preset) got line charts whose only point sat alone in the middle of an axis. A line needs
two points along its axis, a layer × α heatmap two of each; a grid with one α gets a
dot-and-interval (forest) plot per cell, every condition and ablation a row.
"""

from __future__ import annotations

import pandas as pd

FOREST = "forest"  # one row per condition / ablation: estimate dot and 95% interval
LINE_ALPHA = "line over α"
LINE_LAYER = "line over layers"
HEATMAP = "layer × α heatmap"


def figure_kinds(n_layers: int, n_alphas: int) -> frozenset[str]:
    """The figure kinds a grid of ``n_layers`` × ``n_alphas`` cells supports.

    Lines need ≥ 2 points along their axis, heatmaps ≥ 2 layers and ≥ 2 α; with one α each cell
    is a forest plot (with several layers a line over layers is drawn as well where a builder
    has one). No cells: nothing."""
    if n_layers < 1 or n_alphas < 1:
        return frozenset()
    kinds = set()
    if n_alphas >= 2:
        kinds.add(LINE_ALPHA)
    if n_layers >= 2:
        kinds.add(LINE_LAYER)
    if n_layers >= 2 and n_alphas >= 2:
        kinds.add(HEATMAP)
    if n_alphas == 1:
        kinds.add(FOREST)
    return frozenset(kinds)


def grid_shape(sub: pd.DataFrame) -> tuple[int, int]:
    """(layers, α values) among the rows that have a layer."""
    cells = sub[sub["layer_idx"].notna()]
    return int(cells["layer_idx"].nunique()), int(cells["alpha"].nunique())


def kinds_of(sub: pd.DataFrame) -> frozenset[str]:
    """``figure_kinds`` of the grid in summary rows ``sub``."""
    return figure_kinds(*grid_shape(sub))
