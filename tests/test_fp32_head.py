"""The output projection in float32 after a bf16 model (``introspect.engine.load.head``).

A bf16 ``lm_head`` rounds each logit to 8 significant bits, so log-probs read from it move in
steps of ~0.1 nat. With the float32 head the logits of a bf16 model are the float32 projection of
its own final hidden states (whatever path reads them), the hooks on ``unembed`` still fire, and
placement counts the copy's d_vocab × d_model × 4 bytes.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import introspect.engine.run.decode as D
from introspect.engine.load import devices, head
from introspect.engine.load.models import load_model
from introspect.engine.run.chat import Conversation, render
from introspect.engine.run.decode import generate, next_token_logprobs

SCALE = 16.0  # a power of two (exact in bf16): the tiny model's logits spread like a real model's


@pytest.fixture(scope="module")
def trio(tiny_dir):
    """bf16 with the float32 head (the default), bf16 with its own bf16 head, and float32: the
    same weights, with the head scaled in place in all three (the float32 copy follows)."""
    path = str(tiny_dir("llama"))
    models = load_model(path, dtype="bfloat16"), load_model(path, dtype="bfloat16", fp32_head=False), load_model(path)
    for m in models:
        with torch.no_grad():
            head.output_linear(m.original_model).weight.mul_(SCALE)
    return models


def _prompts(tok, n=6):
    return [render(tok, Conversation.of(("user", f"Trial {i}: tell me about bread and the ocean.")))
            for i in range(n)]


def _last_hidden_and_logits(m, ps):
    """Decode's own forward, with the final hidden state read at ``unembed.hook_in``."""
    seen = {}

    def grab(x, hook):
        seen["h"] = x.detach().clone()

    toks, mask, _ = D.pad_left(ps, m.tokenizer.pad_token_id)
    with torch.no_grad(), m.hooks(fwd_hooks=[("unembed.hook_in", grab)]):
        logits, _ = D.forward(m, toks, mask, None)
    return seen["h"][:, -1], logits


def _fp32_projection(m, h):
    lin = head.output_linear(m.original_model)
    b = None if lin.bias is None else lin.bias.float()
    return F.linear(h.float(), lin.weight.float(), b)


def test_bf16_logits_are_the_float32_projection_of_the_final_hidden_states(trio):
    fp32head, bf16head, _ = trio
    ps = _prompts(fp32head.tokenizer)
    h, logits = _last_hidden_and_logits(fp32head, ps)
    assert h.dtype == torch.bfloat16 and logits.dtype == torch.float32
    assert torch.allclose(logits, _fp32_projection(fp32head, h), atol=1e-5, rtol=0)
    # the old head rounded every logit to bf16: on the bf16 grid, up to half a step (~0.008 at |logit| ~ 2) off
    h_old, old = _last_hidden_and_logits(bf16head, ps)
    assert torch.equal(old, old.bfloat16().float())
    assert (old - _fp32_projection(bf16head, h_old)).abs().max() > 1e-3
    assert not torch.equal(logits, logits.bfloat16().float())  # the new logits are not on that grid


def test_every_reading_path_gets_float32_log_probs(trio):
    fp32head, _, _ = trio
    ps = _prompts(fp32head.tokenizer, 4)
    h, _ = _last_hidden_and_logits(fp32head, ps)
    want = torch.log_softmax(_fp32_projection(fp32head, h), -1)
    assert torch.allclose(next_token_logprobs(fp32head, ps, batch_size=4), want, atol=1e-5)
    seen = []
    with fp32head.hooks(fwd_hooks=[("unembed.hook_in", lambda x, hook: seen.append(x.detach().clone()))]):
        gens = generate(fp32head, ps, max_new_tokens=2, batch_size=4, share_prefix=False)
    first = torch.log_softmax(_fp32_projection(fp32head, seen[0][:, -1]), -1)  # the prompt pass
    assert torch.allclose(torch.stack([g.first_logprobs for g in gens]), first, atol=1e-5)
    toks, mask, _ = D.pad_left(ps, fp32head.tokenizer.pad_token_id)
    with torch.no_grad():
        logits, cache = fp32head.run_with_cache(toks, attention_mask=mask)
    assert logits.dtype == torch.float32 and cache["unembed.hook_out"].dtype == torch.float32
    assert not torch.equal(logits, logits.bfloat16().float())


def test_closer_to_the_float32_model_than_the_bf16_head(trio):
    fp32head, bf16head, fp32 = trio
    ps = _prompts(fp32.tokenizer, 8)
    ref = next_token_logprobs(fp32, ps, batch_size=8)
    new = (next_token_logprobs(fp32head, ps, batch_size=8) - ref).abs().mean()
    old = (next_token_logprobs(bf16head, ps, batch_size=8) - ref).abs().mean()
    assert new < old  # what is left is the bf16 body's rounding, which both share


def test_hooks_on_unembed_fire_and_can_edit_the_logits(trio):
    m = trio[0]
    ps = _prompts(m.tokenizer, 2)
    fired = []

    def out(x, hook):
        fired.append(x.dtype)
        return torch.zeros_like(x)

    with m.hooks(fwd_hooks=[("unembed.hook_out", out)]):
        lp = next_token_logprobs(m, ps, batch_size=2)
    assert fired == [torch.float32]
    assert torch.allclose(lp, torch.full_like(lp, -torch.log(torch.tensor(float(lp.shape[-1])))))


def test_head_copy_is_counted_named_and_off_for_float32(trio, tiny_dir, monkeypatch):
    fp32head, bf16head, fp32 = trio
    cfg = fp32.cfg
    extra = int(cfg.d_vocab) * int(cfg.d_model) * 4
    assert head.planned_bytes(tiny_dir("llama"), torch.bfloat16) == extra
    assert head.planned_bytes(tiny_dir("llama"), torch.float32) == 0
    assert head.planned_bytes(tiny_dir("llama"), torch.bfloat16, on=False) == 0
    assert fp32head.introspect_info.head_dtype == "float32" and bf16head.introspect_info.head_dtype == "bfloat16"
    assert any(n.startswith("output projection in float32") for n in fp32head.introspect_info.notes)
    assert not any(n.startswith("output projection") for n in bf16head.introspect_info.notes)
    assert head.is_fp32(fp32head) and not head.is_fp32(bf16head) and head.is_fp32(fp32)
    assert "forward" not in vars(head.output_linear(fp32.original_model))  # nothing patched on a float32 model
    assert not any("32" in k for k in fp32head.original_model.state_dict())  # never saved with the weights
    asked = []
    real = devices.place
    monkeypatch.setattr(devices, "place", lambda need, *a: asked.append(need) or real(need, *a))
    load_model(str(tiny_dir("llama")), dtype="bfloat16")
    load_model(str(tiny_dir("llama")), dtype="bfloat16", fp32_head=False)
    assert asked[0] - asked[1] == extra


def test_run_header_says_logits_are_float32(trio, tmp_path):
    import json

    from introspect.tasks.base import TaskConfig
    from introspect.tasks.runner import run_grid

    cfg = TaskConfig(layers=(1,), alphas=(4.0,), n_concepts=1, max_new_tokens=2, batch_size=4,
                     variant="paper", temperature=0.0)
    summary = run_grid(trio[0], ["A"], cfg, tmp_path, progress=False)
    header = json.loads(summary.files["A"].read_text().splitlines()[0])
    assert header["runtime"]["dtype"] == "bfloat16" and header["runtime"]["head_dtype"] == "float32"
    assert any(n.startswith("output projection in float32") for n in header["notes"])
    assert "bfloat16 (logits in float32)" in summary.table()
