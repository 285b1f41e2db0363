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

Free text (``--option short_answer=true``): generated arithmetic asked without options ("Reply
with the number alone"), graded by the number stated, and the game reply a number or T; no
letter appears in either phase. P(T) is then the raw probability of a first token "T" (there is
no answer-letter set to renormalise over), P(correct) the share of K sampled baseline answers
that are right, and there is no entropy. Off by default: unmeasured on real models, and it costs
K sampled free-text answers per pool item where the letter baseline costs one forward pass.
Pool difficulty matched to the model (``calibrate_pool``), game size (``game_n``) and anchors
(``anchors``): ``pool.py``.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from typing import Any

from introspect.data import MCQuestion, ShortQuestion
from introspect.engine.run.chat import Conversation
from introspect.records.jsonl import Record
from introspect.tasks import fewshot
from introspect.tasks.base import ConfigError, RunContext, TaskSpec, Trial, register
from introspect.tasks.selfknowledge import pool as P
from introspect.tasks.selfknowledge import rotations as R
from introspect.tasks.selfknowledge.common import (
    LOW_MASS,
    N_CALIBRATION,
    PREFILL,
    _opt,
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
from introspect.tasks.selfknowledge.game_grade import POOL_FIELDS, ROTATION_FIELDS, grade_game  # noqa: F401  (re-exported)
from introspect.tasks.selfknowledge.parse import is_delegation, parse_letter
from introspect.tasks.selfknowledge.pool import stratified
from introspect.tasks.selfknowledge.shortanswer import ShortGrade, grade_replies, judges_for
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
BASELINE_NUMBER = "Answer the following question. Reply with the number alone.\n\n{q}"
REPLY_NUMBER = "Reply with the number alone to answer, or T to let your teammate answer."
NUMBER_BANK = (("What is 6 + 7?", "13", ("6 + 7",)), ("What is 9 - 4?", "5", ("9 - 4",)),
               ("What is 12 + 30?", "42", ("12 + 30",)), ("What is 15 - 21?", "-6", ("15 - 21",)))


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
fewshot.register("delegate-number", ("n", "n"), [
    fewshot.Example("n", BASELINE_NUMBER.format(q=q), f"Answer: {a}", k) for q, a, k in NUMBER_BANK])
fewshot.register("game-number", ("n", "T"), [
    fewshot.Example(lab, f"Game question:\n{q}\n{REPLY_NUMBER}", f"Answer: {a if lab == 'n' else 'T'}", k)
    for lab in ("n", "T") for q, a, k in NUMBER_BANK])


def _show(q: Question) -> str:
    return q.format() if isinstance(q, MCQuestion) else q.question


# ---------------------------------------------------------------- question pool and baseline
_key_of, _flag, _sizes, _knobs, _anchors = P.key_of, P.flag, P.sizes, P.knobs, P.anchors


def calibration(ctx: RunContext) -> P.Calibration | None:
    """The pool's calibration (``pool.calibration``), scored by this task's own baseline."""
    return P.calibration(ctx, lambda qs: [b["correct"] for b in baseline(ctx, qs, sampled=False).values()])


def _pool(ctx: RunContext) -> tuple[str, list[Question]]:
    """(variant stem, the questions the game and phase 1 are drawn from): ``pool.pool``."""
    return P.pool(ctx, calibration(ctx))


def baseline(ctx: RunContext, qs: Sequence[Question], sampled: bool = True) -> dict[str, dict[str, Any]]:
    """Each question answered alone. MC: the letter distribution at "Answer:" (correct = its
    argmax, P(correct), entropy over A–D, mass) and a parsed greedy reply; with ``rotations``
    the decision is the letter-free one over every cyclic rotation (``_rotate``); short
    answers: a greedy reply (correct) and, when ``sampled``, K sampled ones (P(correct)),
    graded by the number stated (arithmetic) or ``grade_short`` (``grade_replies``)."""
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
        ps = _short_prompts(ctx, short)
        st = _short_budget(ctx)
        gr = greedy(ctx, ps, st)
        samp = draws(ctx, ps, [f"delegate:base:{q.id}" for q in short], st) if sampled else [[] for _ in short]
        grades = iter(grade_replies([(q, x.text) for q, g, ds in zip(short, gr, samp) for x in [g, *ds]],
                                    judges_for(_opt(ctx, "judge", None))))
        for q, p, g, ds in zip(short, ps, gr, samp):
            first, rest = next(grades), [next(grades) for _ in ds]
            judged = [x.correct for x in rest if x.correct is not None]
            out[q.id] = {"correct": first.correct, "grade_method": first.method,
                         "p_correct": sum(judged) / len(judged) if judged else None,
                         "n_draws": len(ds), "n_draws_excluded": len(ds) - len(judged),
                         "choice": g.text.strip()[:80], "entropy": None, "mass": None, "low_mass": False,
                         "text_choice": g.text.strip()[:80], "text_correct": bool(first.correct),
                         "parse_ok": bool(g.text.strip()), "prompt": p.text, "response": g.text}
    return out


def _numeric(q: Question) -> bool:
    return getattr(q, "answer_type", "") == "number"


def _short_prompts(ctx: RunContext, qs: Sequence[Question]) -> list:
    """Free-text baseline prompts: arithmetic asks for the number alone (its few-shot examples
    are sums), other short questions for a few words."""
    num = iter(rendered(ctx, [user(BASELINE_NUMBER.format(q=q.question), prefill=PREFILL) for q in qs if _numeric(q)],
                        "delegate-number"))
    txt = iter(rendered(ctx, [user(BASELINE_SHORT.format(q=q.question), prefill=PREFILL) for q in qs
                              if not _numeric(q)], "delegate-short"))
    return [next(num) if _numeric(q) else next(txt) for q in qs]


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
    """Budget of a short answer, calibrated on the first short questions of the uncalibrated
    pool (the configured knobs for arithmetic: the same in every batch, for the game's replies
    and for the pool calibration, which must not wait on itself)."""
    if str(_opt(ctx, "questions", "arithmetic")) == "arithmetic":
        short = P.arithmetic_items(N_CALIBRATION, ctx.cfg.seed, _knobs(ctx), True, "delegate")
    else:
        short = [q for q in _pool(ctx)[1] if not isinstance(q, MCQuestion)][:N_CALIBRATION]
    return calibrated_budget(ctx, "short_tokens", _short_prompts(ctx, short), 16, 64, sampled=True)


_SEL: dict[tuple, tuple[str, list[Question], list[Question], dict[str, dict[str, Any]], list[Question]]] = {}


def _selected(ctx: RunContext) -> tuple[str, list[Question], list[Question], dict[str, dict[str, Any]], list[Question]]:
    key = _key_of(ctx)
    if key not in _SEL:
        stem, qs = _pool(ctx)
        n, h = _sizes(ctx)
        base = baseline(ctx, qs)
        graded = [q for q in qs if base[q.id]["correct"] is not None]  # excluded: no truth
        if _opt(ctx, "stratify", True):
            hist, game = stratified(P.shuffled(graded, ctx.cfg.seed), {q.id: base[q.id]["correct"] for q in graded}, n, h)
        else:  # pool order, still without the excluded questions (an exclusion is not an error)
            hist, game = graded[:h], graded[h:h + n]
        cal = calibration(ctx)
        for q in hist + game:
            base[q.id]["pool_excluded"] = sum(b["correct"] is None for b in base.values())
            if cal:
                base[q.id].update(pool_knobs=cal.chosen.tag, pool_calibration_accuracy=cal.accuracy,
                                  pool_calibration_in_band=cal.in_band)
        # every model is asked every anchor; one whose baseline has no grade is not played (no truth)
        asked = _anchors(ctx)
        abase = baseline(ctx, asked) if asked else {}
        anchors = [q for q in asked if abase[q.id]["correct"] is not None]
        for b_ in abase.values():
            b_.update(pool_knobs=P.ANCHOR.tag, anchor=True, pool_excluded=len(asked) - len(anchors))
        _SEL[key] = (stem, hist, game, {**{q.id: base[q.id] for q in hist + game}, **abase}, anchors)
        if len(_SEL) > 8:
            _SEL.pop(next(iter(_SEL)))
    return _SEL[key]


def selection(ctx: RunContext) -> tuple[str, list[Question], list[Question], dict[str, dict[str, Any]]]:
    """(variant stem, phase-1 questions, game questions, baseline by id, anchors' included),
    cached per model and settings (the trials are planned from it, so it must not change
    between plan and execute)."""
    return _selected(ctx)[:4]


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
    reply = REPLY_MC if isinstance(q, MCQuestion) else REPLY_NUMBER if _numeric(q) else REPLY_SHORT
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
    """One trial per (feedback, teammate accuracy, game question), then the same for the
    anchors (variant ``anchor-<knobs>``: never pooled with the model's own pool)."""
    accs, fbs = _accuracies(ctx), _feedbacks(ctx)
    stem, hist, game, _, anchors = _selected(ctx)
    sets = [(fmt_variant(ctx, stem), game)]  # "+fewshot" in the question-set name: never pooled with chat runs
    if anchors:
        sets.append((fmt_variant(ctx, "anchor-" + P.ANCHOR.tag + ("+short" if _flag(ctx, "short_answer") else "")),
                     anchors))
    return [Trial("delegate", "clean", index=i, variant=_variant(name, acc, fb),
                  params=(("feedback", fb), ("history_len", len(hist)), ("qid", q.id),
                          ("questions", name), ("teammate_accuracy", acc)))
            for name, qs in sets for fb in fbs for acc in accs for i, q in enumerate(qs)]


def execute(ctx: RunContext, trials: Sequence[Trial]) -> Iterator[Record]:
    trials = list(trials)
    if not trials:
        return
    _, hist, game, base, anchors = _selected(ctx)
    by_id = {q.id: q for q in game + anchors}
    hists: dict[tuple[float, bool], str] = {}
    for t in trials:
        key = (float(t.param("teammate_accuracy")), bool(t.param("feedback")))
        if key not in hists:
            hists[key] = phase1(hist, teammate_history(len(hist), key[0], ctx.cfg.seed), key[1], base)
    convs = [game_conversation(hists[(float(t.param("teammate_accuracy")), bool(t.param("feedback")))],
                               by_id[t.param("qid")]) for t in trials]
    mc = all(isinstance(by_id[t.param("qid")], MCQuestion) for t in trials)
    kind = "game-mc" if mc else "game-number" if all(_numeric(q) for q in by_id.values()) else "game-short"
    prompts = rendered(ctx, convs, kind)
    tt = 8 if mc else _short_budget(ctx)
    c = calibration(ctx)
    cal = c.to_dict() if c else None
    dec, gens = decisions(ctx, prompts, letter_ids(ctx.model.tokenizer, "ABCDT" if mc else "T"), tt)
    kept: list[ShortGrade | None] = [None] * len(trials)  # short answers kept: graded in one batch
    ask = [k for k, (t, g) in enumerate(zip(trials, gens))
           if not isinstance(by_id[t.param("qid")], MCQuestion) and not is_delegation(g.text)]
    grades = grade_replies([(by_id[trials[k].param("qid")], gens[k].text) for k in ask],
                           judges_for(_opt(ctx, "judge", None)))
    for k, gr in zip(ask, grades):
        kept[k] = gr
    for t, p, d, g, k in zip(trials, prompts, dec, gens, kept):
        q, acc = by_id[t.param("qid")], float(t.param("teammate_accuracy"))
        grade = grade_game(q, base[q.id], d, g.text, acc, teammate_answers_correctly(ctx.cfg.seed, acc, q.id), k)
        grade.update(source=t.param("questions"), feedback=bool(t.param("feedback")), history_len=len(hist),
                     game_cut=g.stop_reason == "length", **surface(q),
                     **{k: base[q.id][k] for k in POOL_FIELDS if k in base[q.id]})
        yield ctx.record(t, prompt=p.text, response=g.text, grade=grade,
                         gen=gen_info(ctx, g, **({"game": tt} if mc else {"short": tt})), extra={"baseline_prompt": base[q.id]["prompt"],
                                                            "baseline_response": base[q.id]["response"],
                                                            **({"pool_calibration": cal} if cal else {})})


register(TaskSpec("delegate", "Delegate Game (003): answer or delegate to a teammate after a "
                  "phase 1 of teammate results; P(T) from logits vs own baseline errors, lift, clustered "
                  "regressions", plan, execute, uses_injection=False))
