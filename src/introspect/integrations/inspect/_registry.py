"""Inspect's entry point (``[project.entry-points.inspect_ai]``): registers the ``introspect``
model provider and the toolkit's Inspect tasks by name, so that

    inspect eval introspect/injected_thoughts --model introspect/smollm2-135m-instruct

runs task A without a file path (``inspect_ai.eval("introspect/injected_thoughts", ...)`` from
Python). Torch-free: the provider module, and with it torch and the toolkit's engine, is
imported only when Inspect asks for an ``introspect/...`` model; a task's module only when the
task is created. Until then each task is a stand-in registered under the task's own name with
the parameter names of its definition (read from the module's source, not imported), so
Inspect checks ``-T`` arguments as it does for the task itself; creating it imports the module
(whose ``@task`` then registers the task itself under the same name) and returns its task."""

from __future__ import annotations

from typing import Any

from inspect_ai._util.registry import RegistryInfo, registry_add, registry_has
from inspect_ai.model import modelapi

PACKAGE = "introspect"
# Inspect task name -> the module of introspect.integrations.inspect that defines it (a function
# of that name decorated with @task)
TASKS = {
    "injected_thoughts": "tasks",  # task A
    "thoughts_vs_text": "tasks_bc",  # task B
    "prefill_intent": "tasks_bc",  # task C
    "internal_control": "tasks_d",  # task D
    "seb_association": "seb",
    "seb_restriction": "seb",
    "seb_difficulty": "seb",
    "ability": "selfknowledge",
    "delegate_baseline": "selfknowledge",
    "delegate_game": "delegate_game",
}


@modelapi(name="introspect")
def introspect() -> Any:
    from introspect.integrations.inspect.provider import IntrospectAPI

    return IntrospectAPI


def task_params(module: str, name: str) -> list[str]:
    """The parameter names of ``name`` in the module's source (parsed, never imported)."""
    import ast
    from pathlib import Path

    tree = ast.parse(Path(__file__).with_name(f"{module}.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            a = node.args
            return [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    raise LookupError(f"no function {name!r} in introspect.integrations.inspect.{module}")


def _stand_in(module: str, name: str) -> Any:
    import inspect as pyinspect

    def create(**kwargs: Any) -> Any:
        import importlib

        real = getattr(importlib.import_module(f"{PACKAGE}.integrations.inspect.{module}"), name)
        return real(**kwargs)

    if registry_has("task", f"{PACKAGE}/{name}"):  # the module is imported already: its own @task stands
        return None
    params = task_params(module, name)
    create.__name__ = create.__qualname__ = name
    create.__doc__ = f"introspect.integrations.inspect.{module}.{name} (imported when the task is created)"
    create.__signature__ = pyinspect.Signature(  # type: ignore[attr-defined]
        [pyinspect.Parameter(p, pyinspect.Parameter.KEYWORD_ONLY) for p in params])
    registry_add(create, RegistryInfo(type="task", name=f"{PACKAGE}/{name}",
                                      metadata={"attribs": {}, "params": params}))
    return create


for _name, _module in TASKS.items():
    _stand_in(_module, _name)
