"""The Delegate Game's game phase as an Inspect eval on any model, offline: phase 1 and the game
questions are drawn from an Inspect baseline log as the toolkit draws them; replies read from
log-probs over A–D and T; eval → records_from_log → the toolkit's game summary equals the one of
the same records built directly; a model that delegates exactly its baseline errors reads so; a
baseline of mixed decision sources is refused. Skips without the ``inspect`` extra."""

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

from introspect.integrations.inspect import delegate_game as G  # noqa: E402
from introspect.integrations.inspect import selfknowledge as SK  # noqa: E402
from introspect.integrations.inspect.records import records_from_log  # noqa: E402
from introspect.integrations.inspect.sk_records import frame_of  # noqa: E402
from introspect.records.jsonl import validate  # noqa: E402
from introspect.tasks.selfknowledge import delegate as DG  # noqa: E402

POOL = dict(n=4, history_len=4, pool=16)


def out(text: str, top: dict[str, float] | None = None) -> ModelOutput:
    """A one-token reply; ``top``: its top log-probs (None: a provider without log-probs)."""
    lp = None if top is None else Logprobs(content=[Logprob(
        token=text, logprob=math.log(top[text]),
        top_logprobs=[TopLogprob(token=k, logprob=math.log(v)) for k, v in top.items()])])
    return ModelOutput(model="mockllm", choices=[ChatCompletionChoice(
        message=ChatMessageAssistant(content=text, model="mockllm", source="generate"), stop_reason="stop",
        logprobs=lp)], usage=ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2))


def _question(prompt: str) -> tuple[int, dict[str, str]]:
    """(the sum asked, the options) of the last question in a prompt."""
    last = prompt.rsplit("Game question:", 1)[-1]
    terms = re.findall(r"[-+]?\s*\d+", re.search(r"What is (.+?)\?", last).group(1))
    return sum(int(t.replace(" ", "")) for t in terms), dict(re.findall(r"^([A-D])\. (.+)$", last, re.M))


def _wrong(value: int, opts: dict[str, str]) -> str:
    return min((k for k, v in opts.items() if int(v) != value), key=lambda k: int(opts[k]))  # by content


def half_knower(messages, *_):
    """Baseline: right on odd sums, else the smallest wrong option (by content: every rotation)."""
    value, opts = _question(messages[0].text)
    letter = next(k for k, v in opts.items() if int(v) == value) if value % 2 else _wrong(value, opts)
    return out(letter, {k: 0.7 if k == letter else 0.1 for k in "ABCD"})


def honest_player(messages, *_):
    """Game: delegates exactly the questions it gets wrong (even sums), else answers."""
    value, opts = _question(messages[0].text)
    letter = "T" if value % 2 == 0 else next(k for k, v in opts.items() if int(v) == value)
    return out(letter, {k: 0.8 if k == letter else 0.05 for k in "ABCDT"})


def run(task, fn, tmp_path, name):
    logs = inspect_eval(task, model=get_model("mockllm/model", custom_outputs=fn), display="none",
                        log_dir=str(tmp_path / name), log_format="json")
    assert logs[0].status == "success", logs[0].error
    return read_eval_log(logs[0].location)


@pytest.fixture(scope="module")
def baseline_log(tmp_path_factory):
    return run(SK.delegate_baseline(**POOL), half_knower, tmp_path_factory.mktemp("base"), "b")


def test_the_game_is_drawn_from_the_baseline_as_the_toolkit_draws_it(baseline_log):
    stem, hist, game, base, source, seed = G.selection(baseline_log)
    assert (stem, source, seed, len(hist), len(game)) == ("arith-d2t2+-", "logprobs", 0, 4, 4)
    assert not {q.id for q in hist} & {q.id for q in game}
    pool_acc = sum(r["grade"]["correct"] for r in records_from_log(baseline_log)[1:]) / 16
    assert sum(base[q.id]["correct"] for q in game) == round(pool_acc * 4)  # stratified on the truth
    samples = G.game_samples(baseline_log, teammate_accuracy=[0.3, 0.7], feedback=[False, True])
    assert len(samples) == 16
    s = samples[0]
    meta = s.metadata[G.GAME_KEY]
    want = DG.game_conversation(DG.phase1(hist, DG.teammate_history(4, 0.3, 0), False, base), game[0])
    assert s.input[0].text == want.messages[0]["content"] and s.target == game[0].answer
    assert (meta["teammate_accuracy"], meta["feedback"], meta["baseline"]["rotations"]) == (0.3, False, 4)
    assert "Your answer:" not in s.input[0].text and "Your answer:" in samples[-1].input[0].text


def test_eval_log_game_records_summarise_like_the_direct_records(baseline_log, tmp_path):
    task = G.delegate_game(baseline_log=baseline_log.location, teammate_accuracy=[0.3, 0.7])
    log = run(task, honest_player, tmp_path, "g")
    recs = records_from_log(log)
    assert recs[0]["type"] == "header" and len(recs) == 9
    trials = recs[1:]
    for r in trials:
        assert validate(r) is r and r["task"] == "delegate" and r["grade"]["decision_source"] == "logprobs"
        assert r["variant"].startswith("arith-d2t2+-+logprobs:teammate=")
        assert r["grade"]["delegated"] == (not r["grade"]["baseline_correct"])  # the scripted policy
    direct = G.reply_records([(s.metadata[G.GAME_KEY], s.input, honest_player(s.input), 1, s.id)
                              for s in task.dataset], model_id="mockllm/model")
    got = G.summarize_game(frame_of(trials))
    pd.testing.assert_frame_equal(got, G.summarize_game(frame_of(direct)))
    v = got[got["variant"] == "arith-d2t2+-+logprobs:teammate=0.3"].set_index("metric")["value"]
    base_acc = sum(r["grade"]["baseline_correct"] for r in trials) / len(trials)
    assert v["delegation_rate"] == pytest.approx(1 - base_acc) and v["kept_accuracy"] == 1.0
    assert v["p_delegate_auroc"] == 1.0 and v["baseline_modal_letter_rate_raw"] < 1


def test_a_baseline_of_mixed_sources_is_refused(tmp_path):
    calls = iter(range(10 ** 6))

    def one_without(messages, *_):
        o = half_knower(messages)
        return out(o.completion) if next(calls) == 5 else o

    log = run(SK.delegate_baseline(**POOL), one_without, tmp_path, "m")
    with pytest.raises(ValueError, match="mixes decision sources"):
        G.delegate_game(baseline_log=log.location)
