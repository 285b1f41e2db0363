"""Concept-injection tasks A–D (Lindsey 2025): importing this package registers them."""

from introspect.tasks.injection import task_a, task_b, task_c, task_d  # noqa: F401
