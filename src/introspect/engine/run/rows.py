"""Which rows form a decoding batch: how many a CPU batch needs so that a row's log-probs do not
depend on its batch (``min_rows``), and where a batch ends so that a control and its injected rows
share one (``next_batch``).

Why measured, not fixed: CPU GEMM libraries pick kernels by the number of rows M, and a row is
rounded as in any larger batch only from some M on. On one CPU that was 4 rows (``MIN_ROWS``);
on an AVX-512 Xeon with MKL it is 16 for the default model's projections (576 × 1536, 1536 × 576,
576 × 49152) and 11 for the tiny test model's down projection (256 × 64): below that, a lone
trial padded to 4 rows and the same trial among 7 differ by ~1e-6 in log-probs, enough to flip a
sampled near-tie. So the smallest safe row count is probed once per process, on the model's own
linear shapes, dtype and thread count, and a batch never decodes with fewer rows (idle copies
fill the rest; their output is dropped). GPUs are not probed: their kernels are not batch
invariant in the first place (docs/gpus.md).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.nn.functional as F

MIN_ROWS = 4  # the floor (below it some kernels take a matrix-vector path for one row)
PROBE_ROWS = (4, 8, 12, 16, 24, 32)  # candidate row counts, compared with the largest
PROBE_OUT = 4096  # output features probed per shape (kernel choice follows the rows, not this)


@functools.lru_cache(maxsize=32)
def stable_rows(shapes: tuple[tuple[int, int], ...], dtype: torch.dtype, threads: int) -> int:
    """The smallest candidate row count from which every larger candidate rounds each row of
    ``F.linear`` exactly as ``PROBE_ROWS[-1]`` rows do, for every (in, out) shape; the largest
    candidate when none does."""
    g = torch.Generator().manual_seed(0)
    need = MIN_ROWS
    with torch.no_grad():
        for n_in, n_out in shapes:
            w = torch.randn(min(n_out, PROBE_OUT), n_in, generator=g).to(dtype)
            x = torch.randn(PROBE_ROWS[-1], 1, n_in, generator=g).to(dtype)
            full = F.linear(x, w)
            same = [torch.equal(F.linear(x[:m], w), full[:m]) for m in PROBE_ROWS]
            first = next((m for k, m in enumerate(PROBE_ROWS) if all(same[k:])), PROBE_ROWS[-1])
            need = max(need, first)
    return need


def min_rows(model: Any) -> int:
    """Rows a decoding batch of ``model`` is padded to at least (see the module docstring). The
    shapes are read afresh each batch (an adapter attached for training adds linear layers); the
    probe itself runs once per shape set."""
    hf = model.original_model
    first = next(hf.parameters(), None)
    if first is None or first.device.type != "cpu":
        return MIN_ROWS
    shapes = sorted({(m.in_features, m.out_features) for m in hf.modules() if isinstance(m, torch.nn.Linear)})
    return stable_rows(tuple(shapes), first.dtype, torch.get_num_threads())


def next_batch(order: list[int], group: list[Any], lo: int, size: int, stretch: int | None = None) -> list[int]:
    """The next batch from ``order[lo:]``: about ``size`` rows, ending where a group (one prompt,
    one stream) ends. Rows that differ only in their injection then share a batch, its shared
    prefix and its matmul shapes, so a zero injection (the placebo) reproduces its control
    bitwise; split across batches they round differently and a near-tie can flip a sampled token.
    A group straddling the boundary is taken whole when the batch stays within ``stretch`` rows
    (default ``size``; ``generate`` allows a quarter more where memory has room: task A's 9-row
    groups at batch 16 ran as 9-row batches, 1.55× the time for 1.11× the trials), else left for
    the next batch when this one stays at least half full, else split."""
    hi = min(lo + size, len(order))
    if hi < len(order) and group[order[hi]] == group[order[hi - 1]]:
        end = hi
        while end < len(order) and group[order[end]] == group[order[hi]]:
            end += 1
        cut = hi - 1
        while cut > lo and group[order[cut - 1]] == group[order[hi]]:
            cut -= 1
        if end - lo <= (size if stretch is None else stretch):
            hi = end
        elif cut - lo >= size / 2:
            hi = cut
    return order[lo:hi]
