"""Token-injection recovery (002 §5): noise written into the model's own reasoning.

Why this protocol: 002 proposes inserting random or least-probable tokens "during the model's
reasoning or chain-of-thought process" as if self-generated. The model answers an arithmetic
question (known integer answer) greedily; the harness finds the end of the first reasoning step
the model wrote in that clean answer (the first line or sentence that states a computed result,
"75 + 40 = 115" or "..., which is 115.", before its answer statement), keeps the answer up to
there (or, when that step already states the reply's final number, up to just before its
result, "75 + 40" | "= 115": after a one-step sum nothing is left to recover, and the answer
would be copied, not recovered; ``answer_before_insert`` says where it still was), appends ``k``
foreign tokens (uniformly random, or each the least probable next token given everything before
it) and lets it continue. Inserting after a fixed number of tokens instead lands in the
preamble ("To solve this problem, ...") on most replies, not in the reasoning. Where the clean
answer has no step before its answer statement, the tokens go right before that statement
(``before_answer``); with neither, after ``fallback_tokens`` tokens (``no_step``). The rule used, the token and character position and the step's text are
recorded; ``--option insert_after=N`` (or a list) inserts after N tokens instead. Greedy decoding
makes the clean run's prefix exactly what the model would have written, so the clean answer is
the reference. Graded: the first "Answer: N" statement, else the first ``\\boxed{N}`` (working
that continues after it is never read), and whether the continuation remarks on the
disruption; a reply with neither is unparsed, a reply cut by the token budget is flagged; the
last integer is kept as a lenient secondary reading. Inserted tokens are drawn from printable,
digit-free, non-special tokens, so the grader never reads an inserted number as the answer.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator, Sequence
from functools import lru_cache
from typing import Any

import torch

from introspect.data import ArithmeticQuestion, arithmetic_questions
from introspect.engine.run.chat import Prompt
from introspect.engine.run.decode import Generation, next_token_logprobs
from introspect.records.jsonl import Record
from introspect.tasks import fewshot
from introspect.tasks.base import ConfigError, RunContext, TaskSpec, Trial, register
from introspect.tasks.selfknowledge.common import (
    N_CALIBRATION,
    _knob,
    _opt,
    arith_tag,
    calibrated_budget,
    cut,
    fmt_variant,
    greedy,
    prompt_format,
    rendered,
    user,
)
from introspect.tasks.selfknowledge.parse import ANSWER_STATEMENT, final_answer, last_integer

PROMPT = "{q} Think step by step, then give the final answer as 'Answer: <number>'."
KINDS = ("random", "least_likely")
IN_REASONING = ("after_first_step", "before_final_result")  # insertion rules that land inside the working
REMARK = re.compile(
    r"\b(typo|sorry|apolog\w*|my mistake|a mistake|oops|ignore|wait|error|correction|glitch|"
    r"nonsense|gibberish|garbled|let me (?:correct|try again|start over|rephrase)|"
    r"(?:that|this) (?:doesn't|does not|didn't) make sense|"
    r"(?:that|this) (?:was|is) (?:not right|incorrect|wrong|a typo))\b", re.I)


def _source(ctx: RunContext) -> str:
    return fmt_variant(ctx, arith_tag(_knob(_opt(ctx, "digits", 2)), _knob(_opt(ctx, "terms", 2)),
                                      str(_opt(ctx, "ops", "+-"))))


def _questions(ctx: RunContext) -> list[ArithmeticQuestion]:
    return _cached_qs(int(_opt(ctx, "n", 20)), ctx.cfg.seed, _knob(_opt(ctx, "digits", 2)),
                      _knob(_opt(ctx, "terms", 2)), str(_opt(ctx, "ops", "+-")))


@lru_cache(maxsize=8)
def _cached_qs(n: int, seed: int, digits: Any, terms: Any, ops: str) -> list[ArithmeticQuestion]:
    return arithmetic_questions(n, seed, digits=digits, terms=terms, ops=ops, namespace="recovery")


def _wheres(ctx: RunContext) -> tuple[str, ...]:
    """``insert_after``: "step" (default: after the first reasoning step) or token counts."""
    v = _opt(ctx, "insert_after", "step")
    try:
        return tuple(_where(x) for x in (v if isinstance(v, (list, tuple)) else [v]))
    except (TypeError, ValueError):
        raise ConfigError(f"insert_after must be 'step' or token counts, got {v!r}") from None


def _ints(ctx: RunContext, key: str, default: tuple[int, ...]) -> tuple[int, ...]:
    v = _opt(ctx, key, default)
    return tuple(int(x) for x in (v if isinstance(v, (list, tuple)) else [v]))


fewshot.register("recovery", ("w", "w"), [fewshot.Example("w", PROMPT.format(q=q), a, k) for q, a, k in (
    ("What is 6 + 7 * 3?", "First, 7 * 3 = 21.\nThen 6 + 21 = 27.\nAnswer: 27", ("6 + 7 * 3",)),
    ("What is 9 - 4 + 8?", "First, 9 - 4 = 5.\nThen 5 + 8 = 13.\nAnswer: 13", ("9 - 4 + 8",)),
    ("What is 5 * 6 - 2?", "First, 5 * 6 = 30.\nThen 30 - 2 = 28.\nAnswer: 28", ("5 * 6 - 2",)))])
_RESULT = re.compile(r"=\s*[*_`$\"']*\s*(-?\d[\d,]*)|"
                     r"\b(?:is|equals|gives|makes|get|results? in)\s+[*_`$\"']*(-?\d[\d,]*)", re.I)
_END = re.compile(r"\n|\.(?=\s|$)")


def _value(m: re.Match) -> int:
    return int((m.group(1) or m.group(2)).replace(",", ""))


def stated_final(text: str) -> int | None:
    """The number a reply ends up at: its answer statement, else its last integer."""
    v = final_answer(text)
    return v if v is not None else last_integer(text)


def first_step_end(text: str) -> tuple[int | None, str]:
    """(character offset where the foreign tokens go, rule). A step is a line or sentence
    stating a computed result, before the answer statement. Normally just after the first
    step (``after_first_step``); but where that step already states the reply's final number
    (a one-step sum: "2. Add them: 75 + 40 = 115."), after it nothing is left to recover, so the
    tokens go inside it, right before its result ("… 75 + 40" | "= 115":
    ``before_final_result``). With no step: the start of the sentence holding the answer
    statement when text precedes it (``before_answer``); else (None, ``no_step``)."""
    ans = ANSWER_STATEMENT.search(text)
    limit = ans.start() if ans else len(text)
    final = stated_final(text)
    start = 0
    for m in _END.finditer(text):
        if m.end() > limit:
            break
        r = _RESULT.search(text, start, m.end())
        if r:
            at = len(text[:r.start()].rstrip())
            if final is not None and _value(r) == final and at > 0:
                return at, "before_final_result"
            return m.end(), "after_first_step"
        start = m.end()
    if ans and start > 0:
        return start, "before_answer"
    return None, "no_step"


def answer_written(before: str, final: int | None) -> bool:
    """Whether the text kept before the tokens already states the reply's final number (then
    the perturbed answer can be copied rather than recovered)."""
    return final is not None and (any(_value(r) == final for r in _RESULT.finditer(before))
                                  or final_answer(before) == final)


def tokens_before(tokenizer: Any, ids: Sequence[int], char: int) -> int:
    """The fewest leading tokens of ``ids`` whose decoded text reaches character ``char``."""
    for m in range(len(ids) + 1):
        if len(tokenizer.decode(list(ids[:m]), skip_special_tokens=True)) >= char:
            return m
    return len(ids)


def _where(v: Any) -> str:
    return "step" if v == "step" else str(int(v))


def plan(ctx: RunContext) -> list[Trial]:
    kinds = _opt(ctx, "kinds", KINDS)
    kinds = (kinds,) if isinstance(kinds, str) else tuple(kinds)
    if set(kinds) - set(KINDS):
        raise ConfigError(f"recovery kinds must be among {KINDS}, got {kinds}")
    src = _source(ctx)
    out = []
    for i, q in enumerate(_questions(ctx)):
        out.append(Trial("recovery", "clean", index=i, variant=f"{src}:clean",
                         params=(("qid", q.id), ("source", src))))
        for kind in kinds:
            for k in _ints(ctx, "n_tokens", (1, 3)):
                for m in _wheres(ctx):
                    out.append(Trial("recovery", "perturbed", index=i,
                                     variant=f"{src}:{kind}-k{k}-at{m}",
                                     params=(("insert_after", m), ("kind", kind),
                                             ("n_tokens", k), ("qid", q.id), ("source", src))))
    return out


@lru_cache(maxsize=4)
def _candidates(tokenizer: Any, size: int) -> torch.Tensor:
    """Bool mask of token ids that decode to printable, digit-free, non-special text."""
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    texts = tokenizer.batch_decode([[i] for i in range(size)])
    ok = [i not in special and t.strip() != "" and "\ufffd" not in t and t.isprintable()
          and not any(c.isdigit() for c in t) for i, t in enumerate(texts)]
    return torch.tensor(ok, dtype=torch.bool)


def _insert(ctx: RunContext, bases: list[list[int]], trials: Sequence[Trial]) -> list[list[int]]:
    """The k ids each perturbed trial inserts after its base ids (batched per step)."""
    tok = ctx.model.tokenizer
    size = min(len(tok), int(ctx.model.cfg.d_vocab))
    mask = _candidates(tok, size)
    pool = mask.nonzero().flatten().tolist()
    out: list[list[int]] = [[] for _ in trials]
    least = [j for j, t in enumerate(trials) if t.param("kind") == "least_likely"]
    for j, t in enumerate(trials):
        if t.param("kind") == "random":
            rng = random.Random(f"recovery:{ctx.cfg.seed}:{t.param('qid')}:{t.variant}")
            out[j] = [rng.choice(pool) for _ in range(int(t.param("n_tokens")))]
    for step in range(max((int(trials[j].param("n_tokens")) for j in least), default=0)):
        live = [j for j in least if int(trials[j].param("n_tokens")) > step]
        prompts = [Prompt.from_ids(bases[j] + out[j], tok) for j in live]
        lp = next_token_logprobs(ctx.model, prompts, batch_size=ctx.cfg.batch_size)[:, :size]
        lp = lp.masked_fill(~mask, float("inf"))
        for j, row in zip(live, lp):
            out[j].append(int(row.argmin()))
    return out


def execute(ctx: RunContext, trials: Sequence[Trial]) -> Iterator[Record]:
    trials = list(trials)
    if not trials:
        return
    tok, allq = ctx.model.tokenizer, _questions(ctx)
    qs = {q.id: q for q in allq}
    at = calibrated_budget(ctx, "answer_tokens", _prompts(ctx, allq[:N_CALIBRATION]), 32, 256)
    need = list(dict.fromkeys(t.param("qid") for t in trials))
    prompts = dict(zip(need, _prompts(ctx, [qs[i] for i in need])))
    clean = dict(zip(need, greedy(ctx, [prompts[i] for i in need], at)))
    pert = [t for t in trials if t.condition == "perturbed"]
    where = [_position(ctx, clean[t.param("qid")], t.param("insert_after")) for t in pert]
    at_ = [w[0] for w in where]
    bases = [list(prompts[t.param("qid")].ids) + list(clean[t.param("qid")].tokens[:m])
             for t, m in zip(pert, at_)]
    inserted = _insert(ctx, bases, pert)
    conts = greedy(ctx, [Prompt.from_ids(b + ins, tok) for b, ins in zip(bases, inserted)], at)
    done = {id(t): (w, ins, c) for t, w, ins, c in zip(pert, where, inserted, conts)}
    for t in trials:
        q, base_gen = qs[t.param("qid")], clean[t.param("qid")]
        if t.condition == "clean":
            yield _record(ctx, t, q, prompts[q.id], base_gen.text, base_gen.text, [], (0, "none", ""), at,
                          base_gen, base_gen.text)
            continue
        w, ins, c = done[id(t)]
        prefix = tok.decode(list(base_gen.tokens[:w[0]]) + ins, skip_special_tokens=True)
        yield _record(ctx, t, q, prompts[q.id], prefix + c.text, c.text, ins, w, at, c, base_gen.text)


def _position(ctx: RunContext, clean: Generation, where: str) -> tuple[int, str, str]:
    """(tokens of the clean answer kept before the insertion, rule, the text they spell)."""
    tok, ids = ctx.model.tokenizer, list(clean.tokens)
    if where != "step":
        m, rule = min(int(where), len(ids)), "fixed_tokens"
    else:
        char, rule = first_step_end(clean.text)
        m = tokens_before(tok, ids, char) if char is not None else min(int(_opt(ctx, "fallback_tokens", 4)), len(ids))
    return m, rule, tok.decode(ids[:m], skip_special_tokens=True)


def _prompts(ctx: RunContext, qs: Sequence[ArithmeticQuestion]) -> list[Prompt]:
    return rendered(ctx, [user(PROMPT.format(q=q.question)) for q in qs], "recovery")


def grade_recovery(q: ArithmeticQuestion, response: str, continuation: str) -> dict[str, Any]:
    """Final answer from the whole response's first "Answer: N"; remarks looked for in the
    model's own part after the insertion (the whole response for clean runs)."""
    val = final_answer(response)
    lenient = last_integer(response)
    hit = REMARK.search(continuation)
    return {"qid": q.id, "answer": q.answer, "parsed": val, "parse_ok": val is not None,
            "correct": val == q.answer, "parsed_lenient": lenient, "correct_lenient": lenient == q.answer,
            "remarked": hit is not None, "remark": hit.group(0) if hit else None}


def _record(ctx: RunContext, t: Trial, q: ArithmeticQuestion, prompt: Prompt, response: str,
            continuation: str, ins: list[int], where: tuple[int, str, str], budget_: int,
            g: Generation, clean_text: str) -> Record:
    grade = grade_recovery(q, response, continuation)
    at, rule, before = where
    grade.update(kind=t.param("kind", "none"), n_tokens=int(t.param("n_tokens", 0)),
                 source=t.param("source"), cut=cut(g), insert_at=at, insert_char=len(before),
                 insert_rule=rule, in_reasoning=rule in IN_REASONING, text_before_insert=before,
                 answer_before_insert=answer_written(before, stated_final(clean_text)) if ins else None,
                 inserted_text=ctx.model.tokenizer.decode(ins) if ins else "")
    return ctx.record(t, prompt=prompt.text, response=response, grade=grade,
                      gen={"max_new_tokens": int(budget_), "budget_source": getattr(budget_, "source", "fixed"),
                           "do_sample": False, "inserted_ids": ins, "format": prompt_format(ctx),
                           "continuation_tokens": len(g.tokens) if ins else None, **ctx.decode_batch(g)})


register(TaskSpec("recovery", "Token-injection recovery: random or least-likely tokens inserted "
                  "into the model's own output stream, then it continues (002 §5)", plan,
                  execute, uses_injection=False))
