"""Reproducible mode (``--reproducible``, the full presets' default): deterministic kernels with
the cuBLAS setting made before CUDA starts, the batch pinned (no lowering to free memory, no
stretch, an out-of-memory error instead of halving), and each record's batch size kept.

No GPU here: scarce memory is a faked free-memory reading, an OOM a forward that raises
``torch.OutOfMemoryError`` (what CUDA raises), and a started CUDA a faked ``is_initialized``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from test_batching import _prompts, control_groups

import introspect.engine.run.decode as D
from introspect.engine.load import determinism, devices
from introspect.engine.run.decode import DecodeStats, Sampling, generate


@pytest.fixture
def fresh(monkeypatch):
    """No cuBLAS setting in the environment, and determinism restored after the test."""
    monkeypatch.setenv(determinism.CUBLAS_ENV, "")
    monkeypatch.delenv(determinism.CUBLAS_ENV)
    before, bench = torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark
    yield
    torch.use_deterministic_algorithms(before)
    torch.backends.cudnn.benchmark = bench


@pytest.fixture
def pinned(tiny_model, monkeypatch):
    m = tiny_model("llama")
    monkeypatch.setattr(m, "introspect_pinned_batch", True, raising=False)  # undone after the test
    return m




def _scarce(monkeypatch, m, rows, tokens):
    """Free host memory for ``rows`` rows of ``tokens`` tokens."""
    per_row = devices.row_bytes(m, tokens)
    monkeypatch.setattr(devices, "_meminfo_available", lambda: int((rows + 0.5) * per_row / devices.BATCH_HEADROOM))


def test_enable_sets_cublas_before_cuda_and_turns_on_deterministic_algorithms(fresh, monkeypatch):
    import os

    determinism.enable()
    assert os.environ[determinism.CUBLAS_ENV] == ":4096:8"
    assert torch.are_deterministic_algorithms_enabled() and determinism.enabled()
    assert torch.backends.cudnn.benchmark is False
    torch.use_deterministic_algorithms(False)
    monkeypatch.delenv(determinism.CUBLAS_ENV)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)  # too late to set it
    with pytest.raises(determinism.ReproducibilityError, match="CUBLAS_WORKSPACE_CONFIG=:4096:8"):
        determinism.enable()
    assert not torch.are_deterministic_algorithms_enabled()
    monkeypatch.setenv(determinism.CUBLAS_ENV, ":16:8")  # set by the user before CUDA started: fine
    determinism.enable()
    assert os.environ[determinism.CUBLAS_ENV] == ":16:8" and torch.are_deterministic_algorithms_enabled()


def test_a_pinned_batch_is_not_lowered_to_free_memory(pinned, monkeypatch):
    m = pinned
    ps = _prompts(m.tokenizer, 10)
    _scarce(monkeypatch, m, 3, max(len(p) for p in ps) + 4)
    kw = dict(max_new_tokens=4, batch_size=4, sampling=Sampling(1.0), seeds=[f"s{i}" for i in range(10)])
    st = DecodeStats()
    gens = generate(m, ps, None, stats=st, **kw)
    assert st.batches == [4, 4, 2] and sorted(g.batch for g in gens) == [2] * 2 + [4] * 8
    determinism.pin(m, False)
    st = DecodeStats()
    free = generate(m, ps, None, stats=st, **kw)
    assert st.batches == [3, 3, 3, 1] and sorted(g.batch for g in free) == [1] + [3] * 9  # unpinned: what fits


def test_a_pinned_batch_is_not_stretched_to_keep_a_group_whole(pinned, monkeypatch):
    m = pinned
    prompts, specs, args = control_groups(m, 2)
    monkeypatch.setattr(devices, "_meminfo_available", lambda: 1 << 40)
    st = DecodeStats()
    generate(m, prompts, specs, stats=st, **args)
    assert st.batches == [9, 9]  # unpinned, memory for 20 rows stretches this to one batch of 18
    determinism.pin(m, False)
    st = DecodeStats()
    generate(m, prompts, specs, stats=st, **args)
    assert st.batches == [18]


def test_out_of_memory_with_a_pinned_batch_is_an_error_naming_the_flag(pinned, monkeypatch):
    m = pinned
    ps = _prompts(m.tokenizer, 8)

    def oom(*a, **k):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(D, "forward", oom)
    st = DecodeStats()
    with pytest.raises(determinism.PinnedBatchError) as err:
        generate(m, ps, None, max_new_tokens=2, batch_size=8, stats=st)
    msg = str(err.value)
    assert "--reproducible" in msg and "--batch-size" in msg and "batch 8" in msg and "\n" not in msg
    assert isinstance(err.value.__cause__, torch.OutOfMemoryError)
    assert not hasattr(m, "introspect_batch_cap") and st.batches == []  # nothing halved, nothing remembered
    with pytest.raises(determinism.PinnedBatchError):
        D.next_token_logprobs(m, ps, batch_size=8)


def test_the_plan_keeps_the_asked_batch_and_plans_auto_once(pinned, monkeypatch):
    m = pinned
    _scarce(monkeypatch, m, 3, devices.PLAN_TOKENS + 40)
    n, why = devices.plan_batch(m, 32, 40)
    assert n == 32 and why.startswith("pinned (--reproducible)")
    n, why = devices.plan_batch(m, 0, 40)
    assert n == 3 and why.startswith("auto, then pinned")
    determinism.pin(m, False)
    assert devices.plan_batch(m, 32, 40)[0] == 3


def test_run_grid_reproducible_header_records_and_summary(tiny_model, tmp_path, fresh, monkeypatch):
    from introspect.tasks.base import TaskConfig
    from introspect.tasks.runner import run_grid

    m = tiny_model("llama")
    monkeypatch.setattr(m, "introspect_pinned_batch", False, raising=False)  # undone after the test
    cfg = TaskConfig(layers=(1,), alphas=(4.0,), n_concepts=2, max_new_tokens=3, batch_size=5,
                     variant="paper", temperature=0.0)
    summary = run_grid(m, ["A"], cfg, tmp_path, progress=False, reproducible=True)
    lines = [json.loads(x) for x in summary.files["A"].read_text().splitlines()]
    rt = lines[0]["runtime"]
    assert rt["reproducible"] is True and rt["batch_size"] == 5 and rt["batch_rule"].startswith("pinned")
    batches = [r["gen"]["batch"] for r in lines[1:]]
    assert batches and all(1 <= b <= 5 for b in batches) and max(batches) == 5
    assert "reproducible mode on" in summary.table() and "batch pinned at 5" in summary.table()
    assert torch.are_deterministic_algorithms_enabled() and determinism.pinned(m)


def test_the_flag_and_the_full_presets(monkeypatch, fresh, tmp_path):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1]))
    from experiments import settings
    from introspect.tasks.base import ConfigError

    parse = settings.build_parser().parse_args
    assert settings.settings_from_args(parse(["--reproducible"]))["reproducible"] is True
    assert "reproducible" not in settings.settings_from_args(parse([]))
    assert settings.settings_from_args(parse(["--preset", "full"]))["reproducible"] is True
    assert settings.settings_from_args(parse(["--preset", "selfknowledge"]))["reproducible"] is True
    assert settings.settings_from_args(parse(["--preset", "full", "--no-reproducible"]))["reproducible"] is False
    assert not settings.load_settings("quick").get("reproducible")
    with pytest.raises(ConfigError, match="reproducible must be true or false"):
        settings.check_settings({"reproducible": "yes"}, "test")
    seen = {}

    def load(*a, **k):  # what the environment looked like when the model (and CUDA) would start
        import os

        seen.update(env=os.environ.get(determinism.CUBLAS_ENV), det=torch.are_deterministic_algorithms_enabled())
        raise SystemExit(0)

    import introspect.engine.load.models as models

    monkeypatch.setattr(models, "load_model", load)
    with pytest.raises(SystemExit):
        settings.run_settings({"reproducible": True, "tasks": ["A"], "layers": [1], "out": str(tmp_path)})
    assert seen == {"env": ":4096:8", "det": True}


def test_self_knowledge_and_injection_records_keep_the_batch_only_when_pinned(pinned):
    from introspect.engine.run.decode import Generation
    from introspect.tasks.base import TaskConfig
    from introspect.tasks.injection import common as inj
    from introspect.tasks.runner import make_context
    from introspect.tasks.selfknowledge import common as sk

    ctx = make_context(pinned, TaskConfig(layers=(1,)))
    g = Generation("ok", (1,), torch.zeros(3), batch=5)
    assert ctx.decode_batch(g) == {"batch": 5} and ctx.decode_batch(None) == {}
    assert sk.gen_info(ctx, g, response=8)["batch"] == 5 and inj.gen_info(ctx, g)["batch"] == 5
    determinism.pin(pinned, False)
    assert "batch" not in sk.gen_info(ctx, g, response=8) and "batch" not in inj.gen_info(ctx, g)
