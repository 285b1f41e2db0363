"""Every task-A verdict label's false rate, on synthetic records with a known truth (issue 72).

Each run writes a whole record set (controls, ablations, balanced bias questions with detection
reports, latent readings after the report and a neutral prefill, steering rows for every cell),
goes through ``report.load_results`` and ``report.summarize`` and prints one label
(``introspect.report.labels``). Asserted: for every truth, the labels whose claims are false for
it are printed in at most 5% of runs (plus 2.58 Monte-Carlo standard errors), at one cell and at
nine framing × cell cells, where the verdict picks the best of nine; a uniform yes-push reads
"detected" in no run at 0.2, 0.4 or 0.8 (Net must beat the yes-bias by a margin) and reads "yes-bias,
not detection" in most runs at 0.4 and 0.8; and with one gate loosened the same check fails. Minutes of CPU: marked ``calibration``, run by
``make test-all`` (CI). ``python -m experiments.calibrate --labels`` prints the docs' table.
"""

from __future__ import annotations

import math
from concurrent.futures import ProcessPoolExecutor

import pytest

from introspect.report import labels as L
from introspect.tasks.injection import verdict_a

pytestmark = pytest.mark.calibration
ONE_CELL = (1, 20, 30)  # (cells, concepts, runs)
NINE_CELLS = (9, 24, 12)
# the truths where picking the best of nine cells could let a gate's null through
PICKED = ("null, vectors steer", "yes-push 0.4", "reacts to any perturbation", "detector, no naming (latent = steering)",
          "reports to every question")
DETECTED = {"detected and identified", "detected, identified latently (not in words)", "detected, not identified"}


def _bound(n: int, level: float = 0.05) -> float:
    return level + 2.576 * math.sqrt(level * (1 - level) / n)


def violations(results: list[dict]) -> list[str]:
    """The settings whose false-label rate is above 5% beyond Monte-Carlo error."""
    return [f"{r['truth']} at {r['cells']} cells × {r['concepts']} concepts: {r['false_rate']:.3f} "
            f"({r['counts']})" for r in results if r["false_rate"] > _bound(r["printed"])]


@pytest.fixture(scope="module")
def results() -> list[dict]:
    cells, g, runs = ONE_CELL
    jobs = [(t, g, cells, runs, 0) for t in L.TRUTHS]
    cells, g, runs = NINE_CELLS
    jobs += [(t, g, cells, runs, 1) for t in PICKED]
    with ProcessPoolExecutor(2) as ex:
        out = list(ex.map(L.run_job, jobs))
    print("\n" + L.markdown(out))
    return out


def test_every_label_whose_claim_is_false_is_rare(results):
    assert all(r["printed"] == r["runs"] for r in results)
    assert not violations(results)


def test_a_uniform_yes_push_never_reads_detection_and_mostly_reads_yes_bias(results):
    """Net − rise is 0 in truth for a pure push; "beyond the yes-bias" asks more than 0 (a margin,
    ``verdict_a.YES_BIAS_MARGIN``), so no run here (20 and 24 concepts) reads "detected" at any size
    (a test of "> 0" let 2 of 40 through at some settings; docs/statistics.md: 1 of 40 still at 10
    concepts, where the rise on false statements rests on few answers)."""
    for r in results:
        if r["truth"].startswith("yes-push"):
            assert sum(r["counts"][x] for x in DETECTED) == 0, (r["truth"], r["cells"], r["counts"])
    one = {r["truth"]: r for r in results if r["cells"] == 1}
    for f in ("0.4", "0.8"):
        assert one[f"yes-push {f}"]["power"] > 0.5, one[f"yes-push {f}"]["counts"]


def test_each_true_label_is_reachable(results):
    """Power, not a false rate: every label the truths should read is printed in most runs at 20
    concepts and one cell, so the false rates above are not met by a verdict that says nothing."""
    one = {r["truth"]: r for r in results if r["cells"] == 1}
    for truth in ("reacts to any perturbation", "detector, no naming (latent = steering)",
                  "detector, latent naming beyond steering", "ideal detector that names the concept", "yes-push 0.8"):
        assert one[truth]["power"] > 0.5, (truth, one[truth]["counts"])


def test_the_check_fails_when_a_gate_is_loosened(monkeypatch):
    """The Gaussian gate waved through: a model that reacts to any push reads "detected"."""
    strict = verdict_a._gate
    monkeypatch.setattr(verdict_a, "_gate", lambda r: True if r is not None and r["metric"] == "net_vs_random"
                        else strict(r))
    r = L.label_counts("reacts to any perturbation", 20, 1, 12, seed=3)
    assert violations([r]), r["counts"]


def test_the_check_fails_when_yes_bias_is_read_on_wrong_answers(monkeypatch):
    """The yes-bias gate on its old scale (wrong answers to true and false statements alike, where
    a "yes" to a true statement is right): a yes-push reads "detected" again."""
    from introspect.tasks.injection import metrics_bias

    real = metrics_bias.content_wrong
    monkeypatch.setattr(metrics_bias, "content_wrong",
                        lambda p, side, right, reports=math.nan: (metrics_bias._wrong(p, side) if reports == 1.0
                                                                  else real(p, side, right, reports)))
    r = L.label_counts("yes-push 0.8", 20, 1, 12, seed=4)
    assert violations([r]), r["counts"]


def test_cells_must_come_in_threes():
    assert L.design(9) == (L.FRAMINGS, (4, 5, 6))
    with pytest.raises(ValueError, match="multiple of 3"):
        L.design(4)
