"""Conversations to token ids, with exact token spans of marked substrings.

Why here: every task injects at token positions ("the sentence's tokens", "from the blank line
before Trial 1 onwards"), so positions must come from the same tokenisation the model sees.
We render the chat template to text, tokenise once with offsets, and map each marked character
span to the tokens that overlap it (seed §2 ``tokens_for_spans``). Base models without a chat
template get a plain "Human:/Assistant:" layout.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

PLAIN_ROLES = {"system": "System", "user": "Human", "assistant": "Assistant"}


@dataclass(frozen=True)
class Conversation:
    """What a prompt builder returns: turns, an optional prefilled assistant turn, and marks.

    ``marks`` maps a name to a substring whose token span the task needs (e.g.
    ``{"sentence": "The cat sat."}``); its *last* occurrence in the rendered text is used, so a
    sentence quoted in the user turn and written again in the prefill marks the prefill.
    """

    messages: tuple[Mapping[str, str], ...]
    prefill: str | None = None
    marks: Mapping[str, str] = field(default_factory=dict)

    @staticmethod
    def of(*turns: tuple[str, str], prefill: str | None = None, **marks: str) -> Conversation:
        return Conversation(
            tuple({"role": r, "content": c} for r, c in turns), prefill, dict(marks)
        )


@dataclass(frozen=True)
class Prompt:
    """Token ids ready for the model, the text they decode from, and named token spans."""

    ids: tuple[int, ...]
    text: str
    spans: Mapping[str, tuple[int, int]] = field(default_factory=dict)  # name -> [start, end)

    def __len__(self) -> int:
        return len(self.ids)

    def positions(self, name: str) -> list[int]:
        start, end = self.spans[name]
        return list(range(start, end))

    @staticmethod
    def from_ids(ids: Sequence[int], tokenizer: Any) -> Prompt:
        return Prompt(tuple(int(i) for i in ids), tokenizer.decode(list(ids)))


def has_chat_template(tokenizer: Any) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def render_text(tokenizer: Any, conv: Conversation, *, chat: bool | None = None) -> str:
    """The prompt as text (special tokens included) that ``render`` tokenises."""
    use_chat = has_chat_template(tokenizer) if chat is None else chat
    msgs = [dict(m) for m in conv.messages]
    if use_chat:
        text = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    else:
        text = "".join(f"{PLAIN_ROLES.get(m['role'], m['role'])}: {m['content']}\n\n" for m in msgs)
        text += "Assistant:"
        if conv.prefill is not None:
            text += " "
    if conv.prefill is not None:
        text += conv.prefill
    return text


def render(tokenizer: Any, conv: Conversation, *, chat: bool | None = None) -> Prompt:
    """Tokenise a conversation and locate its marked substrings as token spans."""
    text = render_text(tokenizer, conv, chat=chat)
    # Chat templates usually write BOS themselves; plain text needs it added (if the model has one).
    add_special = not (has_chat_template(tokenizer) if chat is None else chat)
    enc = tokenizer(text, add_special_tokens=add_special, return_offsets_mapping=True)
    ids = enc["input_ids"]
    offsets = enc["offset_mapping"]
    spans: dict[str, tuple[int, int]] = {}
    for name, sub in conv.marks.items():
        at = text.rfind(sub) if sub else -1
        if at < 0:
            raise ValueError(f"marked substring {name!r}={sub!r} does not occur in the prompt")
        spans[name] = char_span_to_tokens(offsets, at, at + len(sub))
    return Prompt(tuple(int(i) for i in ids), text, spans)


def char_span_to_tokens(offsets: Sequence[tuple[int, int]], start: int, end: int) -> tuple[int, int]:
    """Token span [first, last+1) of every token overlapping characters [start, end)."""
    hit = [i for i, (a, b) in enumerate(offsets) if b > a and a < end and b > start]
    if not hit:
        raise ValueError(f"no token covers characters {start}:{end}")
    return hit[0], hit[-1] + 1
