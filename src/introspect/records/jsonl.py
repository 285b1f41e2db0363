"""JSONL records: one header per run, one record per trial, appended atomically.

Why a schema: every number in a report must be traceable to how it was produced (seed, model,
fingerprint, versions, commit), and a sweep killed mid-write must resume without losing or
duplicating a trial. Each line is written with a single ``write`` + ``flush`` + ``fsync`` on an
``O_APPEND`` file, so a crash leaves at most one torn last line, which ``read_records`` drops.

The published contract is ``introspect.records.schema``: JSON Schema files for version
``SCHEMA_VERSION`` (``schema/v1/``), per task, and ``docs/record-schema.md`` generated from them.
``validate`` here is its dependency-free subset, checked on every write; a test keeps the two in
agreement and validates every record every task writes against the files.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
import subprocess
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1

CONDITIONS = (
    "injected",  # the concept vector, at the trial's layer and alpha
    "control",  # same prompt, no injection
    "random",  # norm-matched random vector (ablation)
    "concept_random",  # another concept's vector, same α (ablation: any concept vs this concept)
    "negative",  # -v (ablation)
    "bias",  # unrelated yes/no question whose right answer is "no", injected (older runs: either)
    "bias_control",  # the same bias question, same concept and stream, not injected
    "mismatch",  # a different concept than the one the trial is about (task C control)
    "think",  # task D: instructed to think about the word
    "dont_think",  # task D: instructed not to think about the word
    "rewarded",  # task D: "if you think about X you will be rewarded" (Lindsey's incentive pair)
    "punished",  # task D: "... you will be punished"
    "steer",  # steering check: the concept injected into a neutral prompt
    "steer_control",  # steering check: the same neutral prompt, no injection
    "steer_random",  # steering check: a Gaussian direction of the concept's norm, same prompt and stream
    "clean",  # self-knowledge tasks: no intervention
    "perturbed",  # token-injection recovery: tokens inserted into the output stream
)


class SchemaError(ValueError):
    """A record that does not match the schema (on write or on read)."""


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def trial_id(**coords: Any) -> str:
    """Deterministic id from a trial's coordinates (order-independent, JSON-canonical)."""
    blob = json.dumps(coords, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


@dataclass
class Record:
    """One trial. Field names follow seed §8's schema, plus provenance and white-box scores."""

    seed: int
    model_id: str
    task: str
    condition: str
    layer_idx: int | None = None
    alpha: float = 0.0
    alpha_units: str = "raw"
    alpha_effective: float = 0.0  # the scalar actually multiplied into the unit vector
    word: str | None = None
    injected: bool = False
    token_positions: list[int] | str | None = None
    prompt: str = ""
    response: str = ""
    grade: dict[str, Any] = field(default_factory=dict)
    gen: dict[str, Any] = field(default_factory=dict)
    p_yes: float | None = None
    p_no: float | None = None
    variant: str = "default"
    trial_index: int = 0
    sample: int = 0  # index of this sampled answer among the trial's K (its stream seed is in gen)
    trial_id: str = ""
    run_id: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    ts: str = field(default_factory=utc_now)
    type: str = "trial"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_REQUIRED = {f.name for f in fields(Record) if f.name in ("seed", "model_id", "task", "condition")}
_TYPES: dict[str, tuple[type, ...]] = {
    "seed": (int,),
    "model_id": (str,),
    "task": (str,),
    "condition": (str,),
    "layer_idx": (int, type(None)),
    "alpha": (int, float),
    "alpha_effective": (int, float),
    "word": (str, type(None)),
    "injected": (bool,),
    "prompt": (str,),
    "response": (str,),
    "grade": (dict,),
    "gen": (dict,),
    "p_yes": (int, float, type(None)),
    "p_no": (int, float, type(None)),
    "trial_id": (str,),
    "sample": (int,),
    "run_id": (str,),
    "extra": (dict,),
}


def validate(rec: dict[str, Any]) -> dict[str, Any]:
    """Check a trial or header dict against the schema; return it or raise SchemaError."""
    kind = rec.get("type")
    if kind == "header":
        for key in ("run_id", "model_id", "fingerprint", "versions", "seed", "ts"):
            if key not in rec:
                raise SchemaError(f"header record lacks {key!r}")
        return rec
    if kind != "trial":
        raise SchemaError(f"record type must be 'trial' or 'header', got {kind!r}")
    missing = _REQUIRED - rec.keys()
    if missing:
        raise SchemaError(f"trial record lacks {sorted(missing)}")
    for key, types in _TYPES.items():
        if key in rec and not isinstance(rec[key], types):
            raise SchemaError(f"field {key!r} has type {type(rec[key]).__name__}")
    if rec["condition"] not in CONDITIONS:
        raise SchemaError(f"unknown condition {rec['condition']!r}; expected one of {CONDITIONS}")
    for key in ("alpha", "alpha_effective", "p_yes", "p_no"):
        v = rec.get(key)
        if isinstance(v, float) and not math.isfinite(v):
            raise SchemaError(f"field {key!r} is not finite: {v}")
    return rec


def git_commit(repo: Path | None = None) -> str:
    """The project's commit (with '+dirty' when the tree has changes), or 'unknown'."""
    where = repo or Path(__file__).resolve().parent
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=5
        ).stdout.strip()
        if not sha:
            return "unknown"
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=where, capture_output=True, text=True, timeout=5,
        ).stdout.strip()
        return sha + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def versions(*extra: str) -> dict[str, str]:
    """Installed versions of the toolkit's core packages and of ``extra`` ones ("absent" if not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("torch", "transformers", "transformer-lens", "introspect", "numpy", *extra):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "absent"
    return out


def make_header(
    *, run_id: str, model_id: str, fingerprint: str, seed: int, config: dict[str, Any],
    notes: Iterable[str] = (), runtime: dict[str, Any] | None = None, vectors: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``runtime``: where and how the run computed (device and its name, attention implementation,
    dtype, batch size and why), so a figure can be traced to the hardware that produced it.
    ``vectors``: where the run's concept vectors came from (built, a file, a Python mapping)."""
    extra = {"vectors": vectors} if vectors is not None else {}
    return {
        "type": "header",
        "schema": SCHEMA_VERSION,
        "run_id": run_id,
        "ts": utc_now(),
        "model_id": model_id,
        "fingerprint": fingerprint,
        "seed": seed,
        "versions": versions(),
        "git_commit": git_commit(),
        "config": config,
        "runtime": dict(runtime or {}),
        "notes": list(notes),
        **extra,
    }


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if hasattr(obj, "item") and callable(obj.item) and getattr(obj, "ndim", 1) == 0:
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


class JsonlWriter:
    """Append-only JSONL file; each record is one atomic ``write`` followed by fsync."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._repair_tail()

    def _repair_tail(self) -> None:
        """A torn last line (crash mid-write) gets a newline so the next append starts clean."""
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        with open(self.path, "rb") as fh:
            fh.seek(-1, os.SEEK_END)
            last = fh.read(1)
        if last != b"\n":
            with open(self.path, "ab") as fh:
                fh.write(b"\n")

    def write(self, rec: Record | dict[str, Any]) -> None:
        d = rec.to_dict() if isinstance(rec, Record) else dict(rec)
        validate(d)
        line = (json.dumps(d, default=_jsonable, ensure_ascii=False) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)


def read_records(path: Path | str, *, strict: bool = False) -> Iterator[dict[str, Any]]:
    """Yield header and trial dicts; torn or invalid lines are skipped (or raise if strict)."""
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield validate(json.loads(line))
            except (json.JSONDecodeError, SchemaError) as e:
                if strict:
                    raise SchemaError(f"{path}:{n}: {e}") from e


def done_trial_ids(path: Path | str) -> set[str]:
    p = Path(path)
    if not p.exists():
        return set()
    return {r["trial_id"] for r in read_records(p) if r["type"] == "trial" and r["trial_id"]}
