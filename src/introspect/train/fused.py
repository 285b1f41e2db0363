"""Adapters on maps the bridge splits off one fused HF map, saved as one LoRA on the fused map.

Why: on some architectures (Falcon's ``query_key_value``) the bridge computes attention through
``q``/``k``/``v`` linear maps it builds at boot from rows of the fused HF map, and the HF map itself
is never called. The adapter must sit on the split maps to train, but a plain HF model (and this
toolkit's own merge-before-boot loader) has only the fused one. LoRA maps on the parts are exactly
one LoRA on the whole: with parts p of rank r, ``A = [A_p; ...]`` (rank r × parts) and ``B`` holding
each ``B_p`` in its part's rows and rank block, zeros elsewhere; the scaling stays alpha / r when
the fused rank and alpha are both parts × r and parts × alpha (peft's ``rank_pattern`` and
``alpha_pattern``). Which rows of the fused map each part holds is read from the weights themselves
(each split row is a copy of one fused row), so no architecture is named here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from introspect.engine.load.adapters import AdapterError

A_KEY, B_KEY = ".lora_A.weight", ".lora_B.weight"


@dataclass(frozen=True)
class Part:
    name: str  # the split map's saved name (HF-style, bridge nesting removed)
    rows: torch.Tensor  # long [out_features]: the fused map's output rows it holds, in its own row order


def out_by_in(mod: torch.nn.Module) -> torch.Tensor:
    """A linear map's weight as [out, in] (GPT-2's Conv1D stores [in, out])."""
    from transformers.pytorch_utils import Conv1D

    w = mod.weight.detach()
    return w.t() if isinstance(mod, Conv1D) else w


def rows_in(part: torch.nn.Module, whole: torch.nn.Module) -> torch.Tensor | None:
    """Where each output row of ``part`` sits among ``whole``'s, if every one is a copy of exactly
    one of them (None otherwise: not a piece of that map, or its rows repeat and cannot be told apart)."""
    p, w = out_by_in(part), out_by_in(whole)
    if p.shape[1] != w.shape[1] or p.shape[0] >= w.shape[0]:
        return None
    index: dict[bytes, int] = {}
    for i, row in enumerate(w.to("cpu", torch.float32).contiguous()):
        key = row.numpy().tobytes()
        index[key] = -1 if key in index else i  # a repeated row cannot be placed
    got = [index.get(row.numpy().tobytes(), -1) for row in p.to("cpu", torch.float32).contiguous()]
    if any(i < 0 for i in got) or len(set(got)) != len(got):
        return None
    return torch.tensor(got, dtype=torch.long)


def find_sources(parts: dict[str, torch.nn.Module], candidates: dict[str, torch.nn.Module]) -> dict[str, tuple[Part, ...]]:
    """{fused name: its parts} for split maps ``parts`` (saved name -> module) among the HF-native
    ``candidates`` of the same blocks. A part found in no candidate is refused: its adapter could
    not be loaded on a plain HF model."""
    out: dict[str, list[Part]] = {}
    for name in sorted(parts):
        hits = [(c, rows) for c, mod in candidates.items() if (rows := rows_in(parts[name], mod)) is not None]
        if len(hits) != 1:
            raise AdapterError(f"{name}: the bridge computes through this map, which a plain HF model lacks, and "
                               f"{'no' if not hits else 'more than one'} HF map of its block holds its rows; an adapter "
                               "on it could not be loaded outside the bridge (train at another layer or model)")
        c, rows = hits[0]
        out.setdefault(c, []).append(Part(name, rows))
    for c, ps in out.items():
        taken = torch.cat([p.rows for p in ps])
        if len(set(taken.tolist())) != len(taken):
            raise AdapterError(f"{c}: two split maps claim the same rows; their adapters cannot be fused")
    return {c: tuple(ps) for c, ps in out.items()}


def fuse(state: dict[str, torch.Tensor], groups: dict[str, tuple[Part, ...]], out_rows: dict[str, int],
         prefix: str) -> dict[str, torch.Tensor]:
    """The parts' LoRA tensors replaced by one LoRA per fused map (exact: the same weight change)."""
    state = dict(state)
    for fused, parts in groups.items():
        a = [state.pop(prefix + p.name + A_KEY) for p in parts]
        b = [state.pop(prefix + p.name + B_KEY) for p in parts]
        r = a[0].shape[0]
        big = torch.zeros((out_rows[fused], r * len(parts)), dtype=b[0].dtype)
        for k, (p, bp) in enumerate(zip(parts, b)):
            big[p.rows, k * r:(k + 1) * r] = bp
        state[prefix + fused + A_KEY] = torch.cat(a, dim=0)
        state[prefix + fused + B_KEY] = big
    return state


def unfuse(state: dict[str, torch.Tensor], groups: dict[str, tuple[Part, ...]], prefix: str) -> dict[str, torch.Tensor]:
    """``fuse`` undone, refusing a fused LoRA that is not a sum of the parts' own (a B entry off
    its part's rank block is not zero)."""
    state = dict(state)
    for fused, parts in groups.items():
        if prefix + fused + A_KEY not in state:
            continue  # a layout check downstream names the mismatch
        a, big = state.pop(prefix + fused + A_KEY), state.pop(prefix + fused + B_KEY)
        r = a.shape[0] // len(parts)
        mask = torch.ones_like(big, dtype=torch.bool)
        for k, p in enumerate(parts):
            state[prefix + p.name + A_KEY] = a[k * r:(k + 1) * r].clone()
            state[prefix + p.name + B_KEY] = big[p.rows, k * r:(k + 1) * r].clone()
            mask[p.rows, k * r:(k + 1) * r] = False
        if a.shape[0] != r * len(parts) or bool(big[mask].any()):
            raise AdapterError(f"{fused}: this fused adapter is not one the split maps it came from can hold")
    return state
