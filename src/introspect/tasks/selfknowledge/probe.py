"""White-box Delegate Game: a probe for "I will get this wrong", read in the game and steered.

What no API-based paper could do (003 could only read output log-probabilities): (1) fit a
linear probe on the residual stream at the baseline question (last token, after "Answer:")
that predicts the model's own baseline error, cross-validated; (2) ask whether the same
direction, read at the game prompt, predicts delegation (P(T)); (3) test it causally: add
α·direction from the game question onwards (the injection API) and measure the change in P(T),
beside a norm-matched random direction. The probe is the difference of class means (mass-mean
probe, unit length, pointing towards "wrong"), fitted on pool questions that are not game
questions; α is in units of the SD of the baseline projections (``alpha_effective`` in the
record is the raw multiplier).

One trial = one game question at one (direction, α); α = 0 is the unsteered reading.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from introspect.data import MCQuestion
from introspect.engine.run.chat import Conversation
from introspect.engine.run.decode import generate
from introspect.engine.run.inject import From, InjectionSpec
from introspect.engine.vectors import residuals
from introspect.records.jsonl import Record
from introspect.stats.auroc import auroc_ci, auroc_point
from introspect.stats.items import grouped_folds
from introspect.tasks.base import ConfigError, RunContext, TaskSpec, Trial, register
from introspect.tasks.selfknowledge import delegate as D
from introspect.tasks.selfknowledge.common import (
    PREFILL,
    _opt,
    decide,
    fmt_variant,
    letter_ids,
    prompt_format,
    rendered,
    user,
)


@dataclass(frozen=True)
class Probe:
    """A unit direction towards "wrong" at ``layer``, its centre, the SD of the projections of
    the training rows, and the held-out AUROC of those projections for own error."""

    layer: int
    direction: Float[Tensor, " d_model"]
    centre: Float[Tensor, " d_model"]
    sd: float
    cv_auroc: float
    n: int
    n_wrong: int

    def score(self, X: Float[Tensor, "n d_model"]) -> Float[Tensor, " n"]:
        return (X - self.centre) @ self.direction


def mass_mean(X: Float[Tensor, "n d"], wrong: Sequence[bool]) -> Float[Tensor, " d"]:
    """Unit vector from the mean of the right rows to the mean of the wrong rows."""
    w = torch.as_tensor(list(wrong), dtype=torch.bool)
    v = X[w].mean(0) - X[~w].mean(0)
    return v / v.norm().clamp_min(1e-12)


def fit_probe(X: Float[Tensor, "n d"], wrong: Sequence[bool], layer: int, folds: int = 5) -> Probe:
    """The mass-mean probe on all rows, and its AUROC on held-out folds (each fold scored by a
    direction fitted without it)."""
    w = np.asarray(wrong, bool)
    if w.all() or not w.any():
        raise ConfigError(f"the probe needs both right and wrong baseline answers; got {int(w.sum())} "
                          f"wrong of {w.size} (use more questions or harder ones: --option pool=...)")
    held = np.full(w.size, np.nan)
    for test in grouped_folds(np.arange(w.size), folds):
        train = np.setdiff1d(np.arange(w.size), test)
        if w[train].all() or not w[train].any():
            continue
        d = mass_mean(X[train], w[train])
        held[test] = ((X[test] - X[train].mean(0)) @ d).numpy()
    ok = np.isfinite(held)
    direction = mass_mean(X, w)
    centre = X.mean(0)
    proj = (X - centre) @ direction
    return Probe(layer, direction, centre, float(proj.std()), auroc_point(held[ok], w[ok]) if ok.any() else math.nan,
                 int(w.size), int(w.sum()))


def _layer(ctx: RunContext) -> int:
    n = int(ctx.model.cfg.n_layers)
    layer = int(_opt(ctx, "layer", n // 2))
    if not 0 <= layer < n:
        raise ConfigError(f"option layer={layer} out of range; this model has layers 0..{n - 1}")
    return layer


def _steer(ctx: RunContext) -> tuple[float, ...]:
    v = _opt(ctx, "steer", (-32.0, -8.0, 8.0, 32.0))
    out = tuple(float(a) for a in (v if isinstance(v, (list, tuple)) else [v]))
    if not all(math.isfinite(a) for a in out):
        raise ConfigError(f"option steer must be finite numbers (probe SDs), got {v}")
    return out


_PROBES: dict[tuple, Probe] = {}


def probe_for(ctx: RunContext) -> Probe:
    """The probe for this model and settings, fitted on pool questions that are not game
    questions (cached: plan and execute must agree)."""
    key = (ctx.fingerprint, ctx.cfg.seed, json.dumps(dict(ctx.cfg.options), sort_keys=True, default=str))
    if key not in _PROBES:
        _, pool = D._pool(ctx)
        _, _, game, _ = D.selection(ctx)
        gid = {q.id for q in game}
        train = [q for q in pool if q.id not in gid and isinstance(q, MCQuestion)]
        base = D.baseline(ctx, train)
        prompts = rendered(ctx, [user(D.BASELINE_MC.format(q=q.format()), prefill=PREFILL) for q in train],
                           "delegate-mc")
        X = torch.stack([r[0, 0] for r in residuals(ctx.model, prompts, [_layer(ctx)], batch_size=ctx.cfg.batch_size)])
        _PROBES[key] = fit_probe(X, [not base[q.id]["correct"] for q in train], _layer(ctx))
    return _PROBES[key]


def random_direction(d_model: int, seed: int) -> Float[Tensor, " d_model"]:
    v = torch.randn(d_model, generator=torch.Generator().manual_seed(seed))
    return v / v.norm()


def plan(ctx: RunContext) -> list[Trial]:
    stem, hist, game, _ = D.selection(ctx)
    acc = D._accuracies(ctx)[0]
    layer, alphas = _layer(ctx), _steer(ctx)
    cells = [("clean", 0.0)] + [(c, a) for c in ("injected", "random") for a in alphas]
    return [Trial("delegate-probe", cond, index=i, layer=layer, alpha=a, variant=f"{fmt_variant(ctx, stem)}:teammate={acc:g}",
                  params=(("qid", q.id), ("teammate_accuracy", acc)))
            for cond, a in cells for i, q in enumerate(game) if isinstance(q, MCQuestion)]


def execute(ctx: RunContext, trials: Sequence[Trial]) -> Iterator[Record]:
    trials = list(trials)
    if not trials:
        return
    probe = probe_for(ctx)
    _, hist, game, base = D.selection(ctx)
    by_id = {q.id: q for q in game}
    acc = float(trials[0].param("teammate_accuracy"))
    turns = D.phase1(hist, D.teammate_history(len(hist), acc, ctx.cfg.seed), False)
    qids = list(dict.fromkeys(t.param("qid") for t in trials))
    convs = {q: _marked(D.game_conversation(turns, by_id[q]), by_id[q]) for q in qids}
    prompts = dict(zip(convs, rendered(ctx, list(convs.values()), "game-mc")))
    rand = random_direction(int(ctx.model.cfg.d_model), ctx.cfg.seed)
    specs = []
    for t in trials:
        if t.condition == "clean":
            specs.append(None)
            continue
        vec = probe.direction if t.condition == "injected" else rand
        specs.append(InjectionSpec(probe.layer, float(t.alpha) * probe.sd, vec,
                                   From(prompts[t.param("qid")].spans["game"][0])))
    plist = [prompts[t.param("qid")] for t in trials]
    gens = generate(ctx.model, plist, specs, max_new_tokens=1, batch_size=ctx.cfg.batch_size)
    ids = letter_ids(ctx.model.tokenizer, "ABCDT")
    clean_q = [q for q in qids if any(t.param("qid") == q and t.condition == "clean" for t in trials)]
    proj: dict[str, float] = {}
    if clean_q:
        R = residuals(ctx.model, [prompts[q] for q in clean_q], [probe.layer], batch_size=ctx.cfg.batch_size)
        proj = dict(zip(clean_q, probe.score(torch.stack([r[0, 0] for r in R])).tolist()))
    for t, p, g, s in zip(trials, plist, gens, specs):
        d = decide(g.first_logprobs, ids)
        q = by_id[t.param("qid")]
        grade = {"qid": q.id, "p_delegate": d.p("T") if d else None, "game_mass": d.mass if d else None,
                 "game_low_mass": bool(d and d.low_mass), "delegated": bool(d and d.choice == "T"),
                 "baseline_correct": base[q.id]["correct"], "baseline_p_correct": base[q.id]["p_correct"],
                 "game_projection": proj.get(q.id), "direction": {"clean": "none", "injected": "probe"}.get(
                     t.condition, "random"), "steer_sd": float(t.alpha), "probe_layer": probe.layer,
                 "probe_cv_auroc": probe.cv_auroc, "probe_n": probe.n, "probe_n_wrong": probe.n_wrong,
                 "probe_sd": probe.sd, "parse_ok": d is not None}
        yield ctx.record(t, prompt=p.text, response=g.text, grade=grade, injected=s is not None,
                         gen={"format": prompt_format(ctx), **ctx.decode_batch(g)},
                         alpha_effective=float(t.alpha) * probe.sd, alpha_units="probe_sd",
                         token_positions=f"from:{p.spans['game'][0]}" if s is not None else None)


def _marked(conv: Conversation, q: MCQuestion) -> Conversation:
    return Conversation(conv.messages, conv.prefill, {"game": "Game question:\n" + q.format()})


def summarize_probe(df: Any) -> Any:
    """Probe held-out AUROC; game projection vs baseline error and vs P(T); ΔP(T) per α
    (paired by question against α = 0) for the probe and the random direction."""
    import pandas as pd

    from introspect.stats.items import boot_mean
    from introspect.tasks.selfknowledge.rows import b, frame, g, groups, num, row, value

    rows: list[dict] = []
    for keys, s in groups(df, ("model_id", "task")):
        keys = {**keys, "variant": str(s["variant"].iloc[0])}
        rows.append(value(keys, "probe_cv_auroc", float(num(s, "probe_cv_auroc")[0]), int(num(s, "probe_n")[0])))
        c = s[s["condition"] == "clean"]
        pj, err, pt = num(c, "game_projection"), ~b(c, "baseline_correct"), num(c, "p_delegate")
        ok = np.isfinite(pj)
        if ok.any():
            rows.append(row(keys, "game_projection_auroc[error]", auroc_ci(pj[ok], err[ok]), int(ok.sum())))
            from scipy.stats import spearmanr

            rho = spearmanr(pj[ok], pt[ok]) if ok.sum() > 2 else (math.nan, math.nan)
            rows.append(value(keys, "game_projection_spearman[p_delegate]", float(rho[0]), int(ok.sum())))
            rows.append(value(keys, "game_projection_spearman_p", float(rho[1]), int(ok.sum())))
        p0 = dict(zip(g(c, "qid"), num(c, "p_delegate")))
        rows.append(row(keys, "game_mass[none,0sd]", boot_mean(num(c, "game_mass")), len(c)))
        st = s[s["condition"] != "clean"]
        for (direction, a), sub in st.groupby([g(st, "direction"), num(st, "steer_sd")], sort=True):
            d = np.array([v - p0[q] for q, v in zip(g(sub, "qid"), num(sub, "p_delegate")) if q in p0])
            cond = "injected" if direction == "probe" else "random"
            rows.append(row(keys, f"delta_p_delegate[{direction},{a:g}sd]", boot_mean(d), d.size, cond))
            # a rise in renormalised P(T) while the mass on A-D/T collapses is disruption, not a decision
            rows.append(row(keys, f"game_mass[{direction},{a:g}sd]", boot_mean(num(sub, "game_mass")), len(sub), cond))
            rows.append(row(keys, f"low_mass_rate[{direction},{a:g}sd]", boot_mean(b(sub, "game_low_mass")),
                            len(sub), cond))
    return frame(rows) if rows else pd.DataFrame()


register(TaskSpec("delegate-probe", "White-box Delegate Game: residual probe for own error, its "
                  "reading in the game, and P(T) steered along it (vs a random direction)",
                  plan, execute, uses_injection=False))
