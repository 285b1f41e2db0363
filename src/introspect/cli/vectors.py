"""Build and cache concept vectors; print their norms (to choose α and check the cache).

    introspect vectors --model smollm2-135m-instruct --layers 8 15 22 --limit-targets 10
    introspect vectors --layers 20 --export vectors.safetensors   # then: introspect run --vectors vectors.safetensors

For each word and layer prints the raw difference norm ||act(word) − baseline mean|| and the
layer's mean residual norm: α in "unit" units is comparable to the latter (α ≈ resid norm
replaces the residual's size). Vectors land in the same cache the runs use, so a later run
starts without rebuilding them. ``--export FILE`` also writes them to one safetensors file (model id,
fingerprint, hook point, both norms, how they were built and a sha256: docs/howto-vectors.md) that any
task reads with ``--vectors FILE``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from introspect.cli.common import USER_ERRORS, Parser, command, positive_int, quiet_hf


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog=command("vectors"), description=__doc__,
                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="default smollm2-135m-instruct")
    ap.add_argument("--layers", nargs="*", type=int, default=None)
    ap.add_argument("--layers-grid", type=positive_int, default=None, metavar="N")
    ap.add_argument("--limit-targets", type=positive_int, default=None, metavar="N", help="only the first N target words")
    ap.add_argument("--words-file", default=None)
    ap.add_argument("--batch-size", type=positive_int, default=32, metavar="N")
    ap.add_argument("--device-map", default=None)
    ap.add_argument("--export", metavar="FILE", default=None,
                    help="also write the vectors to FILE (safetensors) for --vectors FILE or another tool")
    ap.add_argument("--debug", action="store_true")
    args = ap.parse_args(argv)
    if not sys.stderr.isatty():
        quiet_hf()
    try:
        from introspect.engine.load.models import DEFAULT_MODEL, load_model
        from introspect.engine.vectors import build_concept_vectors, check_layers, vectors_root
        from introspect.tasks.base import ConfigError
        from introspect.tasks.prompts import load_words
        from introspect.tasks.runner import layers_grid

        words = load_words(args.words_file)
        targets = list(words.targets[: args.limit_targets] if args.limit_targets else words.targets)
        if args.limit_targets is not None and args.limit_targets < 1:
            raise ConfigError("--limit-targets must be at least 1")
        if args.layers is not None and not args.layers:
            raise ConfigError("empty layer list; pass --layers L ... or --layers-grid N")
        if args.export and not Path(args.export).expanduser().absolute().parent.is_dir():
            raise ConfigError(f"--export {args.export}: folder {Path(args.export).parent} does not exist")
        model = load_model(args.model or DEFAULT_MODEL, device_map=args.device_map)
        layers = args.layers if args.layers else layers_grid(model.cfg.n_layers, args.layers_grid or 3)
        layers = check_layers(model, layers)
        t0 = time.perf_counter()
        vecs = build_concept_vectors(model, targets, layers, words.baseline, batch_size=args.batch_size)
        secs = time.perf_counter() - t0
        if args.export:
            sha = export(model, vecs, args.export, words.baseline)
    except KeyboardInterrupt:
        return 130
    except USER_ERRORS as e:
        if args.debug:
            raise
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    print(f"{'word':<16}" + "".join(f"{'L' + str(la) + ' raw':>11}{'resid':>8}" for la in layers))
    for w in targets:
        cells = [vecs[(w, la)] for la in layers]
        print(f"{w:<16}" + "".join(f"{c.raw_norm:>11.1f}{c.mean_resid_norm:>8.1f}" for c in cells))
    print(f"{len(vecs)} vectors ({len(targets)} words x {len(layers)} layers) in {secs:.1f}s; "
          f"cache: {vectors_root()}")
    if args.export:
        print(f"wrote {args.export} (sha256 {sha[:12]}); use it with --vectors {args.export}")
    return 0


def export(model, vecs, path: str, baseline) -> str:
    """Write built vectors with the recipe that made them; returns the set's sha256."""
    import hashlib
    import json

    from introspect.engine import vector_files
    from introspect.engine.load.models import model_info
    from introspect.engine.vectors import template_for

    info = model_info(model)
    built = {"recipe": "mean difference at the final token (seed section 4), unit-normalised; stored at raw size",
             "template": template_for(None, True), "chat": True, "baseline": list(baseline),
             "baseline_sha256": hashlib.sha256(json.dumps(sorted(baseline)).encode()).hexdigest()}
    return vector_files.save(path, vecs, model_id=info.name, fingerprint=info.fingerprint,
                             d_model=int(model.cfg.d_model), built=built)


if __name__ == "__main__":
    sys.exit(main())
