"""Registered tasks: importing this package registers every task by name (see ``base.TASKS``)."""

from introspect.tasks import task_a, task_b, task_c, task_d  # noqa: F401
