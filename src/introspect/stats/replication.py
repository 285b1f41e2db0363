"""A training recipe across independent trainings: the training, not the concept, is the unit.

Why a module of its own: each adapter's interval (concepts as the unit) says whether *that*
adapter does something; whether the *recipe* does is a question about trainings, which differ in
seed, held-out words and weights. The positive control's recipes work on some trainings and not
on others (two-turn detection measurably the adapter's own on one rank-32 seed of three), and a
Student-t interval on the mean of so few, so bimodal estimates does not earn its 95%: measured
(``simulate_coverage``), three trainings of a recipe that works one time in three at +0.30
(within-training SD 0.03) cover the recipe's mean 72% of the time, eight trainings of one that
works one time in ten 71%. What does earn it, whatever the estimates' shape, is the replication
rate: how many of k independent trainings clear the bar, with the exact (Clopper–Pearson)
interval of the chance that a training does. The trainings' mean effect is shown beside it
without an interval, and the row says why.

Trainings with the same seed share their data order, initial weights and held-out words: they
differ only in kernel noise, so they are not independent draws of the recipe and are not counted
twice (``replication`` refuses them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as _st

LEVEL = 0.95
MEAN_NOTE = ("mean of the trainings' estimates, no interval: a recipe that works on some trainings "
             "and not on others gives bimodal estimates, on which a t interval over few trainings "
             "covers far less than 95% (stats.replication)")


@dataclass(frozen=True)
class Replication:
    """How often independent trainings of one recipe clear a bar: ``k`` trainings (one per seed),
    ``m`` of them clearing it, the exact interval ``lo``/``hi`` of the chance that a training
    does, and ``mean`` of their estimates (no interval: ``MEAN_NOTE``)."""

    k: int
    m: int
    lo: float
    hi: float
    mean: float
    seeds: tuple[int, ...]

    @property
    def rate(self) -> float:
        return self.m / self.k


def clopper_pearson(m: int, k: int, level: float = LEVEL) -> tuple[float, float]:
    """The exact binomial interval of m successes in k trials (scipy's ``binomtest``)."""
    ci = _st.binomtest(m, k).proportion_ci(confidence_level=level, method="exact")
    return float(ci.low), float(ci.high)


def replication(estimates: Sequence[float], cleared: Sequence[bool], seeds: Sequence[int],
                level: float = LEVEL) -> Replication:
    """The replication of one recipe over trainings given as parallel sequences: each training's
    estimate, whether it cleared the bar (e.g. its own interval above 0), and its seed. Two
    trainings with one seed are refused (ValueError naming the seed)."""
    if not (len(estimates) == len(cleared) == len(seeds)):
        raise ValueError(f"{len(estimates)} estimates, {len(cleared)} outcomes and {len(seeds)} seeds: give one of each per training")
    if not estimates:
        raise ValueError("no trainings to pool: give at least two adapters of one recipe")
    dup = sorted({s for s in seeds if list(seeds).count(s) > 1})
    if dup:
        raise ValueError(f"trainings share seed {dup[0]} (same data order, initial weights and held-out words: "
                         "not independent); give one adapter per seed")
    k, m = len(estimates), int(sum(bool(c) for c in cleared))
    lo, hi = clopper_pearson(m, k, level)
    return Replication(k, m, lo, hi, float(np.mean(np.asarray(estimates, dtype=float))), tuple(int(s) for s in seeds))


def t_interval(x: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    """Student-t interval of the mean of each row of ``x`` (trainings along the last axis)."""
    k = x.shape[-1]
    h = _st.t.ppf(0.5 + level / 2, k - 1) * x.std(-1, ddof=1) / math.sqrt(k)
    return x.mean(-1) - h, x.mean(-1) + h


def simulate_coverage(k: int, works: float, effect: float, within_sd: float, runs: int = 20000,
                      seed: int = 0) -> dict[str, float]:
    """Coverage of the two readings for a recipe that works on a share ``works`` of trainings:
    a working training's true effect is ``effect``, a failing one's 0, each estimated with
    normal error ``within_sd``; a training clears the bar when its estimate is above
    1.96 × ``within_sd``. Returns the t interval's coverage of the recipe's mean and the
    Clopper–Pearson interval's coverage of the chance that a training clears the bar."""
    rng = np.random.default_rng(seed)
    true = effect * (rng.random((runs, k)) < works)
    est = true + rng.normal(0.0, within_sd, (runs, k))
    lo, hi = t_interval(est)
    mu = works * effect
    z = 1.96
    p_clear = works * _st.norm.sf(z - effect / within_sd) + (1 - works) * _st.norm.sf(z)
    m = (est > z * within_sd).sum(-1)
    bounds = np.array([clopper_pearson(j, k) for j in range(k + 1)])
    covered = (bounds[m, 0] <= p_clear) & (p_clear <= bounds[m, 1])
    return {"t_mean": float(np.mean((lo <= mu) & (mu <= hi))), "clopper_pearson_rate": float(covered.mean())}
