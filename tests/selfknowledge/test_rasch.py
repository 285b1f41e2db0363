"""Rasch abilities (002 App. A) and self-vs-other scoring from the records of several runs:
exact recovery on additive logits, agreement with 002's Algorithm 1, dropping of items that
carry no information, and the ``experiments.rasch`` CLI (tables, files, one-line errors)."""

from __future__ import annotations

import itertools
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from introspect.records import JsonlWriter, Record, make_header
from introspect.report.rasch import (
    RaschError,
    benchmark_items,
    correlations,
    fit_rasch,
    informative,
)
from introspect.tasks.selfknowledge.crossmodel import answered_items, self_vs_other

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from experiments import rasch as cli  # noqa: E402


def _sig(x):
    return 1 / (1 + np.exp(-x))


def test_exact_probabilities_recover_abilities():
    theta, delta = {"m1": 0.5, "m2": -0.5}, {"q1": 1.0, "q2": -1.0}  # Σδ = 0: the scale's origin
    items = pd.DataFrame([{"model_id": m, "item": q, "y": float(_sig(t - d))}
                          for m, t in theta.items() for q, d in delta.items()])
    ab, it = fit_rasch(items)
    assert ab.set_index("model_id")["ability"].to_dict() == pytest.approx(theta, abs=1e-5)
    assert it.set_index("item")["difficulty"].to_dict() == pytest.approx(delta, abs=1e-5)


def _algorithm_1(items: pd.DataFrame, iters: int = 300, lr: float = 0.5) -> dict[str, float]:
    """002's pseudo-code (App. A, Algorithm 1), as printed, for comparison."""
    m, models = pd.factorize(items.model_id)
    q, _ = pd.factorize(items.item)
    y = items.y.to_numpy(float)
    th, de = np.zeros(len(models)), np.zeros(q.max() + 1)
    for _ in range(iters):
        p = _sig(th[m] - de[q])
        w, r = p * (1 - p), y - p
        th += lr * np.bincount(m, r) / np.bincount(m, w)
        de -= lr * np.bincount(q, r) / np.bincount(q, w)
    return dict(zip(models, th - de.mean()))  # on our origin (Σδ = 0)


def test_joint_ml_agrees_with_002_algorithm_and_covers_truth():
    rng = np.random.default_rng(0)
    truth = {"a": -1.0, "b": 0.0, "c": 1.0}
    deltas = rng.normal(0, 1, 60)
    rows = [{"model_id": m, "item": f"q{i}", "y": float(rng.random() < _sig(t - d))}
            for m, t in truth.items() for i, d in enumerate(deltas)]
    items = pd.DataFrame(rows)
    ab, _ = fit_rasch(items)
    got = ab.set_index("model_id")
    ref = _algorithm_1(informative(items))
    for m in truth:
        assert got.loc[m, "ability"] == pytest.approx(ref[m], abs=2e-3)
        assert got.loc[m, "se"] > 0
    assert got.loc["a", "ability"] < got.loc["b", "ability"] < got.loc["c", "ability"]
    assert got.loc["a", "hi"] < got.loc["c", "lo"]


def test_uninformative_items_and_single_models_are_refused():
    items = pd.DataFrame([
        {"model_id": "m1", "item": "only-m1", "y": 1.0},  # one model: no information
        {"model_id": "m1", "item": "easy", "y": 1.0}, {"model_id": "m2", "item": "easy", "y": 1.0},
        {"model_id": "m1", "item": "q", "y": 1.0}, {"model_id": "m2", "item": "q", "y": 0.0},
        {"model_id": "m1", "item": "r", "y": 0.0}, {"model_id": "m2", "item": "r", "y": 1.0},
    ])
    assert set(informative(items)["item"]) == {"q", "r"}
    with pytest.raises(RaschError, match="two models"):
        fit_rasch(items[items.model_id == "m1"])
    b = benchmark_items(pd.DataFrame({"model_id": ["m", "m", "m"], "item": ["s:1", "s:2", "t:1"],
                                      "task": "x", "y": [1.0, 0.0, 1.0]}))
    assert b.set_index("item").loc["s", "y"] == 0.5 and b.set_index("item").loc["s", "weight"] == 2


def test_correlations_need_three_models():
    ab = pd.DataFrame({"model_id": ["a", "b", "c", "d"], "ability": [0.0, 1.0, 2.0, 3.0]})
    sc = pd.DataFrame({"model_id": ["a", "b", "c", "d"], "s": [0.1, 0.3, 0.2, 0.9]})
    c = correlations(ab, sc).iloc[0]
    assert c.n_models == 4 and c.spearman_rho == pytest.approx(0.8)
    assert math.isnan(correlations(ab.iloc[:2], sc.iloc[:2]).iloc[0].pearson_r)
    # few models: exact permutation p-values (scipy's asymptotic p is 0 for a perfect rank
    # correlation on three models; exactly 2 of the 6 pairings reach |rho| = 1, so p = 1/3)
    three = correlations(ab.iloc[:3], sc.iloc[:3].assign(s=[0.1, 0.2, 0.3])).iloc[0]
    assert three.spearman_rho == pytest.approx(1.0) and three.spearman_p == pytest.approx(1 / 3)
    assert three.pearson_p == pytest.approx(1 / 3)
    # four models (rho 0.8): the share of the 24 pairings with |rho| >= 0.8, counted by brute force
    rhos = [np.corrcoef(p, [0, 2, 1, 3])[0, 1] for p in itertools.permutations(range(4))]
    assert c.spearman_p == pytest.approx(np.mean(np.abs(rhos) >= 0.8 - 1e-9))


# ---------------------------------------------------------------- records of several runs
def _delegate_records(model: str, skill: float, seed: int, n: int = 40) -> list[Record]:
    rng = np.random.default_rng(seed)
    out = []
    for q in range(n):
        hard = q / n  # shared difficulty, plus what is hard for this model only
        p_correct = float(_sig(3 * (skill - hard) + rng.normal(0, 2)))
        right = bool(rng.random() < p_correct)
        p_t = float(np.clip((1 - p_correct) + rng.normal(0, 0.05), 0, 1))  # knows its own errors
        out.append(Record(seed=0, model_id=model, task="delegate", condition="clean",
                          variant="arith:teammate=0.5", trial_index=q, trial_id=f"{model}-{q}",
                          grade={"qid": f"q{q}", "source": "arith", "baseline_correct": right,
                                 "baseline_p_correct": p_correct, "p_delegate": p_t,
                                 "delegated": p_t > 0.5, "teammate_accuracy": 0.5}))
    return out


def _write(root, model: str, recs: list[Record]) -> None:
    w = JsonlWriter(root / model / "delegate.jsonl")
    w.write(make_header(run_id="r", model_id=model, fingerprint="f" * 16, seed=0, config={}))
    for r in recs:
        w.write(r)


def test_self_vs_other_separates_own_errors_from_general_difficulty():
    recs = _delegate_records("m1", 0.8, 1, 80) + _delegate_records("m2", 0.2, 2, 80)
    df = pd.DataFrame([{**r.to_dict(), **{f"grade.{k}": v for k, v in r.grade.items()}} for r in recs])
    svo = self_vs_other(df)
    auc = svo[svo.metric == "auroc"].set_index(["predictor", "behaviour"])["value"]
    assert auc[("m1", "m1")] > 0.7 and auc[("m2", "m2")] > 0.7
    diff = svo[svo.metric == "self_minus_other"].set_index("predictor")["value"]
    assert diff["m1"] > 0.1 and diff["m2"] > 0.1  # each predicts its own errors best
    rho = svo[svo.metric == "spearman_graded"].set_index(["predictor", "behaviour"])
    assert rho.loc[("m1", "m1"), "value"] > 0.9 > rho.loc[("m1", "m2"), "value"]  # P(T) ≈ 1 − own P(correct)
    assert rho.loc[("m1", "m1"), "p"] < 1e-6
    items = answered_items(df)
    assert len(items) == 160 and items["y"].between(0, 1).all()


def test_rasch_cli_tables_files_and_errors(tmp_path, capsys):
    for model, skill, seed in (("m1", 0.9, 1), ("m2", 0.5, 2), ("m3", 0.1, 3)):
        _write(tmp_path / model, model, _delegate_records(model, skill, seed))
    out = tmp_path / "rasch"
    assert cli.main([str(tmp_path / "m1"), str(tmp_path / "m2"), str(tmp_path / "m3"), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "Rasch abilities" in text and "m3" in text and "Self vs other" in text
    ab = pd.read_csv(out / "rasch_abilities.csv").set_index("model_id")
    assert ab.loc["m1", "ability"] > ab.loc["m2", "ability"] > ab.loc["m3", "ability"]
    assert (out / "self_vs_other.csv").exists() and (out / "rasch_correlations.csv").exists()
    assert cli.main([str(tmp_path), "--level", "benchmark"]) == 0  # 002's granularity: one set
    assert "benchmark items" in capsys.readouterr().out
    for argv, msg in (([str(tmp_path / "nope")], "results directory not found"),
                      ([str(tmp_path / "empty")], "no *.jsonl"),
                      ([str(tmp_path / "m1")], "two models")):
        (tmp_path / "empty").mkdir(exist_ok=True)
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and msg in err and err.count("\n") == 1
    assert not (tmp_path / "m1" / "rasch_abilities.csv").exists()  # nothing half-written
