"""The grid engine behind ``experiments.run`` and ``experiments.sweep``.

Why one engine: resume, sharding and batching must behave identically whether a grid is run
from the CLI, a sweep, or a SLURM array. Every trial is planned first (ids are deterministic),
finished ids are dropped (resume), the rest is filtered to this shard, concept vectors are built
in one batched pass, and tasks run layer by layer so each call batches concepts × α. Records go
to ``<out>/<model-slug>/<task>.jsonl`` one fsynced line at a time, so a killed run loses at most
the trial in flight. All config checks happen before any file is created.
"""

from __future__ import annotations

import math
import os
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from introspect.engine.load import attention, determinism, devices, head
from introspect.engine.load.models import model_info
from introspect.engine.vectors import VectorBank
from introspect.records.jsonl import JsonlWriter, done_trial_ids, make_header, read_records
from introspect.tasks import get_task
from introspect.tasks.base import ConfigError, RunContext, TaskConfig, TaskSpec, Trial
from introspect.tasks.prompts import load_words

ALPHA_UNITS = ("raw", "unit", "resid")


# ---------------------------------------------------------------- small helpers
def model_slug(name: str) -> str:
    """Directory name for a model: a local path's last component, else the name with / → __."""
    p = Path(name)
    if name.startswith((".", "/", "~")) or p.is_dir():
        return p.expanduser().resolve().name or "model"
    return name.replace("/", "__")


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """``"k/N"`` → (k, N); None/"" → None. Raises ConfigError on anything else."""
    if not text:
        return None
    try:
        k_s, n_s = text.split("/")
        shard = (int(k_s), int(n_s))
    except ValueError:
        raise ConfigError(f"--shard must look like k/N (e.g. 0/8), got {text!r}") from None
    check_shard(shard)
    return shard


def check_shard(shard: tuple[int, int] | None) -> None:
    if shard is None:
        return
    k, n = shard
    if n < 1 or not 0 <= k < n:
        raise ConfigError(f"bad shard {k}/{n}: need N >= 1 and 0 <= k < N")


def in_shard(tid: str, shard: tuple[int, int] | None) -> bool:
    """Trial ids are hex hashes, so ``id mod N`` splits any grid evenly and deterministically."""
    return shard is None or int(tid, 16) % shard[1] == shard[0]


def default_layers(n_layers: int) -> tuple[int, ...]:
    """Three layers around two thirds of the depth (where Lindsey 2025 and the replications find
    injected concepts noticed most), a fifteenth of the depth apart, inside 1..n_layers − 2."""
    if n_layers < 3:
        return tuple(range(n_layers))
    c, step = round(2 * (n_layers - 1) / 3), max(1, round(n_layers / 15))
    return tuple(sorted({min(max(x, 1), n_layers - 2) for x in (c - step, c, c + step)}))


DEFAULT_LAYERS_NOTE = "layers not given: three around two thirds of the depth (--layers or --layers-grid to choose)"


def layers_grid(n_layers: int, n: int) -> tuple[int, ...]:
    """``n`` evenly spaced layers strictly between the first and last (duplicates dropped)."""
    if n < 1:
        raise ConfigError(f"--layers-grid needs a positive count, got {n}")
    if n_layers < 3:
        raise ConfigError(f"model has only {n_layers} layers; no interior layers for --layers-grid")
    pts = [round(i * (n_layers - 1) / (n + 1)) for i in range(1, n + 1)]
    return tuple(dict.fromkeys(min(max(p, 1), n_layers - 2) for p in pts))


def _check_writable(out_dir: Path) -> None:
    """The nearest existing ancestor must be a writable directory (nothing is created here)."""
    p = out_dir.expanduser().absolute()
    while not p.exists():
        if p.parent == p:
            break
        p = p.parent
    if p.exists() and not p.is_dir():
        raise ConfigError(f"cannot create results dir {out_dir}: {p} is not a directory")
    if not os.access(p, os.W_OK | os.X_OK):
        raise ConfigError(f"results dir {out_dir} is not writable ({p})")
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"results dir {out_dir} exists and is not a directory")


def validate(cfg: TaskConfig, tasks: Sequence[str], out_dir: Path | None = None, *,
             shard: tuple[int, int] | None = None, n_layers: int | None = None,
             need_layers: bool = True) -> list[TaskSpec]:
    """Every check that needs no model (plus layer range if ``n_layers`` is given).

    Called by the CLIs before loading a model (fail fast) and by ``run_grid`` again.
    """
    if not tasks:
        raise ConfigError("no tasks given")
    specs = [get_task(t) for t in dict.fromkeys(tasks)]
    check_shard(shard)
    injecting = any(s.uses_injection for s in specs)
    if cfg.alpha_units not in ALPHA_UNITS:
        raise ConfigError(f"alpha_units must be one of {ALPHA_UNITS}, got {cfg.alpha_units!r}")
    bad = [a for a in cfg.alphas if not isinstance(a, (int, float)) or not math.isfinite(a)]
    if bad:
        raise ConfigError(f"alphas must be finite numbers, got {bad[0]!r}")
    for key in ("n_trials", "n_concepts", "max_new_tokens"):
        if int(getattr(cfg, key)) < 1:
            raise ConfigError(f"{key} must be at least 1, got {getattr(cfg, key)}")
    if int(cfg.batch_size) < 0:
        raise ConfigError(f"batch_size must be at least 1 (or 0 = auto, from free memory), got {cfg.batch_size}")
    if injecting:
        if need_layers and not cfg.layers:
            raise ConfigError("empty layer list; pass --layers L ... or --layers-grid N")
        if not cfg.alphas:
            raise ConfigError("empty alpha list; pass --alphas A ...")
        if n_layers is not None:
            out = [la for la in cfg.layers if not 0 <= int(la) < n_layers]
            if out:
                raise ConfigError(f"layers {out} out of range; this model has layers 0..{n_layers - 1}")
        try:
            n_targets = len(load_words(cfg.words_file).targets)
        except ValueError as e:
            raise ConfigError(f"words file: {e}") from e
        if cfg.n_concepts > n_targets:
            raise ConfigError(f"n_concepts={cfg.n_concepts} exceeds the {n_targets} target words "
                              "in the words file")
        if cfg.vectors_file:  # before a model loads: readable, and covering every target at every layer
            from introspect.engine import vector_files

            check_covers(vector_files.read(cfg.vectors_file), load_words(cfg.words_file).targets, cfg.layers)
    if out_dir is not None:
        _check_writable(Path(out_dir))
    return specs


def check_covers(vectors: Any, targets: Sequence[str], layers: Sequence[int]) -> None:
    """Supplied vectors must hold every target word of the words file at every run layer: tasks
    draw concepts, mismatch words and task D's controls from those targets, and a gap found
    mid-run would leave a file half-written."""
    gone = [w for w in targets if any((w, int(la)) not in vectors.vectors for la in layers)]
    if gone:
        raise ConfigError(vectors.missing(gone, [int(la) for la in layers]))


def check_owner(model_dir: Path, fingerprint: str) -> None:
    """Refuse a results dir whose files hold trials of a model with another fingerprint."""
    if not model_dir.is_dir():
        return
    for path in sorted(model_dir.glob("*.jsonl")):
        fps: dict[str, str] = {}
        for rec in read_records(path):
            if rec["type"] == "header":
                fps[rec["run_id"]] = rec["fingerprint"]
            elif fps.get(rec.get("run_id", "")) not in (None, fingerprint):
                other = fps[rec["run_id"]]
                raise ConfigError(f"results dir {model_dir} holds another model's trials "
                                  f"(fingerprint {other} in {path.name}, this model is "
                                  f"{fingerprint}); use a new --out")


def make_context(model: Any, cfg: TaskConfig, run_id: str = "", vectors: Any = None) -> RunContext:
    """A RunContext with a vector bank built on the words file's baseline list.

    ``vectors``: vectors to use in place of building them: a ``vector_files.VectorSet``, a path to a
    vectors file, or a mapping of concept (or (concept, layer)) to tensor; ``None`` reads
    ``cfg.vectors_file`` when it is set. A run on supplied vectors gets the model id
    ``<model>+vectors-<sha8>`` (its own results folder) and the same fingerprint, so its sampling
    streams are the built vectors' and the two pair trial by trial."""
    from introspect.engine import vector_files

    info = model_info(model)
    vt = cfg.option("vector_template", "chat")
    if vt not in ("chat", "plain"):
        raise ConfigError(f"option vector_template must be chat or plain, got {vt!r}")
    words = load_words(cfg.words_file)
    bank = VectorBank(model, words.baseline, chat=vt == "chat")
    name, fp, notes = info.name, info.fingerprint, list(info.notes)
    if vectors is None and cfg.vectors_file:
        vectors = cfg.vectors_file
    if isinstance(vectors, (str, Path)):
        vectors = vector_files.read(vectors)
    elif vectors is not None and not isinstance(vectors, vector_files.VectorSet):
        if not cfg.layers:
            raise ConfigError("vectors given as a mapping need the run's layers (TaskConfig.layers)")
        vectors = vector_files.from_tensors(vectors, cfg.layers, int(model.cfg.d_model), bank.resid_norms(cfg.layers))
    if vectors is not None:
        vectors.check(model, fp)
        if cfg.layers:
            check_covers(vectors, words.targets, cfg.layers)
        bank.supplied = vectors
        name = f"{name}+vectors-{vectors.sha256[:8]}"
        notes.append(f"vectors: {vectors.source} {vectors.path or ''} sha256 {vectors.sha256[:12]}, "
                     f"{len(vectors.words)} words at layers {vectors.layers} (none built)".replace("  ", " "))
    if cfg.option("placebo", False):  # the instrument's null run: its own identity and folder
        name, fp = f"{name}+placebo", f"{fp}:placebo"
        notes.append("placebo: every injection adds a zero vector at the same positions and α")
    return RunContext(model=model, model_id=name, fingerprint=fp, cfg=cfg, vectors=bank,
                      run_id=run_id, notes=notes)


def _trial_words(t: Trial, targets: set[str]) -> list[str]:
    """Concept words a trial may inject: its word plus any param naming a target (mismatch, decoy)."""
    out = [t.word] if t.word else []
    return out + [v for _, v in t.params if isinstance(v, str) and v in targets]


# ---------------------------------------------------------------- the engine
@dataclass
class TaskCounts:
    planned: int = 0
    done_before: int = 0  # already in the file (resume)
    other_shards: int = 0
    run: int = 0
    missing: int = 0  # requested but not yielded by the task (should stay 0)
    seconds: float = 0.0  # executing this task's trials (vector building for the grid excluded)


@dataclass
class RunSummary:
    model: str
    fingerprint: str
    out_dir: Path
    run_id: str
    files: dict[str, Path] = field(default_factory=dict)
    counts: dict[str, TaskCounts] = field(default_factory=dict)
    seconds: float = 0.0
    runtime: dict[str, Any] = field(default_factory=dict)  # device, attention, dtype, batch (as in the headers)
    notes: list[str] = field(default_factory=list)

    @property
    def n_run(self) -> int:
        return sum(c.run for c in self.counts.values())

    @property
    def trials_per_s(self) -> float:
        return self.n_run / self.seconds if self.seconds > 0 else 0.0

    def table(self) -> str:
        head = (f"{'task':<18}{'planned':>8}{'done':>7}{'shard-':>7}{'run':>6}{'missing':>8}"
                f"{'seconds':>9}")
        lines = [head] + [f"{t:<18}{c.planned:>8}{c.done_before:>7}{c.other_shards:>7}{c.run:>6}"
                          f"{c.missing:>8}{c.seconds:>9.1f}" for t, c in self.counts.items()]
        lines.append(f"{self.n_run} trials in {self.seconds:.1f}s ({self.trials_per_s:.2f} trials/s)")
        r = self.runtime
        if r:
            logits = f" (logits in {r['head_dtype']})" if r.get("head_dtype", r.get("dtype")) != r.get("dtype") else ""
            lines.append(f"on {r.get('device')} ({r.get('device_name')}), attention {r.get('attention')}, "
                         f"{r.get('dtype')}{logits}, batch {r.get('batch_size')} ({r.get('batch_rule')})")
            if r.get("reproducible"):
                lines.append(f"reproducible mode on: deterministic algorithms, {determinism.CUBLAS_ENV}="
                             f"{os.environ.get(determinism.CUBLAS_ENV)}, batch pinned at {r.get('batch_size')}")
        return "\n".join(lines + self.notes)


class LogProgress:
    """Progress for a log file (a batch job, ``nohup``, CI), where a bar never draws: one line
    ``task: done/total trials (pct), rate trials/s, ETA`` every ``every_s`` seconds or ``every_frac``
    of the work, whichever comes first, and one at the end."""

    def __init__(self, total: int, stream: Any = None, *, every_s: float = 30.0, every_frac: float = 0.05,
                 clock: Any = time.monotonic):
        self.total, self.stream, self.clock = total, stream if stream is not None else sys.stderr, clock
        self.every_s, self.step = every_s, max(1, math.ceil(every_frac * total))
        self.n, self.desc, self.t0 = 0, "", clock()
        self.last_t, self.last_n = self.t0, 0

    def set_description(self, desc: str) -> None:
        self.desc = desc

    def update(self, k: int = 1) -> None:
        self.n += k
        now = self.clock()
        if self.n - self.last_n >= self.step or now - self.last_t >= self.every_s or self.n >= self.total:
            self._line(now)

    def _line(self, now: float) -> None:
        rate = self.n / max(now - self.t0, 1e-9)
        left = (self.total - self.n) / rate if rate > 0 else math.inf
        eta = "?" if not math.isfinite(left) else f"{int(left // 60)}m{int(left % 60):02d}s"
        pct = 100 * self.n / max(1, self.total)
        print(f"{self.desc or 'run'}: {self.n}/{self.total} trials ({pct:.0f}%), {rate:.2f} trials/s, ETA {eta}",
              file=self.stream, flush=True)
        self.last_t, self.last_n = now, self.n

    def close(self) -> None:
        if self.n != self.last_n:
            self._line(self.clock())


def _progress(total: int, enabled: bool, stream: Any = None):
    """A tqdm bar on a terminal, ``LogProgress`` lines anywhere else, nothing when disabled."""
    from tqdm.auto import tqdm

    stream = stream if stream is not None else sys.stderr
    if enabled and not stream.isatty():
        return LogProgress(total, stream)
    return tqdm(total=total, unit="trial", dynamic_ncols=True, file=stream, disable=not enabled)


def run_grid(model: Any, tasks: list[str], cfg: TaskConfig, out_dir: Path, *,
             shard: tuple[int, int] | None = None, resume: bool = True, progress: bool = True,
             notes: Sequence[str] = (), reproducible: bool = False, vectors: Any = None) -> RunSummary:
    """Run every planned, unfinished, in-shard trial of ``tasks`` on ``model`` into ``out_dir``.
    ``reproducible``: deterministic kernels and the batch pinned at its planned size
    (``introspect.engine.load.determinism``; the command lines turn it on before loading).
    ``vectors``: concept vectors to use instead of building them (see ``make_context``)."""
    t0 = time.perf_counter()
    out_dir = Path(out_dir)
    specs = validate(cfg, tasks, out_dir, shard=shard, n_layers=model.cfg.n_layers)
    info = model_info(model)
    if reproducible:
        determinism.enable()
    determinism.pin(model, reproducible)
    batch, batch_rule = devices.plan_batch(model, int(cfg.batch_size), int(cfg.max_new_tokens))
    cfg = replace(cfg, batch_size=batch)
    runtime = {**devices.describe(model), "attention": info.attention or attention.implementation(model),
               "dtype": info.dtype, "head_dtype": "float32" if head.is_fp32(model) else info.dtype,
               "batch_size": batch, "batch_rule": batch_rule,
               "reproducible": reproducible and determinism.enabled()}
    run_id = uuid.uuid4().hex[:12]
    ctx = make_context(model, cfg, run_id, vectors)
    model_dir = out_dir / model_slug(ctx.model_id)
    check_owner(model_dir, ctx.fingerprint)
    summary = RunSummary(ctx.model_id, ctx.fingerprint, model_dir, run_id, runtime=runtime)

    # Plan everything first: the ids decide resume and shard membership.
    todo: dict[str, list[tuple[Trial, str]]] = {}
    for spec in specs:
        trials = spec.plan(ctx)
        if not trials:
            raise ConfigError(f"task {spec.name} planned no trials for this config (empty grid)")
        path = model_dir / f"{spec.name}.jsonl"
        done = done_trial_ids(path) if resume else set()
        c = TaskCounts(planned=len(trials))
        keep, seen = [], set()
        for t in trials:
            tid = t.id(ctx.fingerprint, cfg.seed)
            if tid in seen:
                raise RuntimeError(f"task {spec.name} planned trial {tid} twice: {t}")
            seen.add(tid)
            if tid in done:
                c.done_before += 1
            elif not in_shard(tid, shard):
                c.other_shards += 1
            else:
                keep.append((t, tid))
        todo[spec.name], summary.counts[spec.name] = keep, c
        summary.files[spec.name] = path

    # Concept vectors for every (word, layer) still needed, in one batched pass.
    targets = set(load_words(cfg.words_file).targets)
    words: dict[str, None] = {}
    layers: dict[int, None] = {}
    for spec in specs:
        if spec.uses_injection:
            for t, _ in todo[spec.name]:
                if t.layer is not None:
                    layers[int(t.layer)] = None
                    words.update(dict.fromkeys(_trial_words(t, targets)))
    if words and layers:
        ctx.vectors.ensure(list(words), sorted(layers))

    config = {**cfg.to_dict(), "tasks": [s.name for s in specs],
              "shard": f"{shard[0]}/{shard[1]}" if shard else None}
    bar = _progress(sum(len(v) for v in todo.values()), progress)
    try:
        for spec in specs:
            keep, t_task = todo[spec.name], time.perf_counter()
            if not keep:
                continue
            writer = JsonlWriter(summary.files[spec.name])
            writer.write(make_header(run_id=run_id, model_id=ctx.model_id, fingerprint=ctx.fingerprint,
                                     seed=cfg.seed, config=config, runtime=runtime, vectors=ctx.vectors.record(),
                                     notes=[*dict.fromkeys([*ctx.notes, *notes])]))
            bar.set_description(spec.name)
            groups: dict[int | None, list[tuple[Trial, str]]] = {}
            first = min((t.layer for t, _ in keep if t.layer is not None), default=None)
            for t, tid in keep:  # controls (no layer) run with the first layer, in plan order, so
                # a concept's control is decoded in the same batch as its injected trials there
                groups.setdefault(first if t.layer is None else t.layer, []).append((t, tid))
            for layer in sorted(groups, key=lambda la: (la is not None, la or 0)):
                pending = {tid for _, tid in groups[layer]}
                for rec in spec.execute(ctx, [t for t, _ in groups[layer]]):
                    if rec.trial_id not in pending:
                        raise RuntimeError(f"task {spec.name} yielded trial {rec.trial_id!r} that was "
                                           "not requested (or twice); refusing to write it")
                    pending.discard(rec.trial_id)
                    writer.write(rec)
                    summary.counts[spec.name].run += 1
                    bar.update(1)
                summary.counts[spec.name].missing += len(pending)
            summary.counts[spec.name].seconds = time.perf_counter() - t_task
    finally:
        bar.close()
        summary.seconds = time.perf_counter() - t0
        cap = getattr(model, "introspect_batch_cap", batch)
        if cap < batch:
            summary.notes.append(f"out of memory at batch {batch}: halved to {cap}; no finished trial was lost")
    return summary
