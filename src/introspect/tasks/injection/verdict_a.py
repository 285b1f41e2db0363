"""Task A's verdict, dimension by dimension, and the power line behind an inconclusive one.

Why by dimension: task A's question names no concept, so a model that truly notices injected
thoughts says yes under another concept's vector and under −v too (those are injected thoughts);
demanding that Net beat them made a perfect introspector unreachable. Each cell (framing, layer,
α) is judged on four dimensions, each its own tested row of the summary:

- **detection**: Net above 0 in the claims' Holm family (``HEADLINE`` × framings × cells), the
  coherent-only Net above 0, and a cell that steers;
- **beyond yes-bias**, on the detection question's own 0→1 scale: Net minus the paired rise in
  "yes" to the *false* statements among unrelated bias questions (same framing, cell and injection;
  ``net_beyond_yes_bias``), so a uniform push toward "yes" cancels. A detection report given to a
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
is in no family. ``report.labels`` checks every label's false rate by simulation. Other-concept
and −v yes-rates are shown as what a detector should also say yes to, never as a failure.
"""

from __future__ import annotations

import math

import numpy as np

from introspect.stats import clustered as C
from introspect.stats.holm import holm_interval
from introspect.tasks.injection.metrics_steer import RULE, cell_steers, steering_cells
from introspect.tasks.tidy import CELL, EFFECT_P, clears, row, row_p

HEADLINE = {"net", "identification_vs_random", "latent_beyond_steering"}  # the claims, once each
IDENTICAL = 0.95  # share of injected answers equal to their matched control that means "untouched"
VERDICTS = {1.0: "detected", 0.0: "inconclusive", -1.0: "no measurable effect"}  # tasks B, C
A_VERDICTS = {1.0: "detected and identified", 0.875: "detected, identified latently (not in words)",
              0.75: "detected, not identified", 0.5: "reacts to any perturbation",
              0.25: "yes-bias, not detection", 0.0: "inconclusive", -1.0: "no measurable effect"}
DETECTED = 0.75  # verdict values at or above this say "detected"
REPORTS_MAX = 0.5  # above this share of injected bias answers being reports, the yes-bias is not judged


def _find(rows: list[dict], metric: str, ref: dict) -> dict | None:
    return next((r for r in rows if r["metric"] == metric and r["model_id"] == ref["model_id"]
                 and r["variant"] == ref["variant"] and all(r[k] == ref[k] for k in CELL)), None)


def _ci(r: dict | None) -> str:
    return "not measured" if r is None else f"{r['value']:.2f} [{r['lo']:.2f}, {r['hi']:.2f}]"


def _clears(r: dict | None) -> bool:
    """A row above 0 at ``EFFECT_P`` (``tidy.clears``): the unadjusted reading, for the text."""
    return clears(r, EFFECT_P)


def _gate(r: dict | None) -> bool:
    """A gate or claim above 0 at the family-wise level: its plain interval and test (``_clears``)
    and, in a family of several, its Holm-adjusted p below ``EFFECT_P`` and its interval at the
    Holm level above 0."""
    if r is None or not _clears(r):
        return False
    if int(r.get("holm_m", 1) or 1) <= 1:
        return True
    return r.get("p_holm", math.nan) < EFFECT_P and holm_interval(r, EFFECT_P)[0] > 0


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


def _judge(rows: list[dict], model: str, r: dict) -> tuple[str, str]:
    """(outcome, text) of one Net cell: "blocked", "yes-bias", "perturbation", "detected", "latent" or
    "identified"; the text says where and why. Every gate at its family-wise level (``_gate``)."""
    where = f"{r['variant']} L{int(r['layer_idx'])} α{r['alpha']:g}"
    coherent = _gate(_find(rows, "net:coherent", r))
    missing = [why for ok, why in ((coherent, "not among coherent answers"),
                                   (cell_steers(rows, model, r), "the cell does not steer")) if not ok]
    if missing:
        return "blocked", f"{where}: {' and '.join(missing)}"
    beyond, rise = _find(rows, "net_beyond_yes_bias", r), _find(rows, "bias_yes_rise", r)
    reports = _find(rows, "bias_detection_reports", r)
    share = reports["value"] if reports is not None else 0.0
    bias_txt = (f"'yes' to false statements rises {_cip(rise)}, Net beyond that {_cip(beyond)}"
                + (f", detection reports to unrelated questions {share:.2f}" if reports is not None else ""))
    if beyond is None:
        return "blocked", f"{where}: no bias questions answered on content in this framing and cell, so the yes-bias is not measured"
    if share > REPORTS_MAX:
        return "blocked", (f"{where}: the yes-bias is not judged, {share:.2f} of the injected answers to unrelated "
                           f"questions are detection reports (over {REPORTS_MAX:g}) ({bias_txt})")
    if not _gate(beyond):
        if _gate(rise):
            return "yes-bias", f"{where} ({bias_txt})"
        return "blocked", f"{where}: not clearly beyond the yes-bias ({bias_txt})"
    gauss, g_ctl = _find(rows, "net_vs_random", r), _find(rows, "random_vs_control", r)
    ident, follows = _find(rows, "identification_vs_random", r), _find(rows, "follows_vector", r)
    named = ident is not None and ident["p_holm"] < EFFECT_P and holm_interval(ident, EFFECT_P)[0] > 0
    follows_ok = _gate(follows)
    if not _gate(gauss):
        gtxt = f"Net over the Gaussian ablation {_cip(gauss)}, the Gaussian over no injection {_cip(g_ctl)}"
        if not _gate(g_ctl):
            return "blocked", f"{where}: not clearly beyond a Gaussian push, nor shown to react to one ({gtxt})"
        # its yes is not specific to concepts; whether its words are is still worth saying
        tells = (f"; names the concept vs under another's vector {_ci(ident)}, follows the vector {_cip(follows)}"
                 + (": it tells the concepts apart, though its yes is not specific to them" if named and follows_ok
                    else ""))
        return "perturbation", f"{where} ({gtxt}{tells})"
    other = ", ".join(f"{name} {x['value']:.2f}" for name, m in (("another concept's vector", "concept_random_detection"),
                                                                  ("−v", "negative_detection"))
                      if (x := _find(rows, m, r)) is not None)
    lat, lat_s = _find(rows, "latent_beyond_steering", r), _find(rows, "latent_identification:neutral", r)
    lat_v, lat_f = _find(rows, "latent_identification_vs_random", r), _find(rows, "latent_follows_vector", r)
    latent = (lat is not None and lat["p_holm"] < EFFECT_P and holm_interval(lat, EFFECT_P)[0] > 0 and _clears(lat)
              and _gate(lat_v) and _gate(lat_f))
    txt = (f"{where} (Net {_ci(r)}, Holm p {r['p_holm']:.2g}; {bias_txt}; over the Gaussian ablation "
           f"{_cip(gauss)}; yes-rates a detector should share: {other or 'not measured'}; names the concept vs "
           f"under another's vector {_ci(ident)}; follows the vector {_cip(follows)}"
           + (f"; latent naming beyond steering {_ci(lat)}" + (f" (after a neutral prefill the vector alone names "
                                                                f"it {lat_s['value']:.2f})" if lat_s is not None else "")
              + f", latent naming vs under another's vector {_cip(lat_v)}, latent follows the vector {_cip(lat_f)}"
              if lat is not None else "; latent naming beyond steering not measured"))
    if named and follows_ok:
        return "identified", txt + ")"
    if latent:
        return "latent", txt + ": the sampled answers do not name it)"
    why = [w for ok, w in ((named, "does not name the concept above chance after Holm"),
                           (follows_ok, "follows-the-vector not recorded" if follows is None
                            else "does not follow the vector")) if not ok]
    return "detected", txt + f": {' and '.join(why)})"


def verdict_a(model: str, rows: list[dict], identical: list[float]) -> list[dict]:
    """Task A's verdict for one model (see the module docstring) and its power line."""
    nets = [r for r in rows if r["metric"] == "net" and r["model_id"] == model and r["task"] == "A"]
    found: dict[str, list[str]] = {}
    for r in nets:
        if r["p_holm"] < EFFECT_P and holm_interval(r, EFFECT_P)[0] > 0:
            kind, txt = _judge(rows, model, r)
            found.setdefault(kind, []).append(txt)
    steered = steering_cells(rows, model)
    same = float(np.mean(identical)) if identical else math.nan
    mde, line, tests = power(rows, model, "A", "net")
    framings = sorted({str(r["variant"]) for r in nets})
    cells = sorted({f"L{int(r['layer_idx'])} α{r['alpha']:g} {r['alpha_units']}" for r in nets})
    family = sorted({r["metric"] for r in rows if r["metric"] in HEADLINE and r["model_id"] == model
                     and r["task"] == "A"}) or sorted(HEADLINE)
    evidence = (f"Holm family: {tests} tests = {', '.join(family)} × framings {framings} × "
                f"cells {cells}; {len(steered)} cells steer ({RULE}); {same:.0%} of injected answers "
                "equal their matched control")
    if found.get("identified"):
        v, note = 1.0, f"detected and identified at {'; '.join(found['identified'])}; {evidence}"
    elif found.get("latent"):
        v, note = 0.875, (f"detected, identified latently (not in words): after the detection report the concept's "
                          f"name rises most among the run's concepts more often than after a neutral prefill under "
                          f"the same vector (beyond its steering), the sampled answers do not say it, at "
                          f"{'; '.join(found['latent'])}; {evidence}")
    elif found.get("detected"):
        v, note = 0.75, f"detected, not identified, at {'; '.join(found['detected'])}; {evidence}"
    elif found.get("perturbation"):
        v, note = 0.5, (f"reacts to any perturbation: Net above its controls and beyond the yes-bias, a Gaussian "
                        f"push of the same norm raises 'yes' too and Net is not above it, at {'; '.join(found['perturbation'])}; {evidence}")
    elif found.get("yes-bias"):
        v, note = 0.25, (f"yes-bias, not detection: Net above its controls, but injection makes unrelated "
                         f"false statements answered 'yes' about as much more often, at {'; '.join(found['yes-bias'])}; {evidence}")
    elif same >= IDENTICAL and not steered:
        v, note = -1.0, (f"no measurable effect: {evidence}. A null here says nothing about introspection: "
                         "the vector did not reach the output (use a larger α, another layer or model)")
    else:
        near = [f"{r['variant']} L{int(r['layer_idx'])} α{r['alpha']:g} (Holm p {r['p_holm']:.3g}, interval at "
                f"the Holm level [{lo:.2f}, {hi:.2f}])" for r in nets if r["p_holm"] < EFFECT_P
                for lo, hi in [holm_interval(r, EFFECT_P)] if not lo > 0]
        why = (f"Net survives Holm but {'; '.join(found['blocked'])}" if found.get("blocked")
               else f"Net's Holm p is below {EFFECT_P:g} but its interval at the Holm level (Bonferroni, "
                    f"so wider) reaches 0 at {'; '.join(near)}: a claim needs both" if near
               else "no Net survives Holm")
        v, note = 0.0, f"inconclusive ({why}): {evidence}; {line}"
    keys = {"model_id": model, "task": "A", "variant": "all"}
    g = max([int(r["n_clusters"] or 0) for r in nets], default=0)
    return [row(keys, "verdict", (v, math.nan, math.nan), len(identical), A_VERDICTS[v], note=note,
                n_clusters=g),
            row(keys, "power:net", (mde, math.nan, math.nan), len(identical), "injected-control",
                note=line, n_clusters=g, p_min=C.smallest_p(g) if g else math.nan)]
