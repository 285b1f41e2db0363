"""The verdicts as a reader meets them: the dashboard's banners and the terminal's lines.

Why its own module: task A's verdict is a value (``tasks.injection.verdict_glance.VerdictA``)
with a label, a table of its dimensions and a few lines under it; the summary carries it as JSON
in the ``verdict_glance`` row. Both renderers here read that one value, so the banner and the
terminal never disagree: the banner draws the label, an HTML table (one row per dimension: figure,
95% interval, Holm p, gate) and the lines; ``terminal`` prints the label first, then the same
table in fixed width. Verdicts without a glance (tasks B and C, summaries written before it)
keep their one-line note.
"""

from __future__ import annotations

import html
from typing import Any

import pandas as pd

from introspect.tasks.injection.verdict_glance import PASS, UNJUDGED, VerdictA

TASK_NAMES = {"A": "Task A · injected-thought detection", "B": "Task B · thoughts vs text",
              "C": "Task C · prefill intent"}
GLANCE = "verdict_glance"  # the summary metric whose note holds a ``VerdictA`` as JSON


def _esc(v: Any) -> str:
    if v is None or (isinstance(v, float) and pd.isna(v)):
        return ""
    return html.escape(str(v))


def glances(summary: pd.DataFrame) -> dict[tuple[str, str], VerdictA]:
    """{(model, task): VerdictA} of every ``verdict_glance`` row in a summary."""
    if summary.empty or "metric" not in summary:
        return {}
    g = summary[summary["metric"] == GLANCE]
    return {(str(r.model_id), str(r.task)): VerdictA.from_json(str(r.note)) for r in g.itertuples()}


def verdict_kind(label: str) -> str:
    """Banner colour from a verdict label's wording, whatever the exact label: green for a
    detection ("detected …"), red for "no measurable effect", amber for anything else."""
    text = str(label).strip().lower()
    if text.startswith("detected"):
        return "detected"
    return "none" if text.startswith("no measurable") else "inconclusive"


def unrepeated(note: str, label: str) -> str:
    """The verdict's note without the label it starts with (the banner shows the label already)."""
    if note.lower().startswith(label.lower()):
        rest = note[len(label):].lstrip(" :.,")
        return rest[:1].upper() + rest[1:] if rest else note
    return note


def glance_html(v: VerdictA) -> str:
    """The table of a verdict's dimensions (a row each, ``data-dim`` its key, ``data-gate`` its
    gate) and the lines under it, as HTML for the banner."""
    out = ""
    if v.dims:
        head = "".join(f"<th>{_esc(h)}</th>" for h in (v.header(), "figure", "95% interval", "Holm p", "gate"))
        body = "".join(
            f'<tr data-dim="{_esc(d.key)}" data-gate="{_esc(d.gate)}"><td>{_esc(d.name)}</td>'
            f'<td class="mono">{_esc(d.figure())}</td><td class="mono">{_esc(d.interval())}</td>'
            f'<td class="mono">{_esc(d.p_text())}</td>'
            f'<td class="gate {"pass" if d.gate == PASS else "unjudged" if d.gate == UNJUDGED else "fail"}">'
            f"{_esc(d.gate_text())}</td></tr>" for d in v.dims)
        out += f'<table class="glance"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
    return out + "".join(f'<p class="line"><b>{_esc(h)}</b>: {_esc(t)}</p>' for h, t in v.lines())


def verdicts(summary: pd.DataFrame) -> str:
    """One banner per (model, task): its label, then (task A) the table of its dimensions with the
    why, Holm and power lines, or (other tasks) the verdict's note."""
    if summary.empty or "metric" not in summary:
        return ""
    v = summary[summary["metric"] == "verdict"].sort_values(["task", "model_id"])
    seen = glances(summary)
    out = []
    for r in v.itertuples():
        task = TASK_NAMES.get(r.task, f"Task {r.task}")
        g = seen.get((str(r.model_id), str(r.task)))
        body = glance_html(g) if g is not None else f". {_esc(unrepeated(str(r.note), str(r.condition)))}"
        out.append(f'<div class="verdict {verdict_kind(r.condition)}" '
                   f'data-task="{_esc(r.task)}"><strong>{_esc(task)} — {_esc(r.model_id)}: '
                   f"{_esc(r.condition)}</strong>{body}</div>")
    return "".join(out)


def terminal(summary: pd.DataFrame) -> str:
    """Every verdict for the terminal, a blank line between them: the label first (with the task
    and model after it), then task A's fixed-width table and lines; other tasks' note."""
    if summary.empty or "metric" not in summary:
        return ""
    seen = glances(summary)
    out = []
    for r in summary[summary["metric"] == "verdict"].sort_values(["task", "model_id"]).itertuples():
        g = seen.get((str(r.model_id), str(r.task)))
        first = f"{r.condition} · task {r.task} · {r.model_id}"
        rest = g.text().split("\n", 1)[1:] if g is not None else [unrepeated(str(r.note), str(r.condition))]
        out.append("\n".join([first, *(x for x in rest if x and x != str(r.condition))]))
    return "\n\n".join(out)
