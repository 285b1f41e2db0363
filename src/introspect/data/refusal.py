"""Refusal sets (XSTest, the project's restriction questions): requests labelled safe or unsafe, checked against their layout."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from introspect.data.files import DataError, csv_rows, read_yaml


@dataclass(frozen=True)
class SafetyPrompt:
    """One XSTest (or own) request; ``label`` is "safe" or "unsafe"."""

    id: str
    prompt: str
    type: str
    label: str
    focus: str = ""
    note: str = ""


_XS_FMT = "XSTest CSV with columns id,prompt,type,label[,focus,note] (label safe|unsafe)"


def load_xstest(path: Path | str) -> list[SafetyPrompt]:
    """XSTest v2 prompts (Röttger et al. 2024): 250 safe and 200 unsafe requests."""
    p, rows = csv_rows(path, _XS_FMT, ("id", "prompt", "type", "label"))
    out = []
    for r in rows:
        label = (r["label"] or "").strip().lower()
        if label not in ("safe", "unsafe") or not (r["prompt"] or "").strip():
            raise DataError(f"{p}: row id={r['id']!r} has label {label!r} or no prompt; "
                            f"expected {_XS_FMT}")
        out.append(SafetyPrompt(str(r["id"]).strip(), r["prompt"].strip(), (r["type"] or "").strip(),
                                label, (r.get("focus") or "").strip(), (r.get("note") or "").strip()))
    return out


_RQ_FMT = ("YAML 'questions:' list of {id, text, category: benign|borderline|harmful}")


def load_restriction_questions(path: Path | str | None = None) -> list[SafetyPrompt]:
    """``concepts/restriction_questions.yaml``: requests labelled by category (harmful=unsafe)."""
    p, data = read_yaml(path, "restriction_questions.yaml", _RQ_FMT)
    qs = data.get("questions") if isinstance(data, dict) else None
    if not isinstance(qs, list) or not qs:
        raise DataError(f"{p}: no 'questions' list; expected {_RQ_FMT}")
    out = []
    for q in qs:
        cat = q.get("category") if isinstance(q, dict) else None
        if cat not in ("benign", "borderline", "harmful") or not str(q.get("text", "")).strip():
            raise DataError(f"{p}: entry {q!r:.60} malformed; expected {_RQ_FMT}")
        out.append(SafetyPrompt(str(q.get("id", len(out))), str(q["text"]).strip(), cat,
                                "unsafe" if cat == "harmful" else "safe"))
    return out


_RR_FMT = "YAML with 'harmful:' and 'harmless:' lists of requests, or an XSTest CSV (unsafe = harmful)"


def load_refusal_requests(path: Path | str | None = None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(harmful, harmless) requests for a refusal direction: the project's own
    ``concepts/refusal_requests.yaml`` by default, a YAML of the same layout, or an XSTest CSV."""
    if path is not None and Path(path).suffix.lower() == ".csv":
        rows = load_xstest(path)
        return (tuple(r.prompt for r in rows if r.label == "unsafe"), tuple(r.prompt for r in rows if r.label == "safe"))
    p, data = read_yaml(path, "refusal_requests.yaml", _RR_FMT)
    out = []
    for key in ("harmful", "harmless"):
        items = data.get(key) if isinstance(data, dict) else None
        if not isinstance(items, list) or len(items) < 4 or not all(isinstance(x, str) and x.strip() for x in items):
            raise DataError(f"{p}: '{key}' must list at least 4 requests; expected {_RR_FMT}")
        out.append(tuple(x.strip() for x in items))
    return out[0], out[1]
