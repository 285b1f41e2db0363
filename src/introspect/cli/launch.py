"""Run a sweep as N shards on SLURM (one job array) or local processes: watch, retry, merge.

    introspect sweep CONFIG --executor slurm --shards 8 --wait [--partition gpu ...]

Why this module: ``--shard k/N`` alone leaves a cluster user to write sbatch files, notice dead
shards and merge by hand. Here the shards are submitted through submitit, and everything after is
decided from the shards' *records*, not from job states alone:

* shard k runs into ``<out>/shard{k}`` and first writes ``planned.json`` (the trial ids it owns),
  so progress is finished-planned-ids over all shards, and a shard is complete when all are done;
* a shard whose job is gone while it is incomplete (cancelled, killed, node failure, crash) is
  resubmitted, up to ``max_retries`` times; the rerun resumes from its JSONL, so nothing finished
  is recomputed. On preemption or time-out SLURM signals the job, submitit checkpoints it (the
  shard function carries no state) and requeues it under the same job id, and it resumes the same
  way. A shard that keeps failing is named with its log path in one ``error:`` line;
* job ids go to ``<out>/jobs/launch.json``: rerunning the same command attaches to live jobs
  instead of duplicating them, and submits only shards that are neither live nor complete;
* at the end the merge writes the one summary and dashboard for ``<out>`` (the report loader reads
  every shard's JSONL and counts each trial id once). Without ``--wait`` a small dependent job
  does the merge once the array has ended;
* before any shard starts, the launcher fetches every model's weights once (hub snapshots with a
  progress bar, registry GGUF conversions) and the shards then run offline; a local shard gets as
  many GPUs as its model needs (all of them with ``--device-map``), and GPU memory is given back
  between the models of a sweep.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import submitit

from introspect.cli.executors import LocalBackend, Resources, SlurmBackend, gpus_for, prefetch
from introspect.engine.load.devices import release
from introspect.records.atomic import atomic_write_text
from introspect.records.jsonl import done_trial_ids

EXECUTORS = ("slurm", "local")
PLANNED = "planned.json"
POLL_S = 2.0
LOG_EVERY_S = 60.0


@dataclass(frozen=True)
class Launch:
    """One sharded sweep: its settings (sweep-file dict, ``out`` resolved), shards and resources."""

    settings: dict[str, Any]
    shards: int
    executor: str = "slurm"
    resources: Resources = Resources()
    max_retries: int = 2
    parallel: int | None = None  # local executor: shards at once (default: GPUs, else all)
    run_kw: dict[str, Any] = field(default_factory=dict)  # device, dtype, device_map
    offline: bool = False  # the launcher fetched every model's weights: shards need no hub
    need_bytes: int = 0  # the largest model's weights once loaded (plans GPUs per local shard)

    @property
    def out(self) -> Path:
        return Path(self.settings["out"])

    @property
    def key(self) -> str:
        """Fingerprint of what is being run (not where): a planned.json from another config is stale."""
        s = {k: v for k, v in self.settings.items() if k != "out"}
        return hashlib.sha256(json.dumps([s, self.shards], sort_keys=True, default=str).encode()
                              ).hexdigest()[:16]


def shard_dir(out: Path, k: int) -> Path:
    return out / f"shard{k}"


def _write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=1))  # readers never see half a file


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------- inside the job
def run_shard(plan: Launch, k: int) -> int:
    """Run shard k of the sweep into ``<out>/shard{k}`` (resuming); returns trials run now."""
    from introspect.cli.common import load
    from introspect.cli.settings import CORE_TASKS, expand_tasks, task_config
    from introspect.engine.load.models import DEFAULT_MODEL
    from introspect.tasks import get_task
    from introspect.tasks.runner import in_shard, make_context, model_slug, run_grid

    s, shard, out = plan.settings, (k, plan.shards), shard_dir(plan.out, k)
    models = s.get("models") or [DEFAULT_MODEL]
    tasks = expand_tasks(s.get("tasks") or list(CORE_TASKS))
    planned: dict[str, list[str]] = {}
    notes = [f"device_map={plan.run_kw['device_map']}"] if plan.run_kw.get("device_map") else []
    n_run = 0
    if s.get("reproducible"):  # before the model loads: cuBLAS reads its setting when CUDA starts
        from introspect.engine.load import determinism

        determinism.enable()
    for name in models:
        model = load(name, **plan.run_kw)
        cfg = task_config(s, model.cfg.n_layers)
        ctx = make_context(model, cfg)
        ids = (t.id(ctx.fingerprint, cfg.seed) for task in tasks for t in get_task(task).plan(ctx))
        planned[model_slug(ctx.model_id)] = [i for i in ids if in_shard(i, shard)]
        _write_json(out / PLANNED, {"key": plan.key, "models": len(models), "ids": planned})
        summary = run_grid(model, tasks, cfg, out, shard=shard, progress=False, notes=notes,
                           reproducible=bool(s.get("reproducible")))
        print(f"== shard {k}/{plan.shards} {summary.model}\n{summary.table()}", flush=True)
        n_run += summary.n_run
        del model, ctx
        release()  # the next model of the sweep gets the GPU memory back
    return n_run


class ShardJob(submitit.helpers.Checkpointable):
    """The pickled callable of one array task. Stateless: on preemption submitit's default
    ``checkpoint`` requeues the same call, which resumes from the shard's JSONL."""

    def __init__(self, plan: Launch, k: int):
        self.plan, self.k = plan, k

    def __call__(self) -> int:
        return run_shard(self.plan, self.k)


def merge(out: Path) -> None:
    """Write ``<out>``'s summary and dashboard from every shard's records."""
    from introspect.cli.run_report import report

    report(Path(out), [])


# ---------------------------------------------------------------- progress from records
@dataclass(frozen=True)
class ShardStatus:
    done: int
    planned: int | None  # None: the shard has not planned yet (not started, or another config)
    complete: bool


class Progress:
    """Per-shard finished/planned trial counts read from the shards' files (re-read on change)."""

    def __init__(self, plan: Launch):
        self.plan = plan
        self._ids: dict[Path, tuple[int, set[str]]] = {}

    def _done(self, path: Path) -> set[str]:
        size = path.stat().st_size
        if path not in self._ids or self._ids[path][0] != size:
            self._ids[path] = (size, done_trial_ids(path))
        return self._ids[path][1]

    def shard(self, k: int) -> ShardStatus:
        d = shard_dir(self.plan.out, k)
        p = _read_json(d / PLANNED)
        if not isinstance(p, dict) or p.get("key") != self.plan.key:
            return ShardStatus(0, None, False)
        want = {i for ids in p["ids"].values() for i in ids}
        done = set().union(*(self._done(f) for f in d.rglob("*.jsonl")))
        n = len(want & done)
        return ShardStatus(n, len(want), len(p["ids"]) == p["models"] and n == len(want))

    def all(self) -> dict[int, ShardStatus]:
        return {k: self.shard(k) for k in range(self.plan.shards)}


# ---------------------------------------------------------------- submit, watch, retry
def _backend(plan: Launch):
    folder = (plan.out / "jobs").absolute()
    spread = bool(plan.run_kw.get("device_map"))
    if plan.executor == "slurm":
        return SlurmBackend(folder, plan.resources, whole_node=spread, offline=plan.offline)
    gpus = 0
    if plan.run_kw.get("device") != "cpu":
        import torch

        gpus = torch.cuda.device_count()
    per = gpus if spread else gpus_for(plan.need_bytes)
    parallel = plan.parallel or (max(1, gpus // max(per, 1)) if gpus else plan.shards)
    return LocalBackend(folder, plan.resources, min(parallel, plan.shards), gpus, gpus_per_shard=per,
                        offline=plan.offline)


def _bar(enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=0, unit="trial", dynamic_ncols=True, file=sys.stderr, desc="sweep",
                disable=not enabled or not sys.stderr.isatty())


def _last_error(log: Path) -> str:
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    errs = [ln for ln in lines if "Error" in ln or "error" in ln.split(":")[0]]
    return f", last error: {errs[-1][:200]}" if errs else ""


def launch(plan: Launch, *, wait: bool = True, progress: bool = True) -> int:
    """Submit the shards that are neither complete nor running, optionally watch them; exit code."""
    backend = _backend(plan)
    state_path = backend.folder / "launch.json"
    prog = Progress(plan)
    status = prog.all()
    state = _read_json(state_path) if plan.executor == "slurm" else None
    attached: list[int] = []
    if isinstance(state, dict) and state.get("key") == plan.key:
        for k_s, job_id in state.get("jobs", {}).items():
            if not status[int(k_s)].complete:
                backend.attach(int(k_s), job_id)
        attached = sorted(backend.alive())
        backend.jobs = {k: backend.jobs[k] for k in attached}
    todo = [k for k in range(plan.shards) if not status[k].complete and k not in attached]
    if attached:
        print(f"attached to running shards {attached} (jobs {[backend.job_id(k) for k in attached]})")
    if todo:
        array = backend.submit({k: ShardJob(plan, k) for k in todo})
        what = "job array" if plan.executor == "slurm" else "local processes"
        print(f"submitted {what} {array}: shards {todo} of {plan.shards}; logs in {backend.folder}",
              flush=True)
    if not todo and not attached:
        print(f"all {plan.shards} shards already complete (nothing recomputed); merging", flush=True)
    _save(state_path, plan, backend)
    if not wait and plan.executor == "slurm" and backend.jobs:
        if todo:  # an attach-only rerun leaves the merge to the job the first launch submitted
            ids = sorted({backend.job_id(k).split("_")[0] for k in backend.jobs})
            merge_id = backend.submit_after(_MergeJob(plan.out), ids)
            print(f"merge job {merge_id} writes {plan.out}/summary.csv and dashboard.html when "
                  "the shards end")
        print("rerun this command with --wait to follow the shards and resubmit failed ones")
        return 0
    return watch(plan, backend, prog, progress=progress, state_path=state_path)


class _MergeJob:
    def __init__(self, out: Path):
        self.out = Path(out).absolute()

    def __call__(self) -> None:
        merge(self.out)


def _save(path: Path, plan: Launch, backend: Any) -> None:
    if plan.executor == "slurm":
        _write_json(path, {"key": plan.key, "shards": plan.shards,
                           "jobs": {str(k): backend.job_id(k) for k in backend.jobs}})


def watch(plan: Launch, backend: Any, prog: Progress, *, progress: bool, state_path: Path) -> int:
    """Poll until every shard is complete or out of retries; resubmit dead ones; merge; exit code."""
    tries = {k: 1 for k in backend.jobs} | {k: 1 for k in getattr(backend, "queue", {})}
    failed: dict[int, str] = {}
    bar, last_line = _bar(progress), time.time()
    try:
        while True:
            alive = backend.alive()  # before reading records: a job that ended has flushed them
            status = prog.all()
            bar.total = sum(s.planned or 0 for s in status.values())
            bar.n = sum(s.done for s in status.values())
            bar.set_postfix(running=len(alive), failed=len(failed), refresh=True)
            if bar.disable and time.time() - last_line >= LOG_EVERY_S:  # logs / CI: a line a minute
                print(f"progress: {bar.n}/{bar.total} trials, {len(alive)} shards running",
                      flush=True)
                last_line = time.time()
            dead = [k for k, s in status.items() if not s.complete and k not in alive and k not in failed]
            again = {}
            for k in dead:
                log = backend.log(k)
                if tries.get(k, 0) > plan.max_retries:
                    failed[k] = (f"shard {k}/{plan.shards} failed {tries[k]} times (last job "
                                 f"{backend.job_id(k)}{_last_error(log)}); log: {log}")
                    continue
                s = status[k]
                print(f"shard {k}/{plan.shards}: job {backend.job_id(k)} ended with "
                      f"{s.done}/{s.planned if s.planned is not None else '?'} trials; "
                      f"resubmitting (retry {tries.get(k, 0)} of {plan.max_retries})", flush=True)
                again[k] = ShardJob(plan, k)
            if again:
                job = backend.submit(again)
                for k in again:
                    tries[k] = tries.get(k, 0) + 1
                print(f"resubmitted shards {sorted(again)} as job {job}", flush=True)
                _save(state_path, plan, backend)
                continue
            if all(s.complete or k in failed for k, s in status.items()):
                break
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        backend.cancel()
        print("interrupted; " + ("the SLURM jobs keep running; rerun the same command to attach"
                                 if plan.executor == "slurm" else "local shards stopped; rerun the "
                                 "same command to resume"), file=sys.stderr)
        return 130
    finally:
        bar.close()
    done = sum(s.done for s in status.values())
    print(f"{done}/{bar.total} trials done in {plan.shards} shards", flush=True)
    merge(plan.out)
    for msg in failed.values():
        print(f"error: {msg}", file=sys.stderr)
    return 1 if failed else 0


# ---------------------------------------------------------------- command line
def _parser():
    from introspect.cli.common import Parser, command

    ap = Parser(prog=f"{command('sweep')} CONFIG --executor slurm|local", add_help=False,
                 allow_abbrev=False)
    a = ap.add_argument
    a("--executor", choices=EXECUTORS, required=True)
    a("--shards", type=int, default=1, metavar="N", help="number of shards (array tasks)")
    a("--wait", action="store_true", help="follow progress, resubmit failed shards, merge")
    a("--max-retries", type=int, default=2, metavar="R", help="resubmissions per failed shard")
    a("--partition", help="SLURM partition (default: the cluster's default)")
    a("--gpus-per-task", type=int, metavar="G")
    a("--cpus-per-task", type=int, metavar="C")
    a("--time", metavar="T", help="time limit per job, SLURM syntax (default: partition's, max 1 day)")
    a("--mem", metavar="M", help="memory per job, e.g. 32G")
    a("--parallel", type=int, metavar="P", help="local executor: shards at once")
    return ap


def main(argv: list[str]) -> int:
    """``sweep CONFIG ... --executor ...``: check everything, then launch."""
    from introspect.cli.executors import parse_mem, parse_time
    from introspect.cli.settings import (
        CORE_TASKS,
        USER_ERRORS,
        build_parser,
        expand_tasks,
        quiet_hf,
        settings_from_args,
        task_config,
    )
    from introspect.tasks.base import ConfigError
    from introspect.tasks.runner import validate

    largs, rest = _parser().parse_known_args(argv[1:])
    args = build_parser().parse_args(["--sweep", argv[0], *rest])
    quiet_hf()
    try:
        if args.shard:
            raise ConfigError("--shard k/N and --executor exclude each other; --shards N makes the shards")
        if args.no_resume:
            raise ConfigError("--no-resume cannot be used with --executor (retries rely on resume)")
        for name in ("shards", "max_retries", "gpus_per_task", "cpus_per_task", "parallel"):
            v = getattr(largs, name)
            if v is not None and v < (1 if name in ("shards", "parallel", "cpus_per_task") else 0):
                raise ConfigError(f"--{name.replace('_', '-')} must be "
                                  f"{'positive' if name != 'max_retries' else '0 or more'}, got {v}")
        s = settings_from_args(args)
        s["out"] = str(Path(s.get("out") or "results").expanduser().absolute())
        if s.get("vectors_file"):  # shards may run elsewhere (SLURM): an absolute path
            s["vectors_file"] = str(Path(s["vectors_file"]).expanduser().absolute())
        tasks = expand_tasks(s.get("tasks") or list(CORE_TASKS))
        validate(task_config(s), tasks, Path(s["out"]), shard=(0, largs.shards),
                 need_layers="layers" in s and s.get("layers_grid") is None)
        res = Resources(partition=largs.partition, gpus_per_task=largs.gpus_per_task,
                        time_min=parse_time(largs.time) if largs.time else None,
                        mem_gb=parse_mem(largs.mem) if largs.mem else None,
                        cpus_per_task=largs.cpus_per_task)
        run_kw = {k: getattr(args, k) for k in ("device", "dtype", "device_map") if getattr(args, k)}
        if args.attention:
            run_kw["attn_implementation"] = args.attention
        if args.adapter:  # shards may run elsewhere (SLURM): an absolute path
            run_kw["adapter"] = str(Path(args.adapter).expanduser().absolute())
        for key in ("remove_direction", "refusal_requests"):  # a file as an absolute path, a name as it is
            v = getattr(args, key)
            if v:
                run_kw[key] = str(Path(v).expanduser().absolute()) if Path(v).expanduser().is_file() else v
        from introspect.engine.load.models import DEFAULT_MODEL

        need = prefetch(s.get("models") or [DEFAULT_MODEL], run_kw.get("dtype"))
        plan = Launch(s, largs.shards, largs.executor, res, largs.max_retries, largs.parallel, run_kw,
                      offline=True, need_bytes=need)
        return launch(plan, wait=largs.wait or largs.executor == "local",
                      progress=not args.no_progress)
    except Exception as e:
        if args.debug or not isinstance(e, USER_ERRORS):
            raise
        print(f"error: {' '.join(str(e).split()) or type(e).__name__}", file=sys.stderr)
        return 2
