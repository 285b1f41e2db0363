"""Toolkit tasks as Inspect evals (first step: task A's detection question).

``inspect eval introspect/integrations/inspect/tasks.py@injected_thoughts --model
introspect/smollm2-135m-instruct -T layer=20`` asks task A's question (Lindsey's ``paper`` framing, or
``seed``: the strict NO_INJECTION / INJECTION: <word> format) once per concept, as one request
of conditions decoded from one stream: the control, the concept injected from the blank line
before "Trial N" through every generated token (task A's positions), the placebo (a zero
vector there) and, with ``ablations``, −v and a Gaussian direction of v's norm. Concepts are
task A's seeded sample of the words file. Graded per choice by task A's grader
(``scorers.detection``); ``records.records_from_log`` turns the log into toolkit records.
"""

from __future__ import annotations

from typing import Any

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import (
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageUser,
    GenerateConfig,
)

from introspect.integrations.inspect.scorers import detection
from introspect.integrations.inspect.solvers import inject
from introspect.tasks import prompts as P
from introspect.tasks.base import TaskConfig
from introspect.tasks.injection import common

FRAMINGS = {"paper": P.task_a_paper, "seed": P.task_a_seed}
ROLES = {"user": ChatMessageUser, "assistant": ChatMessageAssistant, "system": ChatMessageSystem}


def _messages(conv) -> list[Any]:
    return [ROLES[m["role"]](content=m["content"]) for m in conv.messages]


@task
def injected_thoughts(layer: int, alpha: float = 4.0, alpha_units: str = "raw", n_concepts: int = 5,
                      n_trials: int = 1, framing: str = "paper", ablations: bool = False, seed: int = 0,
                      words_file: str | None = None, max_tokens: int = 40) -> Task:
    """Task A's detection question, one sample per (concept, trial), each a group of conditions."""
    if framing not in FRAMINGS:
        raise ValueError(f"framing must be one of {sorted(FRAMINGS)}, got {framing!r}")
    concepts = common.pick_concepts(TaskConfig(n_concepts=n_concepts, seed=seed, words_file=words_file))
    conditions: list[dict[str, Any]] = [{"direction": "none"}, {"direction": "concept"}, {"direction": "zero"}]
    if ablations:
        conditions += [{"direction": "negative"}, {"direction": "random"}]
    samples = []
    for word in concepts:
        for i in range(n_trials):
            conv = FRAMINGS[framing](i + 1)
            request = {"concept": word, "layer": int(layer), "alpha": float(alpha), "alpha_units": alpha_units,
                       "positions": {"from_text": conv.marks[P.FROM_MARK]}, "stream_key": f"{seed}:{framing}:{word}:{i}",
                       "conditions": conditions}
            samples.append(Sample(id=f"{word}-{i}", input=_messages(conv), target=word,
                                  metadata={"introspect": request, "word": word, "trial": i}))
    return Task(dataset=MemoryDataset(samples, name=f"injected_thoughts-{framing}"), solver=inject(),
                scorer=detection(), config=GenerateConfig(max_tokens=max_tokens), name="injected_thoughts")
