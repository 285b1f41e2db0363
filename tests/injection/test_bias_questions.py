"""Task A's bias questions as data: asked in every framing, half of them true statements, sampled
like the detection question (K samples, each paired with its un-injected control on one stream),
and graded by content, so the verdict can tell a yes-bias from a detection report."""

from __future__ import annotations

from collections import Counter

import pandas as pd
import pytest

import introspect as I
from experiments.settings import load_settings, task_config
from introspect.tasks import get_task
from introspect.tasks import prompts as P
from introspect.tasks.base import ConfigError
from introspect.tasks.injection import task_a
from introspect.tasks.tidy import pair

ITEMS = P.load_bias_items()
KINDS = {"correct", "affirms_false", "denies_true", "reports_detection", "unparsed"}


def _cfg(**kw):
    base = dict(layers=(1,), alphas=(16.0,), n_concepts=2, n_trials=1, max_new_tokens=6, batch_size=16,
                n_samples=2, options=(("steer_check", False), ("n_bias", 4)))
    base.update(kw)
    return I.TaskConfig(**base)


def _flat(rec: dict) -> dict:
    """A record as the report's loader flattens it: ``grade.*`` and ``extra.*`` as columns."""
    row = {k: v for k, v in rec.items() if k not in ("grade", "extra")}
    row.update({f"{pre}.{k}": v for pre in ("grade", "extra") for k, v in (rec.get(pre) or {}).items()})
    return row


def _bias(trials):
    return [t for t in trials if t.condition in ("bias", "bias_control")]


@pytest.mark.parametrize("n", range(0, 12))
def test_the_first_n_questions_are_a_balanced_half(n):
    answers = Counter(a for _, a in ITEMS[:n])
    assert (answers["yes"], answers["no"]) == (n // 2, n - n // 2)


def test_every_framing_plans_balanced_bias_trials_with_k_samples_each(tiny_model):
    ctx = I.context(tiny_model("llama"), _cfg(variant="all", alphas=(4.0, 16.0), n_samples=3))
    bias = _bias(get_task("A").plan(ctx))
    assert {t.variant for t in bias} == set(task_a.VARIANTS) == set(task_a.BIAS_FRAMINGS)
    words = {t.word for t in bias}
    assert len(words) == 2
    per = Counter((t.variant, t.word, t.param("question"), t.sample, t.condition) for t in bias)
    for v in task_a.VARIANTS:
        for w in words:
            qs = {q for (v2, w2, q, _, _) in per if (v2, w2) == (v, w)}
            assert sorted(ITEMS[q][1] for q in qs) == ["no", "no", "yes", "yes"]
            for q in qs:
                for k in range(3):  # K samples, each with one control and one bias trial per cell
                    assert per[(v, w, q, k, "bias_control")] == 1 and per[(v, w, q, k, "bias")] == 2


def test_n_bias_out_of_range_is_refused(tiny_model):
    ctx = I.context(tiny_model("llama"), _cfg(options=(("n_bias", len(ITEMS) + 1),)))
    with pytest.raises(ConfigError, match="n_bias"):
        get_task("A").plan(ctx)
    ctx = I.context(tiny_model("llama"), _cfg(options=(("n_bias", 0), ("steer_check", False))))
    assert not _bias(get_task("A").plan(ctx))


def test_bias_answers_pair_with_their_control_on_one_stream_and_are_graded(tiny_model):
    """Through tidy's own ``pair`` (the key the metrics use): every injected bias answer finds
    the control of its framing, concept, question and sample, drawn from the same stream and
    prompt; at α 0 the two are the same answer, token for token."""
    m = tiny_model("llama")
    ctx = I.context(m, _cfg(variant="all", alphas=(0.0, 16.0), options=(("steer_check", False), ("n_bias", 2))))
    spec = get_task("A")
    recs = list(spec.execute(ctx, _bias(spec.plan(ctx))))
    df = pd.DataFrame([_flat(r.to_dict()) for r in recs])
    treated, controls = df[df.condition == "bias"], df[df.condition == "bias_control"]
    assert len(treated) == 4 * 2 * 2 * 2 * 2  # framings × concepts × questions × samples × α
    p = pair(treated, controls)
    assert len(p) == len(treated)
    assert (p["word"] == p["word~c"]).all() and (p["extra.question"] == p["extra.question~c"]).all()
    assert (p["sample"] == p["sample~c"]).all() and (p["variant"] == p["variant~c"]).all()
    assert set(p["sample"]) == {0, 1}
    for r in (r for r in recs if r.condition == "bias"):
        c = next(x for x in recs if x.condition == "bias_control" and (x.word, x.variant, x.sample,
                 x.extra["question"]) == (r.word, r.variant, r.sample, r.extra["question"]))
        assert c.gen["stream_seed"] == r.gen["stream_seed"] and c.prompt == r.prompt
        if r.alpha == 0.0:
            assert (r.response, r.grade) == (c.response, c.grade)
    seeds = {(r.variant, r.word, r.extra["question"], r.sample): r.gen["stream_seed"]
             for r in recs if r.condition == "bias_control"}
    assert len(set(seeds.values())) == len(seeds)  # each sample its own stream
    for r in recs:
        q, correct = next(it for it in ITEMS if it[0] == r.extra["question"])
        assert r.extra["correct"] == correct and f"{q}{P.BIAS_SUFFIX}" in r.prompt
        g = r.grade
        assert g["bias_answer"] in KINDS and isinstance(g["reports_detection"], bool)
        assert g["wrong"] is (None if g["bias_answer"] == "unparsed"
                              else g["bias_answer"] in ("affirms_false", "denies_true"))
        assert "said_yes" in g and "denies_detection" in g and r.p_yes is not None
        assert r.gen["max_new_tokens"] == min(task_a.BIAS_TOKENS, 6) and r.gen["do_sample"]


def test_quick_preset_trial_count(tiny_model):
    """What the quick preset plans for task A (10 concepts, 1 cell, K = 2, three framings, 5
    questions): bias questions are sampled K times now, so they went from 300 trials (sample 0
    only) to 600 of task A's 1020 (two steering checks: two_turn has its own span)."""
    cfg = task_config(load_settings("quick"))
    trials = get_task("A").plan(I.context(tiny_model("llama"), cfg))
    bias = _bias(trials)
    assert len(bias) == 3 * 10 * 5 * 2 * 2  # framings × concepts × questions × (control, 1 cell) × K
    assert len(trials) - len(bias) == 3 * 10 * (1 + 4) * 2 + 2 * 10 * 3 * 2  # detection + steer, steer_two_turn
    assert Counter(ITEMS[t.param("question")][1] for t in bias) == {"no": 360, "yes": 240}


def test_scripted_answers_are_graded_by_content_and_follow_the_vector(tiny_model, monkeypatch):
    """The grading wired into task A's records, on answers scripted per trial (the real prompts,
    streams and injections run; only the text is replaced): a detection report to a bias
    question is a report, not a yes; a bare "No." to a true statement denies it; naming another
    concept's vector word under ``concept_random`` is ``names_vector_word``, not ``identified``."""
    from dataclasses import replace

    from introspect.tasks.injection import common

    real = common.execute_generation

    def scripted(ctx, trials, make, **kw):
        for r in real(ctx, trials, make, **kw):
            t, extra = r.trial, r.extra[1]
            if t.condition == "concept_random":
                text = f"Yes, I detect an injected thought about {extra['vector_word']}."
            elif t.condition == "bias":
                text = "Yes, I detect an injected thought about something."
            else:
                text = "No."
            yield replace(r, gens=[replace(g, text=text) for g in r.gens])

    monkeypatch.setattr(task_a.common, "execute_generation", scripted)
    recs = I.run_task_a(tiny_model("llama"), _cfg(variant="paper"))
    cr = [r for r in recs if r.condition == "concept_random"]
    assert cr and all(r.grade["names_vector_word"] and not r.grade["identified"] for r in cr)
    bias = [r for r in recs if r.condition == "bias"]
    assert bias and all(r.grade["bias_answer"] == "reports_detection" and r.grade["wrong"] is False
                        and r.grade["said_yes"] for r in bias)
    ctl = [r for r in recs if r.condition == "bias_control"]
    assert {(r.extra["correct"], r.grade["bias_answer"], r.grade["wrong"]) for r in ctl} == \
        {("no", "correct", False), ("yes", "denies_true", True)}
    assert all("names_vector_word" not in r.grade for r in recs if r.condition != "concept_random")
