"""The grid runner through its CLI: kill/resume, determinism, shards, and bad configs.

Everything runs on the tiny random llama in subprocesses (the way users and SLURM run it), so a
SIGKILL really is a kill. Independent runs are started concurrently to keep the suite short.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from introspect.records import Record, read_records
from introspect.runner import in_shard, layers_grid, make_context, model_slug, parse_shard, run_grid
from introspect.tasks.base import TASKS, ConfigError, TaskConfig, TaskSpec, Trial, get_task

ROOT = Path(__file__).resolve().parents[1]
GRID = ["--layers", "1", "2", "--alphas", "4", "8", "--n-concepts", "2", "--max-new-tokens", "4",
        "--seed", "3", "--no-progress"]


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    env["INTROSPECT_CACHE_VECTORS"] = str(tmp / "vectors")
    env["OMP_NUM_THREADS"] = "1"  # tiny model: threads only contend with the concurrent runs
    return env


def _start(module: str, args: list[str], tmp: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", module, *args], cwd=ROOT, env=_env(tmp),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(p: subprocess.Popen, timeout: float = 300) -> tuple[int, str, str]:
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out, err


def _trials(*paths: Path) -> dict[str, dict]:
    """Trial records by id (minus per-run fields); asserts every line parses and no duplicates."""
    out: dict[str, dict] = {}
    for path in paths:
        for line in path.read_text().splitlines():
            rec = json.loads(line)  # every line must parse
            if rec["type"] != "trial":
                continue
            assert rec["trial_id"] not in out, f"duplicate trial {rec['trial_id']}"
            rec.pop("ts")
            rec.pop("run_id")
            out[rec["trial_id"]] = rec
    return out


def _planned(model, **cfg_kw) -> set[str]:
    cfg = TaskConfig(**cfg_kw)
    ctx = make_context(model, cfg)
    return {t.id(ctx.fingerprint, cfg.seed) for t in get_task("A").plan(ctx)}


# ---------------------------------------------------------------- pure helpers
def test_shard_helpers():
    ids = [f"{i * 7919:016x}" for i in range(1000)]
    parts = [[t for t in ids if in_shard(t, (k, 4))] for k in range(4)]
    assert sorted(sum(parts, [])) == sorted(ids)
    assert parse_shard("1/4") == (1, 4) and parse_shard(None) is None
    for bad in ("3/2", "0/0", "-1/2", "x", "1/2/3"):
        with pytest.raises(ConfigError):
            parse_shard(bad)
    assert layers_grid(30, 10) == (3, 5, 8, 11, 13, 16, 18, 21, 24, 26)
    assert layers_grid(4, 10) == (1, 2)
    assert model_slug("meta-llama/Meta-Llama-3-8B") == "meta-llama__Meta-Llama-3-8B"
    assert model_slug("/some/where/llama") == "llama"


# ---------------------------------------------------------------- (a) kill and resume
def test_kill_and_resume(tiny_dir, tiny_model, tmp_path):
    model = str(tiny_dir("llama"))
    out = tmp_path / "out"
    args = ["--task", "A", "--model", model, "--out", str(out), *GRID, "--batch-size", "1"]
    path = out / "llama" / "A.jsonl"
    p = _start("experiments.run", args, tmp_path)
    deadline = time.time() + 240
    while time.time() < deadline and p.poll() is None:
        if path.exists() and len(path.read_text().splitlines()) >= 4:  # header + 3 trials
            break
        time.sleep(0.05)
    assert p.poll() is None, f"run ended before it could be killed: {p.communicate()[1]}"
    p.send_signal(signal.SIGKILL)
    p.wait()
    partial = _trials(path)
    rc, _, err = _finish(_start("experiments.run", args, tmp_path))
    assert rc == 0, err
    full = _trials(path)
    planned = _planned(tiny_model("llama"), layers=(1, 2), alphas=(4.0, 8.0), n_concepts=2, seed=3)
    assert 0 < len(partial) < len(planned)
    assert set(full) == planned
    assert all(full[k] == v for k, v in partial.items())
    assert len([r for r in read_records(path) if r["type"] == "header"]) == 2


# ---------------------------------------------------------------- (b) determinism, (c) shards
@pytest.fixture(scope="module")
def four_runs(tiny_dir, tmp_path_factory):
    """Two identical runs and the two halves of a 2-way shard, run concurrently."""
    tmp = tmp_path_factory.mktemp("runs")
    model = str(tiny_dir("llama"))
    extra = {"d1": [], "d2": [], "s0": ["--shard", "0/2"], "s1": ["--shard", "1/2"]}
    procs = {k: _start("experiments.run", ["--task", "A", "--model", model, "--out", str(tmp / k),
                                           *GRID, *v], tmp) for k, v in extra.items()}
    for k, p in procs.items():
        rc, _, err = _finish(p)
        assert rc == 0, f"{k}: {err}"
    return {k: tmp / k / "llama" / "A.jsonl" for k in extra}


def test_same_seed_same_records(four_runs):
    a, b = _trials(four_runs["d1"]), _trials(four_runs["d2"])
    assert a and a == b


def test_shards_merge_to_unsharded(four_runs):
    s0, s1 = _trials(four_runs["s0"]), _trials(four_runs["s1"])
    assert s0 and s1 and not set(s0) & set(s1)
    assert {**s0, **s1} == _trials(four_runs["d1"])


# ---------------------------------------------------------------- bug guard (in-process)
def test_unrequested_record_is_refused(tiny_model, tmp_path, monkeypatch):
    def plan(ctx):
        return [Trial("X", "clean", i) for i in range(3)]

    def execute(ctx, trials):
        yield ctx.record(Trial("X", "clean", 99))

    monkeypatch.setitem(TASKS, "X", TaskSpec("X", "bogus", plan, execute, uses_injection=False))
    with pytest.raises(RuntimeError, match="not requested"):
        run_grid(tiny_model("llama"), ["X"], TaskConfig(), tmp_path, progress=False)


# ---------------------------------------------------------------- (d) bad configs
def test_bad_configs_exit_2(tiny_dir, tmp_path):
    model = str(tiny_dir("llama"))
    base = ["--task", "A", "--model", model, *GRID]
    (tmp_path / "afile").write_text("x")
    (tmp_path / "unknown.yaml").write_text("models: [x]\ncolour: red\n")
    (tmp_path / "empty.yaml").write_text(f"models: ['{model}']\ntasks: [A]\nlayers: [1]\nalphas: []\n")
    foreign = tmp_path / "foreign"
    (foreign / "llama").mkdir(parents=True)
    header = {"type": "header", "run_id": "r0", "model_id": "llama", "fingerprint": "sha256:0ther",
              "versions": {}, "seed": 3, "ts": "t"}
    trial = Record(seed=3, model_id="llama", task="A", condition="control", trial_id="ab", run_id="r0")
    foreign_file = foreign / "llama" / "A.jsonl"
    foreign_file.write_text(json.dumps(header) + "\n" + json.dumps(trial.to_dict()) + "\n")
    before = foreign_file.read_text()
    cases = {
        "unknown task": ("experiments.run", ["--task", "Z", "--layers", "1"]),
        "empty layers": ("experiments.run", [*base, "--layers"]),
        "layer out of range": ("experiments.run", [*base, "--layers", "9"]),
        "alpha nan": ("experiments.run", [*base, "--alphas", "nan"]),
        "alpha inf": ("experiments.run", [*base, "--alphas", "4", "inf"]),
        "too many concepts": ("experiments.run", [*base, "--n-concepts", "100000"]),
        "shard 3/2": ("experiments.run", [*base, "--shard", "3/2"]),
        "unwritable out": ("experiments.run", [*base, "--out", str(tmp_path / "afile" / "sub")]),
        "foreign results": ("experiments.run", [*base, "--out", str(foreign)]),
        "unknown yaml key": ("experiments.sweep", [str(tmp_path / "unknown.yaml")]),
        "empty grid": ("experiments.sweep", [str(tmp_path / "empty.yaml")]),
        "empty alphas flag": ("experiments.run", [*base, "--alphas"]),
    }
    procs = {}
    for name, (module, args) in cases.items():
        out = tmp_path / "out" / name.replace(" ", "_")
        if "--out" not in args:
            args = [*args, "--out", str(out)]
        procs[name] = (_start(module, args, tmp_path), out)
    errs = {}
    for name, (p, out) in procs.items():
        rc, _, err = errs[name] = _finish(p)
        lines = err.strip().splitlines()
        assert rc == 2, f"{name}: rc={rc} {err}"
        assert len(lines) == 1 and lines[0].startswith("error: "), f"{name}: {err!r}"
        assert not out.exists() or not list(out.rglob("*.jsonl")), f"{name}: results written"
    assert "'colour'" in errs["unknown yaml key"][2] and "layers_grid" in errs["unknown yaml key"][2]
    assert "another model" in errs["foreign results"][2]
    assert foreign_file.read_text() == before
    assert not (tmp_path / "afile").is_dir()
