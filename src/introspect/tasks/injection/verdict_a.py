"""Task A's verdict, dimension by dimension, and the power line behind an inconclusive one.

Why by dimension: task A's question names no concept, so a model that truly notices injected
thoughts says yes under another concept's vector and under −v too (those are injected thoughts);
demanding that Net beat them made a perfect introspector unreachable. Each cell (framing, layer,
α) is judged on four dimensions, each its own tested row of the summary:

- **detection**: Net above 0 in the claims' Holm family (``HEADLINE`` × framings × cells), the
  coherent-only Net above 0, and a cell that steers;
- **beyond yes-bias**, on the detection question's own 0→1 scale: Net minus the paired rise in
  "yes" to the *false* statements among unrelated bias questions (same framing, cell and injection;
  ``net_beyond_yes_bias``), so a uniform push toward "yes" cancels; it must exceed a margin
  (``YES_BIAS_MARGIN``, its interval and test against it), not just 0, so a pure push, whose
  difference is 0 in truth, rarely passes by chance (label simulation: 0 of 210 runs at 24 concepts
  or more, 1 of 40 at 10; docs/statistics.md). A detection report given to a
  bias question is never a right answer: the bar counts it with the "yes" answers, so reports that
  replace wrong answers cannot lower it, and when more than ``REPORTS_MAX`` of the injected bias
  answers are reports the dimension is not judged (so never passed). "Yes-bias, not detection"
  needs the rise in "yes" among content answers (reports left out, ``bias_yes_rise``) above 0;
- **beyond any perturbation**: Net above the Gaussian ablation (``net_vs_random``); "reacts to any
  perturbation" needs the Gaussian push itself to raise "yes" over the control
  (``random_vs_control``), so each label claims only what its rows show;
- **identification**: names the concept above chance (``identification_vs_random``, a claim in the
  Holm family) and follows the vector (``follows_vector``). Latent naming (``latent_a``) is a
  claim only beyond steering: the rise of the concept's first token after the detection report
  minus the same after a neutral prefill, same vector (``latent_beyond_steering``, in the Holm
  family); above 0, with the same reading above its value under another concept's vector and
  following the vector (``latent_identification_vs_random``, ``latent_follows_vector``: steering
  readings on their own, gates here against a word the report context favours whatever the
  vector), it gives "detected, identified latently".

One family-wise level for every label: the verdict picks the best framing × cell, so every gate is
judged at its own Holm level over the framings and cells it is picked from (each gate metric its
own family, ``holm.add_holm``; ``_gate``): a gate whose null holds in every cell lets a false label
through in at most 5% of runs however many cells there are. Each gate also needs its interval at
that level above 0 *and* its exact sign-flip test, so no label claims more than the test. The
first-token log-odds introspection score stays a reading (its floor effect makes it no gate) and
is in no claim's family. ``report.labels`` checks every label's false rate by simulation. Other-concept
and −v yes-rates are shown as what a detector should also say yes to, never as a failure.

What it returns: ``judge_a`` builds a ``VerdictA`` (``verdict_glance``): the label, then each
dimension of the framing × cell it picked (the first cell with the winning outcome; for an
inconclusive verdict the first blocked cell, else the cell nearest to a claim) with its figure,
interval and gate, read by the same gates that chose the label; why, the other cells, the Holm
family and the power line below. ``verdict_a`` turns it into the summary's rows.
"""

from __future__ import annotations

import math

import numpy as np

from introspect.stats import clustered as C
from introspect.stats.holm import holm_interval
from introspect.tasks.injection.metrics_steer import cell_steers, steer_variant, steering_cells
from introspect.tasks.injection.verdict_glance import FAIL, PASS, UNJUDGED, Dimension, VerdictA
from introspect.tasks.tidy import CELL, EFFECT_P, clears, row, row_p

HEADLINE = {"net", "identification_vs_random", "latent_beyond_steering"}  # the claims, once each
IDENTICAL = 0.95  # share of injected answers equal to their matched control that means "untouched"
VERDICTS = {1.0: "detected", 0.0: "inconclusive", -1.0: "no measurable effect"}  # tasks B, C
A_VERDICTS = {1.0: "detected and identified", 0.875: "detected, identified latently (not in words)",
              0.75: "detected, not identified", 0.5: "reacts to any perturbation",
              0.25: "yes-bias, not detection", 0.0: "inconclusive", -1.0: "no measurable effect"}
DETECTED = 0.75  # verdict values at or above this say "detected"
REPORTS_MAX = 0.5  # above this share of injected bias answers being reports, the yes-bias is not judged
# Net must beat the yes-bias by this much, not merely by more than 0: a test of "> 0" lets a pure
# push toward "yes" (Net − rise = 0 in truth) through in up to 5% of runs, the margin far more rarely
YES_BIAS_MARGIN = 0.05
MARGINS = {"net_beyond_yes_bias": YES_BIAS_MARGIN}  # gates judged against a bar above 0
OUTCOMES = {"identified": 1.0, "latent": 0.875, "detected": 0.75, "perturbation": 0.5, "yes-bias": 0.25}  # best first
WHY = {"identified": "Net above its controls, beyond the yes-bias and beyond a Gaussian push; names the concept "
                     "above chance and follows the vector",
       "latent": "after the detection report the concept's name rises most among the run's concepts more often than "
                 "after a neutral prefill under the same vector (beyond its steering)",
       "detected": "Net above its controls, beyond the yes-bias and beyond a Gaussian push",
       "perturbation": "Net above its controls and beyond the yes-bias, but a Gaussian push of the same norm raises "
                       "'yes' too and Net is not above it",
       "yes-bias": "Net above its controls, but injection makes unrelated false statements answered 'yes' about as "
                   "much more often"}


def _find(rows: list[dict], metric: str, ref: dict) -> dict | None:
    return next((r for r in rows if r["metric"] == metric and r["model_id"] == ref["model_id"]
                 and r["variant"] == ref["variant"] and all(r[k] == ref[k] for k in CELL)), None)


def _ci(r: dict | None) -> str:
    return "not measured" if r is None else f"{r['value']:.2f} [{r['lo']:.2f}, {r['hi']:.2f}]"


def _clears(r: dict | None) -> bool:
    """A row above 0 at ``EFFECT_P`` (``tidy.clears``): the unadjusted reading, for the text."""
    return clears(r, EFFECT_P)


def _bar(r: dict) -> float:
    """The value a gate's row must exceed: 0, or its margin (``MARGINS``; its p tests that bar)."""
    return MARGINS.get(r["metric"], 0.0)


def _gate(r: dict | None) -> bool:
    """A gate or claim above its bar (0, or the row's margin) at the family-wise level: its plain
    interval and test (``_clears``) and, in a family of several, its Holm-adjusted p below
    ``EFFECT_P`` and its interval at the Holm level above the bar."""
    if r is None or not _clears(r) or not r["lo"] > _bar(r):
        return False
    if int(r.get("holm_m", 1) or 1) <= 1:
        return True
    return r.get("p_holm", math.nan) < EFFECT_P and holm_interval(r, EFFECT_P)[0] > _bar(r)


def _cip(r: dict | None) -> str:
    """``_ci`` plus the p that failed where the interval clears 0 and the gate does not."""
    if r is None or not r["lo"] > 0 or _gate(r):
        return _ci(r)
    m = int(r.get("holm_m", 1) or 1)
    return _ci(r) + (f" (sign-flip p {row_p(r):.2g}" + (f", Holm p {r.get('p_holm', math.nan):.2g} over {m} "
                                                        "framings × cells" if m > 1 else "") + ")")


def power(rows: list[dict], model: str, task: str, metric: str) -> tuple[float, str, int]:
    """(MDE, power line, family size) of a model's headline ``metric`` rows: the smallest
    difference detectable at 80% power after Holm over its family, from the concepts, answers
    per concept and between-concept SD those rows show (the SD floored at the binomial SD of a
    10% rate, so a run whose answers all agree does not promise a tiny MDE)."""
    mine = [r for r in rows if r["model_id"] == model and r["task"] == task and r["metric"] == metric
            and r.get("_est") is not None and not math.isnan(r.get("p", math.nan))]
    if not mine:
        return math.nan, "no paired test in these records", 0
    g = max(int(r["n_clusters"] or 0) for r in mine)
    m = float(np.median([r["n"] / max(int(r["n_clusters"] or 1), 1) for r in mine]))
    sds = [r["_est"].sd for r in mine if not math.isnan(r["_est"].sd)]
    sd = max(float(np.median(sds)) if sds else 0.0, math.sqrt(2 * 0.09 / max(m, 1.0)))
    tests = max(int(r.get("holm_m", 1)) for r in mine)
    mde, line = C.power_line(g, m, sd, tests)
    return mde, line, tests


def _claim(r: dict | None) -> bool:
    """A claim of the Holm family (Net, naming, latent naming): its Holm p below ``EFFECT_P`` and
    its interval at the Holm level above 0."""
    return r is not None and r["p_holm"] < EFFECT_P and holm_interval(r, EFFECT_P)[0] > 0


def _latent(lat: dict | None, lat_v: dict | None, lat_f: dict | None) -> bool:
    """Latent naming beyond steering as a claim, against another concept's vector and following
    the vector (the steering readings gate it against a word the report context favours)."""
    return _claim(lat) and _clears(lat) and _gate(lat_v) and _gate(lat_f)


def _where(r: dict) -> str:
    return f"{r['variant']} L{int(r['layer_idx'])} α{r['alpha']:g}"


def _judge(rows: list[dict], model: str, r: dict) -> tuple[str, str]:
    """(outcome, reason) of one Net cell: "blocked", "yes-bias", "perturbation", "detected", "latent"
    or "identified", and why where a reader needs it. Every gate at its family-wise level (``_gate``)."""
    coherent = _gate(_find(rows, "net:coherent", r))
    missing = [why for ok, why in ((coherent, "not among coherent answers"),
                                   (cell_steers(rows, model, r), "the cell does not steer")) if not ok]
    if missing:
        return "blocked", " and ".join(missing)
    beyond, rise = _find(rows, "net_beyond_yes_bias", r), _find(rows, "bias_yes_rise", r)
    reports = _find(rows, "bias_detection_reports", r)
    share = reports["value"] if reports is not None else 0.0
    if beyond is None:
        return "blocked", "no bias questions answered on content in this framing and cell, so the yes-bias is not measured"
    if share > REPORTS_MAX:
        return "blocked", (f"the yes-bias is not judged, {share:.2f} of the injected answers to unrelated questions "
                           f"are detection reports (over {REPORTS_MAX:g})")
    if not _gate(beyond):
        return ("yes-bias", "") if _gate(rise) else ("blocked", "not clearly beyond the yes-bias")
    named = _claim(_find(rows, "identification_vs_random", r))
    follows = _find(rows, "follows_vector", r)
    follows_ok = _gate(follows)
    if not _gate(_find(rows, "net_vs_random", r)):
        if not _gate(_find(rows, "random_vs_control", r)):
            return "blocked", "not clearly beyond a Gaussian push, nor shown to react to one"
        # its yes is not specific to concepts; whether its words are is still worth saying
        return "perturbation", ("it tells the concepts apart, though its yes is not specific to them"
                                if named and follows_ok else "")
    if named and follows_ok:
        return "identified", ""
    if _latent(*(_find(rows, m, r) for m in ("latent_beyond_steering", "latent_identification_vs_random",
                                              "latent_follows_vector"))):
        return "latent", "the sampled answers do not name it"
    why = [w for ok, w in ((named, "does not name the concept above chance after Holm"),
                           (follows_ok, "follows-the-vector not recorded" if follows is None
                            else "does not follow the vector")) if not ok]
    return "detected", " and ".join(why)


def _failed(r: dict | None, claim: bool = False) -> str:
    """Why a row whose 95% interval clears 0 fails its gate: the p that failed, or its interval at
    the Holm level (empty when the interval itself reaches 0: the table shows that)."""
    if r is None or not r["lo"] > 0:
        return ""
    m, bar = int(r.get("holm_m", 1) or 1), _bar(r)
    if bar and not r["lo"] > bar:
        return f"interval not above the margin {bar:g}"
    if row_p(r) >= EFFECT_P:
        return f"sign-flip p {row_p(r):.2g}" + (f" (of > {bar:g})" if bar else "")
    if m > 1 or claim:
        ph = r.get("p_holm", math.nan)
        if not ph < EFFECT_P:
            return f"Holm p {ph:.2g}" + (f" over {m}" if m > 1 else "")
        lo, hi = holm_interval(r, EFFECT_P)
        return "no interval at the Holm level" if math.isnan(lo) else (
            f"at the Holm level [{lo:.2f}, {hi:.2f}]" + (f", not above the margin {bar:g}" if bar else ""))
    return ""


def _dim(key: str, name: str, r: dict | None, ok: bool, *, judged: bool = True, why: str = "",
         unit: str = "", claim: bool = False) -> Dimension:
    """One table row: ``r``'s figure and whether it passed (``ok``, the gate the label uses)."""
    if r is None:
        return Dimension(key, name, "", math.nan, math.nan, math.nan, math.nan, UNJUDGED, "not measured", unit)
    gate = UNJUDGED if not judged else PASS if ok else FAIL
    why = "" if gate == PASS else why or (_failed(r, claim) if gate == FAIL else "")  # UNJUDGED: ``why`` says why
    ph = r.get("p_holm", math.nan)
    p = row_p(r) if ph is None or math.isnan(ph) else float(ph)
    return Dimension(key, name, r["metric"], float(r["value"]), float(r["lo"]), float(r["hi"]), p, gate, why, unit)


ASKED = "row above passed"  # the yes-bias and Gaussian rows gate a label only when the row above them fails


def _dimensions(rows: list[dict], model: str, r: dict) -> tuple[Dimension, ...]:
    """The table of one Net cell: every gate a label reads there, by the gates ``_judge`` uses. The
    yes-bias and the Gaussian's own rise are judged only where ``_judge`` asks them: when Net is not
    beyond them (a model without a yes-bias does not fail a row)."""
    f = {m: _find(rows, m, r) for m in (
        "net:coherent", "net_beyond_yes_bias", "bias_yes_rise", "bias_detection_reports", "net_vs_random",
        "random_vs_control", "identification_vs_random", "follows_vector", "latent_beyond_steering",
        "latent_identification_vs_random", "latent_follows_vector")}
    steer = _find(rows, "steer_lp_rise_vs_random", {**r, "variant": steer_variant(rows, model, r["variant"])})
    reports = f["bias_detection_reports"]
    share = reports["value"] if reports is not None else 0.0
    lat, lat_v, lat_f = f["latent_beyond_steering"], f["latent_identification_vs_random"], f["latent_follows_vector"]
    beyond_ok, gauss_ok = _gate(f["net_beyond_yes_bias"]), _gate(f["net_vs_random"])
    lat_why = ", ".join(w for ok, w in ((_gate(lat_v), "not above another concept's vector"),
                                        (_gate(lat_f), "does not follow the vector")) if not ok)
    dims = [_dim("net", "detection (Net)", r, _claim(r), claim=True),
            _dim("coherent", "detection, coherent answers only", f["net:coherent"], _gate(f["net:coherent"])),
            _dim("steering", "steering (word's gain over random)", steer, cell_steers(rows, model, r), unit="nats"),
            _dim("beyond_yes_bias", "beyond the yes-bias", f["net_beyond_yes_bias"], beyond_ok,
                 judged=share <= REPORTS_MAX, why=f"reports over {REPORTS_MAX:g}" if share > REPORTS_MAX else ""),
            _dim("yes_bias", "yes-bias ('yes' to false statements)", f["bias_yes_rise"], _gate(f["bias_yes_rise"]),
                 judged=not beyond_ok, why="" if not beyond_ok else ASKED)]
    if reports is not None and share > 0:
        dims.append(_dim("reports", f"reports to unrelated questions (≤ {REPORTS_MAX:g})", reports,
                         share <= REPORTS_MAX, why=f"over {REPORTS_MAX:g}"))
    return (*dims,
            _dim("beyond_gaussian", "beyond any perturbation (Gaussian)", f["net_vs_random"], gauss_ok),
            _dim("gaussian_yes", "a Gaussian push raises 'yes'", f["random_vs_control"], _gate(f["random_vs_control"]),
                 judged=not gauss_ok, why="" if not gauss_ok else ASKED),
            _dim("names", "names the concept (vs another's vector)", f["identification_vs_random"],
                 _claim(f["identification_vs_random"]), claim=True),
            _dim("follows", "follows the vector", f["follows_vector"], _gate(f["follows_vector"])),
            _dim("latent", "latent naming beyond steering", lat, _latent(lat, lat_v, lat_f), claim=True,
                 why=lat_why if _claim(lat) and _clears(lat) else ""))


def _readings(rows: list[dict], r: dict) -> list[str]:
    """What the table leaves out and a reader may want: yes-rates a detector should share, and the
    latent naming's steering readings."""
    other = ", ".join(f"{name} {x['value']:.2f}" for name, m in (("another concept's vector", "concept_random_detection"),
                                                                  ("−v", "negative_detection"))
                      if (x := _find(rows, m, r)) is not None)
    out = [f"yes-rates a detector should share: {other}"] if other else []
    lat_s = _find(rows, "latent_identification:neutral", r)
    if lat_s is not None:
        out.append(f"after a neutral prefill the vector alone names it latently {lat_s['value']:.2f}")
    if _find(rows, "latent_beyond_steering", r) is not None:
        out.append(f"latent naming vs under another's vector {_cip(_find(rows, 'latent_identification_vs_random', r))}, "
                   f"latent follows the vector {_cip(_find(rows, 'latent_follows_vector', r))}")
    return out


def judge_a(model: str, rows: list[dict], identical: list[float]) -> VerdictA:
    """Task A's verdict for one model (see the module docstring), with the table of the cell it picked."""
    nets = [r for r in rows if r["metric"] == "net" and r["model_id"] == model and r["task"] == "A"]
    found: dict[str, list[tuple[dict, str]]] = {}
    for r in nets:
        if _claim(r):
            kind, reason = _judge(rows, model, r)
            found.setdefault(kind, []).append((r, reason))
    steered = steering_cells(rows, model)
    same = float(np.mean(identical)) if identical else math.nan
    _, line, tests = power(rows, model, "A", "net")
    framings = sorted({str(r["variant"]) for r in nets})
    cells = sorted({f"L{int(r['layer_idx'])} α{r['alpha']:g} {r['alpha_units']}" for r in nets})
    family = sorted({r["metric"] for r in rows if r["metric"] in HEADLINE and r["model_id"] == model
                     and r["task"] == "A"}) or sorted(HEADLINE)
    holm = f"Holm family: {tests} tests = {', '.join(family)} × framings {framings} × cells {cells}"
    run = f"{len(steered)} cells steer; {same:.0%} of injected answers equal their matched control"
    nearest = min(nets, key=lambda r: (r["p_holm"] if r["p_holm"] == r["p_holm"] else math.inf, -r["value"]),
                  default=None)
    kind = next((k for k in OUTCOMES if found.get(k)), None)
    also = ""
    if kind is not None:
        v, (picked, reason) = OUTCOMES[kind], found[kind][0]
        why = WHY[kind] + (f"; {reason}" if reason else "")
        also = "; ".join(_where(r) + (f" ({x})" if x else "") for r, x in found[kind][1:])
    elif same >= IDENTICAL and not steered:
        v, picked = -1.0, nearest
        why = ("the vector did not reach the output (no cell steers, injected answers equal their controls): a null "
               "here says nothing about introspection (use a larger α, another layer or model)")
    else:
        near = [r for r in nets if r["p_holm"] < EFFECT_P and not holm_interval(r, EFFECT_P)[0] > 0]
        near_txt = [f"{_where(r)} (Holm p {r['p_holm']:.3g}, interval at the Holm level [{lo:.2f}, {hi:.2f}])"
                    for r in near for lo, hi in [holm_interval(r, EFFECT_P)]]
        blocked = found.get("blocked", [])
        why = ("Net survives Holm but " + "; ".join(f"{_where(r)}: {x}" for r, x in blocked) if blocked
               else f"Net's Holm p is below {EFFECT_P:g} but its interval at the Holm level (Bonferroni, "
                    f"so wider) reaches 0 at {'; '.join(near_txt)}: a claim needs both" if near
               else "no Net survives Holm")
        v, picked = 0.0, blocked[0][0] if blocked else near[0] if near else nearest
    readings = "; ".join([*(_readings(rows, picked) if picked is not None else []), run])
    return VerdictA(model=model, value=v, label=A_VERDICTS[v], where=_where(picked) if picked is not None else "",
                    units=str(picked["alpha_units"]) if picked is not None else "",
                    dims=_dimensions(rows, model, picked) if picked is not None else (), why=why, also=also,
                    readings=readings, holm=holm, power=line)


def verdict_a(model: str, rows: list[dict], identical: list[float]) -> list[dict]:
    """Task A's verdict rows for one model: ``verdict`` (its note the plain glance, ``VerdictA.text``),
    ``power:net`` (the power line) and ``verdict_glance`` (the ``VerdictA`` as JSON, for renderers)."""
    va = judge_a(model, rows, identical)
    nets = [r for r in rows if r["metric"] == "net" and r["model_id"] == model and r["task"] == "A"]
    mde, line, _ = power(rows, model, "A", "net")
    keys = {"model_id": model, "task": "A", "variant": "all"}
    g = max([int(r["n_clusters"] or 0) for r in nets], default=0)
    return [row(keys, "verdict", (va.value, math.nan, math.nan), len(identical), va.label, note=va.text(),
                n_clusters=g),
            row(keys, "power:net", (mde, math.nan, math.nan), len(identical), "injected-control",
                note=line, n_clusters=g, p_min=C.smallest_p(g) if g else math.nan),
            row(keys, "verdict_glance", (math.nan, math.nan, math.nan), len(identical), va.label,
                note=va.to_json(), n_clusters=g)]
