"""Task A's metrics: detection against matched controls, paired ablations, a yes-bias-proof
introspection score, and one verdict that follows the evidence.

Why a module of its own: task A carries most of the controls the literature asks for, and each
needs the same pairing. The unit is the concept (``introspect.stats.clustered``); every concept has its
own control per (trial, sample), decoded from the same stream. Per (framing, layer, α, units):

- TPR, matched FPR, Net = TPR − FPR (paired; Newcombe interval, sign-flip p), the same among
  coherent answers, P(yes) means and their paired shift (probability and log-odds);
- ablations as paired tests: Net against the Gaussian, other-concept and −v ablations;
- identification against ``concept_random`` answers graded for the original word (the same
  stream with another concept's direction: naming the word by chance), and, secondary, against
  naming a mismatched concept;
- the *introspection score* in log-odds: per concept, the mean Δlogit P(yes) of the detection
  question minus that of ≥ 5 bias questions asked in the same framing with the same injection; a
  uniform push toward "yes" scores 0;
- the steering check's cell rows (``metrics_steer``), the best cell picked on half the concepts
  and reported on the other half.

- the yes-bias by content: wrong answers to the bias questions with and without injection, their
  paired rise, detection reports given to them (not a yes-bias), and Net beyond that rise per
  concept (``net_beyond_yes_bias``), with the introspection score, in ``metrics_bias``; under
  another concept's vector, whether the naming follows the vector (``follows_vector``).

Holm runs over every framing, cell and headline metric (``HEADLINE``). The verdict, dimension by
dimension (detection, beyond yes-bias, beyond any perturbation, identification), is
``verdict_a``'s.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from introspect.stats import clustered as C
from introspect.stats.holm import add_holm
from introspect.tasks.injection.common import STEER_VARIANTS, steer_mask
from introspect.tasks.injection.metrics_bias import (
    beyond_bias_rows,
    bias_frames,
    bias_rows,
    logit,
    score_rows,
)
from introspect.tasks.injection.metrics_regions import region_rows
from introspect.tasks.injection.metrics_steer import (
    steer_variant,
    steering_table,
    steers_lookup,
    summarize_steering,
)
from introspect.tasks.injection.verdict_a import HEADLINE, verdict_a
from introspect.tasks.tidy import _HEAVY as HEAVY
from introspect.tasks.tidy import (
    CELL,
    baseline,
    col,
    concepts,
    diff_row,
    flag,
    groups,
    mean_diff,
    mean_row,
    num,
    pair,
    paired_row,
    rate_row,
    split_half,
    unique_controls,
    with_match_keys,
)

NOT_DETECTION = ("bias", *STEER_VARIANTS)  # variants (``bias`` is the older layout's)
NOT_CELL = ("control", "bias", "bias_control", "steer", "steer_random", "steer_control")
ABLATIONS = ("random", "concept_random", "negative")


def detection_questions(df: pd.DataFrame) -> pd.DataFrame:
    """Rows that ask the detection question: not a bias question, not a steering prompt. One
    filter for ``summarize_a`` and ``vs_base``, so the two never read different rows."""
    v = df["variant"].astype(str)
    return df[~v.isin(NOT_DETECTION) & ~steer_mask(v) & ~df["condition"].isin(("bias", "bias_control"))]


def _ident(df: pd.DataFrame) -> np.ndarray:
    """``grade.identified`` (records contract), else the older ``grade.matched``."""
    x = flag(col(df, "grade.identified"))
    return x if not np.isnan(x).all() else flag(col(df, "grade.matched"))


def _alpha_rows(keys: dict, inj: pd.DataFrame) -> list[dict]:
    """The cell's strength in every unit (``extra.alpha_as``), averaged over its records."""
    out: list[dict] = []
    for unit in ("raw", "unit", "resid"):
        x = np.array([d.get(unit, np.nan) if isinstance(d, dict) else np.nan
                      for d in col(inj, "extra.alpha_as")], dtype=float)
        out += mean_row(keys, f"alpha_as:{unit}", x, "injected", concepts(inj),
                        note=f"α of this cell expressed in {unit} units")
    return out


def _detection_rows(keys: dict, inj: pd.DataFrame, p: pd.DataFrame) -> list[dict]:
    """TPR, matched FPR, Net, coherent-only rates, P(yes) and its shifts, identical answers."""
    lab = p["concept"].to_numpy()
    u = unique_controls(p)
    u_lab = u["concept"].to_numpy()
    det, det_c = flag(col(p, "grade.detected")), flag(col(p, "grade.detected~c"))
    out = rate_row(keys, "tpr", flag(col(inj, "grade.detected")), "injected", concepts(inj))
    out += rate_row(keys, "fpr", flag(col(u, "grade.detected~c")), "control (matched)", u_lab)
    out += paired_row(keys, "net", det, det_c, "injected-control", lab)
    coh, u_coh = flag(col(inj, "grade.coherent"), None), flag(col(u, "grade.coherent~c"), None)
    out += rate_row(keys, "coherent:injected", coh, "injected", concepts(inj))
    out += rate_row(keys, "coherent:control", u_coh, "control (matched)", u_lab)
    if not np.isnan(coh).all():
        out += rate_row(keys, "tpr:coherent", np.where(coh == 1, flag(col(inj, "grade.detected")), np.nan),
                        "injected", concepts(inj))
        out += rate_row(keys, "fpr:coherent", np.where(u_coh == 1, flag(col(u, "grade.detected~c")), np.nan),
                        "control (matched)", u_lab)
        both = (flag(col(p, "grade.coherent"), None) == 1) & (flag(col(p, "grade.coherent~c"), None) == 1)
        out += paired_row(keys, "net:coherent", np.where(both, det, np.nan), det_c, "injected-control",
                          lab, note="pairs whose two answers are coherent")
    py, py_c = num(col(p, "p_yes")), num(col(p, "p_yes~c"))
    out += mean_row(keys, "p_yes_mean:injected", num(col(inj, "p_yes")), "injected", concepts(inj))
    out += mean_row(keys, "p_yes_mean:control", num(col(u, "p_yes~c")), "control (matched)", u_lab)
    out += paired_row(keys, "p_yes_shift", py, py_c, "injected-control", lab, floor=C.NUMERIC_FLOOR)
    out += paired_row(keys, "logit_yes_shift", logit(py), logit(py_c), "injected-control", lab,
                      note="log-odds of P(yes)", floor=C.NUMERIC_FLOOR)
    same = np.array([float(a == b) for a, b in zip(col(p, "response"), col(p, "response~c"))])
    out += rate_row(keys, "answers_identical", same, "injected=control", lab,
                    note="share of injected answers word-for-word equal to their matched control")
    return out


def _legacy_rows(keys: dict, inj: pd.DataFrame, cdf: pd.DataFrame, vdf: pd.DataFrame) -> list:
    """Controls shared by every concept (older record layout): they cannot be paired, so Net is
    an unpaired difference with the controls as independent answers, and no p-value is claimed."""
    ctl = baseline(vdf, cdf, "control")
    det_i, det_c = flag(col(inj, "grade.detected")), flag(col(ctl, "grade.detected"))
    note = "controls shared by every concept (records predate per-concept controls): unpaired, no test"
    out = rate_row(keys, "tpr", det_i, "injected", concepts(inj))
    out += rate_row(keys, "fpr", det_c, "control", note=note)
    out += diff_row(keys, "net", det_i, det_c, "injected-control", concepts(inj), None, note=note)
    out += mean_row(keys, "p_yes_mean:injected", num(col(inj, "p_yes")), "injected", concepts(inj))
    out += mean_row(keys, "p_yes_mean:control", num(col(ctl, "p_yes")), "control", note=note)
    return out


def _identification_rows(keys: dict, inj: pd.DataFrame, cdf: pd.DataFrame) -> list[dict]:
    lab = concepts(inj)
    ident, mis = _ident(inj), flag(col(inj, "grade.identified_mismatch"))
    out = rate_row(keys, "identification", ident, "injected", lab)
    hit = flag(col(inj, "grade.detected")) == 1
    out += rate_row(keys, "identification_given_detected", np.where(hit, ident, np.nan), "injected", lab)
    cr = pair(inj, cdf[cdf["condition"] == "concept_random"])
    if not cr.empty:
        by_chance = _ident(_cr_view(cr))
        out += rate_row(keys, "identification:concept_random", by_chance, "concept_random",
                        cr["concept"].to_numpy(),
                        note="another concept's direction, answer graded for the original word")
        out += paired_row(keys, "identification_vs_random", _ident(cr), by_chance,
                          "injected-concept_random", cr["concept"].to_numpy(),
                          note="naming the word under its own vector vs under another concept's")
        follows = flag(col(cr, "grade.names_vector_word~c"), None)
        if not np.isnan(follows).all():
            out += rate_row(keys, "names_vector_word:concept_random", follows, "concept_random",
                            cr["concept"].to_numpy(), note="names the word of the vector actually injected")
            out += paired_row(keys, "follows_vector", follows, by_chance, "concept_random",
                              cr["concept"].to_numpy(),
                              note="under another concept's vector: names that vector's word − names the "
                                   "original word (paired per concept)")
    out += _latent_rows(keys, inj, cr)
    out += rate_row(keys, "identification_mismatch", mis, "injected", lab,
                    note="names another concept of the run (extra.mismatch_word)")
    out += paired_row(keys, "identification_minus_mismatch", ident, mis, "injected", lab)
    return out


def _latent_rows(keys: dict, inj: pd.DataFrame, cr: pd.DataFrame) -> list[dict]:
    """Latent naming (``latent_a``): the trial's word rose most among the run's K concepts
    (chance 1/K). The vector pushes its own word's first token by steering alone, so the claim is
    the excess over the same reading under a neutral prefill that reports nothing
    (``latent_beyond_steering``, paired per concept); the rest are steering readings: against
    another concept's vector and whether, under that vector, its own word rose most."""
    hit = flag(col(inj, "grade.latent_names_word"), None)
    if np.isnan(hit).all():
        return []
    # one reading per trial: its K sampled answers share it, so only the first sample counts (honest n)
    inj, cr = _first_sample(inj), _first_sample(cr)
    hit = flag(col(inj, "grade.latent_names_word"), None)
    k = num(col(inj, "grade.latent_k"))
    k_text = f"{np.nanmedian(k):.0f}" if np.isfinite(k).any() else "K"  # records without latent_k
    lab = concepts(inj)
    out = rate_row(keys, "latent_identification", hit, "injected", lab,
                   note=f"the concept's word rose most among the run's {k_text} concepts "
                        "(first token after the prefilled report, rise over the unsteered prompt): a steering reading")
    neutral = flag(col(inj, "grade.latent_names_word_neutral"), None)
    if not np.isnan(neutral).all():
        out += rate_row(keys, "latent_identification:neutral", neutral, "injected", lab,
                        note="the same reading after a neutral prefill that reports nothing: the vector's steering alone")
        out += paired_row(keys, "latent_beyond_steering", hit, neutral, "injected", lab,
                          note="latent naming after the detection report − after the neutral prefill, same vector "
                               "(paired per concept): naming beyond steering")
    if cr.empty:
        return out
    lab = cr["concept"].to_numpy()
    by_chance = flag(col(cr, "grade.latent_names_word~c"), None)
    out += paired_row(keys, "latent_identification_vs_random", flag(col(cr, "grade.latent_names_word"), None),
                      by_chance, "injected-concept_random", lab,
                      note="latent naming of the word under its own vector vs under another concept's: a steering reading")
    follows = flag(col(cr, "grade.latent_names_vector_word~c"), None)
    if not np.isnan(follows).all():
        out += paired_row(keys, "latent_follows_vector", follows, by_chance, "concept_random", lab,
                          note="under another concept's vector: its word rose most − the original word did "
                               "(a steering reading)")
    return out


def _first_sample(d: pd.DataFrame) -> pd.DataFrame:
    if d.empty or "sample" not in d.columns:
        return d
    k = pd.to_numeric(d["sample"], errors="coerce").fillna(0)
    return d[(k == k.min()).to_numpy()]


def _cr_view(p: pd.DataFrame) -> pd.DataFrame:
    """The ``~c`` (paired) side of a pair frame under its plain column names."""
    side = p[[c for c in p.columns if c.endswith("~c")]]
    return side.rename(columns=lambda c: c.removesuffix("~c"))


def _ablation_rows(keys: dict, inj: pd.DataFrame, cdf: pd.DataFrame, ctl: pd.DataFrame) -> list[dict]:
    """Each ablation's detection rate, P(yes), and Net against it, paired on the same stream; the
    Gaussian push against the matched control (``random_vs_control``: "reacts to any
    perturbation" claims that it raises "yes" too)."""
    out: list[dict] = []
    gp = pair(cdf[cdf["condition"] == "random"], ctl) if not ctl.empty else pd.DataFrame()
    if not gp.empty:
        out += paired_row(keys, "random_vs_control", flag(col(gp, "grade.detected")),
                          flag(col(gp, "grade.detected~c")), "random-control", gp["concept"].to_numpy(),
                          note="a Gaussian push of the same norm vs no injection (paired per concept)")
    for cond in ABLATIONS:
        sub = cdf[cdf["condition"] == cond]
        out += rate_row(keys, f"{cond}_detection", flag(col(sub, "grade.detected")), cond, concepts(sub))
        out += mean_row(keys, f"p_yes_mean:{cond}", num(col(sub, "p_yes")), cond, concepts(sub))
        ap = pair(inj, sub)
        if not ap.empty:
            out += paired_row(keys, f"net_vs_{cond}", flag(col(ap, "grade.detected")),
                              flag(col(ap, "grade.detected~c")), f"injected-{cond}", ap["concept"].to_numpy())
    return out


def _steer_rows(keys: dict, inj: pd.DataFrame, p: pd.DataFrame, lookup: dict,
                steer_rows: list[dict]) -> list[dict]:
    """The cell's steering figures beside its detection rows (from the check with the framing's
    own injection span, ``steer_variant``), and detection where it steers."""
    check = steer_variant(steer_rows, keys["model_id"], keys["variant"])
    out = [{**r, "variant": keys["variant"]} for r in steer_rows
           if r["metric"] in ("steer_share", "steer_lp_rise_vs_random") and r["model_id"] == keys["model_id"]
           and r["variant"] == check
           and all(r[k] == keys[k] for k in CELL)]
    if not lookup or p.empty:
        return out
    cell = (keys["layer_idx"], float(keys["alpha"]), keys["alpha_units"])
    sp = np.array([lookup.get((check, w, *cell)) for w in p["concept"]], dtype=object)
    out += paired_row(keys, "net:steering", np.where(sp == True, flag(col(p, "grade.detected")), np.nan),  # noqa: E712
                      flag(col(p, "grade.detected~c")), "injected-control", p["concept"].to_numpy(),
                      note="concepts whose word gains ≥ 1 nat over a random direction")
    return out


def _net_score(p: pd.DataFrame) -> float:
    return mean_diff(flag(col(p, "grade.detected")), flag(col(p, "grade.detected~c")))


def _held_out(keys: dict, h: pd.DataFrame, note: str) -> list[dict]:
    """Net, TPR and FPR of the chosen cell on the held-out concepts' pairs."""
    lab = h["concept"].to_numpy()
    det, det_c = flag(col(h, "grade.detected")), flag(col(h, "grade.detected~c"))
    u = unique_controls(h)
    out = paired_row(keys, "net@held_out", det, det_c, "injected-control", lab, note=note)
    out += rate_row(keys, "tpr@held_out", det, "injected", lab, note=note)
    out += rate_row(keys, "fpr@held_out", flag(col(u, "grade.detected~c")), "control (matched)",
                    u["concept"].to_numpy(), note=note)
    return out


def summarize_a(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Task A: detection vs matched controls, identification, paired ablations, coherence,
    steering, introspection score, split-half best cell, Holm, the verdict and its power line."""
    df = with_match_keys(df.drop(columns=[c for c in HEAVY if c in df.columns]))  # narrow: every subset copies
    table = steering_table(df)
    lookup = steers_lookup(table)
    out = summarize_steering(df, table)
    steer_rows = list(out)
    bp = bias_frames(df)
    out += bias_rows(bp)
    identical: dict[str, list[float]] = {}
    every: list[tuple[dict[str, Any], pd.DataFrame]] = []  # every paired cell, for the region comparison
    det = detection_questions(df)
    for vkeys, vdf in groups(det, ["model_id", "task", "variant"]):
        ctl = vdf[vdf["condition"] == "control"]
        matched = bool(concepts(ctl).all()) and not pair(vdf[vdf["condition"] == "injected"], ctl).empty
        cells = []
        for ckeys, cdf in groups(vdf[~vdf["condition"].isin(NOT_CELL)], CELL):
            keys = {**vkeys, **ckeys}
            inj = cdf[cdf["condition"] == "injected"]
            p = pair(inj, ctl) if matched else pd.DataFrame()
            if not p.empty:
                out += _detection_rows(keys, inj, p)
                mine = bp[bp["model_id"] == keys["model_id"]] if not bp.empty else bp
                out += score_rows(keys, p, mine) + beyond_bias_rows(keys, p, mine)
                cells.append((keys, p))
                identical.setdefault(keys["model_id"], []).extend(
                    float(a == b) for a, b in zip(col(p, "response"), col(p, "response~c")) if a or b)
            elif not inj.empty:
                out += _legacy_rows(keys, inj, cdf, vdf)
            out += _identification_rows(keys, inj, cdf) + _alpha_rows(keys, inj)
            out += _ablation_rows(keys, inj, cdf, ctl if matched else pd.DataFrame())
            out += _steer_rows(keys, inj, p, lookup, steer_rows)
        out += split_half(cells, _net_score, _held_out)
        every += cells
    out += region_rows(every)
    add_holm(out, HEADLINE)
    for model in sorted(set(df["model_id"].dropna())):
        if not df[(df["model_id"] == model) & df["condition"].isin(("injected", "steer"))].empty:
            out += verdict_a(model, out, identical.get(model, []))
    return out
