"""The self-knowledge LoRA (introspect.train.selfknow), on tiny random models, single-threaded.

A random model states no number, so its truth is planted: ``grade_items`` says it is wrong
exactly on subtractions (a rule an adapter can learn and carry to held-out items). Everything
else is the real path: the task's baseline prompts and budget, its game prompts, the loss, the
checkpoints, the adapter saved and loaded through ``load_model(adapter=)``. The behavioural test
trains the adapter and its shuffled control from one base with larger random weights (at the
shared tiny models' init scale the unadapted head caps every logit near uniform, and P(T) cannot
rise above about 0.01), and reads what each learned as a gap in log P(T): on the truth's errors
minus on its right items, after training.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch

from introspect.engine.load.models import load_model, model_info
from introspect.tasks.selfknowledge import delegate as G
from introspect.train import lora
from introspect.train import selfknow as S
from introspect.train import selfknow_data as K
from introspect.train.data import TrainDataError
from introspect.train.loop import CHECKPOINT

GRADE = K.grade_items


def planted(qs, texts):
    return [" - " not in q.question for q in qs]


@pytest.fixture(scope="module")
def mp():
    with pytest.MonkeyPatch.context() as m:
        m.setattr(K, "grade_items", planted)
        yield m


def tiny_cfg(**kw) -> K.SelfKnowConfig:
    base = dict(layer=1, steps=100, n_items=80, heldout_frac=0.5, calibrate=False, history_len=4, replay_prompts=2, replay_tokens=6,
                lr=1e-2, decision_weight=10.0, check=0, checkpoint_every=1000)
    return K.SelfKnowConfig(**{**base, **kw})


def gap(ctx, items, wrong=None) -> float:
    """Mean log P(T) on the game items marked wrong minus on the others (the first four items
    of ``items`` are phase 1; ``wrong`` defaults to the truth)."""
    hist, game = items[:4], items[4:34]
    p = S.p_delegate(ctx, K.game_prompts(ctx, K.history_text(hist, 0.5, 0), game))
    w = wrong[4:34] if wrong is not None else [not i.correct for i in game]
    lw = [math.log(x) for x, y in zip(p, w) if y]
    lr = [math.log(x) for x, y in zip(p, w) if not y]
    return sum(lw) / len(lw) - sum(lr) / len(lr)


@pytest.fixture(scope="module")
def sharp_dir(tiny_dir, tmp_path_factory):
    """The tiny llama's shape and tokenizer at initializer_range 0.25 (logits not capped near uniform)."""
    import transformers

    src, out = tiny_dir("llama"), tmp_path_factory.mktemp("sharp") / "llama"
    cfg = transformers.AutoConfig.from_pretrained(src)
    cfg.initializer_range = 0.25
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(cfg).save_pretrained(out)
    transformers.AutoTokenizer.from_pretrained(src).save_pretrained(out)
    return out


def _train(model_dir, shuffle: bool, out):
    """Train from ``model_dir``; the base model's pool (its truth) is read before the first step."""
    model = load_model(str(model_dir))
    cfg = tiny_cfg(shuffle=shuffle, steps=60)
    base_fp = model_info(model).fingerprint
    ctx = K.task_context(model, cfg)
    pool = K.build_pool(ctx, cfg)  # what train builds before its first step
    summary = S.train(model, cfg, out, progress=False)
    labels = K.labels(pool.train, shuffle, cfg.seed)
    return dict(model=model, ctx=ctx, cfg=cfg, pool=pool, labels=labels, out=out, summary=summary, base_fp=base_fp,
                gap={"train": gap(ctx, pool.train), "heldout": gap(ctx, pool.heldout), "own": gap(ctx, pool.train, labels)})


@pytest.fixture(scope="module")
def trained(sharp_dir, mp, tmp_path_factory):
    """The adapter: 60 steps on its errors."""
    return _train(sharp_dir, False, tmp_path_factory.mktemp("sk") / "adapter")


@pytest.mark.slow  # the module's trained adapters (~35 s together): CI's full suite
def test_adapter_delegates_its_errors(trained):
    """Trained on its errors, P(T) is higher on its errors than on its right items, on training
    items and on held-out ones (the planted errors follow a rule it can carry over)."""
    assert trained["gap"]["train"] > 0.3 and trained["gap"]["heldout"] > 0.3, trained["gap"]
    assert trained["summary"]["labels_equal_truth"] == 1.0 and not trained["summary"]["control"]


@pytest.mark.slow  # the module's trained adapters (~35 s together): CI's full suite
def test_the_shuffled_control_learns_no_such_gap(trained, sharp_dir, mp, tmp_path):
    """The same base, the same rows, the labels permuted: no gap on the truth (~12 s of training)."""
    ctrl = _train(sharp_dir, True, tmp_path / "control")
    real, gap_c = trained["gap"], ctrl["gap"]
    assert abs(gap_c["train"]) < 0.25 and abs(gap_c["heldout"]) < 0.25, (real, gap_c)
    assert real["train"] - gap_c["train"] > 0.35 and real["heldout"] - gap_c["heldout"] > 0.35, (real, gap_c)
    assert ctrl["summary"]["control"] and ctrl["summary"]["labels_equal_truth"] < 0.8
    meta = json.loads((ctrl["out"] / lora.META_FILE).read_text())
    assert meta["selfknow"]["shuffle_seed"] == 0 and meta["training"]["shuffle"] is True
    assert meta["selfknow"]["heldout_ids"] == [i.id for i in trained["pool"].heldout]
    assert set(meta["selfknow"]["trained_delegate_ids"]) == {
        i.id for i, lab in zip(ctrl["pool"].train, ctrl["labels"]) if lab}
    real_in = json.loads((trained["out"] / lora.META_FILE).read_text())["provenance"]["inputs"]
    ctrl_in = meta["provenance"]["inputs"]  # same items and replay answers, other labels: the digests say so
    assert real_in["pool"] == ctrl_in["pool"] and real_in["replay"] == ctrl_in["replay"]
    assert real_in["labels"] != ctrl_in["labels"]


@pytest.mark.slow  # the module's trained adapters (~35 s together): CI's full suite
def test_save_load_same_logits_and_metadata(trained, sharp_dir):
    run = trained
    model, out, pool = run["model"], run["out"], run["pool"]
    loaded = load_model(str(sharp_dir), adapter=out)
    p = K.game_prompts(run["ctx"], K.history_text(pool.heldout[:4], 0.5, 0), pool.heldout[4:5])[0]
    ids = torch.tensor([p.ids])
    with torch.no_grad():
        a, b = model(ids), loaded(ids)
    assert torch.allclose(a, b, atol=1e-4), float((a - b).abs().max())
    meta = json.loads((out / lora.META_FILE).read_text())
    assert model_info(loaded).fingerprint == f"{run['base_fp']}+{meta['adapter_hash']}"
    sk = meta["selfknow"]
    assert sk["heldout_ids"] == [i.id for i in pool.heldout] and sk["train_ids"] == [i.id for i in pool.train]
    assert set(sk["base_wrong_ids"]) == {i.id for i in (*pool.train, *pool.heldout) if not i.correct}
    assert set(sk["trained_delegate_ids"]) == {i.id for i in pool.train if not i.correct}
    assert meta["training"]["shuffle"] is False and sk["shuffle_seed"] is None
    truth = json.loads((out / S.TRUTH).read_text())
    assert {r["id"]: r["base_correct"] for r in truth["items"]} == {i.id: i.correct for i in (*pool.train, *pool.heldout)}
    assert not (out / CHECKPOINT).exists()


@pytest.mark.slow  # the module's trained adapters (~35 s together): CI's full suite
def test_shuffle_permutes_labels_but_keeps_items_split_and_rows(trained):
    ctx, cfg, pool = trained["ctx"], trained["cfg"], trained["pool"]
    a, b = K.labels(pool.train, False, cfg.seed), K.labels(pool.train, True, cfg.seed)
    assert sorted(a) == sorted(b) and a != b and a == [not i.correct for i in pool.train]
    t_ids = K.delegate_ids(ctx)
    for step in range(5):
        ga, _ = S.step_encoded(ctx, cfg, pool, a, [], step, t_ids)
        gb, _ = S.step_encoded(ctx, replace(cfg, shuffle=True), pool, b, [], step, t_ids)
        assert [e.ids[:-e.n_answer] for e in ga] == [e.ids[:-e.n_answer] for e in gb]  # the same prompts
        rows = K.step_rows(step, cfg, len(a), 0)
        assert rows == K.step_rows(step, replace(cfg, shuffle=True), len(a), 0)
        for i, ea, eb in zip(rows.game, ga, gb):
            assert (ea.ids == eb.ids) == (a[i] == b[i])  # targets differ exactly where the labels do


def test_heldout_items_never_reach_a_training_row(tiny_dir, mp):
    """Every row of every step (game questions, phase 1, replay) decoded: no held-out question in
    any; the pool is calibrated first (the task's walk, scored by the planted truth)."""
    model = load_model(str(tiny_dir("llama")))
    cfg = tiny_cfg(steps=40, calibrate=True, calibration_n=8, n_items=60)
    ctx = K.task_context(model, cfg)
    pool = K.build_pool(ctx, cfg)
    assert pool.calibration is not None and pool.knobs == pool.calibration["chosen"]
    held = {i.question for i in pool.heldout}
    assert held and not held & {i.question for i in pool.train}
    replay = S.replay_rows(pool, S.neutral_replay(ctx, cfg, pool), model.tokenizer)
    labels = K.labels(pool.train, False, cfg.seed)
    tok, seen = model.tokenizer, set()
    for step in range(cfg.steps):
        game, rep = S.step_encoded(ctx, cfg, pool, labels, replay, step, K.delegate_ids(ctx))
        assert rep and game
        for e in (*game, *rep):
            text = tok.decode(list(e.ids))
            assert not [q for q in held if q in text], step
            seen |= {i.question for i in pool.train if i.question in text}
    assert len(seen) > len(pool.train) / 2  # the training items do appear


def test_truth_is_the_tasks_baseline(tiny_model, monkeypatch):
    """``answer_items`` reads what ``delegate.baseline`` reads: the same replies, the same grades."""
    monkeypatch.setattr(K, "grade_items", GRADE)  # the real grading, whatever the module fixture planted
    cfg = tiny_cfg(n_items=6)
    ctx = K.task_context(tiny_model("llama"), cfg)
    qs = K.P.arithmetic_items(6, 0, K.P.Knobs(2, 2, "+-"), True, K.NAMESPACE)
    gens = G._short_prompts(ctx, qs)
    mine = K.grade_items(qs, [g.text for g in G.greedy(ctx, gens, G._short_budget(ctx))])
    base = G.baseline(ctx, qs, sampled=False)
    assert mine == [base[q.id]["correct"] for q in qs]
    items = K.answer_items(ctx, qs)
    for q, it in zip(qs, items):
        assert (it is None) == (base[q.id]["correct"] is None)
        if it is not None:
            assert it.response == base[q.id]["response"]


def test_the_task_plays_the_heldout_file(tiny_model, tmp_path):
    """The question file written beside the adapter is read by the unchanged task: the held-out
    ids and questions, numeric (graded by the number stated)."""
    items = [K.Item(f"selfknow-0-{k}", f"What is {k} + 1?", str(k + 1), "arithmetic d1 t2", k % 2 == 0, "", (1,), (2,))
             for k in range(12)]
    f = tmp_path / S.ITEMS_HELDOUT
    f.write_text(K.items_csv(items))
    cfg = tiny_cfg()
    ctx = K.task_context(tiny_model("llama"), cfg)
    ctx = replace(ctx, cfg=ctx.cfg.with_options(questions=str(f), calibrate_pool=False))
    stem, qs = G._pool(ctx)
    assert stem == "items_heldout" and {q.id for q in qs} == {i.id for i in items}
    assert all(G._numeric(q) and q.answer == str(int(q.question.split()[2]) + 1) for q in qs)


def test_resume_gives_the_same_adapter(tiny_dir, mp, tmp_path, monkeypatch):
    cfg = tiny_cfg(steps=6, checkpoint_every=2, n_items=40)
    ref = S.train(load_model(str(tiny_dir("llama"))), cfg, tmp_path / "ref", progress=False)
    real, calls = S.step_loss, {"n": 0}

    def dying(*a, **k):
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(S, "step_loss", dying)
    with pytest.raises(KeyboardInterrupt):
        S.train(load_model(str(tiny_dir("llama"))), cfg, tmp_path / "b", progress=False)
    assert (tmp_path / "b" / CHECKPOINT).is_file() and not (tmp_path / "b" / lora.META_FILE).exists()
    assert (tmp_path / "b" / S.ITEMS_HELDOUT).is_file()  # written before the first step
    monkeypatch.setattr(S, "step_loss", real)
    with pytest.raises(TrainDataError, match="another config"):
        S.train(load_model(str(tiny_dir("llama"))), tiny_cfg(steps=6, checkpoint_every=2, n_items=40, shuffle=True),
                tmp_path / "b", progress=False)
    again = S.train(load_model(str(tiny_dir("llama"))), cfg, tmp_path / "b", progress=False)
    assert again["steps_this_run"] == 2 and again["adapter_hash"] == ref["adapter_hash"]


def test_bad_config_is_one_line():
    for kw, msg in ((dict(steps=0), "steps"), (dict(heldout_frac=1.0), "heldout_frac"), (dict(lr=float("nan")), "lr"),
                    (dict(teammate_accuracy=(1.5,)), "teammate_accuracy"), (dict(ops="/"), "ops"),
                    (dict(digits=(2, 1)), "digits"), (dict(terms=(0, 2)), "terms"), (dict(digits=1.5), "digits"),
                    (dict(terms=("2", 3)), "terms"), (dict(digits=(1, 2, 3)), "digits")):
        with pytest.raises(TrainDataError, match=msg) as e:
            tiny_cfg(**kw)
        assert "\n" not in str(e.value)
    cfg = tiny_cfg(digits=(1, 2), terms=3)  # a range is drawn per item and survives the record
    assert K.SelfKnowConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg


def test_the_cli_reads_a_knob_range():
    from experiments import train_selfknow as T

    args = T.build_parser().parse_args(["--digits", "1-2", "--terms", "3"])
    assert (args.digits, args.terms) == ((1, 2), 3)
    with pytest.raises(SystemExit):
        T.build_parser().parse_args(["--digits", "one"])


def test_cli_one_line_errors_then_trains_and_prints_the_evaluation(tiny_dir, mp, tmp_path, capsys):
    from experiments import train_selfknow as T

    model_dir = str(tiny_dir("llama"))
    capsys.readouterr()
    out = tmp_path / "never"
    for argv in (["--steps", "0"], ["--layer", "3"], ["--heldout-frac", "0"], ["--items", "5"]):
        assert T.main(["--model", model_dir, "--out", str(out), "--no-progress", "--no-calibrate", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and "\n" not in err, err
        assert not (out / lora.META_FILE).exists()
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "notes.txt").write_text("mine")
    assert T.main(["--model", model_dir, "--out", str(junk), "--no-progress"]) == 2
    assert "not a self-knowledge adapter directory" in capsys.readouterr().err
    good = tmp_path / "a"
    argv = ["--model", model_dir, "--out", str(good), "--no-progress", "--no-calibrate", "--steps", "2", "--items", "40",
            "--history-len", "4", "--replay-prompts", "1", "--check", "4", "--layer", "1"]
    assert T.main(argv) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    summary = json.loads(lines[0])
    assert summary["check"]["heldout"]["n"] == 4 and summary["n_heldout"] > 0
    ev = next(x for x in lines if x.startswith("evaluate: "))
    assert f"--adapter {good}" in ev and f"questions={good / S.ITEMS_HELDOUT}" in ev and "--task delegate" in ev
    assert "history_len=4" in ev and any(x.startswith("base model on the same items: ") and "--model" in x for x in lines)
    assert T.main(argv) == 0 and "already holds this adapter" in capsys.readouterr().out


@pytest.mark.slow  # the module's trained adapters (~35 s together): CI's full suite
def test_the_printed_evaluation_runs_the_unchanged_task(trained, tmp_path, monkeypatch):
    """The evaluation command (``summary["evaluate"]``) through ``experiments.run``: the adapter
    loaded from its directory, the held-out file as the game's questions, the task's own summary;
    graded by the planted truth (a random model states no number), the adapter delegates its
    held-out errors: P(T) AUROC above chance, its interval above 0.5."""
    import shlex

    from experiments import run
    from introspect.report import load_results, summarize
    from introspect.tasks.selfknowledge.shortanswer import ShortGrade

    monkeypatch.setattr(G, "grade_replies", lambda items, judges=(): [
        ShortGrade(" - " not in q.question, "number") for q, _ in items])
    argv = shlex.split(trained["summary"]["evaluate"])[3:]
    assert argv[:2] == ["--task", "delegate"] and argv[-2] == "--out"
    out = tmp_path / "results"
    assert run.main([*argv[:-2], "--out", str(out), "--no-progress", "--batch-size", "8"]) == 0
    df = load_results(out)
    held = {i.id for i in trained["pool"].heldout}
    assert len(df) and set(df["grade.qid"]) <= held
    s = summarize(df)
    auc = s[(s.metric == "p_delegate_auroc") & (s.variant == "items_heldout:teammate=0.5")].iloc[0]
    assert auc["n"] == len(df) and auc["lo"] > 0.5, auc
