"""Registered tasks: importing this package registers every task by name (see ``base.TASKS``).

Three families, one folder each with its metrics: ``injection`` (concept-injection tasks A–D),
``selfknowledge`` (SEB, the Delegate Game, recovery) and ``refusal``. ``get_task`` lives here, above
them, so looking a task up imports (and so registers) every one without ``base`` importing
back up.
"""

from introspect.records.jsonl import Record
from introspect.tasks import injection, refusal, selfknowledge  # noqa: F401
from introspect.tasks.base import TASKS, ConfigError, RunContext, TaskSpec


def get_task(name: str) -> TaskSpec:
    """The registered task called ``name`` (a one-line ConfigError naming the known ones)."""
    if name not in TASKS:
        raise ConfigError(f"unknown task {name!r}; known tasks: {', '.join(sorted(TASKS))}")
    return TASKS[name]


def run_task(ctx: RunContext, name: str) -> list[Record]:
    """Plan and execute every trial of a task (no files, no resume): the notebook entry point."""
    spec = get_task(name)
    return list(spec.execute(ctx, spec.plan(ctx)))
