"""One self-contained HTML dashboard for a results directory.

Besides the figures: one verdict banner per model and task (``report.verdict_view``: the label,
then for task A a table of its dimensions with their gates, why, the Holm family and the power
line: a null next to an injection that moved nothing is no evidence about introspection), and a task-A table with every detection number
beside the steering check of its cell. Everything is inline (plotly.js once, in the head; no CDN), so the file can be mailed or opened
offline. A tiny script loaded before anything else records JavaScript errors into the
``data-js-errors`` attribute of <html> (and a hidden <pre id="js-errors">), and after load the
number of rendered plots goes into ``data-plots-rendered``, so a headless browser's dumped DOM
shows whether the page worked.
"""

from __future__ import annotations

import datetime as _dt
import html
from pathlib import Path
from typing import Any

import pandas as pd
from plotly.offline import get_plotlyjs

from introspect.records.atomic import atomic_write_text
from introspect.report.figures import Panel, build_figures
from introspect.report.load import load_headers, load_results
from introspect.report.metrics import summarize
from introspect.report.verdict_view import verdicts
from introspect.tasks.injection.common import steer_mask
from introspect.tasks.injection.metrics_steer import RULE

_ERROR_HOOK = """
(function () {
  var errs = [];
  var root = document.documentElement;
  root.setAttribute('data-js-errors', '');
  function rec(msg) {
    errs.push(String(msg));
    var s = errs.join(' | ');
    root.setAttribute('data-js-errors', s);
    var el = document.getElementById('js-errors');
    if (el) { el.textContent = s; }
  }
  window.addEventListener('error', function (e) {
    if (e.target && e.target !== window && (e.target.src || e.target.href)) {
      rec('failed to load ' + (e.target.src || e.target.href));
    } else {
      rec((e.message || 'error') + ' at ' + (e.filename || '?') + ':' + (e.lineno || '?'));
    }
  }, true);
  window.addEventListener('unhandledrejection', function (e) {
    rec('unhandled rejection: ' + ((e.reason && e.reason.message) || e.reason));
  });
  var ce = console.error;
  console.error = function () {
    rec('console.error: ' + Array.prototype.join.call(arguments, ' '));
    return ce.apply(console, arguments);
  };
})();
"""

_COUNT_PLOTS = """
window.addEventListener('load', function () {
  var n = 0, shortest = null;
  document.querySelectorAll('.js-plotly-plot').forEach(function (d) {
    if (d._fullLayout) n++;
    (d._fullData || []).forEach(function (t, j) {  // drawn traces; their points as computed
      var isLine = t.type === 'scatter' && String(t.mode || '').indexOf('lines') >= 0
        && (!t.fill || t.fill === 'none') && t.visible === true;
      if (!isLine) { return; }
      var k = 0;
      ((d.calcdata || [])[j] || []).forEach(function (pt) { if (isFinite(pt.x) && isFinite(pt.y)) { k++; } });
      if (shortest === null || k < shortest) { shortest = k; }
    });
  });
  var root = document.documentElement;
  root.setAttribute('data-plots-rendered', String(n));
  root.setAttribute('data-shortest-line', shortest === null ? 'none' : String(shortest));
});
"""

_CSS = """
:root { --fg:#1f2328; --muted:#59636e; --line:#d8dee4; --bg:#f6f8fa; --accent:#2f6feb; }
* { box-sizing: border-box; }
body { margin:0; font:15px/1.5 Inter, "Segoe UI", Helvetica, Arial, sans-serif; color:var(--fg);
       background:var(--bg); }
main { max-width:1320px; margin:0 auto; padding:28px 28px 60px; }
header h1 { margin:0 0 4px; font-size:28px; }
.meta { color:var(--muted); margin:0 0 10px; }
.note { background:#eef4ff; border-left:4px solid var(--accent); padding:8px 14px; margin:12px 0;
        border-radius:4px; }
nav ul { margin:6px 0 0; padding-left:20px; columns:2; }
nav a { color:var(--accent); text-decoration:none; }
section.card { background:#fff; border:1px solid var(--line); border-radius:8px;
               padding:18px 22px; margin:22px 0; }
section.card h2 { margin:0 0 4px; font-size:19px; }
.caption { color:var(--muted); margin:0 0 10px; max-width:980px; }
table { border-collapse:collapse; font-size:13px; width:100%; }
th, td { border-bottom:1px solid var(--line); padding:5px 8px; text-align:left; vertical-align:top; }
th { background:var(--bg); position:sticky; top:0; }
td.mono, .mono { font-family:ui-monospace, SFMono-Regular, Menlo, monospace; font-size:12px; }
.scroll { max-height:560px; overflow:auto; border:1px solid var(--line); border-radius:6px; }
details summary { cursor:pointer; color:var(--accent); margin:4px 0 10px; }
.empty { color:var(--muted); font-style:italic; }
.verdict { padding:8px 14px; margin:8px 0; border-radius:4px; border-left:4px solid; }
.verdict.none { background:#fff1f0; border-color:#cf222e; }
.verdict.detected { background:#effaf2; border-color:#1a7f37; }
.verdict.inconclusive { background:#fff8e5; border-color:#bf8700; }
.verdict table.glance { width:auto; margin:6px 0 4px; background:rgba(255,255,255,0.6); }
.verdict table.glance th { position:static; background:transparent; }
.verdict td.gate.pass { color:#1a7f37; font-weight:600; }
.verdict td.gate.fail { color:#cf222e; font-weight:600; }
.verdict td.gate.unjudged { color:var(--muted); }
.verdict p.line { margin:2px 0; font-size:13px; }
"""


def _esc(v: Any) -> str:
    if v is None or (isinstance(v, float) and pd.isna(v)):
        return ""
    return html.escape(str(v))


def page_head(title: str, plotly: bool) -> str:
    """A self-contained page's opening up to ``<body>``: meta, title, the JS error hook, the
    style sheet, and plotly.js inline (no CDN: the page opens offline) when it has figures."""
    js = f"<script>{get_plotlyjs()}</script>" if plotly else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_esc(title)}</title>
<script>{_ERROR_HOOK}</script>
<style>{_CSS}</style>
{js}
</head>"""


def _table(rows: list[list[Any]], head: list[str], mono: set[int] = frozenset()) -> str:
    th = "".join(f"<th>{_esc(h)}</th>" for h in head)
    body = "".join(
        "<tr>" + "".join(f'<td{" class=mono" if i in mono else ""}>{_esc(c)}</td>'
                         for i, c in enumerate(r)) + "</tr>"
        for r in rows)
    return f'<div class="scroll"><table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table></div>'


def _versions(v: Any) -> str:
    if isinstance(v, dict):
        return ", ".join(f"{k} {val}" for k, val in v.items() if val and val != "absent")
    return "" if v is None else str(v)


def _notes(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return "; ".join(str(x) for x in v)
    return "" if v is None else str(v)


def runs_table(headers: pd.DataFrame) -> str:
    """HTML table of runs: model, task, fingerprint, versions, commit, seed, run id, notes."""
    if headers.empty:
        return '<p class="empty">No run headers found.</p>'
    rows = [[r.get("model_id"), r.get("task"), r.get("run_id"), r.get("ts"),
             r.get("fingerprint"), _versions(r.get("versions")), r.get("git_commit"),
             r.get("seed"), _notes(r.get("notes"))] for r in headers.to_dict("records")]
    head = ["model", "task", "run id", "started", "fingerprint", "versions", "git commit", "seed",
            "notes"]
    return _table(rows, head, mono={2, 4, 6})


def _num(v: float) -> str:
    return "" if pd.isna(v) else f"{v:.3g}"


def _ci(lo: float, hi: float) -> str:
    return "" if pd.isna(lo) or pd.isna(hi) else f"[{_num(lo)}, {_num(hi)}]"


def summary_table(summary: pd.DataFrame) -> str:
    """HTML table of the tidy summary: estimate, 95% CI, its method, n, concepts, p, note."""
    if summary.empty:
        return '<p class="empty">No trial records found.</p>'
    rows = [[r.model_id, r.task, r.variant, "" if pd.isna(r.layer_idx) else int(r.layer_idx),
             _num(r.alpha), r.alpha_units, r.metric, r.condition, _num(r.value),
             _ci(r.lo, r.hi), getattr(r, "ci", ""), r.n,
             "" if pd.isna(getattr(r, "n_clusters", None)) else int(r.n_clusters),
             _num(getattr(r, "p", float("nan"))), _num(getattr(r, "p_holm", float("nan"))),
             getattr(r, "note", "")]
            for r in summary.itertuples()]
    head = ["model", "task", "variant", "layer", "α", "α units", "metric", "condition",
            "estimate", "95% CI", "CI method", "n", "concepts", "sign-flip p", "Holm p", "note"]
    return (f"<details><summary>Show all {len(rows)} metrics (also in summary.csv / "
            f"summary.json)</summary>{_table(rows, head, mono={6})}</details>")


_CELL_TABLE = (("tpr", "TPR"), ("fpr", "FPR (matched)"), ("net", "Net"),
               ("steer_lp_rise_vs_random", "lp rise vs random (nats)"), ("steer_share", "share steering"),
               ("introspection_score", "introspection score"), ("identification", "identified"),
               ("identification_vs_random", "identified − by chance"),
               ("answers_identical", "answers = control"), ("coherent:injected", "coherent"))


def detection_table(summary: pd.DataFrame) -> str:
    """Task A per (model, variant, layer, α): every detection number beside its steering check."""
    a = summary[(summary["task"] == "A") & summary["layer_idx"].notna()
                & ~summary["variant"].isin(("bias", "all"))
                & ~steer_mask(summary["variant"])] if not summary.empty else summary
    if a.empty:
        return ""
    keys = ["model_id", "variant", "layer_idx", "alpha", "alpha_units"]
    idx = a.set_index([*keys, "metric"])
    rows = []
    for cell in a[keys].drop_duplicates().sort_values(keys).itertuples(index=False):
        line = [cell.model_id, cell.variant, int(cell.layer_idx), _num(cell.alpha), cell.alpha_units]
        for metric, _ in _CELL_TABLE:
            try:
                r = idx.loc[(*cell, metric)]
            except KeyError:
                line.append("")
                continue
            r = r.iloc[0] if isinstance(r, pd.DataFrame) else r
            txt = f"{_num(r['value'])} {_ci(r['lo'], r['hi'])}".strip()
            if metric in ("net", "identification_vs_random", "introspection_score") and not pd.isna(r.get("p_holm")):
                txt += f" (Holm p {_num(r['p_holm'])})"
            line.append(txt)
        rows.append(line)
    head = ["model", "variant", "layer", "α", "units", *[h for _, h in _CELL_TABLE]]
    return (f'<section class="card" id="cells"><h2>Task A · every cell with its steering check</h2>'
            f'<p class="caption">Each (layer, α) cell: detection against matched controls, with '
            f"the steering check of the same cell beside it ({_esc(RULE)}). A cell whose vector "
            f"does not steer cannot show introspection; its null is uninformative.</p>"
            f"{_table(rows, head)}</section>")


def _figure_html(panel: Panel, i: int) -> str:
    height = panel.fig.layout.height or 450
    div = panel.fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"plot-{i}",
                            default_height=f"{height}px",
                            config={"displaylogo": False, "responsive": True})
    return (f'<section class="card" id="fig-{i}" data-kind="{_esc(panel.kind)}">'
            f"<h2>{_esc(panel.title)}</h2>"
            f'<p class="caption">{_esc(panel.caption)}</p>{div}</section>')


def render_dashboard(df: pd.DataFrame, headers: pd.DataFrame, title: str = "",
                     source: str = "", summary: pd.DataFrame | None = None) -> str:
    """The dashboard HTML for loaded trials and headers (``summary``: ``summarize(df)`` if the
    caller already has it)."""
    summary = summarize(df) if summary is None else summary
    panels = build_figures(summary)
    models = sorted(df["model_id"].dropna().unique()) if not df.empty else []
    tasks = sorted(df["task"].dropna().unique()) if not df.empty else []
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    title = title or "Introspection results"
    toc = "".join(f'<li><a href="#fig-{i}">{_esc(p.title)}</a></li>'
                  for i, p in enumerate(panels))
    figs = "".join(_figure_html(p, i) for i, p in enumerate(panels)) or (
        '<section class="card"><p class="empty">No figures: no trial records with metrics.</p>'
        "</section>")
    cells = detection_table(summary)
    if cells:
        toc = '<li><a href="#cells">Task A · every cell with its steering check</a></li>' + toc
    return f"""{page_head(title, bool(panels))}
<body data-n-figures="{len(panels)}"><main>
<header><h1>{_esc(title)}</h1>
<p class="meta">{len(df)} trials · models: {_esc(", ".join(models)) or "none"} ·
tasks: {_esc(", ".join(tasks)) or "none"} · source: <span class="mono">{_esc(source)}</span> ·
generated {now}</p>
<p class="note">Every number carries a 95% confidence interval whose coverage is checked by
simulation, and the summary table names each one's method. The concept is the unit: each concept
has its own matched controls (the same prompt and sample stream, no injection), every concept
weighs the same, rates use a design-effect Wilson interval with Student's t over concepts, paired
0/1 differences (Net) the hull of Newcombe's interval built from it and Student's t over the
concepts' differences, and continuous shifts Student's t.
With fewer than 5 concepts no interval is printed. p-values are exact sign-flip tests over the
concepts (the smallest reachable p is 2<sup>1−concepts</sup>), Holm-adjusted over every framing,
cell and headline metric a verdict picks from. A best cell is shown only when it was picked on half
of the concepts and measured on the other half. Hover over a plot for the interval, n and the
number of concepts behind each point.</p>
{verdicts(summary)}
<nav><strong>Figures</strong><ul>{toc}<li><a href="#runs">Runs</a></li>
<li><a href="#summary">Summary table</a></li></ul></nav>
</header>
{cells}
{figs}
<section class="card" id="runs"><h2>Runs</h2>
<p class="caption">One row per run header: what model, weights fingerprint, library versions,
code commit and seed produced the trials.</p>{runs_table(headers)}</section>
<section class="card" id="summary"><h2>Summary table</h2>
<p class="caption">Every metric with its estimate, 95% CI and n.</p>{summary_table(summary)}
</section>
<pre id="js-errors" hidden></pre>
</main>
<script>{_COUNT_PLOTS}</script>
</body></html>
"""


def write_dashboard(results_dir: Path | str, out: Path | str | None = None,
                    summary: pd.DataFrame | None = None) -> Path:
    """Write ``dashboard.html`` (or ``out``) for every JSONL under ``results_dir``, atomically.

    Raises FileNotFoundError when ``results_dir`` does not exist.
    """
    src = Path(results_dir)
    df, headers = load_results(src), load_headers(src)
    target = Path(out) if out is not None else (src if src.is_dir() else src.parent) / (
        "dashboard.html")
    atomic_write_text(target, render_dashboard(df, headers, source=str(src), summary=summary))
    return target
