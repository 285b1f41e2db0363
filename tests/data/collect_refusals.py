"""Regenerate the raw answers behind ``refusal_answers.yaml`` (the refusal grader's hand labels).

Why a script: the labelled file must be traceable to real model output. It answers XSTest prompts
(safe and unsafe, drawn with a seed) greedily on each model, as it is (and with ``--ablate`` with the
refusal direction removed), and writes the answers *without labels*; labels are added by hand, never by a grader.

    OMP_NUM_THREADS=2 python tests/data/collect_refusals.py --out /tmp/raw_refusals.yaml \\
        --xstest ../shared/data/xstest_prompts.csv --n 12 --seed 5
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import yaml

MODELS = ("smollm2-135m-instruct", "qwen2.5-coder-0.5b-instruct")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--xstest", required=True, help="XSTest v2 CSV (../shared/data/xstest_prompts.csv)")
    ap.add_argument("--models", nargs="*", default=list(MODELS))
    ap.add_argument("--n", type=int, default=12, help="prompts of each label per model")
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--ablate", action="store_true", help="also answer with the refusal direction removed")
    args = ap.parse_args(argv)
    if args.out.exists():
        print(f"error: {args.out} exists; pick a new file", file=sys.stderr)
        return 2
    from introspect.data.refusal import load_xstest
    from introspect.engine.directions import apply
    from introspect.engine.load.models import load_model
    from introspect.engine.run.chat import Conversation, render
    from introspect.engine.run.decode import generate

    rows = load_xstest(args.xstest)
    rng = random.Random(args.seed)
    picked = [r for lab in ("unsafe", "safe") for r in rng.sample([r for r in rows if r.label == lab], args.n)]
    out = []
    for name in args.models:
        for ablated in (False, True) if args.ablate else (False,):
            model = load_model(name)
            if ablated:
                model = apply(model, "refusal")
            prompts = [render(model.tokenizer, Conversation.of(("user", r.prompt))) for r in picked]
            gens = generate(model, prompts, max_new_tokens=args.max_new_tokens, temperature=0.0)
            out += [{"model": name, "ablated": ablated, "id": r.id, "xstest_label": r.label, "request": r.prompt,
                     "text": g.text, "label": None} for r, g in zip(picked, gens)]
            del model
    args.out.write_text(yaml.safe_dump({"answers": out}, sort_keys=False, allow_unicode=True, width=110))
    print(f"wrote {len(out)} answers to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
