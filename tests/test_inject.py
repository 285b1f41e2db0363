"""Injection: it fires where asked, in the prompt pass and in cached decoding, on every family."""

import pytest
import torch

from introspect.engine.run.chat import Conversation, Prompt, render
from introspect.engine.run.decode import generate, next_token_logprobs
from introspect.engine.run.inject import From, InjectionError, InjectionSpec, injecting, pad_left

FAMILIES = ["llama", "qwen2", "gpt2", "gpt-neox", "mistral", "falcon"]


def _prompts(tok):
    texts = ["Tell me about the river.", "Hi", "What word comes to mind when you read this line?"]
    return [render(tok, Conversation.of(("user", t))) for t in texts]


def _unit(d, seed=0):
    v = torch.randn(d, generator=torch.Generator().manual_seed(seed))
    return v / v.norm()


@pytest.mark.parametrize("family", FAMILIES)
def test_last_layer_delta_flips_top1(tiny_model, family):
    """Seed §3 acceptance: a delta at the final layer on the last token flips the top-1 logit."""
    m = tiny_model(family)
    p = _prompts(m.tokenizer)[0]
    base = next_token_logprobs(m, [p])[0]
    top, runner_up = base.topk(2).indices.tolist()
    # push the residual along (W_U[:, runner_up] - W_U[:, top]) after the last block
    W_U = m.unembed.W_U if hasattr(m.unembed, "W_U") else m.original_model.get_output_embeddings().weight.T
    direction = (W_U[:, runner_up] - W_U[:, top]).detach().float()
    spec = InjectionSpec(m.cfg.n_layers - 1, 50.0, direction / direction.norm(), [len(p) - 1])
    steered = next_token_logprobs(m, [p], [spec])[0]
    assert steered.argmax().item() != top


@pytest.mark.parametrize("family", FAMILIES)
def test_cached_equals_uncached_and_batched_equals_single(tiny_model, family):
    m = tiny_model(family)
    ps = _prompts(m.tokenizer)
    v = _unit(m.cfg.d_model)
    specs = [InjectionSpec(1, 8.0, v, "all"), None, InjectionSpec(2, 8.0, v, From(2))]
    batched = generate(m, ps, specs, max_new_tokens=8)
    uncached = generate(m, ps, specs, max_new_tokens=8, use_cache=False)
    single = [generate(m, [p], [s], max_new_tokens=8)[0] for p, s in zip(ps, specs)]
    for b, u, s in zip(batched, uncached, single):
        assert b.tokens == u.tokens == s.tokens
        assert torch.allclose(b.first_logprobs, s.first_logprobs, atol=1e-4)


def test_generated_only_injection_fires_in_decoding(tiny_model):
    """The classic silent bug: an injection on generated tokens that never fires under KV cache."""
    m = tiny_model("llama")
    p = _prompts(m.tokenizer)[0]
    v = _unit(m.cfg.d_model, 1)
    spec = InjectionSpec(1, 30.0, v, "generated")
    toks, mask, offs = pad_left([p], m.tokenizer.pad_token_id)
    with injecting(m, [spec], [p], offs) as inj:
        m.generate(toks, attention_mask=mask, max_new_tokens=5, do_sample=False, verbose=False,
                   stop_at_eos=False, use_past_kv_cache=True)
    # prompt pass touches nothing; each of the 4 decode steps after the first touches one position
    assert inj.fired["blocks.1.hook_resid_post"] == 4
    clean = generate(m, [p], None, max_new_tokens=8)[0]
    steered = generate(m, [p], [spec], max_new_tokens=8)[0]
    assert clean.tokens[0] == steered.tokens[0]  # first token comes from the prompt pass
    assert clean.tokens != steered.tokens


def test_injection_on_vs_off_changes_output_and_hooks_are_removed(tiny_model):
    m = tiny_model("qwen2")
    p = _prompts(m.tokenizer)[0]
    spec = InjectionSpec(2, 40.0, _unit(m.cfg.d_model, 2), "all")
    off = generate(m, [p], None, max_new_tokens=6)[0]
    on = generate(m, [p], [spec], max_new_tokens=6)[0]
    assert on.tokens != off.tokens
    assert generate(m, [p], None, max_new_tokens=6)[0].tokens == off.tokens  # nothing left behind
    with pytest.raises(RuntimeError), injecting(m, [spec], [p], [0]):
        raise RuntimeError("boom")
    assert all(not hp.fwd_hooks for hp in m.hook_dict.values())


def test_positions_only_touch_their_tokens(tiny_model):
    m = tiny_model("llama")
    p = _prompts(m.tokenizer)[2]
    v = _unit(m.cfg.d_model, 3)
    from introspect.engine.vectors import residuals

    clean = residuals(m, [p], [1], positions=[list(range(len(p)))])[0][0]
    steered = residuals(m, [p], [1], positions=[list(range(len(p)))], injections=[InjectionSpec(1, 5.0, v, [3, 4])])[0][0]
    diff = (steered - clean).norm(dim=-1)
    assert torch.allclose(diff[[3, 4]], torch.tensor([5.0, 5.0]), atol=1e-3)
    mask = torch.ones(len(p), dtype=torch.bool)
    mask[[3, 4]] = False
    assert diff[mask].max() < 1e-4  # resid_post at layer 1 of other positions untouched


def test_bridge_injection_equals_plain_transformers_hook(tiny_model):
    """Same tokens, same delta: the bridge hook and a raw HF forward hook give the same logits."""
    m = tiny_model("llama")
    p = _prompts(m.tokenizer)[0]
    v = _unit(m.cfg.d_model, 4)
    pos = [2, 5]
    ours = next_token_logprobs(m, [p], [InjectionSpec(2, 6.0, v, pos)])[0]
    hf = m.original_model

    def hf_hook(module, inputs, output):
        hs = output[0] if isinstance(output, tuple) else output
        hs = hs.clone()
        hs[0, pos] += 6.0 * v
        return (hs, *output[1:]) if isinstance(output, tuple) else hs

    handle = hf.model.layers[2].register_forward_hook(hf_hook)
    try:
        with torch.no_grad():
            logits = hf(torch.tensor([p.ids])).logits[0, -1]
    finally:
        handle.remove()
    assert torch.allclose(ours, torch.log_softmax(logits.float(), -1), atol=1e-4)


def test_bad_injections_raise_one_line_errors(tiny_model):
    m = tiny_model("llama")
    p = Prompt((1, 2, 3), "abc")
    v = _unit(m.cfg.d_model)
    cases = [
        (InjectionSpec(9, 1.0, v, "all"), "layer 9 out of range"),
        (InjectionSpec(0, 1.0, torch.ones(7), "all"), r"expected \(64,\)"),
        (InjectionSpec(0, float("nan"), v, "all"), "finite"),
        (InjectionSpec(0, 1.0, v, [0, 3]), "outside the prompt"),
        (InjectionSpec(0, 1.0, v, "everywhere"), "unknown position mode"),
    ]
    for spec, msg in cases:
        with pytest.raises(InjectionError, match=msg):
            generate(m, [p], [spec], max_new_tokens=1)


@pytest.mark.slow
def test_default_model_cached_equals_uncached_under_injection(default_model):
    """On the real model: a concept injection steers, and KV-cached decoding sees it too."""
    from introspect.engine.vectors import build_concept_vectors
    from introspect.tasks.prompts import load_words

    m = default_model
    words = load_words()
    cv = build_concept_vectors(m, ["bread"], [15], words.baseline)[("bread", 15)]
    p = render(m.tokenizer, Conversation.of(("user", "Tell me a short story.")))
    spec = InjectionSpec(15, 32.0, cv.vector, "all")
    cached = generate(m, [p], [spec], max_new_tokens=16)[0]
    uncached = generate(m, [p], [spec], max_new_tokens=16, use_cache=False)[0]
    clean = generate(m, [p], None, max_new_tokens=16)[0]
    assert cached.tokens == uncached.tokens
    assert cached.tokens != clean.tokens
