"""Task A's verdict read at a glance (issue 73): the label first, then one table row per dimension
of the framing × cell the verdict picked, whose gate says what the verdict's own gates say; the
terminal and the dashboard banner render the same ``VerdictA``."""

from __future__ import annotations

import math
import sys
from html import escape
from pathlib import Path

import pandas as pd
import pytest

from introspect.report.metrics import summarize
from introspect.report.verdict_view import glances, terminal, verdicts
from introspect.tasks.injection import verdict_a as V
from introspect.tasks.injection.metrics_a import summarize_a
from introspect.tasks.injection.metrics_steer import cell_steers, steer_variant
from introspect.tasks.injection.verdict_glance import FAIL, PASS, UNJUDGED, VerdictA

sys.path.insert(0, str(Path(__file__).resolve().parent / "injection"))
from test_metrics import BIAS_CLEAN, M, _perfect, _reports, _set, _strong, flat, inert_records  # noqa: E402


def _yes_bias():
    recs = _perfect()
    for r in recs:
        if r.condition == "bias" and r.layer_idx == 2:
            r.grade = {**r.grade, "bias_answer": "affirms_false", "wrong": True, "said_yes": True}
    return recs


SCENARIOS = {  # records → the label the verdict reads (tests/injection/test_metrics.py checks why)
    "perfect": (_perfect, "detected and identified"),
    "strong": (_strong, "detected, not identified"),
    "yes-bias": (_yes_bias, "yes-bias, not detection"),
    "perturbation": (lambda: _set(_perfect(), "random", detected=True), "reacts to any perturbation"),
    "reports": (lambda: _reports(_perfect(), tuple(f"q{q}" for q in range(len(BIAS_CLEAN)))), "inconclusive"),
    "no steering": (lambda: [r for r in _perfect() if r.variant != "steer"], "inconclusive"),
    "inert": (inert_records, "no measurable effect"),
}


@pytest.fixture(scope="module")
def summaries() -> dict[str, pd.DataFrame]:
    return {k: summarize(flat(make())) for k, (make, _) in SCENARIOS.items()}


def _expected_gate(rows: list[dict], key: str, cell: dict) -> bool:
    """The gate of one dimension, asked of the verdict's own functions on the summariser's rows."""
    find = lambda m: V._find(rows, m, cell)  # noqa: E731
    if key in ("net", "names"):
        return V._claim(cell if key == "net" else find("identification_vs_random"))
    if key == "steering":
        return cell_steers(rows, M, cell)
    if key == "latent":
        return V._latent(find("latent_beyond_steering"), find("latent_identification_vs_random"),
                         find("latent_follows_vector"))
    if key == "reports":
        return find("bias_detection_reports")["value"] <= V.REPORTS_MAX
    metric = {"coherent": "net:coherent", "beyond_yes_bias": "net_beyond_yes_bias", "yes_bias": "bias_yes_rise",
              "beyond_gaussian": "net_vs_random", "gaussian_yes": "random_vs_control",
              "follows": "follows_vector"}[key]
    return V._gate(find(metric))


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_terminal_leads_with_the_label_then_a_row_per_dimension(summaries, name):
    s = summaries[name]
    label = SCENARIOS[name][1]
    out = terminal(s)
    lines = out.split("\n")
    assert lines[0] == f"{label} · task A · {M}"  # the label first
    (v,) = glances(s).values()
    assert v.label == label and v.text().split("\n")[0] == label
    assert get_note(s).startswith(label + "\n")  # the verdict row's note is the same glance
    if not v.dims:
        return
    header = lines.index(next(x for x in lines if x.lstrip().startswith(v.header())))
    assert "figure" in lines[header] and "95% interval" in lines[header] and "gate" in lines[header]
    table = lines[header + 1: header + 1 + len(v.dims)]
    for d, line in zip(v.dims, table, strict=True):  # one row per dimension, its gate at the end
        assert line.strip().startswith(d.name) and line.rstrip().endswith(d.gate_text()), line
        assert d.gate in (PASS, FAIL, UNJUDGED)
        if not math.isnan(d.value):
            assert d.figure().split()[0] in line and d.interval() in line
    rest = lines[header + 1 + len(v.dims):]
    assert rest[0].startswith("why: ") and any(x.startswith("Holm family: ") for x in rest)
    assert rest[-1].startswith("power: ")
    assert max(len(x) for x in table) <= 125  # a table, not a word-wall


def get_note(s: pd.DataFrame) -> str:
    return s[s["metric"] == "verdict"].iloc[0]["note"]


@pytest.mark.parametrize("name", [n for n in SCENARIOS if n != "inert"])
def test_each_dimensions_gate_is_the_verdicts_gate(name):
    """Recomputed from the summariser's rows (they keep the intervals at the Holm level) with the
    verdict's own gate functions: every pass and fail in the table is one of them."""
    rows = summarize_a(flat(SCENARIOS[name][0]()))
    v = VerdictA.from_json(next(r for r in rows if r["metric"] == "verdict_glance")["note"])
    cell = next(r for r in rows if r["metric"] == "net" and V._where(r) == v.where)
    keys = [d.key for d in v.dims]
    assert keys[:5] == ["net", "coherent", "steering", "beyond_yes_bias", "yes_bias"]
    assert keys[-5:] == ["beyond_gaussian", "gaussian_yes", "names", "follows", "latent"]
    for d in v.dims:
        if d.gate == UNJUDGED:
            continue
        assert (d.gate == PASS) == _expected_gate(rows, d.key, cell), (name, d)
    for key, above in (("yes_bias", "beyond_yes_bias"), ("gaussian_yes", "beyond_gaussian")):
        if v.dim(above).gate != UNJUDGED and v.dim(key).figure() != "not measured":
            assert (v.dim(key).gate == UNJUDGED) == (v.dim(above).gate == PASS), (name, key)
    steer = V._find(rows, "steer_lp_rise_vs_random", {**cell, "variant": steer_variant(rows, M, cell["variant"])})
    if steer is None:  # the run has no steering check: the row says so
        assert (v.dim("steering").figure(), v.dim("steering").gate) == ("not measured", UNJUDGED)
    else:
        assert v.dim("steering").value == pytest.approx(steer["value"]) and v.dim("steering").unit == "nats"


def test_the_table_says_which_gate_holds_the_label(summaries):
    g = {k: next(iter(glances(s).values())) for k, s in summaries.items()}
    gate = lambda name, key: g[name].dim(key).gate  # noqa: E731
    assert all(d.gate == PASS for d in g["perfect"].dims if d.key not in ("latent", "yes_bias", "gaussian_yes"))
    # asked only where Net is not beyond them (as ``_judge`` asks them): no red row for a model without a yes-bias
    assert (gate("perfect", "yes_bias"), gate("perfect", "gaussian_yes")) == (UNJUDGED, UNJUDGED)
    assert g["perfect"].dim("yes_bias").why == "row above passed"
    assert g["perfect"].dim("latent").gate == UNJUDGED and g["perfect"].dim("latent").figure() == "not measured"
    assert (gate("yes-bias", "beyond_yes_bias"), gate("yes-bias", "yes_bias")) == (FAIL, PASS)
    assert (gate("perturbation", "beyond_gaussian"), gate("perturbation", "gaussian_yes")) == (FAIL, PASS)
    assert (gate("strong", "names"), gate("strong", "follows")) == (FAIL, UNJUDGED)  # follows not recorded
    assert gate("no steering", "steering") == UNJUDGED and "the cell does not steer" in g["no steering"].why
    # most answers to unrelated questions are detection reports: the yes-bias is not judged, and says why
    r = g["reports"]
    assert (r.dim("reports").gate, r.dim("beyond_yes_bias").gate) == (FAIL, UNJUDGED)
    assert r.dim("beyond_yes_bias").why == "reports over 0.5" and r.dim("reports").value == 1.0
    assert "paper L2 α4" == g["perfect"].where and g["perfect"].units == "raw"
    assert "Holm family: 4 tests = identification_vs_random, net" in g["perfect"].holm
    assert g["inert"].label == "no measurable effect" and "100% of injected answers" in g["inert"].readings


def test_the_glance_survives_the_summary_as_json(summaries):
    for s in summaries.values():
        (v,) = glances(s).values()
        assert VerdictA.from_json(v.to_json()).to_json() == v.to_json()
        assert VerdictA.from_json(v.to_json()).text() == get_note(s)


def test_the_dashboard_banner_holds_the_table(summaries):
    s = summaries["yes-bias"]
    (v,) = glances(s).values()
    html = verdicts(s)
    assert html.startswith('<div class="verdict inconclusive" data-task="A"><strong>Task A · injected-thought '
                           f"detection — {M}: yes-bias, not detection</strong>")
    assert '<table class="glance">' in html and "<th>at paper L2 α4 raw</th>" in html
    for d in v.dims:
        assert f'<tr data-dim="{d.key}" data-gate="{d.gate}"><td>{escape(d.name)}</td>' in html
    assert html.count("<tr data-dim=") == len(v.dims)
    assert "<b>why</b>: Net above its controls, but injection" in html and "<b>power</b>: " in html
    from introspect.report.dashboard import render_dashboard

    page = render_dashboard(flat(_yes_bias()), pd.DataFrame(), summary=s)
    assert '<table class="glance">' in page and 'data-dim="beyond_yes_bias" data-gate="fail"' in page


def test_a_verdict_without_a_glance_keeps_its_note():
    """Tasks B and C (and summaries from before the glance): the label first, then the note."""
    rows = pd.DataFrame([{"metric": "verdict", "task": "B", "model_id": "m", "condition": "detected",
                          "note": "detected: Net 0.40 [0.20, 0.60] at L2 α4"}])
    assert terminal(rows).split("\n") == ["detected · task B · m", "Net 0.40 [0.20, 0.60] at L2 α4"]
    assert "</strong>. Net 0.40 [0.20, 0.60] at L2 α4</div>" in verdicts(rows)


def test_beyond_the_yes_bias_must_clear_a_margin_not_just_zero(summaries):
    """A pure push toward "yes" has Net − rise = 0 in truth, so a test of "> 0" passes it in 5% of
    runs; the gate asks the interval (and the Holm-level one) above ``YES_BIAS_MARGIN`` and the
    row's p tests that margin, so a difference of 0.04 whose interval clears 0 fails it."""
    from introspect.stats.clustered import concept_mean

    margin = V.YES_BIAS_MARGIN
    assert V.MARGINS == {"net_beyond_yes_bias": margin} and 0 < margin < 0.1

    def beyond(vals: list[float], m: int = 1) -> dict:
        e = concept_mean(vals, test=True)
        return {"metric": "net_beyond_yes_bias", "value": e.value, "lo": e.lo, "hi": e.hi, "p": e.p, "_est": e,
                "holm_m": m, "p_holm": min(1.0, e.p * m)}

    small = beyond([0.03, 0.05] * 10)  # 0.04 over 20 concepts: interval [0.035, 0.045], far from 0
    assert small["lo"] > 0 and small["p"] < 0.05
    assert not V._gate(small) and V._gate({**small, "metric": "net_vs_random"})  # the same row as another gate passes
    assert "not above the margin" in V._failed(small)
    large = beyond([0.08, 0.10] * 10)
    assert V._gate(large) and V._gate(beyond([0.08, 0.10] * 10, m=9))
    # the summariser's row tests the margin: its p is the sign-flip p of (Net − rise) − margin
    s = summaries["perfect"]
    r = s[s["metric"] == "net_beyond_yes_bias"].iloc[0]
    assert f"p tests > {margin:g}" in r["note"]
    assert r["value"] > margin and 0 < r["p"] < 0.05
    null = summaries["inert"]
    z = null[null["metric"] == "net_beyond_yes_bias"]
    assert z.empty or (z["value"] <= margin).all() and (z["p"] == 1.0).all()  # at or below the margin: p is 1
