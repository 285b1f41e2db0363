"""Delegate Game (003) summary: does delegation track the model's own errors, beyond heuristics?

Per variant (question set × teammate accuracy × feedback): baseline accuracy (logit argmax and
parsed text), delegation rate and P(T), team score, the self-accuracy lift (paired: the same
questions), and the association of delegation with baseline error: AUROC of P(T), Fisher's
exact test and odds ratio, a likelihood-ratio test, MCC; beside them the surface-feature
baseline (held-out AUROC of error from length / digits / topic / human difficulty) and the
model's own answer confidence. Pooled over teammate accuracies (feedback and no-feedback kept
apart, variant ``<source>:all`` / ``<source>:all+feedback``): regressions with standard errors
clustered by question (each question appears once per teammate accuracy), the likelihood-ratio
test of adding own error to the controls, and 003's BIC comparisons (entropy vs correctness,
surface features with and without entropy), for delegated (logit) and for logit P(T) (OLS,
usable when the argmax never says T).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from introspect.stats import bootstrap_mean, mcc_ci
from introspect.tasks.selfknowledge.rows import (
    b,
    frame,
    g,
    groups,
    num,
    prop,
    row,
    value,
    with_source,
    z,
)
from introspect.tasks.selfknowledge.skstats import (
    _logit,
    auroc_point,
    cluster_boot,
    fisher,
    logit_fit,
    lr_test,
    odds_ratios,
    ols_fit,
    surface_auroc,
)


def surface_frame(s: pd.DataFrame) -> pd.DataFrame:
    """Surface controls: z-scored length and digit share, topic and human-difficulty dummies."""
    X = pd.DataFrame({"question_length_z": z(num(s, "question_length")),
                      "digit_fraction_z": z(num(s, "digit_fraction"))}, index=range(len(s)))
    for col in ("topic", "human_difficulty", "answer_type"):
        cats = pd.Series([str(v) for v in g(s, col, "")])
        if cats.nunique() > 1:
            d = pd.get_dummies(cats, prefix=col, drop_first=True, dtype=float)
            X = pd.concat([X, d.reset_index(drop=True)], axis=1)
    return X.fillna(0.0)


def _variant_rows(keys: dict, s: pd.DataFrame) -> list[dict]:
    rows: list[dict] = []
    base, deleg, deleg_t = b(s, "baseline_correct"), b(s, "delegated"), b(s, "delegated_text")
    err, n = ~base, len(s)
    qid = np.array([str(v) for v in g(s, "qid", "")], object)
    rows += prop(keys, "baseline_accuracy", base.sum(), n)
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
    rows += prop(keys, "team_score", b(s, "team_correct").sum(), n)
    rows.append(row(keys, "team_score_expected", bootstrap_mean(num(s, "team_expected")), n))
    kc = b(s, "game_correct").astype(float)
    kept = ~deleg
    rows += prop(keys, "kept_accuracy", kc[kept].sum(), kept.sum())
    lift = cluster_boot(lambda i: float(kc[i][kept[i]].mean() - base[i].mean()) if kept[i].any() else np.nan, n)
    rows.append(row(keys, "self_accuracy_lift", lift, n))
    rows.append(row(keys, "introspection_mcc", mcc_ci(err, deleg), n))
    for name, d, e in (("", deleg, err), ("text_", deleg_t[parsed], err[parsed])):
        if d.size:
            oratio, p = fisher(d, e)
            rows.append(row(keys, f"{name}delegation_error_odds_ratio", oratio, int(d.size)))
            rows.append(value(keys, f"{name}fisher_p", p, int(d.size)))
    chi, df_, p = lr_test(deleg.astype(float), pd.DataFrame({"error": err.astype(float)}), pd.DataFrame())
    rows.append(value(keys, "lr_test_p[delegated~error]", p, n))
    pt = num(s, "p_delegate")
    ok = np.isfinite(pt)
    if ok.any():
        rows.append(row(keys, "mean_p_delegate", bootstrap_mean(pt[ok]), int(ok.sum())))
        e, q = err[ok], pt[ok]
        rows.append(row(keys, "p_delegate_auroc", cluster_boot(lambda i: auroc_point(q[i], e[i]), q.size), q.size))
    if np.isfinite(pc).any():  # the model's own answer confidence: what an ideal introspector could use
        ok2 = np.isfinite(pc)
        c, e2 = 1 - pc[ok2], err[ok2]
        rows.append(row(keys, "confidence_auroc", cluster_boot(lambda i: auroc_point(c[i], e2[i]), c.size), c.size))
    X = surface_frame(s)
    if n >= 10 and len(X.columns):
        rows.append(row(keys, "surface_auroc", surface_auroc(err.astype(float), X, qid), n))
    rows.append(row(keys, "majority_baseline", (max(err.mean(), 1 - err.mean()), np.nan, np.nan), n))
    return rows


def _pooled_rows(keys: dict, s: pd.DataFrame) -> list[dict]:
    rows: list[dict] = []
    qid = np.array([str(v) for v in g(s, "qid", "")], object)
    deleg, err = b(s, "delegated").astype(float), (~b(s, "baseline_correct")).astype(float)
    tm = num(s, "teammate_accuracy")
    ent = num(s, "entropy")
    X = surface_frame(s)
    X["teammate_accuracy_x10"] = 10 * tm
    accs = np.unique(tm[np.isfinite(tm)])
    pt = num(s, "p_delegate")
    if accs.size > 1 and np.isfinite(pt).any():  # paired by question across teammate accuracies
        hi = dict(zip(qid[tm == accs[-1]], pt[tm == accs[-1]]))
        lo = dict(zip(qid[tm == accs[0]], pt[tm == accs[0]]))
        common = [q for q in hi if q in lo and np.isfinite(hi[q]) and np.isfinite(lo[q])]
        d = np.array([hi[q] - lo[q] for q in common])
        rows.append(row(keys, f"p_delegate_diff[{accs[-1]:g}-{accs[0]:g}]",
                        cluster_boot(lambda i: float(d[i].mean()), d.size), d.size))
    om = odds_ratios(logit_fit(deleg, X[["teammate_accuracy_x10"]], qid))
    for r in om.itertuples():
        rows.append(row(keys, "other_modelling_or_per_0.1", (r.odds_ratio, r.lo, r.hi), r.n))
    full = pd.concat([X, pd.DataFrame({"baseline_error": err, "entropy_z": z(ent)})], axis=1)
    keep = np.isfinite(full.to_numpy(float)).all(1)
    full, y, cl = full[keep].reset_index(drop=True), deleg[keep], qid[keep]
    for r in odds_ratios(logit_fit(y, full, cl)).itertuples():
        rows.append(row(keys, f"odds_ratio[{r.term}]", (r.odds_ratio, r.lo, r.hi), r.n))
        rows.append(value(keys, f"p[{r.term}]", r.p, r.n))
    controls = full.drop(columns=["baseline_error", "entropy_z"])
    chi, df_, p = lr_test(y, controls.assign(baseline_error=full["baseline_error"]), controls)
    rows.append(value(keys, "lr_p[baseline_error|controls]", p, int(y.size)))
    tmx = full[["teammate_accuracy_x10"]]
    rows += _bic_rows(keys, "", y, full, tmx, controls, lambda yy, XX: logit_fit(yy, XX))
    if np.isfinite(pt[keep]).all() and keep.any():
        lp = _logit(pt[keep])
        res = ols_fit(lp, full, cl)
        if res is not None:
            ci = res.conf_int()
            for term in ("baseline_error", "entropy_z", "teammate_accuracy_x10"):
                if term in res.params.index:
                    rows.append(row(keys, f"logit_p_delegate_coef[{term}]",
                                    (float(res.params[term]), *map(float, ci.loc[term])), int(res.nobs)))
        rows += _bic_rows(keys, "logit_p_delegate_", lp, full, tmx, controls, lambda yy, XX: ols_fit(yy, XX))
    return rows


def _bic_rows(keys: dict, prefix: str, y: np.ndarray, full: pd.DataFrame, tmx: pd.DataFrame,
              controls: pd.DataFrame, fit) -> list[dict]:
    """003's comparisons: ΔBIC = BIC(correctness) − BIC(entropy) (> 0: entropy predicts
    delegation better), and BIC(surface) − BIC(surface + entropy) (> 0: entropy adds to
    the surface features)."""
    def bic(X: pd.DataFrame) -> float:
        r = fit(y, X)
        return np.nan if r is None else float(r.bic)

    out = []
    d1 = bic(tmx.assign(baseline_error=full["baseline_error"])) - bic(tmx.assign(entropy_z=full["entropy_z"]))
    d2 = bic(controls) - bic(controls.assign(entropy_z=full["entropy_z"]))
    for name, d in (("delta_bic[correct-entropy]", d1), ("delta_bic[surface-surface+entropy]", d2)):
        if np.isfinite(d):
            out.append(value(keys, prefix + name, d, int(len(y))))
    return out


def summarize_delegate(df: pd.DataFrame) -> pd.DataFrame:
    rows: list[dict] = []
    for keys, s in groups(df):
        rows += _variant_rows(keys, s.reset_index(drop=True))
    d = with_source(df)
    if len(d):
        d["fb"] = [bool(v) for v in g(d, "feedback", False)] if "grade.feedback" in d else \
            d["variant"].astype(str).str.endswith("+feedback")
    for keys, s in groups(d, ("model_id", "task", "source", "fb")):
        k = {"model_id": keys["model_id"], "task": keys["task"],
             "variant": f"{keys['source']}:all" + ("+feedback" if keys["fb"] else "")}
        rows += _pooled_rows(k, s.reset_index(drop=True))
    return frame(rows)
