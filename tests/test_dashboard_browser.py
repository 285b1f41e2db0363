"""Open the dashboard in real headless Chromium: no JavaScript errors, every plot rendered."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from introspect.report import write_dashboard

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_report import write_contract, write_synthetic  # noqa: E402

CHROMIUM = Path("/usr/bin/chromium")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium"),
]


def _chromium(tmp: Path, profile: str, *args: str) -> subprocess.CompletedProcess:
    cmd = [
        str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--disable-dev-shm-usage", f"--user-data-dir={tmp / profile}",
        "--virtual-time-budget=5000", *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180)


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    root = write_synthetic(tmp_path_factory.mktemp("browser") / "results")
    write_contract(root)  # issue-9 records: P(yes) curves, steering check, held-out cell, verdicts
    out = write_dashboard(root)
    n_figures = int(re.search(r'data-n-figures="(\d+)"', out.read_text()).group(1))
    assert n_figures >= 15
    return out, n_figures


def test_dashboard_renders_without_js_errors(dashboard, tmp_path: Path):
    html, n_figures = dashboard
    res = _chromium(tmp_path, "dom", "--dump-dom", html.as_uri())
    dom = res.stdout
    assert res.returncode == 0 and "<html" in dom, res.stderr[-2000:]
    errors = re.search(r'data-js-errors="([^"]*)"', dom)
    assert errors is not None, "error hook did not run"
    assert errors.group(1) == "", errors.group(1)
    assert dom.count('class="main-svg"') >= n_figures
    rendered = re.search(r'data-plots-rendered="(\d+)"', dom)
    assert rendered is not None and int(rendered.group(1)) == n_figures


def test_dashboard_screenshot(dashboard, tmp_path: Path):
    html, _ = dashboard
    shot = tmp_path / "shot.png"
    res = _chromium(tmp_path, "shot", "--hide-scrollbars", "--window-size=1400,3000",
                    f"--screenshot={shot}", html.as_uri())
    assert shot.exists(), res.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 50_000  # a blank 1400x3000 page compresses to a few KB


@pytest.mark.parametrize("shape", [(1, 1), (3, 3)])
def test_dashboard_fits_the_grid_in_chromium(shape, tmp_path: Path):
    """The quick preset's shape (one layer, one α) and a 3 × 3 grid, as rendered: no line with a
    single point anywhere, forest plots exactly when there is one α, heatmaps only on the grid."""
    from test_report import GRIDS, write_grid

    root = write_grid(tmp_path / "results", *GRIDS[shape], n_concepts=5)
    html = write_dashboard(root)
    dom = _chromium(tmp_path, "grid", "--dump-dom", html.as_uri()).stdout
    assert re.search(r'data-js-errors=""', dom), dom[-2000:]
    shortest = re.search(r'data-shortest-line="([^"]*)"', dom).group(1)
    # task D's cosine-per-layer lines exist at every shape: lines are found, and none is a lone point
    assert shortest != "none" and int(shortest) >= 2, shortest
    kinds = set(re.findall(r'data-kind="([^"]*)"', dom)) - {""}
    assert ("forest" in kinds) == (shape == (1, 1))
    assert ("layer × α heatmap" in kinds) == (shape == (3, 3))
    assert ("line over α" in kinds) == (shape == (3, 3))
    n = int(re.search(r'data-n-figures="(\d+)"', html.read_text()).group(1))
    assert int(re.search(r'data-plots-rendered="(\d+)"', dom).group(1)) == n
