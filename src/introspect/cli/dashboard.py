"""Build the HTML dashboard (and summary.csv / summary.json) for a results directory.

    introspect dashboard results/ [--out results/dashboard.html]

A missing directory, or one without any ``*.jsonl`` file, is a one-line error and exit 2, and
nothing is written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from introspect.cli.common import Parser, command
from introspect.report import load_results, summarize, write_dashboard, write_summary
from introspect.report.load import jsonl_files


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog=command("dashboard"), description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", type=Path, help="results directory (searched recursively for *.jsonl)")
    ap.add_argument("--out", type=Path, default=None, help="HTML file (default DIR/dashboard.html)")
    args = ap.parse_args(argv)
    if not args.dir.is_dir():
        print(f"error: results directory not found: {args.dir}", file=sys.stderr)
        return 2
    if not jsonl_files(args.dir):
        print(f"error: no *.jsonl files under {args.dir}", file=sys.stderr)
        return 2
    table = summarize(load_results(args.dir))  # once, for both files
    csv_path, _ = write_summary(args.dir, table)
    out = write_dashboard(args.dir, args.out, summary=table)
    print(f"wrote {out} and {csv_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
