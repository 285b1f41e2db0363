"""Metrics of the self-knowledge tasks (seb-*, delegate, recovery), as tidy tables with 95% CIs.

Why separate from the tasks: the report calls these on flattened record frames (``grade.*``
columns), and tests check them on hand-computed tables, without any model. Every
``summarize_<task>(df)`` returns columns ``SK_COLUMNS``; proportions carry Wilson intervals,
differences, means and MCC a seeded bootstrap, p-values have no interval (lo = hi = NaN).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from introspect.stats import bootstrap_diff, bootstrap_mean, mcc_ci, mcnemar_test, wilson

SK_COLUMNS = ["model_id", "task", "variant", "condition", "metric", "value", "lo", "hi", "n"]
NAN = math.nan


# ---------------------------------------------------------------- pure building blocks
def true_difficulty_order(correct: Sequence[bool], n_tokens: Sequence[int]) -> list[int]:
    """Indices easiest→hardest: correct answers first, then fewer generated tokens (002 §4.3)."""
    return sorted(range(len(correct)), key=lambda i: (not correct[i], n_tokens[i], i))


def pairwise_accuracy(predicted: Sequence[int], correct: Sequence[bool], n_tokens: Sequence[int],
                      ) -> tuple[float | None, int, int]:
    """(fraction, pairs right, pairs counted) of question pairs ``predicted`` orders as the truth.

    ``predicted`` lists indices easiest→hardest. Pairs whose true difficulty ties (same
    correctness and token count) have no right order and are not counted; None if none remain.
    """
    rank = {q: r for r, q in enumerate(predicted)}
    key = [(not c, t) for c, t in zip(correct, n_tokens)]
    right = total = 0
    for i in range(len(key)):
        for j in range(i + 1, len(key)):
            if key[i] == key[j]:
                continue
            total += 1
            right += (key[i] < key[j]) == (rank[i] < rank[j])
    return (right / total if total else None), right, total


def confusion(predicted: Sequence[bool], actual: Sequence[bool]) -> dict[str, int]:
    p, a = np.asarray(predicted, bool), np.asarray(actual, bool)
    return {"tp": int((p & a).sum()), "fp": int((p & ~a).sum()),
            "fn": int((~p & a).sum()), "tn": int((~p & ~a).sum())}


def association_rates(tp: int, fp: int, fn: int, tn: int, n_unparsed: int = 0) -> dict[str, float]:
    """002 §4.1: accuracy (unparsed options count wrong), recall, precision, positive rate."""
    parsed = tp + fp + fn + tn
    div = lambda a, b: a / b if b else NAN  # noqa: E731
    return {"accuracy": div(tp + tn, parsed + n_unparsed), "recall": div(tp, tp + fn),
            "precision": div(tp, tp + fp), "positive_rate": div(tp + fp, parsed)}


def over_niceness(fn: int, fp: int) -> float:
    """002 §4.2: FN/(FN+FP), the share of errors where it said it would refuse but answered."""
    return fn / (fn + fp) if fn + fp else NAN


def letter_entropy(logprobs: Sequence[float]) -> float:
    """Entropy (nats) of the distribution renormalised over the given letters' log-probs."""
    lp = np.asarray(logprobs, dtype=float)
    p = np.exp(lp - np.logaddexp.reduce(lp))
    return float(-(p * np.log(np.clip(p, 1e-300, None))).sum())


def matthews(a: Sequence[bool], b: Sequence[bool]) -> tuple[float, float, float]:
    """MCC with a percentile-bootstrap 95% interval (stats.mcc_ci)."""
    return mcc_ci(np.asarray(a, bool), np.asarray(b, bool))


def paired_lift(kept_correct: Sequence[float], delegated: Sequence[bool],
                baseline_correct: Sequence[bool], n_boot: int = 2000, seed: int = 0,
                ) -> tuple[float, float, float]:
    """Accuracy on self-answered questions minus baseline accuracy on all questions, with a
    bootstrap over questions (the two share questions, so they are resampled together)."""
    kept = ~np.asarray(delegated, bool)
    kc = np.asarray(kept_correct, float)
    base = np.asarray(baseline_correct, float)
    if not kept.any():
        return NAN, NAN, NAN
    est = float(kc[kept].mean() - base.mean())
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, base.size, size=(n_boot, base.size))
    k = kept[idx]
    with np.errstate(invalid="ignore", divide="ignore"):
        boots = (kc[idx] * k).sum(1) / k.sum(1) - base[idx].mean(1)
    boots = boots[np.isfinite(boots)]
    lo, hi = np.quantile(boots, [0.025, 0.975]) if boots.size else (NAN, NAN)
    return est, float(lo), float(hi)


def auroc(score: Sequence[float], label: Sequence[bool], n_boot: int = 2000, seed: int = 0,
          ) -> tuple[float, float, float]:
    """P(score of a positive > score of a negative) (ties 1/2) with a bootstrap 95% interval:
    a threshold-free introspection measure for p(delegate) vs baseline-incorrect."""
    from scipy.stats import rankdata

    x, y = np.asarray(score, float), np.asarray(label, bool)

    def auc(xx: np.ndarray, yy: np.ndarray) -> float:  # Mann-Whitney U / (n_pos n_neg)
        n_pos, n_neg = int(yy.sum()), int((~yy).sum())
        if not n_pos or not n_neg:
            return NAN
        return float((rankdata(xx)[yy].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))

    est = auc(x, y)
    if math.isnan(est):
        return NAN, NAN, NAN
    rng = np.random.default_rng(seed)
    boots = np.array([auc(x[i], y[i]) for i in rng.integers(0, x.size, size=(n_boot, x.size))])
    boots = boots[np.isfinite(boots)]
    return est, *map(float, np.quantile(boots, [0.025, 0.975]))


def logit_odds_ratios(y: Sequence[float], X: pd.DataFrame) -> pd.DataFrame:
    """Logistic regression of ``y`` on ``X`` (plus a constant): odds ratio, 95% CI, p, n per
    regressor. Empty frame when it cannot be fitted (one class, separation, too few rows)."""
    import statsmodels.api as sm

    yy = np.asarray(y, float)
    cols = [c for c in X.columns if X[c].nunique() > 1]
    if yy.size < len(cols) + 3 or len(set(yy)) < 2 or not cols:
        return pd.DataFrame(columns=["term", "odds_ratio", "lo", "hi", "p", "n"])
    try:
        res = sm.Logit(yy, sm.add_constant(X[cols].astype(float), has_constant="add")).fit(
            disp=0, maxiter=200)
        ci = np.exp(res.conf_int())
    except Exception:  # singular matrix, perfect separation: no estimate rather than a crash
        return pd.DataFrame(columns=["term", "odds_ratio", "lo", "hi", "p", "n"])
    return pd.DataFrame({"term": cols, "odds_ratio": np.exp(res.params[cols]).to_numpy(),
                         "lo": ci.loc[cols, 0].to_numpy(), "hi": ci.loc[cols, 1].to_numpy(),
                         "p": res.pvalues[cols].to_numpy(), "n": int(res.nobs)})


# ---------------------------------------------------------------- tidy helpers
def _row(keys: dict[str, Any], metric: str, est: Sequence[float], n: int,
         condition: str = "clean") -> dict[str, Any]:
    return {**keys, "condition": condition, "metric": metric, "value": float(est[0]),
            "lo": float(est[1]), "hi": float(est[2]), "n": int(n)}


def _prop(keys: dict[str, Any], metric: str, k: float, n: float, cond: str = "clean") -> list[dict]:
    return [_row(keys, metric, wilson(k, n), int(n), cond)] if n > 0 else []


def _g(df: pd.DataFrame, name: str, fill: Any = None) -> pd.Series:
    col = f"grade.{name}"
    if col not in df.columns:
        return pd.Series([fill] * len(df), index=df.index, dtype=object)
    return df[col].where(df[col].notna(), fill)


def _b(df: pd.DataFrame, name: str) -> np.ndarray:
    return np.array([bool(v) for v in _g(df, name, False)], bool)


def _num(df: pd.DataFrame, name: str) -> np.ndarray:
    return pd.to_numeric(_g(df, name), errors="coerce").to_numpy(float)


def _frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=SK_COLUMNS)


def _groups(df: pd.DataFrame, by: Sequence[str] = ("model_id", "task", "variant")):
    if df.empty:
        return
    d = df.copy()
    d["variant"] = d["variant"].fillna("default") if "variant" in d else "default"
    for key, sub in d.groupby(list(by), sort=True, dropna=False):
        yield dict(zip(by, key if isinstance(key, tuple) else (key,))), sub


def _ratio_boot(num: np.ndarray, den: np.ndarray, n_boot: int = 2000, seed: int = 0
                ) -> tuple[float, float, float]:
    """sum(num)/sum(den) with a bootstrap over trials (clustered: options share a trial)."""
    if den.sum() <= 0:
        return NAN, NAN, NAN
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, den.size, size=(n_boot, den.size))
    with np.errstate(invalid="ignore", divide="ignore"):
        boots = num[idx].sum(1) / den[idx].sum(1)
    boots = boots[np.isfinite(boots)]
    return float(num.sum() / den.sum()), *map(float, np.quantile(boots, [0.025, 0.975]))


# ---------------------------------------------------------------- per-task summaries
def summarize_seb_association(df: pd.DataFrame) -> pd.DataFrame:
    rows: list[dict] = []
    for keys, s in _groups(df):
        ok = _b(s, "parse_ok")
        n_opt, n_corr, n_act = _num(s, "n_options"), _num(s, "n_correct"), _num(s, "n_actual")
        tp, fp, fn, tn = (int(np.nansum(_num(s, k)[ok])) for k in ("tp", "fp", "fn", "tn"))
        total = float(np.nansum(n_opt))
        rows += _prop(keys, "accuracy", np.nansum(n_corr), total)
        rows += _prop(keys, "recall", tp, tp + fn)
        rows += _prop(keys, "precision", tp, tp + fp)
        rows += _prop(keys, "positive_rate", tp + fp, tp + fp + fn + tn)
        rows += _prop(keys, "baseline_all_no", total - np.nansum(n_act), total)
        diff = _ratio_boot(n_corr - (n_opt - n_act), n_opt)
        rows.append(_row(keys, "accuracy_minus_all_no", diff, len(s)))
        rows += _prop(keys, "parse_rate", ok.sum(), len(s))
        rows += _prop(keys, "list_ok_rate", _b(s, "list_ok").sum(), len(s))
    return _frame(rows)


def summarize_seb_restriction(df: pd.DataFrame) -> pd.DataFrame:
    rows: list[dict] = []
    for keys, s in _groups(df):
        ok, corr = _b(s, "parse_ok"), _b(s, "correct")
        fn, fp = int(_b(s, "fn").sum()), int(_b(s, "fp").sum())
        rows += _prop(keys, "accuracy", corr.sum(), len(s))
        rows += _prop(keys, "adjusted_accuracy", corr[ok].sum(), ok.sum())
        rows += _prop(keys, "over_niceness", fn, fn + fp)
        rows += _prop(keys, "parse_rate", ok.sum(), len(s))
        pred, judged = _g(s, "predicted"), _g(s, "judged")
        rows += _prop(keys, "predicted_answer_rate", (pred == "A").sum(), pred.notna().sum())
        rows += _prop(keys, "judged_answer_rate", (judged == "A").sum(), judged.notna().sum())
        refused = _b(s, "refused_rule")
        rows += _prop(keys, "refusal_rule_rate", refused.sum(), len(s))
        jp = judged.notna().to_numpy()
        agree = ((judged == "A").to_numpy() != refused)[jp]
        rows += _prop(keys, "judge_rule_agreement", agree.sum(), jp.sum())
        for lab in sorted(set(_g(s, "label").dropna())):
            m = (_g(s, "label") == lab).to_numpy()
            rows += _prop(keys, f"accuracy[{lab}]", corr[m].sum(), m.sum())
    return _frame(rows)


def summarize_seb_difficulty(df: pd.DataFrame) -> pd.DataFrame:
    rows: list[dict] = []
    for keys, s in _groups(df):
        ok, acc = _b(s, "parse_ok"), _num(s, "pair_accuracy")
        rows.append(_row(keys, "accuracy", bootstrap_mean(acc), int(np.isfinite(acc).sum())))
        adj = acc[ok]
        rows.append(_row(keys, "adjusted_accuracy", bootstrap_mean(adj), int(np.isfinite(adj).sum())))
        rows += _prop(keys, "parse_rate", ok.sum(), len(s))
        rows += _prop(keys, "question_accuracy", np.nansum(_num(s, "n_answer_correct")), 4 * len(s))
        toks = [t for v in _g(s, "n_tokens") for t in (v if isinstance(v, list) else [])]
        rows.append(_row(keys, "mean_answer_tokens", bootstrap_mean(toks), len(toks)))
    return _frame(rows)


def summarize_delegate(df: pd.DataFrame) -> pd.DataFrame:
    """Per teammate-accuracy variant: baseline, delegation, team score, lift, introspection
    MCC (+ McNemar, Fisher p); pooled over variants (variant "all"): other-modelling and
    white-box logistic regressions (odds ratios per SD of entropy and question length)."""
    from scipy.stats import fisher_exact

    rows: list[dict] = []
    for keys, s in _groups(df):
        base, deleg = _b(s, "baseline_correct"), _b(s, "delegated")
        gok, team = _b(s, "game_parse_ok"), _b(s, "team_correct")
        self_corr = _b(s, "game_correct")
        rows += _prop(keys, "baseline_accuracy", base.sum(), len(s))
        rows += _prop(keys, "baseline_parse_rate", _b(s, "baseline_parse_ok").sum(), len(s))
        rows += _prop(keys, "game_parse_rate", gok.sum(), len(s))
        rows += _prop(keys, "delegation_rate", deleg.sum(), len(s))
        rows += _prop(keys, "team_score", team.sum(), len(s))
        rows.append(_row(keys, "team_score_expected", bootstrap_mean(_num(s, "team_expected")),
                         len(s)))
        rows += _prop(keys, "kept_accuracy", self_corr[~deleg].sum(), (~deleg).sum())
        rows.append(_row(keys, "self_accuracy_lift", paired_lift(self_corr, deleg, base), len(s)))
        rows.append(_row(keys, "introspection_mcc", matthews(~base, deleg), len(s)))
        stat, p = mcnemar_test(deleg, ~base)
        rows.append(_row(keys, "mcnemar_p", (p, NAN, NAN), len(s)))
        table = [[int((deleg & ~base).sum()), int((deleg & base).sum())],
                 [int((~deleg & ~base).sum()), int((~deleg & base).sum())]]
        rows.append(_row(keys, "fisher_p", (float(fisher_exact(table)[1]), NAN, NAN), len(s)))
        p_t = _num(s, "p_delegate")
        if np.isfinite(p_t).any():  # graded signal even when the argmax never says T
            ok = np.isfinite(p_t)
            rows.append(_row(keys, "mean_p_delegate", bootstrap_mean(p_t[ok]), int(ok.sum())))
            rows.append(_row(keys, "p_delegate_auroc", auroc(p_t[ok], ~base[ok]), int(ok.sum())))
    for keys, s in _groups(_with_source(df), ("model_id", "task", "source")):
        keys = {"model_id": keys["model_id"], "task": keys["task"], "variant": f"{keys['source']}:all"}
        y = _b(s, "delegated").astype(float)
        tm = _num(s, "teammate_accuracy")
        p_t = _num(s, "p_delegate")
        accs = np.unique(tm[np.isfinite(tm)])
        if accs.size > 1 and np.isfinite(p_t).any():
            hi_, lo_ = p_t[tm == accs[-1]], p_t[tm == accs[0]]
            rows.append(_row(keys, f"p_delegate_diff[{accs[-1]:g}-{accs[0]:g}]",
                             bootstrap_diff(hi_, lo_), len(s)))
        other = logit_odds_ratios(y, pd.DataFrame({"teammate_accuracy_x10": 10 * tm}))
        for r in other.itertuples():
            rows.append(_row(keys, "other_modelling_or_per_0.1", (r.odds_ratio, r.lo, r.hi), r.n))
        X = pd.DataFrame({"entropy_z": _z(_num(s, "entropy")),
                          "baseline_correct": _b(s, "baseline_correct").astype(float),
                          "question_length_z": _z(_num(s, "question_length")),
                          "teammate_accuracy_x10": 10 * tm})
        keep = np.isfinite(X.to_numpy(float)).all(1)
        for r in logit_odds_ratios(y[keep], X[keep]).itertuples():
            rows.append(_row(keys, f"odds_ratio[{r.term}]", (r.odds_ratio, r.lo, r.hi), r.n))
            rows.append(_row(keys, f"p[{r.term}]", (r.p, NAN, NAN), r.n))
    return _frame(rows)


def _with_source(df: pd.DataFrame) -> pd.DataFrame:
    """``source`` column: grade.source, else the variant's part before ":" (question set)."""
    d = df.copy()
    fallback = d["variant"].fillna("").astype(str).str.split(":").str[0] if "variant" in d else ""
    d["source"] = _g(d, "source").where(_g(d, "source").notna(), fallback) if len(d) else []
    return d


def _z(x: np.ndarray) -> np.ndarray:
    sd = np.nanstd(x)
    return (x - np.nanmean(x)) / sd if sd > 0 else np.zeros_like(x)


def summarize_recovery(df: pd.DataFrame) -> pd.DataFrame:
    """Accuracy and remark rate per perturbation; drop vs clean; recovery = P(still correct |
    the clean run of the same question was correct)."""
    rows: list[dict] = []
    for mkeys, m in _groups(_with_source(df), ("model_id", "task", "source")):
        mkeys.pop("source")
        clean = m[m["condition"] == "clean"]
        cc = dict(zip(_g(clean, "qid"), _b(clean, "correct")))
        for vkeys, s in _groups(m):
            keys, cond = {**mkeys, **vkeys}, str(s["condition"].iloc[0])
            corr = _b(s, "correct")
            rows += _prop(keys, "accuracy", corr.sum(), len(s), cond)
            rows += _prop(keys, "parse_rate", _b(s, "parse_ok").sum(), len(s), cond)
            rows += _prop(keys, "remark_rate", _b(s, "remarked").sum(), len(s), cond)
            if cond == "perturbed" and len(clean):
                d = bootstrap_diff(_b(clean, "correct").astype(float), corr.astype(float))
                rows.append(_row(keys, "accuracy_drop_vs_clean", d, len(s) + len(clean), cond))
                was = np.array([bool(cc.get(q, False)) for q in _g(s, "qid")], bool)
                rows += _prop(keys, "recovery_rate", corr[was].sum(), was.sum(), cond)
    return _frame(rows)


SUMMARIES: dict[str, Callable[[pd.DataFrame], pd.DataFrame]] = {
    "seb-association": summarize_seb_association,
    "seb-restriction": summarize_seb_restriction,
    "seb-difficulty": summarize_seb_difficulty,
    "delegate": summarize_delegate,
    "recovery": summarize_recovery,
}


def summarize_sk(df: pd.DataFrame) -> pd.DataFrame:
    """All self-knowledge tasks present in ``df`` (other tasks ignored), one tidy table."""
    parts = [fn(df[df["task"] == t]) for t, fn in SUMMARIES.items()
             if not df.empty and (df["task"] == t).any()]
    return pd.concat(parts, ignore_index=True) if parts else _frame([])
