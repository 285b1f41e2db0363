"""The base-model format of the self-knowledge tasks: balanced worked examples that never mention
the items under test, chosen automatically without a chat template and selectable for any
model, recorded in every record; answer budgets calibrated on the model's own answers."""

from collections import Counter
from pathlib import Path

import pytest

import introspect as I
from introspect.data import load_questions, load_xstest
from introspect.tasks import fewshot, get_task
from introspect.tasks.base import ConfigError
from introspect.tasks.selfknowledge import common, delegate, seb

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"
TINY = dict(n=2, history_len=3, n_options=4, n_tokens=(1,), list_tokens=6, predict_tokens=6,
            response_tokens=6, answer_tokens=6, rank_tokens=6, short_tokens=6, draws=2)


def test_every_kind_is_balanced():
    labels = {k: Counter(e.label for e in fewshot.pick(k, "")) for k in fewshot.kinds()}
    assert labels["assoc-ask"] == {"yes": 2, "no": 2}
    assert labels["restrict-predict"] == labels["restrict-judge"] == {"A": 1, "B": 1}
    assert labels["restrict-predict-swap"] == labels["restrict-judge-swap"] == {"A": 1, "B": 1}
    assert labels["restrict-request"] == {"A": 1, "B": 1}  # one answered request, one refused
    for k in ("delegate-mc", "ability-mc", "difficulty-mc"):
        assert labels[k] == {"A": 1, "B": 1, "C": 1, "D": 1}, k
    assert labels["game-mc"] == {"A": 1, "B": 1, "C": 1, "D": 1, "T": 1}
    assert labels["difficulty-pair"] == {"A": 2, "B": 2} and labels["game-short"] == {"s": 1, "T": 1}
    answers = [e.assistant for e in fewshot.pick("delegate-mc", "")]
    assert answers == ["Answer: A", "Answer: B", "Answer: C", "Answer: D"]


def test_examples_never_mention_the_items_under_test():
    ex = fewshot.pick("assoc-ask", "Did the word 'steam' appear in the list for 'kettle'?")
    assert all("kettle" not in e.user and "steam" not in e.user for e in ex) and len(ex) == 4
    # association: no target or option word of any item in its examples (template words aside)
    template = set(seb.ASSOC_ASK.lower().replace("'", " ").split()) | set(seb.ASSOC_LIST.lower().split())
    for kind in ("assoc-ask", "assoc-list", "assoc-predict"):
        for t in I.data.load_association_targets():
            words = {w.lower() for w in (t.target, *t.related)} - template
            chosen = fewshot.pick(kind, " ".join(words))
            assert len(chosen) == len(fewshot.pick(kind, ""))  # a clash is replaced, balance kept
            for e in chosen:
                assert not any(fewshot._mentions(e.user + " " + e.assistant, w) for w in words), (kind, t.target)
    # requests and MC questions: no example key term in the item, and no example question is an item
    texts = {"restrict-request": [q.prompt for q in I.data.load_restriction_questions()]}
    if (SHARED / "xstest_prompts.csv").exists():
        texts["restrict-request"] += [q.prompt for q in load_xstest(SHARED / "xstest_prompts.csv")]
    if (SHARED / "evals_sandbagging_mmlu200.jsonl").exists():
        texts["ability-mc"] = [q.format() for q in load_questions(SHARED / "evals_sandbagging_mmlu200.jsonl")]
    for kind, items in texts.items():
        for text in items:
            chosen = fewshot.pick(kind, text)
            assert len(chosen) == len(fewshot.pick(kind, "")), (kind, text)
            for e in chosen:
                assert not any(fewshot._mentions(text, k) for k in e.keys), (kind, text, e.keys)


def test_format_is_automatic_selectable_and_recorded(tiny_model):
    m = tiny_model("llama")
    ctx = lambda **o: I.context(m, I.TaskConfig().with_options(**{**TINY, **o}))  # noqa: E731
    assert common.prompt_format(ctx()) == "chat"
    assert common.prompt_format(ctx(format="fewshot")) == "fewshot"
    with pytest.raises(ConfigError, match="format"):
        common.prompt_format(ctx(format="plain"))
    template = m.tokenizer.chat_template
    try:
        m.tokenizer.chat_template = None  # a base model: no chat template
        assert common.prompt_format(ctx()) == "fewshot"
    finally:
        m.tokenizer.chat_template = template
    c = ctx(format="fewshot")
    for name in ("seb-association", "seb-restriction", "delegate", "recovery"):
        spec = get_task(name)
        trials = spec.plan(c)
        assert all("+fewshot" in t.variant for t in trials), name
        assert not {t.id("f", 0) for t in trials} & {t.id("f", 0) for t in spec.plan(ctx())}
        recs = list(spec.execute(c, trials[:2]))
        for r in recs:
            fmt = r.gen.get("format") if isinstance(r.gen, dict) else None
            assert fmt == "fewshot", (name, r.gen)
            assert r.prompt.startswith("Human: ") or r.prompt.startswith(m.tokenizer.bos_token + "Human: ")
            assert "<|im_start|>" not in r.prompt and r.prompt.count("\n\nAssistant:") >= 2, name
    rec = next(iter(seb.execute_association(c, seb.plan_association(c)[:1])))
    ask = rec.extra["ask_prompt"]
    assert ask.count("Answer: Yes") == 2 and ask.count("Answer: No") == 2 and ask.rstrip().endswith("Answer:")


def test_budgets_come_from_the_models_own_answers(tiny_model, monkeypatch):
    m = tiny_model("llama")
    ctx = I.context(m, I.TaskConfig().with_options(n=2, history_len=3, draws=2))
    prompts = common.rendered(ctx, [common.user(f"q{i}") for i in range(5)])

    class G:
        def __init__(self, n, why):
            self.tokens, self.stop_reason = [0] * n, why

    seen = []

    def fake(c, ps, n, sampled):
        seen.append((len(ps), n))
        return [G(20, "eos"), G(40, "eos"), G(30, "stop"), G(10, "eos")][:len(ps)]

    monkeypatch.setattr(common, "_calibration_answers", fake)
    common._BUDGETS.clear()
    b = common.calibrated_budget(ctx, "response_tokens", prompts, 32, 256)
    assert b == 96 and b.source == "calibrated"  # 2 × 40 + 16
    assert seen == [(4, 256)]  # four calibration items, answered with the cap
    assert common.calibrated_budget(ctx, "response_tokens", prompts, 32, 256) == 96 and len(seen) == 1  # cached
    assert common.calibrated_budget(ctx, "response_tokens", prompts, 100, 256) == 100  # the floor
    explicit = I.context(m, I.TaskConfig().with_options(response_tokens=12))
    b = common.calibrated_budget(explicit, "response_tokens", prompts, 32, 256)
    assert b == 12 and b.source == "option"
    assert common.gen_info(ctx, response=b, judge=8)["budget_source"] == {"response": "option", "judge": "fixed"}
    monkeypatch.setattr(common, "_calibration_answers", lambda c, ps, n, s: [G(20, "eos"), G(n, "length")] + [G(5, "eos")] * 2)
    common._BUDGETS.clear()
    assert common.calibrated_budget(ctx, "answer_tokens", prompts, 32, 200) == 200  # one was cut: the cap


def test_game_examples_use_every_letter_once_and_t_once():
    _, pool = fewshot._POOLS["game-mc"]
    conv = delegate.game_conversation("Phase 1 ...", I.data.MCQuestion("x", "What is 2 + 2?", ("3", "4", "5", "6"), "B"))
    full = fewshot.with_examples("game-mc", conv)
    replies = [msg["content"] for msg in full.messages if msg["role"] == "assistant"]
    assert sorted(replies) == sorted(f"Answer: {L}" for L in "ABCDT") and full.prefill == "Answer:"
    assert len(pool) > 5  # spares for clashes
