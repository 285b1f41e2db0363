"""Load JSONL results into pandas: trial records as flat rows, header records as a run table.

Layout (see ``introspect.records.jsonl``): ``results/<model>/<task>.jsonl``, header lines
(``type: header``) interleaved with trial lines (``type: trial``). Torn or invalid lines are
skipped by ``read_records``. A trial run twice (same non-empty ``trial_id``, e.g. after a resume
that raced) counts once: the last copy wins.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import fields
from pathlib import Path
from typing import Any

import pandas as pd

from introspect.records.jsonl import Record, read_records

TRIAL_COLUMNS: list[str] = [f.name for f in fields(Record) if f.name not in ("grade", "extra")] + [
    "source"
]
HEADER_COLUMNS: list[str] = [
    "run_id", "model_id", "fingerprint", "seed", "ts", "git_commit", "versions", "config",
    "notes", "schema", "task", "source",
]


def jsonl_files(path_or_dir: Path | str) -> list[Path]:
    """Every ``*.jsonl`` under a directory (recursively, sorted), or the one file given.

    Raises FileNotFoundError when the path does not exist.
    """
    p = Path(path_or_dir)
    if not p.exists():
        raise FileNotFoundError(f"no such file or directory: {p}")
    if p.is_file():
        return [p]
    return sorted(q for q in p.rglob("*.jsonl") if q.is_file())


def _iter(paths: Iterable[Path], kind: str) -> Iterable[tuple[Path, dict[str, Any]]]:
    for path in paths:
        for rec in read_records(path):
            if rec.get("type") == kind:
                yield path, rec


def flatten_trial(rec: dict[str, Any], source: str = "") -> dict[str, Any]:
    """One trial dict as a flat row: ``grade.*`` and ``extra.*`` keys become their own columns."""
    row = {k: v for k, v in rec.items() if k not in ("grade", "extra")}
    for prefix in ("grade", "extra"):
        sub = rec.get(prefix) or {}
        for k, v in sub.items():
            row[f"{prefix}.{k}"] = v
    row["source"] = source
    return row


def load_results(path_or_dir: Path | str) -> pd.DataFrame:
    """Trial records of one JSONL file or of every JSONL file under a directory.

    Columns: the Record fields except ``grade`` / ``extra``, which are flattened into
    ``grade.<key>`` / ``extra.<key>``, plus ``source`` (the file). Nothing found -> an empty frame
    that still has the schema columns.
    """
    rows = [flatten_trial(rec, str(path)) for path, rec in _iter(jsonl_files(path_or_dir), "trial")]
    if not rows:
        return pd.DataFrame(columns=TRIAL_COLUMNS)
    df = pd.DataFrame.from_records(rows)
    for col in TRIAL_COLUMNS:
        if col not in df.columns:
            df[col] = None
    if "trial_id" in df.columns:  # one trial once per model: a run on supplied vectors shares the built run's ids
        has_id = df["trial_id"].fillna("").astype(str) != ""
        dedup = df[has_id].drop_duplicates(subset=["model_id", "trial_id"], keep="last")
        df = pd.concat([dedup, df[~has_id]]).sort_index()
    base = [c for c in TRIAL_COLUMNS if c in df.columns]
    rest = sorted(c for c in df.columns if c not in base)
    return df[base + rest].reset_index(drop=True)


def load_headers(path_or_dir: Path | str) -> pd.DataFrame:
    """Header records (one per run and file) with ``task`` taken from the file name.

    Columns: ``HEADER_COLUMNS`` plus any other top-level header keys.
    """
    rows = []
    for path, rec in _iter(jsonl_files(path_or_dir), "header"):
        row = {k: v for k, v in rec.items() if k != "type"}
        row.setdefault("task", path.stem)
        row["source"] = str(path)
        rows.append(row)
    if not rows:
        return pd.DataFrame(columns=HEADER_COLUMNS)
    df = pd.DataFrame.from_records(rows)
    for col in HEADER_COLUMNS:
        if col not in df.columns:
            df[col] = None
    rest = [c for c in df.columns if c not in HEADER_COLUMNS]
    return df[HEADER_COLUMNS + rest]
