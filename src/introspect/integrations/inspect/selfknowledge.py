"""Self-knowledge multiple-choice benchmarks as Inspect tasks that run on any Inspect model.

``inspect eval src/introspect/integrations/inspect/selfknowledge.py@ability --model openai/gpt-4o-mini
-T items=../shared/data/evals_sandbagging_mmlu200.jsonl`` (or ``@delegate_baseline``: the Delegate
Game's baseline phase over its question pool) asks each item once per cyclic rotation of its
options (``rotations``, on by default: the item's key sits at every letter once), one Sample per
(item, rotation), built by the toolkit's own item generation (``ability.plan`` over its file,
``delegate._pool``) with the toolkit's prompts.

The decision of every sample is read by ``read_output``, one way per output:

- ``logprobs``: the output carries log-probabilities (the task asks for them:
  ``GenerateConfig(logprobs=True, top_logprobs=20)``; OpenAI-style providers and ``introspect`` return them). The
  letter distribution is read from the top log-probs at the token where the parsed answer letter
  was written (with ``prefill`` that is the first token, as in the toolkit): every top token that
  spells a letter (" B", "B") adds its probability to that letter, renormalised over the letters,
  and ``mass`` keeps what they had before (letters outside the top k count 0).
- ``text``: no log-probs returned (most providers other than OpenAI-style ones and ``introspect``). The
  decision is the letter the toolkit's parser (``selfknowledge.parse.parse_letter``) reads, a
  one-hot distribution; unparsed is no decision (wrong, never a guess).

Each reading says which it is (``decision_source``), and ``records.sk_records`` keeps logprob
and text decisions in separate variants, so no summary pools them. Inspect's own metric here is
the per-rotation accuracy of the raw letter with a standard error clustered by item (``qid``: an
item's rotations are not independent); the verdicts, the letter-free decision over rotations and
the intervals come from the toolkit's summariser over ``sk_records(log)`` (``summarize_mc``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import (
    ChatMessageAssistant,
    ChatMessageUser,
    GenerateConfig,
    Logprob,
    ModelOutput,
)
from inspect_ai.scorer import CORRECT, INCORRECT, Score, Target, accuracy, scorer, stderr
from inspect_ai.solver import TaskState, generate

from introspect.data import MCQuestion
from introspect.data.files import LETTERS
from introspect.tasks.base import TaskConfig
from introspect.tasks.selfknowledge import ability as AB
from introspect.tasks.selfknowledge import delegate as DG
from introspect.tasks.selfknowledge.common import PREFILL
from introspect.tasks.selfknowledge.parse import is_delegation, parse_letter

SK_KEY = "introspect_sk"  # the sample metadata of these tasks (what ``records.sk_records`` reads)
SOURCES = ("logprobs", "text")
MARKUP = "*_`\"'([{"  # stripped from a token before it is read as a letter ("**B" -> B)


# ---------------------------------------------------------------- reading one output
def letter_of(token: str, letters: str) -> str | None:
    """The option letter a token spells (" B", "B", "**B", "(B"), else None."""
    s = token.strip().lstrip(MARKUP)
    return s if len(s) == 1 and s in letters else None


def decision_step(content: list[Logprob], letters: str, text_choice: str | None) -> int | None:
    """The generated token where the parsed answer letter was written: the first token that
    spells it (so "A good answer is B" reads at " B", not at the article). None unparsed."""
    if text_choice is None:
        return None
    return next((i for i, lp in enumerate(content) if letter_of(lp.token, letters) == text_choice), None)


def label_probs(step: Logprob, labels: Sequence[str],
                read: Callable[[str], str | None]) -> tuple[dict[str, float], float] | None:
    """(distribution over ``labels`` renormalised, the raw mass on them) from one token's top
    log-probs, each token counted for the label ``read`` finds in it (the chosen token counts if
    the provider left it out); None without any label."""
    entries = {t.token: t.logprob for t in (step.top_logprobs or [])}
    entries.setdefault(step.token, step.logprob)
    p = dict.fromkeys(labels, 0.0)
    for tok, lp in entries.items():
        label = read(tok)
        if label is not None:
            p[label] += math.exp(lp)
    mass = sum(p.values())
    if mass <= 0:
        return None
    return {k: v / mass for k, v in p.items()}, mass


def letter_probs(step: Logprob, letters: str) -> tuple[dict[str, float], float] | None:
    """``label_probs`` over option letters (" B", "**B", "(B" all read as B)."""
    return label_probs(step, letters, lambda tok: letter_of(tok, letters))


def _argmax(probs: dict[str, float] | None) -> str | None:
    return max(probs, key=probs.__getitem__) if probs else None


def read_output(output: ModelOutput, letters: str, delegation: bool = False) -> dict[str, Any]:
    """The decision of one output: from its top log-probs when it carries any, else from its
    parsed text (see the module docstring). JSON: ``decision_source``, ``probs`` (letter ->
    probability, None when there is no decision), ``mass`` (logprobs only), ``choice``,
    ``text_choice`` (the parser's letter, always), ``parse_ok``, ``decision_token``.
    ``delegation`` (the Delegate Game): a hand-over said in words reads as "T", as there."""
    text = output.completion
    tc = parse_letter(text, letters) or ("T" if delegation and is_delegation(text) else None)
    first = output.choices[0] if output.choices else None
    content = first.logprobs.content if first is not None and first.logprobs is not None else []
    mass: float | None = None
    step: int | None = None
    if content:
        source = "logprobs"
        step = decision_step(content, letters, tc)
        got = letter_probs(content[step], letters) if step is not None else None
        probs, mass = got if got else (None, None)
    else:
        source = "text"
        probs = {k: float(k == tc) for k in letters} if tc else None
    return {"decision_source": source, "probs": probs, "mass": mass, "choice": _argmax(probs),
            "text_choice": tc, "parse_ok": tc is not None, "decision_token": step, "response": text}


@scorer(metrics=[accuracy(), stderr(cluster="qid")])
def mc_decision():
    """The sample's letter decision (``read_output``) against its (rotated) key. The value is
    the raw letter's correctness; the reading is the score's metadata."""

    async def score(state: TaskState, target: Target) -> Score:
        rd = read_output(state.output, state.metadata[SK_KEY]["letters"])
        return Score(value=CORRECT if rd["choice"] == target.text else INCORRECT, answer=rd["choice"] or "",
                     explanation=f"{rd['decision_source']} reading", metadata=rd)

    return score


# ---------------------------------------------------------------- samples
def _ctx(seed: int, **options: Any) -> Any:
    """What the toolkit's plan functions read of a run: its config (chat format: Inspect models
    are chat models; the few-shot layout is the toolkit's own runs' business)."""
    opts = {k: v for k, v in options.items() if v is not None}
    return SimpleNamespace(cfg=TaskConfig(seed=seed, options=tuple(sorted({**opts, "format": "chat"}.items()))),
                           model=None)


def mc_samples(kind: str, stem: str, items: list[MCQuestion], prompt: str, *, rotations: bool = True,
               prefill: bool = False, seed: int = 0) -> list[Sample]:
    """One Sample per (item, rotation) (rotation 0 only without ``rotations``): the toolkit's
    prompt over the rotated item, target its rotated key, ``metadata[SK_KEY]`` what the records
    need (the item's rotation-0 key, the rotation, the letters), ``metadata["qid"]`` the cluster."""
    out = []
    for q in items:
        n = len(q.options) if rotations else 1
        letters = LETTERS[:len(q.options)]
        for r in range(n):
            qr = q.rotated(r)
            msgs: list[Any] = [ChatMessageUser(content=prompt.format(q=qr.format()))]
            if prefill:
                msgs.append(ChatMessageAssistant(content=PREFILL))
            meta = {"kind": kind, "question_set": stem, "qid": q.id, "rotation": r, "n_rotations": n,
                    "key": q.answer, "letters": letters, "topic": q.topic, "prefill": prefill, "seed": seed}
            out.append(Sample(id=f"{q.id}@r{r}", input=msgs, target=qr.answer, metadata={"qid": q.id, SK_KEY: meta}))
    return out


def _task(kind: str, stem: str, items: list[MCQuestion], prompt: str, *, rotations: bool, prefill: bool,
          seed: int, logprobs: bool, top_logprobs: int, max_tokens: int, temperature: float, epochs: int) -> Task:
    if not items:
        raise ValueError(f"{kind}: no multiple-choice items to ask")
    cfg = GenerateConfig(max_tokens=max_tokens, temperature=temperature,
                         **({"logprobs": True, "top_logprobs": top_logprobs} if logprobs else {}))
    return Task(dataset=MemoryDataset(mc_samples(kind, stem, items, prompt, rotations=rotations, prefill=prefill, seed=seed),
                                      name=f"{kind}-{stem}"),
                solver=generate(), scorer=mc_decision(), config=cfg, epochs=epochs, name=kind)


def ability_items(items: str, n: int | None = None, seed: int = 0) -> tuple[str, list[MCQuestion]]:
    """(file stem, the items) the toolkit's ability task plans (``ability.plan``: a seeded
    ``n`` of the file's multiple-choice items, in file order)."""
    ctx = _ctx(seed, ability_items=items, ability_n=n)
    stem, qs = AB._items(str(items))
    by_id = {q.id: q for q in qs}
    return stem, [by_id[t.param("qid")] for t in AB.plan(ctx)]


def delegate_pool(questions: str = "arithmetic", n: int = 50, history_len: int = 50, pool: int | None = None,
                  digits: Any = 2, terms: Any = 2, ops: str = "+-", seed: int = 0) -> tuple[str, list[MCQuestion]]:
    """(variant stem, the multiple-choice questions) of the Delegate Game's pool
    (``delegate._pool``: what its baseline phase answers before the game is drawn)."""
    ctx = _ctx(seed, questions=questions, n=n, history_len=history_len, pool=pool, digits=digits,
               terms=terms, ops=ops)
    stem, qs = DG._pool(ctx)
    mc = [q for q in qs if isinstance(q, MCQuestion)]
    if len(mc) != len(qs):
        raise ValueError(f"{questions}: {len(qs) - len(mc)} short-answer questions; the Inspect baseline "
                         "reads letter decisions only (give a multiple-choice file)")
    return stem, mc


@task
def ability(items: str, n: int | None = None, seed: int = 0, rotations: bool = True, prefill: bool = False,
            logprobs: bool = True, top_logprobs: int = 20, max_tokens: int = 16, temperature: float = 0.0,
            epochs: int = 1) -> Task:
    """The ability task's items (``-T items=FILE``: MMLU JSONL, hendrycks or GPQA CSV), each
    under every cyclic rotation of its options."""
    stem, qs = ability_items(items, n, seed)
    return _task("ability", stem, qs, AB.PROMPT, rotations=rotations, prefill=prefill, seed=seed,
                 logprobs=logprobs, top_logprobs=top_logprobs, max_tokens=max_tokens, temperature=temperature, epochs=epochs)


@task
def delegate_baseline(questions: str = "arithmetic", n: int = 50, history_len: int = 50, pool: int | None = None,
                      digits: Any = 2, terms: Any = 2, ops: str = "+-", seed: int = 0, rotations: bool = True,
                      prefill: bool = False, logprobs: bool = True, top_logprobs: int = 20, max_tokens: int = 16,
                      temperature: float = 0.0, epochs: int = 1) -> Task:
    """The Delegate Game's baseline phase: its pool (generated arithmetic by default, or a
    ``questions`` file), each item under every cyclic rotation of its options."""
    stem, qs = delegate_pool(questions, n, history_len, pool, digits, terms, ops, seed)
    return _task("delegate-baseline", stem, qs, DG.BASELINE_MC, rotations=rotations, prefill=prefill,
                 seed=seed, logprobs=logprobs, top_logprobs=top_logprobs, max_tokens=max_tokens,
                 temperature=temperature, epochs=epochs)
