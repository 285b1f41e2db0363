"""What a run or sweep prints and writes when it ends: the headline rows, each task's verdict,
summary CSV/JSON, the dashboard, and the side-by-side comparison when the folder holds several
models. Shared by ``run``/``sweep`` (``settings``) and the SLURM merge (``launch``)."""

from __future__ import annotations

from pathlib import Path

MAX_ROWS = 60  # headline rows printed at the end of a run (every metric goes to summary.csv)


def report(out: Path, summaries: list) -> None:
    """Print the metrics table and output paths; write summary CSV/JSON and the dashboard."""
    try:
        from introspect.report import load_results, summarize, write_dashboard, write_summary
    except ImportError:  # report module unavailable: counts above are the summary
        summarize = None
    if summarize is not None and out.is_dir() and any(out.rglob("*.jsonl")):
        table = summarize(load_results(out))
        if not table.empty:
            import pandas as pd

            from introspect.report.compare import headline_table

            # The headline figures (best cell per task and variant, the rest of that cell beside
            # it), then each task's verdict with its power line: what a reader needs first.
            head = headline_table(table)
            cols = ["model_id", "task", "variant", "metric", "role", "value", "lo", "hi", "n",
                    "layer_idx", "alpha"]
            shown = head[cols].head(MAX_ROWS) if not head.empty else table.head(MAX_ROWS)
            with pd.option_context("display.width", 200, "display.float_format", "{:.3f}".format):
                print("\n" + shown.to_string(index=False))
            for r in table[table["metric"] == "verdict"].itertuples():
                print(f"\nverdict · {r.model_id} · task {r.task}: {r.note or r.condition}")
            print(f"\n{len(table)} metric rows in summary.csv (headline rows above)")
        csv_path, json_path = write_summary(out, table)  # summarising takes seconds: once, shared
        dash = write_dashboard(out, summary=table)
        print(f"\nsummary: {csv_path} {json_path}\ndashboard: {dash}")
        if "model_id" in table and table["model_id"].nunique() > 1:  # several models: side by side too
            from introspect.cli import compare

            compare.main([str(out)])
    for s in summaries:
        for task, path in s.files.items():
            print(f"results {task}: {path}")
