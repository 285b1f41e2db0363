"""Reading one Yes/No or A/B decision from an Inspect model output (the SEB tasks' decisions).

Why a module of its own: the reading decides what every SEB figure on an API model means (the
log-probs at the token where the parsed answer was written, or the parsed text one-hot, never
mixed), and it is tested apart from the sessions that make the calls.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from inspect_ai.model import Logprob, ModelOutput

from introspect.integrations.inspect.selfknowledge import MARKUP, label_probs
from introspect.tasks.selfknowledge.common import YES_NO, Decision
from introspect.tasks.selfknowledge.parse import parse_letter


def label_of(token: str, spellings: dict[str, Sequence[str]]) -> str | None:
    """The label a token spells (" Yes", "yes", "**B", "B."), else None."""
    s = token.strip().lstrip(MARKUP).rstrip(".,:;!*_`\"')")
    return next((k for k, forms in spellings.items() if s in forms), None)


_YES_NO = re.compile(r"^[\s\"'*`(\[]*(?:answer\s*[:=]?\s*[\s\"'*`(\[]*)?(yes|no)\b", re.I)


def parse_yes_no(text: str) -> str | None:
    """"yes" / "no" when the reply starts with it (after markup or "Answer:"), else None."""
    m = _YES_NO.match(text)
    return m.group(1).lower() if m else None


def parse_label(text: str, spellings: dict[str, Sequence[str]]) -> str | None:
    return parse_yes_no(text) if set(spellings) == set(YES_NO) else parse_letter(text, "".join(spellings))


def _content(output: ModelOutput) -> list[Logprob]:
    first = output.choices[0] if output.choices else None
    return first.logprobs.content if first is not None and first.logprobs is not None else []


def read_decision(output: ModelOutput, spellings: dict[str, Sequence[str]], source: str) -> dict[str, Any]:
    """One decision as JSON (``probs`` over the labels, ``mass``, ``text`` the parsed label,
    ``step`` the token read), from ``source``: ``logprobs`` reads the top log-probs at the first
    token spelling the parsed label (None without one, never a text guess); ``text`` one-hot."""
    text = parse_label(output.completion, spellings)
    probs: dict[str, float] | None = None
    mass: float | None = None
    step: int | None = None
    if source == "logprobs":
        content = _content(output)
        step = next((i for i, lp in enumerate(content) if text is not None and label_of(lp.token, spellings) == text),
                    None)
        if step is not None:
            read = label_probs(content[step], list(spellings), lambda tok: label_of(tok, spellings))
            if read is not None:
                probs, mass = read
    elif text is not None:
        probs = {k: float(k == text) for k in spellings}
    return {"probs": probs, "mass": mass, "text": text, "step": step, "source": source}


def as_decision(rd: dict[str, Any]) -> Decision | None:
    """The toolkit's ``Decision`` of a reading (a text reading has mass 1: it is nulled in the grade)."""
    if rd["probs"] is None:
        return None
    labels = tuple(rd["probs"])
    return Decision(labels, tuple(rd["probs"][k] for k in labels), rd["mass"] if rd["mass"] is not None else 1.0)
