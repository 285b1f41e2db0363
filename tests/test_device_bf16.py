"""What a GPU run meets, on the CPU: a bf16 model.

Vectors, norms and cosines come out in float32 (bf16 keeps ~3 significant digits: a unit vector
normalised in bf16 is not unit); the injection is added in the model's dtype (a float32 delta
added to a bf16 activation would be upcast or fail); and everything stays within bf16 tolerance
of the same model run in float32.
"""

from __future__ import annotations

import pytest
import torch

from introspect.engine.load import devices
from introspect.engine.load.models import load_model
from introspect.engine.run.chat import Conversation, render
from introspect.engine.run.decode import generate, next_token_logprobs
from introspect.engine.run.inject import BatchInjector, InjectionSpec, injecting, pad_left
from introspect.engine.vectors import build_concept_vectors, residuals

BASE = ["pebble", "curtain", "saddle", "jasmine", "ladder"]


@pytest.fixture(scope="module")
def pair(tiny_dir):
    path = str(tiny_dir("llama"))
    return load_model(path), load_model(path, dtype="bf16")


def _cos(a, b):
    return float(torch.nn.functional.cosine_similarity(a, b, dim=-1))


def test_bf16_model_is_bf16_with_sdpa(pair):
    fp32, bf16 = pair
    assert next(bf16.original_model.parameters()).dtype == torch.bfloat16
    assert bf16.introspect_info.dtype == "bfloat16" and bf16.introspect_info.attention == "sdpa"
    assert devices.kv_bytes_per_token(bf16) * 2 == devices.kv_bytes_per_token(fp32)


def test_vectors_norms_and_cosines_are_float32_and_match(pair):
    fp32, bf16 = pair
    a = build_concept_vectors(fp32, ["bread", "ocean"], [1, 3], BASE, cache=False)
    b = build_concept_vectors(bf16, ["bread", "ocean"], [1, 3], BASE, cache=False)
    for k, cv in b.items():
        assert cv.vector.dtype == torch.float32 and cv.vector.device.type == "cpu"
        assert abs(float(cv.vector.norm()) - 1) < 1e-6  # normalised in float32
        assert _cos(cv.vector, a[k].vector) > 0.98
        assert cv.raw_norm == pytest.approx(a[k].raw_norm, rel=0.05)
        assert cv.mean_resid_norm == pytest.approx(a[k].mean_resid_norm, rel=0.02)
    tok = bf16.tokenizer
    ps = [render(tok, Conversation.of(("user", "Tell me about bread.")))]
    r = residuals(bf16, ps, [1, 3], positions=[[1, 2, 3]])[0]
    assert r.dtype == torch.float32
    cos = torch.nn.functional.cosine_similarity(r, b[("bread", 3)].vector, dim=-1)  # task D's reading
    ref = torch.nn.functional.cosine_similarity(residuals(fp32, ps, [1, 3], positions=[[1, 2, 3]])[0],
                                                a[("bread", 3)].vector, dim=-1)
    assert cos.dtype == torch.float32 and torch.allclose(cos, ref, atol=0.03)


def test_injection_is_added_in_the_models_dtype_and_matches_fp32(pair):
    fp32, bf16 = pair
    tok = bf16.tokenizer
    ps = [render(tok, Conversation.of(("user", f"Trial {i}: do you detect a thought?"))) for i in (1, 2)]
    v = torch.randn(bf16.cfg.d_model, generator=torch.Generator().manual_seed(0))
    specs = [InjectionSpec(1, 3.0, v / v.norm(), "all"), None]
    seen = {}

    def after(act, hook):
        seen["dtype"] = act.dtype

    toks, mask, offsets = pad_left(ps, tok.pad_token_id)
    with injecting(bf16, specs, ps, offsets) as inj, bf16.hooks(fwd_hooks=[("blocks.1.hook_resid_post", after)]), \
            torch.no_grad():
        bf16(toks, attention_mask=mask)
    assert seen["dtype"] == torch.bfloat16  # the injected activation stayed bf16
    assert isinstance(inj, BatchInjector) and {t.dtype for t in inj._on.values() if t.is_floating_point()} == {torch.bfloat16}
    lp16 = next_token_logprobs(bf16, ps, specs)
    lp32 = next_token_logprobs(fp32, ps, specs)
    assert lp16.dtype == torch.float32
    assert (lp16 - lp32).abs().max() < 0.1  # bf16 tolerance on log-probabilities
    assert not torch.allclose(lp32[0], next_token_logprobs(fp32, ps[:1])[0], atol=1e-3)  # it did inject
    g16 = generate(bf16, ps, specs, max_new_tokens=4)
    g32 = generate(fp32, ps, specs, max_new_tokens=4)
    assert all(len(g.tokens) >= 1 for g in g16)
    assert [g.tokens[:1] for g in g16] == [g.tokens[:1] for g in g32]  # the first greedy choice agrees
