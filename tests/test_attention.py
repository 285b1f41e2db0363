"""Fast attention: sdpa wherever no attention-internal hook is attached, eager where one is.

Logits equal the eager bridge within fp32 tolerance on the six test families, residual hooks and
injection still fire on the fast path, and attaching ``hook_pattern`` switches that call back to
the bridge's own eager computation (so the pattern is real, not a post-hoc guess).
"""

from __future__ import annotations

import pytest
import torch

from introspect.engine.load.attention import AttentionError, best, implementation
from introspect.engine.load.models import load_model
from introspect.engine.run.chat import Prompt
from introspect.engine.run.inject import InjectionSpec, injecting, pad_left

FAMILIES = ["llama", "mistral", "qwen2", "gpt2", "gpt-neox", "falcon"]


@pytest.fixture(scope="module")
def eager_model(tiny_dir):
    loaded = {}

    def get(family):
        if family not in loaded:
            loaded[family] = load_model(str(tiny_dir(family)), attn_implementation="eager")
        return loaded[family]

    return get


@pytest.fixture
def sdpa_calls(monkeypatch):
    """Counts calls of torch's fused attention (HF's sdpa path calls it by attribute)."""
    n = {"calls": 0}
    real = torch.nn.functional.scaled_dot_product_attention

    def counting(*a, **k):
        n["calls"] += 1
        return real(*a, **k)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", counting)
    return n


def _batch(m):
    texts = ["Tell me about bread", "A violin is a string instrument that", "ocean"]
    ps = [Prompt(tuple(m.tokenizer(t)["input_ids"]), t) for t in texts]
    toks, mask, offsets = pad_left(ps, m.tokenizer.pad_token_id)
    return ps, toks, mask, offsets


@pytest.mark.parametrize("family", FAMILIES)
def test_fast_logits_equal_eager(tiny_model, eager_model, family, sdpa_calls):
    fast, slow = tiny_model(family), eager_model(family)
    assert implementation(slow) == "eager"
    _, toks, mask, _ = _batch(fast)
    with torch.no_grad():
        a = fast(toks, attention_mask=mask)
        calls = sdpa_calls["calls"]
        b = slow(toks, attention_mask=mask)
    keep = mask.bool()
    assert torch.allclose(a[keep], b[keep], atol=1e-4)
    if implementation(fast) == "sdpa":
        assert calls >= fast.cfg.n_layers  # every layer ran the fused kernel
        assert sdpa_calls["calls"] == calls  # and the eager model never did
    else:
        assert family == "falcon" and calls == 0  # HF's Falcon has no sdpa here: eager runs


@pytest.mark.parametrize("family", FAMILIES)
def test_injection_fires_on_the_fast_path(tiny_model, eager_model, family):
    fast, slow = tiny_model(family), eager_model(family)
    ps, toks, mask, offsets = _batch(fast)
    v = torch.randn(fast.cfg.d_model, generator=torch.Generator().manual_seed(0))
    specs = [InjectionSpec(1, 6.0, v / v.norm(), "all"), None, InjectionSpec(2, 6.0, v / v.norm(), [0])]
    out = {}
    for name, m in (("fast", fast), ("slow", slow)):
        with injecting(m, specs, ps, offsets) as inj, torch.no_grad():
            out[name] = (m(toks, attention_mask=mask), dict(inj.fired))
    (a, fa), (b, fb) = out["fast"], out["slow"]
    assert fa == fb and sum(fa.values()) == (len(ps[0]) - 1) + 1  # "all" skips position 0; [0] asks for it
    with torch.no_grad():
        clean = fast(toks, attention_mask=mask)
    keep = mask.bool()
    assert torch.allclose(a[keep], b[keep], atol=1e-4)
    assert not torch.allclose(a[0], clean[0], atol=1e-3) and torch.allclose(a[1], clean[1], atol=1e-5)


@pytest.mark.parametrize("family", ["llama", "gpt2", "gpt-neox"])
def test_a_pattern_hook_gets_the_eager_path(tiny_model, eager_model, family, sdpa_calls):
    """With hook_pattern attached the call computes real attention weights (eager), and the
    logits still match; detached again, sdpa is back."""
    fast, slow = tiny_model(family), eager_model(family)
    _, toks, mask, _ = _batch(fast)
    seen = {}

    def grab(pattern, hook):
        seen[hook.name] = pattern.detach().clone()

    hooks = [(f"blocks.{la}.attn.hook_pattern", grab) for la in range(fast.cfg.n_layers)]
    with torch.no_grad(), fast.hooks(fwd_hooks=hooks):
        a = fast(toks, attention_mask=mask)
    assert sdpa_calls["calls"] == 0 and len(seen) == fast.cfg.n_layers
    ref = {}
    with torch.no_grad(), slow.hooks(fwd_hooks=[(n, lambda p, hook: ref.__setitem__(hook.name, p.clone()))
                                                for n, _ in hooks]):
        b = slow(toks, attention_mask=mask)
    keep = mask.bool()
    assert torch.allclose(a[keep], b[keep], atol=1e-4)
    for name, p in seen.items():
        q = p.shape[-2]
        assert p.shape == (3, fast.cfg.n_heads, q, q)
        real = keep[:, None, :, None].expand_as(p)  # query rows of real tokens
        assert torch.allclose(p[real], ref[name][real], atol=1e-5)
        assert torch.allclose(p.sum(-1)[keep[:, None, :].expand(-1, p.shape[1], -1)], torch.tensor(1.0), atol=1e-4)
    with torch.no_grad():
        fast(toks, attention_mask=mask)
    assert sdpa_calls["calls"] >= fast.cfg.n_layers


def test_soft_capping_keeps_eager():
    import transformers

    cfg = transformers.Gemma2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                    num_attention_heads=2, num_key_value_heads=1, head_dim=16)
    assert cfg.attn_logit_softcapping
    assert best(transformers.AutoModelForCausalLM.from_config(cfg)) == "eager"
    llama = transformers.AutoModelForCausalLM.from_config(transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2))
    assert best(llama) == "sdpa"
    llama.config.attn_logit_softcapping = 50.0  # any soft-capped model keeps eager, whatever its class says
    assert best(llama) == "eager"


def test_unknown_attention_choice_is_one_line(tiny_dir):
    with pytest.raises(AttentionError, match="unknown attention implementation 'flash'; use one of auto") as e:
        load_model(str(tiny_dir("llama")), attn_implementation="flash")
    assert "\n" not in str(e.value)


def test_header_card_names_the_attention(tiny_model, eager_model):
    assert tiny_model("llama").introspect_info.card()["attention"] == "sdpa"
    assert eager_model("llama").introspect_info.card()["attention"] == "eager"


def test_the_decode_loop_runs_sdpa(tiny_model, sdpa_calls):
    """decode drives ``model.original_model`` (the HF model inside the bridge): its attention
    modules are the bridge's, so the fast path is what generation runs."""
    from introspect.engine.run.decode import generate

    m = tiny_model("qwen2")
    ps, _, _, _ = _batch(m)
    generate(m, ps, None, max_new_tokens=3, min_new_tokens=3)
    assert sdpa_calls["calls"] >= 3 * m.cfg.n_layers  # prompt pass and two decoding steps, every layer
