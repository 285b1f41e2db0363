"""The replay cache (introspect.train.replay.cached_replay), on tiny random models.

The base model's replay answers are most of a training's preparation; a cache may only ever give
back what generating them now would give, for the same model and settings, and never for a model
whose attached adapter its fingerprint does not see.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from introspect.engine.load.models import load_model
from introspect.train import lora
from introspect.train import replay as R

QUESTIONS = ["Say hi.", "Count to three.", "Name a colour.", "What is two plus two?", "Say goodbye."]


def _files(root: Path) -> list[Path]:
    return sorted(root.glob("*.json")) if root.exists() else []


def test_answers_are_written_once_and_read_back_as_generated(tiny_dir):
    model = load_model(str(tiny_dir("llama")))
    first, hit = R.cached_replay(model, QUESTIONS, seed=0, tokens=6)
    assert hit is False and len(_files(R.replay_root())) == 1
    again, hit = R.cached_replay(model, QUESTIONS, seed=0, tokens=6)
    assert hit is True and again == first
    assert R.build_replay(model, QUESTIONS, seed=0, tokens=6) == first  # what generating now gives
    fresh, hit = R.cached_replay(model, QUESTIONS, seed=0, tokens=6, cache=False)
    assert hit is False and fresh == first and len(_files(R.replay_root())) == 1


def test_key_follows_what_the_answers_depend_on(tiny_dir):
    model = load_model(str(tiny_dir("llama")))
    key = R.cache_key(model, QUESTIONS, seed=0, tokens=6)
    assert key == R.cache_key(load_model(str(tiny_dir("llama"))), list(QUESTIONS), seed=0, tokens=6)
    others = {R.cache_key(model, QUESTIONS[:-1], seed=0, tokens=6), R.cache_key(model, QUESTIONS, seed=1, tokens=6),
              R.cache_key(model, QUESTIONS, seed=0, tokens=7), R.cache_key(load_model(str(tiny_dir("qwen2"))),
                                                                           QUESTIONS, seed=0, tokens=6)}
    assert key not in others and len(others) == 4


def test_key_follows_the_thread_count(tiny_dir, threads):
    model = load_model(str(tiny_dir("llama")))
    threads(1)
    one = R.cache_key(model, QUESTIONS, seed=0, tokens=6)
    threads(2)
    assert R.cache_key(model, QUESTIONS, seed=0, tokens=6) != one


def test_a_model_with_lora_attached_neither_reads_nor_writes_the_cache(tiny_dir):
    """Attached LoRA leaves the fingerprint the base model's: its answers must be its own."""
    model = load_model(str(tiny_dir("llama")))
    base, _ = R.cached_replay(model, QUESTIONS, seed=0, tokens=6)
    lora.attach(model, 0, rank=4)
    with torch.no_grad():
        for n, w in model.original_model.named_parameters():
            if "lora_B" in n:
                w.normal_(0, 0.5, generator=torch.Generator().manual_seed(len(n)))
    assert lora.attached(model)
    adapted, hit = R.cached_replay(model, QUESTIONS, seed=0, tokens=6)
    assert hit is False and [r.ids for r in adapted] != [r.ids for r in base]
    assert len(_files(R.replay_root())) == 1
    assert R.cached_replay(model, QUESTIONS, seed=0, tokens=6)[1] is False  # and it never wrote its own


def test_an_unreadable_cache_file_is_one_line_naming_it(tiny_dir):
    model = load_model(str(tiny_dir("llama")))
    R.cached_replay(model, QUESTIONS, seed=0, tokens=6)
    (path,) = _files(R.replay_root())
    path.write_text(json.dumps({"items": [{"messages": "oops"}]}))
    with pytest.raises(R.ReplayCacheError) as e:
        R.cached_replay(model, QUESTIONS, seed=0, tokens=6)
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg and "delete it to rebuild" in msg
