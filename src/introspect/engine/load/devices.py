"""Where a model's weights go, what the run header says about the hardware, and free memory.

Why a module: placement is decided once, before ``from_pretrained``, so weights load straight
onto their device (a 70B model never passes through host RAM on its way to a GPU), and a model
too large for one GPU is spread over all of them (``device_map="auto"``) without the user asking.
A model that fits nowhere fails with one line saying how much it needs and how much there is.
"""

from __future__ import annotations

import os
import platform
import re
import traceback
from collections import Counter
from dataclasses import dataclass
from typing import Any

import torch

from introspect.engine.load import determinism
from introspect.engine.load.gguf_files import ModelError

GiB = 1 << 30
HEADROOM = 0.85  # share of a GPU's free memory the weights may take; the rest is KV cache and activations


@dataclass(frozen=True)
class Placement:
    """What ``from_pretrained`` gets: a device map (``None`` = load on the CPU) and a memory cap."""

    device_map: Any = None
    max_memory: dict | None = None
    why: str = ""


def gpu_free(index: int) -> int:
    """Bytes this process can still use on GPU ``index``: the driver's free memory plus what
    PyTorch holds reserved but unallocated. ``mem_get_info`` alone counts PyTorch's cached
    blocks as used, so from a run's second batch the plan would shrink with memory history."""
    free, _ = torch.cuda.mem_get_info(index)
    return int(free + torch.cuda.memory_reserved(index) - torch.cuda.memory_allocated(index))


def _gpu_free() -> list[int]:
    return [gpu_free(i) for i in range(torch.cuda.device_count())]


def _caps(free: list[int]) -> dict[int, int]:
    """accelerate's ``max_memory`` per GPU: ``HEADROOM`` of its free bytes (the rest is KV cache)."""
    return {i: int(HEADROOM * f) for i, f in enumerate(free)}


def place(need_bytes: int, device: str | None = None, device_map: Any = None) -> Placement:
    """Choose the placement of weights taking ``need_bytes`` once loaded.

    An explicit ``device_map`` wins; an explicit ``"auto"`` with GPUs gets the same per-GPU cap
    as the automatic spread (without it accelerate fills each GPU and leaves nothing for the KV
    cache). Otherwise: no GPU or ``device="cpu"`` loads on the CPU; a model that fits in
    ``HEADROOM`` of the chosen GPU's free memory loads onto it whole; a larger one on an unpinned
    ``"cuda"`` goes over every GPU (``"auto"``, capped per GPU, never offloaded to the CPU, which
    the bridge refuses).
    """
    if device_map == "auto" and torch.cuda.is_available():
        return Placement("auto", _caps(_gpu_free()), f"device map auto, each GPU capped at {HEADROOM:.0%} of its free memory")
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
        return Placement("auto", _caps(free), f"{need_bytes / GiB:.1f} GiB > one GPU: spread over {len(free)} GPUs")
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


# ---------------------------------------------------------------- batch size from free memory
CPU_MAX_BATCH = 16  # on a CPU a step is compute-bound: past ~16 rows a bigger batch buys little
GPU_MAX_BATCH = 256
BATCH_HEADROOM = 0.8  # share of free memory a batch may plan to take


def kv_bytes_per_token(model: Any) -> int:
    """Bytes of KV cache one token adds: K and V, every layer, every KV head (from the config)."""
    c = model.cfg
    kv_heads = getattr(c, "n_key_value_heads", None) or c.n_heads
    return 2 * int(c.n_layers) * int(kv_heads) * int(c.d_head) * _dtype_bytes(model)


def _dtype_bytes(model: Any) -> int:
    return next(model.original_model.parameters()).element_size()


def row_bytes(model: Any, tokens: int) -> int:
    """Memory one batch row needs at ``tokens`` tokens: its KV cache, one layer's activations
    (only one layer's are alive at a time without gradients) and its last-position logits with
    the few float32 copies sampling makes."""
    c = model.cfg
    d_mlp = getattr(c, "d_mlp", None) or 4 * c.d_model
    act = tokens * (8 * int(c.d_model) + 3 * int(d_mlp)) * _dtype_bytes(model)
    return tokens * kv_bytes_per_token(model) + act + 4 * 4 * int(c.d_vocab)


def _meminfo_available() -> int:
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


_BLOCK = re.compile(r"^(.*?\.\d+)\.")  # a parameter's decoder block: the name up to its first index


def blocks_per_device(model: Any) -> Counter:
    """Decoder blocks per device, from where their parameters live (a device map places whole
    blocks; read from the HF module names, so no per-architecture code)."""
    where: dict[str, torch.device] = {}
    for name, p in model.original_model.named_parameters():
        m = _BLOCK.match(name)
        if m:
            where.setdefault(m.group(1), p.device)
    return Counter(where.values())


def _gpu_rows(model: Any, tokens: int) -> tuple[int, str]:
    """Rows that fit on the tightest GPU: each GPU holds the KV cache of its own blocks, one
    block's activations (only one is alive at a time, on whichever GPU runs it) and, on the GPU
    of the output layer, the logits; the batch is the minimum over GPUs."""
    blocks = {d: n for d, n in blocks_per_device(model).items() if d.type == "cuda"}
    head = model.original_model.get_output_embeddings().weight.device
    devs = sorted(set(blocks) | ({head} if head.type == "cuda" else set()), key=str)
    c = model.cfg
    per_block = kv_bytes_per_token(model) // max(1, int(c.n_layers))
    d_mlp = getattr(c, "d_mlp", None) or 4 * c.d_model
    act = tokens * (8 * int(c.d_model) + 3 * int(d_mlp)) * _dtype_bytes(model)
    rows, notes = [], []
    for d in devs:
        need = tokens * per_block * blocks.get(d, 0) + act + (4 * 4 * int(c.d_vocab) if d == head else 0)
        free = gpu_free(d.index if d.index is not None else torch.cuda.current_device())
        rows.append(int(BATCH_HEADROOM * free) // max(1, need))
        notes.append(f"{d}: {blocks.get(d, 0)} blocks, {free / GiB:.1f} GiB free")
    return max(1, min(rows)), f"{len(devs)} GPU(s), per GPU ({'; '.join(notes)})"


def free_bytes(model: Any) -> tuple[int, str]:
    """Free memory where the model's KV cache lives: the tightest GPU it spans (driver free +
    reserved − allocated), or the host's available RAM."""
    devs = sorted({p.device for p in model.original_model.parameters()}, key=str)
    gpus = [d for d in devs if d.type == "cuda"]
    if gpus:
        free = [gpu_free(d.index if d.index is not None else torch.cuda.current_device()) for d in gpus]
        return min(free), f"{len(gpus)} GPU(s), tightest {min(free) / GiB:.1f} GiB free"
    return _meminfo_available(), "host RAM available"


def fit_batch(model: Any, tokens: int, cap: int | None = None) -> int:
    """Rows of ``tokens`` tokens that fit in free memory, at least 1, at most ``cap`` (default:
    ``GPU_MAX_BATCH`` on a GPU, ``CPU_MAX_BATCH`` on a CPU). On GPUs each GPU is sized for what
    lives on it (``_gpu_rows``); on the CPU one row needs ``row_bytes``."""
    on_gpu = any(p.device.type == "cuda" for p in model.original_model.parameters())
    cap = cap if cap is not None else (GPU_MAX_BATCH if on_gpu else CPU_MAX_BATCH)
    if on_gpu:
        return max(1, min(cap, _gpu_rows(model, tokens)[0]))
    free, _ = free_bytes(model)
    return max(1, min(cap, int(BATCH_HEADROOM * free) // max(1, row_bytes(model, tokens))))


# cuBLAS / cuDNN report a failed workspace or handle allocation in their own words
_ALLOC = ("out of memory", "can't allocate memory", "cublas_status_alloc_failed", "cudnn_status_alloc_failed")
_FATAL = ("illegal memory access", "device-side assert", "unspecified launch failure")


class DeviceError(RuntimeError):
    """A device error after which the CUDA context is unusable: no retry can help."""


def is_oom(e: BaseException) -> bool:
    """A device or host allocation failure: torch's OutOfMemoryError on GPUs, a RuntimeError on
    CPUs, and cuBLAS/cuDNN allocation failures. Nothing else (an illegal memory access is not)."""
    if isinstance(e, torch.OutOfMemoryError):
        return True
    msg = str(e).lower()
    return isinstance(e, RuntimeError) and any(k in msg for k in _ALLOC)


def release() -> None:
    """Give cached GPU memory back (after an OOM, between the models of a sweep)."""
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def halve_after_oom(model: Any, e: BaseException, size: int) -> int:
    """The batch size to redo a failed chunk with: half of ``size`` after an out-of-memory error
    (memory released, and later calls on ``model`` start from it); any other error, or an OOM at
    one row, is raised again; an OOM while the batch is pinned (``determinism.pin``) is a
    ``PinnedBatchError`` asking for a smaller batch; an error that leaves the CUDA context
    unusable is raised as a ``DeviceError`` saying so. Called inside the caller's ``except``: the traceback's frames
    (which hold the failed batch's tensors) are cleared first, so ``release`` can free them."""
    msg = str(e).lower()
    if isinstance(e, RuntimeError) and any(k in msg for k in _FATAL):
        raise DeviceError(f"CUDA failed ({str(e).splitlines()[0][:120]}); the device is unusable for the rest "
                          "of this process: restart the run (it resumes), and report it if it repeats") from e
    if not is_oom(e) or size == 1:
        raise e
    traceback.clear_frames(e.__traceback__)
    release()
    if determinism.pinned(model):  # a pinned batch never shrinks: the run stops, saying how to go on
        raise determinism.oom_error(size) from e
    size = max(1, size // 2)
    model.introspect_batch_cap = size
    return size


PLAN_TOKENS = 512  # a task prompt's length for planning a run's batch before any prompt exists


def plan_batch(model: Any, requested: int, new_tokens: int) -> tuple[int, str]:
    """A run's batch size and why: ``requested`` rows (0 = auto) lowered to what fits in free
    memory at ``PLAN_TOKENS + new_tokens`` tokens a row. Each ``generate`` call checks again with
    its real prompt lengths (and may take up to a quarter more rows to keep a control with its
    injected rows, where they fit: ``rows.next_batch``) and halves on an out-of-memory error.
    With the batch pinned (``determinism.pin``) an asked size is kept as it is, and ``auto`` is
    planned once here and then kept for the run."""
    tokens = PLAN_TOKENS + new_tokens
    _, where = free_bytes(model)
    if determinism.pinned(model):
        if requested > 0:
            return requested, f"pinned ({determinism.FLAG}): as asked, not lowered to free memory ({where})"
        n = fit_batch(model, tokens)
        return n, f"auto, then pinned ({determinism.FLAG}): {n} rows of {tokens} tokens fit in {where}"
    if requested <= 0:
        n = fit_batch(model, tokens)
        return n, f"auto: {n} rows of {tokens} tokens fit in {where} (cap {GPU_MAX_BATCH} GPU / {CPU_MAX_BATCH} CPU)"
    n = fit_batch(model, tokens, cap=requested)
    why = "as asked" if n == requested else f"lowered from {requested}: {n} rows of {tokens} tokens fit"
    return n, f"{why} ({where})"


def device_map(model: Any, placement: Placement) -> dict[str, Any]:
    """The module → device map ``from_pretrained`` computes for ``placement`` on ``model`` (built
    on the meta device: no weights), with transformers' own rule for ``"auto"`` (accelerate's
    balanced memory, then ``infer_auto_device_map``). Lets a plan for GPUs be checked on a CPU."""
    if placement.device_map is None:
        return {"": "cpu"}
    if not isinstance(placement.device_map, str):
        return dict(placement.device_map)
    from transformers.integrations.accelerate import _get_device_map

    return dict(_get_device_map(model, placement.device_map, placement.max_memory, None))
