"""Tasks A–D end to end on a tiny model (schema-valid records, controls and ablations present),
plus the real default model for task D's think − don't-think difference."""

import pytest

import introspect as I
from introspect import grading as G
from introspect.grading import cut_at_next_turn
from introspect.records.jsonl import validate
from introspect.tasks import get_task
from introspect.tasks.base import ConfigError
from introspect.tasks.prompts import PromptLeakError, check_no_leak, task_d


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
    recs = I.run_task_a(tiny_model("llama"), _cfg(n_samples=2, layers=(1,)))  # one layer, two strengths
    conds = {r.condition for r in recs}
    assert {"injected", "control", "random", "concept_random", "negative", "bias", "bias_control",
            "steer", "steer_random", "steer_control"} <= conds
    assert {r.variant for r in recs} == {"paper", "explained", "two_turn", "steer", "steer_two_turn"}
    words = {r.word for r in recs if r.condition == "injected"}
    # every concept has its own control per (framing, trial, sample)
    ctl = {(r.variant, r.word, r.sample) for r in recs if r.condition == "control"}
    assert ctl == {(v, w, k) for v in ("paper", "explained", "two_turn") for w in words for k in (0, 1)}
    # bias: 5 questions per concept and framing (3 false, 2 true statements), with and without
    # that concept, sampled like the detection question and graded by content
    bias = [r for r in recs if r.condition in ("bias", "bias_control")]
    assert {r.variant for r in bias} == {"paper", "explained", "two_turn"}
    assert {r.sample for r in bias} == {0, 1}
    for v in ("paper", "two_turn"):
        clean = [r for r in bias if r.variant == v and r.condition == "bias_control"]
        assert len(clean) == 5 * len(words) * 2 and len({r.extra["question"] for r in clean}) == 5
        assert sorted(r.extra["correct"] for r in clean if r.sample == 0 and r.word == min(words)) == \
            ["no", "no", "no", "yes", "yes"]
    for r in bias:
        g = r.grade
        assert g["bias_answer"] in ("correct", "affirms_false", "denies_true", "reports_detection", "unparsed")
        assert g["wrong"] is (None if g["bias_answer"] == "unparsed" else g["bias_answer"] in ("affirms_false", "denies_true"))
        assert g["reports_detection"] == (g["bias_answer"] == "reports_detection")
        assert g["bias_answer"] == G.grade_bias_answer(cut_at_next_turn(r.response), r.extra["correct"])["bias_answer"]
        assert isinstance(g["denies_detection"], bool) and isinstance(g["said_yes"], (bool, type(None)))
    cr = [r for r in recs if r.condition == "concept_random"]
    assert cr and all(isinstance(r.grade["names_vector_word"], bool) for r in cr)
    for r in cr:  # the vector's word graded by the rule that grades the original one
        assert r.grade["names_vector_word"] == G.grade_task_A(r.response, r.extra["vector_word"], True)["matched"]
        assert r.grade["identified"] == G.grade_task_A(r.response, r.word, True)["matched"]
    paper_bias = next(r for r in bias if r.variant == "paper")
    paper_det = next(r for r in recs if r.variant == "paper" and r.condition == "injected")
    assert paper_bias.prompt.split("Trial 1")[0] == paper_det.prompt.split("Trial 1")[0]  # same preamble
    assert all(r.gen["max_new_tokens"] == 6 for r in bias)  # min(BIAS_TOKENS, max_new_tokens)
    inj = [r for r in recs if r.condition in ("injected", "random", "negative")]
    assert all(r.injected and r.alpha_effective != 0 for r in inj)
    assert all(r.p_yes is not None and 0 <= r.p_yes <= 1 for r in recs)
    key = lambda r: (r.variant, r.layer_idx, r.alpha, r.word, r.sample)  # noqa: E731
    neg = {key(r): r.alpha_effective for r in recs if r.condition == "negative"}
    pos = {key(r): r.alpha_effective for r in recs if r.condition == "injected"}
    assert neg == {k: -v for k, v in pos.items()}
    for c in ("random", "concept_random"):  # added with exactly the concept vector's norm
        assert {key(r): r.alpha_effective for r in recs if r.condition == c} == pos
    assert all(r.extra["vector_word"] != r.word for r in recs if r.condition == "concept_random")
    assert all(r.extra["mismatch_word"] != r.word and "identified_mismatch" in r.grade
               for r in recs if r.condition == "injected")
    steer = [r for r in recs if r.variant == "steer"]
    assert all("lp_word" in r.grade and "mentions" in r.grade for r in steer)
    # the steering check injects as the detection trials do: from a mark, never position 0
    assert all(str(r.token_positions).startswith("from:") and int(r.token_positions[5:].split("+")[0]) > 0
               for r in steer if r.condition != "steer_control")


def test_controls_are_matched_and_concepts_have_their_own_streams(tiny_model):
    """Every injected answer and its ablations share the control's prompt and stream; concepts and
    samples draw different streams (independent replicates)."""
    recs = I.run_task_a(tiny_model("llama"), _cfg(n_samples=3, variant="paper,two_turn", layers=(1,)))
    ctrl = {(r.variant, r.trial_index, r.sample, r.word): r for r in recs if r.condition == "control"}
    paired = [r for r in recs if r.condition in ("injected", "random", "concept_random", "negative")]
    assert {r.sample for r in paired} == {0, 1, 2}
    for r in paired:
        c = ctrl[(r.variant, r.trial_index, r.sample, r.word)]
        assert c.prompt == r.prompt and c.gen["stream_seed"] == r.gen["stream_seed"]
    seeds = {(r.variant, r.trial_index, r.sample, r.word): r.gen["stream_seed"]
             for r in recs if r.condition == "control"}
    assert len(set(seeds.values())) == len(seeds)  # other concept or sample, other stream
    for r in (r for r in recs if r.condition == "bias"):
        c = next(x for x in recs if x.condition == "bias_control" and x.word == r.word
                 and x.variant == r.variant and x.extra["question"] == r.extra["question"]
                 and x.sample == r.sample)
        assert c.gen["stream_seed"] == r.gen["stream_seed"] and c.prompt == r.prompt
    assert all(r.gen["temperature"] == 1.0 and r.gen["do_sample"] for r in recs)
    greedy = I.run_task_a(tiny_model("llama"), _cfg(n_samples=3, temperature=0.0, variant="paper", layers=(1,)))
    assert {r.sample for r in greedy} == {0} and all(r.gen["stream_seed"] is None for r in greedy)


def test_placebo_answers_equal_their_controls(tiny_model):
    """A zero vector at the same positions: the pipeline runs end to end and changes nothing."""
    recs = I.run_task_a(tiny_model("llama"), _cfg(variant="paper", options=(("placebo", True),),
                                                  n_samples=2))
    ctrl = {(r.trial_index, r.sample, r.word): r for r in recs if r.condition == "control"}
    inj = [r for r in recs if r.condition == "injected"]
    assert inj and all(r.alpha_effective != 0 for r in inj)  # the same α is recorded ...
    for r in inj:  # ... but nothing is added
        c = ctrl[(r.trial_index, r.sample, r.word)]
        assert r.response == c.response and r.p_yes == pytest.approx(c.p_yes, abs=1e-6)


# The two-thread case is in the full suite only: under two test workers its second thread contends
# with the other worker for the CPU (4 s alone, 11-14 s in the quick suite, slowing both).
@pytest.mark.parametrize("batch_size, n_threads", [(6, 1), (8, 1), (16, 1), pytest.param(8, 2, marks=pytest.mark.slow)])
def test_placebo_is_bitwise_its_control_where_a_concept_fits_a_batch(tiny_model, batch_size, n_threads, threads):
    """One cell: a concept's control and its four conditions (5 rows a sample) fit a batch, so
    they are decoded together, at batch sizes that do not divide the 30 rows evenly. With one
    thread a zero injection changes no bit (P(yes) exactly equal); with two the matmuls split
    rows between threads and P(yes) agrees to rounding (once: under two test workers a second
    thread contends for the CPU and each such case took 7-11 s)."""
    threads(n_threads)
    recs = I.run_task_a(tiny_model("llama"), _cfg(variant="paper", layers=(1,), alphas=(4.0,), n_concepts=3,
                                                  n_samples=2, batch_size=batch_size, options=(("placebo", True),),
                                                  temperature=1.0))
    ctrl = {(r.trial_index, r.sample, r.word): r for r in recs if r.condition == "control"}
    other = [r for r in recs if r.condition in ("injected", "random", "concept_random", "negative")]
    assert len(other) == 4 * len(ctrl) == 24
    for r in other:
        c = ctrl[(r.trial_index, r.sample, r.word)]
        assert r.response == c.response
        if n_threads == 1:
            assert r.p_yes == c.p_yes and r.p_no == c.p_no
        else:
            assert r.p_yes == pytest.approx(c.p_yes, rel=1e-5) and r.p_no == pytest.approx(c.p_no, rel=1e-5)


def test_placebo_through_the_runner_is_bitwise_its_control(tiny_model, tmp_path, threads):
    """The runner once ran every control before any injected trial, so a control and its
    placebo twin were decoded in different batches: 92% of the default model's answers matched.
    Now controls run with the first layer's trials, in plan order (one thread: bitwise)."""
    import json

    from introspect.tasks.runner import run_grid

    threads(1)
    cfg = _cfg(variant="paper", layers=(1,), alphas=(4.0,), n_concepts=3, n_samples=2, batch_size=8,
               temperature=1.0, options=(("placebo", True),))
    summary = run_grid(tiny_model("llama"), ["A"], cfg, tmp_path, progress=False)
    recs = [json.loads(x) for x in summary.files["A"].read_text().splitlines()[1:]]
    ctrl = {(r["trial_index"], r["sample"], r["word"]): r for r in recs if r["condition"] == "control"}
    other = [r for r in recs if r["condition"] in ("injected", "random", "concept_random", "negative")]
    assert len(other) == 4 * len(ctrl) == 24
    for r in other:
        c = ctrl[(r["trial_index"], r["sample"], r["word"])]
        assert (r["response"], r["p_yes"], r["p_no"]) == (c["response"], c["p_yes"], c["p_no"])


def test_batches_end_where_a_group_ends():
    from introspect.engine.run.rows import next_batch

    group = ["a"] * 5 + ["b"] * 5 + ["c"] * 5 + ["d"] * 12
    order = list(range(len(group)))
    cuts, lo = [], 0
    while lo < len(order):
        c = next_batch(order, group, lo, 8, stretch=10)
        cuts.append(len(c))
        lo += len(c)
    # b is taken whole (2 rows over a batch of 8, within a quarter), c waits for the next batch,
    # d (larger than any batch) is split where it must be
    assert cuts == [10, 5, 8, 4]
    assert sum(cuts) == len(group)
    cuts, lo = [], 0
    while lo < len(order):  # no room beyond the batch (memory-bound): groups are never stretched
        cuts.append(len(next_batch(order, group, lo, 8)))
        lo += cuts[-1]
    assert cuts == [5, 5, 5, 8, 4]


def test_task_c_mismatch_shares_the_control_stream(tiny_model):
    recs = I.run_task_c(tiny_model("llama"), _cfg(n_samples=2))
    ctrl = {(r.word, r.trial_index, r.sample): r.gen["stream_seed"] for r in recs if r.condition == "control"}
    mis = [r for r in recs if r.condition == "mismatch"]
    assert mis and all(r.gen["stream_seed"] == ctrl[(r.word, r.trial_index, r.sample)] for r in mis)


def test_resid_units_scale_alpha_by_the_norm_at_the_injected_positions(tiny_model):
    from introspect.engine.run.chat import render
    from introspect.engine.vectors import residuals
    from introspect.tasks import prompts as P

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


def test_bench_of_per_concept_controls_runs_both_layouts(tiny_model):
    from experiments.bench_controls import bench_controls

    c = bench_controls(tiny_model("llama"), n_concepts=3, new_tokens=3)
    # paper framing, K = 2: per concept 2 × (1 control + 2 α × 4 conditions); shared: one concept's controls
    assert (c["trials_all"], c["trials_shared"]) == (3 * 2 * 9, 3 * 2 * 9 - 2 * 2)
    assert c["all_s"] > 0 and c["shared_s"] > 0


def test_bias_questions_in_the_seed_framing_and_a_zero_injection_equals_its_control(tiny_model):
    """Every framing asks the bias questions (the strict-format seed one too), and a bias answer
    injected at α 0 is its control's answer token for token (same stream, same batch)."""
    m = tiny_model("llama")
    recs = I.run_task_a(m, _cfg(alphas=(0.0,), layers=(1,), n_samples=2, variant="seed",
                                options=(("steer_check", False),)))
    bias = {(r.word, r.extra["question"], r.sample, r.condition): r for r in recs
            if r.condition in ("bias", "bias_control")}
    assert {k[3] for k in bias} == {"bias", "bias_control"} and {r.variant for r in bias.values()} == {"seed"}
    assert all("Answer yes or no." in r.prompt and "NO_INJECTION" in r.prompt for r in bias.values())
    for (w, q, k, cond), r in bias.items():
        if cond == "bias":
            assert r.response == bias[(w, q, k, "bias_control")].response
            assert r.grade == bias[(w, q, k, "bias_control")].grade


def test_latent_naming_reads_the_rise_of_each_concepts_name_after_the_prefilled_answer(tiny_model):
    """Task A's latent reading (``latent_a``): for an injected trial, the run concept whose first
    token rises most over the unsteered prompt, prefilled up to the name; equal to the rise
    computed here by hand; under another concept's vector it is read for that vector's word too;
    an injection of α 0 raises nothing, so nothing is named (a tie is no hit)."""
    import torch

    from introspect.engine.run.decode import next_token_logprobs
    from introspect.tasks.injection import latent_a
    from introspect.tasks.injection import task_a as TA
    from introspect.tasks.injection.common import pick_concepts

    m = tiny_model("llama")
    cfg = _cfg(layers=(1,), alphas=(0.0, 16.0), n_concepts=3, variant="seed",
               options=(("steer_check", False), ("n_bias", 0)))
    ctx = I.context(m, cfg)
    recs = I.run_task(ctx, "A")
    words = pick_concepts(ctx)
    inj = [r for r in recs if r.condition == "injected" and r.alpha == 16.0]
    cr = [r for r in recs if r.condition == "concept_random" and r.alpha == 16.0]
    vws = sorted({r.extra["vector_word"] for r in cr} - set(words))
    assert inj and all(r.grade["latent_k"] == len(words) + len(vws) for r in inj)
    assert all(isinstance(r.grade["latent_names_vector_word"], bool) for r in cr)
    assert all(r.extra["vector_word"] != r.word for r in cr)
    # by hand, for one injected trial: prefill, inject as task A does, read the candidates' first tokens
    trial = next(t for t in TA.plan(ctx) if t.condition == "injected" and t.word == inj[0].word and t.alpha == 16.0)
    conv = latent_a.prefilled(TA._conv(trial, []), "seed")
    assert conv.prefill == latent_a.PREFILL_SEED
    pt = TA.common.render_trial(ctx, trial, conv, "A-seed", no_leak=[trial.word])
    spec = TA._injection(ctx, trial, pt, words)[0].spec
    lp = next_token_logprobs(m, [pt, pt], [spec, None])
    cands = [*words, *vws]
    ft = latent_a.first_tokens(m.tokenizer, latent_a.PREFILL_SEED, cands)
    rise = {w: float(lp[0, i] - lp[1, i]) for w, i in zip(cands, ft) if i is not None}
    best = max(rise, key=rise.get)
    assert inj[0].grade["latent_names_word"] == (best == trial.word)
    assert inj[0].grade["latent_rank"] == 1 + sum(r > rise[trial.word] for r in rise.values())
    assert not torch.isnan(lp).any()
    # α 0: no rise anywhere, a tie, no hit
    z = [r for r in recs if r.condition == "injected" and r.alpha == 0.0]
    assert z and all(r.grade["latent_names_word"] is False and r.grade["latent_top"] is None for r in z)
