"""Sharded sweeps through ``--executor slurm|local``: submit, kill, resubmit or requeue, merge.

The SLURM test starts a real single-node SLURM from the distribution's packages
(tests/slurm/start_slurm.sh; the fixture stops it again, also on failure), submits a 4-shard
task-A sweep on the tiny random llama through the CLI, and while it runs: freezes one shard
(``scontrol suspend``) and cancels it with ``scancel`` (the launcher must resubmit it), and sends
another the preemption signal (submitit requeues it under the same job id). The merged records must
equal an unsharded run's, and the records written before each kill must survive unchanged (nothing
recomputed). It skips only when the SLURM binaries are absent (CI installs them).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SLURM_DIR = ROOT / "tests" / "slurm"
BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "scancel", "scontrol")
INSTALL = "apt-get install -y slurmctld slurmd slurm-client munge"


# ---------------------------------------------------------------- helpers
def _env(tmp: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")])
    env["INTROSPECT_CACHE_VECTORS"] = str(tmp / "vectors")
    env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = "1"
    return {**env, **(extra or {})}


def _config(tmp: Path, model: Path, **kw) -> Path:
    cfg = {"models": [str(model)], "tasks": ["A"], "layers": [1, 2], "alphas": [4, 8],
           "n_concepts": 2, "max_new_tokens": 4, "seed": 3, "options": {"n_bias": 1}, **kw}
    path = tmp / "sweep.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _sweep(args: list[str], tmp: Path, env: dict[str, str] | None = None, log: Path | None = None):
    out = open(log, "w") if log else subprocess.PIPE  # noqa: SIM115 (closed with the process)
    return subprocess.Popen([sys.executable, "-m", "experiments.sweep", *args, "--no-progress"],
                            cwd=ROOT, env=env or _env(tmp), stdout=out, stderr=subprocess.PIPE,
                            text=True)


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] \
        if path.exists() else []


def _trials(*paths: Path) -> dict[str, dict]:
    """Trial records by id; asserts there are no duplicates across all the files."""
    out: dict[str, dict] = {}
    for path in paths:
        for rec in _records(path):
            if rec["type"] == "trial":
                assert rec["trial_id"] not in out, f"trial {rec['trial_id']} recorded twice"
                out[rec["trial_id"]] = rec
    return out


def _close(x, y) -> bool:
    """Equal, except floats (also inside dicts such as ``grade``) to 1e-6 relative: a shard batches
    other rows than the unsharded run, and CPU kernels round a row differently with its batch's
    width (measured: ~1e-7 on log-probabilities). Texts, ids and every non-float must be equal."""
    if isinstance(x, float) and isinstance(y, float):
        return abs(x - y) <= 1e-6 * max(abs(x), abs(y))
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(_close(x[k], y[k]) for k in x)
    return x == y


def _mismatches(a: dict[str, dict], b: dict[str, dict]) -> list[tuple]:
    """Ids, responses and every non-float field must be equal; floats to 1e-6 (batching)."""
    bad: list[tuple] = [(k, "missing") for k in set(a) ^ set(b)]
    for k in set(a) & set(b):
        for f in (a[k].keys() | b[k].keys()) - {"ts", "run_id"}:
            x, y = a[k].get(f), b[k].get(f)
            if not _close(x, y):
                bad.append((k, f, x, y))
    return bad


def _wait_for(pred, timeout: float, what: str, proc: subprocess.Popen | None = None):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"sweep ended while waiting for {what}: {proc.stderr.read()}")
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


# ---------------------------------------------------------------- a real single-node SLURM
@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """SLURM_CONF of a fresh single-node cluster; the daemons are stopped afterwards, always."""
    missing = [b for b in BINARIES if shutil.which(b) is None]
    if missing:
        pytest.skip(f"SLURM is not installed ({', '.join(missing)} missing); as root: {INSTALL}")
    if os.geteuid() != 0:
        pytest.skip("starting slurmd needs root")
    d = tmp_path_factory.mktemp("slurm")
    try:
        p = subprocess.run(["bash", str(SLURM_DIR / "start_slurm.sh"), str(d)], capture_output=True,
                           text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert p.returncode == 0, f"single-node SLURM did not start:\n{p.stdout}\n{p.stderr}"
        yield {"SLURM_CONF": str(d / "slurm.conf")}
    finally:
        subprocess.run(["bash", str(SLURM_DIR / "stop_slurm.sh"), str(d)], timeout=120,
                       capture_output=True, stdin=subprocess.DEVNULL)


def _sctl(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), env=env, capture_output=True, text=True, timeout=60)


def _planned(out: Path, k: int) -> int | None:
    path = out / f"shard{k}" / "planned.json"
    return len(json.loads(path.read_text())["ids"]["llama"]) if path.exists() else None


def _mid_run(out: Path, skip: set[int]) -> int | None:
    """A shard that has recorded 2+ trials and has 20+ to go (seconds of work, at batch size 1)."""
    for k in sorted(set(range(4)) - skip):
        n = _planned(out, k)
        if n and 2 <= len(_trials(out / f"shard{k}" / "llama" / "A.jsonl")) <= n - 20:
            return k
    return None


def _first_run(out: Path, k: int) -> dict[str, dict]:
    """The records written by the shard's first run (the one that was interrupted)."""
    recs = _records(out / f"shard{k}" / "llama" / "A.jsonl")
    first = next(r["run_id"] for r in recs if r["type"] == "header")
    return {r["trial_id"]: r for r in recs if r["type"] == "trial" and r["run_id"] == first}


def _interrupt(out: Path, job: str, how: list[str], gone, skip: set[int], env, launcher):
    """Signal a shard mid-run with ``scancel *how``; once ``gone(job_k)``, return the shard and
    the records its first run wrote, if that run really was cut short (else try another shard:
    SLURM gives a cancelled job seconds to exit, and a short shard may finish in them)."""
    for _ in range(4):
        k = _wait_for(lambda: _mid_run(out, skip), 150, "a shard mid-run", launcher)
        assert _sctl(env, "scancel", *how, f"{job}_{k}").returncode == 0
        _wait_for(lambda k=k: gone(f"{job}_{k}"), 90, f"job {job}_{k} to stop", launcher)
        skip.add(k)
        first = _first_run(out, k)
        if len(first) < _planned(out, k):
            return k, first
    raise AssertionError("no shard could be interrupted mid-run")


@pytest.mark.slurm
def test_slurm_sweep_cancel_requeue_merge(slurm, tiny_dir, tmp_path):
    t0 = time.time()
    env = _env(tmp_path, slurm)
    cfg = _config(tmp_path, tiny_dir("llama"), alphas=[4, 8, 16], n_concepts=6, n_trials=3,
                  batch_size=1, variant="paper", options={"n_bias": 1, "steer_check": False},
                  max_new_tokens=24)  # 492 trials: each shard must outlast a cancel round-trip (246 did not on an AVX-512 CPU)
    out, ref = tmp_path / "out", tmp_path / "ref"
    reference = _sweep([str(cfg), "--out", str(ref)], tmp_path, env)  # unsharded, meanwhile
    log = tmp_path / "launcher.log"
    launcher = _sweep([str(cfg), "--out", str(out), "--executor", "slurm", "--shards", "4",
                       "--wait", "--max-retries", "2", "--time", "30"], tmp_path, env, log)
    try:
        job = _wait_for(lambda: re.findall(r"submitted job array (\d+)", log.read_text()), 120,
                        "the job id", launcher)[0]
        skip: set[int] = set()

        def squeue(job_id: str) -> str:
            return _sctl(env, "squeue", "-h", "-j", job_id, "-o", "%T %r").stdout.strip()

        # 1. cancelled: the job ends for good; the launcher must resubmit the shard.
        cancelled, before_cancel = _interrupt(
            out, job, [], lambda j: squeue(j) in ("", "CANCELLED None"), skip, env, launcher)
        # 2. preempted: SLURM's warning signal reaches the job, submitit checkpoints and requeues
        # it under the same job id; SLURM holds a requeued job for 2 minutes: release it at once.
        preempted, before_preempt = _interrupt(
            out, job, ["--signal=USR2"], lambda j: squeue(j) in ("", "PENDING BeginTime"), skip, env,
            launcher)
        assert _sctl(env, "scontrol", "update", f"jobid={job}_{preempted}",
                     "StartTime=now").returncode == 0
        # Generous: under `make test-all`'s two workers the other one (the calibration pool) shares
        # the CPU, and the unsharded reference ran 120 s past the launcher there (2026-11-28).
        rc = launcher.wait(timeout=480)
        ref_rc = reference.wait(timeout=600)
    finally:
        for p in (launcher, reference):
            if p.poll() is None:
                p.kill()
    text, err = log.read_text(), launcher.stderr.read()
    assert rc == 0, f"{text[-3000:]}\n{err}"
    assert ref_rc == 0, reference.stderr.read()
    # The cancelled shard was resubmitted as a new job; the preempted one kept its job id.
    assert f"shard {cancelled}/4: job {job}_{cancelled} ended with" in text, text[-3000:]
    state = json.loads((out / "jobs" / "launch.json").read_text())
    assert not state["jobs"][str(cancelled)].startswith(f"{job}_")
    assert state["jobs"][str(preempted)] == f"{job}_{preempted}"
    assert f"shard {preempted}/4" not in text
    # Merged records == the unsharded run's; nothing written before a kill was recomputed.
    shards = sorted(out.glob("shard*/llama/A.jsonl"))
    merged, expected = _trials(*shards), _trials(ref / "llama" / "A.jsonl")
    assert len(shards) == 4 and len(expected) == len(merged) == 492
    assert not _mismatches(merged, expected)
    for k, before in ((cancelled, before_cancel), (preempted, before_preempt)):
        assert before and all(merged[i] == r for i, r in before.items()), f"shard {k} recomputed"
        runs = [r["run_id"] for r in _records(out / f"shard{k}" / "llama" / "A.jsonl")
                if r["type"] == "header"]
        assert len(runs) == 2 and runs[0] != runs[1], f"shard {k} did not resume once: {runs}"
    # The merge wrote one summary and dashboard for the parent dir, counting each id once.
    from introspect.report import load_results

    assert (out / "summary.csv").stat().st_size and (out / "dashboard.html").stat().st_size
    assert len(load_results(out)) == len(expected)
    print(f"slurm sweep test: {time.time() - t0:.0f}s")


# ---------------------------------------------------------------- local processes
@pytest.mark.slow  # several python processes, each importing torch: test-all
def test_local_executor_merges_and_never_recomputes(tiny_dir, tmp_path):
    cfg = _config(tmp_path, tiny_dir("llama"))
    out = tmp_path / "out"
    args = [str(cfg), "--out", str(out), "--executor", "local", "--shards", "2", "--parallel", "2"]
    procs = [_sweep(args, tmp_path), _sweep([str(cfg), "--out", str(tmp_path / "ref")], tmp_path)]
    results = [p.communicate(timeout=300) + (p.returncode,) for p in procs]
    for _o, e, rc in results:
        assert rc == 0, e
    assert "submitted local processes" in results[0][0]
    shards = sorted(out.glob("shard*/llama/A.jsonl"))
    assert len(shards) == 2
    assert not _mismatches(_trials(*shards), _trials(tmp_path / "ref" / "llama" / "A.jsonl"))
    assert (out / "summary.csv").exists() and (out / "dashboard.html").exists()
    before = {p: p.read_text() for p in shards}
    o, e = (p := _sweep(args, tmp_path)).communicate(timeout=300)
    assert p.returncode == 0, e
    assert "already complete" in o and {p: p.read_text() for p in shards} == before


@pytest.mark.slow  # several python processes, each importing torch: test-all
def test_failing_shard_is_named_with_its_log(tiny_dir, tmp_path):
    """A model dir without weights fails inside every shard: retried, then one error line each."""
    broken = tmp_path / "broken"
    shutil.copytree(tiny_dir("llama"), broken, ignore=shutil.ignore_patterns("*.safetensors"))
    cfg = _config(tmp_path, broken)
    o, e = (p := _sweep([str(cfg), "--out", str(tmp_path / "out"), "--executor", "local",
                         "--shards", "1", "--max-retries", "1"], tmp_path)).communicate(timeout=300)
    assert p.returncode == 1, e
    errors = [ln for ln in e.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and "resubmitting (retry 1 of 1)" in o, (o, e)
    assert "shard 0/1 failed 2 times" in errors[0] and "holds no weight files" in errors[0]
    log = Path(re.search(r"log: (\S+)$", errors[0]).group(1))
    assert log.exists() and log.parent == tmp_path / "out" / "jobs"


BAD = {
    "--shards 0": (["--executor", "local", "--shards", "0"], "--shards must be positive"),
    "--shard and --shards": (["--executor", "local", "--shards", "2", "--shard", "0/2"],
                             "exclude each other"),
    "bad --time": (["--executor", "slurm", "--time", "soon"], "--time must look like"),
    "bad --mem": (["--executor", "slurm", "--mem", "lots"], "--mem must look like"),
    "no slurm": (["--executor", "slurm", "--shards", "2"], "needs SLURM's sbatch"),
    "bad executor": (["--executor", "k8s"], "invalid choice"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_launch_flags_exit_2(name, tiny_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))
    from experiments import sweep

    if name == "no slurm":
        monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here
    args, expect = BAD[name]
    out, cfg = tmp_path / "out", _config(tmp_path, tiny_dir("llama"))
    capsys.readouterr()
    with pytest.raises(SystemExit) if name == "bad executor" else nullcontext():
        rc = sweep.main([str(cfg), "--out", str(out), *args])
        assert rc == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expect in lines[0], lines
    assert not out.exists()


def test_time_and_mem_syntax():
    from experiments.executors import parse_mem, parse_time

    assert [parse_time(t) for t in ("90", "4:00:00", "1-12:00:00", "30:30", "0:10:01")] == \
        [90, 240, 2160, 31, 11]
    assert [parse_mem(m) for m in ("16G", "16GB", "512M", "2t", "8")] == [16, 16, 0.5, 2048, 8]
