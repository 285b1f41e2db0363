"""Task A's verdict as a value: its label, a table of its dimensions, and the lines under it.

Why a value: the verdict used to be one paragraph (44–230 words) that the terminal and the
dashboard printed as it was. ``verdict_a`` now builds one ``VerdictA`` (frozen) from the same
gates that pick the label, and every reader renders that: ``VerdictA.text`` is the plain
fixed-width glance (the label on the first line, then one row per dimension of the framing × cell
the verdict picked, with its figure, 95% interval, p and whether it passed its gate), and
``report.verdict_view`` draws the same table in HTML for the dashboard's banner. The summary
carries it as JSON in the note of a ``verdict_glance`` row (``to_json`` / ``from_json``), since
the tidy table has no column for a structure; the ``verdict`` row's note is ``text()``.

A gate reads ``pass`` (its row clears the gate at the family-wise level the label uses),
``fail``, or ``not judged`` (no row, or the verdict declines to judge it, as the yes-bias when
most answers to unrelated questions are detection reports). ``why`` says why a gate failed
although its interval clears 0 (the p that failed), or why it was not judged.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields

PASS, FAIL, UNJUDGED = "pass", "fail", "not judged"
GATES = (PASS, FAIL, UNJUDGED)
_NAME_W, _FIG_W, _CI_W, _P_W = 40, 12, 16, 10  # the fixed-width columns of ``VerdictA.text``


def _nan(x: float | None) -> float:
    return math.nan if x is None else float(x)


@dataclass(frozen=True)
class Dimension:
    """One row of the verdict's table: a gate (or a reading the labels use) at the picked cell."""

    key: str  # stable name: net, coherent, steering, beyond_yes_bias, yes_bias, reports, ...
    name: str  # what the table calls it
    metric: str  # the summary metric it reads ("" when not measured)
    value: float
    lo: float
    hi: float
    p: float  # Holm-adjusted p where the metric has a family, else its sign-flip p
    gate: str  # PASS, FAIL or UNJUDGED
    why: str = ""  # why a gate whose interval clears 0 failed, or why it was not judged
    unit: str = ""  # "" (a share or a difference of shares) or "nats"

    def figure(self) -> str:
        if math.isnan(self.value):
            return "not measured"
        return f"{self.value:.2f}" + (f" {self.unit}" if self.unit else "")

    def interval(self) -> str:
        if math.isnan(self.value):
            return ""
        return "no interval" if math.isnan(self.lo) else f"[{self.lo:.2f}, {self.hi:.2f}]"

    def p_text(self) -> str:
        return "" if math.isnan(self.p) else f"{self.p:.3g}"

    def gate_text(self) -> str:
        return f"{self.gate} ({self.why})" if self.why and self.why != "not measured" else self.gate


@dataclass(frozen=True)
class VerdictA:
    """Task A's verdict for one model: the label, the picked framing × cell and its dimensions,
    then why, the other cells with the same outcome, readings, the Holm family and power."""

    model: str
    value: float  # the verdict's value (``A_VERDICTS``' key)
    label: str
    where: str  # the picked framing × cell ("two_turn L24 α0.625"); "" when no Net row exists
    units: str  # α's units at that cell
    dims: tuple[Dimension, ...]
    why: str
    also: str = ""  # other cells with the same outcome
    readings: str = ""
    holm: str = ""
    power: str = ""

    def dim(self, key: str) -> Dimension | None:
        return next((d for d in self.dims if d.key == key), None)

    def header(self) -> str:
        """The first column's heading: the framing × cell the table reads."""
        return f"at {self.where} {self.units}".rstrip() if self.where else "dimension"

    def lines(self) -> list[tuple[str, str]]:
        """(heading, text) of the lines under the table, in order; empty ones left out."""
        return [(h, t) for h, t in (("why", self.why), ("also at", self.also), ("readings", self.readings),
                                    ("Holm", self.holm), ("power", self.power)) if t]

    def text(self) -> str:
        """The plain glance: the label, then a fixed-width table, then one line each for why, the
        other cells, readings, the Holm family and power."""
        out = [self.label]
        if self.dims:
            w = max(_NAME_W, len(self.header()) + 2, *(len(d.name) + 2 for d in self.dims))
            out.append("  " + self.header().ljust(w) + "figure".rjust(_FIG_W) + "  "
                       + "95% interval".ljust(_CI_W) + "Holm p".ljust(_P_W) + "gate")
            for d in self.dims:
                out.append("  " + d.name.ljust(w) + d.figure().rjust(_FIG_W) + "  "
                           + d.interval().ljust(_CI_W) + d.p_text().ljust(_P_W) + d.gate_text())
        out += [t if h == "Holm" else f"{h}: {t}" for h, t in self.lines()]
        return "\n".join(out)

    def to_json(self) -> str:
        """Lossless JSON (NaN as null), for the summary's ``verdict_glance`` row."""
        def clean(x):
            if isinstance(x, float) and math.isnan(x):
                return None
            if isinstance(x, dict):
                return {k: clean(v) for k, v in x.items()}
            if isinstance(x, (list, tuple)):
                return [clean(v) for v in x]
            return x
        return json.dumps(clean(asdict(self)), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> VerdictA:
        d = json.loads(text)
        floats = {f.name for f in fields(Dimension) if f.type == "float"}
        dims = tuple(Dimension(**{k: _nan(v) if k in floats else v for k, v in x.items()}) for x in d.pop("dims"))
        return cls(**{**d, "value": _nan(d["value"]), "dims": dims})
