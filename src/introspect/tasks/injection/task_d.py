"""Task D — intentional control (seed §6D; Lindsey 2025 "intentional control of internal states").

The model is told to write a sentence while thinking (or not thinking) about a word; the
assistant turn is the sentence itself, teacher-forced, so both conditions read activations over
identical tokens and only the instruction differs. One cached forward pass per batch reads
``hook_resid_post`` at every layer; the score per layer is the mean cosine between the residual
over the sentence tokens and the word's concept vector, on raw residuals and on residuals
centred by the baseline prompts' mean (the mean every concept vector subtracts), which removes
the large shared component that makes raw cosines all alike.

Pairs: ``plain`` think vs don't-think, and Lindsey's incentive pair (``incentive`` variant:
"if you think about X you will be rewarded" vs "... punished"). The control band scores the
same activations against *unrelated concept* vectors (target words not in this run), which, unlike
the baseline words' vectors (they sum to ≈0 by construction), are real concept directions.
Each unrelated word's cosines are recorded (``cos_ctrl_words``), so the band can be the spread
of single unrelated concepts, not the interval of their average.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch

from introspect.engine.vectors import residuals
from introspect.records.jsonl import Record
from introspect.tasks import prompts as P
from introspect.tasks.base import RunContext, TaskSpec, Trial, register
from introspect.tasks.injection.common import (
    pick_concepts,
    render_checked,
    sentence_param,
    variants,
)

VARIANTS = ("plain", "incentive")
CONDITIONS = {"plain": ("think", "dont_think"), "incentive": ("rewarded", "punished")}


def plan(ctx: RunContext) -> list[Trial]:
    concepts = pick_concepts(ctx)
    out: list[Trial] = []
    for v in variants(ctx, VARIANTS, VARIANTS, answered=False):  # teacher-forced: no answer format
        for word in concepts:
            for i in range(ctx.cfg.n_trials):
                s = (sentence_param(concepts, word, i),)
                out += [Trial("D", c, i, None, 0.0, word, v, s) for c in CONDITIONS[v]]
    return out  # teacher-forced: nothing is sampled, so one record per trial


def _control_words(ctx: RunContext) -> list[str]:
    """Unrelated concepts: target words not among this run's concepts (at most n_control_words)."""
    n = int(ctx.cfg.option("n_control_words", 20))
    run = set(pick_concepts(ctx))
    return [w for w in P.load_words(ctx.cfg.words_file).targets if w not in run][:n]


def _conv(t: Trial, sentence: str):
    if t.variant == "incentive":
        return P.task_d(sentence, t.word, "think", t.condition)
    return P.task_d(sentence, t.word, t.condition, None)


def cosine_grade(acts: torch.Tensor, v: torch.Tensor, ctrl: torch.Tensor, centre: torch.Tensor,
                 layers: list[int]) -> dict:
    """One prompt's grade: the mean cosine of its residuals ``acts`` [layers, tokens, d] with the
    concept's vectors ``v`` [l, d] and with each control word's ``ctrl`` [c, l, d], on raw
    residuals and on residuals centred by the baseline mean ``centre`` [l, d]. Shared with the
    Inspect readout, so the two cannot drift apart."""
    grade: dict = {"layers": layers}
    for tag, x in (("", acts), ("_centred", acts - centre[:, None, :])):
        unit = x / x.norm(dim=-1, keepdim=True).clamp_min(1e-12)
        cos = torch.einsum("ltd,ld->lt", unit, v).mean(-1)
        cos_ctrl = torch.einsum("ltd,cld->clt", unit, ctrl).mean(-1)  # c l
        grade.update({f"cos{tag}": cos.tolist(), f"cos_ctrl{tag}": cos_ctrl.mean(0).tolist(),
                      f"cos_ctrl_sd{tag}": cos_ctrl.std(0).tolist(),
                      f"cos_ctrl_words{tag}": [[round(float(y), 6) for y in w] for w in cos_ctrl]})
    return grade


def execute(ctx: RunContext, trials: Sequence[Trial]) -> Iterator[Record]:
    sentences = P.load_sentences()
    layers = list(range(ctx.model.cfg.n_layers))
    controls = _control_words(ctx)
    ctx.vectors.ensure([*{t.word for t in trials}, *controls], layers)
    ctrl = torch.stack([torch.stack([ctx.vectors.get(w, la).vector for la in layers]) for w in controls])  # c l d
    centre = ctx.vectors.baseline_mean(layers)  # l d
    for lo in range(0, len(trials), ctx.cfg.batch_size):
        chunk = trials[lo:lo + ctx.cfg.batch_size]
        prompts = []
        for t in chunk:
            conv = _conv(t, sentences[t.param("sentence")])
            prompts.append(render_checked(ctx, conv, no_leak=[t.word], allow_in=("user",)))
        spans = [p.positions(P.TASK_D_MARK) for p in prompts]
        acts = residuals(ctx.model, prompts, layers, positions=spans, batch_size=ctx.cfg.batch_size)
        for t, p, span, a in zip(chunk, prompts, spans, acts):  # a: [layers, tokens, d]
            v = torch.stack([ctx.vectors.get(t.word, la).vector for la in layers])  # l d
            grade = cosine_grade(a, v, ctrl, centre, layers)
            yield ctx.record(t, prompt=p.text, response=sentences[t.param("sentence")], grade=grade,
                             token_positions=span, gen={"teacher_forced": True},
                             extra={"sentence": sentences[t.param("sentence")], "n_control_words": len(controls),
                                    "control_words": controls})


register(TaskSpec("D", "Intentional control: cosine of activations with the concept, think vs don't think", plan, execute,
                  uses_injection=False, uses_layers=True))
