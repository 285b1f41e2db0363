"""Delegate Game (003) summary: does delegation track the model's own errors, beyond heuristics?

Per variant (question set × teammate accuracy × feedback), one row per question: baseline
accuracy (logit argmax and parsed text), delegation rate and P(T), team score, the self-accuracy
lift (paired: the same questions), and the association of delegation with baseline error: AUROC
of P(T), Fisher's exact test and odds ratio, MCC, likelihood-ratio tests (error alone, and error
added to the surface controls) and 003's BIC comparisons (correctness vs baseline entropy, vs
game-phase entropy, surface features with and without entropy), for delegated (logit) and for
logit P(T) (OLS, usable when the argmax never says T); beside them the surface-feature baseline
(held-out AUROC of error from length / digits / topic / human difficulty) and the model's own
answer confidence. Game-phase entropy (over A–D, T left out) is analysed like baseline entropy,
and the two are correlated (003: "consistent between the game and baseline").

Why likelihood-ratio tests and BIC only within a variant: pooled over teammate accuracies each
question appears once per accuracy, and a likelihood that counts those copies as independent
gives p-values too small and ΔBIC inflated by the number of copies. Pooled over teammate
accuracies (feedback and no-feedback kept apart, variant ``<source>:all`` /
``<source>:all+feedback``) there are only logits with standard errors clustered by question
(Wald tests), other-modelling, and the paired change in P(T) from the lowest to the highest
teammate accuracy. Entropy predictors appear only where entropy exists: a short-answer game has
no answer-letter distribution, and its summary says so (``entropy_unavailable``) instead of
comparing against a column of zeros.

Letters. Beside ``baseline_accuracy`` always stands ``baseline_modal_letter_rate`` (the share of
items whose baseline letter is the most common one). Where the baseline was read over cyclic
rotations (``grade.baseline_rotations`` > 1), the truth every row scores against
(``baseline_correct``, its P(correct), its entropy) is the letter-free decision, and beside it:
``baseline_accuracy_raw`` / ``baseline_modal_letter_rate_raw`` / ``confidence_auroc_raw`` (the
rotation-0 letter argmax), ``baseline_accuracy_pride`` / ``baseline_modal_letter_rate_pride``
(PriDe's prior-divided reading), ``rotation_consistency``, ``baseline_rotations`` and PriDe's
``baseline_letter_prior[X]``. The game phase is asked once, so its own answer letters are a raw
reading: there ``kept_accuracy`` / ``self_accuracy_lift`` / ``team_score`` read the kept
questions' letter-free baseline answers (the lift is then a selection lift: what delegating
buys on the same answers), and the game-letter versions are ``*_raw``.
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np
import pandas as pd

from introspect.stats.auroc import auroc_ci
from introspect.stats.intervals import bootstrap_mean, jeffreys_ci, mcc_ci
from introspect.stats.items import (
    _logit,
    cluster_boot,
    fisher,
    logit_fit,
    lr_test,
    odds_ratios,
    ols_fit,
    surface_auroc,
)
from introspect.tasks.selfknowledge.rows import (
    b,
    draw_rows,
    frame,
    g,
    groups,
    modal_letter,
    num,
    prop,
    row,
    value,
    with_source,
    z,
)
from introspect.tasks.selfknowledge.surface import surface_frame


def usable(x: np.ndarray) -> bool:
    """A predictor exists for every row and varies (else it is no predictor at all)."""
    return bool(x.size) and bool(np.isfinite(x).all()) and float(np.ptp(x)) > 0


def one_per_question(s: pd.DataFrame) -> pd.DataFrame:
    """The first record of each (variant, question): a variant holds one per question, and a
    rerun or a merged shard must not count twice."""
    q = pd.DataFrame({"v": s["variant"].astype(str).to_numpy() if "variant" in s else "",
                      "q": [str(v) for v in g(s, "qid", "")]})
    keep = ~q.duplicated().to_numpy() | (q["q"] == "").to_numpy()
    return s[keep].reset_index(drop=True)


def accuracy_lift(game_ok: np.ndarray, base_ok: np.ndarray, kept: np.ndarray,
                  deleg: np.ndarray) -> tuple[float, float, float]:
    """Kept accuracy minus baseline accuracy on the same questions, with a Jeffreys interval over
    the rows' cells (kept and graded: game x baseline right; delegated or ungraded: baseline
    right). The row bootstrap it replaces covered 0.64 at 30 items when the model delegates
    rarely (a resample then holds no delegation: lift exactly 0); this one 0.95-1.00
    (tests/selfknowledge/test_sk_metrics.py). NaN when nothing is kept or nothing is delegated:
    with no delegation "kept" is every row, and the difference would be the drift between the
    game's answers and the baseline's, not a lift from choosing what to delegate."""
    if not kept.any() or not deleg.any():
        return math.nan, math.nan, math.nan
    ungraded = ~kept & ~deleg
    masks = [kept & game_ok & base_ok, kept & game_ok & ~base_ok, kept & ~game_ok & base_ok,
             kept & ~game_ok & ~base_ok, deleg & base_ok, deleg & ~base_ok]
    if ungraded.any():  # cells that exist only where some kept answers have no grade
        masks += [ungraded & base_ok, ungraded & ~base_ok]
    counts = np.array([m.sum() for m in masks], dtype=float)

    def lift(c: np.ndarray) -> np.ndarray:
        return (c[..., 0] + c[..., 1]) / c[..., :4].sum(-1) - c[..., 0::2].sum(-1)

    return (float(lift(counts / counts.sum())), *jeffreys_ci(counts, lift))


def _variant_rows(keys: dict, s: pd.DataFrame) -> list[dict]:
    rows: list[dict] = []
    base, deleg, deleg_t = b(s, "baseline_correct"), b(s, "delegated"), b(s, "delegated_text")
    err, n = ~base, len(s)
    qid = np.array([str(v) for v in g(s, "qid", "")], object)
    rot = num(s, "baseline_rotations") > 1  # items read letter-free (cyclic rotations)
    rotated = bool(rot.any())
    raw_base = np.where(rot, b(s, "baseline_raw_correct"), base)
    rows += prop(keys, "baseline_accuracy", base.sum(), n)
    # beside the headline: the share of the most common baseline letter. At 1.0 one letter wins
    # everywhere, so a letter reading's errors are the items not keyed to it and P(correct)
    # (confidence_auroc) separates them by the letter bias alone
    rows += _modal_letter(keys, "baseline_modal_letter_rate", s, "baseline_choice")
    if rotated:
        rows += _rotation_rows(keys, s, rot, raw_base)
    pc = num(s, "baseline_p_correct")
    rows.append(row(keys, "baseline_mean_p_correct", bootstrap_mean(pc), int(np.isfinite(pc).sum())))
    rows += prop(keys, "baseline_text_accuracy", b(s, "baseline_text_correct").sum(), n)
    rows += prop(keys, "baseline_parse_rate", b(s, "baseline_parse_ok").sum(), n)
    rows += prop(keys, "baseline_low_mass_rate", b(s, "baseline_low_mass").sum(), n)
    rows += prop(keys, "delegation_rate", deleg.sum(), n)
    parsed = b(s, "game_parse_ok")  # the text reading is scored where it parsed; its rate is shown
    rows += prop(keys, "text_delegation_rate", deleg_t[parsed].sum(), parsed.sum())
    rows += prop(keys, "game_parse_rate", parsed.sum(), n)
    rows += prop(keys, "game_low_mass_rate", b(s, "game_low_mass").sum(), n)
    rows += prop(keys, "game_text_cut_rate", b(s, "game_cut").sum(), n)
    gm = num(s, "game_mass")
    if np.isfinite(gm).any():
        rows.append(row(keys, "game_mean_mass", bootstrap_mean(gm), int(np.isfinite(gm).sum())))
    # a short answer kept but neither an exact match nor judged by consensus has no grade: excluded
    graded = np.array([v is not None for v in g(s, "game_correct")]) | deleg
    team = np.array([v is not None for v in g(s, "team_correct")])
    sfx = "_raw" if rotated else ""  # with rotations the game's own letters are the raw reading
    if rotated:  # kept questions answered letter-free: the debiased baseline answer
        mate, acc = b(s, "teammate_correct"), num(s, "teammate_accuracy")
        rows += prop(keys, "team_score", np.where(deleg, mate, base).sum(), n)
        rows.append(row(keys, "team_score_expected", bootstrap_mean(np.where(deleg, acc, base.astype(float))), n))
    rows += prop(keys, f"team_score{sfx}", b(s, "team_correct")[team].sum(), team.sum())
    rows.append(row(keys, f"team_score_expected{sfx}", bootstrap_mean(num(s, "team_expected")), int(team.sum())))
    kc = b(s, "game_correct").astype(float)
    kept = ~deleg & graded
    if (~graded).any() or "grade.game_grade_method" in s and (g(s, "game_grade_method") != "letter").any():
        rows += prop(keys, "game_answer_excluded_rate", (~graded).sum(), (~deleg).sum())
        nd, nx = num(s, "baseline_n_draws"), num(s, "baseline_n_draws_excluded")
        if np.isfinite(nd).any():
            rows += prop(keys, "baseline_draw_excluded_rate", np.nansum(nx), np.nansum(nd))
        px = num(s, "pool_excluded")
        if np.isfinite(px).any():
            rows.append(value(keys, "baseline_pool_excluded", float(np.nanmax(px)), n))
    rows += draw_rows(keys, num(s, "baseline_n_draws"), n)  # short answers: K sampled baseline answers
    ca = num(s, "pool_calibration_accuracy")  # a pool matched to the model (``pool.calibrate``)
    if np.isfinite(ca).any():
        rows.append(value(keys, "pool_calibration_accuracy", float(np.nanmax(ca)), n))
        rows.append(value(keys, "pool_calibration_in_band", float(b(s, "pool_calibration_in_band").all()), n))
    if rotated:  # the selection lift: what delegating buys on the model's letter-free answers
        rows += prop(keys, "kept_accuracy", base[~deleg].sum(), (~deleg).sum())
        rows.append(row(keys, "self_accuracy_lift", accuracy_lift(base, base, ~deleg, deleg), n))
    # the game's own answer letters against the same (raw, with rotations) baseline reading
    rows += prop(keys, f"kept_accuracy{sfx}", kc[kept].sum(), kept.sum())
    rows.append(row(keys, f"self_accuracy_lift{sfx}", accuracy_lift(kc.astype(bool), raw_base, kept, deleg), n))
    rows.append(row(keys, "introspection_mcc", mcc_ci(err, deleg), n))
    for name, d, e in (("", deleg, err), ("text_", deleg_t[parsed], err[parsed])):
        if d.size:
            oratio, p = fisher(d, e)
            rows.append(row(keys, f"{name}delegation_error_odds_ratio", oratio, int(d.size)))
            rows.append(value(keys, f"{name}fisher_p", p, int(d.size)))
    _, _, p = lr_test(deleg.astype(float), pd.DataFrame({"error": err.astype(float)}), pd.DataFrame())
    rows.append(value(keys, "lr_test_p[delegated~error]", p, n))
    pt = num(s, "p_delegate")
    ok = np.isfinite(pt)
    if ok.any():
        rows.append(row(keys, "mean_p_delegate", bootstrap_mean(pt[ok]), int(ok.sum())))
        e, q = err[ok], pt[ok]
        rows.append(row(keys, "p_delegate_auroc", auroc_ci(q, e), q.size))
    if np.isfinite(pc).any():  # the model's own answer confidence: what an ideal introspector could use
        ok2 = np.isfinite(pc)
        c, e2 = 1 - pc[ok2], err[ok2]
        rows.append(row(keys, "confidence_auroc", auroc_ci(c, e2), c.size))
    if rotated:  # the raw (rotation-0) confidence against the raw errors: the letter bias's AUROC
        rpc = num(s, "baseline_raw_p_correct")
        ok3 = np.isfinite(rpc) & rot
        if ok3.any():
            rows.append(row(keys, "confidence_auroc_raw", auroc_ci(1 - rpc[ok3], ~raw_base[ok3]), int(ok3.sum())))
    rows += _entropy_rows(keys, s, err, deleg)
    X = surface_frame(s)
    if n >= 10 and len(X.columns):
        rows.append(row(keys, "surface_auroc", surface_auroc(err.astype(float), X, qid), n))
    rows.append(row(keys, "majority_baseline", (max(err.mean(), 1 - err.mean()), np.nan, np.nan), n))
    rows += _likelihood_rows(keys, s, err, deleg, pt, X)
    return rows


def _modal_letter(keys: dict, metric: str, s: pd.DataFrame, col: str) -> list[dict]:
    """The share of items whose ``col`` letter is the most common one (nothing without letters)."""
    return modal_letter(keys, metric, g(s, col, ""))


def _rotation_rows(keys: dict, s: pd.DataFrame, rot: np.ndarray, raw_base: np.ndarray) -> list[dict]:
    """What the rotations show (``rotations.py``): the raw (rotation-0 letter argmax) accuracy
    and modal-letter rate beside the letter-free ones, PriDe's prior-divided reading, rotation
    consistency (one option chosen under every rotation) and PriDe's letter prior."""
    n, r = len(s), s[rot]
    rows = prop(keys, "baseline_accuracy_raw", raw_base.sum(), n)
    rows += _modal_letter(keys, "baseline_modal_letter_rate_raw", s, "baseline_raw_choice")
    rows += prop(keys, "baseline_accuracy_pride", b(r, "baseline_pride_correct").sum(), len(r))
    rows += _modal_letter(keys, "baseline_modal_letter_rate_pride", r, "baseline_pride_choice")
    rows += prop(keys, "rotation_consistency", b(r, "baseline_rotation_consistent").sum(), len(r))
    rows.append(value(keys, "baseline_rotations", float(np.nanmax(num(r, "baseline_rotations"))), len(r)))
    prior = next((v for v in g(r, "baseline_letter_prior") if isinstance(v, dict)), None)
    for letter, p in sorted((prior or {}).items()):
        rows.append(value(keys, f"baseline_letter_prior[{letter}]", float(p), len(r)))
    return rows


def _entropy_rows(keys: dict, s: pd.DataFrame, err: np.ndarray, deleg: np.ndarray) -> list[dict]:
    """Baseline and game-phase entropy as signals of own error and of delegation, and their
    agreement (Spearman) across questions; or one row saying there is no entropy."""
    from scipy.stats import spearmanr

    ent, gent = num(s, "entropy"), num(s, "game_entropy")
    n = len(s)
    if not np.isfinite(ent).any() and not np.isfinite(gent).any():
        return [value(keys, "entropy_unavailable", 1.0, n)]
    rows = []
    for name, x in (("entropy", ent), ("game_entropy", gent)):
        ok = np.isfinite(x)
        if ok.sum() >= 2:
            xe, dd = x[ok], deleg[ok]
            rows.append(row(keys, f"{name}_auroc[error]", auroc_ci(xe, err[ok]), xe.size))
            if dd.any() and not dd.all():
                rows.append(row(keys, f"{name}_auroc[delegated]", auroc_ci(xe, dd), xe.size))
    ok = np.isfinite(ent) & np.isfinite(gent)
    if ok.sum() > 2 and np.ptp(ent[ok]) > 0 and np.ptp(gent[ok]) > 0:
        rho, p = spearmanr(ent[ok], gent[ok])
        rows.append(value(keys, "spearman[entropy,game_entropy]", float(rho), int(ok.sum())))
        rows.append(value(keys, "spearman_p[entropy,game_entropy]", float(p), int(ok.sum())))
    return rows


def _likelihood_rows(keys: dict, s: pd.DataFrame, err: np.ndarray, deleg: np.ndarray,
                     pt: np.ndarray, X: pd.DataFrame) -> list[dict]:
    """One row per question: the LR test of own error added to the surface controls, and
    003's ΔBIC = BIC(A) − BIC(B) (> 0: B predicts delegation better), for delegated (logit)
    and logit P(T) (OLS), and the odds ratios of the controlled logit (``odds_ratio_controlled[term]``).
    An entropy comparison only where that entropy exists and varies."""
    rows: list[dict] = []
    n = len(s)
    e = pd.DataFrame({"baseline_error": err.astype(float)})
    ctrl = X.loc[:, [c for c in X.columns if X[c].nunique() > 1]]
    y = deleg.astype(float)
    if len(ctrl.columns):
        _, _, p = lr_test(y, pd.concat([ctrl, e], axis=1), ctrl)
        rows.append(value(keys, "lr_p[baseline_error|surface]", p, n))
        # 003's coefficient plots (Figs 7-11): that logit's odds ratios, HC1 intervals (one row
        # per question); none when it cannot be fitted (no delegation, separation)
        for r in odds_ratios(logit_fit(y, pd.concat([ctrl, e], axis=1))).itertuples():
            rows.append(row(keys, f"odds_ratio_controlled[{r.term}]", (r.odds_ratio, r.lo, r.hi), r.n))
    preds = {name: pd.DataFrame({f"{name}_z": z(num(s, name))}) for name in ("entropy", "game_entropy")
             if usable(num(s, name))}
    outcomes = [("", y, lambda yy, XX: logit_fit(yy, XX))]
    if np.isfinite(pt).all() and n:
        outcomes.append(("logit_p_delegate_", _logit(pt), lambda yy, XX: ols_fit(yy, XX)))
    for prefix, yy, fit in outcomes:
        bic = partial(_bic, fit, yy)
        b_err = bic(e)
        for name, P in preds.items():
            d = b_err - bic(P)
            if np.isfinite(d):
                rows.append(value(keys, f"{prefix}delta_bic[correct-{name}]", d, n))
            if len(ctrl.columns):
                d2 = bic(ctrl) - bic(pd.concat([ctrl, P], axis=1))
                if np.isfinite(d2):
                    rows.append(value(keys, f"{prefix}delta_bic[surface-surface+{name}]", d2, n))
        if prefix:  # coefficients of logit P(T) on own error and baseline entropy
            res = fit(yy, pd.concat([e, *preds.values()], axis=1))
            if res is not None:
                ci = res.conf_int()
                for term in res.params.index.drop("const", errors="ignore"):
                    rows.append(row(keys, f"logit_p_delegate_coef[{term}]",
                                    (float(res.params[term]), *map(float, ci.loc[term])), int(res.nobs)))
            # own error with the surface held fixed, on P(T) itself: the test beyond the surface
            # that still reads when the model never delegates (the LR test above needs delegations)
            res = fit(yy, pd.concat([ctrl, e], axis=1)) if len(ctrl.columns) else None
            if res is not None and "baseline_error" in res.params:
                ci = res.conf_int()
                rows.append(row(keys, "logit_p_delegate_coef_controlled[baseline_error]",
                                (float(res.params["baseline_error"]), *map(float, ci.loc["baseline_error"])),
                                int(res.nobs)))
    return rows


def _bic(fit, y: np.ndarray, X: pd.DataFrame) -> float:
    r = fit(y, X)
    return np.nan if r is None else float(r.bic)


def _pooled_rows(keys: dict, s: pd.DataFrame) -> list[dict]:
    """Across teammate accuracies (one feedback condition): each question appears once per
    accuracy, so only models with errors clustered by question (Wald tests), never a pooled
    likelihood."""
    rows: list[dict] = []
    qid = np.array([str(v) for v in g(s, "qid", "")], object)
    deleg, err = b(s, "delegated").astype(float), (~b(s, "baseline_correct")).astype(float)
    tm = num(s, "teammate_accuracy")
    X = surface_frame(s)
    X["teammate_accuracy_x10"] = 10 * tm
    accs = np.unique(tm[np.isfinite(tm)])
    pt = num(s, "p_delegate")
    if accs.size > 1 and np.isfinite(pt).any():  # paired by question across teammate accuracies
        hi = dict(zip(qid[tm == accs[-1]], pt[tm == accs[-1]]))
        lo = dict(zip(qid[tm == accs[0]], pt[tm == accs[0]]))
        common = [q for q in hi if q in lo and np.isfinite(hi[q]) and np.isfinite(lo[q])]
        d = np.array([hi[q] - lo[q] for q in common])
        # the highest minus the lowest teammate accuracy of the run (its variants name them)
        rows.append(row(keys, "p_delegate_diff[high-low teammate]",
                        cluster_boot(lambda i: float(d[i].mean()), d.size), d.size))
    nq = len(set(qid))  # rows are question × teammate accuracy; the items are the questions
    om = odds_ratios(logit_fit(deleg, X[["teammate_accuracy_x10"]], qid))
    for r in om.itertuples():
        rows.append(row(keys, "other_modelling_or_per_0.1", (r.odds_ratio, r.lo, r.hi), r.n, n_items=nq))
    full = pd.concat([X, pd.DataFrame({"baseline_error": err})], axis=1)
    if usable(num(s, "entropy")):
        full["entropy_z"] = z(num(s, "entropy"))
    for r in odds_ratios(logit_fit(deleg, full, qid)).itertuples():
        rows.append(row(keys, f"odds_ratio[{r.term}]", (r.odds_ratio, r.lo, r.hi), r.n, n_items=nq))
        rows.append(value(keys, f"clustered_wald_p[{r.term}]", r.p, r.n, n_items=nq))
    if np.isfinite(pt).all() and len(pt):
        res = ols_fit(_logit(pt), full, qid)
        if res is not None:
            ci = res.conf_int()
            for term in ("baseline_error", "entropy_z", "teammate_accuracy_x10"):
                if term in res.params.index:
                    rows.append(row(keys, f"logit_p_delegate_coef[{term}]",
                                    (float(res.params[term]), *map(float, ci.loc[term])), int(res.nobs),
                                    n_items=nq))
                    rows.append(value(keys, f"logit_p_delegate_clustered_wald_p[{term}]",
                                      float(res.pvalues[term]), int(res.nobs), n_items=nq))
    return rows


def _feedback(d: pd.DataFrame) -> list[bool]:
    if "grade.feedback" in d:
        return [bool(v) for v in g(d, "feedback", False)]
    return list(d["variant"].astype(str).str.endswith("+feedback"))


def summarize_delegate(df: pd.DataFrame) -> pd.DataFrame:
    rows: list[dict] = []
    df = one_per_question(df) if len(df) else df
    for keys, s in groups(df):
        rows += _variant_rows(keys, s.reset_index(drop=True))
    d = with_source(df)
    if len(d):
        d["fb"] = _feedback(d)
    for keys, s in groups(d, ("model_id", "task", "source", "fb")):
        k = {"model_id": keys["model_id"], "task": keys["task"],
             "variant": f"{keys['source']}:all" + ("+feedback" if keys["fb"] else "")}
        rows += _pooled_rows(k, s.reset_index(drop=True))
    return frame(rows)
