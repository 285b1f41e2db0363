"""The published record schema: JSON Schema (draft 2020-12) files shipped with the package.

Every line of a records file (``<out>/<model>/<task>.jsonl``) is a JSON object: a run header
(``type: header``) or a trial (``type: trial``). ``v<N>/`` holds the schema of the header's
``schema`` version N (``records.jsonl.SCHEMA_VERSION``): ``record.schema.json`` accepts any line
and sends it to ``header.schema.json`` or to its task's ``task-<task>.schema.json`` (a task
name no toolkit task has, e.g. an Inspect task of one's own: ``task-inspect.schema.json``); every
task schema adds its conditions, variants and ``grade`` / ``gen`` / ``extra`` fields to the
fields all trials share (``trial.schema.json``). The files refer to each other by file name, so
they validate from any folder holding all of them.

The runtime check on every write (``records.jsonl.validate``, no dependency) is a subset of this
contract; validating against the files needs ``jsonschema`` (``pip install jsonschema``)::

    python -m introspect.records.schema results/<model>/A.jsonl ...

The reference page ``docs/record-schema.md`` is generated from these files
(``python -m introspect.records.schema_doc``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

from introspect.records.jsonl import SCHEMA_VERSION

SCHEMA_DIR = Path(__file__).resolve().parent / f"v{SCHEMA_VERSION}"
ROOT = "record"  # the schema of any line
SUFFIX = ".schema.json"


def names() -> list[str]:
    """The schema files' names without the suffix (``record``, ``header``, ``trial``, ``task-A`` ...)."""
    return sorted(p.name[: -len(SUFFIX)] for p in SCHEMA_DIR.glob(f"*{SUFFIX}"))


def task_names() -> list[str]:
    """The tasks with a schema of their own (``inspect``: records of any other task name)."""
    return [n[len("task-"):] for n in names() if n.startswith("task-")]


@cache
def _load(name: str) -> str:
    return (SCHEMA_DIR / f"{name}{SUFFIX}").read_text(encoding="utf-8")


def load(name: str = ROOT) -> dict[str, Any]:
    """One schema file as a dict (a fresh copy)."""
    if name not in names():
        raise KeyError(f"no record schema {name!r}; there are {', '.join(names())}")
    return json.loads(_load(name))


def registry() -> Any:
    """A ``referencing.Registry`` holding every schema file under its file name (how they refer to
    each other). Needs ``jsonschema`` (which brings ``referencing``)."""
    from referencing import Registry, Resource

    return Registry().with_resources((f"{n}{SUFFIX}", Resource.from_contents(load(n))) for n in names())


@cache
def validator(name: str = ROOT) -> Any:
    """A draft 2020-12 ``jsonschema`` validator of one schema file, its references resolved
    (built once per name)."""
    from jsonschema import Draft202012Validator

    schema = load(name)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, registry=registry())


def errors(record: dict[str, Any], name: str = ROOT) -> list[str]:
    """Every way ``record`` breaks the schema ``name`` (empty: it conforms), one line each."""
    out = []
    for e in sorted(validator(name).iter_errors(record), key=lambda e: list(e.absolute_path)):
        where = "/".join(str(p) for p in e.absolute_path) or "(record)"
        out.append(f"{where}: {e.message}")
    return out


def check_lines(lines: Iterable[str], name: str = ROOT) -> Iterator[tuple[int, str]]:
    """(line number, error) for every line of a records file that breaks the schema; a blank
    line is skipped, an unparsable one reported (a torn last line of a killed run reads so)."""
    v = validator(name)
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            yield n, f"not JSON ({e.msg})"
            continue
        for e in v.iter_errors(rec):
            yield n, f"{'/'.join(str(p) for p in e.absolute_path) or '(record)'}: {e.message}"


def main(argv: list[str] | None = None) -> int:
    """``python -m introspect.records.schema FILE...``: check records files against the schema."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m introspect.records.schema",
                                 description=f"Check JSONL records files against the record schema (version {SCHEMA_VERSION}).")
    ap.add_argument("files", nargs="*", type=Path, help="records files (.jsonl)")
    ap.add_argument("--path", action="store_true", help="print the folder of the schema files and exit")
    args = ap.parse_args(argv)
    if args.path:
        print(SCHEMA_DIR)
        return 0
    if not args.files:
        ap.error("give one or more records files (or --path)")
    try:
        import jsonschema  # noqa: F401
    except ImportError:
        print("checking records needs jsonschema: pip install jsonschema", file=sys.stderr)
        return 2
    bad = 0
    for f in args.files:
        try:
            problems = list(check_lines(f.read_text(encoding="utf-8").splitlines()))
        except OSError as e:
            print(f"{f}: {e.strerror}", file=sys.stderr)
            return 2
        for n, msg in problems:
            print(f"{f}:{n}: {msg}")
        bad += bool(problems)
        if not problems:
            print(f"{f}: ok")
    return 1 if bad else 0
