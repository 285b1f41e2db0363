"""The self-knowledge multiple-choice tasks as Inspect evals on any model, offline: the samples
are the toolkit's items and prompts under every rotation; decisions come from returned top
log-probs or, without them, from the toolkit's parser, labelled per record and never pooled;
an ``inspect_ai.eval`` on ``mockllm`` → ``read_eval_log`` → ``records_from_log`` gives the same
summary as the same records built directly; an always-"A" model reads as chance letter-free.
Skips without the ``inspect`` extra."""

from __future__ import annotations

import math
import re

import pandas as pd
import pytest

pytest.importorskip("inspect_ai")

from inspect_ai import eval as inspect_eval  # noqa: E402
from inspect_ai.log import read_eval_log  # noqa: E402
from inspect_ai.model import (  # noqa: E402
    ChatCompletionChoice,
    ChatMessageAssistant,
    Logprob,
    Logprobs,
    ModelOutput,
    ModelUsage,
    TopLogprob,
    get_model,
)

from introspect.integrations.inspect import selfknowledge as SK  # noqa: E402
from introspect.integrations.inspect.records import records_from_log  # noqa: E402
from introspect.integrations.inspect.sk_records import (  # noqa: E402
    MixedSourcesError,
    frame_of,
    item_records,
    summarize_mc,
)
from introspect.records.jsonl import validate  # noqa: E402
from introspect.tasks.selfknowledge import ability as AB  # noqa: E402
from introspect.tasks.selfknowledge import delegate as DG  # noqa: E402

POOL = dict(n=2, history_len=2, pool=8)  # 8 generated arithmetic items, 32 samples with rotations


def out(text: str, logprobs: list[tuple[str, dict[str, float]]] | None = None) -> ModelOutput:
    """A scripted output; ``logprobs``: per generated token, (token, {top token: probability})."""
    lp = None
    if logprobs is not None:
        lp = Logprobs(content=[Logprob(token=t, logprob=math.log(top.get(t, 1e-3)),
                                       top_logprobs=[TopLogprob(token=k, logprob=math.log(v)) for k, v in top.items()])
                               for t, top in logprobs])
    return ModelOutput(model="mockllm", choices=[ChatCompletionChoice(
        message=ChatMessageAssistant(content=text, model="mockllm", source="generate"), stop_reason="stop",
        logprobs=lp)], usage=ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2))  # usage: no tokenizer download


def _options(prompt: str) -> dict[str, str]:
    return dict(re.findall(r"^([A-D])\. (.+)$", prompt, re.M))


def knower(messages, *_):
    """Computes the sum and answers its option's letter, 0.7 on it in the top log-probs."""
    prompt = messages[0].text
    terms = re.findall(r"[-+]?\s*\d+", re.search(r"What is (.+?)\?", prompt).group(1))
    value = str(sum(int(t.replace(" ", "")) for t in terms))  # the pool's sums and differences
    letter = next(k for k, v in _options(prompt).items() if v.strip() == value)
    top = {f" {k}": (0.7 if k == letter else 0.1) for k in "ABCD"}
    return out(f"The answer is {letter}.", [("The", {"The": 0.9}), (" answer", {" answer": 1.0}),
                                           (" is", {" is": 1.0}), (f" {letter}", top)])


def always_a(messages, *_):
    return out("A")


def always_a_logprobs(messages, *_):
    return out("A", [("A", {"A": 0.7, "B": 0.1, "C": 0.1, "D": 0.1})])


def run(task, fn, tmp_path):
    logs = inspect_eval(task, model=get_model("mockllm/model", custom_outputs=fn), display="none",
                log_dir=str(tmp_path), log_format="json")
    assert logs[0].status == "success", logs[0].error
    return read_eval_log(logs[0].location)


def direct(task, fn) -> list[dict]:
    """The same samples answered by ``fn`` outside Inspect, read by the same reader."""
    rows = [(s.metadata[SK.SK_KEY], s.input, fn(s.input), 1) for s in task.dataset]
    return item_records(rows, model_id="mockllm/model")


# ---------------------------------------------------------------- samples
def test_baseline_samples_are_the_pool_under_every_rotation():
    task = SK.delegate_baseline(**POOL)
    stem, pool = DG._pool(SK._ctx(0, questions="arithmetic", **POOL))
    assert stem == "arith-d2t2+-" and task.name == "delegate-baseline"
    assert len(task.dataset) == 4 * len(pool) == 32
    by = {s.id: s for s in task.dataset}
    for q in pool:
        for r in range(4):
            s, qr = by[f"{q.id}@r{r}"], q.rotated(r)
            assert s.input[0].text == DG.BASELINE_MC.format(q=qr.format()) and len(s.input) == 1
            assert s.target == qr.answer and s.metadata["qid"] == q.id
            meta = s.metadata[SK.SK_KEY]
            assert (meta["rotation"], meta["n_rotations"], meta["key"], meta["letters"]) == (r, 4, q.answer, "ABCD")
    assert task.config.logprobs and task.config.top_logprobs == 20 and task.config.temperature == 0
    plain = SK.delegate_baseline(**POOL, rotations=False, prefill=True, logprobs=False)
    assert len(plain.dataset) == 8 and not plain.config.logprobs
    assert plain.dataset[0].input[-1].role == "assistant" and plain.dataset[0].input[-1].text == "Answer:"


def test_ability_samples_are_the_toolkits_plan(tmp_path):
    f = tmp_path / "mini_test.csv"
    f.write_text("".join(f"What is {i} + 1?,{i + 1},{i + 2},{i},{i + 3},A\n" for i in range(6)))
    task = SK.ability(items=str(f), n=4, seed=3)
    planned = AB.plan(SK._ctx(3, ability_items=str(f), ability_n=4))
    assert len(planned) == 4 and {s.metadata["qid"] for s in task.dataset} == {t.param("qid") for t in planned}
    s = task.dataset[0]
    q = next(q for q in AB._items(str(f))[1] if q.id == s.metadata["qid"])
    assert s.input[0].text == AB.PROMPT.format(q=q.format()) and s.target == "A"
    assert len(task.dataset) == 16 and task.name == "ability"


# ---------------------------------------------------------------- readings
def test_text_decisions_use_the_toolkits_parser():
    rd = SK.read_output(out("The answer is (C) because option D is wrong."), "ABCD")
    assert rd["decision_source"] == "text" and rd["choice"] == rd["text_choice"] == "C"
    assert rd["probs"] == {"A": 0.0, "B": 0.0, "C": 1.0, "D": 0.0} and rd["mass"] is None
    none = SK.read_output(out("A pet is a friend."), "ABCD")
    assert none["choice"] is None and none["probs"] is None and not none["parse_ok"]


def test_logprob_decisions_read_at_the_answer_letter():
    top = {" B": 0.6, " C": 0.2, " A": 0.1, " the": 0.05}
    rd = SK.read_output(out("A good answer is B", [("A", {"A": 0.5}), (" good", {}), (" answer", {}), (" is", {}),
                                                   (" B", top)]), "ABCD")
    assert rd["decision_source"] == "logprobs" and rd["decision_token"] == 4  # not the article "A"
    assert rd["choice"] == "B" and rd["mass"] == pytest.approx(0.9)
    assert rd["probs"]["B"] == pytest.approx(0.6 / 0.9) and rd["probs"]["D"] == 0.0
    first = SK.read_output(out("**D**", [("**", {"**": 0.9}), ("D", {"D": 0.4, "A": 0.4}), ("**", {})]), "ABCD")
    assert first["decision_token"] == 1 and first["probs"]["D"] == pytest.approx(0.5)
    lost = SK.read_output(out("I am not sure.", [("I", {"I": 0.9})]), "ABCD")
    assert lost["decision_source"] == "logprobs" and lost["choice"] is None  # never a text guess


def test_an_item_with_a_text_only_rotation_is_read_from_text():
    task = SK.delegate_baseline(**POOL)
    calls = iter(range(10 ** 6))

    def some_without(messages, *_):  # the first item's rotation 2 comes back without log-probs
        return always_a(messages) if next(calls) == 2 else always_a_logprobs(messages)

    recs = direct(task, some_without)
    assert [r["grade"]["decision_source"] for r in recs].count("text") == 1
    for r in recs:
        src = r["grade"]["decision_source"]
        assert r["variant"] == f"arith-d2t2+-+{src}:rotations" and r["gen"]["decision_source"] == src
    summary = summarize_mc(frame_of(recs))
    assert set(summary["variant"]) == {"arith-d2t2+-+logprobs:rotations", "arith-d2t2+-+text:rotations"}
    mixed = frame_of(recs).assign(variant="one")
    with pytest.raises(MixedSourcesError, match="mixes logprobs and text"):
        summarize_mc(mixed)


# ---------------------------------------------------------------- end to end
def test_eval_log_records_summarise_like_the_direct_records(tmp_path):
    task = SK.delegate_baseline(**POOL)
    log = run(task, knower, tmp_path)
    recs = records_from_log(log)
    header, trials = recs[0], recs[1:]
    assert header["type"] == "header" and header["model_id"] == "mockllm/model" and len(trials) == 8
    for r in trials:
        assert validate(r) is r and r["task"] == "delegate-baseline" and r["condition"] == "clean"
        assert r["grade"]["decision_source"] == "logprobs" and r["variant"] == "arith-d2t2+-+logprobs:rotations"
        assert r["gen"]["logprobs"] is True and r["gen"]["top_logprobs"] == 20
    got, want = summarize_mc(frame_of(trials)), summarize_mc(frame_of(direct(task, knower)))
    pd.testing.assert_frame_equal(got, want)
    v = dict(zip(got["metric"], got["value"]))
    assert v["accuracy"] == v["accuracy_raw"] == v["rotation_consistency"] == 1.0
    assert v["mean_p_correct"] == pytest.approx(0.7) and v["low_mass_rate"] == 0.0
    assert log.results.scores[0].metrics["stderr"].params == {"cluster": "qid"}


@pytest.mark.parametrize("fn,source", [(always_a, "text"), (always_a_logprobs, "logprobs")])
def test_an_always_a_model_is_at_chance_letter_free(fn, source, tmp_path):
    task = SK.delegate_baseline(n=6, history_len=6, pool=24)
    trials = records_from_log(run(task, fn, tmp_path))[1:]
    s = summarize_mc(frame_of(trials)).set_index("metric")
    assert set(s["variant"]) == {f"arith-d2t2+-+{source}:rotations"}
    assert s.loc["modal_letter_rate_raw", "value"] == 1.0 and s.loc["rotation_consistency", "value"] == 0.0
    keyed_a = sum(r["grade"]["answer"] == "A" for r in trials) / len(trials)
    assert s.loc["accuracy_raw", "value"] == pytest.approx(keyed_a)  # the letter read as ability
    assert s.loc["accuracy", "lo"] <= 0.25 <= s.loc["accuracy", "hi"]  # letter-free: chance
    assert all(r["grade"]["option_scores"] == dict.fromkeys("ABCD", pytest.approx(0.25)) for r in trials)
    assert s.loc["letter_prior[A]", "value"] > 0.5


# ---------------------------------------------------------------- the report reads them by task name
def test_the_report_summarises_inspect_mc_records_with_summarize_mc(tmp_path):
    """``delegate-baseline`` records written from a log: ``summarize(load_results(dir))`` holds
    ``summarize_mc``'s rows (rotation rows included), and the dashboard shows them; ``ability``
    records from Inspect get the rotation rows too, the toolkit's (no decision source) do not."""
    from introspect.integrations.inspect.records import write_records
    from introspect.report import load_results, summarize, write_dashboard

    log = run(SK.delegate_baseline(**POOL), knower, tmp_path / "logs")
    f = tmp_path / "ability.csv"
    f.write_text("".join(f"What is {i} + 1?,{i + 1},{i + 2},{i},{i + 3},A\n" for i in range(6)))
    ab_log = run(SK.ability(items=str(f), n=4), knower, tmp_path / "logs")
    results = tmp_path / "results"
    write_records(log, results / "mock" / "delegate-baseline.jsonl")
    write_records(ab_log, results / "mock" / "ability.jsonl")
    toolkit = [{**r, "variant": "mini_test", "grade": {k: v for k, v in r["grade"].items() if k != "decision_source"},
                "trial_id": r["trial_id"] + "-toolkit"} for r in records_from_log(ab_log)[1:]]
    from introspect.records.jsonl import JsonlWriter
    w = JsonlWriter(results / "mock" / "ability-toolkit.jsonl")
    for r in toolkit:
        w.write(r)
    table = summarize(load_results(results))
    base = table[table["task"] == "delegate-baseline"].set_index("metric")
    want = summarize_mc(frame_of(records_from_log(log)[1:])).set_index("metric")
    assert {"accuracy_raw", "rotation_consistency", "letter_prior[A]"} <= set(base.index)
    assert set(base.index) == set(want.index)
    for m in want.index:
        assert base.loc[m, "value"] == pytest.approx(want.loc[m, "value"], nan_ok=True)
    ab = table[table["task"] == "ability"]
    inspect_rows = set(ab.loc[ab["variant"].str.contains(r"\+logprobs"), "metric"])
    toolkit_rows = set(ab.loc[ab["variant"] == "mini_test", "metric"])
    assert "accuracy_raw" in inspect_rows and "accuracy" in toolkit_rows and "accuracy_raw" not in toolkit_rows
    html = write_dashboard(results).read_text()
    assert "delegate-baseline" in html and "rotation_consistency" in html
