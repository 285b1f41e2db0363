"""Training an adapter to report injected thoughts (introspect.train), on tiny random models.

One short training run (module fixture) serves the behavioural checks: the loss falls, the
injection hook fires exactly where the rows inject, the adapter survives save/load bit for bit (up
to the merge's rounding), and it moves the yes/no answer under injection. Quick tests cover
gradients, resume, the shared-prefix pass, the data split and bad input.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

from introspect.engine.load.models import ModelError, load_model, model_info
from introspect.engine.run.decode import next_token_logprobs
from introspect.grading import word_match
from introspect.tasks import prompts as P
from introspect.tasks.prompts import load_words
from introspect.train import data as D
from introspect.train import loop as L
from introspect.train import lora
from introspect.train.config import same_record

WORDS = ["pencil", "lemon", "bottle", "rabbit", "cabin", "piano", "tiger", "apple", "horse", "candle"]


@pytest.fixture(scope="module")
def words_file(tmp_path_factory) -> str:
    p = tmp_path_factory.mktemp("words") / "train_words.yaml"
    p.write_text(yaml.safe_dump({"words": WORDS, "replay_prompts": ["Say hi.", "Count to three."]}))
    return str(p)


def tiny_cfg(words_file: str, **kw) -> L.TrainConfig:
    base = dict(layer=1, steps=60, batch_size=8, lr=1e-2, rank=8, warmup=2, replay_prompts=2, replay_tokens=6,
                checkpoint_every=1000, phrasings=("short",), strength=(0.5, 1.0), heldout_frac=0.0, n_trials=2,
                train_words_file=words_file, mix=(("positive", 0.5), ("clean", 0.5)), replay_frac=0.25,
                split="spelling", gates=False, replay_distill=False, replay_weight=1.0)  # the training mechanics on all ten words (test_train_split covers the split)
    return L.TrainConfig(**{**base, **kw})


def yes_minus_no(model, plan: L.Plan, layer: int, words: list[str]) -> tuple[float, float]:
    """Mean first-token log P(Yes) − log P(No) on the detection prompt: (injected, clean)."""
    tok = model.tokenizer
    yes, no = (tok(w, add_special_tokens=False)["input_ids"][0] for w in ("Yes", "No"))
    p = D.render(tok, D.detection_conv("short", 1))
    inj, clean = [], []
    for w in words:
        ex = D.Example("positive", "short", 1, w, None, 0.75)
        spec = L.spec_for(ex, D.Encoded(ex, p.ids, 0, p.spans["from"][0]), plan, layer)
        lp = next_token_logprobs(model, [p, p], [spec, None])
        inj.append(float(lp[0, yes] - lp[0, no]))
        clean.append(float(lp[1, yes] - lp[1, no]))
    return sum(inj) / len(inj), sum(clean) / len(clean)


@pytest.fixture(scope="module")
def trained(tiny_dir, words_file, tmp_path_factory):
    """A fresh tiny llama trained for 60 steps (the session's shared tiny model stays untouched)."""
    model = load_model(str(tiny_dir("llama")))
    cfg = tiny_cfg(words_file)
    plan = L.prepare(model, cfg)
    before = yes_minus_no(model, plan, cfg.layer, plan.train[:6])
    base_fp = model_info(model).fingerprint
    stats = L.StepStats()
    out = tmp_path_factory.mktemp("adapter") / "a"
    summary = L.train(model, cfg, out, progress=False, stats=stats)
    return {"model": model, "cfg": cfg, "plan": plan, "before": before, "stats": stats, "out": out,
            "summary": summary, "base_fp": base_fp}


def test_loss_falls(trained):
    losses = [r["loss"] for r in trained["stats"].log]
    assert len(losses) == 60
    assert sum(losses[-8:]) / 8 < sum(losses[:8]) / 8 - 0.3


def test_hook_fires_on_exactly_the_injected_positions(trained, words_file):
    """Every injected row adds its vector from the mark through its last answer token, and no
    other position: the count over the whole run equals the rows' own arithmetic."""
    cfg, plan = trained["cfg"], trained["plan"]
    tok = trained["model"].tokenizer
    expected = 0
    for step in range(cfg.steps):
        rows = D.step_examples(step, seed=cfg.seed, batch_size=cfg.batch_size, train=plan.train,
                               phrasings=cfg.phrasings, strength=cfg.strength, n_trials=cfg.n_trials,
                               replay_frac=cfg.replay_frac, n_replay=len(plan.replay), mix=cfg.mix)
        for ex in rows:
            if ex.kind in D.INJECTED_KINDS:
                enc = D.encode(tok, ex, plan.replay)
                expected += len(enc.ids) - enc.from_pos
    assert expected > 0
    assert trained["stats"].fired == expected


def test_adapter_moves_the_answer_under_injection(trained):
    """Before training the injected and clean prompts lean the same way; after it the injected
    one leans to "Yes" by a clear margin more than the clean one, on training concepts."""
    model, plan, cfg = trained["model"], trained["plan"], trained["cfg"]
    inj0, clean0 = trained["before"]
    inj1, clean1 = yes_minus_no(model, plan, cfg.layer, plan.train[:6])
    assert (inj1 - clean1) - (inj0 - clean0) > 0.15


def test_save_load_identical_logits_and_own_identity(trained, tiny_dir):
    model, out = trained["model"], trained["out"]
    loaded = load_model(str(tiny_dir("llama")), adapter=out)
    p = D.render(model.tokenizer, D.detection_conv("short", 1))
    ids = torch.tensor([p.ids])
    with torch.no_grad():
        a, b = model(ids), loaded(ids)
    assert torch.allclose(a, b, atol=1e-4), float((a - b).abs().max())
    base = load_model(str(tiny_dir("llama")))
    with torch.no_grad():
        assert not torch.allclose(base(ids), b, atol=1e-3)  # the adapter does change the model
    info, meta = model_info(loaded), json.loads((out / lora.META_FILE).read_text())
    assert info.fingerprint == f"{trained['base_fp']}+{meta['adapter_hash']}" != trained["base_fp"]
    assert info.name.endswith("+" + meta["adapter_hash"].replace(":", "-")[:13])
    card = json.loads(next(n for n in info.notes if n.startswith("model card: "))[len("model card: "):])
    assert card["adapter"] == meta["adapter_hash"] and card["fingerprint"] == info.fingerprint
    note = json.loads(next(n for n in info.notes if n.startswith(lora.ADAPTER_NOTE))[len(lora.ADAPTER_NOTE):])
    assert note["training"]["steps"] == 60 and note["layer"] == 1
    _, cache_a = base.run_with_cache(ids)
    _, cache_b = loaded.run_with_cache(ids)
    assert set(cache_a.keys()) == set(cache_b.keys())  # every TL hook name still fires
    # the adapter dir is a plain peft adapter on HF-native module names
    cfg = json.loads((out / lora.CONFIG_FILE).read_text())
    assert cfg["target_modules"] and all("_original_component" not in t for t in cfg["target_modules"])
    assert all(".layers.2." in t or ".layers.3." in t for t in cfg["target_modules"])


@pytest.mark.parametrize("family", ["llama", "gpt2", "gpt-neox", "falcon"])
def test_gradients_reach_the_adapter_and_nothing_else(tiny_dir, words_file, tmp_path, family):
    """Every LoRA map gets a gradient (none sits on a module the HF forward never calls, such as
    the bridge's split GPT-2 attention), nothing else does, and the saved adapter loads with peft
    on the plain HF model and computes there what it computed attached: Falcon's bridge runs
    attention through q/k/v maps it splits off ``query_key_value``, and their adapters are saved
    as one LoRA on that map (``train.fused``). Falcon asks for eager attention by name: under sdpa
    the bridge runs HF's own attention (``query_key_value``, nothing split), and whether Falcon may
    switch to sdpa is decided by a heuristic transformers caches per class (set by hand, it
    reproduces this test's failure in 2 of 3 CI runs on 2026-12-03)."""
    import transformers
    from peft import PeftModel

    attn = "eager" if family == "falcon" else "auto"
    model = load_model(str(tiny_dir(family)), attn_implementation=attn)
    base_fp = model_info(model).fingerprint
    cfg = tiny_cfg(words_file, steps=1)
    plan = L.prepare(model, cfg)
    params = lora.attach(model, cfg.layer, cfg.rank, cfg.lora_alpha)
    names = {n for n, p in model.named_parameters() if p.requires_grad}
    assert names and all("lora_" in n for n in names) and len(params) == len(names)
    after = {id(p) for i in (2, 3) for p in model.blocks[i].parameters()}
    assert all(id(p) in after for p in params)  # only blocks after layer 1
    with torch.no_grad():  # B starts at 0 (no gradient reaches A yet): nudge it to see both
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.01)
    rows = D.step_examples(0, seed=0, batch_size=8, train=plan.train, phrasings=cfg.phrasings,
                           strength=cfg.strength, n_trials=2, replay_frac=0.25, n_replay=len(plan.replay),
                           mix=cfg.mix)
    loss, _ = L.step_loss(model, plan, cfg, rows)
    loss.backward()
    for n, p in model.named_parameters():
        if "lora_" in n:
            assert p.grad is not None and float(p.grad.abs().sum()) > 0, n
        else:
            assert p.grad is None, n
    lora.save_adapter(model, tmp_path, layer=cfg.layer, meta={"base_fingerprint": base_fp})
    plain = transformers.AutoModelForCausalLM.from_pretrained(tiny_dir(family))
    loaded = PeftModel.from_pretrained(plain, tmp_path)  # every target is a module of the plain model
    groups, _ = model.introspect_lora_fused
    assert bool(groups) == (family == "falcon")  # only Falcon's bridge computes through maps HF lacks
    fused_away = sum(len(ps) - 1 for ps in groups.values()) * 2  # k parts' A and B become one A and B
    assert sum("lora_" in n for n, _ in loaded.named_parameters()) == len(params) - fused_away
    ids = torch.tensor([D.render(model.tokenizer, D.detection_conv("short", 1)).ids])
    with torch.no_grad():
        attached, on_plain = model(ids), loaded(input_ids=ids).logits
        moved = float((attached - load_model(str(tiny_dir(family)), attn_implementation=attn)(ids)).abs().max())
    assert moved > 1e-3  # the nudged adapter changes the model, so agreeing below is a real check
    assert torch.allclose(attached, on_plain, atol=1e-4), float((attached - on_plain).abs().max())
    merged = load_model(str(tiny_dir(family)), adapter=tmp_path, attn_implementation=attn)  # merge before boot
    with torch.no_grad():
        assert torch.allclose(attached, merged(ids), atol=1e-4)
    before = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
    with torch.no_grad():
        for p in params:
            p.zero_()
    state = lora.read_adapter(tmp_path)[1]
    lora.load_adapter_state(model, state)  # a resume: the saved form back to the parts
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters() if "lora_" in n)
    key = sorted(k for k in state if not any(g in k for g in groups))[-1]  # saved under a name this
    # model's adapter lacks, as earlier versions saved GPT-2's c_attn (under the bridge's attn.qkv)
    renamed = {k.replace(".lora_", ".alias.lora_") if k == key else k: v for k, v in state.items()}
    with pytest.raises(lora.AdapterError, match=r"\(1 missing, e\.g\. .*; 1 unexpected, e\.g\. .*alias"):
        lora.load_adapter_state(model, renamed)


def test_shared_prefix_pass_is_exact(tiny_dir, words_file):
    """Running the shared preamble once without gradient gives the same losses as full rows."""
    model = load_model(str(tiny_dir("llama")))
    cfg = tiny_cfg(words_file, phrasings=("paper",))
    plan = L.prepare(model, cfg, replay=[])
    rows = [D.Example("positive", "paper", 3, "lemon", None, 0.8, answer=D.YES.format(word="lemon")),
            D.Example("clean", "paper", 1, answer=D.NO),
            D.Example("gaussian", "paper", 2, None, None, 0.6, 7, D.NO)]
    encs = [D.encode(model.tokenizer, ex) for ex in rows]
    specs = [L.spec_for(ex, e, plan, cfg.layer) for ex, e in zip(rows, encs)]
    stats = L.StepStats()
    with torch.no_grad():
        shared = L.group_loss(model, encs, specs, share_prefix=True, stats=stats)
        full = L.group_loss(model, encs, specs, share_prefix=False)
    assert torch.allclose(shared, full, atol=1e-4), (shared, full)
    assert stats.grad_tokens < sum(len(e.ids) for e in encs) / 2  # most of the preamble ran without grad


def test_logged_first_token_probability_is_the_models_own(tiny_dir, words_file):
    """A row's logged P(first answer token) is what the model gives that token after the prompt
    under the row's injection, in both framings (two_turn injects turn 1 only): the training
    log's per-kind reading (``train.losses``) measures the adapter, not an artefact of the loss."""
    from introspect.engine.run.chat import Prompt
    from introspect.engine.run.decode import next_token_logprobs

    model = load_model(str(tiny_dir("llama")))
    cfg = tiny_cfg(words_file, phrasings=("paper", "two_turn"))
    plan = L.prepare(model, cfg, replay=[])
    for phrasing in ("paper", "two_turn"):
        rows = [D.Example("positive", phrasing, 3, "lemon", None, 0.8, answer=D.YES.format(word="lemon")),
                D.Example("clean", phrasing, 1, answer=D.NO),
                D.Example("gaussian", phrasing, 2, None, None, 1.2, 7, D.NO)]
        encs = [D.encode(model.tokenizer, ex) for ex in rows]
        specs = [L.spec_for(ex, e, plan, cfg.layer) for ex, e in zip(rows, encs)]
        got: list[float] = []
        with torch.no_grad():
            L.group_loss(model, encs, specs, p_first=got)
        cut = [Prompt(e.ids[:len(e.ids) - e.n_answer], "") for e in encs]
        lp = next_token_logprobs(model, cut, specs)
        want = [float(lp[i, e.ids[len(e.ids) - e.n_answer]].exp()) for i, e in enumerate(encs)]
        assert got == pytest.approx(want, rel=1e-3, abs=1e-6), (phrasing, got, want)
        assert got[0] != pytest.approx(got[1], rel=1e-3) or got[2] != pytest.approx(got[1], rel=1e-3)
        # --decision-weight w: that token's NLL counts w times in the row's mean, the rest once
        with torch.no_grad():
            one = L.group_loss(model, encs, specs)
            heavy = L.group_loss(model, encs, specs, decision_weight=5.0)
        for i, e in enumerate(encs):
            x0, n = -math.log(got[i]), e.n_answer
            assert float(heavy[i]) == pytest.approx((5 * x0 + n * float(one[i]) - x0) / (n + 4), rel=1e-4)


def test_training_log_keeps_every_detection_row(trained, capsys):
    """Each log line lists the step's detection rows (kind, framing, strength, loss, P(first
    token)), as many as the step drew, their losses averaging to the step's detection loss;
    ``--losses DIR`` prints the table, and a bad --windows is one line and exit 2."""
    from experiments import train_aware
    from introspect.train import losses as LS

    cfg, plan, log = trained["cfg"], trained["plan"], trained["stats"].log
    for entry in log[:5]:
        rows = D.step_examples(entry["step"] - 1, seed=cfg.seed, batch_size=cfg.batch_size, train=plan.train,
                               phrasings=cfg.phrasings, strength=cfg.strength, n_trials=cfg.n_trials,
                               replay_frac=cfg.replay_frac, n_replay=len(plan.replay), mix=cfg.mix)
        det = [ex for ex in rows if ex.kind != "replay"]
        assert [r[:3] for r in entry["rows"]] == [[ex.kind, ex.phrasing, round(ex.strength, 3)] for ex in det]
        assert all(0 < r[4] <= 1 and r[3] > 0 for r in entry["rows"])
        assert sum(r[3] for r in entry["rows"]) / len(det) == pytest.approx(entry["loss_detect"], abs=1e-3)
    table = LS.by_kind(LS.read_log(trained["out"]), windows=2)
    assert set(table.kind) == {"positive", "clean"} and table.n.sum() == sum(len(e["rows"]) for e in log)
    capsys.readouterr()
    assert train_aware.main(["--losses", str(trained["out"]), "--windows", "2"]) == 0
    out = capsys.readouterr().out
    assert "positive" in out and "31-60" in out
    assert train_aware.main(["--losses", str(trained["out"]), "--windows", "1", "--bands", "0.5", "0.75", "1"]) == 0
    assert "(0.75, 1.0]" in capsys.readouterr().out
    for bad, name in ((["--windows", "0"], "--windows 0"), (["--bands", "1", "0.5"], "--bands 1 0.5")):
        assert train_aware.main(["--losses", str(trained["out"]), *bad]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and name in err[0]


def test_resume_from_checkpoint_gives_the_same_adapter(tiny_dir, words_file, tmp_path, monkeypatch, capsys):
    from introspect.train import replay as R

    cfg = tiny_cfg(words_file, steps=6, checkpoint_every=2)
    generated = []
    monkeypatch.setattr(R, "build_replay", lambda *a, real=R.build_replay, **k: generated.append(1) or real(*a, **k))
    ref = L.train(load_model(str(tiny_dir("llama"))), cfg, tmp_path / "ref", progress=False)
    assert ref["replay_from_cache"] is False and len(generated) == 1
    real = L.step_loss
    calls = {"n": 0}

    def dying(*a, **k):
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(L, "step_loss", dying)
    with pytest.raises(KeyboardInterrupt):
        L.train(load_model(str(tiny_dir("llama"))), cfg, tmp_path / "b", progress=False)
    assert (tmp_path / "b" / L.CHECKPOINT).is_file() and not (tmp_path / "b" / lora.META_FILE).exists()
    monkeypatch.setattr(L, "step_loss", real)
    again = L.train(load_model(str(tiny_dir("llama"))), cfg, tmp_path / "b", progress=False)
    assert again["steps_this_run"] == 2
    assert len(generated) == 1  # the interrupted run read the replay cache; the resume, its checkpoint
    assert again["adapter_hash"] == ref["adapter_hash"]
    assert not (tmp_path / "b" / L.CHECKPOINT).exists()
    # what produced them agrees too, and --diff says so
    from experiments import train_aware

    metas = [json.loads((tmp_path / d / lora.META_FILE).read_text())["provenance"] for d in ("ref", "b")]
    assert metas[0]["inputs"] == metas[1]["inputs"] and len(metas[0]["inputs"]) == 4
    capsys.readouterr()
    assert train_aware.main(["--diff", str(tmp_path / "ref"), str(tmp_path / "b")]) == 0
    assert "the same weights" in capsys.readouterr().out


def test_adapter_records_what_produced_it_and_diff_names_where_two_part(trained, tmp_path, capsys):
    """``introspect_adapter.json`` holds library versions, the CPU kernels and a digest of each
    input the base model computed (equal to the plan's own); ``--diff`` names the differences,
    config before versions, and refuses a directory that is not an adapter in one line."""
    from importlib.metadata import version

    from experiments import train_aware
    from introspect.train import provenance as P

    out, plan = trained["out"], trained["plan"]
    prov = json.loads((out / lora.META_FILE).read_text())["provenance"]
    assert prov["versions"]["torch"] == version("torch") and prov["versions"]["peft"] == version("peft")
    assert prov["machine"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert prov["inputs"] == L.plan_inputs(plan) and prov["inputs"]["vectors"] == P.digest_tensors(plan.vectors)
    w = plan.train[0]
    nudged = {**plan.vectors, w: plan.vectors[w] + torch.finfo(torch.float32).eps * plan.vectors[w].abs().max()}
    assert P.digest_tensors(nudged) != prov["inputs"]["vectors"]  # one ulp-sized change is seen

    other = tmp_path / "other"
    shutil.copytree(out, other)
    meta = json.loads((other / lora.META_FILE).read_text())
    assert P.differences(meta, meta) == []
    meta["training"] = {**meta["training"], "lr": 0.5}
    meta["provenance"]["inputs"]["replay"] = "sha256:" + "0" * 64
    meta["provenance"]["versions"]["torch"] = "0.0"
    (other / lora.META_FILE).write_text(json.dumps(meta))  # the weights, and so their hash, unchanged
    capsys.readouterr()
    assert train_aware.main(["--diff", str(out), str(other)]) == 0
    assert "the same weights" in capsys.readouterr().out  # equal hashes: nothing else is compared
    meta["adapter_hash"] = "lora:other"
    first = json.loads((out / lora.META_FILE).read_text())
    lines = P.differences(first, meta)
    assert lines[0].startswith("weights: ") and lines[1] == "training.lr: 0.01 vs 0.5"
    assert lines[2].startswith("inputs.replay: sha256:") and lines[3] == f"versions.torch: {version('torch')} vs 0.0"
    assert "inputs.vectors" not in " ".join(lines)
    same = {**first, "adapter_hash": "lora:other"}  # every recorded cause equal, the weights not
    assert P.differences(first, same)[1:] == ["every recorded cause agrees: the training steps themselves computed "
                                              "differently (kernels or thread order these fields do not capture)"]
    assert all("every recorded cause" not in x for x in lines)
    before = P.differences({k: v for k, v in first.items() if k != "provenance"}, meta)  # an older adapter
    assert "inputs: not recorded in the first" in before and "versions: not recorded in the first" in before
    assert train_aware.main(["--diff", str(out), str(tmp_path / "nowhere"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "nowhere" in err, err


def test_adapter_scale_scales_the_weight_change_and_names_the_model(trained, tiny_dir, capsys):
    """``adapter_scale=s`` merges s times the adapter's weight change, in every adapted matrix,
    and the result is a model of its own (name, fingerprint and card carry the scale); scale 1
    is the adapter as trained, under its old name. Bad scales fail before any load."""
    path, out = str(tiny_dir("llama")), trained["out"]
    base, full = load_model(path), load_model(path, adapter=out, adapter_scale=1)
    half = load_model(path, adapter=out, adapter_scale=0.5)
    b, f, h = (dict(m.original_model.named_parameters()) for m in (base, full, half))
    moved = [k for k in b if not torch.equal(b[k], f[k])]
    assert moved and all(".layers.2." in k or ".layers.3." in k for k in moved)
    for k in b:
        torch.testing.assert_close(h[k] - b[k], 0.5 * (f[k] - b[k]), atol=2e-6, rtol=0)
    info_f, info_h = model_info(full), model_info(half)
    assert info_h.name == info_f.name + "x0.5" and info_h.fingerprint == info_f.fingerprint + "x0.5"
    assert not info_f.name.endswith("x1")
    card = json.loads(next(n for n in info_h.notes if n.startswith("model card: "))[len("model card: "):])
    assert card["scale"] == 0.5 and card["fingerprint"] == info_h.fingerprint
    for bad in (0, -1, float("nan"), float("inf"), "half", True):
        with pytest.raises(ModelError, match="adapter scale must be a finite number > 0"):
            load_model(path, adapter=out, adapter_scale=bad)
    with pytest.raises(ModelError, match="needs an adapter"):
        load_model(path, adapter_scale=0.5)
    # --gates DIR --adapter-scale S: bad input is one line, before any load
    from experiments import train_aware

    capsys.readouterr()
    for argv in (["--gates", str(out), "--adapter-scale", "0"], ["--adapter-scale", "0.5"],
                 ["--gates", str(out.parent / "nowhere")], ["--gates", str(out), "--out", str(out / lora.META_FILE)],
                 ["--gates", str(out), "--twins", "0"], ["--twins", "3"], ["--yardsticks"],
                 ["--gates", str(out), "--yardsticks", "fp8"], ["--gates", str(out), str(out)],
                 ["--gates", str(out), str(out.parent / "nowhere")]):  # every DIR checked before measuring
        assert train_aware.main([*argv, "--no-progress"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and "\n" not in err, err
    assert not list(out.glob("damage_gates_*"))


@pytest.mark.slow  # four gate measurements, ~25 s
def test_gates_measured_again_on_the_saved_adapter_at_a_scale(trained, tiny_dir, monkeypatch, tmp_path, capsys):
    """``train_aware --gates DIR --adapter-scale S``: the gates run on the model ``run --adapter
    DIR --adapter-scale S`` evaluates (the adapter attached live and scaled gives the merged
    model's log-probs), with the training's split; at scale 1 they read what training's model
    reads."""
    from introspect.train import gates as G
    from introspect.train.remeasure import saved_gates

    model, plan, cfg, out = trained["model"], trained["plan"], trained["cfg"], trained["out"]
    path = str(tiny_dir("llama"))
    p = D.render(model.tokenizer, D.detection_conv("short", 1))
    seen = {}
    real = G.damage_gates

    def spy(m, pl, c, *rest):
        seen["lp"], seen["split"] = next_token_logprobs(m, [p])[0], (pl.train, pl.heldout)
        return real(m, pl, c, *rest)

    monkeypatch.setattr(G, "damage_gates", spy)
    again = saved_gates(out, 0.5)
    merged = next_token_logprobs(load_model(path, adapter=out, adapter_scale=0.5), [p])[0]
    full = next_token_logprobs(load_model(path, adapter=out), [p])[0]
    assert torch.allclose(seen["lp"], merged, atol=1e-4) and not torch.allclose(seen["lp"], full, atol=1e-3)
    assert seen["split"] == (plan.train, plan.heldout) and again["scale"] == 0.5
    now, one = real(model, plan, cfg), saved_gates(out)
    for k in ("content_answers", "content_answers_base", "detection_phrases", "detection_phrases_base", "content_n"):
        assert one[k] == now[k], k
    # --out: the report goes elsewhere, the adapter folder is untouched
    from experiments import train_aware

    capsys.readouterr()
    assert train_aware.main(["--gates", str(out), "--adapter-scale", "0.5", "--out", str(tmp_path / "g"),
                             "--twins", "2", "--no-progress"]) == 0
    wrote = json.loads((tmp_path / "g" / "damage_gates_x0.5.json").read_text())
    printed = capsys.readouterr().out.splitlines()
    assert [y["name"] for y in wrote["replay_yardsticks"]] == ["q6"] and set(wrote["passed"]) == set(G.GATES)
    control = [x for x in printed if x.startswith("positive control: ")]  # read from all_passed
    assert len(control) == 1 and (control[0] == "positive control: yes (every damage gate passed)") is wrote["all_passed"]
    assert wrote["scale"] == 0.5 and wrote["adapter_hash"] == again["adapter_hash"]
    assert len(wrote["replay_random_twins"]) == 2 and len(again["replay_random_twins"]) == 1
    assert wrote["replay_random_twins"][0] == again["replay_random_twins"][0]  # the first twin: the default one
    assert not list(out.glob("damage_gates_*"))


def test_adapter_refused_when_tampered_or_for_other_weights(trained, tiny_dir, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(trained["out"], bad)
    meta = json.loads((bad / lora.META_FILE).read_text())
    (bad / lora.META_FILE).write_text(json.dumps({**meta, "base_fingerprint": "sha256:0000"}))
    with pytest.raises(ModelError, match="was trained on"):
        load_model(str(tiny_dir("llama")), adapter=bad)
    (bad / lora.META_FILE).write_text(json.dumps({**meta, "adapter_hash": "lora:0000"}))
    with pytest.raises(ModelError, match="do not match their recorded hash"):
        load_model(str(tiny_dir("llama")), adapter=bad)
    with pytest.raises(ModelError, match="not an adapter directory"):
        load_model(str(tiny_dir("llama")), adapter=tmp_path / "nowhere")
    # an adapter whose hash holds but one tensor names a module this model lacks (as GPT-2
    # adapters saved under the bridge's `attn.qkv` did): peft would leave that LoRA at zero
    from safetensors.torch import load_file, save_file

    old = tmp_path / "old"
    shutil.copytree(trained["out"], old)
    state = load_file(str(old / lora.WEIGHTS_FILE))
    key = next(k for k in sorted(state) if ".q_proj.lora_A." in k)
    state[key.replace(".q_proj.", ".q.")] = state.pop(key)
    save_file(state, str(old / lora.WEIGHTS_FILE))
    config = json.loads((old / lora.CONFIG_FILE).read_text())
    (old / lora.META_FILE).write_text(json.dumps({**meta, "adapter_hash": lora.state_hash(state, lora.hash_config(config))}))
    with pytest.raises(ModelError, match=r"1 of its tensors name modules this model lacks \(e.g. .*\.q\.lora_A"):
        load_model(str(tiny_dir("llama")), adapter=old)


def test_split_holds_out_every_target_and_training_list_is_clean():
    words = load_words()
    train_words, replay = D.load_train_words()
    assert len(train_words) >= 200 and len(replay) >= 10
    clash = [w for w in train_words for t in (*words.targets, *words.baseline) if word_match(w, t)]
    assert clash == []
    train, held = D.split_concepts(train_words, words.targets, words.baseline, seed=0, heldout_frac=0.1)
    assert set(words.targets) <= set(held) and not set(train) & set(held)
    assert len(train) >= 200 and len(held) == len(words.targets) + round(0.1 * len(train_words))
    again, _ = D.split_concepts(train_words, words.targets, words.baseline, seed=0, heldout_frac=0.1)
    other, _ = D.split_concepts(train_words, words.targets, words.baseline, seed=1, heldout_frac=0.1)
    assert again == train and other != train
    # words task A's own prompts contain (e.g. "sun" of a bias question) enter neither list
    texts = D.task_a_texts()
    assert any("sun" in t for t in texts) and "sun" in train_words
    t2, h2 = D.split_concepts(train_words, words.targets, words.baseline, seed=0, heldout_frac=0.1, avoid=texts)
    dropped = set(train_words) - set(t2) - set(h2)
    assert "sun" in dropped and not any(P.leaks(t, w) for t in texts for w in [*t2, *h2[len(words.targets):]])
    assert len(t2) >= 200 and set(words.targets) <= set(h2)
    text = (Path(__file__).resolve().parents[1] / "concepts" / "train_words.yaml").read_text()
    header = " ".join(line.lstrip("# ") for line in text.splitlines() if line.startswith("#"))
    assert "WordNet 3.0 Copyright 2006 by Princeton University" in header  # the licence's notice


def test_step_rows_are_balanced_and_deterministic():
    kw = dict(seed=3, batch_size=8, train=WORDS, phrasings=D.PHRASINGS, strength=(0.2, 0.9), n_trials=5,
              replay_frac=0.25, n_replay=4)
    assert D.step_examples(7, **kw) == D.step_examples(7, **kw)
    rows = [r for s in range(400) for r in D.step_examples(s, **kw)]
    det = [r for r in rows if r.kind != "replay"]
    assert len(rows) - len(det) == 400 * 2
    yes = sum(r.answer.startswith("Yes") for r in det) / len(det)
    assert 0.45 < yes < 0.55
    assert all(0.2 <= r.strength <= 0.9 for r in det if r.kind in D.INJECTED_KINDS)
    assert all(r.claimed and r.claimed != r.concept for r in det if r.kind == "mismatch")
    conv = D.detection_conv("paper", 4, claim="lemon")
    assert "I am injecting a thought about lemon" in conv.messages[-1]["content"]
    assert conv.marks["from"] == "\n\nTrial 4"


def test_wordnet_rule_on_a_tiny_excerpt():
    from introspect.train.wordlist import concrete_nouns

    index = ["lamp n 1 1 @ 1 1 00000001  ", "europe n 1 1 @ 1 1 00000002  ", "idea n 1 1 @ 1 1 00000003  ",
             "run n 1 1 @ 1 1 00000004  "]
    data = ["00000001 06 n 01 lamp 0 000 | a light", "00000002 15 n 01 Europe 0 000 | a place",
            "00000003 09 n 01 idea 0 000 | a thought", "00000004 06 n 01 run 0 000 | a thing"]
    cnt = ["lamp%1:06:00:: 1 9", "europe%1:15:00:: 1 50", "idea%1:09:00:: 1 40", "run%1:06:00:: 1 5",
           "run%2:38:00:: 1 60"]
    assert concrete_nouns(index, data, cnt) == [("lamp", 9)]  # Europe: a name; idea: abstract; run: a verb


def test_cli_bad_input_is_one_line_and_writes_nothing(tiny_dir, tmp_path, capsys):
    from experiments import train_aware

    model_dir = str(tiny_dir("llama"))
    capsys.readouterr()  # the fixture's own output, if it just saved the model
    out = tmp_path / "never"
    for argv in (["--steps", "0"], ["--layer", "3"], ["--strength", "1", "0.5"], ["--lr", "nan"],
                 ["--mix", "gausian=0.3"], ["--mix", "gaussian=-1"], ["--mix", "gaussian"]):
        assert train_aware.main(["--model", model_dir, "--out", str(out), "--no-progress", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and "\n" not in err, err
        assert not out.exists()
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "notes.txt").write_text("mine")
    assert train_aware.main(["--model", model_dir, "--out", str(junk), "--no-progress"]) == 2
    assert "not an adapter directory" in capsys.readouterr().err
    assert sorted(p.name for p in junk.iterdir()) == ["notes.txt"]


def test_run_and_compare_with_adapter_side_by_side(trained, tiny_dir, tmp_path, capsys):
    """``experiments.run --adapter`` writes the adapted model beside its base (own folder, own
    fingerprint, adapter in the header); ``experiments.compare --adapter`` names the pair."""
    from experiments import compare, run

    out, adapter = tmp_path / "results", trained["out"]
    common = ["--task", "A", "--layers", "1", "--alphas", "0.75", "--alpha-units", "resid", "--n-concepts", "2",
              "--max-new-tokens", "4", "--option", "n_bias=1", "--variant", "paper", "--out", str(out), "--no-progress"]
    assert run.main(["--model", str(tiny_dir("llama")), *common]) == 0
    assert run.main(["--adapter", str(adapter), *common]) == 0  # --model defaults to the adapter's base
    meta = json.loads((adapter / lora.META_FILE).read_text())
    folders = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert folders == ["llama", "llama+" + meta["adapter_hash"].replace(":", "-")[:13]]
    header = json.loads((out / folders[1] / "A.jsonl").read_text().splitlines()[0])
    assert header["fingerprint"].endswith("+" + meta["adapter_hash"])
    assert any(n.startswith(lora.ADAPTER_NOTE) for n in header["notes"])
    capsys.readouterr()
    for bad in (["--adapter", str(adapter), "--adapter-scale", "0"], ["--adapter", str(adapter), "--adapter-scale", "nan"],
                ["--adapter-scale", "0.5", "--model", str(tiny_dir("llama"))]):
        assert run.main([*bad, *common]) == 2  # one line, before any load or write
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and "\n" not in err and "adapter" in err, err
    assert run.main(["--adapter", str(adapter), "--adapter-scale", "0.5", *common]) == 0  # a model of its own
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == [*folders, folders[1] + "x0.5"]
    assert compare.main([str(out), "--adapter", str(adapter)]) == 0
    html = (out / "compare.html").read_text()
    assert f"adapter {meta['adapter_hash']} at layer 1" in html
    vb = pd.read_csv(out / "vs_base.csv")  # each adapted model minus its base, paired by concept
    assert sorted(vb["metric"]) == ["latent_beyond_steering_vs_base"] * 2 + ["net_vs_base"] * 2 + ["net_vs_random_vs_base"] * 2
    assert sorted(set(vb["model_id"])) == [f"{folders[1]} − llama", f"{folders[1]}x0.5 − llama"]
    assert (vb["n_clusters"] == 2).all()
    printed = capsys.readouterr().out
    assert "net_vs_base" in printed and "net_vs_base" in html and "paired by concept" in printed
    assert compare.main([str(out / "llama"), "--adapter", str(adapter)]) == 2  # the adapted run is elsewhere
    assert "no results of adapter" in capsys.readouterr().err
    # A second training of the same recipe on another seed (constructed: the adapter's metadata and
    # its results copied under a new hash): the two are pooled with the training as the unit.
    for seed, name in ((meta["training"]["seed"] + 1, "b"), (meta["training"]["seed"], "c")):
        _as_other_training(adapter, out, folders[1], tmp_path / name, seed, f"lora:{name * 16}")
        assert compare.main([str(out), "--adapter", str(adapter), "--adapter", str(tmp_path / name),
                             "--out", str(tmp_path / f"cmp-{name}" / "compare.html")]) == 0
    printed = capsys.readouterr().out
    vb = pd.read_csv(tmp_path / "cmp-b" / "vs_base.csv")
    pooled = vb[vb["metric"].str.endswith("_replication")]
    assert sorted(pooled["metric"]) == ["latent_beyond_steering_vs_base_replication", "net_vs_base_replication",
                                        "net_vs_random_vs_base_replication", "verdict_replication"]
    assert 'task A verdict: "detected and identified" in 0 of 2 trainings' in printed
    assert (pooled["n_clusters"] == 2).all() and (pooled["trainings_cleared"] == 0).all()  # 2 concepts: no interval
    assert "across trainings of one recipe" in printed and "0 of 2 trainings" in printed
    assert "not pooled: trainings share seed" in printed  # c: the first adapter's own seed
    assert not (pd.read_csv(tmp_path / "cmp-c" / "vs_base.csv")["metric"].str.endswith("_replication")).any()


def _as_other_training(adapter: Path, results: Path, folder: str, dest: Path, seed: int, tag: str) -> None:
    """Copy an adapter directory and its results as if another training (``tag``, ``seed``) made them."""
    shutil.copytree(adapter, dest)
    meta = json.loads((dest / lora.META_FILE).read_text())
    old_hash, old_short, new_short = meta["adapter_hash"], folder.rsplit("+", 1)[1], tag.replace(":", "-")[:13]
    meta["adapter_hash"], meta["training"]["seed"] = tag, seed
    (dest / lora.META_FILE).write_text(json.dumps(meta))
    new_folder = folder.replace(old_short, new_short)
    (results / new_folder).mkdir()
    for f in (results / folder).glob("*.jsonl"):
        recs = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
        for r in recs:
            for k in ("model_id", "fingerprint", "run_id"):
                if isinstance(r.get(k), str):
                    r[k] = r[k].replace(old_hash, tag).replace(old_short, new_short)
            if r.get("trial_id"):
                r["trial_id"] += "-" + tag  # another training's trials are other trials
        (results / new_folder / f.name).write_text("".join(json.dumps(r) + "\n" for r in recs))


@pytest.fixture(scope="module")
def real_adapter(tmp_path_factory):
    """A reduced run on the embedded default (SmolLM2-135M, layer 20 of 30), the default rows."""
    model = load_model("smollm2-135m-instruct")  # a fresh copy: training attaches LoRA in place
    out = tmp_path_factory.mktemp("real") / "a"
    cfg = L.TrainConfig(layer=20, steps=80, phrasings=("paper", "short"), replay_prompts=8, gates=False)
    return model, out, L.train(model, cfg, out, progress=False)


def _task_a_net(adapter: Path, words_file: Path, out: Path, n_concepts: int = 6):
    """Task A through the CLI with the saved adapter, sampled at T = 1 with a control per
    concept, in the trained paper framing: the report's Net row."""
    from experiments import run
    from introspect.report import load_results, summarize

    argv = ["--adapter", str(adapter), "--task", "A", "--variant", "paper", "--layers", "20",
            "--alphas", "0.6", "--alpha-units", "resid", "--n-concepts", str(n_concepts), "--samples", "2",
            "--max-new-tokens", "12", "--option", "steer_check=false", "--option", "n_bias=5",
            "--words-file", str(words_file), "--out", str(out), "--no-progress"]
    assert run.main(argv) == 0
    s = summarize(load_results(out))
    return s[(s.metric == "net") & (s.variant == "paper")].iloc[0]


@pytest.mark.slow
def test_real_model_learns_to_report_injection_on_training_concepts(default_model, real_adapter, tmp_path):
    """Afterwards it says yes under injection and no on clean prompts, on training concepts
    (greedy), and the instrument's Net interval lies above 0 there."""
    from introspect.train.check import detection_check

    model, adapter, summary = real_adapter
    assert summary["loss_last"] < summary["loss_first"]
    train_words = yaml.safe_load((adapter / "words_train.yaml").read_text())["targets"][::36][:8]
    checks = [detection_check(model, train_words, 20, 0.6, trial=t) for t in (1, 2, 3)]
    yes_inj = sum(c["yes_injected"] for c in checks) / 3
    yes_clean = sum(c["yes_clean"] for c in checks) / 3
    assert yes_inj - yes_clean >= 0.5, (yes_inj, yes_clean, checks[0]["answers"], checks[0]["clean_answer"])
    # 12 concepts: at 6 the interval's lower end fell on either side of 0 by machine (−0.03 on an
    # AVX512 CPU, 2026-12-02, Net 0.42), which tests the concept count, not the adapter
    net = _task_a_net(adapter, adapter / "words_train.yaml", tmp_path / "results", n_concepts=12)
    assert net["n"] >= 6 and net["lo"] > 0, net.to_dict()


@pytest.mark.slow
def test_real_model_is_evaluated_on_concepts_held_out_by_meaning(default_model, real_adapter, tmp_path):
    """The slow test evaluates held-out concepts, never training ones, and the report gives their
    Net an interval. Whether 80 steps at layer 20 detect them is not asserted: it sits at the
    margin (Net 0.50 [0.007, 0.97] at 6 concepts on an AVX512 CPU, 2026-12-02; below 0 on the
    machines before, where a strict xfail held); the full recipe's held-out positive is measured in
    docs/positive-control.md."""
    from introspect.report import load_results
    from introspect.tasks.prompts import load_words

    _, adapter, _ = real_adapter
    net = _task_a_net(adapter, adapter / "words_heldout.yaml", tmp_path / "results")
    assert net["n"] >= 6 and math.isfinite(net["lo"]) and math.isfinite(net["hi"]), net.to_dict()
    heldout = set(load_words(adapter / "words_heldout.yaml").targets)
    train = set(load_words(adapter / "words_train.yaml").targets)
    recs = load_results(tmp_path / "results")
    seen = set(recs.loc[recs["condition"] == "injected", "word"].dropna())
    assert len(seen) >= 6 and seen <= heldout and not seen & train, (seen, heldout & seen)


def test_steered_replay_rows_inject_and_their_teacher_is_the_base_model_under_the_same_injection(tiny_dir, words_file):
    """A steered replay row injects a training concept from its last user turn through the
    answer; its target is the base model *under the same injection*: with the adapter at its
    init (B = 0, adapted = base) the distillation loss is 0 however strong the push, and a
    nudged adapter makes it positive. Without steering no replay row carries a concept."""
    model = load_model(str(tiny_dir("llama")))
    cfg = tiny_cfg(words_file, replay_distill=True, replay_steered=1.0, replay_frac=0.5)
    plan = L.prepare(model, cfg)
    lora.attach(model, cfg.layer, cfg.rank, cfg.lora_alpha)
    kw = dict(seed=0, batch_size=8, train=plan.train, phrasings=cfg.phrasings, strength=(2.0, 3.0), n_trials=2,
              replay_frac=0.5, n_replay=len(plan.replay), mix=cfg.mix)
    rows = [r for r in D.step_examples(0, replay_steered=1.0, **kw) if r.kind == "replay"]
    plain = [r for r in D.step_examples(0, **kw) if r.kind == "replay"]
    assert rows and all(r.concept in plan.train and r.strength >= 2.0 for r in rows)
    assert all(r.concept is None for r in plain)
    encs = [D.encode(model.tokenizer, ex, plan.replay) for ex in rows]
    specs = [L.spec_for(ex, e, plan, cfg.layer) for ex, e in zip(rows, encs)]
    for ex, e in zip(rows, encs):  # injected from the last user turn, never the template's first positions
        item = plan.replay[int(ex.replay or 0)]
        assert 0 < e.from_pos < len(e.ids) - e.n_answer
        text = model.tokenizer.decode(list(e.ids[e.from_pos:len(e.ids) - e.n_answer]))
        assert item.prompt.split()[0] in text
    stats = L.StepStats()
    with torch.no_grad():
        zero = L.group_loss(model, encs, specs, distill=True, stats=stats)
    assert stats.fired == sum(len(e.ids) - e.from_pos for e in encs)  # the adapted (student) pass injected
    assert float(zero.abs().max()) < 1e-5  # so the teacher pass did too: a clean teacher would differ
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05)
        nudged = L.group_loss(model, encs, specs, distill=True)
    assert float(nudged.min()) > 1e-6
    with pytest.raises(D.TrainDataError, match="replay_steered"):
        tiny_cfg(words_file, replay_steered=0.5)  # replay_distill off: the row would have no target
    with pytest.raises(D.TrainDataError, match="replay_weight"):
        tiny_cfg(words_file, replay_weight=0.0)


@pytest.mark.parametrize("family", ["llama", "gpt2", "gpt-neox", "falcon"])
def test_the_teachers_trunk_shared_with_the_student_is_exact_and_skips_those_blocks(tiny_dir, words_file, family):
    """Distillation with blocks 0..L run once (``train.trunk``) gives the losses and adapter
    gradients of two full passes, on steered replay rows (the injection at L still fires in the
    student's pass), and the student's pass does not run those blocks."""
    from introspect.train import trunk as T

    model = load_model(str(tiny_dir(family)))
    cfg = tiny_cfg(words_file, layer=1, replay_distill=True, replay_steered=1.0, replay_frac=0.5)
    plan = L.prepare(model, cfg)
    params = lora.attach(model, cfg.layer, cfg.rank, cfg.lora_alpha)
    before = [b.original_component.__dict__.get("forward") for b in model.blocks]  # some bridges patch it themselves
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05)
    kw = dict(seed=0, batch_size=8, train=plan.train, phrasings=cfg.phrasings, strength=(2.0, 3.0), n_trials=2,
              replay_frac=0.5, n_replay=len(plan.replay), mix=cfg.mix, replay_steered=1.0)
    steered = [r for r in D.step_examples(0, **kw) if r.kind == "replay"]
    plain = next(r for r in D.step_examples(0, **{**kw, "replay_steered": 0.0}) if r.kind == "replay")
    for rows, prefix in ((steered, False), ([plain, plain], True)):  # the same item twice: its prompt is shared
        encs = [D.encode(model.tokenizer, ex, plan.replay) for ex in rows]
        specs = [L.spec_for(ex, e, plan, cfg.layer) for ex, e in zip(rows, encs)]
        out = {}
        for trunk in (None, cfg.layer):
            calls = {"n": 0}
            inner = next(iter(model.blocks[0].original_component.children()))  # runs only if block 0 computes
            h = inner.register_forward_hook(lambda *_, c=calls: c.__setitem__("n", c["n"] + 1))
            stats = L.StepStats()
            loss = L.group_loss(model, encs, specs, distill=True, stats=stats, trunk=trunk)
            h.remove()
            loss.sum().backward()
            out[trunk] = (loss.detach(), [p.grad for p in params], calls["n"], stats)
            model.zero_grad(set_to_none=True)
        (full, g_full, n_full, s_full), (shared, g_shared, n_shared, s_shared) = out[None], out[cfg.layer]
        assert float(full.min()) > 1e-6  # the adapter moved the student: the test can tell teacher from student
        assert torch.allclose(shared, full, atol=1e-5, rtol=1e-4), (shared, full)
        assert [a is None for a in g_shared] == [b is None for b in g_full] and any(a is not None for a in g_full)
        assert all(torch.allclose(a, b, atol=1e-6, rtol=1e-3) for a, b in zip(g_shared, g_full) if a is not None)
        injected = 0 if prefix else sum(len(e.ids) - e.from_pos for e in encs)  # steered rows: L's hook still fires
        assert s_shared.fired == s_full.fired == injected
        assert (s_shared.grad_tokens < sum(len(e.ids) for e in encs)) == prefix  # the prefix's own pass ran in full
        assert n_full - n_shared == 1 and n_shared >= 1  # block 0 skipped in the student's main pass only
    with pytest.raises(T.TrunkError, match="adapter"):  # an adapter inside the trunk: not shared
        L.group_loss(model, encs, specs, distill=True, trunk=cfg.layer + 1)
    assert [b.original_component.__dict__.get("forward") for b in model.blocks] == before  # the blocks are put back


@pytest.mark.parametrize("family", ["llama", "gpt2", "gpt-neox", "falcon"])
def test_a_shared_prefix_below_the_adapter_runs_once_per_run_and_changes_nothing(tiny_dir, words_file, family):
    """``train.trunk.Prefixes``: a prefix seen before skips blocks 0..L (its layers 0..L's keys
    and values written back), and the losses and adapter gradients equal full passes bit for bit,
    for detection rows (one phrasing: a shared preamble) and distilled replay rows alike."""
    from introspect.train import trunk as T

    model = load_model(str(tiny_dir(family)))
    cfg = tiny_cfg(words_file, layer=1, replay_distill=True, replay_frac=0.5)
    plan = L.prepare(model, cfg)
    params = lora.attach(model, cfg.layer, cfg.rank, cfg.lora_alpha)
    assert lora.first_adapted(model) == cfg.layer + 1
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05)
    kw = dict(seed=0, batch_size=8, train=plan.train, phrasings=cfg.phrasings, strength=(2.0, 3.0), n_trials=2,
              replay_frac=0.5, n_replay=len(plan.replay), mix=cfg.mix)
    rows = D.step_examples(0, **kw)
    plain = next(r for r in rows if r.kind == "replay")
    groups = [([r for r in rows if r.kind != "replay"], False), ([plain, plain], True)]
    inner = next(iter(model.blocks[0].original_component.children()))  # runs only if block 0 computes
    prefixes = T.Prefixes(cfg.layer)
    for detect, distill in groups:
        encs = [D.encode(model.tokenizer, ex, plan.replay) for ex in detect]
        specs = [L.spec_for(ex, e, plan, cfg.layer) for ex, e in zip(detect, encs)]
        out = []
        for kept in (None, prefixes, prefixes):  # in full; the prefix's first time; seen before
            calls = {"n": 0}
            h = inner.register_forward_hook(lambda *_, c=calls: c.__setitem__("n", c["n"] + 1))
            stats = L.StepStats()
            loss = L.group_loss(model, encs, specs, distill=distill, stats=stats, trunk=cfg.layer, prefixes=kept)
            h.remove()
            loss.sum().backward()
            out.append((loss.detach(), [p.grad for p in params], calls["n"], stats.fired))
            model.zero_grad(set_to_none=True)
        (full, g_full, n_full, f_full), (first, g_first, n_first, _), (again, g_again, n_again, f_again) = out
        assert float(full.min()) > 1e-6 and any(g is not None for g in g_full)
        for loss, grads in ((first, g_first), (again, g_again)):
            assert torch.equal(loss, full), (loss, full)
            assert [a is None for a in grads] == [b is None for b in g_full]
            assert all(torch.equal(a, b) for a, b in zip(grads, g_full) if a is not None)
        assert f_again == f_full  # the rows' injections fired as before
        # block 0 left out of every prefix pass of a kept prefix: the first time, the replay
        # student's (its teacher's pass kept it); after that the teacher's too
        assert (n_full - n_first, n_full - n_again) == ((1, 2) if distill else (0, 1)), (n_full, n_first, n_again)
    assert (prefixes.misses, prefixes.hits) == (2, 1 + 3)
    with pytest.raises(T.TrunkError, match="adapter"):  # a prefix trunk through an adapted block: refused
        L.group_loss(model, encs, specs, distill=True, trunk=cfg.layer, prefixes=T.Prefixes(cfg.layer + 1))


def test_a_config_recorded_before_new_fields_is_the_same_config(words_file):
    """An adapter or checkpoint written before a field existed resumes and is recognised: its
    missing fields read as their defaults; a changed value is still another config."""
    cfg = tiny_cfg(words_file)
    old = {k: v for k, v in cfg.to_dict().items() if k not in ("replay_steered", "replay_weight", "share_trunk")}
    # replay_weight's default changed (1 → 8): a record without it was made at 1, today's default is not it
    assert L.TrainConfig(layer=1).replay_weight == 8.0 and cfg.replay_weight == 1.0  # tiny_cfg pins the old weight
    assert same_record(old, cfg) and not same_record(old, tiny_cfg(words_file, replay_weight=8.0))
    assert L.TrainConfig.from_dict(old).replay_weight == 1.0 and L.TrainConfig.from_dict(old).replay_steered == 0.0
    assert not same_record({**old, "steps": 61}, cfg)
    assert not same_record(None, cfg) and not same_record({"layer": "x"}, cfg)


def test_an_adapter_the_forward_would_not_run_is_refused(tiny_dir):
    """On GPT-2's bridge-own eager path attention's output map is the bridge's reference to the
    unwrapped ``c_proj``: its LoRA would never train, so attaching says so instead of training."""
    model = load_model(str(tiny_dir("gpt2")), attn_implementation="eager")
    with pytest.raises(lora.AdapterError, match=r"adapter maps are never run .*c_proj.*eager attention path.*'auto'"):
        lora.attach(model, 1)
    ok = load_model(str(tiny_dir("gpt2")))  # auto: HF's own attention calls the wrapped map
    assert lora.attach(ok, 1)
