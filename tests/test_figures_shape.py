"""Task A's figures follow the grid's shape: one α gives a forest plot per cell and no one-point
line over α; a 3 × 3 grid gives heatmaps and lines over α and no forest plot."""

from __future__ import annotations

import pandas as pd
import pytest

from introspect.report.calibration import Scenario, simulate
from introspect.report.figures_a import BUILDERS_A, grid_shape, task_a_forest
from introspect.report.load import flatten_trial
from introspect.report.metrics import summarize


def _summary(cells: list[tuple[int, float]]) -> pd.DataFrame:
    recs = []
    for i, cell in enumerate(cells):
        recs += [r for r in simulate(Scenario(), 6, 1, 2, seed=i, cell=cell)
                 if i == 0 or r["condition"] not in ("control", "bias_control")]
    return summarize(pd.DataFrame([flatten_trial(r, "mem") for r in recs]))


@pytest.fixture(scope="module")
def one_cell() -> pd.DataFrame:
    return _summary([(16, 8.0)])


@pytest.fixture(scope="module")
def grid() -> pd.DataFrame:
    return _summary([(layer, alpha) for layer in (8, 12, 16) for alpha in (2.0, 4.0, 8.0)])


def _titles(summary: pd.DataFrame) -> list[str]:
    return [p.title for b in BUILDERS_A for p in b(summary)]


def test_one_alpha_draws_a_forest_plot_and_no_line_over_alpha(one_cell):
    a = one_cell[(one_cell.task == "A") & one_cell.layer_idx.notna()]
    assert grid_shape(a) == (1, 1)
    titles = _titles(one_cell)
    assert any(t.startswith("Task A · layer 16, α 8 (raw)") for t in titles)
    assert not any(k in t for t in titles for k in ("vs α", "introspection score", "controls", "detection ·"))
    (panel,) = task_a_forest(one_cell)
    names = [y for tr in panel.fig.data for y in tr.y]
    assert {"TPR (injected)", "FPR (matched control)", "yes under a Gaussian vector", "Net = TPR − FPR",
            "Net beyond the yes-bias"} <= set(names)


def test_a_3x3_grid_draws_heatmaps_and_lines_and_no_forest(grid):
    a = grid[(grid.task == "A") & grid.layer_idx.notna()]
    assert grid_shape(a) == (3, 3)
    titles = _titles(grid)
    assert any(t.startswith("Task A · injected-thought detection") for t in titles)
    assert any(t.startswith("Task A · P(yes) vs α") for t in titles)
    assert not task_a_forest(grid)
    panels = [p for b in BUILDERS_A for p in b(grid)]
    heat = next(p for p in panels if p.title.startswith("Task A · injected-thought"))
    assert [t.name for t in heat.fig.data] == ["tpr", "fpr", "net", "steer_share"]  # the simulation writes steering rows
    pyes = next(p for p in panels if p.title.startswith("Task A · P(yes)"))
    assert {t.name for t in pyes.fig.data} == {"detection, injected", "detection, matched control",
                                               "bias question, injected", "bias question, not injected"}
    assert all(t.error_y.array is not None for t in pyes.fig.data)  # every point has its CI
