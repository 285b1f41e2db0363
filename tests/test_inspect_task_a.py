"""Task A inside Inspect is the toolkit's task A: ``inspect_ai.eval(injected_thoughts(...))`` on
the ``introspect`` provider and a direct ``run_grid(["A"])`` of the same settings decode the same
answers per (concept, trial, condition, sample), and the Inspect log's records summarise as the
direct run's do; ``inspect eval`` from the command line writes a log the records read.
Skips without the ``inspect`` extra."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("inspect_ai")

from inspect_ai import eval  # noqa: E402
from inspect_ai.log import read_eval_log  # noqa: E402

from introspect.integrations.inspect import provider as P  # noqa: E402
from introspect.integrations.inspect.records import records_from_log, write_records  # noqa: E402
from introspect.integrations.inspect.request import RequestError, parse_request  # noqa: E402
from introspect.integrations.inspect.tasks import injected_thoughts  # noqa: E402
from introspect.report import load_results, summarize  # noqa: E402
from introspect.tasks.base import TaskConfig  # noqa: E402
from introspect.tasks.runner import run_grid  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TASK_FILE = ROOT / "src/introspect/integrations/inspect/tasks.py"
# the same trials both ways: 3 concepts, 1 trial, K = 2 samples, two (layer, α) cells, 6 tokens,
# 2 bias questions per concept
LAYERS, ALPHA, UNITS, N_CONCEPTS, SAMPLES, TOKENS, N_BIAS = (1, 2), 8.0, "raw", 3, 2, 6, 2
CONDITIONS = {"control", "injected", "random", "concept_random", "negative"}
KEY = ["word", "trial_index", "extra.question", "condition", "layer_idx", "sample"]


def _direct(model, out: Path) -> pd.DataFrame:
    """The toolkit's own task A in the paper framing: detection trials and bias questions (no
    steering check and no latent naming: the Inspect task does not read them)."""
    cfg = TaskConfig(layers=LAYERS, alphas=(ALPHA,), alpha_units=UNITS, n_concepts=N_CONCEPTS, n_trials=1,
                     seed=0, max_new_tokens=TOKENS, variant="paper", n_samples=SAMPLES,
                     batch_size=8).with_options(n_bias=N_BIAS, steer_check=False, latent_naming=False)
    run_grid(model, ["A"], cfg, out, progress=False)
    return load_results(out)


@pytest.mark.slow  # a direct run beside an Inspect eval: runs in CI (make test-all), not in the quick suite
def test_inspect_task_a_equals_the_direct_run(tiny_dir, tiny_model, tmp_path, threads):
    threads(1)
    path, model = str(tiny_dir("llama")), tiny_model("llama")
    direct = _direct(model, tmp_path / "direct")
    P._MODELS.setdefault(P.model_key(path), model)
    P._CONTEXTS.pop(id(model), None)  # the provider's vector bank reads the vectors the direct run cached
    task = injected_thoughts(layer=list(LAYERS), alpha=ALPHA, alpha_units=UNITS, n_concepts=N_CONCEPTS, samples=SAMPLES,
                             max_tokens=TOKENS, n_bias=N_BIAS)
    log = eval(task, model=f"introspect/{path}", display="none", log_dir=str(tmp_path / "logs"))[0]
    assert log.status == "success", log.error
    write_records(read_eval_log(log.location), tmp_path / "inspect" / "A.jsonl")
    insp = load_results(tmp_path / "inspect")

    # the same trials: every direct record has its Inspect twin (same trial id), same answer
    model_id = direct["model_id"].iloc[0]
    real = insp[insp["model_id"] == model_id]
    n_cells = len(LAYERS)
    assert len(direct) == N_CONCEPTS * ((1 + 4 * n_cells) + N_BIAS * (1 + n_cells)) * SAMPLES
    assert len(real) == len(direct)
    assert set(direct["condition"]) == CONDITIONS | {"bias", "bias_control"}
    direct, real = (x.assign(**{"extra.question": x["extra.question"].fillna("")}) for x in (direct, real))
    d, i = direct.set_index(KEY).sort_index(), real.set_index(KEY).sort_index()
    assert d.index.equals(i.index)
    assert (d["trial_id"] == i["trial_id"]).all()
    assert (d["response"] == i["response"]).all()
    assert (d["prompt"] == i["prompt"]).all()
    assert [g["stream_seed"] for g in d["gen"]] == [g["stream_seed"] for g in i["gen"]]
    for c in ("p_yes", "alpha_effective"):
        assert d[c].tolist() == i[c].tolist(), c
    det = ~d.index.get_level_values("condition").str.startswith("bias")
    for c in ("grade.detected", "grade.identified", "grade.identified_mismatch", "extra.mismatch_word"):
        pd.testing.assert_series_equal(d[c][det], i[c][det], check_dtype=False)
    for c in ("grade.bias_answer", "grade.wrong", "grade.coherent", "extra.correct"):
        pd.testing.assert_series_equal(d[c][~det], i[c][~det], check_dtype=False)
    assert (d["gen"].map(lambda g: g["max_new_tokens"]) == i["gen"].map(lambda g: g["max_new_tokens"])).all()
    cr = d.index.get_level_values("condition") == "concept_random"
    assert d["extra.vector_word"][cr].tolist() == i["extra.vector_word"][cr].tolist()
    assert d["grade.names_vector_word"][cr].tolist() == i["grade.names_vector_word"][cr].tolist()
    assert (d["response"] != "").mean() > 0.5  # answers were generated
    # the answers differ between conditions somewhere (the test would pass on constant text otherwise)
    assert d.xs("injected", level="condition")["response"].tolist() != \
        d.xs("control", level="condition")["response"].tolist()

    # the summaries: task A's summariser on both, the direct model's rows equal
    s_direct, s_insp = summarize(direct), summarize(insp)
    assert {"net", "identification", "introspection_score", "p_yes_shift:bias", "verdict"} <= set(s_direct["metric"])
    mine = s_insp[s_insp["model_id"] == model_id].reset_index(drop=True)
    pd.testing.assert_frame_equal(s_direct.reset_index(drop=True), mine)
    # the placebo rows (the zero injection, under <model>+placebo) pair with a copy of the control
    plc = s_insp[s_insp["model_id"] == model_id + "+placebo"].set_index("metric")["value"]
    assert len(plc.loc[["net"]]) == len(LAYERS) and (plc.loc[["net"]] == 0).all()
    assert (plc.loc[["answers_identical"]] == 1).all()


def test_trial_coordinates_are_checked():
    ok = {"concept": "bread", "layer": 2, "alpha": 4, "trial": {"task": "A", "index": 1, "word": "bread"}}
    assert parse_request({"introspect": ok}).trial == {"task": "A", "variant": "default", "index": 1, "word": "bread",
                                                       "seed": 0, "params": {}, "epoch": 1,
                                                       "part": 0}
    for bad, msg in (({"index": 1}, "task"), ({"task": "A", "index": -1}, "index"), ({"task": "A", "seed": "0"}, "seed"),
                     ({"task": "A", "who": 1}, "unknown keys"), ("A", "object")):
        with pytest.raises(RequestError, match=msg):
            parse_request({"introspect": {**ok, "trial": bad}})
    with pytest.raises(RequestError, match="top level"):
        parse_request({"introspect": {**ok, "conditions": [{"direction": "none", "trial": {"task": "A"}}]}})


@pytest.mark.slow  # a subprocess (~15 s): runs in CI (make test-all), not in the quick suite
def test_inspect_eval_command_line(tiny_dir, tmp_path):
    """``inspect eval tasks.py@injected_thoughts --model introspect//<tiny model> --limit 2``."""
    exe = Path(sys.executable).parent / "inspect"
    if not exe.exists():
        pytest.skip("no inspect executable beside this Python")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "INSPECT_DISPLAY": "none",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    cmd = [str(exe), "eval", f"{TASK_FILE}@injected_thoughts", "--model", f"introspect/{tiny_dir('llama')}",
           "-T", "layer=2", "-T", "n_concepts=3", "-T", "max_tokens=4", "-T", "n_bias=0", "--limit", "2",
           "--log-dir", str(tmp_path / "logs"), "--display", "none", "--log-format", "json", "--no-log-realtime"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    logs = sorted((tmp_path / "logs").glob("*.json"))
    assert len(logs) == 1
    log = read_eval_log(str(logs[0]))
    assert log.status == "success" and len(log.samples) == 2
    recs = records_from_log(log)
    trials = [r for r in recs[1:] if not r["model_id"].endswith("+placebo")]
    assert recs[0]["type"] == "header" and recs[0]["task"] == "A"
    assert len(trials) == 2 * 5 and {r["task"] for r in trials} == {"A"}
    assert {r["condition"] for r in trials} == CONDITIONS
    assert all(isinstance(r["grade"]["detected"], bool) for r in trials)
