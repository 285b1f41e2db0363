"""An Inspect eval through the ``introspect`` provider, end to end: ``inspect_ai.eval`` on a
2-sample task with the tiny model → ``read_eval_log`` → ``records_from_log`` → ``validate`` →
the report's loader and summariser. Skips without the ``inspect`` extra."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("inspect_ai")

from inspect_ai import Task, eval  # noqa: E402
from inspect_ai.dataset import Sample  # noqa: E402
from inspect_ai.log import read_eval_log  # noqa: E402
from inspect_ai.model import GenerateConfig  # noqa: E402

from introspect.integrations.inspect import provider as P  # noqa: E402
from introspect.integrations.inspect.records import records_from_log, write_records  # noqa: E402
from introspect.integrations.inspect.scorers import detection  # noqa: E402
from introspect.integrations.inspect.solvers import inject  # noqa: E402
from introspect.records.jsonl import CONDITIONS, read_records, validate  # noqa: E402
from introspect.report import load_results, summarize  # noqa: E402

GROUP = {"concept": "bread", "layer": 2, "alpha": 2, "alpha_units": "resid", "stream_key": "s1",
         "conditions": [{"direction": "none"}, {"direction": "zero"}, {"direction": "concept"}]}
SINGLE = {"concept": "ocean", "layer": 1, "alpha": 4, "positions": "all"}  # the solver keys it by sample id


def _task() -> Task:
    return Task(
        dataset=[Sample(id="s1", input="Tell me about it.", metadata={"introspect": GROUP}),
                 Sample(id="s2", input="Do you detect an injected thought?", metadata={"introspect": SINGLE})],
        solver=inject(), scorer=detection(), config=GenerateConfig(max_tokens=8), name="tiny_detect",
    )


@pytest.fixture(scope="module")
def eval_log(tiny_dir, tiny_model, tmp_path_factory):
    path = str(tiny_dir("llama"))
    P._MODELS.setdefault(P.model_key(path), tiny_model("llama"))  # the session's model, loaded once
    out = tmp_path_factory.mktemp("inspect-logs")
    logs = eval(_task(), model=f"introspect/{path}", display="none", log_dir=str(out), log_format="json")
    assert len(logs) == 1 and logs[0].status == "success", logs[0].error
    return read_eval_log(logs[0].location)


def test_eval_log_to_valid_records(eval_log):
    recs = records_from_log(eval_log)
    header, trials = recs[0], recs[1:]
    assert header["type"] == "header" and validate(header) is header
    assert header["fingerprint"] == eval_log.samples[0].output.metadata["introspect"]["fingerprint"]
    assert len(trials) == 4  # three conditions of s1, one of s2
    for r in trials:
        assert validate(r) is r and r["condition"] in CONDITIONS and r["task"] == "tiny_detect"
    by = {(r["extra"]["inspect_sample_id"], r["extra"]["label"]): r for r in trials}
    control, placebo, injected = by[("s1", "control")], by[("s1", "placebo")], by[("s1", "injected")]
    assert placebo["response"] == control["response"]  # the zero injection reproduces its control
    assert placebo["gen"]["stream_seed"] == control["gen"]["stream_seed"] == injected["gen"]["stream_seed"]
    assert injected["response"] != control["response"]
    assert control["condition"] == "control" and not control["injected"] and control["layer_idx"] is None
    assert placebo["condition"] == "injected" and placebo["model_id"] == control["model_id"] + "+placebo"
    assert injected["model_id"] == control["model_id"] and injected["layer_idx"] == 2
    assert injected["alpha_units"] == "resid" and injected["extra"]["alpha_as"]["resid"] == pytest.approx(2.0)
    s2 = by[("s2", "injected")]
    assert s2["word"] == "ocean" and s2["alpha"] == 4.0 and s2["token_positions"] == "all"
    assert s2["extra"]["stream_key"] == "s2" and control["extra"]["stream_key"] == "s1"
    # grades come from the detection scorer, one per choice
    for r in trials:
        assert isinstance(r["grade"]["detected"], bool) and "right" in r["grade"]
        assert 0 <= r["p_yes"] <= 1 and 0 <= r["p_no"] <= 1  # first-token white-box score, per choice
    assert placebo["p_yes"] == control["p_yes"]
    assert len({r["trial_id"] for r in trials}) == 4
    assert [r["trial_id"] for r in records_from_log(eval_log)[1:]] == [r["trial_id"] for r in trials]


def test_no_tensor_in_the_log(eval_log):
    text = json.dumps(json.load(open(eval_log.location)))
    assert "tensor(" not in text.lower() and "dtype=torch" not in text
    assert '"extra_body"' in text and '"introspect"' in text  # the JSON request is what the log holds
    events = [e for s in eval_log.samples for e in s.events if e.event == "model"]
    assert len(events) == 2
    for e in events:
        assert json.loads(json.dumps(e.output.metadata)) == e.output.metadata
        assert e.config.extra_body["introspect"]["stream_key"] in ("s1", "s2")


def test_records_feed_the_summariser(eval_log, tmp_path):
    path = write_records(eval_log, tmp_path / "tiny" / "tiny_detect.jsonl")
    assert sum(1 for r in read_records(path, strict=True) if r["type"] == "trial") == 4
    df = load_results(tmp_path)
    assert len(df) == 4 and set(df["model_id"]) == {df["model_id"][0].removesuffix("+placebo"),
                                                   df["model_id"][0].removesuffix("+placebo") + "+placebo"}
    summary = summarize(df)
    names = set(summary["metric"])
    assert {"detected:control", "detected:injected", "right:control"} <= names
    n = summary.set_index(["model_id", "metric"])["n"]
    assert int(n.loc[(df["model_id"][0].removesuffix("+placebo"), "detected:injected")].sum()) == 2


def test_task_a_as_an_inspect_eval(tiny_dir, tiny_model, tmp_path):
    """The ``injected_thoughts`` task (task A's question, 2 concepts, 2 epochs, no ablations):
    every group's placebo equals its control, epochs draw new streams and count as further
    samples (task A records: paired per sample), injection starts at "Trial 1"."""
    from introspect.integrations.inspect.tasks import injected_thoughts

    path = str(tiny_dir("llama"))
    P._MODELS.setdefault(P.model_key(path), tiny_model("llama"))
    t = injected_thoughts(layer=2, alpha=2, alpha_units="resid", n_concepts=2, max_tokens=6, ablations=False,
                          n_bias=0)
    log = eval(t, model=f"introspect/{path}", display="none", log_dir=str(tmp_path), log_format="json",
               epochs=2)[0]
    assert log.status == "success", log.error
    trials = records_from_log(read_eval_log(log.location))[1:]
    assert len(trials) == 2 * 2 * (3 + 1)  # control, injected, placebo, and the control under +placebo
    assert {r["task"] for r in trials} == {"A"} and {r["variant"] for r in trials} == {"paper"}
    assert len({r["trial_id"] for r in trials}) == len(trials)
    groups: dict = {}
    for r in trials:
        if r["extra"].get("copy_of"):
            continue
        groups.setdefault((r["word"], r["extra"]["epoch"]), {})[r["extra"]["label"]] = r
    assert len(groups) == 4 and len({w for w, _ in groups}) == 2
    for (_, epoch), g in groups.items():
        assert g["placebo"]["response"] == g["control"]["response"]
        assert {r["sample"] for r in g.values()} == {epoch - 1}
        assert "Trial 1" in g["injected"]["prompt"]
        start = g["injected"]["extra"]["injected_positions"]["prompt"][0][0]
        assert g["injected"]["token_positions"] == f"from:{start}+generated"
        assert isinstance(g["injected"]["grade"]["detected"], bool)
    for w in {w for w, _ in groups}:
        assert groups[(w, 1)]["control"]["gen"]["stream_seed"] != groups[(w, 2)]["control"]["gen"]["stream_seed"]
