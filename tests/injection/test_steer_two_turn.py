"""Task A's steering check with two_turn's own span (``steer_two_turn``): planned exactly when
two_turn runs, injected over a neutral turn 1 only, read at turn 2's first answer step."""

import pytest

import introspect as I
from introspect.records.jsonl import validate
from introspect.tasks import prompts as P
from introspect.tasks.injection import task_a as TA
from introspect.tasks.injection.common import STEER_VARIANTS, pick_concepts


def _cfg(**kw):
    base = dict(layers=(1,), alphas=(0.0, 16.0), n_concepts=2, n_trials=1, max_new_tokens=6, batch_size=8,
                n_samples=2)
    base.update(kw)
    return I.TaskConfig(**base)


def _steer(trials, variant):
    return sorted((t.condition, t.word, t.layer, t.alpha, t.sample) for t in trials if t.variant == variant)


@pytest.mark.parametrize("variant, has", [(None, True), ("two_turn", True), ("paper,explained", False),
                                          ("seed", False), ("all", True)])
def test_steer_two_turn_is_planned_exactly_when_two_turn_runs(tiny_model, variant, has):
    """Beside ``steer`` (always), and trial for trial its copy: same concepts, cells, samples and
    conditions; ``steer_check=false`` drops both."""
    ctx = I.context(tiny_model("llama"), _cfg(variant=variant, layers=(1, 2)))
    plan = TA.plan(ctx)
    steer, two = _steer(plan, "steer"), _steer(plan, "steer_two_turn")
    assert len(steer) == len(pick_concepts(ctx)) * 2 * (1 + 2 * 4)  # K × (control + 2 conditions × 4 cells)
    assert two == (steer if has else [])
    assert {t.variant for t in plan} & set(STEER_VARIANTS) == ({"steer", "steer_two_turn"} if has else {"steer"})
    off = TA.plan(I.context(tiny_model("llama"), _cfg(variant=variant, options=(("steer_check", False),))))
    assert not {t.variant for t in off} & set(STEER_VARIANTS)


def test_steer_two_turn_is_planned_for_a_fewshot_two_turn(tiny_model):
    """The base-model format marks the framing (``two_turn+fewshot``); it is still two_turn's span."""
    plan = TA.plan(I.context(tiny_model("llama"), _cfg(variant="two_turn", options=(("format", "fewshot"),))))
    assert "two_turn+fewshot" in {t.variant for t in plan}
    assert _steer(plan, "steer_two_turn") and _steer(plan, "steer_two_turn") == _steer(plan, "steer")


def _span(tokenizer, text, start, end):
    """Token positions of ``text`` overlapping characters [start, end), from the tokenizer's own offsets."""
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    return [i for i, (a, b) in enumerate(offsets) if b > a and a < end and b > start], len(offsets)


def test_steer_two_turn_injects_turn_1_only_and_reaches_the_turn_2_answer(tiny_model):
    """The recorded positions are exactly turn 1 (its user message through the assistant's reply)
    and end before turn 2's question; the records carry the steering grade; the turn-1 vector
    moves turn 2's first-step log-probs (the check can see something) and at α 0 changes nothing."""
    m = tiny_model("llama")
    recs = I.run_task_a(m, _cfg(variant="two_turn", options=(("n_bias", 0), ("latent_naming", False))))
    two = [r for r in recs if r.variant == "steer_two_turn"]
    assert {r.condition for r in two} == {"steer", "steer_random", "steer_control"}
    assert len(two) == 2 * 2 * (1 + 2 * 2)  # concepts × K × (control + 2 conditions × 2 α)
    ctrl = {(r.word, r.sample): r for r in two if r.condition == "steer_control"}
    for r in two:
        validate(r.to_dict())
        g = r.grade
        assert isinstance(g["lp_word"], float) and g["lp_word"] < 0
        assert isinstance(g["mentions"], bool) and isinstance(g["coherent"], bool)
        assert "detected" not in g and "latent_top" not in g  # graded as the steering check, not as detection
        c = ctrl[(r.word, r.sample)]
        assert r.prompt == c.prompt and r.gen["stream_seed"] == c.gen["stream_seed"]
        if r.condition == "steer_control":
            assert r.token_positions is None and not r.injected
            continue
        text = r.prompt
        t1 = text.index(P.TWO_TURN_TASK)
        t2 = text.rindex(P.STEER_PROMPT)
        assert t1 < text.index(P.TWO_TURN_REPLY) < t2  # turn 1, then turn 2's question
        turn1, n = _span(m.tokenizer, text, t1, text.index(P.TWO_TURN_REPLY) + len(P.TWO_TURN_REPLY))
        turn2, _ = _span(m.tokenizer, text, t2, len(text))
        assert isinstance(r.token_positions, list)  # a fixed span: never "+generated"
        assert r.token_positions == list(range(turn1[0], turn1[-1] + 1))
        assert max(r.token_positions) < min(turn2) and max(r.token_positions) < n - 1
    moved = [r for r in two if r.condition != "steer_control" and r.alpha == 16.0]
    zero = [r for r in two if r.condition != "steer_control" and r.alpha == 0.0]
    assert moved and zero
    for r in moved:
        assert r.injected and r.alpha_effective != 0
        assert abs(r.grade["lp_word"] - ctrl[(r.word, r.sample)].grade["lp_word"]) > 1e-3
        assert abs(r.p_yes - ctrl[(r.word, r.sample)].p_yes) > 1e-6
    for r in zero:
        c = ctrl[(r.word, r.sample)]
        assert r.grade["lp_word"] == pytest.approx(c.grade["lp_word"], abs=1e-5)
        assert r.p_yes == pytest.approx(c.p_yes, abs=1e-6) and r.response == c.response
    # the other check of the same run keeps its own span: from a mark in the question through the answer
    steer = [r for r in recs if r.variant == "steer" and r.condition != "steer_control"]
    assert steer and all(str(r.token_positions).startswith("from:") for r in steer)


def test_steer_two_turn_refuses_a_prompt_that_leaks_the_concept(tiny_model, monkeypatch):
    """The same no-leak check as every task A prompt: a concept named in either turn stops the run."""
    ctx = I.context(tiny_model("llama"), _cfg(variant="two_turn", options=(("n_bias", 0), ("latent_naming", False))))
    trials = [t for t in TA.plan(ctx) if t.variant == "steer_two_turn"]
    word = trials[0].word
    for name in ("TWO_TURN_REPLY", "STEER_PROMPT"):
        with monkeypatch.context() as mp:
            mp.setattr(P, name, f"{getattr(P, name)} Also {word}.")
            with pytest.raises(P.PromptLeakError, match=word):
                list(TA.execute(ctx, trials))
    assert len(list(TA.execute(ctx, trials))) == len(trials)  # unpatched: it runs
