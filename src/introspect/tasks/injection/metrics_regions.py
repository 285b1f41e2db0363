"""Task A's region comparison: Net by token region, paired by concept (``regions``).

Why a row of its own: each region framing (``paper@user``, ...) already gets every detection
row, but whether a "yes" follows the injection's place is a question about differences. Per
(model, framing, cell), each region's Net is compared with the reference region's over the
concepts both ran: per concept, mean(detected − control) in one region minus the same in the
reference, then a Student t interval over concepts with its sign-flip p (``tidy.combo_row``, the
construction whose coverage ``net_beyond_yes_bias`` shows). The reference is
``question+answer`` (the paper framing's own span) when the run has it, else the first region in
prompt order. Rows: ``region_net_vs:<reference>`` under the region's variant.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from introspect.tasks.fewshot import SUFFIX
from introspect.tasks.injection.regions import order, split
from introspect.tasks.tidy import CELL, col, combo_row, flag

REFERENCE = "question+answer"


def reference(regions: list[str]) -> str:
    """The region the others are compared with."""
    if REFERENCE in regions:
        return REFERENCE
    return min(regions, key=order)


def _net(p: pd.DataFrame) -> tuple[Any, Any]:
    return flag(col(p, "grade.detected")) - flag(col(p, "grade.detected~c")), p["concept"].to_numpy()


def region_rows(cells: list[tuple[dict[str, Any], pd.DataFrame]]) -> list[dict[str, Any]]:
    """``region_net_vs:<reference>`` per region framing and cell, from summarize_a's paired cells."""
    by: dict[tuple, dict[str, tuple[dict[str, Any], pd.DataFrame]]] = {}
    for keys, p in cells:
        framing, region = split(str(keys["variant"]))
        if region is None:
            continue
        fmt = SUFFIX if str(keys["variant"]).endswith(SUFFIX) else ""
        k = (keys["model_id"], keys["task"], framing + fmt, *(keys[c] for c in CELL))
        by.setdefault(k, {})[region] = (keys, p)
    out: list[dict[str, Any]] = []
    for regs in by.values():
        ref = reference(list(regs))
        ref_part = _net(regs[ref][1])
        for region, (keys, p) in regs.items():
            if region != ref:
                out += combo_row(keys, f"region_net_vs:{ref}", [_net(p), ref_part], lambda a, b: a - b,
                                 f"{region}-{ref}", note=f"Net injected over {region} minus over {ref}, "
                                 "paired by concept")
    return out
