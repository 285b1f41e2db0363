"""Add α·v to the residual stream at chosen layers and absolute token positions, while generating.

Why positions are counted here: during KV-cached decoding a hook sees only ``[batch, 1, d]``, so
"position 17" cannot be read off the activation. The injector counts how many positions each hook
has already seen (a call longer than that count is a fresh full pass, as in uncached decoding) and
so knows the absolute position of every row it touches. Rows are left-padded, so a row's prompt
position ``i`` sits at padded position ``pad + i``; generated step ``t`` at ``P + t``.

Hooks are attached only inside TransformerLens's ``model.hooks()`` context, which removes them on
exit, exceptions included.
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

from introspect.chat import Prompt


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
    """Hooks that add each row's injections at absolute (padded) positions, prompt and decode."""

    def __init__(self, model: Any, row_specs: Sequence[RowSpecs], prompts: Sequence[Prompt], offsets: Sequence[int]):
        self.width = max(len(p) for p in prompts)
        groups: dict[str, list[tuple[int, InjectionSpec]]] = {}
        for row, specs in enumerate(row_specs):
            for spec in _as_list(specs):
                spec.validate(model, len(prompts[row]))
                groups.setdefault(spec.hook_name, []).append((row, spec))
        self._plans = {name: self._plan(entries, prompts, offsets) for name, entries in groups.items()}
        self._seen = dict.fromkeys(self._plans, 0)
        self.fired = dict.fromkeys(self._plans, 0)  # positions actually modified, per hook

    def _plan(self, entries, prompts, offsets) -> dict[str, Tensor]:
        rows, deltas, masks, gen = [], [], [], []
        for row, spec in entries:
            off = offsets[row]
            m = torch.zeros(self.width, dtype=torch.bool)
            pos = spec.token_positions
            if isinstance(pos, From):
                m[off + pos.start:] = True
            elif pos in ("prompt", "all"):
                m[off:] = True
            elif not isinstance(pos, str):
                m[[off + int(p) for p in pos]] = True
            rows.append(row)
            deltas.append(float(spec.alpha) * spec.vector.detach().float().cpu())
            masks.append(m)
            gen.append(isinstance(pos, From) or pos in ("generated", "all"))
        return {"rows": torch.tensor(rows), "delta": torch.stack(deltas),
                "mask": torch.stack(masks), "gen": torch.tensor(gen)}

    def _hook(self, name: str):
        plan = self._plans[name]

        def hook(act: Float[Tensor, "b s d"], hook: Any) -> Float[Tensor, "b s d"]:
            s = act.shape[1]
            start = 0 if s > self._seen[name] else self._seen[name]
            self._seen[name] = start + s
            pos = torch.arange(start, start + s)
            in_prompt = pos < self.width
            w = torch.zeros((len(plan["rows"]), s), dtype=torch.bool)
            w[:, in_prompt] = plan["mask"][:, pos[in_prompt]]
            w[:, ~in_prompt] = plan["gen"][:, None]
            if not bool(w.any()):
                return act
            self.fired[name] += int(w.sum())
            add = w[:, :, None].to(act.dtype) * plan["delta"][:, None, :].to(act.dtype)
            out = act.clone()
            out.index_add_(0, plan["rows"].to(act.device), add.to(act.device))
            return out

        return hook

    def fwd_hooks(self) -> list[tuple[str, Any]]:
        return [(name, self._hook(name)) for name in self._plans]


@contextmanager
def injecting(model: Any, row_specs: Sequence[RowSpecs], prompts: Sequence[Prompt], offsets: Sequence[int]) -> Iterator[BatchInjector]:
    """Context manager: injections active for the body, removed afterwards (even on error)."""
    inj = BatchInjector(model, row_specs, prompts, offsets)
    with model.hooks(fwd_hooks=inj.fwd_hooks()):
        yield inj


@dataclass(frozen=True)
class Generation:
    """One row's output: decoded text, generated ids, and the first step's log-probabilities."""

    text: str
    tokens: tuple[int, ...]
    first_logprobs: Float[Tensor, " vocab"]


def _stop_ids(model: Any) -> set[int]:
    ids = getattr(model.cfg, "eos_token_id", None)
    if ids is None:
        ids = model.tokenizer.eos_token_id
    return set(ids) if isinstance(ids, (list, tuple)) else {ids}


def generate(
    model: Any,
    prompts: Sequence[Prompt],
    injections: Sequence[RowSpecs] | None = None,
    *,
    max_new_tokens: int = 40,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_p: float | None = None,
    seed: int | None = None,
    batch_size: int = 16,
    use_cache: bool = True,
) -> list[Generation]:
    """Generate for many prompts, each row with its own injections (or none), in padded batches.

    Greedy by default (seed §0: deterministic). With ``do_sample`` the torch RNG is seeded from
    ``seed`` once per call, so a run is reproducible given the same batch layout.
    """
    if injections is None:
        injections = [None] * len(prompts)
    if len(injections) != len(prompts):
        raise InjectionError(f"{len(injections)} injection rows for {len(prompts)} prompts")
    if do_sample and seed is not None:
        torch.manual_seed(seed)
    pad_id = model.tokenizer.pad_token_id
    stops = _stop_ids(model)
    out: list[Generation] = []
    for lo in range(0, len(prompts), batch_size):
        chunk, specs = prompts[lo:lo + batch_size], injections[lo:lo + batch_size]
        toks, mask, offsets = pad_left(chunk, pad_id)
        with injecting(model, specs, chunk, offsets), torch.no_grad():
            res = model.generate(
                toks.to(model.cfg.device), attention_mask=mask.to(model.cfg.device),
                max_new_tokens=max_new_tokens, do_sample=do_sample, temperature=temperature,
                top_p=top_p, verbose=False, output_logits=True, use_past_kv_cache=use_cache,
                return_type="tokens",
            )
        seqs = res.sequences[:, toks.shape[1]:].cpu()
        first = torch.log_softmax(res.logits[0].float().cpu(), dim=-1)
        for i in range(len(chunk)):
            ids = seqs[i].tolist()
            cut = next((k for k, t in enumerate(ids) if t in stops), len(ids))
            ids = ids[:cut]
            out.append(Generation(model.tokenizer.decode(ids, skip_special_tokens=True), tuple(ids), first[i]))
    return out


def next_token_logprobs(
    model: Any, prompts: Sequence[Prompt], injections: Sequence[RowSpecs] | None = None, *, batch_size: int = 16,
) -> Float[Tensor, "n vocab"]:
    """Log-probabilities of the next token after each prompt (one forward pass per batch)."""
    injections = injections or [None] * len(prompts)
    rows = []
    for lo in range(0, len(prompts), batch_size):
        chunk, specs = prompts[lo:lo + batch_size], injections[lo:lo + batch_size]
        toks, mask, offsets = pad_left(chunk, model.tokenizer.pad_token_id)
        with injecting(model, specs, chunk, offsets), torch.no_grad():
            logits = model(toks.to(model.cfg.device), attention_mask=mask.to(model.cfg.device))
        rows.append(torch.log_softmax(logits[:, -1].float().cpu(), dim=-1))
    return torch.cat(rows)


def inject_once(model: Any, prompt: Prompt, spec: InjectionSpec | None, **gen_kwargs: Any) -> str:
    """Seed §5: generate for one prompt with one injection active; return the text."""
    return generate(model, [prompt], [spec], **gen_kwargs)[0].text
