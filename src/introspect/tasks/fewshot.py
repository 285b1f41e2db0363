"""A few-shot "Human: … Assistant:" format for models without a chat template (every answered task).

Why: a base model asked a bare question continues the text; it does not answer "A" or "Yes" at
a prefilled "Answer:", so every logit decision puts almost no mass on the allowed answers and
every free answer runs to the token budget (Gemma 3 270M: low-mass and cut rates 1.0). A short
transcript of worked examples in the seed's "Human: … Assistant:" layout shows the format
first. The examples are balanced so they teach the format, not an answer: as many "yes" as
"no", every letter used once (T too in the game), one answer and one refusal, and they never
mention the items under test: each example lists its key terms, and an example whose terms
occur in the prompt it would precede is replaced by another with the same label (tested).

Each task registers its examples (``register``) with its own templates, so the examples read
exactly like the question that follows; the self-knowledge tasks (``common.rendered``) and the
injection tasks A–C (``injection.common.render_trial``) prepend them when the run's format is
``fewshot`` (automatic without a chat template, or ``--option format=fewshot`` for any model).
The variant then carries ``+fewshot``, so trial ids and summaries never mix the two formats, and
records say which format ran. In the injection tasks the injected concept is never in the prompt
text, so examples are also checked against it (``avoid``). Task D is teacher-forced (its sentence
is prefilled and no answer is read), so it has no answer format to teach.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from introspect.engine.run.chat import Conversation, has_chat_template
from introspect.tasks.base import ConfigError

STOP = ("\nHuman:", "\nhuman:", "\n\nH:")  # the made-up next turn a base model writes
FORMATS = ("auto", "chat", "fewshot")
SUFFIX = "+fewshot"


def prompt_format(ctx: Any) -> str:
    """``chat`` (the model's chat template) or ``fewshot`` (worked examples in the seed's
    "Human: … Assistant:" layout): ``--option format=...``; ``auto`` (default) picks
    ``fewshot`` exactly when the tokenizer has no chat template."""
    f = ctx.cfg.option("format", "auto")
    f = "auto" if f is None else str(f)
    if f not in FORMATS:
        raise ConfigError(f"option format must be one of {', '.join(FORMATS)}, got {f!r}")
    if f == "auto":
        return "chat" if has_chat_template(ctx.model.tokenizer) else "fewshot"
    return f


def fmt_variant(ctx: Any, variant: str) -> str:
    """The variant, marked ``+fewshot`` when that format runs (trial ids and summaries never mix
    the two formats)."""
    return variant + SUFFIX if prompt_format(ctx) == "fewshot" else variant


def split_variant(variant: str) -> tuple[str, bool]:
    """(the variant without the format mark, whether it ran few-shot)."""
    return (variant[: -len(SUFFIX)], True) if variant.endswith(SUFFIX) else (variant, False)


@dataclass(frozen=True)
class Example:
    label: str  # what the example answers ("yes", "A", "answer", "refuse", ...)
    user: str
    assistant: str
    keys: tuple[str, ...]  # terms that must not occur in the prompt under test
    before: tuple[tuple[str, str], ...] = ()  # earlier (role, text) turns of a multi-turn example


_POOLS: dict[str, tuple[tuple[str, ...], list[Example]]] = {}


def register(kind: str, labels: Sequence[str], examples: Sequence[Example]) -> None:
    """Examples of one question kind and the labels a transcript shows, in order."""
    missing = [lab for lab in labels if not any(e.label == lab for e in examples)]
    if missing:
        raise ValueError(f"few-shot kind {kind!r}: no example for labels {missing}")
    _POOLS[kind] = (tuple(labels), list(examples))


def kinds() -> list[str]:
    return sorted(_POOLS)


def _mentions(text: str, key: str) -> bool:
    return re.search(rf"(?<![\w]){re.escape(key.lower())}(?![\w])", text.lower()) is not None


def pick(kind: str, text: str, avoid: Sequence[str] = ()) -> list[Example]:
    """The transcript's examples for a prompt whose text is ``text``: one per label, the first
    of that label none of whose key terms occurs in ``text`` or is one of ``avoid`` (a label
    with no such example is left out rather than shown with an item under test)."""
    if kind not in _POOLS:
        raise KeyError(f"no few-shot examples registered for {kind!r}; kinds: {kinds()}")
    labels, pool = _POOLS[kind]
    out: list[Example] = []
    for lab in labels:
        for e in pool:
            if e.label == lab and e not in out and not any(_mentions(text, k) for k in e.keys) \
                    and not any(_mentions(_text(e), w) for w in avoid if w):
                out.append(e)
                break
    return out


def _text(e: Example) -> str:
    return " ".join([*(t for _, t in e.before), e.user, e.assistant])


def with_examples(kind: str, conv: Conversation, avoid: Sequence[str] = ()) -> Conversation:
    """``conv`` preceded by its kind's worked examples as earlier turns (marks kept: a mark is
    the last occurrence of its text, which is in ``conv``)."""
    text = " ".join(m["content"] for m in conv.messages) + " " + (conv.prefill or "")
    turns: list[tuple[str, str]] = []
    for e in pick(kind, text, avoid):
        turns += [*e.before, ("user", e.user), ("assistant", e.assistant)]
    msgs = tuple({"role": r, "content": c} for r, c in turns) + tuple(conv.messages)
    return Conversation(msgs, conv.prefill, dict(conv.marks))


# ---------------------------------------------------------------- content the tasks wrap
# Multiple-choice questions, right letters spread over A–D (two of each), with key terms.
MC_BANK: tuple[tuple[str, tuple[str, ...], str, tuple[str, ...]], ...] = (
    ("Which planet is known as the Red Planet?", ("Venus", "Mars", "Jupiter", "Saturn"), "B",
     ("red planet", "mars")),
    ("How many legs does a spider have?", ("Eight", "Six", "Ten", "Four"), "A", ("spider",)),
    ("Which gas do plants take in from the air for photosynthesis?",
     ("Oxygen", "Nitrogen", "Carbon dioxide", "Helium"), "C", ("photosynthesis",)),
    ("At sea level, water boils at how many degrees Celsius?", ("50", "90", "120", "100"), "D",
     ("boils", "boiling")),
    ("Which is the largest ocean on Earth?", ("Pacific", "Atlantic", "Indian", "Arctic"), "A",
     ("ocean", "pacific")),
    ("Who wrote the play Romeo and Juliet?", ("Charles Dickens", "William Shakespeare", "Jane Austen",
                                              "Mark Twain"), "B", ("romeo", "shakespeare")),
    ("What is the chemical symbol for gold?", ("Ag", "Fe", "Au", "Pb"), "C", ("gold", "chemical symbol")),
    ("Which of these animals is a mammal?", ("Shark", "Eagle", "Frog", "Whale"), "D", ("mammal", "whale")),
)
# Short-answer questions with their answers.
SHORT_BANK: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("What is the capital city of Japan?", "Tokyo", ("japan", "tokyo")),
    ("Which painter made the Mona Lisa?", "Leonardo da Vinci", ("mona lisa", "leonardo")),
    ("What is the tallest mountain on Earth?", "Mount Everest", ("everest", "tallest mountain")),
    ("Which metal is liquid at room temperature?", "Mercury", ("mercury", "liquid at room")),
)


def mc_text(q: tuple) -> str:
    stem, opts = q[0], q[1]
    return stem + "\n" + "\n".join(f"{'ABCDEFGH'[i]}. {o}" for i, o in enumerate(opts))


def mc_examples(template: str, reply: str = "Answer: {L}", **fmt: str) -> list[Example]:
    """Examples of a letter question: ``template`` with ``{q}`` the question, answered with
    its letter; labels are the letters."""
    return [Example(q[2], template.format(q=mc_text(q), **fmt), reply.format(L=q[2]), q[3]) for q in MC_BANK]
