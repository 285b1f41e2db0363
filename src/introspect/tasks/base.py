"""Task protocol and registry.

Why split plan from execute: the sweep runner must know every trial (and its deterministic id)
before running any, so that it can skip finished trials, split the grid into shards, and batch
the rest. A task therefore says *what* it would run (``plan``) separately from *how* it runs a
batch of trials (``execute``); ``run_task`` glues the two for notebook use.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from introspect.engine.load.determinism import pinned
from introspect.records.jsonl import Record, trial_id

if TYPE_CHECKING:
    from transformer_lens.model_bridge import TransformerBridge

    from introspect.engine.run.decode import Sampling
    from introspect.engine.vectors import VectorBank


# Params that say what is injected, not what is asked: they stay out of the RNG stream key.
UNMATCHED_PARAMS = {"injected", "vector_word", "other"}


class ConfigError(ValueError):
    """Bad task or sweep configuration (reported as one line, exit 2, by the CLIs)."""


@dataclass(frozen=True)
class TaskConfig:
    """Everything a task needs besides the model. Frozen so a run's config can be recorded."""

    layers: tuple[int, ...] = ()
    alphas: tuple[float, ...] = (2.0, 4.0, 8.0)
    # "raw": α × the raw mean-difference vector (Lindsey's strengths); "unit": α × the unit vector;
    # "resid": α × the mean residual norm at the positions injected. Records carry all three.
    alpha_units: str = "raw"
    n_concepts: int = 5
    n_trials: int = 1
    seed: int = 0
    max_new_tokens: int = 40
    batch_size: int = 16
    variant: str | None = None  # task-specific prompt variant; None = the task's default set
    words_file: str | None = None  # concepts/words.yaml by default
    vectors_file: str | None = None  # a vectors file (engine.vector_files) read in place of building vectors
    options: tuple[tuple[str, Any], ...] = ()  # task-specific extras, e.g. (("data", "path.csv"),)
    # Sampling (Lindsey 2025 and the replications sample at T=1): each trial draws K samples, each
    # from its own RNG stream, matched across conditions that share a prompt. temperature 0 = greedy.
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    n_samples: int = 1

    def __post_init__(self) -> None:
        from introspect.engine.run.decode import SamplingError

        try:
            self.sampling  # noqa: B018  (validates)
        except SamplingError as e:
            raise ConfigError(str(e)) from None
        if isinstance(self.n_samples, bool) or not isinstance(self.n_samples, int) or self.n_samples < 1:
            raise ConfigError(f"n_samples (--samples) must be an integer >= 1, got {self.n_samples}")

    @property
    def sampling(self) -> Sampling:
        from introspect.engine.run.decode import Sampling

        return Sampling(float(self.temperature), float(self.top_p), int(self.top_k))

    @property
    def samples(self) -> range:
        """Sample indices per trial: greedy decoding has one (K identical draws would fake n)."""
        return range(1 if float(self.temperature) == 0 else self.n_samples)

    def option(self, key: str, default: Any = None) -> Any:
        return dict(self.options).get(key, default)

    def with_options(self, **kw: Any) -> TaskConfig:
        merged = dict(self.options)
        merged.update(kw)
        return replace(self, options=tuple(sorted(merged.items())))

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["options"] = dict(self.options)
        return d


@dataclass(frozen=True)
class Trial:
    """The coordinates of one trial; its id is a hash of them plus model fingerprint and seed."""

    task: str
    condition: str
    index: int = 0
    layer: int | None = None
    alpha: float = 0.0
    word: str | None = None
    variant: str = "default"
    params: tuple[tuple[str, Any], ...] = ()  # task-specific (sentence index, decoy word, ...)
    sample: int = 0  # which of the K sampled answers to this prompt

    def param(self, key: str, default: Any = None) -> Any:
        return dict(self.params).get(key, default)

    def id(self, fingerprint: str, seed: int) -> str:
        coords = dict(
            fingerprint=fingerprint, seed=seed, task=self.task, condition=self.condition,
            index=self.index, layer=self.layer, alpha=float(self.alpha), word=self.word,
            variant=self.variant, params=dict(self.params),
        )
        if self.sample:
            coords["sample"] = self.sample
        return trial_id(**coords)

    def stream_key(self, fingerprint: str, seed: int) -> str:
        """The RNG stream of this trial's answer, keyed by (trial, sample, concept): it leaves
        out what is injected (condition, layer, α, and the ``UNMATCHED_PARAMS``), so a concept's
        control, its injected trials and its ablations draw from one stream (each is paired with
        the same control), while every concept draws its own (concepts are independent
        replicates: a lucky draw cannot show up in all of them at once)."""
        params = {k: v for k, v in self.params if k not in UNMATCHED_PARAMS}
        return trial_id(fingerprint=fingerprint, seed=seed, task=self.task, variant=self.variant,
                        index=self.index, sample=self.sample, word=self.word, params=params,
                        stream=True)


@dataclass
class RunContext:
    """What ``execute`` gets: the model, its identity, the config, and a shared vector bank."""

    model: TransformerBridge
    model_id: str
    fingerprint: str
    cfg: TaskConfig
    vectors: VectorBank
    run_id: str = ""
    notes: list[str] = field(default_factory=list)
    memo: dict[str, Any] = field(default_factory=dict)  # per-run caches (e.g. residual norms per prompt)

    def record(self, trial: Trial, **kw: Any) -> Record:
        """A Record pre-filled with the trial's coordinates and provenance."""
        base = dict(
            seed=self.cfg.seed, model_id=self.model_id, task=trial.task,
            condition=trial.condition, layer_idx=trial.layer, alpha=float(trial.alpha),
            alpha_units=self.cfg.alpha_units, word=trial.word, variant=trial.variant,
            trial_index=trial.index, trial_id=trial.id(self.fingerprint, self.cfg.seed),
            run_id=self.run_id, sample=trial.sample,
        )
        base.update(kw)
        return Record(**base)

    def decode_batch(self, g: Any) -> dict[str, Any]:
        """``{"batch": rows}``: the rows of the batch the Generation ``g`` was decoded in, when the
        run pins its batch (reproducible mode: a rerun that batches alike rounds alike); else ``{}``."""
        return {"batch": int(g.batch)} if pinned(self.model) and getattr(g, "batch", 0) else {}


PlanFn = Callable[[RunContext], list[Trial]]
ExecuteFn = Callable[[RunContext, Sequence[Trial]], Iterator[Record]]


@dataclass(frozen=True)
class TaskSpec:
    name: str
    description: str
    plan: PlanFn
    execute: ExecuteFn
    uses_injection: bool = True  # False for the self-knowledge benchmarks (no layer x alpha grid)
    uses_layers: bool | None = None  # injects at or reads the residual stream at layers (default: uses_injection)

    @property
    def layered(self) -> bool:
        """Whether the run's layers mean anything to this task (so are worth printing)."""
        return self.uses_injection if self.uses_layers is None else self.uses_layers


TASKS: dict[str, TaskSpec] = {}


def register(spec: TaskSpec) -> TaskSpec:
    """Add a task to the registry by name (called once at the bottom of each task module)."""
    TASKS[spec.name] = spec
    return spec
