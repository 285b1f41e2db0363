"""General ability items for the Rasch fit (002 App. A): a multiple-choice file answered once.

Why a task of its own: 002 correlates self-knowledge with abilities taken from benchmarks the
self-knowledge experiments never used. Estimating abilities from the Delegate Game's or the
difficulty task's own questions would correlate two readings of the same items' noise. This
task answers an independent question file (``--option ability_items=PATH``, its own key so that
a run's ``questions`` for the game never doubles as the ability set: a path, or ``mmlu200``, the
MMLU items of openai/evals found in ``--data-dir`` or fetched and checked by ``data.fetch``) and
records, per item,
whether the letter with the most probability at a prefilled "Answer:" is the right one (0/1:
what conditional ML needs), P(correct) and the mass on the letters. ``experiments.rasch`` fits
the abilities from these records only.

With ``--option cloze=true`` (on in the self-knowledge presets) each item is also read without
letters (``cloze.py``: each option's text scored as the answer to the bare question), recorded
beside the letter reading as ``cloze_*`` with its own accuracy row; the letter reading, and
what ``experiments.rasch`` fits, are unchanged.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from functools import lru_cache
from pathlib import Path

from introspect.data import DataError, MCQuestion, load_questions
from introspect.data.fetch import resolve
from introspect.records.jsonl import Record
from introspect.tasks import fewshot
from introspect.tasks.base import ConfigError, RunContext, TaskSpec, Trial, register
from introspect.tasks.selfknowledge.cloze import cloze, cloze_on
from introspect.tasks.selfknowledge.common import (
    PREFILL,
    _opt,
    decisions,
    fmt_variant,
    letter_ids,
    prompt_format,
    rendered,
    user,
)
from introspect.tasks.selfknowledge.parse import parse_letter

PROMPT = "Answer the following question.\n\n{q}\nReply with one letter."
fewshot.register("ability-mc", "ABCD", fewshot.mc_examples(PROMPT))


@lru_cache(maxsize=4)
def _items(source: str) -> tuple[str, tuple[MCQuestion, ...]]:
    qs = [q for q in load_questions(source) if isinstance(q, MCQuestion)]
    if not qs:
        raise DataError(f"{source}: no multiple-choice questions; expected an MMLU JSONL, "
                        "hendrycks or GPQA CSV file")
    return Path(source).stem, tuple(qs)


def _source(ctx: RunContext) -> str:
    src = _opt(ctx, "ability_items", None)
    if not src:
        raise ConfigError("task ability needs --option ability_items=PATH (a multiple-choice file no "
                          "self-knowledge task uses) or ability_items=mmlu200 (with --data-dir DIR or a download)")
    return str(resolve(str(src), _opt(ctx, "data_dir", None)))


def plan(ctx: RunContext) -> list[Trial]:
    stem, qs = _items(_source(ctx))
    order = list(range(len(qs)))
    random.Random(f"ability:{ctx.cfg.seed}").shuffle(order)
    n = int(_opt(ctx, "ability_n", len(qs)))
    return [Trial("ability", "clean", index=i, variant=fmt_variant(ctx, stem), params=(("qid", qs[i].id),))
            for i in sorted(order[:n])]


def execute(ctx: RunContext, trials: Sequence[Trial]) -> Iterator[Record]:
    trials = list(trials)
    if not trials:
        return
    stem, qs = _items(_source(ctx))
    by_id = {q.id: q for q in qs}
    items = [by_id[t.param("qid")] for t in trials]
    letters = "ABCDEFGH"[:max(len(q.options) for q in items)]
    prompts = rendered(ctx, [user(PROMPT.format(q=q.format()), prefill=PREFILL) for q in items], "ability-mc")
    dec, gens = decisions(ctx, prompts, letter_ids(ctx.model.tokenizer, letters))
    cl = cloze(ctx, items) if cloze_on(ctx) else [{} for _ in items]
    for t, q, p, d, g, c in zip(trials, items, prompts, dec, gens, cl):
        text = parse_letter(g.text, letters[:len(q.options)])
        grade = {"qid": q.id, "source": stem, "answer": q.answer, "topic": q.topic,
                 "correct": bool(d and d.choice == q.answer), "p_correct": d.p(q.answer) if d else None,
                 "choice": d.choice if d else None, "mass": d.mass if d else None,
                 "low_mass": bool(d and d.low_mass), "text_choice": text, "parse_ok": text is not None,
                 "text_correct": text == q.answer}
        extra = {"cloze_prompt": c.pop("cloze_prompt")} if c else {}
        yield ctx.record(t, prompt=p.text, response=g.text, grade={**grade, **c}, extra=extra,
                         gen={"format": prompt_format(ctx), **ctx.decode_batch(g)})


def summarize_ability(df):
    """Accuracy (logit argmax and parsed text) with the argmax's modal-letter rate beside it (a
    model answering "A" everywhere scores the share keyed A, and its ability is that letter
    prior), mean P(correct), mass and parse rates; where records carry a cloze reading,
    ``cloze_accuracy`` (per character) over those items, the summed and per-token readings and
    how often cloze and letter pick the same option (``cloze_letter_agreement``)."""
    import numpy as np

    from introspect.stats.intervals import bootstrap_mean
    from introspect.tasks.selfknowledge.rows import (
        b,
        frame,
        g,
        groups,
        modal_letter,
        num,
        prop,
        row,
    )

    rows: list[dict] = []
    for keys, s in groups(df):
        n = len(s)
        rows += prop(keys, "accuracy", b(s, "correct").sum(), n)
        rows += modal_letter(keys, "modal_letter_rate", g(s, "choice", ""))
        rows += prop(keys, "text_accuracy", b(s, "text_correct").sum(), n)
        rows += prop(keys, "text_parse_rate", b(s, "parse_ok").sum(), n)
        rows += prop(keys, "low_mass_rate", b(s, "low_mass").sum(), n)
        rows += _cloze_rows(keys, s)
        pc = num(s, "p_correct")
        if np.isfinite(pc).any():
            rows.append(row(keys, "mean_p_correct", bootstrap_mean(pc), int(np.isfinite(pc).sum())))
    return frame(rows)


def _cloze_rows(keys, s):
    """Cloze rows over the items that have a cloze reading (none without one)."""
    from introspect.tasks.selfknowledge.rows import b, g, prop

    sub = s[g(s, "cloze_choice").notna().to_numpy()]
    n = len(sub)
    rows = prop(keys, "cloze_accuracy", b(sub, "cloze_correct").sum(), n)
    for name in ("sum", "token"):
        rows += prop(keys, f"cloze_accuracy_{name}", b(sub, f"cloze_correct_{name}").sum(), n)
    same = (g(sub, "cloze_choice") == g(sub, "choice")).to_numpy().sum()
    return rows + prop(keys, "cloze_letter_agreement", same, n)


register(TaskSpec("ability", "General-ability items for the Rasch fit (002 App. A): an independent "
                  "multiple-choice file answered once, correctness from the logits",
                  plan, execute, uses_injection=False))
