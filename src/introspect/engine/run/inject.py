"""Injection specs and the hooks that add α·v at chosen layers and absolute token positions.

Why positions are absolute: during KV-cached decoding a hook sees only ``[batch, 1, d]``, so
"position 17" cannot be read off the activation. The decode loop (``introspect.engine.run.decode``) tells the
injector where each forward call starts (``at(start)``); without that the injector counts the
positions each hook has already seen (a call longer than the count is a fresh full pass), which is
how TransformerLens's own ``generate`` can drive it. Rows are laid out as
``[shared prefix | left pad | own tokens]`` (the prefix is empty unless the decode loop shares one),
so a row's prompt position ``i`` sits at ``i`` inside the prefix and at ``pad + i`` after it;
generated step ``t`` at ``width + t``.

Hooks are attached only inside TransformerLens's ``model.hooks()`` context, which removes them on
exit, exceptions included. Generation itself lives in ``introspect.engine.run.decode``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, Union

import torch
from jaxtyping import Float, Int
from torch import Tensor

from introspect.engine.run.chat import Prompt


@dataclass(frozen=True)
class From:
    """Inject from prompt position ``start`` onwards, through every generated token."""

    start: int


Positions = Union[Sequence[int], Literal["prompt", "generated", "all"], From]


class InjectionError(ValueError):
    """An injection that cannot be applied as asked (bad layer, size, alpha or positions)."""


@dataclass(frozen=True)
class InjectionSpec:
    """Seed §3's spec: add ``alpha * vector`` at ``layer_idx`` on ``token_positions``.

    ``apply_on_input=False`` edits ``blocks.L.hook_resid_post`` (the block's output), True edits
    ``blocks.L.hook_resid_pre`` (its input). Positions are prompt token indices (unpadded), or
    ``"prompt"``, ``"generated"``, ``"all"``, or ``From(p)``.
    """

    layer_idx: int
    alpha: float
    vector: Float[Tensor, " d_model"]
    token_positions: Positions = "all"
    apply_on_input: bool = False

    @property
    def hook_name(self) -> str:
        where = "hook_resid_pre" if self.apply_on_input else "hook_resid_post"
        return f"blocks.{self.layer_idx}.{where}"

    def validate(self, model: Any, prompt_len: int) -> None:
        n_layers, d_model = model.cfg.n_layers, model.cfg.d_model
        if not 0 <= self.layer_idx < n_layers:
            raise InjectionError(f"layer {self.layer_idx} out of range; this model has layers 0..{n_layers - 1}")
        if tuple(self.vector.shape) != (d_model,):
            raise InjectionError(f"vector has shape {tuple(self.vector.shape)}; expected ({d_model},) for this model")
        if not math.isfinite(float(self.alpha)):
            raise InjectionError(f"alpha must be a finite number, got {self.alpha}")
        if not bool(torch.isfinite(self.vector).all()):
            raise InjectionError("vector contains NaN or inf")
        pos = self.token_positions
        if isinstance(pos, From):
            bad = [pos.start] if not 0 <= pos.start < prompt_len else []
        elif isinstance(pos, str):
            if pos not in ("prompt", "generated", "all"):
                raise InjectionError(f"unknown position mode {pos!r}; use prompt, generated, all or From(p)")
            bad = []
        else:
            bad = [p for p in pos if not 0 <= int(p) < prompt_len]
        if bad:
            raise InjectionError(f"positions {bad} lie outside the prompt (length {prompt_len})")


RowSpecs = Union[InjectionSpec, Sequence[InjectionSpec], None]


def _as_list(x: RowSpecs) -> list[InjectionSpec]:
    if x is None:
        return []
    if isinstance(x, InjectionSpec):
        return [x]
    return list(x)


def pad_left(prompts: Sequence[Prompt], pad_id: int) -> tuple[Int[Tensor, "b p"], Int[Tensor, "b p"], list[int]]:
    """Left-pad token ids; return (tokens, attention_mask, pad offset per row)."""
    width = max(len(p) for p in prompts)
    toks = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    offsets = []
    for i, p in enumerate(prompts):
        off = width - len(p)
        toks[i, off:] = torch.tensor(p.ids, dtype=torch.long)
        mask[i, off:] = 1
        offsets.append(off)
    return toks, mask, offsets


class BatchInjector:
    """Hooks that add each row's injections at absolute (padded) positions, prompt and decode.

    α·v of the selected rows is built once per selection and device, in the model's dtype, so a
    decoding step moves nothing to the device unless the batch changed; the positions'
    bookkeeping (and ``fired``) stays on the host, so counting never waits for the device.
    """

    def __init__(self, model: Any, row_specs: Sequence[RowSpecs], prompts: Sequence[Prompt],
                 offsets: Sequence[int], prefix_len: int = 0):
        self.prefix_len = prefix_len
        self.width = max(offsets[i] + len(p) for i, p in enumerate(prompts))
        self.start: int | None = None  # set by the decode loop before each forward call
        self.n_rows = len(prompts)
        self._slot: Tensor | None = None
        self._weight = torch.ones(self.n_rows, dtype=torch.long)
        groups: dict[str, list[tuple[int, InjectionSpec]]] = {}
        for row, specs in enumerate(row_specs):
            for spec in _as_list(specs):
                spec.validate(model, len(prompts[row]))
                groups.setdefault(spec.hook_name, []).append((row, spec))
        self._plans = {name: self._plan(entries, prompts, offsets) for name, entries in groups.items()}
        self._seen = dict.fromkeys(self._plans, 0)
        self.fired = dict.fromkeys(self._plans, 0)  # positions actually modified, per hook
        self._on: dict[tuple, Tensor] = {}  # (hook, what, device, dtype) -> tensor on that device

    def _plan(self, entries, prompts, offsets) -> dict[str, Tensor]:
        rows, deltas, masks, gen = [], [], [], []
        for row, spec in entries:
            n, lp = len(prompts[row]), self.prefix_len
            where = torch.arange(n) + torch.where(torch.arange(n) < lp, 0, offsets[row])  # layout position
            m = torch.zeros(self.width, dtype=torch.bool)
            pos = spec.token_positions
            if isinstance(pos, From):
                m[where[pos.start:]] = True
            elif pos in ("prompt", "all"):
                m[where[1:]] = True  # never position 0: its attention-sink residual is not a thought
            elif not isinstance(pos, str):
                m[where[[int(p) for p in pos]]] = True
            rows.append(row)
            deltas.append(float(spec.alpha) * spec.vector.detach().float().cpu())
            masks.append(m)
            gen.append(isinstance(pos, From) or pos in ("generated", "all"))
        return {"rows": torch.tensor(rows), "delta": torch.stack(deltas),
                "mask": torch.stack(masks), "gen": torch.tensor(gen)}

    def _device(self, key: tuple, make, device: torch.device, dtype: torch.dtype | None = None) -> Tensor:
        """``make()`` (a host tensor) on ``device`` in ``dtype``, built once per key."""
        k = (*key, device, dtype)
        if k not in self._on:
            t = make()
            self._on[k] = t.to(device=device, dtype=dtype or t.dtype)
        return self._on[k]

    def _hook(self, name: str):
        plan = self._plans[name]

        def hook(act: Float[Tensor, "b s d"], hook: Any) -> Float[Tensor, "b s d"]:
            s = act.shape[1]
            if self.start is not None:
                start = self.start
            else:
                start = 0 if s > self._seen[name] else self._seen[name]
            self._seen[name] = start + s
            entries = torch.arange(len(plan["rows"]))
            rows, weight = plan["rows"], torch.ones(len(entries), dtype=torch.long)
            if self._slot is not None:  # the batch holds a subset of rows, in the order selected
                slot = self._slot[plan["rows"]]
                keep = slot >= 0
                entries, rows, weight = entries[keep], slot[keep], self._weight[plan["rows"][keep]]
            pos = torch.arange(start, start + s)
            in_prompt = pos < self.width
            w = torch.zeros((len(entries), s), dtype=torch.bool)
            w[:, in_prompt] = plan["mask"][entries][:, pos[in_prompt]]
            w[:, ~in_prompt] = plan["gen"][entries][:, None]
            if not bool(w.any()):
                return act
            self.fired[name] += int((w.sum(1) * weight).sum())
            dev, dt, ver = act.device, act.dtype, self._version
            # α·v of the selected entries and where they go: built once per selection on this
            # device, in the model's dtype
            delta = self._device((name, "delta", ver), lambda: plan["delta"][entries], dev, dt)
            at = self._device((name, "rows", ver), lambda: rows, dev)
            if s == 1 and not bool(in_prompt.any()):  # a decoding step: the same mask every step
                wd = self._device((name, "gen", ver), lambda: w, dev, dt)
            else:
                wd = w.to(device=dev, dtype=dt)
            out = act.clone()
            out.index_add_(0, at, wd[:, :, None] * delta[:, None, :])
            return out

        return hook

    _version = 0  # bumped by every ``select``: device copies of the selection are keyed by it

    def at(self, start: int) -> None:
        """The next forward call's first token sits at absolute layout position ``start``."""
        self.start = start

    def select(self, rows: Sequence[int | None] | None, weights: Sequence[int] | None = None) -> None:
        """The next forward call's batch holds these rows, in this order (None: all rows).

        A ``None`` entry is a batch slot with no row (a finished row not yet compacted away):
        nothing is injected there and nothing counted. ``weights`` says how many output rows each
        batch row stands for (a prompt pass shared by K identical rows counts K times in
        ``fired``), so counts match the unshared path.
        """
        self._version += 1
        self._on.clear()
        if rows is None:
            self._slot = None
            return
        live = [(i, r) for i, r in enumerate(rows) if r is not None]
        self._slot = torch.full((self.n_rows,), -1, dtype=torch.long)
        self._weight = torch.ones(self.n_rows, dtype=torch.long)
        if live:
            idx = torch.as_tensor([r for _, r in live], dtype=torch.long)
            self._slot[idx] = torch.as_tensor([i for i, _ in live], dtype=torch.long)
            if weights is not None:
                self._weight[idx] = torch.as_tensor([weights[i] for i, _ in live], dtype=torch.long)

    def fwd_hooks(self) -> list[tuple[str, Any]]:
        return [(name, self._hook(name)) for name in self._plans]


@contextmanager
def injecting(model: Any, row_specs: Sequence[RowSpecs], prompts: Sequence[Prompt], offsets: Sequence[int],
              prefix_len: int = 0) -> Iterator[BatchInjector]:
    """Context manager: injections active for the body, removed afterwards (even on error)."""
    inj = BatchInjector(model, row_specs, prompts, offsets, prefix_len)
    with model.hooks(fwd_hooks=inj.fwd_hooks()):
        yield inj


def first_injected(specs: RowSpecs, prompt_len: int) -> int:
    """The earliest prompt position a row's injections touch (``prompt_len`` if none in the prompt).

    Tokens before it are computed exactly as without injection, so rows may share them.
    """
    first = prompt_len
    for spec in _as_list(specs):
        pos = spec.token_positions
        if isinstance(pos, From):
            first = min(first, pos.start)
        elif pos in ("prompt", "all"):
            first = min(first, 1)  # position 0 is never injected (see BatchInjector._plan)
        elif not isinstance(pos, str):
            first = min([first, *(int(p) for p in pos)])
    return first


def spec_key(specs: RowSpecs) -> tuple:
    """A hashable identity of a row's injections: rows with equal keys are injected identically."""
    out = []
    for spec in _as_list(specs):
        pos = spec.token_positions
        pos_key = ("from", pos.start) if isinstance(pos, From) else pos if isinstance(pos, str) else tuple(int(p) for p in pos)
        vec = spec.vector.detach().float().cpu().contiguous()
        out.append((spec.hook_name, float(spec.alpha), pos_key, hash(vec.numpy().tobytes())))
    return tuple(out)
