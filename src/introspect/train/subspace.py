"""Where an adapter may read: each adapted map's input directions that injections and detection
questions move and ordinary conversation leaves nearly empty.

Why: the replay-identity gate (most 40-token greedy answers unchanged) fails for any weight change
of the size detection needs, a random one of that size included (docs/positive-control.md). A LoRA
map reads every direction of its input, so what it learns moves ordinary text too. A map whose A
rows lie only in directions ordinary text barely occupies computes nearly the base model's function
there, whatever its size, and still sees an injection.

How: per adapted map, the top generalized eigenvectors of (what to see) against (what to leave
alone). What to see: the shift injections make to the map's input (the same training row injected
minus clean) plus the clean detection prompts, each scaled to unit trace. What to leave alone: the
uncentred second moment on trained replay items (the base model's own answers), which is what a map
``x -> B A x`` acts on there. Only training rows are read (training concepts, trained replay items):
nothing held out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from introspect.train import data as D
from introspect.train import lora

if TYPE_CHECKING:
    from introspect.train.config import TrainConfig
    from introspect.train.plan import Plan

RIDGE = 1e-4  # of the clean second moment's mean eigenvalue: directions emptier than this count as this empty
FIT_STEPS = 12  # training steps' rows the fit reads (their detection rows twice: clean and injected)
LEAVE_ITEMS = 400  # trained replay items whose inputs are what to leave alone: a 36-row sample (the first
# version) of a 1,536-wide input looked emptier in its own rows than on other replay text (0.003 vs 0.010 at k = 64)


class _Moments:
    """Running uncentred second moments of one map's inputs: shift, detection prompt, replay."""

    def __init__(self) -> None:
        self.m: dict[str, Tensor] = {}
        self.n: dict[str, int] = {}

    def add(self, what: str, x: Tensor) -> None:
        x = x.reshape(-1, x.shape[-1]).double()
        self.m[what] = self.m.get(what, 0) + x.T @ x
        self.n[what] = self.n.get(what, 0) + len(x)

    def mean(self, what: str) -> Tensor:
        return self.m[what] / max(self.n[what], 1)


def basis(see: Sequence[Tensor], leave: Tensor, k: int) -> Tensor:
    """An orthonormal ``[d, k]`` basis of the top-``k`` generalized eigenvectors of ``sum(see)``
    (each scaled to unit trace) against ``leave`` (ridged by ``RIDGE``)."""
    d = leave.shape[0]
    k = min(int(k), d)
    target = sum(s / s.trace().clamp_min(1e-30) for s in see)
    ridge = RIDGE * leave.trace().clamp_min(1e-30) / d
    chol = torch.linalg.cholesky(leave + ridge * torch.eye(d, dtype=leave.dtype))
    inv = torch.linalg.inv(chol)
    vals, vecs = torch.linalg.eigh(inv @ target @ inv.T)
    w = inv.T @ vecs[:, vals.argsort(descending=True)[:k]]
    q, _ = torch.linalg.qr(w)
    return q.float()


def share(m: Tensor, q: Tensor) -> float:
    """The share of a second moment's trace inside the span of ``q``."""
    q = q.to(m.dtype)
    return float((q.T @ m @ q).trace() / m.trace().clamp_min(1e-30))


def fit(model: Any, plan: Plan, cfg: TrainConfig, k: int, steps: int = FIT_STEPS,
        leave_items: int = LEAVE_ITEMS) -> tuple[dict[int, Tensor], dict[str, float]]:
    """``id(map) -> [d_in, k]`` basis for every map the adapter will sit on, and a summary: the
    mean share of replay text's, of the injection shift's, and of the detection prompt's input
    energy inside the read directions, on what the fit read and (``_heldout``, ``_unseen``) on
    the gates' replay items and on training rows it did not read: a direction a small sample
    leaves empty need not be empty (k random directions of d hold k/d of any energy).
    Runs before ``lora.attach`` (it hooks the plain maps)."""
    from introspect.engine.run.inject import injecting
    from introspect.train.plan import spec_for, step_rows

    hf = model.original_model
    names = lora.target_modules(model, range(cfg.layer + 1, int(model.cfg.n_layers)))
    maps = {n: hf.get_submodule(n) for n in names}
    moments = {n: _Moments() for n in maps}
    seen: dict[str, list[Tensor]] = {}

    def keep(name: str):
        def pre(_mod: Any, args: tuple[Any, ...]) -> None:
            seen.setdefault(name, []).append(args[0].detach()[0].float().cpu())
        return pre

    def run(enc: D.Encoded, spec: Any = None) -> dict[str, Tensor]:
        seen.clear()
        ids = torch.tensor([enc.ids], device=model.cfg.device)
        with torch.no_grad():
            if spec is None:
                hf(input_ids=ids)
            else:
                with injecting(model, [spec], [enc.prompt()], [0]) as inj:
                    inj.at(0)
                    hf(input_ids=ids)
        return {n: torch.cat(xs) for n, xs in seen.items()}

    hooks = [m.register_forward_pre_hook(keep(n)) for n, m in maps.items()]
    try:
        for i in range(min(leave_items, len(plan.replay))):
            for n, x in run(D.encode(model.tokenizer, D.Example("replay", "replay", replay=i), plan.replay)).items():
                moments[n].add("leave", x)
        for i in range(len(plan.replay_heldout)):  # a reading only: the gates' items, never fitted
            for n, x in run(D.encode(model.tokenizer, D.Example("replay", "replay", replay=i),
                                     plan.replay_heldout)).items():
                moments[n].add("leave_heldout", x)
        for step in range(2 * steps):  # the second half: rows the fit did not read (a reading only)
            shift, prompt = ("shift", "prompt") if step < steps else ("shift_unseen", "prompt_unseen")
            for ex in step_rows(plan, cfg, step):
                if ex.kind == "replay":
                    continue
                enc = D.encode(model.tokenizer, ex, plan.replay)
                clean = run(enc)
                for n, x in clean.items():
                    moments[n].add(prompt, x)
                spec = spec_for(ex, enc, plan, cfg.layer)
                if spec is not None:
                    for n, x in run(enc, spec).items():
                        moments[n].add(shift, x - clean[n])
    finally:
        for h in hooks:
            h.remove()
    missing = [n for n, m in moments.items() if not {"leave", "prompt", "shift"} <= set(m.m)]
    if missing:
        raise D.TrainDataError(f"the read-subspace fit saw no replay, detection or injected rows at {missing[0]}; "
                               "it needs replay items and an injected kind in the mix")
    readings = [w for w in ("leave", "shift", "prompt", "leave_heldout", "shift_unseen", "prompt_unseen")
                if all(w in m.m for m in moments.values())]
    bases, shares = {}, {w: [] for w in readings}
    for n, m in moments.items():
        q = basis([m.mean("shift"), m.mean("prompt")], m.mean("leave"), k)
        bases[id(maps[n])] = q
        for what in readings:
            shares[what].append(share(m.mean(what), q))
    summary = {f"read_share_{w}": round(sum(v) / len(v), 5) for w, v in shares.items()}
    return bases, {"read_dims": int(k), "read_maps": len(bases), **summary}


def constrain(model: Any, bases: dict[int, Tensor]) -> None:
    """Project every attached LoRA A onto its map's read directions (``A <- A Q Q^T``): after
    attaching, resuming and each optimiser step, so the adapter never reads outside them."""
    from peft.tuners.lora import LoraLayer

    with torch.no_grad():
        for m in model.original_model.modules():
            if isinstance(m, LoraLayer) and id(m.get_base_layer()) in bases:
                q = bases[id(m.get_base_layer())]
                for a in m.lora_A.values():
                    w = a.weight
                    w.copy_((w.float() @ q.to(w.device) @ q.T.to(w.device)).to(w.dtype))
