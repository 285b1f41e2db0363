"""Tasks A–D end to end on a tiny model (schema-valid records, controls and ablations present),
plus the real default model for task D's think − don't-think difference."""

import pytest

import introspect as I
from introspect.prompts import PromptLeakError, check_no_leak, task_d
from introspect.records import validate
from introspect.tasks.base import ConfigError, get_task


def _cfg(**kw):
    base = dict(layers=(1, 2), alphas=(4.0, 16.0), n_concepts=2, n_trials=1, max_new_tokens=6, batch_size=8)
    base.update(kw)
    return I.TaskConfig(**base)


@pytest.mark.parametrize("name", ["A", "B", "C", "D"])
def test_task_runs_and_records_validate(tiny_model, name):
    m = tiny_model("llama")
    recs = I.run_task(I.context(m, _cfg()), name)
    assert recs
    ids = [r.trial_id for r in recs]
    assert len(ids) == len(set(ids))
    for r in recs:
        validate(r.to_dict())
        assert r.model_id and r.trial_id and r.run_id == "notebook"
    planned = get_task(name).plan(I.context(m, _cfg()))
    assert {t.id(m.introspect_info.fingerprint, 0) for t in planned} == set(ids)


def test_task_a_has_controls_ablations_and_bias(tiny_model):
    recs = I.run_task_a(tiny_model("llama"), _cfg())
    conds = {r.condition for r in recs}
    assert {"injected", "control", "random", "concept_random", "negative", "bias", "steer", "steer_control"} <= conds
    assert {r.variant for r in recs} >= {"paper", "explained", "two_turn", "bias", "steer"}
    bias = [r for r in recs if r.condition == "bias"]
    assert {r.extra["bias_injected"] for r in bias} == {True, False}
    inj = [r for r in recs if r.condition in ("injected", "random", "negative")]
    assert all(r.injected and r.alpha_effective != 0 for r in inj)
    assert all(r.p_yes is not None and 0 <= r.p_yes <= 1 for r in recs)
    key = lambda r: (r.variant, r.layer_idx, r.alpha, r.word)  # noqa: E731
    neg = {key(r): r.alpha_effective for r in recs if r.condition == "negative"}
    pos = {key(r): r.alpha_effective for r in recs if r.condition == "injected"}
    assert neg == {k: -v for k, v in pos.items()}
    # the random directions are added with exactly the concept vector's norm
    for c in ("random", "concept_random"):
        assert {key(r): r.alpha_effective for r in recs if r.condition == c} == pos
    assert all(r.extra["vector_word"] != r.word for r in recs if r.condition == "concept_random")
    assert all(r.extra["mismatch_word"] != r.word and "identified_mismatch" in r.grade
               for r in recs if r.condition == "injected")
    assert all("lp_word" in r.grade and "mentions" in r.grade for r in recs if r.variant == "steer")


def test_controls_are_matched_and_samples_have_their_own_streams(tiny_model):
    """Every injected answer has a control with the identical prompt and the same sample stream."""
    recs = I.run_task_a(tiny_model("llama"), _cfg(n_samples=3, variant="paper,two_turn"))
    ctrl = {(r.variant, r.trial_index, r.sample): r for r in recs if r.condition == "control"}
    inj = [r for r in recs if r.condition == "injected"]
    assert {r.sample for r in inj} == {0, 1, 2}
    for r in inj:
        c = ctrl[(r.variant, r.trial_index, r.sample)]
        assert c.prompt == r.prompt and c.gen["stream_seed"] == r.gen["stream_seed"]
    seeds = {(r.variant, r.trial_index, r.sample): r.gen["stream_seed"] for r in inj}
    assert len(set(seeds.values())) == len(seeds)  # different samples, different streams
    assert all(r.gen["temperature"] == 1.0 and r.gen["do_sample"] for r in recs)
    greedy = I.run_task_a(tiny_model("llama"), _cfg(n_samples=3, temperature=0.0, variant="paper"))
    assert {r.sample for r in greedy} == {0} and all(r.gen["stream_seed"] is None for r in greedy)


def test_resid_units_scale_alpha_by_the_norm_at_the_injected_positions(tiny_model):
    from introspect import prompts as P
    from introspect.chat import render
    from introspect.vectors import residuals

    m = tiny_model("llama")
    ctx = I.context(m, _cfg(alpha_units="resid", alphas=(0.5,)))
    recs = I.run_task(ctx, "C")
    inj = [r for r in recs if r.condition == "injected"]
    assert inj
    for r in inj:
        p = render(m.tokenizer, P.task_c(r.extra["sentence"], r.word, form=r.variant))
        pos = p.positions(P.SENTENCE_MARK)
        norm = float(residuals(m, [p], [r.layer_idx], positions=[pos])[0][0].norm(dim=-1).mean())
        assert r.alpha_units == "resid" and r.alpha_effective == pytest.approx(0.5 * norm, rel=1e-4)
        raw = ctx.vectors.get(r.word, r.layer_idx).raw_norm
        assert r.extra["alpha_as"] == pytest.approx({"resid": 0.5, "unit": r.alpha_effective,
                                                     "raw": r.alpha_effective / raw})


def test_raw_units_scale_the_raw_vector(tiny_model):
    m = tiny_model("llama")
    ctx = I.context(m, _cfg(alpha_units="raw", alphas=(2.0,)))
    for r in (r for r in I.run_task(ctx, "B") if r.condition == "injected"):
        assert r.alpha_effective == pytest.approx(2.0 * ctx.vectors.get(r.word, r.layer_idx).raw_norm, rel=1e-5)


def test_task_b_mc_and_paper_variants(tiny_model):
    recs = I.run_task_b(tiny_model("llama"), _cfg(variant="all"))
    assert {r.variant for r in recs} == {"paper", "seed", "mc"}
    for r in recs:
        if r.variant == "mc":
            assert r.grade["mc_correct"] is not None and "mc_answer" in r.extra
        else:
            assert r.grade["success"] is not None


def test_injection_changes_task_c_prompt_pass(tiny_model):
    """Injected vs control rows of the same trial differ in first-token p(yes)."""
    recs = I.run_task_c(tiny_model("llama"), _cfg(alphas=(64.0,)))
    ctrl = {r.word: r.p_yes for r in recs if r.condition == "control"}
    inj = [r for r in recs if r.condition == "injected"]
    assert any(abs(r.p_yes - ctrl[r.word]) > 1e-6 for r in inj)


def test_bad_configs(tiny_model):
    m = tiny_model("llama")
    with pytest.raises(ConfigError, match="exceeds"):
        I.run_task_a(m, _cfg(n_concepts=1000))
    with pytest.raises(ConfigError, match="empty layer list"):
        I.run_task_a(m, _cfg(layers=()))
    with pytest.raises(ConfigError, match="unknown variant"):
        I.run_task_a(m, _cfg(variant="nope"))
    with pytest.raises(ConfigError, match="unknown task"):
        get_task("Z")


def test_leaking_prompt_is_refused():
    with pytest.raises(PromptLeakError):
        check_no_leak(task_d("I baked fresh bread today.", "bread"), "bread", allow_in=("user",))


@pytest.mark.slow
def test_task_d_think_minus_dont_think_on_default(default_model):
    cfg = I.TaskConfig(n_concepts=3, n_trials=1, batch_size=8)
    recs = I.run_task_d(default_model, cfg)
    by = {(r.word, r.condition): r.grade["cos"] for r in recs}
    diffs = [t - d for w in {r.word for r in recs} for t, d in zip(by[(w, "think")], by[(w, "dont_think")])]
    assert len(diffs) == 3 * default_model.cfg.n_layers
    assert max(abs(x) for x in diffs) > 1e-3  # real activations differ between the instructions
    assert all(len(r.grade["cos_ctrl"]) == default_model.cfg.n_layers for r in recs)
