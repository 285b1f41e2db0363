"""The SEB tasks (association, restriction, difficulty) as Inspect evals on any model, offline
on ``mockllm``: the samples are the toolkit's plan; each trial's sessions are the toolkit's
prompts (restriction in both letter orders); decisions come from top log-probs (read at the
answer token) or, without them, the parsed text, marked on the variant; ``inspect_ai.eval`` →
``read_eval_log`` → ``records_from_log`` → the toolkit's SEB summariser gives what the same
records built outside Inspect give. Skips without the ``inspect`` extra."""

from __future__ import annotations

import asyncio
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

from introspect.integrations.inspect import seb as S  # noqa: E402
from introspect.integrations.inspect.records import records_from_log  # noqa: E402
from introspect.integrations.inspect.selfknowledge import _ctx  # noqa: E402
from introspect.integrations.inspect.sk_records import frame_of  # noqa: E402
from introspect.records.jsonl import validate  # noqa: E402
from introspect.report import summarize  # noqa: E402
from introspect.tasks.selfknowledge import difficulty as DF  # noqa: E402
from introspect.tasks.selfknowledge import seb as SB  # noqa: E402
from introspect.tasks.selfknowledge.metrics import SUMMARIES  # noqa: E402

SMALL = {"seb-association": dict(n=4, n_options=4, draws=2), "seb-restriction": dict(n=6, draws=2),
         "seb-difficulty": dict(groups=2, draws=2)}
BUILD = {"seb-association": S.seb_association, "seb-restriction": S.seb_restriction,
         "seb-difficulty": S.seb_difficulty}


def out(text: str, top: dict[str, float] | None = None, at: int = 0, logprobs: bool = True) -> ModelOutput:
    """A scripted output: its words as tokens; ``top`` the top probabilities at token ``at``."""
    toks = re.findall(r"\s*\S+", text) or [text]
    lp = None
    if logprobs and top is not None:
        lp = Logprobs(content=[Logprob(token=t, logprob=math.log(top.get(t, 0.9) if i == at else 0.9),
                                       top_logprobs=[TopLogprob(token=k, logprob=math.log(v)) for k, v in top.items()]
                                       if i == at else [])
                               for i, t in enumerate(toks)])
    return ModelOutput(model="mockllm", choices=[ChatCompletionChoice(
        message=ChatMessageAssistant(content=text, model="mockllm", source="generate"), stop_reason="stop",
        logprobs=lp)], usage=ModelUsage(input_tokens=1, output_tokens=len(toks), total_tokens=1 + len(toks)))


def scripted(logprobs: bool = True, judge_says_a: bool = False):
    """A model that lists every other option word, refuses requests with "steal" / "weapon" /
    harmful words (by the toolkit's label), predicts and judges from that, and answers sums."""
    listed: dict[str, list[str]] = {}
    for s in S.association_samples(n=4, n_options=4, draws=2, temperature=1.0, prefill=False, logprobs=True,
                                   top_logprobs=20, decision_tokens=16, list_tokens=64, predict_tokens=96):
        m = s.metadata[S.SEB_KEY]
        listed[m["word"]] = m["params"]["options"][::2]
    unsafe = {q.prompt for q in SB._requests(None)[1] if q.label == "unsafe"}

    def ab(letter: str, p: float, swapped: bool = False) -> ModelOutput:
        if swapped:
            letter = "B" if letter == "A" else "A"
        other = "B" if letter == "A" else "A"
        return out(letter, {letter: p, other: 1 - p - 0.05, " the": 0.05}, logprobs=logprobs)

    def fn(messages, *_):
        text = messages[0].text
        if m := re.match(r"List 5 words that you associate with the word '(.+?)'", text):
            words = listed[m.group(1)] + ["alpha", "beta", "gamma"]
            return out(", ".join(words[:5]))
        if "Which of the following option words" in text:
            target = re.search(r"target word: '(.+?)'", text).group(1)
            return out(", ".join(listed[target]))
        if m := re.search(r"Did the word '(.+?)' appear", text):
            target = re.search(r"target word: '(.+?)'", text).group(1)
            yes = m.group(1) in listed[target]
            return out("Yes." if yes else "No.", {"Yes.": 0.8 if yes else 0.3, " yes": 0.05,
                                                  "No.": 0.1 if yes else 0.55}, logprobs=logprobs)
        if text.startswith("Consider this request"):
            q = re.search(r'request: "(.+)"\nIf', text, re.S).group(1)
            return ab("B" if q in unsafe else "A", 0.7, swapped="A: It will not provide" in text)
        if text.startswith("Here is a request"):
            refused = "I can't" in text
            letter = "A" if judge_says_a else ("B" if refused else "A")
            return ab(letter, 0.9, swapped=not judge_says_a and "A: The response does not" in text)
        if text.startswith("Here are four questions"):
            return out("Q4, Q3, Q2, Q1")
        if text.startswith("Here are two questions"):
            a, b = (len(x) for x in re.findall(r"Question [AB]: (.+?)\n", text))
            return ab("A" if a > b else "B", 0.6)
        if m := re.match(r"What is (.+?)\? Give the final answer", text):
            return out(f"Let me see. Answer: {eval(m.group(1))}")  # noqa: S307 - the test's own sums
        if text in unsafe:
            return out("I can't help with that.")
        return out("Sure, here is a helpful answer.")

    return fn


def run(task, fn, tmp_path):
    logs = inspect_eval(task, model=get_model("mockllm/model", custom_outputs=fn), display="none",
                        log_dir=str(tmp_path), log_format="json")
    assert logs[0].status == "success", logs[0].error
    return read_eval_log(logs[0].location)


def direct(task, fn) -> list[dict]:
    """The same trials' sessions made outside Inspect with ``fn``, graded by the same code."""
    async def gen(messages, config):
        return fn(messages)

    async def calls(meta):
        return await S.CALLS[meta["task"]](meta, gen)

    rows = [(s.metadata[S.SEB_KEY], asyncio.run(calls(s.metadata[S.SEB_KEY])), 1) for s in task.dataset]
    return S.trial_records(rows, model_id="mockllm/model")


# ---------------------------------------------------------------- samples are the toolkit's plan
def test_samples_are_the_toolkits_plan():
    a = S.seb_association(n=5, n_options=3, n_trials=2, seed=4)
    ctx = _ctx(4, targets=None, n=5, n_options=3)
    import dataclasses
    ctx.cfg = dataclasses.replace(ctx.cfg, n_trials=2)
    plan = SB.plan_association(ctx)
    assert len(a.dataset) == len(plan) == 10
    for s, t in zip(a.dataset, plan):
        m = s.metadata[S.SEB_KEY]
        assert (m["index"], m["word"], tuple(m["params"]["options"]), m["variant"]) == \
            (t.index, t.word, t.param("options"), t.variant)
        assert s.input == SB.ASSOC_PREDICT.format(target=t.word, options="', '".join(t.param("options")))
    r = S.seb_restriction(n=7, seed=2)
    plan = SB.plan_restriction(_ctx(2, n=7))
    assert [s.metadata[S.SEB_KEY]["params"]["qid"] for s in r.dataset] == [t.param("qid") for t in plan]
    by_id = {q.id: q for q in SB._requests(None)[1]}
    assert all(s.input == SB.RESTRICT_PREDICT.format(q=by_id[t.param("qid")].prompt) for s, t in zip(r.dataset, plan))
    d = S.seb_difficulty(groups=3, seed=1)
    ctx = _ctx(1, questions="arithmetic", groups=3, digits=(1, 3), terms=(2, 3), ops="+-*", prefill=False)
    plan, items = DF.plan_difficulty(ctx), DF._source(ctx)[1]
    assert [s.metadata[S.SEB_KEY]["params"]["qids"] for s in d.dataset] == [list(t.param("qids")) for t in plan]
    for s, t in zip(d.dataset, plan):
        qs = [S._q_of(x) for x in s.metadata[S.SEB_KEY]["questions"]]
        assert qs == [items[i] for i in t.param("qids")]
    assert S.seb_restriction(n=2, temperature=0).dataset[0].metadata[S.SEB_KEY]["draws"] == 1  # greedy: one draw


def test_restriction_sessions_ask_both_orders_and_read_their_mean():
    task = S.seb_restriction(n=2, draws=2)
    asked: list[str] = []
    fn = scripted()

    def spy(messages, *_):
        asked.append(messages[0].text)
        return fn(messages)

    recs = direct(task, spy)
    q = task.dataset[0].metadata[S.SEB_KEY]["request"]
    assert SB.RESTRICT_PREDICT.format(q=q) in asked and SB.RESTRICT_PREDICT_SWAP.format(q=q) in asked
    assert sum(t.startswith("Here is a request") for t in asked) == 2 * 2 * 2  # 2 requests x 2 draws x 2 orders
    for r in recs:
        g = r["grade"]
        unsafe = g["label"] == "unsafe"
        # 0.7 on the scripted letter in each order, 0.25 on the other: P(answer) is their mean
        p_ans = 0.25 / 0.95 if unsafe else 0.7 / 0.95
        assert g["p_answer"] == pytest.approx(p_ans) and g["predict_mass"] == pytest.approx(0.95)
        assert g["predict_letters"] == (["B", "A"] if unsafe else ["A", "B"])
        assert g["judged_answered"] == [not unsafe] * 2 and g["decision_source"] == "logprobs"
        assert r["variant"] == "own+logprobs" and validate(r) is r


def test_a_judge_that_always_says_a_gives_no_verdict():
    """Both orders read: a letter prior is a tie (None), not a one-class truth."""
    recs = direct(S.seb_restriction(n=2, draws=2), scripted(judge_says_a=True))
    assert all(v is None for r in recs for v in r["grade"]["judged_answered"])


def test_text_decisions_without_logprobs_and_never_pooled():
    fn = scripted(logprobs=False)
    recs = direct(S.seb_restriction(n=4, draws=2), fn)
    for r in recs:
        g = r["grade"]
        assert r["variant"] == "own+text" and g["decision_source"] == "text"
        assert g["p_answer"] in (0.0, 1.0) and g["predict_mass"] is None and g["judge_mass"] == [None, None]
    lp = scripted()
    calls = iter(range(10 ** 6))

    def one_without(messages, *_):  # the first trial's first decision returns no log-probs
        o = lp(messages)
        if next(calls) == 0:
            o.choices[0].logprobs = None
        return o

    mixed = direct(S.seb_restriction(n=4, draws=2), one_without)
    assert [r["grade"]["decision_source"] for r in mixed] == ["text", "logprobs", "logprobs", "logprobs"]
    assert set(summarize(frame_of(mixed).assign(run_id="r"))["variant"]) == {"own+text", "own+logprobs"}


def test_association_and_difficulty_grades_are_the_toolkits():
    a = direct(S.seb_association(n=4, n_options=4, draws=2), scripted())
    for r in a:
        g = r["grade"]
        opts = g["options"]
        assert g["listed_frac"] == [1.0, 0.0, 1.0, 0.0] and g["said"] == [True, False, True, False]
        assert g["p_yes"] == pytest.approx([0.85 / 0.95, 0.35 / 0.9] * 2)  # " yes" adds to "Yes."
        assert g["mass"] == pytest.approx([0.95, 0.9] * 2) and len(opts) == 4 and r["word"]
    d = direct(S.seb_difficulty(groups=2, draws=2), scripted())
    for r in d:
        g = r["grade"]
        assert g["predicted_order"] == [3, 2, 1, 0] and g["answer_correct"] == [[True, True]] * 4
        assert g["n_tokens"] == [[5, 5]] * 4 and all(p == pytest.approx(0.6 / 0.95) or p == pytest.approx(
            0.35 / 0.95) or p == pytest.approx(0.5) for p in g["p_harder"])
        assert g["pair_mass"] == [[pytest.approx(0.95)] * 2] * 6 and r["variant"] == "arith-d1-3t2-3+-*+logprobs"


# ---------------------------------------------------------------- end to end
@pytest.mark.parametrize("name", list(SMALL))
def test_eval_log_records_summarise_like_the_direct_records(name, tmp_path):
    task = BUILD[name](**SMALL[name])
    fn = scripted()
    log = run(task, fn, tmp_path)
    recs = records_from_log(log)
    header, trials = recs[0], recs[1:]
    assert header["type"] == "header" and header["task"] == name and len(trials) == len(task.dataset)
    want = direct(task, fn)
    assert [r["grade"] for r in trials] == [r["grade"] for r in want]
    for r in trials:
        assert validate(r) is r and r["task"] == name and r["grade"]["decision_source"] == "logprobs"
    got_sum, want_sum = SUMMARIES[name](frame_of(trials)), SUMMARIES[name](frame_of(want))
    assert not got_sum.empty
    pd.testing.assert_frame_equal(got_sum, want_sum)
    # the report picks the toolkit's summariser by task name
    rep = summarize(frame_of(trials).assign(run_id=log.eval.run_id))
    assert set(rep["metric"]) == set(got_sum["metric"]) and set(rep["task"]) == {name}


def test_decisions_read_at_the_answer_token():
    rd = S.read_decision(out("I think the answer is B", {" B": 0.6, " A": 0.2, " the": 0.1}, at=5), S.AB, "logprobs")
    assert rd["step"] == 5 and rd["text"] == "B" and rd["mass"] == pytest.approx(0.8)
    assert rd["probs"] == pytest.approx({"A": 0.25, "B": 0.75})
    yn = S.read_decision(out("**Yes**, it did.", {"**Yes**,": 0.5, "No": 0.3}), {"yes": ("Yes",), "no": ("No",)},
                         "logprobs")
    assert yn["text"] == "yes" and yn["probs"]["yes"] == pytest.approx(0.625)
    assert S.parse_yes_no("Answer: no.") == "no" and S.parse_yes_no("Not sure") is None
    lost = S.read_decision(out("Hmm, hard to say.", {"Hmm,": 0.9}), S.AB, "logprobs")
    assert lost["probs"] is None and lost["text"] is None  # no reading, never a guess
    txt = S.read_decision(out("B"), S.AB, "text")
    assert txt["probs"] == {"A": 0.0, "B": 1.0} and txt["mass"] is None
