"""Comparisons across models from the records of several runs: answered items and self vs other.

Why: a model can score above chance on "predict your own behaviour" just by knowing which items
are hard for anyone. Scoring model M's predictions against model N's behaviour on the same
items separates the two: self-knowledge shows as M predicting M better than it predicts N.
``ability_items`` collects the independent ability items (task ``ability``), the input of the
Rasch abilities in ``introspect.report.rasch``; ``truth_item_ids`` lists the questions the
self-knowledge truths used, so that no ability item is one of them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import rankdata, spearmanr
from scipy.stats import t as student_t

from introspect.stats.auroc import auroc_ci
from introspect.stats.items import expand_draws
from introspect.tasks.fewshot import split_variant
from introspect.tasks.selfknowledge.rows import g, isnum, lists, num, with_source

ITEM_COLUMNS = ["model_id", "item", "task", "y", "weight"]
SVO_COLUMNS = ["task", "predictor", "behaviour", "self", "metric", "value", "lo", "hi", "n", "p",
               "same_base", "note"]
MIN_CLASS = 10  # items of each class a behaviour needs before an AUROC on it is judged
NOT_JUDGED = "not judged"


@dataclass(frozen=True)
class Classes:
    """Items of a behaviour with a positive draw and with a negative draw (an item of several
    draws can count in both: the item, not the draw, is the unit the interval resamples). An
    AUROC over a handful of one class says little and its interval is wide or undefined, so a
    reading needs ``MIN_CLASS`` of each, else it is "not judged"."""

    positives: int
    negatives: int

    @classmethod
    def of(cls, draws: list[list]) -> Classes:
        seen = [[float(x) >= 0.5 for x in d if x is not None and np.isfinite(float(x))] for d in draws]
        return cls(sum(any(s) for s in seen), sum(not all(s) for s in seen if s))

    @property
    def judged(self) -> bool:
        return min(self.positives, self.negatives) >= MIN_CLASS

    @property
    def note(self) -> str:
        """Empty when judged, else why not."""
        return "" if self.judged else (f"{NOT_JUDGED}: {self.positives} positive, {self.negatives} "
                                       f"negative items: fewer than {MIN_CLASS} of a class")


def base_of(model_id: object) -> str:
    """The base model of a run's model id: an adapter's id is its base's name and ``+lora-…``."""
    return str(model_id).split("+", 1)[0]


def ability_reading(df: pd.DataFrame) -> str:
    """``cloze`` when every ``ability`` record carries a cloze reading (letter-free: each option's
    text scored after the bare question), else ``letter`` (the argmax letter at "Answer:").

    Why every record of every model: a Rasch fit over items graded one way for one model and the
    other way for another would put two instruments on one scale. Why cloze first: at these
    sizes the letter argmax reads the answer-letter prior (SmolLM2's modal letter rate 0.665 on
    the 200 MMLU items), so its 0/1 grades are the items keyed to that letter."""
    a = df[df["task"] == "ability"] if len(df) else df
    if not len(a):
        return "letter"
    return "cloze" if g(a, "cloze_correct").notna().all() else "letter"


def ability_items(df: pd.DataFrame, reading: str | None = None) -> pd.DataFrame:
    """One row per (model, item) of the ``ability`` task: ``y`` = 1 when the item was answered
    right (0/1, what conditional ML needs) by ``reading`` (``ability_reading``'s choice by
    default: cloze where every record has it, else the letter argmax); ``item`` is the question id."""
    a = df[df["task"] == "ability"] if len(df) else df
    reading = reading or ability_reading(df)
    if reading not in ("cloze", "letter"):
        raise ValueError(f"reading must be 'cloze' or 'letter', got {reading!r}")
    key = "cloze_correct" if reading == "cloze" else "correct"
    rows = [{"model_id": m, "item": str(q), "task": "ability", "y": float(bool(ok)), "weight": 1.0,
             "topic": str(t or "all")}
            for m, q, ok, t in zip(a["model_id"], g(a, "qid"), g(a, key, False), g(a, "topic", ""))
            ] if len(a) else []
    out = pd.DataFrame(rows, columns=[*ITEM_COLUMNS, "topic"])
    return out.drop_duplicates(["model_id", "item"]).reset_index(drop=True)


def truth_item_ids(df: pd.DataFrame) -> set[str]:
    """Question ids the self-knowledge truths are built on (the Delegate Game's pool, the
    difficulty task's questions, recovery's): ability items among them are not independent."""
    out: set[str] = set()
    for task, s in _by_task(df):
        if task in ("delegate", "delegate-probe", "recovery"):
            out |= {str(q) for q in g(s, "qid") if q is not None}
        elif task == "seb-difficulty":
            out |= {str(q) for qs in lists(s, "qids") for q in qs}
    return out


def _by_task(df: pd.DataFrame) -> Iterator[tuple[str, pd.DataFrame]]:
    if df.empty:
        return
    for task, s in df.groupby("task", sort=True):
        yield str(task), s.reset_index(drop=True)


# ---------------------------------------------------------------- self vs other
def _game_keys(s: pd.DataFrame) -> list[str]:
    """One key per Delegate Game row: question set, the pool's knob setting where it has one, and
    the question id. Why the setting: a calibrated pool's ids ("delegate-0-82") are drawn at each
    model's own setting, so the same id is another question for a model calibrated elsewhere."""
    return [f"{src}:{k}:{q}" if k else f"{src}:{q}"
            for src, k, q in zip(s["source"], g(s, "pool_knobs", ""), g(s, "qid"))]


def _predictions(task: str, s: pd.DataFrame) -> pd.DataFrame:
    """(model_id, key, p): what the model predicted, P(positive), per item key."""
    rows = []
    if task == "delegate":  # positive = "I would get this wrong": P(T)
        for m, key, p in zip(s["model_id"], _game_keys(s), num(s, "p_delegate")):
            rows.append((m, key, p))
    elif task == "seb-association":
        for m, w, opts, ps in zip(s["model_id"], s["word"], lists(s, "options"), lists(s, "p_yes")):
            rows += [(m, f"{w}:{o}", p) for o, p in zip(opts, ps)]
    elif task == "seb-restriction":
        for m, q, p in zip(s["model_id"], g(s, "qid"), num(s, "p_answer")):
            rows.append((m, str(q), p))
    elif task == "seb-difficulty":
        for m, qids, prs, ph in zip(s["model_id"], lists(s, "qids"), lists(s, "pairs"), lists(s, "p_harder")):
            rows += [(m, f"{qids[i]}>{qids[j]}", p) for (i, j), p in zip(prs, ph)] if qids else []
    d = pd.DataFrame(rows, columns=["model_id", "key", "p"])
    d = d[[isnum(v) for v in d["p"]]]
    return d.groupby(["model_id", "key"], as_index=False)["p"].mean()


def _behaviour(task: str, s: pd.DataFrame) -> dict[tuple[str, str], list]:
    """(model_id, key) -> the model's 0/1 behaviour draws on that item."""
    out: dict[tuple[str, str], list] = {}
    if task == "delegate":
        for m, key, ok in zip(s["model_id"], _game_keys(s), g(s, "baseline_correct", False)):
            out[(m, key)] = [float(not ok)]
    elif task == "seb-association":
        for m, w, opts, dr in zip(s["model_id"], s["word"], lists(s, "options"), lists(s, "listed_draws")):
            for o, d in zip(opts, dr):
                out[(m, f"{w}:{o}")] = list(d)
    elif task == "seb-restriction":
        for m, q, j in zip(s["model_id"], g(s, "qid"), lists(s, "judged_answered")):
            out[(m, str(q))] = list(j)
    elif task == "seb-difficulty":
        for m, qids, prs, tr in zip(s["model_id"], lists(s, "qids"), lists(s, "pairs"), lists(s, "pair_truth")):
            for (i, j), t in zip(prs, tr):
                if qids and t != 0.5:
                    out[(m, f"{qids[i]}>{qids[j]}")] = [float(t)]
    return out


def _graded(task: str, s: pd.DataFrame, beh: dict[tuple[str, str], list]) -> dict[tuple[str, str], float]:
    """(model_id, key) -> graded behaviour: the share of positive draws; for the Delegate Game
    1 − P(correct) (a model whose argmax is always "A" still has graded confidence)."""
    out = {k: float(np.mean([x for x in v if x is not None])) for k, v in beh.items()
           if any(x is not None for x in v)}
    if task == "delegate":
        for m, key, pc in zip(s["model_id"], _game_keys(s), num(s, "baseline_p_correct")):
            if np.isfinite(pc):
                out[(m, key)] = 1.0 - float(pc)
    return out


def _item_source(df: pd.DataFrame) -> pd.DataFrame:
    """``with_source`` without the prompt format's mark (``+fewshot``): a base model (few-shot
    format) and a chat model that played one question file answered the same items, and self vs
    other must line them up."""
    d = with_source(df)
    if len(d):
        d["source"] = d["source"].map(lambda v: split_variant(str(v))[0])
    return d


def clustered_auroc(p: np.ndarray, draws: list, keys: list[str]) -> tuple[tuple[float, float, float], int]:
    """AUROC of per-item predictions against the items' draws with Newcombe's interval at the
    clustered size (items as clusters), and the number of (item, draw) rows."""
    pp, y, c = expand_draws(list(p), draws, keys)
    return (auroc_ci(pp, y >= 0.5, c) if pp.size else (np.nan, np.nan, np.nan)), int(pp.size)


def loo_auroc(p: np.ndarray, draws: list) -> tuple[float, np.ndarray]:
    """AUROC of per-item predictions ``p`` against the items' 0/1 draws (one row per draw, as
    ``expand_draws``), and the AUROC with each item's draws left out (NaN where one class is
    left), the jackknife's input. Why not ``auroc_point`` on every subsample: the Mann–Whitney
    count loses item i's pairs, U − A_i − B_i + W_i (A_i its positives' wins, B_i its negatives'
    losses, W_i its own pairs, counted twice), all n deletions in one pass where n + 1 rankings
    made a 400-run coverage simulation take minutes."""
    n = len(p)
    pp, y, c = expand_draws(list(p), list(draws), list(range(n)))
    c, yb = c.astype(int), y >= 0.5
    n1, n0 = int(yb.sum()), int((~yb).sum())
    if not n1 or not n0:
        return np.nan, np.full(n, np.nan)
    sp, sn = pp[yb], pp[~yb]
    neg, pos = np.sort(sn), np.sort(sp)
    wins = (np.searchsorted(neg, sp, "left") + np.searchsorted(neg, sp, "right")) / 2
    losses = n1 - (np.searchsorted(pos, sn, "left") + np.searchsorted(pos, sn, "right")) / 2
    r = rankdata(pp, "dense").astype(int)  # (item, rank) keys: item i's negatives below a positive
    width = int(r.max()) + 1
    kn = np.sort(c[~yb] * width + r[~yb])
    kp, base = c[yb] * width + r[yb], c[yb] * width
    left = np.searchsorted(kn, kp, "left")
    own = left - np.searchsorted(kn, base, "left") + (np.searchsorted(kn, kp, "right") - left) / 2
    total = float(wins.sum())
    cut = (np.bincount(c[yb], wins, n) + np.bincount(c[~yb], losses, n) - np.bincount(c[yb], own, n))
    den = (n1 - np.bincount(c[yb], minlength=n)) * (n0 - np.bincount(c[~yb], minlength=n))
    with np.errstate(invalid="ignore", divide="ignore"):
        loo = np.where(den > 0, (total - cut) / np.maximum(den, 1), np.nan)
    return total / (n1 * n0), loo


def jackknife_t(est: float, loo: np.ndarray) -> tuple[float, float, float]:
    """(est, lo, hi): the jackknife-over-items standard error of ``loo`` (one estimate per item
    left out) with Student's t on n − 1 degrees of freedom; no interval below 3 items or where
    a deletion is undefined."""
    n = loo.size
    if not np.isfinite(est) or n < 3 or not np.isfinite(loo).all():
        return est, np.nan, np.nan
    half = float(student_t.ppf(0.975, n - 1) * np.sqrt((n - 1) / n * ((loo - loo.mean()) ** 2).sum()))
    return est, est - half, est + half


def auroc_difference(first: tuple[np.ndarray, list], rest: list[tuple[np.ndarray, list]],
                     ) -> tuple[float, float, float]:
    """AUROC of ``first`` minus the mean AUROC of ``rest``, each (predictions, draws) over the
    same items in the same order, with a jackknife-over-items t interval: the AUROCs share
    items (predictions or behaviour), so the item is the unit of the paired difference; for an
    AUROC, a U-statistic, the jackknife variance is DeLong's up to O(1/n). A percentile
    bootstrap covered 0.91 at 60 items; this one's coverage is a calibration test. NaN where
    any AUROC has one class."""
    est, loo = loo_auroc(*first)
    others = [loo_auroc(*r) for r in rest]
    if not others or not all(np.isfinite(a) for a, _ in others):
        return np.nan, np.nan, np.nan
    est -= float(np.mean([a for a, _ in others]))
    return jackknife_t(est, loo - np.mean([v for _, v in others], axis=0))


def _self_minus_other(own: pd.DataFrame, beh: dict[tuple[str, str], list], me: str,
                      other: str) -> tuple[tuple[float, float, float], int, str]:
    """AUROC of ``me``'s predictions against its own behaviour minus against ``other``'s, on the
    items both answered (``auroc_difference``: both AUROCs share the predictions). Returns
    (estimate, lo, hi), the number of items and why it is not judged ("" when it is): each
    behaviour needs ``MIN_CLASS`` items of each class there."""
    keys = [k for k in own["key"] if (me, k) in beh and (other, k) in beh]
    if not keys:
        return (np.nan, np.nan, np.nan), 0, f"{NOT_JUDGED}: no item both answered"
    why = [f"{m}: {c.note}" for m in (me, other) if not (c := Classes.of([beh[(m, k)] for k in keys])).judged]
    if why:
        return (np.nan, np.nan, np.nan), len(keys), "; ".join(why)
    p = own.set_index("key").loc[keys, "p"].to_numpy(float)
    draws = {m: [beh[(m, k)] for k in keys] for m in (me, other)}
    return auroc_difference((p, draws[me]), [(p, draws[other])]), len(keys), ""


def self_vs_other(df: pd.DataFrame) -> pd.DataFrame:
    """AUROC of model M's predictions against model N's behaviour on the items both saw, for
    every ordered pair (M, N) and task; ``self`` marks M == N. Rows ``self_minus_other`` give,
    per other model N, M's AUROC on its own behaviour minus on N's, on the items both answered,
    with a jackknife-over-items t interval; "not judged" (NaN, ``note``) below ``MIN_CLASS``
    items of a class in either behaviour. Never averaged over models: ``same_base`` marks an N
    of M's own base model (an adapter and its base), whose errors nearly coincide with M's, so
    that its difference is about 0 by construction. Rows ``spearman_graded`` rank-correlate M's
    predictions with N's graded behaviour (share of positive draws; 1 − P(correct) in the
    game), with Spearman's p. The behaviour-fixed reading is ``crosspredict.cross_prediction``."""
    rows: list[dict] = []

    def out(task: str, mp: str, mb: str, metric: str, est: tuple, n: int, p: float = np.nan, note: str = "") -> None:
        rows.append({"task": task, "predictor": mp, "behaviour": mb, "self": mp == mb and metric != "self_minus_other",
                     "metric": metric, "value": est[0], "lo": est[1], "hi": est[2], "n": n, "p": p,
                     "same_base": base_of(mp) == base_of(mb), "note": note})

    for task, s in _by_task(_item_source(df)):
        if task not in ("delegate", "seb-association", "seb-restriction", "seb-difficulty"):
            continue
        pred, beh = _predictions(task, s), _behaviour(task, s)
        graded = _graded(task, s, beh)
        models = sorted(set(pred["model_id"]) | {m for m, _ in beh})
        for mp in models:
            own = pred[pred["model_id"] == mp]
            aucs = {}
            for mb in models:
                keys = [k for k in own["key"] if (mb, k) in beh]
                sub = own.set_index("key").loc[keys] if keys else own.iloc[:0].set_index("key")
                est, n_rows = clustered_auroc(sub["p"].to_numpy(float), [beh[(mb, k)] for k in keys], keys)
                aucs[mb] = est[0]
                out(task, mp, mb, "auroc", est, n_rows)
                gk = [k for k in own["key"] if (mb, k) in graded]
                if len(gk) > 2:
                    pv = own.set_index("key").loc[gk, "p"].to_numpy(float)
                    gv = np.array([graded[(mb, k)] for k in gk])
                    rho, pval = spearmanr(pv, gv) if np.ptp(pv) > 0 and np.ptp(gv) > 0 else (np.nan, np.nan)
                    out(task, mp, mb, "spearman_graded", (float(rho), np.nan, np.nan), len(gk), float(pval))
            if not np.isfinite(aucs.get(mp, np.nan)):
                continue
            for mb in (m for m, v in aucs.items() if m != mp and np.isfinite(v)):
                est, n_items, note = _self_minus_other(own, beh, mp, mb)
                out(task, mp, mb, "self_minus_other", est, n_items, note=note)
    return pd.DataFrame(rows, columns=SVO_COLUMNS)
