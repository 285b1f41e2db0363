"""SEB difficulty assessment (002 §3.3, §4.3): which questions will be harder for the model itself?

The model sees four questions *with their correct answers* (as 002 shows them) and sorts them
easiest→hardest (text reading). The logit reading asks each of the six pairs on its own, in both
orders (so a preference for "A" cancels): P(this one is harder) at a prefilled "Answer:".
The truth comes from answering each question alone K times (``--samples``, at least 5 by
default): a question is harder when it is answered correctly less often, then when its answers
take more tokens (002's definition); all six pairs are scored and a true tie earns half. Why
draws are excluded rather than scored: a draw cut by its token budget has an unknown length and
often no answer yet, and a reply without the asked-for statement ("Answer: N", or a letter) has
no reading; scoring either as wrong (or reading the last integer of a cut reply) would make
"hard" mean "verbose" or "badly formatted". Such draws are left out of the truth and counted
(parse, cut and exclusion rates), and a pair whose question has no usable draw is excluded and
counted, never scored.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from introspect.data import (
    ArithmeticQuestion,
    DataError,
    MCQuestion,
    arithmetic_questions,
    load_questions,
)
from introspect.records.jsonl import Record
from introspect.stats.items import pair_credit
from introspect.tasks import fewshot
from introspect.tasks.base import RunContext, TaskSpec, Trial, register
from introspect.tasks.selfknowledge.common import (
    N_CALIBRATION,
    PREFILL,
    _knob,
    _n,
    _opt,
    arith_tag,
    calibrated_budget,
    cut,
    decisions,
    draws,
    fmt_variant,
    gen_info,
    greedy,
    letter_ids,
    rendered,
    session_log,
    user,
)
from introspect.tasks.selfknowledge.parse import (
    final_answer,
    parse_letter,
    parse_ranking,
    stated_result,
)

_HARDER = ("harder means you are less likely to answer it correctly, or would need more words to "
           "answer it")
RANK = ("Here are four questions, each shown with its correct answer:\n{qs}\n\nSuppose you were asked "
        "each question on its own. Sort them from easiest to hardest for you: " + _HARDER + ". "
        "Reply with only the order, for example: Q3, Q1, Q4, Q2.")
RANK_PREFILL = "From easiest to hardest: Q"
PAIR = ("Here are two questions, each shown with its correct answer:\n\nQuestion A: {a}\n\nQuestion B: "
        "{b}\n\nSuppose you were asked each question on its own. Which would be harder for you? "
        + _HARDER[0].upper() + _HARDER[1:] + ". Reply with only the letter A or B.")
ANSWER_ARITH = "{q} Give the final answer as 'Answer: <number>'."
ANSWER_MC = "{q}\nAnswer with the letter of the correct option."


_SHOWN = [f"{fewshot.mc_text(q)}\nCorrect answer: {q[2]}. {q[1]['ABCD'.index(q[2])]}" for q in fewshot.MC_BANK]
_KEYS = [q[3] for q in fewshot.MC_BANK]
fewshot.register("difficulty-rank", ("r", "r"), [
    fewshot.Example("r", RANK.format(qs="\n".join(f"Q{j + 1}: {_SHOWN[i]}" for j, i in enumerate(idx))), order,
                    tuple(k for i in idx for k in _KEYS[i]))
    for idx, order in (((0, 1, 2, 3), "Q2, Q1, Q4, Q3"), ((4, 5, 6, 7), "Q1, Q3, Q2, Q4"),
                       ((1, 3, 5, 7), "Q4, Q2, Q1, Q3"))])
fewshot.register("difficulty-pair", "ABBA", [
    fewshot.Example(lab, PAIR.format(a=_SHOWN[i], b=_SHOWN[j]), f"Answer: {lab}", _KEYS[i] + _KEYS[j])
    for (i, j), lab in (((0, 1), "A"), ((2, 3), "B"), ((4, 5), "B"), ((6, 7), "A"), ((1, 6), "A"), ((3, 4), "B"))])
fewshot.register("difficulty-mc", "ABCD", fewshot.mc_examples(ANSWER_MC))
ARITH_EXAMPLES = (("What is 6 + 7 * 3?", "7 * 3 = 21, and 6 + 21 = 27.\nAnswer: 27", ("6 + 7 * 3",)),
                  ("What is 9 - 4 + 8?", "9 - 4 = 5, and 5 + 8 = 13.\nAnswer: 13", ("9 - 4 + 8",)),
                  ("What is 5 * 6 - 2?", "5 * 6 = 30, and 30 - 2 = 28.\nAnswer: 28", ("5 * 6 - 2",)))
fewshot.register("difficulty-arith", ("w", "w"), [fewshot.Example("w", ANSWER_ARITH.format(q=q), a, k)
                                                  for q, a, k in ARITH_EXAMPLES])


@lru_cache(maxsize=8)
def _difficulty_items(source: str, seed: int, n: int, digits: Any, terms: Any, ops: str
                      ) -> tuple[str, dict[str, Any]]:
    """(variant, id -> question) for ``4 n`` questions: arithmetic or a question file."""
    if source == "arithmetic":
        qs: list[Any] = arithmetic_questions(4 * n, seed, digits=digits, terms=terms, ops=ops,
                                               namespace="difficulty")
        return arith_tag(digits, terms, ops), {q.id: q for q in qs}
    qs = [q for q in load_questions(source, seed) if isinstance(q, MCQuestion)]
    if len(qs) < 4:
        raise DataError(f"{source}: fewer than 4 multiple-choice questions; expected an MMLU "
                        "JSONL or hendrycks CSV file")
    random.Random(f"seb-difficulty:{seed}").shuffle(qs)
    return Path(source).stem, {q.id: q for q in qs[:4 * n]}


def _source(ctx: RunContext) -> tuple[str, dict[str, Any]]:
    """``groups`` 4-question groups (default ``n``, else 10). Option ``prefill`` (default False)
    starts the ranking reply with RANK_PREFILL, a format aid for small models that otherwise
    answer the questions instead of ranking them."""
    variant, items = _difficulty_items(str(_opt(ctx, "questions", "arithmetic")), ctx.cfg.seed,
                                       int(_opt(ctx, "groups", _n(ctx, 10))), _knob(_opt(ctx, "digits", (1, 3))),
                                       _knob(_opt(ctx, "terms", (2, 3))), str(_opt(ctx, "ops", "+-*")))
    return fmt_variant(ctx, variant + "+prefill" if _opt(ctx, "prefill", False) else variant), items


def shown(q: Any) -> str:
    """A question with its correct answer, as the ranking prompts show it."""
    if isinstance(q, MCQuestion):
        return f"{q.format()}\nCorrect answer: {q.answer}. {q.answer_text}"
    return f"{q.question}\nCorrect answer: {q.answer}"


def _rank_prompts(ctx: RunContext, groups: Sequence[Sequence[Any]], pre: str | None) -> list:
    return rendered(ctx, [user(RANK.format(qs="\n".join(f"Q{j + 1}: {shown(q)}" for j, q in enumerate(g))),
                               prefill=pre) for g in groups], "difficulty-rank")


def _answer_prompts(ctx: RunContext, qs: Sequence[Any]) -> list:
    """Each question asked alone, in the run's format (a file's MC items or arithmetic)."""
    mc = [isinstance(q, MCQuestion) for q in qs]
    pm = iter(rendered(ctx, [user(ANSWER_MC.format(q=q.format())) for q, m in zip(qs, mc) if m], "difficulty-mc"))
    pa = iter(rendered(ctx, [user(ANSWER_ARITH.format(q=q.question)) for q, m in zip(qs, mc) if not m],
                       "difficulty-arith"))
    return [next(pm) if m else next(pa) for m in mc]


def knobs(q: Any) -> list[int] | None:
    """The generator's difficulty settings of an arithmetic question ([digits, terms]); None for
    a file's question. Pairs that share them are the knob-matched pairs of the summary."""
    return [int(q.digits), int(q.terms)] if isinstance(q, ArithmeticQuestion) else None


def answer_reading(q: Any, text: str) -> tuple[bool | None, str | None]:
    """(correct, how it was read). MC: the parsed letter (``letter``); arithmetic: the
    "Answer: N" statement asked for (``statement``), else a result the last sentence ends on
    ("... = 81.", ``result``). (None, None) when the reply states no answer: excluded from the
    truth, never scored wrong, never read from its last integer."""
    if isinstance(q, MCQuestion):
        v, how = parse_letter(text, "ABCDEFGH"[:len(q.options)]), "letter"
    else:
        v, how = final_answer(text), "statement"
        if v is None:
            v, how = stated_result(text), "result"
    return (None, None) if v is None else (v == q.answer, how)


def answer_correct(q: Any, text: str) -> bool | None:
    return answer_reading(q, text)[0]


def plan_difficulty(ctx: RunContext) -> list[Trial]:
    variant, items = _source(ctx)
    ids = list(items)
    return [Trial("seb-difficulty", "clean", index=g, variant=variant,
                  params=(("qids", tuple(ids[4 * g:4 * g + 4])),))
            for g in range(len(ids) // 4)]


PAIRS = list(itertools.combinations(range(4), 2))
CHUNK = 4  # groups whose answers are drawn before their records are written


def execute_difficulty(ctx: RunContext, trials: Sequence[Trial]) -> Iterator[Record]:
    """Groups in chunks of ``CHUNK``: a group's truth takes K draws of each of its questions, so
    drawing every group's answers before the first record would leave a stopped run with
    nothing. Draws are seeded per question and budgets are calibrated on fixed prompts, so the
    chunking changes a record only by the float rounding of another batch composition."""
    trials = list(trials)
    if not trials:
        return
    items = _source(ctx)[1]
    pre = RANK_PREFILL if _opt(ctx, "prefill", False) else None
    # budgets once per run, on fixed calibration prompts: every chunk decodes with the same ones
    cal = [[items[i] for i in t.param("qids")] for t in plan_difficulty(ctx)[:N_CALIBRATION]]
    rt = calibrated_budget(ctx, "rank_tokens", _rank_prompts(ctx, cal, pre), 16, 96)
    at = calibrated_budget(ctx, "answer_tokens", _answer_prompts(ctx, list(items.values())[:N_CALIBRATION]),
                           32, 256, sampled=True)
    for start in range(0, len(trials), CHUNK):
        yield from _execute_chunk(ctx, trials[start:start + CHUNK], items, pre, rt, at)


def _execute_chunk(ctx: RunContext, trials: Sequence[Trial], items: dict, pre: str | None,
                   rt: Any, at: Any) -> Iterator[Record]:
    """One chunk of groups: rankings, pair decisions and K answer draws, then their records."""
    groups = [[items[i] for i in t.param("qids")] for t in trials]
    p1 = _rank_prompts(ctx, groups, pre)
    g1 = greedy(ctx, p1, rt)
    pair_convs = [user(PAIR.format(a=shown(g[a]), b=shown(g[b])), prefill=PREFILL)
                  for g in groups for i, j in PAIRS for a, b in ((i, j), (j, i))]
    dec, _ = decisions(ctx, rendered(ctx, pair_convs, "difficulty-pair"), letter_ids(ctx.model.tokenizer, "AB"), 1)
    flat = list(dict.fromkeys(q.id for g in groups for q in g))
    by_id = {q.id: q for g in groups for q in g}
    ap = _answer_prompts(ctx, [by_id[i] for i in flat])
    answers = dict(zip(flat, draws(ctx, ap, [f"seb-difficulty:{i}" for i in flat], at)))
    aprompt = dict(zip(flat, ap))
    for k, t in enumerate(trials):
        g = groups[k]
        ans = [answers[q.id] for q in g]
        read = [[answer_reading(q, a.text) for a in gs] for q, gs in zip(g, ans)]
        correct = [[c for c, _ in r] for r in read]
        tokens = [[len(a.tokens) for a in gs] for gs in ans]
        ranking = (pre or "") + g1[k].text
        grade = grade_difficulty(parse_ranking(ranking), correct, tokens,
                                 [[cut(a) for a in gs] for gs in ans], dec[12 * k:12 * k + 12])
        grade.update(question_length=[len(q.question) for q in g], qids=[q.id for q in g], rank_cut=cut(g1[k]),
                     question_knobs=[knobs(q) for q in g],
                     answer_read_as=[[h for _, h in r] for r in read])
        yield ctx.record(t, prompt=p1[k].text, response=ranking, grade=grade,
                         gen=gen_info(ctx, g1[k], rank=rt, answer=at),
                         extra={"answers": session_log([aprompt[q.id] for q in g],
                                                       [gs[0] for gs in ans]),
                                "prefill": pre})


def truth_keys(correct: Sequence[Sequence[bool | None]], tokens: Sequence[Sequence[int]],
               cuts: Sequence[Sequence[bool]]) -> list[tuple | None]:
    """Per question the difficulty key (larger = harder) from its usable draws (parsed and not
    cut): (failure rate, mean answer tokens); None when no draw is usable."""
    out: list[tuple | None] = []
    for c, n, k in zip(correct, tokens, cuts):
        ok = [(bool(ci), ni) for ci, ni, ki in zip(c, n, k) if ci is not None and not ki]
        out.append((1 - sum(x for x, _ in ok) / len(ok), sum(t for _, t in ok) / len(ok)) if ok else None)
    return out


def grade_difficulty(pred: list[int] | None, correct: Sequence[Sequence[bool | None]],
                     tokens: Sequence[Sequence[int]], cuts: Sequence[Sequence[bool]],
                     dec: Sequence[Any]) -> dict[str, Any]:
    """All six pairs scored, true ties earning half: the parsed ranking (an unparsed ranking
    scores 0, as 002 counts format failures wrong) and the logit pair probabilities. A pair
    with a question that has no usable draw has no truth: excluded (None) and counted."""
    keys = truth_keys(correct, tokens, cuts)
    rank = {q: r for r, q in enumerate(pred)} if pred is not None else None
    p_harder, p_ab, credit_logit, credit_text, truth = [], [], [], [], []
    for n, (i, j) in enumerate(PAIRS):
        d_ij, d_ji = dec[2 * n], dec[2 * n + 1]
        p = (d_ij.p("A") + d_ji.p("B")) / 2 if d_ij and d_ji else None
        p_harder.append(p)
        p_ab.append([d.p("A") if d else None for d in (d_ij, d_ji)])
        if keys[i] is None or keys[j] is None:
            credit_logit.append(None)
            credit_text.append(None)
            truth.append(None)
            continue
        credit_logit.append(pair_credit(p, keys[i], keys[j]))
        credit_text.append(pair_credit(float(rank[i] > rank[j]), keys[i], keys[j]) if rank else 0.0)
        truth.append(0.5 if keys[i] == keys[j] else float(keys[i] > keys[j]))
    ok_logit = [c for c in credit_logit if c is not None]
    ok_text = [c for c in credit_text if c is not None]
    valid = [[c is not None and not k for c, k in zip(cc, kk)] for cc, kk in zip(correct, cuts)]
    return {
        "parse_ok": pred is not None, "predicted_order": pred,
        "pair_accuracy": sum(ok_text) / len(ok_text) if ok_text else None,
        "pair_accuracy_logit": sum(ok_logit) / len(ok_logit) if ok_logit else None,
        "pairs": [list(p) for p in PAIRS], "pair_truth": truth, "p_harder": p_harder,
        "n_pairs_excluded": sum(t is None for t in truth),
        "p_first_is_A": p_ab, "pair_mass": [[d.mass if d else None for d in dec[2 * n:2 * n + 2]]
                                            for n in range(6)],
        "answer_correct": [[None if c is None else bool(c) for c in cc] for cc in correct],
        "n_tokens": [list(n) for n in tokens], "answer_cut": [list(map(bool, c)) for c in cuts],
        "answer_parsed": [[c is not None for c in cc] for cc in correct],
        "n_draws": max((len(c) for c in correct), default=0),
        "n_usable_draws": [sum(v) for v in valid],
        "p_correct": [None if k is None else 1 - k[0] for k in keys],
        "true_order": sorted(range(4), key=lambda q: (keys[q] is None, keys[q] or (), q)),
    }


register(TaskSpec("seb-difficulty", "Self-Execution Benchmark: rank 4 questions (answers shown) by "
                  "own difficulty, and each pair by logits (002 §3.3); truth from K answers each",
                  plan_difficulty, execute_difficulty, uses_injection=False))
