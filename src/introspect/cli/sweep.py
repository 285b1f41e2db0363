"""Run a grid of tasks over several models from one YAML file (or a shipped preset by name).

    introspect sweep CONFIG.yaml|PRESET [--shard k/N] [--seed S] [--out DIR] [--device-map auto] ...

YAML keys (all optional except what the tasks need): models (list), tasks (list), layers (list)
or layers_grid (int: that many evenly spaced interior layers, per model), alphas, alpha_units
(raw|unit|resid), n_concepts, n_trials, seed, max_new_tokens, batch_size (N or auto), variant,
options (dict: the keys each task reads are listed by ``introspect run --help``), words_file,
out, temperature, top_p, top_k, n_samples, reproducible (deterministic kernels and a pinned
batch). Flags given on the command line override the file (the same flags as ``introspect
run``). Shipped presets: {presets}. Each model is run in turn (resumable: finished trials are
skipped), then the summary and dashboard are written for the out dir.

On SLURM (one job array, shard k in <out>/shard{{k}}; see introspect/cli/launch.py)::

    introspect sweep full --out results/full \\
        --executor slurm --shards 8 --wait [--partition P --gpus-per-task G --cpus-per-task C
        --time 4:00:00 --mem 32G --max-retries 2]

prints the job id, follows finished trials across shards, resubmits a killed shard (it resumes),
and writes the merged summary and dashboard for --out. Without --wait a small job does the merge
after the array; rerunning the command attaches to live jobs. ``--executor local [--parallel P]``
runs the same shards as local processes.

Shard k of N holds the trials whose id (a hex hash) is k mod N, so shards are balanced, disjoint
and stable across reruns; a rerun of a killed shard resumes where it stopped. On a multi-GPU node
run one process per GPU (``CUDA_VISIBLE_DEVICES=i ... --shard i/G --out results/x/gpu$i``), or
spread one large model over all GPUs with ``--device-map auto``.
"""

from __future__ import annotations

import sys

from introspect.cli import presets, settings
from introspect.cli.common import command

# Names other modules imported from here before settings.py existed; new code imports settings.
from introspect.cli.settings import (  # noqa: F401
    CORE_TASKS,
    check_settings,
    expand_tasks,
    load_settings,
    report,
    run_settings,
    task_config,
)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0].startswith("-"):
        if any(a in ("-h", "--help") for a in argv):
            print(__doc__.format(presets=", ".join(presets.names())))
            return 0
        print(f"error: usage: {command('sweep')} CONFIG.yaml|PRESET [--shard k/N] [overrides]",
              file=sys.stderr)
        return 2
    if any(a == "--executor" or a.startswith("--executor=") for a in argv[1:]):
        from introspect.cli.launch import main as launch_main

        return launch_main(argv)
    return settings.main(["--sweep", argv[0], *argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
