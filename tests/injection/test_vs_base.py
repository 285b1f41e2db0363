"""An adapted model against its base model on the same words (``tasks.injection.vs_base``):
constructed records with known per-concept differences, the pairing by concept, and the
interval's coverage under a null with concept effects shared by both models."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from introspect.tasks.injection.vs_base import vs_base

A, B = "m+lora-abc", "m"
CELL = dict(layer_idx=24, alpha=0.625, alpha_units="resid")


def _rows(model: str, word: str, det: list[int], ctl: list[int], rnd: list[int], variant="two_turn",
          trial=0) -> list[dict]:
    """One concept's answers: per sample, the injected, matched control and Gaussian ablation."""
    base = dict(model_id=model, task="A", variant=variant, word=word, trial_index=trial)
    out = []
    for s, (d, c, r) in enumerate(zip(det, ctl, rnd)):
        out.append({**base, "condition": "control", "sample": s, "layer_idx": None, "alpha": 0.0,
                    "alpha_units": "resid", "grade.detected": bool(c)})
        out.append({**base, **CELL, "condition": "injected", "sample": s, "grade.detected": bool(d)})
        out.append({**base, **CELL, "condition": "random", "sample": s, "grade.detected": bool(r)})
    return out


def _frame(spec: dict[str, dict[str, tuple]]) -> pd.DataFrame:
    return pd.DataFrame([r for m, words in spec.items() for w, (d, c, r) in words.items()
                         for r in _rows(m, w, d, c, r)])


def _get(rows: list[dict], metric: str) -> dict:
    (r,) = [r for r in rows if r["metric"] == metric]
    return r


WORDS = [f"w{i}" for i in range(8)]


def test_known_differences_per_concept():
    """The base model says yes to half the injected answers of each concept (Net 0.5, its controls
    say no); the adapter to all of them: Net rises by 0.5 on every concept. Over the Gaussian: the
    base model says yes to the Gaussian push as often as to the concept (0), the adapter never does."""
    spec = {B: {w: ([1, 0], [0, 0], [1, 0]) for w in WORDS},
            A: {w: ([1, 1], [0, 0], [0, 0]) for w in WORDS}}
    rows = vs_base(_frame(spec), A, B)
    net, gauss = _get(rows, "net_vs_base"), _get(rows, "net_vs_random_vs_base")
    assert net["value"] == pytest.approx(0.5) and gauss["value"] == pytest.approx(1.0)
    assert net["n_clusters"] == 8 and net["model_id"] == f"{A} − {B}"
    assert (net["variant"], net["layer_idx"], net["alpha"]) == ("two_turn", 24, 0.625)
    assert net["p"] == pytest.approx(2 ** -7)  # every concept the same sign: the exact test's floor
    assert "_est" not in net


def test_a_base_model_that_reacts_as_much_is_no_difference():
    """Each model alone has Net > 0 (so each verdict could read "detected"), but the adapter adds
    nothing the base model does not already do: per concept ±0.5 in turn, mean 0, p 1."""
    spec = {m: {w: ([1, int((i + k) % 2)], [0, 0], [0, 0]) for i, w in enumerate(WORDS)}
            for k, m in enumerate((A, B))}
    net = _get(vs_base(_frame(spec), A, B), "net_vs_base")
    assert net["value"] == 0 and net["p"] == 1.0 and net["lo"] < 0 < net["hi"]


def test_mixed_signs_give_an_interval_across_zero_and_only_shared_concepts_count():
    spec = {B: {w: ([0, 0], [0, 0], [0, 0]) for w in WORDS + ["only_base"]},
            A: {w: ([1, 1] if i < 4 else [0, 0], [0, 0] if i < 4 else [1, 1], [0, 0])
                for i, w in enumerate(WORDS)}}
    spec[A]["only_adapter"] = ([1, 1], [0, 0], [0, 0])
    net = _get(vs_base(_frame(spec), A, B), "net_vs_base")
    assert net["n_clusters"] == 8  # the two unshared words are left out
    assert net["value"] == pytest.approx(0.0) and net["lo"] < 0 < net["hi"] and net["p"] == 1.0


def test_nothing_to_compare_gives_no_rows():
    spec = {A: {w: ([1, 1], [0, 0], [0, 0]) for w in WORDS}}
    assert vs_base(_frame(spec), A, B) == []
    assert vs_base(pd.DataFrame(), A, B) == []
    other = _frame({B: {w: ([1, 1], [0, 0], [0, 0]) for w in WORDS}}).assign(variant="seed")
    assert vs_base(pd.concat([_frame(spec), other]), A, B) == []  # different framings never pair


@pytest.mark.calibration
def test_the_interval_covers_the_true_difference_under_shared_concept_effects():
    """400 simulated pairs of runs, 24 concepts × 3 trials × 2 samples: each concept has a logit
    effect (SD 1) shared by both models' controls and injected answers, the adapter adds a fixed
    rise on the injected logit, and the printed interval must cover the true mean difference of
    the concept-level Nets in ≥ 93% of runs (95% minus 2.58 Monte-Carlo SEs)."""
    rng = np.random.default_rng(11)
    runs, g, trials, samples = 400, 24, 3, 2
    expit = lambda x: 1 / (1 + np.exp(-x))  # noqa: E731
    big = rng.normal(0, 1, 1_000_000) - 1.0
    for rise in (0.0, 1.0):
        truth = float(np.mean(expit(big + 1.0 + rise) - expit(big + 1.0)))  # over the concepts' population
        hits = 0
        for _ in range(runs):
            u = rng.normal(0, 1, g) - 1.0
            p_ctl, p_base, p_ad = expit(u), expit(u + 1.0), expit(u + 1.0 + rise)
            recs = []
            for m, p_inj in ((A, p_ad), (B, p_base)):
                for k, w in enumerate(f"c{i}" for i in range(g)):
                    for t in range(trials):
                        recs += _rows(m, w, list(rng.random(samples) < p_inj[k]),
                                      list(rng.random(samples) < p_ctl[k]), [0] * samples, trial=t)
            r = _get(vs_base(pd.DataFrame(recs), A, B), "net_vs_base")
            hits += r["lo"] <= truth <= r["hi"]
        assert hits / runs >= 0.93, (rise, hits / runs)


def test_latent_naming_beyond_steering_against_the_base_model():
    """Both models name the word after the neutral prefill (steering); only the adapter also does
    after the report on every concept, the base model on none: 1 − 0 per concept. Second samples
    carry the opposite reading and are ignored (one latent reading per trial)."""
    df = _frame({B: {w: ([1, 0], [0, 0], [0, 0]) for w in WORDS},
                 A: {w: ([1, 0], [0, 0], [0, 0]) for w in WORDS}})
    inj = df["condition"] == "injected"
    first = df["sample"] == 0
    df.loc[inj, "grade.latent_names_word_neutral"] = True
    df.loc[inj, "grade.latent_names_word"] = np.where(df.loc[inj, "model_id"] == A, first[inj], ~first[inj])
    row = _get(vs_base(df, A, B), "latent_beyond_steering_vs_base")
    assert row["value"] == pytest.approx(1.0) and row["n_clusters"] == 8
    df.loc[inj, "grade.latent_names_word"] = True  # both name it after the report too: no excess
    assert _get(vs_base(df, A, B), "latent_beyond_steering_vs_base")["value"] == pytest.approx(0.0)
    assert not [r for r in vs_base(df.drop(columns="grade.latent_names_word_neutral"), A, B)
                if r["metric"] == "latent_beyond_steering_vs_base"]
