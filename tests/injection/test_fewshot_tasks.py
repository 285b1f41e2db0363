"""The base-model format of tasks A–C: balanced worked examples that never mention a concept,
chosen without a chat template or on request, marked in the variant, injected nowhere."""

from collections import Counter

import pytest

import introspect as I
from introspect.engine.run.chat import render
from introspect.engine.run.inject import From
from introspect.tasks import fewshot, get_task
from introspect.tasks.injection import examples  # noqa: F401  (registers the kinds)
from introspect.tasks.injection.common import STEER_VARIANTS
from introspect.tasks.prompts import FROM_MARK, load_words

KINDS = ("A", "A-seed", "B-paper-thought", "B-paper-repeat", "B-seed-thought", "B-seed-repeat", "B-mc",
         "C-paper", "C-seed")


def _cfg(**kw):
    base = dict(layers=(1,), alphas=(8.0,), n_concepts=2, n_trials=1, max_new_tokens=6, batch_size=8)
    base.update(kw)
    return I.TaskConfig(**base)


def test_examples_are_balanced_and_never_name_a_concept():
    assert Counter(e.label for e in fewshot.pick("A", "")) == {"yes": 2, "no": 2}
    assert Counter(e.label for e in fewshot.pick("A-seed", "")) == {"yes": 2, "no": 2}
    for k in ("C-paper", "C-seed"):
        assert Counter(e.label for e in fewshot.pick(k, "")) == {"own": 1, "disown": 1}
    assert [e.assistant for e in fewshot.pick("B-mc", "")] == ["CHOICE: 3", "CHOICE: 1"]
    words = load_words()
    for k in KINDS:
        for e in fewshot._POOLS[k][1]:
            text = fewshot._text(e)
            hit = [w for w in (*words.targets, *words.baseline) if fewshot._mentions(text, w)]
            assert not hit, (k, hit, text)
            assert "inject" not in text.lower()  # no example claims an introspective report


def test_an_example_using_the_trials_words_is_replaced():
    plain = fewshot.pick("A", "")
    assert any("heron" in e.user for e in fewshot._POOLS["A"][1]) and not any("heron" in e.user for e in plain)
    avoided = fewshot.pick("A", "", avoid=["doorbell"])
    assert Counter(e.label for e in avoided) == {"yes": 2, "no": 2}
    assert not any("doorbell" in fewshot._text(e) for e in avoided)
    chosen = fewshot.pick("B-paper-thought", "The ferry left the harbour at dawn.")
    assert len(chosen) == 2 and not any("ferry" in e.user for e in chosen)


@pytest.mark.parametrize("name", ["A", "B", "C"])
def test_fewshot_variants_prompts_and_injected_positions(tiny_model, name):
    m = tiny_model("llama")
    ctx = I.context(m, _cfg(options={"format": "fewshot"}))
    chat = get_task(name).plan(I.context(m, _cfg()))
    trials = get_task(name).plan(ctx)
    answered = [t for t in trials if t.variant not in STEER_VARIANTS]
    assert answered and all(t.variant.endswith("+fewshot") for t in answered)
    assert not {t.id("f", 0) for t in answered} & {t.id("f", 0) for t in chat}
    pick = [t for t in trials if t.condition == "injected"][:2] + [t for t in trials if t.condition == "control"][:1]
    recs = list(get_task(name).execute(ctx, pick))
    assert len(recs) == len(pick)
    for r in recs:
        assert r.variant.endswith("+fewshot")
        first = r.prompt.split("\n----\n")[0]
        assert "<|im_start|>" not in first and first.count("\n\nAssistant:") >= 3  # two examples at least
        assert r.word not in first.split("Assistant:")[0]
        if r.injected and name == "A":  # injected from the trial's own mark, after every example
            start = int(str(r.token_positions)[5:].split("+")[0])
            ids = m.tokenizer(first)["input_ids"]
            assert m.tokenizer.decode(ids[:start]).count("\n\nAssistant:") >= 4
        elif r.injected:
            assert min(r.token_positions) > len(m.tokenizer(first.split(r.extra["sentence"])[0])["input_ids"]) - 3


def test_format_is_automatic_without_a_chat_template(tiny_model):
    m = tiny_model("llama")
    template = m.tokenizer.chat_template
    try:
        m.tokenizer.chat_template = None
        trials = get_task("A").plan(I.context(m, _cfg()))
    finally:
        m.tokenizer.chat_template = template
    assert {t.variant for t in trials} == {"paper+fewshot", "explained+fewshot", "two_turn+fewshot", "steer",
                                            "steer_two_turn"}
    assert {t.variant for t in get_task("D").plan(I.context(m, _cfg(options={"format": "fewshot"})))} \
        == {"plain", "incentive"}  # teacher-forced: nothing to answer


def test_marks_land_in_the_trial_not_in_an_example(tiny_model):
    m = tiny_model("llama")
    from introspect.tasks.prompts import task_a_paper
    conv = fewshot.with_examples("A", task_a_paper(1))
    p = render(m.tokenizer, conv, chat=False)
    start = p.spans[FROM_MARK][0]
    assert isinstance(From(start), From)
    before = m.tokenizer.decode(list(p.ids[:start]))
    assert before.count("Human:") == 6 and "I am an interpretability researcher" in before
