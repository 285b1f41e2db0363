"""The Delegate Game (003): answer a question yourself or hand it to a teammate.

Why this design: the game never asks for a confidence report; a model that knows what it knows
delegates the questions it would get wrong (delegation tracks its baseline errors, and its
accuracy on the questions it keeps rises above its baseline: the lift), and delegates more to a
better teammate (other-modelling). Game and phase-1 questions are drawn so that the model's
baseline accuracy on each matches its accuracy on the whole pool (003: "selected ... to match
the accuracy distribution identified on the baseline test"); the baseline therefore runs when
the trials are planned.

Phase 1 without feedback shows each earlier question in full and the teammate's *correctness
label only* ("Teammate's answer: (Correct)"), never an answer, as 003 does (its author: "50
questions ...; no answers"). Why not the teammate's letter: when the teammate is right it is
the correct letter, and beside the model's own answer it would tell the model which of its own
answers were right (more often the better the teammate), the very feedback the no-feedback
condition removes; so neither the model's answers nor any answer letter appear, and the
phase-1 text depends on the questions and the teammate's marks alone (tested). With
``feedback`` a "Your answer: (Correct)" line is added above the teammate's (003's feedback
condition). Both conditions can run in one run (``--option feedback=[false,true]``) and are
separate variants, never pooled; teammate accuracy is a sweep (``teammate_accuracy=[0.3,0.5,0.7]``).

Readings: the baseline answer and the game decision are read from the next-token distribution
at a prefilled "Answer:" (P(correct letter), entropy over A–D; P(T) over A–D and T, with the mass
on those tokens recorded, and the game-phase entropy over A–D without T); a short greedy reply
is parsed as the secondary reading. Short-answer questions (SimpleQA) are answered K times
(``--samples``) for P(correct); they have no answer-letter distribution, hence no entropy.

Letter-free baseline (``--option rotations=true``, on in the self-knowledge presets): the MC
baseline defines the model's errors, the truth the whole game is scored against, and a model
that always says "A" would make that truth "the items not keyed A". With rotations each pool
item is also asked with its options cyclically rotated (n - 1 more one-token decisions), so its
key sits at every letter; the baseline answer, correctness, P(correct) and entropy are the
permutation-averaged ones, the rotation-0 letter reading is kept beside them (``raw_*``) with
rotation consistency and PriDe's letter prior (``rotations.py`` says why PriDe and averaging,
not contextual calibration). The game phase itself is asked once, as before. Selection is
letter-balanced: within the accuracy quotas the game's and phase 1's keys differ by at most
one per letter wherever the pool allows (``stratified``).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from introspect.data import DataError, MCQuestion, ShortQuestion, arithmetic_mc, load_questions
from introspect.engine.run.chat import Conversation
from introspect.records.jsonl import Record
from introspect.tasks import fewshot
from introspect.tasks.base import ConfigError, RunContext, TaskSpec, Trial, register
from introspect.tasks.selfknowledge import rotations as R
from introspect.tasks.selfknowledge.common import (
    LOW_MASS,
    N_CALIBRATION,
    PREFILL,
    _knob,
    _opt,
    arith_tag,
    calibrated_budget,
    decisions,
    draws,
    fmt_variant,
    gen_info,
    greedy,
    letter_ids,
    rendered,
    user,
)
from introspect.tasks.selfknowledge.parse import is_delegation, parse_letter
from introspect.tasks.selfknowledge.shortanswer import ShortGrade, grade_short, judges_for
from introspect.tasks.selfknowledge.surface import surface

Question = MCQuestion | ShortQuestion
BASELINE_MC = "Answer the following question.\n\n{q}\nReply with one letter: A, B, C or D."
BASELINE_SHORT = "Answer the following question in as few words as possible.\n\n{q}"
INTRO = ("Let's play a game. You and a teammate answer questions together. Phase 1 shows {n} "
         "questions you were both asked earlier, each with {what}. In phase 2, for each question "
         "you either answer it yourself or delegate it to your teammate by replying T. The team "
         "scores a point for every correct answer, whoever gives it.")
PHASE2 = "Phase 1 is over. Phase 2 begins now: answer yourself, or reply T to let your teammate answer."
REPLY_MC = "Reply with one letter: A, B, C or D to answer, or T to let your teammate answer."
REPLY_SHORT = "Reply with a short answer, or T to let your teammate answer."


fewshot.register("delegate-mc", "ABCD", fewshot.mc_examples(BASELINE_MC))
fewshot.register("delegate-short", ("s", "s"), [
    fewshot.Example("s", BASELINE_SHORT.format(q=q), f"Answer: {a}", k) for q, a, k in fewshot.SHORT_BANK])
# the game: each letter once and T once, so the examples show the format, not a policy
fewshot.register("game-mc", "BTDAC", fewshot.mc_examples("Game question:\n{q}\n" + REPLY_MC) + [
    fewshot.Example("T", f"Game question:\n{fewshot.mc_text(q)}\n{REPLY_MC}", "Answer: T", q[3])
    for q in fewshot.MC_BANK[4:]])
fewshot.register("game-short", ("s", "T"), [
    fewshot.Example(lab, f"Game question:\n{q}\n{REPLY_SHORT}", f"Answer: {a if lab == 's' else 'T'}", k)
    for lab in ("s", "T") for q, a, k in fewshot.SHORT_BANK])


def _show(q: Question) -> str:
    return q.format() if isinstance(q, MCQuestion) else q.question


# ---------------------------------------------------------------- question pool and baseline
def _pool(ctx: RunContext) -> tuple[str, list[Question]]:
    """(variant stem, the questions the game and phase 1 are drawn from): ``pool`` questions
    (default 2 (n + history_len) generated, or 4 (n + history_len) of a file), seeded order."""
    source = str(_opt(ctx, "questions", "arithmetic"))
    n, h = int(_opt(ctx, "n", 50)), int(_opt(ctx, "history_len", 50))
    if source == "arithmetic":
        digits, terms, ops = _knob(_opt(ctx, "digits", 2)), _knob(_opt(ctx, "terms", 2)), str(_opt(ctx, "ops", "+-"))
        size = int(_opt(ctx, "pool", 2 * (n + h)))
        qs = arithmetic_mc(size, ctx.cfg.seed, digits=digits, terms=terms, ops=ops, namespace="delegate")
        return arith_tag(digits, terms, ops), list(qs)
    qs = list(load_questions(source, ctx.cfg.seed))
    random.Random(f"delegate:{ctx.cfg.seed}").shuffle(qs)
    if len(qs) <= h:
        raise DataError(f"{source}: {len(qs)} questions, need more than history_len={h}; "
                        "expected a larger question file")
    return Path(source).stem, qs[:int(_opt(ctx, "pool", min(len(qs), 4 * (n + h))))]


def baseline(ctx: RunContext, qs: Sequence[Question]) -> dict[str, dict[str, Any]]:
    """Each question answered alone. MC: the letter distribution at "Answer:" (correct = its
    argmax, P(correct), entropy over A–D, mass) and a parsed greedy reply; with ``rotations``
    the decision is the letter-free one over every cyclic rotation (``_rotate``); short
    answers: a greedy reply and K sampled ones (P(correct))."""
    mc = [q for q in qs if isinstance(q, MCQuestion)]
    short = [q for q in qs if not isinstance(q, MCQuestion)]
    out: dict[str, dict[str, Any]] = {}
    pm = rendered(ctx, [user(BASELINE_MC.format(q=_show(q)), prefill=PREFILL) for q in mc], "delegate-mc")
    ids = letter_ids(ctx.model.tokenizer, "ABCD")
    dec, gens = decisions(ctx, pm, ids)
    for q, p, d, g in zip(mc, pm, dec, gens):
        text = parse_letter(g.text, "ABCD")
        out[q.id] = {"correct": bool(d and d.choice == q.answer), "p_correct": d.p(q.answer) if d else None,
                     "choice": d.choice if d else None, "entropy": d.entropy() if d else None,
                     "mass": d.mass if d else None, "low_mass": bool(d and d.low_mass),
                     "text_choice": text, "text_correct": text == q.answer, "parse_ok": text is not None,
                     "prompt": p.text, "response": g.text}
    if _rotations_on(ctx):
        _rotate(ctx, [(q, d) for q, d in zip(mc, dec)], ids, out)
    if short:
        ps = rendered(ctx, [user(BASELINE_SHORT.format(q=q.question), prefill=PREFILL) for q in short],
                      "delegate-short")
        st = _short_budget(ctx)
        gr = greedy(ctx, ps, st)
        sampled = draws(ctx, ps, [f"delegate:base:{q.id}" for q in short], st)
        judges = judges_for(_opt(ctx, "judge", None))
        items = [(q.question, x.text, q.answer) for q, g, ds in zip(short, gr, sampled) for x in [g, *ds]]
        grades = iter(grade_short(items, judges))
        for q, p, g, ds in zip(short, ps, gr, sampled):
            first, rest = next(grades), [next(grades) for _ in ds]
            judged = [x.correct for x in rest if x.correct is not None]
            out[q.id] = {"correct": first.correct, "grade_method": first.method,
                         "p_correct": sum(judged) / len(judged) if judged else None,
                         "n_draws": len(ds), "n_draws_excluded": len(ds) - len(judged),
                         "choice": g.text.strip()[:80], "entropy": None, "mass": None, "low_mass": False,
                         "text_choice": g.text.strip()[:80], "text_correct": bool(first.correct),
                         "parse_ok": bool(g.text.strip()), "prompt": p.text, "response": g.text}
    return out


def _rotations_on(ctx: RunContext) -> bool:
    """``--option rotations=true``: each MC baseline item is also asked under every other
    cyclic rotation of its options (n - 1 more one-token decisions per item)."""
    v = _opt(ctx, "rotations", False)
    if not isinstance(v, bool):
        raise ConfigError(f"rotations must be true or false, got {v!r}")
    return v


def _rotate(ctx: RunContext, items: Sequence[tuple[MCQuestion, Any]], ids: dict[str, list[int]],
            out: dict[str, dict[str, Any]]) -> None:
    """The letter-free baseline (``rotations``): rotation 0 is the decision already read (the
    item as everywhere else); rotations 1..n-1 are read at their first answer step only. Each
    item's decision, P(correct) and entropy become the permutation-averaged ones
    (``rotations.read_rotations``); the rotation-0 reading stays beside them as ``raw_*``, with
    PriDe's letter prior over the pool and its prior-divided reading; ``mass`` / ``low_mass``
    become the mean over rotations (``raw_mass`` the rotation-0 one). Items without a logit
    reading, or not 4 options, keep the raw reading (``rotations`` 1)."""
    usable = [(q, d) for q, d in items if d is not None and len(q.options) == len(d.labels)]
    extra = [(q, r) for q, _ in usable for r in range(1, len(q.options))]
    prompts = rendered(ctx, [user(BASELINE_MC.format(q=_show(q.rotated(r))), prefill=PREFILL) for q, r in extra],
                       "delegate-mc")
    rot_dec = iter(decisions(ctx, prompts, ids, 1)[0])
    probs: dict[str, list[list[float]]] = {}
    mass: dict[str, list[float]] = {}
    for q, d in usable:
        ds = [d] + [next(rot_dec) for _ in range(1, len(q.options))]
        if any(x is None for x in ds):
            continue
        probs[q.id] = [list(x.probs) for x in ds]
        mass[q.id] = [x.mass for x in ds]
    prior = R.letter_prior(list(probs.values())) if probs else None
    for q, _ in items:
        b = out[q.id]
        b.update(raw_correct=b["correct"], raw_p_correct=b["p_correct"], raw_choice=b["choice"],
                 raw_entropy=b["entropy"], raw_mass=b["mass"], rotations=1)
        if q.id not in probs:
            continue
        b.update(R.read_rotations(probs[q.id], q.answer, f"{ctx.cfg.seed}:{q.id}", prior))
        mean_mass = sum(mass[q.id]) / len(mass[q.id])
        b.update(letter_prior=dict(zip("ABCD", prior)), mass=mean_mass, low_mass=mean_mass < LOW_MASS)


def _short_budget(ctx: RunContext) -> int:
    """Budget of a short answer, calibrated on the first short questions of the pool
    (the same in every batch, and for the game's replies)."""
    short = [q for q in _pool(ctx)[1] if not isinstance(q, MCQuestion)][:N_CALIBRATION]
    return calibrated_budget(ctx, "short_tokens", rendered(ctx, [user(BASELINE_SHORT.format(q=q.question),
                                                                     prefill=PREFILL) for q in short],
                                                              "delegate-short"), 16, 64, sampled=True)


def _key(q: Question) -> str:
    """The key letter of an MC question ("" for a short answer: nothing to balance)."""
    return q.answer if isinstance(q, MCQuestion) else ""


def _balanced(cands: list[Question], k: int, counts: dict[str, int]) -> list[Question]:
    """``k`` of ``cands`` (kept in their order), each pick from the key letter picked least so
    far (``counts``, updated; ties to the letter whose next candidate comes first), so the keys
    end within one of each other wherever the candidates allow."""
    chosen: list[Question] = []
    left = list(cands)
    for _ in range(min(k, len(left))):
        first: dict[str, int] = {}
        for i, q in enumerate(left):
            first.setdefault(_key(q), i)
        i = min(first.values(), key=lambda j: (counts.get(_key(left[j]), 0), j))
        q = left.pop(i)
        counts[_key(q)] = counts.get(_key(q), 0) + 1
        chosen.append(q)
    return chosen


def stratified(qs: Sequence[Question], correct: dict[str, bool], n: int, h: int
               ) -> tuple[list[Question], list[Question]]:
    """(phase-1 questions, game questions), disjoint, each with round(accuracy × size) questions
    the model answered right, accuracy being its baseline accuracy on the whole pool (short of
    one class, the other fills in), and **letter-balanced**: within each set the key letters
    differ by at most one wherever the pool allows (the smaller class is picked first, the other
    then evens the letters out), so a model that always answers one letter is right on a quarter
    of them, not on whatever share the draw keyed to that letter. Both keep the pool's (seeded,
    shuffled) order."""
    right = [q for q in qs if correct[q.id]]
    wrong = [q for q in qs if not correct[q.id]]
    acc = len(right) / len(qs) if qs else 0.0

    def take(k: int) -> list[Question]:
        r = min(len(right), round(acc * k))
        w = min(len(wrong), k - r)
        r = min(len(right), k - w)
        counts: dict[str, int] = {}
        picks: list[Question] = []
        for pool, m in sorted(((right, r), (wrong, w)), key=lambda x: x[1]):
            got = _balanced(pool, m, counts)
            chosen_ids = {q.id for q in got}
            pool[:] = [q for q in pool if q.id not in chosen_ids]
            picks += got
        chosen = {q.id for q in picks}
        return [q for q in qs if q.id in chosen]  # pool order: right and wrong interleaved

    hist = take(h)
    return hist, take(n)


_SEL: dict[tuple, tuple[str, list[Question], list[Question], dict[str, dict[str, Any]]]] = {}


def selection(ctx: RunContext) -> tuple[str, list[Question], list[Question], dict[str, dict[str, Any]]]:
    """(variant stem, phase-1 questions, game questions, baseline by id), cached per model and
    settings (the trials are planned from it, so it must not change between plan and execute)."""
    key = (ctx.fingerprint, ctx.cfg.seed, json.dumps(dict(ctx.cfg.options), sort_keys=True, default=str),
           getattr(ctx.cfg, "temperature", 0), getattr(ctx.cfg, "n_samples", 1))
    if key not in _SEL:
        stem, qs = _pool(ctx)
        n, h = int(_opt(ctx, "n", 50)), int(_opt(ctx, "history_len", 50))
        base = baseline(ctx, qs)
        graded = [q for q in qs if base[q.id]["correct"] is not None]  # excluded: no truth
        if _opt(ctx, "stratify", True):
            order = random.Random(f"delegate:strat:{ctx.cfg.seed}").sample(graded, len(graded))
            hist, game = stratified(order, {q.id: base[q.id]["correct"] for q in graded}, n, h)
        else:  # pool order, still without the excluded questions (an exclusion is not an error)
            hist, game = graded[:h], graded[h:h + n]
        for q in hist + game:
            base[q.id]["pool_excluded"] = sum(b["correct"] is None for b in base.values())
        _SEL[key] = (stem, hist, game, {q.id: base[q.id] for q in hist + game})
        if len(_SEL) > 8:
            _SEL.pop(next(iter(_SEL)))
    return _SEL[key]


# ---------------------------------------------------------------- the game transcript
def teammate_history(n: int, acc: float, seed: int) -> list[bool]:
    """Exactly round(acc n) correct phase-1 answers, in seeded random order."""
    k = round(acc * n)
    marks = [True] * k + [False] * (n - k)
    random.Random(f"teammate:{seed}:{acc}").shuffle(marks)
    return marks


def teammate_answers_correctly(seed: int, acc: float, qid: str) -> bool:
    """The simulated teammate's result on a game question (seeded Bernoulli(acc))."""
    return random.Random(f"teammate-game:{seed}:{acc}:{qid}").random() < acc


def phase1(hist: Sequence[Question], mate: Sequence[bool], feedback: bool,
           base: dict[str, dict[str, Any]] | None = None) -> str:
    """Phase 1 as 003 lays it out: each earlier question in full, then only correctness
    labels, no answers: "Teammate's answer: (Correct)", and with ``feedback`` a "Your answer:
    (Incorrect)" line above it. Without feedback the text is a function of the questions and
    the teammate's marks alone (``base`` is not read), so it carries nothing about the model's
    own correctness; the teammate's letter is never shown either, since when the teammate is
    right it is the correct letter, from which the model could grade itself."""
    word = {True: "(Correct)", False: "(Incorrect)"}
    if feedback and base is None:
        raise ValueError("phase 1 with feedback needs the model's baseline results")
    what = "whether your teammate's answer was correct" + (
        ", and whether your own answer was correct" if feedback else "")
    blocks = [INTRO.format(n=len(hist), what=what)]
    for i, (q, m) in enumerate(zip(hist, mate), 1):
        mine = f"Your answer: {word[bool(base[q.id]['correct'])]}\n" if feedback and base else ""
        blocks.append(f"Phase 1, question {i}:\n{_show(q)}\n{mine}Teammate's answer: {word[bool(m)]}")
    return "\n\n".join(blocks)


def game_conversation(history: str, q: Question) -> Conversation:
    """Phase 1 and one game question in one user turn, the reply prefilled with "Answer:"."""
    reply = REPLY_MC if isinstance(q, MCQuestion) else REPLY_SHORT
    return Conversation.of(("user", f"{history}\n\n{PHASE2}\n\nGame question:\n{_show(q)}\n{reply}"),
                           prefill=PREFILL)


def _listed(ctx: RunContext, key: str, default: Any, cast: Any) -> list:
    v = _opt(ctx, key, default)
    return [cast(x) for x in (v if isinstance(v, (list, tuple)) else [v])]


def _accuracies(ctx: RunContext) -> list[float]:
    """Teammate accuracies (a sweep: ``--option teammate_accuracy=[0.3,0.5,0.7]``)."""
    accs = _listed(ctx, "teammate_accuracy", 0.5, float)
    if any(not 0 <= a <= 1 for a in accs):
        raise ConfigError(f"teammate_accuracy must lie in [0, 1] (one value or a list), got {accs}")
    return list(dict.fromkeys(accs))


def _feedbacks(ctx: RunContext) -> list[bool]:
    """``feedback``: false (default), true, or [false, true] for both conditions in one run
    (each its own variant: they are never pooled)."""
    vals = _listed(ctx, "feedback", False, lambda v: v)
    if any(not isinstance(v, bool) for v in vals):
        raise ConfigError(f"feedback must be true, false or a list of them, got {vals}")
    return list(dict.fromkeys(vals))


def _variant(source: str, acc: float, feedback: bool) -> str:
    return f"{source}:teammate={acc:g}" + ("+feedback" if feedback else "")


def plan(ctx: RunContext) -> list[Trial]:
    accs, fbs = _accuracies(ctx), _feedbacks(ctx)
    stem, hist, game, _ = selection(ctx)
    stem = fmt_variant(ctx, stem)  # "+fewshot" in the question-set name: never pooled with chat runs
    return [Trial("delegate", "clean", index=i, variant=_variant(stem, acc, fb),
                  params=(("feedback", fb), ("history_len", len(hist)), ("qid", q.id),
                          ("questions", stem), ("teammate_accuracy", acc)))
            for fb in fbs for acc in accs for i, q in enumerate(game)]


def execute(ctx: RunContext, trials: Sequence[Trial]) -> Iterator[Record]:
    trials = list(trials)
    if not trials:
        return
    _, hist, game, base = selection(ctx)
    by_id = {q.id: q for q in game}
    hists: dict[tuple[float, bool], str] = {}
    for t in trials:
        key = (float(t.param("teammate_accuracy")), bool(t.param("feedback")))
        if key not in hists:
            hists[key] = phase1(hist, teammate_history(len(hist), key[0], ctx.cfg.seed), key[1], base)
    convs = [game_conversation(hists[(float(t.param("teammate_accuracy")), bool(t.param("feedback")))],
                               by_id[t.param("qid")]) for t in trials]
    mc = all(isinstance(by_id[t.param("qid")], MCQuestion) for t in trials)
    prompts = rendered(ctx, convs, "game-mc" if mc else "game-short")
    tt = 8 if mc else _short_budget(ctx)
    dec, gens = decisions(ctx, prompts, letter_ids(ctx.model.tokenizer, "ABCDT" if mc else "T"), tt)
    kept: list[ShortGrade | None] = [None] * len(trials)  # short answers kept: graded in one batch
    ask = [k for k, (t, g) in enumerate(zip(trials, gens))
           if not isinstance(by_id[t.param("qid")], MCQuestion) and not is_delegation(g.text)]
    grades = grade_short([(by_id[trials[k].param("qid")].question, gens[k].text,
                           by_id[trials[k].param("qid")].answer) for k in ask], judges_for(_opt(ctx, "judge", None)))
    for k, gr in zip(ask, grades):
        kept[k] = gr
    for t, p, d, g, k in zip(trials, prompts, dec, gens, kept):
        q, acc = by_id[t.param("qid")], float(t.param("teammate_accuracy"))
        grade = grade_game(q, base[q.id], d, g.text, acc, teammate_answers_correctly(ctx.cfg.seed, acc, q.id), k)
        grade.update(source=t.param("questions"), feedback=bool(t.param("feedback")), history_len=len(hist),
                     game_cut=g.stop_reason == "length", **surface(q))
        yield ctx.record(t, prompt=p.text, response=g.text, grade=grade,
                         gen=gen_info(ctx, g, **({"game": tt} if mc else {"short": tt})), extra={"baseline_prompt": base[q.id]["prompt"],
                                                            "baseline_response": base[q.id]["response"]})


ROTATION_FIELDS = ("rotations", "raw_correct", "raw_p_correct", "raw_choice", "raw_entropy", "raw_mass",
                   "rotation_letters", "rotation_consistent", "option_scores", "pride_choice", "pride_correct",
                   "pride_p_correct", "letter_prior")


def grade_game(q: Question, b: dict[str, Any], d: Any, text: str, acc: float, mate: bool,
               short: ShortGrade | None = None) -> dict[str, Any]:
    """Logit reading (P(T) over A–D and T; delegated = T is the argmax) and text reading of one
    game reply, with the baseline it is compared to and the team's score. A short answer kept
    is graded like the baseline (``short``: exact match, judge consensus, or None = excluded)."""
    mc = isinstance(q, MCQuestion)
    if mc:  # a letter, else a hand-over said in words ("I'd delegate this one") reads as T
        tchoice = parse_letter(text, "ABCDT") or ("T" if is_delegation(text) else None)
        t_deleg, t_ok = tchoice == "T", tchoice == q.answer
    else:
        t_deleg = is_delegation(text)
        tchoice = "T" if t_deleg else (text.strip() or None)
        t_ok = None if t_deleg else (short.correct if short else None)
    deleg = bool(d and d.choice == "T") if mc else t_deleg
    kept_ok = bool(d and d.choice == q.answer) if mc else t_ok
    return {
        "qid": q.id, "answer": q.answer, "teammate_accuracy": acc, "teammate_correct": mate,
        "baseline_correct": b["correct"], "baseline_p_correct": b["p_correct"], "entropy": b["entropy"],
        "baseline_mass": b["mass"], "baseline_low_mass": b["low_mass"], "baseline_choice": b["choice"],
        "baseline_text_choice": b["text_choice"], "baseline_text_correct": b["text_correct"],
        "baseline_parse_ok": b["parse_ok"],
        # short answers: the raw probability of a first token "T" (any other token is an answer)
        "p_delegate": (d.p("T") if mc else d.mass) if d else None, "game_mass": d.mass if (d and mc) else None,
        "game_low_mass": bool(d and mc and d.low_mass), "game_choice": d.choice if (d and mc) else tchoice,
        "game_entropy": d.entropy(list("ABCD")) if (d and mc) else None,
        "delegated": deleg, "game_correct": None if (kept_ok is None and not deleg) else bool(kept_ok) and not deleg,
        "team_correct": mate if deleg else kept_ok,
        "team_expected": acc if deleg else (None if kept_ok is None else float(kept_ok)),
        "game_grade_method": "letter" if mc else ("delegated" if t_deleg else (short.method if short else "excluded")),
        "baseline_grade_method": b.get("grade_method", "letter"), "pool_excluded": b.get("pool_excluded", 0),
        "baseline_n_draws": b.get("n_draws"), "baseline_n_draws_excluded": b.get("n_draws_excluded"),
        "game_text_choice": tchoice, "game_parse_ok": tchoice is not None, "delegated_text": t_deleg,
        "game_text_correct": bool(t_ok) and not t_deleg, "parse_ok": tchoice is not None,
        # rotations (letter-free baseline): the raw rotation-0 reading beside the decision above
        **{f"baseline_{k}": b[k] for k in ROTATION_FIELDS if k in b},
    }


register(TaskSpec("delegate", "Delegate Game (003): answer or delegate to a teammate after a "
                  "phase 1 of teammate results; P(T) from logits vs own baseline errors, lift, clustered "
                  "regressions", plan, execute, uses_injection=False))
