"""Statistics of the self-knowledge summaries, each testing what its name says.

Why these and not simpler ones: predictions are scored against sampled behaviour, so a target is
a set of draws per item (long format: one row per draw, items as clusters); options of one
trial and teammate accuracies of one question are not independent, so intervals come from a
bootstrap over clusters and regressions use cluster-robust standard errors (statsmodels);
"does delegation track own error" is an association (Fisher's exact test, a likelihood-ratio
test of nested logits), not McNemar's test of equal marginals; paired trials get paired tests.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from introspect.stats.auroc import auroc_ci

NAN = math.nan
Interval = tuple[float, float, float]
N_BOOT = 1000


# ---------------------------------------------------------------- resampling
def cluster_boot(stat: Callable[[np.ndarray], float], n: int, clusters: Sequence[Any] | None = None,
                 n_boot: int = N_BOOT, seed: int = 0) -> Interval:
    """``stat(index array)`` with a percentile interval from resampling whole clusters (rows
    when ``clusters`` is None)."""
    if n == 0:
        return NAN, NAN, NAN
    est = float(stat(np.arange(n)))
    if not math.isfinite(est):
        return est, NAN, NAN
    rng = np.random.default_rng(seed)
    boots = []
    if clusters is None:
        for _ in range(n_boot):
            v = stat(rng.integers(0, n, n))
            if math.isfinite(v):
                boots.append(v)
    else:  # rows sorted by cluster; a resample is the concatenated row ranges of drawn clusters
        codes = pd.factorize(np.asarray(clusters, dtype=object))[0]
        order = np.argsort(codes, kind="stable")
        sizes = np.bincount(codes)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        for _ in range(n_boot):
            pick = rng.integers(0, sizes.size, sizes.size)
            ln = sizes[pick]
            offs = np.repeat(starts[pick] - np.concatenate([[0], np.cumsum(ln)[:-1]]), ln)
            v = stat(order[offs + np.arange(ln.sum())])
            if math.isfinite(v):
                boots.append(v)
    if not boots:
        return est, NAN, NAN
    lo, hi = np.quantile(boots, [0.025, 0.975])
    return est, float(lo), float(hi)


def boot_mean(v: Any, clusters: Sequence[Any] | None = None) -> Interval:
    """Mean of per-row values with a cluster-bootstrap interval (NaN rows left out)."""
    v = np.asarray(v, float)
    ok = np.isfinite(v)
    v, cl = v[ok], (None if clusters is None else np.asarray(clusters, dtype=object)[ok])
    return cluster_boot(lambda i: float(v[i].mean()), v.size, cl)


def rate_ci(v: Any, clusters: Sequence[Any] | None = None) -> Interval:
    """Share of 1s among 0/1 values (pooled over draws) with an interval that keeps its width at
    0 and 1 (a percentile bootstrap of 80 hits in 80 draws is [1, 1]): Wilson; over clusters
    (items), Wilson at the design-effect size, from the ratio estimator's cluster-robust variance,
    with t on items − 1, as the injection tasks' rates (``introspect.stats.clustered``); no interval
    below 5 items. NaN rows left out."""
    from introspect.stats.clustered import MIN_CLUSTERS, deff_wilson
    from introspect.stats.intervals import wilson

    v = np.asarray(v, float)
    ok = np.isfinite(v)
    if not ok.any():
        return NAN, NAN, NAN
    if clusters is None:
        return wilson(float(v[ok].sum()), int(ok.sum()))
    codes = pd.factorize(np.asarray(clusters, dtype=object)[ok])[0]
    hits, sizes = np.bincount(codes, weights=v[ok]), np.bincount(codes).astype(float)
    g, n = sizes.size, float(sizes.sum())
    p = float(hits.sum() / n)
    if g < MIN_CLUSTERS:
        return p, NAN, NAN
    var = g / (g - 1) * float(((hits - p * sizes) ** 2).sum()) / n ** 2  # ratio estimator, cluster-robust
    return (p, *deff_wilson(p, n, var, g))


# ---------------------------------------------------------------- scores of a probability
def ece(p: np.ndarray, y: np.ndarray, bins: int = 10) -> float:
    """Expected calibration error: |mean p - mean y| per equal-width bin, weighted by size."""
    p, y = np.asarray(p, float), np.asarray(y, float)
    if p.size == 0:
        return NAN
    b = np.clip((p * bins).astype(int), 0, bins - 1)
    return float(sum(abs(p[b == k].mean() - y[b == k].mean()) * (b == k).sum()
                     for k in range(bins) if (b == k).any()) / p.size)


def calibration_slope(p: np.ndarray, y: np.ndarray, clusters: Sequence[Any] | None = None,
                      ) -> tuple[Interval, Interval]:
    """(intercept, slope) of the logistic recalibration y ~ logit(p): (0, 1) is calibrated;
    a slope below 1 means over-confident. Cluster-robust 95% intervals."""
    res = logit_fit(np.asarray(y, float), pd.DataFrame({"logit_p": _logit(p)}), clusters)
    if res is None or "logit_p" not in res.params.index:  # one prediction for every row: no slope
        return (NAN, NAN, NAN), (NAN, NAN, NAN)
    ci = res.conf_int()
    return ((float(res.params["const"]), *map(float, ci.loc["const"])),
            (float(res.params["logit_p"]), *map(float, ci.loc["logit_p"])))


def _logit(p: Any) -> np.ndarray:
    q = np.clip(np.asarray(p, float), 1e-6, 1 - 1e-6)
    return np.log(q / (1 - q))


def expand_draws(p: Sequence[float], draws: Sequence[Sequence[Any]], clusters: Sequence[Any],
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Long format: one row per (item, draw) with the item's prediction and cluster; draws
    that are None (unparsed behaviour) are left out, items with a None prediction too."""
    pp, yy, cc = [], [], []
    for pi, ds, c in zip(p, draws, clusters):
        if pi is None or (isinstance(pi, float) and math.isnan(pi)):
            continue
        for d in ds or []:
            if d is not None and not (isinstance(d, float) and math.isnan(d)):
                pp.append(float(pi))
                yy.append(float(d))
                cc.append(c)
    return np.array(pp, float), np.array(yy, float), np.array(cc, dtype=object)


def score_block(p: np.ndarray, y: np.ndarray, clusters: np.ndarray, choice: np.ndarray | None = None,
                ) -> dict[str, tuple[Interval, int]]:
    """Every score of probability ``p`` of the positive answer against 0/1 outcomes ``y``:
    accuracy of the decision (``choice``, default p >= 1/2), the majority-class baseline, AUROC,
    Brier and its base-rate baseline, ECE, calibration intercept/slope, mean prediction and base rate;
    intervals from a cluster bootstrap, except where a bootstrap collapses at 0 or 1: AUROC
    (Newcombe's score interval at the clustered effective size, ``introspect.stats.auroc``), accuracy
    and a 0/1 base rate (``rate_ci``); regression intervals for the calibration fit."""
    n = int(p.size)
    if n == 0:
        return {}
    ch = (p >= 0.5) if choice is None else np.asarray(choice, bool)
    yb = y >= 0.5
    out: dict[str, tuple[Interval, int]] = {
        "accuracy": (rate_ci(ch == yb, clusters), n),
        "majority_baseline": (cluster_boot(lambda i: float(max(y[i].mean(), 1 - y[i].mean())), n,
                                           clusters), n),
        "auroc": (auroc_ci(p, yb, clusters), n),
        "brier": (cluster_boot(lambda i: float(((p[i] - y[i]) ** 2).mean()), n, clusters), n),
        "brier_baseline": (cluster_boot(lambda i: float(((y[i].mean() - y[i]) ** 2).mean()), n,
                                        clusters), n),
        "ece": (cluster_boot(lambda i: ece(p[i], y[i]), n, clusters), n),
        "mean_prediction": (cluster_boot(lambda i: float(p[i].mean()), n, clusters), n),
        "base_rate": (rate_ci(y, clusters) if np.isin(y, (0.0, 1.0)).all()
                      else cluster_boot(lambda i: float(y[i].mean()), n, clusters), n),
        "positives": ((float(yb.sum()), NAN, NAN), n),  # an AUROC over a handful of positives says little
    }
    icpt, slope = calibration_slope(p, y, clusters)
    out["calibration_intercept"], out["calibration_slope"] = (icpt, n), (slope, n)
    return out


# ---------------------------------------------------------------- regressions
def _clustered(clusters: Sequence[Any]) -> dict[str, Any]:
    """Cluster-robust covariance with statsmodels' small-sample factor G/(G-1)·(N-1)/(N-K), and
    t_{G-1} rather than normal quantiles for intervals and p: with a few dozen questions the
    normal reference is too liberal."""
    return {"cov_type": "cluster", "use_t": True,
            "cov_kwds": {"groups": pd.factorize(np.asarray(clusters, dtype=object))[0], "use_correction": True}}


def logit_fit(y: np.ndarray, X: pd.DataFrame, clusters: Sequence[Any] | None = None) -> Any:
    """statsmodels Logit of y on X plus a constant, standard errors clustered by ``clusters``
    (HC1 when None); None when it cannot be fitted (one class, separation, too few rows)."""
    import statsmodels.api as sm

    y = np.asarray(y, float)
    cols = [c for c in X.columns if X[c].nunique() > 1]
    if y.size < len(cols) + 3 or len(np.unique(y)) < 2:
        return None
    Xc = sm.add_constant(X[cols].astype(float), has_constant="add")
    kw: dict[str, Any] = {"cov_type": "HC1"}
    if clusters is not None:
        kw = _clustered(clusters)
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = sm.Logit(y, Xc).fit(disp=0, maxiter=200, **kw)
    except Exception:  # singular matrix, perfect separation: no estimate rather than a crash
        return None
    if not np.all(np.isfinite(res.bse)) or not res.mle_retvals.get("converged", True):
        return None
    return res


def odds_ratios(res: Any) -> pd.DataFrame:
    """term, odds_ratio, lo, hi, p, n of a fitted Logit (constant left out)."""
    cols = ["term", "odds_ratio", "lo", "hi", "p", "n"]
    if res is None:
        return pd.DataFrame(columns=cols)
    terms = [t for t in res.params.index if t != "const"]
    ci = np.exp(res.conf_int())
    return pd.DataFrame({"term": terms, "odds_ratio": np.exp(res.params[terms]).to_numpy(),
                         "lo": ci.loc[terms, 0].to_numpy(), "hi": ci.loc[terms, 1].to_numpy(),
                         "p": res.pvalues[terms].to_numpy(), "n": int(res.nobs)}, columns=cols)


def ols_fit(y: np.ndarray, X: pd.DataFrame, clusters: Sequence[Any] | None = None) -> Any:
    """statsmodels OLS with cluster-robust errors (a continuous outcome such as logit P(T))."""
    import statsmodels.api as sm

    cols = [c for c in X.columns if X[c].nunique() > 1]
    if len(y) < len(cols) + 3 or not cols:
        return None
    Xc = sm.add_constant(X[cols].astype(float), has_constant="add")
    kw: dict[str, Any] = {"cov_type": "HC1"}
    if clusters is not None:
        kw = _clustered(clusters)
    return sm.OLS(np.asarray(y, float), Xc).fit(**kw)


def lr_test(y: np.ndarray, full: pd.DataFrame, reduced: pd.DataFrame) -> tuple[float, int, float]:
    """Likelihood-ratio test of nested logits (full ⊇ reduced): (chi2, df, p); NaN where the
    reduced logit cannot be fitted (the controls separate y: no test is possible)."""
    import statsmodels.api as sm
    from scipy.stats import chi2

    y = np.asarray(y, float)
    if len(np.unique(y)) < 2:
        return NAN, 0, NAN

    def llf(X: pd.DataFrame) -> tuple[float, int, bool]:
        import warnings

        cols = [c for c in X.columns if X[c].nunique() > 1]
        Xc = sm.add_constant(X[cols].astype(float), has_constant="add")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                r = sm.Logit(y, Xc).fit(disp=0, maxiter=200)
        except Exception:
            return NAN, len(cols), False
        return float(r.llf), len(cols), bool(r.mle_retvals.get("converged", True))

    lf, kf, _ = llf(full)  # separated by the full model only: llf -> 0, a large statistic (right)
    lr, kr, ok = llf(reduced) if len(reduced.columns) else (_null_llf(y), 0, True)
    if not ok:  # the controls alone separate y: both llf -> 0 and 2*(0 - 0) would read as p = 1,
        return NAN, kf - kr, NAN  # "nothing beyond the controls", when nothing can be tested
    stat, df = 2 * (lf - lr), kf - kr
    if not math.isfinite(stat) or df < 1:
        return NAN, df, NAN
    return float(stat), df, float(chi2.sf(max(stat, 0.0), df))


def _null_llf(y: np.ndarray) -> float:
    m = y.mean()
    return float(np.sum(y * np.log(m) + (1 - y) * np.log(1 - m)))


def fisher(a: np.ndarray, b: np.ndarray) -> tuple[Interval, float]:
    """Association of two binary variables: (odds ratio with its 95% CI (Woolf, statsmodels
    Table2x2 with 0.5 added to empty cells), Fisher's exact two-sided p). The odds ratio is NaN
    when either variable never varies (a model that never delegates): the 0.5 added to its two
    empty cells would otherwise print ≈ 1.6 [0.03, 83], a number the data cannot support."""
    from scipy.stats import fisher_exact
    from statsmodels.stats.contingency_tables import Table2x2

    a, b = np.asarray(a, bool), np.asarray(b, bool)
    t = np.array([[(a & b).sum(), (a & ~b).sum()], [(~a & b).sum(), (~a & ~b).sum()]], float)
    p = float(fisher_exact(t.astype(int))[1]) if a.size else NAN
    if (t.sum(0) == 0).any() or (t.sum(1) == 0).any():
        return (NAN, NAN, NAN), p
    tt = Table2x2(t + 0.5 if (t == 0).any() else t)
    lo, hi = tt.oddsratio_confint()
    return (float(tt.oddsratio), float(lo), float(hi)), p


def _pair_counts(a: np.ndarray, b: np.ndarray) -> tuple[int, int, int, int]:
    """(both, a only, b only, neither) of 0/1 pairs."""
    a, b = np.asarray(a) >= 0.5, np.asarray(b) >= 0.5
    return int((a & b).sum()), int((a & ~b).sum()), int((~a & b).sum()), int((~a & ~b).sum())


def newcombe_paired(a: np.ndarray, b: np.ndarray, level: float = 0.95) -> Interval:
    """mean(a) − mean(b) for 0/1 pairs with Newcombe's (1998) method-10 score interval: Wilson
    intervals of both margins combined through the pairs' phi correlation. A bootstrap of the
    pairs printed 0 [0, 0] when no pair was discordant (every resample alike); this one keeps
    its width there and its 95% (checked by simulation in tests)."""
    from statsmodels.stats.proportion import proportion_confint

    t11, t10, t01, t00 = _pair_counts(a, b)
    n = t11 + t10 + t01 + t00
    if not n:
        return (math.nan, math.nan, math.nan)
    p1, p2 = (t11 + t10) / n, (t11 + t01) / n
    (l1, u1), (l2, u2) = (proportion_confint(k, n, 1 - level, "wilson") for k in (t11 + t10, t11 + t01))
    den = (t11 + t10) * (t01 + t00) * (t11 + t01) * (t10 + t00)
    num = t11 * t00 - t10 * t01
    phi = 0.0 if den == 0 else max(num - n / 2, 0) / math.sqrt(den) if num > 0 else num / math.sqrt(den)
    d = p1 - p2
    lo = d - math.sqrt(max((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2, 0))
    hi = d + math.sqrt(max((u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2, 0))
    return (float(d), max(-1.0, lo), min(1.0, hi))


def paired_binary(a: np.ndarray, b: np.ndarray) -> tuple[Interval, float]:
    """mean(a) − mean(b) over 0/1 pairs (rows of one question) with Newcombe's paired score
    interval, and McNemar's exact p (the paired test of equal proportions)."""
    from statsmodels.stats.contingency_tables import mcnemar

    t11, t10, t01, t00 = _pair_counts(a, b)
    p = 1.0 if t10 + t01 == 0 else float(mcnemar([[t11, t10], [t01, t00]], exact=True).pvalue)
    return newcombe_paired(a, b), p


def grouped_folds(groups: Sequence[Any], k: int = 5, seed: int = 0, y: Sequence[float] | None = None,
                  ) -> list[np.ndarray]:
    """Test-set row indices of k folds that never split a group. With ``y``, groups are dealt
    to folds in order of their mean label (stratified), so every fold keeps about the base rate:
    otherwise a fold with more positives trains on fewer, predicts lower, and a pooled held-out
    AUROC comes out below 1/2 with no signal at all."""
    codes = pd.factorize(np.asarray(groups, dtype=object))[0]
    n_groups = codes.max() + 1 if codes.size else 0
    order = np.random.default_rng(seed).permutation(n_groups)
    if y is not None and n_groups:
        gy = np.bincount(codes, np.asarray(y, float), minlength=n_groups) / np.bincount(codes, minlength=n_groups)
        order = order[np.argsort(gy[order], kind="stable")]
    fold_of = {int(g): i % k for i, g in enumerate(order)}
    f = np.array([fold_of[int(c)] for c in codes])
    return [np.flatnonzero(f == i) for i in range(k) if (f == i).any()]


def ridge_logit(y: np.ndarray, X: pd.DataFrame, alpha: float = 0.01) -> np.ndarray | None:
    """Coefficients (constant first) of an L2-penalised logistic regression on standardised
    columns (statsmodels GLM ``fit_regularized``, L1 weight 0): finite under separation."""
    import warnings

    import statsmodels.api as sm

    y = np.asarray(y, float)
    if y.size < 3 or len(np.unique(y)) < 2:
        return None
    Xc = sm.add_constant(X.astype(float).to_numpy(), has_constant="add")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            res = sm.GLM(y, Xc, family=sm.families.Binomial()).fit_regularized(alpha=alpha, L1_wt=0.0)
        except Exception:
            return None
    params = np.asarray(res.params, float)
    return params if np.all(np.isfinite(params)) else None


def fold_auroc(p: np.ndarray, label: np.ndarray, fold: np.ndarray) -> float:
    """AUROC counting only positive–negative pairs inside the same fold: held-out scores from
    different folds come from different fits and are not on one scale (pooling them biases a
    no-signal AUROC below 1/2)."""
    from scipy.stats import rankdata

    y = np.asarray(label, bool)
    u = pairs = 0.0
    for f in np.unique(fold):
        m = fold == f
        n1, n0 = int(y[m].sum()), int((~y[m]).sum())
        if n1 and n0:
            r = rankdata(np.asarray(p, float)[m])
            u += r[y[m]].sum() - n1 * (n1 + 1) / 2
            pairs += n1 * n0
    return u / pairs if pairs else NAN


def cross_validated_p(y: np.ndarray, X: pd.DataFrame, groups: Sequence[Any], k: int = 5,
                      return_folds: bool = False) -> Any:
    """Held-out P(y=1) from a ridge logistic regression on X, grouped k-fold: the surface-feature
    baseline's predictions. A fold whose training rows hold one class predicts 1/2 (a constant
    fold carries no ranking, rather than a base rate that anti-correlates with its labels)."""
    y = np.asarray(y, float)
    Xs = X.astype(float)
    sd = Xs.std().replace(0, 1.0)
    Xs = ((Xs - Xs.mean()) / sd).fillna(0.0)
    out, fold = np.full(y.size, 0.5), np.zeros(y.size, int)
    for f, test in enumerate(grouped_folds(groups, k, y=y >= 0.5)):
        fold[test] = f
        train = np.setdiff1d(np.arange(y.size), test)
        w = ridge_logit(y[train] >= 0.5, Xs.iloc[train]) if train.size else None
        if w is not None:
            out[test] = 1 / (1 + np.exp(-(w[0] + Xs.iloc[test].to_numpy() @ w[1:])))
    return (out, fold) if return_folds else out


def surface_auroc(y: np.ndarray, X: pd.DataFrame, groups: Sequence[Any], k: int = 5) -> Interval:
    """The surface-feature baseline's held-out AUROC (pairs within folds, cluster bootstrap)."""
    p, fold = cross_validated_p(y, X, groups, k, return_folds=True)
    yb = np.asarray(y, float) >= 0.5
    return cluster_boot(lambda i: fold_auroc(p[i], yb[i], fold[i]), yb.size, groups)


def pair_credit(pred_harder: float | None, key_i: tuple, key_j: tuple) -> float | None:
    """Credit of one pair prediction ("i is harder" with probability/indicator ``pred_harder``)
    against the truth keys (larger key = harder): 1 or 0, and 1/2 for a true tie (002 §4.3
    scores all six pairs)."""
    if pred_harder is None:
        return None
    if key_i == key_j:
        return 0.5
    i_harder = key_i > key_j
    return float(pred_harder >= 0.5) if i_harder else float(pred_harder < 0.5)
