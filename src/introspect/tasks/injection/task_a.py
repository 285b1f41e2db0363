"""Task A — injected-thought detection (seed §6A; Lindsey 2025 §"Injected thoughts").

Every answer is sampled (K samples per trial, each from its own stream). The stream is keyed by
(trial, sample, concept): each concept has its own ``control`` (the same prompt, the same stream,
no injection), so concepts are independent replicates and every injected answer is paired with
the answer it would have been without the injection. The concept's ablations share that stream
and control: ``random`` (a Gaussian direction) and ``concept_random`` (another concept's
direction), both at v's norm, and ``negative`` (−v).

Framings (variants): ``paper`` (Lindsey's prompt; injection from the blank line before "Trial N"
through every generated token), ``explained`` (the same preceded by an accurate account of what
injection is), ``two_turn`` (Pearson-Vogel et al. 2026: injected only over turn 1, asked in turn
2) and ``seed`` (strict NO_INJECTION / INJECTION: w format). ``--option regions=`` runs a
single-turn framing once per token region instead (``paper@user``: the system turn, the user
turn, the question, the answer, or several; ``regions``), each with its own controls, bias
questions and steering check (``steer@<region>``), compared by ``metrics_regions``.

Controls from the critiques: ``bias`` asks unrelated yes/no questions (half true, half false
statements) in every framing (preamble, turns, injected positions), injected with the concept and
not (``bias_control``), sampled like the detection question (K samples, the same streams) with a
budget long enough to read the answer: each is graded by content (right, affirms a false
statement, denies a true one, or reports a detected thought: ``grading.bias``; a "no" that denies
detecting answers the framing, not the question, and is no answer), so a yes-bias (a rise in
wrong answers) is told apart from a detection report given to the wrong question. The
report also turns the two first-token log-odds shifts of P(yes) into an introspection score, as
a reading. Under ``concept_random`` (another concept's vector) the answer is graded for both
words: the original one (``identified``, naming it by chance) and the vector's
(``names_vector_word``: does the naming follow the vector?).

Steering checks: does the concept's word gain more log-probability at the first answer step than
under a random push, and is it mentioned? Each concept is injected into a neutral prompt
(``steer``), beside a Gaussian direction of the same norm (``steer_random``) and no injection
(``steer_control``), over the span its framing injects, since a vector that reaches the answer
from one span need not from another: ``steer`` from a mark in the user turn through the answer
(as paper, explained and seed inject), ``steer_two_turn`` (planned when two_turn runs) over a
neutral turn 1 only, read in turn 2 (as two_turn injects: ``prompts.steer_prompt_two_turn``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace

from introspect.engine.run.inject import From
from introspect.grading import (
    coherence,
    cut_at_next_turn,
    first_mention,
    grade_bias_answer,
    grade_task_A,
)
from introspect.records.jsonl import Record
from introspect.tasks import prompts as P
from introspect.tasks.base import ConfigError, RunContext, TaskSpec, Trial, register
from introspect.tasks.injection import common, latent_a, regions

VARIANTS = ("paper", "explained", "two_turn", "seed")
DEFAULT_VARIANTS = ("paper", "explained", "two_turn")
BUILDERS = {"paper": P.task_a_paper, "explained": P.task_a_explained, "two_turn": P.task_a_two_turn,
            "seed": P.task_a_seed}
ABLATIONS = ("injected", "random", "concept_random", "negative")
BIAS_FRAMINGS = ("paper", "explained", "two_turn", "seed")
BIAS_TOKENS = 16  # enough to tell "Yes, Paris is …" from "Yes, I detect an injected thought …"
STEER_PROMPTS = {"steer": P.steer_prompt, "steer_two_turn": P.steer_prompt_two_turn}  # common.STEER_VARIANTS


def plan(ctx: RunContext) -> list[Trial]:
    concepts = common.pick_concepts(ctx)
    n_bias = int(ctx.cfg.option("n_bias", 5))
    n_q = len(P.load_bias_items())
    if not 0 <= n_bias <= n_q:
        raise ConfigError(f"n_bias must be between 0 and the {n_q} bias questions, got {n_bias}")
    cells = common.grid(ctx)
    sampled: list[Trial] = []
    bias: list[Trial] = []
    region_list = ctx.cfg.option("regions", None)
    if region_list is None:
        framings = common.variants(ctx, VARIANTS, DEFAULT_VARIANTS)
    else:  # each single-turn framing once per token region (two_turn injects over its turn 1 by design)
        framings = regions.plan_variants(common.variants(ctx, regions.FRAMINGS, regions.DEFAULT_FRAMINGS),
                                         regions.parse(region_list))
    for v in framings:
        for word in concepts:
            for i in range(ctx.cfg.n_trials):
                sampled.append(Trial("A", "control", i, word=word, variant=v))
                other = (("vector_word", common.other_concept(ctx, [], word, f"concept_random:{i}")),)
                for layer, alpha in cells:
                    sampled += [Trial("A", c, i, layer, alpha, word, v, other if c == "concept_random" else ())
                                for c in ABLATIONS]
            if common.base_variant(v) in BIAS_FRAMINGS:
                for q in range(n_bias):
                    qp = (("question", q),)
                    bias.append(Trial("A", "bias_control", 0, word=word, variant=v, params=qp))
                    bias += [Trial("A", "bias", 0, layer, alpha, word, v, qp) for layer, alpha in cells]
    if ctx.cfg.option("steer_check", True):
        for sv in steer_variants(framings):
            for word in concepts:
                sampled.append(Trial("A", "steer_control", 0, word=word, variant=sv))
                sampled += [Trial("A", c, 0, layer, alpha, word, sv) for layer, alpha in cells
                            for c in ("steer", "steer_random")]
    return common.with_samples(ctx, sampled + bias)


def steer_variants(framings: Sequence[str]) -> list[str]:
    """The steering checks a run's framings need: ``steer`` unless every framing is a region (it
    also judges a run without a framing of its span), ``steer_two_turn`` when two_turn runs (its
    own span), and ``steer@<region>`` for each region a run injects over."""
    own = list(dict.fromkeys(regions.name("steer", r) for _, r in map(regions.split, framings) if r))
    whole = not own or any(regions.split(v)[1] is None for v in framings)
    return [*(["steer"] if whole else []),
            *(["steer_two_turn"] if "two_turn" in map(common.base_variant, framings) else []), *own]


def _conv(trial: Trial, questions: Sequence[str]):
    v, region = common.base_variant(trial), regions.split(trial.variant)[1]
    if trial.condition in ("bias", "bias_control"):
        conv = P.task_a_bias(questions[int(trial.param("question"))], v, trial.index + 1)
    elif region and v == "steer":
        conv = P.steer_prompt_regions()
    elif v in STEER_PROMPTS:
        return STEER_PROMPTS[v]()
    else:
        conv = BUILDERS[v](trial.index + 1)
    return regions.with_mark(conv) if region else conv


def _injection(ctx: RunContext, t: Trial, p, concepts: Sequence[str]):
    if t.condition in ("control", "steer_control", "bias_control"):
        return None, {}
    region = regions.split(t.variant)[1]
    where = regions.positions(p, region) if region else [P.injected_positions(p)]
    pos = where[0]  # two_turn: turn 1 only; else from the ``from`` mark on; a region: its own
    extra = {}
    if t.condition in ("random", "steer_random"):
        inj = common.spec_for(ctx, t, p, pos, random_seed=int(t.id(ctx.fingerprint, ctx.cfg.seed), 16) % 2**31)
    elif t.condition == "concept_random":
        other = t.param("vector_word")  # another target word (chosen in plan, so vectors are prebuilt)
        extra["vector_word"] = other
        inj = common.spec_for(ctx, t, p, pos, word=other, norm_word=t.word)
    else:
        inj = common.spec_for(ctx, t, p, pos, sign=-1.0 if t.condition == "negative" else 1.0)
    if len(where) > 1:  # a region with the answer beside a prompt part: the same push, generated tokens too
        inj = replace(inj, also=tuple(replace(inj.spec, token_positions=q) for q in where[1:]))
    return inj, extra


def execute(ctx: RunContext, trials: Sequence[Trial]) -> Iterator[Record]:
    items = P.load_bias_items()
    questions = [q for q, _ in items]
    concepts = common.pick_concepts(ctx)
    yes_no = common.YesNo(ctx.model.tokenizer)

    def render(t: Trial, conv):
        kind = "A-seed" if common.base_variant(t) == "seed" else "A"  # steer: never +fewshot
        p = common.render_trial(ctx, t, conv, kind, no_leak=[t.word], avoid=[t.param("vector_word")])
        return p, _injection(ctx, t, p, concepts)

    def make(t: Trial):
        p, (inj, extra) = render(t, _conv(t, questions))
        return [p], [inj.specs if inj else None], (inj, extra)

    def make_latent(t: Trial, conv):
        p, (inj, _) = render(t, conv)
        return p, inj.spec if inj else None

    latent = {}
    if ctx.cfg.option("latent_naming", True):  # candidates: the run's concepts and every vector word of its plan
        vws = sorted({str(t.param("vector_word")) for t in plan(ctx) if t.param("vector_word")} - set(concepts))
        latent = latent_a.readings(ctx, trials, [*concepts, *vws], make_latent, lambda t: _conv(t, questions))
    is_bias = [t.condition in ("bias", "bias_control") for t in trials]
    runs = [([t for t, b in zip(trials, is_bias) if not b], None),
            ([t for t, b in zip(trials, is_bias) if b], min(BIAS_TOKENS, ctx.cfg.max_new_tokens))]
    for part, budget in runs:
        for r in common.execute_generation(ctx, part, make, max_new_tokens=budget):
            yield _record(ctx, r, concepts, items, yes_no, budget, latent)


def _record(ctx: RunContext, r, concepts, items, yes_no, budget, latent=None) -> Record:
    t, p, g = r.trial, r.prompts[0], r.gens[0]
    inj, extra = r.extra
    text = cut_at_next_turn(g.text)
    if common.is_steer(t.variant):
        grade = {"mentions": first_mention(text, t.word) is not None,
                 "lp_word": common.word_logprob(ctx.model.tokenizer, g, t.word),
                 "coherent": coherence(text).coherent}
    elif t.condition in ("bias", "bias_control"):
        question, correct = items[int(t.param("question"))]
        grade = {**grade_bias_answer(text, correct), "coherent": coherence(text).coherent}
        extra["question"], extra["correct"] = question, correct
    else:
        grade = grade_task_A(g.text, t.word, inj is not None)
        grade["identified"] = bool(grade.get("matched"))
        if t.condition == "concept_random" and extra.get("vector_word"):
            grade["names_vector_word"] = bool(grade_task_A(g.text, extra["vector_word"], True).get("matched"))
        if t.word:
            mismatch = common.other_concept(ctx, concepts, t.word, "mismatch")
            extra["mismatch_word"] = mismatch
            grade["identified_mismatch"] = bool(grade_task_A(g.text, mismatch, True).get("matched"))
        grade.update(latent_a.grade_of(latent or {}, t))
        extra.update(latent_a.extra_of(latent or {}, t))
    if inj is not None:
        extra["alpha_as"] = inj.alpha_as
    spec = r.specs[0]
    return ctx.record(
        t, injected=spec is not None, alpha_effective=inj.effective if inj else 0.0, prompt=p.text,
        response=g.text, grade=grade, gen=common.gen_info(ctx, g, budget),
        token_positions=_describe(spec) if spec is not None else None, extra=extra, **yes_no(g),
    )


def _describe(spec) -> str | list[int]:
    if isinstance(spec, list):  # a region's prompt part, then "generated"
        return "+".join(f"{p[0]}..{p[-1]}" if isinstance(p, list) else str(p) for p in map(_describe, spec))
    pos = spec.token_positions
    if isinstance(pos, From):
        return f"from:{pos.start}+generated"
    return pos if isinstance(pos, str) else list(pos)


register(TaskSpec("A", "Injected-thought detection: does the model notice an injected concept and name it?", plan, execute))
