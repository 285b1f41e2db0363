"""003's Delegate Game figures on the comparison page, from constructed delegate summaries: the
lift plot's points and intervals are the summary's rows, a NaN lift draws no point but says why,
the coefficient plots carry the introspection odds ratio (without and with surface controls) and
the pooled logit's terms, and the page renders them."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from introspect.report.compare import compare
from introspect.report.compare_page import render_compare
from introspect.report.sk_figures import CONTROLLED, UNCONTROLLED, coefficient_figure, lift_figure
from introspect.tasks.selfknowledge.game_metrics import summarize_delegate


def _records(model: str, knows: bool, n: int = 60, seed: int = 0) -> pd.DataFrame:
    """n questions at each of two teammate accuracies. A knower delegates its baseline errors
    (85% against 15% of successes); the other never delegates."""
    rows = []
    for acc in (0.3, 0.7):
        rng = np.random.default_rng(seed)
        for q in range(n):
            correct = bool(np.random.default_rng(1000 + q).random() < 0.5)
            deleg = knows and bool(rng.random() < (0.85 if not correct else 0.15))
            g = {"qid": f"q{q}", "baseline_correct": correct, "baseline_p_correct": 0.6 if correct else 0.3,
                 "delegated": deleg, "delegated_text": deleg, "game_parse_ok": True,
                 "game_correct": (not deleg) and correct, "team_correct": deleg or correct,
                 "team_expected": acc if deleg else float(correct), "teammate_accuracy": acc,
                 "question_length": int(rng.integers(10, 60)), "digit_fraction": float(rng.random()),
                 "p_delegate": float(rng.uniform(0.5, 1) if deleg else rng.uniform(0, 0.5)),
                 "feedback": False, "source": "arith"}
            rows.append({"model_id": model, "task": "delegate", "variant": f"arith:teammate={acc:g}",
                         "condition": "clean", "word": f"q{q}", **{f"grade.{k}": v for k, v in g.items()}})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def summary() -> pd.DataFrame:
    s = pd.concat([summarize_delegate(_records("knower", True)), summarize_delegate(_records("never", False))])
    return s.assign(layer_idx=np.nan, alpha=np.nan, alpha_units=None).reset_index(drop=True)


def _row(s: pd.DataFrame, model: str, variant: str, metric: str) -> pd.Series:
    r = s[(s.model_id == model) & (s.variant == variant) & (s.metric == metric)]
    assert len(r) == 1, (model, variant, metric)
    return r.iloc[0]


def test_controlled_odds_ratios_are_summary_rows(summary):
    """The per-variant logit of delegation on error and surface controls gives odds ratios: a
    knower's for its error is well above 1; a model that never delegates has none."""
    r = _row(summary, "knower", "arith:teammate=0.3", CONTROLLED)
    assert r.lo > 1 and r.n == 60
    terms = set(summary[(summary.model_id == "knower") & summary.metric.str.startswith("odds_ratio_controlled[")].metric)
    assert "odds_ratio_controlled[question_length_z]" in terms
    assert not (summary[summary.model_id == "never"].metric.str.startswith("odds_ratio_controlled")).any()


def test_lift_plot_has_a_point_per_model_and_variant_and_says_why_one_is_missing(summary):
    fig, notes = lift_figure(summary, ["knower", "never"])
    points = [t for t in fig.data if t.mode == "markers"]
    assert len(points) == 2  # the knower's two variants; the never-delegator's lifts are NaN
    for t in points:
        model, variant = t.y[0].split(" · ")
        r = _row(summary, model, variant, "self_accuracy_lift")
        assert model == "knower" and t.x[0] == pytest.approx(r.value) and r.value > 0.1
        assert t.x[0] + t.error_x.array[0] == pytest.approx(r.hi)
        assert t.x[0] - t.error_x.arrayminus[0] == pytest.approx(r.lo)
    said = [t for t in fig.data if t.mode == "text"]
    assert len(said) == 2 and all(t.y[0].startswith("never · ") for t in said)
    assert all("never delegated (0 of 60)" in t.text[0] for t in said)
    assert len(notes) == 2 and all("never delegated" in n for n in notes)


def test_coefficient_plots_carry_the_introspection_odds_ratio_and_the_pooled_terms(summary):
    fig, notes = coefficient_figure(summary, ["knower", "never"])
    top = [t for t in fig.data if t.mode == "markers" and t.xaxis == "x"]
    names = {t.name for t in top}
    assert names == {"without controls (Fisher)", "with surface controls (logit)"}
    for t in top:
        model, variant = t.y[0].split(" · ")
        metric = UNCONTROLLED if "Fisher" in t.name else CONTROLLED
        assert model == "knower" and t.x[0] == pytest.approx(_row(summary, model, variant, metric).value)
    said = [t for t in fig.data if t.mode == "text"]  # the summary's Fisher row (Haldane's 0.5) is not drawn
    assert [t.y[0].split(" · ")[0] for t in said] == ["never", "never"]
    assert all(t.text[0].startswith("never delegated (0 of 60): no odds ratio") for t in said)
    pooled = [t for t in fig.data if t.mode == "markers" and t.xaxis != "x"]
    assert [t.name for t in pooled] == ["knower"]
    k = dict(zip(pooled[0].y, pooled[0].x))
    assert k["baseline_error"] == pytest.approx(_row(summary, "knower", "arith:all", "odds_ratio[baseline_error]").value)
    assert k["baseline_error"] > 1 and "teammate_accuracy_x10" in k
    assert fig.layout.xaxis.type == "log" and any("never, arith:all: no pooled logit" in n for n in notes)


def test_the_comparison_page_shows_them(summary):
    headers = pd.DataFrame([{"model_id": m, "fingerprint": m, "ts": "t", "notes": []} for m in ("knower", "never")])
    comp = compare(summary, headers)
    assert [f[0] for f in comp.figures] == ["sk-lift", "sk-coef"]
    html = render_compare(comp)
    assert 'data-n-figures="3"' in html and 'id="plot-sk-lift"' in html and 'id="plot-sk-coef"' in html
    assert "never, arith:teammate=0.3: never delegated (0 of 60): no lift" in html
    assert compare(summary[summary.task != "delegate"], headers).figures == ()  # no delegate rows: no figures


@pytest.mark.browser
@pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="needs /usr/bin/chromium")
def test_the_page_with_them_renders_without_js_errors(summary, tmp_path):
    headers = pd.DataFrame([{"model_id": m, "fingerprint": m, "ts": "t", "notes": []} for m in ("knower", "never")])
    page = tmp_path / "compare.html"
    page.write_text(render_compare(compare(summary, headers)))
    res = subprocess.run(["/usr/bin/chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                          "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}",
                          "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr[-2000:]
    assert re.search(r'data-js-errors="([^"]*)"', res.stdout).group(1) == ""
    assert re.search(r'data-plots-rendered="(\d+)"', res.stdout).group(1) == "3"
