"""Task D — intentional control (seed §6D; Lindsey 2025 "intentional control of internal states").

The model is told to write a sentence while thinking (or not thinking) about a word; the
assistant turn is the sentence itself, teacher-forced, so both conditions read activations over
identical tokens and only the instruction differs. One cached forward pass per batch reads
``hook_resid_post`` at every layer; the score per layer is the mean cosine between the residual
over the sentence tokens and the word's concept vector. The control band uses the same
activations against the baseline words' vectors (words the instruction never named).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch

from introspect import prompts as P
from introspect.records import Record
from introspect.tasks.base import RunContext, TaskSpec, Trial, register
from introspect.tasks.injection.common import (
    pick_concepts,
    render_checked,
    sentence_param,
    variants,
)
from introspect.vectors import residuals

VARIANTS = ("plain", "rewarded", "punished")


def plan(ctx: RunContext) -> list[Trial]:
    concepts = pick_concepts(ctx)
    out: list[Trial] = []
    for v in variants(ctx, VARIANTS, ("plain",)):
        for word in concepts:
            for i in range(ctx.cfg.n_trials):
                s = (sentence_param(concepts, word, i),)
                out += [Trial("D", c, i, None, 0.0, word, v, s) for c in ("think", "dont_think")]
    return out


def _control_words(ctx: RunContext) -> list[str]:
    n = int(ctx.cfg.option("n_control_words", 100))
    return list(P.load_words(ctx.cfg.words_file).baseline[:n])


def execute(ctx: RunContext, trials: Sequence[Trial]) -> Iterator[Record]:
    sentences = P.load_sentences()
    layers = list(range(ctx.model.cfg.n_layers))
    controls = _control_words(ctx)
    ctx.vectors.ensure([*{t.word for t in trials}, *controls], layers)
    ctrl = torch.stack([torch.stack([ctx.vectors.get(w, la).vector for la in layers]) for w in controls])  # c l d
    for lo in range(0, len(trials), ctx.cfg.batch_size):
        chunk = trials[lo:lo + ctx.cfg.batch_size]
        prompts = []
        for t in chunk:
            incentive = None if t.variant == "plain" else t.variant
            conv = P.task_d(sentences[t.param("sentence")], t.word, t.condition, incentive)
            prompts.append(render_checked(ctx, conv, no_leak=[t.word], allow_in=("user",)))
        spans = [p.positions(P.TASK_D_MARK) for p in prompts]
        acts = residuals(ctx.model, prompts, layers, positions=spans, batch_size=ctx.cfg.batch_size)
        for t, p, span, a in zip(chunk, prompts, spans, acts):  # a: [layers, tokens, d]
            unit = a / a.norm(dim=-1, keepdim=True).clamp_min(1e-12)
            v = torch.stack([ctx.vectors.get(t.word, la).vector for la in layers])  # l d
            cos = torch.einsum("ltd,ld->lt", unit, v).mean(-1)
            cos_ctrl = torch.einsum("ltd,cld->clt", unit, ctrl).mean(-1)  # c l
            grade = {"layers": layers, "cos": cos.tolist(), "cos_ctrl": cos_ctrl.mean(0).tolist(),
                     "cos_ctrl_sd": cos_ctrl.std(0).tolist()}
            yield ctx.record(t, prompt=p.text, response=sentences[t.param("sentence")], grade=grade,
                             token_positions=span, gen={"teacher_forced": True},
                             extra={"sentence": sentences[t.param("sentence")], "n_control_words": len(controls)})


register(TaskSpec("D", "Intentional control: cosine of activations with the concept, think vs don't think", plan, execute,
                  uses_injection=False))
