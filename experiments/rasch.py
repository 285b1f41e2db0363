"""Rasch abilities of every model found in one or more results folders, their correlation with
the self-knowledge scores, and self-vs-other prediction (002 §4.4, App. A; issue 10).

    python -m experiments.rasch results/ [results_qwen/ ...] [--level question|benchmark] [--out DIR]

Questions come from the self-knowledge records (Delegate Game baselines, seb-difficulty
answers, recovery clean runs); models must share questions (same seed and question settings).
A missing folder, one without any ``*.jsonl`` file, or records that cannot support a fit is one
``error:`` line and exit 2, and nothing is written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from introspect.report.load import jsonl_files, load_results
from introspect.report.rasch import RaschError, benchmark_items, correlations, fit_rasch, sk_scores
from introspect.tasks.selfknowledge.crossmodel import answered_items, self_vs_other


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2)


def _fail(msg: str) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    ap = _Parser(prog="python -m experiments.rasch", description=__doc__,
                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", type=Path, nargs="+", metavar="RESULTS_DIR",
                    help="results folders (searched recursively for *.jsonl), any number of models")
    ap.add_argument("--level", choices=("question", "benchmark"), default="question",
                    help="Rasch items: single questions (default) or whole question sets as in 002")
    ap.add_argument("--out", type=Path, help="also write rasch_abilities.csv, rasch_items.csv, "
                    "rasch_correlations.csv and self_vs_other.csv into this folder")
    args = ap.parse_args(argv)
    for d in args.dirs:
        if not d.is_dir():
            return _fail(f"results directory not found: {d}")
        if not jsonl_files(d):
            return _fail(f"no *.jsonl files under {d}; expected results/<model>/<task>.jsonl")
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        return _fail(f"--out {args.out} is a file; expected a folder")
    df = pd.concat([load_results(d) for d in args.dirs], ignore_index=True)
    items = answered_items(df)
    if items.empty:
        return _fail("no answered questions in these records; run delegate, seb-difficulty or "
                     "recovery on each model first")
    if args.level == "benchmark":
        items = benchmark_items(items)
    try:
        abilities, difficulties = fit_rasch(items)
    except RaschError as e:
        return _fail(str(e))
    corr = correlations(abilities, sk_scores(df))
    svo = self_vs_other(df)
    with pd.option_context("display.width", 160, "display.max_rows", 200):
        print(f"Rasch abilities ({args.level} items, joint ML; ±1.96 SE):")
        print(abilities.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
        print("\nCorrelation of ability with self-knowledge scores (across models):")
        print(corr.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
        if not svo.empty:
            print("\nSelf vs other: AUROC of the predictor's predictions on the behaving model's items:")
            print(svo.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        abilities.to_csv(args.out / "rasch_abilities.csv", index=False)
        difficulties.to_csv(args.out / "rasch_items.csv", index=False)
        corr.to_csv(args.out / "rasch_correlations.csv", index=False)
        svo.to_csv(args.out / "self_vs_other.csv", index=False)
        print(f"\nwrote {args.out}/rasch_abilities.csv, rasch_items.csv, rasch_correlations.csv, "
              "self_vs_other.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
