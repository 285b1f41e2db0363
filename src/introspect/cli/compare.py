"""Compare models side by side: each task's headline figure per model with its 95% CI.

    introspect compare results/                       # every model folder under results/
    introspect compare results/qwen results/gemma --out compare.html

Reads every ``*.jsonl`` under each RESULTS_DIR (model folders as ``introspect run`` writes
them), and writes one self-contained HTML page (plotly inline, opens offline) plus the tidy
headline table as CSV beside it (``compare.csv``), and, where self-knowledge tasks of several
models share items, self vs other (``self_vs_other.csv``; no ability records needed) and
cross-prediction, each model's behaviour held fixed and scored by every model's predictions
(``cross_prediction.csv``; rows below 10 items of a class say "not judged"), and, for the
Delegate Game, each model's lift when it delegates the share another model delegated
(``matched_rate.csv``; below 20 kept items "not judged"). With
``--adapter DIR``, task A of the adapted model minus its base model, paired by concept on the
words both ran (``vs_base.csv``, printed and on the page); with several adapters of one recipe
(the same config, base model and word files; one adapter per seed), how many trainings clear 0,
with the exact interval of the chance that one does (the training as the unit: ``stats.replication``).
A model with a direction removed (``--remove-direction``) beside the model itself is compared
without a flag: task A paired by concept, task ``refusal`` paired by request (``ablation.csv``).
A missing directory, or no records at
all, is one ``error:`` line and exit 2, and nothing is written.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

from introspect.cli.common import Parser, command


def default_out(dirs: list[Path]) -> Path:
    """``DIR/compare.html`` for one directory, else in the directories' common parent."""
    if len(dirs) == 1:
        return dirs[0] / "compare.html"
    return Path(os.path.commonpath([str(d.resolve()) for d in dirs])) / "compare.html"


def adapter_models(adapter: Path, models: set[str]) -> list[tuple[str, str, str]]:
    """(adapted model id, base model id, the pair's name) for an adapter directory whose adapted
    and base models both have results here: one per scale run (``--adapter-scale``), each
    against the same base."""
    import json
    import re

    meta_file = adapter / "introspect_adapter.json"
    try:
        meta = json.loads(meta_file.read_text())
        tag = str(meta["adapter_hash"])
    except (OSError, ValueError, KeyError) as e:
        raise ValueError(f"{adapter} is not an adapter directory from train-aware ({type(e).__name__})") from e
    own = re.compile(r"\+" + re.escape(tag.replace(":", "-")[:13]) + r"(x[0-9.e+-]+)?$")
    adapted = [m for m in sorted(models) if own.search(m)]
    if not adapted:
        raise ValueError(f"no results of adapter {tag} here; run {command('run')} --adapter {adapter} first")
    out = []
    for a in adapted:
        base_name = a.rsplit("+", 1)[0]
        if base_name not in models:
            raise ValueError(f"no results of the adapter's base model {base_name!r} here; run it into the same --out")
        out.append((a, base_name, f"{a} (adapter {tag} at layer {meta.get('layer')}) vs {base_name}"))
    return out


def vs_base_lines(rows: list[dict]) -> list[str]:
    """One line per ``tasks.injection.vs_base`` row, for the terminal and the page's notes."""
    return [f"{r['model_id']}, task A {r['variant']} L{int(r['layer_idx'])} α{r['alpha']:g} {r['alpha_units']}: "
            f"{r['metric']} {r['value']:+.2f} [{r['lo']:+.2f}, {r['hi']:+.2f}], sign-flip p {r['p']:.3f} "
            f"({r['n_clusters']} concepts; paired by concept)" for r in rows]


def ablation_lines(rows: list[dict]) -> list[str]:
    """One line per row comparing a model with a direction removed and the model itself."""
    out = []
    for r in rows:
        where = (f"task A {r['variant']} L{int(r['layer_idx'])} α{r['alpha']:g} {r['alpha_units']}"
                 if r["task"] == "A" else f"refusal ({r['variant']})")
        out.append(f"{r['model_id']}, {where}: {r['metric']} {r['value']:+.2f} [{r['lo']:+.2f}, {r['hi']:+.2f}], "
                   f"sign-flip p {r['p']:.3f} (n {r['n']})")
    return out


def adapter_recipes(by_dir: list[tuple[Path, list[tuple[str, str, str]]]]) -> dict[str, tuple[str, int]]:
    """Each adapted model id -> (its adapter's recipe, seed) (``train.provenance.recipe``)."""
    import json

    from introspect.train.provenance import recipe

    out = {}
    for d, pairs in by_dir:
        try:
            rec = recipe(json.loads((d / "introspect_adapter.json").read_text()))
        except ValueError:  # an adapter that records no training config is compared, never pooled
            continue
        out.update({adapted: rec for adapted, _, _ in pairs})
    return out


def replication_lines(rows: list[dict]) -> list[str]:
    """One line per ``tasks.injection.across`` row."""
    out = []
    for r in rows:
        rate = f"chance a training does {r['value']:.2f} [{r['lo']:.2f}, {r['hi']:.2f}] (exact)"
        if r["metric"] == "verdict_replication":
            out.append(f"{r['model_id']}, task A verdict: \"detected and identified\" in {r['trainings_cleared']} of "
                       f"{r['n_clusters']} trainings, {rate} ({r['labels']})")
            continue
        out.append(f"{r['model_id']}, task A {r['variant']} L{int(r['layer_idx'])} α{r['alpha']:g} {r['alpha_units']}: "
                   f"{r['metric']} {r['trainings_cleared']} of {r['n_clusters']} trainings (seeds {r['seeds']}) clear 0, "
                   f"{rate}; mean of the trainings' estimates {r['mean_of_trainings']:+.2f}, no interval (over so few "
                   "trainings of a recipe that may work on some and not others, a t interval undercovers: "
                   "stats.replication)")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog=command("compare"), description=__doc__,
                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="+", type=Path, metavar="RESULTS_DIR",
                    help="results directories (searched recursively for *.jsonl)")
    ap.add_argument("--out", type=Path, help="HTML file (default: DIR/compare.html)")
    ap.add_argument("--title", default="", help="page title")
    ap.add_argument("--adapter", action="append", default=[], type=Path, metavar="DIR",
                    help="an adapter from train-aware whose base and adapted model must both "
                         "have results here; the page names it and adds task A's Net (and Net over the "
                         "Gaussian ablation) of the adapted model minus the base model's, paired by "
                         "concept (repeatable: trainings of one recipe on other seeds are also pooled, "
                         "with the training as the unit)")
    args = ap.parse_args(argv)
    missing = [str(d) for d in args.dirs if not d.is_dir()]
    if missing:
        print(f"error: results directory not found: {', '.join(missing)}", file=sys.stderr)
        return 2
    import pandas as pd

    from introspect.records.atomic import atomic_write_text
    from introspect.report import load_headers, load_results, summarize
    from introspect.report.compare import (
        compare,
        cross_table,
        matched_table,
        self_other_table,
        wide_table,
    )
    from introspect.report.compare_page import render_compare
    from introspect.report.load import jsonl_files

    if not any(jsonl_files(d) for d in args.dirs):
        print(f"error: no *.jsonl files under {', '.join(map(str, args.dirs))}; run "
              f"{command('run')} first", file=sys.stderr)
        return 2
    trials = pd.concat([load_results(d) for d in args.dirs], ignore_index=True)
    headers = pd.concat([load_headers(d) for d in args.dirs], ignore_index=True)
    if "trial_id" in trials:  # the same folder given twice (or nested) counts each trial once
        has_id = trials["trial_id"].fillna("").astype(str) != ""
        trials = pd.concat([trials[has_id].drop_duplicates(["model_id", "trial_id"], keep="last"), trials[~has_id]])
    if trials.empty:
        print("error: the records hold no trials (only run headers)", file=sys.stderr)
        return 2
    try:
        by_dir = [(d, adapter_models(d, set(trials["model_id"].dropna()))) for d in args.adapter]
        found = [p for _, ps in by_dir for p in ps]
        trainings = adapter_recipes(by_dir)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    trials = trials.reset_index(drop=True)
    pairs = [name for _, _, name in found]
    from introspect.tasks.injection.across import across_trainings, verdicts_across
    from introspect.tasks.injection.vs_base import vs_base

    vb = [r for adapted, base, _ in found for r in vs_base(trials, adapted, base)]
    from introspect.tasks.refusal.metrics import pairs as ablated_pairs
    from introspect.tasks.refusal.metrics import refusal_change

    # a model with a direction removed beside the model itself: task A paired by concept, refusal by request
    ab = [r for changed, base in ablated_pairs(sorted(set(trials["model_id"].dropna())))
          for r in [*vs_base(trials, changed, base), *refusal_change(trials, changed, base)]]
    summary = summarize(trials)
    pooled, not_pooled = across_trainings(vb, trainings)
    pooled_v, not_pooled_v = verdicts_across(summary, trainings)
    pooled, not_pooled = pooled_v + pooled, not_pooled_v + not_pooled
    comp = compare(summary, headers, trials)
    comp = dataclasses.replace(comp, notes=(*comp.notes, *vs_base_lines(vb), *replication_lines(pooled), *not_pooled,
                                            *ablation_lines(ab)))
    out = args.out or default_out(args.dirs)
    title = args.title or "; ".join(pairs)
    html = render_compare(comp, title=title, source=", ".join(map(str, args.dirs)))
    csv_path = out.with_suffix(".csv")
    atomic_write_text(csv_path, comp.headline.to_csv(index=False))
    svo = self_other_table(comp)
    if not svo.empty:
        atomic_write_text(out.with_name("self_vs_other.csv"), comp.self_other.to_csv(index=False))
    cross = cross_table(comp)
    if not cross.empty:
        atomic_write_text(out.with_name("cross_prediction.csv"), comp.cross.to_csv(index=False))
    matched = matched_table(comp)
    if not matched.empty:
        atomic_write_text(out.with_name("matched_rate.csv"), comp.matched.to_csv(index=False))
    if vb:
        atomic_write_text(out.with_name("vs_base.csv"), pd.DataFrame(vb + pooled).to_csv(index=False))
    if ab:
        atomic_write_text(out.with_name("ablation.csv"), pd.DataFrame(ab).to_csv(index=False))
    atomic_write_text(out, html)
    table = wide_table(comp)
    with pd.option_context("display.max_colwidth", 60, "display.width", 200):
        print(table.to_string(index=False) if not table.empty else "(no task metrics)")
        if not svo.empty:
            print("\nself vs other (own AUROC; own minus each other model's on the items both answered):")
            print(svo.to_string(index=False))
        if not cross.empty:
            print("\ncross-prediction (behaviour held fixed: own AUROC minus the predictor's, paired by item):")
            print(cross.to_string(index=False))
        if not matched.empty:
            print("\nDelegate Game lift at matched delegation rates (each model delegates the reference's share by P(T)):")
            print(matched.to_string(index=False))
        if vb:
            print("\nadapted − base model, task A, paired by concept:")
            print("\n".join(vs_base_lines(vb)))
        if ab:
            print("\ndirection removed − the model itself (task A paired by concept, refusal by request):")
            print("\n".join(ablation_lines(ab)))
        if pooled or not_pooled:
            print("\nacross trainings of one recipe (the training is the unit):")
            print("\n".join([*replication_lines(pooled), *not_pooled]))
    also = f", {out.with_name('self_vs_other.csv')}" if not svo.empty else ""
    also += f", {out.with_name('cross_prediction.csv')}" if not cross.empty else ""
    also += f", {out.with_name('matched_rate.csv')}" if not matched.empty else ""
    also += f", {out.with_name('vs_base.csv')}" if vb else ""
    also += f", {out.with_name('ablation.csv')}" if ab else ""
    print(f"wrote {out} and {csv_path}{also} ({len(comp.models)} models)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
