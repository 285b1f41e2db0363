"""Rasch abilities of every model found in one or more results folders, from an independent item
set, their correlation with the self-knowledge scores, self-vs-other prediction (002 §4.4,
App. A) and cross-prediction with the behaviour held fixed (``crosspredict``).

    introspect run --task ability --model M --option ability_items=ITEMS.jsonl
    introspect rasch results/ [results_qwen/ ...] [--level question|benchmark] [--out DIR]

Abilities come only from the ``ability`` task's records (a multiple-choice file no
self-knowledge task used; an item that a self-knowledge task also used is dropped and counted).
Conditional ML (the primary fit: consistent with few models) and 002's joint ML (biased outward
with few models; its rows say so) are both printed. Below ``MIN_MODELS`` models a warning says
that no ability–score correlation can be significant. A missing folder, one without any
``*.jsonl`` file, or records that cannot support a fit is one ``error:`` line and exit 2, and
nothing is written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from introspect.cli.common import Parser, command, fail
from introspect.report.load import jsonl_files, load_results
from introspect.report.rasch import (
    MIN_MODELS,
    RaschError,
    benchmark_items,
    correlations,
    fit_rasch,
    fit_rasch_cml,
    sk_scores,
)
from introspect.tasks.selfknowledge.crossmodel import (
    ability_items,
    ability_reading,
    self_vs_other,
    truth_item_ids,
)
from introspect.tasks.selfknowledge.crosspredict import cross_prediction


def _fail(msg: str) -> int:
    return fail(msg)


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog=command("rasch"), description=__doc__,
                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", type=Path, nargs="+", metavar="RESULTS_DIR",
                    help="results folders (searched recursively for *.jsonl), any number of models")
    ap.add_argument("--level", choices=("question", "benchmark"), default="question",
                    help="Rasch items: single questions (default; conditional and joint ML) or "
                    "topics as in 002's benchmark-level table (joint ML on topic accuracies)")
    ap.add_argument("--out", type=Path, help="also write rasch_abilities.csv, rasch_items.csv, "
                    "rasch_correlations.csv, self_vs_other.csv and cross_prediction.csv into this folder")
    args = ap.parse_args(argv)
    for d in args.dirs:
        if not d.is_dir():
            return _fail(f"results directory not found: {d}")
        if not jsonl_files(d):
            return _fail(f"no *.jsonl files under {d}; expected results/<model>/<task>.jsonl")
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        return _fail(f"--out {args.out} is a file; expected a folder")
    df = pd.concat([load_results(d) for d in args.dirs], ignore_index=True)
    reading = ability_reading(df)
    items = ability_items(df, reading)
    if items.empty:
        return _fail("no ability records in these folders; run --task ability --option "
                     "ability_items=<a multiple-choice file no self-knowledge task uses> on each model first")
    shared = set(items["item"]) & truth_item_ids(df)
    items = items[~items["item"].isin(shared)]
    notes = [f"{len(shared)} ability items were also self-knowledge items and were dropped"] if shared else []
    try:
        if args.level == "benchmark":
            abilities, difficulties = fit_rasch(benchmark_items(items.assign(item=items["topic"] + ":" + items["item"])))
        else:
            jml, difficulties = fit_rasch(items)
            abilities = pd.concat([fit_rasch_cml(items), jml], ignore_index=True)
    except RaschError as e:
        return _fail(str(e))
    n_models = int(abilities["ability"].notna().sum() / abilities["fit"].nunique())
    if n_models < MIN_MODELS:
        notes.append(f"only {n_models} models: below {MIN_MODELS} no ability-score correlation can reach "
                     "p < 0.05, even by exact permutation; read the correlations as descriptive")
    primary = abilities[abilities["fit"] == abilities["fit"].iloc[0]]
    corr = correlations(primary, sk_scores(df, notes))
    svo, cross = self_vs_other(df), cross_prediction(df)
    with pd.option_context("display.width", 200, "display.max_rows", 200, "display.max_colwidth", 60):
        how = ("cloze: each option's text scored after the bare question, no letters" if reading == "cloze" else
               "letter argmax at 'Answer:'; some records lack the cloze reading (run ability with --option cloze=true)")
        print(f"Rasch abilities ({args.level} items from the ability task, graded by {how}; ±1.96 SE, centred):")
        print(abilities.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
        for n in notes:
            print(f"warning: {n}")
        print(f"\nCorrelation of ability ({primary['fit'].iloc[0]}) with self-knowledge scores (across models):")
        print(corr.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
        if not svo.empty:
            print("\nSelf vs other: AUROC of the predictor's predictions on the behaving model's items:")
            print(svo.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
        if not cross.empty:
            print("\nCross-prediction: the behaving model's own AUROC minus the predictor's, paired by item:")
            print(cross.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        abilities.to_csv(args.out / "rasch_abilities.csv", index=False)
        difficulties.to_csv(args.out / "rasch_items.csv", index=False)
        corr.assign(warning="; ".join(notes)).to_csv(args.out / "rasch_correlations.csv", index=False)
        svo.to_csv(args.out / "self_vs_other.csv", index=False)
        cross.to_csv(args.out / "cross_prediction.csv", index=False)
        print(f"\nwrote {args.out}/rasch_abilities.csv, rasch_items.csv, rasch_correlations.csv, "
              "self_vs_other.csv, cross_prediction.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
