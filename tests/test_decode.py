"""The decode loop: per-row sampling streams, shared-prefix KV cache, stop strings, log-probs."""

import pytest
import torch

from introspect.engine.run.chat import Conversation, render
from introspect.engine.run.decode import DecodeStats, Sampling, SamplingError, generate, stream_seed
from introspect.engine.run.inject import From, InjectionSpec

FAMILIES = ["llama", "qwen2", "gpt2", "gpt-neox", "mistral", "falcon"]
PREAMBLE = ("I am an interpretability researcher studying transformer-based language models like you. "
            "I have access to the internals of your neural network.")


def _unit(d, seed=0):
    v = torch.randn(d, generator=torch.Generator().manual_seed(seed))
    return v / v.norm()


def _shared(tok, n=3):
    """Prompts sharing a long preamble, then differing (like task A's "Trial N")."""
    return [render(tok, Conversation.of(("user", f"{PREAMBLE} Trial {i + 1}: Do you detect a thought?"),
                                        mark=f"Trial {i + 1}")) for i in range(n)]


def _specs(prompts, v, first_layer=1):
    """Injections that start inside the suffix, at its first own token, and only in decoding."""
    mark = [p.positions("mark")[0] for p in prompts]
    return [InjectionSpec(first_layer, 8.0, v, From(mark[0])),
            InjectionSpec(2, 8.0, v, [mark[1], mark[1] + 1]),
            InjectionSpec(1, 8.0, v, "generated")]


@pytest.mark.parametrize("family", FAMILIES)
def test_prefix_shared_equals_unshared(tiny_model, family):
    m = tiny_model(family)
    ps = _shared(m.tokenizer)
    specs = _specs(ps, _unit(m.cfg.d_model))
    runs = {}
    for share in (True, False):
        st = DecodeStats()
        runs[share] = (generate(m, ps, specs, max_new_tokens=6, share_prefix=share, stats=st), st)
    (a, sa), (b, sb) = runs[True], runs[False]
    assert sa.shared_prefix[0] >= 20 and sb.shared_prefix == [0]  # the preamble really was shared
    assert sa.tokens_computed < sb.tokens_computed
    assert sa.fired == sb.fired and sum(sa.fired.values()) > 0
    for x, y in zip(a, b):
        assert x.tokens == y.tokens
        assert torch.allclose(x.first_logprobs, y.first_logprobs, atol=1e-4)
    # and both equal the uncached reference (full recomputation at every step)
    ref = generate(m, ps, specs, max_new_tokens=6, use_cache=False)
    assert [g.tokens for g in ref] == [g.tokens for g in a]


@pytest.mark.parametrize("family", FAMILIES)
def test_prompt_pass_unembeds_only_the_last_position(tiny_model, family):
    """The decode loop asks for the last position's logits only (a fifth of a prefill otherwise)."""
    from introspect.engine.run.hf_call import keeps_last_logits

    assert keeps_last_logits(type(tiny_model(family).original_model))


def test_injection_fires_in_every_decode_step(tiny_model):
    """The field's classic bug: a generated-only injection that silently stops under the KV cache."""
    m = tiny_model("llama")
    p = _shared(m.tokenizer, 1)[0]
    st = DecodeStats()
    spec = InjectionSpec(1, 30.0, _unit(m.cfg.d_model, 1), "generated")
    out = generate(m, [p], [spec], max_new_tokens=5, stop=(), stats=st)[0]
    steps = len(out.tokens) + (out.stop_reason == "eos")
    assert st.fired["blocks.1.hook_resid_post"] == steps - 1  # every step after the first
    clean = generate(m, [p], None, max_new_tokens=8)[0]
    steered = generate(m, [p], [spec], max_new_tokens=8)[0]
    assert clean.tokens[0] == steered.tokens[0] and clean.tokens != steered.tokens


def test_same_trial_same_text_at_any_batch_size(tiny_model):
    """What this covers: a row draws from the same stream alone, in a batch of 7 or 32, reversed or
    in another shard, so on this tiny model (no near-ties within 8 tokens) the texts are equal.
    What it does not: bitwise batch invariance. CPU kernels round a row differently with the
    batch's size and padding (first-step log-probs differ by up to ~1e-6, checked below), so on a
    real model a near-tie can flip an answer; the README states the measured rate."""
    m = tiny_model("qwen2")
    tok = m.tokenizer
    prompts = _shared(tok, 32)
    v = _unit(m.cfg.d_model, 2)
    specs = [InjectionSpec(1, 4.0, v, From(p.positions("mark")[0])) if i % 2 else None for i, p in enumerate(prompts)]
    seeds = [f"trial-{i}" for i in range(32)]
    kw = dict(sampling=Sampling(1.0), max_new_tokens=8)
    full = generate(m, prompts, specs, seeds=seeds, batch_size=32, **kw)
    sevens = generate(m, prompts, specs, seeds=seeds, batch_size=7, **kw)
    alone = [generate(m, [prompts[i]], [specs[i]], seeds=[seeds[i]], **kw)[0] for i in (0, 5, 31)]
    assert [g.text for g in full] == [g.text for g in sevens]
    assert [g.text for g in alone] == [full[i].text for i in (0, 5, 31)]
    assert [g.seed for g in alone] == [stream_seed(seeds[i], 0) for i in (0, 5, 31)]
    # a shard holding the odd trials only, in reverse order, draws the same texts
    odd = list(range(31, 0, -2))
    shard = generate(m, [prompts[i] for i in odd], [specs[i] for i in odd], seeds=[seeds[i] for i in odd], **kw)
    assert [g.text for g in shard] == [full[i].text for i in odd]
    drift = max(float((a.first_logprobs - full[i].first_logprobs).abs().max()) for a, i in zip(alone, (0, 5, 31)))
    assert drift < 1e-5  # batch effects are rounding-sized, not zero by construction


def test_samples_share_the_prompt_and_differ(tiny_model):
    m = tiny_model("llama")
    p = _shared(m.tokenizer, 1)[0]
    st = DecodeStats()
    rows = generate(m, [p], None, sampling=Sampling(1.0), n_samples=8, seeds=["t"], max_new_tokens=8, stats=st)
    assert [g.sample for g in rows] == list(range(8))
    assert len({g.tokens for g in rows}) > 1  # sampling changes outputs
    assert st.tokens_computed <= len(p) + 8 * 8  # the prompt went through the model once
    again = generate(m, [p, p], None, sampling=Sampling(1.0), n_samples=8, seeds=["t", "u"], max_new_tokens=8)
    assert [g.tokens for g in again[:8]] == [g.tokens for g in rows]


def test_temperature_zero_is_greedy_and_topk1_is_greedy(tiny_model):
    m = tiny_model("gpt2")
    ps = _shared(m.tokenizer, 2)
    greedy = generate(m, ps, None, max_new_tokens=6)
    assert [g.tokens for g in generate(m, ps, None, sampling=Sampling(0.0), max_new_tokens=6)] == [g.tokens for g in greedy]
    assert [g.tokens for g in generate(m, ps, None, sampling=Sampling(1.0, top_k=1), max_new_tokens=6)] == [g.tokens for g in greedy]
    assert all(g.seed is None for g in greedy)
    # the chosen token's log-prob is recorded at every step and matches the full first-step distribution
    g = greedy[0]
    assert len(g.token_logprobs) == len(g.tokens)
    assert g.token_logprobs[0] == pytest.approx(float(g.first_logprobs[g.tokens[0]]), abs=1e-5)


def test_stop_strings_cut_and_never_leak(tiny_model):
    m = tiny_model("llama")
    p = _shared(m.tokenizer, 1)[0]
    full = generate(m, [p], None, max_new_tokens=12)[0]
    assert len(full.text) > 4
    stop = full.text[2:4]  # a string the greedy text is known to contain
    cut = generate(m, [p], None, max_new_tokens=12, stop=[stop])[0]
    assert cut.stop_reason == "stop"
    assert stop not in cut.text and full.text.startswith(cut.text)
    assert len(cut.tokens) <= len(full.tokens)


def test_marked_step_logprobs(tiny_model):
    m = tiny_model("llama")
    p = _shared(m.tokenizer, 1)[0]
    full = generate(m, [p], None, max_new_tokens=10, logprob_steps=[3])[0]
    assert set(full.step_logprobs) == {0, 3}
    marker = m.tokenizer.decode(full.tokens[:2], skip_special_tokens=True)
    got = generate(m, [p], None, max_new_tokens=10, capture_after=[marker])[0]
    assert marker in got.marked_logprobs
    assert got.marked_logprobs[marker].argmax().item() == full.tokens[2]


def test_min_new_tokens_forbids_an_early_end(tiny_model):
    """Equal work for timing: a row pushed to end at once runs on to ``min_new_tokens``."""
    m = tiny_model("llama")
    p = _shared(m.tokenizer, 1)[0]
    eos = m.tokenizer.eos_token_id
    towards_eos = m.original_model.get_output_embeddings().weight[eos].detach()
    spec = InjectionSpec(m.cfg.n_layers - 1, 1e4, towards_eos / towards_eos.norm(), "all")
    ended = generate(m, [p], [spec], max_new_tokens=8)[0]
    assert ended.stop_reason == "eos" and len(ended.tokens) == 0
    held = generate(m, [p], [spec], max_new_tokens=8, min_new_tokens=5)[0]
    assert len(held.tokens) >= 5 and eos not in held.tokens[:5]


@pytest.mark.parametrize("kw, msg", [
    (dict(temperature=-1.0), "temperature"), (dict(temperature=float("nan")), "temperature"),
    (dict(top_p=0.0), "top_p"), (dict(top_p=1.5), "top_p"), (dict(top_k=-1), "top_k"),
    (dict(n_samples=0), "n_samples"), (dict(stop=[""]), "stop"), (dict(max_new_tokens=0), "max_new_tokens"),
    (dict(min_new_tokens=-1), "min_new_tokens"), (dict(max_new_tokens=4, min_new_tokens=5), "min_new_tokens"),
])
def test_bad_sampling_settings_raise_one_line_errors(tiny_model, kw, msg):
    m = tiny_model("llama")
    p = _shared(m.tokenizer, 1)[0]
    with pytest.raises(SamplingError, match=msg) as e:
        generate(m, [p], None, **kw)
    assert "\n" not in str(e.value)


@pytest.mark.slow
def test_default_model_prefix_shared_equals_unshared(default_model):
    m = default_model
    from introspect.engine.vectors import build_concept_vectors
    from introspect.tasks.prompts import load_words

    cv = build_concept_vectors(m, ["bread"], [15], load_words().baseline)[("bread", 15)]
    ps = _shared(m.tokenizer, 3)
    specs = _specs(ps, cv.vector, first_layer=15)
    specs = [InjectionSpec(s.layer_idx, 32.0, s.vector, s.token_positions) for s in specs]
    sa, sb = DecodeStats(), DecodeStats()
    a = generate(m, ps, specs, max_new_tokens=10, stats=sa)
    b = generate(m, ps, specs, max_new_tokens=10, share_prefix=False, stats=sb)
    assert sa.shared_prefix[0] > 20 and sa.fired == sb.fired
    for x, y in zip(a, b):
        assert x.tokens == y.tokens
        assert torch.allclose(x.first_logprobs, y.first_logprobs, atol=1e-4)
