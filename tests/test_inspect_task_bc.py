"""Tasks B and C inside Inspect are the toolkit's tasks B and C: ``inspect_ai.eval`` of
``thoughts_vs_text`` / ``prefill_intent`` on the ``introspect`` provider and a direct
``run_grid(["B"])`` / ``run_grid(["C"])`` of the same settings decode the same answers per
(variant, concept, trial, condition, cell, sample), and the log's records summarise as the
direct run's do. Skips without the ``inspect`` extra."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("inspect_ai")

from inspect_ai import eval  # noqa: E402
from inspect_ai.log import read_eval_log  # noqa: E402

from introspect.integrations.inspect import provider as P  # noqa: E402
from introspect.integrations.inspect.records import records_from_log, write_records  # noqa: E402
from introspect.integrations.inspect.tasks_bc import prefill_intent, thoughts_vs_text  # noqa: E402
from introspect.report import load_results, summarize  # noqa: E402
from introspect.tasks.base import TaskConfig  # noqa: E402
from introspect.tasks.runner import run_grid  # noqa: E402

# the same trials both ways: 3 concepts, 1 trial, K = 2 samples, two (layer, α) cells, 6 tokens
LAYERS, ALPHA, UNITS, N_CONCEPTS, SAMPLES, TOKENS = (1, 2), 8.0, "raw", 3, 2, 6
KEY = ["variant", "word", "trial_index", "condition", "layer_idx", "sample"]


def _direct(model, task: str, variant: str, out: Path) -> pd.DataFrame:
    cfg = TaskConfig(layers=LAYERS, alphas=(ALPHA,), alpha_units=UNITS, n_concepts=N_CONCEPTS, n_trials=1, seed=0,
                     max_new_tokens=TOKENS, variant=variant, n_samples=SAMPLES, batch_size=8)
    run_grid(model, [task], cfg, out, progress=False)
    return load_results(out)


def _inspect(model, path: str, task, tmp_path: Path, name: str) -> tuple[pd.DataFrame, list]:
    P._MODELS.setdefault(P.model_key(path), model)
    P._CONTEXTS.pop(id(model), None)  # the provider's vector bank reads the vectors the direct run cached
    log = eval(task, model=f"introspect/{path}", display="none", log_dir=str(tmp_path / "logs"))[0]
    assert log.status == "success", log.error
    log = read_eval_log(log.location)
    write_records(log, tmp_path / "inspect" / f"{name}.jsonl")
    return load_results(tmp_path / "inspect"), log


def _same_trials(direct: pd.DataFrame, insp: pd.DataFrame, grades: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    model_id = direct["model_id"].iloc[0]
    real = insp[insp["model_id"] == model_id]
    assert len(real) == len(direct) == len(insp)
    d, i = direct.set_index(KEY).sort_index(), real.set_index(KEY).sort_index()
    assert d.index.equals(i.index)
    for c in ("trial_id", "response", "prompt", "alpha_effective", "token_positions", "extra.sentence"):
        assert d[c].tolist() == i[c].tolist(), c
    assert [g["stream_seed"] for g in d["gen"]] == [g["stream_seed"] for g in i["gen"]]
    for c in grades:
        pd.testing.assert_series_equal(d[c], i[c], check_dtype=False)
    assert (d["response"].str.replace("\n----\n", "") != "").mean() > 0.5  # answers were generated
    # the answers differ between conditions and between samples (constant text would pass otherwise)
    on = ["variant", "word", "trial_index", "sample"]
    inj = d.xs("injected", level="condition").reset_index()[[*on, "response"]]
    ctl = d.xs("control", level="condition").reset_index()[[*on, "response"]]
    m = inj.merge(ctl, on=on, suffixes=("", "_c"))
    assert len(m) == len(inj) and (m["response"] != m["response_c"]).any()
    assert d.xs(0, level="sample")["response"].tolist() != d.xs(1, level="sample")["response"].tolist()
    return d, i


def _summaries_equal(direct: pd.DataFrame, insp: pd.DataFrame, metrics: set[str]) -> None:
    s_direct, s_insp = summarize(direct), summarize(insp)
    assert metrics <= set(s_direct["metric"])
    mine = s_insp[s_insp["model_id"] == direct["model_id"].iloc[0]].reset_index(drop=True)
    pd.testing.assert_frame_equal(s_direct.reset_index(drop=True), mine)


@pytest.mark.slow  # a direct run beside an Inspect eval: runs in CI (make test-all), not in the quick suite
def test_inspect_task_b_equals_the_direct_run(tiny_dir, tiny_model, tmp_path, threads):
    threads(1)
    path, model = str(tiny_dir("llama")), tiny_model("llama")
    direct = _direct(model, "B", "paper,mc", tmp_path / "direct")
    task = thoughts_vs_text(layer=list(LAYERS), alpha=ALPHA, alpha_units=UNITS, n_concepts=N_CONCEPTS,
                            samples=SAMPLES, max_tokens=TOKENS, variant="paper,mc")
    insp, log = _inspect(model, path, task, tmp_path, "B")
    assert len(direct) == 2 * N_CONCEPTS * (1 + len(LAYERS)) * SAMPLES
    assert set(direct["variant"]) == {"paper", "mc"} and set(direct["condition"]) == {"control", "injected"}
    # paper asks two prompts (thought, repeat) from the toolkit's two streams; mc one
    calls = {s.id: sum(e.event == "model" for e in s.events) for s in log.samples}
    assert {c for sid, c in calls.items() if sid.startswith("paper")} == {2}
    assert {c for sid, c in calls.items() if sid.startswith("mc")} == {1}
    grades = ["grade.success", "grade.thought_correct", "grade.repeat_correct", "grade.mc_correct", "grade.coherent"]
    d, _ = _same_trials(direct, insp, grades)
    assert (d.xs("paper", level="variant")["response"].str.count("\n----\n") == 1).all()
    assert d.xs("mc", level="variant")["extra.mc_answer"].notna().all()
    _summaries_equal(direct, insp, {"delta_strict_success", "delta_mc_accuracy", "verdict"})


@pytest.mark.slow  # a direct run beside an Inspect eval: runs in CI (make test-all), not in the quick suite
def test_inspect_task_c_equals_the_direct_run(tiny_dir, tiny_model, tmp_path, threads):
    threads(1)
    path, model = str(tiny_dir("llama")), tiny_model("llama")
    direct = _direct(model, "C", "paper", tmp_path / "direct")
    task = prefill_intent(layer=list(LAYERS), alpha=ALPHA, alpha_units=UNITS, n_concepts=N_CONCEPTS,
                          samples=SAMPLES, max_tokens=TOKENS)
    insp, log = _inspect(model, path, task, tmp_path, "C")
    assert len(direct) == N_CONCEPTS * (1 + 2 * len(LAYERS)) * SAMPLES
    assert set(direct["condition"]) == {"control", "injected", "mismatch"}
    d, i = _same_trials(direct, insp, ["grade.intentional", "grade.label", "grade.coherent"])
    assert d["extra.injected_word"].tolist() == i["extra.injected_word"].tolist()
    # first-token p(yes), p(no): the same forward pass up to rounding (a direct run pads its
    # prompts in a batch of other sentences' prompts, a request is decoded alone)
    for c in ("p_yes", "p_no"):
        assert i[c].tolist() == pytest.approx(d[c].tolist(), rel=1e-6, abs=1e-9), c
    mis = d.xs("mismatch", level="condition")
    assert (mis["extra.injected_word"] != mis.index.get_level_values("word")).all()
    _summaries_equal(direct, insp, {"delta_intentional:injected", "delta_intentional:injected-mismatch", "verdict"})
    assert records_from_log(log)[0]["task"] == "C"
