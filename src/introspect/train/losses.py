"""What the training log says per kind of row and framing: was the answer learned, and when?

Why a module: an adapter that says yes to a Gaussian push at evaluation either never learned
"no" to noise in that framing, or learned it on the training pushes and does not carry it to the
evaluation's. Each step draws fresh Gaussian directions and a row's loss is taken before the
step's update, so a late ``gaussian`` row's first-token probability is already the adapter's
answer to a push it never saw. The log keeps every detection row (``row_record``); ``by_kind``
reads it by kind, framing and stretch of training.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

ROW_FIELDS = ("kind", "phrasing", "strength", "loss", "p_first")


def row_record(ex: Any, loss: float, p_first: float) -> list[Any]:
    """One detection row as the training log keeps it: ``[kind, phrasing, strength, loss,
    P(first answer token)]``; the first answer token is the decision ("Yes" or "No")."""
    return [ex.kind, ex.phrasing, round(float(ex.strength), 3), round(loss, 4), round(p_first, 4)]


def read_log(path: Path | str) -> list[dict[str, Any]]:
    """A run's ``train_log.jsonl`` (a directory is read as its log file)."""
    p = Path(path)
    p = p / "train_log.jsonl" if p.is_dir() else p
    if not p.is_file():
        from introspect.train.data import TrainDataError

        raise TrainDataError(f"{p} is not a training log; give an adapter directory or its train_log.jsonl")
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]


def rows_frame(log: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """Every logged detection row, with its step: one line per row."""
    out = [dict(zip(ROW_FIELDS, r), step=int(e["step"])) for e in log for r in e.get("rows", ())]
    if not out:
        from introspect.train.data import TrainDataError

        raise TrainDataError("this training log has no per-row records (logged since 2026-12-02); train again to get them")
    return pd.DataFrame(out, columns=["step", *ROW_FIELDS])


def by_kind(log: Iterable[dict[str, Any]], *, windows: int = 4, by: Sequence[str] = ("kind", "phrasing"),
            strength_bands: Sequence[float] | None = None) -> pd.DataFrame:
    """Mean loss and first-token probability per kind, framing and stretch of training.

    ``windows``: training split into that many equal runs of steps (1 = all of it); ``right``
    is the share of rows whose first answer token has probability > 0.5, which greedy decoding
    then picks (below 0.5 it may still be picked: a lower bound on greedy's agreement).
    ``strength_bands``: band edges in resid units (e.g. ``(0.15, 0.5, 0.9, 1.25)``) add a
    ``strength`` column to the grouping.
    """
    df = rows_frame(log)
    last = int(df.step.max())
    df["window"] = ((df.step - 1) * windows // max(last, 1)).clip(upper=windows - 1)
    span = {w: f"{w * last // windows + 1}-{(w + 1) * last // windows}" for w in range(windows)}
    keys = list(by)
    if strength_bands is not None:
        df["band"] = pd.cut(df.strength, list(strength_bands), include_lowest=True).astype(str)
        keys.append("band")
    g = df.assign(right=df.p_first > 0.5).groupby([*keys, "window"], sort=True)
    out = g.agg(n=("loss", "size"), loss=("loss", "mean"), p_first=("p_first", "mean"), right=("right", "mean"))
    out = out.reset_index()
    out["steps"] = out.window.map(span)
    return out[[*keys, "steps", "n", "loss", "p_first", "right"]]


def render(table: pd.DataFrame) -> str:
    """The table as text, probabilities to two places."""
    return table.to_string(index=False, float_format=lambda v: f"{v:.2f}")
