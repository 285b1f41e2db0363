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

from introspect.records.jsonl import JsonlWriter, Record, make_header
from introspect.report.rasch import (
    RaschError,
    benchmark_items,
    correlations,
    fit_rasch,
    fit_rasch_cml,
    informative,
    sk_scores,
)
from introspect.tasks.selfknowledge.crossmodel import (
    ability_items,
    ability_reading,
    self_vs_other,
    truth_item_ids,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from experiments import rasch as cli  # noqa: E402


def _sig(x):
    return 1 / (1 + np.exp(-x))


def test_exact_probabilities_recover_abilities():
    theta, delta = {"m1": 0.5, "m2": -0.5}, {"q1": 1.0, "q2": -1.0}
    items = pd.DataFrame([{"model_id": m, "item": q, "y": float(_sig(t - d))}
                          for m, t in theta.items() for q, d in delta.items()])
    ab, it = fit_rasch(items)
    assert ab.set_index("model_id")["ability"].to_dict() == pytest.approx(theta, abs=1e-5)
    assert it.set_index("item")["difficulty"].to_dict() == pytest.approx(delta, abs=1e-5)


def _simulate(theta: dict[str, float], n_items: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    deltas = rng.normal(0, 1, n_items)
    return pd.DataFrame([{"model_id": m, "item": f"q{i}", "y": float(rng.random() < _sig(t - d))}
                         for m, t in theta.items() for i, d in enumerate(deltas)])


def test_conditional_ml_recovers_the_true_abilities():
    truth = {"a": -1.5, "b": -0.6, "c": 0.0, "d": 0.4, "e": 0.7, "f": 1.0}
    mean = np.mean(list(truth.values()))
    ab = fit_rasch_cml(_simulate(truth, 400, 0)).set_index("model_id")
    for m, t in truth.items():  # centred abilities against the centred truth, within 3 SE
        assert abs(ab.loc[m, "ability"] - (t - mean)) < 3 * ab.loc[m, "se"], (m, ab.loc[m, "ability"], t - mean)
        assert 0.05 < ab.loc[m, "se"] < 0.3
    est = ab.loc[list(truth), "ability"].to_numpy()
    assert np.corrcoef(est, list(truth.values()))[0, 1] > 0.98
    assert (ab["fit"] == "cml").all() and ab["ability"].sum() == pytest.approx(0, abs=1e-9)


def test_joint_ml_is_biased_with_two_models_and_says_so():
    """The incidental-parameter bias: with two models every item difficulty rests on two
    answers, and joint ML doubles the ability gap (m/(m-1) = 2); conditional ML does not. CML's
    consistency on 3,000 items; the doubling, which holds on any sample, on 1,500 of them (the
    dense joint fit costs ~10x more at twice the items)."""
    items = _simulate({"lo": -0.5, "hi": 0.5}, 3000, 1)
    cml = fit_rasch_cml(items).set_index("model_id")["ability"]
    assert cml["hi"] - cml["lo"] == pytest.approx(1.0, abs=0.15)
    half = items[items["item"].str[1:].astype(int) < 1500]
    cml_half = fit_rasch_cml(half).set_index("model_id")["ability"]
    jml, _ = fit_rasch(half)
    gap_jml = jml.set_index("model_id")["ability"]["hi"] - jml.set_index("model_id")["ability"]["lo"]
    assert gap_jml == pytest.approx(2 * (cml_half["hi"] - cml_half["lo"]), rel=0.05)
    assert "2.00x" in jml["note"].iloc[0] and (jml["fit"] == "jml").all()
    with pytest.raises(RaschError, match="0/1 outcomes"):
        fit_rasch_cml(items.assign(y=0.5))


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
    return dict(zip(models, th - th.mean()))  # centred, as reported


def test_joint_ml_agrees_with_002_algorithm():
    items = _simulate({"a": -1.0, "b": 0.0, "c": 1.0}, 60, 0)
    got = fit_rasch(items)[0].set_index("model_id")
    ref = _algorithm_1(informative(items))
    for m in ref:
        assert got.loc[m, "ability"] == pytest.approx(ref[m], abs=2e-3)


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


def _write(root, model: str, recs: list[Record], task: str = "delegate") -> None:
    w = JsonlWriter(root / model / f"{task}.jsonl")
    w.write(make_header(run_id="r", model_id=model, fingerprint="f" * 16, seed=0, config={}))
    for r in recs:
        w.write(r)


def _ability_records(model: str, skill: float, seed: int, n: int = 150) -> list[Record]:
    rng = np.random.default_rng(seed)
    deltas = np.random.default_rng(99).normal(0, 1, n)  # the same items for every model
    return [Record(seed=0, model_id=model, task="ability", condition="clean", variant="mmlu",
                   trial_index=i, trial_id=f"{model}-a{i}",
                   grade={"qid": f"mmlu-{i}", "topic": f"t{i % 5}", "source": "mmlu",
                          "correct": bool(rng.random() < _sig(skill - d))})
            for i, d in enumerate(deltas)]


def _flat(recs: list[Record]) -> pd.DataFrame:
    return pd.DataFrame([{**r.to_dict(), **{f"grade.{k}": v for k, v in r.grade.items()}} for r in recs])


def test_self_vs_other_separates_own_errors_from_general_difficulty():
    recs = _delegate_records("m1", 0.8, 1, 80) + _delegate_records("m2", 0.2, 2, 80)
    svo = self_vs_other(_flat(recs))
    auc = svo[svo.metric == "auroc"].set_index(["predictor", "behaviour"])["value"]
    assert auc[("m1", "m1")] > 0.7 and auc[("m2", "m2")] > 0.7
    diff = svo[svo.metric == "self_minus_other"].set_index("predictor")
    assert diff.loc["m1", "value"] > 0.1 and diff.loc["m2", "value"] > 0.1  # each predicts its own errors best
    assert diff.loc["m1", "lo"] > 0 and diff.loc["m2", "lo"] > 0 and (diff["n"] == 80).all()  # ...beyond item noise
    rho = svo[svo.metric == "spearman_graded"].set_index(["predictor", "behaviour"])
    assert rho.loc[("m1", "m1"), "value"] > 0.9 > rho.loc[("m1", "m2"), "value"]  # P(T) ≈ 1 − own P(correct)
    assert rho.loc[("m1", "m1"), "p"] < 1e-6


def test_ability_items_are_independent_of_the_truths():
    df = _flat(_ability_records("m1", 0.0, 1, 10) + _delegate_records("m1", 0.5, 1, 5))
    items = ability_items(df)
    assert len(items) == 10 and set(items["y"]) <= {0.0, 1.0} and (items["task"] == "ability").all()
    assert truth_item_ids(df) == {f"q{i}" for i in range(5)}  # the game's questions, not the ability items


def test_ability_items_read_cloze_only_when_every_record_has_it():
    """Rasch grades are letter-free (cloze) where every ability record carries the cloze reading;
    one record without it puts every model back on the letter grades (one instrument per fit)."""
    recs = _ability_records("m1", 0.0, 1, 10) + _ability_records("m2", 0.0, 2, 10)
    for i, r in enumerate(recs):
        r.grade["cloze_correct"] = i % 3 == 0
    df = _flat(recs)
    assert ability_reading(df) == "cloze"
    items = ability_items(df)
    assert items["y"].tolist() == [float(i % 3 == 0) for i in range(20)]
    letter = ability_items(df, "letter")
    assert letter["y"].tolist() == [float(r.grade["correct"]) for r in recs]
    del recs[-1].grade["cloze_correct"]
    assert ability_reading(_flat(recs)) == "letter"
    assert ability_items(_flat(recs))["y"].tolist() == [float(r.grade["correct"]) for r in recs]
    with pytest.raises(ValueError, match="cloze' or 'letter"):
        ability_items(df, "argmax")


def test_sk_scores_never_average_feedback_and_no_feedback():
    recs = []
    for fb, pt_right in ((False, 0.1), (True, 0.9)):  # P(T) tracks own error only with feedback
        for q in range(30):
            right = q % 2 == 0
            recs.append(Record(seed=0, model_id="m", task="delegate", condition="clean",
                               variant="arith:teammate=0.5" + ("+feedback" if fb else ""), trial_index=q,
                               trial_id=f"{fb}-{q}", grade={
                                   "qid": f"q{q}", "source": "arith", "baseline_correct": right,
                                   "p_delegate": (pt_right if right else 1 - pt_right), "feedback": fb,
                                   "delegated": False, "teammate_accuracy": 0.5}))
    sc = sk_scores(_flat(recs)).set_index("model_id")
    assert sc.loc["m", "delegate:p_delegate_auroc"] == pytest.approx(1.0)
    assert sc.loc["m", "delegate+feedback:p_delegate_auroc"] == pytest.approx(0.0)


def test_rasch_cli_tables_files_and_errors(tmp_path, capsys):
    for model, skill, seed in (("m1", 1.0, 1), ("m2", 0.0, 2), ("m3", -1.0, 3)):
        _write(tmp_path / model, model, _delegate_records(model, skill, seed))
        _write(tmp_path / model, model, _ability_records(model, skill, seed), "ability")
    # an ability item that is also one of the game questions is dropped and counted
    for model in ("m1", "m2", "m3"):
        _write(tmp_path / model, model, [Record(seed=0, model_id=model, task="ability", condition="clean",
                                                variant="mmlu", trial_index=999, trial_id=f"{model}-shared",
                                                grade={"qid": "q0", "topic": "t", "correct": model == "m1"})],
               "ability2")
    out = tmp_path / "rasch"
    dirs = [str(tmp_path / m) for m in ("m1", "m2", "m3")]
    assert cli.main([*dirs, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "Rasch abilities" in text and "Self vs other" in text
    assert "1 ability items were also self-knowledge items" in text and "only 3 models" in text
    ab = pd.read_csv(out / "rasch_abilities.csv")
    cml = ab[ab.fit == "cml"].set_index("model_id")
    assert cml.loc["m1", "ability"] > cml.loc["m2", "ability"] > cml.loc["m3", "ability"]
    assert "q0" not in set(pd.read_csv(out / "rasch_items.csv")["item"])  # the shared item is out
    assert len(pd.read_csv(out / "rasch_items.csv")) > 50  # the informative ability items
    assert set(ab.fit) == {"cml", "jml"} and ab[ab.fit == "jml"]["note"].str.contains("incidental").all()
    assert "only 3 models" in pd.read_csv(out / "rasch_correlations.csv")["warning"].iloc[0]
    cross = pd.read_csv(out / "cross_prediction.csv").fillna({"note": ""})  # m1 errs on 6 of 40, m3 on 36
    gap = cross[cross.metric == "self_minus_predictor"].set_index(["behaviour", "predictor"])
    assert gap.loc[("m2", "m3"), "lo"] > 0 and gap.loc[("m2", "m1"), "lo"] > 0
    assert gap.loc[("m1", "m2"), "note"] == "not judged: 6 positive, 34 negative items: fewer than 10 of a class"
    assert "Cross-prediction" in text
    assert cli.main([*dirs, "--level", "benchmark"]) == 0  # 002's granularity: topics
    assert "benchmark items" in capsys.readouterr().out
    (tmp_path / "empty").mkdir()
    (tmp_path / "game_only").mkdir()
    _write(tmp_path / "game_only", "g", _delegate_records("g", 0.0, 1))
    for argv, msg in (([str(tmp_path / "nope")], "results directory not found"),
                      ([str(tmp_path / "empty")], "no *.jsonl"),
                      ([str(tmp_path / "game_only")], "no ability records"),
                      ([str(tmp_path / "m1")], "two models")):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and msg in err and err.count("\n") == 1
    assert not (tmp_path / "m1" / "rasch_abilities.csv").exists()  # nothing half-written


def test_self_minus_other_is_one_row_per_other_model_marked_same_base_and_gated():
    """Never averaged over models: m1's adapter gets one row against m1 (its own base, marked
    same_base) and one against m2; a pair with 10 shared items is "not judged" (one class short)."""
    recs = (_delegate_records("m1", 0.8, 1, 80) + _delegate_records("m2", 0.2, 2, 80)
            + [Record(**{**r.to_dict(), "model_id": "m1+lora-ab12cd34", "trial_id": "a" + r.trial_id})
               for r in _delegate_records("m1", 0.8, 3, 80)])
    svo = self_vs_other(_flat(recs))
    d = svo[(svo.metric == "self_minus_other") & (svo.predictor == "m1+lora-ab12cd34")].set_index("behaviour")
    assert sorted(d.index) == ["m1", "m2"] and "others" not in set(svo.behaviour)
    assert d.loc["m1", "same_base"] and not d.loc["m2", "same_base"] and (d["note"] == "").all()
    few = self_vs_other(_flat(_delegate_records("m1", 0.8, 1, 10) + _delegate_records("m2", 0.2, 2, 10)))
    row = few[few.metric == "self_minus_other"].iloc[0]
    assert np.isnan(row.value) and row.n == 10 and row.note.count("not judged") >= 1 and "fewer than 10" in row.note


def test_self_vs_other_never_pairs_questions_of_two_pool_settings():
    """Calibrated pools: each model's pool is drawn at its own knob setting with the same ids, so
    "q3" at d1t2 and "q3" at d2t2 are different questions; only items of one setting pair up."""
    a, b = _delegate_records("m1", 0.8, 1, 40), _delegate_records("m2", 0.2, 2, 40)
    for r in a:
        r.grade["pool_knobs"] = "arith-d1t2+-"
    for i, r in enumerate(b):
        r.grade["pool_knobs"] = "arith-d2t2+-" if i >= 10 else "arith-d1t2+-"  # 10 shared items
    svo = self_vs_other(_flat(a + b))
    diff = svo[svo.metric == "self_minus_other"].set_index("predictor")
    assert (diff["n"] == 10).all()
    same = self_vs_other(_flat(_delegate_records("m1", 0.8, 1, 40) + _delegate_records("m2", 0.2, 2, 40)))
    assert (same[same.metric == "self_minus_other"]["n"] == 40).all()  # no setting recorded: ids pair


def test_compare_cli_shows_self_vs_other_without_ability_records(tmp_path, capsys):
    """Two models that each know their own errors, no ability task: experiments.compare writes
    self vs other (page, CSV, printed) where experiments.rasch refuses for want of abilities."""
    from experiments import compare as compare_cli

    for model, skill, seed in (("m1", 0.8, 1), ("m2", 0.2, 2)):
        _write(tmp_path / "res", model, _delegate_records(model, skill, seed, 80))
    assert cli.main([str(tmp_path / "res")]) == 2 and "no ability records" in capsys.readouterr().err
    assert compare_cli.main([str(tmp_path / "res")]) == 0
    text = capsys.readouterr().out
    assert "self vs other" in text and "self_vs_other.csv" in text
    svo = pd.read_csv(tmp_path / "res" / "self_vs_other.csv")
    diff = svo[svo.metric == "self_minus_other"].set_index("predictor")
    assert (diff["lo"] > 0).all()  # as crossmodel.self_vs_other finds on these records
    html = (tmp_path / "res" / "compare.html").read_text()
    assert 'id="self-other"' in html and "self − other (AUROC)" in html
    cross = pd.read_csv(tmp_path / "res" / "cross_prediction.csv")  # behaviour held fixed: each knows itself
    gap = cross[cross.metric == "self_minus_predictor"].set_index("behaviour")
    assert (gap["lo"] > 0).all() and gap["note"].isna().all() and (gap["n"] == 80).all()
    assert "cross-prediction" in text and "cross_prediction.csv" in text and 'id="cross-prediction"' in html
    matched = pd.read_csv(tmp_path / "res" / "matched_rate.csv")  # each read at the other's delegation rate
    assert set(matched["reference"]) == set(matched["model_id"]) == {"m1", "m2"} and len(matched) == 4
    assert "matched delegation rates" in text and 'id="matched-rate"' in html


def test_ability_task_answers_an_independent_file(tiny_model, tmp_path):
    import introspect as I
    from introspect.tasks import get_task
    from introspect.tasks.base import ConfigError
    from introspect.tasks.selfknowledge.metrics import summarize_sk

    shared = Path(__file__).resolve().parents[3] / "shared" / "data" / "evals_sandbagging_mmlu200.jsonl"
    if not shared.exists():  # the real MMLU items when this machine has them, else a small CSV
        shared = tmp_path / "algebra_test.csv"
        shared.write_text("".join(f"What is {i}?,{i},{i + 1},{i + 2},{i + 3},A\n" for i in range(12)))
    m = tiny_model("llama")
    spec = get_task("ability")
    with pytest.raises(ConfigError, match="ability_items=PATH"):
        spec.plan(I.context(m, I.TaskConfig()))
    ctx = I.context(m, I.TaskConfig().with_options(ability_items=str(shared), ability_n=6))
    trials = spec.plan(ctx)
    recs = list(spec.execute(ctx, trials))
    assert len(recs) == 6 and len({r.grade["qid"] for r in recs}) == 6
    for r in recs:
        assert r.grade["correct"] == (r.grade["choice"] == r.grade["answer"]) and 0 <= r.grade["p_correct"] <= 1
    items = ability_items(_flat(recs))
    assert sorted(items["item"]) == sorted(r.grade["qid"] for r in recs)
    s = summarize_sk(_flat(recs)).set_index("metric")
    assert s.loc["accuracy", "value"] == pytest.approx(np.mean([r.grade["correct"] for r in recs]))


def test_delegate_recovery_and_difficulty_never_share_item_ids(tiny_model):
    import introspect as I
    from introspect.tasks.selfknowledge import delegate, difficulty, recovery

    m = tiny_model("llama")
    ctx = I.context(m, I.TaskConfig().with_options(n=10, history_len=10, stratify=False))
    pools = {"delegate": {q.id for q in delegate._pool(ctx)[1]},
             "recovery": {q.id for q in recovery._questions(ctx)},
             "difficulty": set(difficulty._source(ctx)[1])}
    texts = {"delegate": {q.question for q in delegate._pool(ctx)[1]},
             "recovery": {q.question for q in recovery._questions(ctx)}}
    assert all(pools.values())
    assert not pools["delegate"] & pools["recovery"] and not pools["delegate"] & pools["difficulty"]
    assert not pools["recovery"] & pools["difficulty"]
    assert len(texts["delegate"] & texts["recovery"]) < 3  # different draws (a collision by chance is rare)


def _svo_null(rng: np.random.Generator, n: int) -> pd.DataFrame:
    """Two models with the same error probabilities per item and independent errors; model
    m1 predicts that probability (general difficulty, no self-knowledge): self − other is 0."""
    p_wrong = _sig(rng.normal(0, 1.5, n))
    recs = []
    for m in ("m1", "m2"):
        wrong = rng.random(n) < p_wrong
        recs += [Record(seed=0, model_id=m, task="delegate", condition="clean", variant="arith:teammate=0.5",
                        trial_index=q, trial_id=f"{m}-{q}",
                        grade={"qid": f"q{q}", "source": "arith", "baseline_correct": not bool(wrong[q]),
                               "p_delegate": float(p_wrong[q]) if m == "m1" else None})
                 for q in range(n)]
    return _flat(recs)


@pytest.mark.calibration
def test_self_minus_other_interval_covers_a_null_95_percent():
    """Coverage of the jackknife interval when the predictor knows only general difficulty (the
    truth is 0): 400 simulated pairs of models at 40 and 150 items."""
    rng = np.random.default_rng(7)
    for n in (40, 150):
        cover = []
        for _ in range(400):
            r = self_vs_other(_svo_null(rng, n))
            r = r[(r.metric == "self_minus_other") & (r.predictor == "m1")].iloc[0]
            cover.append(r.lo <= 0 <= r.hi)
        print(f"self_minus_other null coverage at {n} items: {np.mean(cover):.3f}")
        assert 0.93 <= np.mean(cover) <= 0.99, (n, np.mean(cover))


def test_self_vs_other_lines_up_a_fewshot_model_with_a_chat_model_on_one_question_file():
    """A base model plays the few-shot format (variant ``items+fewshot:…``), a chat model the chat
    one (``items:…``), on the same question file: the items are the same, so self vs other pairs
    them (it read n = 0 and NaN before)."""
    recs = _delegate_records("chat", 0.8, 1, 40) + [
        Record(**{**r.to_dict(), "model_id": "base", "trial_id": "b" + r.trial_id,
                  "variant": "arith+fewshot:teammate=0.5"}) for r in _delegate_records("base", 0.2, 2, 40)]
    df = _flat(recs).drop(columns=["grade.source"])  # the source then comes from the variant
    svo = self_vs_other(df)
    cross = svo[(svo.metric == "auroc") & (svo.predictor == "chat") & (svo.behaviour == "base")].iloc[0]
    assert cross.n == 40 and math.isfinite(cross.value)
    assert svo[(svo.metric == "self_minus_other") & (svo.predictor == "chat")].iloc[0].n == 40
