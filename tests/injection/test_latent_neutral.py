"""Task A's neutral latent reading (``latent_a``): the candidate words' rise read again under a
prefill that reports nothing, with the same conversation, vector and injection rule, so that the
report reading minus it is latent naming beyond steering."""

from dataclasses import replace

import pytest

import introspect as I
from introspect.tasks import get_task
from introspect.tasks.injection import latent_a
from introspect.tasks.injection import task_a as TA

KEYS = ("latent_top", "latent_rank", "latent_names_word")


def _cfg(**kw):
    base = dict(layers=(1,), alphas=(0.0, 16.0), n_concepts=3, n_trials=1, max_new_tokens=4, batch_size=8,
                variant="paper,two_turn,seed", options=(("steer_check", False), ("n_bias", 0)))
    base.update(kw)
    return I.TaskConfig(**base)


def _latent(recs):
    return [r for r in recs if r.condition in ("injected", "concept_random")]


@pytest.fixture(scope="module")
def run(tiny_model):
    ctx = I.context(tiny_model("llama"), _cfg())
    return ctx, I.run_task(ctx, "A")


def test_every_latent_record_carries_the_neutral_reading_and_its_prefill(run):
    """The neutral fields sit beside the report ones on every injected and concept_random record
    (and only there), and the record says which prefills were read."""
    _, recs = run
    lat = _latent(recs)
    assert lat and all("latent_names_word" in r.grade for r in lat)
    for r in lat:
        for k in KEYS:
            assert f"{k}_neutral" in r.grade
        assert isinstance(r.grade["latent_names_word_neutral"], bool)
        assert 1 <= r.grade["latent_rank_neutral"] <= r.grade["latent_k"]
        assert ("latent_names_vector_word_neutral" in r.grade) == (r.condition == "concept_random")
        seed = r.variant == "seed"
        assert r.extra["latent_prefill"] == (latent_a.PREFILL_SEED if seed else latent_a.PREFILL)
        assert r.extra["latent_neutral_prefill"] == (latent_a.NEUTRAL_SEED if seed else latent_a.NEUTRAL)
    cr = [r for r in lat if r.condition == "concept_random"]
    assert cr and all(isinstance(r.grade["latent_names_vector_word_neutral"], bool) for r in cr)
    others = [r for r in recs if r.condition not in ("injected", "concept_random")]
    assert others and not any(k.startswith("latent") for r in others for k in [*r.grade, *r.extra])


def test_the_neutral_reading_moves_under_injection_and_not_at_alpha_zero(run):
    """α 0 adds nothing over the neutral prefill: every rise is 0, a tie, no top, rank 1. α 16
    moves it: in every framing some record's rises are not all tied (a reading that was not
    injected, or read the control twice, would tie everywhere)."""
    _, recs = run
    lat = _latent(recs)
    zero = [r for r in lat if r.alpha == 0.0]
    assert zero and all(r.grade["latent_top_neutral"] is None and r.grade["latent_rank_neutral"] == 1
                        and r.grade["latent_names_word_neutral"] is False for r in zero)
    for v in ("paper", "two_turn", "seed"):
        hot = [r for r in lat if r.alpha == 16.0 and r.variant == v]
        assert hot and any(r.grade["latent_top_neutral"] is not None or r.grade["latent_rank_neutral"] > 1
                           for r in hot), v


def test_the_neutral_reading_equals_one_computed_by_hand_with_the_prefill_injected(run):
    """One injected paper trial by hand: the neutral prefill rendered as task A renders it, the
    trial's own spec (from the ``from`` mark through the prefill), the rise over the control with
    the same prefill: the grade's rank and top are that reading's, and cutting the injection
    off before the prefill changes the logits (the prefill's positions are injected)."""
    from introspect.engine.run.decode import next_token_logprobs
    from introspect.engine.run.inject import From
    from introspect.tasks.injection.common import pick_concepts, render_trial

    ctx, recs = run
    words = pick_concepts(ctx)
    rec = next(r for r in recs if r.condition == "injected" and r.alpha == 16.0 and r.variant == "paper")
    trial = next(t for t in TA.plan(ctx) if (t.condition, t.word, t.alpha, t.variant, t.sample)
                 == ("injected", rec.word, 16.0, "paper", 0))
    conv = latent_a.prefilled(TA._conv(trial, []), "paper", neutral=True)
    assert conv.prefill == latent_a.NEUTRAL
    conv = replace(conv, marks={**conv.marks, "neutral": latent_a.NEUTRAL})  # locates the prefill only
    pt = render_trial(ctx, trial, conv, "A", no_leak=[trial.word])
    spec = TA._injection(ctx, trial, pt, words)[0].spec
    start, (p0, p1) = spec.token_positions.start, pt.spans["neutral"]
    assert isinstance(spec.token_positions, From) and start < p0 and p1 == len(pt)
    cut = replace(spec, token_positions=list(range(start, p0)))
    lp = next_token_logprobs(ctx.model, [pt, pt, pt], [spec, None, cut])
    cands = [*words, *sorted({r.extra["vector_word"] for r in recs if r.condition == "concept_random"} - set(words))]
    ft = latent_a.first_tokens(ctx.model.tokenizer, latent_a.NEUTRAL, cands)
    rise = {w: round(float(lp[0, i] - lp[1, i]), latent_a.DIGITS) for w, i in zip(cands, ft) if i is not None}
    assert len(rise) == rec.grade["latent_k"] and max(abs(x) for x in rise.values()) > 1e-2
    assert rec.grade["latent_rank_neutral"] == 1 + sum(x > rise[trial.word] for x in rise.values())
    top = [w for w, x in rise.items() if x == max(rise.values())]
    assert rec.grade["latent_top_neutral"] == (top[0] if len(top) == 1 else None)
    assert rec.grade["latent_names_word_neutral"] == (top == [trial.word])
    assert (lp[0] - lp[2]).abs().max() > 1e-3


def test_a_neutral_prefill_equal_to_the_report_one_reads_the_same(tiny_model, monkeypatch):
    """With the neutral prefills set to the report ones, the two readings are one reading: every
    neutral grade equals its report grade. A neutral reading taken on another span, prompt,
    vector or control would part from it somewhere."""
    monkeypatch.setattr(latent_a, "NEUTRAL", latent_a.PREFILL)
    monkeypatch.setattr(latent_a, "NEUTRAL_SEED", latent_a.PREFILL_SEED)
    recs = I.run_task(I.context(tiny_model("llama"), _cfg(alphas=(16.0,))), "A")
    lat = _latent(recs)
    assert lat and len({r.grade["latent_top"] for r in lat}) > 1  # the readings vary, so equality can fail
    for r in lat:
        for k in (*KEYS, "latent_names_vector_word"):
            assert r.grade.get(f"{k}_neutral") == r.grade.get(k), (r.variant, r.condition, r.word, k)
        assert r.extra["latent_neutral_prefill"] == r.extra["latent_prefill"]


def test_a_resumed_subset_reads_what_the_full_run_read(run):
    """A resumed run or a shard executes some trials without their controls, in other batches:
    the latent grades it writes, neutral ones included, are the full run's."""
    ctx, recs = run
    full = {r.trial_id: r for r in recs}
    part = [t for t in TA.plan(ctx) if t.condition in ("injected", "concept_random") and t.variant != "paper"]
    again = list(get_task("A").execute(replace(ctx, cfg=replace(ctx.cfg, batch_size=3)), part))
    assert len(again) == len(part)
    for r in again:
        lat = {k: v for k, v in r.grade.items() if k.startswith("latent")}
        assert "latent_names_word_neutral" in lat
        assert lat == {k: v for k, v in full[r.trial_id].grade.items() if k.startswith("latent")}
