"""Directional ablation written into the weights: the same model variant as ``ablation.py``'s
hooks, with no hook left to run.

Why: the hooks exist only in a process of this toolkit. A folder whose weights already have r̂
projected out of every residual write loads anywhere (plain transformers, vLLM, a GGUF converter)
and runs at full speed. As in Arditi et al. (2024), each matrix writing into the residual stream
becomes W ← W − r̂ r̂ᵀ W on its output side and each such bias b ← b − r̂ (r̂ᵀ b), so every write c
becomes c − r̂ r̂ᵀ c, which is what the hooks make of it.

The writers are read from the bridge, with no per-architecture code: its ``embed`` (and
``pos_embed``), and each block's ``attn.o`` and ``mlp.out``. That is right only when nothing but a
fixed scale lies between their outputs and the hook points, which is measured on a probe before
any weight changes, as is the result (hooks projecting those outputs must give the hooked model's
logits). Gemma 2 and 3 fail: a norm after the projection divides each position by its size and
scales each channel, which puts r̂ back; the hooks sit after that norm. A tied unembedding gets a
copy of its own first, so logits read the original vocabulary directions. After the edit each
module is checked on its own and the logits again; a mismatch undoes the edit.

Tolerances: float32, 1e-4 of the logit scale. In bf16/fp16 computations equal in exact arithmetic
already differ by a few percent of it (SmolLM2-135M, bf16 hooks against float32 hooks: 1.2 on a
scale of 28): there the logits get 10% and each module's output 2% (no rounding carried over).
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from introspect.engine.load.ablation import (
    AblationError,
    Direction,
    ablation_hook,
    project_out,
    unit_vector,
    write_hooks,
)
from introspect.engine.load.models import ABLATION_SIDECAR, ablated_info, model_info

PROBE = "The lantern by the harbour was lit at dusk; the ship came home and the crew sang."
CHUNK = 4096  # rows or columns edited at a time in float32 (memory stays a sliver of the matrix)
HOW = "orthogonalized out of the weights writing the embedding and every attention and MLP output"
INSTEAD = "use the hooks instead (remove_direction; on the command line --remove-direction without --save-orthogonalized)"
HALF = (torch.float16, torch.bfloat16)

Writers = list[tuple[str, nn.Module]]


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """(per write or module output, relative to its norm; end to end, relative to the logit scale)."""
    return (2e-2, 0.1) if dtype in HALF else (1e-4, 1e-4)


def _inner(component: Any) -> Any:
    inner = getattr(component, "original_component", None)
    return component if inner is None else inner


def _axis(module: Any) -> int | None:
    """The weight axis along the residual stream (its output side): an embedding's columns, a
    Linear's rows, a transformers ``Conv1D``'s columns (GPT-2 stores it transposed); None for
    anything else."""
    from transformers.pytorch_utils import Conv1D

    w = getattr(module, "weight", None)
    if not isinstance(w, Tensor) or w.dim() != 2 or not w.is_floating_point():
        return None
    if isinstance(module, (nn.Embedding, Conv1D)):
        return 1
    return 0 if isinstance(module, nn.Linear) else None


def writers(model: Any) -> Writers:
    """(name, HF module) of every module whose output is a residual write: the token embedding, a
    learned position embedding if there is one, each block's attention and MLP output projection."""
    found = [("embed", getattr(model, "embed", None))]
    if getattr(model, "pos_embed", None) is not None:
        found.append(("pos_embed", model.pos_embed))
    for i, block in enumerate(model.blocks):
        found += [(f"blocks.{i}.attn.o", getattr(getattr(block, "attn", None), "o", None)),
                  (f"blocks.{i}.mlp.out", getattr(getattr(block, "mlp", None), "out", None))]
    d = int(model.cfg.d_model)
    out = []
    for name, component in found:
        module = None if component is None else _inner(component)
        axis = None if module is None else _axis(module)
        if axis is None or module.weight.shape[axis] != d:
            raise AblationError(f"cannot orthogonalize this model's weights: it has no plain linear {name} writing "
                                f"the residual stream (mixture of experts, quantized or fused weights?); {INSTEAD}")
        out.append((name, module))
    return out


def _project(t: Tensor, r: Tensor, axis: int) -> Callable[[], Any]:
    """Take ``t``'s component along ``r`` on ``axis`` out of it, in place (float32, in chunks);
    returns a function putting it back (to rounding)."""
    r = r.to(t.device, torch.float32)
    if t.dim() == 1:  # a bias
        with torch.no_grad():
            c1 = r @ t.float()
            t.copy_(t.float() - c1 * r)
        return lambda: t.copy_(t.float() + c1 * r)
    other = 1 - axis
    n = t.shape[other]
    parts = []
    with torch.no_grad():
        for s in range(0, n, CHUNK):
            part = t.narrow(other, s, min(CHUNK, n - s))
            f = part.float()
            c = r @ f if axis == 0 else f @ r
            part.copy_(f - (torch.outer(r, c) if axis == 0 else torch.outer(c, r)))
            parts.append((part, c))

    def undo() -> None:
        for part, c in parts:
            part.copy_(part.float() + (torch.outer(r, c) if axis == 0 else torch.outer(c, r)))
    return undo


def _configs(hf: Any) -> list[Any]:
    text = hf.config.get_text_config() if hasattr(hf.config, "get_text_config") else hf.config
    return [hf.config] + ([text] if text is not hf.config else [])


def _head(hf: Any) -> Any:
    out = hf.get_output_embeddings()
    return None if out is None else _inner(out)


def _untie(hf: Any, modules: Writers) -> Callable[[], Any] | None:
    """Give the output embedding its own weight when it shares one with a writer (tied input and
    output embeddings); returns an undo function, or None when nothing was tied."""
    head = _head(hf)
    w = getattr(head, "weight", None)
    if not isinstance(w, Tensor) or all(m.weight.data_ptr() != w.data_ptr() for _, m in modules):
        return None
    before = [getattr(c, "tie_word_embeddings", None) for c in _configs(hf)]
    head.weight = nn.Parameter(w.detach().clone(), requires_grad=w.requires_grad)
    for c in _configs(hf):
        c.tie_word_embeddings = False

    def undo() -> None:
        head.weight = w
        for c, b in zip(_configs(hf), before):
            c.tie_word_embeddings = b
    return undo


def _probe(model: Any, modules: Writers) -> Tensor:
    tok = getattr(model, "tokenizer", None)
    ids = tok(PROBE, return_tensors="pt")["input_ids"] if tok is not None else torch.arange(1, 17)[None]
    return ids.to(modules[0][1].weight.device)


def _measure(model: Any, ids: Tensor, r: Tensor, *, hooks: bool = False, modules: Writers = ()
             ) -> tuple[Tensor, float]:
    """Logits on ``ids`` (float32, CPU) and the largest component along ``r`` of any residual
    write, relative to the write's norm; ``hooks``: with ``ablation.py``'s hooks, ``modules``:
    with the named modules' outputs projected (what orthogonalized weights compute)."""
    worst = [0.0]

    def observe(act: Tensor, hook: Any) -> None:
        a = act.detach().float()
        rel = (a @ r.to(a.device)).abs() / (a.norm(dim=-1) + 1e-12)
        worst[0] = max(worst[0], float(rel.max()))

    def project(module: Any, args: Any, out: Tensor) -> Tensor:
        return project_out(out, r.to(out.device))

    fwd = [(n, ablation_hook(r)) for n in write_hooks(model)] if hooks else []
    fwd += [(n, observe) for n in write_hooks(model)]
    handles = [m.register_forward_hook(project) for _, m in modules]
    try:
        with torch.no_grad(), model.hooks(fwd_hooks=fwd):
            logits = model(ids)
    finally:
        for h in handles:
            h.remove()
    return logits.detach().float().cpu(), worst[0]


def _feeds(model: Any, modules: Writers) -> dict[str, list[nn.Module]]:
    """Each write hook point and the writers whose outputs it sees."""
    by = dict(modules)
    out = {"blocks.0.hook_resid_pre": [m for n, m in modules if n in ("embed", "pos_embed")]}
    for i in range(int(model.cfg.n_layers)):
        out[f"blocks.{i}.hook_attn_out"] = [by[f"blocks.{i}.attn.o"]]
        out[f"blocks.{i}.hook_mlp_out"] = [by[f"blocks.{i}.mlp.out"]]
    return out


def _unchanged(model: Any, ids: Tensor, modules: Writers) -> tuple[float, str]:
    """How far a write point's activation is from one constant times its writers' summed output
    (relative; 0 when nothing but a scale lies between them): the worst over write points, and
    where. Independent of the direction, and of the precision beyond its rounding."""
    feeds = _feeds(model, modules)
    seen: dict[int, Tensor] = {}
    acts: dict[str, Tensor] = {}

    def keep_module(module: Any, args: Any, out: Tensor) -> None:
        seen[id(module)] = out.detach().float().clone()

    def keep(name: str) -> Any:
        def hook(act: Tensor, hook: Any) -> None:
            acts[name] = act.detach().float().clone()
        return hook

    handles = [m.register_forward_hook(keep_module) for m in {id(m): m for _, m in modules}.values()]
    try:
        with torch.no_grad(), model.hooks(fwd_hooks=[(n, keep(n)) for n in feeds]):
            model(ids)
    finally:
        for h in handles:
            h.remove()
    worst, where = 0.0, ""
    for name, mods in feeds.items():
        a = acts[name]
        s = sum(seen[id(m)].to(a.device) for m in mods)
        s = s.expand_as(a) if s.dim() == a.dim() else s.reshape(a.shape)
        k = float((a * s).sum() / (s * s).sum().clamp_min(1e-30))
        rel = float((a - k * s).norm() / a.norm().clamp_min(1e-30))
        if rel > worst:
            worst, where = rel, name
    return worst, where


def _precheck(model: Any, ids: Tensor, r: Tensor, modules: Writers, tol: tuple[float, float]
              ) -> tuple[Tensor, float]:
    """Before any weight changes: the hooked model's logits and the component the hooks leave
    along ``r``; raises the one-line refusal when projected weights cannot give the same."""
    cls = type(model.original_model).__name__
    apart, where = _unchanged(model, ids, modules)
    if apart > tol[0]:
        posts = sorted({n for b in model.blocks for n, _ in b.named_children() if n.endswith("_post")})
        why = (f"its blocks normalize the attention and MLP outputs before adding them ({', '.join(posts)})"
               if posts else "something that is not a fixed scale lies between the output projections and the stream")
        raise AblationError(f"cannot orthogonalize {cls}'s weights: {why}, so at {where} the write is not the "
                            f"projection's output ({apart:.2g} of its norm apart) and projected weights cannot "
                            f"reproduce the hooks; {INSTEAD}")
    want, hooked_left = _measure(model, ids, r, hooks=True)
    scale = max(1.0, float(want.abs().max()))
    got, left = _measure(model, ids, r, modules=modules)
    diff = float((got - want).abs().max())
    if diff > tol[1] * scale or left > tol[0]:
        raise AblationError(f"cannot orthogonalize {cls}'s weights: projecting its writers' outputs gives other "
                            f"logits than the hooks (max difference {diff:.3g}, allowed {tol[1] * scale:.3g}; a "
                            f"write keeps {left:.3g} of its norm along the direction); {INSTEAD}")
    return want, hooked_left


def _call(module: nn.Module, x: Tensor) -> Tensor:
    """One writer on ``x``: an embedding's rows (its own forward may scale them or take other
    arguments), a projection's forward."""
    return F.embedding(x, module.weight) if isinstance(module, nn.Embedding) else module(x)


def _expected(modules: Writers, r: Tensor) -> list[tuple[Tensor, Tensor]]:
    """Inputs for each writer (rows of an embedding, seeded random vectors for a projection) and
    its output on them with ``r`` projected out (float32): what it must give once edited."""
    out = []
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for _, m in modules:
            w = m.weight
            x = (torch.arange(min(64, w.shape[0])) if isinstance(m, nn.Embedding)
                 else torch.randn(8, w.shape[1 - _axis(m)], generator=g).to(w.dtype)).to(w.device)
            y = _call(m, x).float()
            out.append((x, project_out(y, r.to(y.device))))
    return out


def _postcheck(model: Any, ids: Tensor, r: Tensor, modules: Writers, expected: list[tuple[Tensor, Tensor]],
               want: Tensor, tol: tuple[float, float]) -> tuple[str, dict[str, float]]:
    """After the edit: what is wrong ("" when nothing) and the figures: each writer against its
    projected output, the unembedding apart from every writer, the logits against the hooks'."""
    with torch.no_grad():
        local, where = max((float((_call(m, x).float() - y).norm() / y.norm().clamp_min(1e-30)), name)
                           for (name, m), (x, y) in zip(modules, expected))
    head = getattr(_head(model.original_model), "weight", None)
    shared = head is not None and any(m.weight.data_ptr() == head.data_ptr() for _, m in modules)
    got, left = _measure(model, ids, r)
    scale = max(1.0, float(want.abs().max()))
    diff = float((got - want).abs().max())
    figures = {"max_abs_logit_diff": diff, "logit_scale": scale, "logit_tolerance": tol[1],
               "max_module_diff": local, "module_tolerance": tol[0], "write_component": left}
    if shared:
        return "the unembedding still shares its weight with the embedding", figures
    if local > tol[0]:
        return f"{where} does not give its projected output ({local:.3g} of its norm apart)", figures
    if diff > tol[1] * scale or left > tol[0]:
        return (f"max logit difference {diff:.3g}, allowed {tol[1] * scale:.3g}; a write keeps {left:.3g} of its "
                "norm along the direction"), figures
    return "", figures


def orthogonalize(model: Any, direction: Direction) -> Any:
    """Project ``direction`` out of every weight writing into the residual stream of ``model``'s
    HF model, in place (a tied unembedding untied first), checked against the hooks on a probe;
    the model gets the hooked variant's name and fingerprint. Returns the model.

    Raises ``AblationError`` (one line, no weight changed) when this architecture's weights cannot
    reproduce the hooks, e.g. a norm after the output projections (Gemma 2 and 3)."""
    r = unit_vector(model, direction)
    modules = writers(model)
    hf = model.original_model
    dtype = modules[0][1].weight.dtype
    tol = tolerance(dtype)
    ids = _probe(model, modules)
    want, hooked_left = _precheck(model, ids, r, modules, tol)
    expected = _expected(modules, r)
    untie = _untie(hf, modules)
    undo = [] if untie is None else [untie]
    for _, m in modules:
        undo.append(_project(m.weight, r, _axis(m)))
        b = getattr(m, "bias", None)
        if isinstance(b, Tensor) and b.dim() == 1 and b.shape[0] == r.shape[0]:
            undo.append(_project(b, r, 0))
    problem, figures = _postcheck(model, ids, r, modules, expected, want, tol)
    if problem:
        with torch.no_grad():
            for u in reversed(undo):
                u()
        raise AblationError(f"orthogonalized weights of {type(hf).__name__} do not reproduce the hooks ({problem}; "
                            f"weights restored); {INSTEAD}")
    info = model_info(model)
    record = replace(direction, vector=r).record()
    model.introspect_orthogonalized = {
        "base_model": info.name, "base_fingerprint": info.fingerprint, "untied_embeddings": untie is not None,
        "modules": [name for name, _ in modules], "dtype": str(dtype).removeprefix("torch."),
        "check": {"probe_tokens": int(ids.shape[-1]), **figures, "hooked_write_component": hooked_left}}
    model.introspect_info = ablated_info(info, record, HOW)
    model.introspect_ablation = record
    return model


def _plain_model(hf: Any) -> nn.Module:
    """A model of ``hf``'s class holding ``hf``'s tensors under their own names, to save: the
    bridge wraps HF modules in place (``._original_component`` in every key, aliases such as
    ``attn.q``), so the keys are unwrapped and kept where a fresh model of the class has them."""
    with torch.device("meta"):
        fresh = type(hf)._from_config(copy.deepcopy(hf.config))
    want = set(fresh.state_dict())
    state: dict[str, Tensor] = {}
    for key, t in hf.state_dict().items():
        k = key.replace("._original_component", "")
        if k in state and state[k].data_ptr() != t.data_ptr() and not torch.equal(state[k], t):
            raise AblationError(f"cannot save {type(hf).__name__}: the loaded model holds two different {k!r}; {INSTEAD}")
        if k in want:
            state.setdefault(k, t)
    missing = sorted(want - state.keys())
    if missing:
        raise AblationError(f"cannot save {type(hf).__name__}: {len(missing)} tensors not found in the loaded "
                            f"model (first {missing[0]!r}); {INSTEAD}")
    fresh.load_state_dict(state, assign=True, strict=True)
    fresh.generation_config = copy.deepcopy(hf.generation_config)
    return fresh


def check_target(out_dir: str | Path) -> Path:
    """Where a saved model may go: a new folder (or an empty one) in an existing folder."""
    out = Path(out_dir).expanduser().absolute()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise AblationError(f"{out} already exists and is not an empty folder; give a new folder to save the model in")
    if not out.parent.is_dir():
        raise AblationError(f"folder {out.parent} does not exist; create it or give another place to save the model")
    return out


def save_orthogonalized(model: Any, direction: Direction, out_dir: str | Path) -> Path:
    """``orthogonalize`` the model in place, then write it as a model folder: HF weights
    (safetensors), its config (embeddings untied), tokenizer, and ``introspect_ablation.json``
    (the direction's record, the base model, the check's figures), from which ``load_model`` gives
    it its ablation note and tag. Written whole or not at all (a temporary folder, then renamed)."""
    out = check_target(out_dir)
    orthogonalize(model, direction)
    side = {"ablation": model.introspect_ablation, "method": "W <- W - r r^T W on the output side of the "
            "embedding, each attention output and each MLP output projection (their biases alike)",
            **model.introspect_orthogonalized}
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        _plain_model(model.original_model).save_pretrained(tmp)
        model.tokenizer.save_pretrained(tmp)
        (tmp / ABLATION_SIDECAR).write_text(json.dumps(side, indent=1, sort_keys=True) + "\n")
        os.chmod(tmp, 0o755)  # mkdtemp makes it private
        for f in tmp.iterdir():
            os.chmod(f, 0o644)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
