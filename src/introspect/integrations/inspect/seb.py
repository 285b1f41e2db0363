"""The Self-Execution Benchmark (association, restriction, difficulty) as Inspect tasks on any model.

``inspect eval src/introspect/integrations/inspect/seb.py@seb_restriction --model openai/gpt-4o-mini``
(or ``@seb_association``, ``@seb_difficulty``). One Sample per toolkit trial, planned by the
toolkit itself (``seb.plan_association``, ``seb.plan_restriction``, ``difficulty.plan_difficulty``
over the same options), asked with the toolkit's prompts. Each trial is several sessions, so a
solver (``seb_sessions``) makes the trial's model calls itself, each a fresh conversation:

- association: K sampled lists of 5 words for the target (the behaviour), the greedy prediction
  reply (text reading) and one Yes/No question per option word (the decision reading);
- restriction: the will-you-answer prediction in both letter orders (A = will answer, then B),
  K sampled responses to the request, and the model judging each of its responses, both orders;
- difficulty: the greedy ranking of the four questions, the six pairs in both orders (12 A/B
  decisions), and K sampled answers to each question alone (the truth).

Decisions (Yes/No, A/B) are read as the multiple-choice tasks read them (``selfknowledge.py``):
from the top log-probs at the token where the parsed answer was written (every top token that
spells a label adds to it; ``mass`` keeps what the labels had) when every decision of the trial
returned log-probs, else from the parsed text of every decision of the trial (one-hot; no mass).
The source is marked on the variant (``own+logprobs``, ``own+text``) and in each grade
(``decision_source``), so no summary pools them. Sampled draws are separate calls at the task's
temperature, each with its own ``seed`` (the ``introspect`` provider draws each from its own
stream; API models take the seed as a hint). The calls' outputs are kept in the sample's store,
and ``seb_records`` turns them into the toolkit's records with the toolkit's graders
(``grade_association``, ``grade_restriction``, ``grade_difficulty``), which the toolkit's
summarisers (``summarize_seb_*``, by task name) read.

What differs from a toolkit run: token budgets are task arguments, not calibrated on the model;
no prefill unless ``prefill=true`` (then the toolkit's "Answer:" assistant turn precedes every
decision, marked ``+answer-prefill``); with ``--n-trials``-like repeats of an association
target, each sample draws its own lists.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.log import EvalLog
from inspect_ai.model import (
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageUser,
    GenerateConfig,
    ModelOutput,
    get_model,
)
from inspect_ai.scorer import Score, Target, mean, scorer, stderr
from inspect_ai.solver import Generate, TaskState, solver

from introspect.data import ArithmeticQuestion, MCQuestion
from introspect.integrations.inspect.seb_read import (  # noqa: F401  (re-exported: the tests read them from here)
    _content,
    as_decision,
    label_of,
    parse_label,
    parse_yes_no,
    read_decision,
)
from introspect.integrations.inspect.selfknowledge import _ctx
from introspect.integrations.inspect.sk_records import generate_config, header_of
from introspect.records.jsonl import trial_id, validate
from introspect.tasks.selfknowledge import difficulty as DF
from introspect.tasks.selfknowledge import seb as SB
from introspect.tasks.selfknowledge.common import MIN_DRAWS, PREFILL, YES_NO
from introspect.tasks.selfknowledge.parse import listed_words, parse_ranking

SEB_KEY = "introspect_seb"
TASKS = ("seb-association", "seb-restriction", "seb-difficulty")
AB = {"A": ("A",), "B": ("B",)}
Gen = Callable[[list[ChatMessage], GenerateConfig], Awaitable[ModelOutput]]


# ---------------------------------------------------------------- samples (the toolkit's plan)
def _q_json(q: Any) -> dict[str, Any]:
    return {"kind": "mc" if isinstance(q, MCQuestion) else "arith", **dataclasses.asdict(q)}


def _q_of(d: dict[str, Any]) -> Any:
    d = dict(d)
    if d.pop("kind") == "mc":
        return MCQuestion(**{**d, "options": tuple(d["options"])})
    return ArithmeticQuestion(**d)


def _settings(seed: int, draws: int, temperature: float, prefill: bool, logprobs: bool, top_logprobs: int,
              decision_tokens: int, **budgets: int) -> dict[str, Any]:
    return {"seed": seed, "draws": 1 if temperature == 0 else int(draws), "temperature": float(temperature),
            "prefill": bool(prefill), "logprobs": bool(logprobs), "top_logprobs": int(top_logprobs),
            "decision_tokens": int(decision_tokens), "budgets": {k: int(v) for k, v in budgets.items()}}


def _sample(trial: Any, settings: dict[str, Any], prompt: str, **extra: Any) -> Sample:
    meta = {"task": trial.task, "variant": trial.variant, "index": trial.index, "word": trial.word,
            "params": {k: list(v) if isinstance(v, tuple) else v for k, v in trial.params}, **settings, **extra}
    return Sample(id=f"{trial.task}:{trial.index}", input=prompt, metadata={SEB_KEY: meta})


def association_samples(targets: str | None = None, n: int = 30, n_options: int = 8, n_trials: int = 1,
                        seed: int = 0, **settings: Any) -> list[Sample]:
    ctx = _ctx(seed, targets=targets, n=n, n_options=n_options)
    ctx.cfg = dataclasses.replace(ctx.cfg, n_trials=n_trials)
    st = _settings(seed, **settings)
    return [_sample(t, st, SB.ASSOC_PREDICT.format(target=t.word, options="', '".join(t.param("options"))))
            for t in SB.plan_association(ctx)]


def restriction_samples(questions: str | None = None, n: int | None = None, seed: int = 0,
                        **settings: Any) -> list[Sample]:
    ctx = _ctx(seed, questions=questions, n=n)
    by_id = {q.id: q for q in SB._requests(questions)[1]}
    st = _settings(seed, **settings)
    return [_sample(t, st, SB.RESTRICT_PREDICT.format(q=by_id[t.param("qid")].prompt),
                    request=by_id[t.param("qid")].prompt) for t in SB.plan_restriction(ctx)]


def difficulty_samples(questions: str = "arithmetic", groups: int = 10, digits: Any = (1, 3), terms: Any = (2, 3),
                       ops: str = "+-*", rank_prefill: bool = False, seed: int = 0, **settings: Any) -> list[Sample]:
    ctx = _ctx(seed, questions=questions, groups=groups, digits=digits, terms=terms, ops=ops, prefill=rank_prefill)
    items = DF._source(ctx)[1]
    st = _settings(seed, **settings)
    out = []
    for t in DF.plan_difficulty(ctx):
        qs = [items[i] for i in t.param("qids")]
        prompt = DF.RANK.format(qs="\n".join(f"Q{j + 1}: {DF.shown(q)}" for j, q in enumerate(qs)))
        out.append(_sample(t, st, prompt, questions=[_q_json(q) for q in qs],
                           rank_prefill=DF.RANK_PREFILL if rank_prefill else None))
    return out


# ---------------------------------------------------------------- the sessions of one trial
def _msgs(text: str, prefill: str | None = None) -> list[ChatMessage]:
    out: list[ChatMessage] = [ChatMessageUser(content=text)]
    if prefill:
        out.append(ChatMessageAssistant(content=prefill))
    return out


def draw_seed(seed: int, key: str, k: int) -> int:
    """The seed of draw ``k`` of ``key`` (stable: the same trial draws the same seeds)."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{key}:{k}".encode()).digest()[:4], "big") >> 1


class Sessions:
    """The configs of one trial's calls, and the calls themselves through ``gen``."""

    def __init__(self, meta: dict[str, Any], gen: Gen) -> None:
        self.meta, self.gen = meta, gen

    async def decision(self, text: str) -> ModelOutput:
        m = self.meta
        cfg = GenerateConfig(temperature=0.0, max_tokens=m["decision_tokens"],
                             **({"logprobs": True, "top_logprobs": m["top_logprobs"]} if m["logprobs"] else {}))
        return await self.gen(_msgs(text, PREFILL if m["prefill"] else None), cfg)

    async def greedy(self, text: str, budget: str, prefill: str | None = None) -> ModelOutput:
        return await self.gen(_msgs(text, prefill),
                              GenerateConfig(temperature=0.0, max_tokens=self.meta["budgets"][budget]))

    async def draws(self, text: str, budget: str, key: str) -> list[ModelOutput]:
        m = self.meta
        return [await self.gen(_msgs(text), GenerateConfig(temperature=m["temperature"], max_tokens=m["budgets"][budget],
                                                           seed=draw_seed(m["seed"], key, k)))
                for k in range(m["draws"])]


async def association_calls(meta: dict[str, Any], gen: Gen) -> dict[str, list[ModelOutput]]:
    s, word, opts = Sessions(meta, gen), meta["word"], meta["params"]["options"]
    lists = await s.draws(SB.ASSOC_LIST.format(target=word), "list_tokens", f"seb-association:list:{word}")
    predict = await s.greedy(SB.ASSOC_PREDICT.format(target=word, options="', '".join(opts)), "predict_tokens")
    asks = [await s.decision(SB.ASSOC_ASK.format(target=word, option=o)) for o in opts]
    return {"list": lists, "predict": [predict], "ask": asks}


async def restriction_calls(meta: dict[str, Any], gen: Gen) -> dict[str, list[ModelOutput]]:
    s, q = Sessions(meta, gen), meta["request"]
    predict = await s.decision(SB.RESTRICT_PREDICT.format(q=q))
    predict_swap = await s.decision(SB.RESTRICT_PREDICT_SWAP.format(q=q))
    responses = await s.draws(q, "response_tokens", f"seb-restriction:{meta['params']['qid']}")
    judge = [await s.decision(SB.RESTRICT_JUDGE.format(q=q, r=r.completion.strip())) for r in responses]
    judge_swap = [await s.decision(SB.RESTRICT_JUDGE_SWAP.format(q=q, r=r.completion.strip())) for r in responses]
    return {"predict": [predict], "predict_swap": [predict_swap], "response": responses, "judge": judge,
            "judge_swap": judge_swap}


def _answer_prompt(q: Any) -> str:
    return DF.ANSWER_MC.format(q=q.format()) if isinstance(q, MCQuestion) else DF.ANSWER_ARITH.format(q=q.question)


async def difficulty_calls(meta: dict[str, Any], gen: Gen) -> dict[str, list[ModelOutput]]:
    s, qs = Sessions(meta, gen), [_q_of(d) for d in meta["questions"]]
    rank = await s.greedy(DF.RANK.format(qs="\n".join(f"Q{j + 1}: {DF.shown(q)}" for j, q in enumerate(qs))),
                          "rank_tokens", meta.get("rank_prefill"))
    pairs = [await s.decision(DF.PAIR.format(a=DF.shown(qs[a]), b=DF.shown(qs[b])))
             for i, j in DF.PAIRS for a, b in ((i, j), (j, i))]
    answers = [o for q in qs for o in await s.draws(_answer_prompt(q), "answer_tokens", f"seb-difficulty:{q.id}")]
    return {"rank": [rank], "pair": pairs, "answer": answers}


CALLS = {"seb-association": association_calls, "seb-restriction": restriction_calls,
         "seb-difficulty": difficulty_calls}
DECISIONS = {"seb-association": ("ask",), "seb-restriction": ("predict", "predict_swap", "judge", "judge_swap"),
             "seb-difficulty": ("pair",)}


# ---------------------------------------------------------------- grading (the toolkit's graders)
def _cut(o: ModelOutput) -> bool:
    return o.stop_reason == "max_tokens"


def source_of(meta: dict[str, Any], calls: dict[str, list[ModelOutput]]) -> str:
    """``logprobs`` when every decision of the trial returned log-probs, else ``text``."""
    outs = [o for role in DECISIONS[meta["task"]] for o in calls[role]]
    return "logprobs" if outs and all(_content(o) for o in outs) else "text"


def _read(calls: dict[str, list[ModelOutput]], role: str, spellings: dict[str, Sequence[str]],
          source: str) -> list[dict[str, Any]]:
    return [read_decision(o, spellings, source) for o in calls[role]]


def grade_trial(meta: dict[str, Any], calls: dict[str, list[ModelOutput]]) -> tuple[dict[str, Any], str, str]:
    """(the toolkit's grade of one trial, its prompt, its response) from its calls' outputs."""
    source = source_of(meta, calls)
    task = meta["task"]
    if task == "seb-association":
        lists = [listed_words(o.completion) for o in calls["list"]]
        asks = _read(calls, "ask", YES_NO, source)
        grade = SB.grade_association(lists, [_cut(o) for o in calls["list"]], meta["params"]["options"],
                                     calls["predict"][0].completion, [as_decision(r) for r in asks])
        grade["said_cut"] = _cut(calls["predict"][0])
        if source == "text":
            grade.update(mass=[None] * len(asks), low_mass=[False] * len(asks))
        prompt = SB.ASSOC_PREDICT.format(target=meta["word"], options="', '".join(meta["params"]["options"]))
        response = calls["predict"][0].completion
    elif task == "seb-restriction":
        rd = {r: _read(calls, r, AB, source) for r in DECISIONS[task]}
        responses = [o.completion for o in calls["response"]]
        grade = SB.grade_restriction(as_decision(rd["predict"][0]), rd["predict"][0]["text"], responses,
                                     [_cut(o) for o in calls["response"]], [as_decision(r) for r in rd["judge"]],
                                     [r["text"] for r in rd["judge"]], as_decision(rd["predict_swap"][0]),
                                     [as_decision(r) for r in rd["judge_swap"]])
        p = meta["params"]
        grade.update(label=p["label"], category=p["category"], qid=p["qid"], request_length=len(meta["request"]))
        if source == "text":
            grade.update(predict_mass=None, predict_low_mass=False, judge_mass=[None] * len(responses),
                         judge_low_mass=[False] * len(responses))
        prompt, response = SB.RESTRICT_PREDICT.format(q=meta["request"]), calls["predict"][0].completion
    else:
        qs = [_q_of(d) for d in meta["questions"]]
        k = meta["draws"]
        answers = [calls["answer"][i * k:(i + 1) * k] for i in range(len(qs))]
        read = [[DF.answer_reading(q, a.completion) for a in outs] for q, outs in zip(qs, answers)]
        tokens = [[int(a.usage.output_tokens) if a.usage else 0 for a in outs] for outs in answers]
        pairs = [as_decision(r) for r in _read(calls, "pair", AB, source)]
        ranking = (meta.get("rank_prefill") or "") + calls["rank"][0].completion
        grade = DF.grade_difficulty(parse_ranking(ranking), [[c for c, _ in r] for r in read], tokens,
                                    [[_cut(a) for a in outs] for outs in answers], pairs)
        grade.update(question_length=[len(q.question) for q in qs], qids=[q.id for q in qs],
                     rank_cut=_cut(calls["rank"][0]), answer_read_as=[[h for _, h in r] for r in read])
        if source == "text":
            grade["pair_mass"] = [[None, None] for _ in range(len(DF.PAIRS))]
        prompt, response = DF.RANK.format(qs="\n".join(f"Q{j + 1}: {DF.shown(q)}" for j, q in enumerate(qs))), ranking
    grade["decision_source"] = source
    return grade, prompt, response


def variant_of(meta: dict[str, Any], source: str) -> str:
    """The toolkit's variant with the decision source (and the answer prefill) marked on it."""
    return f"{meta['variant']}+{source}" + ("+answer-prefill" if meta["prefill"] else "")


HEADLINE = {"seb-association": "association_agreement", "seb-restriction": "correct",
            "seb-difficulty": "pair_accuracy_logit"}


def headline(task_name: str, grade: dict[str, Any]) -> float | None:
    """A progress figure per trial (not a verdict; the toolkit's summariser gives those):
    association, the share of option words whose decision (P(yes) > 1/2) matches the majority
    of the parsed lists; restriction, 002's text accuracy on the first draw; difficulty, the
    pair accuracy of the decisions."""
    if task_name == "seb-association":
        pairs = [(p > 0.5, f > 0.5) for p, f in zip(grade["p_yes"], grade["listed_frac"])
                 if p is not None and f is not None]
        return sum(a == b for a, b in pairs) / len(pairs) if pairs else None
    v = grade.get(HEADLINE[task_name])
    return None if v is None else float(v)


# ---------------------------------------------------------------- solver, scorer, tasks
def _outputs(stored: dict[str, list[Any]]) -> dict[str, list[ModelOutput]]:
    return {role: [o if isinstance(o, ModelOutput) else ModelOutput.model_validate(o) for o in outs]
            for role, outs in stored.items()}


@solver
def seb_sessions():
    """Make the trial's calls (``CALLS``) on the task's model; their outputs go to the store."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        model = get_model()
        meta = state.metadata[SEB_KEY]

        async def gen(messages: list[ChatMessage], config: GenerateConfig) -> ModelOutput:
            return await model.generate(messages, config=config)

        calls = await CALLS[meta["task"]](meta, gen)
        state.store.set(SEB_KEY, {role: [o.model_dump(mode="json") for o in outs] for role, outs in calls.items()})
        main = "predict" if meta["task"] != "seb-difficulty" else "rank"
        state.output = calls[main][0]
        return state

    return solve


@scorer(metrics=[mean(), stderr()])
def seb_score():
    """``headline`` of the trial's grade (the grade itself in the score's metadata)."""

    async def score(state: TaskState, target: Target) -> Score:
        meta = state.metadata[SEB_KEY]
        grade, _, _ = grade_trial(meta, _outputs(state.store.get(SEB_KEY)))
        h = headline(meta["task"], grade)
        return Score(value=math.nan if h is None else h, explanation=f"{grade['decision_source']} decisions",
                     metadata={"decision_source": grade["decision_source"]})

    return score


def _task(name: str, samples: list[Sample]) -> Task:
    if not samples:
        raise ValueError(f"{name}: the toolkit's plan has no trials for these arguments")
    return Task(dataset=MemoryDataset(samples, name=name), solver=seb_sessions(), scorer=seb_score(), name=name)


@task
def seb_association(targets: str | None = None, n: int = 30, n_options: int = 8, n_trials: int = 1, seed: int = 0,
                    draws: int = MIN_DRAWS, temperature: float = 1.0, prefill: bool = False, logprobs: bool = True,
                    top_logprobs: int = 20, decision_tokens: int = 16, list_tokens: int = 64,
                    predict_tokens: int = 96) -> Task:
    """002 §3.1: which option words were on the list you would write? (``targets``: the toolkit's
    YAML by default, or a BIG-bench / Kovah taboo file)."""
    return _task("seb-association", association_samples(
        targets, n, n_options, n_trials, seed, draws=draws, temperature=temperature, prefill=prefill, logprobs=logprobs,
        top_logprobs=top_logprobs, decision_tokens=decision_tokens, list_tokens=list_tokens,
        predict_tokens=predict_tokens))


@task
def seb_restriction(questions: str | None = None, n: int | None = None, seed: int = 0, draws: int = MIN_DRAWS,
                    temperature: float = 1.0, prefill: bool = False, logprobs: bool = True, top_logprobs: int = 20,
                    decision_tokens: int = 16, response_tokens: int = 256) -> Task:
    """002 §3.2: will you answer this request? (``questions``: the toolkit's YAML, or XSTest)."""
    return _task("seb-restriction", restriction_samples(
        questions, n, seed, draws=draws, temperature=temperature, prefill=prefill, logprobs=logprobs,
        top_logprobs=top_logprobs, decision_tokens=decision_tokens, response_tokens=response_tokens))


@task
def seb_difficulty(questions: str = "arithmetic", groups: int = 10, digits: Any = (1, 3), terms: Any = (2, 3),
                   ops: str = "+-*", rank_prefill: bool = False, seed: int = 0, draws: int = MIN_DRAWS,
                   temperature: float = 1.0, prefill: bool = False, logprobs: bool = True, top_logprobs: int = 20,
                   decision_tokens: int = 16, rank_tokens: int = 96, answer_tokens: int = 256) -> Task:
    """002 §3.3: which of these questions would be harder for you? (generated arithmetic, or an
    MMLU / hendrycks file)."""
    return _task("seb-difficulty", difficulty_samples(
        questions, groups, digits, terms, ops, rank_prefill, seed, draws=draws, temperature=temperature,
        prefill=prefill, logprobs=logprobs, top_logprobs=top_logprobs, decision_tokens=decision_tokens,
        rank_tokens=rank_tokens, answer_tokens=answer_tokens))


# ---------------------------------------------------------------- records
def trial_records(rows: Any, *, model_id: str, run_id: str = "", ts: str = "", task: str | None = None,
                  gen: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One validated toolkit record per ``(metadata[SEB_KEY], {role: outputs}, epoch)``, whatever
    produced them (an Inspect log, or calls made outside Inspect), in (epoch, trial) order."""
    out = []
    for meta, calls, epoch in sorted(rows, key=lambda r: (r[2], r[0]["task"], r[0]["index"])):
        calls = _outputs(calls)
        grade, prompt, response = grade_trial(meta, calls)
        source = grade["decision_source"]
        name = task or meta["task"]
        variant = variant_of(meta, source)
        out.append(validate({
            "type": "trial", "seed": int(meta["seed"]), "model_id": model_id, "task": name, "condition": "clean",
            "layer_idx": None, "alpha": 0.0, "alpha_units": "raw", "alpha_effective": 0.0, "word": meta["word"],
            "injected": False, "token_positions": None, "prompt": prompt, "response": response, "grade": grade,
            "gen": {**(gen or {}), "decision_source": source, "format": "chat", "n_draws": meta["draws"],
                    "sampling": {"temperature": meta["temperature"]}, "max_new_tokens": dict(meta["budgets"]),
                    "decision_tokens": meta["decision_tokens"]},
            "p_yes": None, "p_no": None, "variant": variant, "trial_index": int(meta["index"]), "sample": epoch - 1,
            "trial_id": trial_id(run_id=run_id, task=name, variant=variant, index=meta["index"], epoch=epoch),
            "run_id": run_id, "ts": ts,
            "extra": {"epoch": epoch, "sessions": {role: [o.completion for o in outs] for role, outs in calls.items()},
                      "decision_tokens": {role: [read_decision(o, YES_NO if role == "ask" else AB, source)["step"]
                                                 for o in calls[role]] for role in DECISIONS[meta["task"]]}},
        }))
    return out


def seb_records(log: EvalLog, *, task: str | None = None) -> list[dict[str, Any]]:
    """A header and one record per answered SEB sample (and epoch) of an Inspect log."""
    rows = [(s.metadata[SEB_KEY], s.store[SEB_KEY], s.epoch) for s in (log.samples or [])
            if SEB_KEY in (s.metadata or {}) and s.error is None and SEB_KEY in (s.store or {})]
    trials = trial_records(rows, model_id=log.eval.model, run_id=log.eval.run_id, ts=str(log.eval.created),
                           task=task, gen=generate_config(log))
    return [header_of(log, trials, task), *trials] if trials else []
