"""The positive control's concept split by meaning (introspect.train.split) and its identity on resume.

Constructed vectors check the rule itself (every held-out word below the cosine threshold to every
training word, near-synonym groups never split, hubs dropped, seeded); the tiny random model checks
the pipeline: the rows training actually builds never show a held-out word, a form of one or a
near-synonym by the split's own rule, and a resume from other word files or with another split is
refused while an unchanged one goes on.
"""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from introspect.engine.load.models import load_model
from introspect.engine.vectors import build_concept_vectors
from introspect.grading.words import forms_pattern
from introspect.tasks.prompts import load_words
from introspect.train import data as D
from introspect.train import loop as L
from introspect.train import replay as R
from introspect.train import resume as RS
from introspect.train import split as S

# Near-synonym traps (the issue's own pairs among them) plus plain words; "sea" and "cave" sit
# beside the task-A targets ocean and cavern, which are always held out.
WORDS = ["bee", "honeybee", "bumblebee", "meteor", "meteorite", "supper", "dinner", "tub", "bath", "boat",
         "ship", "skiff", "sea", "cave", "pencil", "lemon", "bottle", "rabbit", "cabin", "piano", "tiger",
         "apple", "horse", "candle", "kettle", "ladder", "wallet", "carpet", "saddle", "helmet", "basket",
         "pillow", "hammer", "button", "feather", "marble", "turnip", "walnut", "oyster", "parrot"]
REPLAY = ["Say hi.", "Count to three.", "Tell me about the ocean.", "Recommend a simple dinner.", "Name a colour.",
          "Give me a number.", "Describe a cloud.", "Spell the word cat.", "What is ten minus two?", "Sing a line."]
YES_NO = {"yes_no_true": ["Is snow cold?", "Is the ocean salty?", "Do birds lay eggs?"],
          "yes_no_false": ["Is fire cold?", "Is a cavern bright?", "Do fish have fur?"]}  # three name task-A targets


def unit(v: torch.Tensor) -> torch.Tensor:
    return v / v.norm()


def cos(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(unit(a) @ unit(b))


def check_split(sp: S.Split, vectors: dict[str, torch.Tensor], words: list[str], targets: list[str]) -> None:
    """The split's promises, checked from the vectors, not from the split's own records."""
    assert not set(sp.train) & set(sp.heldout)
    assert set(sp.train) | set(sp.heldout) | set(sp.dropped) == set(words) | set(targets)
    assert not (set(sp.train) | set(sp.heldout)) & set(sp.dropped)
    assert set(targets) <= set(sp.heldout) | {w for w, why in sp.dropped.items() if "hub" in why}
    for h in sp.heldout:
        for t in sp.train:
            assert cos(vectors[h], vectors[t]) < sp.max_cos, (h, t, cos(vectors[h], vectors[t]))
            assert not S.near_by_rule(h, t), (h, t)
        near, c = sp.nearest[h]
        assert c == pytest.approx(max(cos(vectors[h], vectors[t]) for t in sp.train), abs=1e-5)
        assert near in sp.train and sp.band(h) is not None


# ---------------------------------------------------------------- the rule, on constructed vectors
def test_rule_catches_word_forms_compounds_and_listed_synonyms():
    for a, b in [("bee", "honeybee"), ("bumblebee", "bee"), ("meteorite", "meteor"), ("supper", "dinner"),
                 ("tub", "bath"), ("boat", "skiff"), ("boat", "ships"), ("boats", "boat"), ("Ocean", "sea"),
                 ("cavern", "caves")]:
        assert S.near_by_rule(a, b) and S.near_by_rule(b, a), (a, b)
    for a, b in [("apple", "piano"), ("lemon", "rabbit"), ("ox", "box"), ("cat", "dog")]:
        assert not S.near_by_rule(a, b), (a, b)
    assert S.band(0.05) == "<0.20" and S.band(0.25) == "0.20-0.30" and S.band(0.45, 0.5) == "0.40-0.50"


def constructed(seed: int = 0, d: int = 96):
    """Singles, near pairs (cos ~0.9), a hub near a dozen words, and two targets."""
    g = torch.Generator().manual_seed(seed)
    basis = torch.linalg.qr(torch.randn(d, d, generator=g))[0].T  # orthonormal rows
    vec: dict[str, torch.Tensor] = {}
    k = 0
    for i in range(30):
        vec[f"single{i}"] = basis[k]
        k += 1
    for i in range(12):
        vec[f"pair{i}a"] = unit(basis[k] + 0.3 * basis[k + 1])
        vec[f"pair{i}b"] = unit(basis[k] - 0.3 * basis[k + 1])
        k += 2
    vec["hub"] = unit(basis[30:44:2].sum(0))  # cos 0.36 to both words of pairs 0-6: 14 of 57 words
    vec["target0"] = unit(basis[k + 1] + 0.2 * basis[k + 2])
    vec["target1"] = unit(basis[k + 3])
    vec["nearT0"] = unit(basis[k + 1] - 0.2 * basis[k + 2])  # a training word near a target
    return vec


def test_meaning_split_keeps_heldout_far_from_training_and_is_seeded():
    vec = constructed()
    targets = ["target0", "target1"]
    words = [w for w in vec if w not in targets]
    sp = S.meaning_split(words, vec, targets=targets, seed=0, heldout_frac=0.3, max_cos=0.35)
    check_split(sp, vec, words, targets)
    assert "hub" in sp.dropped and "hub" in sp.dropped["hub"]
    assert "nearT0" not in sp.train  # near a target: held out with it, or dropped
    assert any(why.startswith("near held-out") for why in sp.dropped.values())
    assert len(sp.heldout) >= 2 + 10 and len(sp.train) >= 30
    for i in range(12):  # a near pair is never split across training and held out
        a, b = f"pair{i}a", f"pair{i}b"
        assert not ({a, b} & set(sp.train) and {a, b} & set(sp.heldout)), (a, b)
    again = S.meaning_split(words, vec, targets=targets, seed=0, heldout_frac=0.3, max_cos=0.35)
    other = S.meaning_split(words, vec, targets=targets, seed=1, heldout_frac=0.3, max_cos=0.35)
    assert again == sp and other.heldout != sp.heldout
    check_split(other, vec, words, targets)


@pytest.mark.parametrize("seed", range(4))
def test_meaning_split_holds_on_crowded_random_vectors(seed):
    """Low dimension: many pairs above the threshold, hubs among them; the promises still hold."""
    g = torch.Generator().manual_seed(seed)
    words = [f"w{i}" for i in range(80)]
    vec = {w: torch.randn(6, generator=g) for w in [*words, "t0", "t1"]}
    sp = S.meaning_split(words, vec, targets=["t0", "t1"], seed=seed, heldout_frac=0.2, max_cos=0.5)
    check_split(sp, vec, words, ["t0", "t1"])
    assert sp.train and len(sp.heldout) > 2


def test_threshold_and_bad_input_are_refused():
    vec = constructed()
    with pytest.raises(S.SplitError, match="max_cos"):
        S.meaning_split(list(vec), vec, seed=0, heldout_frac=0.1, max_cos=1.5)
    with pytest.raises(S.SplitError, match="no concept vector"):
        S.meaning_split(["nowhere"], vec, seed=0, heldout_frac=0.1)
    with pytest.raises(S.SplitError, match="training concepts"):  # everything near everything
        S.meaning_split(["pair0a", "pair0b"], vec, targets=["pair1a"], seed=0, heldout_frac=0.5, max_cos=0.1)
    with pytest.raises(D.TrainDataError, match="split"):
        L.TrainConfig(layer=1, split="sound")
    with pytest.raises(D.TrainDataError, match="max_cos"):
        L.TrainConfig(layer=1, max_cos=0.0)


# ---------------------------------------------------------------- the pipeline, on a tiny model
@pytest.fixture
def words_file(tmp_path) -> str:
    p = tmp_path / "train_words.yaml"
    p.write_text(yaml.safe_dump({"words": WORDS, "replay_prompts": REPLAY, **YES_NO}))
    return str(p)


def cfg_for(words_file: str, **kw) -> L.TrainConfig:
    base = dict(layer=1, steps=4, batch_size=6, lr=1e-2, rank=4, warmup=1, replay_prompts=10, replay_tokens=6,
                checkpoint_every=2, phrasings=("short", "paper"), strength=(0.5, 1.0), heldout_frac=0.3, n_trials=2,
                train_words_file=words_file, replay_frac=0.25, gates=False)
    return L.TrainConfig(**{**base, **kw})


def row_text(tok, enc: D.Encoded) -> str:
    return tok.decode(list(enc.ids))


def leaky(plan: L.Plan, tok, vectors: dict[str, torch.Tensor], max_cos: float, steps: int = 50,
          mix: tuple = tuple((k, 1.0) for k in D.KINDS)) -> list[str]:
    """Every way a held-out word shows in the rows training builds (empty: none): a form of it in
    a row's text (prompt, claim, options, yes/no question, answer, every turn of a replayed
    conversation and its answer), or a row's concept, claim or option near it."""
    found = set()
    pats = {h: forms_pattern(h) for h in plan.heldout}
    near = {c: [h for h in plan.heldout if S.near_by_rule(c, h) or cos(vectors[c], vectors[h]) >= max_cos]
            for c in plan.train}
    for step in range(steps):
        rows = D.step_examples(step, seed=0, batch_size=6, train=plan.train, phrasings=("short", "paper"),
                               strength=(0.5, 1.0), n_trials=2, replay_frac=0.25, n_replay=len(plan.replay),
                               siblings=plan.siblings, questions=plan.questions, mix=mix)
        for ex in rows:
            text = row_text(tok, D.encode(tok, ex, plan.replay))
            found |= {f"{h} in {ex.kind} row text" for h, pat in pats.items() if pat.search(text)}
            for c in (ex.concept, ex.claimed, *ex.options):
                found |= {f"{h} near {ex.kind} row concept {c}" for h in near.get(c, ()) if c is not None}
    return sorted(found)


def test_training_rows_never_show_a_heldout_word(tiny_dir, words_file):
    model = load_model(str(tiny_dir("llama")))
    cfg = cfg_for(words_file)
    plan = L.prepare(model, cfg)
    words = load_words()
    assert set(words.targets) <= set(plan.heldout) | set(plan.split.dropped)
    assert len(plan.train) >= 5 and len(plan.heldout) > len(words.targets) - 5
    allw = list(dict.fromkeys([*words.targets, *WORDS]))
    cvs = build_concept_vectors(model, allw, [cfg.layer], words.baseline)
    vectors = {w: cvs[(w, cfg.layer)].vector for w in allw}
    check_split(plan.split, vectors, [w for w in WORDS if w in vectors], list(words.targets))
    for h in ("ocean", "cavern"):  # targets: their near-synonyms never train
        assert h in plan.heldout or "hub" in plan.split.dropped.get(h, "")
    assert "sea" not in plan.train and "cave" not in plan.train
    # replay prompts and yes/no questions naming a held-out word are not used, in any shape
    assert not any("ocean" in r.text for r in [*plan.replay, *plan.replay_heldout])
    assert {q for q, _ in plan.questions + plan.gate_questions} == {"Do birds lay eggs?", "Is fire cold?",
                                                                    "Do fish have fur?"}
    mix = tuple((k, 1.0) for k in D.KINDS)
    kinds = {ex.kind for s in range(50) for ex in D.step_examples(
        s, seed=0, batch_size=6, train=plan.train, phrasings=("short",), strength=(0.5, 1.0), n_trials=2,
        replay_frac=0.25, n_replay=len(plan.replay), siblings=plan.siblings, questions=plan.questions, mix=mix)}
    assert kinds == {*D.KINDS, "replay"}  # the scan below sees every kind of row
    assert {r.shape for r in plan.replay} == set(R.SHAPES)
    assert leaky(plan, model.tokenizer, vectors, cfg.max_cos) == []
    # the same scan has teeth: the plural-only split puts "sea" in training beside held-out "ocean"
    old = L.prepare(model, cfg_for(words_file, split="spelling"))
    assert "sea" in old.train and "ocean" in old.heldout
    assert any("ocean near" in f for f in leaky(old, model.tokenizer, vectors, cfg.max_cos))
    # seeded: the same inputs give the same split
    questions = [q for qs in YES_NO.values() for q in qs]
    again, _ = S.make_split(model, cfg.layer, WORDS, words.targets, words.baseline, seed=0, heldout_frac=0.3,
                            avoid=D.task_a_texts(), train_texts=D.training_texts(cfg.phrasings, REPLAY, questions))
    assert again == plan.split


def _interrupted(model_dir, cfg, out, monkeypatch):
    """Train until the 3rd step dies: a checkpoint at step 2 is left behind."""
    real = L.step_loss
    calls = {"n": 0}

    def dying(*a, **k):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(L, "step_loss", dying)
    with pytest.raises(KeyboardInterrupt):
        L.train(load_model(str(model_dir)), cfg, out, progress=False)
    monkeypatch.setattr(L, "step_loss", real)
    assert (out / L.CHECKPOINT).is_file()


def test_resume_with_another_split_or_word_file_is_refused(tiny_dir, words_file, tmp_path, monkeypatch):
    model_dir = tiny_dir("llama")
    cfg = cfg_for(words_file)
    out = tmp_path / "a"
    _interrupted(model_dir, cfg, out, monkeypatch)
    ckpt = torch.load(out / L.CHECKPOINT, weights_only=False)
    assert ckpt["split"]["heldout"] and set(ckpt["word_files"]) == {"words_file", "train_words_file"}
    # another training words file under the same path: refused before anything is trained
    original = open(words_file).read()
    with open(words_file, "a") as fh:
        fh.write("# edited\n")
    with pytest.raises(S.SplitError, match=r"another --train-words-file.*use a new --out or the original"):
        L.train(load_model(str(model_dir)), cfg, out, progress=False)
    open(words_file, "w").write(original)
    # the same files but another split (task A's prompts now name a training word): refused
    victim = json.loads(json.dumps(ckpt["split"]))["train"][0]
    real_texts = D.task_a_texts
    monkeypatch.setattr(D, "task_a_texts", lambda: (*real_texts(), f"A question about {victim}."))
    with pytest.raises(S.SplitError, match=rf"another split \(.*-{victim}\b.*\); use a new --out"):
        L.train(load_model(str(model_dir)), cfg, out, progress=False)
    monkeypatch.setattr(D, "task_a_texts", real_texts)
    # unchanged: it resumes and finishes, and the split is written beside the adapter
    done = L.train(load_model(str(model_dir)), cfg, out, progress=False)
    assert done["steps_this_run"] == 2 and done["split"] == "meaning"
    rec = json.loads((out / S.SPLIT_FILE).read_text())
    assert rec["heldout"] == ckpt["split"]["heldout"] and rec["word_files"] == ckpt["word_files"]
    assert set(rec["heldout_nearest"]) == set(rec["heldout"])
    assert {v["category"] for v in rec["heldout_nearest"].values()} == {"task-A target", "training list"}
    assert all(v["cos"] < cfg.max_cos and v["band"] for v in rec["heldout_nearest"].values())
    held = load_words(out / "words_heldout.yaml")
    assert list(held.targets) == rec["heldout"]
    assert "# nearest training word" in (out / "words_heldout.yaml").read_text()
    # a checkpoint from before these checks is refused too
    with pytest.raises(S.SplitError, match="predates"):
        RS.check_resume({"config": cfg.to_dict()}, out / L.CHECKPOINT, RS.word_files(cfg))


def test_cli_refuses_a_finished_adapter_from_other_word_files(tiny_dir, words_file, tmp_path, capsys):
    from experiments import train_aware

    out = tmp_path / "cli"
    argv = ["--model", str(tiny_dir("llama")), "--layer", "1", "--out", str(out), "--steps", "2", "--batch-size", "4",
            "--rank", "2", "--phrasings", "short", "--train-words-file", words_file, "--check", "0", "--no-progress",
            "--max-cos", "0.5", "--heldout-frac", "0.2"]
    assert train_aware.main(argv) == 0
    assert (out / S.SPLIT_FILE).is_file()
    capsys.readouterr()
    assert train_aware.main(argv) == 0 and "already holds this adapter" in capsys.readouterr().out
    with open(words_file, "a") as fh:
        fh.write("# edited\n")
    assert train_aware.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "--train-words-file" in err and "new --out" in err


def test_split_layer_judges_nearness_at_its_layer_and_injects_the_trained_layers_vectors(tiny_dir, words_file):
    # cosines shrink with depth, so one max_cos is laxer at a later layer: a split can be judged at
    # another layer (e.g. keep layer 20's split for an adapter trained at 24)
    model = load_model(str(tiny_dir("llama")))
    cfg = cfg_for(words_file, layer=1, split_layer=0)
    plan = L.prepare(model, cfg)
    words = load_words()
    questions = [q for qs in YES_NO.values() for q in qs]
    at0, _ = S.make_split(model, 0, WORDS, words.targets, words.baseline, seed=0, heldout_frac=0.3,
                          avoid=D.task_a_texts(), train_texts=D.training_texts(cfg.phrasings, REPLAY, questions))
    at1, _ = S.make_split(model, 1, WORDS, words.targets, words.baseline, seed=0, heldout_frac=0.3,
                          avoid=D.task_a_texts(), train_texts=D.training_texts(cfg.phrasings, REPLAY, questions))
    assert plan.split == at0 and at0 != at1  # the tiny model's two layers split differently
    cvs = build_concept_vectors(model, list(plan.train), [0, 1], words.baseline)
    for w in plan.train:  # the injected vectors are the trained layer's, not the split layer's
        assert torch.equal(plan.vectors[w], cvs[(w, 1)].vector)
    with pytest.raises(D.TrainDataError, match="split_layer"):
        cfg_for(words_file, split_layer=-1)
    with pytest.raises(D.TrainDataError, match="split_layer 9 is not a layer of this model"):
        L.prepare(model, cfg_for(words_file, split_layer=9))
