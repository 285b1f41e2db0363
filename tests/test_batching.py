"""Batch size from free memory, halving on out-of-memory, and the batch in the run header.

No GPU here: out-of-memory is a monkeypatched forward that raises ``torch.OutOfMemoryError`` (what
CUDA raises), and scarce memory is a monkeypatched free-memory reading.
"""

from __future__ import annotations

import json

import pytest
import torch

import introspect.engine.run.decode as D
from introspect.engine.load import devices
from introspect.engine.run.chat import Conversation, render
from introspect.engine.run.decode import DecodeStats, Sampling, generate

FAMILIES = ["llama", "mistral", "qwen2", "gpt2", "gpt-neox", "falcon"]


def _prompts(tok, n):
    return [render(tok, Conversation.of(("user", f"Trial {i + 1}: do you detect an injected thought?")))
            for i in range(n)]


def control_groups(m, max_new_tokens: int) -> tuple[list, list, dict]:
    """Two groups of 9 rows (one prompt and stream each: a control and 8 injections) as
    ``generate``'s prompts, specs and keyword arguments (batch 16, greedy)."""
    from introspect.engine.run.inject import InjectionSpec

    p, q = _prompts(m.tokenizer, 2)
    v = torch.randn(m.cfg.d_model, generator=torch.Generator().manual_seed(0))
    group = [None] + [InjectionSpec(1, a, v / v.norm(), "all") for a in (1, 2, 3, 4, 5, 6, 7, 8)]
    args = dict(max_new_tokens=max_new_tokens, batch_size=16, seeds=["s"] * 9 + ["t"] * 9, do_sample=False)
    return [p] * 9 + [q] * 9, group * 2, args


@pytest.mark.parametrize("family", FAMILIES)
def test_kv_bytes_per_token_matches_the_real_cache(tiny_model, family):
    m = tiny_model(family)
    ids = torch.tensor([m.tokenizer("Tell me about bread and the ocean")["input_ids"]] * 3)
    cache = D.new_cache(m)
    with torch.no_grad():
        D.forward(m, ids, torch.ones_like(ids), cache)
    held = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
    assert held == ids.numel() * devices.kv_bytes_per_token(m)


def test_out_of_memory_halves_and_keeps_finished_chunks(tiny_model, monkeypatch):
    m = tiny_model("llama")
    ps = _prompts(m.tokenizer, 20)
    kw = dict(sampling=Sampling(1.0), seeds=[f"t{i}" for i in range(20)], max_new_tokens=5)
    ref = generate(m, ps, None, batch_size=4, **kw)
    real, calls = D.forward, {"n": 0, "oom_at": None}

    def flaky(model, ids, mask, cache):
        calls["n"] += 1
        if ids.shape[0] > 4 and calls["oom_at"] is None and calls["n"] > 8:  # the second batch of 8
            calls["oom_at"] = calls["n"]
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(model, ids, mask, cache)

    monkeypatch.setattr(D, "forward", flaky)
    monkeypatch.setattr(m, "introspect_batch_cap", 8, raising=False)  # undone after the test
    st = DecodeStats()
    got = generate(m, ps, None, batch_size=8, stats=st, **kw)
    assert calls["oom_at"] is not None
    assert st.oom_halvings == [8] and st.batches == [8, 4, 4, 4]  # the finished first 8 were not redone
    assert [g.tokens for g in got] == [g.tokens for g in ref]  # per-row streams: same texts
    assert m.introspect_batch_cap == 4  # the next call starts from what fitted
    st2 = DecodeStats()
    generate(m, ps[:6], None, batch_size=8, stats=st2, **{**kw, "seeds": kw["seeds"][:6]})
    assert st2.batches == [4, 2]


def test_activation_reads_halve_on_out_of_memory(tiny_model, monkeypatch):
    """Vector extraction, residual norms and task D read activations through ``residuals``: an
    OOM there halves its batch too, keeps the finished chunks, and gives the same activations."""
    import introspect.engine.vectors as V

    m = tiny_model("llama")
    ps = _prompts(m.tokenizer, 12)
    ref = V.residuals(m, ps, [1, 2], batch_size=4)
    real, sizes = V._gather, []

    def flaky(model, toks, mask, where, wanted):
        sizes.append(toks.shape[0])
        if toks.shape[0] > 4:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(model, toks, mask, where, wanted)

    monkeypatch.setattr(V, "_gather", flaky)
    monkeypatch.setattr(m, "introspect_batch_cap", 8, raising=False)  # undone after the test
    got = V.residuals(m, ps, [1, 2], batch_size=8)
    assert sizes == [8, 4, 4, 4] and m.introspect_batch_cap == 4
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(got, ref)) and len(got) == 12
    with pytest.raises(RuntimeError, match="shapes"):
        monkeypatch.setattr(V, "_gather", lambda *a: (_ for _ in ()).throw(RuntimeError("shapes differ")))
        V.residuals(m, ps, [1], batch_size=4)


def test_next_token_logprobs_halve_on_out_of_memory(tiny_model, monkeypatch):
    """The single-forward log-prob pass (recovery's clean/perturbed readings) halves too."""
    m = tiny_model("llama")
    ps = _prompts(m.tokenizer, 10)
    ref = D.next_token_logprobs(m, ps, batch_size=4)
    real, sizes = D.forward, []

    def flaky(model, ids, mask, cache):
        sizes.append(ids.shape[0])
        if ids.shape[0] > 4:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(model, ids, mask, cache)

    monkeypatch.setattr(D, "forward", flaky)
    monkeypatch.setattr(m, "introspect_batch_cap", 8, raising=False)  # undone after the test
    got = D.next_token_logprobs(m, ps, batch_size=8)
    assert sizes == [8, 4, 4, 2] and m.introspect_batch_cap == 4 and got.shape == ref.shape
    assert torch.allclose(got, ref, atol=1e-5)


def test_other_errors_are_not_taken_for_out_of_memory(tiny_model, monkeypatch):
    m = tiny_model("llama")

    def broken(*a, **k):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")

    monkeypatch.setattr(D, "forward", broken)
    with pytest.raises(RuntimeError, match="shapes"):
        generate(m, _prompts(m.tokenizer, 2), None, max_new_tokens=2)
    assert devices.is_oom(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 GB"))
    assert devices.is_oom(torch.OutOfMemoryError("CUDA out of memory"))
    assert not devices.is_oom(ValueError("out of memory"))


def test_batch_follows_free_ram(tiny_model, monkeypatch):
    m = tiny_model("qwen2")
    ps = _prompts(m.tokenizer, 10)
    longest = max(len(p) for p in ps) + 6
    per_row = devices.row_bytes(m, longest)
    monkeypatch.setattr(devices, "_meminfo_available", lambda: int(3.5 * per_row / devices.BATCH_HEADROOM))
    assert devices.fit_batch(m, longest, cap=16) == 3
    st = DecodeStats()
    generate(m, ps, None, max_new_tokens=6, batch_size=16, stats=st)
    assert st.batches == [3, 3, 3, 1]
    monkeypatch.setattr(devices, "_meminfo_available", lambda: 1 << 40)  # plenty: the CPU cap / the ask
    assert devices.fit_batch(m, longest) == devices.CPU_MAX_BATCH
    assert devices.plan_batch(m, 32, 40)[0] == 32 and devices.plan_batch(m, 0, 40)[0] == devices.CPU_MAX_BATCH


def test_header_says_device_attention_dtype_and_batch(tiny_model, tmp_path, monkeypatch):
    from introspect.tasks.base import TaskConfig
    from introspect.tasks.runner import run_grid

    m = tiny_model("llama")
    cfg = TaskConfig(layers=(1,), alphas=(4.0,), n_concepts=1, max_new_tokens=4, batch_size=0,
                     variant="paper", temperature=0.0)
    summary = run_grid(m, ["A"], cfg, tmp_path, progress=False)
    header = json.loads(summary.files["A"].read_text().splitlines()[0])
    rt = header["runtime"]
    assert rt["device"] == "cpu" and rt["device_name"] and rt["attention"] == "sdpa" and rt["dtype"] == "float32"
    assert rt["batch_size"] == header["config"]["batch_size"] == devices.CPU_MAX_BATCH
    assert rt["batch_rule"].startswith("auto: ")
    assert "attention sdpa" in summary.table() and f"batch {devices.CPU_MAX_BATCH}" in summary.table()


def test_batch_size_auto_on_the_command_line(monkeypatch):
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1]))
    from experiments.settings import build_parser, check_settings

    assert build_parser().parse_args(["--batch-size", "auto"]).batch_size == 0
    assert build_parser().parse_args(["--batch-size", "12"]).batch_size == 12
    assert check_settings({"batch_size": "auto"}, "test")["batch_size"] == 0
    from experiments.settings import task_config

    assert task_config({"layers": [1]}).batch_size == 0  # not asked for: auto
    assert task_config({"layers": [1], "batch_size": 12}).batch_size == 12
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--batch-size", "lots"])


def test_a_control_group_is_kept_whole_by_stretching_the_batch_where_memory_allows(tiny_model, monkeypatch):
    """Two groups of 9 rows (one prompt and stream: a control and 8 injections) at batch 16 run as
    one batch of 18, not two of 9; with memory for only 16 rows they run as two batches of 9."""
    m = tiny_model("llama")
    prompts, specs, args = control_groups(m, 3)
    monkeypatch.setattr(devices, "_meminfo_available", lambda: 1 << 40)
    st = DecodeStats()
    roomy = generate(m, prompts, specs, stats=st, **args)
    assert st.batches == [18]
    longest = max(len(p) for p in prompts) + 3
    monkeypatch.setattr(devices, "_meminfo_available",
                        lambda: int(16.5 * devices.row_bytes(m, longest) / devices.BATCH_HEADROOM))
    st = DecodeStats()
    tight = generate(m, prompts, specs, stats=st, **args)
    assert st.batches == [9, 9]
    assert [g.tokens for g in roomy] == [g.tokens for g in tight]  # greedy here: same answers either way
