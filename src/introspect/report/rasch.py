"""Rasch abilities of several models from an independent item set (002 §4.4, App. A).

Why a Rasch model: models answered overlapping but not identical question sets, so average
accuracy is not comparable across them (002's GPT-4.1 vs 4.1-mini example). The 1-parameter
logistic model P(model m answers item i) = σ(θ_m − δ_i) puts every model on one ability scale.

Why an independent item set: 002 takes abilities from published benchmark scores, not from the
items that define its self-knowledge truths; abilities estimated on the same items as the
scores they are correlated with share their noise. The abilities come from the ``ability``
task's records (a multiple-choice file, e.g. MMLU, that no self-knowledge task used; items a
self-knowledge task also used are dropped and counted by ``experiments.rasch``).

Why conditional ML first: here the test-takers are a handful of models and the items are
hundreds of questions, each seen by only m models. Joint ML (002's Algorithm 1) estimates one
difficulty per item from m observations; these incidental parameters do not converge as items
are added, and the abilities come out biased outward by about m/(m − 1) (twice the truth with
two models; tested). Conditioning on each item's total score removes the difficulties from the
likelihood (Andersen's conditional ML, which is conditional logistic regression with items as
groups), so the abilities are consistent for any number of models. Both fits are reported; the
joint-ML rows carry the caveat. Abilities are centred (mean 0 over the models fitted).
Correlations of ability with self-knowledge scores across fewer than ``MIN_MODELS`` models
cannot reach p < 0.05 even by exact permutation, and the output says so.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd

from introspect.report.metrics import summarize
from introspect.tasks.selfknowledge.metrics import one_class_notes, without_one_class_truth

ABILITY_COLUMNS = ["model_id", "fit", "ability", "se", "lo", "hi", "n_items", "mean_y", "note"]
MIN_MODELS = 5  # fewer: no ability-score correlation can reach p < 0.05 (exact p >= 2/4! = 0.083)
JML_NOTE = ("joint ML: each item's difficulty is estimated from {m} models (incidental "
            "parameters), so abilities are biased outward by about m/(m-1) = {f:.2f}x and their "
            "SEs are too small; read the conditional-ML row")
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


def _index(d: pd.DataFrame, models: list[str]) -> tuple[list[str], dict[str, int]]:
    ms = sorted(d["model_id"].unique())
    if d.empty or len(ms) < 2:
        raise RaschError(f"a Rasch fit needs questions answered by at least two models with "
                         f"different outcomes; found models {models} with "
                         f"{d['item'].nunique() if not d.empty else 0} usable questions")
    return ms, {m: k for k, m in enumerate(ms)}


def _ability_rows(models: list[str], mi: dict[str, int], theta: np.ndarray, cov: np.ndarray,
                  d: pd.DataFrame, fit: str, note: str) -> pd.DataFrame:
    """Abilities centred to mean 0 over the fitted models, SEs from the centred covariance."""
    k = len(mi)
    C = np.eye(k) - 1.0 / k
    th, se = C @ theta, np.sqrt(np.clip(np.diag(C @ cov @ C.T), 0, None))
    stats = d.groupby("model_id").agg(n_items=("item", "count"), mean_y=("y", "mean"))
    ab = []
    for m in models:
        if m in mi:
            t, s_ = float(th[mi[m]]), float(se[mi[m]])
            ab.append([m, fit, t, s_, t - 1.96 * s_, t + 1.96 * s_, int(stats.loc[m, "n_items"]),
                       float(stats.loc[m, "mean_y"]), note])
        else:
            ab.append([m, fit, math.nan, math.nan, math.nan, math.nan, 0, math.nan, "no informative item"])
    return pd.DataFrame(ab, columns=ABILITY_COLUMNS)


def fit_rasch(items: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(abilities, item difficulties) by joint maximum likelihood, 002's Algorithm 1 solved with
    statsmodels' binomial GLM (Newton steps, SEs from the information matrix). ``items`` has
    columns model_id, item, y (0..1, probabilities allowed). Biased with few models: see the
    module docstring and ``fit_rasch_cml``."""
    import statsmodels.api as sm

    d = informative(items)
    models = sorted(items["model_id"].unique())
    ms, mi = _index(d, models)
    its = sorted(d["item"].unique())
    ii = {q: k for k, q in enumerate(its)}
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
    cov = np.asarray(res.cov_params())[:len(ms), :len(ms)]
    m_ = len(ms)
    note = JML_NOTE.format(m=m_, f=m_ / (m_ - 1))
    ab = _ability_rows(models, mi, np.asarray(res.params[:len(ms)]), cov, d, "jml", note)
    delta = np.append(res.params[len(ms):], -res.params[len(ms):].sum())
    return ab, pd.DataFrame({"item": its, "difficulty": delta})


def fit_rasch_cml(items: pd.DataFrame) -> pd.DataFrame:
    """Abilities by conditional maximum likelihood: each item's total score over the models is
    conditioned on, which removes its difficulty (statsmodels ``ConditionalLogit`` with items as
    groups and model indicators as covariates). Needs 0/1 outcomes; consistent however few
    models there are."""
    from statsmodels.discrete.conditional_models import ConditionalLogit

    y = items["y"].to_numpy(float)
    if not np.isin(y, (0.0, 1.0)).all():
        raise RaschError("conditional ML needs 0/1 outcomes (right or wrong per item); got "
                         "probabilities: answer each item once (the ability task's argmax)")
    d = informative(items)
    models = sorted(items["model_id"].unique())
    ms, mi = _index(d, models)
    X = np.zeros((len(d), len(ms) - 1))  # the first model is the reference (θ = 0) before centring
    for r, m in enumerate(d["model_id"]):
        if mi[m]:
            X[r, mi[m] - 1] = 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = ConditionalLogit(d["y"].to_numpy(float), X, groups=pd.factorize(d["item"])[0]).fit(disp=0)
    theta = np.concatenate([[0.0], np.asarray(res.params, float)])
    cov = np.zeros((len(ms), len(ms)))
    cov[1:, 1:] = np.asarray(res.cov_params(), float)
    return _ability_rows(models, mi, theta, cov, d, "cml", "conditional ML (item difficulties conditioned out)")


def benchmark_items(items: pd.DataFrame) -> pd.DataFrame:
    """002's own granularity: one item per question set (the item key before its last ":"),
    y = the model's mean over the questions it answered there, weighted by their number."""
    d = items.assign(item=items["item"].str.rsplit(":", n=1).str[0])
    return d.groupby(["model_id", "item", "task"], as_index=False).agg(y=("y", "mean"), weight=("y", "size"))


def sk_scores(df: pd.DataFrame, notes: list[str] | None = None) -> pd.DataFrame:
    """model_id × score table of the self-knowledge scores (``SK_SCORES``) from the records,
    each the mean over a task's variants of one condition. Delegate Game runs with and without
    phase-1 feedback are different experiments (003) and get separate columns
    (``delegate+feedback:...``); pooled ``:all`` rows are left out. A one-class judged truth
    scores nothing, and ``notes`` (if given) gets a line saying so."""
    full = summarize(df)
    if notes is not None:
        notes += one_class_notes(full)
    s = without_one_class_truth(full)
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
