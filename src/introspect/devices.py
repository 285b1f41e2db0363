"""Where a model's weights go, what the run header says about the hardware, and free memory.

Why a module: placement is decided once, before ``from_pretrained``, so weights load straight
onto their device (a 70B model never passes through host RAM on its way to a GPU), and a model
too large for one GPU is spread over all of them (``device_map="auto"``) without the user asking.
A model that fits nowhere fails with one line saying how much it needs and how much there is.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from typing import Any

import torch

from introspect.gguf_files import ModelError

GiB = 1 << 30
HEADROOM = 0.85  # share of a GPU's free memory the weights may take; the rest is KV cache and activations


@dataclass(frozen=True)
class Placement:
    """What ``from_pretrained`` gets: a device map (``None`` = load on the CPU) and a memory cap."""

    device_map: Any = None
    max_memory: dict | None = None
    why: str = ""


def _gpu_free() -> list[int]:
    return [torch.cuda.mem_get_info(i)[0] for i in range(torch.cuda.device_count())]


def place(need_bytes: int, device: str | None = None, device_map: Any = None) -> Placement:
    """Choose the placement of weights taking ``need_bytes`` once loaded.

    An explicit ``device_map`` wins. Otherwise: no GPU or ``device="cpu"`` loads on the CPU; a
    model that fits in ``HEADROOM`` of the chosen GPU's free memory loads onto it whole; a larger
    one on an unpinned ``"cuda"`` goes over every GPU (``"auto"``, capped per GPU, never
    offloaded to the CPU, which the bridge refuses).
    """
    if device_map is not None:
        return Placement(device_map, None, "device map given")
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)
    if dev.type != "cuda":
        return Placement({"": str(dev)} if dev.type != "cpu" else None, None, f"{dev.type} requested or no GPU")
    if not torch.cuda.is_available():
        raise ModelError(f"device {device!r} asked for, but torch sees no CUDA GPU; use --device cpu")
    free = _gpu_free()
    idx = dev.index if dev.index is not None else torch.cuda.current_device()
    if idx >= len(free):
        raise ModelError(f"device {device!r} does not exist; this machine has GPUs 0..{len(free) - 1}")
    if need_bytes <= HEADROOM * free[idx]:
        return Placement({"": idx}, None, f"fits on GPU {idx}")
    total = sum(free)
    if dev.index is None and len(free) > 1 and need_bytes <= HEADROOM * total:
        cap = {i: int(HEADROOM * f) for i, f in enumerate(free)}
        return Placement("auto", cap, f"{need_bytes / GiB:.1f} GiB > one GPU: spread over {len(free)} GPUs")
    where = f"GPU {idx} has {free[idx] / GiB:.1f} GiB free" + (
        f", all {len(free)} GPUs {total / GiB:.1f} GiB" if len(free) > 1 else "")
    raise ModelError(f"the weights need ~{need_bytes / GiB:.1f} GiB and {where}; use more GPUs, a smaller "
                     "dtype (--dtype), or free GPU memory")


def describe(model: Any) -> dict[str, Any]:
    """The hardware line of a run header: device name(s), how many, and CPU threads."""
    hf = model.original_model
    devs = sorted({str(p.device) for p in hf.parameters()})
    out: dict[str, Any] = {"devices": devs, "torch_threads": torch.get_num_threads()}
    if any(d.startswith("cuda") for d in devs):
        names = sorted({torch.cuda.get_device_name(torch.device(d)) for d in devs if d.startswith("cuda")})
        out["device_name"] = ", ".join(names)
        out["device"] = devs[0] if len(devs) == 1 else f"{len(devs)} devices ({', '.join(devs)})"
    else:
        out["device_name"] = platform.processor() or platform.machine() or "cpu"
        out["device"] = "cpu"
        out["cpu_count"] = os.cpu_count()
    return out
