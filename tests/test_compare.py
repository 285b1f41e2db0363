"""One report across models: headline cells, model cards, the CLI end to end on two tiny models."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from introspect.report.compare import (
    CARD_PREFIX,
    cell_text,
    compare,
    headline_table,
    model_cards,
    wide_table,
)
from introspect.report.compare_page import render_compare

NAN = float("nan")
COLS = ["model_id", "task", "layer_idx", "alpha", "alpha_units", "variant", "metric", "condition",
        "value", "lo", "hi", "n"]


def _summary(rows: list[tuple]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=COLS)
    df["layer_idx"] = pd.array(df["layer_idx"], dtype="Int64")
    return df


SUMMARY = _summary([
    # m1, task A: two cells; (2, 8) has the larger Net, so every A figure is read there.
    ("m1", "A", 1, 4.0, "unit", "paper", "net", "", 0.1, -0.2, 0.4, 10),
    ("m1", "A", 1, 4.0, "unit", "paper", "tpr", "", 0.9, 0.6, 1.0, 10),
    ("m1", "A", 2, 8.0, "unit", "paper", "net", "", 0.5, 0.2, 0.8, 10),
    ("m1", "A", 2, 8.0, "unit", "paper", "tpr", "", 0.6, 0.3, 0.85, 10),
    ("m1", "A", 2, 8.0, "unit", "paper", "fpr", "", 0.1, 0.02, 0.4, 10),
    ("m1", "A", 2, 8.0, "unit", "paper", "steer_share", "", 0.7, 0.4, 0.9, 10),
    ("m1", "A", 2, 8.0, "unit", "paper", "steer_lp_rise:bread", "", 2.0, 1.0, 3.0, 10),
    ("m1", "A", 2, 8.0, "unit", "paper", "bias_yes_diff", "", 0.0, -0.1, 0.1, 10),
    # m2, task A: a NaN Net estimate in one cell, a real one in another
    ("m2", "A", 3, 8.0, "unit", "paper", "net", "", NAN, NAN, NAN, 0),
    ("m2", "A", 5, 8.0, "unit", "paper", "net", "", -0.1, -0.3, 0.1, 6),
    ("m2", "A", 5, 8.0, "unit", "paper", "tpr", "", 0.0, 0.0, 0.4, 6),
    # m2, task B: a split-half estimate picks its cell (not the in-sample maximum at L4)
    ("m2", "B", 4, 8.0, "unit", "paper", "delta_strict_success", "", 0.4, 0.1, 0.6, 8),
    ("m2", "B", 6, 8.0, "unit", "paper", "delta_strict_success", "", 0.2, 0.0, 0.4, 8),
    ("m2", "B", 6, 8.0, "unit", "paper", "strict_success:injected", "", 0.3, 0.1, 0.6, 8),
    ("m2", "B", 6, 8.0, "unit", "paper", "delta_strict_success@held_out", "", 0.1, -0.1, 0.3, 4),
    # the steering-check variant and a model-level verdict
    ("m1", "A", 2, 8.0, "unit", "steer", "steer_share", "", 0.5, 0.2, 0.8, 4),
    ("m1", "A", 2, 8.0, "unit", "steer", "steer_lp_rise", "", 1.5, 0.5, 2.5, 4),
    ("m1", "A", None, NAN, "unit", "all", "no_measurable_effect", "", 0.0, NAN, NAN, 8),
    # task D: the peak layer picked on half the concepts; the area belongs to no layer
    ("m1", "D", 3, 0.0, "unit", "plain", "peak_delta_cos@held_out", "", 0.03, -0.01, 0.07, 3),
    ("m1", "D", None, 0.0, "unit", "plain", "auc_delta_cos", "", 0.2, NAN, NAN, 6),
    # a self-knowledge task and a task with no declared headline
    ("m2", "seb-difficulty", None, NAN, "unit", "arith", "accuracy", "", 0.48, 0.26, 0.68, 10),
    ("m2", "mytask", None, NAN, "unit", "default", "zeta", "", 1.0, NAN, NAN, 3),
    ("m2", "mytask", None, NAN, "unit", "default", "alpha_rate", "", 0.2, 0.1, 0.3, 3),
])


def test_headline_picks_the_best_cell_and_reads_the_rest_there():
    h = headline_table(SUMMARY)
    a1 = h[(h.model_id == "m1") & (h.task == "A") & (h.variant == "paper")].set_index("metric")
    assert list(a1.index) == ["net", "tpr", "fpr", "steer_share"]  # per-concept rows left out
    assert (a1["layer_idx"] == 2).all() and (a1["alpha"] == 8.0).all() and (a1["n_cells"] == 2).all()
    assert a1.loc["tpr", "value"] == 0.6  # the best cell's TPR, not the larger one elsewhere
    assert a1.loc["net", "role"] == "headline" and a1.loc["steer_share", "role"] == "steering"
    assert a1.loc["fpr", "role"] == "same cell"
    a2 = h[(h.model_id == "m2") & (h.task == "A")].set_index("metric")
    assert a2.loc["net", "value"] == -0.1 and a2.loc["net", "layer_idx"] == 5  # NaN never wins
    b = h[h.task == "B"]
    assert b["metric"].tolist() == ["delta_strict_success@held_out", "delta_strict_success",
                                    "strict_success:injected"]
    assert (b["layer_idx"] == 6).all() and b["role"].tolist()[:2] == ["headline (held out)", "same cell"]
    steer = h[(h.task == "A") & (h.variant == "steer")]
    assert steer["metric"].tolist() == ["steer_share", "steer_lp_rise"] and steer["role"].iloc[0] == "headline"
    assert h[(h.variant == "all")]["metric"].tolist() == ["no_measurable_effect"]
    d = h[h.task == "D"].set_index("metric")
    assert list(d.index) == ["peak_delta_cos@held_out", "auc_delta_cos"]
    assert d.loc["peak_delta_cos@held_out", "layer_idx"] == 3 and pd.isna(d.loc["auc_delta_cos", "layer_idx"])
    assert d["role"].tolist() == ["headline", "all layers"]
    assert h[h.task == "seb-difficulty"]["value"].tolist() == [0.48]
    assert h[h.task == "mytask"]["metric"].tolist() == ["zeta"]  # first metric of its summariser


def test_cell_text_states_interval_n_and_cell():
    h = headline_table(SUMMARY)

    def at(*key: str) -> pd.Series:
        m = (h["model_id"] == key[0]) & (h["task"] == key[1]) & (h["variant"] == key[2])
        return h[m & (h["metric"] == key[3])].iloc[0]

    assert cell_text(at("m1", "A", "paper", "net")) == "0.5 [0.2, 0.8] n=10 · L2 α8 (best of 2)"
    assert cell_text(at("m1", "A", "paper", "tpr")) == "0.6 [0.3, 0.85] n=10 · L2 α8"
    assert cell_text(at("m2", "B", "paper", "delta_strict_success@held_out")) == (
        "0.1 [-0.1, 0.3] n=4 · L6 α8 (picked on the other half of the concepts, of 2)")
    assert cell_text(at("m1", "D", "plain", "peak_delta_cos@held_out")) == (
        "0.03 [-0.01, 0.07] n=3 · L3 (picked on the other half of the concepts)")
    assert cell_text(at("m1", "D", "plain", "auc_delta_cos")) == "0.2 n=6"
    assert cell_text(at("m2", "seb-difficulty", "arith", "accuracy")) == "0.48 [0.26, 0.68] n=10"


def _card(model: str, params: int, **kw) -> str:
    card = {"model": model, "family": "llama", "parameters": params, "layers": 4, "d_model": 64,
            "quantization": "Q4_K_M GGUF, dequantized to fp32", "dtype": "float32",
            "fingerprint": f"gguf:{model}", **kw}
    return CARD_PREFIX + json.dumps(card)


def test_model_cards_from_headers():
    headers = pd.DataFrame([
        {"model_id": "m1", "fingerprint": "gguf:old", "ts": "2026-01-01", "notes": ["x"]},
        {"model_id": "m1", "fingerprint": "gguf:m1", "ts": "2026-01-02",
         "notes": ["4-bit", _card("m1", 500)]},
        {"model_id": "m2", "fingerprint": "sha256:ab", "ts": "2026-01-01",
         "notes": [_card("m2", 100, family="gemma3")]},
        {"model_id": "m3", "fingerprint": "sha256:cd", "ts": "2026-01-01", "notes": []},
    ])
    cards = model_cards(headers, ["m4"])
    assert list(cards["model"]) == ["m2", "m1", "m3", "m4"]  # by parameters, unknown last
    m2 = cards.set_index("model").loc["m2"]
    assert (m2.family, m2.parameters, m2.layers, m2.d_model) == ("gemma3", 100, 4, 64)
    assert m2["quantization"] == "Q4_K_M GGUF, dequantized to fp32" and m2["dtype"] == "float32"
    m3 = cards.set_index("model").loc["m3"]
    assert m3.fingerprint == "sha256:cd" and pd.isna(m3.parameters) and pd.isna(m3.family)


def test_seb_mean_is_002s_score_only_with_all_three_tests():
    """002's self-execution score: the mean of the three logit accuracies, for a model with all three
    (m1); none for a model whose restriction truth is one class (m2, with a note saying why) or that
    did not run all three (m3)."""
    parts = [("seb-association", "logit_accuracy", 0.6), ("seb-restriction", "logit_accuracy", 0.8),
             ("seb-difficulty", "logit_pair_accuracy", 0.4)]
    rows = [(m, t, None, NAN, "unit", "v", metric, "", val, val - 0.1, val + 0.1, 30)
            for m in ("m1", "m2") for t, metric, val in parts]
    rows += [("m2", "seb-restriction", None, NAN, "unit", "v", "warning_judged_truth_one_class", "", 1.0, NAN, NAN, 240),
             ("m3", "seb-association", None, NAN, "unit", "v", "logit_accuracy", "", 0.7, 0.6, 0.8, 30)]
    comp = compare(_summary(rows), pd.DataFrame())
    mean = comp.headline[comp.headline.metric == "seb_mean_accuracy"]
    assert mean["model_id"].tolist() == ["m1"] and mean["value"].iloc[0] == pytest.approx(0.6)
    assert mean["lo"].isna().all() and mean["n"].iloc[0] == 3  # no interval: the parts carry theirs
    notes = " ".join(comp.notes)
    assert "m2: no 002 score" in notes and "seb-restriction has no logit_accuracy" in notes
    assert "m3" not in notes  # a test not run is plain from the table: no note
    assert "seb-mean" in set(wide_table(comp)["task"])


def test_wide_table_and_page():
    headers = pd.DataFrame([{"model_id": m, "fingerprint": m, "ts": "t", "notes": [_card(m, p)]}
                            for m, p in (("m1", 200), ("m2", 100))])
    comp = compare(SUMMARY, headers)
    assert comp.models == ("m2", "m1")
    wide = wide_table(comp)
    assert list(wide.columns) == ["task", "variant", "metric", "m2", "m1"]
    assert list(dict.fromkeys(wide["task"])) == ["A", "B", "D", "seb-difficulty", "mytask"]
    net = wide[(wide.task == "A") & (wide.metric == "net")].iloc[0]
    assert net["m1"].startswith("0.5 [0.2, 0.8]") and net["m2"].startswith("-0.1 [")
    assert wide[(wide.task == "D")]["m2"].tolist() == ["", ""]  # m2 has no task D
    html = render_compare(comp, source="x")
    assert 'data-n-models="2"' in html and 'data-n-figures="1"' in html
    titles = [json.dumps(t)[1:-1] for t in ("A · paper · net", "B · paper · delta_strict_success@held_out")]
    assert all(t in html for t in titles)  # one forest plot per task and variant
    assert "Q4_K_M GGUF, dequantized to fp32" in html and "<td>200</td>" in html
    assert "Steering-check rows" in html
    assert "<script src" not in html and len(html) > 1_000_000  # plotly.js inline, offline
    no_steer = compare(SUMMARY[~SUMMARY.metric.str.startswith("steer")], headers)
    assert "carry no steering check" in render_compare(no_steer)
    # seb-difficulty present: paper 002's stated difficulty figures beside it, none of its other tests
    assert 'id="paper-002"' in html and "<td>GPT-4.1</td><td>0.73</td>" in html and "Gemini 2.5 Pro</td><td>0.32" not in html
    assert 'id="paper-002"' not in render_compare(compare(SUMMARY[SUMMARY.task != "seb-difficulty"], headers))


def test_paper_002s_figures_are_its_text_and_its_mean_needs_all_three_tests():
    from introspect.report.paper002 import reported_rows

    assert reported_rows(["A", "D"]) == []
    assoc = reported_rows(["seb-association"])
    assert [r[1:3] for r in assoc] == [["o1-mini (best of all models)", "0.63"]] and assoc[0][4] == "text_accuracy"
    every = reported_rows(["seb-association", "seb-restriction", "seb-difficulty"])
    assert {r[0] for r in every} == {"seb-association", "seb-restriction", "seb-difficulty", "seb-mean"}
    assert all(0.0 <= float(r[2]) <= 1.0 for r in every)


# ---------------------------------------------------------------- the CLI on two tiny models


@pytest.fixture(scope="module")
def two_models(tiny_dir, tmp_path_factory):
    from experiments import run

    out = tmp_path_factory.mktemp("cmp") / "results"
    for fam in ("llama", "qwen2"):
        rc = run.main(["--task", "A", "D", "--model", str(tiny_dir(fam)), "--layers", "1",
                       "--alphas", "4", "8", "--n-concepts", "2", "--max-new-tokens", "4",
                       "--option", "n_bias=1", "--out", str(out), "--no-progress"])
        assert rc == 0
        # a results folder holding several models gets the side-by-side page from the run itself
        assert (out / "compare.html").exists() == (fam == "qwen2")
    return out


def test_compare_cli_end_to_end(two_models, tiny_model, tiny_dir, capsys):
    from experiments import compare as cli

    assert cli.main([str(two_models / "llama"), str(two_models / "qwen2"), "--title", "T"]) == 0
    out_text = capsys.readouterr().out
    html_path, csv_path = two_models / "compare.html", two_models / "compare.csv"
    assert f"wrote {html_path}" in out_text
    html = html_path.read_text()
    # a model loaded from a local folder is named by the folder's name, never its absolute path
    models = [tiny_dir(f).name for f in ("llama", "qwen2")]
    assert models == ["llama", "qwen2"] and 'data-n-models="2"' in html
    assert all(f"<tr><td>{m}</td>" in html for m in models)
    assert not any(str(tiny_dir(f)) in html for f in ("llama", "qwen2"))
    h = pd.read_csv(csv_path)
    net = h[(h.task == "A") & (h.metric == "net") & (h.variant == "paper")]
    assert sorted(net.model_id) == sorted(models) and (net.n_cells == 2).all()
    assert set(h[h.task == "D"].metric) >= {"peak_delta_cos@held_out", "auc_delta_cos"}
    # Card rows come from the run headers the runner wrote (notes carry ModelInfo.card()).
    for fam, m in zip(("llama", "qwen2"), models):
        n = sum(p.numel() for p in tiny_model(fam).original_model.parameters())
        row = re.search(rf"<tr><td>{re.escape(m)}</td>(.*?)</tr>", html).group(1)
        assert f"<td>{n:,}</td>" in row and "<td>4</td><td>64</td>" in row and "float32" in row
    # The same as giving the parent folder once.
    assert cli.main([str(two_models), "--out", str(two_models / "b.html")]) == 0
    assert pd.read_csv(two_models / "b.csv").equals(h)


def test_compare_cli_bad_input_is_one_line(tmp_path, capsys):
    from experiments import compare as cli

    for argv in ([str(tmp_path / "nope")], [str(tmp_path)]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and "\n" not in err
    assert not list(tmp_path.iterdir())


CHROMIUM = Path("/usr/bin/chromium")


@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium")
def test_compare_page_renders_without_js_errors(tmp_path):
    headers = pd.DataFrame([{"model_id": m, "fingerprint": m, "ts": "t", "notes": [_card(m, 9)]}
                            for m in ("m1", "m2")])
    page = tmp_path / "compare.html"
    page.write_text(render_compare(compare(SUMMARY, headers)))
    res = subprocess.run([str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu",
                          "--no-first-run", "--disable-dev-shm-usage",
                          f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000",
                          "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=180)
    dom = res.stdout
    assert res.returncode == 0 and "<html" in dom, res.stderr[-2000:]
    assert re.search(r'data-js-errors="([^"]*)"', dom).group(1) == ""
    assert re.search(r'data-plots-rendered="(\d+)"', dom).group(1) == "1"
