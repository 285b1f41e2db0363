"""Solvers that carry a sample's injection request to the ``introspect`` provider."""

from __future__ import annotations

from typing import Any

from inspect_ai.solver import Generate, Solver, TaskState, solver

from introspect.integrations.inspect.request import parse_request


@solver
def inject(metadata_key: str = "introspect", **defaults: Any) -> Solver:
    """Generate with the sample's request: ``Sample(metadata={"introspect": {...}})`` (the schema
    of ``introspect.integrations.inspect.request``), over ``defaults`` (e.g. ``layer=2``).
    A sample without the key is generated uninjected (unless ``defaults`` say otherwise), from
    its own stream all the same.
    A request without a ``stream_key`` gets the sample's id; epochs after the first draw from
    their own streams (``:epoch<N>`` is appended to the key, or a ``trial``'s ``epoch`` set), so
    repeated epochs are new samples, not copies. The request is checked here, so a malformed one fails before any model call."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        spec = {**defaults, **(state.metadata.get(metadata_key) or {})}
        key = spec.get("stream_key")
        key = str(state.sample_id) if key is None else key
        spec["stream_key"] = f"{key}:epoch{state.epoch}" if state.epoch > 1 else key
        if isinstance(spec.get("trial"), dict) and state.epoch > 1:  # a toolkit trial's streams, new draws
            spec["trial"] = {**spec["trial"], "epoch": state.epoch}
        body = {"introspect": spec}
        parse_request(body)
        return await generate(state, extra_body=body, **(state.metadata.get("generate") or {}))

    return solve
