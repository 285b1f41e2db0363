"""Self-knowledge benchmarks (SEB, Delegate Game, recovery): importing this package registers them."""

from introspect.tasks.selfknowledge import delegate, difficulty, recovery, seb  # noqa: F401
