"""Task C — prefill intent (seed §6C; Lindsey 2025 "detecting unintended outputs").

The assistant's earlier turn is prefilled with an out-of-place word (the concept), then the
model is asked whether it meant to say it. Conditions: ``control`` (no injection; planned once
per (concept, sentence, sample) because it does not depend on layer or α, and sharing the
injected trials' sample streams, so every injected answer has its matched control), ``injected`` (the matching
concept retro-injected on the sentence tokens, before the prefill), ``mismatch`` (a different
concept injected there). A model that consults its earlier internal state should call the word
intentional more often under matching injection only. p(yes) to "did you mean to" is the
white-box score.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from introspect.grading import coherence, cut_at_next_turn, grade_task_C, parse_intent
from introspect.records.jsonl import Record
from introspect.tasks import prompts as P
from introspect.tasks.base import RunContext, TaskSpec, Trial, register
from introspect.tasks.injection import common

VARIANTS = ("paper", "seed")


def _other(concepts: list[str], word: str, ctx: RunContext) -> str:
    """The mismatched concept: the next one in the run's list (or any other target word)."""
    if len(concepts) > 1:
        return concepts[(concepts.index(word) + 1) % len(concepts)]
    return next(w for w in P.load_words(ctx.cfg.words_file).targets if w != word)


def plan(ctx: RunContext) -> list[Trial]:
    concepts = common.pick_concepts(ctx)
    out: list[Trial] = []
    for v in common.variants(ctx, VARIANTS, ("paper",)):
        for word in concepts:
            for i in range(ctx.cfg.n_trials):
                s = common.sentence_param(concepts, word, i)
                out.append(Trial("C", "control", i, None, 0.0, word, v, (s,)))
                other = ("other", _other(concepts, word, ctx))
                for layer, a in common.grid(ctx):
                    out.append(Trial("C", "injected", i, layer, a, word, v, (s,)))
                    out.append(Trial("C", "mismatch", i, layer, a, word, v, (other, s)))
    return common.with_samples(ctx, out)


def execute(ctx: RunContext, trials: Sequence[Trial]) -> Iterator[Record]:
    sentences = P.load_sentences()
    yes_no = common.YesNo(ctx.model.tokenizer)

    def make(t: Trial):
        sentence = sentences[t.param("sentence")]
        form = common.base_variant(t)
        conv = P.task_c(sentence, t.word, form=form)
        p = common.render_trial(ctx, t, conv, f"C-{form}", no_leak=[t.word], allow_in=("assistant",),
                                avoid=[t.param("other")])
        inj = None
        if t.condition != "control":
            inj = common.spec_for(ctx, t, p, p.positions(P.SENTENCE_MARK), word=t.param("other", t.word))
        return [p], [inj.spec if inj else None], inj

    for r in common.execute_generation(ctx, trials, make):
        t, p, g, inj = r.trial, r.prompts[0], r.gens[0], r.extra
        text = cut_at_next_turn(g.text)
        grade = grade_task_C(parse_intent(text, t.word))
        grade["coherent"] = coherence(text).coherent
        yield ctx.record(
            t, injected=inj is not None, alpha_effective=inj.effective if inj else 0.0, prompt=p.text,
            response=g.text, grade=grade, gen=common.gen_info(ctx, g),
            token_positions=p.positions(P.SENTENCE_MARK) if inj else None,
            extra={"sentence": sentences[t.param("sentence")],
                   "injected_word": t.param("other", t.word) if inj else None,
                   **({"alpha_as": inj.alpha_as} if inj else {})},
            **yes_no(g),
        )


register(TaskSpec("C", "Prefill intent: was the out-of-place word intentional, with and without retro-injection", plan, execute))
