"""What each output row keeps while its batch decodes: its tokens, their log-probabilities, the
full distributions asked for, and why it stopped; and the ``Generation`` it becomes.

Why apart from the decoding loop (``decode._run_batch``): the loop's job is model calls, the KV
cache and which batch slot holds which row; what a row records of a step is the same whatever
the cache does, and is easier to check on its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from introspect.engine.run.stopping import Tails, cut_at_stop


@dataclass(frozen=True)
class Generation:
    """One output row: text, generated ids, log-probabilities, and how it was produced."""

    text: str
    tokens: tuple[int, ...]
    first_logprobs: Float[Tensor, " vocab"]  # full distribution at the first generated step
    token_logprobs: tuple[float, ...] = ()  # log p of each generated token
    step_logprobs: dict[int, Tensor] = field(default_factory=dict)  # full distribution at asked steps
    marked_logprobs: dict[str, Tensor] = field(default_factory=dict)  # at the step after a marker
    sample: int = 0
    seed: int | None = None  # this row's RNG stream (None when greedy)
    stop_reason: str = "length"  # "eos", "stop", or "length" (cut by max_new_tokens)
    batch: int = 0  # rows of the batch it was decoded in (its rounding depends on them)
    top_logprobs: tuple[tuple[tuple[int, float], ...], ...] = ()  # per generated token: its step's top k (id, log p)

    @property
    def truncated(self) -> bool:
        return self.stop_reason == "length"


class RowRecords:
    """Per output row: ids, chosen log-probs, top-k, full distributions at asked steps and after
    markers, stop reason. Rows are indexed by output row; a step arrives by batch slot, with
    ``None`` for a finished (idle) slot."""

    def __init__(self, rows: int, eos: set[int], tails: Tails, steps: set[int], markers: tuple[str, ...], top_k: int):
        self.eos, self.tails, self.steps, self.markers, self.top_k = eos, tails, steps, markers, top_k
        self.ids: list[list[int]] = [[] for _ in range(rows)]
        self.token_lp: list[list[float]] = [[] for _ in range(rows)]
        self.top_lp: list[list[tuple[tuple[int, float], ...]]] = [[] for _ in range(rows)]
        self.step_lp: list[dict[int, Tensor]] = [{} for _ in range(rows)]
        self.mark_lp: list[dict[str, Tensor]] = [{} for _ in range(rows)]
        self.reason = ["length"] * rows

    def take(self, t: int, slots: list[int | None], lps: Float[Tensor, "slot vocab"],
             nxt: Tensor) -> tuple[list[int], dict[int, int]]:
        """Record step ``t`` (log-softmax ``lps`` per slot, chosen ids ``nxt``) for the live slots.
        Returns the slots that finished at this step and each live row's chosen id."""
        nxt_h = nxt.tolist()  # all that crosses to the host each step ...
        lp_h = lps.gather(1, nxt[:, None])[:, 0].tolist()
        if self.top_k:  # ... and, when asked, each row's k most likely tokens
            top_v, top_i = lps.topk(min(self.top_k, lps.shape[-1]), dim=-1)
            top_h = [tuple(zip(i, v)) for i, v in zip(top_i.tolist(), top_v.tolist())]
        live = [j for j, r in enumerate(slots) if r is not None]
        want = {j: [mk for mk in self.markers if mk not in self.mark_lp[slots[j]]
                    and self.tails.ends_with(self.ids[slots[j]], mk)] for j in live}
        full_rows = [j for j in live if t == 0 or t in self.steps or want[j]]
        if full_rows:  # the few full distributions asked for
            full = lps[torch.tensor(full_rows, device=lps.device)].cpu()
            for k, j in enumerate(full_rows):
                if t == 0 or t in self.steps:
                    self.step_lp[slots[j]][t] = full[k]
                for mk in want[j]:
                    self.mark_lp[slots[j]][mk] = full[k]
        done = []
        for j in live:
            r, tid = slots[j], nxt_h[j]
            if tid in self.eos:
                self.reason[r] = "eos"
                done.append(j)
                continue
            self.ids[r].append(tid)
            self.token_lp[r].append(lp_h[j])
            if self.top_k:
                self.top_lp[r].append(top_h[j])
            if self.tails.stopped(self.ids[r]):
                self.reason[r] = "stop"
                done.append(j)
        return done, {slots[j]: nxt_h[j] for j in live}

    def generations(self, tokenizer: Any, stops: tuple[str, ...], samples: list[int],
                    seeds: list[int | None]) -> list[Generation]:
        """Each row's text (cut at its stop string) and record, in output-row order."""
        res = []
        for r in range(len(self.ids)):
            text = tokenizer.decode(self.ids[r], skip_special_tokens=True)
            if self.reason[r] == "stop":
                text = cut_at_stop(text, stops)
            res.append(Generation(text, tuple(self.ids[r]), self.step_lp[r][0], tuple(self.token_lp[r]),
                                  self.step_lp[r], self.mark_lp[r], samples[r], seeds[r], self.reason[r],
                                  top_logprobs=tuple(self.top_lp[r])))
        return res
