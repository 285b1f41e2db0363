"""Synthetic task-A records with a known truth, to check the report's intervals and tests.

Why: an interval earns its 95% only if it covers the truth in 95% of repeated experiments, and
only synthetic data has a known truth. ``simulate`` writes records in the public layout (the
same fields the runner writes: one control per (concept, trial, sample) from the concept's own
stream, injected trials and ablations on that stream, bias questions in the same framing with
and without injection, their answers graded by content as a run grades them), drawn from a
hierarchical model:

- detection: logit P(yes-said) = a + u_c + e_t injected, b + w_c + e_t for the control, with
  concept effects u_c, w_c ~ N(0, σ²) (heterogeneity in the controls too) and fixed trial
  (prompt) effects e_t; the injected answer and its control share one uniform draw (the stream),
  so they agree more often than independent answers would;
- identification under the concept's vector vs under another concept's (``concept_random``), and
  the latent naming reading drawn the same way, once per trial (its samples share it);
- first-token P(yes): the control's log-odds depend on the prompt only (as on a real model: no
  injection, same prompt), the injected one adds δ_c ~ N(δ, τ²); each bias question q has its own
  log-odds β_q, and the injection adds γ_c ~ N(γ, τ²) there (a yes-bias).

``truth`` gives the population value of every headline quantity (Monte Carlo over concepts,
conditional on the design's prompts: the report generalises over concepts, not prompts). Every
concept's vector steers (steering rows for the cell), so the verdict's gates are reached and its
"detected" rate here can fail; ``report.labels`` checks each label against truths built for it.
``experiments.calibrate`` and ``tests/test_calibration.py`` run many experiments through
``report.load_results`` and ``report.summarize`` and count coverage and false positives.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from introspect.tasks.injection.verdict_a import DETECTED, HEADLINE


def expit(x: Any) -> Any:
    return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=float)))


@dataclass(frozen=True)
class Scenario:
    """A hierarchical truth for synthetic task-A records (see the module docstring)."""

    name: str = "positive"
    a: float = -0.85  # detection log-odds, injected (TPR ≈ 0.32 at σ = 0.8)
    b: float = -2.2  # detection log-odds, control (FPR ≈ 0.12)
    sigma: float = 0.8  # concept heterogeneity of both, log-odds SD
    ablation: float = -2.2  # detection log-odds under the Gaussian / other-concept / −v ablations
    ident: float = -1.2  # identification log-odds under the concept's own vector
    ident_random: float = -3.0  # ... under another concept's vector (naming the word by chance)
    l0: float = -1.0  # control log-odds of P(yes) on the detection question
    delta: float = 0.6  # mean Δlogit P(yes) on the detection question under injection
    gamma: float = 0.2  # mean Δlogit P(yes) on the bias questions under injection (yes-bias)
    tau: float = 0.5  # concept heterogeneity of δ and γ
    noise: float = 0.2  # trial- and question-level noise of the injected log-odds
    shared_effect: bool = False  # control and injected answers share one concept effect (w_c = u_c)
    own_streams: bool = False  # the control draws its answer from a stream of its own

    def null(self) -> Scenario:
        """The same world with no effect: injected = control everywhere, a pure yes-bias on both
        questions alike (δ = γ), identification at its by-chance rate."""
        return replace(self, name="null", a=self.b, ablation=self.b, ident=self.ident_random,
                       delta=self.gamma)


def _trial_effect(t: int, n_trials: int) -> float:
    return 0.3 * (t - (n_trials - 1) / 2)  # fixed prompts: part of the design, not random


def _bias_logits(n_bias: int) -> np.ndarray:
    return np.linspace(-4.0, -2.0, n_bias)  # questions whose answer is "no"


@lru_cache(maxsize=64)
def _truth(s: Scenario, n_trials: int, n_bias: int, draws: int = 400_000) -> dict[str, float]:
    rng = np.random.default_rng(12345)
    e = np.array([_trial_effect(t, n_trials) for t in range(n_trials)])
    u, w = rng.normal(0, s.sigma, (2, draws, 1))
    v, vr = rng.normal(0, s.sigma, (2, draws))
    d = rng.normal(s.delta, s.tau, (draws, 1)) + rng.normal(0, s.noise, (draws, n_trials))
    tpr, fpr = expit(s.a + u + e).mean(), expit(s.b + w + e).mean()
    l_ctl = s.l0 + e
    return {
        "tpr": float(tpr), "fpr": float(fpr), "net": float(tpr - fpr),
        "identification": float(expit(s.ident + v).mean()),
        "identification_vs_random": float(expit(s.ident + v).mean() - expit(s.ident_random + vr).mean()),
        "follows_vector": float(expit(s.ident + v).mean() - expit(s.ident_random + vr).mean()),
        # latent naming (one reading per trial, shared by its samples) is drawn like the naming
        "latent_identification_vs_random": float(expit(s.ident + v).mean() - expit(s.ident_random + vr).mean()),
        "latent_follows_vector": float(expit(s.ident + v).mean() - expit(s.ident_random + vr).mean()),
        "p_yes_shift": float((expit(l_ctl + d) - expit(l_ctl)).mean()),
        "introspection_score": float(s.delta - s.gamma),
    }


def truth(s: Scenario, n_trials: int = 1, n_bias: int = 5) -> dict[str, float]:
    """Population values of the headline quantities (see the module docstring)."""
    return dict(_truth(s, n_trials, n_bias))


def simulate(s: Scenario, n_concepts: int, n_trials: int, n_samples: int, seed: int,
             model_id: str = "synthetic", n_bias: int = 5, cell: tuple[int, float] = (8, 4.0),
             variant: str = "paper") -> list[dict[str, Any]]:
    """One synthetic experiment's trial records (task A, one framing and cell), as dicts."""
    rng = np.random.default_rng(seed)
    layer, alpha = cell
    recs: list[dict[str, Any]] = []

    def rec(condition: str, word: str, t: int, k: int, injected: bool, detected: bool, p_yes: float,
            identified: bool = False, **kw: Any) -> dict[str, Any]:
        base = dict(seed=0, model_id=model_id, task="A", condition=condition,
                    layer_idx=layer if injected else None, alpha=alpha if injected else 0.0,
                    alpha_units="raw", word=word, injected=injected, variant=variant,
                    trial_index=t, sample=k, response=f"{condition}:{word}:{t}:{k}:{int(detected)}",
                    p_yes=float(p_yes), p_no=float(1 - p_yes), type="trial",
                    trial_id=f"{model_id}:{condition}:{word}:{t}:{k}:{kw.get('extra', {}).get('question', '')}",
                    grade={"detected": bool(detected), "identified": bool(identified),
                           "coherent": True, **kw.pop("grade", {})},
                    extra=kw.pop("extra", {}))
        base.update(kw)
        return base

    bias_l = _bias_logits(n_bias)
    answers = np.random.default_rng([seed, 1])  # the bias answers' own stream: the rest stays as it was
    follows = np.random.default_rng([seed, 2])  # naming the vector's word: a stream of its own too
    latent = np.random.default_rng([seed, 3])  # latent naming (latent_a): one reading per trial
    steer = np.random.default_rng([seed, 4])  # the steering check: every cell steers, so the verdict's gates are reached
    for c in range(n_concepts):
        word = f"concept{c:03d}"
        u, w, v, vr = rng.normal(0, s.sigma, 4)
        w = u if s.shared_effect else w
        delta_c, gamma_c = rng.normal(s.delta, s.tau), rng.normal(s.gamma, s.tau)
        for t in range(n_trials):
            e = _trial_effect(t, n_trials)
            l_ctl = s.l0 + e
            l_inj = l_ctl + delta_c + rng.normal(0, s.noise)
            py_c, py_i = float(expit(l_ctl)), float(expit(l_inj))
            lat_own, lat_chance, lat_vec = latent.random(3) < expit([s.ident + v, s.ident_random + vr, s.ident + v])
            p_i, p_c, p_abl = expit(s.a + u + e), expit(s.b + w + e), expit(s.ablation + w + e)
            for k in range(n_samples):
                stream = rng.random()  # the answer's RNG stream: shared by the concept's conditions
                id_draw = rng.random()
                own = rng.random() if s.own_streams else stream  # drawn only when asked: other scenarios keep their draws
                recs.append(rec("control", word, t, k, False, own < p_c, py_c))
                recs.append(rec("injected", word, t, k, True, stream < p_i, py_i,
                                id_draw < expit(s.ident + v), grade={"latent_names_word": bool(lat_own)}))
                for abl in ("random", "concept_random", "negative"):
                    named = id_draw < expit(s.ident_random + vr) if abl == "concept_random" else False
                    extra = {}
                    if abl == "concept_random":  # an identifier names the word of the vector it got
                        extra = {"grade": {"names_vector_word": bool(follows.random() < expit(s.ident + v)),
                                           "latent_names_word": bool(lat_chance),
                                           "latent_names_vector_word": bool(lat_vec)},
                                 "extra": {"vector_word": f"concept{(c + 1) % n_concepts:03d}"}}
                    recs.append(rec(abl, word, t, k, True, stream < p_abl, py_c, named, **extra))
        for k in range(n_samples):  # the steering check (``metrics_steer``): the word gains ~2 nats over random
            for cond, lp in (("steer_control", -10.0), ("steer", -8.0 + steer.normal(0, 1)),
                             ("steer_random", -10.0 + steer.normal(0, 1))):
                recs.append(rec(cond, word, 0, k, cond != "steer_control", False, 0.5, variant="steer",
                                grade={"lp_word": float(lp), "mentions": False}))
        for q in range(n_bias):
            question = f"bias question {q}"
            lb = bias_l[q] + _trial_effect(0, n_trials)
            for injected in (False, True):
                lq = lb + (gamma_c + rng.normal(0, s.noise) if injected else 0.0)
                py = float(expit(lq))
                said = bool(answers.random() < py)  # a "yes" to a false statement: a wrong answer
                recs.append(rec("bias" if injected else "bias_control", word, 0, 0, injected,
                                False, py, extra={"question": question, "correct": "no"},
                                grade={"said_yes": said, "wrong": said, "reports_detection": False,
                                       "bias_answer": "affirms_false" if said else "correct"}))
    return recs


def write(records: list[dict[str, Any]], path: Path) -> Path:
    """Append records to a JSONL file (a header line first, as a run writes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"type": "header", "run_id": "synthetic", "model_id": records[0]["model_id"],
                             "fingerprint": "synthetic", "seed": 0}) + "\n")
        for r in records:
            fh.write(json.dumps(r) + "\n")
    return path


def scenario_dict(s: Scenario) -> dict[str, Any]:
    return {k: (round(v, 4) if isinstance(v, float) and not math.isnan(v) else v)
            for k, v in asdict(s).items()}


# ---------------------------------------------------------------- coverage through the report

METRICS = ("tpr", "fpr", "net", "identification", "identification_vs_random", "follows_vector",
           "latent_identification_vs_random", "latent_follows_vector", "p_yes_shift", "introspection_score")


def _percentile_widths(df: Any) -> dict[str, list[float]]:
    """Widths of the percentile cluster bootstrap the report used before (for comparison)."""
    from introspect.stats.intervals import cluster_mean
    from introspect.tasks.tidy import col, flag, pair

    out: dict[str, list[float]] = {"tpr": [], "fpr": [], "net": []}
    for _, sub in df.groupby("model_id"):
        inj, ctl = sub[sub["condition"] == "injected"], sub[sub["condition"] == "control"]
        p = pair(inj, ctl)
        lab = p["concept"].to_numpy()
        det, det_c = flag(col(p, "grade.detected")), flag(col(p, "grade.detected~c"))
        for name, x in (("tpr", det), ("fpr", det_c), ("net", det - det_c)):
            _, lo, hi = cluster_mean(x, lab, n_boot=500)
            out[name].append(hi - lo)
    return out


def coverage(s: Scenario, n_concepts: int, n_trials: int, n_samples: int, runs: int,
             seed: int = 0, batch: int = 50, workdir: Path | None = None,
             compare_bootstrap: bool = False) -> dict[str, Any]:
    """Run ``runs`` synthetic experiments through ``load_results`` and ``summarize`` and count,
    per headline metric, how often its printed interval covers the truth (and its mean width);
    for the whole report, how often any headline test is called significant after Holm and how
    often the verdict says "detected"."""
    import tempfile

    from introspect.report import load_results, summarize

    tr = truth(s, n_trials)
    hits = {m: [] for m in METRICS}
    widths = {m: [] for m in METRICS}
    printed = {m: 0 for m in METRICS}
    any_sig, detected, net_rejects = [], [], []
    boot: dict[str, list[float]] = {"tpr": [], "fpr": [], "net": []}
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        for lo in range(0, runs, batch):
            d = Path(tmp) / f"b{lo}"
            recs = []
            for r in range(lo, min(runs, lo + batch)):
                recs += simulate(s, n_concepts, n_trials, n_samples, seed=seed * 1_000_003 + r,
                                 model_id=f"run{r:05d}")
            write(recs, d / "A.jsonl")
            df = load_results(d)
            tab = summarize(df)
            if compare_bootstrap:
                for k, v in _percentile_widths(df).items():
                    boot[k] += v
            for _, t in tab.groupby("model_id"):
                by = {m: t[(t["metric"] == m) & (t["variant"] == "paper")] for m in METRICS}
                for m, rows in by.items():
                    if rows.empty:
                        continue
                    r = rows.iloc[0]
                    if np.isnan(r["lo"]):
                        continue
                    printed[m] += 1
                    hits[m].append(bool(r["lo"] <= tr[m] <= r["hi"]))
                    widths[m].append(float(r["hi"] - r["lo"]))
                net = by["net"]
                if not net.empty:
                    net_rejects.append(bool(net.iloc[0]["p"] < 0.05))  # the sign-flip test, unadjusted
                head = t[t["metric"].isin(HEADLINE)]
                any_sig.append(bool((head["p_holm"] < 0.05).any()))
                v = t[t["metric"] == "verdict"]
                detected.append(bool(len(v) and v.iloc[0]["value"] >= DETECTED))  # either kind of "detected"
    out: dict[str, Any] = {"scenario": s.name, "concepts": n_concepts, "trials": n_trials,
                           "samples": n_samples, "runs": runs, "truth": tr}
    for m in METRICS:
        out[m] = {"coverage": float(np.mean(hits[m])) if hits[m] else math.nan,
                  "printed": printed[m], "mean_width": float(np.mean(widths[m])) if widths[m] else math.nan}
        if compare_bootstrap and m in boot and boot[m]:
            out[m]["percentile_bootstrap_width"] = float(np.mean(boot[m]))
    out["any_headline_significant"] = float(np.mean(any_sig))
    out["verdict_detected"] = float(np.mean(detected))
    out["net_sign_flip_rejects"] = float(np.mean(net_rejects)) if net_rejects else math.nan
    return out


# ---------------------------------------------------------------- the issue-17 grid

GRID = [(g, t) for g in (5, 10, 20, 50) for t in (1, 3)]
NULL_GRID = [(g, 1) for g in (6, 10, 20)]
# A null whose control and injected answers share each concept's effect (logit SD 1) and draw
# their answers independently, at 24 concepts × 3 trials × 2 samples: the shape where Newcombe's
# interval alone excluded 0 about twice as often as the sign-flip test rejected.
SHARED_NULL = ("null-shared", 24, 3, 2)
SCENARIOS = {"positive": Scenario(), "null": Scenario().null(),
             "null-shared": replace(Scenario(sigma=1.0, shared_effect=True, own_streams=True).null(), name="null-shared")}


def run_setting(job: tuple[str, int, int, int, int, int]) -> dict:
    """``coverage`` of one (scenario name, concepts, trials, samples, runs, seed) tuple."""
    name, g, t, k, runs, seed = job
    return coverage(SCENARIOS[name], g, t, k, runs, seed=seed, compare_bootstrap=name == "positive")


def _mc(p: float, n: int) -> float:
    return math.sqrt(max(p * (1 - p), 1e-12) / max(n, 1))


def table(results: list[dict]) -> str:
    """The printed table: one line per (scenario, concepts, trials)."""
    lines = []
    for r in results:
        head = f"{r['scenario']:8s} G={r['concepts']:<3d} T={r['trials']} K={r['samples']} runs={r['runs']}"
        if r["scenario"] == "positive":
            cells = []
            for m in METRICS:
                c = r[m]
                boot = c.get("percentile_bootstrap_width")
                cells.append(f"{m} {c['coverage']:.3f} (w {c['mean_width']:.3f}"
                             + (f" vs {boot:.3f}" if boot else "") + ")")
            lines.append(head + " | " + "; ".join(cells))
        else:
            fp, n = r["any_headline_significant"], r["runs"]
            lines.append(f"{head} | any headline significant after Holm {fp:.3f} ± {_mc(fp, n):.3f} "
                         f"(MC SE); verdict detected {r['verdict_detected']:.3f}; Net sign-flip p < 0.05 "
                         f"{r['net_sign_flip_rejects']:.3f}; coverage net "
                         f"{r['net']['coverage']:.3f}, score {r['introspection_score']['coverage']:.3f}")
    return "\n".join(lines)


def markdown(results: list[dict]) -> str:
    """The README's table: coverage (mean width) per headline metric and setting; for the null
    scenario, the share of runs with a headline test significant after Holm."""
    names = ("TPR", "FPR", "Net", "identification", "ident. vs random", "follows vector", "latent vs random",
             "latent follows", "P(yes) shift", "intro. score")
    head = "| concepts × trials | " + " | ".join(names) + " | Net width, percentile bootstrap |"
    lines = [head, "|" + " --- |" * (len(names) + 2)]
    for r in (r for r in results if r["scenario"] == "positive"):
        cells = [f"{r[m]['coverage']:.3f} ({r[m]['mean_width']:.2f})" for m in METRICS]
        boot = r["net"].get("percentile_bootstrap_width", math.nan)
        lines.append(f"| {r['concepts']} × {r['trials']} | " + " | ".join(cells) + f" | {boot:.2f} |")
    out = "\n".join(lines)
    nulls = [r for r in results if r["scenario"] != "positive"]
    if nulls:
        out += "\n\n" + "; ".join(
            f"{r['scenario']}, {r['concepts']} concepts × {r['trials']} trials × {r['samples']} samples: "
            f"{r['any_headline_significant']:.3f} ± {_mc(r['any_headline_significant'], r['runs']):.3f}"
            f" (verdict \"detected\" {r['verdict_detected']:.3f}; Net's interval excludes 0 "
            f"{1 - r['net']['coverage']:.3f}, its sign-flip test rejects {r['net_sign_flip_rejects']:.3f})"
            for r in nulls)
    return out
