"""Reproducible runs: deterministic kernels and a pinned batch size.

Why: on a GPU a row's numbers depend on the batch it runs in (the matmul shapes pick the
kernels) and on choices cuBLAS and cuDNN may make differently from one run to the next, so a
sampled answer near a tie can flip between two runs of the same command. ``enable`` sets
``CUBLAS_WORKSPACE_CONFIG`` (cuBLAS reads it once, when CUDA starts, so it must come first) and
turns on ``torch.use_deterministic_algorithms``. ``pin`` marks a model's batch as pinned: its
size is what was asked, never lowered to free memory nor stretched to keep a group whole, and an
out-of-memory error stops the run with ``PinnedBatchError`` instead of halving the batch. Every
``Generation`` carries the size of the batch it was decoded in, and the records keep it.
"""

from __future__ import annotations

import os
from typing import Any

import torch

CUBLAS_ENV = "CUBLAS_WORKSPACE_CONFIG"
CUBLAS_WORKSPACE = ":4096:8"  # one of the two settings cuBLAS is deterministic under (":16:8" the other)
FLAG = "--reproducible"


class PinnedBatchError(ValueError):
    """Out of memory with the batch pinned (a ValueError: the command line prints one line)."""


class ReproducibilityError(ValueError):
    """Deterministic mode asked for after CUDA had started without the cuBLAS setting."""


def enable() -> None:
    """Deterministic kernels for this process. Call before anything touches CUDA (the command
    lines call it before loading a model); calling it again is harmless."""
    if os.environ.get(CUBLAS_ENV) not in (CUBLAS_WORKSPACE, ":16:8"):
        if torch.cuda.is_initialized():
            raise ReproducibilityError(f"CUDA started before {FLAG} could set {CUBLAS_ENV}; set "
                                       f"{CUBLAS_ENV}={CUBLAS_WORKSPACE} in the environment before the run")
        os.environ[CUBLAS_ENV] = CUBLAS_WORKSPACE
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False


def enabled() -> bool:
    """Whether deterministic algorithms are on in this process."""
    return torch.are_deterministic_algorithms_enabled()


def pin(model: Any, on: bool = True) -> None:
    """Pin (or unpin) the batch size of every generate and activation read on ``model``."""
    model.introspect_pinned_batch = bool(on)


def pinned(model: Any) -> bool:
    return bool(getattr(model, "introspect_pinned_batch", False))


def oom_error(size: int) -> PinnedBatchError:
    """The one-line error of an out-of-memory batch while the batch is pinned."""
    smaller = max(1, size // 2)
    return PinnedBatchError(f"out of memory at batch {size}, which {FLAG} pins (no halving, so every run "
                            f"batches alike); rerun with a smaller --batch-size (e.g. {smaller}), or "
                            "with --no-reproducible to halve it on the fly")
