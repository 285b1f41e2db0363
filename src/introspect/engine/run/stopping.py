"""When a generated row ends: end-of-sequence and end-of-turn tokens, stop strings, markers.

Why a module: a chat model ends its turn with a token that often lives only in
``generation_config`` (Gemma's ``<end_of_turn>``, Llama-3's ``<|eot_id|>``) or only in its chat
template, not in ``config.eos_token_id``; missing it lets a row run on into a made-up next turn.
And checking stop strings by re-decoding a row's whole output at every step costs O(n²) per row:
here each step decodes only a tail window long enough to hold any stop string or marker.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# end-of-turn / end-of-text tokens of common chat formats (used only if the tokenizer has them)
END_OF_TURN = ("<end_of_turn>", "<|eot_id|>", "<|im_end|>", "<|end|>", "<|eom_id|>", "<|endoftext|>",
               "<|end_of_text|>", "</s>", "<｜end▁of▁sentence｜>", "<|return|>")


def _ids(x: Any) -> list[int]:
    if x is None:
        return []
    return [int(i) for i in (x if isinstance(x, (list, tuple, set)) else [x]) if i is not None]


def _template_end(tok: Any) -> int | None:
    """The special token the chat template writes right after an assistant turn's text."""
    if not getattr(tok, "chat_template", None):
        return None
    probe = "Xq7Zv"
    try:
        text = tok.apply_chat_template([{"role": "user", "content": "hi"}, {"role": "assistant", "content": probe}],
                                       tokenize=False)
    except Exception:  # a template that rejects this conversation has told us nothing
        return None
    after = text[text.rfind(probe) + len(probe):] if probe in text else ""
    ids = tok(after, add_special_tokens=False)["input_ids"] if after else []
    special = set(getattr(tok, "all_special_ids", ())) | {
        i for i, t in getattr(tok, "added_tokens_decoder", {}).items() if getattr(t, "special", False)}
    for i in ids:
        if i in special:
            return int(i)
        if tok.decode([i]).strip():
            return None  # ordinary text follows the turn: no end token to learn
    return None


def eos_ids(model: Any) -> frozenset[int]:
    """Every token that ends a generated row: the config's, the tokenizer's and
    ``generation_config``'s end-of-sequence ids, the chat template's end-of-turn token, and known
    end-of-turn tokens the tokenizer has. Computed once per model."""
    cached = getattr(model, "_introspect_eos", None)
    if cached is not None:
        return cached
    tok = model.tokenizer
    hf = getattr(model, "original_model", None)
    found = set(_ids(getattr(model.cfg, "eos_token_id", None))) | set(_ids(tok.eos_token_id))
    for src in (getattr(hf, "generation_config", None), getattr(hf, "config", None)):
        found |= set(_ids(getattr(src, "eos_token_id", None)))
    end = _template_end(tok)
    if end is not None:
        found.add(end)
    vocab = tok.get_vocab()
    found |= {vocab[t] for t in END_OF_TURN if t in vocab}
    out = frozenset(found)
    try:
        object.__setattr__(model, "_introspect_eos", out)
    except AttributeError:
        pass
    return out


class Tails:
    """Per-row stop-string and marker checks over the last few generated tokens.

    A stop string is looked for in the tail decoded both without and with special tokens (so a
    stop naming a special token works); markers are matched on the text without them, as the
    answer's text is. The window holds at least 4 tokens per character of the longest string
    (a character can take 4 byte-level tokens) plus slack, so a string that ends at the newest
    token always lies inside it.
    """

    def __init__(self, tok: Any, stops: Sequence[str], markers: Sequence[str]):
        self.tok, self.stops, self.markers = tok, tuple(stops), tuple(markers)
        longest = max((len(s) for s in (*self.stops, *self.markers)), default=0)
        self.window = 4 * longest + 4

    def _text(self, ids: Sequence[int], special: bool) -> str:
        return self.tok.decode(list(ids[-self.window:]), skip_special_tokens=not special)

    def stopped(self, ids: Sequence[int]) -> bool:
        if not self.stops or not ids:
            return False
        plain, raw = self._text(ids, False), self._text(ids, True)
        return any(s in plain or s in raw for s in self.stops)

    def ends_with(self, ids: Sequence[int], marker: str) -> bool:
        return bool(ids) and self._text(ids, False).endswith(marker)


def cut_at_stop(text: str, stops: Sequence[str]) -> str:
    """The text before the first stop string in it (unchanged if none occurs)."""
    hits = [text.index(s) for s in stops if s in text]
    return text[:min(hits)] if hits else text
