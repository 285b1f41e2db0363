"""Task A — injected-thought detection (seed §6A; Lindsey 2025 §"Injected thoughts").

Every answer is sampled (K samples per trial, each from its own stream). Conditions per
(layer, α, concept, trial, sample): ``injected`` (v), ``random`` (a Gaussian direction) and
``concept_random`` (another concept's direction), both added with v's norm, and ``negative`` (−v).
``control`` trials carry no injection and share prompt and stream with the injected trials of the
same (framing, trial, sample): each injected answer has a matched control, the one it would have
been without the injection.

Framings (variants): ``paper`` (Lindsey's prompt; injection from the blank line before "Trial N"
through every generated token), ``explained`` (the same preceded by an accurate account of what
injection is), ``two_turn`` (Pearson-Vogel et al. 2026: injected only over turn 1, asked in turn
2) and ``seed`` (strict NO_INJECTION / INJECTION: w format).

Controls from the critiques: ``bias`` asks unrelated questions whose answer is "no", with and
without the same injection (the report turns the two P(yes) shifts into an introspection score),
and the ``steer`` check injects each concept into a neutral prompt to see whether the vector
steers at all (log-probability of the word's forms at the first step, and mentions).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from introspect import prompts as P
from introspect.grading import (
    coherence,
    cut_at_next_turn,
    first_mention,
    grade_task_A,
    parse_yes_no,
)
from introspect.inject import From
from introspect.records import Record
from introspect.tasks.base import RunContext, TaskSpec, Trial, register
from introspect.tasks.injection import common

VARIANTS = ("paper", "explained", "two_turn", "seed")
DEFAULT_VARIANTS = ("paper", "explained", "two_turn")
BUILDERS = {"paper": P.task_a_paper, "explained": P.task_a_explained, "two_turn": P.task_a_two_turn,
            "seed": P.task_a_seed}
ABLATIONS = ("injected", "random", "concept_random", "negative")


def plan(ctx: RunContext) -> list[Trial]:
    concepts = common.pick_concepts(ctx)
    n_bias = int(ctx.cfg.option("n_bias", 5))
    questions = P.load_bias_questions()[:n_bias]
    cells = common.grid(ctx)
    out: list[Trial] = []
    for v in common.variants(ctx, VARIANTS, DEFAULT_VARIANTS):
        for i in range(ctx.cfg.n_trials):
            out.append(Trial("A", "control", i, variant=v))
            for layer, alpha in cells:
                for word in concepts:
                    other = (("vector_word", common.other_concept(ctx, [], word, f"concept_random:{i}")),)
                    out += [Trial("A", c, i, layer, alpha, word, v, other if c == "concept_random" else ())
                            for c in ABLATIONS]
    for qi, _ in enumerate(questions):
        out.append(Trial("A", "bias", qi, variant="bias", params=(("injected", False),)))
        for layer, alpha in cells:
            out.append(Trial("A", "bias", qi, layer, alpha, concepts[qi % len(concepts)], "bias",
                             (("injected", True),)))
    if ctx.cfg.option("steer_check", True):
        for word in concepts:
            out.append(Trial("A", "steer_control", 0, word=word, variant="steer"))
            out += [Trial("A", "steer", 0, layer, alpha, word, "steer") for layer, alpha in cells]
    return common.with_samples(ctx, out)


def _conv(trial: Trial, questions: Sequence[str]):
    if trial.variant == "bias":
        return P.task_a_bias(questions[trial.index])
    if trial.variant == "steer":
        return P.steer_prompt()
    return BUILDERS[trial.variant](trial.index + 1)


def _positions(t: Trial, p):
    """Where a trial's injection goes: turn 1 only for two_turn, everything for the steering
    check, else from the ``from`` mark through every generated token."""
    if t.variant == "two_turn":
        return list(range(p.spans["turn1"][0], p.spans["turn1_end"][1]))
    if t.variant == "steer":
        return "all"
    return From(p.spans[P.FROM_MARK][0])


def _injection(ctx: RunContext, t: Trial, p, concepts: Sequence[str]):
    if t.condition in ("control", "steer_control") or (t.variant == "bias" and not t.param("injected")):
        return None, {}
    pos = _positions(t, p)
    extra = {}
    if t.condition == "random":
        inj = common.spec_for(ctx, t, p, pos, random_seed=int(t.id(ctx.fingerprint, ctx.cfg.seed), 16) % 2**31)
    elif t.condition == "concept_random":
        other = t.param("vector_word")  # another target word (chosen in plan, so vectors are prebuilt)
        extra["vector_word"] = other
        inj = common.spec_for(ctx, t, p, pos, word=other, norm_word=t.word)
    else:
        inj = common.spec_for(ctx, t, p, pos, sign=-1.0 if t.condition == "negative" else 1.0)
    return inj, extra


def execute(ctx: RunContext, trials: Sequence[Trial]) -> Iterator[Record]:
    questions = P.load_bias_questions()
    concepts = common.pick_concepts(ctx)
    yes_no = common.YesNo(ctx.model.tokenizer)

    def make(t: Trial):
        p = common.render_checked(ctx, _conv(t, questions), no_leak=[t.word])
        inj, extra = _injection(ctx, t, p, concepts)
        return [p], [inj.spec if inj else None], (inj, extra)

    for r in common.execute_generation(ctx, trials, make):
        t, p, g = r.trial, r.prompts[0], r.gens[0]
        inj, extra = r.extra
        text = cut_at_next_turn(g.text)
        if t.variant == "steer":
            grade = {"mentions": first_mention(text, t.word) is not None,
                     "lp_word": common.word_logprob(ctx.model.tokenizer, g, t.word),
                     "coherent": coherence(text).coherent}
        elif t.variant == "bias":
            said = parse_yes_no(text)
            grade = {"said_yes": None if said is None else said == "YES", "detected": said == "YES",
                     "coherent": coherence(text).coherent}
            extra["bias_injected"] = inj is not None
        else:
            grade = grade_task_A(g.text, t.word, inj is not None)
            grade["identified"] = bool(grade.get("matched"))
            if t.word:
                mismatch = common.other_concept(ctx, concepts, t.word, "mismatch")
                extra["mismatch_word"] = mismatch
                grade["identified_mismatch"] = bool(grade_task_A(g.text, mismatch, True).get("matched"))
        if inj is not None:
            extra["alpha_as"] = inj.alpha_as
        spec = r.specs[0]
        yield ctx.record(
            t, injected=spec is not None, alpha_effective=inj.effective if inj else 0.0, prompt=p.text,
            response=g.text, grade=grade, gen=common.gen_info(ctx, g),
            token_positions=_describe(spec) if spec is not None else None, extra=extra, **yes_no(g),
        )


def _describe(spec) -> str | list[int]:
    pos = spec.token_positions
    if isinstance(pos, From):
        return f"from:{pos.start}+generated"
    return pos if isinstance(pos, str) else list(pos)


register(TaskSpec("A", "Injected-thought detection: does the model notice an injected concept and name it?", plan, execute))
