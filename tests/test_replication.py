"""A recipe across trainings (stats.replication, vs_base.across_trainings, provenance.recipe):
the training is the unit, the replication rate's interval earns its 95%, a shared seed is refused."""

from __future__ import annotations

import math

import pytest
from scipy import stats as st

from introspect.stats import replication as RP
from introspect.tasks.injection.across import across_trainings, cleared, verdicts_across
from introspect.train.provenance import recipe


def test_replication_counts_and_exact_interval():
    rep = RP.replication([0.12, -0.01, -0.01], [True, False, False], [0, 1, 2])
    assert (rep.k, rep.m, rep.seeds) == (3, 1, (0, 1, 2))
    assert rep.rate == pytest.approx(1 / 3) and rep.mean == pytest.approx(0.1 / 3)
    # Clopper–Pearson by its definition: the beta quantiles
    assert rep.lo == pytest.approx(st.beta.ppf(0.025, 1, 3)) and rep.hi == pytest.approx(st.beta.ppf(0.975, 2, 2))
    none = RP.replication([0.0, 0.0], [False, False], [3, 4])
    assert none.lo == 0.0 and none.hi == pytest.approx(1 - 0.025 ** 0.5)


@pytest.mark.parametrize("bad, match", [
    (([0.1, 0.2], [True, True], [1, 1]), "share seed 1"),
    (([0.1], [True, False], [1, 2]), "one of each per training"),
    (([], [], []), "at least two adapters"),
])
def test_replication_refuses(bad, match):
    with pytest.raises(ValueError, match=match):
        RP.replication(*bad)


@pytest.mark.parametrize("k, works, effect, sd", [(3, 1 / 3, 0.30, 0.03), (8, 0.1, 0.30, 0.03),
                                                  (3, 1 / 3, 0.12, 0.05), (5, 0.0, 0.0, 0.05)])
def test_rate_interval_covers_where_a_t_interval_on_the_mean_does_not(k, works, effect, sd):
    """Bimodal recipes (works on some trainings, not on others): the exact interval of the
    chance that a training clears the bar covers it ≥ 95%, whatever the shape."""
    cov = RP.simulate_coverage(k, works, effect, sd, runs=4000)
    assert cov["clopper_pearson_rate"] >= 0.95


def test_t_interval_on_few_bimodal_trainings_undercovers():
    """Why the mean of the trainings carries no interval: measured, not assumed."""
    assert RP.simulate_coverage(3, 1 / 3, 0.30, 0.03, runs=4000)["t_mean"] < 0.80
    assert RP.simulate_coverage(8, 0.1, 0.30, 0.03, runs=4000)["t_mean"] < 0.80
    assert RP.simulate_coverage(3, 0.0, 0.0, 0.05, runs=4000)["t_mean"] == pytest.approx(0.95, abs=0.015)


def _meta(seed=0, **training):
    return {"base_fingerprint": "sha256:base", "word_files": {"words": "sha256:w"},
            "training": {"layer": 24, "rank": 8, "seed": seed, "checkpoint_every": 20, "gates": True, **training}}


def test_recipe_ignores_the_seed_and_nothing_else():
    r0, s0 = recipe(_meta(0))
    r1, s1 = recipe(_meta(1, checkpoint_every=5, gates=False))
    assert r0 == r1 and r0.startswith("recipe:") and (s0, s1) == (0, 1)
    assert recipe(_meta(0, rank=32))[0] != r0
    assert recipe({**_meta(0), "base_fingerprint": "sha256:other"})[0] != r0
    assert recipe({**_meta(0), "word_files": {"words": "sha256:v"}})[0] != r0
    with pytest.raises(ValueError, match="no training config"):
        recipe({"base_fingerprint": "x"})


def _row(adapted, value, lo, p, metric="net_vs_base", variant="two_turn"):
    return {"model_id": f"{adapted} − base", "task": "A", "variant": variant, "layer_idx": 24, "alpha": 0.625,
            "alpha_units": "resid", "metric": metric, "value": value, "lo": lo, "hi": value + 0.1, "p": p,
            "n_clusters": 64}


def test_cleared_needs_the_interval_and_the_test():
    assert cleared(_row("a", 0.12, 0.02, 0.03))
    assert not cleared(_row("a", 0.12, 0.004, 0.058))  # the interval clears 0, the test does not (p 0.058)
    assert not cleared(_row("a", 0.12, -0.01, 0.03))
    assert not cleared(_row("a", 0.12, math.nan, math.nan))  # too few concepts for an interval


def test_across_trainings_pools_one_recipe_per_seed():
    rows = [_row("base+lora-a", 0.12, 0.02, 0.03), _row("base+lora-b", -0.01, -0.11, 1.0),
            _row("base+lora-c", -0.01, -0.09, 1.0), _row("base+lora-d", 0.20, 0.10, 0.001),
            _row("base+lora-ax0.5", 0.05, -0.02, 0.2), _row("base+lora-bx0.5", 0.06, 0.01, 0.04),
            _row("base+lora-a", 0.10, 0.01, 0.04, metric="net_vs_random_vs_base"),
            _row("base+lora-a", 0.10, 0.01, 0.04, variant="seed")]  # one training only: not pooled
    trainings = {"base+lora-a": ("recipe:r", 0), "base+lora-b": ("recipe:r", 1), "base+lora-c": ("recipe:r", 2),
                 "base+lora-d": ("recipe:other", 0), "base+lora-ax0.5": ("recipe:r", 0),
                 "base+lora-bx0.5": ("recipe:r", 1)}
    out, skipped = across_trainings(rows, trainings)
    assert skipped == []
    assert len(out) == 2  # two_turn net at full scale (3 trainings), and at scale 0.5 (2); not d, not k = 1
    full = next(r for r in out if r["n_clusters"] == 3)
    assert full["metric"] == "net_vs_base_replication" and full["trainings_cleared"] == 1
    assert full["value"] == pytest.approx(1 / 3) and full["seeds"] == "0 1 2"
    assert full["mean_of_trainings"] == pytest.approx(0.1 / 3) and "no interval" in full["note"]
    assert (full["lo"], full["hi"]) == pytest.approx(RP.clopper_pearson(1, 3))
    half = next(r for r in out if r["n_clusters"] == 2)
    assert "x0.5" in half["model_id"] and half["trainings_cleared"] == 1


def test_across_trainings_names_a_shared_seed_and_does_not_pool_it():
    rows = [_row("base+lora-a", 0.12, 0.02, 0.03), _row("base+lora-e", 0.10, 0.01, 0.04)]
    out, skipped = across_trainings(rows, {"base+lora-a": ("recipe:r", 1), "base+lora-e": ("recipe:r", 1)})
    assert out == [] and len(skipped) == 1
    assert "not pooled" in skipped[0] and "share seed 1" in skipped[0] and "two_turn" in skipped[0]


def test_verdicts_across_counts_the_top_label_per_recipe():
    import pandas as pd

    summary = pd.DataFrame([
        {"model_id": "base+lora-a", "task": "A", "variant": "all", "metric": "verdict", "value": 1.0},
        {"model_id": "base+lora-b", "task": "A", "variant": "all", "metric": "verdict", "value": 0.5},
        {"model_id": "base+lora-c", "task": "A", "variant": "all", "metric": "verdict", "value": 0.75},
        {"model_id": "base", "task": "A", "variant": "all", "metric": "verdict", "value": 0.0},  # not a training
        {"model_id": "base+lora-a", "task": "A", "variant": "two_turn", "metric": "net", "value": 0.2},
    ])
    trainings = {"base+lora-a": ("recipe:r", 0), "base+lora-b": ("recipe:r", 1), "base+lora-c": ("recipe:r", 2)}
    out, skipped = verdicts_across(summary, trainings)
    assert skipped == [] and len(out) == 1
    r = out[0]
    assert r["metric"] == "verdict_replication" and (r["n_clusters"], r["trainings_cleared"]) == (3, 1)
    assert "detected, not identified" not in r["note"][:60]  # "detected, not identified" is not the top label
    assert r["labels"] == ("seed 0: detected and identified; seed 1: reacts to any perturbation; "
                           "seed 2: detected, not identified")
    assert math.isnan(r["mean_of_trainings"])
    _, skipped = verdicts_across(summary, {**trainings, "base+lora-c": ("recipe:r", 1)})
    assert len(skipped) == 1 and "share seed 1" in skipped[0]
