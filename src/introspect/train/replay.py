"""The base model's own answers, replayed during training so the adapter keeps its behaviour.

Why three shapes per question: an adapter that learns "the injection-test preamble means say
yes/no about thoughts" damages exactly the prompts that look like a test and are not one. So each
neutral question is replayed on its own, after an injection-test preamble ("preamble + an
unrelated question"), and as the second user turn of a conversation (multi-turn), each answered
greedily by the base model before any training. Whole questions (with all their shapes) are held
out for the damage gates (``train.gates``): a held-out item's question never reaches training.

The answers are cached on disk (``cached_replay``): they are a pure function of the weights, the
questions and the decoding, and generating them is most of a training's preparation.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from introspect.engine.run.chat import Conversation, render
from introspect.tasks import prompts as P

SHAPES = ("single", "preamble", "multi")
PER_QUESTION = {"single": 1, "preamble": 2, "multi": 2}  # items of each shape made from one question


def preambles() -> tuple[str, ...]:
    """Introductions of injection tests (the task-A paper intro and the training paraphrases)."""
    from introspect.train.phrasings import PARAPHRASES

    return (P.PAPER_A_INTRO, *(intro for intro, _ in PARAPHRASES.values()))


@dataclass(frozen=True)
class ReplayItem:
    """A conversation ending in a user turn and the base model's greedy answer (ids, end of turn kept)."""

    messages: tuple[tuple[str, str], ...]  # (role, content), the last one the user's
    ids: tuple[int, ...]
    shape: str = "single"  # one of SHAPES
    question: int = 0  # index of the neutral question it asks last (held out by question)

    @property
    def prompt(self) -> str:
        """The last user turn (the question asked, after any preamble)."""
        return self.messages[-1][1]

    @property
    def text(self) -> str:
        """Every turn's text (what a leak check must read)."""
        return "\n".join(c for _, c in self.messages)

    def conversation(self) -> Conversation:
        return Conversation.of(*self.messages)

    def to_json(self) -> dict[str, Any]:
        return {"messages": [list(m) for m in self.messages], "ids": list(self.ids), "shape": self.shape,
                "question": self.question}

    @staticmethod
    def from_json(d: dict[str, Any]) -> ReplayItem:
        return ReplayItem(tuple((str(r), str(c)) for r, c in d["messages"]), tuple(int(i) for i in d["ids"]),
                          str(d["shape"]), int(d["question"]))


def heldout_questions(n_questions: int, n_heldout: int, seed: int) -> frozenset[int]:
    """Indices of the questions kept for the damage gates (seeded; at most a fifth of them)."""
    k = min(n_heldout, n_questions // 5)
    return frozenset(random.Random(f"replay-heldout:{seed}").sample(range(n_questions), k))


def layouts(questions: Sequence[str], seed: int) -> list[tuple[str, int, int | None, str | None]]:
    """(shape, question, earlier question for multi-turn, preamble) of every item, seeded."""
    rng = random.Random(f"replay:{seed}")
    pre = preambles()
    out: list[tuple[str, int, int | None, str | None]] = []
    for i in range(len(questions)):
        out.append(("single", i, None, None))
        for p in rng.sample(pre, min(PER_QUESTION["preamble"], len(pre))):
            out.append(("preamble", i, None, p))
        others = [j for j in range(len(questions)) if j != i]
        for j in rng.sample(others, min(PER_QUESTION["multi"], len(others))):
            out.append(("multi", i, j, None))
    return out


def answer_ids(gen: Any, eos: int | None) -> tuple[int, ...]:
    """A generation's ids as a replayed answer: the end-of-turn token kept when it ended there."""
    return (*gen.tokens, *((eos,) if gen.stop_reason == "eos" and eos is not None else ()))


def build_replay(model: Any, questions: Sequence[str], *, seed: int, tokens: int) -> list[ReplayItem]:
    """Every item of ``layouts``, answered greedily by ``model`` as it is now (call before training).

    Two passes: the single questions first (their answers become the earlier assistant turns of
    the multi-turn items), then the preamble and multi-turn items.
    """
    from introspect.engine.run.decode import generate

    tok = model.tokenizer
    eos = tok.eos_token_id

    def answer(convs: list[Conversation]) -> list[tuple[int, ...]]:
        gens = generate(model, [render(tok, c) for c in convs], max_new_tokens=tokens) if convs else []
        return [answer_ids(g, eos) for g in gens]

    plan = layouts(questions, seed)
    singles = answer([Conversation.of(("user", q)) for q in questions])
    first_text = [tok.decode([t for t in ids if t != eos], skip_special_tokens=True).strip() for ids in singles]
    rest: list[tuple[tuple[tuple[str, str], ...], str, int]] = []
    for shape, i, j, pre in plan:
        if shape == "preamble":
            rest.append(((("user", f"{pre}\n\n{questions[i]}"),), shape, i))
        elif shape == "multi":
            assert j is not None
            rest.append(((("user", questions[j]), ("assistant", first_text[j] or "Ok."), ("user", questions[i])),
                         shape, i))
    rest_ids = answer([Conversation.of(*m) for m, _, _ in rest])
    items = [ReplayItem((("user", q),), ids, "single", i) for i, (q, ids) in enumerate(zip(questions, singles))]
    items += [ReplayItem(m, ids, shape, i) for (m, shape, i), ids in zip(rest, rest_ids)]
    return [r for r in items if r.ids]


# ---------------------------------------------------------------- the replay cache
CACHE_FORMAT = 1  # bump when build_replay's answers change for the same inputs (layouts, decoding code)


class ReplayCacheError(OSError):
    """A replay cache file that exists but cannot be read back."""


def replay_root() -> Path:
    """Replay cache folder (``INTROSPECT_CACHE_REPLAY`` overrides; default under the model cache)."""
    from introspect.engine.load.models import cache_root

    env = os.environ.get("INTROSPECT_CACHE_REPLAY")
    return Path(env) if env else cache_root() / "replay"


def cache_key(model: Any, questions: Sequence[str], *, seed: int, tokens: int) -> str:
    """Everything the answers depend on: weights, dtype, device, chat template, the questions and
    their layouts' settings, the decoding libraries' versions, the CPU kernels and thread count
    (a greedy tie may break differently with either) and this module's format."""
    from introspect.engine.load.models import model_info
    from introspect.records.jsonl import versions
    from introspect.train.provenance import machine

    libs = {k: v for k, v in versions().items() if k in ("torch", "transformers", "transformer-lens")}
    where = machine()
    kernels = [where["cpu_capability"], where["torch_threads"]]
    blob = json.dumps([CACHE_FORMAT, model_info(model).fingerprint, str(model.cfg.dtype), str(model.cfg.device),
                       getattr(model.tokenizer, "chat_template", None), list(questions), seed, tokens,
                       list(preambles()), PER_QUESTION, libs, kernels], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def cached_replay(model: Any, questions: Sequence[str], *, seed: int, tokens: int,
                  cache: bool = True) -> tuple[list[ReplayItem], bool]:
    """``build_replay``'s items and whether they came from the cache.

    Read from ``replay_root()`` when this model already answered these questions with these
    settings (``cache_key``), else generated and written atomically. Never cached for a model
    with LoRA layers attached: its answers are not its fingerprint's.
    """
    from introspect.records.atomic import atomic_write_text
    from introspect.train.lora import attached

    if not cache or attached(model):
        return build_replay(model, questions, seed=seed, tokens=tokens), False
    path = replay_root() / f"{cache_key(model, questions, seed=seed, tokens=tokens)}.json"
    if path.exists():
        try:
            items = [ReplayItem.from_json(d) for d in json.loads(path.read_text())["items"]]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ReplayCacheError(f"unreadable replay cache file {path} ({e}); delete it to rebuild") from e
        return items, True
    items = build_replay(model, questions, seed=seed, tokens=tokens)
    atomic_write_text(path, json.dumps({"format": CACHE_FORMAT, "n_questions": len(questions), "seed": seed,
                                        "tokens": tokens, "items": [r.to_json() for r in items]}) + "\n")
    return items, False
