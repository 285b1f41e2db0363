"""Inspect messages as toolkit conversations, and what every provider output's metadata names.

Why a module of its own: the provider (generation) and the readout (task D's forward pass) both
turn Inspect messages into a toolkit prompt and stamp the same metadata; neither imports the other.
"""

from __future__ import annotations

from inspect_ai.model import ChatMessage

from introspect.engine.run.chat import Conversation, Prompt, render
from introspect.integrations.inspect.request import RequestError
from introspect.records.jsonl import versions as toolkit_versions

METADATA_KEY = "introspect"


def versions() -> dict[str, str]:
    """The toolkit's package versions and inspect_ai's (the name is normalised: inspect-ai's)."""
    return toolkit_versions("inspect_ai")


def conversation(messages: list[ChatMessage], marks: dict[str, str]) -> Conversation:
    """Inspect messages as a toolkit conversation: text content only; a trailing assistant
    message is a prefill (the answer continues it)."""
    turns: list[tuple[str, str]] = []
    for m in messages:
        if m.role == "tool":
            raise RequestError("the introspect provider does not run tools (tool messages in the input)")
        if not isinstance(m.content, str) and any(getattr(c, "type", "text") not in ("text", "reasoning")
                                                  for c in m.content):
            raise RequestError("the introspect provider takes text input only (found images, audio or documents)")
        turns.append((m.role, m.text))
    prefill = None
    if turns and turns[-1][0] == "assistant":
        prefill = turns.pop()[1]
    return Conversation.of(*turns, prefill=prefill, **marks)


def rendered(tokenizer: object, messages: list[ChatMessage], marks: dict[str, str], what: str) -> Prompt:
    """The messages rendered with the model's template and ``marks``; a mark the prompt lacks is
    a request error naming ``what`` was asked (one line, never a traceback)."""
    try:
        return render(tokenizer, conversation(messages, marks))
    except ValueError as e:
        if isinstance(e, RequestError):
            raise
        raise RequestError(f"{what}: {e}") from e

