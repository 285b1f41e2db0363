"""Helpers the three self-knowledge task modules share: sessions, option knobs, answer parsers.

Why shared: SEB, the Delegate Game and recovery all run fresh single-turn sessions batched by
length, read the same ``--option`` knobs and parse the same letter / final-integer replies.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from introspect.chat import Conversation, Prompt, render
from introspect.inject import Generation, generate
from introspect.tasks.base import RunContext


def run_sessions(ctx: RunContext, convs: Sequence[Conversation], max_new_tokens: int,
                 ) -> tuple[list[Prompt], list[Generation]]:
    """Render and greedily generate, shortest prompts batched together (less padding)."""
    tok = ctx.model.tokenizer
    prompts = [render(tok, c) for c in convs]
    return prompts, generate_sorted(ctx, prompts, max_new_tokens)


def generate_sorted(ctx: RunContext, prompts: Sequence[Prompt], max_new_tokens: int,
                    ) -> list[Generation]:
    if not prompts:
        return []
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    gens = generate(ctx.model, [prompts[i] for i in order], max_new_tokens=max_new_tokens,
                    batch_size=ctx.cfg.batch_size)
    out: list[Generation | None] = [None] * len(prompts)
    for i, g in zip(order, gens):
        out[i] = g
    return out  # type: ignore[return-value]


def user(text: str, prefill: str | None = None) -> Conversation:
    return Conversation.of(("user", text), prefill=prefill)


def parse_letter(text: str, letters: str = "AB") -> str | None:
    """The chosen option letter (upper case only, so the article "a" never counts): a leading
    letter standing alone ("B", "B: ...", "Option B,"; not "A pet ..."), else the only letter
    written as an option label ("B:", "(B)", "is B."); None if absent or ambiguous."""
    cls = f"[{letters}]"
    m = re.match(rf"[\s\"'*(]*(?:(?i:option|answer)\s*(?:is)?\s*:?\s*)?({cls})(?=\s*$|\s*[:.),\]])",
                 text)
    if m:
        return m.group(1)
    found = set(re.findall(rf"(?<![A-Za-z0-9])\(?({cls})(?:[:.)]|$)", text))
    found |= set(re.findall(rf"(?i:\boption|\banswer is)\s+\(?({cls})\b", text))
    return found.pop() if len(found) == 1 else None


_INT = re.compile(r"(?<![\d.])-?\d[\d,]*(?![\d])")


def parse_final_int(text: str) -> int | None:
    """The final answer: the number after the last "Answer:"/"=" if any, else the last integer."""
    for pat in (r"answer\s*(?:is)?\s*:?\s*", r"=\s*"):
        hits = list(re.finditer(pat + r"(-?\d[\d,]*)", text, re.I))
        if hits:
            return int(hits[-1].group(1).replace(",", ""))
    nums = _INT.findall(text)
    return int(nums[-1].replace(",", "")) if nums else None


def arith_tag(digits: Any, terms: Any, ops: str) -> str:
    """Short name of an arithmetic setting ("arith-d1-3t2+-*"), so runs at different
    difficulty knobs get different variants and are never pooled by the summaries."""
    def f(v: Any) -> str:
        return "-".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)
    return f"arith-d{f(digits)}t{f(terms)}{ops}"


def _opt(ctx: RunContext, key: str, default: Any) -> Any:
    v = ctx.cfg.option(key, default)
    return default if v is None else v


def _n(ctx: RunContext, default: int) -> int:
    return int(_opt(ctx, "n", default))


def _session_log(prompts: Sequence[Prompt], gens: Sequence[Generation]) -> list[dict[str, str]]:
    return [{"prompt": p.text, "response": g.text} for p, g in zip(prompts, gens)]


def _knob(v: Any) -> Any:
    return tuple(v) if isinstance(v, (list, tuple)) else v
