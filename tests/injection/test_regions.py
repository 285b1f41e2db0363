"""Task A by token region (``--option regions=``): the regions partition the prompt, the
paper span is ``question+answer`` to the token, each region is planned with its own controls,
bias questions and steering check, and the summary compares regions paired by concept."""

import copy

import numpy as np
import pandas as pd
import pytest

import introspect as I
from introspect.engine.run.chat import render
from introspect.engine.run.inject import From
from introspect.records.jsonl import validate
from introspect.report.figures_regions import task_a_regions
from introspect.report.load import flatten_trial
from introspect.report.metrics import summarize
from introspect.tasks import prompts as P
from introspect.tasks.base import ConfigError
from introspect.tasks.injection import regions as R
from introspect.tasks.injection import task_a as TA
from introspect.tasks.injection.metrics_regions import reference, region_rows

SYSTEM_TEMPLATE = (
    "<|im_start|>system\nYou are a careful assistant who answers every question briefly.<|im_end|>\n"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _cfg(**kw):
    base = dict(layers=(1,), alphas=(16.0,), n_concepts=2, n_trials=1, max_new_tokens=6, batch_size=8, n_samples=2)
    base.update(kw)
    return I.TaskConfig(**base)


@pytest.mark.parametrize("value, want", [
    ("user", ("user",)), ("answer+question, user", ("question+answer", "user")),
    (["system", "user+system", "user"], ("system", "system+user", "user")),
])
def test_parse_gives_canonical_names(value, want):
    assert R.parse(value) == want


@pytest.mark.parametrize("value", ["", "users", "user+user", "question,,answer", "user+"])
def test_parse_refuses_in_one_line(value):
    with pytest.raises(ConfigError, match="region") as e:
        R.parse(value)
    assert "\n" not in str(e.value)


def test_regions_partition_the_prompt_and_question_answer_is_the_paper_span(tiny_model):
    """system | user | question cover positions 1..n-1 once each, in that order; ``question+answer``
    injects exactly where the paper framing does; a template without a system turn refuses it."""
    tok = copy.copy(tiny_model("llama").tokenizer)
    tok.chat_template = SYSTEM_TEMPLATE
    for conv in (P.task_a_paper(3), P.task_a_seed(3), P.task_a_bias("Is ice cold?", "explained", 3),
                 P.steer_prompt_regions()):
        p = render(tok, R.with_mark(conv))
        n = len(p)
        parts = {r: R.positions(p, r) for r in R.REGIONS}
        assert parts["answer"] == [From(n - 1)]  # the assistant header's last token, then every generated one
        flat = parts["system"][0] + parts["user"][0] + parts["question"][0]
        assert flat == list(range(1, n - 1))  # contiguous, in order, never position 0
        assert "system" in tok.decode([p.ids[i] for i in parts["system"][0]])
        assert f"Trial {1 if 'Write one' in p.text else 3}" in tok.decode([p.ids[i] for i in parts["question"][0]])
        paper = P.injected_positions(p)
        assert R.positions(p, "question+answer") == [paper] == [From(parts["question"][0][0])]
        assert R.positions(p, "user+answer") == [parts["user"][0], From(n - 1)]
        assert R.positions(p, "user+question+answer") == [From(parts["user"][0][0])]
        assert R.positions(p, "system+question") == [parts["system"][0] + parts["question"][0]]
    bare = render(tiny_model("llama").tokenizer, R.with_mark(P.task_a_paper(1)))
    with pytest.raises(ConfigError, match="no system turn"):
        R.positions(bare, "system")


def test_plan_gives_each_region_its_controls_bias_and_steering_check(tiny_model):
    ctx = I.context(tiny_model("llama"), _cfg(variant="paper", options=(("regions", "user,answer"),)))
    plan = TA.plan(ctx)
    variants = {t.variant for t in plan}
    assert variants == {"paper@user", "paper@answer", "steer@user", "steer@answer"}
    for v in ("paper@user", "paper@answer"):
        conds = {t.condition for t in plan if t.variant == v}
        assert conds == {"control", *TA.ABLATIONS, "bias", "bias_control"}
    for v in ("steer@user", "steer@answer"):
        assert {t.condition for t in plan if t.variant == v} == {"steer", "steer_random", "steer_control"}
    with pytest.raises(ConfigError, match="two_turn"):
        TA.plan(I.context(tiny_model("llama"), _cfg(variant="two_turn", options=(("regions", "user"),))))


def test_a_region_run_injects_where_it_says(tiny_model):
    """Per region: the recorded positions are the region's; ``question+answer`` moves P(yes) exactly
    as the paper framing does; the user and answer regions move it; the answer region keeps firing
    while decoding (its answers differ from the control's); every record validates; the summary has the comparison."""
    m = tiny_model("llama")
    opts = (("n_bias", 1), ("latent_naming", False))
    regs = I.run_task_a(m, _cfg(variant="paper", options=(*opts, ("regions", "user,answer,question+answer"))))
    plain = I.run_task_a(m, _cfg(variant="paper", options=opts))
    for r in regs:
        validate(r.to_dict())

    def pyes(recs, variant, cond):
        return {(r.word, r.sample): r.p_yes for r in recs if r.variant == variant and r.condition == cond}

    qa, paper = pyes(regs, "paper@question+answer", "injected"), pyes(plain, "paper", "injected")
    assert qa and qa.keys() == paper.keys()
    assert all(abs(qa[k] - paper[k]) < 1e-6 for k in qa)
    for v in ("paper@user", "paper@answer"):
        inj_, ctl = pyes(regs, v, "injected"), pyes(regs, v, "control")
        assert max(abs(inj_[k] - ctl[k]) for k in inj_) > 1e-5  # float noise is ~1e-7
    inj = {r.variant: r for r in regs if r.condition == "injected"}
    n_prompt = len(m.tokenizer(inj["paper@answer"].prompt, add_special_tokens=False)["input_ids"])
    assert inj["paper@answer"].token_positions == f"from:{n_prompt - 1}+generated"
    text = inj["paper@user"].prompt
    positions = inj["paper@user"].token_positions
    assert isinstance(positions, list) and positions == list(range(positions[0], positions[-1] + 1))
    assert P.PAPER_A_INTRO[:20] in m.tokenizer.decode([m.tokenizer(text, add_special_tokens=False)["input_ids"][i]
                                                      for i in positions])
    assert inj["paper@question+answer"].token_positions.endswith("+generated")
    answer_gen = {(r.word, r.sample): r.response for r in regs if r.variant == "paper@answer"
                  and r.condition == "injected"}
    answer_ctl = {(r.word, r.sample): r.response for r in regs if r.variant == "paper@answer"
                  and r.condition == "control"}
    assert any(answer_gen[k] != answer_ctl[k] for k in answer_gen)  # it fires while decoding
    rows = summarize(pd.DataFrame([flatten_trial(r.to_dict(), "mem") for r in regs]))
    cmp = rows[rows["metric"] == "region_net_vs:question+answer"]
    assert set(cmp["variant"]) == {"paper@user", "paper@answer"}
    steer = rows[(rows["metric"] == "steer_lp_rise_vs_random") & rows["variant"].astype(str).str.startswith("steer@")]
    assert set(steer["variant"]) == {"steer@user", "steer@answer", "steer@question+answer"}
    panels = task_a_regions(rows)  # the dashboard's grid: one row per region, in prompt order
    assert len(panels) == 1
    heat = panels[0].fig.data
    assert list(heat[0].y) == ["user", "question+answer", "answer"]
    net = rows[(rows["metric"] == "net") & (rows["variant"] == "paper@user")]["value"].iloc[0]
    assert heat[0].z[0][0] == pytest.approx(net)
    assert heat[1].text[1][0] == "reference"


def _cell(variant, net_by_concept):
    rows = []
    for c, (det, ctl) in net_by_concept.items():
        rows += [{"concept": c, "grade.detected": d, "grade.detected~c": k} for d, k in zip(det, ctl)]
    keys = {"model_id": "m", "task": "A", "variant": variant, "layer_idx": 1, "alpha": 2.0, "alpha_units": "unit"}
    return keys, pd.DataFrame(rows)


def test_region_rows_are_the_paired_difference_by_concept():
    """On constructed pairs: the estimate is the mean over concepts of the per-concept Net
    difference; the reference is question+answer when present, else the first in prompt order."""
    rng = np.random.default_rng(0)
    qa = {f"c{i}": (rng.integers(0, 2, 4), rng.integers(0, 2, 4)) for i in range(12)}
    us = {f"c{i}": (rng.integers(0, 2, 4), rng.integers(0, 2, 4)) for i in range(12)}
    out = region_rows([_cell("paper@question+answer", qa), _cell("paper@user", us), _cell("seed@user", us)])
    assert [r["variant"] for r in out] == ["paper@user"]
    want = np.mean([np.mean(us[c][0] - us[c][1]) - np.mean(qa[c][0] - qa[c][1]) for c in qa])
    assert out[0]["metric"] == "region_net_vs:question+answer" and out[0]["value"] == pytest.approx(want)
    assert out[0]["lo"] < out[0]["value"] < out[0]["hi"]
    assert reference(["user", "answer", "system+user"]) == "system+user"


@pytest.mark.calibration
@pytest.mark.parametrize("shift", [0.0, 0.15])
def test_region_difference_interval_covers_at_95(shift):
    """Coverage by simulation: 20 concepts × 4 answer pairs, each concept with its own detection and
    false-alarm rates (heterogeneous), the region's true Net higher by ``shift``; the 95% interval
    of ``region_net_vs`` holds the true difference in 0.93–0.97 of 1,000 runs."""
    rng = np.random.default_rng(1)
    hits, runs = 0, 1000
    for _ in range(runs):
        tpr, fpr = rng.uniform(0.1, 0.6, 20), rng.uniform(0.0, 0.2, 20)
        ref = {f"c{i}": (rng.random(4) < tpr[i], rng.random(4) < fpr[i]) for i in range(20)}
        reg = {f"c{i}": (rng.random(4) < tpr[i] + shift, rng.random(4) < fpr[i]) for i in range(20)}
        r = region_rows([_cell("paper@question+answer", ref), _cell("paper@user", reg)])[0]
        hits += r["lo"] <= shift <= r["hi"]
    assert 0.93 <= hits / runs <= 0.97, hits / runs
