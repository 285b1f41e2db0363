"""Concept vectors: unit norm, batched equals one at a time, cache round-trips, bad cache files."""

import numpy as np
import pytest
import torch

from introspect.engine.run.chat import Prompt
from introspect.engine.vectors import (
    VectorCacheError,
    build_concept_vectors,
    load_vector,
    residuals,
    vectors_root,
)

BASE = ["pebble", "curtain", "saddle", "jasmine", "ladder"]


def test_norm_one_and_metadata(tiny_model):
    m = tiny_model("llama")
    vs = build_concept_vectors(m, ["bread", "ocean"], [1, 3], BASE)
    for cv in vs.values():
        assert abs(float(cv.vector.norm()) - 1.0) < 1e-5
        assert cv.raw_norm > 0 and cv.mean_resid_norm > 0
        assert cv.alpha_effective(2.0, "resid") == pytest.approx(2.0 * cv.mean_resid_norm)
    assert not torch.allclose(vs[("bread", 1)].vector, vs[("ocean", 1)].vector)


@pytest.mark.parametrize("family", ["llama", "gpt2", "gpt-neox", "qwen2"])
def test_batched_equals_one_at_a_time(tiny_model, family):
    m = tiny_model(family)
    batched = build_concept_vectors(m, ["bread", "violin"], [0, 2, 3], BASE, cache=False)
    for w in ["bread", "violin"]:
        for layer in [0, 2, 3]:
            single = build_concept_vectors(m, [w], [layer], BASE, cache=False, batch_size=1)[(w, layer)]
            assert torch.allclose(batched[(w, layer)].vector, single.vector, atol=1e-4)


def test_matches_manual_protocol(tiny_model):
    """v = act(word) − mean(act(baseline)) at the final token, normalised (seed §4)."""
    m = tiny_model("llama")
    template = "Human: Tell me about {word}\n\nAssistant:"

    def act(word):
        ids = torch.tensor([m.tokenizer(template.format(word=word))["input_ids"]])
        _, cache = m.run_with_cache(ids, names_filter="blocks.2.hook_resid_post")
        return cache["blocks.2.hook_resid_post"][0, -1]

    manual = act("bread") - torch.stack([act(b) for b in BASE]).mean(0)
    ours = build_concept_vectors(m, ["bread"], [2], BASE, cache=False, chat=False)[("bread", 2)].vector
    assert torch.allclose(ours, manual / manual.norm(), atol=1e-4)


def test_default_vectors_use_the_chat_template(tiny_model):
    """By default the word is asked about in a chat-templated user turn (the format tasks inject
    into), and the cache keeps chat and plain vectors apart."""
    m = tiny_model("llama")

    def act(word):
        msgs = [{"role": "user", "content": f"Tell me about {word}."}]
        ids = m.tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
        ids = ids["input_ids"] if hasattr(ids, "keys") else ids
        _, cache = m.run_with_cache(torch.tensor([list(ids)]), names_filter="blocks.2.hook_resid_post")
        return cache["blocks.2.hook_resid_post"][0, -1]

    manual = act("bread") - torch.stack([act(b) for b in BASE]).mean(0)
    chat = build_concept_vectors(m, ["bread"], [2], BASE)[("bread", 2)]
    plain = build_concept_vectors(m, ["bread"], [2], BASE, chat=False)[("bread", 2)]
    assert torch.allclose(chat.vector, manual / manual.norm(), atol=1e-4)
    assert chat.raw_norm == pytest.approx(float(manual.norm()), rel=1e-4)
    assert not torch.allclose(chat.vector, plain.vector, atol=1e-3)


def test_cache_round_trip_and_reuse(tiny_model):
    m = tiny_model("llama")
    first = build_concept_vectors(m, ["bread"], [1], BASE)
    files = list(vectors_root().rglob("*.npy"))
    assert len(files) == 1
    assert torch.allclose(load_vector(files[0]).vector, first[("bread", 1)].vector)
    np.save(files[0], np.full(64, 7.0, dtype=np.float32))  # prove the second call reads the cache
    assert float(build_concept_vectors(m, ["bread"], [1], BASE)[("bread", 1)].vector[0]) == 7.0


def test_unreadable_cache_file_names_the_file(tiny_model):
    m = tiny_model("llama")
    build_concept_vectors(m, ["bread"], [1], BASE)
    f = next(vectors_root().rglob("*.npy"))
    f.write_bytes(b"not a numpy file")
    with pytest.raises(VectorCacheError, match=str(f.name)):
        build_concept_vectors(m, ["bread"], [1], BASE)


def test_bad_layers_and_empty_words(tiny_model):
    m = tiny_model("llama")
    with pytest.raises(ValueError, match="out of range"):
        build_concept_vectors(m, ["bread"], [4], BASE)
    with pytest.raises(ValueError, match="no layers"):
        build_concept_vectors(m, ["bread"], [], BASE)
    with pytest.raises(ValueError, match="at least one"):
        build_concept_vectors(m, [], [1], BASE)


def test_residuals_respect_left_padding(tiny_model):
    m = tiny_model("gpt2")  # absolute position embeddings: padding mistakes would show
    tok = m.tokenizer
    a = Prompt(tuple(tok("a much longer prompt about many things")["input_ids"]), "")
    b = Prompt(tuple(tok("short")["input_ids"]), "")
    together = residuals(m, [a, b], [3])
    alone = residuals(m, [b], [3])
    assert torch.allclose(together[1], alone[0], atol=1e-4)
