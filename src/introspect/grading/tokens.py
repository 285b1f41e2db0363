"""White-box yes/no: which single tokens spell "yes"/"no", and their next-token probabilities.

Why: p(yes) on the first answer token is the graded-free score every yes/no question reports
beside the text grade; only spellings that are exactly one known token can be compared.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

_YES_VARIANTS = ("yes", "Yes", "YES", " yes", " Yes", " YES")
_NO_VARIANTS = ("no", "No", "NO", " no", " No", " NO")


def _single_token_ids(tokenizer: Any, variants: Sequence[str], word: str) -> list[int]:
    out: list[int] = []
    unk = getattr(tokenizer, "unk_token_id", None)
    for v in variants:
        ids = tokenizer.encode(v, add_special_tokens=False)
        if len(ids) != 1 or ids[0] == unk or ids[0] in out:
            continue
        if tokenizer.decode(ids).strip().casefold() == word:
            out.append(int(ids[0]))
    return out


def yes_no_token_ids(tokenizer: Any) -> tuple[list[int], list[int]]:
    """Ids of the yes/no spellings that are exactly one (known) token, so their logits compare."""
    yes = _single_token_ids(tokenizer, _YES_VARIANTS, "yes")
    no = _single_token_ids(tokenizer, _NO_VARIANTS, "no")
    if not yes or not no:
        raise ValueError("tokenizer has no single-token spelling of 'yes' or 'no'")
    return yes, no


def yes_no_probs(
    logits_1d: Any, yes_ids: Sequence[int], no_ids: Sequence[int]
) -> tuple[float, float, float]:
    """(p_yes, p_no, p_yes / (p_yes + p_no)) from next-token logits, softmax over the vocab."""
    import torch

    logp = torch.log_softmax(logits_1d.detach().double().reshape(-1), dim=-1)
    ly = torch.logsumexp(logp[list(yes_ids)], dim=0)
    ln = torch.logsumexp(logp[list(no_ids)], dim=0)
    norm = torch.exp(ly - torch.logaddexp(ly, ln))
    return float(ly.exp()), float(ln.exp()), float(norm)
