"""What produced an adapter, and where two adapters trained from one command part ways.

Why: the same command and seed, trained again on another machine (2026-11-28), gave other weights
and another verdict, and nothing saved could say whether the libraries, the CPU's kernels, the
concept vectors or the base model's replayed answers differed. Each adapter now records its
library versions, commit and CPU, and a sha256 of every input computed from the base model before
the first step, so ``differences`` can name the first place two trainings diverge.
"""

from __future__ import annotations

import hashlib
import json
import platform
from collections.abc import Mapping
from typing import Any

import torch

# what differs, in the order it would explain the rest: a difference early in the list is the cause
# to look at first (other inputs make other weights; other libraries or kernels may make other inputs)
_ORDER = ("base_fingerprint", "training", "word_files", "split", "inputs", "versions", "machine", "git_commit")


def digest_tensors(tensors: Mapping[str, torch.Tensor]) -> str:
    """sha256 over names, shapes and float32 bytes, by name: two runs agree only if every bit does."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().to("cpu", torch.float32).contiguous()
        h.update(f"{name}:{tuple(t.shape)};".encode())
        h.update(t.numpy().tobytes())
    return "sha256:" + h.hexdigest()


def digest_json(obj: Any) -> str:
    """sha256 of ``obj`` as sorted, compact JSON (floats as Python prints them)."""
    body = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(body.encode()).hexdigest()


def machine() -> dict[str, Any]:
    """Where the numbers were computed: the CPU kernel set torch picked, threads, platform."""
    return {"platform": platform.platform(), "processor": platform.machine(), "torch_threads": torch.get_num_threads(),
            "python": platform.python_version(), "cpu_capability": torch.backends.cpu.get_cpu_capability()}


def record(inputs: Mapping[str, str]) -> dict[str, Any]:
    """The provenance block of ``introspect_adapter.json``: versions, commit, machine, input digests."""
    from introspect.records.jsonl import git_commit, versions

    return {"versions": versions("peft", "safetensors"), "git_commit": git_commit(), "machine": machine(),
            "inputs": dict(inputs)}


def differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """One line per field in which two adapters' metadata differ, causes first; [] if none.

    Fields older adapters never recorded read "not recorded", so a comparison with one says what
    cannot be told apart rather than claiming agreement.
    """
    lines: list[str] = []
    if a.get("adapter_hash") == b.get("adapter_hash"):
        return lines
    lines.append(f"weights: {a.get('adapter_hash')} vs {b.get('adapter_hash')}")

    def flat(meta: Mapping[str, Any]) -> dict[str, Any]:
        prov = meta.get("provenance") or {}
        out = {k: meta.get(k) for k in ("base_fingerprint", "training", "word_files")}
        out["split"] = digest_json([meta.get("train_concepts"), meta.get("heldout_concepts")]) \
            if meta.get("train_concepts") is not None else None
        for key in ("inputs", "versions", "machine", "git_commit"):
            out[key] = prov.get(key)
        return out

    fa, fb = flat(a), flat(b)
    for key in _ORDER:
        va, vb = fa[key], fb[key]
        if va is None or vb is None:
            if va is not vb:
                lines.append(f"{key}: not recorded in {'the first' if va is None else 'the second'}")
            elif key in ("inputs", "versions", "machine"):
                lines.append(f"{key}: not recorded in either")
            continue
        if isinstance(va, dict) and isinstance(vb, dict):
            for k in sorted(set(va) | set(vb)):
                if va.get(k) != vb.get(k):
                    lines.append(f"{key}.{k}: {_short(va.get(k))} vs {_short(vb.get(k))}")
        elif va != vb:
            lines.append(f"{key}: {_short(va)} vs {_short(vb)}")
    causes = len(lines) - 1
    la, lb = (m.get("summary") or {} for m in (a, b))
    if "loss_first" in la and "loss_first" in lb and (la["loss_first"], la.get("loss_last")) != (lb["loss_first"], lb.get("loss_last")):
        lines.append(f"loss: first {la['loss_first']} vs {lb['loss_first']}, last {la.get('loss_last')} vs {lb.get('loss_last')}")
    if not causes and all(fa[k] is not None and fb[k] is not None for k in ("inputs", "versions", "machine")):
        lines.append("every recorded cause agrees: the training steps themselves computed differently "
                     "(kernels or thread order these fields do not capture)")
    return lines


# Config fields that do not change what a training of a recipe is: the seed (which draw of the
# recipe), how often it checkpoints and whether the gates ran after it.
NOT_RECIPE = ("seed", "checkpoint_every", "gates")


def recipe(meta: Mapping[str, Any]) -> tuple[str, int]:
    """(the recipe's digest, the seed) of an adapter's metadata: two adapters are trainings of one
    recipe when their base model, word files and training config agree in everything but
    ``NOT_RECIPE``. The digest is ``recipe:`` and 12 hex digits."""
    cfg = dict(meta.get("training") or {})
    if not cfg:
        raise ValueError("the adapter's metadata records no training config")
    seed = int(cfg.get("seed", 0))
    key = {"base_fingerprint": meta.get("base_fingerprint"), "word_files": meta.get("word_files"),
           "training": {k: v for k, v in cfg.items() if k not in NOT_RECIPE}}
    return "recipe:" + digest_json(key).split(":", 1)[-1][:12], seed


def _short(v: Any) -> str:
    s = v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str)
    if s.startswith("sha256:"):
        s = s[:19] + "…"
    return s if len(s) <= 60 else s[:57] + "…"
