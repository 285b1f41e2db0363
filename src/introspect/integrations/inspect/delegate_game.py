"""The Delegate Game's game phase as an Inspect task, on the baseline an Inspect run read.

``inspect eval src/introspect/integrations/inspect/delegate_game.py@delegate_game --model M
-T baseline_log=logs/<the delegate_baseline log>.eval -T teammate_accuracy=[0.3,0.7]`` draws
phase 1 and the game questions from that baseline exactly as the toolkit does
(``delegate.stratified`` over the seeded pool order: each set holds the model's baseline
accuracy, letter-balanced), writes phase 1 with ``delegate.phase1`` (the teammate's marks only,
``feedback`` adds the model's own) and asks each game question once per (teammate accuracy,
feedback) with ``delegate.game_conversation``. The baseline comes from the log's records
(``sk_records``: with rotations, the letter-free decision is the truth the game is scored
against) and must be read from one decision source.

The game reply is read as the baseline's: top log-probs over A–D and T at the token where the
parsed answer was written, else the parsed text (a hand-over said in words is T), labelled
``decision_source``; ``game_records`` grades it with ``delegate.grade_game`` (the record the
toolkit's game writes), the source marked on the question set, so ``summarize_game``
(``summarize_delegate``) never pools sources.
"""

from __future__ import annotations

import dataclasses
import math
import random
from typing import Any

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.log import EvalLog, read_eval_log
from inspect_ai.model import ChatMessageAssistant, ChatMessageUser, GenerateConfig
from inspect_ai.scorer import CORRECT, INCORRECT, Score, Target, accuracy, scorer, stderr
from inspect_ai.solver import TaskState, generate

from introspect.data import MCQuestion
from introspect.integrations.inspect.selfknowledge import delegate_pool, read_output
from introspect.integrations.inspect.sk_records import (
    generate_config,
    header_of,
    sk_records,
)
from introspect.records.jsonl import trial_id, validate
from introspect.report.inspect_mc import summarize_game  # noqa: F401  (imported from here)
from introspect.tasks.selfknowledge import delegate as DG
from introspect.tasks.selfknowledge.common import PREFILL, Decision
from introspect.tasks.selfknowledge.surface import surface

GAME_KEY = "introspect_game"
GAME_LETTERS = "ABCDT"
POOL_ARGS = ("questions", "n", "history_len", "pool", "digits", "terms", "ops", "seed")


def baseline_of(log: EvalLog) -> tuple[dict[str, dict[str, Any]], str]:
    """(the baseline per question id, its decision source) from a ``delegate_baseline`` log."""
    recs = [r for r in sk_records(log)[1:] if r["task"] == "delegate-baseline"]
    if not recs:
        raise ValueError(f"{log.location}: no delegate-baseline records; run the delegate_baseline task first")
    sources = sorted({r["grade"]["decision_source"] for r in recs})
    if len(sources) > 1:
        counts = {s: sum(r["grade"]["decision_source"] == s for r in recs) for s in sources}
        raise ValueError(f"{log.location}: the baseline mixes decision sources {counts}; the game needs one "
                         "truth (rerun the baseline, or with logprobs=false for text throughout)")
    base = {r["grade"]["qid"]: {**r["grade"], "prompt": r["prompt"], "response": r["response"]} for r in recs}
    return base, sources[0]


def selection(log: EvalLog) -> tuple[str, list[MCQuestion], list[MCQuestion], dict[str, dict[str, Any]], str, int]:
    """(question set, phase-1 questions, game questions, baseline by id, baseline source, seed):
    the toolkit's ``delegate.selection`` over the pool the baseline log asked."""
    args = {k: v for k, v in log.eval.task_args.items() if k in POOL_ARGS}
    seed, n, h = int(args.get("seed", 0)), int(args.get("n", 50)), int(args.get("history_len", 50))
    stem, qs = delegate_pool(**args)
    base, source = baseline_of(log)
    graded = [q for q in qs if q.id in base]  # a question without a record (an errored sample) is excluded
    order = random.Random(f"delegate:strat:{seed}").sample(graded, len(graded))
    hist, game = DG.stratified(order, {q.id: bool(base[q.id]["correct"]) for q in graded}, n, h)
    for q in hist + game:
        base[q.id]["pool_excluded"] = len(qs) - len(graded)
    return stem, hist, game, {q.id: base[q.id] for q in hist + game}, source, seed


def _listed(v: Any) -> list:
    return list(dict.fromkeys(v if isinstance(v, (list, tuple)) else [v]))


@scorer(metrics=[accuracy(), stderr(cluster="qid")])
def game_decision():
    """The game reply (``read_output`` over A–D and T) against the key: right when the model
    answers the question itself and correctly (a delegation is not), per reply."""

    async def score(state: TaskState, target: Target) -> Score:
        rd = read_output(state.output, GAME_LETTERS, delegation=True)
        return Score(value=CORRECT if rd["choice"] == target.text else INCORRECT, answer=rd["choice"] or "",
                     explanation=f"{rd['decision_source']} reading", metadata=rd)

    return score


def game_samples(log: EvalLog, teammate_accuracy: Any = 0.5, feedback: Any = False,
                 prefill: bool = False) -> list[Sample]:
    """One Sample per (feedback, teammate accuracy, game question), the toolkit's order."""
    stem, hist, game, base, source, seed = selection(log)
    accs, fbs = [float(a) for a in _listed(teammate_accuracy)], [bool(f) for f in _listed(feedback)]
    if any(not 0 <= a <= 1 for a in accs):
        raise ValueError(f"teammate_accuracy must lie in [0, 1], got {accs}")
    out = []
    for fb in fbs:
        for acc in accs:
            history = DG.phase1(hist, DG.teammate_history(len(hist), acc, seed), fb, base)
            for q in game:
                msgs: list[Any] = [ChatMessageUser(content=DG.game_conversation(history, q).messages[0]["content"])]
                if prefill:
                    msgs.append(ChatMessageAssistant(content=PREFILL))
                meta = {"qid": q.id, "teammate_accuracy": acc, "feedback": fb, "seed": seed, "question_set": stem,
                        "history_len": len(hist), "prefill": prefill, "baseline_source": source,
                        "question": dataclasses.asdict(q), "baseline": base[q.id]}
                out.append(Sample(id=f"{q.id}@t{acc:g}" + ("+feedback" if fb else ""), input=msgs, target=q.answer,
                                  metadata={"qid": q.id, GAME_KEY: meta}))
    return out


@task
def delegate_game(baseline_log: str, teammate_accuracy: Any = 0.5, feedback: Any = False, prefill: bool = False,
                  logprobs: bool = True, top_logprobs: int = 20, max_tokens: int = 16,
                  temperature: float = 0.0) -> Task:
    """The game phase over the baseline in ``baseline_log`` (a ``delegate_baseline`` log)."""
    samples = game_samples(read_eval_log(baseline_log), teammate_accuracy, feedback, prefill)
    cfg = GenerateConfig(max_tokens=max_tokens, temperature=temperature,
                         **({"logprobs": True, "top_logprobs": top_logprobs} if logprobs else {}))
    return Task(dataset=MemoryDataset(samples, name="delegate-game"), solver=generate(), scorer=game_decision(),
                config=cfg, name="delegate")


# ---------------------------------------------------------------- records
def game_grade(meta: dict[str, Any], rd: dict[str, Any], stop_reason: str = "stop") -> tuple[dict[str, Any], str]:
    """(``delegate.grade_game``'s grade of one reply, with the toolkit's extra fields, and the
    question set naming the decision sources)."""
    q = MCQuestion(**{**meta["question"], "options": tuple(meta["question"]["options"])})
    src, probs = rd["decision_source"], rd["probs"]
    d = None if probs is None else Decision(tuple(GAME_LETTERS), tuple(probs[k] for k in GAME_LETTERS),
                                            rd["mass"] if src == "logprobs" else 1.0)
    acc, seed = float(meta["teammate_accuracy"]), int(meta["seed"])
    grade = DG.grade_game(q, meta["baseline"], d, rd["response"], acc, DG.teammate_answers_correctly(seed, acc, q.id))
    if src == "text":  # a parsed letter has no mass or entropy (P(T) is then 0 or 1)
        grade.update(game_mass=None, game_low_mass=False, game_entropy=None)
    elif grade["game_entropy"] is not None and math.isnan(grade["game_entropy"]):
        grade["game_entropy"] = None  # every letter outside the top log-probs: no A–D distribution
    bsrc = meta["baseline_source"]
    qset = (f"{meta['question_set']}+{src}" + ("" if bsrc == src else f"+baseline-{bsrc}")
            + ("+prefill" if meta.get("prefill") else ""))
    grade.update(source=qset, feedback=bool(meta["feedback"]), history_len=int(meta["history_len"]),
                 game_cut=stop_reason == "max_tokens", decision_source=src, baseline_decision_source=bsrc, **surface(q))
    return grade, qset


def reply_records(rows: Any, *, model_id: str, run_id: str = "", ts: str = "", task: str | None = None,
                  gen: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One validated ``delegate`` record per ``(metadata[GAME_KEY], input, output, epoch, sample
    id)``, whatever produced them (an Inspect log, or outputs in hand), in (epoch, sample id)
    order, so a summary's resampling does not depend on the order Inspect finished them."""
    trials = []
    for i, (meta, input, output, epoch, sid) in enumerate(sorted(rows, key=lambda r: (r[3], str(r[4])))):
        rd = read_output(output, GAME_LETTERS, delegation=True)
        grade, qset = game_grade(meta, rd, output.stop_reason)
        variant = DG._variant(qset, float(meta["teammate_accuracy"]), bool(meta["feedback"]))
        name = task or "delegate"
        trials.append(validate({
            "type": "trial", "seed": int(meta["seed"]), "model_id": model_id, "task": name,
            "condition": "clean", "layer_idx": None, "alpha": 0.0, "alpha_units": "raw", "alpha_effective": 0.0,
            "word": None, "injected": False, "token_positions": None,
            "prompt": input if isinstance(input, str) else "\n\n".join(f"{m.role}: {m.text}" for m in input),
            "response": rd["response"], "grade": grade,
            "gen": {**(gen or {}), "decision_source": rd["decision_source"], "format": "chat"},
            "p_yes": None, "p_no": None, "variant": variant, "trial_index": i, "sample": epoch - 1,
            "trial_id": trial_id(run_id=run_id, task=name, variant=variant, qid=meta["qid"], epoch=epoch),
            "run_id": run_id, "ts": ts,
            "extra": {"inspect_sample_id": sid, "epoch": epoch, "decision_token": rd["decision_token"],
                      "baseline_prompt": meta["baseline"].get("prompt"),
                      "baseline_response": meta["baseline"].get("response")},
        }))
    return trials


def game_records(log: EvalLog, *, task: str | None = None) -> list[dict[str, Any]]:
    """A header and one ``delegate`` record per answered game sample (and epoch)."""
    rows = [(s.metadata[GAME_KEY], s.input, s.output, s.epoch, s.id) for s in (log.samples or [])
            if GAME_KEY in (s.metadata or {}) and s.error is None]
    trials = reply_records(rows, model_id=log.eval.model, run_id=log.eval.run_id, ts=str(log.eval.created),
                           task=task, gen=generate_config(log))
    return [header_of(log, trials, task), *trials] if trials else []
