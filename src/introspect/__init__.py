"""introspect: measure whether open-weight LLMs can introspect, on TransformerLens models.

Data flows load → vectors → inject/decode → prompts → tasks → grading → records → report.

Why lazy (PEP 562): ``import introspect`` must stay cheap and torch-free, so that entry points
(Inspect's provider registry, ``python -m experiments.models list``) and the report read records
without loading torch; each public name is imported from its room on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

_FROM = {
    "introspect.engine.load.models": ("DEFAULT_MODEL", "load_model", "model_info"),
    "introspect.engine.run.chat": ("Conversation", "Prompt", "render"),
    "introspect.engine.run.decode": ("DecodeStats", "Generation", "Sampling", "generate", "inject_once",
                                     "next_token_logprobs", "stream_seed"),
    "introspect.engine.run.inject": ("From", "InjectionSpec", "injecting"),
    "introspect.engine.vectors": ("ConceptVector", "VectorBank", "build_concept_vector", "build_concept_vectors",
                                  "residuals"),
    "introspect.tasks": ("get_task", "run_task"),
    "introspect.tasks.base": ("RunContext", "TaskConfig"),
    "introspect.train": ("TrainConfig",),
}
_WHERE = {name: mod for mod, names in _FROM.items() for name in names}
_WHERE["train_adapter"] = "introspect.train"  # introspect.train.train under its public name
_RUNNERS = {"run_task_a": "A", "run_task_b": "B", "run_task_c": "C", "run_task_d": "D"}

__all__ = sorted([*_WHERE, *_RUNNERS, "context"])


def __getattr__(name: str) -> Any:
    if name in _RUNNERS:
        value: Any = _runner(_RUNNERS[name])
    elif name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name]), "train" if name == "train_adapter" else name)
    else:
        raise AttributeError(f"module 'introspect' has no attribute {name!r}")
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def context(model: Any, cfg: Any = None, *, run_id: str = "notebook", vectors: Any = None) -> Any:
    """A RunContext for notebook use: the model, its identity, a config (default ``TaskConfig()``)
    and a vector bank. ``vectors``: a vectors file, or a mapping of concept (or (concept, layer))
    to tensor, used in place of building vectors (``tasks.runner.make_context``)."""
    from introspect.tasks.base import TaskConfig
    from introspect.tasks.runner import make_context

    return make_context(model, cfg or TaskConfig(), run_id, vectors)


def _runner(name: str):
    from introspect.tasks import run_task

    def run(model, config=None, vectors=None):
        return run_task(context(model, config, vectors=vectors), name)

    run.__doc__ = f"Run every trial of task {name} on a loaded model; returns a list of Records."
    run.__name__ = f"run_task_{name.lower()}"
    return run
