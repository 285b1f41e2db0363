"""The replay gates' yardsticks (introspect.train.yardsticks), on tiny random models.

A yardstick changes the base model the way its users call "the same model" (bf16 compute, a GGUF-style
re-quantization), is measured like the adapter, and must leave nothing changed afterwards: every
parameter and buffer bit for bit, so the adapter's own readings do not depend on whether it ran.
The 6-bit one is the replay gates' bound: measured always, passed or failed by the adapter's change.
"""

from __future__ import annotations

import pytest
import torch

from introspect.engine.load.models import load_model
from introspect.engine.run.decode import next_token_logprobs
from introspect.train import data as D
from introspect.train import gates as G
from introspect.train import loop as L
from introspect.train import lora
from introspect.train import plan as PL
from introspect.train import replay as R
from introspect.train import yardsticks as Y


def _state(model) -> dict[str, torch.Tensor]:
    hf = model.original_model
    out = {f"p:{n}": p.detach().clone() for n, p in hf.named_parameters()}
    out.update({f"b:{n}": b.detach().clone() for n, b in hf.named_buffers()})  # non-persistent ones too
    return out


def _same(model, before: dict[str, torch.Tensor]) -> bool:
    now = _state(model)
    return now.keys() == before.keys() and all(
        now[k].dtype == v.dtype and torch.equal(now[k], v) for k, v in before.items())


def test_q8_0_roundtrip_is_llama_cpp_rule_per_block_of_32():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(3, 64, generator=g)
    w[1, 32:] = 0.0  # an all-zero block stays zero
    q = Y.quantize_roundtrip(w, 8)
    for r in range(3):
        for b in (slice(0, 32), slice(32, 64)):
            x = w[r, b]
            d = x.abs().max() / 127
            want = torch.zeros_like(x) if d == 0 else (x / d).round() * d.half().float()  # the scale kept in fp16
            assert torch.equal(q[r, b], want)
            assert (q[r, b] - x).abs().max() <= d / 2 + 127 * (d - d.half().float()).abs() + 1e-7
    assert torch.equal(q[1, 32:], torch.zeros(32))
    assert not torch.equal(q, w)
    assert (Y.quantize_roundtrip(w, 4) - w).abs().mean() > 4 * (q - w).abs().mean()  # fewer bits, larger change
    odd = torch.randn(2, 20, generator=g)  # 32 does not divide 20: the row is one block
    d = odd.abs().amax(1, keepdim=True) / 127
    assert torch.equal(Y.quantize_roundtrip(odd, 8), (odd / d).round() * d.half().float())


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_requantized_changes_only_base_linear_weights_and_restores_them(tiny_dir, family):
    from transformers.pytorch_utils import Conv1D

    model = load_model(str(tiny_dir(family)))
    lora.attach(model, 0, rank=4)
    hf = model.original_model
    before = _state(model)
    p = D.render(model.tokenizer, D.detection_conv("short", 1))
    lp = next_token_logprobs(model, [p])
    mods = Y.base_linears(model)
    assert mods and not any(m.weight.shape[0] == model.cfg.d_vocab or m.weight.shape[-1] == model.cfg.d_vocab for m in mods)
    assert not any(isinstance(m, lora._linear_types()) and "lora_" in n and m in mods for n, m in hf.named_modules())
    with Y.requantized(model, 8):
        now = dict(hf.named_parameters())
        for n, w in now.items():
            if "lora_" in n:
                assert torch.equal(w, before[f"p:{n}"]), n  # the adapter's own maps are not quantized
        for m in mods:
            w0 = next(before[f"p:{n}"] for n, w in hf.named_parameters() if w is m.weight)
            oi = w0.t() if isinstance(m, Conv1D) else w0  # blocks along the input dimension
            q = Y.quantize_roundtrip(oi, 8)
            assert torch.equal(m.weight, q.t() if isinstance(m, Conv1D) else q)
        assert not torch.allclose(next_token_logprobs(model, [p]), lp, atol=1e-7)
    assert _same(model, before) and torch.equal(next_token_logprobs(model, [p]), lp)
    with pytest.raises(ValueError, match="bits=1: want an integer from 2 to 16"):
        with Y.requantized(model, 1):
            pass
    assert _same(model, before)


def test_computed_in_bf16_casts_everything_and_restores_every_bit(tiny_dir):
    model = load_model(str(tiny_dir("llama")))
    hf = model.original_model
    before = _state(model)
    assert any(k.startswith("b:") for k in before)  # rotary frequencies: a buffer casting back would leave rounded
    p = D.render(model.tokenizer, D.detection_conv("short", 1))
    lp = next_token_logprobs(model, [p])
    with Y.computed_in(model, torch.bfloat16):
        assert all(t.dtype == torch.bfloat16 for t in hf.parameters())
        assert not torch.equal(next_token_logprobs(model, [p]).float(), lp)
    assert _same(model, before) and torch.equal(next_token_logprobs(model, [p]), lp)


def _adapter(model, sd: float) -> None:
    """The attached adapter's B maps drawn at standard deviation ``sd`` (0: the adapter changes nothing)."""
    with torch.no_grad():
        for n, w in model.original_model.named_parameters():
            if "lora_B" in n:
                w.normal_(0, sd, generator=torch.Generator().manual_seed(len(n))) if sd else w.zero_()


def _replay_plan(model) -> PL.Plan:
    prompts = [f"Say the number {n}." for n in range(5)]
    with G.adapter_off(model):
        items = R.build_replay(model, prompts, seed=0, tokens=6)
    words = ["pencil", "lemon", "bottle"]
    return PL.Plan(words, [], [], {w: torch.randn(model.cfg.d_model) for w in words}, {"short": 1.0},
                   [], replay_heldout=items, gate_questions=[("Is snow cold?", "yes")])


def test_gates_measure_yardsticks_on_the_base_model_beside_the_adapter(tiny_dir):
    model = load_model(str(tiny_dir("llama")))
    lora.attach(model, 0, rank=4)
    _adapter(model, 0.5)
    plan = _replay_plan(model)
    cfg = L.TrainConfig(layer=0, replay_tokens=6, phrasings=("short",))
    plain = G.damage_gates(model, plan, cfg)
    g = G.damage_gates(model, plan, cfg, yardsticks=("q8_0", "q6", "bf16"))
    assert [y["name"] for y in plain["replay_yardsticks"]] == ["q6"]  # the bar, measured unasked
    assert [y["name"] for y in g["replay_yardsticks"]] == ["q6", "q8_0", "bf16"]
    assert plain["replay_yardsticks"][0] == g["replay_yardsticks"][0]
    for k in ("replay_identical", "replay_kl", "replay_top1", "replay_identical_random", "content_answers"):
        assert g[k] == plain[k], k  # measuring the yardsticks changed nothing the adapter is read on
    q6, q8, bf = g["replay_yardsticks"]
    assert all(0 <= y["identical"] <= 1 and 0 <= y["top1"] <= 1 and y["kl"] >= 0 for y in (q8, q6, bf))
    assert 0 < q8["kl"] < q6["kl"] < g["replay_kl"]  # measured on the base model, not on the adapter
    assert q8["what"] == Y.YARDSTICKS["q8_0"][0]
    assert (g["bounds"]["replay_kl"], g["bounds"]["replay_top1"]) == (q6["kl"], q6["top1"])
    assert g["passed"]["replay_kl"] is False and g["all_passed"] is False  # a larger change than 6 bits: fails
    assert g["passed"]["replay_top1"] is (g["replay_top1"] >= q6["top1"])
    with pytest.raises(ValueError, match="unknown yardstick 'fp8': want some of bf16, q8_0, q6"):
        G.damage_gates(model, plan, cfg, yardsticks=("fp8",))


def test_replay_gates_pass_or_fail_against_the_6bit_yardstick(tiny_dir, monkeypatch):
    """The replay gates compare the adapter with whatever the q6 yardstick measures: a change
    smaller than a 6-bit re-quantization passes both, a larger one fails both, and the same larger
    change passes against a coarser yardstick put in q6's place (2 bits). Without held-out replay
    answers the bar is not measured: the replay gates read None and the adapter is no positive control."""
    monkeypatch.setattr(G, "load_bias_items", lambda: (("Is fire cold?", "no"),))  # the content gate: not read here
    model = load_model(str(tiny_dir("llama")))
    lora.attach(model, 0, rank=4)
    plan = _replay_plan(model)
    cfg = L.TrainConfig(layer=0, replay_tokens=6, phrasings=("short",))
    _adapter(model, 1e-4)
    small = G.damage_gates(model, plan, cfg)
    q6 = small["replay_yardsticks"][0]
    assert 0 < small["replay_kl"] < q6["kl"] and small["replay_top1"] >= q6["top1"]  # 4e-7 < 2e-5; 1.00 >= 0.99
    assert small["passed"]["replay_kl"] is True and small["passed"]["replay_top1"] is True
    _adapter(model, 1e-2)
    large = G.damage_gates(model, plan, cfg)
    assert large["replay_yardsticks"][0] == q6  # the same base model, the same bar
    assert large["replay_kl"] > q6["kl"] and large["replay_top1"] < q6["top1"]  # 4e-3 > 2e-5; 0.33 < 0.99
    assert large["passed"]["replay_kl"] is False and large["passed"]["replay_top1"] is False
    assert large["all_passed"] is False
    monkeypatch.setitem(Y.YARDSTICKS, "q6", ("two bits", lambda m: Y.requantized(m, 2)))
    coarse = G.damage_gates(model, plan, cfg)
    bar = coarse["replay_yardsticks"][0]
    assert bar["what"] == "two bits" and coarse["replay_kl"] == large["replay_kl"]
    assert coarse["replay_kl"] <= bar["kl"] and coarse["replay_top1"] >= bar["top1"]  # 4e-3 <= 9e-3; 0.33 >= 0.14
    assert coarse["passed"]["replay_kl"] is True and coarse["passed"]["replay_top1"] is True
    plan.replay_heldout = []
    none = G.damage_gates(model, plan, cfg)
    assert none["replay_yardsticks"][0]["kl"] is None and none["bounds"]["replay_kl"] is None
    assert none["passed"]["replay_kl"] is None and none["passed"]["replay_top1"] is None
    assert none["all_passed"] is False
