"""The Delegate Game (003): answer a question yourself or hand it to a teammate.

Why this design: the game never asks for a confidence report; a model that knows what it knows
should delegate the questions it would get wrong, raising its accuracy on the ones it keeps above
its baseline accuracy (the lift), and delegation should track baseline errors (MCC) and baseline
answer entropy (white-box logistic regression, 003 Fig. 3). A phase-1 history shows how a
simulated teammate of set accuracy did on ~50 other questions (compact: stem + correct or not;
optionally the model's own baseline result), so delegation rate vs teammate accuracy is the
other-modelling check. One trial = one game question at one teammate accuracy; its baseline
(answer alone, greedy, letter entropy from the first step's log-probs) runs inside ``execute``,
so any subset of trials can run alone.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Iterator, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from introspect.data import DataError, MCQuestion, ShortQuestion, arithmetic_mc, load_questions
from introspect.grading import normalize_word
from introspect.inject import Generation
from introspect.records import Record
from introspect.tasks.base import RunContext, TaskSpec, Trial, register
from introspect.tasks.selfknowledge.common import (
    _knob,
    _opt,
    arith_tag,
    parse_letter,
    run_sessions,
    user,
)
from introspect.tasks.selfknowledge.metrics import letter_entropy

Question = MCQuestion | ShortQuestion
PREFILL = "Answer:"
BASELINE_MC = "Answer the following question.\n\n{q}\nReply with one letter: A, B, C or D."
BASELINE_SHORT = "Answer the following question in as few words as possible.\n\n{q}"
GAME = (
    "You and your teammate play a quiz as a team. For each question you either answer it "
    "yourself or delegate it to your teammate by replying T. The team scores a point for every "
    "correct answer.\n\nEarlier questions and how {who} did:\n{history}\n\nGame question:\n{q}\n"
    "{reply}"
)
REPLY_MC = "Reply with one letter: A, B, C or D to answer, or T to let your teammate answer."
REPLY_SHORT = "Reply with a short answer, or T to let your teammate answer."


@lru_cache(maxsize=8)
def _pool(source: str, seed: int, n: int, history_len: int, digits: Any, terms: Any, ops: str
          ) -> tuple[str, tuple[Question, ...], tuple[Question, ...]]:
    """(variant stem, phase-1 questions, game questions), disjoint and deterministic."""
    if source == "arithmetic":
        qs: list[Question] = list(arithmetic_mc(history_len + n, seed, digits=digits, terms=terms,
                                                ops=ops))
        stem = arith_tag(digits, terms, ops)
    else:
        qs = list(load_questions(source, seed))
        random.Random(f"delegate:{seed}").shuffle(qs)
        stem = Path(source).stem
        if len(qs) <= history_len:
            raise DataError(f"{source}: {len(qs)} questions, need more than history_len="
                            f"{history_len}; expected a larger question file")
    return stem, tuple(qs[:history_len]), tuple(qs[history_len:history_len + n])


def _source(ctx: RunContext) -> tuple[str, tuple[Question, ...], tuple[Question, ...]]:
    return _pool(str(_opt(ctx, "questions", "arithmetic")), ctx.cfg.seed, int(_opt(ctx, "n", 50)),
                 int(_opt(ctx, "history_len", 50)), _knob(_opt(ctx, "digits", 2)),
                 _knob(_opt(ctx, "terms", 2)), str(_opt(ctx, "ops", "+-")))


def _accuracies(ctx: RunContext) -> list[float]:
    acc = _opt(ctx, "teammate_accuracy", 0.5)
    accs = [float(a) for a in (acc if isinstance(acc, (list, tuple)) else [acc])]
    if any(not 0 <= a <= 1 for a in accs):
        from introspect.tasks.base import ConfigError

        raise ConfigError(f"teammate_accuracy must lie in [0, 1], got {acc}")
    return accs


def _variant(source: str, acc: float, feedback: bool) -> str:
    return f"{source}:teammate={acc:g}" + ("+feedback" if feedback else "")


def teammate_history(n: int, acc: float, seed: int) -> list[bool]:
    """Exactly round(acc n) correct phase-1 answers, in seeded random order."""
    k = round(acc * n)
    marks = [True] * k + [False] * (n - k)
    random.Random(f"teammate:{seed}:{acc}").shuffle(marks)
    return marks


def teammate_answers_correctly(seed: int, acc: float, qid: str) -> bool:
    """The simulated teammate's result on a game question (seeded Bernoulli(acc))."""
    return random.Random(f"teammate-game:{seed}:{acc}:{qid}").random() < acc


def _show(q: Question) -> str:
    return q.format() if isinstance(q, MCQuestion) else q.question


def _stem(q: Question, width: int = 100) -> str:
    s = " ".join(q.question.split())
    return s if len(s) <= width else s[:width - 3] + "..."


def letter_ids(tokenizer: Any, letters: str) -> dict[str, list[int]]:
    """Single-token spellings ("A", " A") of each letter, for reading its probability."""
    out: dict[str, list[int]] = {}
    for L in letters:
        ids = []
        for s in (L, " " + L):
            enc = tokenizer.encode(s, add_special_tokens=False)
            if len(enc) == 1 and tokenizer.decode(enc).strip() == L and enc[0] not in ids:
                ids.append(int(enc[0]))
        out[L] = ids
    return out


def _letter_logprobs(lp: torch.Tensor, ids: dict[str, list[int]]) -> list[float]:
    return [float(torch.logsumexp(lp[v], 0)) if v else -math.inf for v in ids.values()]


def _vocab_entropy(lp: torch.Tensor) -> float:
    return float(-(lp.exp() * lp.clamp(min=-1e4)).sum())


def short_correct(response: str, answer: str) -> bool:
    """SimpleQA without a judge: the normalised reference answer occurs in the response."""
    a, r = normalize_word(answer), " ".join(normalize_word(response).split())
    return bool(a) and re.search(rf"(?<!\w){re.escape(a)}(?!\w)", r) is not None


def grade_answer(q: Question, text: str, allow_t: bool) -> tuple[str | None, bool]:
    """(choice, correct): choice is a letter, "T", the short answer text, or None (unparsed)."""
    if isinstance(q, MCQuestion):
        choice = parse_letter(text, "ABCD" + ("T" if allow_t else ""))
        return choice, choice == q.answer
    body = text.strip()
    if allow_t and re.match(r"^\W*T(?![A-Za-z])", body):
        return "T", False
    return (body or None), bool(body) and short_correct(body, q.answer)


def _baseline(ctx: RunContext, qs: Sequence[Question]) -> dict[str, dict[str, Any]]:
    """Answer each question alone (greedy); correctness and answer-letter entropy."""
    convs = [user((BASELINE_MC if isinstance(q, MCQuestion) else BASELINE_SHORT).format(q=_show(q)),
                  prefill=PREFILL) for q in qs]
    mc = all(isinstance(q, MCQuestion) for q in qs)
    prompts, gens = run_sessions(ctx, convs, 3 if mc else 16)
    ids = letter_ids(ctx.model.tokenizer, "ABCD")
    out = {}
    for q, p, g in zip(qs, prompts, gens):
        choice, ok = grade_answer(q, g.text, allow_t=False)
        ent = (letter_entropy(_letter_logprobs(g.first_logprobs, ids))
               if isinstance(q, MCQuestion) and all(ids.values()) else _vocab_entropy(g.first_logprobs))
        out[q.id] = {"choice": choice, "correct": bool(ok), "parse_ok": choice is not None,
                     "entropy": ent, "prompt": p.text, "response": g.text}
    return out


def _history(hist: Sequence[Question], tm: Sequence[bool], own: dict[str, dict] | None) -> str:
    word = {True: "correct", False: "incorrect"}
    lines = []
    for i, (q, c) in enumerate(zip(hist, tm), 1):
        you = f"You: {word[own[q.id]['correct']]}; " if own is not None else ""
        lines.append(f"{i}. {_stem(q)} -> {you}Teammate: {word[c]}")
    return "\n".join(lines)


def plan(ctx: RunContext) -> list[Trial]:
    stem, hist, game = _source(ctx)
    fb = bool(_opt(ctx, "feedback", False))
    return [Trial("delegate", "clean", index=i, variant=_variant(stem, acc, fb),
                  params=(("feedback", fb), ("history_len", len(hist)), ("qid", q.id),
                          ("questions", stem), ("teammate_accuracy", acc)))
            for acc in _accuracies(ctx) for i, q in enumerate(game)]


def execute(ctx: RunContext, trials: Sequence[Trial]) -> Iterator[Record]:
    trials = list(trials)
    if not trials:
        return
    _, hist, game = _source(ctx)
    by_id = {q.id: q for q in game}
    fb = bool(_opt(ctx, "feedback", False))
    need = list(dict.fromkeys(t.param("qid") for t in trials))
    base = _baseline(ctx, [by_id[i] for i in need] + (list(hist) if fb else []))
    histories: dict[float, str] = {}
    convs = []
    for t in trials:
        acc, q = float(t.param("teammate_accuracy")), by_id[t.param("qid")]
        if acc not in histories:
            tm = teammate_history(len(hist), acc, ctx.cfg.seed)
            histories[acc] = _history(hist, tm, base if fb else None)
        reply = REPLY_MC if isinstance(q, MCQuestion) else REPLY_SHORT
        convs.append(user(GAME.format(who="you and your teammate" if fb else "your teammate",
                                      history=histories[acc], q=_show(q), reply=reply),
                          prefill=PREFILL))
    mnt = 3 if all(isinstance(by_id[i], MCQuestion) for i in need) else 16
    prompts, gens = run_sessions(ctx, convs, mnt)
    ids = letter_ids(ctx.model.tokenizer, "ABCDT")
    for t, p, g in zip(trials, prompts, gens):
        yield _record(ctx, t, by_id[t.param("qid")], base[t.param("qid")], p.text, g, ids, mnt)


def _record(ctx: RunContext, t: Trial, q: Question, b: dict[str, Any], prompt: str,
            g: Generation, ids: dict[str, list[int]], max_new_tokens: int) -> Record:
    acc = float(t.param("teammate_accuracy"))
    choice, ok = grade_answer(q, g.text, allow_t=True)
    delegated = choice == "T"
    mate = teammate_answers_correctly(ctx.cfg.seed, acc, q.id)
    game_ent = p_t = None
    if isinstance(q, MCQuestion) and all(ids.values()):
        lps = _letter_logprobs(g.first_logprobs, ids)
        game_ent = letter_entropy(lps[:4])
        p_t = math.exp(lps[4] - torch.logsumexp(torch.tensor(lps), 0).item())
    grade = {
        "baseline_choice": b["choice"], "baseline_correct": b["correct"],
        "baseline_parse_ok": b["parse_ok"], "entropy": b["entropy"],
        "game_choice": choice, "game_parse_ok": choice is not None, "delegated": delegated,
        "parse_ok": b["parse_ok"] and choice is not None,
        "game_correct": bool(ok) and not delegated, "teammate_correct": mate,
        "team_correct": mate if delegated else bool(ok),
        "team_expected": acc if delegated else float(bool(ok)),
        "teammate_accuracy": acc, "question_length": len(q.question), "game_entropy": game_ent,
        "p_delegate": p_t, "qid": q.id, "answer": q.answer, "source": t.param("questions"),
    }
    return ctx.record(t, prompt=prompt, response=g.text, grade=grade,
                      gen={"max_new_tokens": max_new_tokens, "do_sample": False,
                           "prefill": PREFILL},
                      extra={"baseline_prompt": b["prompt"], "baseline_response": b["response"]})


register(TaskSpec("delegate", "Delegate Game: answer or delegate to a simulated teammate; lift "
                  "and MCC of delegation vs own baseline errors (003)", plan, execute,
                  uses_injection=False))
