"""How often each task-A verdict label is printed when its claim is false: a simulation with a known truth.

Why: a label is only as good as the rate at which it is printed where it is wrong. Coverage of
each interval (``report.calibration``) does not say that: the verdict picks the best framing ×
cell and chains several gates, and its labels compare quantities measured on different
questions. Here every label can be wrong. Each run writes a whole task-A record set in the public
layout (matched controls, the Gaussian, other-concept and −v ablations, a balanced set of bias
questions, false and true statements, graded by content, detection reports given to them, latent
readings after the report and after a neutral prefill, and the steering check's rows for every
cell), loads it with ``report.load_results`` and summarises it with ``report.summarize``, then
counts the label printed. A truth (``Truth``) fixes, per answer, the chance that an injection:

- ``detect``: makes the model report a thought (a concept's vector, another concept's or −v);
- ``gauss``: makes it say yes under a Gaussian push of the same norm (and under every vector);
- ``yes_push``: turns any yes/no answer into "yes" (detection and bias questions alike);
- ``reports``: turns any answer, bias questions included, into a detection report;
- ``name``: makes the sampled answer name the concept (``name_without_detection``: even when it
  does not report one);
- ``latent``: makes the concept's first token rise most after the report beyond what the vector's
  steering does alone (``steer_hit``: the share of trials where steering alone makes it rise most,
  after either prefill).

Every vector steers (the steering rows' word gains ``steer_nats`` over a random direction). A
label is *false* for a truth when what it claims is false (``FALSE``): "detected …" claims
detection beyond the yes-bias and beyond a Gaussian push; "… identified" naming in words, "…
identified latently" naming beyond steering; "reacts to any perturbation" that "yes" rises beyond
the yes-bias and under a Gaussian push too; "yes-bias, not detection" that false statements are
affirmed more under injection; "no measurable effect" that nothing steers. ``python -m
experiments.calibrate --labels`` prints the table; ``tests/test_labels.py`` asserts every false
rate ≤ 5% and that loosening one gate breaks that.
"""

from __future__ import annotations

import json
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from introspect.report.calibration import expit
from introspect.tasks.injection.verdict_a import A_VERDICTS

FRAMINGS = ("paper", "explained", "two_turn")
LABELS = tuple(A_VERDICTS.values())


@dataclass(frozen=True)
class Truth:
    """Per-answer chances of what an injection does (see the module docstring)."""

    name: str
    detect: float = 0.0
    gauss: float = 0.0
    yes_push: float = 0.0
    reports: float = 0.0
    name_p: float = 0.0
    name_without_detection: bool = False
    latent: float = 0.0
    steer_hit: float = 0.5
    steer_nats: float = 2.0
    fpr: float = 0.10  # control "yes" to the detection question (concepts vary around it, logit SD 0.5)
    false_yes: float = 0.10  # "yes" to a false statement without injection
    true_no: float = 0.10  # "no" to a true statement without injection


# the claims each label makes (module docstring); a label is false where its claim is
_DETECT = {"detected and identified", "detected, identified latently (not in words)", "detected, not identified"}
TRUTHS: dict[str, tuple[Truth, set[str]]] = {
    "null, vectors steer": (Truth("null"), {*_DETECT, "reacts to any perturbation", "yes-bias, not detection"}),
    "yes-push 0.2": (Truth("yes-push 0.2", yes_push=0.2), {*_DETECT, "reacts to any perturbation"}),
    "yes-push 0.4": (Truth("yes-push 0.4", yes_push=0.4), {*_DETECT, "reacts to any perturbation"}),
    "yes-push 0.8": (Truth("yes-push 0.8", yes_push=0.8), {*_DETECT, "reacts to any perturbation"}),
    "reacts to any perturbation": (Truth("reacts", gauss=0.5), {*_DETECT, "yes-bias, not detection"}),
    "reports to every question": (Truth("reports", reports=0.7),
                                  {"detected and identified", "detected, identified latently (not in words)",
                                   "reacts to any perturbation", "yes-bias, not detection"}),
    "detector, no naming (latent = steering)": (
        Truth("detector", detect=0.5, steer_hit=0.7),
        {"detected and identified", "detected, identified latently (not in words)", "reacts to any perturbation",
         "yes-bias, not detection"}),
    "detector, latent naming beyond steering": (
        Truth("latent detector", detect=0.5, latent=0.6, steer_hit=0.3),
        {"detected and identified", "reacts to any perturbation", "yes-bias, not detection"}),
    "ideal detector that names the concept": (
        Truth("ideal", detect=0.8, name_p=0.8),
        {"reacts to any perturbation", "yes-bias, not detection"}),
    "steering moves the word, no detection": (
        Truth("steering only", name_p=0.6, name_without_detection=True, steer_hit=0.9),
        {*_DETECT, "reacts to any perturbation", "yes-bias, not detection"}),
}
for _t, _false in TRUTHS.values():
    _false.add("no measurable effect")  # every truth's vectors steer
# the label a truth should read with enough concepts (its power is reported beside the false rates)
TRUE_LABEL = {"null, vectors steer": "inconclusive", "yes-push 0.2": "yes-bias, not detection",
              "yes-push 0.4": "yes-bias, not detection", "yes-push 0.8": "yes-bias, not detection",
              "reacts to any perturbation": "reacts to any perturbation", "reports to every question": "inconclusive",
              "detector, no naming (latent = steering)": "detected, not identified",
              "detector, latent naming beyond steering": "detected, identified latently (not in words)",
              "ideal detector that names the concept": "detected and identified",
              "steering moves the word, no detection": "inconclusive"}


def design(n_cells: int) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """(framings, layers) of a run with ``n_cells`` framing × layer cells: one framing for one
    cell, else the three framings over ``n_cells / 3`` layers."""
    if n_cells == 1:
        return ("paper",), (8,)
    if n_cells % 3:
        raise ValueError(f"cells must be 1 or a multiple of 3 (three framings), got {n_cells}")
    return FRAMINGS, tuple(range(4, 4 + n_cells // 3))


def _mix(p: Any, *chances: float) -> Any:
    """P(yes) when each of ``chances`` independently turns the answer into a yes."""
    keep = 1.0
    for c in chances:
        keep *= 1.0 - c
    return 1.0 - (1.0 - np.asarray(p)) * keep


def simulate(t: Truth, n_concepts: int, n_cells: int, seed: int, model_id: str = "synthetic",
             n_samples: int = 2, n_bias: int = 6) -> list[dict[str, Any]]:
    """One synthetic task-A experiment's records under truth ``t`` (see the module docstring)."""
    rng = np.random.default_rng(seed)
    framings, layers = design(n_cells)
    words = [f"concept{c:03d}" for c in range(n_concepts)]
    k = len(words)
    recs: list[dict[str, Any]] = []
    n = [0]

    def rec(condition: str, word: str, variant: str, sample: int, layer: int | None, grade: dict,
            p_yes: float | None = None, **extra: Any) -> None:
        n[0] += 1
        recs.append(dict(type="trial", seed=0, model_id=model_id, task="A", condition=condition, word=word,
                         variant=variant, trial_index=0, sample=sample, layer_idx=layer,
                         alpha=4.0 if layer is not None else 0.0, alpha_units="raw", injected=layer is not None,
                         response=f"r{n[0]}", p_yes=p_yes, p_no=None if p_yes is None else 1 - p_yes,
                         trial_id=f"{model_id}:{n[0]}", grade={"coherent": True, **grade}, extra=extra))

    def bias_answer(right: str, clean_wrong: float, injected: bool) -> dict[str, Any]:
        if injected and rng.random() < t.reports:
            return {"bias_answer": "reports_detection", "wrong": False, "reports_detection": True,
                    "said_yes": True}
        yes = rng.random() < (clean_wrong if right == "no" else 1 - clean_wrong)
        if injected and rng.random() < t.yes_push:
            yes = True
        right_said = yes == (right == "yes")
        kind = "correct" if right_said else ("affirms_false" if right == "no" else "denies_true")
        return {"bias_answer": kind, "wrong": not right_said, "reports_detection": False, "said_yes": bool(yes)}

    for c, w in enumerate(words):
        other = words[(c + 1) % k]
        p_ctl = float(expit(math.log(t.fpr / (1 - t.fpr)) + rng.normal(0, 0.5)))
        p_inj = float(_mix(p_ctl, t.detect, t.gauss, t.yes_push, t.reports))
        p_gauss = float(_mix(p_ctl, t.gauss))
        for v in framings:
            for s in range(n_samples):
                rec("control", w, v, s, None, {"detected": bool(rng.random() < p_ctl)}, p_ctl)
            for layer in layers:
                # latent readings: one per trial, shared by its samples
                lat = rng.random(5)
                own_neutral = bool(lat[0] < t.steer_hit)
                own_report = own_neutral or bool(lat[1] < t.latent)
                vec_neutral = bool(lat[2] < t.steer_hit)
                vec_report = vec_neutral or bool(lat[3] < t.latent)
                orig_by_chance = bool(not vec_report and lat[4] < 1 / k)
                for s in range(n_samples):
                    det = bool(rng.random() < p_inj)
                    named = bool(rng.random() < t.name_p and (det or t.name_without_detection))
                    rec("injected", w, v, s, layer, {"detected": det, "identified": named,
                                                     "latent_names_word": own_report,
                                                     "latent_names_word_neutral": own_neutral, "latent_k": k},
                        p_inj)
                    rec("random", w, v, s, layer, {"detected": bool(rng.random() < p_gauss)}, p_gauss)
                    rec("negative", w, v, s, layer, {"detected": bool(rng.random() < p_inj)}, p_inj)
                    det_o = bool(rng.random() < p_inj)
                    rec("concept_random", w, v, s, layer,
                        {"detected": det_o, "identified": bool(rng.random() < 0.02),
                         "names_vector_word": bool(rng.random() < t.name_p and (det_o or t.name_without_detection)),
                         "latent_names_word": orig_by_chance, "latent_names_vector_word": vec_report,
                         "latent_names_vector_word_neutral": vec_neutral, "latent_k": k},
                        p_inj, vector_word=other)
            for q in range(n_bias):
                right = "no" if q % 2 == 0 else "yes"
                base_wrong = t.false_yes if right == "no" else t.true_no
                for s in range(n_samples):
                    rec("bias_control", w, v, s, None, bias_answer(right, base_wrong, False),
                        question=f"q{q}", correct=right)
                    for layer in layers:
                        rec("bias", w, v, s, layer, bias_answer(right, base_wrong, True), question=f"q{q}",
                            correct=right)
        for check in ("steer", "steer_two_turn") if "two_turn" in framings else ("steer",):  # each span's own check
            for s in range(n_samples):
                rec("steer_control", w, check, s, None, {"lp_word": -10.0, "mentions": False})
                for layer in layers:
                    rec("steer", w, check, s, layer, {"lp_word": -10.0 + t.steer_nats + rng.normal(0, 1),
                                                      "mentions": False})
                    rec("steer_random", w, check, s, layer, {"lp_word": -10.0 + rng.normal(0, 1), "mentions": False})
    return recs


def _write(recs: list[dict[str, Any]], path: Path) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"type": "header", "run_id": "synthetic", "model_id": recs[0]["model_id"],
                             "fingerprint": "synthetic", "seed": 0}) + "\n")
        fh.writelines(json.dumps(r) + "\n" for r in recs)


def label_counts(truth: str, n_concepts: int, n_cells: int, runs: int, seed: int = 0,
                 batch: int = 10) -> dict[str, Any]:
    """Run ``runs`` experiments of one truth through ``load_results`` and ``summarize``; count the
    label each prints, the share of runs printing a label whose claim is false, and the true
    label's share (its power)."""
    from introspect.report import load_results, summarize

    t, false = TRUTHS[truth]
    counts = {label: 0 for label in LABELS}
    with tempfile.TemporaryDirectory() as tmp:
        for lo in range(0, runs, batch):
            path = Path(tmp) / f"b{lo}.jsonl"
            for r in range(lo, min(runs, lo + batch)):
                _write(simulate(t, n_concepts, n_cells, seed=seed * 1_000_003 + r, model_id=f"run{r:05d}"), path)
            tab = summarize(load_results(path))
            v = tab[tab["metric"] == "verdict"]
            for label in v["condition"]:
                counts[str(label)] += 1
            path.unlink()
    done = sum(counts.values())
    return {"truth": truth, "concepts": n_concepts, "cells": n_cells, "runs": runs, "printed": done,
            "counts": counts, "false_rate": sum(counts[x] for x in false) / max(done, 1),
            "false_labels": sorted(false), "true_label": TRUE_LABEL[truth],
            "power": counts[TRUE_LABEL[truth]] / max(done, 1)}


def run_job(job: tuple[str, int, int, int, int]) -> dict[str, Any]:
    """``label_counts`` of one (truth, concepts, cells, runs, seed) tuple (for a process pool)."""
    return label_counts(*job)


def markdown(results: list[dict[str, Any]]) -> str:
    """The docs' table: per truth and setting, the false-label rate (with its largest single
    label), the true label's power, and every label printed."""
    lines = ["| truth | cells | concepts | runs | a false label | its power: the label it should read | labels printed |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        printed = ", ".join(f"{k} {v}" for k, v in sorted(r["counts"].items(), key=lambda kv: -kv[1]) if v)
        lines.append(f"| {r['truth']} | {r['cells']} | {r['concepts']} | {r['runs']} | {r['false_rate']:.3f} | "
                     f"{r['true_label']} {r['power']:.2f} | {printed} |")
    return "\n".join(lines)
