"""Adapters on disk: read an adapter directory (its hash checked) and merge it into plain HF
weights before the bridge boots.

Why here and not in ``train``: loading is the engine's job and an adapter loads like any model
variant, so the engine never imports the training code; ``train.lora`` writes what this reads.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import torch

from introspect.engine.load.gguf_files import ModelError

META_FILE = "introspect_adapter.json"  # hash, base model, fingerprint, training config
WEIGHTS_FILE = "adapter_model.safetensors"
CONFIG_FILE = "adapter_config.json"
PEFT_PREFIX = "base_model.model."



class AdapterError(ModelError):
    """An adapter directory that is missing, incomplete, tampered with or for another model."""


def state_hash(state: dict[str, torch.Tensor], config: dict[str, Any]) -> str:
    """Hash of the adapter tensors (names, shapes, float32 bytes) and its LoRA settings."""
    h = hashlib.sha256(json.dumps(config, sort_keys=True).encode())
    for k in sorted(state):
        t = state[k].to(torch.float32).contiguous()
        h.update(f"{k}:{tuple(t.shape)}".encode())
        h.update(t.numpy().tobytes())
    return f"lora:{h.hexdigest()[:16]}"



def hash_config(config: dict[str, Any]) -> dict[str, Any]:
    """The LoRA settings an adapter's hash covers (a peft config as a dict). Per-module ranks
    (``rank_pattern``, ``alpha_pattern``: a fused map's adapter, ``train.fused``) count only when
    set, so adapters without them keep the hashes they always had."""
    out = {"r": config.get("r"), "lora_alpha": config.get("lora_alpha"),
           "target_modules": sorted(config.get("target_modules") or []),
           "fan_in_fan_out": bool(config.get("fan_in_fan_out"))}
    for key in ("rank_pattern", "alpha_pattern"):
        if config.get(key):
            out[key] = dict(sorted(config[key].items()))
    return out


def read_adapter(path: Path | str) -> tuple[dict[str, Any], dict[str, torch.Tensor], dict[str, Any]]:
    """(metadata, tensors, peft config dict) of an adapter directory, its hash checked."""
    from safetensors.torch import load_file

    d = Path(path).expanduser()
    missing = [f for f in (META_FILE, WEIGHTS_FILE, CONFIG_FILE) if not (d / f).is_file()]
    if not d.is_dir() or missing:
        what = "not a directory" if not d.is_dir() else f"missing {', '.join(missing)}"
        raise AdapterError(f"{d} is not an adapter directory from introspect train-aware or train-selfknow ({what})")
    try:
        meta = json.loads((d / META_FILE).read_text())
        config = json.loads((d / CONFIG_FILE).read_text())
        state = load_file(str(d / WEIGHTS_FILE))
    except (OSError, ValueError) as e:
        raise AdapterError(f"{d}: unreadable adapter ({' '.join(str(e).split())[:120]})") from e
    want = meta.get("adapter_hash")
    got = state_hash(state, hash_config(config))
    if want != got:
        raise AdapterError(f"{d}: adapter weights do not match their recorded hash ({want} vs {got})")
    return meta, state, config


def check_scale(scale: Any) -> float:
    """An adapter scale: a finite number > 0 (1 is the adapter as trained)."""
    try:
        s = float(scale)
    except (TypeError, ValueError):
        s = float("nan")
    if isinstance(scale, bool) or not math.isfinite(s) or s <= 0:
        raise AdapterError(f"adapter scale must be a finite number > 0 (1 = as trained, 0.5 = half its "
                           f"weight change), got {scale!r}")
    return s


def scale_lora(module: torch.nn.Module, scale: float) -> None:
    """Multiply every LoRA map's scaling under ``module`` by ``scale`` (PEFT's ``scale_layer``):
    the one place a dose is applied, whether the adapter is then merged or stays attached."""
    from peft.tuners.lora import LoraLayer

    for m in module.modules():
        if isinstance(m, LoraLayer):
            m.scale_layer(scale)


def merge_into(hf_model: torch.nn.Module, path: Path | str, base_fingerprint: str, scale: float = 1.0) -> dict[str, Any]:
    """Merge the adapter at ``path`` into a plain HF model in place; returns its metadata.

    ``scale`` multiplies the adapter's weight change (every LoRA layer's scaling, as PEFT's
    ``scale_layer``): a dose-response knob, since how much of a trained change a model needs to
    detect an injection is a question in itself, and a smaller change damages it less
    (docs/positive-control.md). A scale other than 1 is recorded in the metadata (``scale``).
    Refuses an adapter trained on other weights (its recorded base fingerprint differs).
    """
    from peft import PeftModel

    scale = check_scale(scale)
    meta, state, _ = read_adapter(path)
    if meta.get("base_fingerprint") != base_fingerprint:
        raise AdapterError(f"adapter {path} was trained on {meta.get('base_model')!r} "
                           f"(fingerprint {meta.get('base_fingerprint')}), not on this model ({base_fingerprint})")
    try:
        peft_model = PeftModel.from_pretrained(hf_model, str(Path(path).expanduser()))
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        raise AdapterError(f"cannot apply adapter {path}: {' '.join(str(e).split())[:160]}") from e
    placed = {n.replace(".default.", ".") for n, _ in peft_model.named_parameters() if "lora_" in n}
    lost = sorted(set(state) - placed)
    if lost:  # peft only warns, and the module's LoRA stays at its zero start: a silently partial adapter
        raise AdapterError(f"adapter {path}: {len(lost)} of its tensors name modules this model lacks (e.g. "
                           f"{lost[0]}); GPT-2-style adapters saved by earlier versions of introspect used the "
                           "bridge's names: retrain it")
    if scale != 1:
        scale_lora(peft_model, scale)
        meta = {**meta, "scale": scale}
    peft_model.merge_and_unload()
    return meta


ADAPTER_NOTE = "adapter: "  # prefix of the JSON note carrying the adapter's identity into run headers
