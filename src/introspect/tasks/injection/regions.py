"""Task A by token region: where the injection sits (``--option regions=user,question,answer``).

Why: a "yes" under injection may come from noticing, or from the concept leaking into what the
model reads. Injecting over different regions of the same prompt and comparing, paired by
concept, separates the two (the design of several open replications). A region framing is
written ``<framing>@<region>`` (``paper@user``, ``paper@question+answer``): every region gets its
own matched controls, bias questions and steering check (``steer@<region>``: the paper layout
with its question replaced by the steering request, injected over the same region), so each is
judged like a framing of its own.

The regions of a rendered single-turn framing (paper, explained, seed), in prompt order:

- ``system``: what the chat template writes before the first user message (its system turn and
  the user header), never position 0 (its attention-sink norm). A template that writes fewer than
  ``MIN_SYSTEM`` tokens there has no system turn: one line says so.
- ``user``: from the first user message to the trial line (the preamble, its "Ok." and "Ok,
  let's get started.").
- ``question``: from the trial line ("\\n\\nTrial N: Do you detect …") to the assistant header,
  its last token excluded.
- ``answer``: the prompt's last token (the assistant turn's opening, whose output is the first
  answer token) and every generated token.

``question+answer`` is the paper framing's own span (``injected_span``), to the token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from introspect.engine.run.chat import Conversation, Prompt
from introspect.engine.run.inject import From, Positions
from introspect.tasks import fewshot
from introspect.tasks.base import ConfigError
from introspect.tasks.prompts import FROM_MARK

REGIONS = ("system", "user", "question", "answer")
FRAMINGS = ("paper", "explained", "seed")  # two_turn injects over its turn 1 by design
DEFAULT_FRAMINGS = ("paper",)  # without --variant: Lindsey's prompt
SEP = "@"
USER_MARK = "user0"  # the first user message's text, marked so its first token is known
MIN_SYSTEM = 4


def parse(value: Any) -> tuple[str, ...]:
    """The ``regions`` option as canonical names (parts in prompt order joined by ``+``): a list,
    or one string with ``,`` between regions."""
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    out: list[str] = []
    for item in (str(i).strip() for i in items):
        parts = [p.strip() for p in item.split("+")]
        bad = [p for p in parts if p not in REGIONS]
        if not item or bad or len(set(parts)) != len(parts):
            raise ConfigError(f"unknown region {item!r} in regions; use {', '.join(REGIONS)}, or several joined "
                              f"by '+' (e.g. question+answer), listed with ',' between regions")
        name = "+".join(r for r in REGIONS if r in parts)
        if name not in out:
            out.append(name)
    if not out:
        raise ConfigError("regions is empty; list at least one of " + ", ".join(REGIONS))
    return tuple(out)


def order(region: str) -> list[int]:
    """A region's sort key: its parts' places in the prompt (``system`` first)."""
    return [REGIONS.index(r) for r in region.split("+")]


def name(framing: str, region: str) -> str:
    return f"{framing}{SEP}{region}"


def split(variant: str) -> tuple[str, str | None]:
    """(the variant without its region and format mark, its region or None)."""
    base = fewshot.split_variant(variant)[0]
    framing, _, region = base.partition(SEP)
    return framing, region or None


def with_mark(conv: Conversation) -> Conversation:
    """The conversation with its first user message marked (``USER_MARK``)."""
    first = next(m["content"] for m in conv.messages if m["role"] == "user")
    return replace(conv, marks={**conv.marks, USER_MARK: first})


def positions(prompt: Prompt, region: str) -> list[Positions]:
    """The injection positions of ``region`` on a rendered prompt marked by ``with_mark``: a list
    of prompt positions, or ``From(p)`` when the region runs into the answer; two entries (two
    specs) when the answer is combined with a region that does not touch it."""
    n, u0, q0 = len(prompt), prompt.spans[USER_MARK][0], prompt.spans[FROM_MARK][0]
    if u0 - 1 < MIN_SYSTEM and "system" in region.split("+"):
        raise ConfigError(f"region 'system': this model's chat template writes {max(u0 - 1, 0)} tokens before "
                          f"the first user message (no system turn); choose user, question or answer")
    spans = {"system": range(1, u0), "user": range(u0, q0), "question": range(q0, n - 1), "answer": range(n - 1, n)}
    pos = sorted({p for r in region.split("+") for p in spans[r]})
    if "answer" not in region.split("+"):
        return [pos]
    start = n - 1  # the run of positions that ends at the answer goes on through generation
    while start - 1 in pos:
        start -= 1
    head = [p for p in pos if p < start]
    return [*([head] if head else []), From(start)]


def plan_variants(framings: Sequence[str], regions: Sequence[str]) -> list[str]:
    """Each framing once per region (the format mark kept last); two_turn refused in one line."""
    out = []
    for v in framings:
        base, few = fewshot.split_variant(v)
        if base not in FRAMINGS:
            raise ConfigError(f"regions apply to the {', '.join(FRAMINGS)} framings, not {base!r} "
                              f"(two_turn injects over its turn 1 by design); use --variant "
                              f"{','.join(FRAMINGS)} or a part of it")
        out += [name(base, r) + (fewshot.SUFFIX if few else "") for r in regions]
    return out
