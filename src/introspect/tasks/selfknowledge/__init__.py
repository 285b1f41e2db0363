"""Self-knowledge benchmarks (SEB, Delegate Game and its white-box probe, recovery): importing
this package registers them."""

from introspect.tasks.selfknowledge import delegate, difficulty, probe, recovery, seb  # noqa: F401
