"""Activations from a model spread over several devices, simulated on the CPU.

What this covers, honestly: there is one CPU here and accelerate cannot place layers on two
distinct CPU devices, so a real device split cannot run. Instead each layer's
``hook_resid_post`` output is tagged as living on its own fake GPU (a tensor subclass whose ops
raise the error CUDA raises when two tags meet, and whose ``.to("cpu")`` / ``.cpu()`` drops the
tag). The tag then flows into the next block as the hidden state would after accelerate moved it.
This checks the code *after* the activations exist: that extraction, the baseline mean and the
multi-position (task D) path pick positions where each layer lives and bring them to one device
before stacking. It does not check accelerate's own dispatch, and it does not see a hook that adds
a CPU tensor to a GPU activation (weights carry no tag).
"""

from __future__ import annotations

import pytest
import torch

from introspect.engine.run.chat import Prompt
from introspect.engine.vectors import VectorBank, build_concept_vectors, residuals
from introspect.tasks.prompts import load_words

BASE = ["pebble", "curtain", "saddle", "jasmine", "ladder"]


class OnFakeGPU(torch.Tensor):
    """A CPU tensor labelled as living on fake GPU ``tag``."""

    tag: int

    @staticmethod
    def wrap(t: torch.Tensor, tag: int) -> OnFakeGPU:
        with torch._C.DisableTorchFunctionSubclass():
            out = t.as_subclass(OnFakeGPU)
        out.tag = tag
        return out

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tags: set[int] = set()

        def scan(x):
            if isinstance(x, OnFakeGPU):
                tags.add(x.tag)
            elif isinstance(x, (list, tuple)):
                for y in x:
                    scan(y)
            elif isinstance(x, dict):
                for y in x.values():
                    scan(y)

        scan(args)
        scan(kwargs)
        if len(tags) > 1:
            a, b = sorted(tags)[:2]
            raise RuntimeError("Expected all tensors to be on the same device, but found at least "
                               f"two devices, cuda:{a} and cuda:{b}!")
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **kwargs)
            if func in (torch.Tensor.to, torch.Tensor.cpu) and _to_cpu(func, args, kwargs):
                return out.as_subclass(torch.Tensor) if isinstance(out, torch.Tensor) else out
        return _retag(out, tags.pop()) if tags else out


def _to_cpu(func, args, kwargs) -> bool:
    if func is torch.Tensor.cpu:
        return True
    for a in [*args[1:], kwargs.get("device")]:
        if isinstance(a, (str, torch.device)) and str(a).startswith("cpu"):
            return True
    return False


def _retag(out, tag):
    if isinstance(out, torch.Tensor):
        return OnFakeGPU.wrap(out, tag)
    if isinstance(out, (list, tuple)) and not hasattr(out, "_fields"):
        return type(out)(_retag(o, tag) for o in out)
    return out


def split_hooks(model):
    """Tag every layer's residual output with the fake GPU its layer lives on (layer index)."""
    def tag(layer):
        def hook(act, hook):
            with torch._C.DisableTorchFunctionSubclass():
                plain = act.as_subclass(torch.Tensor)
            return OnFakeGPU.wrap(plain, layer)
        return hook
    return model.hooks(fwd_hooks=[(f"blocks.{la}.hook_resid_post", tag(la)) for la in range(model.cfg.n_layers)])


def test_the_simulation_bites():
    """Two tags in one op raise, as CUDA does; moving to the CPU makes them stackable."""
    a, b = OnFakeGPU.wrap(torch.ones(2), 0), OnFakeGPU.wrap(torch.ones(2), 1)
    with pytest.raises(RuntimeError, match="same device"):
        torch.stack([a, b])
    assert torch.equal(torch.stack([a.to("cpu"), b.cpu()]), torch.ones(2, 2))
    assert type(a.to("cpu", torch.float32)) is torch.Tensor and isinstance(a + a, OnFakeGPU)


def test_old_cache_stacking_fails_under_the_split(tiny_model):
    """What extraction used to do (stack ``run_with_cache`` entries as they come) breaks here."""
    m = tiny_model("llama")
    ids = torch.tensor([m.tokenizer("Human: Tell me about bread")["input_ids"]])
    with split_hooks(m), torch.no_grad():
        _, cache = m.run_with_cache(ids, names_filter=lambda n: n.endswith("hook_resid_post"))
        with pytest.raises(RuntimeError, match="same device"):
            torch.stack([cache["blocks.1.hook_resid_post"], cache["blocks.2.hook_resid_post"]])


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_extraction_gathers_on_one_device(tiny_model, family):
    m = tiny_model(family)
    tok = m.tokenizer
    prompts = [Prompt(tuple(tok(t)["input_ids"]), t) for t in ["Tell me about bread", "ocean", "A violin is"]]
    spans = [[0, len(p) - 1] for p in prompts]
    plain_last = residuals(m, prompts, [3, 0, 2])
    plain_span = residuals(m, prompts, [1, 3], positions=spans)
    with split_hooks(m):
        last = residuals(m, prompts, [3, 0, 2])
        span = residuals(m, prompts, [1, 3], positions=spans)  # task D's all-positions path
        vecs = build_concept_vectors(m, ["bread"], [1, 3], BASE, cache=False)
        base = VectorBank(m, BASE).baseline_mean([0, 3])
    for got, ref in [(last, plain_last), (span, plain_span)]:
        for g, r in zip(got, ref):
            assert type(g) is torch.Tensor and g.device.type == "cpu" and g.dtype == torch.float32
            assert torch.allclose(g, r, atol=1e-5)
    ref_vecs = build_concept_vectors(m, ["bread"], [1, 3], BASE, cache=False)
    for k, cv in vecs.items():
        assert torch.allclose(cv.vector, ref_vecs[k].vector, atol=1e-5)
    assert torch.allclose(base, VectorBank(m, BASE).baseline_mean([0, 3]), atol=1e-5)


def test_extraction_stops_after_the_deepest_layer(tiny_model):
    """Layers below the deepest one asked for run; later blocks and the unembedding do not."""
    m = tiny_model("llama")
    ran: list[str] = []
    names = [f"blocks.{la}.hook_resid_post" for la in range(m.cfg.n_layers)] + ["unembed.hook_in"]
    rec = [(n, lambda act, hook, n=n: ran.append(n)) for n in names]
    p = Prompt(tuple(m.tokenizer("Tell me about bread")["input_ids"]), "")
    with m.hooks(fwd_hooks=rec):
        residuals(m, [p], [1])
    assert ran == ["blocks.0.hook_resid_post", "blocks.1.hook_resid_post"]
    with m.hooks(fwd_hooks=rec):
        m(torch.tensor([p.ids]))
    assert len(ran) == 2 + len(names)  # a full pass does reach them (the recorder works)


def test_baseline_words_file_through_the_split(tiny_model):
    """The words file's real baseline list goes through the split without a device error."""
    m = tiny_model("qwen2")
    with split_hooks(m):
        mean = VectorBank(m, load_words().baseline[:6]).baseline_mean([2])
    assert mean.shape == (1, m.cfg.d_model) and torch.isfinite(mean).all()
