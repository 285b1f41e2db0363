"""Registered tasks: importing this package registers every task by name (see ``base.TASKS``)."""

from introspect.tasks import task_a, task_b, task_c, task_d  # noqa: F401

# isort: split
from introspect.tasks import delegate, recovery, seb  # noqa: F401
