"""Self-knowledge benchmarks (SEB, Delegate Game and its white-box probe, recovery) and the
independent ability items for the Rasch fit: importing this package registers them."""

from introspect.tasks.selfknowledge import ability, delegate, difficulty, probe, recovery, seb  # noqa: F401
