"""Left padding on kernels that return NaN for a query row that may attend to nothing (some CUDA
kernels do; CPU ones return 0). Faked here on the CPU by a kernel that writes NaN into exactly
those rows: vectors, the baseline mean and log-probs stay finite and equal to the unpadded
computation, and without the mask repair they would not (the check can fail)."""

from __future__ import annotations

import pytest
import torch

from introspect import Conversation, render
from introspect.engine.load import attention
from introspect.engine.run.decode import next_token_logprobs
from introspect.engine.vectors import VectorCacheError, build_concept_vectors, residuals

REAL = torch.nn.functional.scaled_dot_product_attention


def _nan_kernel(q, k, v, attn_mask=None, **kw):
    out = REAL(q, k, v, attn_mask=attn_mask, **kw)
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        out = out.masked_fill(~attn_mask.any(dim=-1).unsqueeze(-1), float("nan"))
    return out


@pytest.fixture
def nan_kernel(monkeypatch):
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", _nan_kernel)


TEXTS = ["Hi", "Tell me a long story about the sea, the boats and the old lighthouse keeper", "bread"]


def _prompts(m):
    return [render(m.tokenizer, Conversation.of(("user", t))) for t in TEXTS]


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_padded_rows_stay_finite_and_equal_unpadded(tiny_model, nan_kernel, family, monkeypatch, tmp_path):
    m = tiny_model(family)
    assert attention.implementation(m) == "sdpa"
    ps = _prompts(m)
    alone = torch.cat([next_token_logprobs(m, [p]) for p in ps])
    padded = next_token_logprobs(m, ps)
    assert torch.isfinite(padded).all()
    torch.testing.assert_close(padded, alone, rtol=1e-5, atol=1e-5)
    acts = residuals(m, ps, [0, m.cfg.n_layers - 1])
    acts1 = [residuals(m, [p], [0, m.cfg.n_layers - 1])[0] for p in ps]
    for a, b in zip(acts, acts1):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    monkeypatch.setenv("INTROSPECT_CACHE_VECTORS", str(tmp_path / "v"))
    vecs = build_concept_vectors(m, ["bread", "ocean"], [1], ["apple", "river", "stone", "cloud"], cache=False)
    one = build_concept_vectors(m, ["bread", "ocean"], [1], ["apple", "river", "stone", "cloud"], cache=False,
                                batch_size=1)  # one text per batch: no padding at all
    for key, cv in vecs.items():
        assert torch.isfinite(cv.vector).all()
        torch.testing.assert_close(cv.vector, one[key].vector, rtol=1e-4, atol=1e-5)


def test_without_the_mask_repair_the_nan_spreads(tiny_model, nan_kernel, monkeypatch, tmp_path):
    """The same kernel with ``safe_mask`` switched off: NaN in the padded rows, and the vectors
    refuse to build (nothing cached) instead of poisoning the cache."""
    m = tiny_model("llama")
    monkeypatch.setattr(attention, "safe_mask", lambda mask: mask)
    lp = next_token_logprobs(m, _prompts(m))
    assert not torch.isfinite(lp).all()
    monkeypatch.setenv("INTROSPECT_CACHE_VECTORS", str(tmp_path / "v"))
    with pytest.raises(VectorCacheError, match="non-finite activations.*nothing cached"):
        build_concept_vectors(m, ["bread"], [1], ["apple", "a much longer baseline text here"])
    assert not list((tmp_path / "v").rglob("*.npy"))


def test_safe_mask_changes_only_rows_that_attend_to_nothing():
    mask = torch.tensor([[[[False, False, False], [False, True, False], [False, True, True]]]])
    out = attention.safe_mask(mask)
    assert out[0, 0, 0].all() and torch.equal(out[0, 0, 1:], mask[0, 0, 1:])
    add = torch.where(mask, 0.0, float("-inf"))
    fixed = attention.safe_mask(add)
    assert (fixed[0, 0, 0] == 0).all() and torch.equal(fixed[0, 0, 1:], add[0, 0, 1:])
