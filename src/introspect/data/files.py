"""Reading data files strictly: every failure is one ``DataError`` line naming the file and its expected layout.

Why strict: the self-knowledge tasks read datasets the project never ships (users give a path),
so each loader checks the layout it expects and fails with one line (the CLIs turn
``DataError`` into exit status 2) instead of a KeyError later.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

LETTERS = "ABCDEFGH"


class DataError(ValueError):
    """A data file that is missing, empty or not in the expected format (one-line message)."""


def read_text(path: Path | str, expected: str) -> tuple[Path, str]:
    """The text of a non-empty UTF-8 file (a BOM is dropped)."""
    p = Path(path)
    if not p.is_file():
        raise DataError(f"{p}: file not found; expected {expected}")
    try:
        text = p.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{p}: cannot read ({type(e).__name__}); expected {expected}") from e
    if not text.strip():
        raise DataError(f"{p}: file is empty; expected {expected}")
    return p, text


def read_json(path: Path | str, expected: str) -> tuple[Path, Any]:
    """A JSON file's parsed value."""
    p, text = read_text(path, expected)
    try:
        return p, json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"{p}: not valid JSON (line {e.lineno}); expected {expected}") from e


def csv_rows(path: Path | str, expected: str, required: Sequence[str]) -> tuple[Path, list[dict]]:
    """A headed CSV's rows as dicts, refusing missing ``required`` columns or no rows."""
    p, text = read_text(path, expected)
    reader = csv.DictReader(text.splitlines())
    cols = set(reader.fieldnames or ())
    missing = [c for c in required if c not in cols]
    if missing:
        raise DataError(f"{p}: missing columns {missing}; expected {expected}")
    rows = list(reader)
    if not rows:
        raise DataError(f"{p}: no data rows; expected {expected}")
    return p, rows


def clean_words(items: Any) -> tuple[str, ...]:
    """Non-empty strings, stripped, first occurrence kept (case-insensitive)."""
    out: dict[str, str] = {}
    for w in items:
        if isinstance(w, str) and w.strip():
            out.setdefault(w.strip().casefold(), w.strip())
    return tuple(out.values())


CONCEPTS_DIR = Path(__file__).resolve().parent / "concepts"  # package data; the repo's concepts/ links here


def concepts_dir() -> Path:
    """``$INTROSPECT_CONCEPTS`` if set, else the word lists shipped in the package
    (``introspect/data/concepts``), so an installed toolkit finds them from any folder."""
    env = os.environ.get("INTROSPECT_CONCEPTS")
    return Path(env) if env else CONCEPTS_DIR


def parse_yaml(text: str) -> Any:
    """``yaml.safe_load`` through libyaml where PyYAML has it: the same values, about ten times
    faster (word and question files are read at every task start)."""
    import yaml

    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 (a safe loader)


def read_yaml(path: Path | str | None, default: str, expected: str) -> tuple[Path, Any]:
    """A YAML file's parsed value; ``path`` None reads ``default`` from the concepts folder."""
    import yaml

    p, text = read_text(path if path is not None else concepts_dir() / default, expected)
    try:
        return p, parse_yaml(text)
    except yaml.YAMLError as e:
        raise DataError(f"{p}: not valid YAML ({type(e).__name__}); expected {expected}") from e
