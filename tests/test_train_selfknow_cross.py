"""``train-selfknow --truth-from DIR``: model Y trained on model X's errors (Binder et al. 2024's
cross-prediction with the behaviour fixed), on tiny random models, single-threaded.

A random model states no number, so truths are planted (as in ``test_train_selfknow``): X is
wrong exactly on subtractions, Y exactly on additions, so X's truth and Y's own are opposite on
every item and a target placed by Y's own errors would be caught. Y is a tiny qwen2 with a
tokenizer of its own (another vocabulary: other ids for the same text). Trainings are 2 steps:
what is checked is which items, labels, targets and records the run uses, not what it learns.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import shlex
import shutil
from pathlib import Path

import pytest
import torch

from introspect.engine.load.models import load_model
from introspect.train import lora
from introspect.train import selfknow as S
from introspect.train import selfknow_data as K


def x_rule(qs, texts):  # X: wrong on subtractions
    return [" - " not in q.question for q in qs]


def y_rule(qs, texts):  # Y: wrong on additions (X's truth, inverted)
    return [" - " in q.question for q in qs]


COMMON = ["--no-progress", "--no-calibrate", "--steps", "2", "--items", "80", "--heldout-frac", "0.5",
          "--history-len", "4", "--replay-prompts", "1", "--check", "0", "--layer", "1"]


def cli(argv: list[str], rule) -> tuple[int, str, str]:
    """``train-selfknow`` with ``rule`` as the planted grading: (exit code, stdout, stderr)."""
    from experiments import train_selfknow as T

    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as m, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        m.setattr(K, "grade_items", rule)
        rc = T.main(argv)
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def y_dir(tmp_path_factory):
    """A tiny qwen2 whose tokenizer is not the shared tiny one (vocabulary 420, not 600)."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from tests.conftest import CHAT_TEMPLATE

    corpus = (Path(__file__).resolve().parent / "data" / "tokenizer_corpus.txt").read_text().splitlines()
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=420, special_tokens=["<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<|im_end|>",
                                                bos_token="<|endoftext|>", pad_token="<pad>")
    fast.chat_template = CHAT_TEMPLATE
    out = tmp_path_factory.mktemp("other-tok") / "qwen2"
    cfg = transformers.Qwen2Config(vocab_size=len(fast), bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
                                   pad_token_id=fast.pad_token_id, hidden_size=64, intermediate_size=128,
                                   num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                                   max_position_embeddings=512)
    torch.manual_seed(1)
    transformers.AutoModelForCausalLM.from_config(cfg).save_pretrained(out)
    fast.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def x_out(tiny_dir, tmp_path_factory):
    """X (the tiny llama) trained on its own truth: the --truth-from directory."""
    out = tmp_path_factory.mktemp("x") / "x-sk"
    rc, _, err = cli(["--model", str(tiny_dir("llama")), "--out", str(out), *COMMON], x_rule)
    assert rc == 0, err
    return out


@pytest.fixture(scope="module")
def y_run(x_out, y_dir, tmp_path_factory):
    """Y trained with --truth-from X's directory: (OUT, printed lines)."""
    out = tmp_path_factory.mktemp("y") / "y-sk"
    rc, stdout, err = cli(["--model", str(y_dir), "--truth-from", str(x_out), "--out", str(out), *COMMON], y_rule)
    assert rc == 0, err
    return out, stdout.strip().splitlines()


def meta(d: Path) -> dict:
    return json.loads((d / lora.META_FILE).read_text())


def truth(d: Path) -> dict:
    return json.loads((d / S.TRUTH).read_text())


def test_y_trains_on_x_items_split_and_truth_and_names_x(x_out, y_run, y_dir):
    y_out, _ = y_run
    for f in (S.ITEMS_TRAIN, S.ITEMS_HELDOUT):  # the same question files, byte for byte
        assert (y_out / f).read_bytes() == (x_out / f).read_bytes()
    tx, ty = truth(x_out), truth(y_out)
    keys = ("id", "question", "answer", "split", "base_correct", "base_response")
    assert [tuple(r[k] for k in keys) for r in ty["items"]] == [tuple(r[k] for k in keys) for r in tx["items"]]
    assert {r["split"] for r in ty["items"]} == {"train", "heldout"}
    assert all(r["own_correct"] is (not r["base_correct"]) for r in ty["items"])  # Y's own truth: the planted inverse
    mx, my = meta(x_out), meta(y_out)
    sha = hashlib.sha256((x_out / S.TRUTH).read_bytes()).hexdigest()
    src = my["selfknow"]["truth_from"]
    assert src["dir"] == str(x_out.resolve()) and src["truth_sha256"] == sha and ty["truth_from"] == src
    assert (src["base_model"], src["base_fingerprint"], src["adapter_hash"]) == (
        mx["base_model"], mx["base_fingerprint"], mx["adapter_hash"])
    assert my["training"]["truth_from"] == f"sha256:{sha}" and mx["training"]["truth_from"] is None
    assert my["base_model"] == str(y_dir) and my["base_fingerprint"] != mx["base_fingerprint"]
    for k in ("train_ids", "heldout_ids", "base_wrong_ids"):
        assert my["selfknow"][k] == mx["selfknow"][k], k
    # T targets on X's wrong training items: X's own trained-T ids, none of Y's own errors
    x_wrong_train = [r["id"] for r in tx["items"] if r["split"] == "train" and not r["base_correct"]]
    assert x_wrong_train and my["selfknow"]["trained_delegate_ids"] == x_wrong_train
    assert my["selfknow"]["trained_delegate_ids"] == mx["selfknow"]["trained_delegate_ids"]
    assert not set(x_wrong_train) & set(my["selfknow"]["own_wrong_ids"])
    s = my["summary"]
    assert s["labels_equal_truth"] == 1.0 and s["own_equals_truth"] == 0.0 and s["own_graded"] == len(ty["items"])
    rc, stdout, _ = cli(["--model", str(y_dir), "--truth-from", str(x_out), "--out", str(y_out), *COMMON], y_rule)
    assert rc == 0 and "already holds this adapter" in stdout  # the same command again: nothing to do


def test_game_targets_follow_x_truth_in_y_tokens(x_out, y_dir, tiny_dir):
    """The rows themselves: T exactly where X is wrong, else Y's own greedy answer (Y's ids),
    whose tokenizer is not X's."""
    cfg = K.SelfKnowConfig.from_dict(meta(x_out)["training"])
    t = K.read_truth(x_out, cfg)
    y = load_model(str(y_dir))
    x_tok = load_model(str(tiny_dir("llama"))).tokenizer
    q = t.pool.train[0].question
    assert y.tokenizer.encode(q, add_special_tokens=False) != x_tok.encode(q, add_special_tokens=False)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(K, "grade_items", y_rule)
        ctx = K.task_context(y, cfg)
        pool, own = K.cross_pool(ctx, t)
        ref = K.answer_items(ctx, [i.short() for i in pool.train[:3]])  # Y's own replies, Y's prompt ids
    assert [i.id for i in pool.train] == [i.id for i in t.pool.train]
    assert [i.correct for i in pool.heldout] == [i.correct for i in t.pool.heldout]  # X's truth kept
    assert all(own[i.id] is (not i.correct) for i in (*pool.train, *pool.heldout))
    assert [(i.prompt_ids, i.answer_ids) for i in pool.train[:3]] == [(r.prompt_ids, r.answer_ids) for r in ref]
    labels = K.labels(pool.train, False, cfg.seed)
    t_ids, seen = K.delegate_ids(ctx), {True: 0, False: 0}
    for step in range(4):
        game, _ = S.step_encoded(ctx, cfg, pool, labels, [], step, t_ids)
        for i, e in zip(K.step_rows(step, cfg, len(pool.train), 0).game, game):
            item = pool.train[i]
            target = tuple(e.ids[-e.n_answer:])
            assert target == (t_ids if not item.correct else item.answer_ids), item.id
            assert item.question in y.tokenizer.decode(list(e.ids[:-e.n_answer]))
            seen[item.correct] += 1
    assert seen[True] and seen[False]


def test_shuffle_with_truth_from_permutes_x_labels(x_out, y_dir, tmp_path):
    """Y's control: X's labels permuted across the same training items with the same seed (as
    X's own control would), as many T targets, not on X's errors."""
    out = tmp_path / "y-ctrl"
    rc, _, err = cli(["--model", str(y_dir), "--truth-from", str(x_out), "--out", str(out), "--shuffle", *COMMON],
                     y_rule)
    assert rc == 0, err
    items = K.read_truth(x_out, K.SelfKnowConfig.from_dict(meta(x_out)["training"])).pool.train
    perm = K.labels(items, True, 0)
    sk = meta(out)["selfknow"]
    assert sk["trained_delegate_ids"] == [i.id for i, lab in zip(items, perm) if lab]
    assert len(sk["trained_delegate_ids"]) == sum(not i.correct for i in items)
    assert sk["trained_delegate_ids"] != [i.id for i in items if not i.correct]
    assert sk["control"] is True and sk["truth_from"]["dir"] == str(x_out.resolve())


@pytest.mark.slow  # two games played (~15 s): CI's full suite
def test_printed_commands_play_both_adapters_and_cross_prediction_pairs_them(x_out, y_run, tmp_path):
    """The two printed evaluations (Y's adapter, and X's on the same file) differ only in the
    adapter and the file's folder; run, their records pair item by item in
    ``crosspredict.cross_prediction``: behaviour X's adapter, predictor Y's adapter."""
    from experiments import run
    from introspect.report import load_results
    from introspect.tasks.selfknowledge import delegate as G
    from introspect.tasks.selfknowledge.crosspredict import cross_prediction
    from introspect.tasks.selfknowledge.shortanswer import ShortGrade

    y_out, lines = y_run
    ev_y = next(x for x in lines if x.startswith("evaluate: ")).split(": ", 1)[1]
    ev_x = next(x for x in lines if x.startswith("its own adapter on the same items: ")).split(": ", 1)[1]
    assert ev_x == meta(x_out)["summary"]["evaluate"]  # exactly the command X's own training printed
    assert ev_y == ev_x.replace(str(x_out), str(y_out))
    assert any(x.startswith("then: ") and "compare results/selfknow" in x for x in lines)
    res = tmp_path / "results"
    with pytest.MonkeyPatch.context() as m:
        m.setattr(G, "grade_replies", lambda items, judges=(): [ShortGrade(" - " not in q.question, "number")
                                                                for q, _ in items])
        for ev in (ev_x, ev_y):
            argv = shlex.split(ev)[3:]
            assert run.main([*argv[:-2], "--out", str(res), "--no-progress", "--batch-size", "8"]) == 0
    df = load_results(res)
    ids = sorted(set(df["model_id"]))
    x_id = next(i for i in ids if meta(x_out)["adapter_hash"].replace(":", "-")[:13] in i)
    y_id = next(i for i in ids if i != x_id)
    held = set(meta(x_out)["selfknow"]["heldout_ids"])
    games = {m: set(df.loc[df["model_id"] == m, "grade.qid"]) for m in ids}
    assert len(ids) == 2 and games[x_id] <= held and games[x_id] == games[y_id]
    cp = cross_prediction(df)
    row = cp[(cp.behaviour == x_id) & (cp.predictor == y_id) & (cp.metric == "self_minus_predictor")]
    assert len(row) == 1 and int(row.iloc[0]["n"]) == len(games[x_id])
    assert row.iloc[0]["positives"] + row.iloc[0]["negatives"] == len(games[x_id])
    assert row.iloc[0]["note"] == "" and row.iloc[0]["lo"] <= row.iloc[0]["value"] <= row.iloc[0]["hi"]  # judged


def _copy(src: Path, dst: Path, edit=None) -> Path:
    shutil.copytree(src, dst)
    if edit:
        edit(dst)
    return dst


def _flip_one(d: Path) -> None:
    t = truth(d)
    t["items"][0]["base_correct"] = not t["items"][0]["base_correct"]
    (d / S.TRUTH).write_text(json.dumps(t))


def _shuffled(d: Path) -> None:
    m = meta(d)
    m["training"]["shuffle"] = True
    (d / lora.META_FILE).write_text(json.dumps(m))


def _other_question(d: Path) -> None:
    f = d / S.ITEMS_HELDOUT
    lines = f.read_text().splitlines(keepends=True)
    lines[1] = lines[1].replace(" + ", " - ", 1) if " + " in lines[1] else lines[1].replace(" - ", " + ", 1)
    f.write_text("".join(lines))


def test_bad_truth_from_is_one_line_exit_2_and_writes_nothing(x_out, y_run, y_dir, tmp_path):
    before = {p.name: p.read_bytes() for p in x_out.iterdir()}
    bad = tmp_path / "bad"
    cases = [
        (str(tmp_path / "missing"), [], "no such directory"),
        ("smollm2-135m-instruct", [], "no such directory"),  # a model name: its own directory is needed
        (str(_copy(x_out, bad / "no-truth", lambda d: (d / S.TRUTH).unlink())), [], "has no truth.json"),
        (str(_copy(x_out, bad / "no-meta", lambda d: (d / lora.META_FILE).unlink())), [], "no finished adapter"),
        (str(x_out), ["--items", "60"], "n_items=80 (--items)"),
        (str(x_out), ["--seed", "1"], "seed=0 (--seed)"),
        (str(x_out), ["--history-len", "5"], "history_len=4 (--history-len)"),
        (str(_copy(x_out, bad / "ctrl", _shuffled)), [], "shuffled control"),
        (str(y_run[0]), [], "itself trained on another model's truth"),
        (str(_copy(x_out, bad / "flipped", _flip_one)), [], "does not match its adapter's metadata"),
        (str(_copy(x_out, bad / "other-q", _other_question)), [], "question file list other items"),
        (str(_copy(x_out, bad / "junk", lambda d: (d / S.TRUTH).write_text("{"))), [], "not a readable"),
    ]
    for src, extra, msg in cases:
        out = tmp_path / "never"
        rc, stdout, err = cli(["--model", str(y_dir), "--truth-from", src, "--out", str(out), *COMMON, *extra],
                              y_rule)
        err = err.strip()
        assert rc == 2 and err.startswith("error: ") and "\n" not in err and msg in err, (src, extra, err)
        assert not out.exists() and not stdout, src
    rc, _, err = cli(["--model", str(y_dir), "--truth-from", str(x_out), "--out", str(x_out), *COMMON], y_rule)
    assert rc == 2 and "is the --truth-from directory" in err and "\n" not in err.strip()
    assert {p.name: p.read_bytes() for p in x_out.iterdir()} == before  # X's directory untouched
