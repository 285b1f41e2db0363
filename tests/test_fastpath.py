"""The bridge's norms and blocks skip unobserved work without changing a single bit.

Bit-equal logits, injected generations and gradients with the fast path on and off on the six
test families; the HF norm runs once (the bridge's statistics are not computed) until a hook is
attached to ``hook_scale``, whose value then arrives as before; each block reads its HF forward's
signature once, not on every call.
"""

from __future__ import annotations

import inspect

import pytest
import torch

from introspect.engine.load import fastpath
from introspect.engine.run.chat import Prompt
from introspect.engine.run.decode import generate
from introspect.engine.run.inject import InjectionSpec, pad_left

FAMILIES = ["llama", "mistral", "qwen2", "gpt2", "gpt-neox", "falcon"]
RMS = {"llama", "mistral", "qwen2"}  # the bridge's native norm path; LayerNorm families compute their own


def _prompts(m):
    texts = ["Tell me about bread", "A violin is a string instrument that", "ocean"]
    return [Prompt(tuple(m.tokenizer(t)["input_ids"]), t) for t in texts]


class _Off:
    """The model with the bridge's own classes for the duration (the fixture model is shared)."""

    def __init__(self, m):
        self.m = m

    def __enter__(self):
        fastpath.enable(self.m, on=False)
        return self.m

    def __exit__(self, *exc):
        fastpath.enable(self.m)


@pytest.mark.parametrize("family", FAMILIES)
def test_logits_and_injected_generations_are_bit_equal(tiny_model, family):
    m = tiny_model(family)
    ps = _prompts(m)
    toks, mask, _ = pad_left(ps, m.tokenizer.pad_token_id)
    v = torch.randn(m.cfg.d_model, generator=torch.Generator().manual_seed(0))
    specs = [InjectionSpec(1, 8.0, v / v.norm(), "all"), None, InjectionSpec(2, 8.0, v / v.norm(), [0])]

    def run():
        with torch.no_grad():
            logits = m(toks, attention_mask=mask)
        gens = generate(m, ps, specs, max_new_tokens=6, temperature=1.0, seeds=[1, 2, 3])
        return logits, [(g.tokens, g.token_logprobs) for g in gens]

    fast = run()
    with _Off(m):
        slow = run()
    assert torch.equal(fast[0], slow[0])
    assert fast[1] == slow[1]


def test_counts_what_it_switches(tiny_model):
    m = tiny_model("llama")
    assert fastpath.enable(m) == m.cfg.n_layers * 3 + 1  # two norms and one block per layer, the final norm
    g = tiny_model("gpt2")
    assert fastpath.enable(g) == g.cfg.n_layers  # LayerNorms stay on the bridge's own computation


def test_the_norm_statistics_are_skipped_until_a_hook_wants_them(tiny_model, monkeypatch):
    m = tiny_model("llama")
    norm = m.blocks[0].ln1
    base = fastpath._BASE[type(norm)]
    calls = {"n": 0}
    real = base._hf_autograd_forward_with_hooks

    def counting(self, x):
        calls["n"] += 1
        return real(self, x)

    monkeypatch.setattr(base, "_hf_autograd_forward_with_hooks", counting)
    toks = torch.tensor([m.tokenizer("hello there")["input_ids"]])
    with torch.no_grad():
        plain = m(toks)
    assert calls["n"] == 0
    seen = []
    with torch.no_grad():
        hooked = m.run_with_hooks(toks, fwd_hooks=[("blocks.0.ln1.hook_scale", lambda t, hook: seen.append(t))])
    assert calls["n"] == 1 and seen[0].shape == (1, toks.shape[1], 1)
    assert torch.equal(plain, hooked)
    _, cache = m.run_with_cache(toks)
    assert "blocks.0.ln1.hook_normalized" in cache.keys()


@pytest.mark.parametrize("family", sorted(RMS))
def test_gradients_are_bit_equal(tiny_model, family):
    m = tiny_model(family)
    toks = torch.tensor([m.tokenizer("The cat sat on the mat")["input_ids"]])
    w = m.blocks[1].ln2.original_component.weight

    def grad():
        w.grad = None
        with torch.enable_grad():
            m(toks).float().pow(2).mean().backward()
        return w.grad.clone()

    fast = grad()
    with _Off(m):
        slow = grad()
    w.grad = None
    assert fast.abs().sum() > 0 and torch.equal(fast, slow)


def test_blocks_read_the_signature_once(tiny_model, monkeypatch):
    m = tiny_model("qwen2")
    toks = torch.tensor([m.tokenizer("once upon a time")["input_ids"]])
    with torch.no_grad():
        m(toks)  # every block has read it by now
    calls = {"n": 0}
    real = inspect.signature

    def counting(*a, **k):
        calls["n"] += 1
        return real(*a, **k)

    monkeypatch.setattr(inspect, "signature", counting)  # the one module every caller uses

    def per_forward():
        calls["n"] = 0
        with torch.no_grad():
            m(toks)
        return calls["n"]

    fast = per_forward()
    with _Off(m):
        slow = per_forward()
    assert slow - fast == m.cfg.n_layers  # the bridge's own filter reads it per block per call
