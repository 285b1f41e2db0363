"""Task D inside Inspect is the toolkit's task D: ``inspect_ai.eval(internal_control(...))`` on
the ``introspect`` provider (a ``readout`` request per trial: no generation, floats back) and a
direct ``run_grid(["D"])`` of the same settings read the same per-layer cosines per (variant,
concept, trial, condition), and the log's records summarise as the direct run's do. Skips
without the ``inspect`` extra."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("inspect_ai")

from inspect_ai import eval  # noqa: E402
from inspect_ai.log import read_eval_log  # noqa: E402

from introspect.integrations.inspect import provider as P  # noqa: E402
from introspect.integrations.inspect.records import records_from_log, write_records  # noqa: E402
from introspect.integrations.inspect.request import RequestError, parse_request  # noqa: E402
from introspect.integrations.inspect.tasks_d import internal_control  # noqa: E402
from introspect.report import load_results, summarize  # noqa: E402
from introspect.tasks.base import TaskConfig  # noqa: E402
from introspect.tasks.runner import run_grid  # noqa: E402

N_CONCEPTS, N_TRIALS, N_CTRL = 3, 2, 6
KEY = ["variant", "word", "trial_index", "condition"]
GRADES = ["cos", "cos_centred", "cos_ctrl", "cos_ctrl_centred", "cos_ctrl_sd", "cos_ctrl_sd_centred"]


@pytest.mark.slow  # a direct run beside an Inspect eval: runs in CI (make test-all), not in the quick suite
def test_inspect_task_d_equals_the_direct_run(tiny_dir, tiny_model, tmp_path, threads):
    threads(1)
    path, model = str(tiny_dir("llama")), tiny_model("llama")
    # batch 1: each prompt's forward pass alone, as the provider reads a request (a batch pads
    # prompts of other lengths beside it, which moves the cosines in the 6th digit)
    cfg = TaskConfig(n_concepts=N_CONCEPTS, n_trials=N_TRIALS, seed=0, batch_size=1).with_options(
        n_control_words=N_CTRL)
    run_grid(model, ["D"], cfg, tmp_path / "direct", progress=False)
    direct = load_results(tmp_path / "direct")
    P._MODELS.setdefault(P.model_key(path), model)
    P._CONTEXTS.pop(id(model), None)  # the provider's vector bank reads the vectors the direct run cached
    task = internal_control(n_concepts=N_CONCEPTS, n_trials=N_TRIALS, n_control_words=N_CTRL)
    log = eval(task, model=f"introspect/{path}", display="none", log_dir=str(tmp_path / "logs"))[0]
    assert log.status == "success", log.error
    log = read_eval_log(log.location)
    recs = records_from_log(log)
    assert recs[0]["type"] == "header" and recs[0]["task"] == "D"
    write_records(log, tmp_path / "inspect" / "D.jsonl")
    insp = load_results(tmp_path / "inspect")

    assert len(direct) == len(insp) == 2 * 2 * N_CONCEPTS * N_TRIALS  # 2 variants x 2 conditions
    assert set(direct["condition"]) == {"think", "dont_think", "rewarded", "punished"}
    d, i = direct.set_index(KEY).sort_index(), insp.set_index(KEY).sort_index()
    assert d.index.equals(i.index)
    for c in ("trial_id", "model_id", "prompt", "response", "token_positions", "extra.sentence",
              "extra.control_words", "grade.layers"):
        assert d[c].tolist() == i[c].tolist(), c
    for c in [*GRADES, "cos_ctrl_words", "cos_ctrl_words_centred"]:  # the same forward pass, bitwise
        assert d[f"grade.{c}"].tolist() == i[f"grade.{c}"].tolist(), c
    a = np.array(d["grade.cos_ctrl_words"].tolist())
    assert a.shape == (len(d), N_CTRL, model.cfg.n_layers)
    # the conditions differ (the readout sees the instruction), or the comparison proves nothing
    assert d.xs("think", level="condition")["grade.cos"].tolist() != \
        d.xs("dont_think", level="condition")["grade.cos"].tolist()

    s_direct, s_insp = summarize(direct), summarize(insp)
    assert {"delta_cos", "delta_cos_centred", "delta_cos_specific"} <= {m.split(":")[0].split("@")[0]
                                                                       for m in s_direct["metric"]}
    pd.testing.assert_frame_equal(s_direct.reset_index(drop=True), s_insp.reset_index(drop=True))


def test_readout_requests_are_checked():
    ok = {"readout": {"concept": "bread", "positions": {"text": "A line."}, "control_words": ["ocean"]}}
    r = parse_request({"introspect": ok}).readout
    assert r == {"kind": "concept_cosine", "concept": "bread", "positions": {"text": "A line."},
                 "control_words": ["ocean"], "layers": "all"}
    for bad, msg in (({"kind": "logits"}, "kind"), ({"concept": ""}, "concept"), ({"positions": "all"}, "positions"),
                     ({"control_words": "ocean"}, "control_words"), ({"layers": [-1]}, "layers"),
                     ({"who": 1}, "unknown keys")):
        with pytest.raises(RequestError, match=msg):
            parse_request({"introspect": {"readout": {**ok["readout"], **bad}}})
    with pytest.raises(RequestError, match="no conditions"):
        parse_request({"introspect": {**ok, "conditions": [{"direction": "none"}]}})
    with pytest.raises(RequestError, match="no conditions"):
        parse_request({"introspect": {**ok, "concept": "bread", "layer": 1, "alpha": 2}})
