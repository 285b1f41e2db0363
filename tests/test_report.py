"""Report pipeline on small synthetic results whose metrics can be checked by hand."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from introspect.records.jsonl import JsonlWriter, Record, make_header
from introspect.report import (
    load_headers,
    load_results,
    register_summary,
    summarize,
    write_dashboard,
    write_summary,
)
from introspect.report.figures import build_figures
from introspect.report.metrics import _SUMMARIES
from introspect.tasks.tidy import clears, row, row_p

sys.path.insert(0, str(Path(__file__).resolve().parent / "injection"))
from test_metrics import inert_records, task_a_records  # noqa: E402

M1 = "HuggingFaceTB/SmolLM2-135M-Instruct"
M2 = "tiny/other-model"


def _w(root: Path, model: str, task: str, recs: list[Record], notes=()) -> None:
    w = JsonlWriter(root / model.replace("/", "__") / f"{task}.jsonl")
    w.write(make_header(run_id=f"run-{task}", model_id=model, fingerprint="f" * 16, seed=0,
                        config={"task": task}, notes=notes))
    for i, r in enumerate(recs):
        r.trial_index, r.trial_id, r.run_id = i, f"{model}-{task}-{i}", f"run-{task}"
        w.write(r)


def _rec(model, task, cond, layer=None, alpha=0.0, **kw) -> Record:
    return Record(seed=0, model_id=model, task=task, condition=cond, layer_idx=layer,
                  alpha=float(alpha), injected=cond not in ("control", "dont_think", "think"),
                  **kw)


def write_synthetic(root: Path) -> Path:
    """Tasks A-D for two models plus a self-knowledge task; hand-checkable cells noted inline."""
    rng = np.random.default_rng(0)
    notes = ["4-bit GGUF dequantized"]
    # ---- Task A, M1: controls pooled (layer None); cell L3/a4 is the hand-checked one
    a: list[Record] = []
    for det in (False, False, False, False, True):  # FPR 1/5
        a.append(_rec(M1, "A", "control", grade={"detected": det, "matched": False,
                                                  "tp": 0, "fp": int(det), "parse": "ok"},
                      p_yes=0.2, p_no=0.8))
    for said in (False, False, False, True):  # bias yes without injection: 1/4
        a.append(_rec(M1, "A", "bias", grade={"said_yes": said, "detected": False},
                      extra={"bias_injected": False}, variant="bias"))
    for layer in (3, 6):
        for alpha in (4, 8):
            if (layer, alpha) == (3, 4):
                dets, mats = (True, True, True, False), (True, False, False, False)
            else:
                dets = tuple(bool(x) for x in rng.random(4) < 0.3 + 0.05 * alpha)
                mats = tuple(d and bool(rng.random() < 0.5) for d in dets)
            for det, mat in zip(dets, mats):
                a.append(_rec(M1, "A", "injected", layer, alpha, word="bread",
                              grade={"detected": det, "matched": mat, "tp": int(det), "fp": 0,
                                     "parse": "ok"}, p_yes=0.6 if det else 0.3, p_no=0.4))
            for cond in ("random", "negative"):
                for det in (True, False):
                    a.append(_rec(M1, "A", cond, layer, alpha,
                                  grade={"detected": det, "matched": False}))
            for said in (True, False):  # bias yes with injection: 1/2
                a.append(_rec(M1, "A", "bias", layer, alpha, grade={"said_yes": said},
                              extra={"bias_injected": True}, variant="bias"))
    _w(root, M1, "A", a, notes)
    # ---- Task A, M2: controls recorded in the same cell
    a2 = [_rec(M2, "A", c, 2, 8, grade={"detected": d, "matched": d})
          for c, d in [("injected", True), ("injected", True), ("control", False),
                       ("control", True)]]
    _w(root, M2, "A", a2)
    # ---- Task B (variant thought: both parts asked; mc)
    b = [_rec(M1, "B", "control", variant="thought",
              grade={"thought_correct": False, "repeat_correct": True, "success": False,
                     "mc_correct": None}) for _ in range(4)]
    for alpha in (4, 8):
        for ok in (True, False, True, False):  # L3/a8 strict success 2/4
            s = ok if alpha == 8 else False
            b.append(_rec(M1, "B", "injected", 3, alpha, variant="thought",
                          grade={"thought_correct": s, "repeat_correct": True, "success": s,
                                 "mc_correct": None}))
    b += [_rec(M1, "B", "injected", 3, 8, variant="mc",
               grade={"thought_correct": None, "repeat_correct": None, "success": None,
                      "mc_correct": ok}) for ok in (True, True, False)]
    _w(root, M1, "B", b, notes)
    # ---- Task C at L3/a8: intentional control 1/4 (unknown 1/4), injected 2/4, mismatch 1/4
    c = []
    for cond, vals in (("control", (False, False, None, True)),
                       ("injected", (True, True, None, False)),
                       ("mismatch", (False, True, False, False))):
        for v in vals:
            c.append(_rec(M1, "C", cond, 3, 8, grade={"intentional": v, "label": str(v)}))
    _w(root, M1, "C", c, notes)
    # ---- Task D: layers 0..5; think cos at layer 3 = mean(0.3, 0.5) = 0.4, dont = 0.1
    for model in (M1, M2):
        d = []
        for variant in ("plain", "rewarded", "punished"):
            for cond in ("think", "dont_think"):
                for j in range(2):
                    bump = (0.3 + 0.2 * j) if cond == "think" else 0.1
                    cos = [0.05 + (bump - 0.05) * math.exp(-((L - 3) ** 2) / 2) for L in range(6)]
                    scale = {"plain": 1.0, "rewarded": 1.3, "punished": 0.5}[variant]
                    scale *= 1.0 if model == M1 else 0.6
                    if cond == "think":
                        cos = [x * scale for x in cos]
                    ctrl = [float(x) for x in rng.normal(0.02, 0.01, 6)]
                    d.append(_rec(model, "D", cond, variant=variant, word="ocean",
                                  grade={"layers": list(range(6)), "cos": cos,
                                         "cos_ctrl": ctrl}))
        _w(root, model, "D", d, notes if model == M1 else ())
    # ---- a self-knowledge task: generic summary
    s = [_rec(M1, "seb-calibration", "clean", variant="v1",
              grade={"correct": ok, "confidence": conf, "text": "x"})
         for ok, conf in ((True, 0.9), (True, 0.6), (False, 0.7))]
    _w(root, M1, "seb-calibration", s, notes)
    return root


@pytest.fixture()
def results(tmp_path: Path) -> Path:
    return write_synthetic(tmp_path / "results")


def _get(summary: pd.DataFrame, **kw) -> pd.Series:
    m = pd.Series(True, index=summary.index)
    for k, v in kw.items():
        m &= summary[k].isna() if v is None else summary[k] == v
    rows = summary[m]
    assert len(rows) == 1, f"{kw}: {len(rows)} rows"
    return rows.iloc[0]


def test_a_gate_clears_only_with_its_interval_above_0_and_its_test_below_the_level():
    r = row({}, "m", (0.2, 0.01, 0.4), 10, p=0.058)
    assert math.isclose(row_p(r), 0.058) and not clears(r, 0.05) and clears(r, 0.06)
    for blank in (None, ""):  # no test computed: the interval decides alone
        assert clears({**r, "p": blank}, 0.05) and math.isnan(row_p({**r, "p": blank}))
    assert not clears({**r, "lo": 0.0, "p": 0.001}, 0.05) and not clears(None, 0.05)


def test_load_results_flattens(results: Path):
    df = load_results(results)
    assert set(df["task"]) == {"A", "B", "C", "D", "seb-calibration"}
    assert "grade.detected" in df.columns and "extra.bias_injected" in df.columns
    assert "grade" not in df.columns and (df["source"].str.endswith(".jsonl")).all()
    assert (df["type"] == "trial").all()
    one = load_results(results / M1.replace("/", "__") / "C.jsonl")
    assert len(one) == 12


def test_load_empty_dir_has_schema(tmp_path: Path):
    df = load_results(tmp_path)
    assert df.empty and {"model_id", "task", "condition", "layer_idx", "alpha"} <= set(df.columns)
    h = load_headers(tmp_path)
    assert h.empty and "fingerprint" in h.columns
    assert summarize(df).empty


def test_load_headers(results: Path):
    h = load_headers(results)
    assert len(h) == 7
    row_ = h[(h["model_id"] == M1) & (h["task"] == "A")].iloc[0]
    assert row_["notes"] == ["4-bit GGUF dequantized"] and row_["fingerprint"] == "f" * 16


def test_task_a_metrics(results: Path):
    s = summarize(load_results(results))
    cell = dict(model_id=M1, task="A", layer_idx=3, alpha=4.0)
    tpr = _get(s, metric="tpr", **cell)
    assert (tpr.value, tpr.n) == (0.75, 4)
    assert math.isnan(tpr.lo) and "fewer than 5 concepts" in tpr.note  # one concept: no interval
    fpr = _get(s, metric="fpr", **cell)  # controls shared by every concept (older layout)
    assert (fpr.value, fpr.n, fpr.ci) == (0.2, 5, "wilson")
    assert fpr.lo == pytest.approx(0.0362, abs=1e-4) and "shared by every concept" in fpr.note
    net = _get(s, metric="net", **cell)
    assert net.value == pytest.approx(0.55) and math.isnan(net.p)  # unpaired: no test claimed
    assert _get(s, metric="identification", **cell).value == 0.25
    assert _get(s, metric="identification_given_detected", **cell).value == pytest.approx(1 / 3)
    assert _get(s, metric="random_detection", **cell).value == 0.5
    assert _get(s, metric="tpr", variant="default", **cell).n == 4
    assert not ((s["variant"] == "bias") & (s["metric"] == "tpr")).any()
    # the older bias layout (variant "bias", clean and injected in one condition) is not paired:
    # it yields no bias rows and no introspection score rather than a wrong one
    assert not s["metric"].str.startswith("bias_yes").any()
    assert not (s["metric"] == "introspection_score").any()
    assert _get(s, metric="p_yes_mean:control", **cell).value == pytest.approx(0.2)
    assert _get(s, metric="p_yes_mean:injected", **cell).value == pytest.approx(0.525)
    # M2: same-cell controls -> FPR 1/2, TPR 2/2
    assert _get(s, model_id=M2, task="A", metric="fpr").value == 0.5
    assert _get(s, model_id=M2, task="A", metric="tpr").value == 1.0
    # unique per documented key
    keys = ["model_id", "task", "layer_idx", "alpha", "alpha_units", "variant", "metric"]
    assert not s.duplicated(keys).any()


def test_task_b_metrics(results: Path):
    s = summarize(load_results(results))
    cell = dict(model_id=M1, task="B", layer_idx=3, alpha=8.0)
    st = _get(s, metric="strict_success:injected", variant="thought", **cell)
    assert (st.value, st.n) == (0.5, 4)
    assert _get(s, metric="strict_success:control", variant="thought", **cell).value == 0.0
    assert _get(s, metric="repeat_correct:injected", variant="thought", **cell).value == 1.0
    mc = _get(s, metric="mc_accuracy:injected", variant="mc", **cell)
    assert (mc.value, mc.n) == (pytest.approx(2 / 3), 3)
    assert (s["metric"] == "mc_accuracy:injected").sum() == 1  # None-only cells give no row


def test_task_c_metrics(results: Path):
    s = summarize(load_results(results))
    cell = dict(model_id=M1, task="C", layer_idx=3, alpha=8.0)
    assert _get(s, metric="intentional:control", **cell).value == 0.25
    assert _get(s, metric="unknown:control", **cell).value == 0.25
    assert _get(s, metric="intentional:injected", **cell).value == 0.5
    assert _get(s, metric="intentional:mismatch", **cell).value == 0.25
    d = _get(s, metric="delta_intentional:injected", **cell)
    assert d.value == pytest.approx(0.25) and d.lo <= 0.25 <= d.hi
    assert _get(s, metric="delta_intentional:mismatch", **cell).value == pytest.approx(0.0)


def test_task_d_metrics(results: Path):
    s = summarize(load_results(results))
    base = dict(model_id=M1, task="D", variant="plain")
    d3 = _get(s, metric="delta_cos", layer_idx=3, **base)
    assert d3.value == pytest.approx(0.3) and d3.n == 4
    assert d3.note == "trials not paired: independent samples"  # trial indices differ here
    curve = s[(s["metric"] == "delta_cos") & (s["model_id"] == M1) & (s["variant"] == "plain")]
    curve = curve.sort_values("layer_idx")
    auc = _get(s, metric="auc_delta_cos", layer_idx=None, **base).value
    assert auc == pytest.approx(np.trapezoid(curve["value"], curve["layer_idx"].astype(float)))
    ctrl = _get(s, metric="delta_cos_ctrl", layer_idx=3, **base)
    assert abs(ctrl.value) < 0.05
    # unpaired records: no peak is claimed (the paired path picks it on half the concepts)
    assert not s["metric"].str.startswith("peak_").any()


def test_generic_and_register(results: Path):
    df = load_results(results)
    s = summarize(df)
    g = _get(s, task="seb-calibration", metric="correct:clean")
    assert (g.value, g.n) == (pytest.approx(2 / 3), 3)
    assert _get(s, task="seb-calibration", metric="mean_confidence:clean").value == pytest.approx(
        (0.9 + 0.6 + 0.7) / 3)
    assert not (s["metric"].str.startswith("text")).any()

    def custom(sub: pd.DataFrame) -> list[dict]:
        return [row({"model_id": sub["model_id"].iloc[0], "task": sub["task"].iloc[0]},
                    "n_trials", (float(len(sub)), math.nan, math.nan), len(sub))]

    register_summary("seb-", custom)
    try:
        s2 = summarize(df)
        assert _get(s2, task="seb-calibration", metric="n_trials").value == 3
        assert "A" in set(s2["task"])  # built-ins untouched
    finally:
        _SUMMARIES.pop("seb-")


def test_write_summary(results: Path):
    csv_path, json_path = write_summary(results)
    assert csv_path == results / "summary.csv" and csv_path.exists()
    table = pd.read_csv(csv_path)
    assert {"metric", "value", "lo", "hi", "n", "condition"} <= set(table.columns)
    data = json.loads(json_path.read_text())
    assert len(data) == len(table)


def test_figures_and_dashboard(results: Path, tmp_path: Path):
    s = summarize(load_results(results))
    panels = build_figures(s)
    titles = [p.title for p in panels]
    # task A's grid figure per model: a heatmap on a ≥ 2 × 2 grid, else a forest plot per cell
    a_grid = [t for t in titles if t.startswith(("Task A · injected-thought detection", "Task A · layer "))]
    assert any(M1 in t for t in a_grid) and len(a_grid) >= 2
    assert any(t.startswith("Task B") for t in titles)
    assert any(t.startswith("Task C") for t in titles)
    assert any("all models" in t for t in titles)  # Task D cross-model figure
    assert any(t.startswith("seb-calibration") for t in titles)
    heat = next(p for p in panels if p.title.startswith("Task A") and M1 in p.title)
    assert "n = %{customdata[2]}" in heat.fig.data[0].hovertemplate

    out = write_dashboard(results)
    assert out == results / "dashboard.html"
    html = out.read_text()
    assert html.count("Plotly.newPlot(") == len(panels)
    assert f'data-n-figures="{len(panels)}"' in html
    assert "cdn" not in html.split("<script>", 2)[1][:2000].lower()
    assert "4-bit GGUF dequantized" in html and "95% confidence interval" in html
    assert not list(results.glob(".dashboard.html.*"))  # no temp file left
    other = write_dashboard(results, tmp_path / "elsewhere" / "d.html")
    assert other.exists()


def test_dashboard_empty_dir(tmp_path: Path):
    out = write_dashboard(tmp_path)
    assert 'data-n-figures="0"' in out.read_text()
    with pytest.raises(FileNotFoundError):
        write_dashboard(tmp_path / "missing")


ROOT = Path(__file__).resolve().parents[1]


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "src"), str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return subprocess.run([sys.executable, "-m", "experiments.dashboard", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)


def test_cli(results: Path, tmp_path: Path, capsys):
    bad = _cli(str(tmp_path / "nope"))
    assert bad.returncode == 2 and bad.stderr.startswith("error:")
    assert bad.stderr.count("\n") == 1
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("not results")
    sys.path.insert(0, str(ROOT))
    from experiments.dashboard import main

    assert main([str(empty)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and err.count("\n") == 1
    assert [p.name for p in empty.iterdir()] == ["notes.txt"]  # nothing written
    # the shell surface is the error above; the working path in-process (a second process costs
    # seconds of imports)
    assert main([str(results), "--out", str(tmp_path / "out" / "dash.html")]) == 0, capsys.readouterr().err
    assert (tmp_path / "out" / "dash.html").exists() and (results / "summary.csv").exists()


def test_task_d_pairs_matched_trials():
    """Word-level offsets swamp an unpaired comparison; the paired difference recovers +0.01."""
    import pandas as pd

    from introspect.tasks.injection.metrics import summarize_d

    rows = []
    for i, offset in enumerate([-0.3, 0.0, 0.3, 0.6, 0.1]):
        for cond, bump in (("think", 0.01), ("dont_think", 0.0)):
            rows.append({"model_id": "m", "task": "D", "variant": "plain", "alpha": 0.0, "alpha_units": "unit",
                         "layer_idx": None, "condition": cond, "word": f"w{i}", "trial_index": 0,
                         "grade.layers": [0, 1], "grade.cos": [offset + bump, offset + 2 * bump],
                         "grade.cos_ctrl": [0.0, 0.0]})
    out = pd.DataFrame(summarize_d(pd.DataFrame(rows)))
    d = out[out.metric == "delta_cos"].set_index("layer_idx")
    assert d.loc[0, "value"] == pytest.approx(0.01) and d.loc[1, "value"] == pytest.approx(0.02)
    assert d.loc[0, "lo"] == pytest.approx(0.01) and d.loc[0, "n"] == 5  # no spread once paired


# ---------------------------------------------------------------- issue 9 records on a dashboard


def write_contract(root: Path) -> Path:
    """Task A records of the issue-9 contract (samples, matched controls, steering check, bias)
    for two models: one whose injection steers, one whose injection changes nothing."""
    for model, identical in (("tiny/steers", False), ("tiny/inert", True)):
        w = JsonlWriter(root / model.replace("/", "__") / "A.jsonl")
        w.write(make_header(run_id="r", model_id=model, fingerprint="f" * 16, seed=0,
                            config={"task": "A"}))
        for k, r in enumerate(inert_records() if identical else task_a_records()):
            r.model_id, r.trial_id, r.run_id = model, f"{model}-{k}", "r"
            w.write(r)
    return root


def test_dashboard_shows_issue9_figures(tmp_path: Path):
    root = write_contract(tmp_path / "results")
    s = summarize(load_results(root))
    assert {"ci", "n_clusters", "p", "p_holm", "note"} <= set(s.columns)
    titles = [p.title for p in build_figures(s)]
    for model in ("tiny/steers", "tiny/inert"):  # layers 2 and 4 at one α: a forest plot per cell,
        for layer in (2, 4):  # no heatmap and no one-point line over α (tests/test_figures_shape.py)
            assert f"Task A · layer {layer}, α 4 (raw) · {model} · paper" in titles, (layer, model)
        assert not any(k in t for t in titles for k in ("P(yes) vs α", "injected-thought detection ·"))
        assert f"Task A · steering check · {model}" in titles
    assert "Task A · best cell, measured on held-out concepts" in titles
    forest = next(p for p in build_figures(s) if p.title.startswith("Task A · layer 2"))
    assert all(t.error_x.array is not None for t in forest.fig.data)  # every point has its CI
    html = write_dashboard(root).read_text()
    assert ('class="verdict none" data-task="A"><strong>Task A · injected-thought detection — '
            "tiny/inert: no measurable effect</strong>") in html
    assert ('class="verdict inconclusive" data-task="A"><strong>Task A · injected-thought '
            "detection — tiny/steers: inconclusive</strong>") in html
    assert "smallest difference detectable" in html or "cannot reject" in html
    assert "Task A · every cell with its steering check" in html
    assert "random direction of the same norm" in html and "newcombe∪t(concept)" in html
    assert html.count("Plotly.newPlot(") == len(titles)


# ---------------------------------------------------------------- figures that fit the grid


def write_grid(root: Path, layers: tuple[int, ...], alphas: tuple[float, ...], n_concepts: int = 8,
               model: str = M1) -> Path:
    """Tasks A-D for one model on a layers × alphas grid, in the public layout: task A from the
    calibration simulation (plus a steering check), B and C with rates that grow with α, D on
    every layer (as task D measures)."""
    from introspect.report.calibration import Scenario, simulate, write

    rng = np.random.default_rng(1)
    cells = [(la, al) for la in layers for al in alphas]
    words = [f"concept{c:03d}" for c in range(n_concepts)]
    a = []
    for i, cell in enumerate(cells):  # one control stream per concept: the first cell's
        a += [{**r, "trial_id": f"{r['trial_id']}@{cell}"}  # ids are unique per cell, as in a run
              for r in simulate(Scenario(), n_concepts, 1, 2, seed=i, model_id=model, cell=cell)
              if i == 0 or r["condition"] not in ("control", "bias_control")]
    steer = dict(seed=0, model_id=model, task="A", variant="steer", alpha_units="raw", type="trial")
    for c, w in enumerate(words):
        for s in (0, 1):
            a.append({**steer, "condition": "steer_control", "word": w, "sample": s, "layer_idx": None,
                      "alpha": 0.0, "injected": False, "trial_id": f"sc{c}{s}",
                      "grade": {"lp_word": -10.0, "mentions": False, "coherent": True}})
            for la, al in cells:
                rise = 0.25 * al * (1 + 0.3 * rng.normal()) * (la / max(layers))
                for cond, lp in (("steer", -10 + rise), ("steer_random", -9.6 + 0.1 * s)):
                    a.append({**steer, "condition": cond, "word": w, "sample": s, "layer_idx": la,
                              "alpha": al, "injected": True, "trial_id": f"{cond}{c}{s}{la}{al}",
                              "grade": {"lp_word": lp, "mentions": False, "coherent": True}})
    write(a, root / model.replace("/", "__") / "A.jsonl")
    b, c_recs, d = [], [], []
    for w in words:
        for s in (0, 1):
            b.append(_rec(model, "B", "control", variant="thought", word=w, sample=s,
                          grade={"thought_correct": bool(rng.random() < 0.1), "repeat_correct": True,
                                 "success": False, "mc_correct": None}))
            c_recs.append(_rec(model, "C", "control", word=w, sample=s,
                               grade={"intentional": bool(rng.random() < 0.3), "label": "x"}))
            for la, al in cells:
                ok = bool(rng.random() < 0.1 + 0.03 * al)
                b.append(_rec(model, "B", "injected", la, al, variant="thought", word=w, sample=s,
                              grade={"thought_correct": ok, "repeat_correct": True, "success": ok,
                                     "mc_correct": None}))
                for cond, p in (("injected", 0.3 + 0.04 * al), ("mismatch", 0.3)):
                    c_recs.append(_rec(model, "C", cond, la, al, word=w, sample=s,
                                       grade={"intentional": bool(rng.random() < p), "label": "x"}))
        for variant in ("plain", "rewarded"):
            for cond in ("think", "dont_think"):
                bump = 0.3 if cond == "think" else 0.1
                cos = [0.05 + bump * math.exp(-((L - 6) ** 2) / 8) + 0.03 * rng.normal() for L in range(12)]
                d.append(_rec(model, "D", cond, variant=variant, word=w,
                              grade={"layers": list(range(12)), "cos": cos,
                                     "cos_ctrl": [float(x) for x in rng.normal(0.02, 0.01, 12)]}))
    for task, recs in (("B", b), ("C", c_recs), ("D", d)):
        _w(root, model, task, recs)
    return root


def one_point_lines(panels) -> list[str]:
    """Titles of panels with a line trace (not a filled band) of fewer than two points."""
    out = []
    for p in panels:
        for t in p.fig.data:
            if t.type == "scatter" and "lines" in (t.mode or "") and not t.fill:
                if np.isfinite(np.asarray(t.y, dtype=float)).sum() < 2:
                    out.append(p.title)
    return out


@pytest.mark.parametrize(("n_layers", "n_alphas", "kinds"), [
    (1, 1, {"forest"}),
    (1, 3, {"line over α"}),
    (3, 1, {"forest", "line over layers"}),
    (3, 3, {"line over α", "line over layers", "layer × α heatmap"}),
    (2, 2, {"line over α", "line over layers", "layer × α heatmap"}),
    (0, 0, set()),
])
def test_figure_kinds_per_grid_shape(n_layers: int, n_alphas: int, kinds: set[str]):
    from introspect.report.shapes import figure_kinds

    assert figure_kinds(n_layers, n_alphas) == kinds


GRIDS = {(1, 1): ((16,), (8.0,)), (1, 3): ((16,), (2.0, 4.0, 8.0)), (3, 1): ((8, 12, 16), (8.0,)),
         (3, 3): ((8, 12, 16), (2.0, 4.0, 8.0))}


@pytest.fixture(scope="module")
def grid_summaries(tmp_path_factory) -> dict[tuple[int, int], pd.DataFrame]:
    """Summaries of ``write_grid`` per (layers, α) shape, built on first use."""
    root = tmp_path_factory.mktemp("grids")

    class Lazy(dict):
        def __missing__(self, k):
            self[k] = summarize(load_results(write_grid(root / f"{k[0]}x{k[1]}", *GRIDS[k], n_concepts=5)))
            return self[k]

    return Lazy()


@pytest.mark.parametrize("shape", [(1, 1), (1, 3), (3, 1), (3, 3)])
def test_figures_follow_the_grid_shape(grid_summaries, shape):
    panels = build_figures(grid_summaries[shape])
    kinds = {p.kind for p in panels} - {""}
    assert not one_point_lines(panels), one_point_lines(panels)
    titles = [p.title for p in panels]
    n_layers, n_alphas = shape
    assert ("forest" in kinds) == (n_alphas == 1)
    assert ("line over α" in kinds) == (n_alphas >= 2)
    assert ("layer × α heatmap" in kinds) == (n_layers >= 2 and n_alphas >= 2)
    assert any(t.startswith("Task B · strict success per layer") for t in titles) == (n_layers >= 2)
    forests = [p for p in panels if p.kind == "forest" and "steering" not in p.title]
    assert len(forests) == (n_layers if n_alphas == 1 else 0)  # one per cell
    steering = next(p for p in panels if p.title.startswith("Task A · steering check"))
    assert steering.kind == ("forest" if shape == (1, 1) else "")  # one cell: no 1-column heatmap


def test_forest_rows_carry_interval_and_n(grid_summaries):
    s = grid_summaries[(1, 1)]
    panels = build_figures(s)
    forest = next(p for p in panels if p.title.startswith("Task A · layer 16, α 8 (raw)"))
    rates, diffs = forest.fig.data
    tpr = s[(s.task == "A") & (s.metric == "tpr") & (s.variant == "paper")].iloc[0]
    k = list(rates.y).index("TPR (injected)")
    assert rates.x[k] == pytest.approx(tpr.value)
    assert rates.error_x.array[k] == pytest.approx(tpr.hi - tpr.value)
    assert rates.error_x.arrayminus[k] == pytest.approx(tpr.value - tpr.lo)
    assert f"n={int(tpr.n)}" in forest.fig.layout.yaxis.ticktext[k]
    assert "Net = TPR − FPR" in diffs.y and "yes under a Gaussian vector" in rates.y
    steer = next(p for p in panels if p.title.startswith("Task A · steering check"))
    assert "mean over concepts" in steer.fig.data[-1].y and steer.fig.data[-1].error_x.array is not None
    assert len(steer.fig.data[0].y) == 5  # a dot per concept


def test_verdict_banner_is_generic_about_labels():
    from introspect.report.dashboard import verdicts

    rows = pd.DataFrame([
        {"metric": "verdict", "task": "A", "model_id": m, "condition": c, "note": f"why {m}"}
        for m, c in (("m1", "detected and identified"), ("m2", "yes-bias, not detection"),
                     ("m3", "no measurable effect"), ("m4", "a label nobody wrote yet"))])
    html = verdicts(rows)
    assert 'class="verdict detected"' in html and 'class="verdict none"' in html
    assert html.count('class="verdict inconclusive"') == 2
    assert "yes-bias, not detection</strong>. why m2" in html and "a label nobody wrote yet" in html


def test_a_forest_dot_without_interval_says_why():
    import plotly.graph_objects as go

    from introspect.report.forest import forest_rows

    d = pd.DataFrame({"value": [0.2, 0.5], "lo": [0.1, np.nan], "hi": [0.3, np.nan], "n": [20, 10],
                      "n_clusters": [10, 4], "ci": ["t(concept)", "none"], "p_holm": [np.nan, np.nan]})
    fig = go.Figure()
    forest_rows(fig, ["has one", "has none"], d, "#000", ".2f")
    ticks = fig.layout.yaxis.ticktext
    assert "no interval" not in ticks[0] and "n=20" in ticks[0]
    assert "n=10, 4 concepts: no interval" in ticks[1]


def test_verdict_banner_does_not_repeat_its_label():
    from introspect.report.dashboard import verdicts

    rows = pd.DataFrame([{"metric": "verdict", "task": "A", "model_id": "m", "condition": "inconclusive",
                          "note": "inconclusive (no Net survives Holm): Holm family: 9 tests"}])
    html = verdicts(rows)
    assert "inconclusive</strong>. No Net survives Holm): Holm family" not in html  # only the prefix goes
    assert html.count("inconclusive") == 2 and "</strong>. (no Net survives Holm): Holm family" in html


def test_the_calibration_simulation_reaches_the_verdicts_gates(tmp_path):
    """Issue 72: the coverage simulation wrote no steering rows, so every simulated cell was
    blocked before any gate and its "verdict detected 0.000" held by construction. Now its cell
    steers, and a strong positive reads "detected" (its null stays inconclusive in test_calibration)."""
    from dataclasses import replace

    from introspect.report.calibration import Scenario, simulate, write

    s = replace(Scenario(), a=1.5, ident=1.0)
    df = load_results(write(simulate(s, 30, 1, 2, seed=0), tmp_path / "A.jsonl"))
    v = summarize(df)
    v = v[v["metric"] == "verdict"].iloc[0]
    assert "does not steer" not in v["note"] and "1 cells steer" in v["note"]
    assert v["value"] >= 0.75, v["note"]
