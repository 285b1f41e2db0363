"""What the positive control learns from (introspect.train.data, .replay, .plan) and the damage gates
(introspect.train.gates), on tiny random models.

The rows must make naming the injected concept the thing to learn (contrast pairs that differ only
in the name, options among the concept's nearest neighbours, name tokens weighted, "no" to a push
inside the concept subspace that is no concept), the replay set must hold ≥ 300 items in three
shapes with whole questions held out, the gates must measure the adapter against the base model,
and training with the injection switched off must not teach the model to tell injected from clean.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from types import SimpleNamespace

import pytest
import torch
import yaml

from introspect.engine.load.models import load_model
from introspect.engine.run.decode import next_token_logprobs
from introspect.grading.bias import reports_on_thoughts
from introspect.train import data as D
from introspect.train import gates as G
from introspect.train import loop as L
from introspect.train import lora
from introspect.train import plan as PL
from introspect.train import replay as R

WORDS = ["pencil", "lemon", "bottle", "rabbit", "cabin", "piano", "tiger", "apple", "horse", "candle",
         "kettle", "ladder", "wallet", "saddle"]
QUESTIONS = (("Is snow cold?", "yes"), ("Is fire cold?", "no"), ("Do birds lay eggs?", "yes"),
             ("Do fish have fur?", "no"))


def rows(steps: int = 300, **kw) -> list[D.Example]:
    base = dict(seed=1, batch_size=8, train=WORDS, phrasings=("paper", "short"), strength=(0.2, 1.2), n_trials=4,
                replay_frac=0.25, n_replay=3, questions=QUESTIONS)
    return [r for s in range(steps) for r in D.step_examples(s, **{**base, **kw})]


@pytest.fixture(scope="module")
def tiny(tiny_dir):
    return load_model(str(tiny_dir("llama")))


# ---------------------------------------------------------------- rows
def test_contrast_twins_differ_only_in_the_concept_and_its_name(tiny):
    tok = tiny.tokenizer
    rs = rows()
    twins = [(a, b) for a, b in zip(rs, rs[1:]) if a.kind == b.kind == "contrast" and a.concept != b.concept
             and (a.phrasing, a.trial, a.strength) == (b.phrasing, b.trial, b.strength)]
    assert len(twins) >= 50
    assert sum(r.kind == "contrast" for r in rs) == 2 * len(twins)  # contrast rows come only in twins
    for a, b in twins[:20]:
        ea, eb = D.encode(tok, a), D.encode(tok, b)
        assert ea.ids[:len(ea.ids) - ea.n_answer] == eb.ids[:len(eb.ids) - eb.n_answer]  # same prompt
        assert a.answer.replace(str(a.concept), "X") == b.answer.replace(str(b.concept), "X")
        for e, ex in ((ea, a), (eb, b)):  # the name's tokens, which the loss weighs name_weight times
            i, j = e.name
            ans = e.ids[len(e.ids) - e.n_answer:]
            assert tok.decode(list(ans[i:j])).strip() == ex.concept


def test_choice_rows_offer_the_concepts_nearest_neighbours():
    vecs = {w: torch.randn(16, generator=torch.Generator().manual_seed(i)) for i, w in enumerate(WORDS)}
    vecs["lemon"] = vecs["apple"] + 0.1 * vecs["lemon"]  # lemon's nearest is apple
    sib = PL.nearest_siblings(vecs, WORDS)
    assert sib["lemon"][0] == "apple" and sib["apple"][0] == "lemon" and len(sib["pencil"]) == D.N_OPTIONS - 1
    rs = rows(siblings=sib)
    choice = [r for r in rs if r.kind == "choice"]
    none = [r for r in rs if r.kind == "choice_none"]
    assert len(choice) > 20 and len(none) > 20
    for r in choice:
        assert r.concept in r.options and set(r.options) == {r.concept, *sib[r.concept]}
        assert r.answer == D.YES.format(word=r.concept)
    assert all(r.answer == D.NO and len(set(r.options)) == D.N_OPTIONS and r.concept is None for r in none)
    conv = D.detection_conv("paper", 2, options=choice[0].options)
    assert all(w in conv.messages[-1]["content"] for w in choice[0].options)


def test_content_rows_ask_an_unrelated_question_answered_on_its_content(tiny):
    rs = rows()
    content = [r for r in rs if r.kind.startswith("content")]
    assert {r.kind for r in content} == {"content", "content_clean"}
    right = dict(QUESTIONS)
    for r in content:
        assert r.answer == D.CONTENT[right[str(r.question)]]
        assert (r.concept is not None) == (r.kind == "content")
        conv = D.detection_conv(r.phrasing, r.trial, question=r.question)
        last = conv.messages[-1]["content"]
        assert r.question in last and "detect" not in last.split(f"Trial {r.trial}")[-1]
    assert not [r for r in rows(questions=()) if r.kind.startswith("content")]  # no questions, no content rows


def test_matched_noise_has_the_concepts_variance_profile_and_none_of_their_directions():
    d = 64
    scale = torch.ones(d)
    scale[:4] = 8.0  # a few large coordinates, as concept vectors share
    vectors = {w: torch.nn.functional.normalize(torch.randn(d, generator=torch.Generator().manual_seed(i)) * scale,
                                                dim=0) for i, w in enumerate(WORDS[:6])}
    plan = PL.Plan(WORDS[:6], [], [], vectors, {"short": 2.0}, [])
    basis = plan.basis()
    sq = {"matched": torch.zeros(d), "gaussian": torch.zeros(d)}
    outside: dict[str, list[float]] = {k: [] for k in sq}
    for seed in range(100, 400):  # not the seeds that made the concept vectors
        for kind in sq:
            ex = D.Example(kind, "short", 1, None, None, 0.5, seed, D.NO)
            spec = PL.spec_for(ex, D.Encoded(ex, (1, 2, 3), 0, 1), plan, 1)
            v = spec.vector.float()
            assert float(v.norm()) == pytest.approx(1.0, abs=1e-5) and spec.alpha == pytest.approx(1.0)
            coef = torch.linalg.lstsq(basis.T, v[:, None]).solution
            outside[kind].append(float((basis.T @ coef)[:, 0].sub(v).norm()))
            assert max(abs(float(v @ b)) for b in basis) < 0.99  # never one of the concepts
            sq[kind] += v ** 2
    assert min(sum(x) / len(x) for x in outside.values()) > 0.3  # much of it outside the concepts' span
    big = {k: float(x[:4].sum() / x.sum()) for k, x in sq.items()}  # share of the energy on the large coordinates
    concept_big = float(basis[:, :4].pow(2).sum() / basis.pow(2).sum())
    assert big["matched"] == pytest.approx(concept_big, abs=0.12) and big["gaussian"] < 0.15 < concept_big
    ex = D.Example("content_clean", "short", 1, None, None, 0.0, question="Is snow cold?", answer="Yes.")
    assert PL.spec_for(ex, D.Encoded(ex, (1, 2, 3), 0, 1), plan, 1) is None


def test_blend_rows_are_mixtures_of_training_concepts_answered_an_unnamed_yes(tiny):
    """A blend is a draw from the training concepts' full covariance: inside their span, never one
    of them (a held-out concept's vector is not in the plan); off unless mixed in; answered "yes"."""
    assert not [r for r in rows() if r.kind == "blend"]  # off by default
    mixed = [r for r in rows(mix=(*D.DEFAULT_MIX, ("blend", 0.2))) if r.kind == "blend"]
    assert mixed and all(r.answer == D.YES_UNNAMED and r.concept is None and r.strength > 0 for r in mixed)
    assert len({r.noise_seed for r in mixed}) == len(mixed)
    d = 64
    vectors = {w: torch.nn.functional.normalize(torch.randn(d, generator=torch.Generator().manual_seed(i)), dim=0)
               for i, w in enumerate(WORDS[:6])}
    plan = PL.Plan(WORDS[:6], ["held"], [], vectors, {"short": 2.0}, [])
    basis = plan.basis()
    for seed in range(100, 160):
        ex = D.Example("blend", "short", 1, None, None, 0.5, seed, D.YES_UNNAMED)
        spec = PL.spec_for(ex, D.Encoded(ex, (1, 2, 3), 0, 1), plan, 1)
        v = spec.vector.float()
        assert float(v.norm()) == pytest.approx(1.0, abs=1e-5) and spec.alpha == pytest.approx(1.0)
        coef = torch.linalg.lstsq(basis.T, v[:, None]).solution
        assert float((basis.T @ coef)[:, 0].sub(v).norm()) < 1e-4  # inside the training concepts' span
        assert max(abs(float(v @ b)) for b in basis) < 0.99
    enc = D.encode(tiny.tokenizer, D.Example("blend", "short", 1, None, None, 0.5, 7, D.YES_UNNAMED))
    assert enc.name is None  # no name tokens to weigh


# ---------------------------------------------------------------- replay
def test_replay_layouts_reach_300_items_in_three_shapes_held_out_by_question():
    _, prompts = D.load_train_words()
    lay = R.layouts(prompts, seed=0)
    assert len(lay) >= 300 and len(lay) == sum(R.PER_QUESTION.values()) * len(prompts)
    assert {s for s, *_ in lay} == set(R.SHAPES)
    assert all(j is not None and j != i for s, i, j, _ in lay if s == "multi")
    assert all(p in R.preambles() for s, _, _, p in lay if s == "preamble")
    held = R.heldout_questions(len(prompts), 10, seed=0)
    assert len(held) == 10 and held == R.heldout_questions(len(prompts), 10, seed=0)
    assert sum(i in held for _, i, _, _ in lay) == 50  # the gates' 50 prompts
    assert R.heldout_questions(4, 10, seed=0) == frozenset()  # at most a fifth


def test_plan_keeps_heldout_replay_questions_out_of_every_trained_item(tiny, tmp_path):
    p = tmp_path / "train_words.yaml"
    prompts = [f"Tell me fact number {n}." for n in range(10)]
    p.write_text(yaml.safe_dump({"words": WORDS, "replay_prompts": prompts, "yes_no_true": ["Is one less than two?"],
                                 "yes_no_false": ["Is fire cold?", "Do fish have fur?", "Is ice hot?"]}))
    cfg = L.TrainConfig(layer=1, replay_tokens=4, replay_heldout=2, train_words_file=str(p), split="spelling",
                        heldout_frac=0.0, phrasings=("short",), yes_no_heldout=0.25)
    plan = L.prepare(tiny, cfg)
    held = {r.question for r in plan.replay_heldout}
    assert len(held) == 2 and len(plan.replay_heldout) == 2 * sum(R.PER_QUESTION.values())
    held_text = {prompts[i] for i in held}
    for r in plan.replay:
        assert r.question not in held and not any(c in held_text for _, c in r.messages)
        assert r.ids
    assert len(plan.gate_questions) == 1 and len(plan.questions) == 3
    assert not {q for q, _ in plan.gate_questions} & {q for q, _ in plan.questions}
    multi = next(r for r in plan.replay if r.shape == "multi")
    assert [role for role, _ in multi.messages] == ["user", "assistant", "user"]


# ---------------------------------------------------------------- gates
def test_adapter_off_is_exactly_the_base_model_and_gates_see_the_difference(tiny_dir, tmp_path):
    model = load_model(str(tiny_dir("llama")))
    p = D.render(model.tokenizer, D.detection_conv("short", 1))
    base = next_token_logprobs(model, [p])
    lora.attach(model, 0, rank=4)
    with torch.no_grad():
        for n, w in model.original_model.named_parameters():
            if "lora_B" in n:
                w.normal_(0, 0.5, generator=torch.Generator().manual_seed(hash(n) % 1000))
    moved = next_token_logprobs(model, [p])
    assert not torch.allclose(base, moved, atol=1e-3)
    with G.adapter_off(model):
        assert torch.allclose(next_token_logprobs(model, [p]), base, atol=1e-5)
    assert torch.allclose(next_token_logprobs(model, [p]), moved, atol=1e-5)  # back on afterwards
    prompts = [f"Say the number {n}." for n in range(5)]
    items = R.build_replay(model, prompts, seed=0, tokens=6)
    with G.adapter_off(model):
        base_items = R.build_replay(model, prompts, seed=0, tokens=6)
    plan = PL.Plan(WORDS[:3], [], [], {w: torch.randn(model.cfg.d_model) for w in WORDS[:3]}, {"short": 1.0},
                   [], replay_heldout=base_items, gate_questions=list(QUESTIONS))
    cfg = L.TrainConfig(layer=0, replay_tokens=6, phrasings=("short",))
    g = G.damage_gates(model, plan, cfg, twins=2)
    assert g["replay_n"] == len(base_items) and g["content_n"] == len(QUESTIONS) + len(D.P.load_bias_items())
    assert g["replay_kl"] > 0.01 and g["replay_identical_base"] == 1.0
    assert g["replay_identical"] < 1.0 and [r.ids for r in items] != [r.ids for r in base_items]
    # a greedy answer that parts from the base model's parts where their top tokens differ, teacher-forced
    assert 0 <= g["replay_top1"] < 1.0 and g["replay_kl_random"] > 0 and 0 <= g["replay_top1_random"] <= 1
    ids, ans = list(D.render(model.tokenizer, base_items[0].conversation()).ids), list(base_items[0].ids)
    with G.adapter_off(model):  # no weight change: nothing to measure
        kl0, top0 = G._teacher_forced(model, ids, ans)
    assert abs(kl0) < 1e-6 and top0 == 1.0
    assert G._teacher_forced(model, ids, ans, base=G._base_logprobs(model, ids, ans)) == pytest.approx(
        G._teacher_forced(model, ids, ans), abs=1e-6)  # the base log-probs computed once read the same
    first, second = g["replay_random_twins"]  # two twins: the first is the one the *_random readings report
    assert (first["seed"], second["seed"]) == (G.twin_seed(cfg.seed, 0), G.twin_seed(cfg.seed, 1))
    assert (first["identical"], first["kl"], first["top1"]) == (
        g["replay_identical_random"], g["replay_kl_random"], g["replay_top1_random"])
    assert second["kl"] > 0 and second["kl"] != first["kl"]  # another draw, another change
    with pytest.raises(ValueError, match="twins=0: want an integer >= 1"):
        G.damage_gates(model, plan, cfg, twins=0)
    q6 = g["replay_yardsticks"][0]  # the replay gates' bound, measured without being asked for
    assert q6["name"] == G.BAR == "q6" and g["bounds"]["replay_kl"] == q6["kl"] > 0
    assert g["bounds"]["replay_top1"] == q6["top1"] and g["passed"]["replay_kl"] is (g["replay_kl"] <= q6["kl"])
    for k, (op, _) in G.GATES.items():
        bound = g["bounds"][k]
        assert g["passed"][k] == (None if g[k] is None else g[k] >= bound if op == ">=" else g[k] <= bound)
    assert g["content_kept"] is None and g["content_known"] < G.KNOWN_MIN  # a random tiny model knows too few
    assert g["all_passed"] is all(v is True for v in g["passed"].values())
    plan.replay_heldout = items  # the adapter's own answers: identical by construction, KL measured on them
    g2 = G.damage_gates(model, plan, cfg)
    assert g2["replay_identical"] == 1.0 and g2["replay_first_difference_median"] is None  # the twin was undone
    assert 0 <= g["replay_identical_random"] <= 1
    state = {n: w.detach().clone() for n, w in model.original_model.named_parameters() if "lora_" in n}
    with G.random_twin(model, seed=1):  # the same size, other directions: a different model
        assert not torch.allclose(next_token_logprobs(model, [p]), moved, atol=1e-3)
        now = dict(model.original_model.named_parameters())
        for n in (n for n in state if "lora_B" in n):
            na = n.replace("lora_B", "lora_A")
            assert torch.allclose((now[n] @ now[na]).norm(), (state[n] @ state[na]).norm(), rtol=1e-4)
    assert all(torch.equal(w, state[n]) for n, w in model.original_model.named_parameters() if "lora_" in n)
    assert 0 <= g["replay_first_difference_median"] <= 6 and 0 <= g["detection_phrases_base"] <= 1
    caught = g["detection_phrases_examples"]  # the answers behind the rate, each one a report
    assert len(caught) == min(G.EXAMPLES, round(g["detection_phrases"] * g["detection_phrases_n"]))
    assert all(map(reports_on_thoughts, caught))


def test_a_phrasing_listed_twice_trains_on_twice_the_steps():
    """``--phrasings paper two_turn short two_turn``: steps cycle through the list, so two_turn
    gets half of them (the two-framing recipe in docs/positive-control.md relies on this)."""
    assert L.TrainConfig(layer=1, phrasings=("paper", "two_turn", "short", "two_turn")).phrasings[3] == "two_turn"
    got = Counter(r.phrasing for r in rows(40, phrasings=("paper", "two_turn", "short", "two_turn"))
                  if r.kind != "replay")
    assert got["two_turn"] == got["paper"] + got["short"] and got["paper"] > 0 and got["short"] > 0


def test_mix_flag_changes_only_the_kinds_it_names():
    """``--mix gaussian=0.3 clean=0.02``: those two shares change, in place; every other kind keeps
    the default's, and the rows drawn follow the new shares."""
    from experiments.train_aware import parse_mix

    mix = parse_mix(["gaussian=0.3", "clean=0.02"])
    assert [k for k, _ in mix] == [k for k, _ in D.DEFAULT_MIX] and parse_mix([]) == D.DEFAULT_MIX
    assert {k: v for k, v in mix if v != dict(D.DEFAULT_MIX)[k]} == {"gaussian": 0.3, "clean": 0.02}
    got = Counter(r.kind for r in rows(60, mix=mix) if r.kind != "replay")
    base = Counter(r.kind for r in rows(60) if r.kind != "replay")
    assert got["gaussian"] > base["gaussian"] and got["clean"] < base["clean"]
    with pytest.raises(D.TrainDataError, match="mix shares"):
        L.TrainConfig(layer=1, mix=(("gaussian", 0.0),))


def test_recipe_two_turn_is_the_documented_flags_and_flags_given_win(capsys):
    """``--recipe two-turn`` is the five flags docs/positive-control.md leads with, the same config
    as spelling them out (and as ``recipe()`` from a script); a flag given beside it wins, and
    --mix changes the recipe's mix, not the default's. ``seed`` is the defaults."""
    from experiments.train_aware import _config, parse_args
    from introspect.train.config import recipe

    tt = ["paper", "two_turn", "explained", "two_turn", "short", "two_turn", "inward", "two_turn", "notice", "two_turn"]
    spelled = ["--phrasings", *tt, "--mix", "gaussian=0.32", "clean=0.06", "suggested=0.05", "choice_none=0.07",
               "--decision-weight", "5"]
    named = _config(parse_args(["--recipe", "two-turn"]), 24)
    assert named == _config(parse_args(spelled), 24) == recipe("two-turn", 24)
    assert named.phrasings == tuple(tt) and named.decision_weight == 5 and named != L.TrainConfig(layer=24)
    assert _config(parse_args([]), 24) == L.TrainConfig(layer=24) == recipe("seed", 24)
    over = _config(parse_args(["--recipe", "two-turn", "--decision-weight", "2", "--mix", "gaussian=0.4"]), 24)
    assert over.decision_weight == 2 and over.phrasings == tuple(tt)
    assert dict(over.mix) == dict(named.mix) | {"gaussian": 0.4}
    assert recipe("two-turn", 24, seed=2).seed == 2
    with pytest.raises(D.TrainDataError, match="unknown recipe 'bogus'; use one of seed, two-turn"):
        recipe("bogus", 24)
    with pytest.raises(SystemExit):
        parse_args(["--recipe", "bogus"])
    assert "invalid choice: 'bogus'" in capsys.readouterr().err


def test_first_difference():
    assert G.first_difference((1, 2, 3), (1, 2, 4)) == 2 and G.first_difference((5,), (6,)) == 0
    assert G.first_difference((1, 2), (1, 2, 3)) == 2 and G.first_difference((1, 2), (1, 2)) == 2


# ---------------------------------------------------------------- the control's control
def test_training_with_the_injection_switched_off_leaves_the_yes_gap(tiny_dir, tmp_path, monkeypatch):
    """The same run with every injection removed sees yes and no rows with the same inputs: it
    cannot learn to tell injected from clean, so P(yes) injected − P(yes) clean stays where it was,
    while the run with the injection on moves it (the test in test_train, and here too)."""
    p = tmp_path / "w.yaml"
    p.write_text(yaml.safe_dump({"words": WORDS[:10], "replay_prompts": ["Say hi.", "Count to three."]}))
    cfg = L.TrainConfig(layer=1, steps=60, batch_size=8, lr=1e-2, rank=8, warmup=2, replay_prompts=2,
                        replay_tokens=6, checkpoint_every=1000, phrasings=("short",), strength=(0.5, 1.0),
                        heldout_frac=0.0, n_trials=2, train_words_file=str(p), mix=(("positive", 0.5), ("clean", 0.5)),
                        split="spelling", gates=False, replay_frac=0.25, replay_distill=False, replay_weight=1.0)

    def gap(model, plan) -> float:
        tok = model.tokenizer
        yes, no = (tok(w, add_special_tokens=False)["input_ids"][0] for w in ("Yes", "No"))
        pr = D.render(tok, D.detection_conv("short", 1))
        out = []
        for w in plan.train[:6]:
            ex = D.Example("positive", "short", 1, w, None, 0.75)
            spec = PL.spec_for(ex, D.Encoded(ex, pr.ids, 0, pr.spans["from"][0]), plan, 1)
            lp = next_token_logprobs(model, [pr, pr], [spec, None]).exp()
            out.append(float(lp[0, yes] / (lp[0, yes] + lp[0, no]) - lp[1, yes] / (lp[1, yes] + lp[1, no])))
        return sum(out) / len(out)

    moved = {}
    for switched_off in (False, True):
        model = load_model(str(tiny_dir("llama")))
        plan = L.prepare(model, cfg)
        before = gap(model, plan)
        with monkeypatch.context() as m:
            if switched_off:
                m.setattr(L, "spec_for", lambda *a, **k: None)
            L.train(model, cfg, tmp_path / f"a{switched_off}", progress=False)
        moved[switched_off] = gap(model, plan) - before
    assert moved[False] > 0.05, moved  # the injection on: the gap opens (0.08 when written)
    assert abs(moved[True]) < 0.01, moved  # switched off: nothing to learn it from (0.0001)


def test_replay_distillation_targets_the_base_models_distributions(tiny_dir):
    """Replay rows learn the base model's whole next-token distribution: the loss is the KL from
    it, exactly 0 while the adapter is a no-op and positive once it moves anything."""
    model = load_model(str(tiny_dir("llama")))
    lora.attach(model, 0, rank=4)
    tok = model.tokenizer
    items = R.build_replay(model, ["Say hi.", "Count to three.", "Name a colour."], seed=0, tokens=5)
    encs = [D.encode(tok, D.Example("replay", "replay", replay=i), items) for i in range(len(items))]
    specs = [None] * len(encs)
    kl0 = L.group_loss(model, encs, specs, distill=True)
    ce0 = L.group_loss(model, encs, specs)
    assert torch.allclose(kl0, torch.zeros_like(kl0), atol=1e-5) and bool((ce0 > 0).all())
    with torch.no_grad():
        for n, w in model.original_model.named_parameters():
            if "lora_B" in n:
                w.normal_(0, 0.3, generator=torch.Generator().manual_seed(len(n)))
    kl1 = L.group_loss(model, encs, specs, distill=True)
    assert bool((kl1 > 1e-3).all())
    kl1.sum().backward()  # the gradient reaches the adapter through the student pass only
    assert any(p.grad is not None and float(p.grad.abs().sum()) > 0
               for n, p in model.original_model.named_parameters() if "lora_" in n)


def test_two_turn_rows_inject_over_turn_one_only_as_task_a_does(tiny):
    """``two_turn`` trains in task A's own two-turn conversation: every kind of row renders there,
    its injection covers turn 1 ("Trial N" through the assistant's first reply) and nothing after,
    and the spans equal the ones task A's two_turn trials inject."""
    from introspect.tasks import prompts as P

    tok = tiny.tokenizer
    rs = rows(steps=60, phrasings=("two_turn",))
    kinds = {r.kind for r in rs}
    assert {"positive", "contrast", "choice", "mismatch", "gaussian", "content", "clean"} <= kinds
    ref = D.render(tok, P.task_a_two_turn(3))
    a, b = ref.spans["turn1"][0], ref.spans["turn1_end"][1]
    fired_expected, encs, specs = 0, [], []
    vecs = {w: torch.randn(tiny.cfg.d_model) for w in WORDS}
    plan = PL.Plan(WORDS, [], [], vecs, {"two_turn": 1.0}, [])
    for r in [r for r in rs if r.kind != "replay"][:40]:
        e = D.encode(tok, r)
        text = tok.decode(list(e.ids))
        assert P.TWO_TURN_TASK in text and P.TWO_TURN_REPLY in text
        assert e.until is not None and e.from_pos < e.until <= len(e.ids) - e.n_answer
        assert tok.decode(list(e.ids[e.from_pos:e.until])).strip().startswith("Trial")
        assert tok.decode(list(e.ids[e.from_pos:e.until])).rstrip().endswith(P.TWO_TURN_REPLY[-12:])
        if r.trial == 3 and r.kind == "clean":  # the plain detection question: task A's very prompt
            assert e.ids[:len(ref)] == ref.ids and (e.from_pos, e.until) == (a, b)
        if r.claimed:
            assert D.CLAIM.format(word=r.claimed) in text
        if r.options:
            assert all(o in text.split(P.TWO_TURN_REPLY)[-1] for o in r.options)
        spec = PL.spec_for(r, e, plan, 1)
        if spec is not None:
            assert list(spec.token_positions) == list(range(e.from_pos, e.until))
            fired_expected += e.until - e.from_pos
        encs.append(e)
        specs.append(spec)
    stats = L.StepStats()
    with torch.no_grad():
        for i in range(0, len(encs), 8):
            L.group_loss(tiny, encs[i:i + 8], specs[i:i + 8], stats=stats)
    assert fired_expected > 0 and stats.fired == fired_expected  # turn 1 only: never the question or the answer


def _judged(**figures) -> dict:
    """A gates dict as ``damage_gates`` returns it, from constructed figures: every gate passes
    unless a figure given says otherwise (the 6-bit yardstick's KL 0.025, top token 0.93)."""
    q6 = {"name": "q6", "what": "the base model's weights re-quantized to 6 bits (Q8_0's rule)",
          "identical": 0.25, "kl": 0.025, "top1": 0.93}
    base = {"replay_kl": 0.014, "replay_top1": 0.95, "replay_identical": 0.27, "detection_phrases": 0.0,
            "content_kept": 0.97, "content_answers": 0.55, "content_known": 30, "content_n": 64,
            "content_kept_base": 0.2, "replay_yardsticks": [q6], "replay_n": 56, "replay_identical_base": 1.0,
            "replay_identical_random": 0.13, "detection_phrases_base": 0.0, "content_answers_base": 0.41,
            "content_answers_clean_base": 0.93}
    g = {**base, **figures}
    return {**g, **G.judge(g)}


def test_gates_bar_is_the_6bit_yardstick_and_all_passed_needs_every_gate():
    """Greedy identity is no gate any more; the replay gates compare with the 6-bit yardstick
    (ties pass: "no larger", "no lower"), and an adapter is a positive control only if every gate
    passes: one False or one None (not measured) makes ``all_passed`` False."""
    assert set(G.GATES) == {"replay_kl", "replay_top1", "detection_phrases", "content_kept"}
    assert "replay_identical" not in G.GATES and G.GATES["replay_kl"] == ("<=", "q6") == ("<=", G.BAR)
    assert G.GATES["replay_top1"] == (">=", "q6")
    ok = _judged(replay_identical=0.05)  # greedy identity far below the old 0.80: a reading, not a gate
    assert ok["passed"] == dict.fromkeys(G.GATES, True) and ok["all_passed"] is True
    assert ok["bounds"] == {"replay_kl": 0.025, "replay_top1": 0.93, "detection_phrases": 0.02, "content_kept": 0.90}
    assert ok["gates"]["replay_kl"] == "<= 0.025, the q6 yardstick's" and ok["gates"]["detection_phrases"] == "<= 0.02"
    assert G.positive_control(ok) == (True, [], [])
    assert _judged(replay_kl=0.025, replay_top1=0.93)["all_passed"] is True  # as much change as the bar: inside it
    worse_kl = _judged(replay_kl=0.0251)
    assert worse_kl["passed"]["replay_kl"] is False and worse_kl["passed"]["replay_top1"] is True
    assert worse_kl["all_passed"] is False and G.positive_control(worse_kl) == (False, ["replay_kl"], [])
    worse_top = _judged(replay_top1=0.929)
    assert worse_top["passed"]["replay_top1"] is False and worse_top["all_passed"] is False
    q8 = {"name": "q8_0", "what": "Q8_0", "identical": 0.57, "kl": 0.0014, "top1": 0.98}
    beside = _judged(replay_yardsticks=[q8, _judged()["replay_yardsticks"][0]])
    assert beside["all_passed"] is True and beside["bounds"]["replay_kl"] == 0.025  # Q8_0 is context, not the bar
    for k, bad in (("replay_kl", 0.03), ("replay_top1", 0.9), ("detection_phrases", 0.03), ("content_kept", 0.89)):
        g = _judged(**{k: bad})  # each gate alone can fail the adapter
        assert g["passed"][k] is False and g["all_passed"] is False and G.positive_control(g)[1] == [k]
    for k in G.GATES:
        g = _judged(**{k: None})  # a figure not measured is never a pass
        assert g["passed"][k] is None and g["all_passed"] is False and G.positive_control(g) == (False, [], [k])
    for sticks in ([], [q8], [{**_judged()["replay_yardsticks"][0], "kl": None, "top1": None}]):
        g = _judged(replay_yardsticks=sticks, replay_kl=0.0, replay_top1=1.0)  # no bar: not measured, not passed
        assert g["passed"]["replay_kl"] is None and g["passed"]["replay_top1"] is None and g["all_passed"] is False
        assert g["bounds"]["replay_kl"] is None and "n/a, the q6 yardstick's" in g["gates"]["replay_kl"]
        assert G.positive_control(g) == (False, [], ["replay_kl", "replay_top1"])
    assert G.positive_control({**ok, "all_passed": False})[0] is False  # the recorded verdict is read
    assert G.positive_control({})[0] is False


def test_content_answers_count_only_right_answers(tiny, monkeypatch):
    """Under injection only a right answer counts: a wrong yes or no, a detection report and no
    answer count against. An adapter that says "yes" to everything gets the yes-questions right
    only, about half (counting any yes or no, it read 1.00)."""
    items = [*QUESTIONS, *D.P.load_bias_items()]
    yes_share = sum(right == "yes" for _, right in items) / len(items)
    assert 0.4 < yes_share < 0.6
    assert G.right_share(["Yes."] * len(items), items) == pytest.approx(yes_share)
    assert G.right_share([f"{right.capitalize()}." for _, right in items], items) == 1.0
    wrong = {"yes": "No.", "no": "Yes."}
    assert G.right_share([wrong[right] for _, right in items], items) == 0.0
    odd = ["Yes, I detect an injected thought about lemons.", "I am not sure.", "No.", "No."]
    assert G.right_share(odd, QUESTIONS) == 0.25  # a report, no answer, a wrong "no"; only "No." to fur is right
    assert G.right_share([], []) is None


def test_content_kept_is_judged_on_what_the_base_model_knows(tiny, monkeypatch):
    """The gate reads the questions the base model answers right without injection: an adapter that
    keeps those right passes though it gets the rest wrong (the base model knows about half on the
    default model); one that says "yes" to everything keeps about half and fails; fewer than
    ``KNOWN_MIN`` known questions is "not measured", never a pass."""
    items = [(f"Is {i} even?", "yes" if i % 2 == 0 else "no") for i in range(24)]
    known = [i < 12 for i in range(24)]  # the base model knows the first 12, six "yes" and six "no"
    right = [f"{r.capitalize()}." for _, r in items]
    keeps = [*right[:12], *["I am not sure."] * 12]
    assert G.right_share(keeps, items) == 0.5 and G.kept_share(keeps, known, items) == 1.0
    assert G.kept_share(["Yes."] * 24, known, items) == 0.5
    assert G.kept_share(right, [i < G.KNOWN_MIN - 1 for i in range(24)], items) is None
    assert G.judge({"content_kept": 0.5})["passed"]["content_kept"] is False
    assert G.judge({"content_kept": 0.9})["passed"]["content_kept"] is True
    assert G.judge({"content_kept": None, "content_answers": 1.0})["passed"]["content_kept"] is None
    # through damage_gates: the base model answers every question right clean and "not sure" injected;
    # the adapter answers right clean and "Yes." to every injected prompt
    from introspect.engine.run import decode

    off = {"on": False}

    @contextlib.contextmanager
    def adapter_off(model):
        off["on"] = True
        try:
            yield
        finally:
            off["on"] = False

    bias = tuple((f"Is {i} odd?", "no" if i % 2 == 0 else "yes") for i in range(8))
    asked = [*QUESTIONS, *bias]

    def answers(model, prompts, specs=None, **k):
        texts = ([f"{r.capitalize()}." for _, r in asked] if specs is None
                 else ["I am not sure."] * len(prompts) if off["on"] else ["Yes."] * len(prompts))
        return [SimpleNamespace(text=t, tokens=(), stop_reason="length") for t in texts[:len(prompts)]]

    monkeypatch.setattr(decode, "generate", answers)
    monkeypatch.setattr(G, "adapter_off", adapter_off)
    monkeypatch.setattr(G, "load_bias_items", lambda: bias)
    plan = PL.Plan(WORDS[:3], [], [], {w: torch.randn(tiny.cfg.d_model) for w in WORDS[:3]}, {"short": 1.0},
                   [], replay_heldout=[], gate_questions=list(QUESTIONS))
    g = G.damage_gates(tiny, plan, L.TrainConfig(layer=0, replay_tokens=6, phrasings=("short",)))
    assert (g["content_n"], g["content_known"], g["content_answers_clean_base"]) == (12, 12, 1.0)
    assert g["content_kept"] == g["content_answers"] == 0.5 and g["passed"]["content_kept"] is False
    assert g["content_kept_base"] == g["content_answers_base"] == 0.0 and g["detection_phrases"] == 0.0
    assert g["replay_n"] == 0 and g["passed"]["replay_kl"] is None and g["passed"]["replay_top1"] is None
    assert g["all_passed"] is False  # no held-out replay: the replay gates are not measured, so not passed
    monkeypatch.setattr(G, "load_bias_items", lambda: bias[:2])
    few = G.damage_gates(tiny, plan, L.TrainConfig(layer=0, replay_tokens=6, phrasings=("short",)))
    assert few["content_known"] == 6 and few["content_kept"] is None and few["passed"]["content_kept"] is None


def test_gates_line_puts_the_matched_controls_beside_the_gates():
    from experiments.train_aware import _control_line, _gates_line

    g = _judged(replay_kl=0.05, replay_top1=0.95, replay_identical=0.11, content_kept=None)
    line = _gates_line(g)
    assert "\n" not in line and line.startswith("damage gates: replay_kl 0.05 (<= 0.025, the q6 yardstick's: FAIL); "
                                               "replay_top1 0.950 (>= 0.93, the q6 yardstick's: pass); ")
    assert "detection_phrases 0.00 (<= 0.02: pass)" in line and "content_kept n/a (>= 0.9: not measured)" in line
    assert "replay_identical (" not in line  # greedy identity: a reading, no bound, no pass/fail
    assert ("readings over 56 held-out replay prompts: greedy answers identical to the base model's 0.11 (the base "
            "model decoded again 1.00, a random weight change of the adapter's size 0.13)") in line
    assert ("right answers of the adapter under injection 0.55, of the base model under the same injection 0.41, "
            "without one 0.93 (30 of 64 questions), of which it keeps 0.20 under the same injection") in line
    assert "; the base model's weights re-quantized to 6 bits (Q8_0's rule): identical 0.25, KL 0.025, top token " \
           "kept 0.93" in line
    assert _control_line(g) == "positive control: no (failed: replay_kl; not measured: content_kept)"
    assert _control_line(_judged()) == "positive control: yes (every damage gate passed)"
    assert _control_line(_judged(replay_yardsticks=[])) == \
        "positive control: no (not measured: replay_kl, replay_top1)"
    assert "replay_kl n/a (<= 0.025, the q6 yardstick's: not measured)" in _gates_line(_judged(replay_kl=None))
    assert "replay_kl 0 (<= n/a, the q6 yardstick's: not measured)" in _gates_line(_judged(replay_kl=0.0,
                                                                                          replay_yardsticks=[]))
    forced = _gates_line({**g, "replay_top1_random": 0.9, "replay_kl_random": 0.021})
    assert "the random change teacher-forced: KL 0.021, top token the base model's 0.90" in forced
    assert "random changes" not in forced  # one twin: no range
    twins = [{"seed": 1, "identical": 0.13, "kl": 0.021, "top1": 0.9},
             {"seed": 1001, "identical": 0.05, "kl": 0.04, "top1": 0.95},
             {"seed": 2001, "identical": 0.2, "kl": 0.03, "top1": 0.98}]
    several = _gates_line({**g, "replay_top1": 0.97, "replay_top1_random": 0.9, "replay_kl_random": 0.021,
                           "replay_random_twins": twins})
    assert ("over 3 random changes: identical 0.05–0.20 (the adapter's at or above 1 of them), top token kept "
            "0.90–0.98 (the adapter's at or above 2 of them), KL 0.021–0.04 (the adapter's below 0 of them)") in several
    sticks = [{"name": "bf16", "what": "the base model computed in bf16", "identical": 0.46, "kl": 0.0013, "top1": 0.98}]
    with_sticks = _gates_line({**g, "replay_yardsticks": [*g["replay_yardsticks"], *sticks]})
    assert "; the base model computed in bf16: identical 0.46, KL 0.0013, top token kept 0.98" in with_sticks
    assert "\n" not in with_sticks and "computed in bf16" not in line
    none = _gates_line({**g, "replay_yardsticks": [{**sticks[0], "identical": None, "kl": None, "top1": None}]})
    assert "computed in bf16: identical n/a, KL n/a, top token kept n/a" in none  # no held-out replay items
    caught = _gates_line({**g, "detection_phrases_examples": ["I detect an injected thought."]}).splitlines()
    assert caught[1:] == ["  caught by the detection-phrase gate: 'I detect an injected thought.'"]


def test_gates_again_says_how_many_trainings_pass_every_gate(tmp_path, monkeypatch, capsys):
    """``train_aware --gates DIR DIR DIR``: each adapter's gates line and positive-control line,
    then "k of n trainings pass every gate"; with --out, one subfolder per DIR. A DIR named twice,
    or two DIRs of one name with --out, is one error line and exit 2, before any measurement."""
    import json

    from experiments import train_aware
    from introspect.engine.load import adapters
    from introspect.train import remeasure

    figures = {"a": {}, "b": {"content_kept": 0.6}, "c": {}}
    dirs = [tmp_path / name for name in figures]
    measured = []

    def fake(path, scale=1.0, *, twins=1, yardsticks=()):
        measured.append((path.name, scale, twins, yardsticks))
        return {**_judged(**figures[path.name]), "scale": scale, "adapter_hash": f"lora:{path.name}"}

    monkeypatch.setattr(remeasure, "saved_gates", fake)
    monkeypatch.setattr(adapters, "read_adapter", lambda d: ({}, {}, {}))
    out = tmp_path / "reports"
    assert train_aware.main(["--gates", *map(str, dirs), "--out", str(out), "--yardsticks", "bf16"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == f"2 of 3 trainings pass every gate (not: {dirs[1]})"
    assert [x for x in lines if x.startswith("positive control: ")] == [
        "positive control: yes (every damage gate passed)", "positive control: no (failed: content_kept)",
        "positive control: yes (every damage gate passed)"]
    assert measured == [(n, 1.0, 1, ("bf16",)) for n in figures]
    wrote = json.loads((out / "b" / "damage_gates_x1.json").read_text())
    assert wrote["all_passed"] is False and wrote["passed"]["content_kept"] is False
    measured.clear()
    assert train_aware.main(["--gates", str(dirs[0]), "--out", str(out)]) == 0  # one DIR: FOLDER itself
    assert (out / "damage_gates_x1.json").is_file() and "trainings pass" not in capsys.readouterr().out
    (tmp_path / "x").mkdir()
    for argv in (["--gates", str(dirs[0]), str(dirs[0])],
                 ["--gates", str(dirs[0]), str(tmp_path / "x" / "a"), "--out", str(out)]):
        assert train_aware.main([*argv, "--no-progress"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and "\n" not in err, err
    assert len(measured) == 1  # the refused ones measured nothing
    assert train_aware._k_of_n(3, 3, []) == "3 of 3 trainings pass every gate"
