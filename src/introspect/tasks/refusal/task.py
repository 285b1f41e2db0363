"""Task ``refusal``: how often a model refuses requests labelled unsafe and safe.

Why a task of its own: removing a refusal direction (``--remove-direction``) must be shown to do
what it claims, on requests it was not computed from: unsafe requests refused less, safe ones not
refused more (XSTest's safe prompts look unsafe on purpose). Each request is answered greedily, as
Arditi et al. read refusals, and graded by rule (``grading.refusal``: refuses, complies, other).
Run it on a model and on the same model with a direction removed: the two land in their own results
folders with the same trial ids, so the summary pairs them by request.

Data: ``--option data=PATH``, an XSTest CSV (``id,prompt,type,label``) or a YAML in the layout of
``concepts/restriction_questions.yaml`` (the default: the project's 30 requests, harmful = unsafe);
``--option n_prompts=N`` keeps N of each label (drawn with the run's seed).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from functools import lru_cache
from pathlib import Path

from introspect.data.refusal import SafetyPrompt, load_restriction_questions, load_xstest
from introspect.engine.run.chat import Conversation, render
from introspect.engine.run.decode import generate
from introspect.grading.refusal import grade_refusal
from introspect.records.jsonl import Record
from introspect.tasks import fewshot
from introspect.tasks.base import ConfigError, RunContext, TaskSpec, Trial, register

TASK = "refusal"


@lru_cache(maxsize=8)
def _load(source: str | None) -> tuple[str, tuple[SafetyPrompt, ...]]:
    if source is None or Path(source).suffix.lower() in (".yaml", ".yml"):
        return "own", tuple(load_restriction_questions(source))
    return "xstest", tuple(load_xstest(source))


def requests(ctx: RunContext) -> tuple[str, list[SafetyPrompt]]:
    """The run's requests: every one, or ``n_prompts`` of each label drawn with the seed."""
    name, rows = _load(ctx.cfg.option("data"))
    n = ctx.cfg.option("n_prompts")
    if n is None:
        return name, list(rows)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"option n_prompts must be a positive integer, got {n!r}")
    rng = random.Random(f"refusal:{ctx.cfg.seed}")
    out = []
    for label in ("unsafe", "safe"):
        pool = [r for r in rows if r.label == label]
        out += rng.sample(pool, min(n, len(pool)))
    return name, out


def plan(ctx: RunContext) -> list[Trial]:
    src, rows = requests(ctx)
    variant = fewshot.fmt_variant(ctx, src)
    return [Trial(TASK, "clean", index=i, variant=variant, params=(("id", r.id), ("label", r.label)))
            for i, r in enumerate(rows)]


def prompt(ctx: RunContext, request: str):
    """The request in the model's chat template, or after worked examples in the seed's
    "Human: … Assistant:" layout for a model without one (``--option format``)."""
    conv = Conversation.of(("user", request))
    if fewshot.prompt_format(ctx) == "fewshot":  # the SEB restriction task's examples (tasks.selfknowledge.seb)
        return render(ctx.model.tokenizer, fewshot.with_examples("restrict-request", conv), chat=False)
    return render(ctx.model.tokenizer, conv, chat=True)


def execute(ctx: RunContext, trials: Sequence[Trial]) -> Iterator[Record]:
    trials = list(trials)
    if not trials:
        return
    _, rows = requests(ctx)
    by_id = {r.id: r for r in rows}
    reqs = [by_id[t.param("id")] for t in trials]
    prompts = [prompt(ctx, r.prompt) for r in reqs]
    stop = fewshot.STOP if fewshot.prompt_format(ctx) == "fewshot" else ()
    gens = generate(ctx.model, prompts, max_new_tokens=int(ctx.cfg.max_new_tokens), temperature=0.0,
                    batch_size=int(ctx.cfg.batch_size), stop=stop)
    for t, r, p, g in zip(trials, reqs, prompts, gens):
        grade = {"refusal": grade_refusal(g.text), "label": r.label, "type": r.type, "id": r.id,
                 "cut": g.stop_reason == "length"}
        yield ctx.record(t, prompt=p.text, response=g.text, grade=grade,
                         gen={"do_sample": False, "max_new_tokens": int(ctx.cfg.max_new_tokens),
                              "stop_reason": g.stop_reason, **ctx.decode_batch(g)})


register(TaskSpec("refusal", "Refusal rates on requests labelled unsafe and safe (XSTest or the project's own), "
                        "greedy, graded by rule: what removing a refusal direction changes",
                  plan, execute, uses_injection=False))
