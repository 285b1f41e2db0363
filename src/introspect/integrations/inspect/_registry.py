"""Inspect's entry point (``[project.entry-points.inspect_ai]``): registers the ``introspect``
model provider. Torch-free: the provider module, and with it torch and the toolkit's engine, is
imported only when Inspect asks for an ``introspect/...`` model."""

from __future__ import annotations

from typing import Any

from inspect_ai.model import modelapi


@modelapi(name="introspect")
def introspect() -> Any:
    from introspect.integrations.inspect.provider import IntrospectAPI

    return IntrospectAPI
