"""A model dispatched by accelerate, as ``from_pretrained(device_map=...)`` does over several GPUs,
gives the numbers of the undispatched model.

No GPU here: accelerate's hooks are forced on with every module mapped to "cpu", so each
decoder block, the embedding, the final norm and the output layer run inside an
``AlignDevicesHook`` as on a multi-GPU machine, and the bridge boots around them through
``load_model`` itself. Concept vectors and sampled generations with an injection are bitwise
those of the plain model, in float32 and in bf16 (whose float32 output projection then runs
inside accelerate's hook on the output layer).
"""

from __future__ import annotations

import accelerate
import pytest
import torch
import transformers

from introspect.engine.load import head
from introspect.engine.load.models import load_model
from introspect.engine.run.chat import Conversation, render
from introspect.engine.run.decode import generate
from introspect.engine.run.inject import InjectionSpec
from introspect.engine.vectors import build_concept_vectors

BASE = ["pebble", "curtain", "saddle", "jasmine", "ladder"]


def _dispatched(monkeypatch, path, dtype):
    """``load_model`` with accelerate's hooks on every module (an explicit per-module map)."""
    real = transformers.AutoModelForCausalLM.from_pretrained

    def from_pretrained(*a, **k):
        hf = real(*a, **k)
        n = hf.config.num_hidden_layers
        device_map = {"model.embed_tokens": "cpu", **{f"model.layers.{i}": "cpu" for i in range(n)},
                      "model.norm": "cpu", "model.rotary_emb": "cpu", "lm_head": "cpu"}
        return accelerate.dispatch_model(hf, device_map=device_map, force_hooks=True)

    with monkeypatch.context() as mp:
        mp.setattr(transformers.AutoModelForCausalLM, "from_pretrained", from_pretrained)
        return load_model(path, dtype=dtype)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_dispatched_model_gives_bitwise_the_same_vectors_and_generations(tiny_dir, monkeypatch, dtype):
    path = str(tiny_dir("llama"))
    plain, hooked = load_model(path, dtype=dtype), _dispatched(monkeypatch, path, dtype)
    hf = hooked.original_model
    blocks = [m for name, m in hf.named_modules() if name.startswith("model.layers.") and name.count(".") == 2]
    assert blocks and all(hasattr(b, "_hf_hook") for b in blocks)  # accelerate's hooks are on
    lin = head.output_linear(hf)
    assert hasattr(lin, "_hf_hook") and all(p.device.type == "cpu" for p in hf.parameters())
    assert head.is_fp32(hooked) and hooked.introspect_info.head_dtype == "float32"

    a = build_concept_vectors(plain, ["bread", "ocean"], [1, 3], BASE, cache=False)
    b = build_concept_vectors(hooked, ["bread", "ocean"], [1, 3], BASE, cache=False)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k].vector, b[k].vector) and a[k].raw_norm == b[k].raw_norm

    ps = [render(plain.tokenizer, Conversation.of(("user", f"Trial {i}: do you detect an injected thought?")))
          for i in range(3)]
    specs = [None, InjectionSpec(1, 4.0, a[("bread", 1)].vector, "all"), InjectionSpec(3, 8.0, a[("ocean", 3)].vector, "all")]
    kw = dict(max_new_tokens=6, temperature=1.0, seeds=["s0", "s1", "s2"], n_samples=2, batch_size=4)
    calls = []
    pre = lin._hf_hook.pre_forward
    monkeypatch.setattr(lin._hf_hook, "pre_forward", lambda *x, **y: calls.append(1) or pre(*x, **y))
    ga, gb = generate(plain, ps, specs, **kw), generate(hooked, ps, specs, **kw)
    assert calls  # the output layer ran inside accelerate's hook
    for x, y in zip(ga, gb, strict=True):
        assert x.tokens == y.tokens and x.token_logprobs == y.token_logprobs
        assert torch.equal(x.first_logprobs, y.first_logprobs)
    assert len({g.tokens for g in ga}) > 1  # the injections and samples do change the answers
