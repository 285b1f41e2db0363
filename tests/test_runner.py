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

from introspect.records.jsonl import Record, read_records
from introspect.tasks import get_task
from introspect.tasks.base import TASKS, ConfigError, TaskConfig, TaskSpec, Trial
from introspect.tasks.runner import (
    in_shard,
    layers_grid,
    make_context,
    model_slug,
    parse_shard,
    run_grid,
)

ROOT = Path(__file__).resolve().parents[1]
GRID = ["--layers", "1", "2", "--alphas", "4", "8", "--n-concepts", "2", "--max-new-tokens", "4",
        "--seed", "3", "--option", "n_bias=1", "--no-progress"]


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


def _same(x, y, rel: float) -> bool:
    if isinstance(x, float) and isinstance(y, float):
        return x == y or abs(x - y) <= rel * max(abs(x), abs(y))
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(_same(x[k], y[k], rel) for k in x)
    if isinstance(x, list) and isinstance(y, list):
        return len(x) == len(y) and all(_same(u, v, rel) for u, v in zip(x, y))
    return x == y


def _diff(a: dict[str, dict], b: dict[str, dict], rel: float = 0.0) -> list[tuple]:
    """(trial id, field, a's value, b's value) for every field that differs; readable failures."""
    out = [(k, "<missing>", k in a, k in b) for k in set(a) ^ set(b)]
    for k in set(a) & set(b):
        out += [(k, f, a[k].get(f), b[k].get(f)) for f in a[k].keys() | b[k].keys()
                if not _same(a[k].get(f), b[k].get(f), rel)]
    return out


def _planned(model, **cfg_kw) -> set[str]:
    cfg = TaskConfig(**cfg_kw).with_options(n_bias=1)
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


# ------------------------------------------------- (a) kill and resume, (b) shards, (c) determinism
@pytest.fixture(scope="module")
def runs(tiny_dir, tmp_path_factory):
    """The two halves of a 2-way shard and a run killed mid-way then resumed, started concurrently:
    one set of processes (~12 s of imports and loading each) serves both tests."""
    tmp = tmp_path_factory.mktemp("runs")
    model = str(tiny_dir("llama"))
    extra = {"s0": ["--shard", "0/2"], "s1": ["--shard", "1/2"], "k": ["--batch-size", "1"]}
    args = {k: ["--task", "A", "--model", model, "--out", str(tmp / k), *GRID, *v] for k, v in extra.items()}
    procs = {k: _start("experiments.run", a, tmp) for k, a in args.items()}
    path = tmp / "k" / "llama" / "A.jsonl"
    deadline = time.time() + 240
    while time.time() < deadline and procs["k"].poll() is None:
        if path.exists() and len(path.read_text().splitlines()) >= 4:  # header + 3 trials
            break
        time.sleep(0.05)
    assert procs["k"].poll() is None, f"run ended before it could be killed: {procs['k'].communicate()[1]}"
    procs["k"].send_signal(signal.SIGKILL)
    procs["k"].wait()
    partial = _trials(path)
    procs["k"] = _start("experiments.run", args["k"], tmp)  # the same command again: it resumes
    for k, p in procs.items():
        rc, _, err = _finish(p)
        assert rc == 0, f"{k}: {err}"
    return {"partial": partial, **{k: tmp / k / "llama" / "A.jsonl" for k in extra}}


def test_kill_and_resume(runs, tiny_model):
    full = _trials(runs["k"])
    planned = _planned(tiny_model("llama"), layers=(1, 2), alphas=(4.0, 8.0), n_concepts=2, seed=3)
    assert 0 < len(runs["partial"]) < len(planned)
    assert set(full) == planned
    assert all(full[k] == v for k, v in runs["partial"].items())
    assert len([r for r in read_records(runs["k"]) if r["type"] == "header"]) == 2


def test_shards_merge_to_the_same_records_as_one_killed_and_resumed_run(runs):
    """Same seed, same records, in other processes: the shards' union equals the resumed run."""
    s0, s1 = _trials(runs["s0"]), _trials(runs["s1"])
    assert s0 and s1 and not set(s0) & set(s1)
    # Text, grades and ids must match exactly. Floats (p_yes ...) to 1e-6: a shard and a run at
    # batch size 1 put other rows together (other padding, other matmul shapes), and the CPU
    # kernels may split a reduction across threads differently from run to run.
    assert not _diff({**s0, **s1}, _trials(runs["k"]), rel=1e-6)
    # latent naming's two readings (report and neutral prefill) are among the grades compared
    lat = [r["grade"] for r in {**s0, **s1}.values() if r["condition"] in ("injected", "concept_random")]
    assert lat and all("latent_names_word" in g and "latent_names_word_neutral" in g for g in lat)


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
@pytest.fixture
def bad_env(tiny_dir, tmp_path):
    """Files the bad-config cases point at: a plain file, two sweep YAMLs, a foreign results dir."""
    model = str(tiny_dir("llama"))
    (tmp_path / "afile").write_text("x")
    (tmp_path / "unknown.yaml").write_text("models: [x]\ncolour: red\n")
    (tmp_path / "empty.yaml").write_text(f"models: ['{model}']\ntasks: [A]\nlayers: [1]\nalphas: []\n")
    header = {"type": "header", "run_id": "r0", "model_id": "llama", "fingerprint": "sha256:0ther",
              "versions": {}, "seed": 3, "ts": "t"}
    trial = Record(seed=3, model_id="llama", task="A", condition="control", trial_id="ab", run_id="r0")
    foreign = tmp_path / "foreign" / "llama" / "A.jsonl"
    foreign.parent.mkdir(parents=True)
    foreign.write_text(json.dumps(header) + "\n" + json.dumps(trial.to_dict()) + "\n")
    return model, tmp_path


BAD = {  # name: (module, args, text the error must contain); {m} model dir, {t} tmp dir
    "unknown task": ("run", ["--task", "Z", "--layers", "1"], "unknown task 'Z'"),
    "empty layers": ("run", ["--layers"], "empty layer list"),
    "layer out of range": ("run", ["--layers", "9"], "out of range"),
    "alpha nan": ("run", ["--alphas", "nan"], "finite"),
    "alpha inf": ("run", ["--alphas", "4", "inf"], "finite"),
    "empty alphas": ("run", ["--alphas"], "empty alpha list"),
    "too many concepts": ("run", ["--n-concepts", "100000"], "exceeds"),
    "shard 3/2": ("run", ["--shard", "3/2"], "bad shard"),
    "unwritable out": ("run", ["--out", "{t}/afile/sub"], "not a directory"),
    "foreign results": ("run", ["--out", "{t}/foreign"], "another model's trials"),
    "unknown yaml key": ("sweep", ["{t}/unknown.yaml"], "'colour'; allowed keys: models"),
    "empty grid": ("sweep", ["{t}/empty.yaml"], "empty alpha list"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_config_exits_2(name, bad_env, capsys, monkeypatch):
    """In-process ``main`` (one import for all cases); the subprocess path is covered below."""
    monkeypatch.syspath_prepend(str(ROOT))  # `experiments` lives at the repository root
    from experiments import run, sweep

    model, tmp = bad_env
    module, args, expect = BAD[name]
    args = [a.format(m=model, t=tmp) for a in args]
    if module == "run":
        args = ["--task", "A", "--model", model, *GRID, *args]
    out = tmp / "out"
    if "--out" not in args and module == "run":
        args += ["--out", str(out)]
    before = {p: p.read_text() for p in tmp.rglob("*.jsonl")}
    rc = (run.main if module == "run" else sweep.main)(args)
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expect in lines[0], err
    assert not out.exists()
    assert {p: p.read_text() for p in tmp.rglob("*.jsonl")} == before  # nothing created or touched
    assert not (tmp / "results").exists() and not (ROOT / "results" / "llama").exists()


def test_bad_config_subprocess_one_line(tiny_dir, tmp_path):
    rc, out, err = _finish(_start("experiments.run", ["--task", "A", "--model", str(tiny_dir("llama")),
                                                      "--layers", "7", "--out", str(tmp_path / "o")],
                                  tmp_path))
    assert rc == 2 and err.strip().splitlines() == [
        "error: layers [7] out of range; this model has layers 0..3"], err
    assert not (tmp_path / "o").exists()


_BAD_SAMPLING = [
    (["--temperature", "-1"], "temperature must be a finite number >= 0 (0 = greedy), got -1.0"),
    (["--temperature", "nan"], "temperature must be a finite number >= 0 (0 = greedy), got nan"),
    (["--top-p", "1.5"], "top_p must be in (0, 1], got 1.5"),
    (["--top-k", "-2"], "top_k must be an integer >= 0 (0 = off), got -2"),
    (["--samples", "0"], "n_samples (--samples) must be an integer >= 1, got 0"),
]


def _bad_sampling_args(tiny_dir, out: Path, flags: list[str]) -> list[str]:
    return ["--task", "A", "--model", str(tiny_dir("llama")), "--layers", "1", *flags, "--out", str(out)]


@pytest.mark.parametrize("flags, msg", _BAD_SAMPLING)
def test_bad_sampling_flags_one_line_nothing_written(tiny_dir, tmp_path, capsys, flags, msg):
    """Sampling settings are checked before the model loads: one line, exit 2, no files. In-process
    through the same ``main`` (a subprocess each cost 4.5 s, nearly all of it importing torch); the
    shell surface (one stderr line, exit 2) is ``test_bad_config_subprocess_one_line``'s."""
    from experiments.settings import main

    assert main(_bad_sampling_args(tiny_dir, tmp_path / "o", flags)) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"error: {msg}"]
    assert not (tmp_path / "o").exists()


def test_help_lists_every_registered_task():
    from experiments.settings import build_parser
    from introspect.tasks.base import TASKS

    out = build_parser().format_help()
    assert TASKS and all(name in out and spec.description in out for name, spec in TASKS.items())


def test_quick_preset_with_a_self_knowledge_task_points_to_its_quick_preset(monkeypatch):
    """``--task delegate --preset quick`` would run the Delegate Game at its full defaults (about
    nine minutes): one line naming the preset that sizes it instead."""
    from experiments.settings import build_parser, settings_from_args
    from introspect.tasks.base import ConfigError

    monkeypatch.chdir(ROOT)
    with pytest.raises(ConfigError, match="use --preset selfknowledge-quick"):
        settings_from_args(build_parser().parse_args(["--task", "delegate", "--preset", "quick"]))
    assert settings_from_args(build_parser().parse_args(["--task", "A", "--preset", "quick"]))["tasks"] == ["A"]
    s = settings_from_args(build_parser().parse_args(["--task", "delegate", "--preset", "selfknowledge-quick"]))
    assert s["options"]["n"] == 5
