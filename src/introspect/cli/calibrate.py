"""Check the report's intervals and tests on synthetic task-A records with a known truth.

    introspect calibrate                      # the issue-17 grid, 400 runs each
    introspect calibrate --runs 100 --concepts 6 10 --jobs 2
    introspect calibrate --labels --jobs 2      # every verdict label's false rate (docs/statistics.md)

Every run writes records in the public layout, loads them with ``report.load_results`` and
summarises them with ``report.summarize`` (``introspect.report.calibration``). Printed per setting:
coverage of the truth and mean width of every headline interval (beside the width of the
percentile cluster bootstrap the report used before), and for the null scenario the share of
runs in which any headline test is called significant after Holm and the verdict says
"detected". With ``--labels``: per known truth (``introspect.report.labels``) and setting (framing ×
cell count, concepts), how often each verdict label is printed, the share of runs printing a label
whose claim is false for that truth, and the true label's power. A speed or accuracy target is not
a test: ``tests/test_calibration.py`` and ``tests/test_labels.py`` assert.
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from introspect.cli.common import Parser, command
from introspect.records.atomic import atomic_write_text
from introspect.report.calibration import GRID, NULL_GRID, SHARED_NULL, run_setting, table


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog=command("calibrate"), description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, help="runs per setting (default 400; with --labels 40, 20 or 10 by cells)")
    ap.add_argument("--concepts", type=int, nargs="*", help="concept counts (default 5 10 20 50)")
    ap.add_argument("--trials", type=int, nargs="*", help="trials per concept (default 1 3)")
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--jobs", type=int, default=1, help="processes (one per core)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--labels", action="store_true", help="the verdict labels' false rates instead of coverage")
    ap.add_argument("--cells", type=int, nargs="*", help="with --labels: framing × cell counts (default 1 9 30)")
    args = ap.parse_args(argv)
    if (args.runs is not None and args.runs < 1) or args.samples < 1 or args.jobs < 1:
        print("error: --runs, --samples and --jobs must be at least 1", file=sys.stderr)
        return 2
    if args.labels:
        return _labels(args)
    if args.cells:
        print("error: --cells goes with --labels", file=sys.stderr)
        return 2
    args.runs = args.runs or 400
    grid = [(g, t) for g in args.concepts for t in (args.trials or (1, 3))] if args.concepts else [
        (g, t) for g, t in GRID if not args.trials or t in args.trials]
    null = [(g, 1) for g in args.concepts] if args.concepts else NULL_GRID
    if any(g < 2 for g, _ in grid + null) or any(t < 1 for _, t in grid):
        print("error: --concepts must be at least 2 and --trials at least 1", file=sys.stderr)
        return 2
    jobs = [("positive", g, t, args.samples, args.runs, args.seed) for g, t in grid]
    jobs += [("null", g, t, args.samples, args.runs, args.seed + 1) for g, t in null]
    if not args.concepts:  # the shared-effect null at its own shape (24 concepts × 3 trials × 2 samples)
        jobs.append((*SHARED_NULL, args.runs, args.seed + 2))
    results = []
    with ProcessPoolExecutor(args.jobs) as ex:
        for r in ex.map(run_setting, jobs):  # in order, each printed when done
            results.append(r)
            print(table([r]), flush=True)
    if args.json:
        atomic_write_text(args.json, json.dumps(results, indent=1, default=float))
    return 0


LABEL_GRID = ((1, 10), (1, 64), (9, 24), (30, 24))  # (cells, concepts) of the docs' table
LABEL_RUNS = {1: 40, 9: 20, 30: 10}  # runs per truth by cell count: a 30-cell run of 24 concepts takes ~10 s


def _labels(args: argparse.Namespace) -> int:
    from introspect.report.labels import TRUTHS, markdown, run_job

    if any(c < 1 or (c > 1 and c % 3) for c in args.cells or ()) or any(g < 2 for g in args.concepts or ()):
        print("error: --cells must be 1 or multiples of 3 (three framings), --concepts at least 2", file=sys.stderr)
        return 2
    grid = ([(c, g) for c in args.cells or (1, 9, 30) for g in args.concepts or (10, 24)]
            if args.cells or args.concepts else LABEL_GRID)
    jobs = [(t, g, c, args.runs or LABEL_RUNS.get(c, 10), args.seed) for c, g in grid for t in TRUTHS]
    with ProcessPoolExecutor(args.jobs) as ex:
        results = list(ex.map(run_job, jobs))
    print(markdown(results))
    if args.json:
        atomic_write_text(args.json, json.dumps(results, indent=1, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
