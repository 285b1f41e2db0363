"""LoRA adapters on the layers after the injection: attach for training, save as a plain peft
adapter, merge into the HF weights before the bridge boots.

Why merge before the bridge boots: the bridge then wraps an ordinary HF model whose weights carry
the adapter, so every TransformerLens hook name, the decode loop and the vector cache work as for
any model. Why save under HF-native module names: the adapter directory is then an ordinary peft
adapter (``PeftModel.from_pretrained`` loads it on the HF model outside this toolkit too). The
adapted model's fingerprint is the base fingerprint plus the adapter's hash, so vector caches and
the results-folder guard keep base and adapter apart.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from introspect.engine.load.adapters import (  # noqa: F401  (the adapter's files: written here, read there)
    ADAPTER_NOTE,
    CONFIG_FILE,
    META_FILE,
    PEFT_PREFIX,
    WEIGHTS_FILE,
    AdapterError,
    hash_config,
    read_adapter,
    state_hash,
)
from introspect.records.atomic import atomic_write, atomic_write_text
from introspect.train import fused as F

BRIDGE_SEG = "._original_component"  # how the bridge nests each wrapped HF module
def _linear_types() -> tuple[type, ...]:
    from transformers.pytorch_utils import Conv1D

    return (torch.nn.Linear, Conv1D)


def hf_name(bridge_name: str) -> str:
    """A module's name in the plain HF model (the bridge nests originals under ``_original_component``)."""
    return bridge_name.replace(BRIDGE_SEG, "")


def _called(model: Any, mods: dict[str, torch.nn.Module]) -> set[str]:
    """Which of ``mods`` the HF model's own forward calls (one two-token pass, hooks counting)."""
    ran: set[str] = set()
    hooks = [m.register_forward_hook(lambda *_, n=n: ran.add(n)) for n, m in mods.items()]
    try:
        with torch.no_grad():
            model.original_model(input_ids=torch.zeros((1, 2), dtype=torch.long, device=model.cfg.device))
    finally:
        for h in hooks:
            h.remove()
    return ran


def _hf_paths(hf: torch.nn.Module, scored: dict[int, tuple[int, str]] | None = None) -> dict[int, str]:
    """Each module's name as the HF model itself names it. The bridge holds some modules twice
    (GPT-2's ``attn.c_proj`` is also its ``attn.o``, ``c_attn`` also ``qkv``); an adapter must sit,
    and be saved, under the path whose steps are HF modules' own attributes, not the bridge's
    (those names do not exist in a plain HF model). ``scored``: ``_scored_paths(hf)`` when the
    caller has it already."""
    return {k: n for k, (_, n) in (scored if scored is not None else _scored_paths(hf)).items()}


def _scored_paths(hf: torch.nn.Module) -> dict[int, tuple[int, str]]:
    """module id -> (steps into a bridge wrapper's own children, the first name with the fewest).
    Zero steps: a module a plain HF model has under that name; more: one only the bridge has."""
    mods = dict(hf.named_modules(remove_duplicate=False))

    def bridge_steps(name: str) -> int:  # steps into a bridge wrapper's own children (it wraps its HF module)
        parts = name.split(".")
        return sum(BRIDGE_SEG[1:] in (mods[".".join(parts[:k])] if k else hf)._modules
                   for k, part in enumerate(parts) if part != BRIDGE_SEG[1:])

    best: dict[int, tuple[int, str]] = {}
    for name, mod in mods.items():
        score = bridge_steps(name) if name else 0
        if name and (id(mod) not in best or score < best[id(mod)][0]):
            best[id(mod)] = (score, name)
    return best


def fused_groups(model: Any, targets: list[str], scored: dict[int, tuple[int, str]] | None = None,
                 ) -> tuple[dict[str, tuple[F.Part, ...]], dict[str, int]]:
    """The targets only the bridge has (Falcon's split ``q/k/v``), grouped by the fused HF map
    each is a piece of (saved names), and each fused map's output size; empty for most models.
    Read before peft wraps the targets. ``scored``: ``_scored_paths`` of the HF model when the
    caller has it already."""
    hf = model.original_model
    scored = scored if scored is not None else _scored_paths(hf)
    linear = {n: m for n, m in hf.named_modules(remove_duplicate=False) if isinstance(m, _linear_types())}
    by_name = {n: scored[id(m)] for n, m in linear.items()}
    split = {hf_name(t): linear[t] for t in targets if by_name[t][0] > 0}
    if not split:
        return {}, {}
    blocks = {t.split(BRIDGE_SEG)[0] for t in targets if by_name[t][0] > 0}
    native = {hf_name(n): m for n, m in linear.items() if by_name[n][0] == 0 and by_name[n][1] == n
              and n not in targets and n.split(BRIDGE_SEG)[0] in blocks}
    groups = F.find_sources(split, native)
    return groups, {c: int(F.out_by_in(native[c]).shape[0]) for c in groups}


def target_modules(model: Any, layers: Iterable[int], paths: dict[int, str] | None = None) -> list[str]:
    """Names (inside ``model.original_model``) of every linear map of the given blocks that the
    HF forward calls (before any adapter is attached: attaching wraps them).

    Why only those: the bridge adds linear maps of its own for its hook names (GPT-2's fused
    ``c_attn`` also appears split as ``attn.q/k/v/o``) that the HF forward never calls; an adapter
    there would get no gradient, and be saved under names a plain HF model lacks. ``paths``:
    ``_hf_paths`` of the HF model when the caller has it already."""
    hf = model.original_model
    names = paths if paths is not None else _hf_paths(hf)
    found: dict[str, torch.nn.Module] = {}
    for layer in layers:
        for _, mod in model.blocks[int(layer)].named_modules():
            if isinstance(mod, _linear_types()) and id(mod) in names:
                found[names[id(mod)]] = mod
    ran = _called(model, found) if found else set()
    out = sorted(n for n in found if n in ran)
    if not out:
        raise AdapterError(f"found no linear layers that the model's forward calls in blocks {list(layers)}")
    return out


def lora_config(model: Any, layer: int, rank: int, alpha: float, paths: dict[int, str] | None = None) -> Any:
    """The peft LoraConfig for every linear map of the blocks after ``layer``."""
    from peft import LoraConfig
    from transformers.pytorch_utils import Conv1D

    n = int(model.cfg.n_layers)
    if not 0 <= layer < n - 1:
        raise AdapterError(f"layer {layer} leaves no block after it to adapt; this model has layers 0..{n - 1}")
    names = target_modules(model, range(layer + 1, n), paths)
    conv = any(isinstance(model.original_model.get_submodule(t), Conv1D) for t in names)
    return LoraConfig(r=int(rank), lora_alpha=float(alpha), lora_dropout=0.0, bias="none",
                      target_modules=names,
                      fan_in_fan_out=conv, task_type="CAUSAL_LM")


def attach(model: Any, layer: int, rank: int = 8, alpha: float = 16.0, seed: int = 0) -> list[torch.nn.Parameter]:
    """Freeze the bridge and add trainable LoRA maps to every linear map after ``layer``.

    Returns the trainable parameters (the adapter's and nothing else). LoRA's B starts at zero,
    so the model computes exactly what it did before until the first update.
    """
    from peft import inject_adapter_in_model

    for p in model.parameters():
        p.requires_grad_(False)
    hf = model.original_model
    scored = _scored_paths(hf)  # one walk: the targets' names, the fused groups and peft's view read it
    paths = _hf_paths(hf, scored)
    cfg = lora_config(model, layer, rank, alpha, paths)
    groups, out_rows = fused_groups(model, sorted(cfg.target_modules), scored)  # saved on the HF map they split
    order = [(paths.get(id(m), n), m) for n, m in hf.named_modules()]

    def named_modules(*args: Any, **kwargs: Any) -> Any:  # peft finds and replaces modules by these names
        return iter(order) if not (args or kwargs) else type(hf).named_modules(hf, *args, **kwargs)

    hf.named_modules = named_modules  # each module under its HF path, not a bridge alias (``_hf_paths``)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            inject_adapter_in_model(cfg, hf)
    finally:
        del hf.named_modules
    _check_in_path(model)
    params = [p for n, p in model.original_model.named_parameters() if "lora_" in n]
    for n, p in model.original_model.named_parameters():
        p.requires_grad_("lora_" in n)
    model.introspect_lora = cfg
    model.introspect_lora_from = layer + 1
    model.introspect_lora_fused = (groups, out_rows)
    return params


def _check_in_path(model: Any) -> None:
    """Refuse an adapter the forward would not run. peft swaps each target for a wrapper on its HF
    parent; a bridge component holding its own reference to the original map (GPT-2's ``attn.o``
    is ``c_proj``, called on the bridge's eager attention path) keeps calling the unwrapped map, and
    that LoRA would never get a gradient (checked after wrapping: one two-token pass)."""
    from peft.tuners.lora import LoraLayer

    wrapped = {n: m for n, m in model.original_model.named_modules() if isinstance(m, LoraLayer)}
    missed = sorted(set(wrapped) - _called(model, wrapped))
    if missed:
        raise AdapterError(f"{len(missed)} of {len(wrapped)} adapter maps are never run by this model's forward "
                           f"(e.g. {hf_name(missed[0])}): the bridge calls its own reference to the unwrapped map on "
                           f"its {getattr(model, 'introspect_attention', 'eager')} attention path; load the model with "
                           "attention 'auto' or 'sdpa', where HF's own attention runs")


def first_adapted(model: Any) -> int | None:
    """The first block carrying a LoRA map that ``attach`` added (None: none attached); recorded
    once there, so the trunk's guard, asked every step, reads an attribute, not every parameter."""
    return getattr(model, "introspect_lora_from", None)


def attached(model: Any) -> bool:
    """LoRA layers attached and not merged (the weights' fingerprint is then the base model's)."""
    return any("lora_" in n for n, _ in model.original_model.named_parameters())


def _lora_params(model: Any) -> dict[str, torch.nn.Parameter]:
    """The adapter's parameters by their saved names: the module's HF path (``_hf_paths``), not
    the first name ``named_parameters`` meets (GPT-2's ``c_attn`` is first met as the bridge's
    ``attn.qkv``, a name a plain GPT-2 lacks: saved so, its weights would not load)."""
    hf = model.original_model
    paths = _hf_paths(hf)
    out: dict[str, torch.nn.Parameter] = {}
    for name, mod in hf.named_modules():
        for pname, p in mod.named_parameters(prefix=hf_name(paths.get(id(mod), name)), recurse=False):
            if "lora_" in pname:
                out[PEFT_PREFIX + hf_name(pname).replace(".default.", ".")] = p
    return out


def adapter_state(model: Any) -> dict[str, torch.Tensor]:
    """The adapter's tensors under peft's saved names for the plain HF model (maps only the bridge
    has saved as one LoRA on the HF map they split: ``train.fused``)."""
    out = {k: p.detach().to("cpu", torch.float32).contiguous().clone() for k, p in _lora_params(model).items()}
    if not out:
        raise AdapterError("this model carries no LoRA adapter (attach one first)")
    groups, out_rows = getattr(model, "introspect_lora_fused", ({}, {}))
    return F.fuse(out, groups, out_rows, PEFT_PREFIX) if groups else out


def load_adapter_state(model: Any, state: dict[str, torch.Tensor]) -> None:
    """Copy saved adapter tensors into an attached adapter (checkpoint resume)."""
    params = _lora_params(model)
    groups, _ = getattr(model, "introspect_lora_fused", ({}, {}))
    state = F.unfuse(state, groups, PEFT_PREFIX) if groups else state
    if set(params) != set(state):
        missing, extra = sorted(set(params) - set(state)), sorted(set(state) - set(params))
        raise AdapterError(
            f"the checkpoint's adapter tensors do not match this model's adapter ({len(missing)} missing"
            + (f", e.g. {missing[0]}" if missing else "") + f"; {len(extra)} unexpected"
            + (f", e.g. {extra[0]}" if extra else "") + "): saved for another model or by an earlier "
            "version under a bridge alias; train into a new --out")
    with torch.no_grad():
        for k, p in params.items():
            p.copy_(state[k].to(p.dtype))


def hf_config(model: Any, base: str) -> Any:
    """The peft config a plain HF model loads the adapter with: HF names, and each fused map
    (``train.fused``) in place of its parts at parts × the rank and alpha (the same scaling)."""
    import copy

    cfg = model.introspect_lora  # set by attach (its targets carry the bridge's nesting)
    groups, _ = getattr(model, "introspect_lora_fused", ({}, {}))
    parts = {p.name for ps in groups.values() for p in ps}
    out = copy.deepcopy(cfg)
    out.target_modules = sorted({hf_name(t) for t in cfg.target_modules} - parts | set(groups))
    out.rank_pattern = {c: int(cfg.r) * len(ps) for c, ps in sorted(groups.items())}
    out.alpha_pattern = {c: float(cfg.lora_alpha) * len(ps) for c, ps in sorted(groups.items())}
    out.base_model_name_or_path = base
    return out


def save_adapter(model: Any, out: Path | str, *, layer: int, meta: dict[str, Any]) -> str:
    """Write the adapter (peft format, HF-native names) and its metadata into ``out``; returns its hash.

    ``meta`` (base model, fingerprint, training config, ...) goes into ``introspect_adapter.json``
    with the hash. Each file is written atomically; the metadata is removed first and written
    last, so a directory interrupted mid-save is refused by ``read_adapter`` (and a stale mix of
    files fails the hash check), never loaded half-written.
    """
    from safetensors.torch import save_file

    out = Path(out)
    cfg = model.introspect_lora
    hf_cfg = hf_config(model, str(meta.get("base_model", "")))
    state = adapter_state(model)
    config = json.dumps(hf_cfg.to_dict(), indent=2, sort_keys=True, default=list)
    digest = state_hash(state, hash_config(json.loads(config)))
    out.mkdir(parents=True, exist_ok=True)
    (out / META_FILE).unlink(missing_ok=True)
    atomic_write(out / WEIGHTS_FILE, lambda tmp: save_file(state, tmp))
    atomic_write_text(out / CONFIG_FILE, config)
    body = json.dumps({**meta, "adapter_hash": digest, "layer": int(layer), "rank": int(cfg.r),
                       "lora_alpha": float(cfg.lora_alpha)}, indent=2, sort_keys=True)
    atomic_write_text(out / META_FILE, body)
    return digest
