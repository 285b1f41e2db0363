"""Reports: load JSONL results into pandas, metrics with 95% CIs, plotly figures, HTML dashboard."""

from introspect.report.dashboard import render_dashboard, write_dashboard
from introspect.report.load import load_headers, load_results
from introspect.report.metrics import register_summary, summarize, write_summary

__all__ = [
    "load_headers",
    "load_results",
    "register_summary",
    "render_dashboard",
    "summarize",
    "write_dashboard",
    "write_summary",
]
