"""Rasch abilities of several models from their answered questions (002 §4.4, App. A).

Why a Rasch model: models answered overlapping but not identical question sets, so average
accuracy is not comparable across them (002's GPT-4.1 vs 4.1-mini example). The 1-parameter
logistic model P(model m answers item i) = σ(θ_m − δ_i) puts every model on one ability scale.
It is fitted by joint maximum likelihood, exactly as 002's Algorithm 1 but with statsmodels'
binomial GLM (Newton steps, standard errors from the information matrix) instead of hand-rolled
updates: θ for every model, δ for every item with Σδ = 0 (the scale's origin). Outcomes may be
probabilities (P(correct) from logits or K samples). Items answered by fewer than two models,
or with the same extreme outcome from every model, carry no information on abilities and are
dropped (under JML their δ would run to ±∞). Abilities are then correlated with each model's
self-knowledge scores.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd

from introspect.report.metrics import summarize

ABILITY_COLUMNS = ["model_id", "ability", "se", "lo", "hi", "n_items", "mean_y"]
CORR_COLUMNS = ["score", "n_models", "pearson_r", "pearson_p", "spearman_rho", "spearman_p"]
# (task, metric): the self-knowledge score of a model, averaged over the task's variants
SK_SCORES = (
    ("delegate", "p_delegate_auroc"), ("delegate", "self_accuracy_lift"),
    ("seb-association", "logit_auroc"), ("seb-association", "text_accuracy"),
    ("seb-restriction", "logit_auroc"), ("seb-restriction", "text_accuracy"),
    ("seb-difficulty", "logit_pair_accuracy"), ("seb-difficulty", "text_pair_accuracy"),
    ("recovery", "accuracy_drop_vs_clean"),
)


class RaschError(ValueError):
    """Records that cannot support a Rasch fit (reported as one ``error:`` line by the CLI)."""


def informative(items: pd.DataFrame) -> pd.DataFrame:
    """Drop, until nothing changes, items seen by fewer than two models or with one extreme
    outcome (all 0 or all 1) from every model, and models left with no item or all-extreme ones."""
    d = items.copy()
    while True:
        n = len(d)
        per = d.groupby("item")["y"].agg(["count", "min", "max"])
        bad = per[(per["count"] < 2) | ((per["min"] == per["max"]) & per["min"].isin([0.0, 1.0]))].index
        d = d[~d["item"].isin(bad)]
        pm = d.groupby("model_id")["y"].agg(["min", "max"])
        badm = pm[(pm["min"] == pm["max"]) & pm["min"].isin([0.0, 1.0])].index
        d = d[~d["model_id"].isin(badm)]
        if len(d) == n:
            return d.reset_index(drop=True)


def fit_rasch(items: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(abilities, item difficulties) by joint maximum likelihood. ``items`` has columns
    model_id, item, y (0..1). Abilities carry standard errors and 95% Wald intervals; models
    whose items were all uninformative get NaN."""
    import statsmodels.api as sm

    d = informative(items)
    models = sorted(items["model_id"].unique())
    if d.empty or d["model_id"].nunique() < 2:
        raise RaschError(f"a Rasch fit needs questions answered by at least two models with "
                         f"different outcomes; found models {models} with "
                         f"{d['item'].nunique() if not d.empty else 0} usable questions")
    ms, its = sorted(d["model_id"].unique()), sorted(d["item"].unique())
    mi, ii = {m: k for k, m in enumerate(ms)}, {q: k for k, q in enumerate(its)}
    X = np.zeros((len(d), len(ms) + len(its) - 1))
    for r, (m, q) in enumerate(zip(d["model_id"], d["item"])):
        X[r, mi[m]] = 1.0
        k = ii[q]
        if k < len(its) - 1:
            X[r, len(ms) + k] = -1.0  # logit = θ_m − δ_i
        else:
            X[r, len(ms):] = 1.0  # δ_last = −Σ δ_others
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        w = d["weight"].to_numpy(float) if "weight" in d else None
        res = sm.GLM(d["y"].to_numpy(float), X, family=sm.families.Binomial(), var_weights=w).fit()
    theta, se = res.params[:len(ms)], res.bse[:len(ms)]
    stats = d.groupby("model_id").agg(n_items=("item", "count"), mean_y=("y", "mean"))
    ab = []
    for m in models:
        if m in mi:
            t, s = float(theta[mi[m]]), float(se[mi[m]])
            ab.append([m, t, s, t - 1.96 * s, t + 1.96 * s, int(stats.loc[m, "n_items"]), float(stats.loc[m, "mean_y"])])
        else:
            ab.append([m, math.nan, math.nan, math.nan, math.nan, 0, math.nan])
    delta = np.append(res.params[len(ms):], -res.params[len(ms):].sum())
    return (pd.DataFrame(ab, columns=ABILITY_COLUMNS),
            pd.DataFrame({"item": its, "difficulty": delta}))


def benchmark_items(items: pd.DataFrame) -> pd.DataFrame:
    """002's own granularity: one item per question set (the item key before its last ":"),
    y = the model's mean over the questions it answered there, weighted by their number."""
    d = items.assign(item=items["item"].str.rsplit(":", n=1).str[0])
    return d.groupby(["model_id", "item", "task"], as_index=False).agg(y=("y", "mean"), weight=("y", "size"))


def sk_scores(df: pd.DataFrame) -> pd.DataFrame:
    """model_id × score table of the self-knowledge scores (``SK_SCORES``) from the records,
    each the mean over a task's variants of one condition. Delegate Game runs with and without
    phase-1 feedback are different experiments (003) and get separate columns
    (``delegate+feedback:...``); pooled ``:all`` rows are left out."""
    s = summarize(df)
    out: dict[str, dict[str, float]] = {}
    for task, metric in SK_SCORES:
        sel = s[(s["task"] == task) & (s["metric"] == metric)]
        var = sel["variant"].astype(str)
        sel = sel[~var.str.endswith(":all") & ~var.str.endswith(":all+feedback")]
        fb = sel["variant"].astype(str).str.endswith("+feedback")
        for cond, part in (("", sel[~fb]), ("+feedback", sel[fb])):
            for m, v in part.groupby("model_id")["value"].mean().items():
                out.setdefault(str(m), {})[f"{task}{cond}:{metric}"] = float(v)
    return pd.DataFrame.from_dict(out, orient="index").rename_axis("model_id").reset_index()


EXACT_MAX_MODELS = 7  # up to 7! = 5,040 pairings: p-values by exact permutation, not asymptotics


def _exact_p(x: np.ndarray, y: np.ndarray, stat) -> float:
    """Two-sided p of ``stat`` over every pairing of x with y. With a handful of models the
    t approximation is badly wrong (scipy gives p = 0 for ρ = 1 on three models; exact: 1/3)."""
    from scipy.stats import permutation_test

    return float(permutation_test((x,), lambda a: stat(a, y), permutation_type="pairings",
                                  n_resamples=np.inf, alternative="two-sided").pvalue)


def correlations(abilities: pd.DataFrame, scores: pd.DataFrame) -> pd.DataFrame:
    """Pearson and Spearman correlation of ability with each score across models (NaN with
    fewer than three models: two points always fit a line); exact permutation p-values for up
    to ``EXACT_MAX_MODELS`` models."""
    from scipy.stats import pearsonr, spearmanr

    d = abilities.merge(scores, on="model_id")
    rows = []
    for col in [c for c in scores.columns if c != "model_id"]:
        sub = d[["ability", col]].dropna()
        n = len(sub)
        if n >= 3 and sub[col].nunique() > 1 and sub["ability"].nunique() > 1:
            x, y = sub["ability"].to_numpy(float), sub[col].to_numpy(float)
            pr, sr = pearsonr(x, y), spearmanr(x, y)
            pp, sp = float(pr[1]), float(sr[1])
            if n <= EXACT_MAX_MODELS:
                pp = _exact_p(x, y, lambda a, b: pearsonr(a, b)[0])
                sp = _exact_p(x, y, lambda a, b: spearmanr(a, b)[0])
            rows.append([col, n, float(pr[0]), pp, float(sr[0]), sp])
        else:
            rows.append([col, n, math.nan, math.nan, math.nan, math.nan])
    return pd.DataFrame(rows, columns=CORR_COLUMNS)
