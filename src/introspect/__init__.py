"""introspect: measure whether open-weight LLMs can introspect, on TransformerLens models.

Data flows load → vectors → inject/decode → prompts → tasks → grading → records → report.
"""

from introspect.engine.load.models import DEFAULT_MODEL, load_model, model_info
from introspect.engine.run.chat import Conversation, Prompt, render
from introspect.engine.run.decode import (
    DecodeStats,
    Generation,
    Sampling,
    generate,
    inject_once,
    next_token_logprobs,
    stream_seed,
)
from introspect.engine.run.inject import From, InjectionSpec, injecting
from introspect.engine.vectors import (
    ConceptVector,
    VectorBank,
    build_concept_vector,
    build_concept_vectors,
    residuals,
)
from introspect.tasks import get_task, run_task
from introspect.tasks.base import RunContext, TaskConfig
from introspect.train import TrainConfig
from introspect.train import train as train_adapter

__all__ = [
    "DEFAULT_MODEL", "ConceptVector", "Conversation", "DecodeStats", "From", "Generation", "InjectionSpec",
    "Prompt", "Sampling", "stream_seed",
    "RunContext", "TaskConfig", "TrainConfig", "VectorBank", "build_concept_vector", "build_concept_vectors", "context",
    "generate", "get_task", "inject_once", "injecting", "load_model", "model_info", "next_token_logprobs",
    "render", "residuals", "run_task", "train_adapter", "run_task_a", "run_task_b", "run_task_c", "run_task_d",
]


def context(model, cfg: TaskConfig | None = None, *, run_id: str = "notebook") -> RunContext:
    """A RunContext for notebook use: the model, its identity, a config and a vector bank."""
    from introspect.tasks.runner import make_context

    return make_context(model, cfg or TaskConfig(), run_id)


def _runner(name: str):
    def run(model, config: TaskConfig | None = None):
        return run_task(context(model, config), name)

    run.__doc__ = f"Run every trial of task {name} on a loaded model; returns a list of Records."
    run.__name__ = f"run_task_{name.lower()}"
    return run


run_task_a, run_task_b, run_task_c, run_task_d = (_runner(n) for n in "ABCD")
