"""Task B — thoughts vs text (seed §6B; Lindsey 2025 "distinguishing thoughts from text").

The concept is injected only on the tokens of a natural sentence. The model is asked what word
it thinks about (the injected concept should come out) and, in a separate prompt with the same
injection, to repeat the sentence (the text should come out intact). One record holds both
answers, so strict success — both right — is per trial. ``mc`` asks for the concept among 10
numbered options (chance 10%). Controls: the same prompts without injection, planned per
(concept, sentence) since they do not depend on layer or α.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence

from introspect import prompts as P
from introspect.grading import grade_task_B, parse_choice, parse_task_B, parse_thought_free
from introspect.records import Record
from introspect.tasks.base import RunContext, TaskSpec, Trial, register
from introspect.tasks.injection import common

VARIANTS = ("paper", "seed", "mc")
PARTS = {"paper": (P.task_b_thought, P.task_b_repeat), "seed": (P.task_b_thought_seed, P.task_b_repeat_seed)}


def plan(ctx: RunContext) -> list[Trial]:
    concepts = common.pick_concepts(ctx)
    out: list[Trial] = []
    for v in common.variants(ctx, VARIANTS, ("paper", "mc")):
        for word in concepts:
            for i in range(ctx.cfg.n_trials):
                s = (common.sentence_param(concepts, word, i),)
                out.append(Trial("B", "control", i, None, 0.0, word, v, s))
                out += [Trial("B", "injected", i, layer, a, word, v, s) for layer, a in common.grid(ctx)]
    return out


def _mc(ctx: RunContext, t: Trial) -> tuple[list[str], int]:
    words = P.load_words(ctx.cfg.words_file)
    rng = random.Random(f"{ctx.cfg.seed}:{t.word}:{t.index}")
    return P.mc_options(t.word, [w for w in words.targets if w != t.word], rng)


def _convs(ctx: RunContext, t: Trial, sentence: str):
    if t.variant == "mc":
        options, answer = _mc(ctx, t)
        return [P.task_b_mc(sentence, options)], answer
    return [build(sentence) for build in PARTS[t.variant]], None


def execute(ctx: RunContext, trials: Sequence[Trial]) -> Iterator[Record]:
    sentences = P.load_sentences()

    def make(t: Trial):
        sentence = sentences[t.param("sentence")]
        convs, answer = _convs(ctx, t, sentence)
        allow = ("user",) if t.variant == "mc" else ()  # MC lists the target among its options
        ps = [common.render_checked(ctx, c, no_leak=[t.word], allow_in=allow) for c in convs]
        eff, specs = 0.0, [None] * len(ps)
        if t.condition == "injected":
            pairs = [common.spec_for(ctx, t, p.positions(P.SENTENCE_MARK)) for p in ps]
            specs, eff = [s for s, _ in pairs], pairs[0][1]
        return ps, specs, (sentence, eff, answer)

    for r in common.execute_generation(ctx, trials, make, chunk=2):
        t, ps, texts = r.trial, r.prompts, [g.text for g in r.gens]
        sentence, eff, answer = r.extra
        if t.variant == "mc":
            grade = grade_task_B(None, None, t.word, sentence, parse_choice(texts[0]), answer, asked=())
        elif t.variant == "seed":
            grade = grade_task_B(parse_task_B(texts[0])[0], parse_task_B(texts[1])[1], t.word, sentence,
                                 asked=("thought", "repeat"))
        else:
            grade = grade_task_B(parse_thought_free(texts[0]), texts[1].strip(), t.word, sentence,
                                 asked=("thought", "repeat"))
        yield ctx.record(
            t, injected=t.condition == "injected", alpha_effective=eff, prompt="\n----\n".join(p.text for p in ps),
            response="\n----\n".join(texts), grade=grade, gen=common.gen_info(ctx),
            token_positions=ps[0].positions(P.SENTENCE_MARK) if t.condition == "injected" else None,
            extra={"sentence": sentence, **({"mc_answer": answer} if answer else {})},
        )


register(TaskSpec("B", "Thoughts vs text: name the injected concept while repeating the sentence intact", plan, execute))
