"""Task B — thoughts vs text (seed §6B; Lindsey 2025 "distinguishing thoughts from text").

The concept is injected only on the tokens of a natural sentence. The model is asked what word
it thinks about (the injected concept should come out) and, in a separate prompt with the same
injection, to repeat the sentence (the text should come out intact). One record holds both
answers, so strict success — both right — is per trial. ``mc`` asks for the concept among 10
numbered options (chance 10%). Controls: the same prompts without injection and the same sample
streams, planned per (concept, sentence, sample) since they do not depend on layer or α; each
injected answer is paired with the control it matches.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence

from introspect.grading import (
    coherence,
    cut_at_next_turn,
    grade_task_B,
    parse_choice,
    parse_task_B,
    parse_thought_free,
)
from introspect.records.jsonl import Record
from introspect.tasks import prompts as P
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
    return common.with_samples(ctx, out)


def _mc(ctx: RunContext, t: Trial) -> tuple[list[str], int]:
    words = P.load_words(ctx.cfg.words_file)
    rng = random.Random(f"{ctx.cfg.seed}:{t.word}:{t.index}")
    return P.mc_options(t.word, [w for w in words.targets if w != t.word], rng)


def _convs(ctx: RunContext, t: Trial, sentence: str):
    """The trial's prompts, their few-shot kinds, and the MC answer (None for the free forms)."""
    v = common.base_variant(t)
    if v == "mc":
        options, answer = _mc(ctx, t)
        return [P.task_b_mc(sentence, options)], ["B-mc"], answer
    return [build(sentence) for build in PARTS[v]], [f"B-{v}-thought", f"B-{v}-repeat"], None


def execute(ctx: RunContext, trials: Sequence[Trial]) -> Iterator[Record]:
    sentences = P.load_sentences()

    def make(t: Trial):
        sentence = sentences[t.param("sentence")]
        convs, kinds, answer = _convs(ctx, t, sentence)
        allow = ("user",) if answer else ()  # MC lists the target among its options
        ps = [common.render_trial(ctx, t, c, k, no_leak=[t.word], allow_in=allow) for c, k in zip(convs, kinds)]
        injs = [common.spec_for(ctx, t, p, p.positions(P.SENTENCE_MARK)) for p in ps] if t.condition == "injected" else []
        specs = [i.spec for i in injs] or [None] * len(ps)
        return ps, specs, (sentence, injs[0] if injs else None, answer)

    for r in common.execute_generation(ctx, trials, make, chunk=2):
        t, ps, texts = r.trial, r.prompts, [cut_at_next_turn(g.text) for g in r.gens]
        sentence, inj, answer = r.extra
        v = common.base_variant(t)
        if v == "mc":
            grade = grade_task_B(None, None, t.word, sentence, parse_choice(texts[0]), answer, asked=())
        elif v == "seed":
            grade = grade_task_B(parse_task_B(texts[0])[0], parse_task_B(texts[1])[1], t.word, sentence,
                                 asked=("thought", "repeat"))
        else:
            grade = grade_task_B(parse_thought_free(texts[0]), texts[1].strip(), t.word, sentence,
                                 asked=("thought", "repeat"))
        grade["coherent"] = all(coherence(x).coherent for x in texts)
        yield ctx.record(
            t, injected=inj is not None, alpha_effective=inj.effective if inj else 0.0,
            prompt="\n----\n".join(p.text for p in ps), response="\n----\n".join(g.text for g in r.gens),
            grade=grade, gen=common.gen_info(ctx, r.gens[0]),
            token_positions=ps[0].positions(P.SENTENCE_MARK) if inj else None,
            extra={"sentence": sentence, **({"mc_answer": answer} if answer else {}),
                   **({"alpha_as": inj.alpha_as} if inj else {})},
        )


register(TaskSpec("B", "Thoughts vs text: name the injected concept while repeating the sentence intact", plan, execute))
