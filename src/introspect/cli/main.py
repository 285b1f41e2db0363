"""``introspect``: one console command whose subcommands are the toolkit's command lines.

    introspect run --task D --n-concepts 3 --out results/d
    introspect models list
    introspect COMMAND --help

Why a dispatcher: each command keeps its own parser in its own module (``introspect.cli.run``,
``...models``, ...), exactly what ``python -m experiments.<module>`` runs from a clone, so both
spellings take the same arguments. The table below is torch-free: ``introspect --help`` and
``--version`` answer at once, and a command imports what it needs only when chosen.
"""

from __future__ import annotations

import importlib
import sys

from introspect.cli import common

# command: (module under introspect.cli, one-line summary for --help)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("run", "run tasks on one model (or a sweep file): JSONL records, summary, dashboard"),
    "sweep": ("sweep", "run a YAML grid of tasks over several models; shards on SLURM or local processes"),
    "vectors": ("vectors", "build and cache concept vectors; print their norms (to choose α)"),
    "dashboard": ("dashboard", "the HTML dashboard and summary.csv of a results folder"),
    "compare": ("compare", "models side by side: each task's headline figure with its 95% CI"),
    "models": ("models", "list the model registry; install an offline model's weights"),
    "rasch": ("rasch", "Rasch abilities from the ability task, and their link to self-knowledge"),
    "bench": ("bench", "speed ratios on the default model (not a test)"),
    "calibrate": ("calibrate", "coverage and false-positive rates of the report on synthetic records"),
    "train-aware": ("train_aware", "train the positive-control LoRA adapter; re-measure its damage gates"),
    "train-selfknow": ("train_selfknow", "train the Delegate Game's self-knowledge LoRA (or its shuffled control)"),
    "by-band": ("by_band", "a positive control's held-out figures by nearest-training-cosine band"),
    "gpu-smoke": ("gpu_smoke", "ten minutes on a GPU machine: does the GPU path work here?"),
}


def version() -> str:
    """The installed distribution's version (a source tree run without installing has none)."""
    from importlib import metadata

    try:
        return metadata.version("introspect")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def usage() -> str:
    width = max(map(len, COMMANDS))
    rows = "\n".join(f"  {name:<{width}}  {summary}" for name, (_, summary) in COMMANDS.items())
    return (f"usage: introspect COMMAND [ARGS ...]\n\n"
            f"Measure whether open-weight LLMs can introspect (concept injection, self-knowledge).\n\n"
            f"commands:\n{rows}\n\n"
            f"options:\n  -h, --help     this list; introspect COMMAND --help: the command's own flags\n"
            f"  -V, --version  the installed version\n\n"
            f"From a clone, python -m experiments.<module> runs the same commands with the same arguments\n"
            f"(module names use underscores: train-aware is experiments.train_aware).")


def main(argv: list[str] | None = None) -> int:
    """Dispatch ``introspect COMMAND ARGS`` to the command's ``main(ARGS)``; its exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print(usage(), file=sys.stderr)
        return 2
    if argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    if argv[0] in ("-V", "--version"):
        print(f"introspect {version()}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        return common.fail(f"unknown command {name!r}; commands: {', '.join(COMMANDS)} (introspect --help)")
    module = importlib.import_module(f"introspect.cli.{COMMANDS[name][0]}")
    before, common.STYLE["prefix"] = common.STYLE["prefix"], "introspect "
    try:
        rc = module.main(rest)
    finally:  # in-process callers (tests, notebooks) keep their own spelling afterwards
        common.STYLE["prefix"] = before
    return 0 if rc is None else int(rc)


if __name__ == "__main__":
    sys.exit(main())
