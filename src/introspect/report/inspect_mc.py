"""Summaries of the records the Inspect self-knowledge tasks (``integrations.inspect``) write.

The report looks summarisers up by task name (``report.metrics``), runs where the ``inspect``
extra is not installed, and sits below the integrations (it may not import them), so these
live here, beside it, and the integrations import them:
``summarize_mc`` (the ability and ``delegate-baseline`` records of ``selfknowledge.py``: the
ability summariser plus the rotation rows, refusing mixed decision sources),
``summarize_ability_any`` (the report's ``ability``: ``summarize_mc`` for the records that say
how their decision was read, the toolkit's ``summarize_ability`` for the others) and
``summarize_game`` (the Delegate Game's, refusing mixed sources). No import of inspect_ai.
"""

from __future__ import annotations

import pandas as pd

from introspect.tasks.selfknowledge.ability import summarize_ability
from introspect.tasks.selfknowledge.game_metrics import summarize_delegate
from introspect.tasks.selfknowledge.rows import b, frame, g, groups, modal_letter, num, prop, value


class MixedSourcesError(ValueError):
    """Logprob and text decisions in one summary group."""


def check_sources(df: pd.DataFrame) -> None:
    """Raise when a (model, task, variant) group holds both logprob and text decisions."""
    if df.empty or "grade.decision_source" not in df:
        return
    for keys, s in groups(df):
        found = sorted({str(v) for v in g(s, "decision_source").dropna()})
        if len(found) > 1:
            raise MixedSourcesError(f"{keys}: mixes {' and '.join(found)} decisions in one summary; give each "
                                    "source its own variant (sk_records does) and summarise them apart")


def rotation_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Beside the letter-free decision: the rotation-0 letter reading (``accuracy_raw``,
    ``modal_letter_rate_raw``), PriDe's reading, rotation consistency and the letter prior."""
    rows: list[dict] = []
    for keys, s in groups(df):
        r = s[num(s, "rotations") > 1]
        if r.empty:
            continue
        n = len(r)
        rows.append(value(keys, "rotated_items", float(n), len(s)))
        rows += prop(keys, "accuracy_raw", b(r, "raw_correct").sum(), n)
        rows += modal_letter(keys, "modal_letter_rate_raw", g(r, "raw_choice", ""))
        rows += prop(keys, "accuracy_pride", b(r, "pride_correct").sum(), n)
        rows += modal_letter(keys, "modal_letter_rate_pride", g(r, "pride_choice", ""))
        rows += prop(keys, "rotation_consistency", b(r, "rotation_consistent").sum(), n)
        priors = [p for p in g(r, "letter_prior") if isinstance(p, dict)]
        for k in sorted({k for p in priors for k in p}):
            rows.append(value(keys, f"letter_prior[{k}]", sum(p.get(k, 0.0) for p in priors) / len(priors), n))
    return frame(rows)


def summarize_mc(df: pd.DataFrame) -> pd.DataFrame:
    """The ability summariser (accuracy with its modal-letter rate, text accuracy, parse and
    low-mass rates, mean P(correct)) plus ``rotation_rows``; refuses mixed decision sources."""
    check_sources(df)
    parts = [x for x in (summarize_ability(df), rotation_rows(df)) if not x.empty]
    return pd.concat(parts, ignore_index=True) if parts else frame([])


def from_inspect(df: pd.DataFrame) -> pd.Series:
    """Which rows are Inspect self-knowledge records (their grade says ``decision_source``)."""
    if "grade.decision_source" not in df:
        return pd.Series(False, index=df.index)
    return df["grade.decision_source"].isin(("logprobs", "text"))


def summarize_ability_any(df: pd.DataFrame) -> pd.DataFrame:
    """``ability`` records of either origin: the Inspect task's (``summarize_mc``, with its
    rotation rows and the refusal to pool decision sources) and the toolkit's
    (``summarize_ability``), each summarised by its own."""
    mask = from_inspect(df)
    parts = [x for x in (summarize_mc(df[mask].reset_index(drop=True)) if mask.any() else None,
                         summarize_ability(df[~mask].reset_index(drop=True)) if (~mask).any() else None)
             if x is not None and not x.empty]
    return pd.concat(parts, ignore_index=True) if parts else frame([])


def summarize_game(df: pd.DataFrame) -> pd.DataFrame:
    """``summarize_delegate`` (the toolkit's game summary), refusing a group of mixed sources."""
    check_sources(df)
    return summarize_delegate(df)
