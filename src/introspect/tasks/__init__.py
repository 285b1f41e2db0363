"""Registered tasks: importing this package registers every task by name (see ``base.TASKS``).

Two families, one folder each with its metrics: ``injection`` (concept-injection tasks A–D) and
``selfknowledge`` (SEB, the Delegate Game, recovery).
"""

from introspect.tasks import injection, selfknowledge  # noqa: F401
