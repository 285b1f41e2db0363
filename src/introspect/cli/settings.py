"""The settings ``run`` and ``sweep`` share: flags, preset/sweep YAML files, their merge and check, and the run they drive.

``introspect run`` and ``introspect sweep`` (and their ``python -m experiments.*`` wrappers) are
thin entry points over this module, so neither imports the other. Settings come from, in
increasing priority: built-in defaults, ``--preset`` (a shipped preset by name, or a YAML path),
``--sweep`` file, explicit flags. Everything is checked before a model loads or a file is written.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

import yaml

from introspect.cli import options as opts
from introspect.cli import presets
from introspect.cli.common import (
    USER_ERRORS,
    Parser,
    batch_size,
    command,
    guarded,
    load,
    positive_int,
    quiet_hf,
    save_weights,
)
from introspect.cli.run_report import report
from introspect.tasks.base import ConfigError, TaskConfig

__all__ = ["USER_ERRORS", "Parser", "build_parser", "check_settings", "expand_tasks", "load_settings", "main",
           "quiet_hf", "report", "run_settings", "settings_from_args", "task_config"]

PRESETS_DIR = presets.PRESETS_DIR
KEYS = ("models", "tasks", "layers", "layers_grid", "alphas", "alpha_units", "n_concepts",
        "n_trials", "seed", "max_new_tokens", "batch_size", "variant", "options", "words_file", "vectors_file",
        "out", "temperature", "top_p", "top_k", "n_samples", "reproducible")
CORE_TASKS = ("A", "B", "C", "D")
_INT_KEYS = ("layers_grid", "n_concepts", "n_trials", "seed", "max_new_tokens", "batch_size", "top_k", "n_samples")
_FLOAT_KEYS = ("temperature", "top_p")
# Counts that must be positive in a settings file (batch_size may also be ``auto``).
_COUNT_KEYS = ("layers_grid", "n_concepts", "n_trials", "max_new_tokens", "batch_size", "n_samples")
DTYPES = ("fp32", "fp16", "bf16", "float32", "float16", "bfloat16")  # what engine.load.models.resolve_dtype accepts


RUN_HELP = """Run introspection tasks on one model (or a sweep file) and write JSONL results + dashboard.

    {run} --preset quick                       # A–D on the default model
    {run} --task A --layers 10 15 20 --alphas 8 32 64 --n-concepts 5
    {run} --task all --model meta-llama/Meta-Llama-3-8B-Instruct --preset full
    {run} --sweep my-sweep.yaml --shard 3/8 --out results/s3

Settings come from, in increasing priority: built-in defaults, ``--preset`` (a shipped preset
by name: {presets}; or a YAML path), ``--sweep`` file, explicit flags. Reruns resume: trials
already in ``<out>/<model>/<task>.jsonl`` are skipped. Bad input is one ``error:`` line and
exit 2, and nothing is written.
"""


def _task_list() -> str:
    """Every registered task, its one-line description and the ``--option`` keys it reads (the
    help text's epilog)."""
    from introspect.tasks import get_task
    from introspect.tasks.base import TASKS

    get_task("A")  # importing the tasks package registers every task
    width = max(map(len, TASKS))
    rows = [f"  {name:<{width}}  {TASKS[name].description}\n  {'':<{width}}  --option keys: {opts.help_lines(name)}"
            for name in sorted(TASKS)]
    return (f"registered tasks (every task also reads --option {', '.join(opts.EVERY_TASK)}):\n"
            + "\n".join(rows))


def build_parser() -> argparse.ArgumentParser:
    """The flags of ``run`` (``sweep`` passes its file as ``--sweep``)."""
    ap = Parser(prog=command("run"), description=RUN_HELP.format(run=command("run"), presets=presets.help_line()),
                 epilog=_task_list(), formatter_class=argparse.RawDescriptionHelpFormatter)
    a = ap.add_argument
    a("--task", dest="tasks", nargs="+", action="extend", metavar="T",
      help="A B C D, all (= A–D), or any registered task listed below; comma lists allowed")
    a("--model", help="registry name, hub id or local HF dir (default smollm2-135m-instruct)")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--layers", nargs="*", type=int, metavar="L", help="layer indices")
    g.add_argument("--layers-grid", type=positive_int, metavar="N",
                   help="N evenly spaced layers, excluding the first and last")
    a("--alphas", nargs="*", type=float, metavar="A", help="injection strengths")
    a("--alpha-units", choices=("raw", "unit", "resid"),
      help="raw: alpha x the raw mean-difference vector (Lindsey's strengths, the default); unit: alpha x "
           "the unit vector; resid: alpha x the mean residual norm at the injected positions")
    a("--n-concepts", type=int)
    a("--n-trials", type=int)
    a("--seed", type=int)
    a("--out", help="results directory (default results)")
    a("--preset", metavar="NAME|FILE", help=f"a shipped preset ({presets.help_line()}) or a preset YAML path")
    a("--variant", help="task prompt variant(s), comma separated, or 'all'")
    a("--option", action="append", default=[], metavar="KEY=VALUE",
      help="task-specific option (value parsed as YAML), repeatable; each task's keys are listed below")
    a("--words-file", help="concept words YAML (default: the shipped words.yaml)")
    a("--vectors", metavar="FILE", help="concept vectors from a file (introspect vectors --export) in place of "
      "building them; it must hold every target word at every run layer, for this model")
    a("--data-dir", metavar="DIR", help="folder holding named third-party data files (e.g. mmlu200's "
      "evals_sandbagging_mmlu200.jsonl for task ability); without it they are read from the cache or "
      "downloaded and checked by sha256 (introspect.data.fetch)")
    a("--placebo", action="store_true",
      help="inject a zero vector at the same positions and α: the instrument's null run (its answers "
           "must equal their controls; written as <model>+placebo)")
    a("--shard", metavar="k/N", help="run only shard k of N (0-based)")
    a("--temperature", type=float, help="sampling temperature (default 1, as Lindsey 2025); 0 = greedy")
    a("--top-p", type=float, help="nucleus sampling mass in (0, 1] (default 1 = off)")
    a("--top-k", type=int, help="sample among the k likeliest tokens (default 0 = off)")
    a("--samples", dest="n_samples", type=int, metavar="K",
      help="sampled answers per trial, each from its own seeded stream (default 1; greedy runs use 1)")
    a("--greedy", action="store_true", help="greedy decoding (same as --temperature 0)")
    a("--max-new-tokens", type=int)
    a("--batch-size", type=batch_size, metavar="N|auto",
      help="rows per batch, lowered to what fits in free memory; auto (the default unless a preset "
           "sets it) = as many as fit, at most 16 on a CPU and 256 on a GPU")
    a("--reproducible", action=argparse.BooleanOptionalAction, default=None,
      help="deterministic kernels (CUBLAS_WORKSPACE_CONFIG set before CUDA starts) and the batch pinned: "
           "never lowered to free memory, an out-of-memory error stops the run; each record keeps its "
           "batch size (the full preset's default; --no-reproducible turns it off)")
    a("--device-map", help="e.g. auto: spread one model over all visible GPUs")
    a("--device", help="cpu, cuda, cuda:1 ... (default: cuda if available)")
    a("--revision", help="hub revision (branch, tag or commit) of a hub model; it keys the fingerprint")
    a("--dtype", choices=DTYPES, metavar="DTYPE", help="fp32 | fp16 | bf16, or float32 | float16 | bfloat16 "
                                                    "(default: the registry entry's, else fp32 on a CPU and bf16 on a GPU)")
    a("--attention", choices=("auto", "sdpa", "eager"),
      help="attention implementation (default auto: sdpa unless the model needs eager)")
    a("--adapter", metavar="DIR", help="LoRA adapter from train-aware, merged into its base "
                                       "model (--model defaults to that base); results go to <model>+lora-<hash>")
    a("--adapter-scale", type=float, default=1.0, metavar="S",
      help="the adapter's weight change times S > 0 (default 1, as trained): a dose-response knob; "
           "results go to <model>+lora-<hash>xS")
    a("--remove-direction", metavar="SPEC", help="project a direction out of everything written into the "
      "residual stream: refusal (Arditi et al.'s direction, chosen over the layers), refusal@L, "
      "refusal-relative[@L] or refusal-unfiltered[@L] (departures from the paper's induce bar), or a direction file; results go to <model>+ablate-<name>-<sha8> (docs/howto-refusal.md)")
    a("--refusal-requests", metavar="FILE", help="harmful and harmless requests for the refusal direction: a YAML "
      "with harmful: and harmless: lists, or an XSTest CSV (default: the project's own set)")
    a("--save-orthogonalized", metavar="DIR", help="with --remove-direction: write the model with the direction "
      "orthogonalized out of its weights to the new folder DIR (no hooks needed; run on it with --model DIR) and stop, "
      "running no task")
    a("--no-resume", action="store_true", help="rerun trials already in the results files")
    a("--no-progress", action="store_true")
    a("--debug", action="store_true", help="show tracebacks")
    a("--sweep", metavar="CONFIG.yaml", help="run a sweep file (see the sweep command)")
    return ap


def _options(items: list[str]) -> dict[str, Any]:
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
    s: dict[str, Any] = {}
    if args.preset:
        s.update(load_settings(args.preset))
    if args.sweep:
        s.update(load_settings(args.sweep))
    flags = {
        "tasks": args.tasks, "alphas": args.alphas, "alpha_units": args.alpha_units,
        "n_concepts": args.n_concepts, "n_trials": args.n_trials, "seed": args.seed,
        "out": args.out, "variant": args.variant, "max_new_tokens": args.max_new_tokens,
        "batch_size": args.batch_size, "words_file": args.words_file, "vectors_file": args.vectors,
        "models": [args.model] if args.model else None,
        "temperature": 0.0 if args.greedy else args.temperature, "top_p": args.top_p,
        "top_k": args.top_k, "n_samples": args.n_samples, "reproducible": args.reproducible,
    }
    s.update({k: v for k, v in flags.items() if v is not None})
    if args.layers is not None:
        s["layers"] = args.layers
        s.pop("layers_grid", None)
    elif args.layers_grid is not None:
        s["layers_grid"] = args.layers_grid
        s.pop("layers", None)
    if args.option:
        given = _options(args.option)
        opts.check(given, expand_tasks(list(s.get("tasks") or CORE_TASKS)))
        s["options"] = {**(s.get("options") or {}), **given}
    if getattr(args, "placebo", False):
        s["options"] = {**(s.get("options") or {}), "placebo": True}
    if getattr(args, "data_dir", None):
        if not Path(args.data_dir).is_dir():
            raise ConfigError(f"--data-dir {args.data_dir}: no such folder; give the folder that holds the data files")
        s["options"] = {**(s.get("options") or {}), "data_dir": str(Path(args.data_dir).resolve())}
    sk = [t for t in expand_tasks(list(s.get("tasks") or [])) if t not in CORE_TASKS]
    if args.preset and Path(str(args.preset)).stem == "quick" and sk and args.tasks:
        # quick.yaml sizes tasks A–D only: a self-knowledge task would run at its full defaults
        raise ConfigError(f"--preset quick sizes tasks A-D; for {', '.join(sk)} use --preset selfknowledge-quick "
                          "(about two minutes a task on a 2-core CPU)")
    return check_settings(s, "command line")


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
    if str(s.get("batch_size")).lower() == "auto":
        s["batch_size"] = 0
    for key in _INT_KEYS:
        if s.get(key) is not None:
            s[key] = _num(key, s[key], int)
    for key in _FLOAT_KEYS:
        if s.get(key) is not None:
            s[key] = _num(key, s[key], float)
    if "layers" in s:
        s["layers"] = [_num("layers", x, int) for x in _list("layers", s["layers"])]
    if "alphas" in s:
        s["alphas"] = [_num("alphas", x, float) for x in _list("alphas", s["alphas"])]
    for key in ("models", "tasks"):
        if key in s:
            s[key] = [str(x) for x in _list(key, s[key])]
    if s.get("reproducible") is not None and not isinstance(s["reproducible"], bool):
        raise ConfigError(f"{source}: reproducible must be true or false, got {s['reproducible']!r}")
    if s.get("options") is not None and not isinstance(s["options"], dict):
        raise ConfigError(f"{source}: options must be a mapping (key: value)")
    return s


def load_settings(path: Path | str) -> dict[str, Any]:
    """A sweep/preset YAML file as a checked settings dict; a shipped preset's bare name also
    works. Counts must be positive and option keys known to the file's tasks."""
    p = presets.find(path)
    if p is None:
        if Path(path).suffix in (".yaml", ".yml") or len(Path(path).parts) > 1:
            stem = Path(path).stem
            hint = f" (the shipped preset is named by itself: {stem})" if stem in presets.names() else ""
            raise ConfigError(f"cannot read sweep config {path}: no such file{hint}")
        raise ConfigError(f"unknown preset {str(path)!r}; presets: {', '.join(presets.names())} "
                          "(or a YAML file path)")
    try:
        raw = yaml.safe_load(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"cannot read sweep config {p}: {e.strerror or e}") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML ({type(e).__name__})") from e
    s = check_settings(raw, str(p))
    for key in _COUNT_KEYS:  # 0 would silently mean "auto" (batch_size) or an empty grid
        v = raw.get(key) if isinstance(raw, dict) else None
        if isinstance(v, int) and not isinstance(v, bool) and v < 1:
            raise ConfigError(f"{p}: {key} must be a positive integer{' or auto' if key == 'batch_size' else ''}, "
                              f"got {v}")
    if s.get("options"):
        opts.check(s["options"], expand_tasks(list(s.get("tasks") or CORE_TASKS)), where=str(p))
    return s


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
    from introspect.tasks.runner import default_layers, layers_grid

    layers = tuple(s.get("layers") or ())
    if s.get("layers_grid") is not None and not layers and n_layers is not None:
        layers = layers_grid(n_layers, int(s["layers_grid"]))
    elif not layers and n_layers is not None and "layers" not in s:  # `--layers` with none: an error
        layers = default_layers(n_layers)
    alphas = tuple(float(a) for a in s.get("alphas") or ())
    if any(not math.isfinite(a) for a in alphas):
        raise ConfigError(f"alphas must be finite numbers, got {[a for a in alphas if not math.isfinite(a)][0]}")
    base = TaskConfig()
    kw = {k: s[k] for k in ("alpha_units", "n_concepts", "n_trials", "seed", "max_new_tokens",
                            "batch_size", "variant", "words_file", "vectors_file", "temperature", "top_p", "top_k",
                            "n_samples") if s.get(k) is not None}
    kw.setdefault("batch_size", 0)  # not asked for: as many rows as fit (≤ 16 on a CPU, ≤ 256 on a GPU)
    cfg = TaskConfig(layers=layers, alphas=alphas if "alphas" in s else base.alphas, **kw)
    return cfg.with_options(**s["options"]) if s.get("options") else cfg


def run_settings(s: dict[str, Any], *, shard: tuple[int, int] | None = None, progress: bool = True,
                 device_map: str | None = None, device: str | None = None, dtype: str | None = None,
                 resume: bool = True, adapter: str | None = None, attention: str | None = None,
                 revision: str | None = None, adapter_scale: float = 1.0, remove_direction: str | None = None,
                 refusal_requests: str | None = None) -> int:
    """Run every model of a settings dict, print summaries, write summary + dashboard. Returns 0."""
    from introspect.engine.load.devices import release
    from introspect.engine.load.models import DEFAULT_MODEL
    from introspect.tasks import get_task
    from introspect.tasks.runner import DEFAULT_LAYERS_NOTE, run_grid, validate

    models = s.get("models") or [DEFAULT_MODEL]
    if adapter and not s.get("models"):  # an adapter names the base model it was trained on
        from introspect.train.lora import read_adapter

        models = [read_adapter(adapter)[0]["base_model"]]
    tasks = expand_tasks(s.get("tasks") or list(CORE_TASKS))
    out = Path(s.get("out") or "results")
    cfg0 = task_config(s)
    # Everything checkable without a model fails here, before any (slow) load.
    # layers not given at all: default_layers once the model's depth is known; given empty: an error
    validate(cfg0, tasks, out, shard=shard, need_layers="layers" in s and s.get("layers_grid") is None)
    notes = [f"device_map={device_map}"] if device_map else []
    reproducible = bool(s.get("reproducible"))
    if reproducible:  # before any model load: cuBLAS reads its workspace setting when CUDA starts
        from introspect.engine.load import determinism

        determinism.enable()
    layered = any(get_task(t).layered for t in tasks)  # no task here reads layers: none to print
    summaries = []
    for name in models:
        model = load(name, dtype=dtype, device=device, device_map=device_map, adapter=adapter,
                     adapter_scale=adapter_scale, revision=revision, remove_direction=remove_direction,
                     refusal_requests=refusal_requests, **({"attn_implementation": attention} if attention else {}))
        cfg = task_config(s, model.cfg.n_layers)
        chosen = [] if "layers" in s or s.get("layers_grid") is not None or not layered else [DEFAULT_LAYERS_NOTE]
        if chosen:
            print(f"{name}: layers {list(cfg.layers)} of 0..{model.cfg.n_layers - 1}: {DEFAULT_LAYERS_NOTE}")
        summary = run_grid(model, tasks, cfg, out, shard=shard, resume=resume, progress=progress,
                           notes=[*notes, *chosen], reproducible=reproducible)
        summaries.append(summary)
        grid = (f"  layers={list(cfg.layers)}  alphas={list(cfg.alphas)} ({cfg.alpha_units})"
                if cfg.layers and layered else "")
        print(f"\n== {summary.model}{grid}  shard={shard and f'{shard[0]}/{shard[1]}'}")
        print(summary.table())
        del model
        release()  # the next model gets the GPU memory back
    report(out, summaries)
    return 0


def save_orthogonalized(args: argparse.Namespace) -> int:
    """``--save-orthogonalized DIR``: the model with the direction orthogonalized out of its weights,
    saved as a model folder (``common.save_weights``); no task runs."""
    if not args.remove_direction:
        raise ConfigError("--save-orthogonalized needs --remove-direction (refusal[@L], refusal-relative[@L], refusal-unfiltered[@L] or a direction file)")
    given = [f for f, v in (("--task", args.tasks), ("--sweep", args.sweep), ("--preset", args.preset),
                            ("--shard", args.shard)) if v]
    if given:
        raise ConfigError(f"--save-orthogonalized writes a model and runs no task; drop {given[0]}, then run on the "
                          f"saved folder with --model {args.save_orthogonalized}")
    print(save_weights(args.model, args.remove_direction, args.save_orthogonalized, refusal_requests=args.refusal_requests,
                       dtype=args.dtype, device=args.device, device_map=args.device_map, adapter=args.adapter,
                       adapter_scale=args.adapter_scale, revision=args.revision))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse flags, merge settings, run them; bad input is one ``error:`` line and 2."""
    args = build_parser().parse_args(argv)
    if args.no_progress or not sys.stderr.isatty():
        quiet_hf()

    def body() -> int:
        from introspect.tasks.runner import parse_shard

        if args.save_orthogonalized:
            return save_orthogonalized(args)
        shard = parse_shard(args.shard)
        settings = settings_from_args(args)
        return run_settings(settings, shard=shard, progress=not args.no_progress,
                            device_map=args.device_map, device=args.device, dtype=args.dtype,
                            resume=not args.no_resume, adapter=args.adapter, attention=args.attention,
                            revision=args.revision, adapter_scale=args.adapter_scale,
                            remove_direction=args.remove_direction, refusal_requests=args.refusal_requests)

    return guarded(body, debug=args.debug)
