"""Run a grid of tasks over several models from one YAML file.

    python -m experiments.sweep CONFIG.yaml [--shard k/N] [--seed S] [--out DIR] [--device-map auto] ...

YAML keys (all optional except what the tasks need): models (list), tasks (list), layers (list)
or layers_grid (int: that many evenly spaced interior layers, per model), alphas, alpha_units
(unit|resid), n_concepts, n_trials, seed, max_new_tokens, batch_size, variant, options (dict),
words_file, out. Flags given on the command line override the file (same flags as
``experiments.run``). Presets: experiments/presets/quick.yaml and full.yaml. Each model is run in
turn (resumable: finished trials are skipped), then the summary and dashboard are written for the
out dir.

SLURM array (one job per shard, each writing its own out dir, merged by the report loader)::

    #SBATCH --array=0-7
    python -m experiments.sweep experiments/presets/full.yaml \\
        --shard $SLURM_ARRAY_TASK_ID/8 --out results/full/shard$SLURM_ARRAY_TASK_ID
    # afterwards: python -m experiments.dashboard results/full   (load_results reads every shard)

Shard k of N holds the trials whose id (a hex hash) is k mod N, so shards are balanced, disjoint
and stable across reruns; a rerun of a killed shard resumes where it stopped. On a multi-GPU node
run one process per GPU (``CUDA_VISIBLE_DEVICES=i ... --shard i/G --out results/x/gpu$i``), or
spread one large model over all GPUs with ``--device-map auto``.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import yaml

from introspect.tasks.base import ConfigError, TaskConfig

PRESETS_DIR = Path(__file__).resolve().parent / "presets"
KEYS = ("models", "tasks", "layers", "layers_grid", "alphas", "alpha_units", "n_concepts",
        "n_trials", "seed", "max_new_tokens", "batch_size", "variant", "options", "words_file", "out")
CORE_TASKS = ("A", "B", "C", "D")
MAX_ROWS = 60  # metric rows printed at the end of a run (all of them go to summary.csv)
_INT_KEYS = ("layers_grid", "n_concepts", "n_trials", "seed", "max_new_tokens", "batch_size")


def _num(key: str, v: Any, kind: type) -> Any:
    if isinstance(v, bool) or not isinstance(v, (int, float) if kind is float else int):
        if isinstance(v, str) and kind is float and v.strip().lower() in ("nan", "inf", "-inf", ".nan"):
            return float(v)
        raise ConfigError(f"{key}: expected {'a number' if kind is float else 'an integer'}, got {v!r}")
    return kind(v)


def _list(key: str, v: Any) -> list:
    if v is None:
        return []
    return list(v) if isinstance(v, (list, tuple)) else [v]


def check_settings(raw: Any, source: str) -> dict[str, Any]:
    """Validate a sweep mapping's keys and value types; return a normalised copy."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a YAML mapping of settings, got {type(raw).__name__}")
    unknown = [k for k in raw if k not in KEYS]
    if unknown:
        raise ConfigError(f"{source}: unknown key {unknown[0]!r}; allowed keys: {', '.join(KEYS)}")
    s = dict(raw)
    if s.get("layers") is not None and s.get("layers_grid") is not None:
        raise ConfigError(f"{source}: give either layers or layers_grid, not both")
    for key in _INT_KEYS:
        if s.get(key) is not None:
            s[key] = _num(key, s[key], int)
    if "layers" in s:
        s["layers"] = [_num("layers", x, int) for x in _list("layers", s["layers"])]
    if "alphas" in s:
        s["alphas"] = [_num("alphas", x, float) for x in _list("alphas", s["alphas"])]
    for key in ("models", "tasks"):
        if key in s:
            s[key] = [str(x) for x in _list(key, s[key])]
    if s.get("options") is not None and not isinstance(s["options"], dict):
        raise ConfigError(f"{source}: options must be a mapping (key: value)")
    return s


def load_settings(path: Path | str) -> dict[str, Any]:
    """A sweep/preset YAML file as a checked settings dict; a bare preset name also works."""
    p = Path(path)
    if not p.exists() and (PRESETS_DIR / f"{path}.yaml").exists():
        p = PRESETS_DIR / f"{path}.yaml"
    elif not p.exists() and not p.suffix:
        names = ", ".join(sorted(q.stem for q in PRESETS_DIR.glob("*.yaml")))
        raise ConfigError(f"unknown preset {str(path)!r}; presets: {names} (or a YAML file path)")
    try:
        raw = yaml.safe_load(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"cannot read sweep config {p}: {e.strerror or e}") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML ({type(e).__name__})") from e
    return check_settings(raw, str(p))


def expand_tasks(tasks: list[str]) -> list[str]:
    """``all`` means the four injection tasks A–D; comma lists are split."""
    out: list[str] = []
    for t in tasks:
        for part in str(t).split(","):
            part = part.strip()
            if part:
                out += list(CORE_TASKS) if part.lower() == "all" else [part]
    return list(dict.fromkeys(out))


def task_config(s: dict[str, Any], n_layers: int | None = None) -> TaskConfig:
    """TaskConfig from settings; ``layers_grid`` is resolved against ``n_layers`` when given."""
    from introspect.runner import layers_grid

    layers = tuple(s.get("layers") or ())
    if s.get("layers_grid") is not None and not layers and n_layers is not None:
        layers = layers_grid(n_layers, int(s["layers_grid"]))
    alphas = tuple(float(a) for a in s.get("alphas") or ())
    if any(not math.isfinite(a) for a in alphas):
        raise ConfigError(f"alphas must be finite numbers, got {[a for a in alphas if not math.isfinite(a)][0]}")
    base = TaskConfig()
    kw = {k: s[k] for k in ("alpha_units", "n_concepts", "n_trials", "seed", "max_new_tokens",
                            "batch_size", "variant", "words_file") if s.get(k) is not None}
    cfg = TaskConfig(layers=layers, alphas=alphas if "alphas" in s else base.alphas, **kw)
    return cfg.with_options(**s["options"]) if s.get("options") else cfg


def run_settings(s: dict[str, Any], *, shard: tuple[int, int] | None = None, progress: bool = True,
                 device_map: str | None = None, device: str | None = None, dtype: str | None = None,
                 resume: bool = True) -> int:
    """Run every model of a settings dict, print summaries, write summary + dashboard. Returns 0."""
    from introspect.models import DEFAULT_MODEL, load_model
    from introspect.runner import run_grid, validate

    models = s.get("models") or [DEFAULT_MODEL]
    tasks = expand_tasks(s.get("tasks") or list(CORE_TASKS))
    out = Path(s.get("out") or "results")
    cfg0 = task_config(s)
    # Everything checkable without a model fails here, before any (slow) load.
    validate(cfg0, tasks, out, shard=shard, need_layers=s.get("layers_grid") is None)
    notes = [f"device_map={device_map}"] if device_map else []
    summaries = []
    for name in models:
        model = load_model(name, dtype=dtype, device=device, device_map=device_map)
        cfg = task_config(s, model.cfg.n_layers)
        summary = run_grid(model, tasks, cfg, out, shard=shard, resume=resume, progress=progress,
                           notes=notes)
        summaries.append(summary)
        grid = (f"  layers={list(cfg.layers)}  alphas={list(cfg.alphas)} ({cfg.alpha_units})"
                if cfg.layers else "")
        print(f"\n== {summary.model}{grid}  shard={shard and f'{shard[0]}/{shard[1]}'}")
        print(summary.table())
        del model
    report(out, summaries)
    return 0


def report(out: Path, summaries: list) -> None:
    """Print the metrics table and output paths; write summary CSV/JSON and the dashboard."""
    try:
        from introspect.report import load_results, summarize, write_dashboard, write_summary
    except ImportError:  # report module unavailable: counts above are the summary
        summarize = None
    if summarize is not None and out.is_dir() and any(out.rglob("*.jsonl")):
        table = summarize(load_results(out))
        if not table.empty:
            import pandas as pd

            cols = ["model_id", "task", "variant", "layer_idx", "alpha", "metric", "condition",
                    "value", "lo", "hi", "n"]
            shown = table[[c for c in cols if c in table]].head(MAX_ROWS)
            with pd.option_context("display.width", 200, "display.float_format", "{:.3f}".format):
                print("\n" + shown.to_string(index=False))
            if len(table) > MAX_ROWS:
                print(f"... {len(table) - MAX_ROWS} more rows in summary.csv")
        csv_path, json_path = write_summary(out)
        dash = write_dashboard(out)
        print(f"\nsummary: {csv_path} {json_path}\ndashboard: {dash}")
    for s in summaries:
        for task, path in s.files.items():
            print(f"results {task}: {path}")


def main(argv: list[str] | None = None) -> int:
    from experiments.run import main as run_main

    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0].startswith("-"):
        if any(a in ("-h", "--help") for a in argv):
            print(__doc__)
            return 0
        print("error: usage: python -m experiments.sweep CONFIG.yaml [--shard k/N] [overrides]",
              file=sys.stderr)
        return 2
    return run_main(["--sweep", argv[0], *argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
