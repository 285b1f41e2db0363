"""The comparison page: ``report.compare``'s Comparison as one self-contained HTML file.

Why apart from the tables: the tables are pure pandas that tests and the command line read; the
page adds plotly and HTML, and grows with every panel a reader asks for.
"""

from __future__ import annotations

import datetime as _dt

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from introspect.report.compare import (
    HEADLINES,
    Comparison,
    cross_table,
    fmt_number,
    matched_table,
    self_other_table,
    wide_table,
)


def headline_figure(comp: Comparison) -> go.Figure | None:
    """One forest plot per (task, variant): each model's headline estimate with its 95% CI."""
    from plotly.colors import qualitative

    h = comp.headline[comp.headline["role"].str.startswith("headline")]
    h = h.drop_duplicates(["task", "variant", "model_id"])  # the held-out figure where there is one
    if h.empty:
        return None
    keys = list(dict.fromkeys(zip(h["task"], h["variant"])))
    keys.sort(key=lambda k: (list(HEADLINES).index(k[0]) if k[0] in HEADLINES else 99, k))
    titles = [f"{t} · {v} · " + " / ".join(dict.fromkeys(h[(h["task"] == t) & (h["variant"] == v)]["metric"]))
              for t, v in keys]
    fig = make_subplots(rows=len(keys), cols=1, vertical_spacing=min(0.12, 0.5 / len(keys)),
                        subplot_titles=titles)
    colors = {m: qualitative.Plotly[i % 10] for i, m in enumerate(comp.models)}
    for i, (t, v) in enumerate(keys, 1):
        sub = h[(h["task"] == t) & (h["variant"] == v)]
        for r in sub.itertuples():
            lo, hi = (r.value if pd.isna(x) else x for x in (r.lo, r.hi))
            fig.add_trace(go.Scatter(
                x=[r.value], y=[r.model_id], mode="markers", marker=dict(size=10, color=colors.get(r.model_id)),
                error_x=dict(type="data", symmetric=False, array=[hi - r.value], arrayminus=[r.value - lo]),
                name=r.model_id, legendgroup=r.model_id, showlegend=i == 1,
                hovertemplate=f"{r.model_id}<br>{r.metric}: %{{x:.3g}}<br>95% CI [{fmt_number(r.lo)}, "
                              f"{fmt_number(r.hi)}]<br>n={r.n}<extra></extra>"), row=i, col=1)
        fig.update_yaxes(categoryorder="array", categoryarray=list(comp.models)[::-1], row=i, col=1)
    fig.update_layout(template="plotly_white", height=150 + 170 * len(keys),
                      margin=dict(l=200, r=30, t=60, b=40), legend=dict(orientation="h", y=1.02 + 0.3 / len(keys)))
    return fig


def _fmt_params(v: object) -> str:
    return "" if v is None or pd.isna(v) else f"{int(v):,}"


def render_compare(comp: Comparison, title: str = "", source: str = "") -> str:
    """Self-contained HTML (plotly.js inline, no CDN) of a comparison."""
    from introspect.report.dashboard import _COUNT_PLOTS, _esc, _table, page_head
    from introspect.tasks.selfknowledge.crosspredict import MIN_CLASS
    from introspect.tasks.selfknowledge.matched_rate import MIN_KEPT

    title = title or "Introspection across models"
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    card_rows = [[r.model, r.family, _fmt_params(r.parameters),
                  "" if pd.isna(r.layers) else int(r.layers), "" if pd.isna(r.d_model) else int(r.d_model),
                  r.quantization, r.dtype, r.fingerprint] for r in comp.cards.itertuples()]
    cards = _table(card_rows, ["model", "family", "parameters", "layers", "d_model",
                               "quantization at rest", "dtype", "fingerprint"], mono={7})
    wide = wide_table(comp)
    table = (_table(wide.values.tolist(), list(wide.columns)) if not wide.empty
             else '<p class="empty">No task metrics in these records.</p>')
    fig = headline_figure(comp)
    fig_html = fig.to_html(full_html=False, include_plotlyjs=False, div_id="plot-headline",
                           config={"displaylogo": False, "responsive": True}) if fig else ""
    notes = "".join(f'<p class="note">{_esc(n)}</p>' for n in comp.notes)
    sk = "".join(
        f'<section class="card" id="{key}"><h2>{_esc(head)}</h2>'
        + f.to_html(full_html=False, include_plotlyjs=False, div_id=f"plot-{key}",
                    config={"displaylogo": False, "responsive": True})
        + "".join(f'<p class="note">{_esc(n)}</p>' for n in fnotes) + "</section>"
        for key, head, f, fnotes in comp.figures)
    def section(key: str, head: str, caption: str, rows: list, cols: list) -> str:
        """A table card, or nothing when the table is empty."""
        return "" if not rows else (f'<section class="card" id="{key}"><h2>{head}</h2><p class="caption">{caption}</p>'
                                    + _table(rows, cols) + "</section>")

    svo, cp, mr = self_other_table(comp), cross_table(comp), matched_table(comp)
    svo_html = section("self-other", "Self vs other", "The predictor held fixed (a labelled reading: "
                       "cross-prediction, below, is the test): a model's predictions scored against its own "
                       "behaviour (own AUROC), and own minus its AUROC on each other model's behaviour, on the "
                       "items both answered (jackknife-over-items t interval), never averaged over models. "
                       "Against a model of the same base the behaviours nearly coincide and the difference is "
                       f"about 0 by construction. Not judged below {MIN_CLASS} items of either class in either "
                       "behaviour.", svo.values.tolist(), list(svo.columns))
    cp_html = section("cross-prediction", "Cross-prediction", "The behaviour held fixed: does a model predict "
                      "its own behaviour better than another model's predictions do? Its AUROC on its own "
                      "behaviour minus the other model's AUROC on that same behaviour, paired by item "
                      f"(jackknife-over-items t interval). Not judged below {MIN_CLASS} items of either class.",
                      cp.values.tolist(), list(cp.columns))
    mr_html = section("matched-rate", "Lift at a matched delegation rate", "Every model of a game variant "
                      "delegates the same share of its items, those of highest P(T), as the reference model "
                      "did: its baseline accuracy on the items it keeps minus on all (Jeffreys interval). A "
                      "control that delegates nearly everything is read here at the adapter's rate. Not judged "
                      f"below {MIN_KEPT} kept items.", mr.values.tolist(), list(mr.columns))
    from introspect.report.paper002 import reported_rows

    p002 = reported_rows(comp.headline["task"].astype(str).unique()) if "task" in comp.headline else []
    p002_html = section("paper-002", "What paper 002 reports", "The Self-Execution Benchmark paper's text "
                        "accuracies (format failures wrong, chance 0.50) on far larger closed models: a "
                        "yardstick for the text_* rows above, not the same conditions.", p002,
                        ["test", "model (002)", "accuracy (002)", "where", "read against"])
    n_figs = (1 if fig else 0) + len(comp.figures)
    steer = (comp.headline["role"] == "steering").any()
    steer_note = ("Steering-check rows (metrics named steer*) are read in the same cell."
                  if steer else "These records carry no steering check (no steer* metric): a "
                  "null cannot be told apart from an injection that did nothing.")
    return f"""{page_head(title, bool(n_figs))}
<body data-n-figures="{n_figs}" data-n-models="{len(comp.models)}"><main>
<header><h1>{_esc(title)}</h1>
<p class="meta">models: {_esc(", ".join(comp.models)) or "none"} · source:
<span class="mono">{_esc(source)}</span> · generated {now}</p>
<p class="note">Each cell: estimate [95% CI] n=trials (Wilson for rates, bootstrap for
differences and means). For injection tasks, an “@held_out” headline is the split-half estimate
(cell picked on half of the concepts, reported on the other half), and the rows below it are read
in that cell; without one, the (layer, α) cell with the largest headline estimate is shown and
“best of k” marks that post-hoc pick among k cells, whose nominal interval is optimistic.
{_esc(steer_note)}</p>
</header>
<section class="card" id="cards"><h2>Models</h2>
<p class="caption">What each model is: weights' quantization at rest matters, since a 4-bit model
dequantized to float carries the rounding error into every activation.</p>{cards}</section>
<section class="card" id="headline"><h2>Headline figures</h2>
<p class="caption">Every task's headline figure per model, side by side; rows below a headline
are read in the same cell.</p>{table}{notes}</section>
{f'<section class="card" id="fig-0"><h2>Headline estimates with 95% CIs</h2>{fig_html}</section>' if fig else ""}
{sk}
{svo_html}
{cp_html}
{mr_html}
{p002_html}
<pre id="js-errors" hidden></pre>
</main>
<script>{_COUNT_PLOTS}</script>
</body></html>
"""
