"""Check the report's intervals and tests on synthetic task-A records with a known truth.

    python -m experiments.calibrate                      # the issue-17 grid, 400 runs each
    python -m experiments.calibrate --runs 100 --concepts 6 10 --jobs 2

Every run writes records in the public layout, loads them with ``report.load_results`` and
summarises them with ``report.summarize`` (``introspect.calibration``). Printed per setting:
coverage of the truth and mean width of every headline interval (beside the width of the
percentile cluster bootstrap the report used before), and for the null scenario the share of
runs in which any headline test is called significant after Holm and the verdict says
"detected". A speed or accuracy target is not a test: ``tests/test_calibration.py`` asserts.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from introspect.calibration import METRICS, Scenario, coverage

GRID = [(g, t) for g in (5, 10, 20, 50) for t in (1, 3)]
NULL_GRID = [(g, 1) for g in (6, 10, 20)]


def _one(job: tuple[str, int, int, int, int, int]) -> dict:
    name, g, t, k, runs, seed = job
    s = Scenario() if name == "positive" else Scenario().null()
    return coverage(s, g, t, k, runs, seed=seed, compare_bootstrap=name == "positive")


def _mc(p: float, n: int) -> float:
    return math.sqrt(max(p * (1 - p), 1e-12) / max(n, 1))


def table(results: list[dict]) -> str:
    """The printed table: one line per (scenario, concepts, trials)."""
    lines = []
    for r in results:
        head = f"{r['scenario']:8s} G={r['concepts']:<3d} T={r['trials']} K={r['samples']} runs={r['runs']}"
        if r["scenario"] == "positive":
            cells = []
            for m in METRICS:
                c = r[m]
                boot = c.get("percentile_bootstrap_width")
                cells.append(f"{m} {c['coverage']:.3f} (w {c['mean_width']:.3f}"
                             + (f" vs {boot:.3f}" if boot else "") + ")")
            lines.append(head + " | " + "; ".join(cells))
        else:
            fp, n = r["any_headline_significant"], r["runs"]
            lines.append(f"{head} | any headline significant after Holm {fp:.3f} ± {_mc(fp, n):.3f} "
                         f"(MC SE); verdict detected {r['verdict_detected']:.3f}; coverage net "
                         f"{r['net']['coverage']:.3f}, score {r['introspection_score']['coverage']:.3f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=400)
    ap.add_argument("--concepts", type=int, nargs="*", help="concept counts (default 5 10 20 50)")
    ap.add_argument("--trials", type=int, nargs="*", help="trials per concept (default 1 3)")
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--jobs", type=int, default=1, help="processes (one per core)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args(argv)
    if args.runs < 1 or args.samples < 1 or args.jobs < 1:
        print("error: --runs, --samples and --jobs must be at least 1", file=sys.stderr)
        return 2
    grid = [(g, t) for g in (args.concepts or (5, 10, 20, 50)) for t in (args.trials or (1, 3))]
    null = [(g, 1) for g in (args.concepts or (6, 10, 20))]
    if any(g < 2 for g, _ in grid + null) or any(t < 1 for _, t in grid):
        print("error: --concepts must be at least 2 and --trials at least 1", file=sys.stderr)
        return 2
    jobs = [("positive", g, t, args.samples, args.runs, args.seed) for g, t in grid]
    jobs += [("null", g, t, args.samples, args.runs, args.seed + 1) for g, t in null]
    results = []
    with ProcessPoolExecutor(args.jobs) as ex:
        for r in ex.map(_one, jobs):  # in order, each printed when done
            results.append(r)
            print(table([r]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
