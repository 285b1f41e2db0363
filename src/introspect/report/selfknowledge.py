"""Hook the self-knowledge tasks' summaries (``tasks.sk_metrics``) into the report's registry.

Why a bridge module: the metric functions live beside their tasks (they are tested on the
papers' worked examples there); the report only needs them as rows of its tidy table.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from introspect.report.metrics import register_summary, row
from introspect.tasks.sk_metrics import SUMMARIES


def _adapter(fn):
    def rows(df: pd.DataFrame) -> list[dict[str, Any]]:
        out = []
        for r in fn(df).to_dict("records"):
            keys = {k: r.get(k) for k in ("model_id", "task", "variant")}
            out.append(row(keys, r["metric"], (r["value"], r["lo"], r["hi"]), r["n"], r.get("condition") or ""))
        return out

    return rows


for _task, _fn in SUMMARIES.items():
    register_summary(_task, _adapter(_fn), exact=True)
