"""Task A — injected-thought detection (seed §6A; Lindsey 2025 §"Injected thoughts").

Conditions per (layer, α, concept, trial): ``injected`` (v), ``random`` (a norm-matched random
unit vector) and ``negative`` (−v) ablations. ``control`` trials carry no injection, so they do
not depend on layer, α or concept: they are planned once per (variant, trial number) with
``layer_idx=None`` and pooled as the model's false-positive rate — duplicating an identical
greedy prompt per grid cell would fake a larger sample. The ``bias`` control asks unrelated
questions whose answer is "no", with and without injection: an injection that just makes the
model say "yes" shows up there. The paper variant injects from the blank line before "Trial N"
through every generated token.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from introspect import prompts as P
from introspect.grading import grade_task_A, parse_yes_no
from introspect.inject import From
from introspect.records import Record
from introspect.tasks.base import RunContext, TaskSpec, Trial, register
from introspect.tasks.injection import common

VARIANTS = ("paper", "seed")
BUILDERS = {"paper": P.task_a_paper, "seed": P.task_a_seed}
ABLATIONS = ("injected", "random", "negative")


def plan(ctx: RunContext) -> list[Trial]:
    concepts = common.pick_concepts(ctx)
    n_bias = int(ctx.cfg.option("n_bias", 5))
    questions = P.load_bias_questions()[:n_bias]
    out: list[Trial] = []
    for v in common.variants(ctx, VARIANTS, ("paper",)):
        for k in range(ctx.cfg.n_trials * len(concepts)):
            out.append(Trial("A", "control", k, variant=v))
        for layer, alpha in common.grid(ctx):
            for word in concepts:
                for i in range(ctx.cfg.n_trials):
                    out += [Trial("A", c, i, layer, alpha, word, v) for c in ABLATIONS]
    for qi, _ in enumerate(questions):
        out.append(Trial("A", "bias", qi, variant="bias", params=(("injected", False),)))
        for layer, alpha in common.grid(ctx):
            out.append(Trial("A", "bias", qi, layer, alpha, concepts[qi % len(concepts)], "bias",
                             (("injected", True),)))
    return out


def _conv(trial: Trial, questions: Sequence[str]):
    if trial.condition == "bias":
        return P.task_a_bias(questions[trial.index])
    return BUILDERS[trial.variant](trial.index + 1)


def execute(ctx: RunContext, trials: Sequence[Trial]) -> Iterator[Record]:
    questions = P.load_bias_questions()
    yes_no = common.YesNo(ctx.model.tokenizer)

    def make(t: Trial):
        p = common.render_checked(ctx, _conv(t, questions), no_leak=[t.word])
        start = p.spans[P.FROM_MARK][0]
        spec, eff = None, 0.0
        if t.condition in ABLATIONS or t.param("injected"):
            seed = int(t.id(ctx.fingerprint, ctx.cfg.seed), 16) % 2**31 if t.condition == "random" else None
            sign = -1.0 if t.condition == "negative" else 1.0
            spec, eff = common.spec_for(ctx, t, From(start), sign=sign, random_seed=seed)
        return [p], [spec], eff

    for r in common.execute_generation(ctx, trials, make):
        t, p, g, eff = r.trial, r.prompts[0], r.gens[0], r.extra
        injected = r.specs[0] is not None
        if t.condition == "bias":
            said = parse_yes_no(g.text)
            grade = {"said_yes": None if said is None else said == "YES", "detected": said == "YES"}
        else:
            grade = grade_task_A(g.text, t.word, injected)
        yield ctx.record(
            t, injected=injected, alpha_effective=eff, prompt=p.text, response=g.text, grade=grade,
            token_positions=f"from:{p.spans[P.FROM_MARK][0]}+generated" if injected else None,
            gen=common.gen_info(ctx), extra={"bias_injected": injected} if t.condition == "bias" else {},
            **yes_no(g),
        )


register(TaskSpec("A", "Injected-thought detection: report NO_INJECTION or the injected word", plan, execute))
