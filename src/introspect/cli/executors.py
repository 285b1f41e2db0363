"""Where a sweep's shards run: a SLURM job array or local processes, both through submitit.

Why a separate module: ``introspect.cli.launch`` decides *what* to (re)submit from the shards'
records; this module only knows how to start a shard and whether its job is still alive, for two
back ends with one interface (``submit``, ``alive``, ``log``, ``cancel``):

* ``SlurmBackend`` submits one sbatch job array per call (submitit writes the sbatch file, pickles
  the shard function and requeues it on preemption / time-out). Liveness comes from ``squeue``,
  which, unlike submitit's ``sacct`` watcher, also works on clusters without job accounting.
* ``LocalBackend`` runs shards as local submitit processes, at most ``parallel`` at a time, with
  the CPU threads split between them and ``gpus_per_shard`` GPUs each when there are GPUs (all of
  them for a model spread by a device map).

Shards whose weights the launcher already fetched run offline (``HF_HUB_OFFLINE``), so a
hundred array tasks never download the same 140 GB at once; threads default to the CPUs the job
was given (``nproc`` honours SLURM's allocation), not one.
"""

from __future__ import annotations

import getpass
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import submitit

from introspect.tasks.base import ConfigError

# The folder holding the ``introspect`` package in use: shards import the same code. An installed
# package (in site-packages) is found by the interpreter itself and needs no path.
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
DEAD = {"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
        "PREEMPTED", "TIMEOUT", "SPECIAL_EXIT"}  # squeue states after which the job will not run again
DEFAULT_TIME_MIN = 24 * 60
MAX_TIMEOUTS = 20  # submitit requeues a timed-out shard this often (each rerun resumes)


@dataclass(frozen=True)
class Resources:
    """What one shard's job asks SLURM for (None: the cluster's default)."""

    partition: str | None = None
    gpus_per_task: int | None = None
    time_min: int | None = None
    mem_gb: float | None = None
    cpus_per_task: int | None = None


def parse_time(text: str) -> int:
    """SLURM time syntax (``90``, ``MM:SS``, ``H:MM:SS``, ``D-H[:MM[:SS]]``) → whole minutes."""
    m = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", text.strip())
    if not m:
        raise ConfigError(f"--time must look like 90, 4:00:00 or 1-12:00:00 (SLURM syntax), got {text!r}")
    d, a, b, c = (int(x) if x else None for x in m.groups())
    if d is not None:  # D-H[:M[:S]]
        mins = d * 1440 + a * 60 + (b or 0) + (1 if c else 0)
    elif c is not None:  # H:M:S
        mins = a * 60 + b + (1 if c else 0)
    elif b is not None:  # M:S
        mins = a + (1 if b else 0)
    else:
        mins = a
    if mins < 1:
        raise ConfigError(f"--time must be at least one minute, got {text!r}")
    return mins


def parse_mem(text: str) -> float:
    """``16G``, ``16GB``, ``500M``, ``1T`` or a bare number of GB → GB."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]?)B?", text.strip().upper())
    if not m or float(m.group(1)) <= 0:
        raise ConfigError(f"--mem must look like 16G or 500M, got {text!r}")
    return float(m.group(1)) * {"K": 1 / 1024**2, "M": 1 / 1024, "G": 1, "T": 1024, "": 1}[m.group(2)]


THREADS = "${SLURM_CPUS_PER_TASK:-$(nproc)}"  # the CPUs this job was given
CPUS_PER_GPU = 4  # asked for when --gpus-per-task is given without --cpus-per-task (tokenizer, sampling loop)


def _env_lines(threads: str, offline: bool = False) -> list[str]:
    """Shell lines run before each shard: thread count, import path (a source checkout's
    ``src``), quiet HF loaders, and offline hub access when the launcher fetched the weights
    already."""
    lines = [f"export OMP_NUM_THREADS={threads}", f"export MKL_NUM_THREADS={threads}"]
    if PACKAGE_ROOT.name not in ("site-packages", "dist-packages"):
        lines.append(f'export PYTHONPATH={shlex.quote(str(PACKAGE_ROOT))}"${{PYTHONPATH:+:$PYTHONPATH}}"')
    lines.append("export HF_HUB_DISABLE_PROGRESS_BARS=1")
    if offline:
        lines += ["export HF_HUB_OFFLINE=1", "export TRANSFORMERS_OFFLINE=1"]
    return lines


def _run(cmd: list[str]) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=60).stdout


def partition_time_min(partition: str | None) -> int:
    """The partition's time limit in minutes, capped at a day (a day if unknown or infinite)."""
    try:
        lines = _run(["sinfo", "-h", "-o", "%P %l", *(["-p", partition] if partition else [])])
    except (OSError, subprocess.SubprocessError):
        return DEFAULT_TIME_MIN
    for line in lines.splitlines():
        name, _, limit = line.partition(" ")
        if partition or name.endswith("*"):
            try:
                return min(parse_time(limit), DEFAULT_TIME_MIN)
            except ConfigError:  # "infinite", "n/a"
                return DEFAULT_TIME_MIN
    return DEFAULT_TIME_MIN


def node_gpus(partition: str | None) -> int | None:
    """GPUs per node of the partition from ``sinfo``'s generic resources (``gpu:a100:4(S:0-1)``)."""
    try:
        lines = _run(["sinfo", "-h", "-o", "%G", *(["-p", partition] if partition else [])])
    except (OSError, subprocess.SubprocessError):
        return None
    counts = [int(m.group(1)) for m in re.finditer(r"gpu(?::[\w.-]+)?:(\d+)", lines)]
    return max(counts) if counts else None


class SlurmBackend:
    """Shards as SLURM array tasks; job ids look like ``123_4`` (array 123, task 4) or ``130``."""

    kind = "slurm"

    def __init__(self, folder: Path, res: Resources, *, whole_node: bool = False, offline: bool = False):
        if not all(shutil.which(b) for b in ("sbatch", "squeue", "srun")):
            raise ConfigError("--executor slurm needs SLURM's sbatch, squeue and srun on PATH (run it "
                              "on a cluster login node), or use --executor local")
        if whole_node and res.gpus_per_task is None:  # a device map spreads one model over a node's GPUs
            n = node_gpus(res.partition)
            if n is None:
                raise ConfigError("--device-map needs every GPU of a node, but sinfo does not say how many "
                                  "a node has; give --gpus-per-task G")
            res = replace(res, gpus_per_task=n)
        if res.gpus_per_task and res.cpus_per_task is None:
            res = replace(res, cpus_per_task=CPUS_PER_GPU * res.gpus_per_task)
        self.folder, self.res = folder, res
        self.ex = submitit.SlurmExecutor(folder=folder, max_num_timeout=MAX_TIMEOUTS)
        time_min = res.time_min or partition_time_min(res.partition)
        # --ntasks 1 explicit: SLURM 23.11+ rejects --gpus-per-task without --ntasks
        kw: dict[str, Any] = dict(job_name="introspect-sweep", time=time_min,
                                  setup=_env_lines(THREADS, offline),
                                  additional_parameters={"requeue": True, "ntasks": 1})
        for key, val in (("partition", res.partition), ("gpus_per_task", res.gpus_per_task),
                         ("cpus_per_task", res.cpus_per_task), ("mem", res.mem_gb)):
            if val is not None:
                kw[key] = val
        self.ex.update_parameters(**kw)
        self.jobs: dict[int, Any] = {}
        self.squeue_failed = False

    def submit(self, shards: dict[int, Any]) -> str:
        """Submit ``{shard: callable}`` as one array (or one job); returns the SLURM job id."""
        ks = sorted(shards)
        try:
            with self.ex.batch():
                jobs = [self.ex.submit(shards[k]) for k in ks]
        except (submitit.core.utils.FailedJobError, submitit.core.utils.FailedSubmissionError) as e:
            lines = [ln for ln in str(e).splitlines() if ln.strip()]
            raise ConfigError(f"sbatch refused the job: {lines[-1] if lines else e}") from None
        self.jobs.update(zip(ks, jobs))
        return jobs[0].job_id.split("_")[0]

    def attach(self, k: int, job_id: str) -> None:
        self.jobs[k] = submitit.SlurmJob(folder=self.folder, job_id=job_id)

    def states(self) -> dict[str, str] | None:
        """``{job id: state}`` of this user's jobs in squeue (array tasks one by one), None if it fails."""
        try:
            out = _run(["squeue", "-h", "-r", "-u", getpass.getuser(), "-o", "%i|%T"])
        except (OSError, subprocess.SubprocessError):
            return None
        return dict(line.split("|", 1) for line in out.split() if "|" in line)

    def alive(self) -> set[int]:
        states = self.states()
        if states is None:  # scheduler unreachable: assume nothing died
            self.squeue_failed = True
            return set(self.jobs)
        return {k for k, j in self.jobs.items() if states.get(j.job_id, "COMPLETED") not in DEAD}

    def job_id(self, k: int) -> str:
        return self.jobs[k].job_id

    def log(self, k: int) -> Path:
        return self.jobs[k].paths.stderr

    def cancel(self) -> None:  # SLURM jobs outlive the launcher on purpose; see launch.watch
        pass

    def submit_after(self, fn: Any, job_ids: list[str]) -> str:
        """One small job that runs ``fn`` once every job in ``job_ids`` has ended (any way)."""
        ex = submitit.SlurmExecutor(folder=self.folder)
        ex.update_parameters(job_name="introspect-merge", time=60, cpus_per_task=1, use_srun=False,
                             setup=_env_lines("1"), dependency="afterany:" + ":".join(job_ids),
                             **({"partition": self.res.partition} if self.res.partition else {}))
        return ex.submit(fn).job_id


class LocalBackend:
    """Shards as local processes (submitit's LocalExecutor), ``parallel`` at a time."""

    kind = "local"

    def __init__(self, folder: Path, res: Resources, parallel: int, gpus: int, *, gpus_per_shard: int = 1,
                 offline: bool = False):
        self.folder, self.parallel, self.gpus = folder, max(1, parallel), gpus
        self.per = max(1, min(gpus_per_shard, gpus)) if gpus else 0
        self.groups = [tuple(range(i, i + self.per)) for i in range(0, gpus - self.per + 1, self.per)] if gpus else []
        self.parallel = min(self.parallel, len(self.groups)) if self.groups else self.parallel
        self.time_min = res.time_min or 7 * DEFAULT_TIME_MIN
        threads = res.cpus_per_task or max(1, (os.cpu_count() or 1) // self.parallel)
        self.threads, self.offline = str(threads), offline
        self.queue: dict[int, Any] = {}  # shard -> callable, not started yet
        self.jobs: dict[int, Any] = {}
        self.gpu_of: dict[int, tuple[int, ...]] = {}

    def _start(self) -> None:
        running = {k for k, j in self.jobs.items() if not j.done()}
        for k in sorted(self.queue):
            if len(running) >= self.parallel:
                break
            ex = submitit.LocalExecutor(folder=self.folder, max_num_timeout=MAX_TIMEOUTS,
                                        python=shlex.quote(sys.executable))
            setup = _env_lines(self.threads, self.offline)
            if self.groups:  # a free group of GPUs (one GPU, or all of them for a spread model)
                used = {self.gpu_of[r] for r in running if r in self.gpu_of}
                free = [g for g in self.groups if g not in used]
                self.gpu_of[k] = free[0] if free else self.groups[k % len(self.groups)]
                setup.append(f"export CUDA_VISIBLE_DEVICES={','.join(map(str, self.gpu_of[k]))}")
            ex.update_parameters(timeout_min=self.time_min, setup=setup)
            self.jobs[k] = ex.submit(self.queue.pop(k))
            running.add(k)

    def submit(self, shards: dict[int, Any]) -> str:
        self.queue.update(shards)
        self._start()
        return "local"

    def alive(self) -> set[int]:
        self._start()
        return set(self.queue) | {k for k, j in self.jobs.items() if not j.done()}

    def job_id(self, k: int) -> str:
        return self.jobs[k].job_id if k in self.jobs else "queued"

    def log(self, k: int) -> Path:
        return self.jobs[k].paths.stderr if k in self.jobs else self.folder

    def cancel(self) -> None:
        self.queue.clear()
        for j in self.jobs.values():
            if not j.done():
                j.cancel()


# ---------------------------------------------------------------- before any shard starts
def gpus_for(need_bytes: int) -> int:
    """GPUs one local shard needs for weights of ``need_bytes`` (1 without GPUs or a size)."""
    import math

    import torch

    from introspect.engine.load.devices import HEADROOM

    if not need_bytes or not torch.cuda.is_available():
        return 1
    smallest = min(torch.cuda.get_device_properties(i).total_memory for i in range(torch.cuda.device_count()))
    return max(1, math.ceil(need_bytes / (HEADROOM * smallest)))


def prefetch(models: list[str], dtype: str | None = None) -> int:
    """Fetch every model's weights once, here (hub snapshots with progress, registry conversions),
    so shards start offline instead of all downloading at once; the largest model's bytes (with
    its float32 output projection, as ``load_model`` places it)."""
    from introspect.engine.load import head, hub
    from introspect.engine.load.models import resolve, resolve_dtype

    need = 0
    for name in models:
        path, entry = resolve(name, progress=True)
        if not Path(path).is_dir():
            path = str(hub.snapshot(path))
        dt = resolve_dtype(dtype or (entry.dtype if entry else None), "cuda")
        need = max(need, hub.weights_bytes(Path(path), dt.itemsize) + head.planned_bytes(path, dt))  # + float32 head
    return need
