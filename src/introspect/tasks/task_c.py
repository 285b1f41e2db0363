"""Task C — prefill intent (seed §6C; Lindsey 2025 "detecting unintended outputs").

The assistant's earlier turn is prefilled with an out-of-place word (the concept), then the
model is asked whether it meant to say it. Conditions: ``control`` (no injection; planned once
per (concept, sentence) because it does not depend on layer or α), ``injected`` (the matching
concept retro-injected on the sentence tokens, before the prefill), ``mismatch`` (a different
concept injected there). A model that consults its earlier internal state should call the word
intentional more often under matching injection only. p(yes) to "did you mean to" is the
white-box score.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from introspect import prompts as P
from introspect.grading import grade_task_C, parse_intent
from introspect.records import Record
from introspect.tasks.base import RunContext, TaskSpec, Trial, register
from introspect.tasks.common import (
    YesNo,
    gen_info,
    grid,
    pick_concepts,
    render_checked,
    run_batch,
    sentence_param,
    spec_for,
    variants,
)

VARIANTS = ("paper", "seed")


def _other(concepts: list[str], word: str, ctx: RunContext) -> str:
    """The mismatched concept: the next one in the run's list (or any other target word)."""
    if len(concepts) > 1:
        return concepts[(concepts.index(word) + 1) % len(concepts)]
    return next(w for w in P.load_words(ctx.cfg.words_file).targets if w != word)


def plan(ctx: RunContext) -> list[Trial]:
    concepts = pick_concepts(ctx)
    out: list[Trial] = []
    for v in variants(ctx, VARIANTS, ("paper",)):
        for word in concepts:
            for i in range(ctx.cfg.n_trials):
                s = sentence_param(concepts, word, i)
                out.append(Trial("C", "control", i, None, 0.0, word, v, (s,)))
                other = ("other", _other(concepts, word, ctx))
                for layer, a in grid(ctx):
                    out.append(Trial("C", "injected", i, layer, a, word, v, (s,)))
                    out.append(Trial("C", "mismatch", i, layer, a, word, v, (other, s)))
    return out


def execute(ctx: RunContext, trials: Sequence[Trial]) -> Iterator[Record]:
    sentences = P.load_sentences()
    yes_no = YesNo(ctx.model.tokenizer)
    for lo in range(0, len(trials), ctx.cfg.batch_size * 4):
        chunk = trials[lo:lo + ctx.cfg.batch_size * 4]
        prompts, specs, effs = [], [], []
        for t in chunk:
            sentence = sentences[t.param("sentence")]
            p = render_checked(ctx, P.task_c(sentence, t.word, form=t.variant), no_leak=[t.word], allow_in=("assistant",))
            spec, eff = None, 0.0
            if t.condition != "control":
                spec, eff = spec_for(ctx, t, p.positions(P.SENTENCE_MARK), word=t.param("other", t.word))
            prompts.append(p)
            specs.append(spec)
            effs.append(eff)
        for t, p, spec, eff, g in zip(chunk, prompts, specs, effs, run_batch(ctx, prompts, specs)):
            yield ctx.record(
                t, injected=spec is not None, alpha_effective=eff, prompt=p.text, response=g.text,
                grade=grade_task_C(parse_intent(g.text)), gen=gen_info(ctx),
                token_positions=p.positions(P.SENTENCE_MARK) if spec is not None else None,
                extra={"sentence": sentences[t.param("sentence")], "injected_word": t.param("other", t.word) if spec else None},
                **yes_no(g),
            )


register(TaskSpec("C", "Prefill intent: was the out-of-place word intentional, with and without retro-injection", plan, execute))
