"""Run introspection tasks on one model (or a sweep file) and write JSONL results + dashboard.

    python -m experiments.run --preset quick                       # A–D on the default model
    python -m experiments.run --task A --layers 10 15 20 --alphas 8 32 64 --n-concepts 5
    python -m experiments.run --task all --model meta-llama/Meta-Llama-3-8B-Instruct --preset full
    python -m experiments.run --sweep experiments/presets/full.yaml --shard 3/8 --out results/s3

Settings come from, in increasing priority: built-in defaults, ``--preset`` (a YAML in
experiments/presets), ``--sweep`` file, explicit flags. Reruns resume: trials already in
``<out>/<model>/<task>.jsonl`` are skipped. Bad input is one ``error:`` line and exit 2.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, NoReturn

import yaml

USER_ERRORS = (ValueError, OSError)  # ConfigError, ModelError, InjectionError, PromptLeakError...


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2 (argparse prints usage too)
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="python -m experiments.run", description=__doc__,
                 formatter_class=argparse.RawDescriptionHelpFormatter)
    a = ap.add_argument
    a("--task", dest="tasks", nargs="+", action="extend", metavar="T",
      help="A B C D, all (= A–D), or any registered task; comma lists allowed")
    a("--model", help="registry name, hub id or local HF dir (default smollm2-135m-instruct)")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--layers", nargs="*", type=int, metavar="L", help="layer indices")
    g.add_argument("--layers-grid", type=int, metavar="N",
                   help="N evenly spaced layers, excluding the first and last")
    a("--alphas", nargs="*", type=float, metavar="A", help="injection strengths")
    a("--alpha-units", choices=("unit", "resid"),
      help="unit: alpha x unit vector; resid: alpha x the layer's mean residual norm")
    a("--n-concepts", type=int)
    a("--n-trials", type=int)
    a("--seed", type=int)
    a("--out", help="results directory (default results)")
    a("--preset", help="quick | full | path to a preset YAML")
    a("--variant", help="task prompt variant(s), comma separated, or 'all'")
    a("--option", action="append", default=[], metavar="KEY=VALUE",
      help="task-specific option (value parsed as YAML), repeatable")
    a("--words-file", help="concept words YAML (default concepts/words.yaml)")
    a("--shard", metavar="k/N", help="run only shard k of N (0-based)")
    a("--max-new-tokens", type=int)
    a("--batch-size", type=int)
    a("--device-map", help="e.g. auto: spread one model over all visible GPUs")
    a("--device", help="cpu, cuda, cuda:1 ... (default: cuda if available)")
    a("--dtype", help="fp32 | fp16 | bf16 (default per model)")
    a("--no-resume", action="store_true", help="rerun trials already in the results files")
    a("--no-progress", action="store_true")
    a("--debug", action="store_true", help="show tracebacks")
    a("--sweep", metavar="CONFIG.yaml", help="run a sweep file (see experiments.sweep)")
    return ap


def _options(items: list[str]) -> dict[str, Any]:
    from introspect.tasks.base import ConfigError

    out = {}
    for item in items:
        key, sep, val = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--option must look like key=value, got {item!r}")
        try:
            out[key.strip()] = yaml.safe_load(val) if val.strip() else ""
        except yaml.YAMLError:
            out[key.strip()] = val
    return out


def settings_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """Merge defaults < preset < sweep file < explicit flags into one sweep-style dict."""
    from experiments.sweep import check_settings, load_settings

    s: dict[str, Any] = {}
    if args.preset:
        s.update(load_settings(args.preset))
    if args.sweep:
        s.update(load_settings(args.sweep))
    flags = {
        "tasks": args.tasks, "alphas": args.alphas, "alpha_units": args.alpha_units,
        "n_concepts": args.n_concepts, "n_trials": args.n_trials, "seed": args.seed,
        "out": args.out, "variant": args.variant, "max_new_tokens": args.max_new_tokens,
        "batch_size": args.batch_size, "words_file": args.words_file,
        "models": [args.model] if args.model else None,
    }
    s.update({k: v for k, v in flags.items() if v is not None})
    if args.layers is not None:
        s["layers"] = args.layers
        s.pop("layers_grid", None)
    elif args.layers_grid is not None:
        s["layers_grid"] = args.layers_grid
        s.pop("layers", None)
    if args.option:
        s["options"] = {**(s.get("options") or {}), **_options(args.option)}
    return check_settings(s, "command line")


def _quiet_hf() -> None:
    """No HF loading bars in logs (SLURM files, tests): stderr stays for errors and warnings."""
    import os

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:
        pass


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.no_progress or not sys.stderr.isatty():
        _quiet_hf()
    try:
        from experiments.sweep import run_settings
        from introspect.runner import parse_shard

        shard = parse_shard(args.shard)
        settings = settings_from_args(args)
        return run_settings(settings, shard=shard, progress=not args.no_progress,
                            device_map=args.device_map, device=args.device, dtype=args.dtype,
                            resume=not args.no_resume)
    except KeyboardInterrupt:
        print("interrupted; rerun the same command to resume", file=sys.stderr)
        return 130
    except Exception as e:
        user = isinstance(e, USER_ERRORS) or any(c.__name__ == "DataError" for c in type(e).__mro__)
        if args.debug or not user:
            raise
        msg = " ".join(str(e).split()) or type(e).__name__
        print(f"error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
