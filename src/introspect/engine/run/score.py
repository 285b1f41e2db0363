"""Log-likelihood of given continuations: each token's log-probability after a prompt, teacher-forced.

Why: a cloze reading of a multiple-choice item scores each option's *text* as what follows the
question, so no answer letter (and no letter prior) enters it. ``generate`` reads distributions
one step at a time; here the whole continuation is fed at once and only the positions that
predict it are unembedded. Rows are left-padded with positions from the mask, as in ``decode``,
so a row scores the same alone or in a batch (to float rounding, ~1e-5 in a log-probability).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from introspect.engine.load import devices
from introspect.engine.run.chat import Prompt
from introspect.engine.run.decode import pad_left
from introspect.engine.run.hf_call import keeps_last_logits


def continuation_logprobs(model: Any, prompts: Sequence[Prompt], continuations: Sequence[Sequence[int]], *,
                          batch_size: int = 16) -> list[Tensor]:
    """Per row, the log-probability of each continuation token given the prompt and the
    continuation tokens before it (float32, on the CPU). The continuation is appended to the
    prompt's ids as given (tokenised on its own, so it is a sequence the model could have
    generated there). A batch that runs out of memory is redone at half the size."""
    if len(prompts) != len(continuations):
        raise ValueError(f"{len(prompts)} prompts but {len(continuations)} continuations")
    if any(len(c) == 0 for c in continuations) or any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt and continuation needs at least one token")
    out: list[Tensor] = []
    size, lo = max(1, min(batch_size, getattr(model, "introspect_batch_cap", batch_size))), 0
    hf = model.original_model
    while lo < len(prompts):
        rows = [Prompt(tuple(p.ids) + tuple(int(t) for t in c), "")
                for p, c in zip(prompts[lo:lo + size], continuations[lo:lo + size])]
        conts = [torch.tensor([int(t) for t in c]) for c in continuations[lo:lo + size]]
        keep = max(len(c) for c in conts) + 1  # the rows end together (left padding)
        toks, mask, _ = pad_left(rows, model.tokenizer.pad_token_id)
        dev = model.cfg.device
        mask = mask.to(dev)
        pos = (mask.long().cumsum(-1) - 1).clamp_(min=0)
        kw = dict(input_ids=toks.to(dev), attention_mask=mask, position_ids=pos, use_cache=False)
        if keeps_last_logits(type(hf)):
            kw["logits_to_keep"] = keep
        try:
            with torch.no_grad():
                logits = hf(**kw).logits[:, -keep:].float()
        except Exception as e:  # out of memory: halve and redo this batch
            size = devices.halve_after_oom(model, e, size)
            continue
        lps = torch.log_softmax(logits, dim=-1).cpu()
        for i, c in enumerate(conts):
            n = len(c)  # position -(n + 1) predicts the first continuation token, -2 the last
            out.append(lps[i, keep - n - 1:keep - 1].gather(-1, c[:, None])[:, 0])
        lo += len(rows)
    return out
